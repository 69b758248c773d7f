//! The fast reading of Zarr metadata documents (`.zarray`, `zarr.json`): one typed parse into
//! borrowed fields, no `serde_json::Value` tree, for the documents a mount reads by the hundred
//! thousand.
//!
//! Each function here answers only for a document it understands whole and finds valid: a
//! document that does not fit the typed form (a field of an unexpected type, a duplicated key, an
//! escaped string, a sharded array) or that breaks a rule gives `None`, and the caller then reads
//! it the general way (`zarr_v2::parse_zarray`, `zarr_v3::parse_array`), which says what is
//! wrong. So errors always come from one place, and the fast path must only give the general
//! path's result for what it accepts (tests compare the two on the fixtures and on generated
//! documents).
//!
//! A [`MetaCache`] keeps the layouts of the last documents read, by their bytes: the arrays of a
//! Daf group mostly have byte-identical documents (same type and shape), so a mount parses each
//! distinct document once rather than once per array.

use std::collections::HashMap;

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::Value;

use crate::formats::types::{Endian, NumType};
use crate::formats::zarr::decode::{check_grid, ArrayKind, ChunkLayout, Compressor};
use crate::formats::zarr::v2::parse_fill;
use crate::formats::zarr::v3::{data_kind, fill_bytes, V3Layout};

/// Most distinct documents a [`MetaCache`] keeps (then it starts afresh), and the largest one it
/// keeps (a larger one is parsed every time).
const CACHED_DOCUMENTS: usize = 64;
const CACHED_BYTES: usize = 4096;

type ByBytes<T> = HashMap<Box<[u8]>, T, foldhash::fast::FixedState>;

/// The fast readings of the documents seen last, by their bytes (a reading is a pure function
/// of the bytes, so a cached one is the one a parse would give). [`MetaCache::none`] keeps
/// nothing (one array read alone).
#[derive(Default)]
pub(crate) struct MetaCache {
    keep: bool,
    zarrays: ByBytes<ChunkLayout>,
    nodes: ByBytes<V3Node>,
}

impl MetaCache {
    /// A cache for the arrays of one reader (one thread).
    pub(crate) fn new() -> MetaCache {
        MetaCache {
            keep: true,
            ..MetaCache::default()
        }
    }

    /// A cache that keeps nothing.
    pub(crate) fn none() -> MetaCache {
        MetaCache::default()
    }

    /// [`zarray_layout`], from the cache when these bytes were read before.
    pub(in crate::formats) fn zarray_layout(&mut self, bytes: &[u8]) -> Option<ChunkLayout> {
        cached(self.keep, &mut self.zarrays, bytes, zarray_layout)
    }

    /// [`v3_node`], from the cache when these bytes were read before.
    pub(in crate::formats) fn v3_node(&mut self, bytes: &[u8]) -> Option<V3Node> {
        cached(self.keep, &mut self.nodes, bytes, v3_node)
    }
}

fn cached<T: Clone>(
    keep: bool,
    map: &mut ByBytes<T>,
    bytes: &[u8],
    read: fn(&[u8]) -> Option<T>,
) -> Option<T> {
    if !keep || bytes.len() > CACHED_BYTES {
        return read(bytes);
    }
    if let Some(known) = map.get(bytes) {
        return Some(known.clone());
    }
    let value = read(bytes)?;
    if map.len() >= CACHED_DOCUMENTS {
        map.clear();
    }
    map.insert(bytes.into(), value.clone());
    Some(value)
}

/// A `.zarray`, the fields the reader looks at.
#[derive(Deserialize)]
struct Zarray<'a> {
    zarr_format: Option<u64>,
    shape: Option<Vec<u64>>,
    chunks: Option<Vec<u64>>,
    #[serde(borrow)]
    dtype: Option<&'a str>,
    #[serde(borrow)]
    filters: Option<Vec<Filter<'a>>>,
    compressor: Option<Value>,
    #[serde(borrow)]
    order: Option<&'a str>,
    fill_value: Option<Value>,
    #[serde(borrow)]
    dimension_separator: Option<&'a str>,
}

#[derive(Deserialize)]
struct Filter<'a> {
    #[serde(borrow)]
    id: &'a str,
}

/// The chunk layout of a valid `.zarray` (`None`: read it the general way).
pub(in crate::formats) fn zarray_layout(bytes: &[u8]) -> Option<ChunkLayout> {
    let doc: Zarray = serde_json::from_slice(bytes).ok()?;
    if doc.zarr_format != Some(2) {
        return None;
    }
    let (shape, chunks) = (doc.shape?, doc.chunks?);
    check_grid(&shape, &chunks).ok()?;
    let dtype = doc.dtype?;
    let filters = doc.filters.unwrap_or_default();
    let kind = if dtype == "|O" {
        if filters.len() != 1 || filters[0].id != "vlen-utf8" {
            return None;
        }
        ArrayKind::Strings
    } else {
        if !filters.is_empty() {
            return None;
        }
        let (t, endian) = NumType::from_zarr_dtype(dtype)?;
        ArrayKind::Numeric(t, endian)
    };
    let codecs = Compressor::parse(doc.compressor.as_ref().unwrap_or(&Value::Null)).ok()?;
    let fortran_order = match doc.order {
        Some("C") | None => false,
        Some("F") => true,
        Some(_) => return None,
    };
    let fill = parse_fill(doc.fill_value.as_ref().unwrap_or(&Value::Null), kind).ok()?;
    let separator = doc.dimension_separator.unwrap_or(".");
    if separator != "." && separator != "/" {
        return None;
    }
    Some(ChunkLayout {
        shape,
        chunks,
        kind,
        codecs: codecs.into_iter().collect(),
        fortran_order,
        fill,
        separator: separator.to_string(),
    })
}

/// A `zarr.json`, the fields the reader looks at (a group's `attributes` are skipped unread).
#[derive(Deserialize)]
struct Node<'a> {
    zarr_format: Option<u64>,
    #[serde(borrow)]
    node_type: Option<&'a str>,
    shape: Option<Vec<u64>>,
    #[serde(borrow)]
    chunk_grid: Option<Named<'a, GridConfig>>,
    storage_transformers: Option<Vec<IgnoredAny>>,
    #[serde(borrow)]
    data_type: Option<&'a str>,
    #[serde(borrow)]
    chunk_key_encoding: Option<Named<'a, KeyConfig<'a>>>,
    #[serde(borrow)]
    codecs: Option<Vec<Named<'a, CodecConfig<'a>>>>,
    fill_value: Option<Value>,
}

/// `{"name": …, "configuration": …}`.
#[derive(Deserialize)]
struct Named<'a, C> {
    #[serde(borrow)]
    name: Option<&'a str>,
    configuration: Option<C>,
}

#[derive(Deserialize)]
struct GridConfig {
    chunk_shape: Option<Vec<u64>>,
}

#[derive(Deserialize)]
struct KeyConfig<'a> {
    #[serde(borrow)]
    separator: Option<&'a str>,
}

/// What the codecs the fast path reads are configured with (others' fields are skipped).
#[derive(Deserialize)]
struct CodecConfig<'a> {
    #[serde(borrow)]
    endian: Option<&'a str>,
    order: Option<Vec<u64>>,
}

/// What a valid `zarr.json` is, as far as the ZarrDaf reader cares.
#[derive(Clone, Debug)]
pub(in crate::formats) enum V3Node {
    /// A Zarr v3 group.
    Group,
    /// An array that is not sharded, and its layout.
    Array(V3Layout),
}

/// The node a valid `zarr.json` describes (`None`: read it the general way; always so for a
/// sharded array, whose packing reads the whole document).
pub(in crate::formats) fn v3_node(bytes: &[u8]) -> Option<V3Node> {
    let doc: Node = serde_json::from_slice(bytes).ok()?;
    if doc.node_type == Some("group") && doc.zarr_format == Some(3) {
        return Some(V3Node::Group);
    }
    v3_layout(doc).map(V3Node::Array)
}

fn v3_layout(doc: Node) -> Option<V3Layout> {
    if doc.zarr_format != Some(3) || doc.node_type != Some("array") {
        return None;
    }
    let shape = doc.shape?;
    if shape.is_empty() {
        return None;
    }
    let grid = doc.chunk_grid?;
    if grid.name != Some("regular") {
        return None;
    }
    let chunks = grid.configuration?.chunk_shape?;
    check_grid(&shape, &chunks).ok()?;
    if doc
        .storage_transformers
        .is_some_and(|list| !list.is_empty())
    {
        return None;
    }
    let kind = data_kind(doc.data_type?)?;
    let encoding = doc.chunk_key_encoding?;
    let separator = encoding.configuration.and_then(|c| c.separator);
    let (prefix, separator) = match (encoding.name, separator) {
        (Some("default"), sep) => {
            let sep = sep.unwrap_or("/");
            (format!("c{sep}"), sep)
        }
        (Some("v2"), sep) => (String::new(), sep.unwrap_or(".")),
        _ => return None,
    };
    if separator != "/" && separator != "." {
        return None;
    }
    let (kind, fortran_order, compressors) = codecs(&doc.codecs?, kind, shape.len() as u64)?;
    let fill = fill_bytes(doc.fill_value.as_ref().unwrap_or(&Value::Null), kind).ok()?;
    Some(V3Layout {
        layout: ChunkLayout {
            shape,
            chunks,
            kind,
            codecs: compressors,
            fortran_order,
            fill,
            separator: separator.to_string(),
        },
        prefix,
        sharded: false,
    })
}

/// `zarr_v3::parse_codecs` for a list without `sharding_indexed`: the kind with its byte order,
/// whether the chunks are in Fortran order, the compressors.
fn codecs(
    list: &[Named<CodecConfig>],
    kind: ArrayKind,
    ndim: u64,
) -> Option<(ArrayKind, bool, Vec<Compressor>)> {
    let (mut kind_out, mut fortran, mut compressors) = (kind, false, Vec::new());
    let mut serialised = false;
    for codec in list {
        let config = codec.configuration.as_ref();
        match codec.name? {
            "transpose" if !serialised => {
                let order = config?.order.as_ref()?;
                if order.iter().copied().eq((0..ndim).rev()) && ndim > 1 {
                    fortran = !fortran;
                } else if !order.iter().copied().eq(0..ndim) {
                    return None;
                }
            }
            "bytes" if !serialised => {
                let ArrayKind::Numeric(t, _) = kind else {
                    return None;
                };
                let endian = match config.and_then(|c| c.endian) {
                    Some("little") => Endian::Little,
                    Some("big") => Endian::Big,
                    None if t.size() == 1 => Endian::Little,
                    _ => return None,
                };
                kind_out = ArrayKind::Numeric(t, endian);
                serialised = true;
            }
            "vlen-utf8" if !serialised && kind == ArrayKind::Strings => serialised = true,
            "zstd" if serialised => compressors.push(Compressor::Zstd),
            "gzip" if serialised => compressors.push(Compressor::Gzip),
            "blosc" if serialised => compressors.push(Compressor::Blosc),
            "crc32c" if serialised => compressors.push(Compressor::Crc32c),
            _ => return None,
        }
    }
    serialised.then_some((kind_out, fortran, compressors))
}

#[cfg(test)]
#[path = "meta_tests.rs"]
mod tests;
