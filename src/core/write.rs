//! Write operations: they create, change, rename and remove *staged* files and directories.
//!
//! A staged path lives in the staging area on disk and shows in the tree at its place in a view,
//! hiding any committed file of the same name. Committed content is never changed here.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, RwLockWriteGuard};
use std::time::SystemTime;

use crate::formats::json::FilesVersion;
use crate::formats::model::PropertyId;
use crate::formats::source::Target;
use crate::staging::commit::{commit, item_of, writable_place, CommitError, Outcome, StagedFile};
use crate::staging::commit::{delete_item, touch_item};
use crate::staging::StagingArea;
use crate::stores::Bytes;
use crate::views::join;
use crate::views::{ViewKind, ViewRoot};

use super::namespace::NodeKind;
use super::{
    split_canonical, split_mount, Attr, DafFs, FsError, Handle, Invalidation, Staged, State,
};

impl DafFs {
    fn staging_area(&self) -> Result<&StagingArea, FsError> {
        self.staging.as_ref().ok_or(FsError::ReadOnly)
    }

    fn lock_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|p| p.into_inner())
    }

    fn new_handle(&self, ino: u64, file: Option<File>, writable: bool) -> u64 {
        let fh = self.next_handle.fetch_add(1, Ordering::Relaxed);
        let handle = Handle {
            ino,
            file: file.map(Arc::new),
            writable,
            dirty: false,
        };
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, handle);
        fh
    }

    fn handle_file(&self, fh: u64) -> Result<(u64, Arc<File>, bool), FsError> {
        let handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
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
    fn place(state: &State, parent: u64, name: &OsStr) -> Result<(String, String), FsError> {
        let name = name
            .to_str()
            .ok_or_else(|| FsError::NotPermitted("file names must be UTF-8".into()))?;
        let parent = state.namespace.node(parent).ok_or(FsError::NotFound)?;
        if !parent.is_dir() {
            return Err(FsError::NotDir);
        }
        let mount = join(&parent.path, name);
        let canonical = Self::canonical(state, &mount)?;
        Ok((mount, canonical))
    }

    /// The inode of the existing entry `name` of directory `parent`.
    fn existing_child(state: &State, parent: u64, name: &OsStr) -> Result<u64, FsError> {
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
    fn place_new(
        state: &State,
        parent: u64,
        name: &OsStr,
        is_dir: bool,
    ) -> Result<(String, String), FsError> {
        let (mount, canonical) = Self::place(state, parent, name)?;
        if let Some((root, rel)) = split_mount(&state.roots, &mount) {
            if !writable_place(root.kind, rel, is_dir) {
                return Err(FsError::NotPermitted(format!(
                    "{mount}: not a place for Daf data (a scalar, axis, vector or matrix)"
                )));
            }
        }
        Ok((mount, canonical))
    }

    fn canonical(state: &State, mount: &str) -> Result<String, FsError> {
        match split_mount(&state.roots, mount) {
            Some((root, rel)) if !rel.is_empty() => Ok(root.canonical_path(rel)),
            _ => Err(FsError::NotPermitted(format!(
                "{mount}: only paths inside a view can be written"
            ))),
        }
    }

    /// Checks that the committed content at `mount` may be replaced or removed: only directory
    /// sources allow it (ZIP sources are append-only).
    fn replaceable(state: &State, mount: &str) -> Result<(), FsError> {
        match split_mount(&state.roots, mount).map(|(root, _)| &state.datasets[root.dataset].target) {
            Some(Target::Zip { .. }) => Err(FsError::NotPermitted(format!(
                "{mount}: ZIP sources are append-only; committed properties cannot be replaced or removed"
            ))),
            Some(_) => Ok(()),
            None => Err(FsError::NotPermitted(format!("{mount}: not part of a data set"))),
        }
    }

    /// Stages a replacement for the committed file at `mount` (with `content`, or empty).
    fn stage_replacement(
        &self,
        mount: &str,
        content: Option<Bytes>,
    ) -> Result<(String, PathBuf), FsError> {
        let staging = self.staging_area()?;
        let mut state = self.lock_state();
        Self::replaceable(&state, mount)?;
        let canonical = Self::canonical(&state, mount)?;
        let disk = staging.prepare_parent(&canonical)?;
        fs::write(&disk, content.as_ref().map_or(&[][..], Bytes::as_slice))?;
        state.staged.insert(
            canonical,
            Staged {
                disk: disk.clone(),
                is_dir: false,
                mtime: SystemTime::now(),
            },
        );
        state.rebuild();
        Ok((mount.to_string(), disk))
    }

    fn namespace_ino(&self, mount: &str) -> u64 {
        self.lock_state().inodes.ino(mount)
    }

    /// Sets the modification time of a committed item (and of its files in a directory source),
    /// the way `touch` does: `make` relies on it.
    fn touch(&self, mount: &str, mtime: SystemTime) -> Result<(), FsError> {
        let mut state = self.lock_state();
        let Some((root, rel)) = split_mount(&state.roots, mount) else {
            return Ok(());
        };
        let root = root.clone();
        let Some(id) = item_of(root.kind, rel) else {
            return Ok(());
        };
        Self::replaceable(&state, mount)?;
        touch_item(&mut state.datasets[root.dataset], &id, mtime)
            .map_err(|e| FsError::NotPermitted(e.to_string()))?;
        let changed = item_mount_paths(&state, root.dataset, &id);
        state.rebuild();
        let inos: Vec<u64> = changed.iter().map(|p| state.inodes.ino(p)).collect();
        drop(state);
        self.invalidate(inos);
        Ok(())
    }

    /// Queues kernel cache invalidations for these inodes (the adapter sends them).
    fn invalidate(&self, inos: Vec<u64>) {
        self.invalidations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(inos.into_iter().map(Invalidation::Inode));
    }

    /// Queues invalidations of names that no longer exist.
    fn invalidate_entries(&self, entries: Vec<(u64, String)>) {
        let mut queue = self.invalidations.lock().unwrap_or_else(|p| p.into_inner());
        queue.extend(
            entries
                .into_iter()
                .map(|(parent, name)| Invalidation::Entry(parent, name)),
        );
    }

    /// What the kernel must forget: changed inodes, and names that are gone.
    pub fn take_invalidations(&self) -> Vec<Invalidation> {
        std::mem::take(&mut *self.invalidations.lock().unwrap_or_else(|p| p.into_inner()))
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
        if let Some(existing) = state
            .namespace
            .child(parent, name.to_str().unwrap_or_default())
            .and_then(Result::ok)
        {
            match state.namespace.node(existing).map(|n| &n.kind) {
                _ if exclusive => return Err(FsError::Exists),
                Some(NodeKind::Dir { .. }) => return Err(FsError::IsDir),
                Some(NodeKind::File(_)) => Self::replaceable(&state, &mount)?,
                _ => {}
            }
        }
        let disk = staging.prepare_parent(&canonical)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&disk)?;
        state.staged.insert(
            canonical,
            Staged {
                disk,
                is_dir: false,
                mtime: SystemTime::now(),
            },
        );
        state.rebuild();
        let ino = state.inodes.ino(&mount);
        drop(state);
        let fh = self.new_handle(ino, Some(file), true);
        Ok((self.getattr(ino)?, fh))
    }

    /// Opens `ino`; committed files open read-only, staged files as asked.
    pub fn open(&self, ino: u64, write: bool, truncate: bool) -> Result<u64, FsError> {
        let ns = self.namespace();
        let node = ns.node(ino).ok_or(FsError::NotFound)?;
        let file = match &node.kind {
            NodeKind::Dir { .. } if write => return Err(FsError::IsDir),
            NodeKind::Dir { .. } => None,
            NodeKind::File(_) if write && !self.writable() => return Err(FsError::ReadOnly),
            NodeKind::File(blob) if write => {
                let content = if truncate { None } else { Some(blob.bytes()?) };
                let (path, disk) = self.stage_replacement(&node.path, content)?;
                let file = OpenOptions::new().read(true).write(true).open(disk)?;
                return Ok(self.new_handle(self.namespace_ino(&path), Some(file), true));
            }
            NodeKind::File(_) => None,
            NodeKind::Staged(_) if write && !self.writable() => return Err(FsError::ReadOnly),
            NodeKind::Staged(disk) => Some(
                OpenOptions::new()
                    .read(true)
                    .write(write)
                    .truncate(write && truncate)
                    .open(disk)?,
            ),
        };
        Ok(self.new_handle(ino, file, write))
    }

    /// Writes `data` at `offset` of the staged file open as `fh`.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8]) -> Result<u32, FsError> {
        let (_, file, writable) = self.handle_file(fh)?;
        if !writable {
            return Err(FsError::NotPermitted("file not opened for writing".into()));
        }
        file.write_all_at(data, offset)?;
        if let Some(handle) = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&fh)
        {
            handle.dirty = true;
        }
        Ok(data.len() as u32)
    }

    /// Makes a staged file's data durable.
    pub fn fsync(&self, fh: u64) -> Result<(), FsError> {
        if let Ok((_, file, _)) = self.handle_file(fh) {
            file.sync_all()?;
        }
        Ok(())
    }

    /// Called on every `close` of a handle: a close after writes may complete an item, which is
    /// then committed (or refused, failing the `close`). A close with nothing written since the
    /// last one (a shell's redirection dance) does nothing.
    pub fn flush(&self, fh: u64) -> Result<(), FsError> {
        let ino = match self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&fh)
        {
            Some(handle) if handle.dirty => {
                handle.dirty = false;
                handle.ino
            }
            _ => return Ok(()),
        };
        self.commit_staged(ino, fh)
    }

    fn commit_staged(&self, ino: u64, fh: u64) -> Result<(), FsError> {
        let path = match self.namespace().node(ino) {
            Some(node) if matches!(node.kind, NodeKind::Staged(_)) => node.path.clone(),
            _ => return Ok(()),
        };
        self.try_commit(&path, Some(fh), false)
    }

    /// Commits the item `mount` belongs to if all its staged files are there, closed (but for
    /// the handle `closing`), and consistent.
    fn try_commit(&self, mount: &str, closing: Option<u64>, finalize: bool) -> Result<(), FsError> {
        let Some(staging) = self.staging.as_ref() else {
            return Ok(());
        };
        let mut state = self.lock_state();
        let Some((root, rel)) = split_mount(&state.roots, mount) else {
            return Ok(());
        };
        let root = root.clone();
        let Some(id) = item_of(root.kind, rel) else {
            return Ok(());
        };
        let prefix = format!("{}/", root.canonical);
        let members: Vec<(String, StagedFile)> = state
            .staged
            .iter()
            .filter(|(_, s)| !s.is_dir)
            .filter_map(|(path, s)| {
                let rel = path.strip_prefix(&prefix)?;
                (item_of(root.kind, rel).as_ref() == Some(&id)).then(|| {
                    (
                        path.clone(),
                        StagedFile {
                            rel: rel.to_string(),
                            disk: s.disk.clone(),
                            mtime: s.mtime,
                        },
                    )
                })
            })
            .collect();
        let writing: Vec<u64> = self
            .handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(fh, h)| h.writable && h.dirty && Some(**fh) != closing)
            .map(|(_, h)| h.ino)
            .collect();
        let busy = members
            .iter()
            .any(|(_, f)| writing.contains(&state.inodes.ino(&root.mount_path(&f.rel))));
        if busy {
            return Ok(());
        }
        let files: Vec<StagedFile> = members.iter().map(|(_, f)| f.clone()).collect();
        let outcome = commit(
            &mut state.datasets[root.dataset],
            root.kind,
            &id,
            &files,
            finalize,
        );
        match outcome {
            Ok(Outcome::Incomplete) => Ok(()),
            Ok(Outcome::Committed) => {
                log::info!("committed {} of {}", id.path(), root.canonical);
                let changed = item_mount_paths(&state, root.dataset, &id);
                let inos: Vec<u64> = changed.iter().map(|p| state.inodes.ino(p)).collect();
                self.invalidate(inos);
                for (path, file) in &members {
                    let _ = fs::remove_file(&file.disk);
                    state.staged.remove(path);
                    // Remove the on-disk directories made just to hold it.
                    if let Some((parent, _)) = path.rsplit_once('/') {
                        if !state.staged.contains_key(parent) {
                            staging.prune(parent);
                        }
                    }
                }
                state.rebuild();
                // Directories made for the item (zarr's mkdir of an array) are the committed
                // item's now: stop staging those that hold no staged file.
                let empty_dirs: Vec<String> = state
                    .staged
                    .iter()
                    .filter(|(path, s)| {
                        s.is_dir
                            && !state
                                .staged
                                .keys()
                                .any(|k| k.starts_with(&format!("{path}/")))
                    })
                    .map(|(path, _)| path.clone())
                    .collect();
                for dir in empty_dirs {
                    let shown =
                        split_canonical(&state.roots, &dir).map(|(r, rel)| r.mount_path(rel));
                    let committed = shown.is_some_and(|m| self_view_has_dir(&state, &m));
                    if committed {
                        state.staged.remove(&dir);
                        staging.prune(&dir);
                    }
                }
                state.rebuild();
                Ok(())
            }
            Err(CommitError::Invalid(why)) => {
                Err(FsError::Invalid(format!("{}: {why}", id.path())))
            }
            Err(CommitError::Refused(why)) => Err(FsError::NotPermitted(why)),
            Err(CommitError::Store(e)) => Err(FsError::Content(e)),
        }
    }

    /// Commits every staged item under `mount` (the whole mount for "") that is only waiting for
    /// what a writer may legitimately leave out: Zarr chunks that are all fill value, or the
    /// `nzval` of an all-true Bool property. Called by `fsync` on a directory and at unmount.
    pub fn finalize(&self, mount: &str) -> Result<(), FsError> {
        let paths: Vec<String> = {
            let state = self.state.read().unwrap_or_else(|p| p.into_inner());
            state
                .staged
                .iter()
                .filter(|(_, s)| !s.is_dir)
                .filter_map(|(path, _)| {
                    let (root, rel) = split_canonical(&state.roots, path)?;
                    let at = root.mount_path(rel);
                    let inside =
                        mount.is_empty() || at == mount || at.starts_with(&format!("{mount}/"));
                    (inside && item_of(root.kind, rel).is_some()).then_some(at)
                })
                .collect()
        };
        let mut first_error = None;
        for path in paths {
            if let Err(e) = self.try_commit(&path, None, true) {
                log::warn!("finalizing {path}: {e}");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The mount path of inode `ino`.
    pub fn path_of(&self, ino: u64) -> Option<String> {
        self.namespace().node(ino).map(|n| n.path.clone())
    }

    /// Forgets a handle.
    pub fn release(&self, fh: u64) {
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh);
    }

    /// Truncates a staged file or sets its time; for committed files and directories only the
    /// times may be "set" (a no-op: their times come from the source).
    pub fn setattr(
        &self,
        ino: u64,
        size: Option<u64>,
        mtime: Option<SystemTime>,
    ) -> Result<Attr, FsError> {
        let ns = self.namespace();
        let node = ns.node(ino).ok_or(FsError::NotFound)?;
        match &node.kind {
            NodeKind::Staged(disk) => {
                self.staging_area()?;
                let file = OpenOptions::new().write(true).open(disk)?;
                if let Some(size) = size {
                    file.set_len(size)?;
                }
                if let Some(mtime) = mtime {
                    file.set_modified(mtime)?;
                }
            }
            _ if (size.is_some() || mtime.is_some()) && !self.writable() => {
                return Err(FsError::ReadOnly)
            }
            NodeKind::File(blob) if size.is_some_and(|s| Some(s) != blob.known_len()) => {
                let path = node.path.clone();
                let (_, disk) = self.stage_replacement(&path, Some(blob.bytes()?))?;
                OpenOptions::new()
                    .write(true)
                    .open(disk)?
                    .set_len(size.unwrap_or(0))?;
                self.try_commit(&path, None, false)?;
            }
            NodeKind::File(_) => {
                if let Some(mtime) = mtime {
                    self.touch(&node.path, mtime)?;
                }
            }
            NodeKind::Dir { .. } if size.is_some() => return Err(FsError::IsDir),
            _ => {}
        }
        self.getattr(ino)
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
        state.staged.insert(
            canonical,
            Staged {
                disk,
                is_dir: true,
                mtime: SystemTime::now(),
            },
        );
        state.rebuild();
        let ino = state.inodes.ino(&mount);
        drop(state);
        self.getattr(ino)
    }

    /// Removes a staged file.
    pub fn unlink(&self, parent: u64, name: &OsStr) -> Result<(), FsError> {
        self.staging_area()?;
        let mut state = self.lock_state();
        let ino = Self::existing_child(&state, parent, name)?;
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let (path, disk) = match &node.kind {
            NodeKind::Staged(disk) => (node.path.clone(), disk.clone()),
            NodeKind::Dir { .. } => return Err(FsError::IsDir),
            NodeKind::File(_) => {
                let path = node.path.clone();
                return self.remove_committed(state, &path);
            }
        };
        fs::remove_file(&disk)?;
        let canonical = Self::canonical(&state, &path)?;
        state.staged.remove(&canonical);
        state.rebuild();
        Ok(())
    }

    /// Removes a committed file of a directory source: it is hidden at once, and its item is
    /// deleted from the source when every file of the item in a FilesDaf view is gone (a Zarr
    /// node goes when its directory is removed, as `rm -r` and zarr's `del` do last).
    fn remove_committed(
        &self,
        mut state: RwLockWriteGuard<'_, State>,
        mount: &str,
    ) -> Result<(), FsError> {
        Self::replaceable(&state, mount)?;
        let (root, rel) = split_mount(&state.roots, mount).ok_or(FsError::NotFound)?;
        let (root, rel) = (root.clone(), rel.to_string());
        let id = item_of(root.kind, &rel).ok_or_else(|| {
            FsError::NotPermitted(format!("{mount}: only files of a property can be removed"))
        })?;
        if let PropertyId::Axis(name) = &id {
            if state.datasets[root.dataset].dataset.axis_in_use(name) {
                log::warn!("{mount}: axis {name} is used by properties; remove them first");
                return Err(FsError::NotEmpty);
            }
        }
        state.deleted.insert(root.canonical_path(&rel));
        if root.kind == ViewKind::Files {
            let files = crate::views::files::item_entries(
                &state.datasets[root.dataset].dataset,
                &id,
                FilesVersion::V1_0,
            );
            let gone = files
                .iter()
                .all(|e| state.deleted.contains(&root.canonical_path(&e.path)));
            if gone {
                self.delete_now(&mut state, &root, &id)?;
            }
        }
        state.rebuild();
        Ok(())
    }

    /// Removes an emptied committed directory of a Zarr view: an item's node (the item is
    /// deleted) or a directory inside one (hidden until the node goes).
    fn remove_committed_dir(
        &self,
        mut state: RwLockWriteGuard<'_, State>,
        mount: &str,
    ) -> Result<(), FsError> {
        Self::replaceable(&state, mount)?;
        let (root, rel) = split_mount(&state.roots, mount).ok_or(FsError::NotFound)?;
        let (root, rel) = (root.clone(), rel.to_string());
        let refused = || {
            FsError::NotPermitted(format!(
                "{mount}: a directory of the data set cannot be removed"
            ))
        };
        if root.kind != ViewKind::Zarr {
            return Err(refused());
        }
        let id = item_of(ViewKind::Zarr, &format!("{rel}/.zarray")).ok_or_else(refused)?;
        if rel == id.path() {
            self.delete_now(&mut state, &root, &id)?;
        } else {
            state.deleted.insert(root.canonical_path(&rel));
        }
        state.rebuild();
        Ok(())
    }

    /// Deletes item `id` from the source now, and forgets its hidden paths.
    fn delete_now(
        &self,
        state: &mut State,
        root: &ViewRoot,
        id: &PropertyId,
    ) -> Result<(), FsError> {
        let gone = item_mount_paths(state, root.dataset, id);
        delete_item(&mut state.datasets[root.dataset], id).map_err(|e| match e {
            CommitError::Refused(why) => FsError::NotPermitted(why),
            CommitError::Invalid(why) => FsError::Invalid(why),
            CommitError::Store(e) => FsError::Content(e),
        })?;
        log::info!("deleted {} of {}", id.path(), root.canonical);
        let roots = state.roots.clone();
        state.deleted.retain(|path| {
            let Some((r, rel)) = split_canonical(&roots, path) else {
                return true;
            };
            r.dataset != root.dataset
                || (item_of(r.kind, rel).as_ref() != Some(id)
                    && !rel.starts_with(&format!("{}/", id.path()))
                    && rel != id.path())
        });
        // The files, and the directories they were in (a Zarr node, `nzind/`, ...): the kernel
        // may have any of them cached.
        let mut names: BTreeSet<String> = BTreeSet::new();
        for path in &gone {
            let mut at = path.as_str();
            while let Some((parent, _)) = at.rsplit_once('/') {
                names.insert(at.to_string());
                at = parent;
            }
        }
        let entries: Vec<(u64, String)> = names
            .iter()
            .filter_map(|p| {
                p.rsplit_once('/')
                    .map(|(parent, name)| (state.inodes.ino(parent), name.to_string()))
            })
            .collect();
        self.invalidate_entries(entries);
        Ok(())
    }

    /// Removes an empty staged directory.
    pub fn rmdir(&self, parent: u64, name: &OsStr) -> Result<(), FsError> {
        let staging = self.staging_area()?;
        let mut state = self.lock_state();
        let ino = Self::existing_child(&state, parent, name)?;
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let NodeKind::Dir { children } = &node.kind else {
            return Err(FsError::NotDir);
        };
        if !children.is_empty() {
            return Err(FsError::NotEmpty);
        }
        let canonical = Self::canonical(&state, &node.path)?;
        if !state.staged.get(&canonical).is_some_and(|s| s.is_dir) {
            let path = node.path.clone();
            return self.remove_committed_dir(state, &path);
        }
        let _ = fs::remove_dir(staging.disk_path(&canonical));
        state.staged.remove(&canonical);
        state.rebuild();
        Ok(())
    }

    /// Renames a staged file, replacing a staged file at the target.
    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
    ) -> Result<(), FsError> {
        let staging = self.staging_area()?;
        let mut state = self.lock_state();
        let ino = Self::existing_child(&state, parent, name)?;
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let NodeKind::Staged(disk) = &node.kind else {
            return Err(FsError::NotPermitted(format!(
                "{}: only files being written can be renamed",
                node.path
            )));
        };
        let (disk, old_path) = (disk.clone(), node.path.clone());
        let (new_mount, new_canonical) = Self::place_new(&state, new_parent, new_name, false)?;
        if let Some(Ok(target)) = state
            .namespace
            .child(new_parent, new_name.to_str().unwrap_or_default())
        {
            match state.namespace.node(target).map(|n| &n.kind) {
                Some(NodeKind::Dir { .. }) => return Err(FsError::IsDir),
                Some(NodeKind::File(blob)) => {
                    // Rewriting a document with the same bytes (zarr re-saving a group's
                    // .zgroup) changes nothing: accept it and drop the staged copy.
                    if fs::read(&disk)? == blob.bytes()?.as_slice() {
                        fs::remove_file(&disk)?;
                        let old_canonical = Self::canonical(&state, &old_path)?;
                        state.staged.remove(&old_canonical);
                        state.rebuild();
                        return Ok(());
                    }
                    Self::replaceable(&state, &new_mount)?;
                }
                _ => {}
            }
        }
        if split_mount(&state.roots, &new_mount)
            .is_some_and(|(r, rel)| r.kind == ViewKind::Zarr && rel == ".zmetadata")
        {
            // Consolidated metadata is derived from the data set and kept up to date here;
            // a writer's copy (zarr after a change) is accepted and dropped.
            fs::remove_file(&disk)?;
            let old_canonical = Self::canonical(&state, &old_path)?;
            state.staged.remove(&old_canonical);
            state.rebuild();
            return Ok(());
        }
        let new_disk = staging.prepare_parent(&new_canonical)?;
        fs::rename(&disk, &new_disk)?;
        let old_canonical = Self::canonical(&state, &old_path)?;
        let moved = state.staged.remove(&old_canonical);
        state.staged.insert(
            new_canonical.clone(),
            Staged {
                disk: new_disk.clone(),
                is_dir: false,
                mtime: SystemTime::now(),
            },
        );
        state.inodes.rename(&old_path, &new_mount);
        state.rebuild();
        drop(state);
        let committed = self.try_commit(&new_mount, None, false);
        if committed.is_err() {
            // A rename that fails changes nothing: put the file back under its old name.
            let mut state = self.lock_state();
            if fs::rename(&new_disk, &disk).is_ok() {
                state.staged.remove(&new_canonical);
                if let Some(moved) = moved {
                    state.staged.insert(old_canonical, moved);
                }
                state.inodes.rename(&new_mount, &old_path);
                state.rebuild();
            }
        }
        committed
    }

    /// Adds a second name for a staged file.
    pub fn link(&self, ino: u64, new_parent: u64, new_name: &OsStr) -> Result<Attr, FsError> {
        let staging = self.staging_area()?;
        let mut state = self.lock_state();
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let NodeKind::Staged(disk) = &node.kind else {
            return Err(FsError::NotPermitted(format!(
                "{}: only files being written can be linked",
                node.path
            )));
        };
        let disk = disk.clone();
        let (mount, canonical) = Self::place_new(&state, new_parent, new_name, false)?;
        if state
            .namespace
            .child(new_parent, new_name.to_str().unwrap_or_default())
            .is_some()
        {
            return Err(FsError::Exists);
        }
        let new_disk = staging.prepare_parent(&canonical)?;
        fs::hard_link(&disk, &new_disk)?;
        state.staged.insert(
            canonical,
            Staged {
                disk: new_disk,
                is_dir: false,
                mtime: SystemTime::now(),
            },
        );
        state.rebuild();
        let ino = state.inodes.ino(&mount);
        drop(state);
        self.try_commit(&mount, None, false)?;
        self.getattr(ino)
    }
}

/// The mount paths of every file of item `id` of data set `dataset`, in every view shown.
fn item_mount_paths(
    state: &State,
    dataset: usize,
    id: &crate::formats::model::PropertyId,
) -> Vec<String> {
    let ds = &state.datasets[dataset].dataset;
    state
        .roots
        .iter()
        .filter(|root| root.dataset == dataset)
        .flat_map(|root| {
            let entries = match root.kind {
                crate::views::ViewKind::Files => crate::views::files::item_entries(
                    ds,
                    id,
                    crate::formats::json::FilesVersion::V1_0,
                ),
                crate::views::ViewKind::Zarr => crate::views::zarr::item_entries(ds, id),
            };
            entries
                .into_iter()
                .map(|e| root.mount_path(&e.path))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether the views (not the staging area) have a directory at mount path `mount`.
fn self_view_has_dir(state: &State, mount: &str) -> bool {
    state.roots.iter().any(|root| {
        let Some(rel) = mount
            .strip_prefix(&root.mount)
            .map(|r| r.trim_start_matches('/'))
        else {
            return false;
        };
        if rel.is_empty() {
            return true;
        }
        let ds = &state.datasets[root.dataset].dataset;
        let entries = match root.kind {
            crate::views::ViewKind::Files => crate::views::files::files_view(ds, ""),
            crate::views::ViewKind::Zarr => crate::views::zarr::zarr_view(ds, ""),
        };
        let prefix = format!("{rel}/");
        entries
            .iter()
            .any(|e| e.path == rel || e.path.starts_with(&prefix))
    })
}
