//! Remote Zarr v3 sources without consolidated metadata, walked through the server's listing
//! (nginx `autoindex`, an S3 `ListObjectsV2` answered by the fault server, hostile HTML
//! indexes), and URLs with a query string (pre-signed / SAS): every request carries it, no
//! name or log line shows it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::fault_server::FaultServer;
use common::http::Nginx;
use common::VECTORS;
use common::{io_timeout, read_tree, start_foreground, TestMount, Tree, Unmount};
use daf_mount::core::DafFs;
use daf_mount::formats::remote::open_remote;
use daf_mount::formats::source::{open_source, Format, NamedDataset};
use daf_mount::stores::http::HttpOptions;
use daf_mount::views::{ViewOptions, ViewSelection};

const PACKED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");

fn quick() -> HttpOptions {
    HttpOptions {
        timeout: Duration::from_secs(10),
        ..HttpOptions::default()
    }
}

fn cp(from: &Path, to: &Path) {
    let status = Command::new("cp").arg("-r").arg(from).arg(to).status();
    assert!(status.unwrap().success());
    let status = Command::new("chmod").arg("-R").arg("u+w").arg(to).status();
    assert!(status.unwrap().success());
}

/// A served root holding `v3.daf.zarr` (the v3 fixture with the root's `consolidated_metadata`
/// removed and one array's chunk left out, as a writer leaves out a chunk of fill values) and
/// `foreign.daf.zarr` (a foreign v3 data set, never consolidated: chunked, compressed, sharded).
fn unconsolidated(root: &Path) {
    let v3 = root.join("v3.daf.zarr");
    cp(&Path::new(VECTORS).join("zarr_v3.daf.zarr"), &v3);
    let path = v3.join("zarr.json");
    let mut doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(doc
        .as_object_mut()
        .unwrap()
        .remove("consolidated_metadata")
        .is_some());
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
    std::fs::remove_dir_all(v3.join("vectors/cell/score/c")).unwrap();
    cp(
        &Path::new(PACKED).join("foreign_v3.daf.zarr"),
        &root.join("foreign.daf.zarr"),
    );
}

fn tree_of(datasets: Vec<NamedDataset>, zarr: impl Into<Option<Format>>, name: &str) -> Tree {
    let options = ViewOptions {
        zarr: zarr.into(),
        ..ViewOptions::from(ViewSelection::Both)
    };
    let core = DafFs::with_staging(datasets, options, SystemTime::UNIX_EPOCH, None);
    let mount = TestMount::serving(Arc::new(core), false, name);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || read_tree(&root))
}

/// Both views of the remote source at `url`, in Zarr v2 and v3, are the local source's, file by
/// file (names, sizes, bytes).
fn same_as_local(url: &str, local: &Path) {
    for zarr in [Format::ZarrV2, Format::ZarrV3] {
        let remote = open_remote(url, &quick()).unwrap_or_else(|e| panic!("{url}: {e}"));
        let local = open_source(local.to_str().unwrap()).unwrap();
        let got = tree_of(remote.datasets, zarr, url);
        let want = tree_of(local.datasets, zarr, "local");
        assert!(want.len() > 20, "{url}: {}", want.len());
        assert!(
            want.keys().any(|k| k.ends_with(".daf.zarr"))
                && want.keys().any(|k| k.ends_with(".daf")),
            "both views: {:?}",
            want.keys().take(5).collect::<Vec<_>>()
        );
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{url} ({zarr:?})"
        );
        for (path, content) in &want {
            assert!(&got[path] == content, "{url} ({zarr:?}): {path} differs");
        }
    }
}

#[test]
fn an_unconsolidated_v3_directory_is_walked_through_nginx_autoindex() {
    require_fuse!();
    require_nginx!();
    let tmp = tempfile::tempdir().unwrap();
    unconsolidated(tmp.path());
    let (nginx, base) = Nginx::serve_with(tmp.path(), true);
    for name in ["v3.daf.zarr", "foreign.daf.zarr"] {
        same_as_local(&format!("{base}/{name}"), &tmp.path().join(name));
    }
    let log = nginx.access_log();
    assert!(log.contains("GET /v3.daf.zarr/vectors/cell/ 200"), "{log}");
    // The chunk the listing does not show is never asked for.
    assert!(!log.contains("/v3.daf.zarr/vectors/cell/score/c"), "{log}");
}

#[test]
fn without_a_listing_the_mount_names_both_ways_out() {
    require_nginx!();
    let tmp = tempfile::tempdir().unwrap();
    unconsolidated(tmp.path());
    let (_nginx, base) = Nginx::serve_with(tmp.path(), false);
    let err = open_remote(&format!("{base}/v3.daf.zarr"), &quick())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("zarr.consolidate_metadata")
            && err.contains("directory listing")
            && !err.contains('\n'),
        "{err}"
    );
}

#[test]
fn hostile_html_listings_are_bounded() {
    require_fuse!();
    require_nginx!();
    let tmp = tempfile::tempdir().unwrap();
    unconsolidated(tmp.path());
    // An index page (nginx serves it for the directory URL) that links out of the source: a
    // parent, an absolute path, another host, an encoded "../", nested names.
    let src = tmp.path().join("v3.daf.zarr");
    let outside = tmp.path().join("x");
    std::fs::create_dir_all(outside.join("scalars")).unwrap();
    std::fs::write(outside.join("zarr.json"), b"{}").unwrap();
    let page = "<html><body>\
        <a href=\"../\">..</a> <a href=\"../x/\">x</a> <a href=\"/x/\">x</a> \
        <a href=\"http://127.0.0.1:1/x/\">x</a> <a href=\"..%2Fx/\">x</a> <a href=\"a/b/\">x</a> \
        <a href=\"zarr.json\">zarr.json</a> <a href=\"axes/\">axes/</a> \
        <a href=\"scalars/\">scalars/</a> <a href=\"vectors/\">vectors/</a> \
        <a href=\"matrices/\">matrices/</a></body></html>";
    std::fs::write(src.join("index.html"), page).unwrap();
    // The same one level down, where every name listed is walked: `../x/` or `..%2Fx/` taken as
    // a name would fetch `x/zarr.json` outside `vectors/` (nginx resolves the dots).
    let page = "<a href=\"../\">..</a> <a href=\"../x/\">x</a> <a href=\"../../x/\">x</a> \
        <a href=\"..%2F..%2Fx/\">x</a> <a href=\"/x/\">x</a> <a href=\"a/b/\">x</a> \
        <a href=\"zarr.json\">zarr.json</a> <a href=\"cell/\">cell/</a> <a href=\"gene/\">gene/</a>";
    std::fs::write(src.join("vectors/index.html"), page).unwrap();
    let (nginx, base) = Nginx::serve_with(tmp.path(), true);
    let remote = open_remote(&format!("{base}/v3.daf.zarr"), &quick()).unwrap();
    std::fs::remove_file(src.join("index.html")).unwrap();
    std::fs::remove_file(src.join("vectors/index.html")).unwrap();
    let local = open_source(src.to_str().unwrap()).unwrap();
    assert_eq!(
        tree_of(remote.datasets, Format::ZarrV3, "remote"),
        tree_of(local.datasets, Format::ZarrV3, "local")
    );
    let log = nginx.access_log();
    assert!(log.contains("GET /v3.daf.zarr/vectors/cell/ 200"), "{log}");
    assert!(!log.contains("/x/"), "{log}");
    assert!(!log.contains("/a/"), "{log}");
    // 200,000 names in one listing: refused with one line, not walked.
    let mut huge = String::from("<a href=\"zarr.json\">z</a><a href=\"vectors/\">v</a>\n");
    let vectors = src.join("vectors");
    for i in 0..200_000 {
        huge.push_str(&format!("<a href=\"n{i}/\">n{i}/</a>\n"));
    }
    std::fs::write(vectors.join("index.html"), huge).unwrap();
    let before = nginx.access_log().lines().count();
    let err = open_remote(&format!("{base}/v3.daf.zarr"), &quick())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("more than 100000 names") && !err.contains('\n'),
        "{err}"
    );
    let requests = nginx.access_log().lines().count() - before;
    assert!(requests < 50, "{requests} requests");
}

#[test]
fn an_s3_listing_is_walked_with_continuation_tokens_and_the_query_goes_everywhere() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("bucket")).unwrap();
    unconsolidated(&tmp.path().join("bucket"));
    let server = FaultServer::serve(tmp.path());
    // Path style: the host root answers no listing, `/bucket/` does, 2 names a page.
    server.s3_bucket("bucket", 2);
    let url = format!("{}/bucket/v3.daf.zarr?sv=2024&sig=s3cret%2Bx", server.url());
    let options = HttpOptions {
        token: Some("tok".into()),
        ..quick()
    };
    let remote = open_remote(&url, &options).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        remote.path,
        PathBuf::from(format!("{}/bucket/v3.daf.zarr", server.url()))
    );
    let local = open_source(tmp.path().join("bucket/v3.daf.zarr").to_str().unwrap()).unwrap();
    let got = tree_of(remote.datasets, Format::ZarrV3, "remote");
    assert_eq!(got, tree_of(local.datasets, Format::ZarrV3, "local"));
    let log = server.log();
    let listings: Vec<_> = log
        .iter()
        .filter(|l| l.query.contains("list-type=2"))
        .collect();
    assert_eq!(
        listings[0].path, "/",
        "virtual-hosted style first: {listings:?}"
    );
    assert_eq!(listings[0].status, 404);
    assert!(
        listings
            .iter()
            .any(|l| l.path == "/bucket/" && l.query.contains("continuation-token=page%20%26%20")),
        "{listings:?}"
    );
    assert!(listings.len() > 20, "{}", listings.len());
    // Every request of the mount, listings and reads included, carried the query.
    assert!(log.len() > 40, "{}", log.len());
    for l in &log {
        assert!(l.query.ends_with("sv=2024&sig=s3cret%2Bx"), "{l:?}");
        assert_eq!(l.authorization.as_deref(), Some("Bearer tok"), "{l:?}");
    }
}

#[test]
fn a_signed_url_mounts_reads_exact_bytes_and_never_shows_its_query() {
    require_fuse!();
    require_nginx!();
    let tmp = tempfile::tempdir().unwrap();
    let served = tmp.path().join("served");
    std::fs::create_dir(&served).unwrap();
    unconsolidated(&served);
    for name in [
        "zarr_v2.daf.zarr",
        "zarr_v3.daf.zarr.zip",
        "multi_v1_1.dafs.zip",
    ] {
        cp(&Path::new(VECTORS).join(name), &served.join(name));
    }
    let (nginx, base) = Nginx::serve_with(&served, true);
    // A directory, a ZIP, a walked v3 directory, a group of a multi-data-set ZIP (`#/g1` after
    // the query): both views, each source's default formats, are the local mount's.
    for (name, group) in [
        ("zarr_v2.daf.zarr", ""),
        ("zarr_v3.daf.zarr.zip", ""),
        ("v3.daf.zarr", ""),
        ("multi_v1_1.dafs.zip", "#/g1"),
    ] {
        let mnt = tmp.path().join(format!("mnt-{name}"));
        std::fs::create_dir(&mnt).unwrap();
        let log = tmp.path().join(format!("{name}.log"));
        let url = format!("{base}/{name}?X-Amz-Signature=s3cret&X-Amz-Expires=60{group}");
        let child = start_foreground(
            &["-v", "-v", "-o", "token=t0ken", &url, mnt.to_str().unwrap()],
            Stdio::from(std::fs::File::create(&log).unwrap()),
        );
        let mut guard = Unmount(child, mnt.clone());
        let root = mnt.clone();
        let got = io_timeout(&mnt, move || read_tree(&root));
        let local = format!("{}{group}", served.join(name).display());
        let want = tree_of(open_source(&local).unwrap().datasets, None, "local");
        assert!(want.len() > 20, "{name}: {}", want.len());
        assert!(got.keys().all(|k| !k.contains('?')), "{name}");
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "{name}"
        );
        for (path, content) in &want {
            assert!(&got[path] == content, "{name}: {path} differs");
        }
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
        assert!(!mounts.contains("s3cret"), "{mounts}");
        guard.unmount();
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(text.contains("fetched"), "{text}");
        assert!(
            !text.contains("s3cret") && !text.contains("t0ken"),
            "{text}"
        );
    }
    // nginx saw the query on every request.
    let access = nginx.access_log();
    assert!(access.lines().count() > 10);
    for line in access.lines() {
        assert!(
            line.ends_with("X-Amz-Signature=s3cret&X-Amz-Expires=60"),
            "{line}"
        );
    }
}
