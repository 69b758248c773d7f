//! Writing the payloads of a ZIP append into the archive (`append`'s step 2), gently: a
//! large payload that is the start of a file (a staged file) is copied by the kernel
//! (`copy_file_range`: no user-space buffer, no page faults on a map of it), falling back to
//! writing the bytes we hold where the kernel cannot copy between the two files; each entry's
//! CRC-32 is computed from what the archive now holds, read back slice by slice while it is in
//! the page cache (so the recorded CRC is that of the archive's bytes, whatever the copy did);
//! and the writeback is paced: each slice's writeback starts once it is written and the one
//! before it is waited for, so at most two slices are in flight and the append's final `fsync`
//! has little left to write instead of flooding the disk queue with the whole payload while
//! readers run. None of this changes what a crash leaves: nothing lists these bytes until the
//! commit point, which follows the final `fsync` as before.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use crate::stores::Bytes;
use crate::sys::{copy_range, start_writeback, wait_writeback};

/// Bytes copied, checksummed and paced at a time.
const SLICE: u64 = 8 << 20;

/// Payloads smaller than this are written from memory (a kernel copy would cost an `open`).
const KERNEL_COPY_MIN: u64 = 1 << 20;

/// The bytes of one new entry, and the file whose first bytes they are, if any (then the
/// kernel copies them from that file).
#[derive(Clone, Debug)]
pub struct Payload {
    pub bytes: Bytes,
    pub file: Option<PathBuf>,
}

impl Payload {
    /// Bytes held in memory (or a map) only.
    pub fn bytes(bytes: Bytes) -> Payload {
        Payload { bytes, file: None }
    }
}

/// How the bytes of an append got into the archive (for the log and the tests).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Copied {
    /// Copied by the kernel from a payload's file.
    pub by_kernel: u64,
    /// Written from the bytes we hold.
    pub from_memory: u64,
    /// Whether the writeback was paced (false where `sync_file_range` is not supported).
    pub paced: bool,
}

/// Writes payloads into one archive, opened for reading and writing, from offset `start` on,
/// at increasing offsets.
pub struct Copier<'a> {
    to: &'a File,
    /// The writeback of `[waited, kicked)` was started; of everything before `waited`, done.
    kicked: u64,
    waited: u64,
    buffer: Vec<u8>,
    pub copied: Copied,
}

impl<'a> Copier<'a> {
    pub fn new(to: &'a File, start: u64) -> Copier<'a> {
        Copier {
            to,
            kicked: start,
            waited: start,
            buffer: Vec::new(),
            copied: Copied {
                paced: true,
                ..Copied::default()
            },
        }
    }

    /// Writes `payload` at offset `at` of the archive; returns the CRC-32 of the bytes the
    /// archive now holds there.
    pub fn write(&mut self, at: u64, payload: &Payload) -> io::Result<u32> {
        let len = payload.bytes.len();
        let mut source = match &payload.file {
            Some(file) if len >= KERNEL_COPY_MIN => File::open(file).ok(),
            _ => None,
        };
        let mut hasher = crc32fast::Hasher::new();
        let mut done = 0;
        while done < len {
            let n = SLICE.min(len - done);
            let mut copied = 0;
            if let Some(from) = &source {
                copied = self.kernel_copy(from, done, at + done, n);
                if copied < n {
                    source = None; // the rest, and the following slices, from memory
                }
            }
            if copied < n {
                let rest = payload
                    .bytes
                    .slice(done + copied, n - copied)
                    .ok_or_else(|| io::Error::other("payload shorter than its length"))?;
                self.to.write_all_at(rest.as_slice(), at + done + copied)?;
                self.copied.from_memory += n - copied;
            }
            self.copied.by_kernel += copied;
            self.hash_back(at + done, n, &mut hasher)?;
            self.pace(at + done + n)?;
            done += n;
        }
        Ok(hasher.finalize())
    }

    /// Copies up to `n` bytes of `from` at `from_at` to `at` by the kernel; returns how many it
    /// copied (fewer where it cannot: the caller writes the rest).
    fn kernel_copy(&self, from: &File, from_at: u64, at: u64, n: u64) -> u64 {
        let mut copied = 0;
        while copied < n {
            match copy_range(from, from_at + copied, self.to, at + copied, n - copied) {
                Ok(0) => break, // `from` ended early: it changed; the caller writes our bytes
                Ok(c) => copied += c,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    log::debug!("copy_file_range: {e}; writing the bytes instead");
                    break;
                }
            }
        }
        copied
    }

    /// Feeds `hasher` the `n` bytes of the archive at `at`.
    fn hash_back(&mut self, at: u64, n: u64, hasher: &mut crc32fast::Hasher) -> io::Result<()> {
        const BUFFER: u64 = 1 << 20;
        if self.buffer.is_empty() {
            self.buffer = vec![0; BUFFER as usize];
        }
        let mut done = 0;
        while done < n {
            let m = (BUFFER.min(n - done)) as usize;
            let buffer = &mut self.buffer[..m];
            self.to.read_exact_at(buffer, at + done)?;
            hasher.update(buffer);
            done += m as u64;
        }
        Ok(())
    }

    /// Everything before `end` is written: once a slice's worth is, start its writeback and
    /// wait for the previous one's.
    fn pace(&mut self, end: u64) -> io::Result<()> {
        if !self.copied.paced || end < self.kicked + SLICE {
            return Ok(());
        }
        let unsupported = |e: &io::Error| {
            matches!(
                e.raw_os_error(),
                Some(libc::EINVAL | libc::ENOSYS | libc::ESPIPE | libc::EOPNOTSUPP)
            )
        };
        let step = start_writeback(self.to, self.kicked, end - self.kicked).and_then(|()| {
            if self.kicked > self.waited {
                wait_writeback(self.to, self.waited, self.kicked - self.waited)
            } else {
                Ok(())
            }
        });
        match step {
            Ok(()) => {
                self.waited = self.kicked;
                self.kicked = end;
                Ok(())
            }
            Err(e) if unsupported(&e) => {
                self.copied.paced = false;
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    /// `n` bytes that differ from `seed` to `seed` and repeat no short period.
    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 12) as u8)
            .collect()
    }

    fn archive(dir: &std::path::Path) -> File {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("a.zip"))
            .unwrap()
    }

    fn read_back(file: &File, at: u64, n: usize) -> Vec<u8> {
        let mut back = vec![0; n];
        file.read_exact_at(&mut back, at).unwrap();
        back
    }

    #[test]
    fn a_staged_file_is_copied_by_the_kernel_with_paced_writeback() {
        let dir = tempfile::tempdir().unwrap();
        let data = pattern((20 << 20) + 123, 1);
        let staged = dir.path().join("staged");
        std::fs::write(&staged, &data).unwrap();
        let to = archive(dir.path());
        let mut copier = Copier::new(&to, 64);
        let payload = Payload {
            bytes: Bytes::from_vec(data.clone()),
            file: Some(staged),
        };
        assert_eq!(copier.write(64, &payload).unwrap(), crc32fast::hash(&data));
        let len = data.len() as u64;
        assert_eq!(
            copier.copied,
            Copied {
                by_kernel: len,
                from_memory: 0,
                paced: true
            }
        );
        // Two slices' writeback was started, the first one's waited for.
        assert_eq!((copier.waited, copier.kicked), (64 + SLICE, 64 + 2 * SLICE));
        assert_eq!(read_back(&to, 64, data.len()), data);
    }

    #[test]
    fn the_crc_is_of_the_bytes_the_archive_holds() {
        // The staged file was rewritten in place after its bytes were mapped (a passthrough
        // write through a handle still open): the archive gets the file's bytes, and its CRC
        // must be theirs, not that of the bytes held.
        let dir = tempfile::tempdir().unwrap();
        let held = pattern(3 << 20, 2);
        let on_disk = pattern(3 << 20, 3);
        let staged = dir.path().join("staged");
        std::fs::write(&staged, &on_disk).unwrap();
        let to = archive(dir.path());
        let mut copier = Copier::new(&to, 0);
        let payload = Payload {
            bytes: Bytes::from_vec(held.clone()),
            file: Some(staged),
        };
        let crc = copier.write(0, &payload).unwrap();
        assert_eq!(read_back(&to, 0, on_disk.len()), on_disk);
        assert_eq!(crc, crc32fast::hash(&on_disk));
        assert_ne!(crc, crc32fast::hash(&held));
    }

    #[test]
    fn what_the_kernel_cannot_copy_is_written_from_the_bytes_held() {
        let dir = tempfile::tempdir().unwrap();
        let data = pattern(10 << 20, 4);
        // A file that ends early (it changed): the kernel copies what it has, the rest is ours.
        let short = dir.path().join("short");
        std::fs::write(&short, &data[..3 << 20]).unwrap();
        let to = archive(dir.path());
        let mut copier = Copier::new(&to, 8);
        let payload = Payload {
            bytes: Bytes::from_vec(data.clone()),
            file: Some(short),
        };
        assert_eq!(copier.write(8, &payload).unwrap(), crc32fast::hash(&data));
        assert_eq!(copier.copied.by_kernel, 3 << 20);
        assert_eq!(copier.copied.from_memory, 7 << 20);
        assert_eq!(read_back(&to, 8, data.len()), data);
        // A file on another file system (tmpfs): copy_file_range fails with EXDEV.
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        let elsewhere = shm.path().join("staged");
        std::fs::write(&elsewhere, &data).unwrap();
        let mut copier = Copier::new(&to, 8);
        let payload = Payload {
            bytes: Bytes::from_vec(data.clone()),
            file: Some(elsewhere),
        };
        assert_eq!(copier.write(8, &payload).unwrap(), crc32fast::hash(&data));
        assert_eq!(copier.copied.by_kernel, 0);
        assert_eq!(copier.copied.from_memory, 10 << 20);
        assert_eq!(read_back(&to, 8, data.len()), data);
    }

    #[test]
    fn small_payloads_are_written_from_memory() {
        let dir = tempfile::tempdir().unwrap();
        let data = pattern(1000, 5);
        let staged = dir.path().join("staged");
        std::fs::write(&staged, &data).unwrap();
        let to = archive(dir.path());
        let mut copier = Copier::new(&to, 0);
        let payload = Payload {
            bytes: Bytes::from_vec(data.clone()),
            file: Some(staged),
        };
        assert_eq!(copier.write(0, &payload).unwrap(), crc32fast::hash(&data));
        assert_eq!(copier.copied.by_kernel, 0);
        assert_eq!(read_back(&to, 0, data.len()), data);
    }
}
