//! One remote object (a file behind a URL) as a [`RangeSource`]: a read is served from the block
//! cache, and what is missing is fetched by ranged GETs: a large read in concurrent pieces, a
//! sequential one with readahead (4 MiB, doubling up to 16 MiB while the reads stay sequential). The object's size is known when it is made (predicted from
//! metadata, or from a HEAD) and its version (ETag or Last-Modified) is recorded at first contact:
//! every later response must agree on both, else the read fails (EIO) and one line is logged, so
//! bytes of two versions are never mixed.
//!
//! An object that may be missing (`missing_is_zero`: a Zarr v3 chunk a writer leaves out when it
//! is all fill value 0) reads as zeros on a 404 and is a possibly absent blob ([`Presence`]):
//! whether it exists is learnt from the first response about it, or by one HEAD when asked.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use super::blob::{Blob, Presence, RangeSource};
use super::http::{redact, Fetch, HttpClient, Validator};
use super::http_cache::{BlockKey, BLOCK};
use super::{Bytes, StoreError};

/// Blocks fetched beyond a sequential read: at first, and at most (doubling on each sequential
/// miss, back to the first after a jump).
const READAHEAD_BLOCKS: u64 = 4;
const MAX_READAHEAD_BLOCKS: u64 = 16;
/// Size of one of the concurrent pieces of a large fetch.
const PIECE_BLOCKS: u64 = 4;
/// Most concurrent requests of one read.
const MAX_PARALLEL: usize = 8;

/// A remote object of known size.
pub struct RemoteObject {
    client: Arc<HttpClient>,
    url: String,
    len: u64,
    validator: OnceLock<Validator>,
    /// A 404 reads as zeros (a Zarr v3 chunk left out because it is all fill, and the fill is 0).
    missing_is_zero: bool,
    /// Whether the server has it (known from its first answer about it).
    present: OnceLock<bool>,
    /// Where the last read ended (a read starting there is sequential).
    next: AtomicU64,
    /// Blocks of readahead of the next sequential miss.
    readahead: AtomicU64,
    changed_logged: AtomicBool,
}

impl RemoteObject {
    /// The object at `url`, `len` bytes, with the version `validator` if already known.
    pub fn new(
        client: Arc<HttpClient>,
        url: String,
        len: u64,
        validator: Option<Validator>,
        missing_is_zero: bool,
    ) -> RemoteObject {
        let known = OnceLock::new();
        if let Some(v) = validator {
            let _ = known.set(v);
        }
        RemoteObject {
            client,
            url,
            len,
            validator: known,
            missing_is_zero,
            present: OnceLock::new(),
            next: AtomicU64::new(u64::MAX),
            readahead: AtomicU64::new(READAHEAD_BLOCKS),
            changed_logged: AtomicBool::new(false),
        }
    }

    /// This object as a ranged blob (possibly absent when a 404 reads as zeros).
    pub fn into_blob(self) -> Arc<Blob> {
        let len = self.len;
        if self.missing_is_zero {
            Blob::ranged_maybe_absent(len, Arc::new(self))
        } else {
            Blob::ranged(len, Arc::new(self))
        }
    }

    fn changed(&self, what: &str) -> StoreError {
        if !self.changed_logged.swap(true, Ordering::Relaxed) {
            log::error!(
                "{} changed on the server ({what}); its reads fail with EIO until remounted",
                redact(&self.url)
            );
        }
        StoreError::Produce(format!(
            "{} changed on the server ({what})",
            redact(&self.url)
        ))
    }

    fn cache_key(&self, block: u64) -> Option<BlockKey> {
        let validator = self.validator.get()?.0.as_deref().unwrap_or("");
        Some(BlockKey {
            object: Arc::from(format!("{}\n{}\n{validator}", self.url, self.len)),
            block,
        })
    }

    /// Fetches blocks `[first, last]` (one ranged GET) and caches them.
    fn fetch(&self, first: u64, last: u64) -> Result<Vec<Arc<Vec<u8>>>, StoreError> {
        let start = first * BLOCK;
        let end = ((last + 1) * BLOCK).min(self.len);
        let got = match self.client.get_range(&self.url, start, end - start) {
            Ok(got) => got,
            Err(Fetch::NotFound) if self.missing_is_zero => {
                let _ = self.present.set(false);
                return Ok((first..=last)
                    .map(|b| {
                        Arc::new(vec![
                            0;
                            (((b + 1) * BLOCK).min(self.len) - b * BLOCK) as usize
                        ])
                    })
                    .collect());
            }
            Err(Fetch::NotFound) => {
                return Err(StoreError::Produce(format!(
                    "{}: not found on the server (404)",
                    redact(&self.url)
                )))
            }
            Err(failed) => return Err(failed.into()),
        };
        let _ = self.present.set(true);
        if got.total != self.len {
            return Err(self.changed(&format!("{} bytes, not {}", got.total, self.len)));
        }
        let first_seen = self.validator.get_or_init(|| got.validator.clone());
        if first_seen.0.is_some() && *first_seen != got.validator {
            return Err(self.changed("its ETag/Last-Modified changed"));
        }
        let mut blocks = Vec::new();
        for (n, piece) in got.body.chunks(BLOCK as usize).enumerate() {
            let block = Arc::new(piece.to_vec());
            if let Some(key) = self.cache_key(first + n as u64) {
                self.client.cache.put(&key, block.clone());
            }
            blocks.push(block);
        }
        Ok(blocks)
    }

    /// Fetches blocks `[first, last]` in concurrent pieces.
    fn fetch_parallel(&self, first: u64, last: u64) -> Result<Vec<Arc<Vec<u8>>>, StoreError> {
        let pieces: Vec<(u64, u64)> = (first..=last)
            .step_by(PIECE_BLOCKS as usize)
            .map(|b| (b, (b + PIECE_BLOCKS - 1).min(last)))
            .collect();
        if pieces.len() == 1 {
            return self.fetch(first, last);
        }
        let mut out = Vec::new();
        for group in pieces.chunks(MAX_PARALLEL) {
            let results: Vec<Result<Vec<Arc<Vec<u8>>>, StoreError>> = std::thread::scope(|s| {
                let handles: Vec<_> = group
                    .iter()
                    .map(|&(a, b)| s.spawn(move || self.fetch(a, b)))
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(StoreError::Produce("a fetch thread panicked".into()))
                        })
                    })
                    .collect()
            });
            for result in results {
                out.extend(result?);
            }
        }
        Ok(out)
    }
}

impl Presence for RemoteObject {
    fn known(&self) -> Option<bool> {
        if !self.missing_is_zero {
            return Some(true);
        }
        self.present.get().copied()
    }

    fn resolve(&self) -> Result<bool, StoreError> {
        if let Some(known) = self.known() {
            return Ok(known);
        }
        let present = match self.client.stat(&self.url) {
            Ok((_, validator)) => {
                // The first contact records the version (its size is checked by every read).
                let _ = self.validator.set(validator);
                true
            }
            Err(Fetch::NotFound) => false,
            Err(failed) => return Err(failed.into()),
        };
        Ok(*self.present.get_or_init(|| present))
    }
}

impl RangeSource for RemoteObject {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let end = offset + len;
        let (first, last) = (offset / BLOCK, (end - 1) / BLOCK);
        let mut blocks: Vec<Option<Arc<Vec<u8>>>> = (first..=last)
            .map(|b| self.cache_key(b).and_then(|k| self.client.cache.get(&k)))
            .collect();
        let missing: Vec<u64> = (first..=last)
            .filter(|b| blocks[(b - first) as usize].is_none())
            .collect();
        if let (Some(&lo), Some(&hi)) = (missing.first(), missing.last()) {
            let sequential = self.next.load(Ordering::Relaxed) == offset && offset > 0;
            let blocks_in_object = self.len.div_ceil(BLOCK);
            let hi_fetch = if sequential {
                let ahead = self.readahead.load(Ordering::Relaxed);
                self.readahead
                    .store((ahead * 2).min(MAX_READAHEAD_BLOCKS), Ordering::Relaxed);
                (hi + ahead).min(blocks_in_object - 1)
            } else {
                self.readahead.store(READAHEAD_BLOCKS, Ordering::Relaxed);
                hi
            };
            let fetched = self.fetch_parallel(lo, hi_fetch)?;
            for (n, block) in fetched.into_iter().enumerate() {
                let b = lo + n as u64;
                if b <= last {
                    blocks[(b - first) as usize] = Some(block);
                }
            }
        }
        self.next.store(end, Ordering::Relaxed);
        let mut out = Vec::with_capacity(len as usize);
        for (n, block) in blocks.into_iter().enumerate() {
            let block =
                block.ok_or_else(|| StoreError::Produce("a block was not fetched".into()))?;
            let base = (first + n as u64) * BLOCK;
            let from = offset.saturating_sub(base) as usize;
            let to = ((end - base) as usize).min(block.len());
            out.extend_from_slice(block.get(from..to).ok_or_else(|| {
                StoreError::Produce(format!("{}: a short block", redact(&self.url)))
            })?);
        }
        Ok(Bytes::from_vec(out))
    }
}
