//! Recovery at mount: committing what a killed daemon had accepted but not yet appended, and
//! setting aside the staged files that can never be committed as they are.

use std::collections::{BTreeMap, BTreeSet};

use crate::core::changes::commit::{item_key, stamp};
use crate::core::{split_canonical, DafFs, FsError};

impl DafFs {
    /// Commits the staged items that are complete: what a killed daemon had accepted (its
    /// `close` succeeded) but not yet appended to a ZIP source. Staged copies of an item that
    /// is already in the source with the same content (a daemon killed after an append's
    /// commit point, before the staged files were deleted) are dropped. Staged files that can
    /// never be committed (an empty descriptor left by a killed writer) are reported once by
    /// name and left alone: later `fsync`s do not try them again until they are written.
    /// Call once after mounting (and forking into the background: appends run on a thread of
    /// their own).
    pub fn recover(&self) {
        let Some(staging) = self.staging.as_ref() else {
            return;
        };
        let accepted = staging.accepted();
        // One try (and one log line) per item; the other files of an item set aside go too.
        let mut set_aside: BTreeMap<Option<String>, bool> = BTreeMap::new();
        for path in self.staged_item_files("") {
            let (key, found) = {
                let state = self.lock_state();
                let key = state
                    .locate(&path)
                    .and_then(|(root, _, id)| Some(item_key(&root.canonical, &id?)));
                let canonical = Self::canonical(&state, &path).unwrap_or_default();
                (key, self.found_at_mount.contains(&canonical))
            };
            if !found {
                // Staged by a writer since the mount (recovery runs beside the first writes).
                continue;
            }
            if let Some(aside) = set_aside.get(&key) {
                if *aside {
                    self.set_aside(&path);
                }
                continue;
            }
            let aside = if !key.as_ref().is_some_and(|k| accepted.contains(k)) {
                // Never accepted: its writer did not finish it (or was killed). Not ours to
                // complete: it stays staged, visible, to be finished or removed.
                log::warn!(
                    "staged {path} was left by a writer that never finished it: not committed; \
                     finish (rewrite) or remove it"
                );
                true
            } else {
                match self.try_commit(&path, None, false) {
                    Ok(()) => false,
                    Err(e @ (FsError::Invalid(_) | FsError::NotPermitted(_))) => {
                        log::warn!("staged {path} can never be committed as it is ({e}); left in place, remove or rewrite it");
                        true
                    }
                    Err(e) => {
                        log::warn!("staged {path} stays staged: {e}");
                        false
                    }
                }
            };
            if aside {
                self.set_aside(&path);
            }
            set_aside.insert(key, aside);
        }
        // Forget the items whose staged files are gone. One appended again just now keeps its
        // line until its files go (a daemon killed before that append finds it accepted); the
        // next mount forgets it.
        let on_disk: BTreeSet<String> = {
            let state = self.read_state();
            staging
                .list()
                .iter()
                .filter(|s| !s.is_dir)
                .filter_map(|s| {
                    let (root, rel) = split_canonical(&state.roots, &s.path)?;
                    Some(item_key(&root.canonical, &root.layout().item_of(rel)?))
                })
                .collect()
        };
        let done = accepted.difference(&on_disk).cloned().collect();
        if let Err(e) = staging.forget_accepted(&done) {
            log::warn!("rewriting the journal of accepted items: {e}");
        }
        // Made outside any request: the next request sends what the commits changed.
        self.share_invalidations();
    }

    /// Leaves staged file `path` out of later commits (`finalize`) until it changes.
    fn set_aside(&self, path: &str) {
        let mut state = self.lock_state();
        if let Ok(canonical) = Self::canonical(&state, path) {
            let seen = state.staged.get(&canonical).map(|s| stamp(&s.disk));
            if let Some(seen) = seen {
                state.stuck.insert(canonical, seen);
            }
        }
    }
}
