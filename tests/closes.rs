//! Which close commits: a forked child's implicit close of an inherited descriptor (at its exec
//! or exit) must not commit a file its parent is still writing; the opener's close does.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
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
