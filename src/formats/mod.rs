//! Formats: the Daf data model and the readers of each on-disk layout.
//!
//! `source` parses a command-line source path (`daf-formats.md` §6.3), opens its store and runs
//! the matching reader: `files` (FilesDaf 1.0/1.1 trees, in a directory or a ZIP, packed
//! payloads included; `files::index` writes the 1.1 root `metadata.json`) or `zarr` (ZarrDaf on
//! Zarr v2 arrays, `zarr_v2`, or Zarr v3 arrays, `zarr_v3`, in a directory or a ZIP, including
//! arrays written by foreign Zarr tools, decoded by `zarr::decode`). Packed arrays (§8) are
//! `shard::Packing`s whose flat content `shard::flat_blob` decodes chunk by chunk on read
//! (`packed::codecs`, `packed::index`, `packed::decode`). Readers check versions and sizes up front and
//! skip (with a warning) a property that is inconsistent, rather than refusing the whole mount.
//! Every name taken from a source passes `names::check_name` before it is used.

pub mod datasets;
pub mod files;
pub mod h5df;
pub mod json;
pub mod model;
pub mod mtime;
pub mod names;
pub mod packed;
pub mod properties;
pub mod remote;
pub mod scalar;
pub mod source;
pub mod strings;
pub mod types;
pub mod validate;
pub mod zarr;

use std::path::PathBuf;

use crate::stores::StoreError;

/// Errors of the formats layer.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// The source path does not exist.
    #[error("source does not exist: {0}")]
    Missing(PathBuf),
    /// The source exists but holds no Daf data set.
    #[error("not a daf data set ({why}): {path}")]
    NotDaf {
        /// The source.
        path: PathBuf,
        /// What is missing.
        why: String,
    },
    /// A version marker daf-mount does not read.
    #[error("unsupported {format} version {version} (daf-mount reads {supported}): {path}")]
    Version {
        /// The format (FilesDaf, ZarrDaf).
        format: &'static str,
        /// The version found.
        version: String,
        /// The versions supported.
        supported: &'static str,
        /// The file holding the marker.
        path: PathBuf,
    },
    /// A source path that breaks the path grammar.
    #[error("{why}: {path}")]
    BadPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        why: String,
    },
    /// Something malformed inside one file; wrapped with the file's name by the reader.
    #[error("{0}")]
    Bad(String),
    /// A file a property needs is not there (yet).
    #[error("no {0}")]
    MissingFile(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl FormatError {
    pub(crate) fn bad(what: impl Into<String>) -> FormatError {
        FormatError::Bad(what.into())
    }
}

impl From<FormatError> for StoreError {
    fn from(e: FormatError) -> StoreError {
        match e {
            FormatError::Store(inner) => inner,
            other => StoreError::Produce(other.to_string()),
        }
    }
}
