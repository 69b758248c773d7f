//! Every operation the core serves, at every step where a commit lets other requests in (it
//! releases the state lock, or holds it only shared: [`super::steps`]), on the committed item's
//! own files, a sibling's files and every directory, through both views, for each layout in a
//! directory source and in a ZIP source. Each answers within a bound, with one consistent
//! version (what the tree showed before the commit, or what it shows after: never an error for a
//! file that exists on both sides), the closes that commit are answered, and the source then
//! opens with every acknowledged byte in it.
//!
//! The steps are not listed here: a first run of each commit records the steps it reaches, and
//! each (step, occurrence) is then held in a run of its own for each operation.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

#[path = "steps_changes.rs"]
mod changes;

use changes::{close, documented, Change, Ctx, CHANGES};

use super::steps;
use super::tests::writable_both;
use super::{DafFs, FsError, Kind, ROOT};
use crate::formats::source::open_source;
use crate::views::ViewSelection;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

/// How long an operation may take once a commit it waits for goes on.
const BOUND: Duration = Duration::from_secs(10);

/// Every path of a tree: `None` for a directory, the bytes of a file.
type Tree = BTreeMap<String, Option<Vec<u8>>>;

/// The view a new item is written through.
#[derive(Clone, Copy, Debug)]
enum Through {
    Files,
    Zarr,
}

/// A writable mount of a copy of a fixture, with a new vector `fresh` (a copy of `score`) written
/// through one view, its files still open (their closes commit it), and a staged file of
/// another item that is not complete (`other.json`).
struct Setup {
    _tmp: tempfile::TempDir,
    source: PathBuf,
    fs: Arc<DafFs>,
    name: String,
    /// The written files: mount path and open handle.
    written: Vec<(String, u64)>,
}

fn setup(fixture: &str, through: Through) -> Setup {
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join(fixture);
    let from = Path::new(VECTORS).join(fixture);
    if from.is_dir() {
        let copied = std::process::Command::new("cp")
            .arg("-r")
            .arg(&from)
            .arg(tmp.path())
            .status()
            .unwrap();
        assert!(copied.success());
    } else {
        std::fs::copy(&from, &source).unwrap();
    }
    let fs = Arc::new(writable_both(&source));
    let name = fixture.split('.').next().unwrap().to_string();
    let mut written = Vec::new();
    let cell = format!("{name}.daf/vectors/cell");
    match through {
        Through::Files => {
            let dir = fs.resolve(&cell).unwrap();
            for entry in fs.readdir(dir, 2, usize::MAX).unwrap() {
                if let Some(ext) = entry.name.strip_prefix("score.") {
                    let bytes = fs.content(entry.ino).unwrap().as_slice().to_vec();
                    let new = format!("fresh.{ext}");
                    written.push(write_open(&fs, dir, &cell, &new, &bytes));
                }
            }
        }
        Through::Zarr => {
            let cell = format!("{name}.daf.zarr/vectors/cell");
            let parent = fs.resolve(&cell).unwrap();
            let score = fs.resolve(&format!("{cell}/score")).unwrap();
            copy_dir(&fs, score, parent, &cell, "fresh", &mut written);
        }
    }
    assert!(!written.is_empty(), "{fixture}: nothing to write");
    let dir = fs.resolve(&cell).unwrap();
    let (_, other) = fs.create(dir, OsStr::new("other.json"), false).unwrap();
    fs.write(other, 0, br#"{"format":"dense","eltype":"Float32"}"#)
        .unwrap();
    fs.flush(other, None).unwrap();
    fs.release(other);
    Setup {
        _tmp: tmp,
        source,
        fs,
        name,
        written,
    }
}

/// Creates `name` in directory `dir` (mount path `at`) with `bytes`, left open.
fn write_open(fs: &DafFs, dir: u64, at: &str, name: &str, bytes: &[u8]) -> (String, u64) {
    let (_, fh) = fs.create(dir, OsStr::new(name), false).unwrap();
    fs.write(fh, 0, bytes).unwrap();
    (format!("{at}/{name}"), fh)
}

/// Copies directory `from` into `parent` (mount path `at`) as `name`, its files left open.
fn copy_dir(
    fs: &DafFs,
    from: u64,
    parent: u64,
    at: &str,
    name: &str,
    written: &mut Vec<(String, u64)>,
) {
    let dir = fs.mkdir(parent, OsStr::new(name)).unwrap().ino;
    let at = format!("{at}/{name}");
    for entry in fs.readdir(from, 2, usize::MAX).unwrap() {
        match entry.kind {
            Kind::Dir => copy_dir(fs, entry.ino, dir, &at, &entry.name, written),
            Kind::File => {
                let bytes = fs.content(entry.ino).unwrap().as_slice().to_vec();
                written.push(write_open(fs, dir, &at, &entry.name, &bytes));
            }
        }
    }
}

/// Every path of the mount, as its files read through handles.
fn snapshot(fs: &DafFs) -> Tree {
    let mut tree = Tree::new();
    let mut dirs = vec![(ROOT, String::new())];
    while let Some((ino, at)) = dirs.pop() {
        for entry in fs.readdir(ino, 2, usize::MAX).unwrap() {
            let path = if at.is_empty() {
                entry.name.clone()
            } else {
                format!("{at}/{}", entry.name)
            };
            match entry.kind {
                Kind::Dir => {
                    tree.insert(path.clone(), None);
                    dirs.push((entry.ino, path));
                }
                Kind::File => {
                    let bytes = read_whole(fs, entry.ino).unwrap_or_else(|e| panic!("{path}: {e}"));
                    tree.insert(path, Some(bytes));
                }
            }
        }
    }
    tree
}

/// The whole of file `ino`, through a handle of its own.
fn read_whole(fs: &DafFs, ino: u64) -> Result<Vec<u8>, FsError> {
    let fh = fs.open(ino, false, false)?;
    let mut bytes = Vec::new();
    let read = loop {
        match fs.read(ino, fh, bytes.len() as u64, 1 << 20) {
            Ok(chunk) if chunk.is_empty() => break Ok(()),
            Ok(chunk) => bytes.extend_from_slice(chunk.as_slice()),
            Err(e) => break Err(e),
        }
    };
    fs.flush(fh, None)?;
    fs.release(fh);
    read.map(|()| bytes)
}

/// The names in directory `dir` of `tree`.
fn names(tree: &Tree, dir: &str) -> BTreeSet<String> {
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    tree.keys()
        .filter_map(|p| p.strip_prefix(&prefix))
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
        .map(str::to_string)
        .collect()
}

/// What one look at a path found while the commit was held.
#[derive(Debug)]
enum Seen {
    File(Result<(u64, Vec<u8>), String>),
    Dir(Result<(BTreeSet<String>, BTreeMap<String, u64>), String>),
}

/// Looks at every path of `paths` as a reader would: lookup, getattr, open, read, release for a
/// file; readdir and readdirplus for a directory.
fn look(fs: &DafFs, paths: &[(String, bool)]) -> Vec<(String, Seen)> {
    let error = |e: FsError| format!("{e:?}");
    paths
        .iter()
        .map(|(path, is_dir)| {
            let seen = if *is_dir {
                let listed = fs.resolve(path).and_then(|ino| {
                    let plain: BTreeSet<String> = fs
                        .readdir(ino, 2, usize::MAX)?
                        .into_iter()
                        .map(|e| e.name)
                        .collect();
                    let mut plus = BTreeMap::new();
                    fs.list_page(ino, 2, usize::MAX, true, |e| {
                        plus.insert(e.name.to_string(), e.attr.map_or(0, |a| a.size));
                        false
                    })?;
                    Ok((plain, plus))
                });
                Seen::Dir(listed.map_err(error))
            } else {
                let read = fs.resolve(path).and_then(|ino| {
                    let size = fs.getattr(ino)?.size;
                    Ok((size, read_whole(fs, ino)?))
                });
                Seen::File(read.map_err(error))
            };
            (path.clone(), seen)
        })
        .collect()
}

/// Whether mount path `path` is a file of the item being committed or of the staged sibling, or
/// a directory holding them.
fn of_item(path: &str) -> bool {
    path.contains("fresh") || path.contains("other") || path.ends_with("vectors/cell")
}

/// What is wrong with `seen` at `path`, given the trees before and after the commit. `changed`:
/// a change was made beside the readers, so the bytes and listings of what it may change (the
/// item's files and directories) are not judged, nor their absence, only that they are served
/// without an error of another kind.
fn judge(path: &str, seen: &Seen, before: &Tree, after: &Tree, changed: bool) -> Option<String> {
    let sides = [before, after];
    match seen {
        Seen::File(Ok(_)) | Seen::Dir(Ok(_)) if changed && of_item(path) => None,
        // The change may have removed or moved it, and the commit or the finalize made it again.
        Seen::File(Err(e)) | Seen::Dir(Err(e)) if changed && of_item(path) && e == "NotFound" => {
            None
        }
        Seen::File(Ok((size, bytes))) => {
            let matches = sides.iter().any(|t| {
                t.get(path)
                    .is_some_and(|b| b.as_deref() == Some(&bytes[..]))
            });
            if !matches {
                return Some(format!("{path}: {} bytes, neither version", bytes.len()));
            }
            (*size != bytes.len() as u64)
                .then(|| format!("{path}: st_size {size}, {} bytes read", bytes.len()))
        }
        Seen::Dir(Ok((plain, plus))) => {
            let listed = sides.iter().any(|t| names(t, path) == *plain);
            if !listed {
                return Some(format!("{path}: listed {plain:?}, neither version"));
            }
            let plus_names: BTreeSet<String> = plus.keys().cloned().collect();
            if !sides.iter().any(|t| names(t, path) == plus_names) {
                return Some(format!(
                    "{path}: readdirplus {plus_names:?}, neither version"
                ));
            }
            plus.iter().find_map(|(name, size)| {
                let child = format!("{path}/{name}");
                let fits = sides.iter().any(|t| match t.get(&child) {
                    Some(Some(bytes)) => bytes.len() as u64 == *size,
                    Some(None) => true,
                    None => false,
                });
                (!fits).then(|| format!("{child}: readdirplus size {size}, neither version"))
            })
        }
        Seen::File(Err(e)) | Seen::Dir(Err(e)) => {
            let on_both = sides.iter().all(|t| t.contains_key(path));
            on_both.then(|| format!("{path}: {e}, though it exists before and after"))
        }
    }
}

/// Closes the written files on a thread of its own: the last close commits the item.
fn close_all(setup: &Setup) -> JoinHandle<Vec<Result<(), FsError>>> {
    let fs = setup.fs.clone();
    let handles: Vec<u64> = setup.written.iter().map(|(_, fh)| *fh).collect();
    std::thread::spawn(move || handles.into_iter().map(|fh| close(&fs, fh)).collect())
}

/// Waits at most `bound` for `thread`.
fn join_within<T: Send + 'static>(thread: JoinHandle<T>, bound: Duration, what: &str) -> T {
    let (done, finished) = channel();
    let waiter = std::thread::spawn(move || {
        let _ = done.send(thread.join());
    });
    let joined = finished
        .recv_timeout(bound)
        .unwrap_or_else(|_| panic!("{what}: no answer within {bound:?}"));
    waiter.join().unwrap();
    joined.unwrap_or_else(|_| panic!("{what}: panicked"))
}

/// The steps a commit of `fresh` through `through` reaches, with their occurrences, in order.
fn steps_of(fixture: &str, through: Through) -> Vec<(&'static str, usize)> {
    let setup = setup(fixture, through);
    drop(setup.fs.read_state().steps.pause_at(None));
    let closes = join_within(close_all(&setup), BOUND, "the closes");
    assert!(closes.iter().all(Result::is_ok), "{closes:?}");
    setup.fs.finalize("").unwrap();
    let mut counted: BTreeMap<&str, usize> = BTreeMap::new();
    let reached = setup.fs.read_state().steps.reached();
    reached
        .into_iter()
        .map(|step| {
            let n = counted.entry(step).or_default();
            *n += 1;
            (step, *n - 1)
        })
        .collect()
}

/// One run: the commit held at `at` while the readers look at every path, and `change` (if any)
/// is made; then every check.
fn held_at(fixture: &str, through: Through, at: (&'static str, usize), change: Option<&Change>) {
    let what = format!(
        "{fixture} through {through:?}, held at {at:?}, {}",
        change.map_or("readers only", |c| c.name)
    );
    let setup = setup(fixture, through);
    let fs = setup.fs.clone();
    let ctx = Ctx {
        name: setup.name.clone(),
        item_file: setup.written[0].0.clone(),
    };
    let prepared = change.and_then(|c| (c.prepare)(&setup));
    let before = snapshot(&fs);
    let (paused, resume) = fs.read_state().steps.pause_at(Some(at));
    let closer = close_all(&setup);
    paused
        .recv_timeout(BOUND)
        .unwrap_or_else(|_| panic!("{what}: the commit never reached the step"));
    // An append's steps run on the append thread: the close that queued it is answered first.
    let closer = match at.0 {
        steps::APPEND_WRITTEN | steps::APPEND_DROPPING => {
            let closes = join_within(closer, BOUND, &format!("{what}: the closes"));
            std::thread::spawn(move || closes)
        }
        _ => closer,
    };
    // Readers of what the commit does not change are served while it is held; the others may
    // wait for it.
    let unrelated: Vec<(String, bool)> = before
        .iter()
        .filter(|(p, _)| !of_item(p))
        .map(|(p, b)| (p.clone(), b.is_none()))
        .collect();
    let rest: Vec<(String, bool)> = before
        .iter()
        .filter(|(p, _)| of_item(p))
        .map(|(p, b)| (p.clone(), b.is_none()))
        .collect();
    let spawn_look = |paths: Vec<(String, bool)>| {
        let fs = fs.clone();
        std::thread::spawn(move || look(&fs, &paths))
    };
    let (quick, waiting) = (spawn_look(unrelated), spawn_look(rest));
    let changing = change.map(|c| {
        let (fs, ctx, run) = (fs.clone(), ctx.clone(), c.run);
        std::thread::spawn(move || run(&fs, &ctx, prepared))
    });
    let quick = join_within(quick, BOUND, &format!("{what}: readers of other files"));
    resume.send(()).unwrap();
    let waiting = join_within(waiting, BOUND, &format!("{what}: readers of the item"));
    let changed = changing.map(|t| join_within(t, BOUND, &format!("{what}: the change")));
    let closes = join_within(closer, BOUND, &format!("{what}: the closes"));
    let finalized = fs.finalize("");
    let after = snapshot(&fs);
    let mut wrong: Vec<String> = quick
        .iter()
        .chain(&waiting)
        .filter_map(|(path, seen)| judge(path, seen, &before, &after, change.is_some()))
        .collect();
    if let (Some(changed), Some(change)) = (&changed, change) {
        let absent = change.may_be_absent && matches!(changed, Err(FsError::NotFound));
        if !documented(changed) && !absent {
            wrong.push(format!("the change answered {changed:?}"));
        }
    }
    wrong.extend(
        closes
            .iter()
            .chain([&finalized])
            .filter(|r| !documented(r))
            .map(|r| format!("a close or the finalize answered {r:?}")),
    );
    if change.is_none() {
        wrong.extend(
            closes
                .iter()
                .filter(|r| r.is_err())
                .map(|r| format!("a close answered {r:?}")),
        );
    }
    // The source opens with the item's bytes (unless the change changed it) and the others'.
    drop(setup.fs);
    drop(fs);
    let reopened = open_source(setup.source.to_str().unwrap())
        .unwrap_or_else(|e| panic!("{what}: the source no longer opens: {e}"));
    let remounted = snapshot(&DafFs::new(
        reopened.datasets,
        ViewSelection::Both,
        SystemTime::UNIX_EPOCH,
    ));
    let kept = |p: &&String| {
        let files = format!("{}.daf/vectors/cell/", setup.name);
        let item_too = !change.is_some_and(|c| c.touches_item);
        p.starts_with(&files) && (p.contains("score.data") || (item_too && p.contains("fresh.")))
    };
    for path in after.keys().filter(kept) {
        if remounted.get(path) != after.get(path) {
            wrong.push(format!("{path}: not as acknowledged after a remount"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{what} (the change answered {changed:?}, the closes {closes:?}):\n{}",
        wrong.join("\n")
    );
}

/// Every operation at every step of a commit of a new vector into `fixture` through `through`.
fn every_operation_at_every_step(fixture: &str, through: Through) {
    let steps = steps_of(fixture, through);
    let names: BTreeSet<&str> = steps.iter().map(|(s, _)| *s).collect();
    let expected: &[&str] = match fixture.ends_with(".zip") {
        true => &[
            steps::EDITS_WORKED_OUT,
            steps::APPEND_WRITTEN,
            steps::APPEND_DROPPING,
        ],
        false => &[
            steps::PAYLOADS_WRITTEN,
            steps::STAGED_DROPPED,
            steps::EDITS_WORKED_OUT,
            steps::SWAPPED,
        ],
    };
    for step in expected {
        assert!(
            names.contains(step),
            "{fixture}: {step} not reached: {steps:?}"
        );
    }
    for at in &steps {
        held_at(fixture, through, *at, None);
        for change in CHANGES {
            held_at(fixture, through, *at, Some(change));
        }
    }
}

macro_rules! every_step {
    ($($test:ident: $fixture:literal, $through:ident;)*) => {$(
        #[test]
        fn $test() {
            every_operation_at_every_step($fixture, Through::$through);
        }
    )*};
}

every_step! {
    files_1_0_dir_through_files: "files_v1_0.daf", Files;
    files_1_0_dir_through_zarr: "files_v1_0.daf", Zarr;
    files_1_1_dir_through_files: "files_v1_1.daf", Files;
    files_1_1_dir_through_zarr: "files_v1_1.daf", Zarr;
    zarr_v2_dir_through_files: "zarr_v2.daf.zarr", Files;
    zarr_v2_dir_through_zarr: "zarr_v2.daf.zarr", Zarr;
    zarr_v3_dir_through_files: "zarr_v3.daf.zarr", Files;
    zarr_v3_dir_through_zarr: "zarr_v3.daf.zarr", Zarr;
    zarr_v2_zip_through_files: "zarr_v2.daf.zarr.zip", Files;
    zarr_v2_zip_through_zarr: "zarr_v2.daf.zarr.zip", Zarr;
    zarr_v3_zip_through_files: "zarr_v3.daf.zarr.zip", Files;
    zarr_v3_zip_through_zarr: "zarr_v3.daf.zarr.zip", Zarr;
    zipdaf_1_0_through_files: "zipdaf_v1_0.daf.zip", Files;
    zipdaf_1_0_through_zarr: "zipdaf_v1_0.daf.zip", Zarr;
    zipdaf_1_1_through_files: "zipdaf_v1_1.daf.zip", Files;
    zipdaf_1_1_through_zarr: "zipdaf_v1_1.daf.zip", Zarr;
}
