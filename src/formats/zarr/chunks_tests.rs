//! Tests of reading foreign chunked arrays by range through a bounded decode cache.

use std::io::Write;

use super::*;
use crate::formats::types::{Endian, NumType};
use crate::formats::zarr::decode::{assemble_numeric, Compressor};

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

/// A 37×23 f64 array in 5×4 zlib chunks (edge chunks padded), every third chunk missing
/// (fill 9.5): its layout and stored chunks.
fn array() -> (ChunkLayout, StoredChunks) {
    let layout = ChunkLayout {
        shape: vec![37, 23],
        chunks: vec![5, 4],
        kind: ArrayKind::Numeric(NumType::Float64, Endian::Little),
        codecs: vec![Compressor::Zlib],
        fortran_order: false,
        fill: 9.5f64.to_le_bytes().to_vec(),
        separator: ".".into(),
    };
    let mut stored = Vec::new();
    for (k, coord) in layout.chunk_coords().into_iter().enumerate() {
        if k % 3 == 2 {
            continue;
        }
        let mut chunk = Vec::new();
        for i in 0..5 {
            for j in 0..4 {
                let (r, c) = (coord[0] * 5 + i, coord[1] * 4 + j);
                chunk.extend_from_slice(&((r * 100 + c) as f64).to_le_bytes());
            }
        }
        stored.push((coord, Blob::ready(Bytes::from_vec(zlib(&chunk)))));
    }
    (layout, stored)
}

#[test]
fn evicted_chunks_read_back_correctly() {
    let (layout, stored) = array();
    let expected = assemble_numeric(&layout, &stored).unwrap();
    // Room for two decoded chunks (5×4×8 bytes each): most reads evict.
    let cache: &'static DecodeCache = Box::leak(Box::new(DecodeCache::new(2 * 160)));
    let (blob, decoder) = foreign_decoder_in(cache, layout, stored, "t".into()).unwrap();
    assert_eq!(blob.len().unwrap(), 37 * 23 * 8);
    assert!(blob.is_ranged());
    let mut seed = 12345u64;
    for round in 0..400 {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let offset = (seed >> 33) % expected.len() as u64;
        let len = if round % 50 == 0 {
            4096
        } else {
            (seed >> 20) % 700 + 1
        };
        let got = blob.read_range(offset, len).unwrap();
        let end = (offset + len).min(expected.len() as u64);
        assert_eq!(
            got.as_slice(),
            &expected[offset as usize..end as usize],
            "read {offset}+{len}"
        );
    }
    assert!(cache.evicted() > 0, "the bound forced evictions");
    assert!(
        cache.peak() <= 2 * 160,
        "peak {} over the bound",
        cache.peak()
    );
    let stored_chunks = 8 * 6 - 8 * 6 / 3;
    assert!(decoder.decoded.load(Ordering::Relaxed) > stored_chunks);
    assert!(!blob.is_materialized(), "never decoded whole");
}

#[test]
fn a_corrupt_chunk_fails_only_the_reads_that_touch_it() {
    let (layout, mut stored) = array();
    stored[0].1 = Blob::ready(Bytes::from_vec(b"not zlib".to_vec()));
    let cache: &'static DecodeCache = Box::leak(Box::new(DecodeCache::new(1 << 20)));
    let (blob, _) = foreign_decoder_in(cache, layout, stored, "t".into()).unwrap();
    assert!(blob.read_range(0, 8).is_err());
    assert!(blob.read_range(0, 8).is_err(), "it keeps failing");
    // Row 10 lies in chunk row 2: readable.
    let row10 = blob.read_range(10 * 23 * 8, 8).unwrap();
    assert_eq!(row10.as_slice(), &1000f64.to_le_bytes());
}

#[test]
fn chunks_larger_than_the_limit_are_refused() {
    let (mut layout, stored) = array();
    layout.chunks = vec![1 << 20, 1 << 20];
    assert!(foreign_decoder(layout, stored, "t".into()).is_err());
}
