//! Shapes a file can have that a buggy implementation refuses although the
//! text allows them, or reads although the text has it refused; shared by
//! the writer's and the reader's catalogs.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::image::{Frame, Image};
use crate::inspect::{frame_bytes, Key};

/// Records whose index says they have a trajectory (`has_trajectory`).
pub fn has_trajectory(img: &Image) -> Vec<bool> {
    img.frame(Key::Index)
        .and_then(|f| {
            f.buffers
                .get(&("records".into(), "has_trajectory".into(), false))
                .map(|b| b.iter().map(|&x| x == 1).collect())
        })
        .unwrap_or_default()
}

/// A record whose trajectory has zero frames.
pub fn zero_frame_trajectory(img: &Image) -> bool {
    img.spans()
        .iter()
        .zip(has_trajectory(img))
        .any(|(span, has)| has && span.1 == 0)
}

/// A record without a system, or without a trajectory.
pub fn missing_part(img: &Image) -> bool {
    let flags = has_trajectory(img);
    (0..img.spans().len()).any(|r| {
        img.get(Key::System(r as u64)).is_none() || !flags.get(r).copied().unwrap_or(false)
    })
}

/// A record with frames that presents only some of the declared blocks.
pub fn block_subset(img: &Image) -> bool {
    let declared: BTreeSet<String> = img
        .meta()
        .pointer("/sequence_schema/blocks")
        .and_then(Value::as_object)
        .map(|b| b.keys().cloned().collect())
        .unwrap_or_default();
    img.spans().into_iter().filter(|s| s.1 > 0).any(|span| {
        let presented: BTreeSet<String> = img
            .updates(span)
            .iter()
            .flat_map(|h| {
                h.get("blocks")
                    .and_then(Value::as_object)
                    .map(|b| b.keys().cloned().collect::<Vec<_>>())
                    .unwrap_or_default()
            })
            .collect();
        presented != declared
    })
}

/// Every value of the string columns named `name` of the frames under
/// `prefix` (`s`, `f`) or of the force field (`prefix` 0).
fn strings_of(img: &Image, prefix: u8, name: &str) -> Vec<String> {
    let frames: Vec<Frame> = if prefix == 0 {
        img.entries
            .get(b"ff".as_slice())
            .and_then(|v| Frame::parse(v))
            .into_iter()
            .collect()
    } else {
        img.entries
            .iter()
            .filter(|(k, _)| k.len() == 9 && k[0] == prefix)
            .filter_map(|(_, v)| Frame::parse(v))
            .collect()
    };
    frames
        .iter()
        .flat_map(|f| {
            f.header
                .get("blocks")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter_map(|(_, b)| {
                    b.pointer(&format!("/columns/{name}/values"))?
                        .as_array()
                        .cloned()
                })
                .flatten()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// A force field, and an atoms or relation `type` that names none of its rows.
pub fn unlinked_type(img: &Image) -> bool {
    if !img.entries.contains_key(b"ff".as_slice()) {
        return false;
    }
    let names: BTreeSet<String> = strings_of(img, 0, "name").into_iter().collect();
    [b's', b'f']
        .into_iter()
        .flat_map(|p| strings_of(img, p, "type"))
        .any(|t| !names.contains(&t))
}

/// A system row reference whose row is null and whose stored value is out
/// of its target's range (which a reader must not check).
pub fn null_reference_out_of_range(img: &Image) -> bool {
    img.entries
        .iter()
        .filter(|(k, _)| k.len() == 9 && k[0] == b's')
        .filter_map(|(_, v)| Frame::parse(v))
        .any(|f| {
            let blocks = f
                .header
                .get("blocks")
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default();
            let counts: BTreeMap<&String, u64> = blocks
                .iter()
                .filter_map(|(n, b)| Some((n, b.get("count")?.as_u64()?)))
                .collect();
            blocks.iter().any(|(name, b)| {
                // Declared targets, and the endpoint columns' `atoms` by
                // convention (rowref.md).
                let mut targets: BTreeMap<String, Value> = ["atomi", "atomj", "atomk", "atoml"]
                    .into_iter()
                    .map(|c| (c.to_string(), Value::from("atoms")))
                    .collect();
                targets.extend(
                    b.get("targets")
                        .and_then(Value::as_object)
                        .cloned()
                        .unwrap_or_default(),
                );
                targets.iter().any(|(col, target)| {
                    let (Some(values), Some(mask)) = (
                        f.buffers.get(&(name.clone(), col.clone(), false)),
                        f.buffers.get(&(name.clone(), col.clone(), true)),
                    ) else {
                        return false;
                    };
                    let rows = target
                        .as_str()
                        .and_then(|t| counts.get(&t.to_string()))
                        .copied()
                        .unwrap_or(0);
                    values.chunks_exact(8).zip(mask).any(|(v, &valid)| {
                        valid == 0 && u64::from_le_bytes(v.try_into().unwrap_or_default()) >= rows
                    })
                })
            })
        })
}

/// A validity mask that is all true, or empty on a zero-row column.
pub fn normalized_mask(img: &Image) -> bool {
    img.entries
        .values()
        .filter_map(|v| Frame::parse(v))
        .any(|f| {
            f.buffers
                .iter()
                .any(|((_, _, mask), b)| *mask && b.iter().all(|&x| x == 1))
        })
}

/// A column's rows (its first axis) and the elements of one row (the
/// product of the others), from its `shape`.
pub fn rows_and_width(shape: &Value) -> (usize, usize) {
    let shape: Vec<usize> = shape
        .as_array()
        .map(|s| {
            s.iter()
                .filter_map(|d| d.as_u64().map(|d| d as usize))
                .collect()
        })
        .unwrap_or_default();
    (
        shape.first().copied().unwrap_or(0),
        shape.iter().skip(1).product(),
    )
}

/// A force field and a frame at global ordinal 102: `ff` is `f` followed
/// by the byte 0x66 (102), so a reader that numbers every key starting `f`
/// by the bytes after it takes `ff` for that frame.
pub fn ff_over_frame_102(img: &Image) -> bool {
    img.get(Key::ForceField).is_some()
        && img
            .spans()
            .iter()
            .any(|&(first, n)| first <= 102 && 102 < first + n)
}

/// Every column entry in the header of every frame-bytes value, a
/// malformed one's included (the header is all that is read).
fn column_entries(img: &Image) -> Vec<Map<String, Value>> {
    img.entries
        .values()
        .filter_map(|v| frame_bytes::parse(v).ok())
        .flat_map(|view| {
            let blocks = view.blocks().cloned().unwrap_or_default();
            blocks
                .values()
                .filter_map(|b| b.get("columns").and_then(Value::as_object))
                .flat_map(|c| c.values().filter_map(Value::as_object).cloned())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether a column entry's dtype is one of the closed set of 13.
fn closed_dtype(entry: &Map<String, Value>) -> bool {
    entry
        .get("dtype")
        .and_then(Value::as_str)
        .and_then(frame_bytes::dtype_kind)
        .is_some()
}

/// A column whose dtype is outside the closed set and that carries a
/// `values` list, as a string column does: a reader that takes any column
/// with `values` for a string column reads it.
pub fn unknown_dtype_with_values(img: &Image) -> bool {
    column_entries(img)
        .iter()
        .any(|c| !closed_dtype(c) && c.get("values").is_some_and(Value::is_array))
}

/// A column without elements (a zero in its shape) whose dtype is outside
/// the closed set or whose buffer offset is not a multiple of 8: a reader
/// that skips decoding an empty column skips its checks too.
pub fn empty_column_defect(img: &Image) -> bool {
    column_entries(img).iter().any(|c| {
        let empty = c
            .get("shape")
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|d| d.as_u64() == Some(0)));
        let misaligned = c
            .get("offset")
            .and_then(Value::as_u64)
            .is_some_and(|o| o % 8 != 0);
        empty && (!closed_dtype(c) || misaligned)
    })
}
