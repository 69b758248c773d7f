//! Tests of the HTTP test infrastructure itself (tests/common/http.rs, fault_server.rs): the
//! fault-injecting server answers like a real static server (checked against nginx on the same
//! files) and each scripted fault does what it says, seen on raw sockets.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::http::{get, read_response, request, Fault, FaultServer, Nginx};

/// A directory with a 10,000-byte file `data/blob` (bytes i % 251) and `meta.json`.
fn files() -> (tempfile::TempDir, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let blob: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::create_dir(dir.path().join("data")).unwrap();
    std::fs::write(dir.path().join("data/blob"), &blob).unwrap();
    std::fs::write(dir.path().join("meta.json"), b"{\"a\": 1}").unwrap();
    (dir, blob)
}

#[test]
fn serves_whole_files_ranges_head_and_validators() {
    let (dir, blob) = files();
    let server = FaultServer::serve(dir.path());
    let url = format!("{}/data/blob", server.url());
    let whole = get(&url, None);
    assert_eq!(whole.status, 200);
    assert_eq!(whole.body, blob);
    assert_eq!(whole.header("accept-ranges"), Some("bytes"));
    let etag = whole.header("etag").unwrap().to_string();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    assert!(whole.header("last-modified").unwrap().ends_with(" GMT"));

    for (range, want, content_range) in [
        ("bytes=100-199", &blob[100..200], "bytes 100-199/10000"),
        ("bytes=9990-", &blob[9990..], "bytes 9990-9999/10000"),
        ("bytes=-10", &blob[9990..], "bytes 9990-9999/10000"),
        ("bytes=9995-20000", &blob[9995..], "bytes 9995-9999/10000"),
    ] {
        let r = get(&url, Some(range));
        assert_eq!(r.status, 206, "{range}");
        assert_eq!(r.body, want, "{range}");
        assert_eq!(r.header("content-range"), Some(content_range), "{range}");
        assert_eq!(r.header("etag"), Some(etag.as_str()));
    }
    let past = get(&url, Some("bytes=10000-"));
    assert_eq!(past.status, 416);
    assert_eq!(past.header("content-range"), Some("bytes */10000"));

    let head = request("HEAD", &url, &[]).unwrap();
    assert_eq!(head.status, 200);
    assert_eq!(head.header("content-length"), Some("10000"));
    assert!(head.body.is_empty());

    // If-Range with the current ETag keeps the range; with another, the whole body comes back.
    let kept = request(
        "GET",
        &url,
        &[("Range", "bytes=0-9"), ("If-Range", etag.as_str())],
    )
    .unwrap();
    assert_eq!((kept.status, kept.body.len()), (206, 10));
    let stale = request(
        "GET",
        &url,
        &[("Range", "bytes=0-9"), ("If-Range", "\"other\"")],
    )
    .unwrap();
    assert_eq!((stale.status, stale.body.len()), (200, 10_000));
    let refused = request("GET", &url, &[("If-Match", "\"other\"")]).unwrap();
    assert_eq!(refused.status, 412);

    assert_eq!(get(&format!("{}/nothing", server.url()), None).status, 404);
    assert_eq!(get(&format!("{}/data", server.url()), None).status, 404);
    assert_eq!(
        get(&format!("{}/%6Deta.json", server.url()), None).body,
        b"{\"a\": 1}"
    );
    let log = server.log();
    assert_eq!(log.len(), 13);
    assert_eq!(log[1].range.as_deref(), Some("bytes=100-199"));
    assert_eq!(log[1].status, 206);
}

#[test]
fn keeps_connections_alive() {
    let (dir, blob) = files();
    let server = FaultServer::serve(dir.path());
    let host = server.url().trim_start_matches("http://").to_string();
    let stream = TcpStream::connect(&host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    for i in 0..5u64 {
        let (a, b) = (i * 1000, i * 1000 + 499);
        write!(
            writer,
            "GET /data/blob HTTP/1.1\r\nHost: {host}\r\nRange: bytes={a}-{b}\r\n\r\n"
        )
        .unwrap();
        let r = read_response(&mut reader, false).unwrap();
        assert_eq!(r.status, 206);
        assert_eq!(r.body, &blob[a as usize..=b as usize]);
    }
    write!(
        writer,
        "HEAD /meta.json HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let r = read_response(&mut reader, true).unwrap();
    assert_eq!(r.header("content-length"), Some("8"));
    let mut rest = Vec::new();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "closed after Connection: close");
}

#[test]
fn drops_the_connection_mid_body_then_recovers() {
    let (dir, blob) = files();
    let server = FaultServer::serve(dir.path());
    server.fault("/data/blob", Fault::DropMidBody { times: 2 });
    let url = format!("{}/data/blob", server.url());
    for _ in 0..2 {
        let err = request("GET", &url, &[]).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
    }
    assert_eq!(get(&url, None).body, blob);
    // HEAD has no body to cut: it is answered in full.
    assert_eq!(server.requests_for("/data/blob"), 3);
}

#[test]
fn answers_503_n_times_then_succeeds() {
    let (dir, blob) = files();
    let server = FaultServer::serve(dir.path());
    server.fault("/data/blob", Fault::Unavailable { times: 3 });
    let url = format!("{}/data/blob", server.url());
    let statuses: Vec<u16> = (0..4)
        .map(|_| get(&url, Some("bytes=0-9")).status)
        .collect();
    assert_eq!(statuses, [503, 503, 503, 206]);
    assert_eq!(get(&url, None).body, blob);
    // Other paths are unaffected.
    assert_eq!(
        get(&format!("{}/meta.json", server.url()), None).status,
        200
    );
}

#[test]
fn sleeps_past_a_timeout() {
    let (dir, _) = files();
    let server = FaultServer::serve(dir.path());
    server.fault(
        "/meta.json",
        Fault::Slow {
            delay: Duration::from_millis(1500),
            times: 1,
        },
    );
    let host = server.url().trim_start_matches("http://").to_string();
    let mut stream = TcpStream::connect(&host).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    write!(stream, "GET /meta.json HTTP/1.1\r\nHost: {host}\r\n\r\n").unwrap();
    let mut byte = [0u8; 1];
    let err = stream.read(&mut byte).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    // The slow answer still comes, and the next request is fast.
    let started = Instant::now();
    let r = get(&format!("{}/meta.json", server.url()), None);
    assert_eq!(r.status, 200);
    assert!(started.elapsed() < Duration::from_millis(1000));
}

#[test]
fn changes_bytes_and_etag_after_n_requests() {
    let (dir, blob) = files();
    let server = FaultServer::serve(dir.path());
    server.fault("/data/blob", Fault::ChangeAfter { after: 2 });
    let url = format!("{}/data/blob", server.url());
    let first = get(&url, Some("bytes=0-99"));
    let second = get(&url, Some("bytes=0-99"));
    let third = get(&url, Some("bytes=0-99"));
    assert_eq!(first.body, &blob[..100]);
    assert_eq!(second.body, &blob[..100]);
    assert_eq!(first.header("etag"), second.header("etag"));
    assert_ne!(third.body, &blob[..100]);
    assert_eq!(third.body.len(), 100);
    assert_ne!(third.header("etag"), first.header("etag"));
    assert_ne!(third.header("last-modified"), first.header("last-modified"));
    // A client that names the old ETag is refused, not served the new bytes.
    let old = first.header("etag").unwrap();
    assert_eq!(
        request("GET", &url, &[("If-Match", old)]).unwrap().status,
        412
    );
    assert_eq!(std::fs::read(dir.path().join("data/blob")).unwrap(), blob);
}

#[test]
fn ignores_range_and_serves_404() {
    let (dir, blob) = files();
    let server = FaultServer::serve(dir.path());
    server.fault("/data/blob", Fault::IgnoreRange);
    server.fault("/meta.json", Fault::NotFound);
    let url = format!("{}/data/blob", server.url());
    let r = get(&url, Some("bytes=0-9"));
    assert_eq!(r.status, 200);
    assert_eq!(r.body, blob);
    assert_eq!(r.header("accept-ranges"), None);
    assert_eq!(
        get(&format!("{}/meta.json", server.url()), None).status,
        404
    );
    server.clear_faults();
    assert_eq!(get(&url, Some("bytes=0-9")).status, 206);
}

#[test]
fn nginx_and_the_fault_server_agree() {
    require_nginx!();
    let (dir, blob) = files();
    let (nginx, base) = Nginx::serve(dir.path());
    let server = FaultServer::serve(dir.path());
    for range in [
        None,
        Some("bytes=100-199"),
        Some("bytes=-10"),
        Some("bytes=9990-"),
    ] {
        let a = get(&format!("{base}/data/blob"), range);
        let b = get(&format!("{}/data/blob", server.url()), range);
        assert_eq!(a.status, b.status, "{range:?}: {}", nginx.error_log());
        assert_eq!(a.body, b.body, "{range:?}");
        assert_eq!(a.header("content-range"), b.header("content-range"));
        if range.is_none() {
            // nginx names Accept-Ranges on full answers only.
            assert_eq!(a.header("accept-ranges"), b.header("accept-ranges"));
        }
        assert_eq!(a.header("last-modified"), b.header("last-modified"));
        assert!(a.header("etag").is_some());
    }
    assert_eq!(get(&format!("{base}/data/blob"), None).body, blob);
    assert_eq!(
        get(&format!("{base}/data/blob"), Some("bytes=10000-")).status,
        416
    );
    assert_eq!(get(&format!("{base}/nothing"), None).status, 404);
    // Read-only: nginx refuses writes.
    let put = request(
        "PUT",
        &format!("{base}/data/blob"),
        &[("Content-Length", "0")],
    )
    .unwrap();
    assert_eq!(put.status, 403);
    assert!(nginx.access_log().contains("GET /data/blob 206"));
}
