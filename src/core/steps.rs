//! The steps at which a change lets other requests in (it releases the state lock, or holds it
//! only shared), named; in tests, a change can be held at any one of them while every operation
//! runs there ([`Steps::pause_at`]). A step's name says where it is; the `n`th time a
//! step is reached since the last [`Steps::pause_at`] is its occurrence `n` (from 0).

#[cfg(test)]
use std::sync::mpsc::{channel, Receiver, Sender};
#[cfg(test)]
use std::sync::{Mutex, RwLock};
#[cfg(test)]
use std::time::Duration;

#[cfg(test)]
use super::State;
#[cfg(test)]
use crate::stores::lock;

/// A directory commit's payloads are written, the state lock released (before the swap).
#[cfg(test)]
pub(super) const PAYLOADS_WRITTEN: &str = "a commit's payloads written";
/// A directory commit is swapped in, the state lock released, before it is made durable.
#[cfg(test)]
pub(super) const SWAPPED: &str = "a commit swapped, not durable yet";
/// An append to a ZIP source is written, before its swap takes the state lock.
#[cfg(test)]
pub(super) const APPEND_WRITTEN: &str = "an append written";
/// An append is swapped in; its staged files are dropped with the state lock shared.
#[cfg(test)]
pub(super) const APPEND_DROPPING: &str = "an append's staged files dropped";
/// A change's staged files are dropped with the state lock shared.
pub(super) const STAGED_DROPPED: &str = "staged files dropped";
/// A change's edits of the tree are worked out with the state lock shared.
pub(super) const EDITS_WORKED_OUT: &str = "a commit's edits worked out";
/// A change's edited tree is made with the state lock shared.
pub(super) const TREE_EDITED: &str = "the tree edited";
/// A change's new tree is built with the state lock shared.
pub(super) const TREE_BUILT: &str = "a new tree built";

/// Tests only: the steps reached, and where to pause.
#[cfg(test)]
#[derive(Debug, Default)]
pub(super) struct Steps(Mutex<Seen>);

#[cfg(test)]
#[derive(Debug, Default)]
struct Seen {
    /// The steps reached since the last `pause_at`, in order.
    reached: Vec<&'static str>,
    /// The step and occurrence to pause at, and the channels: "paused" is sent there, then the
    /// step waits (at most a minute) for "go on".
    pause: Option<(&'static str, usize, Sender<()>, Receiver<()>)>,
}

#[cfg(test)]
impl Steps {
    /// Pauses at occurrence `n` of `step` (`None`: nowhere) from now on, forgetting the steps
    /// reached so far: the receiver says when it is paused there, the sender lets it go on.
    pub(super) fn pause_at(&self, at: Option<(&'static str, usize)>) -> (Receiver<()>, Sender<()>) {
        let (paused, in_step) = channel();
        let (resume, resumed) = channel();
        let mut seen = lock(&self.0);
        seen.reached.clear();
        seen.pause = at.map(|(step, n)| (step, n, paused, resumed));
        (in_step, resume)
    }

    /// The steps reached since the last `pause_at`, in order.
    pub(super) fn reached(&self) -> Vec<&'static str> {
        lock(&self.0).reached.clone()
    }

    /// Called by a change at `step`: pauses there if told to.
    pub(super) fn reach(&self, step: &'static str) {
        let mut seen = lock(&self.0);
        let n = seen.reached.iter().filter(|s| **s == step).count();
        seen.reached.push(step);
        let here = matches!(&seen.pause, Some((s, at, _, _)) if *s == step && *at == n);
        if let Some((_, _, paused, resume)) = here.then(|| seen.pause.take()).flatten() {
            drop(seen);
            let _ = paused.send(());
            let _ = resume.recv_timeout(Duration::from_secs(60));
        }
    }
}

/// [`Steps::reach`] at a step where no lock of the state is held.
#[cfg(test)]
pub(super) fn reach_unlocked(state: &RwLock<State>, step: &'static str) {
    let steps = state
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .steps
        .clone();
    steps.reach(step);
}
