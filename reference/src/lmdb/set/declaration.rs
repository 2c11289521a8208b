//! The declaration the shards of a set share (units, `sequence_schema`,
//! force field), its digest, and the first place two differ.
//!
//! The digest is SHA-256 of the declaration's canonical text: the compact
//! JSON of `{"forcefield": F, "sequence_schema": S, "units": U}` (`F` the
//! force field's canonical JSON or `null`, `S` the schema's, `U` the
//! `units` document or `null`), object keys sorted at every level, numbers
//! and strings as `serde_json` writes them. Keys are sorted here, not left
//! to `serde_json`'s map, whose order a feature elsewhere in a build can
//! change.

use super::super::Reader;
use crate::error::Result;
use crate::model_json::{forcefield_to_json, schema_to_json};
use crate::typed_json::brief;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::fmt::Write as _;

/// A shard's declaration: its canonical JSON and that text's SHA-256.
#[derive(Clone, Debug)]
pub(crate) struct Declaration {
    pub(crate) value: Value,
    pub(crate) sha256: String,
}

impl Declaration {
    /// The declaration of an open collection (reads its force field).
    pub(crate) fn of(reader: &Reader) -> Result<Declaration> {
        let units = reader
            .collection_meta()
            .get("units")
            .cloned()
            .unwrap_or(Value::Null);
        let forcefield = reader
            .forcefield()?
            .map_or(Value::Null, |ff| forcefield_to_json(&ff));
        let value = json!({
            "forcefield": forcefield,
            "sequence_schema": schema_to_json(reader.schema()),
            "units": units,
        });
        let sha256 = sha256_hex(canonical_text(&value).as_bytes());
        Ok(Declaration { value, sha256 })
    }
}

/// `value` as compact JSON with every object's keys sorted.
pub(crate) fn canonical_text(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Lowercase hexadecimal SHA-256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut hex = String::with_capacity(64);
    for b in digest {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// Where `here` (a shard's declaration) first differs from `there` (the
/// first shard's), as `path: what here, what there`; `None` when equal.
pub(crate) fn first_difference(here: &Value, there: &Value) -> Option<String> {
    difference_at(here, there, String::new())
}

fn difference_at(here: &Value, there: &Value, at: String) -> Option<String> {
    let join = |key: &str| {
        if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    };
    match (here, there) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                match (a.get(key), b.get(key)) {
                    (Some(x), Some(y)) => {
                        if let Some(d) = difference_at(x, y, join(key)) {
                            return Some(d);
                        }
                    }
                    (x, y) => return Some(describe(x, y, &join(key))),
                }
            }
            None
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (x, y))| difference_at(x, y, format!("{at}[{i}]"))),
        (a, b) if a == b => None,
        (a, b) => Some(describe(Some(a), Some(b), &at)),
    }
}

fn describe(here: Option<&Value>, there: Option<&Value>, at: &str) -> String {
    let show = |v: Option<&Value>| match v {
        None => "absent".to_string(),
        Some(v @ (Value::Object(_) | Value::Array(_))) => {
            let text = canonical_text(v);
            if text.len() > 80 {
                format!(
                    "{} ({}...)",
                    brief(v),
                    &text[..text.floor_char_boundary(80)]
                )
            } else {
                text
            }
        }
        Some(v) => brief(v),
    };
    let at = if at.is_empty() { "the declaration" } else { at };
    format!("{at}: {} here, {} there", show(here), show(there))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_text_sorts_keys_at_every_level() {
        let v = json!({"b": 1, "a": {"d": [true, null], "c": "x"}});
        assert_eq!(
            canonical_text(&v),
            r#"{"a":{"c":"x","d":[true,null]},"b":1}"#
        );
    }

    /// The digest other tools compute alike: SHA-256 of the text.
    #[test]
    fn sha256_of_a_known_text() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn first_difference_names_the_path_and_both_values() {
        let a = json!({"units": {"length": "angstrom"}, "sequence_schema": {"blocks": {}}});
        let b = json!({"units": {"length": "nm"}, "sequence_schema": {"blocks": {}}});
        assert_eq!(
            first_difference(&a, &b).as_deref(),
            Some(r#"units.length: the string "angstrom" here, the string "nm" there"#)
        );
        let c =
            json!({"units": {"length": "angstrom"}, "sequence_schema": {"blocks": {"atoms": {}}}});
        assert_eq!(
            first_difference(&a, &c).as_deref(),
            Some("sequence_schema.blocks.atoms: absent here, {} there")
        );
        assert_eq!(first_difference(&a, &a), None);
        assert!(first_difference(&json!([1, 2]), &json!([1])).is_some());
    }
}
