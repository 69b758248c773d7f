//! The Daf data model every reader produces and every view consumes.
//!
//! A [`Dataset`] is the logical content of one Daf data set: scalars, axes, vectors and matrices,
//! each payload a shared [`Blob`] (a range of a memory map whenever the source stores it plainly).
//! It holds no layout: the FilesDaf and Zarr views are both derived from it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use crate::stores::Blob;

use super::scalar::Scalar;
use super::strings::Strings;
use super::types::NumType;

/// A scalar and when it was written.
#[derive(Debug)]
pub struct ScalarProperty {
    /// The value.
    pub scalar: Scalar,
    /// Modification time.
    pub mtime: SystemTime,
}

/// An axis: its entry names.
#[derive(Debug)]
pub struct Axis {
    /// The entries (unique names), one per axis position.
    pub entries: Strings,
    /// Modification time.
    pub mtime: SystemTime,
}

impl Axis {
    /// Number of entries.
    pub fn len(&self) -> u64 {
        self.entries.count()
    }

    /// Whether the axis has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Where the stored values of a sparse property sit.
#[derive(Clone, Debug)]
pub enum SparseIndex {
    /// A sparse vector: 1-based positions.
    Vector {
        /// `nzind`.
        nzind: Arc<Blob>,
    },
    /// A sparse matrix in CSC form, 1-based.
    Matrix {
        /// `colptr` (ncols + 1 entries).
        colptr: Arc<Blob>,
        /// `rowval` (nnz entries).
        rowval: Arc<Blob>,
    },
}

/// The content of a vector or matrix property.
#[derive(Debug)]
pub enum Payload {
    /// Dense numbers: exactly `len × size` bytes (column-major for matrices).
    Dense {
        /// Element type.
        eltype: NumType,
        /// The bytes.
        data: Arc<Blob>,
    },
    /// Dense strings.
    DenseStrings(Strings),
    /// Sparse numbers; `nzval` is `None` for an all-true Bool property.
    Sparse {
        /// Element type of the stored values.
        eltype: NumType,
        /// Index type.
        indtype: NumType,
        /// Positions.
        index: SparseIndex,
        /// Stored values.
        nzval: Option<Arc<Blob>>,
    },
    /// Sparse strings (FilesDaf only): the non-empty values as text lines.
    SparseStrings {
        /// Index type.
        indtype: NumType,
        /// Positions.
        index: SparseIndex,
        /// The non-empty values, one per line.
        nztxt: Arc<Blob>,
        /// The same values densified (what Zarr shows), made on first use.
        dense: Strings,
    },
}

/// A vector or matrix property.
#[derive(Debug)]
pub struct Property {
    /// Its content.
    pub payload: Payload,
    /// Modification time.
    pub mtime: SystemTime,
}

/// One Daf data set.
#[derive(Debug, Default)]
pub struct Dataset {
    /// Scalars by name.
    pub scalars: BTreeMap<String, ScalarProperty>,
    /// Axes by name.
    pub axes: BTreeMap<String, Axis>,
    /// Vectors: axis → name → property.
    pub vectors: BTreeMap<String, BTreeMap<String, Property>>,
    /// Matrices: (rows axis, columns axis) → name → property.
    pub matrices: BTreeMap<(String, String), BTreeMap<String, Property>>,
    /// Modification time of the data set as a whole (its root).
    pub mtime: Option<SystemTime>,
}

/// The Daf dimensions of a vector or matrix property.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A vector along an axis of this length.
    Vector(u64),
    /// A matrix of (rows, columns).
    Matrix(u64, u64),
}

impl Shape {
    /// Number of elements.
    pub fn len(self) -> u64 {
        match self {
            Shape::Vector(n) => n,
            Shape::Matrix(rows, cols) => rows * cols,
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }

    /// The Zarr shape: Julia's column-major (rows, cols) is a C-order `[cols, rows]`.
    pub fn zarr(self) -> Vec<u64> {
        match self {
            Shape::Vector(n) => vec![n],
            Shape::Matrix(rows, cols) => vec![cols, rows],
        }
    }
}

/// A vector or matrix property with where it lives.
#[derive(Debug)]
pub struct PropertyRef<'a> {
    /// `vectors/AXIS/NAME` or `matrices/ROWS/COLS/NAME`.
    pub path: String,
    /// Its dimensions.
    pub shape: Shape,
    /// The property.
    pub property: &'a Property,
}

impl Dataset {
    /// The groups (directories) every layout has: `scalars`, `axes`, `vectors`, `matrices`,
    /// `vectors/A` for every axis and `matrices/R`, `matrices/R/C` for every ordered axis pair.
    pub fn groups(&self) -> Vec<String> {
        let mut groups: Vec<String> = ["scalars", "axes", "vectors", "matrices"]
            .map(String::from)
            .to_vec();
        for axis in self.axes.keys() {
            groups.push(format!("vectors/{axis}"));
            groups.push(format!("matrices/{axis}"));
            groups.extend(
                self.axes
                    .keys()
                    .map(|other| format!("matrices/{axis}/{other}")),
            );
        }
        groups
    }

    /// Every vector and matrix property, with its path and dimensions.
    pub fn properties(&self) -> impl Iterator<Item = PropertyRef<'_>> {
        let len = |axis: &str| self.axes.get(axis).map_or(0, Axis::len);
        let vectors = self.vectors.iter().flat_map(move |(axis, props)| {
            props.iter().map(move |(name, property)| PropertyRef {
                path: format!("vectors/{axis}/{name}"),
                shape: Shape::Vector(len(axis)),
                property,
            })
        });
        let matrices = self.matrices.iter().flat_map(move |((rows, cols), props)| {
            props.iter().map(move |(name, property)| PropertyRef {
                path: format!("matrices/{rows}/{cols}/{name}"),
                shape: Shape::Matrix(len(rows), len(cols)),
                property,
            })
        });
        vectors.chain(matrices)
    }

    /// The latest modification time of anything in the data set (for synthesised files).
    pub fn latest_mtime(&self) -> SystemTime {
        let props = self
            .vectors
            .values()
            .chain(self.matrices.values())
            .flat_map(|m| m.values().map(|p| p.mtime));
        self.scalars
            .values()
            .map(|s| s.mtime)
            .chain(self.axes.values().map(|a| a.mtime))
            .chain(props)
            .chain(self.mtime)
            .max()
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }
}
