//! Hostile ZIP archives: truncated, garbled, forged sizes and offsets, bombs, bad CRCs.
//!
//! Two families: byte surgery on the Julia-style ZIP64 fixture `zarr_v2.daf.zarr.zip` (offsets
//! found with the crate's own reader on the pristine fixture), and archives rebuilt from the
//! entries of `zipdaf_v1_0.daf.zip` by the small writer below, with chosen methods, sizes, CRCs
//! and flags. A broken archive structure is refused at mount; a bad entry gives `EIO` on its
//! property in both views, with a log line naming archive and entry.

use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

use daf_mount::stores::zip::open_archive;

use super::{fixture_copy, Case, Expect};
use crate::common::VECTORS;

const Z: &str = "zarr_v2.daf.zarr.zip";
const D: &str = "zipdaf_v1_0.daf.zip";

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

/// One entry for [`write_zip`]: `data` as it is stored, with the declared fields.
#[derive(Clone)]
struct W {
    name: String,
    method: u16,
    flags: u16,
    data: Vec<u8>,
    crc: u32,
    size: u64,
}

fn compress(method: u16, plain: &[u8]) -> Vec<u8> {
    match method {
        0 => plain.to_vec(),
        8 => {
            let mut e =
                flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(plain).unwrap();
            e.finish().unwrap()
        }
        12 => {
            let mut e = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
            e.write_all(plain).unwrap();
            e.finish().unwrap()
        }
        93 => zstd::encode_all(plain, 1).unwrap(),
        other => panic!("no compressor for {other}"),
    }
}

fn w(name: &str, method: u16, plain: &[u8]) -> W {
    W {
        name: name.to_string(),
        method,
        flags: 0,
        data: compress(method, plain),
        crc: crc32fast::hash(plain),
        size: plain.len() as u64,
    }
}

/// A ZIP of `entries` (ZIP64 extra fields where a size needs them; no data descriptors).
fn write_zip(entries: &[W]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for e in entries {
        let offset = out.len() as u64;
        let big = e.size >= 0xFFFF_FFFF;
        let (size32, packed32) = if big {
            (u32::MAX, u32::MAX)
        } else {
            (e.size as u32, e.data.len() as u32)
        };
        let mut extra = Vec::new();
        if big {
            extra.extend_from_slice(&1u16.to_le_bytes());
            extra.extend_from_slice(&16u16.to_le_bytes());
            extra.extend_from_slice(&e.size.to_le_bytes());
            extra.extend_from_slice(&(e.data.len() as u64).to_le_bytes());
        }
        // With a data descriptor (flag 8), the local header has zeros and the descriptor
        // follows the data.
        let descriptor = e.flags & 8 != 0;
        let common = |h: &mut Vec<u8>, local: bool| {
            let blank = local && descriptor;
            h.extend_from_slice(&e.flags.to_le_bytes());
            h.extend_from_slice(&e.method.to_le_bytes());
            h.extend_from_slice(&[0, 0, 0x21, 0]);
            h.extend_from_slice(&if blank { 0 } else { e.crc }.to_le_bytes());
            h.extend_from_slice(&if blank { 0 } else { packed32 }.to_le_bytes());
            h.extend_from_slice(&if blank { 0 } else { size32 }.to_le_bytes());
            h.extend_from_slice(&(e.name.len() as u16).to_le_bytes());
            h.extend_from_slice(&(extra.len() as u16).to_le_bytes());
        };
        out.extend_from_slice(b"PK\x03\x04");
        out.extend_from_slice(&45u16.to_le_bytes());
        common(&mut out, true);
        out.extend_from_slice(e.name.as_bytes());
        out.extend_from_slice(&extra);
        out.extend_from_slice(&e.data);
        if descriptor {
            out.extend_from_slice(b"PK\x07\x08");
            out.extend_from_slice(&e.crc.to_le_bytes());
            out.extend_from_slice(&packed32.to_le_bytes());
            out.extend_from_slice(&size32.to_le_bytes());
        }
        central.extend_from_slice(b"PK\x01\x02");
        central.extend_from_slice(&0x031Eu16.to_le_bytes());
        central.extend_from_slice(&45u16.to_le_bytes());
        common(&mut central, false);
        central.extend_from_slice(&[0; 6]);
        central.extend_from_slice(&0x81A4_0000u32.to_le_bytes());
        central.extend_from_slice(&(offset as u32).to_le_bytes());
        central.extend_from_slice(e.name.as_bytes());
        central.extend_from_slice(&extra);
    }
    let cd_offset = out.len() as u32;
    out.extend_from_slice(&central);
    out.extend_from_slice(b"PK\x05\x06\0\0\0\0");
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&cd_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// The entries of the ZipDaf fixture `D`, each compressed with `method`.
fn zipdaf(method: u16) -> Vec<W> {
    let archive = open_archive(&Path::new(VECTORS).join(D)).unwrap();
    let index = archive.index();
    index
        .keys()
        .map(|k| {
            let bytes = index.get(k).unwrap().blob.bytes().unwrap();
            w(k, method, bytes.as_slice())
        })
        .collect()
}

fn set(entries: &mut [W], name: &str, change: impl FnOnce(&mut W)) {
    change(entries.iter_mut().find(|e| e.name == name).unwrap());
}

/// A case mounting a rebuilt ZipDaf archive.
fn rebuilt(name: String, expect: Expect, build: impl Fn() -> Vec<W> + 'static) -> Case {
    Case::new(name, expect, move |dir| {
        let path = dir.join("hostile.daf.zip");
        std::fs::write(&path, write_zip(&build())).unwrap();
        path.display().to_string()
    })
}

/// 1 GiB of zeros, deflated (about 1 MiB): built once per test run.
fn deflate_bomb() -> &'static [u8] {
    static BOMB: OnceLock<Vec<u8>> = OnceLock::new();
    BOMB.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(
                "import sys,zlib\nc=zlib.compressobj(9,zlib.DEFLATED,-15)\nz=bytes(1<<20)\n\
                 sys.stdout.buffer.write(b''.join(c.compress(z) for _ in range(1024))+c.flush())",
            )
            .output()
            .unwrap();
        assert!(out.status.success());
        out.stdout
    })
}

const SCORE: [&str; 2] = ["vectors/cell/score/0", "vectors/cell/score.data"];
const SCORE_D: &str = "vectors/cell/score.data";

fn bomb(method: u16, data: Vec<u8>, size: u64) -> W {
    W {
        name: SCORE_D.into(),
        method,
        flags: 0,
        data,
        crc: 0,
        size,
    }
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
    let end_edits: Vec<(&str, fn(&mut Vec<u8>))> = vec![
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
        let bad = |what: &str, edit: Box<dyn Fn(&mut Vec<u8>)>| {
            surgery(format!("{entry}: {what}"), Z, eio(&paths, log), edit)
        };
        let sized = |what: &str, edit: Box<dyn Fn(&mut Vec<u8>)>| {
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

    // Rebuilt ZipDaf archives: methods, bombs, CRCs, flags, names.
    for method in [0u16, 8, 12, 93] {
        cases.push(rebuilt(
            format!("zipdaf rebuilt with method {method}"),
            Expect::clean(),
            move || zipdaf(method),
        ));
    }
    let score_eio = |log: &'static str| eio(&SCORE, log);
    cases.push(rebuilt(
        "deflate bomb (1 MiB to 1 GiB) declaring 12 bytes".into(),
        score_eio("more than the 12 bytes"),
        || {
            let mut e = zipdaf(0);
            set(&mut e, SCORE_D, |x| {
                *x = bomb(8, deflate_bomb().to_vec(), 12)
            });
            e
        },
    ));
    cases.push(rebuilt(
        "deflate bomb (1 MiB to 1 GiB) declaring its true size".into(),
        score_eio("decompresses ZIP members of at most"),
        || {
            let mut e = zipdaf(0);
            set(&mut e, SCORE_D, |x| {
                *x = bomb(8, deflate_bomb().to_vec(), 1 << 30)
            });
            e
        },
    ));
    for (what, size) in [
        ("1 TiB", 1u64 << 40),
        ("2^64-1", u64::MAX),
        ("2^32", 1 << 32),
    ] {
        cases.push(rebuilt(
            format!("deflated entry declaring {what}"),
            score_eio("entry vectors/cell/score.data"),
            move || {
                let mut e = zipdaf(8);
                set(&mut e, SCORE_D, |x| x.size = size);
                e
            },
        ));
    }
    cases.push(rebuilt(
        "bzip2 bomb (64 MiB of zeros) declaring 12 bytes".into(),
        score_eio("more than the 12 bytes"),
        || {
            let mut e = zipdaf(0);
            set(&mut e, SCORE_D, |x| {
                *x = bomb(12, compress(12, &vec![0; 64 << 20]), 12)
            });
            e
        },
    ));
    cases.push(rebuilt(
        "zstd bomb (64 MiB of zeros) declaring 12 bytes".into(),
        score_eio("more than the 12 bytes"),
        || {
            let mut e = zipdaf(0);
            set(&mut e, SCORE_D, |x| {
                *x = bomb(93, compress(93, &vec![0; 64 << 20]), 12)
            });
            e
        },
    ));
    cases.push(rebuilt(
        "zstd entry declaring 2^40 bytes".into(),
        score_eio("more than"),
        || {
            let mut e = zipdaf(93);
            set(&mut e, SCORE_D, |x| x.size = 1 << 40);
            e
        },
    ));
    for method in [8u16, 12, 93] {
        cases.push(rebuilt(
            format!("method {method}: compressed data cut short"),
            score_eio("entry vectors/cell/score.data"),
            move || {
                let mut e = zipdaf(method);
                set(&mut e, SCORE_D, |x| {
                    x.data.truncate(x.data.len() / 2);
                });
                e
            },
        ));
        cases.push(rebuilt(
            format!("method {method}: garbage instead of compressed data"),
            score_eio("entry vectors/cell/score.data"),
            move || {
                let mut e = zipdaf(method);
                set(&mut e, SCORE_D, |x| x.data = vec![0xA5; 40]);
                e
            },
        ));
        cases.push(rebuilt(
            format!("method {method}: wrong CRC"),
            score_eio("fails its CRC check"),
            move || {
                let mut e = zipdaf(method);
                set(&mut e, SCORE_D, |x| x.crc ^= 1);
                e
            },
        ));
        cases.push(rebuilt(
            format!("method {method}: declares one byte more than it holds"),
            score_eio("not the 13 it declares"),
            move || {
                let mut e = zipdaf(method);
                set(&mut e, SCORE_D, |x| x.size += 1);
                e
            },
        ));
    }
    for (method, what) in [(9u16, "deflate64"), (14, "lzma"), (99, "AES")] {
        cases.push(rebuilt(
            format!("unsupported method {method} ({what})"),
            score_eio("ZIP compression method"),
            move || {
                let mut e = zipdaf(0);
                set(&mut e, SCORE_D, |x| x.method = method);
                e
            },
        ));
    }
    cases.push(rebuilt(
        "stored entry with a flipped byte".into(),
        score_eio("fails its CRC-32 check"),
        || {
            let mut e = zipdaf(0);
            set(&mut e, SCORE_D, |x| x.data[5] ^= 0x40);
            e
        },
    ));
    for method in [0u16, 8] {
        cases.push(rebuilt(
            format!("method {method} with data descriptors"),
            Expect::clean(),
            move || {
                let mut e = zipdaf(method);
                e.iter_mut().for_each(|x| x.flags |= 8);
                e
            },
        ));
    }
    cases.push(rebuilt(
        "stored entry with a data descriptor and a flipped byte".into(),
        score_eio("fails its CRC-32 check"),
        || {
            let mut e = zipdaf(0);
            e.iter_mut().for_each(|x| x.flags |= 8);
            set(&mut e, SCORE_D, |x| x.data[11] ^= 0x02);
            e
        },
    ));
    cases.push(rebuilt(
        "encrypted deflated entry".into(),
        score_eio("encrypted"),
        || {
            let mut e = zipdaf(8);
            set(&mut e, SCORE_D, |x| x.flags |= 1);
            e
        },
    ));
    cases.push(rebuilt(
        "duplicate name: a bad copy, then a good one (the last wins)".into(),
        Expect::clean(),
        || {
            let mut e = zipdaf(0);
            let mut bad = e.iter().find(|x| x.name == SCORE_D).unwrap().clone();
            bad.data[0] ^= 1;
            e.insert(0, bad);
            e
        },
    ));
    cases.push(rebuilt(
        "duplicate name: a good copy, then a bad one".into(),
        score_eio("fails its CRC-32 check"),
        || {
            let mut e = zipdaf(0);
            let mut bad = e.iter().find(|x| x.name == SCORE_D).unwrap().clone();
            bad.data[0] ^= 1;
            e.push(bad);
            e
        },
    ));
    cases.push(rebuilt("directory entries".into(), Expect::clean(), || {
        let mut e = zipdaf(0);
        for d in ["vectors/", "vectors/cell/", "axes/"] {
            e.insert(0, w(d, 0, b""));
        }
        e
    }));
    let hostile_names = [
        ("parent", "../../escape.data"),
        ("inner parent", "vectors/../../escape.data"),
        ("absolute", "/etc/escape.data"),
        ("backslashes", "vectors\\cell\\evil.data"),
        ("NUL", "vectors/cell/ev\0il.data"),
        ("empty", ""),
    ];
    for (what, name) in hostile_names {
        cases.push(rebuilt(
            format!("an extra entry with a hostile name ({what})"),
            Expect::clean(),
            move || {
                let mut e = zipdaf(0);
                e.push(w(name, 0, b"12345678"));
                e
            },
        ));
    }
    cases.push(Case::new(
        "an extra entry whose name is not UTF-8",
        Expect::clean(),
        |dir| {
            let mut e = zipdaf(0);
            e.push(w("vectors/cell/@@.data", 0, b"12345678"));
            let mut bytes = write_zip(&e);
            let mut patched = 0;
            while let Some(at) = bytes.windows(2).position(|p| p == b"@@") {
                bytes[at..at + 2].copy_from_slice(&[0xFF, 0xFE]);
                patched += 1;
            }
            assert_eq!(patched, 2, "local and central name");
            let path = dir.join("hostile.daf.zip");
            std::fs::write(&path, bytes).unwrap();
            path.display().to_string()
        },
    ));
    cases.push(Case::new(
        "empty archive (only an end record)",
        Expect::Refused("daf.json"),
        |dir| {
            let path = dir.join("empty.daf.zip");
            std::fs::write(&path, write_zip(&[])).unwrap();
            path.display().to_string()
        },
    ));
    cases.push(rebuilt(
        "multi-data-set archive: group g2 has a corrupt payload".into(),
        eio(
            &[
                "g2.daf/vectors/cell/score.data",
                "g2.daf.zarr/vectors/cell/score/0",
            ],
            "entry g2/vectors/cell/score.data",
        ),
        || {
            let mut e = Vec::new();
            for group in ["g1", "g2"] {
                for mut x in zipdaf(0) {
                    x.name = format!("{group}/{}", x.name);
                    if x.name == "g2/vectors/cell/score.data" {
                        x.data[0] ^= 1;
                    }
                    e.push(x);
                }
            }
            e
        },
    ));
    // The builder writes `hostile.daf.zip`; a multi-data-set archive needs `.dafs.zip`.
    if let Some(last) = cases.pop() {
        let build = last.build;
        cases.push(Case {
            name: last.name,
            expect: last.expect,
            build: Box::new(move |dir| {
                let single = build(dir);
                let multi = dir.join("hostile.dafs.zip");
                std::fs::rename(&single, &multi).unwrap();
                multi.display().to_string()
            }),
        });
    }
    cases
}

/// Name length of the central record `r` in `b`.
fn name_len(b: &[u8], r: Rec) -> usize {
    usize::from(u16::from_le_bytes([b[r.central + 28], b[r.central + 29]]))
}
