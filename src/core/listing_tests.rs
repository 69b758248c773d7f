//! Listing work at scale, counted rather than timed: a recursive listing of a mount whose one
//! directory holds many properties looks at a number of nodes proportional to the entries it
//! lists (a `stat` of a large directory, asked for every `..`, once counted all its children).

use std::collections::BTreeMap;

use super::namespace::VISITS;
use super::*;
use crate::formats::model::{Item, Payload, Property, PropertyId};
use crate::formats::source::open_source;
use crate::views::ViewSelection;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

/// What the FUSE adapter's `readdirplus` asks per reply.
const PAGE: usize = 256;

/// A mount of `fixture` with `n` more vectors on axis `cell` (copies of `score`).
fn with_many_vectors(fixture: &str, n: usize) -> DafFs {
    let mut source = open_source(&format!("{VECTORS}/{fixture}")).unwrap();
    let dataset = &mut source.datasets[0].dataset;
    let (eltype, data) = match &dataset.vectors["cell"]["score"].payload {
        Payload::Dense { eltype, data } => (*eltype, data.clone()),
        other => panic!("score is {other:?}"),
    };
    for i in 0..n {
        let id = PropertyId::Vector {
            axis: "cell".into(),
            name: format!("p{i:05}"),
        };
        let payload = Payload::Dense {
            eltype,
            data: data.clone(),
        };
        let property = Property {
            payload,
            mtime: SystemTime::UNIX_EPOCH,
            packed: BTreeMap::new(),
        };
        dataset.insert(&id, Item::Property(property)).unwrap();
    }
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
