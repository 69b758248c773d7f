//! A [`Plan`] made into a file by libhdf5 (see the module documentation of [`super`]): the
//! objects created in a private temporary file, the addresses of the datasets served from
//! blobs read back, the file closed and mapped, the segments worked out.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hdf5_metno::dataset::{AllocTime, FillTime};
use hdf5_metno::plist::link_create::CharEncoding;
use hdf5_metno::types::{TypeDescriptor, VarLenUnicode};
use hdf5_metno::{DatasetType, Group, Location};

use crate::formats::strings::decode_vlen;
use crate::formats::types::NumType;
use crate::stores::{Blob, Bytes};

use super::{AttrValue, Built, Content, DatasetPlan, Element, Node, NodeKind, Plan, Segment};

/// How many strings go to libhdf5 in one write (a batch's strings are allocated at once).
const STRING_BATCH: usize = 1 << 16;

/// The first line of a libhdf5 error (its stacks are long).
fn h5(e: hdf5_metno::Error) -> String {
    e.to_string()
        .lines()
        .next()
        .unwrap_or("HDF5 error")
        .to_string()
}

/// A new file in the temporary directory, open for reading and writing, and its name (libhdf5
/// opens files by name, and resolves it: an `O_TMPFILE` file's `/proc/self/fd` name does not do).
fn temporary() -> Result<(File, PathBuf), String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let path = dir.join(format!(".daf-mount-{}-{n}.h5", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("no temporary file in {}: {e}", dir.display()))?;
    Ok((file, path))
}

/// Makes the file of `plan`.
pub(super) fn build(plan: Plan) -> Result<Built, String> {
    hdf5_metno::silence_errors(true);
    let (temp, name) = temporary()?;
    let (threshold, alignment) = plan.alignment;
    let file = hdf5_metno::File::with_options()
        .with_fapl(|fapl| fapl.alignment(threshold, alignment).file_locking(false))
        .with_fcpl(|fcpl| fcpl.obj_track_times(false))
        .create(&name);
    // libhdf5 and `temp` hold the file open: its name goes at once (and if the create failed).
    let _ = std::fs::remove_file(&name);
    let file = file.map_err(|e| format!("creating the file: {}", h5(e)))?;
    let mut places: Vec<(u64, u64, Arc<Blob>)> = Vec::new();
    write_attrs(&file, &plan.root_attrs).map_err(|e| format!("/: {e}"))?;
    let mut groups = Groups::new((*file).clone());
    let mut seen = std::collections::HashSet::new();
    for node in plan.nodes {
        if !seen.insert(node.path.clone()) {
            return Err(format!("{}: twice in the plan", node.path));
        }
        create(&mut groups, node, &mut places)?;
    }
    drop(groups);
    let closed = file.close();
    // What libhdf5 and the strings held goes back to the system now, not left in RssAnon.
    crate::sys::hdf5_release_memory();
    closed.map_err(|e| format!("closing the file: {}", h5(e)))?;
    let total = temp
        .metadata()
        .map_err(|e| format!("the temporary file: {e}"))?
        .len();
    let image = match total {
        0 => Bytes::empty(),
        _ => Bytes::from_map(Arc::new(
            crate::sys::map_readonly(&temp).map_err(|e| format!("mapping the file: {e}"))?,
        )),
    };
    segments(places, total).map(|(segments, contents)| Built {
        image,
        segments,
        contents,
        total,
    })
}

/// The segments of a file of `total` bytes whose datasets served from blobs are `places`
/// (address, length, content), and the contents they index. Every place must lie inside the
/// file and none overlap another.
fn segments(
    mut places: Vec<(u64, u64, Arc<Blob>)>,
    total: u64,
) -> Result<(Vec<Segment>, Vec<Arc<Blob>>), String> {
    places.sort_by_key(|p| p.0);
    let mut segments = vec![Segment {
        start: 0,
        content: None,
    }];
    let mut contents = Vec::with_capacity(places.len());
    let mut at = 0u64;
    for (start, len, blob) in places {
        let end = start.checked_add(len).filter(|&e| e <= total);
        let Some(end) = end.filter(|_| start >= at) else {
            return Err(format!(
                "a dataset's storage [{start}, +{len}) overlaps another or ends past the file"
            ));
        };
        if segments.last().is_some_and(|s| s.start == start) {
            segments.pop();
        }
        let index = u32::try_from(contents.len()).map_err(|_| "too many datasets")?;
        segments.push(Segment {
            start,
            content: Some(index),
        });
        contents.push(blob);
        if end < total {
            segments.push(Segment {
                start: end,
                content: None,
            });
        }
        at = end;
    }
    Ok((segments, contents))
}

/// The groups made so far that later nodes may be created in: the last few opened (a plan
/// lists a group's members after it, so nearly every lookup hits).
struct Groups {
    root: Group,
    recent: HashMap<String, Group>,
}

impl Groups {
    fn new(root: Group) -> Groups {
        Groups {
            root,
            recent: HashMap::new(),
        }
    }

    /// The parent group of `path` and the name in it.
    fn parent_of<'p>(&mut self, path: &'p str) -> Result<(Group, &'p str), String> {
        let (parent, name) = match path.rsplit_once('/') {
            Some((parent, name)) => (parent, name),
            None => ("", path),
        };
        if name.is_empty() || name == "." || name == ".." {
            return Err(format!("{path:?}: not a member name"));
        }
        if parent.is_empty() {
            return Ok((self.root.clone(), name));
        }
        if let Some(group) = self.recent.get(parent) {
            return Ok((group.clone(), name));
        }
        let group = self
            .root
            .group(parent)
            .map_err(|_| format!("{path}: its parent group {parent} is not (yet) in the plan"))?;
        if self.recent.len() >= 64 {
            self.recent.clear();
        }
        self.recent.insert(parent.to_string(), group.clone());
        Ok((group, name))
    }
}

/// Creates `node` (with its attributes); a dataset served from a blob adds its place.
fn create(
    groups: &mut Groups,
    node: Node,
    places: &mut Vec<(u64, u64, Arc<Blob>)>,
) -> Result<(), String> {
    let (parent, name) = groups.parent_of(&node.path)?;
    let at = |e: String| format!("{}: {e}", node.path);
    match node.kind {
        NodeKind::Group => {
            let group = parent
                .create_group_builder()
                .obj_track_times(false)
                .char_encoding(CharEncoding::Utf8)
                .create(name)
                .map_err(|e| at(h5(e)))?;
            write_attrs(&group, &node.attrs).map_err(at)
        }
        NodeKind::Dataset(plan) => {
            let dataset = create_dataset(&parent, name, plan, places).map_err(at)?;
            write_attrs(&dataset, &node.attrs).map_err(at)
        }
    }
}

/// The number of elements of `shape`, if it fits.
fn count_of(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d))
}

/// The datatype of `element`.
fn datatype(element: Element) -> Result<DatasetType, String> {
    use hdf5_metno::types::{FloatSize, IntSize};
    let descriptor = match element {
        Element::Num(NumType::Bool) => {
            return crate::sys::hdf5_bitfield_type()
                .map(DatasetType::from)
                .map_err(h5)
        }
        Element::FixedUtf8(size) => {
            return crate::sys::hdf5_fixed_utf8_type(size)
                .map(DatasetType::from)
                .map_err(h5)
        }
        Element::Num(t) => match t {
            NumType::Int8 => TypeDescriptor::Integer(IntSize::U1),
            NumType::Int16 => TypeDescriptor::Integer(IntSize::U2),
            NumType::Int32 => TypeDescriptor::Integer(IntSize::U4),
            NumType::Int64 => TypeDescriptor::Integer(IntSize::U8),
            NumType::UInt8 => TypeDescriptor::Unsigned(IntSize::U1),
            NumType::UInt16 => TypeDescriptor::Unsigned(IntSize::U2),
            NumType::UInt32 => TypeDescriptor::Unsigned(IntSize::U4),
            NumType::UInt64 => TypeDescriptor::Unsigned(IntSize::U8),
            NumType::Float32 => TypeDescriptor::Float(FloatSize::U4),
            NumType::Float64 => TypeDescriptor::Float(FloatSize::U8),
            NumType::Bool => unreachable!("handled above"),
        },
        Element::BoolEnum => TypeDescriptor::Boolean,
        Element::VlenUtf8 => TypeDescriptor::VarLenUnicode,
    };
    Ok(DatasetType::from(descriptor))
}

/// Creates dataset `name` of `parent` as `plan` says.
fn create_dataset(
    parent: &Group,
    name: &str,
    plan: DatasetPlan,
    places: &mut Vec<(u64, u64, Arc<Blob>)>,
) -> Result<hdf5_metno::Dataset, String> {
    let count = count_of(&plan.shape).ok_or("its dataspace has too many elements")?;
    let bytes = count
        .checked_mul(plan.element.size())
        .ok_or("its dataspace has too many bytes")?;
    let shape: Vec<usize> = plan
        .shape
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| "a dimension past usize"))
        .collect::<Result<_, _>>()?;
    let builder = parent
        .new_dataset_builder()
        .no_chunk()
        .obj_track_times(false)
        .char_encoding(CharEncoding::Utf8);
    let dtype = datatype(plan.element)?;
    let dataset = match plan.content {
        Content::Empty if count == 0 => builder
            .alloc_time(Some(AllocTime::Early))
            .empty_as(dtype)
            .shape(shape)
            .create(name)
            .map_err(h5)?,
        Content::Empty => return Err(format!("no content for {count} elements")),
        Content::Bytes(_) | Content::Strings { .. } if count == 0 => {
            return create_dataset(
                parent,
                name,
                DatasetPlan {
                    content: Content::Empty,
                    ..plan
                },
                places,
            )
        }
        Content::Bytes(_) if plan.element == Element::VlenUtf8 => {
            return Err("variable-length strings given as bytes".into())
        }
        Content::Bytes(blob) => {
            let len = blob.len().map_err(|e| e.to_string())?;
            if len != bytes {
                return Err(format!(
                    "its content has {len} bytes where its dataspace takes {bytes}"
                ));
            }
            let dataset = builder
                .alloc_time(Some(AllocTime::Early))
                .fill_time(FillTime::Never)
                .empty_as(dtype)
                .shape(shape)
                .create(name)
                .map_err(h5)?;
            let offset = dataset
                .offset()
                .ok_or("libhdf5 gave its storage no address")?;
            let stored = dataset.storage_size();
            if stored != bytes {
                return Err(format!(
                    "libhdf5 stores {stored} bytes where {bytes} are due"
                ));
            }
            places.push((offset, bytes, blob));
            dataset
        }
        Content::Strings { vlen, count: given } => {
            if plan.element != Element::VlenUtf8 || given != count {
                return Err(format!(
                    "{given} variable-length strings for {count} {:?} elements",
                    plan.element
                ));
            }
            let dataset = builder
                .empty_as(dtype)
                .shape(shape)
                .create(name)
                .map_err(h5)?;
            write_strings(&dataset, &vlen, count)?;
            dataset
        }
    };
    Ok(dataset)
}

/// Writes the `count` strings of vlen-utf8 `vlen` into `dataset` (a scalar, 1-D, or 2-D by whole rows),
/// [`STRING_BATCH`] at a time.
fn write_strings(dataset: &hdf5_metno::Dataset, vlen: &Blob, count: u64) -> Result<(), String> {
    let data = vlen.bytes().map_err(|e| e.to_string())?;
    let items = decode_vlen(data.as_slice(), count)?;
    let shape = dataset.shape();
    let row = match shape.as_slice() {
        // A scalar (anndata's `string` element).
        [] => {
            let [item] = items.as_slice() else {
                return Err("a scalar string dataset of other than one string".into());
            };
            let text = std::str::from_utf8(item).map_err(|_| "a string not in UTF-8")?;
            let text = VarLenUnicode::from_str(text).map_err(|_| "a string holding NUL")?;
            return dataset.as_writer().write_scalar(&text).map_err(h5);
        }
        [_] => 1,
        [_, columns] => *columns,
        _ => return Err("strings of more than two dimensions".into()),
    };
    let rows_per_batch = (STRING_BATCH / row).max(1);
    let writer = dataset.as_writer();
    let mut first_row = 0usize;
    for batch in items.chunks(rows_per_batch * row) {
        let strings = batch
            .iter()
            .map(|item| {
                let text = std::str::from_utf8(item).map_err(|_| "a string not in UTF-8")?;
                VarLenUnicode::from_str(text).map_err(|_| "a string holding NUL")
            })
            .collect::<Result<Vec<_>, _>>()?;
        let rows = strings.len() / row;
        let range = first_row..first_row + rows;
        let written = match shape.len() {
            1 => writer.write_slice(&strings[..], range),
            _ => {
                let view = ndarray::ArrayView2::from_shape((rows, row), &strings[..])
                    .map_err(|e| e.to_string())?;
                writer.write_slice(view, (range, ..))
            }
        };
        written.map_err(h5)?;
        first_row += rows;
    }
    Ok(())
}

/// Writes `attrs` on `location`, as h5py writes the same Python values.
fn write_attrs(location: &Location, attrs: &[super::Attr]) -> Result<(), String> {
    for attr in attrs {
        let name = attr.name.as_str();
        let unicode = |s: &str| VarLenUnicode::from_str(s).map_err(|_| "a string holding NUL");
        let written = match &attr.value {
            AttrValue::Str(s) => location
                .new_attr::<VarLenUnicode>()
                .shape(())
                .create(name)
                .and_then(|a| a.write_scalar(&unicode(s)?)),
            AttrValue::Strs(list) => {
                let values = list
                    .iter()
                    .map(|s| unicode(s))
                    .collect::<Result<Vec<_>, _>>()?;
                location
                    .new_attr::<VarLenUnicode>()
                    .shape([values.len()])
                    .create(name)
                    .and_then(|a| a.write_raw(&values))
            }
            AttrValue::Int(v) => scalar_attr(location, name, v),
            AttrValue::Float(v) => scalar_attr(location, name, v),
            AttrValue::Bool(v) => scalar_attr(location, name, v),
            AttrValue::Ints(values) => array_attr(location, name, values),
            AttrValue::Floats(values) => array_attr(location, name, values),
        };
        written.map_err(|e| format!("attribute {name}: {}", h5(e)))?;
    }
    Ok(())
}

fn scalar_attr<T: hdf5_metno::H5Type>(
    location: &Location,
    name: &str,
    value: &T,
) -> hdf5_metno::Result<()> {
    let attr = location.new_attr::<T>().shape(()).create(name)?;
    attr.write_scalar(value)
}

fn array_attr<T: hdf5_metno::H5Type>(
    location: &Location,
    name: &str,
    values: &[T],
) -> hdf5_metno::Result<()> {
    let attr = location
        .new_attr::<T>()
        .shape([values.len()])
        .create(name)?;
    attr.write_raw(values)
}
