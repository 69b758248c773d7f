//! What the kernel keeps of listings: directories are opened without a request, so the kernel
//! caches each directory's listing (and keeps names and attributes for the entry timeout). A
//! commit through one view must still show at once in the other view's directories: their
//! listings and their `st_nlink` (one per sub-directory: a Zarr array is one).

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{copy_fixture, io_timeout, TestMount, VECTORS};
use daf_mount::views::ViewSelection;

fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn a_commit_through_one_view_shows_at_once_in_the_other_views_cached_directories() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    for ext in ["json", "data"] {
        std::fs::remove_file(source.join(format!("vectors/cell/score.{ext}"))).unwrap();
    }
    let mount = TestMount::writable(source.to_str().unwrap(), ViewSelection::Both);
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let files = root.join("files_v1_0.daf/vectors/cell");
        let zarr = root.join("files_v1_0.daf.zarr/vectors/cell");
        // Listed to the end (the kernel now holds both listings) and stat'ed.
        let zarr_before = names(&zarr);
        let files_before = names(&files);
        assert!(!zarr_before.contains(&"score".to_string()));
        let nlink = std::fs::metadata(&zarr).unwrap().nlink();
        let arrays = zarr_before.iter().filter(|n| zarr.join(n).is_dir()).count();
        assert_eq!(nlink, 2 + arrays as u64);

        // A new vector through the FilesDaf view: one more array in the Zarr view.
        let fixture = Path::new(VECTORS).join("files_v1_0.daf/vectors/cell");
        for ext in ["json", "data"] {
            let name = format!("score.{ext}");
            std::fs::write(
                files.join(&name),
                std::fs::read(fixture.join(&name)).unwrap(),
            )
            .unwrap();
        }
        let mut zarr_after = zarr_before.clone();
        zarr_after.push("score".into());
        zarr_after.sort();
        assert_eq!(names(&zarr), zarr_after);
        assert_eq!(std::fs::metadata(&zarr).unwrap().nlink(), nlink + 1);
        assert!(zarr.join("score/0").is_file());

        // Removed through the Zarr view: gone from both at once.
        std::fs::remove_dir_all(zarr.join("score")).unwrap();
        assert_eq!(names(&zarr), zarr_before);
        assert_eq!(names(&files), files_before);
        assert_eq!(std::fs::metadata(&zarr).unwrap().nlink(), nlink);
    });
}
