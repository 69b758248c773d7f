//! The arrays of the AnnData view that are not the source's bytes, made by range when read
//! (`anndata-view.md` §4.6): the 0-based sparse `indices`/`indptr` (Daf's 1-based `rowval` and
//! `colptr` less one, widened to the index types scipy accepts), a sparse vector densified, the
//! `data` of ones of an all-true Bool sparse matrix, and a String matrix stored only as
//! (obs, var) reordered to C order.
//!
//! A read of bytes `[a, b)` reads only the matching elements of its source (a mapped range, or a
//! packed array's decoded chunks through the decode cache), so nothing here is ever made whole:
//! a shifted index costs one subtraction per element, less than keeping it would.

use std::sync::Arc;

use crate::formats::strings::{decode_vlen, encode_vlen, Strings};
use crate::formats::types::NumType;
use crate::stores::blob::RangeSource;
use crate::stores::{Blob, Bytes, StoreError};

/// The most elements one densifying or shifting read converts at once is what the kernel asks
/// for (at most 1 MiB); a whole-blob read (`Blob::bytes`) of a large derived array is refused
/// past this many bytes, as a decoded array is.
const MAX_WHOLE: u64 = crate::formats::zarr::decode::MAX_DECODED_BYTES;

/// The index type scipy accepts for a Daf index type (`anndata-view.md` §4.2): `int32` for
/// Int32 and narrower, `int64` for Int64, UInt32 and UInt64.
pub fn widened(indtype: NumType) -> NumType {
    match indtype {
        NumType::Int64 | NumType::UInt32 | NumType::UInt64 => NumType::Int64,
        _ => NumType::Int32,
    }
}

/// The elements `[first, first + count)` of the element range a byte range `[offset, offset +
/// len)` of an array of `size`-byte elements touches, and where the range starts in them.
fn touched(offset: u64, len: u64, size: u64) -> (u64, u64, u64) {
    let first = offset / size;
    let end = (offset + len).div_ceil(size);
    (first, end - first, offset - first * size)
}

fn produce(what: &str, why: impl std::fmt::Display) -> StoreError {
    StoreError::Produce(format!("{what}: {why}"))
}

/// A 1-based index array (`rowval`, `colptr`) shown 0-based in a wider type.
struct Shifted {
    source: Arc<Blob>,
    from: NumType,
    to: NumType,
    what: Arc<str>,
}

impl RangeSource for Shifted {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let (from, to) = (self.from.size(), self.to.size());
        let (first, count, skip) = touched(offset, len, to);
        if count.saturating_mul(to) > MAX_WHOLE {
            return Err(produce(
                &self.what,
                "a read larger than a decoded array may be",
            ));
        }
        let data = self.source.read_range(first * from, count * from)?;
        if data.len() != count * from {
            return Err(produce(
                &self.what,
                "its index array is shorter than its length",
            ));
        }
        let mut out = Vec::with_capacity((count * to) as usize);
        for i in 0..count as usize {
            let value = self
                .from
                .read_index(data.as_slice(), i)
                .and_then(|v| v.checked_sub(1))
                .ok_or_else(|| produce(&self.what, "an index below 1 in a 1-based index"))?;
            match self.to {
                NumType::Int32 => out.extend_from_slice(
                    &i32::try_from(value)
                        .map_err(|_| produce(&self.what, "an index past int32"))?
                        .to_le_bytes(),
                ),
                _ => out.extend_from_slice(
                    &i64::try_from(value)
                        .map_err(|_| produce(&self.what, "an index past int64"))?
                        .to_le_bytes(),
                ),
            }
        }
        slice_of(out, skip, len, &self.what)
    }
}

/// The `len` bytes from `skip` of `out`.
fn slice_of(out: Vec<u8>, skip: u64, len: u64, what: &str) -> Result<Bytes, StoreError> {
    Bytes::from_vec(out)
        .slice(skip, len)
        .ok_or_else(|| produce(what, "a range outside its array"))
}

/// Index array `source` (of `count` elements of `indtype`, 1-based) as a 0-based array of
/// [`widened`]`(indtype)`.
pub fn shifted(source: &Arc<Blob>, indtype: NumType, count: u64, what: &str) -> Arc<Blob> {
    let to = widened(indtype);
    Blob::ranged(
        count.saturating_mul(to.size()),
        Arc::new(Shifted {
            source: source.clone(),
            from: indtype,
            to,
            what: what.into(),
        }),
    )
}

/// A sparse vector of `len` elements densified: zeros (or `false`) where nothing is stored.
struct Densified {
    nzind: Arc<Blob>,
    indtype: NumType,
    nnz: u64,
    /// The stored values; `None`: every stored value is `true` (a Bool without `nzval`).
    nzval: Option<Arc<Blob>>,
    eltype: NumType,
    what: Arc<str>,
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

    /// The first stored value at or after position `at` (`nzind` is sorted).
    fn first_from(&self, at: u64) -> Result<u64, StoreError> {
        let (mut low, mut high) = (0, self.nnz);
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

impl RangeSource for Densified {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let size = self.eltype.size();
        let (first, count, skip) = touched(offset, len, size);
        if count.saturating_mul(size) > MAX_WHOLE {
            return Err(produce(
                &self.what,
                "a read larger than a decoded array may be",
            ));
        }
        let mut out = vec![0u8; (count * size) as usize];
        let mut k = self.first_from(first)?;
        // The stored positions and values of this range, read in one piece each.
        let mut end = k;
        while end < self.nnz && self.position(end)? < first + count {
            end += 1;
        }
        let isize = self.indtype.size();
        let positions = match end > k {
            true => self.nzind.read_range(k * isize, (end - k) * isize)?,
            false => Bytes::empty(),
        };
        let values = match (&self.nzval, end > k) {
            (Some(nzval), true) => Some(nzval.read_range(k * size, (end - k) * size)?),
            _ => None,
        };
        let start = k;
        while k < end {
            let i = (k - start) as usize;
            let at = self
                .indtype
                .read_index(positions.as_slice(), i)
                .and_then(|p| p.checked_sub(1))
                .ok_or_else(|| produce(&self.what, "a position below 1 in nzind"))?;
            let slot = ((at - first) * size) as usize;
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
            k += 1;
        }
        slice_of(out, skip, len, &self.what)
    }
}

/// Sparse vector (`nzind` of `indtype` with `nnz` entries, `nzval` of `eltype` or all true) as
/// a dense array of `len` elements.
pub fn densified(
    nzind: &Arc<Blob>,
    indtype: NumType,
    nzval: Option<&Arc<Blob>>,
    eltype: NumType,
    len: u64,
    what: &str,
) -> Arc<Blob> {
    let nnz = nzind.known_len().unwrap_or(0) / indtype.size();
    Blob::ranged(
        len.saturating_mul(eltype.size()),
        Arc::new(Densified {
            nzind: nzind.clone(),
            indtype,
            nnz,
            nzval: nzval.cloned(),
            eltype,
            what: what.into(),
        }),
    )
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
mod tests {
    use super::*;

    fn blob(bytes: Vec<u8>) -> Arc<Blob> {
        Blob::ready(Bytes::from_vec(bytes))
    }

    fn every_range(blob: &Arc<Blob>) -> Vec<u8> {
        let len = blob.len().unwrap();
        let whole = blob.read_range(0, len).unwrap().as_slice().to_vec();
        for a in 0..len {
            for b in a + 1..=len {
                let part = blob.read_range(a, b - a).unwrap();
                assert_eq!(
                    part.as_slice(),
                    &whole[a as usize..b as usize],
                    "[{a}, {b})"
                );
            }
        }
        whole
    }

    #[test]
    fn indices_are_shifted_and_widened_by_range() {
        let rowval: Vec<u8> = [1u16, 3, 2].iter().flat_map(|v| v.to_le_bytes()).collect();
        let shown = shifted(&blob(rowval), NumType::UInt16, 3, "t");
        let want: Vec<u8> = [0i32, 2, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(every_range(&shown), want);
        let colptr: Vec<u8> = [1u32, 3, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
        let shown = shifted(&blob(colptr), NumType::UInt32, 3, "t");
        let want: Vec<u8> = [0i64, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(every_range(&shown), want);
        let zero = shifted(&blob(vec![0, 0, 0, 0]), NumType::Int32, 1, "t");
        assert!(zero.read_range(0, 4).is_err(), "a 0 in a 1-based index");
    }

    #[test]
    fn a_sparse_vector_is_densified_by_range() {
        let nzind: Vec<u8> = [1i64, 3, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        let nzval: Vec<u8> = [10i16, -30, 60]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let dense = densified(
            &blob(nzind.clone()),
            NumType::Int64,
            Some(&blob(nzval)),
            NumType::Int16,
            7,
            "t",
        );
        let want: Vec<u8> = [10i16, 0, -30, 0, 0, 60, 0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(every_range(&dense), want);
        let bools = densified(&blob(nzind), NumType::Int64, None, NumType::Bool, 6, "t");
        assert_eq!(every_range(&bools), vec![1, 0, 1, 0, 0, 1]);
        let none = densified(&blob(vec![]), NumType::UInt8, None, NumType::Bool, 3, "t");
        assert_eq!(every_range(&none), vec![0, 0, 0]);
    }

    #[test]
    fn ones_and_transposed_strings() {
        assert_eq!(every_range(&ones(5)), vec![1; 5]);
        // Column-major 2 x 3: a b | c d | e f; C order: a c e b d f.
        let items: Vec<&[u8]> = vec![b"a", b"b", b"c", b"dd", b"", b"f"];
        let strings = Strings::from_vlen(blob(encode_vlen(items.into_iter(), 6)), 6);
        let shown = transposed_strings(&strings, 2, 3, "t");
        let want: Vec<&[u8]> = vec![b"a", b"c", b"", b"b", b"dd", b"f"];
        assert_eq!(
            shown.bytes().unwrap().as_slice(),
            encode_vlen(want.into_iter(), 6)
        );
        assert_eq!(shown.known_len(), Some(shown.bytes().unwrap().len()));
    }
}
