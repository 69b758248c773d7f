//! The sorted keys of a [`StoreIndex`](super::StoreIndex) and their slots, and the sorts that
//! make them. An index's copies share the keys; a copy may see only a window of them (the keys
//! under one directory, [`Sorted::dir_windows`]), in which its lookups search.

use std::ops::Range;
use std::sync::Arc;

use super::{parallel, Slot};

/// Keys and their slots, sorted by key, each key once: a sorted vector rather than a tree (sized
/// exactly, built without a node per few keys, and searched in about half the key comparisons
/// of a `BTreeMap` of a million keys), shared by the index's copies (a store hands out its
/// index by copy).
#[derive(Clone, Debug, Default)]
pub(super) struct Sorted {
    all: Arc<[(Box<str>, Slot)]>,
    /// The pairs of `all` this copy sees.
    window: Range<usize>,
}

/// The keys under one directory of an index: a window of its sorted keys (see
/// [`Sorted::dir_windows`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window(Range<usize>);

/// Sorts `pairs` by key, keeping of duplicated keys the last one (a large index: its slices
/// sorted first on every core, then merged).
pub(super) fn sort_last_wins<V: Send>(pairs: &mut Vec<(Box<str>, V)>) {
    let order = |a: &(Box<str>, V), b: &(Box<str>, V)| a.0.cmp(&b.0);
    parallel::sort_slices(
        pairs,
        parallel::Split::per_core(KEYS_PER_SORT_THREAD),
        order,
    );
    sort_last_wins_by(pairs, order);
}

/// Fewest keys worth a sorting thread of their own.
const KEYS_PER_SORT_THREAD: usize = 100_000;

/// Sorts `items` by `order`, keeping of items equal by it the last one (as a map collected
/// from them would).
pub fn sort_last_wins_by<T>(items: &mut Vec<T>, order: impl Fn(&T, &T) -> std::cmp::Ordering) {
    // Stable: equal items keep their order, and the later one replaces the kept one.
    items.sort_by(&order);
    items.dedup_by(|later, kept| {
        let same = order(later, kept).is_eq();
        if same {
            std::mem::swap(later, kept);
        }
        same
    });
}

impl Sorted {
    pub(super) fn new(pairs: Vec<(Box<str>, Slot)>) -> Sorted {
        let all: Arc<[_]> = pairs.into();
        let window = 0..all.len();
        Sorted { all, window }
    }

    /// The pairs this copy sees, sorted by key.
    pub(super) fn pairs(&self) -> &[(Box<str>, Slot)] {
        self.all.get(self.window.clone()).unwrap_or(&[])
    }

    pub(super) fn get_key_value(&self, key: &str) -> Option<(&str, &Slot)> {
        let pairs = self.pairs();
        let at = pairs.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        pairs.get(at).map(|(k, slot)| (&**k, slot))
    }

    pub(super) fn contains_key(&self, key: &str) -> bool {
        self.get_key_value(key).is_some()
    }

    /// The pairs from the first key at or after `from` (after it, when `inclusive` is false).
    pub(super) fn from(
        &self,
        from: &str,
        inclusive: bool,
    ) -> std::slice::Iter<'_, (Box<str>, Slot)> {
        let pairs = self.pairs();
        let at = pairs.partition_point(|(k, _)| match (**k).cmp(from) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Equal => !inclusive,
            std::cmp::Ordering::Greater => false,
        });
        pairs[at..].iter()
    }

    /// The sub-directories of `dir` ("" for the root) in the order of their names, each with
    /// the window of the keys under it. One walk of the keys under `dir`: the end of each
    /// sub-directory's keys is found by a search that gallops from its first key, so a
    /// sub-directory of a few keys costs a few comparisons, not a search of the whole index.
    pub(super) fn dir_windows(&self, dir: &str) -> Vec<(String, Window)> {
        let mut prefix = String::with_capacity(dir.len() + 1);
        if !dir.is_empty() {
            prefix.push_str(dir);
            prefix.push('/');
        }
        let pairs = self.pairs();
        let start = pairs.partition_point(|(k, _)| **k < *prefix);
        let mut at = start;
        let mut dirs: Vec<(String, Window)> = Vec::new();
        let mut under = String::new();
        while let Some((key, _)) = pairs.get(at) {
            let Some(rest) = key.strip_prefix(prefix.as_str()) else {
                break;
            };
            let Some((name, _)) = rest.split_once('/') else {
                at += 1;
                continue;
            };
            under.clear();
            under.push_str(&prefix);
            under.push_str(name);
            under.push('/');
            let len = gallop(&pairs[at..], |(k, _)| k.starts_with(under.as_str()));
            let from = self.window.start + at;
            if !name.is_empty() {
                dirs.push((name.to_string(), Window(from..from + len)));
            }
            at += len.max(1);
        }
        if !dirs.is_sorted_by(|a, b| a.0 <= b.0) {
            dirs.sort_by(|a, b| a.0.cmp(&b.0));
        }
        dirs
    }

    /// This index's keys seen through `window` (one of its [`Sorted::dir_windows`], or of a
    /// copy's); a window past the keys sees none.
    pub(super) fn see(&mut self, window: &Window) {
        self.window = window.0.clone();
    }
}

/// How many items at the start of `items` satisfy `pred` (true for a prefix of them, then
/// false): a galloping search, in about twice the logarithm of the answer.
fn gallop<T>(items: &[T], pred: impl Fn(&T) -> bool) -> usize {
    let mut bound = 1;
    while bound < items.len() && pred(&items[bound]) {
        bound *= 2;
    }
    let low = bound / 2;
    let high = bound.min(items.len());
    low + items[low..high].partition_point(&pred)
}
