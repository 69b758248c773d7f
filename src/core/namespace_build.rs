//! The build of a tree ([`Namespace::build`]): the entries, grouped by directory, become nodes
//! numbered by the [`InodeTable`] (paths it does not know yet are numbered here and found again
//! through a transient hash table of this build's nodes); then each directory's children are
//! sorted into the tree's one array, mtimes are propagated upward, and every table is sized
//! exactly.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::SystemTime;

use hashbrown::HashTable;

use super::{
    name_in, slice_of, Children, Entry, EntryKind, InodeTable, Namespace, Node, NodeKind,
    NodeTable, StagedPath, LARGE_DIR, ROOT, ROOT_U32,
};

impl Namespace {
    /// Builds the tree. Parents are created as needed. Later entries replace earlier files at the
    /// same path (a staged file hides the committed one it is replacing); a path used both as a
    /// file and as a directory keeps its first use (the conflict is logged).
    pub fn build(
        entries: impl IntoIterator<Item = Entry>,
        root_mtime: SystemTime,
        inodes: &mut InodeTable,
    ) -> Arc<Namespace> {
        let mut builder = Builder {
            nodes: NodeTable::default(),
            names: String::new(),
            mtimes: Vec::new(),
            mtime_index: HashMap::default(),
            edges: Vec::new(),
            inodes,
            added: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            depth: vec![vec![ROOT_U32]],
            last_dir: (String::new(), Some(ROOT), false),
        };
        let mtime = builder.mtime(root_mtime);
        let root = Node {
            parent: ROOT_U32,
            name_start: 0,
            name_len: 0,
            mtime,
            elidable: false,
            kind: NodeKind::Dir {
                children: Children::default(),
            },
        };
        builder.nodes.insert(ROOT, root);
        for entry in entries {
            builder.add(entry);
        }
        // Deepest first: propagate mtimes upward.
        for ino in std::mem::take(&mut builder.depth)
            .iter()
            .skip(1)
            .rev()
            .flatten()
        {
            let Some((mtime, parent)) = builder
                .nodes
                .get(u64::from(*ino))
                .map(|n| (n.mtime, n.parent()))
            else {
                continue;
            };
            let Some(parent_mtime) = builder.nodes.get(parent).map(|n| n.mtime) else {
                continue;
            };
            let (time, parent_time) = (
                builder.mtimes[mtime as usize],
                builder.mtimes[parent_mtime as usize],
            );
            if time > parent_time {
                if let Some(parent) = builder.nodes.get_mut(parent) {
                    parent.mtime = mtime;
                }
            }
        }
        let Builder {
            mut nodes,
            mut names,
            mut edges,
            mtimes,
            ..
        } = builder;
        names.shrink_to_fit();
        nodes.slots.shrink_to_fit();
        // Each directory's children, sorted by name, one range of one array.
        let name = |ino: u32| nodes.get(u64::from(ino)).map_or("", |n| name_in(&names, n));
        edges.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| name(a.1).cmp(name(b.1))));
        let children: Box<[u32]> = edges.iter().map(|e| e.1).collect();
        let mut start = 0u32;
        for siblings in edges.chunk_by(|a, b| a.0 == b.0) {
            let len = u32::try_from(siblings.len()).unwrap_or(u32::MAX);
            if let Some(NodeKind::Dir { children }) =
                nodes.get_mut(u64::from(siblings[0].0)).map(|n| &mut n.kind)
            {
                *children = Children { start, len };
            }
            start = start.saturating_add(len);
        }
        drop(edges);
        // The sub-directory counts of large directories none of whose children may be absent
        // are final already: a first `stat` (a lookup right after the mount) counts nothing.
        let mut kept = HashMap::default();
        for (ino, node) in (0u64..).zip(&nodes.slots) {
            let Some(NodeKind::Dir { children: range }) = node.as_ref().map(|n| &n.kind) else {
                continue;
            };
            if range.len() < LARGE_DIR {
                continue;
            }
            let children: Option<Vec<&Node>> = slice_of(&children, *range)
                .iter()
                .map(|c| nodes.get(u64::from(*c)))
                .collect();
            if let Some(children) = children.filter(|c| c.iter().all(|n| !n.elidable)) {
                kept.insert(ino, children.iter().filter(|n| n.is_dir()).count() as u32);
            }
        }
        kept.shrink_to_fit();
        let tree = Arc::new(Namespace::from_tables(nodes, children, names, mtimes, kept));
        inodes.set_tree(tree.clone());
        tree
    }
}

/// The state of one [`Namespace::build`].
struct Builder<'a> {
    nodes: NodeTable,
    names: String,
    mtimes: Vec<SystemTime>,
    mtime_index: HashMap<SystemTime, u32, foldhash::fast::RandomState>,
    /// (directory, child) of every node but the root, sorted into the directories at the end.
    edges: Vec<(u32, u32)>,
    inodes: &'a mut InodeTable,
    /// The nodes of this build by (parent, name), for the paths the table did not number yet.
    added: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    /// Inodes by depth (the root is depth 0), for the mtime pass.
    depth: Vec<Vec<u32>>,
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
            let root = self.nodes.get(ROOT).map(|r| self.mtimes[r.mtime as usize]);
            if root.is_some_and(|root| entry.mtime > root) {
                let mtime = self.mtime(entry.mtime);
                if let Some(root) = self.nodes.get_mut(ROOT) {
                    root.mtime = mtime;
                }
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
                children: Children::default(),
            },
            EntryKind::Blob(blob) => NodeKind::File(blob),
            EntryKind::Staged(path) => NodeKind::Staged(StagedPath(Box::new(path))),
        };
        let ino = self.child(parent, name);
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
                let mtime = self.mtime(entry.mtime);
                if let Some(node) = self.nodes.get_mut(ino) {
                    node.kind = kind;
                    node.mtime = mtime;
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
            let ino = self.child(parent, component);
            match self.nodes.get_mut(ino) {
                Some(node) if node.is_dir() => node.elidable &= elidable,
                Some(_) => return None,
                None => {
                    let kind = NodeKind::Dir {
                        children: Children::default(),
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
        let (Ok(ino32), Ok(parent)) = (u32::try_from(ino), u32::try_from(parent)) else {
            log::warn!("{name}: inode number beyond 2^32, not shown");
            return;
        };
        if self.depth.len() <= depth {
            self.depth.resize_with(depth + 1, Vec::new);
        }
        self.depth[depth].push(ino32);
        let start = self.names.len();
        // A component longer than a u16 (never: the kernel's names are at most 255 bytes) is
        // cut at a character boundary.
        let mut len = name.len().min(usize::from(u16::MAX));
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        self.names.push_str(&name[..len]);
        let mtime = self.mtime(mtime);
        self.nodes.insert(
            ino,
            Node {
                parent,
                name_start: u32::try_from(start).unwrap_or(u32::MAX),
                name_len: u16::try_from(len).unwrap_or(0),
                mtime,
                elidable,
                kind,
            },
        );
        self.edges.push((parent, ino32));
        // Found again by (parent, name) for the rest of this build.
        let (nodes, names, hasher) = (&self.nodes, &self.names, &self.hasher);
        let hash = hasher.hash_one((parent, &names[start..start + len]));
        self.added.insert_unique(hash, ino32, |&other| {
            let node = nodes.get(u64::from(other));
            let name = node.map_or("", |n| name_in(names, n));
            hasher.hash_one((node.map_or(0, |n| n.parent), name))
        });
    }

    /// The inode number of `name` in directory `parent`: the one the table knows, else the one
    /// this build gave it, else a new one.
    fn child(&mut self, parent: u64, name: &str) -> u64 {
        if let Some(ino) = self.inodes.known(parent, name) {
            return ino;
        }
        let (nodes, names) = (&self.nodes, &self.names);
        let found = u32::try_from(parent).ok().and_then(|parent| {
            let hash = self.hasher.hash_one((parent, name));
            self.added
                .find(hash, |&ino| {
                    nodes
                        .get(u64::from(ino))
                        .is_some_and(|n| n.parent == parent && name_in(names, n) == name)
                })
                .copied()
        });
        found.map_or_else(|| self.inodes.fresh(), u64::from)
    }

    /// The index of `time` among the tree's times.
    fn mtime(&mut self, time: SystemTime) -> u32 {
        let next = u32::try_from(self.mtimes.len()).unwrap_or(u32::MAX);
        *self.mtime_index.entry(time).or_insert_with(|| {
            self.mtimes.push(time);
            next
        })
    }
}
