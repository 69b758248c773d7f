//! What the kernel keeps for us: backing files for passthrough reads, and the cached names,
//! attributes and pages that a commit makes stale (invalidated through the session's notifier).

use std::ffi::OsStr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use fuser::{BackingId, INodeNo};

use crate::core::Invalidation;

use super::FuseAdapter;

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
    /// handle of the inode while one is open: the kernel refuses two backing files for one inode.
    pub(super) fn backing_for(
        &self,
        ino: u64,
        fh: u64,
        open_backing: impl FnOnce(&std::fs::File) -> std::io::Result<BackingId>,
    ) -> Option<Arc<BackingId>> {
        if !self.passthrough.load(Ordering::Relaxed) {
            return None;
        }
        let (path, writable) = self.core.backing_file(ino)?;
        let mut by_ino = self
            .backing_by_ino
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let id = match by_ino.get(&ino).and_then(Weak::upgrade) {
            Some(id) => id,
            None => {
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(writable)
                    .open(&path)
                    .ok()?;
                match open_backing(&file) {
                    Ok(id) => {
                        let id = Arc::new(id);
                        by_ino.insert(ino, Arc::downgrade(&id));
                        id
                    }
                    Err(e) => {
                        log::info!("passthrough unavailable ({e}); reads go through the daemon");
                        self.passthrough.store(false, Ordering::Relaxed);
                        return None;
                    }
                }
            }
        };
        self.backing_by_fh
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, id.clone());
        Some(id)
    }

    /// The inode of `name` in `parent` (0 if none): the kernel locks it during unlink/rmdir/rename.
    pub(super) fn child(&self, parent: INodeNo, name: &OsStr) -> u64 {
        self.core.lookup(parent.0, name).map_or(0, |a| a.ino)
    }

    /// Sends the invalidations the core queued. They go out before the reply, so the caller's
    /// next call sees the change, except those about what the kernel holds locked while this
    /// request is pending (`locked`: its directories, or the inode of a `setattr`): waiting for
    /// those would deadlock, so they go from another thread.
    pub(super) fn send_invalidations(&self, locked: &[u64]) {
        let stale = self.core.take_invalidations();
        if stale.is_empty() {
            return;
        }
        {
            let mut by_ino = self
                .backing_by_ino
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for item in &stale {
                if let Invalidation::Inode(ino) = item {
                    by_ino.remove(ino);
                    self.page_fill.forget(*ino);
                }
            }
        }
        let Some(notifier) = self.notifier.lock().ok().and_then(|n| n.clone()) else {
            return;
        };
        let send = |notifier: &fuser::Notifier, item: &Invalidation| {
            // ENOENT: the kernel has nothing cached for it.
            let _ = match item {
                Invalidation::Inode(ino) => notifier.inval_inode(INodeNo(*ino), 0, 0),
                Invalidation::Entry(parent, name) => {
                    notifier.inval_entry(INodeNo(*parent), OsStr::new(name))
                }
            };
        };
        let (later, now): (Vec<Invalidation>, Vec<Invalidation>) =
            stale.into_iter().partition(|item| match item {
                Invalidation::Inode(ino) => locked.contains(ino),
                Invalidation::Entry(parent, _) => locked.contains(parent),
            });
        for item in &now {
            send(&notifier, item);
        }
        if !later.is_empty() {
            std::thread::spawn(move || later.iter().for_each(|item| send(&notifier, item)));
        }
    }
}
