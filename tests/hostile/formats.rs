//! Hostile FilesDaf and Zarr content in directory sources: bad JSON and `.zarray`s, huge shapes,
//! hostile names, symlinks, FIFOs, non-UTF-8.

use super::{fixture_copy, Case, Expect};

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("filesdaf fixture as it is", Expect::clean(), |dir| {
            fixture_copy(dir, "files_v1_0.daf").display().to_string()
        }),
        Case::new("daf.json is not JSON", Expect::Refused("daf.json"), |dir| {
            let root = fixture_copy(dir, "files_v1_0.daf");
            std::fs::write(root.join("daf.json"), b"{\"version\": [1,").unwrap();
            root.display().to_string()
        }),
    ]
}
