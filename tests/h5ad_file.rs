//! `NAME.h5ad` (`--h5ad`) through real mounts: its exact size before the first read, a commit
//! through a writable view shows in it (a new obs column), it refuses changes with `EROFS`; the
//! command line: one selection shared with `--anndata`, a refusal or usage error in one line and
//! nothing mounted. The values and the foreign readers (anndata in memory and backed, h5py,
//! scanpy, h5dump) are `tests/interop/test_h5ad.py`'s.

mod common;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use common::{change_refusals, copy_fixture, io_timeout, run_mount, TestMount, VECTORS};
use daf_mount::core::DafFs;
use daf_mount::formats::source::open_source;
use daf_mount::staging::StagingArea;
use daf_mount::views::anndata::Request;
use daf_mount::views::{ViewOptions, ViewSelection};

/// A read-write mount of `source` with the h5ad files of `selection`.
fn writable_mount(source: &Path, selection: &str) -> TestMount {
    let source = source.to_str().unwrap();
    let opened = open_source(source).unwrap();
    let staging = StagingArea::for_source(&opened.path);
    let options = ViewOptions {
        h5ad: Some(Request::parse(selection).unwrap()),
        ..ViewOptions::from(ViewSelection::Both)
    };
    let core = DafFs::with_staging(
        opened.datasets,
        options,
        SystemTime::UNIX_EPOCH,
        Some(staging),
    );
    TestMount::serving(Arc::new(core), true, source)
}

/// The obs columns of an h5ad image (its `obs` group's `column-order`).
fn obs_columns(image: &[u8]) -> Vec<String> {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("x.h5ad");
    fs::write(&path, image).unwrap();
    let h5 = hdf5_metno::File::open(&path).unwrap();
    let order: Vec<hdf5_metno::types::VarLenUnicode> = h5
        .group("obs")
        .unwrap()
        .attr("column-order")
        .unwrap()
        .read_raw()
        .unwrap();
    order.iter().map(|s| s.as_str().to_string()).collect()
}

#[test]
fn a_committed_vector_shows_in_the_h5ad_file_which_is_read_only() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let m = writable_mount(&source, "cell:gene:expr");
    let (h5ad, view) = (m.join("files_v1_0.h5ad"), m.join("files_v1_0.daf"));
    let (size, before, after, refusals) = io_timeout(&m.path, move || {
        let size = fs::metadata(&h5ad).unwrap().len();
        let before = fs::read(&h5ad).unwrap();
        fs::write(
            view.join("vectors/cell/added.json"),
            b"{\"format\":\"dense\",\"eltype\":\"Int32\"}\n",
        )
        .unwrap();
        let values: Vec<u8> = [1i32, 2, 3].iter().flat_map(|v| v.to_le_bytes()).collect();
        fs::write(view.join("vectors/cell/added.data"), values).unwrap();
        let after = fs::read(&h5ad).unwrap();
        let refusals = change_refusals(&h5ad);
        let truncated = fs::File::open(&h5ad).and_then(|f| f.set_len(0));
        (size, before, after, (refusals, truncated.is_err()))
    });
    assert_eq!(size, before.len() as u64, "st_size before the first read");
    let (refusals, truncation_refused) = refusals;
    assert_eq!(refusals, [Some(libc::EROFS); 3]);
    assert!(truncation_refused, "truncating the h5ad file");
    let columns = obs_columns(&before);
    assert!(!columns.contains(&"added".to_string()), "{columns:?}");
    let columns = obs_columns(&after);
    assert!(columns.contains(&"added".to_string()), "{columns:?}");
}

#[test]
fn the_command_line_shares_one_selection_with_the_anndata_view() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let tiny = format!("{VECTORS}/files_v1_0.daf");
    // A selection that cannot be decided: refused with one line, nothing mounted.
    let (code, stderr, listed) = run_mount(&[&tiny, m, "--h5ad"], &mnt);
    assert_eq!((code, listed), (1, None), "{stderr}");
    assert!(
        stderr.starts_with("daf-mount: files_v1_0: --anndata: cannot choose obs and var")
            && stderr.lines().count() == 1,
        "{stderr}"
    );
    // Two different selections: a usage error.
    let args = [
        &tiny,
        m,
        "--anndata",
        "cell:gene:expr",
        "--h5ad",
        "gene:cell:expr",
    ];
    let (code, stderr, listed) = run_mount(&args, &mnt);
    assert_eq!((code, listed), (2, None), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    // The h5ad file alone, with its own selection; or both, the bare option taking the other's.
    let alone = ["files_v1_0.daf", "files_v1_0.daf.zarr", "files_v1_0.h5ad"];
    let both = [
        "files_v1_0.anndata.zarr",
        "files_v1_0.daf",
        "files_v1_0.daf.zarr",
        "files_v1_0.h5ad",
    ];
    let mounts: [(&[&str], &[&str]); 3] = [
        (&[&tiny, m, "-o", "ro", "--h5ad", "cell:gene:expr"], &alone),
        (&[&tiny, m, "-o", "ro,h5ad=cell:gene:expr"], &alone),
        (&[&tiny, m, "--anndata", "cell:gene:expr", "--h5ad"], &both),
    ];
    for (args, names) in mounts {
        let (code, stderr, listed) = run_mount(args, &mnt);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        assert_eq!(listed, Some(names), "{args:?}");
    }
}

#[test]
fn the_file_is_made_on_first_need_and_reads_the_same_at_every_range() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let m = writable_mount(&source, "gene:cell:umis");
    let h5ad = m.join("files_v1_0.h5ad");
    let (whole, pieces) = io_timeout(&m.path, move || {
        let whole = fs::read(&h5ad).unwrap();
        let file = fs::File::open(&h5ad).unwrap();
        let mut pieces = Vec::new();
        for step in [1usize, 7, 4096, 65536] {
            let mut out = Vec::new();
            let mut buf = vec![0u8; step];
            let mut at = 0u64;
            loop {
                let n = std::os::unix::fs::FileExt::read_at(&file, &mut buf, at).unwrap();
                if n == 0 {
                    break;
                }
                out.extend_from_slice(&buf[..n]);
                at += n as u64;
            }
            pieces.push(out);
        }
        (whole, pieces)
    });
    assert_eq!(&whole[..8], b"\x89HDF\r\n\x1a\n");
    for piece in pieces {
        assert!(piece == whole);
    }
}
