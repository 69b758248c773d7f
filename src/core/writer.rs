//! The lock a change of the state holds ([`Writer`]): other writers are kept out for its whole
//! life, readers only while it holds the state lock exclusively (not while a new tree or a
//! commit's edits are worked out); slow work of a writer runs at the lowest priority
//! ([`lowered`]); long waits for the lock are logged.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockWriteGuard};

use crate::formats::model::PropertyId;

use super::namespace::{Edit, InodeTable, Namespace};
#[cfg(test)]
use super::state::EDITS_OFF;
use super::state::{now, Staged, State};

/// The target of the state lock's long waits and of the directory swaps' phases.
pub(super) const LOCK_WAIT: &str = "daf_mount::lock_wait";

/// Whether waits for the state lock are logged (`RUST_LOG=daf_mount::lock_wait=debug`): else
/// no read of the state times its wait.
pub(super) fn waits_logged() -> bool {
    log::log_enabled!(target: LOCK_WAIT, log::Level::Debug)
}

/// Logs a wait for the state lock (asked at `asked`) over 0.5 ms, at debug level with target
/// [`LOCK_WAIT`]: what a writer makes readers wait.
pub(super) fn log_wait(asked: std::time::Instant) {
    let waited = asked.elapsed();
    if waited > std::time::Duration::from_micros(500) {
        let ms = waited.as_secs_f64() * 1e3;
        log::debug!(target: LOCK_WAIT, "waited {ms:.2} ms for the state lock");
    }
}

/// The state locked for a change. Other writers are kept out (the writers' lock) for as long as it
/// lives; the state lock, which every read takes shared, is held exclusively except while a new
/// tree is built ([`Writer::rebuilt`]): readers go on with the current tree meanwhile. Trees it
/// replaced are freed after both locks are released.
pub(super) struct Writer<'a> {
    guard: RwLockWriteGuard<'a, State>,
    lock: &'a RwLock<State>,
    _writers: MutexGuard<'a, ()>,
    retired: Retired,
}

/// Trees (and tables) replaced under the lock, dropped after it (a large tree takes a while to
/// free), then their pages are given back.
#[derive(Default)]
struct Retired {
    trees: Vec<Arc<Namespace>>,
    tables: Vec<InodeTable>,
}

impl Drop for Retired {
    fn drop(&mut self) {
        if !self.trees.is_empty() {
            self.trees.clear();
            self.tables.clear();
            crate::sys::release_free_memory();
        }
    }
}

impl<'a> Writer<'a> {
    /// Waits for the other writers, then for the readers.
    pub(super) fn new(lock: &'a RwLock<State>, writers: &'a Mutex<()>) -> Writer<'a> {
        let writers = writers.lock().unwrap_or_else(|p| p.into_inner());
        Writer {
            guard: lock.write().unwrap_or_else(|p| p.into_inner()),
            lock,
            _writers: writers,
            retired: Retired::default(),
        }
    }

    /// Builds the tree of the state anew under the state lock taken shared (readers go on, other
    /// writers still wait), then takes the lock exclusively to swap it in.
    pub(super) fn rebuilt(self) -> Writer<'a> {
        let (mut writer, (tree, inodes)) = self.with_shared(super::steps::TREE_BUILT, |state| {
            let mut inodes = state.inodes.clone();
            let tree = state.build(&mut inodes);
            #[cfg(test)]
            crate::core::changes::appender::pause_once(&state.build_pause);
            (tree, inodes)
        });
        writer.swap(tree, inodes);
        writer
    }

    /// Takes `tree` and `inodes` as the state's; the ones they replace are freed after the locks.
    fn swap(&mut self, tree: Arc<Namespace>, inodes: InodeTable) {
        let state = &mut *self.guard;
        let replaced = std::mem::replace(&mut state.namespace, tree);
        self.retired.trees.push(replaced);
        let replaced = std::mem::replace(&mut state.inodes, inodes);
        self.retired.tables.push(replaced);
    }

    /// Runs `f` with the state lock taken shared (readers go on, other writers still wait), then
    /// takes it exclusively again: for file system calls that change nothing readers see.
    /// (`_step`: what it does then, for tests: [`super::steps`].)
    pub(super) fn with_shared<R>(
        self,
        _step: &'static str,
        f: impl FnOnce(&State) -> R,
    ) -> (Writer<'a>, R) {
        let Writer {
            guard,
            lock,
            _writers,
            retired,
        } = self;
        drop(guard);
        let shared = lock.read().unwrap_or_else(|p| p.into_inner());
        #[cfg(test)]
        shared.steps.reach(_step);
        let result = f(&shared);
        drop(shared);
        let writer = Writer {
            guard: lock.write().unwrap_or_else(|p| p.into_inner()),
            lock,
            _writers,
            retired,
        };
        (writer, result)
    }

    /// Shows the change of item `id` of data set `dataset` (the model has it already;
    /// `before`: the mount paths of its entries before, `gone`: the staged paths the change
    /// took out of the state) by editing the tree when the change is local
    /// ([`State::commit_edits`], worked out under the state lock taken shared), else builds a
    /// new tree as [`Writer::rebuilt`] does.
    pub(super) fn committed(
        self,
        dataset: usize,
        id: &PropertyId,
        before: &[String],
        gone: &[String],
    ) -> Writer<'a> {
        #[cfg(test)]
        if EDITS_OFF.with(std::cell::Cell::get) {
            return self.rebuilt();
        }
        let (writer, edits) = self.with_shared(super::steps::EDITS_WORKED_OUT, |state| {
            // Rendering the views of a large data set takes a while: at a lowered priority, so
            // that readers on a busy machine are not made to wait for a CPU.
            lowered("daf-commit", || {
                let edits = state.commit_edits(dataset, id, before, gone);
                #[cfg(test)]
                crate::core::changes::appender::pause_once(&state.build_pause);
                edits
            })
            .ok()
            .flatten()
        });
        match edits {
            Some(edits) => writer.apply(edits.into_iter().map(Some)),
            None => writer.rebuilt(),
        }
    }

    /// Records `canonical` (a `--view both` path) as staged now at `disk` (a directory if
    /// `is_dir`) and shows it in the tree.
    pub(super) fn stage(mut self, canonical: &str, disk: PathBuf, is_dir: bool) -> Writer<'a> {
        let staged = Staged {
            disk,
            is_dir,
            mtime: now(),
        };
        self.staged.insert(canonical.to_string(), staged);
        let edit = self.put_edit(canonical);
        self.apply([edit])
    }

    /// [`State::apply`], building a new tree as [`Writer::rebuilt`] does when an edit cannot. The
    /// edited tree is made under the state lock taken shared (readers go on: the copy of a large
    /// directory's children takes milliseconds), then swapped in.
    pub(super) fn apply(self, edits: impl IntoIterator<Item = Option<Edit>>) -> Writer<'a> {
        let edits: Vec<Edit> = edits.into_iter().flatten().collect();
        #[cfg(test)]
        if EDITS_OFF.with(std::cell::Cell::get) {
            return self.rebuilt();
        }
        let (mut writer, edited) = self.with_shared(super::steps::TREE_EDITED, |state| {
            let mut inodes = state.inodes.clone();
            let tree = state.namespace.edited(&edits, &mut inodes)?;
            #[cfg(test)]
            crate::core::changes::appender::pause_once(&state.edit_pause);
            Some((tree, inodes))
        });
        let Some((tree, inodes)) = edited else {
            return writer.rebuilt();
        };
        writer.swap(tree, inodes);
        writer
    }
}

impl std::ops::Deref for Writer<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.guard
    }
}

impl std::ops::DerefMut for Writer<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

/// Runs `f` with the state lock taken shared and other writers kept out (the writers' lock): for
/// file system calls of a change that change nothing readers see. (A change waiting for the
/// state lock while it is held shared would make every reader wait behind it.)
pub(super) fn shared<R>(
    lock: &RwLock<State>,
    writers: &Mutex<()>,
    f: impl FnOnce(&State) -> R,
) -> R {
    let _writers = writers.lock().unwrap_or_else(|p| p.into_inner());
    f(&lock.read().unwrap_or_else(|p| p.into_inner()))
}

/// How far an operation that reads the tree without a [`Writer`] may trust it (see
/// [`settled`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Trust {
    /// The tree as it is: a change may be between taking an item's staged files out of the
    /// state (its commit renamed them into a directory source, or the model serves the item now)
    /// and swapping in the tree that shows the item committed. An operation that meets a staged
    /// file of such an item answers [`Try::Again`].
    AsItIs,
    /// No change is running (the writers' lock is held): the state and the tree agree, and
    /// neither changes until the operation is over. The operation must not take a [`Writer`].
    Quiet,
}

/// What one try of an operation found.
pub(super) enum Try<T> {
    Done(T),
    /// A staged file a running change is taking out: try again once that change is over.
    Again,
}

/// Runs `op` on the tree as it is, and, when it met a staged file that a running change is
/// taking out ([`Try::Again`]), once more with no change running (the writers' lock held, so
/// the state and the tree agree): at most twice, never by recursion. A change holds the lock
/// only for its bounded in-lock part (not for a commit's payload copy or an append), so the
/// second try waits at most that long.
pub(super) fn settled<T>(
    writers: &Mutex<()>,
    op: impl Fn(Trust) -> Result<Try<T>, super::FsError>,
) -> Result<T, super::FsError> {
    if let Try::Done(done) = op(Trust::AsItIs)? {
        return Ok(done);
    }
    let _quiet = writers.lock().unwrap_or_else(|p| p.into_inner());
    match op(Trust::Quiet)? {
        Try::Done(done) => Ok(done),
        Try::Again => Err(super::FsError::Internal(
            "a staged file disagrees with the state while no change runs".into(),
        )),
    }
}

/// Runs `work` on a thread of its own (named `name`) whose CPU and I/O priority is lowered
/// first ([`crate::sys::lower_thread_priority`]), and waits for it: slow work of a writer that
/// readers should not wait for. If no thread can be started, runs it on this one, at its
/// priority. `Err` if it panicked.
pub(super) fn lowered<R: Send>(name: &str, work: impl FnOnce() -> R + Send) -> Result<R, ()> {
    let mut work = Some(work);
    let outcome = std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(scope, || {
                let lowered = crate::sys::lower_thread_priority();
                if lowered
                    != (crate::sys::Lowered {
                        cpu: true,
                        io: true,
                    })
                {
                    log::debug!("{name}: its priority could only be lowered as {lowered:?}");
                }
                work.take().map(|work| work())
            });
        match spawned {
            Ok(thread) => Some(thread.join().map_err(|_| ())),
            Err(e) => {
                log::warn!(
                    "cannot start a low-priority thread ({name}: {e}): working at normal priority"
                );
                None
            }
        }
    });
    match outcome {
        Some(Ok(Some(result))) => Ok(result),
        Some(Ok(None)) | Some(Err(())) => Err(()),
        None => work.take().map(|work| work()).ok_or(()),
    }
}
