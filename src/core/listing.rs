//! Directory listings and attributes: the pages `readdir` and `readdirplus` answer, and what
//! `getattr` answers. A page is visited entry by entry under one look at the tree: names are
//! borrowed from it (nothing is copied), attributes are computed only for the entries the
//! reply has room for, and the visit stops as soon as the reply is full.

use super::namespace::{Namespace, Node, NodeKind};
use super::writer::{settled, Trust, Try};
use super::{presence, staged_io, Attr, DafFs, DirEntry, FsError, Kind};

/// One entry of a directory page, as the listing visits it.
#[derive(Debug)]
pub struct Listed<'a> {
    /// Inode number.
    pub ino: u64,
    /// Name, borrowed from the tree.
    pub name: &'a str,
    /// File or directory.
    pub kind: Kind,
    /// Offset to pass to continue after this entry.
    pub next_offset: u64,
    /// Its attributes, when asked for (`readdirplus`); never for `.` and `..`, whose
    /// attributes the kernel ignores.
    pub attr: Option<Attr>,
}

impl DafFs {
    /// Attributes of `ino` (not found once it is known absent: an elidable file whose blob does
    /// not exist).
    pub fn getattr(&self, ino: u64) -> Result<Attr, FsError> {
        settled(&self.writers, |trust| {
            self.attr_in(&self.namespace(), ino, trust)
        })
    }

    /// Attributes of `ino` in tree `ns`; [`Try::Again`] for a staged file a running commit
    /// renamed into the source (see [`settled`]).
    fn attr_in(&self, ns: &Namespace, ino: u64, trust: Trust) -> Result<Try<Attr>, FsError> {
        let node = ns.node(ino).ok_or(FsError::NotFound)?;
        // Its own presence, and its sub-directories' (for `st_nlink`) unless their count is kept:
        // a large directory is stat'ed for every `..` of a recursive listing.
        let children = match node.kind() {
            NodeKind::Dir { .. } if !ns.subdirs_known(ino) => ns.children(ino),
            _ => &[],
        };
        let children = children.iter().map(|c| u64::from(*c));
        presence::settle(ns, std::iter::once(ino).chain(children))?;
        if ns.present(ino) == Some(false) {
            return Err(FsError::NotFound);
        }
        let dir_perm = if self.writable() { 0o755 } else { 0o555 };
        Ok(Try::Done(match node.kind() {
            NodeKind::Dir { .. } => Attr {
                ino,
                kind: Kind::Dir,
                size: 0,
                perm: dir_perm,
                nlink: 2 + ns.subdirs(ino),
                mtime: ns.mtime(node),
                volatile: false,
                unknown_size: false,
            },
            NodeKind::File(blob) => {
                // A file that cannot be produced is still listed and stat-able (size 0);
                // reading it fails.
                let size = blob.len().ok();
                Attr {
                    ino,
                    kind: Kind::File,
                    size: size.unwrap_or(0),
                    perm: 0o444,
                    nlink: 1,
                    mtime: ns.mtime(node),
                    volatile: false,
                    unknown_size: size.is_none(),
                }
            }
            NodeKind::Staged(disk) => {
                let Try::Done(meta) = staged_io(std::fs::metadata(disk), trust)? else {
                    return Ok(Try::Again);
                };
                Attr {
                    ino,
                    kind: Kind::File,
                    size: meta.len(),
                    perm: 0o644,
                    nlink: 1,
                    mtime: meta.modified()?,
                    volatile: true,
                    unknown_size: false,
                }
            }
        }))
    }

    /// At most `limit` entries of directory `ino` from `offset` on, with `.` and `..` first.
    pub fn readdir(&self, ino: u64, offset: u64, limit: usize) -> Result<Vec<DirEntry>, FsError> {
        let mut out = Vec::new();
        self.list_page(ino, offset, limit, false, |e| {
            out.push(DirEntry {
                ino: e.ino,
                name: e.name.to_string(),
                kind: e.kind,
                next_offset: e.next_offset,
            });
            false
        })?;
        Ok(out)
    }

    /// Visits at most `limit` entries of directory `ino` from `offset` on (`.` and `..` first),
    /// with their attributes if `plus`, until `full` says the reply has no room for the entry
    /// it was given (that entry is then not counted, and the visit ends). An entry whose
    /// attributes cannot be had is skipped, as if hidden.
    pub fn list_page(
        &self,
        ino: u64,
        offset: u64,
        limit: usize,
        plus: bool,
        mut full: impl FnMut(Listed<'_>) -> bool,
    ) -> Result<(), FsError> {
        let ns = self.namespace();
        let node = ns.node(ino).ok_or(FsError::NotFound)?;
        let NodeKind::Dir { .. } = node.kind() else {
            return Err(FsError::NotDir);
        };
        let children = ns.children(ino);
        let len = children.len() + 2;
        let ino_at = |i: usize| match i {
            0 => ino,
            1 => node.parent(),
            _ => u64::from(children[i - 2]),
        };
        // Offsets count hidden children too, so they stay valid whatever is learnt meanwhile.
        // Presence is settled a batch at a time (a listing of a large directory asks for many
        // batches), and a batch is filled past hidden children: an empty one ends the listing.
        let mut listed = 0;
        let mut next = usize::try_from(offset).unwrap_or(usize::MAX);
        while listed < limit && next < len {
            let batch = next..len.min(next.saturating_add(limit));
            presence::settle(&ns, batch.clone().map(ino_at))?;
            for child in batch.map(ino_at) {
                next += 1;
                let name = match next {
                    1 => ".",
                    2 => "..",
                    _ if ns.present(child) == Some(false) => continue,
                    _ => ns.name(child),
                };
                let dot = next <= 2;
                let attr = if plus && !dot {
                    let attr = match self.attr_in(&ns, child, Trust::AsItIs) {
                        Ok(Try::Done(attr)) => Ok(attr),
                        // A staged file its commit renamed meanwhile: as the commit's tree shows.
                        Ok(Try::Again) => self.getattr(child),
                        Err(e) => Err(e),
                    };
                    match attr {
                        Ok(attr) => Some(attr),
                        Err(_) => continue,
                    }
                } else {
                    None
                };
                let kind = if ns.node(child).is_some_and(Node::is_dir) {
                    Kind::Dir
                } else {
                    Kind::File
                };
                let entry = Listed {
                    ino: child,
                    name,
                    kind,
                    next_offset: next as u64,
                    attr,
                };
                if full(entry) {
                    return Ok(());
                }
                listed += 1;
                if listed == limit {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}
