//! CRC-32 checks of stored ZIP members, through a real mount: a corrupt member gives `EIO` in
//! both views, small members before their first byte, large ones once the background pass has
//! found the mismatch, and then also at their next open although the kernel had cached pages.
//! The same archives served over HTTP (nginx) and mounted by URL: a corrupt stored member gives
//! `EIO` (small ones before their first byte, large ones once every byte was fetched) and one log
//! line, intact members read exactly.

mod common;

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{io_timeout, start_foreground, wait_exit, TestMount, VECTORS};
use daf_mount::views::ViewSelection;

/// Elements of the large vector: 4.8 MB of Float64, above the synchronous-check size (4 MiB).
const BIG: usize = 600_000;

/// A ZipDaf with a small vector (`score`, 12 bytes) and a large one (`big/v`), stored, with one
/// byte flipped in each of the members named in `corrupt`.
fn archive(dir: &Path, corrupt: &[&str]) -> String {
    let path = dir.join("crc.daf.zip");
    let script = r#"
import sys, struct, zipfile
src, out, corrupt = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
n = int(sys.argv[4])
with zipfile.ZipFile(src) as z, zipfile.ZipFile(out, "w") as o:
    for i in z.infolist():
        o.writestr(i.filename, z.read(i.filename))
    o.writestr("axes/big.txt", "".join(f"b{k}\n" for k in range(n)))
    o.writestr("vectors/big/v.json", '{"format":"dense","eltype":"Float64"}')
    o.writestr("vectors/big/v.data", struct.pack(f"<{n}d", *range(n)))
data = bytearray(open(out, "rb").read())
with zipfile.ZipFile(out) as z:
    for name in filter(None, corrupt):
        i = z.getinfo(name)
        nl, el = struct.unpack("<HH", data[i.header_offset + 26:i.header_offset + 30])
        start = i.header_offset + 30 + nl + el
        data[start + i.compress_size - 3] ^= 0x10
open(out, "wb").write(data)
"#;
    let ok = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(Path::new(VECTORS).join("zipdaf_v1_0.daf.zip"))
        .arg(&path)
        .arg(corrupt.join(","))
        .arg(BIG.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    path.display().to_string()
}

/// Reads the whole file at `path`: its length, or the errno.
fn read(path: &Path) -> Result<usize, i32> {
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut buf))
        .map_err(|e| e.raw_os_error().unwrap_or(0))
}

#[test]
fn a_corrupt_small_member_is_eio_in_both_views_from_its_first_read() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = archive(tmp.path(), &["vectors/cell/score.data"]);
    let mount = TestMount::new(&source, ViewSelection::Both);
    let root = mount.path.clone();
    let (files, zarr, other) = io_timeout(&mount.path, move || {
        (
            read(&root.join("crc.daf/vectors/cell/score.data")),
            read(&root.join("crc.daf.zarr/vectors/cell/score/0")),
            read(&root.join("crc.daf/vectors/big/v.data")),
        )
    });
    assert_eq!(files, Err(libc::EIO));
    assert_eq!(zarr, Err(libc::EIO));
    assert_eq!(other, Ok(BIG * 8), "the rest of the data set reads");
}

#[test]
fn a_corrupt_large_member_is_eio_once_checked_even_after_the_kernel_cached_it() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = archive(tmp.path(), &["vectors/big/v.data"]);
    let mount = TestMount::new(&source, ViewSelection::Both);
    let files = mount.path.join("crc.daf/vectors/big/v.data");
    let zarr = mount.path.join("crc.daf.zarr/vectors/big/v/0");
    // The first read may be served while the background pass runs (and get cached).
    let (first, keep) = (files.clone(), files.clone());
    let handle = io_timeout(&mount.path, move || {
        let _ = read(&first);
        std::fs::File::open(&keep).unwrap()
    });
    let ino = mount.core.resolve("crc.daf/vectors/big/v.data").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while mount.core.content(ino).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the background pass never failed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Let the page filler of the open handle finish what it stores.
    std::thread::sleep(Duration::from_millis(500));
    drop(handle);
    let (again, zarr_view) = io_timeout(&mount.path, move || (read(&files), read(&zarr)));
    assert_eq!(again, Err(libc::EIO), "next open of the FilesDaf view");
    assert_eq!(zarr_view, Err(libc::EIO), "the Zarr view");
}

#[test]
fn a_handle_open_before_the_check_failed_reads_eio_after_it() {
    require_fuse!();
    use std::os::unix::fs::FileExt;
    let tmp = tempfile::tempdir().unwrap();
    let source = archive(tmp.path(), &["vectors/big/v.data"]);
    let mount = TestMount::new(&source, ViewSelection::Both);
    let path = mount.path.join("crc.daf/vectors/big/v.data");
    let handle = io_timeout(&mount.path, move || {
        let file = std::fs::File::open(&path).unwrap();
        // Served (and cached by the kernel) while the background pass may still run.
        let _ = file.read_at(&mut [0u8; 4096], 0);
        file
    });
    let ino = mount.core.resolve("crc.daf/vectors/big/v.data").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let handle = handle.try_clone().unwrap();
        let got = io_timeout(&mount.path, move || {
            handle
                .read_at(&mut [0u8; 4096], 0)
                .map_err(|e| e.raw_os_error())
        });
        if got == Err(Some(libc::EIO)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the still-open handle kept reading the corrupt member: {got:?} (check failed: {})",
            mount.core.content(ino).is_err()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn intact_members_read_in_full() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = archive(tmp.path(), &[]);
    let mount = TestMount::new(&source, ViewSelection::Both);
    let root = mount.path.clone();
    let (big, small) = io_timeout(&mount.path, move || {
        (
            read(&root.join("crc.daf.zarr/vectors/big/v/0")),
            read(&root.join("crc.daf/vectors/cell/score.data")),
        )
    });
    assert_eq!(big, Ok(BIG * 8));
    assert_eq!(small, Ok(12));
}

/// Unmounts (and waits for) a foreground daemon when dropped.
struct Daemon(std::process::Child, std::path::PathBuf);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = std::process::Command::new("fusermount3")
            .arg("-u")
            .arg(&self.1)
            .status();
        wait_exit(&mut self.0, &self.1, Duration::from_secs(20));
    }
}

#[test]
fn remote_stored_members_are_crc_checked_small_first_large_once_all_fetched() {
    require_fuse!();
    require_nginx!();
    let tmp = tempfile::tempdir().unwrap();
    for (dir, corrupt) in [
        (
            "bad",
            &["vectors/cell/score.data", "vectors/big/v.data"][..],
        ),
        ("good", &[][..]),
    ] {
        std::fs::create_dir(tmp.path().join(dir)).unwrap();
        archive(&tmp.path().join(dir), corrupt);
    }
    let (_nginx, base) = common::http::Nginx::serve(tmp.path());
    let log = tmp.path().join("log");
    let mut mounts = Vec::new();
    for dir in ["bad", "good"] {
        let mnt = tmp.path().join(format!("mnt-{dir}"));
        std::fs::create_dir(&mnt).unwrap();
        let url = format!("{base}/{dir}/crc.daf.zip");
        let stderr = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = start_foreground(&[&url, mnt.to_str().unwrap()], stderr.into());
        mounts.push(Daemon(child, mnt));
    }
    let (bad, good) = (mounts[0].1.clone(), mounts[1].1.clone());
    let local = TestMount::new(
        &tmp.path().join("bad/crc.daf.zip").display().to_string(),
        ViewSelection::Both,
    );
    let (root, local_root) = (bad.clone(), local.path.clone());
    let got = io_timeout(&bad, move || {
        let small = read(&root.join("crc.daf/vectors/cell/score.data"));
        let small_zarr = read(&root.join("crc.daf.zarr/vectors/cell/score/0"));
        let large = read(&root.join("crc.daf/vectors/big/v.data"));
        // The next open drops what the kernel cached of it.
        let large_again = read(&root.join("crc.daf/vectors/big/v.data"));
        let large_zarr = read(&root.join("crc.daf.zarr/vectors/big/v/0"));
        let intact: Vec<(Vec<u8>, Vec<u8>)> = [
            "crc.daf/matrices/cell/gene/expr.data",
            "crc.daf/axes/big.txt",
            "crc.daf.zarr/vectors/cell/counts/nzval/0",
        ]
        .iter()
        .map(|p| {
            (
                std::fs::read(root.join(p)).unwrap(),
                std::fs::read(local_root.join(p)).unwrap(),
            )
        })
        .collect();
        (small, small_zarr, large, large_again, large_zarr, intact)
    });
    assert_eq!(got.0, Err(libc::EIO), "small corrupt member");
    assert_eq!(got.1, Err(libc::EIO), "small corrupt member, Zarr view");
    assert_eq!(got.2, Err(libc::EIO), "large corrupt member, read whole");
    assert_eq!(got.3, Err(libc::EIO), "large corrupt member, next open");
    assert_eq!(got.4, Err(libc::EIO), "large corrupt member, Zarr view");
    for (remote, local) in &got.5 {
        assert!(!remote.is_empty());
        assert_eq!(remote, local);
    }
    // An intact large member read by ranges (out of order) is never refused.
    let root = good.clone();
    let (head, tail, whole) = io_timeout(&good, move || {
        use std::os::unix::fs::FileExt;
        let path = root.join("crc.daf/vectors/big/v.data");
        let file = std::fs::File::open(&path).unwrap();
        let mut tail = vec![0u8; 8];
        file.read_exact_at(&mut tail, (BIG as u64 - 1) * 8).unwrap();
        let mut head = vec![0u8; 8];
        file.read_exact_at(&mut head, 8).unwrap();
        (head, tail, read(&path))
    });
    assert_eq!(head, 1f64.to_le_bytes());
    assert_eq!(tail, ((BIG - 1) as f64).to_le_bytes());
    assert_eq!(whole, Ok(BIG * 8));
    drop(local);
    drop(mounts);
    let text = std::fs::read_to_string(&log).unwrap();
    // The check's own line (the FUSE layer adds its usual "read: …" line once, as locally).
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("data has")).collect();
    assert_eq!(lines.len(), 2, "one line per corrupt member: {text}");
    for entry in ["vectors/cell/score.data", "vectors/big/v.data"] {
        let line = format!("{base}/bad/crc.daf.zip: entry {entry}: stored entry fails its CRC-32");
        assert!(lines.iter().any(|l| l.contains(&line)), "{line}: {text}");
    }
}
