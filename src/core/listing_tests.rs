//! Listing work at scale, counted rather than timed: a recursive listing of a mount whose one
//! directory holds many properties looks at a number of nodes proportional to the entries it
//! lists (a `stat` of a large directory, asked for every `..`, once counted all its children).

use super::namespace::VISITS;
use super::*;
use crate::formats::source::open_source;
use crate::views::stream_tests::add_vectors;
use crate::views::ViewSelection;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

/// What the FUSE adapter's `readdirplus` asks per reply.
const PAGE: usize = 256;

/// A mount of `fixture` with `n` more vectors on axis `cell` (copies of `score`).
fn with_many_vectors(fixture: &str, n: usize) -> DafFs {
    let mut source = open_source(&format!("{VECTORS}/{fixture}")).unwrap();
    add_vectors(&mut source.datasets[0].dataset, n);
    DafFs::new(source.datasets, ViewSelection::Both, SystemTime::UNIX_EPOCH)
}

/// Lists `ino` and everything under it like `ls -lR` through the adapter's `readdirplus`:
/// pages from offset 0, a `getattr` of every entry (`.` and `..` too). Returns the entries seen.
fn list_recursively(fs: &DafFs, ino: u64) -> usize {
    let mut seen = 0;
    let mut offset = 0;
    loop {
        let page = fs.readdir(ino, offset, PAGE).unwrap();
        let Some(last) = page.last() else {
            return seen;
        };
        offset = last.next_offset;
        for entry in &page {
            seen += 1;
            fs.getattr(entry.ino).unwrap();
            if entry.kind == Kind::Dir && entry.name != "." && entry.name != ".." {
                seen += list_recursively(fs, entry.ino);
            }
        }
    }
}

#[test]
fn a_recursive_listing_looks_at_each_node_a_bounded_number_of_times() {
    const N: usize = 3000;
    for fixture in ["zarr_v2.daf.zarr", "zarr_v3.daf.zarr"] {
        let fs = with_many_vectors(fixture, N);
        // Both views: the FilesDaf view's large directory holds files, the Zarr view's holds
        // directories (one per array).
        let before = VISITS.with(|v| v.get());
        let seen = list_recursively(&fs, ROOT);
        let visits = VISITS.with(|v| v.get()) - before;
        assert!(seen > 4 * N, "{fixture}: only {seen} entries listed");
        // A handful of visits per entry (its own, its presence, its parent's count); the
        // quadratic path made about N more per sub-directory of the large one.
        assert!(
            visits < 20 * seen as u64,
            "{fixture}: {visits} node visits for {seen} entries"
        );
    }
}

#[test]
fn a_first_stat_of_a_large_directory_counts_nothing() {
    const N: usize = 3000;
    for (fixture, view) in [
        ("zarr_v2.daf.zarr", "zarr_v2.daf.zarr"),
        ("zarr_v3.daf.zarr", "zarr_v3.daf.zarr"),
        ("zarr_v2.daf.zarr", "zarr_v2.daf"),
    ] {
        let fs = with_many_vectors(fixture, N);
        let ns = fs.namespace();
        let dir = resolve_in(&ns, &format!("{view}/vectors/cell")).unwrap();
        let before = VISITS.with(|v| v.get());
        let attr = fs.getattr(dir).unwrap();
        let visits = VISITS.with(|v| v.get()) - before;
        assert!(visits < 100, "{view}: {visits} node visits for one stat");
        // The count is still right: one sub-directory per array in the Zarr view, none in FilesDaf.
        let arrays = if view.ends_with(".zarr") { N + 4 } else { 0 };
        assert_eq!(attr.nlink as usize, 2 + arrays, "{view}");
    }
}

/// Pages of directory `dir` through `list_page`, each reply holding `room` entries, with
/// attributes: (name, ino, attributes) of every entry, in order.
fn pages(fs: &DafFs, dir: u64, room: usize) -> Vec<(String, u64, Option<Attr>)> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let mut page = Vec::new();
        fs.list_page(dir, offset, PAGE, true, |e| {
            if page.len() == room {
                return true;
            }
            page.push((e.name.to_string(), e.ino, e.attr, e.next_offset));
            false
        })
        .unwrap();
        let Some(last) = page.last() else {
            return out;
        };
        offset = last.3;
        out.extend(
            page.into_iter()
                .map(|(name, ino, attr, _)| (name, ino, attr)),
        );
    }
}

#[test]
fn a_full_reply_ends_a_page_and_the_next_page_resumes_at_the_entry_it_refused() {
    let fs = with_many_vectors("zarr_v2.daf.zarr", 300);
    let ns = fs.namespace();
    for view in ["zarr_v2.daf.zarr", "zarr_v2.daf"] {
        let dir = resolve_in(&ns, &format!("{view}/vectors/cell")).unwrap();
        let all: Vec<(String, u64)> = fs
            .readdir(dir, 0, usize::MAX)
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.ino))
            .collect();
        assert!(all.len() > 300, "{view}: {} entries", all.len());
        for room in [1, 7, PAGE + 3] {
            let listed = pages(&fs, dir, room);
            let names: Vec<(String, u64)> =
                listed.iter().map(|(n, i, _)| (n.clone(), *i)).collect();
            assert_eq!(names, all, "{view}, {room} entries per reply");
            for (name, ino, attr) in listed {
                if name == "." || name == ".." {
                    assert_eq!(attr, None, "{view}/{name}");
                } else {
                    assert_eq!(attr, Some(fs.getattr(ino).unwrap()), "{view}/{name}");
                }
            }
        }
    }
}

#[test]
fn a_page_looks_only_at_the_entries_its_reply_holds() {
    const N: usize = 3000;
    let fs = with_many_vectors("zarr_v2.daf.zarr", N);
    let ns = fs.namespace();
    let dir = resolve_in(&ns, "zarr_v2.daf.zarr/vectors/cell").unwrap();
    // A reply of 4 KiB holds about 20 entries with attributes; a page may settle the presence
    // of the next PAGE entries at once (one visit each), but names and stats only what it
    // sends (a handful of visits each: the array directory, its presence, its three files).
    let before = VISITS.with(|v| v.get());
    let mut sent = 0;
    fs.list_page(dir, 100, PAGE, true, |_| {
        sent += 1;
        sent > 20
    })
    .unwrap();
    let visits = VISITS.with(|v| v.get()) - before;
    assert_eq!(sent, 21);
    assert!(
        visits < (PAGE + 16 * sent) as u64,
        "{visits} node visits for a page of 20 entries"
    );
}

#[test]
fn a_mount_of_views_in_render_order_is_built_without_the_hash_table() {
    use super::namespace::INDEXED;
    for fixture in [
        "zarr_v2.daf.zarr",
        "zarr_v3.daf.zarr",
        "files_v1_0.daf",
        "files_v1_1.daf",
    ] {
        INDEXED.with(|n| n.set(0));
        let fs = with_many_vectors(fixture, 3000);
        assert_eq!(INDEXED.with(|n| n.get()), 0, "{fixture}");
        // And the tree is whole: every view entry was placed once.
        assert!(list_recursively(&fs, ROOT) > 4 * 3000, "{fixture}");
    }
}
