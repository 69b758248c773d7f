//! Renames and hard links of *staged* files and directories (a committed file is never renamed
//! here: a rename onto one replaces it by a staged file, judged as a rewrite of it when it is a
//! document).

use std::ffi::OsStr;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::stores::Bytes;

use crate::core::namespace::{Edit, NodeKind};
use crate::core::{Attr, DafFs, FsError, Staged, State};

impl DafFs {
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
        Self::both_changeable(&state, ino, new_parent, new_name)?;
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let NodeKind::Staged(disk) = node.kind() else {
            return Err(FsError::NotPermitted(format!(
                "{}: only files being written can be renamed",
                state.namespace.path(ino).unwrap_or_default()
            )));
        };
        let disk = disk.clone();
        let old_path = state.namespace.path(ino).ok_or(FsError::NotFound)?;
        let (new_mount, new_canonical) = Self::place_new(&state, new_parent, new_name, false)?;
        let existing = state
            .namespace
            .child(new_parent, new_name.to_str().unwrap_or_default())
            .and_then(Result::ok);
        let committed = existing.and_then(|t| match state.namespace.node(t).map(|n| n.kind()) {
            Some(NodeKind::File(blob)) => Some(blob.clone()),
            _ => None,
        });
        let verdict = if Self::is_document(&state, &new_mount) {
            let old_bytes = committed.as_ref().map(|b| b.bytes()).transpose()?;
            Self::document_verdict(
                &state,
                &new_mount,
                &fs::read(&disk)?,
                old_bytes.as_ref().map(Bytes::as_slice),
            )
        } else {
            None
        };
        match verdict {
            Some(Ok(())) => {
                // A group document that changes nothing (zarr re-saving a group, a writer's
                // consolidated metadata, which is derived here): accepted and dropped.
                log::info!("{new_mount}: a writer's copy that changes nothing dropped");
                self.drop_renamed(&mut state, &disk, &old_path, &new_mount)?;
                self.forget_dropped(&mut state, &new_mount);
                return Ok(());
            }
            Some(Err(refused)) => return Err(refused),
            None => {}
        }
        if let Some(target) = existing {
            match state.namespace.node(target).map(|n| n.kind()) {
                Some(NodeKind::Dir { .. }) => return Err(FsError::IsDir),
                Some(NodeKind::File(blob)) => {
                    // Rewriting a document with the same content (zarr re-saving a group's
                    // .zgroup) changes nothing: accept it and drop the staged copy.
                    if same_document(&fs::read(&disk)?, blob.bytes()?.as_slice()) {
                        self.drop_renamed(&mut state, &disk, &old_path, &new_mount)?;
                        self.forget_dropped(&mut state, &new_mount);
                        return Ok(());
                    }
                    Self::replaceable(&state, &new_mount)?;
                }
                _ => {}
            }
        }
        let new_disk = staging.prepare_parent(&new_canonical)?;
        // A staged file the rename replaces is kept aside until the rename is known to stand.
        let displaced = state
            .staged
            .get(&new_canonical)
            .filter(|s| !s.is_dir)
            .cloned();
        let backup = match displaced {
            Some(_) => {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                let backup = staging.root().join(format!(".daf-mount-undo.{n}"));
                fs::hard_link(&new_disk, &backup)?;
                Some(backup)
            }
            None => None,
        };
        if let Err(e) = fs::rename(&disk, &new_disk) {
            if let Some(backup) = &backup {
                let _ = fs::remove_file(backup);
            }
            return Err(e.into());
        }
        let old_canonical = Self::canonical(&state, &old_path)?;
        let moved = state.staged.remove(&old_canonical);
        state.staged.insert(
            new_canonical.clone(),
            Staged {
                disk: new_disk.clone(),
                is_dir: false,
                mtime: crate::core::state::now(),
            },
        );
        state.inodes.rename(&old_path, &new_mount);
        let edits = [
            state.removal_edit(&old_canonical),
            state.put_edit(&new_canonical),
        ];
        state = state.apply(edits);
        drop(state);
        let committed = self.try_commit(&new_mount, None, false);
        if committed.is_err() {
            // A rename that fails changes nothing: put the file back under its old name, and
            // the file it replaced back under the new one.
            let mut state = self.lock_state();
            if fs::rename(&new_disk, &disk).is_ok() {
                state.staged.remove(&new_canonical);
                if let Some(moved) = moved {
                    state.staged.insert(old_canonical, moved);
                }
                state.inodes.rename(&new_mount, &old_path);
                if let (Some(backup), Some(displaced)) = (&backup, displaced) {
                    if fs::rename(backup, &new_disk).is_ok() {
                        state.staged.insert(new_canonical, displaced);
                    }
                }
                drop(state.rebuilt());
            }
        }
        if let Some(backup) = &backup {
            let _ = fs::remove_file(backup);
        }
        committed
    }

    /// Drops the staged file `old_path` renamed onto `new_mount` (a copy that changes nothing):
    /// the kernel now holds the renamed file's inode at `new_mount`, so that inode number stands
    /// for what is there from now on (its cached attributes are the dropped file's).
    fn drop_renamed(
        &self,
        state: &mut State,
        disk: &Path,
        old_path: &str,
        new_mount: &str,
    ) -> Result<(), FsError> {
        let canonical = Self::canonical(state, old_path)?;
        let removal = self.drop_staged(state, &canonical, disk)?;
        state.inodes.rename(old_path, new_mount);
        let edits = [
            removal,
            Some(Edit::Renumber {
                path: new_mount.to_string(),
            }),
        ];
        state.apply(edits);
        Ok(())
    }

    /// Adds a second name for a staged file.
    pub fn link(&self, ino: u64, new_parent: u64, new_name: &OsStr) -> Result<Attr, FsError> {
        let staging = self.staging_area()?;
        let mut state = self.lock_state();
        Self::both_changeable(&state, ino, new_parent, new_name)?;
        let node = state.namespace.node(ino).ok_or(FsError::NotFound)?;
        let NodeKind::Staged(disk) = node.kind() else {
            return Err(FsError::NotPermitted(format!(
                "{}: only files being written can be linked",
                state.namespace.path(ino).unwrap_or_default()
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
        if Self::is_document(&state, &mount) {
            if let Some(Err(refused)) =
                Self::document_verdict(&state, &mount, &fs::read(&disk)?, None)
            {
                return Err(refused);
            }
        }
        let new_disk = staging.prepare_parent(&canonical)?;
        fs::hard_link(&disk, &new_disk)?;
        state = state.stage(&canonical, new_disk, false);
        let ino = state.inodes.ino(&mount);
        drop(state);
        self.try_commit(&mount, None, false)?;
        self.getattr(ino)
    }
}

/// Whether a rewrite carries the same content: equal bytes, or equal JSON (zarr pretty-prints).
fn same_document(new: &[u8], old: &[u8]) -> bool {
    new == old
        || matches!(
            (serde_json::from_slice::<serde_json::Value>(new), serde_json::from_slice::<serde_json::Value>(old)),
            (Ok(a), Ok(b)) if a == b
        )
}

impl DafFs {
    /// Refuses a rename or link whose old name (`ino`) or new one (`new_name` in `new_parent`)
    /// is inside a read-only view, before anything else is looked at.
    fn both_changeable(
        state: &State,
        ino: u64,
        new_parent: u64,
        new_name: &OsStr,
    ) -> Result<(), FsError> {
        let old = state.namespace.path(ino).unwrap_or_default();
        let new_dir = state.namespace.path(new_parent).unwrap_or_default();
        let new = crate::views::join(&new_dir, new_name.to_str().unwrap_or_default());
        Self::changeable(state, &old)?;
        Self::changeable(state, &new)
    }
}
