//! The inode tree of a mount: view entries plus staged (being written) files and directories.
//!
//! A tree is immutable. A change of the data sets builds a new one (but for a local commit); a
//! change of staged or hidden paths only makes a new *version* of it ([`Namespace::edited`], `edit.rs`):
//! the built tables are shared, and a small overlay of replaced nodes and children lists is
//! consulted first. Inode numbers come
//! from an [`InodeTable`] that outlives the trees, so a path keeps its inode number for the whole
//! mount, whichever tree it is in. Directories keep their children sorted, so `readdir` offsets
//! are plain indices and lookups are binary searches. A directory's mtime is the latest of its own
//! and its descendants'. A node stores no path: its name (in one string of the tree's names, a
//! repeated short name stored once), its
//! parent, an index into the tree's few distinct times, and for a directory a range of the tree's
//! one array of children (inode numbers as `u32`), 24 bytes in all; paths are rebuilt from parents
//! when asked ([`Namespace::path`]). Every table is sized exactly once the tree is built.
//!
//! An *elidable* file (a view entry shown only if its blob exists, see `Blob::presence`) makes
//! its implied parent directories elidable too; such a node is present when its blob is (a file)
//! or when one of its children is (a directory). The tree itself never does I/O: it tells which
//! blobs still need asking ([`Namespace::unresolved`]) and answers from what is known.
//!
//! The sub-directory count of a large directory (its `st_nlink`) is kept once it is final (from
//! the build when none of its children may be absent), so a `stat` of it (a lookup, every `..`
//! of a recursive listing, the kernel's permission check of a path after an edit changed the
//! directory) does not count its children again; an edit moves it by the directories it adds
//! or takes out.

#[cfg(test)]
mod edit_large_tests;
#[cfg(test)]
mod edit_tests;
pub(super) mod inodes;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::stores::{lock, Blob};

pub use crate::core::namespace::inodes::{InodeTable, ROOT};

#[path = "build.rs"]
mod build;
#[path = "edit.rs"]
mod edit;

pub use edit::Edit;
use edit::Overlay;

/// What a path of the tree is made of.
#[derive(Clone, Debug)]
pub enum EntryKind {
    /// A directory.
    Dir,
    /// A committed (or synthesised) file: shared, immutable content.
    Blob(Arc<Blob>),
    /// A staged file: a file on disk that is being written through the mount.
    Staged(PathBuf),
}

/// One path of the tree.
#[derive(Clone, Debug)]
pub struct Entry {
    /// `/`-separated path from the mount root.
    pub path: String,
    /// Modification time (staged files read theirs from disk).
    pub mtime: SystemTime,
    /// What it is.
    pub kind: EntryKind,
    /// Shown only if its blob exists (see the module doc).
    pub elidable: bool,
}

/// What an inode is, as read from its node ([`Node::kind`]).
#[derive(Clone, Copy, Debug)]
pub enum NodeKind<'a> {
    /// A directory; its children's inodes, sorted by name, are [`Namespace::children`].
    Dir {
        /// Where its children are in the tree's array of children.
        children: Children,
    },
    /// A committed file.
    File(&'a Arc<Blob>),
    /// A staged file on disk.
    Staged(&'a StagedPath),
}

/// What a node being made is (see [`Node::new`]).
#[derive(Clone, Debug)]
pub(super) enum NewKind {
    /// A directory, its children placed later.
    Dir,
    /// A committed file.
    File(Arc<Blob>),
    /// A staged file on disk.
    Staged(StagedPath),
}

/// The disk path of a staged file, behind a thin pointer (a node stays at 24 bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedPath(Box<PathBuf>);

impl StagedPath {
    /// The staged file at `disk`.
    pub(super) fn new(disk: PathBuf) -> StagedPath {
        StagedPath(Box::new(disk))
    }
}

impl std::ops::Deref for StagedPath {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for StagedPath {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

/// A directory's children: a range of the tree's one array of children (see
/// [`Namespace::children`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct Children {
    start: u32,
    len: u32,
}

impl Children {
    /// Number of children.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the directory is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// What every node has besides its parent and name start: kept inside each variant of
/// [`Repr`], in the 7 bytes after its tag (packed: an alignment of 4 would push it past them),
/// so that a node is 24 bytes (as fields of [`Node`] beside an enum of 16 bytes, they made it
/// 32). Its fields are only copied, never borrowed.
#[derive(Clone, Copy, Debug)]
#[repr(C, packed)]
struct Meta {
    /// Its modification time, an index into the tree's times.
    mtime: u32,
    /// Its name's length (a name is at most `NAME_MAX` bytes).
    name_len: u16,
    /// Present only if its blob (a file) or one of its children (a directory) is.
    elidable: bool,
}

/// A node's kind with its [`Meta`].
#[derive(Clone, Debug)]
enum Repr {
    Dir { meta: Meta, children: Children },
    File { meta: Meta, blob: Arc<Blob> },
    Staged { meta: Meta, disk: StagedPath },
}

/// One inode (24 bytes). Its name is [`Namespace::name`], its path [`Namespace::path`] (rebuilt
/// from its parents: a path is stored once per tree, as its last component), its modification
/// time [`Namespace::mtime`] (one of the tree's few distinct times).
#[derive(Clone, Debug)]
pub struct Node {
    /// Parent inode (the root is its own parent; inode numbers stay far below 2^32: see
    /// [`InodeTable`]).
    parent: u32,
    /// Where its name starts in the tree's names (a tree's names are far below 4 GiB).
    name_start: u32,
    /// Its kind, time, name length and `elidable` flag.
    repr: Repr,
}

impl Node {
    /// A node of `kind` (a directory with no children yet).
    fn new(
        parent: u32,
        name_start: u32,
        name_len: u16,
        mtime: u32,
        elidable: bool,
        kind: NewKind,
    ) -> Node {
        let meta = Meta {
            mtime,
            name_len,
            elidable,
        };
        Node {
            parent,
            name_start,
            repr: Repr::of(meta, kind),
        }
    }

    /// Its parent's inode number (the root is its own parent).
    pub fn parent(&self) -> u64 {
        u64::from(self.parent)
    }

    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        matches!(self.repr, Repr::Dir { .. })
    }

    /// What it is.
    pub fn kind(&self) -> NodeKind<'_> {
        match &self.repr {
            Repr::Dir { children, .. } => NodeKind::Dir {
                children: *children,
            },
            Repr::File { blob, .. } => NodeKind::File(blob),
            Repr::Staged { disk, .. } => NodeKind::Staged(disk),
        }
    }

    /// Shown only if its blob (a file) or one of its children (a directory) is.
    pub fn elidable(&self) -> bool {
        self.meta().elidable
    }

    fn meta(&self) -> &Meta {
        match &self.repr {
            Repr::Dir { meta, .. } | Repr::File { meta, .. } | Repr::Staged { meta, .. } => meta,
        }
    }

    fn meta_mut(&mut self) -> &mut Meta {
        match &mut self.repr {
            Repr::Dir { meta, .. } | Repr::File { meta, .. } | Repr::Staged { meta, .. } => meta,
        }
    }

    /// Its time, an index into the tree's times.
    fn mtime_index(&self) -> u32 {
        self.meta().mtime
    }

    fn set_mtime_index(&mut self, mtime: u32) {
        self.meta_mut().mtime = mtime;
    }

    fn set_elidable(&mut self, elidable: bool) {
        self.meta_mut().elidable = elidable;
    }

    fn name_len(&self) -> u16 {
        self.meta().name_len
    }

    /// Its children's range, for a directory.
    fn children_range(&self) -> Option<Children> {
        match self.repr {
            Repr::Dir { children, .. } => Some(children),
            _ => None,
        }
    }

    /// Gives a directory its children's range (nothing for a file).
    fn set_children_range(&mut self, range: Children) {
        if let Repr::Dir { children, .. } = &mut self.repr {
            *children = range;
        }
    }

    /// This node (same parent, name, time and flag) as `kind`.
    fn with_kind(&self, kind: NewKind) -> Node {
        Node {
            parent: self.parent,
            name_start: self.name_start,
            repr: Repr::of(*self.meta(), kind),
        }
    }

    /// This node with time `mtime` (an index into the tree's times).
    fn with_mtime_index(&self, mtime: u32) -> Node {
        let mut node = self.clone();
        node.set_mtime_index(mtime);
        node
    }
}

impl Repr {
    fn of(meta: Meta, kind: NewKind) -> Repr {
        match kind {
            NewKind::Dir => Repr::Dir {
                meta,
                children: Children::default(),
            },
            NewKind::File(blob) => Repr::File { meta, blob },
            NewKind::Staged(disk) => Repr::Staged { meta, disk },
        }
    }
}

/// [`ROOT`] as stored in a node.
const ROOT_U32: u32 = 1;

/// Directories with at least this many children keep their final sub-directory count.
const LARGE_DIR: usize = 64;

/// The tables a build makes, shared by every version edited from it.
#[derive(Debug)]
struct Tables {
    nodes: NodeTable,
    /// The children of every directory, back to back, each directory's sorted by name.
    children: Box<[u32]>,
    /// The names of all nodes, back to back.
    names: String,
    /// The distinct modification times of the nodes.
    mtimes: Vec<SystemTime>,
}

/// All inodes of one version of the tree: the built tables, and what edits changed since.
#[derive(Debug)]
pub struct Namespace {
    base: Arc<Tables>,
    /// Nodes and children lists replaced since the build; names and times added since are
    /// numbered after the base's (a node's `name_start` and `mtime` index either).
    overlay: Overlay,
    /// Number of inodes.
    len: usize,
    /// [`Namespace::subdirs`] of large directories, once no child's presence is unknown.
    subdirs_kept: Mutex<HashMap<u64, u32, foldhash::fast::RandomState>>,
}

impl Namespace {
    /// A tree of freshly built tables.
    fn from_tables(
        nodes: NodeTable,
        children: Box<[u32]>,
        names: String,
        mtimes: Vec<SystemTime>,
        kept: HashMap<u64, u32, foldhash::fast::RandomState>,
    ) -> Namespace {
        let len = nodes.len;
        Namespace {
            base: Arc::new(Tables {
                nodes,
                children,
                names,
                mtimes,
            }),
            overlay: Overlay::default(),
            len,
            subdirs_kept: Mutex::new(kept),
        }
    }

    /// The modification time of `node`.
    pub fn mtime(&self, node: &Node) -> SystemTime {
        let at = node.mtime_index() as usize;
        let base = &self.base.mtimes;
        match at.checked_sub(base.len()) {
            None => base.get(at),
            Some(at) => self.overlay.mtimes.get(at),
        }
        .copied()
        .unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// The inode `ino`.
    pub fn node(&self, ino: u64) -> Option<&Node> {
        if !self.overlay.nodes.is_empty() {
            if let Some(node) = self.overlay.nodes.get(&ino) {
                #[cfg(test)]
                VISITS.with(|v| v.set(v.get() + 1));
                return node.as_ref();
            }
        }
        self.base.nodes.get(ino)
    }

    /// The children of directory `ino`, sorted by name (empty for a file or an unknown inode).
    pub fn children(&self, ino: u64) -> &[u32] {
        if let Some(children) = self.overlay.children.get(&ino) {
            return children;
        }
        match self.node(ino).map(Node::kind) {
            Some(NodeKind::Dir { children }) => slice_of(&self.base.children, children),
            _ => &[],
        }
    }

    /// The name of inode `ino` in its directory ("" for the root or an unknown inode).
    pub fn name(&self, ino: u64) -> &str {
        self.node(ino).map_or("", |n| self.name_of(n))
    }

    /// Tests: the bytes of the built tables' names.
    #[cfg(test)]
    pub(super) fn names_len(&self) -> usize {
        self.base.names.len()
    }

    /// The name of `node`, in the base's names or the overlay's.
    fn name_of(&self, node: &Node) -> &str {
        let (start, len) = (node.name_start as usize, usize::from(node.name_len()));
        let base = &self.base.names;
        match start.checked_sub(base.len()) {
            None => base.get(start..start + len),
            Some(start) => self.overlay.names.get(start..start + len),
        }
        .unwrap_or("")
    }

    /// The `/`-separated path of inode `ino` from the mount root ("" for the root).
    pub fn path(&self, ino: u64) -> Option<String> {
        let mut names = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let node = self.node(at)?;
            names.push(self.name_of(node));
            at = node.parent();
        }
        names.reverse();
        Some(names.join("/"))
    }

    /// The child `name` of directory `parent`: `None` if absent, `Err(())` if `parent` is a file.
    pub fn child(&self, parent: u64, name: &str) -> Option<Result<u64, ()>> {
        match self.node(parent)?.kind() {
            NodeKind::Dir { .. } => {
                let children = self.children(parent);
                children
                    .binary_search_by(|c| self.name(u64::from(*c)).cmp(name))
                    .ok()
                    .map(|i| Ok(u64::from(children[i])))
            }
            NodeKind::File(_) | NodeKind::Staged(_) => Some(Err(())),
        }
    }

    /// Whether inode `ino` is shown, from what is known without I/O: `None` while a blob it
    /// depends on was not asked yet ([`Namespace::unresolved`]).
    pub fn present(&self, ino: u64) -> Option<bool> {
        let node = self.node(ino)?;
        if !node.elidable() {
            return Some(true);
        }
        match node.kind() {
            NodeKind::File(blob) => blob.presence(),
            NodeKind::Staged(_) => Some(true),
            NodeKind::Dir { .. } => {
                let mut unknown = false;
                for child in self.children(ino) {
                    match self.present(u64::from(*child)) {
                        Some(true) => return Some(true),
                        Some(false) => {}
                        None => unknown = true,
                    }
                }
                (!unknown).then_some(false)
            }
        }
    }

    /// Adds to `out` the blobs whose presence decides whether `ino` is shown and is not known yet.
    pub fn unresolved(&self, ino: u64, out: &mut Vec<Arc<Blob>>) {
        let Some(node) = self.node(ino).filter(|n| n.elidable()) else {
            return;
        };
        match node.kind() {
            NodeKind::File(blob) if blob.presence().is_none() => out.push(blob.clone()),
            NodeKind::Dir { .. } => {
                for child in self.children(ino) {
                    self.unresolved(u64::from(*child), out);
                }
            }
            _ => {}
        }
    }

    /// Number of inodes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree is only the root.
    pub fn is_empty(&self) -> bool {
        self.len <= 1
    }

    /// All inodes.
    pub fn nodes(&self) -> impl Iterator<Item = (u64, &Node)> {
        let overlay = &self.overlay.nodes;
        let base = (0u64..)
            .zip(&self.base.nodes.slots)
            .filter(move |(ino, _)| !overlay.contains_key(ino))
            .filter_map(|(ino, n)| Some((ino, n.as_ref()?)));
        base.chain(
            overlay
                .iter()
                .filter_map(|(ino, n)| Some((*ino, n.as_ref()?))),
        )
    }

    /// Number of sub-directories of directory `ino` (for `st_nlink`), counting an elidable one
    /// unless it is known absent. Kept for a large directory once final.
    pub fn subdirs(&self, ino: u64) -> u32 {
        if let Some(&kept) = lock(&self.subdirs_kept).get(&ino) {
            return kept;
        }
        if !self.node(ino).is_some_and(Node::is_dir) {
            return 0;
        }
        let children = self.children(ino);
        let mut unknown = false;
        let mut count = 0;
        for child in children.iter().map(|c| u64::from(*c)) {
            if self.node(child).is_some_and(Node::is_dir) {
                match self.present(child) {
                    Some(true) => count += 1,
                    Some(false) => {}
                    None => {
                        unknown = true;
                        count += 1;
                    }
                }
            }
        }
        if !unknown && children.len() >= LARGE_DIR {
            lock(&self.subdirs_kept).insert(ino, count);
        }
        count
    }

    /// Whether the sub-directory count of `ino` is kept (then a `stat` of it asks nothing of
    /// its children).
    pub fn subdirs_known(&self, ino: u64) -> bool {
        lock(&self.subdirs_kept).contains_key(&ino)
    }
}

#[cfg(test)]
thread_local! {
    /// Tests only: how many nodes this thread looked at (work, counted rather than timed).
    pub static VISITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Tests only: how many builds on this thread indexed their nodes in a hash table (see
    /// `build_stack.rs`).
    pub static INDEXED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// The children `range` of `all`.
fn slice_of(all: &[u32], range: Children) -> &[u32] {
    let start = range.start as usize;
    all.get(start..start + range.len as usize).unwrap_or(&[])
}

/// The name of `node` in `names`.
fn name_in<'a>(names: &'a str, node: &Node) -> &'a str {
    let (start, len) = (node.name_start as usize, usize::from(node.name_len()));
    names.get(start..start + len).unwrap_or("")
}

/// Nodes by inode number: inode numbers are small and dense (see [`InodeTable`]); one beyond
/// `u32::MAX` (never: billions of paths) is not kept.
#[derive(Debug, Default)]
struct NodeTable {
    slots: Vec<Option<Node>>,
    len: usize,
}

impl NodeTable {
    fn get(&self, ino: u64) -> Option<&Node> {
        #[cfg(test)]
        VISITS.with(|v| v.set(v.get() + 1));
        self.slots.get(usize::try_from(ino).ok()?)?.as_ref()
    }

    fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.slots.get_mut(usize::try_from(ino).ok()?)?.as_mut()
    }

    fn insert(&mut self, ino: u64, node: Node) {
        let Some(at) = u32::try_from(ino)
            .ok()
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        if self.slots.len() <= at {
            self.slots.resize_with(at + 1, || None);
        }
        if self.slots[at].replace(node).is_none() {
            self.len += 1;
        }
    }
}
