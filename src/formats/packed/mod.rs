//! Packed arrays (`daf-formats.md` §8): one `sharding_indexed` shard holding compressed inner
//! chunks, as DataAxesFormats 0.3 writes them (FilesDaf `NAME.zip` / `NAME.COMP.zip` payloads,
//! ZarrDaf single-shard arrays) and as foreign Zarr v3 writers write them.
//!
//! A packed array keeps two faces: the shard bytes themselves (served zero-copy as the Zarr v3
//! view's chunk `c/0`), and a flat blob of the decoded elements (what the FilesDaf view and the
//! Zarr v2 view show), decoded lazily, chunk by chunk, on read (`decode`).
//!
//! Nothing here reads the shard: the constructors only parse metadata, so mounting costs no
//! shard I/O, and the flat blob's length is known from the shape. The shard index (and its
//! CRC-32C) is read at the first access of the content (`index`); the inner codecs are
//! `codecs`.

pub mod codecs;
pub mod decode;
pub mod index;

use std::sync::Arc;

use serde_json::{json, Value};

use crate::stores::Blob;

use super::types::ElementType;
use super::FormatError;
use crate::formats::packed::codecs::{default_fill, Pipeline};
use crate::formats::packed::decode::{numeric_blob, strings_blob};
use crate::formats::packed::index::IndexKind;
use crate::formats::zarr::decode::{checked_product, MAX_DIMENSIONS};

/// How one array of a property is packed: what the Zarr v3 view needs to show the shard as it is.
#[derive(Clone, Debug)]
pub struct Packing {
    /// The shard (the source's file or ZIP entry), shown as the Zarr v3 chunk `c/0` (`c/0/0`).
    pub shard: Arc<Blob>,
    /// Element type.
    pub eltype: ElementType,
    /// Array shape, C order (Zarr order: `[ncols, nrows]` for a matrix).
    pub shape: Vec<u64>,
    /// Inner chunk shape, C order.
    pub inner: Vec<u64>,
    /// The inner chunks' codecs, as a Zarr v3 codec list: for DataAxesFormats `bytes`/`vlen-utf8`
    /// then at most a compressor, e.g. `[{"name":"bytes","configuration":{"endian":"little"}},
    /// {"name":"zstd",…}]`; a foreign array's list as it is (`transpose` first, big-endian
    /// `bytes`, several of `zstd`/`gzip`/`blosc`/`crc32c` are read too).
    pub codecs: Value,
    /// Whether the shard index is at the start (DataAxesFormats) or at the end.
    pub index_at_start: bool,
    /// The shard's shape, C order: the source's shard shape rounded up to a multiple of `inner`
    /// (so at least `shape`). Its quotient by `inner` is the inner chunk grid the shard index
    /// covers; it is what a Zarr v3 view declares as the chunk grid's `chunk_shape` (Julia's
    /// own `zarr.json` declares `shape`, which `inner` need not divide).
    pub shard_shape: Vec<u64>,
    /// The Zarr v3 `fill_value` of absent inner chunks (DataAxesFormats: `0`, `0.0`, `false`,
    /// `""`).
    pub fill_value: Value,
    /// The Zarr v3 `index_codecs` of the shard index (`[bytes little, crc32c]` for
    /// DataAxesFormats); `Value::Null` when the shard has no Zarr index (a FilesDaf `"zipped"`
    /// shard, which a Zarr v3 view cannot show as it is).
    pub index_codecs: Value,
}

/// The flat content of a packed array: `product(shape) × size` bytes in C order (for strings:
/// the vlen-utf8 encoding of all elements), produced lazily. `what` names the array in errors
/// and in the log.
///
/// A numeric blob is ranged ([`Blob::read_range`] decodes only the inner chunks a read touches,
/// through a small cache shared by every reader of the blob); a string blob is decoded whole on
/// first access, within `zarr::decode::MAX_DECODED_BYTES`.
pub fn flat_blob(packing: &Packing, what: String) -> Result<Arc<Blob>, FormatError> {
    let pipeline = Pipeline::parse(&packing.codecs, packing.eltype, packing.inner.len())
        .map_err(|e| FormatError::bad(format!("{what}: {e}")))?;
    match packing.eltype {
        ElementType::String => strings_blob(packing, pipeline, what),
        ElementType::Num(_) => numeric_blob(packing, pipeline, what),
    }
}

fn bad(what: impl Into<String>) -> FormatError {
    FormatError::bad(what)
}

fn dims(value: Option<&Value>, what: &str) -> Result<Vec<u64>, FormatError> {
    value
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
        .ok_or_else(|| bad(format!("bad {what}")))
}

impl Packing {
    /// The packing of a Zarr v3 array whose codec list is one `sharding_indexed` codec and whose
    /// chunk grid is a single shard (`meta`: the array's `zarr.json`, parsed; `shard`: its only
    /// chunk). Refuses (naming nothing: the caller adds the path) unknown codecs.
    pub fn from_zarr_v3(
        meta: &Value,
        eltype: ElementType,
        shape: Vec<u64>,
        shard: Arc<Blob>,
    ) -> Result<Packing, FormatError> {
        let codecs = meta
            .get("codecs")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no codecs"))?;
        let sharding = match codecs.as_slice() {
            [one] if one.get("name").and_then(Value::as_str) == Some("sharding_indexed") => one,
            [one] => {
                let name = one.get("name").and_then(Value::as_str).unwrap_or("?");
                return Err(bad(format!("not a sharded array (codec \"{name}\")")));
            }
            _ => {
                return Err(bad(
                    "codec \"sharding_indexed\" must be the only codec of a packed array",
                ))
            }
        };
        let config = sharding
            .get("configuration")
            .ok_or_else(|| bad("sharding_indexed without a configuration"))?;
        let inner = dims(config.get("chunk_shape"), "sharding_indexed chunk_shape")?;
        let inner_codecs = config
            .get("codecs")
            .cloned()
            .ok_or_else(|| bad("sharding_indexed without codecs"))?;
        let index_codecs = config.get("index_codecs").cloned().unwrap_or_else(
            || json!([{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}]),
        );
        index_crc(&index_codecs)?;
        let index_at_start = match config.get("index_location").and_then(Value::as_str) {
            None | Some("end") => false,
            Some("start") => true,
            Some(other) => return Err(bad(format!("unknown index_location \"{other}\""))),
        };
        let grid_chunk = meta
            .get("chunk_grid")
            .filter(|g| g.get("name").and_then(Value::as_str) == Some("regular"))
            .and_then(|g| g.get("configuration"))
            .and_then(|c| c.get("chunk_shape"));
        let outer = dims(grid_chunk, "regular chunk_grid")?;
        if outer.len() != shape.len() || outer.iter().zip(&shape).any(|(c, s)| c < s) {
            return Err(bad(format!(
                "chunk grid {outer:?} is not a single shard of shape {shape:?}"
            )));
        }
        let fill_value = meta
            .get("fill_value")
            .cloned()
            .unwrap_or_else(|| default_fill(eltype));
        Packing::checked(Packing {
            shard,
            eltype,
            shape,
            inner,
            codecs: inner_codecs,
            index_at_start,
            shard_shape: outer,
            fill_value,
            index_codecs,
        })
    }

    /// The packing of a FilesDaf 1.1 packed payload (`NAME.zip`, `NAME.COMP.zip`): `descriptor`
    /// is the (component) descriptor object with `packed_format`, `chunk_shape` (Julia order),
    /// `compression`, `compression_level`, `index_location`; `shape` is in C order.
    pub fn from_files_descriptor(
        descriptor: &Value,
        eltype: ElementType,
        shape: Vec<u64>,
        shard: Arc<Blob>,
    ) -> Result<Packing, FormatError> {
        let zipped = match descriptor.get("packed_format").and_then(Value::as_str) {
            Some("indexed+zipped") => false,
            Some("zipped") => true,
            Some(other) => return Err(bad(format!("unsupported packed_format \"{other}\""))),
            None => return Err(bad("no packed_format")),
        };
        let mut inner = dims(descriptor.get("chunk_shape"), "chunk_shape")?;
        inner.reverse();
        let level = descriptor
            .get("compression_level")
            .and_then(Value::as_i64)
            .unwrap_or(5);
        let first = match eltype {
            ElementType::String => json!({"name":"vlen-utf8","configuration":{}}),
            ElementType::Num(_) => json!({"name":"bytes","configuration":{"endian":"little"}}),
        };
        let typesize = match eltype {
            ElementType::Num(t) => t.size(),
            ElementType::String => 1,
        };
        let compression = descriptor.get("compression").and_then(Value::as_str);
        let compressor = match compression {
            None | Some("none") => None,
            Some("zstd") => Some(json!({"name":"zstd","configuration":{"level":level}})),
            Some("gzip") => Some(json!({"name":"gzip","configuration":{"level":level}})),
            Some(blosc) if blosc.starts_with("blosc_") => {
                Some(blosc_codec(blosc, level, typesize)?)
            }
            Some(other) => return Err(bad(format!("unsupported compression \"{other}\""))),
        };
        let codecs = Value::Array(std::iter::once(first).chain(compressor).collect());
        let index_at_start = match descriptor.get("index_location").and_then(Value::as_str) {
            None | Some("start") => true,
            Some("end") => false,
            Some(other) => return Err(bad(format!("unknown index_location \"{other}\""))),
        };
        let index_codecs = if zipped {
            Value::Null
        } else {
            json!([{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}])
        };
        Packing::checked(Packing {
            shard,
            eltype,
            shard_shape: shape.clone(),
            shape,
            inner,
            codecs,
            index_at_start,
            fill_value: default_fill(eltype),
            index_codecs,
        })
    }

    /// Checks the shapes and the codecs, and rounds the shard shape up to whole inner chunks.
    fn checked(mut packing: Packing) -> Result<Packing, FormatError> {
        let ndim = packing.shape.len();
        if ndim == 0 || ndim > MAX_DIMENSIONS {
            return Err(bad(format!("packed array of {ndim} dimensions")));
        }
        if packing.inner.len() != ndim || packing.inner.contains(&0) {
            return Err(bad(format!(
                "inner chunk shape {:?} does not fit shape {:?}",
                packing.inner, packing.shape
            )));
        }
        packing.shard_shape = packing
            .shard_shape
            .iter()
            .zip(&packing.inner)
            .map(|(s, i)| s.div_ceil(*i).max(1) * i)
            .collect();
        let elements = [&packing.shape, &packing.shard_shape, &packing.inner]
            .iter()
            .all(|d| checked_product(d).and_then(|n| n.checked_mul(16)).is_some());
        if !elements {
            return Err(bad(format!(
                "shape {:?} has too many elements",
                packing.shape
            )));
        }
        Pipeline::parse(&packing.codecs, packing.eltype, ndim).map_err(bad)?;
        Ok(packing)
    }

    /// The inner chunk grid of the shard: chunks per dimension, C order.
    pub fn grid(&self) -> Vec<u64> {
        self.shard_shape
            .iter()
            .zip(&self.inner)
            .map(|(s, i)| s.div_ceil(*i))
            .collect()
    }

    /// Whether the shard has a Zarr shard index (so a Zarr v3 view can show it as it is).
    pub fn has_zarr_index(&self) -> bool {
        !self.index_codecs.is_null()
    }

    /// Where the chunks of the shard are found.
    pub(crate) fn index_kind(&self) -> Result<IndexKind, FormatError> {
        if !self.has_zarr_index() {
            return Ok(IndexKind::Zip);
        }
        Ok(IndexKind::Zarr {
            at_start: self.index_at_start,
            crc32c: index_crc(&self.index_codecs)?,
        })
    }
}

/// Whether index codecs `[bytes little]` or `[bytes little, crc32c]` end with a CRC-32C; any
/// other list is refused.
fn index_crc(codecs: &Value) -> Result<bool, FormatError> {
    let list = codecs
        .as_array()
        .ok_or_else(|| bad("index_codecs is not a list"))?;
    let name = |c: &Value| c.get("name").and_then(Value::as_str).map(str::to_string);
    let little = |c: &Value| {
        matches!(
            c.get("configuration")
                .and_then(|c| c.get("endian"))
                .and_then(Value::as_str),
            None | Some("little")
        )
    };
    match list.as_slice() {
        [b] if name(b).as_deref() == Some("bytes") && little(b) => Ok(false),
        [b, c]
            if name(b).as_deref() == Some("bytes")
                && little(b)
                && name(c).as_deref() == Some("crc32c") =>
        {
            Ok(true)
        }
        _ => {
            let names: Vec<String> = list.iter().filter_map(name).collect();
            Err(bad(format!("unsupported index_codecs {names:?}")))
        }
    }
}

/// The Zarr v3 `blosc` codec of a FilesDaf `blosc_<cname>[_<shuffle>]` compression, as
/// DataAxesFormats records it in the shard's `codec.json` (keys sorted).
fn blosc_codec(compression: &str, level: i64, typesize: u64) -> Result<Value, FormatError> {
    let mut parts = compression.trim_start_matches("blosc_").splitn(2, '_');
    let cname = parts.next().unwrap_or_default();
    let shuffle = parts.next().unwrap_or("noshuffle");
    let known_cname = matches!(cname, "lz4" | "lz4hc" | "blosclz" | "zstd" | "zlib");
    let known_shuffle = matches!(shuffle, "noshuffle" | "shuffle" | "bitshuffle");
    if !known_cname || !known_shuffle {
        return Err(bad(format!("unsupported compression \"{compression}\"")));
    }
    Ok(json!({"name":"blosc","configuration":{
        "blocksize":0,"clevel":level,"cname":cname,"shuffle":shuffle,"typesize":typesize}}))
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

#[cfg(test)]
#[path = "spec_tests.rs"]
mod spec_tests;
