//! Views: the FilesDaf and the Zarr tree of a data set, as flat lists of files and directories.
//!
//! A view never reads payload bytes: it pairs each path with a blob from the model (the very same
//! `Arc<Blob>` in both views for numeric payloads) or with a lazily synthesised one (descriptors,
//! `.zarray`s, scalar chunks, converted text). The core turns these lists into an inode tree.

pub mod files;
pub mod zarr;

use std::sync::Arc;
use std::time::SystemTime;

use crate::formats::model::Dataset;
use crate::formats::source::NamedDataset;
use crate::stores::{Blob, Bytes};

/// A node of a view.
#[derive(Clone, Debug)]
pub enum ViewNode {
    /// A directory (parents of files are implied; list a directory to have it even when empty).
    Dir,
    /// A file and its content.
    File(Arc<Blob>),
}

/// One path of a view, relative to the mount root.
#[derive(Clone, Debug)]
pub struct ViewEntry {
    /// `/`-separated path.
    pub path: String,
    /// What is there.
    pub node: ViewNode,
    /// Its modification time.
    pub mtime: SystemTime,
}

/// Which layouts to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewSelection {
    /// `NAME.daf/` and `NAME.daf.zarr/` side by side.
    Both,
    /// Only the FilesDaf layout.
    Files,
    /// Only the Zarr layout.
    Zarr,
}

/// Collects the entries of one view under a path prefix.
pub(crate) struct ViewBuilder {
    prefix: String,
    entries: Vec<ViewEntry>,
}

impl ViewBuilder {
    pub(crate) fn new(prefix: &str) -> ViewBuilder {
        let prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        ViewBuilder {
            prefix,
            entries: Vec::new(),
        }
    }

    fn full(&self, path: &str) -> String {
        format!("{}{path}", self.prefix)
            .trim_end_matches('/')
            .to_string()
    }

    pub(crate) fn dir(&mut self, path: &str, mtime: SystemTime) {
        let path = self.full(path);
        self.entries.push(ViewEntry {
            path,
            node: ViewNode::Dir,
            mtime,
        });
    }

    pub(crate) fn file(&mut self, path: &str, blob: Arc<Blob>, mtime: SystemTime) {
        let path = self.full(path);
        self.entries.push(ViewEntry {
            path,
            node: ViewNode::File(blob),
            mtime,
        });
    }

    /// A file whose (small) content is made by `make` on first access.
    pub(crate) fn text(
        &mut self,
        path: &str,
        mtime: SystemTime,
        make: impl Fn() -> String + Send + Sync + 'static,
    ) {
        self.file(
            path,
            Blob::lazy(None, move || Ok(Bytes::from_vec(make().into_bytes()))),
            mtime,
        );
    }

    pub(crate) fn finish(self) -> Vec<ViewEntry> {
        self.entries
    }
}

/// Every entry of the mount: for each data set, its views under the right names.
pub fn mount_entries(datasets: &[NamedDataset], selection: ViewSelection) -> Vec<ViewEntry> {
    let single = datasets.len() == 1;
    let mut entries = Vec::new();
    for NamedDataset { name, dataset } in datasets {
        let place = |suffix: &str| {
            if single && selection != ViewSelection::Both {
                String::new()
            } else {
                format!("{name}{suffix}")
            }
        };
        if selection != ViewSelection::Zarr {
            entries.extend(files::files_view(dataset, &place(".daf")));
        }
        if selection != ViewSelection::Files {
            entries.extend(zarr::zarr_view(dataset, &place(".daf.zarr")));
        }
    }
    entries
}

/// The time synthesised whole-data-set files and directories show.
pub(crate) fn dataset_mtime(dataset: &Dataset) -> SystemTime {
    dataset.latest_mtime()
}
