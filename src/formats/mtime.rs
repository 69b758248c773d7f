//! [`Mtime`]: a modification time in 8 bytes, as every vector or matrix property keeps one (a
//! `SystemTime` takes 16: a source of a million properties spends 8 MB more on it).
//!
//! Nanoseconds from the Unix epoch in an `i64`: every time from 1677 to 2262 is kept exactly; one
//! outside those years (no file system or ZIP writes one) is kept as the nearest of them.

use std::time::{Duration, SystemTime};

/// A modification time (see the module doc).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mtime(i64);

impl Mtime {
    /// The time as a `SystemTime`.
    pub fn get(self) -> SystemTime {
        let magnitude = Duration::from_nanos(self.0.unsigned_abs());
        if self.0 >= 0 {
            SystemTime::UNIX_EPOCH + magnitude
        } else {
            SystemTime::UNIX_EPOCH - magnitude
        }
    }
}

impl From<SystemTime> for Mtime {
    fn from(time: SystemTime) -> Mtime {
        let nanos = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        Mtime(match time.duration_since(SystemTime::UNIX_EPOCH) {
            Ok(after) => nanos(after),
            Err(before) => -nanos(before.duration()),
        })
    }
}

impl From<Mtime> for SystemTime {
    fn from(time: Mtime) -> SystemTime {
        time.get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_kept_exactly_within_the_range_and_clamped_outside() {
        let epoch = SystemTime::UNIX_EPOCH;
        for time in [
            epoch,
            epoch + Duration::new(1_700_000_000, 123_456_789),
            epoch - Duration::new(86_400 * 365, 1),
            epoch + Duration::from_nanos(i64::MAX as u64),
        ] {
            assert_eq!(Mtime::from(time).get(), time);
        }
        let far = epoch + Duration::from_secs(400 * 365 * 86_400);
        assert_eq!(
            Mtime::from(far).get(),
            epoch + Duration::from_nanos(i64::MAX as u64)
        );
        let early = epoch - Duration::from_secs(400 * 365 * 86_400);
        assert_eq!(
            Mtime::from(early).get(),
            epoch - Duration::from_nanos(i64::MAX as u64)
        );
        assert!(Mtime::from(epoch) < Mtime::from(epoch + Duration::from_nanos(1)));
        assert_eq!(std::mem::size_of::<Mtime>(), 8);
    }
}
