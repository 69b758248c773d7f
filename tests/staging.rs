//! Files written through a read-write mount are staged beside the source: readable back at once,
//! renamable and removable, and still there after a remount.

mod common;

use std::io::Write;
use std::os::unix::fs::MetadataExt;

use common::{copy_fixture, io_timeout, TestMount};
use daf_mount::views::ViewSelection;

#[test]
fn staged_files_behave_like_files_and_survive_a_remount() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    {
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
        let root = mount.path.clone();
        io_timeout(&mount.path, move || {
            let cell = root.join("files_v1_0.daf/vectors/cell");
            // Write, read back, size, rename over, link, unlink.
            let mut f = std::fs::File::create(cell.join(".tmp-notes")).unwrap();
            f.write_all(b"hello ").unwrap();
            f.write_all(b"world").unwrap();
            drop(f);
            assert_eq!(
                std::fs::read(cell.join(".tmp-notes")).unwrap(),
                b"hello world"
            );
            assert_eq!(
                std::fs::metadata(cell.join(".tmp-notes")).unwrap().len(),
                11
            );
            // A name no Daf item has could never be committed: refused, the file stays.
            assert_eq!(
                std::fs::rename(cell.join(".tmp-notes"), cell.join("notes"))
                    .unwrap_err()
                    .raw_os_error(),
                Some(libc::EPERM)
            );
            std::fs::rename(cell.join(".tmp-notes"), cell.join("notes.data")).unwrap();
            assert!(!cell.join(".tmp-notes").exists());
            std::fs::hard_link(cell.join("notes.data"), cell.join("notes2.data")).unwrap();
            assert_eq!(
                std::fs::read(cell.join("notes2.data")).unwrap(),
                b"hello world"
            );
            std::fs::remove_file(cell.join("notes2.data")).unwrap();
            // Directories: only where Daf data can go (a vectors directory for a new axis).
            let vectors = root.join("files_v1_0.daf/vectors");
            std::fs::create_dir(vectors.join("newaxis")).unwrap();
            std::fs::write(vectors.join("newaxis/.x"), b"x").unwrap();
            assert_eq!(
                std::fs::remove_dir(vectors.join("newaxis"))
                    .unwrap_err()
                    .raw_os_error(),
                Some(libc::ENOTEMPTY)
            );
            std::fs::remove_file(vectors.join("newaxis/.x")).unwrap();
            std::fs::remove_dir(vectors.join("newaxis")).unwrap();
            assert_eq!(
                std::fs::create_dir(cell.join("sub"))
                    .unwrap_err()
                    .raw_os_error(),
                Some(libc::EPERM)
            );
            // Truncate and append.
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(cell.join("notes.data"))
                .unwrap();
            f.set_len(5).unwrap();
            drop(f);
            std::fs::OpenOptions::new()
                .append(true)
                .open(cell.join("notes.data"))
                .unwrap()
                .write_all(b"!")
                .unwrap();
            assert_eq!(std::fs::read(cell.join("notes.data")).unwrap(), b"hello!");
            // Refusals: outside a view, committed files, committed directories.
            let refused = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
            assert_eq!(
                refused(std::fs::write(root.join("stray"), b"x")),
                Some(libc::EPERM)
            );

            assert_eq!(
                refused(std::fs::remove_file(root.join("files_v1_0.daf/daf.json"))),
                Some(libc::EPERM)
            );
            assert_eq!(
                refused(std::fs::remove_dir(
                    root.join("files_v1_0.daf/vectors/gene")
                )),
                Some(libc::EPERM)
            );
            assert_eq!(refused(std::fs::create_dir(cell)), Some(libc::EEXIST));
            // The committed files are untouched and still shown.
            assert_eq!(
                std::fs::metadata(root.join("files_v1_0.daf/vectors/cell/score.data"))
                    .unwrap()
                    .len(),
                12
            );
            assert_eq!(
                std::fs::metadata(root.join("files_v1_0.daf"))
                    .unwrap()
                    .mode()
                    & 0o777,
                0o755
            );
        });
    }
    // Staged beside the source, in the both-views layout, whatever the view selection.
    let staged = source
        .parent()
        .unwrap()
        .join(".files_v1_0.daf.daf-mount/files_v1_0.daf/vectors/cell/notes.data");
    assert_eq!(std::fs::read(&staged).unwrap(), b"hello!");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Files);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        assert_eq!(
            std::fs::read(root.join("vectors/cell/notes.data")).unwrap(),
            b"hello!"
        );
        std::fs::remove_file(root.join("vectors/cell/notes.data")).unwrap();
    });
}

#[test]
fn read_only_mounts_refuse_every_write() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::new(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let err =
            std::fs::write(root.join("files_v1_0.daf/vectors/cell/x.json"), b"{}").unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EROFS));
    });
    assert!(!source
        .parent()
        .unwrap()
        .join(".files_v1_0.daf.daf-mount")
        .exists());
}
