//! The view roots of a mount: which views each data set shows, under which names, in which
//! formats (`view_roots`), and whether an AnnData selection can be made (`anndata_refusal`).

use std::sync::Arc;

use crate::formats::json::FilesVersion;
use crate::formats::source::{Format, NamedDataset};

use super::{anndata, ViewKind, ViewOptions, ViewRoot, ViewSelection};

/// Whether a data set was written by DataAxesFormats 0.3 or later: a Zarr v3 or FilesDaf 1.1
/// source, or any packed property. Such a data set's views default to Zarr v3 and FilesDaf 1.1;
/// any other keeps the seed's Zarr v2 and FilesDaf 1.0.
pub fn is_current(ds: &NamedDataset) -> bool {
    matches!(
        ds.target.format,
        Format::ZarrV3 | Format::Files(FilesVersion::V1_1) | Format::H5df { packed: true }
    ) || ds
        .dataset
        .properties()
        .any(|p| !p.property.packed.is_empty())
}

/// The format of the view of `kind` of data set `ds` under `options`.
pub(crate) fn view_format(ds: &NamedDataset, kind: ViewKind, options: &ViewOptions) -> Format {
    let current = is_current(ds);
    match kind {
        ViewKind::Files => Format::Files(options.files.unwrap_or(if current {
            FilesVersion::V1_1
        } else {
            FilesVersion::V1_0
        })),
        ViewKind::Zarr | ViewKind::AnnData => options.zarr.unwrap_or(if current {
            Format::ZarrV3
        } else {
            Format::ZarrV2
        }),
    }
}

/// The view roots of a mount: for each data set, the views selected, under the right names.
/// An AnnData view is shown where its selection succeeds ([`anndata::select`]; a mount checks
/// every data set's before it is made: [`anndata_refusal`]).
pub fn view_roots(datasets: &[NamedDataset], options: &ViewOptions) -> Vec<ViewRoot> {
    let selection = options.selection;
    let single = datasets.len() == 1 && selection != ViewSelection::Both;
    let mut roots = Vec::new();
    for (index, ds) in datasets.iter().enumerate() {
        let name = &ds.name;
        for (kind, suffix) in [(ViewKind::Files, ".daf"), (ViewKind::Zarr, ".daf.zarr")] {
            let shown = match selection {
                ViewSelection::Both => true,
                ViewSelection::Files => kind == ViewKind::Files,
                ViewSelection::Zarr => kind == ViewKind::Zarr,
            };
            if shown {
                let canonical = format!("{name}{suffix}");
                let mount = if single {
                    String::new()
                } else {
                    canonical.clone()
                };
                roots.push(ViewRoot {
                    dataset: index,
                    kind,
                    format: view_format(ds, kind, options),
                    mount,
                    canonical,
                    dimension_names: options.dimension_names && kind == ViewKind::Zarr,
                    anndata: None,
                });
            }
        }
        let request = options
            .anndata
            .as_ref()
            .filter(|_| selection == ViewSelection::Both);
        if let Some(Ok(selection)) = request.map(|r| anndata::select(name, &ds.dataset, r)) {
            let canonical = format!("{name}{}", anndata::SUFFIX);
            let zarr = view_format(ds, ViewKind::AnnData, options);
            roots.push(ViewRoot {
                dataset: index,
                kind: ViewKind::AnnData,
                format: zarr,
                mount: canonical.clone(),
                canonical,
                dimension_names: false,
                anndata: Some(Arc::new(anndata::layout::AnnData { selection, zarr })),
            });
        }
    }
    roots
}

/// Why the AnnData view or h5ad file of some data set cannot be shown under `options` (the
/// first such data set's one line), if it cannot: checked before a mount is made.
pub fn anndata_refusal(datasets: &[NamedDataset], options: &ViewOptions) -> Option<String> {
    let requests = [&options.anndata, &options.h5ad];
    requests.into_iter().flatten().find_map(|request| {
        datasets
            .iter()
            .find_map(|ds| anndata::select(&ds.name, &ds.dataset, request).err())
    })
}
