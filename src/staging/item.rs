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
/// live, plus hidden names (temporary files, Zarr group and array documents).
pub fn writable_place(kind: ViewKind, rel: &str, is_dir: bool) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    let hidden = parts.last().is_some_and(|n| n.starts_with('.'));
    match kind {
        ViewKind::Files => match (is_dir, parts.as_slice()) {
            (false, [_]) => hidden,
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
