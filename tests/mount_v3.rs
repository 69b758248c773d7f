//! Real mounts of ZarrDaf sources on Zarr v3 (DataAxesFormats 0.3): the §11.5 vectors from a
//! directory, a ZIP and a multi-data-set archive, elided (fill-value) chunks, and foreign
//! arrays written by zarr-python 3 (`tests/data/v3/make_foreign.py`).
//!
//! The views are pinned to FilesDaf 1.0 and Zarr v2 (`--files-version 1.0 --zarr-format 2`):
//! the same logical data set as the v2 fixtures, so the same files.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::SystemTime;

use common::{assert_same_files, copy_fixture, io_timeout, read_tree, TestMount, Tree, VECTORS};
use daf_mount::core::DafFs;
use daf_mount::formats::json::FilesVersion;
use daf_mount::formats::source::{open_source, Format};
use daf_mount::views::{ViewOptions, ViewSelection};

const FOREIGN: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/v3/foreign.daf.zarr"
);

fn fixture(name: &str) -> Tree {
    read_tree(&Path::new(VECTORS).join(name))
}

/// Mounts `source` (FilesDaf 1.0 and Zarr v2 views) and reads the whole tree.
fn mounted_tree(source: &str, selection: ViewSelection) -> Tree {
    let opened = open_source(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    let options = ViewOptions {
        selection,
        zarr: Some(Format::ZarrV2),
        files: Some(FilesVersion::V1_0),
        zip: false,
        h5df: false,
        h5ad: None,
        dimension_names: false,
        anndata: None,
    };
    let core = DafFs::with_staging(opened.datasets, options, SystemTime::UNIX_EPOCH, None);
    let mount = TestMount::serving(Arc::new(core), false, source);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || read_tree(&root))
}

/// The files under `dir/` of `tree`, relative to it.
fn under(tree: &Tree, dir: &str) -> Tree {
    tree.iter()
        .filter_map(|(k, v)| Some((k.strip_prefix(&format!("{dir}/"))?.to_string(), v.clone())))
        .collect()
}

/// The views of data set `name` in `tree` are the v2 fixtures' files.
fn check_views(tree: &Tree, name: &str, what: &str) {
    assert_same_files(
        &under(tree, &format!("{name}.daf")),
        &fixture("files_v1_0.daf"),
        &["axes/metadata.json"],
        &format!("{what}: FilesDaf view"),
    );
    assert_same_files(
        &under(tree, &format!("{name}.daf.zarr")),
        &fixture("zarr_v2.daf.zarr"),
        &[],
        &format!("{what}: Zarr view"),
    );
}

#[test]
fn v3_directory_and_zip_show_the_data_set() {
    require_fuse!();
    for source in ["zarr_v3.daf.zarr", "zarr_v3.daf.zarr.zip"] {
        let tree = mounted_tree(&format!("{VECTORS}/{source}"), ViewSelection::Both);
        check_views(&tree, "zarr_v3", source);
    }
}

#[test]
fn multi_data_set_archive_with_v3_and_v2_groups() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("many.dafs.zarr.zip");
    let packed = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/v3/pack_zip.py"
        ))
        .arg(&archive)
        .arg(format!("{VECTORS}/zarr_v3.daf.zarr=g1/"))
        .arg(format!("{VECTORS}/zarr_v3.daf.zarr=deep/g2/"))
        .arg(format!("{VECTORS}/zarr_v2.daf.zarr=old/"))
        .status();
    assert!(packed.unwrap().success());
    let whole = mounted_tree(archive.to_str().unwrap(), ViewSelection::Both);
    for (name, what) in [("g1", "g1"), ("deep/g2", "deep/g2"), ("old", "old (v2)")] {
        check_views(&whole, name, what);
    }
    let one = mounted_tree(
        &format!("{}#/deep/g2", archive.display()),
        ViewSelection::Both,
    );
    check_views(&one, "g2", "#/deep/g2");
}

#[test]
fn elided_chunks_read_as_fill_values() {
    require_fuse!();
    let (_tmp, root) = copy_fixture("zarr_v3.daf.zarr");
    for chunk in ["vectors/cell/score/c/0", "vectors/cell/type/c/0"] {
        std::fs::remove_file(root.join(chunk)).unwrap();
    }
    let tree = mounted_tree(root.to_str().unwrap(), ViewSelection::Files);
    assert_eq!(tree["vectors/cell/score.data"], Some(vec![0; 12]));
    assert_eq!(tree["vectors/cell/type.txt"], Some(b"\n\n\n".to_vec()));
    assert_eq!(
        tree["vectors/cell/score.json"].as_deref(),
        fixture("files_v1_0.daf")["vectors/cell/score.json"].as_deref()
    );
}

fn values<const N: usize, T>(data: &[u8], read: fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|c| read(c.try_into().unwrap()))
        .collect()
}

#[test]
fn foreign_zarr_python_arrays_are_plain_files() {
    require_fuse!();
    let tree = mounted_tree(FOREIGN, ViewSelection::Files);
    let file = |path: &str| {
        tree.get(path)
            .cloned()
            .flatten()
            .unwrap_or_else(|| panic!("{path} missing"))
    };
    assert_eq!(file("axes/cell.txt"), b"c0\nc1\nc2\nc3\nc4\nc5\nc6\n");
    assert_eq!(
        values(&file("vectors/cell/x.data"), f64::from_le_bytes),
        (0..7).map(|i| f64::from(i) * 0.5).collect::<Vec<_>>()
    );
    assert_eq!(
        values(&file("vectors/cell/partial.data"), i16::from_le_bytes),
        [1, 2, 3, -1, -1, -1, -1]
    );
    assert_eq!(
        file("vectors/cell/label.txt"),
        "a\nbb\n\nd\né\nf\ng\n".as_bytes()
    );
    assert_eq!(
        values(&file("matrices/cell/gene/t.data"), i32::from_le_bytes),
        (0..35).collect::<Vec<_>>()
    );
    assert_eq!(
        values(&file("vectors/cell/sp.nzind"), i64::from_le_bytes),
        [2, 5]
    );
    assert_eq!(
        file("scalars/answer.json"),
        b"{\"value\":42,\"type\":\"Int64\"}\n"
    );
}

#[test]
fn a_v3_directory_without_consolidated_metadata_shows_the_same_data_set() {
    require_fuse!();
    let (_tmp, root) = copy_fixture("zarr_v3.daf.zarr");
    // The root as Zarr.jl first writes it (§5.2), before DataAxesFormats adds the consolidated
    // metadata: the reader walks the node documents, never the consolidated field.
    std::fs::write(
        root.join("zarr.json"),
        "{\"attributes\":{\"daf\":[1,0]},\"node_type\":\"group\",\"zarr_format\":3}",
    )
    .unwrap();
    let tree = mounted_tree(root.to_str().unwrap(), ViewSelection::Both);
    check_views(&tree, "zarr_v3", "plain v3 root");
}
