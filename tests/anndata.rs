//! The AnnData view (`--anndata`): read-only inside (every change `EROFS`) while the other views
//! of the same read-write mount still take writes, and a property committed through them shows
//! in it; the other views byte for byte the same with or without it, for every source kind; the
//! mount refused with one line (and nothing mounted) when the selection cannot be decided.
//! The values and the foreign readers (anndata, scanpy) are `tests/interop/test_anndata.py`'s.

mod common;

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use common::{
    copy_fixture, every_local_source, io_timeout, rendered_views, run_mount, TestMount, PACKED,
    VECTORS,
};
use daf_mount::core::DafFs;
use daf_mount::formats::source::{open_source, Format};
use daf_mount::staging::StagingArea;
use daf_mount::views::anndata::Request;
use daf_mount::views::{view_roots, ViewKind, ViewOptions, ViewSelection};

fn options(anndata: Option<&str>, zarr: Format) -> ViewOptions {
    ViewOptions {
        zarr: Some(zarr),
        anndata: anndata.map(|a| Request::parse(a).unwrap()),
        ..ViewOptions::from(ViewSelection::Both)
    }
}

/// A read-write mount of `source` with the AnnData view of `anndata`.
fn writable_mount(source: &Path, anndata: &str) -> TestMount {
    let source = source.to_str().unwrap();
    let opened = open_source(source).unwrap();
    let staging = StagingArea::for_source(&opened.path);
    let core = DafFs::with_staging(
        opened.datasets,
        options(Some(anndata), Format::ZarrV2),
        SystemTime::UNIX_EPOCH,
        Some(staging),
    );
    TestMount::serving(Arc::new(core), true, source)
}

fn errno_of<T>(result: std::io::Result<T>, what: &str) -> i32 {
    match result {
        Ok(_) => panic!("{what}: succeeded inside the AnnData view"),
        Err(e) => e.raw_os_error().unwrap_or_else(|| panic!("{what}: {e}")),
    }
}

#[test]
fn every_change_inside_the_view_is_erofs_and_the_other_views_still_write() {
    require_fuse!();
    let (_tmp, source) = copy_fixture("files_v1_0.daf");
    let mount = writable_mount(&source, "cell:gene:expr");
    let root = mount.path.clone();
    io_timeout(&mount.path, move || {
        let view = root.join("files_v1_0.anndata.zarr");
        let at = |rel: &str| view.join(rel);
        let erofs = libc::EROFS;
        let cases: Vec<(&str, i32)> = vec![
            (
                "create",
                errno_of(fs::File::create(at("obs/new")), "create"),
            ),
            (
                "open for writing",
                errno_of(OpenOptions::new().write(true).open(at("X/0.0")), "open"),
            ),
            (
                "truncate",
                errno_of(
                    OpenOptions::new()
                        .write(true)
                        .truncate(true)
                        .open(at("obs/.zattrs")),
                    "truncate",
                ),
            ),
            ("mkdir", errno_of(fs::create_dir(at("layers/new")), "mkdir")),
            (
                "unlink",
                errno_of(fs::remove_file(at("X/.zarray")), "unlink"),
            ),
            ("rmdir", errno_of(fs::remove_dir(at("obsm")), "rmdir")),
            (
                "rename within",
                errno_of(fs::rename(at("obs/score"), at("obs/moved")), "rename"),
            ),
            (
                "rename out",
                errno_of(
                    fs::rename(at("uns/ratio/0"), root.join("files_v1_0.daf/x")),
                    "rename out",
                ),
            ),
            (
                "rename in",
                errno_of(
                    fs::rename(
                        root.join("files_v1_0.daf/scalars/ratio.json"),
                        at("uns/r.json"),
                    ),
                    "rename in",
                ),
            ),
            (
                "link",
                errno_of(fs::hard_link(at("X/0.0"), at("X/1.0")), "link"),
            ),
            (
                "set times",
                errno_of(
                    fs::File::open(at("X/0.0"))
                        .and_then(|f| f.set_modified(SystemTime::UNIX_EPOCH)),
                    "set times",
                ),
            ),
            (
                "set a directory's times",
                errno_of(
                    fs::File::open(at("obs")).and_then(|f| f.set_modified(SystemTime::UNIX_EPOCH)),
                    "set a directory's times",
                ),
            ),
        ];
        for (what, errno) in cases {
            assert_eq!(errno, erofs, "{what}: errno {errno}");
        }
        // The view is unchanged, and nothing was staged for it.
        assert!(at("X/0.0").exists() && at("obs/score/0").exists());
        assert!(!at("obs/new").exists() && !at("obs/moved").exists());
        // The FilesDaf view of the same mount takes a new vector of the obs axis ...
        let files = root.join("files_v1_0.daf/vectors/cell");
        fs::write(
            files.join("depth.json"),
            "{\"format\":\"dense\",\"eltype\":\"Int32\"}\n",
        )
        .unwrap();
        let values: Vec<u8> = [5i32, 6, 7].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut data = fs::File::create(files.join("depth.data")).unwrap();
        data.write_all(&values).unwrap();
        data.sync_all().unwrap();
        drop(data);
        // ... which the AnnData view then shows as a column, in its dataframe and consolidated
        // metadata.
        assert_eq!(fs::read(at("obs/depth/0")).unwrap(), values);
        let zattrs = fs::read_to_string(at("obs/.zattrs")).unwrap();
        assert!(
            zattrs.contains(r#""column-order":["counts","depth","is_marker","score","type"]"#),
            "{zattrs}"
        );
        let listed: Vec<String> = fs::read_dir(at("obs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(listed.contains(&"depth".to_string()), "{listed:?}");
        let zmetadata = fs::read_to_string(at(".zmetadata")).unwrap();
        assert!(
            zmetadata.contains("obs/depth/.zarray"),
            "the consolidated metadata"
        );
    });
    drop(mount);
    // Nothing of the view was staged beside the source.
    let staged = source.parent().unwrap().join(".files_v1_0.daf-mount");
    let leftover: Vec<_> = walk(&staged);
    assert!(
        leftover.iter().all(|p| !p.contains("anndata")),
        "{leftover:?}"
    );
}

fn walk(dir: &Path) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flat_map(|e| {
            let path = e.unwrap().path();
            let mut below = walk(&path);
            below.push(path.display().to_string());
            below
        })
        .collect()
}

#[test]
fn the_other_views_are_byte_for_byte_the_same_with_the_anndata_view() {
    // Not the whole of multi_v3.dafs.zarr.zip: its data set g2 has no matrix, so no AnnData view
    // (the refusal test mounts it); its group g1 stands for it.
    let mut sources = every_local_source();
    sources.retain(|s| !s.ends_with("multi_v3.dafs.zarr.zip"));
    sources.push(format!("{PACKED}/multi_v3.dafs.zarr.zip#/g1"));
    sources.push(format!("{VECTORS}/multi_v1_1.dafs.zip#/g1"));
    for source in sources {
        let opened = open_source(&source).unwrap();
        // The packed data sets join gene and batch; the others cell and gene.
        let anndata = if source.contains("packed.") || source.contains("multi_v3") {
            "gene:batch:expr"
        } else if source.contains("foreign") {
            "cell:gene:umis"
        } else {
            "cell:gene:expr"
        };
        for zarr in [Format::ZarrV2, Format::ZarrV3] {
            let plain = rendered_views(&opened.datasets, &options(None, zarr), None);
            let with = options(Some(anndata), zarr);
            let roots = view_roots(&opened.datasets, &with);
            let shown = roots.iter().filter(|r| r.kind == ViewKind::AnnData).count();
            assert_eq!(
                shown,
                opened.datasets.len(),
                "{source}: an AnnData view each"
            );
            let mut others = rendered_views(&opened.datasets, &with, Some(ViewKind::Files));
            others.extend(rendered_views(
                &opened.datasets,
                &with,
                Some(ViewKind::Zarr),
            ));
            assert_eq!(others, plain, "{source} in {zarr:?}");
            let anndata = rendered_views(&opened.datasets, &with, Some(ViewKind::AnnData));
            assert!(
                anndata.keys().all(|p| p.contains(".anndata.zarr")),
                "{source}"
            );
            assert!(!anndata.is_empty(), "{source}");
        }
    }
}

#[test]
fn a_selection_that_cannot_be_decided_refuses_the_mount_with_one_line() {
    require_fuse!();
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let m = mnt.to_str().unwrap();
    let tiny = format!("{VECTORS}/files_v1_0.daf");
    let multi = format!("{PACKED}/multi_v3.dafs.zarr.zip");
    let refusals = [
        (
            vec![tiny.as_str(), m, "--anndata"],
            "daf-mount: files_v1_0: --anndata: cannot choose obs and var among the 2 axes (cell, gene): say --anndata OBS:VAR[:X] or set the String scalars obs_is and var_is",
        ),
        (
            vec![tiny.as_str(), m, "--anndata", "cell:gene"],
            "daf-mount: files_v1_0: --anndata cell:gene: cannot choose X among the 2 matrices of cell and gene (expr, umis): say --anndata cell:gene:X or set the String scalar X_is",
        ),
        (
            vec![tiny.as_str(), m, "-o", "ro,anndata=cell:tissue:expr"],
            "daf-mount: files_v1_0: --anndata cell:tissue:expr: no axis tissue (axes: cell, gene)",
        ),
        (
            vec![tiny.as_str(), m, "--anndata", "cell:gene:score"],
            "daf-mount: files_v1_0: --anndata cell:gene:score: no numeric or Bool matrix score joins cell and gene (matrices: expr, umis)",
        ),
        // A whole archive: every data set must have its view (g2 has no matrix).
        (
            vec![multi.as_str(), m, "-o", "ro", "--anndata", "gene:batch:expr"],
            "daf-mount: g2: --anndata gene:batch:expr: no numeric or Bool matrix expr joins gene and batch (there is none)",
        ),
    ];
    for (args, line) in refusals {
        let (code, stderr, listed) = run_mount(&args, &mnt);
        let mounted = listed.is_some();
        assert_eq!(code, 1, "{args:?}: {stderr}");
        assert_eq!(stderr, format!("{line}\n"), "{args:?}");
        assert!(!mounted, "{args:?}: mounted");
    }
    // Usage errors: exit status 2, one line.
    let usage = [
        vec!["--anndata", tiny.as_str(), m, "x"],
        vec![tiny.as_str(), m, "--anndata", "--view", "files"],
        vec![tiny.as_str(), m, "-o", "anndata=cell"],
    ];
    for args in usage {
        let (code, stderr, listed) = run_mount(&args, &mnt);
        let mounted = listed.is_some();
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("daf-mount: "), "{args:?}: {stderr}");
        assert!(!mounted, "{args:?}: mounted");
    }
    // And a selection that holds mounts, with the three views side by side.
    let args = [tiny.as_str(), m, "-o", "ro", "--anndata", "cell:gene:expr"];
    let (code, stderr, listed) = run_mount(&args, &mnt);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        listed.unwrap(),
        [
            "files_v1_0.anndata.zarr",
            "files_v1_0.daf",
            "files_v1_0.daf.zarr"
        ]
    );
}
