//! Shared helpers for tests that really mount: a guard that always unmounts, I/O under a
//! timeout that aborts a wedged connection, and tree comparisons against the fixtures.
#![allow(dead_code)]

pub mod fault_server;
pub mod h5;
pub mod http;
pub mod s3;
pub mod s3_listing;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use daf_mount::core::DafFs;
use daf_mount::formats::source::open_source;
use daf_mount::fuse::{mount_config, FuseAdapter, MountSettings};
use daf_mount::staging::StagingArea;
use daf_mount::views::ViewSelection;

pub const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");
pub const JULIA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/julia-filesdaf"
);
/// The packed fixtures of `tests/data/make_packed.py`.
pub const PACKED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");

/// The H5df fixtures (`shared/fixtures/h5df`).
pub const H5DF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/h5df");

/// Every local source kind: FilesDaf 1.0/1.1, Zarr v2/v3 directories and ZIPs, ZipDaf,
/// multi-data-set ZIPs, packed and foreign arrays, H5df (both HDF5 file structures).
pub fn every_local_source() -> Vec<String> {
    let vectors = [
        "files_v1_0.daf",
        "files_v1_1.daf",
        "zarr_v2.daf.zarr",
        "zarr_v2.daf.zarr.zip",
        "zarr_v3.daf.zarr",
        "zarr_v3.daf.zarr.zip",
        "zipdaf_v1_0.daf.zip",
        "zipdaf_v1_1.daf.zip",
        "multi_v1_1.dafs.zip",
    ];
    let packed = [
        "files_packed.daf",
        "zipdaf_packed.daf.zip",
        "zarr_packed.daf.zarr",
        "zarr_packed.daf.zarr.zip",
        "multi_v3.dafs.zarr.zip",
        "foreign_v3.daf.zarr",
    ];
    let h5df = ["tiny.h5df", "tiny-sb0.h5df"];
    let vectors = vectors.iter().map(|s| format!("{VECTORS}/{s}"));
    vectors
        .chain(packed.iter().map(|s| format!("{PACKED}/{s}")))
        .chain(h5df.iter().map(|s| format!("{H5DF}/{s}")))
        .collect()
}

/// Unmounts `mnt` (a mount of the binary) with `fusermount3 -u`.
pub fn fusermount_u(mnt: &Path) {
    let done = std::process::Command::new("fusermount3")
        .arg("-u")
        .arg(mnt)
        .status();
    assert!(
        done.is_ok_and(|s| s.success()),
        "fusermount3 -u {}",
        mnt.display()
    );
}

pub const IO_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether this machine can mount FUSE file systems (root and /dev/fuse).
pub fn fuse_usable() -> bool {
    Path::new("/dev/fuse").exists() && nix::unistd::geteuid().is_root()
}

/// Skips the test (loudly) where FUSE is unavailable, unless FUSE_TESTS_REQUIRED=1 says it must run.
#[macro_export]
macro_rules! require_fuse {
    () => {
        if !common::fuse_usable() {
            assert!(
                std::env::var("FUSE_TESTS_REQUIRED").is_err(),
                "FUSE is required but not usable here"
            );
            eprintln!("SKIPPED: FUSE not usable on this machine");
            return;
        }
    };
}

/// Whether `path` is a mount point, from /proc/self/mountinfo (never stats the path itself).
pub fn is_mounted(path: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let wanted = path.to_string_lossy().replace(' ', "\\040");
    info.lines()
        .any(|line| line.split(' ').nth(4) == Some(wanted.as_str()))
}

fn mount_minor(path: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let wanted = path.to_string_lossy().to_string();
    info.lines()
        .find(|l| l.split(' ').nth(4) == Some(wanted.as_str()))
        .and_then(|l| l.split(' ').nth(2))
        .and_then(|d| d.split(':').nth(1))
        .map(str::to_string)
}

/// Aborts the FUSE connection of the mount at `path` (a wedged daemon cannot hang the test).
pub fn force_abort(path: &Path) {
    if let Some(minor) = mount_minor(path) {
        let _ = std::fs::write(format!("/sys/fs/fuse/connections/{minor}/abort"), "1");
    }
    let _ = nix::mount::umount2(
        path,
        nix::mount::MntFlags::MNT_FORCE | nix::mount::MntFlags::MNT_DETACH,
    );
}

/// Runs `f` with a deadline; on timeout aborts the mount at `mnt` and fails the test.
pub fn io_timeout<R: Send + 'static>(mnt: &Path, f: impl FnOnce() -> R + Send + 'static) -> R {
    io_deadline(mnt, IO_TIMEOUT, f)
}

/// [`io_timeout`] with another limit (for long walks of big trees).
pub fn io_deadline<R: Send + 'static>(
    mnt: &Path,
    limit: Duration,
    f: impl FnOnce() -> R + Send + 'static,
) -> R {
    let (tx, rx) = mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(r) => {
            let _ = handle.join();
            r
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
            // The operation panicked (a failed assertion): report it as it is.
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the sender is only dropped after sending or panicking"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            force_abort(mnt);
            let _ = handle.join();
            panic!(
                "file system operation on {} timed out after {limit:?}",
                mnt.display()
            );
        }
    }
}

/// An in-process mount on its own temporary directory, unmounted when dropped (also on panic).
pub struct TestMount {
    session: Option<fuser::BackgroundSession>,
    dir: Option<tempfile::TempDir>,
    pub path: PathBuf,
    pub core: Arc<DafFs>,
}

impl TestMount {
    /// A read-only mount.
    pub fn new(source: &str, selection: ViewSelection) -> TestMount {
        TestMount::with(source, selection, false)
    }

    /// A mount that stages writes beside the source (use a copy of a fixture).
    pub fn writable(source: &str, selection: ViewSelection) -> TestMount {
        TestMount::with(source, selection, true)
    }

    fn with(source: &str, selection: ViewSelection, writable: bool) -> TestMount {
        let opened = open_source(source).unwrap_or_else(|e| panic!("{source}: {e}"));
        let staging = writable.then(|| StagingArea::for_source(&opened.path));
        let core = Arc::new(DafFs::with_staging(
            opened.datasets,
            selection,
            SystemTime::UNIX_EPOCH,
            staging,
        ));
        TestMount::serving(core, writable, source)
    }

    /// A mount of a core built by the test.
    pub fn serving(core: Arc<DafFs>, writable: bool, fsname: &str) -> TestMount {
        let dir = tempfile::Builder::new()
            .prefix("daf-mount-test-")
            .tempdir()
            .unwrap();
        let path = dir.path().to_path_buf();
        let settings = MountSettings {
            fsname: fsname.to_string(),
            allow_other: false,
            allow_root: false,
            auto_unmount: false,
            threads: 2,
            read_only: !writable,
        };
        let adapter = FuseAdapter::new(
            core.clone(),
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let notifier = adapter.notifier_slot();
        let session = fuser::spawn_mount(adapter, &path, &mount_config(&settings)).unwrap();
        *notifier.lock().unwrap() = Some(session.notifier());
        if writable {
            core.recover();
        }
        TestMount {
            session: Some(session),
            dir: Some(dir),
            path,
            core,
        }
    }

    pub fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }
}

impl Drop for TestMount {
    fn drop(&mut self) {
        if let Some(session) = self.session.take() {
            if let Err(e) = session.umount_and_join() {
                eprintln!("umount failed ({e}); detaching lazily");
                let _ = nix::mount::umount2(&self.path, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        if is_mounted(&self.path) {
            // Never let TempDir remove files through a live mount.
            std::mem::forget(self.dir.take());
        }
    }
}

pub type Tree = BTreeMap<String, Option<Vec<u8>>>;

/// Every path below `root`: `None` for directories, the bytes for files. Checks that every
/// file's `st_size` equals what a read returns.
pub fn read_tree(root: &Path) -> Tree {
    fn walk(root: &Path, rel: &str, out: &mut Tree) {
        let mut names: Vec<_> = std::fs::read_dir(root.join(rel))
            .unwrap()
            .map(|e| e.unwrap())
            .collect();
        names.sort_by_key(|e| e.file_name());
        for entry in names {
            let name = entry.file_name().into_string().unwrap();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let meta = std::fs::metadata(entry.path()).unwrap();
            if meta.is_dir() {
                out.insert(path.clone(), None);
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(entry.path()).unwrap();
                assert_eq!(
                    meta.len(),
                    bytes.len() as u64,
                    "{path}: st_size must equal the bytes read"
                );
                out.insert(path, Some(bytes));
            }
        }
    }
    let mut out = Tree::new();
    walk(root, "", &mut out);
    out
}

fn is_json(path: &str) -> bool {
    [".json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"]
        .iter()
        .any(|s| path.ends_with(s))
}

/// The same files (JSON equal as JSON, everything else byte for byte), every fixture directory
/// present. `ignore` lists fixture files that are optional caches the views do not show.
pub fn assert_same_files(view: &Tree, fixture: &Tree, ignore: &[&str], what: &str) {
    let files = |t: &Tree| {
        t.iter()
            .filter(|(k, v)| v.is_some() && !ignore.contains(&k.as_str()))
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(files(view), files(fixture), "{what}: the file lists differ");
    for (path, expected) in fixture {
        match (expected, view.get(path)) {
            (None, got) => assert_eq!(got, Some(&None), "{what}: directory {path} missing"),
            (Some(_), _) if ignore.contains(&path.as_str()) => {}
            (Some(expected), Some(Some(got))) if is_json(path) => {
                let a: serde_json::Value =
                    serde_json::from_slice(got).unwrap_or_else(|e| panic!("{what}: {path}: {e}"));
                let b: serde_json::Value = serde_json::from_slice(expected).unwrap();
                assert_eq!(a, b, "{what}: {path}");
            }
            (Some(expected), Some(Some(got))) => assert!(got == expected, "{what}: {path} differs"),
            (Some(_), other) => panic!("{what}: {path} is {other:?} in the view"),
        }
    }
}

/// A private, writable copy of a fixture directory (fixtures are read-only inputs).
pub fn copy_fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(Path::new(VECTORS).join(name))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let copy = tmp.path().join(name);
    let writable = std::process::Command::new("chmod")
        .arg("-R")
        .arg("u+w")
        .arg(&copy)
        .status()
        .unwrap();
    assert!(writable.success());
    (tmp, copy)
}

/// Pids of live (not zombie) processes whose command line mentions `needle`.
pub fn processes_mentioning(needle: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ");
            !zombie && String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .collect()
}

/// The daf-mount binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_daf-mount");

/// Runs the binary in its background mode on `mnt` (the parent returns once mounted or
/// refused): its exit code, its stderr, and the names at the mount root, sorted, if it mounted
/// (then unmounted).
pub fn run_mount(args: &[&str], mnt: &Path) -> (i32, String, Option<Vec<String>>) {
    let out = std::process::Command::new(BIN)
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap();
    let listed = is_mounted(mnt).then(|| {
        let names = std::fs::read_dir(mnt).map(|entries| {
            let mut names: Vec<String> = entries
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            names
        });
        fusermount_u(mnt);
        names.unwrap()
    });
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr, listed)
}

/// The errors of the changes a read-only file refuses: opening `path` for writing, removing it,
/// renaming it (each an errno, `None` if it was allowed).
pub fn change_refusals(path: &Path) -> [Option<i32>; 3] {
    let errno = |r: std::io::Result<()>| r.err().map(|e| e.raw_os_error().unwrap_or(0));
    [
        errno(std::fs::OpenOptions::new().write(true).open(path).map(drop)),
        errno(std::fs::remove_file(path)),
        errno(std::fs::rename(path, path.with_extension("x"))),
    ]
}

/// Starts `daf-mount ARGS -f --ready-fd 1` and waits (at most 20 s) for its READY line.
pub fn start_foreground(args: &[&str], stderr: std::process::Stdio) -> std::process::Child {
    start_foreground_within(args, stderr, Duration::from_secs(20))
}

/// Starts `daf-mount ARGS -f --ready-fd 1` and waits (at most `limit`) for its READY line; on
/// timeout kills it and fails the test.
pub fn start_foreground_within(
    args: &[&str],
    stderr: std::process::Stdio,
    limit: Duration,
) -> std::process::Child {
    use std::io::BufRead;
    let mut child = std::process::Command::new(BIN)
        .args(args)
        .args(["-f", "--ready-fd", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(limit) {
        Ok(line) => assert_eq!(line, "READY\n"),
        Err(_) => {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no READY line within {limit:?}");
        }
    }
    child
}

/// The resident anonymous memory of process `pid`, in bytes.
pub fn rss_anon(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("RssAnon:"))
        .expect("RssAnon in /proc/PID/status");
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

/// Waits (at most `limit`) for `child` to exit; on timeout kills it, aborts the mount at `mnt`
/// and fails the test.
pub fn wait_exit(
    child: &mut std::process::Child,
    mnt: &Path,
    limit: Duration,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            force_abort(mnt);
            let _ = child.wait();
            panic!("daf-mount did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The entry names of the ZIP archive at `archive` (read by Python's `zipfile`).
pub fn zip_names(archive: &Path) -> Vec<String> {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; print('\\n'.join(zipfile.ZipFile(sys.argv[1]).namelist()))",
        ])
        .arg(archive)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A daemon started by a test and its mount point: unmounted and ended when dropped (also when
/// the test fails).
pub struct Unmount(pub std::process::Child, pub std::path::PathBuf);

impl Unmount {
    /// Unmounts with `fusermount3 -u` (which must succeed) and waits for the daemon to end;
    /// its exit status.
    pub fn unmount(&mut self) -> std::process::ExitStatus {
        assert!(std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(&self.1)
            .status()
            .unwrap()
            .success());
        wait_exit(&mut self.0, &self.1, Duration::from_secs(20))
    }
}

impl Drop for Unmount {
    fn drop(&mut self) {
        if is_mounted(&self.1) {
            let _ = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg(&self.1)
                .status();
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads `path` (of `expected_len` bytes, little-endian `u32`s whose `k`-th is `value(k)`) whole
/// in 4 MiB reads, checking every value and the RssAnon of process `pid` as it goes: the most
/// RssAnon seen.
pub fn read_and_watch(
    path: PathBuf,
    pid: u32,
    expected_len: u64,
    value: impl Fn(u64) -> u32,
) -> u64 {
    use std::io::Read;
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        expected_len,
        "st_size"
    );
    let mut file = std::fs::File::open(&path).unwrap();
    let mut buf = vec![0u8; 4 << 20];
    let (mut at, mut peak) = (0u64, 0u64);
    loop {
        let mut n = file.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        // Whole elements only (a short read may end inside one).
        while n % 4 != 0 {
            let more = file.read(&mut buf[n..n + 4 - n % 4]).unwrap();
            assert!(more > 0, "{} ends inside an element", path.display());
            n += more;
        }
        for (i, word) in buf[..n].chunks_exact(4).enumerate() {
            let k = at / 4 + i as u64;
            let got = u32::from_le_bytes(word.try_into().unwrap());
            assert_eq!(got, value(k), "{} element {k}", path.display());
        }
        at += n as u64;
        peak = peak.max(rss_anon(pid));
    }
    assert_eq!(at, expected_len);
    peak
}

/// Every file and directory of the views of `datasets` under `options` whose kind is `kind` (all
/// kinds: `None`), rendered without a kernel: path → `None` (directory) or the bytes.
pub fn rendered_views(
    datasets: &[daf_mount::formats::source::NamedDataset],
    options: &daf_mount::views::ViewOptions,
    kind: Option<daf_mount::views::ViewKind>,
) -> Tree {
    use daf_mount::views::{view_entries, view_roots, ViewNode};
    let mut out = BTreeMap::new();
    for root in view_roots(datasets, options) {
        if kind.is_some_and(|k| k != root.kind) {
            continue;
        }
        for entry in view_entries(&datasets[root.dataset].dataset, &root) {
            let bytes = match entry.node {
                ViewNode::Dir => None,
                ViewNode::File(blob) => Some(blob.bytes().unwrap().as_slice().to_vec()),
            };
            out.insert(entry.path, bytes);
        }
    }
    out
}

/// 1,000 `pread`s at random offsets (and lengths) of `mounted`, each equal to `copy`'s bytes;
/// opened `O_DIRECT`, so that each one reaches the daemon as it is (not the kernel's cache).
pub fn random_preads(mounted: PathBuf, copy: Vec<u8>) {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&mounted)
        .unwrap();
    let size = copy.len() as u64;
    let mut seed = 0x2545_F491_4F6C_DD1Du64 ^ size;
    for _ in 0..1000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let offset = seed % size;
        let len = 1 + (seed >> 32) % 5000;
        let mut buf = vec![0u8; len as usize];
        let n = file.read_at(&mut buf, offset).unwrap();
        let end = (offset + len).min(size) as usize;
        assert_eq!(
            n,
            end - offset as usize,
            "{} at {offset}",
            mounted.display()
        );
        assert!(
            buf[..n] == copy[offset as usize..end],
            "{} at {offset}+{len}",
            mounted.display()
        );
    }
}
