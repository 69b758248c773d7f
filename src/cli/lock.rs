//! The writer lock: at most one read-write daf-mount per data set.
//!
//! A read-write mount takes an exclusive `flock(2)` on the source itself (the directory, or the
//! ZIP archive whatever group of it is mounted) before it reads it. The lock belongs to the
//! inode, so every path that names the same source (a symlink, a relative path, a bind mount, a
//! `#/GROUP` of the archive mounted whole elsewhere) meets the same lock. It belongs to the open
//! file description, which the daemon opens (a background daemon is forked before) and which the
//! ZIP tail-writer helper keeps (so a helper still finishing a central-directory write after the
//! daemon was killed keeps the archive locked until it is done). The kernel drops it when the
//! last of those processes ends, so a killed daemon never blocks the next mount. Read-only
//! mounts take no lock. Upstream DataAxesFormats.jl has no cross-process convention to respect
//! (it serialises writers with an in-process lock per archive path).

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::formats::source::{parse_source, SourceSpec};

use super::CliError;

/// How long a mount waits for a lock held by another process before refusing: long enough for
/// the helper of a just-ended daemon to finish its last central-directory write.
const WAIT: Duration = Duration::from_secs(2);

/// An exclusive lock on a source, held while it lives (and by the processes that inherit it).
#[derive(Debug)]
pub struct WriterLock {
    lock: Flock<File>,
}

impl WriterLock {
    /// The locked descriptor, for a forked helper that must keep the lock.
    pub fn raw_fd(&self) -> RawFd {
        self.lock.as_raw_fd()
    }
}

/// The file or directory a source argument names, as the lock sees it (`None` when the argument
/// is not a valid source path: opening it reports that).
pub fn lock_target(arg: &str) -> Option<PathBuf> {
    match parse_source(arg).ok()? {
        SourceSpec::Directory(path) => Some(path),
        SourceSpec::Zip { path, .. } | SourceSpec::H5df { path, .. } => Some(path),
    }
}

/// Locks the source `arg` names for writing, waiting up to [`WAIT`] for another holder to end.
/// `Ok(None)` when the source cannot be opened: opening it for real reports why.
pub fn lock_source(arg: &str) -> Result<Option<WriterLock>, CliError> {
    let Some(path) = lock_target(arg) else {
        return Ok(None);
    };
    let Ok(mut file) = File::open(&path) else {
        return Ok(None);
    };
    let started = Instant::now();
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(Some(WriterLock { lock })),
            Err((back, Errno::EWOULDBLOCK)) if started.elapsed() < WAIT => {
                file = back;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err((back, Errno::EWOULDBLOCK)) => {
                let holders = holders(&back)
                    .into_iter()
                    .map(|pid| (pid, program(pid)))
                    .collect();
                return Err(CliError::Locked {
                    data_set: arg.to_string(),
                    holders,
                });
            }
            Err((_, errno)) => {
                // A file system without flock (some network file systems): no lock to respect.
                log::warn!(
                    "cannot lock {} ({errno}); mounting without the writer lock",
                    path.display()
                );
                return Ok(None);
            }
        }
    }
}

/// The processes (other than this one) with a descriptor of `file`'s inode that holds a flock,
/// lowest pid first, leaving out a daemon's tail-writer helper (named so, or a child of one
/// listed).
/// Best effort: processes we may not inspect are not listed.
pub fn holders(file: &File) -> Vec<i32> {
    let Ok(meta) = file.metadata() else {
        return Vec::new();
    };
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = procs
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| pid.to_string() != me)
        .filter(|pid| holds_lock_on(*pid, meta.dev(), meta.ino()))
        .collect();
    pids.sort_unstable();
    let parents: Vec<Option<i32>> = pids.iter().map(|pid| parent(*pid)).collect();
    pids.iter()
        .zip(parents)
        .filter(|(_, parent)| !parent.is_some_and(|p| pids.contains(&p)))
        .map(|(pid, _)| *pid)
        .filter(|pid| program(*pid) != crate::stores::zip::append::TAIL_WRITER_NAME)
        .collect()
}

/// The program name of `pid` (`/proc/PID/comm`), or "".
fn program(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim().to_string())
        .unwrap_or_default()
}

/// The parent pid, from `/proc/PID/stat` (the field after the parenthesised command name).
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Whether a descriptor of `pid` holds an flock on the inode `dev`/`ino`, from the `lock:` lines
/// of `/proc/PID/fdinfo/*` (`... FLOCK ADVISORY WRITE PID MAJ:MIN:INODE ...`). Only those small
/// files are read: the descriptors' targets are never touched, so a file open on a wedged mount
/// cannot hang the refusal.
fn holds_lock_on(pid: i32, dev: u64, ino: u64) -> bool {
    let wanted = format!(
        "{:02x}:{:02x}:{ino}",
        nix::sys::stat::major(dev),
        nix::sys::stat::minor(dev)
    );
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return false;
    };
    fds.filter_map(Result::ok).any(|fd| {
        std::fs::read_to_string(fd.path()).is_ok_and(|info| {
            info.lines().any(|l| {
                l.starts_with("lock:")
                    && l.contains("FLOCK")
                    && l.split_whitespace().any(|f| f == wanted)
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_of_the_same_inode_is_refused_naming_the_holder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("x.daf");
        std::fs::create_dir(&dir).unwrap();
        let link = tmp.path().join("link.daf");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        let held = lock_source(dir.to_str().unwrap()).unwrap().unwrap();
        // Another open file description of the same directory, reached through a symlink.
        let other = File::open(&link).unwrap();
        let Err((other, errno)) = Flock::lock(other, FlockArg::LockExclusiveNonblock) else {
            panic!("the second lock must fail");
        };
        assert_eq!(errno, Errno::EWOULDBLOCK);
        // The holder is this process, which `holders` leaves out; nothing else holds it. (A child
        // another test is spawning holds copies of this process's descriptors until its `exec`:
        // not counted.)
        let me = i32::try_from(std::process::id()).unwrap();
        let others: Vec<i32> = holders(&other)
            .into_iter()
            .filter(|pid| parent(*pid) != Some(me))
            .collect();
        assert!(others.is_empty(), "{others:?}");
        drop(held);
        assert!(lock_source(link.to_str().unwrap()).unwrap().is_some());
    }

    #[test]
    fn the_holder_is_found_through_fdinfo_and_its_children_are_left_out() {
        let tmp = tempfile::tempdir().unwrap();
        let archive = tmp.path().join("x.daf.zarr.zip");
        std::fs::write(&archive, b"").unwrap();
        // flock(1) holds the lock and runs a shell (its child, inheriting the descriptor).
        let mut holder = std::process::Command::new("flock")
            .arg("-x")
            .arg(&archive)
            .args(["-c", "sleep 30"])
            .spawn()
            .unwrap();
        let mut file = File::open(&archive).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let found = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Err((back, Errno::EWOULDBLOCK)) => break holders(&back),
                Ok(lock) => {
                    assert!(Instant::now() < deadline, "flock(1) never took the lock");
                    file = lock.unlock().map_err(|(_, e)| e).unwrap();
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err((_, e)) => panic!("{e}"),
            }
        };
        let name = program(holder.id() as i32);
        holder.kill().unwrap();
        holder.wait().unwrap();
        assert_eq!(found, vec![holder.id() as i32]);
        assert_eq!(name, "flock");
    }

    #[test]
    fn groups_lock_their_archive_and_missing_sources_lock_nothing() {
        assert_eq!(
            lock_target("/a/all.dafs.zarr.zip#/g/h"),
            Some(PathBuf::from("/a/all.dafs.zarr.zip"))
        );
        assert!(lock_source("/nonexistent/x.daf").unwrap().is_none());
    }
}
