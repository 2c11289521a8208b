//! Decoding with every check a reader must make: [`decode`] (the fast
//! scanner first, the serde path where it declines), [`decode_reference`]
//! (serde only) and the checks shared by both paths.

use super::*;

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
pub(super) fn header_text(value: &[u8]) -> Result<(&str, usize)> {
    let (header, payload_start) = header_bytes(value)?;
    Ok((header_utf8(header)?, payload_start))
}

/// The header text, refused unless UTF-8.
pub(super) fn header_utf8(header: &[u8]) -> Result<&str> {
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
pub(super) fn header_bytes(value: &[u8]) -> Result<(&[u8], usize)> {
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
pub(super) fn decode_serde<'a>(
    value: &'a [u8],
    text: &str,
    payload_start: usize,
) -> Result<FrameRef<'a>> {
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
pub(super) fn finish(raw: RawHeader<'_>) -> Result<FrameRef<'_>> {
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
    // `"time": null` and `"box": null` are read as absent: the header of
    // lmdb.md's v1 example carries both (spec-map: mrf1.null-time-box).
    let time = match raw.time {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            typed_json::f64_from_json(&v)
                .map_err(|e| Error::refused(Clause::TypedValue, "time", e))?,
        ),
    };
    let cell = raw
        .cell
        .as_ref()
        .filter(|v| !v.is_null())
        .map(parse_box)
        .transpose()?;
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
pub(super) fn parse_box(v: &Value) -> Result<Cell> {
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
pub(super) struct Ctx<'a> {
    pub(super) value: &'a [u8],
    pub(super) payload_start: usize,
    pub(super) stash: std::cell::Cell<Option<Error>>,
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
pub(super) fn product(shape: &[u64]) -> Option<u64> {
    if shape.contains(&0) {
        return Some(0);
    }
    shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d))
}

/// The entries as a map sorted by name; `None` when a name repeats.
/// (`BTreeMap::from_iter` sorts once and bulk-builds: cheaper than inserting
/// one by one, and linear on names that are already sorted, as written.)
pub(super) fn sorted_map<T>(entries: Vec<(String, T)>) -> Option<BTreeMap<String, T>> {
    let n = entries.len();
    let map = BTreeMap::from_iter(entries);
    (map.len() == n).then_some(map)
}

/// Stores a struct field, refusing a repeated key.
pub(super) fn set<T, E: de::Error>(
    slot: &mut Option<T>,
    value: T,
    field: &'static str,
) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(field));
    }
    *slot = Some(value);
    Ok(())
}

pub(super) struct RawHeader<'a> {
    pub(super) blocks: BTreeMap<String, BlockRef<'a>>,
    /// Where the `blocks` value's text is (the fast scanner only).
    pub(super) blocks_range: Option<std::ops::Range<usize>>,
    pub(super) meta: Option<Document>,
    pub(super) meta_types: Option<BTreeMap<String, TagName>>,
    pub(super) step: Option<Value>,
    pub(super) time: Option<Value>,
    pub(super) cell: Option<Value>,
}

#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
pub(super) enum HeaderField {
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
pub(super) enum BlockField {
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
pub(super) enum ColumnField {
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
pub(super) struct DTypeName(Result<DType, String>);

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
pub(super) struct TagName(Result<MetaTag, String>);

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
pub(super) struct HeaderSeed<'c, 'a> {
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

pub(super) struct BlocksSeed<'c, 'a> {
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

pub(super) struct BlockSeed<'c, 'a, 'n> {
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

pub(super) struct ColumnsSeed<'c, 'a, 'n> {
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

pub(super) struct ColumnSeed<'c, 'a, 'n> {
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
pub(super) fn block_from_parts<'a>(
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
pub(super) enum ColFault {
    Refused(Clause, String),
    Missing(&'static str),
    Custom(String),
}

/// The checks of a column entry after its dtype is known, shared by the
/// serde path and the fast scanner: shape, buffer or values, mask.
pub(super) fn column_from_parts<'a>(
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
