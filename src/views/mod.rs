//! Views: the FilesDaf and the Zarr tree of a data set, as flat lists of files and directories.
//!
//! A view never reads payload bytes: it pairs each path with a blob from the model (the very same
//! `Arc<Blob>` in both views for numeric payloads) or with a lazily synthesised one (descriptors,
//! `.zarray`s, scalar chunks, converted text). The core turns these lists into an inode tree.

pub mod anndata;
pub mod dimensions;
pub mod files;
pub mod h5ad;
pub mod h5df;
pub mod hdf5;
mod keyed;
mod layered;
pub mod layout;
pub mod publish;
mod roots;
pub mod zarr_v2;
pub mod zarr_v3;

#[cfg(test)]
pub(crate) mod stream_tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::formats::json::FilesVersion;
use crate::formats::model::{Dataset, PropertyId};
use crate::formats::source::Format;
use crate::stores::{lock, Blob, Bytes};

pub(crate) use roots::view_format;
pub use roots::{anndata_refusal, is_current, view_roots};

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
    /// A file shown only if its blob exists ([`Blob::presence`]; with its implied parent
    /// directories): a Zarr chunk a writer may have left out. Known blobs are always present.
    pub elidable: bool,
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

/// Where a view being rendered hands its entries on as it makes them, in batches (the tree is
/// built from them on another thread meanwhile), each tagged with the view's number.
#[derive(Clone, Debug)]
pub struct EntrySink {
    /// The view's number, sent with each batch.
    pub tag: usize,
    /// Where the batches go.
    pub sender: std::sync::mpsc::SyncSender<(usize, Vec<ViewEntry>)>,
    /// The paths the other side is done with, freed here at each batch: memory is freed
    /// fastest by the thread that allocated it (another thread's frees contend for its heap).
    pub spent: Arc<Mutex<Vec<Vec<String>>>>,
}

/// A synthesised document's bytes and its blob (see [`ViewBuilder::document`]).
pub(crate) type Document = (Bytes, Arc<Blob>);

/// The number of entries of a batch handed to an [`EntrySink`].
const BATCH: usize = 4096;

/// Collects the entries of one view under a path prefix (or hands them on in batches).
pub(crate) struct ViewBuilder {
    prefix: String,
    entries: Vec<ViewEntry>,
    /// Synthesised documents by content: equal ones (the `.zarray` of every vector of one type
    /// on one axis, every `{}`) share one blob, so a million properties do not keep a million
    /// copies of a few documents.
    documents: HashMap<Vec<u8>, Document, foldhash::fast::RandomState>,
    /// Where full batches go, if anywhere.
    sink: Option<EntrySink>,
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
            documents: HashMap::default(),
            sink: None,
        }
    }

    /// A builder that hands its entries to `sink` in batches; [`ViewBuilder::finish`] then
    /// returns the last ones.
    pub(crate) fn into_sink(prefix: &str, sink: Option<&EntrySink>) -> ViewBuilder {
        let mut view = ViewBuilder::new(prefix);
        view.sink = sink.cloned();
        view
    }

    /// Adds `entry`, first handing on a full batch (the last entry stays: see
    /// [`ViewBuilder::elidable_file`]).
    fn push(&mut self, entry: ViewEntry) {
        if self.entries.len() >= BATCH {
            if let Some(sink) = &self.sink {
                let mut batch = std::mem::replace(&mut self.entries, Vec::with_capacity(BATCH));
                keep_showable(&mut batch);
                // A closed sink is a build given up: the rest is not needed.
                let _ = sink.sender.send((sink.tag, batch));
                drop(std::mem::take(&mut *lock(&sink.spent)));
            }
        }
        self.entries.push(entry);
    }

    fn full(&self, path: &str) -> String {
        // One allocation of the exact size (a view makes one path per entry).
        let path = path.trim_end_matches('/');
        let mut full = self.full_of(&[path]);
        if path.is_empty() {
            let kept = full.trim_end_matches('/').len();
            full.truncate(kept);
        }
        full
    }

    /// The full path of the relative path made of `parts`, in one allocation of the exact size.
    fn full_of(&self, parts: &[&str]) -> String {
        let len = parts.iter().map(|p| p.len()).sum::<usize>();
        let mut full = String::with_capacity(self.prefix.len() + len);
        full.push_str(&self.prefix);
        parts.iter().for_each(|part| full.push_str(part));
        full
    }

    pub(crate) fn dir(&mut self, path: &str, mtime: SystemTime) {
        let path = self.full(path);
        self.push(ViewEntry {
            path,
            node: ViewNode::Dir,
            mtime,
            elidable: false,
        });
    }

    pub(crate) fn file(&mut self, path: &str, blob: Arc<Blob>, mtime: SystemTime) {
        self.file_at(&[path], blob, mtime);
    }

    /// A file at the relative path made of `parts` (`[base, ".json"]`: no path is formatted
    /// first).
    pub(crate) fn file_at(&mut self, parts: &[&str], blob: Arc<Blob>, mtime: SystemTime) {
        let path = self.full_of(parts);
        self.push(ViewEntry {
            path,
            node: ViewNode::File(blob),
            mtime,
            elidable: false,
        });
    }

    /// A file shown only if its blob turns out present (see [`ViewEntry::elidable`]); a blob
    /// that cannot be absent makes a plain file.
    pub(crate) fn elidable_file_at(&mut self, parts: &[&str], blob: Arc<Blob>, mtime: SystemTime) {
        let elidable = blob.may_be_absent();
        self.file_at(parts, blob, mtime);
        if let Some(entry) = self.entries.last_mut() {
            entry.elidable = elidable;
        }
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

    /// The ready blob of a synthesised document (and its bytes), shared with every equal
    /// document of this view.
    pub(crate) fn document(&mut self, content: Vec<u8>) -> Document {
        self.documents
            .entry(content)
            .or_insert_with_key(|content| {
                let bytes = Bytes::from_vec(content.clone());
                (bytes.clone(), Blob::ready(bytes))
            })
            .clone()
    }

    /// The entries not handed on.
    pub(crate) fn finish(self) -> Vec<ViewEntry> {
        self.entries
    }
}

/// Renders every item of `dataset` into `z` in the order of a Zarr view (scalars, axes, then
/// vectors and matrices: `node` renders a scalar's or an axis's node, `property` a vector's or
/// a matrix's).
pub(crate) fn zarr_items<Z>(
    z: &mut Z,
    dataset: &Dataset,
    mut node: impl FnMut(&mut Z, &PropertyId),
    mut property: impl FnMut(&mut Z, &crate::formats::model::PropertyRef<'_>),
) {
    for id in scalars_and_axes(dataset) {
        node(z, &id);
    }
    for p in dataset.properties() {
        property(z, &p);
    }
}

/// The scalars, then the axes, of `dataset`: the items every view renders before its vectors
/// and matrices.
pub(crate) fn scalars_and_axes(dataset: &Dataset) -> impl Iterator<Item = PropertyId> + '_ {
    let scalars = dataset
        .scalars
        .keys()
        .map(|n| PropertyId::Scalar(n.clone()));
    let axes = dataset.axes.keys().map(|n| PropertyId::Axis(n.clone()));
    scalars.chain(axes)
}

/// Renders item `id` of `dataset` into `z` as [`zarr_items`] does (nothing if it is gone).
pub(crate) fn zarr_item<Z>(
    z: &mut Z,
    dataset: &Dataset,
    id: &PropertyId,
    node: impl FnOnce(&mut Z, &PropertyId),
    property: impl FnOnce(&mut Z, &crate::formats::model::PropertyRef<'_>),
) {
    match id {
        PropertyId::Scalar(_) | PropertyId::Axis(_) => node(z, id),
        _ => {
            if let Some(p) = dataset.property_ref(id) {
                property(z, &p);
            }
        }
    }
}

/// The blob the mount's tree shows at a mount path, if a file is there: a commit's view of one
/// item makes the document made of every item from the one shown ([`Blob::made_of`]).
pub type Shown<'a> = &'a dyn Fn(&str) -> Option<Arc<Blob>>;

/// What the document shown at `path` of the view at `prefix` is made of, if it is a `T`.
pub(crate) fn shown_made_of<T: Send + Sync + 'static>(
    shown: Shown<'_>,
    prefix: &str,
    path: &str,
) -> Option<Arc<T>> {
    shown(&join(prefix, path))?.made_of()?.downcast::<T>().ok()
}

/// The kinds of view: `NAME.daf/` and `NAME.daf.zarr/` (the two families of formats), and
/// `NAME.anndata.zarr/` ([`anndata`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewKind {
    /// FilesDaf.
    Files,
    /// ZarrDaf.
    Zarr,
    /// AnnData, in Zarr.
    AnnData,
}

impl From<crate::formats::source::Family> for ViewKind {
    fn from(family: crate::formats::source::Family) -> ViewKind {
        match family {
            crate::formats::source::Family::Files => ViewKind::Files,
            crate::formats::source::Family::Zarr => ViewKind::Zarr,
        }
    }
}

/// Where one view of one data set sits in the mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewRoot {
    /// Index of the data set.
    pub dataset: usize,
    /// FilesDaf or Zarr.
    pub kind: ViewKind,
    /// The format (layout and version) the view is in.
    pub format: Format,
    /// Its directory in the mount ("" when a single view is mounted at the root).
    pub mount: String,
    /// Its directory in a `--view both` mount (`NAME.daf` or `NAME.daf.zarr`): the stable name
    /// used for staged files.
    pub canonical: String,
    /// Whether its arrays carry xarray's dimension names (`--dimension-names`; Zarr views only).
    pub dimension_names: bool,
    /// The AnnData view's layout (its selection), for an AnnData view.
    pub anndata: Option<Arc<anndata::layout::AnnData>>,
}

impl ViewRoot {
    /// The layout the view is in.
    pub fn layout(&self) -> &dyn layout::Layout {
        match &self.anndata {
            Some(anndata) => anndata.as_ref(),
            None => layout::layout(self.format),
        }
    }

    /// `rel` (relative to the view) as a mount path.
    pub fn mount_path(&self, rel: &str) -> String {
        join(&self.mount, rel)
    }

    /// `rel` as a `--view both` path.
    pub fn canonical_path(&self, rel: &str) -> String {
        join(&self.canonical, rel)
    }

    /// Mount path `path` of this view, relative to the view (the inverse of
    /// [`ViewRoot::mount_path`]).
    pub fn relative<'p>(&self, path: &'p str) -> &'p str {
        path.strip_prefix(&self.mount)
            .map_or(path, |r| r.trim_start_matches('/'))
    }
}

/// `a/b` from `a` and `b`, either of which may be empty.
pub fn join(dir: &str, rel: &str) -> String {
    match (dir.is_empty(), rel.is_empty()) {
        (true, _) => rel.to_string(),
        (false, true) => dir.to_string(),
        (false, false) => [dir, "/", rel].concat(),
    }
}

/// Which views a mount shows, and in which formats.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ViewOptions {
    /// Which views.
    pub selection: ViewSelection,
    /// The Zarr view's format (`--zarr-format`; `None`: the default of each data set).
    pub zarr: Option<Format>,
    /// The FilesDaf view's version (`--files-version`; `None`: the default of each data set).
    pub files: Option<FilesVersion>,
    /// Whether the mount root also shows each data set's Zarr view as one ZIP file (`--zip`,
    /// [`publish`]).
    pub zip: bool,
    /// Whether the mount root also shows each data set as one H5df (HDF5) file (`--h5df`,
    /// [`h5df`]).
    pub h5df: bool,
    /// Whether the Zarr view's arrays carry xarray's dimension names (`--dimension-names`;
    /// see [`dimensions`]); without it the view is byte for byte what Julia writes.
    pub dimension_names: bool,
    /// Whether each data set also shows as AnnData, and what was asked of the selection
    /// (`--anndata`; see [`anndata`]; only with both views).
    pub anndata: Option<anndata::Request>,
    /// Whether each data set also shows as one h5ad file (`--h5ad`; see [`h5ad`]), and what was
    /// asked of its selection (the AnnData view's, when both are shown).
    pub h5ad: Option<anndata::Request>,
}

impl From<ViewSelection> for ViewOptions {
    fn from(selection: ViewSelection) -> ViewOptions {
        ViewOptions {
            selection,
            zarr: None,
            files: None,
            zip: false,
            h5df: false,
            dimension_names: false,
            anndata: None,
            h5ad: None,
        }
    }
}

/// The entries of one view of a data set.
///
/// A file whose name would exceed `NAME_MAX` (a sparse property with a name of 249 or 250 bytes
/// has FilesDaf files like `NAME.colptr` of 256 or more) is left out with a warning: the kernel
/// could list it but never look it up.
pub fn view_entries(dataset: &Dataset, root: &ViewRoot) -> Vec<ViewEntry> {
    view_entries_into(dataset, root, None)
}

/// [`view_entries`], handing them to `sink` in batches as they are made (if given): returns the
/// last ones.
pub fn view_entries_into(
    dataset: &Dataset,
    root: &ViewRoot,
    sink: Option<&EntrySink>,
) -> Vec<ViewEntry> {
    let mut entries = root
        .layout()
        .view_into(dataset, &root.mount, root.dimension_names, sink);
    keep_showable(&mut entries);
    entries
}

/// Leaves out the entries whose name the kernel could not look up (see [`view_entries`]).
fn keep_showable(entries: &mut Vec<ViewEntry>) {
    entries.retain(|e| {
        let name = e.path.rsplit('/').next().unwrap_or(&e.path);
        let fits = name.len() <= NAME_MAX;
        if !fits {
            log::warn!(
                "not showing {}: its name is longer than {NAME_MAX} bytes",
                e.path
            );
        }
        fits
    });
}

/// Tests only: the identity of what a whole view's rendering made of the document made of every
/// item that `blob` is (shared by those commits' edits made from it), if it is one.
#[cfg(test)]
pub(crate) fn document_base(blob: &Blob) -> Option<usize> {
    let made_of = blob.made_of()?;
    zarr_v2::base_of(&made_of)
        .or_else(|| zarr_v3::base_of(&made_of))
        .or_else(|| files::base_of(&made_of))
}

/// The entries of view `root` of `dataset` that a change of item `id` alone changes, as
/// [`view_entries`] shows them, in its order: the item's, and every entry of no item (the root,
/// groups, their documents, the files derived from every item), not the other items' files and
/// directories. A layout renders just those if it can ([`layout::Layout::local_view`], its
/// documents made of every item made from those the tree `shown` has), else the whole view is
/// rendered and they are kept. `None` when a change of one item changes other items' entries
/// (dimension names).
pub fn local_entries(
    dataset: &Dataset,
    root: &ViewRoot,
    id: &PropertyId,
    shown: Shown<'_>,
) -> Option<Vec<ViewEntry>> {
    let layout = root.layout();
    if root.dimension_names || !layout.item_local() {
        return None;
    }
    let mut entries = match layout.local_view(dataset, &root.mount, id, shown) {
        Some(entries) => entries,
        None => {
            let mut entries = view_entries(dataset, root);
            entries.retain(|e| of_item_or_none(root, e, id));
            entries
        }
    };
    keep_showable(&mut entries);
    Some(entries)
}

/// Whether `entry` of view `root` is item `id`'s or no item's (see [`local_entries`]).
pub(crate) fn of_item_or_none(root: &ViewRoot, entry: &ViewEntry, id: &PropertyId) -> bool {
    let (layout, rel) = (root.layout(), root.relative(&entry.path));
    let item = match entry.node {
        ViewNode::Dir => layout.item_of_dir(rel),
        ViewNode::File(_) => layout.item_of(rel),
    };
    item.is_none_or(|item| item == *id)
}

/// The mount paths of the documents of a view whose content depends on every item: with
/// dimension names, each array's `.zattrs` or `zarr.json`, as the names of our own avoid every
/// axis, scalar and matrix name ([`dimensions`]). Empty for a view without names.
pub fn named_documents(dataset: &Dataset, root: &ViewRoot) -> Vec<String> {
    if !root.dimension_names {
        return Vec::new();
    }
    let documents = [".zattrs", "zarr.json"];
    view_entries(dataset, root)
        .into_iter()
        .filter(|e| matches!(e.node, ViewNode::File(_)))
        .filter(|e| documents.contains(&e.path.rsplit('/').next().unwrap_or("")))
        .map(|e| e.path)
        .collect()
}

/// The longest file name the kernel accepts, in bytes.
const NAME_MAX: usize = 255;

/// The time synthesised whole-data-set files and directories show.
pub(crate) fn dataset_mtime(dataset: &Dataset) -> SystemTime {
    dataset.latest_mtime()
}
