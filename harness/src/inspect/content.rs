//! A written file's logical content, read with the harness's own code:
//! every key of the scheme turned back into canonical JSON, the
//! trajectory as its stored updates (a presentation, which the judge
//! resolves). Write trials compare it with the fixture
//! ([`crate::judge::compare_file`]), so a writer that stored other content
//! than it was handed fails on the harness's reading of the file, whatever
//! a reader (the reference's included) makes of it.
//!
//! Only what the comparison needs is read; every breach of a form rule is
//! the other checks' to report. A value that cannot be turned into
//! content (a buffer past its value, a bool byte that is not 0 or 1) ends
//! the reading with a [`Finding`] under its clause.

use serde_json::{Map, Value};

use super::frame_bytes::{self, dtype_kind, DtypeKind, FrameView};
use super::{Finding, Key};

/// Clause ids of the findings made here.
pub mod clause {
    /// The file holds the logical content the writer was handed.
    pub const SAME_CONTENT: &str = "lmdb.model.same-content";
    /// A bool element is one byte, 0 or 1.
    pub const BOOL_BYTE: &str = "mrf1.bool-byte";
    /// A validity mask holds one byte per row, 0 or 1.
    pub const VALIDITY: &str = "mrf1.validity";
}

type Db = heed::Database<heed::types::Bytes, heed::types::Bytes>;

fn unreadable(what: impl Into<String>) -> Finding {
    Finding::new(clause::SAME_CONTENT, what)
}

/// The collection the file holds, in canonical JSON with each record's
/// trajectory as its stored updates; `Err` names why it cannot be read.
pub(super) fn read(db: Db, rtxn: &heed::RoTxn) -> Result<Value, Finding> {
    let get = |key: &[u8]| -> Result<Option<&[u8]>, Finding> {
        db.get(rtxn, key)
            .map_err(|e| unreadable(format!("cannot read a value: {e}")))
    };
    let meta: Value = match get(b"meta")? {
        Some(bytes) => serde_json::from_slice(bytes)
            .map_err(|e| unreadable(format!("meta is not JSON: {e}")))?,
        None => return Err(unreadable("no `meta` key")),
    };
    let index_value = get(b"index")?.ok_or_else(|| unreadable("no `index` key"))?;
    let index = parsed("index", index_value)?;
    let records_block = index
        .blocks()
        .and_then(|b| b.get("records"))
        .and_then(Value::as_object)
        .ok_or_else(|| unreadable("index: no block `records`"))?;
    let first_frame = u64_column(&index, "first_frame")?;
    let n_frames = u64_column(&index, "n_frames")?;
    let mut columns = match block_json("index", &index, "records", records_block)? {
        Value::Object(mut block) => match block.remove("columns") {
            Some(Value::Object(columns)) => columns,
            _ => Map::new(),
        },
        _ => Map::new(),
    };
    let has_trajectory: Vec<bool> =
        match columns.get("has_trajectory").and_then(|c| c.get("values")) {
            Some(Value::Array(flags)) => flags.iter().map(|f| f == &Value::Bool(true)).collect(),
            _ => return Err(unreadable("index: no bool column `has_trajectory`")),
        };
    for binding in ["first_frame", "n_frames", "n_atoms", "has_trajectory"] {
        columns.remove(binding);
    }

    let mut out = Map::new();
    out.insert(
        "meta".into(),
        meta.get("collection").cloned().unwrap_or(Value::Null),
    );
    if let Some(schema) = meta.get("sequence_schema") {
        out.insert("sequence_schema".into(), schema.clone());
    }
    if !columns.is_empty() {
        out.insert("index".into(), Value::Object(columns));
    }
    if let Some(value) = get(b"ff")? {
        let view = parsed("ff", value)?;
        let mut ff = Map::new();
        ff.insert(
            "meta".into(),
            view.header.get("meta").cloned().unwrap_or(Value::Null),
        );
        ff.insert("blocks".into(), blocks_json("ff", &view)?);
        out.insert("forcefield".into(), Value::Object(ff));
    }

    let n_records = first_frame.len();
    if n_frames.len() != n_records || has_trajectory.len() != n_records {
        return Err(unreadable("index: its columns differ in length"));
    }
    let mut records = Vec::with_capacity(n_records);
    for r in 0..n_records {
        let mut record = Map::new();
        let r64 = r as u64;
        if let Some(bytes) = get(&Key::Record(r64).encode())? {
            let meta: Value = serde_json::from_slice(bytes)
                .map_err(|e| unreadable(format!("r:{r}: not JSON: {e}")))?;
            record.insert("meta".into(), meta);
        }
        if let Some(value) = get(&Key::System(r64).encode())? {
            let label = format!("s:{r}");
            let view = parsed(&label, value)?;
            let mut system = Map::new();
            for part in ["meta", "meta_types"] {
                if let Some(v) = view.header.get(part) {
                    system.insert(part.into(), v.clone());
                }
            }
            system.insert("blocks".into(), blocks_json(&label, &view)?);
            if let Some(cell) = view.header.get("box").filter(|b| !b.is_null()) {
                system.insert("box".into(), cell.clone());
            }
            record.insert("system".into(), Value::Object(system));
        }
        if has_trajectory[r] || n_frames[r] > 0 {
            let first = first_frame[r];
            let end = first
                .checked_add(n_frames[r])
                .ok_or_else(|| unreadable("index: first_frame + n_frames overflows"))?;
            let mut frames = Vec::new();
            for j in first..end {
                let label = format!("f:{j}");
                let value = get(&Key::Frame(j).encode())?
                    .ok_or_else(|| unreadable(format!("{label} is missing")))?;
                frames.push(update_json(&label, &parsed(&label, value)?)?);
            }
            let mut trajectory = Map::new();
            trajectory.insert("frames".into(), Value::Array(frames));
            record.insert("trajectory".into(), Value::Object(trajectory));
        }
        records.push(Value::Object(record));
    }
    out.insert("records".into(), Value::Array(records));
    Ok(Value::Object(out))
}

fn parsed<'a>(label: &str, value: &'a [u8]) -> Result<FrameView<'a>, Finding> {
    frame_bytes::parse(value).map_err(|p| Finding::new(p.clause, format!("{label}: {}", p.message)))
}

fn u64_column(index: &FrameView<'_>, name: &str) -> Result<Vec<u64>, Finding> {
    frame_bytes::read_u64_column(index, "records", name)
        .ok_or_else(|| unreadable(format!("index: no readable u64 column `{name}`")))
}

/// A trajectory update as a presented frame: `step`, `time` (when not
/// null), `meta`, `blocks`, `box` (when not null).
fn update_json(label: &str, view: &FrameView<'_>) -> Result<Value, Finding> {
    let mut frame = Map::new();
    for part in ["step", "time", "meta", "box"] {
        if let Some(v) = view.header.get(part).filter(|v| !v.is_null()) {
            frame.insert(part.into(), v.clone());
        }
    }
    frame.insert("blocks".into(), blocks_json(label, view)?);
    Ok(Value::Object(frame))
}

fn blocks_json(label: &str, view: &FrameView<'_>) -> Result<Value, Finding> {
    let mut out = Map::new();
    for (name, entry) in view.blocks().into_iter().flatten() {
        let entry = entry
            .as_object()
            .ok_or_else(|| unreadable(format!("{label}: block `{name}` is not an object")))?;
        out.insert(name.clone(), block_json(label, view, name, entry)?);
    }
    Ok(Value::Object(out))
}

/// One block entry of a header as a canonical block, its columns' values
/// read out of the payload.
fn block_json(
    label: &str,
    view: &FrameView<'_>,
    name: &str,
    entry: &Map<String, Value>,
) -> Result<Value, Finding> {
    let mut block = Map::new();
    block.insert(
        "count".into(),
        entry.get("count").cloned().unwrap_or(Value::Null),
    );
    for part in ["structural_shape", "targets", "attributes"] {
        if let Some(v) = entry.get(part).filter(|v| !v.is_null()) {
            block.insert(part.into(), v.clone());
        }
    }
    let mut columns = Map::new();
    for (col, c) in entry
        .get("columns")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let at = format!("{label}: column `{name}.{col}`");
        columns.insert(col.clone(), column_json(&at, view, name, col, c)?);
    }
    block.insert("columns".into(), Value::Object(columns));
    Ok(Value::Object(block))
}

fn column_json(
    at: &str,
    view: &FrameView<'_>,
    block: &str,
    column: &str,
    entry: &Value,
) -> Result<Value, Finding> {
    let layout = frame_bytes::column_layout(&view.header, block, column)
        .map_err(|e| unreadable(format!("{at}: {e}")))?;
    let n = layout
        .elements()
        .ok_or_else(|| unreadable(format!("{at}: its shape overflows")))?;
    let values = match dtype_kind(&layout.dtype) {
        Some(DtypeKind::String) => match entry.get("values") {
            Some(Value::Array(v)) if v.len() as u64 == n => Value::Array(v.clone()),
            _ => return Err(unreadable(format!("{at}: no values list of {n} strings"))),
        },
        _ => {
            let range = layout
                .buffer_range(view)
                .ok_or_else(|| unreadable(format!("{at}: its buffer is not inside the value")))?;
            Value::Array(decode(at, &layout.dtype, &view.value[range])?)
        }
    };
    let mut out = Map::new();
    out.insert("dtype".into(), Value::from(layout.dtype.clone()));
    out.insert(
        "shape".into(),
        Value::Array(layout.shape.iter().map(|&d| Value::from(d)).collect()),
    );
    out.insert("values".into(), values);
    if let Some(offset) = entry.get("validity") {
        let rows = layout.shape[0];
        let mask = offset
            .as_u64()
            .and_then(|o| (view.payload_start as u64).checked_add(o))
            .and_then(|start| Some(start..start.checked_add(rows)?))
            .filter(|r| r.end <= view.value.len() as u64)
            .ok_or_else(|| unreadable(format!("{at}: its mask is not inside the value")))?;
        let flags = view.value[mask.start as usize..mask.end as usize]
            .iter()
            .map(|&b| match b {
                0 => Ok(Value::Bool(false)),
                1 => Ok(Value::Bool(true)),
                other => Err(Finding::new(
                    clause::VALIDITY,
                    format!("{at}: a mask byte {other} (0 or 1)"),
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.insert("validity".into(), Value::Array(flags));
    }
    if let Some(p) = entry.get("precision") {
        out.insert("precision".into(), p.clone());
    }
    Ok(Value::Object(out))
}

/// Little-endian elements of `dtype` as typed JSON (conventions.md).
fn decode(at: &str, dtype: &str, bytes: &[u8]) -> Result<Vec<Value>, Finding> {
    fn f64_json(x: f64) -> Value {
        if x.is_nan() {
            Value::from("NaN")
        } else if x.is_infinite() {
            Value::from(if x > 0.0 { "Infinity" } else { "-Infinity" })
        } else {
            Value::from(x)
        }
    }
    fn int_json(v: i128) -> Value {
        if v.abs() <= 1 << 53 {
            Value::from(v as i64)
        } else {
            Value::from(v.to_string())
        }
    }
    fn le<const N: usize>(chunk: &[u8]) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(chunk);
        a
    }
    let size = match dtype_kind(dtype) {
        Some(DtypeKind::Buffer(size)) => size as usize,
        _ => return Err(unreadable(format!("{at}: dtype {dtype:?} has no buffer"))),
    };
    bytes
        .chunks_exact(size)
        .map(|c| {
            Ok(match dtype {
                "f64" => f64_json(f64::from_le_bytes(le(c))),
                "c64" => Value::Array(vec![
                    f64_json(f32::from_le_bytes(le(&c[..4])).into()),
                    f64_json(f32::from_le_bytes(le(&c[4..])).into()),
                ]),
                "c128" => Value::Array(vec![
                    f64_json(f64::from_le_bytes(le(&c[..8]))),
                    f64_json(f64::from_le_bytes(le(&c[8..]))),
                ]),
                "bool" => match c[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    other => {
                        return Err(Finding::new(
                            clause::BOOL_BYTE,
                            format!("{at}: a bool byte {other} (0 or 1)"),
                        ))
                    }
                },
                "i8" => int_json(i8::from_le_bytes(le(c)).into()),
                "i16" => int_json(i16::from_le_bytes(le(c)).into()),
                "i32" => int_json(i32::from_le_bytes(le(c)).into()),
                "i64" => int_json(i64::from_le_bytes(le(c)).into()),
                "u8" => int_json(u8::from_le_bytes(le(c)).into()),
                "u16" => int_json(u16::from_le_bytes(le(c)).into()),
                "u32" => int_json(u32::from_le_bytes(le(c)).into()),
                "u64" => int_json(u64::from_le_bytes(le(c)).into()),
                _ => return Err(unreadable(format!("{at}: unknown dtype {dtype:?}"))),
            })
        })
        .collect()
}
