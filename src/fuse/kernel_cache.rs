//! What the kernel keeps for us: backing files for passthrough reads, and the cached names,
//! attributes and pages that a commit makes stale (invalidated through the session's notifier).

use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use fuser::{BackingId, Errno, INodeNo};

use crate::core::Invalidation;

use super::FuseAdapter;

/// A file's identity (device, inode).
pub(super) type FileId = (u64, u64);

fn meta_id(meta: Option<std::fs::Metadata>) -> Option<FileId> {
    use std::os::unix::fs::MetadataExt;
    meta.map(|m| (m.dev(), m.ino()))
}

fn file_id(path: &std::path::Path) -> Option<FileId> {
    meta_id(std::fs::metadata(path).ok())
}

/// Where the session's notifier goes once the session exists.
pub type NotifierSlot = Arc<std::sync::Mutex<Option<fuser::Notifier>>>;

impl FuseAdapter {
    /// The slot to put the session's notifier in (after mounting), so commits that change
    /// existing content make the kernel drop what it cached.
    pub fn notifier_slot(&self) -> NotifierSlot {
        self.notifier.clone()
    }

    /// The kernel's handle on the file on disk that `ino` is the whole of (a source file, or a
    /// staged file), for passthrough I/O (`None`: serve reads and writes here). Shared by every
    /// handle of the inode while one is open: while an inode has passthrough handles the kernel
    /// fails (`EIO`) an open of it that is not passthrough on that same backing file. So while
    /// one lives, a new open of the inode gets it: when the inode's file is still that file (a
    /// staged file its commit renamed into a directory source), or, to read, when the inode has
    /// no file of its own now (a staged file committed into a ZIP source, now read from the
    /// archive: the same bytes, as a ZIP's committed content never changes). An open of an inode
    /// whose file is another one now (a replacement) while handles on the old one are open is
    /// refused with `ETXTBSY`: they would make it read or write the old file. Such an open first
    /// waits, at most [`RELEASE_WAIT`], for those handles' releases: the kernel sends a release
    /// after `close` has returned, so a reader's release is often still on its way (or on
    /// another worker) when the same process opens the file again to replace it.
    pub(super) fn backing_for(
        &self,
        ino: u64,
        fh: u64,
        write: bool,
        open_backing: impl FnOnce(&std::fs::File) -> std::io::Result<BackingId>,
    ) -> Result<Option<Arc<BackingId>>, Errno> {
        if !self.passthrough.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let deadline = std::time::Instant::now() + RELEASE_WAIT;
        let mut by_ino = self
            .backing_by_ino
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (live, current) = loop {
            let current = self.core.backing_file(ino);
            let live = by_ino
                .get(&ino)
                .and_then(|(id, file)| Some((id.upgrade()?, *file)));
            // The inode's file now: still that file, or (to read) none of its own.
            let busy = live.as_ref().is_some_and(|(_, file)| {
                let now = current.as_ref().and_then(|(path, _)| file_id(path));
                now != Some(*file) && (write || now.is_some())
            });
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if !busy {
                break (live, current);
            }
            if left.is_zero() {
                log::info!(
                    "inode {ino}: its file changed while handles on the previous one are \
                     open: refused (ETXTBSY) until they are closed"
                );
                return Err(super::errors::backing_busy());
            }
            drop(live);
            by_ino = self
                .backing_released
                .wait_timeout(by_ino, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        };
        let id = match (live, current) {
            (Some((id, _)), _) => id,
            (None, None) => return Ok(None),
            (None, Some((path, writable))) => {
                let Ok(file) = std::fs::OpenOptions::new()
                    .read(true)
                    .write(writable)
                    .open(&path)
                else {
                    return Ok(None);
                };
                let Some(identity) = meta_id(file.metadata().ok()) else {
                    return Ok(None);
                };
                match open_backing(&file) {
                    Ok(id) => {
                        let id = Arc::new(id);
                        by_ino.retain(|_, (id, _)| id.strong_count() > 0);
                        by_ino.insert(ino, (Arc::downgrade(&id), identity));
                        id
                    }
                    Err(e) => {
                        log::info!("passthrough unavailable ({e}); reads go through the daemon");
                        self.passthrough.store(false, Ordering::Relaxed);
                        return Ok(None);
                    }
                }
            }
        };
        self.backing_by_fh
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, id.clone());
        Ok(Some(id))
    }

    /// The inode of `name` in `parent` (0 if none): the kernel locks it during unlink/rmdir/rename.
    pub(super) fn child(&self, parent: INodeNo, name: &OsStr) -> u64 {
        self.core.lookup(parent.0, name).map_or(0, |a| a.ino)
    }

    /// Sends the invalidations the core queued, on the mount's invalidation thread (one, in
    /// order), waiting at most [`INVALIDATION_WAIT`] for them before the reply, so the caller's
    /// next call sees the change. Never on this thread, and never waited for without a bound:
    /// the kernel takes the directory's lock to drop a name, and another pending request may
    /// hold it (an unlink in that directory, waiting for a worker that is itself sending the
    /// names of this request's directory): both workers would wait for ever. What the kernel
    /// holds locked while this request is pending (`locked`: its directories, or the inode of a
    /// `setattr`) cannot go before the reply, so it is not waited for.
    pub(super) fn send_invalidations(&self, locked: &[u64]) {
        let stale = self.core.take_invalidations();
        if stale.is_empty() {
            return;
        }
        // (The inodes' backing files stay theirs while handles use them: see `backing_for`.)
        for item in &stale {
            if let Invalidation::Inode(ino) = item {
                self.page_fill.forget(*ino);
            }
        }
        let Some(notifier) = self.notifier.lock().ok().and_then(|n| n.clone()) else {
            return;
        };
        let (later, now): (Vec<Invalidation>, Vec<Invalidation>) =
            stale.into_iter().partition(|item| match item {
                Invalidation::Inode(ino) => locked.contains(ino),
                Invalidation::Entry(parent, _) => locked.contains(parent),
            });
        let queue = self
            .invalidator
            .get_or_init(|| start_invalidator(notifier.clone()));
        let Some(queue) = queue else {
            // No thread: sent here, as before it existed (the locked ones from a thread each).
            now.iter().for_each(|item| send(&notifier, item));
            std::thread::spawn(move || later.iter().for_each(|item| send(&notifier, item)));
            return;
        };
        let (sent, done) = std::sync::mpsc::channel();
        let queued = crate::stores::lock(&queue.now)
            .send((now, Some(sent)))
            .is_ok();
        if !later.is_empty() {
            let _ = crate::stores::lock(&queue.later).send((later, None));
        }
        if queued && done.recv_timeout(INVALIDATION_WAIT).is_err() {
            log::debug!("invalidations not sent within {INVALIDATION_WAIT:?}: replying first");
        }
    }
}

/// How long an open that would replace an inode's backing file waits for the releases of the
/// handles on the previous one (see `backing_for`): a release already sent is answered within
/// milliseconds even on a loaded machine; the bound is reached only when a handle is really open.
const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a reply waits for the kernel to take its invalidations: they take microseconds once
/// the thread runs, which on a loaded machine can be tens of milliseconds later; the bound is only
/// reached when the kernel waits for a directory another pending request holds.
const INVALIDATION_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// A batch of invalidations, and who waits for them to be sent.
pub(super) type Batch = (Vec<Invalidation>, Option<std::sync::mpsc::Sender<()>>);

/// The threads that send invalidations to the kernel, each its batches in order: one for those a
/// reply waits for, one for those in a directory whose lock the kernel holds until a request's
/// reply (they wait for that lock, and must not delay the next request's batch behind them).
#[derive(Debug)]
pub(super) struct Invalidators {
    /// Locked to queue a batch.
    now: std::sync::Mutex<std::sync::mpsc::Sender<Batch>>,
    /// Locked to queue a batch.
    later: std::sync::Mutex<std::sync::mpsc::Sender<Batch>>,
}

/// Starts the threads that send invalidations; `None` if they cannot start.
fn start_invalidator(notifier: fuser::Notifier) -> Option<Invalidators> {
    let start = |name: &str| {
        let (queue, batches) = std::sync::mpsc::channel::<Batch>();
        let notifier = notifier.clone();
        let started = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                for (items, sent) in batches {
                    items.iter().for_each(|item| send(&notifier, item));
                    if let Some(sent) = sent {
                        let _ = sent.send(());
                    }
                }
            });
        match started {
            Ok(_) => Some(std::sync::Mutex::new(queue)),
            Err(e) => {
                log::warn!(
                    "cannot start an invalidation thread ({e}): invalidations sent by workers"
                );
                None
            }
        }
    };
    Some(Invalidators {
        now: start("daf-invalidate")?,
        later: start("daf-inval-later")?,
    })
}

/// Tells the kernel to forget `item` (`ENOENT`: it has nothing cached for it).
fn send(notifier: &fuser::Notifier, item: &Invalidation) {
    let _ = match item {
        Invalidation::Inode(ino) => notifier.inval_inode(INodeNo(*ino), 0, 0),
        Invalidation::Entry(parent, name) => {
            notifier.inval_entry(INodeNo(*parent), OsStr::new(name))
        }
    };
}
