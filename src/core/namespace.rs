//! The inode tree of a mount, built from view entries.
//!
//! Inode numbers are assigned in entry order (root = 1) and never change while mounted.
//! Directories keep their children sorted, so `readdir` offsets are plain indices and lookups are
//! binary searches. A directory's mtime is the latest of its own and its descendants'.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use crate::stores::Blob;
use crate::views::{ViewEntry, ViewNode};

/// Inode number of the mount root.
pub const ROOT: u64 = 1;

/// What an inode is.
#[derive(Debug)]
pub enum NodeKind {
    /// A directory with its children, sorted by name.
    Dir {
        /// `(name, inode)` pairs, sorted by name.
        children: Vec<(String, u64)>,
    },
    /// A file and its content.
    File(Arc<Blob>),
}

/// One inode.
#[derive(Debug)]
pub struct Node {
    /// Parent inode (the root is its own parent).
    pub parent: u64,
    /// Modification time.
    pub mtime: SystemTime,
    /// Directory or file.
    pub kind: NodeKind,
}

impl Node {
    /// Number of sub-directories (for `st_nlink`).
    pub fn subdirs(&self, ns: &Namespace) -> u32 {
        match &self.kind {
            NodeKind::Dir { children } => children
                .iter()
                .filter(|(_, ino)| {
                    matches!(ns.node(*ino).map(|n| &n.kind), Some(NodeKind::Dir { .. }))
                })
                .count() as u32,
            NodeKind::File(_) => 0,
        }
    }
}

/// All inodes of a mount.
#[derive(Debug)]
pub struct Namespace {
    nodes: Vec<Node>,
}

impl Namespace {
    /// Builds the tree. Parents are created as needed; a path used both as a file and as a
    /// directory keeps its first use (the conflict is logged).
    pub fn build(entries: Vec<ViewEntry>, root_mtime: SystemTime) -> Namespace {
        let mut nodes = vec![Node {
            parent: ROOT,
            mtime: root_mtime,
            kind: NodeKind::Dir {
                children: Vec::new(),
            },
        }];
        let mut by_path: HashMap<String, u64> = HashMap::from([(String::new(), ROOT)]);
        for entry in entries {
            let mut parent = ROOT;
            let mut walked = String::new();
            let components: Vec<&str> = entry.path.split('/').filter(|c| !c.is_empty()).collect();
            let Some((last, dirs)) = components.split_last() else {
                // The root itself.
                nodes[0].mtime = nodes[0].mtime.max(entry.mtime);
                continue;
            };
            let mut ok = true;
            for dir in dirs {
                walked = if walked.is_empty() {
                    dir.to_string()
                } else {
                    format!("{walked}/{dir}")
                };
                parent = match by_path.get(&walked) {
                    Some(&ino)
                        if matches!(nodes[(ino - 1) as usize].kind, NodeKind::Dir { .. }) =>
                    {
                        ino
                    }
                    Some(_) => {
                        ok = false;
                        break;
                    }
                    None => {
                        let ino = push(
                            &mut nodes,
                            parent,
                            dir,
                            entry.mtime,
                            NodeKind::Dir {
                                children: Vec::new(),
                            },
                        );
                        by_path.insert(walked.clone(), ino);
                        ino
                    }
                };
            }
            let full = components.join("/");
            if !ok || by_path.contains_key(&full) {
                let same_dir = matches!(entry.node, ViewNode::Dir)
                    && by_path.get(&full).is_some_and(|&i| {
                        matches!(nodes[(i - 1) as usize].kind, NodeKind::Dir { .. })
                    });
                if !same_dir {
                    log::warn!(
                        "{}: shown twice in the mount, keeping the first",
                        entry.path
                    );
                }
                continue;
            }
            let kind = match entry.node {
                ViewNode::Dir => NodeKind::Dir {
                    children: Vec::new(),
                },
                ViewNode::File(blob) => NodeKind::File(blob),
            };
            let ino = push(&mut nodes, parent, last, entry.mtime, kind);
            by_path.insert(full, ino);
        }
        for node in &mut nodes {
            if let NodeKind::Dir { children } = &mut node.kind {
                children.sort();
            }
        }
        // Children always come after their parent: one backward pass propagates mtimes upward.
        for index in (1..nodes.len()).rev() {
            let (mtime, parent) = (nodes[index].mtime, nodes[index].parent);
            let parent = &mut nodes[(parent - 1) as usize];
            parent.mtime = parent.mtime.max(mtime);
        }
        Namespace { nodes }
    }

    /// The inode `ino`.
    pub fn node(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(usize::try_from(ino.checked_sub(1)?).ok()?)
    }

    /// The child `name` of directory `parent`: `None` if absent, `Err(())` if `parent` is a file.
    pub fn child(&self, parent: u64, name: &str) -> Option<Result<u64, ()>> {
        match &self.node(parent)?.kind {
            NodeKind::Dir { children } => children
                .binary_search_by(|(n, _)| n.as_str().cmp(name))
                .ok()
                .map(|i| Ok(children[i].1)),
            NodeKind::File(_) => Some(Err(())),
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

    /// All inodes, in inode order.
    pub fn nodes(&self) -> impl Iterator<Item = (u64, &Node)> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (i as u64 + 1, n))
    }
}

fn push(nodes: &mut Vec<Node>, parent: u64, name: &str, mtime: SystemTime, kind: NodeKind) -> u64 {
    nodes.push(Node {
        parent,
        mtime,
        kind,
    });
    let ino = nodes.len() as u64;
    if let NodeKind::Dir { children } = &mut nodes[(parent - 1) as usize].kind {
        children.push((name.to_string(), ino));
    }
    ino
}
