//! Real mounts of every source kind, compared file by file with the fixtures.

mod common;

use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::process::Command;

use common::{assert_same_files, io_timeout, read_tree, TestMount, Tree, JULIA, VECTORS};
use daf_mount::views::ViewSelection;

fn fixture(name: &str) -> Tree {
    read_tree(&Path::new(VECTORS).join(name))
}

/// Mounts `source` and checks `NAME.daf` against the FilesDaf fixture of its version (1.0 for a
/// Zarr source; a FilesDaf source's own version) and `NAME.daf.zarr` against the Zarr v2 fixture.
fn check_both_views(source: &str, name: &str) {
    // Data sets written by DataAxesFormats 0.3 are shown as FilesDaf 1.1 and Zarr v3 by default.
    let (files_fixture, zarr_fixture) = if source.contains("v1_1") || source.contains("zarr_v3") {
        ("files_v1_1.daf", "zarr_v3.daf.zarr")
    } else {
        ("files_v1_0.daf", "zarr_v2.daf.zarr")
    };
    let mount = TestMount::new(source, ViewSelection::Both);
    let root = mount.path.clone();
    let owned = name.to_string();
    let (files, zarr, listing) = io_timeout(&mount.path, move || {
        let name = owned;
        let listing: Vec<String> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        (
            read_tree(&root.join(format!("{name}.daf"))),
            read_tree(&root.join(format!("{name}.daf.zarr"))),
            listing,
        )
    });
    let mut listing = listing;
    listing.sort();
    assert_eq!(
        listing,
        vec![format!("{name}.daf"), format!("{name}.daf.zarr")],
        "{source}"
    );
    // axes/metadata.json is a seed-only optional sidecar (§2.8) the view does not show; a 1.1
    // view's metadata.json (§3.5) equals the fixture's as JSON.
    assert_same_files(
        &files,
        &fixture(files_fixture),
        &["axes/metadata.json"],
        &format!("{source}: FilesDaf view"),
    );
    assert_same_files(
        &zarr,
        &fixture(zarr_fixture),
        &[],
        &format!("{source}: Zarr view"),
    );
    for dir in [
        "vectors/gene",
        "matrices/cell/cell",
        "matrices/gene/cell",
        "matrices/gene/gene",
    ] {
        assert_eq!(
            files.get(dir),
            Some(&None),
            "{source}: FilesDaf view lacks {dir}/"
        );
    }
}

fn python(script: &str, args: &[&Path]) {
    let status = Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .status()
        .unwrap();
    assert!(status.success(), "python3 helper failed");
}

#[test]
fn filesdaf_directories() {
    require_fuse!();
    check_both_views(&format!("{VECTORS}/files_v1_0.daf"), "files_v1_0");
    check_both_views(&format!("{VECTORS}/files_v1_1.daf"), "files_v1_1");
}

#[test]
fn zarr_directory_and_zip() {
    require_fuse!();
    check_both_views(&format!("{VECTORS}/zarr_v2.daf.zarr"), "zarr_v2");
    check_both_views(&format!("{VECTORS}/zarr_v2.daf.zarr.zip"), "zarr_v2");
}

#[test]
fn zarr_v3_directory_and_zip() {
    require_fuse!();
    check_both_views(&format!("{VECTORS}/zarr_v3.daf.zarr"), "zarr_v3");
    check_both_views(&format!("{VECTORS}/zarr_v3.daf.zarr.zip"), "zarr_v3");
}

/// The Zarr v3 view of a packed ZarrDaf v3 directory is the source's own tree, file by file:
/// chunks and shards byte for byte, documents equal as JSON, except that a packed array declares
/// its shard shape rounded up to whole inner chunks (Julia declares the array shape, which
/// Zarr readers refuse), in its own `zarr.json` and in the root's consolidated metadata.
#[test]
fn the_v3_view_of_a_packed_v3_source_is_its_own_tree() {
    require_fuse!();
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/packed/zarr_packed.daf.zarr"
    );
    let mount = TestMount::new(source, ViewSelection::Zarr);
    let root = mount.path.clone();
    let view = io_timeout(&mount.path, move || read_tree(&root));
    let own = read_tree(Path::new(source));
    let files = |t: &Tree| {
        t.iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(files(&view), files(&own));
    // Julia's shard shape, rounded up to whole inner chunks.
    fn rounded(doc: &mut serde_json::Value) -> bool {
        let Some(codec) = doc["codecs"]
            .get(0)
            .filter(|c| c["name"] == "sharding_indexed")
        else {
            return false;
        };
        let inner: Vec<u64> =
            serde_json::from_value(codec["configuration"]["chunk_shape"].clone()).unwrap();
        let shape: Vec<u64> = serde_json::from_value(doc["shape"].clone()).unwrap();
        let shard: Vec<u64> = shape
            .iter()
            .zip(&inner)
            .map(|(n, i)| n.div_ceil(*i) * i)
            .collect();
        doc["chunk_grid"]["configuration"]["chunk_shape"] = serde_json::json!(shard);
        true
    }
    let mut packed = 0;
    for (path, bytes) in &own {
        let (Some(expected), Some(Some(got))) = (bytes, view.get(path)) else {
            continue;
        };
        if !path.ends_with("zarr.json") {
            assert_eq!(got, expected, "{path}: the source's own bytes");
            continue;
        }
        let got: serde_json::Value = serde_json::from_slice(got).unwrap();
        let mut expected: serde_json::Value = serde_json::from_slice(expected).unwrap();
        if path == "zarr.json" {
            for node in expected["consolidated_metadata"]["metadata"]
                .as_object_mut()
                .unwrap()
                .values_mut()
            {
                rounded(node);
            }
        } else if rounded(&mut expected) {
            packed += 1;
        }
        assert_eq!(got, expected, "{path}");
    }
    assert!(packed >= 5, "the source has packed arrays ({packed})");
}

#[test]
fn zipdaf_archives() {
    require_fuse!();
    check_both_views(&format!("{VECTORS}/zipdaf_v1_0.daf.zip"), "zipdaf_v1_0");
    check_both_views(&format!("{VECTORS}/multi_v1_1.dafs.zip#/g1"), "g1");
}

/// Re-packs the Zarr fixture the way other tools write ZIPs: deflated, streamed with data
/// descriptors, unaligned, with a stale earlier copy of a chunk under the same name.
const FOREIGN_ZIP: &str = r#"
import io, os, sys, warnings, zipfile
warnings.simplefilter("ignore")
src, dst, prefixes = sys.argv[1], sys.argv[2], sys.argv[3:] or [""]
class NoSeek(io.RawIOBase):
    def __init__(self, f): self.f, self.pos = f, 0
    def writable(self): return True
    def seekable(self): return False
    def write(self, b): self.f.write(b); self.pos += len(b); return len(b)
    def tell(self): return self.pos
    def flush(self): self.f.flush()
with open(dst, "wb") as out:
    z = zipfile.ZipFile(NoSeek(out), "w", zipfile.ZIP_DEFLATED)
    for prefix in prefixes:
        z.writestr(prefix + "vectors/cell/score/0", b"stale bytes!")
        for root, dirs, files in sorted(os.walk(src)):
            for name in sorted(files):
                full = os.path.join(root, name)
                key = prefix + os.path.relpath(full, src)
                if key.endswith(".zmetadata"):
                    continue
                method = zipfile.ZIP_STORED if key.endswith("/0") else zipfile.ZIP_DEFLATED
                z.writestr(zipfile.ZipInfo(key), open(full, "rb").read(), compress_type=method)
    z.close()
"#;

#[test]
fn foreign_zip_with_deflate_descriptors_duplicates_and_no_alignment() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("foreign.daf.zarr.zip");
    python(
        FOREIGN_ZIP,
        &[&Path::new(VECTORS).join("zarr_v2.daf.zarr"), &archive],
    );
    check_both_views(archive.to_str().unwrap(), "foreign");
}

#[test]
fn multi_data_set_zarr_zip_by_group_and_whole() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("many.dafs.zarr.zip");
    python(
        FOREIGN_ZIP,
        &[
            &Path::new(VECTORS).join("zarr_v2.daf.zarr"),
            &archive,
            Path::new("g1/"),
            Path::new("deep/g2/"),
        ],
    );
    check_both_views(&format!("{}#/g1", archive.display()), "g1");
    check_both_views(&format!("{}#/deep/g2", archive.display()), "g2");
    let mount = TestMount::new(archive.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    let tree = io_timeout(&mount.path, move || read_tree(&root));
    for dir in [
        "g1.daf",
        "g1.daf.zarr",
        "deep",
        "deep/g2.daf",
        "deep/g2.daf.zarr",
    ] {
        assert_eq!(tree.get(dir), Some(&None), "{dir}");
    }
    assert_eq!(
        tree["deep/g2.daf/vectors/cell/score.data"],
        tree["g1.daf.zarr/vectors/cell/score/0"]
    );
}

#[test]
fn julia_written_filesdaf_is_shown_as_written() {
    require_fuse!();
    let mount = TestMount::new(JULIA, ViewSelection::Both);
    let root = mount.path.clone();
    let (files, zarr) = io_timeout(&mount.path, move || {
        (
            read_tree(&root.join("julia-filesdaf.daf")),
            read_tree(&root.join("julia-filesdaf.daf.zarr")),
        )
    });
    assert_same_files(
        &files,
        &read_tree(Path::new(JULIA)),
        &[],
        "Julia FilesDaf view",
    );
    // Every payload of the FilesDaf view is the chunk of the matching Zarr array.
    for (path, bytes) in &files {
        let Some(bytes) = bytes else { continue };
        let zarr_key = match path.rsplit_once('.') {
            Some((base, "data")) if path.starts_with("matrices/") => format!("{base}/0.0"),
            Some((base, "data")) => format!("{base}/0"),
            Some((base, ext @ ("nzind" | "nzval" | "colptr" | "rowval"))) => {
                format!("{base}/{ext}/0")
            }
            _ => continue,
        };
        assert_eq!(
            zarr.get(&zarr_key),
            Some(&Some(bytes.clone())),
            "{path} vs {zarr_key}"
        );
    }
    let zarray: serde_json::Value =
        serde_json::from_slice(zarr["matrices/cell/gene/dense_m/.zarray"].as_ref().unwrap())
            .unwrap();
    let shape = zarray["shape"].as_array().unwrap();
    let cells = files["axes/cell.txt"]
        .as_ref()
        .unwrap()
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as u64;
    assert_eq!(
        shape[1].as_u64(),
        Some(cells),
        "Zarr shape is [ncols, nrows]"
    );
}

#[test]
fn file_system_behaviour_ls_find_du_expect() {
    require_fuse!();
    let mount = TestMount::new(
        &format!("{VECTORS}/zarr_v2.daf.zarr.zip"),
        ViewSelection::Both,
    );
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let data = root.join("zarr_v2.daf/matrices/cell/gene/expr.data");
        let meta = std::fs::metadata(&data).unwrap();
        assert_eq!((meta.len(), meta.mode() & 0o7777), (48, 0o444));
        assert_eq!(
            std::fs::metadata(root.join("zarr_v2.daf")).unwrap().mode() & 0o7777,
            0o555
        );
        // Inode numbers are stable while mounted.
        assert_eq!(std::fs::metadata(&data).unwrap().ino(), meta.ino());
        // Reads at any offset, short reads at the end.
        let file = std::fs::File::open(&data).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(file.read_at(&mut buf, 40).unwrap(), 8);
        assert_eq!(&buf[..8], &6.0f64.to_le_bytes());
        // Timestamps come from the source: Julia-style entries (1980-01-01) show the archive's.
        let archive_mtime = std::fs::metadata(format!("{VECTORS}/zarr_v2.daf.zarr.zip"))
            .unwrap()
            .mtime();
        assert_eq!(meta.mtime(), archive_mtime);
        let stats = nix::sys::statvfs::statvfs(&root).unwrap();
        assert!(stats.files() > 100);
        // Every write answers EROFS.
        for result in [
            std::fs::write(root.join("zarr_v2.daf/new.json"), b"{}").map(|_| ()),
            std::fs::OpenOptions::new()
                .write(true)
                .open(&data)
                .map(|_| ()),
            std::fs::create_dir(root.join("zarr_v2.daf/newdir")),
            std::fs::remove_file(&data),
            std::fs::rename(&data, root.join("zarr_v2.daf/moved")),
        ] {
            assert_eq!(result.unwrap_err().raw_os_error(), Some(libc::EROFS));
        }
        for tool in [&["find", "-ls"][..], &["du", "-s"], &["ls", "-lR"]] {
            let out = Command::new(tool[0])
                .args(&tool[1..])
                .current_dir(&root)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{tool:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    });
}

/// A ZarrDaf ZIP whose 12.8 MB matrix chunk starts at an odd offset; the chunk's bytes also go
/// to `expected.bin` beside it.
const LARGE_MEMBER_ZIP: &str = r#"
import json, os, random, struct, sys, zipfile
path = sys.argv[1]
rng = random.Random(7)
payload = rng.randbytes(800 * 2000 * 8)
open(os.path.join(os.path.dirname(path), "expected.bin"), "wb").write(payload)
def zarray(dtype, shape, strings=False):
    return json.dumps({"dtype": dtype, "filters": [{"id": "vlen-utf8"}] if strings else None,
                       "shape": shape, "order": "C", "zarr_format": 2, "chunks": shape,
                       "fill_value": None, "compressor": None})
def vlen(items):
    return struct.pack("<I", len(items)) + b"".join(struct.pack("<I", len(x)) + x for x in items)
with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
    z.writestr("odd-length-name", b"x" * 3)
    for g in ["", "scalars/", "axes/", "vectors/", "matrices/", "matrices/cell/", "matrices/cell/gene/"]:
        z.writestr(g + ".zgroup", '{"zarr_format":2}')
        z.writestr(g + ".zattrs", "{}")
    z.writestr("daf/.zarray", zarray("|u1", [2]))
    z.writestr("daf/0", bytes([1, 0]))
    for axis, n in [("cell", 2000), ("gene", 800)]:
        z.writestr(f"axes/{axis}/.zarray", zarray("|O", [n], True))
        z.writestr(f"axes/{axis}/0", vlen([f"{axis}{i}".encode() for i in range(n)]))
    z.writestr("matrices/cell/gene/big/.zarray", zarray("<f8", [800, 2000]))
    z.writestr("matrices/cell/gene/big/0.0", payload)
"#;

/// Pages of `path` in the kernel's page cache (util-linux `fincore`).
fn cached_pages(path: &Path) -> u64 {
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "PAGES"])
        .arg(path)
        .output()
        .unwrap();
    assert!(out.status.success(), "fincore failed");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

#[test]
fn large_members_fill_the_page_cache_while_open_with_the_right_bytes() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("large.daf.zarr.zip");
    python(LARGE_MEMBER_ZIP, &[&archive]);
    let expected = std::fs::read(tmp.path().join("expected.bin")).unwrap();
    let mount = TestMount::new(archive.to_str().unwrap(), ViewSelection::Files);
    let data = mount.join("matrices/cell/gene/big.data");
    io_timeout(&mount.path, move || {
        let pages = (expected.len() as u64).div_ceil(4096);
        let held = std::fs::File::open(&data).unwrap();
        let mut head = [0u8; 4096];
        held.read_exact_at(&mut head, 0).unwrap();
        assert_eq!(head[..], expected[..4096]);
        // Only the first page was asked for: the rest comes from the filler, from the end back.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while cached_pages(&data) < pages {
            assert!(
                std::time::Instant::now() < deadline,
                "the page cache was not filled"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // What the kernel now serves from its cache is the member, byte for byte: whole, in
        // odd-sized pieces, and through a shared map.
        assert!(std::fs::read(&data).unwrap() == expected);
        let mut piece = vec![0u8; 123_457];
        for offset in [0, 4095, 1 << 20, 5_000_001, expected.len() as u64 - 1000] {
            let n = held.read_at(&mut piece, offset).unwrap();
            let at = offset as usize;
            assert!(
                piece[..n] == expected[at..(at + n).min(expected.len())],
                "at {offset}"
            );
        }
        // SAFETY (test): the mounted file is read-only and never changes while mapped.
        let map = unsafe { memmap2::Mmap::map(&held) }.unwrap();
        assert!(map[..] == expected[..]);
    });
}
