//! [`Properties`]: the vector or matrix properties of one group (`vectors/A/`,
//! `matrices/R/C/`) by name, sorted, kept compact for sources of a million properties.
//!
//! A `BTreeMap<String, Property>` took about 120 bytes a property: 88 in its nodes (a 24-byte
//! `String` and the 64-byte property) and a heap allocation of at least 32 bytes for each name,
//! made while the source was read, among the blobs that stay. Here the names of a group lie one
//! after the other in one buffer and each property is kept with where its name lies: 72 bytes
//! and the name's own bytes, two allocations per group, looked up by binary search.
//!
//! Edits (a written or removed property of a writable mount) keep the vector sorted (an insert or
//! a removal moves the slots after it); a removed name's bytes stay in the buffer until they are
//! half of it, then the buffer is rebuilt. A group's names total at most 4 GiB ([`MAX_NAMES`]): a property beyond that is left
//! out with a warning (no source holds such a group).

use std::fmt;

use super::model::Property;
use crate::stores::sort_last_wins_by;

/// The most bytes the names of one group may take.
pub const MAX_NAMES: usize = u32::MAX as usize;

/// A property and where its name lies in [`Properties::names`].
struct Slot {
    at: u32,
    len: u32,
    property: Property,
}

/// Properties by name, sorted by name (see the module doc).
#[derive(Default)]
pub struct Properties {
    /// The names, one after the other (with the bytes of removed ones until compacted).
    names: String,
    /// Sorted by name, each name once.
    slots: Vec<Slot>,
}

impl Properties {
    /// No properties.
    pub fn new() -> Properties {
        Properties::default()
    }

    /// Where `name` is, or where it would go.
    fn search(&self, name: &str) -> Result<usize, usize> {
        self.slots
            .binary_search_by(|slot| name_in(&self.names, slot).cmp(name))
    }

    /// How many properties.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The property named `name`.
    pub fn get(&self, name: &str) -> Option<&Property> {
        let at = self.search(name).ok()?;
        self.slots.get(at).map(|slot| &slot.property)
    }

    /// The property named `name`, to change it.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut Property> {
        let at = self.search(name).ok()?;
        self.slots.get_mut(at).map(|slot| &mut slot.property)
    }

    /// Whether a property is named `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.search(name).is_ok()
    }

    /// Sets property `name`, giving back the one it replaces (a `String`, as a map's `insert`
    /// takes; its bytes are copied into the names). Past [`MAX_NAMES`] a new name is left out.
    pub fn insert(&mut self, name: String, property: Property) -> Option<Property> {
        let name = name.as_str();
        match self.search(name) {
            Ok(at) => Some(std::mem::replace(&mut self.slots[at].property, property)),
            Err(at) => {
                let slot = self.push_name(name, property)?;
                self.slots.insert(at, slot);
                None
            }
        }
    }

    /// Takes property `name` out.
    pub fn remove(&mut self, name: &str) -> Option<Property> {
        let at = self.search(name).ok()?;
        let slot = self.slots.remove(at);
        let live: usize = self.slots.iter().map(|s| s.len as usize).sum();
        if live < self.names.len() / 2 {
            self.compact();
        }
        Some(slot.property)
    }

    /// The properties with their names, sorted by name.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            names: &self.names,
            slots: self.slots.iter(),
        }
    }

    /// The names, sorted.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> + ExactSizeIterator {
        self.slots.iter().map(|slot| name_in(&self.names, slot))
    }

    /// The properties, sorted by name.
    pub fn values(&self) -> impl DoubleEndedIterator<Item = &Property> + ExactSizeIterator {
        self.slots.iter().map(|slot| &slot.property)
    }

    /// Appends `name` to the names, for a slot of `property`: `None` (with a warning; the
    /// property is dropped) past [`MAX_NAMES`] bytes of live names.
    fn push_name(&mut self, name: &str, property: Property) -> Option<Slot> {
        if self.names.len() + name.len() > MAX_NAMES {
            self.compact();
        }
        let fits = self.names.len() + name.len() <= MAX_NAMES;
        let (true, Ok(at), Ok(len)) = (
            fits,
            u32::try_from(self.names.len()),
            u32::try_from(name.len()),
        ) else {
            log::warn!("property {name:?} left out: a group's names take at most 4 GiB");
            return None;
        };
        self.names.push_str(name);
        Some(Slot { at, len, property })
    }

    /// Rebuilds the names buffer from the live names only.
    fn compact(&mut self) {
        let live: usize = self.slots.iter().map(|s| s.len as usize).sum();
        let mut names = String::with_capacity(live);
        for slot in &mut self.slots {
            let name = name_in(&self.names, slot);
            // Live names never exceed the old buffer, so the offset fits as it did.
            slot.at = u32::try_from(names.len()).unwrap_or(u32::MAX);
            names.push_str(name);
        }
        self.names = names;
    }
}

fn name_in<'a>(names: &'a str, slot: &Slot) -> &'a str {
    let start = slot.at as usize;
    names.get(start..start + slot.len as usize).unwrap_or("")
}

/// Built from pairs in any order; of duplicated names the last one wins (as a map's `collect`).
/// The buffer and the vector are sized exactly, and each pair's name is dropped as it is
/// copied in.
impl<S: AsRef<str>> FromIterator<(S, Property)> for Properties {
    fn from_iter<I: IntoIterator<Item = (S, Property)>>(pairs: I) -> Properties {
        let pairs = pairs.into_iter();
        let mut props = Properties {
            names: String::new(),
            slots: Vec::with_capacity(pairs.size_hint().0),
        };
        for (name, property) in pairs {
            if let Some(slot) = props.push_name(name.as_ref(), property) {
                props.slots.push(slot);
            }
        }
        let names = &props.names;
        let sorted = props
            .slots
            .windows(2)
            .all(|w| name_in(names, &w[0]) < name_in(names, &w[1]));
        if !sorted {
            sort_last_wins_by(&mut props.slots, |a, b| {
                name_in(names, a).cmp(name_in(names, b))
            });
            props.compact();
        }
        props.names.shrink_to_fit();
        props.slots.shrink_to_fit();
        props
    }
}

/// The properties of a [`Properties`] with their names, sorted by name.
pub struct Iter<'a> {
    names: &'a str,
    slots: std::slice::Iter<'a, Slot>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a Property);

    fn next(&mut self) -> Option<Self::Item> {
        let slot = self.slots.next()?;
        Some((name_in(self.names, slot), &slot.property))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.slots.size_hint()
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let slot = self.slots.next_back()?;
        Some((name_in(self.names, slot), &slot.property))
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a Properties {
    type Item = (&'a str, &'a Property);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// `props["name"]`: the property, which must exist (as a map's index).
impl std::ops::Index<&str> for Properties {
    type Output = Property;

    fn index(&self, name: &str) -> &Property {
        match self.get(name) {
            Some(property) => property,
            None => panic!("no property {name:?}"),
        }
    }
}

impl fmt::Debug for Properties {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

#[cfg(test)]
#[path = "properties_tests.rs"]
mod tests;
