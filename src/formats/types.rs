//! Daf element types and their names in every layout (`daf-formats.md` §1).

/// A numeric (or Bool) element type: what `.data`, `.nzind`, `.nzval`, ... hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NumType {
    /// `Bool`, one byte 0/1.
    Bool,
    /// `Int8`.
    Int8,
    /// `Int16`.
    Int16,
    /// `Int32`.
    Int32,
    /// `Int64`.
    Int64,
    /// `UInt8`.
    UInt8,
    /// `UInt16`.
    UInt16,
    /// `UInt32`.
    UInt32,
    /// `UInt64`.
    UInt64,
    /// `Float32`.
    Float32,
    /// `Float64`.
    Float64,
}

/// Byte order of a foreign Zarr dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endian {
    /// Little-endian (or a one-byte type): Daf's own order.
    Little,
    /// Big-endian: must be swapped before it can be shown.
    Big,
}

const ALL: [NumType; 11] = [
    NumType::Bool,
    NumType::Int8,
    NumType::Int16,
    NumType::Int32,
    NumType::Int64,
    NumType::UInt8,
    NumType::UInt16,
    NumType::UInt32,
    NumType::UInt64,
    NumType::Float32,
    NumType::Float64,
];

impl NumType {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            NumType::Bool | NumType::Int8 | NumType::UInt8 => 1,
            NumType::Int16 | NumType::UInt16 => 2,
            NumType::Int32 | NumType::UInt32 | NumType::Float32 => 4,
            NumType::Int64 | NumType::UInt64 | NumType::Float64 => 8,
        }
    }

    /// Julia's name, as FilesDaf writes it (`Float64`, `Bool`, ...).
    pub fn julia_name(self) -> &'static str {
        match self {
            NumType::Bool => "Bool",
            NumType::Int8 => "Int8",
            NumType::Int16 => "Int16",
            NumType::Int32 => "Int32",
            NumType::Int64 => "Int64",
            NumType::UInt8 => "UInt8",
            NumType::UInt16 => "UInt16",
            NumType::UInt32 => "UInt32",
            NumType::UInt64 => "UInt64",
            NumType::Float32 => "Float32",
            NumType::Float64 => "Float64",
        }
    }

    /// Parses a FilesDaf type name: Julia's names, their lower-case forms, and `int`/`Int`
    /// (= Int64), as upstream's `DTYPE_BY_NAME` accepts them.
    pub fn from_julia_name(name: &str) -> Option<NumType> {
        if name == "int" || name == "Int" {
            return Some(NumType::Int64);
        }
        ALL.into_iter()
            .find(|t| t.julia_name() == name || t.julia_name().to_lowercase() == name)
    }

    /// The Zarr v2 dtype Daf writes (`<f8`, `|b1`, ...).
    pub fn zarr_dtype(self) -> &'static str {
        match self {
            NumType::Bool => "|b1",
            NumType::Int8 => "|i1",
            NumType::Int16 => "<i2",
            NumType::Int32 => "<i4",
            NumType::Int64 => "<i8",
            NumType::UInt8 => "|u1",
            NumType::UInt16 => "<u2",
            NumType::UInt32 => "<u4",
            NumType::UInt64 => "<u8",
            NumType::Float32 => "<f4",
            NumType::Float64 => "<f8",
        }
    }

    /// Parses a Zarr v2 numeric dtype with any byte-order mark (`<`, `>`, `|`, `=`).
    pub fn from_zarr_dtype(dtype: &str) -> Option<(NumType, Endian)> {
        let mut chars = dtype.chars();
        let order = chars.next()?;
        let rest: String = chars.collect();
        let numtype = match rest.as_str() {
            "b1" => NumType::Bool,
            "i1" => NumType::Int8,
            "i2" => NumType::Int16,
            "i4" => NumType::Int32,
            "i8" => NumType::Int64,
            "u1" => NumType::UInt8,
            "u2" => NumType::UInt16,
            "u4" => NumType::UInt32,
            "u8" => NumType::UInt64,
            "f4" => NumType::Float32,
            "f8" => NumType::Float64,
            _ => return None,
        };
        let endian = match order {
            '<' | '|' | '=' => Endian::Little,
            '>' if numtype.size() == 1 => Endian::Little,
            '>' => Endian::Big,
            _ => return None,
        };
        Some((numtype, endian))
    }

    /// Whether this is an integer type (usable as a sparse index type).
    pub fn is_integer(self) -> bool {
        !matches!(self, NumType::Bool | NumType::Float32 | NumType::Float64)
    }

    /// Reads element `index` of a little-endian array of this (integer) type as a `u64`;
    /// `None` if out of range or negative.
    pub fn read_index(self, data: &[u8], index: usize) -> Option<u64> {
        let size = self.size() as usize;
        let bytes = data.get(index * size..index * size + size)?;
        let mut word = [0u8; 8];
        word[..size].copy_from_slice(bytes);
        let raw = u64::from_le_bytes(word);
        let signed = |bits: u32| {
            let shift = 64 - bits;
            let value = ((raw << shift) as i64) >> shift;
            u64::try_from(value).ok()
        };
        match self {
            NumType::Int8 => signed(8),
            NumType::Int16 => signed(16),
            NumType::Int32 => signed(32),
            NumType::Int64 => signed(64),
            NumType::UInt8 | NumType::UInt16 | NumType::UInt32 | NumType::UInt64 => Some(raw),
            NumType::Bool | NumType::Float32 | NumType::Float64 => None,
        }
    }
}

/// The element type of any property: numeric or String.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElementType {
    /// Numbers or Bools.
    Num(NumType),
    /// UTF-8 strings.
    String,
}

impl ElementType {
    /// Parses a FilesDaf `type`/`eltype` name (`String`/`string` or a numeric name).
    pub fn from_julia_name(name: &str) -> Option<ElementType> {
        match name {
            "String" | "string" => Some(ElementType::String),
            _ => NumType::from_julia_name(name).map(ElementType::Num),
        }
    }

    /// Julia's name.
    pub fn julia_name(self) -> &'static str {
        match self {
            ElementType::Num(t) => t.julia_name(),
            ElementType::String => "String",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_accept_upstream_aliases() {
        for t in ALL {
            assert_eq!(NumType::from_julia_name(t.julia_name()), Some(t));
            assert_eq!(
                NumType::from_zarr_dtype(t.zarr_dtype()),
                Some((t, Endian::Little))
            );
        }
        assert_eq!(NumType::from_julia_name("float32"), Some(NumType::Float32));
        assert_eq!(NumType::from_julia_name("int"), Some(NumType::Int64));
        assert_eq!(NumType::from_julia_name("Float16"), None);
        assert_eq!(
            NumType::from_zarr_dtype(">f8"),
            Some((NumType::Float64, Endian::Big))
        );
        assert_eq!(
            NumType::from_zarr_dtype("<u1"),
            Some((NumType::UInt8, Endian::Little))
        );
        assert_eq!(NumType::from_zarr_dtype("<U5"), None);
        assert_eq!(
            ElementType::from_julia_name("string"),
            Some(ElementType::String)
        );
    }

    #[test]
    fn index_reads_reject_negative_values() {
        let data = [0xFFu8, 0xFF, 2, 0];
        assert_eq!(NumType::Int16.read_index(&data, 0), None);
        assert_eq!(NumType::UInt16.read_index(&data, 0), Some(65535));
        assert_eq!(NumType::Int16.read_index(&data, 1), Some(2));
        assert_eq!(NumType::Int16.read_index(&data, 2), None);
    }
}
