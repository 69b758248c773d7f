//! `Bytes`: a cheap, clonable handle to an immutable byte range.
//!
//! A range either points into a shared memory map of a source file (the zero-copy case: numeric
//! payloads are always served this way when the source stores them plainly) or into a buffer we
//! built (synthesised metadata and text, decoded foreign chunks). Cloning never copies bytes.

use std::fmt;
use std::sync::Arc;

use crate::sys::Mmap;

#[derive(Clone)]
enum Backing {
    Map(Arc<Mmap>),
    Owned(Arc<Vec<u8>>),
}

/// An immutable byte range over a shared backing buffer.
#[derive(Clone)]
pub struct Bytes {
    backing: Backing,
    start: usize,
    len: usize,
}

impl Bytes {
    /// The empty range.
    pub fn empty() -> Bytes {
        Bytes::from_vec(Vec::new())
    }

    /// Takes ownership of a buffer we built.
    pub fn from_vec(data: Vec<u8>) -> Bytes {
        let len = data.len();
        Bytes {
            backing: Backing::Owned(Arc::new(data)),
            start: 0,
            len,
        }
    }

    /// The whole of a memory map.
    pub fn from_map(map: Arc<Mmap>) -> Bytes {
        let len = map.len();
        Bytes {
            backing: Backing::Map(map),
            start: 0,
            len,
        }
    }

    /// A sub-range, or `None` if it does not fit inside this range.
    pub fn slice(&self, offset: u64, len: u64) -> Option<Bytes> {
        let offset = usize::try_from(offset).ok()?;
        let len = usize::try_from(len).ok()?;
        if offset.checked_add(len)? > self.len {
            return None;
        }
        Some(Bytes {
            backing: self.backing.clone(),
            start: self.start + offset,
            len,
        })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        let all: &[u8] = match &self.backing {
            Backing::Map(map) => map,
            Backing::Owned(vec) => vec,
        };
        &all[self.start..self.start + self.len]
    }

    /// Number of bytes.
    pub fn len(&self) -> u64 {
        self.len as u64
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether these bytes live in a memory map of a source file (rather than a buffer we built).
    pub fn is_mapped(&self) -> bool {
        matches!(self.backing, Backing::Map(_))
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = if self.is_mapped() { "mapped" } else { "owned" };
        write!(f, "Bytes({kind}, {} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_share_the_buffer_and_check_bounds() {
        let b = Bytes::from_vec(b"hello world".to_vec());
        let s = b.slice(6, 5).unwrap();
        assert_eq!(s.as_slice(), b"world");
        assert_eq!(s.slice(1, 3).unwrap().as_slice(), b"orl");
        assert_eq!(b.as_slice()[6..].as_ptr(), s.as_slice().as_ptr());
        assert!(b.slice(6, 6).is_none());
        assert!(b.slice(u64::MAX, 1).is_none());
        assert!(!s.is_mapped());
    }
}
