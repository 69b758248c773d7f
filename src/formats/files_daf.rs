//! Reading a FilesDaf tree (`daf-formats.md` §2, §3) from any store: a directory, or the entries
//! of a ZIP (ZipDaf, §6).
//!
//! Enumeration follows upstream: `scalars/*.json`, `axes/*.txt`, `vectors/A/*.json`,
//! `matrices/R/C/*.json`; other names are ignored. Payloads become blobs of the store (mapped
//! ranges), never copies; a `.data` file longer than its axis requires is cut to its logical size.

use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::Value;

use crate::stores::{Blob, Bytes, Entry, StoreIndex};

use super::json::{parse_descriptor, Descriptor, FilesVersion};
use super::model::{
    Axis, Dataset, FilesSource, Payload, Property, ScalarProperty, Shape, SparseIndex,
};
use super::names::accept_name;
use super::scalar::Scalar;
use super::strings::{count_lines, densify_sparse_strings, SparsePositions, Strings};
use super::types::{ElementType, NumType};
use super::FormatError;

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
        if !accept_name(name, &format!("axis {key:?} in {}", path.display())) {
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
        if !accept_name(name, &format!("scalar {key:?} in {}", path.display())) {
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
        if !accept_name(&axis, &format!("vectors/{axis:?}/ in {}", path.display())) {
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
        if !accept_name(&rows, &format!("matrices/{rows:?}/ in {}", path.display())) {
            continue;
        }
        for cols in index.children(&format!("matrices/{rows}")) {
            if !accept_name(
                &cols,
                &format!("matrices/{rows}/{cols:?}/ in {}", path.display()),
            ) {
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
/// and the descriptor of every property read, unless the source is 1.0 and the descriptor is in
/// the 1.1 form (HEAD writes those into 1.0 directories, §3.1; a 1.0 reader cannot read them, so
/// the view synthesises the 1.0 form instead).
fn source_documents(index: &StoreIndex, dataset: &Dataset) -> FilesSource {
    let version = files_version(index);
    let mut paths = vec!["daf.json".to_string()];
    paths.extend(dataset.scalars.keys().map(|n| format!("scalars/{n}.json")));
    paths.extend(dataset.properties().filter_map(|p| {
        let path = format!("{}.json", p.path);
        let form_1_1 = || {
            index
                .get(&path)
                .and_then(|e| e.blob.bytes().ok())
                .and_then(|b| parse_descriptor(b.as_slice()).ok())
                .is_none_or(|d| d.is_1_1_form())
        };
        (version == FilesVersion::V1_1 || !form_1_1()).then_some(path)
    }));
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
    }
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

fn read_properties(
    index: &StoreIndex,
    dir: &str,
    shape: Shape,
    path: &Path,
) -> std::collections::BTreeMap<String, Property> {
    let mut props = std::collections::BTreeMap::new();
    for file in index.children(dir) {
        let Some(name) = file.strip_suffix(".json") else {
            continue;
        };
        let base = format!("{dir}/{name}");
        if !accept_name(name, &format!("{base:?} in {}", path.display())) {
            continue;
        }
        match read_property(index, &base, shape) {
            Ok(prop) => {
                props.insert(name.to_string(), prop);
            }
            Err(e) => log::warn!("skipping {base} ({e}) in {}", path.display()),
        }
    }
    props
}

/// The files of one property, tracking the latest mtime among those used.
struct PropertyFiles<'a> {
    index: &'a StoreIndex,
    base: &'a str,
    mtime: SystemTime,
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

    /// A blob of exactly `count` elements of `t`.
    fn sized(&mut self, ext: &str, t: NumType, count: u64) -> Result<Arc<Blob>, FormatError> {
        let blob = self.required(ext)?;
        let len = blob.len()?;
        if Some(len) != count.checked_mul(t.size()) {
            return Err(FormatError::bad(format!(
                ".{ext} has {len} bytes, {count} × {} expected",
                t.julia_name()
            )));
        }
        Ok(blob)
    }

    /// Number of `t` elements in a file that must hold a whole number of them.
    fn count_of(&mut self, ext: &str, t: NumType) -> Result<(Arc<Blob>, u64), FormatError> {
        let blob = self.required(ext)?;
        let len = blob.len()?;
        if len % t.size() != 0 {
            return Err(FormatError::bad(format!(
                ".{ext} size {len} is not a multiple of {}",
                t.size()
            )));
        }
        Ok((blob, len / t.size()))
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
    let mut files = PropertyFiles {
        index,
        base,
        mtime: descriptor_entry.mtime,
    };
    let len = shape.len();
    let payload = match descriptor {
        Descriptor::Dense {
            eltype: ElementType::String,
        } => Payload::DenseStrings(Strings::from_lines(files.required("txt")?, len).named(base)),
        Descriptor::Dense {
            eltype: ElementType::Num(t),
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
                    let nztxt = files.required("nztxt")?;
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
                    Payload::SparseStrings {
                        indtype,
                        index,
                        nztxt,
                        dense,
                    }
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
                    Payload::Sparse {
                        eltype: t,
                        indtype,
                        index,
                        nzval,
                    }
                }
            }
        }
    };
    Ok(Property {
        payload,
        mtime: files.mtime,
        packed: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::dir::open_directory;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures");

    #[test]
    fn reads_the_seed_fixture() {
        let root = Path::new(FIXTURES).join("vectors/files_v1_0.daf");
        let ds = read_files_daf(&open_directory(&root).unwrap(), &root).unwrap();
        assert_eq!(
            ds.scalars.keys().collect::<Vec<_>>(),
            vec!["ratio", "title"]
        );
        assert_eq!(ds.axes["cell"].len(), 3);
        assert_eq!(ds.axes["gene"].len(), 2);
        let cell = &ds.vectors["cell"];
        assert_eq!(
            cell.keys().collect::<Vec<_>>(),
            vec!["counts", "is_marker", "score", "type"]
        );
        assert!(matches!(
            cell["is_marker"].payload,
            Payload::Sparse {
                nzval: None,
                eltype: NumType::Bool,
                ..
            }
        ));
        assert!(matches!(
            ds.matrices[&("cell".into(), "gene".into())]["umis"].payload,
            Payload::Sparse { .. }
        ));
    }

    #[test]
    fn reads_the_1_1_fixture_and_the_julia_fixture() {
        let root = Path::new(FIXTURES).join("vectors/files_v1_1.daf");
        let ds = read_files_daf(&open_directory(&root).unwrap(), &root).unwrap();
        assert_eq!(ds.vectors["cell"].len(), 4);
        let julia = Path::new(FIXTURES).join("julia-filesdaf");
        let ds = read_files_daf(&open_directory(&julia).unwrap(), &julia).unwrap();
        assert!(!ds.vectors["cell"].is_empty());
        assert_eq!(ds.matrices[&("gene".into(), "cell".into())].len(), 3);
    }

    #[test]
    fn versions_and_missing_markers_are_errors() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("daf.json"), "{\"version\":[2,0]}\n").unwrap();
        let err = read_files_daf(&open_directory(tmp.path()).unwrap(), tmp.path()).unwrap_err();
        assert!(
            err.to_string().contains("unsupported FilesDaf version 2.0"),
            "{err}"
        );
        std::fs::remove_file(tmp.path().join("daf.json")).unwrap();
        let err = read_files_daf(&open_directory(tmp.path()).unwrap(), tmp.path()).unwrap_err();
        assert!(err.to_string().starts_with("not a daf data set"), "{err}");
    }

    #[test]
    fn inconsistent_properties_are_skipped_and_long_data_is_cut() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path();
        for d in ["scalars", "axes", "vectors/a", "matrices/a/a"] {
            std::fs::create_dir_all(p.join(d)).unwrap();
        }
        std::fs::write(p.join("daf.json"), "{\"version\":[1,0]}\n").unwrap();
        std::fs::write(p.join("axes/a.txt"), "x\ny\n").unwrap();
        std::fs::write(
            p.join("vectors/a/long.json"),
            "{\"format\":\"dense\",\"eltype\":\"UInt8\"}\n",
        )
        .unwrap();
        std::fs::write(p.join("vectors/a/long.data"), [1u8, 2, 3, 4]).unwrap();
        std::fs::write(
            p.join("vectors/a/short.json"),
            "{\"format\":\"dense\",\"eltype\":\"Int64\"}\n",
        )
        .unwrap();
        std::fs::write(p.join("vectors/a/short.data"), [1u8, 2, 3]).unwrap();
        std::fs::write(
            p.join("vectors/a/nonzval.json"),
            "{\"format\":\"sparse\",\"eltype\":\"Int8\",\"indtype\":\"UInt8\"}\n",
        )
        .unwrap();
        std::fs::write(p.join("vectors/a/nonzval.nzind"), [1u8]).unwrap();
        let ds = read_files_daf(&open_directory(p).unwrap(), p).unwrap();
        let vectors = &ds.vectors["a"];
        assert_eq!(vectors.keys().collect::<Vec<_>>(), vec!["long"]);
        let Payload::Dense { data, .. } = &vectors["long"].payload else {
            panic!()
        };
        assert_eq!(data.bytes().unwrap().as_slice(), &[1, 2]);
    }
}
