//! `NAME.h5ad` (`--h5ad`): the AnnData of the AnnData view, as one HDF5 file in the layout
//! anndata writes (`anndata.write_h5ad`), made on first need over the same bytes.
//!
//! The elements are those of the AnnData view (the same mapping: `views::anndata::walk`, the same
//! selection of obs, var and X), handed to a [`Plan`] of `views::hdf5` instead of a Zarr store:
//! groups and datasets with the attributes anndata writes (`encoding-type`, `encoding-version`,
//! a sparse matrix's `shape`, a dataframe's `_index` and `column-order`), as h5py writes them
//! (strings variable-length UTF-8, Bool as h5py's enum, an empty list as an empty `float64`
//! array). Numeric arrays are the model's blobs (zero copy) or the view's derived arrays (made by
//! range); a matrix stored only as (obs, var) has no F order in HDF5, so it is shown transposed
//! by range ([`transposed`](super::anndata::derived)); strings are written by libhdf5.

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::formats::model::Dataset;
use crate::formats::source::NamedDataset;
use crate::formats::types::NumType;
use crate::stores::Blob;

use super::anndata::{self, Array, Elements, Request, Selection};
use super::hdf5::{AttrValue, Content, Element, Hdf5File, Plan};

/// The mount path of the h5ad file of `ds` (`pbmc.h5ad`).
pub fn h5ad_path(ds: &NamedDataset) -> String {
    format!("{}.h5ad", ds.name)
}

/// The h5ad file of `ds` under `request` (made on first need), or `None` where the selection
/// cannot be made (a mount refuses that beforehand: `views::anndata_refusal`).
pub fn h5ad_file(ds: &NamedDataset, request: &Request) -> Option<Arc<Hdf5File>> {
    let selection = anndata::select(&ds.name, &ds.dataset, request).ok()?;
    Some(Hdf5File::new(h5ad_path(ds), plan(&ds.dataset, &selection)))
}

/// The plan of the h5ad file of `dataset` under `selection`.
pub fn plan(dataset: &Dataset, selection: &Selection) -> Plan {
    let mut out = H5ad {
        plan: Plan::new((1, 8)),
    };
    anndata::walk(&mut out, dataset, selection);
    out.plan
}

/// The AnnData elements as the nodes of a plan.
struct H5ad {
    plan: Plan,
}

/// An element's attributes (a JSON object of the Zarr view's form) as h5py writes them.
fn attributes(attributes: &Value) -> Vec<(String, AttrValue)> {
    let Value::Object(map) = attributes else {
        return Vec::new();
    };
    map.iter()
        .filter_map(|(name, value)| Some((name.clone(), attribute(value)?)))
        .collect()
}

fn attribute(value: &Value) -> Option<AttrValue> {
    Some(match value {
        Value::String(s) => AttrValue::Str(s.clone()),
        Value::Bool(b) => AttrValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AttrValue::Int(i),
            None => AttrValue::Float(n.as_f64()?),
        },
        // h5py writes an empty list as an empty float64 array.
        Value::Array(items) if items.is_empty() => AttrValue::Floats(Vec::new()),
        Value::Array(items) if items.iter().all(Value::is_string) => AttrValue::Strs(
            items
                .iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect(),
        ),
        Value::Array(items) => AttrValue::Ints(
            items
                .iter()
                .map(Value::as_i64)
                .collect::<Option<Vec<i64>>>()?,
        ),
        Value::Null | Value::Object(_) => return None,
    })
}

impl Elements for H5ad {
    fn v3(&self) -> bool {
        false
    }

    fn group(&mut self, path: &str, attrs: Value) {
        let attrs = attributes(&attrs);
        if path.is_empty() {
            for (name, value) in attrs {
                self.plan.root_attrs.push(super::hdf5::Attr { name, value });
            }
            return;
        }
        let node = self.plan.group(path);
        for (name, value) in attrs {
            node.attr(&name, value);
        }
    }

    fn array(
        &mut self,
        path: &str,
        attrs: Value,
        array: Array<'_>,
        content: Arc<Blob>,
        _mtime: SystemTime,
    ) {
        let shape = array.shape.to_vec();
        let count: u64 = shape.iter().product();
        let (element, content) = match array.element {
            anndata::Element::Strings => (
                Element::VlenUtf8,
                Content::Strings {
                    vlen: content,
                    count,
                },
            ),
            anndata::Element::Num(t) => {
                let element = match t {
                    // numpy's bool, as h5py writes it.
                    NumType::Bool => Element::BoolEnum,
                    t => Element::Num(t),
                };
                let bytes = count.saturating_mul(t.size());
                let content = match (array.fortran, shape.as_slice()) {
                    (true, &[rows, cols]) => {
                        anndata::derived::transposed(&content, t, (rows, cols), path)
                    }
                    // A payload longer than its shape (an over-long `.data`) is shown at its shape.
                    _ if content.known_len().is_some_and(|len| len != bytes) => {
                        Blob::slice(&content, 0, bytes)
                    }
                    _ => content,
                };
                (element, Content::Bytes(content))
            }
        };
        let content = if count == 0 { Content::Empty } else { content };
        let node = self.plan.dataset(path, element, shape, content);
        for (name, value) in attributes(&attrs) {
            node.attr(&name, value);
        }
    }
}
