//! The arrays of the AnnData view that are not the source's bytes, made by range when read
//! (`anndata-view.md` §4.6): the 0-based sparse `indices`/`indptr` (Daf's 1-based `rowval` and
//! `colptr` less one, widened to the index types scipy accepts), a sparse vector densified, the
//! `data` of ones of an all-true Bool sparse matrix, and a String matrix stored only as
//! (obs, var) reordered to C order.
//!
//! A read of bytes `[a, b)` makes only the 1 MiB pieces it touches, from the matching elements
//! of its source (a mapped range, or a packed array's decoded chunks), and keeps them in the
//! mount's decode cache (bounded): nothing here is ever made whole.

use std::sync::Arc;

use crate::formats::strings::{decode_vlen, encode_vlen, Strings};
use crate::formats::types::NumType;
use crate::stores::blob::RangeSource;
use crate::stores::decode_cache::cache;
use crate::stores::{Blob, Bytes, StoreError};

/// A read of more than this many bytes at once (a whole-blob read of a large derived array) is
/// refused, as a decoded array larger than this is.
const MAX_WHOLE: u64 = crate::formats::zarr::decode::MAX_DECODED_BYTES;

/// The bytes of a derived array made at once and kept in the decode cache (a multiple of every
/// element size).
const PIECE: u64 = 1 << 20;

/// The index type scipy accepts for a Daf index type (`anndata-view.md` §4.2): `int32` for
/// Int32 and narrower, `int64` for Int64, UInt32 and UInt64.
pub fn widened(indtype: NumType) -> NumType {
    match indtype {
        NumType::Int64 | NumType::UInt32 | NumType::UInt64 => NumType::Int64,
        _ => NumType::Int32,
    }
}

fn produce(what: &str, why: impl std::fmt::Display) -> StoreError {
    StoreError::Produce(format!("{what}: {why}"))
}

/// An array made element by element from the source's arrays.
trait Elements: Send + Sync + 'static {
    /// The bytes of one element.
    fn size(&self) -> u64;
    /// Elements `[first, first + count)`.
    fn make(&self, first: u64, count: u64) -> Result<Vec<u8>, StoreError>;
    /// The array, named in errors.
    fn what(&self) -> &str;
}

/// A derived array of `len` bytes served by range: made [`PIECE`] by piece, each piece once while
/// the decode cache keeps it (bounded, shared with every decoded array of the mount).
struct Pieces<E> {
    elements: E,
    len: u64,
    /// Its key in the decode cache.
    owner: u64,
}

impl<E: Elements> Pieces<E> {
    fn blob(elements: E, len: u64) -> Arc<Blob> {
        let owner = cache().owner();
        Blob::ranged(
            len,
            Arc::new(Pieces {
                elements,
                len,
                owner,
            }),
        )
    }

    fn piece(&self, index: u64) -> Result<Arc<Vec<u8>>, StoreError> {
        if let Some(bytes) = cache().get(self.owner, index) {
            return Ok(bytes);
        }
        let start = index * PIECE;
        let size = self.elements.size();
        let made = self
            .elements
            .make(start / size, (PIECE.min(self.len - start)) / size)?;
        let made = Arc::new(made);
        cache().insert(self.owner, index, made.clone());
        Ok(made)
    }
}

impl<E: Elements> RangeSource for Pieces<E> {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        if len > MAX_WHOLE {
            return Err(produce(
                self.elements.what(),
                "a read larger than a decoded array may be",
            ));
        }
        let (first, last) = (offset / PIECE, (offset + len - 1) / PIECE);
        if first == last {
            let piece = Bytes::from_shared(self.piece(first)?);
            return piece
                .slice(offset - first * PIECE, len)
                .ok_or_else(|| produce(self.elements.what(), "a range outside its array"));
        }
        let mut out = Vec::with_capacity(len as usize);
        for index in first..=last {
            let piece = self.piece(index)?;
            let from = offset.max(index * PIECE) - index * PIECE;
            let to = (offset + len).min((index + 1) * PIECE) - index * PIECE;
            let part = piece
                .get(from as usize..to as usize)
                .ok_or_else(|| produce(self.elements.what(), "a range outside its array"))?;
            out.extend_from_slice(part);
        }
        Ok(Bytes::from_vec(out))
    }
}

impl<E> Drop for Pieces<E> {
    fn drop(&mut self) {
        cache().forget(self.owner);
    }
}

/// A 1-based index array (`rowval`, `colptr`) shown 0-based in a wider type.
struct Shifted {
    source: Arc<Blob>,
    from: NumType,
    to: NumType,
    what: String,
}

impl Elements for Shifted {
    fn size(&self) -> u64 {
        self.to.size()
    }

    fn what(&self) -> &str {
        &self.what
    }

    fn make(&self, first: u64, count: u64) -> Result<Vec<u8>, StoreError> {
        let from = self.from.size();
        let data = self.source.read_range(first * from, count * from)?;
        if data.len() != count * from {
            return Err(produce(
                &self.what,
                "its index array is shorter than its length",
            ));
        }
        let mut out = vec![0u8; (count * self.to.size()) as usize];
        shift(self.from, self.to, data.as_slice(), &mut out)
            .map_err(|why| produce(&self.what, why))?;
        Ok(out)
    }
}

/// Writes the 1-based indices `data` of type `from` into `out` 0-based, as `to` (`int32` or
/// `int64`): one tight loop per pair of types (a piece of 256 Ki indices takes about 0.2 ms).
fn shift(from: NumType, to: NumType, data: &[u8], out: &mut [u8]) -> Result<(), &'static str> {
    macro_rules! shift_as {
        ($from:ty, $to:ty) => {{
            const F: usize = std::mem::size_of::<$from>();
            const T: usize = std::mem::size_of::<$to>();
            // Every index must be at least 1 and, less one, fit the shown type.
            let mut fits = true;
            for (dst, src) in out.chunks_exact_mut(T).zip(data.chunks_exact(F)) {
                let mut word = [0u8; F];
                word.copy_from_slice(src);
                let value = i128::from(<$from>::from_le_bytes(word)) - 1;
                fits &= value >= 0 && value <= i128::from(<$to>::MAX);
                dst.copy_from_slice(&(value as $to).to_le_bytes());
            }
            match fits {
                true => Ok(()),
                false => Err("an index below 1, or past the shown index type"),
            }
        }};
    }
    match (from, to) {
        (NumType::Int8, NumType::Int32) => shift_as!(i8, i32),
        (NumType::Int16, NumType::Int32) => shift_as!(i16, i32),
        (NumType::Int32, NumType::Int32) => shift_as!(i32, i32),
        (NumType::UInt8, NumType::Int32) => shift_as!(u8, i32),
        (NumType::UInt16, NumType::Int32) => shift_as!(u16, i32),
        (NumType::Int64, NumType::Int64) => shift_as!(i64, i64),
        (NumType::UInt32, NumType::Int64) => shift_as!(u32, i64),
        (NumType::UInt64, NumType::Int64) => shift_as!(u64, i64),
        _ => Err("not an index type"),
    }
}

/// Index array `source` (of `count` elements of `indtype`, 1-based) as a 0-based array of
/// [`widened`]`(indtype)`.
pub fn shifted(source: &Arc<Blob>, indtype: NumType, count: u64, what: &str) -> Arc<Blob> {
    let to = widened(indtype);
    let shifted = Shifted {
        source: source.clone(),
        from: indtype,
        to,
        what: what.to_string(),
    };
    Pieces::blob(shifted, count.saturating_mul(to.size()))
}

/// A sparse vector densified: zeros (or `false`) where nothing is stored.
struct Densified {
    nzind: Arc<Blob>,
    indtype: NumType,
    /// The stored values; `None`: every stored value is `true` (a Bool without `nzval`).
    nzval: Option<Arc<Blob>>,
    eltype: NumType,
    what: String,
}

impl Densified {
    /// The 0-based position of stored value `k`.
    fn position(&self, k: u64) -> Result<u64, StoreError> {
        let size = self.indtype.size();
        let bytes = self.nzind.read_range(k * size, size)?;
        self.indtype
            .read_index(bytes.as_slice(), 0)
            .and_then(|p| p.checked_sub(1))
            .ok_or_else(|| produce(&self.what, "a position below 1 in nzind"))
    }

    /// The first of the `nnz` stored values at or after position `at` (`nzind` is sorted).
    fn first_from(&self, at: u64, nnz: u64) -> Result<u64, StoreError> {
        let (mut low, mut high) = (0, nnz);
        while low < high {
            let mid = low + (high - low) / 2;
            if self.position(mid)? < at {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        Ok(low)
    }
}

impl Elements for Densified {
    fn size(&self) -> u64 {
        self.eltype.size()
    }

    fn what(&self) -> &str {
        &self.what
    }

    fn make(&self, first: u64, count: u64) -> Result<Vec<u8>, StoreError> {
        let size = self.eltype.size();
        let mut out = vec![0u8; (count * size) as usize];
        // The stored values in this range: from the first at or after it to the first after it.
        let nnz = self.nzind.len()? / self.indtype.size();
        let (start, end) = (
            self.first_from(first, nnz)?,
            self.first_from(first + count, nnz)?,
        );
        if end == start {
            return Ok(out);
        }
        let isize = self.indtype.size();
        let positions = self
            .nzind
            .read_range(start * isize, (end - start) * isize)?;
        let values = match &self.nzval {
            Some(nzval) => Some(nzval.read_range(start * size, (end - start) * size)?),
            None => None,
        };
        for i in 0..(end - start) as usize {
            let at = self
                .indtype
                .read_index(positions.as_slice(), i)
                .and_then(|p| p.checked_sub(1))
                .ok_or_else(|| produce(&self.what, "a position below 1 in nzind"))?;
            let slot = (at.saturating_sub(first) * size) as usize;
            let cell = out
                .get_mut(slot..slot + size as usize)
                .ok_or_else(|| produce(&self.what, "nzind is not sorted"))?;
            match &values {
                Some(values) => {
                    let value = values
                        .as_slice()
                        .get(i * size as usize..(i + 1) * size as usize)
                        .ok_or_else(|| produce(&self.what, "nzval is shorter than nzind"))?;
                    cell.copy_from_slice(value);
                }
                None => cell[0] = 1,
            }
        }
        Ok(out)
    }
}

/// Sparse vector (`nzind` of `indtype`, `nzval` of `eltype` or all true) as a dense array of
/// `len` elements.
pub fn densified(
    nzind: &Arc<Blob>,
    indtype: NumType,
    nzval: Option<&Arc<Blob>>,
    eltype: NumType,
    len: u64,
    what: &str,
) -> Arc<Blob> {
    let densified = Densified {
        nzind: nzind.clone(),
        indtype,
        nzval: nzval.cloned(),
        eltype,
        what: what.to_string(),
    };
    Pieces::blob(densified, len.saturating_mul(eltype.size()))
}

/// `len` bytes of a source from `offset`, then zeros up to `full` bytes (the last chunk of an
/// array split in chunks: Zarr stores it whole).
struct Padded {
    part: Arc<Blob>,
    len: u64,
}

impl RangeSource for Padded {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        if offset + len <= self.len {
            return self.part.read_range(offset, len);
        }
        let mut out = Vec::with_capacity(len as usize);
        if offset < self.len {
            out.extend_from_slice(self.part.read_range(offset, self.len - offset)?.as_slice());
        }
        out.resize(len as usize, 0);
        Ok(Bytes::from_vec(out))
    }
}

/// The bytes `[offset, offset + len)` of `content` (no copy), padded with zeros to `full` bytes.
pub fn padded(content: &Arc<Blob>, offset: u64, len: u64, full: u64) -> Arc<Blob> {
    let part = Blob::slice(content, offset, len);
    match len == full {
        true => part,
        false => Blob::ranged(full, Arc::new(Padded { part, len })),
    }
}

/// `len` bytes `0x01`: the `data` of an all-true Bool sparse matrix.
struct Ones;

impl RangeSource for Ones {
    fn read_range(&self, _offset: u64, len: u64) -> Result<Bytes, StoreError> {
        Ok(Bytes::from_vec(vec![1; len as usize]))
    }
}

/// `count` Bools `true`.
pub fn ones(count: u64) -> Arc<Blob> {
    Blob::ranged(count, Arc::new(Ones))
}

/// A column-major `rows` × `cols` numeric matrix (Daf's layout) in C order: the h5ad form of a
/// matrix stored only as (obs, var), where HDF5 has no F order.
struct Transposed {
    source: Arc<Blob>,
    eltype: NumType,
    rows: u64,
    cols: u64,
    what: String,
}

impl Elements for Transposed {
    fn size(&self) -> u64 {
        self.eltype.size()
    }

    fn what(&self) -> &str {
        &self.what
    }

    /// C-order elements `[first, first + count)`: the rows they touch, gathered column by column
    /// (one contiguous read of the source per column).
    fn make(&self, first: u64, count: u64) -> Result<Vec<u8>, StoreError> {
        let (size, rows, cols) = (self.eltype.size(), self.rows, self.cols);
        let mut out = vec![0u8; (count * size) as usize];
        let (top, bottom) = (first / cols, (first + count - 1) / cols + 1);
        let s = size as usize;
        for j in 0..cols {
            let column = self
                .source
                .read_range((j * rows + top) * size, (bottom - top) * size)?;
            let column = column.as_slice();
            if column.len() as u64 != (bottom - top) * size {
                return Err(produce(&self.what, "its payload is shorter than its shape"));
            }
            for i in top..bottom {
                let k = i * cols + j;
                if (first..first + count).contains(&k) {
                    let (at, from) = (((k - first) * size) as usize, ((i - top) * size) as usize);
                    out[at..at + s].copy_from_slice(&column[from..from + s]);
                }
            }
        }
        Ok(out)
    }
}

/// Column-major `rows` × `cols` matrix `source` of `eltype` as its C-order `[rows, cols]` array.
pub fn transposed(
    source: &Arc<Blob>,
    eltype: NumType,
    (rows, cols): (u64, u64),
    what: &str,
) -> Arc<Blob> {
    let transposed = Transposed {
        source: source.clone(),
        eltype,
        rows,
        cols,
        what: what.to_string(),
    };
    let len = rows.saturating_mul(cols).saturating_mul(eltype.size());
    Pieces::blob(transposed, len)
}

/// A column-major `rows` × `cols` String matrix as the vlen-utf8 of its C-order `[rows, cols]`
/// array (made whole when first read: strings are generated anyway).
pub fn transposed_strings(strings: &Strings, rows: u64, cols: u64, what: &str) -> Arc<Blob> {
    let vlen = strings.vlen();
    let what = what.to_string();
    // The same items in another order: the same length.
    Blob::lazy(vlen.known_len(), move || {
        let data = vlen.bytes()?;
        let count = rows.saturating_mul(cols);
        let items = decode_vlen(data.as_slice(), count).map_err(|e| produce(&what, e))?;
        let ordered = (0..rows).flat_map(|i| (0..cols).map(move |j| (j * rows + i) as usize));
        let items = ordered
            .map(|at| items.get(at).copied())
            .collect::<Option<Vec<&[u8]>>>()
            .ok_or_else(|| produce(&what, "fewer strings than its shape"))?;
        Ok(Bytes::from_vec(encode_vlen(
            items.into_iter(),
            count as usize,
        )))
    })
}

#[cfg(test)]
#[path = "derived_tests.rs"]
mod tests;
