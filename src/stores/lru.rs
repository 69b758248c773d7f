//! A map bounded by the bytes of its values, least recently used out first: the memory half of
//! the HTTP block cache and the decode cache.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// Values with their sizes, and the order they were last used in.
pub struct ByteLru<K, V> {
    entries: HashMap<K, (V, u64, u64)>,
    /// Use stamp → key, oldest first.
    order: BTreeMap<u64, K>,
    next_stamp: u64,
    bytes: u64,
}

impl<K, V> Default for ByteLru<K, V> {
    fn default() -> Self {
        ByteLru {
            entries: HashMap::new(),
            order: BTreeMap::new(),
            next_stamp: 0,
            bytes: 0,
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> ByteLru<K, V> {
    fn stamp(&mut self) -> u64 {
        self.next_stamp += 1;
        self.next_stamp
    }

    /// The value of `key`, if kept (it becomes the most recently used).
    pub fn get(&mut self, key: &K) -> Option<V> {
        let stamp = self.stamp();
        let (value, _, used) = self.entries.get_mut(key)?;
        let old = std::mem::replace(used, stamp);
        let value = value.clone();
        self.order.remove(&old);
        self.order.insert(stamp, key.clone());
        Some(value)
    }

    /// Keeps `value` of `size` bytes, then drops the least recently used values until at most
    /// `limit` bytes are kept (a value larger than `limit` is not kept); how many were dropped.
    pub fn insert(&mut self, key: K, value: V, size: u64, limit: u64) -> u64 {
        if size > limit {
            return 0;
        }
        let stamp = self.stamp();
        if let Some((_, old_size, old_stamp)) =
            self.entries.insert(key.clone(), (value, size, stamp))
        {
            self.bytes -= old_size;
            self.order.remove(&old_stamp);
        }
        self.order.insert(stamp, key);
        self.bytes += size;
        self.shrink(limit)
    }

    /// Drops the least recently used values until at most `limit` bytes are kept; how many.
    pub fn shrink(&mut self, limit: u64) -> u64 {
        let mut dropped = 0;
        while self.bytes > limit {
            let Some((_, key)) = self.order.pop_first() else {
                break;
            };
            if let Some((_, size, _)) = self.entries.remove(&key) {
                self.bytes -= size;
                dropped += 1;
            }
        }
        dropped
    }

    /// Drops the value of `key`, if kept.
    pub fn remove(&mut self, key: &K) {
        if let Some((_, size, stamp)) = self.entries.remove(key) {
            self.bytes -= size;
            self.order.remove(&stamp);
        }
    }

    /// Drops every value whose key `matches`.
    pub fn remove_where(&mut self, matches: impl Fn(&K) -> bool) {
        let gone: Vec<(u64, K)> = self
            .order
            .iter()
            .filter(|(_, k)| matches(k))
            .map(|(s, k)| (*s, k.clone()))
            .collect();
        for (stamp, key) in gone {
            self.order.remove(&stamp);
            if let Some((_, size, _)) = self.entries.remove(&key) {
                self.bytes -= size;
            }
        }
    }

    /// Bytes kept.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}
