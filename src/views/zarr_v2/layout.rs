//! ZarrDaf on Zarr v2 as a [`Layout`]: the Zarr v2 view and reader, which files of the view
//! belong to which item, group documents writers rewrite, when a staged array is complete, and
//! the `.zmetadata` of a directory source.

use serde_json::Value;

use crate::formats::model::{Dataset, Item, PropertyId};
use crate::formats::source::Format;
use crate::formats::strings::encode_vlen;
use crate::formats::zarr::{self as zarr_daf, v2 as zarr_v2, ZarrVersion};
use crate::formats::FormatError;
use crate::stores::{Bytes, StoreError, StoreIndex};

use crate::views::layout::{Layout, Removal, Staged};
use crate::views::{zarr_v2 as zarr, EntrySink, Shown, ViewEntry};

/// ZarrDaf on Zarr v2 (DataAxesFormats 0.2).
#[derive(Debug)]
pub struct ZarrV2;

/// The sparse components of item `id`.
pub(crate) fn components(id: &PropertyId) -> &'static [&'static str] {
    if matches!(id, PropertyId::Matrix { .. }) {
        &["colptr", "rowval", "nzval"]
    } else {
        &["nzind", "nzval"]
    }
}

/// Whether `name` is a chunk key (`0`, `0.1`, or one `/`-separated part of one).
fn chunk(name: &str) -> bool {
    !name.is_empty()
        && name
            .split('.')
            .all(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `rest` (the path below an item's node) names a file of the node: its documents or a
/// chunk, possibly in a sparse component (`nzind/0`) or with `/`-separated chunk keys. Temporary
/// names (`.zarray.<uuid>.partial`) are not.
fn node_file(rest: &[&str]) -> bool {
    let Some((last, dirs)) = rest.split_last() else {
        return false;
    };
    let dirs_ok = dirs
        .iter()
        .enumerate()
        .all(|(i, d)| chunk(d) || (i == 0 && ["nzind", "nzval", "colptr", "rowval"].contains(d)));
    dirs_ok && ([".zarray", ".zattrs", ".zgroup"].contains(last) || chunk(last))
}

/// The item of a Zarr path whose node files `node_file` recognises (the path below the item's
/// node): shared by both Zarr layouts.
pub(crate) fn zarr_item_of(rel: &str, node_file: impl Fn(&[&str]) -> bool) -> Option<PropertyId> {
    let parts: Vec<&str> = rel.split('/').collect();
    match parts.as_slice() {
        ["scalars", name, rest @ ..] if node_file(rest) => {
            Some(PropertyId::Scalar(name.to_string()))
        }
        ["axes", name, rest @ ..] if node_file(rest) => Some(PropertyId::Axis(name.to_string())),
        ["vectors", axis, name, rest @ ..] if node_file(rest) => Some(PropertyId::Vector {
            axis: axis.to_string(),
            name: name.to_string(),
        }),
        ["matrices", rows, cols, name, rest @ ..] if node_file(rest) => Some(PropertyId::Matrix {
            rows: rows.to_string(),
            cols: cols.to_string(),
            name: name.to_string(),
        }),
        _ => None,
    }
}

/// The item a directory of a Zarr view belongs to: any directory at or below an item's node
/// (the groups are above them).
pub(crate) fn zarr_item_of_dir(rel: &str) -> Option<PropertyId> {
    zarr_item_of(rel, |_| true)
}

/// Where a new file of a Zarr view may go: hidden names, and anything below the four groups.
pub(crate) fn zarr_writable_place(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    parts.last().is_some_and(|n| n.starts_with('.'))
        || matches!(
            parts.as_slice(),
            ["scalars" | "axes" | "vectors" | "matrices", _, ..]
        )
}

/// Documents of a Zarr group that writers rewrite with no change (`.zgroup`, `{}` attributes):
/// they may be written where a group of the Daf layout is, and are then dropped if they carry
/// nothing.
fn group_document_place(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let Some((last, dirs)) = parts.split_last() else {
        return false;
    };
    [".zgroup", ".zattrs", ".zmetadata"].contains(last)
        && match dirs {
            [] => true,
            ["scalars" | "axes" | "vectors" | "matrices"] => *last != ".zmetadata",
            ["vectors" | "matrices", _] | ["matrices", _, _] => *last != ".zmetadata",
            _ => false,
        }
}

/// Whether `attrs` holds only xarray's `_ARRAY_DIMENSIONS` (a list of names): the layout Daf
/// already fixes, accepted and dropped.
pub(crate) fn only_dimension_names(attrs: &serde_json::Map<String, Value>) -> bool {
    attrs.iter().all(|(key, names)| {
        key == "_ARRAY_DIMENSIONS"
            && names
                .as_array()
                .is_some_and(|a| a.iter().all(Value::is_string))
    })
}

/// Daf nodes carry no attributes: a `.zattrs` with anything but xarray's `_ARRAY_DIMENSIONS`
/// is refused, not dropped.
fn attributes_refusal(index: &StoreIndex) -> Result<Option<String>, StoreError> {
    for key in index
        .keys()
        .filter(|k| k.rsplit('/').next() == Some(".zattrs"))
    {
        let Some(entry) = index.get(key) else {
            continue;
        };
        let value: Option<Value> = serde_json::from_slice(entry.blob.bytes()?.as_slice()).ok();
        if !value
            .as_ref()
            .and_then(Value::as_object)
            .is_some_and(only_dimension_names)
        {
            return Ok(Some(format!(
                "{key}: attributes are not part of a Daf data set (only {{}} is accepted)"
            )));
        }
    }
    Ok(None)
}

/// The arrays of item `id` as staged: the node itself, or a sparse group's components.
pub(crate) fn staged_arrays(index: &StoreIndex, id: &PropertyId, group_doc: &str) -> Vec<String> {
    let path = id.path();
    if index.contains(&format!("{path}/{group_doc}")) {
        components(id)
            .iter()
            .map(|p| format!("{path}/{p}"))
            .collect()
    } else {
        vec![path]
    }
}

/// The groups a Zarr item lives in below the four top-level ones (`vectors/A`, `matrices/R`,
/// `matrices/R/C`).
pub(crate) fn parent_groups(id: &PropertyId) -> Vec<String> {
    match id {
        PropertyId::Vector { axis, .. } => vec![format!("vectors/{axis}")],
        PropertyId::Matrix { rows, cols, .. } => vec![
            format!("matrices/{rows}"),
            format!("matrices/{rows}/{cols}"),
        ],
        _ => Vec::new(),
    }
}

impl Layout for ZarrV2 {
    fn format(&self) -> Format {
        Format::ZarrV2
    }

    fn read_item(
        &self,
        dataset: &Dataset,
        id: &PropertyId,
        index: &StoreIndex,
    ) -> Result<Item, FormatError> {
        zarr_daf::read_item(ZarrVersion::V2, dataset, id, index)
    }

    fn view_into(
        &self,
        dataset: &Dataset,
        prefix: &str,
        dimensions: bool,
        sink: Option<&EntrySink>,
    ) -> Vec<ViewEntry> {
        zarr::zarr_view_into(dataset, prefix, dimensions, sink)
    }

    fn item_entries(&self, dataset: &Dataset, id: &PropertyId) -> Vec<ViewEntry> {
        zarr::item_entries(dataset, id)
    }

    fn local_view(
        &self,
        dataset: &Dataset,
        prefix: &str,
        id: &PropertyId,
        shown: Shown<'_>,
    ) -> Option<Vec<ViewEntry>> {
        zarr::local_view(dataset, prefix, id, shown)
    }

    fn item_of(&self, rel: &str) -> Option<PropertyId> {
        zarr_item_of(rel, node_file)
    }

    fn item_of_dir(&self, rel: &str) -> Option<PropertyId> {
        zarr_item_of_dir(rel)
    }

    fn writable_place(&self, rel: &str, _is_dir: bool) -> bool {
        zarr_writable_place(rel)
    }

    /// A hidden name that is not a Zarr document, a `*.partial` name (zarr-python) or a
    /// `*.__lock` name (TensorStore writes `KEY.__lock`, then renames it to `KEY`).
    fn is_temporary(&self, rel: &str) -> bool {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        name.ends_with(".partial")
            || name.ends_with(".__lock")
            || (name.starts_with('.')
                && ![".zarray", ".zattrs", ".zgroup", ".zmetadata"].contains(&name))
    }

    fn is_group_document(&self, rel: &str) -> bool {
        self.item_of(rel).is_none() && group_document_place(rel)
    }

    fn is_document(&self, rel: &str) -> bool {
        self.is_group_document(rel) || rel.rsplit('/').next() == Some(".zattrs")
    }

    /// Equal JSON, a `.zgroup` of Zarr v2, `{}` attributes, or xarray's `_ARRAY_DIMENSIONS`
    /// alone; a writer's `.zmetadata` is derived data and always dropped.
    fn group_document_noop(&self, rel: &str, new: &[u8], old: Option<&[u8]>) -> Result<(), String> {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        let parsed: Option<Value> = serde_json::from_slice(new).ok();
        if name == ".zmetadata" || same_json(new, parsed.as_ref(), old) {
            return Ok(());
        }
        let object = parsed.as_ref().and_then(Value::as_object);
        let noop = match name {
            ".zgroup" => object
                .is_some_and(|o| o.get("zarr_format") == Some(&Value::from(2)) && o.len() == 1),
            ".zattrs" => object.is_some_and(only_dimension_names),
            _ => false,
        };
        if noop {
            Ok(())
        } else {
            Err(format!(
                "{rel}: attributes and group documents other than Daf's are not part of a Daf data set (only {{}} is accepted)"
            ))
        }
    }

    /// Every chunk of every array, and for a sparse group its index arrays and `nzval`, are
    /// staged. (Writers skip chunks that are all fill value, and an all-true Bool property has
    /// no `nzval`: such items only complete when finalised.)
    fn staged(
        &self,
        index: &StoreIndex,
        id: &PropertyId,
        finalize: bool,
    ) -> Result<Staged, FormatError> {
        if let Some(why) = attributes_refusal(index)? {
            return Ok(Staged::Refused(why));
        }
        for array in staged_arrays(index, id, ".zgroup") {
            if !index.contains(&format!("{array}/.zarray"))
                || !zarr_v2::all_chunks_stored(index, &array)?
            {
                return Ok(if finalize {
                    Staged::Complete
                } else {
                    Staged::Incomplete
                });
            }
        }
        Ok(Staged::Complete)
    }

    fn write_rank(&self, path: &str) -> u8 {
        match path.rsplit('/').next().unwrap_or("") {
            ".zgroup" => 3,
            ".zarray" | ".zattrs" => 2,
            _ => 1,
        }
    }

    /// Julia's groups of the item's parents.
    fn implied(&self, _: &Dataset, id: &PropertyId) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
        let documents = parent_groups(id)
            .iter()
            .flat_map(|group| {
                [(".zgroup", zarr_v2::ZGROUP), (".zattrs", zarr_v2::ZATTRS)]
                    .map(|(doc, text)| (format!("{group}/{doc}"), text.as_bytes().to_vec()))
            })
            .collect();
        (documents, Vec::new())
    }

    /// `.zmetadata` from the directory's metadata documents (sorted keys).
    fn index_documents(
        &self,
        _: &Dataset,
        index: &StoreIndex,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let documents: Vec<_> = index
            .keys()
            .filter(|k| {
                [".zarray", ".zgroup", ".zattrs"]
                    .iter()
                    .any(|d| k.rsplit('/').next() == Some(*d))
            })
            .filter_map(|k| index.get(k).map(|e| (k.to_string(), e.blob.clone())))
            .collect();
        let text = zarr::consolidated(documents.iter().map(|(k, b)| (k.as_str(), b)))?;
        Ok(vec![(".zmetadata".into(), text)])
    }

    fn derived_files(&self) -> &'static [&'static str] {
        &[".zmetadata"]
    }

    fn removal(&self) -> Removal {
        Removal::NodeDirectory
    }

    fn node_item(&self, rel: &str) -> Option<PropertyId> {
        self.item_of(&format!("{rel}/.zarray"))
    }

    /// Zeros, or as many empty strings, while the array's `.zarray` is still there (not a node
    /// being removed file by file).
    fn fill_for_removed_chunk(
        &self,
        rel: &str,
        read: &dyn Fn(&str) -> Option<Bytes>,
    ) -> Option<Bytes> {
        let (dir, name) = rel.rsplit_once('/')?;
        if !chunk(name) {
            return None;
        }
        let meta: Value =
            serde_json::from_slice(read(&format!("{dir}/.zarray"))?.as_slice()).ok()?;
        let chunk = read(rel)?;
        if meta.get("dtype").and_then(Value::as_str) == Some("|O") {
            let count = u32::from_le_bytes(chunk.as_slice().get(..4)?.try_into().ok()?) as usize;
            return Some(Bytes::from_vec(encode_vlen(
                std::iter::repeat_n(&b""[..], count),
                count,
            )));
        }
        Some(Bytes::from_vec(vec![0; chunk.len() as usize]))
    }
}

/// Whether `new` is the same JSON document as `old`.
pub(crate) fn same_json(new: &[u8], parsed: Option<&Value>, old: Option<&[u8]>) -> bool {
    let Some(old) = old else {
        return false;
    };
    old == new
        || parsed.is_some_and(|new| serde_json::from_slice::<Value>(old).ok().as_ref() == Some(new))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::layout::refusal;

    #[test]
    fn only_daf_places_are_writable() {
        assert!(ZarrV2.writable_place("vectors/cell/size/0", false));
        assert!(ZarrV2.writable_place(".zattrs.1234.partial", false));
        assert!(!ZarrV2.writable_place("foo", true));
    }

    #[test]
    fn names_that_could_never_commit_are_refused() {
        for rel in [
            "vectors/cell/size/.zarray",
            "vectors/cell/size/0.1234.partial",
            "vectors/cell/size/0.__lock",
            ".zattrs",
            ".zmetadata",
            "matrices/cell/gene/.zgroup",
            "vectors/cell/.zattrs.1234.partial",
        ] {
            assert_eq!(refusal(&ZarrV2, rel), None, "{rel}");
        }
        for rel in [
            "daf/.zattrs",
            "vectors/.zmetadata",
            "vectors/cell/0",
            "notes",
        ] {
            assert!(refusal(&ZarrV2, rel).is_some(), "{rel}");
        }
    }

    #[test]
    fn group_documents_are_accepted_only_when_they_change_nothing() {
        let noop = |rel, new: &[u8], old: Option<&[u8]>| ZarrV2.group_document_noop(rel, new, old);
        assert!(noop(".zattrs", b"{}", None).is_ok());
        assert!(noop(".zattrs", b"{\"_ARRAY_DIMENSIONS\":[\"x\"]}", None).is_ok());
        assert!(noop("vectors/.zgroup", b"{\n \"zarr_format\": 2\n}", None).is_ok());
        assert!(noop(".zmetadata", b"anything", None).is_ok());
        assert!(noop(".zattrs", b"{\"a\":1}", Some(b"{ \"a\": 1 }")).is_ok());
        assert!(noop(".zattrs", b"{\"a\":1}", None).is_err());
        assert!(noop(".zattrs", b"", None).is_err());
        assert!(noop(".zgroup", b"{\"zarr_format\":3}", None).is_err());
    }

    #[test]
    fn paths_map_to_their_items() {
        let v = |axis: &str, name: &str| {
            Some(PropertyId::Vector {
                axis: axis.into(),
                name: name.into(),
            })
        };
        assert_eq!(
            ZarrV2.item_of("vectors/cell/size/.zarray"),
            v("cell", "size")
        );
        assert_eq!(
            ZarrV2.item_of("vectors/cell/size/nzind/0"),
            v("cell", "size")
        );
        assert_eq!(ZarrV2.item_of("vectors/cell/.zgroup"), None);
        assert_eq!(
            ZarrV2.item_of("vectors/cell/size/.zarray.1234.partial"),
            None
        );
        assert_eq!(ZarrV2.item_of("vectors/cell/size/0.1234.partial"), None);
        assert_eq!(
            ZarrV2.item_of("matrices/a/b/m/0/1"),
            Some(PropertyId::Matrix {
                rows: "a".into(),
                cols: "b".into(),
                name: "m".into()
            })
        );
    }
}
