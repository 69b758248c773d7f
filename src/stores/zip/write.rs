//! The bytes of the ZIP records DataAxesFormats' `MmapZipStore` writes (`daf-formats.md` §7.1):
//! local headers of stored entries with a ZIP64 extra and the `0xDAF1` padding field that puts
//! the data at a multiple of 8, central directory records, and the fixed 98-byte ZIP64 trailer.
//!
//! Shared by the appender of ZIP sources (`append`, which also records real times) and the
//! published ZIP of a mount (`views::publish`, which writes upstream's fixed 1980 time).

use crate::stores::zip::{CENTRAL_SIG, EOCD_SIG, LOCAL_SIG, ZIP64_EOCD_SIG, ZIP64_LOCATOR_SIG};

/// Bytes of the fixed trailer: ZIP64 end record (56) + locator (20) + end record (22).
pub const TRAILER: u64 = 98;

/// The DOS time and date upstream writes: 00:00 on 1980-01-01.
pub const FIXED_DOS: (u16, u16) = (0, 0x0021);

/// The civil date `(year, month, day)` of a day counted from 1970-01-01 (Howard Hinnant's
/// algorithm).
pub fn civil_date(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// The DOS time and date of `t` (UTC; before 1980: 1980-01-01).
pub fn dos_time(t: std::time::SystemTime) -> (u16, u16) {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (year, month, day) = civil_date(days);
    if year < 1980 {
        return FIXED_DOS;
    }
    let time = ((rem / 3600) << 11) | (((rem % 3600) / 60) << 5) | ((rem % 60) / 2);
    let date = ((year - 1980) << 9) | (month << 5) | day;
    (time as u16, date as u16)
}

/// Length of the local header of an entry named with `name_len` bytes and padded by `pad`.
pub fn local_header_len(name_len: usize, pad: u64) -> u64 {
    50 + name_len as u64 + pad
}

/// Length of a central record (without the extended timestamp field) of a `name_len`-byte name.
pub fn central_record_len(name_len: usize) -> u64 {
    74 + name_len as u64
}

/// Padding `P` that puts data at a multiple of 8 after a header ending at `end` (§7.1).
pub fn padding(end: u64) -> u64 {
    match end % 8 {
        0 => 0,
        r if 8 - r >= 4 => 8 - r,
        r => 8 - r + 8,
    }
}

/// The local header of a stored entry (§7.1), `pad` from [`padding`].
pub fn local_header(
    name: &[u8],
    crc: u32,
    size: u64,
    pad: u64,
    (time, date): (u16, u16),
) -> Vec<u8> {
    let mut h = Vec::with_capacity(local_header_len(name.len(), pad) as usize);
    h.extend_from_slice(&LOCAL_SIG.to_le_bytes());
    h.extend_from_slice(&45u16.to_le_bytes());
    h.extend_from_slice(&0x0800u16.to_le_bytes());
    h.extend_from_slice(&0u16.to_le_bytes());
    h.extend_from_slice(&time.to_le_bytes());
    h.extend_from_slice(&date.to_le_bytes());
    h.extend_from_slice(&crc.to_le_bytes());
    h.extend_from_slice(&u32::MAX.to_le_bytes());
    h.extend_from_slice(&u32::MAX.to_le_bytes());
    h.extend_from_slice(&(name.len() as u16).to_le_bytes());
    h.extend_from_slice(&((20 + pad) as u16).to_le_bytes());
    h.extend_from_slice(name);
    h.extend_from_slice(&1u16.to_le_bytes());
    h.extend_from_slice(&16u16.to_le_bytes());
    h.extend_from_slice(&size.to_le_bytes());
    h.extend_from_slice(&size.to_le_bytes());
    if pad > 0 {
        h.extend_from_slice(&0xDAF1u16.to_le_bytes());
        h.extend_from_slice(&((pad - 4) as u16).to_le_bytes());
        h.extend(std::iter::repeat_n(0u8, (pad - 4) as usize));
    }
    h
}

/// One entry's central directory record (§7.1); with `mtime`, an extended timestamp field
/// (`0x5455`, 9 bytes) follows the ZIP64 extra.
pub fn central_record(
    name: &[u8],
    crc: u32,
    size: u64,
    header_offset: u64,
    (time, date): (u16, u16),
    mtime: Option<u32>,
) -> Vec<u8> {
    let extra = 28u16 + if mtime.is_some() { 9 } else { 0 };
    let mut r = Vec::with_capacity(46 + name.len() + usize::from(extra));
    r.extend_from_slice(&CENTRAL_SIG.to_le_bytes());
    r.extend_from_slice(&0x031Eu16.to_le_bytes());
    r.extend_from_slice(&45u16.to_le_bytes());
    r.extend_from_slice(&0x0800u16.to_le_bytes());
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&time.to_le_bytes());
    r.extend_from_slice(&date.to_le_bytes());
    r.extend_from_slice(&crc.to_le_bytes());
    r.extend_from_slice(&u32::MAX.to_le_bytes());
    r.extend_from_slice(&u32::MAX.to_le_bytes());
    r.extend_from_slice(&(name.len() as u16).to_le_bytes());
    r.extend_from_slice(&extra.to_le_bytes());
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&0x81A4_0000u32.to_le_bytes());
    r.extend_from_slice(&u32::MAX.to_le_bytes());
    r.extend_from_slice(name);
    r.extend_from_slice(&1u16.to_le_bytes());
    r.extend_from_slice(&24u16.to_le_bytes());
    r.extend_from_slice(&size.to_le_bytes());
    r.extend_from_slice(&size.to_le_bytes());
    r.extend_from_slice(&header_offset.to_le_bytes());
    if let Some(mtime) = mtime {
        // Extended timestamp: the real modification time, for `make` and friends.
        r.extend_from_slice(&0x5455u16.to_le_bytes());
        r.extend_from_slice(&5u16.to_le_bytes());
        r.push(1);
        r.extend_from_slice(&mtime.to_le_bytes());
    }
    r
}

/// The 98-byte trailer of an archive of `entries` entries whose directory is at `cd_offset`.
pub fn trailer(entries: u64, cd_offset: u64, cd_size: u64) -> Vec<u8> {
    let mut t = Vec::with_capacity(TRAILER as usize);
    t.extend_from_slice(&ZIP64_EOCD_SIG.to_le_bytes());
    t.extend_from_slice(&44u64.to_le_bytes());
    t.extend_from_slice(&0x031Eu16.to_le_bytes());
    t.extend_from_slice(&45u16.to_le_bytes());
    t.extend_from_slice(&0u32.to_le_bytes());
    t.extend_from_slice(&0u32.to_le_bytes());
    t.extend_from_slice(&entries.to_le_bytes());
    t.extend_from_slice(&entries.to_le_bytes());
    t.extend_from_slice(&cd_size.to_le_bytes());
    t.extend_from_slice(&cd_offset.to_le_bytes());
    t.extend_from_slice(&ZIP64_LOCATOR_SIG.to_le_bytes());
    t.extend_from_slice(&0u32.to_le_bytes());
    t.extend_from_slice(&(cd_offset + cd_size).to_le_bytes());
    t.extend_from_slice(&1u32.to_le_bytes());
    t.extend_from_slice(&EOCD_SIG.to_le_bytes());
    t.extend_from_slice(&[
        0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0,
    ]);
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    /// The byte-level excerpt of `zipdaf_v1_1.daf.zip` in `daf-formats.md` §11.6.
    #[test]
    fn records_equal_the_reference_bytes() {
        assert_eq!(padding(50 + 8), 6);
        assert_eq!(padding(82 + 50 + 18), 10);
        assert_eq!(padding(64), 0);
        assert_eq!(
            local_header(b"daf.json", 0xe5cb4e97, 18, 6, FIXED_DOS),
            hex("50 4b 03 04 2d 00 00 08 00 00 00 00 21 00 97 4e cb e5 ff ff ff ff ff ff ff ff 08 00 1a 00 64 61 66 2e 6a 73 6f 6e 01 00 10 00 12 00 00 00 00 00 00 00 12 00 00 00 00 00 00 00 f1 da 02 00 00 00")
        );
        assert_eq!(
            central_record(b"daf.json", 0xe5cb4e97, 18, 0, FIXED_DOS, None),
            hex("50 4b 01 02 1e 03 2d 00 00 08 00 00 00 00 21 00 97 4e cb e5 ff ff ff ff ff ff ff ff 08 00 1c 00 00 00 00 00 00 00 00 00 a4 81 ff ff ff ff 64 61 66 2e 6a 73 6f 6e 01 00 18 00 12 00 00 00 00 00 00 00 12 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00")
        );
        assert_eq!(
            trailer(20, 2374, 1941),
            hex("50 4b 06 06 2c 00 00 00 00 00 00 00 1e 03 2d 00 00 00 00 00 00 00 00 00 14 00 00 00 00 00 00 00 14 00 00 00 00 00 00 00 95 07 00 00 00 00 00 00 46 09 00 00 00 00 00 00 50 4b 06 07 00 00 00 00 db 10 00 00 00 00 00 00 01 00 00 00 50 4b 05 06 00 00 00 00 ff ff ff ff ff ff ff ff ff ff ff ff 00 00")
        );
        assert_eq!(local_header_len(8, 6), 64);
        assert_eq!(central_record_len(8), 82);
    }
}
