//! Which close commits: a forked child's implicit close of an inherited descriptor (at its exec
//! or exit) must not commit a file its parent is still writing; the opener's close does. A read
//! handle's close commits nothing and waits for no reply of the daemon.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{copy_fixture, io_timeout, TestMount};
use daf_mount::views::ViewSelection;

/// The new axis as the Zarr view shows it once committed (a staged file shows only where it
/// was written).
fn committed_node(root: &Path) -> PathBuf {
    root.join("files_v1_0.daf.zarr/axes/new")
}

#[test]
fn a_forked_childs_close_does_not_commit_a_file_being_written() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    const PIECES: usize = 30;
    let written: String = (0..PIECES).map(|i| format!("n{i}\n")).collect();
    let expected = written.clone();
    io_timeout(&mount.path, move || {
        let done = Arc::new(AtomicBool::new(false));
        // Another thread forks and execs all along: every child inherits the writer's
        // descriptor (O_CLOEXEC) and closes it at its exec.
        let spawner = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut spawned = 0;
                while !done.load(Ordering::Relaxed) {
                    Command::new("/bin/true").status().unwrap();
                    spawned += 1;
                }
                spawned
            })
        };
        let mut f = std::fs::File::create(root.join("files_v1_0.daf/axes/new.txt")).unwrap();
        for i in 0..PIECES {
            f.write_all(format!("n{i}\n").as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(15));
            assert!(
                !committed_node(&root).exists(),
                "the axis was committed after {} of {PIECES} entries, before its writer's close",
                i + 1
            );
        }
        done.store(true, Ordering::Relaxed);
        let spawned = spawner.join().unwrap();
        assert!(spawned > 5, "only {spawned} children forked while writing");
        drop(f);
        assert!(committed_node(&root).exists(), "not committed at close");
        let read = std::fs::read_to_string(root.join("files_v1_0.daf/axes/new.txt")).unwrap();
        assert_eq!(read, written);
    });
    drop(mount);
    let on_disk = std::fs::read_to_string(source.join("axes/new.txt")).unwrap();
    assert_eq!(on_disk, expected);
}

#[test]
fn a_subprocess_writing_to_the_openers_file_commits_at_the_openers_close() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    // `subprocess.run(cmd, stdout=f)` inside `with open(...) as f`: the child writes and
    // closes first (at its exit), then the opener writes the rest and closes.
    let script = r#"
import os, subprocess, sys
path, node = sys.argv[1], sys.argv[2]
with open(path, "w") as f:
    subprocess.run(["sh", "-c", "printf 'x1\\nx2\\n'"], stdout=f, check=True)
    print(os.path.exists(node))
    f.write("x3\n")
"#;
    let output = io_timeout(&mount.path, move || {
        let output = Command::new("python3")
            .args(["-c", script])
            .arg(root.join("files_v1_0.daf/axes/new.txt"))
            .arg(committed_node(&root))
            .output()
            .unwrap();
        let read = std::fs::read_to_string(root.join("files_v1_0.daf/axes/new.txt"));
        (output, read, committed_node(&root).exists())
    });
    let (output, read, committed) = output;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "python failed: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        "False",
        "committed at the child's exit, before the opener's close"
    );
    assert!(committed, "not committed at the opener's close");
    assert_eq!(read.unwrap(), "x1\nx2\nx3\n");
}

/// Sends SIGCONT to a stopped daemon when dropped (also when the test fails).
struct Resume(nix::unistd::Pid);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

/// The first regular file found below `dir` (depth first, names sorted).
fn first_file(dir: &Path) -> Option<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    entries.into_iter().find_map(|path| {
        if path.is_dir() {
            first_file(&path)
        } else {
            (path.extension().is_some_and(|e| e == "data")).then_some(path)
        }
    })
}

/// A handle opened for reading commits nothing at its close, so its close needs no answer from
/// the daemon (FOPEN_NOFLUSH: the kernel sends no FLUSH). With the daemon stopped, closing a ZIP
/// member just read (served through the page cache) returns at once. (A whole source file opened
/// with passthrough closed at once even before FOPEN_NOFLUSH, so it is not a check here.)
#[test]
fn closing_a_read_handle_waits_for_no_reply_of_the_daemon() {
    require_fuse!();
    for fixture in ["zarr_v2.daf.zarr.zip", "zarr_v3.daf.zarr.zip"] {
        let source = format!("{}/{fixture}", common::VECTORS);
        let mnt = tempfile::tempdir().unwrap();
        let root = mnt.path().to_path_buf();
        let args = [source.as_str(), root.to_str().unwrap(), "-o", "ro"];
        let child =
            common::start_foreground(&[&args[..], &["--view", "files"]].concat(), Stdio::null());
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let mut daemon = common::Unmount(child, root.clone());
        let file = io_timeout(&root, {
            let root = root.clone();
            move || {
                let path = first_file(&root.join("vectors")).expect("a vector's .data file");
                let mut file = std::fs::File::open(&path).unwrap();
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut file, &mut bytes).unwrap();
                assert!(!bytes.is_empty(), "{}: empty", path.display());
                file
            }
        });
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        let resume = Resume(pid);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            drop(file);
            let _ = tx.send(());
        });
        let closed = rx.recv_timeout(Duration::from_secs(3)).is_ok();
        drop(resume);
        assert!(
            closed,
            "{fixture}: the close of a read handle waited for the (stopped) daemon"
        );
        daemon.unmount();
    }
}
