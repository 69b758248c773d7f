//! Values under string keys, kept for a mount's life by the documents made of every other one
//! (`.zmetadata` of the Zarr v2 view, the root `zarr.json` of the v3 view, `metadata.json` of the
//! FilesDaf 1.1 view). Keys are front-coded (each stored as the length it shares with the key
//! before it and the rest; view paths share most of their bytes with their neighbours), and each
//! value is a `u32` index into the distinct values (documents are shared by many keys, see
//! `ViewBuilder::document`): about 10 bytes a key where a key string and a value each took 30–40.
//! Keys are read back in order only, which is all the rendering of those documents needs.

use std::collections::HashMap;
use std::sync::Arc;

use crate::formats::files::index::IndexValue;
use crate::stores::{Blob, Bytes};

/// What makes two values the same value (they are then stored once).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Identity {
    /// Shared memory: where it starts and its length (equal ones hold equal content).
    At(usize, usize),
    /// A plain number.
    Number(u64),
}

/// A value a [`Keyed`] can store once for many keys.
pub(super) trait Shared: Clone {
    /// Equal identities mean interchangeable values.
    fn identity(&self) -> Identity;
}

impl Shared for Arc<Blob> {
    fn identity(&self) -> Identity {
        Identity::At(Arc::as_ptr(self) as usize, 0)
    }
}

impl Shared for Bytes {
    fn identity(&self) -> Identity {
        let bytes = self.as_slice();
        Identity::At(bytes.as_ptr() as usize, bytes.len())
    }
}

impl Shared for IndexValue {
    fn identity(&self) -> Identity {
        match self {
            IndexValue::Axis(n) => Identity::Number(*n),
            IndexValue::Document(blob) => blob.identity(),
        }
    }
}

/// Values under keys being collected (keys plain, in push order); [`KeyedBuilder::finish`] or
/// [`KeyedBuilder::sorted`] makes the compact [`Keyed`] kept.
#[derive(Debug)]
pub(super) struct KeyedBuilder<V> {
    keys: String,
    /// Where each key ends in `keys`; a key starts where the one before it ends.
    ends: Vec<u32>,
    /// Each key's value, an index into `distinct`.
    values: Vec<u32>,
    distinct: Vec<V>,
    seen: HashMap<Identity, u32, foldhash::fast::RandomState>,
}

impl<V> Default for KeyedBuilder<V> {
    fn default() -> KeyedBuilder<V> {
        KeyedBuilder {
            keys: String::new(),
            ends: Vec::new(),
            values: Vec::new(),
            distinct: Vec::new(),
            seen: HashMap::default(),
        }
    }
}

impl<V: Shared> KeyedBuilder<V> {
    /// Adds `value` under `key` (after any earlier value under the same key).
    pub(super) fn push(&mut self, key: &str, value: V) {
        self.keys.push_str(key);
        self.ends
            .push(u32::try_from(self.keys.len()).unwrap_or(u32::MAX));
        let next = u32::try_from(self.distinct.len()).unwrap_or(u32::MAX);
        let index = *self.seen.entry(value.identity()).or_insert(next);
        if index == next {
            self.distinct.push(value);
        }
        self.values.push(index);
    }

    fn key(&self, i: usize) -> &str {
        let start = i
            .checked_sub(1)
            .and_then(|j| self.ends.get(j))
            .map_or(0, |end| *end as usize);
        let end = self.ends.get(i).map_or(start, |end| *end as usize);
        self.keys.get(start..end).unwrap_or("")
    }

    /// The keys and values in push order, plain.
    pub(super) fn into_pairs(self) -> Vec<(String, V)> {
        (0..self.values.len())
            .filter_map(|i| {
                let value = self.distinct.get(*self.values.get(i)? as usize)?;
                Some((self.key(i).to_string(), value.clone()))
            })
            .collect()
    }

    /// The keys and values in push order.
    pub(super) fn finish(self) -> Keyed<V> {
        let order: Vec<usize> = (0..self.values.len()).collect();
        self.compact(&order)
    }

    /// The keys and values sorted by key in byte order, one value per key (the last one pushed).
    pub(super) fn sorted(self) -> Keyed<V> {
        let mut order: Vec<usize> = (0..self.values.len()).collect();
        // Stable: of equal keys, the last pushed stays last.
        order.sort_by(|&a, &b| self.key(a).cmp(self.key(b)));
        let kept: Vec<usize> = order
            .iter()
            .enumerate()
            .filter(|(n, &i)| order.get(n + 1).is_none_or(|&j| self.key(j) != self.key(i)))
            .map(|(_, &i)| i)
            .collect();
        self.compact(&kept)
    }

    /// The keys at `order`, front-coded, with their values.
    fn compact(self, order: &[usize]) -> Keyed<V> {
        let mut keys = Vec::new();
        let mut previous = "";
        for &i in order {
            let key = self.key(i);
            let shared = common_prefix(previous, key);
            push_varint(&mut keys, shared);
            push_varint(&mut keys, key.len() - shared);
            keys.extend_from_slice(key.as_bytes().get(shared..).unwrap_or_default());
            previous = key;
        }
        let values = order
            .iter()
            .filter_map(|&i| self.values.get(i).copied())
            .collect();
        Keyed {
            keys: keys.into_boxed_slice(),
            values,
            distinct: self.distinct.into_boxed_slice(),
        }
    }
}

/// Values under keys, compact (see the module doc), read back in order by [`Keyed::iter`].
#[derive(Debug)]
pub(super) struct Keyed<V> {
    /// Per key: the length it shares with the key before it and the length of the rest (both
    /// LEB128), then the rest.
    keys: Box<[u8]>,
    /// Each key's value, an index into `distinct`.
    values: Box<[u32]>,
    distinct: Box<[V]>,
}

impl<V> Keyed<V> {
    /// Every key and its value, in order.
    pub(super) fn iter(&self) -> Iter<'_, V> {
        Iter {
            keyed: self,
            at: 0,
            next: 0,
            key: Vec::new(),
        }
    }

    /// The number of keys.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.values.len()
    }

    /// The bytes it holds on the heap (not counting what its values point to).
    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        self.keys.len() + self.values.len() * 4 + std::mem::size_of_val(&*self.distinct)
    }
}

/// The keys of a [`Keyed`] and their values, in order.
pub(super) struct Iter<'a, V> {
    keyed: &'a Keyed<V>,
    /// Where the next key is in `keyed.keys`.
    at: usize,
    /// The index of the next key.
    next: usize,
    /// The key before it.
    key: Vec<u8>,
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (String, &'a V);

    fn next(&mut self) -> Option<(String, &'a V)> {
        let value = *self.keyed.values.get(self.next)?;
        let shared = read_varint(&self.keyed.keys, &mut self.at);
        let rest = read_varint(&self.keyed.keys, &mut self.at);
        let end = (self.at + rest).min(self.keyed.keys.len());
        self.key.truncate(shared);
        self.key
            .extend_from_slice(self.keyed.keys.get(self.at..end).unwrap_or_default());
        self.at = end;
        self.next += 1;
        let value = self.keyed.distinct.get(value as usize)?;
        Some((String::from_utf8_lossy(&self.key).into_owned(), value))
    }
}

/// The length of the longest common prefix of `a` and `b`, in bytes.
fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

fn push_varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn read_varint(bytes: &[u8], at: &mut usize) -> usize {
    let mut n = 0usize;
    let mut shift = 0;
    while let Some(&byte) = bytes.get(*at) {
        *at += 1;
        n |= usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 || shift >= usize::BITS {
            break;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct N(u64);

    impl Shared for N {
        fn identity(&self) -> Identity {
            Identity::Number(self.0)
        }
    }

    fn read(keyed: &Keyed<N>) -> Vec<(String, u64)> {
        keyed.iter().map(|(k, v)| (k, v.0)).collect()
    }

    #[test]
    fn keys_read_back_in_order_and_sorted_keeps_the_last_value_of_a_key() {
        let pushes = [
            ("b/x", 1),
            ("", 2),
            ("a", 3),
            ("b/x", 4),
            ("é", 5),
            ("éa", 5),
        ];
        let build = || {
            let mut keyed = KeyedBuilder::default();
            for (key, value) in pushes {
                keyed.push(key, N(value));
            }
            keyed
        };
        let pushed: Vec<(String, u64)> = pushes.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(read(&build().finish()), pushed);
        let sorted = build().sorted();
        let expected = [("", 2), ("a", 3), ("b/x", 4), ("é", 5), ("éa", 5)];
        let expected: Vec<(String, u64)> =
            expected.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(read(&sorted), expected);
        assert_eq!(sorted.len(), 5);
        // Equal values are stored once.
        assert_eq!(sorted.distinct.len(), 5);
    }

    #[test]
    fn long_keys_and_many_values_read_back() {
        let mut keyed = KeyedBuilder::default();
        let long = "x".repeat(70_000);
        let keys: Vec<String> = (0..300)
            .map(|i| format!("{}{i:05}", &long[..(i * 233) % 70_000]))
            .collect();
        for (i, key) in keys.iter().enumerate() {
            keyed.push(key, N(i as u64));
        }
        let read = read(&keyed.finish());
        let expected: Vec<(String, u64)> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.clone(), i as u64))
            .collect();
        assert_eq!(read, expected);
    }

    /// The consolidated documents of a view of a million entries keep about 10 bytes a key.
    #[test]
    fn view_paths_with_shared_values_take_few_bytes_a_key() {
        let mut keyed = KeyedBuilder::default();
        let n = 10_000;
        for i in 0..n {
            for (doc, value) in [(".zarray", i % 3), (".zattrs", 7)] {
                keyed.push(&format!("vectors/cell/property_{i}/{doc}"), N(value));
            }
        }
        let keyed = keyed.finish();
        assert_eq!(keyed.len(), 2 * n as usize);
        assert_eq!(keyed.distinct.len(), 4);
        let per_key = keyed.heap_bytes() / keyed.len();
        assert!(per_key <= 12, "{per_key} bytes a key");
    }
}
