//! Encoding: [`encode`] (the writer's encoder, which writes the header text
//! itself), [`encode_reference`] (the same bytes through serde, kept to
//! prove the fast encoder) and the update encoders the writer uses.

use super::*;

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
pub(super) fn pad8(out: &mut Vec<u8>, start: usize) {
    let len = start + (out.len() - start).next_multiple_of(8);
    out.resize(len, 0);
}

/// Bytes of a numeric buffer (0 for strings: no buffer).
pub(super) fn buffer_len(data: &ColumnData) -> u64 {
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
pub(super) unsafe trait Plain: Copy {}

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
pub(super) fn put<T: Plain, const N: usize>(
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

pub(super) fn write_buffer(data: &ColumnData, out: &mut Vec<u8>, start: usize) {
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
pub(super) fn write_blocks<'a>(
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
pub(super) fn write_header_tail(info: &FrameInfo, out: &mut Vec<u8>) {
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
pub(super) fn json_list<T>(
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
pub(super) fn json_str(out: &mut Vec<u8>, s: &str) {
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

pub(super) fn json_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

pub(super) fn json_u64s(out: &mut Vec<u8>, values: &[u64]) {
    json_list(out, b'[', b']', values, |out, &v| json_u64(out, v));
}

/// An f64 as `serde_json` serializes one: through its own float formatter
/// (so the digits are its digits), `null` when not finite.
pub(super) fn json_f64(out: &mut Vec<u8>, v: f64) {
    serde_json::to_writer(&mut *out, &v).expect("writing to a Vec cannot fail");
}

/// A typed i64 ([`TypedInt`]): a number up to 2^53 in magnitude, a decimal string beyond.
pub(super) fn typed_int(out: &mut Vec<u8>, v: i64) {
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
pub(super) fn typed_f64(out: &mut Vec<u8>, v: f64) {
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
pub(super) fn json_box(out: &mut Vec<u8>, cell: &Cell) {
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
pub(super) fn json_object(out: &mut Vec<u8>, map: &serde_json::Map<String, Value>) {
    json_list(out, b'{', b'}', map, |out, (key, value)| {
        json_str(out, key);
        out.push(b':');
        json_value(out, value);
    });
}

/// A free-form JSON value as `serde_json` writes it; numbers go through
/// `serde_json` itself, whose representation of them (integer, float,
/// or arbitrary-precision text) is its own.
pub(super) fn json_value(out: &mut Vec<u8>, value: &Value) {
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
pub(super) struct HeaderSer<'a> {
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

pub(super) struct BlocksSer<'h, 'a>(&'h HeaderSer<'a>);

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

pub(super) struct BlockSer<'h, 'a>(&'h HeaderSer<'a>, &'a Block);

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

pub(super) struct ColumnsSer<'h, 'a>(&'h HeaderSer<'a>, &'a Block);

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

pub(super) struct ColumnSer<'h, 'a>(&'h HeaderSer<'a>, &'a Column);

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

pub(super) struct TagsSer<'a>(&'a BTreeMap<String, MetaTag>);

impl Serialize for TagsSer<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, t)| (k, t.name())))
    }
}

/// A typed i64: a number up to 2^53 in magnitude, a decimal string beyond.
pub(super) struct TypedInt(i64);

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
pub(super) struct TypedF64(f64);

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

pub(super) struct BoxSer<'a>(&'a Cell);

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
