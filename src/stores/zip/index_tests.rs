//! Tests of the compact ZIP index: it reads back what was written (names, bytes, sizes, CRCs,
//! mtimes, last duplicate wins), agrees with Python's `zipfile` on real archives, and makes a
//! member's blob only when asked, once, shared by every copy of the index.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use crate::stores::zip::write::{central_record, local_header, padding, trailer};
use crate::stores::zip::{open_archive, open_zip};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

/// An archive of stored members, in order (names may repeat), each with its unix mtime.
fn write_archive(members: &[(String, Vec<u8>, u32)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut directory = Vec::new();
    for (name, data, mtime) in members {
        let offset = out.len() as u64;
        let crc = crc32fast::hash(data);
        let pad = padding(offset + 50 + name.len() as u64);
        out.extend(local_header(
            name.as_bytes(),
            crc,
            data.len() as u64,
            pad,
            (0, 0x21),
        ));
        out.extend_from_slice(data);
        directory.extend(central_record(
            name.as_bytes(),
            crc,
            data.len() as u64,
            offset,
            (0, 0x21),
            Some(*mtime),
        ));
    }
    let cd_offset = out.len() as u64;
    let cd_size = directory.len() as u64;
    out.extend(directory);
    out.extend(trailer(members.len() as u64, cd_offset, cd_size));
    out
}

fn names() -> impl Strategy<Value = String> {
    // Few letters and deep paths: duplicates, shared prefixes, directories and `a` vs `a/b`.
    prop::collection::vec(prop::sample::select(vec!["a", "b", "a.b", "c0", "é"]), 1..4)
        .prop_map(|parts| parts.join("/"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever the names (duplicated, nested, sharing prefixes), the index holds the last
    /// member of each name, with its bytes, size, CRC and mtime, and lists like the names do.
    #[test]
    fn the_index_reads_back_what_was_written(
        members in prop::collection::vec(
            (names(), prop::collection::vec(any::<u8>(), 0..40), 1u32..2_000_000_000),
            0..24,
        ),
        dir_entries in prop::collection::vec(names(), 0..3),
    ) {
        let mut all: Vec<(String, Vec<u8>, u32)> = members.clone();
        all.extend(dir_entries.into_iter().map(|d| (format!("{d}/"), Vec::new(), 1)));
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("p.zip");
        std::fs::write(&path, write_archive(&all)).unwrap();
        let expected: BTreeMap<&str, (&[u8], u32)> = members
            .iter()
            .map(|(n, d, t)| (n.as_str(), (d.as_slice(), *t)))
            .collect();

        let index = open_zip(&path).unwrap();
        prop_assert_eq!(index.made_count(), 0);
        prop_assert_eq!(index.keys().collect::<Vec<_>>(), expected.keys().copied().collect::<Vec<_>>());
        let top: std::collections::BTreeSet<&str> =
            expected.keys().map(|k| k.split('/').next().unwrap()).collect();
        prop_assert_eq!(index.children(""), top.into_iter().collect::<Vec<_>>());
        let copy = index.clone();
        let sub = index.subtree("a");
        for (key, (data, mtime)) in &expected {
            let entry = index.get(key).unwrap();
            let bytes = entry.blob.bytes().unwrap();
            prop_assert_eq!(bytes.as_slice(), *data);
            prop_assert_eq!(entry.blob.len().unwrap(), data.len() as u64);
            prop_assert_eq!(entry.blob.recorded_crc(), Some(crc32fast::hash(data)));
            prop_assert!(entry.blob.verify().is_ok());
            prop_assert_eq!(entry.mtime, SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(*mtime)));
            // Made once, shared by copies and sub-trees.
            prop_assert!(std::sync::Arc::ptr_eq(&entry.blob, &copy.get(key).unwrap().blob));
            if let Some(rest) = key.strip_prefix("a/") {
                prop_assert!(std::sync::Arc::ptr_eq(&entry.blob, &sub.get(rest).unwrap().blob));
            }
        }
        prop_assert_eq!(index.made_count(), expected.len());
        let latest = expected
            .iter()
            .filter(|(k, _)| k.starts_with("a/"))
            .map(|(_, (_, t))| *t)
            .chain(expected.get("a").map(|(_, t)| *t))
            .max()
            .map(|t| SystemTime::UNIX_EPOCH + Duration::from_secs(u64::from(t)));
        prop_assert_eq!(index.latest_mtime_under("a"), latest);
    }
}

/// Only the members asked for get a blob.
#[test]
fn blobs_are_made_only_for_the_members_asked_for() {
    let index = open_zip(&std::path::Path::new(FIXTURES).join("zarr_v2.daf.zarr.zip")).unwrap();
    assert!(index.len() > 50);
    assert_eq!(index.made_count(), 0);
    assert!(index.get("vectors/cell/score/0").is_some());
    assert!(index.get("vectors/cell/score/0").is_some());
    assert!(index.get("no/such/member").is_none());
    assert_eq!(index.made_count(), 1);
}

/// A member read once gets a blob that is not kept (nothing is left of it in the index once
/// used), with the kept member's content; one made already is the kept one.
#[test]
fn a_member_read_once_is_not_kept() {
    let index = open_zip(&std::path::Path::new(FIXTURES).join("zarr_v2.daf.zarr.zip")).unwrap();
    let once = index.get_once("vectors/cell/score/.zarray").unwrap();
    assert_eq!(index.made_count(), 0);
    assert_eq!(std::sync::Arc::strong_count(&once.blob), 1);
    let kept = index.get("vectors/cell/score/.zarray").unwrap();
    assert_eq!(index.made_count(), 1);
    assert!(!std::sync::Arc::ptr_eq(&once.blob, &kept.blob));
    assert_eq!(
        once.blob.bytes().unwrap().as_slice(),
        kept.blob.bytes().unwrap().as_slice()
    );
    assert_eq!(once.mtime, kept.mtime);
    let again = index.get_once("vectors/cell/score/.zarray").unwrap();
    assert!(std::sync::Arc::ptr_eq(&again.blob, &kept.blob));
    assert!(index.get_once("no/such/member").is_none());
    assert_eq!(index.made_count(), 1);
}

/// Every fixture archive, as Python's `zipfile` reads it: the same names (directories left out,
/// the last of duplicates), sizes and bytes.
#[test]
fn the_index_agrees_with_pythons_zipfile() {
    for name in [
        "multi_v1_1.dafs.zip",
        "zarr_v2.daf.zarr.zip",
        "zarr_v3.daf.zarr.zip",
        "zipdaf_v1_0.daf.zip",
        "zipdaf_v1_1.daf.zip",
    ] {
        let path = std::path::Path::new(FIXTURES).join(name);
        let out = std::process::Command::new("python3")
            .arg("-c")
            .arg(
                "import zipfile,sys\nz=zipfile.ZipFile(sys.argv[1])\nseen={}\n\
                 for i in z.infolist():\n  seen[i.filename]=i\n\
                 for n in sorted(seen):\n  i=seen[n]\n  \
                 (not i.is_dir()) and print(n, i.file_size, i.CRC, z.read(i).hex())",
            )
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}");
        let theirs = String::from_utf8(out.stdout).unwrap();
        let index = open_zip(&path).unwrap();
        let mut ours = String::new();
        for key in index.keys() {
            let blob = &index.get(key).unwrap().blob;
            let bytes = blob.bytes().unwrap();
            let hex: String = bytes
                .as_slice()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let crc = crc32fast::hash(bytes.as_slice());
            ours.push_str(&format!("{key} {} {crc} {hex}\n", blob.len().unwrap()));
        }
        assert_eq!(ours, theirs, "{name}");
        // The index of records already parsed is the same one.
        let archive = open_archive(&path).unwrap();
        assert_eq!(
            archive.index().keys().collect::<Vec<_>>(),
            index.keys().collect::<Vec<_>>()
        );
    }
}

/// A member whose bytes fail their CRC is named in the error by archive and entry, the name read
/// from the central directory.
#[test]
fn a_corrupt_member_is_named_by_archive_and_entry() {
    let members = vec![
        ("ok".to_string(), b"fine".to_vec(), 1),
        ("dir/bad.bin".to_string(), b"payload".to_vec(), 1),
    ];
    let mut bytes = write_archive(&members);
    let at = bytes.windows(7).position(|w| w == b"payload").unwrap();
    bytes[at] ^= 1;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("c.zip");
    std::fs::write(&path, bytes).unwrap();
    let index = open_zip(&path).unwrap();
    assert!(index.get("ok").unwrap().blob.bytes().is_ok());
    let bad = &index.get("dir/bad.bin").unwrap().blob;
    // Small stored members take the compact form, which gives the same error as a `Check`.
    assert!(bad.is_compact_member());
    let err = bad.bytes().unwrap_err();
    let want = format!("{}: entry dir/bad.bin: stored entry fails", path.display());
    assert!(err.to_string().starts_with(&want), "{err}");
    assert_eq!(
        bad.check_state(),
        Some(crate::stores::blob::CheckState::Bad)
    );
    assert!(bad.bytes().is_err() && crate::stores::Blob::slice(bad, 1, 2).bytes().is_err());
}

/// A stored member larger than the synchronous check's limit keeps the general form (its
/// check runs in the background), with the same bytes and CRC.
#[test]
fn a_large_stored_member_keeps_the_general_form() {
    let big = vec![5u8; (crate::stores::check::SYNC_CHECK_MAX + 1) as usize];
    let members = vec![
        ("big".to_string(), big.clone(), 1),
        ("small".to_string(), vec![1], 1),
    ];
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("b.zip");
    std::fs::write(&path, write_archive(&members)).unwrap();
    let index = open_zip(&path).unwrap();
    let blob = &index.get("big").unwrap().blob;
    assert!(!blob.is_compact_member());
    assert!(index.get("small").unwrap().blob.is_compact_member());
    assert_eq!(blob.recorded_crc(), Some(crc32fast::hash(&big)));
    assert_eq!(blob.bytes().unwrap().as_slice(), big.as_slice());
}
