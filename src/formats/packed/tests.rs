//! Tests of packed arrays: shards written by zarr-python 3 (`tests/data/shards`, see its
//! `make.py`), the worked example of `daf-formats.md` §8 rebuilt byte for byte around its index,
//! corrupt indexes and chunks, and what a ranged read decodes.

use std::sync::atomic::Ordering;

use serde_json::{json, Value};

use super::*;
use crate::formats::packed::decode::{numeric_decoder, CACHE_BYTES, CACHE_CHUNKS};
use crate::formats::strings::decode_vlen;
use crate::formats::types::NumType;
use crate::stores::Bytes;

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/shards");

fn ready(data: Vec<u8>) -> Arc<Blob> {
    Blob::ready(Bytes::from_vec(data))
}

fn eltype_of(dtype: &str) -> ElementType {
    match dtype {
        "float64" => ElementType::Num(NumType::Float64),
        "float32" => ElementType::Num(NumType::Float32),
        "int32" => ElementType::Num(NumType::Int32),
        "uint16" => ElementType::Num(NumType::UInt16),
        "str" => ElementType::String,
        other => panic!("no element type for {other}"),
    }
}

/// Little-endian bytes of JSON numbers as `t`.
fn le_bytes(values: &[Value], t: NumType) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| match t {
            NumType::Float64 => v.as_f64().unwrap().to_le_bytes().to_vec(),
            NumType::Float32 => (v.as_f64().unwrap() as f32).to_le_bytes().to_vec(),
            NumType::Int32 => (v.as_i64().unwrap() as i32).to_le_bytes().to_vec(),
            NumType::UInt16 => (v.as_u64().unwrap() as u16).to_le_bytes().to_vec(),
            other => panic!("{other:?}"),
        })
        .collect()
}

/// The packing of array `name` of `tests/data/shards`, with its shard bytes (to corrupt).
fn zarr_python_array(name: &str, shard: Option<Vec<u8>>) -> (Packing, Value) {
    let expected: Value =
        serde_json::from_slice(&std::fs::read(format!("{DATA}/expected.json")).unwrap()).unwrap();
    let expected = expected[name].clone();
    let meta: Value =
        serde_json::from_slice(&std::fs::read(format!("{DATA}/{name}/zarr.json")).unwrap())
            .unwrap();
    let shape: Vec<u64> = serde_json::from_value(expected["shape"].clone()).unwrap();
    let key = if shape.len() == 1 { "c/0" } else { "c/0/0" };
    let shard = shard.unwrap_or_else(|| std::fs::read(format!("{DATA}/{name}/{key}")).unwrap());
    let eltype = eltype_of(expected["dtype"].as_str().unwrap());
    let packing = Packing::from_zarr_v3(&meta, eltype, shape, ready(shard)).unwrap();
    (packing, expected)
}

fn shard_of(name: &str) -> Vec<u8> {
    let path = format!("{DATA}/{name}/c/0");
    std::fs::read(&path).unwrap()
}

#[test]
fn shards_written_by_zarr_python_decode_to_their_values() {
    for name in [
        "zstd_start_f64",
        "gzip_end_i32_2d",
        "blosc_end_u16_2d",
        "crc_f32",
    ] {
        let (packing, expected) = zarr_python_array(name, None);
        let ElementType::Num(t) = packing.eltype else {
            unreachable!()
        };
        let want = le_bytes(expected["values"].as_array().unwrap(), t);
        let blob = flat_blob(&packing, name.to_string()).unwrap();
        assert_eq!(blob.known_len(), Some(want.len() as u64), "{name}");
        assert!(blob.is_ranged(), "{name}");
        let by_range = blob.read_range(0, want.len() as u64).unwrap();
        assert!(by_range.as_slice() == want.as_slice(), "{name} by range");
        assert!(!blob.is_materialized(), "{name}");
        assert!(
            blob.bytes().unwrap().as_slice() == want.as_slice(),
            "{name} whole"
        );
    }
}

#[test]
fn the_shard_grid_is_the_declared_shard_in_whole_inner_chunks() {
    // zarr-python declared a shard of 128 for 100 elements: 8 chunks of 16 in the index.
    let (packing, _) = zarr_python_array("zstd_start_f64", None);
    assert_eq!(packing.shard_shape, vec![128]);
    assert_eq!(packing.grid(), vec![8]);
    assert!(packing.index_at_start);
    let (packing, _) = zarr_python_array("gzip_end_i32_2d", None);
    assert_eq!(
        (packing.shard_shape.clone(), packing.grid()),
        (vec![6, 40], vec![3, 5])
    );
    assert!(!packing.index_at_start);
    assert_eq!(packing.fill_value, json!(7));
    assert_eq!(packing.codecs.as_array().map(Vec::len), Some(3));
}

#[test]
fn packed_strings_decode_with_absent_chunks_as_fill() {
    let (packing, expected) = zarr_python_array("strings_start", None);
    let blob = flat_blob(&packing, "strings".into()).unwrap();
    let bytes = blob.bytes().unwrap();
    let items = decode_vlen(bytes.as_slice(), 10).unwrap();
    let want: Vec<&str> = expected["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let got: Vec<&str> = items
        .iter()
        .map(|i| std::str::from_utf8(i).unwrap())
        .collect();
    assert_eq!(got, want);
}

#[test]
fn every_range_of_a_2d_transposed_array_is_exact() {
    let (packing, expected) = zarr_python_array("gzip_end_i32_2d", None);
    let want = le_bytes(expected["values"].as_array().unwrap(), NumType::Int32);
    let blob = flat_blob(&packing, "m".into()).unwrap();
    let total = want.len() as u64;
    for offset in (0..total + 3).step_by(13) {
        for len in [1u64, 3, 4, 37, 148, 500, 4096] {
            let got = blob.read_range(offset, len).unwrap();
            let start = offset.min(total) as usize;
            let end = (offset + len).min(total) as usize;
            assert!(got.as_slice() == &want[start..end], "{offset}+{len}");
        }
    }
}

#[test]
fn a_corrupt_shard_index_is_an_error_naming_the_array() {
    let mut shard = shard_of("zstd_start_f64");
    shard[3] ^= 0x40;
    let (packing, _) = zarr_python_array("zstd_start_f64", Some(shard));
    let blob = flat_blob(&packing, "vectors/cell/score".into()).unwrap();
    // Nothing is read before the first access: the length is known.
    assert_eq!(blob.known_len(), Some(800));
    let e = blob.read_range(0, 8).unwrap_err().to_string();
    assert!(
        e.contains("vectors/cell/score") && e.contains("CRC-32C"),
        "{e}"
    );
    // An entry pointing outside the shard (index without CRC-32C): refused too.
    let (packing, _) = zarr_python_array("crc_f32", None);
    let mut shard = shard_of("crc_f32");
    shard[8..16].copy_from_slice(&10_000u64.to_le_bytes());
    let packing = Packing {
        shard: ready(shard),
        ..packing
    };
    let e = flat_blob(&packing, "f".into())
        .unwrap()
        .read_range(0, 4)
        .unwrap_err()
        .to_string();
    assert!(e.contains("outside the shard"), "{e}");
}

#[test]
fn a_corrupt_inner_chunk_fails_its_reads_only() {
    // Chunk 1 (elements 16..32) starts at 199: break its zstd frame magic.
    let mut shard = shard_of("zstd_start_f64");
    shard[199] ^= 0xff;
    let (packing, expected) = zarr_python_array("zstd_start_f64", Some(shard));
    let want = le_bytes(expected["values"].as_array().unwrap(), NumType::Float64);
    let decoder =
        numeric_decoder(&packing, pipeline_of(&packing), "vectors/cell/x".into()).unwrap();
    let blob = Blob::ranged(decoder.flat_len(), decoder.clone());
    for _ in 0..2 {
        let e = blob.read_range(16 * 8 + 5, 10).unwrap_err().to_string();
        assert!(
            e.contains("vectors/cell/x") && e.contains("inner chunk 1"),
            "{e}"
        );
    }
    // The failed chunk was decoded once; the rest of the array is intact.
    assert_eq!(decoder.stats.decoded.load(Ordering::Relaxed), 1);
    assert!(blob.read_range(0, 128).unwrap().as_slice() == &want[..128]);
    assert!(blob.read_range(256, 544).unwrap().as_slice() == &want[256..]);
    assert!(blob.bytes().is_err());
}

fn pipeline_of(packing: &Packing) -> Pipeline {
    Pipeline::parse(&packing.codecs, packing.eltype, packing.shape.len()).unwrap()
}

/// A shard in DataAxesFormats' layout: the index at the start (CRC-32C), then the chunks.
fn daf_shard(chunks: &[Option<Vec<u8>>]) -> Vec<u8> {
    let index_len = chunks.len() * 16 + 4;
    let mut index = Vec::new();
    let mut body = Vec::new();
    for chunk in chunks {
        match chunk {
            Some(data) => {
                index.extend_from_slice(&((index_len + body.len()) as u64).to_le_bytes());
                index.extend_from_slice(&(data.len() as u64).to_le_bytes());
                body.extend_from_slice(data);
            }
            None => index.extend_from_slice(&[0xff; 16]),
        }
    }
    let crc = crc32c::crc32c(&index);
    index.extend_from_slice(&crc.to_le_bytes());
    index.extend(body);
    index
}

/// A packed Float64 "matrix" of `ncols` columns of `nrows` (C shape `[ncols, nrows]`), one
/// inner chunk `[1, 1024]` per 1024 rows of a column, as DataAxesFormats packs it; element
/// `(c, r)` is `c * nrows + r`.
fn daf_matrix(ncols: u64, nrows: u64) -> (Packing, Vec<u8>) {
    let per_col = nrows.div_ceil(1024);
    let mut chunks = Vec::new();
    for c in 0..ncols {
        for k in 0..per_col {
            let chunk: Vec<u8> = (0..1024u64)
                .map(|i| k * 1024 + i)
                .flat_map(|r| {
                    let v = if r < nrows {
                        (c * nrows + r) as f64
                    } else {
                        0.0
                    };
                    v.to_le_bytes()
                })
                .collect();
            chunks.push(Some(zstd::bulk::compress(&chunk, 1).unwrap()));
        }
    }
    let want: Vec<u8> = (0..ncols * nrows)
        .flat_map(|i| (i as f64).to_le_bytes())
        .collect();
    let descriptor = json!({"format":"dense","eltype":"Float64","packed_format":"indexed+zipped",
        "chunk_shape":[1024,1],"compression":"zstd","compression_level":1,"index_location":"start"});
    let packing = Packing::from_files_descriptor(
        &descriptor,
        ElementType::Num(NumType::Float64),
        vec![ncols, nrows],
        ready(daf_shard(&chunks)),
    )
    .unwrap();
    (packing, want)
}

#[test]
fn a_4k_read_decodes_one_inner_chunk() {
    let (packing, want) = daf_matrix(4, 3000);
    assert_eq!(packing.inner, vec![1, 1024]);
    let decoder = numeric_decoder(&packing, pipeline_of(&packing), "m".into()).unwrap();
    let blob = Blob::ranged(decoder.flat_len(), decoder.clone());
    // Column 2, rows 1024..1536: inside chunk (2, 1).
    let offset = (2 * 3000 + 1024) * 8;
    let got = blob.read_range(offset, 4096).unwrap();
    assert!(got.as_slice() == &want[offset as usize..offset as usize + 4096]);
    assert_eq!(decoder.stats.decoded.load(Ordering::Relaxed), 1);
    // Again, and the next 4 KiB of the same chunk: served from the cache.
    blob.read_range(offset, 4096).unwrap();
    blob.read_range(offset + 4096, 4096).unwrap();
    assert_eq!(decoder.stats.decoded.load(Ordering::Relaxed), 1);
    // A read across a column's end touches the edge chunk of one column and the next's first.
    let edge = (3000 - 10) * 8;
    let got = blob.read_range(edge, 160).unwrap();
    assert!(got.as_slice() == &want[edge as usize..edge as usize + 160]);
    assert_eq!(decoder.stats.decoded.load(Ordering::Relaxed), 3);
}

#[test]
fn reading_a_large_packed_array_by_ranges_never_materialises_it() {
    // 8 MiB of Float64 in 1024 inner chunks of 8 KiB.
    let (packing, want) = daf_matrix(256, 4096);
    let decoder = numeric_decoder(&packing, pipeline_of(&packing), "big".into()).unwrap();
    let blob = Blob::ranged(decoder.flat_len(), decoder.clone());
    assert_eq!(blob.known_len(), Some(8 << 20));
    let step = 128 << 10;
    for offset in (0..want.len() as u64).step_by(step) {
        let got = blob.read_range(offset, step as u64).unwrap();
        assert!(got.as_slice() == &want[offset as usize..offset as usize + step]);
    }
    assert!(!blob.is_materialized());
    assert_eq!(decoder.stats.decoded.load(Ordering::Relaxed), 1024);
    let peak = decoder.stats.peak_cached.load(Ordering::Relaxed);
    assert!(
        peak <= (CACHE_CHUNKS as u64 * 8192).min(CACHE_BYTES),
        "{peak}"
    );
    // Backwards, 4 KiB at a time, over the last 16 chunks: the last 8 are still cached, the
    // 8 before them are decoded once more.
    let end = want.len() as u64;
    for k in 1..=32u64 {
        blob.read_range(end - k * 4096, 4096).unwrap();
    }
    assert_eq!(decoder.stats.decoded.load(Ordering::Relaxed), 1024 + 8);
}
