//! The values under null rows, which the logical form drops (they mean
//! nothing to a reader) but which a writer carries as written (frame.md,
//! "Nullable columns": "The value stored under a null row is carried as
//! written"). Compared column by column between a fixture and a file's
//! content as the harness read it, updates as stored.
//!
//! Compared where the two sides line up without resolution: the index's
//! own columns, each record's system blocks, and a trajectory update that
//! the file stores at the ordinal where the fixture presents the same block
//! with the same row count. A column with a declared precision is left out
//! (whether a value that means nothing is rounded is not this rule's
//! business), as is a row the fixture marks null and the file does not
//! (the logical comparison reports that).

use serde_json::{Map, Value};

use super::typed::cell;
use super::{idx, key, Difference};

/// Every value under a fixture's null row that the file stores differently,
/// at its path in the fixture (`records[0].system.blocks.atoms.columns.q.values[2]`).
pub(super) fn differences(fixture: &Value, file: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    if let (Some(e), Some(a)) = (object(fixture, "index"), object(file, "index")) {
        for (name, column) in e {
            if let Some(stored) = a.get(name) {
                compare_column(&key("index", name), column, stored, &mut out);
            }
        }
    }
    let (Some(expected), Some(stored)) = (array(fixture, "records"), array(file, "records")) else {
        return out;
    };
    // A trajectory column's precision is its declaration's: either side's.
    let declared =
        [fixture, file].map(|v| v.get("sequence_schema").and_then(|s| object(s, "blocks")));
    for (r, (e, a)) in expected.iter().zip(stored).enumerate() {
        let at = idx("records", r);
        if let (Some(e), Some(a)) = (e.get("system"), a.get("system")) {
            compare_blocks(&key(&at, "system"), e, a, &[], &mut out);
        }
        if let (Some(e), Some(a)) = (frames(e), frames(a)) {
            let tat = key(&key(&at, "trajectory"), "frames");
            for (j, (e, a)) in e.iter().zip(a).enumerate() {
                compare_blocks(&idx(&tat, j), e, a, &declared, &mut out);
            }
        }
    }
    out
}

fn frames(record: &Value) -> Option<&Vec<Value>> {
    record.get("trajectory").and_then(|t| array(t, "frames"))
}

fn array<'a>(v: &'a Value, name: &str) -> Option<&'a Vec<Value>> {
    v.get(name).and_then(Value::as_array)
}

fn object<'a>(v: &'a Value, name: &str) -> Option<&'a Map<String, Value>> {
    v.get(name).and_then(Value::as_object)
}

/// The blocks both frames hold with the same count, column by column; a
/// column with a precision in one of `declared` (the sequence_schemas'
/// blocks, for a trajectory update) is left out.
fn compare_blocks(
    at: &str,
    expected: &Value,
    stored: &Value,
    declared: &[Option<&Map<String, Value>>],
    out: &mut Vec<Difference>,
) {
    let (Some(e), Some(a)) = (object(expected, "blocks"), object(stored, "blocks")) else {
        return;
    };
    for (name, eb) in e {
        let Some(ab) = a.get(name) else { continue };
        if eb.get("count") != ab.get("count") {
            continue;
        }
        let (Some(ec), Some(ac)) = (object(eb, "columns"), object(ab, "columns")) else {
            continue;
        };
        let bat = key(&key(&key(at, "blocks"), name), "columns");
        for (col, column) in ec {
            let precise = declared.iter().flatten().any(|blocks| {
                blocks
                    .get(name)
                    .and_then(|b| b.get("columns"))
                    .and_then(|c| c.get(col))
                    .and_then(|c| c.get("precision"))
                    .is_some_and(|p| !p.is_null())
            });
            if precise {
                continue;
            }
            if let Some(stored) = ac.get(col) {
                compare_column(&key(&bat, col), column, stored, out);
            }
        }
    }
}

/// The values under `expected`'s null rows, against `stored`'s.
fn compare_column(at: &str, expected: &Value, stored: &Value, out: &mut Vec<Difference>) {
    let flags = |c: &Value| -> Option<Vec<bool>> {
        c.get("validity")?
            .as_array()?
            .iter()
            .map(Value::as_bool)
            .collect()
    };
    let Some(mask) = flags(expected) else { return };
    let stored_mask = flags(stored);
    let dtype = expected.get("dtype").and_then(Value::as_str);
    let same_dtype = dtype.is_some() && dtype == stored.get("dtype").and_then(Value::as_str);
    let precision = |c: &Value| c.get("precision").is_some_and(|p| !p.is_null());
    if !same_dtype || precision(expected) || precision(stored) {
        return;
    }
    let dtype = dtype.unwrap_or_default();
    let (Some(ev), Some(av)) = (array(expected, "values"), array(stored, "values")) else {
        return;
    };
    if ev.len() != av.len() || mask.is_empty() || ev.len() % mask.len() != 0 {
        return;
    }
    let row_len = ev.len() / mask.len();
    let vat = key(at, "values");
    for (row, valid) in mask.iter().enumerate() {
        let null_in_file = stored_mask.as_ref().and_then(|m| m.get(row)) == Some(&false);
        if *valid || !null_in_file {
            continue;
        }
        for k in row * row_len..(row + 1) * row_len {
            let path = idx(&vat, k);
            let (Ok(e), Ok(a)) = (cell(dtype, &ev[k], &path), cell(dtype, &av[k], &path)) else {
                continue;
            };
            if e != a && out.len() < super::MAX_DIFFERENCES {
                out.push(Difference {
                    path,
                    expected: e.to_string(),
                    actual: a.to_string(),
                });
            }
        }
    }
}
