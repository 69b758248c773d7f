//! String arrays in their two encodings, and lazy conversion between them.
//!
//! FilesDaf keeps strings as text, one value per `\n`-terminated line (`.txt`, `.nztxt`); Zarr
//! keeps them as vlen-utf8 chunks (`u32 count`, then `u32 length` + bytes per item, all
//! little-endian). A [`Strings`] holds whichever form the source has and makes the other on first
//! use, once; its size is known in advance from the source size whenever possible.

use std::sync::{Arc, OnceLock};

use crate::stores::{Blob, Bytes, StoreError};

use super::types::NumType;
use crate::formats::zarr::decode::MAX_DECODED_BYTES;

/// Encodes `count` items as one vlen-utf8 buffer.
pub fn encode_vlen<'a>(items: impl Iterator<Item = &'a [u8]>, count: usize) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(count as u32).to_le_bytes());
    for item in items {
        out.extend_from_slice(&(item.len() as u32).to_le_bytes());
        out.extend_from_slice(item);
    }
    out
}

/// Splits a vlen-utf8 buffer into its items, checking the header count against `expected`.
pub fn decode_vlen(data: &[u8], expected: u64) -> Result<Vec<&[u8]>, String> {
    // The count is checked against the buffer before anything is allocated for it.
    let mut items = Vec::with_capacity(vlen_count(data, expected)? as usize);
    walk_vlen(data, expected, |item| items.push(item))?;
    Ok(items)
}

/// Checks that a vlen-utf8 buffer holds exactly `expected` well-formed items, without
/// allocating (an axis of millions of entries is checked at mount).
pub fn check_vlen(data: &[u8], expected: u64) -> Result<(), String> {
    walk_vlen(data, expected, |_| {})
}

/// The item count of a vlen-utf8 buffer: its header, which must be `expected` and fit the
/// buffer (every item takes at least its 4-byte length).
fn vlen_count(data: &[u8], expected: u64) -> Result<u32, String> {
    let header = data
        .get(..4)
        .ok_or("vlen-utf8 buffer shorter than its header")?;
    let count = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    if u64::from(count) != expected {
        return Err(format!(
            "vlen-utf8 buffer holds {count} items, {expected} expected"
        ));
    }
    if u64::from(count) > (data.len() as u64 - 4) / 4 {
        return Err(format!(
            "vlen-utf8 buffer of {} bytes cannot hold {count} items",
            data.len()
        ));
    }
    Ok(count)
}

/// Calls `each` with every item of a vlen-utf8 buffer, checking its whole structure.
fn walk_vlen<'a>(
    data: &'a [u8],
    expected: u64,
    mut each: impl FnMut(&'a [u8]),
) -> Result<(), String> {
    let count = vlen_count(data, expected)?;
    let mut at = 4usize;
    for _ in 0..count {
        let len = data.get(at..at + 4).ok_or("vlen-utf8 buffer cut short")?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let item = at
            .checked_add(4 + len)
            .and_then(|end| data.get(at + 4..end))
            .ok_or("vlen-utf8 item runs past the buffer")?;
        each(item);
        at += 4 + len;
    }
    if at != data.len() {
        return Err(format!(
            "vlen-utf8 buffer has {} trailing bytes",
            data.len() - at
        ));
    }
    Ok(())
}

/// Splits `\n`-terminated text into exactly `expected` lines.
pub fn split_lines(text: &[u8], expected: u64) -> Result<Vec<&[u8]>, String> {
    if text.is_empty() {
        return if expected == 0 {
            Ok(Vec::new())
        } else {
            Err(format!("empty text, {expected} lines expected"))
        };
    }
    if text.last() != Some(&b'\n') {
        return Err("text does not end with a newline".into());
    }
    let lines: Vec<&[u8]> = text[..text.len() - 1].split(|&b| b == b'\n').collect();
    if lines.len() as u64 != expected {
        return Err(format!(
            "text has {} lines, {expected} expected",
            lines.len()
        ));
    }
    Ok(lines)
}

/// Counts the lines of `\n`-terminated text (an axis file), checking it is well formed.
pub fn count_lines(text: &[u8]) -> Result<u64, String> {
    if text.is_empty() {
        return Ok(0);
    }
    if text.last() != Some(&b'\n') {
        return Err("text does not end with a newline".into());
    }
    Ok(memchr::memchr_iter(b'\n', text).count() as u64)
}

fn lines_from_items(items: &[&[u8]]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(items.iter().map(|i| i.len() + 1).sum());
    for item in items {
        if item.contains(&b'\n') {
            return Err(
                "a string value contains a newline, which FilesDaf text cannot hold".into(),
            );
        }
        out.extend_from_slice(item);
        out.push(b'\n');
    }
    Ok(out)
}

fn produce_error(what: &str, e: String) -> StoreError {
    StoreError::Produce(format!("{what}: {e}"))
}

/// A string array of known length, in whichever encoding the source had. Boxed: a model
/// `Payload` holds one inline, and most properties are numbers (a pointer instead of 64 bytes).
#[derive(Debug)]
pub struct Strings(Box<StringsInner>);

/// What a [`Strings`] holds.
#[derive(Debug)]
struct StringsInner {
    count: u64,
    /// The property it belongs to, named in conversion errors.
    name: Box<str>,
    lines: OnceLock<Arc<Blob>>,
    vlen: OnceLock<Arc<Blob>>,
}

impl Strings {
    /// Strings stored as `\n`-terminated text lines.
    pub fn from_lines(blob: Arc<Blob>, count: u64) -> Strings {
        let lines = OnceLock::new();
        let _ = lines.set(blob);
        Strings(Box::new(StringsInner {
            count,
            name: Box::default(),
            lines,
            vlen: OnceLock::new(),
        }))
    }

    /// Strings stored as one vlen-utf8 buffer.
    pub fn from_vlen(blob: Arc<Blob>, count: u64) -> Strings {
        let vlen = OnceLock::new();
        let _ = vlen.set(blob);
        Strings(Box::new(StringsInner {
            count,
            name: Box::default(),
            lines: OnceLock::new(),
            vlen,
        }))
    }

    /// The same strings, named `name` (a property or axis key) in conversion errors.
    pub fn named(mut self, name: impl Into<String>) -> Strings {
        self.0.name = name.into().into_boxed_str();
        self
    }

    /// Number of strings.
    pub fn count(&self) -> u64 {
        self.0.count
    }

    /// The text-lines form (the source blob itself, or converted once from vlen).
    pub fn lines(&self) -> Arc<Blob> {
        let count = self.0.count;
        let what = format!("{}: vlen-utf8 to text", self.0.name);
        self.0
            .lines
            .get_or_init(|| {
                let vlen = self
                    .0
                    .vlen
                    .get()
                    .cloned()
                    .unwrap_or_else(|| Blob::ready(Bytes::empty()));
                // Each item loses its 4-byte length and gains a newline.
                let len = vlen
                    .known_len()
                    .map(|n| n.saturating_sub(count.saturating_mul(3).saturating_add(4)));
                Blob::lazy(len, move || {
                    let data = vlen.bytes()?;
                    let items =
                        decode_vlen(data.as_slice(), count).map_err(|e| produce_error(&what, e))?;
                    Ok(Bytes::from_vec(
                        lines_from_items(&items).map_err(|e| produce_error(&what, e))?,
                    ))
                })
            })
            .clone()
    }

    /// The vlen-utf8 form (the source blob itself, or converted once from text lines).
    pub fn vlen(&self) -> Arc<Blob> {
        let count = self.0.count;
        let what = format!("{}: text to vlen-utf8", self.0.name);
        self.0
            .vlen
            .get_or_init(|| {
                let lines = self
                    .0
                    .lines
                    .get()
                    .cloned()
                    .unwrap_or_else(|| Blob::ready(Bytes::empty()));
                let len = lines
                    .known_len()
                    .and_then(|n| n.checked_add(count.checked_mul(3)?.checked_add(4)?));
                Blob::lazy(len, move || {
                    let data = lines.bytes()?;
                    let items =
                        split_lines(data.as_slice(), count).map_err(|e| produce_error(&what, e))?;
                    Ok(Bytes::from_vec(encode_vlen(
                        items.into_iter(),
                        count as usize,
                    )))
                })
            })
            .clone()
    }
}

/// Where the stored values of a sparse string property sit in its dense array.
#[derive(Clone, Debug)]
pub enum SparsePositions {
    /// A vector: 1-based positions (`nzind`).
    Vector {
        /// The `nzind` blob.
        nzind: Arc<Blob>,
    },
    /// A matrix (column-major): `colptr` (ncols+1, 1-based) and 1-based `rowval`.
    Matrix {
        /// The `colptr` blob.
        colptr: Arc<Blob>,
        /// The `rowval` blob.
        rowval: Arc<Blob>,
        /// Number of rows.
        nrows: u64,
        /// Number of columns.
        ncols: u64,
    },
}

/// The dense vlen-utf8 form of a sparse string property (empty strings where nothing is stored),
/// as Zarr stores every string array.
pub fn densify_sparse_strings(
    positions: SparsePositions,
    indtype: NumType,
    nztxt: Arc<Blob>,
    nnz: u64,
    dense_len: u64,
    name: &str,
) -> Strings {
    let what = format!("{name}: sparse strings to vlen-utf8");
    // Dense buffer: header, a length per element, and the bytes of the non-empty values.
    let len = nztxt.known_len().and_then(|n| {
        dense_len
            .checked_mul(4)?
            .checked_add(4)?
            .checked_add(n.saturating_sub(nnz))
    });
    let blob = Blob::lazy(len, move || {
        let what = what.as_str();
        // 16 bytes of bookkeeping per element: bounded like any decoded array.
        if dense_len.saturating_mul(16) > MAX_DECODED_BYTES {
            return Err(produce_error(
                what,
                format!(
                    "{dense_len} elements, more than the limit of {} MiB allows",
                    MAX_DECODED_BYTES >> 20
                ),
            ));
        }
        let text = nztxt.bytes()?;
        let values = split_lines(text.as_slice(), nnz).map_err(|e| produce_error(what, e))?;
        let linear =
            linear_positions(&positions, indtype, nnz).map_err(|e| produce_error(what, e))?;
        let mut dense: Vec<&[u8]> = vec![b""; dense_len as usize];
        for (pos, value) in linear.into_iter().zip(values) {
            let slot = dense
                .get_mut(pos as usize)
                .ok_or_else(|| produce_error(what, format!("position {pos} out of range")))?;
            *slot = value;
        }
        Ok(Bytes::from_vec(encode_vlen(
            dense.into_iter(),
            dense_len as usize,
        )))
    });
    Strings::from_vlen(blob, dense_len).named(name)
}

/// 0-based linear (column-major) positions of the stored values.
fn linear_positions(
    positions: &SparsePositions,
    indtype: NumType,
    nnz: u64,
) -> Result<Vec<u64>, String> {
    let read_all = |blob: &Arc<Blob>, count: u64| -> Result<Vec<u64>, String> {
        let data = blob.bytes().map_err(|e| e.to_string())?;
        (0..count as usize)
            .map(|i| {
                indtype
                    .read_index(data.as_slice(), i)
                    .ok_or_else(|| format!("bad index at {i}"))
            })
            .collect()
    };
    match positions {
        SparsePositions::Vector { nzind } => read_all(nzind, nnz)?
            .into_iter()
            .map(|p| {
                p.checked_sub(1)
                    .ok_or_else(|| "index 0 in nzind".to_string())
            })
            .collect(),
        SparsePositions::Matrix {
            colptr,
            rowval,
            nrows,
            ncols,
        } => {
            let colptr = read_all(colptr, ncols + 1)?;
            let rows = read_all(rowval, nnz)?;
            let mut out = Vec::with_capacity(nnz as usize);
            for col in 0..*ncols as usize {
                let (start, end) = (colptr[col], colptr[col + 1]);
                if start == 0 || end < start || end - 1 > nnz {
                    return Err(format!("bad colptr at column {}", col + 1));
                }
                for k in start - 1..end - 1 {
                    let row = rows[k as usize];
                    if row == 0 || row > *nrows {
                        return Err(format!("row {row} out of range"));
                    }
                    out.push(col as u64 * nrows + row - 1);
                }
            }
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(data: &[u8]) -> Arc<Blob> {
        Blob::ready(Bytes::from_vec(data.to_vec()))
    }

    #[test]
    fn text_and_vlen_convert_both_ways_with_exact_sizes() {
        let vlen = b"\x03\x00\x00\x00\x01\x00\x00\x00T\x01\x00\x00\x00B\x01\x00\x00\x00T".to_vec();
        let from_text = Strings::from_lines(ready(b"T\nB\nT\n"), 3);
        let v = from_text.vlen();
        assert_eq!(v.known_len(), Some(vlen.len() as u64));
        assert_eq!(v.bytes().unwrap().as_slice(), vlen.as_slice());
        let from_vlen = Strings::from_vlen(ready(&vlen), 3);
        let l = from_vlen.lines();
        assert_eq!(l.known_len(), Some(6));
        assert_eq!(l.bytes().unwrap().as_slice(), b"T\nB\nT\n");
        // The same blob is returned on every call: converted once.
        assert!(Arc::ptr_eq(&l, &from_vlen.lines()));
    }

    #[test]
    fn empty_arrays_and_bad_inputs() {
        let empty = Strings::from_lines(ready(b""), 0);
        assert_eq!(empty.vlen().bytes().unwrap().as_slice(), &[0, 0, 0, 0]);
        let wrong_count = Strings::from_lines(ready(b"a\nb\n"), 3);
        assert!(wrong_count.vlen().bytes().is_err());
        let newline = Strings::from_vlen(ready(b"\x01\x00\x00\x00\x03\x00\x00\x00a\nb"), 1);
        assert!(newline.lines().bytes().is_err());
        assert_eq!(count_lines(b"c1\nc2\nc3\n"), Ok(3));
        assert!(count_lines(b"c1\nc2").is_err());
        assert!(decode_vlen(b"\x01\x00\x00\x00\x09\x00\x00\x00ab", 1).is_err());
        assert!(check_vlen(b"\x01\x00\x00\x00\x09\x00\x00\x00ab", 1).is_err());
        assert!(check_vlen(b"\x01\x00\x00\x00\x02\x00\x00\x00ab", 1).is_ok());
        assert!(check_vlen(b"\x01\x00\x00\x00\x01\x00\x00\x00ab", 1).is_err());
        assert!(check_vlen(b"\xff\xff\xff\xff", u64::from(u32::MAX)).is_err());
    }

    #[test]
    fn sparse_strings_densify_for_vectors_and_matrices() {
        let nzind: Vec<u8> = [2u32, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        let dense = densify_sparse_strings(
            SparsePositions::Vector {
                nzind: ready(&nzind),
            },
            NumType::UInt32,
            ready(b"x\nyz\n"),
            2,
            4,
            "v",
        );
        let bytes = dense.vlen().bytes().unwrap();
        assert_eq!(dense.vlen().known_len(), Some(bytes.len()));
        assert_eq!(
            decode_vlen(bytes.as_slice(), 4).unwrap(),
            vec![&b""[..], b"x", b"yz", b""]
        );
        // 2x2 matrix, value at (row 2, col 1) and (row 1, col 2).
        let colptr: Vec<u8> = [1u8, 2, 3].to_vec();
        let rowval: Vec<u8> = [2u8, 1].to_vec();
        let m = densify_sparse_strings(
            SparsePositions::Matrix {
                colptr: ready(&colptr),
                rowval: ready(&rowval),
                nrows: 2,
                ncols: 2,
            },
            NumType::UInt8,
            ready(b"a\nb\n"),
            2,
            4,
            "m",
        );
        let bytes = m.vlen().bytes().unwrap();
        assert_eq!(
            decode_vlen(bytes.as_slice(), 4).unwrap(),
            vec![&b""[..], b"a", b"b", b""]
        );
    }
}
