//! A ZIP archive behind a URL, read with range requests: the end of the file (EOCD, ZIP64
//! locator) and the central directory are fetched at open and parsed by [`parse_archive`] (the
//! local parser, given the directory rebased to offset 0); members are fetched on demand: a
//! stored member is a ranged blob (its local header is read on first access to find its data)
//! whose CRC-32 is checked from the ranges read (`range_check`: a member up to 4 MiB whole before
//! its first byte, a larger one once every byte of it was read), a compressed one is
//! decompressed on demand by `stores::zip::stream` (its compressed bytes fetched by ranges, CRC checked
//! when a pass reaches its end).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use crate::stores::blob::{Blob, CheckState, RangeSource};
use crate::stores::http::object::RemoteObject;
use crate::stores::http::range_check::RangeCheck;
use crate::stores::http::{redact, Fetch, HttpClient};
use crate::stores::zip::entry::entry_problem;
use crate::stores::zip::stream::MemberStream;
use crate::stores::zip::{
    find_eocd, parse_archive, u16_at, u32_at, u64_at, CentralRecord, LOCAL_SIG, METHOD_STORED,
    ZIP64_LOCATOR_SIG,
};
use crate::stores::{Bytes, Entry, StoreError, StoreIndex};

/// How much of the end of the file is read first (EOCD with the longest comment, ZIP64 records).
const TAIL: u64 = 22 + 0xFFFF + 20 + 56;

/// Opens the remote archive at `url` as a store index.
pub fn open_remote_zip(client: &Arc<HttpClient>, url: &str) -> Result<StoreIndex, StoreError> {
    let shown = redact(url);
    let path = Path::new(&shown);
    let corrupt = |what: &str| StoreError::CorruptZip {
        path: path.to_path_buf(),
        what: what.to_string(),
    };
    let (len, validator) = client.stat(url).map_err(|e| match e {
        Fetch::NotFound => StoreError::Produce(format!("{shown}: not found on the server (404)")),
        other => other.into(),
    })?;
    let archive = RemoteObject::new(client.clone(), url.to_string(), len, Some(validator), false);
    let tail_start = len.saturating_sub(TAIL);
    let tail = if len == 0 {
        Bytes::empty()
    } else {
        archive.read_range(tail_start, len - tail_start)?
    };
    let data = tail.as_slice();
    let eocd = find_eocd(data).ok_or_else(|| corrupt("no end of central directory record"))?;
    // Where the central directory starts: the ZIP64 end record's value, or the classic one.
    let locator = eocd
        .checked_sub(20)
        .filter(|&at| u32_at(data, at) == Some(ZIP64_LOCATOR_SIG));
    let z64 = match locator {
        Some(at) => Some(u64_at(data, at + 8).ok_or_else(|| corrupt("ZIP64 locator cut short"))?),
        None => None,
    };
    let cd_offset = match z64 {
        Some(abs) => {
            let rel = abs
                .checked_sub(tail_start)
                .ok_or_else(|| corrupt("ZIP64 end record before the end of the file"))?;
            u64_at(data, rel.saturating_add(48))
                .ok_or_else(|| corrupt("ZIP64 end record cut short"))?
        }
        None => u64::from(u32_at(data, eocd + 16).ok_or_else(|| corrupt("EOCD cut short"))?),
    };
    // The directory comes before the end records (both are rebased onto it below).
    if cd_offset > tail_start + locator.unwrap_or(eocd) {
        return Err(corrupt("central directory lies outside the file"));
    }
    // The directory and everything after it, rebased so that it starts at offset 0.
    let mut window = archive
        .read_range(cd_offset, len - cd_offset)?
        .as_slice()
        .to_vec();
    let shift = |abs: u64| abs - cd_offset;
    let eocd_rel = shift(tail_start + eocd) as usize;
    window[eocd_rel + 16..eocd_rel + 20].copy_from_slice(&0u32.to_le_bytes());
    if let (Some(abs), Some(loc)) = (z64, locator) {
        let loc_rel = shift(tail_start + loc) as usize;
        let z_rel = abs
            .checked_sub(cd_offset)
            .ok_or_else(|| corrupt("ZIP64 end record inside the entries"))?;
        window[loc_rel + 8..loc_rel + 16].copy_from_slice(&z_rel.to_le_bytes());
        let at = z_rel as usize + 48;
        window
            .get_mut(at..at + 8)
            .ok_or_else(|| corrupt("ZIP64 end record cut short"))?
            .copy_from_slice(&0u64.to_le_bytes());
    }
    let parsed = parse_archive(path, Bytes::from_vec(window))?;
    let mtime = SystemTime::now();
    let mut entries = BTreeMap::new();
    for record in parsed.records {
        if record.name.ends_with('/') {
            continue;
        }
        let blob = member_blob(archive.clone(), url, record.clone());
        let mtime = if record.mtime == SystemTime::UNIX_EPOCH {
            mtime
        } else {
            record.mtime
        };
        entries.insert(record.name, Entry { blob, mtime });
    }
    Ok(StoreIndex::new(entries, Some(mtime)))
}

/// Where a member's data starts, read from its local header on first use.
struct Member {
    archive: Arc<RemoteObject>,
    record: CentralRecord,
    data_offset: OnceLock<u64>,
    what: String,
    /// The CRC-32 check of a stored member's bytes.
    check: Option<RangeCheck>,
}

impl Member {
    fn data_offset(&self) -> Result<u64, StoreError> {
        if let Some(&at) = self.data_offset.get() {
            return Ok(at);
        }
        let bad = || StoreError::Produce(format!("{}: its local header is damaged", self.what));
        let at = self.record.local_header_offset;
        let header = self.archive.read_range(at, 30).map_err(|_| bad())?;
        let h = header.as_slice();
        if u32_at(h, 0) != Some(LOCAL_SIG) {
            return Err(bad());
        }
        let name_len = u64::from(u16_at(h, 26).ok_or_else(bad)?);
        let extra_len = u64::from(u16_at(h, 28).ok_or_else(bad)?);
        let data = at + 30 + name_len + extra_len;
        Ok(*self.data_offset.get_or_init(|| data))
    }
}

impl RangeSource for Member {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let start = self.data_offset()?;
        let Some(check) = &self.check else {
            return self.archive.read_range(start + offset, len);
        };
        check.gate()?;
        if check.wants_whole() {
            let whole = self.archive.read_range(start, self.record.size)?;
            check.record(0, whole.as_slice())?;
            return whole.slice(offset, len).ok_or_else(|| {
                StoreError::Produce(format!("{}: range {offset}+{len} outside it", self.what))
            });
        }
        let bytes = self.archive.read_range(start + offset, len)?;
        check.record(offset, bytes.as_slice())?;
        Ok(bytes)
    }

    fn check_state(&self) -> Option<CheckState> {
        self.check.as_ref().map(RangeCheck::state)
    }
}

/// The blob of one member (fetched on demand).
fn member_blob(archive: Arc<RemoteObject>, url: &str, record: CentralRecord) -> Arc<Blob> {
    let what = format!("{}: entry {}", redact(url), record.name);
    let (method, size, crc, packed) = (
        record.method,
        record.size,
        record.crc32,
        record.compressed_size,
    );
    if let Some(problem) = entry_problem(&CentralRecord {
        defect: None,
        ..record.clone()
    }) {
        let message = format!("{what}: {problem}");
        return Blob::lazy(Some(size), move || {
            Err(StoreError::Produce(message.clone()))
        });
    }
    let check = (method == METHOD_STORED).then(|| RangeCheck::new(size, crc, what.clone()));
    let member = Arc::new(Member {
        archive,
        record,
        data_offset: OnceLock::new(),
        what: what.clone(),
        check,
    });
    if method == METHOD_STORED {
        return Blob::ranged(size, member);
    }
    // Decompressed on demand, window by window (the compressed bytes fetched by ranges).
    let fetch = move |offset: u64, len: u64| member.read_range(offset, len);
    let stream = MemberStream::new(what, method, (packed, size, crc), Arc::new(fetch));
    Blob::ranged(size, Arc::new(stream))
}
