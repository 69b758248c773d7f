//! The `daf-mount` program: parse the command line, open the source, mount, and serve until
//! unmounted (by `fusermount3 -u`/`umount`, or SIGINT/SIGTERM/SIGHUP).
//!
//! Everything that can fail is checked before anything is mounted, and in background mode the
//! process forks only once the mount is usable, so the exit status says whether it worked.

mod args;
mod daemon;
pub mod fusermount;
pub mod lock;
pub mod mount;

pub use args::{Args, MountOptions};
pub use daemon::run;

/// Errors of the program, each printed as one line on stderr.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The mount point is missing or unusable.
    #[error("{why}: {path}")]
    MountPoint {
        /// What is wrong.
        why: String,
        /// The mount point.
        path: std::path::PathBuf,
    },
    /// Another daf-mount holds the source read-write.
    #[error(
        "{data_set} is already mounted read-write by another daf-mount{}; unmount it first or mount read-only (-o ro)",
        holder_list(holders)
    )]
    Locked {
        /// The source argument.
        data_set: String,
        /// Pids holding its lock, when they can be found.
        holders: Vec<i32>,
    },
    /// A bad `-o` option.
    #[error("{0}")]
    Option(String),
    /// The source cannot be opened.
    #[error(transparent)]
    Source(#[from] crate::formats::FormatError),
    /// Mounting or serving failed.
    #[error("{what}: {error}")]
    System {
        /// What was being done.
        what: String,
        /// The error (shown in the message, so not a `source` the error chain repeats).
        error: std::io::Error,
    },
}

fn holder_list(holders: &[i32]) -> String {
    match holders {
        [] => String::new(),
        [pid] => format!(" (pid {pid})"),
        pids => format!(
            " (pids {})",
            pids.iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
