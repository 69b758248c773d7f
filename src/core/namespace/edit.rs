//! Versions of a tree made by editing it rather than building it again ([`Namespace::edited`]):
//! a change of staged or hidden paths only (a file created, renamed, linked or removed, a
//! directory made or removed, a committed path hidden) touches the directories along one path,
//! and so does a local commit ([`Edit::Committed`]: an item's files, and the directories and
//! documents whose time is the data set's).
//!
//! A new version shares its base's tables and copies only its overlay (the nodes and children
//! lists replaced since the build, small: past [`MAX_NODES`] nodes or [`MAX_HELD`] children the
//! caller builds the tree anew, which empties it). Its cost is the length of the path, the
//! children of the directory the change is in (its sorted list is copied, and an edit that may
//! lower its mtime looks at its children's), and the overlay's size, never the mount's size.
//!
//! The result is the tree a build of the same entries gives (same inode numbers, kinds, mtimes,
//! `elidable` flags, children order), or `None` when that is not sure from what the tree knows:
//! a directory's mtime is the latest of its own and its descendants'; an edit that takes out or
//! lowers the latest needs the directory's own mtime, known for directories the overlay made
//! (a staged directory's own, none for one only implied) and for base directories no base
//! descendant of which was taken out or replaced since the build (their base mtime). A directory
//! left empty that only its entries implied goes with its last entry if an edit made it (a v3
//! chunk's `c/`). Other cases (such a directory of the base, a directory shown both as a file
//! and a directory, a node that made an elidable directory shown) answer `None`: the caller then
//! builds the tree anew.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use super::{Children, InodeTable, Namespace, NewKind, Node, NodeKind, StagedPath, ROOT};
use crate::stores::{lock, Blob};

#[path = "commit_edit.rs"]
mod commit_edit;

type Hasher = foldhash::fast::RandomState;

/// Past this many replaced nodes, the tree is built anew.
const MAX_NODES: usize = 4096;
/// Past this many children in replaced lists (4 bytes each), the tree is built anew.
const MAX_HELD: usize = 1 << 22;
/// Past this many bytes of names added, the tree is built anew.
const MAX_NAMES: usize = 1 << 18;

/// One change of staged or hidden paths, by mount path.
#[derive(Clone, Debug)]
pub enum Edit {
    /// A staged file (its disk path) or directory (`None`) at `path`, with its time.
    Put {
        path: String,
        mtime: SystemTime,
        staged: Option<PathBuf>,
    },
    /// `path` (a staged file, an empty staged directory, or a committed path now hidden) is no
    /// longer shown; `uncover`: the committed file a staged one hid there shows again.
    Remove { path: String, uncover: bool },
    /// The path keeps its node but takes the number the inode table now gives it (a rename's
    /// target that was dropped: the kernel holds the renamed inode there).
    Renumber { path: String },
    /// A view's committed file (`blob`) or directory (`None`) at `path`, whose own time is
    /// `mtime`, in place of what is there (a directory keeps its children): what a commit shows
    /// (`State::commit_edits`), in the view's order (parents first).
    Committed {
        path: String,
        mtime: SystemTime,
        blob: Option<Arc<Blob>>,
    },
}

/// What the edits of a tree changed since its build (see the module doc).
#[derive(Clone, Debug, Default)]
pub(super) struct Overlay {
    /// Nodes replaced or added (`None`: taken out).
    pub(super) nodes: HashMap<u64, Option<Node>, Hasher>,
    /// Children lists replaced, sorted by name.
    pub(super) children: HashMap<u64, Arc<[u32]>, Hasher>,
    /// Names added, numbered after the base's.
    pub(super) names: String,
    /// Times added, numbered after the base's.
    pub(super) mtimes: Vec<SystemTime>,
    /// Directories the overlay made (a staged directory's own mtime, `None` if only implied),
    /// and those a commit gave their own time ([`Edit::Committed`]).
    made: HashMap<u64, Option<SystemTime>, Hasher>,
    /// Base directories a base descendant of which was taken out or replaced: their base mtime
    /// no longer bounds theirs from below.
    dirty: HashSet<u64, Hasher>,
    /// Children held in replaced lists.
    held: usize,
    /// The committed files staged ones hide, as shown before (parent, name): what a removal
    /// of the staged file shows again. A commit's edit may have changed one since the build (a
    /// derived document, such as the FilesDaf 1.1 `metadata.json`), so the base's is not it.
    covered: HashMap<(u64, String), Node, Hasher>,
}

impl Namespace {
    /// This tree with `edits` applied, numbering new paths with `inodes` (which then takes the
    /// new version as its tree); `None` if the result would not be sure or the overlay is full:
    /// build the tree anew.
    pub fn edited(&self, edits: &[Edit], inodes: &mut InodeTable) -> Option<Arc<Namespace>> {
        let kept = lock(&self.subdirs_kept).clone();
        let mut editor = Editor {
            ns: Namespace {
                base: self.base.clone(),
                overlay: self.overlay.clone(),
                len: self.len,
                subdirs_kept: Mutex::new(kept),
            },
            inodes,
            removed: Vec::new(),
            added: Vec::new(),
            subdirs: HashMap::default(),
        };
        let next = editor.inodes.next();
        let applied = edits.iter().try_for_each(|edit| match edit {
            Edit::Put {
                path,
                mtime,
                staged,
            } => editor.put(path, *mtime, staged.as_ref()),
            Edit::Remove { path, uncover } => editor.remove(path, *uncover),
            Edit::Renumber { path } => editor.renumber(path),
            Edit::Committed { path, mtime, blob } => editor.committed(path, *mtime, blob.as_ref()),
        });
        if applied.is_none() {
            // The build that follows numbers new paths as if no edit had been tried.
            editor.inodes.set_next(next);
            return None;
        }
        let Editor {
            ns,
            inodes,
            removed,
            added,
            subdirs,
        } = editor;
        let overlay = &ns.overlay;
        if overlay.nodes.len() > MAX_NODES
            || overlay.held > MAX_HELD
            || overlay.names.len() > MAX_NAMES
            || overlay.mtimes.len() > MAX_NODES
        {
            inodes.set_next(next);
            return None;
        }
        {
            // A kept count is of a directory none of whose children may be absent, and every
            // node an edit adds is shown: the count moves by the directories added and taken out.
            let mut kept = lock(&ns.subdirs_kept);
            for (dir, change) in subdirs {
                if let Some(count) = kept.get_mut(&dir) {
                    *count = count.saturating_add_signed(change);
                }
            }
        }
        let tree = Arc::new(ns);
        inodes.set_tree_edited(tree.clone(), &removed, &added);
        Some(tree)
    }
}

/// One [`Namespace::edited`] in progress.
struct Editor<'a> {
    /// The version being made.
    ns: Namespace,
    inodes: &'a mut InodeTable,
    /// Nodes taken out: (parent, name, inode).
    removed: Vec<(u64, String, u64)>,
    /// Paths now shown: (parent, name).
    added: Vec<(u64, String)>,
    /// How many sub-directories each directory gained (or lost) (see [`Namespace::subdirs`]).
    subdirs: HashMap<u64, i32, Hasher>,
}

impl Editor<'_> {
    /// Shows a staged file (`staged`) or directory at `path`.
    fn put(&mut self, path: &str, mtime: SystemTime, staged: Option<&PathBuf>) -> Option<()> {
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let (name, dirs) = components.split_last()?;
        let mut ancestors = vec![ROOT];
        for dir in dirs {
            let parent = *ancestors.last()?;
            let ino = match self.ns.child(parent, dir) {
                Some(Ok(ino)) if self.ns.node(ino)?.is_dir() => {
                    self.show(ino)?;
                    ino
                }
                Some(_) => return None,
                None => {
                    let ino = self.insert(parent, dir, mtime, None)?;
                    self.ns.overlay.made.insert(ino, None);
                    self.propagate(&ancestors, None, Some(mtime))?;
                    ino
                }
            };
            ancestors.push(ino);
        }
        let parent = *ancestors.last()?;
        let Some(existing) = self.ns.child(parent, name) else {
            self.ns.overlay.covered.remove(&(parent, name.to_string()));
            let ino = self.insert(parent, name, mtime, staged)?;
            if staged.is_none() {
                self.ns.overlay.made.insert(ino, Some(mtime));
            }
            return self.propagate(&ancestors, None, Some(mtime));
        };
        let existing = existing.ok()?;
        let node = self.ns.node(existing)?.clone();
        let Some(disk) = staged else {
            // A directory entry on a directory only makes it shown; on a file, a conflict.
            return node.is_dir().then(|| self.show(existing))?;
        };
        if node.is_dir() {
            return None;
        }
        if let NodeKind::File(_) = node.kind() {
            let covered = (parent, name.to_string());
            self.ns.overlay.covered.insert(covered, node.clone());
        }
        let kind = NewKind::Staged(StagedPath::new(disk.clone()));
        self.replace_file(&ancestors, name, (existing, node), kind, mtime)
    }

    /// Replaces file `existing` (its number and node), named `name` in the last of `ancestors`,
    /// by a shown file of `kind` and time `mtime`: its place among its parent's children stays.
    fn replace_file(
        &mut self,
        ancestors: &[u64],
        name: &str,
        (existing, node): (u64, Node),
        kind: NewKind,
        mtime: SystemTime,
    ) -> Option<()> {
        let parent = *ancestors.last()?;
        if let NewKind::File(_) = kind {
            // Committed now: no longer hiding what was there.
            self.ns.overlay.covered.remove(&(parent, name.to_string()));
        }
        let was = self.ns.mtime(&node);
        if self.ns.base.nodes.get(existing).is_some() {
            self.dirty(ancestors);
        }
        let ino = self.number(parent, name);
        let mut replacement = node.with_kind(kind);
        replacement.set_mtime_index(self.time(mtime));
        replacement.set_elidable(false);
        self.reseat(parent, name, existing, ino, replacement)?;
        self.propagate(ancestors, Some(was), Some(mtime))
    }

    /// Takes `path` out of the tree, showing the committed file under it if `uncover`.
    fn remove(&mut self, path: &str, uncover: bool) -> Option<()> {
        let (ancestors, name, ino) = self.find(path)?;
        let parent = *ancestors.last()?;
        let node = self.ns.node(ino)?.clone();
        let in_base = self.ns.base.nodes.get(ino).is_some();
        if node.is_dir() && (in_base || !self.ns.children(ino).is_empty()) {
            return None;
        }
        // Directories this node made shown may be elidable again without it.
        let base_elidable = |dir: &u64| self.ns.base.nodes.get(*dir).is_some_and(Node::elidable);
        if !node.elidable() && ancestors.iter().any(base_elidable) {
            return None;
        }
        let covered = self.ns.overlay.covered.remove(&(parent, name.to_string()));
        let under = match (node.kind(), covered) {
            // (Not the base's number: the node is put in as a replacement.)
            (NodeKind::Staged(_), Some(shown)) if uncover => Some((u64::MAX, shown)),
            (NodeKind::Staged(_), None) if uncover => self.base_file(parent, name)?,
            _ => None,
        };
        if in_base {
            self.dirty(&ancestors);
        }
        let was = self.ns.mtime(&node);
        if let Some((base_ino, committed)) = under {
            let now = self.ns.mtime(&committed);
            let number = self.number(parent, name);
            if number == ino && base_ino == ino {
                // The base's node at that number: shown again as it was built.
                self.ns.overlay.nodes.remove(&ino);
                self.added.push((parent, name.to_string()));
            } else {
                self.reseat(parent, name, ino, number, committed)?;
            }
            return self.propagate(&ancestors, Some(was), Some(now));
        }
        let old = self.ns.children(parent);
        let at = old.iter().position(|c| u64::from(*c) == ino)?;
        let children = spliced(old, at, 1, None);
        if node.is_dir() {
            *self.subdirs.entry(parent).or_default() -= 1;
        }
        let empty = children.is_empty();
        self.set_children(parent, children)?;
        self.drop_node(ino);
        self.removed.push((parent, name.to_string(), ino));
        if empty && !self.keeps_empty(parent) {
            // A directory only its entries implied (a v3 chunk's `c/`) goes with its last one, as
            // in a build; its time was that one's, which its own removal takes out above it.
            let (dir, _) = path.rsplit_once('/')?;
            return self.remove(dir, false);
        }
        self.propagate(&ancestors, Some(was), None)
    }

    /// Gives the node at `path` the number the inode table gives its path now.
    fn renumber(&mut self, path: &str) -> Option<()> {
        let Some((ancestors, name, ino)) = self.find(path) else {
            return Some(());
        };
        let parent = *ancestors.last()?;
        let number = self.number(parent, name);
        if number == ino {
            return Some(());
        }
        let node = self.ns.node(ino)?.clone();
        if node.is_dir() {
            return None;
        }
        if self.ns.base.nodes.get(ino).is_some() {
            self.dirty(&ancestors);
        }
        self.reseat(parent, name, ino, number, node)
    }

    /// The directories from the root to the parent of `path`, its name, and its inode.
    fn find<'p>(&self, path: &'p str) -> Option<(Vec<u64>, &'p str, u64)> {
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let (name, dirs) = components.split_last()?;
        let mut ancestors = vec![ROOT];
        for dir in dirs {
            let ino = self.ns.child(*ancestors.last()?, dir)?.ok()?;
            ancestors.push(ino);
        }
        let ino = self.ns.child(*ancestors.last()?, name)?.ok()?;
        Some((ancestors, name, ino))
    }

    /// The committed file the base has at `name` in `parent`: `Some(None)` if none, `None` if
    /// the base has something else there (a staged file: what it hides is not known).
    fn base_file(&self, parent: u64, name: &str) -> Option<Option<(u64, Node)>> {
        let base = &self.ns.base;
        let Some(children) = base.nodes.get(parent).and_then(Node::children_range) else {
            return Some(None);
        };
        let children = super::slice_of(&base.children, children);
        let found = children.binary_search_by(|c| {
            let node = base.nodes.get(u64::from(*c));
            node.map_or("", |n| super::name_in(&base.names, n))
                .cmp(name)
        });
        let Ok(at) = found else {
            return Some(None);
        };
        let ino = u64::from(children[at]);
        let node = base.nodes.get(ino)?;
        match node.kind() {
            NodeKind::File(_) => Some(Some((ino, node.clone()))),
            _ => None,
        }
    }

    /// Whether directory `dir` is shown with no children in a build.
    fn keeps_empty(&self, dir: u64) -> bool {
        if dir == ROOT {
            return true;
        }
        match self.ns.overlay.made.get(&dir) {
            Some(own) => own.is_some(),
            None => matches!(
                self.ns.base.nodes.get(dir).map(Node::kind),
                Some(NodeKind::Dir { children }) if children.is_empty()
            ),
        }
    }

    /// A new node `name` in `parent` (a staged file, or a directory), placed among its children.
    fn insert(
        &mut self,
        parent: u64,
        name: &str,
        mtime: SystemTime,
        staged: Option<&PathBuf>,
    ) -> Option<u64> {
        let kind = match staged {
            Some(disk) => NewKind::Staged(StagedPath::new(disk.clone())),
            None => NewKind::Dir,
        };
        self.insert_kind(parent, name, mtime, kind)
    }

    /// A new node `name` of `kind` in `parent`, placed among its children.
    fn insert_kind(
        &mut self,
        parent: u64,
        name: &str,
        mtime: SystemTime,
        kind: NewKind,
    ) -> Option<u64> {
        let ino = self.number(parent, name);
        if self.ns.node(ino).is_some() {
            return None;
        }
        if matches!(kind, NewKind::Dir) {
            *self.subdirs.entry(parent).or_default() += 1;
        }
        let start = self.ns.base.names.len() + self.ns.overlay.names.len();
        self.ns.overlay.names.push_str(name);
        let node = Node::new(
            u32::try_from(parent).ok()?,
            u32::try_from(start).ok()?,
            u16::try_from(name.len()).ok()?,
            self.time(mtime),
            false,
            kind,
        );
        let old = self.ns.children(parent);
        let at = old
            .binary_search_by(|c| self.ns.name(u64::from(*c)).cmp(name))
            .err()?;
        let children = spliced(old, at, 0, Some(u32::try_from(ino).ok()?));
        self.put_node(ino, node);
        self.set_children(parent, children)?;
        self.added.push((parent, name.to_string()));
        Some(ino)
    }

    /// Puts `node` at number `ino` in place of `existing` (same parent and name).
    fn reseat(
        &mut self,
        parent: u64,
        name: &str,
        existing: u64,
        ino: u64,
        node: Node,
    ) -> Option<()> {
        if ino != existing {
            if self.ns.node(ino).is_some() {
                return None;
            }
            let old = self.ns.children(parent);
            let at = old.iter().position(|c| u64::from(*c) == existing)?;
            let children = spliced(old, at, 1, Some(u32::try_from(ino).ok()?));
            self.set_children(parent, children)?;
            self.drop_node(existing);
            self.removed.push((parent, name.to_string(), existing));
        }
        self.put_node(ino, node);
        self.added.push((parent, name.to_string()));
        Some(())
    }

    /// The number of `name` in `parent`: the one the table knows, else a new one.
    fn number(&mut self, parent: u64, name: &str) -> u64 {
        match self.inodes.known(parent, name) {
            Some(ino) => ino,
            None => self.inodes.fresh(),
        }
    }

    /// The index of `time` among the version's times.
    fn time(&mut self, time: SystemTime) -> u32 {
        let overlay = &mut self.ns.overlay;
        if overlay.mtimes.last() != Some(&time) {
            overlay.mtimes.push(time);
        }
        let at = self.ns.base.mtimes.len() + overlay.mtimes.len() - 1;
        u32::try_from(at).unwrap_or(u32::MAX)
    }

    fn put_node(&mut self, ino: u64, node: Node) {
        if self.ns.node(ino).is_none() {
            self.ns.len += 1;
        }
        self.ns.overlay.nodes.insert(ino, Some(node));
    }

    fn drop_node(&mut self, ino: u64) {
        if self.ns.node(ino).is_some() {
            self.ns.len -= 1;
        }
        let overlay = &mut self.ns.overlay;
        if self.ns.base.nodes.get(ino).is_some() {
            overlay.nodes.insert(ino, None);
        } else {
            overlay.nodes.remove(&ino);
        }
        if let Some(children) = overlay.children.remove(&ino) {
            overlay.held -= children.len();
        }
        overlay.made.remove(&ino);
    }

    /// Replaces the children of directory `dir`.
    fn set_children(&mut self, dir: u64, children: Arc<[u32]>) -> Option<()> {
        let mut node = self.ns.node(dir)?.clone();
        if !node.is_dir() {
            return None;
        }
        node.set_children_range(Children {
            start: u32::MAX,
            len: u32::try_from(children.len()).ok()?,
        });
        let overlay = &mut self.ns.overlay;
        overlay.held += children.len();
        if let Some(before) = overlay.children.insert(dir, children) {
            overlay.held -= before.len();
        }
        overlay.nodes.insert(dir, Some(node));
        Some(())
    }

    /// Makes directory `ino` shown for sure (a non-elidable entry goes through it).
    fn show(&mut self, ino: u64) -> Option<()> {
        let node = self.ns.node(ino)?;
        if node.elidable() {
            let mut node = node.clone();
            node.set_elidable(false);
            self.ns.overlay.nodes.insert(ino, Some(node));
        }
        Some(())
    }

    /// Marks `dirs` (those of the base) as no longer bounded by their base mtime.
    fn dirty(&mut self, dirs: &[u64]) {
        self.ns.overlay.dirty.extend(dirs.iter().copied());
    }

    /// A child of the last of `ancestors` went from time `was` to `now` (`None`: absent): each
    /// ancestor's time becomes the latest of its own and its descendants', bottom up.
    fn propagate(
        &mut self,
        ancestors: &[u64],
        mut was: Option<SystemTime>,
        mut now: Option<SystemTime>,
    ) -> Option<()> {
        for &dir in ancestors.iter().rev() {
            let old = self.ns.mtime(self.ns.node(dir)?);
            let new = match (was, now) {
                (Some(a), b) if b.is_none_or(|b| b < a) && old <= a => self.recount(dir, old)?,
                (_, b) => b.map_or(old, |b| old.max(b)),
            };
            if new == old {
                return Some(());
            }
            let mtime = self.time(new);
            let node = self.ns.node(dir)?.with_mtime_index(mtime);
            self.ns.overlay.nodes.insert(dir, Some(node));
            (was, now) = (Some(old), Some(new));
        }
        Some(())
    }

    /// The time of directory `dir` (`old` until now) after its latest descendant went: the
    /// latest of its children's and its own (`None` if its own is not known).
    fn recount(&self, dir: u64, old: SystemTime) -> Option<SystemTime> {
        let ns = &self.ns;
        let latest = self.latest_child(dir);
        if latest.is_some_and(|m| m >= old) {
            return Some(old);
        }
        let own = match ns.overlay.made.get(&dir) {
            Some(own) => *own,
            None if !ns.overlay.dirty.contains(&dir) => {
                let base = ns.base.nodes.get(dir)?;
                let at = base.mtime_index() as usize;
                ns.base.mtimes.get(at).copied()
            }
            None => return None,
        };
        latest.max(own)
    }

    /// The latest time of the children of directory `dir` (`None` without children).
    fn latest_child(&self, dir: u64) -> Option<SystemTime> {
        let ns = &self.ns;
        let children = ns.children(dir).iter();
        children
            .filter_map(|c| ns.node(u64::from(*c)).map(|n| ns.mtime(n)))
            .max()
    }
}

/// `old` with `removed` children from `at` taken out and `inserted` put there, made in one
/// allocation (a directory of 666,000 files is copied once per edit, under the state lock).
fn spliced(old: &[u32], at: usize, removed: usize, inserted: Option<u32>) -> Arc<[u32]> {
    let (before, after) = old.split_at(at.min(old.len()));
    let after = after.get(removed..).unwrap_or(&[]);
    before
        .iter()
        .copied()
        .chain(inserted)
        .chain(after.iter().copied())
        .collect()
}
