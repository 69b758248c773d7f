//! The FUSE floor of issue 12's commit rows: the smallest read-write filesystem that passes a
//! backing directory through, with daf-mount's session settings and nothing else (no model, no
//! views, no staging, no commit, no state lock: a table of inode numbers and one of open files).
//!
//! `lookup`, `getattr`, `setattr` (size, mode, times), `open`, `read`, `readdir(plus)`, `create`,
//! `write`, `flush`, `release`, `fsync(dir)`, `mkdir`, `unlink` and `rmdir` go to the backing
//! directory; reads and writes with `pread`/`pwrite` (`--io daemon`), or by the kernel itself on
//! the backing file, as daf-mount does for source and staged files (FUSE passthrough, `--io
//! kernel`, the default; daemon I/O if the kernel refuses it). Same settings as daf-mount's: fuser
//! 0.18, its `mount_config` (worker threads, `clone_fd`), the capabilities it asks at `init`
//! (readdirplus, parallel directory operations, no `opendir`, passthrough), one-hour entry and
//! attribute timeouts, `FOPEN_KEEP_CACHE`, 1 MiB of readahead. `scripts/bench_commit.py` (kind
//! "FUSE floor") runs the probes of daf-mount's directory commit row on it while 1 GiB is written.
//!
//! ```text
//! cargo run --example fuse_passthrough -- BACKING MOUNTPOINT [THREADS] [--io kernel|daemon]
//! ```
//! It runs in the foreground until unmounted (`fusermount3 -u MOUNTPOINT`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::{
    DirBuilderExt, DirEntryExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use daf_mount::fuse::mount_config;
use fuser::{
    BackingId, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, OpenFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, Request,
    TimeOrNow, WriteFlags,
};

mod common;

const TTL: Duration = Duration::from_secs(3600);
const ROOT: u64 = 1;

/// An open file: the backing file, and its passthrough id while the kernel does its I/O.
type Handle = (Arc<File>, Option<Arc<BackingId>>);

/// The backing directory `root`, passed through.
struct Passthrough {
    root: PathBuf,
    /// Mount inode → backing path (inode numbers are the backing ones, but for the root's).
    paths: RwLock<HashMap<u64, PathBuf>>,
    handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    /// Whether the kernel does reads and writes itself (asked with `--io kernel`, granted).
    kernel_io: AtomicBool,
    /// One passthrough id per inode, shared by its open handles (the kernel requires it).
    backing: Mutex<HashMap<u64, Weak<BackingId>>>,
}

fn errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

fn kind(t: fs::FileType) -> FileType {
    match (t.is_dir(), t.is_symlink()) {
        (true, _) => FileType::Directory,
        (_, true) => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

fn answer(reply: ReplyEmpty, result: Result<(), Errno>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    let nanos = u32::try_from(nsecs).unwrap_or(0);
    match u64::try_from(secs) {
        Ok(s) => UNIX_EPOCH + Duration::new(s, nanos),
        Err(_) => UNIX_EPOCH,
    }
}

impl Passthrough {
    fn path(&self, ino: u64) -> Result<PathBuf, Errno> {
        let paths = self.paths.read().unwrap_or_else(|p| p.into_inner());
        paths.get(&ino).cloned().ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: u64, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path(parent)?.join(name))
    }

    /// The attributes of backing path `path`, shown as inode `ino` (its own, but for the root).
    fn attr(&self, path: &Path, meta: &fs::Metadata) -> FileAttr {
        let ino = if path == self.root { ROOT } else { meta.ino() };
        let kind = kind(meta.file_type());
        FileAttr {
            ino: INodeNo(ino),
            size: meta.len(),
            blocks: meta.blocks(),
            atime: time(meta.atime(), meta.atime_nsec()),
            mtime: time(meta.mtime(), meta.mtime_nsec()),
            ctime: time(meta.ctime(), meta.ctime_nsec()),
            crtime: UNIX_EPOCH,
            kind,
            perm: (meta.mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: meta.rdev() as u32,
            blksize: 4096,
            flags: 0,
        }
    }

    /// Looks `path` up: its attributes, its inode remembered.
    fn entry(&self, path: PathBuf) -> Result<FileAttr, Errno> {
        let meta = fs::symlink_metadata(&path).map_err(|e| errno(&e))?;
        let attr = self.attr(&path, &meta);
        let mut paths = self.paths.write().unwrap_or_else(|p| p.into_inner());
        paths.insert(attr.ino.0, path);
        Ok(attr)
    }

    /// Keeps `file` open as a new handle of inode `ino`; with kernel I/O, its passthrough id.
    fn keep(
        &self,
        ino: u64,
        file: File,
        open_backing: impl FnOnce(&File) -> std::io::Result<BackingId>,
    ) -> (u64, Option<Arc<BackingId>>) {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let backing = self
            .kernel_io
            .load(Ordering::Relaxed)
            .then(|| {
                let mut by_ino = self.backing.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(id) = by_ino.get(&ino).and_then(Weak::upgrade) {
                    return Some(id);
                }
                match open_backing(&file) {
                    Ok(id) => {
                        let id = Arc::new(id);
                        by_ino.insert(ino, Arc::downgrade(&id));
                        Some(id)
                    }
                    Err(e) => {
                        eprintln!("fuse_passthrough: passthrough refused ({e}): daemon I/O");
                        self.kernel_io.store(false, Ordering::Relaxed);
                        None
                    }
                }
            })
            .flatten();
        let handle = (Arc::new(file), backing.clone());
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        handles.insert(fh, handle);
        (fh, backing)
    }

    fn file(&self, fh: u64) -> Result<Arc<File>, Errno> {
        let handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        handles.get(&fh).map(|h| h.0.clone()).ok_or(Errno::EBADF)
    }
}

/// `open(2)` options for FUSE open flags (the access mode, `O_APPEND`, `O_TRUNC`).
fn options(flags: i32) -> OpenOptions {
    let mut options = OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => options.write(true),
        libc::O_RDWR => options.read(true).write(true),
        _ => options.read(true),
    };
    options.custom_flags(flags & (libc::O_APPEND | libc::O_TRUNC | libc::O_NOFOLLOW));
    options
}

fn to_time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl Filesystem for Passthrough {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // What daf-mount asks for (src/fuse/mod.rs).
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS;
        let _ = config.add_capabilities(wanted);
        let _ = config.add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT);
        if self.kernel_io.load(Ordering::Relaxed) {
            let granted = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
                && config.set_max_stack_depth(1).is_ok();
            self.kernel_io.store(granted, Ordering::Relaxed);
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent.0, name).and_then(|p| self.entry(p)) {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let attr = self.path(ino.0).and_then(|path| {
            let meta = fs::symlink_metadata(&path).map_err(|e| errno(&e))?;
            Ok(self.attr(&path, &meta))
        });
        match attr {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let done = (|| -> Result<FileAttr, Errno> {
            let path = self.path(ino.0)?;
            let io = |e: std::io::Error| errno(&e);
            if let Some(size) = size {
                match fh.map(|fh| self.file(fh.0)) {
                    Some(Ok(file)) => file.set_len(size).map_err(io)?,
                    _ => OpenOptions::new()
                        .write(true)
                        .open(&path)
                        .and_then(|f| f.set_len(size))
                        .map_err(io)?,
                }
            }
            if let Some(mode) = mode {
                fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(io)?;
            }
            if atime.is_some() || mtime.is_some() {
                let times = fs::FileTimes::new();
                let times = atime.map_or(times, |t| times.set_accessed(to_time(t)));
                let times = mtime.map_or(times, |t| times.set_modified(to_time(t)));
                File::open(&path)
                    .and_then(|f| f.set_times(times))
                    .map_err(io)?;
            }
            let meta = fs::symlink_metadata(&path).map_err(io)?;
            Ok(self.attr(&path, &meta))
        })();
        match done {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let made = self.child(parent.0, name).and_then(|path| {
            fs::DirBuilder::new()
                .mode(mode & !umask)
                .create(&path)
                .map_err(|e| errno(&e))?;
            self.entry(path)
        });
        match made {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let path = self.child(parent.0, name);
        answer(
            reply,
            path.and_then(|p| fs::remove_file(p).map_err(|e| errno(&e))),
        );
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let path = self.child(parent.0, name);
        answer(
            reply,
            path.and_then(|p| fs::remove_dir(p).map_err(|e| errno(&e))),
        );
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let opened = self
            .path(ino.0)
            .and_then(|path| options(flags.0).open(path).map_err(|e| errno(&e)));
        match opened {
            Ok(file) => match self.keep(ino.0, file, |f| reply.open_backing(f)) {
                (fh, Some(id)) => {
                    reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id)
                }
                (fh, None) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            },
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let created = self.child(parent.0, name).and_then(|path| {
            let mut options = options(flags);
            options.create(true).mode(mode & !umask);
            options.custom_flags(flags & (libc::O_APPEND | libc::O_TRUNC | libc::O_EXCL));
            let file = options.open(&path).map_err(|e| errno(&e))?;
            Ok((self.entry(path)?, file))
        });
        match created {
            Ok((attr, file)) => match self.keep(attr.ino.0, file, |f| reply.open_backing(f)) {
                (fh, Some(id)) => {
                    let flags = FopenFlags::empty();
                    reply.created_passthrough(
                        &TTL,
                        &attr,
                        Generation(0),
                        FileHandle(fh),
                        flags,
                        &id,
                    )
                }
                (fh, None) => {
                    let flags = FopenFlags::FOPEN_KEEP_CACHE;
                    reply.created(&TTL, &attr, Generation(0), FileHandle(fh), flags)
                }
            },
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let read = self.file(fh.0).and_then(|file| {
            let mut buf = vec![0; size as usize];
            let mut n = 0;
            while n < buf.len() {
                match file.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(errno(&e)),
                }
            }
            buf.truncate(n);
            Ok(buf)
        });
        match read {
            Ok(buf) => reply.data(&buf),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let written = self.file(fh.0).and_then(|file| {
            file.write_all_at(data, offset).map_err(|e| errno(&e))?;
            Ok(data.len() as u32)
        });
        match written {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&self, _req: &Request, _: INodeNo, _: FileHandle, _: LockOwner, reply: ReplyEmpty) {
        reply.ok();
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
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        let synced = self.file(fh.0).and_then(|file| {
            let done = if datasync {
                file.sync_data()
            } else {
                file.sync_all()
            };
            done.map_err(|e| errno(&e))
        });
        answer(reply, synced);
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _: FileHandle, _: bool, reply: ReplyEmpty) {
        let synced = self.path(ino.0).and_then(|path| {
            File::open(path)
                .and_then(|d| d.sync_all())
                .map_err(|e| errno(&e))
        });
        answer(reply, synced);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.listing(ino.0) {
            Ok(entries) => {
                let skip = usize::try_from(offset).unwrap_or(usize::MAX);
                for (i, (ino, kind, name)) in entries.iter().enumerate().skip(skip) {
                    if reply.add(INodeNo(*ino), i as u64 + 1, *kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    /// What daf-mount's kernel uses (readdirplus asked at `init`): entries with attributes.
    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let listed = self.listing(ino.0).and_then(|entries| {
            let dir = self.path(ino.0)?;
            let meta = fs::symlink_metadata(&dir).map_err(|e| errno(&e))?;
            Ok((entries, self.attr(&dir, &meta), dir))
        });
        match listed {
            Ok((entries, dir_attr, dir)) => {
                let skip = usize::try_from(offset).unwrap_or(usize::MAX);
                for (i, (_, _, name)) in entries.iter().enumerate().skip(skip) {
                    // The kernel ignores the attributes of `.` and `..`.
                    let attr = match i {
                        0 | 1 => dir_attr,
                        _ => match self.entry(dir.join(name)) {
                            Ok(attr) => attr,
                            Err(_) => continue,
                        },
                    };
                    let (ino, next) = (attr.ino, i as u64 + 1);
                    if reply.add(ino, next, name, &TTL, &attr, Generation(0)) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }
}

impl Passthrough {
    /// The entries of directory `ino`, `.` and `..` first: (inode, kind, name).
    fn listing(&self, ino: u64) -> Result<Vec<(u64, FileType, std::ffi::OsString)>, Errno> {
        let path = self.path(ino)?;
        let mut entries = vec![
            (ino, FileType::Directory, ".".into()),
            (ROOT, FileType::Directory, "..".into()),
        ];
        for entry in fs::read_dir(&path).map_err(|e| errno(&e))? {
            let entry = entry.map_err(|e| errno(&e))?;
            let kind = entry.file_type().map_or(FileType::RegularFile, kind);
            entries.push((entry.ino(), kind, entry.file_name()));
        }
        Ok(entries)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut kernel_io = true;
    if let Some(at) = args.iter().position(|a| a == "--io") {
        kernel_io = match args.get(at + 1).map(String::as_str) {
            Some("kernel") => true,
            Some("daemon") => false,
            _ => return Err("--io takes kernel or daemon".into()),
        };
        args.drain(at..at + 2);
    }
    let [backing, mountpoint, rest @ ..] = args.as_slice() else {
        return Err(
            "usage: fuse_passthrough BACKING MOUNTPOINT [THREADS] [--io kernel|daemon]".into(),
        );
    };
    let settings = common::settings("fuse-passthrough", rest.first(), false)?;
    let root = fs::canonicalize(backing)?;
    let fs = Passthrough {
        paths: RwLock::new(HashMap::from([(ROOT, root.clone())])),
        root,
        handles: Mutex::new(HashMap::new()),
        next_fh: AtomicU64::new(1),
        kernel_io: AtomicBool::new(kernel_io),
        backing: Mutex::new(HashMap::new()),
    };
    let session = fuser::spawn_mount(fs, mountpoint, &mount_config(&settings))?;
    common::set_readahead("fuse_passthrough", Path::new(mountpoint));
    println!("READY");
    session.join()?;
    Ok(())
}
