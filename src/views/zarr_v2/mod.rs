//! The ZarrDaf view on Zarr v2 (`daf-formats.md` §4.2–4.6): `.zgroup`/`.zattrs` for every group,
//! the `daf` version array, one `.zarray` and one chunk per array (the model's blob itself for
//! numbers), and a root `.zmetadata` with sorted keys so zarr-python 3 can open it consolidated.
//! With `--dimension-names`, each array's `.zattrs` (and its copy in `.zmetadata`) holds xarray's
//! `_ARRAY_DIMENSIONS` ([`super::dimensions`]) instead of `{}`.

pub mod layout;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::formats::model::{Dataset, Payload, PropertyId, SparseIndex};
use crate::formats::types::{ElementType, NumType};
use crate::formats::zarr::v2::{single_chunk_key, zarray_json, ZATTRS, ZGROUP};
use crate::stores::rendered::{rendered, Document};
use crate::stores::{Blob, Bytes};

use super::dimensions::DimensionNames;
use super::keyed::KeyedBuilder;
use super::layered::Layered;
use super::{dataset_mtime, EntrySink, Shown, ViewBuilder, ViewEntry};

/// Builds the Zarr tree and remembers every metadata document for `.zmetadata`.
struct ZarrBuilder {
    view: ViewBuilder,
    metadata: KeyedBuilder<Arc<Blob>>,
    /// The arrays' dimension names, if shown.
    dimensions: Option<DimensionNames>,
    /// The last `.zarray` made and what it was made of: neighbouring arrays (the vectors of one
    /// axis) mostly share it and take its blob without rendering and hashing it again.
    last_zarray: Option<(String, bool, Vec<u64>, Arc<Blob>)>,
    /// The blob of the plain `.zattrs` (`{}`), once made.
    plain_zattrs: Option<Arc<Blob>>,
}

impl ZarrBuilder {
    fn new(
        prefix: &str,
        dimensions: Option<DimensionNames>,
        sink: Option<&EntrySink>,
    ) -> ZarrBuilder {
        ZarrBuilder {
            view: ViewBuilder::into_sink(prefix, sink),
            metadata: KeyedBuilder::default(),
            dimensions,
            last_zarray: None,
            plain_zattrs: None,
        }
    }

    fn document(&mut self, path: String, text: String, mtime: SystemTime) {
        let (_, blob) = self.view.document(text.into_bytes());
        self.shared_document(path, blob, mtime);
    }

    /// A document whose blob is made already.
    fn shared_document(&mut self, path: String, blob: Arc<Blob>, mtime: SystemTime) {
        self.metadata.push(&path, blob.clone());
        self.view.file(&path, blob, mtime);
    }

    /// The blob of the `.zarray` of an array of `dtype` and `shape` (see [`Self::last_zarray`];
    /// the same blob [`ViewBuilder::document`] gives for the same text).
    fn zarray(&mut self, dtype: &str, strings: bool, shape: &[u64]) -> Arc<Blob> {
        if let Some((_, _, _, blob)) = self
            .last_zarray
            .as_ref()
            .filter(|(d, s, sh, _)| d == dtype && *s == strings && sh == shape)
        {
            return blob.clone();
        }
        let (_, blob) = self
            .view
            .document(zarray_json(dtype, strings, shape).into_bytes());
        self.last_zarray = Some((dtype.to_string(), strings, shape.to_vec(), blob.clone()));
        blob
    }

    fn group(&mut self, path: &str, mtime: SystemTime) {
        let at = |doc: &str| {
            if path.is_empty() {
                doc.to_string()
            } else {
                format!("{path}/{doc}")
            }
        };
        self.view.dir(path, mtime);
        self.document(at(".zgroup"), ZGROUP.to_string(), mtime);
        self.document(at(".zattrs"), ZATTRS.to_string(), mtime);
    }

    /// An array of `shape` (Zarr order) whose single chunk is `chunk` (omitted when empty).
    fn array(
        &mut self,
        path: &str,
        dtype: &str,
        strings: bool,
        shape: &[u64],
        chunk: Arc<Blob>,
        mtime: SystemTime,
    ) {
        self.view.dir(path, mtime);
        let zarray = self.zarray(dtype, strings, shape);
        self.shared_document(format!("{path}/.zarray"), zarray, mtime);
        let zattrs = format!("{path}/.zattrs");
        match self.dimensions.as_ref().and_then(|d| d.of(path)) {
            Some(names) => {
                let attributes = serde_json::json!({ "_ARRAY_DIMENSIONS": names }).to_string();
                self.document(zattrs, attributes, mtime);
            }
            None => {
                let view = &mut self.view;
                let plain = self
                    .plain_zattrs
                    .get_or_insert_with(|| view.document(ZATTRS.into()).1)
                    .clone();
                self.shared_document(zattrs, plain, mtime);
            }
        }
        if !shape.contains(&0) {
            let key = single_chunk_key(shape.len());
            self.view.file_at(&[path, "/", &key], chunk, mtime);
        }
    }

    fn numeric(
        &mut self,
        path: &str,
        t: NumType,
        shape: &[u64],
        chunk: &Arc<Blob>,
        mtime: SystemTime,
    ) {
        self.array(path, t.zarr_dtype(), false, shape, chunk.clone(), mtime);
    }
}

/// The Zarr tree of `dataset`, rooted at `prefix`.
pub fn zarr_view(dataset: &Dataset, prefix: &str) -> Vec<ViewEntry> {
    zarr_view_with(dataset, prefix, false)
}

/// The Zarr tree of `dataset`, rooted at `prefix`, its arrays with their dimension names if
/// `dimension_names`.
pub fn zarr_view_with(dataset: &Dataset, prefix: &str, dimension_names: bool) -> Vec<ViewEntry> {
    zarr_view_into(dataset, prefix, dimension_names, None)
}

/// The entries of the view (rooted at `prefix`, without dimension names) that a change of item
/// `id` alone changes, its `.zmetadata` made from the one the tree shows (`None` if it shows none).
pub fn local_view(
    dataset: &Dataset,
    prefix: &str,
    id: &PropertyId,
    shown: Shown<'_>,
) -> Option<Vec<ViewEntry>> {
    let previous = super::shown_made_of::<ZMetadata>(shown, prefix, ".zmetadata")?;
    let mtime = dataset_mtime(dataset);
    let mut z = ZarrBuilder::new(prefix, None, None);
    no_items(&mut z, dataset, mtime);
    super::zarr_item(
        &mut z,
        dataset,
        id,
        |z, id| item_nodes(z, dataset, id),
        property_ref,
    );
    let values = std::mem::take(&mut z.metadata).into_pairs();
    let documents = previous.0.with(&[None, Some(id.clone())], values)?;
    z.view.file(
        ".zmetadata",
        rendered(Arc::new(ZMetadata(documents))),
        mtime,
    );
    Some(z.view.finish())
}

/// [`zarr_view_with`], handing its entries to `sink` in batches if given: returns the rest.
pub fn zarr_view_into(
    dataset: &Dataset,
    prefix: &str,
    dimension_names: bool,
    sink: Option<&EntrySink>,
) -> Vec<ViewEntry> {
    let mtime = dataset_mtime(dataset);
    let mut z = ZarrBuilder::new(
        prefix,
        dimension_names.then(|| DimensionNames::new(dataset)),
        sink,
    );
    no_items(&mut z, dataset, mtime);
    super::zarr_items(
        &mut z,
        dataset,
        |z, id| item_nodes(z, dataset, id),
        property_ref,
    );
    // Rendered when read (into the bounded decode cache), its size counted: a `stat` (every
    // `ls -l` of the root) renders nothing.
    let documents = Layered::new(std::mem::take(&mut z.metadata).finish(), document_item);
    z.view.file(
        ".zmetadata",
        rendered(Arc::new(ZMetadata(documents))),
        mtime,
    );
    z.view.finish()
}

/// The root group, the `daf` version array and the groups: the nodes of no item.
fn no_items(z: &mut ZarrBuilder, dataset: &Dataset, mtime: SystemTime) {
    z.group("", mtime);
    z.array(
        "daf",
        "|u1",
        false,
        &[2],
        Blob::ready(Bytes::from_vec(vec![1, 0])),
        mtime,
    );
    for group in dataset.groups() {
        z.group(&group, mtime);
    }
}

/// `.zmetadata`: every node's documents (under their paths in the view, in view order: a view's
/// paths are unique, and [`consolidated`] sorts them).
struct ZMetadata(Layered<Arc<Blob>>);

impl Document for ZMetadata {
    fn count(&self) -> Result<u64, crate::stores::StoreError> {
        consolidated_len(self.0.iter())
    }

    fn render(&self) -> Result<Vec<u8>, crate::stores::StoreError> {
        consolidated(self.0.iter())
    }
}

/// Tests only: the base of the document `made_of` if it is this view's (see
/// [`super::document_base`]).
#[cfg(test)]
pub(super) fn base_of(made_of: &Arc<dyn std::any::Any + Send + Sync>) -> Option<usize> {
    Some(made_of.downcast_ref::<ZMetadata>()?.0.base_id())
}

/// The item the document at `path` belongs to (that of its node, see
/// [`crate::views::zarr_v2::layout::zarr_item_of_dir`]).
fn document_item(path: &str) -> Option<PropertyId> {
    let node = path.rsplit_once('/').map_or("", |(node, _)| node);
    crate::views::zarr_v2::layout::zarr_item_of_dir(node)
}

/// The nodes of one item, relative to the data set root; a new axis also brings the groups of its
/// vectors and of its matrices with every axis.
pub fn item_entries(dataset: &Dataset, id: &PropertyId) -> Vec<ViewEntry> {
    let mut z = ZarrBuilder::new("", None, None);
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

fn item_nodes(z: &mut ZarrBuilder, dataset: &Dataset, id: &PropertyId) {
    match id {
        PropertyId::Scalar(name) => {
            let Some(prop) = dataset.scalars.get(name) else {
                return;
            };
            let (dtype, strings) = match prop.scalar.eltype {
                ElementType::Num(t) => (t.zarr_dtype(), false),
                ElementType::String => ("|O", true),
            };
            let chunk = Blob::ready(Bytes::from_vec(prop.scalar.zarr_chunk()));
            z.array(
                &format!("scalars/{name}"),
                dtype,
                strings,
                &[1],
                chunk,
                prop.mtime,
            );
        }
        PropertyId::Axis(name) => {
            let Some(axis) = dataset.axes.get(name) else {
                return;
            };
            z.array(
                &format!("axes/{name}"),
                "|O",
                true,
                &[axis.len()],
                axis.entries.vlen(),
                axis.mtime,
            );
        }
        PropertyId::Vector { .. } | PropertyId::Matrix { .. } => {
            if let (Some(p), Some(shape)) = (dataset.property(id), dataset.shape(id)) {
                property(z, &id.path(), &p.payload, &shape.zarr(), p.mtime.get());
            }
        }
    }
}

/// The nodes of vector or matrix `p` ([`property`]).
fn property_ref(z: &mut ZarrBuilder, p: &crate::formats::model::PropertyRef<'_>) {
    let mtime = p.property.mtime.get();
    property(z, &p.path, &p.property.payload, &p.shape.zarr(), mtime);
}

fn property(z: &mut ZarrBuilder, path: &str, payload: &Payload, shape: &[u64], mtime: SystemTime) {
    match payload {
        Payload::Dense { eltype, data } => z.numeric(path, *eltype, shape, data, mtime),
        Payload::DenseStrings(strings) => z.array(path, "|O", true, shape, strings.vlen(), mtime),
        Payload::SparseStrings(s) => z.array(path, "|O", true, shape, s.dense.vlen(), mtime),
        Payload::Sparse(sparse) => {
            let (eltype, indtype) = (sparse.eltype, sparse.indtype);
            z.group(path, mtime);
            let nnz = match &sparse.index {
                SparseIndex::Vector { nzind } => {
                    let nnz = nzind.len().unwrap_or(0) / indtype.size();
                    z.numeric(&format!("{path}/nzind"), indtype, &[nnz], nzind, mtime);
                    nnz
                }
                SparseIndex::Matrix { colptr, rowval } => {
                    let nnz = rowval.len().unwrap_or(0) / indtype.size();
                    z.numeric(
                        &format!("{path}/colptr"),
                        indtype,
                        &[shape[0].saturating_add(1)],
                        colptr,
                        mtime,
                    );
                    z.numeric(&format!("{path}/rowval"), indtype, &[nnz], rowval, mtime);
                    nnz
                }
            };
            if let Some(nzval) = &sparse.nzval {
                z.numeric(&format!("{path}/nzval"), eltype, &[nnz], nzval, mtime);
            }
        }
    }
}

/// The length of what [`consolidated`] makes of `documents` (one per key, in any order: what
/// [`consolidated`] keeps), without making it: each distinct document is rendered once at its
/// depth (most are alike: the same type and shape), the rest is counted.
pub(crate) fn consolidated_len<'a, K: AsRef<str>>(
    documents: impl Iterator<Item = (K, &'a Arc<Blob>)>,
) -> Result<u64, crate::stores::StoreError> {
    let produce = |e: serde_json::Error| crate::stores::StoreError::Produce(e.to_string());
    let mut rendered: HashMap<Vec<u8>, u64> = HashMap::new();
    let (mut entries, mut count) = (0, 0u64);
    for (key, blob) in documents {
        count += 1;
        let bytes = blob.bytes()?;
        let value_len = match rendered.get(bytes.as_slice()) {
            Some(&len) => len,
            None => {
                let value: Value = serde_json::from_slice(bytes.as_slice()).map_err(|e| {
                    crate::stores::StoreError::Produce(format!("{}: {e}", key.as_ref()))
                })?;
                // Its length at depth 2: within two single-key objects, less `null`'s frame.
                let len = pretty_len(&nested(nested(value)))? + 4
                    - pretty_len(&nested(nested(Value::Null)))?;
                rendered.insert(bytes.as_slice().to_vec(), len);
                len
            }
        };
        // `        "KEY": VALUE`, then `,\n` between entries.
        entries +=
            8 + serde_json::to_string(key.as_ref()).map_err(produce)?.len() as u64 + 2 + value_len;
    }
    let empty = pretty_len(&consolidated_root(Map::new()))?;
    Ok(match count {
        0 => empty,
        // `{}` becomes `{\n`, the entries, and `\n    }`.
        n => empty - 2 + 2 + entries + 2 * (n - 1) + 6,
    })
}

/// `{"": value}`.
fn nested(value: Value) -> Value {
    Value::Object(Map::from_iter([(String::new(), value)]))
}

/// The root of `.zmetadata` around `metadata`.
fn consolidated_root(metadata: Map<String, Value>) -> Value {
    let mut root = Map::new();
    root.insert("metadata".into(), Value::Object(metadata));
    root.insert("zarr_consolidated_format".into(), Value::from(1));
    Value::Object(root)
}

/// `value` as [`consolidated`] prints it.
fn pretty(value: &Value) -> Result<Vec<u8>, crate::stores::StoreError> {
    let mut out = Vec::new();
    let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, formatter);
    serde::Serialize::serialize(value, &mut serializer)
        .map_err(|e| crate::stores::StoreError::Produce(e.to_string()))?;
    Ok(out)
}

fn pretty_len(value: &Value) -> Result<u64, crate::stores::StoreError> {
    Ok(pretty(value)?.len() as u64 + 1)
}

/// `.zmetadata`: every metadata document, keys sorted, pretty-printed with a 4-space indent and a
/// final newline (as Julia writes it, but in an order zarr-python 3 accepts).
pub(crate) fn consolidated<'a, K: AsRef<str>>(
    documents: impl IntoIterator<Item = (K, &'a Arc<Blob>)>,
) -> Result<Vec<u8>, crate::stores::StoreError> {
    let mut metadata = Map::new();
    for (key, blob) in documents {
        let key = key.as_ref();
        let value: Value = serde_json::from_slice(blob.bytes()?.as_slice())
            .map_err(|e| crate::stores::StoreError::Produce(format!("{key}: {e}")))?;
        metadata.insert(key.to_string(), value);
    }
    let mut out = pretty(&consolidated_root(metadata))?;
    out.push(b'\n');
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn doc(key: &str, text: &str) -> (String, Arc<Blob>) {
        let blob = Blob::ready(Bytes::from_vec(text.as_bytes().to_vec()));
        (key.to_string(), blob)
    }

    #[test]
    fn the_counted_length_of_zmetadata_is_its_length() {
        let cases = [
            vec![],
            vec![doc(".zgroup", r#"{"zarr_format":2}"#)],
            vec![
                doc("b/.zarray", &zarray_json("<f4", false, &[4, 3])),
                doc("a/.zattrs", "{}"),
                doc("a/.zattrs", r#"{"_ARRAY_DIMENSIONS":["cell"]}"#),
                doc("é\"\u{1}/.zarray", &zarray_json("|O", true, &[0])),
                doc(
                    "c",
                    r#"[[], {}, [1, [2, {"x": null}]], "s\n", 1.5e300, true]"#,
                ),
                doc("d", "7"),
            ],
        ];
        for documents in cases {
            let iter = || documents.iter().map(|(k, b)| (k.as_str(), b));
            let made = consolidated(iter()).unwrap();
            // One document per key (the last), as a view has them.
            let sorted: BTreeMap<&str, &Arc<Blob>> = iter().collect();
            assert_eq!(
                consolidated_len(sorted.into_iter()).unwrap(),
                made.len() as u64
            );
        }
    }

    #[test]
    fn a_stat_of_zmetadata_makes_nothing() {
        let dataset = Dataset::default();
        let entries = zarr_view(&dataset, "");
        let blob = entries
            .iter()
            .find_map(|e| match &e.node {
                super::super::ViewNode::File(blob) if e.path == ".zmetadata" => Some(blob.clone()),
                _ => None,
            })
            .unwrap();
        let len = blob.len().unwrap();
        assert!(!blob.is_materialized(), "the stat made the document");
        assert_eq!(blob.read_range(0, len).unwrap().len(), len);
    }
}
