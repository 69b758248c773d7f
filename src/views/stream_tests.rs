//! Tests of views handed on in batches while they are rendered (`EntrySink`): the same view as
//! one kept whole, for every layout; and the test data of large views other tests share.

use std::sync::mpsc::sync_channel;
use std::time::SystemTime;

use super::*;
use crate::formats::model::{Item, Payload, Property};
use crate::formats::source::open_source;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../shared/fixtures/vectors/files_v1_0.daf"
);

/// Adds `n` vectors of axis `cell` (copies of `score`) to `dataset`, in memory.
pub(crate) fn add_vectors(dataset: &mut Dataset, n: usize) {
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
            mtime: SystemTime::UNIX_EPOCH.into(),
            packed: Default::default(),
        };
        dataset.insert(&id, Item::Property(property)).unwrap();
    }
}

/// What a reader sees of `entries`, in order: paths, kinds and contents, times, flags.
fn seen(entries: &[ViewEntry]) -> Vec<(String, Option<Vec<u8>>, SystemTime, bool)> {
    entries
        .iter()
        .map(|e| {
            let content = match &e.node {
                ViewNode::File(blob) => Some(blob.bytes().unwrap().as_slice().to_vec()),
                ViewNode::Dir => None,
            };
            (e.path.clone(), content, e.mtime, e.elidable)
        })
        .collect()
}

/// The view of data set 0 in `format` at mount path `v`.
fn root_at_v(format: Format, dimension_names: bool) -> ViewRoot {
    ViewRoot {
        dataset: 0,
        kind: format.family().into(),
        format,
        mount: "v".into(),
        canonical: "v".into(),
        dimension_names,
        anndata: None,
    }
}

#[test]
fn a_view_handed_on_in_batches_is_the_view_kept_whole() {
    let mut opened = open_source(FIXTURE).unwrap();
    add_vectors(&mut opened.datasets[0].dataset, 3 * BATCH);
    let dataset = &opened.datasets[0].dataset;
    let formats = [
        Format::Files(FilesVersion::V1_0),
        Format::Files(FilesVersion::V1_1),
        Format::ZarrV2,
        Format::ZarrV3,
    ];
    for format in formats {
        for dimension_names in [false, true] {
            let root = root_at_v(format, dimension_names);
            let whole = view_entries(dataset, &root);
            let (sender, received) = sync_channel(64);
            let sink = EntrySink {
                tag: 7,
                sender,
                spent: Arc::default(),
            };
            let rest = view_entries_into(dataset, &root, Some(&sink));
            drop(sink);
            let batches: Vec<(usize, Vec<ViewEntry>)> = received.try_iter().collect();
            assert!(batches.len() >= 2, "{format:?}: {} batches", batches.len());
            assert!(batches.iter().all(|(tag, _)| *tag == 7));
            let streamed: Vec<ViewEntry> = batches
                .into_iter()
                .flat_map(|(_, batch)| batch)
                .chain(rest)
                .collect();
            assert_eq!(
                seen(&streamed),
                seen(&whole),
                "{format:?}, dimension names {dimension_names}"
            );
        }
    }
}

/// Every item of `dataset`.
fn items(dataset: &Dataset) -> Vec<PropertyId> {
    let scalars = dataset
        .scalars
        .keys()
        .map(|n| PropertyId::Scalar(n.clone()));
    let axes = dataset.axes.keys().map(|n| PropertyId::Axis(n.clone()));
    let vectors = dataset.vectors.iter().flat_map(|(axis, props)| {
        props.keys().map(|name| PropertyId::Vector {
            axis: axis.clone(),
            name: name.to_string(),
        })
    });
    let matrices = dataset.matrices.iter().flat_map(|((rows, cols), props)| {
        props.keys().map(|name| PropertyId::Matrix {
            rows: rows.clone(),
            cols: cols.clone(),
            name: name.to_string(),
        })
    });
    scalars.chain(axes).chain(vectors).chain(matrices).collect()
}

/// The blob a view's entries show at `path`, as a tree would.
fn blob_in(entries: &[ViewEntry], path: &str) -> Option<Arc<Blob>> {
    entries.iter().find_map(|e| match &e.node {
        ViewNode::File(blob) if e.path == path => Some(blob.clone()),
        _ => None,
    })
}

/// What a commit of one item edits in a view (`Layout::local_view`, its document made of every
/// item made from the one `shown` has) is the whole view's entries of that item and of no item,
/// for every layout and every item of the fixture (scalars, axes, dense and sparse vectors and
/// matrices): unchanged, then after the item is removed, then put back (each time from the last
/// local view's document, as a tree edited by commits has it).
#[test]
fn a_commits_local_view_is_the_whole_view_but_the_other_items() {
    let formats = [
        Format::ZarrV2,
        Format::ZarrV3,
        Format::Files(FilesVersion::V1_0),
        Format::Files(FilesVersion::V1_1),
    ];
    for format in formats {
        let mut opened = open_source(FIXTURE).unwrap();
        let dataset = &mut opened.datasets[0].dataset;
        let ids = items(dataset);
        assert!(ids.len() >= 8, "{ids:?}");
        let root = root_at_v(format, false);
        // What the tree shows: the whole view at first, then each local view's entries.
        let mut shown = view_entries(dataset, &root);
        for id in &ids {
            let in_use = matches!(id, PropertyId::Axis(a) if dataset.axis_in_use(a));
            let mut removed = (!in_use).then(|| dataset.remove(id)).flatten();
            for step in ["unchanged or removed", "put back"] {
                if step == "put back" {
                    let Some(item) = removed.take() else {
                        continue;
                    };
                    dataset.insert(id, item).unwrap();
                }
                let whole = view_entries(dataset, &root);
                let mut expected = whole.clone();
                expected.retain(|e| of_item_or_none(&root, e, id));
                let local = local_entries(dataset, &root, id, &|p| blob_in(&shown, p)).unwrap();
                assert_eq!(seen(&local), seen(&expected), "{format:?}, {id:?}, {step}");
                assert!(local.len() < whole.len(), "{format:?}, {id:?}");
                shown = local;
            }
        }
    }
}
