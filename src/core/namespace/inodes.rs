//! Inode numbers for the life of a mount, so a path keeps its number across the rebuilds of the
//! tree (commits, staged files) and a renamed file keeps its own (the kernel keeps the inode).
//!
//! The current tree is the table for every path it shows: a rebuild asks the previous tree for
//! the number of each (parent inode, name) (a binary search among the parent's children), so the
//! table costs nothing per shown path. Only the paths the tree does not show are kept apart, by
//! (parent inode, name): numbers given before the tree shows them (a file being created, a
//! rename's target, a path the kernel is told to forget) and numbers of paths a rebuild took out
//! (a path that comes back gets its number back, as when every number was kept in one table).

use std::collections::HashMap;
use std::sync::Arc;

use crate::core::namespace::Namespace;

/// Inode number of the mount root.
pub const ROOT: u64 = 1;

type Hasher = foldhash::fast::RandomState;

/// Paths by parent inode, then name (looked up by a borrowed name: no allocation).
type ByLink<V> = HashMap<u64, HashMap<Box<str>, V, Hasher>, Hasher>;

/// Path → inode number, for the life of the mount (see the module doc).
#[derive(Clone, Debug)]
pub struct InodeTable {
    /// The tree the numbers of shown paths are read from (`None` before the first build).
    tree: Option<Arc<Namespace>>,
    /// The next number to give.
    next: u64,
    /// Numbers of paths the tree does not show.
    outside: ByLink<u64>,
    /// Paths of the tree whose number a rename gave to another path: they get a new one.
    moved: ByLink<()>,
}

impl Default for InodeTable {
    fn default() -> InodeTable {
        InodeTable {
            tree: None,
            next: ROOT + 1,
            outside: HashMap::default(),
            moved: HashMap::default(),
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
        if let Some(ino) = self.known(parent, name) {
            return ino;
        }
        let ino = self.fresh();
        insert(&mut self.outside, parent, name, ino);
        ino
    }

    /// The number `name` in `parent` already has, if any (a tree being built numbers the paths
    /// it adds itself, with [`InodeTable::fresh`]).
    pub(in crate::core) fn known(&self, parent: u64, name: &str) -> Option<u64> {
        get(&self.outside, parent, name)
            .copied()
            .or_else(|| self.in_tree(parent, name))
    }

    /// How many paths are numbered apart from the tree.
    #[cfg(test)]
    pub(in crate::core) fn kept_apart(&self) -> usize {
        self.outside.values().map(HashMap::len).sum()
    }

    /// A number never given before.
    pub(in crate::core) fn fresh(&mut self) -> u64 {
        let ino = self.next;
        self.next += 1;
        ino
    }

    /// The number [`InodeTable::fresh`] gives next.
    pub(in crate::core) fn next(&self) -> u64 {
        self.next
    }

    /// Takes back the numbers given since [`InodeTable::next`] said `next` (none is in use).
    pub(in crate::core) fn set_next(&mut self, next: u64) {
        self.next = next;
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
        self.take(from);
        // A path the tree shows is displaced too: numbers kept apart come first.
        let parent = self.ino(dir);
        insert(&mut self.outside, parent, name, ino);
    }

    /// Takes the numbers of `tree` (just built from this table) as those of the paths it shows;
    /// the paths the previous tree showed and this one does not keep theirs apart.
    pub fn set_tree(&mut self, tree: Arc<Namespace>) {
        let shown = |parent: u64, name: &str| tree.child(parent, name).is_some_and(|r| r.is_ok());
        if let Some(previous) = self.tree.take() {
            for (ino, node) in previous.nodes() {
                if ino == ROOT || tree.node(ino).is_some() {
                    continue;
                }
                let (parent, name) = (node.parent(), previous.name(ino));
                if get(&self.moved, parent, name).is_none() && !shown(parent, name) {
                    insert(&mut self.outside, parent, name, ino);
                }
            }
        }
        self.moved = HashMap::default();
        self.outside.retain(|parent, names| {
            names.retain(|name, _| !shown(*parent, name));
            !names.is_empty()
        });
        self.outside.shrink_to_fit();
        self.tree = Some(tree);
    }

    /// [`InodeTable::set_tree`] for a tree edited from the current one ([`Namespace::edited`]):
    /// only the paths it took out (`removed`: parent, name, inode) and those it shows anew
    /// (`added`: parent, name) are looked at.
    pub(in crate::core) fn set_tree_edited(
        &mut self,
        tree: Arc<Namespace>,
        removed: &[(u64, String, u64)],
        added: &[(u64, String)],
    ) {
        let shown = |parent: u64, name: &str| tree.child(parent, name).is_some_and(|r| r.is_ok());
        for (parent, name, ino) in removed {
            if *ino == ROOT || tree.node(*ino).is_some() {
                continue;
            }
            if get(&self.moved, *parent, name).is_none() && !shown(*parent, name) {
                insert(&mut self.outside, *parent, name, *ino);
            }
        }
        self.moved = HashMap::default();
        for (parent, name) in added {
            if shown(*parent, name) {
                remove(&mut self.outside, *parent, name);
            }
        }
        self.tree = Some(tree);
    }

    /// The number of `name` in `parent` in the tree, unless a rename took it.
    fn in_tree(&self, parent: u64, name: &str) -> Option<u64> {
        if get(&self.moved, parent, name).is_some() {
            return None;
        }
        self.tree.as_ref()?.child(parent, name)?.ok()
    }

    /// The inode number of `path` if it has one.
    fn resolve(&self, path: &str) -> Option<u64> {
        path.split('/')
            .filter(|c| !c.is_empty())
            .try_fold(ROOT, |dir, name| self.known(dir, name))
    }

    /// Takes the number away from `path` (a rename's source): it gets a new one if used again.
    fn take(&mut self, path: &str) {
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let Some(parent) = self.resolve(dir) else {
            return;
        };
        if remove(&mut self.outside, parent, name).is_none() {
            insert(&mut self.moved, parent, name, ());
        }
    }
}

fn get<'a, V>(map: &'a ByLink<V>, parent: u64, name: &str) -> Option<&'a V> {
    if map.is_empty() {
        return None;
    }
    map.get(&parent)?.get(name)
}

fn insert<V>(map: &mut ByLink<V>, parent: u64, name: &str, value: V) {
    map.entry(parent).or_default().insert(name.into(), value);
}

fn remove<V>(map: &mut ByLink<V>, parent: u64, name: &str) -> Option<V> {
    let names = map.get_mut(&parent)?;
    let value = names.remove(name);
    if names.is_empty() {
        map.remove(&parent);
    }
    value
}
