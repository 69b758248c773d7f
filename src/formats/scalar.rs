//! Scalars: typed values, their FilesDaf JSON file and their one-element Zarr chunk.

use std::collections::BTreeMap;

use serde_json::value::RawValue;
use serde_json::Value;

use super::json::quote;
use super::strings::encode_vlen;
use super::types::{ElementType, NumType};
use super::FormatError;

/// A scalar's value, kept exact (64-bit integers never go through a float).
#[derive(Clone, Debug, PartialEq)]
pub enum ScalarValue {
    /// A Bool.
    Bool(bool),
    /// A signed integer (any signed width).
    Int(i64),
    /// An unsigned integer (any unsigned width).
    UInt(u64),
    /// A float (Float32 values are held exactly as f64).
    Float(f64),
    /// A string.
    String(String),
}

/// A typed scalar.
#[derive(Clone, Debug, PartialEq)]
pub struct Scalar {
    /// Its Daf type.
    pub eltype: ElementType,
    /// Its value.
    pub value: ScalarValue,
}

fn out_of_range(v: &Value, t: NumType) -> FormatError {
    FormatError::bad(format!("value {v} does not fit {}", t.julia_name()))
}

impl Scalar {
    /// Parses a FilesDaf scalar file (`{"type":T,"value":V}`, any key order).
    ///
    /// A float value is converted from its own text, correctly rounded to the scalar's type
    /// (`str::parse::<f64>` / `str::parse::<f32>`), so the written shortest form of any finite
    /// Float64 or Float32 comes back to the same bits.
    pub fn from_json(bytes: &[u8]) -> Result<Scalar, FormatError> {
        let doc: BTreeMap<String, &RawValue> = serde_json::from_slice(bytes)
            .map_err(|e| FormatError::bad(format!("invalid JSON: {e}")))?;
        let name: String = doc
            .get("type")
            .and_then(|raw| serde_json::from_str(raw.get()).ok())
            .ok_or_else(|| FormatError::bad("no \"type\""))?;
        let eltype = ElementType::from_julia_name(&name)
            .ok_or_else(|| FormatError::bad(format!("unknown type \"{name}\"")))?;
        let raw = doc
            .get("value")
            .ok_or_else(|| FormatError::bad("no \"value\""))?
            .get();
        if let (ElementType::Num(t @ (NumType::Float32 | NumType::Float64)), true) = (
            eltype,
            raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()),
        ) {
            let value = match t {
                NumType::Float32 => raw.parse::<f32>().map(f64::from),
                _ => raw.parse::<f64>(),
            };
            let value =
                value.map_err(|_| FormatError::bad(format!("value {raw} is not a number")))?;
            return Ok(Scalar {
                eltype,
                value: ScalarValue::Float(value),
            });
        }
        let v: Value = serde_json::from_str(raw)
            .map_err(|e| FormatError::bad(format!("invalid JSON: {e}")))?;
        Scalar::from_value(eltype, &v)
    }

    /// Converts a JSON value to `eltype` the way Julia's `convert` does.
    pub fn from_value(eltype: ElementType, v: &Value) -> Result<Scalar, FormatError> {
        let t = match eltype {
            ElementType::String => {
                let s = v
                    .as_str()
                    .ok_or_else(|| FormatError::bad("String scalar value is not a JSON string"))?;
                return Ok(Scalar {
                    eltype,
                    value: ScalarValue::String(s.to_string()),
                });
            }
            ElementType::Num(t) => t,
        };
        let integral = v.as_f64().filter(|f| f.fract() == 0.0);
        let value = match t {
            NumType::Bool => match (v.as_bool(), v.as_u64()) {
                (Some(b), _) => ScalarValue::Bool(b),
                (None, Some(n @ (0 | 1))) => ScalarValue::Bool(n == 1),
                _ => return Err(out_of_range(v, t)),
            },
            NumType::Float32 | NumType::Float64 => match v {
                Value::Null => ScalarValue::Float(f64::NAN),
                _ => {
                    let f = v.as_f64().ok_or_else(|| out_of_range(v, t))?;
                    // A Float32 holds an f32 value (Julia's `convert(Float32, ::Float64)`).
                    ScalarValue::Float(match t {
                        NumType::Float32 => f64::from(f as f32),
                        _ => f,
                    })
                }
            },
            NumType::UInt8 | NumType::UInt16 | NumType::UInt32 | NumType::UInt64 => {
                let n = v.as_u64().or_else(|| {
                    integral
                        .filter(|f| *f >= 0.0 && *f < 1.9e19)
                        .map(|f| f as u64)
                });
                let n = n.ok_or_else(|| out_of_range(v, t))?;
                if t.size() < 8 && n >> (8 * t.size()) != 0 {
                    return Err(out_of_range(v, t));
                }
                ScalarValue::UInt(n)
            }
            _ => {
                let n = v
                    .as_i64()
                    .or_else(|| integral.filter(|f| f.abs() < 9.2e18).map(|f| f as i64));
                let n = n.ok_or_else(|| out_of_range(v, t))?;
                let bits = 8 * t.size() as u32;
                if bits < 64 && (n < -(1i64 << (bits - 1)) || n >= 1i64 << (bits - 1)) {
                    return Err(out_of_range(v, t));
                }
                ScalarValue::Int(n)
            }
        };
        Ok(Scalar { eltype, value })
    }

    /// Reads a one-element little-endian Zarr chunk of type `t`.
    pub fn from_le_bytes(t: NumType, bytes: &[u8]) -> Result<Scalar, FormatError> {
        let size = t.size() as usize;
        if bytes.len() != size {
            return Err(FormatError::bad(format!(
                "scalar chunk has {} bytes, {} expected",
                bytes.len(),
                size
            )));
        }
        let mut word = [0u8; 8];
        word[..size].copy_from_slice(bytes);
        let raw = u64::from_le_bytes(word);
        let shift = 64 - 8 * size as u32;
        let value = match t {
            NumType::Bool => ScalarValue::Bool(raw != 0),
            NumType::Float32 => ScalarValue::Float(f64::from(f32::from_bits(raw as u32))),
            NumType::Float64 => ScalarValue::Float(f64::from_bits(raw)),
            NumType::UInt8 | NumType::UInt16 | NumType::UInt32 | NumType::UInt64 => {
                ScalarValue::UInt(raw)
            }
            _ => ScalarValue::Int(((raw << shift) as i64) >> shift),
        };
        Ok(Scalar {
            eltype: ElementType::Num(t),
            value,
        })
    }

    /// The value as JSON.jl 0.21 prints it (floats as Julia's `print`: the shortest text that reads
    /// back to the same bits, see [`julia_float`]; non-finite as `null`).
    pub fn value_json(&self) -> String {
        match (&self.value, self.eltype) {
            (ScalarValue::Bool(b), _) => b.to_string(),
            (ScalarValue::Int(n), _) => n.to_string(),
            (ScalarValue::UInt(n), _) => n.to_string(),
            (ScalarValue::Float(f), _) if !f.is_finite() => "null".to_string(),
            (ScalarValue::Float(f), ElementType::Num(NumType::Float32)) => {
                julia_float(&format!("{:e}", *f as f32))
            }
            (ScalarValue::Float(f), _) => julia_float(&format!("{f:e}")),
            (ScalarValue::String(s), _) => quote(s),
        }
    }

    /// The FilesDaf file: `{"value":V,"type":"T"}\n` (seed key order).
    pub fn files_json(&self) -> String {
        format!(
            "{{\"value\":{},\"type\":\"{}\"}}\n",
            self.value_json(),
            self.eltype.julia_name()
        )
    }

    /// The FilesDaf 1.1 file: `{"type":"T","value":V}\n` (JSON.jl 1.6+ key order).
    pub fn files_json_1_1(&self) -> String {
        format!(
            "{{\"type\":\"{}\",\"value\":{}}}\n",
            self.eltype.julia_name(),
            self.value_json()
        )
    }

    /// The one-element Zarr chunk: little-endian bytes, or a one-item vlen-utf8 buffer.
    pub fn zarr_chunk(&self) -> Vec<u8> {
        let size = match self.eltype {
            ElementType::Num(t) => t.size() as usize,
            ElementType::String => 0,
        };
        match (&self.value, self.eltype) {
            (ScalarValue::String(s), _) => encode_vlen([s.as_bytes()].into_iter(), 1),
            (ScalarValue::Bool(b), _) => vec![u8::from(*b)],
            (ScalarValue::Int(n), _) => n.to_le_bytes()[..size].to_vec(),
            (ScalarValue::UInt(n), _) => n.to_le_bytes()[..size].to_vec(),
            (ScalarValue::Float(f), ElementType::Num(NumType::Float32)) => {
                (*f as f32).to_le_bytes().to_vec()
            }
            (ScalarValue::Float(f), _) => f.to_le_bytes().to_vec(),
        }
    }
}

/// A finite float as Julia's `print` writes it (Base.Ryu `writeshortest`), from Rust's shortest
/// round-trip digits in `{:e}` form (`-1.2345e-7`, `1e23`, `0e0`): plain decimal with at least
/// one fractional digit when the decimal point falls within `(-4, 6]` digits of the first digit
/// (`0.0001`, `123456.0`), otherwise `d.ddde±x` with no `+` and no padding (`1.0e6`, `1.0e-5`,
/// `1.0e23`). The digits are Rust's, so the text parses back to the same bits.
pub fn julia_float(sci: &str) -> String {
    let (sign, rest) = match sci.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", sci),
    };
    let (mantissa, exp) = rest.split_once('e').unwrap_or((rest, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let olength = digits.len() as i64;
    // The decimal point sits after `point` digits (Ryu's `pt`).
    let point = exp + 1;
    let body = if -4 < point && point <= 6 {
        if point <= 0 {
            format!("0.{}{digits}", "0".repeat(point.unsigned_abs() as usize))
        } else if point >= olength {
            format!("{digits}{}.0", "0".repeat((point - olength) as usize))
        } else {
            let (int, frac) = digits.split_at(point as usize);
            format!("{int}.{frac}")
        }
    } else {
        let (first, tail) = digits.split_at(digits.len().min(1));
        let tail = if tail.is_empty() { "0" } else { tail };
        format!("{first}.{tail}e{exp}")
    };
    format!("{sign}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_scalar_files_round_trip_byte_for_byte() {
        for text in [
            "{\"value\":2.5,\"type\":\"Float64\"}\n",
            "{\"value\":\"hello\",\"type\":\"String\"}\n",
            "{\"value\":100,\"type\":\"Int64\"}\n",
            "{\"value\":true,\"type\":\"Bool\"}\n",
            "{\"value\":18446744073709551615,\"type\":\"UInt64\"}\n",
            "{\"value\":-9223372036854775808,\"type\":\"Int64\"}\n",
            "{\"value\":0.1,\"type\":\"Float32\"}\n",
            "{\"value\":1.0e20,\"type\":\"Float64\"}\n",
        ] {
            let scalar = Scalar::from_json(text.as_bytes()).unwrap();
            assert_eq!(scalar.files_json(), text);
        }
    }

    #[test]
    fn accepts_1_1_key_order_and_julia_conversions() {
        let s = Scalar::from_json(br#"{"type":"float64","value":3}"#).unwrap();
        assert_eq!(s.files_json(), "{\"value\":3.0,\"type\":\"Float64\"}\n");
        let b = Scalar::from_json(br#"{"type":"Bool","value":1}"#).unwrap();
        assert_eq!(b.value, ScalarValue::Bool(true));
        assert!(Scalar::from_json(br#"{"type":"UInt8","value":256}"#).is_err());
        assert!(Scalar::from_json(br#"{"type":"Int8","value":-129}"#).is_err());
        assert!(Scalar::from_json(br#"{"type":"String","value":3}"#).is_err());
    }

    #[test]
    fn zarr_chunks_match_the_fixture_and_read_back() {
        let ratio = Scalar::from_json(br#"{"value":2.5,"type":"Float64"}"#).unwrap();
        assert_eq!(ratio.zarr_chunk(), [0, 0, 0, 0, 0, 0, 4, 0x40]);
        let title = Scalar::from_json(br#"{"value":"hello","type":"String"}"#).unwrap();
        assert_eq!(title.zarr_chunk(), b"\x01\x00\x00\x00\x05\x00\x00\x00hello");
        let small = Scalar::from_json(br#"{"value":-2,"type":"Int16"}"#).unwrap();
        assert_eq!(
            Scalar::from_le_bytes(NumType::Int16, &small.zarr_chunk()).unwrap(),
            small
        );
        let f = Scalar::from_json(br#"{"value":0.1,"type":"Float32"}"#).unwrap();
        assert_eq!(
            Scalar::from_le_bytes(NumType::Float32, &f.zarr_chunk())
                .unwrap()
                .files_json(),
            f.files_json()
        );
    }

    #[test]
    fn floats_print_as_julia_does() {
        for (value, text) in [
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (2.5, "2.5"),
            (100.0, "100.0"),
            (123456.0, "123456.0"),
            (1e6, "1.0e6"),
            (1234567.0, "1.234567e6"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (1e-5, "1.0e-5"),
            (1e23, "1.0e23"),
            (1.0e20, "1.0e20"),
            (-24.584467509646366, "-24.584467509646366"),
            (-1.2345678901234568e-300, "-1.2345678901234568e-300"),
            (5e-324, "5.0e-324"),
            (f64::MAX, "1.7976931348623157e308"),
        ] {
            assert_eq!(julia_float(&format!("{value:e}")), text, "{value:e}");
        }
        assert_eq!(julia_float(&format!("{:e}", 0.1f32)), "0.1");
        assert_eq!(julia_float(&format!("{:e}", 16777216f32)), "1.6777216e7");
    }

    #[test]
    fn float_scalars_read_back_to_the_same_bits() {
        // serde_json's default parser is off by an ULP on these (issue 9).
        for text in [
            "-1.2345678901234568e-300",
            "-24.584467509646366",
            "1e+23",
            "2.2250738585072011e-308",
        ] {
            let file = format!("{{\"value\":{text},\"type\":\"Float64\"}}");
            let s = Scalar::from_json(file.as_bytes()).unwrap();
            let expected: f64 = text.parse().unwrap();
            assert_eq!(s.value, ScalarValue::Float(expected), "{text}");
            assert_eq!(s.zarr_chunk(), expected.to_le_bytes(), "{text}");
        }
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..50_000 {
            let bits = next();
            let f = f64::from_bits(bits);
            let g = f32::from_bits(bits as u32);
            if f.is_finite() {
                let s = Scalar {
                    eltype: ElementType::Num(NumType::Float64),
                    value: ScalarValue::Float(f),
                };
                let back = Scalar::from_json(s.files_json().as_bytes()).unwrap();
                assert_eq!(back.zarr_chunk(), bits.to_le_bytes(), "{}", s.files_json());
            }
            if g.is_finite() {
                let s = Scalar {
                    eltype: ElementType::Num(NumType::Float32),
                    value: ScalarValue::Float(f64::from(g)),
                };
                let back = Scalar::from_json(s.files_json_1_1().as_bytes()).unwrap();
                assert_eq!(back.zarr_chunk(), g.to_le_bytes(), "{}", s.files_json());
                // Julia reads a Float32 scalar through Float64 (`convert(Float32, ::Float64)`):
                // the text written must survive that double rounding too.
                let via_f64 = s.value_json().parse::<f64>().unwrap() as f32;
                assert_eq!(via_f64.to_bits(), g.to_bits(), "{}", s.value_json());
            }
        }
    }

    #[test]
    fn json_numbers_elsewhere_are_correctly_rounded() {
        // Fill values and other JSON numbers go through serde_json's Value: `float_roundtrip`.
        for text in ["-1.2345678901234568e-300", "-24.584467509646366"] {
            let v: Value = serde_json::from_str(text).unwrap();
            let s = Scalar::from_value(ElementType::Num(NumType::Float64), &v).unwrap();
            assert_eq!(s.value, ScalarValue::Float(text.parse().unwrap()), "{text}");
        }
        let v: Value = serde_json::from_str("0.10000000149011612").unwrap();
        let s = Scalar::from_value(ElementType::Num(NumType::Float32), &v).unwrap();
        assert_eq!(s.zarr_chunk(), 0.1f32.to_le_bytes());
    }
}
