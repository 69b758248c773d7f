//! One remote object (a file behind a URL) as a [`RangeSource`]: a read is served from the block
//! cache, and what is missing is fetched by ranged GETs, a large read in concurrent pieces.
//!
//! Sequential reads are fetched **ahead in the background**: while the reader is served, the next
//! window (4 MiB, doubling up to 32 MiB while the reads stay sequential) is already on its way, so
//! the network and the kernel's copying overlap instead of taking turns. A block being fetched is
//! claimed (`inflight`), so a reader that needs it waits for that fetch instead of asking again.
//! A response body is read block by block into reused buffers, and a read inside one block is a
//! slice of it: no copy between the body and the kernel.
//!
//! The object's size is known when it is made (predicted from metadata, or from a HEAD) and its
//! version (ETag or Last-Modified) is recorded at first contact: every later response must agree
//! on both, else the read fails (EIO) and one line is logged, so bytes of two versions are never
//! mixed. A failed fetch fails the reads that wait for it (EIO) and nothing else: the next read
//! asks again.
//!
//! An object that may be missing (`missing_is_zero`: a Zarr v3 chunk a writer leaves out when it
//! is all fill value 0) reads as zeros on a 404 and is a possibly absent blob ([`Presence`]):
//! whether it exists is learnt from the first response about it, or by one HEAD when asked.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};

use crate::stores::blob::{Blob, Presence, RangeSource};
use crate::stores::http::cache::{BlockKey, BLOCK};
use crate::stores::http::{redact, Fetch, HttpClient, Validator};
use crate::stores::lock;
use crate::stores::{Bytes, StoreError};

/// Blocks fetched ahead of a sequential reader: at first, and at most (doubling while the reads
/// stay sequential, back to the first after a jump).
const READAHEAD_BLOCKS: u64 = 4;
const MAX_READAHEAD_BLOCKS: u64 = 32;
/// Blocks a sequential reader leaves behind it in memory (the kernel's concurrent reads may come a
/// little out of order); the ones before are dropped: the kernel's page cache holds them.
const KEPT_BEHIND: u64 = 2;
/// Size of one of the concurrent pieces of a large fetch.
const PIECE_BLOCKS: u64 = 4;
/// Most concurrent requests of one read.
const MAX_PARALLEL: usize = 8;
/// Threads fetching small objects ahead of the reader ([`RangeSource::prefetch`]): requests in
/// flight at once, over the keep-alive pool.
const PREFETCHERS: usize = 16;
/// Most small objects waiting to be prefetched (more hints are dropped).
const PREFETCH_QUEUE: usize = 4096;

/// The mount-wide queue of prefetches and its threads (started on first use).
struct Prefetcher {
    /// The claims waiting for a prefetch thread, oldest first. Locked to push, to pop, and to
    /// take out the claim a reader needs at once; never held while fetching.
    queue: Mutex<std::collections::VecDeque<Claim>>,
    ready: Condvar,
}

static PREFETCHER: OnceLock<Prefetcher> = OnceLock::new();

impl Prefetcher {
    fn get() -> &'static Prefetcher {
        static STARTED: std::sync::Once = std::sync::Once::new();
        let prefetcher = PREFETCHER.get_or_init(|| Prefetcher {
            queue: Mutex::new(std::collections::VecDeque::new()),
            ready: Condvar::new(),
        });
        STARTED.call_once(|| {
            for n in 0..PREFETCHERS {
                let spawned = std::thread::Builder::new()
                    .name(format!("daf-prefetch-{n}"))
                    .spawn(|| Prefetcher::get().run());
                if let Err(e) = spawned {
                    log::warn!("no prefetch thread: {e}");
                }
            }
        });
        prefetcher
    }

    /// The queued prefetch of `object` (a small object: one block), taken out of the queue: a
    /// reader that needs it fetches it at once instead of waiting behind the hints queued before
    /// it (up to [`PREFETCH_QUEUE`] of them).
    fn take(object: &RemoteObject) -> Option<Claim> {
        let mut queue = lock(&PREFETCHER.get()?.queue);
        let at = queue
            .iter()
            .position(|c| std::ptr::eq(Arc::as_ptr(&c.object), object))?;
        queue.remove(at)
    }

    fn run(&self) {
        loop {
            let claim = {
                let mut queue = lock(&self.queue);
                loop {
                    if let Some(claim) = queue.pop_front() {
                        break claim;
                    }
                    queue = self
                        .ready
                        .wait(queue)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
            };
            claim.fetch();
        }
    }
}

/// A block some thread is fetching: the others that need it wait here.
#[derive(Default)]
struct Pending {
    result: Mutex<Option<Result<Bytes, String>>>,
    ready: Condvar,
}

impl Pending {
    fn set(&self, result: Result<Bytes, String>) {
        *lock(&self.result) = Some(result);
        self.ready.notify_all();
    }

    fn wait(&self) -> Result<Bytes, StoreError> {
        let mut result = lock(&self.result);
        loop {
            if let Some(done) = result.as_ref() {
                return done.clone().map_err(StoreError::Produce);
            }
            result = self
                .ready
                .wait(result)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }
}

/// The blocks `[first, last]` one thread has claimed; when dropped unfinished (a panic), the
/// waiters get an error instead of waiting for ever.
struct Claim {
    object: Arc<RemoteObject>,
    first: u64,
    slots: Vec<Arc<Pending>>,
}

impl Claim {
    /// Hands the fetched blocks (or the failure) to the waiters and releases the claim.
    fn finish(mut self, result: Result<Vec<Bytes>, StoreError>) {
        self.release(result.map_err(|e| e.to_string()));
    }

    fn release(&mut self, result: Result<Vec<Bytes>, String>) {
        let slots = std::mem::take(&mut self.slots);
        let mut inflight = lock(&self.object.inflight);
        for (n, slot) in slots.iter().enumerate() {
            inflight.remove(&(self.first + n as u64));
            slot.set(match &result {
                Ok(blocks) => blocks
                    .get(n)
                    .cloned()
                    .ok_or_else(|| "a block was not fetched".to_string()),
                Err(why) => Err(why.clone()),
            });
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.slots.is_empty() {
            self.release(Err("a fetch did not finish".into()));
        }
    }
}

/// A remote object of known size.
pub struct RemoteObject {
    client: Arc<HttpClient>,
    url: String,
    len: u64,
    validator: OnceLock<Validator>,
    /// A 404 reads as zeros (a Zarr v3 chunk left out because it is all fill, and the fill is 0).
    missing_is_zero: bool,
    /// Itself, for the background fetches it starts.
    me: Weak<RemoteObject>,
    /// Whether the server has it (known from its first answer about it).
    present: OnceLock<bool>,
    /// Where the last read ended (a read starting about there is sequential).
    next: AtomicU64,
    /// Blocks of the readahead window.
    readahead: AtomicU64,
    /// The last block claimed for readahead.
    frontier: AtomicU64,
    /// Blocks before this one were dropped from memory behind a sequential reader.
    retired: AtomicU64,
    /// Blocks being fetched, with their waiters.
    inflight: Mutex<HashMap<u64, Arc<Pending>>>,
    changed_logged: AtomicBool,
    /// Whether its version was asked for (a HEAD) so that the disk cache can serve it.
    asked: AtomicBool,
}

impl RemoteObject {
    /// The object at `url`, `len` bytes, with the version `validator` if already known.
    pub fn new(
        client: Arc<HttpClient>,
        url: String,
        len: u64,
        validator: Option<Validator>,
        missing_is_zero: bool,
    ) -> Arc<RemoteObject> {
        let known = OnceLock::new();
        if let Some(v) = validator {
            let _ = known.set(v);
        }
        Arc::new_cyclic(|me| RemoteObject {
            client,
            url,
            len,
            validator: known,
            missing_is_zero,
            me: me.clone(),
            present: OnceLock::new(),
            next: AtomicU64::new(u64::MAX),
            readahead: AtomicU64::new(READAHEAD_BLOCKS),
            frontier: AtomicU64::new(0),
            retired: AtomicU64::new(0),
            inflight: Mutex::new(HashMap::new()),
            changed_logged: AtomicBool::new(false),
            asked: AtomicBool::new(false),
        })
    }

    /// This object as a ranged blob (possibly absent when a 404 reads as zeros).
    pub fn into_blob(self: Arc<Self>) -> Arc<Blob> {
        let len = self.len;
        if self.missing_is_zero {
            Blob::ranged_maybe_absent(len, self)
        } else {
            Blob::ranged(len, self)
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

    fn cached(&self, block: u64) -> Option<Bytes> {
        self.cache_key(block)
            .and_then(|k| self.client.cache.get(&k))
    }

    /// An object of several blocks whose version is not known yet (its size came from the
    /// metadata) may have blocks in the disk cache from an earlier mount, keyed by that version:
    /// one HEAD learns it (and checks the size), once. A failed HEAD is left to the GET to
    /// report.
    fn learn_version(&self) -> Result<(), StoreError> {
        if self.validator.get().is_some()
            || self.len <= BLOCK
            || !self.client.cache.has_disk()
            || self.asked.swap(true, Ordering::Relaxed)
        {
            return Ok(());
        }
        if let Ok((len, validator)) = self.client.stat(&self.url) {
            if len != self.len {
                return Err(self.changed(&format!("{len} bytes, not {}", self.len)));
            }
            let _ = self.present.set(true);
            let _ = self.validator.set(validator);
        }
        Ok(())
    }

    fn block_len(&self, block: u64) -> u64 {
        ((block + 1) * BLOCK).min(self.len) - block * BLOCK
    }

    /// Fetches blocks `[first, last]` (one ranged GET) and caches them.
    fn fetch(&self, first: u64, last: u64) -> Result<Vec<Bytes>, StoreError> {
        let start = first * BLOCK;
        let end = ((last + 1) * BLOCK).min(self.len);
        let got = match self.client.get_range(&self.url, start, end - start) {
            Ok(got) => got,
            Err(Fetch::NotFound) if self.missing_is_zero => {
                let _ = self.present.set(false);
                return Ok((first..=last)
                    .map(|b| Bytes::from_vec(vec![0; self.block_len(b) as usize]))
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
        // The body came in blocks (the range starts at a block's start): each is kept as read.
        let blocks = got.body;
        let whole = blocks.len() as u64 == last - first + 1
            && (first..=last)
                .zip(&blocks)
                .all(|(b, block)| block.len() == self.block_len(b));
        if !whole {
            return Err(StoreError::Produce(format!(
                "{}: a short response",
                redact(&self.url)
            )));
        }
        for (b, block) in (first..).zip(&blocks) {
            if let Some(key) = self.cache_key(b) {
                self.client.cache.put(&key, block.clone());
            }
        }
        Ok(blocks)
    }

    /// Fetches the claimed blocks in concurrent pieces, handing each piece to its waiters as
    /// soon as it arrives.
    fn fetch_claims(mut claims: Vec<Claim>) {
        if claims.len() == 1 {
            if let Some(claim) = claims.pop() {
                claim.fetch();
            }
            return;
        }
        while !claims.is_empty() {
            let group: Vec<Claim> = claims.drain(..claims.len().min(MAX_PARALLEL)).collect();
            std::thread::scope(|s| {
                for claim in group {
                    s.spawn(move || claim.fetch());
                }
            });
        }
    }

    /// Claims the blocks of `blocks` that nobody fetches yet, in pieces of contiguous blocks;
    /// returns the claims and the pending fetches of the others.
    fn claim(
        self: &Arc<Self>,
        blocks: impl Iterator<Item = u64>,
    ) -> (Vec<Claim>, HashMap<u64, Arc<Pending>>) {
        let mut claims: Vec<Claim> = Vec::new();
        let mut waits = HashMap::new();
        let mut inflight = lock(&self.inflight);
        for b in blocks {
            if let Some(pending) = inflight.get(&b) {
                waits.insert(b, pending.clone());
                continue;
            }
            let slot = Arc::new(Pending::default());
            inflight.insert(b, slot.clone());
            match claims.last_mut() {
                Some(c)
                    if c.first + c.slots.len() as u64 == b
                        && (c.slots.len() as u64) < PIECE_BLOCKS =>
                {
                    c.slots.push(slot)
                }
                _ => claims.push(Claim {
                    object: self.clone(),
                    first: b,
                    slots: vec![slot],
                }),
            }
        }
        (claims, waits)
    }

    /// Drops from memory the blocks before `block` that a sequential reader has passed: each byte
    /// fetched is then held once, in the kernel's page cache (a block read again, after the
    /// kernel dropped it or through another view, comes from the disk cache or the server).
    fn retire_before(&self, block: u64) {
        let from = self.retired.fetch_max(block, Ordering::Relaxed);
        for b in from..block {
            if let Some(key) = self.cache_key(b) {
                self.client.cache.forget(&key);
            }
        }
    }

    /// After a sequential read ending in block `last`: keeps the readahead window ahead of it
    /// fetching in the background.
    fn read_ahead(self: &Arc<Self>, last: u64) {
        let window = self.readahead.load(Ordering::Relaxed);
        let frontier = self.frontier.load(Ordering::Relaxed).max(last);
        let end = (last + window).min(self.len.div_ceil(BLOCK).saturating_sub(1));
        // Refilled when less than half a window is ahead, so fetches are not too small.
        if frontier >= last + window / 2 || frontier >= end {
            return;
        }
        self.frontier.store(end, Ordering::Relaxed);
        self.readahead
            .store((window * 2).min(MAX_READAHEAD_BLOCKS), Ordering::Relaxed);
        let wanted: Vec<u64> = (frontier + 1..=end)
            .filter(|&b| self.cached(b).is_none())
            .collect();
        let (claims, _) = self.claim(wanted.into_iter());
        if claims.is_empty() {
            return;
        }
        // A claim dropped unfetched (no thread) fails its waiters rather than blocking them.
        let spawned = std::thread::Builder::new()
            .name("daf-readahead".into())
            .spawn(move || RemoteObject::fetch_claims(claims));
        if let Err(e) = spawned {
            log::warn!("{}: no readahead thread: {e}", redact(&self.url));
        }
    }
}

impl Claim {
    /// Fetches the claimed blocks and hands them over.
    fn fetch(self) {
        let last = self.first + self.slots.len() as u64 - 1;
        let fetched = self.object.fetch(self.first, last);
        self.finish(fetched);
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
    /// A small object (one block) not cached nor being fetched is queued for the prefetch
    /// threads. A read that needs it while it is queued takes it out of the queue and fetches it
    /// at once; once a prefetch thread fetches it, the read waits for that fetch instead of asking
    /// again.
    fn prefetch(&self) {
        if self.len == 0 || self.len > BLOCK || self.cached(0).is_some() {
            return;
        }
        let Some(me) = self.me.upgrade() else {
            return;
        };
        let prefetcher = Prefetcher::get();
        let mut queue = lock(&prefetcher.queue);
        if queue.len() >= PREFETCH_QUEUE {
            return;
        }
        let (mut claims, _) = me.claim(std::iter::once(0));
        if let Some(claim) = claims.pop() {
            queue.push_back(claim);
            prefetcher.ready.notify_one();
        }
    }

    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let me = self.me.upgrade().ok_or_else(|| {
            StoreError::Produce(format!("{}: read after its mount ended", redact(&self.url)))
        })?;
        if len == 0 {
            return Ok(Bytes::empty());
        }
        self.learn_version()?;
        let end = offset + len;
        let (first, last) = (offset / BLOCK, (end - 1) / BLOCK);
        let mut blocks: Vec<Option<Bytes>> = (first..=last).map(|b| self.cached(b)).collect();
        let missing = (first..=last).filter(|b| blocks[(b - first) as usize].is_none());
        let (mut claims, waits) = me.claim(missing);
        // About where the last read ended (the kernel's concurrent readahead requests may come a
        // little out of order): sequential, so fetch ahead in the background.
        let sequential = offset > 0 && offset.abs_diff(self.next.load(Ordering::Relaxed)) <= BLOCK;
        self.next.store(end, Ordering::Relaxed);
        if sequential {
            me.read_ahead(last);
            self.retire_before(first.saturating_sub(KEPT_BEHIND));
        } else {
            self.readahead.store(READAHEAD_BLOCKS, Ordering::Relaxed);
            self.frontier.store(last, Ordering::Relaxed);
            self.retired.store(first, Ordering::Relaxed);
        }
        let queued = waits.contains_key(&0) && self.len <= BLOCK;
        let fetching: Vec<(u64, Arc<Pending>)> = claims
            .iter()
            .flat_map(|c| (c.first..).zip(c.slots.iter().cloned()))
            .chain(waits)
            .collect();
        claims.extend(queued.then(|| Prefetcher::take(self)).flatten());
        RemoteObject::fetch_claims(claims);
        for (b, pending) in fetching {
            blocks[(b - first) as usize] = Some(pending.wait()?);
        }
        let from = offset - first * BLOCK;
        let mut parts = blocks.into_iter();
        let lost = || StoreError::Produce("a block was not fetched".into());
        let short = || StoreError::Produce(format!("{}: a short block", redact(&self.url)));
        // Within one block (most reads): a slice of it, no copy.
        if first == last {
            let block = parts.next().flatten().ok_or_else(lost)?;
            return block.slice(from, len).ok_or_else(short);
        }
        let mut out = Vec::with_capacity(len as usize);
        for (n, block) in parts.enumerate() {
            let block = block.ok_or_else(lost)?;
            let base = (first + n as u64) * BLOCK;
            let start = offset.saturating_sub(base);
            let stop = (end - base).min(block.len());
            let piece = block
                .slice(start, stop.saturating_sub(start))
                .ok_or_else(short)?;
            out.extend_from_slice(piece.as_slice());
        }
        Ok(Bytes::from_vec(out))
    }
}
