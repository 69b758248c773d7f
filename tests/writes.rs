//! Writing properties through the FilesDaf view into directory sources: they become the files
//! Julia would have written, visible in both views at once.

mod common;

use std::io::Write;
use std::path::Path;

use common::{
    assert_same_files, copy_fixture, io_timeout, read_tree, zip_names, TestMount, VECTORS,
};
use daf_mount::views::ViewSelection;

/// The FilesDaf files of the properties the tests remove and write back, in writing order.
const WRITTEN: [&[&str]; 7] = [
    &["scalars/title.json"],
    &["vectors/cell/score.json", "vectors/cell/score.data"],
    &[
        "vectors/cell/counts.nzval",
        "vectors/cell/counts.nzind",
        "vectors/cell/counts.json",
    ],
    &["vectors/cell/type.json", "vectors/cell/type.txt"],
    &[
        "vectors/cell/is_marker.json",
        "vectors/cell/is_marker.nzind",
    ],
    &[
        "matrices/cell/gene/expr.data",
        "matrices/cell/gene/expr.json",
    ],
    &[
        "matrices/cell/gene/umis.json",
        "matrices/cell/gene/umis.colptr",
        "matrices/cell/gene/umis.rowval",
        "matrices/cell/gene/umis.nzval",
    ],
];

const ZARR_NODES: [&str; 7] = [
    "scalars/title",
    "vectors/cell/score",
    "vectors/cell/counts",
    "vectors/cell/type",
    "vectors/cell/is_marker",
    "matrices/cell/gene/expr",
    "matrices/cell/gene/umis",
];

/// Writes every property of WRITTEN into `view` (a mounted FilesDaf view), the way `cp` does,
/// except one file that goes through a temporary name and a rename, as `make` recipes do.
fn write_properties(view: &Path) {
    let fixture = Path::new(VECTORS).join("files_v1_0.daf");
    for files in WRITTEN {
        for rel in files {
            let bytes = std::fs::read(fixture.join(rel)).unwrap();
            if *rel == "vectors/cell/score.data" {
                let temp = view.join("vectors/cell/.score.data.partial");
                std::fs::write(&temp, &bytes).unwrap();
                std::fs::rename(&temp, view.join(rel)).unwrap();
            } else {
                let mut f = std::fs::File::create(view.join(rel)).unwrap();
                // Two writes, like a streaming copy.
                f.write_all(&bytes[..bytes.len() / 2]).unwrap();
                f.write_all(&bytes[bytes.len() / 2..]).unwrap();
            }
        }
    }
}

fn check_views(root: &Path, name: &str) {
    let files = read_tree(&root.join(format!("{name}.daf")));
    let zarr = read_tree(&root.join(format!("{name}.daf.zarr")));
    assert_same_files(
        &files,
        &read_tree(&Path::new(VECTORS).join("files_v1_0.daf")),
        &["axes/metadata.json"],
        "FilesDaf view",
    );
    assert_same_files(
        &zarr,
        &read_tree(&Path::new(VECTORS).join("zarr_v2.daf.zarr")),
        &[],
        "Zarr view",
    );
}

#[test]
fn properties_written_through_the_files_view_land_in_a_filesdaf_directory() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    for files in WRITTEN {
        for rel in files.iter() {
            std::fs::remove_file(source.join(rel)).unwrap();
        }
    }
    {
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
        let root = mount.path.clone();
        io_timeout(&mount.path, move || {
            write_properties(&root.join("files_v1_0.daf"));
            check_views(&root, "files_v1_0");
        });
    }
    // The source now holds exactly what Julia wrote, and nothing is left staged.
    assert_same_files(
        &read_tree(&source),
        &read_tree(&Path::new(VECTORS).join("files_v1_0.daf")),
        &[],
        "source directory",
    );
    assert!(!source
        .parent()
        .unwrap()
        .join(".files_v1_0.daf.daf-mount")
        .exists());
    let mount = TestMount::new(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || check_views(&root, "files_v1_0"));
}

#[test]
fn properties_written_through_the_files_view_land_in_a_zarr_directory() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("zarr_v2.daf.zarr");
    for node in ZARR_NODES {
        std::fs::remove_dir_all(source.join(node)).unwrap();
    }
    {
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
        let root = mount.path.clone();
        io_timeout(&mount.path, move || {
            write_properties(&root.join("zarr_v2.daf"));
            check_views(&root, "zarr_v2");
        });
    }
    // Julia's Zarr layout, with .zmetadata kept in step (equal as JSON; its keys are sorted).
    assert_same_files(
        &read_tree(&source),
        &read_tree(&Path::new(VECTORS).join("zarr_v2.daf.zarr")),
        &[],
        "source directory",
    );
}

#[test]
fn a_new_axis_appears_in_both_views_with_its_directories() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        std::fs::write(root.join("files_v1_0.daf/axes/batch.txt"), "a\nb\nc\n").unwrap();
        assert!(root.join("files_v1_0.daf/vectors/batch").is_dir());
        assert!(root.join("files_v1_0.daf/matrices/batch/cell").is_dir());
        assert!(root.join("files_v1_0.daf/matrices/gene/batch").is_dir());
        let zarray =
            std::fs::read_to_string(root.join("files_v1_0.daf.zarr/axes/batch/.zarray")).unwrap();
        assert!(zarray.contains("\"shape\":[3]"), "{zarray}");
        assert!(root
            .join("files_v1_0.daf.zarr/matrices/batch/batch/.zgroup")
            .exists());
    });
    assert_eq!(
        std::fs::read_to_string(source.join("axes/batch.txt")).unwrap(),
        "a\nb\nc\n"
    );
    assert!(source.join("matrices/cell/batch").is_dir());
}

/// Writes a whole file and returns what `close` said (`std::fs::write` ignores it).
fn write_and_close(path: &Path, bytes: &[u8]) -> nix::Result<()> {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
    nix::unistd::close(std::os::fd::IntoRawFd::into_raw_fd(f))
}

#[test]
fn inconsistent_properties_fail_their_close_and_stay_staged() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let cell = root.join("files_v1_0.daf/vectors/cell");
        std::fs::write(
            cell.join("bad.json"),
            "{\"format\":\"dense\",\"eltype\":\"Float64\"}\n",
        )
        .unwrap();
        // 7 bytes for 3 Float64: the close that completes the property fails.
        assert_eq!(
            write_and_close(&cell.join("bad.data"), &[0; 7]),
            Err(nix::errno::Errno::EINVAL)
        );
        // Longer than needed is refused too (sources may have that; a write may not).
        assert_eq!(
            write_and_close(&cell.join("bad.data"), &[0; 25]),
            Err(nix::errno::Errno::EINVAL)
        );
        assert_eq!(
            write_and_close(&cell.join("bad.data"), &[0; 7]),
            Err(nix::errno::Errno::EINVAL)
        );
        // Still staged and readable, not committed: the Zarr view does not show it.
        assert_eq!(std::fs::read(cell.join("bad.data")).unwrap().len(), 7);
        assert!(!root.join("files_v1_0.daf.zarr/vectors/cell/bad").exists());
        // An axis with a repeated entry is refused the same way.
        let dup = root.join("files_v1_0.daf/axes/dup.txt");
        assert_eq!(
            write_and_close(&dup, b"x\nx\n"),
            Err(nix::errno::Errno::EINVAL)
        );
        // Fixing the payload commits it.
        assert_eq!(write_and_close(&cell.join("bad.data"), &[0; 24]), Ok(()));
        assert!(root.join("files_v1_0.daf.zarr/vectors/cell/bad/0").exists());
    });
}

/// A ZIP of the Zarr fixture without the nodes the tests write back, under `prefix`.
fn zip_without_written_nodes(dst: &Path, prefix: &str) {
    let script = r#"
import os, sys, zipfile
src, dst, prefix = sys.argv[1], sys.argv[2], sys.argv[3]
skip = sys.argv[4:]
with zipfile.ZipFile(dst, "w") as z:
    for base, dirs, files in sorted(os.walk(src)):
        for name in sorted(files):
            key = os.path.relpath(os.path.join(base, name), src)
            if name == ".zmetadata" or any(key.startswith(s + "/") for s in skip):
                continue
            z.write(os.path.join(base, name), prefix + key)
"#;
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(Path::new(VECTORS).join("zarr_v2.daf.zarr"))
        .arg(dst)
        .arg(prefix)
        .args(ZARR_NODES)
        .status()
        .unwrap();
    assert!(status.success());
}

fn archive_passes_zip_tools(archive: &Path) {
    let zipfile = std::process::Command::new("python3")
        .args(["-m", "zipfile", "-t"])
        .arg(archive)
        .output()
        .unwrap();
    assert!(
        zipfile.status.success(),
        "zipfile -t: {}",
        String::from_utf8_lossy(&zipfile.stderr)
    );
    let unzip = std::process::Command::new("unzip")
        .arg("-tq")
        .arg(archive)
        .output()
        .expect("unzip is needed (scripts/test installs it)");
    assert!(
        unzip.status.success(),
        "unzip -t: {}",
        String::from_utf8_lossy(&unzip.stdout)
    );
}

#[test]
fn properties_written_through_the_files_view_are_appended_to_zip_sources() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    for (archive, source, name) in [
        (
            tmp.path().join("one.daf.zarr.zip"),
            tmp.path().join("one.daf.zarr.zip").display().to_string(),
            "one".to_string(),
        ),
        (
            tmp.path().join("many.dafs.zarr.zip"),
            format!(
                "{}#/grp/g1",
                tmp.path().join("many.dafs.zarr.zip").display()
            ),
            "g1".to_string(),
        ),
    ] {
        let prefix = if name == "g1" { "grp/g1/" } else { "" };
        zip_without_written_nodes(&archive, prefix);
        {
            let mount = TestMount::writable(&source, ViewSelection::Both);
            let root = mount.path.clone();
            let view_name = name.clone();
            io_timeout(&mount.path, move || {
                write_properties(&root.join(format!("{view_name}.daf")));
                check_views(&root, &view_name);
                // Append-only: committed entries cannot be removed or replaced.
                let data = root.join(format!("{view_name}.daf/vectors/cell/score.data"));
                assert_eq!(
                    std::fs::remove_file(&data).unwrap_err().raw_os_error(),
                    Some(libc::EPERM)
                );
                assert_eq!(
                    std::fs::write(&data, b"x").unwrap_err().raw_os_error(),
                    Some(libc::EPERM)
                );
            });
        }
        archive_passes_zip_tools(&archive);
        let mount = TestMount::new(&source, ViewSelection::Both);
        let root = mount.path.clone();
        io_timeout(&mount.path, move || check_views(&root, &name));
    }
}

#[test]
fn sparse_strings_and_1_1_descriptors_are_accepted() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("zarr_v2.daf.zarr");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let cell = root.join("zarr_v2.daf/vectors/cell");
        // Sparse strings (1.0 form): densified for Zarr, whose strings are always dense.
        let nzind: Vec<u8> = 2u32.to_le_bytes().to_vec();
        assert_eq!(
            write_and_close(
                &cell.join("label.json"),
                b"{\"format\":\"sparse\",\"eltype\":\"String\",\"indtype\":\"UInt32\"}\n"
            ),
            Ok(())
        );
        assert_eq!(write_and_close(&cell.join("label.nzind"), &nzind), Ok(()));
        assert_eq!(write_and_close(&cell.join("label.nztxt"), b"x\n"), Ok(()));
        let chunk = std::fs::read(root.join("zarr_v2.daf.zarr/vectors/cell/label/0")).unwrap();
        assert_eq!(
            chunk,
            b"\x03\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00x\x00\x00\x00\x00"
        );
        // A 1.1 descriptor: all-true Bool, no nzval.
        let marker = b"{\"format\":\"sparse\",\"nzind\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":1}}\n";
        assert_eq!(
            write_and_close(&cell.join("flag.nzind"), &3i64.to_le_bytes()),
            Ok(())
        );
        assert_eq!(write_and_close(&cell.join("flag.json"), marker), Ok(()));
        assert!(root
            .join("zarr_v2.daf.zarr/vectors/cell/flag/nzind/0")
            .exists());
        assert!(!root
            .join("zarr_v2.daf.zarr/vectors/cell/flag/nzval")
            .exists());
        // The FilesDaf view shows the seed (1.0) form.
        let shown = std::fs::read_to_string(cell.join("flag.json")).unwrap();
        assert_eq!(
            shown,
            "{\"format\":\"sparse\",\"eltype\":\"Bool\",\"indtype\":\"Int64\"}\n"
        );
    });
}

/// Writes the ZARR_NODES of the Zarr fixture through a mounted Zarr view, the way zarr writers
/// do: directories, then documents, then chunks; a node Julia wrote without `nzval` (all-true
/// Bool) is finalized with `fsync` on its directory.
fn write_zarr_nodes(view: &Path) {
    let fixture = Path::new(VECTORS).join("zarr_v2.daf.zarr");
    for node in ZARR_NODES {
        let mut files: Vec<(String, bool)> = Vec::new();
        let mut stack = vec![node.to_string()];
        while let Some(dir) = stack.pop() {
            std::fs::create_dir(view.join(&dir)).unwrap();
            for entry in std::fs::read_dir(fixture.join(&dir)).unwrap() {
                let entry = entry.unwrap();
                let rel = format!("{dir}/{}", entry.file_name().into_string().unwrap());
                if entry.file_type().unwrap().is_dir() {
                    stack.push(rel);
                } else {
                    let document = rel.rsplit('/').next().unwrap().starts_with('.');
                    files.push((rel, document));
                }
            }
            // Sub-arrays (nzind, ...) are created after their group's documents.
            stack.sort();
            stack.reverse();
            let mut docs: Vec<(String, bool)> = std::mem::take(&mut files);
            docs.sort_by_key(|(_, document)| !document);
            for (rel, _) in docs {
                assert_eq!(
                    write_and_close(
                        &view.join(&rel),
                        &std::fs::read(fixture.join(&rel)).unwrap()
                    ),
                    Ok(()),
                    "{rel}"
                );
            }
        }
        if !fixture.join(node).join("nzval").exists() && fixture.join(node).join(".zgroup").exists()
        {
            let dir = std::fs::File::open(view.join(node)).unwrap();
            dir.sync_all().unwrap();
        }
    }
}

#[test]
fn every_property_kind_written_through_the_zarr_view_lands_in_every_source_kind() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (_files_tmp, files_dir) = copy_fixture("files_v1_0.daf");
    for files in WRITTEN {
        for rel in files.iter() {
            std::fs::remove_file(files_dir.join(rel)).unwrap();
        }
    }
    let (_zarr_tmp, zarr_dir) = copy_fixture("zarr_v2.daf.zarr");
    for node in ZARR_NODES {
        std::fs::remove_dir_all(zarr_dir.join(node)).unwrap();
    }
    let one = tmp.path().join("one.daf.zarr.zip");
    zip_without_written_nodes(&one, "");
    let many = tmp.path().join("many.dafs.zarr.zip");
    zip_without_written_nodes(&many, "grp/g1/");
    for (source, name) in [
        (files_dir.display().to_string(), "files_v1_0"),
        (zarr_dir.display().to_string(), "zarr_v2"),
        (one.display().to_string(), "one"),
        (format!("{}#/grp/g1", many.display()), "g1"),
    ] {
        {
            let mount = TestMount::writable(&source, ViewSelection::Both);
            let root = mount.path.clone();
            let view_name = name.to_string();
            io_timeout(&mount.path, move || {
                write_zarr_nodes(&root.join(format!("{view_name}.daf.zarr")));
                check_views(&root, &view_name);
            });
        }
        let mount = TestMount::new(&source, ViewSelection::Both);
        let root = mount.path.clone();
        let view_name = name.to_string();
        io_timeout(&mount.path, move || check_views(&root, &view_name));
    }
    assert_same_files(
        &read_tree(&files_dir),
        &read_tree(&Path::new(VECTORS).join("files_v1_0.daf")),
        &[],
        "FilesDaf source",
    );
    assert_same_files(
        &read_tree(&zarr_dir),
        &read_tree(&Path::new(VECTORS).join("zarr_v2.daf.zarr")),
        &[],
        "Zarr source",
    );
    archive_passes_zip_tools(&one);
    archive_passes_zip_tools(&many);
}

#[test]
fn a_zip_commit_shows_at_close_and_is_in_the_archive_after_fsync() {
    require_fuse!();
    let (tmp, archive) = copy_fixture("zarr_v2.daf.zarr.zip");
    let mount = TestMount::writable(archive.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    let staging = tmp.path().join(".zarr_v2.daf.zarr.zip.daf-mount");
    let values: Vec<u8> = [1.5f64, -2.0, 1e300]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let archive_in = archive.clone();
    io_timeout(&mount.path, move || {
        let files = root.join("zarr_v2.daf/vectors/cell");
        std::fs::write(
            files.join("fresh.json"),
            "{\"format\":\"dense\",\"eltype\":\"Float64\"}\n",
        )
        .unwrap();
        // Written by the kernel straight into the staged file (passthrough): only `close` tells.
        write_and_close(&files.join("fresh.data"), &values).unwrap();
        // Both views show it as soon as `close` returns.
        assert_eq!(std::fs::read(files.join("fresh.data")).unwrap(), values);
        let chunk = root.join("zarr_v2.daf.zarr/vectors/cell/fresh/0");
        assert_eq!(std::fs::read(&chunk).unwrap(), values);
        // `fsync` of its directory returns once the entries are in the archive and the staged
        // files are gone; the archive stays valid and the bytes read back the same.
        let dir = std::fs::File::open(&files).unwrap();
        nix::unistd::fsync(&dir).unwrap();
        let names = zip_names(&archive_in);
        for name in ["vectors/cell/fresh/.zarray", "vectors/cell/fresh/0"] {
            assert!(names.iter().any(|n| n == name), "{name} not in the archive");
        }
        assert!(!staging.join("zarr_v2.daf/vectors/cell/fresh.data").exists());
        archive_passes_zip_tools(&archive_in);
        assert_eq!(std::fs::read(&chunk).unwrap(), values);
        assert_eq!(std::fs::read(files.join("fresh.data")).unwrap(), values);
    });
}
