//! The records of directory commits' swaps: the renames (and removals) that put an item's files
//! into its source, recorded before the first of them and removed after the last is durable.
//!
//! A commit whose payload is a staged file *renamed* into the source (staging and source share a
//! file system) cannot be redone from the staging area if the daemon dies in the middle of its
//! swap: the payload has already left it. So every commit into a directory source records,
//! durably and **before it takes the state lock**, every step its swap will take, in order, each
//! with the inode number of the file it moves or removes ([`StagingArea::prepare_moves`]: a
//! file `.NAME.daf-mount.moves.PID.N` beside the staging area, one per commit, so that commits of
//! different items never share one). Under the lock the swap only renames; the directories'
//! `fsync`s, the removals of the replaced item's files and the record's removal
//! ([`MovesRecord::clear`]) come after the lock is released, before the writer's `close`
//! is answered.
//!
//! So a record on disk does not say that its swap began: the commit may have lost a race (its
//! staged files rewritten or committed by another close meanwhile) or the daemon died before
//! the lock. The next writable mount ([`StagingArea::replay_moves`]) decides from the files
//! themselves: the swap began if one of its renames is done (its destination is the recorded
//! inode: a rename keeps it, and nothing else can give that name that inode) or one of the files
//! it removes is gone. A swap that began is finished: each rename whose origin is still the
//! recorded file is done, each removal of a file still the recorded one too (never a file a later
//! commit put there). One that did not begin is dropped: its staged files stay staged, its
//! copies are removed with the other temporaries. The item is committed whole, never half.
//!
//! A record without inode numbers (`.NAME.daf-mount.moves`, written by [`StagingArea::record_moves`]
//! as daemons before this one did, under the state lock) was written once its swap began: it is
//! always finished.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::StagingArea;

/// One step of a swap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Move {
    /// Rename `from` (a staged file, or a copy beside its place) to `to`, in the source.
    Rename { from: PathBuf, to: PathBuf },
    /// Remove a file of the replaced item that the new one does not have.
    Remove(PathBuf),
}

/// A step and the inode number of the file it moves or removes (`None` in a record of an older
/// daemon: the step is done whatever file is there).
pub type Step = (Move, Option<u64>);

/// The record of one commit's swap, on disk until [`MovesRecord::clear`].
#[derive(Debug)]
pub struct MovesRecord {
    path: PathBuf,
}

impl MovesRecord {
    /// Where the record is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Removes the record of a swap that is complete and durable, or that will never be made
    /// (durably: a later file of the same name must never be taken for a step of it).
    pub fn clear(self) -> std::io::Result<()> {
        match fs::remove_file(&self.path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(()) => sync_parent(&self.path),
        }
    }
}

/// The inode number of `path`, if it is there.
pub fn inode(path: &Path) -> Option<u64> {
    fs::symlink_metadata(path).ok().map(|m| m.ino())
}

impl StagingArea {
    /// The record of an older daemon (one at a time, written under the state lock).
    fn moves_journal(&self) -> PathBuf {
        let mut name = self.root().file_name().unwrap_or_default().to_os_string();
        name.push(".moves");
        self.root().with_file_name(name)
    }

    /// Records `moves` durably, as an older daemon did (tests: a record left by one).
    pub fn record_moves(&self, moves: &[Move]) -> std::io::Result<()> {
        let steps: Vec<Step> = moves.iter().map(|m| (m.clone(), None)).collect();
        write_record(&self.moves_journal(), &steps)
    }

    /// Records the steps of a swap about to be decided, durably (written beside, `fsync`ed,
    /// renamed over, directory `fsync`ed), under a name of its own: before the state lock is
    /// taken. Each step names the inode of its file (`None`: skipped, the file is not there).
    pub fn prepare_moves(&self, steps: &[Step]) -> std::io::Result<MovesRecord> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let mut name = self.moves_journal().into_os_string();
        name.push(format!(".{}.{n}", std::process::id()));
        let path = PathBuf::from(name);
        write_record(&path, steps)?;
        Ok(MovesRecord { path })
    }

    /// The records on disk (the older daemon's first, then in the order they were made), and
    /// the temporaries of records cut short while written.
    fn records(&self) -> std::io::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
        let journal = self.moves_journal();
        let (Some(dir), Some(prefix)) = (journal.parent(), journal.file_name()) else {
            return Ok((Vec::new(), Vec::new()));
        };
        let prefix = prefix.as_bytes();
        let mut found: Vec<((u64, u64), PathBuf)> = Vec::new();
        let mut temps = Vec::new();
        let entries = match fs::read_dir(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), temps)),
            other => other?,
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name();
            let Some(rest) = name.as_bytes().strip_prefix(prefix) else {
                continue;
            };
            if rest.ends_with(b".tmp") {
                temps.push(entry.path());
                continue;
            }
            let order = match rest {
                b"" => Some((0, 0)),
                _ => std::str::from_utf8(rest)
                    .ok()
                    .and_then(|r| r.strip_prefix('.')?.split_once('.'))
                    .and_then(|(pid, n)| Some((pid.parse::<u64>().ok()? + 1, n.parse().ok()?))),
            };
            if let Some(order) = order {
                found.push((order, entry.path()));
            }
        }
        found.sort();
        Ok((found.into_iter().map(|(_, p)| p).collect(), temps))
    }

    /// The steps of the swaps killed daemons left unfinished or undecided (none: no record).
    pub fn recorded_moves(&self) -> std::io::Result<Vec<Move>> {
        let mut moves = Vec::new();
        for record in self.records()?.0 {
            moves.extend(read_record(&record)?.into_iter().map(|(m, _)| m));
        }
        Ok(moves)
    }

    /// Finishes the swaps killed daemons began, drops those they had not begun (see the module
    /// doc), then removes the records. Returns whether a swap was finished (the source changed:
    /// open it again). Call before opening the source of a writable mount, with its writer lock
    /// held, and before its temporaries are removed.
    pub fn replay_moves(&self) -> std::io::Result<bool> {
        let (records, temps) = self.records()?;
        // A record killed before it was renamed into place: its swap had not begun.
        for temp in temps {
            match fs::remove_file(&temp) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let mut finished = false;
        for record in records {
            let steps = read_record(&record)?;
            if began(&steps) {
                finish(&steps)?;
                log::warn!(
                    "finished the commit a killed daemon left in the middle of its swap ({} steps)",
                    steps.len()
                );
                finished = true;
            } else {
                log::info!("dropped the record of a commit a killed daemon had not begun to swap");
            }
            MovesRecord { path: record }.clear()?;
        }
        Ok(finished)
    }
}

/// Whether the swap of `steps` began: a step of an older daemon's record (written once it had),
/// a rename done (its destination is the recorded file), a recorded file removed.
fn began(steps: &[Step]) -> bool {
    steps.iter().any(|(step, ino)| match (step, ino) {
        (_, None) => true,
        (Move::Rename { to, .. }, Some(ino)) => inode(to) == Some(*ino),
        (Move::Remove(path), Some(_)) => fs::symlink_metadata(path).is_err(),
    })
}

/// Whether `path` is the recorded file: of inode `ino`, or any file for an older record's step.
fn is_recorded(path: &Path, ino: Option<u64>) -> bool {
    match ino {
        Some(ino) => inode(path) == Some(ino),
        None => fs::symlink_metadata(path).is_ok(),
    }
}

/// Removes `path` if it is still the recorded file ([`is_recorded`]; one gone already is fine),
/// not made durable; whether it was there.
pub fn remove_recorded(path: &Path, ino: Option<u64>) -> std::io::Result<bool> {
    if !is_recorded(path, ino) {
        return Ok(false);
    }
    match fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(true),
    }
}

/// Does the steps of a swap that began that are not done yet.
fn finish(steps: &[Step]) -> std::io::Result<()> {
    for (step, ino) in steps {
        match step {
            Move::Rename { from, to } => {
                if is_recorded(from, *ino) {
                    fs::rename(from, to)?;
                    sync_parent(to)?;
                }
            }
            Move::Remove(path) => {
                if remove_recorded(path, *ino)? {
                    sync_parent(path)?;
                }
            }
        }
    }
    Ok(())
}

/// Writes `steps` at `path`: beside first, `fsync`ed, renamed over, directory `fsync`ed.
fn write_record(path: &Path, steps: &[Step]) -> std::io::Result<()> {
    let mut text = Vec::new();
    for (step, ino) in steps {
        let field = |text: &mut Vec<u8>, bytes: &[u8]| {
            text.extend_from_slice(bytes);
            text.push(0);
        };
        match (step, ino) {
            (Move::Rename { from, to }, ino) => {
                field(&mut text, if ino.is_some() { b"r" } else { b"R" });
                field(&mut text, from.as_os_str().as_bytes());
                field(&mut text, to.as_os_str().as_bytes());
            }
            (Move::Remove(path), ino) => {
                field(&mut text, if ino.is_some() { b"d" } else { b"D" });
                field(&mut text, path.as_os_str().as_bytes());
            }
        }
        if let Some(ino) = ino {
            field(&mut text, ino.to_string().as_bytes());
        }
    }
    let mut temp = path.as_os_str().to_owned();
    temp.push(".tmp");
    let mut file = File::create(&temp)?;
    file.write_all(&text)?;
    file.sync_all()?;
    fs::rename(&temp, path)?;
    sync_parent(path)
}

/// The steps recorded at `path`.
fn read_record(path: &Path) -> std::io::Result<Vec<Step>> {
    let text = fs::read(path)?;
    let bad = || std::io::Error::other(format!("malformed record of moves {}", path.display()));
    let mut fields = text.split(|b| *b == 0);
    let mut next = || fields.next().ok_or_else(bad);
    let mut steps = Vec::new();
    while let Ok(kind) = next() {
        let path = |field: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(field));
        let step = match kind {
            b"R" | b"r" => Move::Rename {
                from: path(next()?),
                to: path(next()?),
            },
            b"D" | b"d" => Move::Remove(path(next()?)),
            b"" => break,
            _ => return Err(bad()),
        };
        let ino = match kind {
            b"r" | b"d" => {
                let field = std::str::from_utf8(next()?).map_err(|_| bad())?;
                Some(field.parse().map_err(|_| bad())?)
            }
            _ => None,
        };
        steps.push((step, ino));
    }
    Ok(steps)
}

/// Makes the last change of `path`'s directory entry durable.
fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(parent) => File::open(parent)?.sync_all(),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_swap_is_finished_once_and_only_once() {
        let tmp = tempfile::tempdir().unwrap();
        let area = StagingArea::for_source(&tmp.path().join("x.daf"));
        let (staged, temp) = (tmp.path().join("s.data"), tmp.path().join(".t"));
        let (data, json, old) = (
            tmp.path().join("d.data"),
            tmp.path().join("d.json"),
            tmp.path().join("d.colptr"),
        );
        fs::write(&staged, b"payload").unwrap();
        fs::write(&temp, b"{}").unwrap();
        fs::write(&old, b"stale").unwrap();
        let moves = vec![
            Move::Rename {
                from: staged.clone(),
                to: data.clone(),
            },
            Move::Rename {
                from: temp.clone(),
                to: json.clone(),
            },
            Move::Remove(old.clone()),
        ];
        area.record_moves(&moves).unwrap();
        assert_eq!(area.recorded_moves().unwrap(), moves);
        // Killed after the first rename.
        fs::rename(&staged, &data).unwrap();
        assert!(area.replay_moves().unwrap());
        assert_eq!(fs::read(&data).unwrap(), b"payload");
        assert_eq!(fs::read(&json).unwrap(), b"{}");
        assert!(!old.exists() && !staged.exists() && !temp.exists());
        // Done: a file staged again under the same name stays staged.
        fs::write(&staged, b"new").unwrap();
        assert!(!area.replay_moves().unwrap());
        assert_eq!(fs::read(&staged).unwrap(), b"new");
        assert_eq!(fs::read(&data).unwrap(), b"payload");
    }

    /// A commit's files as [`super::super::dir_commit`] leaves them when its record is written:
    /// the staged payload (to be moved), a copy of its descriptor beside its place, a stale file
    /// of the replaced item, another staged file of the item; and the record of the steps.
    struct Commit {
        _tmp: tempfile::TempDir,
        area: StagingArea,
        staged: PathBuf,
        temp: PathBuf,
        leftover: PathBuf,
        data: PathBuf,
        json: PathBuf,
        old: PathBuf,
    }

    fn prepared() -> Commit {
        let tmp = tempfile::tempdir().unwrap();
        let area = StagingArea::for_source(&tmp.path().join("x.daf"));
        let at = |name: &str| tmp.path().join(name);
        let c = Commit {
            area,
            staged: at("s.data"),
            temp: at(".t"),
            leftover: at("s.json"),
            data: at("d.data"),
            json: at("d.json"),
            old: at("d.colptr"),
            _tmp: tmp,
        };
        fs::write(&c.staged, b"payload").unwrap();
        fs::write(&c.temp, b"{}").unwrap();
        fs::write(&c.leftover, b"{}").unwrap();
        fs::write(&c.old, b"stale").unwrap();
        let ino = |p: &Path| inode(p);
        let steps = vec![
            (
                Move::Rename {
                    from: c.staged.clone(),
                    to: c.data.clone(),
                },
                ino(&c.staged),
            ),
            (
                Move::Rename {
                    from: c.temp.clone(),
                    to: c.json.clone(),
                },
                ino(&c.temp),
            ),
            (Move::Remove(c.old.clone()), ino(&c.old)),
            (Move::Remove(c.leftover.clone()), ino(&c.leftover)),
        ];
        c.area.prepare_moves(&steps).unwrap();
        c
    }

    fn assert_finished(c: &Commit) {
        assert_eq!(fs::read(&c.data).unwrap(), b"payload");
        assert_eq!(fs::read(&c.json).unwrap(), b"{}");
        for gone in [&c.staged, &c.temp, &c.old, &c.leftover] {
            assert!(!gone.exists(), "{} is left", gone.display());
        }
        assert!(c.area.recorded_moves().unwrap().is_empty());
    }

    fn assert_not_begun(c: &Commit) {
        assert!(
            !c.data.exists() && !c.json.exists(),
            "a swap not begun was made"
        );
        assert_eq!(fs::read(&c.old).unwrap(), b"stale");
        assert!(
            c.staged.exists() && c.leftover.exists(),
            "staged files were lost"
        );
        assert!(c.area.recorded_moves().unwrap().is_empty());
    }

    #[test]
    fn a_record_made_before_the_lock_is_dropped_if_its_swap_never_began() {
        // Killed after the record was written, before the lock (or the commit lost a race).
        let c = prepared();
        assert_eq!(c.area.recorded_moves().unwrap().len(), 4);
        assert!(!c.area.replay_moves().unwrap());
        assert_not_begun(&c);
        assert_eq!(fs::read(&c.staged).unwrap(), b"payload");
        // The staged payload rewritten in place after it was validated (same inode), then killed:
        // what was never validated never goes into the source.
        let c = prepared();
        fs::write(&c.staged, b"rewritten, not validated").unwrap();
        assert!(!c.area.replay_moves().unwrap());
        assert_not_begun(&c);
        assert_eq!(fs::read(&c.staged).unwrap(), b"rewritten, not validated");
    }

    #[test]
    fn a_swap_killed_at_any_point_after_its_first_step_is_finished() {
        // Killed after the first rename, under the lock.
        let c = prepared();
        fs::rename(&c.staged, &c.data).unwrap();
        assert!(c.area.replay_moves().unwrap());
        assert_finished(&c);
        // After the renames and the leftover's removal (lock released, nothing `fsync`ed yet).
        let c = prepared();
        fs::rename(&c.staged, &c.data).unwrap();
        fs::rename(&c.temp, &c.json).unwrap();
        fs::remove_file(&c.leftover).unwrap();
        assert!(c.area.replay_moves().unwrap());
        assert_finished(&c);
        // Only the leftover's removal reached the disk (no order between them is promised).
        let c = prepared();
        fs::remove_file(&c.leftover).unwrap();
        assert!(c.area.replay_moves().unwrap());
        assert_finished(&c);
        // Everything done but the record's removal.
        let c = prepared();
        fs::rename(&c.staged, &c.data).unwrap();
        fs::rename(&c.temp, &c.json).unwrap();
        fs::remove_file(&c.leftover).unwrap();
        fs::remove_file(&c.old).unwrap();
        assert!(c.area.replay_moves().unwrap());
        assert_finished(&c);
    }

    #[test]
    fn a_finished_swap_s_record_never_touches_what_later_commits_put_there() {
        // A swap complete but for its record, then a later commit of the same item put new
        // files at the same names (other inodes) and staged a new payload at the same path.
        let c = prepared();
        fs::rename(&c.staged, &c.data).unwrap();
        fs::rename(&c.temp, &c.json).unwrap();
        fs::remove_file(&c.leftover).unwrap();
        fs::remove_file(&c.old).unwrap();
        let later = c.data.with_extension("later");
        fs::write(&later, b"later payload").unwrap();
        fs::rename(&later, &c.data).unwrap();
        fs::write(&c.old, b"later colptr").unwrap();
        fs::write(&c.staged, b"staged again").unwrap();
        c.area.replay_moves().unwrap();
        assert_eq!(fs::read(&c.data).unwrap(), b"later payload");
        assert_eq!(fs::read(&c.old).unwrap(), b"later colptr");
        assert_eq!(fs::read(&c.staged).unwrap(), b"staged again");
        assert!(c.area.recorded_moves().unwrap().is_empty());
    }

    #[test]
    fn records_of_commits_of_different_items_do_not_share_a_name() {
        let tmp = tempfile::tempdir().unwrap();
        let area = StagingArea::for_source(&tmp.path().join("x.daf"));
        let a = area.prepare_moves(&[]).unwrap();
        let b = area.prepare_moves(&[]).unwrap();
        assert_ne!(a.path(), b.path());
        assert!(a.path().exists() && b.path().exists());
        a.clear().unwrap();
        assert!(b.path().exists());
        b.clear().unwrap();
    }
}
