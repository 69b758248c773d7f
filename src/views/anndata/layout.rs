//! The AnnData view as a [`Layout`]: a view only. No source is stored in it and nothing is
//! written through it (the core answers every change inside it `EROFS`), so its reading and
//! writing methods refuse or find nothing; what it has is its rendering, the entries of an item
//! (what a commit makes the kernel forget), and the documents that change in place.

use crate::formats::model::{Dataset, Item, PropertyId};
use crate::formats::source::Format;
use crate::formats::FormatError;
use crate::stores::{StoreError, StoreIndex};

use crate::views::layout::{Layout, Removal, Staged};
use crate::views::{EntrySink, Shown, ViewEntry, ViewKind};

use super::Selection;

/// The AnnData view of one data set: its selection, in Zarr v2 or v3.
#[derive(Debug, PartialEq, Eq)]
pub struct AnnData {
    /// Which axes are obs and var, and which matrix is X.
    pub selection: Selection,
    /// `Format::ZarrV2` or `Format::ZarrV3`: the Zarr format the view is in.
    pub zarr: Format,
}

impl AnnData {
    /// The view's path (relative to it) of the element item `id` shows as, if any.
    fn element_of(&self, id: &PropertyId) -> Option<String> {
        let Selection { obs, var, x } = &self.selection;
        let side = |axis: &str| match axis {
            a if a == obs => Some("obs"),
            a if a == var => Some("var"),
            _ => None,
        };
        Some(match id {
            PropertyId::Scalar(name) => format!("uns/{name}"),
            PropertyId::Axis(axis) => format!("{}/_index", side(axis)?),
            PropertyId::Vector { axis, name } => format!("{}/{name}", side(axis)?),
            PropertyId::Matrix { rows, cols, name } => match (side(rows)?, side(cols)?) {
                (r, c) if r == c => format!("{r}p/{name}"),
                _ if name == x => "X".to_string(),
                _ => format!("layers/{name}"),
            },
        })
    }
}

impl Layout for AnnData {
    fn format(&self) -> Format {
        self.zarr
    }

    fn family(&self) -> ViewKind {
        ViewKind::AnnData
    }

    fn read_item(&self, _: &Dataset, id: &PropertyId, _: &StoreIndex) -> Result<Item, FormatError> {
        Err(FormatError::Bad(format!(
            "{}: the AnnData view stores nothing",
            id.path()
        )))
    }

    fn view_into(
        &self,
        dataset: &Dataset,
        prefix: &str,
        _dimensions: bool,
        sink: Option<&EntrySink>,
    ) -> Vec<ViewEntry> {
        let v3 = self.zarr == Format::ZarrV3;
        super::zarr::view_into(dataset, &self.selection, v3, prefix, sink)
    }

    /// The view's entries of the element item `id` shows as (its node and what is under it).
    fn item_entries(&self, dataset: &Dataset, id: &PropertyId) -> Vec<ViewEntry> {
        let Some(element) = self.element_of(id) else {
            return Vec::new();
        };
        let inside = format!("{element}/");
        let mut entries = self.view_into(dataset, "", false, None);
        entries.retain(|e| e.path == element || e.path.starts_with(&inside));
        entries
    }

    fn local_view(
        &self,
        _: &Dataset,
        _: &str,
        _: &PropertyId,
        _: Shown<'_>,
    ) -> Option<Vec<ViewEntry>> {
        None
    }

    /// Every change rebuilds the view: a dataframe's `column-order` lists every column.
    fn item_local(&self) -> bool {
        false
    }

    fn item_of(&self, _rel: &str) -> Option<PropertyId> {
        None
    }

    fn read_only(&self) -> bool {
        true
    }

    fn writable_place(&self, _rel: &str, _is_dir: bool) -> bool {
        false
    }

    fn is_temporary(&self, _rel: &str) -> bool {
        false
    }

    fn staged(&self, _: &StoreIndex, _: &PropertyId, _: bool) -> Result<Staged, FormatError> {
        Ok(Staged::Refused("the AnnData view is read-only".into()))
    }

    fn write_rank(&self, _path: &str) -> u8 {
        0
    }

    fn implied(&self, _: &Dataset, _: &PropertyId) -> (Vec<(String, Vec<u8>)>, Vec<String>) {
        (Vec::new(), Vec::new())
    }

    fn has_index_documents(&self) -> bool {
        false
    }

    fn index_documents(
        &self,
        _: &Dataset,
        _: &StoreIndex,
    ) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        Ok(Vec::new())
    }

    /// The consolidated metadata and the dataframes' documents (their `column-order`).
    fn derived_files(&self) -> &'static [&'static str] {
        match self.zarr {
            Format::ZarrV3 => &["zarr.json", "obs/zarr.json", "var/zarr.json"],
            _ => &[".zmetadata", "obs/.zattrs", "var/.zattrs"],
        }
    }

    fn removal(&self) -> Removal {
        Removal::NodeDirectory
    }
}
