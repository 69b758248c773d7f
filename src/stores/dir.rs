//! Directory sources: every regular file below the root becomes an entry, mapped on first access.
//!
//! Opening walks the tree once (one `readdir` per directory, one `stat` per file) and records
//! sizes and mtimes; no file is opened until its bytes are asked for. Each file is then mapped
//! once and the map is shared by every view of it.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Blob, Bytes, Entry, StoreError, StoreIndex};
use crate::sys::map_readonly;

/// Walks `root` into an index of its regular files (keys are `/`-separated relative paths).
/// Symbolic links to files are followed; links to directories are not (no cycles).
pub fn open_directory(root: &Path) -> Result<StoreIndex, StoreError> {
    let root_meta = fs::metadata(root).map_err(|e| StoreError::io(root, e))?;
    let mut entries = BTreeMap::new();
    walk(root, "", &mut entries)?;
    Ok(StoreIndex::new(entries, root_meta.modified().ok()))
}

fn walk(dir: &Path, prefix: &str, out: &mut BTreeMap<String, Entry>) -> Result<(), StoreError> {
    let listing = fs::read_dir(dir).map_err(|e| StoreError::io(dir, e))?;
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
            walk(&path, &key, out)?;
            continue;
        }
        let meta = match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => meta,
            Ok(_) => continue,
            Err(e) => {
                log::warn!("skipping {}: {e}", path.display());
                continue;
            }
        };
        let mtime = meta.modified().map_err(|e| StoreError::io(&path, e))?;
        out.insert(
            key,
            Entry {
                blob: mapped_file(path, meta.len()),
                mtime,
            },
        );
    }
    Ok(())
}

/// A blob for the first `len` bytes of the file at `path`, mapped on first access.
pub fn mapped_file(path: PathBuf, len: u64) -> Arc<Blob> {
    Blob::whole_file(path.clone(), len, move || {
        if len == 0 {
            return Ok(Bytes::empty());
        }
        let file = File::open(&path).map_err(|e| StoreError::io(&path, e))?;
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
