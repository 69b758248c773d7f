//! The inner codec pipeline of a packed array (`daf-formats.md` §8): parsing a Zarr v3 inner
//! codec list (`transpose`, then `bytes` or `vlen-utf8`, then `zstd`/`gzip`/`blosc`/`crc32c`) and
//! decoding one inner chunk with it into Daf's own bytes (little-endian, C order of the inner
//! chunk shape; for strings, the chunk's vlen-utf8 items in C order).
//!
//! Decoding is bounded: every decompressor is cut off at the size the chunk must have, and a
//! chunk that decodes to any other size is an error, never a short or padded result.

use serde_json::Value;

use crate::formats::packed::index::ChunkCrc;
use crate::formats::scalar::Scalar;
use crate::formats::strings::decode_vlen;
use crate::formats::types::{ElementType, Endian, NumType};
use crate::formats::zarr::decode::Compressor;

/// What the array-to-bytes codec makes of the elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    /// `bytes`: fixed-size numbers in this byte order.
    Num(NumType, Endian),
    /// `vlen-utf8`: one vlen-utf8 buffer per chunk.
    Strings,
}

/// A bytes-to-bytes codec.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BytesCodec {
    Compress(Compressor),
    /// A CRC-32C of the rest, appended (4 bytes, little-endian).
    Crc32c,
}

/// A parsed inner codec pipeline.
#[derive(Clone, Debug)]
pub struct Pipeline {
    /// The array-to-bytes codec.
    pub element: Element,
    /// The `transpose` order (encoded axis `i` is chunk axis `order[i]`), if any.
    transpose: Option<Vec<usize>>,
    /// Bytes-to-bytes codecs, in encoding order.
    bytes_codecs: Vec<BytesCodec>,
}

fn name_of(codec: &Value) -> Result<&str, String> {
    codec
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("codec without a name: {codec}"))
}

fn config(codec: &Value) -> &Value {
    codec.get("configuration").unwrap_or(&Value::Null)
}

/// The transpose order of a `transpose` codec over `ndim` dimensions.
fn transpose_order(codec: &Value, ndim: usize) -> Result<Option<Vec<usize>>, String> {
    let order = match config(codec).get("order") {
        Some(Value::String(s)) if s == "C" => return Ok(None),
        Some(Value::String(s)) if s == "F" => (0..ndim).rev().collect(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_u64().map(|n| n as usize))
            .collect::<Option<Vec<_>>>()
            .ok_or("transpose order is not a list of dimensions")?,
        _ => return Err("transpose codec without an order".into()),
    };
    let mut seen = vec![false; ndim];
    if order.len() != ndim
        || order
            .iter()
            .any(|&d| d >= ndim || std::mem::replace(&mut seen[d], true))
    {
        return Err(format!(
            "transpose order {order:?} is not a permutation of {ndim} dimensions"
        ));
    }
    let identity = order.iter().enumerate().all(|(i, &d)| i == d);
    Ok((!identity).then_some(order))
}

impl Pipeline {
    /// Parses an inner codec list for chunks of `ndim` dimensions holding `eltype`. An unknown
    /// codec, or one in the wrong place, is an error naming it.
    pub fn parse(codecs: &Value, eltype: ElementType, ndim: usize) -> Result<Pipeline, String> {
        let list = codecs.as_array().ok_or("inner codecs are not a list")?;
        let mut transpose = None;
        let mut element = None;
        let mut bytes_codecs = Vec::new();
        for codec in list {
            let name = name_of(codec)?;
            match (name, element) {
                ("transpose", None) if transpose.is_none() => {
                    transpose = Some(transpose_order(codec, ndim)?);
                }
                ("bytes", None) => {
                    let ElementType::Num(t) = eltype else {
                        return Err("codec \"bytes\" on a string array".into());
                    };
                    let endian = match config(codec).get("endian").and_then(Value::as_str) {
                        None | Some("little") => Endian::Little,
                        Some("big") => Endian::Big,
                        Some(other) => return Err(format!("unknown endian \"{other}\"")),
                    };
                    element = Some(Element::Num(t, endian));
                }
                ("vlen-utf8", None) => {
                    if eltype != ElementType::String {
                        return Err("codec \"vlen-utf8\" on a numeric array".into());
                    }
                    element = Some(Element::Strings);
                }
                ("zstd", Some(_)) => bytes_codecs.push(BytesCodec::Compress(Compressor::Zstd)),
                ("gzip", Some(_)) => bytes_codecs.push(BytesCodec::Compress(Compressor::Gzip)),
                ("blosc", Some(_)) => bytes_codecs.push(BytesCodec::Compress(Compressor::Blosc)),
                ("crc32c", Some(_)) => bytes_codecs.push(BytesCodec::Crc32c),
                ("transpose" | "bytes" | "vlen-utf8" | "zstd" | "gzip" | "blosc" | "crc32c", _) => {
                    return Err(format!("codec \"{name}\" out of place in the inner codecs"))
                }
                (other, _) => return Err(format!("unsupported codec \"{other}\"")),
            }
        }
        let element = element.ok_or("inner codecs have no \"bytes\" or \"vlen-utf8\" codec")?;
        Ok(Pipeline {
            element,
            transpose: transpose.flatten(),
            bytes_codecs,
        })
    }

    /// Undoes the bytes-to-bytes codecs of one stored chunk: at most `limit` bytes come out,
    /// and they (or the stored bytes) must have the CRC-32 `crc` when one is recorded.
    fn unwrap_bytes(
        &self,
        raw: &[u8],
        limit: u64,
        crc: Option<ChunkCrc>,
    ) -> Result<Vec<u8>, String> {
        let mismatch = |what: &str| format!("{what} do not match the CRC-32 of their ZIP entry");
        if let Some(ChunkCrc::Stored(want)) = crc {
            if crc32fast::hash(raw) != want {
                return Err(mismatch("stored chunk bytes"));
            }
        }
        let decoded = self.unwrap_codecs(raw, limit)?;
        if let Some(ChunkCrc::Decoded(want)) = crc {
            if crc32fast::hash(&decoded) != want {
                return Err(mismatch("decoded chunk bytes"));
            }
        }
        Ok(decoded)
    }

    fn unwrap_codecs(&self, raw: &[u8], limit: u64) -> Result<Vec<u8>, String> {
        let mut data: Option<Vec<u8>> = None;
        for codec in self.bytes_codecs.iter().rev() {
            let input: &[u8] = data.as_deref().unwrap_or(raw);
            let output = match codec {
                BytesCodec::Compress(c) => c.decompress(input, limit)?,
                BytesCodec::Crc32c => {
                    let split = input
                        .len()
                        .checked_sub(4)
                        .ok_or("chunk shorter than its CRC-32C")?;
                    let (body, tail) = input.split_at(split);
                    let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
                    if crc32c::crc32c(body) != stored {
                        return Err("chunk CRC-32C mismatch".into());
                    }
                    body.to_vec()
                }
            };
            data = Some(output);
        }
        match data {
            Some(d) => Ok(d),
            None if raw.len() as u64 > limit => Err(format!("chunk has more than {limit} bytes")),
            None => Ok(raw.to_vec()),
        }
    }

    /// Decodes one numeric inner chunk of shape `inner` into its C-order little-endian bytes
    /// (exactly `product(inner) × size` of them), checking the CRC-32 `crc` if one is recorded.
    pub fn decode_numeric(
        &self,
        raw: &[u8],
        inner: &[u64],
        crc: Option<ChunkCrc>,
    ) -> Result<Vec<u8>, String> {
        let Element::Num(t, endian) = self.element else {
            return Err("not a numeric pipeline".into());
        };
        let size = t.size() as usize;
        let count: u64 = inner.iter().product();
        let expected = count * t.size();
        let mut data = self.unwrap_bytes(raw, expected, crc)?;
        if data.len() as u64 != expected {
            return Err(format!(
                "chunk decodes to {} bytes, {expected} expected",
                data.len()
            ));
        }
        if endian == Endian::Big {
            data.chunks_exact_mut(size).for_each(<[u8]>::reverse);
        }
        if let Some(order) = &self.transpose {
            let positions = encoded_positions(order, inner);
            let mut out = vec![0u8; data.len()];
            for (c, &e) in positions.iter().enumerate() {
                out[c * size..(c + 1) * size].copy_from_slice(&data[e * size..(e + 1) * size]);
            }
            data = out;
        }
        Ok(data)
    }

    /// Decodes one string inner chunk of shape `inner` (at most `limit` decoded bytes, CRC-32
    /// `crc` if one is recorded) and calls `each(position, item)` for its items in C order of
    /// the chunk; returns the decoded size.
    pub fn decode_strings(
        &self,
        raw: &[u8],
        inner: &[u64],
        limit: u64,
        crc: Option<ChunkCrc>,
        mut each: impl FnMut(usize, &[u8]),
    ) -> Result<u64, String> {
        if self.element != Element::Strings {
            return Err("not a string pipeline".into());
        }
        let count: u64 = inner.iter().product();
        let data = self.unwrap_bytes(raw, limit, crc)?;
        let items = decode_vlen(&data, count)?;
        match &self.transpose {
            None => items.iter().enumerate().for_each(|(i, item)| each(i, item)),
            Some(order) => {
                let positions = encoded_positions(order, inner);
                positions
                    .iter()
                    .enumerate()
                    .for_each(|(c, &e)| each(c, items[e]));
            }
        }
        Ok(data.len() as u64)
    }
}

/// For every element of a chunk of shape `inner`, in C order, its position in the encoded
/// (transposed by `order`) chunk.
fn encoded_positions(order: &[usize], inner: &[u64]) -> Vec<usize> {
    let ndim = inner.len();
    let encoded_shape: Vec<u64> = order.iter().map(|&d| inner[d]).collect();
    // Stride, in the encoded chunk, of one step along each original axis.
    let mut encoded_stride = vec![0u64; ndim];
    let mut stride = 1u64;
    for i in (0..ndim).rev() {
        encoded_stride[order[i]] = stride;
        stride *= encoded_shape[i];
    }
    let count: u64 = inner.iter().product();
    let mut coords = vec![0u64; ndim];
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let at: u64 = coords.iter().zip(&encoded_stride).map(|(c, s)| c * s).sum();
        out.push(at as usize);
        for d in (0..ndim).rev() {
            coords[d] += 1;
            if coords[d] < inner[d] {
                break;
            }
            coords[d] = 0;
        }
    }
    out
}

/// One element of a Zarr v3 `fill_value` for `t`, little-endian.
pub fn fill_bytes(fill: &Value, t: NumType) -> Result<Vec<u8>, String> {
    let float = |f: f64| match t {
        NumType::Float32 => (f as f32).to_le_bytes().to_vec(),
        _ => f.to_le_bytes().to_vec(),
    };
    Ok(match fill {
        Value::Null => vec![0; t.size() as usize],
        Value::Bool(b) if t == NumType::Bool => vec![u8::from(*b)],
        Value::String(s) => match s.as_str() {
            "NaN" => float(f64::NAN),
            "Infinity" => float(f64::INFINITY),
            "-Infinity" => float(f64::NEG_INFINITY),
            hex if hex.starts_with("0x") && matches!(t, NumType::Float32 | NumType::Float64) => {
                let bits = u64::from_str_radix(&hex[2..], 16)
                    .map_err(|_| format!("bad fill_value \"{hex}\""))?;
                match t {
                    NumType::Float32 => (bits as u32).to_le_bytes().to_vec(),
                    _ => bits.to_le_bytes().to_vec(),
                }
            }
            other => return Err(format!("unsupported fill_value \"{other}\"")),
        },
        Value::Number(n) if t == NumType::Bool => match n.as_u64() {
            Some(v @ (0 | 1)) => vec![v as u8],
            _ => return Err(format!("bad Bool fill_value {n}")),
        },
        Value::Number(_) => Scalar::from_value(ElementType::Num(t), fill)
            .map_err(|e| e.to_string())?
            .zarr_chunk(),
        other => return Err(format!("unsupported fill_value {other}")),
    })
}

/// The default fill value of `eltype` as DataAxesFormats writes it in `zarr.json`.
pub fn default_fill(eltype: ElementType) -> Value {
    match eltype {
        ElementType::String => Value::String(String::new()),
        ElementType::Num(NumType::Bool) => Value::Bool(false),
        ElementType::Num(NumType::Float32 | NumType::Float64) => serde_json::json!(0.0),
        ElementType::Num(_) => serde_json::json!(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_and_misplaced_codecs_are_named() {
        let f64t = ElementType::Num(NumType::Float64);
        let e = Pipeline::parse(&json!([{"name":"bytes"},{"name":"lzma"}]), f64t, 1).unwrap_err();
        assert!(e.contains("\"lzma\""), "{e}");
        let e = Pipeline::parse(&json!([{"name":"zstd"},{"name":"bytes"}]), f64t, 1).unwrap_err();
        assert!(e.contains("\"zstd\""), "{e}");
        let e = Pipeline::parse(&json!([{"name":"vlen-utf8"}]), f64t, 1).unwrap_err();
        assert!(e.contains("vlen-utf8"), "{e}");
        assert!(Pipeline::parse(&json!([{"name":"zstd"}]), f64t, 1).is_err());
    }

    #[test]
    fn transpose_and_big_endian_are_undone() {
        // A 2×3 chunk of u16 [[1,2,3],[4,5,6]], stored transposed (3×2: 1,4,2,5,3,6), big-endian.
        let codecs = json!([
            {"name":"transpose","configuration":{"order":[1,0]}},
            {"name":"bytes","configuration":{"endian":"big"}},
            {"name":"crc32c"}
        ]);
        let p = Pipeline::parse(&codecs, ElementType::Num(NumType::UInt16), 2).unwrap();
        let mut raw: Vec<u8> = [1u16, 4, 2, 5, 3, 6]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let crc = crc32c::crc32c(&raw);
        raw.extend_from_slice(&crc.to_le_bytes());
        let out = p.decode_numeric(&raw, &[2, 3], None).unwrap();
        let want: Vec<u8> = (1u16..=6).flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(out, want);
        // A flipped bit fails the CRC-32C.
        raw[0] ^= 1;
        assert!(p
            .decode_numeric(&raw, &[2, 3], None)
            .unwrap_err()
            .contains("CRC-32C"));
    }

    #[test]
    fn a_chunk_of_the_wrong_size_is_refused() {
        let p = Pipeline::parse(
            &json!([{"name":"bytes","configuration":{"endian":"little"}}]),
            ElementType::Num(NumType::Int32),
            1,
        )
        .unwrap();
        assert!(p.decode_numeric(&[0; 12], &[4], None).is_err());
        assert!(p.decode_numeric(&[0; 20], &[4], None).is_err());
        assert_eq!(p.decode_numeric(&[7; 16], &[4], None).unwrap(), vec![7; 16]);
    }

    #[test]
    fn fill_values_of_every_form() {
        assert_eq!(fill_bytes(&json!(7), NumType::Int16).unwrap(), vec![7, 0]);
        assert_eq!(fill_bytes(&json!(true), NumType::Bool).unwrap(), vec![1]);
        assert_eq!(
            fill_bytes(&json!("NaN"), NumType::Float64).unwrap(),
            f64::NAN.to_le_bytes().to_vec()
        );
        assert_eq!(
            fill_bytes(&json!("0x3ff0000000000000"), NumType::Float64).unwrap(),
            1.0f64.to_le_bytes().to_vec()
        );
        assert_eq!(
            fill_bytes(&json!(1.5), NumType::Float32).unwrap(),
            1.5f32.to_le_bytes().to_vec()
        );
    }
}
