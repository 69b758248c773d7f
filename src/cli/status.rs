//! `daf-mount status SOURCE_OR_MOUNTPOINT`: what is staged for a data set and why it is not
//! committed yet, read from the staging area beside the source (mounted or not).
//!
//! A mount point is mapped back to its source through `/proc/self/mountinfo`: a daf-mount's
//! mount has type `fuse.daf-mount` and, unless `-o fsname=` replaced it, its source path as
//! the mount source. The judging itself is the core's ([`crate::core::DafFs::staging_report`]),
//! which uses the staging layer's own validation.

use std::path::Path;
use std::process::ExitCode;
use std::time::SystemTime;

use crate::core::{DafFs, ItemState, StagingReport};
use crate::formats::remote::is_url;
use crate::formats::source::open_source;
use crate::staging::StagingArea;
use crate::views::{ViewOptions, ViewSelection};

use super::mount::{mountinfo, top_mount};
use super::{CliError, StatusArgs};

/// Exit status when something is staged.
const WAITING: u8 = 2;

/// The source argument for `target`: the source of the daf-mount mounted there, or `target`.
fn source_of(target: &str) -> Result<String, CliError> {
    let path = Path::new(target);
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mounts = mountinfo();
    let top = top_mount(&mounts, &absolute)
        .or_else(|| top_mount(&mounts, &std::fs::canonicalize(path).ok()?));
    match top {
        Some(m) if m.fstype == "fuse.daf-mount" => {
            if Path::new(&m.source).exists() || is_url(&m.source) {
                Ok(m.source)
            } else {
                Err(CliError::MountPoint {
                    why: format!(
                        "the daf-mount here names its source {:?}, which is not a path (mounted \
                         with -o fsname=?); give the source instead",
                        m.source
                    ),
                    path: absolute,
                })
            }
        }
        Some(m) if m.mount_point == absolute && m.fstype.starts_with("fuse") => {
            Err(CliError::MountPoint {
                why: format!("not a daf-mount ({}) at this mount point", m.fstype),
                path: absolute,
            })
        }
        _ => Ok(target.to_string()),
    }
}

/// Prints what is staged for the data set `args.target` names; exit status 0 when nothing is.
pub fn status(args: &StatusArgs) -> Result<ExitCode, CliError> {
    let source_arg = source_of(&args.target)?;
    if is_url(&source_arg) {
        println!("{source_arg}: a remote source is read-only: nothing is ever staged");
        return Ok(ExitCode::SUCCESS);
    }
    let source = open_source(&source_arg)?;
    let staging = StagingArea::for_source(&source.path);
    let options = ViewOptions {
        zarr: args.zarr_format,
        files: args.files_version,
        ..ViewOptions::from(ViewSelection::Both)
    };
    let core = DafFs::with_staging(
        source.datasets,
        options,
        SystemTime::UNIX_EPOCH,
        Some(staging.clone()),
    );
    let report = core.staging_report();
    print!("{}", render(&source.path, staging.root(), &report));
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(WAITING)
    })
}

/// The report as text: a summary line, then each item with its state and files.
pub fn render(source: &Path, staging: &Path, report: &StagingReport) -> String {
    if report.is_clean() {
        return format!("{}: nothing staged\n", source.display());
    }
    let pending = report
        .items
        .iter()
        .filter(|i| i.state == ItemState::PendingAppend)
        .count();
    let mut out = format!(
        "{}: {} staged item{}, {pending} pending ZIP append{}{} (staging area {})\n",
        source.display(),
        report.items.len(),
        plural(report.items.len()),
        plural(pending),
        match report.loose.len() {
            0 => String::new(),
            n => format!(", {n} file{} in no item", plural(n)),
        },
        staging.display()
    );
    for item in &report.items {
        let state = match &item.state {
            ItemState::PendingAppend => "pending ZIP append: accepted, being appended to the \
                archive (by the next writable mount if no daemon runs)"
                .to_string(),
            ItemState::Complete => "complete, not committed: its writer has not closed it yet, \
                or was killed (rewrite it, or remove it)"
                .to_string(),
            ItemState::Incomplete(missing) => format!("incomplete: missing {missing}"),
            ItemState::Invalid(why) => format!("invalid: {why}"),
            ItemState::Refused(why) => format!("refused: {why}"),
            ItemState::Unchanged => {
                "already in the source (these copies are dropped at the next mount)".to_string()
            }
        };
        out.push_str(&format!("{}: {state}\n", item.item));
        for file in &item.files {
            out.push_str(&format!("    {file}\n"));
        }
    }
    for file in &report.loose {
        out.push_str(&format!(
            "{file}: not a file of any item (a writer's temporary?)\n"
        ));
    }
    out
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
