//! Frame bytes (spec text 000 "Frame bytes", DIGEST §4): one frame — a
//! system, a trajectory update, the index, the force field — as one value
//! whose numeric buffers a reader can view in place.
//!
//! ```text
//! value   := "MRF1" | u32 LE header_length | header (UTF-8 JSON)
//!            | zero padding to a multiple of 8 (from the start of value) | payload
//! ```
//!
//! Every numeric column is one C-order little-endian buffer at an 8-aligned
//! offset into the payload; the encoder pads every buffer to a multiple of 8
//! so the next offset stays aligned. String columns live in the header.
//!
//! [`decode`] checks everything a reader must refuse (each refusal names its
//! clause) and borrows the buffers from the value; [`ColumnRef::to_column`]
//! copies a column out, [`ColumnRef::f64_view`] / [`ColumnRef::u64_view`]
//! view it in place when the real address allows.
//!
//! Duplicate keys: a repeated key of the header's own objects (a header,
//! block or column entry field), a repeated block name and a repeated column
//! name are refused ([`Clause::FrameHeaderJson`]); inside the free-form
//! documents (`meta`, `attributes`, `targets`, `meta_types`) the last
//! occurrence wins, as `serde_json`'s map does.

use crate::clause::Clause;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::model::{Block, Cell, Column, ColumnData, Document};
use crate::typed_json::{self, MetaTag, EXACT_INTEGER_LIMIT};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// The four bytes every frame value starts with.
pub const MAGIC: [u8; 4] = *b"MRF1";

/// Largest header accepted, in bytes: 64 MiB.
///
/// The bound keeps a hostile `header_length` from making a reader allocate or
/// parse a large amount of memory: real headers are a few KiB, but string
/// columns live in the header, so a big topology (names, elements, residue
/// names of a large system) can need a few MiB. A value whose header would be
/// larger is refused with [`Clause::FrameHeaderBounds`].
pub const MAX_HEADER_LEN: u32 = 64 << 20;

/// Refuses an encoded value (one [`encode`] wrote) whose header is longer
/// than [`MAX_HEADER_LEN`]: the writer's side of the bound, so that it
/// never commits a value that [`decode`] then refuses.
pub(crate) fn check_written_header(value: &[u8]) -> Result<()> {
    let header_len = value
        .get(4..8)
        .map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if header_len > MAX_HEADER_LEN {
        return Err(Error::refused(
            Clause::FrameHeaderBounds,
            "header",
            format!(
                "the header would be {header_len} bytes, over the limit of {MAX_HEADER_LEN} \
                 that readers hold (string columns and meta documents live in the header)"
            ),
        ));
    }
    Ok(())
}

/// The non-block parts of a frame header.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FrameInfo {
    /// The frame's meta document, values in typed JSON (written as given).
    pub meta: Document,
    /// Tags of the meta keys (system frames); `None` on trajectory updates
    /// and the force field.
    pub meta_types: Option<BTreeMap<String, MetaTag>>,
    /// The step number (trajectory updates).
    pub step: Option<i64>,
    /// The time (trajectory updates, when the trajectory has times).
    pub time: Option<f64>,
    /// The cell (`box`), where it is set or changes.
    pub cell: Option<Box<Cell>>,
}

/// A decoded frame borrowing its buffers from the value.
#[derive(Clone, Debug, PartialEq)]
pub struct FrameRef<'a> {
    /// Blocks by name.
    pub blocks: BTreeMap<String, BlockRef<'a>>,
    /// Meta, meta types, step, time and cell.
    pub info: FrameInfo,
}

/// A decoded block.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockRef<'a> {
    /// Rows.
    pub count: u64,
    /// Optional structural shape (not checked against `count` here).
    pub structural_shape: Option<Vec<u64>>,
    /// Row-reference targets: column -> target.
    pub targets: BTreeMap<String, String>,
    /// The block's own attributes.
    pub attributes: Document,
    /// Columns by name.
    pub columns: BTreeMap<String, ColumnRef<'a>>,
}

/// A decoded column: its buffers are slices of the value.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnRef<'a> {
    /// Dtype, one of the 13.
    pub dtype: DType,
    /// Full shape; `shape[0]` is the block's count.
    pub shape: Vec<u64>,
    /// Declared precision, when the header carries one.
    pub precision: Option<f64>,
    /// The raw mask, `shape[0]` bytes of 0 / 1, when the header has `validity`.
    pub validity: Option<&'a [u8]>,
    /// The values.
    pub data: ColumnBytes<'a>,
}

/// Where a column's values are.
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnBytes<'a> {
    /// A numeric buffer: `prod(shape) * itemsize` little-endian bytes.
    Buffer(&'a [u8]),
    /// A string column's values, flat and row-major, from the header.
    Strings(Vec<String>),
}

mod columns;
mod decode;
mod encode;
mod scan;
mod update;

// The sections share their helpers through this module (each is `use
// super::*`); a glob re-exports each item at its own visibility, so the
// crate sees what it saw when this was one file.
pub(crate) use columns::*;
pub use decode::*;
pub use encode::*;
use scan::*;
pub use update::*;

#[cfg(test)]
mod tests {
    use super::*;

    /// SplitMix64: a seeded stream for the generated cases.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }
    }

    /// What `serde_json` (with `float_roundtrip`) makes of `text`.
    fn serde(text: &str) -> Option<Value> {
        match serde_json::from_str::<Value>(text) {
            Ok(v @ Value::Number(_)) => Some(v),
            _ => None,
        }
    }

    fn same(text: &str) {
        let mut at = 0;
        let fast = json_number(text.as_bytes(), &mut at);
        let Some(fast) = fast else {
            return;
        };
        assert_eq!(at, text.len(), "{text}");
        let want = serde(text).unwrap_or_else(|| panic!("{text}: serde refuses what is read"));
        match (&fast, &want) {
            (Value::Number(a), Value::Number(b)) if a.is_f64() || b.is_f64() => {
                let (a, b) = (a.as_f64().unwrap(), b.as_f64().unwrap());
                assert_eq!(a.to_bits(), b.to_bits(), "{text}: {a:e} vs {b:e}");
            }
            _ => assert_eq!(fast, want, "{text}"),
        }
    }

    /// Reals as the encoder writes them (shortest round trip) and as other
    /// writers might (any number of digits, exponents), every one read as
    /// `serde_json` reads it, bit for bit.
    #[test]
    fn numbers_are_read_as_serde_json_reads_them() {
        let mut rng = Rng(7);
        for _ in 0..300_000 {
            let x = f64::from_bits(rng.next());
            if x.is_finite() {
                same(&serde_json::to_string(&x).unwrap());
            }
            let y = (rng.next() as i64 as f64) / 2f64.powi((rng.next() % 70) as i32);
            same(&serde_json::to_string(&y).unwrap());
        }
        for _ in 0..300_000 {
            let digits = 1 + rng.next() % 19;
            let mut mantissa = String::new();
            for i in 0..digits {
                let d = rng.next() % 10;
                mantissa.push(char::from(b'0' + if i == 0 { 1 + d % 9 } else { d } as u8));
            }
            let point = (rng.next() % (digits + 1)) as usize;
            let (int, frac) = mantissa.split_at(point);
            let int = if int.is_empty() { "0" } else { int };
            let sign = if rng.next().is_multiple_of(2) {
                "-"
            } else {
                ""
            };
            let text = if frac.is_empty() {
                format!("{sign}{int}.0")
            } else {
                format!("{sign}{int}.{frac}")
            };
            same(&text);
            let e = rng.next() % 50;
            same(&format!("{text}e-{e}"));
            same(&format!("{text}E+{e}"));
            same(&format!("{sign}{mantissa}e{}", rng.next() % 25));
        }
    }

    /// A plain document reads as `serde_json` reads it, or is left to it.
    #[test]
    fn plain_documents_are_read_as_serde_json_reads_them() {
        // Each text, and whether the one-pass reader answers it (record meta
        // documents of plain keys and values) or leaves it to serde_json (an
        // escape, nesting, arrays, other literals, anything serde_json
        // refuses). What it answers must be what serde_json reads.
        let texts = [
            (r#"{}"#, true),
            (r#" { "code" : "C9H12N2O-000042" } "#, true),
            (r#"{"a":1,"b":-2.5,"c":"x","a":3}"#, true),
            (r#"{"code":"x","n":1.5}"#, true),
            (
                r#"{"big":18446744073709551615,"neg":-9223372036854775808,"e":1e300}"#,
                false,
            ),
            (r#"{"ü":"é"}"#, true),
            (r#"{"esc":"a\"b"}"#, false),
            (r#"{"nested":{"a":1}}"#, false),
            (r#"{"list":[1,2]}"#, false),
            (r#"{"t":true,"n":null}"#, false),
            (r#"{"a":1}x"#, false),
            (r#"[1]"#, false),
            (r#"{"a":01}"#, false),
        ];
        for (text, one_pass) in texts {
            let doc = plain_document(text.as_bytes());
            assert_eq!(doc.is_some(), one_pass, "{text}");
            if let Some(doc) = doc {
                let serde = serde_json::from_str::<Value>(text).ok();
                assert_eq!(Some(Value::Object(doc)), serde, "{text}");
            }
        }
    }

    /// The step reader takes what `json_number` reads as an i64, and
    /// nothing else.
    #[test]
    fn steps_are_read_as_json_number_reads_them() {
        let mut rng = Rng(11);
        let mut texts: Vec<String> = [
            "0",
            "-0",
            "7",
            "-7",
            "01",
            "-01",
            "1.0",
            "1e3",
            "-",
            "",
            "+1",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775807",
            "-9223372036854775808",
            "18446744073709551616",
            "12a",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for _ in 0..50_000 {
            let n = rng.next() >> (rng.next() % 64);
            texts.push(if rng.next().is_multiple_of(2) {
                format!("{n}")
            } else {
                format!("-{n}")
            });
        }
        for text in texts {
            let mut at = 0;
            let fast = tail_step(text.as_bytes(), &mut at);
            let mut at2 = 0;
            let want = json_number(text.as_bytes(), &mut at2)
                .and_then(|v| v.as_i64().filter(|_| !text.contains(['.', 'e', 'E'])));
            assert_eq!(fast, want, "{text}");
            if fast.is_some() {
                assert_eq!(at, at2, "{text}");
            }
        }
    }

    #[test]
    fn eight_digits_reads_digits_and_only_digits() {
        assert_eq!(eight_digits(b"12345678"), Some(12_345_678));
        assert_eq!(eight_digits(b"00000000"), Some(0));
        assert_eq!(eight_digits(b"99999999"), Some(99_999_999));
        for bad in [
            *b"1234567/",
            *b"1234567:",
            *b"1.345678",
            *b"-2345678",
            *b"12345 78",
        ] {
            assert_eq!(eight_digits(&bad), None, "{:?}", std::str::from_utf8(&bad));
        }
        let mut rng = Rng(3);
        for _ in 0..100_000 {
            let n = rng.next() % 100_000_000;
            assert_eq!(eight_digits(format!("{n:08}").as_bytes()), Some(n));
            let mut b = *format!("{n:08}").as_bytes().first_chunk::<8>().unwrap();
            b[(rng.next() % 8) as usize] = (rng.next() % 256) as u8;
            let digits = b.iter().all(u8::is_ascii_digit);
            assert_eq!(eight_digits(&b).is_some(), digits, "{b:?}");
        }
    }

    /// Halfway cases: decimals exactly between two neighbouring doubles,
    /// and one unit beyond, which decide the rounding direction.
    #[test]
    fn ties_round_to_even() {
        for text in [
            "9007199254740993.0",
            "9007199254740995.0",
            "9007199254740993.000000001",
            "18014398509481986.0",
            "18014398509481990.0",
            "1.00000000000000011102230246251565404236316680908203125",
            "0.30000000000000001665",
            "1e-21",
            "9999999999999999999e-21",
            "1844674407370955161.5",
            "-0.0",
            "0.0",
            "123456789012345678e-3",
            "2.2250738585072014e-308",
            "1.7976931348623157e308",
        ] {
            same(text);
        }
    }
}
