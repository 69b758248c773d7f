//! The name check of the path grammar: which property, axis and group names a source may bring.
//!
//! Every name that comes from a source (a directory entry, a ZIP entry name, a Zarr key) and
//! becomes a path component of the mounted tree goes through [`check_name`] before a reader uses
//! it. Names that would escape or break the tree (`.`, `..`, empty, with `/` or NUL) or that are
//! unsafe to show and log (control characters) are refused; the readers skip such an entry with
//! one warning. Any other name is a valid Daf name, spaces and non-ASCII letters included.

/// Longest name accepted, in bytes: a file name is at most 255 bytes, and the FilesDaf view
/// adds `.json` or `.data` to a property name. (The longer suffixes of sparse payloads,
/// `.colptr` and `.rowval`, do not fit names of 249 or 250 bytes: the views leave such files
/// out with a warning.)
pub const MAX_NAME_BYTES: usize = 255 - 5;

/// Why `name` cannot name a property, axis or group, or `None` if it can.
pub fn check_name(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("an empty name");
    }
    if name == "." || name == ".." {
        return Some("a name that is '.' or '..'");
    }
    if name.contains('/') {
        return Some("a name containing '/'");
    }
    if name.contains('\0') {
        return Some("a name containing NUL");
    }
    if name.chars().any(char::is_control) {
        return Some("a name containing a control character");
    }
    if name.len() > MAX_NAME_BYTES {
        return Some("a name longer than 250 bytes");
    }
    None
}

/// Whether `name` passes [`check_name`]; logs one warning naming `where_()` if not (made only
/// then: a source of a million names checks a million, and formatting each place cost more
/// than the check).
pub fn accept_name(name: &str, where_: impl FnOnce() -> String) -> bool {
    match check_name(name) {
        None => true,
        Some(why) => {
            log::warn!("skipping {}: {why} ({name:?})", where_());
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_names_are_refused_and_odd_ones_kept() {
        for bad in [
            "",
            ".",
            "..",
            "a/b",
            "/",
            "a\0b",
            "a\nb",
            "\u{7f}",
            &"x".repeat(251),
        ] {
            assert!(check_name(bad).is_some(), "{bad:?}");
        }
        for good in [
            "a",
            "a b",
            "ünïcødé",
            "…",
            ".hidden",
            "...",
            "x.y",
            &"x".repeat(250),
        ] {
            assert_eq!(check_name(good), None, "{good:?}");
        }
    }
}
