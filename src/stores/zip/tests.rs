//! Tests of the ZIP reader: the fixtures, zipfile's rules, forged and damaged archives.

use super::*;
use std::io::Write;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

#[test]
fn reads_the_julia_style_zip_fixture_zero_copy_and_aligned() {
    let archive = open_archive(&Path::new(FIXTURES).join("zarr_v2.daf.zarr.zip")).unwrap();
    assert_eq!(archive.records.len(), 74);
    assert_eq!(archive.cd_offset, 8254);
    let score = archive
        .records
        .iter()
        .find(|r| r.name == "vectors/cell/score/0")
        .unwrap();
    assert_eq!(score.data_offset, 4392);
    let idx = archive.index();
    let bytes = idx
        .get("vectors/cell/score/0")
        .unwrap()
        .blob
        .bytes()
        .unwrap();
    assert!(bytes.is_mapped());
    assert_eq!(
        bytes.as_slice(),
        &[0, 0, 0xc0, 0x3f, 0, 0, 0, 0x40, 0, 0, 0, 0xbf]
    );
}

#[test]
fn deflated_duplicates_and_descriptors_follow_zipfile_rules() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x.zip");
    // Python's zipfile writes data descriptors when streaming; emulate with a tiny writer.
    let status = std::process::Command::new("python3")
        .arg("-c")
        .arg(
            "import zipfile,sys,warnings\nwarnings.simplefilter('ignore')\n\
             z=zipfile.ZipFile(sys.argv[1],'w',zipfile.ZIP_DEFLATED)\n\
             z.writestr('a.txt', b'first'*100)\nz.writestr('a.txt', b'second'*100)\n\
             z.writestr('dir/', b'')\n\
             with z.open('s.bin','w') as f: f.write(b'streamed'*50)\nz.close()",
        )
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());
    let idx = open_zip(&path).unwrap();
    assert_eq!(idx.keys().collect::<Vec<_>>(), vec!["a.txt", "s.bin"]);
    let a = idx.get("a.txt").unwrap().blob.bytes().unwrap();
    assert_eq!(a.as_slice(), b"second".repeat(100).as_slice());
    assert!(!a.is_mapped());
    assert_eq!(
        idx.get("s.bin").unwrap().blob.bytes().unwrap().as_slice(),
        b"streamed".repeat(50).as_slice()
    );
}

#[test]
fn truncated_and_garbage_archives_are_corrupt_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let original = std::fs::read(Path::new(FIXTURES).join("zarr_v2.daf.zarr.zip")).unwrap();
    for (name, data) in [
        ("cut.zip", &original[..original.len() - 30]),
        ("headless.zip", &original[100..]),
        (
            "garbage.zip",
            &b"this is not a zip archive at all, not even close"[..],
        ),
    ] {
        let path = tmp.path().join(name);
        std::fs::File::create(&path)
            .unwrap()
            .write_all(data)
            .unwrap();
        let err = open_zip(&path).unwrap_err();
        assert!(
            matches!(err, StoreError::CorruptZip { .. }),
            "{name}: {err}"
        );
        assert!(err.to_string().contains(name), "{err}");
    }
}

#[test]
fn every_fixture_archive_reads_without_a_defect_and_passes_its_crcs() {
    for name in [
        "empty.zip",
        "multi_v1_1.dafs.zip",
        "zarr_v2.daf.zarr.zip",
        "zarr_v3.daf.zarr.zip",
        "zipdaf_v1_0.daf.zip",
        "zipdaf_v1_1.daf.zip",
    ] {
        let archive = open_archive(&Path::new(FIXTURES).join(name)).unwrap();
        for record in &archive.records {
            assert_eq!(record.defect, None, "{name}: {}", record.name);
        }
        let index = archive.index();
        for key in index.keys() {
            let blob = &index.get(key).unwrap().blob;
            assert!(blob.bytes().is_ok(), "{name}: {key}");
            assert!(blob.verify().is_ok(), "{name}: {key}");
        }
    }
}

/// The fixture with `edit` applied, opened.
fn forged(edit: impl FnOnce(&mut Vec<u8>, &ZipArchive)) -> Result<ZipArchive, StoreError> {
    let path = Path::new(FIXTURES).join("zarr_v2.daf.zarr.zip");
    let pristine = open_archive(&path).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    edit(&mut bytes, &pristine);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("forged.zip");
    std::fs::write(&out, &bytes).unwrap();
    open_archive(&out)
}

fn record<'a>(archive: &'a ZipArchive, name: &str) -> &'a CentralRecord {
    archive.records.iter().find(|r| r.name == name).unwrap()
}

#[test]
fn forged_directory_fields_refuse_the_archive() {
    // The ZIP64 end record sits 98 bytes before the end of this fixture.
    let z64 = |b: &Vec<u8>| b.len() - 98;
    let err = forged(|b, _| {
        let at = z64(b) + 32;
        b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    })
    .unwrap_err();
    assert!(err.to_string().contains("entries declared"), "{err}");
    let err = forged(|b, a| {
        let at = z64(b) + 40;
        b[at..at + 8].copy_from_slice(&(a.cd_size - 1).to_le_bytes());
    })
    .unwrap_err();
    assert!(err.to_string().contains("is damaged"), "{err}");
    let err = forged(|b, _| {
        let at = z64(b) + 48;
        b[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    })
    .unwrap_err();
    assert!(err.to_string().contains("outside the file"), "{err}");
}

#[test]
fn a_bad_entry_is_a_defect_of_that_entry_alone() {
    let name = "vectors/cell/score/0";
    // The local header names another entry.
    let archive =
        forged(|b, a| b[record(a, name).local_header_offset as usize + 30] ^= 0x20).unwrap();
    let defect = record(&archive, name).defect.clone().unwrap();
    assert!(defect.contains("names another entry"), "{defect}");
    let index = archive.index();
    let err = index.get(name).unwrap().blob.bytes().unwrap_err();
    assert!(err.to_string().contains(name), "{err}");
    assert!(index
        .get("vectors/cell/type/0")
        .unwrap()
        .blob
        .bytes()
        .is_ok());
    // Sizes forged to run into the central directory.
    let archive = forged(|b, a| {
        let r = record(a, name);
        let at = r.raw_range.0 as usize + 46 + name.len() + 4;
        b[at..at + 16].copy_from_slice(&[0xFF; 16]);
    })
    .unwrap();
    assert!(record(&archive, name).defect.is_some());
    // A flipped payload byte: the CRC check refuses the entry, not the archive.
    let archive = forged(|b, a| b[record(a, name).data_offset as usize] ^= 1).unwrap();
    assert_eq!(record(&archive, name).defect, None);
    let index = archive.index();
    let err = index.get(name).unwrap().blob.bytes().unwrap_err();
    assert!(err.to_string().contains("CRC-32"), "{err}");
}

#[test]
fn dos_times_convert() {
    // 2024-03-15 13:45:30 → date ((44<<9)|(3<<5)|15), time ((13<<11)|(45<<5)|15)
    let t = dos_to_system_time((44 << 9) | (3 << 5) | 15, (13 << 11) | (45 << 5) | 15).unwrap();
    assert_eq!(
        t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs(),
        1_710_510_330
    );
}
