//! Who sends a request: the FUSE request's pid is the calling *thread's* id; commits at close
//! need the process (thread group) it belongs to, read from `/proc/<tid>/status` (`Tgid:`). A
//! process in another pid namespace (pid 0) or one that is gone is unknown (`None`).
//!
//! Only `status` is read: reading `/proc/<pid>/stat` (for the start time, to tell a process
//! that reuses a dead opener's id from the opener) blocks while that process is in `execve`,
//! and a flush comes precisely from inside `execve` (closing `O_CLOEXEC` descriptors): the
//! daemon and the exec would wait for each other.
//!
//! Also what a request is about, as log lines name it: the mount path of an inode or a name.

use std::ffi::OsStr;

use fuser::Request;

use crate::core::Process;

use super::FuseAdapter;

impl FuseAdapter {
    /// The mount path of `ino`, for log lines (`/` for the root).
    pub(super) fn at(&self, ino: u64) -> String {
        match self.core.path_of(ino) {
            Some(path) if path.is_empty() => "/".into(),
            Some(path) => path,
            None => format!("inode {ino}"),
        }
    }

    /// The mount path of `name` in directory `parent`, for log lines.
    pub(super) fn at_child(&self, parent: u64, name: &OsStr) -> String {
        match self.at(parent).as_str() {
            "/" => name.to_string_lossy().into_owned(),
            dir => format!("{dir}/{}", name.to_string_lossy()),
        }
    }

    /// Records which process opened `fh` for writing (only its closes commit).
    pub(super) fn record_opener(&self, req: &Request, fh: u64) {
        if let Some(opener) = process_of(req.pid()) {
            self.core.opened_by(fh, opener);
        }
    }
}

/// The process thread `tid` belongs to.
pub(super) fn process_of(tid: u32) -> Option<Process> {
    if tid == 0 {
        return None;
    }
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    tgid_in(&status).map(|tgid| Process { tgid })
}

/// The `Tgid:` of a `/proc/<tid>/status` text.
fn tgid_in(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::{process_of, tgid_in};

    #[test]
    fn a_thread_resolves_to_its_process() {
        let me = process_of(std::process::id()).unwrap();
        assert_eq!(me.tgid, std::process::id());
        // Another thread of this process: its id is not the process id, its process is.
        let (tid, other) = std::thread::spawn(|| {
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let tid: u32 = status
                .lines()
                .find_map(|l| l.strip_prefix("Pid:"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            (tid, process_of(tid))
        })
        .join()
        .unwrap();
        assert_ne!(tid, std::process::id());
        assert_eq!(other, Some(me));
        assert_eq!(process_of(0), None);
    }

    #[test]
    fn the_tgid_line_is_found() {
        assert_eq!(
            tgid_in("Name:\tx\nUmask:\t0022\nTgid:\t4242\nPid:\t4243\n"),
            Some(4242)
        );
        assert_eq!(tgid_in("Name:\tx\n"), None);
    }
}
