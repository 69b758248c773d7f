//! Filling the kernel's page cache ahead of the reader, for large files that cannot use
//! passthrough (ZIP members, decoded arrays).
//!
//! Through the page cache the kernel reads such a file at a fraction of a native read: for every
//! page it allocates a page, sends a READ, waits for the reply and only then copies the page out.
//! The reader's core does all of that, while the second core mostly waits. So while a large file
//! is open for reading, a background thread pushes the file's pages into the kernel's cache
//! (`FUSE_NOTIFY_STORE`, one copy from the source's map) from the **end** of the file backwards,
//! skipping pages the kernel already has. A sequential reader starting at the front and the
//! filler meet in the middle: each does half of the work, and afterwards the whole file is cached,
//! so the next reads run at page-cache speed. The filler stops when the last handle closes.
//!
//! On Linux 6.18 the FUSE page cache holds 4 KiB pages only (readahead and stores alike), while a
//! native file read from disk is cached in large folios that copy out about twice as fast, so a
//! cached FUSE read reaches about half of a native one (doc/performance.md, "What bounds the ZIP rows").
//!
//! Which pages the kernel has is learnt from the READ replies and from the stores themselves
//! (a page the kernel dropped under memory pressure is simply read again). A commit that changes a
//! file drops its state before the kernel's pages are invalidated, and a store never runs between
//! those two steps, so stale bytes are never stored.
//!
//! A large stored ZIP member is served (and stored) while its CRC-32 is still being checked in
//! the background (`stores::check`). Once a file is filled, or its last handle closed, the filler
//! waits for that check; if the member is corrupt, it drops every page the kernel holds of it, so
//! even a handle that is still open reads `EIO` from then on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, OnceLock};

use fuser::INodeNo;

use crate::stores::Bytes;

use super::NotifierSlot;
use crate::stores::lock;

/// Files smaller than this are left to the kernel's readahead.
const FILL_MIN: u64 = 4 << 20;
const PAGE: u64 = 4096;
/// The most one store sends (a request's worth).
const STORE_MAX: u64 = 1 << 20;

/// What the kernel holds of one file, as far as the daemon knows.
struct FileFill {
    ino: u64,
    content: Bytes,
    /// One bit per page the kernel was given (by a READ reply or a store).
    present: Mutex<Vec<u64>>,
    /// Open read handles: the filler works only while there is one.
    handles: AtomicUsize,
    /// Whether the filler has this file in its queue or is filling it.
    queued: AtomicBool,
    /// False once a commit changed the file; the filler holds it while it stores.
    alive: Mutex<bool>,
    /// Waits for the content's integrity check: false when the content is corrupt.
    settle: Box<dyn Fn() -> bool + Send + Sync>,
}

impl std::fmt::Debug for FileFill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileFill").field("ino", &self.ino).finish()
    }
}

impl FileFill {
    fn pages(&self) -> u64 {
        self.content.len().div_ceil(PAGE)
    }

    /// Marks the pages wholly inside `[offset, offset + len)` (or ending the file) as present.
    fn mark(&self, offset: u64, len: u64) {
        let first = offset.div_ceil(PAGE);
        let end = if offset + len >= self.content.len() {
            self.pages()
        } else {
            (offset + len) / PAGE
        };
        let mut present = lock(&self.present);
        for page in first..end {
            present[(page / 64) as usize] |= 1 << (page % 64);
        }
    }

    /// The last run of absent pages before page `end`, at most `STORE_MAX` long.
    fn absent_before(&self, end: u64) -> Option<(u64, u64)> {
        let present = lock(&self.present);
        let is_present = |page: u64| present[(page / 64) as usize] & (1 << (page % 64)) != 0;
        let mut last = end;
        while last > 0 {
            if last % 64 == 0 && present[(last / 64 - 1) as usize] == u64::MAX {
                last -= 64;
            } else if is_present(last - 1) {
                last -= 1;
            } else {
                break;
            }
        }
        let last = last.checked_sub(1)?;
        let limit = (last + 1).saturating_sub(STORE_MAX / PAGE);
        let mut first = last;
        while first > limit && !is_present(first - 1) {
            first -= 1;
        }
        Some((first, last + 1))
    }
}

/// Page-cache filling for the adapter: per file state, and the filler thread.
#[derive(Debug)]
pub(super) struct PageFill {
    files: Mutex<HashMap<u64, Arc<FileFill>>>,
    /// The file behind each read handle that is being filled.
    handles: Mutex<HashMap<u64, Arc<FileFill>>>,
    notifier: NotifierSlot,
    queue: OnceLock<Option<Sender<Arc<FileFill>>>>,
}

impl PageFill {
    /// Nothing runs yet: the filler thread starts with the first large file opened, after the
    /// daemon has forked into the background.
    pub(super) fn new(notifier: NotifierSlot) -> PageFill {
        PageFill {
            files: Mutex::default(),
            handles: Mutex::default(),
            notifier,
            queue: OnceLock::new(),
        }
    }

    /// The filler's queue (`None` if it cannot be started).
    fn queue(&self) -> Option<&Sender<Arc<FileFill>>> {
        self.queue
            .get_or_init(|| {
                let (queue, files) = channel();
                let notifier = self.notifier.clone();
                let spawned = std::thread::Builder::new()
                    .name("page-fill".into())
                    .spawn(move || fill_files(&files, &notifier));
                match spawned {
                    Ok(_) => Some(queue),
                    Err(e) => {
                        log::warn!("cannot start the page-cache filler: {e}");
                        None
                    }
                }
            })
            .as_ref()
    }

    /// Handle `fh` of committed file `ino` (`size` bytes, `content`) was opened for reading with
    /// the page cache: fill the cache while it is open.
    pub(super) fn opened(
        &self,
        ino: u64,
        fh: u64,
        size: u64,
        content: impl FnOnce() -> Option<Bytes>,
        settle: impl Fn() -> bool + Send + Sync + 'static,
    ) {
        if size < FILL_MIN {
            return;
        }
        let fill = {
            let mut files = lock(&self.files);
            match files.get(&ino) {
                Some(fill) => fill.clone(),
                None => {
                    let Some(content) = content() else {
                        return;
                    };
                    let words = content.len().div_ceil(PAGE).div_ceil(64) as usize;
                    let fill = Arc::new(FileFill {
                        ino,
                        content,
                        present: Mutex::new(vec![0; words]),
                        handles: AtomicUsize::new(0),
                        queued: AtomicBool::new(false),
                        alive: Mutex::new(true),
                        settle: Box::new(settle),
                    });
                    files.insert(ino, fill.clone());
                    fill
                }
            }
        };
        fill.handles.fetch_add(1, Ordering::SeqCst);
        lock(&self.handles).insert(fh, fill.clone());
        if !fill.queued.swap(true, Ordering::SeqCst) {
            if let Some(queue) = self.queue() {
                if queue.send(fill.clone()).is_err() {
                    fill.queued.store(false, Ordering::SeqCst);
                }
            }
        }
    }

    /// A READ through handle `fh` was answered with `[offset, offset + len)`.
    pub(super) fn answered(&self, fh: u64, offset: u64, len: u64) {
        if let Some(fill) = lock(&self.handles).get(&fh) {
            fill.mark(offset, len);
        }
    }

    pub(super) fn release(&self, fh: u64) {
        if let Some(fill) = lock(&self.handles).remove(&fh) {
            fill.handles.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// File `ino` changes: store nothing more of it. Call before invalidating its pages.
    pub(super) fn forget(&self, ino: u64) {
        if let Some(fill) = lock(&self.files).remove(&ino) {
            *lock(&fill.alive) = false;
        }
    }
}

/// The filler thread: fills one file at a time.
fn fill_files(files: &Receiver<Arc<FileFill>>, notifier: &NotifierSlot) {
    while let Ok(fill) = files.recv() {
        let notifier = notifier.lock().ok().and_then(|n| n.clone());
        loop {
            let filled = notifier.as_ref().is_some_and(|n| fill_backwards(&fill, n));
            fill.queued.store(false, Ordering::SeqCst);
            // A handle opened meanwhile found the file queued: go on for it.
            let reopened = fill.handles.load(Ordering::SeqCst) > 0;
            if filled || !reopened || fill.queued.swap(true, Ordering::SeqCst) {
                break;
            }
        }
        if !(fill.settle)() && *lock(&fill.alive) {
            // Pages of a corrupt member may be cached (stored here or read before the check
            // ended): drop them all, so every later read reaches the daemon and gets EIO.
            if let Some(notifier) = &notifier {
                if let Err(e) = notifier.inval_inode(INodeNo(fill.ino), 0, 0) {
                    log::debug!("dropping the pages of inode {}: {e}", fill.ino);
                }
            }
        }
    }
}

/// Stores the file's absent pages from its end backwards while a handle is open. True when the
/// kernel has every page.
fn fill_backwards(fill: &FileFill, notifier: &fuser::Notifier) -> bool {
    let mut end = fill.pages();
    while fill.handles.load(Ordering::SeqCst) > 0 {
        let Some((first, last)) = fill.absent_before(end) else {
            return true;
        };
        let start = first * PAGE;
        let len = (last * PAGE).min(fill.content.len()) - start;
        let alive = lock(&fill.alive);
        let Some(bytes) = fill.content.slice(start, len).filter(|_| *alive) else {
            return false;
        };
        if let Err(e) = notifier.store(INodeNo(fill.ino), start, bytes.as_slice()) {
            log::debug!("storing pages of inode {}: {e}", fill.ino);
            return false;
        }
        drop(alive);
        fill.mark(start, len);
        end = first;
    }
    false
}
