//! The journal of a directory commit's swap: the renames (and removals) that put an item's files
//! into its source, recorded before the first of them and removed after the last.
//!
//! A commit whose payload is a staged file *renamed* into the source (staging and source share a
//! file system) cannot be redone from the staging area if the daemon dies in the middle of its
//! swap: the payload has already left it. So the swap first records, durably, every step it is
//! about to take, in order ([`StagingArea::record_moves`], beside the staging area as
//! `.NAME.daf-mount.moves`), and removes the record once the item is in place
//! ([`StagingArea::clear_moves`]). The next writable mount finds a record only if a daemon died
//! during a swap, and finishes it ([`StagingArea::replay_moves`]): each rename whose origin is
//! still there is done (a rename moves a file, so the same file is never both staged and in the
//! source), each removal too. The item is then committed whole, never half. The record is
//! written and removed under the state lock, in the swap, so no other commit runs meanwhile.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::StagingArea;

/// One step of a swap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Move {
    /// Rename `from` (a staged file, or a copy beside its place) to `to`, in the source.
    Rename { from: PathBuf, to: PathBuf },
    /// Remove a file of the replaced item that the new one does not have.
    Remove(PathBuf),
}

impl StagingArea {
    fn moves_journal(&self) -> PathBuf {
        let mut name = self.root().file_name().unwrap_or_default().to_os_string();
        name.push(".moves");
        self.root().with_file_name(name)
    }

    /// Records `moves` durably (written beside, `fsync`ed, renamed over, directory `fsync`ed).
    pub fn record_moves(&self, moves: &[Move]) -> std::io::Result<()> {
        let mut text = Vec::new();
        for step in moves {
            match step {
                Move::Rename { from, to } => {
                    text.extend_from_slice(b"R\0");
                    text.extend_from_slice(from.as_os_str().as_bytes());
                    text.push(0);
                    text.extend_from_slice(to.as_os_str().as_bytes());
                    text.push(0);
                }
                Move::Remove(path) => {
                    text.extend_from_slice(b"D\0");
                    text.extend_from_slice(path.as_os_str().as_bytes());
                    text.push(0);
                }
            }
        }
        let journal = self.moves_journal();
        let mut temp = journal.clone().into_os_string();
        temp.push(".tmp");
        let mut file = File::create(&temp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        fs::rename(&temp, &journal)?;
        sync_parent(&journal)
    }

    /// Removes the record of a swap that is complete (durably: a later staged file of the same
    /// name must never be taken for a step of it).
    pub fn clear_moves(&self) -> std::io::Result<()> {
        let journal = self.moves_journal();
        match fs::remove_file(&journal) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
            Ok(()) => sync_parent(&journal),
        }
    }

    /// The steps of a swap a killed daemon left unfinished (none: no record).
    pub fn recorded_moves(&self) -> std::io::Result<Vec<Move>> {
        let text = match fs::read(self.moves_journal()) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            other => other?,
        };
        let bad = || std::io::Error::other("malformed journal of moves");
        let mut fields = text.split(|b| *b == 0);
        let path = |fields: &mut std::slice::Split<'_, u8, _>| -> std::io::Result<PathBuf> {
            let field = fields.next().ok_or_else(bad)?;
            Ok(PathBuf::from(std::ffi::OsStr::from_bytes(field)))
        };
        let mut moves = Vec::new();
        while let Some(kind) = fields.next() {
            match kind {
                b"R" => {
                    let from = path(&mut fields)?;
                    let to = path(&mut fields)?;
                    moves.push(Move::Rename { from, to });
                }
                b"D" => moves.push(Move::Remove(path(&mut fields)?)),
                b"" => break,
                _ => return Err(bad()),
            }
        }
        Ok(moves)
    }

    /// Finishes the swap a killed daemon left unfinished, if any: each recorded rename whose
    /// origin is still there, each removal; then removes the record. Returns whether there was
    /// one (the source changed: open it again). Call before opening the source of a writable
    /// mount, with its writer lock held.
    pub fn replay_moves(&self) -> std::io::Result<bool> {
        // A record killed before it was renamed into place: its swap had not begun.
        let mut temp = self.moves_journal().into_os_string();
        temp.push(".tmp");
        match fs::remove_file(&temp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let moves = self.recorded_moves()?;
        if moves.is_empty() && !self.moves_journal().exists() {
            return Ok(false);
        }
        for step in &moves {
            match step {
                Move::Rename { from, to } => {
                    if fs::symlink_metadata(from).is_ok() {
                        fs::rename(from, to)?;
                        sync_parent(to)?;
                    }
                }
                Move::Remove(path) => match fs::remove_file(path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                },
            }
        }
        log::warn!(
            "finished the commit a killed daemon left in the middle of its swap ({} steps)",
            moves.len()
        );
        self.clear_moves()?;
        Ok(true)
    }
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
}
