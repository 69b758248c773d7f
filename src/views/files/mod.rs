//! The FilesDaf view (`daf-formats.md` §2, §3): `daf.json`, every directory Julia expects,
//! descriptors and scalar files, payload files that are the model's blobs themselves, and in
//! version 1.1 the root index `metadata.json` (§3.5).
//!
//! The view has a version (1.0 or 1.1; by default 1.1 for data sets written by DataAxesFormats
//! 0.3, see [`super::is_current`]): its `daf.json`,
//! the forms of scalar files and sparse descriptors, and whether it has `metadata.json`. Of a
//! FilesDaf source (directory or ZipDaf), the view serves the source's own files byte for byte
//! where they fit the view's version (`daf.json`, scalars, descriptors, text, payloads) and
//! synthesises the rest: what the source lacks, and what the view's version writes differently
//! (a 1.1-form sparse descriptor in a 1.0 view gets the 1.0 form, and the other way round).
//! The view is always flat: a packed property (§8) shows its decoded payload (`.data`, `.nzval`,
//! `.txt`, ...) with a flat descriptor, never the source's packed one; `metadata.json` is always
//! synthesised (a source's own may be stale). The same code writes a committed item into a
//! FilesDaf source, in the source's own version.

pub mod layout;

use std::sync::Arc;

use crate::formats::files::index::{index_len, index_text, IndexValue};
use crate::formats::json::{
    dense_descriptor, sparse_descriptor, sparse_descriptor_1_1, FilesVersion,
};
use crate::formats::model::{Dataset, Payload, Property, PropertyId, SparseIndex};
use crate::formats::types::ElementType;
use crate::stores::rendered::{rendered, Document};
use crate::stores::{Blob, Bytes, StoreError};

use super::keyed::KeyedBuilder;
use super::layered::Layered;
use super::{dataset_mtime, EntrySink, Shown, ViewBuilder, ViewEntry, ViewNode};
use crate::views::zarr_v2::layout::zarr_item_of_dir;

/// The FilesDaf tree of `dataset` in FilesDaf `version`, rooted at `prefix`.
pub fn files_view(dataset: &Dataset, prefix: &str, version: FilesVersion) -> Vec<ViewEntry> {
    files_view_into(dataset, prefix, version, None)
}

/// [`files_view`], handing its entries to `sink` in batches if given: returns the rest.
pub fn files_view_into(
    dataset: &Dataset,
    prefix: &str,
    version: FilesVersion,
    sink: Option<&EntrySink>,
) -> Vec<ViewEntry> {
    let mut view = ViewBuilder::into_sink(prefix, sink);
    root_files(&mut view, dataset, version);
    // The entries of a 1.1 view's `metadata.json` (every document the view shows, every axis).
    let indexed = version == FilesVersion::V1_1;
    let mut index = Vec::new();
    for id in super::scalars_and_axes(dataset) {
        let document = item_files(&mut view, dataset, &id, version);
        if indexed {
            index.extend(index_entry(dataset, &id, document));
        }
    }
    for p in dataset.properties() {
        let document = dataset.files_source.descriptor(&p.path, version);
        let document = property_files(&mut view, &p.path, p.property, version, document);
        if indexed {
            index.push((p.path, IndexValue::Document(document)));
        }
    }
    let mut entries = view.finish();
    if indexed {
        entries.push(metadata_json(dataset, prefix, index));
    }
    entries
}

/// The root, `daf.json` and the groups: what shows the data set's time.
fn root_files(view: &mut ViewBuilder, dataset: &Dataset, version: FilesVersion) {
    let mtime = dataset_mtime(dataset);
    view.dir("", mtime);
    match dataset.files_source.document("daf.json", version) {
        Some(blob) => view.file("daf.json", blob.clone(), mtime),
        None => view.text("daf.json", mtime, move || match version {
            FilesVersion::V1_0 => "{\"version\":[1,0]}\n".to_string(),
            FilesVersion::V1_1 => "{\"version\":[1,1]}\n".to_string(),
        }),
    }
    for group in dataset.groups() {
        view.dir(&group, mtime);
    }
}

/// The entries of the view (rooted at `prefix`) that a change of item `id` alone changes, in
/// the view's order: the root, `daf.json` and the groups (they show the data set's time), the
/// item's files, and in version 1.1 `metadata.json`, made from the one the tree shows (`None` if
/// it shows none).
pub fn local_entries(
    dataset: &Dataset,
    prefix: &str,
    id: &PropertyId,
    version: FilesVersion,
    shown: Shown<'_>,
) -> Option<Vec<ViewEntry>> {
    let previous = match version {
        FilesVersion::V1_0 => None,
        FilesVersion::V1_1 => Some(super::shown_made_of::<Index>(
            shown,
            prefix,
            "metadata.json",
        )?),
    };
    let mut view = ViewBuilder::new(prefix);
    root_files(&mut view, dataset, version);
    let document = item_files(&mut view, dataset, id, version);
    let mut entries = view.finish();
    if let Some(previous) = previous {
        let values = index_entry(dataset, id, document).into_iter().collect();
        let index = previous.0.with(&[Some(id.clone())], values)?;
        entries.push(metadata_entry(dataset, prefix, index));
    }
    Some(entries)
}

/// Item `id`'s entry in `metadata.json`, if it has one: its JSON `document` (as the view shows
/// it), or an axis's length.
fn index_entry(
    dataset: &Dataset,
    id: &PropertyId,
    document: Option<Arc<Blob>>,
) -> Option<(String, IndexValue)> {
    let value = match id {
        PropertyId::Axis(name) => IndexValue::Axis(dataset.axes.get(name)?.len()),
        _ => IndexValue::Document(document?),
    };
    Some((id.path(), value))
}

/// The view's `metadata.json` (§3.5) of `entries` (the documents the view shows, the axes'
/// lengths: [`index_entry`]), made when read (kept in the bounded decode cache, made again once
/// evicted; its keys kept compact, see [`super::keyed`]).
fn metadata_json(dataset: &Dataset, prefix: &str, entries: Vec<(String, IndexValue)>) -> ViewEntry {
    let mut index = KeyedBuilder::default();
    for (key, value) in entries {
        index.push(&key, value);
    }
    let index = Layered::new(index.finish(), zarr_item_of_dir);
    metadata_entry(dataset, prefix, index)
}

/// `metadata.json` of `index`.
fn metadata_entry(dataset: &Dataset, prefix: &str, index: Layered<IndexValue>) -> ViewEntry {
    ViewEntry {
        path: ViewBuilder::new(prefix).full("metadata.json"),
        node: ViewNode::File(rendered(Arc::new(Index(index)))),
        mtime: dataset_mtime(dataset),
        elidable: false,
    }
}

/// The index `metadata.json` is made of: each item's entry under its path (the item of a key is
/// the one at that path, see [`zarr_item_of_dir`]).
struct Index(Layered<IndexValue>);

impl Document for Index {
    fn count(&self) -> Result<u64, StoreError> {
        index_len(self.0.iter())
    }

    fn render(&self) -> Result<Vec<u8>, StoreError> {
        let entries = self.0.iter().map(|(key, value)| (key, value.clone()));
        index_text(entries.collect())
    }
}

/// Tests only: the base of the document `made_of` if it is this view's (see
/// [`super::document_base`]).
#[cfg(test)]
pub(super) fn base_of(made_of: &Arc<dyn std::any::Any + Send + Sync>) -> Option<usize> {
    Some(made_of.downcast_ref::<Index>()?.0.base_id())
}

/// The files (and, for an axis, the new directories) of one item, relative to the data set root:
/// the source's own documents where the data set has them and they fit FilesDaf `version`, else
/// synthesised in the forms of `version`.
pub fn item_entries(dataset: &Dataset, id: &PropertyId, version: FilesVersion) -> Vec<ViewEntry> {
    let mut view = ViewBuilder::new("");
    item_files(&mut view, dataset, id, version);
    view.finish()
}

/// Adds the files of item `id`; returns its JSON document (`None` for an axis, which has none).
fn item_files(
    view: &mut ViewBuilder,
    dataset: &Dataset,
    id: &PropertyId,
    version: FilesVersion,
) -> Option<Arc<Blob>> {
    match id {
        PropertyId::Scalar(name) => {
            let prop = dataset.scalars.get(name)?;
            let path = format!("scalars/{name}.json");
            let blob = match dataset.files_source.document(&path, version) {
                Some(blob) => blob.clone(),
                None => {
                    let scalar = prop.scalar.clone();
                    Blob::lazy(None, move || {
                        let text = match version {
                            FilesVersion::V1_0 => scalar.files_json(),
                            FilesVersion::V1_1 => scalar.files_json_1_1(),
                        };
                        Ok(Bytes::from_vec(text.into_bytes()))
                    })
                }
            };
            view.file(&path, blob.clone(), prop.mtime);
            Some(blob)
        }
        PropertyId::Axis(name) => {
            let axis = dataset.axes.get(name)?;
            view.file(
                &format!("axes/{name}.txt"),
                axis.entries.lines(),
                axis.mtime,
            );
            None
        }
        PropertyId::Vector { .. } | PropertyId::Matrix { .. } => {
            let property = dataset.property(id)?;
            let base = id.path();
            let document = dataset.files_source.descriptor(&base, version);
            Some(property_files(view, &base, property, version, document))
        }
    }
}

/// The files of a vector or matrix; its descriptor is `document` (the source's) when given.
/// Returns the descriptor shown.
fn property_files(
    view: &mut ViewBuilder,
    base: &str,
    prop: &Property,
    version: FilesVersion,
    document: Option<&Arc<Blob>>,
) -> Arc<Blob> {
    let mtime = prop.mtime.get();
    let mut file =
        |ext: &str, blob: &Arc<Blob>| view.file_at(&[base, ".", ext], blob.clone(), mtime);
    // The descriptor's text, made on first access (a 1.1 sparse one counts the index files).
    type Make = Box<dyn Fn() -> Result<String, StoreError> + Send + Sync>;
    // A dense one is known now: shared with every equal one (`ViewBuilder::document`).
    let dense = |view: &mut ViewBuilder, eltype| {
        let blob = match document {
            Some(blob) => blob.clone(),
            None => view.document(dense_descriptor(eltype).into_bytes()).1,
        };
        view.file_at(&[base, ".json"], blob.clone(), mtime);
        blob
    };
    let descriptor: Make = match &prop.payload {
        Payload::Dense { eltype, data } => {
            file("data", data);
            return dense(view, ElementType::Num(*eltype));
        }
        Payload::DenseStrings(strings) => {
            file("txt", &strings.lines());
            return dense(view, ElementType::String);
        }
        Payload::Sparse(s) => {
            index_files(&mut file, &s.index);
            if let Some(nzval) = &s.nzval {
                file("nzval", nzval);
            }
            let (eltype, indtype, index) = (ElementType::Num(s.eltype), s.indtype, s.index.clone());
            let has_nzval = s.nzval.is_some();
            Box::new(move || sparse_text(eltype, indtype, &index, has_nzval, version))
        }
        Payload::SparseStrings(s) => {
            index_files(&mut file, &s.index);
            file("nztxt", &s.nztxt);
            let (indtype, index) = (s.indtype, s.index.clone());
            Box::new(move || sparse_text(ElementType::String, indtype, &index, true, version))
        }
    };
    let blob = match document {
        Some(blob) => blob.clone(),
        None => Blob::lazy(None, move || {
            Ok(Bytes::from_vec(descriptor()?.into_bytes()))
        }),
    };
    view.file_at(&[base, ".json"], blob.clone(), mtime);
    blob
}

/// A sparse descriptor in the forms of `version`; the 1.1 form counts the index files'
/// elements (their lengths, known without decoding for flat and packed payloads alike).
fn sparse_text(
    eltype: ElementType,
    indtype: crate::formats::types::NumType,
    index: &SparseIndex,
    has_nzval: bool,
    version: FilesVersion,
) -> Result<String, StoreError> {
    if version == FilesVersion::V1_0 {
        return Ok(sparse_descriptor(eltype, indtype));
    }
    let count = |blob: &Arc<Blob>| Ok::<u64, StoreError>(blob.len()? / indtype.size());
    Ok(match index {
        SparseIndex::Vector { nzind } => {
            let nnz = count(nzind)?;
            sparse_descriptor_1_1(eltype, indtype, &[("nzind", nnz)], nnz, has_nzval)
        }
        SparseIndex::Matrix { colptr, rowval } => {
            let nnz = count(rowval)?;
            sparse_descriptor_1_1(
                eltype,
                indtype,
                &[("colptr", count(colptr)?), ("rowval", nnz)],
                nnz,
                has_nzval,
            )
        }
    })
}

fn index_files(file: &mut impl FnMut(&str, &Arc<Blob>), index: &SparseIndex) {
    match index {
        SparseIndex::Vector { nzind } => file("nzind", nzind),
        SparseIndex::Matrix { colptr, rowval } => {
            file("colptr", colptr);
            file("rowval", rowval);
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
