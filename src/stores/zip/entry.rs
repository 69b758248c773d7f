//! The blob of one ZIP entry, with every size the archive declares checked before it is used.
//!
//! - A stored entry is a range of the archive's map (zero-copy) guarded by a lazy CRC-32
//!   [`Check`](crate::stores::check::Check): small members are verified before their first byte is served,
//!   large ones by a background pass (see `check.rs`).
//! - A deflate, bzip2 or zstd entry is a ranged blob decompressed on demand, window by window,
//!   into the mount-wide decode cache (`stream`): never held whole, never decompressed beyond
//!   the declared size (a bomb stops one byte past it), and its length and CRC are checked when a
//!   pass reaches its end.
//! - An entry that can never be served (damaged local header, data outside its place, encrypted,
//!   unknown method, a stored entry whose two sizes differ, a declared size that its compressed
//!   data cannot reach) is refused once, at mount, with one
//!   log line naming archive and entry; its reads give `EIO` and the rest of the archive works.
//!
//! `st_size` of an entry is its declared size, capped at [`MAX_SHOWN`].

use std::sync::Arc;

use crate::stores::check::Label;
use crate::stores::zip::member::StoredMember;
use crate::stores::zip::stream::MemberStream;
use crate::stores::zip::{CentralRecord, METHOD_BZIP2, METHOD_DEFLATE, METHOD_STORED, METHOD_ZSTD};
use crate::stores::{Blob, Bytes, StoreError};

/// The largest `st_size` shown for an entry (sizes declared beyond it are absurd anyway).
pub const MAX_SHOWN: u64 = 1 << 40;

/// What serving a member needs of its central record: where its data and its local header
/// lie, its sizes, method, flags and CRC (48 bytes; no name, no defect).
#[derive(Clone, Copy, Debug)]
pub struct MemberSpec {
    /// Offset of the member's data in the archive.
    pub data_offset: u64,
    /// Offset of the member's local header.
    pub local_offset: u64,
    /// Stored (compressed) size.
    pub compressed_size: u64,
    /// Uncompressed size.
    pub size: u64,
    /// CRC-32 of the uncompressed data.
    pub crc32: u32,
    /// Compression method.
    pub method: u16,
    /// General-purpose flags.
    pub flags: u16,
}

impl MemberSpec {
    /// The spec of `record`'s member.
    pub fn of(record: &CentralRecord) -> MemberSpec {
        MemberSpec {
            data_offset: record.data_offset,
            local_offset: record.local_header_offset,
            compressed_size: record.compressed_size,
            size: record.size,
            crc32: record.crc32,
            method: record.method,
            flags: record.flags,
        }
    }
}

/// Why the entry of `record` can never be served, if it cannot (checked without decompressing).
pub fn entry_problem(record: &CentralRecord) -> Option<String> {
    match &record.defect {
        Some(defect) => Some(defect.clone()),
        None => member_problem(&MemberSpec::of(record)),
    }
}

/// Why a member without a defect in its local header can never be served, if it cannot.
fn member_problem(record: &MemberSpec) -> Option<String> {
    if record.flags & 1 != 0 {
        return Some("it is encrypted".into());
    }
    let (packed, size) = (record.compressed_size, record.size);
    match record.method {
        METHOD_STORED if packed != size => Some(format!(
            "it is stored with {packed} bytes but declares {size}"
        )),
        METHOD_STORED => None,
        METHOD_DEFLATE | METHOD_BZIP2 | METHOD_ZSTD => {
            let most = max_expansion(record.method, packed);
            if size > most {
                Some(format!(
                    "it declares {size} bytes, more than {packed} compressed bytes can expand to"
                ))
            } else {
                None
            }
        }
        other => Some(format!(
            "it uses ZIP compression method {other}; supported are 0 (stored), 8 (deflate), \
             12 (bzip2) and 93 (zstd)"
        )),
    }
}

/// The most `packed` compressed bytes of `method` can expand to (with slack for headers).
fn max_expansion(method: u16, packed: u64) -> u64 {
    let ratio = match method {
        // A deflate match of 258 bytes costs at least two bits: 1032:1.
        METHOD_DEFLATE => 1032,
        // A zstd RLE block: 3 header bytes and one byte give up to 128 KiB.
        METHOD_ZSTD => 65_536,
        // bzip2's run-length stages reach far higher ratios: only the declared size bounds
        // it (the member is streamed, never held whole).
        _ => u64::MAX,
    };
    packed.saturating_mul(ratio).saturating_add(1 << 16)
}

/// The blob of the member `record` in `archive` (the archive, mapped), named `label` in errors
/// (archive and entry); `problem`: why it can never be served ([`entry_problem`]), if it cannot.
pub fn member_blob(
    label: Label,
    archive: &Bytes,
    record: &MemberSpec,
    problem: Option<&str>,
) -> Arc<Blob> {
    let shown = record.size.min(MAX_SHOWN);
    if let Some(problem) = problem {
        return failing(shown, format!("{label}: {problem}"));
    }
    let Some(raw) = archive.slice(record.data_offset, record.compressed_size) else {
        return failing(shown, format!("{label}: it lies outside the archive"));
    };
    if record.method == METHOD_STORED {
        // A small member of a mapped archive takes the compact form (no check, producer or
        // value of its own: 24 bytes instead of 256 of heap); a larger one is checked in the
        // background, which needs the general form.
        if let Label::Member { archive, .. } = &label {
            let compact = StoredMember::new(
                archive.clone(),
                record.local_offset,
                record.size,
                record.crc32,
            );
            if let Some(member) = compact {
                return Blob::stored_member(member);
            }
        }
        return Blob::checked_as(raw, record.crc32, label);
    }
    // Decompressed on demand, window by window, through the mount-wide decode cache.
    let fetch = move |offset: u64, len: u64| {
        raw.slice(offset, len)
            .ok_or_else(|| StoreError::Produce("compressed data outside its member".into()))
    };
    let stream = MemberStream::new(
        label.to_string(),
        record.method,
        (record.compressed_size, record.size, record.crc32),
        Arc::new(fetch),
    );
    Blob::ranged(record.size, Arc::new(stream))
}

/// A blob of `len` bytes (as shown by `stat`) whose every read fails with `message`.
fn failing(len: u64, message: String) -> Arc<Blob> {
    Blob::lazy(Some(len), move || Err(StoreError::Produce(message.clone())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implausible_and_unservable_entries_are_named() {
        let record = |method, packed, size, flags| CentralRecord {
            name: "x".into(),
            flags,
            method,
            crc32: 0,
            compressed_size: packed,
            size,
            local_header_offset: 0,
            data_offset: 30,
            mtime: std::time::SystemTime::UNIX_EPOCH,
            raw_range: (0, 0),
            defect: None,
        };
        assert!(entry_problem(&record(METHOD_DEFLATE, 1000, 1_000_000, 0)).is_none());
        let p = entry_problem(&record(METHOD_DEFLATE, 1000, 1 << 40, 0)).unwrap();
        assert!(p.contains("more than 1000 compressed bytes"), "{p}");
        // Streamed: a large member is served whatever its size.
        assert!(entry_problem(&record(METHOD_BZIP2, 1000, 1 << 30, 0)).is_none());
        assert!(entry_problem(&record(METHOD_STORED, 10, 11, 0)).is_some());
        assert!(entry_problem(&record(METHOD_STORED, 10, 10, 1)).is_some());
        assert!(entry_problem(&record(9, 10, 10, 0))
            .unwrap()
            .contains("method 9"));
    }
}
