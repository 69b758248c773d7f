//! The seed's ZarrDaf layout on Zarr v2 (`daf-formats.md` §4): reading it from any store, and
//! the exact metadata documents Julia writes for it.
//!
//! An array that is stored the way Daf writes it (one chunk covering the shape, no compressor, no
//! filters, C order, little-endian) is served from the chunk's own blob: the same mapped bytes.
//! Any other array is decoded once, on first access, into one contiguous chunk (`zarr_decode`).

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::stores::{Blob, Bytes, StoreIndex};

use super::model::{Axis, Dataset, Payload, Property, ScalarProperty, SparseIndex};
use super::scalar::Scalar;
use super::strings::{decode_vlen, Strings};
use super::types::{Endian, NumType};
use super::zarr_decode::{assemble_numeric, assemble_strings, ArrayKind, ChunkLayout, Compressor};
use super::FormatError;

/// `.zgroup` of every group.
pub const ZGROUP: &str = "{\"zarr_format\":2}";
/// `.zattrs` of every node.
pub const ZATTRS: &str = "{}";

/// The `.zarray` Julia writes for a single-chunk array, in the seed's key order. A zero length
/// becomes chunk length 1, which every reader accepts (a zero chunk length is rejected).
pub fn zarray_json(dtype: &str, strings: bool, shape: &[u64]) -> String {
    let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let chunks: Vec<u64> = shape.iter().map(|&n| n.max(1)).collect();
    let filters = if strings {
        "[{\"id\":\"vlen-utf8\"}]"
    } else {
        "null"
    };
    format!(
        "{{\"dtype\":\"{dtype}\",\"filters\":{filters},\"shape\":[{}],\"order\":\"C\",\"zarr_format\":2,\"chunks\":[{}],\"fill_value\":null,\"compressor\":null}}",
        list(shape),
        list(&chunks)
    )
}

/// The chunk key of a single-chunk array of `ndim` dimensions (`0`, `0.0`).
pub fn single_chunk_key(ndim: usize) -> String {
    vec!["0"; ndim.max(1)].join(".")
}

/// An opened array: what it holds, its shape, and its contiguous content.
#[derive(Debug)]
pub struct ZarrArray {
    /// Element kind.
    pub kind: ArrayKind,
    /// Zarr shape.
    pub shape: Vec<u64>,
    /// The content as Daf stores it (one C-order little-endian chunk, or one vlen-utf8 buffer).
    pub blob: Arc<Blob>,
    /// Latest modification time of its metadata and chunks.
    pub mtime: SystemTime,
}

impl ZarrArray {
    fn len(&self) -> u64 {
        self.shape.iter().product()
    }
}

fn parse_fill(fill: &Value, kind: ArrayKind) -> Result<Vec<u8>, String> {
    let ArrayKind::Numeric(t, _) = kind else {
        return Ok(Vec::new());
    };
    let float = |f: f64| match t {
        NumType::Float32 => (f as f32).to_le_bytes().to_vec(),
        _ => f.to_le_bytes().to_vec(),
    };
    let bytes = match fill {
        Value::Null => vec![0; t.size() as usize],
        Value::Bool(b) => vec![u8::from(*b)],
        Value::String(s) => match s.as_str() {
            "NaN" => float(f64::NAN),
            "Infinity" => float(f64::INFINITY),
            "-Infinity" => float(f64::NEG_INFINITY),
            other => return Err(format!("unsupported fill_value \"{other}\"")),
        },
        Value::Number(n) => {
            let scalar =
                Scalar::from_value(super::types::ElementType::Num(t), &Value::Number(n.clone()))
                    .map_err(|e| e.to_string())?;
            scalar.zarr_chunk()
        }
        other => return Err(format!("unsupported fill_value {other}")),
    };
    Ok(bytes)
}

/// Parses `key/.zarray` into a chunk layout.
fn parse_zarray(bytes: &[u8]) -> Result<ChunkLayout, String> {
    let meta: Value = serde_json::from_slice(bytes).map_err(|e| format!("invalid JSON: {e}"))?;
    if meta.get("zarr_format").and_then(Value::as_u64) != Some(2) {
        return Err("zarr_format is not 2".into());
    }
    let dims = |key: &str| -> Result<Vec<u64>, String> {
        meta.get(key)
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<_>>>())
            .ok_or_else(|| format!("bad \"{key}\""))
    };
    let shape = dims("shape")?;
    let chunks = dims("chunks")?;
    if chunks.len() != shape.len() || chunks.contains(&0) {
        return Err("chunks do not match shape".into());
    }
    let dtype = meta
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or("dtype is not a simple type")?;
    let filters: Vec<String> = match meta.get("filters") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|f| {
                f.get("id")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or("filter without an id".to_string())
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("bad \"filters\"".into()),
    };
    let kind = if dtype == "|O" {
        if filters != ["vlen-utf8"] {
            return Err(format!(
                "object dtype with filters {filters:?}; only vlen-utf8 strings are supported"
            ));
        }
        ArrayKind::Strings
    } else {
        if !filters.is_empty() {
            return Err(format!("unsupported filters {filters:?}"));
        }
        let (t, endian) = NumType::from_zarr_dtype(dtype)
            .ok_or_else(|| format!("unsupported dtype \"{dtype}\""))?;
        ArrayKind::Numeric(t, endian)
    };
    let compressor = Compressor::parse(meta.get("compressor").unwrap_or(&Value::Null))?;
    let fortran_order = match meta.get("order").and_then(Value::as_str) {
        Some("C") | None => false,
        Some("F") => true,
        Some(other) => return Err(format!("unknown order \"{other}\"")),
    };
    let fill = parse_fill(meta.get("fill_value").unwrap_or(&Value::Null), kind)?;
    let separator = meta
        .get("dimension_separator")
        .and_then(Value::as_str)
        .unwrap_or(".");
    if separator != "." && separator != "/" {
        return Err(format!("unknown dimension_separator \"{separator}\""));
    }
    Ok(ChunkLayout {
        shape,
        chunks,
        kind,
        compressor,
        fortran_order,
        fill,
        separator: separator.to_string(),
    })
}

/// The name of the chunk at `coord` (`0` for a 0-d array).
fn chunk_name(coord: &[u64], separator: &str) -> String {
    if coord.is_empty() {
        return "0".to_string();
    }
    coord
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(separator)
}

/// The keys of every chunk of the array under `key` (from its `.zarray`).
pub fn chunk_keys(index: &StoreIndex, key: &str) -> Result<Vec<String>, FormatError> {
    let meta = index
        .get(&format!("{key}/.zarray"))
        .ok_or_else(|| FormatError::MissingFile(format!("{key}/.zarray")))?;
    let layout = parse_zarray(meta.blob.bytes()?.as_slice()).map_err(FormatError::Bad)?;
    Ok(layout
        .chunk_coords()
        .iter()
        .map(|c| format!("{key}/{}", chunk_name(c, &layout.separator)))
        .collect())
}

/// Opens the array stored under `key` (`key/.zarray` and its chunks).
pub fn open_array(index: &StoreIndex, key: &str) -> Result<ZarrArray, FormatError> {
    let meta_entry = index
        .get(&format!("{key}/.zarray"))
        .ok_or_else(|| FormatError::MissingFile(format!("{key}/.zarray")))?;
    let layout = parse_zarray(meta_entry.blob.bytes()?.as_slice()).map_err(FormatError::Bad)?;
    let mtime = index.latest_mtime_under(key).unwrap_or(meta_entry.mtime);
    let chunk_key = |coord: &[u64]| {
        let name = chunk_name(coord, &layout.separator);
        format!("{key}/{name}")
    };
    let (kind, shape) = (layout.kind, layout.shape.clone());
    let len = layout.len();
    if len == 0 {
        let empty = match kind {
            ArrayKind::Strings => vec![0u8; 4],
            ArrayKind::Numeric(..) => Vec::new(),
        };
        return Ok(ZarrArray {
            kind,
            shape,
            blob: Blob::ready(Bytes::from_vec(empty)),
            mtime,
        });
    }
    let single = layout.chunks == layout.shape && layout.compressor.is_none();
    let plain_bytes = (!layout.fortran_order || layout.shape.len() <= 1)
        && matches!(
            kind,
            ArrayKind::Strings | ArrayKind::Numeric(_, Endian::Little)
        );
    if single && plain_bytes {
        let zeros = vec![0u64; layout.shape.len()];
        if let Some(chunk) = index.get(&chunk_key(&zeros)) {
            let fits = match kind {
                ArrayKind::Numeric(t, _) => chunk.blob.len()? == len * t.size(),
                ArrayKind::Strings => true,
            };
            if fits {
                return Ok(ZarrArray {
                    kind,
                    shape,
                    blob: chunk.blob.clone(),
                    mtime,
                });
            }
            return Err(FormatError::bad(format!(
                "chunk has {} bytes, {len} elements expected",
                chunk.blob.len()?
            )));
        }
    }
    // Anything else is decoded once, on first access.
    let stored: Vec<Option<Arc<Blob>>> = layout
        .chunk_coords()
        .iter()
        .map(|c| index.get(&chunk_key(c)).map(|e| e.blob.clone()))
        .collect();
    let what = key.to_string();
    let blob = match kind {
        ArrayKind::Numeric(t, _) => Blob::lazy(Some(len * t.size()), move || {
            assemble_numeric(&layout, &stored)
                .map(Bytes::from_vec)
                .map_err(|e| crate::stores::StoreError::Produce(format!("decoding {what}: {e}")))
        }),
        ArrayKind::Strings => Blob::lazy(None, move || {
            assemble_strings(&layout, &stored)
                .map(Bytes::from_vec)
                .map_err(|e| crate::stores::StoreError::Produce(format!("decoding {what}: {e}")))
        }),
    };
    Ok(ZarrArray {
        kind,
        shape,
        blob,
        mtime,
    })
}

/// Checks the root group and the `daf` version array, then reads the whole data set.
pub fn read_zarr_daf(index: &StoreIndex, path: &Path) -> Result<Dataset, FormatError> {
    let not_daf = |why: &str| FormatError::NotDaf {
        path: path.to_path_buf(),
        why: why.to_string(),
    };
    if !index.contains(".zgroup") {
        if index.contains("zarr.json") {
            return Err(FormatError::Version {
                format: "Zarr",
                version: "3 (DataAxesFormats 0.3+ ZarrDaf)".into(),
                supported: "the Zarr v2 ZarrDaf layout",
                path: path.join("zarr.json"),
            });
        }
        return Err(not_daf("no .zgroup: not a Zarr group"));
    }
    if !index.contains("daf/.zarray") {
        return Err(not_daf("Zarr group without a 'daf' version array"));
    }
    let marker = open_array(index, "daf")?;
    let version = marker.blob.bytes()?;
    match (marker.kind, version.as_slice()) {
        (ArrayKind::Numeric(..), [1, 0]) => {}
        (ArrayKind::Numeric(NumType::UInt8 | NumType::Int8, _), [major, minor]) => {
            return Err(FormatError::Version {
                format: "ZarrDaf",
                version: format!("{major}.{minor}"),
                supported: "1.0",
                path: path.join("daf"),
            })
        }
        _ => return Err(not_daf("the 'daf' array is not two UInt8 numbers")),
    }
    let mut dataset = Dataset {
        mtime: index.root_mtime,
        ..Dataset::default()
    };
    let warn =
        |what: &str, e: FormatError| log::warn!("skipping {what} ({e}) in {}", path.display());
    for name in node_names(index, "scalars") {
        let key = format!("scalars/{name}");
        match read_scalar(index, &key) {
            Ok(prop) => {
                dataset.scalars.insert(name, prop);
            }
            Err(e) => warn(&key, e),
        }
    }
    for name in node_names(index, "axes") {
        let key = format!("axes/{name}");
        match open_array(index, &key).and_then(|a| match (a.kind, a.shape.as_slice()) {
            (ArrayKind::Strings, [n]) => Ok(Axis {
                entries: Strings::from_vlen(a.blob, *n),
                mtime: a.mtime,
            }),
            _ => Err(FormatError::bad("an axis must be a 1-D string array")),
        }) {
            Ok(axis) => {
                dataset.axes.insert(name, axis);
            }
            Err(e) => warn(&key, e),
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
        let mut props = std::collections::BTreeMap::new();
        for name in node_names(index, &format!("vectors/{axis}")) {
            let key = format!("vectors/{axis}/{name}");
            match read_property(index, &key, &[n]) {
                Ok(p) => {
                    props.insert(name, p);
                }
                Err(e) => warn(&key, e),
            }
        }
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
            let mut props = std::collections::BTreeMap::new();
            for name in node_names(index, &format!("matrices/{rows}/{cols}")) {
                let key = format!("matrices/{rows}/{cols}/{name}");
                // Zarr shapes are reversed: [ncols, nrows].
                match read_property(index, &key, &[ncols, nrows]) {
                    Ok(p) => {
                        props.insert(name, p);
                    }
                    Err(e) => warn(&key, e),
                }
            }
            dataset.matrices.insert((rows.clone(), cols), props);
        }
    }
    Ok(dataset)
}

/// Sub-directories of a group, with or without their `.zgroup` (writers other than Julia may
/// leave the per-axis groups out; the axes say which ones must exist).
fn subgroups(index: &StoreIndex, group: &str) -> Vec<String> {
    index
        .children(group)
        .into_iter()
        .filter(|name| {
            !name.starts_with('.') && !index.children(&format!("{group}/{name}")).is_empty()
        })
        .collect()
}

/// Child nodes (groups or arrays) of a group, skipping metadata documents.
fn node_names(index: &StoreIndex, group: &str) -> Vec<String> {
    index
        .children(group)
        .into_iter()
        .filter(|name| {
            !name.starts_with('.')
                && (index.contains(&format!("{group}/{name}/.zarray"))
                    || index.contains(&format!("{group}/{name}/.zgroup")))
        })
        .collect()
}

pub(crate) fn read_scalar(index: &StoreIndex, key: &str) -> Result<ScalarProperty, FormatError> {
    let array = open_array(index, key)?;
    if array.len() != 1 {
        return Err(FormatError::bad(format!(
            "a scalar must have one element, not {}",
            array.len()
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

/// Reads a dense array or a sparse group whose dense Zarr shape must be `shape`.
pub(crate) fn read_property(
    index: &StoreIndex,
    key: &str,
    shape: &[u64],
) -> Result<Property, FormatError> {
    if index.contains(&format!("{key}/.zarray")) {
        let array = open_array(index, key)?;
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
            ArrayKind::Strings => Payload::DenseStrings(Strings::from_vlen(
                array.blob,
                shape[0] * shape.get(1).copied().unwrap_or(1),
            )),
        };
        return Ok(Property {
            payload,
            mtime: array.mtime,
        });
    }
    let mtime = index
        .latest_mtime_under(key)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let (index_kind, nnz, indtype) = if shape.len() == 1 {
        let nzind = open_array(index, &format!("{key}/nzind"))?;
        let t = numeric(&nzind, "nzind")?;
        (
            SparseIndex::Vector {
                nzind: nzind.blob.clone(),
            },
            nzind.len(),
            t,
        )
    } else {
        let colptr = open_array(index, &format!("{key}/colptr"))?;
        let rowval = open_array(index, &format!("{key}/rowval"))?;
        let t = numeric(&colptr, "colptr")?;
        if numeric(&rowval, "rowval")? != t {
            return Err(FormatError::bad("colptr and rowval have different types"));
        }
        if colptr.len() != shape[0] + 1 {
            return Err(FormatError::bad(format!(
                "colptr has {} entries, {} expected",
                colptr.len(),
                shape[0] + 1
            )));
        }
        (
            SparseIndex::Matrix {
                colptr: colptr.blob.clone(),
                rowval: rowval.blob.clone(),
            },
            rowval.len(),
            t,
        )
    };
    if !indtype.is_integer() {
        return Err(FormatError::bad("sparse index arrays must be integers"));
    }
    let nzval = if index.contains(&format!("{key}/nzval/.zarray")) {
        Some(open_array(index, &format!("{key}/nzval"))?)
    } else {
        None
    };
    let (eltype, nzval) = match nzval {
        Some(values) => {
            let t = numeric(&values, "nzval")?;
            if values.len() != nnz {
                return Err(FormatError::bad(format!(
                    "nzval has {} values for {nnz} positions",
                    values.len()
                )));
            }
            (t, Some(values.blob))
        }
        None => (NumType::Bool, None),
    };
    Ok(Property {
        payload: Payload::Sparse {
            eltype,
            indtype,
            index: index_kind,
            nzval,
        },
        mtime,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::{dir::open_directory, zip::open_zip};

    const VECTORS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures/vectors");

    #[test]
    fn zarray_text_matches_the_seed_bytes() {
        assert_eq!(
            zarray_json("<f8", false, &[2, 3]),
            r#"{"dtype":"<f8","filters":null,"shape":[2,3],"order":"C","zarr_format":2,"chunks":[2,3],"fill_value":null,"compressor":null}"#
        );
        assert_eq!(
            zarray_json("|O", true, &[3]),
            r#"{"dtype":"|O","filters":[{"id":"vlen-utf8"}],"shape":[3],"order":"C","zarr_format":2,"chunks":[3],"fill_value":null,"compressor":null}"#
        );
        assert!(zarray_json("<i8", false, &[0]).contains("\"chunks\":[1]"));
        assert_eq!(single_chunk_key(2), "0.0");
    }

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
                Payload::Sparse { nzval: None, .. }
            ));
            assert_eq!(ds.matrices[&("cell".into(), "gene".into())].len(), 2);
        }
    }

    #[test]
    fn v3_and_non_daf_groups_are_refused() {
        let v3 = format!("{VECTORS}/zarr_v3.daf.zarr");
        let err =
            read_zarr_daf(&open_directory(Path::new(&v3)).unwrap(), Path::new(&v3)).unwrap_err();
        assert!(
            err.to_string().contains("unsupported Zarr version 3"),
            "{err}"
        );
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(".zgroup"), ZGROUP).unwrap();
        let err = read_zarr_daf(&open_directory(tmp.path()).unwrap(), tmp.path()).unwrap_err();
        assert!(
            err.to_string().contains("without a 'daf' version array"),
            "{err}"
        );
    }
}
