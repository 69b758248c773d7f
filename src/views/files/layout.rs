//! FilesDaf 1.0 and 1.1 as a [`Layout`]: the FilesDaf view and reader, which files of the view
//! belong to which item, and where a writer may create files.

use crate::formats::files::{self as files_daf, index as files_index};
use crate::formats::json::FilesVersion;
use crate::formats::model::{Dataset, Item, PropertyId, ScalarProperty};
use crate::formats::scalar::Scalar;
use crate::formats::source::Format;
use crate::formats::FormatError;
use crate::stores::{StoreError, StoreIndex};

use crate::views::layout::{Layout, Removal, Staged};
use crate::views::{files, EntrySink, Shown, ViewEntry};

const VECTOR_FILES: [&str; 6] = ["json", "data", "txt", "nzind", "nzval", "nztxt"];
const MATRIX_FILES: [&str; 7] = ["json", "data", "txt", "colptr", "rowval", "nzval", "nztxt"];
/// The FilesDaf 1.1 root index (`daf-formats.md` §3.5), relative to the view's root.
const FILES_INDEX: &str = "metadata.json";
/// The temporary DataAxesFormats rebuilds the index into, then renames over it.
const FILES_INDEX_NEW: &str = "metadata.json.new";
/// The sidecars some FilesDaf writers keep (`daf-formats.md` §2.8: the seed-era DataAxesFormats,
/// dafr): an index of the axes, and a ZIP of every JSON document for HTTP readers. Both are
/// derived, rewritten on every writable open and after every write; never stored.
const AXES_INDEX: &str = "axes/metadata.json";
const METADATA_ZIP: &str = "metadata.zip";
/// The temporary the sidecar ZIP is rebuilt into, then renamed over it.
const METADATA_ZIP_NEW: &str = "metadata.zip.new";
/// The derived documents a writer may rewrite: judged at close or rename, then dropped.
const DERIVED: [&str; 3] = [FILES_INDEX, AXES_INDEX, METADATA_ZIP];
/// Their rebuild temporaries, renamed over them.
const REBUILDS: [&str; 2] = [FILES_INDEX_NEW, METADATA_ZIP_NEW];

/// FilesDaf in the forms of one version.
#[derive(Debug)]
pub struct FilesLayout {
    version: FilesVersion,
}

/// FilesDaf 1.0 (the seed's forms).
pub static FILES_1_0: FilesLayout = FilesLayout {
    version: FilesVersion::V1_0,
};

/// FilesDaf 1.1 (DataAxesFormats 0.3).
pub static FILES_1_1: FilesLayout = FilesLayout {
    version: FilesVersion::V1_1,
};

/// `.` or `..` as the name of a FilesDaf file's property (`..json`, `...data`).
fn property_stem(name: &str) -> Option<&str> {
    let (stem, ext) = name.rsplit_once('.')?;
    let daf_extension = VECTOR_FILES.contains(&ext) || MATRIX_FILES.contains(&ext);
    ([".", ".."].contains(&stem) && daf_extension).then_some(stem)
}

impl Layout for FilesLayout {
    fn format(&self) -> Format {
        Format::Files(self.version)
    }

    fn read_item(
        &self,
        dataset: &Dataset,
        id: &PropertyId,
        index: &StoreIndex,
    ) -> Result<Item, FormatError> {
        let path = id.path();
        Ok(match id {
            PropertyId::Scalar(_) => {
                let entry = index
                    .get(&format!("{path}.json"))
                    .ok_or_else(|| FormatError::MissingFile(format!("{path}.json")))?;
                Item::Scalar(ScalarProperty {
                    scalar: Scalar::from_json(entry.blob.bytes()?.as_slice())?,
                    mtime: entry.mtime,
                })
            }
            PropertyId::Axis(_) => Item::Axis(files_daf::read_axis(index, &format!("{path}.txt"))?),
            _ => {
                let shape = dataset.property_shape(id)?;
                Item::Property(files_daf::read_property(index, &path, shape)?)
            }
        })
    }

    fn view_into(
        &self,
        dataset: &Dataset,
        prefix: &str,
        _dimensions: bool,
        sink: Option<&EntrySink>,
    ) -> Vec<ViewEntry> {
        files::files_view_into(dataset, prefix, self.version, sink)
    }

    fn item_entries(&self, dataset: &Dataset, id: &PropertyId) -> Vec<ViewEntry> {
        files::item_entries(dataset, id, self.version)
    }

    fn local_view(
        &self,
        dataset: &Dataset,
        prefix: &str,
        id: &PropertyId,
        shown: Shown<'_>,
    ) -> Option<Vec<ViewEntry>> {
        files::local_entries(dataset, prefix, id, self.version, shown)
    }

    fn item_of(&self, rel: &str) -> Option<PropertyId> {
        let parts: Vec<&str> = rel.split('/').collect();
        if parts.last()?.starts_with('.') {
            return None;
        }
        let named = |file: &str, exts: &[&str]| {
            let (name, ext) = file.rsplit_once('.')?;
            (exts.contains(&ext) && !name.is_empty()).then(|| name.to_string())
        };
        match parts.as_slice() {
            ["scalars", file] => named(file, &["json"]).map(PropertyId::Scalar),
            ["axes", file] => named(file, &["txt"]).map(PropertyId::Axis),
            ["vectors", axis, file] => named(file, &VECTOR_FILES).map(|name| PropertyId::Vector {
                axis: axis.to_string(),
                name,
            }),
            ["matrices", rows, cols, file] => {
                named(file, &MATRIX_FILES).map(|name| PropertyId::Matrix {
                    rows: rows.to_string(),
                    cols: cols.to_string(),
                    name,
                })
            }
            _ => None,
        }
    }

    fn writable_place(&self, rel: &str, is_dir: bool) -> bool {
        let parts: Vec<&str> = rel.split('/').collect();
        match (is_dir, parts.as_slice()) {
            (false, [_]) => self.is_temporary(rel) || self.is_group_document(rel),
            (false, ["scalars" | "axes", _])
            | (false, ["vectors", _, _])
            | (false, ["matrices", _, _, _]) => true,
            (true, ["vectors" | "matrices", _]) | (true, ["matrices", _, _]) => true,
            _ => false,
        }
    }

    /// A hidden name that is not a property's file, or a derived document's rebuild temporary.
    fn is_temporary(&self, rel: &str) -> bool {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        (name.starts_with('.') && property_stem(name).is_none()) || REBUILDS.contains(&rel)
    }

    /// The FilesDaf 1.1 root index, which DataAxesFormats appends to after each write (and
    /// rebuilds through `metadata.json.new`), and the seed-era sidecars: derived from the items,
    /// so dropped.
    fn is_group_document(&self, rel: &str) -> bool {
        DERIVED.contains(&rel)
    }

    fn is_document(&self, rel: &str) -> bool {
        DERIVED.contains(&rel)
    }

    /// The root index is taken as it comes (DataAxesFormats appends to it); the sidecars must
    /// have their form: a JSON array of axis names, a ZIP archive.
    fn group_document_noop(&self, rel: &str, new: &[u8], _: Option<&[u8]>) -> Result<(), String> {
        let axis_names = || {
            serde_json::from_slice::<serde_json::Value>(new)
                .ok()
                .and_then(|v| {
                    v.as_array()
                        .map(|a| a.iter().all(serde_json::Value::is_string))
                })
                .unwrap_or(false)
        };
        // A local file header, or the end record of an empty archive.
        let zip = || new.starts_with(b"PK\x03\x04") || new.starts_with(b"PK\x05\x06");
        match rel {
            FILES_INDEX => Ok(()),
            AXES_INDEX if axis_names() => Ok(()),
            AXES_INDEX => Err(format!("{rel}: not a JSON array of axis names")),
            METADATA_ZIP if zip() => Ok(()),
            METADATA_ZIP => Err(format!("{rel}: not a ZIP archive")),
            _ => Err(format!("{rel}: not a document of a Daf data set")),
        }
    }

    fn bad_property_name(&self, rel: &str) -> Option<String> {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        property_stem(name).map(|stem| format!("{rel}: a property cannot be named {stem:?}"))
    }

    /// Missing files show as `FormatError::MissingFile` when the item is read.
    fn staged(&self, _: &StoreIndex, _: &PropertyId, _: bool) -> Result<Staged, FormatError> {
        Ok(Staged::Complete)
    }

    fn write_rank(&self, path: &str) -> u8 {
        if path.ends_with(".json") {
            2
        } else {
            1
        }
    }

    /// Julia creates every directory a new axis implies.
    fn implied(&self, dataset: &Dataset, id: &PropertyId) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
        let dirs = match id {
            PropertyId::Axis(name) => dataset.axis_groups(name),
            _ => Vec::new(),
        };
        (Vec::new(), dirs)
    }

    /// FilesDaf 1.1 keeps a root `metadata.json`.
    fn has_index_documents(&self) -> bool {
        self.version == FilesVersion::V1_1
    }

    /// The root `metadata.json` of FilesDaf 1.1, rebuilt from the directory's files (§3.5).
    fn index_documents(
        &self,
        _: &Dataset,
        index: &StoreIndex,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let text = files_index::index_text(files_index::tree_entries(index)?)?;
        Ok(vec![("metadata.json".into(), text)])
    }

    fn derived_files(&self) -> &'static [&'static str] {
        match self.version {
            FilesVersion::V1_0 => &[],
            FilesVersion::V1_1 => &[FILES_INDEX],
        }
    }

    fn removal(&self) -> Removal {
        Removal::LastFile
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::views::layout::refusal;

    #[test]
    fn only_daf_places_are_writable() {
        let files = &FILES_1_0;
        assert!(files.writable_place("vectors/cell/x.data", false));
        assert!(files.writable_place("vectors/cell/.x.tmp", false));
        assert!(files.writable_place("matrices/batch/cell", true));
        assert!(!files.writable_place("notes.txt", false));
        assert!(!files.writable_place("vectors/cell/sub", true));
    }

    /// The seed-era sidecars (daf-formats.md §2.8), which some writers rewrite on every open
    /// and after every write: accepted in their forms, then dropped.
    #[test]
    fn the_sidecars_are_derived_documents() {
        for layout in [&FILES_1_0, &FILES_1_1] {
            for rel in ["axes/metadata.json", "metadata.zip", "metadata.zip.new"] {
                assert_eq!(refusal(layout, rel), None, "{rel}");
                assert!(layout.writable_place(rel, false), "{rel}");
            }
            assert!(layout.is_temporary("metadata.zip.new"));
            let noop = |rel, new: &[u8]| layout.group_document_noop(rel, new, None);
            assert_eq!(noop("axes/metadata.json", b"[\"cell\",\"gene\"]\n"), Ok(()));
            assert_eq!(noop("axes/metadata.json", b"[]"), Ok(()));
            assert!(noop("axes/metadata.json", b"{}").is_err());
            assert!(noop("axes/metadata.json", b"").is_err());
            assert_eq!(noop("metadata.zip", b"PK\x03\x04rest"), Ok(()));
            assert!(noop("metadata.zip", b"").is_err());
        }
    }

    #[test]
    fn names_that_could_never_commit_are_refused() {
        for rel in [
            "vectors/cell/score.data",
            "scalars/n.json",
            "vectors/cell/.score.data.partial",
            "scalars/.t",
        ] {
            assert_eq!(refusal(&FILES_1_0, rel), None, "{rel}");
        }
        for rel in [
            "daf.json",
            "scalars/notes.txt",
            "vectors/cell/score.csv",
            "scalars/..json",
            "scalars/...json",
            "vectors/cell/...data",
        ] {
            assert!(refusal(&FILES_1_0, rel).is_some(), "{rel}");
        }
    }

    #[test]
    fn paths_map_to_their_items() {
        let v = |axis: &str, name: &str| {
            Some(PropertyId::Vector {
                axis: axis.into(),
                name: name.into(),
            })
        };
        let files = &FILES_1_1;
        assert_eq!(files.item_of("vectors/cell/score.data"), v("cell", "score"));
        assert_eq!(
            files.item_of("vectors/cell/score.v2.json"),
            v("cell", "score.v2")
        );
        assert_eq!(files.item_of("vectors/cell/.score.data.tmp"), None);
        assert_eq!(files.item_of("vectors/cell/score.csv"), None);
        assert_eq!(
            files.item_of("scalars/n.json"),
            Some(PropertyId::Scalar("n".into()))
        );
        assert_eq!(
            files.item_of("axes/batch.txt"),
            Some(PropertyId::Axis("batch".into()))
        );
        assert_eq!(
            files.item_of("matrices/cell/gene/umis.colptr"),
            Some(PropertyId::Matrix {
                rows: "cell".into(),
                cols: "gene".into(),
                name: "umis".into()
            })
        );
    }
}
