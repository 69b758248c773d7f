//! Remote sources over HTTP: a tiny local server (`http_sources/server.rs`) serves copies of the
//! fixtures; the URL mounts show the same trees, sizes and bytes as local mounts of the same
//! data, the mount fetches no chunk, and faults (no Range support, 503s, a changed file) are
//! handled as doc/user-guide.md says. A URL mount is read-only (`-o rw` refused, writes EROFS).

mod common;
#[path = "http_sources/server.rs"]
mod server;

use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{
    io_timeout, is_mounted, read_tree, start_foreground, TestMount, Tree, Unmount, BIN, VECTORS,
};
use daf_mount::core::DafFs;
use daf_mount::formats::remote::open_remote;
use daf_mount::formats::source::open_source;
use daf_mount::stores::http::object::RemoteObject;
use daf_mount::stores::http::{HttpClient, HttpOptions};
use daf_mount::views::ViewSelection;
use server::Server;

/// A server of a copy of the fixtures.
fn serve_fixtures() -> (tempfile::TempDir, Server) {
    let tmp = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(VECTORS)
        .arg(tmp.path().join("v"))
        .status()
        .unwrap();
    assert!(status.success());
    let server = Server::start(&tmp.path().join("v"));
    (tmp, server)
}

/// The fault server serving a copy of the packed v3 test source (with a chunk left out) as
/// `p.daf.zarr`.
fn serve_packed() -> (tempfile::TempDir, Server) {
    let tmp = tempfile::tempdir().unwrap();
    let packed = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/packed/zarr_packed.daf.zarr"
    );
    let status = Command::new("cp")
        .arg("-r")
        .arg(packed)
        .arg(tmp.path().join("p.daf.zarr"))
        .status()
        .unwrap();
    assert!(status.success());
    let server = Server::start(tmp.path());
    (tmp, server)
}

fn quick() -> HttpOptions {
    HttpOptions {
        timeout: Duration::from_secs(5),
        ..HttpOptions::default()
    }
}

fn tree_of(datasets: Vec<daf_mount::formats::source::NamedDataset>, name: &str) -> Tree {
    let core = DafFs::with_staging(datasets, ViewSelection::Both, SystemTime::UNIX_EPOCH, None);
    let mount = TestMount::serving(Arc::new(core), false, name);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || read_tree(&root))
}

#[test]
fn remote_zarr_directories_mount_like_local_ones() {
    require_fuse!();
    let (_tmp, server) = serve_fixtures();
    for fixture in ["zarr_v2.daf.zarr", "zarr_v3.daf.zarr"] {
        let before = server.faults.requests.load(Ordering::SeqCst);
        let remote = open_remote(&server.url(fixture), &quick())
            .unwrap_or_else(|e| panic!("{fixture}: {e}"));
        let at_mount: Vec<String> = server.requests()[before..].to_vec();
        // Metadata, the Range probe, what the reader reads at mount (scalars, axis entries)
        // and string chunks' sizes: no vector or matrix payload is fetched.
        assert!(
            at_mount
                .iter()
                .all(|r| !r.contains("/vectors/cell/score") && !r.contains("/matrices/")),
            "{fixture}: {at_mount:?}"
        );
        assert!(at_mount[0].contains("GET"), "{at_mount:?}");
        same_as_local(remote.datasets, fixture);
    }
}

/// The mount of `remote` shows the same files (names, sizes, bytes) as a local mount of
/// `fixture`.
fn same_as_local(remote: Vec<daf_mount::formats::source::NamedDataset>, fixture: &str) {
    let local = open_source(&format!("{VECTORS}/{fixture}")).unwrap();
    let remote_tree = tree_of(remote, fixture);
    let local_tree = tree_of(local.datasets, fixture);
    assert!(remote_tree.len() > 20, "{fixture}: {}", remote_tree.len());
    assert_eq!(
        remote_tree.keys().collect::<Vec<_>>(),
        local_tree.keys().collect::<Vec<_>>(),
        "{fixture}"
    );
    for (path, content) in &local_tree {
        assert_eq!(&remote_tree[path], content, "{fixture}: {path}");
    }
}

#[test]
fn remote_zips_mount_like_local_ones() {
    require_fuse!();
    let (_tmp, server) = serve_fixtures();
    for fixture in [
        "zarr_v2.daf.zarr.zip",
        "zarr_v3.daf.zarr.zip",
        "zipdaf_v1_0.daf.zip",
        "zipdaf_v1_1.daf.zip",
        "multi_v1_1.dafs.zip#/g1",
        "multi_v1_1.dafs.zip",
    ] {
        let before = server.faults.requests.load(Ordering::SeqCst);
        let remote = open_remote(&server.url(fixture), &quick())
            .unwrap_or_else(|e| panic!("{fixture}: {e}"));
        let at_mount = server.requests()[before..].to_vec();
        // A stat, the end of the file, the central directory, then what the reader reads.
        assert!(at_mount[0].starts_with("HEAD"), "{fixture}: {at_mount:?}");
        assert!(at_mount[1].contains("bytes="), "{fixture}: {at_mount:?}");
        same_as_local(remote.datasets, fixture);
    }
    server.faults.no_range.store(true, Ordering::SeqCst);
    let err = open_remote(&server.url("zarr_v2.daf.zarr.zip"), &quick())
        .unwrap_err()
        .to_string();
    assert!(err.contains("Range"), "{err}");
}

#[test]
fn a_server_without_range_support_is_refused_at_mount() {
    let (_tmp, server) = serve_fixtures();
    server.faults.no_range.store(true, Ordering::SeqCst);
    let err = open_remote(&server.url("zarr_v2.daf.zarr"), &quick())
        .unwrap_err()
        .to_string();
    assert!(err.contains("Range") && !err.contains('\n'), "{err}");
}

#[test]
fn a_503_is_retried_and_a_404_source_is_named() {
    let (_tmp, server) = serve_fixtures();
    server.faults.fail_503.store(2, Ordering::SeqCst);
    let opened = open_remote(&server.url("zarr_v2.daf.zarr"), &quick()).unwrap();
    assert_eq!(server.faults.sent_503.load(Ordering::SeqCst), 2);
    assert_eq!(opened.datasets[0].dataset.vectors["cell"].len(), 4);
    let no_retries = HttpOptions {
        retries: 0,
        ..quick()
    };
    server.faults.fail_503.store(1, Ordering::SeqCst);
    let err = open_remote(&server.url("zarr_v2.daf.zarr"), &no_retries)
        .unwrap_err()
        .to_string();
    assert!(err.contains("503"), "{err}");
    let err = open_remote(&server.url("nothing.daf.zarr"), &quick())
        .unwrap_err()
        .to_string();
    assert!(err.contains("no .zmetadata"), "{err}");
}

#[test]
fn a_changed_object_fails_its_reads_and_never_mixes_bytes() {
    let (_tmp, server) = serve_fixtures();
    let file = server.root.join("changing");
    std::fs::write(&file, vec![1u8; 3 << 20]).unwrap();
    let no_cache = HttpOptions {
        memory_cache: 0,
        ..quick()
    };
    let client = HttpClient::new(no_cache);
    let blob = RemoteObject::new(client, server.url("changing"), 3 << 20, None, false).into_blob();
    assert_eq!(blob.read_range(10, 5).unwrap().as_slice(), &[1; 5]);
    std::fs::write(&file, vec![2u8; 3 << 20]).unwrap();
    let err = blob.read_range(2 << 20, 5).unwrap_err().to_string();
    assert!(err.contains("changed on the server"), "{err}");
    // A different size is a change too, even on the first read.
    let client = HttpClient::new(quick());
    let blob = RemoteObject::new(client, server.url("changing"), 1000, None, false).into_blob();
    assert!(blob.read_range(0, 10).is_err());
}

#[test]
fn a_changed_chunk_reads_as_eio_through_the_mount() {
    require_fuse!();
    let (_tmp, server) = serve_fixtures();
    let remote = open_remote(&server.url("zarr_v2.daf.zarr"), &quick()).unwrap();
    let core = DafFs::with_staging(
        remote.datasets,
        ViewSelection::Both,
        SystemTime::UNIX_EPOCH,
        None,
    );
    let mount = TestMount::serving(Arc::new(core), false, "changed");
    let chunk = server.root.join("zarr_v2.daf.zarr/vectors/cell/score/0");
    let mut grown = std::fs::read(&chunk).unwrap();
    grown.extend([0; 8]);
    std::fs::write(&chunk, grown).unwrap();
    let path = mount.join("zarr_v2.daf/vectors/cell/score.data");
    let err = io_timeout(&mount.path, move || std::fs::read(path).unwrap_err());
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    // The rest of the mount still works.
    let other = mount.join("zarr_v2.daf/axes/cell.txt");
    assert!(io_timeout(&mount.path, move || std::fs::read(other)).is_ok());
}

#[test]
fn a_url_mount_is_read_only() {
    require_fuse!();
    let (tmp, server) = serve_fixtures();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let url = server.url("zarr_v3.daf.zarr");
    let out = Command::new(BIN)
        .args(["-o", "rw", &url, mnt.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("read-only") && stderr.trim().lines().count() == 1,
        "{stderr}"
    );
    assert!(!is_mounted(&mnt));
    let child = start_foreground(
        &[
            "-o",
            "timeout=5,retries=1,cache_size=64M",
            &url,
            mnt.to_str().unwrap(),
        ],
        Stdio::inherit(),
    );
    let mut guard = Unmount(child, mnt.clone());
    let (axis, new) = (
        mnt.join("zarr_v3.daf/axes/cell.txt"),
        mnt.join("zarr_v3.daf/new.txt"),
    );
    let (write, create) = io_timeout(&mnt, move || {
        (
            std::fs::OpenOptions::new()
                .write(true)
                .open(axis)
                .unwrap_err(),
            std::fs::write(new, b"x").unwrap_err(),
        )
    });
    assert_eq!(write.raw_os_error(), Some(libc::EROFS), "{write}");
    assert_eq!(create.raw_os_error(), Some(libc::EROFS), "{create}");
    let cell = mnt.join("zarr_v3.daf/axes/cell.txt");
    let text = io_timeout(&mnt, move || std::fs::read_to_string(cell).unwrap());
    assert_eq!(text, "c1\nc2\nc3\n");
    let status = guard.unmount();
    assert_eq!(status.code(), Some(0));
}

#[test]
fn verbose_logs_show_fetches_but_never_headers_or_tokens() {
    require_fuse!();
    let (tmp, server) = serve_fixtures();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let log = tmp.path().join("log");
    let url = server.url("zarr_v2.daf.zarr");
    let child = start_foreground(
        &[
            "-v",
            "-v",
            "-o",
            "header=X-Secret:s3cret-h,token=s3cret-t",
            &url,
            mnt.to_str().unwrap(),
        ],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let mut guard = Unmount(child, mnt.clone());
    let score = mnt.join("zarr_v2.daf/vectors/cell/score.data");
    let bytes = io_timeout(&mnt, move || std::fs::read(score).unwrap());
    assert_eq!(bytes.len(), 12);
    guard.unmount();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("fetched") && text.contains("score/0"),
        "{text}"
    );
    assert!(text.contains("remote: "), "no summary line: {text}");
    assert!(!text.contains("s3cret"), "{text}");
    let seen = server.headers();
    assert!(seen.iter().any(|h| h == "x-secret: s3cret-h"), "{seen:?}");
    assert!(
        seen.iter().any(|h| h == "authorization: Bearer s3cret-t"),
        "{seen:?}"
    );
}

#[test]
fn a_response_slower_than_the_timeout_fails_the_read_and_the_next_one_works() {
    let (_tmp, server) = serve_fixtures();
    std::fs::write(server.root.join("slow"), vec![7u8; 3 << 20]).unwrap();
    let client = HttpClient::new(HttpOptions {
        timeout: Duration::from_secs(1),
        retries: 1,
        memory_cache: 0,
        ..HttpOptions::default()
    });
    let blob = RemoteObject::new(client, server.url("slow"), 3 << 20, None, false).into_blob();
    // A first read leaves a kept-alive connection in the pool: the next request reuses it.
    assert_eq!(blob.read_range(0, 4).unwrap().as_slice(), &[7; 4]);
    server.faults.delay_ms.store(3000, Ordering::SeqCst);
    let started = std::time::Instant::now();
    let err = blob.read_range(2 << 20, 4).unwrap_err().to_string();
    let took = started.elapsed();
    assert!(err.contains("transport") || err.contains("imed"), "{err}");
    assert!(took < Duration::from_secs(6), "{took:?}");
    server.faults.delay_ms.store(0, Ordering::SeqCst);
    assert_eq!(blob.read_range(2 << 20, 4).unwrap().as_slice(), &[7; 4]);
}

#[test]
fn sequential_reads_are_fetched_ahead_in_few_requests() {
    let (_tmp, server) = serve_fixtures();
    let data: Vec<u8> = (0..(40u32 << 20)).map(|i| (i % 251) as u8).collect();
    std::fs::write(server.root.join("big"), &data).unwrap();
    let blob = RemoteObject::new(
        HttpClient::new(quick()),
        server.url("big"),
        data.len() as u64,
        None,
        false,
    )
    .into_blob();
    let before = server.faults.requests.load(Ordering::SeqCst);
    let step = 128 << 10;
    for offset in (0..data.len()).step_by(step) {
        let got = blob.read_range(offset as u64, step as u64).unwrap();
        assert!(
            got.as_slice() == &data[offset..offset + step],
            "at {offset}"
        );
    }
    let requests = server.faults.requests.load(Ordering::SeqCst) - before;
    // 320 reads of 128 KiB: one request per 1 MiB block would be 40.
    assert!(requests <= 16, "{requests} requests");
    // A read larger than a piece is split into concurrent range requests.
    let blob = RemoteObject::new(
        HttpClient::new(quick()),
        server.url("big"),
        data.len() as u64,
        None,
        false,
    )
    .into_blob();
    let before = server.faults.requests.load(Ordering::SeqCst);
    assert!(blob.read_range(1, 20 << 20).unwrap().as_slice() == &data[1..1 + (20 << 20)]);
    assert_eq!(server.faults.requests.load(Ordering::SeqCst) - before, 6);
}

/// The mount of `datasets` with Zarr view format `zarr` (both views).
fn tree_in(
    datasets: Vec<daf_mount::formats::source::NamedDataset>,
    zarr: daf_mount::formats::source::Format,
    name: &str,
) -> Tree {
    let options = daf_mount::views::ViewOptions {
        zarr: Some(zarr),
        ..daf_mount::views::ViewOptions::from(ViewSelection::Both)
    };
    let core = DafFs::with_staging(datasets, options, SystemTime::UNIX_EPOCH, None);
    let mount = TestMount::serving(Arc::new(core), false, name);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || read_tree(&root))
}

/// A Zarr v3 source whose all-zero property has no chunk (Zarr.jl and zarr-python leave it
/// out), served by nginx: its URL mount shows the same trees (no `c/0` in the v3 view, a chunk
/// of zeros in the v2 view, zeros in the FilesDaf view), sizes and bytes as a local mount.
#[test]
fn a_chunk_left_out_is_left_out_of_the_remote_mount_too() {
    require_fuse!();
    require_nginx!();
    use daf_mount::formats::source::Format;
    let packed = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/packed");
    let fixture = "zarr_packed.daf.zarr";
    assert!(!std::path::Path::new(&format!("{packed}/{fixture}/vectors/batch/zero/c")).exists());
    let (_nginx, base) = common::http::Nginx::serve(std::path::Path::new(packed));
    for zarr in [Format::ZarrV3, Format::ZarrV2] {
        let remote = open_remote(&format!("{base}/{fixture}"), &quick()).unwrap();
        let local = open_source(&format!("{packed}/{fixture}")).unwrap();
        let remote_tree = tree_in(remote.datasets, zarr, "elided-remote");
        let local_tree = tree_in(local.datasets, zarr, "elided-local");
        let zero = "zarr_packed.daf/vectors/batch/zero.data";
        assert_eq!(local_tree.get(zero), Some(&Some(vec![0; 24])), "{zarr:?}");
        let chunk = match zarr {
            Format::ZarrV3 => "zarr_packed.daf.zarr/vectors/batch/zero/c/0",
            _ => "zarr_packed.daf.zarr/vectors/batch/zero/0",
        };
        assert_eq!(
            local_tree.contains_key(chunk),
            zarr == Format::ZarrV2,
            "{zarr:?}"
        );
        let only = |a: &Tree, b: &Tree| -> Vec<String> {
            a.keys().filter(|k| !b.contains_key(*k)).cloned().collect()
        };
        assert_eq!(
            only(&remote_tree, &local_tree),
            Vec::<String>::new(),
            "{zarr:?}"
        );
        assert_eq!(
            only(&local_tree, &remote_tree),
            Vec::<String>::new(),
            "{zarr:?}"
        );
        for (path, content) in &local_tree {
            assert_eq!(&remote_tree[path], content, "{zarr:?}: {path}");
        }
    }
}

/// A chunk that may be absent costs no request at mount; listing its directory asks once
/// (HEAD), and while the server fails that gives EIO for it, then works once the server does.
#[test]
fn a_chunk_left_out_is_asked_for_once_when_listed_and_a_failure_is_eio() {
    require_fuse!();
    let (_tmp, server) = serve_packed();
    let options = HttpOptions {
        retries: 0,
        ..quick()
    };
    let remote = open_remote(&server.url("p.daf.zarr"), &options).unwrap();
    let asked = |server: &Server| {
        server
            .requests()
            .iter()
            .filter(|r| r.contains("/vectors/batch/zero/c/0"))
            .count()
    };
    assert_eq!(asked(&server), 0, "{:?}", server.requests());
    let core = DafFs::with_staging(
        remote.datasets,
        ViewSelection::Both,
        SystemTime::UNIX_EPOCH,
        None,
    );
    let mount = TestMount::serving(Arc::new(core), false, "elided-eio");
    let array = mount.join("p.daf.zarr/vectors/batch/zero");
    server.faults.fail_503.store(1000, Ordering::SeqCst);
    let listed = array.clone();
    let err = io_timeout(&mount.path, move || {
        std::fs::read_dir(listed).and_then(|d| d.collect::<Result<Vec<_>, _>>())
    })
    .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    let chunk = array.join("c");
    let err = io_timeout(&mount.path, move || std::fs::metadata(chunk)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    server.faults.fail_503.store(0, Ordering::SeqCst);
    let listed = array.clone();
    let names: Vec<String> = io_timeout(&mount.path, move || {
        std::fs::read_dir(listed)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect()
    });
    assert_eq!(names, ["zarr.json"]);
    let before = asked(&server);
    let chunk = array.join("c");
    let err = io_timeout(&mount.path, move || std::fs::metadata(chunk)).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err}");
    assert_eq!(
        asked(&server),
        before,
        "asked again: {:?}",
        server.requests()
    );
    // The FilesDaf twin still reads zeros.
    let data = mount.join("p.daf/vectors/batch/zero.data");
    assert_eq!(
        io_timeout(&mount.path, move || std::fs::read(data).unwrap()),
        vec![0; 24]
    );
}

#[test]
fn a_listing_batch_goes_past_hidden_entries() {
    // One entry at a time (the kernel asks for more, the core API allows any batch): a batch
    // whose only candidate is hidden must go on to the next entry, since an empty batch ends
    // the listing.
    let (_tmp, server) = serve_packed();
    let remote = open_remote(&server.url("p.daf.zarr"), &quick()).unwrap();
    let core = DafFs::with_staging(
        remote.datasets,
        ViewSelection::Both,
        SystemTime::UNIX_EPOCH,
        None,
    );
    let array = core.resolve("p.daf.zarr/vectors/batch/zero").unwrap();
    let mut names = Vec::new();
    let mut offset = 2; // past "." and ".."
    loop {
        let batch = core.readdir(array, offset, 1).unwrap();
        let Some(entry) = batch.first() else { break };
        names.push(entry.name.clone());
        offset = entry.next_offset;
    }
    assert_eq!(names, ["zarr.json"]);
}
