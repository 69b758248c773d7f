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
fn replacing_a_property_of_a_directory_source_shows_at_once_in_both_views() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let zarr_chunk = root.join("files_v1_0.daf.zarr/vectors/cell/score/0");
        assert_eq!(std::fs::read(&zarr_chunk).unwrap().len(), 12); // now cached by the kernel
        let new: Vec<u8> = [9.0f32, 8.0, 7.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            write_and_close(&root.join("files_v1_0.daf/vectors/cell/score.data"), &new),
            Ok(())
        );
        assert_eq!(std::fs::read(&zarr_chunk).unwrap(), new);
        assert_eq!(
            std::fs::read(root.join("files_v1_0.daf/vectors/cell/score.data")).unwrap(),
            new
        );
        // A replacement that does not fit its descriptor is refused like a new one.
        assert_eq!(
            write_and_close(
                &root.join("files_v1_0.daf/vectors/cell/score.data"),
                &[1, 2, 3]
            ),
            Err(nix::errno::Errno::EINVAL)
        );
        // An axis used by properties can only be replaced by as many entries.
        assert_eq!(
            write_and_close(&root.join("files_v1_0.daf/axes/cell.txt"), b"a\nb\n"),
            Err(nix::errno::Errno::EINVAL)
        );
        assert_eq!(
            write_and_close(&root.join("files_v1_0.daf/axes/cell.txt"), b"a\nb\nc\n"),
            Ok(())
        );
        assert_eq!(
            std::fs::read_to_string(root.join("files_v1_0.daf/axes/cell.txt")).unwrap(),
            "a\nb\nc\n"
        );
    });
}

#[test]
fn make_derives_a_vector_from_a_matrix_and_respects_timestamps() {
    require_fuse!();
    let (tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let view = mount.path.join("files_v1_0.daf");
    let work = tmp.path().join("workflow");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(
        work.join("Makefile"),
        "total := $(VIEW)/vectors/cell/total.data\n\
         $(total): $(VIEW)/matrices/cell/gene/expr.data\n\
         \tpython3 derive.py $< $(VIEW)/vectors/cell/total.json $@\n",
    )
    .unwrap();
    std::fs::write(
        work.join("derive.py"),
        "import struct, sys\n\
         expr, descriptor, out = sys.argv[1:]\n\
         values = struct.unpack('<6d', open(expr, 'rb').read())\n\
         totals = [values[c] + values[3 + c] for c in range(3)]  # 3 cells x 2 genes, column-major\n\
         open(descriptor, 'w').write('{\"format\":\"dense\",\"eltype\":\"Float64\"}\\n')\n\
         open(out, 'wb').write(struct.pack('<3d', *totals))\n",
    )
    .unwrap();
    let make = move |args: &[&str]| {
        let (work, view) = (work.clone(), view.clone());
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        io_timeout(&mount_path_of(&view), move || {
            std::process::Command::new("make")
                .arg("-C")
                .arg(&work)
                .arg(format!("VIEW={}", view.display()))
                .args(&args)
                .output()
                .unwrap()
        })
    };
    assert!(make(&[]).status.success());
    let total = std::fs::read(mount.path.join("files_v1_0.daf/vectors/cell/total.data")).unwrap();
    assert_eq!(
        total,
        [5.0f64, 7.0, 9.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<u8>>()
    );
    assert!(mount
        .path
        .join("files_v1_0.daf.zarr/vectors/cell/total/0")
        .exists());
    // Up to date: a second run does nothing.
    assert_eq!(make(&["-q"]).status.code(), Some(0));
    // Touching the input makes the target out of date, and make re-runs the recipe.
    let expr = mount
        .path
        .join("files_v1_0.daf/matrices/cell/gene/expr.data");
    assert!(std::process::Command::new("touch")
        .arg(&expr)
        .status()
        .unwrap()
        .success());
    assert_eq!(make(&["-q"]).status.code(), Some(1));
    let run = make(&[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stdout).contains("derive.py"));
    assert_eq!(make(&["-q"]).status.code(), Some(0));
    // The touch reached the source file.
    let touched = std::fs::metadata(source.join("matrices/cell/gene/expr.data"))
        .unwrap()
        .modified()
        .unwrap();
    assert!(touched.elapsed().unwrap() < std::time::Duration::from_secs(60));
}

/// The mount point above a path inside it (two levels up from a view root).
fn mount_path_of(view: &Path) -> std::path::PathBuf {
    view.parent().unwrap().to_path_buf()
}

#[test]
fn deleting_properties_of_directory_sources_through_either_view() {
    require_fuse!();
    // A Zarr v3 node's chunk directories (`c/`) are only implied by its chunks: `rm -r` removes
    // them after the chunks.
    for (fixture, name, chunk) in [
        ("files_v1_0.daf", "files_v1_0", "0"),
        ("zarr_v2.daf.zarr", "zarr_v2", "0"),
        ("zarr_v3.daf.zarr", "zarr_v3", "c/0"),
    ] {
        let (_tmp, source) = copy_fixture(fixture);
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
        let root = mount.path.clone();
        let name = name.to_string();
        io_timeout(&mount.path, move || {
            let files = root.join(format!("{name}.daf"));
            let zarr = root.join(format!("{name}.daf.zarr"));
            // `rm score.*` through the FilesDaf view: hidden file by file, deleted with the last.
            std::fs::remove_file(files.join("vectors/cell/score.data")).unwrap();
            assert!(!files.join("vectors/cell/score.data").exists());
            assert!(
                zarr.join("vectors/cell/score").join(chunk).exists(),
                "not deleted until all its files are gone"
            );
            std::fs::remove_file(files.join("vectors/cell/score.json")).unwrap();
            assert!(!zarr.join("vectors/cell/score").exists());
            // `rm -r` (shutil.rmtree, zarr's del) of a Zarr node, a sparse group here.
            std::fs::remove_dir_all(zarr.join("vectors/cell/counts")).unwrap();
            assert!(!files.join("vectors/cell/counts.json").exists());
            assert!(!files.join("vectors/cell/counts.nzind").exists());
            // A dense matrix's node, whose v3 chunk is `c/0/0`, by `rm -r` (std's remove_dir_all
            // takes a directory already gone for removed).
            let removed = std::process::Command::new("rm")
                .arg("-r")
                .arg(zarr.join("matrices/cell/gene/expr"))
                .status()
                .unwrap();
            assert!(removed.success(), "rm -r of a dense matrix's node");
            assert!(!files.join("matrices/cell/gene/expr.data").exists());
            // An axis in use cannot go; an unused one can, with its directories.
            assert_eq!(
                std::fs::remove_file(files.join("axes/cell.txt"))
                    .unwrap_err()
                    .raw_os_error(),
                Some(libc::ENOTEMPTY)
            );
            assert_eq!(
                write_and_close(&files.join("axes/batch.txt"), b"x\ny\n"),
                Ok(())
            );
            std::fs::remove_file(files.join("axes/batch.txt")).unwrap();
            assert!(!files.join("vectors/batch").exists());
            assert!(!zarr.join("axes/batch").exists());
            // Other files of the data set are not properties: refused.
            assert_eq!(
                std::fs::remove_file(files.join("daf.json"))
                    .unwrap_err()
                    .raw_os_error(),
                Some(libc::EPERM)
            );
        });
        drop(mount);
        // The source no longer has them; everything else is intact.
        let mount = TestMount::new(source.to_str().unwrap(), ViewSelection::Files);
        let root = mount.path.clone();
        io_timeout(&mount.path, move || {
            let cell: Vec<String> = std::fs::read_dir(root.join("vectors/cell"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            let mut cell = cell;
            cell.sort();
            assert_eq!(
                cell,
                ["is_marker.json", "is_marker.nzind", "type.json", "type.txt"]
            );
            assert!(!root.join("axes/batch.txt").exists());
            assert_eq!(
                std::fs::read(root.join("matrices/cell/gene/umis.nzval"))
                    .unwrap()
                    .len(),
                6
            );
            assert!(!root.join("matrices/cell/gene/expr.json").exists());
        });
        drop(mount);
        let staging = source.with_file_name(format!(".{fixture}.daf-mount"));
        assert!(!staging.exists(), "{fixture}: {} left", staging.display());
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
