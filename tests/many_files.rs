//! Directory sources with far more files than a process may hold memory maps
//! (`vm.max_map_count`, 65,530 by default): every property must be there, with the right bytes,
//! through both views. Before daf-mount read small files into buffers, each source file it read
//! was mapped for the life of the mount, and past the limit properties were skipped at mount
//! ("Cannot allocate memory") or failed to read.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{io_deadline, TestMount, Tree, VECTORS};
use daf_mount::views::ViewSelection;

/// Listing views of a few hundred thousand files takes a while on a loaded machine.
const TREE_TIMEOUT: Duration = Duration::from_secs(300);

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

/// Every path below `root` (directories end with `/`), from `readdir` alone: a property lost at
/// mount is missing here. Reading every file through FUSE in a debug build would take minutes.
fn list_tree(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, rel: &str, out: &mut BTreeSet<String>) {
        for entry in fs::read_dir(root.join(rel)).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if entry.file_type().unwrap().is_dir() {
                walk(root, &path, out);
                out.insert(format!("{path}/"));
            } else {
                out.insert(path);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, "", &mut out);
    out
}

/// The properties whose files are read in full (and compared): every 97th, and the last.
fn sampled(n: usize) -> Vec<usize> {
    (0..n).filter(|i| i % 97 == 0 || *i == n - 1).collect()
}

/// Mounts `source` with both views, lists the FilesDaf view whole and the Zarr view's `scalars`
/// and `vectors/cell` groups, and reads the files of `paths`
/// (relative to the mount; `st_size` checked against the bytes).
fn mount_list_and_read(
    source: &Path,
    paths: Vec<String>,
) -> (BTreeSet<String>, BTreeSet<String>, Tree) {
    let started = Instant::now();
    let mount = TestMount::new(source.to_str().unwrap(), ViewSelection::Both);
    eprintln!("mounted in {:?}", started.elapsed());
    let root = mount.path.clone();
    let started = Instant::now();
    let (listing, files, zarr, read) = io_deadline(&mount.path, TREE_TIMEOUT, move || {
        let mut listing: Vec<String> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        listing.sort();
        let read: Tree = paths
            .into_iter()
            .map(|p| {
                let path = root.join(&p);
                let bytes = fs::read(&path).unwrap_or_else(|e| panic!("{p}: {e}"));
                let size = fs::metadata(&path).unwrap().len();
                assert_eq!(
                    size,
                    bytes.len() as u64,
                    "{p}: st_size must equal the bytes read"
                );
                (p, Some(bytes))
            })
            .collect();
        // The Zarr view has a directory per array: its array lists are what shows a loss.
        let zarr: BTreeSet<String> = ["scalars", "vectors/cell"]
            .iter()
            .flat_map(|dir| {
                fs::read_dir(root.join("many.daf.zarr").join(dir))
                    .unwrap()
                    .map(move |e| format!("{dir}/{}", e.unwrap().file_name().to_str().unwrap()))
            })
            .collect();
        (listing, list_tree(&root.join("many.daf")), zarr, read)
    });
    eprintln!(
        "listed {} + {} paths, read {} files in {:?}",
        files.len(),
        zarr.len(),
        read.len(),
        started.elapsed()
    );
    assert_eq!(listing, vec!["many.daf", "many.daf.zarr"]);
    (files, zarr, read)
}

/// The same paths in both listings (reported briefly: they hold hundreds of thousands).
fn assert_same_list(got: &BTreeSet<String>, expected: &BTreeSet<String>, what: &str) {
    let missing: Vec<&String> = expected.difference(got).collect();
    let extra: Vec<&String> = got.difference(expected).collect();
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

/// The Zarr view's array `path` (read under `many.daf.zarr/`) holds one chunk `0` equal to
/// `chunk`, of dtype `dtype`.
fn assert_zarr_array(read: &Tree, path: &str, dtype: &str, chunk: &[u8]) {
    let path = format!("many.daf.zarr/{path}");
    assert_eq!(
        json(read, &format!("{path}/.zarray"))["dtype"],
        dtype,
        "{path}"
    );
    assert!(
        file(read, &format!("{path}/0")) == chunk,
        "{path}/0 differs"
    );
}

/// The paths of a Zarr array's metadata and chunk in the mount.
fn zarr_array_paths(path: &str) -> [String; 2] {
    [
        format!("many.daf.zarr/{path}/.zarray"),
        format!("many.daf.zarr/{path}/0"),
    ]
}

const FILES_DAF_PROPERTIES: usize = 35_000;
const ZARR_SCALARS: usize = 35_000;

#[test]
fn a_files_daf_directory_of_105k_files_shows_every_property_in_both_views() {
    require_fuse!();
    let tmp = scratch();
    let source = files_daf_source(tmp.path(), FILES_DAF_PROPERTIES);
    let sample = sampled(FILES_DAF_PROPERTIES);
    let mut paths = Vec::new();
    for &i in &sample {
        for name in [
            format!("scalars/s{i}.json"),
            format!("vectors/cell/v{i}.json"),
            format!("vectors/cell/v{i}.data"),
        ] {
            paths.push(format!("many.daf/{name}"));
        }
        paths.extend(zarr_array_paths(&format!("scalars/s{i}")));
        paths.extend(zarr_array_paths(&format!("vectors/cell/v{i}")));
    }
    let (files, zarr, read) = mount_list_and_read(&source, paths);

    // The FilesDaf view lists the source's own files; the sampled ones are its bytes.
    assert_same_list(&files, &list_tree(&source), "FilesDaf view");
    for &i in &sample {
        for name in [
            format!("scalars/s{i}.json"),
            format!("vectors/cell/v{i}.json"),
            format!("vectors/cell/v{i}.data"),
        ] {
            let own = fs::read(source.join(&name)).unwrap();
            assert!(
                file(&read, &format!("many.daf/{name}")) == own.as_slice(),
                "FilesDaf view: {name} differs"
            );
        }
        let (_, _, dtype, chunk) = scalar(i);
        assert_zarr_array(&read, &format!("scalars/s{i}"), dtype, &chunk);
        assert_zarr_array(&read, &format!("vectors/cell/v{i}"), "<i4", &vector_data(i));
    }
    for i in 0..FILES_DAF_PROPERTIES {
        for array in [format!("scalars/s{i}"), format!("vectors/cell/v{i}")] {
            assert!(zarr.contains(&array), "Zarr view lacks {array}");
        }
    }
    // Each group also holds its `.zgroup` and `.zattrs`.
    assert_eq!(zarr.len(), 2 * FILES_DAF_PROPERTIES + 4, "Zarr view arrays");
}

#[test]
fn a_zarr_directory_of_35k_scalars_shows_every_scalar_in_both_views() {
    require_fuse!();
    let tmp = scratch();
    let source = zarr_source(tmp.path(), ZARR_SCALARS);
    let sample = sampled(ZARR_SCALARS);
    let mut paths = Vec::new();
    for &i in &sample {
        paths.push(format!("many.daf/scalars/s{i}.json"));
        paths.extend(zarr_array_paths(&format!("scalars/s{i}")));
    }
    let (files, zarr, read) = mount_list_and_read(&source, paths);

    for i in 0..ZARR_SCALARS {
        assert!(
            files.contains(&format!("scalars/s{i}.json")),
            "FilesDaf view lacks s{i}"
        );
        assert!(
            zarr.contains(&format!("scalars/s{i}")),
            "Zarr view lacks s{i}"
        );
    }
    let scalars = files
        .iter()
        .filter(|k| k.starts_with("scalars/") && k.ends_with(".json"))
        .count();
    // Every added scalar, plus the fixture's `ratio` and `title`.
    assert_eq!(scalars, ZARR_SCALARS + 2, "FilesDaf view scalars");
    for &i in &sample {
        let (t, value, dtype, chunk) = scalar(i);
        let doc = json(&read, &format!("many.daf/scalars/s{i}.json"));
        assert_eq!(doc["type"], t, "scalars/s{i}.json");
        assert_eq!(doc["value"], value, "scalars/s{i}.json");
        assert_zarr_array(&read, &format!("scalars/s{i}"), dtype, &chunk);
    }
}
