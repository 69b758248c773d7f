//! Directory sources: every regular file below the root becomes an entry, mapped on first access.
//!
//! Opening walks the tree once (one `readdir` per directory, one `stat` per file) and records
//! sizes and mtimes; no file is opened until its bytes are asked for. Each file is then mapped
//! once and the map is shared by every view of it.
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
                blob: mapped_file(path, meta.len()),
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

/// A blob for the first `len` bytes of the file at `path`, mapped on first access. The file is
/// opened without following a final symbolic link and without blocking, and must be a regular
/// file.
pub fn mapped_file(path: PathBuf, len: u64) -> Arc<Blob> {
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
        let map = map_readonly(&file).map_err(|e| StoreError::io(&path, e))?;
        Bytes::from_map(Arc::new(map))
            .slice(0, len)
            .ok_or_else(|| StoreError::Produce(format!("{} shrank while mounted", path.display())))
    })
}

/// Writes `data` to `root/rel` atomically: a temporary name in the same directory (short and
/// fixed-length: `.daf-mount-tmp.PID.N`), `fsync`, then
/// a rename over the target and an `fsync` of the directory. A crash never leaves a partial file
/// under the real name. Returns the new file as an entry (mapped on first access).
pub fn write_atomic(root: &Path, rel: &str, data: &[u8]) -> Result<Entry, StoreError> {
    let path = root.join(rel);
    let parent = path.parent().unwrap_or(root).to_path_buf();
    fs::create_dir_all(&parent).map_err(|e| StoreError::io(&parent, e))?;
    // A short temporary name of fixed form, so any name that fits NAME_MAX can be written.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = parent.join(format!(".daf-mount-tmp.{}.{n}", std::process::id()));
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
        blob: mapped_file(path, meta.len()),
        mtime,
    })
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
    fn walks_files_and_maps_them_lazily() {
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
        assert!(bytes.is_mapped());
        assert_eq!(bytes.as_slice(), b"12345678");
        assert_eq!(idx.get("empty").unwrap().blob.bytes().unwrap().len(), 0);
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
