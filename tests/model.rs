//! A reference-model property test of the write path, without a kernel: random sequences of
//! create / write / close / fsync / rename / unlink on a small alphabet of FilesDaf-view paths,
//! applied to `DafFs` over a directory source and a ZIP source, and to a simple model of what is
//! staged and what is committed. After every step, every path of the alphabet (FilesDaf view),
//! the matching Zarr-view nodes and the listings of the touched directories must agree with the
//! model; at the end, a fresh mount of the same source (after recovery) must too.
//!
//! `PROPTEST_CASES` bounds the number of sequences per source (default 64, about 5 s in debug).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

use daf_mount::core::{DafFs, FsError};
use daf_mount::formats::source::open_source;
use daf_mount::staging::StagingArea;
use daf_mount::views::ViewSelection;
use proptest::prelude::*;
use serde_json::Value;

#[path = "model/subject.rs"]
mod subject;
use subject::Subject;

/// The paths the operations use: `files/` is the FilesDaf view of the data set, `zarr/` its Zarr
/// view. Files-view items a, b (scalars) and v (a vector); Zarr-view item z (a scalar array),
/// attributes, temporaries, and names that are refused.
const PATHS: [&str; 13] = [
    "files/scalars/a.json",
    "files/scalars/b.json",
    "files/vectors/cell/v.json",
    "files/vectors/cell/v.data",
    "files/scalars/.t",
    "files/vectors/cell/.t",
    "files/scalars/x.txt",
    "files/scalars/..json",
    "zarr/scalars/z/.zarray",
    "zarr/scalars/z/0",
    "zarr/scalars/z/.zattrs",
    "zarr/scalars/z/.zarray.9.partial",
    "zarr/.zattrs",
];
/// Names refused at creation (they could never be committed).
const REFUSED: [&str; 2] = ["files/scalars/x.txt", "files/scalars/..json"];
/// Group documents and attributes: judged by their content at every close (the release of one
/// with nothing written) and rename.
const DOCUMENTS: [&str; 2] = ["zarr/scalars/z/.zattrs", "zarr/.zattrs"];
/// The Zarr node of item z.
const ZDIR: &str = "zarr/scalars/z";
const SCALAR_A: &[u8] = b"{\"value\":1,\"type\":\"Int64\"}";
const SCALAR_B: &[u8] = b"{\"value\":22,\"type\":\"Int64\"}";
const DESCRIPTOR: &[u8] = b"{\"format\":\"dense\",\"eltype\":\"UInt8\"}";
const ZARRAY: &[u8] = b"{\"dtype\":\"<f8\",\"filters\":null,\"shape\":[1],\"order\":\"C\",\"zarr_format\":2,\"chunks\":[1],\"fill_value\":null,\"compressor\":null}";
const CHUNK: &[u8] = &[0, 0, 0, 0, 0, 0, 4, 64]; // 2.5
/// What the writes write (at offset 0): valid and invalid scalars, the vector's descriptor, a
/// payload of the right size (the `cell` axis has 3 entries) and one too short, a scalar
/// array's metadata and chunk, empty and non-empty attributes.
const CONTENTS: [&[u8]; 10] = [
    SCALAR_A,
    SCALAR_B,
    b"{",
    DESCRIPTOR,
    &[1, 2, 3],
    &[9, 9],
    ZARRAY,
    CHUNK,
    b"{}",
    b"{\"a\":1}",
];

#[derive(Clone, Debug)]
enum Op {
    Create(usize),
    Write(usize, usize),
    Close(usize),
    Fsync(usize),
    FsyncRoot,
    Rename(usize, usize),
    Unlink(usize),
    /// `mkdir` of the Zarr node of item z.
    Mkdir,
}

fn op() -> impl Strategy<Value = Op> {
    let path = 0..PATHS.len();
    prop_oneof![
        3 => path.clone().prop_map(Op::Create),
        4 => (0..4usize, 0..CONTENTS.len()).prop_map(|(h, c)| Op::Write(h, c)),
        3 => (0..4usize).prop_map(Op::Close),
        1 => (0..4usize).prop_map(Op::Fsync),
        1 => Just(Op::FsyncRoot),
        2 => (path.clone(), path.clone()).prop_map(|(a, b)| Op::Rename(a, b)),
        1 => path.prop_map(Op::Unlink),
        1 => Just(Op::Mkdir),
    ]
}

/// The items of the alphabet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Item {
    A,
    B,
    V,
    Z,
}

const ITEMS: [Item; 4] = [Item::A, Item::B, Item::V, Item::Z];

fn item_of(path: &str) -> Option<Item> {
    ITEMS
        .into_iter()
        .find(|item| files_of(*item).contains(&path))
}

fn files_of(item: Item) -> &'static [&'static str] {
    match item {
        Item::A => &["files/scalars/a.json"],
        Item::B => &["files/scalars/b.json"],
        Item::V => &["files/vectors/cell/v.json", "files/vectors/cell/v.data"],
        Item::Z => &[
            "zarr/scalars/z/.zarray",
            "zarr/scalars/z/0",
            "zarr/scalars/z/.zattrs",
        ],
    }
}

/// Attributes that carry nothing.
fn empty_attributes(content: &[u8]) -> bool {
    json(content).is_some_and(|v| v.as_object().is_some_and(|o| o.is_empty()))
}

/// What an error is, for comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Err {
    NotFound,
    NotPermitted,
    Invalid,
    Exists,
}

fn kind(e: &FsError) -> Err {
    match e {
        FsError::NotFound => Err::NotFound,
        FsError::NotPermitted(_) => Err::NotPermitted,
        FsError::Invalid(_) => Err::Invalid,
        FsError::Exists => Err::Exists,
        other => panic!("unexpected error {other:?}"),
    }
}

#[derive(Clone, Debug)]
struct ModelHandle {
    path: String,
    /// Which file at `path` it is open on: a handle stays on its file when the name is removed
    /// and made again (its writes then go to the removed file).
    generation: u64,
    dirty: bool,
}

/// What the file system should show.
#[derive(Clone, Debug)]
struct Model {
    zip: bool,
    /// Staged files (FilesDaf-view path → content).
    staged: BTreeMap<String, Vec<u8>>,
    /// Committed files of the items this test wrote (path → content as the view shows it).
    committed: BTreeMap<String, Vec<u8>>,
    /// Open handles, in opening order.
    handles: Vec<ModelHandle>,
    /// Whether the Zarr node of z was made by `mkdir` (staged).
    zdir: bool,
    /// The file each staged path is (see [`ModelHandle::generation`]).
    generations: BTreeMap<String, u64>,
    next_generation: u64,
}

/// The files of a committed item (path, content as the views show it).
type CommittedFiles = Vec<(&'static str, Vec<u8>)>;

fn json(bytes: &[u8]) -> Option<Value> {
    serde_json::from_slice(bytes).ok()
}

impl Model {
    /// The content of `path`: staged over committed.
    fn file(&self, path: &str) -> Option<&Vec<u8>> {
        self.staged.get(path).or_else(|| self.committed.get(path))
    }

    fn committed_item(&self, item: Item) -> bool {
        self.committed.contains_key(files_of(item)[0])
    }

    /// Whether the Zarr node directory of z exists.
    fn zdir_exists(&self) -> bool {
        self.zdir || self.committed_item(Item::Z)
    }

    /// Whether another dirty handle (not `closing`) is on a staged file of `item`.
    fn busy(&self, item: Item, closing: Option<usize>) -> bool {
        self.handles.iter().enumerate().any(|(i, h)| {
            Some(i) != closing
                && h.dirty
                && item_of(&h.path) == Some(item)
                && self.staged.contains_key(&h.path)
        })
    }

    /// Whether `item`'s files (staged over committed) are complete and valid: `Ok(None)` if
    /// incomplete, `Ok(Some(files))` with what the views show once committed.
    fn judge(&self, item: Item, finalize: bool) -> Result<Option<CommittedFiles>, Err> {
        Ok(Some(match item {
            Item::A | Item::B => {
                let path = files_of(item)[0];
                let value = json(self.file(path).map_or(&[][..], Vec::as_slice));
                let valid =
                    [SCALAR_A, SCALAR_B].iter().any(|s| json(s) == value) && value.is_some();
                if !valid {
                    return Err(Err::Invalid);
                }
                vec![(path, self.file(path).cloned().unwrap_or_default())]
            }
            Item::V => {
                let Some(descriptor) = self.file("files/vectors/cell/v.json") else {
                    return Ok(None);
                };
                if json(descriptor).is_none() || json(descriptor) != json(DESCRIPTOR) {
                    return Err(Err::Invalid);
                }
                let Some(data) = self.file("files/vectors/cell/v.data") else {
                    return Ok(None);
                };
                // Exactly the 3 UInt8 of axis `cell` (a written `.data` may not be longer).
                if data.len() != 3 {
                    return Err(Err::Invalid);
                }
                vec![
                    ("files/vectors/cell/v.json", DESCRIPTOR.to_vec()),
                    ("files/vectors/cell/v.data", data.to_vec()),
                ]
            }
            Item::Z => {
                if let Some(attrs) = self.staged.get("zarr/scalars/z/.zattrs") {
                    if !empty_attributes(attrs) {
                        return Err(Err::NotPermitted);
                    }
                }
                let Some(zarray) = self.file("zarr/scalars/z/.zarray") else {
                    return Ok(None);
                };
                if json(zarray).is_none() || json(zarray) != json(ZARRAY) {
                    return Err(Err::Invalid);
                }
                let chunk = match self.file("zarr/scalars/z/0") {
                    None if !finalize => return Ok(None),
                    None => vec![0; 8], // a missing chunk holds the fill value
                    Some(chunk) if chunk.len() != 8 => return Err(Err::Invalid),
                    Some(chunk) => chunk.clone(),
                };
                vec![
                    ("zarr/scalars/z/.zarray", ZARRAY.to_vec()),
                    ("zarr/scalars/z/0", chunk),
                    ("zarr/scalars/z/.zattrs", b"{}".to_vec()),
                ]
            }
        }))
    }

    /// A commit attempt of `item`, as a close, a rename or an fsync of a directory makes it.
    fn try_commit(
        &mut self,
        item: Item,
        closing: Option<usize>,
        finalize: bool,
    ) -> Result<(), Err> {
        let staged = files_of(item).iter().any(|p| self.staged.contains_key(*p));
        if !staged || self.busy(item, closing) {
            return Ok(());
        }
        let Some(files) = self.judge(item, finalize)? else {
            return Ok(());
        };
        for path in files_of(item) {
            self.staged.remove(*path);
        }
        for (path, content) in files {
            self.committed.insert(path.to_string(), content);
        }
        // A directory made for the item is the committed node now (unless it still holds a
        // staged file).
        if item == Item::Z
            && !self
                .staged
                .keys()
                .any(|k| k.starts_with(&format!("{ZDIR}/")))
        {
            self.zdir = false;
        }
        Ok(())
    }

    /// A group document or attributes at its close or rename: dropped, or dropped and refused.
    fn settle(&mut self, path: &str) -> Option<Result<(), Err>> {
        if !DOCUMENTS.contains(&path) {
            return None;
        }
        let content = self.staged.get(path)?.clone();
        if empty_attributes(&content) {
            if path == "zarr/.zattrs" {
                self.staged.remove(path);
                return Some(Ok(()));
            }
            return None; // attributes of an item that carry nothing stay with it
        }
        self.staged.remove(path);
        Some(Err(Err::NotPermitted))
    }

    /// Whether the parent directory of `path` exists.
    fn parent_exists(&self, path: &str) -> bool {
        !path.starts_with(&format!("{ZDIR}/")) || self.zdir_exists()
    }

    /// Applies `op`; returns the expected result, or `None` if the op is not applicable.
    fn apply(&mut self, op: &Op) -> Option<Result<(), Err>> {
        let handle =
            |h: usize, handles: &Vec<ModelHandle>| (!handles.is_empty()).then(|| h % handles.len());
        Some(match op {
            Op::Create(p) => {
                let path = PATHS[*p];
                // Refused names, and committed files of a ZIP source (append-only), but for a
                // group document (judged at its close on every source).
                let committed_in_zip = self.zip
                    && self.committed.contains_key(path)
                    && !self.staged.contains_key(path)
                    && path != "zarr/.zattrs";
                if !self.parent_exists(path) {
                    Err(Err::NotFound)
                } else if REFUSED.contains(&path) || committed_in_zip {
                    Err(Err::NotPermitted)
                } else {
                    if !self.staged.contains_key(path) {
                        self.next_generation += 1;
                        self.generations
                            .insert(path.to_string(), self.next_generation);
                    }
                    self.staged.insert(path.to_string(), Vec::new());
                    self.handles.push(ModelHandle {
                        path: path.to_string(),
                        generation: self.generations[path],
                        dirty: false,
                    });
                    Ok(())
                }
            }
            Op::Write(h, c) => {
                let h = handle(*h, &self.handles)?;
                let path = self.handles[h].path.clone();
                let Some(old) = self.staged.get(&path) else {
                    // Committed (or dropped) meanwhile: no longer writable.
                    return Some(Err(Err::NotPermitted));
                };
                self.handles[h].dirty = true;
                if self.generations.get(&path) != Some(&self.handles[h].generation) {
                    return Some(Ok(())); // written into a removed file
                }
                let data = CONTENTS[*c];
                let mut new = data.to_vec();
                if old.len() > data.len() {
                    new.extend_from_slice(&old[data.len()..]);
                }
                self.staged.insert(path, new);
                self.handles[h].dirty = true;
                Ok(())
            }
            Op::Close(h) => {
                let h = handle(*h, &self.handles)?;
                let was_dirty = self.handles[h].dirty;
                let path = self.handles[h].path.clone();
                self.handles[h].dirty = false;
                let staged = self.staged.contains_key(&path);
                let judged = if !staged {
                    Ok(())
                } else if let Some(settled) = self.settle(&path) {
                    settled
                } else {
                    match item_of(&path) {
                        Some(item) => self.try_commit(item, Some(h), false),
                        None => Ok(()),
                    }
                };
                // A close with nothing written leaves the judgement to the release (each handle
                // is closed once here, so first: it is judged), whose refusal is only logged.
                let result = if was_dirty { judged } else { Ok(()) };
                self.handles.remove(h);
                result
            }
            Op::Fsync(h) => {
                handle(*h, &self.handles)?;
                Ok(())
            }
            Op::FsyncRoot => {
                for item in ITEMS {
                    let _ = self.try_commit(item, None, true);
                }
                Ok(())
            }
            Op::Rename(from, to) => {
                let (from, to) = (PATHS[*from], PATHS[*to]);
                let open = |p: &str| self.handles.iter().any(|h| h.path == p);
                if from == to || open(from) || open(to) {
                    return None;
                }
                // (Both directories are looked up first, as the kernel does.)
                if !self.parent_exists(from) || !self.parent_exists(to) {
                    return Some(Err(Err::NotFound));
                }
                let Some(content) = self.staged.get(from).cloned() else {
                    return Some(Err(if self.committed.contains_key(from) {
                        Err::NotPermitted
                    } else {
                        Err::NotFound
                    }));
                };
                if REFUSED.contains(&to) {
                    return Some(Err(Err::NotPermitted));
                }
                if DOCUMENTS.contains(&to) {
                    let committed = self.committed.get(to);
                    let same =
                        committed.is_some_and(|c| json(c).is_some() && json(c) == json(&content));
                    if empty_attributes(&content) || same {
                        if to == "zarr/.zattrs" || same {
                            self.staged.remove(from);
                            return Some(Ok(()));
                        }
                    } else {
                        return Some(Err(Err::NotPermitted));
                    }
                }
                if !self.staged.contains_key(to) {
                    if let Some(committed) = self.committed.get(to) {
                        let same = *committed == content
                            || (json(committed).is_some() && json(committed) == json(&content));
                        if same {
                            self.staged.remove(from);
                            return Some(Ok(()));
                        }
                        if self.zip {
                            return Some(Err(Err::NotPermitted));
                        }
                    }
                }
                let before = self.clone();
                self.staged.remove(from);
                self.staged.insert(to.to_string(), content);
                if let Some(generation) = self.generations.get(from).copied() {
                    self.generations.insert(to.to_string(), generation);
                }
                match item_of(to).map(|item| self.try_commit(item, None, false)) {
                    Some(Err(e)) => {
                        *self = before;
                        Err(e)
                    }
                    _ => Ok(()),
                }
            }
            Op::Unlink(p) => {
                let path = PATHS[*p];
                if self.handles.iter().any(|h| h.path == path) {
                    return None;
                }
                if !self.parent_exists(path) {
                    Err(Err::NotFound)
                } else if self.staged.remove(path).is_some() {
                    Ok(())
                } else if self.committed.contains_key(path) {
                    if !self.zip {
                        return None; // deletes of directory sources are not modelled
                    }
                    Err(Err::NotPermitted)
                } else {
                    Err(Err::NotFound)
                }
            }
            Op::Mkdir => {
                if self.zdir_exists() {
                    Err(Err::Exists)
                } else {
                    self.zdir = true;
                    Ok(())
                }
            }
        })
    }
}

fn run(fixture: &str, base: &str, zip: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let (_tmp, source) = common::copy_fixture(fixture);
    let mut subject = Subject::open(&source, base);
    let mut model = Model {
        zip,
        staged: BTreeMap::new(),
        committed: BTreeMap::new(),
        handles: Vec::new(),
        zdir: false,
        generations: BTreeMap::new(),
        next_generation: 0,
    };
    // The root's attributes are there from the start.
    let attributes = subject.shown("zarr/.zattrs", "start")?.unwrap();
    model
        .committed
        .insert("zarr/.zattrs".to_string(), attributes);
    subject.check(&model, "start")?;
    for (i, op) in ops.iter().enumerate() {
        let Some(expected) = model.apply(op) else {
            continue;
        };
        let got = subject.apply(op);
        let step = format!("step {i} {op:?}");
        prop_assert_eq!(got, expected, "{}", step);
        subject.check(&model, &step)?;
    }
    // Close everything, make it durable, and mount again: recovery commits what is complete.
    while !model.handles.is_empty() {
        let expected = model.apply(&Op::Close(0)).unwrap();
        prop_assert_eq!(subject.apply(&Op::Close(0)), expected, "final close");
    }
    subject.fs.finalize("").unwrap();
    model.apply(&Op::FsyncRoot);
    subject.check(&model, "after fsync")?;
    drop(subject);
    let subject = Subject::open(&source, base);
    model.apply(&Op::FsyncRoot);
    subject.check(&model, "after a remount")
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// Found by this test: a rename over a staged file whose commit then failed put the renamed
/// file back but lost the file it had replaced.
#[test]
fn a_refused_rename_over_a_staged_file_keeps_that_file() {
    let ops = [
        Op::Create(4),
        Op::Close(0),
        Op::Create(0),
        Op::Close(0),
        Op::Rename(4, 0),
    ];
    run("files_v1_0.daf", "files_v1_0", false, &ops).unwrap();
    let ops = [
        Op::Create(0),
        Op::Create(2),
        Op::Close(0),
        Op::Close(0),
        Op::Create(4),
        Op::Close(0),
        Op::Rename(4, 2),
    ];
    run("zarr_v2.daf.zarr.zip", "zarr_v2", true, &ops).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn the_write_path_of_a_directory_source_follows_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run("files_v1_0.daf", "files_v1_0", false, &ops)?;
    }

    #[test]
    fn the_write_path_of_a_zip_source_follows_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run("zarr_v2.daf.zarr.zip", "zarr_v2", true, &ops)?;
    }
}
