//! Settling whether elidable nodes are shown (`namespace` module doc): the blobs a `lookup`,
//! `getattr` or `readdir` needs are asked (a remote source: one HEAD each, kept by the blob),
//! a few at a time, on the calling thread and its helpers, never under the state lock: the
//! caller holds only its own `Arc` of the tree. A failure is the caller's `EIO`; nothing is
//! remembered of it, so the next call asks again.

use std::sync::Arc;

use crate::stores::parallel;

use super::namespace::Namespace;
use super::FsError;

/// Most presence questions asked at once.
const MAX_PARALLEL: usize = 8;

/// Asks, for every inode of `inos` (and what an elidable directory among them depends on),
/// the blobs whose presence is not known yet.
pub(super) fn settle(ns: &Namespace, inos: impl Iterator<Item = u64>) -> Result<(), FsError> {
    let mut blobs = Vec::new();
    for ino in inos {
        ns.unresolved(ino, &mut blobs);
    }
    blobs.dedup_by(|a, b| Arc::ptr_eq(a, b));
    parallel::map(&blobs, MAX_PARALLEL, |blob| blob.resolve_presence())
        .map(|_| ())
        .map_err(FsError::Content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::namespace::{Entry, EntryKind, InodeTable};
    use crate::stores::blob::{Presence, RangeSource};
    use crate::stores::{Blob, Bytes, StoreError};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;
    use std::time::SystemTime;

    /// Zeros that may be absent: `answer` once asked (`None`: the question fails).
    struct Maybe {
        answer: Option<bool>,
        known: OnceLock<bool>,
        asked: AtomicUsize,
    }

    impl RangeSource for Maybe {
        fn read_range(&self, _offset: u64, len: u64) -> Result<Bytes, StoreError> {
            Ok(Bytes::from_vec(vec![0; len as usize]))
        }
    }

    impl Presence for Maybe {
        fn known(&self) -> Option<bool> {
            self.known.get().copied()
        }

        fn resolve(&self) -> Result<bool, StoreError> {
            self.asked.fetch_add(1, Ordering::SeqCst);
            let answer = self
                .answer
                .ok_or_else(|| StoreError::Produce("no answer".into()))?;
            Ok(*self.known.get_or_init(|| answer))
        }
    }

    fn maybe(answer: Option<bool>) -> (Arc<Maybe>, Arc<Blob>) {
        let source = Arc::new(Maybe {
            answer,
            known: OnceLock::new(),
            asked: AtomicUsize::new(0),
        });
        (source.clone(), Blob::ranged_maybe_absent(8, source))
    }

    fn file(path: &str, blob: Arc<Blob>, elidable: bool) -> Entry {
        Entry {
            path: path.into(),
            mtime: SystemTime::UNIX_EPOCH,
            kind: EntryKind::Blob(blob),
            elidable,
        }
    }

    fn ino(ns: &Namespace, path: &str) -> u64 {
        super::super::resolve_in(ns, path).unwrap()
    }

    #[test]
    fn an_absent_chunk_hides_itself_and_the_directories_only_it_implied() {
        let plain = Blob::ready(Bytes::from_vec(b"{}".to_vec()));
        let (absent, absent_blob) = maybe(Some(false));
        let (_, present_blob) = maybe(Some(true));
        let ns = Namespace::build(
            vec![
                file("a/zarr.json", plain.clone(), false),
                file("a/c/0/0", absent_blob.clone(), true),
                file("b/c/0", present_blob, true),
                // A plain file in a directory an elidable one implied keeps it shown.
                file("d/c/0", absent_blob, true),
                file("d/c/x", plain, false),
            ],
            SystemTime::UNIX_EPOCH,
            &mut InodeTable::default(),
        );
        let (a_c, a_chunk) = (ino(&ns, "a/c"), ino(&ns, "a/c/0/0"));
        assert_eq!(ns.present(a_c), None, "nothing is asked while building");
        assert_eq!(ns.present(ino(&ns, "a")), Some(true));
        settle(&ns, [a_c, ino(&ns, "b/c"), ino(&ns, "d/c")].into_iter()).unwrap();
        assert_eq!(ns.present(a_chunk), Some(false));
        assert_eq!(ns.present(ino(&ns, "a/c/0")), Some(false));
        assert_eq!(ns.present(a_c), Some(false));
        assert_eq!(ns.present(ino(&ns, "b/c")), Some(true));
        assert_eq!(ns.present(ino(&ns, "d/c")), Some(true));
        assert_eq!(ns.present(ino(&ns, "d/c/0")), Some(false));
        assert_eq!(
            ns.subdirs(ino(&ns, "a")),
            0,
            "st_nlink counts no hidden directory"
        );
        // Asked once (the blob keeps the answer), even when shown at two places.
        settle(&ns, [a_c, a_chunk].into_iter()).unwrap();
        assert_eq!(absent.asked.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_question_that_fails_is_an_error_and_asked_again() {
        let (source, blob) = maybe(None);
        let ns = Namespace::build(
            vec![file("a/c/0", blob, true)],
            SystemTime::UNIX_EPOCH,
            &mut InodeTable::default(),
        );
        let c = ino(&ns, "a/c");
        for _ in 0..2 {
            assert!(matches!(
                settle(&ns, [c].into_iter()),
                Err(FsError::Content(_))
            ));
        }
        assert_eq!(ns.present(c), None);
        assert_eq!(source.asked.load(Ordering::SeqCst), 2);
    }
}
