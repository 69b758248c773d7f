//! The listing ceiling of issue 12: the smallest filesystem that shows a directory tree's names and
//! attributes, all held in memory, with daf-mount's session settings and nothing else. It reads the
//! tree of a native directory once at start (names, kinds, sizes, modes, mtimes; no content: every
//! file reads as empty) and answers `lookup`, `getattr` and `readdirplus` from that table.
//!
//! Same settings as daf-mount's: fuser 0.18, the same `mount_config` (worker threads, `clone_fd`,
//! read-only), readdirplus always (`FUSE_DO_READDIRPLUS`, `FUSE_READDIRPLUS_AUTO`,
//! `FUSE_PARALLEL_DIROPS`), no `opendir` (`FUSE_NO_OPENDIR_SUPPORT`: two requests per directory
//! listed), pages of 256 entries with `.` and `..`, names and attributes cached for an hour.
//! `scripts/bench_scale_rows.py` lists the native copy of the Zarr view through it: what any FUSE
//! filesystem pays for that `ls -lR`.
//!
//! ```text
//! cargo run --release --example fuse_tree_ceiling -- DIRECTORY MOUNTPOINT [THREADS]
//! ```
//! It prints `READY` once mounted and runs until unmounted (`fusermount3 -u MOUNTPOINT`).

use std::ffi::OsStr;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use daf_mount::fuse::mount_config;
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, OpenFlags, ReplyAttr, ReplyDirectory, ReplyDirectoryPlus, ReplyEntry, ReplyOpen,
    Request,
};

mod common;

const TTL: Duration = Duration::from_secs(3600);
const ROOT: u64 = 1;
/// Entries per `readdirplus` reply, as daf-mount's `READDIR_BATCH`.
const BATCH: usize = 256;

/// One path of the tree; inode `i + 1` is `nodes[i]`.
struct Node {
    name: Box<str>,
    parent: u64,
    attr: FileAttr,
    /// A directory's children's inodes, sorted by name.
    children: Vec<u64>,
}

struct TreeCeiling {
    nodes: Vec<Node>,
}

impl TreeCeiling {
    /// The tree under `root`, read once (symbolic links shown as what they point to).
    fn load(root: &Path, uid: u32, gid: u32) -> std::io::Result<Self> {
        let mut tree = TreeCeiling { nodes: Vec::new() };
        let meta = std::fs::metadata(root)?;
        tree.push("", ROOT, &meta, uid, gid);
        let mut pending = vec![(ROOT, root.to_path_buf())];
        while let Some((ino, dir)) = pending.pop() {
            let mut children = Vec::new();
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                let meta = std::fs::metadata(entry.path())?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let child = tree.push(&name, ino, &meta, uid, gid);
                if meta.is_dir() {
                    pending.push((child, entry.path()));
                }
                children.push(child);
            }
            children.sort_by(|a, b| tree.node(*a).name.cmp(&tree.node(*b).name));
            tree.nodes[ino as usize - 1].children = children;
        }
        Ok(tree)
    }

    fn push(
        &mut self,
        name: &str,
        parent: u64,
        meta: &std::fs::Metadata,
        uid: u32,
        gid: u32,
    ) -> u64 {
        let ino = self.nodes.len() as u64 + 1;
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        let dir = meta.is_dir();
        let size = if dir { 0 } else { meta.len() };
        let attr = FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: mtime,
            mtime,
            ctime: mtime,
            crtime: mtime,
            kind: if dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            },
            perm: (meta.mode() & 0o555) as u16,
            nlink: meta.nlink() as u32,
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        };
        self.nodes.push(Node {
            name: name.into(),
            parent,
            attr,
            children: Vec::new(),
        });
        ino
    }

    fn node(&self, ino: u64) -> &Node {
        &self.nodes[ino as usize - 1]
    }

    fn get(&self, ino: INodeNo) -> Option<&Node> {
        self.nodes.get((ino.0 as usize).wrapping_sub(1))
    }

    /// A page of directory `ino` from `offset`, with `.` and `..`: (next offset, inode, name).
    fn page(&self, ino: INodeNo, offset: u64) -> Option<impl Iterator<Item = (u64, u64, &str)>> {
        let dir = self.get(ino)?;
        let from = usize::try_from(offset).unwrap_or(usize::MAX);
        let dots = [(ino.0, "."), (dir.parent, "..")];
        let dots = dots.into_iter().skip(from);
        // The children from `from` on, by index: a page costs its own entries only.
        let children = dir
            .children
            .get(from.saturating_sub(2)..)
            .unwrap_or_default();
        let children = children.iter().map(|c| (*c, &*self.node(*c).name));
        Some(
            dots.chain(children)
                .take(BATCH)
                .zip(from as u64 + 1..)
                .map(|((child, name), next)| (next, child, name)),
        )
    }
}

impl Filesystem for TreeCeiling {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let wanted = InitFlags::FUSE_DO_READDIRPLUS
            | InitFlags::FUSE_READDIRPLUS_AUTO
            | InitFlags::FUSE_PARALLEL_DIROPS
            | InitFlags::FUSE_NO_OPENDIR_SUPPORT;
        if let Err(missing) = config.add_capabilities(wanted) {
            eprintln!("fuse_tree_ceiling: the kernel lacks {missing:?}");
        }
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(dir) = self.get(parent) else {
            return reply.error(Errno::ENOENT);
        };
        let name = name.to_string_lossy();
        match dir
            .children
            .binary_search_by(|c| (*self.node(*c).name).cmp(&name))
        {
            Ok(i) => reply.entry(&TTL, &self.node(dir.children[i]).attr, Generation(0)),
            Err(_) => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.get(ino) {
            Some(node) => reply.attr(&TTL, &node.attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // As daf-mount: ENOSYS makes the kernel stop asking (zero-message opendir).
        reply.error(Errno::ENOSYS);
    }

    fn open(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::FOPEN_KEEP_CACHE);
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(entries) = self.page(ino, offset) else {
            return reply.error(Errno::ENOENT);
        };
        for (next, child, name) in entries {
            if reply.add(INodeNo(child), next, self.node(child).attr.kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let Some(entries) = self.page(ino, offset) else {
            return reply.error(Errno::ENOENT);
        };
        for (next, child, name) in entries {
            let attr = &self.node(child).attr;
            if reply.add(INodeNo(child), next, name, &TTL, attr, Generation(0)) {
                break;
            }
        }
        reply.ok();
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, directory, mountpoint, rest @ ..] = args.as_slice() else {
        return Err("usage: fuse_tree_ceiling DIRECTORY MOUNTPOINT [THREADS]".into());
    };
    let settings = common::settings("fuse-tree-ceiling", rest.first(), true)?;
    let uid = nix::unistd::getuid().as_raw();
    let gid = nix::unistd::getgid().as_raw();
    let fs = TreeCeiling::load(Path::new(directory), uid, gid)?;
    eprintln!("fuse_tree_ceiling: {} entries", fs.nodes.len());
    let session = fuser::spawn_mount(fs, mountpoint, &mount_config(&settings))?;
    common::set_readahead("fuse_tree_ceiling", Path::new(mountpoint));
    println!("READY");
    session.join()?;
    Ok(())
}
