//! Core tests: the views of every source kind against the fixtures, without a kernel.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use super::*;
use crate::formats::source::open_source;
use crate::views::ViewSelection;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

fn mount(source: &str, selection: ViewSelection) -> DafFs {
    let source = open_source(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    DafFs::new(source.datasets, selection, SystemTime::UNIX_EPOCH)
}

/// Every path under `dir` of the mount: `None` for directories, the bytes for files.
fn walk(fs: &DafFs, ino: u64, prefix: &str, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
    for entry in fs.readdir(ino, 2, usize::MAX).unwrap() {
        let path = if prefix.is_empty() {
            entry.name.clone()
        } else {
            format!("{prefix}/{}", entry.name)
        };
        let attr = fs.getattr(entry.ino).unwrap();
        match entry.kind {
            Kind::Dir => {
                out.insert(path.clone(), None);
                walk(fs, entry.ino, &path, out);
            }
            Kind::File => {
                let bytes = fs.content(entry.ino).unwrap().as_slice().to_vec();
                assert_eq!(
                    attr.size,
                    bytes.len() as u64,
                    "{path}: st_size must be exact"
                );
                out.insert(path, Some(bytes));
            }
        }
    }
}

fn walk_disk(root: &Path, prefix: &str, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
    for entry in std::fs::read_dir(root.join(prefix)).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if entry.file_type().unwrap().is_dir() {
            out.insert(path.clone(), None);
            walk_disk(root, &path, out);
        } else {
            out.insert(path, Some(std::fs::read(entry.path()).unwrap()));
        }
    }
}

/// Compares a view with a fixture tree: the same files; JSON equal as JSON, everything else byte
/// for byte; every fixture directory present (the view also has the empty directories Julia
/// creates, which a fixture kept in git cannot hold).
fn assert_same_tree(
    view: &BTreeMap<String, Option<Vec<u8>>>,
    fixture: &BTreeMap<String, Option<Vec<u8>>>,
    what: &str,
) {
    let files = |t: &BTreeMap<String, Option<Vec<u8>>>| {
        t.iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, _)| k.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(files(view), files(fixture), "{what}: files differ");
    for dir in fixture.iter().filter(|(_, v)| v.is_none()).map(|(k, _)| k) {
        assert_eq!(
            view.get(dir),
            Some(&None),
            "{what}: directory {dir} missing"
        );
    }
    for (path, expected) in fixture {
        let got = &view[path];
        let (Some(got), Some(expected)) = (got, expected) else {
            continue;
        };
        if path.ends_with(".json")
            || path.ends_with(".zarray")
            || path.ends_with(".zgroup")
            || path.ends_with(".zattrs")
            || path.ends_with(".zmetadata")
        {
            let a: Value =
                serde_json::from_slice(got).unwrap_or_else(|e| panic!("{what}: {path}: {e}"));
            let b: Value = serde_json::from_slice(expected).unwrap();
            assert_eq!(a, b, "{what}: {path}");
        } else {
            assert_eq!(got, expected, "{what}: {path}");
        }
    }
}

fn fixture(name: &str, skip: &[&str]) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    walk_disk(&Path::new(VECTORS).join(name), "", &mut out);
    out.retain(|path, _| !skip.contains(&path.as_str()));
    out
}

fn view_of(fs: &DafFs, dir: &str) -> BTreeMap<String, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    walk(fs, fs.resolve(dir).unwrap(), "", &mut out);
    out
}

#[test]
fn every_source_kind_shows_the_fixture_layouts() {
    // The seed FilesDaf fixture carries the seed-only sidecar axes/metadata.json, which is an
    // optional cache (§2.8) that the view does not synthesise.
    // The FilesDaf view of a FilesDaf source is in the source's version (its own files); a 1.1
    // view synthesises the root index metadata.json (§3.5), equal as JSON to the fixture's.
    let files_1_0 = fixture("files_v1_0.daf", &["axes/metadata.json"]);
    let files_1_1 = fixture("files_v1_1.daf", &[]);
    // Data sets written by DataAxesFormats 0.3 (FilesDaf 1.1, Zarr v3) get a Zarr v3 and a
    // FilesDaf 1.1 view by default; the others the seed's Zarr v2 and FilesDaf 1.0.
    let zarr_v2 = fixture("zarr_v2.daf.zarr", &[]);
    let zarr_v3 = fixture("zarr_v3.daf.zarr", &[]);
    for (source, name, files, zarr) in [
        ("files_v1_0.daf", "files_v1_0", &files_1_0, &zarr_v2),
        ("files_v1_1.daf", "files_v1_1", &files_1_1, &zarr_v3),
        ("zarr_v2.daf.zarr", "zarr_v2", &files_1_0, &zarr_v2),
        ("zarr_v2.daf.zarr.zip", "zarr_v2", &files_1_0, &zarr_v2),
        ("zarr_v3.daf.zarr", "zarr_v3", &files_1_1, &zarr_v3),
        ("zarr_v3.daf.zarr.zip", "zarr_v3", &files_1_1, &zarr_v3),
        ("zipdaf_v1_0.daf.zip", "zipdaf_v1_0", &files_1_0, &zarr_v2),
        ("multi_v1_1.dafs.zip#/g1", "g1", &files_1_1, &zarr_v3),
    ] {
        let fs = mount(&format!("{VECTORS}/{source}"), ViewSelection::Both);
        let root: Vec<String> = fs
            .readdir(ROOT, 2, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(
            root,
            vec![format!("{name}.daf"), format!("{name}.daf.zarr")],
            "{source}"
        );
        let files_view = view_of(&fs, &format!("{name}.daf"));
        assert_same_tree(&files_view, files, &format!("{source} FilesDaf view"));
        for dir in [
            "vectors/gene",
            "matrices/cell/cell",
            "matrices/gene/cell",
            "matrices/gene/gene",
        ] {
            assert_eq!(
                files_view.get(dir),
                Some(&None),
                "{source}: FilesDaf needs {dir}/"
            );
        }
        assert_same_tree(
            &view_of(&fs, &format!("{name}.daf.zarr")),
            zarr,
            &format!("{source} Zarr view"),
        );
    }
}

#[test]
fn the_view_formats_can_be_chosen() {
    // Each source in each of the four layouts the options ask for.
    let files_1_0 = fixture("files_v1_0.daf", &["axes/metadata.json"]);
    let files_1_1 = fixture("files_v1_1.daf", &[]);
    let zarr_v2 = fixture("zarr_v2.daf.zarr", &[]);
    let zarr_v3 = fixture("zarr_v3.daf.zarr", &[]);
    use crate::formats::json::FilesVersion::{V1_0, V1_1};
    use crate::formats::source::Format::{ZarrV2, ZarrV3};
    for source in ["files_v1_0.daf", "zarr_v2.daf.zarr", "zarr_v3.daf.zarr.zip"] {
        for (zarr_format, files_version, zarr, files) in [
            (ZarrV3, V1_1, &zarr_v3, &files_1_1),
            (ZarrV2, V1_0, &zarr_v2, &files_1_0),
        ] {
            let opened = open_source(&format!("{VECTORS}/{source}")).unwrap();
            let options = crate::views::ViewOptions {
                selection: ViewSelection::Both,
                zarr: Some(zarr_format),
                files: Some(files_version),
                zip: false,
                h5df: false,
                h5ad: None,
                dimension_names: false,
                anndata: None,
            };
            let fs = DafFs::new(opened.datasets, options, SystemTime::UNIX_EPOCH);
            let name = crate::formats::source::display_name(Path::new(source));
            let what = format!("{source} as {zarr_format:?}, {files_version:?}");
            assert_same_tree(&view_of(&fs, &format!("{name}.daf.zarr")), zarr, &what);
            assert_same_tree(&view_of(&fs, &format!("{name}.daf")), files, &what);
        }
    }
}

#[test]
fn zmetadata_keys_are_sorted() {
    let fs = mount(&format!("{VECTORS}/files_v1_0.daf"), ViewSelection::Zarr);
    let text = fs.content(fs.resolve(".zmetadata").unwrap()).unwrap();
    let doc: Value = serde_json::from_slice(text.as_slice()).unwrap();
    let keys: Vec<&String> = doc["metadata"].as_object().unwrap().keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted);
    assert!(text.as_slice().ends_with(b"}\n"));
    assert!(std::str::from_utf8(text.as_slice())
        .unwrap()
        .contains("\n    \"metadata\": {\n        \".zattrs\": {},"));
}

#[test]
fn numeric_payloads_of_both_views_are_one_mapped_region() {
    for source in ["files_v1_0.daf", "zarr_v2.daf.zarr", "zarr_v2.daf.zarr.zip"] {
        let fs = mount(&format!("{VECTORS}/{source}"), ViewSelection::Both);
        let name = source.split('.').next().unwrap();
        for (files_path, zarr_path) in [
            ("vectors/cell/score.data", "vectors/cell/score/0"),
            ("vectors/cell/counts.nzval", "vectors/cell/counts/nzval/0"),
            (
                "matrices/cell/gene/expr.data",
                "matrices/cell/gene/expr/0.0",
            ),
            (
                "matrices/cell/gene/umis.colptr",
                "matrices/cell/gene/umis/colptr/0",
            ),
        ] {
            let a = fs
                .content(fs.resolve(&format!("{name}.daf/{files_path}")).unwrap())
                .unwrap();
            let b = fs
                .content(fs.resolve(&format!("{name}.daf.zarr/{zarr_path}")).unwrap())
                .unwrap();
            // A stored ZIP entry is a range of the archive's map; a small source file (at most
            // stores::dir::SMALL_FILE) is read once into a buffer. Either way both views share it.
            assert_eq!(
                a.is_mapped() && b.is_mapped(),
                source.ends_with(".zip"),
                "{source}: {files_path} must come from the archive's map or the file's one buffer"
            );
            assert_eq!(
                a.as_slice().as_ptr(),
                b.as_slice().as_ptr(),
                "{source}: {files_path} and {zarr_path}"
            );
            assert_eq!(a.len(), b.len());
        }
    }
}

#[test]
fn single_view_selection_mounts_at_the_root() {
    let fs = mount(
        &format!("{VECTORS}/zarr_v2.daf.zarr.zip"),
        ViewSelection::Files,
    );
    let root: Vec<String> = fs
        .readdir(ROOT, 2, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        root,
        vec!["axes", "daf.json", "matrices", "scalars", "vectors"]
    );
    let fs = mount(
        &format!("{VECTORS}/zarr_v2.daf.zarr.zip"),
        ViewSelection::Zarr,
    );
    assert!(fs.resolve(".zmetadata").is_ok());
}

#[test]
fn operations_answer_like_a_read_only_file_system() {
    let fs = mount(&format!("{VECTORS}/files_v1_0.daf"), ViewSelection::Both);
    let axis = fs.resolve("files_v1_0.daf/axes/cell.txt").unwrap();
    assert_eq!(fs.read(axis, 0, 3, 100).unwrap().as_slice(), b"c2\nc3\n");
    assert_eq!(fs.read(axis, 0, 100, 10).unwrap().len(), 0);
    assert!(matches!(fs.open(axis, true, false), Err(FsError::ReadOnly)));
    assert!(fs.open(axis, false, false).is_ok());
    assert!(matches!(
        fs.lookup(axis, OsStr::new("x")),
        Err(FsError::NotDir)
    ));
    assert!(matches!(
        fs.lookup(ROOT, OsStr::new("nope")),
        Err(FsError::NotFound)
    ));
    assert!(matches!(
        fs.readdir(axis, 0, usize::MAX),
        Err(FsError::NotDir)
    ));
    let dir = fs.resolve("files_v1_0.daf/matrices").unwrap();
    let attr = fs.getattr(dir).unwrap();
    assert_eq!((attr.kind, attr.perm, attr.nlink), (Kind::Dir, 0o555, 4));
    // readdir offsets resume exactly after the last entry returned.
    let all = fs.readdir(dir, 0, usize::MAX).unwrap();
    assert_eq!(
        all.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        vec![".", "..", "cell", "gene"]
    );
    assert_eq!(
        fs.readdir(dir, all[2].next_offset, usize::MAX).unwrap()[0].name,
        "gene"
    );
    // Directory mtimes are the latest of their contents; files keep their source's.
    let source_mtime = std::fs::metadata(format!("{VECTORS}/files_v1_0.daf/axes/cell.txt"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(fs.getattr(axis).unwrap().mtime, source_mtime);
    assert!(fs.stats().inodes > 50);
}

/// A ranged blob of `len` bytes whose byte `i` is `i % 251`, counting the bytes it makes.
struct Pattern {
    made: std::sync::atomic::AtomicU64,
}

impl crate::stores::blob::RangeSource for Pattern {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, crate::stores::StoreError> {
        self.made
            .fetch_add(len, std::sync::atomic::Ordering::Relaxed);
        Ok(Bytes::from_vec(
            (offset..offset + len).map(|i| (i % 251) as u8).collect(),
        ))
    }
}

#[test]
fn reads_of_a_ranged_file_make_only_the_range() {
    use crate::formats::model::Payload;
    use crate::formats::types::NumType;
    let mut source = open_source(&format!("{VECTORS}/files_v1_0.daf")).unwrap();
    let pattern = Arc::new(Pattern {
        made: Default::default(),
    });
    let len = 64 << 20;
    let blob = crate::stores::Blob::ranged(len, pattern.clone());
    let score = source.datasets[0]
        .dataset
        .vectors
        .get_mut("cell")
        .and_then(|v| v.get_mut("score"))
        .unwrap();
    score.payload = Payload::Dense {
        eltype: NumType::Float64,
        data: blob.clone(),
    };
    let fs = DafFs::new(source.datasets, ViewSelection::Both, SystemTime::UNIX_EPOCH);
    let ino = fs
        .resolve("files_v1_0.daf/vectors/cell/score.data")
        .unwrap();
    assert_eq!(fs.getattr(ino).unwrap().size, len);
    assert!(fs.is_ranged(ino));
    let got = fs.read(ino, u64::MAX, 10_000_000, 4096).unwrap();
    let want: Vec<u8> = (10_000_000..10_004_096u64)
        .map(|i| (i % 251) as u8)
        .collect();
    assert_eq!(got.as_slice(), want.as_slice());
    // The last read is cut at the end of the file.
    assert_eq!(fs.read(ino, u64::MAX, len - 100, 4096).unwrap().len(), 100);
    assert!(!blob.is_materialized());
    let made = pattern.made.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(made, 4096 + 100);
}

#[test]
fn a_new_axis_that_renames_dimensions_makes_the_kernel_forget_every_named_document() {
    // A named Zarr view: adding an axis called `nnz` renames every sparse component's dimension
    // to `nnz_`, in documents of other items, which the kernel may have cached.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("files_v1_0.daf");
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(Path::new(VECTORS).join("files_v1_0.daf"))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    let opened = open_source(copy.to_str().unwrap()).unwrap();
    let staging = crate::staging::StagingArea::for_source(&opened.path);
    let options = crate::views::ViewOptions {
        selection: ViewSelection::Both,
        zarr: Some(crate::formats::source::Format::ZarrV2),
        files: None,
        zip: false,
        h5df: false,
        h5ad: None,
        dimension_names: true,
        anndata: None,
    };
    let fs = DafFs::with_staging(
        opened.datasets,
        options,
        SystemTime::UNIX_EPOCH,
        Some(staging),
    );
    let nzind = "files_v1_0.daf.zarr/vectors/cell/counts/nzind/.zattrs";
    let before = fs.content(fs.resolve(nzind).unwrap()).unwrap();
    assert_eq!(before.as_slice(), br#"{"_ARRAY_DIMENSIONS":["nnz"]}"#);
    let axes = fs.resolve("files_v1_0.daf/axes").unwrap();
    fs.take_invalidations();
    let (_, fh) = fs.create(axes, OsStr::new("nnz.txt"), false).unwrap();
    fs.write(fh, 0, b"a\n").unwrap();
    fs.flush(fh, None).unwrap();
    fs.release(fh);
    let ino = fs.resolve(nzind).unwrap();
    let after = fs.content(ino).unwrap();
    assert_eq!(after.as_slice(), br#"{"_ARRAY_DIMENSIONS":["nnz_"]}"#);
    let forgotten = fs.take_invalidations();
    assert!(
        forgotten.contains(&Invalidation::Inode(ino)),
        "{nzind} (inode {ino}) not invalidated: {forgotten:?}"
    );
}

#[test]
fn recovery_leaves_alone_what_a_writer_stages_after_the_mount() {
    let tmp = tempfile::tempdir().unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(format!("{VECTORS}/files_v1_0.daf"))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let fs = writable_both(&tmp.path().join("files_v1_0.daf"));
    // A writer's first file, staged before the recovery thread looked.
    let dir = fs.resolve("files_v1_0.daf/vectors/cell").unwrap();
    let (_, fh) = fs
        .create(dir, std::ffi::OsStr::new("extra.json"), false)
        .unwrap();
    fs.write(fh, 0, br#"{"format":"dense","eltype":"Float32"}"#)
        .unwrap();
    fs.recover();
    let state = fs.state.read().unwrap();
    assert!(state.stuck.is_empty(), "set aside: {:?}", state.stuck);
}

/// A writable mount (both views) of the ZIP `archive` whose next append pauses once written
/// (before its staged files go): it says so on the receiver, and goes on when the sender says.
fn zip_with_paused_append(
    archive: &Path,
) -> (
    DafFs,
    std::sync::mpsc::Receiver<()>,
    std::sync::mpsc::Sender<()>,
) {
    let fs = writable_both(archive);
    let (paused, in_append) = std::sync::mpsc::channel();
    let (resume, resumed) = std::sync::mpsc::channel();
    *fs.appender.pause.lock().unwrap() = Some((paused, resumed));
    (fs, in_append, resume)
}

/// An item a killed daemon had accepted but not appended is committed again by the recovery; its
/// line in the journal of accepted items stays until its staged files are gone, so a daemon
/// killed again before that append still finds it accepted (the recovery used to keep only the
/// items still staged in the tree, which an item queued for its append is not).
#[test]
fn recovery_keeps_an_item_accepted_until_its_append_is_done() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("zarr_v2.daf.zarr.zip");
    std::fs::copy(format!("{VECTORS}/zarr_v2.daf.zarr.zip"), &archive).unwrap();
    let before = tmp.path().join("before.zip");
    std::fs::copy(&archive, &before).unwrap();
    let staging = crate::staging::StagingArea::for_source(&archive);
    let journal = tmp.path().join(".zarr_v2.daf.zarr.zip.daf-mount.accepted");
    let cp = |from: &Path, to: &Path| {
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(to)
            .status()
            .unwrap();
        assert!(copied.success());
    };
    // The first daemon accepts an item; what it leaves if killed before the append is kept.
    {
        let (fs, in_append, resume) = zip_with_paused_append(&archive);
        let dir = fs.resolve("zarr_v2.daf/vectors/cell").unwrap();
        for (name, bytes) in [
            ("big.json", &br#"{"format":"dense","eltype":"Float32"}"#[..]),
            ("big.data", &[1u8; 12][..]),
        ] {
            let (_, fh) = fs.create(dir, std::ffi::OsStr::new(name), false).unwrap();
            fs.write(fh, 0, bytes).unwrap();
            fs.flush(fh, None).unwrap();
            fs.release(fh);
        }
        in_append
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the append never started");
        assert!(journal.exists(), "the item was not recorded as accepted");
        cp(staging.root(), &tmp.path().join("staged.kept"));
        cp(&journal, &tmp.path().join("journal.kept"));
        resume.send(()).unwrap();
        fs.finalize("").unwrap();
    }
    std::fs::copy(&before, &archive).unwrap();
    let _ = std::fs::remove_dir_all(staging.root());
    cp(&tmp.path().join("staged.kept"), staging.root());
    cp(&tmp.path().join("journal.kept"), &journal);
    // The next daemon's recovery appends it again: held before its staged files go.
    let (fs, in_append, resume) = zip_with_paused_append(&archive);
    fs.recover();
    in_append
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("the recovery did not append the accepted item");
    let accepted = staging.accepted();
    resume.send(()).unwrap();
    fs.finalize("").unwrap();
    assert_eq!(
        accepted.len(),
        1,
        "the journal forgot the item before its append ended: {accepted:?}"
    );
    let big = fs.resolve("zarr_v2.daf/vectors/cell/big.data").unwrap();
    assert_eq!(fs.content(big).unwrap().as_slice(), [1u8; 12]);
}

/// A writable filesystem (both views) over the source at `source`, staging beside it.
pub(super) fn writable_both(source: &Path) -> DafFs {
    let opened = open_source(source.to_str().unwrap()).unwrap();
    let staging = crate::staging::StagingArea::for_source(&opened.path);
    DafFs::with_staging(
        opened.datasets,
        ViewSelection::Both,
        SystemTime::UNIX_EPOCH,
        Some(staging),
    )
}

/// The Zarr v3 view of a packed FilesDaf 1.1 directory shows every array's `zarr.json` as
/// DataAxesFormats 0.3 writes it for the same data in a ZarrDaf, byte for byte (the codecs'
/// configurations included: zstd's is its level alone), but for the documented shard shape
/// rounded up to whole inner chunks (doc/user-guide.md, "The Zarr v3 view").
#[test]
fn the_zarr_view_of_packed_files_is_what_daf_writes() {
    let packed = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");
    let opened = open_source(&format!("{packed}/files_packed.daf")).unwrap();
    let options = crate::views::ViewOptions {
        selection: ViewSelection::Zarr,
        zarr: Some(crate::formats::source::Format::ZarrV3),
        files: None,
        zip: false,
        h5df: false,
        h5ad: None,
        dimension_names: false,
        anndata: None,
    };
    let fs = DafFs::new(opened.datasets, options, SystemTime::UNIX_EPOCH);
    let mut shown = BTreeMap::new();
    walk(&fs, ROOT, "", &mut shown);
    let written = Path::new(packed).join("zarr_packed.daf.zarr");
    let mut compared = 0;
    for (path, bytes) in &shown {
        let (Some(bytes), true) = (bytes, path.ends_with("zarr.json")) else {
            continue;
        };
        let julia = std::fs::read(written.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let julia = String::from_utf8(julia).unwrap();
        let mut ours: Value = serde_json::from_slice(bytes).unwrap();
        let theirs: Value = serde_json::from_str(&julia).unwrap();
        if ours["node_type"] != "array" {
            continue;
        }
        // Stored packed on one side only (ZarrDaf packs string vectors FilesDaf keeps flat).
        if bytes.windows(16).any(|w| w == b"sharding_indexed") != julia.contains("sharding_indexed")
        {
            continue;
        }
        ours["chunk_grid"] = theirs["chunk_grid"].clone();
        let ours = serde_json::to_string(&ours).unwrap();
        assert_eq!(ours, julia, "{path}");
        compared += usize::from(julia.contains("sharding_indexed"));
    }
    assert!(compared >= 5, "only {compared} packed arrays compared");
}
