//! The published ZIP (`--zip`) through real mounts, for every source kind: `cp` of
//! `NAME.daf.zarr.zip`, then `unzip -t` and `python3 -m zipfile -t`, a mount of the copy that
//! equals the original's views file by file, random `pread`s of the mounted file against the copy,
//! and what a write through the views does to it.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::SystemTime;

use common::{
    assert_same_files, copy_fixture, io_timeout, random_preads, read_tree, TestMount, Tree, VECTORS,
};
use daf_mount::core::DafFs;
use daf_mount::formats::source::open_source;
use daf_mount::staging::StagingArea;
use daf_mount::views::{ViewOptions, ViewSelection};

const PACKED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");

/// A mount of `source` with both views and the published ZIPs (`--zip`).
fn mount(source: &str, zip: bool, writable: bool) -> TestMount {
    let opened = open_source(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    let staging = writable.then(|| StagingArea::for_source(&opened.path));
    let options = ViewOptions {
        zip,
        ..ViewOptions::from(ViewSelection::Both)
    };
    let core = DafFs::with_staging(opened.datasets, options, SystemTime::UNIX_EPOCH, staging);
    TestMount::serving(Arc::new(core), writable, source)
}

fn run_ok(program: &str, args: &[&str], archive: &Path) {
    let out = Command::new(program)
        .args(args)
        .arg(archive)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/test installs it)"));
    assert!(
        out.status.success(),
        "{program} {args:?} {}: {}{}",
        archive.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The views of a mount, by view directory name (the published files left out).
fn views(mount: &TestMount) -> Vec<(String, Tree)> {
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let mut names: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.ends_with(".zip"))
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|n| {
                let tree = read_tree(&root.join(&n));
                (n, tree)
            })
            .collect()
    })
}

/// Publishes every data set of `source`, copies each published file with `cp`, checks it, and
/// mounts each copy: its views equal the original's (only its Zarr view when `files_view` is
/// false).
fn check_source(source: &str, files_view: bool) {
    let original = mount(source, true, false);
    let root = original.path.clone();
    let published: Vec<String> = io_timeout(&original.path, move || {
        std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".daf.zarr.zip"))
            .collect()
    });
    assert!(!published.is_empty(), "{source}: no published ZIP");
    let expected_views = views(&original);
    let tmp = tempfile::tempdir().unwrap();
    for name in published {
        let mounted = original.join(&name);
        let copy = tmp.path().join(&name);
        // The size is exact before the first read; random reads come first, while nothing of
        // the file is in the kernel's cache.
        let (m, c) = (mounted.clone(), copy.clone());
        let size = io_timeout(&original.path, move || {
            let size = std::fs::metadata(&m).unwrap().len();
            let copied = Command::new("cp").arg(&m).arg(&c).status().unwrap();
            assert!(copied.success());
            size
        });
        let copied = std::fs::read(&copy).unwrap();
        assert_eq!(size, copied.len() as u64, "{source}: {name}: st_size");
        let m = mounted.clone();
        io_timeout(&original.path, move || random_preads(m, copied));
        run_ok("unzip", &["-tq"], &copy);
        run_ok("python3", &["-m", "zipfile", "-t"], &copy);
        // The copy mounts again; its views are the original's for this data set.
        let again = mount(copy.to_str().unwrap(), false, false);
        let stem = name.trim_end_matches(".daf.zarr.zip");
        for (view, tree) in views(&again) {
            let suffix = view.strip_prefix(stem).unwrap_or_else(|| panic!("{view}"));
            let (_, expected) = expected_views
                .iter()
                .find(|(n, _)| *n == format!("{stem}{suffix}"))
                .unwrap_or_else(|| panic!("{source}: no view {stem}{suffix}"));
            // Zarr has no sparse strings: such a property is dense in the copy (its values are
            // checked by the Zarr view, which shows it dense in both).
            let sparse_strings: Vec<String> = expected
                .keys()
                .filter_map(|k| k.strip_suffix(".nztxt"))
                .flat_map(|p| {
                    ["json", "nztxt", "nzind", "colptr", "rowval", "txt"]
                        .map(|e| format!("{p}.{e}"))
                })
                .collect();
            let ignore: Vec<&str> = sparse_strings.iter().map(String::as_str).collect();
            if !files_view && !view.ends_with(".zarr") {
                continue;
            }
            let what = format!("{source}: copy of {name}: {view}");
            assert!(ignore.is_empty() || !view.ends_with(".zarr"), "{what}");
            assert_same_files(&tree, expected, &ignore, &what);
        }
    }
}

#[test]
fn published_zips_of_filesdaf_directories() {
    require_fuse!();
    check_source(&format!("{VECTORS}/files_v1_0.daf"), true);
    check_source(&format!("{VECTORS}/files_v1_1.daf"), true);
}

#[test]
fn published_zips_of_zarr_directories_and_zips() {
    require_fuse!();
    for source in [
        "zarr_v2.daf.zarr",
        "zarr_v2.daf.zarr.zip",
        "zarr_v3.daf.zarr",
        "zarr_v3.daf.zarr.zip",
    ] {
        check_source(&format!("{VECTORS}/{source}"), true);
    }
}

#[test]
fn published_zips_of_zipdafs_and_multi_archives() {
    require_fuse!();
    for source in [
        "zipdaf_v1_0.daf.zip",
        "zipdaf_v1_1.daf.zip",
        "multi_v1_1.dafs.zip",
    ] {
        check_source(&format!("{VECTORS}/{source}"), true);
    }
}

#[test]
fn published_zips_of_packed_sources() {
    require_fuse!();
    for source in [
        "files_packed.daf",
        "zarr_packed.daf.zarr",
        "zarr_packed.daf.zarr.zip",
        "zipdaf_packed.daf.zip",
        "multi_v3.dafs.zarr.zip",
        "foreign_v3.daf.zarr",
    ] {
        // The FilesDaf view of a FilesDaf 1.1 source (a directory or a ZipDaf) serves the
        // source's own descriptors (a sparse vector's short form), which a copy made from the
        // Zarr view cannot have; its Zarr view is compared whole.
        let files_source = source.starts_with("files") || source.starts_with("zipdaf");
        check_source(&format!("{PACKED}/{source}"), !files_source);
    }
}

#[test]
fn without_the_option_there_is_no_published_zip() {
    require_fuse!();
    let m = mount(&format!("{VECTORS}/zarr_v2.daf.zarr"), false, false);
    let root = m.path.clone();
    let names: Vec<String> = io_timeout(&m.path, move || {
        std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    });
    assert!(names.iter().all(|n| !n.ends_with(".zip")), "{names:?}");
}

/// A property committed through a view is in the published file at once: new size, new entry,
/// and the old bytes are not served from the kernel's cache. The file itself is read-only.
#[test]
fn a_committed_write_changes_the_published_zip() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let m = mount(source.to_str().unwrap(), true, true);
    let published = m.join("files_v1_0.daf.zarr.zip");
    let view = m.join("files_v1_0.daf");
    let (p, v) = (published.clone(), view.clone());
    let (before, after, refused) = io_timeout(&m.path, move || {
        let before = std::fs::read(&p).unwrap();
        std::fs::write(
            v.join("scalars/added.json"),
            b"{\"value\":7,\"type\":\"Int64\"}\n",
        )
        .unwrap();
        let after = std::fs::read(&p).unwrap();
        let refused = std::fs::OpenOptions::new().write(true).open(&p).is_err();
        (before, after, refused)
    });
    assert!(refused, "the published file must not open for writing");
    assert!(after.len() > before.len());
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("files_v1_0.daf.zarr.zip");
    std::fs::write(&copy, &after).unwrap();
    run_ok("python3", &["-m", "zipfile", "-t"], &copy);
    let names = common::zip_names(&copy);
    assert!(
        names.iter().any(|n| n == "scalars/added/0"),
        "the new scalar is not in {names:?}"
    );
}
