//! The inode tree of a mount: view entries plus staged (being written) files and directories.
//!
//! The tree is immutable; a change (a staged file, a commit) builds a new one. Inode numbers come
//! from an [`InodeTable`] that outlives the trees, so a path keeps its inode number for the whole
//! mount, whichever tree it is in. Directories keep their children sorted, so `readdir` offsets
//! are plain indices and lookups are binary searches. A directory's mtime is the latest of its own
//! and its descendants'.
//!
//! An *elidable* file (a view entry shown only if its blob exists, see `Blob::presence`) makes
//! its implied parent directories elidable too; such a node is present when its blob is (a file)
//! or when one of its children is (a directory). The tree itself never does I/O: it tells which
//! blobs still need asking ([`Namespace::unresolved`]) and answers from what is known.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::stores::Blob;

/// Inode number of the mount root.
pub const ROOT: u64 = 1;

/// Where an inode sits: its parent and its name (a range of [`InodeTable::names`]).
#[derive(Clone, Copy, Debug)]
struct Link {
    parent: u64,
    start: usize,
    len: usize,
}

/// Path → inode number, for the life of the mount. Stored by (parent inode, name), the names
/// back to back in one string, so a path costs its last component and about 30 bytes however
/// deep it is (a million paths: about 40 MB less than a map of full paths).
#[derive(Debug)]
pub struct InodeTable {
    /// Every name given an inode, back to back (a renamed inode's old name stays, unused).
    names: String,
    /// By inode number (index 0 unused; the root is its own parent, with no name).
    links: Vec<Link>,
    /// Inode numbers by (parent, name), hashed with foldhash (seeded per process).
    by_link: HashTable<u64>,
    hasher: foldhash::fast::RandomState,
}

impl Default for InodeTable {
    fn default() -> InodeTable {
        let root = Link {
            parent: ROOT,
            start: 0,
            len: 0,
        };
        InodeTable {
            names: String::new(),
            links: vec![root, root],
            by_link: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
        }
    }
}

impl InodeTable {
    /// The inode number of `path`, assigned on first use (with its parents').
    pub fn ino(&mut self, path: &str) -> u64 {
        path.split('/')
            .filter(|c| !c.is_empty())
            .fold(ROOT, |dir, name| self.child(dir, name))
    }

    /// The inode number of `name` in directory `parent`, assigned on first use.
    pub fn child(&mut self, parent: u64, name: &str) -> u64 {
        if let Some(ino) = self.find(parent, name) {
            return ino;
        }
        let ino = self.links.len() as u64;
        let start = self.names.len();
        self.names.push_str(name);
        self.links.push(Link {
            parent,
            start,
            len: name.len(),
        });
        self.insert(ino);
        ino
    }

    /// Gives `to` the inode number of `from` (a rename: the kernel keeps the inode).
    pub fn rename(&mut self, from: &str, to: &str) {
        let Some(ino) = self.resolve(from).filter(|&ino| ino != ROOT) else {
            return;
        };
        let (dir, name) = to.rsplit_once('/').unwrap_or(("", to));
        if name.is_empty() {
            return;
        }
        self.unlink(ino);
        let parent = self.ino(dir);
        if let Some(displaced) = self.find(parent, name) {
            self.unlink(displaced);
        }
        let start = self.names.len();
        self.names.push_str(name);
        if let Some(link) = usize::try_from(ino).ok().and_then(|i| self.links.get_mut(i)) {
            *link = Link {
                parent,
                start,
                len: name.len(),
            };
        }
        self.insert(ino);
    }

    /// The inode number of `path` if it has one.
    fn resolve(&self, path: &str) -> Option<u64> {
        path.split('/')
            .filter(|c| !c.is_empty())
            .try_fold(ROOT, |dir, name| self.find(dir, name))
    }

    fn link(&self, ino: u64) -> Option<(u64, &str)> {
        let link = self.links.get(usize::try_from(ino).ok()?)?;
        Some((link.parent, self.names.get(link.start..link.start + link.len)?))
    }

    fn hash(&self, parent: u64, name: &str) -> u64 {
        self.hasher.hash_one((parent, name))
    }

    fn find(&self, parent: u64, name: &str) -> Option<u64> {
        let hash = self.hash(parent, name);
        self.by_link
            .find(hash, |&ino| self.link(ino) == Some((parent, name)))
            .copied()
    }

    fn insert(&mut self, ino: u64) {
        let Some((parent, name)) = self.link(ino) else {
            return;
        };
        let hash = self.hash(parent, name);
        let (links, names, hasher) = (&self.links, &self.names, &self.hasher);
        self.by_link.insert_unique(hash, ino, |&other| {
            let link = usize::try_from(other).ok().and_then(|i| links.get(i));
            let name = link.and_then(|l| names.get(l.start..l.start + l.len));
            hasher.hash_one((link.map_or(0, |l| l.parent), name.unwrap_or("")))
        });
    }

    /// Takes `ino` out of the map (its link stays until it is given another).
    fn unlink(&mut self, ino: u64) {
        let Some((parent, name)) = self.link(ino) else {
            return;
        };
        let hash = self.hash(parent, name);
        if let Ok(entry) = self.by_link.find_entry(hash, |&other| other == ino) {
            entry.remove();
        }
    }
}

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

/// What an inode is.
#[derive(Debug)]
pub enum NodeKind {
    /// A directory with its children's inodes, sorted by name.
    Dir {
        /// Inode numbers, sorted by name ([`Namespace::name`]).
        children: Vec<u64>,
    },
    /// A committed file.
    File(Arc<Blob>),
    /// A staged file on disk.
    Staged(PathBuf),
}

/// One inode. Its name is [`Namespace::name`], its path [`Namespace::path`] (rebuilt from its
/// parents: a path is stored once per tree, as its last component).
#[derive(Debug)]
pub struct Node {
    /// Parent inode (the root is its own parent).
    pub parent: u64,
    /// Where its name is in the tree's names.
    name: (usize, usize),
    /// Modification time.
    pub mtime: SystemTime,
    /// Directory or file.
    pub kind: NodeKind,
    /// Present only if its blob (a file) or one of its children (a directory) is.
    pub elidable: bool,
}

impl Node {
    /// Whether this is a directory.
    pub fn is_dir(&self) -> bool {
        matches!(self.kind, NodeKind::Dir { .. })
    }
}

/// All inodes of one version of the tree.
#[derive(Debug)]
pub struct Namespace {
    nodes: NodeTable,
    /// The names of all nodes, back to back.
    names: String,
}

impl Namespace {
    /// Builds the tree. Parents are created as needed. Later entries replace earlier files at the
    /// same path (a staged file hides the committed one it is replacing); a path used both as a
    /// file and as a directory keeps its first use (the conflict is logged).
    pub fn build(
        entries: impl IntoIterator<Item = Entry>,
        root_mtime: SystemTime,
        inodes: &mut InodeTable,
    ) -> Namespace {
        let root = Node {
            parent: ROOT,
            name: (0, 0),
            mtime: root_mtime,
            kind: NodeKind::Dir {
                children: Vec::new(),
            },
            elidable: false,
        };
        let mut nodes = NodeTable::default();
        nodes.insert(ROOT, root);
        let mut builder = Builder {
            nodes,
            names: String::new(),
            inodes,
            depth: vec![vec![ROOT]],
            last_dir: (String::new(), Some(ROOT), false),
        };
        for entry in entries {
            builder.add(entry);
        }
        let Builder {
            mut nodes,
            mut names,
            depth,
            ..
        } = builder;
        names.shrink_to_fit();
        nodes.slots.shrink_to_fit();
        // Children sorted by name: taken out of the table while sorting (the sort reads names).
        for at in 0..nodes.slots.len() {
            let mut children = match nodes.slots[at].as_mut().map(|n| &mut n.kind) {
                Some(NodeKind::Dir { children }) => std::mem::take(children),
                _ => continue,
            };
            let name = |ino: &u64| nodes.get(*ino).map_or("", |n| name_in(&names, n));
            children.sort_unstable_by(|a, b| name(a).cmp(name(b)));
            children.shrink_to_fit();
            if let Some(NodeKind::Dir { children: slot }) =
                nodes.slots[at].as_mut().map(|n| &mut n.kind)
            {
                *slot = children;
            }
        }
        // Deepest first: propagate mtimes upward.
        for ino in depth.iter().skip(1).rev().flatten() {
            let Some((mtime, parent)) = nodes.get(*ino).map(|n| (n.mtime, n.parent)) else {
                continue;
            };
            if let Some(parent) = nodes.get_mut(parent) {
                parent.mtime = parent.mtime.max(mtime);
            }
        }
        Namespace { nodes, names }
    }

    /// The inode `ino`.
    pub fn node(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(ino)
    }

    /// The name of inode `ino` in its directory ("" for the root or an unknown inode).
    pub fn name(&self, ino: u64) -> &str {
        self.node(ino).map_or("", |n| name_in(&self.names, n))
    }

    /// The `/`-separated path of inode `ino` from the mount root ("" for the root).
    pub fn path(&self, ino: u64) -> Option<String> {
        let mut names = Vec::new();
        let mut at = ino;
        while at != ROOT {
            let node = self.node(at)?;
            names.push(name_in(&self.names, node));
            at = node.parent;
        }
        names.reverse();
        Some(names.join("/"))
    }

    /// The child `name` of directory `parent`: `None` if absent, `Err(())` if `parent` is a file.
    pub fn child(&self, parent: u64, name: &str) -> Option<Result<u64, ()>> {
        match &self.node(parent)?.kind {
            NodeKind::Dir { children } => children
                .binary_search_by(|c| self.name(*c).cmp(name))
                .ok()
                .map(|i| Ok(children[i])),
            NodeKind::File(_) | NodeKind::Staged(_) => Some(Err(())),
        }
    }

    /// Whether inode `ino` is shown, from what is known without I/O: `None` while a blob it
    /// depends on was not asked yet ([`Namespace::unresolved`]).
    pub fn present(&self, ino: u64) -> Option<bool> {
        let node = self.node(ino)?;
        if !node.elidable {
            return Some(true);
        }
        match &node.kind {
            NodeKind::File(blob) => blob.presence(),
            NodeKind::Staged(_) => Some(true),
            NodeKind::Dir { children } => {
                let mut unknown = false;
                for child in children {
                    match self.present(*child) {
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
        let Some(node) = self.node(ino).filter(|n| n.elidable) else {
            return;
        };
        match &node.kind {
            NodeKind::File(blob) if blob.presence().is_none() => out.push(blob.clone()),
            NodeKind::Dir { children } => {
                for child in children {
                    self.unresolved(*child, out);
                }
            }
            _ => {}
        }
    }

    /// Number of inodes.
    pub fn len(&self) -> usize {
        self.nodes.len
    }

    /// Whether the tree is only the root.
    pub fn is_empty(&self) -> bool {
        self.nodes.len <= 1
    }

    /// All inodes.
    pub fn nodes(&self) -> impl Iterator<Item = (u64, &Node)> {
        (0u64..)
            .zip(&self.nodes.slots)
            .filter_map(|(ino, n)| Some((ino, n.as_ref()?)))
    }

    /// Number of sub-directories of `node` (for `st_nlink`), counting an elidable one unless it
    /// is known absent.
    pub fn subdirs(&self, node: &Node) -> u32 {
        match &node.kind {
            NodeKind::Dir { children } => children
                .iter()
                .filter(|ino| {
                    self.node(**ino).is_some_and(Node::is_dir) && self.present(**ino) != Some(false)
                })
                .count() as u32,
            _ => 0,
        }
    }
}

/// The name of `node` in `names`.
fn name_in<'a>(names: &'a str, node: &Node) -> &'a str {
    let (start, len) = node.name;
    names.get(start..start + len).unwrap_or("")
}

/// Nodes by inode number: inode numbers are small and dense (see [`InodeTable`]).
#[derive(Debug, Default)]
struct NodeTable {
    slots: Vec<Option<Node>>,
    len: usize,
}

impl NodeTable {
    fn get(&self, ino: u64) -> Option<&Node> {
        self.slots.get(usize::try_from(ino).ok()?)?.as_ref()
    }

    fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.slots.get_mut(usize::try_from(ino).ok()?)?.as_mut()
    }

    fn insert(&mut self, ino: u64, node: Node) {
        let Ok(at) = usize::try_from(ino) else {
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

/// The state of one [`Namespace::build`].
struct Builder<'a> {
    nodes: NodeTable,
    names: String,
    inodes: &'a mut InodeTable,
    /// Inodes by depth (the root is depth 0), for the mtime pass.
    depth: Vec<Vec<u64>>,
    /// The directory of the previous entry (`None`: blocked by a file), and whether that entry
    /// was elidable: entries come grouped by directory, so most need no walk from the root.
    last_dir: (String, Option<u64>, bool),
}

impl Builder<'_> {
    fn add(&mut self, entry: Entry) {
        let path = if entry.path.split('/').any(str::is_empty) {
            entry
                .path
                .split('/')
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
                .join("/")
        } else {
            entry.path
        };
        if path.is_empty() {
            if let Some(root) = self.nodes.get_mut(ROOT) {
                root.mtime = root.mtime.max(entry.mtime);
            }
            return;
        }
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", &path));
        let parent = if self.last_dir.0 == dir && (entry.elidable || !self.last_dir.2) {
            self.last_dir.1
        } else {
            let parent = self.directory(dir, entry.mtime, entry.elidable);
            self.last_dir = (dir.to_string(), parent, entry.elidable);
            parent
        };
        let Some(parent) = parent else {
            log::warn!("{path}: shown both as a file and a directory, keeping the first");
            return;
        };
        let kind = match entry.kind {
            EntryKind::Dir => NodeKind::Dir {
                children: Vec::new(),
            },
            EntryKind::Blob(blob) => NodeKind::File(blob),
            EntryKind::Staged(path) => NodeKind::Staged(path),
        };
        let ino = self.inodes.child(parent, name);
        let existing = self.nodes.get(ino).map(Node::is_dir);
        match (existing, &kind) {
            (Some(true), NodeKind::File(_) | NodeKind::Staged(_))
            | (Some(false), NodeKind::Dir { .. }) => {
                log::warn!("{path}: shown both as a file and a directory, keeping the first");
            }
            (Some(true), NodeKind::Dir { .. }) => {
                if let Some(node) = self.nodes.get_mut(ino) {
                    node.elidable &= entry.elidable;
                }
            }
            (Some(false), _) => {
                // A file replacing a file: keep its place among the parent's children.
                if let Some(node) = self.nodes.get_mut(ino) {
                    node.kind = kind;
                    node.mtime = entry.mtime;
                    node.elidable = entry.elidable;
                }
            }
            (None, _) => {
                let depth = path.matches('/').count() + 1;
                self.insert(ino, parent, name, depth, entry.mtime, kind, entry.elidable);
            }
        }
    }

    /// The inode of directory `dir`, created (with its parents) if needed; `None` if a file is
    /// in the way. Directories implied by an elidable entry are elidable until another entry
    /// needs them.
    fn directory(&mut self, dir: &str, mtime: SystemTime, elidable: bool) -> Option<u64> {
        let mut parent = ROOT;
        for (depth, component) in dir.split('/').filter(|c| !c.is_empty()).enumerate() {
            let ino = self.inodes.child(parent, component);
            match self.nodes.get_mut(ino) {
                Some(node) if node.is_dir() => node.elidable &= elidable,
                Some(_) => return None,
                None => {
                    let kind = NodeKind::Dir {
                        children: Vec::new(),
                    };
                    self.insert(ino, parent, component, depth + 1, mtime, kind, elidable);
                }
            }
            parent = ino;
        }
        Some(parent)
    }

    #[allow(clippy::too_many_arguments)]
    fn insert(
        &mut self,
        ino: u64,
        parent: u64,
        name: &str,
        depth: usize,
        mtime: SystemTime,
        kind: NodeKind,
        elidable: bool,
    ) {
        if self.depth.len() <= depth {
            self.depth.resize_with(depth + 1, Vec::new);
        }
        self.depth[depth].push(ino);
        let start = self.names.len();
        self.names.push_str(name);
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: (start, name.len()),
                mtime,
                kind,
                elidable,
            },
        );
        if let Some(NodeKind::Dir { children }) = self.nodes.get_mut(parent).map(|p| &mut p.kind) {
            children.push(ino);
        }
    }
}
