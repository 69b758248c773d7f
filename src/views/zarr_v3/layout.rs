//! ZarrDaf on Zarr v3 as a [`Layout`]: the Zarr v3 view ([`crate::views::zarr_v3`]) and reader
//! ([`crate::formats::zarr::v3`]), the write-path rules of its paths ([`crate::views::zarr_v3::rules`]),
//! and the root `zarr.json` with inline consolidated metadata of a directory source.

use crate::formats::model::{Dataset, Item, PropertyId};
use crate::formats::source::Format;
use crate::formats::zarr::{self, ZarrVersion};
use crate::formats::FormatError;
use crate::stores::{StoreError, StoreIndex};

use crate::views::layout::{Layout, Removal, Staged};
use crate::views::zarr_v2::layout::parent_groups;
use crate::views::zarr_v3::{self as view, rules};
use crate::views::{EntrySink, Shown, ViewEntry};

/// ZarrDaf on Zarr v3 (DataAxesFormats 0.3).
#[derive(Debug)]
pub struct ZarrV3;

impl Layout for ZarrV3 {
    fn format(&self) -> Format {
        Format::ZarrV3
    }

    fn read_item(
        &self,
        dataset: &Dataset,
        id: &PropertyId,
        index: &StoreIndex,
    ) -> Result<Item, FormatError> {
        zarr::read_item(ZarrVersion::V3, dataset, id, index)
    }

    fn view_into(
        &self,
        dataset: &Dataset,
        prefix: &str,
        dimensions: bool,
        sink: Option<&EntrySink>,
    ) -> Vec<ViewEntry> {
        view::zarr_v3_view_into(dataset, prefix, dimensions, sink)
    }

    fn item_entries(&self, dataset: &Dataset, id: &PropertyId) -> Vec<ViewEntry> {
        view::item_entries(dataset, id)
    }

    fn local_view(
        &self,
        dataset: &Dataset,
        prefix: &str,
        id: &PropertyId,
        shown: Shown<'_>,
    ) -> Option<Vec<ViewEntry>> {
        view::local_view(dataset, prefix, id, shown)
    }

    fn item_of(&self, rel: &str) -> Option<PropertyId> {
        rules::item_of(rel)
    }

    fn item_of_dir(&self, rel: &str) -> Option<PropertyId> {
        crate::views::zarr_v2::layout::zarr_item_of_dir(rel)
    }

    fn writable_place(&self, rel: &str, is_dir: bool) -> bool {
        rules::writable_place(rel, is_dir)
    }

    fn is_temporary(&self, rel: &str) -> bool {
        rules::is_temporary(rel)
    }

    fn is_group_document(&self, rel: &str) -> bool {
        rules::is_group_document(rel)
    }

    fn is_document(&self, rel: &str) -> bool {
        rules::is_group_document(rel)
    }

    fn group_document_noop(&self, rel: &str, new: &[u8], old: Option<&[u8]>) -> Result<(), String> {
        rules::group_document_noop(rel, new, old)
    }

    fn staged(
        &self,
        index: &StoreIndex,
        id: &PropertyId,
        finalize: bool,
    ) -> Result<Staged, FormatError> {
        if let Some(why) = rules::attributes_refusal(index)? {
            return Ok(Staged::Refused(why));
        }
        Ok(if finalize || rules::complete(index, id)? {
            Staged::Complete
        } else {
            Staged::Incomplete
        })
    }

    /// Chunks, then the documents of a sparse node's components, then the node's own document.
    fn write_rank(&self, path: &str) -> u8 {
        let Some(node) = path.strip_suffix("/zarr.json") else {
            return 1;
        };
        let component = self
            .item_of(path)
            .is_some_and(|id| node.len() > id.path().len());
        if component {
            2
        } else {
            3
        }
    }

    /// A numeric chunk of zeros (the fill value of every numeric type, `false` for Bool), as
    /// Zarr.jl 0.10 leaves it out (§5.3). (A string chunk of empty strings is kept: telling it
    /// from a number would need the array's type.)
    fn elides(&self, path: &str, bytes: &[u8]) -> bool {
        path.rsplit('/').next() != Some("zarr.json") && bytes.iter().all(|b| *b == 0)
    }

    /// The groups of the item's parents, as DataAxesFormats writes them.
    fn implied(&self, _: &Dataset, id: &PropertyId) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
        let documents = parent_groups(id)
            .into_iter()
            .map(|group| {
                (
                    format!("{group}/zarr.json"),
                    view::GROUP.as_bytes().to_vec(),
                )
            })
            .collect();
        (documents, Vec::new())
    }

    /// The root `zarr.json` with inline consolidated metadata rebuilt from every node document
    /// of the directory.
    fn index_documents(
        &self,
        _: &Dataset,
        index: &StoreIndex,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let mut documents = Vec::new();
        for key in index.keys().filter(|k| k.ends_with("/zarr.json")) {
            if let Some(entry) = index.get(key) {
                documents.push((key.to_string(), entry.blob.bytes()?));
            }
        }
        let root = view::consolidated_from_documents(
            documents.iter().map(|(k, b)| (k.as_str(), b.as_slice())),
        )?;
        Ok(vec![("zarr.json".into(), root.into_bytes())])
    }

    fn derived_files(&self) -> &'static [&'static str] {
        &["zarr.json"]
    }

    fn archive_documents(&self) -> &'static [(&'static str, &'static str)] {
        &[("zarr.json", crate::views::zarr_v3::ARCHIVE_ROOT)]
    }

    fn removal(&self) -> Removal {
        Removal::NodeDirectory
    }

    fn node_item(&self, rel: &str) -> Option<PropertyId> {
        self.item_of(&format!("{rel}/zarr.json"))
    }
}
