//! JSON text exactly as the seed's Julia writes it (JSON.jl 0.21), and descriptor parsing.
//!
//! Writers follow the literal key orders of `daf-formats.md` §2 (FilesDaf 1.0) so a synthesised
//! file is byte-identical to what Julia writes; readers parse JSON and accept both the 1.0 and the
//! 1.1 descriptor forms (§3.3) and any key order or whitespace.

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
    /// `{"format":"dense","eltype":T}`.
    Dense {
        /// Element type.
        eltype: ElementType,
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
    },
}

impl Descriptor {
    /// Whether this is the FilesDaf 1.1 sparse form (per-component descriptors), which a 1.0
    /// reader cannot read; dense descriptors are the same in both versions.
    pub fn is_1_1_form(&self) -> bool {
        matches!(
            self,
            Descriptor::Sparse {
                has_nzval: Some(_),
                ..
            }
        )
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

/// Parses a descriptor file's bytes.
pub fn parse_descriptor(bytes: &[u8]) -> Result<Descriptor, FormatError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| FormatError::bad(format!("invalid JSON: {e}")))?;
    let format = value.get("format").and_then(Value::as_str);
    if value.get("packed_format").is_some() {
        return Err(FormatError::bad(
            "packed properties (FilesDaf 1.1 \"packed_format\") are not supported",
        ));
    }
    match format {
        Some("dense") => Ok(Descriptor::Dense {
            eltype: type_field(&value, "eltype")?,
        }),
        Some("sparse") if value.get("eltype").is_some() => Ok(Descriptor::Sparse {
            eltype: type_field(&value, "eltype")?,
            indtype: index_type(&value, "indtype")?,
            nnz: None,
            has_nzval: None,
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
            if nzval.is_some_and(|c| c.get("packed_format").is_some())
                || index.1.get("packed_format").is_some()
            {
                return Err(FormatError::bad(
                    "packed sparse components are not supported",
                ));
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
                has_nzval: None
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
                has_nzval: Some(true)
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
                has_nzval: Some(false)
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
