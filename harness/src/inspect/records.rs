//! The writer's rules that leave a trace in a record's stored frames,
//! checked frame by frame with the harness's own reading: each trajectory
//! update against the declaration (`sequence_schema`) and against the
//! record's other updates, and each system frame's own rules.
//!
//! Only what a conforming writer cannot write is reported: restating an
//! unchanged block at any ordinal is never a finding (the seed lets two
//! conforming files differ in which frames restate a block), but the cell
//! is written "only at the ordinals where it changes" (seed 000, Frames),
//! so a cell restated unchanged within a record is.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::frame_bytes::{self, FrameView};
use super::{Findings, Key};

/// Clause ids of the rules checked here (keys of `spec-map.toml`).
pub mod clause {
    /// Every declared per-step key on every update, fills materialized.
    pub const META_MATERIALIZED: &str = "lmdb.frame.meta-materialized";
    /// Nothing outside the declaration: blocks, columns, dtypes, keys.
    pub const RECORD_SUBSET: &str = "collection.schema.record-subset";
    /// A typed value fits its tag.
    pub const FITS_TAG: &str = "typed-json.fits-tag";
    /// A typed value is in the one form a writer writes for its tag.
    pub const FORMS: &str = "typed-json.forms";
    /// A typed integer beyond ±2^53 is its decimal string (a decision).
    pub const BIG_INT_STRING: &str = "typed-json.forms.big-int-string";
    /// No `precision` on a trajectory update's columns.
    pub const PRECISION_PLACEMENT: &str = "column.precision.placement";
    /// Targets an update states are the declaration's.
    pub const TARGETS_DECLARED: &str = "trajectory.block.targets-declared";
    /// Steps strictly increase within a record.
    pub const STEP_INCREASING: &str = "trajectory.step.increasing";
    /// Time on every update of a record or on none.
    pub const TIME_ALL_OR_NONE: &str = "trajectory.time.all-or-none";
    /// One `cell_defined` for a record's trajectory.
    pub const ONE_CELL_DEFINED: &str = "box.trajectory-one-cell-defined";
    /// No block named `box` on a system frame.
    pub const RESERVED_BLOCK: &str = "frame.reserved-block-names";
    /// No column named `_validity`.
    pub const RESERVED_COLUMN: &str = "column.reserved-names";
    /// `meta_types` tags exactly the system meta's keys.
    pub const META_TYPES: &str = "mrf1.meta-types";
    /// No `_meta_types` key in a system meta document.
    pub const RESERVED_META_KEY: &str = "meta.reserved-key";
    /// A precision only on an f64 column.
    pub const PRECISION_F64: &str = "column.precision.f64-only";
    /// Canonical column keys at their one dtype.
    pub const CANONICAL_DTYPE: &str = "column.dtype.canonical";
    /// Canonical column keys at one value per row.
    pub const CANONICAL_SHAPE: &str = "column.canonical-shape";
}

/// The one dtype of a canonical column key (conventions.md, "Canonical
/// dtypes"), `None` for another name.
pub fn canonical_dtype(name: &str) -> Option<&'static str> {
    Some(match name {
        "x" | "y" | "z" | "vx" | "vy" | "vz" | "fx" | "fy" | "fz" | "charge" | "mass" => "f64",
        "id" | "atomic_number" | "type_id" | "mol_id" | "res_id" | "atom_map" | "atomi"
        | "atomj" | "atomk" | "atoml" | "bond_type" | "bond_number" => "u64",
        "formal_charge" => "i64",
        "element" | "type" | "name" | "res_name" | "bead_type" => "string",
        _ => return None,
    })
}

/// The declaration a record's updates are held to, from `meta`.
#[derive(Default)]
pub(super) struct Declaration {
    /// Block name -> its entry (`columns`, `targets`, ...).
    blocks: Map<String, Value>,
    /// Per-step key -> its tag.
    meta: BTreeMap<String, String>,
}

impl Declaration {
    /// The declaration of `meta.sequence_schema`; empty when there is none
    /// (its absence was reported with `meta`).
    pub(super) fn of(schema: Option<&Value>) -> Declaration {
        let part = |name: &str| {
            schema
                .and_then(|s| s.get(name))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        let meta = part("meta")
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.get("dtype")?.as_str()?.to_owned())))
            .collect();
        Declaration {
            blocks: part("blocks"),
            meta,
        }
    }
}

/// What one update states that the next ones are compared with.
struct Previous {
    step: Option<i128>,
    has_time: bool,
    cell_defined: Option<bool>,
}

/// A stored cell as a reader resolves it, floats by their bits, for
/// telling a change from a restatement: defaults applied, and an undefined
/// cell's vectors and boundary (which a reader ignores) left out.
#[derive(Debug, PartialEq)]
struct Cell(Vec<Option<u64>>);

impl Cell {
    fn of(cell: &Value) -> Cell {
        let floats = |v: Option<&Value>, default: f64, n: usize| -> Vec<Option<u64>> {
            let flat: Vec<&Value> = match v {
                Some(Value::Array(rows)) => rows
                    .iter()
                    .flat_map(|row| match row {
                        Value::Array(items) => items.iter().collect(),
                        one => vec![one],
                    })
                    .collect(),
                _ => return vec![Some(default.to_bits()); n],
            };
            flat.iter()
                .map(|x| match x {
                    Value::String(s) if s == "NaN" => Some(f64::NAN.to_bits()),
                    Value::String(s) if s == "Infinity" => Some(f64::INFINITY.to_bits()),
                    Value::String(s) if s == "-Infinity" => Some(f64::NEG_INFINITY.to_bits()),
                    other => other.as_f64().map(f64::to_bits),
                })
                .collect()
        };
        let defined = cell.get("cell_defined") != Some(&Value::Bool(false));
        let mut bits = vec![Some(u64::from(defined))];
        bits.extend(floats(cell.get("origin"), 0.0, 3));
        if defined {
            bits.extend(floats(cell.get("vectors"), f64::NAN, 9));
            let boundary = match cell.get("boundary") {
                Some(Value::Array(flags)) => {
                    flags.iter().map(|f| f.as_bool().map(u64::from)).collect()
                }
                _ => vec![Some(1); 3],
            };
            bits.extend(boundary);
        }
        Cell(bits)
    }
}

/// The stored updates of one record, ordinals `first .. first + n`.
pub(super) fn check_record_updates(
    frames: &[(u64, FrameView<'_>)],
    r: usize,
    declared: &Declaration,
    out: &mut Findings,
) {
    let mut previous: Option<Previous> = None;
    let mut cell_in_effect: Option<Cell> = None;
    for (j, view) in frames {
        let label = super::key_label(&Key::Frame(*j).encode());
        let header = &view.header;
        check_update_meta(&label, header, declared, out);
        check_update_blocks(&label, view, declared, out);
        if let Some(step) = header.get("step") {
            check_typed("i64", step, &format!("{label}.step"), out);
        }
        if let Some(time) = header.get("time").filter(|t| !t.is_null()) {
            check_typed("f64", time, &format!("{label}.time"), out);
        }
        let stated = header.get("box").filter(|b| !b.is_null()).map(Cell::of);
        if let Some(cell) = stated {
            if cell_in_effect.as_ref() == Some(&cell) {
                out.push(
                    super::clause::BOX_ON_CHANGE,
                    format!(
                        "{label}: record {r} restates the cell in effect unchanged (box is written only at the ordinals where the cell changes)"
                    ),
                );
            }
            cell_in_effect = Some(cell);
        }
        let step = header.get("step").and_then(typed_integer);
        let has_time = header.get("time").is_some_and(|t| !t.is_null());
        let cell_defined = header
            .get("box")
            .and_then(Value::as_object)
            .map(|cell| cell.get("cell_defined") != Some(&Value::Bool(false)));
        if let Some(p) = &previous {
            if let (Some(before), Some(now)) = (p.step, step) {
                if now <= before {
                    out.push(
                        clause::STEP_INCREASING,
                        format!(
                            "{label}: record {r}'s step {now} does not follow its previous step {before} (steps strictly increase)"
                        ),
                    );
                }
            }
            if p.has_time != has_time {
                out.push(
                    clause::TIME_ALL_OR_NONE,
                    format!(
                        "{label}: record {r} has a time on {} updates and not on others",
                        if p.has_time {
                            "earlier"
                        } else {
                            "this one of its"
                        }
                    ),
                );
            }
        }
        let cell_defined = match (previous.as_ref().and_then(|p| p.cell_defined), cell_defined) {
            (Some(before), Some(now)) if before != now => {
                out.push(
                    clause::ONE_CELL_DEFINED,
                    format!(
                        "{label}: record {r}'s cell_defined is {now} here and {before} on an earlier update (one flag per trajectory)"
                    ),
                );
                Some(before)
            }
            (before, now) => now.or(before),
        };
        previous = Some(Previous {
            step: step.or(previous.as_ref().and_then(|p| p.step)),
            has_time,
            cell_defined,
        });
    }
}

/// `meta` holds exactly the declared per-step keys, each in its tag's form.
fn check_update_meta(
    label: &str,
    header: &Map<String, Value>,
    declared: &Declaration,
    out: &mut Findings,
) {
    let empty = Map::new();
    let meta = header
        .get("meta")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let missing: Vec<&str> = declared
        .meta
        .keys()
        .filter(|k| !meta.contains_key(*k))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        out.push(
            clause::META_MATERIALIZED,
            format!(
                "{label}: the update's meta lacks declared per-step key(s) {} (every declared key is written, fills materialized)",
                missing.join(", ")
            ),
        );
    }
    for (key, value) in meta {
        match declared.meta.get(key) {
            None => out.push(
                clause::RECORD_SUBSET,
                format!("{label}: per-step key `{key}` is not declared in sequence_schema.meta"),
            ),
            Some(tag) => check_typed(tag, value, &format!("{label}.meta.{key}"), out),
        }
    }
}

/// Each block and column of an update is declared, at its declared dtype,
/// without a precision of its own, and any targets it states are the
/// declaration's.
fn check_update_blocks(
    label: &str,
    view: &FrameView<'_>,
    declared: &Declaration,
    out: &mut Findings,
) {
    let Some(blocks) = view.blocks() else { return };
    for (name, block) in blocks {
        let Some(decl) = declared.blocks.get(name) else {
            out.push(
                clause::RECORD_SUBSET,
                format!("{label}: block `{name}` is not declared in sequence_schema"),
            );
            continue;
        };
        if let Some(stated) = block.get("targets").filter(|t| !t.is_null()) {
            let want = decl
                .get("targets")
                .cloned()
                .unwrap_or(Value::Object(Map::new()));
            if stated != &want {
                out.push(
                    clause::TARGETS_DECLARED,
                    format!("{label}: block `{name}` states targets {stated}, the declaration's are {want}"),
                );
            }
        }
        let columns = block.get("columns").and_then(Value::as_object);
        for (col, entry) in columns.into_iter().flatten() {
            let col_label = format!("{label}: column `{name}.{col}`");
            match decl.pointer(&format!("/columns/{}", pointer_escape(col))) {
                None => out.push(
                    clause::RECORD_SUBSET,
                    format!("{col_label} is not declared in sequence_schema"),
                ),
                Some(d) => {
                    let nullable = d.get("nullable") == Some(&Value::Bool(true));
                    if entry.get("validity").is_some() && !nullable {
                        out.push(
                            clause::RECORD_SUBSET,
                            format!("{col_label} carries a mask; the declaration does not make it nullable"),
                        );
                    }
                    // The declaration's trailing shape is every update's,
                    // a zero-row one's too (ragged.md: a zero-row update
                    // resolves to "the declared columns and zero rows").
                    let trailing = d
                        .get("trailing")
                        .and_then(Value::as_array)
                        .map_or(&[][..], Vec::as_slice);
                    let stored = entry
                        .get("shape")
                        .and_then(Value::as_array)
                        .and_then(|s| s.get(1..));
                    if stored.is_some_and(|s| s != trailing) {
                        out.push(
                            clause::RECORD_SUBSET,
                            format!(
                                "{col_label} has trailing axes {}, declared {}",
                                Value::from(stored.unwrap_or_default().to_vec()),
                                Value::from(trailing.to_vec())
                            ),
                        );
                    }
                    let (want, got) = (d.get("dtype"), entry.get("dtype"));
                    if want != got {
                        out.push(
                            clause::RECORD_SUBSET,
                            format!(
                                "{col_label} is stored as {}, declared {}",
                                got.map_or("no dtype".into(), Value::to_string),
                                want.map_or("no dtype".into(), Value::to_string)
                            ),
                        );
                    }
                }
            }
            if entry.get("precision").is_some() {
                out.push(
                    clause::PRECISION_PLACEMENT,
                    format!("{col_label} carries a precision; a trajectory's precisions are the declaration's"),
                );
            }
            check_canonical(&col_label, col, entry, out);
        }
    }
}

/// A system frame's own rules: no block `box`, no column `_validity`, a
/// precision only on f64, canonical keys at their dtype and shape, and
/// `meta_types` tagging exactly the meta's keys (never `_meta_types`).
pub(super) fn check_system(label: &str, view: &FrameView<'_>, out: &mut Findings) {
    for (name, block) in view.blocks().into_iter().flatten() {
        if name == "box" {
            out.push(
                clause::RESERVED_BLOCK,
                format!("{label}: a block named `box` (the name is the cell's)"),
            );
        }
        check_columns(label, name, block, out);
    }
    let empty = Map::new();
    let meta = view
        .header
        .get("meta")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    for (key, value) in meta {
        if let Some(tag) = view
            .header
            .get("meta_types")
            .and_then(|t| t.get(key))
            .and_then(Value::as_str)
        {
            check_typed(tag, value, &format!("{label}.meta.{key}"), out);
        }
    }
    if meta.contains_key("_meta_types") {
        out.push(
            clause::RESERVED_META_KEY,
            format!("{label}: the meta document has the reserved key `_meta_types`"),
        );
    }
    // A writer tags every key; it may leave `meta_types` out of an empty
    // document, and a reader ignores a tag whose key is absent
    // (storage.md, "Frame-shaped group").
    let tagged: BTreeSet<&String> = match view.header.get("meta_types") {
        Some(Value::Object(types)) => types.keys().collect(),
        _ => BTreeSet::new(),
    };
    let untagged: Vec<&str> = meta
        .keys()
        .filter(|k| !tagged.contains(k))
        .map(String::as_str)
        .collect();
    if !untagged.is_empty() {
        out.push(
            clause::META_TYPES,
            format!(
                "{label}: meta key(s) {} have no tag in meta_types (a writer tags every key)",
                untagged.join(", ")
            ),
        );
    }
}

/// Columns of a system or index block: no `_validity`, a precision only
/// on f64, canonical keys at their dtype and shape.
pub(super) fn check_columns(label: &str, block: &str, entry: &Value, out: &mut Findings) {
    let columns = entry.get("columns").and_then(Value::as_object);
    for (col, c) in columns.into_iter().flatten() {
        let col_label = format!("{label}: column `{block}.{col}`");
        if col == "_validity" {
            out.push(
                clause::RESERVED_COLUMN,
                format!("{col_label}: the name is reserved"),
            );
        }
        let dtype = c.get("dtype").and_then(Value::as_str);
        if c.get("precision").is_some() && dtype != Some("f64") {
            out.push(
                clause::PRECISION_F64,
                format!(
                    "{col_label} declares a precision on dtype {}",
                    dtype.unwrap_or("?")
                ),
            );
        }
        check_canonical(&col_label, col, c, out);
    }
}

fn check_canonical(col_label: &str, name: &str, entry: &Value, out: &mut Findings) {
    let Some(want) = canonical_dtype(name) else {
        return;
    };
    let dtype = entry.get("dtype").and_then(Value::as_str);
    if dtype != Some(want) {
        out.push(
            clause::CANONICAL_DTYPE,
            format!(
                "{col_label} is a canonical key stored as {}, not {want}",
                dtype.unwrap_or("?")
            ),
        );
    }
    let dims = entry.get("shape").and_then(Value::as_array).map(Vec::len);
    if dims.is_some_and(|d| d != 1) {
        out.push(
            clause::CANONICAL_SHAPE,
            format!("{col_label} is a canonical key with trailing axes (one value per row)"),
        );
    }
}

/// A typed value against its tag: it fits the tag, and it is in the one
/// form a writer writes (an integer within ±2^53 a JSON number).
pub(super) fn check_typed(tag: &str, value: &Value, at: &str, out: &mut Findings) {
    if let Err(e) = crate::judge::check_tag(tag, value, at) {
        out.push(clause::FITS_TAG, e);
    } else if let Err(e) = crate::judge::check_typed_form(tag, value, at) {
        out.push(clause::FORMS, e);
    } else if let Err(e) = crate::judge::check_big_integer_form(tag, value, at) {
        out.push(clause::BIG_INT_STRING, e);
    }
}

/// A typed i64 as JSON writes it: a number, or a decimal string beyond 2^53.
fn typed_integer(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) => n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

/// Escapes a key for a JSON pointer (RFC 6901).
fn pointer_escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Reads the stored updates of record `r` (ordinals `first .. first + n`),
/// skipping any a key scan already reported as missing or undecodable.
pub(super) fn stored_updates<'t>(
    db: heed::Database<heed::types::Bytes, heed::types::Bytes>,
    rtxn: &'t heed::RoTxn,
    first: u64,
    n: u64,
) -> Vec<(u64, FrameView<'t>)> {
    (first..first.saturating_add(n))
        .filter_map(|j| {
            let value = db.get(rtxn, &Key::Frame(j).encode()).ok()??;
            Some((j, frame_bytes::parse(value).ok()?))
        })
        .collect()
}
