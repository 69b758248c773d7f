//! The h5ad of the `anndata-view.md` §7 example, read back with libhdf5.

use std::path::Path;

use hdf5_metno::types::VarLenUnicode;

use super::*;
use crate::formats::files::read_files_daf;
use crate::stores::blob::RangeSource;
use crate::stores::dir::open_directory;
use crate::views::hdf5::Hdf5File;

const TINY: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/vectors/files_v1_0.daf"
);

/// The h5ad of the tiny data set under `obs`, `var`, `x`, opened with libhdf5.
fn made(obs: &str, var: &str, x: &str) -> (tempfile::TempDir, hdf5_metno::File) {
    let dataset =
        read_files_daf(&open_directory(Path::new(TINY)).unwrap(), Path::new(TINY)).unwrap();
    let selection = Selection {
        obs: obs.into(),
        var: var.into(),
        x: x.into(),
    };
    let file = Hdf5File::new("tiny.h5ad", plan(&dataset, &selection));
    let image = file.read_range(0, file.size().unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.h5ad");
    std::fs::write(&path, image.as_slice()).unwrap();
    let h5 = hdf5_metno::File::open(&path).unwrap();
    (dir, h5)
}

fn text(attr: hdf5_metno::Attribute) -> String {
    attr.read_scalar::<VarLenUnicode>()
        .unwrap()
        .as_str()
        .to_string()
}

fn texts(values: Vec<VarLenUnicode>) -> Vec<String> {
    values.iter().map(|s| s.as_str().to_string()).collect()
}

#[test]
fn the_worked_example_as_h5ad() {
    let (_dir, h5) = made("cell", "gene", "expr");
    assert_eq!(text(h5.attr("encoding-type").unwrap()), "anndata");
    assert_eq!(text(h5.attr("encoding-version").unwrap()), "0.1.0");
    let mut members = h5.member_names().unwrap();
    members.sort();
    let want = [
        "X", "layers", "obs", "obsm", "obsp", "uns", "var", "varm", "varp",
    ];
    assert_eq!(members, want);
    // expr is stored as (cell, gene) only: X is its C-order transpose, made by range.
    let x = h5.dataset("X").unwrap();
    assert_eq!(x.shape(), [3, 2]);
    assert_eq!(text(x.attr("encoding-type").unwrap()), "array");
    let expr: Vec<f64> = std::fs::read(Path::new(TINY).join("matrices/cell/gene/expr.data"))
        .unwrap()
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect();
    // Daf's column-major cell x gene: expr[g * 3 + c]; X[c][g].
    let want: Vec<f64> = (0..3)
        .flat_map(|c| (0..2).map(move |g| (c, g)))
        .map(|(c, g)| expr[g * 3 + c])
        .collect();
    assert_eq!(x.read_raw::<f64>().unwrap(), want);
    // The sparse layer: csc (stored as (cell, gene) only), 0-based indices.
    let umis = h5.group("layers/umis").unwrap();
    assert_eq!(text(umis.attr("encoding-type").unwrap()), "csc_matrix");
    assert_eq!(
        umis.attr("shape").unwrap().read_raw::<i64>().unwrap(),
        [3, 2]
    );
    let indptr = umis.dataset("indptr").unwrap().read_raw::<i64>();
    let indptr = indptr.or_else(|_| {
        umis.dataset("indptr")
            .unwrap()
            .read_raw::<i32>()
            .map(|v| v.into_iter().map(i64::from).collect())
    });
    assert_eq!(indptr.unwrap().first(), Some(&0));
    // obs: the axis entries as `_index`, the columns sorted, strings variable-length.
    let obs = h5.group("obs").unwrap();
    assert_eq!(text(obs.attr("encoding-type").unwrap()), "dataframe");
    assert_eq!(text(obs.attr("_index").unwrap()), "_index");
    let index: Vec<VarLenUnicode> = obs.dataset("_index").unwrap().read_raw().unwrap();
    let cells = std::fs::read_to_string(Path::new(TINY).join("axes/cell.txt")).unwrap();
    assert_eq!(texts(index), cells.lines().collect::<Vec<_>>());
    let order: Vec<VarLenUnicode> = obs.attr("column-order").unwrap().read_raw().unwrap();
    let order = texts(order);
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted);
    assert!(!order.is_empty());
    // var has no columns: column-order is h5py's empty list (an empty float64 array).
    let var = h5.group("var").unwrap();
    let none = var.attr("column-order").unwrap().read_raw::<f64>().unwrap();
    assert!(none.is_empty());
    // uns: the scalars, and X_is set to the chosen X (not the default "X").
    let uns = h5.group("uns").unwrap();
    let x_is = uns.dataset("X_is").unwrap();
    assert_eq!(text(x_is.attr("encoding-type").unwrap()), "string");
    assert_eq!(
        x_is.read_scalar::<VarLenUnicode>().unwrap().as_str(),
        "expr"
    );
}
