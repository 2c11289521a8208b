//! How each reader bug changes a conforming answer: walkers over the
//! canonical JSON of a collection (records, frames, columns) and the
//! answers of the bugs that need more than a line.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::stored::{Place, Stored};

/// Each record.
pub(super) fn records(v: &Value, mut edit: impl FnMut(&mut Value)) -> Value {
    let mut v = v.clone();
    for rec in v["records"].as_array_mut().into_iter().flatten() {
        edit(rec);
    }
    v
}

/// Each trajectory frame, with its record and ordinal in the record.
pub(super) fn frames(
    v: &Value,
    mut edit: impl FnMut(usize, usize, &mut Map<String, Value>),
) -> Value {
    trajectories(v, |r, fs| {
        for (k, f) in fs.iter_mut().enumerate() {
            if let Some(f) = f.as_object_mut() {
                edit(r, k, f);
            }
        }
    })
}

/// Each record's trajectory frames, with the record's position (records
/// without a trajectory skipped).
pub(super) fn trajectories(v: &Value, mut edit: impl FnMut(usize, &mut Vec<Value>)) -> Value {
    let mut v = v.clone();
    for (r, rec) in v["records"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if let Some(fs) = rec
            .pointer_mut("/trajectory/frames")
            .and_then(Value::as_array_mut)
        {
            edit(r, fs);
        }
    }
    v
}

/// Every column of every block (systems, updates, index, force field).
pub(super) fn columns(v: &Value, mut edit: impl FnMut(&mut Map<String, Value>)) -> Value {
    fn walk(v: &mut Value, edit: &mut dyn FnMut(&mut Map<String, Value>)) {
        match v {
            Value::Object(m) => {
                if m.contains_key("dtype") && m.contains_key("values") {
                    edit(m);
                    return;
                }
                m.values_mut().for_each(|x| walk(x, edit));
            }
            Value::Array(a) => a.iter_mut().for_each(|x| walk(x, edit)),
            _ => {}
        }
    }
    let mut v = v.clone();
    walk(&mut v, &mut edit);
    v
}

/// Each block of each record's system.
pub(super) fn system_blocks(v: &Value, mut edit: impl FnMut(&mut Map<String, Value>)) -> Value {
    records(v, |rec| {
        let blocks = rec
            .pointer_mut("/system/blocks")
            .and_then(Value::as_object_mut);
        for b in blocks.into_iter().flat_map(|b| b.values_mut()) {
            if let Some(b) = b.as_object_mut() {
                edit(b);
            }
        }
    })
}

/// Every number and string leaf replaced where `map` says.
pub(super) fn map_numbers(v: &Value, map: &mut dyn FnMut(&Value) -> Option<Value>) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), map_numbers(x, map)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(|x| map_numbers(x, map)).collect()),
        leaf => map(leaf).unwrap_or_else(|| leaf.clone()),
    }
}

/// Blocks (or, with `cell`, the cell) carried from one record's last
/// frame into the next record's frames until it states its own.
pub(super) fn across_records(v: &Value, s: &Stored, cell: bool) -> Value {
    let mut carried: Map<String, Value> = Map::new();
    let mut carried_cell: Option<Value> = None;
    trajectories(v, |r, fs| {
        if fs.is_empty() {
            return;
        }
        let held = s.blocks.get(r);
        let mut seen: Vec<String> = Vec::new();
        let mut cell_seen = false;
        for (k, f) in fs.iter_mut().enumerate() {
            let Some(f) = f.as_object_mut() else { continue };
            if cell {
                cell_seen |= s
                    .cells
                    .get(r)
                    .and_then(|c| c.get(k))
                    .is_some_and(Option::is_some);
                if !cell_seen {
                    if let Some(c) = &carried_cell {
                        f.insert("box".into(), c.clone());
                    }
                }
            } else {
                for name in held
                    .and_then(|u| u.get(k))
                    .into_iter()
                    .flat_map(|b| b.keys())
                {
                    seen.push(name.clone());
                }
                if let Some(b) = f.get_mut("blocks").and_then(Value::as_object_mut) {
                    for (name, block) in &carried {
                        if !seen.contains(name) {
                            b.insert(name.clone(), block.clone());
                        }
                    }
                }
            }
        }
        if let Some(last) = fs.last().and_then(Value::as_object) {
            if let Some(b) = last.get("blocks").and_then(Value::as_object) {
                carried = b.clone();
            }
            if let Some(c) = last.get("box") {
                carried_cell = Some(c.clone());
            }
        }
    })
}

/// A zero-row update taken for no change, or (`absent`) for the block's
/// absence, instead of an emptied block.
pub(super) fn zero_rows(v: &Value, s: &Stored, absent: bool) -> Value {
    trajectories(v, |r, fs| {
        // The buggy reader's idea of each block.
        let mut state: Map<String, Value> = Map::new();
        for (k, f) in fs.iter_mut().enumerate() {
            let held = s
                .blocks
                .get(r)
                .and_then(|u| u.get(k))
                .cloned()
                .unwrap_or_default();
            let Some(b) = f.get_mut("blocks").and_then(Value::as_object_mut) else {
                continue;
            };
            for (name, count) in &held {
                if *count == 0 {
                    if absent {
                        state.remove(name);
                    }
                } else if let Some(block) = b.get(name) {
                    state.insert(name.clone(), block.clone());
                }
            }
            let names: Vec<String> = b.keys().cloned().collect();
            for name in names {
                match state.get(&name) {
                    Some(block) => {
                        b.insert(name.clone(), block.clone());
                    }
                    None => {
                        b.remove(&name);
                    }
                }
            }
        }
    })
}

/// f64 values of columns with a declared precision (the schema's, or a
/// column's own) rounded again to the precision's quantum.
pub(super) fn reround(v: &Value, _: &Stored) -> Value {
    let quantum = |p: f64| {
        let mut q = 2f64.powi(p.log2().floor() as i32);
        while q > p {
            q /= 2.0;
        }
        q
    };
    let schema = v
        .pointer("/sequence_schema/blocks")
        .cloned()
        .unwrap_or_default();
    let round = |c: &mut Map<String, Value>, p: f64| {
        let q = quantum(p);
        if let Some(values) = c.get_mut("values").and_then(Value::as_array_mut) {
            for x in values.iter_mut() {
                if let Some(f) = x.as_f64().filter(|f| f.is_finite() && x.is_f64()) {
                    let r = (f / q).round_ties_even() * q;
                    *x = Value::from(r);
                }
            }
        }
    };
    let mut v = columns(v, |c| {
        if let Some(p) = c.get("precision").and_then(Value::as_f64) {
            round(c, p);
        }
    });
    for rec in v["records"].as_array_mut().into_iter().flatten() {
        for f in rec
            .pointer_mut("/trajectory/frames")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            for (name, b) in f
                .get_mut("blocks")
                .and_then(Value::as_object_mut)
                .into_iter()
                .flatten()
            {
                for (col, c) in b
                    .get_mut("columns")
                    .and_then(Value::as_object_mut)
                    .into_iter()
                    .flatten()
                {
                    let p = schema
                        .get(name)
                        .and_then(|s| s.pointer(&format!("/columns/{col}/precision")))
                        .and_then(Value::as_f64);
                    if let (Some(p), Some(c)) = (p, c.as_object_mut()) {
                        round(c, p);
                    }
                }
            }
        }
    }
    v
}

/// Each own index column, with the number of records.
pub(super) fn index_columns(
    v: &Value,
    mut edit: impl FnMut(usize, &mut Map<String, Value>),
) -> Value {
    let mut v = v.clone();
    let records = v["records"].as_array().map_or(0, Vec::len);
    for c in v
        .get_mut("index")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|ix| ix.values_mut())
    {
        if let Some(c) = c.as_object_mut() {
            edit(records, c);
        }
    }
    v
}

/// The declared per-step keys for which `pick` gives a value, with it.
pub(super) fn declared_meta(
    v: &Value,
    pick: impl Fn(&Value) -> Option<Value>,
) -> BTreeMap<String, Value> {
    v.pointer("/sequence_schema/meta")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, e)| Some((k.clone(), pick(e)?)))
        .collect()
}

/// Every declared block at every frame: one that has not appeared yet in
/// the record is handed back empty, with the declared columns and zero rows.
pub(super) fn absent_as_empty(v: &Value, _: &Stored) -> Value {
    let declared: Map<String, Value> = v
        .pointer("/sequence_schema/blocks")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    frames(v, |_, _, f| {
        let Some(b) = f.get_mut("blocks").and_then(Value::as_object_mut) else {
            return;
        };
        for (name, decl) in &declared {
            if b.contains_key(name) {
                continue;
            }
            let columns: Map<String, Value> = decl
                .get("columns")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(col, cd)| {
                    let mut shape = vec![Value::from(0)];
                    shape.extend(cd["trailing"].as_array().cloned().unwrap_or_default());
                    (
                        col.clone(),
                        serde_json::json!({"dtype": cd["dtype"], "shape": shape, "values": []}),
                    )
                })
                .collect();
            b.insert(
                name.clone(),
                serde_json::json!({"count": 0, "columns": columns}),
            );
        }
    })
}

/// A stored cell as a reader spells it out: its defaults applied, an
/// undefined cell with identity vectors and (when omitted) a boundary
/// periodic on no axis.
fn spelled_out(raw: &Map<String, Value>) -> Map<String, Value> {
    let defined = raw.get("cell_defined") != Some(&Value::Bool(false));
    let mut out = Map::new();
    out.insert(
        "vectors".into(),
        if defined {
            raw.get("vectors").cloned().unwrap_or(Value::Null)
        } else {
            serde_json::json!([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
        },
    );
    out.insert(
        "origin".into(),
        raw.get("origin")
            .cloned()
            .unwrap_or(serde_json::json!([0.0, 0.0, 0.0])),
    );
    out.insert(
        "boundary".into(),
        raw.get("boundary")
            .cloned()
            .unwrap_or(serde_json::json!([defined, defined, defined])),
    );
    out.insert("cell_defined".into(), Value::Bool(defined));
    out
}

/// Each stated cell merged into the previous stated cell of the record
/// field by field (`{**previous, **update}`), then spelled out: where that
/// differs from the stated cell spelled out, the merged fields replace the
/// answer's, at that frame and the frames that carry its cell.
pub(super) fn cell_fields_carried(v: &Value, s: &Stored) -> Value {
    trajectories(v, |r, fs| {
        let mut merged: Map<String, Value> = Map::new();
        // The buggy cell in effect, when it differs from the stated one.
        let mut wrong: Option<Map<String, Value>> = None;
        for (k, f) in fs.iter_mut().enumerate() {
            if let Some(Some(Value::Object(stated))) = s.cells.get(r).and_then(|c| c.get(k)) {
                merged.extend(stated.clone());
                let buggy = spelled_out(&merged);
                wrong = (buggy != spelled_out(stated)).then_some(buggy);
            }
            if let (Some(buggy), Some(b)) =
                (&wrong, f.get_mut("box").and_then(Value::as_object_mut))
            {
                b.extend(buggy.clone());
            }
        }
    })
}

/// Columns whose mask is stored at payload offset 0 handed back without
/// it: in the index, the force field, a system, and at every frame whose
/// block resolves to an update holding such a mask.
pub(super) fn masks_at_zero_dropped(v: &Value, s: &Stored) -> Value {
    let at = |place: Place, block: &str, cols: &mut Map<String, Value>| {
        for (col, c) in cols.iter_mut() {
            if s.masks_at_zero
                .contains(&(place, block.to_string(), col.clone()))
            {
                if let Some(c) = c.as_object_mut() {
                    c.remove("validity");
                }
            }
        }
    };
    let mut v = v.clone();
    if let Some(ix) = v.get_mut("index").and_then(Value::as_object_mut) {
        at(Place::Index, "records", ix);
    }
    let blocks_of = |b: Option<&mut Value>, place: Place| {
        for (name, block) in b.and_then(Value::as_object_mut).into_iter().flatten() {
            if let Some(cols) = block.get_mut("columns").and_then(Value::as_object_mut) {
                at(place, name, cols);
            }
        }
    };
    blocks_of(v.pointer_mut("/forcefield/blocks"), Place::ForceField);
    for (r, rec) in v["records"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .enumerate()
    {
        blocks_of(rec.pointer_mut("/system/blocks"), Place::System(r));
        let fs = rec
            .pointer_mut("/trajectory/frames")
            .and_then(Value::as_array_mut);
        // Per block, the update the frame's block resolves to.
        let mut source: BTreeMap<String, usize> = BTreeMap::new();
        for (k, f) in fs.into_iter().flatten().enumerate() {
            for name in s
                .blocks
                .get(r)
                .and_then(|u| u.get(k))
                .into_iter()
                .flat_map(|b| b.keys())
            {
                source.insert(name.clone(), k);
            }
            for (name, block) in f
                .get_mut("blocks")
                .and_then(Value::as_object_mut)
                .into_iter()
                .flatten()
            {
                let (Some(&j), Some(cols)) = (
                    source.get(name),
                    block.get_mut("columns").and_then(Value::as_object_mut),
                ) else {
                    continue;
                };
                at(Place::Update(r, j), name, cols);
            }
        }
    }
    v
}

/// Every block (systems, resolved updates, force field) with `count` set
/// to its first column's rows, 0 for a block with no columns.
pub(super) fn count_from_columns(v: &Value, _: &Stored) -> Value {
    fn walk(v: &mut Value) {
        match v {
            Value::Object(m) => {
                if m.contains_key("count") {
                    if let Some(cols) = m.get("columns").and_then(Value::as_object) {
                        let rows = cols
                            .values()
                            .next()
                            .and_then(|c| c.pointer("/shape/0"))
                            .cloned()
                            .unwrap_or(Value::from(0));
                        m.insert("count".into(), rows);
                        return;
                    }
                }
                m.values_mut().for_each(walk);
            }
            Value::Array(a) => a.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let mut v = v.clone();
    walk(&mut v);
    v
}

/// The document at `pointer` without its null-valued top-level keys.
pub(super) fn nulls_dropped(v: &mut Value, pointer: &str) {
    if let Some(m) = v.pointer_mut(pointer).and_then(Value::as_object_mut) {
        m.retain(|_, x| !x.is_null());
    }
}

/// A copy of the answer `v` with the null-valued keys of the object at
/// `pointer` dropped.
pub(super) fn without_nulls_at(v: &Value, pointer: &str) -> Value {
    let mut v = v.clone();
    nulls_dropped(&mut v, pointer);
    v
}
