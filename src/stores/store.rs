//! `Store`: a source as bytes behind keys, whatever holds them (a directory, a ZIP archive, an
//! HTTP server).
//!
//! A store answers five questions about `/`-separated keys: which keys there are ([`Store::list`]),
//! how long one is ([`Store::size`]), when it changed ([`Store::mtime`]), what bytes lie in a range
//! of it ([`Store::read_range`]) and, for a local store only, all of it without copying
//! ([`Store::map`]). [`Store::index`] gives the [`StoreIndex`] of [`Entry`] blobs that the format
//! readers read: they never know where the bytes come from.
//!
//! The trait is object safe (`&dyn Store`, `Box<dyn Store>`, `Arc<dyn Store>`) and its stores are
//! `Send + Sync`: the FUSE threads read through one store at once. Each kind has its own
//! constructor: [`super::dir::open_store`], [`super::zip::open_store`], and the HTTP stores'
//! ([`crate::stores::http::store`]); all of them are an [`IndexedStore`]. Local stores keep what they always did: directory files read or mapped once on
//! first access, stored ZIP members as ranges of the archive's map behind a lazy CRC-32 check,
//! compressed members decompressed once within their budget.
//!
//! What a remote store (HTTP) may not do: it never maps ([`Store::map`] is `Ok(None)`, the default);
//! it returns owned buffers (from its cache) from [`Store::read_range`]; it may not be able to
//! list a prefix it was not told about (its keys come from consolidated metadata, so
//! [`Store::list`] may be partial or an error); and every answer may fail at any time (network),
//! where a local store fails only on I/O errors or damaged content.
//!
//! Contract every store keeps (checked by `conformance::check_store` for each store):
//! - keys are relative, `/`-separated, without empty segments; a missing key is
//!   [`StoreError::Missing`] from `size`, `mtime`, `read_range` and `map`, never a panic;
//! - `list("")` is every key, sorted; `list(dir)` the keys under `dir/` (full keys);
//! - `read_range(key, offset, len)` is exactly `len` bytes; a range that does not lie within the
//!   content (`offset + len > size`) is [`StoreError::Range`]; an empty range inside it is empty;
//! - `map(key)`, when `Some`, is the whole content, equal to `read_range(key, 0, size)`;
//! - `index()` holds the same keys, sizes (known without reading), bytes and mtimes.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use super::blob::RangeSource;
use super::{Blob, Bytes, Entry, StoreError, StoreIndex};

/// A source's bytes behind keys (see the module doc for the contract).
pub trait Store: Send + Sync + fmt::Debug {
    /// What and where the store is, for messages (`directory /data/x.daf`, `https://…`).
    fn describe(&self) -> String;

    /// The keys under directory `prefix` (full keys, sorted; `dir` and `dir/` are the same), or
    /// every key for `""`.
    fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError>;

    /// The length of the content of `key`.
    fn size(&self, key: &str) -> Result<u64, StoreError>;

    /// When `key` was last modified.
    fn mtime(&self, key: &str) -> Result<SystemTime, StoreError>;

    /// Exactly the bytes `[offset, offset + len)` of `key`.
    fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError>;

    /// The whole content of `key` without copying, when the store is local (a map or a buffer it
    /// already holds); `Ok(None)` for a store that cannot (a remote one: the default, which still
    /// answers [`StoreError::Missing`] for a missing key, through [`Store::size`]).
    fn map(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        self.size(key).map(|_| None)
    }

    /// The index the format readers read: one entry per key.
    fn index(&self) -> Result<StoreIndex, StoreError>;

    /// When the source itself (root directory, archive file) was last modified, if known.
    fn root_mtime(&self) -> Option<SystemTime> {
        None
    }
}

/// The error for a key that `store` does not hold.
pub fn missing(store: &dyn Store, key: &str) -> StoreError {
    StoreError::Missing {
        store: store.describe(),
        key: key.to_string(),
    }
}

/// Checks that `[offset, offset + len)` lies within `size` bytes of `key`.
pub fn check_range(key: &str, offset: u64, len: u64, size: u64) -> Result<(), StoreError> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(()),
        _ => Err(StoreError::Range {
            key: key.to_string(),
            offset,
            len,
            size,
        }),
    }
}

/// The keys of `index` under directory `prefix` (every key for `""`; a trailing `/` is the same
/// directory), sorted.
pub fn list_index(index: &StoreIndex, prefix: &str) -> Vec<String> {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        return index.keys().map(str::to_string).collect();
    }
    let full = format!("{prefix}/");
    index
        .subtree(prefix)
        .keys()
        .map(|k| format!("{full}{k}"))
        .collect()
}

/// A store whose keys and blobs are an index already built: the directory and ZIP stores
/// ([`super::dir::open_store`], [`super::zip::open_store`]), whose blobs are local and may be
/// mapped, and the HTTP stores ([`crate::stores::http::store`]), whose blobs fetch ranges and never map.
/// Every answer comes from the index's entries, so reads go through the same blobs the views
/// share (the same maps, buffers, checks, budgets and caches).
#[derive(Clone, Debug)]
pub struct IndexedStore {
    /// What and where the store is.
    what: String,
    /// Its keys and blobs.
    index: StoreIndex,
    /// Whether [`Store::map`] gives the whole content (a local store).
    maps: bool,
}

impl IndexedStore {
    /// The store named `what` (in messages) whose keys and blobs are `index`; `maps`: whether
    /// its blobs are local (a map or a buffer), so [`Store::map`] gives them.
    pub fn new(what: String, index: StoreIndex, maps: bool) -> IndexedStore {
        IndexedStore { what, index, maps }
    }

    /// The entries under `group/`, re-keyed without it (a data set of a multi-data-set archive).
    pub fn group(&self, group: &str) -> IndexedStore {
        IndexedStore {
            what: format!("{}#/{group}", self.what),
            index: self.index.subtree(group),
            maps: self.maps,
        }
    }

    fn entry(&self, key: &str) -> Result<&Entry, StoreError> {
        self.index.get(key).ok_or_else(|| missing(self, key))
    }
}

impl Store for IndexedStore {
    fn describe(&self) -> String {
        self.what.clone()
    }

    fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(list_index(&self.index, prefix))
    }

    fn size(&self, key: &str) -> Result<u64, StoreError> {
        self.entry(key)?.blob.len()
    }

    fn mtime(&self, key: &str) -> Result<SystemTime, StoreError> {
        Ok(self.entry(key)?.mtime)
    }

    /// A slice of the entry's blob (its map, its buffer, or the range its source makes).
    fn read_range(&self, key: &str, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let blob = &self.entry(key)?.blob;
        check_range(key, offset, len, blob.len()?)?;
        blob.read_range(offset, len)
    }

    /// A local blob's whole content, produced once and shared.
    fn map(&self, key: &str) -> Result<Option<Bytes>, StoreError> {
        let blob = &self.entry(key)?.blob;
        if self.maps {
            blob.bytes().map(Some)
        } else {
            Ok(None)
        }
    }

    fn index(&self) -> Result<StoreIndex, StoreError> {
        Ok(self.index.clone())
    }

    fn root_mtime(&self) -> Option<SystemTime> {
        self.index.root_mtime
    }
}

/// One key of a store, served by ranges (the blob of [`index_by_ranges`]).
struct KeyRange {
    store: Arc<dyn Store>,
    key: String,
}

impl RangeSource for KeyRange {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        self.store.read_range(&self.key, offset, len)
    }
}

/// An index of every key of `store` whose blobs read through [`Store::read_range`] (ranged
/// blobs: nothing is read until a view asks for a range). It asks [`Store::size`] and
/// [`Store::mtime`] of every key now: a store for which that costs a request per key should build
/// its index from what it already knows instead.
pub fn index_by_ranges(store: Arc<dyn Store>) -> Result<StoreIndex, StoreError> {
    let mut entries = std::collections::BTreeMap::new();
    for key in store.list("")? {
        let len = store.size(&key)?;
        let mtime = store.mtime(&key)?;
        let source = Arc::new(KeyRange {
            store: store.clone(),
            key: key.clone(),
        });
        entries.insert(
            key,
            Entry {
                blob: Blob::ranged(len, source),
                mtime,
            },
        );
    }
    Ok(StoreIndex::new(entries, store.root_mtime()))
}
