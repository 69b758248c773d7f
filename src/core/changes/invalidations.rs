//! What the kernel must forget after a change: inodes whose attributes or pages changed, and
//! names that are gone; queued here, sent by the adapter after its reply
//! (`fuse::kernel_cache`).

use crate::core::{DafFs, Invalidation, State};

impl DafFs {
    /// Queues kernel cache invalidations for these inodes (the adapter sends them).
    pub(in crate::core) fn invalidate(&self, inos: Vec<u64>) {
        self.invalidations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(inos.into_iter().map(Invalidation::Inode));
    }

    /// Queues invalidations of names that no longer exist.
    pub(in crate::core) fn invalidate_entries(&self, entries: Vec<(u64, String)>) {
        let mut queue = self.invalidations.lock().unwrap_or_else(|p| p.into_inner());
        queue.extend(
            entries
                .into_iter()
                .map(|(parent, name)| Invalidation::Entry(parent, name)),
        );
    }

    /// What the kernel must forget: changed inodes, and names that are gone.
    pub fn take_invalidations(&self) -> Vec<Invalidation> {
        std::mem::take(&mut *self.invalidations.lock().unwrap_or_else(|p| p.into_inner()))
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
