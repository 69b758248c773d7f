//! ZIP sources: the archive is mapped once; stored entries are ranges of that map.
//!
//! The reader parses the central directory itself (classic and ZIP64 end records, ZIP64 extra
//! fields, data descriptors) because it needs exact data offsets into the map and, for the
//! append path, the raw central-directory records of foreign archives. Rules, as Julia's
//! ZipArchives and Python's `zipfile` read archives:
//! - the last central-directory record of a duplicated name wins;
//! - names ending in `/` are directory entries and are skipped;
//! - stored entries are served straight from the map, whatever their alignment, CRC-checked
//!   lazily; deflate, bzip2 and zstd entries are decompressed on first access, bounded by their
//!   declared size, CRC-checked and cached (both in `entry`);
//! - every size, count and offset from a header is checked against the file before it is used:
//!   a broken archive structure (no end record, a ZIP64 record not where its locator says, a
//!   central directory outside the file or holding fewer records than declared, a record that
//!   is cut short or runs past the directory, a malformed extra field) is a
//!   [`StoreError::CorruptZip`] naming the archive. Records are read one after the other from
//!   the directory's start, so they can neither overlap nor loop;
//! - what is wrong with one entry alone (a local header that is missing or disagrees with its
//!   central record in name, method, CRC or sizes without a data descriptor; data that runs into
//!   the central directory) is that record's `defect`: the entry gives `EIO`, the rest works.

pub mod append;
pub mod copy;
pub mod entry;
pub mod index;
pub(in crate::stores) mod member;
pub mod stream;
pub mod write;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::parallel::{map_slices, Split};
use super::store::IndexedStore;
use super::{Bytes, StoreError, StoreIndex};
use crate::stores::zip::index::IndexBuilder;
use crate::sys::map_readonly;

pub(super) const EOCD_SIG: u32 = 0x0605_4b50;
pub(super) const ZIP64_LOCATOR_SIG: u32 = 0x0706_4b50;
pub(super) const ZIP64_EOCD_SIG: u32 = 0x0606_4b50;
pub(super) const CENTRAL_SIG: u32 = 0x0201_4b50;
pub(super) const LOCAL_SIG: u32 = 0x0403_4b50;

/// Compression methods we can serve.
pub const METHOD_STORED: u16 = 0;
pub(super) const METHOD_DEFLATE: u16 = 8;
pub(super) const METHOD_BZIP2: u16 = 12;
pub(super) const METHOD_ZSTD: u16 = 93;

/// One central-directory record, as found in the archive.
#[derive(Clone, Debug)]
pub struct CentralRecord {
    /// Entry name.
    pub name: String,
    /// General-purpose flags.
    pub flags: u16,
    /// Compression method.
    pub method: u16,
    /// CRC-32 of the uncompressed data.
    pub crc32: u32,
    /// Stored (compressed) size.
    pub compressed_size: u64,
    /// Uncompressed size.
    pub size: u64,
    /// Offset of the local file header.
    pub local_header_offset: u64,
    /// Offset of the entry's data (after the local header).
    pub data_offset: u64,
    /// Modification time.
    pub mtime: SystemTime,
    /// Where the raw record lies in the archive (kept verbatim when the directory is rewritten).
    pub raw_range: (u64, u64),
    /// What is wrong with this entry alone (its local header, where its data lies), if
    /// anything: the entry gives `EIO`, the rest of the archive works.
    pub defect: Option<String>,
}

/// A parsed archive: its map and its central directory.
#[derive(Debug)]
pub struct ZipArchive {
    /// Path of the archive.
    pub path: PathBuf,
    /// The whole archive, mapped.
    pub bytes: Bytes,
    /// Central-directory records in archive order (duplicates included).
    pub records: Vec<CentralRecord>,
    /// Offset of the central directory.
    pub cd_offset: u64,
    /// Size of the central directory.
    pub cd_size: u64,
    /// Modification time of the archive file.
    pub file_mtime: SystemTime,
}

/// Opens and parses the archive at `path` (its central directory on every core).
pub fn open_archive(path: &Path) -> Result<ZipArchive, StoreError> {
    let (bytes, file_mtime) = map_archive(path)?;
    parse(path, bytes, file_mtime, Split::per_core(RECORDS_PER_THREAD))
}

/// [`open_archive`] on the calling thread alone: for work that must leave the other cores to
/// the readers (a ZIP append, at the lowest priority, on a machine of 2 cores).
pub fn open_archive_on_one_thread(path: &Path) -> Result<ZipArchive, StoreError> {
    let (bytes, file_mtime) = map_archive(path)?;
    parse(path, bytes, file_mtime, Split::SEQUENTIAL)
}

/// The archive at `path`, mapped, and its file's modification time.
pub(super) fn map_archive(path: &Path) -> Result<(Bytes, SystemTime), StoreError> {
    let file = File::open(path).map_err(|e| StoreError::io(path, e))?;
    let meta = file.metadata().map_err(|e| StoreError::io(path, e))?;
    let file_mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    let bytes = if meta.len() == 0 {
        Bytes::empty()
    } else {
        Bytes::from_map(Arc::new(
            map_readonly(&file).map_err(|e| StoreError::io(path, e))?,
        ))
    };
    Ok((bytes, file_mtime))
}

/// Parses an archive already in memory (a ZIP inside a file, such as a packed shard); `path`
/// names it in errors.
pub fn parse_archive(path: &Path, bytes: Bytes) -> Result<ZipArchive, StoreError> {
    parse(
        path,
        bytes,
        SystemTime::UNIX_EPOCH,
        Split::per_core(RECORDS_PER_THREAD),
    )
}

/// Opens the archive at `path` as a store index (one entry per distinct file name): its central
/// records become the compact records of `index` as they are parsed, never all held at once.
pub fn open_zip(path: &Path) -> Result<StoreIndex, StoreError> {
    let (bytes, file_mtime) = map_archive(path)?;
    let mut builder = IndexBuilder::new(path, bytes.clone());
    let split = Split::per_core(RECORDS_PER_THREAD);
    parse_each(path, &bytes, file_mtime, &mut builder, split)?;
    Ok(builder.finish(Some(file_mtime)))
}

/// A ZIP archive as a [`Store`]: the index of [`open_zip`] (stored members are ranges of the
/// archive's map, CRC-checked lazily; compressed ones are decompressed once, within their budget);
/// [`IndexedStore::group`] gives the entries of one group of it.
pub fn open_store(path: &Path) -> Result<IndexedStore, StoreError> {
    let what = format!("ZIP archive {}", path.display());
    Ok(IndexedStore::new(what, open_zip(path)?, true))
}

impl ZipArchive {
    /// The index of the archive's files: the last record of each name wins (the index
    /// [`open_zip`] gives, from records already parsed).
    pub fn index(&self) -> StoreIndex {
        let mut builder = IndexBuilder::new(&self.path, self.bytes.clone());
        for record in &self.records {
            // Past u32::MAX members (impossible below a 197 GB directory) the rest is left out.
            if builder.add(record.clone()).is_err() {
                break;
            }
        }
        builder.finish(Some(self.file_mtime))
    }
}

fn corrupt(path: &Path, what: impl Into<String>) -> StoreError {
    StoreError::CorruptZip {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

pub(super) fn u16_at(data: &[u8], at: u64) -> Option<u16> {
    let at = usize::try_from(at).ok()?;
    data.get(at..at.checked_add(2)?)
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
}

pub(super) fn u32_at(data: &[u8], at: u64) -> Option<u32> {
    let at = usize::try_from(at).ok()?;
    data.get(at..at.checked_add(4)?)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

pub(super) fn u64_at(data: &[u8], at: u64) -> Option<u64> {
    let at = usize::try_from(at).ok()?;
    let b = data.get(at..at.checked_add(8)?)?;
    let mut word = [0u8; 8];
    word.copy_from_slice(b);
    Some(u64::from_le_bytes(word))
}

/// Finds the end-of-central-directory record: the last signature whose comment fits the file.
pub(super) fn find_eocd(data: &[u8]) -> Option<u64> {
    if data.len() < 22 {
        return None;
    }
    let lowest = data.len().saturating_sub(22 + 0xFFFF);
    (lowest..=data.len() - 22)
        .rev()
        .find(|&at| {
            data[at..at + 4] == EOCD_SIG.to_le_bytes()
                && at + 22 + usize::from(u16::from_le_bytes([data[at + 20], data[at + 21]]))
                    <= data.len()
        })
        .map(|at| at as u64)
}

fn parse(
    path: &Path,
    bytes: Bytes,
    file_mtime: SystemTime,
    split: Split,
) -> Result<ZipArchive, StoreError> {
    let mut records = Vec::new();
    let (cd_offset, cd_size) = parse_each(path, &bytes, file_mtime, &mut records, split)?;
    Ok(ZipArchive {
        path: path.to_path_buf(),
        bytes,
        records,
        cd_offset,
        cd_size,
        file_mtime,
    })
}

/// What the central records of an archive are handed to, in archive order.
pub(super) trait RecordSink {
    /// How many records the end record declares (checked against the directory's size).
    fn expect(&mut self, count: u64);
    /// The next record.
    fn take(&mut self, record: CentralRecord) -> Result<(), StoreError>;
}

impl RecordSink for Vec<CentralRecord> {
    fn expect(&mut self, count: u64) {
        self.reserve_exact(usize::try_from(count).unwrap_or(0));
    }

    fn take(&mut self, record: CentralRecord) -> Result<(), StoreError> {
        self.push(record);
        Ok(())
    }
}

/// Parses the archive's end records and hands its central records to `sink`, in archive order
/// (parsed a batch at a time on every core); the central directory's offset and size.
fn parse_each(
    path: &Path,
    bytes: &Bytes,
    file_mtime: SystemTime,
    sink: &mut dyn RecordSink,
    split: Split,
) -> Result<(u64, u64), StoreError> {
    let data = bytes.as_slice();
    let eocd = find_eocd(data).ok_or_else(|| {
        corrupt(
            path,
            "no end of central directory record: truncated or not a ZIP",
        )
    })?;
    let short = || corrupt(path, "end of central directory record is cut short");
    let mut count = u64::from(u16_at(data, eocd + 10).ok_or_else(short)?);
    let mut cd_size = u64::from(u32_at(data, eocd + 12).ok_or_else(short)?);
    let mut cd_offset = u64::from(u32_at(data, eocd + 16).ok_or_else(short)?);
    // Where the central directory must end: the ZIP64 end record, or the classic one.
    let mut cd_limit = eocd;
    if eocd >= 20 && u32_at(data, eocd - 20) == Some(ZIP64_LOCATOR_SIG) {
        let z64 = u64_at(data, eocd - 12).ok_or_else(short)?;
        if z64.checked_add(56).is_none_or(|end| end > eocd - 20)
            || u32_at(data, z64) != Some(ZIP64_EOCD_SIG)
        {
            return Err(corrupt(path, "ZIP64 end record not where its locator says"));
        }
        let bad = || corrupt(path, "ZIP64 end record is cut short");
        count = u64_at(data, z64 + 32).ok_or_else(bad)?;
        cd_size = u64_at(data, z64 + 40).ok_or_else(bad)?;
        cd_offset = u64_at(data, z64 + 48).ok_or_else(bad)?;
        cd_limit = z64;
    }
    let Some(cd_end) = cd_offset
        .checked_add(cd_size)
        .filter(|&end| end <= cd_limit)
    else {
        return Err(corrupt(path, "central directory lies outside the file"));
    };
    if count > cd_size / CENTRAL_MIN {
        return Err(corrupt(
            path,
            format!(
                "{count} entries declared, more than a central directory of {cd_size} bytes holds"
            ),
        ));
    }
    // The count is bounded by the directory's size above; records are handed on as they are
    // parsed rather than trusting it.
    sink.expect(count);
    let (mut at, mut n) = (cd_offset, 0u64);
    while n < count {
        // Where the next records start (their fixed fields say where each ends); a record
        // whose fields cannot be read ends the batch, and its parse below says what is wrong.
        let mut starts = Vec::with_capacity(BATCH.min(usize::try_from(count - n).unwrap_or(BATCH)));
        let mut next = Some(at);
        while let Some(start) = next {
            starts.push(start);
            if starts.len() >= BATCH || n + starts.len() as u64 >= count {
                break;
            }
            next = record_end(data, start);
        }
        // Parsed on every core, handed on in archive order: the first damaged one is the error.
        let parsed = map_slices(&starts, split, |&start| {
            parse_record(path, data, start, cd_end, cd_offset, file_mtime)
        });
        for record in parsed {
            let damaged = || corrupt(path, format!("central directory record {n} is damaged"));
            let record = record.ok_or_else(damaged)??;
            at = record.raw_range.1;
            n += 1;
            sink.take(record)?;
        }
    }
    Ok((cd_offset, cd_size))
}

/// Most central records parsed at once (a batch is held whole before it is handed on).
const BATCH: usize = 16_384;
/// Fewest central records worth a thread of their own.
const RECORDS_PER_THREAD: usize = 1024;

/// Where the central record at `at` ends, from its fixed fields alone (`None`: cut short): its
/// name, extra field and comment lengths, read as one 6-byte slice.
fn record_end(data: &[u8], at: u64) -> Option<u64> {
    let from = usize::try_from(at.checked_add(28)?).ok()?;
    let lengths = data.get(from..from.checked_add(6)?)?;
    let len = |i: usize| u64::from(u16::from_le_bytes([lengths[i], lengths[i + 1]]));
    Some(at + CENTRAL_MIN + len(0) + len(2) + len(4))
}

/// Size of a central record without its name, extra field and comment.
const CENTRAL_MIN: u64 = 46;

/// Parses the central record at `at`, which must end by `cd_end`; `None` when it is cut short
/// or its extra field is malformed (the archive is refused). What is wrong with the entry alone
/// (its local header, where its data lies) becomes the record's `defect`.
fn parse_record(
    path: &Path,
    data: &[u8],
    at: u64,
    cd_end: u64,
    cd_offset: u64,
    archive_mtime: SystemTime,
) -> Option<Result<CentralRecord, StoreError>> {
    if at.checked_add(CENTRAL_MIN)? > cd_end {
        return None;
    }
    if u32_at(data, at)? != CENTRAL_SIG {
        return Some(Err(corrupt(
            path,
            format!("bad central directory signature at offset {at}"),
        )));
    }
    let flags = u16_at(data, at + 8)?;
    let method = u16_at(data, at + 10)?;
    let dos_time = u16_at(data, at + 12)?;
    let dos_date = u16_at(data, at + 14)?;
    let crc32 = u32_at(data, at + 16)?;
    let mut compressed_size = u64::from(u32_at(data, at + 20)?);
    let mut size = u64::from(u32_at(data, at + 24)?);
    let name_len = u64::from(u16_at(data, at + 28)?);
    let extra_len = u64::from(u16_at(data, at + 30)?);
    let comment_len = u64::from(u16_at(data, at + 32)?);
    let mut local_header_offset = u64::from(u32_at(data, at + 42)?);
    let extra_start = at + CENTRAL_MIN + name_len;
    let extra_end = extra_start + extra_len;
    let end = extra_end + comment_len;
    if end > cd_end {
        return None;
    }
    let name_bytes =
        &data[usize::try_from(at + CENTRAL_MIN).ok()?..usize::try_from(extra_start).ok()?];
    let name = String::from_utf8_lossy(name_bytes).into_owned();
    let mut unix_mtime = None;
    let mut cursor = extra_start;
    while cursor + 4 <= extra_end {
        let tag = u16_at(data, cursor)?;
        let len = u64::from(u16_at(data, cursor + 2)?);
        let body = cursor + 4;
        if body + len > extra_end {
            return None;
        }
        if tag == 0x0001 {
            // ZIP64: only the fields whose classic value is saturated are present, in order.
            let mut field = body;
            let mut next = || {
                let value = (field + 8 <= body + len).then(|| u64_at(data, field))??;
                field += 8;
                Some(value)
            };
            if size == 0xFFFF_FFFF {
                size = next()?;
            }
            if compressed_size == 0xFFFF_FFFF {
                compressed_size = next()?;
            }
            if local_header_offset == 0xFFFF_FFFF {
                local_header_offset = next()?;
            }
        } else if tag == 0x5455 && len >= 5 && data.get(usize::try_from(body).ok()?)? & 1 == 1 {
            unix_mtime = Some(u32_at(data, body + 1)?);
        }
        cursor = body + len;
    }
    let mtime = match unix_mtime {
        Some(secs) => SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(secs)),
        None => dos_to_system_time(dos_date, dos_time).unwrap_or(archive_mtime),
    };
    // Julia's writer stamps every entry with 1980-01-01 00:00 ("no time"): use the archive's.
    let mtime = if (dos_date, dos_time) == (0x0021, 0) && unix_mtime.is_none() {
        archive_mtime
    } else {
        mtime
    };
    let mut record = CentralRecord {
        name,
        flags,
        method,
        crc32,
        compressed_size,
        size,
        local_header_offset,
        data_offset: local_header_offset,
        mtime,
        raw_range: (at, end),
        defect: None,
    };
    match check_local(data, &record, name_bytes, cd_offset) {
        Ok(data_offset) => record.data_offset = data_offset,
        Err(defect) => record.defect = Some(defect),
    }
    Some(Ok(record))
}

/// Checks the local header of `record` against it and that the entry's data lies before the
/// central directory; the data offset, or what is wrong.
fn check_local(
    data: &[u8],
    record: &CentralRecord,
    name: &[u8],
    cd_offset: u64,
) -> Result<u64, String> {
    let at = record.local_header_offset;
    let fits = at.checked_add(30).is_some_and(|end| end <= cd_offset);
    if !fits || u32_at(data, at) != Some(LOCAL_SIG) {
        return Err("its local header is missing or damaged".into());
    }
    let field16 = |off: u64| u16_at(data, at + off).unwrap_or(0);
    let field32 = |off: u64| u32_at(data, at + off).unwrap_or(0);
    let name_len = u64::from(field16(26));
    let extra_len = u64::from(field16(28));
    let data_offset = at + 30 + name_len + extra_len;
    let local_name = usize::try_from(at + 30)
        .ok()
        .zip(usize::try_from(at + 30 + name_len).ok())
        .and_then(|(from, to)| data.get(from..to));
    if data_offset > cd_offset || local_name != Some(name) {
        return Err("its local header names another entry".into());
    }
    if field16(8) != record.method {
        return Err(format!(
            "its local header says method {}, the central directory {}",
            field16(8),
            record.method
        ));
    }
    // Without a data descriptor, the local header repeats CRC and sizes (a saturated size
    // defers to the local ZIP64 field, which the central record's value is checked against).
    if record.flags & 8 == 0 {
        let agrees = |local: u32, central: u64| local == 0xFFFF_FFFF || u64::from(local) == central;
        if field32(14) != record.crc32
            || !agrees(field32(18), record.compressed_size)
            || !agrees(field32(22), record.size)
        {
            return Err("its local header disagrees with its central record".into());
        }
    }
    if data_offset
        .checked_add(record.compressed_size)
        .is_none_or(|end| end > cd_offset)
    {
        return Err(format!(
            "its data ({} bytes) runs into the central directory or past the end of the file",
            record.compressed_size
        ));
    }
    Ok(data_offset)
}

/// DOS date/time (taken as UTC) to a system time; `None` for impossible values.
fn dos_to_system_time(date: u16, time: u16) -> Option<SystemTime> {
    let year = i64::from(date >> 9) + 1980;
    let month = i64::from((date >> 5) & 0xF);
    let day = i64::from(date & 0x1F);
    if !(1..=12).contains(&month) || day == 0 {
        return None;
    }
    let secs_of_day = i64::from(time >> 11) * 3600
        + i64::from((time >> 5) & 0x3F) * 60
        + i64::from(time & 0x1F) * 2;
    // Days from 1970-01-01 to the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + secs_of_day).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
