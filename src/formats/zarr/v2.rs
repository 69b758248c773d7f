//! Zarr v2 arrays (`daf-formats.md` §4.3–4.5): opening one from any store, and the exact
//! metadata documents Julia writes.
//!
//! An array that is stored the way Daf writes it (one chunk covering the shape, no compressor, no
//! filters, C order, little-endian) is served from the chunk's own blob: the same mapped bytes.
//! An array none of whose chunks is stored is its fill value (`Blob::fill`). Any other array is
//! decoded once, on first access, into one contiguous chunk (`decode`). `open_chunked`, the
//! part after the metadata, serves Zarr v3 arrays too (`zarr_v3`).
//!
//! `.zarray` documents are untrusted: shapes and chunk shapes must be lists of at most 32
//! non-negative integers whose products (and byte sizes) fit a `u64`, and the chunk grid is never
//! enumerated: only the keys the store holds under the array are parsed as chunk coordinates.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::stores::{Blob, Bytes, StoreIndex};

use crate::formats::packed::Packing;
use crate::formats::scalar::Scalar;
use crate::formats::types::{Endian, NumType};
use crate::formats::zarr::chunks::foreign_decoder;
use crate::formats::zarr::decode::{
    assemble_strings, check_grid, checked_product, ArrayKind, ChunkLayout, Compressor, StoredChunks,
};
use crate::formats::zarr::meta::MetaCache;
use crate::formats::FormatError;

/// `.zgroup` of every group.
pub const ZGROUP: &str = "{\"zarr_format\":2}";
/// `.zattrs` of every node.
pub const ZATTRS: &str = "{}";

/// The `.zarray` Julia writes for a single-chunk array, in the seed's key order. A zero length
/// becomes chunk length 1, which every reader accepts (a zero chunk length is rejected).
pub fn zarray_json(dtype: &str, strings: bool, shape: &[u64]) -> String {
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let chunks: Vec<u64> = shape.iter().map(|&n| n.max(1)).collect();
    let filters = if strings {
        "[{\"id\":\"vlen-utf8\"}]"
    } else {
        "null"
    };
    format!(
        "{{\"dtype\":\"{dtype}\",\"filters\":{filters},\"shape\":[{}],\"order\":\"C\",\"zarr_format\":2,\"chunks\":[{}],\"fill_value\":null,\"compressor\":null}}",
        list(shape),
        list(&chunks)
    )
}

/// The chunk key of a single-chunk array of `ndim` dimensions (`0`, `0.0`).
pub fn single_chunk_key(ndim: usize) -> Cow<'static, str> {
    match ndim {
        0 | 1 => "0".into(),
        2 => "0.0".into(),
        _ => vec!["0"; ndim].join(".").into(),
    }
}

/// An opened array: what it holds, its shape, and its contiguous content.
#[derive(Debug)]
pub struct ZarrArray {
    /// Element kind.
    pub kind: ArrayKind,
    /// Zarr shape.
    pub shape: Vec<u64>,
    /// The content as Daf stores it (one C-order little-endian chunk, or one vlen-utf8 buffer).
    pub blob: Arc<Blob>,
    /// Latest modification time of its metadata and chunks.
    pub mtime: SystemTime,
    /// How the source packs it (a Zarr v3 single-shard `sharding_indexed` array); `blob` is
    /// then the decoded flat content.
    pub packing: Option<Arc<Packing>>,
}

impl ZarrArray {
    /// Number of elements.
    pub fn element_count(&self) -> u64 {
        checked_product(&self.shape).unwrap_or(u64::MAX)
    }
}

pub(in crate::formats) fn parse_fill(fill: &Value, kind: ArrayKind) -> Result<Vec<u8>, String> {
    let ArrayKind::Numeric(t, _) = kind else {
        return Ok(Vec::new());
    };
    let float = |f: f64| match t {
        NumType::Float32 => (f as f32).to_le_bytes().to_vec(),
        _ => f.to_le_bytes().to_vec(),
    };
    let bytes = match fill {
        Value::Null => vec![0; t.size() as usize],
        Value::Bool(b) => vec![u8::from(*b)],
        Value::String(s) => match s.as_str() {
            "NaN" => float(f64::NAN),
            "Infinity" => float(f64::INFINITY),
            "-Infinity" => float(f64::NEG_INFINITY),
            other => return Err(format!("unsupported fill_value \"{other}\"")),
        },
        Value::Number(n) => {
            let scalar = Scalar::from_value(
                crate::formats::types::ElementType::Num(t),
                &Value::Number(n.clone()),
            )
            .map_err(|e| e.to_string())?;
            scalar.zarr_chunk()
        }
        other => return Err(format!("unsupported fill_value {other}")),
    };
    Ok(bytes)
}

/// Parses `key/.zarray` into a chunk layout: the typed reading when the document fits it (from
/// `cache` when the same bytes were read before), else [`parse_zarray_value`] (which also says
/// what is wrong).
fn parse_zarray(bytes: &[u8], cache: &mut MetaCache) -> Result<ChunkLayout, String> {
    match cache.zarray_layout(bytes) {
        Some(layout) => Ok(layout),
        None => parse_zarray_value(bytes),
    }
}

/// Parses `key/.zarray` into a chunk layout through a JSON value.
pub(in crate::formats) fn parse_zarray_value(bytes: &[u8]) -> Result<ChunkLayout, String> {
    let meta: Value = serde_json::from_slice(bytes).map_err(|e| format!("invalid JSON: {e}"))?;
    if meta.get("zarr_format").and_then(Value::as_u64) != Some(2) {
        return Err("zarr_format is not 2".into());
    }
    let dims = |key: &str| -> Result<Vec<u64>, String> {
        meta.get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
            .ok_or_else(|| format!("bad \"{key}\""))
    };
    let shape = dims("shape")?;
    let chunks = dims("chunks")?;
    check_grid(&shape, &chunks)?;
    let dtype = meta
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or("dtype is not a simple type")?;
    let filters: Vec<String> = match meta.get("filters") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|f| {
                f.get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or("filter without an id".to_string())
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("bad \"filters\"".into()),
    };
    let kind = if dtype == "|O" {
        if filters != ["vlen-utf8"] {
            return Err(format!(
                "object dtype with filters {filters:?}; only vlen-utf8 strings are supported"
            ));
        }
        ArrayKind::Strings
    } else {
        if !filters.is_empty() {
            return Err(format!("unsupported filters {filters:?}"));
        }
        let (t, endian) = NumType::from_zarr_dtype(dtype)
            .ok_or_else(|| format!("unsupported dtype \"{dtype}\""))?;
        ArrayKind::Numeric(t, endian)
    };
    let codecs = Compressor::parse(meta.get("compressor").unwrap_or(&Value::Null))?
        .into_iter()
        .collect();
    let fortran_order = match meta.get("order").and_then(Value::as_str) {
        Some("C") | None => false,
        Some("F") => true,
        Some(other) => return Err(format!("unknown order \"{other}\"")),
    };
    let fill = parse_fill(meta.get("fill_value").unwrap_or(&Value::Null), kind)?;
    let separator = meta
        .get("dimension_separator")
        .and_then(Value::as_str)
        .unwrap_or(".");
    if separator != "." && separator != "/" {
        return Err(format!("unknown dimension_separator \"{separator}\""));
    }
    Ok(ChunkLayout {
        shape,
        chunks,
        kind,
        codecs,
        fortran_order,
        fill,
        separator: separator.to_string(),
    })
}

/// The key of the first chunk (coordinates all 0) of the `ndim`-dimensional array under `key`:
/// `key/{prefix}0`, `key/{prefix}0.0`… (`0` for a 0-d array), built in one string.
fn first_chunk_key(key: &str, prefix: &str, ndim: usize, separator: &str) -> String {
    let ndim = ndim.max(1);
    let mut out =
        String::with_capacity(key.len() + 1 + prefix.len() + ndim * (1 + separator.len()));
    out.push_str(key);
    out.push('/');
    out.push_str(prefix);
    out.push('0');
    for _ in 1..ndim {
        out.push_str(separator);
        out.push('0');
    }
    out
}

/// The chunks the store holds for the array under `key`: its keys that name a chunk of the grid
/// (each once; metadata and stray keys are ignored), after `prefix` (`""` for Zarr v2, `c/` for
/// the Zarr v3 default key encoding). Costs one step per stored key.
pub(in crate::formats) fn stored_chunks(
    index: &StoreIndex,
    key: &str,
    layout: &ChunkLayout,
    prefix: &str,
) -> StoredChunks {
    let below = index.subtree(key);
    below
        .keys()
        .filter_map(|name| {
            let coord = layout.parse_chunk_name(name.strip_prefix(prefix)?)?;
            Some((coord, below.get(name)?.blob.clone()))
        })
        .collect()
}

/// Whether every chunk of the array under `key` (from its `.zarray`) is stored. Counts the
/// stored chunks against the size of the grid; the grid itself is never enumerated.
pub fn all_chunks_stored(index: &StoreIndex, key: &str) -> Result<bool, FormatError> {
    let meta = index
        .get_once(&format!("{key}/.zarray"))
        .ok_or_else(|| FormatError::MissingFile(format!("{key}/.zarray")))?;
    let layout = parse_zarray(meta.blob.bytes()?.as_slice(), &mut MetaCache::none())
        .map_err(FormatError::Bad)?;
    let stored = stored_chunks(index, key, &layout, "").len() as u64;
    Ok(layout.grid_total() == Some(stored))
}

/// Checks, in O(1), that a vlen-utf8 chunk starts with a count of `len` items and has room for
/// their lengths (so sizes computed from it are sane); items are checked when converted. Read
/// only where that is free (a mapped file, bytes at hand), never by decompressing at mount.
fn vlen_header_fits(data: &[u8], len: u64) -> Result<(), String> {
    let header = data
        .get(..4)
        .ok_or("vlen-utf8 chunk shorter than its header")?;
    let count = u64::from(u32::from_le_bytes([
        header[0], header[1], header[2], header[3],
    ]));
    if count != len {
        return Err(format!(
            "vlen-utf8 chunk holds {count} items, {len} expected"
        ));
    }
    if (data.len() as u64 - 4) / 4 < count {
        return Err(format!(
            "vlen-utf8 chunk of {} bytes cannot hold {count} items",
            data.len()
        ));
    }
    Ok(())
}

/// Opens the array stored under `key` (`key/.zarray` and its chunks).
pub fn open_array(index: &StoreIndex, key: &str) -> Result<ZarrArray, FormatError> {
    open_array_through(index, key, &mut MetaCache::none())
}

/// [`open_array`], its `.zarray` read through `cache`.
pub(crate) fn open_array_through(
    index: &StoreIndex,
    key: &str,
    cache: &mut MetaCache,
) -> Result<ZarrArray, FormatError> {
    let meta_entry = index
        .get_once(&format!("{key}/.zarray"))
        .ok_or_else(|| FormatError::MissingFile(format!("{key}/.zarray")))?;
    open_array_cached(index, key, &meta_entry, cache)
}

/// [`open_array`] of the array whose `.zarray` entry was already looked up (one look-up of the
/// index fewer per property at mount).
pub fn open_array_with(
    index: &StoreIndex,
    key: &str,
    meta_entry: &crate::stores::Entry,
) -> Result<ZarrArray, FormatError> {
    open_array_cached(index, key, meta_entry, &mut MetaCache::none())
}

/// [`open_array_with`], its `.zarray` read through `cache`.
pub(crate) fn open_array_cached(
    index: &StoreIndex,
    key: &str,
    meta_entry: &crate::stores::Entry,
    cache: &mut MetaCache,
) -> Result<ZarrArray, FormatError> {
    let bytes = meta_entry.blob.bytes()?;
    let layout = parse_zarray(bytes.as_slice(), cache).map_err(FormatError::Bad)?;
    open_chunked(index, key, layout, meta_entry.mtime, "")
}

/// Opens an array of either Zarr version from its parsed layout: the single stored chunk of a
/// Daf-flat array is the array's blob (zero-copy); an array none of whose chunks is stored is
/// its fill value ([`Blob::fill`]); any other is decoded, lazily for numbers. `prefix` is what
/// chunk names start with (`c/` for the Zarr v3 default key encoding). Its mtime is the latest
/// of the keys under `key` (`meta_mtime`, its metadata's, when none), found with the first
/// chunk in one search.
pub(in crate::formats) fn open_chunked(
    index: &StoreIndex,
    key: &str,
    layout: ChunkLayout,
    meta_mtime: SystemTime,
    prefix: &str,
) -> Result<ZarrArray, FormatError> {
    let first = first_chunk_key(key, prefix, layout.shape.len(), &layout.separator);
    let (latest, first_chunk) = index.latest_mtime_and_entry(key, &first[key.len() + 1..]);
    let mtime = latest.unwrap_or(meta_mtime);
    let (kind, shape) = (layout.kind, layout.shape.clone());
    let len = layout.len();
    if len == 0 {
        let empty = match kind {
            ArrayKind::Strings => vec![0u8; 4],
            ArrayKind::Numeric(..) => Vec::new(),
        };
        return Ok(ZarrArray {
            kind,
            shape,
            blob: Blob::ready(Bytes::from_vec(empty)),
            mtime,
            packing: None,
        });
    }
    let single = layout.chunks == layout.shape && layout.codecs.is_empty();
    let plain_bytes = (!layout.fortran_order || layout.shape.len() <= 1)
        && matches!(
            kind,
            ArrayKind::Strings | ArrayKind::Numeric(_, Endian::Little)
        );
    if single && plain_bytes {
        if let Some(chunk) = first_chunk {
            let fits = match kind {
                ArrayKind::Numeric(t, _) => Some(chunk.blob.len()?) == len.checked_mul(t.size()),
                ArrayKind::Strings => {
                    // Room for the header and a length per item: known without reading.
                    let room = len.checked_mul(4).and_then(|n| n.checked_add(4));
                    let short = match (chunk.blob.known_len(), room) {
                        (_, None) => true,
                        (Some(n), Some(room)) => n < room,
                        (None, Some(_)) => false,
                    };
                    if short {
                        return Err(FormatError::bad(format!(
                            "vlen-utf8 chunk too short for {len} items"
                        )));
                    }
                    // The count itself, where reading it costs no decompression.
                    if chunk.blob.is_materialized() || chunk.blob.backing_file().is_some() {
                        vlen_header_fits(chunk.blob.bytes()?.as_slice(), len)
                            .map_err(FormatError::Bad)?;
                    }
                    true
                }
            };
            if fits {
                return Ok(ZarrArray {
                    kind,
                    shape,
                    blob: chunk.blob.clone(),
                    mtime,
                    packing: None,
                });
            }
            return Err(FormatError::bad(format!(
                "chunk has {} bytes, {len} elements expected",
                chunk.blob.len()?
            )));
        }
    }
    // Anything else is decoded from the chunks the store holds: numbers on demand, by range.
    let stored = stored_chunks(index, key, &layout, prefix);
    if stored.is_empty() {
        return Ok(ZarrArray {
            kind,
            shape,
            blob: fill_blob(&layout)?,
            mtime,
            packing: None,
        });
    }
    let what = key.to_string();
    let blob = match kind {
        // Decoded by range, chunk by chunk, through the mount-wide decode cache.
        ArrayKind::Numeric(..) => {
            foreign_decoder(layout, stored, what.clone())
                .map_err(|e| FormatError::bad(format!("decoding {what}: {e}")))?
                .0
        }
        // The length of decoded strings is only known once decoded, and every `stat` needs
        // it: decoded now, so an array that cannot be decoded is skipped, not an EIO on `ls`.
        ArrayKind::Strings => Blob::ready(
            assemble_strings(&layout, &stored)
                .map(Bytes::from_vec)
                .map_err(|e| FormatError::bad(format!("decoding {what}: {e}")))?,
        ),
    };
    Ok(ZarrArray {
        kind,
        shape,
        blob,
        mtime,
        packing: None,
    })
}

/// The content of an array none of whose chunks is stored: its fill value everywhere (for
/// strings, `""`: a vlen-utf8 count and a zero length per item).
fn fill_blob(layout: &ChunkLayout) -> Result<Arc<Blob>, FormatError> {
    let len = layout.len();
    let too_big = || FormatError::bad(format!("an array of {len} elements is too large"));
    Ok(match layout.kind {
        ArrayKind::Numeric(t, _) => {
            if layout.fill.len() as u64 != t.size() {
                return Err(FormatError::bad("fill value does not match the data type"));
            }
            Blob::fill(
                Vec::new(),
                len.checked_mul(t.size()).ok_or_else(too_big)?,
                layout.fill.clone(),
            )
        }
        ArrayKind::Strings => {
            let count = u32::try_from(len).map_err(|_| too_big())?;
            let bytes = len
                .checked_mul(4)
                .and_then(|n| n.checked_add(4))
                .ok_or_else(too_big)?;
            Blob::fill(count.to_le_bytes().to_vec(), bytes, vec![0; 4])
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zarray_text_matches_the_seed_bytes() {
        assert_eq!(
            zarray_json("<f8", false, &[2, 3]),
            r#"{"dtype":"<f8","filters":null,"shape":[2,3],"order":"C","zarr_format":2,"chunks":[2,3],"fill_value":null,"compressor":null}"#
        );
        assert_eq!(
            zarray_json("|O", true, &[3]),
            r#"{"dtype":"|O","filters":[{"id":"vlen-utf8"}],"shape":[3],"order":"C","zarr_format":2,"chunks":[3],"fill_value":null,"compressor":null}"#
        );
        assert!(zarray_json("<i8", false, &[0]).contains("\"chunks\":[1]"));
        assert_eq!(single_chunk_key(2), "0.0");
        assert_eq!(first_chunk_key("a/b", "", 0, "."), "a/b/0");
        assert_eq!(first_chunk_key("a/b", "", 1, "."), "a/b/0");
        assert_eq!(first_chunk_key("a", "", 3, "."), "a/0.0.0");
        assert_eq!(first_chunk_key("a", "c/", 2, "/"), "a/c/0/0");
    }
}
