//! The FUSE adapter: translates kernel requests into core calls and core errors into errno.
//!
//! It holds no state of its own besides the core and the cache settings. Every operation runs
//! inside [`guarded`], so a panic in the core becomes `EIO` for that request instead of killing
//! a worker thread and hanging the mount. All errno choices live in [`errno`].

use std::ffi::OsStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Config, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo,
    InitFlags, KernelConfig, LockOwner, MountOption, OpenAccMode, OpenFlags, ReplyAttr,
    ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyStatfs, ReplyWrite, Request, SessionACL, TimeOrNow, WriteFlags,
};

use crate::core::{Attr, DafFs, FsError, Kind};

/// How long the kernel may cache names and attributes. The tree is immutable while mounted.
const TTL: Duration = Duration::from_secs(60);

/// The errno for each core error: the one place where this mapping is decided.
pub fn errno(error: &FsError) -> Errno {
    match error {
        FsError::NotFound => Errno::ENOENT,
        FsError::NotDir => Errno::ENOTDIR,
        FsError::IsDir => Errno::EISDIR,
        FsError::ReadOnly => Errno::EROFS,
        FsError::Content(_) | FsError::Internal(_) => Errno::EIO,
    }
}

/// Runs one operation; a panic becomes [`FsError::Internal`], and errors worth knowing are logged.
fn guarded<T>(what: &str, op: impl FnOnce() -> Result<T, FsError>) -> Result<T, Errno> {
    let result = catch_unwind(AssertUnwindSafe(op)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        Err(FsError::Internal(message))
    });
    result.map_err(|e| {
        match &e {
            FsError::Content(_) | FsError::Internal(_) => log::error!("{what}: {e}"),
            _ => log::debug!("{what}: {e}"),
        }
        errno(&e)
    })
}

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountSettings {
    /// What `df`/`findmnt` show as the source.
    pub fsname: String,
    /// `allow_other`.
    pub allow_other: bool,
    /// `allow_root`.
    pub allow_root: bool,
    /// `auto_unmount` (needs one of the above).
    pub auto_unmount: bool,
    /// Worker threads.
    pub threads: usize,
}

/// The fuser configuration for these settings: a read-only `fuse.daf-mount` mount.
pub fn mount_config(settings: &MountSettings) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(settings.fsname.clone()),
        // fuser 0.18 drops MountOption::Subtype on the direct-mount path; this form survives.
        MountOption::CUSTOM("subtype=daf-mount".into()),
        MountOption::RO,
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    if settings.auto_unmount {
        config.mount_options.push(MountOption::AutoUnmount);
    }
    config.acl = match (settings.allow_other, settings.allow_root) {
        (true, _) => SessionACL::All,
        (false, true) => SessionACL::RootAndOwner,
        _ => SessionACL::Owner,
    };
    config.n_threads = Some(settings.threads.max(1));
    config.clone_fd = settings.threads > 1;
    config
}

/// The FUSE face of a [`DafFs`].
#[derive(Debug)]
pub struct FuseAdapter {
    core: Arc<DafFs>,
    uid: u32,
    gid: u32,
}

impl FuseAdapter {
    /// Serves `core`, owned by the given user and group.
    pub fn new(core: Arc<DafFs>, uid: u32, gid: u32) -> FuseAdapter {
        FuseAdapter { core, uid, gid }
    }

    fn attr(&self, a: &Attr) -> FileAttr {
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
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
    }
}

/// Answers a modification of the (read-only) tree.
fn refuse(what: &str) -> Errno {
    log::debug!("{what}: {}", FsError::ReadOnly);
    errno(&FsError::ReadOnly)
}

impl Filesystem for FuseAdapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // The tree never changes while mounted: let the kernel serve `ls -l` from readdirplus.
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS;
        if let Err(missing) = config.add_capabilities(wanted) {
            log::debug!("kernel lacks {missing:?}");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match guarded("lookup", || self.core.lookup(parent.0, name)) {
            Ok(a) => reply.entry(&TTL, &self.attr(&a), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match guarded("getattr", || self.core.getattr(ino.0)) {
            Ok(a) => reply.attr(&TTL, &self.attr(&a)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let write = flags.acc_mode() != OpenAccMode::O_RDONLY;
        match guarded("open", || self.core.open(ino.0, write)) {
            // Content never changes while mounted: keep the page cache across opens.
            Ok(()) => reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
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
        // The reply borrows the shared bytes (a range of the source's map): no copy here.
        match guarded("read", || self.core.read(ino.0, offset, size)) {
            Ok(bytes) => reply.data(bytes.as_slice()),
            Err(e) => reply.error(e),
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
        match guarded("readdir", || self.core.readdir(ino.0, offset)) {
            Ok(entries) => {
                for e in entries {
                    if reply.add(INodeNo(e.ino), e.next_offset, file_type(e.kind), &e.name) {
                        break;
                    }
                }
                reply.ok();
            }
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
        let entries = guarded("readdirplus", || {
            self.core
                .readdir(ino.0, offset)?
                .into_iter()
                .map(|e| Ok((self.core.getattr(e.ino)?, e)))
                .collect::<Result<Vec<_>, FsError>>()
        });
        match entries {
            Ok(entries) => {
                for (attr, e) in entries {
                    if reply.add(
                        INodeNo(e.ino),
                        e.next_offset,
                        &e.name,
                        &TTL,
                        &self.attr(&attr),
                        Generation(0),
                    ) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
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
        _ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        _size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        reply.error(refuse("setattr"));
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(refuse("mkdir"));
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(refuse("unlink"));
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(refuse("rmdir"));
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(refuse("rename"));
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(refuse("link"));
    }

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(refuse("create"));
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        reply.error(refuse("write"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_operation_answers_eio_instead_of_hanging() {
        let answer: Result<(), Errno> = guarded("test", || panic!("boom"));
        assert_eq!(answer.map_err(|e| e.code()), Err(libc::EIO));
    }

    #[test]
    fn errors_map_to_their_errno() {
        for (error, code) in [
            (FsError::NotFound, libc::ENOENT),
            (FsError::NotDir, libc::ENOTDIR),
            (FsError::IsDir, libc::EISDIR),
            (FsError::ReadOnly, libc::EROFS),
            (FsError::Internal("x".into()), libc::EIO),
        ] {
            assert_eq!(errno(&error).code(), code);
        }
    }
}
