//! Edits of a file's image that many writer bugs share: meta, schema,
//! index, frame and buffer edits, typed-value rewrites and layouts.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::super::image::{Frame, Image};
use super::super::shapes;
use crate::inspect::Key;

/// The binding's own index columns.
pub(super) const BINDING: [&str; 4] = ["first_frame", "n_frames", "n_atoms", "has_trajectory"];

pub(super) fn set(m: &mut Value, pointer: &str, v: Value) -> bool {
    match m.pointer_mut(pointer) {
        Some(slot) if *slot != v => {
            *slot = v;
            true
        }
        _ => false,
    }
}

pub(super) fn remove(m: &mut Value, parent: &str, key: &str) -> bool {
    m.pointer_mut(parent)
        .and_then(Value::as_object_mut)
        .is_some_and(|o| o.remove(key).is_some())
}

pub(super) fn edit_meta(img: &mut Image, edit: impl FnOnce(&mut Value) -> bool) -> bool {
    let mut meta = img.meta();
    let changed = edit(&mut meta);
    if changed {
        img.set_meta(&meta);
    }
    changed
}

/// Each entry of `sequence_schema.<part>` (`blocks` or `meta`).
pub(super) fn edit_schema_entries(
    img: &mut Image,
    part: &str,
    mut edit: impl FnMut(&mut Map<String, Value>) -> bool,
) -> bool {
    edit_meta(img, |m| {
        let Some(entries) = m
            .pointer_mut(&format!("/sequence_schema/{part}"))
            .and_then(Value::as_object_mut)
        else {
            return false;
        };
        entries
            .values_mut()
            .fold(false, |c, e| e.as_object_mut().is_some_and(&mut edit) | c)
    })
}

pub(super) fn edit_schema_columns(
    img: &mut Image,
    mut edit: impl FnMut(&mut Map<String, Value>) -> bool,
) -> bool {
    edit_schema_entries(img, "blocks", |b| {
        let Some(cols) = b.get_mut("columns").and_then(Value::as_object_mut) else {
            return false;
        };
        cols.values_mut().fold(false, |c, col| {
            col.as_object_mut().is_some_and(&mut edit) | c
        })
    })
}

/// Moves the values of `prefix` keys to consecutive numbers, in order,
/// keeping those `keep` says the writer wrote; whether one moved.
pub(super) fn renumber(img: &mut Image, prefix: u8, keep: impl Fn(&[u8]) -> bool) -> bool {
    let keys: Vec<Vec<u8>> = img
        .entries
        .keys()
        .filter(|k| k.len() == 9 && k[0] == prefix)
        .cloned()
        .collect();
    let values: Vec<(Vec<u8>, Vec<u8>)> = keys
        .into_iter()
        .map(|k| {
            let v = img.entries.remove(&k).unwrap_or_default();
            (k, v)
        })
        .collect();
    let mut next = 0u64;
    let mut moved = false;
    for (k, v) in values {
        if !keep(&v) {
            continue;
        }
        let mut key = vec![prefix];
        key.extend_from_slice(&next.to_be_bytes());
        moved |= key != k;
        img.entries.insert(key, v);
        next += 1;
    }
    moved
}

pub(super) fn rekey_frames(img: &mut Image, encode: impl Fn(u64) -> [u8; 8]) -> bool {
    let frames: Vec<Vec<u8>> = img
        .entries
        .keys()
        .filter(|k| k.len() == 9 && k[0] == b'f')
        .cloned()
        .collect();
    let mut changed = false;
    let mut moved = BTreeMap::new();
    for k in frames {
        let j = u64::from_be_bytes(k[1..].try_into().unwrap_or_default());
        let mut key = vec![b'f'];
        key.extend_from_slice(&encode(j));
        changed |= key != k;
        if let Some(v) = img.entries.remove(&k) {
            moved.insert(key, v);
        }
    }
    img.entries.extend(moved);
    changed
}

pub(super) fn frames_per_record(img: &mut Image) -> bool {
    let spans = img.spans();
    let mut moved = BTreeMap::new();
    for &(first, n) in &spans {
        for k in 0..n {
            if let Some(v) = img.entries.remove(&Key::Frame(first + k).encode()) {
                moved.insert(Key::Frame(k).encode(), v);
            }
        }
    }
    img.entries.extend(moved);
    spans.iter().any(|s| s.0 > 0 && s.1 > 0)
}

/// Each record's meta document without its null-valued keys.
pub(super) fn record_nulls_dropped(img: &mut Image) -> bool {
    let mut changed = false;
    for (k, v) in img.entries.iter_mut() {
        if k.len() != 9 || k[0] != b'r' {
            continue;
        }
        let Ok(Value::Object(mut meta)) = serde_json::from_slice::<Value>(v) else {
            continue;
        };
        let before = meta.len();
        meta.retain(|_, x| !x.is_null());
        if meta.len() != before {
            *v = Value::Object(meta).to_string().into_bytes();
            changed = true;
        }
    }
    changed
}

pub(super) fn empty_systems(img: &mut Image) -> bool {
    let empty = Frame {
        header: serde_json::json!({"blocks": {}, "meta": {}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        buffers: BTreeMap::new(),
    };
    let mut added = false;
    for r in 0..img.spans().len() as u64 {
        if img.get(Key::System(r)).is_none() {
            img.set_frame(Key::System(r), &empty);
            added = true;
        }
    }
    added
}

/// For each record, the `atoms` row count of each of its updates (`None`
/// where an update has no `atoms`), when its system has no `atoms`.
pub(super) fn set_n_atoms(img: &mut Image, rule: impl Fn(&[Option<u64>]) -> u64) -> bool {
    let Some(mut n_atoms) = img.index_u64("n_atoms") else {
        return false;
    };
    let atoms = |h: &Map<String, Value>| h.get("blocks")?.get("atoms")?.get("count")?.as_u64();
    for (r, span) in img.spans().into_iter().enumerate() {
        let system = img
            .frame(Key::System(r as u64))
            .and_then(|f| atoms(&f.header));
        if system.is_none() {
            let counts: Vec<Option<u64>> = img.updates(span).iter().map(atoms).collect();
            n_atoms[r] = rule(&counts);
        }
    }
    img.set_index_u64("n_atoms", &n_atoms)
}

pub(super) fn edit_index(img: &mut Image, edit: impl FnOnce(&mut Frame) -> bool) -> bool {
    let Some(mut frame) = img.frame(Key::Index) else {
        return false;
    };
    let changed = edit(&mut frame);
    if changed {
        img.set_frame(Key::Index, &frame);
    }
    changed
}

/// Each frame of the file (systems, updates, index, force field).
pub(super) fn edit_frames(img: &mut Image, mut edit: impl FnMut(&mut Frame) -> bool) -> bool {
    [b's', b'f']
        .into_iter()
        .fold(false, |c, p| edit_frames_with(img, p, &mut edit) | c)
        | edit_index(img, &mut edit)
        | match img
            .entries
            .get(b"ff".as_slice())
            .and_then(|v| Frame::parse(v))
        {
            Some(mut f) => {
                let changed = edit(&mut f);
                if changed {
                    img.entries.insert(b"ff".to_vec(), f.encode(8, true));
                }
                changed
            }
            None => false,
        }
}

pub(super) fn edit_frames_with(
    img: &mut Image,
    prefix: u8,
    mut edit: impl FnMut(&mut Frame) -> bool,
) -> bool {
    let mut changed = false;
    for (k, v) in img.entries.iter_mut() {
        if k.len() != 9 || k[0] != prefix {
            continue;
        }
        if let Some(mut f) = Frame::parse(v) {
            if edit(&mut f) {
                *v = f.encode(8, true);
                changed = true;
            }
        }
    }
    changed
}

/// Each buffer of each frame: `(dtype, is a mask, bytes)`.
pub(super) fn edit_buffers(
    img: &mut Image,
    mut edit: impl FnMut(&str, bool, &mut Vec<u8>) -> bool,
) -> bool {
    edit_frames(img, |f| {
        let dtypes: Vec<_> = f
            .buffers
            .keys()
            .map(|(b, c, m)| f.dtype(b, c).map(|d| (d, *m)))
            .collect();
        f.buffers
            .values_mut()
            .zip(dtypes)
            .fold(false, |changed, (bytes, d)| {
                let before = bytes.clone();
                let Some((dtype, mask)) = d else {
                    return changed;
                };
                edit(&dtype, mask, bytes) && *bytes != before || changed
            })
    })
}

pub(super) fn edit_block_entries(
    img: &mut Image,
    prefix: u8,
    mut edit: impl FnMut(&mut Map<String, Value>) -> bool,
) -> bool {
    img.edit_headers(prefix, |h| {
        let Some(blocks) = h.get_mut("blocks").and_then(Value::as_object_mut) else {
            return false;
        };
        blocks
            .values_mut()
            .fold(false, |c, b| b.as_object_mut().is_some_and(&mut edit) | c)
    })
}

pub(super) fn columns_of(f: &Frame, block: &str) -> Vec<String> {
    f.header
        .get("blocks")
        .and_then(|b| b.get(block))
        .and_then(|b| b.get("columns"))
        .and_then(Value::as_object)
        .map(|c| c.keys().cloned().collect())
        .unwrap_or_default()
}

pub(super) fn drop_column(f: &mut Frame, block: &str, column: &str) {
    if let Some(cols) = f
        .header
        .get_mut("blocks")
        .and_then(|b| b.get_mut(block))
        .and_then(|b| b.get_mut("columns"))
        .and_then(Value::as_object_mut)
    {
        cols.remove(column);
    }
    f.buffers
        .retain(|(b, c, _), _| !(b == block && c == column));
}

pub(super) fn set_column_key(
    f: &mut Frame,
    block: &str,
    column: &str,
    key: &str,
    v: Value,
) -> bool {
    let Some(entry) = f
        .header
        .get_mut("blocks")
        .and_then(|b| b.get_mut(block))
        .and_then(|b| b.get_mut("columns"))
        .and_then(|c| c.get_mut(column))
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    entry.insert(key.into(), v.clone()).as_ref() != Some(&v)
}

/// The fixture's records (none when it has no `records` array).
pub(super) fn fixture_records(fixture: &Value) -> &[Value] {
    fixture
        .get("records")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Every column entry of a frame's header, across its blocks.
pub(super) fn column_entries(f: &mut Frame) -> impl Iterator<Item = &mut Value> {
    f.header
        .get_mut("blocks")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|b| b.values_mut())
        .flat_map(block_columns)
}

/// The column entries of one block's header entry.
pub(super) fn block_columns(block: &mut Value) -> impl Iterator<Item = &mut Value> {
    block
        .get_mut("columns")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|c| c.values_mut())
}

/// Removes `key` from every column entry of the frame; whether one had it.
pub(super) fn drop_column_keys(f: &mut Frame, key: &str) -> bool {
    let mut changed = false;
    for col in column_entries(f) {
        changed |= col.as_object_mut().is_some_and(|c| c.remove(key).is_some());
    }
    changed
}

/// Sets the buffer of a 1-byte column to `bytes`.
pub(super) fn replace(f: &mut Frame, column: &str, mask: bool, bytes: Vec<u8>) -> bool {
    let slot = ("records".to_string(), column.to_string(), mask);
    let changed = f.buffers.get(&slot) != Some(&bytes);
    f.buffers.insert(slot, bytes);
    changed
}

pub(super) fn is_int_tag(tag: &str) -> bool {
    matches!(
        tag,
        "i32" | "i64" | "u32" | "u64" | "i32x3" | "i64x3" | "u32x3" | "u64x3"
    )
}

/// An integer within ±2^53 (or each one of a vector) as its decimal string.
pub(super) fn int_to_string(v: &mut Value) -> bool {
    match v {
        Value::Number(n) if n.is_i64() || n.is_u64() => {
            *v = Value::from(n.to_string());
            true
        }
        Value::Array(items) => items.iter_mut().fold(false, |c, x| int_to_string(x) | c),
        _ => false,
    }
}

/// A decimal string beyond 2^53 (or each one of a vector) as a JSON real.
pub(super) fn big_to_float(v: &mut Value) -> bool {
    match v {
        Value::String(s) => match s.parse::<i128>() {
            Ok(n) => {
                *v = Value::from(n as f64);
                true
            }
            Err(_) => false,
        },
        Value::Array(items) => items.iter_mut().fold(false, |c, x| big_to_float(x) | c),
        _ => false,
    }
}

/// `convert` applied to every step, and to every per-step and system meta
/// value under an integer tag (a `json` or `string` value that looks like
/// a number is not an integer); whether one changed.
pub(super) fn edit_typed_integers(img: &mut Image, convert: fn(&mut Value) -> bool) -> bool {
    let tags = per_step_tags(img);
    let a = img.edit_headers(b'f', |h| {
        let step = h.get_mut("step").is_some_and(convert);
        each_meta(h, |k, v| {
            tags.get(k).is_some_and(|t| is_int_tag(t)) && convert(v)
        }) | step
    });
    let b = img.edit_headers(b's', |h| {
        let types = h.get("meta_types").cloned().unwrap_or_default();
        each_meta(h, |k, v| {
            types.get(k).and_then(Value::as_str).is_some_and(is_int_tag) && convert(v)
        })
    });
    a | b
}

pub(super) fn non_finite_to_null(v: &mut Value) -> bool {
    match v {
        Value::String(s) if ["NaN", "Infinity", "-Infinity"].contains(&s.as_str()) => {
            *v = Value::Null;
            true
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |c, x| non_finite_to_null(x) | c),
        _ => false,
    }
}

/// Each `meta` value of a header.
pub(super) fn each_meta(
    h: &mut Map<String, Value>,
    mut edit: impl FnMut(&str, &mut Value) -> bool,
) -> bool {
    let Some(meta) = h.get_mut("meta").and_then(Value::as_object_mut) else {
        return false;
    };
    meta.iter_mut().fold(false, |c, (k, v)| edit(k, v) | c)
}

pub(super) fn per_step_tags(img: &Image) -> BTreeMap<String, String> {
    img.meta()
        .pointer("/sequence_schema/meta")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, e)| Some((k.clone(), e.get("dtype")?.as_str()?.to_string())))
        .collect()
}

pub(super) fn per_step_fills(img: &Image) -> BTreeMap<String, Value> {
    img.meta()
        .pointer("/sequence_schema/meta")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, e)| Some((k.clone(), e.get("fill")?.clone())))
        .collect()
}

pub(super) fn header_length_in_chars(img: &mut Image) -> bool {
    let mut changed = false;
    for v in img.entries.values_mut() {
        let Ok(view) = crate::inspect::frame_bytes::parse(v) else {
            continue;
        };
        let text = &v[8..8 + view.header_len];
        let chars = String::from_utf8_lossy(text).chars().count();
        if chars != view.header_len {
            v[4..8].copy_from_slice(&(chars as u32).to_le_bytes());
            changed = true;
        }
    }
    changed
}

/// Every frame laid out again with buffers aligned to `align` and the
/// payload padded to 8 or not; whether any value's bytes changed.
pub(super) fn relayout(img: &mut Image, align: usize, padding: bool) -> bool {
    let mut changed = false;
    for v in img.entries.values_mut() {
        let Some(f) = Frame::parse(v) else { continue };
        let conforming = f.encode(8, true);
        let new = f.encode(align, padding);
        if new != conforming {
            *v = new;
            changed = true;
        }
    }
    changed
}

pub(super) fn reverse_elements(dtype: &str, bytes: &mut [u8]) {
    let part = match dtype {
        "c64" => 4,
        "c128" => 8,
        other => match crate::inspect::frame_bytes::dtype_kind(other) {
            Some(crate::inspect::frame_bytes::DtypeKind::Buffer(n)) => n as usize,
            _ => 1,
        },
    };
    if part > 1 {
        bytes.chunks_exact_mut(part).for_each(<[u8]>::reverse);
    }
}

pub(super) fn swap_complex(dtype: &str, bytes: &mut [u8]) -> bool {
    let part = match dtype {
        "c64" => 4,
        "c128" => 8,
        _ => return false,
    };
    for pair in bytes.chunks_exact_mut(2 * part) {
        let (re, im) = pair.split_at_mut(part);
        re.swap_with_slice(im);
    }
    true
}

pub(super) fn ones_to(bytes: &mut [u8], to: u8) -> bool {
    let mut changed = false;
    for b in bytes.iter_mut().filter(|b| **b == 1) {
        *b = to;
        changed = true;
    }
    changed
}

pub(super) fn string_column_major(f: &mut Frame) -> bool {
    let mut changed = false;
    let Some(blocks) = f.header.get_mut("blocks").and_then(Value::as_object_mut) else {
        return false;
    };
    for block in blocks.values_mut() {
        for col in block_columns(block) {
            if col.get("dtype") != Some(&Value::from("string")) {
                continue;
            }
            let (rows, width) = shapes::rows_and_width(&col["shape"]);
            if rows < 2 || width < 2 {
                continue;
            }
            let Some(values) = col.get("values").and_then(Value::as_array).cloned() else {
                continue;
            };
            if values.len() != rows * width {
                continue;
            }
            let transposed: Vec<Value> = (0..rows * width)
                .map(|k| values[(k % rows) * width + k / rows].clone())
                .collect();
            if transposed != values {
                col["values"] = Value::Array(transposed);
                changed = true;
            }
        }
    }
    changed
}

/// Each zero-row column with trailing axes given the shape `[0]`, as a
/// writer that infers an empty column's shape from its values would.
pub(super) fn zero_row_shape_flat(f: &mut Frame) -> bool {
    let mut changed = false;
    for col in column_entries(f) {
        let Some(shape) = col.get_mut("shape").and_then(Value::as_array_mut) else {
            continue;
        };
        if shape.len() > 1 && shape[0].as_u64() == Some(0) {
            shape.truncate(1);
            changed = true;
        }
    }
    changed
}

/// Each trailing axis of length 1 left out of a column's shape (`numpy.squeeze`
/// past the leading axis): `[3, 1]` becomes `[3]`.
pub(super) fn trailing_ones_squeezed(f: &mut Frame) -> bool {
    let mut changed = false;
    for col in column_entries(f) {
        let Some(shape) = col.get_mut("shape").and_then(Value::as_array_mut) else {
            continue;
        };
        let before = shape.len();
        let mut k = 0;
        shape.retain(|n| {
            k += 1;
            k == 1 || n.as_u64() != Some(1)
        });
        changed |= shape.len() != before;
    }
    changed
}

/// The index's own columns without their validity masks (the values under
/// null rows kept); whether a mask had a null row.
pub(super) fn own_index_masks_dropped(f: &mut Frame) -> bool {
    let mut any_null = false;
    for column in columns_of(f, "records") {
        if BINDING.contains(&column.as_str()) {
            continue;
        }
        if let Some(mask) = f.buffers.remove(&("records".into(), column.clone(), true)) {
            any_null |= mask.contains(&0);
        }
        if let Some(entry) = f
            .header
            .get_mut("blocks")
            .and_then(|b| b.get_mut("records"))
            .and_then(|b| b.get_mut("columns"))
            .and_then(|c| c.get_mut(&column))
            .and_then(Value::as_object_mut)
        {
            entry.remove("validity");
        }
    }
    any_null
}

/// Per record with a system in the fixture, its system meta entries that
/// no `meta_types` entry tags and whose value `pick` takes (a writer infers
/// their tags); records without one are left out.
pub(super) fn untagged_system_meta(
    fixture: &Value,
    pick: impl Fn(&Value) -> bool,
) -> Vec<(u64, Vec<(&String, &Value)>)> {
    let mut out = Vec::new();
    for (r, record) in fixture_records(fixture).iter().enumerate() {
        let Some(system) = record.get("system") else {
            continue;
        };
        let given = system.get("meta_types").and_then(Value::as_object);
        let entries: Vec<(&String, &Value)> = system
            .get("meta")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter(|(k, v)| !given.is_some_and(|g| g.contains_key(*k)) && pick(v))
            .collect();
        if !entries.is_empty() {
            out.push((r as u64, entries));
        }
    }
    out
}

/// Record `r`'s stored `meta_types` given `tags` (key, tag); whether its
/// system frame has a `meta_types` to change.
pub(super) fn retag_system_meta(
    img: &mut Image,
    r: u64,
    tags: impl IntoIterator<Item = (String, String)>,
) -> bool {
    let Some(mut f) = img.frame(Key::System(r)) else {
        return false;
    };
    let Some(types) = f
        .header
        .get_mut("meta_types")
        .and_then(Value::as_object_mut)
    else {
        return false;
    };
    for (k, tag) in tags {
        types.insert(k, Value::from(tag));
    }
    img.set_frame(Key::System(r), &f);
    true
}
