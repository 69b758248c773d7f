//! Reading one Daf group of an H5df file into a [`Dataset`]: scalars, axes, vectors and
//! matrices, each dataset's type and dataspace checked against its axes and the bytes the file
//! stores for it; flat payloads as ranges of the file's map, packed ones decoded by chunk.

use super::*;

/// Reads one Daf group.
pub(super) struct Reader<'a> {
    pub(super) file: &'a H5File,
    pub(super) shown: &'a Path,
    /// Whether a packed dataset was seen.
    pub(super) packed: bool,
}

impl Reader<'_> {
    fn skipped(&self, what: &str, e: &FormatError) {
        log::warn!("skipping {what} ({e}) in {}", self.shown.display());
    }

    pub(super) fn read(&mut self, root: &Group) -> Dataset {
        let mtime = self.file.mtime;
        let mut dataset = Dataset {
            mtime: Some(mtime),
            ..Dataset::default()
        };
        if let Some(scalars) = subgroup(root, "scalars") {
            for name in members(&scalars, LocationType::Dataset, "scalars") {
                match scalars
                    .dataset(&name)
                    .map_err(h5)
                    .and_then(|ds| self.scalar(&ds))
                {
                    Ok(scalar) => {
                        dataset
                            .scalars
                            .insert(name, ScalarProperty { scalar, mtime });
                    }
                    Err(e) => self.skipped(&format!("scalars/{name}"), &e),
                }
            }
        }
        if let Some(axes) = subgroup(root, "axes") {
            for name in members(&axes, LocationType::Dataset, "axes") {
                let key = format!("axes/{name}");
                let read = axes.dataset(&name).map_err(h5).and_then(|ds| {
                    if ds.ndim() != 1 {
                        return Err(FormatError::bad("an axis must be a 1-D string dataset"));
                    }
                    let n = ds.shape()[0] as u64;
                    let axis = Axis {
                        entries: self.strings(&ds, n, &key)?,
                        mtime,
                    };
                    check_axis(&axis)?;
                    Ok(axis)
                });
                match read {
                    Ok(axis) => {
                        dataset.axes.insert(name, axis);
                    }
                    Err(e) => self.skipped(&key, &e),
                }
            }
        }
        let len = |dataset: &Dataset, axis: &str| dataset.axes.get(axis).map(Axis::len);
        if let Some(vectors) = subgroup(root, "vectors") {
            for axis in members(&vectors, LocationType::Group, "vectors") {
                let Some(n) = len(&dataset, &axis) else {
                    self.skipped(
                        &format!("vectors/{axis}"),
                        &FormatError::bad("no such axis"),
                    );
                    continue;
                };
                let Some(group) = subgroup(&vectors, &axis) else {
                    continue;
                };
                let props = self.properties(&group, &format!("vectors/{axis}"), &[n]);
                dataset.vectors.insert(axis, props);
            }
        }
        if let Some(matrices) = subgroup(root, "matrices") {
            for rows in members(&matrices, LocationType::Group, "matrices") {
                let Some(by_rows) = subgroup(&matrices, &rows) else {
                    continue;
                };
                for cols in members(&by_rows, LocationType::Group, &format!("matrices/{rows}")) {
                    let group_path = format!("matrices/{rows}/{cols}");
                    let (Some(nrows), Some(ncols)) = (len(&dataset, &rows), len(&dataset, &cols))
                    else {
                        self.skipped(&group_path, &FormatError::bad("no such axis"));
                        continue;
                    };
                    let Some(group) = subgroup(&by_rows, &cols) else {
                        continue;
                    };
                    // HDF5 dataspaces are C order: [ncols, nrows].
                    let props = self.properties(&group, &group_path, &[ncols, nrows]);
                    dataset.matrices.insert((rows.clone(), cols), props);
                }
            }
        }
        dataset
    }

    /// The properties of `group` (at `path`), each of dense HDF5 shape `shape`.
    fn properties(&mut self, group: &Group, path: &str, shape: &[u64]) -> Properties {
        let mut names = group.member_names().unwrap_or_default();
        names.sort();
        let mut props = Vec::new();
        for name in names {
            if !accept_name(&name, || format!("{path}/{name:?}")) {
                continue;
            }
            let key = format!("{path}/{name}");
            // Opening as a dataset, then as a group, costs fewer name lookups than asking
            // what the member is first (10,000 properties mount in a fraction of the time).
            let read = if let Ok(ds) = group.dataset(&name) {
                self.dense(&ds, &key, shape)
            } else if let Ok(sub) = group.group(&name) {
                self.sparse(&sub, &key, shape)
            } else {
                continue;
            };
            match read {
                Ok(payload) => props.push((
                    name,
                    Property {
                        payload,
                        mtime: self.file.mtime.into(),
                        packed: Default::default(),
                    },
                )),
                Err(e) => self.skipped(&key, &e),
            }
        }
        props.into_iter().collect()
    }

    /// A scalar: one element (a scalar dataspace, or one of one element).
    fn scalar(&self, ds: &H5Dataset) -> Result<Scalar, FormatError> {
        if count_of(&ds.shape()) != Some(1) {
            return Err(FormatError::bad("a scalar must have one element"));
        }
        match element_of(ds)? {
            Element::Num(t) => {
                let bytes = self.flat(ds, t.size())?.bytes()?;
                Scalar::from_le_bytes(t, bytes.as_slice())
            }
            Element::Fixed(size, spaces) => {
                let bytes = self.flat(ds, size as u64)?.bytes()?;
                let raw = bytes.as_slice();
                // HDF5.jl cuts at the first NUL (NULLTERM, NULLPAD), strips SPACEPAD's spaces.
                let end = memchr::memchr(0, raw).unwrap_or(raw.len());
                let mut text = std::str::from_utf8(&raw[..end])
                    .map_err(|_| FormatError::bad("string is not UTF-8"))?;
                if spaces {
                    text = text.trim_end_matches(' ');
                }
                string_scalar(text)
            }
            Element::Vlen { ascii } => {
                let text = if ascii {
                    ds.read_scalar::<VarLenAscii>()
                        .map_err(h5)?
                        .as_str()
                        .to_string()
                } else {
                    ds.read_scalar::<VarLenUnicode>()
                        .map_err(h5)?
                        .as_str()
                        .to_string()
                };
                string_scalar(&text)
            }
        }
    }

    /// The bytes of a contiguous dataset of `len` elements of `size` bytes: a range of the map.
    fn flat(&self, ds: &H5Dataset, size: u64) -> Result<Arc<Blob>, FormatError> {
        let count = count_of(&ds.shape()).ok_or_else(|| FormatError::bad("too many elements"))?;
        let len = count
            .checked_mul(size)
            .ok_or_else(|| FormatError::bad("too many elements"))?;
        if len == 0 {
            return Ok(Blob::ready(Bytes::empty()));
        }
        let Some(offset) = ds.offset() else {
            return Err(FormatError::bad(format!(
                "claims {count} elements but has no storage in the file"
            )));
        };
        self.file
            .map
            .slice(offset, len)
            .filter(|_| ds.storage_size() >= len)
            .map(Blob::ready)
            .ok_or_else(|| {
                FormatError::bad(format!(
                    "claims {len} bytes at {offset}, beyond what the file stores"
                ))
            })
    }

    /// `n` strings of a 1-D or 2-D variable-length string dataset, read through libhdf5 once
    /// its storage was found to hold that many (16 bytes each).
    fn strings(&self, ds: &H5Dataset, n: u64, key: &str) -> Result<Strings, FormatError> {
        let Element::Vlen { ascii } = element_of(ds)? else {
            return Err(FormatError::bad("not a variable-length string dataset"));
        };
        if count_of(&ds.shape()) != Some(n) {
            return Err(FormatError::bad(format!(
                "dataspace {:?} does not hold {n} strings",
                ds.shape()
            )));
        }
        if n == 0 {
            return Ok(Strings::from_vlen(
                Blob::ready(Bytes::from_vec(encode_vlen(std::iter::empty(), 0))),
                0,
            )
            .named(key));
        }
        if ds.storage_size() < n.saturating_mul(16) {
            return Err(FormatError::bad(format!(
                "claims {n} strings but stores only {} bytes",
                ds.storage_size()
            )));
        }
        let items: Vec<String> = if ascii {
            let raw = ds.read_raw::<VarLenAscii>().map_err(h5)?;
            raw.iter().map(|s| s.as_str().to_string()).collect()
        } else {
            let raw = ds.read_raw::<VarLenUnicode>().map_err(h5)?;
            raw.iter().map(|s| s.as_str().to_string()).collect()
        };
        let vlen = encode_vlen(items.iter().map(|s| s.as_bytes()), items.len());
        Ok(Strings::from_vlen(Blob::ready(Bytes::from_vec(vlen)), n).named(key))
    }

    /// A numeric dataset's type and flat content: a range of the map (contiguous), or decoded
    /// chunk by chunk (chunked).
    fn numeric(&mut self, ds: &H5Dataset, key: &str) -> Result<(NumType, Arc<Blob>), FormatError> {
        let Element::Num(t) = element_of(ds)? else {
            return Err(FormatError::bad("not a numeric dataset"));
        };
        // A stored contiguous dataset has an address; asking for the layout copies the creation
        // property list (a third of a mount's time at 10,000 properties): only without one.
        if ds.offset().is_some() || count_of(&ds.shape()) == Some(0) || !ds.is_chunked() {
            return Ok((t, self.flat(ds, t.size())?));
        }
        self.packed = true;
        let shape: Vec<u64> = ds.shape().iter().map(|&n| n as u64).collect();
        let chunks: Vec<u64> = ds
            .chunk()
            .ok_or_else(|| FormatError::bad("a chunked dataset without a chunk shape"))?
            .iter()
            .map(|&n| n as u64)
            .collect();
        let pipeline: Vec<Filter> = ds
            .filters()
            .iter()
            .map(|f| Filter {
                id: f.id() as u32,
                cd_values: match f {
                    hdf5_metno::filters::Filter::User(_, cd) => cd.clone(),
                    _ => Vec::new(),
                },
            })
            .collect();
        check_pipeline(&pipeline).map_err(FormatError::Bad)?;
        let grid_total = shape
            .iter()
            .zip(&chunks)
            .try_fold(1u64, |acc, (s, c)| acc.checked_mul(s.div_ceil((*c).max(1))))
            .ok_or_else(|| FormatError::bad("too many chunks"))?;
        if grid_total > MAX_CHUNKS {
            return Err(FormatError::bad(format!(
                "{grid_total} chunks, more than the {MAX_CHUNKS} daf-mount reads"
            )));
        }
        // Each chunk of the grid looked up by its coordinates (one B-tree lookup each); a chunk
        // that is not stored reads as the fill value.
        let mut stored = Vec::new();
        let grid: Vec<u64> = shape
            .iter()
            .zip(&chunks)
            .map(|(s, c)| s.div_ceil(*c))
            .collect();
        let mut at = vec![0u64; grid.len()];
        for n in 0..if count_of(&ds.shape()) == Some(0) {
            0
        } else {
            grid_total
        } {
            crate::formats::zarr::chunks::unravel(n, &grid, &mut at);
            let coords: Vec<u64> = at.iter().zip(&chunks).map(|(a, c)| a * c).collect();
            let Some((mask, addr, size)) = crate::sys::hdf5_chunk_at(ds, &coords) else {
                continue;
            };
            let bytes = self.file.map.slice(addr, size).ok_or_else(|| {
                FormatError::bad(format!("chunk {n} lies beyond the end of the file"))
            })?;
            stored.push((coords, StoredChunk { bytes, mask }));
        }
        let layout = ChunkedLayout {
            shape,
            chunks,
            elem_size: t.size(),
            pipeline,
        };
        let blob = chunked_blob(layout, stored, format!("{} {key}", self.shown.display()))
            .map_err(FormatError::Bad)?;
        Ok((t, blob))
    }

    /// A dense property: a dataset of dense shape `shape`.
    fn dense(&mut self, ds: &H5Dataset, key: &str, shape: &[u64]) -> Result<Payload, FormatError> {
        let got: Vec<u64> = ds.shape().iter().map(|&n| n as u64).collect();
        if got != shape {
            return Err(FormatError::bad(format!(
                "dataspace {got:?}, {shape:?} expected by its axes"
            )));
        }
        let n = shape.iter().fold(1u64, |acc, &d| acc.saturating_mul(d));
        Ok(match element_of(ds)? {
            Element::Vlen { .. } => Payload::DenseStrings(self.strings(ds, n, key)?),
            Element::Fixed(..) => {
                return Err(FormatError::bad("fixed-length strings in an array"));
            }
            Element::Num(_) => {
                let (eltype, data) = self.numeric(ds, key)?;
                Payload::Dense { eltype, data }
            }
        })
    }

    /// A 1-D integer index dataset (`nzind`, `colptr`, `rowval`) and its element count.
    fn index(
        &mut self,
        group: &Group,
        name: &str,
        key: &str,
    ) -> Result<(NumType, Arc<Blob>, u64), FormatError> {
        let ds = group
            .dataset(name)
            .map_err(|_| FormatError::bad(format!("no {name} dataset")))?;
        if ds.ndim() != 1 {
            return Err(FormatError::bad(format!("{name} must be 1-D")));
        }
        let (t, blob) = self.numeric(&ds, &format!("{key}/{name}"))?;
        if !t.is_integer() {
            return Err(FormatError::bad(format!("{name} must hold integers")));
        }
        Ok((t, blob, ds.shape()[0] as u64))
    }

    /// A sparse property: a group of `nzind` (vectors) or `colptr` + `rowval` (matrices), and
    /// `nzval` (absent: all true) or `nztxt` (strings).
    fn sparse(&mut self, group: &Group, key: &str, shape: &[u64]) -> Result<Payload, FormatError> {
        let dense_len: u64 = shape.iter().fold(1u64, |acc, &d| acc.saturating_mul(d));
        let (indtype, index, nnz) = if shape.len() == 1 {
            let (t, nzind, nnz) = self.index(group, "nzind", key)?;
            (t, SparseIndex::Vector { nzind }, nnz)
        } else {
            let (t, colptr, ncolptr) = self.index(group, "colptr", key)?;
            let (rt, rowval, nnz) = self.index(group, "rowval", key)?;
            if rt != t {
                return Err(FormatError::bad("colptr and rowval have different types"));
            }
            let expected = shape[0].saturating_add(1);
            if ncolptr != expected {
                return Err(FormatError::bad(format!(
                    "colptr has {ncolptr} entries, {expected} expected"
                )));
            }
            (t, SparseIndex::Matrix { colptr, rowval }, nnz)
        };
        if nnz > dense_len {
            return Err(FormatError::bad(format!(
                "{nnz} stored values for {dense_len} elements"
            )));
        }
        if kind_of(group, "nztxt") == Some(LocationType::Dataset) {
            let ds = group.dataset("nztxt").map_err(h5)?;
            let nztxt = self.strings(&ds, nnz, &format!("{key}/nztxt"))?.lines();
            let positions = match &index {
                SparseIndex::Vector { nzind } => SparsePositions::Vector {
                    nzind: nzind.clone(),
                },
                SparseIndex::Matrix { colptr, rowval } => SparsePositions::Matrix {
                    colptr: colptr.clone(),
                    rowval: rowval.clone(),
                    nrows: shape[1],
                    ncols: shape[0],
                },
            };
            let dense =
                densify_sparse_strings(positions, indtype, nztxt.clone(), nnz, dense_len, key);
            return Ok(Payload::SparseStrings(Box::new(SparseStrings {
                indtype,
                index,
                nztxt,
                dense,
            })));
        }
        let nzval = match kind_of(group, "nzval") {
            Some(LocationType::Dataset) => {
                let ds = group.dataset("nzval").map_err(h5)?;
                if count_of(&ds.shape()) != Some(nnz) || ds.ndim() != 1 {
                    return Err(FormatError::bad(format!(
                        "nzval has dataspace {:?} for {nnz} positions",
                        ds.shape()
                    )));
                }
                Some(self.numeric(&ds, &format!("{key}/nzval"))?)
            }
            _ => None,
        };
        let (eltype, nzval) = match nzval {
            Some((t, blob)) => (t, Some(blob)),
            None => (NumType::Bool, None),
        };
        Ok(Payload::sparse(eltype, indtype, index, nzval))
    }
}

fn string_scalar(text: &str) -> Result<Scalar, FormatError> {
    Scalar::from_value(
        ElementType::String,
        &serde_json::Value::String(text.to_string()),
    )
}
