//! A synthesised document too large to keep for the mount's life (the `.zmetadata` or the
//! consolidated root `zarr.json` of a large data set: hundreds of bytes per array): rendered when
//! read, its bytes kept in the mount-wide decode cache (bounded, [`super::decode_cache`]) and
//! rendered again once evicted; only its length is kept, counted without rendering it (a `stat`
//! renders nothing).

use std::sync::{Arc, OnceLock};

use super::blob::{Blob, RangeSource};
use super::decode_cache::cache;
use super::{Bytes, StoreError};

/// A document made when read: it must make the same bytes every time.
pub trait Document: std::any::Any + Send + Sync {
    /// Its length, counted without making it (asked once).
    fn count(&self) -> Result<u64, StoreError>;

    /// Its bytes.
    fn render(&self) -> Result<Vec<u8>, StoreError>;
}

/// The blob of `document` ([`Blob::made_of`] gives `document` back).
pub fn rendered(document: Arc<dyn Document>) -> Arc<Blob> {
    let rendered = Arc::new(Rendered {
        owner: cache().owner(),
        len: OnceLock::new(),
        document,
    });
    let sized = rendered.clone();
    Blob::ranged_sized(move || sized.len(), rendered)
}

struct Rendered {
    /// Its key in the decode cache.
    owner: u64,
    len: OnceLock<u64>,
    document: Arc<dyn Document>,
}

impl Rendered {
    /// The whole document: the cached piece, or rendered again (and cached).
    fn whole(&self) -> Result<Arc<Vec<u8>>, StoreError> {
        if let Some(bytes) = cache().get(self.owner, 0) {
            return Ok(bytes);
        }
        let mut bytes = self.document.render()?;
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
        let len = self.document.count()?;
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

    fn made_of(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        Some(self.document.clone())
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

    /// Counts its renderings.
    struct Counted(AtomicUsize);

    impl Document for Counted {
        fn count(&self) -> Result<u64, StoreError> {
            Ok(15)
        }

        fn render(&self) -> Result<Vec<u8>, StoreError> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Ok(b"{\"metadata\":{}}".to_vec())
        }
    }

    #[test]
    fn a_rendered_document_keeps_only_its_length() {
        let document = Arc::new(Counted(AtomicUsize::new(0)));
        let blob = rendered(document.clone());
        let runs = || document.0.load(Ordering::Relaxed);
        assert_eq!(blob.len().unwrap(), 15);
        assert_eq!(runs(), 0, "its length rendered it");
        assert_eq!(blob.read_range(1, 10).unwrap().as_slice(), b"\"metadata\"");
        assert_eq!(blob.read_range(10, 100).unwrap().as_slice(), b"\":{}}");
        // Rendered at the first need, then read from the cache (other tests may shrink the
        // process-wide cache: then it is rendered again, never kept by the blob itself).
        assert!(runs() >= 1);
        assert!(blob.is_ranged());
        // What it is made of is given back.
        let made_of = blob.made_of().unwrap().downcast::<Counted>().unwrap();
        assert!(Arc::ptr_eq(&made_of, &document));
        assert!(Blob::ready(Bytes::empty()).made_of().is_none());
    }
}
