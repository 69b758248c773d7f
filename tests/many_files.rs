//! Directory sources with far more files than a process may hold memory maps
//! (`vm.max_map_count`, 65,530 by default): every property must be there, with the right bytes,
//! through both views. Before daf-mount read small files into buffers, each source file it read
//! was mapped for the life of the mount, and past the limit properties were skipped at mount
//! ("Cannot allocate memory") or failed to read.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{force_abort, read_tree, TestMount, Tree, VECTORS};
use daf_mount::views::ViewSelection;

/// Reading a whole view of a few hundred thousand files takes a while on a loaded machine.
const TREE_TIMEOUT: Duration = Duration::from_secs(300);

/// Runs `f` with a deadline; on timeout aborts the mount at `mnt` and fails the test.
fn with_deadline<R: Send + 'static>(mnt: &Path, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(TREE_TIMEOUT) {
        Ok(r) => {
            let _ = handle.join();
            r
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the sender is only dropped after sending or panicking"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            force_abort(mnt);
            let _ = handle.join();
            panic!("reading {} took more than {TREE_TIMEOUT:?}", mnt.display());
        }
    }
}

/// A temporary directory for the source, in memory where possible: writing, reading back and
/// deleting a hundred thousand files on a shared disk would take longer than the mount itself.
fn scratch() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// Scalar `i`: its FilesDaf type, its JSON value, and its Zarr dtype and chunk bytes.
fn scalar(i: usize) -> (&'static str, serde_json::Value, &'static str, Vec<u8>) {
    match i % 3 {
        0 => (
            "Int64",
            serde_json::json!(i),
            "<i8",
            (i as i64).to_le_bytes().to_vec(),
        ),
        1 => {
            let v = i as f64 + 0.25;
            (
                "Float64",
                serde_json::json!(v),
                "<f8",
                v.to_le_bytes().to_vec(),
            )
        }
        _ => {
            let s = format!("s{i}");
            let mut chunk = 1u32.to_le_bytes().to_vec();
            chunk.extend_from_slice(&(s.len() as u32).to_le_bytes());
            chunk.extend_from_slice(s.as_bytes());
            ("String", serde_json::json!(s), "|O", chunk)
        }
    }
}

/// The payload of vector `i` over the 2-entry axis `cell`: two Int32.
fn vector_data(i: usize) -> Vec<u8> {
    let mut data = (i as i32).to_le_bytes().to_vec();
    data.extend_from_slice(&(-(i as i32)).to_le_bytes());
    data
}

/// A FilesDaf 1.0 directory with `n` scalars and `n` dense vectors (a `.json` and a `.data` each).
fn files_daf_source(dir: &Path, n: usize) -> PathBuf {
    let root = dir.join("many.daf");
    fs::create_dir_all(root.join("axes")).unwrap();
    fs::create_dir_all(root.join("scalars")).unwrap();
    fs::create_dir_all(root.join("vectors/cell")).unwrap();
    fs::create_dir_all(root.join("matrices/cell/cell")).unwrap();
    fs::write(root.join("daf.json"), br#"{"version":[1,0]}"#).unwrap();
    fs::write(root.join("axes/cell.txt"), b"c1\nc2\n").unwrap();
    for i in 0..n {
        let (t, value, _, _) = scalar(i);
        let doc = serde_json::json!({"type": t, "value": value});
        fs::write(root.join(format!("scalars/s{i}.json")), doc.to_string()).unwrap();
        fs::write(
            root.join(format!("vectors/cell/v{i}.json")),
            br#"{"format":"dense","eltype":"Int32"}"#,
        )
        .unwrap();
        fs::write(root.join(format!("vectors/cell/v{i}.data")), vector_data(i)).unwrap();
    }
    root
}

/// A ZarrDaf v2 directory (the fixture's) with `n` more scalars.
fn zarr_source(dir: &Path, n: usize) -> PathBuf {
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(Path::new(VECTORS).join("zarr_v2.daf.zarr"))
        .arg(dir.join("many.daf.zarr"))
        .status()
        .unwrap();
    assert!(copied.success());
    let root = dir.join("many.daf.zarr");
    // Consolidated metadata is a cache the reader does not use; it would now be incomplete.
    fs::remove_file(root.join(".zmetadata")).unwrap();
    for i in 0..n {
        let (_, _, dtype, chunk) = scalar(i);
        let array = root.join(format!("scalars/s{i}"));
        fs::create_dir(&array).unwrap();
        let filters = if dtype == "|O" {
            serde_json::json!([{"id": "vlen-utf8"}])
        } else {
            serde_json::Value::Null
        };
        let zarray = serde_json::json!({
            "zarr_format": 2, "shape": [1], "chunks": [1], "dtype": dtype, "order": "C",
            "fill_value": null, "compressor": null, "filters": filters,
        });
        fs::write(array.join(".zarray"), zarray.to_string()).unwrap();
        fs::write(array.join(".zattrs"), b"{}").unwrap();
        fs::write(array.join("0"), chunk).unwrap();
    }
    root
}

/// Mounts `source` with both views and reads every file of both (each once, `st_size` checked
/// against the bytes by `read_tree`).
fn mount_and_read(source: &Path) -> (Tree, Tree) {
    let started = Instant::now();
    let mount = TestMount::new(source.to_str().unwrap(), ViewSelection::Both);
    eprintln!("mounted in {:?}", started.elapsed());
    let root = mount.path.clone();
    let started = Instant::now();
    let (listing, files, zarr) = with_deadline(&mount.path, move || {
        let mut listing: Vec<String> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        listing.sort();
        (
            listing,
            read_tree(&root.join("many.daf")),
            read_tree(&root.join("many.daf.zarr")),
        )
    });
    eprintln!(
        "read {} + {} paths in {:?}",
        files.len(),
        zarr.len(),
        started.elapsed()
    );
    assert_eq!(listing, vec!["many.daf", "many.daf.zarr"]);
    (files, zarr)
}

/// The same paths in both trees (reported briefly: the trees hold hundreds of thousands).
fn assert_same_list(got: &Tree, expected: &Tree, what: &str) {
    let missing: Vec<&String> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<&String> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: {} paths missing (first: {:?}), {} extra (first: {:?})",
        missing.len(),
        &missing[..missing.len().min(5)],
        extra.len(),
        &extra[..extra.len().min(5)]
    );
}

fn file<'a>(tree: &'a Tree, path: &str) -> &'a [u8] {
    match tree.get(path) {
        Some(Some(bytes)) => bytes,
        other => panic!("{path}: {other:?} in the view"),
    }
}

fn json(tree: &Tree, path: &str) -> serde_json::Value {
    serde_json::from_slice(file(tree, path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The Zarr view's array `path` holds one chunk `0` equal to `chunk`, of dtype `dtype`.
fn assert_zarr_array(zarr: &Tree, path: &str, dtype: &str, chunk: &[u8]) {
    assert_eq!(
        json(zarr, &format!("{path}/.zarray"))["dtype"],
        dtype,
        "{path}"
    );
    assert!(
        file(zarr, &format!("{path}/0")) == chunk,
        "{path}/0 differs"
    );
}

const FILES_DAF_PROPERTIES: usize = 35_000;
const ZARR_SCALARS: usize = 35_000;

#[test]
fn a_files_daf_directory_of_105k_files_shows_every_property_in_both_views() {
    require_fuse!();
    let tmp = scratch();
    let source = files_daf_source(tmp.path(), FILES_DAF_PROPERTIES);
    let (files, zarr) = mount_and_read(&source);

    // The FilesDaf view serves the source's own documents and payloads, byte for byte.
    let own = read_tree(&source);
    assert_same_list(&files, &own, "FilesDaf view");
    for (path, bytes) in &own {
        assert!(
            files.get(path) == Some(bytes),
            "FilesDaf view: {path} differs"
        );
    }

    for i in 0..FILES_DAF_PROPERTIES {
        let (_, _, dtype, chunk) = scalar(i);
        assert_zarr_array(&zarr, &format!("scalars/s{i}"), dtype, &chunk);
        assert_zarr_array(&zarr, &format!("vectors/cell/v{i}"), "<i4", &vector_data(i));
    }
    let arrays = zarr.keys().filter(|k| k.ends_with("/.zarray")).count();
    // Every property, plus `daf` and the axis `cell`.
    assert_eq!(arrays, 2 * FILES_DAF_PROPERTIES + 2, "Zarr view arrays");
}

#[test]
fn a_zarr_directory_of_35k_scalars_shows_every_scalar_in_both_views() {
    require_fuse!();
    let tmp = scratch();
    let source = zarr_source(tmp.path(), ZARR_SCALARS);
    let (files, zarr) = mount_and_read(&source);

    let scalars = files
        .keys()
        .filter(|k| k.starts_with("scalars/") && k.ends_with(".json"))
        .count();
    // Every added scalar, plus the fixture's `ratio` and `title`.
    assert_eq!(scalars, ZARR_SCALARS + 2, "FilesDaf view scalars");
    for i in 0..ZARR_SCALARS {
        let (t, value, dtype, chunk) = scalar(i);
        let doc = json(&files, &format!("scalars/s{i}.json"));
        assert_eq!(doc["type"], t, "scalars/s{i}.json");
        assert_eq!(doc["value"], value, "scalars/s{i}.json");
        assert_zarr_array(&zarr, &format!("scalars/s{i}"), dtype, &chunk);
    }
}
