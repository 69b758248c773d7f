//! Hostile ZIP archives: truncated, garbled, forged sizes and offsets, bombs, bad CRCs.
//!
//! Two families: byte surgery on the Julia-style ZIP64 fixture `zarr_v2.daf.zarr.zip` (offsets
//! found with the crate's own reader on the pristine fixture), and archives rebuilt from the
//! entries of `zipdaf_v1_0.daf.zip` by the small writer below, with chosen methods, sizes, CRCs
//! and flags. A broken archive structure is refused at mount; a bad entry gives `EIO` on its
//! property in both views, with a log line naming archive and entry.

#[path = "zip_rebuilt.rs"]
mod rebuilt;

use std::path::Path;

use daf_mount::stores::zip::open_archive;

use super::{fixture_copy, Case, Expect};
use crate::common::VECTORS;

const Z: &str = "zarr_v2.daf.zarr.zip";

/// Payload entries of `Z` and the two mount paths (Zarr view, FilesDaf view) that show each.
const TARGETS: [(&str, [&str; 2]); 4] = [
    (
        "vectors/cell/score/0",
        [
            "zarr_v2.daf.zarr/vectors/cell/score/0",
            "zarr_v2.daf/vectors/cell/score.data",
        ],
    ),
    (
        "matrices/cell/gene/expr/0.0",
        [
            "zarr_v2.daf.zarr/matrices/cell/gene/expr/0.0",
            "zarr_v2.daf/matrices/cell/gene/expr.data",
        ],
    ),
    (
        "vectors/cell/counts/nzval/0",
        [
            "zarr_v2.daf.zarr/vectors/cell/counts/nzval/0",
            "zarr_v2.daf/vectors/cell/counts.nzval",
        ],
    ),
    (
        "matrices/cell/gene/umis/rowval/0",
        [
            "zarr_v2.daf.zarr/matrices/cell/gene/umis/rowval/0",
            "zarr_v2.daf/matrices/cell/gene/umis.rowval",
        ],
    ),
];

/// An edit of an archive's bytes.
type Edit = fn(&mut Vec<u8>);
/// An edit that captures where to edit.
type BoxedEdit = Box<dyn Fn(&mut Vec<u8>)>;

/// Where one entry of a fixture lies.
#[derive(Clone, Copy)]
struct Rec {
    central: usize,
    local: usize,
    data: usize,
    packed: usize,
}

fn rec(fixture: &str, entry: &str) -> Rec {
    let archive = open_archive(&Path::new(VECTORS).join(fixture)).unwrap();
    let r = archive.records.iter().find(|r| r.name == entry).unwrap();
    Rec {
        central: r.raw_range.0 as usize,
        local: r.local_header_offset as usize,
        data: r.data_offset as usize,
        packed: r.compressed_size as usize,
    }
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Offsets of the ZIP64 end record and its locator in `Z` (a Julia-style ZIP64 archive).
fn zip64_offsets(b: &[u8]) -> (usize, usize) {
    let locator = b.len() - 22 - 20;
    assert_eq!(&b[locator..locator + 4], b"PK\x06\x07");
    let record = u64::from_le_bytes(b[locator + 8..locator + 16].try_into().unwrap()) as usize;
    assert_eq!(&b[record..record + 4], b"PK\x06\x06");
    (record, locator)
}

/// A case that copies `fixture`, edits its bytes, and mounts the result.
fn surgery(
    name: String,
    fixture: &'static str,
    expect: Expect,
    edit: impl Fn(&mut Vec<u8>) + 'static,
) -> Case {
    Case::new(name, expect, move |dir| {
        let path = fixture_copy(dir, fixture);
        let mut bytes = std::fs::read(&path).unwrap();
        edit(&mut bytes);
        std::fs::write(&path, &bytes).unwrap();
        path.display().to_string()
    })
}

/// EIO on exactly these mount paths, with a log line containing `log`.
fn eio(paths: &[&'static str], log: &'static str) -> Expect {
    Expect::Mounted {
        eio: paths.to_vec(),
        log: vec![log],
        absent: vec![],
        present: vec![],
    }
}

/// The property is left out of both views (the format layer checks a payload's declared size
/// against its shape), with a log line containing `log`.
fn skipped(paths: &[&'static str], log: &'static str) -> Expect {
    Expect::Mounted {
        eio: vec![],
        log: vec![log],
        absent: paths.to_vec(),
        present: vec![],
    }
}

fn refused() -> Expect {
    Expect::Refused("corrupt ZIP")
}

pub fn cases() -> Vec<Case> {
    let mut cases = vec![
        Case::new("zarr zip fixture as it is", Expect::clean(), |dir| {
            fixture_copy(dir, Z).display().to_string()
        }),
        Case::new("zip cut in half", refused(), |dir| {
            let path = fixture_copy(dir, Z);
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
            path.display().to_string()
        }),
    ];
    let len = std::fs::read(Path::new(VECTORS).join(Z)).unwrap().len();

    // Truncations at many offsets: the end records are gone, the archive is refused.
    for k in [1, 2, 3, 5, 8, 13, 21, 30, 50, 97, 98, 99] {
        let cut = len * k / 100;
        cases.push(surgery(
            format!("zip cut to {cut} bytes"),
            Z,
            refused(),
            move |b| b.truncate(cut),
        ));
    }
    for back in [1, 10, 22, 23, 42, 43, 98, 99] {
        cases.push(surgery(
            format!("zip missing its last {back} bytes"),
            Z,
            refused(),
            move |b| b.truncate(b.len() - back),
        ));
    }
    cases.push(surgery("zip of zero bytes".into(), Z, refused(), |b| {
        b.clear()
    }));

    // The end records, garbled or forged.
    let end_edits: Vec<(&str, Edit)> = vec![
        ("EOCD signature garbled", |b| {
            let n = b.len();
            b[n - 22] ^= 0xFF
        }),
        ("EOCD comment length forged", |b| {
            let n = b.len();
            put16(b, n - 2, 0xFFFF)
        }),
        ("ZIP64 locator points past the file", |b| {
            let (_, loc) = zip64_offsets(b);
            put64(b, loc + 8, u64::MAX - 3)
        }),
        ("ZIP64 locator points at the central directory", |b| {
            let (z, loc) = zip64_offsets(b);
            let cd = u64::from_le_bytes(b[z + 48..z + 56].try_into().unwrap());
            put64(b, loc + 8, cd)
        }),
        ("ZIP64 end record signature garbled", |b| {
            let (z, _) = zip64_offsets(b);
            b[z + 1] ^= 0x55
        }),
        ("ZIP64 count forged to 2^64-1", |b| {
            let (z, _) = zip64_offsets(b);
            put64(b, z + 32, u64::MAX)
        }),
        ("ZIP64 count forged to 2^32", |b| {
            let (z, _) = zip64_offsets(b);
            put64(b, z + 32, 1 << 32)
        }),
        ("ZIP64 count one more than the records", |b| {
            let (z, _) = zip64_offsets(b);
            let n = u64::from_le_bytes(b[z + 32..z + 40].try_into().unwrap());
            put64(b, z + 32, n + 1)
        }),
        ("ZIP64 directory size forged to 2^64-1", |b| {
            let (z, _) = zip64_offsets(b);
            put64(b, z + 40, u64::MAX)
        }),
        ("ZIP64 directory size one short", |b| {
            let (z, _) = zip64_offsets(b);
            let n = u64::from_le_bytes(b[z + 40..z + 48].try_into().unwrap());
            put64(b, z + 40, n - 1)
        }),
        ("ZIP64 directory offset forged to 2^64-1", |b| {
            let (z, _) = zip64_offsets(b);
            put64(b, z + 48, u64::MAX)
        }),
        ("ZIP64 directory offset off by one", |b| {
            let (z, _) = zip64_offsets(b);
            let n = u64::from_le_bytes(b[z + 48..z + 56].try_into().unwrap());
            put64(b, z + 48, n + 1)
        }),
        ("ZIP64 directory offset at the first local header", |b| {
            let (z, _) = zip64_offsets(b);
            put64(b, z + 48, 0)
        }),
        ("first central record signature garbled", |b| {
            let (z, _) = zip64_offsets(b);
            let cd = u64::from_le_bytes(b[z + 48..z + 56].try_into().unwrap()) as usize;
            b[cd] ^= 0xFF
        }),
    ];
    for (name, edit) in end_edits {
        cases.push(surgery(name.into(), Z, refused(), edit));
    }

    // Central records forged so that the directory itself no longer parses.
    for (entry, _) in TARGETS {
        let r = rec(Z, entry);
        cases.push(surgery(
            format!("{entry}: central name length forged to 65535"),
            Z,
            refused(),
            move |b| put16(b, r.central + 28, 0xFFFF),
        ));
        cases.push(surgery(
            format!("{entry}: central extra length forged"),
            Z,
            refused(),
            move |b| put16(b, r.central + 30, 0xFFF0),
        ));
        cases.push(surgery(
            format!("{entry}: central signature garbled"),
            Z,
            refused(),
            move |b| b[r.central + 2] = b'X',
        ));
    }

    // One entry forged or damaged: EIO on that property in both views, the rest reads.
    for (entry, paths) in TARGETS {
        let r = rec(Z, entry);
        let log = Box::leak(format!("entry {entry}").into_boxed_str());
        let bad = |what: &str, edit: BoxedEdit| {
            surgery(format!("{entry}: {what}"), Z, eio(&paths, log), edit)
        };
        let sized = |what: &str, edit: BoxedEdit| {
            surgery(format!("{entry}: {what}"), Z, skipped(&paths, log), edit)
        };
        cases.push(bad(
            "first payload byte flipped",
            Box::new(move |b| b[r.data] ^= 0x01),
        ));
        cases.push(bad(
            "last payload byte flipped",
            Box::new(move |b| b[r.data + r.packed - 1] ^= 0x80),
        ));
        cases.push(bad(
            "central CRC forged",
            Box::new(move |b| b[r.central + 16] ^= 0x01),
        ));
        cases.push(bad(
            "central method forged to deflate",
            Box::new(move |b| put16(b, r.central + 10, 8)),
        ));
        cases.push(bad(
            "central method forged to 99",
            Box::new(move |b| put16(b, r.central + 10, 99)),
        ));
        cases.push(bad(
            "marked encrypted",
            Box::new(move |b| b[r.central + 8] |= 1),
        ));
        cases.push(bad(
            "local header offset forged to another entry",
            Box::new(move |b| {
                let at = r.central + 46 + name_len(b, r) + 4 + 16;
                put64(b, at, 0)
            }),
        ));
        cases.push(bad(
            "local header offset forged past the directory",
            Box::new(move |b| {
                let at = r.central + 46 + name_len(b, r) + 4 + 16;
                put64(b, at, 1 << 40)
            }),
        ));
        cases.push(sized(
            "ZIP64 sizes forged to 2^64-1",
            Box::new(move |b| {
                let at = r.central + 46 + name_len(b, r) + 4;
                put64(b, at, u64::MAX);
                put64(b, at + 8, u64::MAX);
            }),
        ));
        cases.push(sized(
            "ZIP64 size forged to 1 TiB",
            Box::new(move |b| {
                let at = r.central + 46 + name_len(b, r) + 4;
                put64(b, at, 1 << 40)
            }),
        ));
        cases.push(sized(
            "data forged to run into the central directory",
            Box::new(move |b| {
                let at = r.central + 46 + name_len(b, r) + 4;
                put64(b, at, 1 << 20);
                put64(b, at + 8, 1 << 20);
            }),
        ));
        cases.push(bad(
            "local signature garbled",
            Box::new(move |b| b[r.local + 3] = 0),
        ));
        cases.push(bad(
            "local name differs",
            Box::new(move |b| b[r.local + 30] ^= 0x20),
        ));
        cases.push(bad(
            "local method differs",
            Box::new(move |b| put16(b, r.local + 8, 8)),
        ));
        cases.push(bad(
            "local CRC differs",
            Box::new(move |b| b[r.local + 14] ^= 0x10),
        ));
    }

    cases.extend(rebuilt::cases());
    cases
}

/// Name length of the central record `r` in `b`.
fn name_len(b: &[u8], r: Rec) -> usize {
    usize::from(u16::from_le_bytes([b[r.central + 28], b[r.central + 29]]))
}
