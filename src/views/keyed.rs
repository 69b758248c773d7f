//! Values under string keys, kept for a mount's life by the consolidated metadata documents
//! (`.zmetadata` of the Zarr v2 view, the root `zarr.json` of the v3 view): the keys back to back
//! in one string, each with where it ends and its (shared) value, about 4 bytes of bookkeeping a
//! key where a map of `String`s took about 100.

/// Values under keys, in insertion order or (after [`Keyed::sorted`]) in key order.
#[derive(Debug)]
pub(super) struct Keyed<V> {
    keys: String,
    /// (where the key ends in `keys`, its value); a key starts where the one before it ends.
    values: Vec<(u32, V)>,
}

impl<V> Default for Keyed<V> {
    fn default() -> Keyed<V> {
        Keyed {
            keys: String::new(),
            values: Vec::new(),
        }
    }
}

impl<V: Clone> Keyed<V> {
    /// Adds `value` under `key` (after any earlier value under the same key).
    pub(super) fn push(&mut self, key: &str, value: V) {
        self.keys.push_str(key);
        let end = u32::try_from(self.keys.len()).unwrap_or(u32::MAX);
        self.values.push((end, value));
    }

    fn key(&self, i: usize) -> &str {
        let start = i
            .checked_sub(1)
            .and_then(|j| self.values.get(j))
            .map_or(0, |(end, _)| *end as usize);
        let end = self.values.get(i).map_or(start, |(end, _)| *end as usize);
        self.keys.get(start..end).unwrap_or("")
    }

    /// Every key and its value, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.values
            .iter()
            .enumerate()
            .map(|(i, (_, value))| (self.key(i), value))
    }

    /// Sorted by key in byte order, one value per key (the last one pushed).
    pub(super) fn sorted(&self) -> Keyed<V> {
        let mut order: Vec<usize> = (0..self.values.len()).collect();
        // Stable: of equal keys, the last pushed stays last.
        order.sort_by(|&a, &b| self.key(a).cmp(self.key(b)));
        let mut out = Keyed::default();
        for (n, &i) in order.iter().enumerate() {
            let replaced = order
                .get(n + 1)
                .is_some_and(|&j| self.key(j) == self.key(i));
            if !replaced {
                out.push(self.key(i), self.values[i].1.clone());
            }
        }
        out.shrink_to_fit();
        out
    }

    /// Drops spare capacity (kept for the mount's life).
    pub(super) fn shrink_to_fit(&mut self) {
        self.keys.shrink_to_fit();
        self.values.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_read_back_in_order_and_sorted_keeps_the_last_value_of_a_key() {
        let mut keyed = Keyed::default();
        for (key, value) in [("b/x", 1), ("", 2), ("a", 3), ("b/x", 4), ("é", 5)] {
            keyed.push(key, value);
        }
        let pushed: Vec<(&str, i32)> = keyed.iter().map(|(k, v)| (k, *v)).collect();
        assert_eq!(
            pushed,
            [("b/x", 1), ("", 2), ("a", 3), ("b/x", 4), ("é", 5)]
        );
        let sorted = keyed.sorted();
        let sorted: Vec<(&str, i32)> = sorted.iter().map(|(k, v)| (k, *v)).collect();
        assert_eq!(sorted, [("", 2), ("a", 3), ("b/x", 4), ("é", 5)]);
    }
}
