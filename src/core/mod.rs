//! The filesystem core: the operations the FUSE adapter forwards, on an inode tree built from the
//! views and the staging area, with no dependency on the kernel (unit tests drive it directly).
//!
//! Reads go to shared blobs (committed content) or to staged files on disk. Writes (`write.rs`)
//! only ever create or change staged files (and refuse, in `refusals.rs`, what could never be
//! committed); turning them into properties is the staging layer's job. Every change builds a
//! new tree and swaps it in; inode numbers stay stable. Errors are [`FsError`]s; the adapter maps
//! them to errno values in one place.

mod changes;
mod listing;
pub mod namespace;
mod prefetch;
mod presence;
mod state;
mod status;
mod steps;
mod writer;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};
use std::time::SystemTime;

use crate::formats::source::NamedDataset;
use crate::staging::StagingArea;
use crate::stores::blob::CheckState;
use crate::stores::{Blob, Bytes, StoreError};
use crate::views::publish::Publisher;
use crate::views::{view_roots, ViewOptions};

pub use changes::close::Process;
pub use listing::Listed;
use namespace::{InodeTable, Namespace, NodeKind, ROOT};
use state::{resolve_in, split_canonical, split_mount, Staged, State};
pub use status::{ItemState, StagedItem, StagingReport};
use writer::{Trust, Try};

/// Errors of filesystem operations.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// No such entry.
    #[error("no such file or directory")]
    NotFound,
    /// A path component is a file.
    #[error("not a directory")]
    NotDir,
    /// A file operation on a directory.
    #[error("is a directory")]
    IsDir,
    /// The name is taken.
    #[error("file exists")]
    Exists,
    /// The directory is not empty.
    #[error("directory not empty")]
    NotEmpty,
    /// Any modification of a read-only mount.
    #[error("read-only file system")]
    ReadOnly,
    /// Staged files that are complete but inconsistent (the reason is logged).
    #[error("invalid: {0}")]
    Invalid(String),
    /// Staged files that look inconsistent while the staging file system is full: a write was
    /// cut short by the full disk (the reason is logged).
    #[error("no space left: {0}")]
    NoSpace(String),
    /// A modification this mount does not allow there (the reason is logged).
    #[error("not permitted: {0}")]
    NotPermitted(String),
    /// The content of a file could not be produced (decode, conversion, I/O on the source).
    #[error("{0}")]
    Content(#[from] StoreError),
    /// I/O on a staged file.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A bug caught at the adapter boundary (a panic in an operation).
    #[error("internal error: {0}")]
    Internal(String),
}

/// Something the kernel has cached that a change made stale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Invalidation {
    /// The attributes and pages of an inode.
    Inode(u64),
    /// A name in a directory (parent inode, name) that no longer exists.
    Entry(u64, String),
}

/// File or directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
}

/// What `stat` shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// File or directory.
    pub kind: Kind,
    /// Exact size in bytes (0 for directories).
    pub size: u64,
    /// Permission bits.
    pub perm: u16,
    /// Link count.
    pub nlink: u32,
    /// Modification (and change, and access) time.
    pub mtime: SystemTime,
    /// Whether the content may still change (a staged file): cache it briefly.
    pub volatile: bool,
    /// The size is only known by producing the content, and producing it failed: `size` shows
    /// 0, the attribute must not be cached, and reads fail (the blob keeps the failure).
    pub unknown_size: bool,
}

/// One `readdir` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode number.
    pub ino: u64,
    /// Name.
    pub name: String,
    /// File or directory.
    pub kind: Kind,
    /// Offset to pass to continue after this entry.
    pub next_offset: u64,
}

/// File-system-wide numbers for `statfs`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FsStats {
    /// Total bytes of the files whose size is known without producing them.
    pub bytes: u64,
    /// Number of inodes.
    pub inodes: u64,
}

/// An open file handle.
#[derive(Debug)]
struct Handle {
    ino: u64,
    /// The staged file, for handles on staged files.
    file: Option<Arc<File>>,
    /// The content, for handles on committed files: what they read, whatever replaces the file
    /// in the tree while they are open.
    blob: Option<Arc<Blob>>,
    writable: bool,
    /// Written since the last flush: its file may still be incomplete.
    dirty: bool,
    /// Written by the kernel directly (passthrough): every flush may complete an item.
    passthrough: bool,
    /// For a passthrough handle: the size and modification time of its file at its opener's
    /// last close. Its writes are over while the file still has them (a write after that close
    /// that changes neither, within the clock's tick, goes unseen).
    closed_at: Option<(u64, SystemTime)>,
    /// No close by its opener yet: its file is to be judged even if nothing is written (a
    /// created file may be complete empty; an opened document is judged whatever it holds).
    fresh: bool,
    /// Its opener's last close had nothing new written, though there is something to judge:
    /// left to the release, as writes may still come through a duplicate of the descriptor.
    deferred: bool,
    /// The process that opened the handle, when known: only its closes commit.
    opener: Option<Process>,
    /// Another process closed the handle after writes the opener's closes have not committed
    /// yet: the release commits them if the opener does not.
    foreign_close: bool,
    /// For a handle whose open staged a file (a new one, or a replacement of a committed one):
    /// its path in the mount and the staged file, dropped again if the open is refused after
    /// all ([`DafFs::abandon`]).
    staged_by_open: Option<(String, PathBuf)>,
}

impl Handle {
    /// Whether the handle may hold writes no close by its opener has seen: its file may be
    /// incomplete, so its item is not committed meanwhile.
    fn writing(&self) -> bool {
        let unseen = || {
            let now = self.file_stamp();
            now.is_none() || now != self.closed_at
        };
        self.writable && (self.dirty || (self.passthrough && unseen()))
    }

    /// The size and modification time of the handle's staged file.
    fn file_stamp(&self) -> Option<(u64, SystemTime)> {
        let meta = self.file.as_ref()?.metadata().ok()?;
        Some((meta.len(), meta.modified().ok()?))
    }
}

/// A mounted tree of views over opened data sets.
#[derive(Debug)]
pub struct DafFs {
    state: Arc<RwLock<State>>,
    /// Held by every change for as long as it runs (see [`writer::Writer`]).
    writers: Arc<Mutex<()>>,
    /// Appends to ZIP sources, finished after the commits that queued them returned.
    appender: changes::appender::Appender,
    /// Where writes go; `None` for a read-only mount.
    staging: Option<StagingArea>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_handle: AtomicU64,
    /// What commits and deletes changed, for the kernel to forget, with the thread whose request
    /// changed it (that request sends them; `None`: any request may, see `take_invalidations`).
    /// Locked only to queue and to take.
    invalidations: Mutex<Vec<(Option<std::thread::ThreadId>, Invalidation)>>,
    /// Items refused by a commit (journal key): the stamps of their staged files then, and how
    /// many tries in a row refused those same files (a refusal is logged once).
    refused: Mutex<HashMap<String, Refused>>,
    /// The staged files found when the tree was first built (`--view both` paths): what
    /// `recover` looks at, not files a writer stages after the mount.
    found_at_mount: BTreeSet<String>,
    /// Directory commits seen but not yet durable (`fsync` waits for them).
    unfinished: changes::close::Unfinished,
    /// Fetching ahead of a reader walking a remote data set.
    prefetch: prefetch::Prefetch,
    /// Tests only: where a commit into a directory source pauses while it writes payloads
    /// (it says so on the sender, then waits for the receiver).
    #[cfg(test)]
    commit_pause: changes::appender::Pause,
    /// Tests only: where a commit into a directory source pauses once its swap is made and the
    /// state lock released, before the swap is made durable.
    #[cfg(test)]
    finish_pause: changes::appender::Pause,
}

/// The stamps (size, time) of a refused item's staged files, and how many tries in a row
/// refused those same files.
type Refused = (Vec<Option<(u64, SystemTime)>>, u32);

impl DafFs {
    /// A read-only filesystem showing `datasets` with the selected views.
    pub fn new(
        datasets: Vec<NamedDataset>,
        options: impl Into<ViewOptions>,
        root_mtime: SystemTime,
    ) -> DafFs {
        DafFs::with_staging(datasets, options, root_mtime, None)
    }

    /// A filesystem that stages writes in `staging` (and shows what is already staged there).
    pub fn with_staging(
        datasets: Vec<NamedDataset>,
        options: impl Into<ViewOptions>,
        root_mtime: SystemTime,
        staging: Option<StagingArea>,
    ) -> DafFs {
        let options = options.into();
        let roots = view_roots(&datasets, &options);
        let staged = staging
            .iter()
            .flat_map(StagingArea::list)
            .map(|s| {
                (
                    s.path,
                    Staged {
                        disk: s.disk,
                        is_dir: s.is_dir,
                        mtime: s.mtime,
                    },
                )
            })
            .collect();
        let mut state = State {
            datasets,
            roots,
            staged,
            deleted: BTreeSet::new(),
            stuck: BTreeMap::new(),
            inodes: InodeTable::default(),
            root_mtime,
            namespace: Namespace::build(Vec::new(), root_mtime, &mut InodeTable::default()),
            #[cfg(test)]
            build_pause: Arc::default(),
            #[cfg(test)]
            edit_pause: Arc::default(),
            #[cfg(test)]
            steps: Arc::default(),
            publisher: (options.zip || options.h5df || options.h5ad.is_some())
                .then(|| (Mutex::new(Publisher::default()), options)),
        };
        state.rebuild();
        let found_at_mount = state
            .staged
            .iter()
            .filter(|(_, s)| !s.is_dir)
            .map(|(path, _)| path.clone())
            .collect();
        DafFs {
            state: Arc::new(RwLock::new(state)),
            writers: Arc::default(),
            appender: changes::appender::Appender::default(),
            staging,
            handles: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(1),
            invalidations: Mutex::new(Vec::new()),
            refused: Mutex::new(HashMap::new()),
            found_at_mount,
            prefetch: prefetch::Prefetch::default(),
            unfinished: changes::close::Unfinished::default(),
            #[cfg(test)]
            commit_pause: Mutex::new(None),
            #[cfg(test)]
            finish_pause: Mutex::new(None),
        }
    }

    fn namespace(&self) -> Arc<Namespace> {
        self.read_state().namespace.clone()
    }

    /// Whether the mount accepts writes.
    pub fn writable(&self) -> bool {
        self.staging.is_some()
    }

    /// Looks `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Attr, FsError> {
        let name = name.to_str().ok_or(FsError::NotFound)?;
        let tree = self.namespace();
        let ino = match tree.child(parent, name) {
            Some(Ok(ino)) => ino,
            Some(Err(())) => return Err(FsError::NotDir),
            None => return Err(FsError::NotFound),
        };
        self.prefetch.after_lookup(&tree, parent, ino);
        drop(tree);
        self.getattr(ino)
    }

    /// Lookups hint the files that follow them to their blobs, which a remote source fetches
    /// ahead of the reader ([`prefetch`]).
    pub fn enable_prefetch(&self) {
        self.prefetch.enable();
    }

    /// The content of committed file `ino` (produced on first access, then shared), or a copy
    /// of a staged file's current bytes (once its commit is in, if one is renaming it into the
    /// source: [`writer::settled`]).
    pub fn content(&self, ino: u64) -> Result<Bytes, FsError> {
        writer::settled(&self.writers, |trust| {
            match self.namespace().node(ino).ok_or(FsError::NotFound)?.kind() {
                NodeKind::File(blob) => Ok(Try::Done(blob.bytes()?)),
                NodeKind::Staged(disk) => match staged_io(std::fs::read(disk), trust)? {
                    Try::Done(bytes) => Ok(Try::Done(Bytes::from_vec(bytes))),
                    Try::Again => Ok(Try::Again),
                },
                NodeKind::Dir { .. } => Err(FsError::IsDir),
            }
        })
    }

    /// Whether committed file `ino` is served by ranges (a packed array decoded chunk by
    /// chunk): its whole content must not be asked for (no page fill).
    pub fn is_ranged(&self, ino: u64) -> bool {
        matches!(
            self.namespace().node(ino).map(|n| n.kind()),
            Some(NodeKind::File(blob)) if blob.is_ranged()
        )
    }

    /// Whether committed file `ino` of a writable mount changes in place with every commit (a
    /// document made from every item): the kernel must not keep its pages, which two handles
    /// reading two versions would mix (each handle reads the version it opened).
    pub fn changes_in_place(&self, ino: u64) -> bool {
        if !self.writable() {
            return false;
        }
        let state = self.read_state();
        let path = state.namespace.path(ino);
        path.is_some_and(|p| changes::commit::changes_in_place(&state, &p))
    }

    /// Whether committed file `ino` failed its integrity check (a stored ZIP member whose CRC-32
    /// is wrong): what the kernel cached of it must be dropped, not kept.
    pub fn failed_check(&self, ino: u64) -> bool {
        matches!(
            self.namespace().node(ino).map(|n| n.kind()),
            Some(NodeKind::File(blob)) if blob.check_state() == Some(CheckState::Bad)
        )
    }

    /// Waits until the integrity check of committed file `ino` is decided (if it has one):
    /// `false` when its bytes were found corrupt.
    pub fn settle_check(&self, ino: u64) -> bool {
        let blob = match self.namespace().node(ino).map(|n| n.kind()) {
            Some(NodeKind::File(blob)) => blob.clone(),
            _ => return true,
        };
        blob.verify().is_ok()
    }

    /// Up to `size` bytes of file `ino` from `offset`: for committed files a range of the shared
    /// content (no copy); staged files are read from disk through the handle `fh`.
    pub fn read(&self, ino: u64, fh: u64, offset: u64, size: u32) -> Result<Bytes, FsError> {
        let (staged_file, opened_blob) = match self.handles().get(&fh) {
            Some(h) => (h.file.clone(), h.blob.clone()),
            None => (None, None),
        };
        if let Some(blob) = opened_blob {
            return Ok(blob.read_range(offset, u64::from(size))?);
        }
        if let Some(file) = staged_file {
            let mut buf = vec![0u8; size as usize];
            let mut filled = 0;
            while filled < buf.len() {
                match file.read_at(&mut buf[filled..], offset + filled as u64)? {
                    0 => break,
                    n => filled += n,
                }
            }
            buf.truncate(filled);
            return Ok(Bytes::from_vec(buf));
        }
        let node_blob = match self.namespace().node(ino).ok_or(FsError::NotFound)?.kind() {
            NodeKind::File(blob) => Some(blob.clone()),
            _ => None,
        };
        if let Some(blob) = node_blob {
            // Only the range is made: a packed array decodes just the chunks it touches.
            return Ok(blob.read_range(offset, u64::from(size))?);
        }
        let content = self.content(ino)?;
        let start = offset.min(content.len());
        let len = u64::from(size).min(content.len() - start);
        content
            .slice(start, len)
            .ok_or_else(|| FsError::Internal("read range".into()))
    }

    /// The file on disk that file `ino` is the whole of, for the kernel to read (and, for a
    /// staged file, write: then `true`) directly (passthrough): the source file of a committed
    /// file, or a staged file.
    pub fn backing_file(&self, ino: u64) -> Option<(PathBuf, bool)> {
        match self.namespace().node(ino)?.kind() {
            NodeKind::File(blob) => blob.backing_file().map(|p| (PathBuf::from(p), false)),
            NodeKind::Staged(disk) => Some((disk.to_path_buf(), self.writable())),
            NodeKind::Dir { .. } => None,
        }
    }

    /// Numbers for `statfs`.
    pub fn stats(&self) -> FsStats {
        let ns = self.namespace();
        let bytes = ns
            .nodes()
            .filter_map(|(_, n)| match n.kind() {
                NodeKind::File(blob) => blob.known_len(),
                _ => None,
            })
            .sum();
        FsStats {
            bytes,
            inodes: ns.len() as u64,
        }
    }

    /// Resolves a `/`-separated path from the root (for tests and tools).
    pub fn resolve(&self, path: &str) -> Result<u64, FsError> {
        path.split('/')
            .filter(|c| !c.is_empty())
            .try_fold(ROOT, |dir, name| {
                self.lookup(dir, OsStr::new(name)).map(|a| a.ino)
            })
    }
}

/// The outcome of I/O on a staged file's disk path: a file that is gone there while the tree as
/// it is shows it was renamed into the source by a commit whose tree is not in yet
/// ([`Try::Again`]); with no change running, it is gone for good.
fn staged_io<T>(io: std::io::Result<T>, trust: Trust) -> Result<Try<T>, FsError> {
    match io {
        Ok(done) => Ok(Try::Done(done)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && trust == Trust::AsItIs => {
            Ok(Try::Again)
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod listing_tests;
#[cfg(test)]
mod steps_tests;
#[cfg(test)]
mod tests;
