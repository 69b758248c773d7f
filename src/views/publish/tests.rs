//! Tests of the published ZIP: its bytes against upstream's archives and our own ZIP reader,
//! random ranges against the whole, and when CRCs are computed.

use std::path::Path;

use super::*;
use crate::formats::source::{open_source, Format};
use crate::stores::zip::open_archive;
use crate::views::ViewSelection;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");
const PACKED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");

fn options(zarr: Option<Format>) -> ViewOptions {
    ViewOptions {
        selection: ViewSelection::Both,
        zarr,
        files: None,
        zip: true,
        h5df: false,
        h5ad: None,
        dimension_names: false,
        anndata: None,
    }
}

/// The published archives of `source` (path, blob, publication).
fn published(source: &str, zarr: Option<Format>) -> Vec<(String, Arc<Blob>)> {
    let opened = open_source(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    Publisher::default()
        .entries(&opened.datasets, &options(zarr), |_| None)
        .into_iter()
        .map(|e| match e.node {
            ViewNode::File(blob) => (e.path, blob),
            ViewNode::Dir => panic!("{}: a directory", e.path),
        })
        .collect()
}

fn whole(blob: &Blob) -> Vec<u8> {
    blob.read_range(0, blob.len().unwrap())
        .unwrap()
        .as_slice()
        .to_vec()
}

/// Parses `bytes` as an archive with our reader; checks upstream's layout on the way.
fn parse(bytes: &[u8]) -> (tempfile::TempDir, crate::stores::zip::ZipArchive) {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("p.zip");
    std::fs::write(&path, bytes).unwrap();
    let archive = open_archive(&path).unwrap();
    let mut end = 0;
    for r in &archive.records {
        assert_eq!(r.method, 0, "{}", r.name);
        assert_eq!(r.data_offset % 8, 0, "{}", r.name);
        assert!(r.defect.is_none(), "{}: {:?}", r.name, r.defect);
        let data = &bytes[r.data_offset as usize..(r.data_offset + r.size) as usize];
        assert_eq!(crc32fast::hash(data), r.crc32, "{}", r.name);
        end = r.data_offset + r.size;
    }
    assert_eq!(
        archive.cd_offset, end,
        "the directory follows the last entry"
    );
    assert_eq!(
        archive.cd_offset + archive.cd_size + TRAILER,
        bytes.len() as u64
    );
    (tmp, archive)
}

/// The published archive of a Zarr ZIP source written by upstream holds the same entries with
/// the same bytes (upstream's archive has no consolidated metadata either).
#[test]
fn the_archive_of_an_upstream_zip_has_its_entries() {
    for (source, zarr) in [
        ("zarr_v2.daf.zarr.zip", Format::ZarrV2),
        ("zarr_v3.daf.zarr.zip", Format::ZarrV3),
    ] {
        let path = format!("{VECTORS}/{source}");
        let files = published(&path, Some(zarr));
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].0, source);
        let ours = whole(&files[0].1);
        let (_t, ours) = parse(&ours);
        let theirs = open_archive(Path::new(&path)).unwrap();
        let entries = |a: &crate::stores::zip::ZipArchive| {
            let index = a.index();
            let mut out: Vec<(String, Vec<u8>)> = index
                .keys()
                .map(|k| {
                    let b = index.get(k).unwrap().blob.bytes().unwrap();
                    (k.to_string(), b.as_slice().to_vec())
                })
                .collect();
            out.sort();
            out
        };
        assert_eq!(entries(&ours), entries(&theirs), "{source}");
        // The CRCs of the source's stored members are the ones its directory records: known
        // without reading (or checking) the members.
        let opened = open_source(&path).unwrap();
        let publication =
            Publication::new(members(&opened.datasets, 0, &options(Some(zarr))), None);
        let states = |p: &Publication| -> Vec<_> {
            p.members.iter().map(|m| m.blob.check_state()).collect()
        };
        let before = states(&publication);
        let unverified = crate::stores::blob::CheckState::Unverified;
        assert!(before.contains(&Some(unverified)), "{source}");
        let size = publication.size().unwrap();
        let plan = publication.plan().unwrap();
        publication
            .read_range(plan.cd_offset, size - plan.cd_offset)
            .unwrap();
        assert_eq!(states(&publication), before, "{source}");
        // Root and group documents come first, as upstream writes them.
        assert_eq!(ours.records[0].name, theirs.records[0].name, "{source}");
    }
}

/// Every source kind: a valid archive in upstream's layout, whose size is known before any
/// CRC is computed, and whose bytes at random ranges equal the whole.
#[test]
fn every_source_kind_publishes_a_valid_archive_read_by_ranges() {
    let sources = [
        format!("{VECTORS}/files_v1_0.daf"),
        format!("{VECTORS}/files_v1_1.daf"),
        format!("{VECTORS}/zarr_v2.daf.zarr"),
        format!("{VECTORS}/zarr_v3.daf.zarr"),
        format!("{VECTORS}/zipdaf_v1_0.daf.zip"),
        format!("{VECTORS}/multi_v1_1.dafs.zip"),
        format!("{PACKED}/files_packed.daf"),
        format!("{PACKED}/zarr_packed.daf.zarr.zip"),
        format!("{PACKED}/foreign_v3.daf.zarr"),
    ];
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for source in &sources {
        for zarr in [None, Some(Format::ZarrV2), Some(Format::ZarrV3)] {
            for (path, blob) in published(source, zarr) {
                assert!(path.ends_with(".daf.zarr.zip"), "{path}");
                let size = blob.len().unwrap();
                let bytes = whole(&blob);
                assert_eq!(bytes.len() as u64, size, "{source} {path}");
                let (_t, archive) = parse(&bytes);
                assert!(!archive.records.is_empty());
                for _ in 0..1000 {
                    let offset = next() % (size + 10);
                    let len = 1 + next() % 300;
                    let got = blob.read_range(offset, len).unwrap();
                    let from = (offset.min(size)) as usize;
                    let to = (offset.saturating_add(len).min(size)) as usize;
                    assert_eq!(got.as_slice(), &bytes[from..to], "{path} at {offset}+{len}");
                }
            }
        }
    }
}

/// CRCs are computed when a header or record holding them is read, not for the size nor for
/// data reads, and carry over to the next publication of the same blobs.
#[test]
fn crcs_are_computed_on_first_need_and_carried_over() {
    let opened = open_source(&format!("{VECTORS}/zarr_v2.daf.zarr")).unwrap();
    let members = members(&opened.datasets, 0, &options(None));
    let publication = Publication::new(members.clone(), None);
    let computed = |p: &Publication| p.members.iter().filter(|m| m.crc.get().is_some()).count();
    let size = publication.size().unwrap();
    assert_eq!(computed(&publication), 0);
    // The data of the first member (after its header) needs no CRC.
    let plan = publication.plan().unwrap();
    let (_, pad, len) = plan.places[0];
    let data_at = local_header_len(members[0].0.len(), pad);
    publication.read_range(data_at, len).unwrap();
    assert_eq!(computed(&publication), 0);
    // Its header needs its own only.
    publication.read_range(0, 10).unwrap();
    assert_eq!(computed(&publication), 1);
    // The directory needs every one.
    publication
        .read_range(plan.cd_offset, size - plan.cd_offset)
        .unwrap();
    assert_eq!(computed(&publication), members.len());
    let again = Publication::new(members, Some(&publication));
    assert_eq!(computed(&again), again.members.len());
    // A member whose blob changed is computed again.
    let mut changed: Vec<(String, Arc<Blob>)> = again
        .members
        .iter()
        .map(|m| (m.name.clone(), m.blob.clone()))
        .collect();
    changed[1].1 = Blob::ready(Bytes::from_vec(b"{}".to_vec()));
    let third = Publication::new(changed, Some(&again));
    assert_eq!(computed(&third), third.members.len() - 1);
}

/// Zeros, served by ranges.
struct Zeros;

impl RangeSource for Zeros {
    fn read_range(&self, _offset: u64, len: u64) -> Result<Bytes, StoreError> {
        Ok(Bytes::from_vec(vec![0; len as usize]))
    }
}

/// Offsets past 4 GiB go into the ZIP64 fields: an archive with a 5 GiB member, written as a
/// sparse file from its generated pieces only, parses with the member after it where it is.
#[test]
fn offsets_past_4_gib_are_zip64() {
    const BIG: u64 = 5 << 30;
    let members = vec![
        (
            "a".to_string(),
            Blob::ready(Bytes::from_vec(b"first".to_vec())),
        ),
        ("big/0".to_string(), Blob::ranged(BIG, Arc::new(Zeros))),
        (
            "z".to_string(),
            Blob::ready(Bytes::from_vec(b"last".to_vec())),
        ),
    ];
    let publication = Publication::new(members, None);
    for m in &publication.members {
        // The CRC of 5 GiB of zeros is not what is tested (and slow unoptimised).
        let _ = m.crc.set(if m.name == "big/0" {
            0x1234_5678
        } else {
            crc32fast::hash(m.blob.bytes().unwrap().as_slice())
        });
    }
    let plan = publication.plan().unwrap();
    assert!(plan.cd_offset > BIG);
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("big.zip");
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(plan.total).unwrap();
    use std::os::unix::fs::FileExt;
    for (i, &(start, piece)) in plan.pieces.iter().enumerate() {
        if matches!(piece, Piece::Data(1)) {
            continue; // a hole: zeros
        }
        let end = plan.pieces.get(i + 1).map_or(plan.total, |p| p.0);
        let bytes = publication.read_range(start, end - start).unwrap();
        file.write_all_at(bytes.as_slice(), start).unwrap();
    }
    drop(file);
    let archive = open_archive(&path).unwrap();
    let names: Vec<&str> = archive.records.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["a", "big/0", "z"]);
    let last = &archive.records[2];
    assert!(last.data_offset > BIG && last.data_offset % 8 == 0);
    assert_eq!(archive.records[1].size, BIG);
    assert_eq!(
        archive
            .index()
            .get("z")
            .unwrap()
            .blob
            .bytes()
            .unwrap()
            .as_slice(),
        b"last"
    );
    // Python's zipfile reads the ZIP64 records too.
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); print(z.getinfo('big/0').file_size, z.read('z').decode())"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("{BIG} last"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A member's data is the model's own blob, the one the views show (no copy).
#[test]
fn payload_members_are_the_views_blobs() {
    let opened = open_source(&format!("{VECTORS}/zarr_v2.daf.zarr")).unwrap();
    for zarr in [Format::ZarrV2, Format::ZarrV3] {
        let root = ViewRoot {
            dataset: 0,
            kind: ViewKind::Zarr,
            format: zarr,
            mount: String::new(),
            canonical: "zarr_v2.daf.zarr".into(),
            dimension_names: false,
            anndata: None,
        };
        let view: HashMap<String, Arc<Blob>> = view_entries(&opened.datasets[0].dataset, &root)
            .into_iter()
            .filter_map(|e| match e.node {
                ViewNode::File(b) => Some((e.path, b)),
                ViewNode::Dir => None,
            })
            .collect();
        let members = members(&opened.datasets, 0, &options(Some(zarr)));
        let payloads = [
            "vectors/cell/score",
            "vectors/cell/counts/nzval",
            "matrices/cell/gene/expr",
            "matrices/cell/gene/umis/rowval",
        ];
        for node in payloads {
            let (name, blob) = members
                .iter()
                .find(|(n, _)| {
                    n.starts_with(&format!("{node}/")) && !n.ends_with("json") && !n.contains("/.z")
                })
                .unwrap_or_else(|| panic!("{zarr:?}: no chunk of {node}"));
            assert!(Arc::ptr_eq(blob, &view[name]), "{zarr:?}: {name}");
        }
    }
}
