//! Hostile FilesDaf content in directory sources: bad `daf.json` and descriptors, bad scalars,
//! axes and payloads, hostile and non-UTF-8 names, FIFO payloads, deep directories, and the
//! helpers the other format families share. Symbolic links, FIFOs and sockets are in
//! `formats_links.rs`, Zarr content in `formats_zarr.rs`.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::{fixture_copy, Case, Expect};

/// The mounted FilesDaf view of the FilesDaf fixture.
pub const F: &str = "files_v1_0.daf";

/// Writes `bytes` at `root/rel`, creating parents.
pub fn put(root: &Path, rel: &str, bytes: impl AsRef<[u8]>) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// A FIFO at `root/rel` (replacing any file there).
pub fn fifo(root: &Path, rel: &str) {
    let path = root.join(rel);
    let _ = std::fs::remove_file(&path);
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
}

/// A symbolic link at `root/rel` to `target` (replacing any file there).
pub fn link(root: &Path, rel: &str, target: impl AsRef<Path>) {
    let path = root.join(rel);
    let _ = std::fs::remove_file(&path);
    symlink(target, path).unwrap();
}

/// A mount that works, with these EIO suffixes, log texts, absent and present paths.
/// `files_v1_0.daf/vectors/cell/NNN…N.EXT` with a 250-byte name.
fn long_vector(ext: &str) -> &'static str {
    Box::leak(format!("files_v1_0.daf/vectors/cell/{}.{ext}", "n".repeat(250)).into_boxed_str())
}

pub fn mounted(
    eio: &[&'static str],
    log: &[&'static str],
    absent: &[&'static str],
    present: &[&'static str],
) -> Expect {
    Expect::Mounted {
        eio: eio.to_vec(),
        log: log.to_vec(),
        absent: absent.to_vec(),
        present: present.to_vec(),
    }
}

fn files(dir: &Path) -> PathBuf {
    fixture_copy(dir, F)
}

/// A FilesDaf case: the fixture changed by `edit`.
pub fn fcase(name: &str, expect: Expect, edit: impl Fn(&Path) + 'static) -> Case {
    Case::new(format!("filesdaf: {name}"), expect, move |dir| {
        let root = files(dir);
        edit(&root);
        root.display().to_string()
    })
}

fn nested(depth: usize, leaf: &str) -> String {
    format!("[{}{}]", "[".repeat(depth), "]".repeat(depth)).replace("[]", leaf)
}

/// A `daf.json` the mount must refuse, with the text of its refusal.
fn bad_markers() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    vec![
        ("not JSON", b"{\"version\": [1,".to_vec(), "daf.json"),
        ("empty", Vec::new(), "daf.json is not JSON"),
        (
            "not UTF-8",
            b"{\"version\":[1,0]}\xff".to_vec(),
            "daf.json is not JSON",
        ),
        ("an array", b"[1,0]".to_vec(), "daf.json has no version"),
        ("no version", b"{}".to_vec(), "daf.json has no version"),
        (
            "future version",
            b"{\"version\":[2,0]}".to_vec(),
            "unsupported FilesDaf version 2.0",
        ),
        (
            "minor version",
            b"{\"version\":[1,7]}".to_vec(),
            "unsupported FilesDaf version 1.7",
        ),
        (
            "one number",
            b"{\"version\":[1]}".to_vec(),
            "not [major, minor]",
        ),
        (
            "strings",
            b"{\"version\":[\"1\",\"0\"]}".to_vec(),
            "not [major, minor]",
        ),
        (
            "negative",
            b"{\"version\":[-1,0]}".to_vec(),
            "not [major, minor]",
        ),
        ("huge", b"{\"version\":[1e400,0]}".to_vec(), "daf.json"),
        (
            "deep",
            nested(100_000, "1").into_bytes(),
            "daf.json is not JSON",
        ),
        (
            "deep version",
            format!("{{\"version\":{}}}", nested(5000, "1")).into_bytes(),
            "daf.json",
        ),
    ]
}

/// A descriptor (`vectors/cell/score.json`) that must make the property skipped.
fn bad_descriptors() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("not JSON", b"{\"format\":".to_vec()),
        ("empty", Vec::new()),
        (
            "not UTF-8",
            b"{\"format\":\"dense\",\"eltype\":\"Float32\xff\"}".to_vec(),
        ),
        (
            "unknown eltype",
            b"{\"format\":\"dense\",\"eltype\":\"Float16\"}".to_vec(),
        ),
        (
            "unknown format",
            b"{\"format\":\"packed\",\"eltype\":\"Float32\"}".to_vec(),
        ),
        (
            "number format",
            b"{\"format\":1,\"eltype\":\"Float32\"}".to_vec(),
        ),
        ("array", b"[\"dense\",\"Float32\"]".to_vec()),
        ("deep", nested(100_000, "0").into_bytes()),
        (
            "sparse float index",
            b"{\"format\":\"sparse\",\"eltype\":\"Float32\",\"indtype\":\"Float64\"}".to_vec(),
        ),
        (
            "sparse no index",
            b"{\"format\":\"sparse\",\"eltype\":\"Float32\"}".to_vec(),
        ),
    ]
}

/// A scalar file that must be skipped.
fn bad_scalars() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("not JSON", b"{\"value\":".to_vec()),
        (
            "wrong value type",
            b"{\"type\":\"Float64\",\"value\":\"x\"}".to_vec(),
        ),
        (
            "unknown type",
            b"{\"type\":\"Float16\",\"value\":1}".to_vec(),
        ),
        (
            "Int8 overflow",
            b"{\"type\":\"Int8\",\"value\":1000}".to_vec(),
        ),
        (
            "negative UInt64",
            b"{\"type\":\"UInt64\",\"value\":-1}".to_vec(),
        ),
        (
            "huge integer",
            b"{\"type\":\"Int64\",\"value\":1e400}".to_vec(),
        ),
        (
            "deep value",
            format!("{{\"type\":\"String\",\"value\":{}}}", nested(100_000, "1")).into_bytes(),
        ),
        (
            "not UTF-8",
            b"{\"type\":\"String\",\"value\":\"\xff\"}".to_vec(),
        ),
    ]
}

pub fn cases() -> Vec<Case> {
    let mut cases = vec![Case::new(
        "filesdaf fixture as it is",
        Expect::clean(),
        |dir| fixture_copy(dir, F).display().to_string(),
    )];
    for (name, bytes, refusal) in bad_markers() {
        cases.push(fcase(
            &format!("daf.json {name}"),
            Expect::Refused(refusal),
            move |r| put(r, "daf.json", &bytes),
        ));
    }
    cases.push(fcase(
        "daf.json is a FIFO",
        Expect::Refused("not a daf data set"),
        |r| fifo(r, "daf.json"),
    ));
    cases.push(fcase(
        "daf.json links outside",
        Expect::Refused("not a daf data set"),
        |r| {
            put(r, "../elsewhere/daf.json", "{\"version\":[1,0]}\n");
            link(r, "daf.json", r.join("../elsewhere/daf.json"));
        },
    ));
    for (name, bytes) in bad_descriptors() {
        cases.push(fcase(
            &format!("descriptor {name}"),
            mounted(
                &[],
                &["skipping vectors/cell/score"],
                &[
                    "files_v1_0.daf/vectors/cell/score.json",
                    "files_v1_0.daf/vectors/cell/score.data",
                    "files_v1_0.daf.zarr/vectors/cell/score",
                ],
                &["files_v1_0.daf/vectors/cell/type.txt"],
            ),
            move |r| put(r, "vectors/cell/score.json", &bytes),
        ));
    }
    for (name, bytes) in bad_scalars() {
        cases.push(fcase(
            &format!("scalar {name}"),
            mounted(
                &[],
                &["skipping scalar bad"],
                &[
                    "files_v1_0.daf/scalars/bad.json",
                    "files_v1_0.daf.zarr/scalars/bad",
                ],
                &["files_v1_0.daf/scalars/ratio.json"],
            ),
            move |r| put(r, "scalars/bad.json", &bytes),
        ));
    }
    cases.extend(name_cases());
    cases.extend(payload_cases());
    cases.extend(super::formats_links::cases());
    cases
}

/// Hostile and odd names.
fn name_cases() -> Vec<Case> {
    let scalar = "{\"type\":\"Int64\",\"value\":1}\n";
    let dotdot = "a name that is '.' or '..'";
    vec![
        fcase(
            "scalar named ..",
            mounted(&[], &[dotdot], &[], &[]),
            move |r| put(r, "scalars/...json", scalar),
        ),
        fcase(
            "scalar named .",
            mounted(&[], &[dotdot], &[], &[]),
            move |r| put(r, "scalars/..json", scalar),
        ),
        fcase("axis named ..", mounted(&[], &[dotdot], &[], &[]), |r| {
            put(r, "axes/...txt", "a\n")
        }),
        fcase("vector named ..", mounted(&[], &[dotdot], &[], &[]), |r| {
            std::fs::copy(
                r.join("vectors/cell/score.json"),
                r.join("vectors/cell/...json"),
            )
            .unwrap();
            std::fs::copy(
                r.join("vectors/cell/score.data"),
                r.join("vectors/cell/...data"),
            )
            .unwrap();
        }),
        fcase(
            "scalar name with a newline",
            mounted(
                &[],
                &["control character"],
                &["files_v1_0.daf/scalars/a\nb.json"],
                &[],
            ),
            move |r| put(r, "scalars/a\nb.json", scalar),
        ),
        fcase(
            "scalar name with an escape",
            mounted(
                &[],
                &["control character"],
                &["files_v1_0.daf/scalars/a\u{1b}[2Jb.json"],
                &[],
            ),
            move |r| put(r, "scalars/a\u{1b}[2Jb.json", scalar),
        ),
        fcase(
            "vector name of 250 bytes (the longest that fits NAME.json) is kept",
            mounted(&[], &[], &[], &[long_vector("json"), long_vector("data")]),
            |r| {
                let name = "n".repeat(250);
                std::fs::copy(
                    r.join("vectors/cell/score.json"),
                    r.join(format!("vectors/cell/{name}.json")),
                )
                .unwrap();
                std::fs::copy(
                    r.join("vectors/cell/score.data"),
                    r.join(format!("vectors/cell/{name}.data")),
                )
                .unwrap();
            },
        ),
        fcase(
            "scalar name not UTF-8",
            mounted(
                &[],
                &["not UTF-8"],
                &[],
                &["files_v1_0.daf/scalars/ratio.json"],
            ),
            move |r| {
                let name = std::ffi::OsStr::from_bytes(b"bad\xff.json");
                std::fs::write(r.join("scalars").join(name), scalar).unwrap();
            },
        ),
        fcase(
            "odd but valid names",
            mounted(
                &[],
                &[],
                &[],
                &[
                    "files_v1_0.daf/scalars/a b ü….json",
                    "files_v1_0.daf.zarr/scalars/a b ü…/0",
                    "files_v1_0.daf/vectors/cell/sc ore é.data",
                ],
            ),
            move |r| {
                put(r, "scalars/a b ü….json", scalar);
                std::fs::copy(
                    r.join("vectors/cell/score.json"),
                    r.join("vectors/cell/sc ore é.json"),
                )
                .unwrap();
                std::fs::copy(
                    r.join("vectors/cell/score.data"),
                    r.join("vectors/cell/sc ore é.data"),
                )
                .unwrap();
            },
        ),
        fcase(
            "vectors of an unknown axis",
            mounted(
                &[],
                &["no axis nope"],
                &["files_v1_0.daf/vectors/nope"],
                &[],
            ),
            |r| {
                std::fs::create_dir_all(r.join("vectors/nope")).unwrap();
                std::fs::copy(
                    r.join("vectors/cell/score.json"),
                    r.join("vectors/nope/x.json"),
                )
                .unwrap();
            },
        ),
        fcase(
            "deep directories",
            mounted(
                &[],
                &["more than 48 directory levels"],
                &[],
                &["files_v1_0.daf/scalars/ratio.json"],
            ),
            |r| {
                let deep = vec!["d"; 80].join("/");
                put(r, &format!("vectors/cell/{deep}/x.json"), "{}");
            },
        ),
    ]
}

/// Payloads that do not match their descriptor or axis.
fn payload_cases() -> Vec<Case> {
    let skipped = |what: &'static str, absent: &'static str| {
        mounted(
            &[],
            &[what],
            &[absent],
            &["files_v1_0.daf/scalars/ratio.json"],
        )
    };
    vec![
        fcase(
            "dense data too short",
            skipped(
                "skipping vectors/cell/score",
                "files_v1_0.daf/vectors/cell/score.data",
            ),
            |r| put(r, "vectors/cell/score.data", [0u8; 5]),
        ),
        fcase(
            "dense data is a FIFO",
            skipped("FIFO", "files_v1_0.daf/vectors/cell/score.data"),
            |r| fifo(r, "vectors/cell/score.data"),
        ),
        fcase(
            "sparse index not a multiple of its type",
            skipped(
                "skipping vectors/cell/counts",
                "files_v1_0.daf/vectors/cell/counts.nzind",
            ),
            |r| put(r, "vectors/cell/counts.nzind", [1u8; 9]),
        ),
        fcase(
            "sparse values missing",
            skipped(
                "skipping vectors/cell/counts",
                "files_v1_0.daf/vectors/cell/counts.nzind",
            ),
            |r| std::fs::remove_file(r.join("vectors/cell/counts.nzval")).unwrap(),
        ),
        fcase(
            "more stored values than elements",
            skipped(
                "skipping vectors/cell/counts",
                "files_v1_0.daf/vectors/cell/counts.nzind",
            ),
            |r| {
                put(r, "vectors/cell/counts.nzind", [1u8; 8 * 5]);
                put(r, "vectors/cell/counts.nzval", [1u8; 8 * 5]);
            },
        ),
        fcase(
            "matrix colptr of the wrong size",
            skipped(
                "skipping matrices/cell/gene/umis",
                "files_v1_0.daf/matrices/cell/gene/umis.colptr",
            ),
            |r| put(r, "matrices/cell/gene/umis.colptr", [1u8; 8]),
        ),
        fcase(
            "matrix data too short",
            skipped(
                "skipping matrices/cell/gene/expr",
                "files_v1_0.daf/matrices/cell/gene/expr.data",
            ),
            |r| put(r, "matrices/cell/gene/expr.data", [0u8; 3]),
        ),
        fcase(
            "axis without a final newline",
            mounted(
                &[],
                &["skipping axis gene"],
                &[
                    "files_v1_0.daf/axes/gene.txt",
                    "files_v1_0.daf/matrices/cell/gene",
                ],
                &["files_v1_0.daf/axes/cell.txt"],
            ),
            |r| put(r, "axes/gene.txt", "g1\ng2"),
        ),
        fcase(
            "text with too few lines",
            mounted(
                &["files_v1_0.daf.zarr/vectors/cell/type/0"],
                &["vectors/cell/type"],
                &[],
                &["files_v1_0.daf/vectors/cell/type.txt"],
            ),
            |r| put(r, "vectors/cell/type.txt", "T\nB\n"),
        ),
        fcase(
            "text not UTF-8 is served as it is",
            mounted(
                &[],
                &[],
                &[],
                &[
                    "files_v1_0.daf/vectors/cell/type.txt",
                    "files_v1_0.daf.zarr/vectors/cell/type/0",
                    "files_v1_0.daf/axes/gene.txt",
                ],
            ),
            |r| {
                put(r, "vectors/cell/type.txt", b"\xff\n\xfe\xfd\n\xc0\n");
                put(r, "axes/gene.txt", b"g\xff1\ng2\n");
            },
        ),
        fcase(
            "text with too many lines",
            mounted(
                &["files_v1_0.daf.zarr/vectors/cell/type/0"],
                &["vectors/cell/type"],
                &[],
                &[],
            ),
            |r| put(r, "vectors/cell/type.txt", "T\nB\nT\nX\nY\n"),
        ),
        fcase(
            "sparse strings with an index out of range",
            mounted(
                &["files_v1_0.daf.zarr/vectors/cell/names/0"],
                &["out of range"],
                &[],
                &["files_v1_0.daf/vectors/cell/names.nztxt"],
            ),
            |r| {
                put(
                    r,
                    "vectors/cell/names.json",
                    "{\"format\":\"sparse\",\"eltype\":\"String\",\"indtype\":\"UInt8\"}\n",
                );
                put(r, "vectors/cell/names.nzind", [200u8]);
                put(r, "vectors/cell/names.nztxt", "x\n");
            },
        ),
    ]
}
