//! Serving a mount over HTTP (doc/user-guide.md "Serving a mount over HTTP"): a real nginx on 127.0.0.1
//! serves the mount point of a read-only mount, and every file of both views comes back over
//! HTTP byte for byte, with the mount's sizes, ranges and a 404 for what the mount lacks.
//! zarr-python reading these URLs is tests/interop/test_serving.py.

mod common;

use common::http::{get, request, Nginx};
use common::{io_deadline, read_tree, TestMount, VECTORS};
use daf_mount::core::DafFs;
use daf_mount::formats::source::{open_source, Format};
use daf_mount::views::{ViewOptions, ViewSelection};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

/// A read-only mount of `source` with both views, the Zarr view in `zarr`.
fn mount(source: &str, zarr: Format) -> TestMount {
    let opened = open_source(source).unwrap_or_else(|e| panic!("{source}: {e}"));
    let options = ViewOptions {
        selection: ViewSelection::Both,
        zarr: Some(zarr),
        files: None,
        zip: false,
        h5df: false,
        h5ad: None,
        dimension_names: false,
        anndata: None,
    };
    let core = DafFs::with_staging(opened.datasets, options, SystemTime::UNIX_EPOCH, None);
    TestMount::serving(Arc::new(core), false, source)
}

/// Mounts `fixture` read-only, serves the mount point with nginx, and checks every file of the
/// mount against its URL: whole GET, HEAD's Content-Length, and a range in the middle.
fn serve_and_compare(fixture: &str, zarr: Format, must_have: &[&str]) {
    let source = format!("{VECTORS}/{fixture}");
    let mount = mount(&source, zarr);
    let (nginx, base) = Nginx::serve(&mount.path);
    let mnt = mount.path.clone();
    let tree = io_deadline(&mount.path, Duration::from_secs(60), move || {
        read_tree(&mnt)
    });
    for want in must_have {
        assert!(
            tree.contains_key(*want),
            "{want} not in the mount: {tree:?}"
        );
    }
    let mut files = 0;
    for (rel, bytes) in &tree {
        let Some(bytes) = bytes else { continue };
        files += 1;
        let url = format!("{base}/{rel}");
        let whole = get(&url, None);
        assert_eq!(whole.status, 200, "{rel}: {}", nginx.error_log());
        assert!(whole.body == *bytes, "{rel}: other bytes over HTTP");
        let head = request("HEAD", &url, &[]).unwrap();
        assert_eq!(
            head.header("content-length"),
            Some(bytes.len().to_string().as_str()),
            "{rel}"
        );
        if bytes.len() >= 3 {
            let (a, b) = (1, bytes.len() - 2);
            let part = get(&url, Some(&format!("bytes={a}-{b}")));
            assert_eq!(part.status, 206, "{rel}");
            assert!(part.body == bytes[a..=b], "{rel}: other bytes in a range");
        }
    }
    assert!(files > 10, "{fixture}: only {files} files served");
    assert_eq!(get(&format!("{base}/no-such-file"), None).status, 404);
    drop(nginx);
}

#[test]
fn nginx_serves_the_v2_view_of_a_mount_byte_for_byte() {
    require_fuse!();
    require_nginx!();
    serve_and_compare(
        "files_v1_0.daf",
        Format::ZarrV2,
        &[
            "files_v1_0.daf.zarr/.zmetadata",
            "files_v1_0.daf.zarr/matrices/cell/gene/expr/.zarray",
            "files_v1_0.daf/daf.json",
        ],
    );
}

#[test]
fn nginx_serves_the_v3_view_of_a_mount_byte_for_byte() {
    require_fuse!();
    require_nginx!();
    serve_and_compare(
        "zarr_v3.daf.zarr.zip",
        Format::ZarrV3,
        &["zarr_v3.daf.zarr/zarr.json", "zarr_v3.daf/daf.json"],
    );
}
