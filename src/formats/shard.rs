//! Packed arrays (`daf-formats.md` §8): one `sharding_indexed` shard holding compressed inner
//! chunks, as DataAxesFormats 0.3 writes them (FilesDaf `NAME.zip` / `NAME.COMP.zip` payloads,
//! ZarrDaf single-shard arrays) and as foreign Zarr v3 writers write them.
//!
//! A packed array keeps two faces: the shard bytes themselves (served zero-copy as the Zarr v3
//! view's chunk `c/0`), and a flat blob of the decoded elements (what the FilesDaf view and the
//! Zarr v2 view show), decoded lazily, chunk by chunk, on read.

use std::sync::Arc;

use serde_json::Value;

use crate::stores::Blob;

use super::types::ElementType;
use super::FormatError;

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
    /// The inner chunks' codecs, as a Zarr v3 codec list (`bytes`/`vlen-utf8`, then at most a
    /// compressor), e.g. `[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd",…}]`.
    pub codecs: Value,
    /// Whether the shard index is at the start (DataAxesFormats) or at the end.
    pub index_at_start: bool,
    /// The shard index's codecs, as a Zarr v3 codec list: [`daf_index_codecs`] for what
    /// DataAxesFormats writes (and zarr-python's default); a foreign shard may have no `crc32c`.
    pub index_codecs: Value,
}

/// The index codecs DataAxesFormats (and zarr-python 3 by default) write:
/// `[{"configuration":{"endian":"little"},"name":"bytes"},{"name":"crc32c"}]`.
pub fn daf_index_codecs() -> Value {
    serde_json::json!([
        {"configuration": {"endian": "little"}, "name": "bytes"},
        {"name": "crc32c"}
    ])
}

/// The flat content of a packed array: `product(shape) × size` bytes in C order (for strings:
/// the vlen-utf8 encoding of all elements), produced lazily. `what` names the array in errors
/// and in the log.
pub fn flat_blob(packing: &Packing, what: String) -> Result<Arc<Blob>, FormatError> {
    let _ = (packing, what);
    Err(FormatError::bad("packed arrays are not decoded yet"))
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
        let _ = (meta, eltype, shape, shard);
        Err(FormatError::bad("packed arrays are not supported yet"))
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
        let _ = (descriptor, eltype, shape, shard);
        Err(FormatError::bad("packed arrays are not supported yet"))
    }
}
