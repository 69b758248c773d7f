//! Tests of the FilesDaf reader: fixtures, versions, inconsistent properties, packed payloads.

use super::*;
use crate::stores::dir::open_directory;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures");

#[test]
fn reads_the_seed_fixture() {
    let root = Path::new(FIXTURES).join("vectors/files_v1_0.daf");
    let ds = read_files_daf(&open_directory(&root).unwrap(), &root).unwrap();
    assert_eq!(
        ds.scalars.keys().collect::<Vec<_>>(),
        vec!["ratio", "title"]
    );
    assert_eq!(ds.axes["cell"].len(), 3);
    assert_eq!(ds.axes["gene"].len(), 2);
    let cell = &ds.vectors["cell"];
    assert_eq!(
        cell.keys().collect::<Vec<_>>(),
        vec!["counts", "is_marker", "score", "type"]
    );
    assert!(matches!(
        cell["is_marker"].payload,
        Payload::Sparse(ref s) if s.nzval.is_none() && s.eltype == NumType::Bool
    ));
    assert!(matches!(
        ds.matrices[&("cell".into(), "gene".into())]["umis"].payload,
        Payload::Sparse(_)
    ));
}

#[test]
fn reads_the_1_1_fixture_and_the_julia_fixture() {
    let root = Path::new(FIXTURES).join("vectors/files_v1_1.daf");
    let ds = read_files_daf(&open_directory(&root).unwrap(), &root).unwrap();
    assert_eq!(ds.vectors["cell"].len(), 4);
    let julia = Path::new(FIXTURES).join("julia-filesdaf");
    let ds = read_files_daf(&open_directory(&julia).unwrap(), &julia).unwrap();
    assert!(!ds.vectors["cell"].is_empty());
    assert_eq!(ds.matrices[&("gene".into(), "cell".into())].len(), 3);
}

#[test]
fn versions_and_missing_markers_are_errors() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("daf.json"), "{\"version\":[2,0]}\n").unwrap();
    let err = read_files_daf(&open_directory(tmp.path()).unwrap(), tmp.path()).unwrap_err();
    assert!(
        err.to_string().contains("unsupported FilesDaf version 2.0"),
        "{err}"
    );
    std::fs::remove_file(tmp.path().join("daf.json")).unwrap();
    let err = read_files_daf(&open_directory(tmp.path()).unwrap(), tmp.path()).unwrap_err();
    assert!(err.to_string().starts_with("not a daf data set"), "{err}");
}

#[test]
fn inconsistent_properties_are_skipped_and_long_data_is_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    for d in ["scalars", "axes", "vectors/a", "matrices/a/a"] {
        std::fs::create_dir_all(p.join(d)).unwrap();
    }
    std::fs::write(p.join("daf.json"), "{\"version\":[1,0]}\n").unwrap();
    std::fs::write(p.join("axes/a.txt"), "x\ny\n").unwrap();
    std::fs::write(
        p.join("vectors/a/long.json"),
        "{\"format\":\"dense\",\"eltype\":\"UInt8\"}\n",
    )
    .unwrap();
    std::fs::write(p.join("vectors/a/long.data"), [1u8, 2, 3, 4]).unwrap();
    std::fs::write(
        p.join("vectors/a/short.json"),
        "{\"format\":\"dense\",\"eltype\":\"Int64\"}\n",
    )
    .unwrap();
    std::fs::write(p.join("vectors/a/short.data"), [1u8, 2, 3]).unwrap();
    std::fs::write(
        p.join("vectors/a/nonzval.json"),
        "{\"format\":\"sparse\",\"eltype\":\"Int8\",\"indtype\":\"UInt8\"}\n",
    )
    .unwrap();
    std::fs::write(p.join("vectors/a/nonzval.nzind"), [1u8]).unwrap();
    let ds = read_files_daf(&open_directory(p).unwrap(), p).unwrap();
    let vectors = &ds.vectors["a"];
    assert_eq!(vectors.keys().collect::<Vec<_>>(), vec!["long"]);
    let Payload::Dense { data, .. } = &vectors["long"].payload else {
        panic!()
    };
    assert_eq!(data.bytes().unwrap().as_slice(), &[1, 2]);
}

#[test]
fn packed_payloads_are_recorded_and_left_undecoded_at_mount() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/packed/files_packed.daf");
    let ds = read_files_daf(&open_directory(&root).unwrap(), &root).unwrap();
    let packed = |path: &str| {
        let p = ds
            .properties()
            .find(|p| p.path == path)
            .unwrap_or_else(|| panic!("{path} was not read"));
        p.property.packed.keys().cloned().collect::<Vec<_>>()
    };
    assert_eq!(packed("vectors/cell/score"), [""]);
    assert_eq!(packed("vectors/cell/label"), [""]);
    assert_eq!(packed("vectors/gene/counts"), ["nzind", "nzval"]);
    assert_eq!(packed("vectors/gene/note"), ["nzval"]);
    assert_eq!(packed("matrices/gene/batch/expr"), [""]);
    assert_eq!(packed("matrices/gene/batch/umis"), ["nzval", "rowval"]);
    assert!(packed("vectors/cell/flag").is_empty());
    let cell = &ds.vectors["cell"];
    let Payload::Dense { data, .. } = &cell["score"].payload else {
        panic!("score is not dense numbers")
    };
    assert_eq!(data.known_len(), Some(1200 * 8));
    assert!(!data.is_materialized());
    let Payload::DenseStrings(label) = &cell["label"].payload else {
        panic!("label is not dense strings")
    };
    assert_eq!(label.count(), 1200);
    let matrix = &ds.matrices[&("gene".to_string(), "batch".to_string())]["expr"];
    assert_eq!(matrix.packed[""].shape, vec![3, 4500]);
    // The packed descriptors are not served (the view shows flat ones); flat ones are.
    let docs = &ds.files_source.documents;
    assert!(!docs.contains_key("vectors/cell/score.json"));
    assert!(!docs.contains_key("vectors/gene/counts.json"));
    assert!(docs.contains_key("vectors/cell/flag.json"));
}

#[test]
fn a_packed_payload_that_is_missing_or_unreadable_skips_only_its_property() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path();
    for d in ["scalars", "axes", "vectors/a"] {
        std::fs::create_dir_all(p.join(d)).unwrap();
    }
    std::fs::write(p.join("daf.json"), "{\"version\":[1,1]}\n").unwrap();
    std::fs::write(p.join("axes/a.txt"), "x\ny\n").unwrap();
    let packed = "{\"format\":\"dense\",\"eltype\":\"Float64\",\"packed_format\":\"indexed+zipped\",\"chunk_shape\":[2],\"compression\":\"zstd\",\"compression_level\":5,\"index_location\":\"start\"}\n";
    std::fs::write(p.join("vectors/a/gone.json"), packed).unwrap();
    std::fs::write(
        p.join("vectors/a/codec.json"),
        packed.replace("zstd", "lzma"),
    )
    .unwrap();
    std::fs::write(p.join("vectors/a/codec.zip"), [0u8; 40]).unwrap();
    std::fs::write(
        p.join("vectors/a/ok.json"),
        "{\"format\":\"dense\",\"eltype\":\"UInt8\"}\n",
    )
    .unwrap();
    std::fs::write(p.join("vectors/a/ok.data"), [1u8, 2]).unwrap();
    let ds = read_files_daf(&open_directory(p).unwrap(), p).unwrap();
    assert_eq!(ds.vectors["a"].keys().collect::<Vec<_>>(), vec!["ok"]);
}
