//! The published ZIP of a data set (`--zip`): `NAME.daf.zarr.zip` at the mount root, a read-only
//! file that is a ZarrDaf ZIP of the data set's Zarr view in upstream's own layout
//! (`daf-formats.md` §7.1: stored entries, data at multiples of 8, ZIP64 records, the fixed 1980
//! time, the 98-byte trailer), made by ranges and never as a whole.
//!
//! Its members are the Zarr view's files, in the view's order (root and group documents, then
//! each item's nodes, an array's documents before its chunk, as DataAxesFormats writes them),
//! without the files only
//! a directory source keeps (`Layout::derived_files`: `.zmetadata`, the v3 root's consolidated
//! metadata) and with the layout's archive documents in their place, first
//! (`Layout::archive_documents`). A payload member's data is the model's `Arc<Blob>` that the
//! views show (documents are rendered again: the same bytes): a read inside it is that blob's
//! bytes (a range of the source's map, no copy). Local headers and the central directory are
//! generated for the range a read touches; a member's CRC-32 is computed the first time a header
//! or record that holds it is read (a stored member of a ZIP source brings the CRC its archive
//! records), then kept (also across rebuilds of the tree, for members whose blob did not
//! change). The file's size comes from the members' lengths alone, computed at the first `stat`
//! or read, never at mount.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::formats::source::NamedDataset;
use crate::stores::blob::{read_pieces, RangeSource};
use crate::stores::zip::write::{
    central_record, central_record_len, local_header, local_header_len, padding, trailer,
    FIXED_DOS, TRAILER,
};
use crate::stores::{Blob, Bytes, StoreError};

use super::{view_entries, view_format, ViewEntry, ViewKind, ViewNode, ViewOptions, ViewRoot};

/// One member of a published archive.
struct Member {
    name: String,
    blob: Arc<Blob>,
    crc: OnceLock<u32>,
}

/// A piece of the archive: what the bytes from its start to the next piece's start are.
#[derive(Clone, Copy, Debug)]
enum Piece {
    Header(usize),
    Data(usize),
    Record(usize),
    Trailer,
}

/// Where everything is, from the members' lengths.
struct Plan {
    /// `(start, piece)`, sorted by start, covering `[0, total)` without gaps.
    pieces: Vec<(u64, Piece)>,
    /// Per member: local header offset, padding, data length.
    places: Vec<(u64, u64, u64)>,
    cd_offset: u64,
    cd_size: u64,
    total: u64,
}

/// One published archive: the members and, once asked for, their places.
pub struct Publication {
    members: Vec<Member>,
    plan: OnceLock<Plan>,
    /// One plan computation at a time.
    planning: Mutex<()>,
}

/// How much of a member one CRC pass reads at a time (a ranged member is never made whole).
const CRC_STEP: u64 = 8 << 20;

impl Publication {
    /// An archive of `members` (name, content), in that order; CRCs already known by `previous`
    /// for the same name and the same blob are taken over.
    fn new(members: Vec<(String, Arc<Blob>)>, previous: Option<&Publication>) -> Publication {
        let known: HashMap<&str, &Member> = previous
            .map(|p| p.members.iter().map(|m| (m.name.as_str(), m)).collect())
            .unwrap_or_default();
        let members = members
            .into_iter()
            .map(|(name, blob)| {
                let crc = OnceLock::new();
                if let Some(old) = known.get(name.as_str()) {
                    if let (true, Some(&c)) = (Arc::ptr_eq(&old.blob, &blob), old.crc.get()) {
                        let _ = crc.set(c);
                    }
                }
                Member { name, blob, crc }
            })
            .collect();
        Publication {
            members,
            plan: OnceLock::new(),
            planning: Mutex::new(()),
        }
    }

    fn plan(&self) -> Result<&Plan, StoreError> {
        if let Some(plan) = self.plan.get() {
            return Ok(plan);
        }
        let _guard = self.planning.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(plan) = self.plan.get() {
            return Ok(plan);
        }
        let mut pieces = Vec::with_capacity(self.members.len() * 3 + 1);
        let mut places = Vec::with_capacity(self.members.len());
        let mut at = 0u64;
        for (i, m) in self.members.iter().enumerate() {
            let size = m.blob.len()?;
            let pad = padding(local_header_len(m.name.len(), 0) + at);
            pieces.push((at, Piece::Header(i)));
            places.push((at, pad, size));
            at += local_header_len(m.name.len(), pad);
            if size > 0 {
                pieces.push((at, Piece::Data(i)));
            }
            at += size;
        }
        let cd_offset = at;
        for (i, m) in self.members.iter().enumerate() {
            pieces.push((at, Piece::Record(i)));
            at += central_record_len(m.name.len());
        }
        let cd_size = at - cd_offset;
        pieces.push((at, Piece::Trailer));
        let plan = Plan {
            pieces,
            places,
            cd_offset,
            cd_size,
            total: at + TRAILER,
        };
        Ok(self.plan.get_or_init(|| plan))
    }

    /// The archive's size.
    fn size(&self) -> Result<u64, StoreError> {
        Ok(self.plan()?.total)
    }

    /// Member `i`'s CRC-32, computed (by ranges) on first need.
    fn crc(&self, i: usize) -> Result<u32, StoreError> {
        let m = &self.members[i];
        if let Some(&crc) = m.crc.get() {
            return Ok(crc);
        }
        let crc = if let Some(crc) = m.blob.recorded_crc() {
            // A stored member of a ZIP source: the CRC its directory records (should the bytes
            // not match it, their reads fail, here as in the views).
            crc
        } else if m.blob.is_ranged() {
            let len = m.blob.len()?;
            let mut hasher = crc32fast::Hasher::new();
            let mut at = 0;
            while at < len {
                let step = CRC_STEP.min(len - at);
                hasher.update(m.blob.read_range(at, step)?.as_slice());
                at += step;
            }
            hasher.finalize()
        } else {
            crc32fast::hash(m.blob.bytes()?.as_slice())
        };
        Ok(*m.crc.get_or_init(|| crc))
    }

    /// The bytes of `piece` from `offset` within it, at most `len`.
    fn piece_bytes(
        &self,
        plan: &Plan,
        piece: Piece,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, StoreError> {
        let generated = |bytes: Vec<u8>| {
            let bytes = Bytes::from_vec(bytes);
            let start = offset.min(bytes.len());
            let len = len.min(bytes.len() - start);
            bytes
                .slice(start, len)
                .ok_or_else(|| StoreError::Produce("published ZIP: range outside a record".into()))
        };
        match piece {
            Piece::Data(i) => self.members[i].blob.read_range(offset, len),
            Piece::Header(i) => {
                let (_, pad, size) = plan.places[i];
                let name = self.members[i].name.as_bytes();
                generated(local_header(name, self.crc(i)?, size, pad, FIXED_DOS))
            }
            Piece::Record(i) => {
                let (header, _, size) = plan.places[i];
                let name = self.members[i].name.as_bytes();
                generated(central_record(
                    name,
                    self.crc(i)?,
                    size,
                    header,
                    FIXED_DOS,
                    None,
                ))
            }
            Piece::Trailer => generated(trailer(
                self.members.len() as u64,
                plan.cd_offset,
                plan.cd_size,
            )),
        }
    }
}

impl RangeSource for Publication {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let plan = self.plan()?;
        read_pieces(
            &plan.pieces,
            |(start, _)| *start,
            plan.total,
            (offset, len),
            |&(_, piece), from, take| self.piece_bytes(plan, piece, from, take),
            |&(_, piece), got, take| {
                StoreError::Produce(format!(
                    "published ZIP: member {} gave {got} bytes where {take} were expected",
                    member_name(self, piece)
                ))
            },
        )
    }
}

fn member_name(p: &Publication, piece: Piece) -> &str {
    match piece {
        Piece::Header(i) | Piece::Data(i) | Piece::Record(i) => &p.members[i].name,
        Piece::Trailer => "(trailer)",
    }
}

/// The Zarr view root the published archive of data set `index` is made from.
fn zarr_root(datasets: &[NamedDataset], index: usize, options: &ViewOptions) -> ViewRoot {
    let ds = &datasets[index];
    ViewRoot {
        dataset: index,
        kind: ViewKind::Zarr,
        format: view_format(ds, ViewKind::Zarr, options),
        mount: String::new(),
        canonical: format!("{}.daf.zarr", ds.name),
        dimension_names: options.dimension_names,
        anndata: None,
    }
}

/// The members of the published archive of data set `index`, its Zarr view rendered here.
fn members(
    datasets: &[NamedDataset],
    index: usize,
    options: &ViewOptions,
) -> Vec<(String, Arc<Blob>)> {
    let root = zarr_root(datasets, index, options);
    let files = view_entries(&datasets[index].dataset, &root)
        .into_iter()
        .filter_map(|ViewEntry { path, node, .. }| match node {
            ViewNode::File(blob) => Some((path, blob)),
            ViewNode::Dir => None,
        });
    archive_members(&root, files)
}

/// The members of the archive of `root`'s view, whose files (view-relative paths, in the
/// view's order) are `files`: the layout's archive documents first, in place of its derived
/// files.
fn archive_members(
    root: &ViewRoot,
    files: impl Iterator<Item = (String, Arc<Blob>)>,
) -> Vec<(String, Arc<Blob>)> {
    let layout = root.layout();
    let derived = layout.derived_files();
    let mut members: Vec<(String, Arc<Blob>)> = layout
        .archive_documents()
        .iter()
        .map(|(path, text)| {
            (
                path.to_string(),
                Blob::ready(Bytes::from_vec(text.as_bytes().to_vec())),
            )
        })
        .collect();
    members.extend(files.filter(|(path, _)| !derived.contains(&path.as_str())));
    members
}

/// The published archives of a mount (`--zip`), rebuilt with the tree; keeps the last ones so
/// that known CRCs carry over.
#[derive(Default)]
pub struct Publisher {
    last: HashMap<String, Arc<Publication>>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("archives", &self.last.len())
            .finish()
    }
}

/// The mount path of the published archive of `ds`.
pub fn published_path(ds: &NamedDataset) -> String {
    format!("{}.daf.zarr.zip", ds.name)
}

/// The mount paths of the files made from the whole of `ds` under `options`: its published
/// archive (`--zip`), its H5df file (`--h5df`) and its h5ad file (`--h5ad`).
pub fn published_paths(ds: &NamedDataset, options: &ViewOptions) -> Vec<String> {
    let zip = options.zip.then(|| published_path(ds));
    let h5df = options.h5df.then(|| super::h5df::h5df_path(ds));
    let h5ad = options.h5ad.as_ref().map(|_| super::h5ad::h5ad_path(ds));
    zip.into_iter().chain(h5df).chain(h5ad).collect()
}

impl Publisher {
    /// The root files made of whole data sets under `options`: the published archives of
    /// `datasets` (`--zip`), their H5df and h5ad files (`--h5df`, `--h5ad`: made on first need). `rendered(i)`
    /// gives the files of data set `i`'s Zarr view when the mount shows it (view-relative
    /// paths, in order): they are not rendered a second time.
    pub fn entries(
        &mut self,
        datasets: &[NamedDataset],
        options: &ViewOptions,
        rendered: impl Fn(usize) -> Option<Vec<(String, Arc<Blob>)>>,
    ) -> Vec<ViewEntry> {
        let mut last = HashMap::new();
        let mut entries = Vec::new();
        for (index, ds) in datasets.iter().enumerate() {
            let h5df = options.h5df.then(|| super::h5df::h5df_file(ds));
            let h5ad = (options.h5ad.as_ref()).and_then(|r| super::h5ad::h5ad_file(ds, r));
            for file in h5df.into_iter().chain(h5ad) {
                entries.push(ViewEntry {
                    path: file.name().to_string(),
                    node: ViewNode::File(file.blob()),
                    mtime: super::dataset_mtime(&ds.dataset),
                    elidable: false,
                });
            }
            if !options.zip {
                continue;
            }
            let path = published_path(ds);
            let members = match rendered(index) {
                Some(files) => {
                    archive_members(&zarr_root(datasets, index, options), files.into_iter())
                }
                None => members(datasets, index, options),
            };
            let publication = Arc::new(Publication::new(
                members,
                self.last.get(&path).map(|p| p.as_ref()),
            ));
            let sizer = publication.clone();
            let blob = Blob::ranged_sized(move || sizer.size(), publication.clone());
            entries.push(ViewEntry {
                path: path.clone(),
                node: ViewNode::File(blob),
                mtime: super::dataset_mtime(&ds.dataset),
                elidable: false,
            });
            last.insert(path, publication);
        }
        self.last = last;
        entries
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
