//! HTTP test infrastructure for remote sources and serving: a real nginx on 127.0.0.1 started
//! and stopped by the test ([`Nginx`]), a fault-injecting HTTP/1.1 server in plain std
//! ([`FaultServer`]: `Range`, `HEAD`, `ETag`, `Last-Modified`, keep-alive, scripted faults per
//! path) and a minimal blocking client ([`get`]) to check both from tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

// ------------------------------------------------------------------------------------------------
// nginx
// ------------------------------------------------------------------------------------------------

/// The nginx binary: `$NGINX`, else the distribution's.
pub fn nginx_binary() -> Option<PathBuf> {
    let candidates = std::env::var_os("NGINX")
        .map(PathBuf::from)
        .into_iter()
        .chain(["/usr/sbin/nginx", "/usr/bin/nginx"].map(PathBuf::from));
    candidates.into_iter().find(|p| p.is_file())
}

/// Skips the test (loudly) where nginx is not installed, unless FUSE_TESTS_REQUIRED=1 says the
/// HTTP tests must run (`scripts/test` installs nginx and sets it).
#[macro_export]
macro_rules! require_nginx {
    () => {
        if common::http::nginx_binary().is_none() {
            assert!(
                std::env::var("FUSE_TESTS_REQUIRED").is_err(),
                "nginx is required (scripts/test installs it with apt-get) but not installed"
            );
            eprintln!("SKIPPED: nginx not installed");
            return;
        }
    };
}

/// A free TCP port on 127.0.0.1 (free when asked; the caller binds it at once).
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Waits (at most `limit`) until something accepts connections on 127.0.0.1:`port`.
fn wait_listening(port: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A real nginx serving one directory read-only (GET and HEAD, `Range`, `ETag`) on 127.0.0.1,
/// with its config, pid, logs and temp files in a temp dir; stopped when dropped.
pub struct Nginx {
    child: Child,
    dir: tempfile::TempDir,
    pub port: u16,
}

impl Nginx {
    /// Starts nginx serving `root` (directory listings on: `autoindex`); returns the guard and
    /// the base URL (`http://127.0.0.1:PORT`). Workers run as root when the test does, so they
    /// can read a FUSE mount made without `allow_other`.
    pub fn serve(root: &Path) -> (Nginx, String) {
        Nginx::serve_with(root, true)
    }

    /// [`Nginx::serve`], with directory listings (`autoindex`) on or off (off: a directory URL
    /// is 403, unless the directory holds an `index.html`, which is then served).
    pub fn serve_with(root: &Path, autoindex: bool) -> (Nginx, String) {
        let binary = nginx_binary().expect("nginx is not installed (require_nginx! first)");
        let mut last_error = String::new();
        for _attempt in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("daf-mount-nginx-")
                .tempdir()
                .unwrap();
            let port = free_port();
            let config = nginx_config_with(dir.path(), root, port, autoindex);
            std::fs::write(dir.path().join("nginx.conf"), config).unwrap();
            let error_log = dir.path().join("error.log");
            let mut child = Command::new(&binary)
                .arg("-p")
                .arg(dir.path())
                .arg("-e")
                .arg(&error_log)
                .arg("-c")
                .arg(dir.path().join("nginx.conf"))
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut guard_started = false;
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if child.try_wait().unwrap().is_some() {
                    break;
                }
                if wait_listening(port, Duration::from_millis(100)) {
                    guard_started = true;
                    break;
                }
            }
            if guard_started {
                let url = format!("http://127.0.0.1:{port}");
                return (Nginx { child, dir, port }, url);
            }
            let _ = child.kill();
            let _ = child.wait();
            last_error = std::fs::read_to_string(&error_log).unwrap_or_default();
            if let Some(mut stderr) = child.stderr.take() {
                let _ = stderr.read_to_string(&mut last_error);
            }
        }
        panic!("nginx did not start: {last_error}");
    }

    /// nginx's error log so far (for failure messages).
    pub fn error_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// nginx's access log so far: one line per request (`METHOD URI STATUS BYTES "RANGE"`).
    pub fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // SIGQUIT would wait for open keep-alive connections; SIGKILL of the master alone would
        // orphan its worker, so ask nginx to stop at once (SIGTERM) and wait for it.
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The generated nginx.conf: foreground, every path in `dir`, `root` served read-only.
pub fn nginx_config(dir: &Path, root: &Path, port: u16) -> String {
    nginx_config_with(dir, root, port, true)
}

/// [`nginx_config`] with `autoindex` on or off.
pub fn nginx_config_with(dir: &Path, root: &Path, port: u16, autoindex: bool) -> String {
    let autoindex = if autoindex { "on" } else { "off" };
    let d = dir.display();
    let user = if nix::unistd::geteuid().is_root() {
        "user root root;\n"
    } else {
        ""
    };
    format!(
        "daemon off;\nmaster_process on;\nworker_processes 1;\n{user}pid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\nhttp {{\n\
         \x20 log_format ranges '$request_method $uri $status $body_bytes_sent \"$http_range\" $args';\n\
         \x20 access_log {d}/access.log ranges;\n\
         \x20 client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         \x20 fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         \x20 default_type application/octet-stream;\n  types {{ application/json json; }}\n\
         \x20 sendfile on;\n  keepalive_timeout 30s;\n\
         \x20 server {{\n    listen 127.0.0.1:{port};\n    root {root};\n\
         \x20   location / {{ limit_except GET {{ deny all; }} autoindex {autoindex}; }}\n  }}\n}}\n",
        root = root.display()
    )
}

// ------------------------------------------------------------------------------------------------
// A minimal client
// ------------------------------------------------------------------------------------------------

/// A response: status, headers (names lower-case), body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// One request on a fresh connection (`Connection: close`); `extra` are more header lines.
pub fn request(method: &str, url: &str, extra: &[(&str, &str)]) -> std::io::Result<Response> {
    let rest = url.strip_prefix("http://").expect("http:// URL");
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut stream = TcpStream::connect(host)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = format!("{method} /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    for (k, v) in extra {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    let mut reader = BufReader::new(stream);
    let response = read_response(&mut reader, method == "HEAD")?;
    Ok(response)
}

/// `GET url` with an optional `Range: bytes=…` value.
pub fn get(url: &str, range: Option<&str>) -> Response {
    let extra: Vec<(&str, &str)> = range.map(|r| ("Range", r)).into_iter().collect();
    request("GET", url, &extra).unwrap_or_else(|e| panic!("GET {url}: {e}"))
}

/// Reads one response from `reader` (the body by `Content-Length`, else to the end).
pub fn read_response(reader: &mut impl BufRead, head_only: bool) -> std::io::Result<Response> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = HashMap::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let mut body = Vec::new();
    if !head_only {
        match headers
            .get("content-length")
            .and_then(|v| v.parse::<usize>().ok())
        {
            Some(n) => {
                body.resize(n, 0);
                reader.read_exact(&mut body)?;
            }
            None => {
                reader.read_to_end(&mut body)?;
            }
        }
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

// ------------------------------------------------------------------------------------------------
// The fault-injecting server
// ------------------------------------------------------------------------------------------------

#[allow(unused_imports)]
pub use super::fault_server::{Fault, FaultServer, Logged};

/// An HTTP date (RFC 9110 IMF-fixdate) of `t`.
pub fn http_date(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let weekday = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"][days.rem_euclid(7) as usize];
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{weekday}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        months[(month - 1) as usize],
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
