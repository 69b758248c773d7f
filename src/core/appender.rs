//! Appends to ZIP sources, after the commit that validated the item has returned.
//!
//! A commit into a ZIP source puts the item into the data set at once (both views show it,
//! served from its staged files) and queues a [`Job`] here. One thread per mount, started with the
//! first job (after the daemon forked), runs the jobs in order, so appends to an archive never
//! overlap: it appends the entries ([`PendingAppend::write`]: copy, checksum, `fsync`, then the
//! central directory), swaps the item over to the archive's bytes, and deletes the staged files.
//! Until then the staged files stay on disk, so a daemon killed meanwhile loses nothing: they
//! are shown (and committed) again at the next mount. [`Appender::wait`] is the durability
//! point: `fsync`, `fsyncdir` and unmount wait for the queue and report a failed append.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, RwLock};

use crate::staging::commit::PendingAppend;
use crate::staging::StagingArea;

use super::{FsError, State};

/// One queued append.
#[derive(Debug)]
pub(super) struct Job {
    /// Index of the data set in the state.
    pub dataset: usize,
    pub append: PendingAppend,
    /// The item's staged files: `(--view both path, disk path)`, deleted once appended.
    pub staged: Vec<(String, PathBuf)>,
}

#[derive(Debug, Default)]
struct Progress {
    queued: usize,
    /// The first append that failed since the last [`Appender::wait`].
    failed: Option<String>,
}

/// The queue of appends of one mount.
#[derive(Debug, Default)]
pub(super) struct Appender {
    queue: OnceLock<Option<Mutex<Sender<Job>>>>,
    progress: Arc<(Mutex<Progress>, Condvar)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Appender {
    /// Queues `job`; the thread that runs it gets the state and the staging area.
    pub(super) fn push(
        &self,
        job: Job,
        state: &Arc<RwLock<State>>,
        staging: &StagingArea,
    ) -> Result<(), FsError> {
        let queue = self.queue.get_or_init(|| {
            let (queue, jobs) = channel::<Job>();
            let (state, staging, progress) =
                (state.clone(), staging.clone(), self.progress.clone());
            let spawned = std::thread::Builder::new()
                .name("zip-append".into())
                .spawn(move || {
                    for job in jobs {
                        let result = run(&job, &state, &staging);
                        let (progress, done) = &*progress;
                        let mut progress = lock(progress);
                        if let Err(e) = result {
                            log::error!(
                                "appending {} to {}: {e}; its staged files stay for the next mount",
                                job.append.id.path(),
                                job.append.archive.display()
                            );
                            progress.failed.get_or_insert(e.to_string());
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

    /// Waits until every queued append is in its archive; fails if one could not be.
    pub(super) fn wait(&self) -> Result<(), FsError> {
        let (progress, done) = &*self.progress;
        let mut progress = lock(progress);
        while progress.queued > 0 {
            progress = done.wait(progress).unwrap_or_else(|p| p.into_inner());
        }
        match progress.failed.take() {
            Some(why) => Err(FsError::Internal(format!("a ZIP append failed: {why}"))),
            None => Ok(()),
        }
    }
}

fn run(job: &Job, state: &RwLock<State>, staging: &StagingArea) -> Result<(), FsError> {
    let written = job
        .append
        .write()
        .map_err(|e| FsError::Internal(e.to_string()))?;
    let mut state = state.write().unwrap_or_else(|p| p.into_inner());
    let ds = state
        .datasets
        .get_mut(job.dataset)
        .ok_or_else(|| FsError::Internal("data set gone".into()))?;
    job.append
        .serve_from(ds, &written)
        .map_err(|e| FsError::Internal(e.to_string()))?;
    state.rebuild();
    log::info!(
        "appended {} to {}",
        job.append.id.path(),
        job.append.archive.display()
    );
    let files = job
        .staged
        .iter()
        .map(|(p, disk)| (p.as_str(), disk.as_path()));
    super::commit::discard_staged(&state, staging, files);
    Ok(())
}
