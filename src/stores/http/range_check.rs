//! CRC-32 checks of content served by ranges: a stored member of a remote ZIP, whose bytes are
//! fetched only as far as readers ask (never a whole large member nobody asked for).
//!
//! - A member of at most [`SYNC_CHECK_MAX`] bytes is fetched whole on its first read and
//!   verified before any byte of it is served ([`RangeCheck::wants_whole`]).
//! - A larger member is verified once every byte of it has been read: the CRC of each newly
//!   covered range is kept, neighbours are combined in order (`crc32fast::Hasher::combine`), and
//!   when one range covers the whole member its CRC is compared. Bytes served before then were
//!   served unverified; the read that completes the coverage gets the verdict.
//!
//! A mismatch logs one line (what: the archive's redacted URL and the entry) and every later
//! read of the member (and of its slices) is an error, i.e. `EIO`. [`RangeCheck::state`] lets
//! the FUSE layer drop what the kernel cached of a member found corrupt, as for local archives.

use std::collections::BTreeMap;
use std::sync::Mutex;

use crc32fast::Hasher;

use crate::stores::check::{CheckState, Verdict, SYNC_CHECK_MAX};
use crate::stores::lock;
use crate::stores::StoreError;

/// The CRC-32 a content of known length must have, checked from the ranges read of it.
pub struct RangeCheck {
    len: u64,
    verdict: Verdict,
    /// Covered ranges: start → (end, CRC of `[start, end)`), disjoint, never touching.
    covered: Mutex<BTreeMap<u64, (u64, Hasher)>>,
}

impl RangeCheck {
    /// A check that the `len` bytes of the content have CRC-32 `expected`; `what` names them.
    pub fn new(len: u64, expected: u32, what: String) -> RangeCheck {
        RangeCheck {
            len,
            verdict: Verdict::new(expected, what.into()),
            covered: Mutex::new(BTreeMap::new()),
        }
    }

    /// Where the check stands (`Unverified` until the whole content was read).
    pub fn state(&self) -> CheckState {
        self.verdict.state()
    }

    /// Whether the next read must fetch the whole content and [`RangeCheck::record`] it before
    /// serving anything (a small content not verified yet).
    pub fn wants_whole(&self) -> bool {
        self.len <= SYNC_CHECK_MAX && self.verdict.state() == CheckState::Unverified
    }

    /// Before a read: an error once the content was found corrupt.
    pub fn gate(&self) -> Result<(), StoreError> {
        match self.verdict.state() {
            CheckState::Bad => Err(self.verdict.failure()),
            _ => Ok(()),
        }
    }

    /// Records that `data` was read at `offset`; verifies once the whole content is covered.
    /// An error when the content is (now) known corrupt: `data` must then not be served.
    pub fn record(&self, offset: u64, data: &[u8]) -> Result<(), StoreError> {
        match self.verdict.state() {
            CheckState::Verified => return Ok(()),
            CheckState::Bad => return Err(self.verdict.failure()),
            _ => {}
        }
        let complete = {
            let mut covered = lock(&self.covered);
            cover(&mut covered, offset, data);
            match covered.first_key_value() {
                Some((0, (end, hasher))) if *end == self.len && covered.len() == 1 => {
                    let found = hasher.clone().finalize();
                    covered.clear();
                    Some(found)
                }
                _ => None,
            }
        };
        match complete {
            None => Ok(()),
            Some(found) => self.verdict.judge(found),
        }
    }
}

/// Adds the CRCs of the parts of `[offset, offset + data.len())` not covered yet to `covered`,
/// then merges touching ranges in order.
fn cover(covered: &mut BTreeMap<u64, (u64, Hasher)>, offset: u64, data: &[u8]) {
    let end = offset + data.len() as u64;
    if data.is_empty() {
        return;
    }
    let first = covered
        .range(..=offset)
        .next_back()
        .map_or(offset, |(&start, _)| start);
    let mut gaps = Vec::new();
    let mut cursor = offset;
    for (&start, &(stop, _)) in covered.range(first..end) {
        if start > cursor {
            gaps.push((cursor, start));
        }
        cursor = cursor.max(stop);
        if cursor >= end {
            break;
        }
    }
    if cursor < end {
        gaps.push((cursor, end));
    }
    for (from, to) in gaps {
        let mut hasher = Hasher::new();
        hasher.update(&data[(from - offset) as usize..(to - offset) as usize]);
        covered.insert(from, (to, hasher));
    }
    let starts: Vec<u64> = covered.range(first..=end).map(|(&s, _)| s).collect();
    let mut head = match starts.first() {
        Some(&s) => s,
        None => return,
    };
    for &start in &starts[1..] {
        let touches = covered.get(&head).is_some_and(|(stop, _)| *stop == start);
        if !touches {
            head = start;
            continue;
        }
        if let Some((stop, next)) = covered.remove(&start) {
            if let Some((head_stop, hasher)) = covered.get_mut(&head) {
                *head_stop = stop;
                hasher.combine(&next);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn data(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn a_small_content_wants_a_whole_read_and_a_bad_one_fails_for_good() {
        let bytes = data(100);
        let good = RangeCheck::new(100, crc32fast::hash(&bytes), "a.zip: good".into());
        assert!(good.wants_whole());
        assert!(good.record(0, &bytes).is_ok());
        assert_eq!(good.state(), CheckState::Verified);
        assert!(!good.wants_whole() && good.gate().is_ok());
        let bad = RangeCheck::new(100, crc32fast::hash(&bytes) ^ 1, "a.zip: bad".into());
        let err = bad.record(0, &bytes).unwrap_err().to_string();
        assert!(
            err.contains("a.zip: bad") && err.contains("CRC-32"),
            "{err}"
        );
        assert_eq!(bad.state(), CheckState::Bad);
        assert!(bad.gate().is_err() && bad.record(0, &bytes[..10]).is_err());
    }

    #[test]
    fn a_large_content_is_verified_only_when_fully_covered() {
        let n = (SYNC_CHECK_MAX + 10) as usize;
        let bytes = data(n);
        let check = RangeCheck::new(n as u64, crc32fast::hash(&bytes) ^ 1, "big".into());
        assert!(!check.wants_whole());
        assert!(check.record(10, &bytes[10..n]).is_ok());
        assert_eq!(check.state(), CheckState::Unverified);
        assert!(check.record(0, &bytes[0..20]).is_err());
        assert_eq!(check.state(), CheckState::Bad);
    }

    proptest! {
        /// Whatever the order and overlap of the reads, the check decides exactly when the
        /// whole content was read, and decides right.
        #[test]
        fn any_reads_decide_once_covered(
            reads in prop::collection::vec((0usize..5000, 1usize..1500), 1..40),
            corrupt in any::<bool>(),
        ) {
            let n = 5000;
            let bytes = data(n);
            let crc = crc32fast::hash(&bytes) ^ u32::from(corrupt);
            let check = RangeCheck::new(n as u64, crc, "x".into());
            let mut seen = vec![false; n];
            for (at, len) in reads.into_iter().chain([(0, n)]) {
                let to = (at + len).min(n);
                let result = check.record(at as u64, &bytes[at..to]);
                seen[at..to].iter_mut().for_each(|s| *s = true);
                let done = seen.iter().all(|&s| s);
                prop_assert_eq!(result.is_err(), done && corrupt);
                let want = match (done, corrupt) {
                    (false, _) => CheckState::Unverified,
                    (true, false) => CheckState::Verified,
                    (true, true) => CheckState::Bad,
                };
                prop_assert_eq!(check.state(), want);
            }
        }
    }
}
