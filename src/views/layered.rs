//! The values of a document made of every item (`.zmetadata` of the Zarr v2 view, the root
//! `zarr.json` of the v3 view, `metadata.json` of the FilesDaf 1.1 view) as commits change them:
//! the values a whole view's rendering collected (a compact [`Keyed`]), and the values now of
//! the items changed since. A commit's edit makes the next document from the one the tree shows
//! ([`crate::stores::Blob::made_of`]) in time proportional to the item and to the changes since
//! the last build, not to the data set (a million entries took 0.14 s for a `.zmetadata` and
//! most of a second for the others); past [`MAX_CHANGED`] values the view is rendered whole
//! again.

use std::collections::HashSet;
use std::iter::Peekable;
use std::sync::Arc;

use crate::formats::model::PropertyId;

use super::keyed::Keyed;

/// The most changed values kept beside the base: past it, the view is rendered whole.
const MAX_CHANGED: usize = 1 << 14;

/// The item a key belongs to (`None`: no item's, such as a group's document).
pub(super) type ItemOf = fn(&str) -> Option<PropertyId>;

/// Values under keys: a base, and the values now of the items changed since it was made.
#[derive(Debug)]
pub(super) struct Layered<V> {
    base: Arc<Keyed<V>>,
    item_of: ItemOf,
    /// The items whose keys in `base` are replaced by those in `changed` (`None`: the keys of
    /// no item).
    replaced: HashSet<Option<PropertyId>, foldhash::fast::RandomState>,
    /// The keys and values now of the `replaced` items, sorted by key.
    changed: Vec<(String, V)>,
}

impl<V: Clone> Layered<V> {
    /// The values of a whole view's rendering, each key's item given by `item_of`.
    pub(super) fn new(base: Keyed<V>, item_of: ItemOf) -> Layered<V> {
        Layered {
            base: Arc::new(base),
            item_of,
            replaced: HashSet::default(),
            changed: Vec::new(),
        }
    }

    /// These values with those of `items` replaced by `values` (all of them, for keys of those
    /// items; one value a key); `None` if a value belongs to another item, or past
    /// [`MAX_CHANGED`] values (render the view whole instead).
    pub(super) fn with(
        &self,
        items: &[Option<PropertyId>],
        values: Vec<(String, V)>,
    ) -> Option<Layered<V>> {
        let item_of = self.item_of;
        if !values.iter().all(|(key, _)| items.contains(&item_of(key))) {
            return None;
        }
        let kept = self
            .changed
            .iter()
            .filter(|(key, _)| !items.contains(&item_of(key)));
        let mut changed: Vec<(String, V)> = kept.cloned().chain(values).collect();
        if changed.len() > MAX_CHANGED {
            return None;
        }
        changed.sort_by(|(a, _), (b, _)| a.cmp(b));
        if changed.windows(2).any(|w| w[0].0 == w[1].0) {
            return None;
        }
        let mut replaced = self.replaced.clone();
        replaced.extend(items.iter().cloned());
        Some(Layered {
            base: self.base.clone(),
            item_of,
            replaced,
            changed,
        })
    }

    /// Tests only: the identity of the base (shared by the values made from these by
    /// [`Layered::with`]).
    #[cfg(test)]
    pub(super) fn base_id(&self) -> usize {
        Arc::as_ptr(&self.base) as usize
    }

    /// Every key and its value: the base's in its order (those of replaced items left out), the
    /// changed ones merged in by key (in key order when the base is sorted).
    pub(super) fn iter(&self) -> impl Iterator<Item = (String, &V)> {
        let item_of = self.item_of;
        let replaced = &self.replaced;
        let base = self
            .base
            .iter()
            .filter(move |(key, _)| replaced.is_empty() || !replaced.contains(&item_of(key)));
        Merged {
            base: base.peekable(),
            changed: self.changed.iter().peekable(),
        }
    }
}

/// The merge of a base's values and changed ones (see [`Layered::iter`]).
struct Merged<'a, V, B: Iterator<Item = (String, &'a V)>> {
    base: Peekable<B>,
    changed: Peekable<std::slice::Iter<'a, (String, V)>>,
}

impl<'a, V, B: Iterator<Item = (String, &'a V)>> Iterator for Merged<'a, V, B> {
    type Item = (String, &'a V);

    fn next(&mut self) -> Option<(String, &'a V)> {
        let changed_first = match (self.base.peek(), self.changed.peek()) {
            (Some((base, _)), Some((changed, _))) => changed < base,
            (None, _) => true,
            (Some(_), None) => false,
        };
        if changed_first {
            self.changed.next().map(|(key, value)| (key.clone(), value))
        } else {
            self.base.next()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::keyed::KeyedBuilder;
    use super::*;

    /// Keys `ITEM/...` belong to scalar `ITEM`; keys without a `/`, to no item.
    fn item_of(key: &str) -> Option<PropertyId> {
        let (item, _) = key.split_once('/')?;
        Some(PropertyId::Scalar(item.to_string()))
    }

    fn scalar(name: &str) -> Option<PropertyId> {
        Some(PropertyId::Scalar(name.to_string()))
    }

    fn bytes(value: &str) -> crate::stores::Bytes {
        crate::stores::Bytes::from_vec(value.as_bytes().to_vec())
    }

    fn read(layered: &Layered<crate::stores::Bytes>) -> Vec<(String, String)> {
        let text = |v: &crate::stores::Bytes| String::from_utf8(v.as_slice().to_vec()).unwrap();
        layered.iter().map(|(k, v)| (k, text(v))).collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn base(list: &[(&str, &str)]) -> Layered<crate::stores::Bytes> {
        let mut keyed = KeyedBuilder::default();
        for (key, value) in list {
            keyed.push(key, bytes(value));
        }
        Layered::new(keyed.sorted(), item_of)
    }

    fn values(list: &[(&str, &str)]) -> Vec<(String, crate::stores::Bytes)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), bytes(v)))
            .collect()
    }

    #[test]
    fn changed_items_replace_all_their_keys_and_merge_in_key_order() {
        let all = [
            ("a/1", "a1"),
            ("a/2", "a2"),
            ("b/1", "b1"),
            ("c/1", "c1"),
            ("g", "g"),
        ];
        let layered = base(&all);
        assert_eq!(read(&layered), pairs(&all));
        // Item a loses a key and changes the other, b is new at a key between, the groups
        // change, c stays.
        let changed = layered
            .with(
                &[scalar("a"), scalar("b"), None],
                values(&[("b/0", "B0"), ("a/2", "A2"), ("h", "h"), ("g", "G")]),
            )
            .unwrap();
        let expected = [
            ("a/2", "A2"),
            ("b/0", "B0"),
            ("c/1", "c1"),
            ("g", "G"),
            ("h", "h"),
        ];
        assert_eq!(read(&changed), pairs(&expected));
        // Changed again: the earlier change of a is dropped, that of b stays.
        let again = changed.with(&[scalar("a")], Vec::new()).unwrap();
        let expected = [("b/0", "B0"), ("c/1", "c1"), ("g", "G"), ("h", "h")];
        assert_eq!(read(&again), pairs(&expected));
        // The first one is unchanged (its base is shared).
        assert_eq!(read(&layered), pairs(&all));
    }

    #[test]
    fn a_value_of_another_item_or_too_many_changes_are_refused() {
        let layered = base(&[("a/1", "a1")]);
        assert!(layered
            .with(&[scalar("a")], values(&[("b/1", "b1")]))
            .is_none());
        assert!(layered
            .with(&[scalar("a")], values(&[("a/1", "x"), ("a/1", "y")]))
            .is_none());
        let many: Vec<String> = (0..=MAX_CHANGED).map(|i| format!("a/{i}")).collect();
        let many: Vec<(&str, &str)> = many.iter().map(|k| (k.as_str(), "v")).collect();
        assert!(layered.with(&[scalar("a")], values(&many)).is_none());
        assert!(layered.with(&[scalar("a")], values(&many[1..])).is_some());
    }
}
