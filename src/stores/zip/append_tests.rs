//! Tests of ZIP appends: the archives they leave, and appends that reuse what the one before
//! learnt of the archive.

use super::*;
use crate::stores::zip::open_zip;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

fn zipfile_test(path: &Path) {
    let status = std::process::Command::new("python3")
        .args(["-m", "zipfile", "-t"])
        .arg(path)
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
}

#[test]
fn appends_stay_readable_aligned_and_keep_old_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x.daf.zarr.zip");
    std::fs::copy(Path::new(VECTORS).join("zarr_v2.daf.zarr.zip"), &path).unwrap();
    let before = open_zip(&path).unwrap();
    let new = append(
        &path,
        &[
            ("a/0".into(), Bytes::from_vec(vec![7; 13])),
            ("b".into(), Bytes::from_vec(b"{}".to_vec())),
        ],
    )
    .unwrap();
    assert_eq!(new[0].1.blob.bytes().unwrap().as_slice(), &[7; 13]);
    let after = crate::stores::zip::open_archive(&path).unwrap();
    assert_eq!(after.records.len(), 76);
    assert!(after.records.iter().all(|r| r.data_offset % 8 == 0));
    let index = after.index();
    for key in before.keys() {
        assert_eq!(
            index.get(key).unwrap().blob.bytes().unwrap().as_slice(),
            before.get(key).unwrap().blob.bytes().unwrap().as_slice()
        );
    }
    zipfile_test(&path);
    // A second append reuses the gap left by the relocation.
    let size = std::fs::metadata(&path).unwrap().len();
    append(&path, &[("c".into(), Bytes::from_vec(vec![1; 100]))]).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() < size + 1000);
    zipfile_test(&path);
}

#[test]
fn foreign_records_are_kept_verbatim() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("f.zip");
    let made = std::process::Command::new("python3")
        .arg("-c")
        .arg("import zipfile,sys\nz=zipfile.ZipFile(sys.argv[1],'w',zipfile.ZIP_DEFLATED)\nz.writestr('deflated.txt', b'abc'*1000)\nz.comment=b'hello'\nz.close()")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let raw_before = {
        let a = crate::stores::zip::open_archive(&path).unwrap();
        let r = &a.records[0];
        a.bytes.as_slice()[r.raw_range.0 as usize..r.raw_range.1 as usize].to_vec()
    };
    append(&path, &[("new".into(), Bytes::from_vec(vec![1, 2, 3]))]).unwrap();
    let a = crate::stores::zip::open_archive(&path).unwrap();
    let r = &a.records[0];
    assert_eq!(
        &a.bytes.as_slice()[r.raw_range.0 as usize..r.raw_range.1 as usize],
        raw_before.as_slice()
    );
    assert_eq!(r.method, 8);
    assert_eq!(
        a.index()
            .get("deflated.txt")
            .unwrap()
            .blob
            .bytes()
            .unwrap()
            .as_slice(),
        b"abc".repeat(1000).as_slice()
    );
    zipfile_test(&path);
    let out = std::process::Command::new("unzip")
        .arg("-tq")
        .arg(&path)
        .output()
        .expect("unzip is needed (scripts/test installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn dos_times_and_padding() {
    assert_eq!(
        dos_time(UNIX_EPOCH + std::time::Duration::from_secs(1_710_510_330)),
        ((13 << 11) | (45 << 5) | 15, (44 << 9) | (3 << 5) | 15)
    );
    assert_eq!(padding(50), 6);
    assert_eq!(padding(62), 10);
    assert_eq!(padding(64), 0);
}

/// Appends `name` (bytes `fill`) to `path` as a commit does: asking whether `group` is there,
/// and adding it if not. Returns how many archives the append parsed.
fn append_as_commit(
    path: &Path,
    learnt: &mut Option<ArchiveTail>,
    name: &str,
    fill: u8,
    group: &str,
) -> u32 {
    let before = PARSES.with(std::cell::Cell::get);
    let asked = [group.to_string()];
    append_with(path, learnt, &asked, |has| {
        let mut files = vec![(
            name.to_string(),
            Payload::bytes(Bytes::from_vec(vec![fill; 40])),
        )];
        if !has(group) {
            files.push((
                group.to_string(),
                Payload::bytes(Bytes::from_vec(b"{}".to_vec())),
            ));
        }
        files
    })
    .unwrap();
    PARSES.with(std::cell::Cell::get) - before
}

/// A record as a reader sees it: name, where its data is, its length and CRC.
type Seen = (String, u64, u64, u32);

/// The archive's records as a reader sees them, and where its central directory is.
fn records(path: &Path) -> (Vec<Seen>, u64, u64) {
    let a = crate::stores::zip::open_archive(path).unwrap();
    let records = a
        .records
        .iter()
        .map(|r| (r.name.clone(), r.data_offset, r.compressed_size, r.crc32))
        .collect();
    (records, a.cd_offset, a.cd_size)
}

#[test]
fn appends_that_know_the_archive_write_what_appends_that_parse_it_write() {
    let tmp = tempfile::tempdir().unwrap();
    let (known, parsed) = (tmp.path().join("k.zip"), tmp.path().join("p.zip"));
    for path in [&known, &parsed] {
        std::fs::copy(Path::new(VECTORS).join("zarr_v2.daf.zarr.zip"), path).unwrap();
    }
    let mut learnt = None;
    for (i, name) in ["scalars/a/0", "scalars/b/0", "scalars/c/0"]
        .iter()
        .enumerate()
    {
        let parses = append_as_commit(&known, &mut learnt, name, i as u8, "scalars/.zgroup");
        // The first append parses the archive; the next ones know it.
        assert_eq!(parses, u32::from(i == 0), "append {i}");
        assert_eq!(
            append_as_commit(&parsed, &mut None, name, i as u8, "scalars/.zgroup"),
            1
        );
        assert_eq!(records(&known), records(&parsed), "after append {i}");
        zipfile_test(&known);
    }
}

#[test]
fn an_archive_changed_since_or_a_name_not_known_is_parsed_again() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x.zip");
    std::fs::copy(Path::new(VECTORS).join("zarr_v2.daf.zarr.zip"), &path).unwrap();
    let mut learnt = None;
    assert_eq!(
        append_as_commit(&path, &mut learnt, "n/0", 1, "n/.zgroup"),
        1
    );
    // Another writer appends meanwhile: what was learnt no longer describes the file.
    append(&path, &[("other".into(), Bytes::from_vec(vec![9; 10]))]).unwrap();
    assert_eq!(
        append_as_commit(&path, &mut learnt, "n/1", 2, "n/.zgroup"),
        1
    );
    // A name never asked about is not known to be absent.
    assert_eq!(
        append_as_commit(&path, &mut learnt, "m/0", 3, "m/.zgroup"),
        1
    );
    assert_eq!(
        append_as_commit(&path, &mut learnt, "m/1", 4, "m/.zgroup"),
        0
    );
    let (records, _, _) = records(&path);
    let names: Vec<&str> = records.iter().map(|r| r.0.as_str()).collect();
    for name in [
        "n/0",
        "other",
        "n/1",
        "m/0",
        "m/1",
        "n/.zgroup",
        "m/.zgroup",
    ] {
        assert_eq!(names.iter().filter(|n| **n == name).count(), 1, "{name}");
    }
    zipfile_test(&path);
}
