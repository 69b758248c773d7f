//! `Bytes`: a cheap, clonable handle to an immutable byte range.
//!
//! A range either points into a shared memory map of a source file (the zero-copy case: numeric
//! payloads are always served this way when the source stores them plainly) or into a buffer we
//! built (synthesised metadata and text, decoded foreign chunks). Cloning never copies bytes.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::sys::Mmap;

#[derive(Clone)]
enum Backing {
    Map(Arc<Mmap>),
    Owned(Arc<Vec<u8>>),
    /// A buffer counted against a [`Budget`] for as long as it lives.
    Reserved(Arc<(Vec<u8>, Reservation)>),
    /// A buffer of a [`Pool`], given back to it when the last range over it is dropped.
    Pooled(Arc<Pooled>),
}

/// A process-wide stock of large buffers that are used again (remote response bodies): a buffer
/// given back is already mapped and faulted in, where a fresh one of that size is a new `mmap`
/// whose pages the kernel zeroes on first touch and unmaps when freed, which costs more CPU than
/// filling it. Every buffer of a pool has its one size, so one given back is never grown (zeroed)
/// again.
#[derive(Debug)]
pub struct Pool {
    /// The buffers given back and not taken again, at most `keep` (a short critical section:
    /// a push or a pop).
    free: Mutex<Vec<Vec<u8>>>,
    keep: usize,
    size: usize,
}

/// A buffer taken from a [`Pool`]: `len` bytes, whose old content the taker overwrites.
#[derive(Debug)]
pub struct Pooled {
    data: Vec<u8>,
    len: usize,
    /// Where it goes back to (none: a buffer larger than the pool's, freed).
    pool: Option<&'static Pool>,
}

impl Pool {
    /// A pool of buffers of `size` bytes, keeping at most `keep` of those given back.
    pub const fn new(keep: usize, size: usize) -> Pool {
        Pool {
            free: Mutex::new(Vec::new()),
            keep,
            size,
        }
    }

    /// A buffer of `len` bytes: one given back if there is one (its old content is still there:
    /// the taker overwrites it), else a new zeroed one; one of its own, not the pool's, if `len`
    /// is larger than the pool's buffers or less than half of them (it would waste the rest).
    pub fn take(&'static self, len: usize) -> Pooled {
        if len > self.size || len * 2 <= self.size {
            return Pooled {
                data: vec![0; len],
                len,
                pool: None,
            };
        }
        let data = super::lock(&self.free)
            .pop()
            .unwrap_or_else(|| vec![0; self.size]);
        Pooled {
            data,
            len,
            pool: Some(self),
        }
    }

    /// Buffers held for reuse.
    pub fn kept(&self) -> usize {
        super::lock(&self.free).len()
    }
}

impl Pooled {
    /// The buffer, to be filled.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.data[..self.len]
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool {
            let mut free = super::lock(&pool.free);
            if free.len() < pool.keep {
                free.push(std::mem::take(&mut self.data));
            }
        }
    }
}

/// A process-wide limit on the bytes held by some kind of buffer (decompressed ZIP members).
#[derive(Debug)]
pub struct Budget {
    used: AtomicU64,
    limit: u64,
}

/// A share of a [`Budget`], given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: &'static Budget,
    bytes: u64,
}

impl Budget {
    /// A budget of `limit` bytes.
    pub const fn new(limit: u64) -> Budget {
        Budget {
            used: AtomicU64::new(0),
            limit,
        }
    }

    /// Takes `bytes` from the budget, or `None` if that would exceed it.
    pub fn reserve(&'static self, bytes: u64) -> Option<Reservation> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .ok()
            .map(|_| Reservation {
                budget: self,
                bytes,
            })
    }

    /// Bytes currently reserved.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Acquire)
    }

    /// The limit.
    pub fn limit(&self) -> u64 {
        self.limit
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// An immutable byte range over a shared backing buffer.
#[derive(Clone)]
pub struct Bytes {
    backing: Backing,
    start: usize,
    len: usize,
}

impl Bytes {
    /// The bytes of `parts` one after the other: the one part itself (no copy), else a copy of
    /// them all (a read across pieces of a file made of pieces).
    pub fn joined(mut parts: Vec<Bytes>) -> Bytes {
        if parts.len() == 1 {
            return parts.remove(0);
        }
        let len = parts.iter().map(|p| p.as_slice().len()).sum();
        let mut out = Vec::with_capacity(len);
        for part in &parts {
            out.extend_from_slice(part.as_slice());
        }
        Bytes::from_vec(out)
    }

    /// The empty range.
    pub fn empty() -> Bytes {
        Bytes::from_vec(Vec::new())
    }

    /// Shares a buffer kept elsewhere too (a piece of the decode cache).
    pub fn from_shared(data: Arc<Vec<u8>>) -> Bytes {
        let len = data.len();
        Bytes {
            backing: Backing::Owned(data),
            start: 0,
            len,
        }
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

    /// Takes ownership of a buffer whose size `reservation` counts for as long as it lives.
    pub fn from_reserved(data: Vec<u8>, reservation: Reservation) -> Bytes {
        let len = data.len();
        Bytes {
            backing: Backing::Reserved(Arc::new((data, reservation))),
            start: 0,
            len,
        }
    }

    /// Takes ownership of a buffer of a [`Pool`] (given back when the last range over it goes).
    pub fn from_pooled(data: Pooled) -> Bytes {
        let len = data.len;
        Bytes {
            backing: Backing::Pooled(Arc::new(data)),
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
            Backing::Reserved(held) => &held.0,
            Backing::Pooled(held) => &held.data,
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

    #[test]
    fn reserved_buffers_count_against_their_budget_while_they_live() {
        static BUDGET: Budget = Budget::new(100);
        let a = BUDGET.reserve(60).unwrap();
        assert!(BUDGET.reserve(41).is_none());
        let bytes = Bytes::from_reserved(vec![1; 60], a);
        let part = bytes.slice(10, 5).unwrap();
        drop(bytes);
        assert_eq!(BUDGET.used(), 60, "a slice keeps the buffer");
        assert_eq!(part.as_slice(), &[1; 5]);
        drop(part);
        assert_eq!(BUDGET.used(), 0);
        assert!(BUDGET.reserve(100).is_some());
    }

    #[test]
    fn pooled_buffers_go_back_when_the_last_range_goes_and_are_used_again() {
        static POOL: Pool = Pool::new(1, 10);
        let mut first = POOL.take(8);
        first.as_mut_slice().copy_from_slice(b"abcdefgh");
        assert_eq!(POOL.kept(), 0);
        let at = first.as_mut_slice().as_ptr();
        let bytes = Bytes::from_pooled(first);
        let part = bytes.slice(2, 3).unwrap();
        drop(bytes);
        assert_eq!(POOL.kept(), 0, "a slice keeps the buffer");
        assert_eq!(part.as_slice(), b"cde");
        drop(part);
        assert_eq!(POOL.kept(), 1);
        let mut again = POOL.take(6);
        assert_eq!(again.as_mut_slice().as_ptr(), at, "the same memory");
        assert_eq!(again.as_mut_slice().len(), 6);
        let other = POOL.take(10);
        drop((again, other));
        assert_eq!(POOL.kept(), 1, "at most `keep` are kept");
        drop((POOL.take(11), POOL.take(5)));
        assert_eq!(
            POOL.kept(),
            1,
            "larger and small buffers are not the pool's"
        );
    }
}
