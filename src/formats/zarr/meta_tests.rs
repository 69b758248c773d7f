//! The typed reading of metadata documents gives what the general reading gives, for every
//! document it accepts: on the fixtures, the packed test data and generated documents.

use super::*;
use crate::formats::zarr::v2::parse_zarray_value;
use crate::formats::zarr::v3::parse_array;
use proptest::prelude::*;
use std::path::Path;

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");
const PACKED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");

/// `Some(accepted)` when the typed reading of a `.zarray` agrees with the general one.
fn zarray_agrees(bytes: &[u8]) -> Result<bool, String> {
    let general = parse_zarray_value(bytes);
    match zarray_layout(bytes) {
        None => Ok(false),
        Some(fast) if general.as_ref() == Ok(&fast) => Ok(true),
        Some(fast) => Err(format!("typed {fast:?}, general {general:?}")),
    }
}

/// Likewise for a `zarr.json`: a group both ways, or the same layout.
fn node_agrees(bytes: &[u8]) -> Result<bool, String> {
    let general = serde_json::from_slice::<Value>(bytes).map_err(|e| e.to_string());
    let group = general.as_ref().is_ok_and(|meta| {
        meta.get("node_type").and_then(Value::as_str) == Some("group")
            && meta.get("zarr_format").and_then(Value::as_u64) == Some(3)
    });
    let layout = general.and_then(|meta| parse_array(&meta));
    match v3_node(bytes) {
        None => Ok(false),
        Some(V3Node::Group) if group => Ok(true),
        Some(V3Node::Array(fast)) if !group => match &layout {
            Ok(v3)
                if v3.layout == fast.layout
                    && v3.prefix == fast.prefix
                    && v3.sharded == fast.sharded =>
            {
                Ok(true)
            }
            _ => Err(format!(
                "typed {:?}, general {:?}",
                fast.layout,
                layout.map(|l| l.layout)
            )),
        },
        Some(_) => Err("group-ness differs".into()),
    }
}

fn documents(dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            documents(&path, out);
        } else if let Some(name @ (".zarray" | "zarr.json")) =
            path.file_name().and_then(|n| n.to_str())
        {
            out.push((name.to_string(), std::fs::read(&path).unwrap()));
        }
    }
}

#[test]
fn the_typed_reading_agrees_on_every_fixture_document() {
    let mut docs = Vec::new();
    documents(Path::new(VECTORS), &mut docs);
    documents(Path::new(PACKED), &mut docs);
    let (mut zarrays, mut nodes) = (0, 0);
    for (name, bytes) in &docs {
        let text = String::from_utf8_lossy(bytes);
        if name == ".zarray" {
            zarrays += usize::from(zarray_agrees(bytes).unwrap_or_else(|e| panic!("{text}: {e}")));
        } else {
            nodes += usize::from(node_agrees(bytes).unwrap_or_else(|e| panic!("{text}: {e}")));
        }
    }
    // Most documents are read the fast way (not all: sharded arrays are not).
    assert!(
        zarrays >= 10 && nodes >= 20,
        "{zarrays} .zarray, {nodes} zarr.json"
    );
}

#[test]
fn documents_the_typed_reading_leaves_to_the_general_one() {
    let v2 = r#"{"dtype":"<f4","filters":null,"shape":[4],"order":"C","zarr_format":2,"chunks":[4],"fill_value":null,"compressor":null}"#;
    assert!(zarray_layout(v2.as_bytes()).is_some());
    for odd in [
        v2.replace(r#""shape":[4]"#, r#""shape":[4],"shape":[4]"#), // duplicated key
        v2.replace("<f4", "\\u003cf4"),                             // escaped string
        v2.replace(r#""order":"C""#, r#""order":"K""#),             // invalid
        v2.replace(r#""zarr_format":2"#, r#""zarr_format":"2""#),   // wrong type
    ] {
        assert!(zarray_layout(odd.as_bytes()).is_none(), "{odd}");
    }
    let v3 = r#"{"chunk_grid":{"configuration":{"chunk_shape":[4]},"name":"regular"},"chunk_key_encoding":{"configuration":{"separator":"/"},"name":"default"},"codecs":[{"configuration":{"endian":"little"},"name":"bytes"}],"data_type":"float32","fill_value":0.0,"node_type":"array","shape":[4],"zarr_format":3}"#;
    assert!(matches!(v3_node(v3.as_bytes()), Some(V3Node::Array(_))));
    let sharded = v3.replace(
        r#"[{"configuration":{"endian":"little"},"name":"bytes"}]"#,
        r#"[{"configuration":{},"name":"sharding_indexed"}]"#,
    );
    assert!(v3_node(sharded.as_bytes()).is_none());
    let separator = v3.replace(r#"{"separator":"/"}"#, r#"{"separator":1}"#);
    assert!(v3_node(separator.as_bytes()).is_none());
}

/// A JSON value among the forms a field may take: the first `good` of them valid (chosen four
/// times in five, so that many whole documents are valid), the rest not.
fn one_of(choices: &'static [&'static str], good: usize) -> impl Strategy<Value = &'static str> {
    let (valid, invalid) = choices.split_at(good);
    prop_oneof![4 => proptest::sample::select(valid), 1 => proptest::sample::select(invalid)]
}

fn zarray_doc() -> impl Strategy<Value = String> {
    (
        one_of(&["2", "3", "\"2\"", "2.0", "null"], 1),
        one_of(&["[4]", "[3,5]", "[]", "[0]", "[-1]", "\"4\"", "[4.5]"], 4),
        one_of(&["[4]", "[2]", "[3,5]", "[2,2]", "[0]"], 4),
        one_of(&["\"<f4\"", "\">i8\"", "\"|b1\"", "\"|O\"", "\"|u1\"", "\"<c8\"", "1"], 5),
        one_of(&["null", "[]", "[{\"id\":\"vlen-utf8\"}]", "[{\"id\":\"x\"}]", "[{}]", "{}"], 3),
        one_of(&["null", "{\"id\":\"zlib\",\"level\":1}", "{\"id\":\"nope\"}", "{}", "3"], 2),
        one_of(&["\"C\"", "\"F\"", "null", "\"K\"", "1"], 3),
        one_of(&["null", "0", "1.5", "\"NaN\"", "true", "-1", "\"\"", "[]", "1e400"], 6),
        one_of(&["", ",\"dimension_separator\":\"/\"", ",\"dimension_separator\":null", ",\"x\":[1,{}]", ",\"dimension_separator\":\"-\""], 4),
    )
        .prop_map(|(f, s, c, d, fl, co, o, fv, extra)| {
            format!(
                r#"{{"zarr_format":{f},"shape":{s},"chunks":{c},"dtype":{d},"filters":{fl},"compressor":{co},"order":{o},"fill_value":{fv}{extra}}}"#
            )
        })
}

fn node_doc() -> impl Strategy<Value = String> {
    (
        one_of(&["3", "2", "\"3\""], 1),
        one_of(&["\"array\"", "\"group\"", "null"], 1),
        one_of(&["[4]", "[3,5]", "[0]", "[]", "\"x\""], 3),
        one_of(&[
            r#"{"configuration":{"chunk_shape":[4]},"name":"regular"}"#,
            r#"{"configuration":{"chunk_shape":[2,5]},"name":"regular"}"#,
            r#"{"name":"regular"}"#,
            r#"{"configuration":{"chunk_shape":[4]},"name":"rectilinear"}"#,
            "null",
        ], 2),
        one_of(&["\"float32\"", "\"string\"", "\"uint8\"", "\"complex64\"", "{}"], 3),
        one_of(&[
            r#"{"configuration":{"separator":"/"},"name":"default"}"#,
            r#"{"configuration":{"separator":"."},"name":"v2"}"#,
            r#"{"name":"v2"}"#,
            r#"{"name":"default","configuration":null}"#,
            r#"{"configuration":{"separator":"-"},"name":"default"}"#,
            r#"{"name":"other"}"#,
        ], 4),
        one_of(&[
            r#"[{"configuration":{"endian":"little"},"name":"bytes"}]"#,
            r#"[{"name":"bytes"}]"#,
            r#"[{"configuration":{"endian":"big"},"name":"bytes"},{"name":"gzip","configuration":{"level":1}}]"#,
            r#"[{"name":"transpose","configuration":{"order":[1,0]}},{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd"},{"name":"crc32c"}]"#,
            r#"[{"name":"transpose","configuration":{"order":[0]}},{"name":"bytes","configuration":{"endian":"little"}}]"#,
            r#"[{"name":"vlen-utf8"}]"#,
            r#"[{"name":"zstd"},{"name":"bytes"}]"#,
            r#"[{"name":"blosc","configuration":{"cname":"lz4"}}]"#,
            r#"[]"#,
        ], 6),
        one_of(&["0", "0.0", "\"NaN\"", "\"0x7fc00000\"", "\"\"", "null", "true", "\"0x7f\""], 6),
        one_of(&["", r#","storage_transformers":[]"#, r#","attributes":{"daf":[1,0]}"#, r#","dimension_names":["a"]"#, r#","storage_transformers":[{}]"#], 4),
    )
        .prop_map(|(f, n, s, g, d, k, c, fv, extra)| {
            format!(
                r#"{{"zarr_format":{f},"node_type":{n},"shape":{s},"chunk_grid":{g},"data_type":{d},"chunk_key_encoding":{k},"codecs":{c},"fill_value":{fv}{extra}}}"#
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn the_typed_zarray_reading_agrees(doc in zarray_doc()) {
        prop_assert!(zarray_agrees(doc.as_bytes()).is_ok(), "{}: {:?}", doc, zarray_agrees(doc.as_bytes()));
    }

    #[test]
    fn the_typed_zarr_json_reading_agrees(doc in node_doc()) {
        prop_assert!(node_agrees(doc.as_bytes()).is_ok(), "{}: {:?}", doc, node_agrees(doc.as_bytes()));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A cache gives what a parse gives, for documents seen before or not, before and after it
    /// starts afresh (more distinct documents than it keeps), valid or not.
    #[test]
    fn the_cache_gives_what_a_parse_gives(
        zarrays in prop::collection::vec(zarray_doc(), 1..150),
        nodes in prop::collection::vec(node_doc(), 1..150),
        order in prop::collection::vec(any::<prop::sample::Index>(), 300),
    ) {
        let mut cache = MetaCache::new();
        for pick in &order {
            let doc = pick.get(&zarrays).as_bytes();
            prop_assert_eq!(cache.zarray_layout(doc), zarray_layout(doc));
            let doc = pick.get(&nodes).as_bytes();
            let (cached, parsed) = (cache.v3_node(doc), v3_node(doc));
            prop_assert_eq!(format!("{cached:?}"), format!("{parsed:?}"));
        }
        prop_assert!(cache.zarrays.len() <= CACHED_DOCUMENTS && cache.nodes.len() <= CACHED_DOCUMENTS);
    }
}
