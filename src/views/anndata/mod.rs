//! The AnnData view (`--anndata`, `anndata-view.md`): `NAME.anndata.zarr/`, a read-only Zarr
//! store in the AnnData on-disk format (in the mount's Zarr format, v2 or v3), so that
//! `anndata.read_zarr`, `anndata.experimental.read_lazy` and scanpy open a Daf data set as it is.
//!
//! Upstream's mapping (`daf_as_anndata`, here [`walk`]): obs and var are two axes ([`select`]),
//! X one matrix between them, `layers` the other matrices of the pair, `obsp`/`varp` the square
//! matrices, obs/var columns the axes' vectors, `uns` the scalars. A numeric payload is the
//! model's very blob: a matrix stored as (var, obs) is X in C order as it is, one stored only as
//! (obs, var) the same bytes in F order; a sparse matrix is a `csr_matrix` (or `csc_matrix`)
//! whose `data` is `nzval`. What is not the source's bytes (0-based sparse indices, densified
//! sparse columns, strings) is made when read, by range where it can be large ([`derived`]).
//!
//! The walk hands its elements to an [`Elements`]: the Zarr store of the view ([`zarr`]: v2
//! `order: "F"` or v3's `transpose` codec, chunks of at most 8 MiB, the consolidated metadata).

pub(in crate::views) mod derived;
pub mod layout;
mod select;
#[cfg(test)]
mod tests;
mod zarr;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use serde_json::{json, Value};

use crate::formats::model::{Dataset, Payload, Property, SparseIndex};
use crate::formats::scalar::{Scalar, ScalarValue};
use crate::formats::strings::Strings;
use crate::formats::types::{ElementType, NumType};
use crate::stores::{lock, Blob, Bytes};

use super::dataset_mtime;

pub use select::{select, Request, Selection};

/// The directory suffix of the view (`pbmc.anndata.zarr`).
pub const SUFFIX: &str = ".anndata.zarr";

/// What an array holds.
#[derive(Clone, Copy)]
pub(in crate::views) enum Element {
    Num(NumType),
    Strings,
}

impl Element {
    fn of(t: ElementType) -> Element {
        match t {
            ElementType::Num(t) => Element::Num(t),
            ElementType::String => Element::Strings,
        }
    }

    fn element_type(self) -> ElementType {
        match self {
            Element::Num(t) => ElementType::Num(t),
            Element::Strings => ElementType::String,
        }
    }
}

/// What an array holds, its shape, and its order (C, or F if `fortran`).
#[derive(Clone, Copy)]
pub(in crate::views) struct Array<'a> {
    pub(in crate::views) element: Element,
    pub(in crate::views) shape: &'a [u64],
    pub(in crate::views) fortran: bool,
}

impl Array<'_> {
    /// An array in C order.
    fn c(element: Element, shape: &[u64]) -> Array<'_> {
        Array {
            element,
            shape,
            fortran: false,
        }
    }
}

/// An element's `encoding-type` and `encoding-version` attributes (and any others).
fn encoding(kind: &str, version: &str) -> Value {
    json!({ "encoding-type": kind, "encoding-version": version })
}

/// Where the mapping puts the elements it makes: the Zarr view (`zarr::Builder`), or the plan
/// of the h5ad file. Parents come before their children.
pub(in crate::views) trait Elements {
    /// Whether names must also suit Zarr v3 (no leading `__`).
    fn v3(&self) -> bool;
    /// A group at `path` (`""`: the root) with its attributes.
    fn group(&mut self, path: &str, attributes: Value);
    /// An array at `path` with its attributes: `content` holds its numbers in its order (C, or
    /// F if `array.fortran`), or its strings in vlen-utf8 in C order.
    fn array(
        &mut self,
        path: &str,
        attributes: Value,
        array: Array<'_>,
        content: Arc<Blob>,
        mtime: SystemTime,
    );
}

/// The AnnData of `dataset` under `selection`, element by element into `b`; returns the root's
/// attributes (given to `b.group("", …)` first).
pub(in crate::views) fn walk(
    b: &mut impl Elements,
    dataset: &Dataset,
    selection: &Selection,
) -> Value {
    let v3 = b.v3();
    let root_attributes = encoding("anndata", "0.1.0");
    b.group("", root_attributes.clone());
    let (obs, var) = (selection.obs.as_str(), selection.var.as_str());
    let len = |axis: &str| dataset.axes.get(axis).map_or(0, |a| a.len());
    let (n_obs, n_var) = (len(obs), len(var));
    // The matrices of the pair: (var, obs) first (the natural encoding), then those stored only
    // as (obs, var), flipped.
    let pair = |rows: &str, cols: &str| dataset.matrices.get(&(rows.to_string(), cols.to_string()));
    let mut joined: BTreeMap<&str, (&Property, bool)> = BTreeMap::new();
    for (props, flipped) in [(pair(obs, var), true), (pair(var, obs), false)] {
        for (name, property) in props.into_iter().flat_map(|p| p.iter()) {
            joined.insert(name, (property, flipped));
        }
    }
    let shape = |flipped: bool| match flipped {
        true => (n_obs, n_var),
        false => (n_var, n_obs),
    };
    if let Some(&(property, flipped)) = joined.get(selection.x.as_str()) {
        matrix(b, "X", property, shape(flipped), flipped);
    }
    b.group("layers", encoding("dict", "0.1.0"));
    for (name, (property, flipped)) in &joined {
        if *name != selection.x && shown_name(name, v3) {
            let path = format!("layers/{name}");
            matrix(b, &path, property, shape(*flipped), *flipped);
        }
    }
    for (group, axis, n) in [("obs", obs, n_obs), ("var", var, n_var)] {
        dataframe(b, dataset, group, axis, n);
        b.group(&format!("{group}m"), encoding("dict", "0.1.0"));
        b.group(&format!("{group}p"), encoding("dict", "0.1.0"));
        for (name, property) in pair(axis, axis).into_iter().flat_map(|p| p.iter()) {
            if shown_name(name, v3) {
                let path = format!("{group}p/{name}");
                matrix(b, &path, property, (n, n), false);
            }
        }
    }
    uns(b, dataset, selection);
    root_attributes
}

/// Whether a Daf name can be a key of the view (`anndata-view.md` §5): a name Zarr cannot hold
/// is left out, and logged once.
fn shown_name(name: &str, v3: bool) -> bool {
    let fits = !(name.is_empty()
        || name == "."
        || name == ".."
        || name.contains('/')
        || (v3 && name.starts_with("__")));
    if !fits {
        static LOGGED: OnceLock<Mutex<HashSet<String>>> = OnceLock::new();
        if lock(LOGGED.get_or_init(Mutex::default)).insert(name.to_string()) {
            log::warn!("the AnnData view leaves out {name:?}: Zarr cannot name a node so");
        }
    }
    fits
}

/// Matrix `property` at `path`: Daf's column-major `rows` × `cols` bytes; shown as the C-order
/// `[cols, rows]` array (its natural reading), or if `flipped` (stored as (obs, var) only) as
/// the `[rows, cols]` array in F order / CSC, so that AnnData's shape is always `[n_obs, n_var]`.
fn matrix(b: &mut impl Elements, path: &str, property: &Property, dims: (u64, u64), flipped: bool) {
    let (rows, cols) = dims;
    let shape = match flipped {
        true => [rows, cols],
        false => [cols, rows],
    };
    let mtime = property.mtime.get();
    match &property.payload {
        Payload::Dense { eltype, data } => {
            let array = Array {
                element: Element::Num(*eltype),
                shape: &shape,
                fortran: flipped,
            };
            b.array(path, encoding("array", "0.2.0"), array, data.clone(), mtime);
        }
        Payload::DenseStrings(strings) => string_matrix(b, path, strings, dims, flipped, mtime),
        Payload::SparseStrings(s) => string_matrix(b, path, &s.dense, dims, flipped, mtime),
        Payload::Sparse(sparse) => {
            let SparseIndex::Matrix { colptr, rowval } = &sparse.index else {
                return;
            };
            let (eltype, indtype) = (sparse.eltype, sparse.indtype);
            let nnz = rowval.len().unwrap_or(0) / indtype.size();
            let kind = if flipped { "csc_matrix" } else { "csr_matrix" };
            let mut attributes = encoding(kind, "0.1.0");
            attributes["shape"] = json!(shape);
            b.group(path, attributes);
            let what = |part: &str| format!("{path}/{part}");
            let data = match &sparse.nzval {
                Some(nzval) => nzval.clone(),
                None => derived::ones(nnz),
            };
            let index = Element::Num(derived::widened(indtype));
            let ptrs = cols.saturating_add(1);
            let parts = [
                ("data", Element::Num(eltype), nnz, data),
                (
                    "indices",
                    index,
                    nnz,
                    derived::shifted(rowval, indtype, nnz, &what("indices")),
                ),
                (
                    "indptr",
                    index,
                    ptrs,
                    derived::shifted(colptr, indtype, ptrs, &what("indptr")),
                ),
            ];
            for (part, element, len, content) in parts {
                b.array(
                    &what(part),
                    json!({}),
                    Array::c(element, &[len]),
                    content,
                    mtime,
                );
            }
        }
    }
}

/// A String matrix: a 2-D `string-array`, always in C order.
fn string_matrix(
    b: &mut impl Elements,
    path: &str,
    strings: &Strings,
    (rows, cols): (u64, u64),
    flipped: bool,
    mtime: SystemTime,
) {
    let (shape, chunk) = match flipped {
        true => (
            [rows, cols],
            derived::transposed_strings(strings, rows, cols, path),
        ),
        false => ([cols, rows], strings.vlen()),
    };
    let array = Array::c(Element::Strings, &shape);
    b.array(path, encoding("string-array", "0.2.0"), array, chunk, mtime);
}

/// `obs` or `var`: a dataframe indexed by the axis entries, a column per vector of the axis.
fn dataframe(b: &mut impl Elements, dataset: &Dataset, group: &str, axis: &str, n: u64) {
    let columns: Vec<(&str, &Property)> = dataset
        .vectors
        .get(axis)
        .into_iter()
        .flat_map(|p| p.iter())
        .filter(|(name, _)| *name != "_index" && shown_name(name, b.v3()))
        .collect();
    let mut names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    let mut attributes = encoding("dataframe", "0.2.0");
    attributes["_index"] = json!("_index");
    attributes["column-order"] = json!(names);
    b.group(group, attributes);
    if let Some(entries) = dataset.axes.get(axis) {
        let (attributes, shape) = (encoding("string-array", "0.2.0"), [n]);
        let (path, array) = (
            format!("{group}/_index"),
            Array::c(Element::Strings, &shape),
        );
        b.array(
            &path,
            attributes,
            array,
            entries.entries.vlen(),
            entries.mtime,
        );
    }
    for (name, property) in columns {
        let path = format!("{group}/{name}");
        let mtime = property.mtime.get();
        let (element, chunk) = match &property.payload {
            Payload::Dense { eltype, data } => (Element::Num(*eltype), data.clone()),
            Payload::DenseStrings(strings) => (Element::Strings, strings.vlen()),
            Payload::SparseStrings(s) => (Element::Strings, s.dense.vlen()),
            Payload::Sparse(sparse) => {
                let SparseIndex::Vector { nzind } = &sparse.index else {
                    continue;
                };
                let dense = derived::densified(
                    nzind,
                    sparse.indtype,
                    sparse.nzval.as_ref(),
                    sparse.eltype,
                    n,
                    &path,
                );
                (Element::Num(sparse.eltype), dense)
            }
        };
        let attributes = match element {
            Element::Num(_) => encoding("array", "0.2.0"),
            Element::Strings => encoding("string-array", "0.2.0"),
        };
        b.array(&path, attributes, Array::c(element, &[n]), chunk, mtime);
    }
}

/// `uns`: every scalar, then upstream's `store_rename_scalar` of `obs_is`, `var_is` and `X_is`
/// (removed when the selected name is the default, else set to it).
fn uns(b: &mut impl Elements, dataset: &Dataset, selection: &Selection) {
    let mtime = dataset_mtime(dataset);
    b.group("uns", encoding("dict", "0.1.0"));
    let mut scalars: BTreeMap<&str, (Scalar, SystemTime)> = dataset
        .scalars
        .iter()
        .map(|(name, s)| (name.as_str(), (s.scalar.clone(), s.mtime)))
        .collect();
    let renames = [
        ("obs_is", "obs", &selection.obs),
        ("var_is", "var", &selection.var),
        ("X_is", "X", &selection.x),
    ];
    for (key, default, chosen) in renames {
        if chosen == default {
            scalars.remove(key);
        } else {
            let scalar = Scalar {
                eltype: ElementType::String,
                value: ScalarValue::String(chosen.clone()),
            };
            scalars.insert(key, (scalar, mtime));
        }
    }
    for (name, (scalar, mtime)) in scalars {
        if !shown_name(name, b.v3()) {
            continue;
        }
        let attributes = match scalar.eltype {
            ElementType::Num(_) => encoding("numeric-scalar", "0.2.0"),
            ElementType::String => encoding("string", "0.2.0"),
        };
        let array = Array::c(Element::of(scalar.eltype), &[]);
        let chunk = Blob::ready(Bytes::from_vec(scalar.zarr_chunk()));
        b.array(&format!("uns/{name}"), attributes, array, chunk, mtime);
    }
}
