//! Hostile input: a table of generated sources that are truncated, garbled, forged, bombs, or
//! carry hostile names, each mounted by the real daemon under an address-space limit.
//!
//! Every case asserts what a user must see: either the mount is refused with one error line, or
//! it mounts, the damaged properties give `EIO` (with a log line naming them) while everything
//! else reads, and the daemon is still alive afterwards with a peak resident size under 512 MiB.
//!
//! Cases live in `hostile/*.rs` (one file per family); this file is the harness.

mod common;

#[path = "hostile/formats.rs"]
mod formats;
#[path = "hostile/formats_links.rs"]
mod formats_links;
#[path = "hostile/formats_zarr.rs"]
mod formats_zarr;
#[path = "hostile/formats_zarr_v3.rs"]
mod formats_zarr_v3;
#[path = "hostile/zip.rs"]
mod zip;

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{force_abort, is_mounted, wait_exit, BIN, VECTORS};

/// The address-space limit every daemon of this table runs under (mapped sources included).
const ADDRESS_SPACE: u64 = 4 << 30;
/// The peak resident size a daemon may reach on any case.
const MAX_PEAK_RSS_KIB: u64 = 512 * 1024;

/// What a case must show.
#[derive(Debug, Clone)]
pub enum Expect {
    /// The mount is refused: exit status 1 and one stderr line containing this text.
    Refused(&'static str),
    /// The mount works. Reading every file, exactly the files whose mount path ends with one of
    /// `eio` fail (with `EIO`), every other file reads in full, and each of `log` appears in
    /// the daemon's log. `absent` lists mount paths (relative) that must not exist and `present`
    /// ones that must.
    Mounted {
        eio: Vec<&'static str>,
        log: Vec<&'static str>,
        absent: Vec<&'static str>,
        present: Vec<&'static str>,
    },
}

impl Expect {
    /// Mounts and reads cleanly: nothing fails.
    pub fn clean() -> Expect {
        Expect::Mounted {
            eio: vec![],
            log: vec![],
            absent: vec![],
            present: vec![],
        }
    }
}

/// One row of the table: a source built in `dir` by `build`, which returns the path to mount
/// (a directory, an archive, or `archive#/group`).
pub struct Case {
    pub name: String,
    pub build: Box<dyn Fn(&Path) -> String>,
    pub expect: Expect,
}

impl Case {
    pub fn new(
        name: impl Into<String>,
        expect: Expect,
        build: impl Fn(&Path) -> String + 'static,
    ) -> Case {
        Case {
            name: name.into(),
            build: Box::new(build),
            expect,
        }
    }
}

/// A copy of a fixture (from `shared/fixtures/vectors`) under `dir`, writable.
pub fn fixture_copy(dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    let ok = Command::new("cp")
        .arg("-r")
        .arg(Path::new(VECTORS).join(name))
        .arg(&to)
        .status()
        .unwrap()
        .success();
    assert!(ok, "copying {name}");
    let ok = Command::new("chmod")
        .args(["-R", "u+w"])
        .arg(&to)
        .status()
        .unwrap()
        .success();
    assert!(ok);
    to
}

struct Daemon {
    child: Child,
    mnt: PathBuf,
    stderr: std::thread::JoinHandle<String>,
}

fn start(source: &str, mnt: &Path) -> Result<Daemon, (i32, String)> {
    let mut child = Command::new("prlimit")
        .arg(format!("--as={ADDRESS_SPACE}"))
        .arg(BIN)
        .args([
            source,
            mnt.to_str().unwrap(),
            "-f",
            "-o",
            "ro",
            "--ready-fd",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_LOG", "warn")
        .env("MALLOC_ARENA_MAX", "2")
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr_pipe = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = [0u8; 6];
        let ok = stdout.read_exact(&mut line).is_ok() && &line == b"READY\n";
        let _ = tx.send(ok);
    });
    match rx.recv_timeout(Duration::from_secs(30)) {
        Ok(true) => Ok(Daemon {
            child,
            mnt: mnt.to_path_buf(),
            stderr,
        }),
        _ => {
            let status = wait_exit(&mut child, mnt, Duration::from_secs(30));
            Err((status.code().unwrap_or(-1), stderr.join().unwrap()))
        }
    }
}

/// Peak resident size of `pid` in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Reads every file below `root` (bounded reads, 64 MiB at most per file): the relative paths
/// of the files that failed with EIO, and other failures as errors.
fn read_all(root: &Path) -> (BTreeSet<String>, Vec<String>, BTreeSet<String>) {
    fn walk(
        root: &Path,
        rel: &str,
        eio: &mut BTreeSet<String>,
        other: &mut Vec<String>,
        seen: &mut BTreeSet<String>,
    ) {
        let dir = root.join(rel);
        let listing = match std::fs::read_dir(&dir) {
            Ok(l) => l,
            Err(e) => {
                other.push(format!("{rel}/: {e}"));
                return;
            }
        };
        for entry in listing {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    other.push(format!("{rel}/: {e}"));
                    continue;
                }
            };
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if !seen.insert(path.clone()) {
                other.push(format!("{path}: listed twice"));
                continue;
            }
            match std::fs::symlink_metadata(entry.path()) {
                Ok(m) if m.is_dir() => walk(root, &path, eio, other, seen),
                Ok(m) if m.is_file() => {
                    let result = std::fs::File::open(entry.path()).and_then(|f| {
                        let mut buf = Vec::new();
                        f.take(64 << 20).read_to_end(&mut buf).map(|_| ())
                    });
                    match result {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                            eio.insert(path);
                        }
                        Err(e) => other.push(format!("{path}: {e}")),
                    }
                }
                Ok(m) => other.push(format!(
                    "{path}: not a file or directory ({:?})",
                    m.file_type()
                )),
                Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                    eio.insert(path);
                }
                Err(e) => other.push(format!("{path}: {e}")),
            }
        }
    }
    let (mut eio, mut other, mut seen) = (BTreeSet::new(), Vec::new(), BTreeSet::new());
    walk(root, "", &mut eio, &mut other, &mut seen);
    (eio, other, seen)
}

/// Runs one case; returns a description of what went wrong, if anything.
fn run_case(case: &Case) -> Result<(), String> {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let data = tmp.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let source = (case.build)(&data);
    let started = start(&source, &mnt);
    match (&case.expect, started) {
        (Expect::Refused(text), Err((code, stderr))) => {
            let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
            let error = lines.iter().find(|l| l.starts_with("daf-mount:"));
            match error {
                Some(line) if code == 1 && line.contains(text) => Ok(()),
                _ => Err(format!(
                    "expected refusal containing {text:?}, got exit {code} and {stderr:?}"
                )),
            }
        }
        (Expect::Refused(text), Ok(daemon)) => {
            stop(daemon);
            Err(format!(
                "expected refusal containing {text:?}, but it mounted"
            ))
        }
        (Expect::Mounted { .. }, Err((code, stderr))) => {
            Err(format!("expected a mount, got exit {code}: {stderr}"))
        }
        (
            Expect::Mounted {
                eio,
                log,
                absent,
                present,
            },
            Ok(mut daemon),
        ) => {
            let root = mnt.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(read_all(&root));
            });
            let Ok((got_eio, other, seen)) = rx.recv_timeout(Duration::from_secs(60)) else {
                let _ = daemon.child.kill();
                force_abort(&mnt);
                return Err("reading the mount hung".into());
            };
            let mut problems = Vec::new();
            if let Ok(Some(status)) = daemon.child.try_wait() {
                problems.push(format!("the daemon died while reading: {status}"));
            }
            let peak = peak_rss_kib(daemon.child.id());
            if std::env::var_os("HOSTILE_PRINT_RSS").is_some() {
                eprintln!("peak RSS {peak:>8} KiB: {}", case.name);
            }
            if peak > MAX_PEAK_RSS_KIB {
                problems.push(format!("peak RSS {peak} KiB > {MAX_PEAK_RSS_KIB} KiB"));
            }
            let expected: Vec<&&str> = eio.iter().collect();
            for path in &got_eio {
                if !expected.iter().any(|e| path.ends_with(**e)) {
                    problems.push(format!("unexpected EIO on {path}"));
                }
            }
            for e in eio {
                if !got_eio.iter().any(|p| p.ends_with(e)) {
                    problems.push(format!("no EIO on *{e}"));
                }
            }
            problems.extend(other.iter().map(|o| format!("read error: {o}")));
            for a in absent {
                if seen.contains(*a) {
                    problems.push(format!("{a} must not be shown"));
                }
            }
            for p in present {
                if !seen.contains(*p) {
                    problems.push(format!("{p} must be shown"));
                }
            }
            let stderr = stop(daemon);
            for text in log {
                if !stderr.contains(text) {
                    problems.push(format!("log lacks {text:?}"));
                }
            }
            if stderr.contains("panicked") {
                problems.push("a panic was logged".into());
            }
            if problems.is_empty() {
                Ok(())
            } else {
                Err(format!("{}\n    log: {stderr}", problems.join("\n    ")))
            }
        }
    }
}

/// Unmounts and waits for the daemon; its log.
fn stop(mut daemon: Daemon) -> String {
    let _ = Command::new("fusermount3")
        .arg("-u")
        .arg(&daemon.mnt)
        .status();
    let status = wait_exit(&mut daemon.child, &daemon.mnt, Duration::from_secs(20));
    if is_mounted(&daemon.mnt) {
        force_abort(&daemon.mnt);
    }
    let mut log = daemon.stderr.join().unwrap();
    if !status.success() {
        log.push_str(&format!("\n[daemon exit: {status}]"));
    }
    log
}

#[test]
fn hostile_sources_never_crash_hang_or_exhaust_the_daemon() {
    require_fuse!();
    let cases: Vec<Case> = formats::cases()
        .into_iter()
        .chain(formats_zarr::cases())
        .chain(formats_zarr_v3::cases())
        .chain(zip::cases())
        .collect();
    // HOSTILE_ONLY=TEXT runs only the cases whose name contains TEXT (while working on them).
    let only = std::env::var("HOSTILE_ONLY").unwrap_or_default();
    let cases: Vec<Case> = cases
        .into_iter()
        .filter(|c| c.name.contains(&only))
        .collect();
    let mut failures = Vec::new();
    for case in &cases {
        if let Err(why) = run_case(case) {
            failures.push(format!("{}: {why}", case.name));
        }
    }
    eprintln!("{} hostile cases, {} failed", cases.len(), failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
