//! The FUSE adapter: translates kernel requests into core calls and core errors into errno.
//!
//! It holds no state of its own besides the core and the cache settings. Every operation runs
//! inside [`guarded`], so a panic in the core becomes `EIO` for that request instead of killing
//! a worker thread and hanging the mount. All errno choices live in [`errno`].

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::sync::{Condvar, Mutex, Weak};
use std::time::SystemTime;

use fuser::{
    BackingId, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenAccMode, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow, WriteFlags,
};

use crate::core::{Attr, DafFs};

mod attrs;
mod config;
mod errors;
mod kernel_cache;
mod page_fill;
mod process;

use attrs::{dot_attr, file_type, ttl};
pub use config::{mount_config, MountSettings};
pub use errors::errno;
use errors::{answer, guarded, guarded_on};
pub use kernel_cache::NotifierSlot;
use page_fill::PageFill;
use process::process_of;

/// More directory entries than one reply can hold (a reply is a page).
const READDIR_BATCH: usize = 256;

/// The FUSE face of a [`DafFs`].
#[derive(Debug)]
pub struct FuseAdapter {
    core: Arc<DafFs>,
    uid: u32,
    gid: u32,
    notifier: NotifierSlot,
    /// Whether the kernel reads whole source files and writes staged files itself (passthrough).
    passthrough: AtomicBool,
    /// Whether the kernel opens directories without asking (zero-message opendir): a
    /// directory's listing then costs no `opendir` and `releasedir` round trips.
    no_opendir: AtomicBool,
    /// Registered backing files: shared per inode while some handle uses them. Held while an
    /// open decides on an inode's backing file (no other lock is taken under it).
    backing_by_ino: Mutex<HashMap<u64, (Weak<BackingId>, kernel_cache::FileId)>>,
    /// Signalled (under `backing_by_ino`) when a release drops a handle's backing file: an open
    /// waiting for the previous file's handles to go (`backing_for`) looks again.
    backing_released: Condvar,
    /// The backing file of each open passthrough handle (taken without `backing_by_ino`).
    backing_by_fh: Mutex<HashMap<u64, Arc<BackingId>>>,
    /// Fills the page cache with large non-passthrough files while they are open.
    page_fill: PageFill,
    /// The threads that send invalidations (started with the first).
    invalidator: std::sync::OnceLock<Option<kernel_cache::Invalidators>>,
}

impl FuseAdapter {
    /// Serves `core`, owned by the given user and group.
    pub fn new(core: Arc<DafFs>, uid: u32, gid: u32) -> FuseAdapter {
        let notifier = NotifierSlot::default();
        FuseAdapter {
            core,
            uid,
            gid,
            page_fill: PageFill::new(notifier.clone()),
            notifier,
            passthrough: AtomicBool::new(false),
            no_opendir: AtomicBool::new(false),
            backing_by_ino: Mutex::default(),
            backing_released: Condvar::new(),
            backing_by_fh: Mutex::default(),
            invalidator: std::sync::OnceLock::new(),
        }
    }

    fn attr(&self, a: &Attr) -> FileAttr {
        attrs::file_attr(a, self.uid, self.gid)
    }
}

/// `FOPEN_NOFLUSH` for a handle opened for reading: its close commits nothing (`DafFs::flush`
/// returns at once for it), so the kernel does not send a FLUSH and wait for its reply at every
/// close (as with a file system without `flush`, e.g. `examples/fuse_ceiling.rs`).
fn close_flags(write: bool) -> FopenFlags {
    if write {
        FopenFlags::empty()
    } else {
        FopenFlags::FOPEN_NOFLUSH
    }
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The tree never changes while mounted: let the kernel serve `ls -l` from readdirplus.
        // An `O_TRUNC` open comes as one open that truncates, not an open and then a
        // truncation: a committed file opened so is replaced by an empty copy, not copied first
        // (and a document is not taken as written by the truncation).
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_ATOMIC_O_TRUNC;
        if let Err(missing) = config.add_capabilities(wanted) {
            log::debug!("kernel lacks {missing:?}");
        }
        // Directory handles hold nothing: a recursive listing of many small directories
        // (the Zarr view's arrays) then makes two requests per directory instead of four.
        let no_opendir = config
            .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        self.no_opendir.store(no_opendir, Ordering::Relaxed);
        // Whole source files (payloads of directory sources) are read by the kernel itself.
        let passthrough = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(1).is_ok();
        self.passthrough.store(passthrough, Ordering::Relaxed);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match guarded("lookup", || self.core.lookup(parent.0, name)) {
            Ok(a) => reply.entry(ttl(&a), &self.attr(&a), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match guarded("getattr", || self.core.getattr(ino.0)) {
            Ok(a) => reply.attr(ttl(&a), &self.attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY;
        let truncate = flags.0 & libc::O_TRUNC != 0;
        let opened = guarded_on(
            "open",
            || self.at(ino.0),
            || {
                Ok((
                    self.core.open(ino.0, write, truncate)?,
                    self.core.getattr(ino.0)?,
                ))
            },
        );
        if let (true, Ok((fh, _))) = (write, &opened) {
            self.record_opener(req, *fh);
        }
        let opened = opened.and_then(|(fh, a)| {
            match self.backing_for(ino.0, fh, write, |file| reply.open_backing(file)) {
                Ok(backing) => Ok((fh, a, backing)),
                Err(refused) => {
                    self.core.abandon(fh);
                    self.send_invalidations(&[]);
                    Err(refused)
                }
            }
        });
        // What an `O_TRUNC` open staged or dropped (the kernel forgets the size it has).
        self.send_invalidations(&[ino.0]);
        match opened {
            Ok((fh, a, backing)) => match backing {
                Some(id) => {
                    self.core.written_by_kernel(fh);
                    reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id);
                }
                // Without FOPEN_KEEP_CACHE the kernel drops its pages: a file found corrupt
                // after pages of it were cached reads as EIO from its next open on.
                // Its size shows 0: direct I/O, so that reads reach us (and fail) anyway.
                None if a.unknown_size => reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO),
                // Content that changes in place: no page cache, each handle reads its version
                // whole (direct I/O reads are not cut at a size the kernel cached).
                None if self.core.changes_in_place(ino.0) => {
                    reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO)
                }
                None if a.volatile || self.core.failed_check(ino.0) => {
                    reply.opened(FileHandle(fh), FopenFlags::empty())
                }
                None => {
                    // Committed content never changes under an open handle: keep the page cache.
                    reply.opened(
                        FileHandle(fh),
                        FopenFlags::FOPEN_KEEP_CACHE | close_flags(write),
                    );
                    // A ranged file (a packed array) is never produced whole: no page fill.
                    let content = || {
                        if self.core.is_ranged(ino.0) {
                            return None;
                        }
                        self.core.content(ino.0).ok()
                    };
                    let core = self.core.clone();
                    let settle = move || core.settle_check(ino.0);
                    self.page_fill.opened(ino.0, fh, a.size, content, settle);
                }
            },
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        // The reply borrows the shared bytes (a range of the source's map): no copy here.
        match guarded("read", || self.core.read(ino.0, fh.0, offset, size)) {
            Ok(bytes) => {
                reply.data(bytes.as_slice());
                self.page_fill.answered(fh.0, offset, bytes.len());
            }
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // ENOSYS tells a kernel that offers zero-message opendir to stop asking (it then opens
        // every directory itself, and sends no `releasedir` either).
        if self.no_opendir.load(Ordering::Relaxed) {
            reply.error(errors::no_opendir());
        } else {
            reply.opened(FileHandle(0), FopenFlags::empty());
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        // One reply holds a page of entries: the visit stops when it is full.
        match guarded("readdir", || {
            self.core
                .list_page(ino.0, offset, READDIR_BATCH, false, |e| {
                    reply.add(INodeNo(e.ino), e.next_offset, file_type(e.kind), e.name)
                })
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        // One reply holds a page of entries: only what fits is stat'ed. The kernel takes no
        // attributes from `.` and `..`: the parent of every array directory is not stat'ed
        // for each of them.
        match guarded("readdirplus", || {
            self.core
                .list_page(ino.0, offset, READDIR_BATCH, true, |e| {
                    let attr = e.attr.unwrap_or_else(|| dot_attr(e.ino));
                    reply.add(
                        INodeNo(e.ino),
                        e.next_offset,
                        e.name,
                        ttl(&attr),
                        &self.attr(&attr),
                        Generation(0),
                    )
                })
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    /// No file here is a device: every ioctl (`isatty`'s `TCGETS`, which Python's `open` asks)
    /// gets what a regular file answers, without a log line.
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(errors::no_ioctl());
    }

    /// Daf keeps no extended attributes: answered without a log line (see
    /// [`errors::no_xattrs`]).
    fn getxattr(&self, _: &Request, _: INodeNo, _: &OsStr, _: u32, reply: fuser::ReplyXattr) {
        reply.error(errors::no_xattrs());
    }

    fn listxattr(&self, _: &Request, _: INodeNo, _: u32, reply: fuser::ReplyXattr) {
        reply.error(errors::no_xattrs());
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let stats = self.core.stats();
        reply.statfs(
            stats.bytes.div_ceil(4096),
            0,
            0,
            stats.inodes,
            0,
            4096,
            255,
            4096,
        );
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mtime = mtime.map(|t| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => SystemTime::now(),
        });
        let result = guarded_on(
            "setattr",
            || self.at(ino.0),
            || self.core.setattr(ino.0, size, mtime),
        );
        self.send_invalidations(&[ino.0]);
        match result {
            Ok(a) => reply.attr(ttl(&a), &self.attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let exclusive = flags & libc::O_EXCL != 0;
        let created = guarded_on(
            "create",
            || self.at_child(parent.0, name),
            || self.core.create(parent.0, name, exclusive),
        );
        // The kernel holds the directory's lock: what the create changed there goes after it.
        self.send_invalidations(&[parent.0]);
        match created {
            Ok((a, fh)) => {
                self.record_opener(req, fh);
                let attr = self.attr(&a);
                match self.backing_for(a.ino, fh, true, |file| reply.open_backing(file)) {
                    Err(refused) => {
                        self.core.abandon(fh);
                        self.send_invalidations(&[]);
                        reply.error(refused);
                    }
                    Ok(Some(id)) => {
                        self.core.written_by_kernel(fh);
                        let flags = FopenFlags::empty();
                        let fh = FileHandle(fh);
                        reply.created_passthrough(ttl(&a), &attr, Generation(0), fh, flags, &id);
                    }
                    Ok(None) => {
                        let (fh, flags) = (FileHandle(fh), FopenFlags::empty());
                        reply.created(ttl(&a), &attr, Generation(0), fh, flags);
                    }
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match guarded_on(
            "write",
            || self.at(ino.0),
            || self.core.write(fh.0, offset, data),
        ) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // A forked child's close (its exec or exit) does not commit: only the opener's does.
        let closer = if self.core.close_needs_closer(fh.0) {
            process_of(req.pid())
        } else {
            None
        };
        let result = guarded_on("close", || self.at(ino.0), || self.core.flush(fh.0, closer));
        self.send_invalidations(&[]);
        answer(reply, result);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // Commits what a close by another process than the opener left (errors are logged).
        let _ = guarded("release", || {
            self.core.release(fh.0);
            Ok(())
        });
        self.page_fill.release(fh.0);
        let backing = self
            .backing_by_fh
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
        if let Some(backing) = backing {
            drop(backing);
            let _by_ino = self
                .backing_by_ino
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            self.backing_released.notify_all();
        }
        self.send_invalidations(&[]);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let at = || self.at(ino.0);
        let synced = guarded_on("fsync", at, || self.core.fsync(ino.0, fh.0));
        // A commit's invalidations, before the answer (the kernel holds the file's lock).
        self.send_invalidations(&[ino.0]);
        answer(reply, synced);
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // `fsync` of a directory finalizes the Zarr arrays being written under it.
        let finalize = || {
            self.core
                .path_of(ino.0)
                .map_or(Ok(()), |p| self.core.finalize(&p))
        };
        let finalized = guarded_on("fsync of directory", || self.at(ino.0), finalize);
        self.send_invalidations(&[ino.0]);
        answer(reply, finalized);
    }

    fn destroy(&mut self) {
        if let Err(e) = self.core.finalize("") {
            log::warn!("at unmount: {e}");
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let at = || self.at_child(parent.0, name);
        match guarded_on("mkdir", at, || self.core.mkdir(parent.0, name)) {
            Ok(a) => reply.entry(ttl(&a), &self.attr(&a), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let victim = self.child(parent, name);
        let at = || self.at_child(parent.0, name);
        let result = guarded_on("unlink", at, || self.core.unlink(parent.0, name));
        self.send_invalidations(&[parent.0, victim]);
        answer(reply, result);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let victim = self.child(parent, name);
        let at = || self.at_child(parent.0, name);
        let result = guarded_on("rmdir", at, || self.core.rmdir(parent.0, name));
        self.send_invalidations(&[parent.0, victim]);
        answer(reply, result);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        new_parent: INodeNo,
        new_name: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (source, target) = (self.child(parent, name), self.child(new_parent, new_name));
        let at = || {
            let to = self.at_child(new_parent.0, new_name);
            format!("{} to {to}", self.at_child(parent.0, name))
        };
        let result = guarded_on("rename", at, || {
            self.core.rename(parent.0, name, new_parent.0, new_name)
        });
        self.send_invalidations(&[parent.0, new_parent.0, source, target]);
        answer(reply, result);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        new_parent: INodeNo,
        new_name: &OsStr,
        reply: ReplyEntry,
    ) {
        let at = || {
            format!(
                "{} as {}",
                self.at(ino.0),
                self.at_child(new_parent.0, new_name)
            )
        };
        let result = guarded_on("link", at, || self.core.link(ino.0, new_parent.0, new_name));
        self.send_invalidations(&[new_parent.0, ino.0]);
        match result {
            Ok(a) => reply.entry(ttl(&a), &self.attr(&a), Generation(0)),
            Err(e) => reply.error(e),
        }
    }
}
