//! Tests of [`Properties`]: it answers as the `BTreeMap` it replaces, under any edits, and is
//! small.
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use proptest::prelude::*;

use super::*;
use crate::formats::model::{Packed, Payload};
use crate::formats::types::NumType;
use crate::stores::{Blob, Bytes};

/// A property told apart by its mtime.
fn prop(n: u64) -> Property {
    Property {
        payload: Payload::Dense {
            eltype: NumType::UInt8,
            data: Blob::ready(Bytes::empty()),
        },
        mtime: (SystemTime::UNIX_EPOCH + Duration::from_secs(n)).into(),
        packed: Packed::default(),
    }
}

fn same(props: &Properties, map: &BTreeMap<String, u64>) -> Result<(), TestCaseError> {
    let seen: Vec<(&str, SystemTime)> = props.iter().map(|(k, p)| (k, p.mtime.get())).collect();
    let expected: Vec<(&str, SystemTime)> = map
        .iter()
        .map(|(k, n)| (k.as_str(), SystemTime::UNIX_EPOCH + Duration::from_secs(*n)))
        .collect();
    prop_assert_eq!(seen, expected);
    prop_assert_eq!(props.len(), map.len());
    prop_assert_eq!(
        props.keys().next_back(),
        map.keys().next_back().map(String::as_str)
    );
    for (k, n) in map {
        prop_assert_eq!(
            props.get(k).map(|p| p.mtime.get()),
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(*n))
        );
        prop_assert!(props.contains_key(k));
    }
    Ok(())
}

proptest! {
    /// Collected from pairs in any order (duplicates: the last wins), then edited: the same
    /// names, order and properties as a `BTreeMap` given the same pairs and edits.
    #[test]
    fn properties_answer_as_a_map(
        pairs in prop::collection::vec(("[a-d]{0,3}", 0u64..100), 0..40),
        edits in prop::collection::vec((any::<bool>(), "[a-d]{0,3}", 0u64..100), 0..40),
    ) {
        let mut props: Properties = pairs.iter().map(|(k, n)| (k.clone(), prop(*n))).collect();
        let mut map: BTreeMap<String, u64> = pairs.iter().cloned().collect();
        same(&props, &map)?;
        for (insert, k, n) in edits {
            if insert {
                let old = props.insert(k.clone(), prop(n)).map(|p| p.mtime.get());
                let expected = map.insert(k, n).map(|n| SystemTime::UNIX_EPOCH + Duration::from_secs(n));
                prop_assert_eq!(old, expected);
            } else {
                let old = props.remove(&k).map(|p| p.mtime.get());
                let expected = map.remove(&k).map(|n| SystemTime::UNIX_EPOCH + Duration::from_secs(n));
                prop_assert_eq!(old, expected);
            }
            same(&props, &map)?;
            prop_assert!(props.names.len() <= 2 * map.keys().map(String::len).sum::<usize>() + 3);
        }
    }
}

/// Collected from sorted names, the names lie in one buffer of exactly their bytes and the
/// slots in a vector of exactly their number; a slot is 40 bytes (a `BTreeMap` entry took 88
/// and an allocation for its name).
#[test]
fn properties_are_compact() {
    let props: Properties = (0..1000u64)
        .map(|n| (format!("p{n:04}"), prop(n)))
        .collect();
    assert_eq!(props.names.len(), 5000);
    assert_eq!(props.names.capacity(), 5000);
    assert_eq!(props.slots.capacity(), 1000);
    assert_eq!(
        props["p0999"].mtime.get(),
        SystemTime::UNIX_EPOCH + Duration::from_secs(999)
    );
    assert!(
        std::mem::size_of::<Slot>() <= 40,
        "{}",
        std::mem::size_of::<Slot>()
    );
}
