//! S3 sources (`s3://BUCKET/KEY`) against a real S3-compatible server on 127.0.0.1 (moto, with
//! its Signature V4 check on: `tests/common/s3.rs`): with keys from the environment, a session
//! token, or a profile of `~/.aws`, both views of every kind of source equal a local mount of the
//! same fixture file by file; wrong keys, an expired or wrong session token, a missing bucket and
//! anonymous access to a private bucket are refused at mount with one line; a credential that
//! expires while mounted fails later reads with EIO and one log line; the secret and the session
//! token never appear in the log, even at -vv.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::s3::{Keys, S3Server};
use common::{io_timeout, read_tree, Tree, Unmount, BIN, VECTORS};

/// The server, holding a copy of the fixtures under `v/` and an unconsolidated Zarr v3 data set
/// under `u/v3.daf.zarr` (walked through `ListObjectsV2`).
fn serve() -> (tempfile::TempDir, S3Server) {
    let tmp = tempfile::tempdir().unwrap();
    let copy = |from: &Path, to: &Path| {
        let done = Command::new("cp").arg("-r").arg(from).arg(to).status();
        assert!(done.unwrap().success());
    };
    copy(Path::new(VECTORS), &tmp.path().join("v"));
    std::fs::create_dir(tmp.path().join("u")).unwrap();
    let v3 = tmp.path().join("u/v3.daf.zarr");
    copy(&Path::new(VECTORS).join("zarr_v3.daf.zarr"), &v3);
    let path = v3.join("zarr.json");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let root = doc.as_object_mut().unwrap();
    assert!(root.remove("consolidated_metadata").is_some());
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    let server = S3Server::start(&[&tmp.path().join("v"), &tmp.path().join("u")]);
    (tmp, server)
}

/// How a mount finds its credentials.
enum Credentials<'a> {
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`.
    Environment(&'a Keys),
    /// `AWS_PROFILE=lab` and `~/.aws/credentials` (HOME is a temporary directory).
    Profile(&'a Keys),
    /// None (`-o no_sign`).
    Anonymous,
}

/// `daf-mount SOURCE MNT -f` with the server as endpoint: the mount once READY, or the exit
/// status and stderr if it ended first (at most 30 s: never a hang).
fn mount(
    server: &S3Server,
    source: &str,
    credentials: Credentials,
    extra: &[&str],
) -> Result<(Unmount, tempfile::TempDir), (Option<i32>, String)> {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    let mut command = Command::new(BIN);
    command
        .arg(source)
        .arg(&mnt)
        .args(["-f", "--ready-fd", "1", "-o"])
        .arg(format!("endpoint={},timeout=5,retries=1", server.endpoint))
        .args(extra)
        .env("HOME", &home)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
    ] {
        command.env_remove(name);
    }
    match credentials {
        Credentials::Environment(keys) => {
            command
                .env("AWS_ACCESS_KEY_ID", &keys.key)
                .env("AWS_SECRET_ACCESS_KEY", &keys.secret);
            if let Some(token) = &keys.token {
                command.env("AWS_SESSION_TOKEN", token);
            }
        }
        Credentials::Profile(keys) => {
            let mut text = format!(
                "[default]\naws_access_key_id = NOTTHISONE\naws_secret_access_key = nope\n\n\
                 [lab]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
                keys.key, keys.secret
            );
            if let Some(token) = &keys.token {
                text.push_str(&format!("aws_session_token = {token}\n"));
            }
            std::fs::write(home.join(".aws/credentials"), text).unwrap();
            std::fs::write(
                home.join(".aws/config"),
                "[profile lab]\nregion = us-east-1\n",
            )
            .unwrap();
            command.env("AWS_PROFILE", "lab");
        }
        Credentials::Anonymous => {
            command.args(["-o", "no_sign"]);
        }
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(30));
    if line.as_deref() == Ok("READY\n") {
        // Stderr is not read while mounted: the tests that look at the log use a log file.
        return Ok((Unmount(child, mnt), tmp));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    Err((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn tree(mnt: &Path) -> Tree {
    let root = mnt.to_path_buf();
    io_timeout(mnt, move || read_tree(&root))
}

/// The files of a local read-only mount of `fixture` (by the same binary, same options).
fn local_tree(source: &str) -> Tree {
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let child =
        common::start_foreground(&[source, mnt.to_str().unwrap(), "-o", "ro"], Stdio::null());
    let mut guard = Unmount(child, mnt.clone());
    let files = tree(&mnt);
    assert!(guard.unmount().success());
    files
}

fn assert_same(remote: &Tree, local: &Tree, what: &str) {
    assert!(local.len() > 20, "{what}: {}", local.len());
    assert_eq!(
        remote.keys().collect::<Vec<_>>(),
        local.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (path, content) in local {
        assert_eq!(&remote[path], content, "{what}: {path}");
    }
}

#[test]
fn s3_sources_show_the_same_files_as_local_mounts() {
    require_fuse!();
    require_s3!();
    let (tmp, server) = serve();
    let cases: [(&str, PathBuf, Credentials); 7] = [
        (
            "zarr_v2.daf.zarr",
            Path::new(VECTORS).join("zarr_v2.daf.zarr"),
            Credentials::Environment(&server.user),
        ),
        (
            "zarr_v3.daf.zarr",
            Path::new(VECTORS).join("zarr_v3.daf.zarr"),
            Credentials::Environment(&server.session),
        ),
        (
            "zarr_v3.daf.zarr.zip",
            Path::new(VECTORS).join("zarr_v3.daf.zarr.zip"),
            Credentials::Profile(&server.user),
        ),
        (
            "zarr_v2.daf.zarr.zip",
            Path::new(VECTORS).join("zarr_v2.daf.zarr.zip"),
            Credentials::Profile(&server.session),
        ),
        (
            "zipdaf_v1_1.daf.zip",
            Path::new(VECTORS).join("zipdaf_v1_1.daf.zip"),
            Credentials::Environment(&server.user),
        ),
        (
            "multi_v1_1.dafs.zip#/g1",
            Path::new(VECTORS).join("multi_v1_1.dafs.zip#/g1"),
            Credentials::Environment(&server.user),
        ),
        (
            "../u/v3.daf.zarr",
            tmp.path().join("u/v3.daf.zarr"),
            Credentials::Environment(&server.user),
        ),
    ];
    for (name, local, credentials) in cases {
        let source = match name.strip_prefix("../") {
            Some(other) => format!("s3://private/{other}"),
            None => format!("s3://private/v/{name}"),
        };
        let (mut mounted, _dir) = mount(&server, &source, credentials, &[])
            .unwrap_or_else(|(code, err)| panic!("{source}: {code:?} {err}"));
        let remote = tree(&mounted.1);
        assert!(mounted.unmount().success(), "{source}");
        assert_same(&remote, &local_tree(local.to_str().unwrap()), &source);
    }
}

#[test]
fn anonymous_access_reads_a_public_bucket() {
    require_fuse!();
    require_s3!();
    let (_tmp, server) = serve();
    for name in ["zarr_v3.daf.zarr", "zarr_v2.daf.zarr.zip"] {
        let source = format!("s3://public/v/{name}");
        let (mut mounted, _dir) = mount(&server, &source, Credentials::Anonymous, &[])
            .unwrap_or_else(|(code, err)| panic!("{source}: {code:?} {err}"));
        let remote = tree(&mounted.1);
        assert!(mounted.unmount().success());
        assert_same(&remote, &local_tree(&format!("{VECTORS}/{name}")), &source);
    }
}

#[test]
fn refused_credentials_and_missing_buckets_are_one_line_at_mount() {
    require_fuse!();
    require_s3!();
    let (_tmp, server) = serve();
    let wrong_secret = Keys {
        secret: format!("x{}", server.user.secret),
        ..server.user.clone()
    };
    let wrong_key = Keys {
        key: "AKIAIOSFODNN7EXAMPLE".into(),
        ..server.user.clone()
    };
    let wrong_token = Keys {
        token: server.session.token.as_ref().map(|t| format!("{t}x")),
        ..server.session.clone()
    };
    let zarr = "s3://private/v/zarr_v3.daf.zarr";
    let zip = "s3://private/v/zarr_v2.daf.zarr.zip";
    let cases: [(&str, Credentials, &str); 7] = [
        (
            zarr,
            Credentials::Environment(&wrong_secret),
            "SignatureDoesNotMatch",
        ),
        (
            zip,
            Credentials::Environment(&wrong_secret),
            "SignatureDoesNotMatch",
        ),
        (
            zarr,
            Credentials::Environment(&wrong_key),
            "InvalidAccessKeyId",
        ),
        (
            zip,
            Credentials::Environment(&server.expired),
            "ExpiredToken",
        ),
        (zarr, Credentials::Profile(&wrong_token), "InvalidToken"),
        (zarr, Credentials::Anonymous, "403"),
        (
            "s3://no-such-bucket/v/zarr_v3.daf.zarr",
            Credentials::Environment(&server.user),
            "NoSuchBucket",
        ),
    ];
    for (source, credentials, why) in cases {
        let started = Instant::now();
        let Err((code, stderr)) = mount(&server, source, credentials, &[]) else {
            panic!("{source} ({why}) was mounted");
        };
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{source}: slow"
        );
        assert_eq!(code, Some(1), "{source} ({why}): {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{source} ({why}): {stderr:?}");
        assert!(
            stderr.starts_with("daf-mount: ") && stderr.contains(source) && stderr.contains(why),
            "{source} ({why}): {stderr}"
        );
        for secret in [&server.user.secret, server.session.token.as_ref().unwrap()] {
            assert!(!stderr.contains(secret.as_str()), "{stderr}");
        }
    }
}

#[test]
fn an_expired_session_fails_later_reads_with_eio_and_the_log_keeps_no_secret() {
    require_fuse!();
    require_s3!();
    let (tmp, mut server) = serve();
    let log = tmp.path().join("s3.log");
    let keys = server.session.clone();
    // A directory: each chunk its own object, fetched on its first read.
    let source = "s3://private/v/zarr_v3.daf.zarr";
    let (mut mounted, _dir) = mount(
        &server,
        source,
        Credentials::Environment(&keys),
        &["-vv", "--log-file", log.to_str().unwrap()],
    )
    .unwrap_or_else(|(code, err)| panic!("{source}: {code:?} {err}"));
    let mnt = mounted.1.clone();
    let first = mnt.join("zarr_v3.daf/vectors/cell/score.data");
    let read = io_timeout(&mnt, move || std::fs::read(first).map(|b| b.len()));
    assert!(read.unwrap() > 0);
    server.expire_session();
    let later = mnt.join("zarr_v3.daf/matrices/cell/gene/expr.data");
    let started = Instant::now();
    let failed = io_timeout(&mnt, move || {
        std::fs::read(later).map_err(|e| e.raw_os_error())
    });
    assert_eq!(failed.unwrap_err(), Some(libc::EIO));
    assert!(started.elapsed() < Duration::from_secs(20), "never a hang");
    assert!(mounted.unmount().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.lines()
            .any(|l| l.contains("ERROR") && l.contains("ExpiredToken")),
        "a log line says why: {text}"
    );
    assert!(text.contains("fetched"), "-vv logs every request: {text}");
    for secret in [&keys.secret, keys.token.as_ref().unwrap()] {
        assert!(!text.contains(secret.as_str()), "a secret in the log");
    }
}
