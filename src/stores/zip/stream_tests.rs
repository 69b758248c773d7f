//! Tests of compressed ZIP members read by window through a bounded cache.

use std::io::Write;

use super::*;

fn deflate(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn compressed(method: u16, data: &[u8]) -> Vec<u8> {
    match method {
        METHOD_DEFLATE => deflate(data),
        METHOD_ZSTD => zstd::encode_all(data, 1).unwrap(),
        _ => {
            let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
            e.write_all(data).unwrap();
            e.finish().unwrap()
        }
    }
}

/// Bytes that compress but are not trivial.
fn plain(n: usize) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 27) as u8)
        .collect()
}

fn stream(cache: u64, method: u16, data: &[u8], size: u64, crc: u32) -> MemberStream {
    let raw = Bytes::from_vec(compressed(method, data));
    let packed = raw.len();
    let cache: &'static DecodeCache = Box::leak(Box::new(DecodeCache::new(cache)));
    let fetch: RawFetch = Arc::new(move |offset, len| Ok(raw.slice(offset, len).unwrap()));
    MemberStream::in_cache(cache, "m".into(), method, (packed, size, crc), fetch)
}

#[test]
fn evicted_windows_read_back_correctly() {
    let data = plain(5 * WINDOW as usize + 12345);
    let crc = crc32fast::hash(&data);
    // Two windows fit: most reads behind the cursor restart from the start.
    let s = stream(2 * WINDOW, METHOD_DEFLATE, &data, data.len() as u64, crc);
    assert_eq!(s.check_state(), Some(CheckState::Unverified));
    let got = s.read_range(100, 5000).unwrap();
    assert_eq!(got.as_slice(), &data[100..5100]);
    assert_eq!(
        s.check_state(),
        Some(CheckState::Running),
        "large: served first"
    );
    let mut seed = 99u64;
    for _ in 0..60 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (seed >> 33) % data.len() as u64;
        let len = (seed >> 13) % (3 * WINDOW / 2) + 1;
        let got = s.read_range(offset, len).unwrap();
        let end = (offset + len).min(data.len() as u64) as usize;
        assert_eq!(
            got.as_slice(),
            &data[offset as usize..end],
            "{offset}+{len}"
        );
    }
    assert!(s.cache.evicted() > 0);
    assert!(s.cache.peak() <= 2 * WINDOW);
    let tail = data.len() as u64 - 10;
    assert_eq!(
        s.read_range(tail, 10).unwrap().as_slice(),
        &data[tail as usize..]
    );
    assert_eq!(s.check_state(), Some(CheckState::Verified));
}

#[test]
fn every_method_streams() {
    let data = plain(3 * WINDOW as usize + 7);
    let crc = crc32fast::hash(&data);
    for method in [METHOD_DEFLATE, METHOD_BZIP2, METHOD_ZSTD] {
        let s = stream(WINDOW, method, &data, data.len() as u64, crc);
        let got = s.read_range(WINDOW - 3, 2 * WINDOW).unwrap();
        assert_eq!(
            got.as_slice(),
            &data[WINDOW as usize - 3..3 * WINDOW as usize - 3]
        );
        // Small (under SYNC_CHECK_MAX): checked whole before the first byte was served.
        assert_eq!(s.check_state(), Some(CheckState::Verified), "{method}");
    }
}

#[test]
fn a_small_corrupt_member_fails_before_its_first_byte() {
    let data = plain(10_000);
    let s = stream(
        WINDOW,
        METHOD_DEFLATE,
        &data,
        10_000,
        crc32fast::hash(&data) ^ 1,
    );
    let err = s.read_range(0, 10).unwrap_err().to_string();
    assert!(err.contains("CRC"), "{err}");
    assert_eq!(s.check_state(), Some(CheckState::Bad));
    assert!(s.read_range(0, 10).is_err(), "it keeps failing");
}

#[test]
fn a_large_corrupt_member_fails_once_a_pass_reaches_its_end() {
    let data = plain(SYNC_CHECK_MAX as usize + WINDOW as usize + 1);
    let s = stream(
        16 * WINDOW,
        METHOD_DEFLATE,
        &data,
        data.len() as u64,
        crc32fast::hash(&data) ^ 1,
    );
    assert_eq!(s.read_range(0, 10).unwrap().as_slice(), &data[..10]);
    let end = data.len() as u64;
    assert!(s.read_range(end - 10, 10).is_err());
    assert_eq!(s.check_state(), Some(CheckState::Bad));
    assert!(
        s.read_range(0, 10).is_err(),
        "cached windows are not served any more"
    );
}

#[test]
fn a_wrong_declared_size_is_found() {
    let data = plain(10_000);
    let crc = crc32fast::hash(&data);
    let short = stream(WINDOW, METHOD_DEFLATE, &data, 10_001, crc);
    let err = short.read_range(0, 10).unwrap_err().to_string();
    assert!(err.contains("not the 10001"), "{err}");
    let long = stream(WINDOW, METHOD_DEFLATE, &data, 9_999, crc);
    let err = long.read_range(0, 10).unwrap_err().to_string();
    assert!(err.contains("more than the 9999"), "{err}");
    let forged = stream(WINDOW, METHOD_BZIP2, &data, 1 << 40, crc);
    assert!(
        forged.read_range(0, 1 << 40).is_err(),
        "refused, not allocated"
    );
    assert!(forged.read_range(0, 10).is_err());
}
