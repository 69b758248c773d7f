//! Reading a foreign chunked numeric Zarr array (v2, or v3 without sharding) by range.
//!
//! The array's flat content (Daf's single chunk: little-endian, C order of the Zarr shape) is a
//! ranged blob ([`Blob::ranged`]) of exactly `product(shape) × size` bytes, the size the
//! metadata declares: a read maps its byte range to runs of elements, each inside one chunk
//! of the grid, and decodes only the chunks it touches ([`decode_numeric_chunk`]). Decoded chunks
//! are kept in the mount-wide decode cache ([`crate::stores::decode_cache`]), so a large
//! compressed array costs at most that cache's bound in memory, whatever its size. One decode
//! runs at a time per array (concurrent readers of one chunk decode it once). Chunks the store
//! does not hold are the fill value. A chunk that cannot be decoded fails the reads that touch
//! it (one log line naming the array and the chunk) and is not decoded again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::stores::blob::RangeSource;
use crate::stores::decode_cache::{self, DecodeCache, Decoded};
use crate::stores::{Blob, Bytes, StoreError};

use crate::formats::zarr::decode::{
    checked_product, decode_numeric_chunk, ArrayKind, ChunkLayout, StoredChunks, MAX_DECODED_BYTES,
};

/// The C-order linear position of `coords` in `shape`.
pub(in crate::formats) fn ravel(coords: impl Iterator<Item = u64>, shape: &[u64]) -> u64 {
    coords.zip(shape).fold(0, |acc, (c, n)| acc * n + c)
}

/// The coordinates of C-order linear position `at` in `shape`.
pub(in crate::formats) fn unravel(mut at: u64, shape: &[u64], out: &mut [u64]) {
    for d in (0..shape.len()).rev() {
        out[d] = at % shape[d];
        at /= shape[d];
    }
}

/// The bytes `[offset, offset + len)` of the C-order flat content of an array of `shape`
/// (elements of `fill.len()` bytes) cut in chunks of `inner` on a grid of `grid`, where
/// `chunk(n)` gives chunk `n` (C order on the grid) decoded in C order of `inner`, or `None`
/// when it is all fill.
pub fn gather(
    shape: &[u64],
    inner: &[u64],
    grid: &[u64],
    fill: &[u8],
    offset: u64,
    len: u64,
    mut chunk: impl FnMut(u64) -> Result<Option<Arc<Vec<u8>>>, StoreError>,
) -> Result<Bytes, StoreError> {
    let size = fill.len() as u64;
    if size == 0 || len == 0 {
        return Ok(Bytes::empty());
    }
    let first = offset / size;
    let end = (offset + len).div_ceil(size);
    let ndim = shape.len();
    let mut out = Vec::with_capacity(((end - first) * size) as usize);
    if ndim == 0 {
        match chunk(0)? {
            Some(data) => out.extend_from_slice(data.get(..size as usize).unwrap_or(fill)),
            None => out.extend_from_slice(fill),
        }
    }
    let mut coords = vec![0u64; ndim];
    let mut at = first;
    while ndim > 0 && at < end {
        let last = ndim - 1;
        unravel(at, shape, &mut coords);
        let within_last = coords[last] % inner[last];
        let run = (inner[last] - within_last)
            .min(shape[last] - coords[last])
            .min(end - at);
        let n = ravel(coords.iter().zip(inner).map(|(c, i)| c / i), grid);
        match chunk(n)? {
            Some(data) => {
                let within = ravel(coords.iter().zip(inner).map(|(c, i)| c % i), inner);
                let from = (within * size) as usize;
                let piece = data
                    .get(from..from + (run * size) as usize)
                    .ok_or_else(|| StoreError::Produce(format!("chunk {n} is too short")))?;
                out.extend_from_slice(piece);
            }
            None => (0..run).for_each(|_| out.extend_from_slice(fill)),
        }
        at += run;
    }
    // Whole elements were made: cut the partial ones at both ends off.
    let skip = (offset - first * size) as usize;
    out.drain(..skip.min(out.len()));
    out.truncate(len as usize);
    Ok(Bytes::from_vec(out))
}

/// The ranged source of a foreign chunked numeric array.
pub struct ForeignDecoder {
    what: String,
    layout: ChunkLayout,
    grid: Vec<u64>,
    /// The chunks the store holds, by linear position on the grid.
    stored: HashMap<u64, Arc<Blob>>,
    /// Its decoded chunks, in the decode cache.
    pieces: Decoded,
    /// Chunk decodes run (cache misses), for tests.
    pub decoded: AtomicU64,
}

/// The ranged flat blob of a foreign numeric array with the chunks `stored` (and its decoder,
/// for tests); `what` names it in errors.
pub fn foreign_decoder(
    layout: ChunkLayout,
    stored: StoredChunks,
    what: String,
) -> Result<(Arc<Blob>, Arc<ForeignDecoder>), String> {
    foreign_decoder_in(decode_cache::cache(), layout, stored, what)
}

/// [`foreign_decoder`] keeping its decoded chunks in `cache` (tests use a small one).
pub fn foreign_decoder_in(
    cache: &'static DecodeCache,
    layout: ChunkLayout,
    stored: StoredChunks,
    what: String,
) -> Result<(Arc<Blob>, Arc<ForeignDecoder>), String> {
    let ArrayKind::Numeric(t, _) = layout.kind else {
        return Err("not a numeric array".into());
    };
    if layout.fill.len() as u64 != t.size() {
        return Err("fill value does not match the dtype".into());
    }
    let chunk_bytes = layout.chunk_len().checked_mul(t.size());
    if chunk_bytes.is_none_or(|n| n > MAX_DECODED_BYTES) {
        return Err(format!(
            "one chunk would take more than the limit of {} MiB",
            MAX_DECODED_BYTES >> 20
        ));
    }
    let len = checked_product(&layout.shape)
        .and_then(|n| n.checked_mul(t.size()))
        .ok_or("the array is too large")?;
    let grid = layout.grid();
    let stored = stored
        .into_iter()
        .map(|(coord, blob)| (ravel(coord.into_iter(), &grid), blob))
        .collect();
    let decoder = Arc::new(ForeignDecoder {
        what,
        layout,
        grid,
        stored,
        pieces: Decoded::new(cache),
        decoded: AtomicU64::new(0),
    });
    Ok((Blob::ranged(len, decoder.clone()), decoder))
}

impl ForeignDecoder {
    /// Chunk `n`, decoded (`None`: not stored, all fill).
    fn chunk(&self, n: u64) -> Result<Option<Arc<Vec<u8>>>, StoreError> {
        let Some(stored) = self.stored.get(&n) else {
            return Ok(None);
        };
        let decode = || {
            // Reading the stored bytes may fail for a passing reason (I/O): not remembered. By
            // range: a compressed ZIP member is decompressed without being kept whole.
            let raw = stored.read_range(0, stored.len()?)?;
            self.decoded.fetch_add(1, Ordering::Relaxed);
            log::trace!("{}: decoding chunk {n}", self.what);
            Ok(decode_numeric_chunk(&self.layout, raw.as_slice())
                .map_err(|e| format!("decoding {}: chunk {n}: {e}", self.what)))
        };
        self.pieces.piece(n, decode).map(Some)
    }
}

impl RangeSource for ForeignDecoder {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        if len > MAX_DECODED_BYTES {
            return Err(StoreError::Produce(format!(
                "decoding {}: {len} bytes are more than the limit of {} MiB a foreign array may \
                 decode at once",
                self.what,
                MAX_DECODED_BYTES >> 20
            )));
        }
        gather(
            &self.layout.shape,
            &self.layout.chunks,
            &self.grid,
            &self.layout.fill,
            offset,
            len,
            |n| self.chunk(n),
        )
    }
}

#[cfg(test)]
#[path = "chunks_tests.rs"]
mod tests;
