//! The AnnData view (`--anndata`, `anndata-view.md`): `NAME.anndata.zarr/`, a read-only Zarr
//! store in the AnnData on-disk format (in the mount's Zarr format, v2 or v3), so that
//! `anndata.read_zarr`, `anndata.experimental.read_lazy` and scanpy open a Daf data set as it is.
//!
//! Upstream's mapping (`daf_as_anndata`): obs and var are two axes ([`select`]), X one matrix
//! between them, `layers` the other matrices of the pair, `obsp`/`varp` the square matrices,
//! obs/var columns the axes' vectors, `uns` the scalars. A numeric payload is the model's very
//! blob (split into contiguous chunks of at most 8 MiB when larger: [`chunking`]): a matrix
//! stored as (var, obs) is X in C order as it is, one stored only as (obs, var) the same bytes in
//! F order (v2 `order: "F"`, v3's `transpose` codec); a sparse matrix is a `csr_matrix` (or
//! `csc_matrix`) whose `data` is `nzval`. What is not the source's bytes (0-based sparse indices, densified sparse columns,
//! documents, strings) is made when read, by range where it can be large ([`derived`]).

mod derived;
pub mod layout;
mod select;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use serde_json::{json, Value};

use crate::formats::model::{Dataset, Payload, Property, SparseIndex};
use crate::formats::scalar::{Scalar, ScalarValue};
use crate::formats::strings::Strings;
use crate::formats::types::{ElementType, NumType};
use crate::formats::zarr::v2::single_chunk_key;
use crate::stores::{lock, Blob, Bytes};

use super::zarr_v3::{data_type, fill_value};
use super::{dataset_mtime, EntrySink, ViewBuilder, ViewEntry};

pub use select::{select, Request, Selection};

/// The directory suffix of the view (`pbmc.anndata.zarr`).
pub const SUFFIX: &str = ".anndata.zarr";

/// What an array holds.
#[derive(Clone, Copy)]
enum Element {
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
struct Array<'a> {
    element: Element,
    shape: &'a [u64],
    fortran: bool,
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

/// Collects the view's entries and every node's document for the consolidated metadata.
struct Builder {
    view: ViewBuilder,
    v3: bool,
    mtime: SystemTime,
    /// v2: every `.zgroup`, `.zattrs` and `.zarray` by path; v3: every node's `zarr.json` but
    /// the root's, by node path.
    metadata: BTreeMap<String, Value>,
}

impl Builder {
    fn document(&mut self, path: &str, key: String, value: Value) {
        let (_, blob) = self.view.document(value.to_string().into_bytes());
        self.view.file(path, blob, self.mtime);
        self.metadata.insert(key, value);
    }

    fn group(&mut self, path: &str, attributes: Value) {
        self.view.dir(path, self.mtime);
        if self.v3 {
            if !path.is_empty() {
                let node =
                    json!({"attributes": attributes, "node_type": "group", "zarr_format": 3});
                self.document(&format!("{path}/zarr.json"), path.to_string(), node);
            }
        } else {
            let at = |doc: &str| super::join(path, doc);
            self.document(&at(".zgroup"), at(".zgroup"), json!({"zarr_format": 2}));
            self.document(&at(".zattrs"), at(".zattrs"), attributes);
        }
    }

    /// `array` at `path`, its content `content`, in the chunks of [`chunking`] (no chunk file
    /// when the array is empty).
    fn array(
        &mut self,
        path: &str,
        attributes: Value,
        array: Array<'_>,
        content: Arc<Blob>,
        mtime: SystemTime,
    ) {
        let Array {
            element,
            shape,
            fortran,
        } = array;
        self.view.dir(path, mtime);
        let grid = chunking(element, shape, fortran);
        if self.v3 {
            let eltype = element.element_type();
            let mut codecs = Vec::new();
            if fortran {
                codecs.push(json!({"configuration": {"order": [1, 0]}, "name": "transpose"}));
            }
            codecs.push(match element {
                Element::Num(_) => json!({"configuration": {"endian": "little"}, "name": "bytes"}),
                Element::Strings => json!({"configuration": {}, "name": "vlen-utf8"}),
            });
            let fill: Value = serde_json::from_str(fill_value(eltype)).unwrap_or(Value::Null);
            let node = json!({
                "attributes": attributes,
                "chunk_grid": {"configuration": {"chunk_shape": grid.shape}, "name": "regular"},
                "chunk_key_encoding": {"configuration": {"separator": "/"}, "name": "default"},
                "codecs": codecs,
                "data_type": data_type(eltype),
                "fill_value": fill,
                "node_type": "array",
                "shape": shape,
                "zarr_format": 3,
            });
            self.document(&format!("{path}/zarr.json"), path.to_string(), node);
        } else {
            let (dtype, filters) = match element {
                Element::Num(t) => (t.zarr_dtype(), Value::Null),
                Element::Strings => ("|O", json!([{"id": "vlen-utf8"}])),
            };
            let zarray = json!({
                "chunks": grid.shape,
                "compressor": null,
                "dtype": dtype,
                "fill_value": null,
                "filters": filters,
                "order": if fortran { "F" } else { "C" },
                "shape": shape,
                "zarr_format": 2,
            });
            let at = |doc: &str| format!("{path}/{doc}");
            self.document(&at(".zarray"), at(".zarray"), zarray);
            self.document(&at(".zattrs"), at(".zattrs"), attributes);
        }
        if shape.contains(&0) {
            return;
        }
        let size = match element {
            Element::Num(t) => t.size(),
            Element::Strings => 0,
        };
        let count = shape
            .get(grid.axis)
            .map_or(1, |n| n.div_ceil(grid.shape[grid.axis]));
        for i in 0..count {
            let mut index = vec![0; shape.len()];
            if let Some(at) = index.get_mut(grid.axis) {
                *at = i;
            }
            let key = chunk_key(&index, self.v3);
            let chunk = match count {
                1 => content.clone(),
                _ => {
                    // A block along the split axis: a contiguous range of the content, the last
                    // one padded to the whole chunk (Zarr stores edge chunks whole).
                    let full = grid.shape.iter().product::<u64>() * size;
                    let offset = i * full;
                    let total = shape.iter().product::<u64>() * size;
                    let len = full.min(total - offset);
                    derived::padded(&content, offset, len, full)
                }
            };
            self.view.file_at(&[path, "/", &key], chunk, mtime);
        }
    }

    /// The consolidated metadata (v2 `.zmetadata`, v3 the root `zarr.json`), then the entries.
    fn finish(mut self, root_attributes: Value) -> Vec<ViewEntry> {
        let metadata = Value::Object(std::mem::take(&mut self.metadata).into_iter().collect());
        let (path, document) = if self.v3 {
            let root = json!({
                "attributes": root_attributes,
                "consolidated_metadata": {"kind": "inline", "metadata": metadata, "must_understand": false},
                "node_type": "group",
                "zarr_format": 3,
            });
            ("zarr.json", root)
        } else {
            let consolidated = json!({"metadata": metadata, "zarr_consolidated_format": 1});
            (".zmetadata", consolidated)
        };
        let bytes = Bytes::from_vec(document.to_string().into_bytes());
        self.view.file(path, Blob::ready(bytes), self.mtime);
        self.view.finish()
    }
}

/// The bytes a chunk of a large numeric array holds at most: zarr-python reads the chunks of an
/// array concurrently, and an array in one chunk of a GiB reads at half the speed of one in
/// 8 MiB chunks (measured with zarr-python 3.1 on a local directory: 1.3-2.1 s against 0.64-0.86 s).
const CHUNK_BYTES: u64 = 8 << 20;

/// The chunks of an array: their shape, and the axis they split (the array is one chunk when
/// that axis's length is the chunk's).
struct Grid {
    shape: Vec<u64>,
    axis: usize,
}

/// How an array of `shape` is chunked: numbers in blocks of whole rows (C order) or whole columns
/// (F order) of at most [`CHUNK_BYTES`] each, so that every chunk is a contiguous range of the
/// source's bytes; strings (vlen-utf8, not splittable by bytes) and small arrays in one chunk.
fn chunking(element: Element, shape: &[u64], fortran: bool) -> Grid {
    let whole = Grid {
        shape: shape.iter().map(|&n| n.max(1)).collect(),
        axis: 0,
    };
    let Element::Num(t) = element else {
        return whole;
    };
    let axis = if fortran {
        shape.len().saturating_sub(1)
    } else {
        0
    };
    let Some(&along) = shape.get(axis) else {
        return whole;
    };
    let other: u64 = shape
        .iter()
        .enumerate()
        .filter(|(a, _)| *a != axis)
        .map(|(_, n)| n)
        .product();
    let block = (CHUNK_BYTES / other.max(1).saturating_mul(t.size())).max(1);
    if block >= along {
        return whole;
    }
    let mut chunks = whole.shape;
    chunks[axis] = block;
    Grid {
        shape: chunks,
        axis,
    }
}

/// The key of the chunk at grid `index`: `0`, `0.0`, `3.0` (v2, `.`-separated); `c`, `c/0`,
/// `c/3/0` (v3's default encoding).
fn chunk_key(index: &[u64], v3: bool) -> String {
    let parts: Vec<String> = index.iter().map(u64::to_string).collect();
    match (v3, parts.is_empty()) {
        (true, true) => "c".to_string(),
        (true, false) => format!("c/{}", parts.join("/")),
        (false, true) => single_chunk_key(0).into_owned(),
        (false, false) => parts.join("."),
    }
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

/// The AnnData view of `dataset` under `selection`, in Zarr v3 if `v3` else v2, rooted at
/// `prefix`; entries handed to `sink` in batches if given (the rest returned).
pub fn view_into(
    dataset: &Dataset,
    selection: &Selection,
    v3: bool,
    prefix: &str,
    sink: Option<&EntrySink>,
) -> Vec<ViewEntry> {
    let mtime = dataset_mtime(dataset);
    let mut b = Builder {
        view: ViewBuilder::into_sink(prefix, sink),
        v3,
        mtime,
        metadata: BTreeMap::new(),
    };
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
        matrix(&mut b, "X", property, shape(flipped), flipped);
    }
    b.group("layers", encoding("dict", "0.1.0"));
    for (name, (property, flipped)) in &joined {
        if *name != selection.x && shown_name(name, v3) {
            let path = format!("layers/{name}");
            matrix(&mut b, &path, property, shape(*flipped), *flipped);
        }
    }
    for (group, axis, n) in [("obs", obs, n_obs), ("var", var, n_var)] {
        dataframe(&mut b, dataset, group, axis, n);
        b.group(&format!("{group}m"), encoding("dict", "0.1.0"));
        b.group(&format!("{group}p"), encoding("dict", "0.1.0"));
        for (name, property) in pair(axis, axis).into_iter().flat_map(|p| p.iter()) {
            if shown_name(name, v3) {
                let path = format!("{group}p/{name}");
                matrix(&mut b, &path, property, (n, n), false);
            }
        }
    }
    uns(&mut b, dataset, selection);
    b.finish(root_attributes)
}

/// Matrix `property` at `path`: Daf's column-major `rows` × `cols` bytes; shown as the C-order
/// `[cols, rows]` array (its natural reading), or if `flipped` (stored as (obs, var) only) as
/// the `[rows, cols]` array in F order / CSC, so that AnnData's shape is always `[n_obs, n_var]`.
fn matrix(b: &mut Builder, path: &str, property: &Property, dims: (u64, u64), flipped: bool) {
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
    b: &mut Builder,
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
fn dataframe(b: &mut Builder, dataset: &Dataset, group: &str, axis: &str, n: u64) {
    let columns: Vec<(&str, &Property)> = dataset
        .vectors
        .get(axis)
        .into_iter()
        .flat_map(|p| p.iter())
        .filter(|(name, _)| *name != "_index" && shown_name(name, b.v3))
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
fn uns(b: &mut Builder, dataset: &Dataset, selection: &Selection) {
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
            scalars.insert(key, (scalar, b.mtime));
        }
    }
    for (name, (scalar, mtime)) in scalars {
        if !shown_name(name, b.v3) {
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
