//! Reading a large compressed array through a mount keeps the daemon's anonymous memory under
//! the decode cache's bound (`-o decode_cache=`) plus 32 MiB (issue 12 allows 64): a foreign
//! chunked Zarr array is decoded chunk by chunk, a deflated ZIP member window by window, never
//! whole, and the decoded chunks the cache drops go back to the kernel (without
//! `sys::map_large_blocks`, glibc kept them: 104–112 MiB for a 64 MiB cache).

mod common;

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{io_deadline, read_and_watch, rss_anon, start_foreground, Unmount};

/// Rows and columns of the generated matrix (Zarr shape `[COLS, ROWS]`), `<u4`: 120 MiB.
const ROWS: u64 = 4096;
const COLS: u64 = 7680;
/// Zarr chunk: 256 columns of every row (4 MiB decoded).
const CHUNK_COLS: u64 = 256;
const CACHE: u64 = 64 << 20;
const SLACK: u64 = 32 << 20;

/// The value at C-order flat position `k` of the matrix.
fn value(k: u64) -> u32 {
    (k as u32).wrapping_mul(2_654_435_761) >> 20
}

fn write_json(path: &Path, json: serde_json::Value) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, json.to_string()).unwrap();
}

fn group(dir: &Path) {
    write_json(&dir.join(".zgroup"), serde_json::json!({"zarr_format": 2}));
    write_json(&dir.join(".zattrs"), serde_json::json!({}));
}

/// One vlen-utf8 array of `n` names `PREFIXi`.
fn axis(dir: &Path, prefix: &str, n: u64) {
    write_json(
        &dir.join(".zarray"),
        serde_json::json!({"zarr_format": 2, "shape": [n], "chunks": [n], "dtype": "|O",
            "order": "C", "fill_value": null, "compressor": null,
            "filters": [{"id": "vlen-utf8"}]}),
    );
    write_json(&dir.join(".zattrs"), serde_json::json!({}));
    let mut chunk = (n as u32).to_le_bytes().to_vec();
    for i in 0..n {
        let name = format!("{prefix}{i}");
        chunk.extend_from_slice(&(name.len() as u32).to_le_bytes());
        chunk.extend_from_slice(name.as_bytes());
    }
    fs::write(dir.join("0"), chunk).unwrap();
}

/// A ZarrDaf v2 directory whose matrix `matrices/r/c/m` is zstd-compressed in chunks, or
/// (`chunked` false) one uncompressed chunk.
fn generate(root: &Path, chunked: bool) {
    group(root);
    write_json(
        &root.join("daf/.zarray"),
        serde_json::json!({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "|u1",
            "order": "C", "fill_value": null, "compressor": null, "filters": null}),
    );
    write_json(&root.join("daf/.zattrs"), serde_json::json!({}));
    fs::write(root.join("daf/0"), [1u8, 0]).unwrap();
    for g in ["axes", "matrices", "matrices/r", "matrices/r/c"] {
        group(&root.join(g));
    }
    axis(&root.join("axes/r"), "r", ROWS);
    axis(&root.join("axes/c"), "c", COLS);
    let m = root.join("matrices/r/c/m");
    let (chunk_cols, compressor) = if chunked {
        (CHUNK_COLS, serde_json::json!({"id": "zstd", "level": 1}))
    } else {
        (COLS, serde_json::Value::Null)
    };
    write_json(
        &m.join(".zarray"),
        serde_json::json!({"zarr_format": 2, "shape": [COLS, ROWS], "chunks": [chunk_cols, ROWS],
            "dtype": "<u4", "order": "C", "fill_value": 0,
            "compressor": compressor, "filters": null}),
    );
    write_json(&m.join(".zattrs"), serde_json::json!({}));
    for c in 0..COLS / chunk_cols {
        let first = c * chunk_cols * ROWS;
        let raw: Vec<u8> = (first..first + chunk_cols * ROWS)
            .flat_map(|k| value(k).to_le_bytes())
            .collect();
        let bytes = if chunked {
            zstd::encode_all(&raw[..], 1).unwrap()
        } else {
            raw
        };
        fs::write(m.join(format!("{c}.0")), bytes).unwrap();
    }
}

/// `dir` as a ZIP archive at `archive`, every member deflated (Python's `zipfile`).
fn zip_deflated(dir: &Path, archive: &Path) {
    let script = "import os, sys, zipfile\n\
        src, out = sys.argv[1], sys.argv[2]\n\
        with zipfile.ZipFile(out, 'w', zipfile.ZIP_DEFLATED, compresslevel=1) as z:\n\
        \x20   for d, _, fs in sorted(os.walk(src)):\n\
        \x20       for f in sorted(fs):\n\
        \x20           p = os.path.join(d, f)\n\
        \x20           z.write(p, os.path.relpath(p, src))\n";
    let status = std::process::Command::new("python3")
        .args(["-c", script])
        .arg(dir)
        .arg(archive)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Mounts `source` with `-o decode_cache=`, reads the matrix whole through both views (values
/// checked) and checks the daemon's RssAnon all along.
fn mount_and_read(source: &Path, name: &str) {
    let mnt = source.parent().unwrap().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let option = format!("decode_cache={}M", CACHE >> 20);
    let child = start_foreground(
        &[
            source.to_str().unwrap(),
            mnt.to_str().unwrap(),
            "-o",
            &option,
        ],
        Stdio::inherit(),
    );
    let pid = child.id();
    let mut guard = Unmount(child, mnt.clone());
    let baseline = rss_anon(pid);
    let (files, zarr) = (
        mnt.join(format!("{name}.daf/matrices/r/c/m.data")),
        mnt.join(format!("{name}.daf.zarr/matrices/r/c/m/0.0")),
    );
    let peaks = io_deadline(&mnt, Duration::from_secs(120), move || {
        (
            read_and_watch(files, pid, ROWS * COLS * 4, value),
            read_and_watch(zarr, pid, ROWS * COLS * 4, value),
        )
    });
    let bound = CACHE + SLACK;
    eprintln!(
        "{name}: RssAnon {} MiB at mount, peaks {} and {} MiB (bound {} MiB)",
        baseline >> 20,
        peaks.0 >> 20,
        peaks.1 >> 20,
        bound >> 20
    );
    assert!(peaks.0 < bound && peaks.1 < bound, "{peaks:?} over {bound}");
    let status = guard.unmount();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn reading_a_large_compressed_array_keeps_memory_bounded() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("big.daf.zarr");
    generate(&source, true);
    mount_and_read(&source, "big");
}

#[test]
fn reading_a_large_deflated_member_keeps_memory_bounded() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("plain");
    generate(&dir, false);
    let archive = tmp.path().join("big.daf.zarr.zip");
    zip_deflated(&dir, &archive);
    fs::remove_dir_all(&dir).unwrap();
    mount_and_read(&archive, "big");
}
