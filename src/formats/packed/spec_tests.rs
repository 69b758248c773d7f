//! Tests of DataAxesFormats' dual-format shards (`daf-formats.md` §8): the worked example
//! (`fpk/zs.files/vectors/cell/score.zip`: 1200 Float64, zstd) rebuilt around its published
//! index, read through the Zarr index (`indexed+zipped`) and through the ZIP central directory
//! (`zipped`); the gzip layout whose ZIP entry name is the gzip header; and the descriptor forms.

use serde_json::{json, Value};

use super::*;
use crate::formats::types::NumType;
use std::path::Path;

use crate::stores::zip::parse_archive;
use crate::stores::Bytes;

/// The published index of the §8 example: chunk 0 at 89 (960 bytes), chunk 1 at 1102 (230
/// bytes), CRC-32C `8ade3190`.
const SPEC_INDEX: [u8; 36] = [
    0x59, 0, 0, 0, 0, 0, 0, 0, 0xc0, 0x03, 0, 0, 0, 0, 0, 0, //
    0x4e, 0x04, 0, 0, 0, 0, 0, 0, 0xe6, 0, 0, 0, 0, 0, 0, 0, //
    0x8a, 0xde, 0x31, 0x90,
];

fn u16le(v: u16) -> [u8; 2] {
    v.to_le_bytes()
}

/// A local file header as DataAxesFormats writes it in a shard: ZIP64 sizes in an extra field
/// (`zip64`), or inline 32-bit sizes and no extra field (gzip chunks).
fn local_header(name: &[u8], method: u16, crc: u32, csize: u64, size: u64, zip64: bool) -> Vec<u8> {
    let mut h = vec![0x50, 0x4b, 0x03, 0x04];
    h.extend(u16le(if zip64 { 45 } else { 20 }));
    h.extend(u16le(0x0800));
    h.extend(u16le(method));
    h.extend(u16le(0));
    h.extend(u16le(0x0021));
    h.extend(crc.to_le_bytes());
    if zip64 {
        h.extend([0xff; 8]);
    } else {
        h.extend((csize as u32).to_le_bytes());
        h.extend((size as u32).to_le_bytes());
    }
    h.extend(u16le(name.len() as u16));
    h.extend(u16le(if zip64 { 20 } else { 0 }));
    h.extend(name);
    if zip64 {
        h.extend(u16le(1));
        h.extend(u16le(16));
        h.extend(size.to_le_bytes());
        h.extend(csize.to_le_bytes());
    }
    h
}

fn central_record(name: &[u8], method: u16, crc: u32, csize: u64, size: u64, at: u64) -> Vec<u8> {
    let mut r = vec![0x50, 0x4b, 0x01, 0x02];
    r.extend(u16le(0x031e));
    r.extend(u16le(45));
    r.extend(u16le(0x0800));
    r.extend(u16le(method));
    r.extend(u16le(0));
    r.extend(u16le(0x0021));
    r.extend(crc.to_le_bytes());
    r.extend([0xff; 8]);
    r.extend(u16le(name.len() as u16));
    r.extend(u16le(28));
    r.extend([0; 6]);
    r.extend((0o100644u32 << 16).to_le_bytes());
    r.extend([0xff; 4]);
    r.extend(name);
    r.extend(u16le(1));
    r.extend(u16le(24));
    r.extend(size.to_le_bytes());
    r.extend(csize.to_le_bytes());
    r.extend(at.to_le_bytes());
    r
}

/// The 98-byte ZIP64 trailer.
fn trailer(count: u64, cd_offset: u64, cd_size: u64) -> Vec<u8> {
    let mut t = vec![0x50, 0x4b, 0x06, 0x06];
    t.extend(44u64.to_le_bytes());
    t.extend(u16le(0x031e));
    t.extend(u16le(45));
    t.extend([0; 8]);
    t.extend(count.to_le_bytes());
    t.extend(count.to_le_bytes());
    t.extend(cd_size.to_le_bytes());
    t.extend(cd_offset.to_le_bytes());
    t.extend([0x50, 0x4b, 0x06, 0x07, 0, 0, 0, 0]);
    t.extend((cd_offset + cd_size).to_le_bytes());
    t.extend(1u32.to_le_bytes());
    t.extend([0x50, 0x4b, 0x05, 0x06, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    t.extend([0xff; 8]);
    t.extend([0, 0]);
    t
}

/// A zstd frame of `data` padded to exactly `size` bytes with a skippable frame (our zstd
/// encoder's frame differs from Julia's; the padding keeps every offset of the example).
fn zstd_frame_of_size(data: &[u8], size: usize) -> Vec<u8> {
    let mut frame = zstd::bulk::compress(data, 5).unwrap();
    let pad = size - frame.len();
    assert!(
        pad >= 8,
        "frame of {} bytes does not fit {size}",
        frame.len()
    );
    frame.extend([0x50, 0x2a, 0x4d, 0x18]);
    frame.extend(((pad - 8) as u32).to_le_bytes());
    frame.resize(size, 0);
    frame
}

/// The 1200 values of the rebuilt example, and the two decoded inner chunks (the edge chunk
/// encoded at full size, as Julia does).
fn example_values() -> (Vec<u8>, [Vec<u8>; 2]) {
    let values: Vec<u8> = (0..1200u32)
        .flat_map(|i| (f64::from(i % 10) * 0.5).to_le_bytes())
        .collect();
    let mut second = values[8192..].to_vec();
    second.resize(8192, 0);
    (values.clone(), [values[..8192].to_vec(), second])
}

/// The §8 example shard: index, two zstd entries (method 93), central directory, trailer.
fn spec_example_shard() -> Vec<u8> {
    example_shard_with_crcs(None)
}

/// The §8 example shard, the ZIP CRC-32 of chunk `wrong` (if any) not that of its content.
fn example_shard_with_crcs(wrong: Option<usize>) -> Vec<u8> {
    let (_, decoded) = example_values();
    let frames = [
        zstd_frame_of_size(&decoded[0], 960),
        zstd_frame_of_size(&decoded[1], 230),
    ];
    let mut index = Vec::new();
    let mut body = Vec::new();
    let mut records = Vec::new();
    for (k, frame) in frames.iter().enumerate() {
        let name = format!("c/{k}");
        let at = 36 + body.len() as u64;
        let crc = crc32fast::hash(&decoded[k]) ^ u32::from(wrong == Some(k));
        body.extend(local_header(
            name.as_bytes(),
            93,
            crc,
            frame.len() as u64,
            8192,
            true,
        ));
        index.extend((36 + body.len() as u64).to_le_bytes());
        index.extend((frame.len() as u64).to_le_bytes());
        body.extend(frame);
        records.push(central_record(
            name.as_bytes(),
            93,
            crc,
            frame.len() as u64,
            8192,
            at,
        ));
    }
    let crc = crc32c::crc32c(&index);
    index.extend(crc.to_le_bytes());
    let mut shard = index;
    shard.extend(body);
    let cd_offset = shard.len() as u64;
    let cd: Vec<u8> = records.concat();
    shard.extend(&cd);
    shard.extend(trailer(2, cd_offset, cd.len() as u64));
    shard
}

fn spec_descriptor(packed_format: &str) -> Value {
    json!({"format":"dense","eltype":"Float64","packed_format":packed_format,"chunk_shape":[1024],
        "compression":"zstd","compression_level":5,"index_location":"start"})
}

fn flat_of(descriptor: &Value, shape: Vec<u64>, shard: Vec<u8>) -> Arc<Blob> {
    let eltype = ElementType::Num(NumType::Float64);
    let shard = Blob::ready(Bytes::from_vec(shard));
    let packing = Packing::from_files_descriptor(descriptor, eltype, shape, shard).unwrap();
    flat_blob(&packing, "vectors/cell/score".into()).unwrap()
}

#[test]
fn the_spec_example_shard_has_the_published_layout() {
    let shard = spec_example_shard();
    // The index built from the example's offsets is the published one, CRC-32C included.
    assert_eq!(shard[..36], SPEC_INDEX);
    assert_eq!(shard[36..40], [0x50, 0x4b, 0x03, 0x04]);
    assert_eq!(shard[44..46], [0x5d, 0x00]);
    assert_eq!(&shard[66..69], b"c/0");
    assert_eq!(shard[73..81], 8192u64.to_le_bytes());
    assert_eq!(shard[81..89], 960u64.to_le_bytes());
    // And it is a ZIP archive any reader can list.
    let archive = parse_archive(std::path::Path::new("x"), Bytes::from_vec(shard)).unwrap();
    let names: Vec<&str> = archive.records.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["c/0", "c/1"]);
    assert_eq!(archive.records[0].data_offset, 89);
}

#[test]
fn the_spec_example_decodes_through_its_index_and_through_its_zip_directory() {
    let (values, _) = example_values();
    for format in ["indexed+zipped", "zipped"] {
        let blob = flat_of(&spec_descriptor(format), vec![1200], spec_example_shard());
        assert_eq!(blob.known_len(), Some(9600));
        let got = blob.read_range(0, 9600).unwrap();
        assert!(got.as_slice() == values.as_slice(), "{format}");
    }
}

#[test]
fn a_chunk_that_decodes_to_other_bytes_than_its_zip_crc_is_refused() {
    let (values, _) = example_values();
    for format in ["indexed+zipped", "zipped"] {
        let blob = flat_of(
            &spec_descriptor(format),
            vec![1200],
            example_shard_with_crcs(Some(1)),
        );
        assert!(blob.read_range(0, 8192).unwrap().as_slice() == &values[..8192]);
        let e = blob.read_range(8192, 8).unwrap_err().to_string();
        assert!(
            e.contains("vectors/cell/score") && e.contains("CRC-32"),
            "{format}: {e}"
        );
    }
}

#[test]
fn the_spec_example_descriptor_gives_the_zarr_codecs() {
    let eltype = ElementType::Num(NumType::Float64);
    let shard = Blob::ready(Bytes::from_vec(spec_example_shard()));
    let descriptor = spec_descriptor("indexed+zipped");
    let packing = Packing::from_files_descriptor(&descriptor, eltype, vec![1200], shard).unwrap();
    assert_eq!(
        packing.codecs,
        json!([{"name":"bytes","configuration":{"endian":"little"}},
               {"name":"zstd","configuration":{"level":5}}])
    );
    assert_eq!(packing.inner, vec![1024]);
    assert_eq!(packing.shard_shape, vec![2048]);
    assert!(packing.index_at_start && packing.has_zarr_index());
    assert_eq!(packing.fill_value, json!(0.0));
}

#[test]
fn descriptor_forms_and_refusals() {
    let eltype = ElementType::Num(NumType::UInt32);
    let shard = || Blob::ready(Bytes::from_vec(Vec::new()));
    let packing_of = |d: Value| Packing::from_files_descriptor(&d, eltype, vec![3, 5000], shard());
    let matrix = |compression: &str| {
        json!({"format":"dense","eltype":"UInt32","packed_format":"indexed+zipped",
            "chunk_shape":[2048,1],"compression":compression,"compression_level":3})
    };
    let p = packing_of(matrix("gzip")).unwrap();
    assert_eq!(p.inner, vec![1, 2048]);
    assert_eq!(p.shard_shape, vec![3, 6144]);
    assert_eq!(
        p.codecs[1],
        json!({"name":"gzip","configuration":{"level":3}})
    );
    let p = packing_of(matrix("blosc_lz4_bitshuffle")).unwrap();
    assert_eq!(
        p.codecs[1],
        json!({"name":"blosc","configuration":{"blocksize":0,"clevel":3,"cname":"lz4",
            "shuffle":"bitshuffle","typesize":4}})
    );
    for bad in ["lzma", "blosc_foo_shuffle"] {
        let e = packing_of(matrix(bad)).unwrap_err().to_string();
        assert!(e.contains(bad), "{e}");
    }
    let mut unknown = matrix("zstd");
    unknown["packed_format"] = json!("indexed");
    assert!(packing_of(unknown)
        .unwrap_err()
        .to_string()
        .contains("indexed"));
    let mut zipped = matrix("zstd");
    zipped["packed_format"] = json!("zipped");
    let p = packing_of(zipped).unwrap();
    assert!(!p.has_zarr_index());
    let strings = json!({"format":"dense","eltype":"String","packed_format":"indexed+zipped",
        "chunk_shape":[512],"compression":"zstd","compression_level":5});
    let p = Packing::from_files_descriptor(&strings, ElementType::String, vec![600], shard());
    assert_eq!(
        p.unwrap().codecs[0],
        json!({"name":"vlen-utf8","configuration":{}})
    );
}

#[test]
fn zarr_metadata_refusals_name_the_codec() {
    let eltype = ElementType::Num(NumType::Float64);
    let shard = || Blob::ready(Bytes::from_vec(Vec::new()));
    let meta = |inner_codec: Value, grid: u64| {
        json!({"shape":[100],"data_type":"float64","fill_value":0.0,
            "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[grid]}},
            "codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[16],
                "codecs":[{"name":"bytes","configuration":{"endian":"little"}}, inner_codec],
                "index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],
                "index_location":"end"}}]})
    };
    let from = |m: Value| Packing::from_zarr_v3(&m, eltype, vec![100], shard());
    let e = from(meta(json!({"name":"lzma"}), 112))
        .unwrap_err()
        .to_string();
    assert!(e.contains("\"lzma\""), "{e}");
    let e = from(meta(json!({"name":"zstd"}), 64))
        .unwrap_err()
        .to_string();
    assert!(e.contains("single shard"), "{e}");
    let mut m = meta(json!({"name":"zstd"}), 112);
    m["codecs"][0]["configuration"]["index_codecs"] = json!([{"name":"bytes"},{"name":"zstd"}]);
    assert!(from(m).unwrap_err().to_string().contains("index_codecs"));
    let mut m = meta(json!({"name":"zstd"}), 112);
    m["codecs"] = json!([{"name":"bytes"}]);
    assert!(from(m).is_err());
    assert!(from(meta(json!({"name":"zstd"}), 112)).is_ok());
}

/// A gzip chunk as DataAxesFormats lays it out: the gzip header is the ZIP entry name, the raw
/// deflate data follows, then the gzip trailer; the index points at the name.
#[test]
fn gzip_chunks_are_gzip_streams_spanning_name_data_and_trailer() {
    use std::io::Write;
    let (values, decoded) = example_values();
    let mut index = Vec::new();
    let mut body = Vec::new();
    let mut records = Vec::new();
    for (k, chunk) in decoded.iter().enumerate() {
        let mut enc = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(5));
        enc.write_all(chunk).unwrap();
        let deflate = enc.finish().unwrap();
        let name = [
            0x1f,
            0x8b,
            0x08,
            0x01,
            b'A',
            b'A',
            b'A',
            b'A' + k as u8,
            0x02,
            0xff,
        ];
        let crc = crc32fast::hash(chunk);
        let at = 36 + body.len() as u64;
        let csize = deflate.len() as u64;
        body.extend(local_header(&name, 8, crc, csize, 8192, false));
        index.extend((at + 30).to_le_bytes());
        index.extend((10 + csize + 8).to_le_bytes());
        body.extend(&deflate);
        body.extend(crc.to_le_bytes());
        body.extend(8192u32.to_le_bytes());
        records.push(central_record(&name, 8, crc, csize, 8192, at));
    }
    let crc = crc32c::crc32c(&index);
    index.extend(crc.to_le_bytes());
    let mut shard = index;
    shard.extend(body);
    let cd_offset = shard.len() as u64;
    let cd = records.concat();
    shard.extend(&cd);
    shard.extend(trailer(2, cd_offset, cd.len() as u64));
    let gzip = |format: &str| {
        let mut descriptor = spec_descriptor(format);
        descriptor["compression"] = json!("gzip");
        descriptor
    };
    for format in ["indexed+zipped", "zipped"] {
        let blob = flat_of(&gzip(format), vec![1200], shard.clone());
        let got = blob.read_range(0, 9600).unwrap();
        assert!(got.as_slice() == values.as_slice(), "{format}");
    }
    // A central record whose local header lies past the shard: an error, not a wild read.
    let local_offset = cd_offset as usize + 84 - 8;
    shard[local_offset..local_offset + 8].copy_from_slice(&1_000_000u64.to_le_bytes());
    let blob = flat_of(&gzip("zipped"), vec![1200], shard);
    let e = blob.read_range(0, 8).unwrap_err().to_string();
    assert!(e.contains("chunk 0"), "{e}");
}

/// The codec list made from a blosc descriptor is the `codec.json` the shard itself carries
/// (shards of `tests/data/packed`, written as DataAxesFormats writes them).
#[test]
fn blosc_codecs_from_the_descriptor_are_the_shards_codec_json() {
    let root = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/packed/files_packed.daf"
    );
    let cases = [
        ("vectors/cell/depth", ""),
        ("vectors/cell/label", ""),
        ("matrices/gene/batch/umis", "rowval"),
        ("matrices/gene/batch/umis", "nzval"),
    ];
    for (base, component) in cases {
        let descriptor: Value =
            serde_json::from_slice(&std::fs::read(format!("{root}/{base}.json")).unwrap()).unwrap();
        let (spec, payload) = match component {
            "" => (descriptor, format!("{root}/{base}.zip")),
            c => (descriptor[c].clone(), format!("{root}/{base}.{c}.zip")),
        };
        let shard = std::fs::read(&payload).unwrap();
        let archive = parse_archive(Path::new(&payload), Bytes::from_vec(shard.clone())).unwrap();
        let record = archive
            .records
            .iter()
            .find(|r| r.name == "codec.json")
            .unwrap();
        let at = record.data_offset as usize;
        let stored: Value =
            serde_json::from_slice(&shard[at..at + record.compressed_size as usize]).unwrap();
        let eltype = ElementType::from_julia_name(spec["eltype"].as_str().unwrap()).unwrap();
        let packing =
            Packing::from_files_descriptor(&spec, eltype, vec![100], Blob::ready(Bytes::empty()))
                .unwrap();
        assert_eq!(packing.codecs, stored, "{payload}");
    }
}
