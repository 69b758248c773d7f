//! Core tests of commits into a directory source while other requests run: reads never wait
//! for a commit's copy, and what changed meanwhile is not committed over.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use crate::core::tests::writable_both;
use crate::core::{DafFs, FsError};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

/// A writable mount (both views) of a copy of the FilesDaf 1.0 fixture: the temporary directory,
/// the copy, the filesystem.
fn writable_copy() -> (tempfile::TempDir, PathBuf, Arc<DafFs>) {
    let tmp = tempfile::tempdir().unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(format!("{VECTORS}/files_v1_0.daf"))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let source = tmp.path().join("files_v1_0.daf");
    let fs = Arc::new(writable_both(&source));
    (tmp, source, fs)
}

/// Makes the next commit into the directory source pause once its files are written (before the
/// swap): it says so on the receiver, and goes on when the sender says.
fn pause_commits(fs: &DafFs) -> (Receiver<()>, Sender<()>) {
    let (paused, in_commit) = channel();
    let (resume, resumed) = channel();
    *fs.commit_pause.lock().unwrap() = Some((paused, resumed));
    (in_commit, resume)
}

/// Writes the dense Float32 property `big` (payload `data`) into directory `dir` on another
/// thread: its last close commits it; the thread returns that close's outcome.
fn write_big(
    fs: &Arc<DafFs>,
    dir: u64,
    data: Vec<u8>,
) -> std::thread::JoinHandle<Result<(), FsError>> {
    let fs = fs.clone();
    std::thread::spawn(move || {
        let (_, json) = fs.create(dir, OsStr::new("big.json"), false).unwrap();
        fs.write(json, 0, br#"{"format":"dense","eltype":"Float32"}"#)
            .unwrap();
        fs.flush(json, None).unwrap();
        fs.release(json);
        let (_, fh) = fs.create(dir, OsStr::new("big.data"), false).unwrap();
        fs.write(fh, 0, &data).unwrap();
        let closed = fs.flush(fh, None);
        fs.release(fh);
        closed
    })
}

#[test]
fn reads_go_on_while_a_commit_writes_its_payloads() {
    let (tmp, source, fs) = writable_copy();
    let (in_commit, resume) = pause_commits(&fs);
    // A new dense property of the 3 cells: its close commits it, and the commit pauses.
    let dir = fs.resolve("files_v1_0.daf/vectors/cell").unwrap();
    let committer = write_big(&fs, dir, vec![0u8; 12]);
    in_commit
        .recv_timeout(Duration::from_secs(60))
        .expect("the commit never started");
    // Meanwhile, another thread looks up, opens and reads other files.
    let (done, finished) = channel();
    let reader = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let dir = fs.resolve("files_v1_0.daf/vectors/cell").unwrap();
            let attr = fs.lookup(dir, OsStr::new("score.data")).unwrap();
            let fh = fs.open(attr.ino, false, false).unwrap();
            let bytes = fs.read(attr.ino, fh, 0, 4096).unwrap();
            fs.release(fh);
            let zarr = fs
                .resolve("files_v1_0.daf.zarr/vectors/cell/score/.zarray")
                .unwrap();
            let document = fs.content(zarr).unwrap().as_slice().to_vec();
            // The item itself is still its staged files until the swap.
            let big = fs.resolve("files_v1_0.daf/vectors/cell/big.data").unwrap();
            let big = fs.content(big).unwrap().as_slice().to_vec();
            let _ = done.send((bytes.as_slice().to_vec(), document, big));
        })
    };
    let read = finished.recv_timeout(Duration::from_secs(10));
    // Not yet swapped in: the source has no such property while the commit writes.
    let swapped_early = source.join("vectors/cell/big.data").exists();
    let staged = tmp
        .path()
        .join(".files_v1_0.daf.daf-mount/files_v1_0.daf/vectors/cell/big.data");
    let staged_ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&staged).unwrap());
    resume.send(()).unwrap();
    let committed = committer.join().unwrap();
    reader.join().unwrap();
    let (bytes, document, big) = read.expect("a read waited for the commit to end");
    assert_eq!(big, [0u8; 12]);
    assert!(
        !swapped_early,
        "the payload was in the source before the swap"
    );
    assert_eq!(
        bytes,
        std::fs::read(source.join("vectors/cell/score.data")).unwrap()
    );
    assert!(document.starts_with(b"{"));
    committed.unwrap();
    let committed = source.join("vectors/cell/big.data");
    assert_eq!(std::fs::read(&committed).unwrap(), [0u8; 12]);
    // Staging and source share a file system: the staged payload was renamed into the source at
    // the swap (not copied), and moved, so no second name of it is left staged (a crash would
    // have it alias the source).
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&committed).unwrap());
    assert_eq!(ino, staged_ino, "the payload was copied, not renamed");
    assert!(!staged.exists(), "the committed payload is still staged");
    let big = fs.resolve("files_v1_0.daf.zarr/vectors/cell/big/.zarray");
    assert!(big.is_ok(), "the committed property is not shown");
}

/// The records of swaps beside the staging area of the source in `tmp`.
fn records(tmp: &std::path::Path) -> Vec<PathBuf> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().contains(".daf-mount.moves"))
        .collect()
}

#[test]
fn a_swap_s_record_is_made_before_the_lock_and_a_crash_at_each_point_is_recovered() {
    let (tmp, source, fs) = writable_copy();
    let (in_commit, resume) = pause_commits(&fs);
    let (paused, in_finish) = channel();
    let (resume_finish, finish_resumed) = channel();
    *fs.finish_pause.lock().unwrap() = Some((paused, finish_resumed));
    let dir = fs.resolve("files_v1_0.daf/vectors/cell").unwrap();
    let committer = write_big(&fs, dir, vec![3u8; 12]);
    in_commit
        .recv_timeout(Duration::from_secs(60))
        .expect("the commit never started");
    let staged = tmp
        .path()
        .join(".files_v1_0.daf.daf-mount/files_v1_0.daf/vectors/cell/big.data");
    let committed = source.join("vectors/cell/big.data");
    // Written, before the lock: the record is on disk already (the lock is free: a change goes).
    let recorded = records(tmp.path());
    assert_eq!(recorded.len(), 1, "no record before the lock");
    drop(fs.lock_state());
    // A daemon killed here: the next mount drops the record, the item stays staged. (The
    // record is put back for the commit, which goes on.)
    let kept = tmp.path().join("record");
    std::fs::copy(&recorded[0], &kept).unwrap();
    let area = crate::staging::StagingArea::for_source(&source);
    assert!(!area.replay_moves().unwrap());
    assert!(staged.exists() && !committed.exists());
    assert!(records(tmp.path()).is_empty());
    std::fs::rename(&kept, &recorded[0]).unwrap();
    resume.send(()).unwrap();
    // Swapped, the lock released, not yet durable: readers see the item, the close waits.
    in_finish
        .recv_timeout(Duration::from_secs(60))
        .expect("the swap never finished");
    let shown = fs.resolve("files_v1_0.daf/vectors/cell/big.data").unwrap();
    assert_eq!(fs.content(shown).unwrap().as_slice(), [3u8; 12]);
    assert!(
        !committer.is_finished(),
        "the close was answered before the swap was durable"
    );
    assert!(committed.exists() && !staged.exists());
    // A daemon killed here: the next mount finishes the swap, which began.
    assert_eq!(
        records(tmp.path()),
        recorded,
        "no record while the swap is not durable"
    );
    assert!(area.replay_moves().unwrap());
    assert_eq!(std::fs::read(&committed).unwrap(), [3u8; 12]);
    assert!(records(tmp.path()).is_empty());
    resume_finish.send(()).unwrap();
    committer.join().unwrap().unwrap();
    assert!(records(tmp.path()).is_empty(), "a record is left");
    assert_eq!(std::fs::read(&committed).unwrap(), [3u8; 12]);
}

#[test]
fn a_commit_whose_files_changed_while_it_wrote_leaves_them_to_the_newer_commit() {
    let (_tmp, source, fs) = writable_copy();
    let (in_commit, resume) = pause_commits(&fs);
    let dir = fs.resolve("files_v1_0.daf/vectors/cell").unwrap();
    let committer = write_big(&fs, dir, vec![1u8; 12]);
    in_commit
        .recv_timeout(Duration::from_secs(60))
        .expect("the commit never started");
    // While the first commit has written its copy, another writer replaces the payload (a new
    // file): its close commits (without pausing), first.
    fs.unlink(dir, OsStr::new("big.data")).unwrap();
    let (_, fh) = fs.create(dir, OsStr::new("big.data"), false).unwrap();
    fs.write(fh, 0, &[2u8; 12]).unwrap();
    fs.flush(fh, None).unwrap();
    fs.release(fh);
    resume.send(()).unwrap();
    committer.join().unwrap().unwrap();
    let committed = source.join("vectors/cell/big.data");
    assert_eq!(std::fs::read(&committed).unwrap(), [2u8; 12]);
    let ino = fs.resolve("files_v1_0.daf/vectors/cell/big.data").unwrap();
    assert_eq!(fs.content(ino).unwrap().as_slice(), [2u8; 12]);
    let left: Vec<_> = std::fs::read_dir(source.join("vectors/cell"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with(".daf-mount-tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn a_property_whose_axis_is_deleted_while_it_is_committed_is_refused() {
    let (_tmp, source, fs) = writable_copy();
    let axes = fs.resolve("files_v1_0.daf/axes").unwrap();
    let (_, fh) = fs.create(axes, OsStr::new("fresh.txt"), false).unwrap();
    fs.write(fh, 0, b"a\nb\n").unwrap();
    fs.flush(fh, None).unwrap();
    fs.release(fh);
    let (in_commit, resume) = pause_commits(&fs);
    let dir = fs.resolve("files_v1_0.daf/vectors/fresh").unwrap();
    let committer = write_big(&fs, dir, vec![1u8; 8]);
    in_commit
        .recv_timeout(Duration::from_secs(60))
        .expect("the commit never started");
    // Not in use yet (its property is not swapped in): the axis can go.
    fs.unlink(axes, OsStr::new("fresh.txt")).unwrap();
    resume.send(()).unwrap();
    let closed = committer.join().unwrap();
    assert!(matches!(closed, Err(FsError::Invalid(_))), "{closed:?}");
    assert!(!source.join("vectors/fresh/big.data").exists());
    assert!(fs.resolve("files_v1_0.daf/axes/fresh.txt").is_err());
}

#[test]
fn reads_go_on_while_an_append_to_a_zip_source_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("zarr_v2.daf.zarr.zip");
    std::fs::copy(format!("{VECTORS}/zarr_v2.daf.zarr.zip"), &archive).unwrap();
    let fs = Arc::new(writable_both(&archive));
    let (paused, in_append) = channel();
    let (resume, resumed) = channel();
    *fs.appender.pause.lock().unwrap() = Some((paused, resumed));
    let before = std::fs::metadata(&archive).unwrap().len();
    let dir = fs.resolve("zarr_v2.daf/vectors/cell").unwrap();
    let (_, json) = fs.create(dir, OsStr::new("big.json"), false).unwrap();
    fs.write(json, 0, br#"{"format":"dense","eltype":"Float32"}"#)
        .unwrap();
    fs.flush(json, None).unwrap();
    fs.release(json);
    let (_, data) = fs.create(dir, OsStr::new("big.data"), false).unwrap();
    fs.write(data, 0, &[1u8; 12]).unwrap();
    fs.flush(data, None).unwrap();
    fs.release(data);
    in_append
        .recv_timeout(Duration::from_secs(60))
        .expect("the append never started");
    // The entries are in the archive, not swapped in yet: other files and the item itself read.
    let appended = std::fs::metadata(&archive).unwrap().len() > before;
    let (done, finished) = channel();
    let reader = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let dir = fs.resolve("zarr_v2.daf/vectors/cell").unwrap();
            let attr = fs.lookup(dir, OsStr::new("score.data")).unwrap();
            let fh = fs.open(attr.ino, false, false).unwrap();
            let score = fs.read(attr.ino, fh, 0, 4096).unwrap();
            fs.release(fh);
            let big = fs.resolve("zarr_v2.daf/vectors/cell/big.data").unwrap();
            let big = fs.content(big).unwrap().as_slice().to_vec();
            let _ = done.send((score.len(), big));
        })
    };
    let read = finished.recv_timeout(Duration::from_secs(10));
    resume.send(()).unwrap();
    reader.join().unwrap();
    let (score, big) = read.expect("a read waited for the append to end");
    assert!(appended, "the append had not written its entries");
    assert_eq!(score, 12);
    assert_eq!(big, [1u8; 12]);
    fs.finalize("").unwrap();
    let big = fs.resolve("zarr_v2.daf/vectors/cell/big.data").unwrap();
    assert_eq!(fs.content(big).unwrap().as_slice(), [1u8; 12]);
}

/// A writable mount (both views) of a copy of the ZarrDaf v2 ZIP fixture: the temporary
/// directory, the archive, the filesystem.
fn writable_zip() -> (tempfile::TempDir, PathBuf, Arc<DafFs>) {
    let tmp = tempfile::tempdir().unwrap();
    let archive = tmp.path().join("zarr_v2.daf.zarr.zip");
    std::fs::copy(format!("{VECTORS}/zarr_v2.daf.zarr.zip"), &archive).unwrap();
    let fs = Arc::new(writable_both(&archive));
    (tmp, archive, fs)
}

/// Writes file `name` of directory `dir` with `bytes` and closes it: the close's outcome.
fn write_file(fs: &DafFs, dir: u64, name: &str, bytes: &[u8]) -> Result<(), FsError> {
    let (_, fh) = fs.create(dir, OsStr::new(name), false).unwrap();
    fs.write(fh, 0, bytes).unwrap();
    let closed = fs.flush(fh, None);
    fs.release(fh);
    closed
}

#[test]
fn reads_go_on_while_a_zip_commit_makes_and_appends_a_large_property() {
    let (_tmp, archive, fs) = writable_zip();
    // A new axis of 1 Mi entries, appended first (its commit is not paused).
    const N: usize = 1 << 20;
    let axes = fs.resolve("zarr_v2.daf/axes").unwrap();
    let names: String = (0..N).map(|i| format!("e{i}\n")).collect();
    write_file(&fs, axes, "big.txt", names.as_bytes()).unwrap();
    fs.finalize("").unwrap();
    // The next commit into the archive pauses in its slow part, once the append's bytes (4 MiB
    // of Float32) are made.
    let (paused, in_commit) = channel();
    let (resume, resumed) = channel();
    crate::staging::zip_commit::PAUSE_MADE
        .lock()
        .unwrap()
        .push((archive.clone(), paused, resumed));
    let dir = fs.resolve("zarr_v2.daf/vectors/big").unwrap();
    let committer = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            write_file(
                &fs,
                dir,
                "x.json",
                br#"{"format":"dense","eltype":"Float32"}"#,
            )?;
            write_file(&fs, dir, "x.data", &vec![3u8; 4 * N])
        })
    };
    in_commit
        .recv_timeout(Duration::from_secs(60))
        .expect("the commit never made its append's bytes");
    // Meanwhile, another thread looks up, opens and reads other files, in both views.
    let (done, finished) = channel();
    let reader = {
        let fs = fs.clone();
        std::thread::spawn(move || {
            let dir = fs.resolve("zarr_v2.daf/vectors/cell").unwrap();
            let attr = fs.lookup(dir, OsStr::new("score.data")).unwrap();
            let fh = fs.open(attr.ino, false, false).unwrap();
            let score = fs.read(attr.ino, fh, 0, 4096).unwrap();
            fs.release(fh);
            let zarr = fs
                .resolve("zarr_v2.daf.zarr/vectors/cell/score/.zarray")
                .unwrap();
            let document = fs.content(zarr).unwrap().as_slice().to_vec();
            let _ = done.send((score.len(), document));
        })
    };
    let read = finished.recv_timeout(Duration::from_secs(10));
    resume.send(()).unwrap();
    reader.join().unwrap();
    committer.join().unwrap().unwrap();
    let (score, document) = read.expect("a read waited for the ZIP commit's slow part");
    assert_eq!(score, 12);
    assert!(document.starts_with(b"{"));
    fs.finalize("").unwrap();
    let x = fs.resolve("zarr_v2.daf/vectors/big/x.data").unwrap();
    let content = fs.content(x).unwrap();
    assert_eq!(content.len(), 4 * N as u64);
    assert!(content.as_slice().iter().all(|b| *b == 3));
}

#[test]
fn a_staged_payload_with_a_second_name_is_copied_not_moved() {
    let (tmp, source, fs) = writable_copy();
    let dir = fs.resolve("files_v1_0.daf/vectors/cell").unwrap();
    let (_, json) = fs.create(dir, OsStr::new("big.json"), false).unwrap();
    fs.write(json, 0, br#"{"format":"dense","eltype":"Float32"}"#)
        .unwrap();
    fs.flush(json, None).unwrap();
    fs.release(json);
    let (attr, data) = fs.create(dir, OsStr::new("big.data"), false).unwrap();
    fs.write(data, 0, &[5u8; 12]).unwrap();
    // A second name, in the staging area, of the staged payload.
    fs.link(attr.ino, dir, OsStr::new("twin.data")).unwrap();
    fs.flush(data, None).unwrap();
    fs.release(data);
    let committed = source.join("vectors/cell/big.data");
    assert_eq!(std::fs::read(&committed).unwrap(), [5u8; 12]);
    let twin = tmp
        .path()
        .join(".files_v1_0.daf.daf-mount/files_v1_0.daf/vectors/cell/twin.data");
    let ino =
        |p: &std::path::Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
    // Moved, the source file would still be staged under the other name.
    assert_ne!(ino(&committed), ino(&twin), "the linked payload was moved");
    assert_eq!(std::fs::read(&twin).unwrap(), [5u8; 12]);
}

/// The threads of this process named `name`, by thread id.
pub(in crate::core) fn threads_named(name: &str) -> Vec<i32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| {
            let task = task.ok()?.path();
            let comm = std::fs::read_to_string(task.join("comm")).ok()?;
            (comm.trim_end() == name).then(|| task.file_name()?.to_str()?.parse().ok())?
        })
        .collect()
}

#[test]
fn a_zip_append_writes_at_the_lowest_priority_and_swaps_at_normal_priority() {
    let (_tmp, archive, fs) = writable_zip();
    let (paused, in_append) = channel();
    let (resume, resumed) = channel();
    crate::staging::zip_commit::PAUSE_MADE
        .lock()
        .unwrap()
        .push((archive.clone(), paused, resumed));
    let dir = fs.resolve("zarr_v2.daf/vectors/cell").unwrap();
    write_file(
        &fs,
        dir,
        "p.json",
        br#"{"format":"dense","eltype":"Float32"}"#,
    )
    .unwrap();
    write_file(&fs, dir, "p.data", &[9u8; 12]).unwrap();
    in_append
        .recv_timeout(Duration::from_secs(60))
        .expect("the append never started");
    // While it writes: on a thread of its own, at SCHED_IDLE and I/O priority BE-7, while the
    // queue's thread, which will take the state lock for the swap, keeps the normal priority.
    let writers: Vec<_> = threads_named("zip-append-io")
        .into_iter()
        .map(crate::sys::thread_priority)
        .collect();
    let queues: Vec<_> = threads_named("zip-append")
        .into_iter()
        .map(crate::sys::thread_priority)
        .collect();
    resume.send(()).unwrap();
    fs.finalize("").unwrap();
    assert!(
        writers.contains(&(libc::SCHED_IDLE, (2 << 13) | 7)),
        "{writers:?}"
    );
    assert!(!queues.is_empty());
    assert!(
        queues
            .iter()
            .all(|(policy, _)| *policy == libc::SCHED_OTHER),
        "{queues:?}"
    );
    let p = fs.resolve("zarr_v2.daf/vectors/cell/p.data").unwrap();
    assert_eq!(fs.content(p).unwrap().as_slice(), [9u8; 12]);
}

/// A commit into a ZIP source queues its append before its staged files leave the state that
/// others read: a `fsync` of the root while the commit works out its tree waits for that append.
/// (It returned at once, before the append was even queued, and a daemon stopped then lost the
/// item: the crash campaign's lost closed writes after a recovery.)
#[test]
fn a_fsync_while_a_zip_commit_builds_its_tree_waits_for_its_append() {
    let (_tmp, archive, fs) = writable_zip();
    let dir = fs.resolve("zarr_v2.daf/vectors/cell").unwrap();
    write_file(
        &fs,
        dir,
        "new.json",
        br#"{"format":"dense","eltype":"UInt8"}"#,
    )
    .unwrap();
    let before = std::fs::metadata(&archive).unwrap().len();
    let (paused, build_paused) = channel();
    let (resume, resumed) = channel();
    *crate::stores::lock(&fs.read_state().build_pause) = Some((paused, resumed));
    let writer = {
        let fs = fs.clone();
        std::thread::spawn(move || write_file(&fs, dir, "new.data", &[1, 2, 3]))
    };
    build_paused
        .recv_timeout(Duration::from_secs(60))
        .expect("the commit builds a tree");
    let (synced, done) = channel();
    let fsync = {
        let (fs, archive) = (fs.clone(), archive.clone());
        std::thread::spawn(move || {
            let result = fs.finalize("");
            let _ = synced.send((result, std::fs::metadata(&archive).unwrap().len()));
        })
    };
    // Either the fsync answers now (it must not, the append is not done), or it waits.
    let early = done.recv_timeout(Duration::from_secs(1));
    resume.send(()).unwrap();
    writer.join().unwrap().unwrap();
    let (result, len) = early
        .or_else(|_| done.recv_timeout(Duration::from_secs(60)))
        .expect("the fsync never returned");
    fsync.join().unwrap();
    result.unwrap();
    assert!(
        len > before,
        "the fsync returned before the item was appended"
    );
    let new = fs.resolve("zarr_v2.daf/vectors/cell/new.data").unwrap();
    assert_eq!(fs.content(new).unwrap().as_slice(), [1, 2, 3]);
}
