//! Tests of the decoding of foreign Zarr arrays: chunk assembly, orders, codecs, limits.

use super::*;
use crate::stores::Bytes;

fn blob(data: Vec<u8>) -> Arc<Blob> {
    Blob::ready(Bytes::from_vec(data))
}

const LIMIT: u64 = MAX_DECODED_BYTES;

fn layout(shape: &[u64], chunks: &[u64], t: NumType) -> ChunkLayout {
    ChunkLayout {
        shape: shape.to_vec(),
        chunks: chunks.to_vec(),
        kind: ArrayKind::Numeric(t, Endian::Little),
        codecs: Vec::new(),
        fortran_order: false,
        fill: vec![0; t.size() as usize],
        separator: ".".into(),
    }
}

#[test]
fn edge_chunks_and_missing_chunks_assemble_in_c_order() {
    // 3x5 u8 array in 2x2 chunks; chunk (1,2) missing (fill 9).
    let mut l = layout(&[3, 5], &[2, 2], NumType::UInt8);
    l.fill = vec![9];
    let full: Vec<u8> = (0..15).collect();
    let mut stored = Vec::new();
    for coord in l.chunk_coords() {
        if coord == [1, 2] {
            continue;
        }
        let mut chunk = vec![0u8; 4];
        for i in 0..2 {
            for j in 0..2 {
                let (r, c) = (coord[0] * 2 + i, coord[1] * 2 + j);
                if r < 3 && c < 5 {
                    chunk[(i * 2 + j) as usize] = full[(r * 5 + c) as usize];
                }
            }
        }
        stored.push((coord.clone(), blob(chunk)));
    }
    let out = assemble_numeric(&l, &stored).unwrap();
    let mut expected = full.clone();
    expected[14] = 9;
    assert_eq!(out, expected);
}

#[test]
fn fortran_order_and_big_endian_are_normalised() {
    let mut l = layout(&[2, 3], &[2, 3], NumType::UInt16);
    l.fortran_order = true;
    l.kind = ArrayKind::Numeric(NumType::UInt16, Endian::Big);
    // C-order values 1..6 stored column-major, big-endian.
    let f_order = [1u16, 4, 2, 5, 3, 6];
    let chunk: Vec<u8> = f_order.iter().flat_map(|v| v.to_be_bytes()).collect();
    let out = assemble_numeric(&l, &[(vec![0, 0], blob(chunk))]).unwrap();
    let expected: Vec<u8> = (1u16..=6).flat_map(|v| v.to_le_bytes()).collect();
    assert_eq!(out, expected);
}

#[test]
fn every_compressor_decodes() {
    let data: Vec<u8> = (0..4000u32).flat_map(|v| (v % 97).to_le_bytes()).collect();
    use std::io::Write;
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    z.write_all(&data).unwrap();
    assert_eq!(
        Compressor::Zlib
            .decompress(&z.finish().unwrap(), LIMIT)
            .unwrap(),
        data
    );
    let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    g.write_all(&data).unwrap();
    assert_eq!(
        Compressor::Gzip
            .decompress(&g.finish().unwrap(), LIMIT)
            .unwrap(),
        data
    );
    assert_eq!(
        Compressor::Zstd
            .decompress(&zstd::encode_all(&data[..], 3).unwrap(), LIMIT)
            .unwrap(),
        data
    );
    let mut lz = (data.len() as u32).to_le_bytes().to_vec();
    lz.extend(lz4_flex::block::compress(&data));
    assert_eq!(Compressor::Lz4.decompress(&lz, LIMIT).unwrap(), data);
    let mut b = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
    b.write_all(&data).unwrap();
    assert_eq!(
        Compressor::Bz2
            .decompress(&b.finish().unwrap(), LIMIT)
            .unwrap(),
        data
    );
    assert!(Compressor::Blosc.decompress(b"not blosc", LIMIT).is_err());
    let mut summed = data.clone();
    summed.extend(crc32c::crc32c(&data).to_le_bytes());
    assert_eq!(Compressor::Crc32c.decompress(&summed, LIMIT).unwrap(), data);
    summed[0] ^= 1;
    assert!(Compressor::Crc32c.decompress(&summed, LIMIT).is_err());
    assert!(Compressor::parse(&serde_json::json!({"id": "lzma"})).is_err());
}

#[test]
fn strings_assemble_across_chunks() {
    let l = ChunkLayout {
        kind: ArrayKind::Strings,
        fill: Vec::new(),
        ..layout(&[3], &[2], NumType::UInt8)
    };
    let c0 = encode_vlen([&b"a"[..], b"bb"].into_iter(), 2);
    let c1 = encode_vlen([&b"c"[..], b""].into_iter(), 2);
    let out = assemble_strings(&l, &[(vec![0], blob(c0)), (vec![1], blob(c1))]).unwrap();
    assert_eq!(decode_vlen(&out, 3).unwrap(), vec![&b"a"[..], b"bb", b"c"]);
}

#[test]
fn decompression_stops_at_the_limit() {
    use std::io::Write;
    let zeros = vec![0u8; 1 << 20];
    let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
    z.write_all(&zeros).unwrap();
    let bomb = z.finish().unwrap();
    let err = Compressor::Zlib.decompress(&bomb, 1000).unwrap_err();
    assert!(err.contains("more than 1000 bytes"), "{err}");
    let mut lz = u32::MAX.to_le_bytes().to_vec();
    lz.extend(lz4_flex::block::compress(&zeros));
    assert!(Compressor::Lz4.decompress(&lz, LIMIT).is_err());
    let mut blosc = vec![2u8, 1, 1, 1];
    blosc.extend(u32::MAX.to_le_bytes());
    blosc.extend([0u8; 8]);
    let err = Compressor::Blosc.decompress(&blosc, LIMIT).unwrap_err();
    assert!(err.contains("more than"), "{err}");
}

#[test]
fn oversized_arrays_fail_before_allocating() {
    let l = layout(&[1 << 40], &[1], NumType::Float64);
    let err = assemble_numeric(&l, &[]).unwrap_err();
    assert!(err.contains("limit"), "{err}");
    let s = ChunkLayout {
        kind: ArrayKind::Strings,
        fill: Vec::new(),
        ..layout(&[1 << 40], &[1], NumType::UInt8)
    };
    assert!(assemble_strings(&s, &[]).unwrap_err().contains("limit"));
    let big_chunk = layout(&[3], &[1 << 40], NumType::UInt8);
    assert!(assemble_numeric(&big_chunk, &[])
        .unwrap_err()
        .contains("limit"));
}

#[test]
fn chunk_names_parse_only_inside_the_grid() {
    let l = layout(&[3, 5], &[2, 2], NumType::UInt8);
    assert_eq!(l.parse_chunk_name("1.2"), Some(vec![1, 2]));
    for bad in [
        "2.0", "0.3", "01.0", "0", "0.0.0", "+1.0", "a.0", "", ".", "0.", "-0.0",
    ] {
        assert_eq!(l.parse_chunk_name(bad), None, "{bad:?}");
    }
    let scalar = layout(&[], &[], NumType::UInt8);
    assert_eq!(scalar.parse_chunk_name("0"), Some(vec![]));
    assert_eq!(
        layout(&[1 << 40], &[1], NumType::UInt8).grid_total(),
        Some(1 << 40)
    );
    assert_eq!(
        layout(&[u64::MAX, 3], &[1, 1], NumType::UInt8).grid_total(),
        None
    );
}
