//! Hostile Zarr content in ZarrDaf directory sources: bad `.zarray` documents (JSON, types,
//! negative/float/huge/overflowing shapes and chunks, dtypes, codecs), compressor bombs in
//! foreign chunks, forged vlen-utf8 counts and lengths, stray chunk keys, hostile node names.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::formats::{fifo, link, mounted, put};
use super::{fixture_copy, Case, Expect};

fn zarr(dir: &Path) -> PathBuf {
    fixture_copy(dir, "zarr_v2.daf.zarr")
}

/// A ZarrDaf case: the fixture changed by `edit`.
fn zcase(name: &str, expect: Expect, edit: impl Fn(&Path) + 'static) -> Case {
    Case::new(format!("zarr: {name}"), expect, move |dir| {
        let root = zarr(dir);
        edit(&root);
        root.display().to_string()
    })
}

/// The `.zarray` of `vectors/cell/score` (`<f4`, shape [3]) with `field` set to `value`.
fn score_zarray(field: &str, value: &str) -> String {
    let mut doc: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        r#"{"dtype":"<f4","filters":null,"shape":[3],"order":"C","zarr_format":2,"chunks":[3],"fill_value":null,"compressor":null}"#,
    )
    .unwrap();
    doc.remove(field);
    let mut text = serde_json::to_string(&doc).unwrap();
    text.pop();
    format!("{text},\"{field}\":{value}}}")
}

const SCORE_GONE: [&str; 2] = [
    "zarr_v2.daf/vectors/cell/score.data",
    "zarr_v2.daf.zarr/vectors/cell/score",
];

/// `.zarray` fields that make `score` skipped at mount.
fn bad_fields() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        ("shape", "[-1]", "bad \"shape\""),
        ("shape", "[3.5]", "bad \"shape\""),
        ("shape", "[1e30]", "bad \"shape\""),
        ("shape", "[\"3\"]", "bad \"shape\""),
        ("shape", "3", "bad \"shape\""),
        ("shape", "[1099511627776]", "expected"),
        (
            "shape",
            "[4294967296,4294967296]",
            "chunks do not match shape",
        ),
        ("chunks", "[0]", "chunks do not match shape"),
        ("chunks", "[-3]", "bad \"chunks\""),
        ("chunks", "[3,3]", "chunks do not match shape"),
        ("dtype", "\"<U5\"", "unsupported dtype"),
        ("dtype", "7", "dtype is not a simple type"),
        ("dtype", "\"|O\"", "only vlen-utf8"),
        ("zarr_format", "3", "zarr_format is not 2"),
        ("compressor", "{\"id\":\"lzma\"}", "unsupported compressor"),
        ("compressor", "{}", "compressor without an id"),
        ("filters", "[{\"id\":\"delta\"}]", "unsupported filters"),
        ("filters", "7", "bad \"filters\""),
        ("order", "\"X\"", "unknown order"),
        ("fill_value", "\"foo\"", "unsupported fill_value"),
        ("fill_value", "[1]", "unsupported fill_value"),
        (
            "dimension_separator",
            "\"-\"",
            "unknown dimension_separator",
        ),
    ]
}

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(data).unwrap();
    z.finish().unwrap()
}

/// `score` stored compressed by `id`, its only chunk `chunk`: EIO in both views at first read,
/// with a log line naming it and one containing `why`.
fn bomb(name: &'static str, id: &'static str, why: &'static str, chunk: Vec<u8>) -> Case {
    zcase(
        &format!("{name} bomb"),
        mounted(
            &[
                "zarr_v2.daf/vectors/cell/score.data",
                "zarr_v2.daf.zarr/vectors/cell/score/0",
            ],
            &["decoding vectors/cell/score", why],
            &[],
            &["zarr_v2.daf/vectors/cell/type.txt"],
        ),
        move |r| {
            put(
                r,
                "vectors/cell/score/.zarray",
                score_zarray("compressor", &format!("{{\"id\":\"{id}\"}}")),
            );
            put(r, "vectors/cell/score/0", &chunk);
        },
    )
}

fn vlen(count: u32, items: &[(u32, &[u8])]) -> Vec<u8> {
    let mut out = count.to_le_bytes().to_vec();
    for (len, bytes) in items {
        out.extend(len.to_le_bytes());
        out.extend(*bytes);
    }
    out
}

pub fn cases() -> Vec<Case> {
    let mut cases = vec![zcase("fixture as it is", Expect::clean(), |_| {})];
    for (field, value, log) in bad_fields() {
        let doc = score_zarray(field, value);
        cases.push(zcase(
            &format!("{field} {value}"),
            mounted(
                &[],
                &["skipping vectors/cell/score", log],
                &SCORE_GONE,
                &["zarr_v2.daf/vectors/cell/type.txt"],
            ),
            move |r| put(r, "vectors/cell/score/.zarray", &doc),
        ));
    }
    let bad_json: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"{\"dtype\":".to_vec()),
        ("empty", Vec::new()),
        ("not UTF-8", b"{\"dtype\":\"<f4\xff\"}".to_vec()),
        (
            "deep",
            format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)).into_bytes(),
        ),
        (
            "40 dimensions",
            score_zarray("shape", &format!("[{}]", vec!["1"; 40].join(",")))
                .replace(
                    "\"chunks\":[3]",
                    &format!("\"chunks\":[{}]", vec!["1"; 40].join(",")),
                )
                .into_bytes(),
        ),
    ];
    for (name, doc) in bad_json {
        cases.push(zcase(
            &format!(".zarray {name}"),
            mounted(&[], &["skipping vectors/cell/score"], &SCORE_GONE, &[]),
            move |r| put(r, "vectors/cell/score/.zarray", &doc),
        ));
    }
    cases.push(zcase(
        ".zarray is a FIFO",
        mounted(&[], &["FIFO"], &SCORE_GONE, &[]),
        |r| fifo(r, "vectors/cell/score/.zarray"),
    ));
    let zeros = vec![0u8; 8 << 20];
    let more = "decompresses to more than 12 bytes";
    cases.push(bomb("zlib", "zlib", more, deflate(&zeros)));
    // Concatenated members/frames decode as one stream: 128 × 8 MiB = 1 GiB of zeros.
    cases.push(bomb("gzip 1 GiB", "gzip", more, {
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        g.write_all(&zeros).unwrap();
        g.finish().unwrap().repeat(128)
    }));
    cases.push(bomb(
        "zstd 1 GiB",
        "zstd",
        more,
        zstd::encode_all(&zeros[..], 19).unwrap().repeat(128),
    ));
    cases.push(bomb("bz2", "bz2", more, {
        let mut b = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
        b.write_all(&zeros).unwrap();
        b.finish().unwrap()
    }));
    cases.push(bomb(
        "lz4 forged size",
        "lz4",
        "decompresses to more than",
        {
            let mut lz = u32::MAX.to_le_bytes().to_vec();
            lz.extend(lz4_flex::block::compress(&zeros[..1 << 20]));
            lz
        },
    ));
    cases.push(bomb(
        "blosc forged size",
        "blosc",
        "decompresses to more than",
        {
            let mut b = vec![2u8, 1, 1, 4];
            b.extend(u32::MAX.to_le_bytes());
            b.extend(4096u32.to_le_bytes());
            b.extend(32u32.to_le_bytes());
            b.extend([0u8; 16]);
            b
        },
    ));
    cases.push(bomb(
        "garbage zlib",
        "zlib",
        "vectors/cell/score",
        b"not zlib at all".to_vec(),
    ));
    cases.extend(shape_cases());
    cases.extend(string_cases());
    cases.extend(node_cases());
    cases.extend(zip_cases());
    cases
}

/// Huge arrays and grids that must neither be enumerated nor allocated.
fn shape_cases() -> Vec<Case> {
    let huge_axis = r#"{"dtype":"|O","filters":[{"id":"vlen-utf8"}],"shape":[1099511627776],"order":"C","zarr_format":2,"chunks":[1],"fill_value":null,"compressor":{"id":"zlib"}}"#;
    vec![
        zcase(
            "axis of 2^40 entries in chunks of 1",
            mounted(
                &[],
                &["skipping axes/cell", "limit"],
                &["zarr_v2.daf/axes/cell.txt", "zarr_v2.daf/vectors/cell"],
                &["zarr_v2.daf/axes/gene.txt"],
            ),
            move |r| put(r, "axes/cell/.zarray", huge_axis),
        ),
        zcase(
            "vector of 2^40 elements in chunks of 1",
            mounted(&[], &["skipping vectors/cell/score"], &SCORE_GONE, &[]),
            |r| {
                put(
                    r,
                    "vectors/cell/score/.zarray",
                    score_zarray("shape", "[1099511627776]")
                        .replace("\"chunks\":[3]", "\"chunks\":[1]"),
                )
            },
        ),
        zcase(
            "chunk of 2^40 elements for 3",
            // Found when the array is opened (its reads are by chunk): skipped at mount.
            mounted(
                &[],
                &["skipping vectors/cell/score", "limit"],
                &[
                    "zarr_v2.daf/vectors/cell/score.data",
                    "zarr_v2.daf.zarr/vectors/cell/score/0",
                ],
                &[],
            ),
            |r| {
                put(
                    r,
                    "vectors/cell/score/.zarray",
                    score_zarray("chunks", "[1099511627776]"),
                )
            },
        ),
        zcase(
            "daf marker of 2^40 elements",
            Expect::Refused("decoding daf"),
            |r| {
                put(
                    r,
                    "daf/.zarray",
                    r#"{"dtype":"|u1","filters":null,"shape":[1099511627776],"order":"C","zarr_format":2,"chunks":[1],"fill_value":null,"compressor":null}"#,
                )
            },
        ),
        zcase(
            "daf marker .zarray not JSON",
            Expect::Refused("unreadable 'daf' version array: invalid JSON"),
            |r| put(r, "daf/.zarray", "{\"zarr_format\":"),
        ),
        zcase(
            "daf marker chunk missing (fill: version 0.0)",
            Expect::Refused("unsupported ZarrDaf version 0.0"),
            |r| std::fs::remove_file(r.join("daf/0")).unwrap(),
        ),
        zcase(
            "daf marker of a future version",
            Expect::Refused("unsupported ZarrDaf version 2.0"),
            |r| put(r, "daf/0", [2u8, 0]),
        ),
        zcase(
            "scalar of two elements",
            mounted(
                &[],
                &["skipping scalars/ratio", "one element"],
                &["zarr_v2.daf/scalars/ratio.json"],
                &[],
            ),
            |r| {
                put(
                    r,
                    "scalars/ratio/.zarray",
                    r#"{"dtype":"<f8","filters":null,"shape":[2],"order":"C","zarr_format":2,"chunks":[2],"fill_value":null,"compressor":null}"#,
                );
                put(r, "scalars/ratio/0", [0u8; 16]);
            },
        ),
        zcase(
            "chunk shorter than the shape",
            mounted(
                &[],
                &["skipping vectors/cell/score", "elements expected"],
                &SCORE_GONE,
                &[],
            ),
            |r| put(r, "vectors/cell/score/0", [0u8; 5]),
        ),
        zcase(
            "chunks of one with stray keys",
            mounted(&[], &[], &[], &["zarr_v2.daf/vectors/cell/score.data"]),
            |r| {
                let data = std::fs::read(r.join("vectors/cell/score/0")).unwrap();
                put(
                    r,
                    "vectors/cell/score/.zarray",
                    score_zarray("chunks", "[1]"),
                );
                for (i, name) in ["0", "1", "2"].iter().enumerate() {
                    put(
                        r,
                        &format!("vectors/cell/score/{name}"),
                        &data[i * 4..i * 4 + 4],
                    );
                }
                for stray in ["3", "01", "1.0", "x", "-1", "99999999999999999999999"] {
                    put(r, &format!("vectors/cell/score/{stray}"), [9u8; 4]);
                }
            },
        ),
        zcase(
            "missing chunks are fill",
            mounted(&[], &[], &[], &["zarr_v2.daf/vectors/cell/score.data"]),
            |r| {
                put(
                    r,
                    "vectors/cell/score/.zarray",
                    score_zarray("chunks", "[1]"),
                );
                std::fs::remove_file(r.join("vectors/cell/score/0")).unwrap();
            },
        ),
        zcase(
            "chunk linking outside is missing",
            mounted(
                &[],
                &["points outside the source"],
                &[],
                &["zarr_v2.daf/vectors/cell/score.data"],
            ),
            |r| {
                std::fs::rename(r.join("vectors/cell/score/0"), r.join("../chunk")).unwrap();
                link(r, "vectors/cell/score/0", r.join("../chunk"));
            },
        ),
    ]
}

/// vlen-utf8 buffers with forged counts and lengths.
fn string_cases() -> Vec<Case> {
    let forged = |name: &'static str, chunk: Vec<u8>| {
        zcase(
            &format!("vlen {name}"),
            mounted(
                &["zarr_v2.daf/vectors/cell/type.txt"],
                &["vectors/cell/type"],
                &[],
                &["zarr_v2.daf.zarr/vectors/cell/type/0"],
            ),
            move |r| put(r, "vectors/cell/type/0", &chunk),
        )
    };
    let axis = |name: &'static str, chunk: Vec<u8>| {
        zcase(
            &format!("axis vlen {name}"),
            mounted(
                &[],
                &["skipping axes/gene"],
                &[
                    "zarr_v2.daf/axes/gene.txt",
                    "zarr_v2.daf/matrices/cell/gene",
                ],
                &["zarr_v2.daf/axes/cell.txt"],
            ),
            move |r| put(r, "axes/gene/0", &chunk),
        )
    };
    let skipped = |name: &'static str, chunk: Vec<u8>| {
        zcase(
            &format!("vlen {name}"),
            mounted(
                &[],
                &["skipping vectors/cell/type", "vlen-utf8 chunk"],
                &[
                    "zarr_v2.daf/vectors/cell/type.txt",
                    "zarr_v2.daf.zarr/vectors/cell/type",
                ],
                &["zarr_v2.daf/axes/cell.txt"],
            ),
            move |r| put(r, "vectors/cell/type/0", &chunk),
        )
    };
    vec![
        skipped(
            "count 2^32-1",
            vlen(u32::MAX, &[(1, b"T"), (1, b"B"), (1, b"T")]),
        ),
        skipped(
            "count too small",
            vlen(2, &[(1, b"T"), (1, b"B"), (1, b"T")]),
        ),
        skipped("count without room", vlen(3, &[(0, b"")])),
        skipped("header cut", vec![3, 0]),
        forged(
            "length past the end",
            vlen(3, &[(1, b"T"), (1, b"B"), (u32::MAX, b"T")]),
        ),
        forged(
            "trailing bytes",
            [vlen(3, &[(1, b"T"), (1, b"B"), (1, b"T")]), vec![0]].concat(),
        ),
        forged(
            "a newline in a value",
            vlen(3, &[(1, b"T"), (3, b"B\nB"), (1, b"T")]),
        ),
        axis("count 2^32-1", vlen(u32::MAX, &[(2, b"g1"), (2, b"g2")])),
        axis(
            "length past the end",
            vlen(2, &[(2, b"g1"), (u32::MAX, b"g2")]),
        ),
        axis("empty", Vec::new()),
        zcase(
            "scalar string with a forged length",
            mounted(
                &[],
                &["skipping scalars/title"],
                &["zarr_v2.daf/scalars/title.json"],
                &[],
            ),
            |r| put(r, "scalars/title/0", vlen(1, &[(1 << 30, b"hello")])),
        ),
        zcase(
            "strings chunked and compressed, forged count",
            mounted(
                &[],
                &["skipping vectors/cell/type", "decoding vectors/cell/type"],
                &[
                    "zarr_v2.daf/vectors/cell/type.txt",
                    "zarr_v2.daf.zarr/vectors/cell/type",
                ],
                &[],
            ),
            |r| {
                put(
                    r,
                    "vectors/cell/type/.zarray",
                    r#"{"dtype":"|O","filters":[{"id":"vlen-utf8"}],"shape":[3],"order":"C","zarr_format":2,"chunks":[2],"fill_value":null,"compressor":{"id":"zlib"}}"#,
                );
                put(
                    r,
                    "vectors/cell/type/0",
                    deflate(&vlen(u32::MAX, &[(1, b"a")])),
                );
                put(
                    r,
                    "vectors/cell/type/1",
                    deflate(&vlen(2, &[(1, b"c"), (0, b"")])),
                );
            },
        ),
    ]
}

/// Hostile node names and garbage in documents daf-mount does not read.
fn node_cases() -> Vec<Case> {
    vec![
        zcase(
            "node name with a tab",
            mounted(
                &[],
                &["control character"],
                &["zarr_v2.daf/vectors/cell/a\tb.data"],
                &[],
            ),
            |r| {
                let from = r.join("vectors/cell/score");
                std::fs::create_dir(r.join("vectors/cell/a\tb")).unwrap();
                for f in [".zarray", "0"] {
                    std::fs::copy(from.join(f), r.join("vectors/cell/a\tb").join(f)).unwrap();
                }
            },
        ),
        zcase("garbage .zattrs and .zmetadata", Expect::clean(), |r| {
            put(r, ".zmetadata", b"\xff garbage");
            put(r, "vectors/cell/score/.zattrs", "[[[");
        }),
        zcase(
            "axis group linking to a directory outside",
            mounted(
                &[],
                &["points outside the source"],
                &["zarr_v2.daf/axes/etc.txt"],
                &[],
            ),
            |r| link(r, "axes/etc", "/etc"),
        ),
    ]
}

/// Zips the directory `src` into `out` (stored entries, sorted names, `extra` entries added).
fn zip_dir(src: &Path, out: &Path, extra: &[(&str, &[u8])]) {
    let script = r#"
import os, sys, zipfile
src, out = sys.argv[1], sys.argv[2]
extra = sys.argv[3:]
with zipfile.ZipFile(out, "w") as z:
    for root, dirs, files in sorted(os.walk(src)):
        for f in sorted(files):
            p = os.path.join(root, f)
            z.write(p, os.path.relpath(p, src))
    for i in range(0, len(extra), 2):
        z.writestr(extra[i], open(extra[i + 1], "rb").read())
"#;
    let mut cmd = std::process::Command::new("python3");
    cmd.arg("-c").arg(script).arg(src).arg(out);
    for (i, (name, bytes)) in extra.iter().enumerate() {
        let file = out.with_extension(format!("extra{i}"));
        std::fs::write(&file, bytes).unwrap();
        cmd.arg(name).arg(file);
    }
    assert!(cmd.status().unwrap().success(), "zipping {}", src.display());
}

/// Formats inside ZIP archives: hostile entry names and a huge `.zarray`.
pub fn zip_cases() -> Vec<Case> {
    let scalar: &[u8] = b"{\"type\":\"Int64\",\"value\":1}\n";
    vec![
        Case::new(
            "zipdaf: hostile entry names",
            mounted(
                &[],
                &["a name that is '.' or '..'", "control character"],
                &["files_v1_0.daf/scalars/a\u{7}b.json"],
                &["files_v1_0.daf/scalars/ratio.json"],
            ),
            move |dir| {
                let src = fixture_copy(dir, "files_v1_0.daf");
                let out = dir.join("files_v1_0.daf.zip");
                zip_dir(
                    &src,
                    &out,
                    &[
                        ("scalars/...json", scalar),
                        ("scalars/a\u{7}b.json", scalar),
                        ("vectors/cell/../../scalars/x.json", scalar),
                        ("vectors/../../../etc/passwd.json", scalar),
                    ],
                );
                out.display().to_string()
            },
        ),
        Case::new(
            "zarr zip: .. keys and a huge axis",
            mounted(
                &[],
                &["skipping axes/cell"],
                &["zarr_v2.daf/axes/cell.txt", "zarr_v2.daf.zarr/axes/cell"],
                &["zarr_v2.daf/axes/gene.txt", "zarr_v2.daf.zarr/.zmetadata"],
            ),
            |dir| {
                let src = fixture_copy(dir, "zarr_v2.daf.zarr");
                put(
                    &src,
                    "axes/cell/.zarray",
                    r#"{"dtype":"|O","filters":[{"id":"vlen-utf8"}],"shape":[1099511627776],"order":"C","zarr_format":2,"chunks":[1],"fill_value":null,"compressor":null}"#,
                );
                let out = dir.join("zarr_v2.daf.zarr.zip");
                zip_dir(
                    &src,
                    &out,
                    &[
                        ("matrices/cell/../../.zgroup", b"{\"zarr_format\":2}"),
                        ("vectors/cell/../x/.zarray", b"{}"),
                    ],
                );
                out.display().to_string()
            },
        ),
    ]
}
