//! Writing H5df files for tests and benchmarks with libhdf5 (the `hdf5` crate), laid out as
//! DataAxesFormats writes them (`h5df-format.md`): a `daf` dataset `[1, 0]`, the four groups,
//! axes as variable-length UTF-8 strings, flat (contiguous, unfiltered) datasets, matrices of
//! dataspace `[ncols, nrows]`.

use std::path::Path;

use hdf5_metno::types::VarLenUnicode;
use hdf5_metno::{File, Group};

/// A new H5df file at `path` with its `daf` marker and (empty) groups.
pub fn create(path: &Path) -> File {
    let file = File::create(path).unwrap();
    let daf = file.new_dataset::<u8>().shape([2]).create("daf").unwrap();
    daf.write_raw(&[1u8, 0]).unwrap();
    for group in ["scalars", "axes", "vectors", "matrices"] {
        file.create_group(group).unwrap();
    }
    file
}

/// The group at `path` (created with its parents when missing).
pub fn group(file: &File, path: &str) -> Group {
    let mut at = file.group("/").unwrap();
    for part in path.split('/') {
        at = match at.group(part) {
            Ok(g) => g,
            Err(_) => at.create_group(part).unwrap(),
        };
    }
    at
}

/// Axis `name` with entries `PREFIX0`, `PREFIX1`, ... (and its `vectors/` group).
pub fn axis(file: &File, name: &str, prefix: &str, n: usize) {
    let entries: Vec<VarLenUnicode> = (0..n)
        .map(|i| format!("{prefix}{i}").parse().unwrap())
        .collect();
    let ds = group(file, "axes")
        .new_dataset::<VarLenUnicode>()
        .shape([n])
        .create(name)
        .unwrap();
    ds.write_raw(&entries).unwrap();
    group(file, &format!("vectors/{name}"));
}

/// A flat dataset `name` in `group` of `shape` holding `data` (contiguous, unfiltered).
pub fn flat<T: hdf5_metno::H5Type>(group: &Group, name: &str, shape: &[usize], data: &[T]) {
    let ds = group
        .new_dataset::<T>()
        .shape(shape.to_vec())
        .create(name)
        .unwrap();
    assert!(!ds.is_chunked(), "{name} must be contiguous");
    ds.write_raw(data).unwrap();
}
