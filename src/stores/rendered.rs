//! A synthesised document too large to keep for the mount's life (the `.zmetadata` or the
//! consolidated root `zarr.json` of a large data set: hundreds of bytes per array): rendered when
//! read, its bytes kept in the mount-wide decode cache (bounded, [`super::decode_cache`]) and
//! rendered again once evicted; only its length is kept, counted without rendering it (a `stat`
//! renders nothing).

use std::sync::{Arc, OnceLock};

use super::blob::{Blob, RangeSource};
use super::decode_cache::cache;
use super::{Bytes, StoreError};

type Render = Box<dyn Fn() -> Result<Vec<u8>, StoreError> + Send + Sync>;
type Count = Box<dyn Fn() -> Result<u64, StoreError> + Send + Sync>;

/// A document `render` makes (it must make the same bytes every time), of the length `count`
/// says (asked once).
pub fn rendered(
    count: impl Fn() -> Result<u64, StoreError> + Send + Sync + 'static,
    render: impl Fn() -> Result<Vec<u8>, StoreError> + Send + Sync + 'static,
) -> Arc<Blob> {
    let document = Arc::new(Rendered {
        owner: cache().owner(),
        len: OnceLock::new(),
        count: Box::new(count),
        render: Box::new(render),
    });
    let sized = document.clone();
    Blob::ranged_sized(move || sized.len(), document)
}

struct Rendered {
    /// Its key in the decode cache.
    owner: u64,
    len: OnceLock<u64>,
    /// How its length is counted without rendering it.
    count: Count,
    render: Render,
}

impl Rendered {
    /// The whole document: the cached piece, or rendered again (and cached).
    fn whole(&self) -> Result<Arc<Vec<u8>>, StoreError> {
        if let Some(bytes) = cache().get(self.owner, 0) {
            return Ok(bytes);
        }
        let mut bytes = (self.render)()?;
        // The cache keeps what the rendering's growth left over otherwise (up to as much again).
        bytes.shrink_to_fit();
        let bytes = Arc::new(bytes);
        cache().insert(self.owner, 0, bytes.clone());
        Ok(bytes)
    }

    fn len(&self) -> Result<u64, StoreError> {
        if let Some(len) = self.len.get() {
            return Ok(*len);
        }
        let len = (self.count)()?;
        Ok(*self.len.get_or_init(|| len))
    }
}

impl RangeSource for Rendered {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        Bytes::from_shared(self.whole()?)
            .slice(offset, len)
            .ok_or_else(|| {
                StoreError::Produce(format!("range {offset}+{len} is outside its document"))
            })
    }
}

impl Drop for Rendered {
    fn drop(&mut self) {
        cache().forget(self.owner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_rendered_document_keeps_only_its_length() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let blob = rendered(
            || Ok(15),
            move || {
                counted.fetch_add(1, Ordering::Relaxed);
                Ok(b"{\"metadata\":{}}".to_vec())
            },
        );
        assert_eq!(blob.len().unwrap(), 15);
        assert_eq!(runs.load(Ordering::Relaxed), 0, "its length rendered it");
        assert_eq!(blob.read_range(1, 10).unwrap().as_slice(), b"\"metadata\"");
        assert_eq!(blob.read_range(10, 100).unwrap().as_slice(), b"\":{}}");
        // Rendered at the first need, then read from the cache (other tests may shrink the
        // process-wide cache: then it is rendered again, never kept by the blob itself).
        assert!(runs.load(Ordering::Relaxed) >= 1);
        assert!(blob.is_ranged());
    }
}
