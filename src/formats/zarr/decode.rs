//! Decoding foreign Zarr arrays (v2, and v3 through the same layout) into Daf's single
//! contiguous chunk.
//!
//! Daf writes every array as one uncompressed chunk; other tools chunk and compress. This module
//! turns any supported array (several chunks, edge chunks, missing chunks = fill value, `order`
//! `F`, big-endian dtypes, the numcodecs compressors blosc/zstd/zlib/gzip/lz4/bz2, chains of
//! them with the Zarr v3 `crc32c` checksum, and the `vlen-utf8` filter) into exactly the bytes Daf would have written: little-endian, C order of
//! the Zarr shape (= Julia's column-major order), or one vlen-utf8 buffer for strings.
//!
//! Sources are untrusted: the chunk grid is never enumerated (only the chunks the store holds
//! are visited; missing ones are fill), and no decode allocates more than
//! [`MAX_DECODED_BYTES`]: the output size is known from the shape and checked before anything is
//! allocated, and every decompressor is cut off at the size its chunk must have.

use std::io::Read;
use std::sync::Arc;

use serde_json::Value;

use crate::stores::Blob;

use crate::formats::strings::{decode_vlen, encode_vlen};
use crate::formats::types::{Endian, NumType};

/// The most bytes a decoded foreign array (and any one of its decompressed chunks) may take: a
/// larger one gives `EIO` with a log line, never an allocation that could exhaust the daemon.
pub const MAX_DECODED_BYTES: u64 = 128 << 20;

/// Most dimensions an array may have (numpy's own limit).
pub const MAX_DIMENSIONS: usize = 32;

/// The chunks a store holds for an array: chunk coordinates and their stored bytes.
pub type StoredChunks = Vec<(Vec<u64>, Arc<Blob>)>;

/// A bytes-to-bytes codec: a compressor of the numcodecs family, or the Zarr v3 `crc32c`
/// checksum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compressor {
    /// `blosc` (frames are self-describing).
    Blosc,
    /// `zstd`.
    Zstd,
    /// `zlib`.
    Zlib,
    /// `gzip`.
    Gzip,
    /// `lz4` (numcodecs framing: 4-byte size, then an LZ4 block).
    Lz4,
    /// `bz2`.
    Bz2,
    /// Zarr v3 `crc32c`: the data, then its CRC-32C (4 bytes, little-endian), checked and cut.
    Crc32c,
}

impl Compressor {
    /// Parses a `.zarray` `compressor` value (`null` = none).
    pub fn parse(value: &Value) -> Result<Option<Compressor>, String> {
        if value.is_null() {
            return Ok(None);
        }
        let id = value
            .get("id")
            .and_then(Value::as_str)
            .ok_or("compressor without an id")?;
        Ok(Some(match id {
            "blosc" => Compressor::Blosc,
            "zstd" => Compressor::Zstd,
            "zlib" => Compressor::Zlib,
            "gzip" => Compressor::Gzip,
            "lz4" => Compressor::Lz4,
            "bz2" => Compressor::Bz2,
            other => return Err(format!("unsupported compressor \"{other}\"")),
        }))
    }

    /// Decompresses one chunk into at most `limit` bytes (more is an error, found without
    /// producing more than `limit + 1` bytes).
    pub fn decompress(self, data: &[u8], limit: u64) -> Result<Vec<u8>, String> {
        let too_big = || format!("chunk decompresses to more than {limit} bytes");
        let declared = |size: u64| {
            if size > limit {
                Err(too_big())
            } else {
                Ok(())
            }
        };
        let bounded = |mut reader: Box<dyn Read + '_>| -> Result<Vec<u8>, String> {
            let mut out = Vec::new();
            (&mut reader)
                .take(limit.saturating_add(1))
                .read_to_end(&mut out)
                .map_err(|e| e.to_string())?;
            if out.len() as u64 > limit {
                return Err(too_big());
            }
            Ok(out)
        };
        match self {
            Compressor::Blosc => {
                // Blosc 1 header: the uncompressed size is bytes 4..8 (little-endian).
                let header = data
                    .get(4..8)
                    .ok_or("blosc chunk shorter than its header")?;
                declared(u64::from(u32::from_le_bytes([
                    header[0], header[1], header[2], header[3],
                ])))?;
                crate::sys::blosc_decompress(data)
            }
            Compressor::Zstd => bounded(Box::new(
                zstd::stream::read::Decoder::new(data).map_err(|e| e.to_string())?,
            )),
            Compressor::Zlib => bounded(Box::new(flate2::read::ZlibDecoder::new(data))),
            Compressor::Gzip => bounded(Box::new(flate2::read::MultiGzDecoder::new(data))),
            Compressor::Bz2 => bounded(Box::new(bzip2::read::BzDecoder::new(data))),
            Compressor::Crc32c => {
                let split = data
                    .len()
                    .checked_sub(4)
                    .ok_or("crc32c chunk shorter than its checksum")?;
                let (body, sum) = data.split_at(split);
                if crc32c::crc32c(body).to_le_bytes() != sum {
                    return Err("crc32c checksum mismatch".into());
                }
                declared(body.len() as u64)?;
                Ok(body.to_vec())
            }
            Compressor::Lz4 => {
                let header = data.get(..4).ok_or("lz4 chunk shorter than its header")?;
                let size = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
                declared(u64::from(size))?;
                lz4_flex::block::decompress(&data[4..], size as usize).map_err(|e| e.to_string())
            }
        }
    }
}

/// What the array holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArrayKind {
    /// Numbers of a type, in a byte order.
    Numeric(NumType, Endian),
    /// vlen-utf8 strings (`|O` with the `vlen-utf8` filter).
    Strings,
}

/// How to assemble an array from its chunks.
#[derive(Clone, Debug, PartialEq)]
pub struct ChunkLayout {
    /// Zarr shape.
    pub shape: Vec<u64>,
    /// Zarr chunk shape.
    pub chunks: Vec<u64>,
    /// Element kind.
    pub kind: ArrayKind,
    /// Bytes-to-bytes codecs in the order they were applied when encoding (decoded in reverse;
    /// a Zarr v2 array has at most its one compressor).
    pub codecs: Vec<Compressor>,
    /// Chunk bytes are in Fortran order.
    pub fortran_order: bool,
    /// One element of fill, little-endian (numeric), for missing chunks.
    pub fill: Vec<u8>,
    /// Chunk key separator (`.` or `/`).
    pub separator: String,
}

impl ChunkLayout {
    /// Number of elements of the array (saturating: a parsed layout never overflows).
    pub fn len(&self) -> u64 {
        checked_product(&self.shape).unwrap_or(u64::MAX)
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of elements of one chunk (saturating).
    pub fn chunk_len(&self) -> u64 {
        checked_product(&self.chunks).unwrap_or(u64::MAX)
    }

    /// Chunk counts per dimension.
    pub fn grid(&self) -> Vec<u64> {
        self.shape
            .iter()
            .zip(&self.chunks)
            .map(|(s, c)| s.div_ceil(*c))
            .collect()
    }

    /// Number of chunks of the grid, if it fits a `u64`.
    pub fn grid_total(&self) -> Option<u64> {
        checked_product(&self.grid())
    }

    /// The coordinate of the chunk named `name` (`0.1`, `0/1`, `0` for a 0-d array), if it is a
    /// canonical chunk name inside the grid.
    pub fn parse_chunk_name(&self, name: &str) -> Option<Vec<u64>> {
        if self.shape.is_empty() {
            return (name == "0").then(Vec::new);
        }
        let grid = self.grid();
        let parts: Vec<&str> = name.split(self.separator.as_str()).collect();
        if parts.len() != grid.len() {
            return None;
        }
        parts
            .iter()
            .zip(&grid)
            .map(|(part, &n)| {
                let canonical = !part.is_empty()
                    && part.bytes().all(|b| b.is_ascii_digit())
                    && (part.len() == 1 || !part.starts_with('0'));
                let value: u64 = part.parse().ok().filter(|_| canonical)?;
                (value < n).then_some(value)
            })
            .collect()
    }

    /// Every chunk coordinate, in C order (tests only: real arrays never enumerate the grid).
    #[cfg(test)]
    pub fn chunk_coords(&self) -> Vec<Vec<u64>> {
        let grid = self.grid();
        if grid.contains(&0) {
            return Vec::new();
        }
        let mut coords = vec![vec![0u64; grid.len()]];
        let total: u64 = grid.iter().product();
        for _ in 1..total {
            let mut next = coords.last().cloned().unwrap_or_default();
            for d in (0..next.len()).rev() {
                next[d] += 1;
                if next[d] < grid[d] {
                    break;
                }
                next[d] = 0;
            }
            coords.push(next);
        }
        coords
    }
}

/// The product of `dims`, or `None` on overflow.
pub fn checked_product(dims: &[u64]) -> Option<u64> {
    dims.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// Checks an untrusted shape and chunk shape: as many dimensions (at most [`MAX_DIMENSIONS`]),
/// no zero chunk length, and element counts whose byte sizes (8 bytes at most per element) fit
/// a `u64`.
pub fn check_grid(shape: &[u64], chunks: &[u64]) -> Result<(), String> {
    if chunks.len() != shape.len() || chunks.contains(&0) {
        return Err("chunks do not match shape".into());
    }
    if shape.len() > MAX_DIMENSIONS {
        return Err(format!("more than {MAX_DIMENSIONS} dimensions"));
    }
    let too_big = |what: &str, dims: &[u64]| format!("{what} {dims:?} has too many elements");
    let elements = checked_product(shape).ok_or_else(|| too_big("shape", shape))?;
    let chunk_elements = checked_product(chunks).ok_or_else(|| too_big("chunks", chunks))?;
    if elements.checked_mul(8).is_none() || chunk_elements.checked_mul(8).is_none() {
        return Err(too_big("shape or chunks", shape));
    }
    Ok(())
}

/// `count × size` if it is at most [`MAX_DECODED_BYTES`], else an error naming `what`.
fn within_limit(count: u64, size: u64, what: &str) -> Result<u64, String> {
    match count.checked_mul(size) {
        Some(bytes) if bytes <= MAX_DECODED_BYTES => Ok(bytes),
        _ => Err(format!(
            "{what} would take {count} × {size} bytes, more than the limit of {} MiB",
            MAX_DECODED_BYTES >> 20
        )),
    }
}

/// Calls `copy(chunk_element, array_element, run)` for every in-bounds run of consecutive
/// elements of a C-ordered chunk at `origin` (chunk coordinates × chunk shape).
fn for_each_run(layout: &ChunkLayout, coord: &[u64], mut copy: impl FnMut(usize, usize, usize)) {
    let ndim = layout.shape.len();
    if ndim == 0 {
        copy(0, 0, 1);
        return;
    }
    let origin: Vec<u64> = coord
        .iter()
        .zip(&layout.chunks)
        .map(|(c, n)| c * n)
        .collect();
    let valid: Vec<u64> = (0..ndim)
        .map(|d| layout.chunks[d].min(layout.shape[d] - origin[d]))
        .collect();
    let run = valid[ndim - 1] as usize;
    let mut index = vec![0u64; ndim - 1];
    loop {
        let mut chunk_at = 0u64;
        let mut array_at = 0u64;
        for d in 0..ndim {
            let i = if d < ndim - 1 { index[d] } else { 0 };
            chunk_at = chunk_at * layout.chunks[d] + i;
            array_at = array_at * layout.shape[d] + origin[d] + i;
        }
        copy(chunk_at as usize, array_at as usize, run);
        let mut d = ndim - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < valid[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// Reorders a Fortran-ordered chunk of `chunks` elements of `size` bytes into C order.
fn fortran_to_c(data: &[u8], chunks: &[u64], size: usize) -> Vec<u8> {
    let n: u64 = chunks.iter().product();
    let mut out = vec![0u8; data.len()];
    for c_index in 0..n {
        // Coordinates from the C index, then the Fortran index from the coordinates.
        let mut rest = c_index;
        let mut f_index = 0u64;
        let mut stride = 1u64;
        let mut coords = vec![0u64; chunks.len()];
        for d in (0..chunks.len()).rev() {
            coords[d] = rest % chunks[d];
            rest /= chunks[d];
        }
        for (d, c) in coords.iter().enumerate() {
            f_index += c * stride;
            stride *= chunks[d];
        }
        let (src, dst) = (f_index as usize * size, c_index as usize * size);
        out[dst..dst + size].copy_from_slice(&data[src..src + size]);
    }
    out
}

fn decode_chunk(layout: &ChunkLayout, raw: &[u8], limit: u64) -> Result<Vec<u8>, String> {
    let Some((last, earlier)) = layout.codecs.split_last() else {
        if raw.len() as u64 > limit {
            return Err(format!("chunk has more than {limit} bytes"));
        }
        return Ok(raw.to_vec());
    };
    let mut data = last.decompress(raw, limit)?;
    for codec in earlier.iter().rev() {
        data = codec.decompress(&data, limit)?;
    }
    Ok(data)
}

/// One stored chunk of a numeric array, decoded into exactly Daf's bytes for the whole chunk
/// shape: little-endian elements in C order (edge chunks keep their padding).
pub fn decode_numeric_chunk(layout: &ChunkLayout, raw: &[u8]) -> Result<Vec<u8>, String> {
    let ArrayKind::Numeric(t, endian) = layout.kind else {
        return Err("not a numeric array".into());
    };
    let size = t.size();
    let chunk_bytes = within_limit(layout.chunk_len(), size, "one chunk")?;
    let size = size as usize;
    let mut data = decode_chunk(layout, raw, chunk_bytes)?;
    if data.len() as u64 != chunk_bytes {
        return Err(format!(
            "it decodes to {} bytes, {chunk_bytes} expected",
            data.len(),
        ));
    }
    if layout.fortran_order && layout.chunks.len() > 1 {
        data = fortran_to_c(&data, &layout.chunks, size);
    }
    if endian == Endian::Big {
        data.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
    Ok(data)
}

/// Assembles a numeric array from the chunks the store holds (missing chunks are fill).
pub fn assemble_numeric(
    layout: &ChunkLayout,
    chunks: &[(Vec<u64>, Arc<Blob>)],
) -> Result<Vec<u8>, String> {
    let ArrayKind::Numeric(t, _) = layout.kind else {
        return Err("not a numeric array".into());
    };
    let size = t.size();
    within_limit(layout.len(), size, "the array")?;
    within_limit(layout.chunk_len(), size, "one chunk")?;
    if layout.fill.len() as u64 != size {
        return Err("fill value does not match the dtype".into());
    }
    let size = size as usize;
    let mut out = layout.fill.repeat(layout.len() as usize);
    for (coord, stored) in chunks {
        let raw = stored.bytes().map_err(|e| e.to_string())?;
        let data = decode_numeric_chunk(layout, raw.as_slice())
            .map_err(|e| format!("chunk {coord:?}: {e}"))?;
        for_each_run(layout, coord, |from, to, run| {
            out[to * size..(to + run) * size]
                .copy_from_slice(&data[from * size..(from + run) * size]);
        });
    }
    Ok(out)
}

/// Assembles a string array into one vlen-utf8 buffer (missing chunks are empty strings).
/// Its header and lengths, the decoded chunks and the item table each stay within
/// [`MAX_DECODED_BYTES`].
pub fn assemble_strings(
    layout: &ChunkLayout,
    chunks: &[(Vec<u64>, Arc<Blob>)],
) -> Result<Vec<u8>, String> {
    // 16 bytes per item of bookkeeping bounds the output's 4 bytes per item too.
    within_limit(layout.len(), 16, "the string array")?;
    let chunk_len = layout.chunk_len();
    within_limit(chunk_len, 16, "one string chunk")?;
    let total = layout.len() as usize;
    let mut budget = MAX_DECODED_BYTES;
    let mut decoded = Vec::with_capacity(chunks.len());
    for (coord, stored) in chunks {
        let raw = stored.bytes().map_err(|e| e.to_string())?;
        let data = decode_chunk(layout, raw.as_slice(), budget)?;
        budget -= data.len() as u64;
        decoded.push((coord, data));
    }
    let mut values: Vec<&[u8]> = vec![b""; total];
    for (coord, data) in &decoded {
        let mut items = decode_vlen(data, chunk_len)?;
        if layout.fortran_order && layout.chunks.len() > 1 {
            // Reorder item references the same way as numeric elements.
            let order: Vec<u8> = (0..chunk_len as u32).flat_map(u32::to_le_bytes).collect();
            let reordered = fortran_to_c(&order, &layout.chunks, 4);
            items = reordered
                .chunks_exact(4)
                .map(|b| items[u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize])
                .collect();
        }
        for_each_run(layout, coord, |from, to, run| {
            values[to..to + run].copy_from_slice(&items[from..from + run]);
        });
    }
    Ok(encode_vlen(values.into_iter(), total))
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
