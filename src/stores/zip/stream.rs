//! A compressed ZIP member (deflate, bzip2, zstd) read by range, decompressed on demand in
//! windows of [`WINDOW`] bytes kept in the mount-wide decode cache
//! ([`crate::stores::decode_cache`]), never whole.
//!
//! Deflate (like bzip2 and zstd streams) cannot be entered in the middle: a window is made by
//! inflating from the start of the member. Each member keeps one open decompressor (its cursor,
//! a few tens of KiB for deflate) where the last pass stopped, so a sequential read goes on
//! where it left off and every window it passes is cached; a read behind the cursor whose window
//! was evicted restarts inflation from the start of the member. Checkpoints (the decompressor
//! state and its 32 KiB dictionary every few MiB) would bound that restart but need the raw
//! inflate state, which `flate2` does not expose: random reads of a member larger than the cache
//! cost up to a full pass each (a sequential reader, the common case, pays nothing).
//!
//! Integrity: every pass starts at the first byte and hashes what it produces; when a pass
//! reaches the declared size it checks that the stream ends there and that the CRC-32 matches
//! the central directory's. A member of at most [`SYNC_CHECK_MAX`] bytes is decompressed to its
//! end (and checked) before its first byte is served; a larger one is served as it is
//! decompressed and checked when a pass first reaches its end (a sequential read of the whole
//! member, or a read of its last window). Once found corrupt (bad CRC, wrong length, a stream
//! that does not decompress) every read of the member fails, and its state shows `Bad` so the
//! kernel's cache of it is dropped. A failure to fetch the compressed bytes (a remote archive)
//! is not remembered: the next read tries again.

use std::io::Read;
use std::sync::{Arc, Mutex, OnceLock};

use crate::stores::blob::{CheckState, RangeSource};
use crate::stores::check::SYNC_CHECK_MAX;
use crate::stores::decode_cache::{self, DecodeCache};
use crate::stores::lock;
use crate::stores::zip::{METHOD_BZIP2, METHOD_DEFLATE, METHOD_ZSTD};
use crate::stores::{Bytes, StoreError};

/// Decoded bytes per cached window.
pub const WINDOW: u64 = 1 << 20;
/// The most bytes one read may ask for (a whole read of a larger member is refused, never
/// allocated).
pub const MAX_READ: u64 = 128 << 20;
/// Compressed bytes fetched at a time from the archive.
const FETCH: u64 = 1 << 20;

/// Gives `len` compressed bytes from `offset` within the member's compressed data.
pub type RawFetch = Arc<dyn Fn(u64, u64) -> Result<Bytes, StoreError> + Send + Sync>;

/// The member's compressed bytes as a `Read`, fetched [`FETCH`] bytes at a time; a fetch error
/// is kept in `error` (the decompressor only sees an I/O error).
struct RawReader {
    fetch: RawFetch,
    packed: u64,
    at: u64,
    buf: Bytes,
    used: usize,
    error: Arc<Mutex<Option<StoreError>>>,
}

impl Read for RawReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.used == self.buf.as_slice().len() {
            if self.at >= self.packed {
                return Ok(0);
            }
            let len = FETCH.min(self.packed - self.at);
            match (self.fetch)(self.at, len) {
                Ok(bytes) if bytes.len() == len => {
                    self.at += len;
                    self.buf = bytes;
                    self.used = 0;
                }
                Ok(_) => return Err(std::io::Error::other("the archive shrank")),
                Err(e) => {
                    let message = e.to_string();
                    *lock(&self.error) = Some(e);
                    return Err(std::io::Error::other(message));
                }
            }
        }
        let rest = &self.buf.as_slice()[self.used..];
        let n = rest.len().min(out.len());
        out[..n].copy_from_slice(&rest[..n]);
        self.used += n;
        Ok(n)
    }
}

/// An open decompressor and how far it got.
struct Cursor {
    reader: Box<dyn Read + Send>,
    pos: u64,
    hasher: crc32fast::Hasher,
    fetch_error: Arc<Mutex<Option<StoreError>>>,
}

/// The ranged source of one compressed member.
pub struct MemberStream {
    what: String,
    method: u16,
    size: u64,
    crc: u32,
    packed: u64,
    fetch: RawFetch,
    cache: &'static DecodeCache,
    owner: u64,
    cursor: Mutex<Option<Cursor>>,
    verified: OnceLock<()>,
    failed: OnceLock<String>,
}

impl Drop for MemberStream {
    fn drop(&mut self) {
        self.cache.forget(self.owner);
    }
}

impl MemberStream {
    /// The member `what` (archive and entry, for errors), compressed with `method` in `packed`
    /// bytes that `fetch` gives, declaring `size` bytes of CRC-32 `crc`.
    pub fn new(
        what: String,
        method: u16,
        (packed, size, crc): (u64, u64, u32),
        fetch: RawFetch,
    ) -> MemberStream {
        MemberStream::in_cache(
            decode_cache::cache(),
            what,
            method,
            (packed, size, crc),
            fetch,
        )
    }

    /// [`MemberStream::new`] keeping its windows in `cache` (tests use a small one).
    pub fn in_cache(
        cache: &'static DecodeCache,
        what: String,
        method: u16,
        (packed, size, crc): (u64, u64, u32),
        fetch: RawFetch,
    ) -> MemberStream {
        MemberStream {
            what,
            method,
            size,
            crc,
            packed,
            fetch,
            cache,
            owner: cache.owner(),
            cursor: Mutex::new(None),
            verified: OnceLock::new(),
            failed: OnceLock::new(),
        }
    }

    fn corrupt(&self, why: String) -> StoreError {
        let message = format!("{}: {why}", self.what);
        if self.failed.set(message.clone()).is_ok() {
            log::error!("{message}");
        }
        StoreError::Produce(self.failed.get().cloned().unwrap_or(message))
    }

    fn open(&self) -> Result<Cursor, StoreError> {
        let fetch_error = Arc::new(Mutex::new(None));
        let raw = RawReader {
            fetch: self.fetch.clone(),
            packed: self.packed,
            at: 0,
            buf: Bytes::empty(),
            used: 0,
            error: fetch_error.clone(),
        };
        let reader: Box<dyn Read + Send> = match self.method {
            METHOD_DEFLATE => Box::new(flate2::read::DeflateDecoder::new(raw)),
            METHOD_BZIP2 => Box::new(bzip2::read::BzDecoder::new(raw)),
            METHOD_ZSTD => Box::new(
                zstd::stream::read::Decoder::new(raw)
                    .map_err(|e| self.corrupt(format!("it does not decompress: {e}")))?,
            ),
            other => return Err(self.corrupt(format!("unsupported compression method {other}"))),
        };
        Ok(Cursor {
            reader,
            pos: 0,
            hasher: crc32fast::Hasher::new(),
            fetch_error,
        })
    }

    /// Reads exactly `n` bytes from the cursor (an error says whether it is in the data).
    fn next_piece(&self, cursor: &mut Cursor, n: usize) -> Result<Vec<u8>, StoreError> {
        let mut piece = vec![0u8; n];
        let mut filled = 0;
        while filled < n {
            match cursor.reader.read(&mut piece[filled..]) {
                Ok(0) => {
                    return Err(self.corrupt(format!(
                        "it decompresses to {} bytes, not the {} it declares",
                        cursor.pos + filled as u64,
                        self.size
                    )))
                }
                Ok(k) => filled += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if let Some(fetch) = lock(&cursor.fetch_error).take() {
                        return Err(fetch);
                    }
                    return Err(self.corrupt(format!("it does not decompress: {e}")));
                }
            }
        }
        Ok(piece)
    }

    /// Checks that the stream ends at the declared size with the declared CRC.
    fn finish(&self, cursor: &mut Cursor) -> Result<(), StoreError> {
        let mut extra = [0u8; 1];
        loop {
            match cursor.reader.read(&mut extra) {
                Ok(0) => break,
                Ok(_) => {
                    return Err(self.corrupt(format!(
                        "it decompresses to more than the {} bytes it declares",
                        self.size
                    )))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    if let Some(fetch) = lock(&cursor.fetch_error).take() {
                        return Err(fetch);
                    }
                    return Err(self.corrupt(format!("it does not decompress: {e}")));
                }
            }
        }
        let hasher = std::mem::take(&mut cursor.hasher);
        if hasher.finalize() != self.crc {
            return Err(self.corrupt("it fails its CRC check".into()));
        }
        let _ = self.verified.set(());
        Ok(())
    }

    /// Decoded window `w`.
    fn window(&self, w: u64) -> Result<Arc<Vec<u8>>, StoreError> {
        if let Some(hit) = self.cache.get(self.owner, w) {
            return Ok(hit);
        }
        let mut slot = lock(&self.cursor);
        if let Some(message) = self.failed.get() {
            return Err(StoreError::Produce(message.clone()));
        }
        if let Some(hit) = self.cache.get(self.owner, w) {
            return Ok(hit);
        }
        let start = w * WINDOW;
        let mut cursor = match slot.take() {
            Some(cursor) if cursor.pos <= start => cursor,
            _ => self.open()?,
        };
        let target = self.size.min((start + WINDOW).max(SYNC_CHECK_MAX));
        let mut wanted = None;
        while cursor.pos < target {
            let n = WINDOW.min(self.size - cursor.pos) as usize;
            // On error the cursor is dropped: the next read starts again.
            let piece = Arc::new(self.next_piece(&mut cursor, n)?);
            cursor.hasher.update(&piece);
            let index = cursor.pos / WINDOW;
            self.cache.insert(self.owner, index, piece.clone());
            if index == w {
                wanted = Some(piece);
            }
            cursor.pos += n as u64;
        }
        if cursor.pos == self.size && self.verified.get().is_none() {
            self.finish(&mut cursor)?;
        } else if cursor.pos < self.size {
            *slot = Some(cursor);
        }
        drop(slot);
        match wanted {
            Some(piece) => Ok(piece),
            // Window `w` was already passed, and cached, by this pass's start: ask again.
            None => self.cache.get(self.owner, w).ok_or_else(|| {
                StoreError::Produce(format!("{}: window {w} was evicted at once", self.what))
            }),
        }
    }
}

impl RangeSource for MemberStream {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        if let Some(message) = self.failed.get() {
            return Err(StoreError::Produce(message.clone()));
        }
        let end = offset.saturating_add(len).min(self.size);
        if end - offset.min(end) > MAX_READ {
            return Err(StoreError::Produce(format!(
                "{}: a read of {len} bytes is more than the {} MiB a compressed member serves at \
                 once",
                self.what,
                MAX_READ >> 20
            )));
        }
        let mut out = Vec::with_capacity((end - offset.min(end)) as usize);
        let mut at = offset;
        while at < end {
            let w = at / WINDOW;
            let window = self.window(w)?;
            let from = (at - w * WINDOW) as usize;
            let to = ((end - w * WINDOW) as usize).min(window.len());
            let piece = window
                .get(from..to)
                .filter(|p| !p.is_empty())
                .ok_or_else(|| {
                    StoreError::Produce(format!("{}: window {w} is short", self.what))
                })?;
            out.extend_from_slice(piece);
            at += piece.len() as u64;
        }
        Ok(Bytes::from_vec(out))
    }

    fn check_state(&self) -> Option<CheckState> {
        Some(if self.failed.get().is_some() {
            CheckState::Bad
        } else if self.verified.get().is_some() {
            CheckState::Verified
        } else if lock(&self.cursor).is_some() {
            CheckState::Running
        } else {
            CheckState::Unverified
        })
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
