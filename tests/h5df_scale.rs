//! H5df sources at scale: a large flat matrix is served from the file's map (zero copy: the
//! daemon's RssAnon stays under 64 MiB while both views are read whole), and a file of 10,000
//! properties mounts quickly.

mod common;

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{h5, io_deadline, read_and_watch, rss_anon, start_foreground, Unmount};

/// Rows and columns of the flat matrix (dataspace `[COLS, ROWS]`), UInt32: 256 MiB.
const ROWS: usize = 8192;
const COLS: usize = 8192;
/// The most anonymous memory the daemon may hold while serving it.
const BOUND: u64 = 64 << 20;

/// The value at C-order flat position `k` of the matrix.
fn value(k: u64) -> u32 {
    (k as u32).wrapping_mul(2_654_435_761) >> 7
}

/// Writes `big.h5df`: axes `r` (ROWS) and `c` (COLS) and the flat UInt32 matrix `r`×`c` `m`.
fn write_big(path: &Path) {
    let file = h5::create(path);
    h5::axis(&file, "r", "r", ROWS);
    h5::axis(&file, "c", "c", COLS);
    let data: Vec<u32> = (0..(ROWS * COLS) as u64).map(value).collect();
    let group = h5::group(&file, "matrices/r/c");
    h5::flat(&group, "m", &[COLS, ROWS], &data);
}

#[test]
fn a_large_flat_matrix_is_served_from_the_map_in_both_views() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("big.h5df");
    write_big(&source);
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let child = start_foreground(
        &[source.to_str().unwrap(), mnt.to_str().unwrap()],
        Stdio::inherit(),
    );
    let pid = child.id();
    let mut guard = Unmount(child, mnt.clone());
    let baseline = rss_anon(pid);
    let (files, zarr) = (
        mnt.join("big.daf/matrices/r/c/m.data"),
        mnt.join("big.daf.zarr/matrices/r/c/m/0.0"),
    );
    let peaks = io_deadline(&mnt, Duration::from_secs(120), move || {
        (
            read_and_watch(files, pid, (ROWS * COLS * 4) as u64, value),
            read_and_watch(zarr, pid, (ROWS * COLS * 4) as u64, value),
        )
    });
    eprintln!(
        "big.h5df: RssAnon {} MiB at mount, peaks {} and {} MiB (bound {} MiB)",
        baseline >> 20,
        peaks.0 >> 20,
        peaks.1 >> 20,
        BOUND >> 20
    );
    assert!(peaks.0 < BOUND && peaks.1 < BOUND, "{peaks:?} over {BOUND}");
    assert_eq!(guard.unmount().code(), Some(0));
}

/// Properties of the many-properties file.
const PROPERTIES: usize = 10_000;

#[test]
fn a_file_of_ten_thousand_properties_mounts_within_a_second() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("many.h5df");
    {
        let file = h5::create(&source);
        h5::axis(&file, "cell", "c", 16);
        let vectors = h5::group(&file, "vectors/cell");
        let values: Vec<f64> = (0..16).map(f64::from).collect();
        for i in 0..PROPERTIES {
            h5::flat(&vectors, &format!("v{i}"), &[16], &values);
        }
    }
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let started = Instant::now();
    let child = start_foreground(
        &[source.to_str().unwrap(), mnt.to_str().unwrap()],
        Stdio::inherit(),
    );
    let took = started.elapsed();
    let mut guard = Unmount(child, mnt.clone());
    eprintln!("many.h5df: {PROPERTIES} properties mounted in {took:?}");
    let cell = mnt.join("many.daf/vectors/cell");
    let listed = io_deadline(&mnt, Duration::from_secs(60), move || {
        fs::read_dir(cell).unwrap().count()
    });
    assert_eq!(listed, 2 * PROPERTIES, "a .json and a .data per property");
    // The issue's bound (1 s) is for a release build (scripts/bench_h5df.py measures it: about
    // 0.4 s); a debug build takes about 0.5 s here, allowed 2 under a loaded test run.
    let limit = if cfg!(debug_assertions) { 2 } else { 1 };
    assert!(took < Duration::from_secs(limit), "{took:?}");
    assert_eq!(guard.unmount().code(), Some(0));
}
