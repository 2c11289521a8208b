//! A reader's obligations, each with a plausible bug of an independent
//! reader: what a reader with the bug hands back, made from what a
//! conforming reader hands back (the fixture's logical content) and from
//! how the file stores it (which updates hold which blocks and cells).
//! Where the bug does not show in a file, `apply` hands back the
//! conforming answer unchanged.

mod answers;
mod stored;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::image::Image;
use super::shapes;
use answers::*;
pub use stored::{Place, Stored};

/// A reader's bug and the rule it breaks.
pub struct ReaderBug {
    /// Stable id (`rule/bug`).
    pub id: &'static str,
    /// The resolution rule or reading duty.
    pub rule: &'static str,
    /// The clauses whose sentences the bug breaks, the first the nearest.
    pub clauses: &'static [&'static str],
    /// What the buggy reader does.
    pub what: &'static str,
    /// What the bug does to the answer.
    pub effect: Effect,
}

/// How a reader bug shows.
pub enum Effect {
    /// The buggy reader's answer, from the conforming answer (logical
    /// form) and the file's stored layout.
    Answer(fn(&Value, &Stored) -> Value),
    /// The reader refuses a conforming file: whether this file has the
    /// shape it refuses. A read trial fails on any refusal of a valid file.
    Refuses(fn(&Image, &Stored) -> bool),
    /// The reader reads a malformed file it must refuse: whether this file
    /// (a read-refusal recipe's) has the shape it lets through. A
    /// read-refusal trial fails on any answer but a refusal; on a valid
    /// file the bug changes nothing.
    Accepts(fn(&Image) -> bool),
}

macro_rules! bug {
    ($id:literal, $rule:literal, [$($clause:literal),+], $what:literal, $effect:ident($apply:expr)) => {
        ReaderBug {
            id: $id,
            rule: $rule,
            clauses: &[$($clause),+],
            what: $what,
            effect: Effect::$effect($apply),
        }
    };
    ($id:literal, $rule:literal, [$($clause:literal),+], $what:literal, $apply:expr) => {
        bug!($id, $rule, [$($clause),+], $what, Answer($apply))
    };
}

/// Every reader bug the suite is measured against.
pub fn catalog() -> Vec<ReaderBug> {
    vec![
        bug!(
            "resolve/no-block-carry",
            "carry-forward of blocks",
            ["lmdb.frame.resolve"],
            "hands back at each frame only the blocks its update holds",
            |v, s| frames(v, |r, k, f| {
                let held = s.blocks.get(r).and_then(|u| u.get(k));
                if let (Some(held), Some(b)) =
                    (held, f.get_mut("blocks").and_then(Value::as_object_mut))
                {
                    b.retain(|name, _| held.contains_key(name));
                }
            })
        ),
        bug!(
            "resolve/no-cell-carry",
            "carry-forward of the cell",
            ["box.trajectory-carry"],
            "hands back a cell only at the frames whose update states one",
            |v, s| frames(v, |r, k, f| {
                if s.cells
                    .get(r)
                    .and_then(|c| c.get(k))
                    .is_some_and(Option::is_none)
                {
                    f.remove("box");
                }
            })
        ),
        bug!(
            "resolve/blocks-cross-records",
            "record-boundary reset",
            ["lmdb.frame.no-cross-record"],
            "keeps its carried blocks across a record boundary",
            |v, s| across_records(v, s, false)
        ),
        bug!(
            "resolve/cell-cross-records",
            "record-boundary reset",
            ["lmdb.frame.no-cross-record"],
            "keeps its carried cell across a record boundary",
            |v, s| across_records(v, s, true)
        ),
        bug!(
            "resolve/zero-row-no-change",
            "zero-row updates",
            ["lmdb.frame.zero-row-empties"],
            "takes a zero-row update for no change",
            |v, s| zero_rows(v, s, false)
        ),
        bug!(
            "resolve/zero-row-absent",
            "zero-row updates",
            ["trajectory.block.states"],
            "takes a zero-row update for the block's absence",
            |v, s| zero_rows(v, s, true)
        ),
        bug!(
            "per-step/shifted",
            "per-step values",
            ["lmdb.frame.meta-materialized"],
            "hands back each frame's per-step values one frame late",
            |v, _| records(v, |rec| {
                let Some(fs) = rec
                    .pointer_mut("/trajectory/frames")
                    .and_then(Value::as_array_mut)
                else {
                    return;
                };
                let metas: Vec<Value> = fs.iter().map(|f| f["meta"].clone()).collect();
                for (k, f) in fs.iter_mut().enumerate().skip(1) {
                    f["meta"] = metas[k - 1].clone();
                }
            })
        ),
        bug!(
            "per-step/fill-dropped",
            "fills",
            ["lmdb.frame.meta-materialized"],
            "leaves out a per-step value equal to its key's fill",
            |v, _| {
                let fills: BTreeMap<String, Value> = v
                    .pointer("/sequence_schema/meta")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flatten()
                    .filter_map(|(k, e)| Some((k.clone(), e.get("fill")?.clone())))
                    .collect();
                frames(v, |_, _, f| {
                    if let Some(m) = f.get_mut("meta").and_then(Value::as_object_mut) {
                        m.retain(|k, x| fills.get(k) != Some(x));
                    }
                })
            }
        ),
        bug!(
            "typed/big-int-through-f64",
            "typed values",
            ["typed-json.forms"],
            "reads integers beyond 2^53 through a double",
            |v, _| map_numbers(v, &mut |x| match x {
                Value::Number(n) if n.as_i64().is_some_and(|i| i.unsigned_abs() > 1 << 53) => {
                    Some(Value::from(n.as_i64()? as f64 as i64))
                }
                Value::Number(n) if n.as_u64().is_some_and(|u| u > 1 << 53) =>
                    Some(Value::from(n.as_u64()? as f64 as u64)),
                _ => None,
            })
        ),
        bug!(
            "typed/negative-zero",
            "typed values",
            ["trajectory.block.change-bitwise"],
            "reads -0.0 as 0.0",
            |v, _| map_numbers(v, &mut |x| match x {
                Value::Number(n)
                    if n.is_f64()
                        && n.as_f64().is_some_and(|f| f == 0.0 && f.is_sign_negative()) =>
                    Some(Value::from(0.0)),
                _ => None,
            })
        ),
        bug!(
            "typed/u64-as-i64",
            "typed values",
            ["column.values"],
            "reads u64 values as i64",
            |v, _| map_numbers(v, &mut |x| match x {
                Value::Number(n) if n.as_u64().is_some_and(|u| u > i64::MAX as u64) =>
                    Some(Value::from(n.as_u64()? as i64)),
                _ => None,
            })
        ),
        bug!(
            "typed/infinity-as-nan",
            "typed values",
            ["typed-json.forms"],
            "reads an infinity as NaN",
            |v, _| map_numbers(v, &mut |x| match x {
                Value::String(s) if s == "Infinity" || s == "-Infinity" => Some(Value::from("NaN")),
                _ => None,
            })
        ),
        bug!(
            "mask/dropped",
            "validity masks",
            ["mrf1.validity"],
            "hands back columns without their masks",
            |v, _| columns(v, |c| {
                c.remove("validity");
            })
        ),
        bug!(
            "precision/rerounded",
            "stored values as stored",
            ["column.precision.no-reround"],
            "rounds values to their declared precision again",
            reround
        ),
        bug!(
            "record/zero-frame-trajectory-lost",
            "zero-frame trajectories",
            ["collection.record.zero-frame"],
            "hands back no trajectory for a record whose trajectory has zero frames",
            |v, _| records(v, |rec| {
                if rec
                    .pointer("/trajectory/frames")
                    .and_then(Value::as_array)
                    .is_some_and(Vec::is_empty)
                {
                    if let Some(r) = rec.as_object_mut() {
                        r.remove("trajectory");
                    }
                }
            })
        ),
        bug!(
            "record/meta-ignored",
            "record meta",
            ["lmdb.record.meta-json", "collection.conformance.round-trip"],
            "hands back an empty meta document for every record",
            |v, _| records(v, |rec| {
                rec["meta"] = Value::Object(Map::new());
            })
        ),
        bug!(
            "index/own-columns-dropped",
            "own index columns",
            [
                "collection.index.as-written",
                "collection.conformance.round-trip"
            ],
            "hands back no own index columns",
            |v, _| {
                let mut v = v.clone();
                v["index"] = Value::Object(Map::new());
                v
            }
        ),
        bug!(
            "index/binding-columns-returned",
            "own index columns",
            ["lmdb.index.own-columns-only"],
            "hands back the binding's index columns as the collection's",
            |v, _| {
                let mut v = v.clone();
                let n = v["records"].as_array().map_or(0, Vec::len);
                if let Some(ix) = v.get_mut("index").and_then(Value::as_object_mut) {
                    ix.insert(
                        "n_frames".into(),
                        serde_json::json!({"dtype": "u64", "shape": [n], "values": vec![0; n]}),
                    );
                }
                v
            }
        ),
        bug!(
            "cell/undefined-stored-vectors",
            "an undefined cell",
            ["box.undefined-cell", "box.undefined-boundary-omitted"],
            "hands back an undefined cell's stored vectors and boundary",
            |v, s| frames(v, |r, k, f| {
                let Some(Some(stored)) = s.cells.get(r).and_then(|c| c.get(k)) else {
                    return;
                };
                if stored.get("cell_defined") != Some(&Value::Bool(false)) {
                    return;
                }
                if let Some(b) = f.get_mut("box").and_then(Value::as_object_mut) {
                    if let Some(vectors) = stored.get("vectors") {
                        b.insert("vectors".into(), vectors.clone());
                    }
                    b.insert(
                        "boundary".into(),
                        stored
                            .get("boundary")
                            .cloned()
                            .unwrap_or(serde_json::json!([true, true, true])),
                    );
                }
            })
        ),
        bug!(
            "step/time-dropped",
            "step and time",
            ["lmdb.frame.time"],
            "hands back no times",
            |v, _| frames(v, |_, _, f| {
                f.remove("time");
            })
        ),
        bug!(
            "step/ordinal",
            "step and time",
            ["lmdb.frame.step"],
            "hands back the ordinal as the step",
            |v, _| frames(v, |_, k, f| {
                f.insert("step".into(), Value::from(k));
            })
        ),
        bug!(
            "system/targets-dropped",
            "system blocks",
            ["mrf1.targets"],
            "hands back a system block without its targets",
            |v, _| system_blocks(v, |b| {
                b.remove("targets");
            })
        ),
        bug!(
            "system/attributes-dropped",
            "system blocks",
            ["mrf1.attributes"],
            "hands back a system block without its attributes",
            |v, _| system_blocks(v, |b| {
                b.remove("attributes");
            })
        ),
        bug!(
            "string/column-major",
            "string columns",
            ["mrf1.string-values"],
            "reads a multi-dimensional string column's values column-major",
            |v, _| columns(v, |c| {
                if c.get("dtype") != Some(&Value::from("string")) {
                    return;
                }
                let (rows, width) = shapes::rows_and_width(&c["shape"]);
                let Some(values) = c.get("values").and_then(Value::as_array).cloned() else {
                    return;
                };
                if values.len() == rows * width && width > 1 {
                    c.insert(
                        "values".into(),
                        Value::Array(
                            (0..rows * width)
                                .map(|k| values[(k % rows) * width + k / rows].clone())
                                .collect(),
                        ),
                    );
                }
            })
        ),
        bug!(
            "cell/undefined-origin-zeroed",
            "an undefined cell",
            ["box.undefined-origin"],
            "hands back an undefined cell's origin as zero",
            |v, _| frames(v, |_, _, f| {
                if let Some(b) = f.get_mut("box").and_then(Value::as_object_mut) {
                    if b.get("cell_defined") == Some(&Value::Bool(false)) {
                        b.insert("origin".into(), serde_json::json!([0.0, 0.0, 0.0]));
                    }
                }
            })
        ),
        bug!(
            "cell/boundary-default-false",
            "cell defaults",
            ["box.defaults"],
            "reads a defined cell's omitted boundary as periodic on no axis",
            |v, s| frames(v, |r, k, f| {
                // The stored cell in effect at k: the last one stated at or before it.
                let stated = s.cells.get(r).and_then(|c| {
                    c[..=k.min(c.len().saturating_sub(1))]
                        .iter()
                        .rev()
                        .flatten()
                        .next()
                });
                let omits = stated.is_some_and(|c| {
                    c.get("boundary").is_none()
                        && c.get("cell_defined") != Some(&Value::Bool(false))
                });
                if let (true, Some(b)) = (omits, f.get_mut("box").and_then(Value::as_object_mut)) {
                    b.insert("boundary".into(), serde_json::json!([false, false, false]));
                }
            })
        ),
        bug!(
            "dtype/widened",
            "column dtypes",
            ["column.dtype.preserved"],
            "hands back narrower integer columns as i64 / u64",
            |v, _| columns(v, |c| {
                let wide = match c.get("dtype").and_then(Value::as_str) {
                    Some("i8" | "i16" | "i32") => "i64",
                    Some("u8" | "u16" | "u32") => "u64",
                    _ => return,
                };
                c.insert("dtype".into(), Value::from(wide));
            })
        ),
        bug!(
            "ff/not-read",
            "the force field",
            [
                "collection.forcefield.round-trip",
                "collection.conformance.forcefield"
            ],
            "hands back no force field",
            |v, _| {
                let mut v = v.clone();
                if let Some(o) = v.as_object_mut() {
                    o.remove("forcefield");
                }
                v
            }
        ),
        bug!(
            "records/reversed",
            "record order",
            ["collection.record.order"],
            "hands back the records in reverse order",
            |v, _| {
                let mut v = v.clone();
                if let Some(r) = v["records"].as_array_mut() {
                    r.reverse();
                }
                v
            }
        ),
        bug!(
            "refuses/ff-as-frame-102",
            "frame keys",
            ["lmdb.keys.exact-frame-keys", "lmdb.ff.key"],
            "loads frames by a scan of the keys starting `f`, taking `ff` for frame 102 (0x66)",
            // The `ff` value, read as update 102, has no `step`: the reader
            // stops there (a crash, which fails the read trial as a refusal does).
            Refuses(|img, _| shapes::ff_over_frame_102(img))
        ),
        bug!(
            "resolve/zero-row-trailing-dropped",
            "zero-row updates",
            ["lmdb.frame.zero-row-empties", "column.shape"],
            "hands back a zero-row update's columns with shape [0], without their trailing axes",
            |v, _| frames(v, |_, _, f| {
                for b in f
                    .get_mut("blocks")
                    .and_then(Value::as_object_mut)
                    .into_iter()
                    .flat_map(|b| b.values_mut())
                {
                    if b.get("count").and_then(Value::as_u64) != Some(0) {
                        continue;
                    }
                    for c in b
                        .get_mut("columns")
                        .and_then(Value::as_object_mut)
                        .into_iter()
                        .flat_map(|c| c.values_mut())
                    {
                        c["shape"] = serde_json::json!([0]);
                    }
                }
            })
        ),
        bug!(
            "resolve/absent-as-empty",
            "carry-forward of blocks",
            ["trajectory.block.states", "lmdb.frame.resolve"],
            "hands back every declared block at every frame, empty where it has not appeared yet",
            absent_as_empty
        ),
        bug!(
            "cell/fields-carried",
            "cell defaults",
            ["box.defaults", "box.trajectory-carry"],
            "merges each stated cell into the previous one field by field, so an omitted origin or boundary keeps the previous value",
            cell_fields_carried
        ),
        bug!(
            "index/mask-dropped",
            "own index columns",
            ["collection.index.as-written", "mrf1.validity"],
            "hands back own index columns without their validity masks",
            |v, _| index_columns(v, |_, c| {
                c.remove("validity");
            })
        ),
        bug!(
            "index/one-value-per-record",
            "own index columns",
            ["collection.index.as-written", "column.shape"],
            "reads each own index column as one value per record: shape [R], its first R values",
            |v, _| index_columns(v, |records, c| {
                // Only a column with trailing axes changes (its values are
                // cut to R even when each row holds one).
                if c["shape"].as_array().is_none_or(|s| s.len() < 2) {
                    return;
                }
                c.insert("shape".into(), serde_json::json!([records]));
                if let Some(values) = c.get_mut("values").and_then(Value::as_array_mut) {
                    values.truncate(records);
                }
            })
        ),
        bug!(
            "per-step/nan-as-fill",
            "fills",
            ["trajectory.meta.required-or-fill", "lmdb.frame.meta-materialized"],
            "hands back a stored NaN per-step value of a key with a fill as the fill",
            |v, _| {
                let fills = declared_meta(v, |e| e.get("fill").cloned());
                frames(v, |_, _, f| {
                    let Some(m) = f.get_mut("meta").and_then(Value::as_object_mut) else {
                        return;
                    };
                    for (key, fill) in &fills {
                        if m.get(key).is_none_or(|x| x == "NaN") {
                            m.insert(key.clone(), fill.clone());
                        }
                    }
                })
            }
        ),
        bug!(
            "typed/json-string-parsed",
            "typed values",
            ["typed-json.forms", "mrf1.meta-typed"],
            "parses a json-tagged per-step value that is a string as JSON text",
            |v, _| {
                let json = declared_meta(v, |e| (e.get("dtype")? == "json").then_some(Value::Null));
                frames(v, |_, _, f| {
                    let Some(m) = f.get_mut("meta").and_then(Value::as_object_mut) else {
                        return;
                    };
                    for key in json.keys() {
                        let parsed = m
                            .get(key)
                            .and_then(Value::as_str)
                            .and_then(|s| serde_json::from_str::<Value>(s).ok());
                        if let Some(parsed) = parsed {
                            m.insert(key.clone(), parsed);
                        }
                    }
                })
            }
        ),
        bug!(
            "string/trailing-nul-stripped",
            "string columns",
            ["mrf1.string-values"],
            "strips trailing U+0000 from string values (a NumPy `str` array)",
            |v, _| columns(v, |c| {
                if c.get("dtype") != Some(&Value::from("string")) {
                    return;
                }
                for x in c
                    .get_mut("values")
                    .and_then(Value::as_array_mut)
                    .into_iter()
                    .flatten()
                {
                    if let Some(s) = x.as_str().filter(|s| s.ends_with('\0')) {
                        *x = Value::from(s.trim_end_matches('\0'));
                    }
                }
            })
        ),
        bug!(
            "ff/no-tables-dropped",
            "the force field",
            ["collection.forcefield.round-trip", "forcefield.document"],
            "hands back no force field when its frame has no style tables",
            |v, _| {
                let mut v = v.clone();
                let tables = v
                    .pointer("/forcefield/blocks")
                    .and_then(Value::as_object)
                    .is_some_and(|b| !b.is_empty());
                if let (false, Some(o)) = (tables, v.as_object_mut()) {
                    o.remove("forcefield");
                }
                v
            }
        ),
        bug!(
            "mask/at-offset-zero-ignored",
            "validity masks",
            ["mrf1.validity"],
            "tests a column's `validity` offset for truth, so a mask at payload offset 0 is ignored",
            masks_at_zero_dropped
        ),
        bug!(
            "system/empty-dropped",
            "records' systems",
            ["lmdb.system.key", "collection.record.system-or-trajectory"],
            "hands back no system for a system frame with no block, no meta and no cell",
            |v, _| records(v, |rec| {
                let Some(sys) = rec.get("system") else {
                    return;
                };
                let empty = |k: &str| sys.get(k).and_then(Value::as_object).is_none_or(Map::is_empty);
                if empty("blocks") && empty("meta") && sys.get("box").is_none() {
                    if let Some(r) = rec.as_object_mut() {
                        r.remove("system");
                    }
                }
            })
        ),
        bug!(
            "refuses/normalized-mask",
            "validity masks",
            ["column.validity.normalized"],
            "refuses an all-true validity mask, or an empty one on zero rows",
            Refuses(|img, _| shapes::normalized_mask(img))
        ),
        bug!(
            "refuses/null-row-reference",
            "row references",
            ["column.validity.null-value"],
            "range-checks the value under a null row reference",
            Refuses(|img, _| shapes::null_reference_out_of_range(img))
        ),
        bug!(
            "refuses/unlinked-type",
            "the force field",
            ["collection.forcefield.links"],
            "refuses a record whose atoms or relation `type` names no force-field row",
            Refuses(|img, _| shapes::unlinked_type(img))
        ),
        bug!(
            "refuses/zero-frame-trajectory",
            "zero-frame trajectories",
            [
                "collection.record.zero-frame",
                "collection.conformance.subsets-zero-frames"
            ],
            "refuses a record whose trajectory has zero frames",
            Refuses(|img, _| shapes::zero_frame_trajectory(img))
        ),
        bug!(
            "refuses/missing-part",
            "records without a part",
            ["collection.conformance.missing-part"],
            "refuses a record without a system or without a trajectory",
            Refuses(|img, _| shapes::missing_part(img))
        ),
        bug!(
            "block/count-from-columns",
            "block counts",
            ["block.count"],
            "takes a block's count from its first column's rows, 0 for a block with no columns",
            count_from_columns
        ),
        bug!(
            "document/record-meta-nulls-dropped",
            "documents",
            ["document.null-valued-key", "lmdb.record.meta-json"],
            "drops the null-valued keys of a record's meta document",
            |v, _| records(v, |rec| nulls_dropped(rec, "/meta"))
        ),
        bug!(
            "document/collection-nulls-dropped",
            "documents",
            ["collection.meta.preserved", "document.null-valued-key"],
            "drops the null-valued keys of the collection document",
            |v, _| without_nulls_at(v, "/meta")
        ),
        bug!(
            "document/ff-nulls-dropped",
            "documents",
            ["collection.forcefield.round-trip", "document.null-valued-key"],
            "drops the null-valued keys of the force-field document",
            |v, _| without_nulls_at(v, "/forcefield/meta")
        ),
        bug!(
            "system/attribute-nulls-dropped",
            "system blocks",
            ["block.attributes-preserved", "mrf1.attributes"],
            "drops the null-valued attributes of a system block",
            |v, _| system_blocks(v, |b| {
                if let Some(a) = b.get_mut("attributes") {
                    nulls_dropped(a, "");
                }
            })
        ),
        bug!(
            "per-step/null-dropped",
            "per-step values",
            ["lmdb.frame.meta-materialized", "mrf1.meta-typed"],
            "drops a per-step key whose value is null (a json key's null document)",
            |v, _| frames(v, |_, _, f| {
                if let Some(m) = f.get_mut("meta") {
                    nulls_dropped(m, "");
                }
            })
        ),
        bug!(
            "system/meta-nulls-dropped",
            "records' systems",
            ["mrf1.meta-typed", "lmdb.system.key"],
            "drops a system meta key whose value is null",
            |v, _| records(v, |rec| nulls_dropped(rec, "/system/meta"))
        ),
        bug!(
            "step/unsigned",
            "step and time",
            ["mrf1.step-time-typed", "lmdb.frame.step"],
            "reads the step as an unsigned integer, so a negative step wraps past 2^63",
            |v, _| frames(v, |_, _, f| {
                if let Some(step) = f.get("step").and_then(Value::as_i64).filter(|s| *s < 0) {
                    f.insert("step".into(), Value::from(step as u64));
                }
            })
        ),
        bug!(
            "accepts/values-taken-for-string",
            "the closed dtype set",
            ["mrf1.dtype", "column.dtype.closed-set"],
            "takes any column with a `values` list for a string column, whatever its dtype",
            Accepts(shapes::unknown_dtype_with_values)
        ),
        bug!(
            "accepts/empty-column-unchecked",
            "the closed dtype set",
            ["mrf1.dtype", "mrf1.offset-aligned"],
            "skips decoding a column without elements, and with it the dtype and offset checks",
            Accepts(shapes::empty_column_defect)
        ),
    ]
}
