//! `--dimension-names` (no kernel): for every source kind and both Zarr view formats, the named
//! view has the same files as the plain one, the same bytes for everything but the array
//! documents, and documents that differ only by the dimension names (also in the consolidated
//! metadata); the names follow the axes, one per dimension, and never give one name two lengths
//! within a group and its ancestors (what xarray's `open_datatree` requires).

use std::collections::{BTreeMap, BTreeSet};

use daf_mount::formats::source::{open_source, Format, NamedDataset};
use daf_mount::views::{ViewOptions, ViewSelection};
use serde_json::{json, Value};

mod common;

use common::every_local_source as sources;

/// The Zarr view(s) of `datasets` in `format`: path → `None` (directory) or the bytes.
fn zarr_view(
    datasets: &[NamedDataset],
    format: Format,
    names: bool,
) -> BTreeMap<String, Option<Vec<u8>>> {
    let options = ViewOptions {
        zarr: Some(format),
        dimension_names: names,
        ..ViewOptions::from(ViewSelection::Zarr)
    };
    common::rendered_views(datasets, &options, None)
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

/// The names `path` (below a data set root, Zarr shape `shape`) must have, computed here
/// independently: axes and vectors after their axis, matrices `[C, R]` (`[A, A_rows]` when square),
/// sparse components `nnz`/`ncolptr`, scalars `scalar`, the v2 `daf` array `daf_version` (none of
/// the fixtures has an axis that these names would have to avoid).
fn expected(path: &str) -> Vec<String> {
    let parts: Vec<&str> = path.split('/').collect();
    let names: Vec<String> = match parts.as_slice() {
        ["daf"] => vec!["daf_version".into()],
        ["scalars", _] => vec!["scalar".into()],
        ["axes", a] | ["vectors", a, _] => vec![a.to_string()],
        [.., "colptr"] => vec!["ncolptr".into()],
        [_, _, _, "nzind" | "nzval"] | [_, _, _, _, "rowval" | "nzval"] => vec!["nnz".into()],
        ["matrices", r, c, _] if r == c => vec![c.to_string(), format!("{r}_rows")],
        ["matrices", r, c, _] => vec![c.to_string(), r.to_string()],
        _ => panic!("{path}: not an array of a Daf data set"),
    };
    names
}

/// An array of a view: its path below the data set root, its shape, its dimension names.
type Array = (String, Vec<u64>, Vec<String>);

/// Checks the arrays of one view below data set root `root`.
fn check_groups(root: &str, arrays: &[Array], what: &str) {
    let groups: BTreeSet<String> = arrays
        .iter()
        .map(|(p, _, _)| p.rsplit_once('/').map_or("", |(g, _)| g).to_string())
        .collect();
    for group in groups {
        // The group and its ancestors: one length per name.
        let mut lengths: BTreeMap<&str, u64> = BTreeMap::new();
        for (path, shape, names) in arrays {
            let parent = path.rsplit_once('/').map_or("", |(g, _)| g);
            let ancestor =
                parent.is_empty() || group == parent || group.starts_with(&format!("{parent}/"));
            if !ancestor {
                continue;
            }
            for (name, &len) in names.iter().zip(shape) {
                let seen = *lengths.entry(name).or_insert(len);
                assert_eq!(seen, len, "{what}: {root}/{group}: {name} has two lengths");
            }
        }
    }
}

#[test]
fn named_views_differ_from_plain_ones_only_by_the_names() {
    for source in sources() {
        let opened = open_source(&source).unwrap_or_else(|e| panic!("{source}: {e}"));
        for format in [Format::ZarrV2, Format::ZarrV3] {
            let what = format!("{source} as {format:?}");
            let plain = zarr_view(&opened.datasets, format, false);
            let named = zarr_view(&opened.datasets, format, true);
            assert_eq!(
                plain.keys().collect::<Vec<_>>(),
                named.keys().collect::<Vec<_>>(),
                "{what}"
            );
            let roots: Vec<String> = plain
                .keys()
                .filter(|p| p.ends_with(".zgroup") || p.ends_with("zarr.json"))
                .filter(|p| {
                    let daf = p
                        .rsplit_once('/')
                        .map_or("daf".to_string(), |(d, _)| format!("{d}/daf"));
                    let v3_root = format == Format::ZarrV3
                        && parse(plain[*p].as_ref().unwrap())
                            .pointer("/attributes/daf")
                            .is_some();
                    plain.contains_key(&format!("{daf}/.zarray")) || v3_root
                })
                .map(|p| p.rsplit_once('/').map_or("", |(d, _)| d).to_string())
                .collect();
            assert_eq!(roots.len(), opened.datasets.len(), "{what}: {roots:?}");
            let mut arrays: BTreeMap<String, Vec<Array>> = BTreeMap::new();
            for (path, before) in &plain {
                let (Some(before), Some(after)) = (before, &named[path]) else {
                    continue;
                };
                let (node, name) = path.rsplit_once('/').unwrap_or(("", path));
                let root = roots
                    .iter()
                    .filter(|r| r.is_empty() || node == *r || node.starts_with(&format!("{r}/")))
                    .max_by_key(|r| r.len())
                    .unwrap();
                let rel = node
                    .strip_prefix(root.as_str())
                    .unwrap()
                    .trim_start_matches('/');
                let (shape, names) = match (format, name) {
                    (Format::ZarrV2, ".zattrs")
                        if plain.contains_key(&format!("{node}/.zarray")) =>
                    {
                        assert_eq!(before, b"{}", "{what}: {path}");
                        let attrs = parse(after);
                        let names = attrs["_ARRAY_DIMENSIONS"].clone();
                        assert_eq!(
                            attrs,
                            json!({ "_ARRAY_DIMENSIONS": names }),
                            "{what}: {path}"
                        );
                        let zarray = parse(plain[&format!("{node}/.zarray")].as_ref().unwrap());
                        (zarray["shape"].clone(), names)
                    }
                    (Format::ZarrV3, "zarr.json") if parse(before)["node_type"] == "array" => {
                        let mut doc = parse(after);
                        let names = doc
                            .as_object_mut()
                            .unwrap()
                            .remove("dimension_names")
                            .unwrap_or_else(|| panic!("{what}: {path} has no names"));
                        assert_eq!(doc, parse(before), "{what}: {path}");
                        (doc["shape"].clone(), names)
                    }
                    (_, ".zmetadata") | (Format::ZarrV3, "zarr.json") => continue,
                    _ => {
                        assert_eq!(before, after, "{what}: {path} must be unchanged");
                        continue;
                    }
                };
                let shape: Vec<u64> = serde_json::from_value(shape).unwrap();
                let names: Vec<String> = serde_json::from_value(names).unwrap();
                assert_eq!(names, expected(rel), "{what}: {path}");
                assert_eq!(names.len(), shape.len(), "{what}: {path}");
                let distinct: BTreeSet<&String> = names.iter().collect();
                assert_eq!(distinct.len(), names.len(), "{what}: {path}");
                let of_root = arrays.entry(root.clone()).or_default();
                of_root.push((rel.to_string(), shape, names));
            }
            assert_eq!(
                arrays.len(),
                roots.len(),
                "{what}: every data set has arrays"
            );
            for (root, arrays) in &arrays {
                check_groups(root, arrays, &what);
                check_consolidated(&named, root, arrays, format, &what);
            }
        }
    }
}

/// The consolidated metadata of data set `root` holds each array's names too.
fn check_consolidated(
    view: &BTreeMap<String, Option<Vec<u8>>>,
    root: &str,
    arrays: &[Array],
    format: Format,
    what: &str,
) {
    let at = |rel: &str| {
        if root.is_empty() {
            rel.to_string()
        } else {
            format!("{root}/{rel}")
        }
    };
    for (path, _, names) in arrays {
        let entry = match format {
            Format::ZarrV2 => {
                let doc = parse(view[&at(".zmetadata")].as_ref().unwrap());
                doc["metadata"][format!("{path}/.zattrs")]["_ARRAY_DIMENSIONS"].clone()
            }
            _ => {
                let doc = parse(view[&at("zarr.json")].as_ref().unwrap());
                doc["consolidated_metadata"]["metadata"][path]["dimension_names"].clone()
            }
        };
        assert_eq!(entry, json!(names), "{what}: {root} consolidated {path}");
    }
}
