//! The H5df file of every source kind, read back by daf-mount's own H5df reader (libhdf5): its
//! FilesDaf view equals the original's file by file; and upstream's layout checked in it.

use super::*;
use crate::formats::json::FilesVersion;
use crate::formats::source::{open_source, Format};
use crate::stores::blob::RangeSource;
use crate::views::{view_entries, ViewKind, ViewNode, ViewRoot};

const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");
const PACKED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");
const H5DF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/h5df");

/// The FilesDaf 1.0 view of `ds`: path → content.
fn files_view(ds: &Dataset) -> Vec<(String, Vec<u8>)> {
    let root = ViewRoot {
        dataset: 0,
        kind: ViewKind::Files,
        format: Format::Files(FilesVersion::V1_0),
        mount: String::new(),
        canonical: "x.daf".into(),
        dimension_names: false,
        anndata: None,
    };
    view_entries(ds, &root)
        .into_iter()
        .filter_map(|e| match e.node {
            ViewNode::File(blob) => Some((e.path, blob.bytes().unwrap().as_slice().to_vec())),
            ViewNode::Dir => None,
        })
        .collect()
}

/// The H5df file of every data set of `source`, written to disk and opened again as an H5df
/// source: the same FilesDaf view.
fn round_trip(source: &str) {
    let opened = open_source(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    let tmp = tempfile::tempdir().unwrap();
    for ds in &opened.datasets {
        let file = h5df_file(ds);
        let size = file.size().unwrap_or_else(|e| panic!("{source}: {e}"));
        let image = file.read_range(0, size).unwrap();
        let path = tmp
            .path()
            .join(format!("{}.h5df", ds.name.replace('/', "_")));
        std::fs::write(&path, image.as_slice()).unwrap();
        let again = open_source(path.to_str().unwrap()).unwrap();
        assert_eq!(again.datasets.len(), 1);
        let (want, got) = (
            files_view(&ds.dataset),
            files_view(&again.datasets[0].dataset),
        );
        let names = |v: &[(String, Vec<u8>)]| v.iter().map(|e| e.0.clone()).collect::<Vec<_>>();
        assert_eq!(names(&got), names(&want), "{source}: {}", ds.name);
        for ((path, a), (_, b)) in want.iter().zip(&got) {
            assert!(a == b, "{source}: {}: {path} differs", ds.name);
        }
    }
}

#[test]
fn every_source_kind_round_trips_through_its_h5df_file() {
    for source in [
        "files_v1_0.daf",
        "files_v1_1.daf",
        "zarr_v2.daf.zarr",
        "zarr_v3.daf.zarr",
        "zarr_v2.daf.zarr.zip",
        "zarr_v3.daf.zarr.zip",
        "zipdaf_v1_0.daf.zip",
        "zipdaf_v1_1.daf.zip",
        "multi_v1_1.dafs.zip",
    ] {
        round_trip(&format!("{VECTORS}/{source}"));
    }
    for source in [
        "files_packed.daf",
        "zarr_packed.daf.zarr",
        "zarr_packed.daf.zarr.zip",
        "zipdaf_packed.daf.zip",
        "foreign_v3.daf.zarr",
    ] {
        round_trip(&format!("{PACKED}/{source}"));
    }
    for source in ["tiny.h5df", "edge.h5df", "packed-zstd.h5df", "multi.h5dfs"] {
        round_trip(&format!("{H5DF}/{source}"));
    }
}

#[test]
fn the_layout_is_upstreams() {
    use hdf5_metno::types::VarLenUnicode;
    let opened = open_source(&format!("{H5DF}/tiny.h5df")).unwrap();
    let file = h5df_file(&opened.datasets[0]);
    let image = file.read_range(0, file.size().unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tiny.h5df");
    std::fs::write(&path, image.as_slice()).unwrap();
    let h5 = hdf5_metno::File::open(&path).unwrap();
    assert_eq!(h5.dataset("daf").unwrap().read_raw::<u8>().unwrap(), [1, 0]);
    let mut members = h5.member_names().unwrap();
    members.sort();
    assert_eq!(members, ["axes", "daf", "matrices", "scalars", "vectors"]);
    // Every ordered pair of axes has its group.
    for pair in ["cell/cell", "cell/gene", "gene/cell", "gene/gene"] {
        assert!(h5.group(&format!("matrices/{pair}")).is_ok(), "{pair}");
    }
    let title = h5.dataset("scalars/title").unwrap();
    assert_eq!(title.shape(), Vec::<usize>::new());
    assert_eq!(title.dtype().unwrap().size(), 5);
    let ratio = h5.dataset("scalars/ratio").unwrap();
    assert_eq!(ratio.read_scalar::<f64>().unwrap(), 2.5);
    let cells: Vec<VarLenUnicode> = h5.dataset("axes/cell").unwrap().read_raw().unwrap();
    assert_eq!(
        cells.iter().map(|c| c.as_str()).collect::<Vec<_>>(),
        ["c1", "c2", "c3"]
    );
    let expr = h5.dataset("matrices/cell/gene/expr").unwrap();
    assert_eq!(expr.shape(), [2, 3]);
    assert_eq!(
        expr.read_raw::<f64>().unwrap(),
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    // Flat payloads contiguous and 8-byte aligned, their bytes the source's.
    for name in [
        "matrices/cell/gene/expr",
        "vectors/cell/score",
        "matrices/cell/gene/umis/colptr",
    ] {
        let ds = h5.dataset(name).unwrap();
        assert!(!ds.is_chunked(), "{name}");
        assert_eq!(ds.offset().unwrap() % 8, 0, "{name}");
    }
    let marker = h5.group("vectors/cell/is_marker").unwrap();
    assert_eq!(marker.member_names().unwrap(), ["nzind"]);
    let umis = h5.group("matrices/cell/gene/umis").unwrap();
    let mut parts = umis.member_names().unwrap();
    parts.sort();
    assert_eq!(parts, ["colptr", "nzval", "rowval"]);
}

#[test]
fn bools_are_bitfields_and_empty_datasets_have_no_address() {
    let opened = open_source(&format!("{H5DF}/edge.h5df")).unwrap();
    let file = h5df_file(&opened.datasets[0]);
    let image = file.read_range(0, file.size().unwrap()).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("edge.h5df");
    std::fs::write(&path, image.as_slice()).unwrap();
    let h5 = hdf5_metno::File::open(&path).unwrap();
    let bools = h5.dataset("vectors/cell/v_bool").unwrap();
    assert!(crate::sys::hdf5_is_bitfield(&bools.dtype().unwrap()));
    let empty = h5.dataset("axes/empty").unwrap();
    assert_eq!((empty.shape(), empty.offset()), (vec![0], None));
    let e_m = h5.dataset("matrices/empty/cell/e_m_f32").unwrap();
    assert_eq!((e_m.shape(), e_m.offset()), (vec![300, 0], None));
}
