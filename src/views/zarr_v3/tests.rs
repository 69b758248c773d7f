//! Tests of the Zarr v3 view against the §11.5 fixture (`zarr_v3.daf.zarr`), which holds the same
//! data set as the v2 fixture the model is read from here.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::formats::model::ScalarProperty;
use crate::formats::scalar::ScalarValue;
use crate::formats::zarr::read_zarr_daf;
use crate::stores::dir::open_directory;
use crate::views::{zarr_v2, ViewNode};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

fn fixture_dataset() -> Dataset {
    let path = format!("{VECTORS}/zarr_v2.daf.zarr");
    read_zarr_daf(&open_directory(Path::new(&path)).unwrap(), Path::new(&path)).unwrap()
}

/// Every file of the v3 fixture directory, by relative path.
fn fixture_files() -> BTreeMap<String, Vec<u8>> {
    fn walk(dir: &Path, rel: &str, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let rel = crate::views::join(rel, &name);
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &rel, out);
            } else {
                out.insert(rel, std::fs::read(entry.path()).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(
        Path::new(&format!("{VECTORS}/zarr_v3.daf.zarr")),
        "",
        &mut out,
    );
    out
}

fn view_files(entries: &[ViewEntry]) -> BTreeMap<String, Arc<Blob>> {
    entries
        .iter()
        .filter_map(|e| match &e.node {
            ViewNode::File(blob) => Some((e.path.clone(), blob.clone())),
            ViewNode::Dir => None,
        })
        .collect()
}

fn text(blob: &Blob) -> String {
    String::from_utf8(blob.bytes().unwrap().as_slice().to_vec()).unwrap()
}

/// What zarr-python 3.1.6's `ConsolidatedMetadata._flat_to_nested` needs of the key order: after
/// a stable sort by depth, the keys of each parent form one run (it groups with `groupby`, and a
/// second run of the same parent replaces the first, which later fails with a `KeyError`).
fn zarr_python_accepts(keys: &[String]) -> bool {
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort_by_key(|k| k.matches('/').count());
    // A top-level key is its own run (with no children: harmless when repeated).
    let parents: Vec<&str> = sorted
        .iter()
        .filter_map(|k| k.rsplit_once('/').map(|(p, _)| p))
        .collect();
    let mut seen = std::collections::BTreeSet::new();
    let mut previous = None;
    for parent in parents {
        if previous != Some(parent) && !seen.insert(parent) {
            return false;
        }
        previous = Some(parent);
    }
    true
}

fn metadata_keys(root: &str) -> Vec<String> {
    // serde_json's maps are sorted: read the keys in document order with a raw map instead.
    type Raw<'a> = BTreeMap<String, &'a serde_json::value::RawValue>;
    let top: Raw = serde_json::from_str(root).unwrap();
    let consolidated: Raw = serde_json::from_str(top["consolidated_metadata"].get()).unwrap();
    let metadata = consolidated["metadata"].get();
    let mut keys = Vec::new();
    let mut de = serde_json::Deserializer::from_str(metadata);
    struct Keys<'a>(&'a mut Vec<String>);
    impl<'de> serde::de::Visitor<'de> for Keys<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some((k, _)) = map.next_entry::<String, serde::de::IgnoredAny>()? {
                self.0.push(k);
            }
            Ok(())
        }
    }
    serde::Deserializer::deserialize_map(&mut de, Keys(&mut keys)).unwrap();
    keys
}

#[test]
fn every_node_file_and_chunk_is_the_fixture_byte_for_byte() {
    let ds = fixture_dataset();
    let fixture = fixture_files();
    let view = view_files(&zarr_v3_view(&ds, ""));
    assert_eq!(
        view.keys().collect::<Vec<_>>(),
        fixture.keys().collect::<Vec<_>>()
    );
    for (path, expected) in &fixture {
        if path != "zarr.json" {
            assert_eq!(
                view[path].bytes().unwrap().as_slice(),
                expected.as_slice(),
                "{path}"
            );
            assert_eq!(view[path].len().unwrap(), expected.len() as u64, "{path}");
        }
    }
}

#[test]
fn the_root_holds_the_fixtures_metadata_sorted_for_zarr_python() {
    let ds = fixture_dataset();
    let fixture = fixture_files();
    let root = text(&view_files(&zarr_v3_view(&ds, ""))["zarr.json"]);
    assert!(root.starts_with(
        "{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":{\"daf\":[1,0]},\"consolidated_metadata\":{\"kind\":\"inline\",\"must_understand\":false,\"metadata\":{\"axes\":{\"zarr_format\":3,\"node_type\":\"group\"},\"axes/cell\":{\"chunk_grid\""
    ));
    assert!(root.ends_with("}}}"));
    // The same entries as Julia's root, each array entry its node's file byte for byte.
    let ours: Value = serde_json::from_str(&root).unwrap();
    let julia: Value = serde_json::from_slice(&fixture["zarr.json"]).unwrap();
    assert_eq!(ours, julia);
    for (path, bytes) in &fixture {
        if let Some(node) = path.strip_suffix("/zarr.json") {
            if bytes.starts_with(b"{\"chunk_grid\"") {
                let entry = format!("\"{node}\":{}", String::from_utf8_lossy(bytes));
                assert!(root.contains(&entry), "{node}");
            }
        }
    }
    let keys = metadata_keys(&root);
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert!(zarr_python_accepts(&keys));
    // Julia's own order is what zarr-python fails on: the check above can tell.
    let julia_keys = metadata_keys(std::str::from_utf8(&fixture["zarr.json"]).unwrap());
    assert!(!zarr_python_accepts(&julia_keys));
}

#[test]
fn the_root_rebuilt_from_a_directory_is_the_view_s_root() {
    let ds = fixture_dataset();
    assert_eq!(GROUP.len(), 37);
    let view_root = text(&view_files(&zarr_v3_view(&ds, ""))["zarr.json"]);
    // Rebuilt from the fixture directory's own documents: the same root.
    let fixture = fixture_files();
    let docs = fixture
        .iter()
        .map(|(path, bytes)| (path.as_str(), bytes.as_slice()));
    assert_eq!(consolidated_from_documents(docs).unwrap(), view_root);
}

#[test]
fn foreign_documents_are_consolidated_compactly_or_refused() {
    let pretty = b"{\n  \"shape\": [3],\n  \"data_type\": \"int32\",\n  \"node_type\": \"array\",\n  \"zarr_format\": 3,\n  \"attributes\": {}\n}";
    let root = consolidated_from_documents([
        ("vectors/cell/x/zarr.json", &pretty[..]),
        ("vectors/zarr.json", GROUP.as_bytes()),
        ("zarr.json", b"ignored".as_slice()),
        ("vectors/cell/x/c/0", b"not a document".as_slice()),
    ])
    .unwrap();
    assert!(root.ends_with("\"metadata\":{\"vectors\":{\"zarr_format\":3,\"node_type\":\"group\"},\"vectors/cell/x\":{\"attributes\":{},\"data_type\":\"int32\",\"node_type\":\"array\",\"shape\":[3],\"zarr_format\":3}}}}"), "{root}");
    let err = consolidated_from_documents([("a/zarr.json", b"{\"zarr_format\":2}".as_slice())])
        .unwrap_err();
    assert!(err.to_string().contains("a/zarr.json"), "{err}");
    assert!(consolidated_from_documents([("a/zarr.json", b"{".as_slice())]).is_err());
}

#[test]
fn numeric_chunks_are_the_v2_views_blobs() {
    let ds = fixture_dataset();
    let v2 = view_files(&zarr_v2::zarr_view(&ds, ""));
    let v3 = view_files(&zarr_v3_view(&ds, "x"));
    for (v2_key, v3_key) in [
        ("vectors/cell/score/0", "x/vectors/cell/score/c/0"),
        (
            "matrices/cell/gene/expr/0.0",
            "x/matrices/cell/gene/expr/c/0/0",
        ),
        (
            "matrices/cell/gene/umis/rowval/0",
            "x/matrices/cell/gene/umis/rowval/c/0",
        ),
        ("axes/cell/0", "x/axes/cell/c/0"),
    ] {
        assert!(Arc::ptr_eq(&v2[v2_key], &v3[v3_key]), "{v3_key}");
    }
}

#[test]
fn item_entries_are_the_items_nodes_without_the_root() {
    let ds = fixture_dataset();
    let id = PropertyId::Matrix {
        rows: "cell".into(),
        cols: "gene".into(),
        name: "umis".into(),
    };
    let files = view_files(&item_entries(&ds, &id));
    let names: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "matrices/cell/gene/umis/colptr/c/0",
            "matrices/cell/gene/umis/colptr/zarr.json",
            "matrices/cell/gene/umis/nzval/c/0",
            "matrices/cell/gene/umis/nzval/zarr.json",
            "matrices/cell/gene/umis/rowval/c/0",
            "matrices/cell/gene/umis/rowval/zarr.json",
            "matrices/cell/gene/umis/zarr.json",
        ]
    );
    let axis = view_files(&item_entries(&ds, &PropertyId::Axis("gene".into())));
    assert!(axis.contains_key("axes/gene/c/0"));
    assert!(axis.contains_key("matrices/cell/gene/zarr.json"));
    assert!(axis.contains_key("matrices/gene/cell/zarr.json"));
    assert!(axis.contains_key("vectors/gene/zarr.json"));
    assert!(!axis.contains_key("zarr.json"));
}

#[test]
fn scalars_equal_to_the_fill_value_have_no_chunk() {
    let mut ds = fixture_dataset();
    let scalar = |eltype, value| ScalarProperty {
        scalar: Scalar { eltype, value },
        mtime: SystemTime::UNIX_EPOCH,
    };
    let f64t = ElementType::Num(NumType::Float64);
    for (name, s) in [
        ("zero", scalar(f64t, ScalarValue::Float(0.0))),
        ("minus_zero", scalar(f64t, ScalarValue::Float(-0.0))),
        (
            "no",
            scalar(ElementType::Num(NumType::Bool), ScalarValue::Bool(false)),
        ),
        (
            "empty",
            scalar(ElementType::String, ScalarValue::String(String::new())),
        ),
        (
            "n",
            scalar(ElementType::Num(NumType::Int32), ScalarValue::Int(0)),
        ),
    ] {
        ds.scalars.insert(name.into(), s);
    }
    let files = view_files(&zarr_v3_view(&ds, ""));
    for name in ["zero", "no", "empty", "n"] {
        assert!(files.contains_key(&format!("scalars/{name}/zarr.json")));
        assert!(
            !files.contains_key(&format!("scalars/{name}/c/0")),
            "{name}"
        );
    }
    // -0.0 is not `isequal` to 0.0: Julia stores it.
    assert_eq!(
        files["scalars/minus_zero/c/0"].bytes().unwrap().as_slice(),
        (-0.0f64).to_le_bytes()
    );
    assert_eq!(
        text(&files["scalars/n/zarr.json"]),
        "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[1]},\"name\":\"regular\"},\"chunk_key_encoding\":{\"configuration\":{\"separator\":\"/\"},\"name\":\"default\"},\"codecs\":[{\"configuration\":{\"endian\":\"little\"},\"name\":\"bytes\"}],\"data_type\":\"int32\",\"fill_value\":0,\"node_type\":\"array\",\"shape\":[1],\"zarr_format\":3}"
    );
    assert!(text(&files["scalars/no/zarr.json"])
        .contains("\"data_type\":\"bool\",\"fill_value\":false,"));
}

fn zstd_packing(shape: Vec<u64>, inner: Vec<u64>, shard: Arc<Blob>) -> Packing {
    Packing {
        shard,
        eltype: ElementType::Num(NumType::Float64),
        codecs: serde_json::json!([
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 5}}
        ]),
        index_at_start: true,
        shard_shape: rounded_shard_shape(&shape, &inner),
        shape,
        inner,
        fill_value: serde_json::json!(0.0),
        index_codecs: serde_json::json!([
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "crc32c"}
        ]),
    }
}

#[test]
fn the_shard_shape_is_rounded_up_to_the_inner_chunks() {
    assert_eq!(rounded_shard_shape(&[1200], &[1024]), [2048]);
    assert_eq!(rounded_shard_shape(&[1024], &[1024]), [1024]);
    assert_eq!(rounded_shard_shape(&[5], &[1024]), [1024]);
    assert_eq!(rounded_shard_shape(&[3, 1200], &[1, 1024]), [3, 2048]);
    assert_eq!(rounded_shard_shape(&[0], &[512]), [512]);
}

#[test]
fn packed_arrays_show_their_shard_as_the_only_chunk() {
    let mut ds = fixture_dataset();
    let shard = Blob::ready(Bytes::from_vec(vec![7; 100]));
    let flat = Blob::ready(Bytes::from_vec(vec![0; 24]));
    let mut packed = BTreeMap::new();
    packed.insert(
        String::new(),
        Arc::new(zstd_packing(vec![3], vec![2], shard.clone())),
    );
    let property = Property {
        payload: Payload::Dense {
            eltype: NumType::Float64,
            data: flat.clone(),
        },
        mtime: SystemTime::UNIX_EPOCH.into(),
        packed: packed.into(),
    };
    ds.vectors
        .get_mut("cell")
        .unwrap()
        .insert("packed".into(), property);
    let files = view_files(&zarr_v3_view(&ds, ""));
    assert!(Arc::ptr_eq(&files["vectors/cell/packed/c/0"], &shard));
    let doc = "{\"attributes\":{\"daf_packed_format\":\"indexed+zipped\"},\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[4]},\"name\":\"regular\"},\"chunk_key_encoding\":{\"configuration\":{\"separator\":\"/\"},\"name\":\"default\"},\"codecs\":[{\"configuration\":{\"chunk_shape\":[2],\"codecs\":[{\"configuration\":{\"endian\":\"little\"},\"name\":\"bytes\"},{\"configuration\":{\"level\":5},\"name\":\"zstd\"}],\"index_codecs\":[{\"configuration\":{\"endian\":\"little\"},\"name\":\"bytes\"},{\"name\":\"crc32c\"}],\"index_location\":\"start\"},\"name\":\"sharding_indexed\"}],\"data_type\":\"float64\",\"fill_value\":0.0,\"node_type\":\"array\",\"shape\":[3],\"zarr_format\":3}";
    assert_eq!(text(&files["vectors/cell/packed/zarr.json"]), doc);
    let root: Value = serde_json::from_str(&text(&files["zarr.json"])).unwrap();
    let entry = &root["consolidated_metadata"]["metadata"]["vectors/cell/packed"];
    assert_eq!(*entry, serde_json::from_str::<Value>(doc).unwrap());
    // The v2 view keeps the flat content.
    let v2 = view_files(&zarr_v2::zarr_view(&ds, ""));
    assert!(Arc::ptr_eq(&v2["vectors/cell/packed/0"], &flat));
}

#[test]
fn packed_sparse_components_and_an_index_at_the_end() {
    let mut ds = fixture_dataset();
    let shard = Blob::ready(Bytes::from_vec(vec![1; 50]));
    let mut packing = zstd_packing(vec![2], vec![1024], shard.clone());
    packing.eltype = ElementType::Num(NumType::Int64);
    packing.fill_value = serde_json::json!(0);
    packing.index_at_start = false;
    packing.index_codecs =
        serde_json::json!([{"name": "bytes", "configuration": {"endian": "little"}}]);
    let counts = ds
        .vectors
        .get_mut("cell")
        .unwrap()
        .get_mut("counts")
        .unwrap();
    counts.packed.insert("nzval".into(), Arc::new(packing));
    let files = view_files(&zarr_v3_view(&ds, ""));
    assert!(Arc::ptr_eq(&files["vectors/cell/counts/nzval/c/0"], &shard));
    let doc = text(&files["vectors/cell/counts/nzval/zarr.json"]);
    assert!(
        doc.contains("\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[1024]}"),
        "{doc}"
    );
    assert!(doc.contains("\"index_codecs\":[{\"configuration\":{\"endian\":\"little\"},\"name\":\"bytes\"}],\"index_location\":\"end\""), "{doc}");
    assert!(
        doc.contains("\"data_type\":\"int64\",\"fill_value\":0,"),
        "{doc}"
    );
    // The index array stays flat.
    assert!(text(&files["vectors/cell/counts/nzind/zarr.json"]).starts_with("{\"chunk_grid\""));
}

#[test]
fn foreign_shards_keep_their_shard_shape_and_fill_and_zipped_shards_show_flat() {
    let mut ds = fixture_dataset();
    let shard = Blob::ready(Bytes::from_vec(vec![3; 64]));
    let flat = Blob::ready(Bytes::from_vec(vec![0; 24]));
    let mut foreign = zstd_packing(vec![3], vec![2], shard.clone());
    foreign.shard_shape = vec![8];
    foreign.fill_value = Value::from("NaN");
    let mut zipped = zstd_packing(vec![3], vec![2], shard.clone());
    zipped.index_codecs = Value::Null;
    for (name, packing) in [("foreign", foreign), ("zipped", zipped)] {
        let mut packed = BTreeMap::new();
        packed.insert(String::new(), Arc::new(packing));
        let property = Property {
            payload: Payload::Dense {
                eltype: NumType::Float64,
                data: flat.clone(),
            },
            mtime: SystemTime::UNIX_EPOCH.into(),
            packed: packed.into(),
        };
        ds.vectors
            .get_mut("cell")
            .unwrap()
            .insert(name.into(), property);
    }
    let files = view_files(&zarr_v3_view(&ds, ""));
    let doc = text(&files["vectors/cell/foreign/zarr.json"]);
    assert!(
        doc.contains("\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[8]}"),
        "{doc}"
    );
    assert!(doc.contains("\"fill_value\":\"NaN\","), "{doc}");
    assert!(Arc::ptr_eq(&files["vectors/cell/foreign/c/0"], &shard));
    // No Zarr index: the decoded content, as a flat array.
    assert_eq!(
        text(&files["vectors/cell/zipped/zarr.json"]),
        flat_array_json(ElementType::Num(NumType::Float64), &[3])
    );
    assert!(Arc::ptr_eq(&files["vectors/cell/zipped/c/0"], &flat));
}

#[test]
fn arrays_the_source_stored_without_chunks_have_none() {
    let mut ds = fixture_dataset();
    let property = Property {
        payload: Payload::Dense {
            eltype: NumType::Float32,
            data: Blob::fill(Vec::new(), 12, vec![0; 4]),
        },
        mtime: SystemTime::UNIX_EPOCH.into(),
        packed: Default::default(),
    };
    ds.vectors
        .get_mut("cell")
        .unwrap()
        .insert("zeros".into(), property);
    let files = view_files(&zarr_v3_view(&ds, ""));
    assert!(files.contains_key("vectors/cell/zeros/zarr.json"));
    assert!(!files.contains_key("vectors/cell/zeros/c/0"));
    assert!(files.contains_key("vectors/cell/score/c/0"));
    // The v2 view (fill_value null) shows the bytes.
    assert!(view_files(&zarr_v2::zarr_view(&ds, "")).contains_key("vectors/cell/zeros/0"));
}

#[test]
fn a_v3_source_is_shown_as_it_is_stored() {
    let path = format!("{VECTORS}/zarr_v3.daf.zarr");
    let index = open_directory(Path::new(&path)).unwrap();
    let ds = read_zarr_daf(&index, Path::new(&path)).unwrap();
    let view = view_files(&zarr_v3_view(&ds, ""));
    for (path, expected) in fixture_files() {
        let shown = &view[&path];
        if path != "zarr.json" {
            assert_eq!(
                shown.bytes().unwrap().as_slice(),
                expected.as_slice(),
                "{path}"
            );
        }
        if path.contains("/c/") && !path.starts_with("scalars/") {
            // The source's own chunk, not a copy.
            assert!(
                Arc::ptr_eq(shown, &index.get(&path).unwrap().blob),
                "{path}"
            );
        }
    }
    assert_eq!(view.len(), fixture_files().len());
}

#[test]
fn named_arrays_carry_dimension_names_in_their_sorted_place() {
    let ds = fixture_dataset();
    let named = view_files(&zarr_v3_view_with(&ds, "", true));
    let plain = view_files(&zarr_v3_view(&ds, ""));
    let expr = text(&named["matrices/cell/gene/expr/zarr.json"]);
    assert!(
        expr.contains(
            "\"data_type\":\"float64\",\"dimension_names\":[\"gene\",\"cell\"],\"fill_value\":0.0,"
        ),
        "{expr}"
    );
    // Exactly the plain document with the names added.
    let without = expr.replace("\"dimension_names\":[\"gene\",\"cell\"],", "");
    assert_eq!(without, text(&plain["matrices/cell/gene/expr/zarr.json"]));
    let root = text(&named["zarr.json"]);
    assert!(
        root.contains(&format!("\"matrices/cell/gene/expr\":{expr}")),
        "{root}"
    );
    // Names are JSON strings: odd characters are escaped.
    let doc = flat_array_document(
        ElementType::Num(NumType::Int8),
        &[2],
        Some(&["a \"b\"\\".to_string()]),
    );
    let parsed: Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(parsed["dimension_names"], serde_json::json!(["a \"b\"\\"]));
}

#[test]
fn a_stat_of_the_root_zarr_json_makes_nothing() {
    let entries = zarr_v3_view(&fixture_dataset(), "");
    let blob = entries
        .iter()
        .find_map(|e| match &e.node {
            ViewNode::File(blob) if e.path == "zarr.json" => Some(blob.clone()),
            _ => None,
        })
        .unwrap();
    let len = blob.len().unwrap();
    assert!(!blob.is_materialized(), "the stat made the document");
    assert_eq!(blob.bytes().unwrap().len(), len);
}
