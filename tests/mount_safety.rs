//! Mount safety with real daemons: one writer per data set (whatever path names it), read-only
//! mounts alongside, a killed writer never blocks the next, daf-mount never unmounts what is
//! mounted below its mount point, and a mount point already holding a daf-mount is refused.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    copy_fixture, force_abort, io_timeout, is_mounted, processes_mentioning, start_foreground, BIN,
    VECTORS,
};

/// A daemon started by a test: killed and its mount aborted when dropped (also on panic).
struct Daemon {
    child: Option<Child>,
    mnt: PathBuf,
}

impl Daemon {
    fn start(source: &str, mnt: &Path, extra: &[&str]) -> Daemon {
        let mut args = vec![source, mnt.to_str().unwrap()];
        args.extend_from_slice(extra);
        let child = start_foreground(&args, Stdio::inherit());
        assert!(is_mounted(mnt));
        Daemon {
            child: Some(child),
            mnt: mnt.to_path_buf(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), signal).unwrap();
    }

    /// Waits (at most 20 s) for the daemon to exit; its exit code.
    fn wait(mut self) -> Option<i32> {
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("daf-mount on {} did not exit in time", self.mnt.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then the exit code.
    fn stop(self) -> Option<i32> {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        self.wait()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if is_mounted(&self.mnt) {
                force_abort(&self.mnt);
            }
        }
    }
}

/// A tmpfs or bind mount made by a test, unmounted (lazily) when dropped.
struct OtherMount(PathBuf);

impl OtherMount {
    fn mount(on: &Path) -> OtherMount {
        nix::mount::mount(
            Some("tmpfs"),
            on,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=1m"),
        )
        .unwrap();
        OtherMount(on.to_path_buf())
    }

    /// A bind mount of `what` on `on`.
    fn bind(what: &Path, on: &Path) -> OtherMount {
        nix::mount::mount(
            Some(what),
            on,
            None::<&str>,
            nix::mount::MsFlags::MS_BIND,
            None::<&str>,
        )
        .unwrap();
        OtherMount(on.to_path_buf())
    }
}

impl Drop for OtherMount {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

fn mountpoint(root: &Path, name: &str) -> PathBuf {
    let mnt = root.join(name);
    std::fs::create_dir(&mnt).unwrap();
    mnt
}

/// Detached daemons (by pid) of a background mount: killed and the mount aborted when dropped.
struct Detached(Vec<i32>, PathBuf);

impl Drop for Detached {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        if is_mounted(&self.1) {
            force_abort(&self.1);
        }
    }
}

/// Runs daf-mount to completion (at most 30 s) from `cwd`: (exit code, stderr). On a timeout
/// (a mount that should have been refused is serving), kills it and aborts its mount.
fn run_in(cwd: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .current_dir(cwd)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            if let Some(mnt) = args.get(1).map(Path::new).filter(|m| is_mounted(m)) {
                force_abort(mnt);
            }
            panic!("daf-mount {args:?} did not exit in time");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A second read-write mount of `source` (as `arg`, run from `cwd`) on `mnt` is refused with one
/// line naming the source and the pid of the daemon holding it, and nothing is mounted.
fn assert_writer_refused(cwd: &Path, arg: &str, mnt: &Path, holder: u32) {
    let (code, stderr) = run_in(cwd, &[arg, mnt.to_str().unwrap(), "-f"]);
    assert_eq!(code, Some(1), "{arg}: {stderr}");
    assert_eq!(
        stderr.lines().count(),
        1,
        "{arg}: one line expected: {stderr}"
    );
    assert!(
        stderr.starts_with(&format!("daf-mount: {arg} is already mounted read-write")),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("(pid {holder})")), "{stderr}");
    assert!(!is_mounted(mnt), "{arg}: the refused mount is mounted");
}

/// Writes scalar `name` through the FilesDaf view at `view` and `fsync`s its directory (the
/// durability point).
fn write_scalar(mnt: &Path, view: &str, name: &str, value: i64) {
    let dir = mnt.join(view).join("scalars");
    let name = name.to_string();
    io_timeout(mnt, move || {
        let mut file = std::fs::File::create(dir.join(format!("{name}.json"))).unwrap();
        write!(file, "{{\"value\":{value},\"type\":\"Int64\"}}").unwrap();
        drop(file);
        let handle = std::fs::File::open(&dir).unwrap();
        handle.sync_all().unwrap();
    });
}

fn read(mnt: &Path, rel: &str) -> std::io::Result<String> {
    let path = mnt.join(rel);
    io_timeout(mnt, move || std::fs::read_to_string(path))
}

#[test]
fn a_second_writer_of_a_directory_is_refused_by_every_name_of_it() {
    require_fuse!();
    let (tmp, source) = copy_fixture("files_v1_0.daf");
    let link = tmp.path().join("link.daf");
    std::os::unix::fs::symlink(&source, &link).unwrap();
    let (m1, m2, m3) = (
        mountpoint(tmp.path(), "m1"),
        mountpoint(tmp.path(), "m2"),
        mountpoint(tmp.path(), "m3"),
    );
    let writer = Daemon::start(source.to_str().unwrap(), &m1, &[]);
    assert_writer_refused(tmp.path(), source.to_str().unwrap(), &m2, writer.pid());
    assert_writer_refused(tmp.path(), link.to_str().unwrap(), &m2, writer.pid());
    assert_writer_refused(tmp.path(), "files_v1_0.daf", &m2, writer.pid());
    assert_writer_refused(tmp.path(), "./link.daf/", &m2, writer.pid());
    // A bind mount of the directory elsewhere is the same directory.
    let bound = mountpoint(tmp.path(), "bound.daf");
    let bind = OtherMount::bind(&source, &bound);
    assert_writer_refused(tmp.path(), bound.to_str().unwrap(), &m2, writer.pid());
    drop(bind);
    // A read-only mount alongside is fine.
    let reader = Daemon::start(link.to_str().unwrap(), &m2, &["-o", "ro"]);
    assert_eq!(
        read(&m2, "link.daf/scalars/ratio.json").unwrap(),
        read(&m1, "files_v1_0.daf/scalars/ratio.json").unwrap()
    );
    // The writer still works: it commits, and after both remount the reader sees the data.
    write_scalar(&m1, "files_v1_0.daf", "added", 41);
    assert!(source.join("scalars/added.json").exists());
    assert_eq!(writer.stop(), Some(0));
    assert_eq!(reader.stop(), Some(0));
    let reader = Daemon::start(link.to_str().unwrap(), &m3, &["-o", "ro"]);
    let added = read(&m3, "link.daf/scalars/added.json").unwrap();
    let value: serde_json::Value = serde_json::from_str(&added).unwrap();
    assert_eq!(value["value"], 41);
    assert_eq!(reader.stop(), Some(0));
}

#[test]
fn a_second_writer_of_an_archive_or_of_one_of_its_groups_is_refused() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let (m1, m2, m3) = (
        mountpoint(tmp.path(), "m1"),
        mountpoint(tmp.path(), "m2"),
        mountpoint(tmp.path(), "m3"),
    );
    // A ZarrDaf ZIP: the same archive, by path and through a hard link.
    let archive = tmp.path().join("x.daf.zarr.zip");
    std::fs::copy(format!("{VECTORS}/zarr_v2.daf.zarr.zip"), &archive).unwrap();
    let hard = tmp.path().join("y.daf.zarr.zip");
    std::fs::hard_link(&archive, &hard).unwrap();
    let writer = Daemon::start(archive.to_str().unwrap(), &m1, &[]);
    assert_writer_refused(tmp.path(), archive.to_str().unwrap(), &m2, writer.pid());
    assert_writer_refused(tmp.path(), "y.daf.zarr.zip", &m2, writer.pid());
    let reader = Daemon::start(archive.to_str().unwrap(), &m2, &["-o", "ro"]);
    write_scalar(&m1, "x.daf", "added", 7);
    assert_eq!(writer.stop(), Some(0));
    assert_eq!(reader.stop(), Some(0));
    let reader = Daemon::start(hard.to_str().unwrap(), &m3, &["-o", "ro"]);
    assert!(read(&m3, "y.daf/scalars/added.json")
        .unwrap()
        .contains("\"value\":7"));
    assert_eq!(reader.stop(), Some(0));

    // A multi-data-set archive: one group vs the whole archive, both ways round.
    let multi = tmp.path().join("all.dafs.zip");
    std::fs::copy(format!("{VECTORS}/multi_v1_1.dafs.zip"), &multi).unwrap();
    let group = format!("{}#/g1", multi.display());
    let writer = Daemon::start(&group, &m1, &[]);
    assert_writer_refused(tmp.path(), multi.to_str().unwrap(), &m2, writer.pid());
    assert_eq!(writer.stop(), Some(0));
    let writer = Daemon::start(multi.to_str().unwrap(), &m1, &[]);
    assert_writer_refused(tmp.path(), &group, &m2, writer.pid());
    assert_writer_refused(tmp.path(), "all.dafs.zip#/g1", &m2, writer.pid());
    assert_eq!(writer.stop(), Some(0));
}

#[test]
fn a_killed_writer_never_blocks_the_next_and_a_detached_one_is_named() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("x.daf.zarr.zip");
    std::fs::copy(format!("{VECTORS}/zarr_v2.daf.zarr.zip"), &archive).unwrap();
    let source = archive.to_str().unwrap();
    for round in 0..3 {
        let mnt = mountpoint(tmp.path(), &format!("k{round}"));
        let writer = Daemon::start(source, &mnt, &[]);
        writer.signal(nix::sys::signal::Signal::SIGKILL);
        assert_eq!(writer.wait(), None, "killed by a signal");
        force_abort(&mnt);
        // At once: the next writer gets the lock (waiting, at most, for the tail-writer helper).
    }
    // In the background, the lock is held by the detached daemon, which the refusal names.
    let (bg, other) = (mountpoint(tmp.path(), "bg"), mountpoint(tmp.path(), "o"));
    let (code, stderr) = run_in(tmp.path(), &[source, bg.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    let daemons = processes_mentioning(bg.to_str().unwrap());
    let detached = Detached(daemons.clone(), bg.clone());
    assert_eq!(daemons.len(), 2, "the daemon and its ZIP tail writer");
    let (code, stderr) = run_in(tmp.path(), &[source, other.to_str().unwrap(), "-f"]);
    assert_eq!(code, Some(1), "{stderr}");
    // The daemon is named, not the helper it forked (named apart).
    let program = |pid: &i32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    let (helpers, others): (Vec<i32>, Vec<i32>) = daemons
        .iter()
        .partition(|pid| program(pid).trim_end() == "daf-tail-writer");
    assert_eq!((helpers.len(), others.len()), (1, 1), "{daemons:?}");
    let daemon = others[0];
    assert!(
        stderr.contains(&format!("(pid {daemon})")),
        "{stderr} should name {daemon}"
    );
    drop(detached);
    let next = Daemon::start(source, &other, &[]);
    assert!(read(&other, "x.daf/axes/cell.txt").is_ok());
    assert_eq!(next.stop(), Some(0));
}

/// The ways a mount is ended from outside, or by a signal.
fn end(how: &str, daemon: &Daemon, mnt: &Path) {
    match how {
        "SIGTERM" => daemon.signal(nix::sys::signal::Signal::SIGTERM),
        "SIGHUP" => daemon.signal(nix::sys::signal::Signal::SIGHUP),
        "SIGKILL" => daemon.signal(nix::sys::signal::Signal::SIGKILL),
        external => {
            let mut words = external.split(' ');
            let program = words.next().unwrap();
            let status = Command::new(program).args(words).arg(mnt).status().unwrap();
            assert!(status.success(), "{external}");
        }
    }
}

#[test]
fn ending_a_mount_never_unmounts_what_is_mounted_below_it() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = format!("{VECTORS}/files_v1_0.daf");
    // With auto_unmount the mount goes through fusermount3, which unmounts once the daemon ends.
    let auto = ["-o", "ro,allow_other,auto_unmount"];
    let cases: [(&str, &[&str], Option<i32>); 7] = [
        ("fusermount3 -u", &["-o", "ro"], Some(0)),
        ("umount", &["-o", "ro"], Some(0)),
        ("SIGTERM", &["-o", "ro"], Some(0)),
        ("SIGHUP", &["-o", "ro"], Some(0)),
        ("fusermount3 -u", &auto, Some(0)),
        ("SIGTERM", &auto, Some(0)),
        ("SIGKILL", &auto, None),
    ];
    for (round, (how, options, code)) in cases.into_iter().enumerate() {
        let what = format!("{how} {options:?}");
        let mnt = mountpoint(tmp.path(), &format!("m{round}"));
        let below = OtherMount::mount(&mnt);
        std::fs::write(mnt.join("user-file"), "mine").unwrap();
        let daemon = Daemon::start(&source, &mnt, options);
        assert!(read(&mnt, "files_v1_0.daf/daf.json").is_ok());
        end(how, &daemon, &mnt);
        assert_eq!(daemon.wait(), code, "{what}");
        // Ours goes (auto_unmount: once fusermount3 sees the daemon gone); the tmpfs below
        // stays mounted there, with the user's file.
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::fs::read_dir(&mnt).map_or(true, |d| d.count() != 1) {
            assert!(
                Instant::now() < deadline,
                "{what}: our mount is still there"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(is_mounted(&mnt), "{what}: the tmpfs below was unmounted");
        assert_eq!(
            std::fs::read_to_string(mnt.join("user-file")).unwrap(),
            "mine",
            "{what}"
        );
        drop(below);
        assert!(!is_mounted(&mnt), "{what}: a mount is left");
    }
}

#[test]
fn a_signal_never_unmounts_a_mount_made_on_top_of_ours() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = mountpoint(tmp.path(), "m");
    let daemon = Daemon::start(&format!("{VECTORS}/files_v1_0.daf"), &mnt, &["-o", "ro"]);
    let on_top = OtherMount::mount(&mnt);
    std::fs::write(mnt.join("user-file"), "mine").unwrap();
    daemon.signal(nix::sys::signal::Signal::SIGTERM);
    // Ours is covered: its connection is aborted instead of unmounting the mount point.
    assert_eq!(daemon.wait(), Some(0));
    assert_eq!(
        std::fs::read_to_string(mnt.join("user-file")).unwrap_or_default(),
        "mine",
        "the tmpfs on top was unmounted"
    );
    drop(on_top);
    // What is left is our dead mount (ENOTCONN), which the user unmounts.
    assert!(is_mounted(&mnt));
    assert!(std::fs::read_dir(&mnt).is_err());
    force_abort(&mnt);
    assert!(!is_mounted(&mnt));
}

#[test]
fn a_mount_point_already_holding_a_daf_mount_is_refused() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = mountpoint(tmp.path(), "m");
    let first = Daemon::start(&format!("{VECTORS}/files_v1_0.daf"), &mnt, &["-o", "ro"]);
    let second = format!("{VECTORS}/zarr_v2.daf.zarr");
    for extra in [&["-o", "ro"][..], &[]] {
        let mut args = vec![second.as_str(), mnt.to_str().unwrap(), "-f"];
        args.extend_from_slice(extra);
        let (code, stderr) = run_in(tmp.path(), &args);
        assert_eq!(code, Some(1), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        assert!(
            stderr.starts_with("daf-mount: mount point already holds a daf-mount of ")
                && stderr.contains("files_v1_0.daf")
                && stderr.trim_end().ends_with(mnt.to_str().unwrap()),
            "{stderr}"
        );
    }
    // The first is intact, and the only mount there.
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let here = format!(" {} ", mnt.display());
    assert_eq!(info.lines().filter(|l| l.contains(&here)).count(), 1);
    assert!(read(&mnt, "files_v1_0.daf/daf.json").is_ok());
    assert_eq!(first.stop(), Some(0));
    assert!(!is_mounted(&mnt));
}
