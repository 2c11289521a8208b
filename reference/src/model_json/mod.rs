//! Canonical JSON ("model JSON", `docs/canonical-json.md`): the collection
//! model read from and written to one JSON form.
//!
//! Readers take the JSON value and the path `at` of that value inside the
//! whole document, and every refusal carries the path of the fault, e.g.
//! `records[2].system.blocks.atoms.columns.x.values[5]`. A key that is not a
//! plain name (`A-Z a-z 0-9 _ -`) is written `["pair.lj%2Fcut"]` in a path.
//!
//! What is checked here is the form: the keys of every structural object
//! (column, block, box, frame, record, trajectory, step, declaration),
//! the closed sets of dtypes and meta tags, every typed value against its
//! dtype or tag, the number of values against the shape and the length of a
//! validity mask. Rules that relate parts to each other (a column's leading
//! axis against its block's count, row references, the declaration against
//! the frames, ...) are left to validation.
//!
//! Writers never resolve or normalize: they write what the model holds, in
//! canonical typed JSON (no NaN number is ever produced), with object keys in
//! sorted order.
//!
//! Files by part of the model, each type's reader and writer side by side:
//! this one (paths and the reading helpers every part shares),
//! `column.rs` (columns and blocks), `schema.rs` (the sequence schema),
//! `record.rs` (box, frame, force field, step, trajectory, record,
//! collection).

use crate::clause::Clause;
use crate::dtype::DType;
use crate::error::{refuse, Error, Result};
use crate::model::{
    Block, BlockDecl, Cell, Collection, Column, ColumnData, ColumnDecl, Document, ForceField,
    Frame, Header, MetaDecl, Record, SequenceSchema, Step, Trajectory,
};
use crate::typed_json::{
    brief, f64_from_json, f64_to_json, int_from_json, int_to_json, normalize, MetaTag,
};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

mod column;
mod record;
mod schema;

pub use column::*;
pub use record::*;
pub use schema::*;

// ---------------------------------------------------------------- paths --

/// The path of `key` inside the object at `at`: `at.key`, or `at["key"]`
/// when the key is not a plain name (so that `pair.lj%2Fcut` stays one
/// segment). At the root (`at` empty) a plain key is the path itself.
pub fn key_path(at: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    } else {
        let quoted = serde_json::to_string(key).unwrap_or_else(|_| format!("{key:?}"));
        format!("{at}[{quoted}]")
    }
}

/// The path of entry `i` of the array at `at`: `at[i]`.
pub fn index_path(at: &str, i: usize) -> String {
    format!("{at}[{i}]")
}

// ------------------------------------------------------ reading helpers --

/// The object at `at`, refusing any key outside `allowed`.
pub(super) fn object<'a>(
    v: &'a Value,
    at: &str,
    what: &str,
    allowed: &[&str],
) -> Result<&'a Map<String, Value>> {
    let Value::Object(map) = v else {
        refuse!(
            ModelJson,
            at,
            "expected {what} (a JSON object), got {}",
            brief(v)
        );
    };
    for key in map.keys() {
        if !allowed.contains(&key.as_str()) {
            refuse!(
                ModelJson,
                key_path(at, key),
                "unknown key {key:?} in {what} (allowed: {})",
                allowed.join(", ")
            );
        }
    }
    Ok(map)
}

/// The value of a required key.
pub(super) fn required<'a>(
    map: &'a Map<String, Value>,
    at: &str,
    key: &str,
    what: &str,
) -> Result<&'a Value> {
    match map.get(key) {
        Some(v) => Ok(v),
        None => refuse!(
            ModelJson,
            key_path(at, key),
            "{what} lacks the required key {key:?}"
        ),
    }
}

/// A plain JSON document (any object).
pub(super) fn document(v: &Value, at: &str, what: &str) -> Result<Document> {
    match v {
        Value::Object(map) => Ok(map.clone()),
        other => refuse!(
            ModelJson,
            at,
            "expected {what} (a JSON object), got {}",
            brief(other)
        ),
    }
}

/// An optional plain document, `{}` when absent.
pub(super) fn optional_document(
    map: &Map<String, Value>,
    at: &str,
    key: &str,
    what: &str,
) -> Result<Document> {
    match map.get(key) {
        Some(v) => document(v, &key_path(at, key), what),
        None => Ok(Document::new()),
    }
}

/// A non-negative JSON integer (row counts, shape axes).
pub(super) fn json_u64(v: &Value, at: &str, what: &str) -> Result<u64> {
    match v.as_u64() {
        Some(n) => Ok(n),
        None => refuse!(
            ModelJson,
            at,
            "expected {what} (a non-negative JSON integer), got {}",
            brief(v)
        ),
    }
}

/// An array of non-negative JSON integers.
pub(super) fn u64_list(v: &Value, at: &str, what: &str) -> Result<Vec<u64>> {
    let Value::Array(items) = v else {
        refuse!(
            ModelJson,
            at,
            "expected {what} (an array of non-negative integers), got {}",
            brief(v)
        );
    };
    items
        .iter()
        .enumerate()
        .map(|(i, x)| json_u64(x, &index_path(at, i), "an axis length"))
        .collect()
}

/// A JSON bool of a structural flag.
pub(super) fn json_bool(v: &Value, at: &str, what: &str) -> Result<bool> {
    match v {
        Value::Bool(b) => Ok(*b),
        other => refuse!(
            ModelJson,
            at,
            "expected {what} (true or false), got {}",
            brief(other)
        ),
    }
}

/// A JSON string of a structural name.
pub(super) fn json_str<'a>(v: &'a Value, at: &str, what: &str) -> Result<&'a str> {
    match v {
        Value::String(s) => Ok(s),
        other => refuse!(
            ModelJson,
            at,
            "expected {what} (a string), got {}",
            brief(other)
        ),
    }
}

/// A typed f64 (number or one of the three special strings).
pub(super) fn typed_f64(v: &Value, at: &str) -> Result<f64> {
    f64_from_json(v).map_err(|e| Error::refused(Clause::TypedValue, at, e))
}

/// A dtype name from the closed set of 13.
pub(super) fn dtype_from_json(v: &Value, at: &str) -> Result<DType> {
    let name = json_str(v, at, "a dtype name")?;
    match DType::parse(name) {
        Some(d) => Ok(d),
        None => refuse!(
            DtypeClosedSet,
            at,
            "{name:?} is not a dtype; the dtypes are {}",
            DType::ALL
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// A meta tag name from the closed set of 16.
pub(super) fn tag_from_json(v: &Value, at: &str) -> Result<MetaTag> {
    let name = json_str(v, at, "a meta tag name")?;
    match MetaTag::parse(name) {
        Some(t) => Ok(t),
        None => refuse!(
            MetaTagClosedSet,
            at,
            "{name:?} is not a meta tag; the tags are {}",
            MetaTag::ALL
                .iter()
                .map(|t| t.name())
                .collect::<Vec<_>>()
                .join(" ")
        ),
    }
}

/// A map of names to names (block `targets`).
pub(super) fn string_map(v: &Value, at: &str, what: &str) -> Result<BTreeMap<String, String>> {
    let Value::Object(map) = v else {
        refuse!(
            ModelJson,
            at,
            "expected {what} (an object of strings), got {}",
            brief(v)
        );
    };
    map.iter()
        .map(|(k, x)| {
            Ok((
                k.clone(),
                json_str(x, &key_path(at, k), "a block name")?.to_string(),
            ))
        })
        .collect()
}
