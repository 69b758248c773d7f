//! The Zarr v3 reader against the packed and foreign test data of `tests/data/packed`
//! (`make_packed.py`, `expected.json`): every scalar, axis entry and property value of each
//! ZarrDaf v3 source (directory, ZIP, multi-data-set groups, foreign zarr-python 3 arrays), and
//! which arrays are recorded as packed. No mount: the model the views are built from.

use std::collections::BTreeSet;
use std::sync::Arc;

use daf_mount::formats::model::{Dataset, Payload, Property, SparseIndex};
use daf_mount::formats::source::open_source;
use daf_mount::formats::strings::{decode_vlen, Strings};
use daf_mount::formats::types::NumType;
use daf_mount::stores::Blob;
use serde_json::Value;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");

/// The numbers of a blob of type `t`, as JSON numbers (f64 for floats).
fn numbers(blob: &Arc<Blob>, t: NumType) -> Vec<f64> {
    let data = blob.bytes().unwrap();
    let size = t.size() as usize;
    data.as_slice()
        .chunks_exact(size)
        .map(|b| {
            let mut w = [0u8; 8];
            w[..size].copy_from_slice(b);
            match t {
                NumType::Bool | NumType::UInt8 => f64::from(b[0]),
                NumType::Int8 => f64::from(b[0] as i8),
                NumType::Int16 => f64::from(i16::from_le_bytes([b[0], b[1]])),
                NumType::UInt16 => f64::from(u16::from_le_bytes([b[0], b[1]])),
                NumType::Int32 => f64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                NumType::UInt32 => f64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                NumType::Float32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                NumType::Int64 => i64::from_le_bytes(w) as f64,
                NumType::UInt64 => u64::from_le_bytes(w) as f64,
                NumType::Float64 => f64::from_le_bytes(w),
            }
        })
        .collect()
}

fn expected_numbers(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap_or_else(|| panic!("{x}")))
        .collect()
}

fn texts(s: &Strings) -> Vec<String> {
    let data = s.vlen().bytes().unwrap();
    decode_vlen(data.as_slice(), s.count())
        .unwrap()
        .into_iter()
        .map(|b| String::from_utf8(b.to_vec()).unwrap())
        .collect()
}

fn expected_texts(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

/// A sparse expectation made dense (Zarr stores sparse strings dense).
fn densified(want: &Value, len: usize) -> Vec<String> {
    let mut out = vec![String::new(); len];
    for (i, v) in want["nzind"]
        .as_array()
        .unwrap()
        .iter()
        .zip(expected_texts(&want["nzval"]))
    {
        out[i.as_u64().unwrap() as usize - 1] = v;
    }
    out
}

fn property<'a>(ds: &'a Dataset, path: &str) -> &'a Property {
    let parts: Vec<&str> = path.split('/').collect();
    match parts.as_slice() {
        ["vectors", axis, name] => &ds.vectors[*axis][*name],
        ["matrices", rows, cols, name] => {
            &ds.matrices[&(rows.to_string(), cols.to_string())][*name]
        }
        _ => panic!("{path}"),
    }
}

/// Checks `prop` against `want`; with `packing_known`, also which of its arrays are packed
/// (the foreign data set's expectations do not say).
fn check_property(what: &str, prop: &Property, want: &Value, packing_known: bool) {
    let len: u64 = want["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_u64().unwrap())
        .product();
    match &prop.payload {
        Payload::Dense { eltype, data } => {
            assert_eq!(eltype.julia_name(), want["eltype"], "{what}");
            assert_eq!(
                numbers(data, *eltype),
                expected_numbers(&want["values"]),
                "{what}"
            );
        }
        Payload::DenseStrings(s) if want["format"] == "sparse" => {
            assert_eq!(texts(s), densified(want, len as usize), "{what}");
        }
        Payload::DenseStrings(s) => assert_eq!(texts(s), expected_texts(&want["values"]), "{what}"),
        Payload::Sparse(sparse) => {
            let (eltype, indtype) = (sparse.eltype, sparse.indtype);
            assert_eq!(eltype.julia_name(), want["eltype"], "{what}");
            assert_eq!(indtype.julia_name(), want["indtype"], "{what}");
            match &sparse.index {
                SparseIndex::Vector { nzind } => {
                    assert_eq!(numbers(nzind, indtype), expected_numbers(&want["nzind"]));
                }
                SparseIndex::Matrix { colptr, rowval } => {
                    assert_eq!(numbers(colptr, indtype), expected_numbers(&want["colptr"]));
                    assert_eq!(numbers(rowval, indtype), expected_numbers(&want["rowval"]));
                }
            }
            match &sparse.nzval {
                Some(values) => assert_eq!(
                    numbers(values, eltype),
                    expected_numbers(&want["nzval"]),
                    "{what}"
                ),
                None => assert!(want["nzval"].is_null(), "{what}: nzval missing"),
            }
        }
        other => panic!("{what}: {other:?}"),
    }
    if !packing_known {
        return;
    }
    let packed: BTreeSet<String> = prop.packed.keys().cloned().collect();
    let mut want_packed: BTreeSet<String> = want["packed"]
        .as_array()
        .map(|l| l.iter().map(|c| c.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    if matches!(prop.payload, Payload::DenseStrings(_)) && !want_packed.is_empty() {
        // Sparse strings are one dense array in Zarr: packed as a whole.
        want_packed = BTreeSet::from([String::new()]);
    }
    assert_eq!(packed, want_packed, "{what}: packed components");
}

#[test]
fn every_zarr_v3_source_reads_as_expected() {
    let expected: Value =
        serde_json::from_slice(&std::fs::read(format!("{DATA}/expected.json")).unwrap()).unwrap();
    let mut checked = 0;
    for (source, name) in expected["sources"].as_object().unwrap() {
        if !source.contains(".zarr") {
            continue; // FilesDaf and ZipDaf sources: the files11 reader's tests.
        }
        let want = &expected["datasets"][name.as_str().unwrap()];
        let opened = open_source(&format!("{DATA}/{source}")).unwrap_or_else(|e| panic!("{e}"));
        let ds = &opened.datasets[0].dataset;
        assert_eq!(ds.zarr_format, Some(3), "{source}");
        for (scalar, w) in want["scalars"].as_object().unwrap() {
            let got: Value = serde_json::from_str(&ds.scalars[scalar].scalar.value_json()).unwrap();
            let same = match (got.as_f64(), w["value"].as_f64()) {
                (Some(a), Some(b)) => a == b,
                _ => got == w["value"],
            };
            assert!(same, "{source}: scalar {scalar}: {got} vs {}", w["value"]);
        }
        for (axis, entries) in want["axes"].as_object().unwrap() {
            assert_eq!(
                texts(&ds.axes[axis].entries),
                expected_texts(entries),
                "{source}: {axis}"
            );
        }
        for (path, w) in want["properties"].as_object().unwrap() {
            let known = name != "foreign";
            check_property(&format!("{source}: {path}"), property(ds, path), w, known);
        }
        checked += 1;
    }
    assert!(
        checked >= 5,
        "only {checked} Zarr v3 sources in expected.json"
    );
}
