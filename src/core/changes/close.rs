//! Closes of file handles: which close commits what was written.
//!
//! Every `close(2)` of a descriptor sends a flush, including the implicit closes of descriptors a
//! forked child inherited (its `execve` closes the `O_CLOEXEC` ones, its exit closes the rest).
//! Such a close says nothing about the writer being done, so only a close by the process that
//! opened the handle commits (its errors fail that `close`). When the last close is another
//! process's (the opener closed first, a child kept writing), the release commits instead; its
//! errors can only be logged. The caller tells who opens and who closes ([`Process`]): the core
//! reads nothing from the kernel.
//!
//! A commit into a directory source is answered (its close returns) only once its swap is
//! durable; the swap is seen by readers before that (the state lock is not held for its
//! `fsync`s), so an `fsync` of another file or of a directory meanwhile waits for it
//! ([`Unfinished`]).

use std::sync::{Condvar, Mutex};

use crate::staging::commit::{CommitError, Finish};

use crate::core::{DafFs, FsError};

/// How many swaps readers already see are not durable yet: `fsync` waits until none is.
#[derive(Debug, Default)]
pub(in crate::core) struct Unfinished {
    count: Mutex<usize>,
    done: Condvar,
}

/// One swap counted by [`Unfinished`] until this is dropped.
pub(in crate::core) struct Unfinishing<'a> {
    unfinished: &'a Unfinished,
    finish: Option<Finish>,
}

impl Unfinished {
    /// Counts a swap about to be made (under the state lock, before it is seen).
    pub(in crate::core) fn begin(&self) -> Unfinishing<'_> {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Unfinishing {
            unfinished: self,
            finish: None,
        }
    }

    /// Returns once every swap counted is durable (or failed).
    pub(in crate::core) fn wait(&self) {
        let mut count = self.count.lock().unwrap_or_else(|p| p.into_inner());
        while *count > 0 {
            count = self.done.wait(count).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Unfinishing<'_> {
    /// What is left of the swap once made.
    pub(in crate::core) fn with(mut self, finish: Finish) -> Self {
        self.finish = Some(finish);
        self
    }

    /// Makes the swap durable (out of the state lock).
    pub(in crate::core) fn complete(mut self) -> Result<(), CommitError> {
        self.finish.take().map_or(Ok(()), Finish::complete)
    }
}

impl Drop for Unfinishing<'_> {
    fn drop(&mut self) {
        let mut count = self
            .unfinished
            .count
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        *count = count.saturating_sub(1);
        self.unfinished.done.notify_all();
    }
}

/// A process, as the FUSE layer identifies it: its thread-group id (what `getpid` returns in it).
///
/// A process that reuses a dead opener's id is taken for the opener. It could only close the
/// handle if it holds the same open file, inherited from a child of the opener: that needs the
/// pid counter to wrap around (`pid_max`) while the file is written, and the harm is the
/// behaviour without this check (a commit at that close).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    pub tgid: u32,
}

/// Whether a close by `closer` (`None`: unknown) counts as the opener's. A handle whose opener
/// is not known treats every close as its opener's.
fn by_opener(opener: Option<Process>, closer: Option<Process>) -> bool {
    opener.is_none() || opener == closer
}

impl DafFs {
    /// Records the process that opened (or created) handle `fh`.
    pub fn opened_by(&self, fh: u64, opener: Process) {
        if let Some(handle) = self.handles().get_mut(&fh) {
            handle.opener = Some(opener);
        }
    }

    /// Whether a close of `fh` needs to know its closer (it was opened for writing).
    pub fn close_needs_closer(&self, fh: u64) -> bool {
        self.handles().get(&fh).is_some_and(|h| h.writable)
    }

    /// Called on every `close` of a handle, by `closer`: a close by the opener after writes may
    /// complete an item, which is then committed (or refused, failing the `close`). A close with
    /// nothing written since the last one judges nothing: the writes may still come through a
    /// duplicate of the descriptor (`cat x > VIEW/...` makes the shell close its descriptor
    /// first). If the handle has something to judge all the same (its file was created or
    /// opened by it, a document written or not, or written by the kernel), its release does. A
    /// close by another process (a forked child) leaves the writes for the opener's close or the
    /// release.
    pub fn flush(&self, fh: u64, closer: Option<Process>) -> Result<(), FsError> {
        // (The handles' lock is released before the state's is taken: commits lock the state
        // first, then the handles.)
        let ino = match self.handles().get_mut(&fh) {
            Some(handle) if !handle.writable => return Ok(()),
            Some(handle) if !by_opener(handle.opener, closer) => {
                if handle.dirty || handle.passthrough {
                    handle.foreign_close = true;
                }
                return Ok(());
            }
            Some(handle) => {
                let stamp = handle.passthrough.then(|| handle.file_stamp()).flatten();
                let changed = handle.dirty || (handle.passthrough && stamp != handle.closed_at);
                handle.deferred =
                    !changed && (handle.deferred || handle.fresh || handle.passthrough);
                handle.dirty = false;
                handle.fresh = false;
                handle.foreign_close = false;
                if handle.passthrough {
                    handle.closed_at = stamp;
                }
                if !changed {
                    return Ok(());
                }
                handle.ino
            }
            None => return Ok(()),
        };
        self.commit_staged(ino, fh)
    }

    /// The kernel writes handle `fh`'s file directly (passthrough), without telling us.
    pub fn written_by_kernel(&self, fh: u64) {
        if let Some(handle) = self.handles().get_mut(&fh) {
            handle.passthrough = handle.writable;
            handle.closed_at = handle.file_stamp();
        }
    }

    /// Forgets a handle, after its last close. Writes that no close by the opener committed
    /// (written after the opener's last close, or closed only by other processes since) are
    /// committed now; a refusal is logged, as nothing can report it any more.
    pub fn release(&self, fh: u64) {
        let pending = match self.handles().get(&fh) {
            Some(h) if h.foreign_close || h.writing() || h.deferred => Some((h.ino, h.deferred)),
            _ => None,
        };
        if let Some((ino, deferred)) = pending {
            if let Err(e) = self.commit_staged(ino, fh) {
                let path = self.path_of(ino).unwrap_or_default();
                if deferred {
                    log::warn!("{path}: refused at its last close: {e}");
                } else {
                    log::warn!("{path}: not committed at its last close (not by its opener): {e}");
                }
            }
        }
        self.handles().remove(&fh);
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::path::Path;
    use std::time::SystemTime;

    use super::{by_opener, Process};
    use crate::core::{DafFs, ROOT};
    use crate::formats::source::open_source;
    use crate::staging::StagingArea;
    use crate::views::ViewSelection;

    const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");
    const OPENER: Process = Process { tgid: 10 };
    const CHILD: Process = Process { tgid: 11 };

    #[test]
    fn only_the_opener_or_an_unknown_opener_closes() {
        assert!(by_opener(Some(OPENER), Some(OPENER)));
        assert!(!by_opener(Some(OPENER), Some(CHILD)));
        assert!(!by_opener(Some(OPENER), None));
        assert!(by_opener(None, Some(CHILD)));
        assert!(by_opener(None, None));
    }

    /// A writable mount of a copy of the FilesDaf fixture, and the inode of its `axes`.
    fn writable() -> (tempfile::TempDir, DafFs, u64) {
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
        let staging = StagingArea::for_source(&opened.path);
        let fs = DafFs::with_staging(
            opened.datasets,
            ViewSelection::Both,
            SystemTime::UNIX_EPOCH,
            Some(staging),
        );
        let view = fs.lookup(ROOT, OsStr::new("files_v1_0.daf")).unwrap().ino;
        let axes = fs.lookup(view, OsStr::new("axes")).unwrap().ino;
        (tmp, fs, axes)
    }

    /// Whether the new axis is committed (the Zarr view shows only committed axes).
    fn committed(fs: &DafFs) -> bool {
        let zarr = fs
            .lookup(ROOT, OsStr::new("files_v1_0.daf.zarr"))
            .unwrap()
            .ino;
        let axes = fs.lookup(zarr, OsStr::new("axes")).unwrap().ino;
        fs.lookup(axes, OsStr::new("new")).is_ok()
    }

    #[test]
    fn a_close_by_another_process_leaves_the_commit_to_the_openers_close() {
        let (_tmp, fs, axes) = writable();
        let (_, fh) = fs.create(axes, OsStr::new("new.txt"), false).unwrap();
        fs.opened_by(fh, OPENER);
        fs.write(fh, 0, b"a\n").unwrap();
        fs.flush(fh, Some(CHILD)).unwrap();
        fs.flush(fh, None).unwrap();
        assert!(!committed(&fs), "committed at a child's close");
        // The child's closes did not clear the written state: more writes, then the opener's.
        fs.write(fh, 2, b"b\n").unwrap();
        fs.flush(fh, Some(OPENER)).unwrap();
        assert!(committed(&fs), "not committed at the opener's close");
        fs.release(fh);
    }

    #[test]
    fn the_release_commits_what_only_other_processes_closed() {
        let (_tmp, fs, axes) = writable();
        let (_, fh) = fs.create(axes, OsStr::new("new.txt"), false).unwrap();
        fs.opened_by(fh, OPENER);
        // The opener hands the file to a child and closes it first, having written nothing.
        fs.flush(fh, Some(OPENER)).unwrap();
        fs.write(fh, 0, b"a\nb\n").unwrap();
        fs.flush(fh, Some(CHILD)).unwrap();
        assert!(!committed(&fs));
        fs.release(fh);
        assert!(committed(&fs), "not committed at the release");
    }

    /// The opener's close of a file the kernel wrote (passthrough) ends its writes: the release
    /// that follows comes asynchronously, and the close of the item's other file, which may
    /// arrive first, commits the item (it did not, and a `fsync` acknowledged an item that was
    /// only staged: the crash campaign lost it).
    #[test]
    fn a_passthrough_file_its_opener_closed_does_not_hold_back_its_item() {
        let (_tmp, fs, _) = writable();
        let view = fs.lookup(ROOT, OsStr::new("files_v1_0.daf")).unwrap().ino;
        let vectors = fs.lookup(view, OsStr::new("vectors")).unwrap().ino;
        let cell = fs.lookup(vectors, OsStr::new("cell")).unwrap().ino;
        let (_, data) = fs.create(cell, OsStr::new("new.data"), false).unwrap();
        fs.opened_by(data, OPENER);
        fs.written_by_kernel(data);
        fs.write(data, 0, &[1, 2, 3]).unwrap();
        fs.flush(data, Some(OPENER)).unwrap();
        // The release of `new.data` is still on its way.
        let (_, json) = fs.create(cell, OsStr::new("new.json"), false).unwrap();
        fs.opened_by(json, OPENER);
        fs.write(json, 0, br#"{"format":"dense","eltype":"UInt8"}"#)
            .unwrap();
        fs.flush(json, Some(OPENER)).unwrap();
        let zarr = fs
            .lookup(ROOT, OsStr::new("files_v1_0.daf.zarr"))
            .unwrap()
            .ino;
        let zvectors = fs.lookup(zarr, OsStr::new("vectors")).unwrap().ino;
        let zcell = fs.lookup(zvectors, OsStr::new("cell")).unwrap().ino;
        assert!(
            fs.lookup(zcell, OsStr::new("new")).is_ok(),
            "not committed at the close of its last file"
        );
        fs.release(json);
        fs.release(data);
    }

    /// A shell's `cat x > axes/new.txt`: the shell closes its descriptor before the command
    /// writes through the duplicate. That close, with nothing written, must not commit the
    /// (empty, so complete) axis: the writes would then be refused.
    #[test]
    fn a_close_with_nothing_written_does_not_commit_a_file_the_kernel_writes() {
        let (_tmp, fs, axes) = writable();
        let (_, fh) = fs.create(axes, OsStr::new("new.txt"), false).unwrap();
        fs.opened_by(fh, OPENER);
        fs.written_by_kernel(fh);
        fs.flush(fh, Some(OPENER)).unwrap();
        assert!(!committed(&fs), "committed empty at the shell's close");
        fs.write(fh, 0, b"a\n").unwrap();
        fs.flush(fh, Some(OPENER)).unwrap();
        assert!(
            committed(&fs),
            "not committed at the close after the writes"
        );
        fs.release(fh);
    }

    /// `: > axes/new.txt`: an empty file created and closed is a whole (empty) axis, committed
    /// by the release at the latest.
    #[test]
    fn an_empty_created_file_is_judged_by_its_release() {
        let (_tmp, fs, axes) = writable();
        let (_, fh) = fs.create(axes, OsStr::new("new.txt"), false).unwrap();
        fs.opened_by(fh, OPENER);
        fs.flush(fh, Some(OPENER)).unwrap();
        fs.release(fh);
        assert!(
            committed(&fs),
            "an empty axis created and closed was never committed"
        );
    }

    #[test]
    fn a_handle_whose_opener_is_unknown_commits_at_any_close() {
        let (_tmp, fs, axes) = writable();
        let (_, fh) = fs.create(axes, OsStr::new("new.txt"), false).unwrap();
        fs.write(fh, 0, b"a\n").unwrap();
        fs.flush(fh, Some(CHILD)).unwrap();
        assert!(committed(&fs));
        fs.release(fh);
    }
}
