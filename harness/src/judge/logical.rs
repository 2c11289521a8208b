//! The logical form of a collection: canonical JSON resolved and normalized
//! so that two collections with the same logical content are the same JSON
//! tree (floats compared by bits, see `leaf_eq`). The form is itself
//! canonical JSON, so it can be read again (as an actual) to the same form.
//!
//! The expected side (a fixture, presentation form) is *resolved*: blocks and
//! the cell carry forward within a record, fills are materialized, declared
//! precision is applied, `molrec_version` and a missing `sequence_schema` are
//! supplied. The actual side (what a reader handed back) is only normalized:
//! resolving it would hide a reader that forgets a carried block or a fill.
//!
//! Normal form, on both sides:
//! - columns: `{"dtype", "shape", "values", "validity"?, "precision"?}`, cells
//!   in the normal form of `typed`, `null` under null rows, `validity` only
//!   when some row is null;
//! - blocks: `{"count", "columns", "structural_shape"?, "targets"?,
//!   "attributes"?}`, empty maps and `null` omitted; trajectory blocks drop
//!   `structural_shape`, `targets` and column `precision` (the declaration
//!   holds them, §9);
//! - a box always has its four keys (defaults applied); on the fixture side
//!   an undefined cell gets identity vectors and all-false boundary, which
//!   the actual side must hand back as such (never normalized there);
//! - system frames: `meta_types` lists every key (inferred by §7 where
//!   absent), `meta` values typed by it;
//! - `sequence_schema` columns always carry `trailing` and `nullable`.
//!
//! An optional key given as `null` is read as absent.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::typed::{
    cell, f64_value, infer_tag, kind, plain, quantum, read_f64, round_to, tag_value, DTYPES, TAGS,
};
use super::{fail, idx, key, JudgeError};

/// Which input is being read: the fixture (presentation) or a read-back (resolved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Side {
    /// A fixture handed to a writer: resolved, and rounded to its declared
    /// precisions as a writer must store it.
    Expected,
    /// A fixture that states what a file holds, values as stored (a
    /// read-accept case's expectation): resolved like `Expected`, never
    /// rounded, since a reader hands back the stored bits.
    Stored,
    /// What an implementation read back: only normalized.
    Actual,
    /// A written file's content as the harness read it, updates as stored
    /// (a presentation): resolved like `Stored`, never rounded, and given
    /// nothing the writer had to write (no `molrec_version`, no derived
    /// `sequence_schema`).
    File,
}

/// A collection in logical form.
pub(super) struct Logical {
    pub value: Value,
    /// The fixture had no `sequence_schema` and the judge derived one.
    pub schema_derived: bool,
}

/// The parts of a `sequence_schema` that resolution needs.
struct Schema {
    logical: Value,
    /// block -> column -> declared precision.
    precision: BTreeMap<String, BTreeMap<String, f64>>,
    /// per-step key -> (tag, normalized fill if any).
    meta: BTreeMap<String, (String, Option<Value>)>,
}

fn obj<'a>(v: &'a Value, path: &str, what: &str) -> Result<&'a Map<String, Value>, JudgeError> {
    match v {
        Value::Object(m) => Ok(m),
        _ => fail(path, format!("{what} must be an object, found {}", kind(v))),
    }
}

fn arr<'a>(v: &'a Value, path: &str, what: &str) -> Result<&'a Vec<Value>, JudgeError> {
    match v {
        Value::Array(a) => Ok(a),
        _ => fail(path, format!("{what} must be an array, found {}", kind(v))),
    }
}

/// Refuses keys outside `allowed`: an unknown key would otherwise be data the
/// judge silently ignores.
fn allow(m: &Map<String, Value>, path: &str, allowed: &[&str]) -> Result<(), JudgeError> {
    match m.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => fail(&key(path, k), "unknown key"),
        None => Ok(()),
    }
}

/// An optional key: absent and `null` are the same.
fn opt<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    m.get(k).filter(|v| !v.is_null())
}

fn required<'a>(m: &'a Map<String, Value>, path: &str, k: &str) -> Result<&'a Value, JudgeError> {
    match opt(m, k) {
        Some(v) => Ok(v),
        None => fail(&key(path, k), "required key is missing"),
    }
}

fn uint(v: &Value, path: &str) -> Result<u64, JudgeError> {
    match v.as_u64() {
        Some(n) => Ok(n),
        None => fail(
            path,
            format!("expected a non-negative integer, found {}", kind(v)),
        ),
    }
}

fn uints(v: &Value, path: &str) -> Result<Vec<u64>, JudgeError> {
    let a = arr(v, path, "a shape")?;
    a.iter()
        .enumerate()
        .map(|(i, x)| uint(x, &idx(path, i)))
        .collect()
}

fn dtype<'a>(v: &'a Value, path: &str, set: &[&str]) -> Result<&'a str, JudgeError> {
    match v.as_str() {
        Some(d) if set.contains(&d) => Ok(d),
        _ => fail(path, format!("unknown type {v}")),
    }
}

fn plain_object(v: &Value, path: &str, what: &str) -> Result<Map<String, Value>, JudgeError> {
    match plain(v) {
        Value::Object(m) => Ok(m),
        _ => fail(path, format!("{what} must be an object, found {}", kind(v))),
    }
}

fn targets(v: &Value, path: &str) -> Result<Map<String, Value>, JudgeError> {
    let m = obj(v, path, "targets")?;
    for (k, t) in m {
        if !t.is_string() {
            return fail(&key(path, k), "a target is a string");
        }
    }
    Ok(m.clone())
}

fn shape_value(s: &[u64]) -> Value {
    Value::Array(s.iter().map(|&n| Value::from(n)).collect())
}

/// Reads a whole collection into logical form.
pub(super) fn collection(v: &Value, side: Side) -> Result<Logical, JudgeError> {
    let m = obj(v, "", "a collection")?;
    allow(
        m,
        "",
        &["meta", "sequence_schema", "index", "forcefield", "records"],
    )?;
    let mut meta = plain_object(required(m, "", "meta")?, "meta", "the collection document")?;
    let fixture = matches!(side, Side::Expected | Side::Stored);
    if fixture && !meta.contains_key("molrec_version") {
        meta.insert("molrec_version".into(), Value::from(1u64)); // the writer stamps it (§2)
    }
    let records = arr(required(m, "", "records")?, "records", "records")?;
    let (schema, schema_derived) = match opt(m, "sequence_schema") {
        Some(s) => (Some(read_schema(s, "sequence_schema")?), false),
        None if fixture => (Some(derive_schema(records)?), true),
        None => (None, false),
    };
    let mut out = Map::new();
    out.insert("meta".into(), Value::Object(meta));
    if let Some(s) = &schema {
        out.insert("sequence_schema".into(), s.logical.clone());
    }
    let mut index = Map::new();
    if let Some(ix) = opt(m, "index") {
        for (name, c) in obj(ix, "index", "index")? {
            let rule = ColumnRule {
                round: side == Side::Expected,
                schema_precision: None,
                keep_precision: true,
            };
            index.insert(name.clone(), column(c, &key("index", name), None, &rule)?);
        }
    }
    out.insert("index".into(), Value::Object(index));
    if let Some(ff) = opt(m, "forcefield") {
        out.insert("forcefield".into(), forcefield(ff, "forcefield", side)?);
    }
    let recs = records
        .iter()
        .enumerate()
        .map(|(i, r)| record(r, &idx("records", i), side, schema.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    out.insert("records".into(), Value::Array(recs));
    Ok(Logical {
        value: Value::Object(out),
        schema_derived,
    })
}

fn read_schema(v: &Value, path: &str) -> Result<Schema, JudgeError> {
    let m = obj(v, path, "sequence_schema")?;
    allow(m, path, &["blocks", "meta"])?;
    let mut precision = BTreeMap::new();
    let mut blocks_out = Map::new();
    let bpath = key(path, "blocks");
    let empty = Map::new();
    let blocks = match opt(m, "blocks") {
        Some(b) => obj(b, &bpath, "blocks")?,
        None => &empty,
    };
    for (name, b) in blocks {
        let p = key(&bpath, name);
        let bm = obj(b, &p, "a block declaration")?;
        allow(
            bm,
            &p,
            &["columns", "structural_shape", "targets", "aligned_with"],
        )?;
        let mut block_out = Map::new();
        let mut cols_out = Map::new();
        let cpath = key(&p, "columns");
        let cols = match opt(bm, "columns") {
            Some(c) => obj(c, &cpath, "columns")?,
            None => &empty,
        };
        for (cname, c) in cols {
            let cp = key(&cpath, cname);
            let cm = obj(c, &cp, "a column declaration")?;
            allow(cm, &cp, &["dtype", "trailing", "nullable", "precision"])?;
            let d = dtype(required(cm, &cp, "dtype")?, &key(&cp, "dtype"), &DTYPES)?;
            let trailing = match opt(cm, "trailing") {
                Some(t) => uints(t, &key(&cp, "trailing"))?,
                None => Vec::new(),
            };
            let nullable = match opt(cm, "nullable") {
                Some(Value::Bool(b)) => *b,
                None => false,
                Some(x) => {
                    return fail(
                        &key(&cp, "nullable"),
                        format!("expected a bool, found {}", kind(x)),
                    )
                }
            };
            let mut col_out = Map::new();
            col_out.insert("dtype".into(), Value::from(d));
            col_out.insert("trailing".into(), shape_value(&trailing));
            col_out.insert("nullable".into(), Value::Bool(nullable));
            if let Some(pv) = opt(cm, "precision") {
                let pp = key(&cp, "precision");
                let p = read_f64(pv, &pp)?;
                if d != "f64" || quantum(p).is_none() {
                    return fail(
                        &pp,
                        "precision is a finite value in [2^-1000, 2^1000] on an f64 column",
                    );
                }
                precision
                    .entry(name.clone())
                    .or_insert_with(BTreeMap::new)
                    .insert(cname.clone(), p);
                col_out.insert("precision".into(), f64_value(p));
            }
            cols_out.insert(cname.clone(), Value::Object(col_out));
        }
        block_out.insert("columns".into(), Value::Object(cols_out));
        if let Some(s) = opt(bm, "structural_shape") {
            block_out.insert(
                "structural_shape".into(),
                shape_value(&uints(s, &key(&p, "structural_shape"))?),
            );
        }
        if let Some(t) = opt(bm, "targets") {
            let t = targets(t, &key(&p, "targets"))?;
            if !t.is_empty() {
                block_out.insert("targets".into(), Value::Object(t));
            }
        }
        if let Some(a) = opt(bm, "aligned_with") {
            if !a.is_string() {
                return fail(&key(&p, "aligned_with"), "aligned_with names a block");
            }
            block_out.insert("aligned_with".into(), a.clone());
        }
        blocks_out.insert(name.clone(), Value::Object(block_out));
    }
    let mut meta = BTreeMap::new();
    let mut meta_out = Map::new();
    let mpath = key(path, "meta");
    let decls = match opt(m, "meta") {
        Some(d) => obj(d, &mpath, "meta")?,
        None => &empty,
    };
    for (k, d) in decls {
        let p = key(&mpath, k);
        let dm = obj(d, &p, "a per-step declaration")?;
        allow(dm, &p, &["dtype", "fill"])?;
        let tag = dtype(required(dm, &p, "dtype")?, &key(&p, "dtype"), &TAGS)?;
        // `fill: null` is a fill (for json keys), so `get`, not `opt`.
        let fill = match dm.get("fill") {
            None => None,
            Some(Value::Null) if tag != "json" => {
                return fail(&key(&p, "fill"), "fill: null is valid only for a json key")
            }
            Some(f) => Some(tag_value(tag, f, &key(&p, "fill"))?),
        };
        let mut decl_out = Map::new();
        decl_out.insert("dtype".into(), Value::from(tag));
        if let Some(f) = &fill {
            decl_out.insert("fill".into(), f.clone());
        }
        meta_out.insert(k.clone(), Value::Object(decl_out));
        meta.insert(k.clone(), (tag.to_string(), fill));
    }
    let mut logical = Map::new();
    logical.insert("blocks".into(), Value::Object(blocks_out));
    logical.insert("meta".into(), Value::Object(meta_out));
    Ok(Schema {
        logical: Value::Object(logical),
        precision,
        meta,
    })
}

/// Derives the declaration of a fixture without one (§10): the union of the
/// records' blocks, as each record states them in its own `schema` and as its
/// updates present them, and the per-step declaration the records state (they
/// must agree); a key no record declares gets the tag §7 infers from its
/// values. Malformed updates are skipped here; the main pass refuses them
/// with the path of the offending value.
fn derive_schema(records: &[Value]) -> Result<Schema, JudgeError> {
    let mut blocks = Map::new();
    let mut stated_meta: Option<Value> = None;
    let mut tags: BTreeMap<String, &'static str> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        let tpath = key(&idx("records", i), "trajectory");
        let Some(t) = r.get("trajectory").filter(|t| !t.is_null()) else {
            continue;
        };
        if let Some(s) = t.get("schema").filter(|s| !s.is_null()) {
            let spath = key(&tpath, "schema");
            let own = read_schema(s, &spath)?;
            match &stated_meta {
                Some(m) if *m != own.logical["meta"] => {
                    return fail(
                        &key(&spath, "meta"),
                        "records state different per-step declarations",
                    )
                }
                Some(_) => {}
                None => stated_meta = Some(own.logical["meta"].clone()),
            }
            for (name, b) in own.logical["blocks"].as_object().into_iter().flatten() {
                let decl = blocks
                    .entry(name.clone())
                    .or_insert_with(|| json!({"columns": {}}));
                for k in ["structural_shape", "targets", "aligned_with"] {
                    if let (Some(x), None) = (b.get(k), decl.get(k)) {
                        decl[k] = x.clone();
                    }
                }
                let cpath = key(&key(&key(&spath, "blocks"), name), "columns");
                for (cname, c) in b["columns"].as_object().into_iter().flatten() {
                    merge_column(decl, cname, c.clone(), &key(&cpath, cname))?;
                }
            }
        }
        let Some(frames) = t.get("frames").and_then(Value::as_array) else {
            continue;
        };
        for (j, f) in frames.iter().enumerate() {
            for (k, v) in f
                .get("meta")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                // "NaN"-like strings are f64 spellings when the key's other
                // values are numbers, strings otherwise ("nonfinite" below).
                let t = match v.as_str() {
                    Some("NaN" | "Infinity" | "-Infinity") => "nonfinite",
                    _ => infer_tag(v),
                };
                let numeric = ["i64", "u64", "f64", "nonfinite"];
                let merged = match tags.get(k) {
                    None => t,
                    Some(&old) if old == t => t,
                    Some(&old) if numeric.contains(&old) && numeric.contains(&t) => "f64",
                    Some(&old) if [old, t] == ["string", "nonfinite"] => "string",
                    Some(&old) if [old, t] == ["nonfinite", "string"] => "string",
                    Some(_) => "json",
                };
                tags.insert(k.clone(), merged);
            }
            let bpath = key(&idx(&key(&tpath, "frames"), j), "blocks");
            for (name, b) in f
                .get("blocks")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
            {
                let decl = blocks
                    .entry(name.clone())
                    .or_insert_with(|| json!({"columns": {}}));
                for k in ["structural_shape", "targets"] {
                    let well_formed = |x: &&Value| match k {
                        "targets" => x
                            .as_object()
                            .is_some_and(|t| t.values().all(Value::is_string)),
                        _ => x.as_array().is_some_and(|s| s.iter().all(Value::is_u64)),
                    };
                    if let (Some(x), None) = (b.get(k).filter(well_formed), decl.get(k)) {
                        decl[k] = x.clone();
                    }
                }
                let cpath = key(&key(&bpath, name), "columns");
                for (cname, c) in b
                    .get("columns")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                {
                    // Only well-formed columns are derived (see above).
                    let (d, shape) =
                        match (c.get("dtype"), c.get("shape").and_then(Value::as_array)) {
                            (Some(d), Some(s))
                                if d.as_str().is_some_and(|d| DTYPES.contains(&d))
                                    && !s.is_empty()
                                    && s.iter().all(Value::is_u64) =>
                            {
                                (d, s)
                            }
                            _ => continue,
                        };
                    let validity = c.get("validity").and_then(Value::as_array);
                    let nullable = validity.is_some_and(|v| v.contains(&Value::Bool(false)));
                    let mut col = json!({"dtype": d, "trailing": shape[1..], "nullable": nullable});
                    let p = c.get("precision").and_then(Value::as_f64);
                    if let Some(p) = p.filter(|&p| d == "f64" && quantum(p).is_some()) {
                        col["precision"] = Value::from(p);
                    }
                    merge_column(decl, cname, col, &key(&cpath, cname))?;
                }
            }
        }
    }
    let mut meta = match stated_meta {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    for (k, t) in tags {
        // §9: these per-step keys are always f64.
        let canonical_f64 = ["pe", "ke", "etotal", "temp", "press", "volume"].contains(&k.as_str());
        let t = match t {
            _ if canonical_f64 => "f64",
            "nonfinite" => "string",
            t => t,
        };
        meta.entry(k).or_insert_with(|| json!({ "dtype": t }));
    }
    read_schema(
        &json!({"blocks": blocks, "meta": meta}),
        "sequence_schema (derived)",
    )
}

/// Adds one column declaration to a derived block declaration: records agree
/// on dtype, trailing shape and (where stated) precision; nullability is OR-ed.
fn merge_column(decl: &mut Value, cname: &str, col: Value, path: &str) -> Result<(), JudgeError> {
    let Some(old) = decl["columns"].get_mut(cname) else {
        decl["columns"][cname] = col;
        return Ok(());
    };
    let precision_differs =
        matches!((old.get("precision"), col.get("precision")), (Some(a), Some(b)) if a != b);
    if old["dtype"] != col["dtype"] || old["trailing"] != col["trailing"] || precision_differs {
        return fail(
            path,
            "records disagree on this column's dtype, trailing shape or precision",
        );
    }
    if col["nullable"] == Value::Bool(true) {
        old["nullable"] = Value::Bool(true);
    }
    if let (None, Some(p)) = (old.get("precision"), col.get("precision")) {
        old["precision"] = p.clone();
    }
    Ok(())
}

fn record(v: &Value, path: &str, side: Side, schema: Option<&Schema>) -> Result<Value, JudgeError> {
    let m = obj(v, path, "a record")?;
    allow(m, path, &["meta", "system", "trajectory"])?;
    let mut out = Map::new();
    let meta = match opt(m, "meta") {
        Some(x) => plain_object(x, &key(path, "meta"), "a record's meta")?,
        None => Map::new(),
    };
    out.insert("meta".into(), Value::Object(meta));
    if let Some(s) = opt(m, "system") {
        out.insert("system".into(), system(s, &key(path, "system"), side)?);
    }
    if let Some(t) = opt(m, "trajectory") {
        out.insert(
            "trajectory".into(),
            trajectory(t, &key(path, "trajectory"), side, schema)?,
        );
    }
    Ok(Value::Object(out))
}

fn system(v: &Value, path: &str, side: Side) -> Result<Value, JudgeError> {
    let m = obj(v, path, "a frame")?;
    allow(m, path, &["meta", "meta_types", "blocks", "box"])?;
    let empty = Map::new();
    let meta = match opt(m, "meta") {
        Some(x) => obj(x, &key(path, "meta"), "meta")?,
        None => &empty,
    };
    let tpath = key(path, "meta_types");
    let given = match opt(m, "meta_types") {
        Some(x) => obj(x, &tpath, "meta_types")?,
        None => &empty,
    };
    let mut types = Map::new();
    for (k, t) in given {
        let tag = dtype(t, &key(&tpath, k), &TAGS)?;
        if !meta.contains_key(k) {
            return fail(&key(&tpath, k), "meta_types names a key absent from meta");
        }
        types.insert(k.clone(), Value::from(tag));
    }
    let mut meta_out = Map::new();
    for (k, x) in meta {
        let tag = given
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or_else(|| infer_tag(x));
        types.insert(k.clone(), Value::from(tag));
        meta_out.insert(k.clone(), tag_value(tag, x, &key(&key(path, "meta"), k))?);
    }
    let mut out = Map::new();
    out.insert("meta".into(), Value::Object(meta_out));
    out.insert("meta_types".into(), Value::Object(types));
    out.insert("blocks".into(), Value::Object(blocks(m, path, side, None)?));
    if let Some(b) = opt(m, "box") {
        out.insert("box".into(), cell_box(b, &key(path, "box"), side)?);
    }
    Ok(Value::Object(out))
}

fn forcefield(v: &Value, path: &str, side: Side) -> Result<Value, JudgeError> {
    let m = obj(v, path, "the force field")?;
    allow(m, path, &["meta", "blocks"])?;
    let meta = match opt(m, "meta") {
        Some(x) => plain_object(x, &key(path, "meta"), "the force-field document")?,
        None => Map::new(),
    };
    let mut out = Map::new();
    out.insert("meta".into(), Value::Object(meta));
    out.insert("blocks".into(), Value::Object(blocks(m, path, side, None)?));
    Ok(Value::Object(out))
}

/// The `blocks` of a frame; `traj` carries the schema's precisions when the
/// frame is a trajectory update.
fn blocks(
    frame: &Map<String, Value>,
    path: &str,
    side: Side,
    traj: Option<&BTreeMap<String, BTreeMap<String, f64>>>,
) -> Result<Map<String, Value>, JudgeError> {
    let bpath = key(path, "blocks");
    let mut out = Map::new();
    if let Some(b) = opt(frame, "blocks") {
        for (name, blk) in obj(b, &bpath, "blocks")? {
            let precisions = traj.map(|t| t.get(name));
            out.insert(
                name.clone(),
                block(blk, &key(&bpath, name), side, precisions)?,
            );
        }
    }
    Ok(out)
}

/// One block. `traj` is `Some` for a trajectory block (with the schema's
/// precisions of that block, if any).
fn block(
    v: &Value,
    path: &str,
    side: Side,
    traj: Option<Option<&BTreeMap<String, f64>>>,
) -> Result<Value, JudgeError> {
    let m = obj(v, path, "a block")?;
    allow(
        m,
        path,
        &[
            "count",
            "columns",
            "structural_shape",
            "targets",
            "attributes",
        ],
    )?;
    let count = uint(required(m, path, "count")?, &key(path, "count"))?;
    let mut out = Map::new();
    out.insert("count".into(), Value::from(count));
    let cpath = key(path, "columns");
    let mut cols = Map::new();
    if let Some(c) = opt(m, "columns") {
        for (name, col) in obj(c, &cpath, "columns")? {
            let rule = ColumnRule {
                round: side == Side::Expected,
                schema_precision: traj.flatten().and_then(|p| p.get(name)).copied(),
                keep_precision: traj.is_none(),
            };
            cols.insert(
                name.clone(),
                column(col, &key(&cpath, name), Some(count), &rule)?,
            );
        }
    }
    out.insert("columns".into(), Value::Object(cols));
    if let Some(s) = opt(m, "structural_shape") {
        let s = uints(s, &key(path, "structural_shape"))?;
        if traj.is_none() {
            out.insert("structural_shape".into(), shape_value(&s));
        }
    }
    if let Some(t) = opt(m, "targets") {
        let t = targets(t, &key(path, "targets"))?;
        if traj.is_none() && !t.is_empty() {
            out.insert("targets".into(), Value::Object(t));
        }
    }
    if let Some(a) = opt(m, "attributes") {
        let a = plain_object(a, &key(path, "attributes"), "attributes")?;
        if !a.is_empty() {
            out.insert("attributes".into(), Value::Object(a));
        }
    }
    Ok(Value::Object(out))
}

/// How a column's values and `precision` key are treated.
struct ColumnRule {
    /// Apply the precision to the values (the expected side only: readers never re-round).
    round: bool,
    /// The trajectory declaration's precision, which wins over the column's own key.
    schema_precision: Option<f64>,
    /// Keep the column's own `precision` key (not on trajectory updates, §6).
    keep_precision: bool,
}

/// One column; `count` is the block's row count (`None` for index columns).
fn column(
    v: &Value,
    path: &str,
    count: Option<u64>,
    rule: &ColumnRule,
) -> Result<Value, JudgeError> {
    let m = obj(v, path, "a column")?;
    allow(
        m,
        path,
        &["dtype", "shape", "values", "validity", "precision"],
    )?;
    let d = dtype(required(m, path, "dtype")?, &key(path, "dtype"), &DTYPES)?;
    let spath = key(path, "shape");
    let shape = uints(required(m, path, "shape")?, &spath)?;
    let rows = match shape.first() {
        Some(&r) => r,
        None => return fail(&spath, "a shape has a leading axis"),
    };
    if let Some(c) = count.filter(|&c| c != rows) {
        return fail(
            &spath,
            format!("leading axis {rows} is not the block's count {c}"),
        );
    }
    let row_len = shape[1..].iter().try_fold(1u64, |a, &b| a.checked_mul(b));
    let n = row_len.and_then(|l| l.checked_mul(rows));
    let (row_len, n) = match (row_len, n) {
        (Some(l), Some(n)) => (l, n),
        _ => return fail(&spath, "the product of the shape overflows"),
    };
    let vpath = key(path, "values");
    let values = arr(required(m, path, "values")?, &vpath, "values")?;
    if values.len() as u64 != n {
        return fail(
            &vpath,
            format!(
                "{} values for shape {shape:?}, which holds {n}",
                values.len()
            ),
        );
    }
    let mpath = key(path, "validity");
    let validity: Option<Vec<bool>> = match opt(m, "validity") {
        None => None,
        Some(x) => {
            let a = arr(x, &mpath, "validity")?;
            if a.len() as u64 != rows {
                return fail(&mpath, format!("{} flags for {rows} rows", a.len()));
            }
            let flags = a
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    b.as_bool().ok_or_else(|| {
                        JudgeError::new(&idx(&mpath, i), "a validity flag is a bool")
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            Some(flags)
        }
    };
    let ppath = key(path, "precision");
    let own = match opt(m, "precision") {
        None => None,
        Some(_) if d != "f64" => return fail(&ppath, "precision is declared on f64 columns only"),
        Some(x) => Some(read_f64(x, &ppath)?),
    };
    let q = match rule.schema_precision.or(own) {
        Some(p) if rule.round => match quantum(p) {
            Some(q) => Some(q),
            None => return fail(&ppath, "precision is a finite value in [2^-1000, 2^1000]"),
        },
        _ => None,
    };
    let mut out_values = Vec::with_capacity(values.len());
    for (k, x) in values.iter().enumerate() {
        // row_len > 0 here: a zero row length means no values at all.
        let row = usize::try_from(k as u64 / row_len).unwrap_or(usize::MAX);
        if validity
            .as_ref()
            .is_some_and(|f| f.get(row) == Some(&false))
        {
            out_values.push(Value::Null); // a value under a null row means nothing (§6)
            continue;
        }
        let kp = idx(&vpath, k);
        out_values.push(match q {
            Some(q) if d == "f64" => f64_value(round_to(read_f64(x, &kp)?, q)),
            _ => cell(d, x, &kp)?,
        });
    }
    let mut out = Map::new();
    out.insert("dtype".into(), Value::from(d));
    out.insert("shape".into(), shape_value(&shape));
    out.insert("values".into(), Value::Array(out_values));
    if let Some(f) = validity.filter(|f| f.contains(&false)) {
        out.insert(
            "validity".into(),
            Value::Array(f.into_iter().map(Value::Bool).collect()),
        );
    }
    if let (Some(p), true) = (own, rule.keep_precision) {
        out.insert("precision".into(), f64_value(p));
    }
    Ok(Value::Object(out))
}

fn fixed<'a>(v: &'a Value, path: &str, n: usize, what: &str) -> Result<&'a Vec<Value>, JudgeError> {
    match v {
        Value::Array(a) if a.len() == n => Ok(a),
        _ => fail(path, format!("{what} is an array of {n}")),
    }
}

fn f64s(v: &Value, path: &str, what: &str) -> Result<Vec<Value>, JudgeError> {
    let a = fixed(v, path, 3, what)?;
    a.iter()
        .enumerate()
        .map(|(i, x)| cell("f64", x, &idx(path, i)))
        .collect()
}

/// The cell (§8), defaults applied. On a fixture (expected or stored), an
/// undefined cell has identity vectors and all-false boundary whatever it
/// states, since that is what a reader must hand back (frame.md, "An
/// undefined cell"); what a reader handed back is taken as it is, so a
/// reader returning the stored vectors of an undefined cell is caught.
fn cell_box(v: &Value, path: &str, side: Side) -> Result<Value, JudgeError> {
    let m = obj(v, path, "a box")?;
    allow(m, path, &["vectors", "origin", "boundary", "cell_defined"])?;
    let vpath = key(path, "vectors");
    let rows = fixed(required(m, path, "vectors")?, &vpath, 3, "vectors")?;
    let mut vectors = rows
        .iter()
        .enumerate()
        .map(|(i, r)| f64s(r, &idx(&vpath, i), "a row of vectors").map(Value::Array))
        .collect::<Result<Vec<_>, _>>()?;
    let origin = match opt(m, "origin") {
        Some(o) => f64s(o, &key(path, "origin"), "origin")?,
        None => vec![f64_value(0.0); 3],
    };
    let defined = match opt(m, "cell_defined") {
        Some(Value::Bool(b)) => *b,
        None => true,
        Some(x) => {
            return fail(
                &key(path, "cell_defined"),
                format!("expected a bool, found {}", kind(x)),
            )
        }
    };
    let bpath = key(path, "boundary");
    let mut boundary = match opt(m, "boundary") {
        Some(b) => fixed(b, &bpath, 3, "boundary")?
            .iter()
            .enumerate()
            .map(|(i, x)| cell("bool", x, &idx(&bpath, i)))
            .collect::<Result<Vec<_>, _>>()?,
        // An omitted boundary is all-true on a defined cell and all-false
        // on an undefined one, whoever omits it (frame.md, "An undefined
        // cell"; canonical-json.md: "also when `boundary` is omitted").
        None => vec![Value::Bool(defined); 3],
    };
    if !defined && side != Side::Actual {
        vectors = (0..3)
            .map(|i| {
                Value::Array(
                    (0..3)
                        .map(|j| f64_value(if i == j { 1.0 } else { 0.0 }))
                        .collect(),
                )
            })
            .collect();
        boundary = vec![Value::Bool(false); 3];
    }
    let mut out = Map::new();
    out.insert("vectors".into(), Value::Array(vectors));
    out.insert("origin".into(), Value::Array(origin));
    out.insert("boundary".into(), Value::Array(boundary));
    out.insert("cell_defined".into(), Value::Bool(defined));
    Ok(Value::Object(out))
}

/// A trajectory. On the expected side every frame is resolved (§9): blocks
/// and the cell carry forward within the record, fills are materialized,
/// `time` must be on all frames or none. On the actual side frames are
/// normalized as given, per-step values typed by the actual's own schema
/// (inferred for keys it does not declare).
fn trajectory(
    v: &Value,
    path: &str,
    side: Side,
    schema: Option<&Schema>,
) -> Result<Value, JudgeError> {
    let m = obj(v, path, "a trajectory")?;
    allow(m, path, &["frames", "schema"])?;
    // A record's own declaration equals the collection's in a valid
    // collection, and a file keeps only the latter: it is checked for form,
    // used by `derive_schema`, and not part of the logical content.
    if let Some(s) = opt(m, "schema") {
        read_schema(s, &key(path, "schema"))?;
    }
    let fpath = key(path, "frames");
    let frames = arr(required(m, path, "frames")?, &fpath, "frames")?;
    let resolve = side != Side::Actual;
    let has_time = frames
        .first()
        .and_then(Value::as_object)
        .is_some_and(|f| opt(f, "time").is_some());
    let mut state = Map::new();
    let mut cur_box: Option<Value> = None;
    let mut out = Vec::with_capacity(frames.len());
    let empty = BTreeMap::new();
    let precisions = schema.map_or(&empty, |s| &s.precision);
    for (j, f) in frames.iter().enumerate() {
        let p = idx(&fpath, j);
        let fm = obj(f, &p, "a trajectory frame")?;
        allow(fm, &p, &["step", "time", "meta", "blocks", "box"])?;
        let mut frame = Map::new();
        frame.insert(
            "step".into(),
            cell("i64", required(fm, &p, "step")?, &key(&p, "step"))?,
        );
        let time = opt(fm, "time");
        if resolve && time.is_some() != has_time {
            return fail(&key(&p, "time"), "time is on every frame or on none");
        }
        if let Some(t) = time {
            frame.insert("time".into(), cell("f64", t, &key(&p, "time"))?);
        }
        let mpath = key(&p, "meta");
        let mut meta = Map::new();
        if let Some(x) = opt(fm, "meta") {
            for (k, val) in obj(x, &mpath, "per-step meta")? {
                let tag = match schema.and_then(|s| s.meta.get(k)) {
                    Some((t, _)) => t.as_str(),
                    None if resolve => {
                        return fail(
                            &key(&mpath, k),
                            "per-step key not declared in sequence_schema",
                        )
                    }
                    None => infer_tag(val),
                };
                meta.insert(k.clone(), tag_value(tag, val, &key(&mpath, k))?);
            }
        }
        if let (true, Some(s)) = (resolve, schema) {
            for (k, (_, fill)) in &s.meta {
                if !meta.contains_key(k) {
                    match fill {
                        Some(f) => meta.insert(k.clone(), f.clone()),
                        None => {
                            return fail(
                                &key(&mpath, k),
                                "declared per-step key without a value or a fill",
                            )
                        }
                    };
                }
            }
        }
        frame.insert("meta".into(), Value::Object(meta));
        let blocks = blocks(fm, &p, side, Some(precisions))?;
        let bx = match opt(fm, "box") {
            Some(b) => Some(cell_box(b, &key(&p, "box"), side)?),
            None => None,
        };
        if resolve {
            state.extend(blocks);
            cur_box = bx.or(cur_box);
            frame.insert("blocks".into(), Value::Object(state.clone()));
            if let Some(b) = &cur_box {
                frame.insert("box".into(), b.clone());
            }
        } else {
            frame.insert("blocks".into(), Value::Object(blocks));
            if let Some(b) = bx {
                frame.insert("box".into(), b);
            }
        }
        out.push(Value::Object(frame));
    }
    let mut t = Map::new();
    t.insert("frames".into(), Value::Array(out));
    Ok(Value::Object(t))
}
