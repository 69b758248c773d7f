//! Changing committed properties through the FilesDaf view of a directory source: a property
//! replaced shows at once in both views, `make` derives a vector from a matrix and respects the
//! timestamps, and deletions through either view (split from `writes.rs`).

mod common;

use std::io::Write;
use std::path::Path;

use common::{copy_fixture, io_deadline, io_timeout, TestMount};
use daf_mount::views::ViewSelection;

/// Writes a whole file and returns what `close` said (`std::fs::write` ignores it).
fn write_and_close(path: &Path, bytes: &[u8]) -> nix::Result<()> {
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(bytes).unwrap();
    nix::unistd::close(std::os::fd::IntoRawFd::into_raw_fd(f))
}

/// `body`'s result, run while `n` threads repeat `work` beside it (stopped and joined after).
fn beside<T>(n: usize, work: impl Fn() + Clone + Send + 'static, body: impl FnOnce() -> T) -> T {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (stop, work) = (stop.clone(), work.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    work();
                }
            })
        })
        .collect();
    let result = body();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    result
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

/// A file read and closed can be replaced at once, every time: the kernel sends the read
/// handle's release after `close` has returned, so the replacing open may reach the daemon first.
#[test]
fn a_property_read_and_closed_is_replaced_at_once_every_time() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let path = mount.path.join("files_v1_0.daf/vectors/cell/score.data");
    // Busy cores make the daemon late with the release (the test failed within 40 rounds so before opens waited for it).
    // A round takes milliseconds alone, but tens of them beside the spinners and a full test run.
    let deadline = std::time::Duration::from_secs(120);
    beside(3, std::hint::spin_loop, || {
        io_deadline(&mount.path, deadline, move || {
            for round in 0..150u32 {
                let new: Vec<u8> = [round as f32, 1.0, 2.0]
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect();
                let old = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("round {round}: reading the property: {e}"));
                assert_eq!(old.len(), 12, "round {round}");
                let mut f = std::fs::File::create(&path)
                    .unwrap_or_else(|e| panic!("round {round}: replacing open refused: {e}"));
                f.write_all(&new).unwrap();
                drop(f);
                let read = std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("round {round}: reading the replacement: {e}"));
                assert_eq!(read, new, "round {round}");
            }
        })
    });
}

/// While a handle on a property's file is open, a replacement of it is refused (`ETXTBSY`, after
/// waiting a moment for a release on its way); once that handle is closed it is accepted.
#[test]
fn a_property_held_open_is_not_replaced_under_its_reader() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let path = mount.path.join("files_v1_0.daf/vectors/cell/score.data");
    io_timeout(&mount.path, move || {
        let first: Vec<u8> = [1.0f32, 2.0, 3.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(write_and_close(&path, &first), Ok(()));
        let reader = std::fs::File::open(&path).unwrap();
        let refused = std::fs::File::create(&path).map(drop);
        assert_eq!(
            refused.map_err(|e| e.raw_os_error()),
            Err(Some(libc::ETXTBSY))
        );
        let mut held = Vec::new();
        std::io::Read::read_to_end(&mut &reader, &mut held).unwrap();
        assert_eq!(held, first);
        // The refused open changed nothing (it truncated nothing).
        assert_eq!(std::fs::read(&path).unwrap(), first);
        drop(reader);
        let second: Vec<u8> = [4.0f32, 5.0, 6.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(write_and_close(&path, &second), Ok(()));
        assert_eq!(std::fs::read(&path).unwrap(), second);
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
fn a_property_deleted_through_one_view_is_gone_from_the_other_when_the_delete_returns() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let files = mount.path.join("files_v1_0.daf/vectors/cell");
    let zarr = mount.path.join("files_v1_0.daf.zarr/vectors/cell");
    // Readers opening and closing the FilesDaf view's payloads: their requests also end by
    // sending what the kernel must forget, and one of them took the delete's (the delete then
    // answered before its names were forgotten, in a third of the rounds).
    let listed = files.clone();
    let read_payloads = move || {
        for entry in std::fs::read_dir(&listed).into_iter().flatten().flatten() {
            if entry.path().extension().is_some_and(|e| e == "data") {
                let _ = std::fs::read(entry.path());
            }
        }
    };
    let deadline = std::time::Duration::from_secs(120);
    let stale = beside(4, read_payloads, || {
        io_deadline(&mount.path, deadline, move || {
            let mut stale = Vec::new();
            for round in 0..100u32 {
                let name = format!("p{round}");
                write_and_close(
                    &files.join(format!("{name}.json")),
                    br#"{"format":"dense","eltype":"UInt32"}"#,
                )
                .unwrap();
                write_and_close(&files.join(format!("{name}.data")), &[1; 12]).unwrap();
                std::fs::remove_dir_all(zarr.join(&name)).unwrap();
                let shown = ["data", "json"]
                    .iter()
                    .any(|ext| files.join(format!("{name}.{ext}")).exists());
                if shown {
                    stale.push(round);
                }
            }
            stale
        })
    });
    assert!(
        stale.is_empty(),
        "{} of 100 properties deleted through the Zarr view still shown by the FilesDaf view \
         when the delete returned: rounds {stale:?}",
        stale.len()
    );
}
