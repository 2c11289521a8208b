//! The harness's own reading of frame bytes (`MRF1`), DIGEST §4.
//!
//! ```text
//! value   := magic | header_length | header | padding | payload
//! magic   := "MRF1"; header_length := u32 LE; header := UTF-8 JSON object
//! padding := zero bytes up to the next multiple of 8 from the start of value
//! ```
//!
//! [`parse`] splits a value into its header and payload; [`check`] applies
//! every rule a reader enforces on frame bytes and reports each breach with
//! its clause id. Neither ever panics, and neither allocates more than the
//! value's own size (plus the parsed header).

use serde_json::{Map, Value};

/// The four magic bytes that open every frame-bytes value.
pub const MAGIC: &[u8; 4] = b"MRF1";

/// Clause ids of the frame-bytes rules (exact strings of `spec-map.toml`).
pub mod clause {
    /// A value shorter than 8 bytes.
    pub const TOO_SHORT: &str = "mrf1.too-short";
    /// The magic is not `MRF1`.
    pub const MAGIC: &str = "mrf1.magic";
    /// The header (or its padding) runs past the value.
    pub const HEADER_BOUNDS: &str = "mrf1.header-bounds";
    /// The padding after the header holds a byte that is not zero.
    pub const PADDING: &str = "mrf1.padding";
    /// The header is not a UTF-8 JSON object of the expected form.
    pub const HEADER_JSON: &str = "mrf1.header-json";
    /// A dtype outside the closed set.
    pub const DTYPE: &str = "mrf1.dtype";
    /// An offset that is not a multiple of 8.
    pub const OFFSET_ALIGNED: &str = "mrf1.offset-aligned";
    /// A buffer or mask that runs past the value.
    pub const BUFFER_BOUNDS: &str = "mrf1.buffer-bounds";
    /// Size arithmetic that overflows.
    pub const SIZE_OVERFLOW: &str = "mrf1.size-overflow";
    /// A string column whose `values` list does not match its shape.
    pub const STRING_VALUES: &str = "mrf1.string-values";
    /// A bool element that is not the byte 0 or 1.
    pub const BOOL_BYTE: &str = "mrf1.bool-byte";
    /// A validity mask byte that is not 0 or 1.
    pub const VALIDITY: &str = "mrf1.validity";
}

/// The most findings [`check`] reports for one value.
const MAX_FRAME_FINDINGS: usize = 100;

/// What a column's dtype stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtypeKind {
    /// A numeric buffer with this item size in bytes.
    Buffer(u64),
    /// A string column: values in the header, no buffer.
    String,
}

/// The kind of a dtype of the closed set of 13 (DIGEST §5), `None` outside it.
pub fn dtype_kind(dtype: &str) -> Option<DtypeKind> {
    Some(match dtype {
        "f64" | "i64" | "u64" | "c64" => DtypeKind::Buffer(8),
        "i8" | "u8" | "bool" => DtypeKind::Buffer(1),
        "i16" | "u16" => DtypeKind::Buffer(2),
        "i32" | "u32" => DtypeKind::Buffer(4),
        "c128" => DtypeKind::Buffer(16),
        "string" => DtypeKind::String,
        _ => return None,
    })
}

/// One breach of a frame-bytes rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameProblem {
    /// The clause id the breach falls under.
    pub clause: &'static str,
    /// What is wrong, without the key (the caller adds it).
    pub message: String,
}

fn problem(clause: &'static str, message: impl Into<String>) -> FrameProblem {
    FrameProblem {
        clause,
        message: message.into(),
    }
}

/// A frame-bytes value split into its parts.
#[derive(Debug, Clone)]
pub struct FrameView<'a> {
    /// The whole value.
    pub value: &'a [u8],
    /// The decoded header.
    pub header: Map<String, Value>,
    /// Byte length of the header JSON (as stored after the magic).
    pub header_len: usize,
    /// Where the payload starts: header end rounded up to 8. May exceed
    /// `value.len()` when the padding is cut off (then the payload is empty).
    pub payload_start: usize,
}

impl<'a> FrameView<'a> {
    /// The payload: the column buffers (empty when the value ends early).
    pub fn payload(&self) -> &'a [u8] {
        self.value.get(self.payload_start..).unwrap_or(&[])
    }

    /// The block entries of the header, when `blocks` is an object.
    pub fn blocks(&self) -> Option<&Map<String, Value>> {
        self.header.get("blocks").and_then(Value::as_object)
    }
}

/// Rounds `n` up to the next multiple of 8 (`None` on overflow).
pub fn round_up_8(n: u64) -> Option<u64> {
    n.checked_add(7).map(|m| m & !7)
}

/// Splits a frame-bytes value; the magic must be `MRF1`.
pub fn parse(value: &[u8]) -> Result<FrameView<'_>, FrameProblem> {
    parse_inner(value, true)
}

/// Splits a frame-bytes value without looking at the magic (for recipes,
/// which may edit the header of a value whose magic was broken on purpose).
pub fn parse_ignoring_magic(value: &[u8]) -> Result<FrameView<'_>, FrameProblem> {
    parse_inner(value, false)
}

fn parse_inner(value: &[u8], require_magic: bool) -> Result<FrameView<'_>, FrameProblem> {
    if value.len() < 8 {
        return Err(problem(
            clause::TOO_SHORT,
            format!(
                "value is {} bytes, shorter than magic + header length (8)",
                value.len()
            ),
        ));
    }
    if require_magic && &value[..4] != MAGIC {
        return Err(problem(
            clause::MAGIC,
            format!("magic is {}, not \"MRF1\"", show_bytes(&value[..4])),
        ));
    }
    let header_len = u32::from_le_bytes([value[4], value[5], value[6], value[7]]);
    let header_end = 8u64 + u64::from(header_len);
    if header_end > value.len() as u64 {
        return Err(problem(
            clause::HEADER_BOUNDS,
            format!(
                "header of {header_len} bytes ends at byte {header_end}, past the value ({} bytes)",
                value.len()
            ),
        ));
    }
    let header_end = header_end as usize;
    let text = std::str::from_utf8(&value[8..header_end])
        .map_err(|e| problem(clause::HEADER_JSON, format!("header is not UTF-8: {e}")))?;
    let header = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => map,
        Ok(other) => {
            return Err(problem(
                clause::HEADER_JSON,
                format!("header is JSON {}, not an object", json_kind(&other)),
            ))
        }
        Err(e) => {
            return Err(problem(
                clause::HEADER_JSON,
                format!("header is not JSON: {e}"),
            ))
        }
    };
    // header_end <= value.len() <= usize::MAX, so +7 cannot overflow u64.
    let payload_start = round_up_8(header_end as u64).unwrap_or(u64::MAX) as usize;
    Ok(FrameView {
        value,
        header,
        header_len: header_len as usize,
        payload_start,
    })
}

/// Checks a frame-bytes value against every frame-bytes rule. Returns the
/// parsed view when the value could be split (even if columns are broken),
/// and every problem found (at most 100).
pub fn check(value: &[u8]) -> (Option<FrameView<'_>>, Vec<FrameProblem>) {
    let view = match parse(value) {
        Ok(view) => view,
        Err(p) => return (None, vec![p]),
    };
    let mut out = Vec::new();
    let header_end = 8 + view.header_len;
    if view.payload_start > value.len() {
        out.push(problem(
            clause::HEADER_BOUNDS,
            format!(
                "padding after the header runs past the value: the payload must start at byte {}, the value has {} bytes",
                view.payload_start,
                value.len()
            ),
        ));
    } else if value[header_end..view.payload_start]
        .iter()
        .any(|&b| b != 0)
    {
        out.push(problem(
            clause::PADDING,
            format!(
                "padding bytes {header_end}..{} are not all zero",
                view.payload_start
            ),
        ));
    }
    let payload = view.payload();
    match view.header.get("blocks") {
        None => out.push(problem(clause::HEADER_JSON, "header has no `blocks`")),
        Some(Value::Object(blocks)) => {
            for (name, block) in blocks {
                if out.len() >= MAX_FRAME_FINDINGS {
                    break;
                }
                check_block(name, block, payload, &mut out);
            }
        }
        Some(other) => out.push(problem(
            clause::HEADER_JSON,
            format!("`blocks` is {}, not an object", json_kind(other)),
        )),
    }
    out.truncate(MAX_FRAME_FINDINGS);
    (Some(view), out)
}

fn check_block(name: &str, block: &Value, payload: &[u8], out: &mut Vec<FrameProblem>) {
    let Some(block) = block.as_object() else {
        out.push(problem(
            clause::HEADER_JSON,
            format!("block `{name}` is {}, not an object", json_kind(block)),
        ));
        return;
    };
    let count = match block.get("count") {
        Some(v) if v.is_u64() => v.as_u64(),
        Some(v) => {
            out.push(problem(
                clause::HEADER_JSON,
                format!("block `{name}`: count is {v}, not an unsigned integer"),
            ));
            None
        }
        None => {
            out.push(problem(
                clause::HEADER_JSON,
                format!("block `{name}` has no count"),
            ));
            None
        }
    };
    match block.get("columns") {
        Some(Value::Object(columns)) => {
            for (col, entry) in columns {
                if out.len() >= MAX_FRAME_FINDINGS {
                    return;
                }
                check_column(name, col, entry, count, payload, out);
            }
        }
        Some(other) => out.push(problem(
            clause::HEADER_JSON,
            format!(
                "block `{name}`: columns is {}, not an object",
                json_kind(other)
            ),
        )),
        None => out.push(problem(
            clause::HEADER_JSON,
            format!("block `{name}` has no columns"),
        )),
    }
}

fn check_column(
    block: &str,
    col: &str,
    entry: &Value,
    count: Option<u64>,
    payload: &[u8],
    out: &mut Vec<FrameProblem>,
) {
    let payload_len = payload.len() as u64;
    // One byte per element, 0 or 1 (a bool buffer, a validity mask),
    // where the bytes lie inside the payload (else reported as such).
    let not_a_flag = |start: u64, len: u64| -> Option<u8> {
        let end = start.checked_add(len)?;
        let bytes = payload.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?)?;
        bytes.iter().copied().find(|&b| b > 1)
    };
    let at = format!("column `{block}.{col}`");
    let Some(entry) = entry.as_object() else {
        out.push(problem(
            clause::HEADER_JSON,
            format!("{at} is {}, not an object", json_kind(entry)),
        ));
        return;
    };
    let kind = match entry.get("dtype") {
        Some(Value::String(d)) => match dtype_kind(d) {
            Some(kind) => Some(kind),
            None => {
                out.push(problem(
                    clause::DTYPE,
                    format!("{at}: dtype {d:?} is outside the closed set"),
                ));
                None
            }
        },
        Some(other) => {
            out.push(problem(
                clause::DTYPE,
                format!("{at}: dtype is {other}, not a dtype name"),
            ));
            None
        }
        None => {
            out.push(problem(clause::DTYPE, format!("{at} has no dtype")));
            None
        }
    };
    let shape = match entry.get("shape") {
        Some(Value::Array(dims)) if !dims.is_empty() && dims.iter().all(Value::is_u64) => {
            Some(dims.iter().filter_map(Value::as_u64).collect::<Vec<u64>>())
        }
        Some(other) => {
            out.push(problem(
                clause::HEADER_JSON,
                format!("{at}: shape {other} is not a non-empty list of unsigned integers"),
            ));
            None
        }
        None => {
            out.push(problem(clause::HEADER_JSON, format!("{at} has no shape")));
            None
        }
    };
    if let (Some(shape), Some(count)) = (&shape, count) {
        if shape[0] != count {
            out.push(problem(
                clause::HEADER_JSON,
                format!(
                    "{at}: shape[0] = {} differs from the block count {count}",
                    shape[0]
                ),
            ));
        }
    }
    let elements = match &shape {
        Some(shape) => match shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)) {
            Some(n) => Some(n),
            None => {
                out.push(problem(
                    clause::SIZE_OVERFLOW,
                    format!("{at}: the product of shape {shape:?} overflows u64"),
                ));
                None
            }
        },
        None => None,
    };

    match kind {
        Some(DtypeKind::String) => {
            if entry.contains_key("offset") {
                out.push(problem(
                    clause::STRING_VALUES,
                    format!("{at}: a string column has no buffer, but carries an offset"),
                ));
            }
            match entry.get("values") {
                Some(Value::Array(values)) => {
                    if let Some(n) = elements {
                        if values.len() as u64 != n {
                            out.push(problem(
                                clause::STRING_VALUES,
                                format!(
                                    "{at}: {} values for shape {:?} ({n} elements)",
                                    values.len(),
                                    shape.as_deref().unwrap_or(&[])
                                ),
                            ));
                        }
                    }
                    if let Some(i) = values.iter().position(|v| !v.is_string()) {
                        out.push(problem(
                            clause::STRING_VALUES,
                            format!("{at}: values[{i}] is {}, not a string", values[i]),
                        ));
                    }
                }
                Some(other) => out.push(problem(
                    clause::STRING_VALUES,
                    format!("{at}: values is {}, not a list", json_kind(other)),
                )),
                None => out.push(problem(
                    clause::STRING_VALUES,
                    format!("{at}: a string column without a values list"),
                )),
            }
        }
        Some(DtypeKind::Buffer(item)) => match entry.get("offset") {
            Some(v) if v.is_u64() => {
                let offset = v.as_u64().unwrap_or(0);
                if offset % 8 != 0 {
                    out.push(problem(
                        clause::OFFSET_ALIGNED,
                        format!("{at}: offset {offset} is not a multiple of 8"),
                    ));
                }
                if let Some(n) = elements {
                    match n
                        .checked_mul(item)
                        .and_then(|bytes| offset.checked_add(bytes).map(|end| (bytes, end)))
                    {
                        Some((bytes, end)) => {
                            if end > payload_len {
                                out.push(problem(
                                    clause::BUFFER_BOUNDS,
                                    format!(
                                        "{at}: buffer of {bytes} bytes at offset {offset} runs past the payload ({payload_len} bytes)"
                                    ),
                                ));
                            } else if entry.get("dtype") == Some(&Value::from("bool")) {
                                if let Some(b) = not_a_flag(offset, bytes) {
                                    out.push(problem(
                                        clause::BOOL_BYTE,
                                        format!("{at}: a bool element is the byte {b} (0 or 1)"),
                                    ));
                                }
                            }
                        }
                        None => out.push(problem(
                            clause::SIZE_OVERFLOW,
                            format!(
                                "{at}: offset {offset} + {n} elements x {item} bytes overflows u64"
                            ),
                        )),
                    }
                }
            }
            Some(other) => out.push(problem(
                clause::HEADER_JSON,
                format!("{at}: offset {other} is not an unsigned integer"),
            )),
            None => out.push(problem(
                clause::HEADER_JSON,
                format!("{at}: a numeric column without an offset"),
            )),
        },
        None => {}
    }

    match entry.get("validity") {
        None => {}
        Some(v) if v.is_u64() => {
            let offset = v.as_u64().unwrap_or(0);
            if offset % 8 != 0 {
                out.push(problem(
                    clause::OFFSET_ALIGNED,
                    format!("{at}: validity offset {offset} is not a multiple of 8"),
                ));
            }
            if let Some(rows) = shape.as_ref().map(|s| s[0]) {
                match offset.checked_add(rows) {
                    Some(end) if end > payload_len => out.push(problem(
                        clause::BUFFER_BOUNDS,
                        format!(
                            "{at}: validity mask of {rows} bytes at offset {offset} runs past the payload ({payload_len} bytes)"
                        ),
                    )),
                    Some(_) => {
                        if let Some(b) = not_a_flag(offset, rows) {
                            out.push(problem(
                                clause::VALIDITY,
                                format!("{at}: a validity mask byte is {b} (0 or 1)"),
                            ));
                        }
                    }
                    None => out.push(problem(
                        clause::SIZE_OVERFLOW,
                        format!("{at}: validity offset {offset} + {rows} overflows u64"),
                    )),
                }
            }
        }
        Some(other) => out.push(problem(
            clause::HEADER_JSON,
            format!("{at}: validity {other} is not an unsigned integer offset"),
        )),
    }
}

/// Where a numeric column's buffer lies, as its header entry says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnLayout {
    /// The dtype name.
    pub dtype: String,
    /// The full shape.
    pub shape: Vec<u64>,
    /// Item size in bytes (`None` for string columns).
    pub item_size: Option<u64>,
    /// Offset of the buffer into the payload (numeric columns).
    pub offset: Option<u64>,
}

impl ColumnLayout {
    /// Number of elements, `prod(shape)` (`None` on overflow).
    pub fn elements(&self) -> Option<u64> {
        self.shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
    }

    /// The byte range of the buffer within the value, checked against it.
    pub fn buffer_range(&self, view: &FrameView<'_>) -> Option<std::ops::Range<usize>> {
        let bytes = self.elements()?.checked_mul(self.item_size?)?;
        let start = (view.payload_start as u64).checked_add(self.offset?)?;
        let end = start.checked_add(bytes)?;
        if end > view.value.len() as u64 {
            return None;
        }
        Some(start as usize..end as usize)
    }
}

/// The layout of column `column` of block `block`, read from the header.
pub fn column_layout(
    header: &Map<String, Value>,
    block: &str,
    column: &str,
) -> Result<ColumnLayout, String> {
    let entry = header
        .get("blocks")
        .and_then(Value::as_object)
        .ok_or("header has no blocks object")?
        .get(block)
        .ok_or_else(|| format!("no block `{block}`"))?
        .get("columns")
        .and_then(Value::as_object)
        .ok_or_else(|| format!("block `{block}` has no columns object"))?
        .get(column)
        .and_then(Value::as_object)
        .ok_or_else(|| format!("block `{block}` has no column `{column}`"))?;
    let dtype = entry
        .get("dtype")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("column `{block}.{column}` has no dtype"))?;
    let kind = dtype_kind(dtype)
        .ok_or_else(|| format!("column `{block}.{column}`: unknown dtype {dtype:?}"))?;
    let shape = entry
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|dims| dims.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
        .filter(|dims| !dims.is_empty())
        .ok_or_else(|| format!("column `{block}.{column}` has no valid shape"))?;
    Ok(ColumnLayout {
        dtype: dtype.to_string(),
        shape,
        item_size: match kind {
            DtypeKind::Buffer(n) => Some(n),
            DtypeKind::String => None,
        },
        offset: entry.get("offset").and_then(Value::as_u64),
    })
}

/// Reads a `u64` column's buffer; `None` unless the column is `u64`, 1-D and
/// its buffer lies within the value.
pub fn read_u64_column(view: &FrameView<'_>, block: &str, column: &str) -> Option<Vec<u64>> {
    let layout = column_layout(&view.header, block, column).ok()?;
    if layout.dtype != "u64" || layout.shape.len() != 1 {
        return None;
    }
    let range = layout.buffer_range(view)?;
    Some(
        view.value[range]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect(),
    )
}

/// Re-encodes a frame-bytes value with a new header: same magic bytes as
/// `old` (whatever they are), new header length, zero padding to 8, and the
/// old payload unchanged.
pub fn reencode(old: &FrameView<'_>, header: &Map<String, Value>) -> Result<Vec<u8>, String> {
    let json = serde_json::to_vec(header).map_err(|e| e.to_string())?;
    reencode_text(old, &json)
}

/// Re-encodes a frame-bytes value with `json` as its header text, taken
/// as it is (it need not be valid JSON), as [`reencode`] does.
pub fn reencode_text(old: &FrameView<'_>, json: &[u8]) -> Result<Vec<u8>, String> {
    let len = u32::try_from(json.len()).map_err(|_| "header longer than u32::MAX bytes")?;
    let payload = old.payload();
    let mut out = Vec::with_capacity(16 + json.len() + payload.len());
    out.extend_from_slice(&old.value[..4]);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(json);
    out.resize(out.len().next_multiple_of(8), 0);
    out.extend_from_slice(payload);
    Ok(out)
}

/// A short name for a JSON value's kind, for messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Shows bytes as text when printable ASCII, as hex otherwise.
fn show_bytes(bytes: &[u8]) -> String {
    if bytes.iter().all(|b| b.is_ascii_graphic()) {
        format!("{:?}", String::from_utf8_lossy(bytes))
    } else {
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        format!("0x{hex}")
    }
}
