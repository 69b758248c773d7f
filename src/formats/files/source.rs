//! What a FilesDaf source contributes to the FilesDaf view besides the model
//! ([`crate::formats::model::Dataset::files_source`]): its version and its own JSON documents, which the
//! view serves byte for byte rather than synthesising them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::stores::Blob;

use crate::formats::json::FilesVersion;
use crate::formats::model::PropertyId;

/// What a FilesDaf source contributes to the FilesDaf view besides the model: its version (the
/// default version of the view) and its own JSON documents (`daf.json`, `scalars/N.json`, flat
/// descriptors), served byte for byte instead of synthesised by a view whose version they fit.
/// Empty for a Zarr source (every document of the view is synthesised).
#[derive(Debug, Default)]
pub struct FilesSource {
    /// The source's `daf.json` version (`None`: not a FilesDaf source).
    pub version: Option<FilesVersion>,
    /// Source files by path relative to the data set root (`scalars/pi.json`).
    pub documents: BTreeMap<String, Arc<Blob>>,
    /// The only view version that may serve a document, for those that do not fit both:
    /// `daf.json` and scalar files (the source's version), 1.1-form sparse descriptors (1.1),
    /// 1.0-form sparse descriptors of a 1.0 source (1.0: a 1.1 view of it shows the 1.1 form).
    /// Flat dense descriptors (and a 1.1 source's own 1.0-form sparse ones) fit both.
    pub forms: BTreeMap<String, FilesVersion>,
}

impl FilesSource {
    /// The source's own file at `path`, if a FilesDaf view of version `view` serves it as is.
    pub fn document(&self, path: &str, view: FilesVersion) -> Option<&Arc<Blob>> {
        let fits = self.forms.get(path).is_none_or(|form| *form == view);
        self.documents.get(path).filter(|_| fits)
    }

    /// [`FilesSource::document`] of the descriptor of the property at `path` (`path.json`;
    /// none, without a path made, when the source has no documents: a Zarr source).
    pub fn descriptor(&self, path: &str, view: FilesVersion) -> Option<&Arc<Blob>> {
        if self.documents.is_empty() {
            return None;
        }
        self.document(&[path, ".json"].concat(), view)
    }

    /// Forgets the documents of item `id` (it was replaced or removed: they no longer describe it).
    pub(in crate::formats) fn forget(&mut self, id: &PropertyId) {
        let path = format!("{}.json", id.path());
        self.documents.remove(&path);
        self.forms.remove(&path);
    }

    /// Forgets the documents of every vector and matrix along axis `name` (removed with it).
    pub(in crate::formats) fn forget_axis(&mut self, name: &str) {
        let kept = |path: &String| {
            let parts: Vec<&str> = path.split('/').collect();
            match parts.as_slice() {
                ["vectors", axis, _] => *axis != name,
                ["matrices", rows, cols, _] => *rows != name && *cols != name,
                _ => true,
            }
        };
        self.documents.retain(|path, _| kept(path));
        self.forms.retain(|path, _| kept(path));
    }
}
