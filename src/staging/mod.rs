//! Staging: files written through the mount live here until they form a complete property.
//!
//! The staging area is a hidden directory beside the source (`.NAME.daf-mount/` next to
//! `NAME.daf.zarr.zip`, say), on the same file system so a commit into a directory source can be a
//! rename. Inside, staged paths are laid out as in a `--view both` mount (`g1.daf/vectors/...`,
//! `g1.daf.zarr/...`), whatever the current view selection, so files staged in one session
//! reappear at the same place in the next, and a user can finish or remove them.
//!
//! Beside it, a journal (`.NAME.daf-mount.accepted`) names the items a daemon accepted (validated
//! at the close that completed them) but may not have written into the source yet: a ZIP append
//! still queued when the daemon was killed. The next writable mount commits those again, and only
//! those: files a killed *writer* left behind were never accepted, so they stay staged for the
//! user to finish or remove, instead of becoming a (partial) property.

pub mod commit;
pub mod dir_commit;
pub mod moves;
pub mod zip_commit;

use crate::stores::lock;

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// A staged path found on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedPath {
    /// Path in the `--view both` layout (`NAME.daf/...` or `NAME.daf.zarr/...`).
    pub path: String,
    /// Where it is on disk.
    pub disk: PathBuf,
    /// Whether it is a directory.
    pub is_dir: bool,
    /// Its modification time.
    pub mtime: SystemTime,
}

/// The on-disk staging directory of one source.
#[derive(Clone, Debug)]
pub struct StagingArea {
    root: PathBuf,
    /// Serialises the edits of the journal: a commit's line is never lost to the recovery's
    /// rewrite running beside it.
    journal_lock: Arc<Mutex<()>>,
}

impl StagingArea {
    /// The staging area of the source at `source` (a directory or an archive path).
    pub fn for_source(source: &Path) -> StagingArea {
        let name = source
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let parent = source.parent().unwrap_or(Path::new("/"));
        StagingArea {
            root: parent.join(format!(".{name}.daf-mount")),
            journal_lock: Arc::default(),
        }
    }

    /// The staging directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn journal(&self) -> PathBuf {
        let mut name = self.root.file_name().unwrap_or_default().to_os_string();
        name.push(".accepted");
        self.root.with_file_name(name)
    }

    /// Records that the item `key` was accepted (one line; read by [`StagingArea::accepted`]).
    pub fn record_accepted(&self, key: &str) -> std::io::Result<()> {
        let _edit = lock(&self.journal_lock);
        let mut journal = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.journal())?;
        journal.write_all(format!("{}\n", key.replace('\n', " ")).as_bytes())
    }

    /// The items recorded as accepted.
    pub fn accepted(&self) -> BTreeSet<String> {
        fs::read_to_string(self.journal())
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Removes the items `done` from the journal (atomically; removes the journal when nothing
    /// is left). Lines recorded meanwhile are kept.
    pub fn forget_accepted(&self, done: &BTreeSet<String>) -> std::io::Result<()> {
        let _edit = lock(&self.journal_lock);
        let keys: BTreeSet<String> = self.accepted().difference(done).cloned().collect();
        let journal = self.journal();
        if keys.is_empty() {
            return match fs::remove_file(&journal) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let mut temp = journal.clone().into_os_string();
        temp.push(".tmp");
        let text: String = keys.iter().map(|k| format!("{k}\n")).collect();
        fs::write(&temp, text)?;
        fs::rename(&temp, &journal)
    }

    /// Where the staged `path` (both-views layout) lives on disk.
    pub fn disk_path(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }

    /// Creates the parent directories of a staged path.
    pub fn prepare_parent(&self, path: &str) -> std::io::Result<PathBuf> {
        let disk = self.disk_path(path);
        if let Some(parent) = disk.parent() {
            fs::create_dir_all(parent)?;
        }
        Ok(disk)
    }

    /// Every staged file and directory, parents first.
    pub fn list(&self) -> Vec<StagedPath> {
        let mut out = Vec::new();
        walk(&self.root, "", &mut out);
        out
    }

    /// Removes empty directories left on the way from `path` up to the staging root.
    pub fn prune(&self, path: &str) {
        self.prune_until(path, |_| false);
    }

    /// [`prune`](Self::prune), stopping below the first directory above `path` that is `kept`
    /// (a `--view both` path staged itself).
    pub fn prune_until(&self, path: &str, kept: impl Fn(&str) -> bool) {
        let mut at = Some(path);
        while let Some(dir) = at.filter(|d| !d.is_empty()) {
            if fs::remove_dir(self.disk_path(dir)).is_err() {
                break;
            }
            at = dir
                .rsplit_once('/')
                .map(|(parent, _)| parent)
                .filter(|p| !kept(p));
        }
        let _ = fs::remove_dir(&self.root);
    }
}

fn walk(dir: &Path, prefix: &str, out: &mut Vec<StagedPath>) {
    let Ok(listing) = fs::read_dir(dir) else {
        return;
    };
    let mut items: Vec<_> = listing.filter_map(Result::ok).collect();
    items.sort_by_key(|e| e.file_name());
    for item in items {
        let Some(name) = item.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let Ok(meta) = item.metadata() else { continue };
        let mtime = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
        out.push(StagedPath {
            path: path.clone(),
            disk: item.path(),
            is_dir: meta.is_dir(),
            mtime,
        });
        if meta.is_dir() {
            walk(&item.path(), &path, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lives_beside_the_source_and_lists_what_was_staged() {
        let tmp = tempfile::tempdir().unwrap();
        let area = StagingArea::for_source(&tmp.path().join("x.daf.zarr.zip"));
        assert_eq!(area.root(), tmp.path().join(".x.daf.zarr.zip.daf-mount"));
        let disk = area.prepare_parent("x.daf/vectors/cell/a.json").unwrap();
        fs::write(&disk, "{}").unwrap();
        let listed: Vec<(String, bool)> = area
            .list()
            .into_iter()
            .map(|s| (s.path, s.is_dir))
            .collect();
        assert_eq!(
            listed,
            vec![
                ("x.daf".into(), true),
                ("x.daf/vectors".into(), true),
                ("x.daf/vectors/cell".into(), true),
                ("x.daf/vectors/cell/a.json".into(), false)
            ]
        );
        fs::remove_file(&disk).unwrap();
        area.prune("x.daf/vectors/cell");
        assert!(!area.root().exists());
    }
}
