use super::*;

const H5DF: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/h5df");

fn open(name: &str) -> Result<Vec<NamedDataset>, FormatError> {
    open_h5df(
        Path::new(&format!("{H5DF}/{name}")),
        None,
        name.ends_with(".h5dfs"),
    )
    .map(|(_, datasets)| datasets)
}

#[test]
fn tiny_reads_in_both_file_structures_with_flat_payloads_mapped() {
    for name in ["tiny.h5df", "tiny-sb0.h5df"] {
        let datasets = open(name).unwrap();
        assert_eq!(datasets.len(), 1);
        let ds = &datasets[0].dataset;
        assert_eq!(datasets[0].name, name.trim_end_matches(".h5df"));
        assert_eq!(datasets[0].target.format, Format::H5df { packed: false });
        assert_eq!(
            ds.scalars["title"].scalar.files_json(),
            "{\"value\":\"hello\",\"type\":\"String\"}\n"
        );
        assert_eq!(ds.axes["cell"].len(), 3);
        assert_eq!(
            ds.axes["cell"].entries.lines().bytes().unwrap().as_slice(),
            b"c1\nc2\nc3\n"
        );
        let Payload::Dense { eltype, data } = &ds.vectors["cell"]["score"].payload else {
            panic!("{name}: score is not dense")
        };
        assert_eq!(*eltype, NumType::Float32);
        let bytes = data.bytes().unwrap();
        assert!(bytes.is_mapped(), "{name}: score is not a range of the map");
        assert_eq!(
            bytes.as_slice(),
            [0, 0, 0xc0, 0x3f, 0, 0, 0, 0x40, 0, 0, 0, 0xbf]
        );
        assert!(matches!(
            ds.vectors["cell"]["is_marker"].payload,
            Payload::Sparse(ref s) if s.nzval.is_none()
        ));
        assert_eq!(ds.matrices[&("cell".into(), "gene".into())].len(), 2);
    }
}

#[test]
fn packed_codecs_decode_to_the_flat_bytes() {
    let flat = open("packed-flat.h5df").unwrap().remove(0);
    for codec in [
        "gzip",
        "gzip_shuffle",
        "zstd",
        "zstd-sb0",
        "blosc_lz4",
        "blosc_zstd",
        "zstd_bitshuffle",
    ] {
        let packed = open(&format!("packed-{codec}.h5df")).unwrap().remove(0);
        assert_eq!(
            packed.target.format,
            Format::H5df { packed: true },
            "{codec}"
        );
        let want: Vec<_> = flat.dataset.properties().collect();
        let got: Vec<_> = packed.dataset.properties().collect();
        assert_eq!(want.len(), got.len(), "{codec}");
        for (w, g) in want.iter().zip(&got) {
            assert_eq!(w.path, g.path, "{codec}");
            let blobs = |p: &Payload| -> Vec<Arc<Blob>> {
                match p {
                    Payload::Dense { data, .. } => vec![data.clone()],
                    Payload::Sparse(s) => {
                        let mut v = match &s.index {
                            SparseIndex::Vector { nzind } => vec![nzind.clone()],
                            SparseIndex::Matrix { colptr, rowval } => {
                                vec![colptr.clone(), rowval.clone()]
                            }
                        };
                        v.extend(s.nzval.clone());
                        v
                    }
                    _ => vec![],
                }
            };
            for (wb, gb) in blobs(&w.property.payload)
                .iter()
                .zip(blobs(&g.property.payload))
            {
                let len = wb.len().unwrap();
                assert_eq!(gb.len().unwrap(), len, "{codec} {}", w.path);
                assert_eq!(
                    gb.read_range(0, len).unwrap().as_slice(),
                    wb.bytes().unwrap().as_slice(),
                    "{codec} {}",
                    w.path
                );
            }
        }
    }
}

#[test]
fn hostile_files_are_refused_with_one_line() {
    for (name, message) in [
        ("nodaf.h5df", "no 'daf' version dataset"),
        ("version-2-0.h5df", "unsupported H5df version 2.0"),
        ("signed-version.h5df", "not two unsigned integers"),
        ("truncated.h5df", "not a readable HDF5 file"),
        ("garbage.h5df", "not a readable HDF5 file"),
        ("empty-file.h5df", "not a readable HDF5 file"),
    ] {
        let err = open(name).unwrap_err().to_string();
        assert!(err.contains(message), "{name}: {err}");
        assert!(!err.contains('\n'), "{name}: {err}");
    }
}

#[test]
fn hostile_properties_are_skipped_and_the_rest_reads() {
    let ds = open("huge-claim.h5df").unwrap().remove(0).dataset;
    assert!(!ds.axes.contains_key("big"));
    assert!(!ds.vectors.contains_key("big"));
    assert_eq!(ds.vectors["cell"].len(), 4);
    let ds = open("shape-mismatch.h5df").unwrap().remove(0).dataset;
    assert!(!ds.vectors["cell"].contains_key("score"));
    assert_eq!(ds.vectors["cell"].len(), 3);
    let ds = open("matrix-shape-mismatch.h5df")
        .unwrap()
        .remove(0)
        .dataset;
    assert!(!ds.matrices[&("cell".into(), "gene".into())].contains_key("expr"));
    let ds = open("bad-chunk.h5df").unwrap().remove(0).dataset;
    let Payload::Dense { data, .. } = &ds.vectors["cell"]["score"].payload else {
        panic!("score is not dense")
    };
    // Chunk 3 (1024 Float64 each) fails; chunk 0 still reads.
    assert!(data.read_range(3 * 8192, 8).is_err());
    assert_eq!(data.read_range(0, 8).unwrap().len(), 8);
}

#[test]
fn multi_files_list_every_daf_group() {
    for name in ["multi.h5dfs", "multi-sb0.h5dfs"] {
        let names: Vec<String> = open(name).unwrap().into_iter().map(|d| d.name).collect();
        assert_eq!(names, ["julia", "more/tiny"], "{name}");
        let (_, one) = open_h5df(
            Path::new(&format!("{H5DF}/{name}")),
            Some("more/tiny"),
            true,
        )
        .unwrap();
        assert_eq!(one[0].name, "tiny");
        let err = open_h5df(Path::new(&format!("{H5DF}/{name}")), Some("notes"), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no 'daf' version dataset"), "{err}");
    }
}

#[test]
fn foreign_writers_enums_and_padded_strings_read_as_hdf5_jl_reads_them() {
    use hdf5_metno::types::{FixedAscii, VarLenUnicode};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign.h5df");
    {
        let file = hdf5_metno::File::create(&path).unwrap();
        let daf = file.new_dataset::<u8>().shape([2]).create("daf").unwrap();
        daf.write_raw(&[1u8, 0]).unwrap();
        let scalars = file.create_group("scalars").unwrap();
        let padded = scalars
            .new_dataset::<FixedAscii<8>>()
            .create("padded")
            .unwrap();
        padded
            .write_scalar(&FixedAscii::<8>::from_ascii(b"abc").unwrap())
            .unwrap();
        let entries: Vec<VarLenUnicode> =
            ["a", "b", "c"].iter().map(|s| s.parse().unwrap()).collect();
        let axes = file.create_group("axes").unwrap();
        let cell = axes
            .new_dataset::<VarLenUnicode>()
            .shape([3])
            .create("cell")
            .unwrap();
        cell.write_raw(&entries).unwrap();
        let vectors = file
            .create_group("vectors")
            .unwrap()
            .create_group("cell")
            .unwrap();
        // The hdf5 crate, like h5py, writes bool as an enum of int8 (FALSE, TRUE).
        let flag = vectors
            .new_dataset::<bool>()
            .shape([3])
            .create("flag")
            .unwrap();
        flag.write_raw(&[true, false, true]).unwrap();
    }
    let ds = open_h5df(&path, None, false).unwrap().1.remove(0).dataset;
    assert_eq!(
        ds.scalars["padded"].scalar.files_json(),
        "{\"value\":\"abc\",\"type\":\"String\"}\n"
    );
    let Payload::Dense { eltype, data } = &ds.vectors["cell"]["flag"].payload else {
        panic!("flag is not dense")
    };
    assert_eq!(*eltype, NumType::Int8);
    assert_eq!(data.bytes().unwrap().as_slice(), [1, 0, 1]);
}

#[test]
fn a_group_cycle_ends_the_search_for_daf_groups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cycle.h5dfs");
    {
        let file = hdf5_metno::File::create(&path).unwrap();
        let a = file.create_group("a").unwrap();
        // A hard link to the root inside `a`: /a/up is /, /a/up/a/up is / again, ...
        a.link_hard("/", "up").unwrap();
    }
    let err = open_h5df(&path, None, true).unwrap_err().to_string();
    assert!(err.contains("no Daf group"), "{err}");
}
