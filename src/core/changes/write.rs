//! Write operations: they create and change *staged* files and directories (renames and links:
//! `rename.rs`; removals: `remove.rs`).
//!
//! A staged path lives in the staging area on disk and shows in the tree at its place in a view,
//! hiding any committed file of the same name. Committed content is never changed here.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, RwLockReadGuard};
use std::time::SystemTime;

use crate::staging::StagingArea;
use crate::stores::{Blob, Bytes};
use crate::views::join;

use crate::core::namespace::{Edit, NodeKind};
use crate::core::writer::{settled, Try, Writer};
use crate::core::{split_mount, Attr, DafFs, FsError, Handle, State};

/// What an open finds to do.
enum Opened {
    /// A handle, opened.
    Handle(u64),
    /// A committed file (mount path, content) opened for writing: to be replaced by a staged copy.
    Replace(String, Arc<Blob>),
}

/// What a `setattr` finds to do once its try is over (out of the state lock).
enum SetAttr {
    /// Nothing more.
    Done,
    /// The committed file (mount path, content) resized: replaced by a staged copy.
    Resize(String, Arc<Blob>),
    /// The committed item of the file at this mount path touched.
    Touch(String, SystemTime),
}

impl DafFs {
    pub(in crate::core) fn staging_area(&self) -> Result<&StagingArea, FsError> {
        self.staging.as_ref().ok_or(FsError::ReadOnly)
    }

    /// The state, for a change (see [`Writer`]).
    pub(in crate::core) fn lock_state(&self) -> Writer<'_> {
        Writer::new(&self.state, &self.writers)
    }

    /// The state, shared with other readers (a long wait is logged: [`crate::core::writer::log_wait`]).
    pub(in crate::core) fn read_state(&self) -> RwLockReadGuard<'_, State> {
        let asked = crate::core::writer::waits_logged().then(std::time::Instant::now);
        let guard = self.state.read().unwrap_or_else(|p| p.into_inner());
        if let Some(asked) = asked {
            crate::core::writer::log_wait(asked);
        }
        guard
    }

    pub(in crate::core) fn handles(&self) -> MutexGuard<'_, HashMap<u64, Handle>> {
        self.handles.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(in crate::core) fn new_handle(&self, ino: u64, file: Option<File>, writable: bool) -> u64 {
        self.insert_handle(ino, file, None, writable)
    }

    /// A read-only handle on committed file `ino`, reading `blob` for as long as it is open.
    fn new_blob_handle(&self, ino: u64, blob: Arc<Blob>) -> u64 {
        self.insert_handle(ino, None, Some(blob), false)
    }

    fn insert_handle(
        &self,
        ino: u64,
        file: Option<File>,
        blob: Option<Arc<Blob>>,
        writable: bool,
    ) -> u64 {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let handle = Handle {
            ino,
            file: file.map(Arc::new),
            blob,
            writable,
            dirty: false,
            passthrough: false,
            closed_at: None,
            fresh: writable,
            deferred: false,
            opener: None,
            foreign_close: false,
            staged_by_open: None,
        };
        self.handles().insert(fh, handle);
        fh
    }

    pub(in crate::core) fn handle_file(&self, fh: u64) -> Result<(u64, Arc<File>, bool), FsError> {
        let handles = self.handles();
        let handle = handles
            .get(&fh)
            .ok_or_else(|| FsError::NotPermitted("unknown file handle".into()))?;
        let file = handle
            .file
            .clone()
            .ok_or_else(|| FsError::NotPermitted("not opened for writing".into()))?;
        Ok((handle.ino, file, handle.writable))
    }

    /// The mount path and `--view both` path of `name` in directory `parent`; only paths strictly
    /// inside a view can be written.
    pub(in crate::core) fn place(
        state: &State,
        parent: u64,
        name: &OsStr,
    ) -> Result<(String, String), FsError> {
        let name = name
            .to_str()
            .ok_or_else(|| FsError::NotPermitted("file names must be UTF-8".into()))?;
        let dir = state.namespace.node(parent).ok_or(FsError::NotFound)?;
        if !dir.is_dir() {
            return Err(FsError::NotDir);
        }
        let mount = join(&state.namespace.path(parent).unwrap_or_default(), name);
        let canonical = Self::canonical(state, &mount)?;
        Ok((mount, canonical))
    }

    /// The inode of the existing entry `name` of directory `parent`.
    pub(in crate::core) fn existing_child(
        state: &State,
        parent: u64,
        name: &OsStr,
    ) -> Result<u64, FsError> {
        match state
            .namespace
            .child(parent, name.to_str().unwrap_or_default())
        {
            Some(Ok(ino)) => Ok(ino),
            Some(Err(())) => Err(FsError::NotDir),
            None => Err(FsError::NotFound),
        }
    }

    /// [`place`](Self::place), for a new name: refused where no Daf item can live.
    pub(in crate::core) fn place_new(
        state: &State,
        parent: u64,
        name: &OsStr,
        is_dir: bool,
    ) -> Result<(String, String), FsError> {
        let (mount, canonical) = Self::place(state, parent, name)?;
        if let Some((root, rel)) = split_mount(&state.roots, &mount) {
            if !root.layout().writable_place(rel, is_dir) {
                return Err(FsError::NotPermitted(format!(
                    "{mount}: not a place for Daf data (a scalar, axis, vector or matrix)"
                )));
            }
        }
        if !is_dir {
            Self::committable(state, &mount)?;
        }
        Ok((mount, canonical))
    }

    pub(in crate::core) fn canonical(state: &State, mount: &str) -> Result<String, FsError> {
        Self::changeable(state, mount)?;
        match split_mount(&state.roots, mount) {
            Some((root, rel)) if !rel.is_empty() => Ok(root.canonical_path(rel)),
            _ => Err(FsError::NotPermitted(format!(
                "{mount}: only paths inside a view can be written"
            ))),
        }
    }

    /// Refuses every change at `mount` inside a read-only view (the AnnData view) or of a file
    /// made of a whole data set (`--zip`, `--h5df`) as a read-only file system would.
    pub(in crate::core) fn changeable(state: &State, mount: &str) -> Result<(), FsError> {
        let published = |d| state.published_paths(d).iter().any(|p| p == mount);
        if (0..state.datasets.len()).any(published) {
            return Err(FsError::ReadOnly);
        }
        match split_mount(&state.roots, mount) {
            Some((root, _)) if root.layout().read_only() => Err(FsError::ReadOnly),
            _ => Ok(()),
        }
    }

    /// Checks that the committed content at `mount` may be replaced or removed: only directory
    /// sources allow it (ZIP sources are append-only).
    pub(in crate::core) fn replaceable(state: &State, mount: &str) -> Result<(), FsError> {
        Self::changeable(state, mount)?;
        match split_mount(&state.roots, mount).map(|(root, _)| &state.datasets[root.dataset].target) {
            Some(target) if target.is_zip() => Err(FsError::NotPermitted(format!(
                "{mount}: ZIP sources are append-only; committed properties cannot be replaced or removed"
            ))),
            Some(_) => Ok(()),
            None => Err(FsError::NotPermitted(format!("{mount}: not part of a data set"))),
        }
    }

    /// Checks that the file at `mount` may be rewritten: a derived document (a group document,
    /// an index) on every source, as it is judged when closed, never kept; else as
    /// [`replaceable`](Self::replaceable).
    fn rewritable(state: &State, mount: &str) -> Result<(), FsError> {
        let document = split_mount(&state.roots, mount)
            .is_some_and(|(root, rel)| root.layout().is_group_document(rel));
        if document {
            Ok(())
        } else {
            Self::replaceable(state, mount)
        }
    }

    /// Stages a replacement for the committed file at `mount` (with `content`, or empty).
    pub(in crate::core) fn stage_replacement(
        &self,
        mount: &str,
        content: Option<Bytes>,
    ) -> Result<(String, PathBuf), FsError> {
        let staging = self.staging_area()?;
        let state = self.lock_state();
        Self::rewritable(&state, mount)?;
        Self::committable(&state, mount)?;
        let canonical = Self::canonical(&state, mount)?;
        let disk = staging.prepare_parent(&canonical)?;
        fs::write(&disk, content.as_ref().map_or(&[][..], Bytes::as_slice))?;
        let mut state = state.stage(&canonical, disk.clone(), false);
        // The inode shows the staged copy now: the kernel drops the size it has (a truncation
        // whose commit is refused leaves the copy staged, at its new size).
        let ino = state.inodes.ino(mount);
        drop(state);
        self.invalidate(vec![ino]);
        Ok((mount.to_string(), disk))
    }

    /// Takes the staged file `canonical` at `disk` off the disk (with the directories on its
    /// way up it leaves empty, but for staged ones) and out of the state: the edit that shows
    /// what it hid.
    pub(in crate::core) fn drop_staged(
        &self,
        state: &mut State,
        canonical: &str,
        disk: &Path,
    ) -> std::io::Result<Option<Edit>> {
        fs::remove_file(disk)?;
        state.staged.remove(canonical);
        let parent = canonical.rsplit_once('/').map(|(parent, _)| parent);
        if let (Some(staging), Some(parent)) = (&self.staging, parent) {
            if !state.staged.contains_key(parent) {
                staging.prune_until(parent, |dir| state.staged.contains_key(dir));
            }
        }
        Ok(state.removal_edit(canonical))
    }

    /// Drops the staged file at `mount` (if it is still `disk`): what it hid shows again.
    fn unstage(&self, mount: &str, disk: &Path) {
        self.unstage_under(self.lock_state(), mount, disk);
    }

    /// [`unstage`](Self::unstage) under the state lock `state`.
    fn unstage_under(&self, mut state: Writer<'_>, mount: &str, disk: &Path) {
        let Ok(canonical) = Self::canonical(&state, mount) else {
            return;
        };
        if state.staged.get(&canonical).is_none_or(|s| s.disk != disk) {
            return;
        }
        let Ok(edit) = self.drop_staged(&mut state, &canonical, disk) else {
            return;
        };
        let mut state = state.apply([edit]);
        self.forget_dropped(&mut state, mount);
    }

    pub(in crate::core) fn namespace_ino(&self, mount: &str) -> u64 {
        self.lock_state().inodes.ino(mount)
    }

    /// Creates (or truncates) a staged file and opens it for reading and writing.
    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        exclusive: bool,
    ) -> Result<(Attr, u64), FsError> {
        let staging = self.staging_area()?;
        let mut state = self.lock_state();
        let (mount, canonical) = Self::place_new(&state, parent, name, false)?;
        let existing = state
            .namespace
            .child(parent, name.to_str().unwrap_or_default())
            .and_then(Result::ok);
        let mut made = true;
        if let Some(existing) = existing {
            match state.namespace.node(existing).map(|n| n.kind()) {
                _ if exclusive => return Err(FsError::Exists),
                Some(NodeKind::Dir { .. }) => return Err(FsError::IsDir),
                Some(NodeKind::File(_)) => Self::rewritable(&state, &mount)?,
                _ => made = false,
            }
        }
        let disk = staging.prepare_parent(&canonical)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&disk)?;
        state = state.stage(&canonical, disk.clone(), false);
        let ino = state.inodes.ino(&mount);
        drop(state);
        let fh = self.new_handle(ino, Some(file), true);
        if made {
            self.staged_by_open(fh, mount, disk);
        }
        Ok((self.getattr(ino)?, fh))
    }

    /// Opens `ino`; committed files open read-only (a handle reads the content it opened, whatever
    /// replaces it later), staged files as asked. A staged file whose item a commit is taking out
    /// opens once that commit's tree is in ([`settled`]): never a handle on a file the commit
    /// linked into the source (a truncation must not reach it there).
    pub fn open(&self, ino: u64, write: bool, truncate: bool) -> Result<u64, FsError> {
        match settled(&self.writers, |_| self.open_once(ino, write, truncate))? {
            Opened::Handle(fh) => Ok(fh),
            Opened::Replace(path, blob) => {
                // A committed file opened for writing: a staged copy replaces it (the copy is
                // made out of the state lock, then staged under it).
                let content = if truncate { None } else { Some(blob.bytes()?) };
                let (path, disk) = self.stage_replacement(&path, content)?;
                let file = OpenOptions::new().read(true).write(true).open(&disk)?;
                let fh = self.new_handle(self.namespace_ino(&path), Some(file), true);
                self.staged_by_open(fh, path, disk);
                Ok(fh)
            }
        }
    }

    /// Records that the open of handle `fh` staged `disk` at `mount`.
    fn staged_by_open(&self, fh: u64, mount: String, disk: PathBuf) {
        if let Some(handle) = self.handles().get_mut(&fh) {
            handle.staged_by_open = Some((mount, disk));
        }
    }

    /// Forgets handle `fh`, which the kernel never got (the adapter refused the open after the
    /// core made it): nothing is committed, and a file its open staged (new, or replacing a
    /// committed one) is dropped while no other handle uses it, so the open changed nothing (a
    /// truncating open truncated nothing, a creating one created nothing).
    pub fn abandon(&self, fh: u64) {
        let Some(handle) = self.handles().remove(&fh) else {
            return;
        };
        let Some((mount, disk)) = handle.staged_by_open else {
            return;
        };
        // Under the state lock: an open of the staged file makes its handle under it.
        let state = self.lock_state();
        let on_staged = |h: &Handle| h.ino == handle.ino && h.file.is_some();
        if !self.handles().values().any(on_staged) {
            self.unstage_under(state, &mount, &disk);
        }
    }

    /// One try of [`open`](Self::open), with the tree and the state read together.
    fn open_once(&self, ino: u64, write: bool, truncate: bool) -> Result<Try<Opened>, FsError> {
        let state = self.read_state();
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let opened = match node.kind() {
            NodeKind::Dir { .. } if write => return Err(FsError::IsDir),
            NodeKind::Dir { .. } => self.new_handle(ino, None, false),
            NodeKind::File(_) | NodeKind::Staged(_) if write && !self.writable() => {
                return Err(FsError::ReadOnly)
            }
            NodeKind::File(blob) if write => {
                let path = state.namespace.path(ino).ok_or(FsError::NotFound)?;
                return Ok(Try::Done(Opened::Replace(path, blob.clone())));
            }
            NodeKind::File(blob) => self.new_blob_handle(ino, blob.clone()),
            NodeKind::Staged(disk) if !state.still_staged(ino, disk) => return Ok(Try::Again),
            // Under the state lock: a commit's renames wait until the file is open.
            NodeKind::Staged(disk) => {
                let file = OpenOptions::new()
                    .read(true)
                    .write(write)
                    .truncate(write && truncate)
                    .open(disk)?;
                self.new_handle(ino, Some(file), write)
            }
        };
        Ok(Try::Done(Opened::Handle(opened)))
    }

    /// The inode a handle is open on.
    pub fn handle_ino(&self, fh: u64) -> Option<u64> {
        self.handles().get(&fh).map(|h| h.ino)
    }

    /// Writes `data` at `offset` of the staged file open as `fh`. Once its item is committed,
    /// the file is part of the data set (a ZIP source serves it until its append is done):
    /// writes through handles still open on it are refused.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let (ino, file, writable) = self.handle_file(fh)?;
        if !writable {
            return Err(FsError::NotPermitted("file not opened for writing".into()));
        }
        // Under the state lock: a commit that linked the file into the source swaps it in only
        // between writes, and a write it did not see leaves the handle dirty (the commit waits).
        let state = self.read_state();
        let staged = match state.namespace.node(ino).map(|n| n.kind()) {
            Some(NodeKind::Staged(disk)) => state.still_staged(ino, disk),
            _ => false,
        };
        if !staged {
            return Err(FsError::NotPermitted(
                "its property is committed: the file is read-only now".into(),
            ));
        }
        file.write_all_at(data, offset)?;
        if let Some(handle) = self.handles().get_mut(&fh) {
            handle.dirty = true;
        }
        drop(state);
        Ok(data.len() as u32)
    }

    /// Makes a staged file's data durable, and waits for what earlier commits queued for ZIP
    /// sources. Fails only for the item of file `ino` itself: if its append to a ZIP source
    /// failed (retried here first), with that error.
    pub fn fsync(&self, ino: u64, fh: u64) -> Result<(), FsError> {
        if let Ok((_, file, _)) = self.handle_file(fh) {
            file.sync_all()?;
        }
        self.unfinished.wait();
        let item = {
            let state = self.read_state();
            let path = state.namespace.path(ino);
            path.and_then(|p| state.locate(&p))
                .and_then(|(root, _, id)| Some((root.dataset, id?)))
        };
        self.appender
            .wait(|dataset, id| item.as_ref().is_some_and(|(d, i)| *d == dataset && i == id))
    }

    /// Truncates a staged file or sets its time; for committed files and directories only the
    /// times may be "set" (a no-op: their times come from the source). A committed file of a
    /// directory source truncated to another size is replaced by a staged copy of that size.
    pub fn setattr(
        &self,
        ino: u64,
        size: Option<u64>,
        mtime: Option<SystemTime>,
    ) -> Result<Attr, FsError> {
        match settled(&self.writers, |_| self.setattr_once(ino, size, mtime))? {
            SetAttr::Done => {}
            SetAttr::Resize(path, blob) => {
                let (_, disk) = self.stage_replacement(&path, Some(blob.bytes()?))?;
                OpenOptions::new()
                    .write(true)
                    .open(&disk)?
                    .set_len(size.unwrap_or(0))?;
                if let Err(e) = self.try_commit(&path, None, false) {
                    // Refused: the truncation did nothing, the committed file shows again (as
                    // the size the kernel kept says).
                    if matches!(e, FsError::Invalid(_) | FsError::NotPermitted(_)) {
                        self.unstage(&path, &disk);
                    }
                    return Err(e);
                }
            }
            SetAttr::Touch(path, mtime) => self.touch(&path, mtime)?,
        }
        self.getattr(ino)
    }

    /// One try of [`setattr`](Self::setattr), with the tree and the state read together: a
    /// staged file is changed here, under the state lock (as in `open`: never a file a commit
    /// linked into the source).
    fn setattr_once(
        &self,
        ino: u64,
        size: Option<u64>,
        mtime: Option<SystemTime>,
    ) -> Result<Try<SetAttr>, FsError> {
        let state = self.read_state();
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let path = || state.namespace.path(ino).ok_or(FsError::NotFound);
        if size.is_some() || mtime.is_some() {
            Self::changeable(&state, &path()?)?;
        }
        let set = match node.kind() {
            NodeKind::Staged(disk) => {
                self.staging_area()?;
                if !state.still_staged(ino, disk) {
                    return Ok(Try::Again);
                }
                let file = OpenOptions::new().write(true).open(disk)?;
                if let Some(size) = size {
                    file.set_len(size)?;
                }
                if let Some(mtime) = mtime {
                    file.set_modified(mtime)?;
                }
                SetAttr::Done
            }
            _ if (size.is_some() || mtime.is_some()) && !self.writable() => {
                return Err(FsError::ReadOnly)
            }
            NodeKind::File(blob) if size.is_some_and(|s| Some(s) != blob.known_len()) => {
                SetAttr::Resize(path()?, blob.clone())
            }
            NodeKind::File(_) => match mtime {
                Some(mtime) => SetAttr::Touch(path()?, mtime),
                None => SetAttr::Done,
            },
            NodeKind::Dir { .. } if size.is_some() => return Err(FsError::IsDir),
            NodeKind::Dir { .. } => SetAttr::Done,
        };
        Ok(Try::Done(set))
    }

    /// Creates a staged directory.
    pub fn mkdir(&self, parent: u64, name: &OsStr) -> Result<Attr, FsError> {
        let staging = self.staging_area()?;
        let mut state = self.lock_state();
        let (mount, canonical) = Self::place_new(&state, parent, name, true)?;
        if state
            .namespace
            .child(parent, name.to_str().unwrap_or_default())
            .is_some()
        {
            return Err(FsError::Exists);
        }
        let disk = staging.disk_path(&canonical);
        fs::create_dir_all(&disk)?;
        state = state.stage(&canonical, disk, true);
        let ino = state.inodes.ino(&mount);
        drop(state);
        self.getattr(ino)
    }
}
