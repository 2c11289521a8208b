//! The closed set of 13 column dtypes (DIGEST §5).

use std::fmt;

/// A column dtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// 64-bit float.
    F64,
    /// Signed integers.
    I8,
    /// 16-bit signed.
    I16,
    /// 32-bit signed.
    I32,
    /// 64-bit signed.
    I64,
    /// Unsigned integers.
    U8,
    /// 16-bit unsigned.
    U16,
    /// 32-bit unsigned.
    U32,
    /// 64-bit unsigned.
    U64,
    /// One byte, 0 or 1.
    Bool,
    /// UTF-8 strings, carried in the header, no buffer.
    String,
    /// Complex of two f32.
    C64,
    /// Complex of two f64.
    C128,
}

impl DType {
    /// All 13, in spec order.
    pub const ALL: [DType; 13] = [
        DType::F64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::Bool,
        DType::String,
        DType::C64,
        DType::C128,
    ];

    /// The name used in headers and model JSON.
    pub fn name(self) -> &'static str {
        match self {
            DType::F64 => "f64",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::Bool => "bool",
            DType::String => "string",
            DType::C64 => "c64",
            DType::C128 => "c128",
        }
    }

    /// Parses a dtype name; `f32`, `float`, `json`, ... are not dtypes.
    pub fn parse(name: &str) -> Option<DType> {
        // A match, not a search of `ALL`: every frame header names dtypes.
        Some(match name {
            "f64" => DType::F64,
            "i8" => DType::I8,
            "i16" => DType::I16,
            "i32" => DType::I32,
            "i64" => DType::I64,
            "u8" => DType::U8,
            "u16" => DType::U16,
            "u32" => DType::U32,
            "u64" => DType::U64,
            "bool" => DType::Bool,
            "string" => DType::String,
            "c64" => DType::C64,
            "c128" => DType::C128,
            _ => return None,
        })
    }

    /// Bytes per element in a buffer; `None` for strings (no buffer).
    pub fn item_size(self) -> Option<usize> {
        Some(match self {
            DType::I8 | DType::U8 | DType::Bool => 1,
            DType::I16 | DType::U16 => 2,
            DType::I32 | DType::U32 => 4,
            DType::F64 | DType::I64 | DType::U64 | DType::C64 => 8,
            DType::C128 => 16,
            DType::String => return None,
        })
    }

    /// The dtype a canonical column key must have wherever it appears.
    pub fn canonical_for(column: &str) -> Option<DType> {
        Some(match column {
            "x" | "y" | "z" | "vx" | "vy" | "vz" | "fx" | "fy" | "fz" | "charge" | "mass" => {
                DType::F64
            }
            "id" | "atomic_number" | "type_id" | "mol_id" | "res_id" | "atom_map" | "atomi"
            | "atomj" | "atomk" | "atoml" | "bond_type" | "bond_number" => DType::U64,
            "formal_charge" => DType::I64,
            "element" | "type" | "name" | "res_name" | "bead_type" => DType::String,
            _ => return None,
        })
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_is_the_inverse_of_name() {
        for d in DType::ALL {
            assert_eq!(DType::parse(d.name()), Some(d));
        }
        for other in ["f32", "float", "json", "F64", "", "u64 "] {
            assert_eq!(DType::parse(other), None);
        }
    }
}
