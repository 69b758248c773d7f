//! `daf-mount status`: what is staged for a data set, and why it is not committed yet, for a
//! directory source through its mount point and for a ZIP source that is not mounted (pending
//! appends included); exit status 0 only when nothing is waiting.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{copy_fixture, io_timeout, TestMount, BIN, VECTORS};
use daf_mount::views::ViewSelection;

/// Runs `daf-mount status TARGET`: (exit code, stdout, stderr).
fn status(target: &Path) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("status")
        .arg(target)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The staging area of a source (see `staging::StagingArea::for_source`).
fn staging_of(source: &Path) -> PathBuf {
    let name = source.file_name().unwrap().to_str().unwrap();
    source.parent().unwrap().join(format!(".{name}.daf-mount"))
}

fn stage(source: &Path, path: &str, bytes: &[u8]) {
    let disk = staging_of(source).join(path);
    std::fs::create_dir_all(disk.parent().unwrap()).unwrap();
    std::fs::write(disk, bytes).unwrap();
}

/// Writes a file through the mount and closes it: the errno of the close (a refusal), if any.
fn write_closed(path: &std::path::Path, bytes: &[u8]) -> Option<i32> {
    use std::io::Write;
    use std::os::fd::IntoRawFd;
    let mut file = std::fs::File::create(path).unwrap();
    file.write_all(bytes).unwrap();
    nix::unistd::close(file.into_raw_fd())
        .err()
        .map(|e| e as i32)
}

const FLOAT32: &[u8] = br#"{"format":"dense","eltype":"Float32"}"#;

#[test]
fn a_mounted_directory_shows_what_is_missing_then_why_it_is_invalid_then_nothing() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let (code, out, err) = status(&mount.path);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out, format!("{}: nothing staged\n", source.display()));

    let dir = mount.join("files_v1_0.daf/vectors/cell");
    let written = dir.clone();
    io_timeout(&mount.path, move || {
        std::fs::write(written.join("extra.json"), FLOAT32).unwrap()
    });
    let (code, out, _) = status(&mount.path);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains(
            "files_v1_0.daf/vectors/cell/extra: incomplete: missing vectors/cell/extra.data\n    \
             files_v1_0.daf/vectors/cell/extra.json\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("1 staged item, 0 pending ZIP appends"),
        "{out}"
    );

    // 8 bytes where 3 Float32 are needed: refused at close, left staged, and status says why.
    let written = dir.clone();
    let closed = io_timeout(&mount.path, move || {
        write_closed(&written.join("extra.data"), &[0u8; 8])
    });
    assert_eq!(closed, Some(libc::EINVAL));
    let (code, out, _) = status(&mount.path);
    assert_eq!(code, 2, "{out}");
    assert!(
        out.contains("files_v1_0.daf/vectors/cell/extra: invalid: ") && out.contains("8 bytes"),
        "{out}"
    );
    assert!(
        out.contains("    files_v1_0.daf/vectors/cell/extra.data\n"),
        "{out}"
    );
    // The same through the source path.
    assert_eq!(status(&source).1, out);

    let written = dir.clone();
    io_timeout(&mount.path, move || {
        std::fs::write(written.join("extra.data"), [0u8; 12]).unwrap()
    });
    let (code, out, _) = status(&mount.path);
    assert_eq!(
        (code, out),
        (0, format!("{}: nothing staged\n", source.display()))
    );
}

#[test]
fn an_unmounted_zip_source_lists_incomplete_invalid_and_pending_appends() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("zarr_v2.daf.zarr.zip");
    std::fs::copy(format!("{VECTORS}/zarr_v2.daf.zarr.zip"), &source).unwrap();
    let (code, out, _) = status(&source);
    assert_eq!(code, 0, "{out}");

    stage(&source, "zarr_v2.daf/vectors/cell/half.json", FLOAT32);
    stage(&source, "zarr_v2.daf/vectors/cell/short.json", FLOAT32);
    stage(&source, "zarr_v2.daf/vectors/cell/short.data", &[0; 8]);
    stage(&source, "zarr_v2.daf/vectors/cell/done.json", FLOAT32);
    stage(
        &source,
        "zarr_v2.daf/vectors/cell/done.data",
        &1.5f32.to_le_bytes().repeat(3),
    );
    stage(&source, "zarr_v2.daf/vectors/cell/.tmp42", b"");
    // What a daemon killed before its append leaves: the accepted item in the journal.
    let journal = tmp.path().join(".zarr_v2.daf.zarr.zip.daf-mount.accepted");
    std::fs::write(&journal, "zarr_v2.daf\tvectors/cell/done\n").unwrap();
    // A copy of what the archive has, in a ZIP source: refused (append-only).
    stage(&source, "zarr_v2.daf/vectors/cell/score.json", FLOAT32);
    stage(&source, "zarr_v2.daf/vectors/cell/score.data", &[0; 12]);

    let (code, out, err) = status(&source);
    assert_eq!(code, 2, "{out}{err}");
    for expected in [
        "4 staged items, 1 pending ZIP append, 1 file in no item",
        "zarr_v2.daf/vectors/cell/done: pending ZIP append",
        "    zarr_v2.daf/vectors/cell/done.data\n    zarr_v2.daf/vectors/cell/done.json\n",
        "zarr_v2.daf/vectors/cell/half: incomplete: missing vectors/cell/half.data\n",
        "zarr_v2.daf/vectors/cell/short: invalid: ",
        "zarr_v2.daf/vectors/cell/score: refused: vectors/cell/score: ZIP sources are append-only",
        "zarr_v2.daf/vectors/cell/.tmp42: not a file of any item",
    ] {
        assert!(out.contains(expected), "{expected:?} not in:\n{out}");
    }

    // Once the leftovers are removed, a writable mount appends the pending item: clean.
    for name in [
        "half.json",
        "short.json",
        "short.data",
        "score.json",
        "score.data",
        ".tmp42",
    ] {
        std::fs::remove_file(
            staging_of(&source)
                .join("zarr_v2.daf/vectors/cell")
                .join(name),
        )
        .unwrap();
    }
    {
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
        let data = mount.join("zarr_v2.daf/vectors/cell/done.data");
        let read = io_timeout(&mount.path, move || std::fs::read(data).unwrap());
        assert_eq!(read, 1.5f32.to_le_bytes().repeat(3));
    }
    let (code, out, _) = status(&source);
    assert_eq!(
        (code, out),
        (0, format!("{}: nothing staged\n", source.display()))
    );
    assert!(common::zip_names(&source).contains(&"vectors/cell/done/0".to_string()));
}

#[test]
fn errors_are_one_line_and_exit_1() {
    let out = Command::new(BIN)
        .args(["status", "/nonexistent/x.daf.zarr.zip"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("/nonexistent/x.daf.zarr.zip"), "{err}");
}

#[test]
fn a_group_of_a_multi_data_set_archive_shows_only_its_own_items() {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("multi_v1_1.dafs.zip");
    std::fs::copy(format!("{VECTORS}/multi_v1_1.dafs.zip"), &source).unwrap();
    stage(&source, "g1.daf/vectors/cell/half.json", FLOAT32);
    // Staged for another group of the archive (one this copy does not have).
    stage(&source, "g2.daf/vectors/cell/other.json", FLOAT32);
    let group = PathBuf::from(format!("{}#/g1", source.display()));
    let (code, out, err) = status(&group);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("1 staged item, 0 pending ZIP appends (")
            && out.contains("g1.daf/vectors/cell/half: incomplete: missing vectors/cell/half.data"),
        "{out}"
    );
    assert!(!out.contains("g2.daf"), "{out}");
}
