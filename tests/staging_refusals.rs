//! Writes that could never be committed are refused when they are made (not left staged), errors
//! keep their errno (a full disk is `ENOSPC`), `fsync` reports only the items it covers, and a
//! mount after a crash ends clean.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};

use common::{copy_fixture, io_timeout, zip_names, TestMount};
use daf_mount::views::ViewSelection;

fn errno<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// `fsync` of a directory of the mount (`fsyncdir`).
fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// The staging area of a source (see `staging::StagingArea::for_source`).
fn staging_of(source: &Path) -> PathBuf {
    let name = source.file_name().unwrap().to_str().unwrap();
    source.parent().unwrap().join(format!(".{name}.daf-mount"))
}

/// Every file under `dir` (relative paths), for "nothing was staged" checks.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(listing) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in listing {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(
                    e.path()
                        .strip_prefix(dir)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

#[test]
fn documents_outside_items_and_dot_names_are_refused_when_written() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let staging = staging_of(&source);
    {
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
        let root = mount.path.clone();
        io_timeout(&mount.path, move || {
            let files = root.join("files_v1_0.daf");
            let zarr = root.join("files_v1_0.daf.zarr");
            // daf.json can never be committed: refused at open, the source's stays.
            let before = std::fs::read(files.join("daf.json")).unwrap();
            assert_eq!(
                errno(std::fs::write(
                    files.join("daf.json"),
                    b"{\"version\":[9,9]}"
                )),
                Some(libc::EPERM)
            );
            assert_eq!(std::fs::read(files.join("daf.json")).unwrap(), before);
            // Names no item has, and properties named `.` or `..`.
            for name in [
                "scalars/notes.txt",
                "vectors/cell/score.csv",
                "scalars/..json",
                "scalars/...json",
                "vectors/cell/...data",
                "vectors/cell/..json",
            ] {
                assert_eq!(
                    errno(std::fs::write(files.join(name), b"{}")),
                    Some(libc::EPERM),
                    "{name}"
                );
                assert!(!files.join(name).exists(), "{name}");
            }
            // The same through a temporary and a rename (the temporary stays where it was).
            std::fs::write(files.join("scalars/.t"), b"{}").unwrap();
            assert_eq!(
                errno(std::fs::rename(
                    files.join("scalars/.t"),
                    files.join("scalars/...json")
                )),
                Some(libc::EPERM)
            );
            assert_eq!(
                errno(std::fs::hard_link(
                    files.join("scalars/.t"),
                    files.join("daf.json.new")
                )),
                Some(libc::EPERM)
            );
            std::fs::remove_file(files.join("scalars/.t")).unwrap();
            // Non-empty attributes: on a group (written in place or renamed into place) and on
            // a new array; `{}` is accepted as the no-op it is.
            let zattrs = std::fs::read(zarr.join(".zattrs")).unwrap();
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(zarr.join(".zattrs"))
                .unwrap();
            f.write_all(b"{\"a\":1}").unwrap();
            assert_eq!(
                errno(f.sync_all().and_then(|()| close(f))),
                Some(libc::EPERM)
            );
            assert_eq!(std::fs::read(zarr.join(".zattrs")).unwrap(), zattrs);
            let temp = zarr.join("vectors/cell/.zattrs.1234.partial");
            std::fs::write(&temp, b"{\"a\":1}").unwrap();
            assert_eq!(
                errno(std::fs::rename(&temp, zarr.join("vectors/cell/.zattrs"))),
                Some(libc::EPERM)
            );
            std::fs::write(&temp, b"{}").unwrap();
            std::fs::rename(&temp, zarr.join("vectors/cell/.zattrs")).unwrap();
            std::fs::create_dir(zarr.join("vectors/cell/fresh")).unwrap();
            assert_eq!(
                errno(write_and_close(
                    &zarr.join("vectors/cell/fresh/.zattrs"),
                    b"{\"units\":\"m\"}"
                )),
                Some(libc::EPERM)
            );
            assert!(!zarr.join("vectors/cell/fresh/.zattrs").exists());
            std::fs::remove_dir(zarr.join("vectors/cell/fresh")).unwrap();
            // Documents no Daf group has.
            assert_eq!(
                errno(std::fs::write(zarr.join("daf/.zattrs"), b"{}")),
                Some(libc::EPERM)
            );
        });
    }
    // Nothing was left staged to shadow the source at the next mount.
    assert_eq!(files_under(&staging), Vec::<String>::new());
}

/// Creates `path` with `bytes`, returning the error of the writes or of the `close`.
fn write_and_close(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::File::create(path)?;
    f.write_all(bytes)?;
    close(f)
}

/// Closes `f`, returning the error of the `close` (where a commit or a refusal is reported).
fn close(f: std::fs::File) -> std::io::Result<()> {
    use std::os::fd::IntoRawFd;
    nix::unistd::close(f.into_raw_fd()).map_err(std::io::Error::from)
}

/// A property name as long as a file name can hold with its extension (250 + `.json`).
fn long_name() -> String {
    "n".repeat(250)
}

#[test]
fn names_up_to_name_max_are_committed_in_directory_and_zip_sources() {
    require_fuse!();
    let name = long_name();
    for fixture in ["files_v1_0.daf", "zarr_v2.daf.zarr", "zarr_v2.daf.zarr.zip"] {
        let (_tmp, source) = copy_fixture(fixture);
        {
            let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Files);
            let root = mount.path.clone();
            let name = name.clone();
            io_timeout(&mount.path, move || {
                std::fs::write(
                    root.join(format!("scalars/{name}.json")),
                    b"{\"value\":7,\"type\":\"Int64\"}",
                )
                .unwrap();
                std::fs::write(
                    root.join(format!("vectors/cell/{name}.json")),
                    b"{\"format\":\"dense\",\"eltype\":\"UInt8\"}",
                )
                .unwrap();
                std::fs::write(root.join(format!("vectors/cell/{name}.data")), [1u8, 2, 3])
                    .unwrap();
                fsync_dir(&root).unwrap();
            });
        }
        assert_eq!(
            files_under(&staging_of(&source)),
            Vec::<String>::new(),
            "{fixture}: committed, nothing staged"
        );
        let names: Vec<String> = if fixture.ends_with(".zip") {
            zip_names(&source)
        } else {
            files_under(&source)
        };
        assert!(
            names.iter().any(|n| n.contains(&format!("scalars/{name}"))),
            "{fixture}: {names:?}"
        );
        assert!(
            names
                .iter()
                .any(|n| n.contains(&format!("vectors/cell/{name}"))),
            "{fixture}"
        );
        // A fresh mount shows them in both views.
        let mount = TestMount::new(source.to_str().unwrap(), ViewSelection::Both);
        let root = mount.path.clone();
        let base = fixture.trim_end_matches(".zip").trim_end_matches(".zarr");
        let base = base.trim_end_matches(".daf").to_string();
        let name = name.clone();
        io_timeout(&mount.path, move || {
            let scalar = root.join(format!("{base}.daf/scalars/{name}.json"));
            let text = std::fs::read_to_string(&scalar).unwrap();
            assert!(text.contains('7'), "{text}");
            let data = root.join(format!("{base}.daf.zarr/vectors/cell/{name}/0"));
            assert_eq!(std::fs::read(data).unwrap(), [1u8, 2, 3]);
        });
    }
}

/// A tmpfs of `size` at a fresh directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn new(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Fills the file system holding `filler`: writes it until the disk is full.
fn fill(filler: &Path) {
    let mut f = std::fs::File::create(filler).unwrap();
    let block = vec![0u8; 64 << 10];
    loop {
        match f.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling: {e}"),
        }
    }
    while f.write(&[0u8]).is_ok_and(|n| n == 1) {}
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(self.dir.path(), nix::mount::MntFlags::MNT_DETACH);
    }
}

#[test]
fn a_failed_append_fails_every_fsync_of_its_item_until_it_is_done() {
    require_fuse!();
    let disk = Tmpfs::new("2M");
    let source = disk.path().join("x.daf.zarr.zip");
    std::fs::copy(
        Path::new(common::VECTORS).join("zarr_v2.daf.zarr.zip"),
        &source,
    )
    .unwrap();
    let filler = disk.path().join("filler");
    {
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Files);
        let root = mount.path.clone();
        let fill_at = filler.clone();
        io_timeout(&mount.path, move || {
            // The scalar is staged and closed while there is room, so its close succeeds;
            // the disk is then full before its append runs. (The value is large, so that the
            // append needs many pages: the test does not depend on the page or two tmpfs may
            // give back meanwhile.)
            let mut f = std::fs::File::create(root.join("scalars/big.json")).unwrap();
            let value = "x".repeat(200_000);
            f.write_all(format!("{{\"value\":\"{value}\",\"type\":\"String\"}}").as_bytes())
                .unwrap();
            fill(&fill_at);
            let free = || {
                nix::sys::statvfs::statvfs(fill_at.parent().unwrap())
                    .map(|s| s.blocks_available())
                    .ok()
            };
            assert_eq!(free(), Some(0), "the disk is full");
            close(f).unwrap();
            let file = || std::fs::File::open(root.join("scalars/big.json")).unwrap();
            for attempt in 0..2 {
                assert_eq!(
                    errno(file().sync_all()),
                    Some(libc::ENOSPC),
                    "attempt {attempt}, free blocks {:?}",
                    free()
                );
                assert_eq!(
                    errno(fsync_dir(&root.join("scalars"))),
                    Some(libc::ENOSPC),
                    "{attempt}"
                );
            }
            // Other items are not concerned.
            assert_eq!(errno(fsync_dir(&root.join("vectors"))), None);
            std::fs::File::open(root.join("scalars/ratio.json"))
                .unwrap()
                .sync_all()
                .unwrap();
        });
        // Room again: the next fsync retries the append, which now succeeds.
        std::fs::remove_file(&filler).unwrap();
        let root = mount.path.clone();
        io_timeout(&mount.path, move || {
            std::fs::File::open(root.join("scalars/big.json"))
                .unwrap()
                .sync_all()
                .unwrap();
            fsync_dir(&root).unwrap();
        });
    }
    assert!(zip_names(&source).contains(&"scalars/big/.zarray".to_string()));
    assert_eq!(files_under(&staging_of(&source)), Vec::<String>::new());
}

#[test]
fn a_staged_file_cut_short_by_a_full_disk_fails_with_enospc() {
    require_fuse!();
    let disk = Tmpfs::new("1M");
    let source = disk.path().join("files_v1_0.daf");
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(Path::new(common::VECTORS).join("files_v1_0.daf"))
        .arg(&source)
        .status()
        .unwrap();
    assert!(copied.success());
    std::process::Command::new("chmod")
        .args(["-R", "u+w"])
        .arg(&source)
        .status()
        .unwrap();
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Files);
    let root = mount.path.clone();
    let path = disk.path().to_path_buf();
    io_timeout(&mount.path, move || {
        fill(&path.join("filler"));
        let mut f = std::fs::File::create(root.join("scalars/cut.json")).unwrap();
        assert_eq!(
            errno(f.write_all(b"{\"value\":1.5,\"type\":\"Float64\"}")),
            Some(libc::ENOSPC)
        );
        assert_eq!(errno(close(f)), Some(libc::ENOSPC));
    });
}

#[test]
fn recovery_drops_copies_already_appended_and_reports_leftovers_once() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("zarr_v2.daf.zarr.zip");
    let json = b"{\"format\":\"dense\",\"eltype\":\"UInt8\"}";
    {
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Files);
        let root = mount.path.clone();
        io_timeout(&mount.path, move || {
            std::fs::write(root.join("vectors/cell/done.json"), json).unwrap();
            std::fs::write(root.join("vectors/cell/done.data"), [4u8, 5, 6]).unwrap();
            fsync_dir(&root).unwrap();
        });
    }
    let staging = staging_of(&source);
    assert_eq!(files_under(&staging), Vec::<String>::new());
    // The state a daemon killed after the append's commit point leaves: the staged copies are
    // still there (one of them already deleted). And an empty descriptor of a killed writer.
    let cell = staging.join("zarr_v2.daf/vectors/cell");
    std::fs::create_dir_all(&cell).unwrap();
    std::fs::write(cell.join("done.data"), [4u8, 5, 6]).unwrap();
    std::fs::write(cell.join("empty.json"), b"").unwrap();
    // A scalar the killed daemon had accepted (its journal says so) but not appended, and a
    // complete one whose writer was killed before its close (never accepted).
    std::fs::create_dir_all(staging.join("zarr_v2.daf/scalars")).unwrap();
    for name in ["done2", "unclosed"] {
        std::fs::write(
            staging.join(format!("zarr_v2.daf/scalars/{name}.json")),
            b"{\"value\":3,\"type\":\"Int64\"}",
        )
        .unwrap();
    }
    // A clean run forgot, once appended, what it had accepted: its journal is gone. A daemon
    // killed after the append's commit point still has its line.
    let journal = source.with_file_name(".zarr_v2.daf.zarr.zip.daf-mount.accepted");
    assert!(
        !journal.exists(),
        "a clean unmount left the journal of accepted items"
    );
    let accepted = "zarr_v2.daf\tvectors/cell/done\nzarr_v2.daf\tscalars/done2\n";
    std::fs::write(&journal, accepted).unwrap();
    let names_before = zip_names(&source);
    {
        let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Files);
        let root = mount.path.clone();
        io_timeout(&mount.path, move || {
            // Every fsync succeeds: the root, the directory of the leftover, other items.
            for _ in 0..2 {
                fsync_dir(&root).unwrap();
                fsync_dir(&root.join("vectors/cell")).unwrap();
                std::fs::File::open(root.join("vectors/cell/done.data"))
                    .unwrap()
                    .sync_all()
                    .unwrap();
            }
            assert_eq!(
                std::fs::read(root.join("vectors/cell/done.data")).unwrap(),
                [4, 5, 6]
            );
            // The leftover stays visible, for its owner to remove or rewrite.
            assert_eq!(
                std::fs::read(root.join("vectors/cell/empty.json")).unwrap(),
                b""
            );
            std::fs::remove_file(root.join("vectors/cell/empty.json")).unwrap();
            // The never-accepted scalar is not committed, even by an fsync of the root.
            assert!(root.join("scalars/unclosed.json").exists());
            std::fs::remove_file(root.join("scalars/unclosed.json")).unwrap();
            fsync_dir(&root).unwrap();
        });
    }
    // The copy of the appended property was dropped, not appended twice; the new scalar was.
    let names_after = zip_names(&source);
    assert_eq!(
        names_after
            .iter()
            .filter(|n| n.starts_with("vectors/cell/done/"))
            .count(),
        names_before
            .iter()
            .filter(|n| n.starts_with("vectors/cell/done/"))
            .count()
    );
    assert!(names_after.iter().any(|n| n.starts_with("scalars/done2/")));
    assert!(!names_after
        .iter()
        .any(|n| n.starts_with("scalars/unclosed/")));
    assert_eq!(files_under(&staging), Vec::<String>::new());
}

#[test]
fn a_leftover_that_can_never_commit_is_reported_once_by_the_daemon() {
    require_fuse!();
    let (tmp, source) = copy_fixture("files_v1_0.daf");
    let cell = staging_of(&source).join("files_v1_0.daf/vectors/cell");
    std::fs::create_dir_all(&cell).unwrap();
    std::fs::write(cell.join("empty.json"), b"").unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let log = tmp.path().join("log");
    let stderr = std::fs::File::create(&log).unwrap();
    let mut child = common::start_foreground(
        &[source.to_str().unwrap(), mnt.to_str().unwrap()],
        stderr.into(),
    );
    // Recovery runs right after the mount is ready.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let root = mnt.clone();
    let synced = io_timeout(&mnt, move || {
        (0..3)
            .map(|_| {
                fsync_dir(&root)
                    .and_then(|()| fsync_dir(&root.join("files_v1_0.daf/vectors/cell")))
                    .and_then(|()| {
                        std::fs::File::open(root.join("files_v1_0.daf/vectors/cell/score.data"))?
                            .sync_all()
                    })
            })
            .collect::<Vec<_>>()
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    common::wait_exit(&mut child, &mnt, std::time::Duration::from_secs(20));
    for result in synced {
        result.unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let naming: Vec<&str> = text.lines().filter(|l| l.contains("empty.json")).collect();
    assert_eq!(naming.len(), 1, "{text}");
    assert!(naming[0].contains("never finished it"), "{text}");
    // Left in place for its owner.
    assert!(cell.join("empty.json").exists());
}

/// A truncation of a committed payload whose commit is refused (`EINVAL`: 11 bytes are not
/// three Float32) does nothing: `stat` and a read show the committed file, at once and after
/// the kernel's caches are gone.
#[test]
fn a_refused_truncation_leaves_the_committed_file() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let committed = std::fs::read(source.join("vectors/cell/score.data")).unwrap();
    let staging = staging_of(&source);
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let data = root.join("files_v1_0.daf/vectors/cell/score.data");
        assert_eq!(std::fs::metadata(&data).unwrap().len(), 12);
        // truncate(2) on the path: the payload's own size changes, not a copy opened for writing.
        let truncated = nix::unistd::truncate(&data, 11);
        assert_eq!(truncated, Err(nix::errno::Errno::EINVAL));
        let shown = std::fs::metadata(&data).unwrap().len();
        let read = std::fs::read(&data).unwrap();
        assert_eq!((shown, read), (12, committed), "stat, then a read");
    });
    drop(mount);
    assert!(files_under(&staging).is_empty(), "a copy is left staged");
}
