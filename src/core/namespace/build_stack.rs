//! What a build of a tree keeps of the directories it is in ([`DirStack`]) and of the children
//! it gave each of them ([`Kids`]), so that most lookups of (parent, name) need no hash table.
//!
//! Entries come grouped by directory and, as views render them, sorted but for a few files of
//! one item (a sparse vector's `.json` after its `.nzval`): a directory this build created has
//! only the children the build gave it while it was on the stack (none is given to a directory
//! off the stack). Whether it has a child `name` is decided from its last few children, scanned,
//! and the greatest name among the others: a name after it and not among the last few is new.
//! Any other lookup is undecided, and the build then indexes every node it numbered in a hash
//! table and looks up there from then on (`Builder::index_all`).

use std::collections::HashMap;

use super::{name_in, NodeTable, ROOT};

/// Children a [`Kids`] keeps by number, the last ones given, to find a name among them by
/// scanning (a data set's root and groups have fewer; an item has fewer files).
const RECENT: usize = 8;

/// How many early children of a directory may sort after the later ones (see [`Kids`]).
const OUTLIERS: usize = 4;

/// How many directories that left the stack keep their [`Kids`], should they come back: the
/// first to leave (a view first makes its groups, `vectors/cell` then `matrices/…`, then fills
/// them; the many arrays it makes after them do not come back).
const LEFT: usize = 4096;

/// The children a build gave a directory while it was on the stack (see the module doc).
#[derive(Clone, Copy, Debug)]
pub(super) struct Kids {
    /// The directory was created by this build: it has no other children.
    complete: bool,
    count: u32,
    /// The last [`RECENT`] children given, child `n` at `n % RECENT`.
    recent: [u32; RECENT],
    /// The child of the greatest name among those given before the recent ones but the
    /// outliers (`None`: there are none such).
    floor: Option<u32>,
    /// Children given before the recent ones with a name after that of the child given when
    /// they left the recent ones (a group's `zarr.json`, made before its arrays): scanned, so
    /// that the floor stays below the names still to come.
    outliers: [u32; OUTLIERS],
    outlier_count: u8,
    /// The child of the greatest name (`count` > 0).
    greatest: u32,
}

/// What a [`Kids`] says of a name.
pub(super) enum Decision {
    /// The child of that name.
    Found(u32),
    /// No child has it.
    Absent,
    /// Not known from the kids alone.
    Undecided,
}

impl Kids {
    /// A directory just created (or the root): no children yet, and none but those it is given.
    pub(super) fn complete() -> Kids {
        Kids {
            complete: true,
            count: 0,
            recent: [0; RECENT],
            floor: None,
            outliers: [0; OUTLIERS],
            outlier_count: 0,
            greatest: 0,
        }
    }

    /// A directory that may have children given before it came on the stack.
    pub(super) fn unknown() -> Kids {
        Kids {
            complete: false,
            ..Kids::complete()
        }
    }

    /// Whether the directory has a child `name`.
    pub(super) fn decide(&self, name: &str, nodes: &NodeTable, names: &str) -> Decision {
        if !self.complete {
            return Decision::Undecided;
        }
        let name_of = |ino: u32| nodes.get(u64::from(ino)).map_or("", |n| name_in(names, n));
        if self.count == 0 || name > name_of(self.greatest) {
            return Decision::Absent;
        }
        let scanned = (self.count as usize).min(RECENT);
        let outliers = &self.outliers[..usize::from(self.outlier_count)];
        let mut kept = self.recent[..scanned].iter().chain(outliers);
        if let Some(&ino) = kept.find(|&&c| name_of(c) == name) {
            return Decision::Found(ino);
        }
        if self.floor.is_none_or(|floor| name > name_of(floor)) {
            return Decision::Absent;
        }
        Decision::Undecided
    }

    /// Records child `ino`, named `name`, just given to the directory.
    pub(super) fn add(&mut self, ino: u32, name: &str, nodes: &NodeTable, names: &str) {
        let name_of = |ino: u32| nodes.get(u64::from(ino)).map_or("", |n| name_in(names, n));
        let at = self.count as usize % RECENT;
        if self.count as usize >= RECENT {
            // The child that leaves the recent ones is now among the others.
            let leaving = self.recent[at];
            let outlier = usize::from(self.outlier_count) < OUTLIERS && name_of(leaving) > name;
            if outlier {
                self.outliers[usize::from(self.outlier_count)] = leaving;
                self.outlier_count += 1;
            } else if self
                .floor
                .is_none_or(|floor| name_of(leaving) > name_of(floor))
            {
                self.floor = Some(leaving);
            }
        }
        if self.count == 0 || name > name_of(self.greatest) {
            self.greatest = ino;
        }
        self.recent[at] = ino;
        self.count = self.count.saturating_add(1);
    }
}

/// The directories of a path from the root down (see `Builder::dirs`).
#[derive(Debug, Default)]
pub(super) struct DirStack {
    /// The path ("" for the root), without empty components.
    pub(super) path: String,
    /// Its first components, each a directory of the tree. Shorter than the path's components
    /// when a file is in the way.
    pub(super) levels: Vec<Level>,
    /// The [`Kids`] of the first [`LEFT`] directories that left the stack, by inode: while off
    /// the stack a directory is given no child, so they still hold when it comes back.
    left: HashMap<u64, Kids, foldhash::fast::RandomState>,
}

/// One directory of a [`DirStack`]: where its component ends in the path, its inode, whether
/// the node is known not elidable, and the children it was given while on the stack.
#[derive(Clone, Copy, Debug)]
pub(super) struct Level {
    pub(super) end: usize,
    pub(super) ino: u64,
    pub(super) plain: bool,
    pub(super) kids: Kids,
}

impl DirStack {
    /// Keeps the levels `dir` shares with the path (whole components), and makes `dir` the path.
    pub(super) fn keep_shared(&mut self, dir: &str) {
        if dir == self.path {
            return;
        }
        let shared = dir
            .bytes()
            .zip(self.path.bytes())
            .take_while(|(a, b)| a == b)
            .count();
        let at_boundary = |end: usize| end == dir.len() || dir.as_bytes().get(end) == Some(&b'/');
        let kept = self
            .levels
            .iter()
            .take_while(|l| l.end <= shared && at_boundary(l.end))
            .count();
        for level in self.levels.drain(kept..).filter(|l| l.kids.complete) {
            if self.left.len() < LEFT {
                self.left.insert(level.ino, level.kids);
            }
        }
        self.path.clear();
        self.path.push_str(dir);
    }

    /// The [`Kids`] of directory `ino`, which existed before it came on the stack: those it
    /// left with if they are kept, else unknown.
    pub(super) fn back(&mut self, ino: u64) -> Kids {
        self.left.remove(&ino).unwrap_or_else(Kids::unknown)
    }
}

/// The [`Kids`] of directory `parent`, when it is the deepest of the stack (or the root of an
/// empty stack): the only directory a build looks up or adds children in.
pub(super) fn kids_of<'a>(
    dirs: &'a mut DirStack,
    root: &'a mut Kids,
    parent: u64,
) -> Option<&'a mut Kids> {
    match dirs.levels.last_mut() {
        Some(level) => (level.ino == parent).then_some(&mut level.kids),
        None => (parent == ROOT).then_some(root),
    }
}

/// Whether `path` has an empty component (it is empty, starts or ends with `/`, or has `//`).
pub(super) fn has_empty_component(path: &str) -> bool {
    path.is_empty() || path.starts_with('/') || path.ends_with('/') || path.contains("//")
}
