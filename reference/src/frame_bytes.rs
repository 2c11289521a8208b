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

// ---------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------

/// Appends the encoding of one frame to `out` (cleared first).
///
/// `with_precision`: write each column's `precision` key (system, index
/// frames), else omit it (trajectory updates, the force field).
///
/// The encoder trusts its input to be validated: each column's values hold
/// `prod(shape)` elements and its mask `shape[0]` entries; meta values are
/// already canonical typed JSON. An all-true mask is not written (it is the
/// same value as no mask). An undefined cell is written with identity vectors
/// and an all-false boundary (DIGEST §8).
///
/// The header is written by hand, byte for byte what `serde_json` writes
/// for it ([`encode_reference`], the serde encoder, is kept to prove it).
///
/// A header above [`MAX_HEADER_LEN`] is written but [`decode`] refuses it
/// (the writer refuses such a frame instead of committing it); one past
/// `u32::MAX` bytes has `u32::MAX` as its length, refused alike.
pub fn encode(
    blocks: &BTreeMap<String, Block>,
    info: &FrameInfo,
    with_precision: bool,
    out: &mut Vec<u8>,
) {
    out.clear();
    encode_append(
        blocks.iter().map(|(name, block)| (name.as_str(), block)),
        info,
        with_precision,
        out,
    );
}

/// Appends the encoding of one frame after what `out` already holds, so a
/// writer can encode straight into its batch buffer: the value is
/// `out[start..]` with `start` the length on entry, and its padding counts
/// from `start`, so these are the bytes [`encode`] writes.
///
/// `blocks` must yield distinct names in ascending order (as a `BTreeMap`
/// iterates, possibly filtered); it is walked twice, header then payload.
///
/// Headers too long for readers are written as by [`encode`].
pub(crate) fn encode_append<'a, I>(
    blocks: I,
    info: &FrameInfo,
    with_precision: bool,
    out: &mut Vec<u8>,
) where
    I: Iterator<Item = (&'a str, &'a Block)> + Clone,
{
    encode_update(blocks, info, with_precision, None, out);
}

/// The `blocks` text of an encoded frame and the payload length it lays
/// out, which the next frame may reuse ([`encode_update`]).
#[derive(Debug, Default)]
pub(crate) struct BlocksText {
    text: Vec<u8>,
    payload_len: u64,
}

/// [`encode_append`], with the `blocks` text kept in `known` (when given)
/// for the next frame. `reuse`: the caller knows these blocks have the
/// layout of the frame `known` was kept from (the same names, counts,
/// structural shapes, targets, attributes, and per column the same name,
/// dtype, shape, written mask length and written precision, and no string
/// column): their text, byte for byte, is then copied instead of written.
/// Whether the text was kept is returned: not for blocks with a string
/// column, whose values are in the text.
pub(crate) fn encode_update<'a, I>(
    blocks: I,
    info: &FrameInfo,
    with_precision: bool,
    known: Option<(&mut BlocksText, bool)>,
    out: &mut Vec<u8>,
) -> bool
where
    I: Iterator<Item = (&'a str, &'a Block)> + Clone,
{
    let start = out.len();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(b"{\"blocks\":");
    let mut kept = false;
    let payload_len = match known {
        Some((known, true)) => {
            out.extend_from_slice(&known.text);
            kept = true;
            known.payload_len
        }
        Some((known, false)) => {
            let from = out.len();
            let payload_len = write_blocks(blocks.clone(), with_precision, out);
            let strings = blocks.clone().any(|(_, b)| {
                b.columns
                    .values()
                    .any(|c| matches!(c.data, ColumnData::String(_)))
            });
            known.text.clear();
            if !strings {
                known.text.extend_from_slice(&out[from..]);
                known.payload_len = payload_len;
                kept = true;
            }
            payload_len
        }
        None => write_blocks(blocks.clone(), with_precision, out),
    };
    write_header_tail(info, out);
    // A header past 4 GiB is recorded as u32::MAX: over MAX_HEADER_LEN, so
    // every reader (and the writer's check) refuses the value.
    let header_len = u32::try_from(out.len() - start - 8).unwrap_or(u32::MAX);
    out[start + 4..start + 8].copy_from_slice(&header_len.to_le_bytes());
    pad8(out, start);
    out.reserve(usize::try_from(payload_len).unwrap_or(0));
    for (_, block) in blocks {
        for column in block.columns.values() {
            write_buffer(&column.data, out, start);
            if let Some(mask) = column.written_mask() {
                put(out, start, mask, |b| [b as u8]);
            }
        }
    }
    kept
}

/// Zero bytes up to the next multiple of 8, counted from the value's `start`.
fn pad8(out: &mut Vec<u8>, start: usize) {
    let len = start + (out.len() - start).next_multiple_of(8);
    out.resize(len, 0);
}

/// Bytes of a numeric buffer (0 for strings: no buffer).
fn buffer_len(data: &ColumnData) -> u64 {
    (data.len() as u64).saturating_mul(data.dtype().item_size().unwrap_or(0) as u64)
}

/// Item types whose memory is exactly their bytes: no padding, every byte
/// initialized (the numeric column types, `bool` as one 0 / 1 byte, and
/// the complex pairs, re then im).
///
/// # Safety
///
/// An implementor must have no padding bytes and be `N` bytes for the `N`
/// that [`put`] is called with for it.
unsafe trait Plain: Copy {}

// SAFETY: primitive numbers and bools have no padding; arrays of them have
// none either.
unsafe impl Plain for f64 {}
// SAFETY: as above.
unsafe impl Plain for i8 {}
// SAFETY: as above.
unsafe impl Plain for i16 {}
// SAFETY: as above.
unsafe impl Plain for i32 {}
// SAFETY: as above.
unsafe impl Plain for i64 {}
// SAFETY: as above.
unsafe impl Plain for u8 {}
// SAFETY: as above.
unsafe impl Plain for u16 {}
// SAFETY: as above.
unsafe impl Plain for u32 {}
// SAFETY: as above.
unsafe impl Plain for u64 {}
// SAFETY: as above; a bool's one byte is 0 or 1, the byte the format wants.
unsafe impl Plain for bool {}
// SAFETY: as above.
unsafe impl Plain for [f32; 2] {}
// SAFETY: as above.
unsafe impl Plain for [f64; 2] {}

/// Appends `values` as `N`-byte little-endian items, then pads to 8 (from
/// `start`). On a little-endian target the items' memory already is that
/// encoding and is copied in one go (this is most of the encoder's work).
fn put<T: Plain, const N: usize>(
    out: &mut Vec<u8>,
    start: usize,
    values: &[T],
    bytes: impl Fn(T) -> [u8; N],
) {
    if cfg!(target_endian = "little") && std::mem::size_of::<T>() == N {
        // SAFETY: `T: Plain` has no padding, so the slice's memory is
        // `size_of_val(values)` initialized bytes, valid for reads while
        // `values` is borrowed; u8 has no alignment or validity demands.
        let raw = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        out.extend_from_slice(raw);
    } else {
        out.reserve(values.len() * N);
        for &v in values {
            out.extend_from_slice(&bytes(v));
        }
    }
    pad8(out, start);
}

fn write_buffer(data: &ColumnData, out: &mut Vec<u8>, start: usize) {
    match data {
        ColumnData::F64(v) => put(out, start, v, f64::to_le_bytes),
        ColumnData::I8(v) => put(out, start, v, i8::to_le_bytes),
        ColumnData::I16(v) => put(out, start, v, i16::to_le_bytes),
        ColumnData::I32(v) => put(out, start, v, i32::to_le_bytes),
        ColumnData::I64(v) => put(out, start, v, i64::to_le_bytes),
        ColumnData::U8(v) => put(out, start, v, u8::to_le_bytes),
        ColumnData::U16(v) => put(out, start, v, u16::to_le_bytes),
        ColumnData::U32(v) => put(out, start, v, u32::to_le_bytes),
        ColumnData::U64(v) => put(out, start, v, u64::to_le_bytes),
        ColumnData::Bool(v) => put(out, start, v, |b| [b as u8]),
        ColumnData::String(_) => {}
        ColumnData::C64(v) => put(out, start, v, |[re, im]: [f32; 2]| {
            let mut b = [0; 8];
            b[..4].copy_from_slice(&re.to_le_bytes());
            b[4..].copy_from_slice(&im.to_le_bytes());
            b
        }),
        ColumnData::C128(v) => put(out, start, v, |[re, im]: [f64; 2]| {
            let mut b = [0; 16];
            b[..8].copy_from_slice(&re.to_le_bytes());
            b[8..].copy_from_slice(&im.to_le_bytes());
            b
        }),
    }
}

/// Writes the header's `blocks` value (what `HeaderSer` serializes: the
/// same keys in the same order, compact) and returns the payload length. Offsets are handed
/// out in the order the payload is then written (blocks by name, columns by
/// name, each column's buffer then its mask).
fn write_blocks<'a>(
    blocks: impl Iterator<Item = (&'a str, &'a Block)>,
    with_precision: bool,
    out: &mut Vec<u8>,
) -> u64 {
    let mut next = 0u64;
    let mut alloc = |len: u64| {
        let at = next;
        next = at.saturating_add(len.saturating_add(7) & !7);
        at
    };
    json_list(out, b'{', b'}', blocks, |out, (name, block)| {
        json_str(out, name);
        out.extend_from_slice(b":{\"count\":");
        json_u64(out, block.count);
        out.extend_from_slice(b",\"structural_shape\":");
        match &block.structural_shape {
            Some(shape) => json_u64s(out, shape),
            None => out.extend_from_slice(b"null"),
        }
        out.extend_from_slice(b",\"columns\":");
        json_list(out, b'{', b'}', &block.columns, |out, (col, column)| {
            json_str(out, col);
            out.extend_from_slice(b":{\"dtype\":");
            json_str(out, column.dtype().name());
            out.extend_from_slice(b",\"shape\":");
            json_u64s(out, &column.shape);
            match &column.data {
                ColumnData::String(values) => {
                    out.extend_from_slice(b",\"values\":");
                    json_list(out, b'[', b']', values, |out, v| json_str(out, v));
                }
                data => {
                    out.extend_from_slice(b",\"offset\":");
                    json_u64(out, alloc(buffer_len(data)));
                }
            }
            if let Some(mask) = column.written_mask() {
                out.extend_from_slice(b",\"validity\":");
                json_u64(out, alloc(mask.len() as u64));
            }
            if let (true, Some(p)) = (with_precision, column.precision) {
                out.extend_from_slice(b",\"precision\":");
                json_f64(out, p);
            }
            out.push(b'}');
        });
        if !block.targets.is_empty() {
            out.extend_from_slice(b",\"targets\":");
            json_list(out, b'{', b'}', &block.targets, |out, (col, target)| {
                json_str(out, col);
                out.push(b':');
                json_str(out, target);
            });
        }
        if !block.attributes.is_empty() {
            out.extend_from_slice(b",\"attributes\":");
            json_object(out, &block.attributes);
        }
        out.push(b'}');
    });
    next
}

/// The header's members after `blocks`, and its closing brace.
fn write_header_tail(info: &FrameInfo, out: &mut Vec<u8>) {
    out.extend_from_slice(b",\"meta\":");
    json_object(out, &info.meta);
    if let Some(tags) = &info.meta_types {
        out.extend_from_slice(b",\"meta_types\":");
        json_list(out, b'{', b'}', tags, |out, (key, tag)| {
            json_str(out, key);
            out.push(b':');
            json_str(out, tag.name());
        });
    }
    if let Some(step) = info.step {
        out.extend_from_slice(b",\"step\":");
        typed_int(out, step);
    }
    if let Some(time) = info.time {
        out.extend_from_slice(b",\"time\":");
        typed_f64(out, time);
    }
    if let Some(cell) = &info.cell {
        out.extend_from_slice(b",\"box\":");
        json_box(out, cell);
    }
    out.push(b'}');
}

/// `open`, the items written by `each` separated by commas, `close`.
#[inline]
fn json_list<T>(
    out: &mut Vec<u8>,
    open: u8,
    close: u8,
    items: impl IntoIterator<Item = T>,
    mut each: impl FnMut(&mut Vec<u8>, T),
) {
    out.push(open);
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        each(out, item);
    }
    out.push(close);
}

/// A JSON string as `serde_json` escapes it: `"`, `\` and the control
/// characters below U+0020 (the short forms `\b \t \n \f \r`, else
/// `\u00xx` in lowercase hex); everything else, U+007F and non-ASCII
/// included, as is.
fn json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    // Names and most strings need no escape: one copy.
    if !bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\') {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    out.push(b'"');
    let mut run = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0C => b"\\f",
            b'\r' => b"\\r",
            0x00..=0x1F => &[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0xF) as usize],
            ],
            _ => continue,
        };
        out.extend_from_slice(&bytes[run..i]);
        out.extend_from_slice(short);
        run = i + 1;
    }
    out.extend_from_slice(&bytes[run..]);
    out.push(b'"');
}

fn json_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

fn json_u64s(out: &mut Vec<u8>, values: &[u64]) {
    json_list(out, b'[', b']', values, |out, &v| json_u64(out, v));
}

/// An f64 as `serde_json` serializes one: through its own float formatter
/// (so the digits are its digits), `null` when not finite.
fn json_f64(out: &mut Vec<u8>, v: f64) {
    serde_json::to_writer(&mut *out, &v).expect("writing to a Vec cannot fail");
}

/// A typed i64 ([`TypedInt`]): a number up to 2^53 in magnitude, a decimal string beyond.
fn typed_int(out: &mut Vec<u8>, v: i64) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(v).as_bytes();
    if (v as i128).abs() <= EXACT_INTEGER_LIMIT {
        out.extend_from_slice(digits);
    } else {
        out.push(b'"');
        out.extend_from_slice(digits);
        out.push(b'"');
    }
}

/// A typed f64 ([`TypedF64`]): a number when finite, `"NaN"`, `"Infinity"`, `"-Infinity"` otherwise.
fn typed_f64(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        json_f64(out, v);
    } else if v.is_nan() {
        out.extend_from_slice(b"\"NaN\"");
    } else if v > 0.0 {
        out.extend_from_slice(b"\"Infinity\"");
    } else {
        out.extend_from_slice(b"\"-Infinity\"");
    }
}

/// A `box` ([`BoxSer`]).
fn json_box(out: &mut Vec<u8>, cell: &Cell) {
    let (vectors, boundary) = if cell.defined {
        (cell.vectors, cell.boundary)
    } else {
        (Cell::IDENTITY, [false; 3])
    };
    let triple = |out: &mut Vec<u8>, v: &[f64]| {
        json_list(out, b'[', b']', v, |out, &x| typed_f64(out, x));
    };
    let flag = |b: bool| -> &'static [u8] {
        if b {
            b"true"
        } else {
            b"false"
        }
    };
    out.extend_from_slice(b"{\"vectors\":");
    json_list(out, b'[', b']', vectors.chunks_exact(3), triple);
    out.extend_from_slice(b",\"origin\":");
    triple(out, &cell.origin);
    out.extend_from_slice(b",\"boundary\":");
    json_list(out, b'[', b']', boundary, |out, b| {
        out.extend_from_slice(flag(b))
    });
    out.extend_from_slice(b",\"cell_defined\":");
    out.extend_from_slice(flag(cell.defined));
    out.push(b'}');
}

/// A JSON object of free-form values (meta, attributes), in the map's order.
fn json_object(out: &mut Vec<u8>, map: &serde_json::Map<String, Value>) {
    json_list(out, b'{', b'}', map, |out, (key, value)| {
        json_str(out, key);
        out.push(b':');
        json_value(out, value);
    });
}

/// A free-form JSON value as `serde_json` writes it; numbers go through
/// `serde_json` itself, whose representation of them (integer, float,
/// or arbitrary-precision text) is its own.
fn json_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => {
            serde_json::to_writer(&mut *out, n).expect("writing to a Vec cannot fail")
        }
        Value::String(s) => json_str(out, s),
        Value::Array(items) => json_list(out, b'[', b']', items, json_value),
        Value::Object(map) => json_object(out, map),
    }
}

/// The serde encoder the hand-written header replaced: the same bytes as
/// [`encode`], kept so tests can prove it (`tests/encode_equivalence.rs`).
#[doc(hidden)]
pub fn encode_reference(
    blocks: &BTreeMap<String, Block>,
    info: &FrameInfo,
    with_precision: bool,
    out: &mut Vec<u8>,
) {
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&[0; 4]);
    let header = HeaderSer {
        blocks,
        info,
        with_precision,
        next: std::cell::Cell::new(0),
    };
    serde_json::to_writer(&mut *out, &header)
        .expect("serializing a frame header cannot fail: keys are strings");
    // As `encode` writes it: past `u32::MAX` bytes, `u32::MAX` (refused alike).
    let header_len = u32::try_from(out.len() - 8).unwrap_or(u32::MAX);
    out[4..8].copy_from_slice(&header_len.to_le_bytes());
    pad8(out, 0);
    for block in blocks.values() {
        for column in block.columns.values() {
            write_buffer(&column.data, out, 0);
            if let Some(mask) = column.written_mask() {
                put(out, 0, mask, |b| [b as u8]);
            }
        }
    }
}

/// The header as serde serializes it ([`encode_reference`]). Offsets are handed out
/// by `next` in the order the payload is then written (blocks by name,
/// columns by name, each column's buffer then its mask).
struct HeaderSer<'a> {
    blocks: &'a BTreeMap<String, Block>,
    info: &'a FrameInfo,
    with_precision: bool,
    next: std::cell::Cell<u64>,
}

impl HeaderSer<'_> {
    /// The offset of the next buffer of `len` bytes; advances past its padding.
    fn alloc(&self, len: u64) -> u64 {
        let at = self.next.get();
        self.next.set(at.saturating_add(len.saturating_add(7) & !7));
        at
    }
}

impl Serialize for HeaderSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("blocks", &BlocksSer(self))?;
        m.serialize_entry("meta", &self.info.meta)?;
        if let Some(tags) = &self.info.meta_types {
            m.serialize_entry("meta_types", &TagsSer(tags))?;
        }
        if let Some(step) = self.info.step {
            m.serialize_entry("step", &TypedInt(step))?;
        }
        if let Some(time) = self.info.time {
            m.serialize_entry("time", &TypedF64(time))?;
        }
        if let Some(cell) = &self.info.cell {
            m.serialize_entry("box", &BoxSer(cell))?;
        }
        m.end()
    }
}

struct BlocksSer<'h, 'a>(&'h HeaderSer<'a>);

impl Serialize for BlocksSer<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(
            self.0
                .blocks
                .iter()
                .map(|(name, block)| (name, BlockSer(self.0, block))),
        )
    }
}

struct BlockSer<'h, 'a>(&'h HeaderSer<'a>, &'a Block);

impl Serialize for BlockSer<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let BlockSer(h, block) = *self;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("count", &block.count)?;
        m.serialize_entry("structural_shape", &block.structural_shape)?;
        m.serialize_entry("columns", &ColumnsSer(h, block))?;
        if !block.targets.is_empty() {
            m.serialize_entry("targets", &block.targets)?;
        }
        if !block.attributes.is_empty() {
            m.serialize_entry("attributes", &block.attributes)?;
        }
        m.end()
    }
}

struct ColumnsSer<'h, 'a>(&'h HeaderSer<'a>, &'a Block);

impl Serialize for ColumnsSer<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(
            self.1
                .columns
                .iter()
                .map(|(name, column)| (name, ColumnSer(self.0, column))),
        )
    }
}

struct ColumnSer<'h, 'a>(&'h HeaderSer<'a>, &'a Column);

impl Serialize for ColumnSer<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let ColumnSer(h, column) = *self;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("dtype", column.dtype().name())?;
        m.serialize_entry("shape", &column.shape)?;
        match &column.data {
            ColumnData::String(values) => m.serialize_entry("values", values)?,
            data => m.serialize_entry("offset", &h.alloc(buffer_len(data)))?,
        }
        if let Some(mask) = column.written_mask() {
            m.serialize_entry("validity", &h.alloc(mask.len() as u64))?;
        }
        if let (true, Some(p)) = (h.with_precision, column.precision) {
            m.serialize_entry("precision", &p)?;
        }
        m.end()
    }
}

struct TagsSer<'a>(&'a BTreeMap<String, MetaTag>);

impl Serialize for TagsSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, t)| (k, t.name())))
    }
}

/// A typed i64: a number up to 2^53 in magnitude, a decimal string beyond.
struct TypedInt(i64);

impl Serialize for TypedInt {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if (self.0 as i128).abs() <= EXACT_INTEGER_LIMIT {
            s.serialize_i64(self.0)
        } else {
            s.collect_str(&self.0)
        }
    }
}

/// A typed f64: a number when finite, `"NaN"`, `"Infinity"`, `"-Infinity"` otherwise.
struct TypedF64(f64);

impl Serialize for TypedF64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let v = self.0;
        if v.is_finite() {
            s.serialize_f64(v)
        } else if v.is_nan() {
            s.serialize_str("NaN")
        } else if v > 0.0 {
            s.serialize_str("Infinity")
        } else {
            s.serialize_str("-Infinity")
        }
    }
}

struct BoxSer<'a>(&'a Cell);

impl Serialize for BoxSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let cell = self.0;
        let (vectors, boundary) = if cell.defined {
            (cell.vectors, cell.boundary)
        } else {
            (Cell::IDENTITY, [false; 3])
        };
        let row = |i: usize| {
            [
                TypedF64(vectors[3 * i]),
                TypedF64(vectors[3 * i + 1]),
                TypedF64(vectors[3 * i + 2]),
            ]
        };
        let mut m = s.serialize_map(Some(4))?;
        m.serialize_entry("vectors", &[row(0), row(1), row(2)])?;
        m.serialize_entry("origin", &cell.origin.map(TypedF64))?;
        m.serialize_entry("boundary", &boundary)?;
        m.serialize_entry("cell_defined", &cell.defined)?;
        m.end()
    }
}

// ---------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------

/// Decodes and checks a frame value.
///
/// Never panics, never reads out of bounds, and allocates only for what the
/// header's text itself holds (names, shapes, strings, documents) — never
/// according to a size or count stated in it: a shape of `[2^40]` costs one
/// `u64`. The worst amplification is a JSON array of one-digit numbers in
/// `meta` or `attributes` (2 bytes of text, a 32-byte `serde_json::Value`),
/// so memory stays a small multiple of a header that is itself bounded by
/// [`MAX_HEADER_LEN`]. Nesting deeper than `serde_json`'s limit (128) is
/// refused, and skipped unknown keys are walked without recursion. Every
/// size is computed with checked arithmetic. Bool buffers and masks are
/// checked to hold only 0 / 1 bytes.
///
/// A `meta` value whose key has a tag in `meta_types` is checked against the
/// tag and handed back in canonical typed JSON; an undefined cell comes back
/// with identity vectors (a true boundary flag is refused).
///
/// The header is read by a single-pass scanner for the shapes the encoder
/// writes (see "Fast header scanner" below); whatever it does not take —
/// escapes, unusual numbers, repeated keys, any refusal — goes through the
/// `serde_json` path ([`decode_reference`]), which decides every refusal.
///
/// Not checked here (they are rules of the model, not of the bytes): a
/// `structural_shape` product, a precision's range or dtype, meta keys
/// without a tag, row references, and the zero padding bytes themselves.
pub fn decode(value: &[u8]) -> Result<FrameRef<'_>> {
    let (text, payload_start) = header_text(value)?;
    if let Some(frame) = decode_fast_header(value, text, payload_start) {
        return Ok(frame);
    }
    decode_serde(value, text, payload_start)
}

/// A JSON object of plain keys whose values are numbers and plain strings
/// (a record's meta document, most often), read as `serde_json` reads it
/// into a `Value` (the last of repeated keys kept); `None` for any other
/// text, which the caller hands to `serde_json`.
pub(crate) fn plain_document(bytes: &[u8]) -> Option<Document> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut scan = Scan { text, bytes, at: 0 };
    let doc = scan.simple_doc()?;
    scan.peek().is_none().then_some(doc)
}

/// [`decode`] through `serde_json` alone: the reference the fast scanner is
/// tested against (same results, same refusals). Not for general use.
#[doc(hidden)]
pub fn decode_reference(value: &[u8]) -> Result<FrameRef<'_>> {
    let (text, payload_start) = header_text(value)?;
    decode_serde(value, text, payload_start)
}

/// [`decode`]'s fast scanner alone: `None` where it gives up (a refusal or a
/// shape it does not handle, which [`decode`] hands to the serde path). For
/// tests. Not for general use.
#[doc(hidden)]
pub fn decode_fast(value: &[u8]) -> Option<FrameRef<'_>> {
    let (text, payload_start) = header_text(value).ok()?;
    decode_fast_header(value, text, payload_start)
}

/// Checks the fixed prefix and the header bounds: the header text (UTF-8)
/// and where the payload starts.
fn header_text(value: &[u8]) -> Result<(&str, usize)> {
    let (header, payload_start) = header_bytes(value)?;
    Ok((header_utf8(header)?, payload_start))
}

/// The header text, refused unless UTF-8.
fn header_utf8(header: &[u8]) -> Result<&str> {
    std::str::from_utf8(header).map_err(|e| {
        Error::refused(
            Clause::FrameHeaderJson,
            "header",
            format!("header is not UTF-8: {e}"),
        )
    })
}

/// Where the padding after `value`'s header (up to the next multiple of 8)
/// holds a byte that is not zero, when it does (`mrf1.padding`). [`decode`]
/// does not look at these bytes; `mrec validate` does
/// (`RecordTxn::check_every_value`). A value whose prefix or header bounds
/// `decode` refuses is left to it: `None`.
pub fn nonzero_padding(value: &[u8]) -> Option<std::ops::Range<usize>> {
    let (header, payload_start) = header_bytes(value).ok()?;
    let padding = 8 + header.len()..payload_start;
    value
        .get(padding.clone())?
        .iter()
        .any(|&b| b != 0)
        .then_some(padding)
}

/// What a writer may not store for an undefined cell in `value`'s header
/// (frame.md, "An undefined cell"): `vectors` that are not the identity
/// matrix, or a `boundary` left out (which would mean all-periodic). A
/// reader ignores both: [`decode`] hands back the identity and an all-false
/// boundary. `mrec validate` reports them (`RecordTxn::check_every_value`).
/// `None` for a value without an undefined cell, or one `decode` refuses.
pub fn undefined_cell_misstored(value: &[u8]) -> Option<&'static str> {
    let (header, _) = header_bytes(value).ok()?;
    // Most headers have no `cell_defined` key (it defaults to true): only
    // the ones that spell it out, or could escape it, are parsed.
    static KEY: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"cell_defined"));
    if KEY.find(header).is_none() && memchr::memchr(b'\\', header).is_none() {
        return None;
    }
    let header: Value = serde_json::from_slice(header).ok()?;
    let cell = header.get("box")?.as_object()?;
    if cell.get("cell_defined") != Some(&Value::Bool(false)) {
        return None;
    }
    let identity = cell
        .get("vectors")
        .and_then(Value::as_array)
        .is_some_and(|rows| {
            rows.len() == 3
                && rows.iter().enumerate().all(|(i, row)| {
                    row.as_array().is_some_and(|row| {
                        row.len() == 3
                            && (0..3).all(|j| row[j].as_f64() == Some(f64::from(u8::from(i == j))))
                    })
                })
        });
    if !identity {
        return Some("an undefined cell's vectors are not the identity matrix");
    }
    if !cell.contains_key("boundary") {
        return Some("an undefined cell's boundary is left out, not written as all-false");
    }
    None
}

/// Checks the fixed prefix and the header bounds: the header's bytes and
/// where the payload starts.
fn header_bytes(value: &[u8]) -> Result<(&[u8], usize)> {
    if value.len() < 8 {
        return Err(Error::refused(
            Clause::FrameTooShort,
            "",
            format!(
                "a frame value has at least 8 bytes, this one has {}",
                value.len()
            ),
        ));
    }
    if value[..4] != MAGIC {
        return Err(Error::refused(
            Clause::FrameMagic,
            "",
            format!(
                "unknown magic {:?}, expected \"MRF1\"",
                String::from_utf8_lossy(&value[..4])
            ),
        ));
    }
    let header_len = u32::from_le_bytes([value[4], value[5], value[6], value[7]]);
    if header_len > MAX_HEADER_LEN {
        return Err(Error::refused(
            Clause::FrameHeaderBounds,
            "header",
            format!("header length {header_len} exceeds the limit of {MAX_HEADER_LEN} bytes"),
        ));
    }
    // header_len <= 64 MiB: these cannot overflow, but stay checked.
    let header_end = (header_len as usize).checked_add(8);
    let payload_start = header_end.and_then(|e| e.checked_next_multiple_of(8));
    let (Some(header_end), Some(payload_start)) = (header_end, payload_start) else {
        return Err(Error::refused(
            Clause::FrameHeaderBounds,
            "header",
            "header length overflows",
        ));
    };
    if payload_start > value.len() {
        return Err(Error::refused(
            Clause::FrameHeaderBounds,
            "header",
            format!(
                "header of {header_len} bytes and its padding end at byte {payload_start}, past the value's {} bytes",
                value.len()
            ),
        ));
    }
    // header_end <= payload_start <= value.len(), checked above.
    Ok((value.get(8..header_end).unwrap_or_default(), payload_start))
}

/// The serde path: parses the header with `serde_json` and checks it.
fn decode_serde<'a>(value: &'a [u8], text: &str, payload_start: usize) -> Result<FrameRef<'a>> {
    let ctx = Ctx {
        value,
        payload_start,
        stash: std::cell::Cell::new(None),
    };
    let mut de = serde_json::Deserializer::from_str(text);
    let raw = HeaderSeed { ctx: &ctx }
        .deserialize(&mut de)
        .and_then(|raw| de.end().map(|()| raw));
    let raw = match raw {
        Ok(raw) => raw,
        Err(e) => {
            return Err(ctx.stash.take().unwrap_or_else(|| {
                Error::refused(Clause::FrameHeaderJson, "header", e.to_string())
            }))
        }
    };
    finish(raw)
}

/// Checks the typed parts of the header (meta against meta_types, step,
/// time, box) and assembles the frame.
fn finish(raw: RawHeader<'_>) -> Result<FrameRef<'_>> {
    let mut meta = raw.meta.unwrap_or_default();
    let meta_types = match raw.meta_types {
        None => None,
        Some(names) => {
            let mut tags = BTreeMap::new();
            for (key, TagName(tag)) in names {
                let tag = match tag {
                    Ok(tag) => tag,
                    Err(name) => {
                        return Err(Error::refused(
                            Clause::MetaTagClosedSet,
                            format!("meta_types.{key}"),
                            format!("{name:?} is not one of the 16 meta tags"),
                        ))
                    }
                };
                if let Some(v) = meta.get_mut(&key) {
                    *v = typed_json::normalize(tag, v).map_err(|e| {
                        Error::refused(Clause::TypedValue, format!("meta.{key}"), e)
                    })?;
                }
                tags.insert(key, tag);
            }
            Some(tags)
        }
    };
    let step = match raw.step {
        None => None,
        Some(v) => {
            let n = typed_json::int_from_json(&v)
                .map_err(|e| Error::refused(Clause::TypedValue, "step", e))?;
            Some(i64::try_from(n).map_err(|_| {
                Error::refused(Clause::TypedValue, "step", format!("{n} is not an i64"))
            })?)
        }
    };
    let time = match raw.time {
        None => None,
        Some(v) => Some(
            typed_json::f64_from_json(&v)
                .map_err(|e| Error::refused(Clause::TypedValue, "time", e))?,
        ),
    };
    let cell = raw.cell.as_ref().map(parse_box).transpose()?;
    Ok(FrameRef {
        blocks: raw.blocks,
        info: FrameInfo {
            meta,
            meta_types,
            step,
            time,
            cell: cell.map(Box::new),
        },
    })
}

/// Reads a `box` entry (canonical JSON's form; keys other than `vectors` default).
fn parse_box(v: &Value) -> Result<Cell> {
    let bad = |detail: String| Error::refused(Clause::BoxShape, "box", detail);
    let Value::Object(obj) = v else {
        return Err(bad(format!(
            "expected an object, got {}",
            typed_json::brief(v)
        )));
    };
    let f64s = |v: &Value, what: &str| -> Result<[f64; 3]> {
        match v {
            Value::Array(a) if a.len() == 3 => {
                let mut out = [0.0; 3];
                for (o, x) in out.iter_mut().zip(a) {
                    *o = typed_json::f64_from_json(x).map_err(|e| bad(format!("{what}: {e}")))?;
                }
                Ok(out)
            }
            other => Err(bad(format!(
                "{what}: expected an array of 3 numbers, got {}",
                typed_json::brief(other)
            ))),
        }
    };
    let mut vectors = [0.0; 9];
    match obj.get("vectors") {
        Some(Value::Array(rows)) if rows.len() == 3 => {
            for (i, row) in rows.iter().enumerate() {
                vectors[3 * i..3 * i + 3].copy_from_slice(&f64s(row, "vectors")?);
            }
        }
        Some(other) => {
            return Err(bad(format!(
                "vectors: expected 3 rows of 3, got {}",
                typed_json::brief(other)
            )))
        }
        None => return Err(bad("a box needs `vectors`".into())),
    }
    let origin = match obj.get("origin") {
        None => [0.0; 3],
        Some(v) => f64s(v, "origin")?,
    };
    let defined = match obj.get("cell_defined") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(bad(format!(
                "cell_defined: expected a bool, got {}",
                typed_json::brief(other)
            )))
        }
    };
    let boundary = match obj.get("boundary") {
        // Omitted: all periodic, but an undefined cell is periodic on no
        // axis (frame.md, "An undefined cell").
        None => [defined; 3],
        Some(Value::Array(a)) if a.len() == 3 && a.iter().all(Value::is_boolean) => [
            a[0] == Value::Bool(true),
            a[1] == Value::Bool(true),
            a[2] == Value::Bool(true),
        ],
        Some(other) => {
            return Err(bad(format!(
                "boundary: expected 3 bools, got {}",
                typed_json::brief(other)
            )))
        }
    };
    if defined {
        return Ok(Cell {
            vectors,
            origin,
            boundary,
            defined,
        });
    }
    if boundary.iter().any(|&b| b) {
        return Err(Error::refused(
            Clause::BoxUndefinedBoundary,
            "box.boundary",
            "an undefined cell has no periodic axis",
        ));
    }
    Ok(Cell {
        vectors: Cell::IDENTITY,
        origin,
        boundary,
        defined,
    })
}

/// What the header parse needs besides the JSON: the value (buffers are
/// resolved while parsing) and a slot for a refusal raised inside serde.
struct Ctx<'a> {
    value: &'a [u8],
    payload_start: usize,
    stash: std::cell::Cell<Option<Error>>,
}

impl<'a> Ctx<'a> {
    /// Keeps `err` for `decode` to return and stops the parse.
    fn fail<E: de::Error>(&self, err: Error) -> E {
        self.stash.set(Some(err));
        E::custom("refused")
    }

    /// The `len` bytes at payload offset `offset`, if they lie inside the value.
    fn buffer(&self, offset: u64, len: usize) -> Option<&'a [u8]> {
        let start = usize::try_from(offset)
            .ok()?
            .checked_add(self.payload_start)?;
        self.value.get(start..start.checked_add(len)?)
    }
}

/// The product of a shape; `None` when an intermediate product overflows
/// (a shape with a zero axis has product 0 whatever its other axes).
fn product(shape: &[u64]) -> Option<u64> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// The entries as a map sorted by name; `None` when a name repeats.
/// (`BTreeMap::from_iter` sorts once and bulk-builds: cheaper than inserting
/// one by one, and linear on names that are already sorted, as written.)
fn sorted_map<T>(entries: Vec<(String, T)>) -> Option<BTreeMap<String, T>> {
    let n = entries.len();
    let map = BTreeMap::from_iter(entries);
    (map.len() == n).then_some(map)
}

/// Stores a struct field, refusing a repeated key.
fn set<T, E: de::Error>(slot: &mut Option<T>, value: T, field: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(field));
    }
    *slot = Some(value);
    Ok(())
}

struct RawHeader<'a> {
    blocks: BTreeMap<String, BlockRef<'a>>,
    /// Where the `blocks` value's text is (the fast scanner only).
    blocks_range: Option<std::ops::Range<usize>>,
    meta: Option<Document>,
    meta_types: Option<BTreeMap<String, TagName>>,
    step: Option<Value>,
    time: Option<Value>,
    cell: Option<Value>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum HeaderField {
    Blocks,
    Meta,
    MetaTypes,
    Step,
    Time,
    #[serde(rename = "box")]
    Cell,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum BlockField {
    Count,
    StructuralShape,
    Columns,
    Targets,
    Attributes,
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ColumnField {
    Dtype,
    Shape,
    Offset,
    Values,
    Validity,
    Precision,
    #[serde(other)]
    Other,
}

/// A dtype name: known, or the unknown name (refused after the parse, with its clause).
struct DTypeName(Result<DType, String>);

impl<'de> Deserialize<'de> for DTypeName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = DTypeName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a dtype name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<DTypeName, E> {
                Ok(DTypeName(DType::parse(s).ok_or_else(|| s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// A meta tag name: known, or the unknown name.
struct TagName(Result<MetaTag, String>);

impl<'de> Deserialize<'de> for TagName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TagName;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a meta tag name")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<TagName, E> {
                Ok(TagName(MetaTag::parse(s).ok_or_else(|| s.to_owned())))
            }
        }
        d.deserialize_str(V)
    }
}

/// The header object. Each seed below is its own visitor and accepts only a
/// JSON object (`deserialize_map`), never serde's sequence form of a struct.
struct HeaderSeed<'c, 'a> {
    ctx: &'c Ctx<'a>,
}

impl<'de, 'a> DeserializeSeed<'de> for HeaderSeed<'_, 'a> {
    type Value = RawHeader<'a>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'a> Visitor<'de> for HeaderSeed<'_, 'a> {
    type Value = RawHeader<'a>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a frame header object")
    }
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let (mut blocks, mut meta, mut meta_types, mut step, mut time, mut cell) =
            (None, None, None, None, None, None);
        while let Some(key) = map.next_key::<HeaderField>()? {
            match key {
                HeaderField::Blocks => set(
                    &mut blocks,
                    map.next_value_seed(BlocksSeed { ctx: self.ctx })?,
                    "blocks",
                )?,
                HeaderField::Meta => set(&mut meta, map.next_value()?, "meta")?,
                HeaderField::MetaTypes => set(&mut meta_types, map.next_value()?, "meta_types")?,
                HeaderField::Step => set(&mut step, map.next_value()?, "step")?,
                HeaderField::Time => set(&mut time, map.next_value()?, "time")?,
                HeaderField::Cell => set(&mut cell, map.next_value()?, "box")?,
                HeaderField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let blocks = blocks.ok_or_else(|| de::Error::missing_field("blocks"))?;
        Ok(RawHeader {
            blocks,
            blocks_range: None,
            meta,
            meta_types,
            step,
            time,
            cell,
        })
    }
}

struct BlocksSeed<'c, 'a> {
    ctx: &'c Ctx<'a>,
}

impl<'de, 'a> DeserializeSeed<'de> for BlocksSeed<'_, 'a> {
    type Value = BTreeMap<String, BlockRef<'a>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'a> Visitor<'de> for BlocksSeed<'_, 'a> {
    type Value = BTreeMap<String, BlockRef<'a>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of blocks")
    }
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut blocks = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            let block = map.next_value_seed(BlockSeed {
                ctx: self.ctx,
                name: &name,
            })?;
            blocks.push((name, block));
        }
        sorted_map(blocks).ok_or_else(|| de::Error::custom("a repeated block name"))
    }
}

struct BlockSeed<'c, 'a, 'n> {
    ctx: &'c Ctx<'a>,
    name: &'n str,
}

impl<'de, 'a> DeserializeSeed<'de> for BlockSeed<'_, 'a, '_> {
    type Value = BlockRef<'a>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'a> Visitor<'de> for BlockSeed<'_, 'a, '_> {
    type Value = BlockRef<'a>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a block object")
    }
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let (mut count, mut structural_shape, mut columns, mut targets, mut attributes) =
            (None, None, None, None, None);
        while let Some(key) = map.next_key::<BlockField>()? {
            match key {
                BlockField::Count => set(&mut count, map.next_value::<u64>()?, "count")?,
                BlockField::StructuralShape => set(
                    &mut structural_shape,
                    map.next_value::<Option<Vec<u64>>>()?,
                    "structural_shape",
                )?,
                BlockField::Columns => set(
                    &mut columns,
                    map.next_value_seed(ColumnsSeed {
                        ctx: self.ctx,
                        block: self.name,
                    })?,
                    "columns",
                )?,
                BlockField::Targets => set(&mut targets, map.next_value()?, "targets")?,
                BlockField::Attributes => set(&mut attributes, map.next_value()?, "attributes")?,
                BlockField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let count = count.ok_or_else(|| de::Error::missing_field("count"))?;
        let columns: BTreeMap<String, ColumnRef<'a>> =
            columns.ok_or_else(|| de::Error::missing_field("columns"))?;
        for (name, column) in &columns {
            if column.shape[0] != count {
                return Err(self.ctx.fail(Error::refused(
                    Clause::ColumnShape,
                    format!("blocks.{}.columns.{name}", self.name),
                    format!(
                        "shape {:?} does not lead with the block's count {count}",
                        column.shape
                    ),
                )));
            }
        }
        Ok(BlockRef {
            count,
            structural_shape: structural_shape.flatten(),
            targets: targets.unwrap_or_default(),
            attributes: attributes.unwrap_or_default(),
            columns,
        })
    }
}

struct ColumnsSeed<'c, 'a, 'n> {
    ctx: &'c Ctx<'a>,
    block: &'n str,
}

impl<'de, 'a> DeserializeSeed<'de> for ColumnsSeed<'_, 'a, '_> {
    type Value = BTreeMap<String, ColumnRef<'a>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'a> Visitor<'de> for ColumnsSeed<'_, 'a, '_> {
    type Value = BTreeMap<String, ColumnRef<'a>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object of columns")
    }
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut columns = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            let column = map.next_value_seed(ColumnSeed {
                ctx: self.ctx,
                block: self.block,
                column: &name,
            })?;
            columns.push((name, column));
        }
        sorted_map(columns).ok_or_else(|| de::Error::custom("a repeated column name"))
    }
}

struct ColumnSeed<'c, 'a, 'n> {
    ctx: &'c Ctx<'a>,
    block: &'n str,
    column: &'n str,
}

impl<'de, 'a> DeserializeSeed<'de> for ColumnSeed<'_, 'a, '_> {
    type Value = ColumnRef<'a>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'a> Visitor<'de> for ColumnSeed<'_, 'a, '_> {
    type Value = ColumnRef<'a>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a column object")
    }
    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let (mut dtype, mut shape, mut offset, mut values, mut validity, mut precision) =
            (None, None, None, None, None, None);
        while let Some(key) = map.next_key::<ColumnField>()? {
            match key {
                ColumnField::Dtype => set(&mut dtype, map.next_value::<DTypeName>()?, "dtype")?,
                ColumnField::Shape => set(&mut shape, map.next_value::<Vec<u64>>()?, "shape")?,
                ColumnField::Offset => set(&mut offset, map.next_value::<u64>()?, "offset")?,
                ColumnField::Values => {
                    set(&mut values, map.next_value::<Vec<String>>()?, "values")?
                }
                ColumnField::Validity => set(&mut validity, map.next_value::<u64>()?, "validity")?,
                ColumnField::Precision => {
                    set(&mut precision, map.next_value::<f64>()?, "precision")?
                }
                ColumnField::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let ctx = self.ctx;
        let refuse = |clause: Clause, detail: String| -> M::Error {
            ctx.fail(Error::refused(
                clause,
                format!("blocks.{}.columns.{}", self.block, self.column),
                detail,
            ))
        };
        let dtype = match dtype {
            None => return Err(de::Error::missing_field("dtype")),
            Some(DTypeName(Ok(dtype))) => dtype,
            Some(DTypeName(Err(name))) => {
                return Err(refuse(
                    Clause::FrameDtype,
                    format!("{name:?} is not one of the 13 dtypes"),
                ))
            }
        };
        let refuse = |fault: ColFault| -> M::Error {
            match fault {
                ColFault::Refused(clause, detail) => ctx.fail(Error::refused(
                    clause,
                    format!("blocks.{}.columns.{}", self.block, self.column),
                    detail,
                )),
                ColFault::Missing(field) => de::Error::missing_field(field),
                ColFault::Custom(msg) => de::Error::custom(msg),
            }
        };
        column_from_parts(ctx, dtype, shape, offset, values, validity, precision).map_err(refuse)
    }
}

/// A block of the fast scanner from its parts; `None` (give up) when a
/// column's shape does not lead with the count (the serde path refuses it).
fn block_from_parts<'a>(
    count: u64,
    structural_shape: Option<Vec<u64>>,
    columns: BTreeMap<String, ColumnRef<'a>>,
    targets: Option<BTreeMap<String, String>>,
    attributes: Option<Document>,
) -> Option<BlockRef<'a>> {
    if columns.values().any(|c| c.shape[0] != count) {
        return None;
    }
    Some(BlockRef {
        count,
        structural_shape,
        targets: targets.unwrap_or_default(),
        attributes: attributes.unwrap_or_default(),
        columns,
    })
}

/// Why a column's parts do not make a column: a refusal (clause, detail), or
/// a plain JSON fault (a missing field, a buffer dtype with `values`).
enum ColFault {
    Refused(Clause, String),
    Missing(&'static str),
    Custom(String),
}

/// The checks of a column entry after its dtype is known, shared by the
/// serde path and the fast scanner: shape, buffer or values, mask.
fn column_from_parts<'a>(
    ctx: &Ctx<'a>,
    dtype: DType,
    shape: Option<Vec<u64>>,
    offset: Option<u64>,
    values: Option<Vec<String>>,
    validity: Option<u64>,
    precision: Option<f64>,
) -> Result<ColumnRef<'a>, ColFault> {
    let shape: Vec<u64> = shape.ok_or(ColFault::Missing("shape"))?;
    if shape.is_empty() {
        return Err(ColFault::Refused(
            Clause::ColumnShape,
            "a column's shape has at least its leading axis".into(),
        ));
    }
    let Some(elements) = product(&shape) else {
        return Err(ColFault::Refused(
            Clause::FrameSizeOverflow,
            format!("the product of shape {shape:?} overflows"),
        ));
    };
    let data = match dtype.item_size() {
        None => {
            if offset.is_some() {
                return Err(ColFault::Refused(
                    Clause::FrameStringValues,
                    "a string column has no buffer: no `offset`".into(),
                ));
            }
            let Some(values) = values else {
                return Err(ColFault::Refused(
                    Clause::FrameStringValues,
                    "a string column carries `values`".into(),
                ));
            };
            if values.len() as u64 != elements {
                return Err(ColFault::Refused(
                    Clause::FrameStringValues,
                    format!(
                        "{} values for shape {shape:?} ({elements} elements)",
                        values.len()
                    ),
                ));
            }
            ColumnBytes::Strings(values)
        }
        Some(item_size) => {
            if values.is_some() {
                return Err(ColFault::Custom(format!(
                    "a {dtype} column carries a buffer, not `values`"
                )));
            }
            let offset = offset.ok_or(ColFault::Missing("offset"))?;
            let Some(len) = elements
                .checked_mul(item_size as u64)
                .and_then(|n| usize::try_from(n).ok())
            else {
                return Err(ColFault::Refused(
                    Clause::FrameSizeOverflow,
                    format!("{elements} elements of {item_size} bytes overflow"),
                ));
            };
            if offset % 8 != 0 {
                return Err(ColFault::Refused(
                    Clause::FrameOffsetAligned,
                    format!("offset {offset} is not a multiple of 8"),
                ));
            }
            let Some(bytes) = ctx.buffer(offset, len) else {
                return Err(ColFault::Refused(
                    Clause::FrameBufferBounds,
                    format!("a buffer of {len} bytes at offset {offset} runs past the value"),
                ));
            };
            if dtype == DType::Bool && !bytes.iter().all(|&b| b <= 1) {
                return Err(ColFault::Refused(
                    Clause::FrameBoolByte,
                    "a bool buffer holds a byte other than 0 / 1".into(),
                ));
            }
            ColumnBytes::Buffer(bytes)
        }
    };
    let validity = match validity {
        None => None,
        Some(offset) => {
            if offset % 8 != 0 {
                return Err(ColFault::Refused(
                    Clause::FrameOffsetAligned,
                    format!("validity offset {offset} is not a multiple of 8"),
                ));
            }
            let Some(mask) = usize::try_from(shape[0])
                .ok()
                .and_then(|rows| ctx.buffer(offset, rows))
            else {
                return Err(ColFault::Refused(
                    Clause::FrameBufferBounds,
                    format!(
                        "a mask of {} bytes at offset {offset} runs past the value",
                        shape[0]
                    ),
                ));
            };
            if !mask.iter().all(|&b| b <= 1) {
                return Err(ColFault::Refused(
                    Clause::FrameValidity,
                    "a mask holds a byte other than 0 / 1".into(),
                ));
            }
            Some(mask)
        }
    };
    Ok(ColumnRef {
        dtype,
        shape,
        precision,
        validity,
        data,
    })
}

// ---------------------------------------------------------------------------
// Fast header scanner
// ---------------------------------------------------------------------------
//
// A single pass over the header text for the shapes the encoder writes: plain
// keys (no escapes), integers where integers belong, known keys only. It
// borrows from the text and builds the same `RawHeader` the serde path
// builds, then runs the same `finish`. Sub-values it does not read itself
// (`meta`, `meta_types`, `attributes`, `targets`, `box`, `time`, a string
// column's `values`, a `precision`, a non-integer `step`, an unknown key's
// value) are cut out whole and handed to `serde_json` — the same
// deserialization the serde path runs on the same text. On anything else
// (escapes in a key or name, a float or sign where an integer belongs, a
// repeated key, deep nesting, malformed JSON, any refusal) it gives up with
// `None`, and `decode` runs the serde path, which stays the reference for
// every refusal and its clause.

/// Nesting allowed inside a sub-value cut out for `serde_json`: the sub-value
/// sits at most 4 levels deep in the header, and `serde_json`'s limit is 128,
/// so a sub-value the scanner accepts never hits the limit inline either.
const FAST_MAX_DEPTH: usize = 64;

fn decode_fast_header<'a>(
    value: &'a [u8],
    text: &str,
    payload_start: usize,
) -> Option<FrameRef<'a>> {
    scan_header(value, text, payload_start, false, None)
}

/// The fast scanner over `text`, either a whole header or (`after_blocks`)
/// what follows known blocks; see [`Scan::header`].
fn scan_header<'a>(
    value: &'a [u8],
    text: &str,
    payload_start: usize,
    after_blocks: bool,
    recycled: Option<Document>,
) -> Option<FrameRef<'a>> {
    scan_header_ranged(value, text, payload_start, after_blocks, recycled).map(|(frame, _)| frame)
}

/// [`scan_header`], with where the `blocks` value's text is.
fn scan_header_ranged<'a>(
    value: &'a [u8],
    text: &str,
    payload_start: usize,
    after_blocks: bool,
    recycled: Option<Document>,
) -> Option<(FrameRef<'a>, Option<std::ops::Range<usize>>)> {
    let ctx = Ctx {
        value,
        payload_start,
        stash: std::cell::Cell::new(None),
    };
    let mut scan = Scan {
        text,
        bytes: text.as_bytes(),
        at: 0,
    };
    let raw = scan.header(&ctx, after_blocks, recycled)?;
    // `de.end()`: only whitespace after the header object.
    if scan.peek().is_some() {
        return None;
    }
    let range = raw.blocks_range.clone();
    finish(raw).ok().map(|frame| (frame, range))
}

/// The bytes that end a plain string: its closing quote, or what the scanner
/// gives up on (an escape, a control character `serde_json` refuses).
static STRING_STOP: [bool; 256] = {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// The scanner's position in the header text. Every method returns `None`
/// where it gives up.
struct Scan<'t> {
    text: &'t str,
    bytes: &'t [u8],
    at: usize,
}

impl<'t> Scan<'t> {
    /// Skips JSON whitespace.
    #[inline]
    fn ws(&mut self) {
        // The encoder writes no whitespace: one test in the common case.
        match self.bytes.get(self.at) {
            Some(&c) if c <= b' ' => {}
            _ => return,
        }
        while let Some(&c) = self.bytes.get(self.at) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                break;
            }
            self.at += 1;
        }
    }

    /// The next byte after whitespace (not consumed).
    #[inline]
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes.get(self.at).copied()
    }

    /// Consumes `c` after whitespace.
    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        if self.peek()? != c {
            return None;
        }
        self.at += 1;
        Some(())
    }

    /// A string without escapes or control characters, borrowed.
    #[inline]
    fn plain_str(&mut self) -> Option<&'t str> {
        self.eat(b'"')?;
        let start = self.at;
        let len = self
            .bytes
            .get(start..)?
            .iter()
            .position(|&c| STRING_STOP[usize::from(c)])?;
        self.at = start + len;
        if self.bytes[self.at] != b'"' {
            return None;
        }
        // Both ends sit at an ASCII quote: char boundaries of the text.
        let s = self.text.get(start..self.at)?;
        self.at += 1;
        Some(s)
    }

    /// Walks an object: `member` reads the value of each key.
    #[inline]
    fn object(&mut self, mut member: impl FnMut(&mut Self, &'t str) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.peek()? == b'}' {
            self.at += 1;
            return Some(());
        }
        let key = self.plain_str()?;
        self.eat(b':')?;
        member(self, key)?;
        self.rest_of_object(member)
    }

    /// The rest of an object whose opening and first member were read
    /// (before this text or by the caller): `,` and more members, then `}`.
    #[inline]
    fn rest_of_object(
        &mut self,
        mut member: impl FnMut(&mut Self, &'t str) -> Option<()>,
    ) -> Option<()> {
        loop {
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
            let key = self.plain_str()?;
            self.eat(b':')?;
            member(self, key)?;
        }
    }

    /// An unsigned integer as `serde_json` reads one into a `u64`: digits, no
    /// leading zero, no fraction or exponent, no overflow.
    #[inline]
    fn u64(&mut self) -> Option<u64> {
        self.ws();
        let start = self.at;
        let mut n: u64 = 0;
        while let Some(&c) = self.bytes.get(self.at) {
            if !c.is_ascii_digit() {
                break;
            }
            n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
            self.at += 1;
        }
        let len = self.at - start;
        if len == 0 || (len > 1 && self.bytes[start] == b'0') {
            return None;
        }
        if matches!(self.bytes.get(self.at), Some(b'.' | b'e' | b'E')) {
            return None;
        }
        Some(n)
    }

    /// An array of strings without escapes (a string column's `values`).
    fn plain_str_array(&mut self) -> Option<Vec<String>> {
        self.plain_str_array_of(0)
    }

    /// [`Scan::plain_str_array`] with room for `expected` values (the
    /// column's element count; at most one per three bytes of the text).
    fn plain_str_array_of(&mut self, expected: u64) -> Option<Vec<String>> {
        let room = (self.bytes.len().saturating_sub(self.at) / 3).min(expected as usize);
        self.array(Vec::with_capacity(room), |s| {
            s.plain_str().map(str::to_owned)
        })
    }

    /// An array of `u64`s.
    fn u64_array(&mut self) -> Option<Vec<u64>> {
        // Shapes have one to three axes: one allocation, no growth.
        self.array(Vec::with_capacity(4), Self::u64)
    }

    /// An array whose items `item` reads, appended to `out`.
    #[inline]
    fn array<T>(
        &mut self,
        mut out: Vec<T>,
        mut item: impl FnMut(&mut Self) -> Option<T>,
    ) -> Option<Vec<T>> {
        self.eat(b'[')?;
        if self.peek()? == b']' {
            self.at += 1;
            return Some(out);
        }
        loop {
            out.push(item(self)?);
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(out);
                }
                _ => return None,
            }
        }
    }

    /// An integer as a JSON value, the way `serde_json` represents it (a
    /// non-negative one as a `u64`, a negative one as an `i64`); `-0` and
    /// anything beyond the `i64` range are left to the slow path.
    fn int_value(&mut self) -> Option<Value> {
        if self.peek()? == b'-' {
            self.at += 1;
            if !self.bytes.get(self.at)?.is_ascii_digit() {
                return None;
            }
            let n = self.u64()?;
            if n == 0 || n > i64::MAX as u64 {
                return None;
            }
            Some(Value::from(-(n as i64)))
        } else {
            Some(Value::from(self.u64()?))
        }
    }

    /// The text of the next JSON value, not checked (the caller hands it to
    /// `serde_json`); `None` past [`FAST_MAX_DEPTH`] or the end of the text.
    fn raw(&mut self) -> Option<&'t str> {
        self.ws();
        let start = self.at;
        let mut depth = 0usize;
        loop {
            match *self.bytes.get(self.at)? {
                b'{' | b'[' => {
                    depth += 1;
                    if depth > FAST_MAX_DEPTH {
                        return None;
                    }
                    self.at += 1;
                }
                b'}' | b']' => {
                    depth = depth.checked_sub(1)?;
                    self.at += 1;
                }
                b'"' => {
                    self.at += 1;
                    loop {
                        match *self.bytes.get(self.at)? {
                            b'"' => break,
                            b'\\' => self.at += 2,
                            _ => self.at += 1,
                        }
                    }
                    self.at += 1;
                }
                _ if depth == 0 => {
                    // A scalar: up to the next structural byte or whitespace.
                    while let Some(&c) = self.bytes.get(self.at) {
                        if matches!(
                            c,
                            b',' | b':'
                                | b'{'
                                | b'}'
                                | b'['
                                | b']'
                                | b'"'
                                | b' '
                                | b'\n'
                                | b'\r'
                                | b'\t'
                        ) {
                            break;
                        }
                        self.at += 1;
                    }
                }
                _ => self.at += 1,
            }
            if depth == 0 {
                break;
            }
        }
        self.text.get(start..self.at)
    }

    /// The next value, deserialized by `serde_json` from its own text.
    fn serde<T: de::DeserializeOwned>(&mut self) -> Option<T> {
        serde_json::from_str(self.raw()?).ok()
    }

    /// An object value that is most often `{}`: no parse, no allocation then.
    fn maybe_empty<T: de::DeserializeOwned + Default>(&mut self) -> Option<T> {
        if self.peek()? == b'{' {
            let save = self.at;
            self.at += 1;
            if self.peek()? == b'}' {
                self.at += 1;
                return Some(T::default());
            }
            self.at = save;
        }
        self.serde()
    }

    /// The header object. With `after_blocks`, the text is what follows
    /// `{"blocks":` and a `blocks` value already accepted: the header's
    /// other members, whose `blocks` comes back empty.
    ///
    /// A `meta` document with exactly `recycled`'s keys, in its order, is
    /// read into `recycled` (no allocation).
    fn header<'a>(
        &mut self,
        ctx: &Ctx<'a>,
        after_blocks: bool,
        mut recycled: Option<Document>,
    ) -> Option<RawHeader<'a>> {
        let (mut blocks, mut meta, mut meta_types, mut step, mut time, mut cell) =
            (None, None, None, None, None, None);
        let mut blocks_range = None;
        if after_blocks {
            blocks = Some(BTreeMap::new());
        }
        let member = |s: &mut Self, key: &str| match key {
            "blocks" => {
                s.ws();
                let start = s.at;
                once(&mut blocks, s.blocks(ctx)?)?;
                blocks_range = Some(start..s.at);
                Some(())
            }
            "meta" => {
                let save = s.at;
                let reused = recycled
                    .take()
                    .filter(|d| !d.is_empty())
                    .and_then(|d| s.same_keys_doc(d));
                let doc = match reused {
                    Some(doc) => doc,
                    None => {
                        s.at = save;
                        match s.simple_doc() {
                            Some(doc) => doc,
                            None => {
                                s.at = save;
                                s.serde()?
                            }
                        }
                    }
                };
                once(&mut meta, doc)
            }
            "meta_types" => once(&mut meta_types, s.maybe_empty()?),
            "step" => {
                let v = match s.peek()? {
                    b'-' | b'0'..=b'9' => {
                        let save = s.at;
                        match s.int_value() {
                            Some(v) => v,
                            None => {
                                s.at = save;
                                s.serde()?
                            }
                        }
                    }
                    _ => s.serde()?,
                };
                once(&mut step, v)
            }
            "time" => once(&mut time, s.serde()?),
            "box" => once(&mut cell, s.serde()?),
            _ => s.serde::<IgnoredAny>().map(drop),
        };
        if after_blocks {
            self.rest_of_object(member)?;
        } else {
            self.object(member)?;
        }
        Some(RawHeader {
            blocks: blocks?,
            blocks_range,
            meta,
            meta_types,
            step,
            time,
            cell,
        })
    }

    /// The `blocks` object.
    fn blocks<'a>(&mut self, ctx: &Ctx<'a>) -> Option<BTreeMap<String, BlockRef<'a>>> {
        let mut blocks = BTreeMap::new();
        self.object(|s, name| {
            let block = s.block(ctx)?;
            blocks
                .insert(name.to_owned(), block)
                .is_none()
                .then_some(())
        })?;
        Some(blocks)
    }

    /// One block object: as the encoder writes one (`count`,
    /// `structural_shape`, `columns`, in that order) in one pass, anything
    /// else member by member.
    fn block<'a>(&mut self, ctx: &Ctx<'a>) -> Option<BlockRef<'a>> {
        let save = self.at;
        if let Some(block) = self.block_as_written(ctx) {
            return Some(block);
        }
        self.at = save;
        let (mut count, mut structural_shape, mut columns, mut targets, mut attributes) =
            (None, None, None, None, None);
        self.object(|s, key| match key {
            "count" => once(&mut count, s.u64()?),
            "structural_shape" => {
                let v = if s.peek()? == b'n' {
                    s.literal("null")?;
                    None
                } else {
                    Some(s.u64_array()?)
                };
                once(&mut structural_shape, v)
            }
            "columns" => once(&mut columns, s.columns(ctx)?),
            "targets" => once(&mut targets, s.maybe_empty()?),
            "attributes" => once(&mut attributes, s.maybe_empty()?),
            _ => s.serde::<IgnoredAny>().map(drop),
        })?;
        block_from_parts(
            count?,
            structural_shape.flatten(),
            columns?,
            targets,
            attributes,
        )
    }

    /// `{"count":N,"structural_shape":null|[..],"columns":{..}}` exactly
    /// (no whitespace, no other member): what [`Scan::block`]'s general
    /// walk makes of the same text; `None` on anything else.
    fn block_as_written<'a>(&mut self, ctx: &Ctx<'a>) -> Option<BlockRef<'a>> {
        self.exactly(b"{\"count\":")?;
        let count = self.u64()?;
        self.exactly(b",\"structural_shape\":")?;
        let structural_shape = if self.exactly(b"null").is_some() {
            None
        } else {
            Some(self.u64_array()?)
        };
        self.exactly(b",\"columns\":")?;
        let columns = self.columns(ctx)?;
        self.exactly(b"}")?;
        block_from_parts(count, structural_shape, columns, None, None)
    }

    /// A block's `columns` object.
    fn columns<'a>(&mut self, ctx: &Ctx<'a>) -> Option<BTreeMap<String, ColumnRef<'a>>> {
        let mut columns = BTreeMap::new();
        self.object(|s, name| {
            let column = s.column(ctx)?;
            columns
                .insert(name.to_owned(), column)
                .is_none()
                .then_some(())
        })?;
        Some(columns)
    }

    /// One column entry: as the encoder writes one without a mask or a
    /// precision in one pass, anything else member by member.
    fn column<'a>(&mut self, ctx: &Ctx<'a>) -> Option<ColumnRef<'a>> {
        let save = self.at;
        if let Some(column) = self.column_as_written(ctx) {
            return Some(column);
        }
        self.at = save;
        let (mut dtype, mut shape, mut offset, mut values, mut validity, mut precision) =
            (None, None, None, None, None, None);
        self.object(|s, key| match key {
            "dtype" => once(&mut dtype, DType::parse(s.plain_str()?)?),
            "shape" => once(&mut shape, s.u64_array()?),
            "offset" => once(&mut offset, s.u64()?),
            "values" => {
                let save = s.at;
                let v = match s.plain_str_array() {
                    Some(v) => v,
                    None => {
                        s.at = save;
                        s.serde::<Vec<String>>()?
                    }
                };
                once(&mut values, v)
            }
            "validity" => once(&mut validity, s.u64()?),
            "precision" => once(&mut precision, s.serde::<f64>()?),
            _ => s.serde::<IgnoredAny>().map(drop),
        })?;
        column_from_parts(ctx, dtype?, shape, offset, values, validity, precision).ok()
    }

    /// `{"dtype":"D","shape":[..],"offset":N}` or `..,"values":[..]}`
    /// exactly: what [`Scan::column`]'s general walk makes of the same
    /// text; `None` on anything else.
    fn column_as_written<'a>(&mut self, ctx: &Ctx<'a>) -> Option<ColumnRef<'a>> {
        self.exactly(b"{\"dtype\":")?;
        let dtype = DType::parse(self.plain_str()?)?;
        self.exactly(b",\"shape\":")?;
        let shape = self.u64_array()?;
        let (offset, values) = if self.exactly(b",\"offset\":").is_some() {
            (Some(self.u64()?), None)
        } else {
            self.exactly(b",\"values\":")?;
            let expected = shape.iter().try_fold(1u64, |a, &b| a.checked_mul(b));
            (None, Some(self.plain_str_array_of(expected.unwrap_or(0))?))
        };
        self.exactly(b"}")?;
        column_from_parts(ctx, dtype, Some(shape), offset, values, None, None).ok()
    }

    /// Consumes `literal` if the text continues with exactly it (no
    /// whitespace skipped).
    #[inline]
    fn exactly<const N: usize>(&mut self, literal: &[u8; N]) -> Option<()> {
        let end = self.at.checked_add(N)?;
        let next: &[u8; N] = self.bytes.get(self.at..end)?.try_into().ok()?;
        (next == literal).then(|| self.at = end)
    }

    /// A document of plain keys (no escapes) whose values are integers,
    /// numbers or plain strings, in one pass; `None` on anything else (the
    /// caller then hands the whole document to `serde_json`). A repeated key
    /// keeps its last value, as `serde_json`'s map does.
    fn simple_doc(&mut self) -> Option<Document> {
        let mut doc = Document::new();
        self.object(|s, key| {
            let v = s.simple_value()?;
            doc.insert(key.to_owned(), v);
            Some(())
        })?;
        Some(doc)
    }

    /// [`Scan::simple_doc`] into `doc`'s map when the object's keys are
    /// `doc`'s keys in `doc`'s (sorted) order, each once: then every value is
    /// replaced and the result is what `simple_doc` gives. `None` otherwise
    /// (the position is then undefined).
    fn same_keys_doc(&mut self, mut doc: Document) -> Option<Document> {
        let mut slots = doc.iter_mut();
        self.object(|s, key| {
            let (known, slot) = slots.next()?;
            if known != key {
                return None;
            }
            *slot = s.simple_value()?;
            Some(())
        })?;
        if slots.next().is_some() {
            return None;
        }
        Some(doc)
    }

    /// A simple document's value: a plain string or a number.
    fn simple_value(&mut self) -> Option<Value> {
        match self.peek()? {
            b'"' => Some(Value::String(self.plain_str()?.to_owned())),
            _ => self.number(),
        }
    }

    /// A JSON number as `serde_json` reads it into a `Value` (see
    /// [`json_number`]), after whitespace.
    fn number(&mut self) -> Option<Value> {
        self.ws();
        json_number(self.bytes, &mut self.at)
    }

    /// Consumes the literal `word` (after whitespace), which must end there.
    fn literal(&mut self, word: &str) -> Option<()> {
        self.ws();
        let end = self.at.checked_add(word.len())?;
        if self.bytes.get(self.at..end)? != word.as_bytes()
            || self.bytes.get(end).is_some_and(u8::is_ascii_alphanumeric)
        {
            return None;
        }
        self.at = end;
        Some(())
    }
}

/// Powers of ten that are exact `f64`s.
const EXACT_POWERS_OF_TEN: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// The value of 8 ASCII digits, `None` if one of the bytes is not a digit
/// (the usual SWAR reading: every byte checked at once, then pairs, quads
/// and the two halves combined).
fn eight_digits(bytes: &[u8]) -> Option<u64> {
    let x = u64::from_le_bytes(bytes.try_into().ok()?);
    // Each byte is 0x30..=0x39: its high nibble is 3, and adding 6 keeps it 3.
    let high = (x & 0xF0F0_F0F0_F0F0_F0F0)
        | ((x.wrapping_add(0x0606_0606_0606_0606) & 0xF0F0_F0F0_F0F0_F0F0) >> 4);
    if high != 0x3333_3333_3333_3333 {
        return None;
    }
    let x = x - 0x3030_3030_3030_3030;
    let x = (x.wrapping_mul(10) + (x >> 8)) & 0x00FF_00FF_00FF_00FF;
    let x = (x.wrapping_mul(100) + (x >> 16)) & 0x0000_FFFF_0000_FFFF;
    Some((x.wrapping_mul(10_000) + (x >> 32)) & 0xFFFF_FFFF)
}

/// `mantissa * 10^power` correctly rounded (to nearest, ties to even), for
/// `|power| <= 21`; `None` outside what it computes exactly.
///
/// - `mantissa <= 2^53` and `|power| <= 22`: both are exact `f64`s, and one
///   IEEE multiplication or division rounds their product or quotient
///   correctly (Clinger's fast path).
/// - `power >= 0`: the product is an exact `u128` (when it fits), and
///   `u128 as f64` rounds to nearest, ties to even.
/// - `power < 0`: the mantissa shifted to fill 128 bits, divided by
///   `10^-power` (at most 2^70): the quotient has at least 57 bits, and a
///   non-zero remainder is folded into its lowest bit, below the rounding
///   bit, so `as f64` rounds the quotient as it would the exact value; the
///   shift is then undone by an exact power of two (the value is a normal
///   number: at least 10^-21).
fn exact_decimal(mantissa: u64, power: i64) -> Option<f64> {
    if mantissa == 0 {
        return Some(0.0);
    }
    if mantissa <= 1 << 53 && (-22..=22).contains(&power) {
        let m = mantissa as f64;
        let p = EXACT_POWERS_OF_TEN[power.unsigned_abs() as usize];
        return Some(if power < 0 { m / p } else { m * p });
    }
    if !(-21..=21).contains(&power) {
        return None;
    }
    let ten = 10u128.pow(power.unsigned_abs() as u32);
    if power >= 0 {
        return Some(u128::from(mantissa).checked_mul(ten)? as f64);
    }
    let shift = mantissa.leading_zeros() + 64;
    let scaled = u128::from(mantissa) << shift;
    let (q, r) = (scaled / ten, scaled % ten);
    let q = q | u128::from(r != 0);
    // 2^-shift, shift <= 127: an exact power of two.
    let unscale = f64::from_bits((1023 - u64::from(shift)) << 52);
    Some(q as f64 * unscale)
}

/// The JSON number at `bytes[*at..]` as `serde_json` reads it into a
/// `Value`, moving `at` past it: an integer as [`Scan::int_value`] reads it
/// (`-0` and integers beyond `i64`/`u64` are left to the slow path); a real
/// (a fraction or an exponent), when finite, correctly rounded as
/// `serde_json` with `float_roundtrip` rounds it (`serde_json` refuses an
/// out-of-range real). `None`, `at` unchanged, for anything else.
///
/// A real of at most 19 digits with a decimal exponent within 21 is read
/// exactly by [`exact_decimal`]; any other goes through the standard
/// library's parse.
fn json_number(bytes: &[u8], at: &mut usize) -> Option<Value> {
    let start = *at;
    let mut i = start;
    let negative = bytes.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    let mut mantissa = 0u64;
    let mut digits = |i: &mut usize| {
        let from = *i;
        // Eight digits at a time while there are (most of a real's digits).
        while let Some(eight) = bytes.get(*i..*i + 8).and_then(eight_digits) {
            mantissa = mantissa.wrapping_mul(100_000_000).wrapping_add(eight);
            *i += 8;
        }
        while let Some(&c) = bytes.get(*i).filter(|c| c.is_ascii_digit()) {
            mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(c - b'0'));
            *i += 1;
        }
        *i - from
    };
    let int_start = i;
    let int_len = digits(&mut i);
    if int_len == 0 || (int_len > 1 && bytes[int_start] == b'0') {
        return None;
    }
    let mut frac_len = 0usize;
    let mut real = false;
    if bytes.get(i) == Some(&b'.') {
        i += 1;
        frac_len = digits(&mut i);
        if frac_len == 0 {
            return None;
        }
        real = true;
    }
    let mut exponent = 0i64;
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        let minus = match bytes.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let from = i;
        while let Some(&c) = bytes.get(i).filter(|c| c.is_ascii_digit()) {
            exponent = (exponent * 10 + i64::from(c - b'0')).min(1 << 40);
            i += 1;
        }
        if i == from {
            return None;
        }
        if minus {
            exponent = -exponent;
        }
        real = true;
    }
    if !real {
        // What `Scan::int_value` gives: the digits as a u64 (checked), and
        // a negative one as an i64.
        let mut scan = Scan {
            text: "",
            bytes,
            at: start,
        };
        let value = scan.int_value()?;
        *at = scan.at;
        return Some(value);
    }
    let power = exponent - frac_len as i64;
    let x = match (int_len + frac_len <= 19)
        .then(|| exact_decimal(mantissa, power))
        .flatten()
    {
        Some(x) if negative => -x,
        Some(x) => x,
        None => std::str::from_utf8(bytes.get(start..i)?)
            .ok()?
            .parse()
            .ok()?,
    };
    if !x.is_finite() {
        return None;
    }
    *at = i;
    Some(Value::Number(serde_json::Number::from_f64(x)?))
}

/// Stores a field the first time; `None` (give up) on a repeated key.
#[inline]
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    *slot = Some(value);
    Some(())
}

// ---------------------------------------------------------------------------
// Consecutive updates with the same blocks
// ---------------------------------------------------------------------------
//
// The updates of one trajectory usually differ only in `step`, `time` and
// the per-step `meta`: their `blocks` text (names, dtypes, shapes, offsets)
// is byte-for-byte the same. Decoding that text is most of a frame's cost,
// so `decode_update` compares it with the last update decoded in full and,
// when equal, skips it. That is exact, not a guess: what the decoder makes of
// a `blocks` text depends only on the text and on the payload's length, with
// two exceptions that read payload bytes (bool buffers and validity masks
// must hold 0 / 1), and an update with either is never remembered.

/// What [`decode_update`] keeps of the last update it decoded in full.
#[derive(Debug, Default)]
pub struct BlocksMemo {
    /// The `blocks` value's text, as written.
    text: Vec<u8>,
    /// The payload length that text was checked against.
    payload_len: usize,
    /// Whether the next update may be compared with `text` at all.
    usable: bool,
    /// A meta document of the last update, whose map the next update's meta
    /// may be read into when it has the same keys.
    recycled: Document,
}

impl BlocksMemo {
    /// Hands back an update's meta document once its caller is done with it:
    /// the next update with the same per-step keys reuses its map.
    pub fn recycle(&mut self, meta: Document) {
        self.recycled = meta;
    }

    /// Remembers `frame`'s blocks (decoded in full from `text`), when the
    /// result does not depend on payload bytes.
    /// `range`: where the `blocks` value is in `text`, when the scanner
    /// said (else it is found again).
    fn remember(
        &mut self,
        text: &str,
        range: Option<std::ops::Range<usize>>,
        payload_len: usize,
        frame: &FrameRef<'_>,
    ) {
        self.usable = false;
        let reads_payload = frame.blocks.values().any(|b| {
            b.columns
                .values()
                .any(|c| c.dtype == DType::Bool || c.validity.is_some())
        });
        if reads_payload {
            return;
        }
        if let Some(range) = range.filter(|r| r.start == BLOCKS_FIRST.len()) {
            self.text.clear();
            self.text.extend_from_slice(&text.as_bytes()[range]);
            self.payload_len = payload_len;
            self.usable = true;
            return;
        }
        let mut scan = Scan {
            text,
            bytes: text.as_bytes(),
            at: 0,
        };
        let mut range = None;
        let walked = scan.object(|s, key| {
            let value = s.raw()?;
            if key == "blocks" {
                let end = s.at;
                // Only a header that starts with `{"blocks":` is remembered.
                range = Some(end - value.len()..end).filter(|r| r.start == BLOCKS_FIRST.len());
            }
            Some(())
        });
        if let (Some(()), Some(range)) = (walked, range) {
            self.text.clear();
            self.text.extend_from_slice(&text.as_bytes()[range]);
            self.payload_len = payload_len;
            self.usable = true;
        }
    }
}

/// A trajectory update as [`decode_update`] returns it.
#[derive(Debug)]
pub enum Update<'a> {
    /// Decoded in full.
    Full {
        /// The frame.
        frame: FrameRef<'a>,
        /// Its payload (from the first 8-aligned byte after the header).
        payload: &'a [u8],
    },
    /// The `blocks` text and the payload length are those of the last
    /// update decoded in full with the same [`BlocksMemo`]: its blocks are
    /// that update's, every buffer at the same offset of `payload`.
    SameBlocks {
        /// This update's payload (from the first 8-aligned byte after the header).
        payload: &'a [u8],
        /// Meta, step, time and cell, decoded and checked as [`decode`] does.
        info: FrameInfo,
    },
}

/// [`decode`] for the updates of one trajectory in order: an update whose
/// `blocks` text repeats the last full update's comes back as
/// [`Update::SameBlocks`], without decoding or allocating its blocks again.
/// Accepts and refuses exactly what [`decode`] does.
pub fn decode_update<'a>(value: &'a [u8], memo: &mut BlocksMemo) -> Result<Update<'a>> {
    match decode_update_known(value, memo, &mut |_, _| None::<()>)? {
        Known::Update(update) => Ok(update),
        // The lookup never finds anything.
        Known::Found { payload, info, .. } => Ok(Update::SameBlocks { payload, info }),
    }
}

/// What [`decode_update_known`] returns.
#[derive(Debug)]
pub(crate) enum Known<'a, K> {
    /// What [`decode_update`] returns.
    Update(Update<'a>),
    /// The update's `blocks` text (and payload length) is one `known` knew:
    /// what it made of an earlier update with that text, this update's
    /// payload and the rest of its header, decoded and checked as
    /// [`decode`] does. `memo` now holds that text.
    Found {
        known: K,
        payload: &'a [u8],
        info: FrameInfo,
    },
}

/// [`decode_update`], asking `known` about the update's `blocks` text (and
/// payload length) before decoding it, when it is not the memo's: an
/// answer is something the caller made of an earlier update with the same
/// text (so the same blocks, the same buffers at the same offsets), and
/// then the text is not decoded again. Accepts and refuses exactly what
/// [`decode`] does, whatever `known` answers, provided it answers only
/// for a text it was handed with an update [`decode_update`] decoded in
/// full and remembered (one whose decoding reads no payload bytes).
pub(crate) fn decode_update_known<'a, K>(
    value: &'a [u8],
    memo: &mut BlocksMemo,
    known: &mut dyn FnMut(&[u8], usize) -> Option<K>,
) -> Result<Known<'a, K>> {
    let (header, payload_start) = header_bytes(value)?;
    // `header_bytes` checked payload_start <= value.len().
    let payload = value.get(payload_start..).unwrap_or_default();
    let repeated = (memo.usable && payload.len() == memo.payload_len)
        .then(|| {
            header
                .strip_prefix(BLOCKS_FIRST)
                .and_then(|h| h.strip_prefix(memo.text.as_slice()))
        })
        .flatten();
    let mut found = None;
    let rest = match repeated {
        Some(rest) => Some(rest),
        None => header.strip_prefix(BLOCKS_FIRST).and_then(|h| {
            let end = json_value_end(h)?;
            let answer = known(&h[..end], payload.len())?;
            found = Some(answer);
            memo.text.clear();
            memo.text.extend_from_slice(&h[..end]);
            memo.payload_len = payload.len();
            memo.usable = true;
            Some(&h[end..])
        }),
    };
    if let Some(rest) = rest {
        let mut meta = std::mem::take(&mut memo.recycled);
        // The tail the encoder writes, read in one pass; anything else goes
        // to the scanner (the known blocks text was UTF-8, as part of an
        // accepted header; the rest is checked here).
        let info = match update_tail(rest, &mut meta) {
            Some((step, time)) => Some(FrameInfo {
                meta,
                meta_types: None,
                step: Some(step),
                time,
                cell: None,
            }),
            None => std::str::from_utf8(rest)
                .ok()
                .and_then(|rest| scan_header(value, rest, payload_start, true, Some(meta)))
                .map(|frame| frame.info),
        };
        if let Some(info) = info {
            return Ok(match found {
                Some(known) => Known::Found {
                    known,
                    payload,
                    info,
                },
                None => Known::Update(Update::SameBlocks { payload, info }),
            });
        }
    }
    let text = header_utf8(header)?;
    let (frame, range) = match scan_header_ranged(value, text, payload_start, false, None) {
        Some(scanned) => scanned,
        None => (decode_serde(value, text, payload_start)?, None),
    };
    memo.remember(text, range, payload.len(), &frame);
    Ok(Known::Update(Update::Full { frame, payload }))
}

/// The step at `bytes[*at..]`: what [`json_number`] reads there as an
/// integer that fits an `i64` (digits without a leading zero, not `-0`,
/// no fraction or exponent), in one pass; `None` on anything else.
fn tail_step(bytes: &[u8], at: &mut usize) -> Option<i64> {
    let mut i = *at;
    let negative = bytes.get(i) == Some(&b'-');
    if negative {
        i += 1;
    }
    let start = i;
    let mut n = 0u64;
    while let Some(&c) = bytes.get(i).filter(|c| c.is_ascii_digit()) {
        n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
        i += 1;
    }
    let len = i - start;
    if len == 0 || (len > 1 && bytes[start] == b'0') || (negative && n == 0) {
        return None;
    }
    if matches!(bytes.get(i), Some(b'.' | b'e' | b'E')) {
        return None;
    }
    let magnitude = i64::try_from(n).ok()?;
    *at = i;
    Some(if negative { -magnitude } else { magnitude })
}

/// Where the JSON value at the start of `bytes` ends (not checked: the
/// caller only compares the text with texts it knows), `None` past the
/// end of the bytes or [`FAST_MAX_DEPTH`].
fn json_value_end(bytes: &[u8]) -> Option<usize> {
    let mut depth = 0usize;
    let mut at = 0usize;
    loop {
        match *bytes.get(at)? {
            b'{' | b'[' => {
                depth += 1;
                if depth > FAST_MAX_DEPTH {
                    return None;
                }
            }
            b'}' | b']' => depth = depth.checked_sub(1)?,
            b'"' => {
                at += 1;
                loop {
                    match *bytes.get(at)? {
                        b'"' => break,
                        b'\\' => at += 2,
                        _ => at += 1,
                    }
                }
            }
            _ if depth == 0 => return None,
            _ => {}
        }
        at += 1;
        if depth == 0 {
            return Some(at);
        }
    }
}

impl BlocksMemo {
    /// The `blocks` text (and payload length) of the last update, when the
    /// memo holds it: [`decode_update_known`]'s caller may keep what it
    /// made of that update for later ones with the same text.
    pub(crate) fn holds(&self) -> Option<(&[u8], usize)> {
        self.usable
            .then_some((self.text.as_slice(), self.payload_len))
    }
}

/// What follows a repeated `blocks` value in the header of a trajectory
/// update as the encoder writes it: `,"meta":{..},"step":S`, optionally
/// `,"time":T`, then `}` and nothing more, with `meta` holding exactly
/// `meta`'s keys in its order (plain keys, number values, read into
/// `meta`'s map). Returns the step and the time: what the scanner and
/// `finish` make of such a text (the whole text is then ASCII but for the
/// keys, which are `meta`'s own). `None` on anything else, `meta`'s keys
/// unchanged.
fn update_tail(rest: &[u8], meta: &mut Document) -> Option<(i64, Option<f64>)> {
    // Bytes are only compared here: the scan needs no text.
    let mut s = Scan {
        text: "",
        bytes: rest,
        at: 0,
    };
    s.exactly(b",\"meta\":{")?;
    for (i, (key, slot)) in meta.iter_mut().enumerate() {
        if i > 0 {
            s.exactly(b",")?;
        }
        s.exactly(b"\"")?;
        let end = s.at.checked_add(key.len())?;
        (rest.get(s.at..end)? == key.as_bytes()).then(|| s.at = end)?;
        s.exactly(b"\":")?;
        *slot = json_number(rest, &mut s.at)?;
    }
    s.exactly(b"},\"step\":")?;
    let step = tail_step(rest, &mut s.at)?;
    let time = if s.exactly(b",\"time\":").is_some() {
        match json_number(rest, &mut s.at)? {
            Value::Number(n) => Some(n.as_f64()?),
            _ => return None,
        }
    } else {
        None
    };
    (rest.get(s.at..)? == b"}").then_some((step, time))
}

/// How the encoder starts every header: `decode_update` reuses blocks only
/// after exactly this.
const BLOCKS_FIRST: &[u8] = b"{\"blocks\":";

impl<'a> BlockRef<'a> {
    /// Points every buffer and mask of the block at the same offset of
    /// `new_payload` as it had in `old_payload` (the payload it was decoded
    /// from). `None`, with the block unchanged or partly moved, if a buffer
    /// does not lie inside `old_payload` or would not fit in `new_payload`.
    pub fn rebase(&mut self, old_payload: &[u8], new_payload: &'a [u8]) -> Option<()> {
        let moved = |bytes: &[u8]| -> Option<&'a [u8]> {
            let offset = (bytes.as_ptr() as usize).checked_sub(old_payload.as_ptr() as usize)?;
            if offset.checked_add(bytes.len())? > old_payload.len() {
                return None;
            }
            new_payload.get(offset..offset + bytes.len())
        };
        for column in self.columns.values_mut() {
            if let ColumnBytes::Buffer(bytes) = &mut column.data {
                *bytes = moved(bytes)?;
            }
            if let Some(mask) = &mut column.validity {
                *mask = moved(mask)?;
            }
        }
        Some(())
    }
}

// ---------------------------------------------------------------------------
// Reading columns
// ---------------------------------------------------------------------------

/// Appends `N`-byte little-endian items (works at any address; a trailing
/// partial item is ignored). On a little-endian target the bytes already
/// are the items' memory and are copied in one go.
#[inline]
fn extend<T: PlainOld, const N: usize>(
    out: &mut Vec<T>,
    bytes: &[u8],
    item: impl Fn([u8; N]) -> T,
) {
    let (items, _) = bytes.as_chunks::<N>();
    if cfg!(target_endian = "little") && std::mem::size_of::<T>() == N {
        out.reserve(items.len());
        // SAFETY: `reserve` made room for `items.len()` more `T`s after the
        // `out.len()` initialized ones. The source is `items.len() * N`
        // bytes of `bytes`, valid for reads; the destination is spare
        // capacity of `out`, valid for writes and not overlapping a
        // borrowed slice. `T: PlainOld` is `N` bytes without padding and
        // valid for every bit pattern, and on a little-endian target its
        // memory is its little-endian encoding: after the copy the new
        // items are initialized values, so the length may include them.
        unsafe {
            let end = out.as_mut_ptr().add(out.len());
            std::ptr::copy_nonoverlapping(
                items.as_ptr().cast::<u8>(),
                end.cast::<u8>(),
                items.len() * N,
            );
            out.set_len(out.len() + items.len());
        }
    } else {
        out.extend(items.iter().map(|&a| item(a)));
    }
}

fn extend_bools(out: &mut Vec<bool>, bytes: &[u8], what: &str) -> Result<()> {
    if let Some(b) = bytes.iter().find(|&&b| b > 1) {
        return Err(Error::refused(
            Clause::TypedValue,
            "",
            format!("{what} holds the byte {b}, not 0 / 1"),
        ));
    }
    out.extend(bytes.iter().map(|&b| b == 1));
    Ok(())
}

/// Appends a buffer's little-endian items to `out` (its dtype says how
/// many bytes an item has; a trailing partial item is ignored). Refuses a
/// bool byte other than 0 / 1; appends nothing for a string column.
/// Inlined where the reader copies a frame's columns (most of what it does
/// with a frame), so that each arm's copy is inlined too.
#[inline(always)]
pub(crate) fn extend_buffer(out: &mut ColumnData, b: &[u8]) -> Result<()> {
    match out {
        ColumnData::F64(v) => extend(v, b, f64::from_le_bytes),
        ColumnData::I8(v) => extend(v, b, i8::from_le_bytes),
        ColumnData::I16(v) => extend(v, b, i16::from_le_bytes),
        ColumnData::I32(v) => extend(v, b, i32::from_le_bytes),
        ColumnData::I64(v) => extend(v, b, i64::from_le_bytes),
        ColumnData::U8(v) => v.extend_from_slice(b),
        ColumnData::U16(v) => extend(v, b, u16::from_le_bytes),
        ColumnData::U32(v) => extend(v, b, u32::from_le_bytes),
        ColumnData::U64(v) => extend(v, b, u64::from_le_bytes),
        ColumnData::Bool(v) => extend_bools(v, b, "a bool buffer")?,
        ColumnData::C64(v) => extend(v, b, |c: [u8; 8]| {
            [
                f32::from_le_bytes([c[0], c[1], c[2], c[3]]),
                f32::from_le_bytes([c[4], c[5], c[6], c[7]]),
            ]
        }),
        ColumnData::C128(v) => extend(v, b, |c: [u8; 16]| {
            let (re, im) = c.split_at(8);
            let mut r = [0; 8];
            let mut i = [0; 8];
            r.copy_from_slice(re);
            i.copy_from_slice(im);
            [f64::from_le_bytes(r), f64::from_le_bytes(i)]
        }),
        ColumnData::String(_) => {}
    }
    Ok(())
}

/// The element types a buffer may be viewed as in place or copied into in
/// one go: [`Plain`] (no padding), and every bit pattern of
/// `size_of::<Self>()` bytes is a valid value (so not `bool`). Private: no
/// other type can be added.
///
/// # Safety
///
/// An implementor must be `Plain` and valid for every bit pattern.
unsafe trait PlainOld: Plain {}
// SAFETY: every bit pattern of a float or an integer is a valid value; an
// array of such values has no padding and no invalid patterns either.
unsafe impl PlainOld for f64 {}
// SAFETY: as above.
unsafe impl PlainOld for i8 {}
// SAFETY: as above.
unsafe impl PlainOld for i16 {}
// SAFETY: as above.
unsafe impl PlainOld for i32 {}
// SAFETY: as above.
unsafe impl PlainOld for i64 {}
// SAFETY: as above.
unsafe impl PlainOld for u16 {}
// SAFETY: as above.
unsafe impl PlainOld for u32 {}
// SAFETY: as above.
unsafe impl PlainOld for u64 {}
// SAFETY: as above.
unsafe impl PlainOld for [f32; 2] {}
// SAFETY: as above.
unsafe impl PlainOld for [f64; 2] {}

impl<'a> ColumnRef<'a> {
    /// An owned copy of the column. Works at any address (no alignment
    /// needed); checks that bool values and mask bytes are 0 / 1 and that
    /// the buffer and mask lengths fit the shape; an all-true (or empty) mask
    /// becomes `None`.
    pub fn to_column(&self) -> Result<Column> {
        self.clone().into_column()
    }

    /// [`ColumnRef::to_column`], moving the shape and string values instead
    /// of copying them.
    pub fn into_column(mut self) -> Result<Column> {
        let mut data = ColumnData::empty(self.dtype);
        self.append_to(&mut data)?;
        let validity = self.mask()?;
        Ok(Column {
            shape: self.shape,
            data,
            validity,
            precision: self.precision,
        })
    }

    /// Appends the column's values to `data`, which must hold the same
    /// dtype (string values are moved out of `self`), with the checks of
    /// [`ColumnRef::to_column`]: the shape's product, the buffer's length or
    /// the number of strings, bool bytes.
    pub fn append_to(&mut self, data: &mut ColumnData) -> Result<()> {
        let elements = product(&self.shape).ok_or_else(|| {
            Error::refused(
                Clause::FrameSizeOverflow,
                "",
                "the product of the shape overflows",
            )
        })?;
        let dtype = self.dtype;
        let bytes = match (&mut self.data, data) {
            (ColumnBytes::Strings(values), ColumnData::String(out))
                if values.len() as u64 == elements =>
            {
                // Into an empty column (`into_column`, a system's strings)
                // the vector itself moves: no second allocation.
                if out.is_empty() {
                    std::mem::swap(out, values);
                } else {
                    out.append(values);
                }
                return Ok(());
            }
            (ColumnBytes::Strings(values), _) => {
                return Err(Error::refused(
                    Clause::FrameStringValues,
                    "",
                    format!(
                        "{} string values for a {dtype} column of {elements} elements",
                        values.len(),
                    ),
                ))
            }
            (ColumnBytes::Buffer(b), out) => (*b, out),
        };
        let (b, out) = bytes;
        let expected = dtype
            .item_size()
            .and_then(|s| elements.checked_mul(s as u64));
        if expected != Some(b.len() as u64) || out.dtype() != dtype {
            return Err(Error::refused(
                Clause::FrameBufferBounds,
                "",
                format!(
                    "a buffer of {} bytes for a {dtype} column of {elements} elements",
                    b.len(),
                ),
            ));
        }
        extend_buffer(out, b)
    }

    /// The mask as bools, `None` when the header has none or every row is
    /// valid; refused unless it has `shape[0]` bytes of 0 / 1.
    pub fn mask(&self) -> Result<Option<Vec<bool>>> {
        let Some(mask) = self.validity else {
            return Ok(None);
        };
        let rows = self.shape.first().copied().unwrap_or(0);
        if mask.len() as u64 != rows {
            return Err(Error::refused(
                Clause::ValidityLength,
                "",
                format!("a mask of {} bytes for {rows} rows", mask.len()),
            ));
        }
        let mut out = Vec::with_capacity(mask.len());
        extend_bools(&mut out, mask, "a mask")?;
        Ok(Some(out).filter(|m| !m.iter().all(|&b| b)))
    }

    /// The buffer viewed in place as `T`, when the dtype is `dtype`, the
    /// target is little-endian and the real address is aligned for `T`.
    fn view<T: PlainOld>(&self, dtype: DType) -> Option<&'a [T]> {
        let size = std::mem::size_of::<T>();
        let ColumnBytes::Buffer(bytes) = self.data else {
            return None;
        };
        if self.dtype != dtype || !cfg!(target_endian = "little") || bytes.len() % size != 0 {
            return None;
        }
        if bytes.is_empty() {
            return Some(&[]);
        }
        if !bytes.as_ptr().cast::<T>().is_aligned() {
            return None;
        }
        // SAFETY: `bytes` is a live slice borrowed for 'a; its start address
        // was just checked to be aligned for `T`, and its length is a whole
        // number of `T`s, so the new slice covers exactly the same memory.
        // `T: PlainOld` is valid for every bit pattern, and on a
        // little-endian target its memory is the buffer's little-endian
        // encoding. The bytes
        // are shared and immutable for 'a, as the new slice requires.
        Some(unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast::<T>(), bytes.len() / size) })
    }

    /// A zero-copy view of an `f64` column: `Some` when the dtype is `f64`,
    /// the target is little-endian and the buffer's real address is 8-aligned
    /// (LMDB puts small values at 2-aligned addresses: then `None`, and the
    /// caller falls back to [`ColumnRef::to_column`]). Flat, row-major.
    pub fn f64_view(&self) -> Option<&'a [f64]> {
        self.view::<f64>(DType::F64)
    }

    /// The values of an `f64` column, flat and row-major: viewed in place
    /// when [`ColumnRef::f64_view`] can, else copied into `scratch` (cleared
    /// first; no allocation once it has grown to the column's size). `None`
    /// when the dtype is not `f64` or the buffer is not whole `f64`s.
    pub fn f64_values<'s>(&self, scratch: &'s mut Vec<f64>) -> Option<&'s [f64]>
    where
        'a: 's,
    {
        if let Some(view) = self.f64_view() {
            return Some(view);
        }
        let ColumnBytes::Buffer(bytes) = self.data else {
            return None;
        };
        if self.dtype != DType::F64 || bytes.len() % 8 != 0 {
            return None;
        }
        scratch.clear();
        extend(scratch, bytes, f64::from_le_bytes);
        Some(scratch)
    }

    /// A zero-copy view of a `u64` column, under the same conditions as
    /// [`ColumnRef::f64_view`].
    pub fn u64_view(&self) -> Option<&'a [u64]> {
        self.view::<u64>(DType::U64)
    }
}

impl BlockRef<'_> {
    /// An owned copy of the block (every column through [`ColumnRef::to_column`]).
    pub fn to_block(&self) -> Result<Block> {
        let mut columns = BTreeMap::new();
        for (name, column) in &self.columns {
            columns.insert(
                name.clone(),
                column
                    .to_column()
                    .map_err(|e| e.within(&format!("columns.{name}")))?,
            );
        }
        Ok(Block {
            count: self.count,
            columns,
            structural_shape: self.structural_shape.clone(),
            targets: self.targets.clone(),
            attributes: self.attributes.clone(),
        })
    }
}

impl BlockRef<'_> {
    /// [`BlockRef::to_block`], moving names, shapes and strings instead of
    /// copying them.
    pub fn into_block(self) -> Result<Block> {
        let mut columns = BTreeMap::new();
        for (name, column) in self.columns {
            let column = column
                .into_column()
                .map_err(|e| e.within(&format!("columns.{name}")))?;
            columns.insert(name, column);
        }
        Ok(Block {
            count: self.count,
            columns,
            structural_shape: self.structural_shape,
            targets: self.targets,
            attributes: self.attributes,
        })
    }
}

impl FrameRef<'_> {
    /// Owned blocks, moving names, shapes and strings out of the frame.
    pub fn into_blocks(self) -> Result<BTreeMap<String, Block>> {
        let mut blocks = BTreeMap::new();
        for (name, block) in self.blocks {
            let block = block
                .into_block()
                .map_err(|e| e.within(&format!("blocks.{name}")))?;
            blocks.insert(name, block);
        }
        Ok(blocks)
    }

    /// Owned copies of every block.
    pub fn to_blocks(&self) -> Result<BTreeMap<String, Block>> {
        let mut blocks = BTreeMap::new();
        for (name, block) in &self.blocks {
            blocks.insert(
                name.clone(),
                block
                    .to_block()
                    .map_err(|e| e.within(&format!("blocks.{name}")))?,
            );
        }
        Ok(blocks)
    }
}

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
