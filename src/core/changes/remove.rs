//! Removing through the mount: staged files and directories go at once; committed files of a
//! directory source are hidden, and their item is deleted from the source when the last of its
//! FilesDaf files goes or its Zarr node directory is removed.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;

use crate::formats::model::PropertyId;
use crate::staging::commit::{delete_item, CommitError};
use crate::views::layout::Removal;
use crate::views::ViewRoot;

use crate::core::changes::commit::{derived_mount_paths, item_mount_paths};
use crate::core::namespace::{Edit, NodeKind};
use crate::core::writer::Writer;
use crate::core::{resolve_in, split_canonical, DafFs, FsError, State};
use crate::stores::Bytes;

impl DafFs {
    /// Removes a staged file.
    pub fn unlink(&self, parent: u64, name: &OsStr) -> Result<(), FsError> {
        self.staging_area()?;
        let mut state = self.lock_state();
        let ino = Self::existing_child(&state, parent, name)?;
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let path = state.namespace.path(ino).ok_or(FsError::NotFound)?;
        let (path, disk) = match node.kind() {
            NodeKind::Staged(disk) => (path, disk.clone()),
            NodeKind::Dir { .. } => return Err(FsError::IsDir),
            NodeKind::File(_) => {
                return self.remove_committed(state, &path);
            }
        };
        let canonical = Self::canonical(&state, &path)?;
        let edit = self.drop_staged(&mut state, &canonical, &disk)?;
        drop(state.apply([edit]));
        Ok(())
    }

    /// Removes a committed file of a directory source: it is hidden at once, and its item is
    /// deleted from the source when every file of the item in a FilesDaf view is gone (a Zarr
    /// node goes when its directory is removed, as `rm -r` and zarr's `del` do last).
    pub(in crate::core) fn remove_committed(
        &self,
        mut state: Writer<'_>,
        mount: &str,
    ) -> Result<(), FsError> {
        Self::replaceable(&state, mount)?;
        let (root, rel, id) = state.locate(mount).ok_or(FsError::NotFound)?;
        let id = id.ok_or_else(|| {
            FsError::NotPermitted(format!("{mount}: only files of a property can be removed"))
        })?;
        if let PropertyId::Axis(name) = &id {
            if state.datasets[root.dataset].dataset.axis_in_use(name) {
                log::warn!("{mount}: axis {name} is used by properties; remove them first");
                return Err(FsError::NotEmpty);
            }
        }
        if let Some(fill) = Self::fill_for_unlinked_chunk(&state, &root, &rel) {
            // A Zarr writer storing fill values unlinks the chunk (zarr's write_empty_chunks):
            // the array stays, that chunk now reads as fill.
            drop(state);
            log::info!("{mount}: chunk removed by a writer, the array now holds fill values there");
            self.stage_replacement(mount, Some(fill))?;
            return self.try_commit(mount, None, false);
        }
        state.deleted.insert(root.canonical_path(&rel));
        if root.layout().removal() == Removal::LastFile {
            let files = root
                .layout()
                .item_entries(&state.datasets[root.dataset].dataset, &id);
            let gone = files
                .iter()
                .all(|e| state.deleted.contains(&root.canonical_path(&e.path)));
            if gone {
                // The item leaves the data set: a new tree.
                self.delete_now(&mut state, &root, &id)?;
                drop(state.rebuilt());
                return Ok(());
            }
        }
        // Hidden: only that path leaves the tree, but for the directories inside the item's node
        // only its entries implied (a Zarr v3 chunk's `c/`, `c/0/`), which `rm -r` removes next:
        // they stay, as empty staged directories.
        let node = ancestors(&rel).find(|dir| root.layout().node_item(dir).as_ref() == Some(&id));
        let emptied: Vec<String> = match node {
            Some(node) => ancestors(&rel).filter(|d| d.len() > node.len()).collect(),
            None => Vec::new(),
        };
        state = state.apply([Some(Edit::Remove {
            path: mount.to_string(),
            uncover: false,
        })]);
        let staging = self.staging_area()?;
        for dir in emptied {
            if resolve_in(&state.namespace, &root.mount_path(&dir)).is_none() {
                let canonical = root.canonical_path(&dir);
                let disk = staging.disk_path(&canonical);
                fs::create_dir_all(&disk)?;
                state = state.stage(&canonical, disk, true);
            }
        }
        Ok(())
    }

    /// For a committed chunk that a writer unlinks, the bytes it now holds (see
    /// [`crate::views::layout::Layout::fill_for_removed_chunk`]).
    fn fill_for_unlinked_chunk(state: &State, root: &ViewRoot, rel: &str) -> Option<Bytes> {
        let read = |rel: &str| {
            if state.deleted.contains(&root.canonical_path(rel)) {
                return None;
            }
            let ino = resolve_in(&state.namespace, &root.mount_path(rel))?;
            match state.namespace.node(ino)?.kind() {
                NodeKind::File(blob) => blob.bytes().ok(),
                _ => None,
            }
        };
        root.layout().fill_for_removed_chunk(rel, &read)
    }

    /// Removes an emptied committed directory of a Zarr view: an item's node (the item is
    /// deleted) or a directory inside one (hidden until the node goes).
    pub(in crate::core) fn remove_committed_dir(
        &self,
        mut state: Writer<'_>,
        mount: &str,
    ) -> Result<(), FsError> {
        Self::replaceable(&state, mount)?;
        let (root, rel, _) = state.locate(mount).ok_or(FsError::NotFound)?;
        let refused = || {
            FsError::NotPermitted(format!(
                "{mount}: a directory of the data set cannot be removed"
            ))
        };
        if root.layout().removal() != Removal::NodeDirectory {
            return Err(refused());
        }
        let id = root.layout().node_item(&rel).ok_or_else(refused)?;
        if rel == id.path() {
            self.delete_now(&mut state, &root, &id)?;
            drop(state.rebuilt());
        } else {
            state.deleted.insert(root.canonical_path(&rel));
            drop(state.apply([Some(Edit::Remove {
                path: mount.to_string(),
                uncover: false,
            })]));
        }
        Ok(())
    }

    /// Deletes item `id` from the source now, and forgets its hidden paths.
    pub(in crate::core) fn delete_now(
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
                || (r.layout().item_of(rel).as_ref() != Some(id)
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
        // The files derived from every item (`metadata.json`, ...) changed in place.
        let derived: Vec<u64> = derived_mount_paths(state, root.dataset)
            .iter()
            .map(|p| state.inodes.ino(p))
            .collect();
        self.invalidate(derived);
        Ok(())
    }

    /// Removes an empty staged directory.
    pub fn rmdir(&self, parent: u64, name: &OsStr) -> Result<(), FsError> {
        let staging = self.staging_area()?;
        let mut state = self.lock_state();
        let ino = Self::existing_child(&state, parent, name)?;
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let path = state.namespace.path(ino).ok_or(FsError::NotFound)?;
        // A read-only view refuses before anything else is looked at, as a read-only mount.
        Self::changeable(&state, &path)?;
        if !node.is_dir() {
            return Err(FsError::NotDir);
        }
        if !state.namespace.children(ino).is_empty() {
            return Err(FsError::NotEmpty);
        }
        let canonical = Self::canonical(&state, &path)?;
        if !state.staged.get(&canonical).is_some_and(|s| s.is_dir) {
            return self.remove_committed_dir(state, &path);
        }
        // And the directories on disk that held only it (not those staged themselves).
        staging.prune_until(&canonical, |dir| state.staged.contains_key(dir));
        state.staged.remove(&canonical);
        let edit = state.removal_edit(&canonical);
        drop(state.apply([edit]));
        Ok(())
    }
}

/// The directories holding the relative path `rel`, shortest first.
fn ancestors(rel: &str) -> impl Iterator<Item = String> + '_ {
    rel.match_indices('/').map(|(at, _)| rel[..at].to_string())
}
