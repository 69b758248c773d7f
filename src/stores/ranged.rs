//! Content served by byte ranges: the [`RangeSource`] a ranged [`super::blob::Blob`] reads
//! from (a packed array decoded chunk by chunk, a remote object, a file made on the fly), the
//! [`Presence`] of content that may be absent, and [`read_pieces`], a read across the pieces of
//! a file made on the fly. Re-exported by [`super::blob`], where they are used.

use std::sync::Arc;

use super::bytes::Bytes;
use super::check::CheckState;
use super::StoreError;

/// Bytes `[offset, offset + len)` of content made of `pieces` laid end to end (a file made on
/// the fly: the published ZIP, an HDF5 file): `start_of` a piece's offset (sorted, the first 0),
/// `total` the content's length. The first piece is found by binary search; `read(piece, from,
/// take)` gives `take` bytes of a piece from `from` within it, and a shorter answer is the error
/// `short(piece, got, take)`. A read inside one piece is that piece's bytes as they are (no copy).
pub fn read_pieces<T>(
    pieces: &[T],
    start_of: impl Fn(&T) -> u64,
    total: u64,
    (offset, len): (u64, u64),
    mut read: impl FnMut(&T, u64, u64) -> Result<Bytes, StoreError>,
    short: impl Fn(&T, u64, u64) -> StoreError,
) -> Result<Bytes, StoreError> {
    let end = offset.saturating_add(len).min(total);
    // The last piece starting at or before `offset`.
    let mut index = pieces
        .partition_point(|p| start_of(p) <= offset)
        .saturating_sub(1);
    let mut at = offset;
    let mut parts = Vec::new();
    while at < end {
        let Some(piece) = pieces.get(index) else {
            break;
        };
        let piece_end = pieces.get(index + 1).map_or(total, &start_of);
        let take = piece_end.min(end) - at;
        let bytes = read(piece, at - start_of(piece), take)?;
        if bytes.len() != take {
            return Err(short(piece, bytes.len(), take));
        }
        parts.push(bytes);
        at += take;
        index += 1;
    }
    Ok(Bytes::joined(parts))
}

/// Content that is served by byte ranges (see [`super::blob::Blob::ranged`]).
pub trait RangeSource: Send + Sync {
    /// Exactly the bytes `[offset, offset + len)` of the content; the range is within the
    /// content's length and not empty.
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError>;

    /// Where the source's own integrity check stands (`None`: it has none).
    fn check_state(&self) -> Option<CheckState> {
        None
    }

    /// What the content is made of, when it is made when read (see [`super::rendered`]).
    fn made_of(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        None
    }

    /// A hint that the content will likely be read soon: a source that fetches (a remote
    /// object) may start fetching it in the background. Never blocks.
    fn prefetch(&self) {}
}

/// Whether content that may be absent exists (a remote object the server may answer 404 for).
pub trait Presence: Send + Sync {
    /// Whether it exists, when that is known without asking the source.
    fn known(&self) -> Option<bool>;
    /// Whether it exists, asking the source if needed (may do network I/O; the answer is kept,
    /// a failure is not).
    fn resolve(&self) -> Result<bool, StoreError>;
}
