//! Which axis is obs, which is var, and which matrix is X (`anndata-view.md` §2): upstream's
//! `daf_as_anndata` rules (each name from the option, else the String scalar `obs_is`, `var_is`
//! or `X_is`, else the default `obs`, `var`, `X`), with X alone inferred when one matrix joins
//! the two axes. Which axis is obs is never guessed: every case that cannot be decided is one
//! line naming the choices and how to choose.

use crate::formats::model::{Dataset, Payload};
use crate::formats::scalar::ScalarValue;
use crate::formats::types::ElementType;

/// What the user asked for (`--anndata [OBS:VAR[:X]]`, `-o anndata[=OBS:VAR[:X]]`): each name
/// not given is taken from the data set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Request {
    /// The obs axis, if given.
    pub obs: Option<String>,
    /// The var axis, if given.
    pub var: Option<String>,
    /// The X matrix, if given.
    pub x: Option<String>,
}

impl Request {
    /// Parses the option's value: empty (nothing given), `OBS:VAR` or `OBS:VAR:X`.
    pub fn parse(value: &str) -> Result<Request, String> {
        if value.is_empty() {
            return Ok(Request::default());
        }
        let parts: Vec<&str> = value.split(':').collect();
        let bad = || {
            format!(
                "--anndata {value}: the value is OBS:VAR or OBS:VAR:X (two axis names and a \
                 matrix name, none empty); put --anndata after SOURCE and MOUNTPOINT, or use -o anndata"
            )
        };
        if !(2..=3).contains(&parts.len()) || parts.iter().any(|p| p.is_empty()) {
            return Err(bad());
        }
        Ok(Request {
            obs: Some(parts[0].to_string()),
            var: Some(parts[1].to_string()),
            x: parts.get(2).map(|x| x.to_string()),
        })
    }

    /// The option as the user gave it, for messages (`--anndata cell:gene`).
    fn shown(&self) -> String {
        match (&self.obs, &self.var, &self.x) {
            (Some(o), Some(v), Some(x)) => format!("--anndata {o}:{v}:{x}"),
            (Some(o), Some(v), None) => format!("--anndata {o}:{v}"),
            _ => "--anndata".to_string(),
        }
    }
}

/// The axes and the matrix an AnnData view shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// The obs axis (AnnData's rows).
    pub obs: String,
    /// The var axis (AnnData's columns).
    pub var: String,
    /// The matrix shown as X.
    pub x: String,
}

/// The selection for data set `name` under `request`, or the one line that says why there is
/// none and how to choose.
pub fn select(name: &str, dataset: &Dataset, request: &Request) -> Result<Selection, String> {
    let shown = request.shown();
    let refuse = |why: String| format!("{name}: {shown}: {why}");
    let axes: Vec<&str> = dataset.axes.keys().map(String::as_str).collect();
    let axis_list = axes.join(", ");
    let string_scalar = |key: &str| -> Result<Option<String>, String> {
        match dataset.scalars.get(key).map(|s| &s.scalar) {
            None => Ok(None),
            Some(s) => match (&s.value, s.eltype) {
                (ScalarValue::String(v), ElementType::String) => Ok(Some(v.clone())),
                _ => Err(refuse(format!(
                    "the scalar {key} is {}, not a String naming {}",
                    s.eltype.julia_name(),
                    if key == "X_is" { "a matrix" } else { "an axis" }
                ))),
            },
        }
    };
    let axis = |given: &Option<String>,
                key: &'static str,
                default: &str|
     -> Result<Option<(String, &'static str)>, String> {
        Ok(match given {
            Some(a) => Some((a.clone(), "")),
            None => match string_scalar(key)? {
                Some(a) => Some((a, key)),
                None => dataset
                    .axes
                    .contains_key(default)
                    .then(|| (default.to_string(), "")),
            },
        })
    };
    let (Some((obs, obs_from)), Some((var, var_from))) = (
        axis(&request.obs, "obs_is", "obs")?,
        axis(&request.var, "var_is", "var")?,
    ) else {
        return Err(refuse(format!(
            "cannot choose obs and var among the {} axes ({axis_list}): say --anndata OBS:VAR[:X] \
             or set the String scalars obs_is and var_is",
            axes.len()
        )));
    };
    for (a, from) in [(&obs, obs_from), (&var, var_from)] {
        if !dataset.axes.contains_key(a) {
            let by = match from {
                "" => String::new(),
                key => format!("the scalar {key} names "),
            };
            return Err(refuse(format!("{by}no axis {a} (axes: {axis_list})")));
        }
    }
    if obs == var {
        return Err(refuse(format!(
            "obs and var are both {obs}: they must be two different axes (axes: {axis_list})"
        )));
    }
    let candidates = candidates(dataset, &obs, &var);
    let list = candidates.join(", ");
    let x = match &request.x {
        Some(x) => x.clone(),
        None => match string_scalar("X_is")? {
            Some(x) => x,
            None if candidates.iter().any(|c| c == "X") => "X".to_string(),
            None if candidates.len() == 1 => candidates[0].clone(),
            None if candidates.is_empty() => {
                return Err(refuse(format!(
                    "no numeric or Bool matrix joins {obs} and {var}, and X must be one"
                )))
            }
            None => {
                return Err(refuse(format!(
                    "cannot choose X among the {} matrices of {obs} and {var} ({list}): say \
                     --anndata {obs}:{var}:X or set the String scalar X_is",
                    candidates.len()
                )))
            }
        },
    };
    if !candidates.contains(&x) {
        return Err(refuse(match candidates.is_empty() {
            true => format!("no numeric or Bool matrix {x} joins {obs} and {var} (there is none)"),
            false => {
                format!("no numeric or Bool matrix {x} joins {obs} and {var} (matrices: {list})")
            }
        }));
    }
    Ok(Selection { obs, var, x })
}

/// The names of the numeric and Bool matrices stored as (var, obs) or (obs, var), sorted, once
/// each: what X may be.
fn candidates(dataset: &Dataset, obs: &str, var: &str) -> Vec<String> {
    let mut names: Vec<String> = [(var, obs), (obs, var)]
        .iter()
        .filter_map(|(r, c)| dataset.matrices.get(&(r.to_string(), c.to_string())))
        .flat_map(|props| props.iter())
        .filter(|(_, p)| matches!(p.payload, Payload::Dense { .. } | Payload::Sparse(_)))
        .map(|(name, _)| name.to_string())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::model::{Axis, Item, Property, PropertyId, ScalarProperty};
    use crate::formats::scalar::Scalar;
    use crate::formats::strings::Strings;
    use crate::formats::types::NumType;
    use crate::stores::{Blob, Bytes};
    use std::time::SystemTime;

    fn dataset(axes: &[&str], matrices: &[(&str, &str, &str, bool)]) -> Dataset {
        let mut ds = Dataset::default();
        for a in axes {
            let entries = Strings::from_lines(Blob::ready(Bytes::from_vec(b"a\n".to_vec())), 1);
            let axis = Axis {
                entries,
                mtime: SystemTime::UNIX_EPOCH,
            };
            ds.insert(&PropertyId::Axis(a.to_string()), Item::Axis(axis))
                .unwrap();
        }
        for (rows, cols, name, strings) in matrices {
            let payload = match strings {
                false => Payload::Dense {
                    eltype: NumType::Float32,
                    data: Blob::ready(Bytes::from_vec(vec![0; 4])),
                },
                true => Payload::DenseStrings(Strings::from_lines(
                    Blob::ready(Bytes::from_vec(b"x\n".to_vec())),
                    1,
                )),
            };
            let id = PropertyId::Matrix {
                rows: rows.to_string(),
                cols: cols.to_string(),
                name: name.to_string(),
            };
            let property = Property {
                payload,
                mtime: SystemTime::UNIX_EPOCH.into(),
                packed: Default::default(),
            };
            ds.insert(&id, Item::Property(property)).unwrap();
        }
        ds
    }

    fn scalar(ds: &mut Dataset, key: &str, value: ScalarValue, eltype: ElementType) {
        let s = ScalarProperty {
            scalar: Scalar { eltype, value },
            mtime: SystemTime::UNIX_EPOCH,
        };
        ds.insert(&PropertyId::Scalar(key.into()), Item::Scalar(s))
            .unwrap();
    }

    fn text(ds: &mut Dataset, key: &str, value: &str) {
        scalar(
            ds,
            key,
            ScalarValue::String(value.into()),
            ElementType::String,
        );
    }

    fn req(value: &str) -> Request {
        Request::parse(value).unwrap()
    }

    fn chosen(s: Selection) -> (String, String, String) {
        (s.obs, s.var, s.x)
    }

    fn owned(a: &str, b: &str, c: &str) -> (String, String, String) {
        (a.into(), b.into(), c.into())
    }

    #[test]
    fn the_value_is_obs_var_and_maybe_x() {
        assert_eq!(req(""), Request::default());
        assert_eq!(req("cell:gene").x, None);
        assert_eq!(req("cell:gene:UMIs").x.as_deref(), Some("UMIs"));
        for bad in ["pbmc.daf.zarr.zip", "a:", ":b", "a::c", "a:b:", "a:b:c:d"] {
            let why = Request::parse(bad).unwrap_err();
            assert!(why.contains("OBS:VAR or OBS:VAR:X"), "{why}");
        }
    }

    #[test]
    fn the_option_then_the_scalars_then_the_defaults() {
        let mut ds = dataset(
            &["cell", "gene", "batch"],
            &[
                ("gene", "cell", "UMIs", false),
                ("cell", "gene", "frac", false),
            ],
        );
        assert_eq!(
            chosen(select("d", &ds, &req("cell:gene:UMIs")).unwrap()),
            owned("cell", "gene", "UMIs")
        );
        let why = select("d", &ds, &req("")).unwrap_err();
        assert_eq!(
            why,
            "d: --anndata: cannot choose obs and var among the 3 axes (batch, cell, gene): say \
             --anndata OBS:VAR[:X] or set the String scalars obs_is and var_is"
        );
        let why = select("d", &ds, &req("cell:gene")).unwrap_err();
        assert_eq!(
            why,
            "d: --anndata cell:gene: cannot choose X among the 2 matrices of cell and gene \
             (UMIs, frac): say --anndata cell:gene:X or set the String scalar X_is"
        );
        text(&mut ds, "obs_is", "cell");
        text(&mut ds, "var_is", "gene");
        text(&mut ds, "X_is", "frac");
        assert_eq!(
            chosen(select("d", &ds, &req("")).unwrap()),
            owned("cell", "gene", "frac")
        );
        // Per name: the option's obs and var, the scalar's X.
        assert_eq!(
            chosen(select("d", &ds, &req("gene:cell")).unwrap()),
            owned("gene", "cell", "frac")
        );
    }

    #[test]
    fn upstreams_defaults_and_the_only_candidate() {
        let ds = dataset(
            &["obs", "var", "other"],
            &[("var", "obs", "X", false), ("var", "obs", "Y", false)],
        );
        assert_eq!(
            chosen(select("d", &ds, &req("")).unwrap()),
            owned("obs", "var", "X")
        );
        // Square and String matrices are never candidates.
        let ds = dataset(
            &["cell", "gene"],
            &[
                ("cell", "gene", "UMIs", false),
                ("cell", "cell", "edges", false),
                ("gene", "cell", "names", true),
            ],
        );
        assert_eq!(
            chosen(select("d", &ds, &req("cell:gene")).unwrap()),
            owned("cell", "gene", "UMIs")
        );
        let why = select("d", &ds, &req("cell:gene:names")).unwrap_err();
        assert_eq!(
            why,
            "d: --anndata cell:gene:names: no numeric or Bool matrix names joins cell and gene \
             (matrices: UMIs)"
        );
        // Even with two axes, which one is obs is not guessed.
        assert!(select("d", &ds, &req(""))
            .unwrap_err()
            .contains("cannot choose obs and var among the 2 axes (cell, gene)"));
    }

    #[test]
    fn every_refusal_names_the_choices() {
        let mut ds = dataset(&["cell", "gene"], &[("cell", "gene", "UMIs", false)]);
        assert_eq!(
            select("tiny", &ds, &req("cell:tissue:UMIs")).unwrap_err(),
            "tiny: --anndata cell:tissue:UMIs: no axis tissue (axes: cell, gene)"
        );
        assert_eq!(
            select("tiny", &ds, &req("cell:cell")).unwrap_err(),
            "tiny: --anndata cell:cell: obs and var are both cell: they must be two different \
             axes (axes: cell, gene)"
        );
        text(&mut ds, "var_is", "tissue");
        assert_eq!(
            select("tiny", &ds, &req("")).unwrap_err(),
            "tiny: --anndata: cannot choose obs and var among the 2 axes (cell, gene): say \
             --anndata OBS:VAR[:X] or set the String scalars obs_is and var_is"
        );
        text(&mut ds, "obs_is", "cell");
        assert_eq!(
            select("tiny", &ds, &req("")).unwrap_err(),
            "tiny: --anndata: the scalar var_is names no axis tissue (axes: cell, gene)"
        );
        scalar(
            &mut ds,
            "X_is",
            ScalarValue::Int(3),
            ElementType::Num(NumType::Int64),
        );
        assert_eq!(
            select("tiny", &ds, &req("cell:gene")).unwrap_err(),
            "tiny: --anndata cell:gene: the scalar X_is is Int64, not a String naming a matrix"
        );
        let ds = dataset(&["cell", "gene"], &[]);
        assert_eq!(
            select("tiny", &ds, &req("cell:gene")).unwrap_err(),
            "tiny: --anndata cell:gene: no numeric or Bool matrix joins cell and gene, and X \
             must be one"
        );
    }
}
