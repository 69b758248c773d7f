//! A background daemon is never silent: its log goes to `--log-file` (or `-o log_file=`), else to
//! syslog (`/dev/log`, identifier `daf-mount`), and every refusal is one line naming the mount,
//! the file of the property and the reason.

mod common;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{copy_fixture, force_abort, io_timeout, is_mounted, processes_mentioning, BIN};

/// Writes a file through the mount and closes it: the errno of the close (a refusal), if any.
fn write_closed(path: &std::path::Path, bytes: &[u8]) -> Option<i32> {
    use std::io::Write;
    use std::os::fd::IntoRawFd;
    let mut file = std::fs::File::create(path).unwrap();
    file.write_all(bytes).unwrap();
    nix::unistd::close(file.into_raw_fd())
        .err()
        .map(|e| e as i32)
}

const FLOAT32: &[u8] = br#"{"format":"dense","eltype":"Float32"}"#;

/// Mounts in the background (`daf-mount ARGS`, no `-f`): returns once it is mounted.
fn mount_background(args: &[&str]) {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Unmounts `mnt` and waits (at most 10 s) until no daemon serves it any more.
fn unmount_and_wait(mnt: &Path) {
    let done = Command::new("fusermount3")
        .arg("-u")
        .arg(mnt)
        .status()
        .unwrap();
    if !done.success() {
        force_abort(mnt);
    }
    wait_gone(mnt);
}

fn wait_gone(mnt: &Path) {
    let needle = mnt.to_str().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !processes_mentioning(needle).is_empty() {
        if Instant::now() > deadline {
            for pid in processes_mentioning(needle) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            panic!("the daemon of {} did not exit", mnt.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn errno<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

fn mount_point(tmp: &Path) -> PathBuf {
    let mnt = tmp.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::canonicalize(mnt).unwrap()
}

#[test]
fn a_refusal_at_close_is_one_line_of_the_log_file() {
    require_fuse!();
    let (_src, source) = copy_fixture("files_v1_0.daf");
    let tmp = tempfile::tempdir().unwrap();
    let mnt = mount_point(tmp.path());
    let log = tmp.path().join("daf.log");
    let (s, m, l) = (
        source.to_str().unwrap(),
        mnt.to_str().unwrap(),
        log.to_str().unwrap(),
    );
    mount_background(&[s, m, "--log-file", l]);
    let dir = mnt.join("files_v1_0.daf/vectors/cell");
    let closed = io_timeout(&mnt, move || {
        std::fs::write(dir.join("extra.json"), FLOAT32).unwrap();
        write_closed(&dir.join("extra.data"), &[0u8; 8])
    });
    assert_eq!(closed, Some(libc::EINVAL));
    unmount_and_wait(&mnt);
    let text = std::fs::read_to_string(&log).unwrap();
    let about: Vec<&str> = text.lines().filter(|l| l.contains("extra")).collect();
    assert_eq!(
        about.len(),
        1,
        "one line about the refused property:\n{text}"
    );
    let line = about[0];
    for part in [
        &format!("{m}: close of files_v1_0.daf/vectors/cell/extra.data refused (EINVAL): "),
        "vectors/cell/extra: ",
        "8 bytes",
        " WARN ",
    ] {
        assert!(line.contains(part), "{part:?} not in {line:?}");
    }
}

#[test]
fn a_refusal_in_a_zip_goes_to_the_o_log_file() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("zarr_v2.daf.zarr.zip");
    std::fs::copy(format!("{}/zarr_v2.daf.zarr.zip", common::VECTORS), &source).unwrap();
    let mnt = mount_point(tmp.path());
    let log = tmp.path().join("zip.log");
    let option = format!("log_file={}", log.display());
    mount_background(&[
        source.to_str().unwrap(),
        mnt.to_str().unwrap(),
        "-o",
        &option,
    ]);
    let data = mnt.join("zarr_v2.daf/vectors/cell/score.data");
    let removed = io_timeout(&mnt, move || errno(std::fs::remove_file(data)));
    assert_eq!(removed, Some(libc::EPERM));
    unmount_and_wait(&mnt);
    let text = std::fs::read_to_string(&log).unwrap();
    let refused: Vec<&str> = text.lines().filter(|l| l.contains("refused")).collect();
    assert_eq!(refused.len(), 1, "{text}");
    assert!(
        refused[0].contains(&format!(
            "{}: unlink of zarr_v2.daf/vectors/cell/score.data refused (EPERM): ",
            mnt.display()
        )) && refused[0].contains("append-only"),
        "{text}"
    );
}

#[test]
fn a_bad_log_file_is_an_error_before_mounting() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = mount_point(tmp.path());
    let out = Command::new(BIN)
        .args([
            &format!("{}/files_v1_0.daf", common::VECTORS),
            mnt.to_str().unwrap(),
            "--log-file",
            "/nonexistent/dir/daf.log",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/nonexistent/dir/daf.log"), "{err}");
    assert!(!is_mounted(&mnt));
}

/// A refused background mount with `-v` and a log file says one line on stderr, its error, in
/// every combination of `-v` and `-f`: the lines logged before the refusal go to the file only.
#[test]
fn a_refused_mount_with_a_log_file_says_one_line_on_stderr() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = mount_point(tmp.path());
    let plain = tmp.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let log = tmp.path().join("refused.log");
    for extra in [&[][..], &["-v"], &["-vv"], &["-f", "-v"]] {
        let mut args = vec![
            plain.to_str().unwrap(),
            mnt.to_str().unwrap(),
            "-o",
            "ro",
            "--log-file",
            log.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let out = Command::new(BIN).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {err}");
        assert_eq!(
            err.lines().count(),
            1,
            "{extra:?}: one line expected: {err:?}"
        );
        assert!(
            err.starts_with("daf-mount: ") && err.contains("not a daf data set"),
            "{extra:?}: {err}"
        );
        assert!(!is_mounted(&mnt));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("decode cache"),
        "-v lines go to the file: {text}"
    );
}

/// In a private mount namespace whose `/dev` holds `/dev/log` pointing at a socket the test
/// listens on, a background daemon without `--log-file` sends its refusal there.
#[test]
fn without_a_log_file_a_background_daemon_logs_to_syslog() {
    require_fuse!();
    let (_src, source) = copy_fixture("files_v1_0.daf");
    let tmp = tempfile::tempdir().unwrap();
    let mnt = mount_point(tmp.path());
    let socket_path = tmp.path().join("log.sock");
    let listener = UnixDatagram::bind(&socket_path).unwrap();
    listener
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    // Written with cp (one open, one close): a shell redirection's dup2 closes the file once
    // before anything is written, which a commit sees as an empty descriptor.
    let files = tmp.path().join("files");
    std::fs::create_dir(&files).unwrap();
    std::fs::write(files.join("extra.json"), FLOAT32).unwrap();
    std::fs::write(files.join("extra.data"), b"abcdefgh").unwrap();
    let script = r#"
        set -e
        mount -t tmpfs tmpfs /dev
        mknod -m 666 /dev/null c 1 3
        mknod -m 600 /dev/fuse c 10 229
        ln -s "$SOCK" /dev/log
        "$BIN" "$SRC" "$MNT"
        cp "$FILES/extra.json" "$MNT/files_v1_0.daf/vectors/cell/extra.json"
        if cp "$FILES/extra.data" "$MNT/files_v1_0.daf/vectors/cell/extra.data"; then
            echo "the close of a short extra.data succeeded" >&2
            exit 1
        fi
        umount "$MNT"
    "#;
    let run = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env("SOCK", &socket_path)
        .env("BIN", BIN)
        .env("SRC", &source)
        .env("MNT", &mnt)
        .env("FILES", &files)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    if !run.status.success() && stderr.contains("unshare failed") {
        assert!(
            std::env::var("FUSE_TESTS_REQUIRED").is_err(),
            "no private mount namespace: {stderr}"
        );
        eprintln!("SKIPPED: no private mount namespace here ({stderr})");
        return;
    }
    assert!(run.status.success(), "{stderr}");
    assert!(
        !stderr.contains("nothing listens"),
        "a listener was there: {stderr}"
    );
    let mut lines = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buffer = [0u8; 4096];
    while Instant::now() < deadline && !lines.iter().any(|l: &String| l.contains("refused")) {
        if let Ok(n) = listener.recv(&mut buffer) {
            lines.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
        }
    }
    wait_gone(&mnt);
    let refused: Vec<&String> = lines.iter().filter(|l| l.contains("extra")).collect();
    assert_eq!(refused.len(), 1, "{lines:#?}");
    let line = refused[0];
    // <daemon.warning>daf-mount[PID]: MOUNT: ...
    assert!(line.starts_with("<28>daf-mount["), "{line}");
    assert!(
        line.contains(&format!(
            "]: {}: close of files_v1_0.daf/vectors/cell/extra.data refused (EINVAL): \
             vectors/cell/extra: ",
            mnt.display()
        )) && line.contains("8 bytes"),
        "{line}"
    );
    assert!(!line.contains('\n'), "{line}");
}

#[test]
fn in_the_foreground_a_log_file_takes_the_log_instead_of_stderr() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("fg.daf.zarr.zip");
    std::fs::copy(format!("{}/zarr_v2.daf.zarr.zip", common::VECTORS), &source).unwrap();
    let mnt = mount_point(tmp.path());
    let log = tmp.path().join("fg.log");
    let mut child = common::start_foreground(
        &[
            source.to_str().unwrap(),
            mnt.to_str().unwrap(),
            "--log-file",
            log.to_str().unwrap(),
        ],
        std::process::Stdio::piped(),
    );
    let data = mnt.join("fg.daf/vectors/cell/score.data");
    let removed = io_timeout(&mnt, move || errno(std::fs::remove_file(data)));
    assert_eq!(removed, Some(libc::EPERM));
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());
    let status = common::wait_exit(&mut child, &mnt, Duration::from_secs(20));
    assert_eq!(status.code(), Some(0));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(stderr, "", "the log went to the file, not stderr");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("unlink of fg.daf/vectors/cell/score.data refused (EPERM)"),
        "{text}"
    );
}

/// With no syslog listener (a private `/dev` without `log`, as in a container), a background
/// mount logs to a file under the user's state directory (`/var/log/daf-mount/` for root, here
/// a private tmpfs), says where on stderr before it detaches, and still mounts.
#[test]
fn without_a_listener_the_log_goes_to_a_file_the_user_is_told_of() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = mount_point(tmp.path());
    let script = r#"
        set -e
        mount -t tmpfs tmpfs /dev
        mknod -m 666 /dev/null c 1 3
        mknod -m 600 /dev/fuse c 10 229
        mount -t tmpfs tmpfs /var/log
        "$BIN" "$SRC" "$MNT"
        test -f "$MNT/files_v1_0.daf/daf.json"
        rm "$MNT/files_v1_0.daf/daf.json" 2>/dev/null || true
        umount "$MNT"
        sleep 0.5
        cat /var/log/daf-mount/daf-mount.log
    "#;
    let (_copy, source) = common::copy_fixture("files_v1_0.daf");
    let run = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env("BIN", BIN)
        .env("SRC", &source)
        .env("MNT", &mnt)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    let log = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{stderr}");
    wait_gone(&mnt);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.starts_with("daf-mount: nothing listens on /dev/log")
            && stderr.contains("/var/log/daf-mount/daf-mount.log"),
        "{stderr}"
    );
    assert!(
        log.contains("unlink of files_v1_0.daf/daf.json refused"),
        "the refusal is not in the log file: {log}"
    );
}
