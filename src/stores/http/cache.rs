//! The block cache of remote objects: fixed-size blocks ([`BLOCK`]) of each object, kept in a
//! bounded memory LRU and, when the mount names a cache directory, in files there. A block is
//! keyed by the object's URL *and* its size and validator (ETag or Last-Modified), so a changed
//! object never reads an old block.
//!
//! The directory outlives the mount and may be shared by several mounts at once (of the same data
//! set or not, one process each): a block file is written under a name of its own and renamed
//! into place, so a reader sees a whole file or none and two writers of the same block leave one
//! file; each file holds its key and a CRC-32 of its bytes, checked on every read (a damaged
//! file, or another key's, is a miss and is removed). The size bound holds for the directory as
//! a whole: the bytes it holds are counted in `.used`, updated under an exclusive `flock` of
//! `.lock` by every mount's every write; past the bound the oldest files are removed (by
//! modification time, which a hit renews) until it holds nine tenths of it.
//!
//! A block file's pages are not left in the kernel's page cache: the block is in the FUSE file's
//! page cache once read, and a second copy there would hold every fetched byte twice. A file read
//! is dropped from it at once; a file written is dropped once written back (its dirty pages cannot
//! be: each write starts the write-back, and the file is dropped again [`DROP_AFTER`] writes later,
//! or at unmount).

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use nix::fcntl::{posix_fadvise, Flock, FlockArg, PosixFadviseAdvice};

use crate::stores::lock;
use crate::stores::lru::ByteLru;
use crate::stores::Bytes;

/// Size of a cached block (the last block of an object is shorter).
pub const BLOCK: u64 = 1 << 20;

/// First bytes of a block file (the format's version).
const MAGIC: &[u8; 8] = b"DAFBLK1\n";

/// Block files written since which a written file is dropped from the page cache again (by then
/// written back).
const DROP_AFTER: usize = 32;

/// A temporary file older than this was left by a writer that died.
const STALE_TEMPORARY: Duration = Duration::from_secs(600);

/// Identity of one block: object (URL + validator) and block number.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlockKey {
    /// URL and validator of the object.
    pub object: Arc<str>,
    /// Block number.
    pub block: u64,
}

/// The cache directory, shared with other mounts.
struct Disk {
    dir: PathBuf,
    limit: u64,
    /// The block files written last, to be dropped from the page cache once written back (held
    /// for a push and a pop, never across I/O).
    written: Mutex<VecDeque<PathBuf>>,
}

/// Memory LRU and optional disk cache of blocks.
pub struct BlockCache {
    memory: Mutex<ByteLru<BlockKey, Bytes>>,
    memory_limit: u64,
    disk: Option<Disk>,
}

/// Names of this process's temporary files.
static TEMPORARIES: AtomicU64 = AtomicU64::new(0);

impl BlockCache {
    /// A cache holding up to `memory_limit` bytes in memory and `disk_limit` in `dir`.
    pub fn new(memory_limit: u64, dir: Option<PathBuf>, disk_limit: u64) -> BlockCache {
        let disk = dir.and_then(|dir| match Disk::open(dir.clone(), disk_limit) {
            Ok(disk) => Some(disk),
            Err(e) => {
                log::warn!("cache directory {}: {e}; not used", dir.display());
                None
            }
        });
        BlockCache {
            memory: Mutex::new(ByteLru::default()),
            memory_limit,
            disk,
        }
    }

    /// Whether blocks are kept on disk (and may be there from an earlier mount).
    pub fn has_disk(&self) -> bool {
        self.disk.is_some()
    }

    /// The block, from memory or disk.
    pub fn get(&self, key: &BlockKey) -> Option<Bytes> {
        if let Some(block) = lock(&self.memory).get(key) {
            return Some(block);
        }
        let block = self.disk.as_ref()?.get(key)?;
        self.remember(key, block.clone());
        Some(block)
    }

    /// Keeps `block` (in memory, and on disk when there is a cache directory).
    pub fn put(&self, key: &BlockKey, block: Bytes) {
        if let Some(disk) = &self.disk {
            if let Err(e) = disk.put(key, &block) {
                log::debug!("cache directory {}: {e}", disk.dir.display());
            }
        }
        self.remember(key, block);
    }

    /// Drops the block from memory (the disk keeps it): the kernel's page cache holds it now.
    pub fn forget(&self, key: &BlockKey) {
        lock(&self.memory).remove(key);
    }

    fn remember(&self, key: &BlockKey, block: Bytes) {
        let size = block.len();
        lock(&self.memory).insert(key.clone(), block, size, self.memory_limit);
    }

    /// Bytes held in memory.
    pub fn memory_used(&self) -> u64 {
        lock(&self.memory).bytes()
    }
}

/// `name` of a block file: two CRCs of the object's key (a collision is told by the key inside).
fn file_name(key: &BlockKey) -> String {
    let object = key.object.as_bytes();
    format!(
        "{:08x}{:08x}-{}.blk",
        crc32fast::hash(object),
        crc32c::crc32c(object),
        key.block
    )
}

impl Disk {
    /// The directory (made if missing), its temporaries from dead writers removed, its bound
    /// applied.
    fn open(dir: PathBuf, limit: u64) -> std::io::Result<Disk> {
        std::fs::create_dir_all(&dir)?;
        let disk = Disk {
            dir,
            limit,
            written: Mutex::new(VecDeque::new()),
        };
        let mut counted = disk.locked()?;
        let now = SystemTime::now();
        for entry in std::fs::read_dir(&disk.dir)?.flatten() {
            let path = entry.path();
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| now.duration_since(t).unwrap_or_default() > STALE_TEMPORARY);
            if path.extension().is_some_and(|e| e == "tmp") && old {
                let _ = std::fs::remove_file(&path);
            }
        }
        disk.shrink(&mut counted)?;
        Ok(disk)
    }

    /// The directory's lock, held until dropped, with its count of bytes.
    fn locked(&self) -> std::io::Result<Counted> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join(".lock"))?;
        let lock = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| e)?;
        let mut used = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.dir.join(".used"))?;
        let mut bytes = [0u8; 8];
        let bytes_used = match used.read_exact(&mut bytes) {
            Ok(()) => Some(u64::from_le_bytes(bytes)),
            // A new directory, or one made before the count: counted by a scan.
            Err(_) => None,
        };
        Ok(Counted {
            _lock: lock,
            file: used,
            bytes: bytes_used,
        })
    }

    fn get(&self, key: &BlockKey) -> Option<Bytes> {
        let path = self.dir.join(file_name(key));
        let mut file = File::open(&path).ok()?;
        let mut data = Vec::new();
        file.read_to_end(&mut data).ok()?;
        uncache(&file);
        match parse(&data, key) {
            Some((start, len)) => {
                // A hit renews the file: the oldest are removed first.
                let _ = file.set_modified(SystemTime::now());
                Bytes::from_vec(data).slice(start, len)
            }
            None => {
                log::debug!(
                    "cache file {} is not the block it should be; removed",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    fn put(&self, key: &BlockKey, block: &Bytes) -> std::io::Result<()> {
        let name = file_name(key);
        let tmp = self.dir.join(format!(
            "{name}.{}.{}.tmp",
            std::process::id(),
            TEMPORARIES.fetch_add(1, Ordering::Relaxed)
        ));
        let object = key.object.as_bytes();
        let data = block.as_slice();
        let mut out = Vec::with_capacity(MAGIC.len() + 24 + object.len() + data.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(object.len() as u64).to_le_bytes());
        out.extend_from_slice(object);
        out.extend_from_slice(&key.block.to_le_bytes());
        out.extend_from_slice(&(data.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
        out.extend_from_slice(data);
        let written = (|| {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&tmp)?;
            file.write_all(&out)?;
            // Starts the write-back (the pages are dropped once it is done, below).
            uncache(&file);
            Ok(())
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let mut counted = self.locked()?;
        let path = self.dir.join(&name);
        let replaced = std::fs::metadata(&path).map_or(0, |m| m.len());
        if let Err(e) = std::fs::rename(&tmp, &path) {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
        let added = out.len() as u64;
        counted.bytes = counted
            .bytes
            .map(|used| used.saturating_sub(replaced) + added);
        let shrunk = self.shrink(&mut counted);
        drop(counted);
        let done = {
            let mut written = lock(&self.written);
            written.push_back(path);
            (written.len() > DROP_AFTER)
                .then(|| written.pop_front())
                .flatten()
        };
        if let Some(file) = done.and_then(|path| File::open(path).ok()) {
            uncache(&file);
        }
        shrunk
    }

    /// With the lock held: if the count is unknown or past the bound, counts the files and
    /// removes the oldest until nine tenths of the bound are held; writes the count.
    fn shrink(&self, counted: &mut Counted) -> std::io::Result<()> {
        if counted.bytes.is_some_and(|used| used <= self.limit) {
            return counted.write();
        }
        let mut files: Vec<(SystemTime, u64, PathBuf)> = std::fs::read_dir(&self.dir)?
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "blk"))
            .filter_map(|e| {
                let meta = e.metadata().ok()?;
                Some((meta.modified().ok()?, meta.len(), e.path()))
            })
            .collect();
        let mut used: u64 = files.iter().map(|f| f.1).sum();
        if used > self.limit {
            files.sort();
            let target = self.limit / 10 * 9;
            for (_, len, path) in files {
                if used <= target {
                    break;
                }
                if std::fs::remove_file(&path).is_ok() {
                    used -= len;
                }
            }
        }
        counted.bytes = Some(used);
        counted.write()
    }
}

impl Drop for Disk {
    /// The files written last: dropped from the page cache if written back by now.
    fn drop(&mut self) {
        for path in lock(&self.written).drain(..) {
            if let Ok(file) = File::open(path) {
                uncache(&file);
            }
        }
    }
}

/// Drops `file`'s clean pages from the page cache, and starts writing back its dirty ones.
fn uncache(file: &File) {
    let _ = posix_fadvise(file, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED);
}

/// The directory's lock and its count of bytes (`None`: not known, a scan counts them).
struct Counted {
    _lock: Flock<File>,
    file: File,
    bytes: Option<u64>,
}

impl Counted {
    fn write(&mut self) -> std::io::Result<()> {
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&self.bytes.unwrap_or(0).to_le_bytes())
    }
}

/// Where the block's bytes are in a block file's `data`, if it is the whole file of `key`.
fn parse(data: &[u8], key: &BlockKey) -> Option<(u64, u64)> {
    let object = key.object.as_bytes();
    let rest = data.strip_prefix(MAGIC)?;
    let (len, rest) = rest.split_first_chunk::<8>()?;
    let (stored, rest) = rest.split_at_checked(usize::try_from(u64::from_le_bytes(*len)).ok()?)?;
    let (block, rest) = rest.split_first_chunk::<8>()?;
    let (size, rest) = rest.split_first_chunk::<8>()?;
    let (crc, rest) = rest.split_first_chunk::<4>()?;
    let whole = stored == object
        && u64::from_le_bytes(*block) == key.block
        && u64::from_le_bytes(*size) == rest.len() as u64
        && u32::from_le_bytes(*crc) == crc32fast::hash(rest);
    whole.then(|| ((data.len() - rest.len()) as u64, rest.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(block: u64) -> BlockKey {
        BlockKey {
            object: Arc::from("http://h/x\netag"),
            block,
        }
    }

    #[test]
    fn memory_is_bounded_and_least_recent_goes_first() {
        let cache = BlockCache::new(3 * 10, None, 0);
        for n in 0..3 {
            cache.put(&key(n), Bytes::from_vec(vec![n as u8; 10]));
        }
        assert!(cache.get(&key(0)).is_some());
        cache.put(&key(3), Bytes::from_vec(vec![3; 10]));
        assert!(cache.get(&key(1)).is_none(), "block 1 was the least recent");
        assert!(cache.get(&key(0)).is_some());
        assert_eq!(cache.memory_used(), 30);
    }

    fn blocks_on_disk(dir: &std::path::Path) -> (Vec<String>, u64) {
        let mut names = Vec::new();
        let mut bytes = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') {
                bytes += entry.metadata().unwrap().len();
                names.push(name);
            }
        }
        names.sort();
        (names, bytes)
    }

    #[test]
    fn disk_blocks_survive_the_memory_and_a_remount() {
        let dir = tempfile::tempdir().unwrap();
        let first = BlockCache::new(10, Some(dir.path().into()), 1 << 20);
        for n in 0..3 {
            first.put(&key(n), Bytes::from_vec(vec![n as u8; 10]));
        }
        assert_eq!(first.get(&key(1)).unwrap().as_slice(), &[1; 10]);
        drop(first);
        let again = BlockCache::new(10, Some(dir.path().into()), 1 << 20);
        for n in 0..3 {
            assert_eq!(again.get(&key(n)).unwrap().as_slice(), &[n as u8; 10]);
        }
    }

    #[test]
    fn the_bound_holds_for_the_directory_across_mounts() {
        let dir = tempfile::tempdir().unwrap();
        let limit = 3000;
        let one = BlockCache::new(0, Some(dir.path().into()), limit);
        for n in 0..2 {
            one.put(&key(n), Bytes::from_vec(vec![n as u8; 1000]));
        }
        // A second mount, while the first is still there, then a third after both.
        let two = BlockCache::new(0, Some(dir.path().into()), limit);
        for n in 2..4 {
            two.put(&key(n), Bytes::from_vec(vec![n as u8; 1000]));
            assert!(blocks_on_disk(dir.path()).1 <= limit);
        }
        one.put(&key(4), Bytes::from_vec(vec![4; 1000]));
        drop((one, two));
        let three = BlockCache::new(0, Some(dir.path().into()), limit);
        three.put(&key(5), Bytes::from_vec(vec![5; 1000]));
        let (names, bytes) = blocks_on_disk(dir.path());
        assert!(bytes <= limit, "{bytes} bytes in {names:?}");
        // The newest stay.
        assert_eq!(three.get(&key(5)).unwrap().as_slice(), &[5; 1000]);
        assert!(three.get(&key(0)).is_none());
    }

    /// Bytes of `path` in the page cache (util-linux's `fincore`).
    fn cached_bytes(path: &std::path::Path) -> u64 {
        let out = std::process::Command::new("fincore")
            .args(["--bytes", "--noheadings", "--raw", "--output", "RES"])
            .arg(path)
            .output()
            .expect("fincore (util-linux) runs");
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    }

    #[test]
    fn a_block_read_from_disk_does_not_stay_in_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(0, Some(dir.path().into()), 1 << 30);
        cache.put(&key(0), Bytes::from_vec(vec![7; 1 << 20]));
        let (names, _) = blocks_on_disk(dir.path());
        let path = dir.path().join(&names[0]);
        // Written back: its pages are clean, and stay cached unless dropped.
        File::open(&path).unwrap().sync_all().unwrap();
        File::open(&path)
            .unwrap()
            .read_to_end(&mut Vec::new())
            .unwrap();
        assert!(cached_bytes(&path) > 0, "the file is in the page cache");
        assert_eq!(cache.get(&key(0)).unwrap().as_slice(), &[7; 1 << 20]);
        assert_eq!(cached_bytes(&path), 0, "a read drops it");
    }

    #[test]
    fn a_damaged_file_is_a_miss_and_goes() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(0, Some(dir.path().into()), 1 << 20);
        cache.put(&key(0), Bytes::from_vec(vec![7; 100]));
        cache.put(&key(1), Bytes::from_vec(vec![8; 100]));
        let (names, _) = blocks_on_disk(dir.path());
        assert_eq!(names.len(), 2);
        let cut = dir.path().join(&names[0]);
        let bytes = std::fs::read(&cut).unwrap();
        std::fs::write(&cut, &bytes[..bytes.len() - 1]).unwrap();
        let flipped = dir.path().join(&names[1]);
        let mut bytes = std::fs::read(&flipped).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&flipped, &bytes).unwrap();
        let fresh = BlockCache::new(0, Some(dir.path().into()), 1 << 20);
        assert!(fresh.get(&key(0)).is_none() && fresh.get(&key(1)).is_none());
        assert!(
            blocks_on_disk(dir.path()).0.is_empty(),
            "the damaged files went"
        );
    }

    #[test]
    fn mounts_sharing_the_directory_neither_corrupt_nor_duplicate_it() {
        let dir = tempfile::tempdir().unwrap();
        let content = |n: u64| vec![(n % 251) as u8; 200_000 + n as usize];
        let caches: Vec<BlockCache> = (0..2)
            .map(|_| BlockCache::new(0, Some(dir.path().into()), 1 << 30))
            .collect();
        std::thread::scope(|s| {
            for (t, cache) in (0..8).map(|t| (t, &caches[t % 2])) {
                s.spawn(move || {
                    for round in 0..3 {
                        for n in 0..16u64 {
                            let n = if (t + round) % 2 == 0 { n } else { 15 - n };
                            cache.put(&key(n), Bytes::from_vec(content(n)));
                            if let Some(got) = cache.get(&key(n)) {
                                assert!(got.as_slice() == content(n).as_slice(), "block {n}");
                            }
                        }
                    }
                });
            }
        });
        let (names, _) = blocks_on_disk(dir.path());
        assert_eq!(
            names.len(),
            16,
            "one file a block, no temporaries: {names:?}"
        );
        let fresh = BlockCache::new(0, Some(dir.path().into()), 1 << 30);
        for n in 0..16 {
            assert!(fresh.get(&key(n)).unwrap().as_slice() == content(n).as_slice());
        }
    }
}
