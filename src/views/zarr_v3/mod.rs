//! The ZarrDaf view on Zarr v3 (`daf-formats.md` §5.2–5.4, §8), exactly as DataAxesFormats 0.3
//! writes it: a `zarr.json` per node (groups `{"node_type":"group","zarr_format":3}`, arrays with
//! sorted keys, one chunk covering the shape, `/` chunk keys `c/0`, `c/0/0`), the daf version as
//! the root's `attributes.daf = [1,0]`, and the root's inline consolidated metadata with its keys
//! sorted (parents before children, siblings contiguous) so zarr-python 3 opens it consolidated.
//!
//! Numeric chunks are the model's blobs (the same `Arc<Blob>` as the v2 view's chunks); strings are
//! vlen-utf8; scalar chunks are synthesised. A chunk that holds only the fill value is left out,
//! as Julia leaves it out (a remote chunk that may be missing is an elidable entry: listed once
//! the server says it exists). A packed array (`Property::packed`) is a `sharding_indexed` array
//! whose chunk is the source's shard itself; its shard shape is `Packing::shard_shape` (for Julia's
//! shards the array shape rounded up to a multiple of the inner chunk shape), which makes the same
//! bytes a valid shard for every reader (Julia's own `zarr.json` declares the array shape, which
//! zarr-python 3 and TensorStore refuse when the inner chunks do not divide it). A shard without
//! a Zarr index (FilesDaf `"zipped"`) is shown flat, decoded.
//!
//! With `--dimension-names`, every array's `zarr.json` (and its entry in the consolidated
//! metadata) also holds `dimension_names` ([`super::dimensions`]), in its sorted place.

pub mod layout;
pub mod rules;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::formats::model::{Dataset, Payload, Property, PropertyId, SparseIndex};
use crate::formats::packed::Packing;
use crate::formats::scalar::Scalar;
use crate::formats::types::{ElementType, NumType};
use crate::stores::rendered::rendered;
use crate::stores::{Blob, Bytes};

use super::dimensions::DimensionNames;
use super::keyed::KeyedBuilder;
use super::layered::Layered;
use super::{dataset_mtime, Document, EntrySink, Shown, ViewBuilder, ViewEntry};

#[path = "root.rs"]
mod root;

#[cfg(test)]
pub(super) use root::base_of;
pub use root::consolidated_from_documents;
use root::{node_item, RootDocument};

/// The `zarr.json` of every group but the root (37 bytes).
pub const GROUP: &str = "{\"node_type\":\"group\",\"zarr_format\":3}";
/// The root `zarr.json` of a ZIP archive, as Zarr.jl writes it there (64 bytes, keys sorted; a
/// ZIP has no consolidated metadata, §5.5).
pub const ARCHIVE_ROOT: &str =
    "{\"attributes\":{\"daf\":[1,0]},\"node_type\":\"group\",\"zarr_format\":3}";
/// A group's entry in the consolidated metadata, as DataAxesFormats writes it (a literal with its
/// own key order, unlike the group's file).
const GROUP_ENTRY: &str = "{\"zarr_format\":3,\"node_type\":\"group\"}";
/// The attribute DataAxesFormats puts on packed arrays.
const PACKED_ATTRIBUTES: &str = "{\"daf_packed_format\":\"indexed+zipped\"}";

/// The Zarr v3 `data_type` of an element type (`float64`, `bool`, `string`).
pub fn data_type(eltype: ElementType) -> String {
    match eltype {
        ElementType::Num(t) => t.julia_name().to_lowercase(),
        ElementType::String => "string".into(),
    }
}

/// The `fill_value` DataAxesFormats writes: `false`, `0`, `0.0` or `""`.
pub fn fill_value(eltype: ElementType) -> &'static str {
    match eltype {
        ElementType::Num(NumType::Bool) => "false",
        ElementType::Num(NumType::Float32 | NumType::Float64) => "0.0",
        ElementType::Num(_) => "0",
        ElementType::String => "\"\"",
    }
}

/// The codec list of a flat array: `bytes` little-endian (even for one-byte types), or vlen-utf8.
fn flat_codecs(eltype: ElementType) -> &'static str {
    match eltype {
        ElementType::Num(_) => "[{\"configuration\":{\"endian\":\"little\"},\"name\":\"bytes\"}]",
        ElementType::String => "[{\"configuration\":{},\"name\":\"vlen-utf8\"}]",
    }
}

fn list(v: &[u64]) -> String {
    let items: Vec<String> = v.iter().map(u64::to_string).collect();
    format!("[{}]", items.join(","))
}

/// An array `zarr.json` with sorted keys (JSON.jl ≥ 1.6 writes `JSON.lower(MetadataV3)` so), and
/// `dimension_names` when given.
fn array_document(
    eltype: ElementType,
    shape: &[u64],
    chunk_shape: &[u64],
    codecs: &str,
    fill: &str,
    attributes: Option<&str>,
    dimensions: Option<&[String]>,
) -> String {
    let attributes = attributes.map_or(String::new(), |a| format!("\"attributes\":{a},"));
    let dimensions = dimensions.map_or(String::new(), |d| {
        format!("\"dimension_names\":{},", Value::from(d.to_vec()))
    });
    format!(
        "{{{attributes}\"chunk_grid\":{{\"configuration\":{{\"chunk_shape\":{}}},\"name\":\"regular\"}},\"chunk_key_encoding\":{{\"configuration\":{{\"separator\":\"/\"}},\"name\":\"default\"}},\"codecs\":{codecs},\"data_type\":\"{}\",{dimensions}\"fill_value\":{},\"node_type\":\"array\",\"shape\":{},\"zarr_format\":3}}",
        list(chunk_shape),
        data_type(eltype),
        fill,
        list(shape),
    )
}

/// The `zarr.json` of a flat single-chunk array of `shape` (Zarr order): §11.5 byte for byte. A
/// zero length gets chunk length 1 (Zarr refuses chunk lengths of 0).
pub fn flat_array_json(eltype: ElementType, shape: &[u64]) -> String {
    flat_array_document(eltype, shape, None)
}

/// [`flat_array_json`] with `dimension_names` when given.
fn flat_array_document(
    eltype: ElementType,
    shape: &[u64],
    dimensions: Option<&[String]>,
) -> String {
    let chunks: Vec<u64> = shape.iter().map(|&n| n.max(1)).collect();
    array_document(
        eltype,
        shape,
        &chunks,
        flat_codecs(eltype),
        fill_value(eltype),
        None,
        dimensions,
    )
}

/// The shard shape a packed array of `shape` needs at least: `shape` rounded up, per dimension, to a
/// multiple of the inner chunk shape (Zarr requires the inner chunks to divide the shard; Julia
/// encodes the edge inner chunk at full size, so its shard bytes are a valid shard of this shape).
pub fn rounded_shard_shape(shape: &[u64], inner: &[u64]) -> Vec<u64> {
    shape
        .iter()
        .zip(inner.iter().chain(std::iter::repeat(&0)))
        .map(|(&n, &c)| match c {
            0 => n.max(1),
            c => n.max(1).div_ceil(c).saturating_mul(c),
        })
        .collect()
}

/// The `zarr.json` of a packed array: one `sharding_indexed` codec over the whole array, with the
/// packing's shard shape (at least the array shape, rounded up to whole inner chunks), inner chunk
/// shape, inner codecs, index codecs, index location and fill value (what absent inner chunks
/// hold), and DataAxesFormats' `daf_packed_format` attribute.
pub fn packed_array_json(packing: &Packing) -> String {
    packed_array_document(packing, None)
}

/// [`packed_array_json`] with `dimension_names` when given.
fn packed_array_document(packing: &Packing, dimensions: Option<&[String]>) -> String {
    let index_location = if packing.index_at_start {
        "start"
    } else {
        "end"
    };
    let codecs = format!(
        "[{{\"configuration\":{{\"chunk_shape\":{},\"codecs\":{},\"index_codecs\":{},\"index_location\":\"{index_location}\"}},\"name\":\"sharding_indexed\"}}]",
        list(&packing.inner),
        compact(&packing.codecs),
        compact(&packing.index_codecs),
    );
    let shard_shape = if packing.shard_shape.len() == packing.shape.len() {
        packing.shard_shape.clone()
    } else {
        rounded_shard_shape(&packing.shape, &packing.inner)
    };
    // DataAxesFormats' fill value is the type's; a foreign shard keeps its own (absent inner
    // chunks hold it).
    let fill = match &packing.fill_value {
        Value::Null => fill_value(packing.eltype).to_string(),
        other => compact(other),
    };
    array_document(
        packing.eltype,
        &packing.shape,
        &shard_shape,
        &codecs,
        &fill,
        Some(PACKED_ATTRIBUTES),
        dimensions,
    )
}

/// Compact JSON with sorted keys (serde_json's maps are sorted).
fn compact(value: &Value) -> String {
    value.to_string()
}

/// The key of the one chunk of an array of `ndim` dimensions: `c/0`, `c/0/0`.
pub fn single_chunk_key(ndim: usize) -> Cow<'static, str> {
    match ndim {
        0 | 1 => "c/0".into(),
        2 => "c/0/0".into(),
        _ => format!("c/{}", vec!["0"; ndim].join("/")).into(),
    }
}

/// Whether a synthesised scalar chunk holds the fill value (`isequal` to it in Julia: `+0.0`, not
/// `-0.0`; `0`; `false`; `""`), so Julia would not have stored it.
fn scalar_is_fill(scalar: &Scalar) -> bool {
    match scalar.eltype {
        ElementType::Num(_) => scalar.zarr_chunk().iter().all(|&b| b == 0),
        ElementType::String => scalar.zarr_chunk() == [1, 0, 0, 0, 0, 0, 0, 0],
    }
}

/// Builds the v3 tree and remembers every node's document for the consolidated metadata.
struct V3Builder {
    view: ViewBuilder,
    /// Node path → its entry in the consolidated metadata (an array's entry shares the bytes
    /// of its `zarr.json`; groups share one literal).
    metadata: KeyedBuilder<Bytes>,
    group_entry: Bytes,
    /// The arrays' dimension names, if shown.
    dimensions: Option<DimensionNames>,
    /// The last flat array document without dimension names made, with its element type and
    /// shape: neighbouring arrays (the vectors of one axis) mostly share it and take it without
    /// rendering and hashing it again.
    last_flat: Option<(ElementType, Vec<u64>, Document)>,
}

impl V3Builder {
    fn new(prefix: &str, sink: Option<&EntrySink>) -> V3Builder {
        V3Builder {
            view: ViewBuilder::into_sink(prefix, sink),
            metadata: KeyedBuilder::default(),
            group_entry: Bytes::from_vec(GROUP_ENTRY.into()),
            dimensions: None,
            last_flat: None,
        }
    }

    /// The dimension names of the array at `path`, if shown.
    fn dimensions_of(&self, path: &str) -> Option<Vec<String>> {
        self.dimensions.as_ref().and_then(|d| d.of(path))
    }

    /// The `zarr.json` of `node` (shared with every equal one, see `ViewBuilder::document`);
    /// returns its bytes.
    fn document(&mut self, node: &str, content: Vec<u8>, mtime: SystemTime) -> Bytes {
        let path = super::join(node, "zarr.json");
        let (bytes, blob) = self.view.document(content);
        self.view.file(&path, blob, mtime);
        bytes
    }

    fn group(&mut self, path: &str, mtime: SystemTime) {
        self.view.dir(path, mtime);
        self.document(path, GROUP.into(), mtime);
        let entry = self.group_entry.clone();
        self.metadata.push(path, entry);
    }

    /// An array node with document `doc` and its single chunk (left out when the array is empty
    /// or the chunk is the fill value).
    fn array(
        &mut self,
        path: &str,
        doc: String,
        ndim: usize,
        chunk: Option<Arc<Blob>>,
        mtime: SystemTime,
    ) {
        let made = self.view.document(doc.into_bytes());
        self.made_array(path, made, ndim, chunk, mtime);
    }

    /// [`Self::array`] with its document made already ([`ViewBuilder::document`]).
    fn made_array(
        &mut self,
        path: &str,
        (doc, blob): Document,
        ndim: usize,
        chunk: Option<Arc<Blob>>,
        mtime: SystemTime,
    ) {
        self.view.dir(path, mtime);
        self.view.file(&super::join(path, "zarr.json"), blob, mtime);
        // A fill blob (an array the source stored without chunks) is not listed, as Julia
        // does not store such chunks; a chunk that may be absent (a remote one a 404 would
        // make the fill) is listed only once it is known present.
        if let Some(chunk) = chunk.filter(|c| !c.is_fill()) {
            let key = single_chunk_key(ndim);
            self.view.elidable_file_at(&[path, "/", &key], chunk, mtime);
        }
        self.metadata.push(path, doc);
    }

    /// A flat or packed array of `shape` holding `blob` (flat content) or its packing's shard.
    fn stored(
        &mut self,
        path: &str,
        eltype: ElementType,
        shape: &[u64],
        blob: Arc<Blob>,
        packing: Option<&Arc<Packing>>,
        mtime: SystemTime,
    ) {
        let empty = shape.contains(&0);
        // A FilesDaf "zipped" shard has no Zarr index: shown flat (its decoded content).
        let dimensions = self.dimensions_of(path);
        match packing.filter(|p| p.has_zarr_index()) {
            Some(p) => {
                let chunk = (!empty).then(|| p.shard.clone());
                let doc = packed_array_document(p, dimensions.as_deref());
                self.array(path, doc, p.shape.len(), chunk, mtime);
            }
            None => {
                let chunk = (!empty).then_some(blob);
                let made = match dimensions {
                    Some(names) => self
                        .view
                        .document(flat_array_document(eltype, shape, Some(&names)).into_bytes()),
                    None => self.flat_document(eltype, shape),
                };
                self.made_array(path, made, shape.len(), chunk, mtime);
            }
        }
    }

    /// The document of a flat array of `eltype` and `shape` without dimension names (see
    /// [`Self::last_flat`]; the same as [`ViewBuilder::document`] gives for its text).
    fn flat_document(&mut self, eltype: ElementType, shape: &[u64]) -> Document {
        if let Some((_, _, made)) = self
            .last_flat
            .as_ref()
            .filter(|(t, s, _)| *t == eltype && s == shape)
        {
            return made.clone();
        }
        let made = self
            .view
            .document(flat_array_document(eltype, shape, None).into_bytes());
        self.last_flat = Some((eltype, shape.to_vec(), made.clone()));
        made
    }
}

/// The Zarr v3 tree of `dataset`, rooted at `prefix`; the root `zarr.json` carries the inline
/// consolidated metadata.
pub fn zarr_v3_view(dataset: &Dataset, prefix: &str) -> Vec<ViewEntry> {
    zarr_v3_view_with(dataset, prefix, false)
}

/// The Zarr v3 tree of `dataset`, rooted at `prefix`, its arrays with their dimension names if
/// `dimension_names`.
pub fn zarr_v3_view_with(dataset: &Dataset, prefix: &str, dimension_names: bool) -> Vec<ViewEntry> {
    zarr_v3_view_into(dataset, prefix, dimension_names, None)
}

/// The entries of the view (rooted at `prefix`, without dimension names) that a change of item
/// `id` alone changes, its root `zarr.json` made from the one the tree shows (`None` if it shows
/// none).
pub fn local_view(
    dataset: &Dataset,
    prefix: &str,
    id: &PropertyId,
    shown: Shown<'_>,
) -> Option<Vec<ViewEntry>> {
    let previous = super::shown_made_of::<RootDocument>(shown, prefix, "zarr.json")?;
    let mtime = dataset_mtime(dataset);
    let mut z = V3Builder::new(prefix, None);
    no_items(&mut z, dataset, mtime);
    super::zarr_item(
        &mut z,
        dataset,
        id,
        |z, id| item_nodes(z, dataset, id),
        |z, p| property(z, &p.path, p.property, &p.shape.zarr()),
    );
    let values = std::mem::take(&mut z.metadata).into_pairs();
    let metadata = previous.0.with(&[None, Some(id.clone())], values)?;
    z.view.file(
        "zarr.json",
        rendered(Arc::new(RootDocument(metadata))),
        mtime,
    );
    Some(z.view.finish())
}

/// [`zarr_v3_view_with`], handing its entries to `sink` in batches if given: returns the rest.
pub fn zarr_v3_view_into(
    dataset: &Dataset,
    prefix: &str,
    dimension_names: bool,
    sink: Option<&EntrySink>,
) -> Vec<ViewEntry> {
    let mtime = dataset_mtime(dataset);
    let mut z = V3Builder::new(prefix, sink);
    z.dimensions = dimension_names.then(|| DimensionNames::new(dataset));
    no_items(&mut z, dataset, mtime);
    super::zarr_items(
        &mut z,
        dataset,
        |z, id| item_nodes(z, dataset, id),
        |z, p| property(z, &p.path, p.property, &p.shape.zarr()),
    );
    // Rendered when read (into the bounded decode cache), its size counted: a `stat` (every
    // `ls -l` of the root) renders nothing.
    let metadata = Layered::new(std::mem::take(&mut z.metadata).sorted(), node_item);
    z.view.file(
        "zarr.json",
        rendered(Arc::new(RootDocument(metadata))),
        mtime,
    );
    z.view.finish()
}

/// The root and the groups: the nodes of no item.
fn no_items(z: &mut V3Builder, dataset: &Dataset, mtime: SystemTime) {
    z.view.dir("", mtime);
    for group in dataset.groups() {
        z.group(&group, mtime);
    }
}

/// What a commit writes for item `id` into a Zarr v3 source, relative to the data set root: the
/// item's node documents and chunks (a new axis also brings the groups of its vectors and of its
/// matrices with every axis). Not the root `zarr.json`.
pub fn item_entries(dataset: &Dataset, id: &PropertyId) -> Vec<ViewEntry> {
    let mut z = V3Builder::new("", None);
    item_nodes(&mut z, dataset, id);
    if let PropertyId::Axis(name) = id {
        let mtime = dataset
            .axes
            .get(name)
            .map_or_else(|| dataset_mtime(dataset), |a| a.mtime);
        for group in dataset.axis_groups(name) {
            z.group(&group, mtime);
        }
    }
    z.view.finish()
}

fn item_nodes(z: &mut V3Builder, dataset: &Dataset, id: &PropertyId) {
    match id {
        PropertyId::Scalar(name) => {
            let Some(prop) = dataset.scalars.get(name) else {
                return;
            };
            let chunk = (!scalar_is_fill(&prop.scalar))
                .then(|| Blob::ready(Bytes::from_vec(prop.scalar.zarr_chunk())));
            let path = format!("scalars/{name}");
            let doc =
                flat_array_document(prop.scalar.eltype, &[1], z.dimensions_of(&path).as_deref());
            z.array(&path, doc, 1, chunk, prop.mtime);
        }
        PropertyId::Axis(name) => {
            let Some(axis) = dataset.axes.get(name) else {
                return;
            };
            z.stored(
                &format!("axes/{name}"),
                ElementType::String,
                &[axis.len()],
                axis.entries.vlen(),
                None,
                axis.mtime,
            );
        }
        PropertyId::Vector { .. } | PropertyId::Matrix { .. } => {
            if let (Some(p), Some(shape)) = (dataset.property(id), dataset.shape(id)) {
                property(z, &id.path(), p, &shape.zarr());
            }
        }
    }
}

fn property(z: &mut V3Builder, path: &str, p: &Property, shape: &[u64]) {
    let mtime = p.mtime.get();
    let packed = |component: &str| p.packed.get(component);
    match &p.payload {
        Payload::Dense { eltype, data } => z.stored(
            path,
            ElementType::Num(*eltype),
            shape,
            data.clone(),
            packed(""),
            mtime,
        ),
        Payload::DenseStrings(strings) => z.stored(
            path,
            ElementType::String,
            shape,
            strings.vlen(),
            packed(""),
            mtime,
        ),
        // Zarr has no sparse strings: they are shown dense.
        Payload::SparseStrings(s) => z.stored(
            path,
            ElementType::String,
            shape,
            s.dense.vlen(),
            None,
            mtime,
        ),
        Payload::Sparse(sparse) => {
            let (eltype, indtype) = (sparse.eltype, sparse.indtype);
            z.group(path, mtime);
            let ind = ElementType::Num(indtype);
            let nnz = match &sparse.index {
                SparseIndex::Vector { nzind } => {
                    let nnz = nzind.len().unwrap_or(0) / indtype.size();
                    let at = format!("{path}/nzind");
                    z.stored(&at, ind, &[nnz], nzind.clone(), packed("nzind"), mtime);
                    nnz
                }
                SparseIndex::Matrix { colptr, rowval } => {
                    let nnz = rowval.len().unwrap_or(0) / indtype.size();
                    let ncolptr = [shape[0].saturating_add(1)];
                    let at = format!("{path}/colptr");
                    z.stored(&at, ind, &ncolptr, colptr.clone(), packed("colptr"), mtime);
                    let at = format!("{path}/rowval");
                    z.stored(&at, ind, &[nnz], rowval.clone(), packed("rowval"), mtime);
                    nnz
                }
            };
            if let Some(nzval) = &sparse.nzval {
                let at = format!("{path}/nzval");
                let t = ElementType::Num(eltype);
                z.stored(&at, t, &[nnz], nzval.clone(), packed("nzval"), mtime);
            }
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
