//! Core tests: the views of every source kind against the fixtures, without a kernel.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::*;
use crate::formats::source::open_source;
use crate::views::ViewSelection;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

fn mount(source: &str, selection: ViewSelection) -> DafFs {
    let source = open_source(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    DafFs::new(source.datasets, selection, SystemTime::UNIX_EPOCH)
}

/// Every path under `dir` of the mount: `None` for directories, the bytes for files.
fn walk(fs: &DafFs, ino: u64, prefix: &str, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
    for entry in fs.readdir(ino, 2, usize::MAX).unwrap() {
        let path = if prefix.is_empty() {
            entry.name.clone()
        } else {
            format!("{prefix}/{}", entry.name)
        };
        let attr = fs.getattr(entry.ino).unwrap();
        match entry.kind {
            Kind::Dir => {
                out.insert(path.clone(), None);
                walk(fs, entry.ino, &path, out);
            }
            Kind::File => {
                let bytes = fs.content(entry.ino).unwrap().as_slice().to_vec();
                assert_eq!(
                    attr.size,
                    bytes.len() as u64,
                    "{path}: st_size must be exact"
                );
                out.insert(path, Some(bytes));
            }
        }
    }
}

fn walk_disk(root: &Path, prefix: &str, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
    for entry in std::fs::read_dir(root.join(prefix)).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type().unwrap().is_dir() {
            out.insert(path.clone(), None);
            walk_disk(root, &path, out);
        } else {
            out.insert(path, Some(std::fs::read(entry.path()).unwrap()));
        }
    }
}

/// Compares a view with a fixture tree: the same files; JSON equal as JSON, everything else byte
/// for byte; every fixture directory present (the view also has the empty directories Julia
/// creates, which a fixture kept in git cannot hold).
fn assert_same_tree(
    view: &BTreeMap<String, Option<Vec<u8>>>,
    fixture: &BTreeMap<String, Option<Vec<u8>>>,
    what: &str,
) {
    let files = |t: &BTreeMap<String, Option<Vec<u8>>>| {
        t.iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(files(view), files(fixture), "{what}: files differ");
    for dir in fixture.iter().filter(|(_, v)| v.is_none()).map(|(k, _)| k) {
        assert_eq!(
            view.get(dir),
            Some(&None),
            "{what}: directory {dir} missing"
        );
    }
    for (path, expected) in fixture {
        let got = &view[path];
        let (Some(got), Some(expected)) = (got, expected) else {
            continue;
        };
        if path.ends_with(".json")
            || path.ends_with(".zarray")
            || path.ends_with(".zgroup")
            || path.ends_with(".zattrs")
            || path.ends_with(".zmetadata")
        {
            let a: Value =
                serde_json::from_slice(got).unwrap_or_else(|e| panic!("{what}: {path}: {e}"));
            let b: Value = serde_json::from_slice(expected).unwrap();
            assert_eq!(a, b, "{what}: {path}");
        } else {
            assert_eq!(got, expected, "{what}: {path}");
        }
    }
}

fn fixture(name: &str, skip: &[&str]) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    walk_disk(&Path::new(VECTORS).join(name), "", &mut out);
    out.retain(|path, _| !skip.contains(&path.as_str()));
    out
}

fn view_of(fs: &DafFs, dir: &str) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    walk(fs, fs.resolve(dir).unwrap(), "", &mut out);
    out
}

#[test]
fn every_source_kind_shows_the_fixture_layouts() {
    // The seed FilesDaf fixture carries the seed-only sidecar axes/metadata.json, which is an
    // optional cache (§2.8) that the view does not synthesise.
    // The FilesDaf view of a FilesDaf source is in the source's version (its own files), without
    // the 1.1 root index metadata.json (§3.5, an optional cache the view does not keep).
    let files_1_0 = fixture("files_v1_0.daf", &["axes/metadata.json"]);
    let files_1_1 = fixture("files_v1_1.daf", &["metadata.json"]);
    let zarr = fixture("zarr_v2.daf.zarr", &[]);
    for (source, name, files) in [
        ("files_v1_0.daf", "files_v1_0", &files_1_0),
        ("files_v1_1.daf", "files_v1_1", &files_1_1),
        ("zarr_v2.daf.zarr", "zarr_v2", &files_1_0),
        ("zarr_v2.daf.zarr.zip", "zarr_v2", &files_1_0),
        ("zipdaf_v1_0.daf.zip", "zipdaf_v1_0", &files_1_0),
        ("multi_v1_1.dafs.zip#/g1", "g1", &files_1_1),
    ] {
        let fs = mount(&format!("{VECTORS}/{source}"), ViewSelection::Both);
        let root: Vec<String> = fs
            .readdir(ROOT, 2, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(
            root,
            vec![format!("{name}.daf"), format!("{name}.daf.zarr")],
            "{source}"
        );
        let files_view = view_of(&fs, &format!("{name}.daf"));
        assert_same_tree(&files_view, files, &format!("{source} FilesDaf view"));
        for dir in [
            "vectors/gene",
            "matrices/cell/cell",
            "matrices/gene/cell",
            "matrices/gene/gene",
        ] {
            assert_eq!(
                files_view.get(dir),
                Some(&None),
                "{source}: FilesDaf needs {dir}/"
            );
        }
        assert_same_tree(
            &view_of(&fs, &format!("{name}.daf.zarr")),
            &zarr,
            &format!("{source} Zarr view"),
        );
    }
}

#[test]
fn zmetadata_keys_are_sorted() {
    let fs = mount(&format!("{VECTORS}/files_v1_0.daf"), ViewSelection::Zarr);
    let text = fs.content(fs.resolve(".zmetadata").unwrap()).unwrap();
    let doc: Value = serde_json::from_slice(text.as_slice()).unwrap();
    let keys: Vec<&String> = doc["metadata"].as_object().unwrap().keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert!(text.as_slice().ends_with(b"}\n"));
    assert!(std::str::from_utf8(text.as_slice())
        .unwrap()
        .contains("\n    \"metadata\": {\n        \".zattrs\": {},"));
}

#[test]
fn numeric_payloads_of_both_views_are_one_mapped_region() {
    for source in ["files_v1_0.daf", "zarr_v2.daf.zarr", "zarr_v2.daf.zarr.zip"] {
        let fs = mount(&format!("{VECTORS}/{source}"), ViewSelection::Both);
        let name = source.split('.').next().unwrap();
        for (files_path, zarr_path) in [
            ("vectors/cell/score.data", "vectors/cell/score/0"),
            ("vectors/cell/counts.nzval", "vectors/cell/counts/nzval/0"),
            (
                "matrices/cell/gene/expr.data",
                "matrices/cell/gene/expr/0.0",
            ),
            (
                "matrices/cell/gene/umis.colptr",
                "matrices/cell/gene/umis/colptr/0",
            ),
        ] {
            let a = fs
                .content(fs.resolve(&format!("{name}.daf/{files_path}")).unwrap())
                .unwrap();
            let b = fs
                .content(fs.resolve(&format!("{name}.daf.zarr/{zarr_path}")).unwrap())
                .unwrap();
            // A stored ZIP entry is a range of the archive's map; a small source file (at most
            // stores::dir::SMALL_FILE) is read once into a buffer. Either way both views share it.
            assert_eq!(
                a.is_mapped() && b.is_mapped(),
                source.ends_with(".zip"),
                "{source}: {files_path} must come from the archive's map or the file's one buffer"
            );
            assert_eq!(
                a.as_slice().as_ptr(),
                b.as_slice().as_ptr(),
                "{source}: {files_path} and {zarr_path}"
            );
            assert_eq!(a.len(), b.len());
        }
    }
}

#[test]
fn single_view_selection_mounts_at_the_root() {
    let fs = mount(
        &format!("{VECTORS}/zarr_v2.daf.zarr.zip"),
        ViewSelection::Files,
    );
    let root: Vec<String> = fs
        .readdir(ROOT, 2, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        root,
        vec!["axes", "daf.json", "matrices", "scalars", "vectors"]
    );
    let fs = mount(
        &format!("{VECTORS}/zarr_v2.daf.zarr.zip"),
        ViewSelection::Zarr,
    );
    assert!(fs.resolve(".zmetadata").is_ok());
}

#[test]
fn operations_answer_like_a_read_only_file_system() {
    let fs = mount(&format!("{VECTORS}/files_v1_0.daf"), ViewSelection::Both);
    let axis = fs.resolve("files_v1_0.daf/axes/cell.txt").unwrap();
    assert_eq!(fs.read(axis, 0, 3, 100).unwrap().as_slice(), b"c2\nc3\n");
    assert_eq!(fs.read(axis, 0, 100, 10).unwrap().len(), 0);
    assert!(matches!(fs.open(axis, true, false), Err(FsError::ReadOnly)));
    assert!(fs.open(axis, false, false).is_ok());
    assert!(matches!(
        fs.lookup(axis, OsStr::new("x")),
        Err(FsError::NotDir)
    ));
    assert!(matches!(
        fs.lookup(ROOT, OsStr::new("nope")),
        Err(FsError::NotFound)
    ));
    assert!(matches!(
        fs.readdir(axis, 0, usize::MAX),
        Err(FsError::NotDir)
    ));
    let dir = fs.resolve("files_v1_0.daf/matrices").unwrap();
    let attr = fs.getattr(dir).unwrap();
    assert_eq!((attr.kind, attr.perm, attr.nlink), (Kind::Dir, 0o555, 4));
    // readdir offsets resume exactly after the last entry returned.
    let all = fs.readdir(dir, 0, usize::MAX).unwrap();
    assert_eq!(
        all.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        vec![".", "..", "cell", "gene"]
    );
    assert_eq!(
        fs.readdir(dir, all[2].next_offset, usize::MAX).unwrap()[0].name,
        "gene"
    );
    // Directory mtimes are the latest of their contents; files keep their source's.
    let source_mtime = std::fs::metadata(format!("{VECTORS}/files_v1_0.daf/axes/cell.txt"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(fs.getattr(axis).unwrap().mtime, source_mtime);
    assert!(fs.stats().inodes > 50);
}
