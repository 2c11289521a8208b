//! The force field's own rules (forcefield.md of molrec version 1): the
//! document (`name`, `units`, `source`, `styles`) and each style's table
//! (`name`, endpoints, parameter dtypes). Rules that need linking into a
//! system or the style registry are out of scope (spec-map waivers).
//!
//! Used by the writer before it stores `ff` and by the reader after it
//! decodes `ff`, so both refuse the same force fields with the same clauses.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::error::{refuse, Result};
use crate::model::{Block, ColumnData, ForceField};
use crate::DType;

/// The endpoint columns, in the order a table carries a prefix of them.
const ENDPOINTS: [&str; 4] = ["itom", "jtom", "ktom", "ltom"];

/// Annotation columns: strings, nullable (forcefield.md, "Rows and columns").
const ANNOTATIONS: [&str; 7] = [
    "class",
    "element",
    "smarts",
    "smirks",
    "overrides",
    "desc",
    "doi",
];

/// The quantities `units` may name.
const QUANTITIES: [&str; 6] = ["length", "energy", "angle", "charge", "mass", "time"];

/// How many endpoints a row of a registered category carries; `None` for a
/// category outside the chapter's table (its table carries a prefix).
fn arity(category: &str) -> Option<usize> {
    Some(match category {
        "atom" | "virtual_site" => 0,
        "bond" | "pair" | "pair14" | "constraint" | "drude" => 2,
        "angle" => 3,
        "dihedral" | "improper" => 4,
        _ => return None,
    })
}

/// One entry of `styles`, as the tables need it.
struct Style<'d> {
    category: &'d str,
    style: &'d str,
    endpoint_key: &'d str,
}

/// Checks the document and every style table of `ff`.
pub fn check(ff: &ForceField) -> Result<()> {
    let doc = &ff.document;
    if !doc.get("name").is_some_and(Value::is_string) {
        refuse!(
            ForceFieldDocument,
            "forcefield.meta.name",
            "a force field needs a string `name`"
        );
    }
    match doc.get("units") {
        Some(Value::Object(units)) => check_units(units)?,
        _ => refuse!(
            ForceFieldDocument,
            "forcefield.meta.units",
            "a force field needs a `units` object"
        ),
    }
    if let Some(source) = doc.get("source") {
        check_source(source)?;
    }
    let Some(Value::Array(entries)) = doc.get("styles") else {
        refuse!(
            ForceFieldDocument,
            "forcefield.meta.styles",
            "a force field needs a `styles` list"
        );
    };
    let styles = check_styles(entries)?;
    let class_keyed = styles.iter().any(|s| s.endpoint_key == "class");
    for (i, s) in styles.iter().enumerate() {
        let name = format!("{}.{}", s.category, encode_style(s.style));
        let Some(table) = ff.tables.get(&name) else {
            refuse!(
                ForceFieldStyleTable,
                format!("forcefield.meta.styles[{i}]"),
                "style `{}` of category `{}` has no table: no block `{name}`",
                s.style,
                s.category
            );
        };
        check_table(table, s, class_keyed, &format!("forcefield.blocks.{name}"))?;
    }
    Ok(())
}

/// `units` carries a preset or at least one quantity; a quantity beside a
/// preset names the preset's unit.
fn check_units(units: &Map<String, Value>) -> Result<()> {
    let at = |key: &str| format!("forcefield.meta.units.{key}");
    for (key, value) in units {
        if (key == "preset" || QUANTITIES.contains(&key.as_str())) && !value.is_string() {
            refuse!(ForceFieldUnits, at(key), "`{key}` is a string, not {value}");
        }
    }
    let quantities: Vec<(&str, &str)> = QUANTITIES
        .iter()
        .filter_map(|&q| Some((q, units.get(q)?.as_str()?)))
        .collect();
    let preset = units.get("preset").and_then(Value::as_str);
    if preset.is_none() && quantities.is_empty() {
        refuse!(
            ForceFieldUnits,
            "forcefield.meta.units",
            "`units` carries neither a `preset` nor a quantity ({})",
            QUANTITIES.join(", ")
        );
    }
    let Some(preset) = preset else { return Ok(()) };
    for (quantity, unit) in quantities {
        let Some(want) = preset_unit(preset, quantity) else {
            continue;
        };
        if disagree(quantity, unit, want) {
            refuse!(
                ForceFieldUnits,
                at(quantity),
                "`{unit}` disagrees with preset `{preset}`, whose {quantity} is `{want}`"
            );
        }
    }
    Ok(())
}

/// The unit a preset gives a quantity (forcefield.md's preset table), where
/// it names a simple one.
fn preset_unit(preset: &str, quantity: &str) -> Option<&'static str> {
    let row: [&str; 6] = match preset {
        "real" => ["angstrom", "kcal/mol", "radian", "e", "dalton", "fs"],
        "metal" => ["angstrom", "eV", "radian", "e", "dalton", "ps"],
        "si" => ["m", "J", "radian", "C", "kg", "s"],
        "cgs" => ["cm", "erg", "radian", "statcoulomb", "g", "s"],
        "electron" => ["bohr", "hartree", "radian", "e", "dalton", "fs"],
        "micro" => [
            "micrometer",
            "",
            "radian",
            "picocoulomb",
            "picogram",
            "microsecond",
        ],
        "nano" => ["nm", "", "radian", "e", "attogram", "ns"],
        "lj" => ["", "", "radian", "", "", ""],
        _ => return None,
    };
    let i = QUANTITIES.iter().position(|&q| q == quantity)?;
    Some(row[i]).filter(|u| !u.is_empty())
}

/// Spellings pint reads as one unit, per quantity. Two strings disagree
/// when both are listed here under different units; a string not listed is
/// never said to disagree (this project's reading: pint-equivalence is
/// decided only where it is certain).
const SPELLINGS: &[(&str, &[&[&str]])] = &[
    (
        "length",
        &[
            &["angstrom", "angstroms", "Å", "ångström"],
            &["nm", "nanometer", "nanometers", "nanometre"],
            &["m", "meter", "meters", "metre"],
            &["cm", "centimeter", "centimeters", "centimetre"],
            &["bohr", "a0", "a_0", "bohr_radius"],
            &["micrometer", "micrometers", "um", "µm", "micron"],
        ],
    ),
    (
        "energy",
        &[
            &[
                "kcal/mol",
                "kcal/mole",
                "kilocalorie/mole",
                "kilocalorie/mol",
            ],
            &["kJ/mol", "kJ/mole", "kilojoule/mole", "kilojoule/mol"],
            &["eV", "electron_volt", "electronvolt"],
            &["J", "joule", "joules"],
            &["erg", "ergs"],
            &["hartree", "E_h", "Eh"],
        ],
    ),
    (
        "angle",
        &[
            &["radian", "radians", "rad"],
            &["degree", "degrees", "deg", "°"],
        ],
    ),
    (
        "charge",
        &[
            &["e", "elementary_charge"],
            &["C", "coulomb", "coulombs"],
            &["statcoulomb", "statC", "esu"],
            &["picocoulomb", "pC"],
        ],
    ),
    (
        "mass",
        &[
            &["dalton", "daltons", "Da", "amu", "u"],
            &["kg", "kilogram", "kilograms"],
            &["g", "gram", "grams"],
            &["picogram", "pg"],
            &["attogram", "ag"],
        ],
    ),
    (
        "time",
        &[
            &["fs", "femtosecond", "femtoseconds"],
            &["ps", "picosecond", "picoseconds"],
            &["ns", "nanosecond", "nanoseconds"],
            &["s", "second", "seconds", "sec"],
            &["microsecond", "microseconds", "us", "µs"],
        ],
    ),
];

fn disagree(quantity: &str, unit: &str, want: &str) -> bool {
    let compact: String = unit.split_whitespace().collect();
    let Some((_, groups)) = SPELLINGS.iter().find(|(q, _)| *q == quantity) else {
        return false;
    };
    let group_of = |u: &str| groups.iter().position(|g| g.contains(&u));
    match (group_of(&compact), group_of(want)) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}

/// `source` is an object: `format` (a string) required, `uri` a string and
/// `sha256` 64 lowercase hex digits when present.
fn check_source(source: &Value) -> Result<()> {
    let Value::Object(source) = source else {
        refuse!(
            ForceFieldSource,
            "forcefield.meta.source",
            "`source` is an object ({{format, uri?, sha256?}}), not {source}"
        );
    };
    if !source.get("format").is_some_and(Value::is_string) {
        refuse!(
            ForceFieldSource,
            "forcefield.meta.source.format",
            "`source` needs a string `format`"
        );
    }
    if source.get("uri").is_some_and(|u| !u.is_string()) {
        refuse!(
            ForceFieldSource,
            "forcefield.meta.source.uri",
            "`source.uri` is a string"
        );
    }
    if let Some(sha) = source.get("sha256") {
        let hex = sha.as_str().is_some_and(|s| {
            s.len() == 64
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if !hex {
            refuse!(
                ForceFieldSource,
                "forcefield.meta.source.sha256",
                "`source.sha256` is 64 lowercase hex digits, not {sha}"
            );
        }
    }
    Ok(())
}

fn check_styles(entries: &[Value]) -> Result<Vec<Style<'_>>> {
    let mut seen = BTreeSet::new();
    let mut styles = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let at = format!("forcefield.meta.styles[{i}]");
        let Value::Object(entry) = entry else {
            refuse!(
                ForceFieldStyles,
                at,
                "a style entry is an object, not {entry}"
            );
        };
        let category = entry.get("category").and_then(Value::as_str);
        let Some(category) = category.filter(|c| is_category(c)) else {
            refuse!(
                ForceFieldStyles,
                format!("{at}.category"),
                "`category` is a string matching ^[a-z][a-z0-9_]*$"
            );
        };
        let style = entry.get("style").and_then(Value::as_str);
        let Some(style) = style.filter(|s| !s.is_empty()) else {
            refuse!(
                ForceFieldStyles,
                format!("{at}.style"),
                "`style` is a non-empty string"
            );
        };
        if !seen.insert((category, style)) {
            refuse!(
                ForceFieldStyles,
                at,
                "style `{style}` of category `{category}` appears twice"
            );
        }
        let endpoint_key = match entry.get("endpoint_key") {
            None => "type",
            Some(Value::String(k)) if ["type", "class", "smirks"].contains(&k.as_str()) => k,
            Some(other) => refuse!(
                ForceFieldStyles,
                format!("{at}.endpoint_key"),
                "`endpoint_key` is \"type\", \"class\" or \"smirks\", not {other}"
            ),
        };
        if let Some(params) = entry.get("params") {
            let ok = params
                .as_object()
                .is_some_and(|p| p.values().all(|v| v.is_number() || v.is_string()));
            if !ok {
                refuse!(
                    ForceFieldStyles,
                    format!("{at}.params"),
                    "`params` maps names to numbers or strings"
                );
            }
        }
        styles.push(Style {
            category,
            style,
            endpoint_key,
        });
    }
    Ok(styles)
}

fn is_category(c: &str) -> bool {
    let mut bytes = c.bytes();
    bytes.next().is_some_and(|b| b.is_ascii_lowercase())
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A style's table: `name` unique and never null; the endpoints its
/// category and `endpoint_key` call for, strings never null; annotations
/// strings; parameters f64 or string (a canonical key keeps its dtype,
/// checked with every column's).
fn check_table(table: &Block, style: &Style<'_>, class_keyed: bool, at: &str) -> Result<()> {
    let column_at = |name: &str| format!("{at}.columns.{name}");
    let all_valid = |name: &str| {
        table.columns[name]
            .validity
            .as_ref()
            .is_none_or(|v| v.iter().all(|&b| b))
    };
    match table.columns.get("name").map(|c| &c.data) {
        Some(ColumnData::String(names)) => {
            if !all_valid("name") {
                refuse!(
                    ForceFieldTableName,
                    column_at("name"),
                    "`name` is never null"
                );
            }
            let mut seen = BTreeSet::new();
            if let Some(dup) = names.iter().find(|n| !seen.insert(n.as_str())) {
                refuse!(
                    ForceFieldTableName,
                    column_at("name"),
                    "duplicate name `{dup}`"
                );
            }
        }
        Some(other) => refuse!(
            ForceFieldTableName,
            column_at("name"),
            "`name` is a string column, not {}",
            other.dtype()
        ),
        None => refuse!(
            ForceFieldTableName,
            at,
            "a style table needs a `name` column"
        ),
    }

    let present: Vec<&str> = ENDPOINTS
        .iter()
        .copied()
        .filter(|e| table.columns.contains_key(*e))
        .collect();
    let want = match (style.endpoint_key, arity(style.category)) {
        ("smirks", _) => 0,
        (_, Some(n)) => n,
        (_, None) => present.len(),
    };
    if present != ENDPOINTS[..want] {
        let rule = if style.endpoint_key == "smirks" {
            "a smirks-keyed table carries no endpoint columns".to_string()
        } else if arity(style.category).is_some() {
            format!(
                "a table of category `{}` carries exactly the endpoints {:?}",
                style.category,
                &ENDPOINTS[..want]
            )
        } else {
            "the endpoints are a prefix of itom, jtom, ktom, ltom".to_string()
        };
        refuse!(ForceFieldTableEndpoints, at, "{rule}, not {present:?}");
    }
    for endpoint in present {
        if table.columns[endpoint].dtype() != DType::String || !all_valid(endpoint) {
            refuse!(
                ForceFieldTableEndpoints,
                column_at(endpoint),
                "an endpoint is a string column without nulls"
            );
        }
    }
    if style.endpoint_key == "smirks"
        && !(table.columns.contains_key("smirks") && all_valid("smirks"))
    {
        refuse!(
            ForceFieldTableEndpoints,
            column_at("smirks"),
            "a smirks-keyed table needs a `smirks` column without nulls"
        );
    }
    if class_keyed && style.category == "atom" && !table.columns.contains_key("class") {
        refuse!(
            ForceFieldTableEndpoints,
            column_at("class"),
            "a style keyed by class needs `class` on every atom table"
        );
    }

    for (name, column) in &table.columns {
        let dtype = column.dtype();
        if name == "name" || ENDPOINTS.contains(&name.as_str()) {
            continue;
        }
        if ANNOTATIONS.contains(&name.as_str()) {
            if dtype != DType::String {
                refuse!(
                    ForceFieldTable,
                    column_at(name),
                    "annotation `{name}` is a string column, not {dtype}"
                );
            }
        } else if DType::canonical_for(name).is_none()
            && !matches!(dtype, DType::F64 | DType::String)
        {
            refuse!(
                ForceFieldTable,
                column_at(name),
                "a parameter column is f64 or string, not {dtype}"
            );
        }
    }
    Ok(())
}

/// Encodes a style name for a table's block name (`lj/cut` -> `lj%2Fcut`).
pub fn encode_style(style: &str) -> String {
    let mut out = String::with_capacity(style.len());
    for b in style.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
