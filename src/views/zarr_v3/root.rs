//! The root `zarr.json` of the Zarr v3 view: the inline consolidated metadata of every other
//! node, rendered when read from its entries as commits change them ([`RootDocument`]), and the
//! one a commit into a v3 directory source writes, rebuilt from the documents below the root
//! ([`consolidated_from_documents`]).

use std::collections::BTreeMap;
#[cfg(test)]
use std::sync::Arc;

use serde_json::Value;

use crate::formats::model::PropertyId;
use crate::stores::{Bytes, StoreError};

use super::{compact, GROUP_ENTRY};
use crate::views::layered::Layered;

/// What the root `zarr.json` starts with, before its consolidated entries.
const ROOT_HEAD: &[u8] = b"{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":{\"daf\":[1,0]},\"consolidated_metadata\":{\"kind\":\"inline\",\"must_understand\":false,\"metadata\":{";

/// The root `zarr.json`: every other node's entry in its consolidated metadata, by node path
/// (sorted).
pub(in crate::views) struct RootDocument(pub(in crate::views) Layered<Bytes>);

impl crate::stores::rendered::Document for RootDocument {
    fn count(&self) -> Result<u64, StoreError> {
        Ok(consolidated_root_len(slices(&self.0)))
    }

    fn render(&self) -> Result<Vec<u8>, StoreError> {
        Ok(consolidated_root(slices(&self.0)))
    }
}

/// Tests only: the base of the document `made_of` if it is this view's (see
/// [`crate::views::document_base`]).
#[cfg(test)]
pub(in crate::views) fn base_of(made_of: &Arc<dyn std::any::Any + Send + Sync>) -> Option<usize> {
    Some(made_of.downcast_ref::<RootDocument>()?.0.base_id())
}

/// The item the node at `path` belongs to (see [`crate::views::zarr_v2::layout::zarr_item_of_dir`]).
pub(in crate::views) fn node_item(path: &str) -> Option<PropertyId> {
    crate::views::zarr_v2::layout::zarr_item_of_dir(path)
}

/// The entries of `metadata` as the root document takes them.
fn slices(metadata: &Layered<Bytes>) -> impl Iterator<Item = (String, &[u8])> {
    metadata.iter().map(|(key, entry)| (key, entry.as_slice()))
}

/// The root document with the inline consolidated metadata `metadata` (node path → entry), keys
/// in byte order: parents come before their children and siblings are contiguous, which is what
/// zarr-python 3's `_flat_to_nested` needs (Julia's own order makes it fail with a `KeyError`).
fn consolidated_root<'a, K: AsRef<str>>(metadata: impl Iterator<Item = (K, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::from(ROOT_HEAD);
    for (i, (key, entry)) in metadata.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(Value::from(key.as_ref()).to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(entry);
    }
    out.extend_from_slice(b"}}}");
    out
}

/// The length of [`consolidated_root`]'s output, counted.
fn consolidated_root_len<'a, K: AsRef<str>>(metadata: impl Iterator<Item = (K, &'a [u8])>) -> u64 {
    let (mut entries, mut count) = (0u64, 0u64);
    for (key, entry) in metadata {
        entries += Value::from(key.as_ref()).to_string().len() as u64 + 1 + entry.len() as u64;
        count += 1;
    }
    ROOT_HEAD.len() as u64 + entries + count.saturating_sub(1) + 3
}

/// The root `zarr.json` of a v3 directory source rebuilt from the `zarr.json` documents below it
/// (`(path of the document, its bytes)`, e.g. `("vectors/cell/score/zarr.json", …)`; the root's
/// own is skipped): arrays as their documents (compact, keys sorted), groups as DataAxesFormats'
/// literal (with their attributes, if any). `Err` names a document that is not a Zarr v3 node.
pub fn consolidated_from_documents<'a>(
    docs: impl IntoIterator<Item = (&'a str, &'a [u8])>,
) -> Result<String, StoreError> {
    let mut metadata = BTreeMap::new();
    for (path, bytes) in docs {
        let Some(node) = path.strip_suffix("/zarr.json") else {
            continue;
        };
        let bad = |why: &str| StoreError::Produce(format!("{path}: {why}"));
        let value: Value =
            serde_json::from_slice(bytes).map_err(|e| bad(&format!("invalid JSON: {e}")))?;
        if value.get("zarr_format").and_then(Value::as_u64) != Some(3) {
            return Err(bad("not a Zarr v3 document"));
        }
        let entry = match value.get("node_type").and_then(Value::as_str) {
            Some("group") => match value.get("attributes") {
                Some(Value::Object(a)) if !a.is_empty() => format!(
                    "{{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":{}}}",
                    compact(&Value::Object(a.clone()))
                ),
                _ => GROUP_ENTRY.to_string(),
            },
            Some("array") => compact(&value),
            _ => return Err(bad("no node_type \"group\" or \"array\"")),
        };
        metadata.insert(node.to_string(), Bytes::from_vec(entry.into_bytes()));
    }
    let entries = metadata
        .iter()
        .map(|(k, v): (&String, &Bytes)| (k.as_str(), v.as_slice()));
    Ok(String::from_utf8_lossy(&consolidated_root(entries)).into_owned())
}
