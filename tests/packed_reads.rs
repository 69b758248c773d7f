//! Reading a large packed property through a real daemon (`daf-mount -f`): its flat `.data` is
//! decoded chunk by chunk on read, so the daemon's anonymous memory (RssAnon) stays far below the
//! file's size, a random 4 KiB read gives the right bytes at once, and `st_size` is exact before
//! any read.

mod common;

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{io_deadline, rss_anon, start_foreground, wait_exit};

/// Rows (cells) and columns (genes) of the packed Float64 matrix: 96 MiB flat.
const NROWS: u64 = 8192;
const NCOLS: u64 = 1536;
/// The inner chunk: 1024 rows of one column (8 KiB), as DataAxesFormats packs a matrix.
const INNER: u64 = 1024;

/// Element `(row, col)` of the matrix (column-major position `col * NROWS + row`).
fn value(position: u64) -> f64 {
    (position % 1_000_003) as f64 * 0.25
}

/// A FilesDaf 1.1 directory with one packed matrix `matrices/cell/gene/m` (zstd, index at the
/// start with its CRC-32C, no ZIP framing: the reader needs only the index).
fn write_source(root: &Path) {
    let dir = |p: &str| std::fs::create_dir_all(root.join(p)).unwrap();
    dir("axes");
    dir("scalars");
    dir("vectors/cell");
    dir("vectors/gene");
    dir("matrices/cell/gene");
    std::fs::write(root.join("daf.json"), "{\"version\":[1,1]}\n").unwrap();
    let axis = |name: &str, n: u64| {
        let text: String = (0..n).map(|i| format!("{name}{i}\n")).collect();
        std::fs::write(root.join(format!("axes/{name}.txt")), text).unwrap();
    };
    axis("cell", NROWS);
    axis("gene", NCOLS);
    let descriptor = format!(
        "{{\"format\":\"dense\",\"eltype\":\"Float64\",\"packed_format\":\"indexed+zipped\",\
         \"chunk_shape\":[{INNER},1],\"compression\":\"zstd\",\"compression_level\":1,\
         \"index_location\":\"start\"}}\n"
    );
    std::fs::write(root.join("matrices/cell/gene/m.json"), descriptor).unwrap();
    let per_col = NROWS / INNER;
    let count = (NCOLS * per_col) as usize;
    let index_len = count * 16 + 4;
    let mut index = Vec::with_capacity(index_len);
    let mut body = Vec::new();
    let mut chunk = Vec::with_capacity((INNER * 8) as usize);
    for col in 0..NCOLS {
        for k in 0..per_col {
            chunk.clear();
            for r in 0..INNER {
                chunk.extend(value(col * NROWS + k * INNER + r).to_le_bytes());
            }
            let frame = zstd::bulk::compress(&chunk, 1).unwrap();
            index.extend(((index_len + body.len()) as u64).to_le_bytes());
            index.extend((frame.len() as u64).to_le_bytes());
            body.extend(frame);
        }
    }
    let crc = crc32c::crc32c(&index);
    index.extend(crc.to_le_bytes());
    index.extend(body);
    std::fs::write(root.join("matrices/cell/gene/m.zip"), index).unwrap();
}

fn expected_bytes(offset: u64, len: usize) -> Vec<u8> {
    (offset / 8..(offset + len as u64) / 8)
        .flat_map(|i| value(i).to_le_bytes())
        .collect()
}

#[test]
fn a_large_packed_matrix_is_read_in_bounded_memory() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("big.daf");
    write_source(&source);
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut child = start_foreground(
        &[
            source.to_str().unwrap(),
            mnt.to_str().unwrap(),
            "-o",
            "ro",
            "--view",
            "files",
        ],
        Stdio::inherit(),
    );
    let pid = child.id();
    let file = mnt.join("matrices/cell/gene/m.data");
    let size = NROWS * NCOLS * 8;
    let baseline = rss_anon(pid);
    let (peak, stat_size) = io_deadline(&mnt, Duration::from_secs(180), move || {
        let stat_size = std::fs::metadata(&file).unwrap().len();
        let mut f = std::fs::File::open(&file).unwrap();
        // A random 4 KiB read first: column 777, rows 2048..2560.
        let offset = (777 * NROWS + 2048) * 8;
        f.seek(SeekFrom::Start(offset)).unwrap();
        let mut page = vec![0u8; 4096];
        f.read_exact(&mut page).unwrap();
        assert!(page == expected_bytes(offset, 4096), "4 KiB at {offset}");
        // Then the whole file, in 1 MiB reads, watching the daemon's memory.
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        let mut peak = 0;
        let mut at = 0u64;
        while at < size {
            f.read_exact(&mut buf).unwrap();
            assert!(buf == expected_bytes(at, buf.len()), "1 MiB at {at}");
            at += buf.len() as u64;
            peak = peak.max(rss_anon(pid));
        }
        assert_eq!(f.read(&mut buf).unwrap(), 0);
        (peak, stat_size)
    });
    assert_eq!(stat_size, size);
    assert!(Command::new("fusermount3")
        .arg("-u")
        .arg(&mnt)
        .status()
        .unwrap()
        .success());
    let status = wait_exit(&mut child, &mnt, Duration::from_secs(20));
    assert_eq!(status.code(), Some(0));
    eprintln!(
        "packed {} MiB: daemon RssAnon {} MiB at start, peak {} MiB",
        size >> 20,
        baseline >> 20,
        peak >> 20
    );
    assert!(
        peak < 64 << 20,
        "reading {} MiB took the daemon to {} MiB of RssAnon",
        size >> 20,
        peak >> 20
    );
}
