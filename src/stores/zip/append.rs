//! Appending entries to a ZIP archive without ever leaving an invalid archive on disk.
//!
//! Layout kept: `[entries][gap][central directory][ZIP64 end record][locator][end record]`. An
//! append of new entries (stored, 8-byte aligned data, ZIP64, like `daf-formats.md` §7.1):
//! 1. if the gap before the central directory is too small, a *tail write* relocates the
//!    directory (and a fresh trailer) further out, leaving a gap; the old directory and trailer
//!    become part of the gap;
//! 2. the new data and local headers are written into the gap (by [`crate::stores::zip::copy`]: a kernel
//!    copy from a staged file, the CRC-32 read back from the archive, paced writeback) and
//!    `fsync`ed: the archive is unchanged for every reader, as the directory does not list them;
//! 3. a *tail write* puts the new directory records and trailer right after the existing records
//!    (over the old trailer) and `fsync`s: the commit point.
//!
//! Tail writes are small, but a process killed in the middle of one would leave a torn trailer, so
//! the daemon hands them to a [`TailWriter`] helper process forked at start-up: it reads a whole
//! job before writing anything and finishes a job even if the daemon dies. Existing records are
//! copied verbatim, so entries of foreign archives keep their method, CRC, times and attributes.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::stores::lock;
use crate::stores::zip::copy::{Copier, Payload};
use crate::stores::zip::write::{
    central_record, dos_time, local_header, local_header_len, padding, trailer,
};
use crate::stores::zip::{map_archive, open_archive_on_one_thread};
use crate::stores::{Blob, Bytes, Entry, StoreError};
use crate::sys::{fork, Forked};

/// Performs tail writes (`pwrite` + `fsync`) so that they complete even if the daemon is killed.
#[derive(Debug)]
enum TailWriter {
    /// Write in this process (tests, and before a helper is started).
    InProcess,
    /// Jobs go to a forked helper over a pipe; it answers 4 bytes per job (0 or the errno).
    Helper(Mutex<(File, File)>),
}

static TAIL_WRITER: OnceLock<TailWriter> = OnceLock::new();

/// The tail-writing helper's program name (`/proc/PID/comm`, at most 15 bytes).
pub const TAIL_WRITER_NAME: &str = "daf-tail-writer";

/// Forks the tail-writing helper. Call once, while the process is still single-threaded (and
/// small: the helper shares the daemon's pages until either writes them). The helper leaves the
/// terminal's session (a Ctrl-C or hang-up meant for the daemon does not cut a job short), takes
/// the name [`TAIL_WRITER_NAME`] and closes every inherited descriptor but `keep` (the daemon's
/// writer lock, so that the archive stays locked until the helper has finished its last job).
pub fn start_tail_writer(keep: &[std::os::fd::RawFd]) -> std::io::Result<()> {
    let (job_read, job_write) = nix::unistd::pipe()?;
    let (ack_read, ack_write) = nix::unistd::pipe()?;
    match fork()? {
        Forked::Child => {
            drop(job_write);
            drop(ack_read);
            let _ = nix::unistd::setsid();
            // Named apart from the daemon (a refusal names the lock's holder, not its helper).
            let _ = std::fs::write("/proc/self/comm", TAIL_WRITER_NAME);
            let mut kept = vec![job_read.as_raw_fd(), ack_write.as_raw_fd()];
            kept.extend_from_slice(keep);
            crate::sys::close_other_fds(&kept);
            serve_tail_jobs(File::from(job_read), File::from(ack_write));
            std::process::exit(0);
        }
        Forked::Parent(_) => {
            drop(job_read);
            drop(ack_write);
            let _ = TAIL_WRITER.set(TailWriter::Helper(Mutex::new((
                File::from(job_write),
                File::from(ack_read),
            ))));
            Ok(())
        }
    }
}

/// The helper's loop: read a complete job, perform it, answer (0 or the errno). Exits when the
/// daemon is gone.
fn serve_tail_jobs(mut jobs: File, mut acks: File) {
    loop {
        let mut header = [0u8; 8];
        if jobs.read_exact(&mut header).is_err() {
            return;
        }
        let mut job = vec![0u8; u64::from_le_bytes(header) as usize];
        if jobs.read_exact(&mut job).is_err() {
            return; // a partial job is never performed
        }
        // The answer: 0 for success, else the OS error number (the daemon reports ENOSPC as
        // ENOSPC), as 4 little-endian bytes.
        let errno = match perform(&job) {
            Ok(()) => 0,
            Err(e) => e.raw_os_error().unwrap_or(libc::EIO),
        };
        let _ = acks.write_all(&errno.to_le_bytes());
    }
}

/// A job: path length, path, offset, then the bytes to write there.
fn encode_job(path: &Path, offset: u64, data: &[u8]) -> Vec<u8> {
    let path = path.as_os_str().as_encoded_bytes();
    let mut job = Vec::with_capacity(24 + path.len() + data.len());
    job.extend_from_slice(&(path.len() as u64).to_le_bytes());
    job.extend_from_slice(path);
    job.extend_from_slice(&offset.to_le_bytes());
    job.extend_from_slice(data);
    job
}

fn perform(job: &[u8]) -> std::io::Result<()> {
    let bad = || std::io::Error::other("bad tail job");
    let path_len = u64::from_le_bytes(
        job.get(..8)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    ) as usize;
    let path = job.get(8..8 + path_len).ok_or_else(bad)?;
    let offset = u64::from_le_bytes(
        job.get(8 + path_len..16 + path_len)
            .ok_or_else(bad)?
            .try_into()
            .map_err(|_| bad())?,
    );
    let data = job.get(16 + path_len..).ok_or_else(bad)?;
    // SAFETY-free: the path bytes came from `as_encoded_bytes` of a path in this same program.
    let path = PathBuf::from(std::ffi::OsStr::new(
        std::str::from_utf8(path).map_err(|_| bad())?,
    ));
    let file = OpenOptions::new().write(true).open(path)?;
    file.write_all_at(data, offset)?;
    file.sync_all()
}

/// Writes `data` at `offset` of `path` and syncs, through the helper when there is one.
fn tail_write(path: &Path, offset: u64, data: &[u8]) -> std::io::Result<()> {
    let job = encode_job(path, offset, data);
    match TAIL_WRITER.get_or_init(|| TailWriter::InProcess) {
        TailWriter::InProcess => perform(&job),
        TailWriter::Helper(pipes) => {
            let mut pipes = lock(pipes);
            let (jobs, acks) = &mut *pipes;
            let mut message = (job.len() as u64).to_le_bytes().to_vec();
            message.extend_from_slice(&job);
            jobs.write_all(&message)?;
            let mut ack = [0u8; 4];
            acks.read_exact(&mut ack)?;
            match i32::from_le_bytes(ack) {
                0 => Ok(()),
                errno => Err(std::io::Error::from_raw_os_error(errno)),
            }
        }
    }
}

struct Planned {
    name: String,
    header_offset: u64,
    pad: u64,
    data_offset: u64,
    /// Known once the data is written.
    crc: u32,
    size: u64,
}

fn central(p: &Planned, dos: (u16, u16), mtime: u32) -> Vec<u8> {
    central_record(
        p.name.as_bytes(),
        p.crc,
        p.size,
        p.header_offset,
        dos,
        Some(mtime),
    )
}

/// Appends `entries` (name, bytes) to the archive at `path`; returns each new entry (its bytes
/// as a range of a fresh map of the archive).
pub fn append(
    path: &Path,
    entries: &[(String, Bytes)],
) -> Result<Vec<(String, Entry)>, StoreError> {
    append_with(path, &mut None, &[], |_| {
        entries
            .iter()
            .map(|(name, bytes)| (name.clone(), Payload::bytes(bytes.clone())))
            .collect()
    })
}

/// What an append learnt of the archive it wrote (see [`append_with`]): where its central
/// directory is and where its last entry ends, how many records it has, and which names asked
/// about are in it. Valid while the file is exactly as that append left it (same device, inode,
/// length, modification and change times), so that the next append of a mount need not parse a
/// central directory of a million records again (a quarter of a second on both cores, while
/// readers wait for a CPU).
#[derive(Debug, Clone)]
pub struct ArchiveTail {
    path: PathBuf,
    file: FileState,
    cd_offset: u64,
    cd_size: u64,
    count: u64,
    entries_end: u64,
    present: HashSet<String>,
}

/// What tells a file changed: its device, inode, length, and modification and change times.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileState([i64; 7]);

impl FileState {
    fn of(meta: &std::fs::Metadata) -> FileState {
        FileState([
            meta.dev() as i64,
            meta.ino() as i64,
            meta.size() as i64,
            meta.mtime(),
            meta.mtime_nsec(),
            meta.ctime(),
            meta.ctime_nsec(),
        ])
    }
}

impl ArchiveTail {
    /// The archive at `path` mapped, and what an append needs of it: `learnt` when it still
    /// describes the file and holds every name `asked`, else what a parse of the archive says.
    fn current(
        path: &Path,
        learnt: Option<ArchiveTail>,
        asked: &[String],
    ) -> Result<(Bytes, ArchiveTail), StoreError> {
        let file = FileState::of(&std::fs::metadata(path).map_err(|e| StoreError::io(path, e))?);
        let learnt = learnt.filter(|t| {
            t.path == path && t.file == file && asked.iter().all(|n| t.present.contains(n))
        });
        if let Some(tail) = learnt {
            return Ok((map_archive(path)?.0, tail));
        }
        #[cfg(test)]
        PARSES.with(|p| p.set(p.get() + 1));
        // On one core: the other serves the readers meanwhile (at 1M entries, a parse on both
        // made a reader wait 3-5 ms for a CPU).
        let archive = open_archive_on_one_thread(path)?;
        let entries_end = archive
            .records
            .iter()
            .map(|r| r.data_offset + r.compressed_size + if r.flags & 8 != 0 { 24 } else { 0 })
            .max()
            .unwrap_or(0)
            .min(archive.cd_offset);
        let present = asked
            .iter()
            .filter(|n| archive.records.iter().any(|r| r.name == **n))
            .cloned()
            .collect();
        let tail = ArchiveTail {
            path: path.to_path_buf(),
            file,
            cd_offset: archive.cd_offset,
            cd_size: archive.cd_size,
            count: archive.records.len() as u64,
            entries_end,
            present,
        };
        Ok((archive.bytes, tail))
    }
}

/// [`append`] of the entries that `plan` chooses, told which of the names `asked` the archive
/// holds. `learnt` is what the caller's previous append learnt (taken; left with what this one
/// learnt if it succeeds): while it still describes the file, the archive is not parsed.
pub fn append_with(
    path: &Path,
    learnt: &mut Option<ArchiveTail>,
    asked: &[String],
    plan: impl FnOnce(&dyn Fn(&str) -> bool) -> Vec<(String, Payload)>,
) -> Result<Vec<(String, Entry)>, StoreError> {
    let io = |e: std::io::Error| StoreError::io(path, e);
    let started = std::time::Instant::now();
    let (bytes, known) = ArchiveTail::current(path, learnt.take(), asked)?;
    let entries = &plan(&|name| known.present.contains(name));
    let data = bytes.as_slice();
    let entries_end = known.entries_end;
    let now = SystemTime::now();
    let dos = dos_time(now);
    let unix_mtime = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as u32;
    // Plan the new entries from the end of the last entry.
    let mut planned = Vec::with_capacity(entries.len());
    let mut at = entries_end;
    for (name, payload) in entries {
        let pad = padding(at + 50 + name.len() as u64);
        let data_offset = at + local_header_len(name.len(), pad);
        planned.push(Planned {
            name: name.clone(),
            header_offset: at,
            pad,
            data_offset,
            crc: 0,
            size: payload.bytes.len(),
        });
        at = data_offset + payload.bytes.len();
    }
    let old_cd =
        data[known.cd_offset as usize..(known.cd_offset + known.cd_size) as usize].to_vec();
    let mut cd_offset = known.cd_offset;
    if at > cd_offset {
        // Not enough room before the directory: move it out of the way first (with slack for the
        // next appends), as one tail write.
        let slack = ((at - entries_end) / 8).clamp(1 << 20, 64 << 20);
        let new_offset = (at + slack).max(bytes.len());
        let mut tail = old_cd.clone();
        tail.extend(trailer(known.count, new_offset, known.cd_size));
        tail_write(path, new_offset, &tail).map_err(io)?;
        cd_offset = new_offset;
    }
    // The new entries go into the gap; nothing lists them yet.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(io)?;
    let mut copier = Copier::new(&file, entries_end);
    for (plan, (_, payload)) in planned.iter_mut().zip(entries) {
        plan.crc = copier.write(plan.data_offset, payload).map_err(io)?;
        let header = local_header(plan.name.as_bytes(), plan.crc, plan.size, plan.pad, dos);
        file.write_all_at(&header, plan.header_offset).map_err(io)?;
    }
    file.sync_all().map_err(io)?;
    log::debug!(
        "wrote {} entries into {} in {:?}: {:?}",
        planned.len(),
        path.display(),
        started.elapsed(),
        copier.copied
    );
    // Commit: the new records and trailer after the existing records.
    let mut records = Vec::new();
    for plan in &planned {
        records.extend(central(plan, dos, unix_mtime));
    }
    let cd_size = known.cd_size + records.len() as u64;
    let mut tail = records;
    tail.extend(trailer(
        known.count + planned.len() as u64,
        cd_offset,
        cd_size,
    ));
    tail_write(path, cd_offset + known.cd_size, &tail).map_err(io)?;
    // Drop whatever followed the old trailer (an archive comment): the archive ends here now.
    let end = cd_offset + known.cd_size + tail.len() as u64;
    if file.metadata().map_err(io)?.len() > end {
        file.set_len(end).map_err(io)?;
    }
    let mut present = known.present;
    present.extend(
        asked
            .iter()
            .filter(|n| planned.iter().any(|p| p.name == **n))
            .cloned(),
    );
    *learnt = Some(ArchiveTail {
        path: known.path,
        file: FileState::of(&file.metadata().map_err(io)?),
        cd_offset,
        cd_size,
        count: known.count + planned.len() as u64,
        entries_end: at,
        present,
    });
    // Serve the new entries from a map of the grown archive.
    let map = Bytes::from_map(Arc::new(
        crate::sys::map_readonly(&File::open(path).map_err(io)?).map_err(io)?,
    ));
    planned
        .iter()
        .map(|p| {
            let bytes = map
                .slice(p.data_offset, p.size)
                .ok_or_else(|| StoreError::CorruptZip {
                    path: path.to_path_buf(),
                    what: "appended entry not found".into(),
                })?;
            Ok((
                p.name.clone(),
                Entry {
                    blob: Blob::ready(bytes),
                    mtime: now,
                },
            ))
        })
        .collect()
}

#[cfg(test)]
thread_local! {
    /// Tests only: how many archives this thread's appends parsed.
    static PARSES: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
#[path = "append_tests.rs"]
mod tests;
