//! The `daf-mount` program: parse the command line, open the source, mount, and serve until
//! unmounted (by `fusermount3 -u`/`umount`, or SIGINT/SIGTERM/SIGHUP).
//!
//! Everything that can fail is checked before anything is mounted, and in background mode the
//! process forks only once the mount is usable, so the exit status says whether it worked.

mod args;
mod daemon;
pub mod fusermount;
mod generate;
pub mod lock;
pub mod logging;
pub mod mount;
mod status;

use std::process::ExitCode;

use clap::CommandFactory;

pub use args::{Args, Command, Generate, MountOptions, StatusArgs};
pub use daemon::run;

/// Runs the program for parsed `args`: a subcommand, or a mount. Errors are one line on stderr
/// (`daf-mount: ...`) and exit status 1 (2 for a usage error).
pub fn main(args: Args) -> ExitCode {
    let outcome = match &args.command {
        Some(Command::Generate { what }) => generate::generate(what.clone(), Args::command())
            .map(|()| ExitCode::SUCCESS)
            .map_err(|error| CliError::System {
                what: "generating".into(),
                error,
            }),
        Some(Command::Status(status)) => {
            let _ = logging::init(args.verbose, &logging::Destination::Stderr);
            status::status(status)
        }
        None => mount(args).map(|()| ExitCode::SUCCESS),
    };
    outcome.unwrap_or_else(|e| {
        let status = match e {
            CliError::Usage(_) => ExitCode::from(2),
            _ => ExitCode::FAILURE,
        };
        eprintln!("daf-mount: {:#}", anyhow::Error::from(e));
        status
    })
}

/// Sets up the log for a mount, then mounts.
fn mount(args: Args) -> Result<(), CliError> {
    let options = MountOptions::parse(&args.options)?;
    // Before anything is logged: a usage error is its one line.
    args.view_options(&options)?;
    let log_file = args.log_file.as_deref().or(options.log_file.as_deref());
    let (state_home, home) = (std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"));
    let user = (
        nix::unistd::geteuid().is_root(),
        state_home.as_deref().map(std::path::Path::new),
        home.as_deref().map(std::path::Path::new),
    );
    let listening = !args.foreground && log_file.is_none() && logging::syslog_listening();
    let destination = logging::Destination::choose(args.foreground, log_file, listening, user);
    logging::init(args.verbose, &destination)?;
    run(args)
}

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
        "{data_set} is already mounted read-write: its writer lock is held{}; unmount that mount first or mount read-only (-o ro)",
        holder_list(holders)
    )]
    Locked {
        /// The source argument.
        data_set: String,
        /// Processes holding its lock (pid, program name), when they can be found.
        holders: Vec<(i32, String)>,
    },
    /// A bad `-o` option.
    #[error("{0}")]
    Option(String),
    /// Options that do not go together, or a malformed value (exit status 2, as the argument
    /// parser's own usage errors).
    #[error("{0}")]
    Usage(String),
    /// A data set cannot be shown as asked (its AnnData view cannot choose its axes).
    #[error("{0}")]
    View(String),
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

fn holder_list(holders: &[(i32, String)]) -> String {
    let named: Vec<String> = holders
        .iter()
        .map(|(pid, program)| match program.as_str() {
            "daf-mount" | "" => format!("pid {pid}"),
            other => format!("pid {pid}, {other}"),
        })
        .collect();
    if named.is_empty() {
        String::new()
    } else {
        format!(" ({})", named.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_source_names_who_holds_it() {
        let locked = |holders: Vec<(i32, String)>| {
            CliError::Locked {
                data_set: "x.daf".into(),
                holders,
            }
            .to_string()
        };
        assert_eq!(
            locked(vec![(12, "daf-mount".into())]),
            "x.daf is already mounted read-write: its writer lock is held (pid 12); unmount \
             that mount first or mount read-only (-o ro)"
        );
        assert!(locked(vec![(12, "daf-mount".into()), (40, "flock".into())])
            .contains("held (pid 12; pid 40, flock);"));
        assert!(locked(Vec::new()).contains("lock is held; unmount"));
    }
}
