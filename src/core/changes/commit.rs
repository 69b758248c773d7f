//! Turning staged files into source content from the filesystem's side: when to try a commit,
//! what to lock, which staged files go, and which inodes the kernel must forget afterwards
//! ([`super::invalidations`]; `touch` and finalisation too). The commit itself is the staging
//! layer's.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::formats::model::PropertyId;
use crate::staging::commit::{commit, touch_item, CommitError, Outcome, StagedFile};
use crate::staging::StagingArea;
use crate::views::ViewRoot;

use crate::core::changes::appender::Job;
use crate::core::namespace::NodeKind;
use crate::core::{split_canonical, split_mount, DafFs, FsError, State};

impl DafFs {
    /// Sets the modification time of a committed item (and of its files in a directory source),
    /// the way `touch` does: `make` relies on it.
    pub(in crate::core) fn touch(&self, mount: &str, mtime: SystemTime) -> Result<(), FsError> {
        let mut state = self.lock_state();
        let Some((root, _, Some(id))) = state.locate(mount) else {
            return Ok(());
        };
        Self::replaceable(&state, mount)?;
        let before = item_paths(&state, root.dataset, &id);
        touch_item(&mut state.datasets[root.dataset], &id, mtime)
            .map_err(|e| FsError::NotPermitted(e.to_string()))?;
        let changed = item_mount_paths(&state, root.dataset, &id);
        state = state.committed(root.dataset, &id, &before, &[]);
        let inos: Vec<u64> = changed.iter().map(|p| state.inodes.ino(p)).collect();
        drop(state);
        self.invalidate(inos);
        Ok(())
    }

    /// Judges the staged file `ino` a close of handle `fh` ends: a document is dropped or
    /// refused, a file of an item commits the item if it is complete.
    pub(in crate::core) fn commit_staged(&self, ino: u64, fh: u64) -> Result<(), FsError> {
        let ns = self.namespace();
        let (path, disk) = match ns.node(ino) {
            Some(node) => match (node.kind(), ns.path(ino)) {
                (NodeKind::Staged(disk), Some(path)) => (path, disk.clone()),
                _ => return Ok(()),
            },
            None => return Ok(()),
        };
        if self.settle_document(&path, &disk)? {
            return Ok(());
        }
        self.try_commit(&path, Some(fh), false)
    }

    /// Commits the item `mount` belongs to if all its staged files are there, closed (but for
    /// the handle `closing`), and consistent.
    pub(in crate::core) fn try_commit(
        &self,
        mount: &str,
        closing: Option<u64>,
        finalize: bool,
    ) -> Result<(), FsError> {
        let Some(staging) = self.staging.as_ref() else {
            return Ok(());
        };
        let mut state = self.lock_state();
        let mut swap_began = None;
        let mut swap_phases = None;
        let mut finishing = None;
        let Some((root, _, Some(id))) = state.locate(mount) else {
            return Ok(());
        };
        let members = item_members(&state, &root, &id);
        if members.is_empty() {
            // Already committed (finalize walks every staged file of an item).
            return Ok(());
        }
        if self.busy(&mut state, &root, &members, closing) {
            return Ok(());
        }
        let files: Vec<StagedFile> = members.iter().map(|(_, f)| f.clone()).collect();
        let before = item_paths(&state, root.dataset, &id);
        let outcome = commit(
            &mut state.datasets[root.dataset],
            root.layout(),
            &id,
            &files,
            finalize,
        );
        let appending = match outcome {
            Ok(Outcome::Incomplete) => return Ok(()),
            Ok(Outcome::Writing(pending)) => {
                // The copy, its fsyncs and the record of the swap's steps are made without the
                // lock: readers go on meanwhile, and see the item as it was until the swap.
                let stamps: Vec<_> = members.iter().map(|(_, f)| stamp(&f.disk)).collect();
                drop(state);
                let written = pending.write(staging);
                #[cfg(test)]
                {
                    self.pause_commit();
                    crate::core::steps::reach_unlocked(
                        &self.state,
                        crate::core::steps::PAYLOADS_WRITTEN,
                    );
                }
                state = self.lock_state();
                swap_began = Some(std::time::Instant::now());
                // Rewritten, removed or committed by another close meanwhile (which may have
                // failed this one's copy: the files moved into the source by that commit's swap,
                // or unlinked): not these files (the written copies and the record go, out of the
                // lock); whoever changed them commits them. Answered once the swaps begun are
                // durable (another commit's of these very files among them).
                let now = item_members(&state, &root, &id);
                let same = now.len() == members.len()
                    && now
                        .iter()
                        .zip(&members)
                        .all(|((p, f), (q, g))| p == q && f.disk == g.disk)
                    && now.iter().map(|(_, f)| stamp(&f.disk)).eq(stamps);
                if !same || self.busy(&mut state, &root, &now, closing) {
                    drop(state);
                    drop(written);
                    log::debug!("{} changed while it was committed: left staged", id.path());
                    self.unfinished.wait();
                    return Ok(());
                }
                let written = match written {
                    Ok(written) => written,
                    Err(e) => {
                        drop(state);
                        return Err(self.commit_error(staging, &root.canonical, &id, &files, e));
                    }
                };
                // Until it is durable, an `fsync` waits for it (the swap is seen before).
                finishing = Some(self.unfinished.begin());
                let checked = std::time::Instant::now();
                let finish = pending.swap(&mut state.datasets[root.dataset], written);
                swap_phases = Some((checked, std::time::Instant::now()));
                let finish = finish
                    .map_err(|e| self.commit_error(staging, &root.canonical, &id, &files, e))?;
                finishing = finishing.map(|token| token.with(finish));
                None
            }
            Ok(Outcome::Unchanged) => {
                log::info!(
                    "staged copies of {} equal what {} has: dropped",
                    id.path(),
                    root.canonical
                );
                for (path, _) in &members {
                    state.staged.remove(path);
                }
                let files = members
                    .iter()
                    .map(|(path, f)| (path.as_str(), f.disk.as_path()));
                discard_staged(&state, staging, files);
                let edits: Vec<_> = members
                    .iter()
                    .map(|(path, _)| state.removal_edit(path))
                    .collect();
                drop(state.apply(edits));
                return Ok(());
            }
            Ok(Outcome::Appending(append)) => {
                // Accepted: if the daemon dies before the append, the next mount commits it again.
                if let Err(e) = staging.record_accepted(&item_key(&root.canonical, &id)) {
                    log::warn!("recording {} as accepted: {e}", id.path());
                }
                Some(append)
            }
            Err(e) => return Err(self.commit_error(staging, &root.canonical, &id, &files, e)),
        };
        log::info!("committed {} of {}", id.path(), root.canonical);
        let changed = item_mount_paths(&state, root.dataset, &id);
        // Their directories too, up to the root: in every view, a new item's names (a Zarr
        // array is a directory, a sparse one a group of them) appear there, and the kernel
        // keeps listings and attributes (`st_nlink` included) until told.
        let mut inos: Vec<u64> = changed
            .iter()
            .flat_map(|p| {
                std::iter::successors(Some(p.as_str()), |p| p.rsplit_once('/').map(|(d, _)| d))
            })
            .map(|p| state.inodes.ino(p))
            .collect();
        inos.sort_unstable();
        inos.dedup();
        self.invalidate(inos);
        for (path, _) in &members {
            state.staged.remove(path);
        }
        // Directories made for the item (zarr's mkdir of an array and of its chunk directory)
        // now hold committed files: stop staging those that hold no staged file (staged
        // directories inside do not count: they go too).
        let made_for_item: Vec<String> = state
            .staged
            .iter()
            .filter(|(path, s)| {
                let inside = format!("{path}/");
                s.is_dir
                    && !state
                        .staged
                        .iter()
                        .any(|(k, f)| !f.is_dir && k.starts_with(&inside))
            })
            .filter(|(path, _)| {
                let shown = split_canonical(&state.roots, path).map(|(r, rel)| r.mount_path(rel));
                shown.is_some_and(|dir| {
                    let inside = format!("{dir}/");
                    changed.iter().any(|p| p.starts_with(&inside))
                })
            })
            .map(|(path, _)| path.clone())
            .collect();
        let mut gone: Vec<String> = members.iter().map(|(path, _)| path.clone()).collect();
        for dir in &made_for_item {
            state.staged.remove(dir);
            gone.push(dir.clone());
        }
        // A ZIP source gets the item's entries later: its staged files stay until then.
        let discarded: Vec<(String, PathBuf)> = match appending {
            None => members
                .iter()
                .map(|(path, f)| (path.clone(), f.disk.clone()))
                .collect(),
            Some(_) => Vec::new(),
        };
        // The append is queued before the state is let go (the new tree is built with it
        // shared): a `fsync` that no longer finds the item's staged files in the state waits
        // for that append instead of answering before it (a daemon stopped then loses the
        // item). The append thread swaps it in only after this change (the writers' lock).
        let queued = match appending {
            Some(append) => {
                let staged = members
                    .into_iter()
                    .map(|(path, f)| (path, f.disk))
                    .collect();
                let job = Job {
                    dataset: root.dataset,
                    append,
                    staged,
                    key: item_key(&root.canonical, &id),
                };
                self.appender
                    .push(job, (&self.state, &self.writers), staging)
            }
            None => Ok(()),
        };
        // Their files and directories go with the state lock shared (readers go on; other
        // changes still wait), once the append is queued: an unlink or `rmdir` can wait for
        // the disk's journal.
        if !discarded.is_empty() || !made_for_item.is_empty() {
            let (shared, ()) = state.with_shared(crate::core::steps::STAGED_DROPPED, |state| {
                let files = discarded.iter().map(|(p, d)| (p.as_str(), d.as_path()));
                discard_staged(state, staging, files);
                for dir in &made_for_item {
                    staging.prune(dir);
                }
            });
            state = shared;
        }
        let edit = std::time::Instant::now();
        drop(state.committed(root.dataset, &id, &before, &gone));
        if let (Some(began), Some((checked, swapped))) = (swap_began, swap_phases) {
            let ms = |from: std::time::Instant, to: std::time::Instant| {
                to.saturating_duration_since(from).as_secs_f64() * 1e3
            };
            let (now, path) = (std::time::Instant::now(), id.path());
            log::debug!(target: crate::core::writer::LOCK_WAIT, "the swap of {path}: {:.2} ms from the lock to the new tree \
                (check {:.2}, renames and read-back {:.2}, staged files dropped with the lock shared {:.2}, \
                tree edit {:.2})",
                ms(began, now), ms(began, checked), ms(checked, swapped), ms(swapped, edit), ms(edit, now));
        }
        // The renames made durable and the record removed, out of the lock, before the close
        // that made the commit is answered.
        #[cfg(test)]
        if finishing.is_some() {
            crate::core::changes::appender::pause_once(&self.finish_pause);
            crate::core::steps::reach_unlocked(&self.state, crate::core::steps::SWAPPED);
        }
        let finished = finishing.map_or(Ok(()), |token| {
            token
                .complete()
                .map_err(|e| self.commit_error(staging, &root.canonical, &id, &files, e))
        });
        queued.and(finished)
    }

    /// Whether a writer other than the handle `closing` still has one of `members` open with
    /// unflushed writes.
    fn busy(
        &self,
        state: &mut State,
        root: &ViewRoot,
        members: &[(String, StagedFile)],
        closing: Option<u64>,
    ) -> bool {
        let writing: Vec<u64> = self
            .handles()
            .iter()
            .filter(|(fh, h)| h.writing() && Some(**fh) != closing)
            .map(|(_, h)| h.ino)
            .collect();
        members
            .iter()
            .any(|(_, f)| writing.contains(&state.inodes.ino(&root.mount_path(&f.rel))))
    }

    /// What a failed commit of item `id` of view root `canonical` answers (a refusal is noted).
    fn commit_error(
        &self,
        staging: &StagingArea,
        canonical: &str,
        id: &PropertyId,
        files: &[StagedFile],
        e: CommitError,
    ) -> FsError {
        match e {
            CommitError::Invalid(why) if staging_full(staging) => FsError::NoSpace(format!(
                "{}: {why} (the staging file system is full: a write was cut short)",
                id.path()
            )),
            CommitError::Invalid(why) => {
                self.note_refusal(canonical, id, files);
                FsError::Invalid(format!("{}: {why}", id.path()))
            }
            CommitError::Refused(why) => {
                self.note_refusal(canonical, id, files);
                FsError::NotPermitted(why)
            }
            CommitError::Store(e) => FsError::Content(e),
        }
    }

    /// The mount paths of the staged files under `mount` (the whole mount for "") that belong
    /// to an item (but for leftovers found stuck at recovery and not written since).
    pub(in crate::core) fn staged_item_files(&self, mount: &str) -> Vec<String> {
        let state = self.read_state();
        state
            .staged
            .iter()
            .filter(|(_, s)| !s.is_dir)
            .filter(|(path, s)| state.stuck.get(*path) != Some(&stamp(&s.disk)))
            .filter_map(|(path, _)| {
                let (root, rel) = split_canonical(&state.roots, path)?;
                let at = root.mount_path(rel);
                let inside =
                    mount.is_empty() || at == mount || at.starts_with(&format!("{mount}/"));
                (inside && root.layout().item_of(rel).is_some()).then_some(at)
            })
            .collect()
    }

    /// Commits every staged item under `mount` (the whole mount for "") that is only waiting for
    /// what a writer may legitimately leave out: Zarr chunks that are all fill value, or the
    /// `nzval` of an all-true Bool property. Called by `fsync` on a directory and at unmount;
    /// returns once every append queued for a ZIP source is done.
    ///
    /// It fails only for items under `mount` that could not be made durable: an I/O error
    /// (`ENOSPC` writing into the source, a failed append), or, for the directory of an item's
    /// own Zarr node, that item being refused. An item that is invalid or refused never makes
    /// the `fsync` of another item's directory, a parent directory or the root fail (it is
    /// logged), and leftovers found at recovery are not tried again.
    pub fn finalize(&self, mount: &str) -> Result<(), FsError> {
        let own_item = {
            let state = self.read_state();
            split_mount(&state.roots, mount)
                .and_then(|(root, rel)| Some((root.dataset, root.layout().node_item(rel)?)))
        };
        let mut first_error = None;
        // One try (and at most one log line) per item, not per staged file of it.
        let mut tried = BTreeSet::new();
        for path in self.staged_item_files(mount) {
            let item = {
                let state = self.read_state();
                state
                    .locate(&path)
                    .and_then(|(root, _, id)| Some((root.dataset, id?)))
            };
            if !tried.insert(item.as_ref().map(|(d, id)| (*d, id.path()))) {
                continue;
            }
            if let Err(e) = self.try_commit(&path, None, true) {
                let refused = matches!(e, FsError::Invalid(_) | FsError::NotPermitted(_));
                if refused && item != own_item {
                    // Refused before as it is now (at its close): said once, not again here.
                    if self.refused_before(&path) {
                        log::debug!("{path} stays staged: {e}");
                    } else {
                        log::warn!("{path} stays staged: {e}");
                    }
                    continue;
                }
                // The first error is the caller's to report (one line where it is answered).
                if first_error.is_some() {
                    log::warn!("finalizing {path}: {e}");
                }
                first_error.get_or_insert(e);
            }
        }
        // Directory commits others made meanwhile are durable, and what these commits and
        // earlier ones queued for ZIP sources is in the archives now.
        self.unfinished.wait();
        let roots = self.read_state().roots.clone();
        let appended = self.appender.wait(|dataset, id| {
            mount.is_empty()
                || roots.iter().filter(|r| r.dataset == dataset).any(|root| {
                    let at = root.mount_path(&id.path());
                    at == mount || at.starts_with(&format!("{mount}/"))
                })
        });
        first_error.map_or(appended, Err)
    }

    /// Records that item `id` of view root `canonical` was refused with its staged files as
    /// they are now: the refusal is reported once (by whoever answers it), and a later try of
    /// the same files (`finalize`) does not say it again.
    fn note_refusal(&self, canonical: &str, id: &PropertyId, files: &[StagedFile]) {
        let stamps: Vec<_> = files.iter().map(|f| stamp(&f.disk)).collect();
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        let key = item_key(canonical, id);
        let seen = refused.get(&key).filter(|(before, _)| *before == stamps);
        let count = seen.map_or(1, |(_, n)| n + 1);
        refused.insert(key, (stamps, count));
    }

    /// Whether the item staged file `path` (a mount path) belongs to was refused more than once
    /// with the same files, the last try included.
    fn refused_before(&self, path: &str) -> bool {
        let key = {
            let state = self.read_state();
            state
                .locate(path)
                .and_then(|(root, _, id)| Some(item_key(&root.canonical, &id?)))
        };
        let refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        key.and_then(|k| refused.get(&k).map(|(_, n)| *n > 1))
            .unwrap_or(false)
    }

    /// Tests only: pauses a commit where [`DafFs::commit_pause`] says.
    #[cfg(test)]
    fn pause_commit(&self) {
        let pause = self
            .commit_pause
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some((paused, resume)) = pause {
            let _ = paused.send(());
            let _ = resume.recv_timeout(std::time::Duration::from_secs(60));
        }
    }

    /// The mount path of inode `ino`.
    pub fn path_of(&self, ino: u64) -> Option<String> {
        self.namespace().path(ino)
    }
}

/// The staged files of item `id` of view root `root`: (`--view both` path, file), in order.
fn item_members(state: &State, root: &ViewRoot, id: &PropertyId) -> Vec<(String, StagedFile)> {
    let prefix = format!("{}/", root.canonical);
    state
        .staged
        .iter()
        .filter(|(_, s)| !s.is_dir)
        .filter_map(|(path, s)| {
            let rel = path.strip_prefix(&prefix)?;
            (root.layout().item_of(rel).as_ref() == Some(id)).then(|| {
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
        .collect()
}

/// How the journal of accepted items names item `id` of the view root `canonical`.
pub(in crate::core) fn item_key(canonical: &str, id: &PropertyId) -> String {
    format!("{canonical}\t{}", id.path())
}

/// Whether the file system of the staging area has no free blocks left.
fn staging_full(staging: &StagingArea) -> bool {
    let mut dir = staging.root();
    while !dir.exists() {
        match dir.parent() {
            Some(parent) => dir = parent,
            None => return false,
        }
    }
    nix::sys::statvfs::statvfs(dir).is_ok_and(|s| s.blocks_available() == 0)
}

/// What identifies the content of a staged file without reading it: size and modification time.
pub(in crate::core) fn stamp(disk: &Path) -> Option<(u64, SystemTime)> {
    let meta = fs::metadata(disk).ok()?;
    Some((meta.len(), meta.modified().ok()?))
}

/// Deletes staged files (`--view both` path, disk path) whose item is in its source now, and the
/// on-disk directories made just to hold them.
pub(in crate::core) fn discard_staged<'a>(
    state: &State,
    staging: &StagingArea,
    files: impl Iterator<Item = (&'a str, &'a Path)>,
) {
    for (path, disk) in files {
        let _ = fs::remove_file(disk);
        if let Some((parent, _)) = path.rsplit_once('/') {
            if !state.staged.contains_key(parent) {
                staging.prune(parent);
            }
        }
    }
}

/// The mount paths of the files of every view of data set `dataset` that are derived from every
/// item (`Layout::derived_files`, and with dimension names every array document:
/// `views::named_documents`), and the data set's published files: they change whenever an item
/// does.
pub(in crate::core) fn derived_mount_paths(state: &State, dataset: usize) -> Vec<String> {
    let ds = &state.datasets[dataset].dataset;
    state
        .roots
        .iter()
        .filter(|root| root.dataset == dataset)
        .flat_map(|root| {
            let files = root.layout().derived_files();
            let derived = files.iter().map(|f| root.mount_path(f));
            derived
                .chain(crate::views::named_documents(ds, root))
                .collect::<Vec<_>>()
        })
        .chain(state.published_paths(dataset))
        .collect()
}

/// Whether the committed file at mount path `path` is made from every item of its data set (a
/// layout's derived file, an array document with dimension names, a published file): its content
/// changes in place (the same inode) with every commit.
pub(in crate::core) fn changes_in_place(state: &State, path: &str) -> bool {
    let derived = split_mount(&state.roots, path).is_some_and(|(root, rel)| {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        root.layout().derived_files().contains(&rel)
            || (root.dimension_names && matches!(name, ".zattrs" | "zarr.json"))
    });
    derived || (0..state.datasets.len()).any(|d| state.published_paths(d).iter().any(|p| p == path))
}

/// The mount paths of the entries of item `id` of data set `dataset`, in every view shown.
pub(in crate::core) fn item_paths(state: &State, dataset: usize, id: &PropertyId) -> Vec<String> {
    let Some(ds) = state.datasets.get(dataset) else {
        return Vec::new();
    };
    state
        .roots
        .iter()
        .filter(|root| root.dataset == dataset)
        .flat_map(|root| {
            root.layout()
                .item_entries(&ds.dataset, id)
                .into_iter()
                .map(|e| root.mount_path(&e.path))
        })
        .collect()
}

/// The mount paths of every file of item `id` of data set `dataset`, in every view shown, and
/// of the files derived from every item ([`derived_mount_paths`]), which change with it.
pub(in crate::core) fn item_mount_paths(
    state: &State,
    dataset: usize,
    id: &PropertyId,
) -> Vec<String> {
    let mut paths = item_paths(state, dataset, id);
    paths.extend(derived_mount_paths(state, dataset));
    paths
}
