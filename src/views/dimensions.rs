//! xarray's dimension names for the arrays of a Zarr view (`--dimension-names`): the
//! `_ARRAY_DIMENSIONS` attribute of Zarr v2 and the `dimension_names` of Zarr v3.
//!
//! xarray opens a Zarr group as a data set whose variables are the group's arrays, and merges
//! their dimensions by name; `open_datatree` also makes every group inherit its ancestors'
//! dimensions, which must then agree in length. So a name means one length wherever it is seen:
//! - an axis `axes/A` and a vector `vectors/A/N` are `[A]` (in `axes/`, each axis array is then
//!   the coordinate of its own dimension);
//! - a matrix `matrices/R/C/N` (Zarr shape `[ncols, nrows]`) is `[C, R]`, and `[A, A_rows]` when
//!   both axes are `A` (the columns keep the axis name, as a vector of `A` would);
//! - the components of a sparse property (groups of their own) are `[nnz]` (`nzind`, `rowval`,
//!   `nzval`: one length per group) and `[ncolptr]` (`colptr`: `ncols + 1`);
//! - every scalar is `[scalar]` (one length, 1), the root's `daf` array of Zarr v2 `[daf_version]`.
//!
//! A name that is not an axis's own (`scalar`, `nnz`, `A_rows`…) gets `_` appended until it is
//! no axis's name, and differs from the others (`scalar` also from every scalar's name: xarray
//! would take a scalar named so for the coordinate of the dimension); a matrix dimension named
//! like a matrix of its group (which xarray would take for a two-dimensional coordinate and
//! refuse) likewise.

use std::collections::BTreeSet;

use crate::formats::model::Dataset;

/// The dimension names of every array of the Zarr view of one data set.
#[derive(Clone, Debug)]
pub struct DimensionNames {
    /// Every axis name: names of our own must avoid them.
    axes: BTreeSet<String>,
    /// The names of our own, chosen once per data set.
    daf: String,
    scalar: String,
    nnz: String,
    colptr: String,
    /// `(rows, cols)` → the names of the matrices of `matrices/R/C`.
    matrices: std::collections::BTreeMap<(String, String), BTreeSet<String>>,
}

/// `base`, or `base` with as many `_` appended as needed, that is not in `taken`.
fn fresh(base: &str, taken: &BTreeSet<String>) -> String {
    let mut name = base.to_string();
    while taken.contains(&name) {
        name.push('_');
    }
    name
}

impl DimensionNames {
    /// The names for `dataset`.
    pub fn new(dataset: &Dataset) -> DimensionNames {
        let axes: BTreeSet<String> = dataset.axes.keys().cloned().collect();
        let mut taken = axes.clone();
        let mut own = |base: &str| {
            let name = fresh(base, &taken);
            taken.insert(name.clone());
            name
        };
        let (daf, nnz, colptr) = (own("daf_version"), own("nnz"), own("ncolptr"));
        // Scalars are variables of `scalars/`: their dimension must not be named like one.
        let scalar = {
            let mut avoid = taken.clone();
            avoid.extend(dataset.scalars.keys().cloned());
            fresh("scalar", &avoid)
        };
        let matrices = dataset
            .matrices
            .iter()
            .map(|(pair, props)| (pair.clone(), props.keys().map(String::from).collect()))
            .collect();
        DimensionNames {
            axes,
            daf,
            scalar,
            nnz,
            colptr,
            matrices,
        }
    }

    /// The `[columns, rows]` dimensions of the matrices of `matrices/R/C`.
    fn matrix(&self, rows: &str, cols: &str) -> [String; 2] {
        let empty = BTreeSet::new();
        let names = self
            .matrices
            .get(&(rows.to_string(), cols.to_string()))
            .unwrap_or(&empty);
        // What a name of our own must avoid: axes, matrices of the group, the other names.
        let mut avoid: BTreeSet<String> = self.axes.union(names).cloned().collect();
        avoid.extend([&self.daf, &self.scalar, &self.nnz, &self.colptr].map(String::clone));
        let col = if names.contains(cols) {
            fresh(cols, &avoid)
        } else {
            cols.to_string()
        };
        avoid.insert(col.clone());
        let row = if rows != cols && !names.contains(rows) {
            rows.to_string()
        } else if rows == cols {
            fresh(&format!("{rows}_rows"), &avoid)
        } else {
            fresh(rows, &avoid)
        };
        [col, row]
    }

    /// The dimension names of the array at `path` (relative to the data set root, e.g.
    /// `vectors/cell/score`, `matrices/cell/gene/UMIs/colptr`), in Zarr order; `None` for a
    /// path that is not an array of the Daf layout.
    pub fn of(&self, path: &str) -> Option<Vec<String>> {
        let parts: Vec<&str> = path.split('/').collect();
        let names = match parts.as_slice() {
            ["daf"] => vec![self.daf.clone()],
            ["scalars", _] => vec![self.scalar.clone()],
            ["axes", axis] | ["vectors", axis, _] => vec![axis.to_string()],
            ["vectors", _, _, "nzind" | "nzval"] | ["matrices", _, _, _, "rowval" | "nzval"] => {
                vec![self.nnz.clone()]
            }
            ["matrices", _, _, _, "colptr"] => vec![self.colptr.clone()],
            ["matrices", rows, cols, _] => self.matrix(rows, cols).to_vec(),
            _ => return None,
        };
        Some(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::model::{Axis, Payload, Property};
    use crate::formats::strings::Strings;
    use crate::stores::{Blob, Bytes};
    use std::time::SystemTime;

    fn dataset(axes: &[&str], matrices: &[(&str, &str, &str)]) -> Dataset {
        let strings = || Strings::from_lines(Blob::ready(Bytes::from_vec(b"x\n".to_vec())), 1);
        let mut ds = Dataset::default();
        for a in axes {
            let axis = Axis {
                entries: strings(),
                mtime: SystemTime::UNIX_EPOCH,
            };
            ds.axes.insert(a.to_string(), axis);
        }
        for (r, c, n) in matrices {
            let p = Property {
                payload: Payload::DenseStrings(strings()),
                mtime: SystemTime::UNIX_EPOCH.into(),
                packed: Default::default(),
            };
            ds.matrices
                .entry((r.to_string(), c.to_string()))
                .or_default()
                .insert(n.to_string(), p);
        }
        ds
    }

    fn of(names: &DimensionNames, path: &str) -> Vec<String> {
        names.of(path).unwrap()
    }

    #[test]
    fn axes_name_their_arrays_and_square_matrices_get_distinct_names() {
        let ds = dataset(&["cell", "gene"], &[]);
        let n = DimensionNames::new(&ds);
        assert_eq!(of(&n, "axes/cell"), ["cell"]);
        assert_eq!(of(&n, "vectors/gene/x"), ["gene"]);
        assert_eq!(of(&n, "matrices/cell/gene/UMIs"), ["gene", "cell"]);
        assert_eq!(of(&n, "matrices/cell/cell/d"), ["cell", "cell_rows"]);
        assert_eq!(of(&n, "vectors/gene/x/nzind"), ["nnz"]);
        assert_eq!(of(&n, "matrices/cell/gene/UMIs/nzval"), ["nnz"]);
        assert_eq!(of(&n, "matrices/cell/gene/UMIs/colptr"), ["ncolptr"]);
        assert_eq!(of(&n, "scalars/version"), ["scalar"]);
        assert_eq!(of(&n, "daf"), ["daf_version"]);
        assert_eq!(n.of("vectors/gene"), None);
        assert_eq!(n.of("matrices/cell/gene/UMIs/other"), None);
    }

    #[test]
    fn names_of_our_own_never_take_an_axis_or_matrix_name() {
        let ds = dataset(
            &["nnz", "nnz_", "scalar", "cell", "cell_rows", "daf_version"],
            &[("cell", "cell", "cell"), ("nnz", "cell", "nnz")],
        );
        let n = DimensionNames::new(&ds);
        assert_eq!(of(&n, "vectors/nnz/x/nzind"), ["nnz__"]);
        assert_eq!(of(&n, "scalars/s"), ["scalar_"]);
        assert_eq!(of(&n, "daf"), ["daf_version_"]);
        let square = of(&n, "matrices/cell/cell/m");
        assert_eq!(square, ["cell_", "cell_rows_"]);
        // A matrix named like its rows axis: the rows dimension is renamed, the columns kept.
        assert_eq!(of(&n, "matrices/nnz/cell/m"), ["cell", "nnz___"]);
        let ours = [
            of(&n, "daf"),
            of(&n, "scalars/s"),
            of(&n, "vectors/nnz/x/nzind"),
            of(&n, "matrices/nnz/cell/m/colptr"),
        ]
        .concat();
        let distinct: BTreeSet<_> = ours.iter().collect();
        assert_eq!(distinct.len(), ours.len());
        for name in ours.iter().chain(&square) {
            assert!(!ds.axes.contains_key(name), "{name}");
        }
    }
}
