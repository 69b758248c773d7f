//! The ZarrDaf layout (`daf-formats.md` §4.2, §4.9, §5): the `scalars/`, `axes/`, `vectors/A/`,
//! `matrices/R/C/` groups and the properties in them, read from any store, on Zarr v2 (the
//! seed's layout: a `daf` version array, arrays opened by `zarr_v2`) or Zarr v3 (DataAxesFormats
//! 0.3: the root's `attributes.daf`, arrays opened by `zarr_v3`). One walk serves both versions;
//! only finding nodes and opening arrays differ ([`ZarrVersion`]).

pub mod chunks;
pub mod decode;
pub(in crate::formats) mod meta;
pub mod v2;
pub mod v3;

use std::path::Path;
use std::time::SystemTime;

use serde_json::Value;

use crate::stores::parallel::{map_slices, map_slices_with, Split};
use crate::stores::StoreIndex;

use super::model::{
    Axis, Dataset, Item, Packed, Payload, Properties, Property, PropertyId, ScalarProperty,
    SparseIndex,
};
use super::names::accept_name;
use super::scalar::Scalar;
use super::strings::{check_vlen, decode_vlen, Strings};
use super::types::NumType;
use crate::formats::zarr::decode::ArrayKind;
use crate::formats::zarr::meta::MetaCache;
use crate::formats::zarr::v2::ZarrArray;
use crate::formats::FormatError;
use v2 as zarr_v2;
use v3 as zarr_v3;

/// The Zarr version of a ZarrDaf store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZarrVersion {
    /// Zarr v2 (`.zgroup`, `.zarray`; the seed's ZarrDaf).
    V2,
    /// Zarr v3 (`zarr.json`; DataAxesFormats 0.3).
    V3,
}

impl ZarrVersion {
    /// The version number (`Dataset::zarr_format`).
    pub fn number(self) -> u8 {
        match self {
            ZarrVersion::V2 => 2,
            ZarrVersion::V3 => 3,
        }
    }

    pub(crate) fn open_array(
        self,
        index: &StoreIndex,
        key: &str,
    ) -> Result<ZarrArray, FormatError> {
        self.open_array_through(index, key, &mut MetaCache::none())
    }

    /// [`ZarrVersion::open_array`], its metadata read through `cache`.
    fn open_array_through(
        self,
        index: &StoreIndex,
        key: &str,
        cache: &mut MetaCache,
    ) -> Result<ZarrArray, FormatError> {
        match self {
            ZarrVersion::V2 => zarr_v2::open_array_through(index, key, cache),
            ZarrVersion::V3 => zarr_v3::open_array_through(index, key, cache),
        }
    }

    /// Whether `key` is an array (not a group) of the store.
    fn has_array(self, index: &StoreIndex, key: &str) -> bool {
        match self {
            ZarrVersion::V2 => index.contains(&format!("{key}/.zarray")),
            // An unreadable zarr.json counts as an array: opening it says what is wrong.
            ZarrVersion::V3 => {
                index.contains(&format!("{key}/zarr.json")) && !zarr_v3::is_group(index, key)
            }
        }
    }

    /// Whether `key` is a node (array or group) of the store.
    fn has_node(self, index: &StoreIndex, key: &str) -> bool {
        let has = |document: &str| index.contains(&[key, "/", document].concat());
        match self {
            ZarrVersion::V2 => has(".zarray") || has(".zgroup"),
            ZarrVersion::V3 => has("zarr.json"),
        }
    }
}

/// Fewest arrays of one group worth a thread of their own: below this a group is read on the
/// calling thread (starting a thread costs about as much as reading a few dozen arrays).
const MIN_ARRAYS_PER_THREAD: usize = 256;

/// Checks the root group and its version marker, then reads the whole data set: Zarr v3 when
/// the root has a `zarr.json` (and no v2 `daf` array), else Zarr v2. The arrays of a large
/// group are read on every core ([`read_zarr_daf_with`]).
pub fn read_zarr_daf(index: &StoreIndex, path: &Path) -> Result<Dataset, FormatError> {
    let mut warn =
        |what: &str, e: FormatError| log::warn!("skipping {what} ({e}) in {}", path.display());
    read_zarr_daf_with(
        index,
        path,
        Split::per_core(MIN_ARRAYS_PER_THREAD),
        &mut warn,
    )
}

/// [`read_zarr_daf`] with the arrays of each group read on the threads `split` allows (the
/// model and the order of the `skipped` calls do not depend on it); `skipped` is told of each
/// node that cannot be read, with why, in source order.
pub(crate) fn read_zarr_daf_with(
    index: &StoreIndex,
    path: &Path,
    split: Split,
    skipped: &mut dyn FnMut(&str, FormatError),
) -> Result<Dataset, FormatError> {
    let v2_marker = index.contains(".zgroup") && index.contains("daf/.zarray");
    let version = if index.contains("zarr.json") && !v2_marker {
        zarr_v3::check_marker(index, path)?;
        ZarrVersion::V3
    } else {
        check_v2_marker(index, path)?;
        ZarrVersion::V2
    };
    let reader = TreeReader {
        index,
        path,
        version,
        split,
    };
    Ok(reader.read(skipped))
}

/// Checks the Zarr v2 root group and its `daf` version array.
fn check_v2_marker(index: &StoreIndex, path: &Path) -> Result<(), FormatError> {
    let not_daf = |why: &str| FormatError::NotDaf {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    if !index.contains(".zgroup") {
        return Err(not_daf("no .zgroup or zarr.json: not a Zarr group"));
    }
    if !index.contains("daf/.zarray") {
        return Err(not_daf("Zarr group without a 'daf' version array"));
    }
    // A marker that cannot be read refuses the source with one line naming it.
    let bad_marker = |e: &dyn std::fmt::Display| FormatError::NotDaf {
        path: path.join("daf"),
        why: format!("unreadable 'daf' version array: {e}"),
    };
    let marker = zarr_v2::open_array(index, "daf").map_err(|e| bad_marker(&e))?;
    let version = marker.blob.bytes().map_err(|e| bad_marker(&e))?;
    match (marker.kind, version.as_slice()) {
        (ArrayKind::Numeric(..), [1, 0]) => Ok(()),
        (ArrayKind::Numeric(NumType::UInt8 | NumType::Int8, _), [major, minor]) => {
            Err(FormatError::Version {
                format: "ZarrDaf",
                version: format!("{major}.{minor}"),
                supported: "1.0",
                path: path.join("daf"),
            })
        }
        _ => Err(not_daf("the 'daf' array is not two UInt8 numbers")),
    }
}

/// Reads every scalar, axis, vector and matrix of a ZarrDaf whose marker was checked.
struct TreeReader<'a> {
    index: &'a StoreIndex,
    path: &'a Path,
    version: ZarrVersion,
    split: Split,
}

impl TreeReader<'_> {
    /// The whole data set. The properties of a group are collected from their sorted names in
    /// one step ([`Properties`]: the names in one buffer, the properties in one vector, each
    /// sized exactly), not filled one insert at a time.
    fn read(&self, skipped: &mut dyn FnMut(&str, FormatError)) -> Dataset {
        let (index, path, version) = (self.index, self.path, self.version);
        let mut dataset = Dataset {
            mtime: index.root_mtime,
            zarr_format: Some(version.number()),
            ..Dataset::default()
        };
        for name in self.node_names("scalars") {
            let key = format!("scalars/{name}");
            match read_scalar_of(version, index, &key) {
                Ok(prop) => {
                    dataset.scalars.insert(name, prop);
                }
                Err(e) => skipped(&key, e),
            }
        }
        for name in self.node_names("axes") {
            let key = format!("axes/{name}");
            match read_axis_of(version, index, &key) {
                Ok(axis) => {
                    dataset.axes.insert(name, axis);
                }
                Err(e) => skipped(&key, e),
            }
        }
        for axis in subgroups(index, "vectors") {
            let Some(n) = dataset.axes.get(&axis).map(Axis::len) else {
                log::warn!(
                    "skipping vectors/{axis}: no axis {axis} in {}",
                    path.display()
                );
                continue;
            };
            let props = self.properties(&format!("vectors/{axis}"), &[n], skipped);
            dataset.vectors.insert(axis, props);
        }
        for rows in subgroups(index, "matrices") {
            for cols in subgroups(index, &format!("matrices/{rows}")) {
                let (Some(nrows), Some(ncols)) = (
                    dataset.axes.get(&rows).map(Axis::len),
                    dataset.axes.get(&cols).map(Axis::len),
                ) else {
                    log::warn!(
                        "skipping matrices/{rows}/{cols}: unknown axis in {}",
                        path.display()
                    );
                    continue;
                };
                // Zarr shapes are reversed: [ncols, nrows].
                let group = format!("matrices/{rows}/{cols}");
                let props = self.properties(&group, &[ncols, nrows], skipped);
                dataset.matrices.insert((rows.clone(), cols), props);
            }
        }
        dataset
    }

    /// The properties of `group`, each of Zarr shape `shape`: read on the threads the split
    /// allows, kept (or passed to `skipped`) in their sorted order. Each sub-directory is read
    /// through a copy of the index that sees only its keys (a few, not the whole source's).
    fn properties(
        &self,
        group: &str,
        shape: &[u64],
        skipped: &mut dyn FnMut(&str, FormatError),
    ) -> Properties {
        let (index, version) = (self.index, self.version);
        let dirs = index.dir_windows(group);
        // Each thread keeps the layouts of the documents it parsed: most arrays of a group
        // have the same document.
        let init = || (MetaCache::new(), index.clone(), String::new());
        let read = map_slices_with(
            &dirs,
            self.split,
            init,
            |(cache, seen, key), (name, keys)| {
                seen.see(keys);
                key.clear();
                key.push_str(group);
                key.push('/');
                key.push_str(name);
                let node = !name.starts_with('.') && version.has_node(seen, key);
                node.then(|| read_property_through(version, seen, key, shape, cache))
            },
        );
        dirs.into_iter()
            .zip(read)
            .filter_map(|((name, _), read)| Some((name, read?)))
            .filter(|(name, _)| accept_name(name, || format!("node {group}/{name:?}")))
            .filter_map(|(name, property)| match property {
                Ok(p) => Some((name, p)),
                Err(e) => {
                    skipped(&format!("{group}/{name}"), e);
                    None
                }
            })
            .collect()
    }

    /// Child nodes (groups or arrays) of a group, skipping metadata documents; whether a child
    /// is a node is looked up on the threads the split allows.
    fn node_names(&self, group: &str) -> Vec<String> {
        let (index, version) = (self.index, self.version);
        let children = index.children(group);
        let nodes = map_slices(&children, self.split, |name| {
            !name.starts_with('.') && version.has_node(index, &format!("{group}/{name}"))
        });
        children
            .into_iter()
            .zip(nodes)
            .filter(|(name, node)| *node && accept_name(name, || format!("node {group}/{name:?}")))
            .map(|(name, _)| name)
            .collect()
    }
}

/// Sub-directories of a group, with or without their `.zgroup` (writers other than Julia may
/// leave the per-axis groups out; the axes say which ones must exist).
fn subgroups(index: &StoreIndex, group: &str) -> Vec<String> {
    index
        .children(group)
        .into_iter()
        .filter(|name| {
            !name.starts_with('.')
                && index.has_children(&format!("{group}/{name}"))
                && accept_name(name, || format!("group {group}/{name:?}"))
        })
        .collect()
}

/// Reads item `id` of a ZarrDaf of `version` from `index` (a source's keys, or staged files);
/// `dataset` gives the axes a vector or matrix must fit.
pub(crate) fn read_item(
    version: ZarrVersion,
    dataset: &Dataset,
    id: &PropertyId,
    index: &StoreIndex,
) -> Result<Item, FormatError> {
    let path = id.path();
    Ok(match id {
        PropertyId::Scalar(_) => Item::Scalar(read_scalar_of(version, index, &path)?),
        PropertyId::Axis(_) => Item::Axis(read_axis_of(version, index, &path)?),
        _ => {
            let shape = dataset.property_shape(id)?.zarr();
            Item::Property(read_property_of(version, index, &path, &shape)?)
        }
    })
}

/// Reads the axis array under `key`: a 1-D string array whose entries are checked now (axis
/// lengths size every property along them: never trusted from the shape alone).
pub(crate) fn read_axis_of(
    version: ZarrVersion,
    index: &StoreIndex,
    key: &str,
) -> Result<Axis, FormatError> {
    let a = version.open_array(index, key)?;
    match (a.kind, a.shape.as_slice()) {
        (ArrayKind::Strings, [n]) => {
            check_vlen(a.blob.bytes()?.as_slice(), *n).map_err(FormatError::Bad)?;
            Ok(Axis {
                entries: Strings::from_vlen(a.blob, *n).named(key),
                mtime: a.mtime,
            })
        }
        _ => Err(FormatError::bad("an axis must be a 1-D string array")),
    }
}

/// Reads the scalar array under `key` (one element).
pub(crate) fn read_scalar_of(
    version: ZarrVersion,
    index: &StoreIndex,
    key: &str,
) -> Result<ScalarProperty, FormatError> {
    let array = version.open_array(index, key)?;
    if array.element_count() != 1 {
        return Err(FormatError::bad(format!(
            "a scalar must have one element, not {}",
            array.element_count()
        )));
    }
    let bytes = array.blob.bytes()?;
    let scalar = match array.kind {
        ArrayKind::Numeric(t, _) => Scalar::from_le_bytes(t, bytes.as_slice())?,
        ArrayKind::Strings => {
            let items = decode_vlen(bytes.as_slice(), 1).map_err(FormatError::Bad)?;
            let text = std::str::from_utf8(items[0])
                .map_err(|_| FormatError::bad("string is not UTF-8"))?;
            Scalar::from_value(
                super::types::ElementType::String,
                &Value::String(text.to_string()),
            )?
        }
    };
    Ok(ScalarProperty {
        scalar,
        mtime: array.mtime,
    })
}

fn numeric(array: &ZarrArray, what: &str) -> Result<NumType, FormatError> {
    match array.kind {
        ArrayKind::Numeric(t, _) if array.shape.len() == 1 => Ok(t),
        _ => Err(FormatError::bad(format!(
            "{what} must be a 1-D numeric array"
        ))),
    }
}

/// Records the packing of a packed component (`""` for a dense property).
fn note_packing(packed: &mut Packed, component: &str, array: &ZarrArray) {
    if let Some(packing) = &array.packing {
        packed.insert(component.to_string(), packing.clone());
    }
}

/// Reads a dense array or a sparse group whose dense Zarr shape must be `shape`.
pub(crate) fn read_property_of(
    version: ZarrVersion,
    index: &StoreIndex,
    key: &str,
    shape: &[u64],
) -> Result<Property, FormatError> {
    read_property_through(version, index, key, shape, &mut MetaCache::none())
}

/// [`read_property_of`], its metadata documents read through `cache`.
fn read_property_through(
    version: ZarrVersion,
    index: &StoreIndex,
    key: &str,
    shape: &[u64],
    cache: &mut MetaCache,
) -> Result<Property, FormatError> {
    let mut packed = Packed::default();
    // One parse of a v3 node's zarr.json says whether it is an array and opens it.
    let dense = match version {
        ZarrVersion::V3 => zarr_v3::open_node_through(index, key, cache)?,
        ZarrVersion::V2 => match index.get_once(&format!("{key}/.zarray")) {
            Some(meta) => Some(zarr_v2::open_array_cached(index, key, &meta, cache)?),
            None => None,
        },
    };
    if let Some(array) = dense {
        note_packing(&mut packed, "", &array);
        if array.shape != shape {
            return Err(FormatError::bad(format!(
                "shape {:?}, {shape:?} expected",
                array.shape
            )));
        }
        let payload = match array.kind {
            ArrayKind::Numeric(t, _) => Payload::Dense {
                eltype: t,
                data: array.blob,
            },
            ArrayKind::Strings => Payload::DenseStrings(
                Strings::from_vlen(
                    array.blob,
                    shape[0].saturating_mul(shape.get(1).copied().unwrap_or(1)),
                )
                .named(key),
            ),
        };
        return Ok(Property {
            payload,
            mtime: array.mtime.into(),
            packed,
        });
    }
    let mtime = index
        .latest_mtime_under(key)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let (index_kind, nnz, indtype) = if shape.len() == 1 {
        let nzind = version.open_array_through(index, &format!("{key}/nzind"), cache)?;
        let t = numeric(&nzind, "nzind")?;
        note_packing(&mut packed, "nzind", &nzind);
        (
            SparseIndex::Vector {
                nzind: nzind.blob.clone(),
            },
            nzind.element_count(),
            t,
        )
    } else {
        let colptr = version.open_array_through(index, &format!("{key}/colptr"), cache)?;
        let rowval = version.open_array_through(index, &format!("{key}/rowval"), cache)?;
        note_packing(&mut packed, "colptr", &colptr);
        note_packing(&mut packed, "rowval", &rowval);
        let t = numeric(&colptr, "colptr")?;
        if numeric(&rowval, "rowval")? != t {
            return Err(FormatError::bad("colptr and rowval have different types"));
        }
        let expected = shape[0].saturating_add(1);
        if colptr.element_count() != expected {
            return Err(FormatError::bad(format!(
                "colptr has {} entries, {expected} expected",
                colptr.element_count(),
            )));
        }
        (
            SparseIndex::Matrix {
                colptr: colptr.blob.clone(),
                rowval: rowval.blob.clone(),
            },
            rowval.element_count(),
            t,
        )
    };
    if !indtype.is_integer() {
        return Err(FormatError::bad("sparse index arrays must be integers"));
    }
    let nzval = if version.has_array(index, &format!("{key}/nzval")) {
        let values = version.open_array_through(index, &format!("{key}/nzval"), cache)?;
        note_packing(&mut packed, "nzval", &values);
        Some(values)
    } else {
        None
    };
    let (eltype, nzval) = match nzval {
        Some(values) => {
            let t = numeric(&values, "nzval")?;
            if values.element_count() != nnz {
                return Err(FormatError::bad(format!(
                    "nzval has {} values for {nnz} positions",
                    values.element_count()
                )));
            }
            (t, Some(values.blob))
        }
        None => (NumType::Bool, None),
    };
    Ok(Property {
        payload: Payload::sparse(eltype, indtype, index_kind, nzval),
        mtime: mtime.into(),
        packed,
    })
}

#[cfg(test)]
#[path = "par_tests.rs"]
mod par_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::zarr::v2::ZGROUP;
    use crate::stores::{dir::open_directory, zip::open_zip};
    use std::sync::Arc;

    const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

    #[test]
    fn reads_the_v2_fixture_from_a_directory_and_a_zip_zero_copy() {
        for (path, idx) in [
            (
                format!("{VECTORS}/zarr_v2.daf.zarr"),
                open_directory(Path::new(&format!("{VECTORS}/zarr_v2.daf.zarr"))).unwrap(),
            ),
            (
                format!("{VECTORS}/zarr_v2.daf.zarr.zip"),
                open_zip(Path::new(&format!("{VECTORS}/zarr_v2.daf.zarr.zip"))).unwrap(),
            ),
        ] {
            let ds = read_zarr_daf(&idx, Path::new(&path)).unwrap();
            assert_eq!(
                ds.scalars["title"].scalar.files_json(),
                "{\"value\":\"hello\",\"type\":\"String\"}\n"
            );
            assert_eq!(ds.axes["cell"].len(), 3);
            let Payload::Dense { eltype, data } = &ds.vectors["cell"]["score"].payload else {
                panic!()
            };
            assert_eq!(*eltype, NumType::Float32);
            assert!(Arc::ptr_eq(
                data,
                &idx.get("vectors/cell/score/0").unwrap().blob
            ));
            assert!(matches!(
                ds.vectors["cell"]["is_marker"].payload,
                Payload::Sparse(ref s) if s.nzval.is_none()
            ));
            assert_eq!(ds.matrices[&("cell".into(), "gene".into())].len(), 2);
        }
    }

    #[test]
    fn non_daf_groups_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(".zgroup"), ZGROUP).unwrap();
        let err = read_zarr_daf(&open_directory(tmp.path()).unwrap(), tmp.path()).unwrap_err();
        assert!(
            err.to_string().contains("without a 'daf' version array"),
            "{err}"
        );
    }
}
