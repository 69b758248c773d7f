//! Tests of the edited trees on a large tree (`edit.rs`): one change looks at a
//! bounded number of nodes, and gives the tree a build gives.

use std::cell::Cell;
use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

use crate::core::namespace::edit_tests::{copied, snapshot, FIXTURES};
use crate::core::namespace::{NodeKind, VISITS};
use crate::core::DafFs;

use crate::formats::source::open_source;
use crate::staging::StagingArea;
use crate::views::stream_tests::add_vectors;
use crate::views::ViewSelection;

/// Counts the nodes looked at by `f`.
fn visits(f: impl FnOnce()) -> u64 {
    let before = VISITS.with(Cell::get);
    f();
    VISITS.with(Cell::get) - before
}

/// A writable mount of a copy of fixture `name` (in `tmp`) with 20,000 more vectors, showing
/// `views`.
fn large_writable(tmp: &Path, name: &str, views: ViewSelection) -> DafFs {
    let copy = copied(tmp, name);
    let mut opened = open_source(copy.to_str().unwrap()).unwrap();
    add_vectors(&mut opened.datasets[0].dataset, 20_000);
    let staging = StagingArea::for_source(&opened.path);
    DafFs::with_staging(
        opened.datasets,
        views,
        SystemTime::UNIX_EPOCH,
        Some(staging),
    )
}

#[test]
fn a_change_of_a_staged_path_looks_at_few_nodes_of_a_large_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = large_writable(tmp.path(), FIXTURES[0], ViewSelection::Both);
    assert!(fs.namespace().len() >= 100_000, "{}", fs.namespace().len());
    let scalars = fs.resolve("files_v1_0.daf/scalars").unwrap();
    let vectors = fs.resolve("files_v1_0.daf/vectors").unwrap();
    // At most the path's directories, the few children of the directories changed, and the
    // answer's attributes.
    const BOUND: u64 = 200;
    let mut fh = 0;
    let created = visits(|| fh = fs.create(scalars, OsStr::new("new.json"), false).unwrap().1);
    fs.release(fh);
    assert!(created <= BOUND, "a create looked at {created} nodes");
    let made = visits(|| {
        fs.mkdir(vectors, OsStr::new("newaxis")).unwrap();
    });
    assert!(made <= BOUND, "a mkdir looked at {made} nodes");
    let removed = visits(|| fs.unlink(scalars, OsStr::new("new.json")).unwrap());
    assert!(removed <= BOUND, "an unlink looked at {removed} nodes");
    let removed = visits(|| fs.rmdir(vectors, OsStr::new("newaxis")).unwrap());
    assert!(removed <= BOUND, "an rmdir looked at {removed} nodes");
    assert!(fs.resolve("files_v1_0.daf/scalars/new.json").is_err());
}

/// A commit of a scalar or a vector into the FilesDaf 1.0 view edits the tree: it looks at a
/// bounded number of nodes, however large the tree.
#[test]
fn a_commit_looks_at_few_nodes_of_a_large_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let fs = large_writable(tmp.path(), FIXTURES[0], ViewSelection::Files);
    assert!(fs.namespace().len() >= 40_000, "{}", fs.namespace().len());
    // The path, binary searches among a directory's 20,000 children, the groups: not the tree.
    const BOUND: u64 = 1_000;
    let write = |dir: &str, name: &str, content: &[u8]| {
        let dir = fs.resolve(dir).unwrap();
        let (_, fh) = fs.create(dir, OsStr::new(name), false).unwrap();
        fs.write(fh, 0, content).unwrap();
        let visited = visits(|| fs.flush(fh, None).unwrap());
        fs.release(fh);
        visited
    };
    let scalar = write("scalars", "new.json", b"{\"type\":\"Int64\",\"value\":7}");
    assert!(fs.resolve("scalars/new.json").is_ok());
    assert!(
        scalar <= BOUND,
        "a scalar's commit looked at {scalar} nodes"
    );
    let descriptor = b"{\"format\":\"dense\",\"eltype\":\"Float32\"}";
    // Many, so that a staged time later than its file's (which moves the directories' times back
    // at the commit, and recounts their children) would show: see `state::now`.
    for i in 0..30 {
        write("vectors/cell", &format!("new{i}.json"), descriptor);
        let vector = write("vectors/cell", &format!("new{i}.data"), &[0; 12]);
        assert!(
            vector <= BOUND,
            "vector {i}'s commit looked at {vector} nodes"
        );
    }
    write("vectors/cell", "new.json", descriptor);
    write("vectors/cell", "new.data", &[0; 12]);
    let ino = fs.resolve("vectors/cell/new.data").unwrap();
    assert_eq!(fs.read(ino, 0, 0, 4096).unwrap().len(), 12);
    // The same tree as a build of the state.
    let state = fs.read_state();
    let rebuilt = state.build(&mut state.inodes.clone());
    assert_eq!(snapshot(&state.namespace), snapshot(&rebuilt));
}

/// With both views, a commit of a vector edits the item's entries and the groups, not the
/// directories of the other 20,000 arrays of its axis in the Zarr view; a `stat` of its
/// directories after it counts no children (their sub-directory counts are kept through edits,
/// as a build gives them). The documents made of every item (`.zmetadata`, or the v3 root
/// `zarr.json` and the FilesDaf 1.1 `metadata.json`) are made from those shown before, not from
/// the whole view rendered again. For both fixtures (FilesDaf 1.0 and Zarr v2, FilesDaf 1.1 and
/// Zarr v3, whose chunk is in a directory `c/` a commit's edit makes).
#[test]
fn a_commit_into_both_views_of_a_large_tree_edits_few_nodes() {
    for name in FIXTURES {
        let tmp = tempfile::tempdir().unwrap();
        let fs = large_writable(tmp.path(), name, ViewSelection::Both);
        // Binary searches along the paths of the 44 entries edited (the item's and the groups').
        const BOUND: u64 = 5_000;
        let dirs = [
            format!("{name}.daf/vectors/cell"),
            format!("{name}.daf.zarr/vectors/cell"),
        ];
        // Numbers taken once: a lookup (`resolve`) is a `stat` too.
        let inos = dirs.clone().map(|dir| fs.resolve(&dir).unwrap());
        let documents = [
            format!("{name}.daf.zarr/.zmetadata"),
            format!("{name}.daf.zarr/zarr.json"),
            format!("{name}.daf/metadata.json"),
        ];
        let bases = || {
            let ns = fs.namespace();
            let base = |path: &String| {
                let node = ns.node(fs.resolve(path).ok()?)?;
                match node.kind() {
                    NodeKind::File(blob) => crate::views::document_base(blob),
                    _ => None,
                }
            };
            documents.iter().filter_map(base).collect::<Vec<usize>>()
        };
        let before = bases();
        assert_eq!(
            before.len(),
            if name == FIXTURES[0] { 1 } else { 2 },
            "{name}"
        );
        let descriptor = b"{\"format\":\"dense\",\"eltype\":\"Float32\"}";
        for (file, content) in [("new.json", &descriptor[..]), ("new.data", &[1; 12][..])] {
            let visited = visits(|| {
                let (_, fh) = fs.create(inos[0], OsStr::new(file), false).unwrap();
                fs.write(fh, 0, content).unwrap();
                fs.flush(fh, None).unwrap();
                fs.release(fh);
            });
            assert!(
                visited <= BOUND,
                "{name}: writing {file} looked at {visited} nodes"
            );
            for (dir, ino) in dirs.iter().zip(inos) {
                let stat = visits(|| {
                    fs.getattr(ino).unwrap();
                });
                assert!(stat <= BOUND, "a stat of {dir} looked at {stat} nodes");
            }
        }
        let chunk = match name == FIXTURES[0] {
            true => "0",
            false => "c/0",
        };
        assert!(fs
            .resolve(&format!("{name}.daf.zarr/vectors/cell/new/{chunk}"))
            .is_ok());
        assert_eq!(
            bases(),
            before,
            "{name}: a document was rendered whole again"
        );
        let state = fs.read_state();
        let rebuilt = state.build(&mut state.inodes.clone());
        assert_eq!(snapshot(&state.namespace), snapshot(&rebuilt), "{name}");
    }
}
