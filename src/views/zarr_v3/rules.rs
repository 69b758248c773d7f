//! The write-path rules of the Zarr v3 view: which item a path belongs to, which names are a
//! writer's temporaries, which group documents are no-ops, when an item's staged arrays are
//! complete, and which array attributes are refused. (The v2 rules are in [`crate::views::zarr_v2::layout`].)
//!
//! What writers really do through a directory (watched with inotify, zarr-python 3.1.6 and
//! TensorStore 0.1.86, doc/user-guide.md, "Writing through the Zarr v3 view"):
//! - zarr-python writes every document and chunk to `NAME.<32 hex>.partial` in the same directory
//!   (`zarr.json` becomes `zarr.<hex>.partial`), then renames it over `NAME`; for the root and the
//!   parent groups of a new array it writes `zarr.<hex>.partial` and *links* it to `zarr.json`
//!   (exclusive create), and when that fails with `EEXIST` it deletes the temporary.
//!   `consolidate_metadata` renames a new root `zarr.json` into place.
//! - TensorStore writes `KEY.__lock`, renames it to `KEY`, then closes it.
//! - Chunk keys are `c/0`, `c/0/1` (default encoding, `/`), or what the array's `zarr.json` asks
//!   for: `c.0.1` (default encoding with `.`), `0.1` or `0/1` (`v2` encoding).

use serde_json::{Map, Value};

use crate::formats::model::PropertyId;
use crate::formats::zarr::v3;
use crate::formats::FormatError;
use crate::stores::{StoreError, StoreIndex};

/// Sparse components, as directories below a property's node.
const COMPONENTS: [&str; 4] = ["nzind", "nzval", "colptr", "rowval"];

/// The item a path of the Zarr v3 view belongs to (`None` for other names: temporaries, group
/// documents outside items).
pub fn item_of(rel: &str) -> Option<PropertyId> {
    crate::views::zarr_v2::layout::zarr_item_of(rel, node_file)
}

fn digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Whether `rest` (the path below an item's node, possibly in a sparse component) is the node's
/// `zarr.json` or a chunk key of any encoding zarr-python 3 and TensorStore write.
fn node_file(rest: &[&str]) -> bool {
    let rest = match rest {
        [component, tail @ ..] if COMPONENTS.contains(component) && !tail.is_empty() => tail,
        _ => rest,
    };
    match rest {
        ["zarr.json"] => true,
        // default encoding, "/" separator: c/0, c/0/1
        ["c", coords @ ..] => !coords.is_empty() && coords.iter().all(|c| digits(c)),
        // default encoding, "." separator: c.0.1
        [name] if name.starts_with("c.") => name[2..].split('.').all(digits),
        // v2 encoding: 0, 0.1 ("." separator) or 0/1 ("/" separator)
        [name] if name.contains('.') => name.split('.').all(digits),
        coords => !coords.is_empty() && coords.iter().all(|c| digits(c)),
    }
}

/// Whether the name at `rel` is a writer's temporary (renamed or linked into place later, or
/// deleted): `*.partial` (zarr-python), `*.__lock` (TensorStore), any hidden name (the v3 layout
/// has none of its own).
pub fn is_temporary(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    name.ends_with(".partial") || name.ends_with(".__lock") || name.starts_with('.')
}

/// Whether `rel` is the `zarr.json` of a group of the Daf layout outside any item: the root,
/// `scalars`, `axes`, `vectors`, `matrices`, `vectors/A`, `matrices/R`, `matrices/R/C`.
pub fn is_group_document(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    matches!(
        parts.as_slice(),
        ["zarr.json"]
            | ["scalars" | "axes" | "vectors" | "matrices", "zarr.json"]
            | ["vectors" | "matrices", _, "zarr.json"]
            | ["matrices", _, _, "zarr.json"]
    )
}

/// Whether a new file (or directory) may be created at `rel` of the v3 view: a temporary
/// anywhere (zarr-python writes `zarr.<hex>.partial` even at the root), a group document, or
/// anything below an item's place.
pub fn writable_place(rel: &str, is_dir: bool) -> bool {
    (!is_dir && (is_temporary(rel) || is_group_document(rel)))
        || matches!(
            rel.split('/').collect::<Vec<_>>().as_slice(),
            ["scalars" | "axes" | "vectors" | "matrices", _, ..]
        )
}

/// Why a file of the v3 view cannot be written at `rel` (`None`: it may be): only item files,
/// temporaries and group documents (judged by content, [`group_document_noop`]) can ever be
/// committed or dropped.
pub fn refusal(rel: &str) -> Option<String> {
    if rel
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Some(format!("{rel}: not a valid file name"));
    }
    if item_of(rel).is_some() || is_temporary(rel) || is_group_document(rel) {
        return None;
    }
    Some(format!(
        "{rel}: not a file of a Daf item (a scalar, axis, vector or matrix); it could never be committed"
    ))
}

fn object(bytes: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(o)) => Some(o),
        _ => None,
    }
}

/// Whether the group document `rel` (see [`is_group_document`]) with content `new` changes
/// nothing, given the committed document `old` there: equal JSON; a plain group
/// (`node_type` group, `zarr_format` 3, no attributes or `{}`, any `consolidated_metadata`, which
/// is derived data); at the root also the `daf` attribute `[1,0]` (zarr-python's
/// `consolidate_metadata` rewrites the root so). Anything adding attributes or other keys is
/// refused (`Err` says why).
pub fn group_document_noop(rel: &str, new: &[u8], old: Option<&[u8]>) -> Result<(), String> {
    if old == Some(new) {
        return Ok(());
    }
    let parsed = object(new);
    if let (Some(old), Some(new)) = (old.and_then(object), &parsed) {
        if &old == new {
            return Ok(());
        }
    }
    let root = rel == "zarr.json";
    let refuse = |why: &str| Err(format!("{rel}: {why}"));
    let Some(doc) = parsed else {
        return refuse("not a JSON object");
    };
    if doc.get("zarr_format") != Some(&Value::from(3))
        || doc.get("node_type") != Some(&Value::from("group"))
    {
        return refuse("not a Zarr v3 group document; the Daf layout has a group here");
    }
    for (key, value) in &doc {
        match key.as_str() {
            "zarr_format" | "node_type" | "consolidated_metadata" => {}
            "attributes" => {
                let Some(attrs) = value.as_object() else {
                    return refuse("attributes are not an object");
                };
                let daf_only = root
                    && attrs.len() == 1
                    && attrs.get("daf") == Some(&serde_json::json!([1, 0]));
                if !attrs.is_empty() && !daf_only {
                    return refuse(
                        "attributes are not part of a Daf data set (only {} is accepted, and the root's daf version [1,0])",
                    );
                }
            }
            other => return refuse(&format!("\"{other}\" is not part of a Daf group document")),
        }
    }
    Ok(())
}

/// The arrays of item node `path` in a staged index: the node itself, or for a sparse group its
/// components (`nzval` optional: an all-true Bool property has none, and zarr leaves out arrays
/// that are all fill; such items complete when finalised).
fn arrays_of(index: &StoreIndex, path: &str) -> Result<Option<Vec<String>>, FormatError> {
    let Some(entry) = index.get(&format!("{path}/zarr.json")) else {
        return Ok(None);
    };
    let doc = object(entry.blob.bytes()?.as_slice())
        .ok_or_else(|| FormatError::bad(format!("{path}/zarr.json: not a JSON object")))?;
    if doc.get("node_type").and_then(Value::as_str) != Some("group") {
        return Ok(Some(vec![path.to_string()]));
    }
    let index_part = if index.contains(&format!("{path}/colptr/zarr.json"))
        || index.contains(&format!("{path}/rowval/zarr.json"))
    {
        vec!["colptr", "rowval"]
    } else {
        vec!["nzind"]
    };
    Ok(Some(
        index_part
            .into_iter()
            .chain(["nzval"])
            .map(|c| format!("{path}/{c}"))
            .collect(),
    ))
}

/// Whether the staged Zarr v3 nodes of `id` are all there: the node's `zarr.json`, and every
/// chunk of every array (for a sparse group: its index arrays and `nzval`), counted by
/// [`v3::all_chunks_stored`] with the chunk key encoding each `zarr.json` names.
pub fn complete(index: &StoreIndex, id: &PropertyId) -> Result<bool, FormatError> {
    let Some(arrays) = arrays_of(index, &id.path())? else {
        return Ok(false);
    };
    for array in arrays {
        if !index.contains(&format!("{array}/zarr.json")) || !v3::all_chunks_stored(index, &array)?
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Daf nodes carry no attributes: an item's `zarr.json` whose `attributes` are anything but `{}`
/// (or DataAxesFormats' own `daf_packed_format`) is refused, not dropped. `dimension_names` is a
/// field of the array, not an attribute: accepted, and dropped (the Daf layout fixes the axes).
pub fn attributes_refusal(index: &StoreIndex) -> Result<Option<String>, StoreError> {
    for key in index
        .keys()
        .filter(|k| *k == "zarr.json" || k.ends_with("/zarr.json"))
    {
        let Some(entry) = index.get(key) else {
            continue;
        };
        let Some(doc) = object(entry.blob.bytes()?.as_slice()) else {
            continue; // not JSON: the reader says why
        };
        let accepted = match doc.get("attributes") {
            None => true,
            Some(Value::Object(attrs)) => attrs.iter().all(|(name, value)| {
                name == "daf_packed_format" && value.as_str() == Some("indexed+zipped")
            }),
            Some(_) => false,
        };
        if !accepted {
            return Ok(Some(format!(
                "{key}: attributes are not part of a Daf data set (only {{}} is accepted)"
            )));
        }
    }
    Ok(None)
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
