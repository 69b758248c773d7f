//! A tiny HTTP/1.1 file server for the tests (std only, on 127.0.0.1:0): GET and HEAD of the
//! files under a directory, `Range: bytes=A-B` / `bytes=A-`, an `ETag` made from the content,
//! keep-alive, and faults switched on by the test: no Range support, N answers of 503.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub struct Faults {
    /// Answer ranged GETs with the whole file (200), as a server without Range support.
    pub no_range: AtomicBool,
    /// Answer this many next requests with 503.
    pub fail_503: AtomicU32,
    /// Wait this long before answering each request.
    pub delay_ms: std::sync::atomic::AtomicU64,
    /// 503s sent.
    pub sent_503: AtomicU32,
    /// Requests served (any status).
    pub requests: AtomicUsize,
    /// "METHOD /path range" of each request.
    pub log: Mutex<Vec<String>>,
    /// Every `x-…` and `authorization` header received, lower-case name.
    pub headers: Mutex<Vec<String>>,
}

pub struct Server {
    pub base: String,
    pub faults: Arc<Faults>,
    pub root: PathBuf,
}

impl Server {
    /// Serves the files under `root` until the process ends.
    pub fn start(root: &Path) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let faults = Arc::new(Faults::default());
        let (shared, dir) = (faults.clone(), root.to_path_buf());
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (faults, dir) = (shared.clone(), dir.clone());
                std::thread::spawn(move || {
                    let _ = serve(stream, &dir, &faults);
                });
            }
        });
        Server {
            base,
            faults,
            root: root.to_path_buf(),
        }
    }

    pub fn url(&self, rel: &str) -> String {
        format!("{}/{rel}", self.base)
    }

    pub fn headers(&self) -> Vec<String> {
        self.faults.headers.lock().unwrap().clone()
    }

    pub fn requests(&self) -> Vec<String> {
        self.faults.log.lock().unwrap().clone()
    }
}

fn etag(data: &[u8]) -> String {
    let crc = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("\"{crc:016x}-{}\"", data.len())
}

fn serve(stream: TcpStream, root: &Path, faults: &Faults) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or("").to_string(),
            parts.next().unwrap_or("/").to_string(),
        );
        let mut range = None;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header)? == 0 {
                return Ok(());
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let name = name.to_ascii_lowercase();
                if name == "range" {
                    range = Some(value.trim().to_string());
                } else if name.starts_with("x-") || name == "authorization" {
                    faults
                        .headers
                        .lock()
                        .unwrap()
                        .push(format!("{name}: {}", value.trim()));
                }
            }
        }
        let delay = faults.delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            std::thread::sleep(std::time::Duration::from_millis(delay));
        }
        faults.requests.fetch_add(1, Ordering::SeqCst);
        faults.log.lock().unwrap().push(format!(
            "{method} {target} {}",
            range.clone().unwrap_or_default()
        ));
        if faults.fail_503.load(Ordering::SeqCst) > 0 {
            faults.fail_503.fetch_sub(1, Ordering::SeqCst);
            faults.sent_503.fetch_add(1, Ordering::SeqCst);
            out.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")?;
            continue;
        }
        let rel = unescape(target.trim_start_matches('/'));
        let rel = rel.as_str();
        let path = root.join(rel);
        let data = match (rel.contains(".."), std::fs::read(&path)) {
            (false, Ok(data)) => data,
            _ => {
                out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
                continue;
            }
        };
        let tag = etag(&data);
        let len = data.len() as u64;
        let span = range
            .filter(|_| !faults.no_range.load(Ordering::SeqCst))
            .and_then(|r| {
                let (a, b) = r.strip_prefix("bytes=")?.split_once('-')?;
                let a: u64 = a.parse().ok()?;
                let b: u64 = if b.is_empty() {
                    len - 1
                } else {
                    b.parse::<u64>().ok()?.min(len - 1)
                };
                (a <= b).then_some((a, b))
            });
        let (head, body) = match span {
            Some((a, b)) => (
                format!(
                    "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes {a}-{b}/{len}\r\nContent-Length: {}\r\n",
                    b - a + 1
                ),
                &data[a as usize..=b as usize],
            ),
            None => (format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n"), &data[..]),
        };
        out.write_all(format!("{head}ETag: {tag}\r\nAccept-Ranges: bytes\r\n\r\n").as_bytes())?;
        if method != "HEAD" {
            out.write_all(body)?;
        }
    }
}

/// `%XX` escapes decoded.
fn unescape(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (bytes[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
