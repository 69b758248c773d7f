//! A fault-injecting HTTP/1.1 server for tests, in plain std (a thread per connection): serves a
//! directory on 127.0.0.1:0 with `GET`/`HEAD`, single `Range`s, `ETag`, `Last-Modified`,
//! `If-Range`/`If-Match`, keep-alive, and per-path scripted [`Fault`]s. Every request is logged
//! ([`FaultServer::log`]) so tests can count what a client fetched. With
//! [`FaultServer::s3_bucket`] it also answers S3 `ListObjectsV2` requests (`super::s3_listing`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::http::http_date;

/// A scripted misbehaviour for one URL path.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// The first `times` responses send their headers and half the body, then close.
    DropMidBody { times: u32 },
    /// The first `times` requests get `503 Service Unavailable`, later ones succeed.
    Unavailable { times: u32 },
    /// The first `times` requests wait `delay` before anything is sent.
    Slow { delay: Duration, times: u32 },
    /// After `after` requests the file has other bytes (same length), a new `ETag` and a later
    /// `Last-Modified` (the file on disk is not touched).
    ChangeAfter { after: u32 },
    /// `Range` is ignored: always `200` with the whole body and no `Accept-Ranges`.
    IgnoreRange,
    /// Always `404 Not Found`, as if the file did not exist.
    NotFound,
}

/// One request as the server saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct Logged {
    pub method: String,
    pub path: String,
    /// The query string (after `?`, as sent; empty when none).
    pub query: String,
    pub range: Option<String>,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    pub status: u16,
}

#[derive(Default)]
struct State {
    faults: HashMap<String, Fault>,
    counts: HashMap<String, u32>,
    log: Vec<Logged>,
    /// `(bucket, page size)`: `GET /BUCKET/?list-type=2…` lists the directory `root/BUCKET`.
    s3: Option<(String, usize)>,
}

/// The server; stops accepting when dropped (open connections end at their next request).
pub struct FaultServer {
    root: PathBuf,
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl FaultServer {
    /// Serves the files below `root` (URL path `/a/b` is `root/a/b`).
    pub fn serve(root: &Path) -> FaultServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st, r) = (state.clone(), stop.clone(), root.to_path_buf());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (s, r, st) = (s.clone(), r.clone(), st.clone());
                std::thread::spawn(move || serve_connection(conn, &r, &s, &st));
            }
        });
        FaultServer {
            root: root.to_path_buf(),
            addr,
            state,
            stop,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Scripts `fault` for URL path `path` (`/dir/file`), replacing any earlier one and
    /// restarting its request count.
    pub fn fault(&self, path: &str, fault: Fault) {
        let mut state = self.state.lock().unwrap();
        state.faults.insert(path.to_string(), fault);
        state.counts.remove(path);
    }

    /// Removes every scripted fault.
    pub fn clear_faults(&self) {
        let mut state = self.state.lock().unwrap();
        state.faults.clear();
        state.counts.clear();
    }

    /// Every request so far, in order.
    pub fn log(&self) -> Vec<Logged> {
        self.state.lock().unwrap().log.clone()
    }

    /// Answers `ListObjectsV2` requests (`GET /BUCKET/?list-type=2&prefix=…&delimiter=/`) for
    /// the directory `root/BUCKET`, at most `page_size` names a page (continuation tokens);
    /// any other listing request gets 404, as a path-style S3 server's host root does.
    pub fn s3_bucket(&self, bucket: &str, page_size: usize) {
        self.state.lock().unwrap().s3 = Some((bucket.to_string(), page_size));
    }

    /// How many requests were made for `path`.
    pub fn requests_for(&self, path: &str) -> usize {
        self.log().iter().filter(|l| l.path == path).count()
    }
}

impl Drop for FaultServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Ok(s) = TcpStream::connect(self.addr) {
            let _ = s.shutdown(Shutdown::Both);
        }
        if let Some(handle) = self.accept.take() {
            let _ = handle.join();
        }
    }
}

struct Request {
    method: String,
    path: String,
    query: String,
    headers: HashMap<String, String>,
    close: bool,
}

fn read_request(reader: &mut impl BufRead) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let target = parts.next()?.to_string();
    let version = parts.next().unwrap_or("HTTP/1.0").to_string();
    let mut headers = HashMap::new();
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let connection = headers
        .get("connection")
        .map(|c| c.to_ascii_lowercase())
        .unwrap_or_default();
    let close = connection == "close" || (version == "HTTP/1.0" && connection != "keep-alive");
    let path = percent_decode(target.split(['?', '#']).next().unwrap_or("/"));
    let query = target
        .split_once('?')
        .map(|(_, q)| q.split('#').next().unwrap_or("").to_string())
        .unwrap_or_default();
    Some(Request {
        method,
        path,
        query,
        headers,
        close,
    })
}

pub fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parses a single `bytes=` range against `len`: `Some(Ok((start, end_exclusive)))`,
/// `Some(Err(()))` when unsatisfiable, `None` when absent or not a single byte range.
fn parse_range(value: &str, len: u64) -> Option<Result<(u64, u64), ()>> {
    let spec = value.trim().strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (a, b) = spec.split_once('-')?;
    let (a, b) = (a.trim(), b.trim());
    let range = if a.is_empty() {
        let n: u64 = b.parse().ok()?;
        if n == 0 {
            return Some(Err(()));
        }
        (len.saturating_sub(n), len)
    } else {
        let start: u64 = a.parse().ok()?;
        let end = if b.is_empty() {
            len
        } else {
            b.parse::<u64>().ok()?.saturating_add(1).min(len)
        };
        if start >= len || end <= start {
            return Some(Err(()));
        }
        (start, end)
    };
    Some(Ok(range))
}

fn serve_connection(conn: TcpStream, root: &Path, state: &Mutex<State>, stop: &AtomicBool) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let _ = conn.set_nodelay(true);
    let Ok(mut writer) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    while !stop.load(Ordering::SeqCst) {
        let Some(req) = read_request(&mut reader) else {
            return;
        };
        match respond(&req, root, state, &mut writer) {
            Ok(true) if !req.close => {}
            _ => {
                let _ = writer.shutdown(Shutdown::Both);
                return;
            }
        }
    }
}

/// Writes the response to `req`; `Ok(false)` when the connection must close.
fn respond(
    req: &Request,
    root: &Path,
    state: &Mutex<State>,
    out: &mut TcpStream,
) -> std::io::Result<bool> {
    let (fault, count) = {
        let mut st = state.lock().unwrap();
        let count = st.counts.entry(req.path.clone()).or_insert(0);
        *count += 1;
        let count = *count;
        (st.faults.get(&req.path).cloned(), count)
    };
    let range_header = req.headers.get("range").cloned();
    let log = |status: u16| {
        state.lock().unwrap().log.push(Logged {
            method: req.method.clone(),
            path: req.path.clone(),
            query: req.query.clone(),
            range: range_header.clone(),
            authorization: req.headers.get("authorization").cloned(),
            status,
        });
    };
    if let Some(Fault::Slow { delay, times }) = &fault {
        if count <= *times {
            std::thread::sleep(*delay);
        }
    }
    let simple = |out: &mut TcpStream, status: u16, reason: &str| -> std::io::Result<bool> {
        log(status);
        write!(
            out,
            "HTTP/1.1 {status} {reason}\r\nContent-Length: 0\r\nContent-Type: text/plain\r\n\r\n"
        )?;
        Ok(true)
    };
    if req.method != "GET" && req.method != "HEAD" {
        return simple(out, 405, "Method Not Allowed");
    }
    match &fault {
        Some(Fault::NotFound) => return simple(out, 404, "Not Found"),
        Some(Fault::Unavailable { times }) if count <= *times => {
            return simple(out, 503, "Service Unavailable")
        }
        _ => {}
    }
    let rel = req.path.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return simple(out, 403, "Forbidden");
    }
    if req.query.split('&').any(|p| p == "list-type=2") {
        let s3 = state.lock().unwrap().s3.clone();
        let answer = match s3 {
            Some((bucket, page)) if rel.trim_end_matches('/') == bucket => {
                super::s3_listing::list_objects_v2(&root.join(&bucket), &req.query, page)
            }
            _ => None,
        };
        let Some(xml) = answer else {
            return simple(out, 404, "Not Found");
        };
        log(200);
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/xml\r\n\r\n",
            xml.len()
        )?;
        out.write_all(xml.as_bytes())?;
        return Ok(true);
    }
    let file = root.join(rel);
    let (Ok(meta), Ok(mut body)) = (std::fs::metadata(&file), std::fs::read(&file)) else {
        return simple(out, 404, "Not Found");
    };
    if !meta.is_file() {
        return simple(out, 404, "Not Found");
    }
    let mut mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let mut etag = format!(
        "\"{:x}-{:x}\"",
        body.len(),
        mtime
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
    );
    if let Some(Fault::ChangeAfter { after }) = &fault {
        if count > *after {
            for b in body.iter_mut() {
                *b ^= 0xA5;
            }
            mtime += Duration::from_secs(3600);
            etag = format!("\"changed-{:x}\"", body.len());
        }
    }
    let len = body.len() as u64;
    let ignore_range = fault == Some(Fault::IgnoreRange);
    if let Some(want) = req.headers.get("if-match") {
        if want != "*" && !want.split(',').any(|t| t.trim() == etag) {
            return simple(out, 412, "Precondition Failed");
        }
    }
    let mut range = if ignore_range {
        None
    } else {
        range_header.as_deref().and_then(|r| parse_range(r, len))
    };
    if let Some(validator) = req.headers.get("if-range") {
        if validator != &etag && validator != &http_date(mtime) {
            range = None;
        }
    }
    let (status, reason, slice, content_range) = match range {
        Some(Err(())) => {
            log(416);
            write!(
                out,
                "HTTP/1.1 416 Range Not Satisfiable\r\nContent-Range: bytes */{len}\r\n\
                 Content-Length: 0\r\n\r\n"
            )?;
            return Ok(true);
        }
        Some(Ok((a, b))) => (
            206,
            "Partial Content",
            &body[a as usize..b as usize],
            Some(format!("bytes {a}-{}/{len}", b - 1)),
        ),
        None => (200, "OK", &body[..], None),
    };
    log(status);
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\
         ETag: {etag}\r\nLast-Modified: {}\r\n",
        slice.len(),
        http_date(mtime)
    );
    if !ignore_range {
        head.push_str("Accept-Ranges: bytes\r\n");
    }
    if let Some(cr) = content_range {
        head.push_str(&format!("Content-Range: {cr}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    if req.method == "HEAD" {
        return Ok(true);
    }
    if let Some(Fault::DropMidBody { times }) = &fault {
        if count <= *times {
            out.write_all(&slice[..slice.len() / 2])?;
            out.flush()?;
            return Ok(false);
        }
    }
    out.write_all(slice)?;
    Ok(true)
}
