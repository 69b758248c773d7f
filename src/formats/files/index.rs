//! The root `metadata.json` of FilesDaf 1.1 (`daf-formats.md` §3.5): one JSON object, no
//! whitespace, no trailing newline, indexing every axis (`{"format":"axis","n_entries":N}`),
//! scalar and property (its sidecar document, compacted), in the order DataAxesFormats rebuilds
//! it: axes, then scalars, then `vectors/A` (axes sorted), then `matrices/R/C` (R, then C sorted),
//! each directory's files in sorted file-name order (so `a-b.json` comes before `a.json`).
//!
//! The FilesDaf 1.1 view synthesises it from the documents it shows; a commit into a FilesDaf 1.1
//! directory rebuilds the source's own from the files on disk ([`tree_entries`]).

use std::collections::HashMap;
use std::sync::Arc;

use crate::stores::{Blob, StoreError, StoreIndex};

use crate::formats::json::quote;
use crate::formats::strings::count_lines;

/// What one key of the index stands for.
#[derive(Clone, Debug)]
pub enum IndexValue {
    /// An axis of this many entries.
    Axis(u64),
    /// A scalar file or a descriptor; its content (compacted) is the value.
    Document(Arc<Blob>),
}

/// Where `key` (`axes/A`, `scalars/N`, `vectors/A/N`, `matrices/R/C/N`) goes in the rebuild
/// order: section, directory names, file name. `None` for any other key.
fn rebuild_rank(key: &str) -> Option<(u8, Vec<&str>, String)> {
    let parts: Vec<&str> = key.split('/').collect();
    match parts.as_slice() {
        ["axes", name] => Some((0, Vec::new(), format!("{name}.txt"))),
        ["scalars", name] => Some((1, Vec::new(), format!("{name}.json"))),
        ["vectors", axis, name] => Some((2, vec![*axis], format!("{name}.json"))),
        ["matrices", rows, cols, name] => Some((3, vec![*rows, *cols], format!("{name}.json"))),
        _ => None,
    }
}

/// The JSON text of a document without whitespace outside strings (so also without its trailing
/// newline), as DataAxesFormats re-serialises a parsed sidecar.
pub fn compact(doc: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(doc.len());
    let (mut in_string, mut escaped) = (false, false);
    for &b in doc {
        if in_string {
            out.push(b);
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
        } else if !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
            in_string = b == b'"';
            out.push(b);
        }
    }
    out
}

/// The `metadata.json` bytes for `entries` (any order: they are put in the rebuild order; keys
/// that are not an axis, scalar, vector or matrix are left out). Reads each document.
pub fn index_text(mut entries: Vec<(String, IndexValue)>) -> Result<Vec<u8>, StoreError> {
    entries.retain(|(key, _)| rebuild_rank(key).is_some());
    entries.sort_by(|(a, _), (b, _)| rebuild_rank(a).cmp(&rebuild_rank(b)));
    let mut out = b"{".to_vec();
    for (i, (key, value)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(quote(key).as_bytes());
        out.push(b':');
        match value {
            IndexValue::Axis(n) => out.extend_from_slice(axis_value(*n).as_bytes()),
            IndexValue::Document(blob) => out.extend_from_slice(&compact(blob.bytes()?.as_slice())),
        }
    }
    out.push(b'}');
    Ok(out)
}

/// The length of what [`index_text`] makes of `entries`, without making it (a `stat` of a
/// large data set's `metadata.json` renders nothing): each distinct document is compacted once
/// (most are shared by many keys).
pub fn index_len<'a, K: AsRef<str>>(
    entries: impl Iterator<Item = (K, &'a IndexValue)>,
) -> Result<u64, StoreError> {
    let mut compacted: HashMap<*const Blob, u64> = HashMap::new();
    let (mut count, mut len) = (0u64, 0u64);
    for (key, value) in entries {
        let key = key.as_ref();
        if rebuild_rank(key).is_none() {
            continue;
        }
        count += 1;
        // `"KEY":VALUE`
        len += quote(key).len() as u64 + 1;
        len += match value {
            IndexValue::Axis(n) => axis_value(*n).len() as u64,
            IndexValue::Document(blob) => match compacted.get(&Arc::as_ptr(blob)) {
                Some(&n) => n,
                None => {
                    let n = compact(blob.bytes()?.as_slice()).len() as u64;
                    compacted.insert(Arc::as_ptr(blob), n);
                    n
                }
            },
        };
    }
    // `{`, the entries with a `,` between two, `}`.
    Ok(2 + len + count.saturating_sub(1))
}

/// An axis's value in `metadata.json`.
fn axis_value(n: u64) -> String {
    format!("{{\"format\":\"axis\",\"n_entries\":{n}}}")
}

/// The index entries of the FilesDaf tree in `index` (a directory source, as it is on disk):
/// `axes/*.txt` (their lines counted), `scalars/*.json`, `vectors/A/*.json`,
/// `matrices/R/C/*.json`. A document that is not JSON or an axis that is not text is left out
/// with a warning (DataAxesFormats would fail on it).
pub fn tree_entries(index: &StoreIndex) -> Result<Vec<(String, IndexValue)>, StoreError> {
    let mut entries = Vec::new();
    for file in index.children("axes") {
        let Some(name) = file.strip_suffix(".txt") else {
            continue;
        };
        let Some(entry) = index.get(&format!("axes/{file}")) else {
            continue;
        };
        match count_lines(entry.blob.bytes()?.as_slice()) {
            Ok(n) => entries.push((format!("axes/{name}"), IndexValue::Axis(n))),
            Err(e) => log::warn!("metadata.json: leaving out axes/{file}: {e}"),
        }
    }
    let mut dirs = vec!["scalars".to_string()];
    for axis in index.children("vectors") {
        dirs.push(format!("vectors/{axis}"));
    }
    for rows in index.children("matrices") {
        for cols in index.children(&format!("matrices/{rows}")) {
            dirs.push(format!("matrices/{rows}/{cols}"));
        }
    }
    for dir in dirs {
        for file in index.children(&dir) {
            let Some(name) = file.strip_suffix(".json") else {
                continue;
            };
            let Some(entry) = index.get(&format!("{dir}/{file}")) else {
                continue;
            };
            let bytes = entry.blob.bytes()?;
            match serde_json::from_slice::<serde::de::IgnoredAny>(bytes.as_slice()) {
                Ok(_) => entries.push((
                    format!("{dir}/{name}"),
                    IndexValue::Document(entry.blob.clone()),
                )),
                Err(e) => log::warn!("metadata.json: leaving out {dir}/{file}: {e}"),
            }
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::dir::open_directory;
    use crate::stores::Bytes;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures");

    fn doc(text: &str) -> IndexValue {
        IndexValue::Document(Blob::ready(Bytes::from_vec(text.as_bytes().to_vec())))
    }

    #[test]
    fn compacting_keeps_strings_and_drops_the_rest_of_the_whitespace() {
        assert_eq!(
            compact(b"{ \"type\": \"String\",\n \"value\": \"a \\\" b\\\\\" }\n"),
            b"{\"type\":\"String\",\"value\":\"a \\\" b\\\\\"}".to_vec()
        );
    }

    #[test]
    fn the_order_is_the_rebuild_order_and_there_is_no_trailing_newline() {
        let entries = vec![
            ("matrices/b/a/m".to_string(), doc("{}\n")),
            ("vectors/a/x".to_string(), doc("{\"v\":1}\n")),
            ("vectors/a/x-y".to_string(), doc("{\"v\":2}\n")),
            (
                "scalars/s".to_string(),
                doc("{\"type\":\"Int64\",\"value\":1}\n"),
            ),
            ("matrices/a/b/m".to_string(), doc("{}")),
            ("axes/b".to_string(), IndexValue::Axis(2)),
            ("axes/a".to_string(), IndexValue::Axis(0)),
            ("other".to_string(), IndexValue::Axis(9)),
        ];
        let text = String::from_utf8(index_text(entries).unwrap()).unwrap();
        assert_eq!(
            text,
            concat!(
                "{\"axes/a\":{\"format\":\"axis\",\"n_entries\":0},",
                "\"axes/b\":{\"format\":\"axis\",\"n_entries\":2},",
                "\"scalars/s\":{\"type\":\"Int64\",\"value\":1},",
                "\"vectors/a/x-y\":{\"v\":2},\"vectors/a/x\":{\"v\":1},",
                "\"matrices/a/b/m\":{},\"matrices/b/a/m\":{}}"
            )
        );
        assert_eq!(index_text(Vec::new()).unwrap(), b"{}".to_vec());
    }

    #[test]
    fn the_julia_fixture_rebuilds_to_its_own_metadata_json() {
        let root = std::path::Path::new(FIXTURES).join("julia-filesdaf-1.1");
        let index = open_directory(&root).unwrap();
        let text = index_text(tree_entries(&index).unwrap()).unwrap();
        let expected = std::fs::read(root.join("metadata.json")).unwrap();
        assert_eq!(
            String::from_utf8(text).unwrap(),
            String::from_utf8(expected).unwrap()
        );
    }

    #[test]
    fn the_length_is_counted_as_the_text_is_made() {
        let shared = doc("{ \"format\": \"dense\",\n \"eltype\": \"Float32\" }\n");
        let entries = [
            ("vectors/a/x".to_string(), shared.clone()),
            ("vectors/a/y\"q\u{e9}\u{1}".to_string(), shared.clone()),
            ("axes/a".to_string(), IndexValue::Axis(12345)),
            (
                "scalars/s".to_string(),
                doc("{\"type\":\"String\",\"value\":\" a b \"}"),
            ),
            ("matrices/a/b/m".to_string(), shared),
            ("not/an/item".to_string(), doc("{}")),
        ];
        for n in 0..=entries.len() {
            let some = &entries[..n];
            let counted = index_len(some.iter().map(|(k, v)| (k, v))).unwrap();
            assert_eq!(
                counted,
                index_text(some.to_vec()).unwrap().len() as u64,
                "{n}"
            );
        }
    }
}
