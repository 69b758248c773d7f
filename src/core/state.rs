//! The state a mount's tree is built from (data sets, view roots, staged and deleted paths), the
//! rebuild of that tree, and the mapping of mount paths to view roots. The lock a change holds
//! is `writer.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::formats::model::PropertyId;
use crate::formats::source::NamedDataset;
use crate::views::publish::{published_paths, Publisher};
use crate::views::{
    local_entries, view_entries, view_entries_into, EntrySink, ViewEntry, ViewKind, ViewNode,
    ViewOptions, ViewRoot,
};

use super::namespace::{Edit, Entry, EntryKind, InodeTable, Namespace, ROOT};

#[cfg(test)]
thread_local! {
    /// Tests only: changes of staged or hidden paths build the tree anew (as before edits).
    pub(super) static EDITS_OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// Tests only: the time staged paths get, if set.
    pub(super) static CLOCK: std::cell::Cell<Option<SystemTime>> = const { std::cell::Cell::new(None) };
}

/// The time a path staged now gets: the kernel's coarse clock, the one it stamps files with (or
/// a finer time after it), so a staged file's time is never later than the time its disk file
/// gets when written. A later one (`SystemTime::now()` within the clock's tick) made the commit
/// of the file an edit that moves its directories' times back, which recounts every child of
/// each (`recount` in namespace/edit.rs).
pub(super) fn now() -> SystemTime {
    #[cfg(test)]
    if let Some(now) = CLOCK.with(std::cell::Cell::get) {
        return now;
    }
    use nix::time::{clock_gettime, ClockId};
    clock_gettime(ClockId::CLOCK_REALTIME_COARSE)
        .ok()
        .and_then(|t| {
            let since = std::time::Duration::new(
                u64::try_from(t.tv_sec()).ok()?,
                u32::try_from(t.tv_nsec()).ok()?,
            );
            SystemTime::UNIX_EPOCH.checked_add(since)
        })
        .unwrap_or_else(SystemTime::now)
}

/// A staged path: its disk location in the staging area.
#[derive(Clone, Debug)]
pub(super) struct Staged {
    pub(super) disk: PathBuf,
    pub(super) is_dir: bool,
    pub(super) mtime: SystemTime,
}

/// Everything a tree is built from.
#[derive(Debug)]
pub(super) struct State {
    pub(super) datasets: Vec<NamedDataset>,
    pub(super) roots: Vec<ViewRoot>,
    /// Staged paths by their `--view both` path.
    pub(super) staged: BTreeMap<String, Staged>,
    /// Committed files and directories removed through a view (`--view both` paths) whose item
    /// is not deleted yet: hidden until it is.
    pub(super) deleted: BTreeSet<String>,
    /// Staged files found at recovery that can never be committed as they are (by `--view
    /// both` path), with their size and time then: not tried again until they change.
    pub(super) stuck: BTreeMap<String, Option<(u64, SystemTime)>>,
    pub(super) inodes: InodeTable,
    pub(super) root_mtime: SystemTime,
    pub(super) namespace: Arc<Namespace>,
    /// Tests only: where the next build of a tree by a `Writer` (or the working out of a
    /// commit's edits, `Writer::committed`) pauses, under the state lock taken shared (it says
    /// so on the sender, then waits for the receiver).
    #[cfg(test)]
    pub(super) build_pause: Arc<crate::core::changes::appender::Pause>,
    /// Tests only: where the next edit of the tree by a `Writer` (`Writer::apply`) pauses, under
    /// the state lock taken shared.
    #[cfg(test)]
    pub(super) edit_pause: Arc<crate::core::changes::appender::Pause>,
    /// Tests only: the steps at which a change lets other requests in, and where to pause.
    #[cfg(test)]
    pub(super) steps: Arc<super::steps::Steps>,
    /// The files made from whole data sets at the mount root (`--zip`, `--h5df`), and the
    /// options they are made with.
    /// (Behind a lock of its own: a tree is built under the state lock taken shared.)
    pub(super) publisher: Option<(Mutex<Publisher>, ViewOptions)>,
}

impl State {
    /// The view root of mount path `mount`, the path relative to it, and the item it belongs to.
    pub(super) fn locate(
        &self,
        mount: &str,
    ) -> Option<(ViewRoot, String, Option<crate::formats::model::PropertyId>)> {
        let (root, rel) = split_mount(&self.roots, mount)?;
        Some((root.clone(), rel.to_string(), root.layout().item_of(rel)))
    }

    /// Whether inode `ino` is still the staged file `disk`: in the tree, and in the state (a
    /// commit takes it out of the state before its new tree is swapped in).
    pub(super) fn still_staged(&self, ino: u64, disk: &std::path::Path) -> bool {
        let path = self.namespace.path(ino).unwrap_or_default();
        let staged = split_mount(&self.roots, &path)
            .filter(|(_, rel)| !rel.is_empty())
            .and_then(|(root, rel)| self.staged.get(&root.canonical_path(rel)));
        let shown = self.namespace.node(ino).map(|n| n.kind());
        matches!(shown, Some(super::NodeKind::Staged(d)) if **d == *disk)
            && staged.is_some_and(|s| s.disk == disk)
    }

    /// The mount paths of the files made from the whole of data set `dataset` (they change
    /// with any of its items).
    pub(super) fn published_paths(&self, dataset: usize) -> Vec<String> {
        match (&self.publisher, self.datasets.get(dataset)) {
            (Some((_, options)), Some(ds)) => published_paths(ds, options),
            _ => Vec::new(),
        }
    }

    /// The edit that shows the staged path `canonical` (a `--view both` path) as staged now.
    pub(super) fn put_edit(&self, canonical: &str) -> Option<Edit> {
        let staged = self.staged.get(canonical)?;
        let (root, rel) = split_canonical(&self.roots, canonical)?;
        Some(Edit::Put {
            path: root.mount_path(rel),
            mtime: staged.mtime,
            staged: (!staged.is_dir).then(|| staged.disk.clone()),
        })
    }

    /// The edit that takes the staged path `canonical` out: the committed file it hid shows
    /// again unless that is hidden too.
    pub(super) fn removal_edit(&self, canonical: &str) -> Option<Edit> {
        let (root, rel) = split_canonical(&self.roots, canonical)?;
        let path = root.mount_path(rel);
        let uncover = split_mount(&self.roots, &path)
            .is_some_and(|(root, _)| !hidden(root, &self.deleted, &path));
        Some(Edit::Remove { path, uncover })
    }

    /// The edits that show item `id` of data set `dataset` as the model has it now, in every
    /// view, with the staged paths `gone` (`--view both` paths, out of the state now) taken
    /// out; `before`: the mount paths the item's entries had. `None` when the change is not
    /// local (a view with files derived from every item or with dimension names, a published
    /// ZIP, hidden paths, an entry the item no longer has): the tree is then built anew.
    pub(super) fn commit_edits(
        &self,
        dataset: usize,
        id: &PropertyId,
        before: &[String],
        gone: &[String],
    ) -> Option<Vec<Edit>> {
        if self.publisher.is_some() || !self.deleted.is_empty() {
            return None;
        }
        let ds = &self.datasets.get(dataset)?.dataset;
        let mut edits = Vec::new();
        let mut shown = BTreeSet::new();
        let tree = &self.namespace;
        let blob_at = |path: &str| match tree.node(resolve_in(tree, path)?)?.kind() {
            super::NodeKind::File(blob) => Some(blob.clone()),
            _ => None,
        };
        for root in self.roots.iter().filter(|r| r.dataset == dataset) {
            for entry in local_entries(ds, root, id, &blob_at)? {
                if entry.elidable {
                    return None;
                }
                // A file still staged there (another view's, over the committed one) is on top
                // in a build, and would be replaced by the edit: build.
                let canonical = root.canonical_path(root.relative(&entry.path));
                if self.staged.get(&canonical).is_some_and(|s| !s.is_dir) {
                    return None;
                }
                // The mount root's own time is also the mount's (see `Namespace::build`).
                let mtime = match entry.path.is_empty() {
                    true => entry.mtime.max(self.root_mtime),
                    false => entry.mtime,
                };
                let blob = match entry.node {
                    ViewNode::Dir => None,
                    ViewNode::File(blob) => Some(blob),
                };
                shown.insert(entry.path.clone());
                edits.push(Edit::Committed {
                    path: entry.path,
                    mtime,
                    blob,
                });
            }
        }
        // What the item had and no longer has (a v3 chunk of fill values, which the archive does
        // not keep) goes, deepest first; not a file staged there (a build keeps it on top).
        let mut vanished: Vec<&String> = before.iter().filter(|p| !shown.contains(*p)).collect();
        vanished.sort_unstable_by(|a, b| b.cmp(a));
        for path in vanished {
            let (root, rel) = split_mount(&self.roots, path)?;
            if self.staged.contains_key(&root.canonical_path(rel)) {
                return None;
            }
            edits.push(Edit::Remove {
                path: path.clone(),
                uncover: false,
            });
        }
        for canonical in gone {
            let (root, rel) = split_canonical(&self.roots, canonical)?;
            let path = root.mount_path(rel);
            if !shown.contains(&path) {
                edits.push(Edit::Remove {
                    path,
                    uncover: false,
                });
            }
        }
        Some(edits)
    }

    /// Applies changes of staged or hidden paths to the tree ([`Namespace::edited`]), or builds
    /// it anew when an edit cannot.
    pub(super) fn apply(&mut self, edits: impl IntoIterator<Item = Option<Edit>>) {
        let edits: Vec<Edit> = edits.into_iter().flatten().collect();
        #[cfg(test)]
        if EDITS_OFF.with(std::cell::Cell::get) {
            return self.rebuild();
        }
        match self.namespace.edited(&edits, &mut self.inodes) {
            Some(tree) => self.namespace = tree,
            None => self.rebuild(),
        }
    }

    /// Builds the tree anew (see [`State::build`]) and takes it.
    pub(super) fn rebuild(&mut self) {
        let mut inodes = std::mem::take(&mut self.inodes);
        self.namespace = self.build(&mut inodes);
        self.inodes = inodes;
        // The rendered views and the previous tree are freed: give their pages back.
        crate::sys::release_free_memory();
    }

    /// A new tree of the state as it is, numbered by `inodes` (which takes it as its tree). The
    /// views are rendered on a second thread, one at a time, and handed over in batches of
    /// entries while this thread builds the tree of the batches before (all first only when a
    /// published ZIP needs its data set's Zarr view), so no list of every entry of the mount is
    /// ever made. Needs the state only shared: the caller keeps other writers out.
    pub(super) fn build(&self, inodes: &mut InodeTable) -> Arc<Namespace> {
        let mut rendered: Vec<Option<Vec<ViewEntry>>> = std::iter::repeat_with(|| None)
            .take(self.roots.len())
            .collect();
        let mut published = Vec::new();
        if let Some((publisher, options)) = &self.publisher {
            // A published archive is made of its data set's Zarr view, rendered here once for
            // both.
            let datasets = &self.datasets;
            rendered = match options.zip {
                true => self
                    .roots
                    .iter()
                    .map(|root| Some(view_entries(&datasets[root.dataset].dataset, root)))
                    .collect(),
                // An H5df file alone is made of the model, not of a view.
                false => rendered,
            };
            let roots = &self.roots;
            let zarr_files = |dataset: usize| {
                let (root, views) = roots
                    .iter()
                    .zip(&rendered)
                    .find(|(r, _)| r.dataset == dataset && r.kind == ViewKind::Zarr)?;
                Some(
                    views
                        .iter()
                        .flatten()
                        .filter_map(|e| match &e.node {
                            ViewNode::File(blob) => {
                                Some((root.relative(&e.path).to_string(), blob.clone()))
                            }
                            ViewNode::Dir => None,
                        })
                        .collect(),
                )
            };
            let mut publisher = crate::stores::lock(publisher);
            published = publisher.entries(&self.datasets, options, zarr_files);
        }
        let (datasets, roots, deleted) = (&self.datasets, &self.roots, &self.deleted);
        // The views are rendered on a second thread and their entries handed over in batches as
        // they are made, while this one builds the tree of them (a few batches wait at most).
        // Without that thread, this one renders them itself.
        let rendered = Mutex::new(rendered);
        let view = |at: usize, sink: Option<&EntrySink>| {
            let given = crate::stores::lock(&rendered)
                .get_mut(at)
                .and_then(Option::take);
            given.unwrap_or_else(|| {
                view_entries_into(&datasets[roots[at].dataset].dataset, &roots[at], sink)
            })
        };
        let (sender, received) = std::sync::mpsc::sync_channel(BATCHES_AHEAD);
        let spent = Arc::new(Mutex::new(Vec::new()));
        let sink_spent = spent.clone();
        let render = move || {
            for at in 0..roots.len() {
                let sink = EntrySink {
                    tag: at,
                    sender: sender.clone(),
                    spent: sink_spent.clone(),
                };
                if sender.send((at, view(at, Some(&sink)))).is_err() {
                    return;
                }
            }
        };
        let staged = self.staged.iter().filter_map(|(path, staged)| {
            let (root, rel) = split_canonical(roots, path)?;
            let kind = if staged.is_dir {
                EntryKind::Dir
            } else {
                EntryKind::Staged(staged.disk.clone())
            };
            Some(Entry {
                path: root.mount_path(rel),
                mtime: staged.mtime,
                kind,
                elidable: false,
            })
        });
        std::thread::scope(|scope| {
            let renderer = std::thread::Builder::new()
                .name("daf-render".into())
                .spawn_scoped(scope, render);
            let inline = renderer.err().map(|e| {
                log::warn!("rendering the views on the tree's thread: {e}");
                (0..roots.len()).map(|at| (at, view(at, None)))
            });
            let views = received
                .into_iter()
                .chain(inline.into_iter().flatten())
                .flat_map(|(at, entries)| {
                    let root = &roots[at];
                    entries
                        .into_iter()
                        .filter(move |e| deleted.is_empty() || !hidden(root, deleted, &e.path))
                        .map(tree_entry)
                });
            let entries = published
                .into_iter()
                .map(tree_entry)
                .chain(views)
                .chain(staged);
            // The paths taken go back to the renderer's thread, which allocated them.
            let mut taken = Vec::with_capacity(PATHS_GIVEN_BACK);
            let give_back = |path| {
                taken.push(path);
                if taken.len() >= PATHS_GIVEN_BACK {
                    let full = std::mem::replace(&mut taken, Vec::with_capacity(PATHS_GIVEN_BACK));
                    crate::stores::lock(&spent).push(full);
                }
            };
            Namespace::build_giving_back(entries, self.root_mtime, inodes, give_back)
        })
    }
}

/// The number of batches of view entries rendered ahead of the tree being built.
const BATCHES_AHEAD: usize = 4;

/// The number of paths the tree gives back to the renderer at once.
const PATHS_GIVEN_BACK: usize = 4096;

/// Whether mount path `path` of view `root` is a committed path being deleted (or inside a
/// directory being deleted).
fn hidden(root: &ViewRoot, deleted: &BTreeSet<String>, path: &str) -> bool {
    let mut canonical = root.canonical_path(root.relative(path));
    loop {
        if deleted.contains(&canonical) {
            return true;
        }
        match canonical.rsplit_once('/') {
            Some((parent, _)) => canonical = parent.to_string(),
            None => return false,
        }
    }
}

/// A view's entry as an entry of the tree.
pub(super) fn tree_entry(
    ViewEntry {
        path,
        node,
        mtime,
        elidable,
    }: ViewEntry,
) -> Entry {
    let kind = match node {
        ViewNode::Dir => EntryKind::Dir,
        ViewNode::File(blob) => EntryKind::Blob(blob),
    };
    Entry {
        path,
        mtime,
        kind,
        elidable,
    }
}

/// The inode at mount path `path` in `ns`.
pub(super) fn resolve_in(ns: &Namespace, path: &str) -> Option<u64> {
    path.split('/')
        .filter(|c| !c.is_empty())
        .try_fold(ROOT, |dir, name| ns.child(dir, name)?.ok())
}

/// The view root holding the `--view both` path `path`, and the path relative to it.
pub(super) fn split_canonical<'a, 'p>(
    roots: &'a [ViewRoot],
    path: &'p str,
) -> Option<(&'a ViewRoot, &'p str)> {
    roots.iter().find_map(|root| {
        let rel = path.strip_prefix(&root.canonical)?;
        match rel.strip_prefix('/') {
            Some(rel) => Some((root, rel)),
            None if rel.is_empty() => Some((root, rel)),
            None => None,
        }
    })
}

/// The view root holding the mount path `path`, and the path relative to it (longest match).
pub(super) fn split_mount<'a, 'p>(
    roots: &'a [ViewRoot],
    path: &'p str,
) -> Option<(&'a ViewRoot, &'p str)> {
    roots
        .iter()
        .filter_map(|root| {
            if root.mount.is_empty() {
                return Some((root, path));
            }
            let rel = path.strip_prefix(&root.mount)?;
            match rel.strip_prefix('/') {
                Some(rel) => Some((root, rel)),
                None if rel.is_empty() => Some((root, rel)),
                None => None,
            }
        })
        .max_by_key(|(root, _)| root.mount.len())
}
