//! The compact form of the most common blob of a ZIP source: a small stored member (a chunk of a
//! Zarr array, a metadata document), 40 bytes (56 with its `Arc`'s counts) where a general blob
//! and its CRC [`Check`] take 256 bytes of heap.
//!
//! Such a member is a range of the archive's map, so it needs no producer, no cached value and
//! no second handle on its bytes: it keeps the archive (which also names it in messages, by
//! where its name lies: a [`Label::Member`] made only when a message needs it), where its data
//! and its name lie, its CRC-32 and where the check of it stands. Its bytes are sliced from the
//! map at each access (an `Arc` clone). Like any checked blob it is verified before its first
//! byte is served (it is at most [`SYNC_CHECK_MAX`] bytes, so the check is synchronous and
//! short), and once found corrupt every access is an error. A larger stored member keeps the
//! general form, whose [`Check`] can run in the background.
//!
//! [`Check`]: super::check::Check

use std::sync::atomic::AtomicU8;
use std::sync::Arc;

use super::check::{self, ArchiveName, CheckState, Label, SYNC_CHECK_MAX};
use super::{Bytes, StoreError};

/// A stored member of at most [`SYNC_CHECK_MAX`] bytes of a mapped archive.
pub(super) struct StoredMember {
    archive: Arc<ArchiveName>,
    data_at: u64,
    name_at: u64,
    /// Its length, at most [`SYNC_CHECK_MAX`].
    len: u32,
    crc: u32,
    name_len: u16,
    /// Where its check stands (`check.rs`'s states).
    state: AtomicU8,
}

impl StoredMember {
    /// The member whose `len` bytes start at `data_at` in `archive` and must have CRC-32 `crc`,
    /// named by the `name_len` bytes at `name_at`; `None` when it is larger than
    /// [`SYNC_CHECK_MAX`] or does not lie within the archive.
    pub(super) fn new(
        archive: Arc<ArchiveName>,
        data_at: u64,
        len: u64,
        crc: u32,
        (name_at, name_len): (u64, u16),
    ) -> Option<StoredMember> {
        if len > SYNC_CHECK_MAX {
            return None;
        }
        archive.bytes.slice(data_at, len)?;
        Some(StoredMember {
            archive,
            data_at,
            name_at,
            len: u32::try_from(len).ok()?,
            crc,
            name_len,
            state: AtomicU8::new(0),
        })
    }

    /// Its length.
    pub(super) fn len(&self) -> u64 {
        u64::from(self.len)
    }

    /// The CRC-32 recorded for it.
    pub(super) fn crc(&self) -> u32 {
        self.crc
    }

    /// Where its check stands.
    pub(super) fn state(&self) -> CheckState {
        check::state_of(&self.state)
    }

    /// What names it in messages (archive and entry).
    fn label(&self) -> Label {
        Label::Member {
            archive: self.archive.clone(),
            at: self.name_at,
            len: self.name_len,
        }
    }

    fn raw(&self) -> Result<Bytes, StoreError> {
        self.archive
            .bytes
            .slice(self.data_at, self.len())
            .ok_or_else(|| StoreError::Produce(format!("{}: outside the archive", self.label())))
    }

    /// Verifies now (unless already decided) and returns the outcome.
    pub(super) fn verify(&self) -> Result<(), StoreError> {
        self.checked().map(|_| ())
    }

    /// Its bytes (a range of the archive's map), verified first on the first access; an error
    /// once it was found corrupt.
    pub(super) fn bytes(&self) -> Result<Bytes, StoreError> {
        self.checked()
    }

    fn checked(&self) -> Result<Bytes, StoreError> {
        match self.state() {
            CheckState::Verified => self.raw(),
            CheckState::Bad => Err(check::failure(&self.label())),
            _ => {
                let raw = self.raw()?;
                let found = crc32fast::hash(raw.as_slice());
                check::judge(&self.state, self.crc, found, &self.label())?;
                Ok(raw)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::Blob;

    /// An "archive" of `name` then `data`, mapped as a buffer.
    fn archive(name: &str, data: &[u8]) -> Arc<ArchiveName> {
        let mut bytes = name.as_bytes().to_vec();
        bytes.extend_from_slice(data);
        Arc::new(ArchiveName {
            path: "a.zip".into(),
            bytes: Bytes::from_vec(bytes),
        })
    }

    fn member(data: &[u8], crc: u32) -> Arc<Blob> {
        let archive = archive("x/0", data);
        let len = data.len() as u64;
        let member = StoredMember::new(archive, 3, len, crc, (0, 3)).unwrap();
        Blob::stored_member(member)
    }

    #[test]
    fn a_compact_member_reads_like_a_checked_blob() {
        let data = b"hello world";
        let good = member(data, crc32fast::hash(data));
        let general = Blob::checked(
            Bytes::from_vec(data.to_vec()),
            crc32fast::hash(data),
            "a.zip: entry x/0".into(),
        );
        for blob in [&good, &general] {
            assert_eq!(blob.known_len(), Some(11));
            assert_eq!(blob.recorded_crc(), Some(crc32fast::hash(data)));
            assert_eq!(blob.check_state(), Some(CheckState::Unverified));
            assert!(blob.is_materialized() && !blob.is_ranged() && !blob.is_fill());
            assert_eq!(blob.bytes().unwrap().as_slice(), data);
            assert_eq!(blob.check_state(), Some(CheckState::Verified));
            assert_eq!(blob.read_range(6, 100).unwrap().as_slice(), b"world");
            assert_eq!(Blob::slice(blob, 1, 3).bytes().unwrap().as_slice(), b"ell");
        }
    }

    #[test]
    fn a_corrupt_compact_member_fails_like_a_checked_blob() {
        let data = b"hello world";
        let bad = member(data, crc32fast::hash(data) ^ 1);
        let general = Blob::checked(
            Bytes::from_vec(data.to_vec()),
            crc32fast::hash(data) ^ 1,
            "a.zip: entry x/0".into(),
        );
        let slice = Blob::slice(&bad, 1, 3);
        let (e1, e2) = (bad.bytes().unwrap_err(), general.bytes().unwrap_err());
        assert_eq!(e1.to_string(), e2.to_string());
        assert_eq!(
            e1.to_string(),
            "a.zip: entry x/0: stored entry fails its CRC-32 check"
        );
        assert_eq!(bad.check_state(), Some(CheckState::Bad));
        assert!(bad.verify().is_err() && bad.read_range(0, 1).is_err());
        assert!(slice.bytes().is_err(), "a slice answers for its member");
    }

    #[test]
    fn only_small_members_within_the_archive_are_compact() {
        let a = archive("x", b"abc");
        assert!(StoredMember::new(a.clone(), 1, 3, 0, (0, 1)).is_some());
        assert!(StoredMember::new(a.clone(), 2, 3, 0, (0, 1)).is_none());
        assert!(StoredMember::new(a, 0, SYNC_CHECK_MAX + 1, 0, (0, 1)).is_none());
    }

    #[test]
    fn a_compact_member_is_small() {
        assert!(
            std::mem::size_of::<StoredMember>() <= 40,
            "{}",
            std::mem::size_of::<StoredMember>()
        );
    }
}
