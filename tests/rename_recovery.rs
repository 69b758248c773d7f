//! A commit into a directory source renames its staged payload into the source (same file
//! system): a daemon killed in the middle of that commit's swap, after the payload left the
//! staging area, leaves a record of the swap's steps, and the next writable mount finishes it:
//! the item is committed whole, nothing of it is left staged.

mod common;

use std::fs;

use common::{copy_fixture, io_timeout, start_foreground, Unmount};
use daf_mount::staging::moves::Move;
use daf_mount::staging::StagingArea;

#[test]
fn a_swap_cut_short_after_the_payload_was_renamed_is_finished_at_the_next_mount() {
    require_fuse!();
    let (tmp, source) = copy_fixture("files_v1_0.daf");
    let cell = source.join("vectors/cell");
    let staging = StagingArea::for_source(&source);
    // What a commit of vectors/cell/big had done when its daemon was killed: staged, copied the
    // descriptor beside its place, recorded the swap, renamed the payload into the source.
    let staged = staging.root().join("files_v1_0.daf/vectors/cell");
    fs::create_dir_all(&staged).unwrap();
    let json = br#"{"format":"dense","eltype":"Float32"}"#;
    fs::write(staged.join("big.json"), json).unwrap();
    fs::write(staged.join("big.data"), [7u8; 12]).unwrap();
    let temp = cell.join(".daf-mount-tmp.1.c0");
    fs::write(&temp, json).unwrap();
    staging
        .record_moves(&[
            Move::Rename {
                from: staged.join("big.data"),
                to: cell.join("big.data"),
            },
            Move::Rename {
                from: temp.clone(),
                to: cell.join("big.json"),
            },
            Move::Remove(staged.join("big.json")),
        ])
        .unwrap();
    fs::rename(staged.join("big.data"), cell.join("big.data")).unwrap();
    // The next writable mount.
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let daemon = start_foreground(
        &[
            source.to_str().unwrap(),
            mnt.to_str().unwrap(),
            "--view",
            "files",
        ],
        std::process::Stdio::null(),
    );
    let mut guard = Unmount(daemon, mnt.clone());
    let root = mnt.clone();
    let (data, descriptor) = io_timeout(&mnt, move || {
        let data = fs::read(root.join("vectors/cell/big.data"));
        let json = fs::read(root.join("vectors/cell/big.json"));
        (data.ok(), json.ok())
    });
    assert!(guard.unmount().success());
    assert_eq!(
        data.as_deref(),
        Some(&[7u8; 12][..]),
        "the item is not whole"
    );
    assert_eq!(descriptor.as_deref(), Some(&json[..]));
    // In the source, and nothing of it staged any more, nor the record.
    assert_eq!(fs::read(cell.join("big.data")).unwrap(), [7u8; 12]);
    assert_eq!(fs::read(cell.join("big.json")).unwrap(), json);
    assert!(!temp.exists());
    assert!(
        !staged.join("big.json").exists(),
        "a committed file is still staged"
    );
    assert!(staging.recorded_moves().unwrap().is_empty());
}

#[test]
fn temporaries_a_killed_daemon_left_are_removed_at_the_next_writable_mount() {
    require_fuse!();
    let (tmp, source) = copy_fixture("files_v1_0.daf");
    let staging = StagingArea::for_source(&source);
    // A copy beside its place and a rewritten document, killed before their renames, and a
    // record of moves killed before it was renamed into place (its swap had not begun).
    let copy = source.join("vectors/cell/.daf-mount-tmp.1.c0");
    let document = source.join(".daf-mount-tmp.1.2");
    let mut record = staging.root().as_os_str().to_owned();
    record.push(".moves.tmp");
    for path in [&copy, &document, &std::path::PathBuf::from(&record)] {
        fs::write(path, b"half").unwrap();
    }
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let daemon = start_foreground(
        &[source.to_str().unwrap(), mnt.to_str().unwrap()],
        std::process::Stdio::null(),
    );
    let mut guard = Unmount(daemon, mnt.clone());
    let root = mnt.clone();
    let listing = io_timeout(&mnt, move || {
        let mut names: Vec<_> = fs::read_dir(root.join("files_v1_0.daf/vectors/cell"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        names.sort();
        names
    });
    assert!(guard.unmount().success());
    assert!(!listing.is_empty(), "the mount shows no vectors");
    assert!(
        !copy.exists(),
        "a killed copy's temporary is left in the source"
    );
    assert!(!document.exists(), "a killed rewrite's temporary is left");
    assert!(
        !std::path::Path::new(&record).exists(),
        "a record of moves cut short is left"
    );
    assert!(source.join("daf.json").exists() && source.join("vectors/cell").is_dir());
}
