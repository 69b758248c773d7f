//! Symbolic links (inside, outside, through `..`, loops, dangling, to directories, to FIFOs),
//! FIFOs and sockets in FilesDaf directory sources.

use super::formats::{fcase, fifo, link, mounted, put};
use super::Case;

/// Symbolic links, FIFOs and sockets in the source.
pub fn cases() -> Vec<Case> {
    let outside = "points outside the source";
    vec![
        fcase(
            "scalar linking inside the root",
            mounted(
                &[],
                &[],
                &[],
                &[
                    "files_v1_0.daf/scalars/alias.json",
                    "files_v1_0.daf.zarr/scalars/alias/0",
                ],
            ),
            |r| link(r, "scalars/alias.json", "ratio.json"),
        ),
        fcase(
            "scalar linking outside the root",
            mounted(
                &[],
                &[outside],
                &["files_v1_0.daf/scalars/secret.json"],
                &[],
            ),
            |r| {
                put(
                    r,
                    "../secret.json",
                    "{\"type\":\"String\",\"value\":\"secret\"}\n",
                );
                link(r, "scalars/secret.json", r.join("../secret.json"));
            },
        ),
        fcase(
            "payload linking outside through ..",
            mounted(
                &[],
                &[outside, "skipping vectors/cell/score"],
                &["files_v1_0.daf/vectors/cell/score.data"],
                &[],
            ),
            |r| {
                std::fs::copy(r.join("vectors/cell/score.data"), r.join("../score.data")).unwrap();
                link(r, "vectors/cell/score.data", "../../../score.data");
            },
        ),
        fcase(
            "axis linking to /etc/passwd",
            mounted(&[], &[outside], &["files_v1_0.daf/axes/passwd.txt"], &[]),
            |r| link(r, "axes/passwd.txt", "/etc/passwd"),
        ),
        fcase(
            "symlink loop",
            mounted(
                &[],
                &["skipping symbolic link"],
                &["files_v1_0.daf/scalars/loop.json"],
                &[],
            ),
            |r| {
                link(r, "scalars/loop.json", "loop2.json");
                link(r, "scalars/loop2.json", "loop.json");
            },
        ),
        fcase(
            "dangling symlink",
            mounted(
                &[],
                &["skipping symbolic link"],
                &["files_v1_0.daf/scalars/gone.json"],
                &[],
            ),
            |r| link(r, "scalars/gone.json", "nowhere.json"),
        ),
        fcase(
            "symlink to a directory",
            mounted(
                &[],
                &["links to directories are not followed"],
                &["files_v1_0.daf/vectors/cell2"],
                &[],
            ),
            |r| link(r, "vectors/cell2", "cell"),
        ),
        fcase(
            "symlink to the root's parent",
            mounted(&[], &[outside], &["files_v1_0.daf/vectors/up"], &[]),
            |r| link(r, "vectors/up", "../.."),
        ),
        fcase(
            "symlink to a FIFO",
            mounted(
                &[],
                &["not a regular file"],
                &["files_v1_0.daf/scalars/f.json"],
                &[],
            ),
            |r| {
                fifo(r, "scalars/fifo");
                link(r, "scalars/f.json", "fifo");
            },
        ),
        fcase(
            "socket as a scalar",
            mounted(
                &[],
                &["not a regular file"],
                &["files_v1_0.daf/scalars/s.json"],
                &[],
            ),
            |r| {
                let _listener =
                    std::os::unix::net::UnixListener::bind(r.join("scalars/s.json")).unwrap();
            },
        ),
    ]
}
