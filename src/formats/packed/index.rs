//! Where each inner chunk of a packed shard lies (`daf-formats.md` §8): from the Zarr shard index
//! (`u64 offset`, `u64 nbytes` per inner chunk, in C order of the inner chunk grid, all-ones for
//! an absent chunk, then an optional CRC-32C), at the start or the end of the shard; or, for a
//! FilesDaf `"zipped"` shard without that index, from the shard's own ZIP central directory.
//!
//! Every entry is checked against the shard before it is used: a CRC-32C mismatch, an entry
//! outside the shard or an index longer than the shard is an error, found at first access.
//!
//! A DataAxesFormats shard is also a ZIP archive whose entries carry a CRC-32 of each chunk
//! (of the decoded chunk for zstd and gzip entries, of the stored bytes for blosc): when the
//! shard has that framing, the index also gives each chunk's CRC-32, so that a damaged chunk
//! that still decompresses is refused rather than shown.

use std::path::Path;

use crate::stores::zip::parse_archive;
use crate::stores::Bytes;

use crate::formats::zarr::decode::MAX_DECODED_BYTES;

/// Where the chunks of a shard are found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IndexKind {
    /// A Zarr shard index at the start (or the end) of the shard, with or without a CRC-32C.
    Zarr {
        /// The index is at the start of the shard.
        at_start: bool,
        /// The index is followed by its CRC-32C.
        crc32c: bool,
    },
    /// No Zarr index: the shard's ZIP central directory names the chunks (`c/<i>/<j>`, or a
    /// gzip header for gzip chunks, as DataAxesFormats writes them).
    Zip,
}

/// The byte range of each inner chunk in the shard (C order of the inner chunk grid); `None`
/// for an absent chunk (fill value).
#[derive(Debug)]
pub struct ChunkIndex {
    /// One entry per inner chunk.
    pub entries: Vec<Option<(u64, u64)>>,
    /// The CRC-32 of each chunk, when the shard's ZIP framing records it (else empty).
    pub crcs: Vec<Option<ChunkCrc>>,
}

impl ChunkIndex {
    /// The CRC-32 recorded for chunk `n`, if any.
    pub fn crc(&self, n: u64) -> Option<ChunkCrc> {
        self.crcs.get(n as usize).copied().flatten()
    }
}

/// A CRC-32 a shard's ZIP framing records for one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkCrc {
    /// Of the chunk once decompressed (zstd and gzip entries).
    Decoded(u32),
    /// Of the chunk's stored bytes (a stored entry: blosc frames).
    Stored(u32),
}

const LOCAL_SIG: [u8; 4] = [0x50, 0x4b, 0x03, 0x04];

const ABSENT: u64 = u64::MAX;

/// Reads the index of `shard`, whose inner chunk grid is `grid` (chunks per dimension).
pub fn read_index(kind: IndexKind, shard: &Bytes, grid: &[u64]) -> Result<ChunkIndex, String> {
    let count = grid
        .iter()
        .try_fold(1u64, |acc, &n| acc.checked_mul(n))
        .filter(|&n| n.saturating_mul(16) <= MAX_DECODED_BYTES)
        .ok_or("shard index is too large")?;
    match kind {
        IndexKind::Zarr { at_start, crc32c } => {
            let mut index = zarr_index(shard.as_slice(), count, at_start, crc32c)?;
            // DataAxesFormats' dual format: a local file header right after a leading index.
            let index_len = count * 16 + if crc32c { 4 } else { 0 };
            let local = shard.slice(index_len, 4);
            if at_start && local.is_some_and(|b| b.as_slice() == LOCAL_SIG) {
                // The Zarr index stands on its own: a ZIP part that cannot be read only means
                // there are no CRC-32s to check against.
                if let Ok(zip) = zip_chunks(shard, grid) {
                    index.crcs = zip.crcs;
                }
            }
            Ok(index)
        }
        IndexKind::Zip => zip_chunks(shard, grid),
    }
}

fn zarr_index(data: &[u8], count: u64, at_start: bool, crc: bool) -> Result<ChunkIndex, String> {
    let body_len = count.checked_mul(16).ok_or("shard index is too large")?;
    let index_len = body_len + if crc { 4 } else { 0 };
    let total = data.len() as u64;
    if index_len > total {
        return Err(format!(
            "shard of {total} bytes is shorter than its index of {index_len} bytes"
        ));
    }
    let start = if at_start { 0 } else { total - index_len };
    let index = &data[start as usize..(start + index_len) as usize];
    let (body, tail) = index.split_at(body_len as usize);
    if crc {
        let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        let actual = crc32c::crc32c(body);
        if stored != actual {
            return Err(format!(
                "shard index CRC-32C mismatch (stored {stored:08x}, computed {actual:08x})"
            ));
        }
    }
    let mut entries = Vec::with_capacity(count as usize);
    for (i, entry) in body.chunks_exact(16).enumerate() {
        let word = |b: &[u8]| {
            let mut w = [0u8; 8];
            w.copy_from_slice(b);
            u64::from_le_bytes(w)
        };
        let (offset, nbytes) = (word(&entry[..8]), word(&entry[8..]));
        if offset == ABSENT && nbytes == ABSENT {
            entries.push(None);
            continue;
        }
        if offset.checked_add(nbytes).is_none_or(|end| end > total) {
            return Err(format!(
                "shard index entry {i} ({offset}+{nbytes}) lies outside the shard of {total} bytes"
            ));
        }
        entries.push(Some((offset, nbytes)));
    }
    Ok(ChunkIndex {
        entries,
        crcs: Vec::new(),
    })
}

/// The linear chunk number of a DataAxesFormats gzip chunk name: the 10-byte gzip header whose
/// four MTIME bytes are the base64 of the 3-byte big-endian chunk number.
fn gzip_name_chunk(name: &[u8]) -> Option<u64> {
    if name.len() != 10 || name[..3] != [0x1f, 0x8b, 0x08] {
        return None;
    }
    let digit = |c: u8| -> Option<u64> {
        Some(u64::from(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        }))
    };
    name[4..8]
        .iter()
        .try_fold(0u64, |acc, &c| Some(acc << 6 | digit(c)?))
}

/// The linear chunk number of a chunk name `c/<i>/<j>…` (zero-padded indices, Zarr order).
fn path_name_chunk(name: &str, grid: &[u64]) -> Option<u64> {
    let parts: Vec<&str> = name.strip_prefix("c/")?.split('/').collect();
    if parts.len() != grid.len() {
        return None;
    }
    parts.iter().zip(grid).try_fold(0u64, |acc, (part, &n)| {
        let i: u64 = part
            .parse()
            .ok()
            .filter(|_| part.bytes().all(|b| b.is_ascii_digit()))?;
        (i < n).then(|| acc * n + i)
    })
}

/// The chunks of a `"zipped"` shard, from its ZIP central directory (`codec.json` and other
/// names are skipped). A gzip chunk (method 8) is the whole gzip stream DataAxesFormats lays
/// out: its header is the entry name, its trailer follows the deflate data.
fn zip_chunks(shard: &Bytes, grid: &[u64]) -> Result<ChunkIndex, String> {
    let count: u64 = grid.iter().product();
    let archive =
        parse_archive(Path::new("packed shard"), shard.clone()).map_err(|e| e.to_string())?;
    let data = shard.as_slice();
    let mut entries = vec![None; count as usize];
    let mut crcs = vec![None; count as usize];
    for record in &archive.records {
        let at = record.raw_range.0 as usize;
        let name_len = u16::from_le_bytes([data[at + 28], data[at + 29]]) as usize;
        let raw_name = &data[at + 46..at + 46 + name_len];
        let crc = match record.method {
            0 => ChunkCrc::Stored(record.crc32),
            _ => ChunkCrc::Decoded(record.crc32),
        };
        let chunk = match record.method {
            8 => gzip_name_chunk(raw_name),
            _ => path_name_chunk(&record.name, grid),
        };
        let Some(chunk) = chunk else {
            continue;
        };
        // A defect means the local header cannot be trusted: nothing of it is read.
        if let Some(defect) = &record.defect {
            return Err(format!("chunk {chunk}: {defect}"));
        }
        let range = match record.method {
            8 => {
                let local = record.local_header_offset as usize;
                let extra = u16::from_le_bytes([data[local + 28], data[local + 29]]);
                let start = record.local_header_offset + 30;
                let end = record.data_offset + record.compressed_size + 8;
                if extra != 0 || end > data.len() as u64 {
                    return Err(format!(
                        "gzip chunk {chunk} is not laid out as a gzip stream"
                    ));
                }
                (start, end - start)
            }
            0 | 93 => (record.data_offset, record.compressed_size),
            method => return Err(format!("chunk {chunk} has ZIP method {method}")),
        };
        let slot = entries
            .get_mut(chunk as usize)
            .ok_or_else(|| format!("chunk {chunk} is outside the grid"))?;
        *slot = Some(range);
        crcs[chunk as usize] = Some(crc);
    }
    Ok(ChunkIndex { entries, crcs })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index of the worked example of `daf-formats.md` §8 (1200 Float64, inner 1024, zstd).
    pub(crate) const SPEC_INDEX: [u8; 36] = [
        0x59, 0, 0, 0, 0, 0, 0, 0, 0xc0, 0x03, 0, 0, 0, 0, 0, 0, //
        0x4e, 0x04, 0, 0, 0, 0, 0, 0, 0xe6, 0, 0, 0, 0, 0, 0, 0, //
        0x8a, 0xde, 0x31, 0x90,
    ];

    #[test]
    fn the_spec_example_index_checks_out() {
        let mut shard = SPEC_INDEX.to_vec();
        shard.resize(1102 + 230 + 200, 0);
        let index = zarr_index(&shard, 2, true, true).unwrap();
        assert_eq!(index.entries, vec![Some((89, 960)), Some((1102, 230))]);
        // One flipped bit anywhere in the index is a CRC-32C mismatch.
        shard[9] ^= 0x10;
        let e = zarr_index(&shard, 2, true, true).unwrap_err();
        assert!(e.contains("CRC-32C mismatch"), "{e}");
    }

    #[test]
    fn entries_outside_the_shard_and_short_shards_are_refused() {
        let mut shard = SPEC_INDEX.to_vec();
        shard.resize(1200, 0); // chunk 1 ends at 1332
        let e = zarr_index(&shard, 2, true, true).unwrap_err();
        assert!(e.contains("entry 1"), "{e}");
        assert!(zarr_index(&shard[..30], 2, true, true).is_err());
    }

    #[test]
    fn absent_chunks_and_an_index_at_the_end() {
        let mut shard = vec![0u8; 10];
        shard.extend_from_slice(&[0xff; 16]);
        shard.extend_from_slice(&2u64.to_le_bytes());
        shard.extend_from_slice(&8u64.to_le_bytes());
        let index = zarr_index(&shard, 2, false, false).unwrap();
        assert_eq!(index.entries, vec![None, Some((2, 8))]);
    }

    #[test]
    fn chunk_names() {
        assert_eq!(path_name_chunk("c/1/0", &[8, 2]), Some(2));
        assert_eq!(path_name_chunk("c/07/1", &[8, 2]), Some(15));
        assert_eq!(path_name_chunk("c/8/0", &[8, 2]), None);
        assert_eq!(path_name_chunk("codec.json", &[8, 2]), None);
        let header = |b64: &[u8; 4]| {
            let mut n = vec![0x1f, 0x8b, 0x08, 0x01];
            n.extend_from_slice(b64);
            n.extend_from_slice(&[0x02, 0xff]);
            n
        };
        assert_eq!(gzip_name_chunk(&header(b"AAAA")), Some(0));
        assert_eq!(gzip_name_chunk(&header(b"AAAB")), Some(1));
        assert_eq!(gzip_name_chunk(&header(b"AABA")), Some(64));
        assert_eq!(gzip_name_chunk(&header(b"AAEA")), Some(256));
    }
}
