//! Fetching ahead of a reader that walks a remote data set file by file (zarr-python reading
//! every array, a shell loop over `vectors/item/*.data`): when a name is looked up, the files of
//! the siblings after it (and of their sub-directories, a few levels down: an array's chunks) are
//! hinted to their blobs ([`crate::stores::Blob::prefetch`]), so a remote source fetches the
//! small ones concurrently in the background while the reader is still at the first. Only
//! mounts that ask for it ([`super::DafFs::enable_prefetch`]: remote sources) do this.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::namespace::{Namespace, NodeKind};

/// Siblings hinted ahead of the one looked up.
const WINDOW: usize = 128;
/// Levels below a sibling whose files are hinted (an array's `c/0/0`).
const DEPTH: usize = 3;
/// Most files hinted below one sibling.
const PER_SIBLING: usize = 16;
/// Directories whose hinted frontier is remembered (forgotten all at once past this).
const REMEMBERED: usize = 4096;

/// Whether the mount prefetches, and how far each directory was hinted.
#[derive(Debug, Default)]
pub struct Prefetch {
    enabled: AtomicBool,
    /// Directory inode → index of its children up to which files were hinted.
    frontier: Mutex<HashMap<u64, usize>>,
}

impl Prefetch {
    /// From now on, lookups hint what follows them.
    pub fn enable(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// After the lookup of child `ino` of `parent`: hints the files of the next siblings, unless
    /// more than half a window of them was hinted already.
    pub fn after_lookup(&self, tree: &Namespace, parent: u64, ino: u64) {
        if !self.enabled.load(Ordering::Relaxed) {
            return;
        }
        let children = tree.children(parent);
        // Children are sorted by name.
        let name = tree.name(ino);
        let Ok(at) = children.binary_search_by(|&c| tree.name(u64::from(c)).cmp(name)) else {
            return;
        };
        let end = (at + 1 + WINDOW).min(children.len());
        let start = {
            let mut frontier = self.frontier.lock().unwrap_or_else(|p| p.into_inner());
            if frontier.len() > REMEMBERED {
                frontier.clear();
            }
            let done = frontier.get(&parent).copied().unwrap_or(0).max(at);
            if done >= at + WINDOW / 2 || done >= end {
                return;
            }
            frontier.insert(parent, end);
            done
        };
        for &child in &children[start..end] {
            let mut budget = PER_SIBLING;
            hint(tree, u64::from(child), DEPTH, &mut budget);
        }
    }
}

/// Hints the files of `ino` (itself, or below it down to `depth` levels), at most `budget`.
fn hint(tree: &Namespace, ino: u64, depth: usize, budget: &mut usize) {
    if *budget == 0 {
        return;
    }
    match tree.node(ino).map(|n| n.kind()) {
        Some(NodeKind::File(blob)) => {
            *budget -= 1;
            blob.prefetch();
        }
        Some(NodeKind::Dir { .. }) if depth > 0 => {
            for &child in tree.children(ino) {
                hint(tree, u64::from(child), depth - 1, budget);
            }
        }
        _ => {}
    }
}
