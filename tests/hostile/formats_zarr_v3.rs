//! Hostile Zarr v3 content in ZarrDaf directory sources (DataAxesFormats 0.3): bad root
//! `zarr.json` documents and version markers (the mount is refused with one line), and bad
//! array documents, huge shapes, oversized chunks and unknown codecs (the property is skipped).
//! Paths named are those both views have whatever their versions (`.data`, array directories).

use std::path::{Path, PathBuf};

use super::formats::{mounted, put};
use super::{fixture_copy, Case, Expect};

fn zarr3(dir: &Path) -> PathBuf {
    fixture_copy(dir, "zarr_v3.daf.zarr")
}

/// A Zarr v3 ZarrDaf case: the fixture changed by `edit`.
fn case(name: &str, expect: Expect, edit: impl Fn(&Path) + 'static) -> Case {
    Case::new(format!("zarr v3: {name}"), expect, move |dir| {
        let root = zarr3(dir);
        edit(&root);
        root.display().to_string()
    })
}

/// The fixture's `vectors/cell/score/zarr.json` (float32, shape [3]).
const SCORE: &str = r#"{"chunk_grid":{"configuration":{"chunk_shape":[3]},"name":"regular"},"chunk_key_encoding":{"configuration":{"separator":"/"},"name":"default"},"codecs":[{"configuration":{"endian":"little"},"name":"bytes"}],"data_type":"float32","fill_value":0.0,"node_type":"array","shape":[3],"zarr_format":3}"#;

const SCORE_GONE: [&str; 2] = [
    "zarr_v3.daf/vectors/cell/score.data",
    "zarr_v3.daf.zarr/vectors/cell/score",
];

const ROOT: &str = r#"{"zarr_format":3,"node_type":"group","attributes":{"daf":[1,0]}}"#;

pub fn cases() -> Vec<Case> {
    let mut cases = vec![case("fixture as it is", Expect::clean(), |_| {})];
    for (name, root, refusal) in [
        (
            "root not JSON",
            "{\"zarr_format\":3,".to_string(),
            "invalid JSON",
        ),
        ("root empty", String::new(), "invalid JSON"),
        (
            "root deep",
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
            "invalid JSON",
        ),
        (
            "marker 1.3",
            ROOT.replace("[1,0]", "[1,3]"),
            "unsupported ZarrDaf version 1.3",
        ),
        (
            "marker [1]",
            ROOT.replace("[1,0]", "[1]"),
            "malformed daf version marker",
        ),
        (
            "marker huge",
            ROOT.replace("[1,0]", "[1,1e400]"),
            "invalid JSON",
        ),
        (
            "no marker",
            ROOT.replace(",\"attributes\":{\"daf\":[1,0]}", ""),
            "without attributes.daf",
        ),
    ] {
        cases.push(case(name, Expect::Refused(refusal), move |r| {
            put(r, "zarr.json", &root)
        }));
    }
    let skipped = |log: &'static str| {
        mounted(
            &[],
            &["skipping vectors/cell/score", log],
            &SCORE_GONE,
            &["zarr_v3.daf/vectors/cell/type.txt"],
        )
    };
    let forty = format!("[{}]", vec!["1"; 40].join(","));
    for (name, doc, log) in [
        (
            "array not JSON",
            "{\"chunk_grid\":".to_string(),
            "invalid JSON",
        ),
        (
            "array deep",
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
            "invalid JSON",
        ),
        (
            "shape 2^40",
            SCORE.replace("\"shape\":[3]", "\"shape\":[1099511627776]"),
            "expected",
        ),
        (
            "40 dimensions",
            SCORE
                .replace("\"shape\":[3]", &format!("\"shape\":{forty}"))
                .replace("\"chunk_shape\":[3]", &format!("\"chunk_shape\":{forty}")),
            "more than 32 dimensions",
        ),
        (
            "chunk_shape 0",
            SCORE.replace("\"chunk_shape\":[3]", "\"chunk_shape\":[0]"),
            "chunks do not match shape",
        ),
        (
            "unknown codec",
            SCORE.replace(
                "\"name\":\"bytes\"}",
                "\"name\":\"bytes\"},{\"name\":\"lzma\"}",
            ),
            "unsupported codec \"lzma\"",
        ),
        (
            "data type",
            SCORE.replace("float32", "complex64"),
            "unsupported data_type",
        ),
    ] {
        cases.push(case(name, skipped(log), move |r| {
            put(r, "vectors/cell/score/zarr.json", &doc)
        }));
    }
    cases.push(case(
        "chunk bigger than declared",
        skipped("chunk has 16 bytes"),
        |r| put(r, "vectors/cell/score/c/0", [0u8; 16]),
    ));
    cases.push(case(
        "axis of 2^40 entries in chunks of 1",
        mounted(
            &[],
            &["skipping axes/cell", "limit"],
            &["zarr_v3.daf/axes/cell.txt", "zarr_v3.daf/vectors/cell"],
            &["zarr_v3.daf/axes/gene.txt"],
        ),
        |r| {
            let doc = r#"{"chunk_grid":{"configuration":{"chunk_shape":[1]},"name":"regular"},"chunk_key_encoding":{"configuration":{"separator":"/"},"name":"default"},"codecs":[{"configuration":{},"name":"vlen-utf8"},{"name":"zstd"}],"data_type":"string","fill_value":"","node_type":"array","shape":[1099511627776],"zarr_format":3}"#;
            put(r, "axes/cell/zarr.json", doc);
        },
    ));
    cases
}
