//! Directory sources: every regular file below the root becomes an entry, read on first access.
//!
//! Opening walks the tree once (one `readdir` per directory, one `stat` per file) and records
//! sizes and mtimes; no file is opened until its bytes are asked for. A small file (at most
//! [`SMALL_FILE`] bytes: documents, scalars, small payloads) is then read once into a buffer
//! counted against [`SMALL_FILES`]; a larger one is mapped once. Either is shared by every view
//! of the file. Small files are never mapped because a process may hold only
//! `vm.max_map_count` maps (65,530 by default), far fewer than the files of a large Daf.
//!
//! The walk never leaves the source: a symbolic link is followed only when its target, fully
//! resolved, is a regular file inside the (resolved) root; links that point outside, dangle,
//! loop or name a directory are skipped with a warning, as are FIFOs, sockets and devices (never
//! opened: opening a FIFO would block). Files are opened with `O_NOFOLLOW | O_NONBLOCK` at their
//! resolved path and must still be regular files then.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::bytes::Budget;
use super::store::IndexedStore;
use super::{Blob, Bytes, Entry, StoreError, StoreIndex};
use crate::sys::map_readonly;

/// Deepest directory level walked (Daf trees are a few levels deep; a chunked Zarr array with
/// `/` separators adds one level per dimension).
const MAX_DEPTH: usize = 48;

/// Walks `root` into an index of its regular files (keys are `/`-separated relative paths).
/// Symbolic links are followed only to regular files inside the root.
pub fn open_directory(root: &Path) -> Result<StoreIndex, StoreError> {
    let root_meta = fs::metadata(root).map_err(|e| StoreError::io(root, e))?;
    let real_root = fs::canonicalize(root).map_err(|e| StoreError::io(root, e))?;
    let mut entries = BTreeMap::new();
    let listing = fs::read_dir(root).map_err(|e| StoreError::io(root, e))?;
    let mut walk = Walk {
        real_root,
        out: &mut entries,
    };
    walk.dir(root, "", listing, 0)?;
    Ok(StoreIndex::new(entries, root_meta.modified().ok()))
}

/// A directory as a [`Store`]: the walk of [`open_directory`], its files read or mapped on first
/// access.
pub fn open_store(root: &Path) -> Result<IndexedStore, StoreError> {
    let what = format!("directory {}", root.display());
    Ok(IndexedStore::new(what, open_directory(root)?, true))
}

struct Walk<'a> {
    real_root: PathBuf,
    out: &'a mut BTreeMap<String, Entry>,
}

impl Walk<'_> {
    fn dir(
        &mut self,
        dir: &Path,
        prefix: &str,
        listing: fs::ReadDir,
        depth: usize,
    ) -> Result<(), StoreError> {
        for item in listing {
            let item = item.map_err(|e| StoreError::io(dir, e))?;
            let Some(name) = item.file_name().to_str().map(str::to_string) else {
                log::warn!(
                    "skipping a file name that is not UTF-8 in {}",
                    dir.display()
                );
                continue;
            };
            let path = item.path();
            let key = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let file_type = item.file_type().map_err(|e| StoreError::io(&path, e))?;
            if file_type.is_dir() {
                if depth + 1 >= MAX_DEPTH {
                    log::warn!(
                        "skipping {}: more than {MAX_DEPTH} directory levels",
                        path.display()
                    );
                    continue;
                }
                match fs::read_dir(&path) {
                    Ok(listing) => self.dir(&path, &key, listing, depth + 1)?,
                    Err(e) => log::warn!("skipping {}: {e}", path.display()),
                }
            } else if file_type.is_file() {
                self.file(path, key);
            } else if file_type.is_symlink() {
                self.symlink(&path, key);
            } else {
                log::warn!(
                    "skipping {}: not a regular file (FIFO, socket or device)",
                    path.display()
                );
            }
        }
        Ok(())
    }

    fn file(&mut self, path: PathBuf, key: String) {
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_file() => meta,
            Ok(_) => {
                log::warn!("skipping {}: changed while walked", path.display());
                return;
            }
            Err(e) => {
                log::warn!("skipping {}: {e}", path.display());
                return;
            }
        };
        let Ok(mtime) = meta.modified() else {
            log::warn!("skipping {}: no modification time", path.display());
            return;
        };
        self.out.insert(
            key,
            Entry {
                blob: file_blob(path, meta.len()),
                mtime,
            },
        );
    }

    /// A symbolic link: kept only if it resolves to a regular file inside the root, and then
    /// served from the resolved path.
    fn symlink(&mut self, path: &Path, key: String) {
        let target = match fs::canonicalize(path) {
            Ok(target) => target,
            Err(e) => {
                log::warn!("skipping symbolic link {}: {e}", path.display());
                return;
            }
        };
        if !target.starts_with(&self.real_root) {
            log::warn!(
                "skipping symbolic link {}: it points outside the source",
                path.display()
            );
            return;
        }
        match fs::metadata(&target) {
            Ok(meta) if meta.is_file() => self.file(target, key),
            Ok(meta) if meta.is_dir() => log::warn!(
                "skipping symbolic link {}: links to directories are not followed",
                path.display()
            ),
            Ok(_) => log::warn!(
                "skipping symbolic link {}: not a regular file (FIFO, socket or device)",
                path.display()
            ),
            Err(e) => log::warn!("skipping symbolic link {}: {e}", path.display()),
        }
    }
}

/// Files up to this size are read into a buffer (one `pread`) instead of being mapped. A process
/// may hold only `vm.max_map_count` maps (65,530 by default), and a directory source of a few
/// hundred thousand small documents and payloads must not run out of them. 64 KiB is 16 pages:
/// below that a map saves little (the kernel serves the payloads of directory sources by
/// passthrough anyway, see `fuse::kernel_cache`), and one `pread` costs less than `mmap` plus a
/// fault per page.
pub const SMALL_FILE: u64 = 64 << 10;

/// At most this many bytes of small files are held in buffers at once (they live as long as the
/// blobs that read them, i.e. the mount); past it small files are mapped like large ones. With
/// 64 KiB files that is 4,096 buffers; with the documents of a typical Daf (tens of bytes) it is
/// millions.
pub static SMALL_FILES: Budget = Budget::new(256 << 20);

/// A blob for the first `len` bytes of the file at `path`, produced on first access: read into a
/// buffer when it is small (at most [`SMALL_FILE`] bytes, within the [`SMALL_FILES`] budget),
/// mapped otherwise. The file is opened without following a final symbolic link and without
/// blocking, and must be a regular file.
pub fn file_blob(path: PathBuf, len: u64) -> Arc<Blob> {
    Blob::whole_file(path.clone(), len, move || {
        if len == 0 {
            return Ok(Bytes::empty());
        }
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        let meta = file.metadata().map_err(|e| StoreError::io(&path, e))?;
        if !meta.is_file() {
            return Err(StoreError::Produce(format!(
                "{} is no longer a regular file",
                path.display()
            )));
        }
        let shrank = || StoreError::Produce(format!("{} shrank while mounted", path.display()));
        if len <= SMALL_FILE {
            if let Some(reservation) = SMALL_FILES.reserve(len) {
                return read_small(&file, len)
                    .map_err(|e| StoreError::io(&path, e))?
                    .map(|data| Bytes::from_reserved(data, reservation))
                    .ok_or_else(shrank);
            }
        }
        let map = map_readonly(&file).map_err(|e| StoreError::io(&path, e))?;
        Bytes::from_map(Arc::new(map))
            .slice(0, len)
            .ok_or_else(shrank)
    })
}

/// The first `len` bytes of `file` (one `pread`, more only if the kernel returns a short read),
/// or `None` if the file is shorter now.
fn read_small(file: &File, len: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::FileExt;
    let mut data = vec![0u8; usize::try_from(len).unwrap_or(usize::MAX)];
    let mut done = 0;
    while done < data.len() {
        match file.read_at(&mut data[done..], done as u64) {
            Ok(0) => return Ok(None),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(data))
}

/// Writes `data` to `root/rel` atomically: a temporary name in the same directory (short and
/// fixed-length: `.daf-mount-tmp.PID.N`), `fsync`, then
/// a rename over the target and an `fsync` of the directory. A crash never leaves a partial file
/// under the real name. Returns the new file as an entry (read or mapped on first access).
pub fn write_atomic(root: &Path, rel: &str, data: &[u8]) -> Result<Entry, StoreError> {
    let path = root.join(rel);
    let parent = path.parent().unwrap_or(root).to_path_buf();
    fs::create_dir_all(&parent).map_err(|e| StoreError::io(&parent, e))?;
    // A short temporary name of fixed form, so any name that fits NAME_MAX can be written.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = parent.join(format!("{TEMP_PREFIX}{}.{n}", std::process::id()));
    let result = (|| {
        let mut file = File::create(&temp)?;
        std::io::Write::write_all(&mut file, data)?;
        file.sync_all()?;
        fs::rename(&temp, &path)?;
        File::open(&parent)?.sync_all()
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&temp);
        return Err(StoreError::io(&path, e));
    }
    let meta = fs::metadata(&path).map_err(|e| StoreError::io(&path, e))?;
    let mtime = meta.modified().map_err(|e| StoreError::io(&path, e))?;
    Ok(Entry {
        blob: file_blob(path, meta.len()),
        mtime,
    })
}

/// How daf-mount's own temporary files in a source are named (`.daf-mount-tmp.PID.N`): a copy
/// or a rewrite is written under such a name, then renamed into place.
pub const TEMP_PREFIX: &str = ".daf-mount-tmp.";

/// Removes the temporary files ([`TEMP_PREFIX`]) a killed daemon left in the directory source
/// `root` (a crash between a temporary's creation and its rename); returns how many. Call only
/// with the source's writer lock held and no commit running, after a swap left in the middle
/// was finished (its record names the temporaries it still renames). Symbolic links are not
/// followed.
pub fn remove_temporaries(root: &Path) -> std::io::Result<usize> {
    let mut removed = 0;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                dirs.push(entry.path());
            } else if entry
                .file_name()
                .as_encoded_bytes()
                .starts_with(TEMP_PREFIX.as_bytes())
            {
                match fs::remove_file(entry.path()) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                    _ => removed += 1,
                }
            }
        }
    }
    Ok(removed)
}

/// Creates `root/rel` and its parents if missing.
pub fn ensure_dir(root: &Path, rel: &str) -> Result<(), StoreError> {
    let path = root.join(rel);
    fs::create_dir_all(&path).map_err(|e| StoreError::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_files_and_reads_them_lazily() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("a/b")).unwrap();
        fs::write(tmp.path().join("a/b/x.data"), b"12345678").unwrap();
        fs::write(tmp.path().join("top.json"), b"{}").unwrap();
        fs::write(tmp.path().join("empty"), b"").unwrap();
        let idx = open_directory(tmp.path()).unwrap();
        assert_eq!(
            idx.keys().collect::<Vec<_>>(),
            vec!["a/b/x.data", "empty", "top.json"]
        );
        let entry = idx.get("a/b/x.data").unwrap();
        assert!(!entry.blob.is_materialized());
        assert_eq!(entry.blob.len().unwrap(), 8);
        let bytes = entry.blob.bytes().unwrap();
        assert!(!bytes.is_mapped(), "a small file is read, not mapped");
        assert_eq!(bytes.as_slice(), b"12345678");
        assert_eq!(idx.get("empty").unwrap().blob.bytes().unwrap().len(), 0);
    }

    #[test]
    fn large_files_are_mapped_small_ones_read() {
        let tmp = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..SMALL_FILE + 1).map(|i| (i % 251) as u8).collect();
        let edge: Vec<u8> = (0..SMALL_FILE).map(|i| (i % 7) as u8).collect();
        fs::write(tmp.path().join("big.data"), &big).unwrap();
        fs::write(tmp.path().join("edge.data"), &edge).unwrap();
        let idx = open_directory(tmp.path()).unwrap();
        let bytes = idx.get("big.data").unwrap().blob.bytes().unwrap();
        assert!(bytes.is_mapped());
        assert_eq!(bytes.as_slice(), big.as_slice());
        let bytes = idx.get("edge.data").unwrap().blob.bytes().unwrap();
        assert!(!bytes.is_mapped());
        assert_eq!(bytes.as_slice(), edge.as_slice());
    }

    /// More small files than a process may hold maps (`vm.max_map_count`, 65,530 by default):
    /// every one of them must still read (they used to fail with ENOMEM past the limit).
    #[test]
    fn more_small_files_than_the_map_limit_all_read() {
        let limit: usize = fs::read_to_string("/proc/sys/vm/max_map_count")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(65_530);
        let count = limit + 5_000;
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..count {
            let dir = tmp.path().join(format!("d{}", i / 1000));
            if i % 1000 == 0 {
                fs::create_dir(&dir).unwrap();
            }
            fs::write(dir.join(format!("f{i}")), i.to_string()).unwrap();
        }
        let idx = open_directory(tmp.path()).unwrap();
        let mut read = 0;
        for i in 0..count {
            let key = format!("d{}/f{i}", i / 1000);
            let bytes = idx.get(&key).unwrap().blob.bytes().unwrap();
            assert_eq!(bytes.as_slice(), i.to_string().as_bytes(), "{key}");
            read += 1;
        }
        assert_eq!(read, count);
    }

    #[test]
    fn atomic_writes_replace_whole_files() {
        let tmp = tempfile::tempdir().unwrap();
        let entry = write_atomic(tmp.path(), "a/b/c.json", b"{}").unwrap();
        assert_eq!(entry.blob.bytes().unwrap().as_slice(), b"{}");
        write_atomic(tmp.path(), "a/b/c.json", b"[1]").unwrap();
        assert_eq!(fs::read(tmp.path().join("a/b/c.json")).unwrap(), b"[1]");
        assert_eq!(
            fs::read_dir(tmp.path().join("a/b")).unwrap().count(),
            1,
            "no temporary file left"
        );
    }

    #[test]
    fn symlinks_are_followed_only_to_files_inside_the_root() {
        use std::os::unix::fs::symlink;
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("secret"), b"secret").unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("src");
        fs::create_dir_all(root.join("d")).unwrap();
        fs::write(root.join("d/inside"), b"inside").unwrap();
        symlink("d/inside", root.join("ok")).unwrap();
        symlink(outside.path().join("secret"), root.join("escape")).unwrap();
        symlink("../../../../../../../../etc/passwd", root.join("dotdot")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        symlink("missing", root.join("dangling")).unwrap();
        symlink("d", root.join("dirlink")).unwrap();
        symlink("/", root.join("rootlink")).unwrap();
        nix::unistd::mkfifo(&root.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        symlink("fifo", root.join("fifolink")).unwrap();
        let idx = open_directory(&root).unwrap();
        assert_eq!(idx.keys().collect::<Vec<_>>(), vec!["d/inside", "ok"]);
        assert_eq!(
            idx.get("ok").unwrap().blob.bytes().unwrap().as_slice(),
            b"inside"
        );
    }

    #[test]
    fn names_up_to_name_max_can_be_written() {
        let tmp = tempfile::tempdir().unwrap();
        let name = format!("{}.json", "n".repeat(250));
        write_atomic(tmp.path(), &format!("a/{name}"), b"{}").unwrap();
        assert_eq!(fs::read(tmp.path().join("a").join(&name)).unwrap(), b"{}");
    }

    #[test]
    fn missing_directory_is_an_error_naming_it() {
        let err = open_directory(Path::new("/nonexistent/daf")).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/daf"));
    }
}
