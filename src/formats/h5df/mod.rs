//! The H5df layout (`h5df-format.md`): Daf data sets in an HDF5 file, one at the root
//! (`x.h5df`) or several in groups (`x.h5dfs#/GROUP`, or every Daf group of `x.h5dfs`).
//!
//! The structure (groups, datasets, datatypes, dataspaces, layouts, chunk places and filter
//! masks, variable-length strings) is read with the HDF5 reference library (`hdf5-metno`) once,
//! at mount; no payload byte goes through it. A flat (contiguous, unfiltered) dataset's payload
//! is the range of the file's one read-only map at the address libhdf5 reports, the same blob in
//! every view; a packed (chunked, filtered) one is decoded chunk by chunk from ranges of that map
//! ([`chunks`], [`filters`]). Strings (axes, string vectors and matrices, `nztxt`, scalars) are
//! read through libhdf5 at mount, after their dataspace was checked against the bytes the file
//! stores for them. H5df sources are read-only.
//!
//! A property whose dataspace disagrees with its axes, claims storage the file does not hold, or
//! uses a filter daf-mount cannot undo is skipped with a warning; the rest of the data set works.

pub mod chunks;
pub mod filters;
mod reader;

use reader::Reader;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::SystemTime;

use hdf5_metno::types::{TypeDescriptor, VarLenAscii, VarLenUnicode};
use hdf5_metno::{Dataset as H5Dataset, Group, LocationType};

use crate::stores::{Blob, Bytes, StoreError};

use super::model::{
    Axis, Dataset, Payload, Properties, Property, ScalarProperty, SparseIndex, SparseStrings,
};
use super::names::accept_name;
use super::scalar::Scalar;
use super::source::{Format, NamedDataset, Place, Target};
use super::strings::{densify_sparse_strings, encode_vlen, SparsePositions, Strings};
use super::types::{ElementType, NumType};
use super::validate::check_axis;
use super::FormatError;
use chunks::{chunked_blob, ChunkedLayout, StoredChunk};
use filters::{check_pipeline, Filter};

/// What the data sets of an H5df file are read from: the open file and its map.
struct H5File {
    /// The whole file, mapped read-only.
    map: Bytes,
    /// The file's modification time (every item's: HDF5 object times are optional).
    mtime: SystemTime,
}

/// libhdf5 prints an error stack on stderr for every failed call unless told not to.
fn quiet_hdf5() {
    static QUIET: Once = Once::new();
    QUIET.call_once(|| hdf5_metno::silence_errors(true));
}

/// The first line of a libhdf5 error (its stacks are long).
fn one_line(e: &hdf5_metno::Error) -> String {
    e.to_string()
        .lines()
        .next()
        .unwrap_or("HDF5 error")
        .to_string()
}

fn h5(e: hdf5_metno::Error) -> FormatError {
    FormatError::bad(one_line(&e))
}

/// The name an H5df file shows under: its file name without `.h5df`/`.h5dfs`.
pub fn display_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "daf".into());
    for suffix in [".h5dfs", ".h5df"] {
        if let Some(stem) = name.strip_suffix(suffix).filter(|s| !s.is_empty()) {
            return stem.to_string();
        }
    }
    name
}

/// Opens the H5df file `path` and reads its data set(s): the one of `group`, the one at the root
/// (not `multi`), or every Daf group (`multi` without a group; nested groups become nested
/// directories). Returns the canonical path and the data sets.
pub fn open_h5df(
    path: &Path,
    group: Option<&str>,
    multi: bool,
) -> Result<(PathBuf, Vec<NamedDataset>), FormatError> {
    let meta = std::fs::metadata(path).map_err(|_| FormatError::Missing(path.to_path_buf()))?;
    if meta.is_dir() {
        return Err(FormatError::NotDaf {
            path: path.to_path_buf(),
            why: "a directory named like an H5df file".into(),
        });
    }
    let path = std::fs::canonicalize(path).map_err(|e| StoreError::io(path, e))?;
    let not_hdf5 = |why: String| FormatError::NotDaf {
        path: path.clone(),
        why: format!("not a readable HDF5 file ({why})"),
    };
    if meta.len() == 0 {
        return Err(not_hdf5("it is empty".into()));
    }
    quiet_hdf5();
    // Without HDF5's own file lock (as HDF5.jl opens files): the mount only reads, and a lock
    // would refuse it while any other program (or a child that inherited its descriptor) has
    // the file open for writing.
    let file = hdf5_metno::File::with_options()
        .with_fapl(|fapl| fapl.file_locking(false))
        .open(&path)
        .map_err(|e| not_hdf5(one_line(&e)))?;
    let handle = std::fs::File::open(&path).map_err(|e| StoreError::io(&path, e))?;
    let map = crate::sys::map_readonly(&handle).map_err(|e| StoreError::io(&path, e))?;
    let source = H5File {
        map: Bytes::from_map(Arc::new(map)),
        mtime: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
    };
    let named = |name: String, prefix: &str, (dataset, packed): (Dataset, bool)| NamedDataset {
        name,
        dataset,
        target: Target {
            format: Format::H5df { packed },
            place: Place::H5df {
                file: path.clone(),
                group: prefix.to_string(),
            },
        },
    };
    let mut datasets = Vec::new();
    if let Some(group) = group {
        let shown = PathBuf::from(format!("{}#/{group}", path.display()));
        let root = file.group(group).map_err(|_| FormatError::NotDaf {
            path: shown.clone(),
            why: format!("no group {group} in the file"),
        })?;
        let name = group.rsplit('/').next().unwrap_or(group).to_string();
        datasets.push(named(name, group, source.read_daf(&root, &shown)?));
    } else if !multi {
        datasets.push(named(
            display_name(&path),
            "",
            source.read_daf(&file, &path)?,
        ));
    } else {
        let mut budget = MAX_GROUPS_SEARCHED;
        for group in daf_groups(&file, "", &mut budget)? {
            let shown = PathBuf::from(format!("{}#/{group}", path.display()));
            let read = if group.is_empty() {
                source.read_daf(&file, &path)
            } else {
                file.group(&group)
                    .map_err(h5)
                    .and_then(|root| source.read_daf(&root, &shown))
            };
            match read {
                Ok(read) => {
                    let name = if group.is_empty() {
                        display_name(&path)
                    } else {
                        group.clone()
                    };
                    datasets.push(named(name, &group, read));
                }
                Err(e) => log::warn!("skipping data set {}: {e}", shown.display()),
            }
        }
        if datasets.is_empty() {
            return Err(FormatError::NotDaf {
                path: path.clone(),
                why: "no Daf group (a group with a 'daf' dataset) found in the file".into(),
            });
        }
    }
    Ok((path, datasets))
}

/// How deep the search for Daf groups goes (HDF5 hard links may make a group its own
/// descendant: the search must end).
const MAX_GROUP_DEPTH: usize = 32;
/// How many groups the search for Daf groups visits at most.
const MAX_GROUPS_SEARCHED: usize = 100_000;

/// The Daf groups under `group` (at path `prefix`): a group holding a dataset `daf` is one (its
/// subtree is not searched); any other group's subgroups are searched, at most
/// [`MAX_GROUP_DEPTH`] deep and [`MAX_GROUPS_SEARCHED`] in all (`budget`). Sorted.
fn daf_groups(group: &Group, prefix: &str, budget: &mut usize) -> Result<Vec<String>, FormatError> {
    if kind_of(group, "daf") == Some(LocationType::Dataset) {
        return Ok(vec![prefix.to_string()]);
    }
    let depth = prefix.split('/').filter(|p| !p.is_empty()).count();
    if depth >= MAX_GROUP_DEPTH || *budget == 0 {
        log::warn!(
            "not searching HDF5 group /{prefix} for Daf groups: too deep or too many groups"
        );
        return Ok(Vec::new());
    }
    let mut found = Vec::new();
    let mut names = group.member_names().map_err(h5)?;
    names.sort();
    for name in names {
        if kind_of(group, &name) != Some(LocationType::Group)
            || !accept_name(&name, || format!("HDF5 group {prefix}/{name}"))
        {
            continue;
        }
        let path = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}/{name}")
        };
        *budget = budget.saturating_sub(1);
        if let Ok(sub) = group.group(&name) {
            found.extend(daf_groups(&sub, &path, budget)?);
        }
    }
    Ok(found)
}

/// What member `name` of `group` is (`None` if there is none or it cannot be resolved).
fn kind_of(group: &Group, name: &str) -> Option<LocationType> {
    if !group.link_exists(name) {
        return None;
    }
    group.loc_type_by_name(name).ok()
}

/// The names of the members of `group` of kind `kind`, sorted, each passed through the name
/// check.
fn members(group: &Group, kind: LocationType, what: &str) -> Vec<String> {
    let mut names = group.member_names().unwrap_or_default();
    names.sort();
    names
        .into_iter()
        .filter(|name| kind_of(group, name) == Some(kind))
        .filter(|name| accept_name(name, || format!("{what}/{name:?}")))
        .collect()
}

/// The subgroup `name` of `group`, if there is one.
fn subgroup(group: &Group, name: &str) -> Option<Group> {
    (kind_of(group, name) == Some(LocationType::Group))
        .then(|| group.group(name).ok())
        .flatten()
}

/// The most chunks a packed dataset may have (its chunks are looked up one by one at mount).
const MAX_CHUNKS: u64 = 1 << 24;

/// What a dataset's elements are.
enum Element {
    /// Numbers (or Bool) of this type.
    Num(NumType),
    /// Fixed-length strings of this many bytes, padded with spaces (or NULs).
    Fixed(usize, bool),
    /// Variable-length strings (UTF-8 or ASCII).
    Vlen {
        /// ASCII rather than UTF-8.
        ascii: bool,
    },
}

fn element_of(ds: &H5Dataset) -> Result<Element, FormatError> {
    use hdf5_metno::types::{FloatSize, IntSize};
    let dtype = ds.dtype().map_err(h5)?;
    if crate::sys::hdf5_is_bitfield(&dtype) {
        return if dtype.size() == 1 {
            Ok(Element::Num(NumType::Bool))
        } else {
            Err(FormatError::bad("a bitfield of more than one byte"))
        };
    }
    let little = dtype.size() == 1
        || matches!(
            dtype.byte_order(),
            hdf5_metno::datatype::ByteOrder::LittleEndian
        );
    let num = |t: NumType| {
        if little {
            Ok(Element::Num(t))
        } else {
            Err(FormatError::bad("big-endian numbers cannot be mapped"))
        }
    };
    match dtype.to_descriptor().map_err(h5)? {
        TypeDescriptor::Integer(size) => num(match size {
            IntSize::U1 => NumType::Int8,
            IntSize::U2 => NumType::Int16,
            IntSize::U4 => NumType::Int32,
            IntSize::U8 => NumType::Int64,
        }),
        TypeDescriptor::Unsigned(size) => num(match size {
            IntSize::U1 => NumType::UInt8,
            IntSize::U2 => NumType::UInt16,
            IntSize::U4 => NumType::UInt32,
            IntSize::U8 => NumType::UInt64,
        }),
        TypeDescriptor::Float(FloatSize::U4) => num(NumType::Float32),
        TypeDescriptor::Float(FloatSize::U8) => num(NumType::Float64),
        TypeDescriptor::FixedAscii(n) | TypeDescriptor::FixedUnicode(n) => {
            Ok(Element::Fixed(n, crate::sys::hdf5_is_spacepad(&dtype)))
        }
        // HDF5.jl reads an enum (h5py's bool among them) as its base integer type.
        TypeDescriptor::Boolean => num(NumType::Int8),
        TypeDescriptor::Enum(e) => num(match (e.size, e.signed) {
            (IntSize::U1, true) => NumType::Int8,
            (IntSize::U2, true) => NumType::Int16,
            (IntSize::U4, true) => NumType::Int32,
            (IntSize::U8, true) => NumType::Int64,
            (IntSize::U1, false) => NumType::UInt8,
            (IntSize::U2, false) => NumType::UInt16,
            (IntSize::U4, false) => NumType::UInt32,
            (IntSize::U8, false) => NumType::UInt64,
        }),
        TypeDescriptor::VarLenUnicode => Ok(Element::Vlen { ascii: false }),
        TypeDescriptor::VarLenAscii => Ok(Element::Vlen { ascii: true }),
        other => Err(FormatError::bad(format!(
            "element type {other:?} is not a Daf type"
        ))),
    }
}

/// The number of elements of a dataspace, if it fits.
fn count_of(shape: &[usize]) -> Option<u64> {
    shape
        .iter()
        .try_fold(1u64, |acc, &n| acc.checked_mul(n as u64))
}

impl H5File {
    /// Checks the `daf` version dataset of `root` and reads its data set; says whether any of
    /// its datasets is packed (chunked).
    fn read_daf(&self, root: &Group, shown: &Path) -> Result<(Dataset, bool), FormatError> {
        let not_daf = |why: &str| FormatError::NotDaf {
            path: shown.to_path_buf(),
            why: why.to_string(),
        };
        if kind_of(root, "daf") != Some(LocationType::Dataset) {
            return Err(not_daf("no 'daf' version dataset"));
        }
        let marker = root.dataset("daf").map_err(h5)?;
        let unsigned = matches!(
            marker.dtype().and_then(|t| t.to_descriptor()),
            Ok(TypeDescriptor::Unsigned(_))
        );
        if !unsigned || marker.shape() != [2] {
            return Err(not_daf(
                "the 'daf' version dataset is not two unsigned integers",
            ));
        }
        let version = marker.read_raw::<u64>().map_err(|e| {
            not_daf(&format!(
                "unreadable 'daf' version dataset: {}",
                one_line(&e)
            ))
        })?;
        if version != [1, 0] {
            return Err(FormatError::Version {
                format: "H5df",
                version: format!("{}.{}", version[0], version[1]),
                supported: "1.0",
                path: shown.to_path_buf(),
            });
        }
        let mut reader = Reader {
            file: self,
            shown,
            packed: false,
        };
        let dataset = reader.read(root);
        Ok((dataset, reader.packed))
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
