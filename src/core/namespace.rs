//! The inode tree of a mount: view entries plus staged (being written) files and directories.
//!
//! The tree is immutable; a change (a staged file, a commit) builds a new one. Inode numbers come
//! from an [`InodeTable`] that outlives the trees, so a path keeps its inode number for the whole
//! mount, whichever tree it is in. Directories keep their children sorted, so `readdir` offsets
//! are plain indices and lookups are binary searches. A directory's mtime is the latest of its own
//! and its descendants'.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use crate::stores::Blob;

/// Inode number of the mount root.
pub const ROOT: u64 = 1;

/// Path → inode number, for the life of the mount.
#[derive(Debug)]
pub struct InodeTable {
    by_path: HashMap<String, u64>,
    next: u64,
}

impl Default for InodeTable {
    fn default() -> InodeTable {
        InodeTable {
            by_path: HashMap::from([(String::new(), ROOT)]),
            next: ROOT + 1,
        }
    }
}

impl InodeTable {
    /// The inode number of `path`, assigned on first use.
    pub fn ino(&mut self, path: &str) -> u64 {
        if let Some(&ino) = self.by_path.get(path) {
            return ino;
        }
        let ino = self.next;
        self.next += 1;
        self.by_path.insert(path.to_string(), ino);
        ino
    }

    /// Gives `to` the inode number of `from` (a rename: the kernel keeps the inode).
    pub fn rename(&mut self, from: &str, to: &str) {
        if let Some(ino) = self.by_path.remove(from) {
            self.by_path.insert(to.to_string(), ino);
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
}

/// What an inode is.
#[derive(Debug)]
pub enum NodeKind {
    /// A directory with its children, sorted by name.
    Dir {
        /// `(name, inode)` pairs, sorted by name.
        children: Vec<(String, u64)>,
    },
    /// A committed file.
    File(Arc<Blob>),
    /// A staged file on disk.
    Staged(PathBuf),
}

/// One inode.
#[derive(Debug)]
pub struct Node {
    /// Parent inode (the root is its own parent).
    pub parent: u64,
    /// Path from the mount root ("" for the root).
    pub path: String,
    /// Modification time.
    pub mtime: SystemTime,
    /// Directory or file.
    pub kind: NodeKind,
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
    nodes: HashMap<u64, Node>,
}

impl Namespace {
    /// Builds the tree. Parents are created as needed. Later entries replace earlier files at the
    /// same path (a staged file hides the committed one it is replacing); a path used both as a
    /// file and as a directory keeps its first use (the conflict is logged).
    pub fn build(
        entries: Vec<Entry>,
        root_mtime: SystemTime,
        inodes: &mut InodeTable,
    ) -> Namespace {
        let root = Node {
            parent: ROOT,
            path: String::new(),
            mtime: root_mtime,
            kind: NodeKind::Dir {
                children: Vec::new(),
            },
        };
        let mut nodes = HashMap::from([(ROOT, root)]);
        for entry in entries {
            let components: Vec<&str> = entry.path.split('/').filter(|c| !c.is_empty()).collect();
            let Some((last, dirs)) = components.split_last() else {
                if let Some(root) = nodes.get_mut(&ROOT) {
                    root.mtime = root.mtime.max(entry.mtime);
                }
                continue;
            };
            let mut parent = ROOT;
            let mut walked = String::new();
            let mut blocked = false;
            for dir in dirs {
                walked = if walked.is_empty() {
                    dir.to_string()
                } else {
                    format!("{walked}/{dir}")
                };
                let ino = inodes.ino(&walked);
                match nodes.get(&ino) {
                    Some(node) if node.is_dir() => {}
                    Some(_) => {
                        blocked = true;
                        break;
                    }
                    None => insert(
                        &mut nodes,
                        ino,
                        parent,
                        dir,
                        &walked,
                        entry.mtime,
                        NodeKind::Dir {
                            children: Vec::new(),
                        },
                    ),
                }
                parent = ino;
            }
            let full = components.join("/");
            let ino = inodes.ino(&full);
            let existing = nodes.get(&ino).map(Node::is_dir);
            let kind = match entry.kind {
                EntryKind::Dir => NodeKind::Dir {
                    children: Vec::new(),
                },
                EntryKind::Blob(blob) => NodeKind::File(blob),
                EntryKind::Staged(path) => NodeKind::Staged(path),
            };
            match (blocked, existing, &kind) {
                (true, ..)
                | (false, Some(true), NodeKind::File(_) | NodeKind::Staged(_))
                | (false, Some(false), NodeKind::Dir { .. }) => {
                    log::warn!(
                        "{}: shown both as a file and a directory, keeping the first",
                        entry.path
                    );
                }
                (false, Some(true), NodeKind::Dir { .. }) => {}
                (false, Some(false), _) => {
                    // A file replacing a file: keep its place among the parent's children.
                    if let Some(node) = nodes.get_mut(&ino) {
                        node.kind = kind;
                        node.mtime = entry.mtime;
                    }
                }
                (false, None, _) => insert(&mut nodes, ino, parent, last, &full, entry.mtime, kind),
            }
        }
        let mut order: Vec<(usize, u64)> = nodes
            .iter()
            .map(|(&ino, n)| {
                (
                    n.path.matches('/').count() + usize::from(!n.path.is_empty()),
                    ino,
                )
            })
            .collect();
        for node in nodes.values_mut() {
            if let NodeKind::Dir { children } = &mut node.kind {
                children.sort();
            }
        }
        // Deepest first: propagate mtimes upward.
        order.sort_unstable_by(|a, b| b.cmp(a));
        for (_, ino) in order {
            let Some((mtime, parent)) = nodes.get(&ino).map(|n| (n.mtime, n.parent)) else {
                continue;
            };
            if let Some(parent) = nodes.get_mut(&parent).filter(|_| ino != ROOT) {
                parent.mtime = parent.mtime.max(mtime);
            }
        }
        Namespace { nodes }
    }

    /// The inode `ino`.
    pub fn node(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    /// The child `name` of directory `parent`: `None` if absent, `Err(())` if `parent` is a file.
    pub fn child(&self, parent: u64, name: &str) -> Option<Result<u64, ()>> {
        match &self.node(parent)?.kind {
            NodeKind::Dir { children } => children
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
                .ok()
                .map(|i| Ok(children[i].1)),
            NodeKind::File(_) | NodeKind::Staged(_) => Some(Err(())),
        }
    }

    /// Number of inodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the tree is only the root.
    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }

    /// All inodes.
    pub fn nodes(&self) -> impl Iterator<Item = (u64, &Node)> {
        self.nodes.iter().map(|(&ino, n)| (ino, n))
    }

    /// Number of sub-directories of `node` (for `st_nlink`).
    pub fn subdirs(&self, node: &Node) -> u32 {
        match &node.kind {
            NodeKind::Dir { children } => children
                .iter()
                .filter(|(_, ino)| self.node(*ino).is_some_and(Node::is_dir))
                .count() as u32,
            _ => 0,
        }
    }
}

fn insert(
    nodes: &mut HashMap<u64, Node>,
    ino: u64,
    parent: u64,
    name: &str,
    path: &str,
    mtime: SystemTime,
    kind: NodeKind,
) {
    nodes.insert(
        ino,
        Node {
            parent,
            path: path.to_string(),
            mtime,
            kind,
        },
    );
    if let Some(NodeKind::Dir { children }) = nodes.get_mut(&parent).map(|p| &mut p.kind) {
        children.push((name.to_string(), ino));
    }
}
