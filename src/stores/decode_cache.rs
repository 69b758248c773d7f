//! The mount-wide bounded cache of decoded pieces (`-o decode_cache=SIZE`, default
//! [`DEFAULT_LIMIT`]).
//!
//! Content that is stored compressed (the chunks of a foreign chunked Zarr array, the windows of
//! a compressed ZIP member) is decoded on demand, piece by piece, and the decoded pieces are kept
//! here, least recently used out first, so that together they never hold more than the limit.
//! A piece is keyed by its owner (a number from [`DecodeCache::owner`], one per decoded blob)
//! and its index within the owner. A piece larger than the whole limit is handed to its reader
//! but not kept. Pieces are shared (`Arc`): a reader still copying out of an evicted piece keeps
//! it alive until it is done, so the daemon's memory is the limit plus what reads in flight hold.
//!
//! There is one cache per process (one mount per daemon): [`cache`] returns it, and the CLI sets
//! its limit once at mount with [`DecodeCache::set_limit`].

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::lock;
use super::lru::ByteLru;
use super::StoreError;

/// The default bound of decoded bytes kept: 256 MiB.
pub const DEFAULT_LIMIT: u64 = 256 << 20;

type Key = (u64, u64);

/// A bounded LRU cache of decoded pieces.
pub struct DecodeCache {
    lru: Mutex<ByteLru<Key, Arc<Vec<u8>>>>,
    limit: AtomicU64,
    next_owner: AtomicU64,
    /// Most decoded bytes held at once (tests and the log).
    peak: AtomicU64,
    /// Pieces dropped to make room (tests and the log).
    evicted: AtomicU64,
}

/// The decoded pieces of one blob (a chunked array): kept in a [`DecodeCache`] under an owner
/// number of their own, each decoded by one thread at a time, a decode that failed on the bytes
/// themselves remembered and answered from then on; dropped from the cache with the blob.
pub struct Decoded {
    cache: &'static DecodeCache,
    owner: u64,
    /// Held while a piece is decoded: one decode at a time per blob (a reader of a piece being
    /// decoded waits, then finds it cached).
    decoding: Mutex<()>,
    /// Why pieces could not be decoded, by piece (taken after `decoding`).
    failed: Mutex<HashMap<u64, String>>,
}

impl Decoded {
    /// The pieces of a new blob, kept in `cache`.
    pub fn new(cache: &'static DecodeCache) -> Decoded {
        Decoded {
            cache,
            owner: cache.owner(),
            decoding: Mutex::new(()),
            failed: Mutex::new(HashMap::new()),
        }
    }

    /// Piece `n`: kept, or made by `decode`. `decode` fails with a `StoreError` for a passing
    /// reason (reading the stored bytes), not remembered, or returns `Err(message)` when the
    /// bytes do not decode: logged once, and the answer for that piece from then on.
    pub fn piece(
        &self,
        n: u64,
        decode: impl FnOnce() -> Result<Result<Vec<u8>, String>, StoreError>,
    ) -> Result<Arc<Vec<u8>>, StoreError> {
        if let Some(hit) = self.cache.get(self.owner, n) {
            return Ok(hit);
        }
        let _one_at_a_time = lock(&self.decoding);
        if let Some(hit) = self.cache.get(self.owner, n) {
            return Ok(hit);
        }
        if let Some(e) = lock(&self.failed).get(&n) {
            return Err(StoreError::Produce(e.clone()));
        }
        match decode()? {
            Ok(data) => {
                let data = Arc::new(data);
                self.cache.insert(self.owner, n, data.clone());
                Ok(data)
            }
            Err(message) => {
                log::error!("{message}");
                lock(&self.failed).insert(n, message.clone());
                Err(StoreError::Produce(message))
            }
        }
    }
}

impl Drop for Decoded {
    fn drop(&mut self) {
        self.cache.forget(self.owner);
    }
}

/// The process's decode cache.
pub fn cache() -> &'static DecodeCache {
    static CACHE: OnceLock<DecodeCache> = OnceLock::new();
    CACHE.get_or_init(|| DecodeCache::new(DEFAULT_LIMIT))
}

impl DecodeCache {
    /// An empty cache holding at most `limit` decoded bytes.
    pub fn new(limit: u64) -> DecodeCache {
        DecodeCache {
            lru: Mutex::new(ByteLru::default()),
            limit: AtomicU64::new(limit),
            next_owner: AtomicU64::new(1),
            peak: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ByteLru<Key, Arc<Vec<u8>>>> {
        lock(&self.lru)
    }

    /// Sets the bound (evicting at once down to it).
    pub fn set_limit(&self, limit: u64) {
        self.limit.store(limit, Ordering::Relaxed);
        let dropped = self.lock().shrink(limit);
        self.evicted.fetch_add(dropped, Ordering::Relaxed);
    }

    /// The bound in bytes.
    pub fn limit(&self) -> u64 {
        self.limit.load(Ordering::Relaxed)
    }

    /// A new owner number, for one decoded blob.
    pub fn owner(&self) -> u64 {
        self.next_owner.fetch_add(1, Ordering::Relaxed)
    }

    /// Piece `index` of `owner`, if kept (it becomes the most recently used).
    pub fn get(&self, owner: u64, index: u64) -> Option<Arc<Vec<u8>>> {
        self.lock().get(&(owner, index))
    }

    /// Keeps piece `index` of `owner`, evicting the least recently used pieces to stay within
    /// the bound (a piece larger than the bound is not kept).
    pub fn insert(&self, owner: u64, index: u64, data: Arc<Vec<u8>>) {
        let size = data.len() as u64;
        let mut lru = self.lock();
        let dropped = lru.insert((owner, index), data, size, self.limit());
        self.evicted.fetch_add(dropped, Ordering::Relaxed);
        self.peak.fetch_max(lru.bytes(), Ordering::Relaxed);
    }

    /// Drops every piece of `owner` (its blob is gone).
    pub fn forget(&self, owner: u64) {
        self.lock().remove_where(|key| key.0 == owner);
    }

    /// Decoded bytes kept now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes()
    }

    /// Most decoded bytes kept at once so far.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// Pieces evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(n: usize, byte: u8) -> Arc<Vec<u8>> {
        Arc::new(vec![byte; n])
    }

    #[test]
    fn keeps_within_its_bound_least_recently_used_out_first() {
        let cache = DecodeCache::new(100);
        let owner = cache.owner();
        cache.insert(owner, 0, piece(40, 0));
        cache.insert(owner, 1, piece(40, 1));
        assert_eq!(cache.get(owner, 0).unwrap()[0], 0); // 0 is now the most recent
        cache.insert(owner, 2, piece(40, 2));
        assert!(cache.bytes() <= 100);
        assert!(
            cache.get(owner, 1).is_none(),
            "the least recently used goes first"
        );
        assert_eq!(cache.get(owner, 0).unwrap()[0], 0);
        assert_eq!(cache.get(owner, 2).unwrap()[0], 2);
        assert_eq!(cache.evicted(), 1);
        cache.insert(owner, 3, piece(101, 3));
        assert!(
            cache.get(owner, 3).is_none(),
            "larger than the bound: not kept"
        );
        assert!(cache.peak() <= 100);
        cache.set_limit(40);
        assert!(cache.bytes() <= 40);
        cache.forget(owner);
        assert_eq!(cache.bytes(), 0);
    }

    #[test]
    fn a_blobs_pieces_are_decoded_once_and_a_bad_one_is_remembered() {
        let cache: &'static DecodeCache = Box::leak(Box::new(DecodeCache::new(1 << 20)));
        let runs = std::cell::Cell::new(0);
        let decode = |result: Result<Result<Vec<u8>, String>, StoreError>| {
            runs.set(runs.get() + 1);
            result
        };
        let decoded = Decoded::new(cache);
        let good = || decode(Ok(Ok(vec![7; 4])));
        assert_eq!(*decoded.piece(0, good).unwrap(), vec![7; 4]);
        assert_eq!(*decoded.piece(0, good).unwrap(), vec![7; 4]);
        assert_eq!(runs.get(), 1, "kept: decoded once");
        // A passing failure is tried again; a bad piece is not.
        let passing = || decode(Err(StoreError::Produce("I/O".into())));
        assert!(decoded.piece(1, passing).is_err());
        assert!(decoded.piece(1, passing).is_err());
        assert_eq!(runs.get(), 3);
        let bad = || decode(Ok(Err("chunk 2 does not decode".into())));
        for _ in 0..2 {
            let e = decoded.piece(2, bad).unwrap_err();
            assert!(e.to_string().contains("chunk 2 does not decode"), "{e}");
        }
        assert_eq!(runs.get(), 4, "remembered: decoded once");
        assert_eq!(cache.bytes(), 4);
        drop(decoded);
        assert_eq!(cache.bytes(), 0, "its pieces go with it");
    }
}
