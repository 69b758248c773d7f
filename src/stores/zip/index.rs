//! The index of a mounted ZIP archive, kept compact: one small record per member (where its data
//! lies, sizes, method, flags, CRC, mtime, where its name lies: 72 bytes) and the member names
//! as the keys of a deferred [`StoreIndex`]. A member's blob is made on its first
//! [`StoreIndex::get`] and kept (every copy and sub-tree of the index shares it), so a reader that
//! never asks for a member never pays for a blob and a CRC check (a member read once through
//! [`StoreIndex::get_once`], a metadata document, gets a blob that is not kept); a blob names its
//! member in messages by where the name lies in the central directory (a [`Label`]), not with a
//! copy of it. Once the readers are done and the index is dropped, only the blobs the data set holds are
//! left.
//!
//! The archive's central records are turned into these records one by one as they are parsed
//! ([`IndexBuilder::add`]), never all held at once. What is wrong with a member alone is logged
//! once, here, at open (one line naming archive and entry), and kept for its blob.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use crate::stores::check::{ArchiveName, Label};
use crate::stores::zip::entry::{entry_problem, member_blob, MemberSpec};
use crate::stores::zip::{u16_at, CentralRecord, RecordSink};
use crate::stores::{Bytes, Entry, EntryMaker, StoreError, StoreIndex};

/// Where a central record's name starts, from the record's start.
const NAME_AT: u64 = 46;

/// One member: what serving it needs, its mtime, and where its name lies in the archive.
struct Member {
    spec: MemberSpec,
    mtime: SystemTime,
    name_at: u64,
    name_len: u16,
}

/// The members of one archive, and the entries made of them so far.
struct ZipEntries {
    archive: Arc<ArchiveName>,
    members: Vec<Member>,
    /// Why a member can never be served, for the few that cannot.
    problems: HashMap<u32, Box<str>>,
    /// The entries made so far, by member (as long as `members`).
    made: Vec<OnceLock<Entry>>,
}

impl fmt::Debug for ZipEntries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZipEntries")
            .field("path", &self.archive.path)
            .field("members", &self.members.len())
            .field("problems", &self.problems.len())
            .finish_non_exhaustive()
    }
}

impl ZipEntries {
    /// A new entry of member `id`.
    fn make(&self, id: u32) -> Entry {
        let member = &self.members[id as usize];
        let label = Label::Member {
            archive: self.archive.clone(),
            at: member.name_at,
            len: member.name_len,
        };
        let problem = self.problems.get(&id).map(|p| &**p);
        Entry {
            blob: member_blob(label, &self.archive.bytes, &member.spec, problem),
            mtime: member.mtime,
        }
    }
}

impl EntryMaker for ZipEntries {
    fn entry(&self, id: u32, _key: &str) -> &Entry {
        self.made[id as usize].get_or_init(|| self.make(id))
    }

    /// The kept entry when it was made, else one made now and not kept.
    fn entry_once(&self, id: u32, _key: &str) -> Entry {
        match self.made[id as usize].get() {
            Some(entry) => entry.clone(),
            None => self.make(id),
        }
    }

    fn mtime(&self, id: u32) -> SystemTime {
        self.members[id as usize].mtime
    }

    #[cfg(test)]
    fn made(&self) -> usize {
        self.made.iter().filter(|m| m.get().is_some()).count()
    }
}

impl RecordSink for IndexBuilder {
    /// Room for the members the central directory declares, so that the index is built without
    /// regrowing (the count was checked against the directory's size).
    fn expect(&mut self, count: u64) {
        let count = usize::try_from(count).unwrap_or(0);
        self.entries.members.reserve_exact(count);
        self.keys.reserve_exact(count);
    }

    fn take(&mut self, record: CentralRecord) -> Result<(), StoreError> {
        self.add(record)
    }
}

/// Builds the index of an archive from its central records, in archive order.
pub struct IndexBuilder {
    entries: ZipEntries,
    keys: Vec<(Box<str>, u32)>,
}

impl IndexBuilder {
    /// A builder for the archive at `path`, mapped as `bytes`.
    pub fn new(path: &Path, bytes: Bytes) -> IndexBuilder {
        IndexBuilder {
            entries: ZipEntries {
                archive: Arc::new(ArchiveName {
                    path: path.to_path_buf(),
                    bytes,
                }),
                members: Vec::new(),
                problems: HashMap::new(),
                made: Vec::new(),
            },
            keys: Vec::new(),
        }
    }

    /// Adds the member of `record` (a directory entry is skipped; of duplicated names the last
    /// one added wins). More than `u32::MAX` members is an error.
    pub fn add(&mut self, record: CentralRecord) -> Result<(), StoreError> {
        if record.name.ends_with('/') {
            return Ok(());
        }
        let entries = &mut self.entries;
        let id = u32::try_from(entries.members.len()).map_err(|_| StoreError::CorruptZip {
            path: entries.archive.path.clone(),
            what: "more than 4,294,967,295 members".into(),
        })?;
        if let Some(problem) = entry_problem(&record) {
            log::warn!(
                "{}: entry {}: {problem}; reads of it give EIO",
                entries.archive.path.display(),
                record.name
            );
            entries.problems.insert(id, problem.into_boxed_str());
        }
        entries.members.push(Member {
            spec: MemberSpec::of(&record),
            mtime: record.mtime,
            name_at: record.raw_range.0 + NAME_AT,
            // The raw length (the key may be a lossy conversion of the name).
            name_len: u16_at(entries.archive.bytes.as_slice(), record.raw_range.0 + 28)
                .unwrap_or(0),
        });
        self.keys.push((record.name.into_boxed_str(), id));
        Ok(())
    }

    /// The index of the members added; `root_mtime`: the archive's own.
    pub fn finish(self, root_mtime: Option<SystemTime>) -> StoreIndex {
        let mut entries = self.entries;
        entries.members.shrink_to_fit();
        entries.made = std::iter::repeat_with(OnceLock::new)
            .take(entries.members.len())
            .collect();
        StoreIndex::deferred(self.keys, Arc::new(entries), root_mtime)
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
