//! The second half of a commit into a ZIP source: appending the item's entries to the archive.
//!
//! Appending copies every payload into the archive, checksums it and `fsync`s it: seconds for a
//! large property. So [`super::commit::commit`] only validates the item and puts it into the
//! data set (served from its staged files), and returns a [`PendingAppend`] holding the blobs of
//! the item's entries, not their bytes; the caller runs [`PendingAppend::write`] later, off the
//! request path and without the state lock (it makes the bytes: a multi-chunk array assembled,
//! elided chunks judged; then the copy, checksums, `fsync`s and central directory), then [`PendingAppend::serve_from`]
//! swaps the item over to the archive's bytes (the same bytes: nothing the kernel cached goes
//! stale), and only then may the staged files go. A daemon killed before the append leaves the
//! staged files in place, so the item is still there at the next mount.

use std::path::PathBuf;
use std::sync::Arc;

use crate::formats::model::{Item, PropertyId};
use crate::formats::source::{Format, NamedDataset, Place};
use crate::stores::zip::append::{self, ArchiveTail};
use crate::stores::zip::copy::Payload;
use crate::stores::{Blob, Bytes, Entry, StoreIndex};
use crate::views::layout::layout;
use crate::views::ViewNode;

use super::commit::{read_back_error, CommitError};

/// An item committed into the model of a ZIP source whose entries are still to be appended.
#[derive(Debug)]
pub struct PendingAppend {
    /// The archive.
    pub archive: PathBuf,
    /// The item.
    pub id: PropertyId,
    prefix: String,
    format: Format,
    /// Documents of the groups the item lives in, appended where the archive lacks them.
    implied: Vec<(String, Vec<u8>)>,
    /// The item's files in the archive's layout (keys without the prefix); their bytes are
    /// made by [`PendingAppend::write`].
    files: Vec<(String, Arc<Blob>)>,
}

impl PendingAppend {
    /// The entries that item `id` (already in `ds`'s model) adds to its ZIP source.
    pub(super) fn new(ds: &NamedDataset, id: &PropertyId) -> Result<PendingAppend, CommitError> {
        let Place::Zip { archive, prefix } = &ds.target.place else {
            return Err(CommitError::Refused("not a ZIP source".into()));
        };
        let source = layout(ds.target.format);
        // Only the blobs: their bytes are made (a multi-chunk array assembled) by `write`,
        // without the state lock.
        let files = source
            .item_entries(&ds.dataset, id)
            .into_iter()
            .filter_map(|entry| match entry.node {
                ViewNode::File(blob) => Some((entry.path, blob)),
                ViewNode::Dir => None,
            })
            .collect();
        Ok(PendingAppend {
            archive: archive.clone(),
            id: id.clone(),
            prefix: prefix.clone(),
            format: ds.target.format,
            implied: source.implied(&ds.dataset, id).0,
            files,
        })
    }

    /// Appends the entries (and, for Zarr, Julia's groups of the item's parents where the archive
    /// lacks them); returns what was written, keyed relative to the data set root. Appends to one
    /// archive must not run concurrently. `learnt` is what the previous append of the caller
    /// learnt of its archive ([`append::ArchiveTail`]), and is left with what this one learnt.
    pub fn write(&self, learnt: &mut Option<ArchiveTail>) -> Result<StoreIndex, CommitError> {
        let source = layout(self.format);
        let mut made = Vec::with_capacity(self.files.len());
        for (path, blob) in &self.files {
            let bytes = blob.bytes()?;
            if !source.elides(path, bytes.as_slice()) {
                // A staged file's bytes are copied from it by the kernel.
                let file = blob.backing_file().map(PathBuf::from);
                made.push((format!("{}{path}", self.prefix), Payload { bytes, file }));
            }
        }
        #[cfg(test)]
        pause_made(&self.archive);
        let implied: Vec<String> = self
            .implied
            .iter()
            .map(|(key, _)| format!("{}{key}", self.prefix))
            .collect();
        let appended = append::append_with(&self.archive, learnt, &implied, |has| {
            let mut files = Vec::new();
            for (key, (_, bytes)) in implied.iter().zip(&self.implied) {
                if !has(key) {
                    files.push((key.clone(), Payload::bytes(Bytes::from_vec(bytes.clone()))));
                }
            }
            files.extend(made);
            files
        })?;
        let written: std::collections::BTreeMap<String, Entry> = appended
            .into_iter()
            .filter_map(|(name, entry)| Some((name.strip_prefix(&self.prefix)?.to_string(), entry)))
            .collect();
        Ok(StoreIndex::new(written, None))
    }

    /// Serves the item from the archive's entries `written` from now on; returns the item it
    /// served before (from its staged files), for the caller to drop once the state lock is
    /// released (unmapping a large payload takes time).
    pub fn serve_from(
        &self,
        ds: &mut NamedDataset,
        written: &StoreIndex,
    ) -> Result<Option<Item>, CommitError> {
        let stored = layout(self.format)
            .read_item(&ds.dataset, &self.id, written)
            .map_err(|e| read_back_error(&self.id, e))?;
        let staged = ds.dataset.take(&self.id);
        ds.dataset
            .insert(&self.id, stored)
            .map_err(CommitError::Invalid)?;
        Ok(staged)
    }
}

/// Tests only: archives whose next append pauses once its bytes are made (it says so on the
/// sender, then waits for the receiver).
#[cfg(test)]
#[allow(clippy::type_complexity)]
pub static PAUSE_MADE: std::sync::Mutex<
    Vec<(
        PathBuf,
        std::sync::mpsc::Sender<()>,
        std::sync::mpsc::Receiver<()>,
    )>,
> = std::sync::Mutex::new(Vec::new());

/// Tests only: pauses where [`PAUSE_MADE`] says, for `archive`.
#[cfg(test)]
fn pause_made(archive: &std::path::Path) {
    let pause = {
        let mut pauses = crate::stores::lock(&PAUSE_MADE);
        let at = pauses.iter().position(|(path, _, _)| path == archive);
        at.map(|at| pauses.remove(at))
    };
    if let Some((_, paused, resume)) = pause {
        let _ = paused.send(());
        let _ = resume.recv_timeout(std::time::Duration::from_secs(60));
    }
}
