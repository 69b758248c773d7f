//! Producing committed content, and remembering producers that failed for good.
//!
//! A lazy blob whose producer fails (a bad decode, a corrupt ZIP entry) would run it again at
//! every access: each `stat`, each read. Such a failure depends only on the source's bytes, which
//! do not change while mounted, so the first one is kept (per blob) and answered from then on,
//! and logged once. An I/O error (mapping or reading a source file: `EAGAIN`, `ENOMEM`, a flaky
//! disk's `EIO`) may be transient and is not kept: the next access tries again. (A failed CRC-32
//! check of a stored member is kept by the blob itself.)
//!
//! A file whose size is only known once produced, and whose producing fails, still has an
//! attribute ([`Attr::unknown_size`](super::Attr)): listings show every entry, reads fail.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::stores::{Blob, Bytes, StoreError};

/// The lasting failures, by blob (its address, checked against a weak reference, so a new blob
/// at a freed address is not taken for the failed one).
#[derive(Debug, Default)]
pub(super) struct Failures(Mutex<HashMap<usize, (Weak<Blob>, StoreError)>>);

/// A copy of `e` if it is a lasting failure (one that depends only on the source's bytes).
fn lasting(e: &StoreError) -> Option<StoreError> {
    match e {
        StoreError::Produce(what) => Some(StoreError::Produce(what.clone())),
        StoreError::CorruptZip { path, what } => Some(StoreError::CorruptZip {
            path: path.clone(),
            what: what.clone(),
        }),
        StoreError::Io { .. } => None,
    }
}

impl Failures {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<usize, (Weak<Blob>, StoreError)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The content of `blob`, or its kept failure; a new lasting failure is kept and logged.
    pub(super) fn bytes(&self, blob: &Arc<Blob>) -> Result<Bytes, StoreError> {
        let key = Arc::as_ptr(blob) as usize;
        if let Some((weak, e)) = self.map().get(&key) {
            if weak.upgrade().is_some_and(|b| Arc::ptr_eq(&b, blob)) {
                return Err(lasting(e).unwrap_or_else(|| StoreError::Produce(e.to_string())));
            }
        }
        let result = blob.bytes();
        if let Err(e) = &result {
            if let Some(kept) = lasting(e) {
                log::warn!("{e} (kept: not produced again)");
                let mut map = self.map();
                map.retain(|_, (weak, _)| weak.strong_count() > 0);
                map.insert(key, (Arc::downgrade(blob), kept));
            }
        }
        result
    }

    /// The length of `blob`, producing it (or answering its kept failure) if it is not known.
    pub(super) fn len(&self, blob: &Arc<Blob>) -> Result<u64, StoreError> {
        match blob.known_len() {
            Some(len) => Ok(len),
            None => Ok(self.bytes(blob)?.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::Failures;
    use crate::stores::{Blob, StoreError};

    fn counted(runs: &Arc<AtomicUsize>, fail: fn() -> StoreError) -> Arc<Blob> {
        let runs = runs.clone();
        Blob::lazy(None, move || {
            runs.fetch_add(1, Ordering::Relaxed);
            Err(fail())
        })
    }

    #[test]
    fn a_failed_decode_is_not_run_again() {
        let failures = Failures::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let blob = counted(&runs, || StoreError::Produce("bad decode".into()));
        for _ in 0..3 {
            let e = failures.len(&blob).unwrap_err();
            assert!(e.to_string().contains("bad decode"), "{e}");
            assert!(failures.bytes(&blob).is_err());
        }
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        // Another blob is not affected by this one's failure.
        let other = Blob::ready(crate::stores::Bytes::from_vec(vec![1, 2]));
        assert_eq!(failures.len(&other).unwrap(), 2);
    }

    #[test]
    fn an_io_error_is_tried_again() {
        let failures = Failures::default();
        let runs = Arc::new(AtomicUsize::new(0));
        let blob = counted(&runs, || {
            StoreError::io(PathBuf::from("x"), std::io::Error::from_raw_os_error(11))
        });
        for _ in 0..3 {
            assert!(failures.bytes(&blob).is_err());
        }
        assert_eq!(runs.load(Ordering::Relaxed), 3);
    }
}
