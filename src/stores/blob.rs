//! `Blob`: the content of one file of the mounted tree, produced at most once.
//!
//! A blob is either ready (a range of a memory map, or bytes we already hold) or lazy: a producer
//! that maps a source file, slices another blob, synthesises metadata or text, or decodes a
//! foreign compressed array. Lazy blobs run their producer on first access and cache the result,
//! so every view that shows the same blob shares one copy (or one mapped range). A blob's length
//! may be known before it is produced (`st_size` without work); otherwise asking for the length
//! produces it.
//!
//! A *ranged* blob (a packed array, decoded chunk by chunk) serves [`Blob::read_range`] from its
//! [`RangeSource`] without ever producing the whole content; its length is always known. Asking
//! it for all of its bytes still works (the source decides how large a whole read may be) and
//! caches them like any lazy blob.
//!
//! A ready blob may carry an integrity [`Check`] (the CRC-32 of a stored ZIP member): its bytes
//! are still served straight from the map, and the check runs lazily (see [`Check`]); once it
//! fails, every later access of the blob, and of every slice of it, is an error. A small stored
//! member of a mapped archive (nearly every blob of a ZIP source) has a compact form instead
//! (`member.rs`): no value, producer or `Check` of its own, its bytes sliced from the map. The
//! general form is boxed, so such a blob and its `Arc` take 40 bytes (104 with it inline).
//!
//! A ranged blob may also be *possibly absent* ([`Blob::ranged_maybe_absent`]): its content is
//! defined either way (a remote object the server may answer 404 for reads as zeros), but whether
//! it exists is only known once its source was asked ([`Presence`]): a view may hide such a file
//! once it is known absent. Every other blob is present.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use super::bytes::Bytes;
pub use super::check::{Check, CheckState, Label};
pub use super::ranged::{read_pieces, Presence, RangeSource};
use super::StoreError;
use crate::stores::zip::member::StoredMember;

type Producer = Box<dyn Fn() -> Result<Bytes, StoreError> + Send + Sync>;
type Sizer = Arc<dyn Fn() -> Result<u64, StoreError> + Send + Sync>;

/// A window `[offset, …)` of a ranged blob: a slice that stays ranged.
struct Window {
    parent: Arc<Blob>,
    offset: u64,
}

impl RangeSource for Window {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        self.parent.read_range(self.offset + offset, len)
    }

    fn check_state(&self) -> Option<CheckState> {
        self.parent.check_state()
    }
}

/// Content that is shared by every file that shows it.
pub struct Blob(Repr);

/// The two forms of a blob.
enum Repr {
    /// A small stored member of a mapped archive (most blobs of a ZIP source), see `member.rs`.
    Member(StoredMember),
    /// Any other blob: boxed, so that a blob is no larger than a compact member (a 1M-entry
    /// archive's mount makes 333,333 to 500,000 compact members and about ten general blobs).
    General(Box<General>),
}

/// A blob in its general form: ready, lazy, ranged, a fill or a slice, with or without a check.
struct General {
    /// The length when known in advance, else [`UNKNOWN`].
    known_len: u64,
    /// The content once produced; or a failure of the producer that depends only on the
    /// source's bytes: kept and answered from then on (the producer is not run again).
    value: OnceLock<Result<Bytes, Box<str>>>,
    producer: Option<Producer>,
    producing: Mutex<()>,
    /// What few blobs have, kept apart so that the many (ZIP members, documents) stay small.
    rare: Option<Box<Rare>>,
}

/// `General::known_len` of a blob whose length is not known in advance.
const UNKNOWN: u64 = u64::MAX;

/// The parts of a [`Blob`] that only some blobs have.
#[derive(Default)]
struct Rare {
    /// The whole of this source file is the blob (the kernel can read it directly).
    backing: Option<std::path::PathBuf>,
    /// Where ranges of a ranged blob come from.
    ranged: Option<Arc<dyn RangeSource>>,
    /// Whether the content exists, for a blob that may be absent.
    presence: Option<Arc<dyn Presence>>,
    /// The length of a ranged blob whose length is computed on first need (it caches it).
    sizer: Option<Sizer>,
    /// The content is a constant fill (a Zarr array whose chunks are not stored), see
    /// [`Blob::fill`].
    fill: bool,
    /// The integrity check guarding this blob's bytes (its own, or its parent's for a slice):
    /// only large stored members have one of their own (small ones take the compact form).
    check: Option<Arc<Check>>,
}

/// The most bytes a fill blob with a non-zero pattern may build (a zero fill is a map of the
/// zero page, free at any size).
pub const MAX_FILL_BYTES: u64 = 128 << 20;

impl Blob {
    /// A blob whose bytes are already there.
    pub fn ready(bytes: Bytes) -> Arc<Blob> {
        Blob::holding(bytes, None)
    }

    fn holding(bytes: Bytes, check: Option<Arc<Check>>) -> Arc<Blob> {
        let value = OnceLock::new();
        let known_len = bytes.len();
        let _ = value.set(Ok(bytes));
        Blob::general_form(General {
            known_len,
            value,
            producer: None,
            producing: Mutex::new(()),
            rare: check.map(|check| {
                Box::new(Rare {
                    check: Some(check),
                    ..Rare::default()
                })
            }),
        })
    }

    /// A blob in its general form (boxed, see [`Repr::General`]).
    fn general_form(general: General) -> Arc<Blob> {
        Arc::new(Blob(Repr::General(Box::new(general))))
    }

    /// A small stored member of a mapped archive, in its compact form (see `member.rs`).
    pub(super) fn stored_member(member: StoredMember) -> Arc<Blob> {
        Arc::new(Blob(Repr::Member(member)))
    }

    /// A blob whose bytes are already there (a range of a map, served without copying) and
    /// whose CRC-32 must be `crc`; `what` names it in errors and in the log (archive and entry).
    /// The check runs lazily, on first access (see [`Check`]).
    pub fn checked(bytes: Bytes, crc: u32, what: String) -> Arc<Blob> {
        Blob::checked_as(bytes, crc, what.into())
    }

    /// [`Blob::checked`], named by a [`Label`] (a member of a mapped archive, named by where
    /// its name lies, without a copy of it).
    pub fn checked_as(bytes: Bytes, crc: u32, label: Label) -> Arc<Blob> {
        let check = Arc::new(Check::new(bytes.clone(), crc, label));
        Blob::holding(bytes, Some(check))
    }

    fn general(&self) -> Option<&General> {
        match &self.0 {
            Repr::General(general) => Some(general),
            Repr::Member(_) => None,
        }
    }

    fn rare(&self) -> Option<&Rare> {
        self.general()?.rare.as_deref()
    }

    fn check(&self) -> Option<&Arc<Check>> {
        self.rare()?.check.as_ref()
    }

    /// Where the integrity check of this blob stands (`None` when it has no check): its own, or
    /// its range source's.
    pub fn check_state(&self) -> Option<CheckState> {
        if let Repr::Member(member) = &self.0 {
            return Some(member.state());
        }
        match (self.check(), self.ranged_source()) {
            (Some(check), _) => Some(check.state()),
            (None, Some(source)) => source.check_state(),
            (None, None) => None,
        }
    }

    /// The CRC-32 the source recorded for exactly these bytes (a whole stored ZIP member), known
    /// without reading them (a slice of part of a member has none).
    pub fn recorded_crc(&self) -> Option<u32> {
        let general = match &self.0 {
            Repr::Member(member) => return member.crc(),
            Repr::General(general) => general,
        };
        let (crc, len) = self.check()?.expected();
        (general.known_len == len).then_some(crc)
    }

    /// Runs the integrity check to its end now, if the blob has one (waits for a background
    /// pass in progress); the result of [`Blob::bytes`] from then on.
    pub fn verify(&self) -> Result<(), StoreError> {
        match &self.0 {
            Repr::Member(member) => member.verify(),
            Repr::General(_) => self.check().map_or(Ok(()), |check| check.settle()),
        }
    }

    /// A blob made on first access by `producer`. When `len` is given, the producer must return
    /// exactly that many bytes (it is what `stat` reported).
    pub fn lazy(
        len: Option<u64>,
        producer: impl Fn() -> Result<Bytes, StoreError> + Send + Sync + 'static,
    ) -> Arc<Blob> {
        Blob::general_form(General::unproduced(len, producer))
    }

    /// A blob of `len` bytes served by ranges from `source` ([`Blob::read_range`] decodes only
    /// what a read touches); [`Blob::bytes`] reads the whole range `[0, len)` once and keeps it.
    pub fn ranged(len: u64, source: Arc<dyn RangeSource>) -> Arc<Blob> {
        Blob::general_form(General::ranged(len, source))
    }

    /// A ranged blob whose source may not exist ([`Presence`]): its reads are defined either
    /// way, and [`Blob::presence`] tells whether a view should show it.
    pub fn ranged_maybe_absent<S: RangeSource + Presence + 'static>(
        len: u64,
        source: Arc<S>,
    ) -> Arc<Blob> {
        let presence: Arc<dyn Presence> = source.clone();
        let mut blob = General::ranged(len, source);
        if let Some(rare) = &mut blob.rare {
            rare.presence = Some(presence);
        }
        Blob::general_form(blob)
    }

    /// Whether this blob may turn out absent (see [`Blob::ranged_maybe_absent`]).
    pub fn may_be_absent(&self) -> bool {
        self.rare().is_some_and(|r| r.presence.is_some())
    }

    /// Whether the content exists, when known without I/O (`Some(true)` for every blob that
    /// cannot be absent).
    pub fn presence(&self) -> Option<bool> {
        match self.rare().and_then(|r| r.presence.as_ref()) {
            Some(p) => p.known(),
            None => Some(true),
        }
    }

    /// Whether the content exists, asking its source once if needed (network I/O: never call
    /// this while holding a lock others wait for).
    pub fn resolve_presence(&self) -> Result<bool, StoreError> {
        match self.rare().and_then(|r| r.presence.as_ref()) {
            Some(p) => p.resolve(),
            None => Ok(true),
        }
    }

    /// A ranged blob whose length `size` computes on first need (`stat` or a read) instead of
    /// at construction; `size` is asked again at every use, so it should keep its answer.
    pub fn ranged_sized(
        size: impl Fn() -> Result<u64, StoreError> + Send + Sync + 'static,
        source: Arc<dyn RangeSource>,
    ) -> Arc<Blob> {
        let size: Sizer = Arc::new(size);
        let (whole, whole_size) = (source.clone(), size.clone());
        let producer = move || match whole_size()? {
            0 => Ok(Bytes::empty()),
            len => whole.read_range(0, len),
        };
        Blob::general_form(General {
            rare: Some(Box::new(Rare {
                ranged: Some(source),
                sizer: Some(size),
                ..Rare::default()
            })),
            ..General::unproduced(None, producer)
        })
    }

    /// A hint that a ranged blob not yet produced will be read soon ([`RangeSource::prefetch`]).
    pub fn prefetch(&self) {
        if let (Some(source), false) = (self.ranged_source(), self.is_materialized()) {
            source.prefetch();
        }
    }

    /// Whether reads of this blob are served by ranges (and its whole content was not produced).
    pub fn is_ranged(&self) -> bool {
        self.ranged_source().is_some() && !self.is_materialized()
    }

    /// Up to `len` bytes from `offset` (fewer at the end of the content, none past it): for a
    /// ranged blob only that range is made; any other blob is produced whole and sliced.
    pub fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        if let (Some(source), false) = (self.ranged_source(), self.is_materialized()) {
            let total = self.len()?;
            let start = offset.min(total);
            let len = len.min(total - start);
            if len == 0 {
                return Ok(Bytes::empty());
            }
            let bytes = source.read_range(start, len)?;
            if bytes.len() != len {
                return Err(StoreError::Produce(format!(
                    "a range read gave {} bytes where {len} were asked for",
                    bytes.len()
                )));
            }
            return Ok(bytes);
        }
        let bytes = self.bytes()?;
        let start = offset.min(bytes.len());
        let len = len.min(bytes.len() - start);
        bytes
            .slice(start, len)
            .ok_or_else(|| StoreError::Produce(format!("range {start}+{len} is outside its blob")))
    }

    /// A lazy blob that is the whole of file `path` (`len` bytes).
    pub fn whole_file(
        path: std::path::PathBuf,
        len: u64,
        producer: impl Fn() -> Result<Bytes, StoreError> + Send + Sync + 'static,
    ) -> Arc<Blob> {
        Blob::general_form(General {
            rare: Some(Box::new(Rare {
                backing: Some(path),
                ..Rare::default()
            })),
            ..General::unproduced(Some(len), producer)
        })
    }

    /// `head` then `pattern` repeated up to `len` bytes in all (the content of a Zarr array none
    /// of whose chunks is stored: its fill value; `head` is a vlen-utf8 count). Its length is
    /// known without producing it; an all-zero fill is a read-only map of the zero page (no
    /// memory, any size), any other is built on first read, at most [`MAX_FILL_BYTES`].
    pub fn fill(head: Vec<u8>, len: u64, pattern: Vec<u8>) -> Arc<Blob> {
        let producer = move || -> Result<Bytes, StoreError> {
            let body = len.saturating_sub(head.len() as u64);
            let zeros = head.iter().chain(&pattern).all(|&b| b == 0);
            if len == 0 {
                return Ok(Bytes::empty());
            }
            if zeros {
                let map = usize::try_from(len)
                    .map_err(|_| StoreError::Produce(format!("a fill of {len} bytes")))
                    .and_then(|n| {
                        crate::sys::map_zeros(n).map_err(|e| {
                            StoreError::Produce(format!("mapping a fill of {len} bytes: {e}"))
                        })
                    })?;
                return Ok(Bytes::from_map(Arc::new(map)));
            }
            if len > MAX_FILL_BYTES || pattern.is_empty() || body % pattern.len() as u64 != 0 {
                return Err(StoreError::Produce(format!(
                    "a fill of {len} bytes with a {}-byte pattern (at most {MAX_FILL_BYTES} bytes)",
                    pattern.len()
                )));
            }
            let mut out = head.clone();
            out.extend(pattern.repeat((body / pattern.len() as u64) as usize));
            Ok(Bytes::from_vec(out))
        };
        Blob::general_form(General {
            rare: Some(Box::new(Rare {
                fill: true,
                ..Rare::default()
            })),
            ..General::unproduced(Some(len), producer)
        })
    }

    /// Where ranges come from, for a ranged blob.
    fn ranged_source(&self) -> Option<&Arc<dyn RangeSource>> {
        self.rare()?.ranged.as_ref()
    }

    /// What the blob is made of, if it is a document made when read ([`super::rendered`]): a
    /// change of a few of its parts can then make the next one from it.
    pub fn made_of(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        self.ranged_source()?.made_of()
    }

    /// Whether the blob is a constant fill ([`Blob::fill`]): a view may show it as a missing
    /// chunk rather than as bytes.
    pub fn is_fill(&self) -> bool {
        self.rare().is_some_and(|r| r.fill)
    }

    /// The source file this blob is the whole of, if any.
    pub fn backing_file(&self) -> Option<&std::path::Path> {
        self.rare()?.backing.as_deref()
    }

    /// The exact byte range `[offset, offset+len)` of `parent`, without copying.
    pub fn slice(parent: &Arc<Blob>, offset: u64, len: u64) -> Arc<Blob> {
        if offset == 0 && parent.known_len() == Some(len) {
            return parent.clone();
        }
        if parent.ranged_source().is_some() {
            let window = Window {
                parent: parent.clone(),
                offset,
            };
            return Blob::ranged(len, Arc::new(window));
        }
        // A slice answers for its parent's check: once that fails, the slice fails too (a
        // compact member is checked before its first byte, so the slice's first production
        // already answers for it).
        let check = parent.check().cloned();
        let parent = parent.clone();
        let producer = move || {
            parent.bytes()?.slice(offset, len).ok_or_else(|| {
                StoreError::Produce(format!("range {offset}+{len} is outside its source"))
            })
        };
        Blob::general_form(General {
            rare: check.map(|check| {
                Box::new(Rare {
                    check: Some(check),
                    ..Rare::default()
                })
            }),
            ..General::unproduced(Some(len), producer)
        })
    }

    /// The length, producing the content if it is not known in advance.
    pub fn len(&self) -> Result<u64, StoreError> {
        if let Some(len) = self.known_len() {
            return Ok(len);
        }
        match self.rare().and_then(|r| r.sizer.as_ref()) {
            Some(size) => size(),
            None => Ok(self.bytes()?.len()),
        }
    }

    /// Whether the content is empty (producing it if its length is not known in advance).
    pub fn is_empty(&self) -> Result<bool, StoreError> {
        Ok(self.len()? == 0)
    }

    /// The length if it is known without producing anything.
    pub fn known_len(&self) -> Option<u64> {
        match &self.0 {
            Repr::Member(member) => Some(member.len()),
            Repr::General(g) if g.known_len != UNKNOWN => Some(g.known_len),
            Repr::General(g) => match g.value.get() {
                Some(Ok(bytes)) => Some(bytes.len()),
                _ => None,
            },
        }
    }

    /// The content, produced on first call and cached.
    pub fn bytes(&self) -> Result<Bytes, StoreError> {
        match &self.0 {
            Repr::Member(member) => member.bytes(),
            Repr::General(general) => general.bytes(),
        }
    }

    /// Whether the blob has the compact form of a small stored member.
    #[cfg(test)]
    pub(crate) fn is_compact_member(&self) -> bool {
        matches!(self.0, Repr::Member(_))
    }

    /// Whether the content has been produced (or was ready from the start).
    pub fn is_materialized(&self) -> bool {
        match &self.0 {
            Repr::Member(_) => true,
            Repr::General(g) => matches!(g.value.get(), Some(Ok(_))),
        }
    }
}

impl General {
    fn unproduced(
        len: Option<u64>,
        producer: impl Fn() -> Result<Bytes, StoreError> + Send + Sync + 'static,
    ) -> General {
        General {
            known_len: len.unwrap_or(UNKNOWN),
            value: OnceLock::new(),
            producer: Some(Box::new(producer)),
            producing: Mutex::new(()),
            rare: None,
        }
    }

    fn ranged(len: u64, source: Arc<dyn RangeSource>) -> General {
        let whole = source.clone();
        let producer = move || {
            if len == 0 {
                Ok(Bytes::empty())
            } else {
                whole.read_range(0, len)
            }
        };
        General {
            rare: Some(Box::new(Rare {
                ranged: Some(source),
                ..Rare::default()
            })),
            ..General::unproduced(Some(len), producer)
        }
    }

    fn cached(&self) -> Option<Result<Bytes, StoreError>> {
        self.value.get().map(|value| match value {
            Ok(bytes) => Ok(bytes.clone()),
            Err(what) => Err(StoreError::Produce(what.to_string())),
        })
    }

    fn bytes(&self) -> Result<Bytes, StoreError> {
        if let Some(check) = self.rare.as_ref().and_then(|r| r.check.as_ref()) {
            check.gate()?;
        }
        if let Some(cached) = self.cached() {
            return cached;
        }
        // One producer at a time per blob, so a costly decode is never done twice.
        let _guard = super::lock(&self.producing);
        if let Some(cached) = self.cached() {
            return cached;
        }
        match self.produce() {
            Ok(bytes) => {
                let _ = self.value.set(Ok(bytes.clone()));
                Ok(bytes)
            }
            Err(e) => {
                // An I/O error (mapping or reading a source file: EAGAIN, ENOMEM, a flaky disk)
                // may pass: the next access tries again. Anything else is in the bytes.
                if !matches!(e, StoreError::Io { .. }) {
                    let _ = self.value.set(Err(e.to_string().into()));
                }
                Err(e)
            }
        }
    }

    fn produce(&self) -> Result<Bytes, StoreError> {
        let producer = self
            .producer
            .as_ref()
            .ok_or_else(|| StoreError::Produce("blob has neither bytes nor producer".into()))?;
        let bytes = producer()?;
        match self.known_len {
            UNKNOWN => Ok(bytes),
            expected if bytes.len() != expected => Err(StoreError::Produce(format!(
                "produced {} bytes where {expected} were announced",
                bytes.len()
            ))),
            _ => Ok(bytes),
        }
    }
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blob")
            .field("known_len", &self.known_len())
            .field("materialized", &self.is_materialized())
            .finish()
    }
}

#[cfg(test)]
#[path = "blob_tests.rs"]
mod tests;
