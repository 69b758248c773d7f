//! Tests of the edited trees (`edit.rs`): random changes of staged and hidden paths on
//! a small data set give the tree a build gives (checked against a twin mount that builds the
//! tree anew at every change); one change on a large tree: `edit_large_tests.rs`.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use crate::core::namespace::{Namespace, NodeKind};
use crate::core::state::{CLOCK, EDITS_OFF};
use crate::core::tests::writable_both;
use crate::core::{DafFs, ROOT};

use crate::formats::source::open_source;
use crate::staging::StagingArea;
use crate::views::ViewSelection;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

/// The FilesDaf fixtures: version 1.0 (views: FilesDaf 1.0 and Zarr v2) and 1.1 (FilesDaf 1.1,
/// with `metadata.json`, and Zarr v3).
pub(in crate::core) const FIXTURES: [&str; 2] = ["files_v1_0", "files_v1_1"];

/// A copy of the FilesDaf 1.0 fixture in `dir`, its files' times kept.
pub(in crate::core) fn copied_fixture(dir: &Path) -> std::path::PathBuf {
    copied(dir, FIXTURES[0])
}

/// A copy of the FilesDaf fixture `name` (see [`FIXTURES`]) in `dir`, its files' times kept.
pub(in crate::core) fn copied(dir: &Path, name: &str) -> std::path::PathBuf {
    let copy = dir.join(format!("{name}.daf"));
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(Path::new(VECTORS).join(format!("{name}.daf")))
        .arg(&copy)
        .status()
        .unwrap();
    assert!(copied.success());
    copy
}

/// A writable mount (both views) of a copy of the FilesDaf 1.0 fixture in `dir`.
fn writable(dir: &Path) -> DafFs {
    writable_both(&copied_fixture(dir))
}

/// A writable mount of a copy of the FilesDaf fixture `name` in `dir`: both views (`NAME.daf/`
/// and `NAME.daf.zarr/`) if `both`, else only the FilesDaf one, at the root.
fn writable_as(dir: &Path, name: &str, both: bool) -> DafFs {
    let copy = copied(dir, name);
    if both {
        return writable_both(&copy);
    }
    let opened = open_source(copy.to_str().unwrap()).unwrap();
    let staging = StagingArea::for_source(&opened.path);
    DafFs::with_staging(
        opened.datasets,
        ViewSelection::Files,
        SystemTime::UNIX_EPOCH,
        Some(staging),
    )
}

/// One node as a test compares it.
#[derive(Debug, PartialEq)]
pub(in crate::core) struct Shown {
    path: String,
    ino: u64,
    parent: u64,
    kind: String,
    mtime: SystemTime,
    subdirs: u32,
    elidable: bool,
}

/// Every node from the root, each directory's children in listing order.
pub(in crate::core) fn snapshot(ns: &Namespace) -> Vec<Shown> {
    fn walk(ns: &Namespace, ino: u64, path: String, out: &mut Vec<Shown>) {
        let node = ns.node(ino).unwrap();
        let kind = match node.kind() {
            NodeKind::Dir { .. } => "dir".to_string(),
            // Its length and a digest of its bytes (a document made of every item included).
            NodeKind::File(blob) => {
                let digest = |bytes: &[u8]| {
                    use std::hash::{Hash, Hasher};
                    let mut hasher = std::collections::hash_map::DefaultHasher::new();
                    bytes.hash(&mut hasher);
                    hasher.finish()
                };
                let content = blob.bytes().ok();
                let content = content.map(|b| (b.len(), digest(b.as_slice())));
                format!("file {content:?}")
            }
            NodeKind::Staged(disk) => format!("staged {:?}", disk.file_name()),
        };
        out.push(Shown {
            path: path.clone(),
            ino,
            parent: node.parent(),
            kind,
            mtime: ns.mtime(node),
            subdirs: ns.subdirs(ino),
            elidable: node.elidable(),
        });
        for child in ns.children(ino) {
            let child = u64::from(*child);
            let name = ns.name(child);
            let path = if path.is_empty() {
                name.to_string()
            } else {
                format!("{path}/{name}")
            };
            walk(ns, child, path, out);
        }
    }
    let mut out = Vec::new();
    walk(ns, ROOT, String::new(), &mut out);
    assert_eq!(out.len(), ns.len(), "nodes counted");
    assert_eq!(ns.nodes().count(), ns.len(), "nodes listed");
    out
}

/// A change through the mount, by indices into what the mount shows at that point.
#[derive(Clone, Debug)]
enum Op {
    Create(u8, u8),
    Mkdir(u8, u8),
    Rename(u8, u8, u8),
    Link(u8, u8, u8),
    Unlink(u8),
    Rmdir(u8),
    /// Writes a complete new item through the FilesDaf view (the close commits it): a scalar,
    /// a vector or an axis, by the first number; its name (and a vector's values) by the second.
    Commit(u8, u8),
}

const FILE_NAMES: [&str; 9] = [
    "n0.json",
    "n1.json",
    "n2.data",
    "score.json",
    "score.data",
    "title.json",
    ".zarray",
    "0",
    "name.txt",
];
const DIR_NAMES: [&str; 4] = ["m0", "m1", "gene", "score"];

/// The FilesDaf view's directory in `fs` (a mount of that view alone shows it at the root) and
/// the Zarr view's, if shown.
fn views(fs: &DafFs) -> (String, Option<String>) {
    FIXTURES
        .iter()
        .find(|name| fs.resolve(&format!("{name}.daf")).is_ok())
        .map_or((String::new(), None), |name| {
            (format!("{name}.daf/"), Some(format!("{name}.daf.zarr/")))
        })
}

/// The directories changes go to: a few fixed ones, and the directories in them.
fn dirs(fs: &DafFs) -> Vec<String> {
    let (files, zarr) = views(fs);
    let fixed = ["scalars", "vectors", "vectors/cell", "matrices/cell"];
    let fixed: Vec<String> = fixed
        .iter()
        .map(|d| format!("{files}{d}"))
        .chain(zarr.map(|zarr| format!("{zarr}vectors/cell")))
        .collect();
    let ns = fs.namespace();
    let mut out = fixed.clone();
    for dir in &fixed {
        let Ok(ino) = fs.resolve(dir) else { continue };
        for child in ns.children(ino) {
            let child = u64::from(*child);
            if ns.node(child).is_some_and(|n| n.is_dir()) {
                out.push(format!("{dir}/{}", ns.name(child)));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The files (`files`) or directories in `dirs`, as (parent inode, name).
fn entries(fs: &DafFs, dirs: &[String], files: bool) -> Vec<(u64, String)> {
    let ns = fs.namespace();
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(ino) = fs.resolve(dir) else { continue };
        for child in ns.children(ino) {
            let child = u64::from(*child);
            if ns.node(child).is_some_and(|n| n.is_dir() != files) {
                out.push((ino, ns.name(child).to_string()));
            }
        }
    }
    out
}

fn pick<T: Clone>(all: &[T], at: u8) -> Option<T> {
    (!all.is_empty()).then(|| all[usize::from(at) % all.len()].clone())
}

/// Runs `op` on `fs`; the error's kind, if any.
fn run(fs: &DafFs, op: &Op) -> Result<(), String> {
    let dirs = dirs(fs);
    let dir = |at: u8| -> Result<u64, String> {
        let dir = pick(&dirs, at).ok_or("no directory")?;
        fs.resolve(&dir).map_err(|e| format!("{e:?}"))
    };
    let files = entries(fs, &dirs, true);
    let kind = |e: crate::core::FsError| format!("{e:?}").split('(').next().unwrap().to_string();
    match *op {
        Op::Create(d, n) => {
            let (_, fh) = fs
                .create(dir(d)?, OsStr::new(FILE_NAMES[usize::from(n) % 9]), false)
                .map_err(kind)?;
            fs.release(fh);
        }
        Op::Mkdir(d, n) => {
            fs.mkdir(dir(d)?, OsStr::new(DIR_NAMES[usize::from(n) % 4]))
                .map_err(kind)?;
        }
        Op::Rename(f, d, n) => {
            let (parent, name) = pick(&files, f).ok_or("no file")?;
            let to = OsStr::new(FILE_NAMES[usize::from(n) % 9]);
            fs.rename(parent, OsStr::new(&name), dir(d)?, to)
                .map_err(kind)?;
        }
        Op::Link(f, d, n) => {
            let (parent, name) = pick(&files, f).ok_or("no file")?;
            let ino = fs.lookup(parent, OsStr::new(&name)).map_err(kind)?.ino;
            let to = OsStr::new(FILE_NAMES[usize::from(n) % 9]);
            fs.link(ino, dir(d)?, to).map_err(kind)?;
        }
        Op::Unlink(f) => {
            let (parent, name) = pick(&files, f).ok_or("no file")?;
            fs.unlink(parent, OsStr::new(&name)).map_err(kind)?;
        }
        Op::Rmdir(f) => {
            let (parent, name) = pick(&entries(fs, &dirs, false), f).ok_or("no dir")?;
            fs.rmdir(parent, OsStr::new(&name)).map_err(kind)?;
        }
        Op::Commit(what, n) => {
            let (root, _) = views(fs);
            // A vector's values: zeros (a fill: a v3 view shows no chunk) or not, so that a
            // vector committed again may gain or lose its chunk.
            let (n, value) = (n % 3, (n / 3) % 2 * (n % 3 + 1));
            let files: Vec<(String, Vec<u8>)> = match what % 3 {
                0 => vec![(
                    format!("scalars/c{n}.json"),
                    format!("{{\"type\":\"Int64\",\"value\":{n}}}").into_bytes(),
                )],
                1 => vec![
                    (
                        format!("vectors/cell/c{n}.json"),
                        b"{\"format\":\"dense\",\"eltype\":\"Float32\"}".to_vec(),
                    ),
                    (format!("vectors/cell/c{n}.data"), vec![value; 12]),
                ],
                _ => vec![(format!("axes/a{n}.txt"), b"x\ny\n".to_vec())],
            };
            for (path, content) in files {
                let (dir, name) = path.rsplit_once('/').unwrap();
                let dir = fs
                    .resolve(&format!("{root}{dir}"))
                    .map_err(|e| format!("{e:?}"))?;
                let (_, fh) = fs.create(dir, OsStr::new(name), false).map_err(kind)?;
                let written = fs.write(fh, 0, &content).map_err(kind);
                let flushed = fs.flush(fh, None).map_err(kind);
                fs.release(fh);
                written?;
                flushed?;
            }
        }
    }
    Ok(())
}

fn op() -> impl Strategy<Value = Op> {
    let n = any::<u8>;
    prop_oneof![
        3 => (n(), n()).prop_map(|(a, b)| Op::Create(a, b)),
        1 => (n(), n()).prop_map(|(a, b)| Op::Mkdir(a, b)),
        2 => (n(), n(), n()).prop_map(|(a, b, c)| Op::Rename(a, b, c)),
        1 => (n(), n(), n()).prop_map(|(a, b, c)| Op::Link(a, b, c)),
        3 => n().prop_map(Op::Unlink),
        1 => n().prop_map(Op::Rmdir),
    ]
}

/// [`op`], and commits of new items.
fn op_or_commit() -> impl Strategy<Value = Op> {
    let n = any::<u8>;
    prop_oneof![
        3 => op(),
        2 => (n(), n()).prop_map(|(a, b)| Op::Commit(a, b)),
    ]
}

/// The time staged paths get at a step: some before the fixture's files, some after, some
/// equal to the previous step's (ties).
fn time(at: u8) -> SystemTime {
    let secs = [
        1_000_000_000,
        1_000_000_001,
        2_000_000_000,
        2_100_000_000,
        2_100_000_000,
    ];
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs[usize::from(at) % secs.len()])
}

/// Runs `op` on the edited mount and on its twin that builds anew, at `now`.
fn run_both(edited: &DafFs, built: &DafFs, op: &Op, now: SystemTime) {
    CLOCK.with(|c| c.set(Some(now)));
    let a = run(edited, op);
    EDITS_OFF.with(|o| o.set(true));
    let b = run(built, op);
    EDITS_OFF.with(|o| o.set(false));
    CLOCK.with(|c| c.set(None));
    assert_eq!(a, b, "{op:?}: answers differ");
}

/// Runs `ops` on an edited mount of fixture `name` (both views if `both`, else the FilesDaf view
/// alone) and on its twin that builds anew at every change; after each, the edited tree must be
/// the tree a build of the same state gives, and the twin's.
fn edited_is_built(ops: &[(Op, u8)], name: &str, both: bool) -> Result<(), TestCaseError> {
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (edited, built) = (
        writable_as(one.path(), name, both),
        writable_as(two.path(), name, both),
    );
    // File times come from the kernel's coarse clock, which may lag `now` by a tick.
    let started = SystemTime::now() - Duration::from_secs(1);
    {
        {
            for (step, (op, at)) in ops.iter().enumerate() {
                run_both(&edited, &built, op, time(*at));
                // The same state built anew: the same tree, exactly.
                let state = edited.read_state();
                let rebuilt = state.build(&mut state.inodes.clone());
                let (a, b) = (snapshot(&state.namespace), snapshot(&rebuilt));
                for (x, y) in a.iter().zip(&b) {
                    prop_assert_eq!(x, y, "step {}: {:?}", step, op);
                }
                prop_assert_eq!(a.len(), b.len(), "step {}: {:?}", step, op);
                // The twin that built anew at every change: the same numbers too. Times a commit
                // or a deletion took from the clock (disk files, not the staged times the test
                // sets) differ between the twins.
                let twin = built.read_state();
                let real = |t: SystemTime| t >= started && t < started + Duration::from_secs(3600);
                let mut c = snapshot(&twin.namespace);
                for (x, y) in a.iter().zip(&mut c) {
                    if real(x.mtime) && real(y.mtime) {
                        y.mtime = x.mtime;
                    }
                    prop_assert_eq!(x, &*y, "step {}: {:?}", step, op);
                }
                prop_assert_eq!(a.len(), c.len(), "step {}: {:?}", step, op);
                prop_assert_eq!(state.inodes.next(), twin.inodes.next(), "numbers given");
                prop_assert_eq!(
                    state.inodes.kept_apart(),
                    twin.inodes.kept_apart(),
                    "numbers kept apart"
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn edited_trees_are_the_trees_a_build_gives(
        ops in prop::collection::vec((op(), any::<u8>()), 1..14)
    ) {
        edited_is_built(&ops, FIXTURES[0], true)?;
    }

    /// Commits too, into either fixture (FilesDaf 1.0 and Zarr v2, FilesDaf 1.1 and Zarr v3),
    /// with the FilesDaf view alone or both.
    #[test]
    fn trees_edited_by_commits_are_the_trees_a_build_gives(
        ops in prop::collection::vec((op_or_commit(), any::<u8>()), 1..14),
        fixture in 0..FIXTURES.len(),
        both_views in any::<bool>(),
    ) {
        edited_is_built(&ops, FIXTURES[fixture], both_views)?;
    }
}

/// Reads another file of `fs` on a thread of its own: whether it was served whole within 10 s
/// (`Err` if not), and the thread.
fn read_meanwhile(
    fs: &std::sync::Arc<DafFs>,
) -> (
    Result<bool, std::sync::mpsc::RecvTimeoutError>,
    std::thread::JoinHandle<()>,
) {
    let (served, done) = std::sync::mpsc::channel();
    let reader = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let ino = fs.resolve("files_v1_0.daf/scalars/title.json").unwrap();
            let size = fs.getattr(ino).unwrap().size;
            let read = fs.read(ino, 0, 0, 4096).unwrap().len();
            let _ = served.send(size == read);
        })
    };
    (done.recv_timeout(Duration::from_secs(10)), reader)
}

/// A change of a staged path (here a create) works out its edited tree under the state lock taken
/// shared: a read of another file is served while that is paused, and the new file is shown
/// once it resumes.
#[test]
fn reads_go_on_while_a_change_edits_the_tree() {
    use std::sync::mpsc::channel;
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let fs = Arc::new(writable(tmp.path()));
    let (paused, edit_paused) = channel();
    let (resume, resumed) = channel();
    *crate::stores::lock(&fs.read_state().edit_pause) = Some((paused, resumed));
    let scalars = fs.resolve("files_v1_0.daf/scalars").unwrap();
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let (_, fh) = fs.create(scalars, OsStr::new("new.json"), false).unwrap();
            fs.release(fh);
        })
    };
    edit_paused
        .recv_timeout(Duration::from_secs(60))
        .expect("the create edits the tree");
    let (answer, reader) = read_meanwhile(&fs);
    assert!(fs.resolve("files_v1_0.daf/scalars/new.json").is_err());
    resume.send(()).unwrap();
    writer.join().unwrap();
    reader.join().unwrap();
    assert_eq!(answer, Ok(true), "a read waited for the edit of the tree");
    assert!(fs.resolve("files_v1_0.daf/scalars/new.json").is_ok());
}

/// A commit works out its new tree (its edits, or a build) under the state lock taken shared, its
/// edits at the lowest priority: a read of another file is served while that is paused, before it
/// resumes.
#[test]
fn reads_go_on_while_a_commit_builds_its_tree() {
    use std::sync::mpsc::channel;
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let fs = Arc::new(writable(tmp.path()));
    let (paused, build_paused) = channel();
    let (resume, resumed) = channel();
    *crate::stores::lock(&fs.read_state().build_pause) = Some((paused, resumed));
    let axes = fs.resolve("files_v1_0.daf/axes").unwrap();
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let (_, fh) = fs.create(axes, OsStr::new("new.txt"), false).unwrap();
            fs.write(fh, 0, b"a\nb\n").unwrap();
            // Complete: the close commits the axis, and works out its new tree.
            fs.flush(fh, None).unwrap();
            fs.release(fh);
        })
    };
    build_paused
        .recv_timeout(Duration::from_secs(60))
        .expect("the commit builds a tree");
    // Meanwhile, the commit works out its edits on a thread of its own at the lowest priority.
    let committers: Vec<_> = crate::core::changes::commit_tests::threads_named("daf-commit")
        .into_iter()
        .map(crate::sys::thread_priority)
        .collect();
    let (answer, reader) = read_meanwhile(&fs);
    resume.send(()).unwrap();
    writer.join().unwrap();
    reader.join().unwrap();
    assert_eq!(answer, Ok(true), "a read waited for the build of a tree");
    assert!(fs.resolve("files_v1_0.daf.zarr/axes/new").is_ok());
    assert!(
        committers.contains(&(libc::SCHED_IDLE, (2 << 13) | 7)),
        "{committers:?}"
    );
}

/// Commits into a ZIP source edit the tree twice (at the close, and when the append's entries
/// replace the staged ones): each time it is the tree a build of the state gives.
#[test]
fn commits_into_a_zip_source_give_the_tree_a_build_gives() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("zarr_v2.daf.zarr.zip");
    std::fs::copy(Path::new(VECTORS).join("zarr_v2.daf.zarr.zip"), &archive).unwrap();
    let opened = open_source(archive.to_str().unwrap()).unwrap();
    let staging = StagingArea::for_source(&opened.path);
    let fs = DafFs::with_staging(
        opened.datasets,
        ViewSelection::Files,
        SystemTime::UNIX_EPOCH,
        Some(staging),
    );
    let same_as_built = |when: &str| {
        let state = fs.read_state();
        let rebuilt = state.build(&mut state.inodes.clone());
        assert_eq!(snapshot(&state.namespace), snapshot(&rebuilt), "{when}");
    };
    let scalars = fs.resolve("scalars").unwrap();
    let (_, fh) = fs.create(scalars, OsStr::new("new.json"), false).unwrap();
    fs.write(fh, 0, b"{\"type\":\"Int64\",\"value\":7}")
        .unwrap();
    fs.flush(fh, None).unwrap();
    fs.release(fh);
    same_as_built("at the close");
    fs.finalize("").unwrap();
    same_as_built("after the append");
    let ino = fs.resolve("scalars/new.json").unwrap();
    assert!(matches!(
        fs.namespace().node(ino).unwrap().kind(),
        NodeKind::File(_)
    ));
    let opened = open_source(archive.to_str().unwrap()).unwrap();
    assert!(opened.datasets[0].dataset.scalars.contains_key("new"));
}

/// A vector of fill values committed into a Zarr v3 ZIP: staged, the Zarr view shows its chunk
/// (`c/0`); appended, the archive keeps no chunk (as Julia writes it), so the append's swap takes
/// the chunk and the directory `c/` out. Both are edits (the documents made of every item keep
/// their base: no view was rendered whole), each time the tree a build of the state gives.
#[test]
fn an_append_that_drops_a_fill_chunk_is_an_edit() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("zarr_v3.daf.zarr.zip");
    std::fs::copy(Path::new(VECTORS).join("zarr_v3.daf.zarr.zip"), &archive).unwrap();
    let fs = writable_both(&archive);
    let same_as_built = |when: &str| {
        let state = fs.read_state();
        let rebuilt = state.build(&mut state.inodes.clone());
        assert_eq!(snapshot(&state.namespace), snapshot(&rebuilt), "{when}");
    };
    let bases = || {
        let ns = fs.namespace();
        ["zarr_v3.daf.zarr/zarr.json", "zarr_v3.daf/metadata.json"].map(|path| {
            match ns.node(fs.resolve(path).unwrap()).unwrap().kind() {
                NodeKind::File(blob) => crate::views::document_base(blob).unwrap(),
                _ => panic!("{path} is not a file"),
            }
        })
    };
    let before = bases();
    let cell = fs.resolve("zarr_v3.daf/vectors/cell").unwrap();
    let descriptor = b"{\"format\":\"dense\",\"eltype\":\"Float32\"}";
    for (name, content) in [("z.json", &descriptor[..]), ("z.data", &[0; 12][..])] {
        let (_, fh) = fs.create(cell, OsStr::new(name), false).unwrap();
        fs.write(fh, 0, content).unwrap();
        fs.flush(fh, None).unwrap();
        fs.release(fh);
    }
    let chunk = "zarr_v3.daf.zarr/vectors/cell/z/c/0";
    assert!(fs.resolve(chunk).is_ok(), "staged: the chunk is shown");
    same_as_built("at the close");
    fs.finalize("").unwrap();
    assert!(fs.resolve(chunk).is_err(), "appended: no chunk");
    assert!(fs.resolve("zarr_v3.daf.zarr/vectors/cell/z/c").is_err());
    assert!(fs
        .resolve("zarr_v3.daf.zarr/vectors/cell/z/zarr.json")
        .is_ok());
    same_as_built("after the append");
    assert_eq!(bases(), before, "a view was rendered whole");
}

/// A writer unlinking a committed Zarr chunk commits its item (the chunk now holds fill
/// values) while the other view stages a file of that item: the staged file stays on top, as
/// in a build (the commit's edit replaced it with the committed file).
#[test]
fn a_commit_keeps_another_views_staged_file_of_the_item_on_top() {
    let ops = [
        (Op::Mkdir(13, 0), 73),
        (Op::Create(78, 0), 0),
        // files_v1_0.daf/vectors/cell/score.json, staged over the committed one.
        (Op::Create(154, 210), 0),
        // files_v1_0.daf.zarr/vectors/cell/score/0: a commit of `score`.
        (Op::Unlink(38), 0),
    ];
    edited_is_built(&ops, FIXTURES[0], true).unwrap();
}
