//! The passes that finish a build (see [`super::Namespace::build`]): each directory's children
//! placed into the tree's one array, sorted by name, and each directory's mtime made the latest
//! of its own and its descendants'.

use std::time::SystemTime;

use super::super::{name_in, slice_of, Children, Node, NodeTable, ROOT_U32};

/// The nodes but the root, with their parents.
fn with_parents(nodes: &NodeTable) -> impl Iterator<Item = (u32, usize)> + '_ {
    (0u32..)
        .zip(&nodes.slots)
        .filter(|(ino, _)| *ino != ROOT_U32)
        .filter_map(|(ino, node)| Some((ino, node.as_ref()?.parent as usize)))
}

/// Each directory's children, sorted by name, as one range of one array: a counting pass over
/// the nodes' parents places them (in inode order, the order a first build took the entries in),
/// then a directory's run is sorted only if it is not in order already.
pub(super) fn place_children(nodes: &mut NodeTable, names: &str) -> Box<[u32]> {
    // First the number of children of each directory, then where its run starts, then (once
    // the children are placed) where it ends.
    let mut ends = vec![0u32; nodes.slots.len()];
    for (_, parent) in with_parents(nodes) {
        if let Some(count) = ends.get_mut(parent) {
            *count = count.saturating_add(1);
        }
    }
    let mut total = 0u32;
    for end in &mut ends {
        let count = *end;
        *end = total;
        total = total.saturating_add(count);
    }
    let mut children = vec![0u32; total as usize].into_boxed_slice();
    for (ino, parent) in with_parents(nodes) {
        let Some(cursor) = ends.get_mut(parent) else {
            continue;
        };
        if let Some(slot) = children.get_mut(*cursor as usize) {
            *slot = ino;
        }
        *cursor = cursor.saturating_add(1);
    }
    let mut start = 0u32;
    for (slot, end) in nodes.slots.iter_mut().zip(ends) {
        if let Some(node) = slot.as_mut() {
            node.set_children_range(Children {
                start,
                len: end.saturating_sub(start),
            });
        }
        start = end;
    }
    let name = |ino: &u32| nodes.get(u64::from(*ino)).map_or("", |n| name_in(names, n));
    for node in nodes.slots.iter().flatten() {
        let Some(range) = node.children_range() else {
            continue;
        };
        let (from, to) = (range.start as usize, range.start as usize + range.len());
        if let Some(run) = children.get_mut(from..to) {
            // Stable: a run out of order only where a view put a group's document before its
            // children (`zarr.json`, `.zgroup`) is sorted in about one merge.
            if !run.is_sorted_by(|a, b| name(a) <= name(b)) {
                run.sort_by(|a, b| name(a).cmp(name(b)));
            }
        }
    }
    children
}

/// Gives each directory the latest mtime of its own and its descendants': the directories are
/// visited breadth first from the root, then each takes its children's in the reverse order (a
/// directory's sub-directories are final before it).
pub(super) fn propagate_mtimes(nodes: &mut NodeTable, children: &[u32], mtimes: &[SystemTime]) {
    let time = |index: u32| mtimes.get(index as usize).copied();
    let mut order = vec![ROOT_U32];
    let mut next = 0;
    while let Some(&dir) = order.get(next) {
        next += 1;
        let Some(range) = nodes.get(u64::from(dir)).and_then(Node::children_range) else {
            continue;
        };
        let subdirs = slice_of(children, range)
            .iter()
            .filter(|c| nodes.get(u64::from(**c)).is_some_and(Node::is_dir));
        order.extend(subdirs);
    }
    for dir in order.into_iter().rev() {
        let Some(node) = nodes.get(u64::from(dir)) else {
            continue;
        };
        let Some(range) = node.children_range() else {
            continue;
        };
        let latest = slice_of(children, range)
            .iter()
            .filter_map(|c| nodes.get(u64::from(*c)))
            .map(Node::mtime_index)
            .max_by_key(|m| time(*m));
        if let Some(latest) = latest.filter(|m| time(*m) > time(node.mtime_index())) {
            if let Some(node) = nodes.get_mut(u64::from(dir)) {
                node.set_mtime_index(latest);
            }
        }
    }
}
