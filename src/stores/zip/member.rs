//! The compact form of the most common blob of a ZIP source: a small stored member (a chunk of a
//! Zarr array, a metadata document), 24 bytes (40 with its `Arc`'s counts: a 48-byte chunk of
//! glibc's heap) where a general blob and its CRC [`Check`] take 256 bytes of heap.
//!
//! Such a member is a range of the archive's map, so it needs no producer, no cached value and
//! no second handle on its bytes: it keeps the archive, where the member's local header starts,
//! its length and where the check of it stands. The rest is read from the local header, in the
//! map, when needed: where the data starts (after the name and the extra field), the CRC-32, and
//! the name (a [`Label::Member`] made only when a message needs it). The archive's open checked
//! that header against the central record (same name and method; CRC and sizes unless a data
//! descriptor follows the data, which then holds the CRC); a member whose CRC is in neither
//! place keeps the general form. Its bytes are sliced from the map at each access (an `Arc`
//! clone). Like any checked blob it is verified before its first byte is served (it is at most
//! [`SYNC_CHECK_MAX`] bytes, so the check is synchronous and short), and once found corrupt
//! every access is an error. A larger stored member keeps the general form, whose [`Check`] can
//! run in the background.
//!
//! [`Check`]: crate::stores::check::Check

use std::sync::atomic::AtomicU8;
use std::sync::Arc;

use crate::stores::check::{self, ArchiveName, CheckState, Label, SYNC_CHECK_MAX};
use crate::stores::zip::{u16_at, u32_at, LOCAL_SIG};
use crate::stores::{Bytes, StoreError};

/// A stored member of at most [`SYNC_CHECK_MAX`] bytes of a mapped archive.
pub(in crate::stores) struct StoredMember {
    archive: Arc<ArchiveName>,
    /// Where its local header starts.
    local_at: u64,
    /// Its length, at most [`SYNC_CHECK_MAX`].
    len: u32,
    /// Where its check stands (`check.rs`'s states).
    state: AtomicU8,
    /// Its CRC-32 is in the data descriptor after its data, not in its local header.
    crc_after: bool,
}

/// The optional signature of a data descriptor.
const DESCRIPTOR_SIG: u32 = 0x0807_4b50;

/// Where a local header holds the CRC-32, the name's length and the extra field's length.
const CRC_AT: u64 = 14;
const NAME_LEN_AT: u64 = 26;
const EXTRA_LEN_AT: u64 = 28;
const NAME_AT: u64 = 30;

impl StoredMember {
    /// The member of `len` bytes whose local header starts at `local_at` in `archive` and must
    /// have CRC-32 `crc`; `None` when it is larger than [`SYNC_CHECK_MAX`], when the data does
    /// not lie within the archive, or when neither the header nor a data descriptor after the
    /// data holds that CRC.
    pub(in crate::stores) fn new(
        archive: Arc<ArchiveName>,
        local_at: u64,
        len: u64,
        crc: u32,
    ) -> Option<StoredMember> {
        if len > SYNC_CHECK_MAX {
            return None;
        }
        let mut member = StoredMember {
            archive,
            local_at,
            len: u32::try_from(len).ok()?,
            state: AtomicU8::new(0),
            crc_after: false,
        };
        if u32_at(member.archive.bytes.as_slice(), local_at) != Some(LOCAL_SIG) {
            return None;
        }
        member.archive.bytes.slice(member.data_at()?, len)?;
        if member.crc() != Some(crc) {
            member.crc_after = true;
            if member.crc() != Some(crc) {
                return None;
            }
        }
        Some(member)
    }

    /// Its length.
    pub(in crate::stores) fn len(&self) -> u64 {
        u64::from(self.len)
    }

    /// The CRC-32 its local header (or the data descriptor after its data) records.
    pub(in crate::stores) fn crc(&self) -> Option<u32> {
        let bytes = self.archive.bytes.as_slice();
        if !self.crc_after {
            return u32_at(bytes, self.local_at + CRC_AT);
        }
        let end = self.data_at()? + self.len();
        let at = if u32_at(bytes, end) == Some(DESCRIPTOR_SIG) {
            end + 4
        } else {
            end
        };
        u32_at(bytes, at)
    }

    /// Where its data starts: after the local header, its name and its extra field.
    fn data_at(&self) -> Option<u64> {
        let bytes = self.archive.bytes.as_slice();
        let name = u16_at(bytes, self.local_at + NAME_LEN_AT)?;
        let extra = u16_at(bytes, self.local_at + EXTRA_LEN_AT)?;
        Some(self.local_at + NAME_AT + u64::from(name) + u64::from(extra))
    }

    /// Where its check stands.
    pub(in crate::stores) fn state(&self) -> CheckState {
        check::state_of(&self.state)
    }

    /// What names it in messages (archive and entry): the name its local header holds.
    fn label(&self) -> Label {
        let len = u16_at(self.archive.bytes.as_slice(), self.local_at + NAME_LEN_AT);
        Label::Member {
            archive: self.archive.clone(),
            at: self.local_at + NAME_AT,
            len: len.unwrap_or(0),
        }
    }

    fn raw(&self) -> Result<Bytes, StoreError> {
        self.data_at()
            .and_then(|at| self.archive.bytes.slice(at, self.len()))
            .ok_or_else(|| StoreError::Produce(format!("{}: outside the archive", self.label())))
    }

    /// Verifies now (unless already decided) and returns the outcome.
    pub(in crate::stores) fn verify(&self) -> Result<(), StoreError> {
        self.checked().map(|_| ())
    }

    /// Its bytes (a range of the archive's map), verified first on the first access; an error
    /// once it was found corrupt.
    pub(in crate::stores) fn bytes(&self) -> Result<Bytes, StoreError> {
        self.checked()
    }

    fn checked(&self) -> Result<Bytes, StoreError> {
        match self.state() {
            CheckState::Verified => self.raw(),
            CheckState::Bad => Err(check::failure(&self.label())),
            _ => {
                let raw = self.raw()?;
                let found = crc32fast::hash(raw.as_slice());
                let expected = self.crc().unwrap_or(!found);
                check::judge(&self.state, expected, found, &self.label())?;
                Ok(raw)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::Blob;

    /// An "archive" of one local header naming `name`, recording CRC `crc`, then `data`.
    fn archive(name: &str, data: &[u8], crc: u32) -> Arc<ArchiveName> {
        archive_with(name, data, crc, &[])
    }

    /// [`archive`], `after` following the data (a data descriptor).
    fn archive_with(name: &str, data: &[u8], crc: u32, after: &[u8]) -> Arc<ArchiveName> {
        let len = (data.len() as u32).to_le_bytes();
        let mut bytes = LOCAL_SIG.to_le_bytes().to_vec();
        bytes.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // version, flags, method, time, date
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes.extend_from_slice(&len);
        bytes.extend_from_slice(&len);
        bytes.extend_from_slice(&(name.len() as u16).to_le_bytes());
        bytes.extend_from_slice(&[0, 0]); // no extra field
        bytes.extend_from_slice(name.as_bytes());
        bytes.extend_from_slice(data);
        bytes.extend_from_slice(after);
        Arc::new(ArchiveName {
            path: "a.zip".into(),
            bytes: Bytes::from_vec(bytes),
        })
    }

    fn member(data: &[u8], crc: u32) -> Arc<Blob> {
        let member = StoredMember::new(archive("x/0", data, crc), 0, data.len() as u64, crc);
        Blob::stored_member(member.unwrap())
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
    fn only_small_members_within_the_archive_whose_header_holds_their_crc_are_compact() {
        let a = archive("x", b"abc", 7);
        assert!(StoredMember::new(a.clone(), 0, 3, 7).is_some());
        assert!(
            StoredMember::new(a.clone(), 0, 4, 7).is_none(),
            "past the end"
        );
        assert!(
            StoredMember::new(a.clone(), 0, 3, 8).is_none(),
            "another CRC"
        );
        assert!(
            StoredMember::new(a.clone(), 1, 3, 7).is_none(),
            "not a local header"
        );
        assert!(StoredMember::new(a, 0, SYNC_CHECK_MAX + 1, 7).is_none());
        // A data descriptor after the data holds the CRC (with or without its signature).
        let crc = crc32fast::hash(b"abc");
        for sig in [&DESCRIPTOR_SIG.to_le_bytes()[..], &[]] {
            let descriptor = [sig, &crc.to_le_bytes(), &[3, 0, 0, 0, 3, 0, 0, 0]].concat();
            let member = StoredMember::new(archive_with("x", b"abc", 0, &descriptor), 0, 3, crc);
            let blob = Blob::stored_member(member.expect("compact"));
            assert_eq!(blob.recorded_crc(), Some(crc));
            assert_eq!(blob.bytes().unwrap().as_slice(), b"abc");
        }
        let descriptor = [&(crc ^ 1).to_le_bytes()[..], &[0; 8]].concat();
        assert!(StoredMember::new(archive_with("x", b"abc", 0, &descriptor), 0, 3, crc).is_none());
    }

    #[test]
    fn a_compact_member_is_small() {
        assert!(
            std::mem::size_of::<StoredMember>() <= 24,
            "{}",
            std::mem::size_of::<StoredMember>()
        );
    }
}
