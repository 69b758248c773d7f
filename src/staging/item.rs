//! Which item (scalar, axis, vector, matrix) a path of a view belongs to, and where new files may
//! be created at all: the layout knowledge the write path needs about paths.

use crate::formats::model::PropertyId;
use crate::views::ViewKind;

const VECTOR_FILES: [&str; 6] = ["json", "data", "txt", "nzind", "nzval", "nztxt"];
const MATRIX_FILES: [&str; 7] = ["json", "data", "txt", "colptr", "rowval", "nzval", "nztxt"];

/// The item a path of a view belongs to (`None` for other names, such as temporary files).
pub fn item_of(kind: ViewKind, rel: &str) -> Option<PropertyId> {
    let parts: Vec<&str> = rel.split('/').collect();
    if parts.last()?.starts_with('.') && kind == ViewKind::Files {
        return None;
    }
    let named = |file: &str, exts: &[&str]| {
        let (name, ext) = file.rsplit_once('.')?;
        (exts.contains(&ext) && !name.is_empty()).then(|| name.to_string())
    };
    match (kind, parts.as_slice()) {
        (ViewKind::Files, ["scalars", file]) => named(file, &["json"]).map(PropertyId::Scalar),
        (ViewKind::Files, ["axes", file]) => named(file, &["txt"]).map(PropertyId::Axis),
        (ViewKind::Files, ["vectors", axis, file]) => {
            named(file, &VECTOR_FILES).map(|name| PropertyId::Vector {
                axis: axis.to_string(),
                name,
            })
        }
        (ViewKind::Files, ["matrices", rows, cols, file]) => {
            named(file, &MATRIX_FILES).map(|name| PropertyId::Matrix {
                rows: rows.to_string(),
                cols: cols.to_string(),
                name,
            })
        }
        (ViewKind::Zarr, ["scalars", name, rest @ ..]) if zarr_node_file(rest) => {
            Some(PropertyId::Scalar(name.to_string()))
        }
        (ViewKind::Zarr, ["axes", name, rest @ ..]) if zarr_node_file(rest) => {
            Some(PropertyId::Axis(name.to_string()))
        }
        (ViewKind::Zarr, ["vectors", axis, name, rest @ ..]) if zarr_node_file(rest) => {
            Some(PropertyId::Vector {
                axis: axis.to_string(),
                name: name.to_string(),
            })
        }
        (ViewKind::Zarr, ["matrices", rows, cols, name, rest @ ..]) if zarr_node_file(rest) => {
            Some(PropertyId::Matrix {
                rows: rows.to_string(),
                cols: cols.to_string(),
                name: name.to_string(),
            })
        }
        _ => None,
    }
}

/// Whether `rest` (the path below an item's node) names a file of the node: its documents or a
/// chunk, possibly in a sparse component (`nzind/0`) or with `/`-separated chunk keys. Temporary
/// names (`.zarray.<uuid>.partial`) are not.
fn zarr_node_file(rest: &[&str]) -> bool {
    let chunk = |c: &str| {
        !c.is_empty()
            && c.split('.')
                .all(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    };
    let Some((last, dirs)) = rest.split_last() else {
        return false;
    };
    let dirs_ok = dirs
        .iter()
        .enumerate()
        .all(|(i, d)| chunk(d) || (i == 0 && ["nzind", "nzval", "colptr", "rowval"].contains(d)));
    dirs_ok && ([".zarray", ".zattrs", ".zgroup"].contains(last) || chunk(last))
}

/// Whether a new file (or directory) may be created at `rel` of a view: only where a Daf item can
/// live, plus hidden names (temporary files, Zarr group and array documents) and the FilesDaf
/// index `metadata.json` with its rebuild temporary (dropped: derived data).
pub fn writable_place(kind: ViewKind, rel: &str, is_dir: bool) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let hidden = parts.last().is_some_and(|n| n.starts_with('.'));
    match kind {
        ViewKind::Files => match (is_dir, parts.as_slice()) {
            (false, [name]) => hidden || [FILES_INDEX, FILES_INDEX_NEW].contains(name),
            (false, ["scalars" | "axes", _])
            | (false, ["vectors", _, _])
            | (false, ["matrices", _, _, _]) => true,
            (true, ["vectors" | "matrices", _]) | (true, ["matrices", _, _]) => true,
            _ => false,
        },
        ViewKind::Zarr => {
            hidden
                || matches!(
                    parts.as_slice(),
                    ["scalars" | "axes" | "vectors" | "matrices", _, ..]
                )
        }
    }
}

/// Documents of a Zarr group that writers rewrite with no change (`.zgroup`, `{}` attributes):
/// they may be written where a group of the Daf layout is, and are then dropped if they carry
/// nothing ([`group_document_noop`]).
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

/// Whether the file name at `rel` is a temporary of a writer (renamed into place later): a
/// hidden name in the FilesDaf view; in the Zarr view a hidden name that is not a Zarr document,
/// a `*.partial` name (zarr-python) or a `*.__lock` name (TensorStore writes `KEY.__lock`, then
/// renames it to `KEY`).
pub fn is_temporary(kind: ViewKind, rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    match kind {
        ViewKind::Files => {
            (name.starts_with('.') && property_stem(name).is_none()) || rel == FILES_INDEX_NEW
        }
        ViewKind::Zarr => {
            name.ends_with(".partial")
                || name.ends_with(".__lock")
                || (name.starts_with('.')
                    && ![".zarray", ".zattrs", ".zgroup", ".zmetadata"].contains(&name))
        }
    }
}

/// `.` or `..` as the name of a FilesDaf file's property (`..json`, `...data`).
fn property_stem(name: &str) -> Option<&str> {
    let (stem, ext) = name.rsplit_once('.')?;
    ([".", ".."].contains(&stem) && is_daf_extension(ext)).then_some(stem)
}

fn is_daf_extension(ext: &str) -> bool {
    VECTOR_FILES.contains(&ext) || MATRIX_FILES.contains(&ext)
}

/// Why a file of a view cannot be written at `rel` (`None`: it may be). A file may sit only
/// where it can become part of an item (or be a writer's temporary, or a group document that
/// is dropped when it carries nothing): anything else could never be committed, so it is
/// refused when it is created, renamed or linked there, instead of staying staged forever.
/// Property names `.` and `..` are refused too.
pub fn refusal(kind: ViewKind, rel: &str) -> Option<String> {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    if name == "."
        || name == ".."
        || rel
            .split('/')
            .any(|c| c == "." || c == ".." || c.is_empty())
    {
        return Some(format!("{rel}: not a valid file name"));
    }
    if kind == ViewKind::Files {
        if let Some(stem) = property_stem(name) {
            return Some(format!("{rel}: a property cannot be named {stem:?}"));
        }
    }
    if item_of(kind, rel).is_some() || is_temporary(kind, rel) {
        return None;
    }
    if is_group_document(kind, rel) {
        return None;
    }
    Some(format!(
        "{rel}: not a file of a Daf item (a scalar, axis, vector or matrix); it could never be committed"
    ))
}

/// Whether the group document `rel` (not part of an item) with content `new` changes nothing,
/// given the committed document `old` at that place: equal JSON, a `.zgroup` of Zarr v2, `{}`
/// attributes, or xarray's `_ARRAY_DIMENSIONS` alone; a writer's `.zmetadata` or FilesDaf
/// `metadata.json` is derived data and always dropped. `Err` says why it is refused.
pub fn group_document_noop(rel: &str, new: &[u8], old: Option<&[u8]>) -> Result<(), String> {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    let parsed: Option<serde_json::Value> = serde_json::from_slice(new).ok();
    if name == ".zmetadata" || rel == FILES_INDEX || old == Some(new) {
        return Ok(());
    }
    if let (Some(old), Some(new)) = (old, &parsed) {
        if serde_json::from_slice::<serde_json::Value>(old)
            .ok()
            .as_ref()
            == Some(new)
        {
            return Ok(());
        }
    }
    let object = parsed.as_ref().and_then(serde_json::Value::as_object);
    let noop = match name {
        ".zgroup" => object.is_some_and(|o| {
            o.get("zarr_format") == Some(&serde_json::Value::from(2)) && o.len() == 1
        }),
        ".zattrs" => object.is_some_and(|attrs| {
            attrs.iter().all(|(key, names)| {
                key == "_ARRAY_DIMENSIONS"
                    && names
                        .as_array()
                        .is_some_and(|a| a.iter().all(serde_json::Value::is_string))
            })
        }),
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

/// Whether `rel` is a group document outside any item (see [`group_document_noop`]).
pub fn is_group_document(kind: ViewKind, rel: &str) -> bool {
    match kind {
        ViewKind::Zarr => item_of(kind, rel).is_none() && group_document_place(rel),
        // The FilesDaf 1.1 root index, which DataAxesFormats appends to after each write (and
        // rebuilds through `metadata.json.new`): derived from the items, so always dropped.
        ViewKind::Files => rel == FILES_INDEX,
    }
}

/// The FilesDaf 1.1 root index (`daf-formats.md` §3.5), relative to the view's root.
const FILES_INDEX: &str = "metadata.json";
/// The temporary DataAxesFormats rebuilds the index into, then renames over it.
const FILES_INDEX_NEW: &str = "metadata.json.new";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_daf_places_are_writable() {
        assert!(writable_place(
            ViewKind::Files,
            "vectors/cell/x.data",
            false
        ));
        assert!(writable_place(
            ViewKind::Files,
            "vectors/cell/.x.tmp",
            false
        ));
        assert!(writable_place(ViewKind::Files, "matrices/batch/cell", true));
        assert!(!writable_place(ViewKind::Files, "notes.txt", false));
        assert!(!writable_place(ViewKind::Files, "vectors/cell/sub", true));
        assert!(writable_place(ViewKind::Zarr, "vectors/cell/size/0", false));
        assert!(writable_place(
            ViewKind::Zarr,
            ".zattrs.1234.partial",
            false
        ));
        assert!(!writable_place(ViewKind::Zarr, "foo", true));
    }

    #[test]
    fn names_that_could_never_commit_are_refused() {
        use ViewKind::{Files, Zarr};
        for (kind, rel) in [
            (Files, "vectors/cell/score.data"),
            (Files, "scalars/n.json"),
            (Files, "vectors/cell/.score.data.partial"),
            (Files, "scalars/.t"),
            (Zarr, "vectors/cell/size/.zarray"),
            (Zarr, "vectors/cell/size/0.1234.partial"),
            (Zarr, "vectors/cell/size/0.__lock"),
            (Zarr, ".zattrs"),
            (Zarr, ".zmetadata"),
            (Zarr, "matrices/cell/gene/.zgroup"),
            (Zarr, "vectors/cell/.zattrs.1234.partial"),
        ] {
            assert_eq!(refusal(kind, rel), None, "{rel}");
        }
        for (kind, rel) in [
            (Files, "daf.json"),
            (Files, "scalars/notes.txt"),
            (Files, "vectors/cell/score.csv"),
            (Files, "scalars/..json"),
            (Files, "scalars/...json"),
            (Files, "vectors/cell/...data"),
            (Zarr, "daf/.zattrs"),
            (Zarr, "vectors/.zmetadata"),
            (Zarr, "vectors/cell/0"),
            (Zarr, "notes"),
        ] {
            assert!(refusal(kind, rel).is_some(), "{rel}");
        }
    }

    #[test]
    fn group_documents_are_accepted_only_when_they_change_nothing() {
        assert!(group_document_noop(".zattrs", b"{}", None).is_ok());
        assert!(group_document_noop(".zattrs", b"{\"_ARRAY_DIMENSIONS\":[\"x\"]}", None).is_ok());
        assert!(group_document_noop("vectors/.zgroup", b"{\n \"zarr_format\": 2\n}", None).is_ok());
        assert!(group_document_noop(".zmetadata", b"anything", None).is_ok());
        assert!(group_document_noop(".zattrs", b"{\"a\":1}", Some(b"{ \"a\": 1 }")).is_ok());
        assert!(group_document_noop(".zattrs", b"{\"a\":1}", None).is_err());
        assert!(group_document_noop(".zattrs", b"", None).is_err());
        assert!(group_document_noop(".zgroup", b"{\"zarr_format\":3}", None).is_err());
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
            item_of(ViewKind::Files, "vectors/cell/score.data"),
            v("cell", "score")
        );
        assert_eq!(
            item_of(ViewKind::Files, "vectors/cell/score.v2.json"),
            v("cell", "score.v2")
        );
        assert_eq!(
            item_of(ViewKind::Files, "vectors/cell/.score.data.tmp"),
            None
        );
        assert_eq!(item_of(ViewKind::Files, "vectors/cell/score.csv"), None);
        assert_eq!(
            item_of(ViewKind::Files, "scalars/n.json"),
            Some(PropertyId::Scalar("n".into()))
        );
        assert_eq!(
            item_of(ViewKind::Files, "axes/batch.txt"),
            Some(PropertyId::Axis("batch".into()))
        );
        assert_eq!(
            item_of(ViewKind::Files, "matrices/cell/gene/umis.colptr"),
            Some(PropertyId::Matrix {
                rows: "cell".into(),
                cols: "gene".into(),
                name: "umis".into()
            })
        );
        assert_eq!(
            item_of(ViewKind::Zarr, "vectors/cell/size/.zarray"),
            v("cell", "size")
        );
        assert_eq!(
            item_of(ViewKind::Zarr, "vectors/cell/size/nzind/0"),
            v("cell", "size")
        );
        assert_eq!(item_of(ViewKind::Zarr, "vectors/cell/.zgroup"), None);
        assert_eq!(
            item_of(ViewKind::Zarr, "vectors/cell/size/.zarray.1234.partial"),
            None
        );
        assert_eq!(
            item_of(ViewKind::Zarr, "vectors/cell/size/0.1234.partial"),
            None
        );
        assert_eq!(
            item_of(ViewKind::Zarr, "matrices/a/b/m/0/1"),
            Some(PropertyId::Matrix {
                rows: "a".into(),
                cols: "b".into(),
                name: "m".into()
            })
        );
    }
}
