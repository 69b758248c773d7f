//! Writing into DataAxesFormats 0.3 sources: through the FilesDaf view and through the Zarr v3
//! view, into a Zarr v3 directory (its root consolidated metadata kept in step) and a Zarr v3
//! ZIP (append-only: replacing is refused), with the promises of the write path: an
//! inconsistent item fails the close that completes it (EINVAL) and stays staged.

mod common;

use std::io::Write;
use std::path::Path;

use common::{copy_fixture, io_timeout, zip_names, TestMount};
use daf_mount::views::ViewSelection;
use serde_json::Value;

/// Writes a whole file and returns what `close` said (`std::fs::write` ignores it).
fn write_and_close(path: &Path, bytes: &[u8]) -> nix::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
    nix::unistd::close(std::os::fd::IntoRawFd::into_raw_fd(f))
}

/// Writes the dense Float64 vector `name` (descriptor, then `data`) through the FilesDaf view
/// directory `files`; returns what the close of the payload said.
fn write_vector(files: &Path, name: &str, data: &[u8]) -> nix::Result<()> {
    std::fs::write(
        files.join(format!("{name}.json")),
        "{\"format\":\"dense\",\"eltype\":\"Float64\"}\n",
    )
    .unwrap();
    write_and_close(&files.join(format!("{name}.data")), data)
}

/// DataAxesFormats 0.3's `zarr.json` of a flat Float64 vector of `n` (§5.2, keys sorted).
fn float64_vector(n: u64) -> String {
    format!(
        "{{\"chunk_grid\":{{\"configuration\":{{\"chunk_shape\":[{n}]}},\"name\":\"regular\"}},\"chunk_key_encoding\":{{\"configuration\":{{\"separator\":\"/\"}},\"name\":\"default\"}},\"codecs\":[{{\"configuration\":{{\"endian\":\"little\"}},\"name\":\"bytes\"}}],\"data_type\":\"float64\",\"fill_value\":0.0,\"node_type\":\"array\",\"shape\":[{n}],\"zarr_format\":3}}"
    )
}

fn values(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn writes_into_a_v3_directory_keep_its_consolidated_metadata_in_step() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("zarr_v3.daf.zarr");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        // Through the FilesDaf view (1.1, the default for a v3 source).
        let files = root.join("zarr_v3.daf/vectors/cell");
        assert_eq!(write_vector(&files, "w", &values(&[1.0, 2.0, 3.0])), Ok(()));
        // All zeros: stored as Julia stores it, without its chunk (§5.3).
        assert_eq!(write_vector(&files, "zeros", &[0; 24]), Ok(()));
        assert_eq!(
            std::fs::read(files.join("zeros.data")).unwrap(),
            vec![0; 24]
        );
        // Through the Zarr v3 view, as DataAxesFormats writes an array: chunk, then zarr.json.
        let zarr = root.join("zarr_v3.daf.zarr/vectors/cell/z");
        assert_eq!(
            write_and_close(&zarr.join("c/0"), &values(&[4.0, 5.0, 6.0])),
            Ok(())
        );
        assert_eq!(
            write_and_close(&zarr.join("zarr.json"), float64_vector(3).as_bytes()),
            Ok(())
        );
        // Both show in the other view at once.
        assert_eq!(
            std::fs::read(root.join("zarr_v3.daf.zarr/vectors/cell/w/c/0")).unwrap(),
            values(&[1.0, 2.0, 3.0])
        );
        assert_eq!(
            std::fs::read(root.join("zarr_v3.daf/vectors/cell/z.data")).unwrap(),
            values(&[4.0, 5.0, 6.0])
        );
        // An array whose shape disagrees with its axis fails the close that completes it.
        let bad = root.join("zarr_v3.daf.zarr/vectors/cell/bad");
        assert_eq!(
            write_and_close(&bad.join("c/0"), &values(&[0.5; 5])),
            Ok(())
        );
        assert_eq!(
            write_and_close(&bad.join("zarr.json"), float64_vector(5).as_bytes()),
            Err(nix::errno::Errno::EINVAL)
        );
        assert!(!root.join("zarr_v3.daf/vectors/cell/bad.data").exists());
        // fsync of the array's own directory reports its refusal; of its parent, not.
        let fsync_dir = |dir: &Path| std::fs::File::open(dir).and_then(|d| d.sync_all());
        assert_eq!(
            fsync_dir(&bad).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
        assert!(fsync_dir(&root.join("zarr_v3.daf.zarr/vectors/cell")).is_ok());
        // Attributes are not part of a Daf data set: refused.
        let attributed = float64_vector(3).replacen(
            "\"chunk_grid\"",
            "\"attributes\":{\"units\":\"m\"},\"chunk_grid\"",
            1,
        );
        let a = root.join("zarr_v3.daf.zarr/vectors/cell/a");
        assert_eq!(write_and_close(&a.join("c/0"), &values(&[0.0; 3])), Ok(()));
        assert!(write_and_close(&a.join("zarr.json"), attributed.as_bytes()).is_err());
    });
    drop(mount);
    // The source holds what DataAxesFormats writes, and its root lists the new arrays.
    for (name, data) in [("w", [1.0, 2.0, 3.0]), ("z", [4.0, 5.0, 6.0])] {
        let node = source.join(format!("vectors/cell/{name}"));
        assert_eq!(
            std::fs::read_to_string(node.join("zarr.json")).unwrap(),
            float64_vector(3)
        );
        assert_eq!(std::fs::read(node.join("c/0")).unwrap(), values(&data));
    }
    let zeros = source.join("vectors/cell/zeros");
    assert_eq!(
        std::fs::read_to_string(zeros.join("zarr.json")).unwrap(),
        float64_vector(3)
    );
    assert!(!zeros.join("c/0").exists(), "a chunk of zeros is left out");
    let root: Value =
        serde_json::from_slice(&std::fs::read(source.join("zarr.json")).unwrap()).unwrap();
    let listed = &root["consolidated_metadata"]["metadata"];
    for name in ["w", "z"] {
        let expected: Value = serde_json::from_str(&float64_vector(3)).unwrap();
        assert_eq!(listed[format!("vectors/cell/{name}")], expected, "{name}");
    }
    assert_eq!(root["attributes"]["daf"], serde_json::json!([1, 0]));
    assert!(listed.get("vectors/cell/bad").is_none());
}

#[test]
fn a_v3_zip_gets_appended_entries_and_refuses_replacing() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("zarr_v3.daf.zarr.zip");
    let before = zip_names(&source);
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let files = root.join("zarr_v3.daf/vectors/cell");
        assert_eq!(write_vector(&files, "w", &values(&[1.0, 2.0, 3.0])), Ok(()));
        // Append-only: a committed chunk cannot be replaced.
        let err = std::fs::write(
            root.join("zarr_v3.daf.zarr/vectors/cell/score/c/0"),
            [0u8; 12],
        )
        .unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EPERM));
    });
    drop(mount);
    let after = zip_names(&source);
    let added: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
    assert_eq!(
        added,
        vec!["vectors/cell/w/zarr.json", "vectors/cell/w/c/0"],
        "entries appended as DataAxesFormats' ZIP backend writes them (§11.6 order)"
    );
    let archive = std::fs::read(&source).unwrap();
    assert!(
        !String::from_utf8_lossy(&archive).contains("consolidated_metadata"),
        "a ZIP source keeps no consolidated metadata"
    );
}
