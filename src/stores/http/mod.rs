//! The HTTP(S) client of remote sources: one `ureq` agent (rustls, the system's CA store
//! through the platform verifier, redirects, a keep-alive pool, a 256 KiB input buffer), the
//! options a mount gives it (timeouts, retries, headers, bearer token, cache), ranged and whole
//! GETs with bounded retries and backoff, and the request log (one debug line per request, an
//! info summary at most once a second).
//!
//! Release builds leave out `trace` log lines (the `log` crate's `release_max_level_debug`):
//! ureq-proto checks the trace level for every 16 bytes of a body it reads, which cost about a
//! tenth of the daemon's CPU on a large read.
//!
//! Header values (an `Authorization` token included) are never logged; URLs are logged without
//! their query string (where signed URLs keep their secrets).

pub mod cache;
pub mod listing;
pub mod object;
pub mod range_check;
pub mod s3;
pub mod store;
pub mod zip;

use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::StoreError;
use crate::stores::bytes::Pool;
use crate::stores::http::cache::{BlockCache, BLOCK};
use crate::stores::Bytes;

/// Environment variable with extra headers: `NAME:VALUE` pairs separated by newlines.
pub const HEADERS_ENV: &str = "DAF_MOUNT_HTTP_HEADERS";
/// Environment variable with a bearer token.
pub const TOKEN_ENV: &str = "DAF_MOUNT_HTTP_TOKEN";

/// The size a whole GET (a metadata document) is given time for, in MiB.
const WHOLE_GET_MIBS: u64 = 8;

/// Bytes the client reads from a connection at once: large enough that a large read costs few
/// system calls (ureq's default is 128 KiB), small enough that the body is copied out of it while
/// it is still in the CPU's cache (1 MiB measured about 0.1 CPU-second more per GiB).
const INPUT_BUFFER: usize = 256 << 10;

/// The most of an error answer's body read (for an S3 error document).
const ERROR_BODY: u64 = 64 << 10;

/// The most a whole GET (a consolidated metadata document) may bring.
pub const MAX_WHOLE_GET: u64 = 1 << 30;

/// The buffers ranged responses are read into, a block ([`BLOCK`]) each, used again once their
/// blocks are dropped: a sequential read of a large object then fills memory already faulted in.
/// Up to a readahead window's worth are kept.
static BODIES: Pool = Pool::new(32, BLOCK as usize);

/// How remote sources are fetched (the `-o` options of a URL mount).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpOptions {
    /// Extra request headers (`-o header=NAME:VALUE`, then [`HEADERS_ENV`]).
    pub headers: Vec<(String, String)>,
    /// Bearer token (`-o token=`, else [`TOKEN_ENV`]).
    pub token: Option<String>,
    /// Connect timeout, and the time a request has to be answered, plus as much again per MiB
    /// it carries (`-o timeout=SECONDS`).
    pub timeout: Duration,
    /// Retries of a failed request (5xx, dropped connection) (`-o retries=N`).
    pub retries: u32,
    /// On-disk block cache directory (`-o cache=DIR`).
    pub cache_dir: Option<PathBuf>,
    /// Bound of the on-disk cache in bytes (`-o cache_size=N[K|M|G]`).
    pub cache_size: u64,
    /// Bound of the memory cache in bytes.
    pub memory_cache: u64,
    /// The source URL's query string (a pre-signed or SAS URL's credential, without the `?`),
    /// added to every request of the mount; set by `formats::remote::open_remote`, never
    /// logged.
    pub query: Option<String>,
    /// How an `s3://` source is reached and signed (`-o endpoint=`, `region=`, `profile=`,
    /// `addressing=`, `no_sign`).
    pub s3: s3::S3Options,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            headers: Vec::new(),
            token: None,
            timeout: Duration::from_secs(30),
            retries: 3,
            cache_dir: None,
            cache_size: 1 << 30,
            memory_cache: 64 << 20,
            query: None,
            s3: s3::S3Options::default(),
        }
    }
}

impl HttpOptions {
    /// Adds what the environment says ([`HEADERS_ENV`], [`TOKEN_ENV`]) under the options given.
    pub fn with_environment(mut self) -> Result<HttpOptions, String> {
        if let Ok(text) = std::env::var(HEADERS_ENV) {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                self.headers.push(parse_header(line)?);
            }
        }
        if self.token.is_none() {
            self.token = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty());
        }
        Ok(self)
    }
}

/// `NAME:VALUE` as a header (the value is never shown in an error).
pub fn parse_header(text: &str) -> Result<(String, String), String> {
    match text.split_once(':') {
        Some((name, value))
            if !name.trim().is_empty()
                && name
                    .trim()
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b':') =>
        {
            Ok((name.trim().to_string(), value.trim().to_string()))
        }
        _ => Err("a header is NAME:VALUE with a non-empty NAME".into()),
    }
}

/// `url` without its query string and fragment, and without user info: what the log shows.
pub fn redact(url: &str) -> String {
    let cut = url.find(['?', '#']).unwrap_or(url.len());
    let url = &url[..cut];
    match (url.find("://"), url.find('@')) {
        (Some(scheme), Some(at)) if at > scheme && !url[scheme + 3..at].contains('/') => {
            format!("{}://{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_string(),
    }
}

/// `url` with `query` (a source URL's query string) added: after `?`, or after `&` when `url`
/// has a query of its own (a listing request).
pub fn with_query(url: &str, query: Option<&str>) -> String {
    match query.filter(|q| !q.is_empty()) {
        Some(query) if url.contains('?') => format!("{url}&{query}"),
        Some(query) => format!("{url}?{query}"),
        None => url.to_string(),
    }
}

/// `key` (`/`-separated) as a URL path: every byte outside the unreserved set and `/` is
/// percent-encoded.
pub fn escape_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What a response says about the object's version (`ETag`, else `Last-Modified`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validator(pub Option<String>);

/// Failure of one remote object request.
#[derive(Debug)]
pub enum Fetch {
    /// 404 or 410.
    NotFound,
    /// A failure that may pass on retrying (a 5xx answer, a dropped or timed-out connection),
    /// said in one line; what is left of it once the retries are spent.
    Transient(String),
    /// Any other failure, said in one line.
    Failed(String),
}

/// A response: its body, the object's total size (from `Content-Range` or `Content-Length`) and
/// its validator.
pub struct Got<B = Vec<u8>> {
    /// The bytes.
    pub body: B,
    /// The whole object's size.
    pub total: u64,
    /// Its version.
    pub validator: Validator,
}

#[derive(Default)]
struct Stats {
    requests: AtomicU64,
    bytes: AtomicU64,
    micros: AtomicU64,
    last_summary: Mutex<Option<Instant>>,
}

/// The client shared by every remote object of a mount.
pub struct HttpClient {
    agent: ureq::Agent,
    options: HttpOptions,
    stats: Stats,
    /// Fetched blocks, in memory and (optionally) on disk.
    pub cache: BlockCache,
    /// Signs every request (an S3 source with credentials).
    signer: Option<s3::Signer>,
    /// The bucket's URL, for an S3 source (its listings are `ListObjectsV2` there).
    bucket: Option<String>,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HttpClient")
    }
}

impl HttpClient {
    /// A client with these options.
    pub fn new(options: HttpOptions) -> Arc<HttpClient> {
        HttpClient::for_bucket(options, None, None)
    }

    /// A client for the S3 bucket at `bucket` (a URL), whose requests `signer` signs (none:
    /// anonymous).
    pub fn for_bucket(
        options: HttpOptions,
        bucket: Option<String>,
        signer: Option<s3::Signer>,
    ) -> Arc<HttpClient> {
        let tls = ureq::tls::TlsConfig::builder()
            .root_certs(ureq::tls::RootCerts::PlatformVerifier)
            .build();
        let agent = ureq::Agent::config_builder()
            .timeout_connect(Some(options.timeout))
            .http_status_as_error(false)
            .max_redirects(8)
            .redirect_auth_headers(ureq::config::RedirectAuthHeaders::SameHost)
            .max_idle_connections_per_host(32)
            .input_buffer_size(INPUT_BUFFER)
            .user_agent(concat!("daf-mount/", env!("CARGO_PKG_VERSION")))
            .tls_config(tls)
            .build()
            .new_agent();
        let cache = BlockCache::new(
            options.memory_cache,
            options.cache_dir.clone(),
            options.cache_size,
        );
        Arc::new(HttpClient {
            agent,
            options,
            stats: Stats::default(),
            cache,
            signer,
            bucket,
        })
    }

    /// The bucket's URL, for an S3 source.
    pub fn bucket(&self) -> Option<&str> {
        self.bucket.as_deref()
    }

    /// A request (with the mount's headers) that must be done within the timeout, plus the
    /// timeout again per MiB of `len`.
    fn call(
        &self,
        method: &str,
        url: &str,
        len: u64,
        range: Option<&str>,
    ) -> Result<Response, Fetch> {
        let mibs = u32::try_from(len.div_ceil(1 << 20)).unwrap_or(u32::MAX);
        let deadline = self.options.timeout.saturating_mul(mibs.saturating_add(1));
        let url = with_query(url, self.options.query.as_deref());
        let url = url.as_str();
        let mut request = ureq::http::Request::builder().method(method).uri(url);
        for (name, value) in &self.options.headers {
            request = request.header(name, value);
        }
        if let Some(token) = &self.options.token {
            request = request.header("Authorization", format!("Bearer {token}"));
        }
        if let Some(range) = range {
            request = request.header("Range", range);
        }
        let mut request = request
            .body(())
            .map_err(|e| Fetch::Failed(format!("{}: a bad request: {e}", redact(url))))?;
        if let Some(signer) = &self.signer {
            signer
                .sign(&mut request)
                .map_err(|e| Fetch::Failed(format!("{}: {e}", redact(url))))?;
        }
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(Some(deadline))
            .build();
        let response = self.agent.run(request).map_err(|e| transport(url, &e))?;
        let code = response.status().as_u16();
        if code < 400 {
            return Ok(response);
        }
        // An S3-compatible store says why in an error document (a missing bucket, a refused
        // credential): its code and message go into the line.
        let mut body = Vec::new();
        let _ = response
            .into_body()
            .into_reader()
            .take(ERROR_BODY)
            .read_to_end(&mut body);
        let why = s3::error_of(&body);
        let shown = redact(url);
        Err(match (code, why) {
            (404, Some((code, _))) if code == "NoSuchBucket" => Fetch::Failed(format!(
                "{shown}: the bucket does not exist (404 NoSuchBucket)"
            )),
            (404 | 410, _) => Fetch::NotFound,
            (_, Some((s3code, message))) if s3::is_credential_refusal(&s3code) => {
                let whose = match self.signer {
                    Some(_) => "the credentials were refused",
                    None => "anonymous access was refused",
                };
                Fetch::Failed(format!(
                    "{shown}: {whose} (status {code} {s3code}: {message})"
                ))
            }
            (500.., Some((s3code, _))) => {
                Fetch::Transient(format!("{shown}: status {code} {s3code}"))
            }
            (500.., None) => Fetch::Transient(format!("{shown}: status {code}")),
            (_, Some((s3code, message))) => {
                Fetch::Failed(format!("{shown}: status {code} {s3code}: {message}"))
            }
            (_, None) => Fetch::Failed(format!("{shown}: status {code}")),
        })
    }

    /// The whole object at `url`.
    pub fn get(&self, url: &str) -> Result<Got, Fetch> {
        self.get_at_most(url, MAX_WHOLE_GET)
    }

    /// The whole object at `url`, an error when it has more than `max` bytes (a directory
    /// listing is given less room than a consolidated metadata document).
    pub fn get_at_most(&self, url: &str, max: u64) -> Result<Got, Fetch> {
        self.retrying(
            url,
            "",
            || {
                let response = self.call("GET", url, WHOLE_GET_MIBS << 20, None)?;
                let validator = validator_of(&response);
                let mut body = Vec::new();
                response
                    .into_body()
                    .into_reader()
                    .take(max + 1)
                    .read_to_end(&mut body)
                    .map_err(|e| dropped(url, e))?;
                let total = body.len() as u64;
                if total > max {
                    return Err(Fetch::Failed(format!(
                        "{}: more than {} MiB (a metadata document or listing)",
                        redact(url),
                        max >> 20
                    )));
                }
                Ok(Got {
                    body,
                    total,
                    validator,
                })
            },
            |g| g.body.len() as u64,
        )
    }

    /// Bytes `[offset, offset + len)` of the object at `url` (one ranged GET; `len` > 0). A
    /// server that answers with the whole object (no `Range` support) is an error. The body
    /// comes in pieces of [`BLOCK`] bytes from `offset` (the last shorter), each read straight
    /// into a buffer of [`BODIES`].
    pub fn get_range(&self, url: &str, offset: u64, len: u64) -> Result<Got<Vec<Bytes>>, Fetch> {
        let range = format!("bytes={}-{}", offset, offset + len - 1);
        self.retrying(
            url,
            &range,
            || {
                let response = self.call("GET", url, len, Some(&range))?;
                if response.status().as_u16() != 206 {
                    return Err(Fetch::Failed(format!(
                        "{}: the server ignores Range requests (status {} to a ranged GET); \
                     remote sources need a server that supports them",
                        redact(url),
                        response.status().as_u16()
                    )));
                }
                let validator = validator_of(&response);
                // `bytes FIRST-LAST/TOTAL`: exactly the range asked for.
                let total = header(&response, "Content-Range")
                    .and_then(|r| r.trim().strip_prefix("bytes "))
                    .and_then(|r| r.split_once('/'))
                    .filter(|(got, _)| *got == &range["bytes=".len()..])
                    .and_then(|(_, total)| total.trim().parse::<u64>().ok())
                    .ok_or_else(|| {
                        Fetch::Failed(format!(
                            "{}: a 206 without the Content-Range of {range}",
                            redact(url)
                        ))
                    })?;
                // Exactly `len` bytes (fewer: the connection dropped).
                let mut reader = response.into_body().into_reader();
                let mut body = Vec::new();
                let mut left = len;
                while left > 0 {
                    let mut piece = BODIES.take(left.min(BLOCK) as usize);
                    reader
                        .read_exact(piece.as_mut_slice())
                        .map_err(|e| dropped(url, e))?;
                    left -= left.min(BLOCK);
                    body.push(Bytes::from_pooled(piece));
                }
                Ok(Got {
                    body,
                    total,
                    validator,
                })
            },
            |g| g.body.iter().map(Bytes::len).sum(),
        )
    }

    fn retrying<T>(
        &self,
        url: &str,
        what: &str,
        attempt: impl Fn() -> Result<T, Fetch>,
        size: impl Fn(&T) -> u64,
    ) -> Result<T, Fetch> {
        let mut tries = 0;
        loop {
            let started = Instant::now();
            match attempt() {
                Ok(value) => {
                    self.record(url, what, size(&value), started.elapsed());
                    return Ok(value);
                }
                Err(Fetch::Transient(why)) if tries < self.options.retries => {
                    tries += 1;
                    let pause = Duration::from_millis(100u64 << tries.min(6));
                    log::warn!(
                        "{why}; retry {tries} of {} in {pause:?}",
                        self.options.retries
                    );
                    std::thread::sleep(pause);
                }
                Err(failed) => return Err(failed),
            }
        }
    }

    fn record(&self, url: &str, what: &str, bytes: u64, took: Duration) {
        let stats = &self.stats;
        stats.requests.fetch_add(1, Ordering::Relaxed);
        stats.bytes.fetch_add(bytes, Ordering::Relaxed);
        stats
            .micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        log::debug!(
            "fetched {} {what}: {bytes} bytes in {took:?} ({:.1} MiB/s)",
            redact(url),
            bytes as f64 / (1 << 20) as f64 / took.as_secs_f64().max(1e-6)
        );
        let mut last = super::lock(&stats.last_summary);
        let now = Instant::now();
        if last.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
            *last = Some(now);
            let total = stats.bytes.load(Ordering::Relaxed);
            let secs = stats.micros.load(Ordering::Relaxed) as f64 / 1e6;
            log::info!(
                "remote: {} requests, {:.1} MiB fetched, {:.1} MiB/s while fetching",
                stats.requests.load(Ordering::Relaxed),
                total as f64 / (1 << 20) as f64,
                total as f64 / (1 << 20) as f64 / secs.max(1e-6)
            );
        }
    }

    /// `(size, validator)` by HEAD, or by a 1-byte ranged GET where HEAD is refused.
    pub fn stat(&self, url: &str) -> Result<(u64, Validator), Fetch> {
        match self.retrying(url, "HEAD", || self.head_once(url), |_| 0) {
            Ok(found) => Ok(found),
            Err(Fetch::NotFound) => Err(Fetch::NotFound),
            Err(Fetch::Failed(_) | Fetch::Transient(_)) => {
                self.get_range(url, 0, 1).map(|g| (g.total, g.validator))
            }
        }
    }

    fn head_once(&self, url: &str) -> Result<(u64, Validator), Fetch> {
        let response = self.call("HEAD", url, 0, None)?;
        let len = header(&response, "Content-Length")
            .and_then(|n| n.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                Fetch::Failed(format!("{}: HEAD without Content-Length", redact(url)))
            })?;
        Ok((len, validator_of(&response)))
    }
}

type Response = ureq::http::Response<ureq::Body>;

/// A failure to get an answer, in one line: transient (retried), except a certificate the
/// system's CA store does not trust (it will not pass on retrying).
fn transport(url: &str, error: &ureq::Error) -> Fetch {
    let text = error.to_string();
    if text.contains("certificate") {
        Fetch::Failed(format!("{}: TLS error: {text}", redact(url)))
    } else {
        Fetch::Transient(format!("{}: transport error: {text}", redact(url)))
    }
}

fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

fn validator_of(response: &Response) -> Validator {
    Validator(
        header(response, "ETag")
            .or_else(|| header(response, "Last-Modified"))
            .map(str::to_string),
    )
}

/// A body that could not be read whole (retried).
fn dropped(url: &str, e: std::io::Error) -> Fetch {
    Fetch::Transient(format!(
        "{}: transport error reading the body (connection dropped?): {e}",
        redact(url)
    ))
}

impl From<Fetch> for StoreError {
    fn from(fetch: Fetch) -> StoreError {
        match fetch {
            Fetch::NotFound => StoreError::Produce("remote object not found (404)".into()),
            Fetch::Transient(why) | Fetch::Failed(why) => StoreError::Produce(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_never_shows_secrets() {
        assert_eq!(
            redact("https://u:pw@h.org/a/b?X-Sig=secret#f"),
            "https://h.org/a/b"
        );
        assert_eq!(redact("http://h/a@b/c"), "http://h/a@b/c");
        assert_eq!(escape_key("a b/é.x"), "a%20b/%C3%A9.x");
    }

    #[test]
    fn the_source_query_is_added_to_every_url() {
        assert_eq!(with_query("http://h/a", Some("sig=1")), "http://h/a?sig=1");
        assert_eq!(
            with_query("http://h/?list-type=2", Some("sig=1")),
            "http://h/?list-type=2&sig=1"
        );
        assert_eq!(with_query("http://h/a", None), "http://h/a");
    }

    #[test]
    fn headers_parse_and_errors_hide_values() {
        assert_eq!(
            parse_header("X-Key: v:1").unwrap(),
            ("X-Key".to_string(), "v:1".to_string())
        );
        let err = parse_header(": secret").unwrap_err();
        assert!(!err.contains("secret"));
    }
}
