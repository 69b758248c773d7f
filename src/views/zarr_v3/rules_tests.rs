//! Tests of the Zarr v3 write-path rules, with the names and documents zarr-python 3.1.6 and
//! TensorStore 0.1.86 really write (see the module doc).

use std::collections::BTreeMap;
use std::time::SystemTime;

use super::*;
use crate::stores::{Blob, Bytes, Entry};

fn v(axis: &str, name: &str) -> Option<PropertyId> {
    Some(PropertyId::Vector {
        axis: axis.into(),
        name: name.into(),
    })
}

fn m(name: &str) -> Option<PropertyId> {
    Some(PropertyId::Matrix {
        rows: "cell".into(),
        cols: "gene".into(),
        name: name.into(),
    })
}

fn index(files: &[(&str, &str)]) -> StoreIndex {
    let entries: BTreeMap<String, Entry> = files
        .iter()
        .map(|(k, content)| {
            (
                k.to_string(),
                Entry {
                    blob: Blob::ready(Bytes::from_vec(content.as_bytes().to_vec())),
                    mtime: SystemTime::UNIX_EPOCH,
                },
            )
        })
        .collect();
    StoreIndex::new(entries, None)
}

/// TensorStore's document for a 3×2 (Zarr order) int16 array in 2×2 chunks: a grid of 2×1.
const TS_MATRIX: &str = "{\"chunk_grid\":{\"configuration\":{\"chunk_shape\":[2,2]},\"name\":\"regular\"},\"chunk_key_encoding\":{\"name\":\"default\"},\"codecs\":[{\"configuration\":{\"endian\":\"little\"},\"name\":\"bytes\"}],\"data_type\":\"int16\",\"fill_value\":0,\"node_type\":\"array\",\"shape\":[3,2],\"zarr_format\":3}";
/// zarr-python's document for a 3×2 int32 array in 2×1 chunks (a grid of 2×2), with
/// `dimension_names`.
const ZP_MATRIX: &str = "{\"shape\":[3,2],\"data_type\":\"int32\",\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[2,1]}},\"chunk_key_encoding\":{\"name\":\"default\",\"configuration\":{\"separator\":\"/\"}},\"fill_value\":0,\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}},{\"name\":\"zstd\",\"configuration\":{\"level\":0,\"checksum\":false}}],\"attributes\":{},\"dimension_names\":[\"gene\",\"cell\"],\"zarr_format\":3,\"node_type\":\"array\",\"storage_transformers\":[]}";

#[test]
fn paths_map_to_their_items() {
    for (rel, id) in [
        ("vectors/cell/new/zarr.json", v("cell", "new")),
        ("vectors/cell/new/c/0", v("cell", "new")),
        ("vectors/cell/new/c/12", v("cell", "new")),
        ("matrices/cell/gene/m/c/0/0", m("m")),
        ("matrices/cell/gene/m/c/1/2", m("m")),
        ("matrices/cell/gene/m/c.1.2", m("m")),
        ("matrices/cell/gene/m/1.0", m("m")),
        ("matrices/cell/gene/m/1/0", m("m")),
        ("vectors/cell/new/0", v("cell", "new")),
        ("vectors/cell/s/nzind/zarr.json", v("cell", "s")),
        ("vectors/cell/s/nzind/c/0", v("cell", "s")),
        ("vectors/cell/s/nzval/c/3", v("cell", "s")),
        ("matrices/cell/gene/u/colptr/c/0", m("u")),
        ("matrices/cell/gene/u/rowval/c/1", m("u")),
        ("matrices/cell/gene/u/zarr.json", m("u")),
        (
            "scalars/pi/zarr.json",
            Some(PropertyId::Scalar("pi".into())),
        ),
        ("scalars/pi/c/0", Some(PropertyId::Scalar("pi".into()))),
        ("axes/batch/c/0", Some(PropertyId::Axis("batch".into()))),
        // Temporaries and documents that are no file of an item.
        ("vectors/cell/new/zarr.0123abcd.partial", None),
        ("vectors/cell/new/c/0.0123abcd.partial", None),
        ("vectors/cell/new/zarr.json.__lock", None),
        ("vectors/cell/new/c/0.__lock", None),
        ("vectors/cell/zarr.json", None),
        ("zarr.json", None),
        ("vectors/cell/new/c", None),
        ("vectors/cell/new/c/x", None),
        ("vectors/cell/new/.zarray", None),
        ("vectors/cell/new/notes", None),
        ("vectors/cell/s/nzind", None),
        ("vectors/cell/s/other/c/0", None),
    ] {
        assert_eq!(item_of(rel), id, "{rel}");
    }
}

#[test]
fn temporaries_group_documents_and_places() {
    for rel in [
        "zarr.eff9333ff8d3440eb0225a1e5ff58be6.partial",
        "vectors/cell/zarr.0173bbb3e97e4f229eb12efe359c60e8.partial",
        "vectors/cell/new/c/0.b7f1fd25eb24400e9d0a55d027b5c839.partial",
        "vectors/cell/tsnew/zarr.json.__lock",
        "vectors/cell/tsnew/c/0.__lock",
        ".hidden",
    ] {
        assert!(is_temporary(rel), "{rel}");
        assert_eq!(refusal(rel), None, "{rel}");
        assert!(writable_place(rel, false), "{rel}");
    }
    assert!(!is_temporary("vectors/cell/new/zarr.json"));
    for rel in [
        "zarr.json",
        "vectors/zarr.json",
        "vectors/cell/zarr.json",
        "matrices/cell/zarr.json",
        "matrices/cell/gene/zarr.json",
    ] {
        assert!(is_group_document(rel), "{rel}");
        assert_eq!(refusal(rel), None, "{rel}");
        assert!(writable_place(rel, false), "{rel}");
    }
    for rel in [
        "vectors/cell/new/zarr.json",
        "daf/zarr.json",
        "matrices/a/b/c/zarr.json",
    ] {
        assert!(!is_group_document(rel), "{rel}");
    }
    for rel in [
        "notes",
        "daf/c/0",
        "vectors/cell/new/notes",
        "vectors//x/zarr.json",
    ] {
        assert!(refusal(rel).is_some(), "{rel}");
    }
    assert!(writable_place("vectors/cell/new", true));
    assert!(writable_place("vectors/cell/new/c/0", true));
    assert!(!writable_place("notes", true));
    assert!(!writable_place("notes", false));
}

#[test]
fn group_documents_are_dropped_only_when_they_change_nothing() {
    let plain = "{\"node_type\":\"group\",\"zarr_format\":3}";
    // zarr-python's group document, its root after consolidate_metadata, Julia's ZIP root.
    for (rel, doc) in [
        ("vectors/cell/zarr.json", plain),
        (
            "vectors/zarr.json",
            "{\"attributes\": {}, \"zarr_format\": 3, \"node_type\": \"group\"}",
        ),
        (
            "matrices/zarr.json",
            "{\"attributes\":{},\"zarr_format\":3,\"consolidated_metadata\":null,\"node_type\":\"group\"}",
        ),
        (
            "zarr.json",
            "{\"attributes\":{\"daf\":[1,0]},\"zarr_format\":3,\"consolidated_metadata\":{\"kind\":\"inline\",\"must_understand\":false,\"metadata\":{\"axes\":{\"attributes\":{},\"zarr_format\":3,\"consolidated_metadata\":{\"kind\":\"inline\",\"must_understand\":false,\"metadata\":{}},\"node_type\":\"group\"}}},\"node_type\":\"group\"}",
        ),
        (
            "zarr.json",
            "{\"attributes\":{\"daf\":[1,0]},\"node_type\":\"group\",\"zarr_format\":3}",
        ),
    ] {
        assert_eq!(group_document_noop(rel, doc.as_bytes(), None), Ok(()), "{doc}");
    }
    // Equal JSON to what is there.
    let old = b"{\"node_type\": \"group\", \"zarr_format\": 3, \"attributes\": {\"x\": 1}}";
    let new = b"{\"attributes\":{\"x\":1},\"zarr_format\":3,\"node_type\":\"group\"}";
    assert_eq!(
        group_document_noop("vectors/zarr.json", new, Some(old)),
        Ok(())
    );
    for (rel, doc) in [
        ("vectors/zarr.json", "{\"attributes\":{\"x\":1},\"zarr_format\":3,\"node_type\":\"group\"}"),
        ("vectors/zarr.json", "{\"attributes\":{\"daf\":[1,0]},\"zarr_format\":3,\"node_type\":\"group\"}"),
        ("zarr.json", "{\"attributes\":{\"daf\":[1,0],\"title\":\"x\"},\"zarr_format\":3,\"node_type\":\"group\"}"),
        ("zarr.json", "{\"attributes\":{\"daf\":[1,1]},\"zarr_format\":3,\"node_type\":\"group\"}"),
        ("vectors/zarr.json", "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[1]}"),
        ("vectors/zarr.json", "{\"zarr_format\":2}"),
        ("vectors/zarr.json", "{\"zarr_format\":3,\"node_type\":\"group\",\"extra\":true}"),
        ("vectors/zarr.json", ""),
    ] {
        let err = group_document_noop(rel, doc.as_bytes(), None).unwrap_err();
        assert!(err.starts_with(rel), "{err}");
    }
}

#[test]
fn items_are_complete_when_every_chunk_of_every_array_is_staged() {
    let id = m("m").unwrap();
    let mut files = vec![("matrices/cell/gene/m/zarr.json", ZP_MATRIX)];
    assert!(!complete(&index(&files), &id).unwrap());
    for chunk in ["c/0/0", "c/0/1", "c/1/0"] {
        files.push((
            Box::leak(format!("matrices/cell/gene/m/{chunk}").into_boxed_str()),
            "x",
        ));
    }
    // A temporary and an out-of-grid key do not count.
    files.push(("matrices/cell/gene/m/c/1/1.abc.partial", "x"));
    files.push(("matrices/cell/gene/m/c/2/0", "x"));
    assert!(!complete(&index(&files), &id).unwrap());
    files.push(("matrices/cell/gene/m/c/1/1", "x"));
    assert!(complete(&index(&files), &id).unwrap());

    // TensorStore: default encoding without a configuration is "/": a 2×1 grid.
    let files = [
        ("matrices/cell/gene/t/zarr.json", TS_MATRIX),
        ("matrices/cell/gene/t/c/0/0", "x"),
        ("matrices/cell/gene/t/c/1/0", "x"),
    ];
    assert!(complete(&index(&files), &m("t").unwrap()).unwrap());
    assert!(!complete(&index(&files[..2]), &m("t").unwrap()).unwrap());

    // v2 chunk keys, as the zarr.json says.
    let v2 = "{\"data_type\":\"int64\",\"fill_value\":0,\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}],\"shape\":[5],\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[3]}},\"chunk_key_encoding\":{\"name\":\"v2\",\"configuration\":{\"separator\":\".\"}},\"node_type\":\"array\",\"zarr_format\":3}";
    let files = [
        ("vectors/cell/k/zarr.json", v2),
        ("vectors/cell/k/0", "x"),
        ("vectors/cell/k/c/1", "x"),
    ];
    assert!(!complete(&index(&files), &v("cell", "k").unwrap()).unwrap());
    let files = [
        ("vectors/cell/k/zarr.json", v2),
        ("vectors/cell/k/0", "x"),
        ("vectors/cell/k/1", "x"),
    ];
    assert!(complete(&index(&files), &v("cell", "k").unwrap()).unwrap());
}

#[test]
fn sparse_items_need_their_index_arrays_and_nzval() {
    let group = "{\"node_type\":\"group\",\"zarr_format\":3}";
    let array = "{\"chunk_key_encoding\":{\"name\":\"default\"},\"data_type\":\"int64\",\"fill_value\":0,\"codecs\":[{\"name\":\"bytes\",\"configuration\":{\"endian\":\"little\"}}],\"shape\":[2],\"chunk_grid\":{\"name\":\"regular\",\"configuration\":{\"chunk_shape\":[2]}},\"node_type\":\"array\",\"zarr_format\":3}";
    let id = v("cell", "s").unwrap();
    let mut files = vec![
        ("vectors/cell/s/zarr.json", group),
        ("vectors/cell/s/nzind/zarr.json", array),
        ("vectors/cell/s/nzind/c/0", "x"),
    ];
    assert!(!complete(&index(&files), &id).unwrap());
    files.push(("vectors/cell/s/nzval/zarr.json", array));
    assert!(!complete(&index(&files), &id).unwrap());
    files.push(("vectors/cell/s/nzval/c/0", "x"));
    assert!(complete(&index(&files), &id).unwrap());
    let id = m("u").unwrap();
    let files = [
        ("matrices/cell/gene/u/zarr.json", group),
        ("matrices/cell/gene/u/colptr/zarr.json", array),
        ("matrices/cell/gene/u/colptr/c/0", "x"),
        ("matrices/cell/gene/u/nzval/zarr.json", array),
        ("matrices/cell/gene/u/nzval/c/0", "x"),
    ];
    assert!(!complete(&index(&files), &id).unwrap());
    assert!(!complete(&index(&[]), &id).unwrap());
    let bad = [(
        "vectors/cell/b/zarr.json",
        "{\"shape\":[2],\"node_type\":\"array\"}",
    )];
    assert!(complete(&index(&bad), &v("cell", "b").unwrap()).is_err());
}

#[test]
fn array_attributes_are_refused_and_dimension_names_accepted() {
    assert_eq!(
        attributes_refusal(&index(&[("vectors/cell/x/zarr.json", ZP_MATRIX)])).unwrap(),
        None
    );
    assert_eq!(
        attributes_refusal(&index(&[("vectors/cell/x/zarr.json", TS_MATRIX)])).unwrap(),
        None
    );
    let packed =
        "{\"attributes\":{\"daf_packed_format\":\"indexed+zipped\"},\"node_type\":\"array\"}";
    assert_eq!(
        attributes_refusal(&index(&[("vectors/cell/x/zarr.json", packed)])).unwrap(),
        None
    );
    for doc in [
        "{\"attributes\":{\"units\":\"m\"},\"node_type\":\"array\"}",
        "{\"attributes\":{\"_ARRAY_DIMENSIONS\":[\"cell\"]},\"node_type\":\"array\"}",
        "{\"attributes\":[],\"node_type\":\"array\"}",
        "{\"attributes\":{\"daf_packed_format\":\"zipped\"},\"node_type\":\"array\"}",
    ] {
        let why = attributes_refusal(&index(&[("vectors/cell/s/nzval/zarr.json", doc)]))
            .unwrap()
            .unwrap_or_else(|| panic!("{doc}"));
        assert!(why.starts_with("vectors/cell/s/nzval/zarr.json"), "{why}");
    }
}
