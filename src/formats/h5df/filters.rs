//! The HDF5 filter pipelines DataAxesFormats writes (`h5df-format.md` §8.2), undone one chunk at
//! a time: deflate (1), shuffle (2), Blosc (32001), bitshuffle (32008, with its LZ4 or zstd
//! blocks) and Zstandard (32015). Every filter is optional in HDF5: a chunk a filter could not
//! shrink is stored without it, which its chunk's filter mask says (bit `i` set: filter `i` of
//! the pipeline was skipped).
//!
//! Decoding is bounded: every decompressor is cut off at the size the chunk must have (its full
//! chunk shape, edge chunks included), and a chunk that decodes to any other size is an error.

use crate::formats::zarr::decode::Compressor;

/// HDF5's deflate filter.
pub const DEFLATE: u32 = 1;
/// HDF5's byte shuffle filter.
pub const SHUFFLE: u32 = 2;
/// The Blosc plugin filter.
pub const BLOSC: u32 = 32001;
/// The bitshuffle plugin filter.
pub const BITSHUFFLE: u32 = 32008;
/// The Zstandard plugin filter.
pub const ZSTD: u32 = 32015;

/// One filter of a dataset's pipeline: its id and client data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// The HDF5 filter id.
    pub id: u32,
    /// Its `cd_values` as stored.
    pub cd_values: Vec<u32>,
}

/// Checks that every filter of `pipeline` can be undone here.
pub fn check_pipeline(pipeline: &[Filter]) -> Result<(), String> {
    for filter in pipeline {
        match filter.id {
            DEFLATE | SHUFFLE | BLOSC | ZSTD => {}
            BITSHUFFLE => {
                let compression = filter.cd_values.get(4).copied().unwrap_or(0);
                if !matches!(compression, 0 | 2 | 3) {
                    return Err(format!(
                        "bitshuffle compression {compression} is not supported"
                    ));
                }
            }
            other => return Err(format!("HDF5 filter {other} is not supported")),
        }
    }
    Ok(())
}

/// Undoes `pipeline` on the stored bytes of one chunk whose decoded content is `chunk_bytes`
/// bytes of `elem_size`-byte elements, skipping the filters `mask` says were not applied.
pub fn decode_chunk(
    pipeline: &[Filter],
    mask: u32,
    stored: &[u8],
    elem_size: usize,
    chunk_bytes: usize,
) -> Result<Vec<u8>, String> {
    let mut data = stored.to_vec();
    for (position, filter) in pipeline.iter().enumerate().rev() {
        if position < 32 && mask & (1 << position) != 0 {
            continue;
        }
        let limit = chunk_bytes as u64;
        data = match filter.id {
            DEFLATE => Compressor::Zlib.decompress(&data, limit)?,
            ZSTD => Compressor::Zstd.decompress(&data, limit)?,
            BLOSC => Compressor::Blosc.decompress(&data, limit)?,
            SHUFFLE => {
                let size = filter
                    .cd_values
                    .first()
                    .map_or(elem_size, |&s| s as usize)
                    .max(1);
                unshuffle(&data, size)
            }
            BITSHUFFLE => {
                let size = filter
                    .cd_values
                    .get(2)
                    .map_or(elem_size, |&s| s as usize)
                    .max(1);
                let compression = filter.cd_values.get(4).copied().unwrap_or(0);
                bitshuffle_decode(&data, size, compression, chunk_bytes)?
            }
            other => return Err(format!("HDF5 filter {other} is not supported")),
        };
    }
    if data.len() != chunk_bytes {
        return Err(format!(
            "chunk decodes to {} bytes, {chunk_bytes} expected",
            data.len()
        ));
    }
    Ok(data)
}

/// Undoes HDF5's byte shuffle: byte `j` of element `i` was stored at `j × n + i`; trailing
/// bytes that make no whole element are stored as they are.
pub fn unshuffle(data: &[u8], size: usize) -> Vec<u8> {
    let n = data.len() / size;
    if size <= 1 || n <= 1 {
        return data.to_vec();
    }
    let mut out = vec![0u8; data.len()];
    for j in 0..size {
        let plane = &data[j * n..(j + 1) * n];
        for (i, &byte) in plane.iter().enumerate() {
            out[i * size + j] = byte;
        }
    }
    out[n * size..].copy_from_slice(&data[n * size..]);
    out
}

/// Undoes bitshuffle's bit transpose of `n` elements (`n` a multiple of 8) of `size` bytes: bit
/// `b` of byte `j` of element `i` was stored as bit `i mod 8` of byte `(8j + b) × n/8 + i/8`.
pub fn bit_unshuffle(data: &[u8], size: usize) -> Vec<u8> {
    let n = data.len() / size;
    let row = n / 8;
    let mut out = vec![0u8; data.len()];
    for j in 0..size {
        for b in 0..8 {
            let plane = &data[(8 * j + b) * row..(8 * j + b + 1) * row];
            for (k, &bits) in plane.iter().enumerate() {
                if bits == 0 {
                    continue;
                }
                for bit in 0..8 {
                    if bits & (1 << bit) != 0 {
                        out[(8 * k + bit) * size + j] |= 1 << b;
                    }
                }
            }
        }
    }
    out
}

fn be_u32(data: &[u8], at: usize) -> Result<u32, String> {
    let bytes = data
        .get(at..at + 4)
        .ok_or("bitshuffle chunk shorter than its header")?;
    Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// Decodes a bitshuffle filter chunk: a header (`u64` BE decoded size, `u32` BE block size in
/// bytes), then per block (the last one cut to a multiple of 8 elements) its `u32` BE
/// compressed size and the compressed bit-shuffled block (`compression` 2 = LZ4, 3 = zstd) or,
/// uncompressed (0), the bit-shuffled block itself; the elements past the last multiple of 8
/// follow as they are.
pub fn bitshuffle_decode(
    data: &[u8],
    size: usize,
    compression: u32,
    limit: usize,
) -> Result<Vec<u8>, String> {
    let head = data
        .get(..12)
        .ok_or("bitshuffle chunk shorter than its header")?;
    let total = u64::from_be_bytes([
        head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7],
    ]);
    if total > limit as u64 {
        return Err(format!(
            "bitshuffle chunk declares {total} bytes, {limit} expected"
        ));
    }
    let total = total as usize;
    let mut block_bytes = be_u32(data, 8)? as usize;
    if block_bytes == 0 {
        block_bytes = 8192;
    }
    let block_elems = (block_bytes / size).max(8) / 8 * 8;
    let elems = total / size;
    let mut out = Vec::with_capacity(total);
    let mut at = 12;
    let mut done = 0;
    while elems - done >= 8 {
        let count = block_elems.min((elems - done) / 8 * 8);
        let nbytes = count * size;
        let block = if compression == 0 {
            let block = data
                .get(at..at + nbytes)
                .ok_or("bitshuffle block is cut short")?;
            at += nbytes;
            block.to_vec()
        } else {
            let stored = be_u32(data, at)? as usize;
            at += 4;
            let body = data
                .get(at..at + stored)
                .ok_or("bitshuffle block is cut short")?;
            at += stored;
            let block = match compression {
                3 => Compressor::Zstd.decompress(body, nbytes as u64)?,
                2 => lz4_flex::block::decompress(body, nbytes).map_err(|e| e.to_string())?,
                other => return Err(format!("bitshuffle compression {other} is not supported")),
            };
            if block.len() != nbytes {
                return Err(format!(
                    "bitshuffle block decodes to {} bytes, {nbytes} expected",
                    block.len()
                ));
            }
            block
        };
        out.extend(bit_unshuffle(&block, size));
        done += count;
    }
    let rest = total - out.len();
    let tail = data
        .get(at..at + rest)
        .ok_or("bitshuffle chunk is cut short")?;
    out.extend_from_slice(tail);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bitshuffle's transpose, written from its definition (the inverse of [`bit_unshuffle`]).
    fn bit_shuffle(data: &[u8], size: usize) -> Vec<u8> {
        let n = data.len() / size;
        let mut out = vec![0u8; data.len()];
        for i in 0..n {
            for j in 0..size {
                for b in 0..8 {
                    if data[i * size + j] & (1 << b) != 0 {
                        out[(8 * j + b) * (n / 8) + i / 8] |= 1 << (i % 8);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn shuffles_are_undone() {
        let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(37)).collect();
        assert_eq!(bit_unshuffle(&bit_shuffle(&data, 4), 4), data);
        let mut shuffled = vec![0u8; 10];
        // Two 4-byte elements and 2 trailing bytes.
        let plain = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        for i in 0..2 {
            for j in 0..4 {
                shuffled[j * 2 + i] = plain[i * 4 + j];
            }
        }
        shuffled[8..].copy_from_slice(&plain[8..]);
        assert_eq!(unshuffle(&shuffled, 4), plain);
    }

    #[test]
    fn a_bitshuffle_chunk_with_a_tail_is_decoded_and_a_bad_one_refused() {
        let data: Vec<u8> = (0..(19 * 8)).map(|i| (i * 7 % 251) as u8).collect();
        let body = bit_shuffle(&data[..16 * 8], 8);
        let frame = zstd::bulk::compress(&body, 3).unwrap();
        let mut chunk = (data.len() as u64).to_be_bytes().to_vec();
        chunk.extend(8192u32.to_be_bytes());
        chunk.extend((frame.len() as u32).to_be_bytes());
        chunk.extend(&frame);
        chunk.extend(&data[16 * 8..]);
        let pipeline = [Filter {
            id: BITSHUFFLE,
            cd_values: vec![0, 4, 8, 0, 3, 5],
        }];
        assert_eq!(
            decode_chunk(&pipeline, 0, &chunk, 8, data.len()).unwrap(),
            data
        );
        // The filter mask says the chunk was stored as it is.
        assert_eq!(
            decode_chunk(&pipeline, 1, &data, 8, data.len()).unwrap(),
            data
        );
        let mut broken = chunk.clone();
        broken[20] ^= 0xff;
        assert!(decode_chunk(&pipeline, 0, &broken, 8, data.len()).is_err());
        assert!(decode_chunk(&pipeline, 0, &chunk, 8, data.len() - 8).is_err());
        assert!(check_pipeline(&[Filter {
            id: 307,
            cd_values: vec![]
        }])
        .is_err());
    }
}
