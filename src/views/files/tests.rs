//! Tests of the FilesDaf view's versions: the forms each version shows and its `metadata.json`.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::formats::files::read_files_daf;
use crate::stores::dir::open_directory;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures");

fn dataset(rel: &str) -> Dataset {
    let root = Path::new(FIXTURES).join(rel);
    read_files_daf(&open_directory(&root).unwrap(), &root).unwrap()
}

/// The view's files (path → content), without directories.
fn files(dataset: &Dataset, version: FilesVersion) -> BTreeMap<String, String> {
    files_view(dataset, "", version)
        .into_iter()
        .filter_map(|e| match e.node {
            ViewNode::File(blob) => Some((
                e.path,
                String::from_utf8_lossy(blob.bytes().unwrap().as_slice()).into_owned(),
            )),
            ViewNode::Dir => None,
        })
        .collect()
}

#[test]
fn the_default_version_is_1_1_for_data_sets_of_dataaxesformats_0_3() {
    let current = |rel: &str| {
        let source = crate::formats::source::open_source(&format!("{FIXTURES}/{rel}")).unwrap();
        crate::views::is_current(&source.datasets[0])
    };
    assert!(!current("vectors/files_v1_0.daf"));
    assert!(!current("vectors/zarr_v2.daf.zarr"));
    assert!(current("vectors/files_v1_1.daf"));
    assert!(current("vectors/zarr_v3.daf.zarr.zip"));
    assert!(current("julia-filesdaf-1.1"));
}

#[test]
fn a_1_0_source_seen_as_1_1_gets_the_1_1_forms_and_an_index() {
    let view = files(&dataset("vectors/files_v1_0.daf"), FilesVersion::V1_1);
    assert_eq!(view["daf.json"], "{\"version\":[1,1]}\n");
    assert_eq!(
        view["scalars/ratio.json"],
        "{\"type\":\"Float64\",\"value\":2.5}\n"
    );
    assert_eq!(
        view["vectors/cell/counts.json"],
        "{\"format\":\"sparse\",\"nzind\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":2},\"nzval\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":2}}\n"
    );
    // Flat dense descriptors fit both versions: the source's own bytes.
    assert_eq!(
        view["vectors/cell/score.json"],
        "{\"format\":\"dense\",\"eltype\":\"Float32\"}\n"
    );
    let index = &view["metadata.json"];
    assert!(index.starts_with("{\"axes/cell\":{\"format\":\"axis\",\"n_entries\":3},"));
    assert!(index.contains(",\"scalars/ratio\":{\"type\":\"Float64\",\"value\":2.5},"));
    assert!(index.ends_with('}'));
}

#[test]
fn a_1_1_source_seen_as_1_0_gets_the_1_0_forms_and_no_index() {
    let view = files(&dataset("vectors/files_v1_1.daf"), FilesVersion::V1_0);
    assert_eq!(view["daf.json"], "{\"version\":[1,0]}\n");
    assert_eq!(
        view["scalars/ratio.json"],
        "{\"value\":2.5,\"type\":\"Float64\"}\n"
    );
    assert_eq!(
        view["matrices/cell/gene/umis.json"],
        "{\"format\":\"sparse\",\"eltype\":\"UInt16\",\"indtype\":\"Int64\"}\n"
    );
    assert_eq!(
        view["vectors/cell/is_marker.json"],
        "{\"format\":\"sparse\",\"eltype\":\"Bool\",\"indtype\":\"Int64\"}\n"
    );
    assert!(!view.contains_key("metadata.json"));
}

#[test]
fn a_1_1_view_of_a_1_1_source_serves_its_documents_and_indexes_them_in_rebuild_order() {
    let root = Path::new(FIXTURES).join("vectors/files_v1_1.daf");
    let view = files(&dataset("vectors/files_v1_1.daf"), FilesVersion::V1_1);
    for doc in ["daf.json", "scalars/title.json", "vectors/cell/counts.json"] {
        assert_eq!(
            view[doc],
            std::fs::read_to_string(root.join(doc)).unwrap(),
            "{doc}"
        );
    }
    // §3.5 rebuild order (the fixture's own file is in append order).
    assert_eq!(
        view["metadata.json"],
        concat!(
            "{\"axes/cell\":{\"format\":\"axis\",\"n_entries\":3},",
            "\"axes/gene\":{\"format\":\"axis\",\"n_entries\":2},",
            "\"scalars/ratio\":{\"type\":\"Float64\",\"value\":2.5},",
            "\"scalars/title\":{\"type\":\"String\",\"value\":\"hello\"},",
            "\"vectors/cell/counts\":{\"format\":\"sparse\",\"nzind\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":2},\"nzval\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":2}},",
            "\"vectors/cell/is_marker\":{\"format\":\"sparse\",\"nzind\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":1}},",
            "\"vectors/cell/score\":{\"format\":\"dense\",\"eltype\":\"Float32\"},",
            "\"vectors/cell/type\":{\"format\":\"dense\",\"eltype\":\"String\"},",
            "\"matrices/cell/gene/expr\":{\"format\":\"dense\",\"eltype\":\"Float64\"},",
            "\"matrices/cell/gene/umis\":{\"format\":\"sparse\",\"colptr\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":3},\"rowval\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":3},\"nzval\":{\"format\":\"dense\",\"eltype\":\"UInt16\",\"n_elements\":3}}}"
        )
    );
    // The same keys and values as the fixture's own index.
    let ours: serde_json::Value = serde_json::from_str(&view["metadata.json"]).unwrap();
    let theirs: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(ours, theirs);
}

#[test]
fn the_julia_fixture_s_index_is_what_the_view_synthesises() {
    let root = Path::new(FIXTURES).join("julia-filesdaf-1.1");
    let view = files(&dataset("julia-filesdaf-1.1"), FilesVersion::V1_1);
    assert_eq!(
        view["metadata.json"],
        std::fs::read_to_string(root.join("metadata.json")).unwrap()
    );
}
