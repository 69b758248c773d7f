//! Command-line arguments and FUSE-style `-o` options.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::formats::json::FilesVersion;
use crate::formats::source::Format;
use crate::stores::http::s3::parse_addressing;
use crate::stores::http::{parse_header, HttpOptions};
use crate::views::anndata::Request;
use crate::views::{ViewOptions, ViewSelection};

use super::CliError;

const EXAMPLES: &str = "\
Examples:
  daf-mount pbmc.daf.zarr.zip /mnt/x              mount; /mnt/x shows pbmc.daf/ and pbmc.daf.zarr/
  daf-mount cells.daf /mnt/x --view zarr         only the Zarr layout, at /mnt/x itself
  daf-mount all.dafs.zarr.zip#/pbmc /mnt/x       one data set of a multi-data-set archive
  daf-mount all.dafs.zarr.zip /mnt/x             every data set of the archive
  daf-mount data.daf.zarr /mnt/x -f -v           stay in the foreground, log what happens
  daf-mount old.daf.zarr /mnt/x --zarr-format 3  a Zarr v3 view of a Zarr v2 data set
  daf-mount cells.daf /mnt/x --zip               also /mnt/x/cells.daf.zarr.zip: the Zarr view as
                                                 one ZarrDaf ZIP file, to copy and share
  daf-mount cells.daf /mnt/x --dimension-names   a Zarr view xarray opens (xr.open_zarr)
  daf-mount data.daf.zarr /mnt/x --log-file /var/log/daf.log
                                                 log there instead of syslog/journald
  fusermount3 -u /mnt/x                          unmount (or: umount /mnt/x, or SIGTERM the daemon)
  daf-mount status /mnt/x                        what is staged and why it is not committed yet
  mount -t fuse.daf-mount data.daf.zarr.zip /mnt/x -o ro,zarr_format=3
                                                 the same through mount(8); in /etc/fstab:
      /data/x.daf.zarr.zip  /mnt/x  fuse.daf-mount  ro,nofail,zarr_format=3  0  0
  daf-mount generate man --dir /usr/local/share/man/man1
                                                 the man pages; `generate completions bash|zsh|fish`

Sources: a FilesDaf directory, a ZarrDaf directory (NAME.daf.zarr), a ZarrDaf ZIP
(NAME.daf.zarr.zip), a multi-data-set ZIP (NAME.dafs.zarr.zip[#/GROUP]), or a ZipDaf
(NAME.daf.zip, NAME.dafs.zip[#/GROUP]).";

/// Which layouts to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ViewArg {
    /// NAME.daf/ and NAME.daf.zarr/ side by side.
    Both,
    /// Only the FilesDaf layout, directly at the mount point.
    Files,
    /// Only the Zarr layout, directly at the mount point.
    Zarr,
}

/// daf-mount: see a Daf data set as FilesDaf and as Zarr at once, over the same bytes.
#[derive(Debug, Parser)]
#[command(
    name = "daf-mount",
    version,
    about,
    after_help = EXAMPLES,
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true
)]
pub struct Args {
    /// Another task than mounting.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The data set: a directory, NAME.daf.zarr, NAME.daf.zarr.zip, NAME.dafs.zarr.zip[#/GROUP].
    #[arg(required = true)]
    pub source: Option<String>,
    /// An existing directory to mount on.
    #[arg(required = true)]
    pub mountpoint: Option<PathBuf>,
    /// Stay in the foreground (logs go to stderr) instead of detaching once mounted.
    #[arg(short, long)]
    pub foreground: bool,
    /// Mount options, comma-separated: ro (default rw), allow_other, allow_root, auto_unmount,
    /// default_permissions, fsname=NAME, and every option below in -o form: view=V,
    /// zarr_format=N, files_version=V, log_file=FILE, threads=N, and decode_cache=SIZE (bound of
    /// the decoded chunks of compressed arrays and ZIP members kept, default 256M; generic ones
    /// such as dev, suid, noatime, nofail are accepted).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
    /// Which layouts to show. Also `-o view=V`.
    #[arg(long, value_enum)]
    pub view: Option<ViewArg>,
    /// The Zarr view's format: 2 (DataAxesFormats 0.2) or 3 (0.3). Default: 3 for a data set
    /// written by DataAxesFormats 0.3 (Zarr v3, FilesDaf 1.1, packed properties), else 2.
    /// Also `-o zarr_format=N`.
    #[arg(long, value_name = "2|3", value_parser = parse_zarr_format)]
    pub zarr_format: Option<Format>,
    /// The FilesDaf view's version: 1.0 or 1.1. Default: 1.1 for a data set written by
    /// DataAxesFormats 0.3, else 1.0. Also `-o files_version=V`.
    #[arg(long, value_name = "1.0|1.1", value_parser = parse_files_version)]
    pub files_version: Option<FilesVersion>,
    /// Also show NAME.daf.zarr.zip at the mount root for each data set: a read-only ZarrDaf ZIP
    /// of its Zarr view (in the --zarr-format), made on the fly. Also `-o zip`.
    #[arg(long)]
    pub zip: bool,
    /// Also show NAME.h5df at the mount root for each data set: a read-only HDF5 file in
    /// DataAxesFormats' H5df layout (h5py, HDF5.jl, h5dump; a copy mounts again), its structure
    /// made by libhdf5 on first access and its payloads the source's bytes. Also `-o h5df`.
    #[arg(long)]
    pub h5df: bool,
    /// Name the dimensions of every array of the Zarr view, so xarray can open it:
    /// `_ARRAY_DIMENSIONS` (Zarr v2) or `dimension_names` (v3), after the axes. Without it the
    /// view is exactly what DataAxesFormats writes. Also `-o dimension_names`.
    #[arg(long)]
    pub dimension_names: bool,
    /// Also show NAME.anndata.zarr/ for each data set: a read-only AnnData store (anndata,
    /// scanpy) over the same bytes, obs and var two axes and X a matrix between them. Without a
    /// value they come from the data set's String scalars obs_is, var_is and X_is (X may be left
    /// out when one matrix alone joins the axes). Put it after SOURCE and MOUNTPOINT. Also
    /// `-o anndata[=OBS:VAR[:X]]`.
    #[arg(long, value_name = "OBS:VAR[:X]", num_args = 0..=1, default_missing_value = "")]
    pub anndata: Option<String>,
    /// Also show NAME.h5ad at the mount root for each data set: the AnnData of --anndata as one
    /// read-only h5ad file (anndata.read_h5ad, scanpy, h5py), its structure made by libhdf5 on
    /// first access and its payloads the source's bytes. The selection is --anndata's (one
    /// value for both). Put it after SOURCE and MOUNTPOINT. Also `-o h5ad[=OBS:VAR[:X]]`.
    #[arg(long, value_name = "OBS:VAR[:X]", num_args = 0..=1, default_missing_value = "")]
    pub h5ad: Option<String>,
    /// More logging (-v info, -vv debug); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Append the log to FILE. Without it the log goes to stderr with -f, else to syslog
    /// (journald) as `daf-mount`. Also `-o log_file=FILE`.
    #[arg(long, value_name = "FILE")]
    pub log_file: Option<PathBuf>,
    /// Write "READY\n" to this file descriptor once the mount is usable.
    #[arg(long, value_name = "FD")]
    pub ready_fd: Option<i32>,
    /// FUSE worker threads (default: the number of CPUs). Also `-o threads=N`.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
}

/// The tasks besides mounting.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List what is staged for a data set and why it is not committed yet; exit status 0 when
    /// nothing is waiting, 2 when something is.
    #[command(after_help = STATUS_HELP)]
    Status(StatusArgs),
    /// Print the man page or shell completions, made from these very definitions.
    Generate {
        /// What to print.
        #[command(subcommand)]
        what: Generate,
    },
}

const STATUS_HELP: &str = "\
Examples:
  daf-mount status /mnt/x                 a daf-mount's mount point (its source from /proc/self/mountinfo)
  daf-mount status pbmc.daf.zarr.zip      a source, mounted or not (reads its staging area)

Each staged item is listed with its files and, when it cannot be committed, why: incomplete
(which file is missing) or invalid (what is wrong). Items accepted but not yet appended to a
ZIP source are listed as pending appends.";

/// `daf-mount status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// A data set (as given to daf-mount) or the mount point of a daf-mount.
    pub target: String,
    /// The Zarr format of the view the files were staged in, if the mount chose one.
    #[arg(long, value_name = "2|3", value_parser = parse_zarr_format)]
    pub zarr_format: Option<Format>,
    /// The FilesDaf version of the view the files were staged in, if the mount chose one.
    #[arg(long, value_name = "1.0|1.1", value_parser = parse_files_version)]
    pub files_version: Option<FilesVersion>,
}

/// `daf-mount generate`.
#[derive(Clone, Debug, Subcommand)]
pub enum Generate {
    /// The man page (roff) on stdout, for `man -l -` or `/usr/local/share/man/man1/daf-mount.1`;
    /// with --dir, every page (daf-mount.1 and one per subcommand) written into DIR.
    Man {
        /// Write every page into this directory.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// A completion script for SHELL.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

impl Args {
    /// The view selection: the command line's, else `-o view=`, else both.
    pub fn selection(&self, options: &MountOptions) -> ViewSelection {
        match self.view.or(options.view).unwrap_or(ViewArg::Both) {
            ViewArg::Both => ViewSelection::Both,
            ViewArg::Files => ViewSelection::Files,
            ViewArg::Zarr => ViewSelection::Zarr,
        }
    }
}

fn parse_zarr_format(value: &str) -> Result<Format, String> {
    match value {
        "2" => Ok(Format::ZarrV2),
        "3" => Ok(Format::ZarrV3),
        other => Err(format!("{other}: the Zarr view's format is 2 or 3")),
    }
}

fn parse_files_version(value: &str) -> Result<FilesVersion, String> {
    match value {
        "1.0" => Ok(FilesVersion::V1_0),
        "1.1" => Ok(FilesVersion::V1_1),
        other => Err(format!(
            "{other}: the FilesDaf view's version is 1.0 or 1.1"
        )),
    }
}

impl Args {
    /// The views to show and their formats: the command line's, else the `-o` options'. A
    /// malformed `--anndata` value, or `--anndata` without both views, is a usage error.
    pub fn view_options(&self, options: &MountOptions) -> Result<ViewOptions, CliError> {
        let selection = self.selection(options);
        let anndata = match self.anndata.as_ref().or(options.anndata.as_ref()) {
            None => None,
            Some(_) if selection != ViewSelection::Both => return Err(CliError::Usage(
                "--anndata shows NAME.anndata.zarr/ beside the other views: it needs --view both"
                    .into(),
            )),
            Some(value) => Some(Request::parse(value).map_err(CliError::Usage)?),
        };
        let h5ad = match self.h5ad.as_ref().or(options.h5ad.as_ref()) {
            None => None,
            Some(value) => Some(Request::parse(value).map_err(CliError::Usage)?),
        };
        // One selection for both: the one given (a bare option takes the other's value).
        let given = |r: &Option<Request>| r.as_ref().filter(|r| **r != Request::default()).cloned();
        let (anndata, h5ad) = match (given(&anndata), given(&h5ad)) {
            (Some(a), Some(h)) if a != h => {
                return Err(CliError::Usage(
                    "--anndata and --h5ad select differently: give OBS:VAR[:X] once".into(),
                ))
            }
            (Some(chosen), _) | (_, Some(chosen)) => (
                anndata.map(|_| chosen.clone()),
                h5ad.map(|_| chosen.clone()),
            ),
            (None, None) => (anndata, h5ad),
        };
        Ok(ViewOptions {
            selection,
            zarr: self.zarr_format.or(options.zarr_format),
            files: self.files_version.or(options.files_version),
            zip: self.zip || options.zip,
            h5df: self.h5df || options.h5df,
            dimension_names: self.dimension_names || options.dimension_names,
            anndata,
            h5ad,
        })
    }
}

/// The `-o` options that change what daf-mount does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MountOptions {
    /// `allow_other`.
    pub allow_other: bool,
    /// `allow_root`.
    pub allow_root: bool,
    /// `auto_unmount`.
    pub auto_unmount: bool,
    /// `fsname=`.
    pub fsname: Option<String>,
    /// `ro`: refuse every write (the default is read-write).
    pub read_only: bool,
    /// `zarr_format=2|3`.
    pub zarr_format: Option<Format>,
    /// `files_version=1.0|1.1`.
    pub files_version: Option<FilesVersion>,
    /// `zip`: publish each data set's Zarr view as one ZIP file at the mount root.
    pub zip: bool,
    /// `h5df`: show each data set as one H5df (HDF5) file at the mount root.
    pub h5df: bool,
    /// `dimension_names`: the Zarr view's arrays carry xarray's dimension names.
    pub dimension_names: bool,
    /// `anndata[=OBS:VAR[:X]]`: the AnnData view, with this value (empty without one).
    pub anndata: Option<String>,
    /// `h5ad[=OBS:VAR[:X]]`: the h5ad file, with this value (empty without one).
    pub h5ad: Option<String>,
    /// `rw` was given (refused with a URL source).
    pub rw_given: bool,
    /// `view=both|files|zarr`.
    pub view: Option<ViewArg>,
    /// `log_file=FILE`.
    pub log_file: Option<PathBuf>,
    /// `threads=N`.
    pub threads: Option<usize>,
    /// `decode_cache=SIZE`: bound of the mount-wide cache of decoded chunks (default 256M).
    pub decode_cache: Option<u64>,
    /// `cache=`, `cache_size=`, `header=`, `token=`, `timeout=`, `retries=`, and for `s3://`
    /// `endpoint=`, `region=`, `profile=`, `addressing=`, `no_sign`: how a remote source is
    /// fetched.
    pub http: HttpOptions,
}

impl MountOptions {
    /// Parses every `-o` argument. Generic options that mount(8) and mount.fuse3 pass along are
    /// accepted and ignored; an unknown option is an error.
    pub fn parse(options: &[String]) -> Result<MountOptions, CliError> {
        let mut parsed = MountOptions::default();
        for option in options
            .iter()
            .flat_map(|o| o.split(','))
            .filter(|o| !o.is_empty())
        {
            match option {
                "allow_other" => parsed.allow_other = true,
                "allow_root" => parsed.allow_root = true,
                "auto_unmount" => parsed.auto_unmount = true,
                "ro" => parsed.read_only = true,
                "zip" => parsed.zip = true,
                "h5df" => parsed.h5df = true,
                "dimension_names" => parsed.dimension_names = true,
                "anndata" => parsed.anndata = Some(String::new()),
                "h5ad" => parsed.h5ad = Some(String::new()),
                _ if option.starts_with("h5ad=") => {
                    parsed.h5ad = Some(option["h5ad=".len()..].to_string())
                }
                _ if option.starts_with("anndata=") => {
                    parsed.anndata = Some(option["anndata=".len()..].to_string())
                }
                "rw" => {
                    parsed.read_only = false;
                    parsed.rw_given = true;
                }
                "default_permissions" | "kernel_cache" | "keep_cache" => {}
                "dev" | "nodev" | "suid" | "nosuid" | "exec" | "noexec" | "atime" | "noatime"
                | "relatime" | "strictatime" | "nodiratime" | "sync" | "async" | "dirsync"
                | "defaults" | "auto" | "noauto" | "user" | "nouser" | "users" | "_netdev"
                | "nofail" => {}
                _ if option.starts_with("x-") || option.starts_with("comment=") => {}
                _ if option.starts_with("fsname=") => {
                    parsed.fsname = Some(option["fsname=".len()..].to_string())
                }
                _ if option.starts_with("subtype=") => {}
                _ if option.starts_with("view=") => {
                    parsed.view = Some(ViewArg::from_str(&option["view=".len()..], false).map_err(
                        |_| CliError::Option(format!("{option}: view is both, files or zarr")),
                    )?)
                }
                _ if option.starts_with("log_file=") => {
                    parsed.log_file = Some(PathBuf::from(&option["log_file=".len()..]))
                }
                _ if option.starts_with("threads=") => {
                    parsed.threads = Some(
                        option["threads=".len()..]
                            .parse()
                            .ok()
                            .filter(|n| *n > 0)
                            .ok_or_else(|| {
                                CliError::Option(format!("{option}: threads is a count, 1 or more"))
                            })?,
                    )
                }
                _ if option.starts_with("decode_cache=") => {
                    parsed.decode_cache =
                        Some(parse_size(&option["decode_cache=".len()..]).ok_or_else(|| {
                            CliError::Option(format!(
                                "{option}: decode_cache is a size such as 64M or 1G"
                            ))
                        })?)
                }
                _ if option.starts_with("zarr_format=") => {
                    parsed.zarr_format = Some(
                        parse_zarr_format(&option["zarr_format=".len()..])
                            .map_err(CliError::Option)?,
                    )
                }
                _ if option.starts_with("files_version=") => {
                    parsed.files_version = Some(
                        parse_files_version(&option["files_version=".len()..])
                            .map_err(CliError::Option)?,
                    )
                }
                _ if remote_option(&mut parsed.http, option)? => {}
                other => return Err(CliError::Option(format!("unknown mount option: {other}"))),
            }
        }
        if parsed.auto_unmount && !(parsed.allow_other || parsed.allow_root) {
            return Err(CliError::Option(
                "auto_unmount needs allow_other or allow_root".into(),
            ));
        }
        Ok(parsed)
    }
}

/// Parses `option` into `http` if it is one of the remote-source options.
fn remote_option(http: &mut HttpOptions, option: &str) -> Result<bool, CliError> {
    if option == "no_sign" {
        http.s3.no_sign = true;
        return Ok(true);
    }
    let Some((name, value)) = option.split_once('=') else {
        return Ok(false);
    };
    let bad = |why: &str| CliError::Option(format!("{name}=: {why}"));
    match name {
        "cache" => http.cache_dir = Some(value.into()),
        "cache_size" => {
            http.cache_size = parse_size(value).ok_or_else(|| bad("a size such as 512M or 4G"))?
        }
        "header" => http.headers.push(parse_header(value).map_err(|e| bad(&e))?),
        "token" => http.token = Some(value.to_string()),
        "timeout" => {
            let secs: f64 = value
                .parse()
                .ok()
                .filter(|s: &f64| *s > 0.0 && s.is_finite())
                .ok_or_else(|| bad("seconds, more than 0"))?;
            http.timeout = std::time::Duration::from_secs_f64(secs);
        }
        "retries" => http.retries = value.parse().map_err(|_| bad("a count"))?,
        "endpoint" => {
            let url = value.to_ascii_lowercase();
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(bad("an http:// or https:// URL"));
            }
            http.s3.endpoint = Some(value.to_string())
        }
        "region" if !value.is_empty() => http.s3.region = Some(value.to_string()),
        "profile" if !value.is_empty() => http.s3.profile = Some(value.to_string()),
        "addressing" => {
            http.s3.addressing =
                Some(parse_addressing(value).ok_or_else(|| bad("path or virtual"))?)
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// `N`, `NK`, `NM`, `NG` (powers of 1024) in bytes.
fn parse_size(text: &str) -> Option<u64> {
    let (digits, unit) = match text.char_indices().last()? {
        (at, 'K' | 'k') => (&text[..at], 1u64 << 10),
        (at, 'M' | 'm') => (&text[..at], 1 << 20),
        (at, 'G' | 'g') => (&text[..at], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

#[cfg(test)]
#[path = "args_tests.rs"]
mod tests;
