//! JSON text exactly as the seed's Julia writes it (JSON.jl 0.21), and descriptor parsing.
//!
//! Writers follow the literal key orders of `daf-formats.md` §2 (FilesDaf 1.0) so a synthesised
//! file is byte-identical to what Julia writes; readers parse JSON and accept both the 1.0 and the
//! 1.1 descriptor forms (§3.3), the packing keys of packed payloads (§8), and any key order or
//! whitespace.

use std::collections::BTreeMap;

use serde_json::Value;

use super::types::{ElementType, NumType};
use super::FormatError;

/// A string as JSON.jl 0.21 prints it: `"` and `\` escaped, `\b \f \n \r \t` short escapes, other
/// C0 controls and DEL as lower-case `\u00xx`, `/` and non-ASCII left verbatim.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `{"format":"dense","eltype":"T"}\n`.
pub fn dense_descriptor(eltype: ElementType) -> String {
    format!(
        "{{\"format\":\"dense\",\"eltype\":\"{}\"}}\n",
        eltype.julia_name()
    )
}

/// `{"format":"sparse","eltype":"T","indtype":"I"}\n` (FilesDaf 1.0).
pub fn sparse_descriptor(eltype: ElementType, indtype: NumType) -> String {
    format!(
        "{{\"format\":\"sparse\",\"eltype\":\"{}\",\"indtype\":\"{}\"}}\n",
        eltype.julia_name(),
        indtype.julia_name()
    )
}

/// A parsed vector or matrix descriptor, 1.0 or 1.1 form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Descriptor {
    /// `{"format":"dense","eltype":T}`, or a packed payload (`NAME.zip`).
    Dense {
        /// Element type.
        eltype: ElementType,
        /// When the payload is packed: the descriptor object with its packing keys (§8).
        packed: Option<Value>,
    },
    /// Sparse, in either form.
    Sparse {
        /// Element type of the stored values (`Bool` when the 1.1 form omits `nzval`).
        eltype: ElementType,
        /// Index type (`nzind`, `colptr`, `rowval`).
        indtype: NumType,
        /// Number of stored values when the descriptor says it (1.1 form).
        nnz: Option<u64>,
        /// `Some(false)` when the 1.1 form says there is no `nzval` (all-true Bool); `None` in the
        /// 1.0 form, where the presence of the `.nzval` file decides.
        has_nzval: Option<bool>,
        /// The components stored packed (`NAME.COMP.zip`, 1.1 form only): component name
        /// (`nzind`, `colptr`, `rowval`, `nzval`) → its descriptor object with packing keys.
        packed: BTreeMap<String, Value>,
    },
}

impl Descriptor {
    /// Whether this is the FilesDaf 1.1 sparse form (per-component descriptors), which a 1.0
    /// reader cannot read; flat dense descriptors are the same in both versions.
    pub fn is_1_1_form(&self) -> bool {
        match self {
            Descriptor::Dense { packed, .. } => packed.is_some(),
            Descriptor::Sparse { has_nzval, .. } => has_nzval.is_some(),
        }
    }

    /// Whether any payload of the property is packed (§8).
    pub fn is_packed(&self) -> bool {
        match self {
            Descriptor::Dense { packed, .. } => packed.is_some(),
            Descriptor::Sparse { packed, .. } => !packed.is_empty(),
        }
    }
}

fn type_field(obj: &Value, key: &str) -> Result<ElementType, FormatError> {
    let name = obj
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| FormatError::bad(format!("no \"{key}\" name")))?;
    ElementType::from_julia_name(name)
        .ok_or_else(|| FormatError::bad(format!("unknown element type \"{name}\"")))
}

fn index_type(obj: &Value, key: &str) -> Result<NumType, FormatError> {
    match type_field(obj, key)? {
        ElementType::Num(t) if t.is_integer() => Ok(t),
        other => Err(FormatError::bad(format!(
            "index type {} is not an integer type",
            other.julia_name()
        ))),
    }
}

/// The packed forms a reader knows (§8): `indexed+zipped` (DataAxesFormats: shard index, then a
/// ZIP of the inner chunks) and `zipped` (the ZIP alone).
const PACKED_FORMATS: [&str; 2] = ["indexed+zipped", "zipped"];

/// `obj` itself when it describes a packed payload (it has `packed_format`), `None` when flat.
fn packing_of(obj: &Value) -> Result<Option<Value>, FormatError> {
    match obj.get("packed_format") {
        None => Ok(None),
        Some(Value::String(f)) if PACKED_FORMATS.contains(&f.as_str()) => Ok(Some(obj.clone())),
        Some(other) => Err(FormatError::bad(format!(
            "unknown packed_format {other} (daf-mount reads {})",
            PACKED_FORMATS.join(", ")
        ))),
    }
}

/// The sparse components a 1.1 descriptor may describe.
const COMPONENTS: [&str; 4] = ["nzind", "colptr", "rowval", "nzval"];

/// Parses a descriptor file's bytes.
pub fn parse_descriptor(bytes: &[u8]) -> Result<Descriptor, FormatError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| FormatError::bad(format!("invalid JSON: {e}")))?;
    let format = value.get("format").and_then(Value::as_str);
    match format {
        Some("dense") => Ok(Descriptor::Dense {
            eltype: type_field(&value, "eltype")?,
            packed: packing_of(&value)?,
        }),
        Some("sparse") if value.get("packed_format").is_some() => Err(FormatError::bad(
            "a sparse descriptor packs its components, not itself (\"packed_format\" at the top)",
        )),
        Some("sparse") if value.get("eltype").is_some() => Ok(Descriptor::Sparse {
            eltype: type_field(&value, "eltype")?,
            indtype: index_type(&value, "indtype")?,
            nnz: None,
            has_nzval: None,
            packed: BTreeMap::new(),
        }),
        Some("sparse") => {
            // 1.1: per-component descriptors; the index type comes from nzind or colptr/rowval.
            let index = ["nzind", "rowval", "colptr"]
                .iter()
                .find_map(|k| value.get(*k).map(|c| (*k, c)))
                .ok_or_else(|| FormatError::bad("sparse descriptor without nzind/colptr/rowval"))?;
            let indtype = index_type(index.1, "eltype")?;
            let nnz_of = |c: &Value| c.get("n_elements").and_then(Value::as_u64);
            let nzval = value.get("nzval");
            let mut packed = BTreeMap::new();
            for name in COMPONENTS {
                if let Some(spec) = value.get(name).map(packing_of).transpose()?.flatten() {
                    packed.insert(name.to_string(), spec);
                }
            }
            let nnz = nzval.and_then(nnz_of).or_else(|| {
                let pos = if index.0 == "colptr" {
                    value.get("rowval")
                } else {
                    Some(index.1)
                };
                pos.and_then(nnz_of)
            });
            Ok(Descriptor::Sparse {
                eltype: match nzval {
                    Some(c) => type_field(c, "eltype")?,
                    None => ElementType::Num(NumType::Bool),
                },
                indtype,
                nnz,
                has_nzval: Some(nzval.is_some()),
                packed,
            })
        }
        Some(other) => Err(FormatError::bad(format!("unknown format \"{other}\""))),
        None => Err(FormatError::bad("no \"format\"")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_follows_json_jl() {
        assert_eq!(quote("a/b\"c\\"), r#""a/b\"c\\""#);
        assert_eq!(quote("\n\t\u{1}\u{7f}é"), "\"\\n\\t\\u0001\\u007fé\"");
    }

    #[test]
    fn writers_match_the_seed_bytes() {
        assert_eq!(
            dense_descriptor(ElementType::Num(NumType::Float32)),
            "{\"format\":\"dense\",\"eltype\":\"Float32\"}\n"
        );
        assert_eq!(
            sparse_descriptor(ElementType::Num(NumType::UInt16), NumType::Int64),
            "{\"format\":\"sparse\",\"eltype\":\"UInt16\",\"indtype\":\"Int64\"}\n"
        );
    }

    #[test]
    fn parses_both_descriptor_forms() {
        let v10 =
            parse_descriptor(br#"{"format":"sparse","eltype":"Int64","indtype":"Int32"}"#).unwrap();
        assert_eq!(
            v10,
            Descriptor::Sparse {
                eltype: ElementType::Num(NumType::Int64),
                indtype: NumType::Int32,
                nnz: None,
                has_nzval: None,
                packed: BTreeMap::new(),
            }
        );
        let v11 = parse_descriptor(
            br#"{"format":"sparse","colptr":{"format":"dense","eltype":"Int64","n_elements":3},"rowval":{"format":"dense","eltype":"Int64","n_elements":3},"nzval":{"format":"dense","eltype":"UInt16","n_elements":3}}"#,
        )
        .unwrap();
        assert_eq!(
            v11,
            Descriptor::Sparse {
                eltype: ElementType::Num(NumType::UInt16),
                indtype: NumType::Int64,
                nnz: Some(3),
                has_nzval: Some(true),
                packed: BTreeMap::new(),
            }
        );
        let bool11 = parse_descriptor(
            br#"{"format":"sparse","nzind":{"format":"dense","eltype":"Int64","n_elements":1}}"#,
        )
        .unwrap();
        assert_eq!(
            bool11,
            Descriptor::Sparse {
                eltype: ElementType::Num(NumType::Bool),
                indtype: NumType::Int64,
                nnz: Some(1),
                has_nzval: Some(false),
                packed: BTreeMap::new(),
            }
        );
        assert!(parse_descriptor(b"{\"format\":\"dense\",\"eltype\":\"Float16\"}").is_err());
        assert!(parse_descriptor(
            b"{\"format\":\"sparse\",\"eltype\":\"Int64\",\"indtype\":\"Float64\"}"
        )
        .is_err());
        assert!(parse_descriptor(b"not json").is_err());
    }
}

/// The FilesDaf version a directory is in; what is written into it follows its version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilesVersion {
    /// `{"version":[1,0]}`: the seed's forms.
    V1_0,
    /// `{"version":[1,1]}`: per-component sparse descriptors, `type`-first scalars.
    V1_1,
}

/// The FilesDaf 1.1 sparse descriptor: one component per index file, with element counts, and
/// `nzval` unless the values are all-true Bools stored without a file (`daf-formats.md` §3.3).
pub fn sparse_descriptor_1_1(
    eltype: ElementType,
    indtype: NumType,
    index: &[(&str, u64)],
    nnz: u64,
    has_nzval: bool,
) -> String {
    let component = |name: &str, t: &str, n: u64| {
        format!("\"{name}\":{{\"format\":\"dense\",\"eltype\":\"{t}\",\"n_elements\":{n}}}")
    };
    let mut parts: Vec<String> = index
        .iter()
        .map(|(name, n)| component(name, indtype.julia_name(), *n))
        .collect();
    if has_nzval {
        parts.push(component("nzval", eltype.julia_name(), nnz));
    }
    format!("{{\"format\":\"sparse\",{}}}\n", parts.join(","))
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn the_1_1_forms_match_the_head_fixture_and_parse_back() {
        let umis = sparse_descriptor_1_1(
            ElementType::Num(NumType::UInt16),
            NumType::Int64,
            &[("colptr", 3), ("rowval", 3)],
            3,
            true,
        );
        assert_eq!(
            umis,
            "{\"format\":\"sparse\",\"colptr\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":3},\"rowval\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":3},\"nzval\":{\"format\":\"dense\",\"eltype\":\"UInt16\",\"n_elements\":3}}\n"
        );
        let marker = sparse_descriptor_1_1(
            ElementType::Num(NumType::Bool),
            NumType::Int64,
            &[("nzind", 1)],
            1,
            false,
        );
        assert_eq!(marker, "{\"format\":\"sparse\",\"nzind\":{\"format\":\"dense\",\"eltype\":\"Int64\",\"n_elements\":1}}\n");
        assert!(matches!(
            parse_descriptor(marker.as_bytes()),
            Ok(Descriptor::Sparse {
                has_nzval: Some(false),
                nnz: Some(1),
                ..
            })
        ));
    }
}

#[cfg(test)]
mod packed_tests {
    use super::*;

    #[test]
    fn packed_dense_and_component_descriptors_keep_their_packing_keys() {
        let dense = br#"{"format":"dense","eltype":"Float64","packed_format":"indexed+zipped","chunk_shape":[1024],"compression":"zstd","compression_level":5,"index_location":"start"}"#;
        let Descriptor::Dense { eltype, packed } = parse_descriptor(dense).unwrap() else {
            panic!("not dense")
        };
        assert_eq!(eltype, ElementType::Num(NumType::Float64));
        let spec = packed.expect("packed");
        assert_eq!(spec["chunk_shape"], serde_json::json!([1024]));
        assert_eq!(spec["compression"], "zstd");

        let sparse = br#"{"format":"sparse","colptr":{"format":"dense","eltype":"Int64","n_elements":3},"rowval":{"format":"dense","eltype":"Int64","n_elements":2000,"packed_format":"indexed+zipped","chunk_shape":[1024],"compression":"gzip","compression_level":5,"index_location":"start"},"nzval":{"format":"dense","eltype":"String","n_elements":2000,"packed_format":"zipped","chunk_shape":[512],"compression":"zstd","compression_level":3,"index_location":"start"}}"#;
        let d = parse_descriptor(sparse).unwrap();
        assert!(d.is_packed() && d.is_1_1_form());
        let Descriptor::Sparse {
            eltype,
            nnz,
            packed,
            ..
        } = d
        else {
            panic!("not sparse")
        };
        assert_eq!(eltype, ElementType::String);
        assert_eq!(nnz, Some(2000));
        assert_eq!(packed.keys().collect::<Vec<_>>(), vec!["nzval", "rowval"]);
        assert_eq!(packed["nzval"]["packed_format"], "zipped");

        let flat = parse_descriptor(br#"{"format":"dense","eltype":"Int8"}"#).unwrap();
        assert!(!flat.is_packed() && !flat.is_1_1_form());
    }

    #[test]
    fn unknown_packed_forms_are_errors() {
        let err =
            parse_descriptor(br#"{"format":"dense","eltype":"Float64","packed_format":"tarred"}"#)
                .unwrap_err();
        assert!(err.to_string().contains("unknown packed_format"), "{err}");
        assert!(parse_descriptor(
            br#"{"format":"sparse","eltype":"Int64","indtype":"Int64","packed_format":"zipped"}"#
        )
        .is_err());
        assert!(parse_descriptor(
            br#"{"format":"sparse","nzind":{"format":"dense","eltype":"Int64","n_elements":1,"packed_format":7}}"#
        )
        .is_err());
    }
}
