//! Stores: where bytes come from.
//!
//! A source (a directory or a ZIP archive) is opened once into a [`StoreIndex`]: a sorted map from
//! `/`-separated relative keys to [`Entry`]s, each holding a shared [`Blob`] and a timestamp. The
//! format readers above this layer only ever see keys and blobs, so a FilesDaf or Zarr tree reads
//! the same way from a directory, a ZIP, or a group inside a multi-data-set ZIP.
//!
//! Every kind of store implements one small trait, [`Store`] (`store`): list, size, mtime, read a
//! range, map when local, and the [`StoreIndex`] the readers read.
//!
//! An index's entries are either made when it is built (directories, HTTP) or *deferred*: made
//! on first [`StoreIndex::get`] by the index's [`EntryMaker`] and kept by it, so that every copy
//! and sub-tree of the index shares them. A ZIP archive's index is deferred (`zip::index`): its
//! blobs are made only for the members a reader asks for, not one per member at open. What a
//! reader needs only once (a metadata document it parses) it reads with
//! [`StoreIndex::get_once`], which does not keep the blob made for it.

pub mod blob;
pub mod bytes;
pub mod check;
#[cfg(test)]
pub(crate) mod conformance;
pub mod decode_cache;
pub mod dir;
pub mod http;
pub mod lru;
pub mod parallel;
pub mod ranged;
pub mod rendered;
mod sorted;
pub mod store;
pub mod zip;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

pub use blob::Blob;
pub use bytes::Bytes;
pub use sorted::{sort_last_wins_by, Window};
pub use store::Store;

use sorted::{sort_last_wins, Sorted};

/// Locks `m`, also after a holder panicked: every value these locks guard (caches, queues,
/// progress) stays consistent between statements, so the daemon goes on rather than panicking too.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Errors of the store layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O error on a named path.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A ZIP archive that cannot be read.
    #[error("corrupt ZIP archive ({what}): {path}")]
    CorruptZip {
        /// The archive.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// Content that could not be produced on demand (decode, conversion, ...).
    #[error("{0}")]
    Produce(String),
    /// A key the store does not hold.
    #[error("{store}: no {key}")]
    Missing {
        /// The store (see [`Store::describe`]).
        store: String,
        /// The key.
        key: String,
    },
    /// A byte range that does not lie within its key's content.
    #[error("{key}: bytes {offset}+{len} are outside its {size} bytes")]
    Range {
        /// The key.
        key: String,
        /// Start of the range.
        offset: u64,
        /// Its length.
        len: u64,
        /// The content's length.
        size: u64,
    },
}

impl StoreError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> StoreError {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }
}

/// One stored object: its bytes (possibly lazy) and when it was last modified.
#[derive(Clone, Debug)]
pub struct Entry {
    /// The content.
    pub blob: Arc<Blob>,
    /// Modification time, from the file or the ZIP entry.
    pub mtime: SystemTime,
}

/// Makes the entries of a deferred index ([`StoreIndex::deferred`]) on first use.
pub trait EntryMaker: Send + Sync + std::fmt::Debug {
    /// Entry number `id`, stored under `key`: made on the first call, the same one after.
    fn entry(&self, id: u32, key: &str) -> &Entry;

    /// The modification time of entry `id`, known without making it.
    fn mtime(&self, id: u32) -> SystemTime;

    /// Entry number `id` for one use, not kept: the kept one when it was made already, else
    /// one made for this call (see [`StoreIndex::get_once`]).
    fn entry_once(&self, id: u32, key: &str) -> Entry {
        self.entry(id, key).clone()
    }

    /// How many entries were made so far (for tests).
    #[cfg(test)]
    fn made(&self) -> usize;
}

/// One key's entry: made already, or made by the index's maker on first use.
#[derive(Clone, Debug)]
enum Slot {
    Made(Entry),
    Deferred(u32),
}

/// The keys of an opened source, sorted, with their entries.
#[derive(Clone, Debug, Default)]
pub struct StoreIndex {
    entries: Sorted,
    /// Makes the deferred entries (shared by every copy and sub-tree of the index).
    maker: Option<Arc<dyn EntryMaker>>,
    /// Modification time of the source itself (root directory or archive file).
    pub root_mtime: Option<SystemTime>,
}

impl StoreIndex {
    /// An index over the given entries.
    pub fn new(entries: BTreeMap<String, Entry>, root_mtime: Option<SystemTime>) -> StoreIndex {
        StoreIndex {
            entries: Sorted::new(
                entries
                    .into_iter()
                    .map(|(key, entry)| (key.into_boxed_str(), Slot::Made(entry)))
                    .collect(),
            ),
            maker: None,
            root_mtime,
        }
    }

    /// An index whose entries `maker` makes on first use: `keys` maps each key to its entry's
    /// number (of duplicated keys, the last one wins).
    pub fn deferred(
        mut keys: Vec<(Box<str>, u32)>,
        maker: Arc<dyn EntryMaker>,
        root_mtime: Option<SystemTime>,
    ) -> StoreIndex {
        // Sorted as (key, number) pairs, half the size of the slots they become.
        sort_last_wins(&mut keys);
        StoreIndex {
            entries: Sorted::new(
                keys.into_iter()
                    .map(|(key, id)| (key, Slot::Deferred(id)))
                    .collect(),
            ),
            maker: Some(maker),
            root_mtime,
        }
    }

    /// The entry stored under `key`.
    pub fn get(&self, key: &str) -> Option<&Entry> {
        let (key, slot) = self.entries.get_key_value(key)?;
        self.entry_of(key, slot)
    }

    /// The entry stored under `key`, for one use (a metadata document a reader parses once): in
    /// a deferred index it is made for this call and not kept, unless it was made already, so
    /// the reader's temporaries do not leave a kept blob between the long-lived ones.
    pub fn get_once(&self, key: &str) -> Option<Entry> {
        let (key, slot) = self.entries.get_key_value(key)?;
        match slot {
            Slot::Made(entry) => Some(entry.clone()),
            Slot::Deferred(id) => Some(self.maker.as_ref()?.entry_once(*id, key)),
        }
    }

    fn entry_of<'a>(&'a self, key: &str, slot: &'a Slot) -> Option<&'a Entry> {
        match slot {
            Slot::Made(entry) => Some(entry),
            Slot::Deferred(id) => Some(self.maker.as_ref()?.entry(*id, key)),
        }
    }

    /// How many entries are made (not deferred) so far.
    #[cfg(test)]
    pub(crate) fn made_count(&self) -> usize {
        let made = self
            .entries
            .pairs()
            .iter()
            .filter(|(_, s)| matches!(s, Slot::Made(_)));
        made.count() + self.maker.as_ref().map_or(0, |m| m.made())
    }

    fn mtime_of(&self, slot: &Slot) -> Option<SystemTime> {
        match slot {
            Slot::Made(entry) => Some(entry.mtime),
            Slot::Deferred(id) => self.maker.as_ref().map(|m| m.mtime(*id)),
        }
    }

    /// Whether `key` is stored.
    pub fn contains(&self, key: &str) -> bool {
        self.entries.contains_key(key)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.pairs().len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.pairs().is_empty()
    }

    /// All keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.pairs().iter().map(|(key, _)| &**key)
    }

    /// The names directly under directory `dir` ("" for the root): files and sub-directories,
    /// sorted, each once. Walks the keys in order and jumps over a sub-tree once it has walked
    /// a few keys of it, so it costs a few steps per child, however large the sub-trees.
    pub fn children(&self, dir: &str) -> Vec<String> {
        /// Keys of one child walked before jumping over the rest of its sub-tree.
        const WALK: usize = 8;
        let mut prefix = String::with_capacity(dir.len() + 1);
        if !dir.is_empty() {
            prefix.push_str(dir);
            prefix.push('/');
        }
        let mut names: Vec<String> = Vec::new();
        let mut keys = self.entries.from(&prefix, true);
        let mut walked = 0;
        let mut cursor = String::new();
        while let Some((key, _)) = keys.next() {
            let Some(rest) = key.strip_prefix(prefix.as_str()) else {
                break;
            };
            let Some((name, _)) = rest.split_once('/') else {
                names.push(rest.to_string());
                walked = 0;
                continue;
            };
            if names.last().is_some_and(|last| last == name) {
                walked += 1;
            } else {
                walked = 0;
                if !name.is_empty() {
                    names.push(name.to_string());
                }
            }
            if walked >= WALK {
                // '0' follows '/': this jumps over every key under "prefix/name/".
                cursor.clear();
                cursor.push_str(&prefix);
                cursor.push_str(name);
                cursor.push('0');
                keys = self.entries.from(&cursor, false);
                // "prefix/name0" itself, if stored, is a sibling: not jumped over.
                if let Some((sibling, _)) = self.entries.get_key_value(cursor.as_str()) {
                    names.push(sibling[prefix.len()..].to_string());
                }
                walked = 0;
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// The sub-directories of `dir` ("" for the root), sorted, each with the window of the keys
    /// under it (see [`StoreIndex::see`]).
    pub fn dir_windows(&self, dir: &str) -> Vec<(String, Window)> {
        self.entries.dir_windows(dir)
    }

    /// Makes this copy of an index see only the keys of `window` (one of the index's
    /// [`StoreIndex::dir_windows`]): a reader of one sub-directory then searches only its keys.
    pub fn see(&mut self, window: &Window) {
        self.entries.see(window);
    }

    /// Whether directory `dir` holds any key (without listing them).
    pub fn has_children(&self, dir: &str) -> bool {
        let prefix = format!("{dir}/");
        self.entries
            .from(&prefix, true)
            .next()
            .is_some_and(|(key, _)| key.starts_with(&prefix))
    }

    /// The entries whose key starts with `prefix/`, re-keyed without it (a group of a
    /// multi-data-set archive). Blobs are shared, not copied.
    pub fn subtree(&self, prefix: &str) -> StoreIndex {
        let full = format!("{prefix}/");
        let entries = self
            .entries
            .from(&full, true)
            .take_while(|(key, _)| key.starts_with(&full))
            .map(|(key, slot)| (Box::from(&key[full.len()..]), slot.clone()))
            .collect();
        StoreIndex {
            entries: Sorted::new(entries),
            maker: self.maker.clone(),
            root_mtime: self.root_mtime,
        }
    }

    /// The latest modification time among the entries under `dir` (and the entry `dir` itself).
    pub fn latest_mtime_under(&self, dir: &str) -> Option<SystemTime> {
        self.latest_mtime_and_entry(dir, "").0
    }

    /// [`StoreIndex::latest_mtime_under`] of `dir`, and the entry stored under `dir/{name}`
    /// (none for an empty `name`), with one search. No key is built: the keys under `dir/`
    /// follow `dir` and the few keys that continue `dir` with a byte below `/` (`dir-x`,
    /// `dir.x`); the first key that continues it with a byte above `/` ends them.
    pub fn latest_mtime_and_entry(
        &self,
        dir: &str,
        name: &str,
    ) -> (Option<SystemTime>, Option<&Entry>) {
        let mut found = None;
        let latest = self
            .entries
            .from(dir, true)
            .map_while(|(key, slot)| {
                let rest = key.as_bytes().strip_prefix(dir.as_bytes())?;
                match rest.split_first() {
                    None => Some(Some(slot)),
                    Some((b'/', below)) => {
                        if !name.is_empty() && below == name.as_bytes() {
                            found = Some((key, slot));
                        }
                        Some(Some(slot))
                    }
                    Some((&next, _)) if next < b'/' => Some(None),
                    Some(_) => None,
                }
            })
            .flatten()
            .filter_map(|slot| self.mtime_of(slot))
            .max();
        (
            latest,
            found.and_then(|(key, slot)| self.entry_of(key, slot)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(keys: &[&str]) -> StoreIndex {
        let entries = keys
            .iter()
            .map(|k| {
                let entry = Entry {
                    blob: Blob::ready(Bytes::from_vec(k.as_bytes().to_vec())),
                    mtime: SystemTime::UNIX_EPOCH,
                };
                (k.to_string(), entry)
            })
            .collect();
        StoreIndex::new(entries, None)
    }

    #[test]
    fn children_lists_files_and_directories_once() {
        let idx = index(&[
            "a/.zarray",
            "a/0",
            "a.b",
            "a-c/x/y",
            "b",
            "b/c",
            "c/d/e",
            "c/f",
        ]);
        assert_eq!(idx.children(""), vec!["a", "a-c", "a.b", "b", "c"]);
        assert_eq!(idx.children("a"), vec![".zarray", "0"]);
        assert_eq!(idx.children("c"), vec!["d", "f"]);
        assert!(idx.children("zz").is_empty());
        assert!(idx.has_children("a") && idx.has_children("c/d") && !idx.has_children("a.b"));
        assert!(!idx.has_children("zz") && !idx.has_children("c/f"));
    }

    #[test]
    fn children_jumps_over_large_sub_trees_and_keeps_every_name() {
        let mut keys: Vec<String> = Vec::new();
        for dir in ["a", "a0", "a1", "b"] {
            for i in 0..20 {
                keys.push(format!("g/{dir}/{i:02}"));
            }
        }
        keys.extend(
            [
                "g/a.x",
                "g/a-y/z",
                "g/a0.q",
                "g/a/0/deep",
                "g/b0",
                "h/a",
                "g0",
            ]
            .map(String::from),
        );
        let idx = index(&keys.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            idx.children("g"),
            vec!["a", "a-y", "a.x", "a0", "a0.q", "a1", "b", "b0"]
        );
        assert_eq!(idx.children("g/a").len(), 21); // 00…19 and the directory 0
        assert_eq!(idx.children(""), vec!["g", "g0", "h"]);
    }

    #[test]
    fn a_copy_seeing_a_dir_window_finds_exactly_that_dirs_keys() {
        let mut keys: Vec<String> = (0..300).map(|i| format!("g/big/c/{i:03}")).collect();
        keys.extend(
            [
                "g/.zattrs",
                "g/a/zarr.json",
                "g/a/c/0",
                "g/a.x/zarr.json",
                "g/a-y/z",
                "g/a0/zarr.json",
                "g/f",
                "g//odd",
                "g0/a/zarr.json",
                "a/zarr.json",
            ]
            .map(String::from),
        );
        let idx = index(&keys.iter().map(String::as_str).collect::<Vec<_>>());
        let dirs = idx.dir_windows("g");
        let names: Vec<&str> = dirs.iter().map(|(n, _)| n.as_str()).collect();
        // Sorted by name (the keys have `a-y/` and `a.x/` before `a/`); files and the empty
        // name left out.
        assert_eq!(names, ["a", "a-y", "a.x", "a0", "big"]);
        for (name, window) in &dirs {
            let mut seen = idx.clone();
            seen.see(window);
            let under = format!("g/{name}/");
            let expected: Vec<&str> = idx.keys().filter(|k| k.starts_with(&under)).collect();
            assert_eq!(seen.keys().collect::<Vec<_>>(), expected, "{name}");
            assert!(expected
                .iter()
                .all(|k| seen.contains(k) && seen.get_once(k).is_some()));
            assert!(!seen.contains("g/f") && !seen.contains("g0/a/zarr.json"));
        }
        assert_eq!(idx.dir_windows("").len(), 3); // a, g, g0
        assert!(idx.dir_windows("zz").is_empty() && idx.dir_windows("g/f").is_empty());
    }

    #[test]
    fn latest_mtime_under_sees_the_directory_and_only_its_keys() {
        let at = |s: u64| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s);
        let keys = [
            ("a", 1),
            ("a-x", 50),
            ("a.b", 60),
            ("a/.zarray", 2),
            ("a/0", 3),
            ("a/b/c", 4),
            ("a0", 70),
            ("a0/x", 80),
            ("b/a", 90),
        ];
        let entries = keys
            .iter()
            .map(|&(k, s)| {
                let blob = Blob::ready(Bytes::from_vec(Vec::new()));
                (k.to_string(), Entry { blob, mtime: at(s) })
            })
            .collect();
        let idx = StoreIndex::new(entries, None);
        assert_eq!(idx.len(), keys.len());
        assert_eq!(idx.latest_mtime_under("a"), Some(at(4)));
        assert_eq!(idx.latest_mtime_under("a/b"), Some(at(4)));
        assert_eq!(idx.latest_mtime_under("a0"), Some(at(80)));
        assert_eq!(idx.latest_mtime_under("a-x"), Some(at(50)));
        assert_eq!(idx.latest_mtime_under("b"), Some(at(90)));
        assert_eq!(idx.latest_mtime_under("c"), None);
        assert_eq!(idx.latest_mtime_under("a/"), None);
        let (latest, entry) = idx.latest_mtime_and_entry("a", "0");
        assert_eq!((latest, entry.map(|e| e.mtime)), (Some(at(4)), Some(at(3))));
        let (latest, entry) = idx.latest_mtime_and_entry("a", "b/c");
        assert_eq!((latest, entry.map(|e| e.mtime)), (Some(at(4)), Some(at(4))));
        assert!(idx.latest_mtime_and_entry("a", "x").1.is_none());
        assert!(idx.latest_mtime_and_entry("a", "").1.is_none());
        assert!(idx.latest_mtime_and_entry("a0", "0").1.is_none());
    }

    #[test]
    fn a_deferred_index_is_sorted_and_the_last_of_duplicated_keys_wins() {
        #[derive(Debug)]
        struct Maker(Vec<Entry>);
        impl EntryMaker for Maker {
            fn entry(&self, id: u32, _key: &str) -> &Entry {
                &self.0[id as usize]
            }
            fn mtime(&self, id: u32) -> SystemTime {
                self.0[id as usize].mtime
            }
            fn made(&self) -> usize {
                0
            }
        }
        let names = ["b", "a/x", "c", "a", "b", "a/x", "b"];
        let entries = (0..names.len())
            .map(|i| Entry {
                blob: Blob::ready(Bytes::from_vec(vec![i as u8])),
                mtime: SystemTime::UNIX_EPOCH,
            })
            .collect();
        let keys = names
            .iter()
            .zip(0..)
            .map(|(k, i)| (Box::from(*k), i))
            .collect();
        let idx = StoreIndex::deferred(keys, Arc::new(Maker(entries)), None);
        assert_eq!(idx.keys().collect::<Vec<_>>(), vec!["a", "a/x", "b", "c"]);
        let first_byte = |k: &str| idx.get(k).unwrap().blob.bytes().unwrap().as_slice()[0];
        assert_eq!(first_byte("b"), 6);
        assert_eq!(first_byte("a/x"), 5);
        assert_eq!(first_byte("a"), 3);
        assert!(idx.get("d").is_none() && !idx.contains("a/") && idx.contains("c"));
    }

    #[test]
    fn subtree_strips_the_prefix() {
        let idx = index(&["g1/daf.json", "g1/x/y", "g10/daf.json", "g2/z"]);
        let sub = idx.subtree("g1");
        assert_eq!(sub.keys().collect::<Vec<_>>(), vec!["daf.json", "x/y"]);
    }
}
