//! `NAME.h5df` (`--h5df`): a data set as one HDF5 file in DataAxesFormats' H5df layout
//! (`h5df-format.md`), made by [`super::hdf5`] from the plan [`plan`] gives: the `daf` version
//! dataset `[1, 0]`, `scalars/` (scalar dataspaces; String scalars fixed-length NUL-terminated
//! UTF-8), `axes/` (variable-length UTF-8 strings), a `vectors/AXIS/` group per axis and a
//! `matrices/ROWS/COLS/` group per ordered pair of axes; dense properties as contiguous datasets
//! (matrices `[ncols, nrows]`, Julia's column-major bytes), sparse ones as groups of `nzind` [+
//! `nzval`] or `colptr` + `rowval` [+ `nzval`], sparse strings with `nztxt`, Bool as the 8-bit
//! bitfield, String vectors and matrices as variable-length strings, an empty dataset without
//! storage. Every allocation is 8-byte aligned (upstream's `alignment = (1, 8)`), so a copy of
//! the file opens with `open_daf` and its flat payloads mmap.
//!
//! A flat payload's dataset is the model's very blob (a range of the source's map); a packed
//! one's is its decoded flat blob, made by range through the decode cache. Nothing is packed in
//! the file (the H5df of a 0.2 writer, or of a 0.3 one with `packed = false`).

use std::sync::Arc;

use crate::formats::model::{
    Dataset, Payload, Property, Shape, Sparse, SparseIndex, SparseStrings,
};
use crate::formats::scalar::ScalarValue;
use crate::formats::source::NamedDataset;
use crate::formats::strings::Strings;
use crate::formats::types::{ElementType, NumType};
use crate::stores::Blob;

use super::hdf5::{Content, Element, Hdf5File, Plan};

/// The mount path of the H5df file of `ds`.
pub fn h5df_path(ds: &NamedDataset) -> String {
    format!("{}.h5df", ds.name)
}

/// The H5df file of `ds` (made on first need).
pub fn h5df_file(ds: &NamedDataset) -> Arc<Hdf5File> {
    Hdf5File::new(h5df_path(ds), plan(&ds.dataset))
}

/// The H5df plan of `ds`: the objects in the order upstream creates them (`create_daf`, then
/// each axis with its groups), then the properties.
pub fn plan(ds: &Dataset) -> Plan {
    let mut plan = Plan::new((1, 8));
    plan.dataset(
        "daf",
        Element::Num(NumType::UInt8),
        vec![2],
        Content::values(vec![1, 0]),
    );
    let groups = ds.groups();
    let (top, axis_groups) = groups.split_at(4);
    for group in top {
        plan.group(group.as_str());
    }
    for (name, property) in &ds.scalars {
        let scalar = &property.scalar;
        let (element, bytes) = match (&scalar.value, scalar.eltype) {
            (ScalarValue::String(s), _) => {
                let bytes = match s.is_empty() {
                    true => vec![0],
                    false => s.as_bytes().to_vec(),
                };
                (Element::FixedUtf8(bytes.len()), bytes)
            }
            (_, ElementType::Num(t)) => (Element::Num(t), scalar.zarr_chunk()),
            (_, ElementType::String) => continue,
        };
        plan.dataset(
            format!("scalars/{name}"),
            element,
            vec![],
            Content::values(bytes),
        );
    }
    for (name, axis) in &ds.axes {
        let count = axis.len();
        plan.dataset(
            format!("axes/{name}"),
            Element::VlenUtf8,
            vec![count],
            strings(&axis.entries),
        );
    }
    for group in axis_groups {
        plan.group(group.as_str());
    }
    for p in ds.properties() {
        property(&mut plan, &p.path, p.shape, p.property);
    }
    plan
}

fn strings(values: &Strings) -> Content {
    Content::Strings {
        vlen: values.vlen(),
        count: values.count(),
    }
}

/// The number of elements of type `t` in `blob` (whose length is known: a source's numeric
/// blobs are sized at mount); 0 when its length cannot be had: the build then refuses the
/// mismatch.
fn count(blob: &Blob, t: NumType) -> u64 {
    blob.len().map_or(0, |len| len / t.size())
}

/// The dataset(s) of property `path`.
fn property(plan: &mut Plan, path: &str, shape: Shape, property: &Property) {
    // HDF5's (C) order of a Julia (rows, columns) matrix is [columns, rows].
    let dense_shape = shape.zarr();
    match &property.payload {
        Payload::Dense { eltype, data } => {
            plan.dataset(
                path,
                Element::Num(*eltype),
                dense_shape,
                Content::Bytes(data.clone()),
            );
        }
        Payload::DenseStrings(values) => {
            plan.dataset(path, Element::VlenUtf8, dense_shape, strings(values));
        }
        Payload::Sparse(sparse) => {
            plan.group(path);
            let Sparse {
                eltype,
                indtype,
                index,
                nzval,
            } = sparse.as_ref();
            let nnz = index_datasets(plan, path, *indtype, index);
            if let Some(nzval) = nzval {
                plan.dataset(
                    format!("{path}/nzval"),
                    Element::Num(*eltype),
                    vec![nnz],
                    Content::Bytes(nzval.clone()),
                );
            }
        }
        Payload::SparseStrings(sparse) => {
            plan.group(path);
            let SparseStrings {
                indtype,
                index,
                nztxt,
                ..
            } = sparse.as_ref();
            let nnz = index_datasets(plan, path, *indtype, index);
            let values = Strings::from_lines(nztxt.clone(), nnz).named(format!("{path}/nztxt"));
            plan.dataset(
                format!("{path}/nztxt"),
                Element::VlenUtf8,
                vec![nnz],
                strings(&values),
            );
        }
    }
}

/// The index datasets of a sparse property (`nzind`, or `colptr` and `rowval`); returns the
/// number of stored values.
fn index_datasets(plan: &mut Plan, path: &str, indtype: NumType, index: &SparseIndex) -> u64 {
    let mut index_dataset = |name: &str, blob: &Arc<Blob>| {
        let n = count(blob, indtype);
        plan.dataset(
            format!("{path}/{name}"),
            Element::Num(indtype),
            vec![n],
            Content::Bytes(blob.clone()),
        );
        n
    };
    match index {
        SparseIndex::Vector { nzind } => index_dataset("nzind", nzind),
        SparseIndex::Matrix { colptr, rowval } => {
            index_dataset("colptr", colptr);
            index_dataset("rowval", rowval)
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
