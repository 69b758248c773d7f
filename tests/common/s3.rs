//! A real S3-compatible server on 127.0.0.1 for the S3 source tests: moto's server, started by
//! `tests/common/s3_server.py` in the venv `scripts/test` makes (`.venv/s3`, `moto[server]`),
//! with its Signature V4 check on; stopped when dropped. See that file for what it serves.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The Python with moto: `$DAF_S3_PYTHON`, else the repository's `.venv/s3`.
pub fn python() -> Option<PathBuf> {
    let candidate = std::env::var_os("DAF_S3_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/s3/bin/python"));
    let works = Command::new(&candidate)
        .args(["-c", "import moto.server, boto3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    works.then_some(candidate)
}

/// Skips the test (loudly) where moto is not installed, unless FUSE_TESTS_REQUIRED=1 says the
/// tests must run (`scripts/test` makes the venv and sets it).
#[macro_export]
macro_rules! require_s3 {
    () => {
        if common::s3::python().is_none() {
            assert!(
                std::env::var("FUSE_TESTS_REQUIRED").is_err(),
                "moto is required (scripts/test installs it in .venv/s3) but not installed"
            );
            eprintln!("SKIPPED: moto (.venv/s3) not installed");
            return;
        }
    };
}

/// An access key, its secret and a session token.
#[derive(Clone, Debug)]
pub struct Keys {
    pub key: String,
    pub secret: String,
    pub token: Option<String>,
}

impl Keys {
    fn of(value: &serde_json::Value) -> Keys {
        let text = |name: &str| value[name].as_str().map(str::to_string);
        Keys {
            key: text("key").unwrap(),
            secret: text("secret").unwrap(),
            token: text("token"),
        }
    }
}

/// The server: its endpoint, an IAM user's keys, a session's, an expired session's.
pub struct S3Server {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    pub endpoint: String,
    pub user: Keys,
    pub session: Keys,
    pub expired: Keys,
}

fn read_lines(stdout: ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl S3Server {
    /// Starts the server with each of `dirs` uploaded under its own name into the buckets
    /// `private` and `public`.
    pub fn start(dirs: &[&Path]) -> S3Server {
        let python = python().expect("moto is not installed (require_s3! first)");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/common/s3_server.py");
        let mut child = Command::new(python)
            .arg(script)
            .args(dirs)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = read_lines(child.stdout.take().unwrap());
        let Ok(first) = lines.recv_timeout(Duration::from_secs(120)) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the S3 server did not start");
        };
        let config: serde_json::Value = serde_json::from_str(&first).unwrap();
        S3Server {
            endpoint: config["endpoint"].as_str().unwrap().to_string(),
            user: Keys::of(&config["user"]),
            session: Keys::of(&config["session"]),
            expired: Keys::of(&config["expired"]),
            child,
            stdin,
            lines,
        }
    }

    /// From now on the session's token has expired.
    pub fn expire_session(&mut self) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(b"expire\n").unwrap();
        stdin.flush().unwrap();
        let said = self.lines.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(said, "expired");
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
