//! What the adapter tells the kernel about a node: its attributes in fuser's form, how long the
//! kernel may cache them, and the attributes sent for `.` and `..`.

use std::time::{Duration, SystemTime};

use fuser::{FileAttr, FileType, INodeNo};

use crate::core::{Attr, Kind};

/// How long the kernel may cache names and attributes of committed content. The tree changes
/// only through this mount's own commits and removals, which invalidate what they change (the
/// entries and their directories, in every view). An hour outlasts any listing: a recursive
/// listing of a million entries takes minutes, and with 60 s every sub-directory opened more
/// than a minute after its parent was listed cost one more `lookup`.
const TTL: Duration = Duration::from_secs(3600);

/// The same for files being written, whose size changes under other handles.
const STAGED_TTL: Duration = Duration::from_secs(1);

/// Attributes of a file that could not be produced: not cached, so each `stat` asks again.
const NO_TTL: Duration = Duration::ZERO;

pub(super) fn ttl(attr: &Attr) -> &'static Duration {
    if attr.unknown_size {
        &NO_TTL
    } else if attr.volatile {
        &STAGED_TTL
    } else {
        &TTL
    }
}

/// `a` as the kernel sees it, owned by `uid` and `gid`.
pub(super) fn file_attr(a: &Attr, uid: u32, gid: u32) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.mtime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid,
        gid,
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

/// What `readdirplus` sends for `.` and `..`, which the kernel ignores: not cached either.
pub(super) fn dot_attr(ino: u64) -> Attr {
    Attr {
        ino,
        kind: Kind::Dir,
        size: 0,
        perm: 0o555,
        nlink: 2,
        mtime: SystemTime::UNIX_EPOCH,
        volatile: false,
        unknown_size: true,
    }
}

pub(super) fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
    }
}
