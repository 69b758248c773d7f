//! Property-based fuzzing of the format readers against untrusted input: FilesDaf descriptors
//! (1.0 and 1.1) and whole FilesDaf trees, Zarr v2 `.zarray` and Zarr v3 `zarr.json` documents
//! with their chunks, the
//! vlen-utf8 and text decoders, and the path grammar (source paths and the name check).
//!
//! Inputs are both random bytes and structure-aware (documents built from the fields the readers
//! look at, with good, odd and hostile values). Every target must return (never panic), keep
//! every produced blob within the decode limit, and round-trip what it accepts. Case counts come
//! from `PROPTEST_CASES` (default: a few hundred, so the file runs in seconds in debug builds).
//! Failures found are kept below as named regression tests.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use proptest::prelude::*;
use serde_json::{json, Value};

use daf_mount::formats::files::read_files_daf;
use daf_mount::formats::json::parse_descriptor;
use daf_mount::formats::json::FilesVersion;
use daf_mount::formats::model::Dataset;
use daf_mount::formats::names::check_name;
use daf_mount::formats::source::{parse_source, SourceSpec};
use daf_mount::formats::strings::{count_lines, decode_vlen, encode_vlen, split_lines, Strings};
use daf_mount::formats::zarr::decode::MAX_DECODED_BYTES;
use daf_mount::formats::zarr::v2::open_array;
use daf_mount::formats::zarr::v3;
use daf_mount::stores::{Blob, Bytes, Entry, StoreIndex};
use daf_mount::views::files::files_view;
use daf_mount::views::zarr_v2::zarr_view;
use daf_mount::views::zarr_v3::zarr_v3_view;
use daf_mount::views::ViewNode;

/// `PROPTEST_CASES` if set, else `default`.
fn config(default: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

fn blob(data: &[u8]) -> Arc<Blob> {
    Blob::ready(Bytes::from_vec(data.to_vec()))
}

fn index(files: &[(String, Vec<u8>)]) -> StoreIndex {
    let entries: BTreeMap<String, Entry> = files
        .iter()
        .map(|(k, v)| {
            let entry = Entry {
                blob: blob(v),
                mtime: SystemTime::UNIX_EPOCH,
            };
            (k.clone(), entry)
        })
        .collect();
    StoreIndex::new(entries, None)
}

/// Produces every file of both views of `dataset`: no panic, nothing beyond the decode limit,
/// and every name shown passed the name check.
fn produce_views(dataset: &Dataset) {
    let names = dataset
        .scalars
        .keys()
        .chain(dataset.axes.keys())
        .chain(dataset.vectors.keys())
        .map(String::as_str)
        .chain(dataset.vectors.values().flat_map(|v| v.keys()));
    for name in names {
        assert_eq!(check_name(name), None, "{name:?} was accepted");
    }
    for entry in files_view(dataset, "x", FilesVersion::V1_0)
        .into_iter()
        .chain(files_view(dataset, "y", FilesVersion::V1_1))
        .chain(zarr_view(dataset, "x"))
        .chain(zarr_v3_view(dataset, "z"))
    {
        if let ViewNode::File(blob) = entry.node {
            let announced = blob.known_len();
            if let Ok(bytes) = blob.bytes() {
                assert!(bytes.len() <= MAX_DECODED_BYTES, "{}", entry.path);
                if let Some(n) = announced {
                    assert_eq!(n, bytes.len(), "{}", entry.path);
                }
            }
        }
    }
}

/// Small JSON values of every kind, nested.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[a-zA-Z0-9 ._-]{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn type_name() -> impl Strategy<Value = Value> {
    prop_oneof![
        prop::sample::select(vec![
            "Bool", "Int8", "Int16", "Int32", "Int64", "UInt8", "UInt16", "UInt32", "UInt64",
            "Float32", "Float64", "String", "string", "int", "float64", "Float16", "",
        ])
        .prop_map(Value::from),
        any_json(),
    ]
}

fn count() -> impl Strategy<Value = Value> {
    prop_oneof![
        (0u64..6).prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-5i64..0).prop_map(Value::from),
        Just(json!(1.5)),
        Just(json!("3")),
    ]
}

/// FilesDaf descriptors, 1.0 and 1.1 forms, with good and hostile field values.
fn descriptor() -> impl Strategy<Value = Value> {
    let component = (type_name(), count())
        .prop_map(|(t, n)| json!({"format": "dense", "eltype": t, "n_elements": n}));
    (
        prop::sample::select(vec!["dense", "sparse", "packed", ""]),
        type_name(),
        prop::option::of(type_name()),
        prop::collection::btree_map(
            prop::sample::select(vec!["nzind", "nzval", "colptr", "rowval", "nztxt"]),
            prop_oneof![component, any_json()],
            0..4,
        ),
    )
        .prop_map(|(format, eltype, indtype, parts)| {
            let mut doc = json!({"format": format, "eltype": eltype});
            if let Some(t) = indtype {
                doc["indtype"] = t;
            }
            for (k, v) in parts {
                doc[k] = v;
            }
            doc
        })
}

fn payload_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "p", "q r", "ü", "..", ".", "", "a\nb", "x/y", "...", "a\u{1b}b",
    ])
    .prop_map(str::to_string)
}

/// A FilesDaf tree: an axis of `n` entries, and properties with random descriptors and payloads.
fn files_tree() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    (
        prop::sample::select(vec!["[1,0]", "[1,1]"]),
        0usize..5,
        prop::collection::vec(
            (
                payload_name(),
                prop_oneof![
                    descriptor().prop_map(|d| d.to_string().into_bytes()),
                    prop::collection::vec(any::<u8>(), 0..40)
                ],
                prop::collection::vec(
                    (
                        prop::sample::select(vec![
                            "data", "txt", "nzind", "nzval", "nztxt", "colptr", "rowval",
                        ]),
                        prop::collection::vec(any::<u8>(), 0..48),
                    ),
                    0..4,
                ),
            ),
            0..4,
        ),
        prop::collection::vec((payload_name(), any_json()), 0..3),
    )
        .prop_map(|(version, n, props, scalars)| {
            let mut files = vec![
                (
                    "daf.json".to_string(),
                    format!("{{\"version\":{version}}}\n").into_bytes(),
                ),
                (
                    "axes/a.txt".to_string(),
                    (0..n)
                        .map(|i| format!("e{i}\n"))
                        .collect::<String>()
                        .into_bytes(),
                ),
            ];
            for (name, doc, payloads) in props {
                for dir in ["vectors/a", "matrices/a/a"] {
                    files.push((format!("{dir}/{name}.json"), doc.clone()));
                    for (ext, bytes) in &payloads {
                        files.push((format!("{dir}/{name}.{ext}"), bytes.clone()));
                    }
                }
            }
            for (name, value) in scalars {
                files.push((
                    format!("scalars/{name}.json"),
                    value.to_string().into_bytes(),
                ));
            }
            files
        })
}

fn dim() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (0u64..5).prop_map(Value::from),
        1 => ((1u64 << 32)..u64::MAX).prop_map(Value::from),
        1 => Just(json!(-1)),
        1 => Just(json!(2.5)),
        1 => Just(json!(1e30)),
    ]
}

/// `.zarray` documents with good, odd and hostile fields.
fn zarray() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(dim(), 0..4),
        prop::option::of(prop::collection::vec(dim(), 0..4)),
        prop::sample::select(vec![
            "<f8", ">f4", "|u1", "<i2", ">u8", "|b1", "|O", "<U3", "x",
        ]),
        prop::sample::select(vec![
            "null", "zlib", "gzip", "zstd", "bz2", "lz4", "blosc", "lzma",
        ]),
        prop::sample::select(vec!["C", "F", "X"]),
        prop_oneof![
            Just(Value::Null),
            Just(json!([{"id": "vlen-utf8"}])),
            any_json()
        ],
        prop_oneof![Just(Value::Null), Just(json!("NaN")), any_json()],
        prop::sample::select(vec![".", "/", "-"]),
    )
        .prop_map(
            |(shape, chunks, dtype, compressor, order, filters, fill, sep)| {
                let chunks = chunks.unwrap_or_else(|| shape.iter().map(|_| json!(2)).collect());
                let compressor = if compressor == "null" {
                    Value::Null
                } else {
                    json!({"id": compressor})
                };
                json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": dtype,
                   "compressor": compressor, "order": order, "filters": filters,
                   "fill_value": fill, "dimension_separator": sep})
            },
        )
}

/// Zarr v3 codec entries, good and hostile.
fn v3_codec() -> impl Strategy<Value = Value> {
    prop::sample::select(vec![
        json!({"name": "bytes", "configuration": {"endian": "little"}}),
        json!({"name": "bytes", "configuration": {"endian": "big"}}),
        json!({"name": "bytes"}),
        json!({"name": "vlen-utf8"}),
        json!({"name": "transpose", "configuration": {"order": [1, 0]}}),
        json!({"name": "transpose", "configuration": {"order": [0]}}),
        json!({"name": "zstd"}),
        json!({"name": "gzip"}),
        json!({"name": "blosc"}),
        json!({"name": "crc32c"}),
        json!({"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": [{"name": "bytes"}]}}),
        json!({"name": "lzma"}),
        json!(7),
    ])
}

/// `zarr.json` array documents with good, odd and hostile fields.
fn zarr_json() -> impl Strategy<Value = Value> {
    (
        prop::collection::vec(dim(), 0..4),
        prop::option::of(prop::collection::vec(dim(), 0..4)),
        prop::sample::select(vec![
            "float64",
            "float32",
            "uint8",
            "int16",
            "uint64",
            "bool",
            "string",
            "complex64",
            "x",
        ]),
        prop::collection::vec(v3_codec(), 0..4),
        prop_oneof![
            Just(json!(0)),
            Just(json!("NaN")),
            Just(json!("0x7fc00000")),
            Just(json!("")),
            any_json()
        ],
        prop::sample::select(vec!["default", "v2", "other"]),
        prop::sample::select(vec![".", "/", "-"]),
    )
        .prop_map(|(shape, chunks, dtype, codecs, fill, encoding, sep)| {
            let chunks = chunks.unwrap_or_else(|| shape.clone());
            json!({"zarr_format": 3, "node_type": "array", "shape": shape, "data_type": dtype,
               "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
               "chunk_key_encoding": {"name": encoding, "configuration": {"separator": sep}},
               "codecs": codecs, "fill_value": fill})
        })
}

/// A produced blob stays within the decode limit, unless it is an all-zero fill (a map of the
/// zero page, which costs no memory at any size).
fn within_bounds(blob: &Arc<Blob>) -> Result<(), TestCaseError> {
    if let Ok(bytes) = blob.bytes() {
        let zero_fill = || blob.is_fill() && bytes.as_slice().iter().all(|&b| b == 0);
        prop_assert!(bytes.len() <= MAX_DECODED_BYTES || zero_fill());
    }
    Ok(())
}

fn chunk_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        prop::collection::vec(any::<u8>(), 0..16).prop_map(|d| {
            let mut out = Vec::new();
            let mut z = flate2::write::ZlibEncoder::new(&mut out, flate2::Compression::fast());
            std::io::Write::write_all(&mut z, &d.repeat(8)).unwrap();
            z.finish().unwrap();
            out
        }),
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..6), 0..5)
            .prop_map(|items| encode_vlen(items.iter().map(Vec::as_slice), items.len())),
    ]
}

proptest! {
    #![proptest_config(config(1000))]

    #[test]
    fn descriptors_never_panic(doc in descriptor(), raw in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = parse_descriptor(doc.to_string().as_bytes());
        let _ = parse_descriptor(&raw);
    }

    #[test]
    fn files_daf_trees_read_and_produce_within_bounds(files in files_tree()) {
        let idx = index(&files);
        let dataset = read_files_daf(&idx, Path::new("fuzz")).unwrap();
        produce_views(&dataset);
    }

    #[test]
    fn zarr_arrays_open_and_decode_within_bounds(
        doc in zarray(),
        chunks in prop::collection::vec(
            (prop::sample::select(vec!["0", "1", "0.0", "0.1", "1.0", "0/0", "0/1", "00", "9", ".zattrs"]), chunk_bytes()),
            0..5,
        ),
        raw in prop::option::of(prop::collection::vec(any::<u8>(), 0..80)),
    ) {
        let zarray = raw.unwrap_or_else(|| doc.to_string().into_bytes());
        let mut files = vec![("arr/.zarray".to_string(), zarray)];
        files.extend(chunks.into_iter().map(|(k, v)| (format!("arr/{k}"), v)));
        if let Ok(array) = open_array(&index(&files), "arr") {
            within_bounds(&array.blob)?;
        }
    }

    #[test]
    fn zarr_v3_arrays_open_and_decode_within_bounds(
        doc in zarr_json(),
        chunks in prop::collection::vec(
            (prop::sample::select(vec!["c/0", "c/1", "c/0/0", "c/0/1", "c.0", "c", "0", "0.0", "c/00"]), chunk_bytes()),
            0..5,
        ),
        raw in prop::option::of(prop::collection::vec(any::<u8>(), 0..80)),
    ) {
        let meta = raw.unwrap_or_else(|| doc.to_string().into_bytes());
        let mut files = vec![("arr/zarr.json".to_string(), meta)];
        files.extend(chunks.into_iter().map(|(k, v)| (format!("arr/{k}"), v)));
        if let Ok(array) = v3::open_array(&index(&files), "arr") {
            within_bounds(&array.blob)?;
        }
    }

    #[test]
    fn vlen_decodes_only_what_it_can_round_trip(
        data in prop::collection::vec(any::<u8>(), 0..64),
        expected in prop_oneof![0u64..8, any::<u64>()],
        items in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..8), 0..6),
        forged in any::<u32>(),
    ) {
        if let Ok(decoded) = decode_vlen(&data, expected) {
            prop_assert_eq!(decoded.len() as u64, expected);
            prop_assert_eq!(encode_vlen(decoded.into_iter(), expected as usize), data);
        }
        let mut encoded = encode_vlen(items.iter().map(Vec::as_slice), items.len());
        let back = decode_vlen(&encoded, items.len() as u64).unwrap();
        prop_assert_eq!(back.len(), items.len());
        let lines = Strings::from_vlen(blob(&encoded), items.len() as u64).lines();
        if let Ok(text) = lines.bytes() {
            prop_assert_eq!(split_lines(text.as_slice(), items.len() as u64).unwrap(), back);
        }
        // A forged count or length is refused, never trusted for an allocation.
        encoded[..4].copy_from_slice(&forged.to_le_bytes());
        let _ = decode_vlen(&encoded, u64::from(forged));
        let _ = Strings::from_vlen(blob(&encoded), u64::from(forged)).lines().bytes();
    }

    #[test]
    fn text_splits_only_what_it_can_round_trip(
        text in prop::collection::vec(prop::sample::select(vec![b'a', b'\n', 0xff, b' ']), 0..32),
        expected in prop_oneof![0u64..8, any::<u64>()],
    ) {
        if let Ok(lines) = split_lines(&text, expected) {
            prop_assert_eq!(lines.len() as u64, expected);
            prop_assert_eq!(count_lines(&text), Ok(expected));
            let joined: Vec<u8> = lines.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect();
            prop_assert_eq!(&joined, &text);
        }
        let vlen = Strings::from_lines(blob(&text), expected).vlen();
        if let Ok(bytes) = vlen.bytes() {
            prop_assert_eq!(decode_vlen(bytes.as_slice(), expected).unwrap().len() as u64, expected);
        }
    }

    #[test]
    fn source_paths_parse_or_are_refused(
        parts in prop::collection::vec(
            prop::sample::select(vec!["a", "/", ".daf.zip", ".dafs.zip", ".daf.zarr.zip", ".dafs.zarr.zip", "#", "#/", "..", "g", ".daf", ""]),
            0..8,
        ),
        raw in "\\PC{0,24}",
    ) {
        for arg in [parts.concat(), raw] {
            if let Ok(SourceSpec::Zip { group: Some(group), multi, .. }) = parse_source(&arg) {
                prop_assert!(multi);
                prop_assert!(!group.is_empty() && !group.starts_with('/') && !group.ends_with('/'));
            }
        }
    }

    #[test]
    fn the_name_check_refuses_every_escape(name in "\\PC{0,6}|[./\\x00\\n]{0,4}|.{0,4}") {
        if check_name(&name).is_none() {
            prop_assert!(!name.is_empty() && name != "." && name != "..");
            prop_assert!(!name.contains('/') && !name.contains('\0'));
            prop_assert!(!name.chars().any(char::is_control));
            prop_assert!(Path::new(&name).components().count() == 1);
        }
    }
}

// Regressions: inputs the targets above found (or that the issue reported) before the fixes.

/// Found by `vlen_decodes_only_what_it_can_round_trip` without the count check: a forged count
/// of ~2^32 items made `decode_vlen` allocate 25 GB and abort the process.
#[test]
fn regression_vlen_forged_count_is_refused_before_allocating() {
    let mut data = encode_vlen([&b"a"[..]].into_iter(), 1);
    data[..4].copy_from_slice(&0xF000_0000u32.to_le_bytes());
    let err = decode_vlen(&data, 0xF000_0000).unwrap_err();
    assert!(err.contains("cannot hold"), "{err}");
}

fn open_zarray(doc: &str, chunks: &[(&str, &[u8])]) -> Result<Vec<u8>, String> {
    let mut files = vec![("arr/.zarray".to_string(), doc.as_bytes().to_vec())];
    files.extend(chunks.iter().map(|(k, v)| (format!("arr/{k}"), v.to_vec())));
    let array = open_array(&index(&files), "arr").map_err(|e| e.to_string())?;
    let bytes = array.blob.bytes().map_err(|e| e.to_string())?;
    Ok(bytes.as_slice().to_vec())
}

/// The issue's `.zarray` with shape 2^40 and chunks [1]: opening it enumerated the chunk grid
/// (the mount grew by 1 GB/s). It must open at once and fail to decode without allocating.
#[test]
fn regression_huge_grid_is_never_enumerated() {
    let started = std::time::Instant::now();
    let doc = r#"{"zarr_format":2,"shape":[1099511627776],"chunks":[1],"dtype":"<f8","compressor":{"id":"zlib"},"order":"C","filters":null,"fill_value":null}"#;
    let err = open_zarray(doc, &[("0", b"x")]).unwrap_err();
    assert!(err.contains("limit"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}

/// Shapes whose element count overflows a u64 (a debug-build panic, a wrapped size in release).
#[test]
fn regression_overflowing_shapes_are_refused() {
    for shape in [
        "[1099511627776,1099511627776]",
        "[18446744073709551615,2]",
        "[4611686018427387904]",
    ] {
        let doc = format!(
            r#"{{"zarr_format":2,"shape":{shape},"chunks":[1,1],"dtype":"<f8","compressor":null,"order":"C","filters":null,"fill_value":null}}"#
        )
        .replace("\"chunks\":[1,1]", if shape.contains(',') { "\"chunks\":[1,1]" } else { "\"chunks\":[1]" });
        let err = open_zarray(&doc, &[]).unwrap_err();
        assert!(err.contains("too many elements"), "{shape}: {err}");
    }
}

/// A chunk shape far larger than the array: its decoded size is checked before decompressing.
#[test]
fn regression_chunk_larger_than_the_limit_is_refused() {
    let doc = r#"{"zarr_format":2,"shape":[3],"chunks":[1099511627776],"dtype":"<f4","compressor":{"id":"lz4"},"order":"C","filters":null,"fill_value":null}"#;
    let mut lz4 = u32::MAX.to_le_bytes().to_vec();
    lz4.extend([0u8; 8]);
    let err = open_zarray(doc, &[("0", &lz4)]).unwrap_err();
    assert!(err.contains("limit"), "{err}");
}
