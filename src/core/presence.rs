//! Settling whether elidable nodes are shown (`namespace` module doc): the blobs a `lookup`,
//! `getattr` or `readdir` needs are asked (a remote source: one HEAD each, kept by the blob),
//! a few at a time, on the calling thread and its helpers, never under the state lock: the
//! caller holds only its own `Arc` of the tree. A failure is the caller's `EIO`; nothing is
//! remembered of it, so the next call asks again.

use std::sync::Arc;

use crate::stores::{Blob, StoreError};

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
    resolve_all(&blobs).map_err(FsError::Content)
}

fn resolve_all(blobs: &[Arc<Blob>]) -> Result<(), StoreError> {
    match blobs {
        [] => Ok(()),
        [one] => one.resolve_presence().map(|_| ()),
        _ => {
            for group in blobs.chunks(MAX_PARALLEL) {
                let results: Vec<Result<bool, StoreError>> = std::thread::scope(|s| {
                    let handles: Vec<_> = group
                        .iter()
                        .map(|blob| s.spawn(move || blob.resolve_presence()))
                        .collect();
                    handles
                        .into_iter()
                        .map(|h| {
                            h.join().unwrap_or_else(|_| {
                                Err(StoreError::Produce("a presence check panicked".into()))
                            })
                        })
                        .collect()
                });
                for result in results {
                    result?;
                }
            }
            Ok(())
        }
    }
}
