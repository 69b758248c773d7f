//! How a tree is edited to show a local commit ([`super::Edit::Committed`]): a view's committed
//! file or directory put in place, and a directory given its own time (which is then known to
//! later edits).

use std::sync::Arc;
use std::time::SystemTime;

use super::super::{NewKind, ROOT};
use super::Editor;
use crate::stores::Blob;

impl Editor<'_> {
    /// Shows a view's committed file (`blob`) or directory at `path`, its own time `mtime` (a
    /// directory's is then known: its time is the latest of it and its children's).
    pub(super) fn committed(
        &mut self,
        path: &str,
        mtime: SystemTime,
        blob: Option<&Arc<Blob>>,
    ) -> Option<()> {
        let components: Vec<&str> = path.split('/').filter(|c| !c.is_empty()).collect();
        let mut ancestors = vec![ROOT];
        for dir in components.iter().rev().skip(1).rev() {
            let parent = *ancestors.last()?;
            let ino = match self.ns.child(parent, dir) {
                Some(found) => {
                    let ino = found.ok()?;
                    self.show(ino)?;
                    ino
                }
                // A directory the view implies (a v3 chunk's `c/`), as a build makes it.
                None => {
                    let ino = self.insert(parent, dir, mtime, None)?;
                    self.ns.overlay.made.insert(ino, None);
                    self.propagate(&ancestors, None, Some(mtime))?;
                    ino
                }
            };
            ancestors.push(ino);
        }
        let Some(name) = components.last() else {
            // The root: its own time (the caller gives the latest of the mount's and this).
            return blob.is_none().then(|| self.own_time(&[], ROOT, mtime))?;
        };
        let parent = *ancestors.last()?;
        let Some(existing) = self.ns.child(parent, name) else {
            match blob {
                Some(blob) => self.insert_kind(parent, name, mtime, NewKind::File(blob.clone()))?,
                None => {
                    let ino = self.insert(parent, name, mtime, None)?;
                    self.ns.overlay.made.insert(ino, Some(mtime));
                    ino
                }
            };
            return self.propagate(&ancestors, None, Some(mtime));
        };
        let existing = existing.ok()?;
        let node = self.ns.node(existing)?.clone();
        let Some(blob) = blob else {
            return node.is_dir().then(|| {
                self.show(existing)?;
                self.own_time(&ancestors, existing, mtime)
            })?;
        };
        if node.is_dir() {
            return None;
        }
        let kind = NewKind::File(blob.clone());
        self.replace_file(&ancestors, name, (existing, node), kind, mtime)
    }

    /// Directory `dir` (under `ancestors`) owns time `own` now.
    fn own_time(&mut self, ancestors: &[u64], dir: u64, own: SystemTime) -> Option<()> {
        let node = self.ns.node(dir)?.clone();
        let was = self.ns.mtime(&node);
        self.ns.overlay.made.insert(dir, Some(own));
        let now = match own >= was {
            true => own,
            false => self.latest_child(dir).map_or(own, |m| m.max(own)),
        };
        if now != was {
            let node = node.with_mtime_index(self.time(now));
            self.ns.overlay.nodes.insert(dir, Some(node));
        }
        self.propagate(ancestors, Some(was), Some(now))
    }
}
