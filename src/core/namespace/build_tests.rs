//! Tests of the build of a tree against a plain model of its rules (a map of maps): whatever the
//! order of the entries (in order, as views render them, or shuffled), with repeated paths,
//! file/directory conflicts and empty components, the tree has the model's nodes, kinds, mtimes,
//! elidable flags and children sorted by name; a rebuild from shuffled entries keeps every number.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use super::super::INDEXED;
use super::{Entry, EntryKind, InodeTable, Namespace, ROOT};
use crate::core::namespace::NodeKind;
use crate::stores::{Blob, Bytes};

/// A node of the model.
#[derive(Debug)]
struct Model {
    dir: bool,
    mtime: u64,
    elidable: bool,
    children: BTreeMap<String, Model>,
}

impl Model {
    fn new(dir: bool, mtime: u64, elidable: bool) -> Model {
        Model {
            dir,
            mtime,
            elidable,
            children: BTreeMap::new(),
        }
    }

    /// The rules of `Namespace::build` for one entry.
    fn add(&mut self, path: &str, dir: bool, mtime: u64, elidable: bool) {
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let Some((last, dirs)) = components.split_last() else {
            self.mtime = self.mtime.max(mtime);
            return;
        };
        let mut at = self;
        for c in dirs {
            let node = at
                .children
                .entry((*c).to_string())
                .or_insert_with(|| Model::new(true, mtime, elidable));
            if !node.dir {
                return;
            }
            node.elidable &= elidable;
            at = node;
        }
        match at.children.get_mut(*last) {
            None => {
                at.children
                    .insert((*last).to_string(), Model::new(dir, mtime, elidable));
            }
            Some(node) if node.dir && dir => node.elidable &= elidable,
            Some(node) if !node.dir && !dir => {
                node.mtime = mtime;
                node.elidable = elidable;
            }
            Some(_) => {}
        }
    }

    /// Directories take the latest mtime of their descendants.
    fn propagate(&mut self) -> u64 {
        for child in self.children.values_mut() {
            let latest = child.propagate();
            self.mtime = self.mtime.max(latest);
        }
        self.mtime
    }
}

fn time(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
}

fn entry(path: &str, dir: bool, mtime: u64, elidable: bool) -> Entry {
    let kind = if dir {
        EntryKind::Dir
    } else {
        EntryKind::Blob(Blob::ready(Bytes::from_vec(path.as_bytes().to_vec())))
    };
    Entry {
        path: path.to_string(),
        mtime: time(mtime),
        kind,
        elidable,
    }
}

/// Checks node `ino` of `ns` (at `path`) against `model`.
fn check(ns: &Namespace, ino: u64, model: &Model, path: &str) {
    let node = ns.node(ino).unwrap();
    assert_eq!(node.is_dir(), model.dir, "{path}: kind");
    assert_eq!(ns.mtime(node), time(model.mtime), "{path}: mtime");
    if ino != ROOT {
        assert_eq!(node.elidable(), model.elidable, "{path}: elidable");
    }
    let names: Vec<&str> = ns
        .children(ino)
        .iter()
        .map(|c| ns.name(u64::from(*c)))
        .collect();
    let expected: Vec<&str> = model.children.keys().map(String::as_str).collect();
    assert_eq!(names, expected, "{path}: children");
    for (child, (name, sub)) in ns.children(ino).iter().zip(&model.children) {
        assert_eq!(ns.node(u64::from(*child)).unwrap().parent(), ino);
        check(ns, u64::from(*child), sub, &format!("{path}/{name}"));
    }
}

/// Builds a tree of `entries` and checks it against the model.
fn build_and_check(entries: &[(String, bool, u64, bool)], inodes: &mut InodeTable) -> Vec<u64> {
    let mut model = Model::new(true, 1, false);
    for (path, dir, mtime, elidable) in entries {
        model.add(path, *dir, *mtime, *elidable);
    }
    model.propagate();
    let ns = Namespace::build(
        entries.iter().map(|(p, d, m, e)| entry(p, *d, *m, *e)),
        time(1),
        inodes,
    );
    check(&ns, ROOT, &model, "");
    // Every node is reachable from the root, once.
    let mut seen = vec![ROOT];
    let mut at = 0;
    while let Some(&dir) = seen.get(at) {
        at += 1;
        seen.extend(ns.children(dir).iter().map(|c| u64::from(*c)));
    }
    assert_eq!(seen.len(), ns.len());
    let mut numbers: Vec<(String, u64)> = seen.iter().map(|i| (ns.path(*i).unwrap(), *i)).collect();
    numbers.sort();
    numbers.into_iter().map(|(_, i)| i).collect()
}

fn path_strategy() -> impl Strategy<Value = String> {
    let component = prop::sample::select(vec!["a", "b", "ab", "0", ".z", "zz", "é", ""]);
    prop::collection::vec(component, 0..4).prop_map(|c| c.join("/"))
}

fn entries_strategy() -> impl Strategy<Value = Vec<(String, bool, u64, bool)>> {
    prop::collection::vec(
        (
            path_strategy(),
            any::<bool>(),
            0u64..6,
            prop::bool::weighted(0.2),
        ),
        0..40,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn the_tree_follows_the_rules_in_any_order(entries in entries_strategy()) {
        build_and_check(&entries, &mut InodeTable::default());
    }

    /// Many children of one directory, in any order and repeated: the lookups decided without
    /// the hash table (from the last few children, the few that sorted late and the greatest
    /// name among the others) find every repeated name.
    #[test]
    fn a_large_directory_in_any_order_finds_its_repeated_names(
        names in prop::collection::vec("[a-d]{1,3}", 1..80),
        mtimes in prop::collection::vec(0u64..6, 80),
    ) {
        let entries: Vec<_> = names
            .iter()
            .zip(&mtimes)
            .map(|(name, mtime)| (format!("d/{name}"), false, *mtime, false))
            .collect();
        build_and_check(&entries, &mut InodeTable::default());
    }

    #[test]
    fn a_rebuild_from_shuffled_entries_keeps_every_number(
        entries in entries_strategy(),
        seed in any::<u64>(),
    ) {
        // Distinct paths, no conflicts: files only at leaves of distinct names.
        let mut unique: BTreeMap<String, (bool, u64, bool)> = BTreeMap::new();
        for (path, _, mtime, elidable) in &entries {
            unique.insert(format!("{path}/f"), (false, *mtime, *elidable));
        }
        let ordered: Vec<_> = unique.iter().map(|(p, (d, m, e))| (p.clone(), *d, *m, *e)).collect();
        let mut shuffled = ordered.clone();
        // A deterministic shuffle from the seed.
        let mut state = seed | 1;
        for i in (1..shuffled.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            shuffled.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let mut inodes = InodeTable::default();
        let first = build_and_check(&ordered, &mut inodes);
        let second = build_and_check(&shuffled, &mut inodes);
        prop_assert_eq!(first, second);
    }
}

#[test]
fn a_large_directory_in_order_and_reversed_gives_one_tree() {
    let names: Vec<String> = (0..1000).map(|i| format!("d/p{i}")).collect();
    let mut sorted = names.clone();
    sorted.sort();
    for (order, indexed) in [
        (sorted.clone(), 0),
        (sorted.iter().rev().cloned().collect(), 1),
    ] {
        let entries: Vec<_> = order.iter().map(|p| (p.clone(), false, 3, false)).collect();
        INDEXED.with(|n| n.set(0));
        build_and_check(&entries, &mut InodeTable::default());
        // In order, every lookup is decided without the hash table; reversed, one is not.
        assert_eq!(INDEXED.with(|n| n.get()), indexed);
    }
    // Past the first few children of a directory, a name that came out of order is looked up
    // in the table, not taken for new: a repeated one replaces the file it names.
    let mut entries: Vec<_> = (0..12)
        .rev()
        .map(|i| (format!("d/p{i:02}"), false, 3, false))
        .collect();
    entries.push(("d/p01".to_string(), false, 5, false));
    entries.push(("d/q".to_string(), false, 4, false));
    entries.push(("d/p00".to_string(), false, 6, false));
    build_and_check(&entries, &mut InodeTable::default());
    // A file in the way of a directory keeps its first use.
    let entries = [
        ("x".to_string(), false, 2, false),
        ("x/y".to_string(), false, 4, false),
    ];
    build_and_check(&entries, &mut InodeTable::default());
    let ns = Namespace::build(
        entries.iter().map(|(p, d, m, e)| entry(p, *d, *m, *e)),
        time(1),
        &mut InodeTable::default(),
    );
    let x = ns.child(ROOT, "x").unwrap().unwrap();
    assert!(matches!(ns.node(x).unwrap().kind(), NodeKind::File(_)));
    assert_eq!(ns.mtime(ns.node(ROOT).unwrap()), time(2));
}
