//! The `daf-mount` program: error cases, background mode, and every way a mount ends.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    is_mounted, processes_mentioning, start_foreground, wait_exit, Unmount, BIN, VECTORS,
};

/// Runs daf-mount to completion and returns (exit code, stderr).
fn run(args: &[&str]) -> (i32, String) {
    let out = Command::new(BIN).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn every_error_is_one_line_naming_the_problem_and_the_path() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let empty_dir = tmp.path().join("plain");
    std::fs::create_dir(&empty_dir).unwrap();
    let future = tmp.path().join("future.daf");
    std::fs::create_dir(&future).unwrap();
    std::fs::write(future.join("daf.json"), "{\"version\":[2,0]}\n").unwrap();
    let future_zarr = tmp.path().join("future.daf.zarr");
    std::fs::create_dir(&future_zarr).unwrap();
    std::fs::write(
        future_zarr.join("zarr.json"),
        r#"{"zarr_format":3,"node_type":"group","attributes":{"daf":[1,3]}}"#,
    )
    .unwrap();
    // A marker that is a FIFO: the walk skips it (a warning it logs), the refusal says why.
    let fifo = tmp.path().join("fifo.daf");
    std::fs::create_dir(&fifo).unwrap();
    let made = Command::new("mkfifo")
        .arg(fifo.join("daf.json"))
        .status()
        .unwrap();
    assert!(made.success());
    let archive = std::fs::read(format!("{VECTORS}/zarr_v2.daf.zarr.zip")).unwrap();
    let truncated = tmp.path().join("cut.daf.zarr.zip");
    std::fs::write(&truncated, &archive[..archive.len() / 2]).unwrap();
    let garbage = tmp.path().join("garbage.daf.zarr.zip");
    std::fs::write(&garbage, b"PK\x03\x04 but nothing else of a ZIP").unwrap();
    let good = format!("{VECTORS}/zarr_v2.daf.zarr.zip");
    let mnt_s = mnt.to_str().unwrap().to_string();
    let missing_mnt = tmp.path().join("no-such-dir");
    let cases: Vec<(Vec<String>, &str, String)> = vec![
        (
            vec!["/nonexistent/pbmc.daf.zarr.zip".into(), mnt_s.clone()],
            "source does not exist",
            "/nonexistent/pbmc.daf.zarr.zip".into(),
        ),
        (
            vec!["/nonexistent/pbmc".into(), mnt_s.clone()],
            "source does not exist",
            "/nonexistent/pbmc".into(),
        ),
        (
            vec![empty_dir.display().to_string(), mnt_s.clone()],
            "not a daf data set",
            empty_dir.display().to_string(),
        ),
        (
            vec![fifo.display().to_string(), mnt_s.clone()],
            "daf.json is not a regular file",
            fifo.display().to_string(),
        ),
        (
            vec![future.display().to_string(), mnt_s.clone()],
            "unsupported FilesDaf version 2.0",
            future.display().to_string(),
        ),
        (
            vec![future_zarr.display().to_string(), mnt_s.clone()],
            "unsupported ZarrDaf version 1.3",
            future_zarr.join("zarr.json").display().to_string(),
        ),
        (
            vec![truncated.display().to_string(), mnt_s.clone()],
            "corrupt ZIP archive",
            truncated.display().to_string(),
        ),
        (
            vec![garbage.display().to_string(), mnt_s.clone()],
            "corrupt ZIP archive",
            garbage.display().to_string(),
        ),
        (
            vec![format!("{good}#/g"), mnt_s.clone()],
            "can't address a sub-daf",
            good.clone(),
        ),
        (
            vec![good.clone(), missing_mnt.display().to_string()],
            "mount point does not exist",
            missing_mnt.display().to_string(),
        ),
        (
            vec![good.clone(), good.clone()],
            "mount point is not a directory",
            good.clone(),
        ),
        (
            vec![
                good.clone(),
                mnt_s.clone(),
                "-o".into(),
                "frobnicate".into(),
            ],
            "unknown mount option",
            "frobnicate".into(),
        ),
    ];
    for (args, problem, path) in cases {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = run(&argv);
        if is_mounted(&mnt) {
            // A source that should have been refused was mounted: do not leave the mount behind.
            let _ = Command::new("fusermount3").arg("-u").arg(&mnt).status();
        }
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert_eq!(
            stderr.lines().count(),
            1,
            "{args:?}: one line expected, got {stderr:?}"
        );
        assert!(
            stderr.starts_with("daf-mount: ") && stderr.contains(problem) && stderr.contains(&path),
            "{args:?}: {stderr}"
        );
        assert!(!is_mounted(&mnt), "{args:?} left a mount");
    }
}

/// A URL source is named in its error as it was given: `s3://b/p/x.daf.zarr`, never with its
/// `//` collapsed (`s3:/b/p/...`), whether its scheme is one daf-mount reads or not.
#[test]
fn a_url_source_is_named_as_given_in_its_error() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mnt_s = mnt.to_str().unwrap();
    // A port nothing listens on: the S3 source fails at once, naming itself.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    for source in ["s3://b/p/x.daf.zarr", "gs://b/p/x.daf.zarr"] {
        let out = Command::new(BIN)
            .args([source, mnt_s, "-f", "-o", "retries=0"])
            .env("AWS_ENDPOINT_URL", &endpoint)
            .env("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
            .env("AWS_SECRET_ACCESS_KEY", "not-a-secret")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        if is_mounted(&mnt) {
            let _ = Command::new("fusermount3").arg("-u").arg(&mnt).status();
        }
        assert_eq!(out.status.code(), Some(1), "{source}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{source}: {stderr:?}");
        assert!(stderr.contains(source), "{source}: {stderr}");
    }
}

#[test]
fn help_and_version() {
    let out = Command::new(BIN).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && help.contains("Examples:") && help.contains("--view"));
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("daf-mount "));
}

/// Starts daf-mount in the foreground on `mnt` and waits until it is mounted.
fn start_foreground_on(source: &str, mnt: &Path) -> Child {
    let child = start_foreground(&[source, mnt.to_str().unwrap()], Stdio::inherit());
    assert!(is_mounted(mnt));
    child
}

fn mountpoint(tmp: &tempfile::TempDir, name: &str) -> PathBuf {
    let mnt = tmp.path().join(name);
    std::fs::create_dir(&mnt).unwrap();
    mnt
}

/// A way to end a running mount.
type Stopper = fn(&mut Child, &Path);

#[test]
fn signals_and_external_unmounts_end_the_daemon_with_status_0() {
    require_fuse!();
    // A copy: a read-write mount locks its source, and the shared fixtures are not ours to lock.
    let (tmp, source) = common::copy_fixture("files_v1_0.daf");
    let source = source.to_str().unwrap().to_string();
    let ways: [(&str, Stopper); 4] = [
        ("SIGTERM", |child, _| {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            )
            .unwrap()
        }),
        ("SIGINT", |child, _| {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGINT,
            )
            .unwrap()
        }),
        ("umount", |_, mnt| {
            assert!(Command::new("umount").arg(mnt).status().unwrap().success())
        }),
        ("fusermount3 -u", |_, mnt| {
            assert!(Command::new("fusermount3")
                .arg("-u")
                .arg(mnt)
                .status()
                .unwrap()
                .success())
        }),
    ];
    for (how, stop) in ways {
        let mnt = mountpoint(&tmp, &how.replace(' ', "_"));
        // Unmounted and ended if an assertion fails on the way.
        let mut guard = Unmount(start_foreground_on(&source, &mnt), mnt.clone());
        assert!(mnt.join("files_v1_0.daf/daf.json").exists());
        stop(&mut guard.0, &mnt);
        let status = wait_exit(&mut guard.0, &mnt, Duration::from_secs(20));
        assert_eq!(status.code(), Some(0), "{how}");
        assert!(!is_mounted(&mnt), "{how} left the mount");
    }
}

#[test]
fn background_mode_returns_once_the_mount_is_usable() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = mountpoint(&tmp, "bg");
    // A copy: a read-write mount locks its source, and the shared fixtures are not ours to lock.
    let archive = tmp.path().join("zarr_v2.daf.zarr.zip");
    std::fs::copy(format!("{VECTORS}/zarr_v2.daf.zarr.zip"), &archive).unwrap();
    let (code, stderr) = run(&[archive.to_str().unwrap(), mnt.to_str().unwrap()]);
    assert_eq!(code, 0, "{stderr}");
    // Usable at once, no polling.
    let cells = std::fs::read_to_string(mnt.join("zarr_v2.daf/axes/cell.txt"));
    let daemons = processes_mentioning(mnt.to_str().unwrap());
    assert!(Command::new("fusermount3")
        .arg("-u")
        .arg(&mnt)
        .status()
        .unwrap()
        .success());
    assert_eq!(cells.unwrap(), "c1\nc2\nc3\n");
    // The detached daemon, and (a writable ZIP source) its tail-writer helper; both end below.
    assert_eq!(
        daemons.len(),
        2,
        "a detached daemon and its ZIP tail writer expected"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while !processes_mentioning(mnt.to_str().unwrap()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "daemon still running after unmount"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn refusals_are_logged_with_the_path_and_the_reason() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("logged.daf.zarr.zip");
    std::fs::copy(format!("{VECTORS}/zarr_v2.daf.zarr.zip"), &archive).unwrap();
    let mnt = mountpoint(&tmp, "logs");
    let mut child = start_foreground(
        &[archive.to_str().unwrap(), mnt.to_str().unwrap()],
        Stdio::piped(),
    );
    let data = mnt.join("logged.daf/vectors/cell/score.data");
    assert_eq!(
        std::fs::remove_file(&data).unwrap_err().raw_os_error(),
        Some(libc::EPERM)
    );
    assert_eq!(
        std::fs::write(mnt.join("logged.daf/notes.txt"), b"x")
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EPERM)
    );
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    let status = wait_exit(&mut child, &mnt, Duration::from_secs(20));
    assert_eq!(status.code(), Some(0));
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    let refusal = |needle: &str| {
        log.lines()
            .find(|l| l.contains("WARN") && l.contains(needle))
            .map(str::to_string)
    };
    let removed = refusal("vectors/cell/score.data")
        .unwrap_or_else(|| panic!("no log line for the refused unlink:\n{log}"));
    assert!(removed.contains("append-only"), "{removed}");
    let placed = refusal("notes.txt")
        .unwrap_or_else(|| panic!("no log line for the refused create:\n{log}"));
    assert!(placed.contains("not a place for Daf data"), "{placed}");
}
