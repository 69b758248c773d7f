//! The FilesDaf 1.0 view (`daf-formats.md` §2): `daf.json`, every directory Julia expects, seed
//! descriptors, and payload files that are the model's blobs themselves. The same code writes a
//! committed item into a FilesDaf source, in the source's own version.

use std::sync::Arc;

use crate::formats::json::{
    dense_descriptor, sparse_descriptor, sparse_descriptor_1_1, FilesVersion,
};
use crate::formats::model::{Dataset, Payload, Property, PropertyId, SparseIndex};
use crate::formats::types::ElementType;
use crate::stores::Blob;

use super::{dataset_mtime, ViewBuilder, ViewEntry};

/// The FilesDaf tree of `dataset`, rooted at `prefix`.
pub fn files_view(dataset: &Dataset, prefix: &str) -> Vec<ViewEntry> {
    let mut view = ViewBuilder::new(prefix);
    let mtime = dataset_mtime(dataset);
    view.dir("", mtime);
    view.text("daf.json", mtime, || "{\"version\":[1,0]}\n".to_string());
    for group in dataset.groups() {
        view.dir(&group, mtime);
    }
    for name in dataset.scalars.keys() {
        item_files(
            &mut view,
            dataset,
            &PropertyId::Scalar(name.clone()),
            FilesVersion::V1_0,
        );
    }
    for name in dataset.axes.keys() {
        item_files(
            &mut view,
            dataset,
            &PropertyId::Axis(name.clone()),
            FilesVersion::V1_0,
        );
    }
    for p in dataset.properties() {
        property_files(&mut view, &p.path, p.property, FilesVersion::V1_0);
    }
    view.finish()
}

/// The files (and, for an axis, the new directories) of one item, relative to the data set root,
/// in the forms of FilesDaf `version`.
pub fn item_entries(dataset: &Dataset, id: &PropertyId, version: FilesVersion) -> Vec<ViewEntry> {
    let mut view = ViewBuilder::new("");
    item_files(&mut view, dataset, id, version);
    view.finish()
}

fn item_files(view: &mut ViewBuilder, dataset: &Dataset, id: &PropertyId, version: FilesVersion) {
    match id {
        PropertyId::Scalar(name) => {
            let Some(prop) = dataset.scalars.get(name) else {
                return;
            };
            let scalar = prop.scalar.clone();
            view.text(
                &format!("scalars/{name}.json"),
                prop.mtime,
                move || match version {
                    FilesVersion::V1_0 => scalar.files_json(),
                    FilesVersion::V1_1 => scalar.files_json_1_1(),
                },
            );
        }
        PropertyId::Axis(name) => {
            let Some(axis) = dataset.axes.get(name) else {
                return;
            };
            view.file(
                &format!("axes/{name}.txt"),
                axis.entries.lines(),
                axis.mtime,
            );
        }
        PropertyId::Vector { .. } | PropertyId::Matrix { .. } => {
            if let Some(property) = dataset.property(id) {
                property_files(view, &id.path(), property, version);
            }
        }
    }
}

fn property_files(view: &mut ViewBuilder, base: &str, prop: &Property, version: FilesVersion) {
    let mtime = prop.mtime;
    let mut file =
        |ext: &str, blob: &Arc<Blob>| view.file(&format!("{base}.{ext}"), blob.clone(), mtime);
    let descriptor = match &prop.payload {
        Payload::Dense { eltype, data } => {
            file("data", data);
            dense_descriptor(ElementType::Num(*eltype))
        }
        Payload::DenseStrings(strings) => {
            file("txt", &strings.lines());
            dense_descriptor(ElementType::String)
        }
        Payload::Sparse {
            eltype,
            indtype,
            index,
            nzval,
        } => {
            index_files(&mut file, index);
            if let Some(nzval) = nzval {
                file("nzval", nzval);
            }
            sparse_text(
                ElementType::Num(*eltype),
                *indtype,
                index,
                nzval.is_some(),
                version,
            )
        }
        Payload::SparseStrings {
            indtype,
            index,
            nztxt,
            ..
        } => {
            index_files(&mut file, index);
            file("nztxt", nztxt);
            sparse_text(ElementType::String, *indtype, index, true, version)
        }
    };
    view.text(&format!("{base}.json"), mtime, move || descriptor.clone());
}

fn sparse_text(
    eltype: ElementType,
    indtype: crate::formats::types::NumType,
    index: &SparseIndex,
    has_nzval: bool,
    version: FilesVersion,
) -> String {
    if version == FilesVersion::V1_0 {
        return sparse_descriptor(eltype, indtype);
    }
    let count = |blob: &Arc<Blob>| blob.known_len().unwrap_or(0) / indtype.size();
    match index {
        SparseIndex::Vector { nzind } => sparse_descriptor_1_1(
            eltype,
            indtype,
            &[("nzind", count(nzind))],
            count(nzind),
            has_nzval,
        ),
        SparseIndex::Matrix { colptr, rowval } => sparse_descriptor_1_1(
            eltype,
            indtype,
            &[("colptr", count(colptr)), ("rowval", count(rowval))],
            count(rowval),
            has_nzval,
        ),
    }
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
