//! Hostile archives rebuilt from the entries of `zipdaf_v1_0.daf.zip` by a small ZIP writer,
//! with chosen methods, sizes, CRCs, flags and names: bombs, forged sizes, bad or cut compressed
//! data, unsupported methods, encryption, duplicates, directory entries, data descriptors,
//! hostile names, an empty archive, and a multi-data-set archive with one bad group.

use std::io::Write;
use std::path::Path;
use std::sync::OnceLock;

use daf_mount::stores::zip::open_archive;

use super::eio;
use crate::common::VECTORS;
use crate::{Case, Expect};

const D: &str = "zipdaf_v1_0.daf.zip";

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

/// A ZIP of `entries` (ZIP64 extra fields where a size needs them; a data descriptor after
/// the data of entries with flag 8).
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
    let mut cases = Vec::new();
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
        // Streamed: only what a read needs is inflated (the first 4 MiB to serve the vector's
        // 24 bytes); its CRC would be checked by a pass reaching its end, which no read needs.
        "deflate bomb (1 MiB to 1 GiB) declaring its true size: streamed".into(),
        Expect::clean(),
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
        "100 deflated vectors of 4 MiB: all served through the bounded decode cache",
        Expect::Mounted {
            eio: vec![],
            log: vec![],
            absent: vec![],
            present: vec!["hostile.daf/vectors/big/v099.data"],
        },
        |dir| {
            let n = 1usize << 19;
            let mut e = zipdaf(0);
            let axis: String = (0..n).map(|i| format!("b{i}\n")).collect();
            e.push(w("axes/big.txt", 0, axis.as_bytes()));
            let zeros = vec![0u8; n * 8];
            let packed = compress(8, &zeros);
            let crc = crc32fast::hash(&zeros);
            for i in 0..100 {
                let name = format!("vectors/big/v{i:03}");
                e.push(w(
                    &format!("{name}.json"),
                    0,
                    br#"{"format":"dense","eltype":"Float64"}"#,
                ));
                e.push(W {
                    name: format!("{name}.data"),
                    method: 8,
                    flags: 0,
                    data: packed.clone(),
                    crc,
                    size: zeros.len() as u64,
                });
            }
            let path = dir.join("hostile.daf.zip");
            std::fs::write(&path, write_zip(&e)).unwrap();
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
