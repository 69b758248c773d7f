//! Reading a FilesDaf tree (`daf-formats.md` §2, §3) from any store: a directory, or the entries
//! of a ZIP (ZipDaf, §6).
//!
//! Enumeration follows upstream: `scalars/*.json`, `axes/*.txt`, `vectors/A/*.json`,
//! `matrices/R/C/*.json`; other names are ignored. Payloads become blobs of the store (mapped
//! ranges), never copies; a `.data` file longer than its axis requires is cut to its logical size.

pub mod index;
pub mod source;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::stores::{Blob, Bytes, Entry, StoreIndex};

use super::json::{parse_descriptor, Descriptor, FilesVersion};
use super::model::{
    Axis, Dataset, FilesSource, Payload, Properties, Property, PropertyId, ScalarProperty, Shape,
    SparseIndex, SparseStrings,
};
use super::names::accept_name;
use super::scalar::Scalar;
use super::strings::{count_lines, densify_sparse_strings, SparsePositions, Strings};
use super::types::{ElementType, NumType};
use super::FormatError;
use crate::formats::packed::{flat_blob, Packing};

/// Checks `daf.json` and reads the whole data set.
pub fn read_files_daf(index: &StoreIndex, path: &Path) -> Result<Dataset, FormatError> {
    let marker = index.get("daf.json").ok_or_else(|| FormatError::NotDaf {
        path: path.to_path_buf(),
        why: "no daf.json".into(),
    })?;
    check_version(marker.blob.bytes()?.as_slice(), &path.join("daf.json"))?;
    let mut dataset = Dataset {
        mtime: index.root_mtime,
        ..Dataset::default()
    };
    for file in index.children("axes") {
        let Some(name) = file.strip_suffix(".txt") else {
            continue;
        };
        let key = format!("axes/{file}");
        if !accept_name(name, || format!("axis {key:?} in {}", path.display())) {
            continue;
        }
        match read_axis(index, &key) {
            Ok(axis) => {
                dataset.axes.insert(name.to_string(), axis);
            }
            Err(e) => log::warn!("skipping axis {name} ({key}: {e}) in {}", path.display()),
        }
    }
    for file in index.children("scalars") {
        let Some(name) = file.strip_suffix(".json") else {
            continue;
        };
        let key = format!("scalars/{file}");
        if !accept_name(name, || format!("scalar {key:?} in {}", path.display())) {
            continue;
        }
        let Some(entry) = index.get(&key) else {
            continue;
        };
        match entry
            .blob
            .bytes()
            .map_err(FormatError::from)
            .and_then(|b| Scalar::from_json(b.as_slice()))
        {
            Ok(scalar) => {
                dataset.scalars.insert(
                    name.to_string(),
                    ScalarProperty {
                        scalar,
                        mtime: entry.mtime,
                    },
                );
            }
            Err(e) => log::warn!("skipping scalar {name} ({key}: {e}) in {}", path.display()),
        }
    }
    for axis in index.children("vectors") {
        if !accept_name(&axis, || format!("vectors/{axis:?}/ in {}", path.display())) {
            continue;
        }
        let Some(len) = dataset.axes.get(&axis).map(Axis::len) else {
            log::warn!(
                "skipping vectors/{axis}/: no axis {axis} in {}",
                path.display()
            );
            continue;
        };
        let dir = format!("vectors/{axis}");
        let props = read_properties(index, &dir, Shape::Vector(len), path);
        dataset.vectors.insert(axis, props);
    }
    for rows in index.children("matrices") {
        if !accept_name(&rows, || {
            format!("matrices/{rows:?}/ in {}", path.display())
        }) {
            continue;
        }
        for cols in index.children(&format!("matrices/{rows}")) {
            if !accept_name(&cols, || {
                format!("matrices/{rows}/{cols:?}/ in {}", path.display())
            }) {
                continue;
            }
            let (Some(nrows), Some(ncols)) = (
                dataset.axes.get(&rows).map(Axis::len),
                dataset.axes.get(&cols).map(Axis::len),
            ) else {
                log::warn!(
                    "skipping matrices/{rows}/{cols}/: unknown axis in {}",
                    path.display()
                );
                continue;
            };
            let dir = format!("matrices/{rows}/{cols}");
            let props = read_properties(index, &dir, Shape::Matrix(nrows, ncols), path);
            dataset.matrices.insert((rows.clone(), cols), props);
        }
    }
    dataset.files_source = source_documents(index, &dataset);
    Ok(dataset)
}

/// Documents up to this size are kept as copies, larger ones as the store's blob.
const DOCUMENT_COPY_LIMIT: u64 = 64 * 1024;

/// The source's own documents for the FilesDaf view: `daf.json`, the file of every scalar read,
/// and the descriptor of every property read, with the view version each one fits (see
/// [`FilesSource::forms`]; HEAD writes 1.1-form descriptors into 1.0 directories, §3.1, which a
/// 1.0 view must show in the 1.0 form). A packed property's descriptor is never served: the
/// view shows its payload flat, so it gets a flat descriptor.
fn source_documents(index: &StoreIndex, dataset: &Dataset) -> FilesSource {
    let version = files_version(index);
    let mut forms = BTreeMap::new();
    let mut paths = vec!["daf.json".to_string()];
    paths.extend(dataset.scalars.keys().map(|n| format!("scalars/{n}.json")));
    for path in &paths {
        forms.insert(path.clone(), version);
    }
    for p in dataset.properties() {
        let path = format!("{}.json", p.path);
        let descriptor = index
            .get(&path)
            .and_then(|e| e.blob.bytes().ok())
            .and_then(|b| parse_descriptor(b.as_slice()).ok());
        let Some(descriptor) = descriptor.filter(|d| !d.is_packed()) else {
            continue;
        };
        let form = match descriptor {
            Descriptor::Dense { .. } => None,
            d if d.is_1_1_form() => Some(FilesVersion::V1_1),
            _ if version == FilesVersion::V1_0 => Some(FilesVersion::V1_0),
            // A 1.1 source's own 1.0-form sparse descriptor: 1.1 readers read it too.
            _ => None,
        };
        if let Some(form) = form {
            forms.insert(path.clone(), form);
        }
        paths.push(path);
    }
    // Kept as small heap copies (they were read at mount): a mapping per document would count
    // against the process's map limit (vm.max_map_count) for as long as the mount lasts.
    let documents = paths
        .into_iter()
        .filter_map(|path| {
            let blob = &index.get(&path)?.blob;
            let kept = match blob.bytes() {
                Ok(b) if b.len() <= DOCUMENT_COPY_LIMIT => {
                    Blob::ready(Bytes::from_vec(b.as_slice().to_vec()))
                }
                _ => blob.clone(),
            };
            Some((path, kept))
        })
        .collect();
    FilesSource {
        version: Some(version),
        documents,
        forms,
    }
}

/// The packed payload files (§8) FilesDaf property `id` may have, which the (flat) FilesDaf view
/// does not name: a directory source's item loses them too when it is replaced or deleted.
pub fn packed_payloads(id: &PropertyId) -> Vec<String> {
    let components: &[&str] = match id {
        PropertyId::Vector { .. } => &["", ".nzind", ".nzval"],
        PropertyId::Matrix { .. } => &["", ".colptr", ".rowval", ".nzval"],
        _ => &[],
    };
    let base = id.path();
    components
        .iter()
        .map(|c| format!("{base}{c}.zip"))
        .collect()
}

/// The version of a FilesDaf tree (1.0 unless `daf.json` says 1.1).
pub fn files_version(index: &StoreIndex) -> FilesVersion {
    let version = index
        .get("daf.json")
        .and_then(|e| e.blob.bytes().ok())
        .and_then(|b| serde_json::from_slice::<Value>(b.as_slice()).ok())
        .and_then(|d| d.get("version").cloned());
    match version
        .as_ref()
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_u64).collect::<Vec<_>>())
    {
        Some(v) if v == [1, 1] => FilesVersion::V1_1,
        _ => FilesVersion::V1_0,
    }
}

fn check_version(bytes: &[u8], marker: &Path) -> Result<(), FormatError> {
    let bad = |why: &str| FormatError::NotDaf {
        path: marker.to_path_buf(),
        why: why.to_string(),
    };
    let doc: Value = serde_json::from_slice(bytes).map_err(|_| bad("daf.json is not JSON"))?;
    let version = doc
        .get("version")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("daf.json has no version"))?;
    let parts: Vec<u64> = version.iter().filter_map(Value::as_u64).collect();
    match parts.as_slice() {
        [1, 0] | [1, 1] => Ok(()),
        [major, minor] => Err(FormatError::Version {
            format: "FilesDaf",
            version: format!("{major}.{minor}"),
            supported: "1.0 and 1.1",
            path: marker.to_path_buf(),
        }),
        _ => Err(bad("daf.json version is not [major, minor]")),
    }
}

pub(crate) fn read_axis(index: &StoreIndex, key: &str) -> Result<Axis, FormatError> {
    let entry = index.get(key).ok_or_else(|| FormatError::bad("missing"))?;
    let count = count_lines(entry.blob.bytes()?.as_slice()).map_err(FormatError::Bad)?;
    Ok(Axis {
        entries: Strings::from_lines(entry.blob.clone(), count).named(key),
        mtime: entry.mtime,
    })
}

fn read_properties(index: &StoreIndex, dir: &str, shape: Shape, path: &Path) -> Properties {
    // Collected (sorted, sized exactly) rather than inserted one at a time.
    let children = index.children(dir);
    children
        .iter()
        .filter_map(|file| {
            let name = file.strip_suffix(".json")?;
            let base = format!("{dir}/{name}");
            if !accept_name(name, || format!("{base:?} in {}", path.display())) {
                return None;
            }
            match read_property(index, &base, shape) {
                Ok(prop) => Some((name, prop)),
                Err(e) => {
                    log::warn!("skipping {base} ({e}) in {}", path.display());
                    None
                }
            }
        })
        .collect()
}

/// The files of one property, tracking the latest mtime among those used, and the packed ones
/// among them (`daf-formats.md` §8: `NAME.zip`, `NAME.COMP.zip`), read as lazily decoded flat
/// blobs.
struct PropertyFiles<'a> {
    index: &'a StoreIndex,
    base: &'a str,
    mtime: SystemTime,
    /// The packed payloads the descriptor declares: component (`""` for a dense payload) → its
    /// descriptor object with the packing keys.
    specs: BTreeMap<String, Value>,
    /// The packing of every packed payload read.
    packed: BTreeMap<String, Arc<Packing>>,
}

impl PropertyFiles<'_> {
    fn optional(&mut self, ext: &str) -> Option<Arc<Blob>> {
        let entry: &Entry = self.index.get(&format!("{}.{ext}", self.base))?;
        self.mtime = self.mtime.max(entry.mtime);
        Some(entry.blob.clone())
    }

    fn required(&mut self, ext: &str) -> Result<Arc<Blob>, FormatError> {
        self.optional(ext)
            .ok_or_else(|| FormatError::MissingFile(format!("{}.{ext}", self.base)))
    }

    /// The flat content of packed payload `comp` (`""`: the dense payload `NAME.zip`, else
    /// `NAME.COMP.zip`) of `shape` (C order) elements of `eltype`, decoded lazily from its shard.
    fn unpack(
        &mut self,
        comp: &str,
        eltype: ElementType,
        shape: Vec<u64>,
    ) -> Result<Arc<Blob>, FormatError> {
        let ext = if comp.is_empty() {
            "zip".to_string()
        } else {
            format!("{comp}.zip")
        };
        let spec = self
            .specs
            .get(comp)
            .ok_or_else(|| FormatError::bad(format!("{comp} is not packed")))?
            .clone();
        let shard = self.required(&ext)?;
        let what = format!("{}.{ext}", self.base);
        let packing = Packing::from_files_descriptor(&spec, eltype, shape, shard)
            .map_err(|e| FormatError::bad(format!(".{ext}: {e}")))?;
        let flat =
            flat_blob(&packing, what).map_err(|e| FormatError::bad(format!(".{ext}: {e}")))?;
        self.packed.insert(comp.to_string(), Arc::new(packing));
        Ok(flat)
    }

    /// Component `comp` of `t` elements: the file `.comp`, whose size gives the element count
    /// (which must be `count` when given), or the packed `.comp.zip`, whose count the descriptor
    /// declares. Returns the flat blob and its element count.
    fn component(
        &mut self,
        comp: &str,
        t: NumType,
        count: Option<u64>,
    ) -> Result<(Arc<Blob>, u64), FormatError> {
        if let Some(spec) = self.specs.get(comp) {
            let declared = spec.get("n_elements").and_then(Value::as_u64);
            let n = match (count, declared) {
                (Some(c), Some(d)) if c != d => {
                    return Err(FormatError::bad(format!(
                        "packed {comp} declares {d} elements, {c} expected"
                    )))
                }
                (Some(n), _) | (None, Some(n)) => n,
                (None, None) => {
                    return Err(FormatError::bad(format!(
                        "packed {comp} without \"n_elements\""
                    )))
                }
            };
            return Ok((self.unpack(comp, ElementType::Num(t), vec![n])?, n));
        }
        let blob = self.required(comp)?;
        let len = blob.len()?;
        match count {
            Some(count) if Some(len) != count.checked_mul(t.size()) => {
                Err(FormatError::bad(format!(
                    ".{comp} has {len} bytes, {count} × {} expected",
                    t.julia_name()
                )))
            }
            Some(count) => Ok((blob, count)),
            None if len % t.size() != 0 => Err(FormatError::bad(format!(
                ".{comp} size {len} is not a multiple of {}",
                t.size()
            ))),
            None => Ok((blob, len / t.size())),
        }
    }

    /// A component of exactly `count` elements of `t`.
    fn sized(&mut self, comp: &str, t: NumType, count: u64) -> Result<Arc<Blob>, FormatError> {
        Ok(self.component(comp, t, Some(count))?.0)
    }

    /// A component holding a whole number of `t` elements, and that number.
    fn count_of(&mut self, comp: &str, t: NumType) -> Result<(Arc<Blob>, u64), FormatError> {
        self.component(comp, t, None)
    }
}

pub(crate) fn read_property(
    index: &StoreIndex,
    base: &str,
    shape: Shape,
) -> Result<Property, FormatError> {
    let descriptor_entry = index
        .get(&format!("{base}.json"))
        .ok_or_else(|| FormatError::MissingFile(format!("{base}.json")))?;
    let descriptor = parse_descriptor(descriptor_entry.blob.bytes()?.as_slice())?;
    let specs = match &descriptor {
        Descriptor::Dense {
            packed: Some(spec), ..
        } => BTreeMap::from([(String::new(), spec.clone())]),
        Descriptor::Dense { packed: None, .. } => BTreeMap::new(),
        Descriptor::Sparse { packed, .. } => packed.clone(),
    };
    let mut files = PropertyFiles {
        index,
        base,
        mtime: descriptor_entry.mtime,
        specs,
        packed: BTreeMap::new(),
    };
    let len = shape.len();
    let payload = match descriptor {
        Descriptor::Dense {
            eltype: ElementType::String,
            packed,
        } => {
            let lines = match packed {
                Some(_) => {
                    let vlen = files.unpack("", ElementType::String, shape.zarr())?;
                    Strings::from_vlen(vlen, len)
                }
                None => Strings::from_lines(files.required("txt")?, len),
            };
            Payload::DenseStrings(lines.named(base))
        }
        Descriptor::Dense {
            eltype: ElementType::Num(t),
            packed: Some(_),
        } => Payload::Dense {
            eltype: t,
            data: files.unpack("", ElementType::Num(t), shape.zarr())?,
        },
        Descriptor::Dense {
            eltype: ElementType::Num(t),
            packed: None,
        } => {
            let data = files.required("data")?;
            let available = data.len()?;
            let needed = len.saturating_mul(t.size());
            if available < needed {
                return Err(FormatError::bad(format!(
                    ".data has {available} bytes, {len} × {} needed",
                    t.julia_name()
                )));
            }
            // Julia may write a longer .data (constant fills); show exactly the logical size.
            Payload::Dense {
                eltype: t,
                data: Blob::slice(&data, 0, needed),
            }
        }
        Descriptor::Sparse {
            eltype,
            indtype,
            nnz,
            has_nzval,
            ..
        } => {
            let (index, found_nnz) = match shape {
                Shape::Vector(_) => {
                    let (nzind, nnz) = files.count_of("nzind", indtype)?;
                    (SparseIndex::Vector { nzind }, nnz)
                }
                Shape::Matrix(_, ncols) => {
                    let colptr = files.sized("colptr", indtype, ncols + 1)?;
                    let (rowval, nnz) = files.count_of("rowval", indtype)?;
                    (SparseIndex::Matrix { colptr, rowval }, nnz)
                }
            };
            if let Some(declared) = nnz.filter(|&n| n != found_nnz) {
                return Err(FormatError::bad(format!(
                    "descriptor says {declared} stored values, index files hold {found_nnz}"
                )));
            }
            if found_nnz > len {
                return Err(FormatError::bad(format!(
                    "{found_nnz} stored values for {len} elements"
                )));
            }
            match eltype {
                ElementType::String => {
                    // Packed string values are vlen-utf8 (`NAME.nzval.zip`), flat ones text.
                    let nztxt = if files.specs.contains_key("nzval") {
                        let vlen = files.unpack("nzval", ElementType::String, vec![found_nnz])?;
                        Strings::from_vlen(vlen, found_nnz).named(base).lines()
                    } else {
                        files.required("nztxt")?
                    };
                    let positions = match (&index, shape) {
                        (SparseIndex::Vector { nzind }, _) => SparsePositions::Vector {
                            nzind: nzind.clone(),
                        },
                        (SparseIndex::Matrix { colptr, rowval }, Shape::Matrix(nrows, ncols)) => {
                            SparsePositions::Matrix {
                                colptr: colptr.clone(),
                                rowval: rowval.clone(),
                                nrows,
                                ncols,
                            }
                        }
                        _ => return Err(FormatError::bad("matrix index on a vector")),
                    };
                    let dense = densify_sparse_strings(
                        positions,
                        indtype,
                        nztxt.clone(),
                        found_nnz,
                        len,
                        base,
                    );
                    Payload::SparseStrings(Box::new(SparseStrings {
                        indtype,
                        index,
                        nztxt,
                        dense,
                    }))
                }
                ElementType::Num(t) => {
                    // 1.0: the .nzval file decides (absent = all true); 1.1: the descriptor does.
                    let nzval = match has_nzval {
                        Some(false) => None,
                        Some(true) => Some(files.sized("nzval", t, found_nnz)?),
                        None if files.index.contains(&format!("{base}.nzval")) => {
                            Some(files.sized("nzval", t, found_nnz)?)
                        }
                        None => None,
                    };
                    if nzval.is_none() && t != NumType::Bool {
                        return Err(FormatError::MissingFile(format!(
                            "{base}.nzval (only all-true Bool data may omit it)"
                        )));
                    }
                    Payload::sparse(t, indtype, index, nzval)
                }
            }
        }
    };
    Ok(Property {
        payload,
        mtime: files.mtime.into(),
        packed: files.packed.into(),
    })
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
