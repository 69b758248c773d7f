//! Tests of the Zarr v3 reader: the §11.5 vectors (directory and ZIP, zero-copy), elided
//! chunks, foreign zarr-python 3 arrays (`tests/data/v3/make_foreign.py`), version markers and
//! unknown codecs.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::formats::model::{Dataset, Payload, Sparse, SparseIndex};
use crate::formats::strings::decode_vlen;
use crate::formats::zarr::read_zarr_daf;
use crate::formats::zarr::{read_axis_of, read_property_of, read_scalar_of, ZarrVersion};
use crate::stores::{dir::open_directory, zip::open_zip, Blob};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");
const FOREIGN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/v3/foreign.daf.zarr"
);

fn read_dir(path: &Path) -> Result<Dataset, FormatError> {
    read_zarr_daf(&open_directory(path).unwrap(), path)
}

/// A writable copy of the fixture directory `name`.
fn copy_fixture(from: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let to = tmp.path().join("copy.daf.zarr");
    let status = std::process::Command::new("cp")
        .args(["-r", from, to.to_str().unwrap()])
        .status()
        .unwrap();
    assert!(status.success());
    (tmp, to)
}

fn bytes(blob: &Arc<Blob>) -> Vec<u8> {
    blob.bytes().unwrap().as_slice().to_vec()
}

fn dense(ds: &Dataset, axis: &str, name: &str) -> Arc<Blob> {
    match &ds.vectors[axis][name].payload {
        Payload::Dense { data, .. } => data.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

fn matrix(ds: &Dataset, name: &str) -> Arc<Blob> {
    match &ds.matrices[&("cell".into(), "gene".into())][name].payload {
        Payload::Dense { data, .. } => data.clone(),
        other => panic!("{name}: {other:?}"),
    }
}

fn strings(s: &crate::formats::strings::Strings) -> Vec<String> {
    let data = bytes(&s.vlen());
    decode_vlen(&data, s.count())
        .unwrap()
        .into_iter()
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
        .collect()
}

#[test]
fn reads_the_v3_vectors_from_a_directory_and_a_zip_zero_copy() {
    let v2 = read_dir(Path::new(&format!("{VECTORS}/zarr_v2.daf.zarr"))).unwrap();
    for path in [
        format!("{VECTORS}/zarr_v3.daf.zarr"),
        format!("{VECTORS}/zarr_v3.daf.zarr.zip"),
    ] {
        let idx = if path.ends_with(".zip") {
            open_zip(Path::new(&path)).unwrap()
        } else {
            open_directory(Path::new(&path)).unwrap()
        };
        let ds = read_zarr_daf(&idx, Path::new(&path)).unwrap();
        assert_eq!(ds.zarr_format, Some(3), "{path}");
        assert_eq!(v2.zarr_format, Some(2));
        assert_eq!(
            ds.scalars["title"].scalar.files_json(),
            "{\"value\":\"hello\",\"type\":\"String\"}\n"
        );
        assert_eq!(ds.scalars["ratio"].scalar.value_json(), "2.5");
        assert_eq!(strings(&ds.axes["cell"].entries), ["c1", "c2", "c3"]);
        assert_eq!(ds.axes["gene"].len(), 2);
        // Zero-copy: the payload blob is the chunk's own blob.
        let score = dense(&ds, "cell", "score");
        assert!(Arc::ptr_eq(
            &score,
            &idx.get("vectors/cell/score/c/0").unwrap().blob
        ));
        assert!(Arc::ptr_eq(
            &matrix(&ds, "expr"),
            &idx.get("matrices/cell/gene/expr/c/0/0").unwrap().blob
        ));
        // The same logical content as the v2 vectors, byte for byte.
        assert_eq!(bytes(&score), bytes(&dense(&v2, "cell", "score")));
        assert_eq!(bytes(&matrix(&ds, "expr")), bytes(&matrix(&v2, "expr")));
        let Payload::DenseStrings(kind) = &ds.vectors["cell"]["type"].payload else {
            panic!()
        };
        assert_eq!(strings(kind), ["T", "B", "T"]);
        let Payload::Sparse(counts) = &ds.vectors["cell"]["counts"].payload else {
            panic!()
        };
        let Sparse {
            eltype,
            index: SparseIndex::Vector { nzind },
            nzval: Some(nzval),
            ..
        } = &**counts
        else {
            panic!()
        };
        assert_eq!(*eltype, NumType::Int64);
        assert_eq!(bytes(nzind), [1u64, 3].map(u64::to_le_bytes).concat());
        assert_eq!(bytes(nzval), [10u64, 30].map(u64::to_le_bytes).concat());
        assert!(matches!(
            ds.vectors["cell"]["is_marker"].payload,
            Payload::Sparse(ref s) if s.nzval.is_none()
        ));
        let Payload::Sparse(umis) = &ds.matrices[&("cell".into(), "gene".into())]["umis"].payload
        else {
            panic!()
        };
        let Sparse {
            eltype: NumType::UInt16,
            index: SparseIndex::Matrix { colptr, rowval },
            ..
        } = &**umis
        else {
            panic!()
        };
        assert_eq!(bytes(colptr), [1u64, 3, 4].map(u64::to_le_bytes).concat());
        assert_eq!(bytes(rowval), [1u64, 3, 2].map(u64::to_le_bytes).concat());
        assert!(ds.vectors["cell"]["counts"].packed.is_empty());
    }
}

#[test]
fn elided_chunks_are_fill_values() {
    let (_tmp, root) = copy_fixture(&format!("{VECTORS}/zarr_v3.daf.zarr"));
    for chunk in [
        "scalars/ratio/c/0",
        "scalars/title/c/0",
        "vectors/cell/score/c/0",
        "vectors/cell/type/c/0",
        "matrices/cell/gene/expr/c/0/0",
        "vectors/cell/counts/nzval/c/0",
    ] {
        std::fs::remove_file(root.join(chunk)).unwrap();
    }
    let ds = read_dir(&root).unwrap();
    assert_eq!(ds.scalars["ratio"].scalar.value_json(), "0.0");
    assert_eq!(ds.scalars["title"].scalar.value_json(), "\"\"");
    let score = dense(&ds, "cell", "score");
    assert!(score.is_fill());
    assert_eq!(score.known_len(), Some(12));
    assert_eq!(bytes(&score), [0; 12]);
    assert_eq!(bytes(&matrix(&ds, "expr")), [0; 48]);
    let Payload::DenseStrings(kind) = &ds.vectors["cell"]["type"].payload else {
        panic!()
    };
    assert_eq!(strings(kind), ["", "", ""]);
    let Payload::Sparse(counts) = &ds.vectors["cell"]["counts"].payload else {
        panic!()
    };
    let Some(nzval) = &counts.nzval else { panic!() };
    assert_eq!(bytes(nzval), [0; 16]);
}

fn ints<const N: usize, T>(data: &[u8], read: fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|c| read(c.try_into().unwrap()))
        .collect()
}

#[test]
fn foreign_zarr_python_arrays_are_decoded() {
    let ds = read_dir(Path::new(FOREIGN)).unwrap();
    let cells: Vec<String> = (0..7).map(|i| format!("c{i}")).collect();
    assert_eq!(strings(&ds.axes["cell"].entries), cells);
    assert_eq!(ds.axes["gene"].len(), 5);
    assert_eq!(ds.scalars["answer"].scalar.value_json(), "42");
    assert_eq!(ds.scalars["name"].scalar.value_json(), "\"foreign\"");
    let x = ints(&bytes(&dense(&ds, "cell", "x")), f64::from_le_bytes);
    assert_eq!(x, (0..7).map(|i| f64::from(i) * 0.5).collect::<Vec<_>>());
    let partial = ints(&bytes(&dense(&ds, "cell", "partial")), i16::from_le_bytes);
    assert_eq!(partial, [1, 2, 3, -1, -1, -1, -1]);
    let blosc = ints(&bytes(&dense(&ds, "cell", "blosc")), i32::from_le_bytes);
    assert_eq!(blosc, (0..7).map(|i| i * 3).collect::<Vec<_>>());
    assert_eq!(
        bytes(&dense(&ds, "cell", "v2keys")),
        (0..7).collect::<Vec<u8>>()
    );
    let Payload::DenseStrings(label) = &ds.vectors["cell"]["label"].payload else {
        panic!()
    };
    assert_eq!(strings(label), ["a", "bb", "", "d", "é", "f", "g"]);
    let Payload::Sparse(sp) = &ds.vectors["cell"]["sp"].payload else {
        panic!()
    };
    let Sparse {
        index: SparseIndex::Vector { nzind },
        nzval: Some(nzval),
        ..
    } = &**sp
    else {
        panic!()
    };
    assert_eq!(ints(&bytes(nzind), i64::from_le_bytes), [2, 5]);
    assert_eq!(ints(&bytes(nzval), f64::from_le_bytes), [1.5, 2.5]);
    // Transpose + big-endian + gzip + crc32c, and zstd with edge chunks: C order of [5, 7].
    let t = ints(&bytes(&matrix(&ds, "t")), i32::from_le_bytes);
    assert_eq!(t, (0..35).collect::<Vec<_>>());
    let f = ints(&bytes(&matrix(&ds, "f")), f64::from_le_bytes);
    assert_eq!(f, (0..35).map(|i| f64::from(i) / 4.0).collect::<Vec<_>>());
}

/// The fixture's root `zarr.json` replaced by `root`.
fn with_root(root_json: &str) -> (tempfile::TempDir, PathBuf) {
    let (tmp, root) = copy_fixture(&format!("{VECTORS}/zarr_v3.daf.zarr"));
    std::fs::write(root.join("zarr.json"), root_json).unwrap();
    (tmp, root)
}

#[test]
fn version_markers_are_checked_with_one_line_naming_the_path() {
    for (doc, message) in [
        (
            r#"{"zarr_format":3,"node_type":"group","attributes":{"daf":[1,3]}}"#,
            "unsupported ZarrDaf version 1.3 (daf-mount reads 1.0)",
        ),
        (
            r#"{"zarr_format":3,"node_type":"group","attributes":{"daf":[2,0]}}"#,
            "unsupported ZarrDaf version 2.0",
        ),
        (
            r#"{"zarr_format":3,"node_type":"group","attributes":{"daf":[1]}}"#,
            "malformed daf version marker",
        ),
        (
            r#"{"zarr_format":3,"node_type":"group","attributes":{"daf":"1.0"}}"#,
            "malformed daf version marker",
        ),
        (
            r#"{"zarr_format":3,"node_type":"group","attributes":{}}"#,
            "not a daf data set (a Zarr v3 group without attributes.daf)",
        ),
        (
            r#"{"zarr_format":3,"node_type":"array","attributes":{"daf":[1,0]}}"#,
            "is not a group",
        ),
        (
            r#"{"zarr_format":4,"node_type":"group","attributes":{"daf":[1,0]}}"#,
            "unsupported Zarr version 4",
        ),
        (r#"{"zarr_format":3,"#, "invalid JSON"),
    ] {
        let (_tmp, root) = with_root(doc);
        let err = read_dir(&root).unwrap_err().to_string();
        assert!(err.contains(message), "{doc}: {err}");
        assert!(
            err.contains(root.join("zarr.json").to_str().unwrap()),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
    }
    // Minor versions at or below 0 are read.
    let (_tmp, root) =
        with_root(r#"{"zarr_format":3,"node_type":"group","attributes":{"daf":[1,-1]}}"#);
    assert!(read_dir(&root).is_ok());
}

#[test]
fn an_unknown_codec_skips_only_that_property() {
    let (_tmp, root) = copy_fixture(&format!("{VECTORS}/zarr_v3.daf.zarr"));
    let meta = root.join("vectors/cell/score/zarr.json");
    let text = std::fs::read_to_string(&meta).unwrap().replace(
        r#"{"configuration":{"endian":"little"},"name":"bytes"}"#,
        r#"{"configuration":{"endian":"little"},"name":"bytes"},{"name":"lzma"}"#,
    );
    std::fs::write(&meta, text).unwrap();
    let idx = open_directory(&root).unwrap();
    let err = open_array(&idx, "vectors/cell/score")
        .unwrap_err()
        .to_string();
    assert!(err.contains("unsupported codec \"lzma\""), "{err}");
    let ds = read_zarr_daf(&idx, &root).unwrap();
    assert!(!ds.vectors["cell"].contains_key("score"));
    assert!(ds.vectors["cell"].contains_key("type"));
}

#[test]
fn hostile_array_documents_are_refused() {
    let idx_with = |doc: &str| {
        let (tmp, root) = copy_fixture(&format!("{VECTORS}/zarr_v3.daf.zarr"));
        std::fs::write(root.join("vectors/cell/score/zarr.json"), doc).unwrap();
        (tmp, open_directory(&root).unwrap())
    };
    let score = r#"{"chunk_grid":{"configuration":{"chunk_shape":[3]},"name":"regular"},"chunk_key_encoding":{"configuration":{"separator":"/"},"name":"default"},"codecs":[{"configuration":{"endian":"little"},"name":"bytes"}],"data_type":"float32","fill_value":0.0,"node_type":"array","shape":[3],"zarr_format":3}"#;
    for (from, to, message) in [
        ("\"shape\":[3]", "\"shape\":[-3]", "bad \"shape\""),
        (
            "\"chunk_shape\":[3]",
            "\"chunk_shape\":[0]",
            "chunks do not match shape",
        ),
        (
            "\"shape\":[3]",
            "\"shape\":[4294967296,4294967296]",
            "chunks do not match shape",
        ),
        ("\"float32\"", "\"complex64\"", "unsupported data_type"),
        ("\"regular\"", "\"rectilinear\"", "not \"regular\""),
        ("\"little\"", "\"middle\"", "endian"),
        (
            "\"fill_value\":0.0",
            "\"fill_value\":\"0x12\"",
            "bad hex fill_value",
        ),
        (
            "\"zarr_format\":3",
            "\"zarr_format\":2",
            "not a Zarr v3 array",
        ),
        ("{\"chunk_grid\"", "[{\"chunk_grid\"", "invalid JSON"),
    ] {
        assert!(score.contains(from), "{from}");
        let (_tmp, idx) = idx_with(&score.replacen(from, to, 1));
        let err = open_array(&idx, "vectors/cell/score")
            .unwrap_err()
            .to_string();
        assert!(err.contains(message), "{to}: {err}");
    }
    // A huge declared shape is never allocated: a whole read fails at the decode limit, a
    // range is decoded chunk by chunk (only the first chunk is stored: the rest is fill).
    let (_tmp, idx) = idx_with(&score.replacen("\"shape\":[3]", "\"shape\":[1099511627776]", 1));
    let huge = open_array(&idx, "vectors/cell/score").unwrap();
    assert_eq!(huge.blob.known_len(), Some(4 << 40));
    let err = huge.blob.bytes().unwrap_err().to_string();
    assert!(err.contains("limit"), "{err}");
    assert_eq!(
        huge.blob.read_range(4 << 39, 8).unwrap().as_slice(),
        &[0; 8]
    );
    assert_eq!(huge.blob.read_range(0, 12).unwrap().len(), 12);
    // A chunk bigger than the shape declares.
    let (_tmp, root) = copy_fixture(&format!("{VECTORS}/zarr_v3.daf.zarr"));
    std::fs::write(root.join("vectors/cell/score/c/0"), [0u8; 16]).unwrap();
    let idx = open_directory(&root).unwrap();
    let err = open_array(&idx, "vectors/cell/score")
        .unwrap_err()
        .to_string();
    assert!(err.contains("chunk has 16 bytes"), "{err}");
    // Hex fill values are the float's bits (here for an elided chunk).
    let (_tmp, root) = copy_fixture(&format!("{VECTORS}/zarr_v3.daf.zarr"));
    let hex = score.replacen("\"fill_value\":0.0", "\"fill_value\":\"0x7fc00000\"", 1);
    std::fs::write(root.join("vectors/cell/score/zarr.json"), hex).unwrap();
    std::fs::remove_file(root.join("vectors/cell/score/c/0")).unwrap();
    let nan = open_array(&open_directory(&root).unwrap(), "vectors/cell/score").unwrap();
    assert!(nan.blob.is_fill());
    assert_eq!(bytes(&nan.blob), [0x7fc00000u32.to_le_bytes(); 3].concat());
}

#[test]
fn staged_items_are_read_with_the_v3_entry_points() {
    let idx = open_directory(Path::new(&format!("{VECTORS}/zarr_v3.daf.zarr"))).unwrap();
    assert_eq!(
        read_scalar_of(ZarrVersion::V3, &idx, "scalars/ratio")
            .unwrap()
            .scalar
            .value_json(),
        "2.5"
    );
    assert_eq!(
        read_axis_of(ZarrVersion::V3, &idx, "axes/gene")
            .unwrap()
            .len(),
        2
    );
    assert!(read_property_of(ZarrVersion::V3, &idx, "vectors/cell/score", &[3]).is_ok());
    let err = read_property_of(ZarrVersion::V3, &idx, "vectors/cell/score", &[4]).unwrap_err();
    assert!(err.to_string().contains("shape [3], [4] expected"), "{err}");
    assert!(read_property_of(ZarrVersion::V3, &idx, "matrices/cell/gene/umis", &[2, 3]).is_ok());
    assert!(all_chunks_stored(&idx, "matrices/cell/gene/expr").unwrap());
    let foreign = open_directory(Path::new(FOREIGN)).unwrap();
    assert!(all_chunks_stored(&foreign, "vectors/cell/x").unwrap());
    assert!(!all_chunks_stored(&foreign, "vectors/cell/partial").unwrap());
    assert!(matches!(
        read_scalar_of(ZarrVersion::V3, &idx, "scalars/nope"),
        Err(FormatError::MissingFile(_))
    ));
}

#[test]
fn single_shard_arrays_are_packed_and_decoded() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/shards");
    let idx = open_directory(Path::new(dir)).unwrap();
    let expected: serde_json::Value =
        serde_json::from_slice(&std::fs::read(format!("{dir}/expected.json")).unwrap()).unwrap();
    for (name, want) in expected.as_object().unwrap() {
        let array = open_array(&idx, name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let packing = array.packing.as_ref().expect("a packed array");
        let chunk = if array.shape.len() == 2 {
            "c/0/0"
        } else {
            "c/0"
        };
        assert!(Arc::ptr_eq(
            &packing.shard,
            &idx.get(&format!("{name}/{chunk}")).unwrap().blob
        ));
        let shape: Vec<u64> = serde_json::from_value(want["shape"].clone()).unwrap();
        assert_eq!(array.shape, shape, "{name}");
        let data = bytes(&array.blob);
        let values = want["values"].as_array().unwrap();
        let got: Vec<serde_json::Value> = match want["dtype"].as_str().unwrap() {
            "float64" => ints(&data, f64::from_le_bytes)
                .into_iter()
                .map(Into::into)
                .collect(),
            "float32" => ints(&data, f32::from_le_bytes)
                .into_iter()
                .map(|v| f64::from(v).into())
                .collect(),
            "int32" => ints(&data, i32::from_le_bytes)
                .into_iter()
                .map(Into::into)
                .collect(),
            "uint16" => ints(&data, u16::from_le_bytes)
                .into_iter()
                .map(Into::into)
                .collect(),
            "str" => decode_vlen(&data, values.len() as u64)
                .unwrap()
                .into_iter()
                .map(|s| String::from_utf8(s.to_vec()).unwrap().into())
                .collect(),
            other => panic!("{other}"),
        };
        assert_eq!(&got, values, "{name}");
    }
    // A sharded array of several shards is refused (with what it is).
    let (_tmp, root) = copy_fixture(dir);
    let meta = root.join("zstd_start_f64/zarr.json");
    let text = std::fs::read_to_string(&meta)
        .unwrap()
        .replacen("128", "64", 1);
    std::fs::write(&meta, text).unwrap();
    let err = open_array(&open_directory(&root).unwrap(), "zstd_start_f64").unwrap_err();
    assert!(err.to_string().contains("several shards"), "{err}");
}
