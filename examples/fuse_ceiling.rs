//! The FUSE ceiling of issue 12: the smallest filesystem that serves one byte range of one file
//! (a ZIP member) from a read-only map, with daf-mount's session settings and nothing else. It
//! shows one file, `data`, at its root: no views, no staging, no page-cache filler, one lookup.
//!
//! Same settings as daf-mount's: fuser 0.18, the same `mount_config` (worker threads, `clone_fd`,
//! read-only), `FOPEN_KEEP_CACHE` on open, replies borrowed from the map (no copy in the daemon),
//! and 1 MiB of readahead on the mount's bdi, as the daemon sets it. `scripts/bench_ceiling.py`
//! measures daf-mount's ZIP rows against it.
//!
//! ```text
//! cargo run --release --example fuse_ceiling -- ARCHIVE OFFSET LEN MOUNTPOINT [THREADS]
//! ```
//! It runs in the foreground until unmounted (`fusermount3 -u MOUNTPOINT`).

use std::ffi::OsStr;
use std::fs::File;
use std::path::Path;
use std::time::{Duration, SystemTime};

use daf_mount::fuse::mount_config;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry, ReplyOpen, Request,
};
use memmap2::Mmap;

mod common;

const TTL: Duration = Duration::from_secs(60);
const ROOT: u64 = 1;
const DATA: u64 = 2;

/// One byte range of a mapped file, shown as `/data`.
struct Ceiling {
    map: Mmap,
    start: usize,
    len: usize,
    uid: u32,
    gid: u32,
}

impl Ceiling {
    fn attr(&self, ino: u64) -> FileAttr {
        let (kind, size, perm, nlink) = if ino == ROOT {
            (FileType::Directory, 0, 0o555, 2)
        } else {
            (FileType::RegularFile, self.len as u64, 0o444, 1)
        };
        FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: SystemTime::UNIX_EPOCH,
            mtime: SystemTime::UNIX_EPOCH,
            ctime: SystemTime::UNIX_EPOCH,
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

impl Filesystem for Ceiling {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 == ROOT && name == "data" {
            reply.entry(&TTL, &self.attr(DATA), Generation(0));
        } else {
            reply.error(Errno::ENOENT);
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match ino.0 {
            ROOT | DATA => reply.attr(&TTL, &self.attr(ino.0)),
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match ino.0 {
            DATA => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            _ => reply.error(Errno::EISDIR),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ino.0 != DATA {
            return reply.error(Errno::EISDIR);
        }
        let from = usize::try_from(offset).unwrap_or(usize::MAX).min(self.len);
        let to = from.saturating_add(size as usize).min(self.len);
        reply.data(&self.map[self.start + from..self.start + to]);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if ino.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let entries = [
            (ROOT, FileType::Directory, "."),
            (ROOT, FileType::Directory, ".."),
            (DATA, FileType::RegularFile, "data"),
        ];
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                break;
            }
        }
        reply.ok();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, archive, offset, len, mountpoint, rest @ ..] = args.as_slice() else {
        return Err("usage: fuse_ceiling ARCHIVE OFFSET LEN MOUNTPOINT [THREADS]".into());
    };
    let map = daf_mount::sys::map_readonly(&File::open(archive)?)?;
    let (start, len): (usize, usize) = (offset.parse()?, len.parse()?);
    if start.checked_add(len).is_none_or(|end| end > map.len()) {
        return Err(format!("{start}+{len} is past the end of {archive}").into());
    }
    let settings = common::settings("fuse-ceiling", rest.first(), true)?;
    let fs = Ceiling {
        map,
        start,
        len,
        uid: nix::unistd::getuid().as_raw(),
        gid: nix::unistd::getgid().as_raw(),
    };
    let session = fuser::spawn_mount(fs, mountpoint, &mount_config(&settings))?;
    common::set_readahead("fuse_ceiling", Path::new(mountpoint));
    println!("READY");
    session.join()?;
    Ok(())
}
