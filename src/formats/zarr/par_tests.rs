//! The ZarrDaf model read on several threads is the model read on one: same properties under the
//! same names, same bytes, and the same nodes skipped with the same errors in the same order
//! (v2 and v3, dense, sparse and string properties, hostile documents, directory and ZIP).

use std::path::Path;

use super::*;
use crate::formats::zarr::v2::{single_chunk_key, zarray_json, ZGROUP};
use crate::stores::conformance::write_zip;
use crate::stores::{dir::open_directory, zip::open_zip, Blob};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

/// Three threads even for a handful of arrays, so that every group is cut into slices.
const THREE: Split = Split {
    threads: 3,
    min_per_thread: 1,
};

fn vlen(items: &[&str]) -> Vec<u8> {
    let mut out = (items.len() as u32).to_le_bytes().to_vec();
    for item in items {
        out.extend((item.len() as u32).to_le_bytes());
        out.extend(item.as_bytes());
    }
    out
}

fn array(files: &mut Vec<(String, Vec<u8>)>, key: &str, dtype: &str, shape: &[u64], data: Vec<u8>) {
    let meta = zarray_json(dtype, dtype == "|O", shape);
    files.push((format!("{key}/.zarray"), meta.into_bytes()));
    files.push((format!("{key}/{}", single_chunk_key(shape.len())), data));
}

/// A Zarr v2 ZarrDaf over axis `cell` (3 entries) with 40 vectors of every kind (each with
/// content of its own) and 6 matrices; `p13` is not JSON and `p27` has the wrong shape, the
/// hostile documents whose errors must be reported as before.
fn generated() -> Vec<(String, Vec<u8>)> {
    let mut files = vec![(".zgroup".to_string(), ZGROUP.as_bytes().to_vec())];
    array(&mut files, "daf", "|u1", &[2], vec![1, 0]);
    array(&mut files, "axes/cell", "|O", &[3], vlen(&["a", "b", "c"]));
    for i in 0..40u8 {
        let key = format!("vectors/cell/p{i:02}");
        match i {
            13 => files.push((format!("{key}/.zarray"), b"{not json".to_vec())),
            27 => array(&mut files, &key, "<f4", &[4], vec![i; 16]),
            _ if i % 4 == 0 => array(&mut files, &key, "<f4", &[3], vec![i; 12]),
            _ if i % 4 == 1 => array(&mut files, &key, "<i8", &[3], vec![i; 24]),
            _ if i % 4 == 2 => {
                let text = format!("s{i}");
                array(&mut files, &key, "|O", &[3], vlen(&[&text, "", "x"]));
            }
            _ => {
                files.push((format!("{key}/.zgroup"), ZGROUP.as_bytes().to_vec()));
                let at = u64::from(i % 3 + 1).to_le_bytes().to_vec();
                array(&mut files, &format!("{key}/nzind"), "<i8", &[1], at);
                let value = f64::from(i).to_le_bytes().to_vec();
                array(&mut files, &format!("{key}/nzval"), "<f8", &[1], value);
            }
        }
    }
    for i in 0..6u8 {
        let key = format!("matrices/cell/cell/m{i}");
        array(&mut files, &key, "<f8", &[3, 3], vec![i; 72]);
    }
    files
}

fn bytes(blob: &Blob) -> Vec<u8> {
    blob.bytes().unwrap().as_slice().to_vec()
}

/// Everything a reader of the model sees: its debug form (names, types, string properties'
/// names, mtimes) and the bytes of every dense and sparse array.
fn fingerprint(ds: &Dataset) -> String {
    let mut out = format!("{ds:?}\n");
    let vectors = ds.vectors.iter().map(|(a, p)| (a.clone(), p));
    let matrices = ds
        .matrices
        .iter()
        .map(|((r, c), p)| (format!("{r}/{c}"), p));
    for (group, props) in vectors.chain(matrices) {
        for (name, p) in props {
            let blobs = match &p.payload {
                Payload::Dense { data, .. } => vec![bytes(data)],
                Payload::Sparse(s) => {
                    let (index, nzval) = (&s.index, &s.nzval);
                    let mut list = match index {
                        SparseIndex::Vector { nzind } => vec![bytes(nzind)],
                        SparseIndex::Matrix { colptr, rowval } => {
                            vec![bytes(colptr), bytes(rowval)]
                        }
                    };
                    list.extend(nzval.iter().map(|v| bytes(v)));
                    list
                }
                _ => Vec::new(),
            };
            out.push_str(&format!("{group}/{name}: {blobs:?}\n"));
        }
    }
    out
}

/// Opens the store at `path`, a directory or a ZIP archive (anew for each read, so that what one
/// read makes of the lazy blobs is not seen by the next).
fn open(path: &Path) -> StoreIndex {
    if path.extension().is_some_and(|e| e == "zip") {
        open_zip(path).unwrap()
    } else {
        open_directory(path).unwrap()
    }
}

/// The model's fingerprint and the skipped nodes, read from the store at `path` with `split`.
fn read(path: &Path, split: Split) -> (String, Vec<String>) {
    let mut skipped = Vec::new();
    let mut note = |key: &str, e: FormatError| skipped.push(format!("{key}: {e}"));
    let ds = read_zarr_daf_with(&open(path), path, split, &mut note).unwrap();
    (fingerprint(&ds), skipped)
}

fn same_either_way(path: &Path) -> usize {
    let (one, skipped_one) = read(path, Split::SEQUENTIAL);
    for split in [
        THREE,
        Split::per_core(1),
        Split::per_core(MIN_ARRAYS_PER_THREAD),
    ] {
        let (many, skipped_many) = read(path, split);
        assert_eq!(one, many, "{} with {split:?}", path.display());
        assert_eq!(
            skipped_one,
            skipped_many,
            "{} with {split:?}",
            path.display()
        );
    }
    skipped_one.len()
}

#[test]
fn the_model_read_in_parallel_is_the_model_read_on_one_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let files = generated();
    let given: Vec<(&str, &[u8])> = files.iter().map(|(k, v)| (k.as_str(), &v[..])).collect();
    let dir = tmp.path().join("gen.daf.zarr");
    for (key, content) in &given {
        let file = dir.join(key);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
    let zip = tmp.path().join("gen.daf.zarr.zip");
    write_zip(&zip, &given);
    for path in [dir, zip] {
        let (model, skipped) = read(&path, THREE);
        let lines = |start: &str| model.lines().filter(|l| l.starts_with(start)).count();
        assert_eq!(lines("cell/p"), 38, "{model}");
        assert_eq!(lines("cell/cell/m"), 6, "{model}");
        // The two hostile documents, each with its own error, in source order.
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(skipped[0].starts_with("vectors/cell/p13: "), "{skipped:?}");
        assert!(skipped[0].contains("JSON"), "{skipped:?}");
        assert!(
            skipped[1].starts_with("vectors/cell/p27: shape"),
            "{skipped:?}"
        );
        assert_eq!(same_either_way(&path), 2);
    }
    for name in [
        "zarr_v2.daf.zarr",
        "zarr_v2.daf.zarr.zip",
        "zarr_v3.daf.zarr",
        "zarr_v3.daf.zarr.zip",
    ] {
        assert_eq!(same_either_way(&Path::new(VECTORS).join(name)), 0, "{name}");
    }
}
