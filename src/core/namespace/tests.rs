//! Tests of the inode tree's compact storage: names instead of paths, inode numbers kept across
//! rebuilds and renames, and the size of a node.

use std::time::{Duration, SystemTime};

use crate::core::namespace::{Entry, EntryKind, InodeTable, Namespace, Node, NodeKind, ROOT};
use crate::stores::{Blob, Bytes};

fn file(path: &str, secs: u64) -> Entry {
    Entry {
        path: path.to_string(),
        mtime: SystemTime::UNIX_EPOCH + Duration::from_secs(secs),
        kind: EntryKind::Blob(Blob::ready(Bytes::from_vec(path.as_bytes().to_vec()))),
        elidable: false,
    }
}

fn resolve(ns: &Namespace, path: &str) -> u64 {
    path.split('/')
        .try_fold(ROOT, |dir, name| ns.child(dir, name)?.ok())
        .unwrap()
}

#[test]
fn a_node_is_small() {
    // 88 bytes with its path and children names inline, 48 with its children in a box of its
    // own, 32 with its time, name length and flag beside its kind rather than inside it; a
    // million entries make ~2M nodes.
    assert!(
        std::mem::size_of::<Node>() <= 24,
        "{}",
        std::mem::size_of::<Node>()
    );
    assert!(std::mem::size_of::<NodeKind>() <= 16);
    // The table of nodes by inode number holds `Option<Node>`: no larger.
    assert_eq!(
        std::mem::size_of::<Option<Node>>(),
        std::mem::size_of::<Node>()
    );
}

#[test]
fn names_paths_children_and_mtimes_come_back() {
    let mut inodes = InodeTable::default();
    let entries = vec![
        file("b/z", 5),
        file("b/a", 7),
        file("a", 3),
        file("b/c/d", 9),
    ];
    let ns = Namespace::build(entries, SystemTime::UNIX_EPOCH, &mut inodes);
    let d = resolve(&ns, "b/c/d");
    assert_eq!(ns.path(d).unwrap(), "b/c/d");
    assert_eq!(ns.name(d), "d");
    assert_eq!(ns.path(ROOT).unwrap(), "");
    let b = resolve(&ns, "b");
    let Some(NodeKind::Dir { children }) = ns.node(b).map(|n| n.kind()) else {
        panic!("b is a directory")
    };
    assert_eq!(children.len(), 3);
    let names: Vec<&str> = ns
        .children(b)
        .iter()
        .map(|c| ns.name(u64::from(*c)))
        .collect();
    assert_eq!(names, ["a", "c", "z"]);
    // A directory's time is its latest descendant's.
    let secs = |ino| {
        ns.mtime(ns.node(ino).unwrap())
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    assert_eq!((secs(b), secs(ROOT), secs(resolve(&ns, "a"))), (9, 9, 3));
    assert_eq!(ns.child(b, "y"), None);
    assert_eq!(ns.child(d, "x"), Some(Err(())));
}

/// Forty short names repeated in each of 200 directories are stored about once, whatever the
/// hasher's seed: with one slot per name, two of them sharing it (nearly always, for forty
/// names in 256 slots) were stored again in every directory.
#[test]
fn many_repeated_short_names_are_stored_about_once_whatever_the_seed() {
    for _ in 0..5 {
        let mut inodes = InodeTable::default();
        let mut entries = Vec::new();
        for i in 0..200 {
            for k in 0..40 {
                entries.push(file(&format!("d{i:03}/n{k:02}.x"), 1));
            }
        }
        let ns = Namespace::build(entries, SystemTime::UNIX_EPOCH, &mut inodes);
        // The unique names (`d000`: 4 bytes each), and each repeated one (5 bytes) at most
        // three times.
        let bound = 200 * 4 + 3 * 40 * 5;
        assert!(ns.names_len() < bound, "{} bytes", ns.names_len());
    }
}

#[test]
fn repeated_short_names_are_stored_once() {
    let mut inodes = InodeTable::default();
    let mut entries = Vec::new();
    for i in 0..1000 {
        for name in [".zarray", ".zattrs", "0", "zarr.json"] {
            entries.push(file(&format!("vectors/cell/p{i:03}/{name}"), i));
        }
        entries.push(file(&format!("vectors/cell/p{i:03}.json"), i));
    }
    let ns = Namespace::build(entries, SystemTime::UNIX_EPOCH, &mut inodes);
    // The unique names (`p000`, `p000.json`: 4 + 9 bytes each), the others about once (again
    // when a unique name took their slot: a few percent; each stored every time would be 24,000
    // bytes more).
    let unique = 1000 * (4 + 9);
    assert!(
        ns.names_len() < unique + unique / 20,
        "{} bytes",
        ns.names_len()
    );
    for i in [0, 517, 999] {
        for name in [".zarray", ".zattrs", "0", "zarr.json"] {
            let path = format!("vectors/cell/p{i:03}/{name}");
            let ino = resolve(&ns, &path);
            assert_eq!(ns.path(ino).unwrap(), path);
        }
        assert_eq!(
            ns.name(resolve(&ns, &format!("vectors/cell/p{i:03}"))),
            format!("p{i:03}")
        );
    }
}

#[test]
fn inode_numbers_survive_rebuilds_and_renames() {
    let mut inodes = InodeTable::default();
    let first = Namespace::build(
        vec![file("x/one", 1), file("x/two", 1)],
        SystemTime::UNIX_EPOCH,
        &mut inodes,
    );
    let two = resolve(&first, "x/two");
    // Rebuilt without "x/one" and with a new file: "x/two" keeps its number.
    let second = Namespace::build(
        vec![file("x/two", 1), file("x/three", 1)],
        SystemTime::UNIX_EPOCH,
        &mut inodes,
    );
    assert_eq!(resolve(&second, "x/two"), two);
    assert_ne!(resolve(&second, "x/three"), two);
    // A rename gives the new path the old number; the old path gets a new one.
    inodes.rename("x/two", "y/deux");
    assert_eq!(inodes.ino("y/deux"), two);
    assert_ne!(inodes.ino("x/two"), two);
    let third = Namespace::build(vec![file("y/deux", 1)], SystemTime::UNIX_EPOCH, &mut inodes);
    assert_eq!(resolve(&third, "y/deux"), two);
    assert_eq!(third.path(two).unwrap(), "y/deux");
}

#[test]
fn a_rename_onto_an_existing_path_takes_its_place() {
    let mut inodes = InodeTable::default();
    let (a, b) = (inodes.ino("d/a"), inodes.ino("d/b"));
    inodes.rename("d/a", "d/b");
    assert_eq!(inodes.ino("d/b"), a);
    let again = inodes.ino("d/a");
    assert!(again != a && again != b);
}

#[test]
fn a_rename_onto_a_shown_path_takes_its_place_in_the_next_tree() {
    let mut inodes = InodeTable::default();
    let first = Namespace::build(
        vec![file("d/a", 1), file("d/b", 1)],
        SystemTime::UNIX_EPOCH,
        &mut inodes,
    );
    let (a, b) = (resolve(&first, "d/a"), resolve(&first, "d/b"));
    inodes.rename("d/a", "d/b");
    assert_eq!(inodes.ino("d/b"), a);
    // The tree still shows "d/a" with its old number: a rename takes it all the same.
    let again = inodes.ino("d/a");
    assert!(again != a && again != b);
    let second = Namespace::build(
        vec![file("d/a", 1), file("d/b", 1)],
        SystemTime::UNIX_EPOCH,
        &mut inodes,
    );
    assert_eq!(resolve(&second, "d/b"), a);
    assert_eq!(resolve(&second, "d/a"), again);
    assert_eq!(second.path(a).unwrap(), "d/b");
}

#[test]
fn a_path_taken_out_of_the_tree_gets_its_number_back() {
    let mut inodes = InodeTable::default();
    let first = Namespace::build(
        vec![file("x/one", 1), file("y/two", 1)],
        SystemTime::UNIX_EPOCH,
        &mut inodes,
    );
    let (x, one) = (resolve(&first, "x"), resolve(&first, "x/one"));
    // Hidden for two rebuilds (a delete in progress), then shown again.
    for _ in 0..2 {
        Namespace::build(vec![file("y/two", 1)], SystemTime::UNIX_EPOCH, &mut inodes);
        assert_eq!(inodes.ino("x/one"), one, "asked while hidden");
    }
    let back = Namespace::build(
        vec![file("x/one", 1), file("y/two", 1)],
        SystemTime::UNIX_EPOCH,
        &mut inodes,
    );
    assert_eq!((resolve(&back, "x"), resolve(&back, "x/one")), (x, one));
}

#[test]
fn the_numbers_of_shown_paths_are_kept_by_the_tree_alone() {
    let mut inodes = InodeTable::default();
    let entries = (0..1000).map(|i| file(&format!("v/p{i}/.zarray"), 1));
    let ns = Namespace::build(
        entries.collect::<Vec<_>>(),
        SystemTime::UNIX_EPOCH,
        &mut inodes,
    );
    assert_eq!(ns.len(), 2002);
    // Nothing kept apart per path: the table reads the tree.
    assert_eq!(inodes.kept_apart(), 0);
    let p7 = resolve(&ns, "v/p7/.zarray");
    assert_eq!(inodes.ino("v/p7/.zarray"), p7);
    assert_eq!(inodes.kept_apart(), 0);
}
