//! The AnnData view against `anndata-view.md` §7: the worked example's files, byte for byte.

use std::collections::BTreeMap;
use std::path::Path;

use super::zarr::{chunk_key, chunking, view_into};
use super::*;
use crate::formats::files::read_files_daf;
use crate::stores::dir::open_directory;
use crate::views::ViewNode;

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/vectors/files_v1_0.daf"
);

fn tiny() -> Dataset {
    read_files_daf(&open_directory(Path::new(TINY)).unwrap(), Path::new(TINY)).unwrap()
}

fn selection(obs: &str, var: &str, x: &str) -> Selection {
    Selection {
        obs: obs.into(),
        var: var.into(),
        x: x.into(),
    }
}

/// Every file of the view, by path, with its bytes (read by `stat` size, as the kernel does).
fn files(dataset: &Dataset, selection: &Selection, v3: bool) -> BTreeMap<String, Vec<u8>> {
    view_into(dataset, selection, v3, "", None)
        .into_iter()
        .filter_map(|e| match e.node {
            ViewNode::File(blob) => {
                let len = blob.len().unwrap();
                let bytes = blob.read_range(0, len).unwrap().as_slice().to_vec();
                assert_eq!(bytes.len() as u64, len, "{}", e.path);
                Some((e.path, bytes))
            }
            ViewNode::Dir => None,
        })
        .collect()
}

fn text(files: &BTreeMap<String, Vec<u8>>, path: &str) -> String {
    String::from_utf8(files[path].clone()).unwrap()
}

fn hex(files: &BTreeMap<String, Vec<u8>>, path: &str) -> String {
    files[path].iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn the_worked_example_in_zarr_v2() {
    let files = files(&tiny(), &selection("cell", "gene", "expr"), false);
    assert_eq!(files.len(), 66);
    let expected_text = [
        (
            ".zattrs",
            r#"{"encoding-type":"anndata","encoding-version":"0.1.0"}"#,
        ),
        (".zgroup", r#"{"zarr_format":2}"#),
        (
            "X/.zarray",
            r#"{"chunks":[3,2],"compressor":null,"dtype":"<f8","fill_value":null,"filters":null,"order":"F","shape":[3,2],"zarr_format":2}"#,
        ),
        (
            "X/.zattrs",
            r#"{"encoding-type":"array","encoding-version":"0.2.0"}"#,
        ),
        (
            "layers/umis/.zattrs",
            r#"{"encoding-type":"csc_matrix","encoding-version":"0.1.0","shape":[3,2]}"#,
        ),
        (
            "layers/umis/data/.zarray",
            r#"{"chunks":[3],"compressor":null,"dtype":"<u2","fill_value":null,"filters":null,"order":"C","shape":[3],"zarr_format":2}"#,
        ),
        ("layers/umis/data/.zattrs", "{}"),
        (
            "layers/umis/indices/.zarray",
            r#"{"chunks":[3],"compressor":null,"dtype":"<i8","fill_value":null,"filters":null,"order":"C","shape":[3],"zarr_format":2}"#,
        ),
        (
            "obs/.zattrs",
            r#"{"_index":"_index","column-order":["counts","is_marker","score","type"],"encoding-type":"dataframe","encoding-version":"0.2.0"}"#,
        ),
        (
            "obs/_index/.zarray",
            r#"{"chunks":[3],"compressor":null,"dtype":"|O","fill_value":null,"filters":[{"id":"vlen-utf8"}],"order":"C","shape":[3],"zarr_format":2}"#,
        ),
        (
            "obs/_index/.zattrs",
            r#"{"encoding-type":"string-array","encoding-version":"0.2.0"}"#,
        ),
        (
            "obs/is_marker/.zarray",
            r#"{"chunks":[3],"compressor":null,"dtype":"|b1","fill_value":null,"filters":null,"order":"C","shape":[3],"zarr_format":2}"#,
        ),
        (
            "uns/X_is/.zarray",
            r#"{"chunks":[],"compressor":null,"dtype":"|O","fill_value":null,"filters":[{"id":"vlen-utf8"}],"order":"C","shape":[],"zarr_format":2}"#,
        ),
        (
            "uns/X_is/.zattrs",
            r#"{"encoding-type":"string","encoding-version":"0.2.0"}"#,
        ),
        (
            "uns/ratio/.zarray",
            r#"{"chunks":[],"compressor":null,"dtype":"<f8","fill_value":null,"filters":null,"order":"C","shape":[],"zarr_format":2}"#,
        ),
        (
            "uns/ratio/.zattrs",
            r#"{"encoding-type":"numeric-scalar","encoding-version":"0.2.0"}"#,
        ),
        (
            "var/.zattrs",
            r#"{"_index":"_index","column-order":[],"encoding-type":"dataframe","encoding-version":"0.2.0"}"#,
        ),
        (
            "varp/.zattrs",
            r#"{"encoding-type":"dict","encoding-version":"0.1.0"}"#,
        ),
    ];
    for (path, want) in expected_text {
        assert_eq!(text(&files, path), want, "{path}");
    }
    let expected_hex = [
        ("X/0.0", "000000000000f03f00000000000000400000000000000840000000000000104000000000000014400000000000001840"),
        ("layers/umis/data/0", "070009000800"),
        ("layers/umis/indices/0", "000000000000000002000000000000000100000000000000"),
        ("layers/umis/indptr/0", "000000000000000002000000000000000300000000000000"),
        ("obs/_index/0", "03000000020000006331020000006332020000006333"),
        ("obs/counts/0", "0a0000000000000000000000000000001e00000000000000"),
        ("obs/is_marker/0", "000100"),
        ("obs/score/0", "0000c03f00000040000000bf"),
        ("obs/type/0", "03000000010000005401000000420100000054"),
        ("uns/X_is/0", "010000000400000065787072"),
        ("uns/obs_is/0", "010000000400000063656c6c"),
        ("uns/ratio/0", "0000000000000440"),
        ("uns/title/0", "010000000500000068656c6c6f"),
        ("uns/var_is/0", "010000000400000067656e65"),
        ("var/_index/0", "02000000020000006731020000006732"),
    ];
    for (path, want) in expected_hex {
        assert_eq!(hex(&files, path), want, "{path}");
    }
    // The consolidated metadata: every document of the view, equal as JSON.
    let zmetadata: Value = serde_json::from_slice(&files[".zmetadata"]).unwrap();
    assert_eq!(zmetadata["zarr_consolidated_format"], 1);
    let metadata = zmetadata["metadata"].as_object().unwrap();
    let documents: Vec<&String> = files
        .keys()
        .filter(|p| p.ends_with(".zattrs") || p.ends_with(".zgroup") || p.ends_with(".zarray"))
        .collect();
    assert_eq!(metadata.len(), documents.len());
    for path in documents {
        let document: Value = serde_json::from_slice(&files[path]).unwrap();
        assert_eq!(metadata[path.as_str()], document, "{path}");
    }
    // The X chunk is the source's very blob (zero copy): the same bytes as the FilesDaf payload.
    assert_eq!(
        files["X/0.0"],
        std::fs::read(format!("{TINY}/matrices/cell/gene/expr.data")).unwrap()
    );
}

#[test]
fn the_worked_example_in_zarr_v3() {
    let files = files(&tiny(), &selection("cell", "gene", "expr"), true);
    assert_eq!(files.len(), 40);
    assert_eq!(
        text(&files, "X/zarr.json"),
        r#"{"attributes":{"encoding-type":"array","encoding-version":"0.2.0"},"chunk_grid":{"configuration":{"chunk_shape":[3,2]},"name":"regular"},"chunk_key_encoding":{"configuration":{"separator":"/"},"name":"default"},"codecs":[{"configuration":{"order":[1,0]},"name":"transpose"},{"configuration":{"endian":"little"},"name":"bytes"}],"data_type":"float64","fill_value":0.0,"node_type":"array","shape":[3,2],"zarr_format":3}"#
    );
    assert_eq!(
        text(&files, "layers/umis/zarr.json"),
        r#"{"attributes":{"encoding-type":"csc_matrix","encoding-version":"0.1.0","shape":[3,2]},"node_type":"group","zarr_format":3}"#
    );
    assert_eq!(
        text(&files, "uns/title/zarr.json"),
        r#"{"attributes":{"encoding-type":"string","encoding-version":"0.2.0"},"chunk_grid":{"configuration":{"chunk_shape":[]},"name":"regular"},"chunk_key_encoding":{"configuration":{"separator":"/"},"name":"default"},"codecs":[{"configuration":{},"name":"vlen-utf8"}],"data_type":"string","fill_value":"","node_type":"array","shape":[],"zarr_format":3}"#
    );
    assert!(text(&files, "obs/type/zarr.json").contains(r#""data_type":"string","fill_value":"""#));
    assert!(text(&files, "obs/is_marker/zarr.json").contains(r#""fill_value":false"#));
    assert!(text(&files, "obs/counts/zarr.json").contains(r#""fill_value":0,"#));
    assert_eq!(hex(&files, "uns/title/c"), "010000000500000068656c6c6f");
    for chunk in [
        "X/c/0/0",
        "layers/umis/data/c/0",
        "layers/umis/indices/c/0",
        "layers/umis/indptr/c/0",
        "obs/score/c/0",
        "var/_index/c/0",
        "uns/ratio/c",
    ] {
        assert!(files.contains_key(chunk), "{chunk}");
    }
    // The root holds every other node's document, keys sorted.
    let root: Value = serde_json::from_slice(&files["zarr.json"]).unwrap();
    assert_eq!(root["attributes"]["encoding-type"], "anndata");
    let metadata = root["consolidated_metadata"]["metadata"]
        .as_object()
        .unwrap();
    let mut nodes: Vec<&str> = files
        .keys()
        .filter_map(|p| p.strip_suffix("/zarr.json"))
        .collect();
    nodes.sort_unstable();
    assert_eq!(metadata.len(), 24);
    assert_eq!(
        metadata.keys().map(String::as_str).collect::<Vec<_>>(),
        nodes
    );
    for node in nodes {
        let document: Value = serde_json::from_slice(&files[&format!("{node}/zarr.json")]).unwrap();
        assert_eq!(metadata[node], document, "{node}");
    }
}

#[test]
fn the_other_way_round_is_csr_and_c_order() {
    let files = files(&tiny(), &selection("gene", "cell", "umis"), false);
    assert_eq!(
        text(&files, "X/.zattrs"),
        r#"{"encoding-type":"csr_matrix","encoding-version":"0.1.0","shape":[2,3]}"#
    );
    assert_eq!(
        hex(&files, "X/indptr/0"),
        "000000000000000002000000000000000300000000000000"
    );
    assert_eq!(
        hex(&files, "X/indices/0"),
        "000000000000000002000000000000000100000000000000"
    );
    assert!(text(&files, "layers/expr/.zarray").contains(r#""order":"C","shape":[2,3]"#));
    let expr = std::fs::read(format!("{TINY}/matrices/cell/gene/expr.data")).unwrap();
    assert_eq!(files["layers/expr/0.0"], expr);
    assert!(text(&files, "obs/.zattrs").contains(r#""column-order":[]"#));
    assert!(text(&files, "var/.zattrs")
        .contains(r#""column-order":["counts","is_marker","score","type"]"#));
    assert_eq!(hex(&files, "uns/obs_is/0"), "010000000400000067656e65");
    assert_eq!(hex(&files, "uns/X_is/0"), "0100000004000000756d6973");
}

#[test]
fn upstreams_default_names_leave_uns_without_renames() {
    let mut dataset = tiny();
    // The same data under upstream's default names: obs, var, X.
    let selection = selection("cell", "gene", "expr");
    let files_before = files(&dataset, &selection, false);
    assert!(files_before.contains_key("uns/obs_is/0"));
    dataset.scalars.remove("title");
    let files = files(&dataset, &selection, false);
    assert!(!files.contains_key("uns/title/0"));
}

#[test]
fn large_numeric_arrays_are_split_in_contiguous_blocks() {
    let f32 = Element::Num(NumType::Float32);
    // C order: whole rows; F order: whole columns; 8 MiB at most.
    let c = chunking(f32, &[4096, 65536], false);
    assert_eq!((c.shape, c.axis), (vec![32, 65536], 0));
    let f = chunking(f32, &[65536, 4096], true);
    assert_eq!((f.shape, f.axis), (vec![65536, 32], 1));
    let v = chunking(Element::Num(NumType::Int64), &[100_000_000], false);
    assert_eq!(v.shape, vec![1 << 20]);
    // A row larger than a chunk: one row a chunk.
    assert_eq!(chunking(f32, &[10, 4 << 20], false).shape, vec![1, 4 << 20]);
    // Small arrays, strings, scalars and empty arrays: one chunk.
    assert_eq!(chunking(f32, &[3, 2], true).shape, vec![3, 2]);
    assert_eq!(
        chunking(Element::Strings, &[1 << 30], false).shape,
        vec![1 << 30]
    );
    assert_eq!(chunking(f32, &[], false).shape, Vec::<u64>::new());
    assert_eq!(chunking(f32, &[0, 7], false).shape, vec![1, 7]);
    assert_eq!(chunk_key(&[3, 0], false), "3.0");
    assert_eq!(chunk_key(&[0, 3], true), "c/0/3");
    assert_eq!(
        (chunk_key(&[], false), chunk_key(&[], true)),
        ("0".into(), "c".into())
    );
}

#[test]
fn the_last_block_is_padded_to_a_whole_chunk() {
    // 3 x 1,000,000 Float32 (12 MB) in C order: blocks of 2 rows (8 MB); the last holds 1 row.
    let data: Vec<u8> = (0..3_000_000u32).flat_map(|v| v.to_le_bytes()).collect();
    let content = Blob::ready(Bytes::from_vec(data.clone()));
    let full = 2 * 1_000_000 * 4;
    let first = derived::padded(&content, 0, full, full);
    let last = derived::padded(&content, full, 1_000_000 * 4, full);
    assert_eq!(first.len().unwrap(), full);
    assert_eq!(last.len().unwrap(), full);
    assert!(first.read_range(0, full).unwrap().as_slice() == &data[..full as usize]);
    let tail = last.read_range(0, full).unwrap();
    assert!(tail.as_slice()[..4_000_000] == data[full as usize..]);
    assert!(tail.as_slice()[4_000_000..].iter().all(|&b| b == 0));
    let across = last.read_range(4_000_000 - 2, 4).unwrap();
    assert_eq!(across.as_slice(), &[0x2d, 0x00, 0, 0]);
}
