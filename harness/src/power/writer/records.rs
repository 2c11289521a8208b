//! Edits across the updates of a record and across records: carried
//! cells and blocks, omissions, precision, record order, declarations.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::super::image::{Frame, Image};
use super::edits::*;
use crate::inspect::Key;

/// The headers of each record's updates, edited with the record's number;
/// payloads kept.
pub(super) fn per_record(
    img: &mut Image,
    mut edit: impl FnMut(usize, &mut [Map<String, Value>]) -> bool,
) -> bool {
    let mut changed = false;
    for (r, (first, n)) in img.spans().into_iter().enumerate() {
        let frames: Vec<Frame> = (first..first + n)
            .filter_map(|j| img.frame(Key::Frame(j)))
            .collect();
        if frames.len() as u64 != n {
            continue;
        }
        let mut headers: Vec<Map<String, Value>> =
            frames.iter().map(|f| f.header.clone()).collect();
        if edit(r, &mut headers) {
            for (k, (mut f, h)) in frames.into_iter().zip(headers).enumerate() {
                f.header = h;
                img.set_frame(Key::Frame(first + k as u64), &f);
            }
            changed = true;
        }
    }
    changed
}

pub(super) fn shifted_meta(img: &mut Image) -> bool {
    per_record(img, |_, ups| {
        let metas: Vec<Option<Value>> = ups.iter().map(|h| h.get("meta").cloned()).collect();
        let mut changed = false;
        for (k, h) in ups.iter_mut().enumerate().skip(1) {
            if let Some(m) = &metas[k - 1] {
                changed |= h.get("meta") != Some(m);
                h.insert("meta".into(), m.clone());
            }
        }
        changed
    })
}

pub(super) fn box_across_records(img: &mut Image) -> bool {
    let mut last: Option<Value> = None;
    let mut changed = false;
    for (first, n) in img.spans() {
        if n == 0 {
            continue;
        }
        let Some(mut f) = img.frame(Key::Frame(first)) else {
            continue;
        };
        let stated = f.header.get("box").filter(|b| !b.is_null()).cloned();
        if stated.is_some() && stated == last {
            f.header.remove("box");
            img.set_frame(Key::Frame(first), &f);
            changed = true;
        }
        // The writer's state: the cell in effect at the record's end.
        for j in first..first + n {
            if let Some(b) = img
                .frame(Key::Frame(j))
                .and_then(|f| f.header.get("box").filter(|b| !b.is_null()).cloned())
            {
                last = Some(b);
            }
        }
    }
    changed
}

/// A block as stored in one update: its header entry without offsets, and
/// its buffers, for comparing two updates of it.
#[derive(Clone, PartialEq)]
pub(super) struct Stored {
    entry: Value,
    buffers: Vec<((String, bool), Vec<u8>)>,
}

pub(super) fn stored_blocks(f: &Frame) -> BTreeMap<String, Stored> {
    let mut out = BTreeMap::new();
    for (name, entry) in f
        .header
        .get("blocks")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        let mut entry = entry.clone();
        for col in block_columns(&mut entry) {
            if let Some(c) = col.as_object_mut() {
                c.remove("offset");
                if c.contains_key("validity") {
                    c.insert("validity".into(), Value::Bool(true));
                }
            }
        }
        let buffers = f
            .buffers
            .iter()
            .filter(|((b, _, _), _)| b == name)
            .map(|((_, c, m), v)| ((c.clone(), *m), v.clone()))
            .collect();
        out.insert(name.clone(), Stored { entry, buffers });
    }
    out
}

pub(super) fn remove_block(f: &mut Frame, name: &str) {
    if let Some(b) = f.header.get_mut("blocks").and_then(Value::as_object_mut) {
        b.remove(name);
    }
    f.buffers.retain(|(b, _, _), _| b != name);
}

pub(super) fn blocks_across_records(img: &mut Image) -> bool {
    let mut state: BTreeMap<String, Stored> = BTreeMap::new();
    let mut changed = false;
    for (first, n) in img.spans() {
        for j in first..first + n {
            let Some(mut f) = img.frame(Key::Frame(j)) else {
                continue;
            };
            let stored = stored_blocks(&f);
            if j == first {
                let same: Vec<&String> = stored
                    .iter()
                    .filter(|(k, s)| state.get(*k) == Some(s))
                    .map(|(k, _)| k)
                    .collect();
                if !same.is_empty() {
                    for k in same {
                        remove_block(&mut f, k);
                    }
                    img.set_frame(Key::Frame(j), &f);
                    changed = true;
                }
            }
            state.extend(stored);
        }
    }
    changed
}

#[derive(Clone, Copy)]
pub(super) enum Compare {
    /// f64 and complex parts by value, as `numpy.array_equal(a, b,
    /// equal_nan=True)` does: -0.0 equals 0.0, and every NaN every NaN.
    ByValue,
    /// Masks left out of the comparison.
    WithoutMasks,
    /// Only the buffers compared: a string column's values, which live in
    /// the header, left out (a writer that hashes the payload).
    WithoutStrings,
}

/// A block's header entry with the values of its string columns left out.
fn without_string_values(e: &Value) -> Value {
    let mut e = e.clone();
    for col in block_columns(&mut e) {
        if let Some(c) = col.as_object_mut() {
            if c.get("dtype").and_then(Value::as_str) == Some("string") {
                c.remove("values");
            }
        }
    }
    e
}

pub(super) fn equal_by(
    kind: Compare,
    dtypes: &BTreeMap<String, String>,
    a: &Stored,
    b: &Stored,
) -> bool {
    if matches!(kind, Compare::WithoutStrings) {
        return without_string_values(&a.entry) == without_string_values(&b.entry)
            && a.buffers == b.buffers;
    }
    if a.entry != b.entry && !matches!(kind, Compare::WithoutMasks) {
        return false;
    }
    let a_bufs: BTreeMap<_, _> = a.buffers.iter().cloned().collect();
    let b_bufs: BTreeMap<_, _> = b.buffers.iter().cloned().collect();
    if matches!(kind, Compare::WithoutMasks) {
        let strip = |e: &Value| {
            let mut e = e.clone();
            for col in e
                .get_mut("columns")
                .and_then(Value::as_object_mut)
                .into_iter()
                .flat_map(|c| c.values_mut())
            {
                if let Some(c) = col.as_object_mut() {
                    c.remove("validity");
                }
            }
            e
        };
        if strip(&a.entry) != strip(&b.entry) {
            return false;
        }
        return a_bufs
            .iter()
            .filter(|((_, m), _)| !m)
            .all(|(k, v)| b_bufs.get(k) == Some(v));
    }
    if a_bufs.keys().ne(b_bufs.keys()) {
        return false;
    }
    a_bufs.iter().all(|((c, m), x)| {
        let y = &b_bufs[&(c.clone(), *m)];
        let width = match dtypes.get(c).map(String::as_str) {
            Some("f64" | "c128") if !m => 8,
            Some("c64") if !m => 4,
            _ => return x == y,
        };
        x.len() == y.len()
            && x.chunks_exact(width)
                .zip(y.chunks_exact(width))
                .all(|(p, q)| {
                    let (p, q) = if width == 8 {
                        (
                            f64::from_le_bytes(p.try_into().unwrap_or_default()),
                            f64::from_le_bytes(q.try_into().unwrap_or_default()),
                        )
                    } else {
                        (
                            f32::from_le_bytes(p.try_into().unwrap_or_default()).into(),
                            f32::from_le_bytes(q.try_into().unwrap_or_default()).into(),
                        )
                    };
                    p == q || (p.is_nan() && q.is_nan())
                })
    })
}

/// A later update of a block left out where the buggy comparison calls it
/// unchanged but it is not bit for bit.
pub(super) fn unchanged_dropped(img: &mut Image, kind: Compare) -> bool {
    let mut changed = false;
    for (first, n) in img.spans() {
        // What the buggy writer believes each block holds.
        let mut believed: BTreeMap<String, Stored> = BTreeMap::new();
        for j in first..first + n {
            let Some(mut f) = img.frame(Key::Frame(j)) else {
                continue;
            };
            let mut dropped = false;
            for (name, s) in stored_blocks(&f) {
                let dtypes: BTreeMap<String, String> = columns_of(&f, &name)
                    .into_iter()
                    .filter_map(|c| Some((c.clone(), f.dtype(&name, &c)?)))
                    .collect();
                match believed.get(&name) {
                    Some(prev) if *prev != s && equal_by(kind, &dtypes, prev, &s) => {
                        remove_block(&mut f, &name);
                        dropped = true;
                    }
                    _ => {
                        believed.insert(name, s);
                    }
                }
            }
            if dropped {
                img.set_frame(Key::Frame(j), &f);
                changed = true;
            }
        }
    }
    changed
}

pub(super) fn omission_as_zero_row(img: &mut Image) -> bool {
    let declared = img
        .meta()
        .pointer("/sequence_schema/blocks")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut changed = false;
    for (first, n) in img.spans() {
        if n == 0 {
            continue;
        }
        let Some(mut f) = img.frame(Key::Frame(first)) else {
            continue;
        };
        let present: Vec<String> = f
            .header
            .get("blocks")
            .and_then(Value::as_object)
            .map(|b| b.keys().cloned().collect())
            .unwrap_or_default();
        let mut added = false;
        for (name, decl) in &declared {
            if present.contains(name) {
                continue;
            }
            let mut columns = Map::new();
            for (col, c) in decl
                .get("columns")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let dtype = c.get("dtype").and_then(Value::as_str).unwrap_or("f64");
                let mut shape = vec![Value::from(0)];
                shape.extend(
                    c.get("trailing")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                );
                let mut entry = serde_json::json!({"dtype": dtype, "shape": shape});
                if dtype == "string" {
                    entry["values"] = serde_json::json!([]);
                } else {
                    f.buffers
                        .insert((name.clone(), col.clone(), false), Vec::new());
                }
                columns.insert(col.clone(), entry);
            }
            let mut entry =
                serde_json::json!({"count": 0, "structural_shape": null, "columns": columns});
            if let Some(t) = decl.get("targets").filter(|t| !t.is_null()) {
                entry["targets"] = t.clone();
            }
            if let Some(b) = f.header.get_mut("blocks").and_then(Value::as_object_mut) {
                b.insert(name.clone(), entry);
                added = true;
            }
        }
        if added {
            img.set_frame(Key::Frame(first), &f);
            changed = true;
        }
    }
    changed
}

pub(super) fn edit_undefined_cells(
    img: &mut Image,
    mut edit: impl FnMut(&mut Map<String, Value>) -> bool,
) -> bool {
    img.edit_headers(b'f', |h| {
        match h.get_mut("box").and_then(Value::as_object_mut) {
            Some(c) if c.get("cell_defined") == Some(&Value::Bool(false)) => edit(c),
            _ => false,
        }
    })
}

pub(super) fn precision_on_updates(img: &mut Image) -> bool {
    let declared = img
        .meta()
        .pointer("/sequence_schema/blocks")
        .cloned()
        .unwrap_or_default();
    img.edit_headers(b'f', |h| {
        let mut changed = false;
        for (name, block) in h
            .get_mut("blocks")
            .and_then(Value::as_object_mut)
            .into_iter()
            .flatten()
        {
            for (col, c) in block
                .get_mut("columns")
                .and_then(Value::as_object_mut)
                .into_iter()
                .flatten()
            {
                let p = declared
                    .get(name)
                    .and_then(|b| b.get("columns"))
                    .and_then(|cs| cs.get(col))
                    .and_then(|d| d.get("precision"));
                if let (Some(p), Some(c)) = (p, c.as_object_mut()) {
                    c.insert("precision".into(), p.clone());
                    changed = true;
                }
            }
        }
        changed
    })
}

pub(super) fn edit_ff(img: &mut Image, edit: impl FnOnce(&mut Frame) -> bool) -> bool {
    let Some(mut f) = img
        .entries
        .get(b"ff".as_slice())
        .and_then(|v| Frame::parse(v))
    else {
        return false;
    };
    let changed = edit(&mut f);
    if changed {
        img.entries.insert(b"ff".to_vec(), f.encode(8, true));
    }
    changed
}

pub(super) fn frames_u32(img: &mut Image) -> bool {
    let frames: Vec<Vec<u8>> = img
        .entries
        .keys()
        .filter(|k| k.len() == 9 && k[0] == b'f')
        .cloned()
        .collect();
    for k in &frames {
        let j = u64::from_be_bytes(k[1..].try_into().unwrap_or_default());
        let mut key = vec![b'f'];
        key.extend_from_slice(&(j as u32).to_be_bytes());
        img.rename(k, key);
    }
    !frames.is_empty()
}

/// Each element of an f64 buffer replaced by its difference from the one
/// before (a delta filter, as Zarr's codecs offer); whether one changed.
pub(super) fn delta(bytes: &mut [u8]) -> bool {
    let values: Vec<f64> = bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect();
    let mut changed = false;
    for (k, c) in bytes.chunks_exact_mut(8).enumerate().skip(1) {
        let d = values[k] - values[k - 1];
        changed |= d.to_bits() != values[k].to_bits();
        c.copy_from_slice(&d.to_le_bytes());
    }
    changed
}

/// Integer columns narrower than 64 bits widened (sign- or zero-extended).
pub(super) fn widen_ints(f: &mut Frame) -> bool {
    let mut changed = false;
    let keys: Vec<(String, String, bool)> = f.buffers.keys().filter(|k| !k.2).cloned().collect();
    for (b, c, m) in keys {
        let Some(dtype) = f.dtype(&b, &c) else {
            continue;
        };
        let (wide, size, signed) = match dtype.as_str() {
            "i8" => ("i64", 1, true),
            "i16" => ("i64", 2, true),
            "i32" => ("i64", 4, true),
            "u8" => ("u64", 1, false),
            "u16" => ("u64", 2, false),
            "u32" => ("u64", 4, false),
            _ => continue,
        };
        let Some(bytes) = f.buffers.get_mut(&(b.clone(), c.clone(), m)) else {
            continue;
        };
        let widened: Vec<u8> = bytes
            .chunks_exact(size)
            .flat_map(|e| {
                let mut v = [0u8; 8];
                v[..size].copy_from_slice(e);
                if signed && e[size - 1] & 0x80 != 0 {
                    v[size..].fill(0xFF);
                }
                v
            })
            .collect();
        *bytes = widened;
        set_column_key(f, &b, &c, "dtype", Value::from(wide));
        changed = true;
    }
    changed
}

/// The records in reverse order: keys, frames and the index's rows.
pub(super) fn reverse_records(img: &mut Image) -> bool {
    let spans = img.spans();
    let n = spans.len();
    if n < 2 {
        return false;
    }
    let Some(mut index) = img.frame(Key::Index) else {
        return false;
    };
    let before = img.entries.clone();
    let mut frames = Vec::new();
    let mut first_frame = Vec::with_capacity(n);
    let mut n_frames = Vec::with_capacity(n);
    let mut moved = BTreeMap::new();
    for (new_r, old_r) in (0..n).rev().enumerate() {
        let (first, count) = spans[old_r];
        first_frame.push(frames.len() as u64);
        n_frames.push(count);
        for j in first..first + count {
            frames.push(
                img.entries
                    .remove(&Key::Frame(j).encode())
                    .unwrap_or_default(),
            );
        }
        for key in [Key::Record(old_r as u64), Key::System(old_r as u64)] {
            if let Some(v) = before.get(&key.encode()) {
                let new_key = match key {
                    Key::Record(_) => Key::Record(new_r as u64),
                    _ => Key::System(new_r as u64),
                };
                moved.insert(new_key.encode(), v.clone());
            }
        }
    }
    img.entries
        .retain(|k, _| !(k.len() == 9 && (k[0] == b'r' || k[0] == b's')));
    img.entries.extend(moved);
    for (j, v) in frames.into_iter().enumerate() {
        img.entries.insert(Key::Frame(j as u64).encode(), v);
    }
    for bytes in index.buffers.values_mut() {
        let row = bytes.len() / n;
        if row > 0 {
            *bytes = bytes.chunks_exact(row).rev().flatten().copied().collect();
        }
    }
    for col in column_entries(&mut index) {
        if let Some(values) = col.get_mut("values").and_then(Value::as_array_mut) {
            let row = values.len() / n;
            if row > 0 {
                let reversed: Vec<Value> =
                    values.chunks_exact(row).rev().flatten().cloned().collect();
                *values = reversed;
            }
        }
    }
    let slot = |name: &str| ("records".to_string(), name.to_string(), false);
    index.buffers.insert(
        slot("first_frame"),
        first_frame.iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    index.buffers.insert(
        slot("n_frames"),
        n_frames.iter().flat_map(|v| v.to_le_bytes()).collect(),
    );
    img.set_frame(Key::Index, &index);
    img.entries != before
}

/// A writer derives the declaration it was not handed from the first
/// record with frames only.
pub(super) fn schema_from_first_record(img: &mut Image, fixture: &Value) -> bool {
    if fixture.get("sequence_schema").is_some() {
        return false;
    }
    let Some(&span) = img.spans().iter().find(|s| s.1 > 0) else {
        return false;
    };
    let seen: std::collections::BTreeSet<String> = img
        .updates(span)
        .iter()
        .flat_map(|h| {
            h.get("blocks")
                .and_then(Value::as_object)
                .map(|b| b.keys().cloned().collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect();
    edit_meta(img, |m| {
        let Some(blocks) = m
            .pointer_mut("/sequence_schema/blocks")
            .and_then(Value::as_object_mut)
        else {
            return false;
        };
        let before = blocks.len();
        blocks.retain(|k, _| seen.contains(k));
        blocks.len() != before
    })
}

/// Blocks other than `atoms` written only at their first update in each
/// record.
pub(super) fn topology_once(img: &mut Image) -> bool {
    let mut changed = false;
    for (first, n) in img.spans() {
        let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
        for j in first..first + n {
            let Some(mut f) = img.frame(Key::Frame(j)) else {
                continue;
            };
            let names: Vec<String> = f
                .header
                .get("blocks")
                .and_then(Value::as_object)
                .map(|b| b.keys().cloned().collect())
                .unwrap_or_default();
            let mut dropped = false;
            for name in names.into_iter().filter(|n| n != "atoms") {
                if !seen.insert(name.clone()) {
                    remove_block(&mut f, &name);
                    dropped = true;
                }
            }
            if dropped {
                img.set_frame(Key::Frame(j), &f);
                changed = true;
            }
        }
    }
    changed
}

/// An aligned block left out of an update where its target's row count
/// changes.
pub(super) fn aligned_not_restated(img: &mut Image) -> bool {
    let aligned: Vec<(String, String)> = img
        .meta()
        .pointer("/sequence_schema/blocks")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, b)| Some((name.clone(), b.get("aligned_with")?.as_str()?.to_string())))
        .collect();
    let mut changed = false;
    for (first, n) in img.spans() {
        let mut rows: BTreeMap<String, u64> = BTreeMap::new();
        for j in first..first + n {
            let Some(mut f) = img.frame(Key::Frame(j)) else {
                continue;
            };
            let count = |f: &Frame, b: &str| f.header.get("blocks")?.get(b)?.get("count")?.as_u64();
            let mut dropped = false;
            for (block, target) in &aligned {
                let Some(now) = count(&f, target) else {
                    continue;
                };
                let grew = rows.get(target).is_some_and(|&was| was != now);
                if grew && j > first && count(&f, block).is_some() {
                    remove_block(&mut f, block);
                    dropped = true;
                }
            }
            for (_, target) in &aligned {
                if let Some(now) = count(&f, target) {
                    rows.insert(target.clone(), now);
                }
            }
            if dropped {
                img.set_frame(Key::Frame(j), &f);
                changed = true;
            }
        }
    }
    changed
}

/// System meta values the fixture leaves untagged and gives as integers,
/// tagged and written as f64.
pub(super) fn numbers_as_f64(img: &mut Image, fixture: &Value) -> bool {
    let mut changed = false;
    for (r, entries) in untagged_system_meta(fixture, |v| v.is_i64() || v.is_u64()) {
        let Some(mut f) = img.frame(Key::System(r)) else {
            continue;
        };
        for (k, _) in &entries {
            if let Some(v) = f.header.get_mut("meta").and_then(|m| m.get_mut(*k)) {
                *v = Value::from(v.as_f64().unwrap_or_default());
            }
            if let Some(t) = f
                .header
                .get_mut("meta_types")
                .and_then(Value::as_object_mut)
            {
                t.insert((*k).clone(), Value::from("f64"));
            }
        }
        img.set_frame(Key::System(r), &f);
        changed = true;
    }
    changed
}

/// A cell written again only where its vectors, origin or `cell_defined`
/// change: an update whose cell differs from the one in effect by its
/// boundary alone leaves it out.
pub(super) fn boundary_change_missed(img: &mut Image) -> bool {
    let without_boundary = |b: &Value| {
        let mut b = b.clone();
        if let Some(o) = b.as_object_mut() {
            o.remove("boundary");
        }
        b
    };
    per_record(img, |_, ups| {
        let mut cell: Option<Value> = None;
        let mut changed = false;
        for h in ups.iter_mut() {
            let Some(b) = h.get("box").filter(|b| !b.is_null()).map(without_boundary) else {
                continue;
            };
            if cell.as_ref() == Some(&b) {
                h.remove("box");
                changed = true;
            } else {
                cell = Some(b);
            }
        }
        changed
    })
}

/// Two JSON values equal with every number compared as an f64 by value
/// (-0.0 equals 0.0), as a writer comparing parsed cells with `==` does.
fn equal_by_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal_by_value(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| equal_by_value(p, q)))
        }
        _ => a == b,
    }
}

/// A cell written again only where it changes by value: an update whose
/// cell differs from the one in effect by the sign of a zero alone leaves
/// it out.
pub(super) fn box_change_by_value(img: &mut Image) -> bool {
    per_record(img, |_, ups| {
        let mut cell: Option<Value> = None;
        let mut changed = false;
        for h in ups.iter_mut() {
            let Some(b) = h.get("box").filter(|b| !b.is_null()).cloned() else {
                continue;
            };
            if cell.as_ref().is_some_and(|c| equal_by_value(c, &b)) {
                h.remove("box");
                changed = true;
            } else {
                cell = Some(b);
            }
        }
        changed
    })
}

/// A cell written again wherever its presentation differs as JSON text
/// from the previous frame's (defaults spelled out, an undefined cell's
/// meaningless vectors), although the cell in effect is unchanged.
pub(super) fn box_restated_as_presented(img: &mut Image, fixture: &Value) -> bool {
    let records = fixture_records(fixture);
    per_record(img, |r, ups| {
        let Some(frames) = records
            .get(r)
            .and_then(|rec| rec.pointer("/trajectory/frames"))
            .and_then(Value::as_array)
        else {
            return false;
        };
        let (mut presented, mut cell): (Option<&Value>, Option<Value>) = (None, None);
        let mut changed = false;
        for (h, given) in ups.iter_mut().zip(frames) {
            if let Some(b) = h.get("box").filter(|b| !b.is_null()) {
                cell = Some(b.clone());
            }
            let Some(b) = given.get("box") else {
                continue;
            };
            if presented.is_some_and(|p| p != b) && !h.contains_key("box") {
                if let Some(c) = &cell {
                    h.insert("box".into(), c.clone());
                    changed = true;
                }
            }
            presented = Some(b);
        }
        changed
    })
}

/// Whether `time` is written decided once, from the collection's first
/// trajectory with frames: when it has none, no update carries `time`.
pub(super) fn time_from_first_trajectory(img: &mut Image) -> bool {
    let Some(&(first, _)) = img.spans().iter().find(|s| s.1 > 0) else {
        return false;
    };
    let timed = img
        .frame(Key::Frame(first))
        .is_some_and(|f| f.header.contains_key("time"));
    !timed && img.edit_headers(b'f', |h| h.remove("time").is_some())
}

/// A block's header entry and buffers as one update stores them.
type BlockCopy = (Value, Vec<((String, String, bool), Vec<u8>)>);

fn copy_block(f: &Frame, name: &str) -> Option<BlockCopy> {
    let entry = f.header.get("blocks")?.get(name)?.clone();
    let buffers = f
        .buffers
        .iter()
        .filter(|((b, _, _), _)| b == name)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    Some((entry, buffers))
}

/// A writer that does not remember a zero-row update as the content a
/// block carries: a block presented again with the rows it had before it
/// was emptied compares equal and is left out (it reads back empty), and
/// every zero-row presentation differs from what it remembers, so it
/// writes each again (from the fixture: the conforming file leaves out a
/// zero-row presentation of a block already empty). Shows where a block
/// was left out.
pub(super) fn reappear_after_empty(img: &mut Image, fixture: &Value) -> bool {
    let records = fixture_records(fixture);
    let count = |e: &Value| e.get("count").and_then(Value::as_u64);
    let mut shows = false;
    for (r, (first, n)) in img.spans().into_iter().enumerate() {
        let presented = records
            .get(r)
            .and_then(|x| x.pointer("/trajectory/frames"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // What the writer compares a presented block with: its last
        // non-empty update.
        let mut believed: BTreeMap<String, Stored> = BTreeMap::new();
        let mut last_empty: BTreeMap<String, BlockCopy> = BTreeMap::new();
        for k in 0..n {
            let Some(mut f) = img.frame(Key::Frame(first + k)) else {
                continue;
            };
            let stored = stored_blocks(&f);
            let mut edited = false;
            for (name, s) in &stored {
                if count(&s.entry) == Some(0) {
                    last_empty.extend(copy_block(&f, name).map(|c| (name.clone(), c)));
                } else if believed.get(name) == Some(s) {
                    remove_block(&mut f, name);
                    edited = true;
                    shows = true;
                } else {
                    believed.insert(name.clone(), s.clone());
                }
            }
            let frame = presented.get(k as usize);
            for (name, b) in frame
                .and_then(|x| x.get("blocks"))
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                if count(b) != Some(0) || stored.contains_key(name) {
                    continue;
                }
                let Some((entry, buffers)) = last_empty.get(name).cloned() else {
                    continue;
                };
                if let Some(blocks) = f.header.get_mut("blocks").and_then(Value::as_object_mut) {
                    blocks.insert(name.clone(), entry);
                    f.buffers.extend(buffers);
                    edited = true;
                }
            }
            if edited {
                img.set_frame(Key::Frame(first + k), &f);
            }
        }
    }
    shows
}
