//! Decoding a packed array on demand: the flat blob of `shard::flat_blob`.
//!
//! A numeric array is a ranged blob ([`Blob::ranged`]): a read of `[offset, offset + len)` maps
//! the C-order byte range to runs of elements, each inside one inner chunk, and decodes only
//! those chunks. Decoded chunks go through a small LRU cache ([`CACHE_CHUNKS`] chunks,
//! [`CACHE_BYTES`] bytes) shared by every reader of the blob, and one decode runs at a time per
//! array, so concurrent readers of one chunk (the kernel's readahead) decode it once. The shard
//! index is read and checked on first use. An inner chunk that cannot be decoded fails the reads
//! that touch it (with one log line naming the array and the chunk), and keeps failing without
//! being decoded again; the rest of the array stays readable. A string array is decoded whole on
//! first access into one vlen-utf8 buffer.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::stores::blob::RangeSource;
use crate::stores::{Blob, Bytes, StoreError};

use crate::formats::packed::codecs::{fill_bytes, Pipeline};
use crate::formats::packed::index::{read_index, ChunkIndex, IndexKind};
use crate::formats::packed::Packing;
use crate::formats::strings::encode_vlen;
use crate::formats::types::ElementType;
use crate::formats::zarr::chunks::{gather, ravel, unravel};
use crate::formats::zarr::decode::{checked_product, MAX_DECODED_BYTES};
use crate::formats::FormatError;
use crate::stores::lock;

/// Most decoded inner chunks kept per array.
pub const CACHE_CHUNKS: usize = 8;
/// Most decoded bytes kept per array (the last chunk decoded is kept even when larger).
pub const CACHE_BYTES: u64 = 16 << 20;

/// The recently decoded chunks, least recently used first.
#[derive(Default)]
struct ChunkCache {
    chunks: VecDeque<(u64, Arc<Vec<u8>>)>,
    bytes: u64,
}

impl ChunkCache {
    fn get(&mut self, n: u64) -> Option<Arc<Vec<u8>>> {
        let at = self.chunks.iter().position(|(k, _)| *k == n)?;
        let entry = self.chunks.remove(at)?;
        let data = entry.1.clone();
        self.chunks.push_back(entry);
        Some(data)
    }

    fn insert(&mut self, n: u64, data: Arc<Vec<u8>>) {
        self.bytes += data.len() as u64;
        self.chunks.push_back((n, data));
        while self.chunks.len() > 1
            && (self.chunks.len() > CACHE_CHUNKS || self.bytes > CACHE_BYTES)
        {
            if let Some((_, old)) = self.chunks.pop_front() {
                self.bytes -= old.len() as u64;
            }
        }
    }
}

/// What a decoder did, for tests and the log.
#[derive(Debug, Default)]
pub struct DecodeStats {
    /// Inner chunk decodes run (cache misses; failed decodes included).
    pub decoded: AtomicU64,
    /// Most decoded bytes the cache held at once.
    pub peak_cached: AtomicU64,
}

/// The ranged source of a numeric packed array.
pub struct Decoder {
    shard: Arc<Blob>,
    what: String,
    pipeline: Pipeline,
    kind: IndexKind,
    shape: Vec<u64>,
    inner: Vec<u64>,
    grid: Vec<u64>,
    fill: Vec<u8>,
    index: OnceLock<Arc<ChunkIndex>>,
    index_failed: OnceLock<String>,
    cache: Mutex<ChunkCache>,
    /// Held while a chunk is decoded (one decode at a time per array).
    decoding: Mutex<()>,
    failed: Mutex<HashMap<u64, String>>,
    /// Counters.
    pub stats: DecodeStats,
}

/// The ranged flat blob of a numeric packed array (and its decoder, for tests).
pub fn numeric_decoder(
    packing: &Packing,
    pipeline: Pipeline,
    what: String,
) -> Result<Arc<Decoder>, FormatError> {
    let ElementType::Num(t) = packing.eltype else {
        return Err(FormatError::bad(format!("{what}: not a numeric array")));
    };
    let fill =
        fill_bytes(&packing.fill_value, t).map_err(|e| FormatError::bad(format!("{what}: {e}")))?;
    if fill.len() as u64 != t.size() {
        return Err(FormatError::bad(format!(
            "{what}: fill value does not match the dtype"
        )));
    }
    Ok(Arc::new(Decoder {
        shard: packing.shard.clone(),
        kind: packing.index_kind()?,
        pipeline,
        shape: packing.shape.clone(),
        inner: packing.inner.clone(),
        grid: packing.grid(),
        fill,
        index: OnceLock::new(),
        index_failed: OnceLock::new(),
        cache: Mutex::new(ChunkCache::default()),
        decoding: Mutex::new(()),
        failed: Mutex::new(HashMap::new()),
        stats: DecodeStats::default(),
        what,
    }))
}

/// The flat blob of a numeric packed array: ranged, `product(shape) × size` bytes.
pub fn numeric_blob(
    packing: &Packing,
    pipeline: Pipeline,
    what: String,
) -> Result<Arc<Blob>, FormatError> {
    let decoder = numeric_decoder(packing, pipeline, what)?;
    Ok(Blob::ranged(decoder.flat_len(), decoder))
}

impl Decoder {
    /// Length of the flat content in bytes.
    pub fn flat_len(&self) -> u64 {
        checked_product(&self.shape).unwrap_or(0) * self.fill.len() as u64
    }

    fn index(&self) -> Result<Arc<ChunkIndex>, StoreError> {
        if let Some(index) = self.index.get() {
            return Ok(index.clone());
        }
        if let Some(e) = self.index_failed.get() {
            return Err(StoreError::Produce(e.clone()));
        }
        let shard = self.shard.bytes()?;
        match read_index(self.kind, &shard, &self.grid) {
            Ok(index) => Ok(self.index.get_or_init(|| Arc::new(index)).clone()),
            Err(e) => {
                let message = format!("{}: corrupt packed shard: {e}", self.what);
                if self.index_failed.set(message.clone()).is_ok() {
                    log::error!("{message}");
                }
                Err(StoreError::Produce(message))
            }
        }
    }

    /// Inner chunk `n`, decoded (`None`: absent, all fill).
    fn chunk(&self, n: u64) -> Result<Option<Arc<Vec<u8>>>, StoreError> {
        if let Some(hit) = lock(&self.cache).get(n) {
            return Ok(Some(hit));
        }
        let index = self.index()?;
        let Some((offset, nbytes)) = index.entries.get(n as usize).copied().flatten() else {
            return Ok(None);
        };
        let _one_at_a_time = lock(&self.decoding);
        if let Some(hit) = lock(&self.cache).get(n) {
            return Ok(Some(hit));
        }
        if let Some(e) = lock(&self.failed).get(&n) {
            return Err(StoreError::Produce(e.clone()));
        }
        let shard = self.shard.bytes()?;
        let raw = shard
            .slice(offset, nbytes)
            .ok_or_else(|| StoreError::Produce(format!("{}: shard shrank", self.what)))?;
        self.stats.decoded.fetch_add(1, Ordering::Relaxed);
        log::trace!("{}: decoding inner chunk {n}", self.what);
        match self
            .pipeline
            .decode_numeric(raw.as_slice(), &self.inner, index.crc(n))
        {
            Ok(data) => {
                let data = Arc::new(data);
                let mut cache = lock(&self.cache);
                cache.insert(n, data.clone());
                self.stats
                    .peak_cached
                    .fetch_max(cache.bytes, Ordering::Relaxed);
                Ok(Some(data))
            }
            Err(e) => {
                let message = format!("{}: inner chunk {n} of the packed array: {e}", self.what);
                log::error!("{message}");
                lock(&self.failed).insert(n, message.clone());
                Err(StoreError::Produce(message))
            }
        }
    }
}

impl RangeSource for Decoder {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        if len > MAX_DECODED_BYTES {
            return Err(StoreError::Produce(format!(
                "{}: {len} bytes are more than the {} MiB a packed array may decode at once",
                self.what,
                MAX_DECODED_BYTES >> 20
            )));
        }
        gather(
            &self.shape,
            &self.inner,
            &self.grid,
            &self.fill,
            offset,
            len,
            |n| self.chunk(n),
        )
    }
}

/// The flat blob of a string packed array: every element's vlen-utf8 item, decoded whole on
/// first access (absent chunks are the fill value).
pub fn strings_blob(
    packing: &Packing,
    pipeline: Pipeline,
    what: String,
) -> Result<Arc<Blob>, FormatError> {
    let fill = match &packing.fill_value {
        serde_json::Value::String(s) => s.clone().into_bytes(),
        _ => Vec::new(),
    };
    let kind = packing.index_kind()?;
    let shard = packing.shard.clone();
    let (shape, inner, grid) = (packing.shape.clone(), packing.inner.clone(), packing.grid());
    Ok(Blob::lazy(None, move || {
        let decode = || -> Result<Vec<u8>, String> {
            let count = checked_product(&shape)
                .filter(|n| n.saturating_mul(16) <= MAX_DECODED_BYTES)
                .ok_or("the string array is too large to decode")?;
            let shard = shard.bytes().map_err(|e| e.to_string())?;
            let index = read_index(kind, &shard, &grid)
                .map_err(|e| format!("corrupt packed shard: {e}"))?;
            // Items live in one arena; each element is a range of it (empty: the fill value).
            let mut arena: Vec<u8> = fill.clone();
            let mut items = vec![(0usize, fill.len()); count as usize];
            let mut budget = MAX_DECODED_BYTES;
            let (mut chunk_at, mut within) = (vec![0; grid.len()], vec![0; inner.len()]);
            for (n, entry) in index.entries.iter().enumerate() {
                let Some((offset, nbytes)) = *entry else {
                    continue;
                };
                let raw = shard
                    .slice(offset, nbytes)
                    .ok_or("chunk outside the shard")?;
                unravel(n as u64, &grid, &mut chunk_at);
                let used = pipeline
                    .decode_strings(
                        raw.as_slice(),
                        &inner,
                        budget,
                        index.crc(n as u64),
                        |p, item| {
                            unravel(p as u64, &inner, &mut within);
                            let inside = (0..shape.len())
                                .all(|d| chunk_at[d] * inner[d] + within[d] < shape[d]);
                            if inside {
                                let coords =
                                    (0..shape.len()).map(|d| chunk_at[d] * inner[d] + within[d]);
                                items[ravel(coords, &shape) as usize] = (arena.len(), item.len());
                                arena.extend_from_slice(item);
                            }
                        },
                    )
                    .map_err(|e| format!("inner chunk {n} of the packed array: {e}"))?;
                budget = budget.saturating_sub(used);
                if arena.len() as u64 > MAX_DECODED_BYTES {
                    return Err("the string array is too large to decode".into());
                }
            }
            let values = items.iter().map(|&(at, len)| &arena[at..at + len]);
            Ok(encode_vlen(values, count as usize))
        };
        decode().map(Bytes::from_vec).map_err(|e| {
            let message = format!("{what}: {e}");
            log::error!("{message}");
            StoreError::Produce(message)
        })
    }))
}
