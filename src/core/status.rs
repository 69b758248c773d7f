//! What is staged for a data set and why it is not committed yet (`daf-mount status`): the
//! staged files grouped by item, each judged by the staging layer's own validation
//! (`staging::commit::validate`: the view layout's completeness rule, reader and checks), and
//! the items accepted but not yet appended to a ZIP source (the journal of accepted items).
//! Nothing is written.

use std::collections::BTreeMap;

use crate::formats::model::PropertyId;
use crate::formats::source::NamedDataset;
use crate::staging::commit::{validate, CommitError, StagedFile, Validated};

use super::{split_canonical, DafFs};
use crate::core::changes::commit::item_key;

/// Why a staged item is still staged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ItemState {
    /// Accepted by a close, waiting to be appended to the ZIP source (by the mount, or by the
    /// next writable mount if the daemon is gone).
    PendingAppend,
    /// Complete and valid, but no close committed it: its writer still has it open, or was
    /// killed (then a mount leaves it staged: rewrite it or remove it).
    Complete,
    /// Some file is missing: which (or what, for Zarr chunks a writer may leave out).
    Incomplete(String),
    /// Complete but inconsistent: why.
    Invalid(String),
    /// The source does not take it (a ZIP source is append-only; attributes Daf does not
    /// hold): why.
    Refused(String),
    /// The same content as the ZIP source already has: the next mount drops these copies.
    Unchanged,
}

/// One staged item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedItem {
    /// The item, as a `--view both` path (`pbmc.daf/vectors/cell/score`).
    pub item: String,
    /// Its staged files (`--view both` paths).
    pub files: Vec<String>,
    /// Why it is still staged.
    pub state: ItemState,
}

/// Everything staged for the data sets of a source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StagingReport {
    /// The staged items, in path order.
    pub items: Vec<StagedItem>,
    /// Staged files that belong to no item (temporaries a writer left, names outside the views).
    pub loose: Vec<String>,
}

impl StagingReport {
    /// Whether nothing at all is waiting.
    pub fn is_clean(&self) -> bool {
        self.items.is_empty() && self.loose.is_empty()
    }
}

impl DafFs {
    /// What is staged, item by item, and why each is not committed yet.
    pub fn staging_report(&self) -> StagingReport {
        let Some(staging) = self.staging.as_ref() else {
            return StagingReport::default();
        };
        let accepted = staging.accepted();
        let mut state = self.lock_state();
        let mut report = StagingReport::default();
        let mut items: BTreeMap<(usize, String), ItemFiles> = BTreeMap::new();
        for (path, staged) in state.staged.iter().filter(|(_, s)| !s.is_dir) {
            // Not under a view root of these data sets: another data set of the archive's
            // (a `#/GROUP` source shows only its own).
            let Some((root, rel)) = split_canonical(&state.roots, path) else {
                continue;
            };
            let Some(id) = root.layout().item_of(rel) else {
                report.loose.push(path.clone());
                continue;
            };
            let index = state
                .roots
                .iter()
                .position(|r| r.canonical == root.canonical);
            let file = StagedFile {
                rel: rel.to_string(),
                disk: staged.disk.clone(),
                mtime: staged.mtime,
            };
            items
                .entry((index.unwrap_or(0), id.path()))
                .or_insert_with(|| (id, Vec::new()))
                .1
                .push((path.clone(), file));
        }
        for ((root_index, item_path), (id, files)) in items {
            let Some(root) = state.roots.get(root_index).cloned() else {
                continue;
            };
            let staged: Vec<StagedFile> = files.iter().map(|(_, f)| f.clone()).collect();
            let ds = &mut state.datasets[root.dataset];
            let judge = |ds: &mut NamedDataset, finalize| {
                validate(ds, root.layout(), &id, &staged, finalize)
            };
            let state_of = match judge(ds, false) {
                Ok(Validated::Item(_)) if accepted.contains(&item_key(&root.canonical, &id)) => {
                    ItemState::PendingAppend
                }
                Ok(Validated::Item(_)) => ItemState::Complete,
                Ok(Validated::Unchanged) => ItemState::Unchanged,
                Ok(Validated::Incomplete(Some(file))) => ItemState::Incomplete(file),
                // Zarr: not every chunk is there. Which file a finalised commit would miss?
                Ok(Validated::Incomplete(None)) => match judge(ds, true) {
                    Ok(Validated::Incomplete(Some(file))) => ItemState::Incomplete(file),
                    Err(e) => refusal(e),
                    Ok(_) => ItemState::Incomplete(
                        "chunks (those not written by then are taken as fill values at the \
                         fsync of the array's directory or at unmount)"
                            .into(),
                    ),
                },
                Err(e) => refusal(e),
            };
            report.items.push(StagedItem {
                item: format!("{}/{item_path}", root.canonical),
                files: files.into_iter().map(|(path, _)| path).collect(),
                state: state_of,
            });
        }
        report
    }
}

/// An item and its staged files (`--view both` path, file).
type ItemFiles = (PropertyId, Vec<(String, StagedFile)>);

fn refusal(error: CommitError) -> ItemState {
    match error {
        CommitError::Refused(why) => ItemState::Refused(why),
        CommitError::Invalid(why) => ItemState::Invalid(why),
        CommitError::Store(e) => ItemState::Invalid(e.to_string()),
    }
}
