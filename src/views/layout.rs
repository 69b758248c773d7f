//! The one trait every on-disk layout implements (FilesDaf 1.0 and 1.1, Zarr v2, Zarr v3), and
//! the registry from a [`Format`] to its implementation.
//!
//! A layout knows everything about its own paths and documents: how to read an item from a store
//! (a source's, or staged files'), how to render a view of a data set and the files of one item
//! (which is also what a commit writes), which item a path of its view belongs to and where a
//! writer may create files, when a staged item is complete, and which index documents a
//! directory source keeps in step after a write. The core and the staging area call these
//! methods and know no format.

use crate::formats::json::FilesVersion;
use crate::formats::model::{Dataset, Item, PropertyId};
use crate::formats::source::Format;
use crate::formats::FormatError;
use crate::stores::{Bytes, StoreError, StoreIndex};

use super::files::layout as files_layout;
use super::zarr_v2::layout as zarr_v2_layout;
use super::zarr_v3::layout as zarr_v3_layout;
use super::{EntrySink, Shown, ViewEntry, ViewKind};

/// Whether the staged files of an item can be committed.
#[derive(Debug, PartialEq, Eq)]
pub enum Staged {
    /// Every file is there.
    Complete,
    /// Some file (a chunk, a component) is still missing.
    Incomplete,
    /// They can never be committed as they are: why.
    Refused(String),
}

/// How a view removes a committed item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Removal {
    /// When the last of its files is removed (FilesDaf: `rm` of each file).
    LastFile,
    /// When its node directory is removed (Zarr: `rm -r`, zarr's `del`).
    NodeDirectory,
}

/// One on-disk layout of a Daf data set.
pub trait Layout: Sync + Send {
    /// The format this layout writes.
    fn format(&self) -> Format;

    /// FilesDaf or Zarr (the view's directory name suffix).
    fn family(&self) -> ViewKind {
        self.format().family().into()
    }

    /// Reads item `id` from `index` (keys relative to the data set root); `dataset` gives the
    /// axes. A missing file is `FormatError::MissingFile`.
    fn read_item(
        &self,
        dataset: &Dataset,
        id: &PropertyId,
        index: &StoreIndex,
    ) -> Result<Item, FormatError>;

    /// Every file and directory of the view of `dataset`, under `prefix`, with xarray's
    /// dimension names on every array if `dimensions` (`--dimension-names`,
    /// [`super::dimensions`]; a layout without named arrays shows its plain view); its entries
    /// handed to `sink` in batches as they are made if given: returns the ones not handed on.
    fn view_into(
        &self,
        dataset: &Dataset,
        prefix: &str,
        dimensions: bool,
        sink: Option<&EntrySink>,
    ) -> Vec<ViewEntry>;

    /// The files and directories of item `id`, relative to the data set root: what the view
    /// shows of it, and what a commit writes into a source of this layout.
    fn item_entries(&self, dataset: &Dataset, id: &PropertyId) -> Vec<ViewEntry>;

    /// The entries of the view (rooted at `prefix`, without dimension names) that a change of
    /// item `id` alone changes, in the view's order: the item's and those of no item (see
    /// [`super::local_entries`]), its document made of every item made from the one the tree
    /// has (`shown`); `None` if it cannot be (the tree shows no such document there).
    fn local_view(
        &self,
        dataset: &Dataset,
        prefix: &str,
        id: &PropertyId,
        shown: Shown<'_>,
    ) -> Option<Vec<ViewEntry>>;

    /// Whether a change of one item changes only its own entries and those of no item (else a
    /// commit renders the whole view anew: the AnnData view, whose dataframes list their
    /// columns).
    fn item_local(&self) -> bool {
        true
    }

    /// The item a path of the view belongs to (`None` for other names, such as temporaries).
    fn item_of(&self, rel: &str) -> Option<PropertyId>;

    /// The item a directory of the view belongs to (an array's, a sparse component's or a chunk
    /// directory); `None` for a group. A layout whose items have no directories has none.
    fn item_of_dir(&self, _rel: &str) -> Option<PropertyId> {
        None
    }

    /// Whether nothing may change in the view: every change inside it is refused as on a
    /// read-only file system (the AnnData view).
    fn read_only(&self) -> bool {
        false
    }

    /// Whether a new file (or directory) may be created at `rel`: where an item can live, plus
    /// hidden names (temporaries, group documents).
    fn writable_place(&self, rel: &str, is_dir: bool) -> bool;

    /// Whether `rel` is a writer's temporary file (renamed into place later).
    fn is_temporary(&self, rel: &str) -> bool;

    /// Why a property could not be named as `rel` names it (`.`, `..`), if so.
    fn bad_property_name(&self, _rel: &str) -> Option<String> {
        None
    }

    /// Whether `rel` is a group document outside any item (a writer rewrites them): judged by
    /// its content with [`Layout::group_document_noop`], then dropped or refused, never kept.
    fn is_group_document(&self, _rel: &str) -> bool {
        false
    }

    /// Whether `rel` is a document whose content is judged when it is closed or renamed (a
    /// group document, or attributes of an item), rather than kept as a file.
    fn is_document(&self, _rel: &str) -> bool {
        false
    }

    /// Whether group document `rel` with content `new` changes nothing, given the committed
    /// document `old` there; `Err` says why it is refused.
    fn group_document_noop(
        &self,
        rel: &str,
        _new: &[u8],
        _old: Option<&[u8]>,
    ) -> Result<(), String> {
        Err(format!("{rel}: not a document of a Daf data set"))
    }

    /// Whether the staged files `index` of item `id` can be committed now (`finalize`: the
    /// writer is done; files a writer leaves out on purpose, such as fill-value chunks, are
    /// then not waited for).
    fn staged(
        &self,
        index: &StoreIndex,
        id: &PropertyId,
        finalize: bool,
    ) -> Result<Staged, FormatError>;

    /// Where a written file goes in the order of a commit: payloads first, then what makes
    /// readers see them (descriptors, array documents), group documents last.
    fn write_rank(&self, path: &str) -> u8;

    /// Whether a file of an item with content `bytes` is left out when the item is written
    /// (Zarr v3: a chunk holding only the fill value, which readers make themselves).
    fn elides(&self, _path: &str, _bytes: &[u8]) -> bool {
        false
    }

    /// Documents a directory source of this layout must have for item `id` besides its own
    /// files (the groups it lives in), written only where missing; and directories to create.
    fn implied(&self, dataset: &Dataset, id: &PropertyId) -> (Vec<(String, Vec<u8>)>, Vec<String>);

    /// Whether a directory source of this layout has index documents (else
    /// [`Layout::index_documents`] is not asked, and the directory not listed for it).
    fn has_index_documents(&self) -> bool {
        true
    }

    /// The index documents a directory source keeps in step with its content (`.zmetadata`, the
    /// root `zarr.json`, `metadata.json`), rebuilt from the directory `index` after a write.
    fn index_documents(
        &self,
        dataset: &Dataset,
        index: &StoreIndex,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError>;

    /// The files at the root of the view whose content is derived from every item (an index:
    /// `metadata.json`, `.zmetadata`, the root `zarr.json`). When an item changes they change
    /// too, possibly keeping their size, so the kernel must drop what it cached of them.
    fn derived_files(&self) -> &'static [&'static str] {
        &[]
    }

    /// Documents a ZIP archive of this layout holds in place of its derived files (which only a
    /// directory source keeps), first in the archive, as `(path, content)`: Zarr v3's root
    /// `zarr.json` without consolidated metadata (`daf-formats.md` §5.5).
    fn archive_documents(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// How a committed item is removed through the view.
    fn removal(&self) -> Removal;

    /// The item whose node directory is `rel` or holds it (views that remove by node directory).
    fn node_item(&self, _rel: &str) -> Option<PropertyId> {
        None
    }

    /// For a committed chunk `rel` that a writer unlinks (a Zarr writer storing fill values),
    /// the bytes the chunk now holds; `read` gives a view file's bytes, `None` if it is gone.
    fn fill_for_removed_chunk(
        &self,
        _rel: &str,
        _read: &dyn Fn(&str) -> Option<Bytes>,
    ) -> Option<Bytes> {
        None
    }
}

/// The layout of `format`.
pub fn layout(format: Format) -> &'static dyn Layout {
    match format {
        // An H5df source is read-only (nothing is written in its format); its encoding is
        // FilesDaf 1.0's.
        Format::Files(FilesVersion::V1_0) | Format::H5df { .. } => &files_layout::FILES_1_0,
        Format::Files(FilesVersion::V1_1) => &files_layout::FILES_1_1,
        Format::ZarrV2 => &zarr_v2_layout::ZarrV2,
        Format::ZarrV3 => &zarr_v3_layout::ZarrV3,
    }
}

/// Why a file of a view cannot be written at `rel` (`None`: it may be). A file may sit only
/// where it can become part of an item (or be a writer's temporary, or a group document that
/// is dropped when it carries nothing): anything else could never be committed, so it is
/// refused when it is created, renamed or linked there, instead of staying staged forever.
pub fn refusal(layout: &dyn Layout, rel: &str) -> Option<String> {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    if name == "."
        || name == ".."
        || rel
            .split('/')
            .any(|c| c == "." || c == ".." || c.is_empty())
    {
        return Some(format!("{rel}: not a valid file name"));
    }
    if let Some(why) = layout.bad_property_name(rel) {
        return Some(why);
    }
    if layout.item_of(rel).is_some() || layout.is_temporary(rel) || layout.is_group_document(rel) {
        return None;
    }
    Some(format!(
        "{rel}: not a file of a Daf item (a scalar, axis, vector or matrix); it could never be committed"
    ))
}
