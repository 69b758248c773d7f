//! The second half of a commit into a directory source: writing the item's files, in two steps
//! so that the slow one runs while readers go on, and nothing slow runs under the state lock.
//!
//! [`super::commit::commit`] validates the item under the filesystem's state lock and returns a
//! [`PendingWrite`] (the item and its files in the source's layout; the data set is left as it
//! was). [`PendingWrite::write`] then, **without** the lock, makes the groups the item lives in
//! (harmless without it), makes each file's bytes and either `fsync`s the staged file that is that
//! whole file (on the source's file system: it is renamed into place at the swap, not copied) or
//! copies the bytes into a temporary file beside its final place and `fsync`s it (a copy, never a
//! hard link of the staged file, which a crash could leave behind as a second name of the source
//! file; a rename moves it), and last records, durably, every step the swap will take
//! ([`super::moves`]: a killed daemon's swap is finished by the next mount if it began, dropped if
//! not). Nothing a reader can see changes (the model still serves the old item, the staged files
//! stay where they are, the temporary names are not part of it). Under the lock again,
//! [`PendingWrite::swap`] only renames the files into place (payloads first) and puts the item,
//! read back from them, into the data set (a ZarrDaf directory also gets its index documents
//! rewritten there). The directories' `fsync`s, the removal of the replaced item's files and of
//! the record are [`Finish::complete`]'s, after the lock is released and before the writer's
//! `close` is answered. The caller checks before the swap that the staged files are still the
//! ones validated (nothing rewrote, removed or committed them meanwhile); if not, it drops the
//! [`Written`] files, which deletes the copies and the record.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::formats::model::{Axis, Item, PropertyId, Shape};
use crate::formats::source::{Format, NamedDataset};
use crate::stores::dir::{ensure_dir, file_blob, write_atomic};
use crate::stores::{Blob, Entry, StoreError, StoreIndex};
use crate::views::layout::layout;
use crate::views::{ViewEntry, ViewNode};

use super::commit::{read_back_error, refresh_index_documents, CommitError};
use super::moves::{inode, remove_recorded, Move, MovesRecord, Step};
use super::StagingArea;

/// A validated item of a directory source whose files are still to be written.
#[derive(Debug)]
pub struct PendingWrite {
    /// The item.
    pub id: PropertyId,
    root: PathBuf,
    format: Format,
    item: Item,
    /// The shape the item was validated against (a property's axes' lengths then).
    shape: Option<Shape>,
    /// Files of the item as it is in the source now (relative to the root).
    stale: Vec<String>,
    /// The item's directories (`None`) and files, in write order (payloads first); their bytes
    /// are made (a multi-chunk array assembled, say) by [`PendingWrite::write`], without the lock.
    files: Vec<(String, Option<Arc<Blob>>)>,
    /// The item's staged files: one that is, whole, a file of the item in the source, on the
    /// source's file system, is renamed into place at the swap instead of copied.
    staged: Vec<PathBuf>,
    /// The documents and directories of the groups the item lives in.
    implied: (Vec<(String, Vec<u8>)>, Vec<String>),
}

/// What [`PendingWrite::write`] made ready, in write order: for each file, where it is now
/// (`rel`, path, whether it is the staged file itself, to be moved, rather than a copy under a
/// temporary name). Copies are deleted when dropped unless [`PendingWrite::swap`] renamed them
/// into place; staged files stay staged.
#[derive(Debug)]
pub struct Written {
    temps: Vec<(String, PathBuf, bool)>,
    /// The record of the swap's steps, removed (durably) if the swap is not made.
    record: Option<MovesRecord>,
    /// Files of the replaced item that the new one does not have (a sparse property made dense),
    /// with their inodes: removed after the swap, out of the lock.
    removed: Vec<(PathBuf, u64)>,
    /// The item's other staged files (not moved), with their inodes.
    leftovers: Vec<(PathBuf, u64)>,
}

impl Drop for Written {
    fn drop(&mut self) {
        // The record first: one left behind names copies that are gone, which is harmless
        // (the swap had not begun), but no copy may go while a record could finish it.
        if let Some(record) = self.record.take() {
            if let Err(e) = record.clear() {
                log::warn!("removing the record of a commit's moves: {e}");
            }
        }
        for (_, temp, moved) in &self.temps {
            if !moved {
                let _ = fs::remove_file(temp);
            }
        }
    }
}

/// What is left of a swap once the lock is released, to be done before the commit is answered:
/// its renames made durable (`fsync` of their directories), the replaced item's files removed,
/// the record removed.
#[derive(Debug)]
#[must_use]
pub struct Finish {
    dirs: Vec<PathBuf>,
    removed: Vec<(PathBuf, u64)>,
    record: Option<MovesRecord>,
}

impl Finish {
    /// Makes the swap durable. On error the record stays: the next mount finishes the swap.
    pub fn complete(self) -> Result<(), CommitError> {
        let sync = |dir: &Path| {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| StoreError::io(dir, e))
        };
        for dir in &self.dirs {
            sync(dir)?;
        }
        // After the renames are durable: a crash never finds the old files gone and the new
        // ones not in place.
        let mut dirs: Vec<&Path> = Vec::new();
        for (path, ino) in &self.removed {
            remove_recorded(path, Some(*ino)).map_err(|e| StoreError::io(path, e))?;
            if let Some(parent) = path.parent().filter(|p| !dirs.contains(p)) {
                dirs.push(parent);
            }
        }
        for dir in dirs {
            sync(dir)?;
        }
        if let Some(record) = self.record {
            let at = record.path().to_path_buf();
            record.clear().map_err(|e| StoreError::io(&at, e))?;
        }
        Ok(())
    }
}

impl PendingWrite {
    /// The files item `item` (validated, not in `ds`'s model) would have in its directory source
    /// `root`, with the files the item has there now. `ds` is left as it was.
    pub(super) fn new(
        ds: &mut NamedDataset,
        root: PathBuf,
        id: &PropertyId,
        item: Item,
        stale: Vec<String>,
        staged: Vec<PathBuf>,
    ) -> Result<PendingWrite, CommitError> {
        let source = layout(ds.target.format);
        let previous = ds.dataset.take(id);
        if let Err(why) = ds.dataset.insert(id, item) {
            ds.dataset.restore(id, previous);
            return Err(CommitError::Invalid(why));
        }
        let implied = source.implied(&ds.dataset, id);
        let mut entries = source.item_entries(&ds.dataset, id);
        // Payloads first, then the metadata that makes readers see them.
        entries.sort_by_key(|e: &ViewEntry| source.write_rank(&e.path));
        let files = entries
            .into_iter()
            .map(|entry| match entry.node {
                ViewNode::Dir => (entry.path, None),
                ViewNode::File(blob) => (entry.path, Some(blob)),
            })
            .collect();
        let item = ds.dataset.take(id);
        ds.dataset.restore(id, previous);
        let item = item.ok_or_else(|| CommitError::Invalid(format!("{}: lost", id.path())))?;
        Ok(PendingWrite {
            shape: ds.dataset.shape(id),
            id: id.clone(),
            root,
            format: ds.target.format,
            item,
            stale,
            files,
            staged,
            implied,
        })
    }

    /// Makes the item's files durable (`fsync`) without the state lock, the slow part of a
    /// commit: a staged file that is a whole file of the item, on the source's file system, stays
    /// where it is (it is renamed into place at the swap); any other is copied beside its place
    /// under a temporary name. Then records the swap's steps (`staging`), durably.
    pub fn write(&self, staging: &StagingArea) -> Result<Written, CommitError> {
        let mut written = Written {
            temps: Vec::new(),
            record: None,
            removed: Vec::new(),
            leftovers: Vec::new(),
        };
        let (documents, dirs) = &self.implied;
        for dir in dirs {
            ensure_dir(&self.root, dir)?;
        }
        for (key, bytes) in documents {
            if !self.root.join(key).exists() {
                write_atomic(&self.root, key, bytes)?;
            }
        }
        let source = layout(self.format);
        for (rel, blob) in &self.files {
            let Some(blob) = blob else {
                ensure_dir(&self.root, rel)?;
                continue;
            };
            let bytes = blob.bytes()?;
            if source.elides(rel, bytes.as_slice()) {
                continue;
            }
            let path = self.root.join(rel);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(|e| StoreError::io(parent, e))?;
            }
            if let Some(staged) = self.movable(blob, bytes.len(), &path) {
                let synced = File::open(staged).and_then(|f| f.sync_all());
                synced.map_err(|e| StoreError::io(staged, e))?;
                written
                    .temps
                    .push((rel.clone(), staged.to_path_buf(), true));
                continue;
            }
            let temp = temp_beside(&self.root, &path);
            // A copy, never a hard link: that would leave the staged file, after a crash between
            // the swap and its removal, as a second name of the source file.
            let copied = (|| {
                let mut file = File::create(&temp)?;
                written.temps.push((rel.clone(), temp.clone(), false));
                std::io::Write::write_all(&mut file, bytes.as_slice())?;
                file.sync_all()
            })();
            copied.map_err(|e| StoreError::io(&path, e))?;
        }
        let with_inode = |paths: Vec<PathBuf>| -> Vec<(PathBuf, u64)> {
            paths
                .into_iter()
                .filter_map(|p| Some((inode(&p)?, p)))
                .map(|(ino, p)| (p, ino))
                .collect()
        };
        written.removed = with_inode(
            self.stale
                .iter()
                .filter(|rel| !written.temps.iter().any(|(w, _, _)| w == *rel))
                .map(|rel| self.root.join(rel))
                .collect(),
        );
        written.leftovers = with_inode(
            self.staged
                .iter()
                .filter(|s| !written.temps.iter().any(|(_, from, _)| from == *s))
                .cloned()
                .collect(),
        );
        if written.temps.is_empty() {
            return Ok(written);
        }
        let mut steps: Vec<Step> = Vec::new();
        for (rel, from, _) in &written.temps {
            let ino = inode(from).ok_or_else(|| StoreError::io(from, not_found()))?;
            let to = self.root.join(rel);
            let step = Move::Rename {
                from: from.clone(),
                to,
            };
            steps.push((step, Some(ino)));
        }
        let removals = written.removed.iter().chain(&written.leftovers);
        steps.extend(removals.map(|(p, ino)| (Move::Remove(p.clone()), Some(*ino))));
        let at = staging.root().to_path_buf();
        let record = staging
            .prepare_moves(&steps)
            .map_err(|e| StoreError::io(&at, e))?;
        written.record = Some(record);
        Ok(written)
    }

    /// The staged file that is, whole, the file of `len` bytes made from `blob` (the same
    /// layout in view and source), if it is on the file system of `path` and has no other name
    /// (a `link` made in the view would stay staged as a second name of the source file): it can
    /// be renamed there.
    fn movable(&self, blob: &Blob, len: u64, path: &Path) -> Option<&Path> {
        use std::os::unix::fs::MetadataExt;
        let backing = blob.backing_file()?;
        let staged = self.staged.iter().find(|s| s.as_path() == backing)?;
        let meta = fs::metadata(staged).ok()?;
        let dir = path.ancestors().find_map(|p| fs::metadata(p).ok())?;
        let alone = meta.nlink() == 1;
        (alone && meta.len() == len && meta.dev() == dir.dev()).then_some(staged.as_path())
    }

    /// Puts the written files in place and the item, read back from them, into `ds`: the swap,
    /// to run under the state lock, renames only (the record of its steps is on disk already).
    /// The data set gets its old item back if this fails. What is left to do once the lock is
    /// released is the returned [`Finish`]'s.
    pub fn swap(self, ds: &mut NamedDataset, mut written: Written) -> Result<Finish, CommitError> {
        let id = &self.id;
        // Other items committed while this one was written must not have made it inconsistent:
        // an axis of the property replaced by one of another length, or this axis, now used by
        // properties, by one of another length.
        if ds.dataset.shape(id) != self.shape {
            return Err(CommitError::Invalid(format!(
                "{}: an axis it uses changed length while it was committed",
                id.path()
            )));
        }
        if let (PropertyId::Axis(name), Item::Axis(axis)) = (id, &self.item) {
            let current = ds.dataset.axes.get(name).map(Axis::len);
            if current.is_some_and(|n| n != axis.len()) && ds.dataset.axis_in_use(name) {
                return Err(CommitError::Invalid(format!(
                    "axis {name} is used by properties: it can only be replaced by as many entries"
                )));
            }
        }
        let previous = ds.dataset.take(id);
        if let Err(why) = ds.dataset.insert(id, self.item) {
            ds.dataset.restore(id, previous);
            return Err(CommitError::Invalid(why));
        }
        let (index, dirs) = match place(&self.root, &mut written) {
            Ok(placed) => placed,
            Err(e) => {
                ds.dataset.restore(id, previous);
                return Err(e);
            }
        };
        // The item's other staged files go (the record names them too: a mount that finishes
        // the swap removes them).
        for (path, _) in &written.leftovers {
            let _ = fs::remove_file(path);
        }
        let finish = Finish {
            dirs,
            removed: std::mem::take(&mut written.removed),
            record: written.record.take(),
        };
        let refreshed = refresh_index_documents(ds).and_then(|()| {
            // Serve the source's bytes from now on, not the staged files'.
            layout(self.format)
                .read_item(&ds.dataset, id, &index)
                .map_err(|e| read_back_error(id, e))
        });
        let stored = match refreshed {
            Ok(stored) => stored,
            Err(e) => {
                // The files are in place: make that durable all the same.
                if let Err(e) = finish.complete() {
                    log::warn!("{}: {e}", id.path());
                }
                ds.dataset.restore(id, previous);
                return Err(e);
            }
        };
        ds.dataset
            .insert(id, stored)
            .map_err(CommitError::Invalid)?;
        Ok(finish)
    }
}

/// Renames the written files into place, in order, nothing made durable (the record of the
/// swap's steps is: [`Finish::complete`] `fsync`s the directories returned); returns what is in
/// place, keyed relative to `root`. If one fails, the staged files already moved go back to the
/// staging area and the copies are deleted.
fn place(root: &Path, written: &mut Written) -> Result<(StoreIndex, Vec<PathBuf>), CommitError> {
    let mut index = BTreeMap::new();
    let steps = std::mem::take(&mut written.temps);
    let mut dirs: Vec<PathBuf> = Vec::new();
    let mut done = 0;
    let mut failed = None;
    for (rel, temp, _) in &steps {
        let path = root.join(rel);
        let parent = path.parent().unwrap_or(root).to_path_buf();
        if let Err(e) = fs::rename(temp, &path) {
            failed = Some(StoreError::io(&path, e));
            break;
        }
        done += 1;
        if !dirs.contains(&parent) {
            dirs.push(parent);
        }
    }
    if let Some(e) = failed {
        for (rel, from, moved) in &steps[..done] {
            if *moved {
                let _ = fs::rename(root.join(rel), from);
            }
        }
        for (_, temp, moved) in &steps[done..] {
            if !moved {
                let _ = fs::remove_file(temp);
            }
        }
        return Err(e.into());
    }
    for (rel, _, _) in &steps {
        let path = root.join(rel);
        let meta = fs::metadata(&path).map_err(|e| StoreError::io(&path, e))?;
        let mtime = meta.modified().map_err(|e| StoreError::io(&path, e))?;
        let entry = Entry {
            blob: file_blob(path, meta.len()),
            mtime,
        };
        index.insert(rel.clone(), entry);
    }
    Ok((StoreIndex::new(index, None), dirs))
}

fn not_found() -> std::io::Error {
    std::io::Error::from(std::io::ErrorKind::NotFound)
}

/// A temporary name beside `path` (short, of fixed form: any name that fits `NAME_MAX` works).
fn temp_beside(root: &Path, path: &Path) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let parent = path.parent().unwrap_or(root);
    parent.join(format!(
        "{}{}.c{n}",
        crate::stores::dir::TEMP_PREFIX,
        std::process::id()
    ))
}
