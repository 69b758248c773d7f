//! Reading the data sets of an opened store: the one at the root of a directory-like store, or
//! those of an archive-like store (its root, one `#/GROUP`, or every group that holds one). The
//! store may be any [`Store`] (a directory, a ZIP archive, a remote one): this reads its
//! [`StoreIndex`] and never knows where the bytes come from.

use std::path::{Path, PathBuf};

use crate::stores::{Store, StoreIndex};

use super::model::Dataset;
use super::source::{display_name, Family, Format, NamedDataset, Place, Target};
use super::FormatError;
use crate::formats::files::{files_version, read_files_daf};
use crate::formats::zarr::read_zarr_daf;
use crate::formats::zarr::v3::{is_daf_root, ZARR_JSON};

/// The one data set at the root of `store`, a directory-like store (FilesDaf if it holds
/// `daf.json`, ZarrDaf if it holds `.zgroup` or `zarr.json`); `path` names it, and new content
/// goes to `place`.
pub fn root_dataset(
    store: &dyn Store,
    path: &Path,
    place: Place,
) -> Result<NamedDataset, FormatError> {
    let index = store.index()?;
    let family = if index.contains("daf.json") {
        Family::Files
    } else if index.contains(".zgroup") || index.contains("zarr.json") {
        Family::Zarr
    } else {
        // A directory's marker that is there but not a file was skipped by its walk: say so.
        let special = ["daf.json", ".zgroup", "zarr.json"]
            .into_iter()
            .find(|marker| {
                use std::os::unix::fs::FileTypeExt;
                std::fs::symlink_metadata(path.join(marker)).is_ok_and(|m| {
                    let kind = m.file_type();
                    kind.is_fifo()
                        || kind.is_socket()
                        || kind.is_block_device()
                        || kind.is_char_device()
                })
            });
        let why = match special {
            Some(marker) => format!("{marker} is not a regular file (a FIFO, socket or device)"),
            None => "no daf.json (FilesDaf), .zgroup or zarr.json (ZarrDaf)".into(),
        };
        return Err(FormatError::NotDaf {
            path: path.to_path_buf(),
            why,
        });
    };
    let (dataset, format) = read_dataset(family, &index, path)?;
    Ok(NamedDataset {
        name: display_name(path),
        dataset,
        target: Target { format, place },
    })
}

/// The data sets of `store`, an archive-like store whose name (`path`) promises `layout`: the
/// one at its root, the one of `group`, or (`multi` without a group) every one found. New
/// content of the data set under `PREFIX` ("" or `GROUP/`) goes to `place(PREFIX)`.
pub fn archive_datasets(
    store: &dyn Store,
    path: &Path,
    layout: Family,
    multi: bool,
    group: Option<&str>,
    place: impl Fn(String) -> Place,
) -> Result<Vec<NamedDataset>, FormatError> {
    let index = store.index()?;
    let mut datasets = Vec::new();
    if let Some(group) = group {
        let shown = PathBuf::from(format!("{}#/{group}", path.display()));
        let sub = index.subtree(group);
        if sub.is_empty() {
            return Err(FormatError::NotDaf {
                path: shown,
                why: format!("no group {group} in the archive"),
            });
        }
        let name = group.rsplit('/').next().unwrap_or(group).to_string();
        let (dataset, format) = read_dataset(layout, &sub, &shown)?;
        datasets.push(NamedDataset {
            name,
            dataset,
            target: Target {
                format,
                place: place(format!("{group}/")),
            },
        });
    } else if !multi {
        let (dataset, format) = read_dataset(layout, &index, path)?;
        datasets.push(NamedDataset {
            name: display_name(path),
            dataset,
            target: Target {
                format,
                place: place(String::new()),
            },
        });
    } else {
        for group in find_groups(&index, layout) {
            let shown = PathBuf::from(format!("{}#/{group}", path.display()));
            let (idx, name, prefix) = if group.is_empty() {
                (index.clone(), display_name(path), String::new())
            } else {
                (index.subtree(&group), group.clone(), format!("{group}/"))
            };
            match read_dataset(layout, &idx, &shown) {
                Ok((dataset, format)) => datasets.push(NamedDataset {
                    name,
                    dataset,
                    target: Target {
                        format,
                        place: place(prefix),
                    },
                }),
                Err(e) => log::warn!("skipping data set {}: {e}", shown.display()),
            }
        }
        if datasets.is_empty() {
            return Err(FormatError::NotDaf {
                path: path.to_path_buf(),
                why: "no data set found in the archive".into(),
            });
        }
    }
    Ok(datasets)
}

/// Reads the data set of family `family` at the root of `index` (`shown` names it in messages),
/// and says which format it is in.
fn read_dataset(
    family: Family,
    index: &StoreIndex,
    shown: &Path,
) -> Result<(Dataset, Format), FormatError> {
    Ok(match family {
        Family::Files => (
            read_files_daf(index, shown)?,
            Format::Files(files_version(index)),
        ),
        Family::Zarr => {
            let dataset = read_zarr_daf(index, shown)?;
            let format = if dataset.zarr_format == Some(3) {
                Format::ZarrV3
            } else {
                Format::ZarrV2
            };
            (dataset, format)
        }
    })
}

/// The groups of a multi-data-set archive that hold a data set ("" for one at the root),
/// outermost first, never one nested inside another. A ZarrDaf group is a Zarr v2 group with a
/// `daf` array, or a Zarr v3 group whose `zarr.json` has `attributes.daf`.
fn find_groups(index: &StoreIndex, layout: Family) -> Vec<String> {
    let marker = match layout {
        Family::Zarr => "daf/.zarray",
        Family::Files => "daf.json",
    };
    let group_of = |k: &str, marker: &str| {
        if k == marker {
            Some(String::new())
        } else {
            k.strip_suffix(&format!("/{marker}")).map(str::to_string)
        }
    };
    let mut candidates: Vec<String> = index
        .keys()
        .filter_map(|k| group_of(k, marker))
        .filter(|g| {
            layout == Family::Files
                || index.contains(&if g.is_empty() {
                    ".zgroup".into()
                } else {
                    format!("{g}/.zgroup")
                })
        })
        .collect();
    if layout == Family::Zarr {
        candidates.extend(
            index
                .keys()
                .filter_map(|k| group_of(k, ZARR_JSON))
                // DAF creates `axes` with the root: only such groups' documents are read.
                .filter(|g| {
                    let axes = if g.is_empty() {
                        "axes".into()
                    } else {
                        format!("{g}/axes")
                    };
                    index.contains(&format!("{axes}/{ZARR_JSON}")) && is_daf_root(index, g)
                }),
        );
        candidates.sort();
        candidates.dedup();
    }
    candidates.sort_by_key(|g| {
        (
            g.matches('/').count() + usize::from(!g.is_empty()),
            g.clone(),
        )
    });
    let mut groups: Vec<String> = Vec::new();
    for candidate in candidates {
        let nested = groups
            .iter()
            .any(|g| g.is_empty() || candidate.starts_with(&format!("{g}/")));
        if !nested {
            groups.push(candidate);
        }
    }
    groups.sort();
    groups
}
