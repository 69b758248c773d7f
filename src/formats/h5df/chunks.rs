//! A chunked (packed) HDF5 dataset read by range: its flat content (little-endian, C order of
//! the HDF5 dataspace = Julia's column-major order) is a ranged blob whose reads decode only the
//! chunks they touch. The chunks' places in the file (address, stored size, filter mask) come from
//! libhdf5 at mount; their bytes come from the file's one read-only map, so a read never calls
//! libhdf5. Decoded chunks are kept in the mount-wide decode cache, as a foreign Zarr array's are
//! (`formats::zarr::chunks`). A chunk that does not decode fails the reads that touch it (one
//! log line naming the dataset and the chunk) and is not decoded again.

use std::collections::HashMap;
use std::sync::Arc;

use crate::formats::zarr::chunks::gather;
use crate::formats::zarr::decode::MAX_DECODED_BYTES;
use crate::stores::blob::RangeSource;
use crate::stores::decode_cache::{self, Decoded};
use crate::stores::{Blob, Bytes, StoreError};

use super::filters::{decode_chunk, Filter};

/// One stored chunk: where its bytes are in the file, and which filters it skipped.
#[derive(Clone, Debug)]
pub struct StoredChunk {
    /// Its bytes in the file's map.
    pub bytes: Bytes,
    /// HDF5's filter mask (bit `i`: filter `i` was not applied).
    pub mask: u32,
}

/// How a chunked dataset is laid out.
#[derive(Clone, Debug)]
pub struct ChunkedLayout {
    /// The dataspace (C order).
    pub shape: Vec<u64>,
    /// The chunk shape (C order).
    pub chunks: Vec<u64>,
    /// Bytes per element.
    pub elem_size: u64,
    /// The filter pipeline, in the order the writer applied it.
    pub pipeline: Vec<Filter>,
}

/// The ranged source of a chunked HDF5 dataset.
pub struct H5Chunks {
    what: String,
    layout: ChunkedLayout,
    grid: Vec<u64>,
    chunk_bytes: usize,
    stored: HashMap<u64, StoredChunk>,
    /// Its decoded chunks, in the decode cache.
    pieces: Decoded,
}

/// The flat content of a chunked dataset laid out as `layout`, whose stored chunks are `stored`
/// (their first element's coordinates and bytes), as a ranged blob; `what` names it in errors.
pub fn chunked_blob(
    layout: ChunkedLayout,
    stored: Vec<(Vec<u64>, StoredChunk)>,
    what: String,
) -> Result<Arc<Blob>, String> {
    let ndim = layout.shape.len();
    if layout.chunks.len() != ndim || layout.chunks.contains(&0) {
        return Err("the chunk shape does not fit the dataspace".into());
    }
    let chunk_bytes = layout
        .chunks
        .iter()
        .try_fold(layout.elem_size, |acc, &c| acc.checked_mul(c))
        .filter(|&n| n <= MAX_DECODED_BYTES)
        .ok_or_else(|| {
            format!(
                "one chunk would take more than the limit of {} MiB",
                MAX_DECODED_BYTES >> 20
            )
        })?;
    let len = layout
        .shape
        .iter()
        .try_fold(layout.elem_size, |acc, &c| acc.checked_mul(c))
        .ok_or("the dataset is too large")?;
    let grid: Vec<u64> = layout
        .shape
        .iter()
        .zip(&layout.chunks)
        .map(|(s, c)| s.div_ceil(*c))
        .collect();
    let mut by_position = HashMap::with_capacity(stored.len());
    for (offset, chunk) in stored {
        if offset.len() != ndim
            || offset
                .iter()
                .zip(&layout.chunks)
                .zip(&layout.shape)
                .any(|((o, c), s)| o % c != 0 || o >= s)
        {
            return Err(format!("a chunk at {offset:?} is outside the dataspace"));
        }
        let n = offset
            .iter()
            .zip(&layout.chunks)
            .zip(&grid)
            .fold(0, |acc, ((o, c), g)| acc * g + o / c);
        by_position.insert(n, chunk);
    }
    let source = Arc::new(H5Chunks {
        what,
        layout,
        grid,
        chunk_bytes: chunk_bytes as usize,
        stored: by_position,
        pieces: Decoded::new(decode_cache::cache()),
    });
    Ok(Blob::ranged(len, source))
}

impl H5Chunks {
    /// Chunk `n` (C order on the grid), decoded; `None` when it is not stored (fill: zeros).
    fn chunk(&self, n: u64) -> Result<Option<Arc<Vec<u8>>>, StoreError> {
        let Some(stored) = self.stored.get(&n) else {
            return Ok(None);
        };
        let decode = || {
            let decoded = decode_chunk(
                &self.layout.pipeline,
                stored.mask,
                stored.bytes.as_slice(),
                self.layout.elem_size as usize,
                self.chunk_bytes,
            );
            Ok(decoded.map_err(|e| format!("decoding {}: chunk {n}: {e}", self.what)))
        };
        self.pieces.piece(n, decode).map(Some)
    }
}

impl RangeSource for H5Chunks {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        if len > MAX_DECODED_BYTES {
            return Err(StoreError::Produce(format!(
                "decoding {}: {len} bytes are more than the limit of {} MiB a chunked dataset \
                 may decode at once",
                self.what,
                MAX_DECODED_BYTES >> 20
            )));
        }
        let fill = vec![0u8; self.layout.elem_size as usize];
        gather(
            &self.layout.shape,
            &self.layout.chunks,
            &self.grid,
            &fill,
            offset,
            len,
            |n| self.chunk(n),
        )
    }
}
