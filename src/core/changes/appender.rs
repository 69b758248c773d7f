//! Appends to ZIP sources, after the commit that validated the item has returned.
//!
//! A commit into a ZIP source puts the item into the data set at once (both views show it,
//! served from its staged files) and queues a [`Job`] here. One thread per mount, started with the
//! first job (after the daemon forked), runs the jobs in order, so appends to an archive never
//! overlap: it appends the entries ([`PendingAppend::write`]: copy, checksum, `fsync`, then the
//! central directory), swaps the item over to the archive's bytes, and deletes the staged files.
//! The append itself (the copy, checksums and writeback, seconds for a large property) runs on
//! a short-lived thread of its own at the lowest CPU and I/O priority ([`write_yielding`]), so
//! that it yields to the threads serving reads; the swap, which takes the state lock every read
//! needs, runs back on the queue's thread at normal priority (a low-priority thread holding that
//! lock could be kept off the CPU by busy readers, and keep them all waiting).
//! Until then the staged files stay on disk, so a daemon killed meanwhile loses nothing: they
//! are shown (and committed) again at the next mount. [`Appender::wait`] is the durability
//! point: `fsync`, `fsyncdir` and unmount wait for the queue. A failed append (a full disk) is
//! kept with its errno and retried by each later wait that covers its item, which fails until
//! the append succeeds; failed appends of other items do not make it fail.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};

use crate::formats::model::PropertyId;
use crate::staging::commit::{CommitError, PendingAppend};
use crate::staging::StagingArea;
use crate::stores::zip::append::ArchiveTail;
use crate::stores::{StoreError, StoreIndex};

use crate::core::writer::{lowered, Writer};
use crate::core::{FsError, State};
use crate::stores::lock;

/// Tests only: where a commit or an append pauses (it says so on the sender, then waits for
/// the receiver).
#[cfg(test)]
pub(in crate::core) type Pause =
    Mutex<Option<(std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>)>>;

/// One queued append.
#[derive(Debug)]
pub(in crate::core) struct Job {
    /// Index of the data set in the state.
    pub dataset: usize,
    pub append: PendingAppend,
    /// The item's staged files: `(--view both path, disk path)`, deleted once appended.
    pub staged: Vec<(String, PathBuf)>,
    /// The item's line in the journal of accepted items, forgotten once appended.
    pub key: String,
}

/// Why an append failed: the OS error number when it was an I/O error (`ENOSPC` stays
/// `ENOSPC`), and the message.
#[derive(Debug)]
struct Failure {
    errno: Option<i32>,
    message: String,
}

#[derive(Debug, Default)]
struct Progress {
    queued: usize,
    /// Appends that failed and are still to be done (their items are served from their staged
    /// files): kept, and retried by the next [`Appender::wait`] that covers them, so every
    /// `fsync` of such an item fails until its append succeeds.
    failed: Vec<(Job, Failure)>,
}

/// The queue of appends of one mount.
#[derive(Debug, Default)]
pub(in crate::core) struct Appender {
    queue: OnceLock<Option<Mutex<Sender<Job>>>>,
    progress: Arc<(Mutex<Progress>, Condvar)>,
    /// Tests only: where the next append pauses, written but not swapped in (it says so on the
    /// sender, then waits for the receiver).
    #[cfg(test)]
    pub(in crate::core) pause: Arc<Pause>,
}

impl Appender {
    /// Queues `job`; the thread that runs it gets the state and the staging area.
    pub(in crate::core) fn push(
        &self,
        job: Job,
        (state, writers): (&Arc<RwLock<State>>, &Arc<Mutex<()>>),
        staging: &StagingArea,
    ) -> Result<(), FsError> {
        let queue = self.queue.get_or_init(|| {
            let (queue, jobs) = channel::<Job>();
            let (state, writers, staging, progress) = (
                state.clone(),
                writers.clone(),
                staging.clone(),
                self.progress.clone(),
            );
            #[cfg(test)]
            let pause = self.pause.clone();
            let spawned = std::thread::Builder::new()
                .name("zip-append".into())
                .spawn(move || {
                    // What the last append learnt of the archive (it is not parsed again).
                    let mut learnt = None;
                    for job in jobs {
                        #[cfg(test)]
                        let before_swap = || {
                            pause_once(&pause);
                            crate::core::steps::reach_unlocked(&state, crate::core::steps::APPEND_WRITTEN);
                        };
                        #[cfg(not(test))]
                        let before_swap = || {};
                        let result = run(&job, (&state, &writers), &staging, &before_swap, &mut learnt);
                        let (progress, done) = &*progress;
                        let mut progress = lock(progress);
                        if let Err(e) = result {
                            log::error!(
                                "appending {} to {}: {e}; its staged files stay (retried at the next fsync, or at the next mount)",
                                job.append.id.path(),
                                job.append.archive.display()
                            );
                            let errno = match &e {
                                CommitError::Store(StoreError::Io { source, .. }) => {
                                    source.raw_os_error()
                                }
                                _ => None,
                            };
                            let message = e.to_string();
                            progress.failed.push((job, Failure { errno, message }));
                        }
                        progress.queued -= 1;
                        done.notify_all();
                    }
                });
            match spawned {
                Ok(_) => Some(Mutex::new(queue)),
                Err(e) => {
                    log::error!("cannot start the ZIP append thread: {e}");
                    None
                }
            }
        });
        let Some(queue) = queue else {
            return Err(FsError::Internal("no ZIP append thread".into()));
        };
        lock(&self.progress.0).queued += 1;
        if lock(queue).send(job).is_err() {
            lock(&self.progress.0).queued -= 1;
            return Err(FsError::Internal("the ZIP append thread is gone".into()));
        }
        Ok(())
    }

    /// Waits until every queued append is done. Failed appends that `covers` selects (by data
    /// set index and item) are retried first; if one of them fails again, so does the wait,
    /// with its error. Failed appends of other items do not make it fail.
    pub(in crate::core) fn wait(
        &self,
        covers: impl Fn(usize, &PropertyId) -> bool,
    ) -> Result<(), FsError> {
        let (progress, done) = &*self.progress;
        let mut progress = lock(progress);
        let (retry, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut progress.failed)
            .into_iter()
            .partition(|(job, _)| covers(job.dataset, &job.append.id));
        progress.failed = keep;
        if let Some(Some(queue)) = self.queue.get() {
            let queue = lock(queue);
            for (job, failure) in retry {
                progress.queued += 1;
                if let Err(unsent) = queue.send(job) {
                    progress.queued -= 1;
                    progress.failed.push((unsent.0, failure));
                }
            }
        }
        while progress.queued > 0 {
            progress = done.wait(progress).unwrap_or_else(|p| p.into_inner());
        }
        let failed = progress
            .failed
            .iter()
            .find(|(job, _)| covers(job.dataset, &job.append.id));
        match failed {
            None => Ok(()),
            Some((
                job,
                Failure {
                    errno: Some(errno), ..
                },
            )) => Err(FsError::Content(StoreError::io(
                &job.append.archive,
                std::io::Error::from_raw_os_error(*errno),
            ))),
            Some((_, Failure { message, .. })) => {
                Err(FsError::Internal(format!("a ZIP append failed: {message}")))
            }
        }
    }
}

/// Tests only: pauses an append where [`Appender::pause`] says.
#[cfg(test)]
pub(in crate::core) fn pause_once(pause: &Pause) {
    if let Some((paused, resume)) = lock(pause).take() {
        let _ = paused.send(());
        let _ = resume.recv_timeout(std::time::Duration::from_secs(60));
    }
}

/// Appends `job`'s entries (without the state lock: making their bytes, the copy, checksums and
/// `fsync`s), then, under it, swaps the item over to them; last, under the lock taken shared
/// (readers go on), deletes its staged files, and drops the item as it was served from them.
fn run(
    job: &Job,
    (state, writers): (&RwLock<State>, &Mutex<()>),
    staging: &StagingArea,
    before_swap: &dyn Fn(),
    learnt: &mut Option<ArchiveTail>,
) -> Result<(), CommitError> {
    let written = write_yielding(&job.append, learnt)?;
    before_swap();
    let (served_before, held) = {
        let mut writer = Writer::new(state, writers);
        let locked = std::time::Instant::now();
        let before = crate::core::changes::commit::item_paths(&writer, job.dataset, &job.append.id);
        let ds = writer
            .datasets
            .get_mut(job.dataset)
            .ok_or_else(|| CommitError::Invalid("data set gone".into()))?;
        let served_before = job.append.serve_from(ds, &written)?;
        drop(writer.committed(job.dataset, &job.append.id, &before, &[]));
        (served_before, locked.elapsed())
    };
    log::info!(
        "appended {} to {} (the swap held the state lock {held:?})",
        job.append.id.path(),
        job.append.archive.display()
    );
    drop(served_before);
    // With the writers' lock too: a change waiting for the state lock meanwhile would make every
    // reader wait behind it.
    crate::core::writer::shared(state, writers, |state| {
        #[cfg(test)]
        state.steps.reach(crate::core::steps::APPEND_DROPPING);
        // Staged anew meanwhile (never, as a ZIP source's items cannot be rewritten): kept.
        let files = job
            .staged
            .iter()
            .filter(|(p, _)| !state.staged.contains_key(p))
            .map(|(p, disk)| (p.as_str(), disk.as_path()));
        crate::core::changes::commit::discard_staged(state, staging, files);
    });
    // In the archive now: the next mount has nothing to commit again for it (a daemon killed
    // before this finds it accepted, and its staged files gone: the recovery forgets it then).
    if let Err(e) = staging.forget_accepted(&std::iter::once(job.key.clone()).collect()) {
        log::warn!("rewriting the journal of accepted items: {e}");
    }
    Ok(())
}

/// Runs `append`'s write (the copy, checksums and `fsync`s) at a lowered priority
/// ([`lowered`]).
fn write_yielding(
    append: &PendingAppend,
    learnt: &mut Option<ArchiveTail>,
) -> Result<StoreIndex, CommitError> {
    let mut taken = learnt.take();
    let (written, taken) = lowered("zip-append-io", || {
        let written = append.write(&mut taken);
        (written, taken)
    })
    .map_err(|_| CommitError::Invalid("the ZIP append panicked".into()))?;
    *learnt = taken;
    written
}
