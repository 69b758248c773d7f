//! Where the log goes: stderr in the foreground, syslog (journald) as `daf-mount` for a
//! background daemon, or a file (`--log-file`, `-o log_file=`) in either mode.
//!
//! Levels and `RUST_LOG` work as with `env_logger` (whose filter is used). Every line is one
//! line (newlines inside a message become spaces) and, once the mount point is known, starts
//! with it, so a line in a shared log says which mount it is about. With a log file, lines go only
//! to the file, in either mode (so a refused mount's stderr is its one error line); without one,
//! until a background daemon detaches, lines also go to stderr (the terminal that started it).
//!
//! Syslog is spoken directly: one datagram per line (`<PRI>daf-mount[PID]: MESSAGE`, facility
//! `daemon`) to the `/dev/log` socket, which journald and rsyslog both listen on; the socket is
//! (re)connected when a line is sent, so a listener started later is found. No crate: the format
//! is one `format!`, and the socket is std's.

use std::fs::File;
use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use log::{Level, Log, Metadata, Record};

use super::CliError;

/// The socket syslog daemons and journald listen on.
pub const SYSLOG_SOCKET: &str = "/dev/log";

/// Where the log goes once the daemon runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// stderr (the foreground).
    Stderr,
    /// Appended to this file.
    File(PathBuf),
    /// Syslog, through [`SYSLOG_SOCKET`].
    Syslog,
    /// Appended to this file because nothing listens for syslog (a container): the user is
    /// told where before the daemon detaches ([`tell_where`]).
    Fallback(PathBuf),
}

impl Destination {
    /// The destination for a run: the log file if one is given, else stderr in the foreground,
    /// syslog in the background if it listens (`syslog`), else the [`default_log_file`] of the
    /// user (`root`: `/var/log`; `state_home`: `$XDG_STATE_HOME`, `home`: `$HOME`).
    pub fn choose(
        foreground: bool,
        log_file: Option<&Path>,
        syslog: bool,
        user: (bool, Option<&Path>, Option<&Path>),
    ) -> Destination {
        match (log_file, foreground, syslog) {
            (Some(file), _, _) => Destination::File(file.to_path_buf()),
            (None, true, _) => Destination::Stderr,
            (None, false, true) => Destination::Syslog,
            (None, false, false) => {
                let (root, state_home, home) = user;
                Destination::Fallback(default_log_file(root, state_home, home))
            }
        }
    }
}

/// Where a background daemon with no syslog listener logs: `/var/log/daf-mount/daf-mount.log`
/// for root, else `daf-mount/daf-mount.log` in the user's state directory (`$XDG_STATE_HOME`,
/// by default `$HOME/.local/state`; the working directory's if neither is set).
pub fn default_log_file(root: bool, state_home: Option<&Path>, home: Option<&Path>) -> PathBuf {
    let dir = match (root, state_home, home) {
        (true, _, _) => PathBuf::from("/var/log"),
        (false, Some(state), _) if state.is_absolute() => state.to_path_buf(),
        (false, _, Some(home)) => home.join(".local/state"),
        (false, _, None) => PathBuf::from("."),
    };
    dir.join("daf-mount").join("daf-mount.log")
}

struct Logger {
    filter: env_logger::Logger,
    /// While the source is opened ([`held`]): the lines logged meanwhile (level, target and
    /// message), written once it opened, dropped if the mount is refused (its one line says why).
    held: Mutex<Option<Vec<(Level, String, String)>>>,
    file: Option<Mutex<File>>,
    syslog: Option<Mutex<Option<UnixDatagram>>>,
    /// Lines also go to stderr (foreground, or a background daemon not yet detached).
    stderr: AtomicBool,
    /// The log file chosen because nothing listens for syslog ([`Destination::Fallback`]).
    fallback: Option<PathBuf>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();
static MOUNT: OnceLock<String> = OnceLock::new();

/// Installs the logger: `verbose` (`-v` count) sets the default level, `RUST_LOG` overrides.
/// A log file is opened (appending) now, so a bad path is an error before anything is mounted.
pub fn init(verbose: u8, destination: &Destination) -> Result<(), CliError> {
    let default_level = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default_level))
            // ureq logs request headers at debug (custom ones, tokens included): never shown.
            .filter_module("ureq", log::LevelFilter::Warn)
            // The S3 signer traces canonical requests (a session token included): never shown,
            // should its events ever reach the log.
            .filter_module("aws_sigv4", log::LevelFilter::Warn)
            .filter_module("aws_smithy_runtime_api", log::LevelFilter::Warn)
            .filter_module("aws_credential_types", log::LevelFilter::Warn)
            .build();
    let file = match destination {
        Destination::File(path) | Destination::Fallback(path) => {
            let what = match destination {
                Destination::File(_) => format!("--log-file {}", path.display()),
                _ => format!("the log file {} (no syslog listens)", path.display()),
            };
            if let (Destination::Fallback(_), Some(dir)) = (destination, path.parent()) {
                std::fs::create_dir_all(dir).map_err(|error| CliError::System {
                    what: what.clone(),
                    error,
                })?;
            }
            let opened = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|error| CliError::System { what, error })?;
            Some(Mutex::new(opened))
        }
        _ => None,
    };
    let max = filter.filter();
    let logger = Logger {
        filter,
        file,
        syslog: (*destination == Destination::Syslog).then(|| Mutex::new(None)),
        // A log file the user chose takes every line, from the first.
        stderr: AtomicBool::new(!matches!(destination, Destination::File(_))),
        held: Mutex::new(None),
        fallback: match destination {
            Destination::Fallback(path) => Some(path.clone()),
            _ => None,
        },
    };
    let installed = LOGGER.get_or_init(|| logger);
    if log::set_logger(installed).is_ok() {
        log::set_max_level(max);
    }
    Ok(())
}

/// Whether a syslog listener answers on [`SYSLOG_SOCKET`].
pub fn syslog_listening() -> bool {
    let socket = UnixDatagram::unbound();
    socket.is_ok_and(|s| s.connect(SYSLOG_SOCKET).is_ok())
}

/// Says on stderr, once the mount is made and before the daemon detaches, where its log goes
/// when nothing listens for syslog (it would be lost there).
pub fn tell_where() {
    if let Some(path) = LOGGER.get().and_then(|l| l.fallback.as_ref()) {
        eprintln!(
            "daf-mount: nothing listens on {SYSLOG_SOCKET} (no syslog or journald): the log goes \
             to {} (--log-file FILE chooses another)",
            path.display()
        );
    }
}

/// From now on every line starts with `mount` (the mount point).
pub fn set_mount(mount: &Path) {
    let _ = MOUNT.set(mount.display().to_string());
}

/// Stops copying lines to stderr (a background daemon that detached from its terminal, or a
/// foreground one with a log file), unless stderr is where the log goes.
pub fn stop_stderr() {
    if let Some(logger) = LOGGER.get() {
        let elsewhere = logger.file.is_some() || logger.syslog.is_some();
        logger.stderr.store(!elsewhere, Ordering::Relaxed);
    }
}

/// Runs `open` (the source's opening) with the lines it logs held back: written after it if it
/// succeeds, dropped if it fails (a refused mount prints one line, its error).
pub fn held<T, E>(open: impl FnOnce() -> Result<T, E>) -> Result<T, E> {
    let Some(logger) = LOGGER.get() else {
        return open();
    };
    *lock(&logger.held) = Some(Vec::new());
    let opened = open();
    let lines = lock(&logger.held).take().unwrap_or_default();
    if opened.is_ok() {
        for (level, target, message) in lines {
            logger.log(
                &Record::builder()
                    .level(level)
                    .target(&target)
                    .args(format_args!("{message}"))
                    .build(),
            );
        }
    }
    opened
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The message of `record` on one line, after the mount point when it is known.
fn message(record: &Record) -> String {
    let text = record.args().to_string().replace(['\n', '\r'], " ");
    match MOUNT.get() {
        Some(mount) => format!("{mount}: {text}"),
        None => text,
    }
}

/// `2026-11-23T01:02:03.456Z`: UTC, milliseconds (env_logger's `format_timestamp_millis`).
fn timestamp(now: SystemTime) -> String {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rest = secs % 86_400;
    let (year, month, day) = crate::stores::zip::write::civil_date(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// A line for stderr or a file: `[TIME LEVEL TARGET] MESSAGE`.
fn text_line(record: &Record, now: SystemTime) -> String {
    format!(
        "[{} {:<5} {}] {}\n",
        timestamp(now),
        record.level(),
        record.target(),
        message(record)
    )
}

/// A syslog datagram (RFC 3164 without the optional timestamp: the listener adds its own).
fn syslog_line(record: &Record) -> String {
    const DAEMON: u8 = 3 << 3;
    let severity = match record.level() {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    };
    format!(
        "<{}>daf-mount[{}]: {}",
        DAEMON | severity,
        std::process::id(),
        message(record)
    )
}

impl Logger {
    fn send_syslog(&self, slot: &Mutex<Option<UnixDatagram>>, line: &str) {
        let mut socket = slot.lock().unwrap_or_else(|p| p.into_inner());
        // Two tries: the listener may have restarted since the last line.
        for _ in 0..2 {
            if socket.is_none() {
                *socket = UnixDatagram::unbound()
                    .ok()
                    .filter(|s| s.connect(SYSLOG_SOCKET).is_ok());
            }
            match socket.as_ref().map(|s| s.send(line.as_bytes())) {
                Some(Ok(_)) => return,
                Some(Err(_)) => *socket = None,
                None => return,
            }
        }
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.filter.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if !self.filter.matches(record) {
            return;
        }
        if let Some(held) = lock(&self.held).as_mut() {
            let message = record.args().to_string();
            held.push((record.level(), record.target().to_string(), message));
            return;
        }
        let now = SystemTime::now();
        if self.stderr.load(Ordering::Relaxed) {
            let _ = std::io::stderr().write_all(text_line(record, now).as_bytes());
        }
        if let Some(file) = &self.file {
            let mut file = file.lock().unwrap_or_else(|p| p.into_inner());
            let _ = file.write_all(text_line(record, now).as_bytes());
        }
        if let Some(slot) = &self.syslog {
            self.send_syslog(slot, &syslog_line(record));
        }
    }

    fn flush(&self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_dates() {
        let at = |secs: u64, millis: u64| {
            timestamp(UNIX_EPOCH + std::time::Duration::from_millis(secs * 1000 + millis))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 7), "2000-02-29T00:00:00.007Z");
        assert_eq!(at(1_795_395_723, 456), "2026-11-23T01:02:03.456Z");
    }

    #[test]
    fn destinations_follow_the_mode_the_log_file_and_a_listener() {
        let file = Path::new("/tmp/x.log");
        let user = (false, None, Some(Path::new("/home/u")));
        for syslog in [true, false] {
            assert_eq!(
                Destination::choose(true, None, syslog, user),
                Destination::Stderr
            );
            for foreground in [true, false] {
                assert_eq!(
                    Destination::choose(foreground, Some(file), syslog, user),
                    Destination::File(file.into())
                );
            }
        }
        assert_eq!(
            Destination::choose(false, None, true, user),
            Destination::Syslog
        );
        assert_eq!(
            Destination::choose(false, None, false, user),
            Destination::Fallback("/home/u/.local/state/daf-mount/daf-mount.log".into())
        );
    }

    #[test]
    fn the_fallback_log_is_in_the_users_state_directory() {
        let (home, state) = (Some(Path::new("/home/u")), Some(Path::new("/s")));
        let at = |root, state, home| default_log_file(root, state, home);
        assert_eq!(
            at(true, state, home),
            Path::new("/var/log/daf-mount/daf-mount.log")
        );
        assert_eq!(
            at(false, state, home),
            Path::new("/s/daf-mount/daf-mount.log")
        );
        let relative = Some(Path::new("rel"));
        assert_eq!(
            at(false, relative, home),
            Path::new("/home/u/.local/state/daf-mount/daf-mount.log")
        );
        assert_eq!(
            at(false, None, None),
            Path::new("./daf-mount/daf-mount.log")
        );
    }

    #[test]
    fn syslog_lines_carry_facility_severity_identifier_and_pid() {
        let line = syslog_line(
            &Record::builder()
                .level(Level::Warn)
                .args(format_args!("a\nb"))
                .build(),
        );
        assert_eq!(line, format!("<28>daf-mount[{}]: a b", std::process::id()));
    }
}
