//! Packed FilesDaf 1.1 sources (`daf-formats.md` §8) through real mounts: the FilesDaf view is
//! flat. Every property of `tests/data/packed` (zstd, gzip and blosc shards of dense vectors, a
//! dense matrix, sparse components and strings, in a directory and in a ZipDaf) shows its
//! decoded values as `.data`, `.nzind`/`.nzval`, `.colptr`/`.rowval`, `.txt`, `.nztxt`, with a flat
//! descriptor, exact sizes, and a `metadata.json` that indexes the flat descriptors.

mod common;

use std::path::Path;

use common::{io_timeout, read_tree, TestMount, Tree};
use daf_mount::views::ViewSelection;
use serde_json::Value;

const PACKED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");

fn expected() -> Value {
    let text = std::fs::read(Path::new(PACKED).join("expected.json")).unwrap();
    let all: Value = serde_json::from_slice(&text).unwrap();
    all["datasets"]["packed"].clone()
}

/// `values` as the little-endian bytes of Daf type `t`.
fn encode(t: &str, values: &Value) -> Vec<u8> {
    let values = values.as_array().unwrap();
    let mut out = Vec::new();
    for v in values {
        let f = || v.as_f64().unwrap();
        let i = || v.as_i64().unwrap();
        match t {
            "Bool" => out.push(u8::from(v.as_bool().unwrap_or_else(|| i() != 0))),
            "Int8" => out.extend((i() as i8).to_le_bytes()),
            "Int16" => out.extend((i() as i16).to_le_bytes()),
            "Int32" => out.extend((i() as i32).to_le_bytes()),
            "Int64" => out.extend(i().to_le_bytes()),
            "UInt8" => out.extend((v.as_u64().unwrap() as u8).to_le_bytes()),
            "UInt16" => out.extend((v.as_u64().unwrap() as u16).to_le_bytes()),
            "UInt32" => out.extend((v.as_u64().unwrap() as u32).to_le_bytes()),
            "UInt64" => out.extend(v.as_u64().unwrap().to_le_bytes()),
            "Float32" => out.extend((f() as f32).to_le_bytes()),
            "Float64" => out.extend(f().to_le_bytes()),
            other => panic!("type {other}"),
        }
    }
    out
}

fn lines(values: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    for v in values.as_array().unwrap() {
        out.extend_from_slice(v.as_str().unwrap().as_bytes());
        out.push(b'\n');
    }
    out
}

fn file<'a>(view: &'a Tree, path: &str) -> &'a [u8] {
    view.get(path)
        .and_then(Option::as_deref)
        .unwrap_or_else(|| panic!("{path} is not a file of the view"))
}

/// Checks every property, scalar and axis of the view against the expected values.
fn check_flat_view(view: &Tree, what: &str) {
    let expected = expected();
    assert!(
        !view.keys().any(|p| p.ends_with(".zip")),
        "{what}: packed payloads must not show: {:?}",
        view.keys()
            .filter(|p| p.ends_with(".zip"))
            .collect::<Vec<_>>()
    );
    for (name, scalar) in expected["scalars"].as_object().unwrap() {
        let doc: Value =
            serde_json::from_slice(file(view, &format!("scalars/{name}.json"))).unwrap();
        assert_eq!(doc["value"], scalar["value"], "{what}: scalar {name}");
    }
    for (name, entries) in expected["axes"].as_object().unwrap() {
        assert!(
            file(view, &format!("axes/{name}.txt")) == lines(entries),
            "{what}: axis {name}"
        );
    }
    let index: Value = serde_json::from_slice(file(view, "metadata.json")).unwrap();
    for (path, p) in expected["properties"].as_object().unwrap() {
        let t = p["eltype"].as_str().unwrap();
        let descriptor: Value =
            serde_json::from_slice(file(view, &format!("{path}.json"))).unwrap();
        assert_eq!(index[path], descriptor, "{what}: {path} in metadata.json");
        let text = descriptor.to_string();
        assert!(
            !text.contains("packed_format"),
            "{what}: {path}.json is not flat: {text}"
        );
        let got = |ext: &str| file(view, &format!("{path}.{ext}"));
        if p["format"] == "dense" {
            assert_eq!(descriptor["format"], "dense", "{what}: {path}");
            assert_eq!(descriptor["eltype"], t, "{what}: {path}");
            if t == "String" {
                assert!(got("txt") == lines(&p["values"]), "{what}: {path}.txt");
            } else {
                assert!(
                    got("data") == encode(t, &p["values"]),
                    "{what}: {path}.data"
                );
            }
            continue;
        }
        let it = p["indtype"].as_str().unwrap();
        for comp in ["nzind", "colptr", "rowval"] {
            if !p[comp].is_null() {
                assert!(got(comp) == encode(it, &p[comp]), "{what}: {path}.{comp}");
            }
        }
        match t {
            "String" => assert!(got("nztxt") == lines(&p["nzval"]), "{what}: {path}.nztxt"),
            _ => assert!(
                got("nzval") == encode(t, &p["nzval"]),
                "{what}: {path}.nzval"
            ),
        }
    }
}

#[test]
fn a_packed_filesdaf_directory_shows_flat_files_of_the_decoded_values() {
    require_fuse!();
    let source = format!("{PACKED}/files_packed.daf");
    let mount = TestMount::new(&source, ViewSelection::Files);
    let root = mount.path.clone();
    let view = io_timeout(&mount.path, move || read_tree(&root));
    check_flat_view(&view, "files_packed.daf");
    // A packed source gets a 1.1 view.
    assert_eq!(file(&view, "daf.json"), b"{\"version\":[1,1]}\n");
}

#[test]
fn a_packed_zipdaf_shows_flat_files_of_the_decoded_values() {
    require_fuse!();
    let source = format!("{PACKED}/zipdaf_packed.daf.zip");
    let mount = TestMount::new(&source, ViewSelection::Files);
    let root = mount.path.clone();
    let view = io_timeout(&mount.path, move || read_tree(&root));
    check_flat_view(&view, "zipdaf_packed.daf.zip");
}

#[test]
fn packed_payload_sizes_are_exact_before_any_read() {
    require_fuse!();
    let source = format!("{PACKED}/files_packed.daf");
    let mount = TestMount::new(&source, ViewSelection::Files);
    let root = mount.path.clone();
    let sizes = io_timeout(&mount.path, move || {
        [
            "vectors/cell/score.data",
            "vectors/gene/counts.nzind",
            "vectors/gene/counts.nzval",
            "matrices/gene/batch/expr.data",
            "matrices/gene/batch/umis.rowval",
        ]
        .map(|p| std::fs::metadata(root.join(p)).unwrap().len())
    });
    assert_eq!(
        sizes,
        [1200 * 8, 1100 * 8, 1100 * 8, 4500 * 3 * 4, 1500 * 8]
    );
}

/// A copy of the packed directory with `vectors/cell/score.zip` changed by `damage`.
fn damaged_copy(damage: impl FnOnce(&mut Vec<u8>)) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("files_packed.daf");
    let status = std::process::Command::new("cp")
        .arg("-r")
        .arg(format!("{PACKED}/files_packed.daf"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(status.success());
    let shard = copy.join("vectors/cell/score.zip");
    let mut bytes = std::fs::read(&shard).unwrap();
    damage(&mut bytes);
    std::fs::write(&shard, bytes).unwrap();
    (tmp, copy)
}

/// Reading `rel` fails with `EIO`, and the other properties still read.
fn read_fails_with_eio(source: &Path, rel: &'static str) {
    let mount = TestMount::new(source.to_str().unwrap(), ViewSelection::Files);
    let root = mount.path.clone();
    let (failed, other) = io_timeout(&mount.path, move || {
        (
            std::fs::read(root.join(rel)).map(|b| b.len()),
            std::fs::read(root.join("vectors/cell/depth.data")).map(|b| b.len()),
        )
    });
    assert_eq!(
        failed.map_err(|e| e.raw_os_error()),
        Err(Some(libc::EIO)),
        "{rel}"
    );
    assert_eq!(other.unwrap(), 1200 * 8);
}

#[test]
fn a_corrupt_inner_chunk_is_an_io_error_never_wrong_bytes() {
    require_fuse!();
    // The first inner chunk's data starts where the shard index says: break its zstd frame.
    let (_tmp, copy) = damaged_copy(|b| {
        let at = u64::from_le_bytes(b[0..8].try_into().unwrap()) as usize;
        b[at..at + 4].copy_from_slice(b"XXXX");
    });
    read_fails_with_eio(&copy, "vectors/cell/score.data");
}

#[test]
fn a_shard_index_failing_its_crc32c_is_an_io_error() {
    require_fuse!();
    let (_tmp, copy) = damaged_copy(|b| b[9] ^= 0x40);
    read_fails_with_eio(&copy, "vectors/cell/score.data");
}
