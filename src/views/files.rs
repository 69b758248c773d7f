//! The FilesDaf 1.0 view (`daf-formats.md` §2): `daf.json`, every directory Julia expects, seed
//! descriptors, and payload files that are the model's blobs themselves.

use std::sync::Arc;

use crate::formats::json::{dense_descriptor, sparse_descriptor};
use crate::formats::model::{Dataset, Payload, Property, SparseIndex};
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
    for (name, prop) in &dataset.scalars {
        let scalar = prop.scalar.clone();
        view.text(&format!("scalars/{name}.json"), prop.mtime, move || {
            scalar.files_json()
        });
    }
    for (name, axis) in &dataset.axes {
        view.file(
            &format!("axes/{name}.txt"),
            axis.entries.lines(),
            axis.mtime,
        );
    }
    for p in dataset.properties() {
        property_files(&mut view, &p.path, p.property);
    }
    view.finish()
}

fn property_files(view: &mut ViewBuilder, base: &str, prop: &Property) {
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
            sparse_descriptor(ElementType::Num(*eltype), *indtype)
        }
        Payload::SparseStrings {
            indtype,
            index,
            nztxt,
            ..
        } => {
            index_files(&mut file, index);
            file("nztxt", nztxt);
            sparse_descriptor(ElementType::String, *indtype)
        }
    };
    view.text(&format!("{base}.json"), mtime, move || descriptor.clone());
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
