//! Opening a source named on the command line: the path grammar of `daf-formats.md` §6.3, the
//! store it lives in, and the data set(s) it holds.
//!
//! | path | source |
//! |---|---|
//! | `X.daf.zarr.zip` | one ZarrDaf at the root of a ZIP |
//! | `X.dafs.zarr.zip#/G` | the ZarrDaf rooted at group `G` of a multi-data-set ZIP |
//! | `X.dafs.zarr.zip` | every ZarrDaf found in a multi-data-set ZIP |
//! | `X.daf.zip`, `X.dafs.zip#/G`, `X.dafs.zip` | the same for ZipDaf (FilesDaf entries in a ZIP) |
//! | `X.daf.zarr` | a ZarrDaf directory |
//! | any other directory | FilesDaf if it has `daf.json`, ZarrDaf if it has `.zgroup` (Zarr v2) or `zarr.json` (Zarr v3) |
//! | `X.h5df` | the H5df at the root group of an HDF5 file (read-only) |
//! | `X.h5dfs#/G` | the H5df in group `G` (nested: `A/B`) of an HDF5 file |
//! | `X.h5dfs` | every H5df group of an HDF5 file (nested groups as nested directories) |

use std::path::{Path, PathBuf};

use crate::stores::{dir, zip, StoreError};

use super::datasets::{archive_datasets, root_dataset};
use super::h5df::open_h5df;
use super::json::FilesVersion;
use super::model::Dataset;
use super::names::check_name;
use super::FormatError;

/// The family of a data set's on-disk format (its version aside), and of a view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// FilesDaf (a directory, or ZipDaf entries).
    Files,
    /// ZarrDaf (Zarr v2 or v3).
    Zarr,
}

/// What a source path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceSpec {
    /// A directory holding one data set (its layout is sniffed).
    Directory(PathBuf),
    /// A ZIP archive; `group` selects one data set of a multi-data-set archive, `multi` says the
    /// archive may hold several.
    Zip {
        /// The archive.
        path: PathBuf,
        /// The layout its suffix promises.
        layout: Family,
        /// Whether the suffix is the plural one (`.dafs.…`).
        multi: bool,
        /// The group after `#/`, if any.
        group: Option<String>,
    },
    /// An HDF5 file holding H5df data sets (`h5df-format.md`): `group` selects one, `multi`
    /// (`.h5dfs` without a group) asks for every Daf group of the file.
    H5df {
        /// The file.
        path: PathBuf,
        /// Whether the suffix is the plural one (`.h5dfs`).
        multi: bool,
        /// The group after `#/`, if any.
        group: Option<String>,
    },
}

const ZIP_SUFFIXES: [(&str, &str, Family); 2] = [
    (".daf.zarr.zip", ".dafs.zarr.zip", Family::Zarr),
    (".daf.zip", ".dafs.zip", Family::Files),
];

fn bad(path: &str, why: impl Into<String>) -> FormatError {
    FormatError::BadPath {
        path: path.to_string(),
        why: why.into(),
    }
}

/// Whether a source argument is a URL (a remote source).
pub fn is_url(arg: &str) -> bool {
    url_scheme(arg).is_some_and(|s| URL_SCHEMES.iter().any(|k| s.eq_ignore_ascii_case(k)))
}

/// The URL schemes a source may have (a remote source).
pub const URL_SCHEMES: [&str; 3] = ["http", "https", "s3"];

/// The scheme of `arg` if it is written as a URL (`SCHEME://…`, the scheme a letter then letters,
/// digits, `+`, `-` or `.`), whether daf-mount reads that scheme or not.
pub fn url_scheme(arg: &str) -> Option<&str> {
    let (scheme, _) = arg.split_once("://")?;
    let mut bytes = scheme.bytes();
    let first = bytes.next()?;
    (first.is_ascii_alphabetic() && bytes.all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b)))
        .then_some(scheme)
}

/// A URL without its query string, and the query (without `?`; `None` when absent or empty):
/// `https://h/x.dafs.zarr.zip?sig=1#/g` is `https://h/x.dafs.zarr.zip#/g` and `sig=1`. Any other
/// argument (a local path may hold `?`) is returned whole.
pub fn split_url_query(arg: &str) -> (String, Option<String>) {
    let end = arg.find('#').unwrap_or(arg.len());
    match arg[..end].find('?') {
        Some(at) if is_url(arg) => {
            let query = &arg[at + 1..end];
            let url = format!("{}{}", &arg[..at], &arg[end..]);
            (url, (!query.is_empty()).then(|| query.to_string()))
        }
        _ => (arg.to_string(), None),
    }
}

/// Parses a source path (no file system access). A URL's query string is not part of the
/// grammar: it is split off first (and never shown in an error).
pub fn parse_source(arg: &str) -> Result<SourceSpec, FormatError> {
    if let Some(scheme) = url_scheme(arg).filter(|_| !is_url(arg)) {
        // Shown as given: a path's `//` would be collapsed (`s3:/b/...`).
        let shown = crate::stores::http::redact(arg);
        return Err(bad(
            &shown,
            format!(
                "a URL whose scheme ({scheme}) daf-mount does not read (it reads {})",
                URL_SCHEMES.join(", ")
            ),
        ));
    }
    let (arg, _query) = split_url_query(arg);
    let arg = arg.as_str();
    if let Some(spec) = parse_h5df(arg)? {
        return Ok(spec);
    }
    for (single, multi, layout) in ZIP_SUFFIXES {
        let marker = format!("{multi}#");
        if let Some((container, group)) = arg.split_once(&marker) {
            return Ok(SourceSpec::Zip {
                path: PathBuf::from(format!("{container}{multi}")),
                layout,
                multi: true,
                group: Some(group_after(arg, group, multi)?),
            });
        }
        if arg.contains(&format!("{single}#")) {
            return Err(bad(
                arg,
                format!(
                    "can't address a sub-daf in a singular {single} path; use NAME{multi}#/GROUP"
                ),
            ));
        }
        if arg.ends_with(single) || arg.ends_with(multi) {
            let multi = arg.ends_with(multi);
            return Ok(SourceSpec::Zip {
                path: PathBuf::from(arg),
                layout,
                multi,
                group: None,
            });
        }
    }
    Ok(SourceSpec::Directory(
        PathBuf::from(arg.trim_end_matches('/'))
            .components()
            .collect(),
    ))
}

/// The group of `arg` named by `rest`, what follows `{multi}#` in it: `/GROUP` (which may hold
/// `/`), every component a valid name.
fn group_after(arg: &str, rest: &str, multi: &str) -> Result<String, FormatError> {
    let Some(group) = rest.strip_prefix('/') else {
        return Err(bad(arg, format!("expected '#/<group>' after {multi}")));
    };
    if group.contains(&format!("{multi}#")) {
        return Err(bad(arg, "more than one '#/' in the path"));
    }
    let group = group.trim_matches('/');
    if group.is_empty() {
        return Err(bad(arg, "empty group name after '#/'"));
    }
    if let Some(why) = group.split('/').find_map(check_name) {
        return Err(bad(arg, format!("the group has {why}")));
    }
    Ok(group.to_string())
}

/// The H5df forms of the grammar (`x.h5df`, `x.h5dfs#/GROUP`, `x.h5dfs`), if `arg` is one.
fn parse_h5df(arg: &str) -> Result<Option<SourceSpec>, FormatError> {
    if is_url(arg) {
        return Ok(None);
    }
    if let Some((file, group)) = arg.split_once(".h5dfs#") {
        return Ok(Some(SourceSpec::H5df {
            path: PathBuf::from(format!("{file}.h5dfs")),
            multi: true,
            group: Some(group_after(arg, group, ".h5dfs")?),
        }));
    }
    if arg.contains(".h5df#") {
        return Err(bad(
            arg,
            "can't address a sub-daf in a singular .h5df path; use NAME.h5dfs#/GROUP",
        ));
    }
    let multi = arg.ends_with(".h5dfs");
    Ok((multi || arg.ends_with(".h5df")).then(|| SourceSpec::H5df {
        path: PathBuf::from(arg),
        multi,
        group: None,
    }))
}

/// The name a source shows under: its file name without the format suffix.
pub fn display_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "daf".into());
    for suffix in [
        ".dafs.zarr.zip",
        ".daf.zarr.zip",
        ".dafs.zip",
        ".daf.zip",
        ".daf.zarr",
        ".zarr",
        ".daf",
    ] {
        if let Some(stem) = name.strip_suffix(suffix).filter(|s| !s.is_empty()) {
            return stem.to_string();
        }
    }
    name
}

/// The on-disk format (layout and version) of a data set: what its reader read and what its
/// writes are written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// FilesDaf (a directory, or ZipDaf entries) in the forms of this `daf.json` version.
    Files(FilesVersion),
    /// ZarrDaf on Zarr v2 (DataAxesFormats 0.2).
    ZarrV2,
    /// ZarrDaf on Zarr v3 (DataAxesFormats 0.3).
    ZarrV3,
    /// H5df (an HDF5 file), read-only; `packed` when any of its datasets is chunked (only a
    /// DataAxesFormats 0.3 writer packs).
    H5df {
        /// Whether any dataset is packed.
        packed: bool,
    },
}

impl Format {
    /// FilesDaf or Zarr.
    pub fn family(self) -> Family {
        match self {
            // H5df's encoding is FilesDaf 1.0's (`h5df-format.md` §10).
            Format::Files(_) | Format::H5df { .. } => Family::Files,
            Format::ZarrV2 | Format::ZarrV3 => Family::Zarr,
        }
    }
}

/// Where a data set is stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Place {
    /// A directory.
    Dir(PathBuf),
    /// The entries under `prefix` of a ZIP archive.
    Zip {
        /// The archive.
        archive: PathBuf,
        /// `GROUP/` of a multi-data-set archive, or "".
        prefix: String,
    },
    /// A group of an HDF5 file (never written: H5df sources are read-only).
    H5df {
        /// The file.
        file: PathBuf,
        /// The group's path, "" for the root group.
        group: String,
    },
}

/// Where new content of a data set goes, and in which format (the source's own).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The source's format.
    pub format: Format,
    /// Where it is.
    pub place: Place,
}

impl Target {
    /// Whether the data set is in a ZIP archive (append-only).
    pub fn is_zip(&self) -> bool {
        matches!(self.place, Place::Zip { .. })
    }

    /// The directory of a directory source.
    pub fn dir(&self) -> Option<&Path> {
        match &self.place {
            Place::Dir(root) => Some(root),
            Place::Zip { .. } | Place::H5df { .. } => None,
        }
    }
}

/// One data set of a source, with where its pair of views goes (`a/b` → `a/b.daf`, `a/b.daf.zarr`).
#[derive(Debug)]
pub struct NamedDataset {
    /// Relative path of the views' directories, without suffix.
    pub name: String,
    /// The data.
    pub dataset: Dataset,
    /// Where its new content goes.
    pub target: Target,
}

/// An opened source.
#[derive(Debug)]
pub struct Source {
    /// The source path as a file system path.
    pub path: PathBuf,
    /// The data sets it holds (one, except for a multi-data-set archive opened whole).
    pub datasets: Vec<NamedDataset>,
}

/// Parses `arg`, opens its store and reads every data set it holds.
pub fn open_source(arg: &str) -> Result<Source, FormatError> {
    match parse_source(arg)? {
        SourceSpec::Directory(path) => {
            let meta = std::fs::metadata(&path).map_err(|_| FormatError::Missing(path.clone()))?;
            if !meta.is_dir() {
                return Err(FormatError::NotDaf {
                    path,
                    why: "a file, but not a .daf.zarr.zip/.daf.zip archive".into(),
                });
            }
            // Absolute, so files mapped later still resolve after the daemon leaves the cwd.
            let absolute = std::fs::canonicalize(&path).map_err(|e| StoreError::io(&path, e))?;
            let store = dir::open_store(&absolute)?;
            let dataset = root_dataset(&store, &path, Place::Dir(absolute.clone()))?;
            Ok(Source {
                datasets: vec![dataset],
                path: absolute,
            })
        }
        SourceSpec::Zip {
            path,
            layout,
            multi,
            group,
        } => {
            let meta = std::fs::metadata(&path).map_err(|_| FormatError::Missing(path.clone()))?;
            if meta.is_dir() {
                return Err(FormatError::NotDaf {
                    path,
                    why: "a directory named like a ZIP archive".into(),
                });
            }
            let path = std::fs::canonicalize(&path).map_err(|e| StoreError::io(&path, e))?;
            let store = zip::open_store(&path)?;
            let place = |prefix| Place::Zip {
                archive: path.clone(),
                prefix,
            };
            let datasets = archive_datasets(&store, &path, layout, multi, group.as_deref(), place)?;
            Ok(Source { path, datasets })
        }
        SourceSpec::H5df { path, multi, group } => {
            let (path, datasets) = open_h5df(&path, group.as_deref(), multi)?;
            Ok(Source { path, datasets })
        }
    }
}

/// Whether `arg` names an H5df source (read-only).
pub fn is_h5df(arg: &str) -> bool {
    matches!(parse_source(arg), Ok(SourceSpec::H5df { .. }))
}

#[cfg(test)]
#[path = "source_tests.rs"]
mod tests;
