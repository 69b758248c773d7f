//! Hostile ZIP archives: truncated, garbled, forged sizes and offsets, bombs, bad CRCs.

use super::{fixture_copy, Case, Expect};

pub fn cases() -> Vec<Case> {
    vec![
        Case::new("zarr zip fixture as it is", Expect::clean(), |dir| {
            fixture_copy(dir, "zarr_v2.daf.zarr.zip")
                .display()
                .to_string()
        }),
        Case::new("zip cut in half", Expect::Refused("corrupt ZIP"), |dir| {
            let path = fixture_copy(dir, "zarr_v2.daf.zarr.zip");
            let bytes = std::fs::read(&path).unwrap();
            std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
            path.display().to_string()
        }),
    ]
}
