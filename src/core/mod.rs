//! The filesystem core: the operations the FUSE adapter forwards, on an inode tree built from
//! the views, with no dependency on the kernel (unit tests drive it directly).
//!
//! Errors are [`FsError`]s; the adapter maps them to errno values in one place.

pub mod namespace;

use std::ffi::OsStr;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use crate::formats::source::NamedDataset;
use crate::stores::{Blob, Bytes, StoreError};
use crate::views::{mount_entries, ViewSelection};

use namespace::{Namespace, NodeKind, ROOT};

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
    /// Any modification of a read-only mount.
    #[error("read-only file system")]
    ReadOnly,
    /// The content of a file could not be produced (decode, conversion, I/O on the source).
    #[error("{0}")]
    Content(#[from] StoreError),
    /// A bug caught at the adapter boundary (a panic in an operation).
    #[error("internal error: {0}")]
    Internal(String),
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

/// A mounted tree of views over opened data sets.
#[derive(Debug)]
pub struct DafFs {
    namespace: RwLock<Arc<Namespace>>,
}

impl DafFs {
    /// The filesystem showing `datasets` with the selected views.
    pub fn new(
        datasets: &[NamedDataset],
        selection: ViewSelection,
        root_mtime: SystemTime,
    ) -> DafFs {
        let namespace = Namespace::build(mount_entries(datasets, selection), root_mtime);
        DafFs {
            namespace: RwLock::new(Arc::new(namespace)),
        }
    }

    fn namespace(&self) -> Arc<Namespace> {
        self.namespace
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Attributes of `ino`.
    pub fn getattr(&self, ino: u64) -> Result<Attr, FsError> {
        let ns = self.namespace();
        let node = ns.node(ino).ok_or(FsError::NotFound)?;
        Ok(match &node.kind {
            NodeKind::Dir { .. } => Attr {
                ino,
                kind: Kind::Dir,
                size: 0,
                perm: 0o555,
                nlink: 2 + node.subdirs(&ns),
                mtime: node.mtime,
            },
            NodeKind::File(blob) => Attr {
                ino,
                kind: Kind::File,
                size: blob.len()?,
                perm: 0o444,
                nlink: 1,
                mtime: node.mtime,
            },
        })
    }

    /// Looks `name` up in directory `parent`.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Result<Attr, FsError> {
        let name = name.to_str().ok_or(FsError::NotFound)?;
        let ino = match self.namespace().child(parent, name) {
            Some(Ok(ino)) => ino,
            Some(Err(())) => return Err(FsError::NotDir),
            None => return Err(FsError::NotFound),
        };
        self.getattr(ino)
    }

    /// The entries of directory `ino` from `offset` on, with `.` and `..` first.
    pub fn readdir(&self, ino: u64, offset: u64) -> Result<Vec<DirEntry>, FsError> {
        let ns = self.namespace();
        let node = ns.node(ino).ok_or(FsError::NotFound)?;
        let NodeKind::Dir { children } = &node.kind else {
            return Err(FsError::NotDir);
        };
        let kind_of = |ino: u64| match ns.node(ino).map(|n| &n.kind) {
            Some(NodeKind::File(_)) => Kind::File,
            _ => Kind::Dir,
        };
        let dots = [(".".to_string(), ino), ("..".to_string(), node.parent)];
        let all = dots.into_iter().chain(children.iter().cloned());
        Ok(all
            .enumerate()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .map(|(i, (name, child))| DirEntry {
                ino: child,
                kind: kind_of(child),
                name,
                next_offset: i as u64 + 1,
            })
            .collect())
    }

    /// Checks that `ino` can be opened with these access flags.
    pub fn open(&self, ino: u64, write: bool) -> Result<(), FsError> {
        let ns = self.namespace();
        match &ns.node(ino).ok_or(FsError::NotFound)?.kind {
            NodeKind::Dir { .. } if write => Err(FsError::IsDir),
            _ if write => Err(FsError::ReadOnly),
            _ => Ok(()),
        }
    }

    /// The content of file `ino` (produced on first access, then shared).
    pub fn content(&self, ino: u64) -> Result<Bytes, FsError> {
        Ok(self.blob(ino)?.bytes()?)
    }

    fn blob(&self, ino: u64) -> Result<Arc<Blob>, FsError> {
        match &self.namespace().node(ino).ok_or(FsError::NotFound)?.kind {
            NodeKind::File(blob) => Ok(blob.clone()),
            NodeKind::Dir { .. } => Err(FsError::IsDir),
        }
    }

    /// Up to `size` bytes of file `ino` from `offset`: a range of the shared content, no copy.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Bytes, FsError> {
        let content = self.content(ino)?;
        let start = offset.min(content.len());
        let len = u64::from(size).min(content.len() - start);
        content
            .slice(start, len)
            .ok_or_else(|| FsError::Internal("read range".into()))
    }

    /// Numbers for `statfs`.
    pub fn stats(&self) -> FsStats {
        let ns = self.namespace();
        let bytes = ns
            .nodes()
            .filter_map(|(_, n)| match &n.kind {
                NodeKind::File(blob) => blob.known_len(),
                NodeKind::Dir { .. } => None,
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

#[cfg(test)]
mod tests;
