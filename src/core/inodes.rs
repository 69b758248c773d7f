//! Inode numbers for the life of a mount: a table of (parent inode, name) → inode number, so a
//! path keeps its number across the rebuilds of the tree (commits, staged files) and a renamed
//! file keeps its own (the kernel keeps the inode).

use std::hash::BuildHasher;

use hashbrown::HashTable;

/// Inode number of the mount root.
pub const ROOT: u64 = 1;

/// Where an inode sits: its parent and its name (a range of [`InodeTable::names`]), 12 bytes.
/// Inode numbers are kept as `u32`: a mount's life gives far fewer than 2^32 paths numbers.
#[derive(Clone, Copy, Debug)]
struct Link {
    parent: u32,
    start: u32,
    len: u32,
}

/// Path → inode number, for the life of the mount. Stored by (parent inode, name), the names
/// back to back in one string, so a path costs its last component and about 22 bytes however
/// deep it is, where a map of full paths cost the path twice and about 60 bytes. The names of a
/// mount's life must stay under 4 GiB (hundreds of millions of paths: far beyond memory).
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
            parent: ROOT as u32,
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
        let link = self.push_name(parent, name);
        self.links.push(link);
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
        let new = self.push_name(parent, name);
        if let Some(link) = usize::try_from(ino)
            .ok()
            .and_then(|i| self.links.get_mut(i))
        {
            *link = new;
        }
        self.insert(ino);
    }

    /// The inode number of `path` if it has one.
    fn resolve(&self, path: &str) -> Option<u64> {
        path.split('/')
            .filter(|c| !c.is_empty())
            .try_fold(ROOT, |dir, name| self.find(dir, name))
    }

    /// Adds `name` to the names: the link of a child `name` of `parent`.
    fn push_name(&mut self, parent: u64, name: &str) -> Link {
        let start = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.names.push_str(name);
        Link {
            parent: u32::try_from(parent).unwrap_or(u32::MAX),
            start,
            len: u32::try_from(name.len()).unwrap_or(0),
        }
    }

    fn link(&self, ino: u64) -> Option<(u64, &str)> {
        let link = self.links.get(usize::try_from(ino).ok()?)?;
        Some((u64::from(link.parent), name_of(&self.names, link)?))
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
            let name = link.and_then(|l| name_of(names, l));
            hasher.hash_one((link.map_or(0, |l| u64::from(l.parent)), name.unwrap_or("")))
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

/// The name of `link` in `names`.
fn name_of<'a>(names: &'a str, link: &Link) -> Option<&'a str> {
    let start = link.start as usize;
    names.get(start..start + link.len as usize)
}
