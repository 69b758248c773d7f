//! Refusing, before anything is staged, what could never be committed: files at names no item
//! has (checked at create, open for writing, rename and link), and group documents or attributes
//! whose content carries something Daf does not hold (checked at their close or rename; those
//! that change nothing are dropped instead).

use std::fs;
use std::path::Path;

use crate::views::layout::refusal;

use crate::core::{split_mount, DafFs, FsError, State};

impl DafFs {
    /// Refuses a file at `mount` that could never be committed (see [`refusal`]).
    pub(in crate::core) fn committable(state: &State, mount: &str) -> Result<(), FsError> {
        match split_mount(&state.roots, mount).and_then(|(root, rel)| refusal(root.layout(), rel)) {
            Some(why) => Err(FsError::NotPermitted(why)),
            None => Ok(()),
        }
    }

    /// Whether `mount` is a Zarr group document outside items, or attributes.
    pub(in crate::core) fn is_document(state: &State, mount: &str) -> bool {
        split_mount(&state.roots, mount).is_some_and(|(root, rel)| root.layout().is_document(rel))
    }

    /// A staged document at `mount` whose content carries nothing for Daf (a group document,
    /// or attributes): `Some(Ok)` if it is to be dropped as a no-op, `Some(Err)` if it is
    /// refused; `None` for every other file. `old` is the committed document at that place.
    pub(in crate::core) fn document_verdict(
        state: &State,
        mount: &str,
        new: &[u8],
        old: Option<&[u8]>,
    ) -> Option<Result<(), FsError>> {
        let (root, rel) = split_mount(&state.roots, mount)?;
        if !Self::is_document(state, mount) {
            return None;
        }
        let verdict = root
            .layout()
            .group_document_noop(rel, new, old)
            .map_err(FsError::NotPermitted);
        match verdict {
            // Attributes of an item that carry nothing stay with the item's files.
            Ok(()) if !root.layout().is_group_document(rel) => None,
            verdict => Some(verdict),
        }
    }

    /// A staged group document or attributes written in place: dropped if it changes nothing,
    /// else dropped and refused (it could never be committed). `true` if it was dropped.
    pub(in crate::core) fn settle_document(
        &self,
        mount: &str,
        disk: &Path,
    ) -> Result<bool, FsError> {
        let mut state = self.lock_state();
        // Dropped or committed by another close since its closer looked (no file at `disk`).
        let staged_there = Self::canonical(&state, mount)
            .is_ok_and(|c| state.staged.get(&c).is_some_and(|s| s.disk == disk));
        if !staged_there || !Self::is_document(&state, mount) {
            return Ok(false);
        }
        // The committed group documents are Zarr's constants, which are no-ops anyway.
        let Some(verdict) = Self::document_verdict(&state, mount, &fs::read(disk)?, None) else {
            return Ok(false);
        };
        let canonical = Self::canonical(&state, mount)?;
        let edit = self.drop_staged(&mut state, &canonical, disk)?;
        let mut state = state.apply([edit]);
        self.forget_dropped(&mut state, mount);
        drop(state);
        match verdict {
            Ok(()) => {
                log::info!("{mount}: a rewrite that changes nothing dropped");
                Ok(true)
            }
            Err(refused) => Err(refused),
        }
    }
}
