//! Committing: staged files that form a complete, consistent item become part of the source.
//!
//! 1. The item a staged path belongs to is found from its place in a view ([`item_of`]).
//! 2. Its staged files are read with the same reader that reads sources of that layout, so a
//!    commit accepts exactly what a mount would show; a missing file means "not yet"
//!    ([`Outcome::Incomplete`]); anything inconsistent is [`CommitError::Invalid`].
//! 3. The item is written into the source in the source's own layout (the views' per-item
//!    entries are the serialiser), then read back from there, so the views show the source's
//!    bytes and the staged files can go. For directory sources the copy (or the `fsync` of a
//!    staged file that is renamed into place) runs after `commit` returns, without the state
//!    lock, and only the swap holds it ([`super::dir_commit`]). For
//!    ZIP sources the write is a copy of every payload
//!    into the archive: it happens after the commit returns ([`super::zip_commit`]), and the
//!    item is served from its staged files until then.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use crate::formats::files;
use crate::formats::model::{Axis, Dataset, Item, Payload, PropertyId};
use crate::formats::source::{Format, NamedDataset};
use crate::formats::validate::{check_axis, check_payload};
use crate::formats::FormatError;
use crate::stores::dir::{file_blob, open_directory, write_atomic};
use crate::stores::{Entry, StoreError, StoreIndex};
use crate::views::files::layout::FILES_1_0;
use crate::views::layout::{layout, Layout, Removal, Staged};
use crate::views::ViewNode;

pub use super::dir_commit::{Finish, PendingWrite, Written};
pub use super::zip_commit::PendingAppend;

/// What a commit attempt did.
#[derive(Debug)]
pub enum Outcome {
    /// Some file is still missing: nothing was done.
    Incomplete,
    /// The item of a directory source is valid; its files are still to be written (a copy:
    /// done without the state lock) and swapped in ([`super::dir_commit`]).
    Writing(PendingWrite),
    /// The staged files hold what the source already has for the item (a ZIP source whose
    /// append finished just before a daemon was killed): nothing to do, they can go.
    Unchanged,
    /// The item is part of the data set, served from its staged files, until the entries
    /// appended to the ZIP source (a slow copy, done after the commit returns) replace them.
    Appending(PendingAppend),
}

/// Why a commit attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The staged files are complete but inconsistent.
    #[error("{0}")]
    Invalid(String),
    /// The source does not accept this change.
    #[error("{0}")]
    Refused(String),
    /// Writing into the source failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A staged file of an item.
#[derive(Clone, Debug)]
pub struct StagedFile {
    /// Path relative to its view's root.
    pub rel: String,
    /// Where it is on disk.
    pub disk: PathBuf,
    /// Its modification time.
    pub mtime: SystemTime,
}

/// A `.data` written through the FilesDaf view must have exactly the size the axes and the type
/// give. (Sources may have longer ones, shown at their logical size; a write that does is a
/// writer's mistake, or was written against an axis of another length.)
fn written_data_fits(item: &Item, staged: &[StagedFile]) -> Result<(), CommitError> {
    let Item::Property(property) = item else {
        return Ok(());
    };
    let Payload::Dense { data, .. } = &property.payload else {
        return Ok(());
    };
    let Some(file) = staged.iter().find(|f| f.rel.ends_with(".data")) else {
        return Ok(());
    };
    let written = std::fs::metadata(&file.disk)
        .map_err(|e| StoreError::io(&file.disk, e))?
        .len();
    let needed = data.len()?;
    if written != needed {
        return Err(CommitError::Invalid(format!(
            "{}: {written} bytes where the axes and the element type need {needed}",
            file.rel
        )));
    }
    Ok(())
}

/// What the staged files of an item amount to, as a commit would judge them.
#[derive(Debug)]
pub enum Validated {
    /// Some file is still missing: the one a reader looked for first, when known.
    Incomplete(Option<String>),
    /// The item is complete and consistent: what a commit would write.
    Item(Item),
    /// The staged files hold what the ZIP source already has for the item.
    Unchanged,
}

/// Tries to commit item `id` of data set `ds` from its staged files in a view in `view`.
/// `finalize` commits a Zarr item even if chunks (fill value) or `nzval` (all true) are missing.
pub fn commit(
    ds: &mut NamedDataset,
    view: &dyn Layout,
    id: &PropertyId,
    staged: &[StagedFile],
    finalize: bool,
) -> Result<Outcome, CommitError> {
    let item = match validate(ds, view, id, staged, finalize)? {
        Validated::Incomplete(_) => return Ok(Outcome::Incomplete),
        Validated::Unchanged => return Ok(Outcome::Unchanged),
        Validated::Item(item) => item,
    };
    if ds.target.is_zip() {
        // A ZIP source gets the item's entries after the commit returns (see `zip_commit`).
        let previous = ds.dataset.take(id);
        let inserted = ds.dataset.insert(id, item).map_err(CommitError::Invalid);
        let pending = inserted.and_then(|()| PendingAppend::new(ds, id));
        return match pending {
            Ok(pending) => Ok(Outcome::Appending(pending)),
            Err(e) => {
                ds.dataset.restore(id, previous);
                Err(e)
            }
        };
    }
    let root = directory_root(ds, id)?;
    let stale = if ds.dataset.contains(id) {
        source_files(ds, id)?
    } else {
        Vec::new()
    };
    let staged = staged.iter().map(|f| f.disk.clone()).collect();
    PendingWrite::new(ds, root, id, item, stale, staged).map(Outcome::Writing)
}

/// Judges the staged files of item `id` as [`commit`] does, writing nothing: the same reader,
/// completeness rule and checks. (`ds` is changed only for the time of a comparison.)
pub fn validate(
    ds: &mut NamedDataset,
    view: &dyn Layout,
    id: &PropertyId,
    staged: &[StagedFile],
    finalize: bool,
) -> Result<Validated, CommitError> {
    let entries = staged.iter().map(|f| {
        let len = std::fs::metadata(&f.disk)
            .map_err(|e| StoreError::io(&f.disk, e))?
            .len();
        Ok((
            f.rel.clone(),
            Entry {
                blob: file_blob(f.disk.clone(), len),
                mtime: f.mtime,
            },
        ))
    });
    let mut files: BTreeMap<String, Entry> = entries.collect::<Result<_, StoreError>>()?;
    if ds.dataset.contains(id) {
        // Replacing: the staged files go over the item's committed files (in the view's layout).
        // (ZIP sources only accept staged files equal to what they have: see below.)
        for entry in view.item_entries(&ds.dataset, id) {
            if let (ViewNode::File(blob), false) = (entry.node, files.contains_key(&entry.path)) {
                files.insert(
                    entry.path,
                    Entry {
                        blob,
                        mtime: entry.mtime,
                    },
                );
            }
        }
    }
    let index = StoreIndex::new(files, None);
    match view.staged(&index, id, finalize) {
        Ok(Staged::Complete) => {}
        Ok(Staged::Incomplete) => return Ok(Validated::Incomplete(None)),
        Ok(Staged::Refused(why)) => return Err(CommitError::Refused(why)),
        Err(FormatError::Store(e)) => return Err(e.into()),
        Err(e) => return Err(CommitError::Invalid(e.to_string())),
    }
    let item = match view.read_item(&ds.dataset, id, &index) {
        Ok(item) => item,
        Err(FormatError::MissingFile(file)) => return Ok(Validated::Incomplete(Some(file))),
        Err(FormatError::Store(e)) => return Err(e.into()),
        Err(e) => return Err(CommitError::Invalid(e.to_string())),
    };
    if matches!(view.format(), Format::Files(_)) {
        written_data_fits(&item, staged)?;
    }
    let checked = match (&item, ds.dataset.shape(id)) {
        (Item::Axis(axis), _) => check_axis(axis),
        (Item::Property(p), Some(shape)) => check_payload(&p.payload, shape),
        _ => Ok(()),
    };
    checked.map_err(|e| match e {
        FormatError::Store(e) => CommitError::Store(e),
        e => CommitError::Invalid(e.to_string()),
    })?;
    let item = match (ds.target.is_zip(), ds.dataset.contains(id)) {
        (true, true) => {
            return if same_item(&mut ds.dataset, id, item) {
                Ok(Validated::Unchanged)
            } else {
                Err(CommitError::Refused(format!(
                    "{}: ZIP sources are append-only; it cannot be replaced",
                    id.path()
                )))
            }
        }
        _ => item,
    };
    if let (PropertyId::Axis(name), Item::Axis(axis)) = (id, &item) {
        let current = ds.dataset.axes.get(name).map(Axis::len);
        if current.is_some_and(|n| n != axis.len()) && ds.dataset.axis_in_use(name) {
            return Err(CommitError::Invalid(format!(
                "axis {name} is used by properties: it can only be replaced by as many entries"
            )));
        }
    }
    Ok(Validated::Item(item))
}

/// An error reading back what a commit wrote: an I/O error stays one (its errno reaches the
/// caller: `ENOSPC`, `EIO`), anything else means the written item is not what was validated.
pub(super) fn read_back_error(id: &PropertyId, e: FormatError) -> CommitError {
    match e {
        FormatError::Store(e) => CommitError::Store(e),
        e => CommitError::Invalid(format!("reading back {}: {e}", id.path())),
    }
}

/// Whether `item` has the same content as the data set's item `id`: every FilesDaf file of
/// both is equal (which covers descriptors, payloads and text). The data set is left as it was.
fn same_item(dataset: &mut Dataset, id: &PropertyId, item: Item) -> bool {
    let files = |dataset: &Dataset| -> Option<Vec<(String, Vec<u8>)>> {
        FILES_1_0
            .item_entries(dataset, id)
            .into_iter()
            .filter_map(|e| match e.node {
                ViewNode::File(blob) => Some((e.path, blob)),
                ViewNode::Dir => None,
            })
            .map(|(path, blob)| Some((path, blob.bytes().ok()?.as_slice().to_vec())))
            .collect()
    };
    let before = files(dataset);
    let Some(previous) = dataset.take(id) else {
        return false;
    };
    let after = dataset.insert(id, item).ok().and_then(|()| files(dataset));
    dataset.take(id);
    let restored = dataset.insert(id, previous);
    restored.is_ok() && before.is_some() && before == after
}

/// The files of item `id` in a directory source (relative to its root), as they are on disk.
fn source_files(ds: &NamedDataset, id: &PropertyId) -> Result<Vec<String>, CommitError> {
    let Some(root) = ds.target.dir() else {
        return Ok(Vec::new());
    };
    let source = layout(ds.target.format);
    Ok(match source.removal() {
        Removal::LastFile => source
            .item_entries(&ds.dataset, id)
            .into_iter()
            .filter(|e| matches!(e.node, ViewNode::File(_)))
            .map(|e| e.path)
            .chain(files::packed_payloads(id))
            .filter(|rel| root.join(rel).is_file())
            .collect(),
        Removal::NodeDirectory => {
            let node = root.join(id.path());
            if node.is_dir() {
                open_directory(&node)?
                    .keys()
                    .map(|k| format!("{}/{k}", id.path()))
                    .collect()
            } else {
                Vec::new()
            }
        }
    })
}

/// The root of a directory source; ZIP sources are append-only, so changing `id` is refused.
fn directory_root(ds: &NamedDataset, id: &PropertyId) -> Result<std::path::PathBuf, CommitError> {
    ds.target
        .dir()
        .map(std::path::Path::to_path_buf)
        .ok_or_else(|| CommitError::Refused(format!("{}: ZIP sources are append-only", id.path())))
}

/// Deletes item `id` from a directory source and from the model: descriptors first (readers stop
/// seeing it), then payloads; an axis also loses its (empty) vector and matrix directories.
pub fn delete_item(ds: &mut NamedDataset, id: &PropertyId) -> Result<(), CommitError> {
    let root = directory_root(ds, id)?;
    if let PropertyId::Axis(name) = id {
        if ds.dataset.axis_in_use(name) {
            return Err(CommitError::Refused(format!(
                "axis {name} is used by properties"
            )));
        }
    }
    let mut files = source_files(ds, id)?;
    // Metadata first (readers stop seeing the item), then payloads.
    let source = layout(ds.target.format);
    files.sort_by_key(|p| std::cmp::Reverse(source.write_rank(p)));
    for rel in &files {
        let path = root.join(rel);
        std::fs::remove_file(&path).map_err(|e| StoreError::io(&path, e))?;
    }
    let mut dirs = Vec::new();
    if source.removal() == Removal::NodeDirectory {
        dirs.push(id.path());
    }
    if let PropertyId::Axis(name) = id {
        dirs.extend([format!("vectors/{name}"), format!("matrices/{name}")]);
        dirs.extend(
            ds.dataset
                .axes
                .keys()
                .map(|other| format!("matrices/{other}/{name}")),
        );
    }
    for dir in dirs {
        let path = root.join(&dir);
        if path.is_dir() {
            std::fs::remove_dir_all(&path).map_err(|e| StoreError::io(&path, e))?;
        }
    }
    ds.dataset.remove(id);
    refresh_index_documents(ds)?;
    Ok(())
}

/// Sets the modification time of item `id` and of its files in a directory source (`touch`).
pub fn touch_item(
    ds: &mut NamedDataset,
    id: &PropertyId,
    mtime: SystemTime,
) -> Result<(), CommitError> {
    let root = directory_root(ds, id)?;
    for rel in source_files(ds, id)? {
        let path = root.join(&rel);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        file.set_modified(mtime)
            .map_err(|e| StoreError::io(&path, e))?;
    }
    ds.dataset.set_mtime(id, mtime);
    Ok(())
}

/// Rewrites the index documents a directory source keeps in step with its content
/// (`.zmetadata`, the root `zarr.json`, `metadata.json`: see [`Layout::index_documents`]).
pub fn refresh_index_documents(ds: &NamedDataset) -> Result<(), CommitError> {
    let Some(root) = ds.target.dir() else {
        return Ok(());
    };
    let source = layout(ds.target.format);
    let mut documents = Vec::new();
    if source.has_index_documents() {
        documents = source.index_documents(&ds.dataset, &open_directory(root)?)?;
    }
    for (key, bytes) in documents {
        write_atomic(root, &key, &bytes)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_reading_back_stay_io_errors() {
        let id = PropertyId::Scalar("n".into());
        let full = StoreError::io("/x", std::io::Error::from_raw_os_error(libc::ENOSPC));
        match read_back_error(&id, FormatError::Store(full)) {
            CommitError::Store(StoreError::Io { source, .. }) => {
                assert_eq!(source.raw_os_error(), Some(libc::ENOSPC))
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            read_back_error(&id, FormatError::Bad("x".into())),
            CommitError::Invalid(_)
        ));
    }
}
