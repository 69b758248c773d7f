//! Tests of `Blob`: lazy, ready, ranged, fill and sliced blobs.
use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

#[test]
fn lazy_blobs_are_produced_once() {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let blob = Blob::lazy(None, move || {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(Bytes::from_vec(b"abc".to_vec()))
    });
    assert!(!blob.is_materialized());
    assert_eq!(blob.len().unwrap(), 3);
    assert_eq!(blob.bytes().unwrap().as_slice(), b"abc");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

fn counted(runs: &Arc<AtomicUsize>, fail: fn() -> StoreError) -> Arc<Blob> {
    let runs = runs.clone();
    Blob::lazy(None, move || {
        runs.fetch_add(1, Ordering::Relaxed);
        Err(fail())
    })
}

#[test]
fn a_failed_decode_is_not_run_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let blob = counted(&runs, || StoreError::Produce("bad decode".into()));
    for _ in 0..3 {
        let e = blob.len().unwrap_err();
        assert!(e.to_string().contains("bad decode"), "{e}");
        assert!(blob.bytes().is_err());
    }
    assert_eq!(runs.load(Ordering::Relaxed), 1);
}

#[test]
fn an_io_error_is_tried_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let blob = counted(&runs, || {
        StoreError::io(
            std::path::PathBuf::from("x"),
            std::io::Error::from_raw_os_error(11),
        )
    });
    for _ in 0..3 {
        assert!(blob.bytes().is_err());
    }
    assert_eq!(runs.load(Ordering::Relaxed), 3);
}

#[test]
fn announced_length_is_enforced() {
    let blob = Blob::lazy(Some(2), || Ok(Bytes::from_vec(b"abc".to_vec())));
    assert_eq!(blob.len().unwrap(), 2);
    assert!(blob.bytes().is_err());
}

/// Byte `i` is `i % 251`; counts the bytes made.
struct Pattern(AtomicUsize);

impl RangeSource for Pattern {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        self.0.fetch_add(len as usize, Ordering::Relaxed);
        Ok(Bytes::from_vec(
            (offset..offset + len).map(|i| (i % 251) as u8).collect(),
        ))
    }
}

#[test]
fn ranged_blobs_and_their_slices_make_only_what_is_read() {
    let source = Arc::new(Pattern(AtomicUsize::new(0)));
    let blob = Blob::ranged(1 << 30, source.clone());
    assert_eq!(blob.known_len(), Some(1 << 30));
    let slice = Blob::slice(&blob, 1000, 5000);
    assert!(slice.is_ranged());
    let got = slice.read_range(4990, 100).unwrap();
    let want: Vec<u8> = (5990..6000u64).map(|i| (i % 251) as u8).collect();
    assert_eq!(got.as_slice(), want.as_slice());
    assert!(blob.read_range(1 << 30, 10).unwrap().is_empty());
    assert_eq!(source.0.load(Ordering::Relaxed), 10);
    assert!(!blob.is_materialized() && !slice.is_materialized());
    // Asked whole, a ranged blob is made once and then served like any other.
    let small = Blob::ranged(300, source.clone());
    assert_eq!(small.bytes().unwrap().len(), 300);
    assert!(!small.is_ranged());
    assert_eq!(small.read_range(299, 5).unwrap().as_slice(), &[48]);
    assert_eq!(source.0.load(Ordering::Relaxed), 310);
}

#[test]
fn fills_know_their_length_and_cost_nothing_until_read() {
    let zeros = Blob::fill(Vec::new(), 1 << 40, vec![0; 8]);
    assert!(zeros.is_fill() && !zeros.is_materialized());
    assert_eq!(zeros.len().unwrap(), 1 << 40);
    let small = Blob::fill(Vec::new(), 24, vec![0; 8]);
    assert_eq!(small.bytes().unwrap().as_slice(), &[0; 24]);
    let nan = Blob::fill(Vec::new(), 8, f32::NAN.to_le_bytes().to_vec());
    assert_eq!(
        nan.bytes().unwrap().as_slice(),
        [f32::NAN.to_le_bytes(); 2].concat()
    );
    let strings = Blob::fill(vec![2, 0, 0, 0], 12, vec![0; 4]);
    assert_eq!(
        strings.bytes().unwrap().as_slice(),
        &[2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
    );
    assert!(Blob::fill(Vec::new(), 1 << 40, vec![1]).bytes().is_err());
    assert!(!Blob::ready(Bytes::empty()).is_fill());
}

#[test]
fn slices_share_bytes_with_their_parent() {
    let parent = Blob::ready(Bytes::from_vec(b"0123456789".to_vec()));
    let same = Blob::slice(&parent, 0, 10);
    assert!(Arc::ptr_eq(&parent, &same));
    let part = Blob::slice(&parent, 2, 3);
    assert_eq!(part.bytes().unwrap().as_slice(), b"234");
    assert_eq!(
        part.bytes().unwrap().as_slice().as_ptr(),
        parent.bytes().unwrap().as_slice()[2..].as_ptr()
    );
    assert!(Blob::slice(&parent, 8, 3).bytes().is_err());
}

#[test]
fn a_blob_is_small() {
    // A million-entry archive holds a million blobs: what few have is boxed apart (200 bytes
    // before, 128 before the compact form of small stored members): with its `Arc`'s counts,
    // a blob is one 112-byte chunk of the C heap.
    assert!(
        std::mem::size_of::<Blob>() <= 88,
        "{}",
        std::mem::size_of::<Blob>()
    );
}

/// A blob costs no more than the compact member most blobs are (the rare general form is
/// boxed): a 24-byte `Blob`, 40 bytes with its `Arc`'s counts, a 48-byte chunk of glibc's
/// allocator (56 bytes and a 64-byte chunk when a member kept its name's place and CRC; 104
/// bytes and a 112-byte chunk when the general form was inline).
#[test]
fn a_blob_is_as_small_as_a_compact_member() {
    use std::mem::size_of;
    let (blob, member) = (size_of::<Blob>(), size_of::<StoredMember>());
    assert!(
        blob <= member.max(24),
        "a Blob is {blob} bytes, a StoredMember {member}"
    );
    assert!(
        blob + 2 * size_of::<usize>() <= 40,
        "an Arc<Blob> takes {} bytes",
        blob + 16
    );
}
