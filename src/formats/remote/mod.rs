//! Remote sources: a ZarrDaf served over HTTP(S) (`http(s)://…/x.daf.zarr`, read-only, with an
//! optional query string sent with every request), opened into the same [`StoreIndex`] the local
//! readers take, listing the server only for a Zarr v3 source without consolidated metadata.
//!
//! - Zarr v2: the consolidated `.zmetadata` gives every document (their bytes come from it, no
//!   extra GET); Zarr v3: the root `zarr.json` with inline `consolidated_metadata`, else a walk of
//!   the nodes' `zarr.json` documents through the server's directory listing
//!   ([`crate::formats::remote::walk`]; a chunk the listing does not show is left out).
//! - Every chunk key the arrays' metadata imply is added (a bounded grid): a chunk of an array
//!   stored as Daf writes it (one chunk, no compressor) gets its size from the metadata, so the
//!   mount costs no request per chunk; any other chunk is stat'ed (HEAD) at mount, and a missing
//!   one is left out (the fill value, like locally).
//! - The first request checks that the server answers `Range` requests (a clear error otherwise).
//!
//! Remote ZIPs (`….daf.zarr.zip`, `….dafs.zarr.zip[#/G]`, `….daf.zip`, `….dafs.zip[#/G]`) are
//! read by range requests through `stores::http::zip` and then exactly like local archives.
//!
//! An `s3://BUCKET/KEY` source is the same, at the HTTP URL of that key in its bucket
//! (`stores::http::s3::resolve`), with every request signed and its listings `ListObjectsV2` of
//! the bucket; its errors name it as given.

pub mod walk;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::stores::http::listing::Listing;
use crate::stores::http::object::RemoteObject;
use crate::stores::http::store::{remote_directory, remote_zip};
use crate::stores::http::{escape_key, redact, s3, Fetch, HttpClient, HttpOptions};
use crate::stores::{Blob, Bytes, Entry, StoreIndex};

use super::datasets::{archive_datasets, root_dataset};
pub use super::source::is_url;
use super::source::{parse_source, split_url_query, Place, Source, SourceSpec};
use super::FormatError;
use crate::formats::remote::walk::walk;

/// Most chunk keys one array may imply (a larger grid is refused).
pub const MAX_CHUNKS_PER_ARRAY: u64 = 100_000;

fn not_daf(url: &str, why: impl Into<String>) -> FormatError {
    FormatError::NotDaf {
        path: PathBuf::from(redact(url)),
        why: why.into(),
    }
}

fn failed(url: &str, fetch: Fetch) -> FormatError {
    match fetch {
        Fetch::NotFound => not_daf(url, "not found on the server (404)"),
        Fetch::Transient(why) | Fetch::Failed(why) => FormatError::Bad(why),
    }
}

/// Opens the remote source `url` (read-only) with these client options. A query string in `url`
/// (`…?X-Amz-Signature=…`, `…?sv=…&sig=…`, before any `#/GROUP`) goes with every request of the
/// mount and nowhere else (not in names, paths or logs).
pub fn open_remote(url: &str, options: &HttpOptions) -> Result<Source, FormatError> {
    if s3::is_s3(url) {
        let bad = |why: String| FormatError::BadPath {
            path: url.to_string(),
            why,
        };
        let bucket = s3::resolve(url, &options.s3, &s3::Config::process()).map_err(bad)?;
        let client = HttpClient::for_bucket(
            HttpOptions {
                query: None,
                ..options.clone()
            },
            Some(bucket.bucket_url),
            bucket.signer,
        );
        // Its errors name the source as given, whatever URL they are about.
        return open_with(&client, &bucket.url).map_err(|e| match e.to_string() {
            text if text.contains(url) => e,
            text => FormatError::Bad(format!("{url}: {text}")),
        });
    }
    let (url, query) = split_url_query(url);
    let client = HttpClient::new(HttpOptions {
        query: query.or_else(|| options.query.clone()),
        ..options.clone()
    });
    open_with(&client, &url)
}

/// Opens the remote source at `url` (no query string) through `client`.
fn open_with(client: &Arc<HttpClient>, url: &str) -> Result<Source, FormatError> {
    match parse_source(url)? {
        SourceSpec::Zip {
            path,
            layout,
            multi,
            group,
        } => {
            let archive = path.to_string_lossy().into_owned();
            let store = remote_zip(client, &archive)?;
            let shown = PathBuf::from(redact(&archive));
            let place = |prefix: String| Place::Zip {
                archive: path.clone(),
                prefix,
            };
            let datasets =
                archive_datasets(&store, &shown, layout, multi, group.as_deref(), place)?;
            Ok(Source { path, datasets })
        }
        SourceSpec::Directory(_) => {
            let base = url.trim_end_matches('/');
            let index = remote_zarr_index(client, base)?;
            let store = remote_directory(base, index);
            let shown = PathBuf::from(redact(base));
            let dataset = root_dataset(&store, &shown, Place::Dir(PathBuf::from(base)))?;
            Ok(Source {
                path: PathBuf::from(base),
                datasets: vec![dataset],
            })
        }
        // The grammar never gives this for a URL (libhdf5 reads local files only).
        SourceSpec::H5df { .. } => Err(FormatError::BadPath {
            path: redact(url),
            why: "an H5df source must be a local file".into(),
        }),
    }
}

/// Checks that the server answers a ranged GET of `url` with 206 (a clear error at mount).
pub fn check_range_support(client: &HttpClient, url: &str) -> Result<(), FormatError> {
    client
        .get_range(url, 0, 1)
        .map(|_| ())
        .map_err(|e| failed(url, e))
}

/// The store index of the remote Zarr directory at `base`, from its consolidated metadata or (Zarr
/// v3 without it) the walk of its listing.
fn remote_zarr_index(client: &Arc<HttpClient>, base: &str) -> Result<StoreIndex, FormatError> {
    let mut documents: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    // The listing of each array's directory, when the tree was walked (a chunk not listed is
    // left out, as locally).
    let mut listings: BTreeMap<String, Listing> = BTreeMap::new();
    let v2_url = format!("{base}/.zmetadata");
    let version = match client.get(&v2_url) {
        Ok(got) => {
            let json: Value = serde_json::from_slice(&got.body)
                .map_err(|e| not_daf(&v2_url, format!("bad JSON: {e}")))?;
            let metadata = json
                .get("metadata")
                .and_then(Value::as_object)
                .ok_or_else(|| not_daf(&v2_url, "no \"metadata\" object"))?;
            for (key, doc) in metadata {
                documents.insert(key.clone(), to_json(doc));
            }
            documents.insert(".zmetadata".into(), got.body);
            check_range_support(client, &v2_url)?;
            2
        }
        Err(Fetch::NotFound) => {
            let v3_url = format!("{base}/zarr.json");
            let got = client.get(&v3_url).map_err(|e| match e {
                Fetch::NotFound => not_daf(
                    base,
                    "no .zmetadata (Zarr v2) or zarr.json (Zarr v3) on the server; a remote \
                     Zarr v2 directory needs consolidated metadata (.zmetadata)",
                ),
                other => failed(&v3_url, other),
            })?;
            let json: Value = serde_json::from_slice(&got.body)
                .map_err(|e| not_daf(&v3_url, format!("bad JSON: {e}")))?;
            check_range_support(client, &v3_url)?;
            match json
                .pointer("/consolidated_metadata/metadata")
                .and_then(Value::as_object)
            {
                Some(metadata) => {
                    for (key, doc) in metadata {
                        let key = key.trim_matches('/');
                        documents.insert(format!("{key}/zarr.json"), to_json(doc));
                    }
                }
                None => {
                    let walked = walk(client, base)?;
                    documents.extend(walked.documents);
                    listings = walked.arrays;
                }
            }
            documents.insert("zarr.json".into(), got.body);
            3
        }
        Err(other) => return Err(failed(&v2_url, other)),
    };
    let mtime = SystemTime::now();
    let mut entries = BTreeMap::new();
    for (key, body) in &documents {
        let (dir, chunks) = match (version, key.rsplit_once('/')) {
            (2, Some((dir, ".zarray"))) => (dir, chunks_v2(body)),
            (2, None) if key == ".zarray" => ("", chunks_v2(body)),
            (3, Some((dir, "zarr.json"))) => (dir, chunks_v3(body)),
            _ => continue,
        };
        let chunks = chunks.map_err(|why| FormatError::Bad(format!("{key}: {why}")))?;
        let listing = listings.get(dir);
        for chunk in chunks {
            if listing.is_some_and(|listing| !listed(listing, &chunk.name)) {
                continue;
            }
            let key = if dir.is_empty() {
                chunk.name.clone()
            } else {
                format!("{dir}/{}", chunk.name)
            };
            let url = format!("{base}/{}", escape_key(&key));
            // A listed chunk is there: only an unlisted one may be missing (a HEAD tells).
            let maybe_missing = chunk.zero_fill && listing.is_none();
            let object = match chunk.len {
                Some(len) => RemoteObject::new(client.clone(), url, len, None, maybe_missing),
                None => match client.stat(&url) {
                    Ok((len, validator)) => {
                        RemoteObject::new(client.clone(), url, len, Some(validator), false)
                    }
                    Err(Fetch::NotFound) => continue,
                    Err(other) => return Err(failed(&url, other)),
                },
            };
            entries.insert(
                key,
                Entry {
                    blob: object.into_blob(),
                    mtime,
                },
            );
        }
    }
    for (key, body) in documents {
        let entry = Entry {
            blob: Blob::ready(Bytes::from_vec(body)),
            mtime,
        };
        entries.insert(key, entry);
    }
    Ok(StoreIndex::new(entries, Some(mtime)))
}

/// Whether the listing of an array's directory shows chunk `name` (its first path segment: `c/`
/// for `c/0/0`, the file itself for `0.0`).
fn listed(listing: &Listing, name: &str) -> bool {
    match name.split_once('/') {
        Some((first, _)) => listing.dirs.contains(first),
        None => listing.files.contains(name),
    }
}

fn to_json(doc: &Value) -> Vec<u8> {
    serde_json::to_vec_pretty(doc).unwrap_or_default()
}

/// A chunk key an array's metadata implies, with its size when the metadata says it.
#[derive(Debug, PartialEq)]
struct Chunk {
    name: String,
    len: Option<u64>,
    /// A missing chunk reads as zeros (Zarr v3, fill value 0).
    zero_fill: bool,
}

/// Every coordinate of a grid of `counts` chunks per dimension, at most
/// [`MAX_CHUNKS_PER_ARRAY`].
fn grid(counts: &[u64]) -> Result<Vec<Vec<u64>>, String> {
    let total = counts
        .iter()
        .try_fold(1u64, |n, &c| n.checked_mul(c))
        .filter(|&n| n <= MAX_CHUNKS_PER_ARRAY)
        .ok_or_else(|| format!("more than {MAX_CHUNKS_PER_ARRAY} chunks"))?;
    let mut coords = Vec::with_capacity(total as usize);
    for mut n in 0..total {
        let mut coord = vec![0; counts.len()];
        for (d, &count) in counts.iter().enumerate().rev() {
            coord[d] = n % count;
            n /= count;
        }
        coords.push(coord);
    }
    Ok(coords)
}

fn dims(value: Option<&Value>) -> Option<Vec<u64>> {
    value?.as_array()?.iter().map(Value::as_u64).collect()
}

fn counts(shape: &[u64], chunks: &[u64]) -> Option<Vec<u64>> {
    (shape.len() == chunks.len() && chunks.iter().all(|&c| c > 0)).then(|| {
        shape
            .iter()
            .zip(chunks)
            .map(|(s, c)| s.div_ceil(*c))
            .collect()
    })
}

/// Bytes per item of a Zarr v2 `dtype` of fixed size.
fn v2_item_size(dtype: &str) -> Option<u64> {
    let kind = dtype.chars().nth(1)?;
    let n: u64 = dtype.get(2..)?.parse().ok()?;
    match kind {
        'b' | 'i' | 'u' | 'f' | 'c' | 'S' => Some(n),
        'U' => Some(4 * n),
        _ => None,
    }
}

fn chunks_v2(body: &[u8]) -> Result<Vec<Chunk>, String> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    let shape = dims(doc.get("shape")).ok_or("no shape")?;
    let chunk_shape = dims(doc.get("chunks")).ok_or("no chunks")?;
    let counts = counts(&shape, &chunk_shape).ok_or("chunks do not fit the shape")?;
    let separator = doc
        .get("dimension_separator")
        .and_then(Value::as_str)
        .unwrap_or(".");
    let plain = chunk_shape == shape
        && doc.get("compressor").is_none_or(Value::is_null)
        && doc
            .get("filters")
            .is_none_or(|f| f.is_null() || f.as_array().is_some_and(Vec::is_empty));
    let item = doc
        .get("dtype")
        .and_then(Value::as_str)
        .and_then(v2_item_size);
    let len = match (plain, item) {
        (true, Some(size)) => shape.iter().try_fold(size, |n, &d| n.checked_mul(d)),
        _ => None,
    };
    Ok(grid(&counts)?
        .into_iter()
        .map(|coord| Chunk {
            name: if coord.is_empty() {
                "0".into()
            } else {
                join(&coord, separator)
            },
            len,
            zero_fill: false,
        })
        .collect())
}

fn join(coord: &[u64], separator: &str) -> String {
    coord
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(separator)
}

/// Bytes per item of a Zarr v3 `data_type` of fixed size.
fn v3_item_size(data_type: &str) -> Option<u64> {
    Some(match data_type {
        "bool" | "int8" | "uint8" => 1,
        "int16" | "uint16" | "float16" => 2,
        "int32" | "uint32" | "float32" => 4,
        "int64" | "uint64" | "float64" | "complex64" => 8,
        "complex128" => 16,
        _ => return None,
    })
}

fn chunks_v3(body: &[u8]) -> Result<Vec<Chunk>, String> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if doc.get("node_type").and_then(Value::as_str) != Some("array") {
        return Ok(Vec::new());
    }
    let shape = dims(doc.get("shape")).ok_or("no shape")?;
    let chunk_shape = dims(doc.pointer("/chunk_grid/configuration/chunk_shape"))
        .ok_or("no regular chunk_grid")?;
    let counts = counts(&shape, &chunk_shape).ok_or("chunks do not fit the shape")?;
    let encoding = doc
        .pointer("/chunk_key_encoding/name")
        .and_then(Value::as_str);
    let default_sep = if encoding == Some("v2") { "." } else { "/" };
    let separator = doc
        .pointer("/chunk_key_encoding/configuration/separator")
        .and_then(Value::as_str)
        .unwrap_or(default_sep);
    let codecs = doc.get("codecs").and_then(Value::as_array);
    let plain = chunk_shape == shape
        && codecs.is_some_and(|c| {
            c.len() == 1
                && c[0].get("name").and_then(Value::as_str) == Some("bytes")
                && c[0]
                    .pointer("/configuration/endian")
                    .and_then(Value::as_str)
                    .is_none_or(|e| e == "little")
        });
    let item = doc
        .get("data_type")
        .and_then(Value::as_str)
        .and_then(v3_item_size);
    let len = match (plain, item) {
        (true, Some(size)) => shape.iter().try_fold(size, |n, &d| n.checked_mul(d)),
        _ => None,
    };
    let zero_fill = len.is_some()
        && doc
            .get("fill_value")
            .is_some_and(|f| f.as_f64() == Some(0.0) || f.as_bool() == Some(false));
    Ok(grid(&counts)?
        .into_iter()
        .map(|coord| {
            let name = match (encoding, coord.is_empty()) {
                (Some("v2"), true) => "0".into(),
                (Some("v2"), false) => join(&coord, separator),
                (_, true) => "c".into(),
                (_, false) => format!("c{separator}{}", join(&coord, separator)),
            };
            Chunk {
                name,
                len,
                zero_fill,
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        assert!(is_url("https://h/x.daf.zarr"));
        assert!(is_url("HTTP://h/x"));
        assert!(!is_url("/data/http://x"));
        assert!(!is_url("x.daf.zarr"));
    }

    #[test]
    fn v2_chunk_keys_and_sizes_come_from_the_metadata() {
        let plain =
            br#"{"shape":[3,2],"chunks":[3,2],"dtype":"<f8","compressor":null,"filters":null}"#;
        assert_eq!(
            chunks_v2(plain).unwrap(),
            [Chunk {
                name: "0.0".into(),
                len: Some(48),
                zero_fill: false
            }]
        );
        let grid = br#"{"shape":[5],"chunks":[2],"dtype":"<i4","compressor":{"id":"zlib"},"dimension_separator":"/"}"#;
        let names: Vec<_> = chunks_v2(grid)
            .unwrap()
            .into_iter()
            .map(|c| (c.name, c.len))
            .collect();
        assert_eq!(
            names,
            [("0".into(), None), ("1".into(), None), ("2".into(), None)]
        );
        let huge = br#"{"shape":[1000000000],"chunks":[1],"dtype":"<i4"}"#;
        assert!(chunks_v2(huge).is_err());
    }

    #[test]
    fn v3_chunk_keys_follow_the_key_encoding() {
        let plain = br#"{"node_type":"array","shape":[4],"data_type":"uint16","fill_value":0,
            "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[4]}},
            "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
            "codecs":[{"name":"bytes","configuration":{"endian":"little"}}]}"#;
        assert_eq!(
            chunks_v3(plain).unwrap(),
            [Chunk {
                name: "c/0".into(),
                len: Some(8),
                zero_fill: true
            }]
        );
        let strings = br#"{"node_type":"array","shape":[2,2],"data_type":"string","fill_value":"",
            "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[1,2]}},
            "chunk_key_encoding":{"name":"v2","configuration":{"separator":"."}},
            "codecs":[{"name":"vlen-utf8"}]}"#;
        let names: Vec<_> = chunks_v3(strings)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["0.0", "1.0"]);
        assert!(chunks_v3(br#"{"node_type":"group"}"#).unwrap().is_empty());
    }
}
