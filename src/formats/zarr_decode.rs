//! Decoding foreign Zarr v2 arrays into Daf's single contiguous chunk.
//!
//! Daf writes every array as one uncompressed chunk; other tools chunk and compress. This module
//! turns any supported array (several chunks, edge chunks, missing chunks = fill value, `order`
//! `F`, big-endian dtypes, the numcodecs compressors blosc/zstd/zlib/gzip/lz4/bz2, and the
//! `vlen-utf8` filter) into exactly the bytes Daf would have written: little-endian, C order of
//! the Zarr shape (= Julia's column-major order), or one vlen-utf8 buffer for strings.

use std::io::Read;
use std::sync::Arc;

use serde_json::Value;

use crate::stores::Blob;

use super::strings::{decode_vlen, encode_vlen};
use super::types::{Endian, NumType};

/// A compressor of the numcodecs family.
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

    /// Decompresses one chunk.
    pub fn decompress(self, data: &[u8]) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        let io = |r: std::io::Result<usize>| r.map(|_| ()).map_err(|e| e.to_string());
        match self {
            Compressor::Blosc => return crate::sys::blosc_decompress(data),
            Compressor::Zstd => {
                io(zstd::stream::read::Decoder::new(data)
                    .and_then(|mut d| d.read_to_end(&mut out)))?
            }
            Compressor::Zlib => io(flate2::read::ZlibDecoder::new(data).read_to_end(&mut out))?,
            Compressor::Gzip => io(flate2::read::MultiGzDecoder::new(data).read_to_end(&mut out))?,
            Compressor::Bz2 => io(bzip2::read::BzDecoder::new(data).read_to_end(&mut out))?,
            Compressor::Lz4 => {
                let header = data.get(..4).ok_or("lz4 chunk shorter than its header")?;
                let size =
                    u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
                out = lz4_flex::block::decompress(&data[4..], size).map_err(|e| e.to_string())?;
            }
        }
        Ok(out)
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
#[derive(Clone, Debug)]
pub struct ChunkLayout {
    /// Zarr shape.
    pub shape: Vec<u64>,
    /// Zarr chunk shape.
    pub chunks: Vec<u64>,
    /// Element kind.
    pub kind: ArrayKind,
    /// Compressor, if any.
    pub compressor: Option<Compressor>,
    /// Chunk bytes are in Fortran order.
    pub fortran_order: bool,
    /// One element of fill, little-endian (numeric), for missing chunks.
    pub fill: Vec<u8>,
    /// Chunk key separator (`.` or `/`).
    pub separator: String,
}

impl ChunkLayout {
    /// Number of elements of the array.
    pub fn len(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Chunk counts per dimension.
    pub fn grid(&self) -> Vec<u64> {
        self.shape
            .iter()
            .zip(&self.chunks)
            .map(|(s, c)| s.div_ceil(*c))
            .collect()
    }

    /// Every chunk coordinate, in C order.
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

fn decode_chunk(layout: &ChunkLayout, raw: &[u8]) -> Result<Vec<u8>, String> {
    match layout.compressor {
        Some(c) => c.decompress(raw),
        None => Ok(raw.to_vec()),
    }
}

/// Assembles a numeric array: `chunks` holds, per chunk coordinate (C order), the stored chunk
/// if there is one.
pub fn assemble_numeric(
    layout: &ChunkLayout,
    chunks: &[Option<Arc<Blob>>],
) -> Result<Vec<u8>, String> {
    let ArrayKind::Numeric(t, endian) = layout.kind else {
        return Err("not a numeric array".into());
    };
    let size = t.size() as usize;
    let mut out = layout.fill.repeat(layout.len() as usize);
    let chunk_len: u64 = layout.chunks.iter().product();
    for (coord, stored) in layout.chunk_coords().iter().zip(chunks) {
        let Some(stored) = stored else { continue };
        let raw = stored.bytes().map_err(|e| e.to_string())?;
        let mut data = decode_chunk(layout, raw.as_slice())?;
        if data.len() as u64 != chunk_len * size as u64 {
            return Err(format!(
                "chunk {coord:?} decodes to {} bytes, {} expected",
                data.len(),
                chunk_len * size as u64
            ));
        }
        if layout.fortran_order && layout.chunks.len() > 1 {
            data = fortran_to_c(&data, &layout.chunks, size);
        }
        if endian == Endian::Big {
            data.chunks_exact_mut(size).for_each(<[u8]>::reverse);
        }
        for_each_run(layout, coord, |from, to, run| {
            out[to * size..(to + run) * size]
                .copy_from_slice(&data[from * size..(from + run) * size]);
        });
    }
    Ok(out)
}

/// Assembles a string array into one vlen-utf8 buffer (missing chunks are empty strings).
pub fn assemble_strings(
    layout: &ChunkLayout,
    chunks: &[Option<Arc<Blob>>],
) -> Result<Vec<u8>, String> {
    let total = layout.len() as usize;
    let mut values: Vec<Vec<u8>> = vec![Vec::new(); total];
    let chunk_len: u64 = layout.chunks.iter().product();
    for (coord, stored) in layout.chunk_coords().iter().zip(chunks) {
        let Some(stored) = stored else { continue };
        let raw = stored.bytes().map_err(|e| e.to_string())?;
        let data = decode_chunk(layout, raw.as_slice())?;
        let items = decode_vlen(&data, chunk_len)?;
        let mut items: Vec<&[u8]> = items;
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
            for k in 0..run {
                values[to + k] = items[from + k].to_vec();
            }
        });
    }
    Ok(encode_vlen(values.iter().map(Vec::as_slice), total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::Bytes;

    fn blob(data: Vec<u8>) -> Option<Arc<Blob>> {
        Some(Blob::ready(Bytes::from_vec(data)))
    }

    fn layout(shape: &[u64], chunks: &[u64], t: NumType) -> ChunkLayout {
        ChunkLayout {
            shape: shape.to_vec(),
            chunks: chunks.to_vec(),
            kind: ArrayKind::Numeric(t, Endian::Little),
            compressor: None,
            fortran_order: false,
            fill: vec![0; t.size() as usize],
            separator: ".".into(),
        }
    }

    #[test]
    fn edge_chunks_and_missing_chunks_assemble_in_c_order() {
        // 3x5 u8 array in 2x2 chunks; chunk (1,2) missing (fill 9).
        let mut l = layout(&[3, 5], &[2, 2], NumType::UInt8);
        l.fill = vec![9];
        let full: Vec<u8> = (0..15).collect();
        let mut stored = Vec::new();
        for coord in l.chunk_coords() {
            if coord == [1, 2] {
                stored.push(None);
                continue;
            }
            let mut chunk = vec![0u8; 4];
            for i in 0..2 {
                for j in 0..2 {
                    let (r, c) = (coord[0] * 2 + i, coord[1] * 2 + j);
                    if r < 3 && c < 5 {
                        chunk[(i * 2 + j) as usize] = full[(r * 5 + c) as usize];
                    }
                }
            }
            stored.push(blob(chunk));
        }
        let out = assemble_numeric(&l, &stored).unwrap();
        let mut expected = full.clone();
        expected[14] = 9;
        assert_eq!(out, expected);
    }

    #[test]
    fn fortran_order_and_big_endian_are_normalised() {
        let mut l = layout(&[2, 3], &[2, 3], NumType::UInt16);
        l.fortran_order = true;
        l.kind = ArrayKind::Numeric(NumType::UInt16, Endian::Big);
        // C-order values 1..6 stored column-major, big-endian.
        let f_order = [1u16, 4, 2, 5, 3, 6];
        let chunk: Vec<u8> = f_order.iter().flat_map(|v| v.to_be_bytes()).collect();
        let out = assemble_numeric(&l, &[blob(chunk)]).unwrap();
        let expected: Vec<u8> = (1u16..=6).flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(out, expected);
    }

    #[test]
    fn every_compressor_decodes() {
        let data: Vec<u8> = (0..4000u32).flat_map(|v| (v % 97).to_le_bytes()).collect();
        use std::io::Write;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&data).unwrap();
        assert_eq!(
            Compressor::Zlib.decompress(&z.finish().unwrap()).unwrap(),
            data
        );
        let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        g.write_all(&data).unwrap();
        assert_eq!(
            Compressor::Gzip.decompress(&g.finish().unwrap()).unwrap(),
            data
        );
        assert_eq!(
            Compressor::Zstd
                .decompress(&zstd::encode_all(&data[..], 3).unwrap())
                .unwrap(),
            data
        );
        let mut lz = (data.len() as u32).to_le_bytes().to_vec();
        lz.extend(lz4_flex::block::compress(&data));
        assert_eq!(Compressor::Lz4.decompress(&lz).unwrap(), data);
        let mut b = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
        b.write_all(&data).unwrap();
        assert_eq!(
            Compressor::Bz2.decompress(&b.finish().unwrap()).unwrap(),
            data
        );
        assert!(Compressor::Blosc.decompress(b"not blosc").is_err());
        assert!(Compressor::parse(&serde_json::json!({"id": "lzma"})).is_err());
    }

    #[test]
    fn strings_assemble_across_chunks() {
        let l = ChunkLayout {
            kind: ArrayKind::Strings,
            fill: Vec::new(),
            ..layout(&[3], &[2], NumType::UInt8)
        };
        let c0 = encode_vlen([&b"a"[..], b"bb"].into_iter(), 2);
        let c1 = encode_vlen([&b"c"[..], b""].into_iter(), 2);
        let out = assemble_strings(&l, &[blob(c0), blob(c1)]).unwrap();
        assert_eq!(decode_vlen(&out, 3).unwrap(), vec![&b"a"[..], b"bb", b"c"]);
    }
}
