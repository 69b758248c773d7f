//! HDF5 files made on the fly: a declarative [`Plan`] (groups and datasets, their attributes,
//! each dataset's type, shape and content) becomes one read-only file image, served by ranges
//! like the published ZIP (`views::publish`), without copying the payloads.
//!
//! **Who writes what.** The HDF5 structure (superblock, object headers, B-trees, local and
//! global heaps, attributes, variable-length string data) is written by the HDF5 reference
//! library (libhdf5 through `hdf5-metno`), never by hand ([`build`]): the plan is created, in
//! its order, in a private temporary file (in `$TMPDIR`, its name removed as soon as libhdf5
//! has it open: the file goes with the mapping of it), every dataset whose content is bytes of ours as a *contiguous* dataset
//! allocated at creation and never written (`H5D_ALLOC_TIME_EARLY`, `H5D_FILL_TIME_NEVER`), so
//! the file is sparse there; its address is read back (`H5Dget_offset`) and the file closed.
//! The file served is then a sorted list of segments: the temporary file's bytes (mapped
//! read-only: metadata, and whatever libhdf5 wrote itself) outside the datasets' ranges, and
//! each dataset's range backed by its content blob's `read_range` (a range of a source's map, no
//! copy; or a ranged blob made by range through the decode cache, never whole).
//!
//! **When.** [`Hdf5File::new`] only keeps the plan; libhdf5 runs on first need (the first `stat`
//! or read: the lookup of the file's name), once, under a lock; the plan is then dropped and only
//! the segments are kept. A build that fails is remembered: every later size or read gives its
//! error (`EIO`). Measured: 10,000 properties build in well under a second (`scripts/bench`).
//!
//! # Writing a plan (a new single-file layout)
//!
//! A layout that shows a data set as one HDF5 file (H5df: `views::h5df`; the h5ad of AnnData
//! next) only makes a [`Plan`] and hands it to [`Hdf5File::new`]; it never touches this module:
//!
//! * [`Plan::group`] and [`Plan::dataset`] append a [`Node`] at a `/`-separated path (no leading
//!   `/`; `""` is the root group, which exists already: give it attributes with
//!   [`Plan::root_attrs`]). Parents come before their children; paths are unique.
//! * [`Node::attr`] adds an attribute ([`AttrValue`]): scalar and 1-D variable-length UTF-8
//!   strings (as h5py writes `str` and lists of `str`: `encoding-type`, `column-order`),
//!   64-bit integers and floats, scalar or 1-D (`shape` of a `csr_matrix`: `Ints`; an empty
//!   `column-order` as h5py writes `[]`: `Floats(vec![])`), and Bool (h5py's enum).
//! * A dataset's [`Element`]: a number type (`NumType::Bool` is HDF5.jl's 8-bit *bitfield*),
//!   h5py's Bool enum ([`Element::BoolEnum`], what anndata writes), variable-length UTF-8
//!   strings, or a fixed-length NUL-terminated UTF-8 string (HDF5.jl's String scalars). Its
//!   `shape` is in HDF5's (C) order, `[]` for a scalar dataspace.
//! * Its [`Content`]: [`Content::Bytes`] — a blob of exactly elements × element size bytes,
//!   little-endian, C order: a model payload (zero copy), a ranged blob (a derived array of
//!   `views::anndata::derived`: computed by range when read), or a small `Blob::ready` buffer of
//!   values made by the plan; [`Content::Strings`] — variable-length strings, given as the
//!   vlen-utf8 encoding of `formats::strings` (`Strings::vlen`), which libhdf5 writes itself
//!   (into global heaps, in batches, never all at once); [`Content::Empty`] — a dataspace with a
//!   0: no storage, no address, as HDF5.jl and h5py leave empty arrays.
//! * [`Plan::alignment`]: `H5Pset_alignment`'s `(threshold, alignment)`; `(1, 8)` puts every
//!   allocation at a multiple of 8 (upstream H5df's file access list), so that a copy of the
//!   file can be memory-mapped with aligned payloads.
//!
//! Datasets are contiguous, unfiltered, without times; links carry UTF-8 names (as HDF5.jl and
//! h5py create them); the library's default format bounds
//! (superblock 0 under libhdf5 1.10, what HDF5.jl and h5py write there).

mod build;

use std::sync::{Arc, Mutex, OnceLock};

use crate::formats::types::NumType;
use crate::stores::blob::{read_pieces, RangeSource};
use crate::stores::{Blob, Bytes, StoreError};

/// What an HDF5 file is made of: its objects in creation order.
#[derive(Debug)]
pub struct Plan {
    /// `H5Pset_alignment(threshold, alignment)` of the file.
    pub alignment: (u64, u64),
    /// The root group's attributes.
    pub root_attrs: Vec<Attr>,
    /// Groups and datasets, parents before children.
    pub nodes: Vec<Node>,
}

/// One group or dataset of a [`Plan`].
#[derive(Debug)]
pub struct Node {
    /// `/`-separated, without a leading `/` (`"obs/_index"`).
    pub path: String,
    /// Its attributes, in order.
    pub attrs: Vec<Attr>,
    /// A group, or a dataset and its content.
    pub kind: NodeKind,
}

/// What a [`Node`] is.
#[derive(Debug)]
pub enum NodeKind {
    /// A group.
    Group,
    /// A dataset.
    Dataset(DatasetPlan),
}

/// A dataset of a [`Plan`].
#[derive(Debug)]
pub struct DatasetPlan {
    /// What each element is.
    pub element: Element,
    /// The dataspace in HDF5's (C) order; `[]` is a scalar dataspace.
    pub shape: Vec<u64>,
    /// Its values.
    pub content: Content,
}

/// The element type of a dataset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    /// Little-endian numbers; `NumType::Bool` is the 8-bit bitfield `H5T_STD_B8LE` (HDF5.jl's
    /// Bool, `h5df-format.md` §3.1).
    Num(NumType),
    /// h5py's Bool: an enum of `int8` (`FALSE` 0, `TRUE` 1), one byte.
    BoolEnum,
    /// Variable-length UTF-8 strings (16 bytes per element in the dataset, the text in global
    /// heaps): only with [`Content::Strings`] or [`Content::Empty`].
    VlenUtf8,
    /// Fixed-length UTF-8 strings of this many bytes, NUL-terminated padding.
    FixedUtf8(usize),
}

impl Element {
    /// The bytes of one element in the dataset's storage.
    pub fn size(self) -> u64 {
        match self {
            Element::Num(t) => t.size(),
            Element::BoolEnum => 1,
            Element::VlenUtf8 => 16,
            Element::FixedUtf8(n) => n.max(1) as u64,
        }
    }
}

/// The values of a dataset.
#[derive(Debug)]
pub enum Content {
    /// No storage (a dataspace with a 0 in it): no address in the file.
    Empty,
    /// Exactly elements × element size bytes (little-endian, C order), served at the dataset's
    /// address by this blob's `read_range`.
    Bytes(Arc<Blob>),
    /// Strings written by libhdf5: `count` values in the vlen-utf8 encoding of
    /// `formats::strings` (a `u32` count, then a `u32` length and the bytes of each).
    Strings {
        /// The encoded values.
        vlen: Arc<Blob>,
        /// How many.
        count: u64,
    },
}

/// An attribute of a group or dataset.
#[derive(Clone, Debug, PartialEq)]
pub struct Attr {
    /// Its name.
    pub name: String,
    /// Its value.
    pub value: AttrValue,
}

/// An attribute's value, as h5py writes the Python value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// A scalar variable-length UTF-8 string (`str`).
    Str(String),
    /// A 1-D array of variable-length UTF-8 strings (a list of `str`).
    Strs(Vec<String>),
    /// A scalar `int64`.
    Int(i64),
    /// A scalar `float64`.
    Float(f64),
    /// A scalar Bool (h5py's enum).
    Bool(bool),
    /// A 1-D `int64` array (a tuple of ints, such as a sparse matrix's `shape`).
    Ints(Vec<i64>),
    /// A 1-D `float64` array (h5py writes an empty list as one).
    Floats(Vec<f64>),
}

impl Plan {
    /// An empty plan with the alignment `(threshold, alignment)`.
    pub fn new(alignment: (u64, u64)) -> Plan {
        Plan {
            alignment,
            root_attrs: Vec::new(),
            nodes: Vec::new(),
        }
    }

    /// Appends group `path`; returns it to add attributes.
    pub fn group(&mut self, path: impl Into<String>) -> &mut Node {
        self.push(path.into(), NodeKind::Group)
    }

    /// Appends dataset `path`; returns it to add attributes.
    pub fn dataset(
        &mut self,
        path: impl Into<String>,
        element: Element,
        shape: Vec<u64>,
        content: Content,
    ) -> &mut Node {
        let dataset = DatasetPlan {
            element,
            shape,
            content,
        };
        self.push(path.into(), NodeKind::Dataset(dataset))
    }

    fn push(&mut self, path: String, kind: NodeKind) -> &mut Node {
        let at = self.nodes.len();
        self.nodes.push(Node {
            path,
            attrs: Vec::new(),
            kind,
        });
        &mut self.nodes[at]
    }
}

impl Content {
    /// A few values made by the plan itself (little-endian bytes, C order), kept in memory.
    pub fn values(bytes: Vec<u8>) -> Content {
        Content::Bytes(Blob::ready(Bytes::from_vec(bytes)))
    }
}

impl Node {
    /// Adds attribute `name`.
    pub fn attr(&mut self, name: &str, value: AttrValue) -> &mut Node {
        self.attrs.push(Attr {
            name: name.to_string(),
            value,
        });
        self
    }
}

/// A piece of the file: from `start` to the next piece's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    start: u64,
    /// The index of the content blob there, or `None`: the temporary file's own bytes.
    content: Option<u32>,
}

/// A made file: the temporary file's map and the segments over it.
struct Built {
    /// The whole temporary file (holes where contents are: never read).
    image: Bytes,
    /// Sorted by start, the first at 0, covering `[0, total)`.
    segments: Vec<Segment>,
    /// The contents of the datasets served from blobs.
    contents: Vec<Arc<Blob>>,
    total: u64,
}

/// One HDF5 file of a plan, made on first need and served by ranges (its
/// [`Hdf5File::blob`]).
pub struct Hdf5File {
    /// What the file is named in logs and errors.
    name: String,
    /// The plan, until the build takes it. Its lock is held for the whole build: one build at a
    /// time, a second caller waits for the first one's result (never a second build).
    plan: Mutex<Option<Plan>>,
    /// The made file, or why it could not be made (set once, under `plan`'s lock).
    built: OnceLock<Result<Built, String>>,
}

impl Hdf5File {
    /// A file of `plan`, named `name` in logs; nothing is made yet.
    pub fn new(name: impl Into<String>, plan: Plan) -> Arc<Hdf5File> {
        Arc::new(Hdf5File {
            name: name.into(),
            plan: Mutex::new(Some(plan)),
            built: OnceLock::new(),
        })
    }

    /// What the file is named (its mount path).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file as a blob: its size asked at the first `stat` or read (which makes it).
    pub fn blob(self: &Arc<Hdf5File>) -> Arc<Blob> {
        let sizer = self.clone();
        Blob::ranged_sized(move || sizer.size(), self.clone())
    }

    /// The file's size (made first if it is not yet).
    pub fn size(&self) -> Result<u64, StoreError> {
        Ok(self.built()?.total)
    }

    fn built(&self) -> Result<&Built, StoreError> {
        let fail = |why: &String| StoreError::Produce(format!("{}: {why}", self.name));
        if let Some(built) = self.built.get() {
            return built.as_ref().map_err(fail);
        }
        // One build at a time; a second caller waits and takes the first one's result.
        let mut plan = crate::stores::lock(&self.plan);
        if let Some(built) = self.built.get() {
            return built.as_ref().map_err(fail);
        }
        let started = std::time::Instant::now();
        let made = match plan.take() {
            Some(plan) => build::build(plan),
            None => Err("no plan".to_string()),
        };
        match &made {
            Ok(b) => log::info!(
                "made {}: {} bytes, {} segments, in {} ms",
                self.name,
                b.total,
                b.segments.len(),
                started.elapsed().as_millis()
            ),
            Err(why) => log::warn!("cannot make {}: {why}", self.name),
        }
        // Set while the lock is held: a caller that waited on it finds the result, not an empty
        // plan.
        let built = self.built.get_or_init(|| made);
        drop(plan);
        built.as_ref().map_err(fail)
    }

    /// The bytes of `segment` from `offset` within it, `len` of them.
    fn segment_bytes(
        &self,
        built: &Built,
        segment: &Segment,
        offset: u64,
        len: u64,
    ) -> Result<Bytes, StoreError> {
        match segment.content {
            Some(i) => built.contents[i as usize].read_range(offset, len),
            None => built
                .image
                .slice(segment.start + offset, len)
                .ok_or_else(|| StoreError::Produce(format!("{}: outside its image", self.name))),
        }
    }
}

impl RangeSource for Hdf5File {
    fn read_range(&self, offset: u64, len: u64) -> Result<Bytes, StoreError> {
        let built = self.built()?;
        read_pieces(
            &built.segments,
            |s| s.start,
            built.total,
            (offset, len),
            |segment, from, take| self.segment_bytes(built, segment, from, take),
            |_, got, take| {
                StoreError::Produce(format!(
                    "{}: a dataset gave {got} bytes where {take} were expected",
                    self.name
                ))
            },
        )
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
