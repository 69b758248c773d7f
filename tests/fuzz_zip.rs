//! Property-based fuzzing of the ZIP reader (no mount): random bytes, and structure-aware
//! mutations of real archives (flip, overwrite, insert, delete, truncate, forge a header field
//! with a hostile value), each opened with `open_archive`, then every entry's bytes read and
//! its check run; and the three decompressors, as the daemon serves members (`MemberStream`),
//! on valid, damaged and mis-sized streams. Nothing may panic or hang; every produced entry has
//! exactly the length `stat` announced, and none is larger than the decompression limit.
//!
//! Case count: `PROPTEST_CASES` (default 256 per property, a few seconds in debug).
//! Failures found are kept in `fuzz_zip.proptest-regressions` and as named tests below.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use daf_mount::stores::blob::RangeSource;
use daf_mount::stores::zip::entry::MAX_SHOWN;
use daf_mount::stores::zip::open_archive;
use daf_mount::stores::zip::stream::{MemberStream, MAX_READ};
use daf_mount::stores::{Bytes, StoreError};
use proptest::prelude::*;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

/// Real archives to mutate: the two Julia-style ZIP64 fixtures, and a `zipfile`-written archive
/// with deflated, bzip2 and streamed (data descriptor) entries.
fn seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let tmp = tempfile::tempdir().unwrap();
        let made = tmp.path().join("made.zip");
        let ok = std::process::Command::new("python3")
            .arg("-c")
            .arg(
                "import zipfile,sys\n\
                 z=zipfile.ZipFile(sys.argv[1],'w')\n\
                 z.writestr('a.txt', b'alpha'*200, zipfile.ZIP_DEFLATED)\n\
                 z.writestr('b.bin', bytes(range(256))*8, zipfile.ZIP_BZIP2)\n\
                 z.writestr('dir/', b'')\n\
                 z.writestr('s.bin', b'stored!'*30)\n\
                 with z.open('d.bin','w') as f: f.write(b'streamed'*50)\n\
                 z.close()",
            )
            .arg(&made)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let mut seeds = vec![std::fs::read(&made).unwrap()];
        for name in ["zarr_v2.daf.zarr.zip", "zipdaf_v1_0.daf.zip"] {
            seeds.push(std::fs::read(Path::new(VECTORS).join(name)).unwrap());
        }
        seeds
    })
}

/// Opens `bytes` as an archive and reads everything in it; panics on any broken promise.
fn exercise(bytes: &[u8]) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("fuzz.zip");
    std::fs::write(&path, bytes).unwrap();
    let started = Instant::now();
    let Ok(archive) = open_archive(&path) else {
        return;
    };
    // Records are bounded by the directory's bytes: at most one per 46 bytes of the file.
    assert!(archive.records.len() <= bytes.len() / 46 + 1);
    let index = archive.index();
    for key in index.keys() {
        let blob = &index.get(key).unwrap().blob;
        let announced = blob.known_len().unwrap();
        assert!(announced <= MAX_SHOWN, "{key}: st_size {announced}");
        if let Ok(content) = blob.bytes() {
            assert_eq!(content.len(), announced, "{key}");
            assert!(
                content.is_mapped() || content.len() <= MAX_READ,
                "{key}: {} bytes decoded",
                content.len()
            );
        }
        let _ = blob.verify();
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "reading took {:?}",
        started.elapsed()
    );
}

/// One structure-aware edit of an archive.
#[derive(Clone, Debug)]
enum Edit {
    Flip(usize, u8),
    Overwrite(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    /// A header field set to a value: the field `field` (of [`FIELDS`]) of the `instance`-th
    /// record of signature kind `kind`.
    Forge {
        kind: usize,
        instance: usize,
        field: usize,
        value: u64,
    },
}

/// A header field: its offset and width in bytes.
type Field = (usize, usize);

/// The signatures of ZIP records, and the (offset, width) of each of their fields. For a
/// central record, offsets from 1000 on are relative to its extra field (where ZIP64 sizes and
/// offsets live).
const FIELDS: [(&[u8], &[Field]); 5] = [
    (
        b"PK\x01\x02",
        &[
            (8, 2),
            (10, 2),
            (16, 4),
            (20, 4),
            (24, 4),
            (28, 2),
            (30, 2),
            (32, 2),
            (42, 4),
            (1002, 2),
            (1004, 8),
            (1012, 8),
            (1020, 8),
        ],
    ),
    (
        b"PK\x03\x04",
        &[(6, 2), (8, 2), (14, 4), (18, 4), (22, 4), (26, 2), (28, 2)],
    ),
    (b"PK\x05\x06", &[(8, 2), (10, 2), (12, 4), (16, 4), (20, 2)]),
    (b"PK\x06\x06", &[(4, 8), (24, 8), (32, 8), (40, 8), (48, 8)]),
    (b"PK\x06\x07", &[(4, 4), (8, 8), (16, 4)]),
];

fn hostile_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(0xFFFF),
        Just(0xFFFF_FFFF),
        Just(0xFFFF_FFFE),
        Just(u64::MAX),
        Just(1 << 40),
        Just(1 << 32),
        any::<u64>(),
        0u64..20_000,
    ]
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(at, bits)| Edit::Flip(at, bits)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, v)| Edit::Overwrite(at, v)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(at, b)| Edit::Insert(at, b)),
        (any::<usize>(), 1usize..256).prop_map(|(at, n)| Edit::Delete(at, n)),
        any::<usize>().prop_map(Edit::Truncate),
        (0usize..5, any::<usize>(), any::<usize>(), hostile_value()).prop_map(
            |(kind, instance, field, value)| Edit::Forge {
                kind,
                instance,
                field,
                value
            }
        ),
    ]
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    let len = bytes.len();
    if len == 0 {
        return;
    }
    match edit {
        Edit::Flip(at, bits) => bytes[at % len] ^= bits,
        Edit::Overwrite(at, v) => bytes[at % len] = *v,
        Edit::Insert(at, data) => {
            let at = at % (len + 1);
            bytes.splice(at..at, data.iter().copied());
        }
        Edit::Delete(at, n) => {
            let at = at % len;
            bytes.drain(at..(at + n).min(len));
        }
        Edit::Truncate(at) => bytes.truncate(at % len),
        Edit::Forge {
            kind,
            instance,
            field,
            value,
        } => {
            let (signature, fields) = FIELDS[*kind];
            let found: Vec<usize> = bytes
                .windows(4)
                .enumerate()
                .filter(|(_, w)| w == &signature)
                .map(|(i, _)| i)
                .collect();
            if found.is_empty() {
                return;
            }
            let record = found[instance % found.len()];
            let (offset, width) = fields[field % fields.len()];
            let at = if offset >= 1000 {
                let name_len = bytes
                    .get(record + 28..record + 30)
                    .map_or(0, |b| usize::from(u16::from_le_bytes([b[0], b[1]])));
                record + 46 + name_len + offset - 1000
            } else {
                record + offset
            };
            if at + width <= len {
                bytes[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
            }
        }
    }
}

fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn random_bytes_never_break_the_reader(
        body in prop::collection::vec(any::<u8>(), 0..2048),
        eocd in prop::collection::vec(any::<u8>(), 18),
    ) {
        exercise(&body);
        // With an end record signature at the end, parsing goes further.
        let mut with_end = body.clone();
        with_end.extend_from_slice(b"PK\x05\x06");
        with_end.extend_from_slice(&eocd);
        let n = with_end.len();
        with_end[n - 2..].copy_from_slice(&[0, 0]);
        exercise(&with_end);
    }

    #[test]
    fn mutated_archives_never_break_the_reader(
        seed in 0usize..3,
        edits in prop::collection::vec(edit(), 1..6),
    ) {
        let mut bytes = seeds()[seed].clone();
        for e in &edits {
            apply(&mut bytes, e);
        }
        exercise(&bytes);
    }

    #[test]
    fn decoders_never_exceed_the_declared_size(
        method in prop_oneof![Just(8u16), Just(12), Just(93)],
        plain in prop::collection::vec(0u8..4, 0..4096),
        edits in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        size in prop_oneof![0u64..8192, hostile_value()],
    ) {
        // A valid stream of `plain` (compressible: few distinct bytes), perhaps damaged.
        let mut packed = compressed(method, &plain);
        for (at, value) in edits {
            if !packed.is_empty() {
                let n = packed.len();
                packed[at % n] = value;
            }
        }
        let crc = crc32fast::hash(&plain);
        if let Ok(out) = decode(method, &packed, size, crc) {
            prop_assert_eq!(out.len() as u64, size);
        }
        // The undamaged stream with its true size always decodes, to exactly `plain`.
        let exact = decode(method, &compressed(method, &plain), plain.len() as u64, crc);
        prop_assert_eq!(exact, Ok(plain));
    }
}

/// A member's whole content (`size` bytes) as the daemon serves it: one read of its
/// `MemberStream`.
fn decode(method: u16, packed: &[u8], size: u64, crc: u32) -> Result<Vec<u8>, String> {
    let raw = Bytes::from_vec(packed.to_vec());
    let len = raw.len();
    let fetch = move |offset: u64, n: u64| {
        raw.slice(offset, n)
            .ok_or_else(|| StoreError::Produce("outside the member".into()))
    };
    let stream = MemberStream::new("fuzz".into(), method, (len, size, crc), Arc::new(fetch));
    stream
        .read_range(0, size)
        .map(|bytes| bytes.as_slice().to_vec())
        .map_err(|e| e.to_string())
}

fn compressed(method: u16, plain: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match method {
        8 => {
            let mut e =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(plain).unwrap();
            e.finish().unwrap()
        }
        12 => {
            let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
            e.write_all(plain).unwrap();
            e.finish().unwrap()
        }
        _ => zstd::encode_all(plain, 1).unwrap(),
    }
}

#[test]
fn the_seeds_read_cleanly() {
    for seed in seeds() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("seed.zip");
        std::fs::write(&path, seed).unwrap();
        let archive = open_archive(&path).unwrap();
        let index = archive.index();
        assert!(index.len() >= 4);
        for key in index.keys() {
            let blob = &index.get(key).unwrap().blob;
            assert!(blob.bytes().is_ok() && blob.verify().is_ok(), "{key}");
        }
    }
}
