//! FilesDaf 1.1 sources through real mounts: the Julia-written fixture and its `metadata.json`,
//! 1.0 and 1.1 descriptors mixed in one directory, and writes into a 1.1 directory keeping its
//! root `metadata.json` in step (`daf-formats.md` §3).

mod common;

use std::path::Path;

use common::{copy_fixture, io_timeout, read_tree, zip_names, TestMount, VECTORS};
use daf_mount::views::ViewSelection;
use serde_json::Value;

const JULIA_1_1: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/julia-filesdaf-1.1"
);

fn json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(bytes)))
}

/// The keys of a `metadata.json`, in file order.
fn keys(text: &[u8]) -> Vec<String> {
    let map: serde_json::Map<String, Value> = serde_json::from_slice(text).unwrap();
    // serde_json sorts without `preserve_order`: find the keys' positions in the text instead.
    let text = String::from_utf8(text.to_vec()).unwrap();
    let mut keys: Vec<String> = map.keys().cloned().collect();
    keys.sort_by_key(|k| text.find(&format!("\"{k}\":")).unwrap());
    keys
}

#[test]
fn the_julia_1_1_fixture_mounts_and_its_view_indexes_it_as_julia_did() {
    require_fuse!();
    let mount = TestMount::new(JULIA_1_1, ViewSelection::Files);
    let root = mount.path.clone();
    let tree = io_timeout(&mount.path, move || read_tree(&root));
    let fixture = read_tree(Path::new(JULIA_1_1));
    // Every file of the fixture is there, with the same bytes (metadata.json synthesised).
    for (path, content) in &fixture {
        assert_eq!(tree.get(path), Some(content), "{path}");
    }
    let index = tree["metadata.json"].as_ref().unwrap();
    assert_eq!(
        json(index),
        json(fixture["metadata.json"].as_ref().unwrap())
    );
    assert_eq!(index.last(), Some(&b'}'), "no trailing newline");
}

/// A 1.1 directory also holding 1.0-form descriptors (as HEAD leaves them), including a 1.0
/// Bool sparse vector whose `.nzval` holds a `false` (§3.4: present ⇒ read).
fn mixed_source() -> (tempfile::TempDir, std::path::PathBuf) {
    let (tmp, source) = copy_fixture("files_v1_1.daf");
    std::fs::write(
        source.join("vectors/cell/counts.json"),
        "{\"format\":\"sparse\",\"eltype\":\"Int64\",\"indtype\":\"Int64\"}\n",
    )
    .unwrap();
    std::fs::write(
        source.join("vectors/cell/mask.json"),
        "{\"format\":\"sparse\",\"eltype\":\"Bool\",\"indtype\":\"UInt8\"}\n",
    )
    .unwrap();
    std::fs::write(source.join("vectors/cell/mask.nzind"), [1u8, 3]).unwrap();
    std::fs::write(source.join("vectors/cell/mask.nzval"), [1u8, 0]).unwrap();
    (tmp, source)
}

#[test]
fn mixed_1_0_and_1_1_descriptors_read_and_the_1_0_bool_nzval_is_used() {
    require_fuse!();
    let (_tmp, source) = mixed_source();
    let mount = TestMount::new(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    let (files, zarr) = io_timeout(&mount.path, move || {
        (
            read_tree(&root.join("files_v1_1.daf")),
            read_tree(&root.join("files_v1_1.daf.zarr")),
        )
    });
    let file = |p: &str| {
        files[p]
            .clone()
            .unwrap_or_else(|| panic!("{p} is a directory"))
    };
    // The 1.1 source's own 1.0-form descriptors are shown as they are; payloads are the source's.
    assert_eq!(
        file("vectors/cell/counts.json"),
        std::fs::read(source.join("vectors/cell/counts.json")).unwrap()
    );
    assert_eq!(file("vectors/cell/mask.nzval"), vec![1, 0]);
    assert_eq!(
        file("vectors/cell/counts.nzval"),
        std::fs::read(source.join("vectors/cell/counts.nzval")).unwrap()
    );
    // The false is kept (not all-true): the Zarr (v3, the default for a 1.1 source) view stores
    // nzval too.
    assert_eq!(
        zarr["vectors/cell/mask/nzval/c/0"].clone().unwrap(),
        vec![1, 0]
    );
    let index = json(&file("metadata.json"));
    assert_eq!(
        index["vectors/cell/mask"],
        json(b"{\"format\":\"sparse\",\"eltype\":\"Bool\",\"indtype\":\"UInt8\"}")
    );
    assert_eq!(
        index["vectors/cell/counts"]["indtype"],
        Value::String("Int64".into())
    );
}

#[test]
fn writes_into_a_1_1_directory_keep_its_metadata_json_in_step() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_1.daf");
    {
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Files);
        let root = mount.path.clone();
        let view_index = io_timeout(&mount.path, move || {
            // Read the index once, so a stale cached copy would show.
            let before = std::fs::read(root.join("metadata.json")).unwrap();
            assert!(!keys(&before).contains(&"vectors/cell/extra".to_string()));
            // A sparse vector written in the 1.0 form: the source gets the 1.1 form.
            std::fs::write(root.join("vectors/cell/extra.nzind"), 2i64.to_le_bytes()).unwrap();
            std::fs::write(root.join("vectors/cell/extra.nzval"), 1.5f64.to_le_bytes()).unwrap();
            std::fs::write(
                root.join("vectors/cell/extra.json"),
                "{\"format\":\"sparse\",\"eltype\":\"Float64\",\"indtype\":\"Int64\"}\n",
            )
            .unwrap();
            std::fs::write(
                root.join("scalars/added.json"),
                "{\"type\":\"Int8\",\"value\":3}\n",
            )
            .unwrap();
            std::fs::read(root.join("metadata.json")).unwrap()
        });
        let stored = std::fs::read(source.join("metadata.json")).unwrap();
        assert_eq!(view_index, stored, "the view's index is the source's");
        assert_eq!(stored.last(), Some(&b'}'));
        assert_eq!(
            keys(&stored),
            [
                "axes/cell",
                "axes/gene",
                "scalars/added",
                "scalars/ratio",
                "scalars/title",
                "vectors/cell/counts",
                "vectors/cell/extra",
                "vectors/cell/is_marker",
                "vectors/cell/score",
                "vectors/cell/type",
                "matrices/cell/gene/expr",
                "matrices/cell/gene/umis",
            ]
        );
        let extra = std::fs::read_to_string(source.join("vectors/cell/extra.json")).unwrap();
        assert_eq!(
            extra,
            "{\"format\":\"sparse\",\"nzind\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":1},\"nzval\":{\"format\":\"dense\",\"eltype\":\"Float64\",\"n_elements\":1}}\n"
        );
        assert_eq!(json(&stored)["vectors/cell/extra"], json(extra.as_bytes()));
        assert_eq!(
            std::fs::read_to_string(source.join("scalars/added.json")).unwrap(),
            "{\"type\":\"Int8\",\"value\":3}\n"
        );

        // Deleting a property rebuilds the index without it.
        let root = mount.path.clone();
        let view_index = io_timeout(&mount.path, move || {
            for ext in ["json", "nzind", "nzval"] {
                std::fs::remove_file(root.join(format!("vectors/cell/extra.{ext}"))).unwrap();
            }
            std::fs::read(root.join("metadata.json")).unwrap()
        });
        let stored = std::fs::read(source.join("metadata.json")).unwrap();
        assert_eq!(view_index, stored);
        assert!(!keys(&stored).contains(&"vectors/cell/extra".to_string()));
        assert!(keys(&stored).contains(&"scalars/added".to_string()));

        // Replacing a property by one whose descriptor has the same length: the index keeps
        // its size, and must still not be served from a stale cache.
        let root = mount.path.clone();
        let view_index = io_timeout(&mount.path, move || {
            let before = std::fs::read(root.join("metadata.json")).unwrap();
            let data: Vec<u8> = [1.0f64, 2.0, 3.0]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            std::fs::write(root.join("vectors/cell/score.data"), data).unwrap();
            std::fs::write(
                root.join("vectors/cell/score.json"),
                "{\"format\":\"dense\",\"eltype\":\"Float64\"}\n",
            )
            .unwrap();
            let after = std::fs::read(root.join("metadata.json")).unwrap();
            assert_eq!(before.len(), after.len());
            after
        });
        let stored = std::fs::read(source.join("metadata.json")).unwrap();
        assert_eq!(view_index, stored);
        assert_eq!(
            json(&stored)["vectors/cell/score"]["eltype"],
            Value::String("Float64".into())
        );
    }
}

#[test]
fn a_1_1_zipdaf_gets_no_metadata_json_entry() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("zipdaf_v1_1.daf.zip");
    std::fs::copy(Path::new(VECTORS).join("zipdaf_v1_1.daf.zip"), &archive).unwrap();
    {
        let mount = TestMount::writable(archive.to_str().unwrap(), ViewSelection::Files);
        let root = mount.path.clone();
        let index = io_timeout(&mount.path, move || {
            std::fs::write(
                root.join("scalars/added.json"),
                "{\"type\":\"Int8\",\"value\":3}\n",
            )
            .unwrap();
            let dir = std::fs::File::open(&root).unwrap();
            dir.sync_all().unwrap();
            std::fs::read(root.join("metadata.json")).unwrap()
        });
        // The view's index has it; the archive has no index entry (§6.1).
        assert!(keys(&index).contains(&"scalars/added".to_string()));
    }
    let names = zip_names(&archive);
    assert!(
        names.contains(&"scalars/added.json".to_string()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.ends_with("metadata.json")),
        "{names:?}"
    );
}

#[test]
fn julia_s_appends_to_metadata_json_through_the_view_are_accepted_and_dropped() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_1.daf");
    let stored_before = std::fs::read(source.join("metadata.json")).unwrap();
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Files);
    let root = mount.path.clone();
    let (before, after) = io_timeout(&mount.path, move || {
        use std::io::{Seek, SeekFrom, Write};
        let index = root.join("metadata.json");
        let before = std::fs::read(&index).unwrap();
        // DataAxesFormats' append: truncate the final `}`, write `,"key":descriptor}`.
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&index)
            .unwrap();
        f.set_len(before.len() as u64 - 1).unwrap();
        f.seek(SeekFrom::End(0)).unwrap();
        f.write_all(b",\"scalars/x\":{\"type\":\"Int8\",\"value\":1}}")
            .unwrap();
        drop(f);
        // Its rebuild: a staged `metadata.json.new` renamed over the index.
        let new = root.join("metadata.json.new");
        std::fs::write(&new, b"{}").unwrap();
        std::fs::rename(&new, &index).unwrap();
        assert!(!new.exists());
        (before, std::fs::read(&index).unwrap())
    });
    // The index is derived: what the view shows, and the source's, did not change.
    assert_eq!(before, after);
    drop(mount);
    assert_eq!(
        std::fs::read(source.join("metadata.json")).unwrap(),
        stored_before
    );
}
