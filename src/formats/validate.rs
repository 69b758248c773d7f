//! Consistency checks for content written through the mount, before it becomes part of a source.
//!
//! The readers already check sizes against axis lengths; these checks look inside the bytes:
//! line counts and UTF-8 of text, index ranges and ordering of sparse data, Bool bytes, and unique
//! axis entries. Sources are trusted as they are; only new content is checked.

use std::collections::HashSet;

use super::model::{Axis, Payload, Shape, SparseIndex};
use super::strings::split_lines;
use super::types::NumType;
use super::FormatError;

fn bad(what: impl Into<String>) -> FormatError {
    FormatError::Bad(what.into())
}

fn utf8_lines(text: &[u8], count: u64, what: &str) -> Result<(), FormatError> {
    let lines = split_lines(text, count).map_err(|e| bad(format!("{what}: {e}")))?;
    for (i, line) in lines.iter().enumerate() {
        std::str::from_utf8(line)
            .map_err(|_| bad(format!("{what}: line {} is not UTF-8", i + 1)))?;
    }
    Ok(())
}

/// Checks an axis: UTF-8 entries, each once.
pub fn check_axis(axis: &Axis) -> Result<(), FormatError> {
    let text = axis.entries.lines().bytes()?;
    utf8_lines(text.as_slice(), axis.len(), "axis")?;
    let mut seen = HashSet::new();
    for entry in split_lines(text.as_slice(), axis.len()).map_err(bad)? {
        if !seen.insert(entry) {
            return Err(bad(format!(
                "axis entry {:?} appears twice",
                String::from_utf8_lossy(entry)
            )));
        }
    }
    Ok(())
}

fn indices(blob: &crate::stores::Blob, t: NumType) -> Result<Vec<u64>, FormatError> {
    let data = blob.bytes()?;
    let count = data.len() / t.size();
    (0..count as usize)
        .map(|i| {
            t.read_index(data.as_slice(), i)
                .ok_or_else(|| bad(format!("negative index at {}", i + 1)))
        })
        .collect()
}

fn increasing_within(values: &[u64], limit: u64, what: &str) -> Result<(), FormatError> {
    for (i, &v) in values.iter().enumerate() {
        if v == 0 || v > limit {
            return Err(bad(format!(
                "{what} {v} at {} is outside 1..={limit}",
                i + 1
            )));
        }
        if i > 0 && values[i - 1] >= v {
            return Err(bad(format!(
                "{what} values must increase (position {})",
                i + 1
            )));
        }
    }
    Ok(())
}

fn check_index(index: &SparseIndex, t: NumType, shape: Shape) -> Result<u64, FormatError> {
    match (index, shape) {
        (SparseIndex::Vector { nzind }, Shape::Vector(n)) => {
            let positions = indices(nzind, t)?;
            increasing_within(&positions, n, "nzind")?;
            Ok(positions.len() as u64)
        }
        (SparseIndex::Matrix { colptr, rowval }, Shape::Matrix(nrows, ncols)) => {
            let colptr = indices(colptr, t)?;
            let rows = indices(rowval, t)?;
            let nnz = rows.len() as u64;
            if colptr.len() as u64 != ncols + 1
                || colptr.first() != Some(&1)
                || colptr.last() != Some(&(nnz + 1))
            {
                return Err(bad(format!(
                    "colptr must have {} entries from 1 to {}",
                    ncols + 1,
                    nnz + 1
                )));
            }
            for col in 0..ncols as usize {
                let (start, end) = (colptr[col], colptr[col + 1]);
                if end < start {
                    return Err(bad(format!("colptr decreases at column {}", col + 1)));
                }
                increasing_within(
                    &rows[(start - 1) as usize..(end - 1) as usize],
                    nrows,
                    "rowval",
                )?;
            }
            Ok(nnz)
        }
        _ => Err(bad("index does not match the property's shape")),
    }
}

/// Checks a vector or matrix payload against its shape.
pub fn check_payload(payload: &Payload, shape: Shape) -> Result<(), FormatError> {
    let check_bools = |t: NumType, blob: &crate::stores::Blob| -> Result<(), FormatError> {
        if t == NumType::Bool && blob.bytes()?.as_slice().iter().any(|&b| b > 1) {
            return Err(bad("Bool data must be bytes 0 or 1"));
        }
        Ok(())
    };
    match payload {
        Payload::Dense { eltype, data } => check_bools(*eltype, data),
        Payload::DenseStrings(strings) => {
            utf8_lines(strings.lines().bytes()?.as_slice(), shape.len(), "text")
        }
        Payload::Sparse(s) => {
            check_index(&s.index, s.indtype, shape)?;
            s.nzval
                .as_ref()
                .map_or(Ok(()), |v| check_bools(s.eltype, v))
        }
        Payload::SparseStrings(s) => {
            let nnz = check_index(&s.index, s.indtype, shape)?;
            utf8_lines(s.nztxt.bytes()?.as_slice(), nnz, "nztxt")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::strings::Strings;
    use crate::stores::{Blob, Bytes};
    use std::sync::Arc;

    fn blob(data: &[u8]) -> Arc<Blob> {
        Blob::ready(Bytes::from_vec(data.to_vec()))
    }

    #[test]
    fn axes_must_be_unique_utf8_lines() {
        let axis = |text: &[u8], n| Axis {
            entries: Strings::from_lines(blob(text), n),
            mtime: std::time::SystemTime::UNIX_EPOCH,
        };
        assert!(check_axis(&axis(b"a\nb\n", 2)).is_ok());
        assert!(check_axis(&axis(b"a\na\n", 2))
            .unwrap_err()
            .to_string()
            .contains("twice"));
        assert!(check_axis(&axis(b"\xff\n", 1)).is_err());
    }

    #[test]
    fn sparse_indices_are_checked() {
        let sparse = |nzind: &[u8]| {
            let index = SparseIndex::Vector { nzind: blob(nzind) };
            Payload::sparse(NumType::Bool, NumType::UInt8, index, None)
        };
        assert!(check_payload(&sparse(&[1, 3]), Shape::Vector(3)).is_ok());
        assert!(check_payload(&sparse(&[3, 1]), Shape::Vector(3)).is_err());
        assert!(check_payload(&sparse(&[0]), Shape::Vector(3)).is_err());
        assert!(check_payload(&sparse(&[4]), Shape::Vector(3)).is_err());
        let matrix = |colptr: &[u8], rowval: &[u8]| {
            let index = SparseIndex::Matrix {
                colptr: blob(colptr),
                rowval: blob(rowval),
            };
            let nzval = Some(blob(&vec![1; rowval.len()]));
            Payload::sparse(NumType::Int8, NumType::UInt8, index, nzval)
        };
        assert!(check_payload(&matrix(&[1, 3, 4], &[1, 3, 2]), Shape::Matrix(3, 2)).is_ok());
        assert!(check_payload(&matrix(&[1, 3, 3], &[1, 3, 2]), Shape::Matrix(3, 2)).is_err());
        assert!(check_payload(&matrix(&[1, 3, 4], &[3, 1, 2]), Shape::Matrix(3, 2)).is_err());
        let bools = Payload::Dense {
            eltype: NumType::Bool,
            data: blob(&[0, 2]),
        };
        assert!(check_payload(&bools, Shape::Vector(2)).is_err());
    }
}
