//! SIGKILL during large appends to a ZIP source: the archive stays a valid ZIP, every property
//! whose `close` succeeded is intact (once the next writable mount has appended what the killed
//! daemon had accepted), and no partial property is ever visible.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    force_abort, io_timeout, is_mounted, processes_mentioning, start_foreground, TestMount, VECTORS,
};
use daf_mount::views::ViewSelection;

const CELLS: usize = 200_000;

/// The bytes of vector `name`: distinct per property.
fn values(name: &str) -> Vec<u8> {
    let base = name.bytes().map(f64::from).sum::<f64>();
    (0..CELLS)
        .flat_map(|j| (base * 1e6 + j as f64).to_le_bytes())
        .collect()
}

/// Adds a `big` axis of CELLS entries to a copy of the Zarr ZIP fixture.
fn prepare(archive: &Path) {
    std::fs::copy(Path::new(VECTORS).join("zarr_v2.daf.zarr.zip"), archive).unwrap();
    let script = r#"
import struct, sys, zipfile
n = int(sys.argv[2])
items = [b"c%d" % i for i in range(n)]
chunk = struct.pack("<I", n) + b"".join(struct.pack("<I", len(x)) + x for x in items)
with zipfile.ZipFile(sys.argv[1], "a") as z:
    z.writestr("axes/big/.zarray", '{"dtype":"|O","filters":[{"id":"vlen-utf8"}],"shape":[%d],"order":"C","zarr_format":2,"chunks":[%d],"fill_value":null,"compressor":null}' % (n, n))
    z.writestr("axes/big/.zattrs", "{}")
    z.writestr("axes/big/0", chunk)
"#;
    let status = Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(archive)
        .arg(CELLS.to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

/// Writes properties until the mount dies; returns the names whose `close` succeeded.
fn write_until_killed(view: PathBuf, round: usize, done: Arc<Mutex<Vec<String>>>) {
    for k in 0.. {
        let name = format!("v{round}_{k}");
        let result = (|| -> std::io::Result<()> {
            std::fs::write(
                view.join(format!("vectors/big/{name}.json")),
                "{\"format\":\"dense\",\"eltype\":\"Float64\"}\n",
            )?;
            let mut f = std::fs::File::create(view.join(format!("vectors/big/{name}.data")))?;
            f.write_all(&values(&name))?;
            nix::unistd::close(std::os::fd::IntoRawFd::into_raw_fd(f)).map_err(std::io::Error::from)
        })();
        match result {
            Ok(()) => done.lock().unwrap().push(name),
            Err(_) => return,
        }
    }
}

#[test]
fn sigkill_during_appends_never_breaks_the_archive() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("crash.daf.zarr.zip");
    prepare(&archive);
    let mut committed: Vec<String> = Vec::new();
    for round in 0..6 {
        let mnt = tmp.path().join(format!("mnt{round}"));
        std::fs::create_dir(&mnt).unwrap();
        let mut daemon = start_foreground(
            &[
                archive.to_str().unwrap(),
                mnt.to_str().unwrap(),
                "--view",
                "files",
            ],
            Stdio::null(),
        );
        let done = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let (view, done) = (mnt.clone(), done.clone());
            std::thread::spawn(move || write_until_killed(view, round, done))
        };
        std::thread::sleep(Duration::from_millis(40 + 53 * round as u64));
        daemon.kill().unwrap(); // SIGKILL
        daemon.wait().unwrap();
        force_abort(&mnt);
        writer.join().unwrap();
        // The helper finishes (or drops) the commit it was given, then exits.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !processes_mentioning(mnt.to_str().unwrap()).is_empty() {
            assert!(Instant::now() < deadline, "tail writer still running");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!is_mounted(&mnt));
        let check = Command::new("python3")
            .args(["-m", "zipfile", "-t"])
            .arg(&archive)
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "round {round}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        committed.extend(done.lock().unwrap().iter().cloned());
        // A writable mount appends what the killed daemon accepted (its close succeeded) but had
        // not appended yet; its unmount waits for the appends.
        drop(TestMount::writable(
            archive.to_str().unwrap(),
            ViewSelection::Files,
        ));
        // Every property whose close succeeded is there, intact; nothing partial is visible.
        let mount = TestMount::new(archive.to_str().unwrap(), ViewSelection::Files);
        let (root, expected) = (mount.path.clone(), committed.clone());
        io_timeout(&mount.path, move || {
            let visible: Vec<String> = std::fs::read_dir(root.join("vectors/big"))
                .unwrap()
                .filter_map(|e| {
                    e.unwrap()
                        .file_name()
                        .into_string()
                        .unwrap()
                        .strip_suffix(".data")
                        .map(str::to_string)
                })
                .collect();
            for name in &expected {
                assert!(
                    visible.contains(name),
                    "{name} was closed successfully but is missing"
                );
            }
            for name in &visible {
                let bytes = std::fs::read(root.join(format!("vectors/big/{name}.data"))).unwrap();
                assert!(bytes == values(name), "{name} is visible but not intact");
            }
        });
    }
    assert!(
        committed.len() >= 3,
        "too few appends to exercise the protocol: {committed:?}"
    );
}
