//! The block cache of remote objects: fixed-size blocks ([`BLOCK`]) of each object, kept in a
//! bounded memory LRU and, when the mount names a cache directory, in files there (bounded by
//! `cache_size`, oldest written first out). A block is keyed by the object's URL *and* its
//! validator (ETag or Last-Modified), so a changed object never reads an old block.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::stores::lock;
use crate::stores::lru::ByteLru;
use crate::stores::Bytes;

/// Size of a cached block (the last block of an object is shorter).
pub const BLOCK: u64 = 1 << 20;

/// Identity of one block: object (URL + validator) and block number.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlockKey {
    /// URL and validator of the object.
    pub object: Arc<str>,
    /// Block number.
    pub block: u64,
}

#[derive(Default)]
struct Disk {
    files: VecDeque<(PathBuf, u64)>,
    used: u64,
}

/// Memory LRU and optional disk cache of blocks.
pub struct BlockCache {
    memory: Mutex<ByteLru<BlockKey, Bytes>>,
    memory_limit: u64,
    dir: Option<PathBuf>,
    disk: Mutex<Disk>,
    disk_limit: u64,
}

impl BlockCache {
    /// A cache holding up to `memory_limit` bytes in memory and `disk_limit` in `dir`.
    pub fn new(memory_limit: u64, dir: Option<PathBuf>, disk_limit: u64) -> BlockCache {
        if let Some(dir) = &dir {
            if let Err(e) = std::fs::create_dir_all(dir) {
                log::warn!("cache directory {}: {e}; not used", dir.display());
            }
        }
        BlockCache {
            memory: Mutex::new(ByteLru::default()),
            memory_limit,
            dir,
            disk: Mutex::new(Disk::default()),
            disk_limit,
        }
    }

    /// The block, from memory or disk.
    pub fn get(&self, key: &BlockKey) -> Option<Bytes> {
        if let Some(block) = lock(&self.memory).get(key) {
            return Some(block);
        }
        let path = self.disk_path(key)?;
        let block = Bytes::from_vec(std::fs::read(path).ok()?);
        self.remember(key, block.clone());
        Some(block)
    }

    /// Keeps `block` (in memory, and on disk when there is a cache directory).
    pub fn put(&self, key: &BlockKey, block: Bytes) {
        if let Some(path) = self.disk_path(key) {
            let len = block.len();
            let tmp = path.with_extension("tmp");
            if std::fs::write(&tmp, block.as_slice()).is_ok()
                && std::fs::rename(&tmp, &path).is_ok()
            {
                let mut disk = lock(&self.disk);
                disk.used += len;
                disk.files.push_back((path, len));
                while disk.used > self.disk_limit {
                    let Some((old, n)) = disk.files.pop_front() else {
                        break;
                    };
                    let _ = std::fs::remove_file(old);
                    disk.used -= n;
                }
            }
        }
        self.remember(key, block);
    }

    fn remember(&self, key: &BlockKey, block: Bytes) {
        let size = block.len();
        lock(&self.memory).insert(key.clone(), block, size, self.memory_limit);
    }

    /// Bytes held in memory.
    pub fn memory_used(&self) -> u64 {
        lock(&self.memory).bytes()
    }

    fn disk_path(&self, key: &BlockKey) -> Option<PathBuf> {
        let dir = self.dir.as_ref()?;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        key.object.hash(&mut hasher);
        Some(dir.join(format!("{:016x}-{}", hasher.finish(), key.block)))
    }
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

    #[test]
    fn disk_blocks_survive_the_memory_and_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let cache = BlockCache::new(10, Some(dir.path().into()), 25);
        for n in 0..3 {
            cache.put(&key(n), Bytes::from_vec(vec![n as u8; 10]));
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        assert_eq!(cache.get(&key(1)).unwrap().as_slice(), &[1; 10]);
        assert!(cache.get(&key(0)).is_none());
    }
}
