//! What the kernel must forget after a change: inodes whose attributes or pages changed, and
//! names that are gone; queued here, sent by the adapter after its reply
//! (`fuse::kernel_cache`).

use crate::core::{DafFs, Invalidation, State};

impl DafFs {
    /// Queues kernel cache invalidations for these inodes (the adapter sends them).
    pub(in crate::core) fn invalidate(&self, inos: Vec<u64>) {
        self.queue_invalidations(inos.into_iter().map(Invalidation::Inode));
    }

    /// Queues invalidations of names that no longer exist.
    pub(in crate::core) fn invalidate_entries(&self, entries: Vec<(u64, String)>) {
        self.queue_invalidations(
            entries
                .into_iter()
                .map(|(parent, name)| Invalidation::Entry(parent, name)),
        );
    }

    fn queue_invalidations(&self, items: impl Iterator<Item = Invalidation>) {
        let me = Some(std::thread::current().id());
        self.invalidations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(items.map(|item| (me, item)));
    }

    /// Leaves what the calling thread queued to the next request that sends invalidations: for
    /// a change made outside any request (the recovery at mount).
    pub(in crate::core) fn share_invalidations(&self) {
        let me = Some(std::thread::current().id());
        let mut queued = self.invalidations.lock().unwrap_or_else(|p| p.into_inner());
        for (by, _) in queued.iter_mut().filter(|(by, _)| *by == me) {
            *by = None;
        }
    }

    /// What the kernel must forget after the calling thread's change (its request): changed
    /// inodes, and names that are gone. Only what this thread queued (and what was left to any
    /// request): the request that made a change sends its invalidations and answers once they
    /// are sent, and another worker's request, ending meanwhile, must not take them (the
    /// change's reply would then go out before the kernel forgot the old names: a file deleted
    /// through one view still showed in the other when the delete returned).
    pub fn take_invalidations(&self) -> Vec<Invalidation> {
        let me = Some(std::thread::current().id());
        let mut queued = self.invalidations.lock().unwrap_or_else(|p| p.into_inner());
        let (mine, others) = std::mem::take(&mut *queued)
            .into_iter()
            .partition::<Vec<_>, _>(|(by, _)| by.is_none() || *by == me);
        *queued = others;
        mine.into_iter().map(|(_, item)| item).collect()
    }

    /// Tells the kernel about a staged file at `mount` it was not told is gone (a document
    /// dropped): the name, if nothing shows there now (a writer's next create of it would reach
    /// a cached name that no longer exists, and fail), else the file that shows again.
    pub(in crate::core) fn forget_dropped(&self, state: &mut State, mount: &str) {
        let ino = state.inodes.ino(mount);
        if state.namespace.node(ino).is_some() {
            self.invalidate(vec![ino]);
        } else {
            let (dir, name) = mount.rsplit_once('/').unwrap_or(("", mount));
            let parent = state.inodes.ino(dir);
            self.invalidate_entries(vec![(parent, name.to_string())]);
        }
    }
}
