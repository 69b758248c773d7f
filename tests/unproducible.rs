//! A file whose size is only known by producing it, and whose producing fails (a bad decode):
//! every listing still shows it (size 0, attributes not cached), reading it fails with `EIO`,
//! and its producer is not run again at every access.

mod common;

use std::ffi::OsStr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use common::{io_timeout, TestMount, VECTORS};
use daf_mount::core::DafFs;
use daf_mount::formats::model::Payload;
use daf_mount::formats::source::open_source;
use daf_mount::stores::{Blob, StoreError};
use daf_mount::views::ViewSelection;

/// The FilesDaf fixture with the data of vector `cell/score` replaced by a producer of unknown
/// length that fails (counting its runs).
fn failing_score() -> (DafFs, Arc<AtomicUsize>) {
    let source = format!("{VECTORS}/files_v1_0.daf");
    let mut opened = open_source(&source).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let property = opened.datasets[0]
        .dataset
        .vectors
        .get_mut("cell")
        .and_then(|v| v.get_mut("score"))
        .unwrap();
    let Payload::Dense { data, .. } = &mut property.payload else {
        panic!("score is dense in the fixture");
    };
    *data = Blob::lazy(None, move || {
        counter.fetch_add(1, Ordering::Relaxed);
        Err(StoreError::Produce("decoding score: corrupt".into()))
    });
    let fs = DafFs::new(opened.datasets, ViewSelection::Both, SystemTime::UNIX_EPOCH);
    (fs, runs)
}

const CELL_VECTORS: [&str; 9] = [
    "counts.json",
    "counts.nzind",
    "counts.nzval",
    "is_marker.json",
    "is_marker.nzind",
    "score.data",
    "score.json",
    "type.json",
    "type.txt",
];

#[test]
fn every_entry_has_attributes_and_the_failing_one_reads_as_an_error() {
    let (fs, runs) = failing_score();
    let dir = fs.resolve("files_v1_0.daf/vectors/cell").unwrap();
    let entries = fs.readdir(dir, 2, usize::MAX).unwrap();
    let names: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    assert_eq!(names, CELL_VECTORS);
    for e in &entries {
        let attr = fs.getattr(e.ino).unwrap();
        assert_eq!(attr.unknown_size, e.name == "score.data", "{}", e.name);
        if e.name == "score.data" {
            assert_eq!(attr.size, 0);
            let err = fs.read(e.ino, 0, 0, 4096).unwrap_err();
            assert!(err.to_string().contains("corrupt"), "{err}");
        }
    }
    // The Zarr view's chunk is the same blob.
    let chunk = fs
        .resolve("files_v1_0.daf.zarr/vectors/cell/score")
        .unwrap();
    let chunk = fs.lookup(chunk, OsStr::new("0")).unwrap();
    assert!(chunk.unknown_size);
    assert!(fs.read(chunk.ino, 0, 0, 4096).is_err());
    assert_eq!(
        runs.load(Ordering::Relaxed),
        1,
        "the failing producer ran again"
    );
}

#[test]
fn ls_lists_every_entry_and_the_failing_file_reads_eio() {
    require_fuse!();
    let (fs, _runs) = failing_score();
    let mount = TestMount::serving(Arc::new(fs), false, "unproducible");
    let root = mount.path.clone();
    let (listing, read) = io_timeout(&mount.path, move || {
        let dir = root.join("files_v1_0.daf/vectors/cell");
        let ls = std::process::Command::new("ls")
            .arg("-l")
            .arg(&dir)
            .output()
            .unwrap();
        let read = std::fs::read(dir.join("score.data")).map_err(|e| e.raw_os_error());
        (ls, read)
    });
    let stdout = String::from_utf8_lossy(&listing.stdout);
    let stderr = String::from_utf8_lossy(&listing.stderr);
    assert!(listing.status.success(), "ls -l: {stderr}");
    for name in CELL_VECTORS {
        assert!(
            stdout.lines().any(|l| l.ends_with(&format!(" {name}"))),
            "{name} missing from ls -l:\n{stdout}"
        );
    }
    assert_eq!(read, Err(Some(libc::EIO)));
}
