//! The box, frames, the force field, steps, trajectories, records and the
//! collection.

use super::*;

// ------------------------------------------------------------------ box --

pub(super) const BOX_KEYS: &[&str] = &["vectors", "origin", "boundary", "cell_defined"];

/// An array of exactly `N` entries (a box part).
pub(super) fn box_array<'a, const N: usize>(
    v: &'a Value,
    at: &str,
    what: &str,
) -> Result<&'a [Value; N]> {
    match v
        .as_array()
        .and_then(|a| <&[Value; N]>::try_from(a.as_slice()).ok())
    {
        Some(a) => Ok(a),
        None => refuse!(
            BoxShape,
            at,
            "expected {what} (an array of {N}), got {}",
            brief(v)
        ),
    }
}

pub(super) fn f64_triple(v: &Value, at: &str, what: &str) -> Result<[f64; 3]> {
    let [a, b, c] = box_array::<3>(v, at, what)?;
    Ok([
        typed_f64(a, &index_path(at, 0))?,
        typed_f64(b, &index_path(at, 1))?,
        typed_f64(c, &index_path(at, 2))?,
    ])
}

/// Reads a box `{"vectors": [[3],[3],[3]], "origin"?, "boundary"?, "cell_defined"?}`.
///
/// `origin` defaults to zeros and `cell_defined` to true; `boundary`
/// defaults to all true for a defined cell and to all false for an
/// undefined one (the only boundary an undefined cell may have). Given
/// values are kept as given.
pub fn cell_from_json(v: &Value, at: &str) -> Result<Cell> {
    if !v.is_object() {
        refuse!(
            BoxShape,
            at,
            "expected a box (an object with \"vectors\"), got {}",
            brief(v)
        );
    }
    let map = object(v, at, "a box", BOX_KEYS)?;
    let vectors_at = key_path(at, "vectors");
    let Some(rows) = map.get("vectors") else {
        refuse!(
            BoxShape,
            vectors_at,
            "a box lacks the required key \"vectors\""
        );
    };
    let rows = box_array::<3>(rows, &vectors_at, "the 3x3 vectors")?;
    let mut vectors = [0.0; 9];
    for (i, row) in rows.iter().enumerate() {
        let row = f64_triple(row, &index_path(&vectors_at, i), "a row of the vectors")?;
        vectors[3 * i..3 * i + 3].copy_from_slice(&row);
    }
    let origin = match map.get("origin") {
        None => [0.0; 3],
        Some(o) => f64_triple(o, &key_path(at, "origin"), "the origin")?,
    };
    let defined = match map.get("cell_defined") {
        None => true,
        Some(Value::Bool(b)) => *b,
        Some(other) => refuse!(
            TypedValue,
            key_path(at, "cell_defined"),
            "expected a bool, got {}",
            brief(other)
        ),
    };
    let boundary = match map.get("boundary") {
        None => [defined; 3],
        Some(b) => {
            let b_at = key_path(at, "boundary");
            let flags = box_array::<3>(b, &b_at, "the boundary flags")?;
            let mut out = [false; 3];
            for (i, f) in flags.iter().enumerate() {
                out[i] = match f {
                    Value::Bool(x) => *x,
                    other => refuse!(
                        TypedValue,
                        index_path(&b_at, i),
                        "expected a bool, got {}",
                        brief(other)
                    ),
                };
            }
            out
        }
    };
    Ok(Cell {
        vectors,
        origin,
        boundary,
        defined,
    })
}

/// Writes a box with all four keys.
pub fn cell_to_json(c: &Cell) -> Value {
    let triple = |v: &[f64]| Value::Array(v.iter().map(|&x| f64_to_json(x)).collect());
    let mut map = Map::new();
    map.insert(
        "vectors".into(),
        Value::Array(c.vectors.chunks(3).map(triple).collect()),
    );
    map.insert("origin".into(), triple(&c.origin));
    map.insert(
        "boundary".into(),
        Value::Array(c.boundary.iter().map(|&b| Value::Bool(b)).collect()),
    );
    map.insert("cell_defined".into(), Value::Bool(c.defined));
    Value::Object(map)
}

// ---------------------------------------------------------------- frame --

pub(super) const FRAME_KEYS: &[&str] = &["meta", "meta_types", "blocks", "box"];

/// Reads a system frame `{"meta"?, "meta_types"?, "blocks", "box"?}`.
///
/// Every meta value is typed by its tag in `meta_types`; a key without a
/// tag gets [`MetaTag::infer`]. Values are returned in canonical typed JSON
/// ([`normalize`]) and `meta_types` lists every key. A tag for a key absent
/// from `meta` is refused.
pub fn frame_from_json(v: &Value, at: &str) -> Result<Frame> {
    let map = object(v, at, "a frame", FRAME_KEYS)?;
    let meta_at = key_path(at, "meta");
    let given = optional_document(map, at, "meta", "the frame meta")?;

    let mut meta_types = BTreeMap::new();
    if let Some(types) = map.get("meta_types") {
        let types_at = key_path(at, "meta_types");
        let Value::Object(types) = types else {
            refuse!(
                ModelJson,
                types_at,
                "expected the meta types (an object of tag names), got {}",
                brief(types)
            );
        };
        for (key, tag) in types {
            let key_at = key_path(&types_at, key);
            let tag = tag_from_json(tag, &key_at)?;
            if !given.contains_key(key) {
                refuse!(
                    TypedValue,
                    key_at,
                    "a tag for the key {key:?}, which is not in meta"
                );
            }
            meta_types.insert(key.clone(), tag);
        }
    }

    let mut meta = Document::new();
    for (key, value) in &given {
        let tag = *meta_types
            .entry(key.clone())
            .or_insert_with(|| MetaTag::infer(value));
        let value = normalize(tag, value)
            .map_err(|e| Error::refused(Clause::TypedValue, key_path(&meta_at, key), e))?;
        meta.insert(key.clone(), value);
    }

    let blocks = blocks_from_json(
        required(map, at, "blocks", "a frame")?,
        &key_path(at, "blocks"),
    )?;
    let cell = match map.get("box") {
        None => None,
        Some(b) => Some(cell_from_json(b, &key_path(at, "box"))?),
    };
    Ok(Frame {
        meta,
        meta_types,
        blocks,
        cell,
    })
}

/// Writes a system frame. `meta_types` lists every meta key (a key the
/// model holds without a tag is written with its inferred tag); `box` is
/// written when there is a cell.
pub fn frame_to_json(f: &Frame) -> Value {
    let types = f
        .meta
        .iter()
        .map(|(k, v)| {
            let tag = f
                .meta_types
                .get(k)
                .copied()
                .unwrap_or_else(|| MetaTag::infer(v));
            (k.clone(), Value::String(tag.name().into()))
        })
        .collect();
    let mut map = Map::new();
    map.insert("meta".into(), Value::Object(f.meta.clone()));
    map.insert("meta_types".into(), Value::Object(types));
    map.insert("blocks".into(), blocks_to_json(&f.blocks));
    if let Some(c) = &f.cell {
        map.insert("box".into(), cell_to_json(c));
    }
    Value::Object(map)
}

// ----------------------------------------------------------- force field --

pub(super) const FORCEFIELD_KEYS: &[&str] = &["meta", "blocks"];

/// Reads a force field `{"meta": document, "blocks": {style table}}`. The
/// document is kept as given (its rules are checked by validation).
pub fn forcefield_from_json(v: &Value, at: &str) -> Result<ForceField> {
    let map = object(v, at, "a force field", FORCEFIELD_KEYS)?;
    let document = document(
        required(map, at, "meta", "a force field")?,
        &key_path(at, "meta"),
        "the force-field document",
    )?;
    let tables = blocks_from_json(
        required(map, at, "blocks", "a force field")?,
        &key_path(at, "blocks"),
    )?;
    Ok(ForceField { document, tables })
}

/// Writes a force field.
pub fn forcefield_to_json(f: &ForceField) -> Value {
    let mut map = Map::new();
    map.insert("meta".into(), Value::Object(f.document.clone()));
    map.insert("blocks".into(), blocks_to_json(&f.tables));
    Value::Object(map)
}

// ----------------------------------------------------------- trajectory --

pub(super) const TRAJECTORY_KEYS: &[&str] = &["frames", "schema"];
pub(super) const STEP_KEYS: &[&str] = &["step", "time", "meta", "blocks", "box"];

/// Reads one trajectory frame `{"step", "time"?, "meta"?, "blocks", "box"?}`.
///
/// `step` is a typed i64 and `time` a typed f64. The per-step `meta` is kept
/// as given (raw JSON): its tags live in the declaration, and validation
/// types it.
pub fn step_from_json(v: &Value, at: &str) -> Result<Step> {
    let map = object(v, at, "a trajectory frame", STEP_KEYS)?;
    let step_at = key_path(at, "step");
    let step = int_from_json(required(map, at, "step", "a trajectory frame")?)
        .and_then(|s| i64::try_from(s).map_err(|_| format!("step {s} is out of the range of i64")))
        .map_err(|e| Error::refused(Clause::TypedValue, step_at, e))?;
    let time = match map.get("time") {
        None => None,
        Some(t) => Some(typed_f64(t, &key_path(at, "time"))?),
    };
    let meta = optional_document(map, at, "meta", "the per-step meta")?;
    let blocks = blocks_from_json(
        required(map, at, "blocks", "a trajectory frame")?,
        &key_path(at, "blocks"),
    )?;
    let cell = match map.get("box") {
        None => None,
        Some(b) => Some(cell_from_json(b, &key_path(at, "box"))?),
    };
    Ok(Step {
        step,
        time,
        meta,
        blocks,
        cell,
    })
}

/// Writes one trajectory frame (`time` and `box` when present).
pub fn step_to_json(s: &Step) -> Value {
    let mut map = Map::new();
    map.insert("step".into(), int_to_json(i128::from(s.step)));
    if let Some(t) = s.time {
        map.insert("time".into(), f64_to_json(t));
    }
    map.insert("meta".into(), Value::Object(s.meta.clone()));
    map.insert("blocks".into(), blocks_to_json(&s.blocks));
    if let Some(c) = &s.cell {
        map.insert("box".into(), cell_to_json(c));
    }
    Value::Object(map)
}

/// Reads a trajectory `{"frames": [..], "schema"?: sequence_schema}`, where
/// `schema` is the record's own declaration.
pub fn trajectory_from_json(v: &Value, at: &str) -> Result<Trajectory> {
    let map = object(v, at, "a trajectory", TRAJECTORY_KEYS)?;
    let frames_at = key_path(at, "frames");
    let frames = required(map, at, "frames", "a trajectory")?;
    let Value::Array(frames) = frames else {
        refuse!(
            ModelJson,
            frames_at,
            "expected the frames (an array), got {}",
            brief(frames)
        );
    };
    let frames = frames
        .iter()
        .enumerate()
        .map(|(i, f)| step_from_json(f, &index_path(&frames_at, i)))
        .collect::<Result<_>>()?;
    let schema = match map.get("schema") {
        None => None,
        Some(s) => Some(schema_from_json(s, &key_path(at, "schema"))?),
    };
    Ok(Trajectory { schema, frames })
}

/// Writes a trajectory (`schema` when the record states one).
pub fn trajectory_to_json(t: &Trajectory) -> Value {
    let mut map = Map::new();
    map.insert(
        "frames".into(),
        Value::Array(t.frames.iter().map(step_to_json).collect()),
    );
    if let Some(s) = &t.schema {
        map.insert("schema".into(), schema_to_json(s));
    }
    Value::Object(map)
}

// --------------------------------------------------------------- record --

pub(super) const RECORD_KEYS: &[&str] = &["meta", "system", "trajectory"];

/// Reads a record `{"meta"?, "system"?, "trajectory"?}`. `meta` defaults to
/// `{}`; a record with neither a system nor a trajectory is refused.
pub fn record_from_json(v: &Value, at: &str) -> Result<Record> {
    // A collection's record is restricted to meta, system and trajectory:
    // name the clause for the parts a standalone record may have.
    if let Some(map) = v.as_object() {
        if map.contains_key("forcefield") {
            refuse!(
                RecordForceField,
                key_path(at, "forcefield"),
                "a record of a collection has no force field of its own"
            );
        }
        if let Some(part) = map.keys().find(|k| !RECORD_KEYS.contains(&k.as_str())) {
            refuse!(
                RecordParts,
                key_path(at, part),
                "a collection's record holds only meta, system and trajectory, not `{part}`"
            );
        }
    }
    let map = object(v, at, "a record", RECORD_KEYS)?;
    let meta = match map.get("meta") {
        None => Document::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => refuse!(
            RecordMetaDocument,
            key_path(at, "meta"),
            "a record's meta is a JSON object, got {}",
            brief(other)
        ),
    };
    let system = match map.get("system") {
        None => None,
        Some(s) => Some(frame_from_json(s, &key_path(at, "system"))?),
    };
    let trajectory = match map.get("trajectory") {
        None => None,
        Some(t) => Some(trajectory_from_json(t, &key_path(at, "trajectory"))?),
    };
    if system.is_none() && trajectory.is_none() {
        refuse!(
            RecordNotEmpty,
            at,
            "a record has a system, a trajectory or both"
        );
    }
    Ok(Record {
        meta,
        system,
        trajectory,
    })
}

/// Writes a record (`meta` always, `system` and `trajectory` when present).
pub fn record_to_json(r: &Record) -> Value {
    let mut map = Map::new();
    map.insert("meta".into(), Value::Object(r.meta.clone()));
    if let Some(s) = &r.system {
        map.insert("system".into(), frame_to_json(s));
    }
    if let Some(t) = &r.trajectory {
        map.insert("trajectory".into(), trajectory_to_json(t));
    }
    Value::Object(map)
}

// ----------------------------------------------------------- collection --

pub(super) const COLLECTION_KEYS: &[&str] =
    &["meta", "sequence_schema", "index", "forcefield", "records"];

/// Reads a collection from canonical JSON text. Errors carry the JSON path
/// of the fault in `at`, e.g. `records[2].system.blocks.atoms.columns.x.values[5]`;
/// text that is not JSON is refused at the root (`at` empty) with the line
/// and column in the detail.
pub fn collection_from_str(text: &str) -> Result<Collection> {
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Error::refused(Clause::ModelJson, "", format!("not a JSON text: {e}")))?;
    collection_from_json(&value)
}

/// Reads a collection `{"meta", "sequence_schema"?, "index"?, "forcefield"?, "records"}`.
pub fn collection_from_json(value: &Value) -> Result<Collection> {
    let map = object(value, "", "a collection", COLLECTION_KEYS)?;
    let meta = document(
        required(map, "", "meta", "a collection")?,
        "meta",
        "the collection document",
    )?;
    let sequence_schema = match map.get("sequence_schema") {
        None => None,
        Some(s) => Some(schema_from_json(s, "sequence_schema")?),
    };
    let index = match map.get("index") {
        None => BTreeMap::new(),
        Some(Value::Object(cols)) => cols
            .iter()
            .map(|(name, c)| Ok((name.clone(), column_from_json(c, &key_path("index", name))?)))
            .collect::<Result<_>>()?,
        Some(other) => refuse!(
            ModelJson,
            "index",
            "expected the index (an object of columns), got {}",
            brief(other)
        ),
    };
    let forcefield = match map.get("forcefield") {
        None => None,
        Some(f) => Some(forcefield_from_json(f, "forcefield")?),
    };
    let records = required(map, "", "records", "a collection")?;
    let Value::Array(records) = records else {
        refuse!(
            ModelJson,
            "records",
            "expected the records (an array), got {}",
            brief(records)
        );
    };
    let records = records
        .iter()
        .enumerate()
        .map(|(i, r)| record_from_json(r, &index_path("records", i)))
        .collect::<Result<_>>()?;
    Ok(Collection {
        header: Header {
            meta,
            sequence_schema,
            forcefield,
        },
        index,
        records,
    })
}

/// Writes canonical JSON. This function does not resolve: it writes what
/// the collection holds (`sequence_schema` and `forcefield` when present,
/// `index` when it has columns).
pub fn collection_to_json(c: &Collection) -> Value {
    let mut map = Map::new();
    map.insert("meta".into(), Value::Object(c.header.meta.clone()));
    if let Some(s) = &c.header.sequence_schema {
        map.insert("sequence_schema".into(), schema_to_json(s));
    }
    if !c.index.is_empty() {
        map.insert(
            "index".into(),
            Value::Object(
                c.index
                    .iter()
                    .map(|(k, col)| (k.clone(), column_to_json(col)))
                    .collect(),
            ),
        );
    }
    if let Some(f) = &c.header.forcefield {
        map.insert("forcefield".into(), forcefield_to_json(f));
    }
    map.insert(
        "records".into(),
        Value::Array(c.records.iter().map(record_to_json).collect()),
    );
    Value::Object(map)
}
