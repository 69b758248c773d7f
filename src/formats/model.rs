//! The Daf data model every reader produces and every view consumes.
//!
//! A [`Dataset`] is the logical content of one Daf data set: scalars, axes, vectors and matrices,
//! each payload a shared [`Blob`] (a range of a memory map whenever the source stores it plainly).
//! It holds no layout: the FilesDaf and Zarr views are both derived from it. The one exception is
//! [`FilesSource`] (`files/source.rs`): a FilesDaf source's version and its own JSON documents,
//! which the FilesDaf view serves byte for byte rather than synthesising them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

use crate::stores::Blob;

use super::mtime::Mtime;
pub use super::properties::Properties;
use super::scalar::Scalar;
use super::strings::Strings;
use super::types::NumType;
pub use crate::formats::files::source::FilesSource;
use crate::formats::packed::Packing;

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

/// The content of a vector or matrix property: 16 bytes, the sparse forms boxed (a source of a
/// million properties has almost only dense ones; inline, the sparse forms made every one 40).
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
    /// Sparse numbers.
    Sparse(Box<Sparse>),
    /// Sparse strings (FilesDaf only).
    SparseStrings(Box<SparseStrings>),
}

/// Sparse numbers ([`Payload::Sparse`]).
#[derive(Debug)]
pub struct Sparse {
    /// Element type of the stored values.
    pub eltype: NumType,
    /// Index type.
    pub indtype: NumType,
    /// Positions.
    pub index: SparseIndex,
    /// Stored values; `None` for an all-true Bool property.
    pub nzval: Option<Arc<Blob>>,
}

/// Sparse strings ([`Payload::SparseStrings`]): the non-empty values as text lines.
#[derive(Debug)]
pub struct SparseStrings {
    /// Index type.
    pub indtype: NumType,
    /// Positions.
    pub index: SparseIndex,
    /// The non-empty values, one per line.
    pub nztxt: Arc<Blob>,
    /// The same values densified (what Zarr shows), made on first use.
    pub dense: Strings,
}

impl Payload {
    /// Sparse numbers.
    pub fn sparse(
        eltype: NumType,
        indtype: NumType,
        index: SparseIndex,
        nzval: Option<Arc<Blob>>,
    ) -> Payload {
        Payload::Sparse(Box::new(Sparse {
            eltype,
            indtype,
            index,
            nzval,
        }))
    }
}

/// A vector or matrix property.
#[derive(Debug)]
pub struct Property {
    /// Its content.
    pub payload: Payload,
    /// Modification time.
    pub mtime: Mtime,
    /// The arrays of the property the source stores packed (`daf-formats.md` §8), by component:
    /// `""` for a dense property, `nzind`, `nzval`, `colptr`, `rowval` for sparse ones. Their
    /// payload blobs are the decoded flat content; the Zarr v3 view shows the shard itself.
    pub packed: Packed,
}

/// The packed arrays of a property by component (see [`Property::packed`]): almost always none,
/// so a map is only allocated for a property that has some (8 bytes in every property instead
/// of an empty map's 24).
#[derive(Clone, Debug, Default)]
// Boxed on purpose: an empty map is 24 bytes inline, a missing box 8 (see the size test).
#[allow(clippy::box_collection)]
pub struct Packed(Option<Box<BTreeMap<String, Arc<Packing>>>>);

impl Packed {
    /// The packing of `component`, if it is packed.
    pub fn get(&self, component: &str) -> Option<&Arc<Packing>> {
        self.0.as_ref()?.get(component)
    }

    /// Whether no component is packed.
    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|map| map.is_empty())
    }

    /// Records that `component` is packed as `packing`.
    pub fn insert(&mut self, component: String, packing: Arc<Packing>) {
        self.0
            .get_or_insert_with(Box::default)
            .insert(component, packing);
    }

    /// The packed components, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &String> {
        self.0.iter().flat_map(|map| map.keys())
    }
}

impl From<BTreeMap<String, Arc<Packing>>> for Packed {
    fn from(map: BTreeMap<String, Arc<Packing>>) -> Packed {
        Packed((!map.is_empty()).then(|| Box::new(map)))
    }
}

impl std::ops::Index<&str> for Packed {
    type Output = Arc<Packing>;

    /// The packing of `component`; panics if it is not packed (like a map's index).
    fn index(&self, component: &str) -> &Arc<Packing> {
        match self.get(component) {
            Some(packing) => packing,
            None => panic!("{component:?} is not packed"),
        }
    }
}

/// One Daf data set.
#[derive(Debug, Default)]
pub struct Dataset {
    /// Scalars by name.
    pub scalars: BTreeMap<String, ScalarProperty>,
    /// Axes by name.
    pub axes: BTreeMap<String, Axis>,
    /// Vectors: axis → name → property.
    pub vectors: BTreeMap<String, Properties>,
    /// Matrices: (rows axis, columns axis) → name → property.
    pub matrices: BTreeMap<(String, String), Properties>,
    /// Modification time of the data set as a whole (its root).
    pub mtime: Option<SystemTime>,
    /// For a FilesDaf source: its version and the files the FilesDaf view serves as they are.
    pub files_source: FilesSource,
    /// For a ZarrDaf source: the Zarr version it is stored in (2, or 3 for DataAxesFormats 0.3
    /// and later); `None` for a FilesDaf source. The default views depend on it.
    pub zarr_format: Option<u8>,
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
            // Saturating: a product past u64 can match no stored payload, so it is refused.
            Shape::Matrix(rows, cols) => rows.saturating_mul(cols),
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

    /// The groups axis `name` brings: `vectors/NAME`, `matrices/NAME`, and `matrices/NAME/X`,
    /// `matrices/X/NAME` for every axis X (itself included once).
    pub fn axis_groups(&self, name: &str) -> Vec<String> {
        let mut groups = vec![format!("vectors/{name}"), format!("matrices/{name}")];
        for other in self.axes.keys() {
            groups.push(format!("matrices/{name}/{other}"));
            if other != name {
                groups.push(format!("matrices/{other}/{name}"));
            }
        }
        groups
    }

    /// Every vector and matrix property, with its path and dimensions.
    pub fn properties(&self) -> impl Iterator<Item = PropertyRef<'_>> {
        let len = |axis: &str| self.axis_len(axis);
        let vectors = self.vectors.iter().flat_map(move |(axis, props)| {
            props.iter().map(move |(name, property)| PropertyRef {
                path: ["vectors/", axis, "/", name].concat(),
                shape: Shape::Vector(len(axis)),
                property,
            })
        });
        let matrices = self.matrices.iter().flat_map(move |((rows, cols), props)| {
            props.iter().map(move |(name, property)| PropertyRef {
                path: ["matrices/", rows, "/", cols, "/", name].concat(),
                shape: Shape::Matrix(len(rows), len(cols)),
                property,
            })
        });
        vectors.chain(matrices)
    }

    /// The length of axis `axis` (0 if there is none).
    fn axis_len(&self, axis: &str) -> u64 {
        self.axes.get(axis).map_or(0, Axis::len)
    }

    /// The vector or matrix property `id`, with its path and dimensions (as
    /// [`Dataset::properties`] gives it).
    pub fn property_ref(&self, id: &PropertyId) -> Option<PropertyRef<'_>> {
        let len = |axis: &str| self.axis_len(axis);
        let shape = match id {
            PropertyId::Vector { axis, .. } => Shape::Vector(len(axis)),
            PropertyId::Matrix { rows, cols, .. } => Shape::Matrix(len(rows), len(cols)),
            _ => return None,
        };
        Some(PropertyRef {
            path: id.path(),
            shape,
            property: self.property(id)?,
        })
    }

    /// The latest modification time of anything in the data set (for synthesised files).
    pub fn latest_mtime(&self) -> SystemTime {
        let props = self
            .vectors
            .values()
            .chain(self.matrices.values())
            .flat_map(|m| m.values().map(|p| p.mtime.get()));
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

/// Which scalar, axis, vector or matrix.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PropertyId {
    /// `scalars/NAME`.
    Scalar(String),
    /// `axes/NAME`.
    Axis(String),
    /// `vectors/AXIS/NAME`.
    Vector {
        /// The axis.
        axis: String,
        /// The name.
        name: String,
    },
    /// `matrices/ROWS/COLS/NAME`.
    Matrix {
        /// Rows axis.
        rows: String,
        /// Columns axis.
        cols: String,
        /// The name.
        name: String,
    },
}

impl PropertyId {
    /// The path shared by every layout (`vectors/cell/score`), without any suffix.
    pub fn path(&self) -> String {
        match self {
            PropertyId::Scalar(name) => format!("scalars/{name}"),
            PropertyId::Axis(name) => format!("axes/{name}"),
            PropertyId::Vector { axis, name } => format!("vectors/{axis}/{name}"),
            PropertyId::Matrix { rows, cols, name } => format!("matrices/{rows}/{cols}/{name}"),
        }
    }
}

/// A scalar, an axis, or a vector/matrix property, to insert into a data set.
#[derive(Debug)]
pub enum Item {
    /// A scalar.
    Scalar(ScalarProperty),
    /// An axis.
    Axis(Axis),
    /// A vector or matrix.
    Property(Property),
}

impl Dataset {
    /// The dimensions of a vector or matrix `id`, from the axes (`None` if an axis is missing or
    /// `id` is a scalar or an axis).
    pub fn shape(&self, id: &PropertyId) -> Option<Shape> {
        let len = |axis: &str| self.axes.get(axis).map(Axis::len);
        match id {
            PropertyId::Vector { axis, .. } => Some(Shape::Vector(len(axis)?)),
            PropertyId::Matrix { rows, cols, .. } => Some(Shape::Matrix(len(rows)?, len(cols)?)),
            _ => None,
        }
    }

    /// The dimensions of vector or matrix `id`, to read it: an error if an axis is missing.
    pub fn property_shape(&self, id: &PropertyId) -> Result<Shape, super::FormatError> {
        self.shape(id)
            .ok_or_else(|| super::FormatError::Bad(format!("{}: its axes do not exist", id.path())))
    }

    /// The vector or matrix `id`.
    pub fn property(&self, id: &PropertyId) -> Option<&Property> {
        match id {
            PropertyId::Vector { axis, name } => self.vectors.get(axis)?.get(name),
            PropertyId::Matrix { rows, cols, name } => {
                self.matrices.get(&(rows.clone(), cols.clone()))?.get(name)
            }
            _ => None,
        }
    }

    /// Sets the modification time of `id`.
    pub fn set_mtime(&mut self, id: &PropertyId, mtime: SystemTime) {
        match id {
            PropertyId::Scalar(name) => {
                if let Some(s) = self.scalars.get_mut(name) {
                    s.mtime = mtime;
                }
            }
            PropertyId::Axis(name) => {
                if let Some(a) = self.axes.get_mut(name) {
                    a.mtime = mtime;
                }
            }
            PropertyId::Vector { axis, name } => {
                if let Some(p) = self.vectors.get_mut(axis).and_then(|m| m.get_mut(name)) {
                    p.mtime = mtime.into();
                }
            }
            PropertyId::Matrix { rows, cols, name } => {
                if let Some(p) = self
                    .matrices
                    .get_mut(&(rows.clone(), cols.clone()))
                    .and_then(|m| m.get_mut(name))
                {
                    p.mtime = mtime.into();
                }
            }
        }
    }

    /// Whether `id` exists.
    pub fn contains(&self, id: &PropertyId) -> bool {
        match id {
            PropertyId::Scalar(name) => self.scalars.contains_key(name),
            PropertyId::Axis(name) => self.axes.contains_key(name),
            PropertyId::Vector { axis, name } => {
                self.vectors.get(axis).is_some_and(|m| m.contains_key(name))
            }
            PropertyId::Matrix { rows, cols, name } => self
                .matrices
                .get(&(rows.clone(), cols.clone()))
                .is_some_and(|m| m.contains_key(name)),
        }
    }

    /// Inserts (or replaces) `id`. A new axis also gets its (empty) vector and matrix groups.
    pub fn insert(&mut self, id: &PropertyId, item: Item) -> Result<(), String> {
        self.files_source.forget(id);
        match (id, item) {
            (PropertyId::Scalar(name), Item::Scalar(s)) => {
                self.scalars.insert(name.clone(), s);
            }
            (PropertyId::Axis(name), Item::Axis(a)) => {
                self.axes.insert(name.clone(), a);
                self.vectors.entry(name.clone()).or_default();
                let axes: Vec<String> = self.axes.keys().cloned().collect();
                for other in axes {
                    self.matrices
                        .entry((name.clone(), other.clone()))
                        .or_default();
                    self.matrices.entry((other, name.clone())).or_default();
                }
            }
            (PropertyId::Vector { axis, name }, Item::Property(p)) => {
                self.vectors
                    .entry(axis.clone())
                    .or_default()
                    .insert(name.clone(), p);
            }
            (PropertyId::Matrix { rows, cols, name }, Item::Property(p)) => {
                self.matrices
                    .entry((rows.clone(), cols.clone()))
                    .or_default()
                    .insert(name.clone(), p);
            }
            (id, _) => return Err(format!("{} cannot hold that kind of data", id.path())),
        }
        Ok(())
    }

    /// Takes item `id` out, leaving everything else (an axis keeps its properties).
    pub fn take(&mut self, id: &PropertyId) -> Option<Item> {
        match id {
            PropertyId::Axis(name) => self.axes.remove(name).map(Item::Axis),
            _ => self.remove(id),
        }
    }

    /// Puts `previous` (what [`Dataset::take`] gave, `None` for nothing) back as item `id`,
    /// dropping what `id` holds now: undoes a tentative [`Dataset::insert`].
    pub fn restore(&mut self, id: &PropertyId, previous: Option<Item>) {
        self.take(id);
        if let Some(previous) = previous {
            let _ = self.insert(id, previous);
        }
    }

    /// Whether any vector or matrix uses axis `name`.
    pub fn axis_in_use(&self, name: &str) -> bool {
        self.vectors.get(name).is_some_and(|m| !m.is_empty())
            || self
                .matrices
                .iter()
                .any(|((r, c), m)| (r == name || c == name) && !m.is_empty())
    }

    /// Removes `id` (an axis only with its properties, which the caller must have checked).
    pub fn remove(&mut self, id: &PropertyId) -> Option<Item> {
        self.files_source.forget(id);
        match id {
            PropertyId::Scalar(name) => self.scalars.remove(name).map(Item::Scalar),
            PropertyId::Axis(name) => {
                self.files_source.forget_axis(name);
                self.vectors.remove(name);
                self.matrices.retain(|(r, c), _| r != name && c != name);
                self.axes.remove(name).map(Item::Axis)
            }
            PropertyId::Vector { axis, name } => {
                self.vectors.get_mut(axis)?.remove(name).map(Item::Property)
            }
            PropertyId::Matrix { rows, cols, name } => self
                .matrices
                .get_mut(&(rows.clone(), cols.clone()))?
                .remove(name)
                .map(Item::Property),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_property_is_small() {
        // A million-property source holds a million of them (136 bytes before the packed map
        // and the strings were boxed, 64 before the sparse forms were and the time took 8).
        let size = std::mem::size_of::<Property>();
        assert!(size <= 32, "{size}");
        assert_eq!(std::mem::size_of::<Payload>(), 16);
        let packed = Packed::default();
        assert!(packed.is_empty() && packed.get("").is_none() && packed.keys().next().is_none());
    }
}
