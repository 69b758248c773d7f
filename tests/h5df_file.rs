//! `NAME.h5df` (`--h5df`) through real mounts, for every local source kind: its exact size
//! before the first read, 1,000 random `pread`s against a `cp` of it, `h5dump` opens it, and
//! the copy mounted again (an H5df source) shows the same FilesDaf and Zarr views, file by file;
//! a commit through a writable view shows in it; it refuses changes with `EROFS`; the H5df file
//! of a remote source is byte for byte the local one's.

mod common;
// The server of tests/http_sources.rs; this test uses only its start and URLs.
#[allow(dead_code)]
#[path = "http_sources/server.rs"]
mod server;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::SystemTime;

use common::{
    assert_same_files, change_refusals, copy_fixture, every_local_source, io_timeout,
    random_preads, read_tree, TestMount, Tree, VECTORS,
};
use daf_mount::core::DafFs;
use daf_mount::formats::json::FilesVersion;
use daf_mount::formats::source::{open_source, Format};
use daf_mount::staging::StagingArea;
use daf_mount::views::{ViewOptions, ViewSelection};

/// A mount of `source` with both views in FilesDaf 1.0 and Zarr v2 (so that a source and the
/// copy of its H5df file show the same formats), and the H5df files when `h5df`.
fn mount(source: &str, h5df: bool, writable: bool) -> TestMount {
    let opened = open_source(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    let staging = writable.then(|| StagingArea::for_source(&opened.path));
    let options = ViewOptions {
        h5df,
        zarr: Some(Format::ZarrV2),
        files: Some(FilesVersion::V1_0),
        ..ViewOptions::from(ViewSelection::Both)
    };
    let core = DafFs::with_staging(opened.datasets, options, SystemTime::UNIX_EPOCH, staging);
    TestMount::serving(Arc::new(core), writable, source)
}

/// The names at the mount root ending with `suffix`.
fn root_names(m: &TestMount, suffix: &'static str) -> Vec<String> {
    let root = m.path.clone();
    io_timeout(&m.path, move || {
        let mut names: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(suffix))
            .collect();
        names.sort();
        names
    })
}

/// The views of a mount by directory name (the H5df files left out).
fn views(m: &TestMount) -> Vec<(String, Tree)> {
    let names: Vec<String> = root_names(m, "")
        .into_iter()
        .filter(|n| !n.ends_with(".h5df"))
        .collect();
    let root = m.path.clone();
    io_timeout(&m.path, move || {
        names
            .into_iter()
            .map(|n| {
                let tree = read_tree(&root.join(&n));
                (n, tree)
            })
            .collect()
    })
}

fn h5dump_opens(path: &Path) {
    let out = Command::new("h5dump")
        .arg("-H")
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("h5dump: {e} (scripts/test installs hdf5-tools)"));
    assert!(
        out.status.success(),
        "h5dump {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every H5df file of `source`: size, random reads, `h5dump`, and the copy's views.
fn check_source(source: &str) {
    let original = mount(source, true, false);
    let names = root_names(&original, ".h5df");
    assert!(!names.is_empty(), "{source}: no H5df file");
    let expected = views(&original);
    let tmp = tempfile::tempdir().unwrap();
    for name in names {
        let (mounted, copy) = (original.join(&name), tmp.path().join(&name));
        let (m, c) = (mounted.clone(), copy.clone());
        // The size is exact before the first read; the random reads come first, while nothing
        // of the file is in the kernel's cache.
        let size = io_timeout(&original.path, move || {
            let size = std::fs::metadata(&m).unwrap().len();
            assert!(Command::new("cp")
                .arg(&m)
                .arg(&c)
                .status()
                .unwrap()
                .success());
            size
        });
        let copied = std::fs::read(&copy).unwrap();
        assert_eq!(size, copied.len() as u64, "{source}: {name}: st_size");
        let m = mounted.clone();
        io_timeout(&original.path, move || random_preads(m, copied));
        h5dump_opens(&copy);
        let m = mounted.clone();
        io_timeout(&original.path, move || h5dump_opens(&m));
        // The copy mounts again as an H5df source; its views are the original's.
        let again = mount(copy.to_str().unwrap(), false, false);
        let stem = name.trim_end_matches(".h5df");
        let shown = views(&again);
        assert_eq!(shown.len(), 2, "{source}: {name}: {shown:?}");
        for (view, tree) in shown {
            let suffix = view.strip_prefix(stem).unwrap_or_else(|| panic!("{view}"));
            let (_, want) = expected
                .iter()
                .find(|(n, _)| *n == format!("{stem}{suffix}"))
                .unwrap_or_else(|| panic!("{source}: no view {stem}{suffix}"));
            assert_same_files(
                &tree,
                want,
                &[],
                &format!("{source}: copy of {name}: {view}"),
            );
        }
    }
}

#[test]
fn h5df_files_of_every_local_source_kind() {
    require_fuse!();
    for source in every_local_source() {
        // A nested data set of a multi-data-set H5df file shows under a nested name: the copy
        // of such a file is checked like any other.
        check_source(&source);
    }
}

/// A property committed through a view is in the H5df file at once; the file refuses writes,
/// truncation and removal as a read-only file system does.
#[test]
fn a_committed_write_changes_the_h5df_file_which_is_read_only() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let m = mount(source.to_str().unwrap(), true, true);
    let (h5df, view) = (m.join("files_v1_0.h5df"), m.join("files_v1_0.daf"));
    let (before, after, refusals) = io_timeout(&m.path, move || {
        let before = std::fs::read(&h5df).unwrap();
        std::fs::write(
            view.join("scalars/added.json"),
            b"{\"value\":7,\"type\":\"Int64\"}\n",
        )
        .unwrap();
        let after = std::fs::read(&h5df).unwrap();
        let refusals = change_refusals(&h5df);
        (before, after, refusals)
    });
    assert_eq!(refusals, [Some(libc::EROFS); 3]);
    assert_ne!(before, after);
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("files_v1_0.h5df");
    std::fs::write(&copy, &after).unwrap();
    let h5 = hdf5_metno::File::open(&copy).unwrap();
    assert_eq!(
        h5.dataset("scalars/added")
            .unwrap()
            .read_scalar::<i64>()
            .unwrap(),
        7
    );
}

#[test]
fn without_the_option_there_is_no_h5df_file() {
    require_fuse!();
    let m = mount(&format!("{VECTORS}/zarr_v2.daf.zarr"), false, false);
    assert!(root_names(&m, ".h5df").is_empty());
}

/// The whole H5df file of `ds`, made and read by ranges as a mount serves it.
fn h5df_bytes(ds: &daf_mount::formats::source::NamedDataset) -> Vec<u8> {
    use daf_mount::stores::blob::RangeSource;
    let file = daf_mount::views::h5df::h5df_file(ds);
    let size = file.size().unwrap();
    file.read_range(0, size).unwrap().as_slice().to_vec()
}

/// A remote source's H5df file (payloads fetched by range when read) is the local one's, byte
/// for byte (the file is the same for the same data: no times in it).
#[test]
fn the_h5df_file_of_a_remote_source_is_the_local_ones() {
    use daf_mount::formats::remote::open_remote;
    use daf_mount::stores::http::HttpOptions;
    let tmp = tempfile::tempdir().unwrap();
    let copied = Command::new("cp")
        .arg("-r")
        .arg(VECTORS)
        .arg(tmp.path().join("v"))
        .status()
        .unwrap();
    assert!(copied.success());
    let server = server::Server::start(&tmp.path().join("v"));
    let options = HttpOptions {
        timeout: std::time::Duration::from_secs(5),
        ..HttpOptions::default()
    };
    for fixture in [
        "zarr_v2.daf.zarr",
        "zarr_v3.daf.zarr",
        "zarr_v3.daf.zarr.zip",
    ] {
        let remote = open_remote(&server.url(fixture), &options).unwrap();
        let local = open_source(&format!("{VECTORS}/{fixture}")).unwrap();
        let (a, b) = (
            h5df_bytes(&remote.datasets[0]),
            h5df_bytes(&local.datasets[0]),
        );
        assert!(a == b, "{fixture}: the remote source's H5df file differs");
    }
}
