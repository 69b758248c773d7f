//! The build of a tree ([`Namespace::build`]): the entries, grouped by directory, become nodes
//! numbered by the [`InodeTable`] (paths it does not know yet are numbered here and found again
//! from what the build keeps of the directories it is in, `build_stack.rs`: entries
//! in the order views render them need nothing more; once a lookup is not decided so, through a
//! transient hash table of this build's nodes, which keeps each node's hash so that growing it
//! hashes no name again). Then (`build_place.rs`) the children are placed into the
//! tree's one array by a counting pass over the nodes' parents (no comparison between
//! directories), each directory's run sorted by name only if it is not already (views render in
//! order, so a first build sorts nothing large), mtimes are propagated upward in one pass over
//! the directories, and every table is sized exactly. A short name that repeats (`.zarray`,
//! `zarr.json`, `c`, `0` in every array's directory) is stored once in the tree's names: nodes
//! point at the same bytes.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::SystemTime;

use hashbrown::HashTable;

use super::{
    name_in, slice_of, Entry, EntryKind, InodeTable, Namespace, NewKind, Node, NodeTable,
    StagedPath, LARGE_DIR, ROOT, ROOT_U32,
};

#[path = "build_place.rs"]
mod place;
#[path = "build_stack.rs"]
mod stack;
#[cfg(test)]
#[path = "build_tests.rs"]
mod tests;

use place::{place_children, propagate_mtimes};
use stack::{has_empty_component, kids_of, Decision, DirStack, Kids, Level};

impl Namespace {
    /// Builds the tree. Parents are created as needed. Later entries replace earlier files at the
    /// same path (a staged file hides the committed one it is replacing); a path used both as a
    /// file and as a directory keeps its first use (the conflict is logged).
    pub fn build(
        entries: impl IntoIterator<Item = Entry>,
        root_mtime: SystemTime,
        inodes: &mut InodeTable,
    ) -> Arc<Namespace> {
        Namespace::build_giving_back(entries, root_mtime, inodes, drop)
    }

    /// [`Namespace::build`], giving each entry's path to `spent` once taken (the caller may
    /// have its memory freed on the thread that allocated it).
    pub fn build_giving_back(
        entries: impl IntoIterator<Item = Entry>,
        root_mtime: SystemTime,
        inodes: &mut InodeTable,
        mut spent: impl FnMut(String),
    ) -> Arc<Namespace> {
        let inodes_next = inodes.next();
        let mut builder = Builder {
            nodes: NodeTable::default(),
            names: String::new(),
            mtimes: Vec::new(),
            mtime_index: HashMap::default(),
            last_mtime: None,
            inodes,
            added: HashTable::new(),
            hasher: foldhash::fast::RandomState::default(),
            recent: vec![Recent::default(); RECENT_NAMES],
            clock: 0,
            dirs: DirStack::default(),
            root_kids: Kids::complete(),
            indexed: false,
            first_fresh: inodes_next,
        };
        let mtime = builder.mtime(root_mtime);
        let root = Node::new(ROOT_U32, 0, 0, mtime, false, NewKind::Dir);
        builder.nodes.insert(ROOT, root);
        for entry in entries {
            spent(builder.add(entry));
        }
        let Builder {
            mut nodes,
            mut names,
            mtimes,
            added,
            ..
        } = builder;
        drop(added);
        names.shrink_to_fit();
        nodes.slots.shrink_to_fit();
        let children = place_children(&mut nodes, &names);
        propagate_mtimes(&mut nodes, &children, &mtimes);
        // The sub-directory counts of large directories none of whose children may be absent
        // are final already: a first `stat` (a lookup right after the mount) counts nothing.
        let mut kept = HashMap::default();
        for (ino, node) in (0u64..).zip(&nodes.slots) {
            let Some(range) = node.as_ref().and_then(Node::children_range) else {
                continue;
            };
            if range.len() < LARGE_DIR {
                continue;
            }
            let mut subdirs = Some(0u32);
            for child in slice_of(&children, range) {
                match nodes.get(u64::from(*child)) {
                    Some(node) if !node.elidable() => {
                        subdirs = subdirs.map(|n| n + u32::from(node.is_dir()));
                    }
                    _ => {
                        subdirs = None;
                        break;
                    }
                }
            }
            if let Some(subdirs) = subdirs {
                kept.insert(ino, subdirs);
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
    /// The last time asked for and its index (most entries share a few times).
    last_mtime: Option<(SystemTime, u32)>,
    inodes: &'a mut InodeTable,
    /// The nodes of this build by (parent, name), for the paths the table did not number yet,
    /// each with its hash (32 bits of it: growing the table hashes no name again); filled only
    /// once a lookup is not decided by the directories' [`Kids`] (see `stack`).
    added: HashTable<(u32, u32)>,
    hasher: foldhash::fast::RandomState,
    /// Short names recently stored, each in one of two slots chosen by its hash (see
    /// [`Builder::name_start`]).
    recent: Vec<Recent>,
    /// The number of short names met so far (the time of [`Recent::used`]).
    clock: u32,
    /// The directories of the previous entry's path: entries come grouped by directory, so most
    /// share all or most of them and look up only the components after those.
    dirs: DirStack,
    /// The children the root was given.
    root_kids: Kids,
    /// Whether [`Builder::added`] holds every node this build numbered (from then on, every
    /// lookup is made there).
    indexed: bool,
    /// The first number this build gave: the nodes it numbered are those from there.
    first_fresh: u64,
}

/// Names up to this long are stored once when they repeat (see [`Builder::name_start`]).
const SHARED_NAME: usize = 32;

/// A short name recently stored (see [`Builder::name_start`]): where it is in the tree's
/// names (an empty slot has length 0), and when it was last met ([`Builder::clock`]).
#[derive(Clone, Copy, Debug, Default)]
struct Recent {
    start: u32,
    len: u16,
    used: u32,
}

/// The number of slots of recently stored short names: repeated names stay while the unique
/// names between their repetitions rarely take their slot.
const RECENT_NAMES: usize = 256;

/// The two slots of [`Builder::recent`] a short name of hash `hash` may be in.
fn slots_of(hash: u64) -> [usize; 2] {
    [
        hash as usize % RECENT_NAMES,
        (hash >> 32) as usize % RECENT_NAMES,
    ]
}

/// A 32-bit hash spread over the 64 bits the hash table takes (it uses both ends).
fn spread(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Builder<'_> {
    /// Adds `entry` and gives its path back (see [`Namespace::build_giving_back`]).
    fn add(&mut self, entry: Entry) -> String {
        let Entry {
            path,
            mtime,
            kind,
            elidable,
        } = entry;
        let path = if has_empty_component(&path) {
            path.split('/')
                .filter(|c| !c.is_empty())
                .collect::<Vec<_>>()
                .join("/")
        } else {
            path
        };
        self.place(&path, mtime, kind, elidable);
        path
    }

    /// Adds the entry at `path` (no empty component).
    fn place(&mut self, path: &str, mtime: SystemTime, kind: EntryKind, elidable: bool) {
        if path.is_empty() {
            let root = self
                .nodes
                .get(ROOT)
                .map(|r| self.mtimes[r.mtime_index() as usize]);
            if root.is_some_and(|root| mtime > root) {
                let mtime = self.mtime(mtime);
                if let Some(root) = self.nodes.get_mut(ROOT) {
                    root.set_mtime_index(mtime);
                }
            }
            return;
        }
        let (dir, name) = path.rsplit_once('/').unwrap_or(("", path));
        let Some(parent) = self.directory(dir, mtime, elidable) else {
            log::warn!("{path}: shown both as a file and a directory, keeping the first");
            return;
        };
        let kind = match kind {
            EntryKind::Dir => NewKind::Dir,
            EntryKind::Blob(blob) => NewKind::File(blob),
            EntryKind::Staged(path) => NewKind::Staged(StagedPath::new(path)),
        };
        let ino = self.child(parent, name);
        let existing = self.nodes.get(ino).map(Node::is_dir);
        match (existing, &kind) {
            (Some(true), NewKind::File(_) | NewKind::Staged(_)) | (Some(false), NewKind::Dir) => {
                log::warn!("{path}: shown both as a file and a directory, keeping the first");
            }
            (Some(true), NewKind::Dir) => {
                if let Some(node) = self.nodes.get_mut(ino) {
                    node.set_elidable(node.elidable() && elidable);
                }
                self.entered(path, ino, false);
            }
            (Some(false), _) => {
                // A file replacing a file: keep its place among the parent's children.
                let mtime = self.mtime(mtime);
                if let Some(node) = self.nodes.get_mut(ino) {
                    *node = node.with_kind(kind);
                    node.set_mtime_index(mtime);
                    node.set_elidable(elidable);
                }
            }
            (None, _) => {
                let dir = matches!(kind, NewKind::Dir);
                self.insert(ino, parent, name, mtime, kind, elidable);
                if dir {
                    self.entered(path, ino, true);
                }
            }
        }
    }

    /// Makes directory `path` (inode `ino`, its parent the stack's path) the stack's path: the
    /// entries of a directory's own entry usually follow it.
    /// `created`: the directory was created just now (it has no children yet).
    fn entered(&mut self, path: &str, ino: u64, created: bool) {
        let plain = self.nodes.get(ino).is_some_and(|n| !n.elidable());
        let kids = if created {
            Kids::complete()
        } else {
            self.dirs.back(ino)
        };
        self.dirs.path.clear();
        self.dirs.path.push_str(path);
        self.dirs.levels.push(Level {
            end: path.len(),
            ino,
            plain,
            kids,
        });
    }

    /// The inode of directory `dir`, created (with its parents) if needed; `None` if a file is
    /// in the way. Directories implied by an elidable entry are elidable until another entry
    /// needs them.
    /// `dir` has no empty component; the directories it shares with the previous entry's are
    /// not looked up again (see [`Builder::dirs`]).
    fn directory(&mut self, dir: &str, mtime: SystemTime, elidable: bool) -> Option<u64> {
        self.dirs.keep_shared(dir);
        if !elidable {
            for level in self.dirs.levels.iter_mut().filter(|l| !l.plain) {
                if let Some(node) = self.nodes.get_mut(level.ino) {
                    node.set_elidable(false);
                }
                level.plain = true;
            }
        }
        let (mut parent, mut end) = match self.dirs.levels.last() {
            Some(level) => (level.ino, level.end),
            None => (ROOT, 0),
        };
        while end < dir.len() {
            let start = if end == 0 { 0 } else { end + 1 };
            let rest = dir.get(start..).unwrap_or("");
            let component = rest.split('/').next().unwrap_or(rest);
            end = start + component.len();
            let ino = self.child(parent, component);
            let (plain, kids) = match self.nodes.get_mut(ino) {
                Some(node) if node.is_dir() => {
                    node.set_elidable(node.elidable() && elidable);
                    (!node.elidable(), self.dirs.back(ino))
                }
                Some(_) => return None,
                None => {
                    self.insert(ino, parent, component, mtime, NewKind::Dir, elidable);
                    (!elidable, Kids::complete())
                }
            };
            self.dirs.levels.push(Level {
                end,
                ino,
                plain,
                kids,
            });
            parent = ino;
        }
        Some(parent)
    }

    fn insert(
        &mut self,
        ino: u64,
        parent: u64,
        name: &str,
        mtime: SystemTime,
        kind: NewKind,
        elidable: bool,
    ) {
        let (Ok(ino32), Ok(parent)) = (u32::try_from(ino), u32::try_from(parent)) else {
            log::warn!("{name}: inode number beyond 2^32, not shown");
            return;
        };
        let start = self.names.len();
        // A component longer than a u16 (never: the kernel's names are at most 255 bytes) is
        // cut at a character boundary.
        let mut len = name.len().min(usize::from(u16::MAX));
        while !name.is_char_boundary(len) {
            len -= 1;
        }
        let start = self.name_start(&name[..len], start);
        let mtime = self.mtime(mtime);
        self.nodes.insert(
            ino,
            Node::new(
                parent,
                u32::try_from(start).unwrap_or(u32::MAX),
                u16::try_from(len).unwrap_or(0),
                mtime,
                elidable,
                kind,
            ),
        );
        // Found again by (parent, name) for the rest of this build.
        if self.indexed {
            let hash = self.hash(parent, &name[..len]);
            self.added
                .insert_unique(spread(hash), (ino32, hash), |&(_, h)| spread(h));
            return;
        }
        let (nodes, names) = (&self.nodes, &self.names);
        match kids_of(&mut self.dirs, &mut self.root_kids, u64::from(parent)) {
            Some(kids) => kids.add(ino32, &name[..len], nodes, names),
            None => self.index_all(),
        }
    }

    /// Puts every node this build numbered in [`Builder::added`], and looks up there from now
    /// on: a lookup the directories' [`Kids`] could not decide.
    fn index_all(&mut self) {
        #[cfg(test)]
        super::INDEXED.with(|n| n.set(n.get() + 1));
        self.indexed = true;
        let first = usize::try_from(self.first_fresh).unwrap_or(usize::MAX);
        let numbered = (0u32..).zip(&self.nodes.slots).skip(first);
        for (ino, node) in numbered.filter_map(|(ino, n)| Some((ino, n.as_ref()?))) {
            let hash = self.hash(node.parent, name_in(&self.names, node));
            self.added
                .insert_unique(spread(hash), (ino, hash), |&(_, h)| spread(h));
        }
    }

    /// Where `name` starts in the tree's names: where an equal short name recently stored
    /// starts (names like `.zarray`, `zarr.json`, `c` or `0` repeat in every array's directory,
    /// and are then stored once), else `end`, where it is appended.
    fn name_start(&mut self, name: &str, end: usize) -> usize {
        if name.is_empty() || name.len() > SHARED_NAME {
            self.names.push_str(name);
            return end;
        }
        // Two slots a name may be in (see [`Builder::remember`]).
        self.clock = self.clock.wrapping_add(1);
        let (hash, now) = (self.hasher.hash_one(name), self.clock);
        for slot in slots_of(hash) {
            if let Some(recent) = self.recent.get_mut(slot) {
                let (start, len) = (recent.start as usize, usize::from(recent.len));
                if len == name.len() && self.names.get(start..start + len) == Some(name) {
                    recent.used = now;
                    return start;
                }
            }
        }
        self.names.push_str(name);
        if let Ok(start) = u32::try_from(end) {
            let len = name.len() as u16;
            self.remember(
                Recent {
                    start,
                    len,
                    used: now,
                },
                hash,
            );
        }
        end
    }

    /// Keeps `recent` (of hash `hash`) in one of its two slots: an empty one or one whose name
    /// was not met for [`RECENT_NAMES`] names, else the one met longest ago, whose name moves
    /// to its other slot on the same terms (cuckoo hashing, a few moves at most), so that two
    /// repeated names sharing a slot by chance of the hasher's seed keep apart.
    fn remember(&mut self, recent: Recent, hash: u64) {
        let now = self.clock;
        let stale = |r: &Recent| r.len == 0 || now.wrapping_sub(r.used) > RECENT_NAMES as u32;
        // The held name's slots (the second one when `both`; a moved name's other slot only).
        let (mut held, mut slots, mut both) = (recent, slots_of(hash), true);
        for _ in 0..8 {
            let candidates = &slots[..if both { 2 } else { 1 }];
            if let Some(slot) = candidates.iter().copied().find(|s| stale(&self.recent[*s])) {
                self.recent[slot] = held;
                return;
            }
            let oldest = candidates
                .iter()
                .copied()
                .min_by_key(|s| self.recent[*s].used);
            let Some(slot) = oldest else {
                return;
            };
            let moved = std::mem::replace(&mut self.recent[slot], held);
            let (start, len) = (moved.start as usize, usize::from(moved.len));
            let Some(name) = self.names.get(start..start + len) else {
                return;
            };
            held = moved;
            let [first, second] = slots_of(self.hasher.hash_one(name));
            let other = if first == slot { second } else { first };
            if other == slot {
                return;
            }
            (slots, both) = ([other, other], false);
        }
    }

    /// The 32-bit hash of (parent, name) in [`Builder::added`].
    fn hash(&self, parent: u32, name: &str) -> u32 {
        // The table spreads the 32 bits it keeps again: the truncation is intended.
        self.hasher.hash_one((parent, name)) as u32
    }

    /// The inode number of `name` in directory `parent`: the one the table knows, else the one
    /// this build gave it, else a new one.
    fn child(&mut self, parent: u64, name: &str) -> u64 {
        if let Some(ino) = self.inodes.known(parent, name) {
            return ino;
        }
        if !self.indexed {
            let kids = kids_of(&mut self.dirs, &mut self.root_kids, parent);
            match kids.map(|k| k.decide(name, &self.nodes, &self.names)) {
                Some(Decision::Found(ino)) => return u64::from(ino),
                Some(Decision::Absent) => return self.inodes.fresh(),
                Some(Decision::Undecided) | None => self.index_all(),
            }
        }
        let found = u32::try_from(parent).ok().and_then(|parent| {
            let hash = self.hash(parent, name);
            let (nodes, names) = (&self.nodes, &self.names);
            self.added
                .find(spread(hash), |&(ino, h)| {
                    h == hash
                        && nodes
                            .get(u64::from(ino))
                            .is_some_and(|n| n.parent == parent && name_in(names, n) == name)
                })
                .map(|&(ino, _)| ino)
        });
        found.map_or_else(|| self.inodes.fresh(), u64::from)
    }

    /// The index of `time` among the tree's times.
    fn mtime(&mut self, time: SystemTime) -> u32 {
        if let Some((_, index)) = self.last_mtime.filter(|(last, _)| *last == time) {
            return index;
        }
        let next = u32::try_from(self.mtimes.len()).unwrap_or(u32::MAX);
        let index = *self.mtime_index.entry(time).or_insert_with(|| {
            self.mtimes.push(time);
            next
        });
        self.last_mtime = Some((time, index));
        index
    }
}
