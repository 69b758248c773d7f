//! Zarr v3 arrays and the ZarrDaf version marker of DataAxesFormats 0.3 (`daf-formats.md` §5):
//! parsing `zarr.json` documents, and opening an array from any store.
//!
//! An array stored the way DAF writes it (one chunk covering the shape, exactly a little-endian
//! `bytes` codec or `vlen-utf8`, chunk key `c/0`) is served from the chunk's own blob, as in v2;
//! an array none of whose chunks is stored (DAF elides an all-fill chunk) is its fill value
//! ([`crate::stores::Blob::fill`]); a single-shard `sharding_indexed` array is a packed array
//! (`shard`), decoded lazily; any other (several chunks, `transpose`, big-endian `bytes`,
//! `zstd`/`gzip`/`blosc`/`crc32c`) is decoded once on first access by `decode`. The walk of
//! the ZarrDaf tree is `formats::zarr`'s, shared with v2.
//!
//! `zarr.json` documents are untrusted: the same bounds as v2 `.zarray`s (at most 32
//! dimensions, element counts and byte sizes within a `u64`), and the chunk grid is never
//! enumerated. Node discovery walks the stored `zarr.json` keys, never the root's consolidated
//! metadata (which may be stale).

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::stores::{Bytes, StoreIndex};

use crate::formats::packed::{flat_blob, Packing};
use crate::formats::types::{ElementType, Endian, NumType};
use crate::formats::zarr::decode::{check_grid, ArrayKind, ChunkLayout, Compressor};
use crate::formats::zarr::meta::{v3_node, MetaCache, V3Node};
use crate::formats::zarr::v2::{open_chunked, parse_fill, stored_chunks, ZarrArray};
use crate::formats::FormatError;

/// The metadata document of every Zarr v3 node.
pub const ZARR_JSON: &str = "zarr.json";

/// The key of the `zarr.json` of node `key` (`""`: the root).
fn meta_key(key: &str) -> String {
    if key.is_empty() {
        ZARR_JSON.to_string()
    } else {
        [key, "/", ZARR_JSON].concat()
    }
}

/// The bytes of the `zarr.json` of node `key`, and its mtime (its blob is not kept: a document
/// is parsed once).
fn meta_bytes(index: &StoreIndex, key: &str) -> Result<(Bytes, SystemTime), FormatError> {
    let name = meta_key(key);
    let entry = index
        .get_once(&name)
        .ok_or_else(|| FormatError::MissingFile(name.clone()))?;
    Ok((entry.blob.bytes()?, entry.mtime))
}

/// `zarr.json` of node `key` as a JSON value.
fn parse_meta(key: &str, bytes: &Bytes) -> Result<Value, FormatError> {
    serde_json::from_slice(bytes.as_slice())
        .map_err(|e| FormatError::bad(format!("{}: invalid JSON: {e}", meta_key(key))))
}

/// The parsed `zarr.json` of node `key`.
fn read_meta(index: &StoreIndex, key: &str) -> Result<Value, FormatError> {
    parse_meta(key, &meta_bytes(index, key)?.0)
}

/// Whether node `key` is a group (its `zarr.json` says so).
pub fn is_group(index: &StoreIndex, key: &str) -> bool {
    let Ok((bytes, _)) = meta_bytes(index, key) else {
        return false;
    };
    match v3_node(bytes.as_slice()) {
        Some(node) => matches!(node, V3Node::Group),
        None => parse_meta(key, &bytes).is_ok_and(|meta| is_group_meta(&meta)),
    }
}

fn is_group_meta(meta: &Value) -> bool {
    meta.get("node_type").and_then(Value::as_str) == Some("group")
        && meta.get("zarr_format").and_then(Value::as_u64) == Some(3)
}

/// The array under `key`, its `zarr.json` read through `cache`; `None` when `key` is a group or
/// has no `zarr.json` (one search of the index and one parse of the document; an unreadable one
/// is an array's error, as in [`open_array`]).
pub(crate) fn open_node_through(
    index: &StoreIndex,
    key: &str,
    cache: &mut MetaCache,
) -> Result<Option<ZarrArray>, FormatError> {
    let Some(entry) = index.get_once(&meta_key(key)) else {
        return Ok(None);
    };
    let bytes = entry.blob.bytes()?;
    let mtime = entry.mtime;
    match cache.v3_node(bytes.as_slice()) {
        Some(V3Node::Group) => Ok(None),
        Some(V3Node::Array(v3)) => open_layout(index, key, v3, None, mtime).map(Some),
        None => {
            let meta = parse_meta(key, &bytes)?;
            if is_group_meta(&meta) {
                return Ok(None);
            }
            open_parsed(index, key, &meta, mtime).map(Some)
        }
    }
}

/// Whether node `key` is the root of a ZarrDaf on Zarr v3: a group with `attributes.daf`.
/// (The version inside is checked by [`check_marker`].)
pub fn is_daf_root(index: &StoreIndex, key: &str) -> bool {
    read_meta(index, key).is_ok_and(|meta| {
        meta.get("node_type").and_then(Value::as_str) == Some("group")
            && meta.pointer("/attributes/daf").is_some()
    })
}

/// Checks the root group's version marker: `attributes.daf` = `[1, m]` with `m <= 0`
/// (`daf-formats.md` §5.1). Every refusal is one line naming the root's `zarr.json`.
pub fn check_marker(index: &StoreIndex, path: &Path) -> Result<(), FormatError> {
    let file = path.join(ZARR_JSON);
    let not_daf = |why: String| FormatError::NotDaf {
        path: file.clone(),
        why,
    };
    let meta = read_meta(index, "").map_err(|e| not_daf(format!("unreadable root: {e}")))?;
    match meta.get("zarr_format").and_then(Value::as_u64) {
        Some(3) => {}
        other => {
            return Err(FormatError::Version {
                format: "Zarr",
                version: other.map_or_else(|| "?".into(), |v| v.to_string()),
                supported: "2 and 3",
                path: file,
            })
        }
    }
    if meta.get("node_type").and_then(Value::as_str) != Some("group") {
        return Err(not_daf("the root zarr.json is not a group".into()));
    }
    let Some(marker) = meta.pointer("/attributes/daf") else {
        return Err(not_daf("a Zarr v3 group without attributes.daf".into()));
    };
    let numbers = marker
        .as_array()
        .filter(|list| list.len() == 2)
        .and_then(|list| list.iter().map(Value::as_i64).collect::<Option<Vec<_>>>());
    let Some([major, minor]) = numbers.as_deref().map(|n| [n[0], n[1]]) else {
        return Err(not_daf(format!("malformed daf version marker {marker}")));
    };
    if major != 1 || minor > 0 {
        return Err(FormatError::Version {
            format: "ZarrDaf",
            version: format!("{major}.{minor}"),
            supported: "1.0",
            path: file,
        });
    }
    Ok(())
}

/// What a v3 array's `zarr.json` says: how to assemble it, where its chunks are, and whether
/// it is sharded.
#[derive(Clone, Debug)]
pub(in crate::formats) struct V3Layout {
    pub(in crate::formats) layout: ChunkLayout,
    /// What chunk names start with after the array's key: `c/` (`c.`) or `""` (v2 encoding).
    pub(in crate::formats) prefix: String,
    /// The array's codec is one `sharding_indexed`.
    pub(in crate::formats) sharded: bool,
}

/// The element kind of a v3 `data_type`.
pub(in crate::formats) fn data_kind(name: &str) -> Option<ArrayKind> {
    let t = match name {
        "string" => return Some(ArrayKind::Strings),
        "bool" => NumType::Bool,
        "int8" => NumType::Int8,
        "int16" => NumType::Int16,
        "int32" => NumType::Int32,
        "int64" => NumType::Int64,
        "uint8" => NumType::UInt8,
        "uint16" => NumType::UInt16,
        "uint32" => NumType::UInt32,
        "uint64" => NumType::UInt64,
        "float32" => NumType::Float32,
        "float64" => NumType::Float64,
        _ => return None,
    };
    Some(ArrayKind::Numeric(t, Endian::Little))
}

/// The fill value's bytes: v2's forms, plus the v3 hex form of a float's bits (`"0x7fc00000"`).
pub(in crate::formats) fn fill_bytes(fill: &Value, kind: ArrayKind) -> Result<Vec<u8>, String> {
    match (fill, kind) {
        (Value::String(s), ArrayKind::Strings) if s.is_empty() => Ok(Vec::new()),
        (_, ArrayKind::Strings) => Err(format!("unsupported string fill_value {fill}")),
        (Value::String(s), ArrayKind::Numeric(t @ (NumType::Float32 | NumType::Float64), _))
            if s.starts_with("0x") =>
        {
            let bits = u64::from_str_radix(&s[2..], 16)
                .ok()
                .filter(|_| s.len() as u64 == 2 + 2 * t.size())
                .ok_or_else(|| format!("bad hex fill_value \"{s}\""))?;
            Ok(bits.to_le_bytes()[..t.size() as usize].to_vec())
        }
        _ => parse_fill(fill, kind),
    }
}

/// The dimensions under `pointer`: a list of non-negative integers.
fn dims(meta: &Value, pointer: &str) -> Result<Vec<u64>, String> {
    meta.pointer(pointer)
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
        .ok_or_else(|| format!("bad \"{}\"", pointer.trim_start_matches('/')))
}

/// The codec name and configuration of one entry of a codec list.
fn codec(entry: &Value) -> Result<(&str, &Value), String> {
    let name = entry
        .get("name")
        .and_then(Value::as_str)
        .ok_or("codec without a name")?;
    Ok((name, entry.get("configuration").unwrap_or(&Value::Null)))
}

/// Parses an array's `zarr.json` (refusing, with the codec's name, what cannot be read).
pub(in crate::formats) fn parse_array(meta: &Value) -> Result<V3Layout, String> {
    if meta.get("zarr_format").and_then(Value::as_u64) != Some(3)
        || meta.get("node_type").and_then(Value::as_str) != Some("array")
    {
        return Err("not a Zarr v3 array".into());
    }
    let shape = dims(meta, "/shape")?;
    if shape.is_empty() {
        return Err("0-dimensional arrays are not supported".into());
    }
    if meta.pointer("/chunk_grid/name").and_then(Value::as_str) != Some("regular") {
        return Err("chunk grid is not \"regular\"".into());
    }
    let chunks = dims(meta, "/chunk_grid/configuration/chunk_shape")?;
    check_grid(&shape, &chunks)?;
    if meta
        .get("storage_transformers")
        .and_then(Value::as_array)
        .is_some_and(|list| !list.is_empty())
    {
        return Err("storage transformers are not supported".into());
    }
    let data_type = meta
        .get("data_type")
        .and_then(Value::as_str)
        .ok_or("data_type is not a simple type")?;
    let kind =
        data_kind(data_type).ok_or_else(|| format!("unsupported data_type \"{data_type}\""))?;
    let (encoding, separator) = match (
        meta.pointer("/chunk_key_encoding/name")
            .and_then(Value::as_str),
        meta.pointer("/chunk_key_encoding/configuration/separator")
            .and_then(Value::as_str),
    ) {
        (Some("default"), sep) => ("default", sep.unwrap_or("/")),
        (Some("v2"), sep) => ("v2", sep.unwrap_or(".")),
        _ => return Err("unsupported chunk_key_encoding".into()),
    };
    if separator != "/" && separator != "." {
        return Err(format!("unknown chunk key separator \"{separator}\""));
    }
    let prefix = if encoding == "default" {
        format!("c{separator}")
    } else {
        String::new()
    };
    let list = meta
        .get("codecs")
        .and_then(Value::as_array)
        .ok_or("bad \"codecs\"")?;
    let codecs = parse_codecs(list, kind, shape.len() as u64)?;
    let kind = codecs.kind;
    let fill = fill_bytes(meta.get("fill_value").unwrap_or(&Value::Null), kind)?;
    Ok(V3Layout {
        layout: ChunkLayout {
            shape,
            chunks,
            kind,
            codecs: codecs.compressors,
            fortran_order: codecs.fortran_order,
            fill,
            separator: separator.to_string(),
        },
        prefix,
        sharded: codecs.sharded,
    })
}

/// What a v3 codec list does, in `decode`'s terms.
struct Codecs {
    /// The element kind with the `bytes` codec's byte order.
    kind: ArrayKind,
    /// A `transpose` to the reversed order (an identity one changes nothing).
    fortran_order: bool,
    /// The bytes-to-bytes codecs, in encoding order.
    compressors: Vec<Compressor>,
    /// The list is one `sharding_indexed` codec.
    sharded: bool,
}

/// Parses a codec list: array-to-array (`transpose`), then one array-to-bytes (`bytes`,
/// `vlen-utf8`, `sharding_indexed`), then bytes-to-bytes (`zstd`, `gzip`, `blosc`, `crc32c`).
fn parse_codecs(list: &[Value], kind: ArrayKind, ndim: u64) -> Result<Codecs, String> {
    let mut out = Codecs {
        kind,
        fortran_order: false,
        compressors: Vec::new(),
        sharded: false,
    };
    let mut serialised = false;
    for entry in list {
        let (name, config) = codec(entry)?;
        let misplaced = || format!("codec \"{name}\" out of place");
        match name {
            "transpose" if serialised => return Err(misplaced()),
            "transpose" => {
                let order = dims(config, "/order")?;
                if order.iter().copied().eq((0..ndim).rev()) && ndim > 1 {
                    out.fortran_order = !out.fortran_order;
                } else if !order.iter().copied().eq(0..ndim) {
                    return Err(format!("unsupported transpose order {order:?}"));
                }
            }
            "bytes" | "vlen-utf8" | "sharding_indexed" if serialised => return Err(misplaced()),
            "bytes" => {
                let ArrayKind::Numeric(t, _) = kind else {
                    return Err("a string array with the bytes codec".into());
                };
                let endian = match config.get("endian").and_then(Value::as_str) {
                    Some("little") => Endian::Little,
                    Some("big") => Endian::Big,
                    None if t.size() == 1 => Endian::Little,
                    _ => return Err("bytes codec without a known endian".into()),
                };
                out.kind = ArrayKind::Numeric(t, endian);
                serialised = true;
            }
            "vlen-utf8" if kind == ArrayKind::Strings => serialised = true,
            "vlen-utf8" => return Err("a numeric array with the vlen-utf8 codec".into()),
            "sharding_indexed" => (out.sharded, serialised) = (true, true),
            "zstd" | "gzip" | "blosc" | "crc32c" if !serialised => return Err(misplaced()),
            "zstd" => out.compressors.push(Compressor::Zstd),
            "gzip" => out.compressors.push(Compressor::Gzip),
            "blosc" => out.compressors.push(Compressor::Blosc),
            "crc32c" => out.compressors.push(Compressor::Crc32c),
            other => return Err(format!("unsupported codec \"{other}\"")),
        }
    }
    if !serialised {
        return Err("no bytes, vlen-utf8 or sharding_indexed codec".into());
    }
    if out.sharded && list.len() != 1 {
        return Err("a sharding_indexed codec with other codecs around it".into());
    }
    Ok(out)
}

/// Parses the `zarr.json` of array `key` (errors name nothing: the caller adds the path).
fn array_layout(index: &StoreIndex, key: &str) -> Result<V3Layout, FormatError> {
    let (bytes, _) = meta_bytes(index, key)?;
    if let Some(V3Node::Array(v3)) = v3_node(bytes.as_slice()) {
        return Ok(v3);
    }
    parse_array(&parse_meta(key, &bytes)?).map_err(FormatError::Bad)
}

/// Opens the Zarr v3 array stored under `key` (`key/zarr.json` and its chunks).
pub fn open_array(index: &StoreIndex, key: &str) -> Result<ZarrArray, FormatError> {
    open_array_through(index, key, &mut MetaCache::none())
}

/// [`open_array`], its `zarr.json` read through `cache`.
pub(crate) fn open_array_through(
    index: &StoreIndex,
    key: &str,
    cache: &mut MetaCache,
) -> Result<ZarrArray, FormatError> {
    let (bytes, mtime) = meta_bytes(index, key)?;
    if let Some(V3Node::Array(v3)) = cache.v3_node(bytes.as_slice()) {
        return open_layout(index, key, v3, None, mtime);
    }
    open_parsed(index, key, &parse_meta(key, &bytes)?, mtime)
}

/// [`open_array`] of the array whose `zarr.json` was parsed as `meta` (modified at
/// `meta_mtime`).
fn open_parsed(
    index: &StoreIndex,
    key: &str,
    meta: &Value,
    meta_mtime: SystemTime,
) -> Result<ZarrArray, FormatError> {
    let v3 = parse_array(meta).map_err(FormatError::Bad)?;
    open_layout(index, key, v3, Some(meta), meta_mtime)
}

/// Opens array `key` of layout `v3`; `meta`, its document, is needed for a sharded one (its
/// packing reads it).
fn open_layout(
    index: &StoreIndex,
    key: &str,
    v3: V3Layout,
    meta: Option<&Value>,
    meta_mtime: SystemTime,
) -> Result<ZarrArray, FormatError> {
    if !v3.sharded {
        return open_chunked(index, key, v3.layout, meta_mtime, &v3.prefix);
    }
    let mtime = index.latest_mtime_under(key).unwrap_or(meta_mtime);
    let Some(meta) = meta else {
        return Err(FormatError::bad(
            "a sharded array read without its zarr.json",
        ));
    };
    let layout = v3.layout;
    // One shard covers the array (DAF's shard is the shape; a rounded-up shard is larger).
    if layout.grid_total() != Some(1) {
        return Err(FormatError::bad(
            "a sharded array of several shards (only single-shard arrays are read)",
        ));
    }
    let zeros = vec!["0"; layout.shape.len()].join(&layout.separator);
    let Some(shard) = index.get(&format!("{key}/{}{zeros}", v3.prefix)) else {
        // No shard stored: every element is the fill value.
        let unsharded = ChunkLayout {
            codecs: Vec::new(),
            ..layout
        };
        return open_chunked(index, key, unsharded, meta_mtime, &v3.prefix);
    };
    let eltype = match layout.kind {
        ArrayKind::Numeric(t, _) => ElementType::Num(t),
        ArrayKind::Strings => ElementType::String,
    };
    let packing = Packing::from_zarr_v3(meta, eltype, layout.shape.clone(), shard.blob.clone())?;
    let blob = flat_blob(&packing, key.to_string())?;
    Ok(ZarrArray {
        kind: layout.kind,
        shape: layout.shape,
        blob,
        mtime,
        packing: Some(Arc::new(packing)),
    })
}

/// Whether every chunk of the array under `key` (from its `zarr.json`) is stored. Counts the
/// stored chunks against the size of the grid; the grid itself is never enumerated.
pub fn all_chunks_stored(index: &StoreIndex, key: &str) -> Result<bool, FormatError> {
    let v3 = array_layout(index, key)?;
    let stored = stored_chunks(index, key, &v3.layout, &v3.prefix).len() as u64;
    Ok(v3.layout.grid_total() == Some(stored))
}

#[cfg(test)]
#[path = "v3_tests.rs"]
mod tests;
