//! Remote sources under real-world HTTP faults (issue 11, point 4), with the fault-injecting server
//! of tests/common/fault_server.rs: 503 then success and a dropped connection are retried; a
//! connection that keeps dropping, a response slower than the timeout and a 404 chunk give EIO
//! on that read while the mount stays up; a changed object gives EIO, never mixed bytes; a server
//! without `Range` is refused at mount. The data set is a ZarrDaf v2 directory written here with
//! one 8 MiB chunk, so a read needs more than the one request that learns a chunk's size. Each
//! test runs against the HTTP URL and against the same data as an S3 source
//! (`s3://bkt/big.daf.zarr`, path-style with the fault server as endpoint, `no_sign`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::http::{Fault, FaultServer};
use common::{io_deadline, start_foreground, wait_exit, VECTORS};

const CELLS: usize = 1024;
const GENES: usize = 2048; // 1024 x 2048 Float32: one 8 MiB chunk
const CHUNK: &str = "matrices/cell/gene/fraction/0.0";
const VIEW: &str = "matrices/cell/gene/fraction.data";

/// Writes a seed ZarrDaf (Zarr v2 with a consolidated `.zmetadata`) with axes `cell` and `gene`
/// and one dense Float32 matrix in one uncompressed chunk; returns the chunk's bytes.
fn write_zarr_v2(root: &Path) -> Vec<u8> {
    let mut meta = serde_json::Map::new();
    let mut doc = |key: &str, value: serde_json::Value| {
        let path = root.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, value.to_string()).unwrap();
        meta.insert(key.to_string(), value);
    };
    let zarray = |dtype: &str, shape: &[usize], strings: bool| {
        serde_json::json!({"chunks": shape, "compressor": null, "dtype": dtype, "fill_value": null,
            "filters": if strings { serde_json::json!([{"id": "vlen-utf8"}]) } else { serde_json::Value::Null },
            "order": "C", "shape": shape, "zarr_format": 2})
    };
    let mut groups = vec![String::new()];
    for g in [
        "scalars",
        "axes",
        "vectors",
        "matrices",
        "vectors/cell",
        "vectors/gene",
    ] {
        groups.push(g.to_string());
    }
    for r in ["cell", "gene"] {
        groups.push(format!("matrices/{r}"));
        for c in ["cell", "gene"] {
            groups.push(format!("matrices/{r}/{c}"));
        }
    }
    for g in &groups {
        let prefix = if g.is_empty() {
            String::new()
        } else {
            format!("{g}/")
        };
        doc(
            &format!("{prefix}.zgroup"),
            serde_json::json!({"zarr_format": 2}),
        );
        doc(&format!("{prefix}.zattrs"), serde_json::json!({}));
    }
    let mut chunks: Vec<(String, Vec<u8>)> = vec![("daf/0".into(), vec![1, 0])];
    doc("daf/.zarray", zarray("|u1", &[2], false));
    doc("daf/.zattrs", serde_json::json!({}));
    for (axis, n) in [("cell", CELLS), ("gene", GENES)] {
        doc(&format!("axes/{axis}/.zarray"), zarray("|O", &[n], true));
        doc(&format!("axes/{axis}/.zattrs"), serde_json::json!({}));
        let mut v = (n as u32).to_le_bytes().to_vec();
        for i in 0..n {
            let name = format!("{}{i}", &axis[..1]);
            v.extend((name.len() as u32).to_le_bytes());
            v.extend(name.as_bytes());
        }
        chunks.push((format!("axes/{axis}/0"), v));
    }
    doc(
        "matrices/cell/gene/fraction/.zarray",
        zarray("<f4", &[GENES, CELLS], false),
    );
    doc("matrices/cell/gene/fraction/.zattrs", serde_json::json!({}));
    let data: Vec<u8> = (0..GENES * CELLS)
        .flat_map(|i| ((i % 1_000_003) as f32 * 0.5).to_le_bytes())
        .collect();
    chunks.push((CHUNK.into(), data.clone()));
    for (key, bytes) in chunks {
        std::fs::write(root.join(key), bytes).unwrap();
    }
    let consolidated = serde_json::json!({"metadata": meta, "zarr_consolidated_format": 1});
    std::fs::write(root.join(".zmetadata"), consolidated.to_string()).unwrap();
    data
}

/// A daf-mount of a URL in the foreground on its own mount point; unmounted when dropped.
struct RemoteMount {
    child: Child,
    mnt: PathBuf,
    _dir: tempfile::TempDir,
}

impl RemoteMount {
    fn new(url: &str, options: &[impl AsRef<str>]) -> RemoteMount {
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let mut args = vec![url, mnt.to_str().unwrap(), "--view", "files"];
        args.extend(options.iter().map(AsRef::as_ref));
        let child = start_foreground(&args, Stdio::inherit());
        RemoteMount {
            child,
            mnt,
            _dir: dir,
        }
    }

    /// Reads `rel` under a deadline: the bytes, or the errno.
    fn read(&self, rel: &str) -> Result<Vec<u8>, Option<i32>> {
        let path = self.mnt.join(rel);
        io_deadline(&self.mnt, Duration::from_secs(60), move || {
            std::fs::read(&path).map_err(|e| e.raw_os_error())
        })
    }
}

impl Drop for RemoteMount {
    fn drop(&mut self) {
        let _ = Command::new("fusermount3")
            .arg("-u")
            .arg(&self.mnt)
            .status();
        wait_exit(&mut self.child, &self.mnt, Duration::from_secs(20));
    }
}

/// The served data set and its server: (`server`, URL of the data set, chunk bytes, temp dir).
fn served() -> (FaultServer, String, Vec<u8>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let data = write_zarr_v2(&dir.path().join("bkt/big.daf.zarr"));
    let server = FaultServer::serve(dir.path());
    let url = format!("{}/bkt/big.daf.zarr", server.url());
    (server, url, data, dir)
}

/// The chunk's path on the server.
const SERVED_CHUNK: &str = "/bkt/big.daf.zarr/matrices/cell/gene/fraction/0.0";

/// The data set as an HTTP URL and as an S3 source, each with the options it needs, plus
/// `options`.
fn sources(server: &FaultServer, url: &str, options: &[&str]) -> [(String, Vec<String>); 2] {
    let with = |mut first: Vec<String>| {
        first.extend(options.iter().map(|o| o.to_string()));
        first
    };
    [
        (url.to_string(), with(Vec::new())),
        (
            "s3://bkt/big.daf.zarr".to_string(),
            with(vec![
                "-o".into(),
                format!("endpoint={},no_sign", server.url()),
            ]),
        ),
    ]
}

#[test]
fn the_data_set_mounts_locally_with_the_chunk_as_its_matrix() {
    require_fuse!();
    let (_server, _url, data, dir) = served();
    let source = dir.path().join("bkt/big.daf.zarr");
    let mount = RemoteMount::new(source.to_str().unwrap(), &["-o", "ro"]);
    assert!(mount.read(VIEW).unwrap() == data);
    let genes: String = (0..GENES).map(|i| format!("g{i}\n")).collect();
    assert!(mount.read("axes/gene.txt").unwrap() == genes.as_bytes());
}

#[test]
fn a_503_then_success_is_retried() {
    require_fuse!();
    let (server, url, data, _dir) = served();
    for (source, options) in sources(&server, &url, &[]) {
        let before = server.requests_for(SERVED_CHUNK);
        let mount = RemoteMount::new(&source, &options);
        server.fault(SERVED_CHUNK, Fault::Unavailable { times: 2 });
        assert!(
            mount.read(VIEW).unwrap() == data,
            "{source}: other bytes after retries"
        );
        let tried = server.requests_for(SERVED_CHUNK) - before;
        assert!(tried >= 3, "{source}: two 503s and a success: {tried}");
        server.clear_faults();
    }
}

#[test]
fn a_dropped_connection_is_retried_and_one_that_keeps_dropping_gives_eio() {
    require_fuse!();
    let (server, url, data, _dir) = served();
    for (source, options) in sources(&server, &url, &["-o", "retries=2"]) {
        let mount = RemoteMount::new(&source, &options);
        server.fault(SERVED_CHUNK, Fault::DropMidBody { times: 1 });
        assert!(
            mount.read(VIEW).unwrap() == data,
            "{source}: other bytes after a retry"
        );
        let mount2 = RemoteMount::new(&source, &options);
        server.fault(SERVED_CHUNK, Fault::DropMidBody { times: u32::MAX });
        assert_eq!(
            mount2.read(VIEW).map(|_| ()),
            Err(Some(libc::EIO)),
            "{source}"
        );
        // The mount stays up: other files read, and the chunk too once the network is back.
        assert!(mount2
            .read("axes/cell.txt")
            .unwrap()
            .starts_with(b"c0\nc1\n"));
        server.clear_faults();
        assert!(mount2.read(VIEW).unwrap() == data, "{source}");
    }
}

#[test]
fn a_response_slower_than_the_timeout_gives_eio() {
    require_fuse!();
    let (server, url, data, _dir) = served();
    for (source, options) in sources(&server, &url, &["-o", "timeout=1,retries=1"]) {
        let mount = RemoteMount::new(&source, &options);
        server.fault(
            SERVED_CHUNK,
            Fault::Slow {
                delay: Duration::from_secs(4),
                times: u32::MAX,
            },
        );
        assert_eq!(
            mount.read(VIEW).map(|_| ()),
            Err(Some(libc::EIO)),
            "{source}"
        );
        server.clear_faults();
        assert!(mount.read(VIEW).unwrap() == data, "{source}");
    }
}

#[test]
fn a_404_chunk_gives_eio_and_the_rest_reads() {
    require_fuse!();
    let (server, url, _data, _dir) = served();
    for (source, options) in sources(&server, &url, &[]) {
        let mount = RemoteMount::new(&source, &options);
        server.fault(SERVED_CHUNK, Fault::NotFound);
        assert_eq!(
            mount.read(VIEW).map(|_| ()),
            Err(Some(libc::EIO)),
            "{source}"
        );
        assert!(mount
            .read("axes/gene.txt")
            .unwrap()
            .starts_with(b"g0\ng1\n"));
        server.clear_faults();
    }
}

#[test]
fn a_changed_object_gives_eio_never_mixed_bytes() {
    require_fuse!();
    let (server, url, _data, _dir) = served();
    for (source, options) in sources(&server, &url, &[]) {
        let before = server.requests_for(SERVED_CHUNK);
        let mount = RemoteMount::new(&source, &options);
        // The first request (what learns the size) sees the original; every later one other
        // bytes under a new ETag.
        server.fault(SERVED_CHUNK, Fault::ChangeAfter { after: 1 });
        assert_eq!(
            mount.read(VIEW).map(|_| ()),
            Err(Some(libc::EIO)),
            "{source}"
        );
        assert!(server.requests_for(SERVED_CHUNK) - before >= 2, "{source}");
        server.clear_faults();
    }
}

#[test]
fn a_server_without_range_is_refused_at_mount() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bkt")).unwrap();
    std::fs::copy(
        Path::new(VECTORS).join("zarr_v2.daf.zarr.zip"),
        dir.path().join("bkt/x.daf.zarr.zip"),
    )
    .unwrap();
    let server = FaultServer::serve(dir.path());
    server.fault("/bkt/x.daf.zarr.zip", Fault::IgnoreRange);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let endpoint = format!("endpoint={},no_sign", server.url());
    for args in [
        vec![format!("{}/bkt/x.daf.zarr.zip", server.url())],
        vec!["s3://bkt/x.daf.zarr.zip".into(), "-o".into(), endpoint],
    ] {
        let out = Command::new(common::BIN)
            .arg(&args[0])
            .arg(&mnt)
            .args(&args[1..])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "{args:?}: mounted without Range support"
        );
        assert!(
            stderr.to_lowercase().contains("range"),
            "{args:?}: {stderr}"
        );
        assert!(!common::is_mounted(&mnt));
    }
}

/// The `.blk` files of a cache directory: (count, bytes, any temporary left).
fn cache_files(dir: &Path) -> (usize, u64, bool) {
    let mut found = (0, 0, false);
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".blk") {
            found.0 += 1;
            found.1 += entry.metadata().unwrap().len();
        }
        found.2 |= name.ends_with(".tmp");
    }
    found
}

#[test]
fn the_disk_cache_survives_remounts_and_is_shared_by_mounts_within_its_bound() {
    require_fuse!();
    let (server, url, data, dir) = served();
    let cache = dir.path().join("cache");
    let option = format!("cache={}", cache.display());
    for (source, options) in sources(&server, &url, &["-o", &option]) {
        let _ = std::fs::remove_dir_all(&cache);
        drop(RemoteMount::new(&source, &options));
        {
            let first = RemoteMount::new(&source, &options);
            assert!(first.read(VIEW).unwrap() == data, "{source}");
        }
        // A remount reads the 8 MiB chunk from the disk: one HEAD learns its version, no GET.
        let before = server.log().len();
        let again = RemoteMount::new(&source, &options);
        assert!(again.read(VIEW).unwrap() == data, "{source}");
        let asked: Vec<String> = server.log()[before..]
            .iter()
            .filter(|l| l.path == SERVED_CHUNK)
            .map(|l| l.method.clone())
            .collect();
        assert!(
            asked.iter().all(|m| m == "HEAD") && asked.len() <= 1,
            "{source}: {asked:?}"
        );
    }
    // Two mounts reading at once, one cache: the right bytes, one file a block, no temporary.
    let shared = dir.path().join("shared");
    let option = format!("cache={}", shared.display());
    let mounts = [
        RemoteMount::new(&url, &["-o", &option]),
        RemoteMount::new(&url, &["-o", &option]),
    ];
    std::thread::scope(|s| {
        for mount in &mounts {
            let data = &data;
            s.spawn(move || assert!(mount.read(VIEW).unwrap() == *data));
        }
    });
    drop(mounts);
    let (count, bytes, temporary) = cache_files(&shared);
    assert!(
        !temporary && bytes >= 8 << 20,
        "{count} files, {bytes} bytes"
    );
    // What they fetched is there once: a third mount reading the same adds no file.
    let third = RemoteMount::new(&url, &["-o", &option]);
    assert!(third.read(VIEW).unwrap() == data);
    drop(third);
    assert_eq!(cache_files(&shared), (count, bytes, false));
    // A mount with a smaller bound brings the whole directory within it.
    let small = RemoteMount::new(&url, &["-o", &format!("{option},cache_size=3M")]);
    assert!(small.read(VIEW).unwrap() == data);
    drop(small);
    let (_, bytes, _) = cache_files(&shared);
    assert!(bytes <= 3 << 20, "{bytes} bytes on disk");
}

#[test]
fn a_reader_walking_the_zarr_view_has_the_next_arrays_fetched_ahead() {
    require_fuse!();
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(Path::new(VECTORS).join("zarr_v2.daf.zarr"))
        .arg(dir.path().join("x.daf.zarr"))
        .status()
        .unwrap();
    assert!(status.success());
    let server = FaultServer::serve(dir.path());
    let url = format!("{}/x.daf.zarr", server.url());
    let dir2 = tempfile::tempdir().unwrap();
    let mnt = dir2.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let child = start_foreground(
        &[&url, mnt.to_str().unwrap(), "--view", "zarr"],
        Stdio::inherit(),
    );
    let _guard = common::Unmount(child, mnt.clone());
    let ahead = "/x.daf.zarr/vectors/cell/score/0";
    let fetched = |server: &FaultServer| {
        server
            .log()
            .iter()
            .any(|l| l.path == ahead && l.method == "GET")
    };
    assert!(!fetched(&server), "score/0 fetched at mount");
    // The reader reads the first array of vectors/cell only.
    let first = mnt.join("vectors/cell/counts/nzind/0");
    let read = io_deadline(&mnt, Duration::from_secs(20), move || std::fs::read(first));
    assert!(!read.unwrap().is_empty());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !fetched(&server) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        fetched(&server),
        "the next array's chunk was not fetched ahead"
    );
    // And it is then read from what was fetched, not asked again.
    let gets = server.log().iter().filter(|l| l.path == ahead).count();
    let next = mnt.join("vectors/cell/score/0");
    let bytes = io_deadline(&mnt, Duration::from_secs(20), move || std::fs::read(next)).unwrap();
    let local = std::fs::read(dir.path().join("x.daf.zarr/vectors/cell/score/0")).unwrap();
    assert!(bytes == local);
    assert_eq!(
        server.log().iter().filter(|l| l.path == ahead).count(),
        gets
    );
}
