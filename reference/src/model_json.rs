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
fn object<'a>(
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
fn required<'a>(map: &'a Map<String, Value>, at: &str, key: &str, what: &str) -> Result<&'a Value> {
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
fn document(v: &Value, at: &str, what: &str) -> Result<Document> {
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
fn optional_document(
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
fn json_u64(v: &Value, at: &str, what: &str) -> Result<u64> {
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
fn u64_list(v: &Value, at: &str, what: &str) -> Result<Vec<u64>> {
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
fn json_bool(v: &Value, at: &str, what: &str) -> Result<bool> {
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
fn json_str<'a>(v: &'a Value, at: &str, what: &str) -> Result<&'a str> {
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
fn typed_f64(v: &Value, at: &str) -> Result<f64> {
    f64_from_json(v).map_err(|e| Error::refused(Clause::TypedValue, at, e))
}

/// A dtype name from the closed set of 13.
fn dtype_from_json(v: &Value, at: &str) -> Result<DType> {
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
fn tag_from_json(v: &Value, at: &str) -> Result<MetaTag> {
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
fn string_map(v: &Value, at: &str, what: &str) -> Result<BTreeMap<String, String>> {
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

// --------------------------------------------------------------- column --

const COLUMN_KEYS: &[&str] = &["dtype", "shape", "values", "validity", "precision"];

/// Reads a column `{"dtype", "shape", "values", "validity"?, "precision"?}`.
///
/// `values` must hold exactly `prod(shape)` entries (checked arithmetic: an
/// overflowing shape is refused, never allocated), each typed JSON for the
/// dtype. A c64 part must be exactly representable as an f32 (or be NaN or
/// infinite): it is never silently narrowed. The mask and the precision are
/// kept as given (no normalization, no range check).
pub fn column_from_json(v: &Value, at: &str) -> Result<Column> {
    let map = object(v, at, "a column", COLUMN_KEYS)?;
    let dtype = dtype_from_json(
        required(map, at, "dtype", "a column")?,
        &key_path(at, "dtype"),
    )?;

    let shape_at = key_path(at, "shape");
    let shape = u64_list(
        required(map, at, "shape", "a column")?,
        &shape_at,
        "a shape",
    )?;
    let Some(&rows) = shape.first() else {
        refuse!(
            ColumnShape,
            shape_at,
            "a column shape has at least one axis (its leading axis is the block's count)"
        );
    };
    let Some(expected) = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d)) else {
        refuse!(
            ColumnValues,
            shape_at,
            "the number of values of the shape {shape:?} overflows 64 bits"
        );
    };

    let values_at = key_path(at, "values");
    let values = required(map, at, "values", "a column")?;
    let Value::Array(values) = values else {
        refuse!(
            ModelJson,
            values_at,
            "expected the values (an array), got {}",
            brief(values)
        );
    };
    if u64::try_from(values.len()).ok() != Some(expected) {
        refuse!(
            ColumnValues,
            values_at,
            "{} values given, the shape {shape:?} needs {expected}",
            values.len()
        );
    }
    let data = column_data_from_json(dtype, values, &values_at)?;

    let validity = match map.get("validity") {
        None => None,
        Some(m) => Some(validity_from_json(m, &key_path(at, "validity"), rows)?),
    };
    let precision = match map.get("precision") {
        None => None,
        Some(p) => Some(typed_f64(p, &key_path(at, "precision"))?),
    };
    Ok(Column {
        shape,
        data,
        validity,
        precision,
    })
}

fn validity_from_json(v: &Value, at: &str, rows: u64) -> Result<Vec<bool>> {
    let Value::Array(items) = v else {
        refuse!(
            ModelJson,
            at,
            "expected a validity mask (an array of bools), got {}",
            brief(v)
        );
    };
    if u64::try_from(items.len()).ok() != Some(rows) {
        refuse!(
            ValidityLength,
            at,
            "a validity mask has one bool per row: {} given, {rows} rows",
            items.len()
        );
    }
    items
        .iter()
        .enumerate()
        .map(|(i, b)| json_bool(b, &index_path(at, i), "a validity flag"))
        .collect()
}

/// Reads every value with `read`, refusing the first that does not fit.
fn typed_values<T>(
    values: &[Value],
    at: &str,
    read: impl Fn(&Value) -> Result<T, String>,
) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        out.push(read(v).map_err(|e| Error::refused(Clause::TypedValue, index_path(at, i), e))?);
    }
    Ok(out)
}

/// A typed integer that fits `T`.
fn int_value<T: TryFrom<i128>>(v: &Value, dtype: DType) -> Result<T, String> {
    let x = int_from_json(v)?;
    T::try_from(x).map_err(|_| format!("integer {x} is out of the range of {dtype}"))
}

/// The f32 of a c64 part, if it is exactly one.
fn exact_f32(x: f64) -> Result<f32, String> {
    #[allow(clippy::cast_possible_truncation)]
    let y = x as f32;
    if x.is_nan() || f64::from(y) == x {
        Ok(y)
    } else {
        Err(format!(
            "{x} is not exactly representable as the f32 part of a c64"
        ))
    }
}

/// Reads `[re, im]` pairs; `part` converts each typed f64 part.
fn complex_values<T>(
    values: &[Value],
    at: &str,
    part: impl Fn(f64) -> Result<T, String>,
) -> Result<Vec<[T; 2]>> {
    let mut out = Vec::with_capacity(values.len());
    for (i, v) in values.iter().enumerate() {
        let at_i = index_path(at, i);
        let Some([re, im]) = v.as_array().map(Vec::as_slice) else {
            refuse!(
                TypedValue,
                at_i,
                "expected a complex value [re, im], got {}",
                brief(v)
            );
        };
        let read = |x: &Value, k: usize| -> Result<T> {
            let at_k = index_path(&at_i, k);
            part(typed_f64(x, &at_k)?).map_err(|e| Error::refused(Clause::TypedValue, at_k, e))
        };
        out.push([read(re, 0)?, read(im, 1)?]);
    }
    Ok(out)
}

fn column_data_from_json(dtype: DType, values: &[Value], at: &str) -> Result<ColumnData> {
    Ok(match dtype {
        DType::F64 => ColumnData::F64(typed_values(values, at, f64_from_json)?),
        DType::I8 => ColumnData::I8(typed_values(values, at, |v| int_value(v, dtype))?),
        DType::I16 => ColumnData::I16(typed_values(values, at, |v| int_value(v, dtype))?),
        DType::I32 => ColumnData::I32(typed_values(values, at, |v| int_value(v, dtype))?),
        DType::I64 => ColumnData::I64(typed_values(values, at, |v| int_value(v, dtype))?),
        DType::U8 => ColumnData::U8(typed_values(values, at, |v| int_value(v, dtype))?),
        DType::U16 => ColumnData::U16(typed_values(values, at, |v| int_value(v, dtype))?),
        DType::U32 => ColumnData::U32(typed_values(values, at, |v| int_value(v, dtype))?),
        DType::U64 => ColumnData::U64(typed_values(values, at, |v| int_value(v, dtype))?),
        DType::Bool => ColumnData::Bool(typed_values(values, at, |v| match v {
            Value::Bool(b) => Ok(*b),
            other => Err(format!("expected a bool, got {}", brief(other))),
        })?),
        DType::String => ColumnData::String(typed_values(values, at, |v| match v {
            Value::String(s) => Ok(s.clone()),
            other => Err(format!("expected a string, got {}", brief(other))),
        })?),
        DType::C64 => ColumnData::C64(complex_values(values, at, exact_f32)?),
        DType::C128 => ColumnData::C128(complex_values(values, at, Ok)?),
    })
}

/// Writes a column. The mask is written as given (`None` omits it); the
/// precision is written when declared.
pub fn column_to_json(c: &Column) -> Value {
    let mut map = Map::new();
    map.insert("dtype".into(), Value::String(c.dtype().name().into()));
    map.insert("shape".into(), u64s_to_json(&c.shape));
    map.insert("values".into(), Value::Array(column_data_to_json(&c.data)));
    if let Some(mask) = &c.validity {
        map.insert(
            "validity".into(),
            Value::Array(mask.iter().map(|&b| Value::Bool(b)).collect()),
        );
    }
    if let Some(p) = c.precision {
        map.insert("precision".into(), f64_to_json(p));
    }
    Value::Object(map)
}

fn u64s_to_json(v: &[u64]) -> Value {
    Value::Array(v.iter().map(|&n| Value::from(n)).collect())
}

fn ints_to_json<T: Copy + Into<i128>>(v: &[T]) -> Vec<Value> {
    v.iter().map(|&x| int_to_json(x.into())).collect()
}

fn column_data_to_json(data: &ColumnData) -> Vec<Value> {
    let pair = |re: f64, im: f64| Value::Array(vec![f64_to_json(re), f64_to_json(im)]);
    match data {
        ColumnData::F64(v) => v.iter().map(|&x| f64_to_json(x)).collect(),
        ColumnData::I8(v) => ints_to_json(v),
        ColumnData::I16(v) => ints_to_json(v),
        ColumnData::I32(v) => ints_to_json(v),
        ColumnData::I64(v) => ints_to_json(v),
        ColumnData::U8(v) => ints_to_json(v),
        ColumnData::U16(v) => ints_to_json(v),
        ColumnData::U32(v) => ints_to_json(v),
        ColumnData::U64(v) => ints_to_json(v),
        ColumnData::Bool(v) => v.iter().map(|&b| Value::Bool(b)).collect(),
        ColumnData::String(v) => v.iter().map(|s| Value::String(s.clone())).collect(),
        ColumnData::C64(v) => v
            .iter()
            .map(|&[re, im]| pair(f64::from(re), f64::from(im)))
            .collect(),
        ColumnData::C128(v) => v.iter().map(|&[re, im]| pair(re, im)).collect(),
    }
}

// ---------------------------------------------------------------- block --

const BLOCK_KEYS: &[&str] = &[
    "count",
    "columns",
    "structural_shape",
    "targets",
    "attributes",
];

/// A block's parts shared by a frame's blocks and the declared ones: the
/// `columns` object (each read by `column`), `structural_shape`, `targets`.
type BlockParts<C> = (
    BTreeMap<String, C>,
    Option<Vec<u64>>,
    BTreeMap<String, String>,
);

fn block_parts<C>(
    map: &Map<String, Value>,
    at: &str,
    what: &str,
    column: fn(&Value, &str) -> Result<C>,
) -> Result<BlockParts<C>> {
    let columns_at = key_path(at, "columns");
    let columns = required(map, at, "columns", what)?;
    let Value::Object(columns) = columns else {
        refuse!(
            ModelJson,
            columns_at,
            "expected the columns of {what} (an object), got {}",
            brief(columns)
        );
    };
    let columns = columns
        .iter()
        .map(|(name, c)| Ok((name.clone(), column(c, &key_path(&columns_at, name))?)))
        .collect::<Result<_>>()?;
    let structural_shape = match map.get("structural_shape") {
        None => None,
        Some(s) => Some(u64_list(
            s,
            &key_path(at, "structural_shape"),
            "a structural shape",
        )?),
    };
    let targets = match map.get("targets") {
        None => BTreeMap::new(),
        Some(t) => string_map(t, &key_path(at, "targets"), "the targets")?,
    };
    Ok((columns, structural_shape, targets))
}

/// Reads a block `{"count", "columns", "structural_shape"?, "targets"?, "attributes"?}`.
pub fn block_from_json(v: &Value, at: &str) -> Result<Block> {
    let map = object(v, at, "a block", BLOCK_KEYS)?;
    let count = json_u64(
        required(map, at, "count", "a block")?,
        &key_path(at, "count"),
        "a row count",
    )?;
    let (columns, structural_shape, targets) = block_parts(map, at, "a block", column_from_json)?;
    let attributes = optional_document(map, at, "attributes", "the attributes")?;
    Ok(Block {
        count,
        columns,
        structural_shape,
        targets,
        attributes,
    })
}

/// Writes a block; empty `targets` and `attributes` and an absent
/// `structural_shape` are omitted.
pub fn block_to_json(b: &Block) -> Value {
    let mut map = Map::new();
    map.insert("count".into(), Value::from(b.count));
    map.insert(
        "columns".into(),
        Value::Object(
            b.columns
                .iter()
                .map(|(k, c)| (k.clone(), column_to_json(c)))
                .collect(),
        ),
    );
    if let Some(s) = &b.structural_shape {
        map.insert("structural_shape".into(), u64s_to_json(s));
    }
    if !b.targets.is_empty() {
        map.insert("targets".into(), string_map_to_json(&b.targets));
    }
    if !b.attributes.is_empty() {
        map.insert("attributes".into(), Value::Object(b.attributes.clone()));
    }
    Value::Object(map)
}

fn string_map_to_json(m: &BTreeMap<String, String>) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect(),
    )
}

/// Reads `{name: block}`.
pub fn blocks_from_json(v: &Value, at: &str) -> Result<BTreeMap<String, Block>> {
    let Value::Object(map) = v else {
        refuse!(
            ModelJson,
            at,
            "expected the blocks (an object of blocks), got {}",
            brief(v)
        );
    };
    map.iter()
        .map(|(name, b)| Ok((name.clone(), block_from_json(b, &key_path(at, name))?)))
        .collect()
}

/// Writes `{name: block}`.
pub fn blocks_to_json(b: &BTreeMap<String, Block>) -> Value {
    Value::Object(
        b.iter()
            .map(|(k, v)| (k.clone(), block_to_json(v)))
            .collect(),
    )
}

// ------------------------------------------------------------------ box --

const BOX_KEYS: &[&str] = &["vectors", "origin", "boundary", "cell_defined"];

/// An array of exactly `N` entries (a box part).
fn box_array<'a, const N: usize>(v: &'a Value, at: &str, what: &str) -> Result<&'a [Value; N]> {
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

fn f64_triple(v: &Value, at: &str, what: &str) -> Result<[f64; 3]> {
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

const FRAME_KEYS: &[&str] = &["meta", "meta_types", "blocks", "box"];

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

const FORCEFIELD_KEYS: &[&str] = &["meta", "blocks"];

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

// --------------------------------------------------------------- schema --

const SCHEMA_KEYS: &[&str] = &["blocks", "meta"];
const BLOCK_DECL_KEYS: &[&str] = &["columns", "structural_shape", "targets", "aligned_with"];
const COLUMN_DECL_KEYS: &[&str] = &["dtype", "trailing", "nullable", "precision"];
const META_DECL_KEYS: &[&str] = &["dtype", "fill"];

/// Reads a `sequence_schema` `{"blocks": {..}, "meta": {..}}` (§9).
///
/// A meta key's `fill` is typed JSON for its tag and returned canonical;
/// the presence of `fill` (even `null`) makes it `Some`, and `null` is
/// refused for any tag but `json`.
pub fn schema_from_json(v: &Value, at: &str) -> Result<SequenceSchema> {
    let map = object(v, at, "a sequence_schema", SCHEMA_KEYS)?;

    let blocks_at = key_path(at, "blocks");
    let blocks = required(map, at, "blocks", "a sequence_schema")?;
    let Value::Object(blocks) = blocks else {
        refuse!(
            ModelJson,
            blocks_at,
            "expected the declared blocks (an object), got {}",
            brief(blocks)
        );
    };
    let blocks = blocks
        .iter()
        .map(|(name, b)| {
            Ok((
                name.clone(),
                block_decl_from_json(b, &key_path(&blocks_at, name))?,
            ))
        })
        .collect::<Result<_>>()?;

    let meta_at = key_path(at, "meta");
    let meta = required(map, at, "meta", "a sequence_schema")?;
    let Value::Object(meta) = meta else {
        refuse!(
            ModelJson,
            meta_at,
            "expected the declared meta keys (an object), got {}",
            brief(meta)
        );
    };
    let meta = meta
        .iter()
        .map(|(key, d)| {
            Ok((
                key.clone(),
                meta_decl_from_json(d, &key_path(&meta_at, key))?,
            ))
        })
        .collect::<Result<_>>()?;
    Ok(SequenceSchema { blocks, meta })
}

fn block_decl_from_json(v: &Value, at: &str) -> Result<BlockDecl> {
    let map = object(v, at, "a declared block", BLOCK_DECL_KEYS)?;
    let (columns, structural_shape, targets) =
        block_parts(map, at, "a declared block", column_decl_from_json)?;
    let aligned_with = match map.get("aligned_with") {
        None => None,
        Some(a) => Some(json_str(a, &key_path(at, "aligned_with"), "a block name")?.to_string()),
    };
    Ok(BlockDecl {
        columns,
        structural_shape,
        targets,
        aligned_with,
    })
}

fn column_decl_from_json(v: &Value, at: &str) -> Result<ColumnDecl> {
    let map = object(v, at, "a declared column", COLUMN_DECL_KEYS)?;
    let dtype = dtype_from_json(
        required(map, at, "dtype", "a declared column")?,
        &key_path(at, "dtype"),
    )?;
    let trailing = match map.get("trailing") {
        None => Vec::new(),
        Some(t) => u64_list(t, &key_path(at, "trailing"), "a trailing shape")?,
    };
    let nullable = match map.get("nullable") {
        None => false,
        Some(n) => json_bool(n, &key_path(at, "nullable"), "the nullable flag")?,
    };
    let precision = match map.get("precision") {
        None => None,
        Some(p) => Some(typed_f64(p, &key_path(at, "precision"))?),
    };
    Ok(ColumnDecl {
        dtype,
        trailing,
        nullable,
        precision,
    })
}

fn meta_decl_from_json(v: &Value, at: &str) -> Result<MetaDecl> {
    let map = object(v, at, "a declared meta key", META_DECL_KEYS)?;
    let tag = tag_from_json(
        required(map, at, "dtype", "a declared meta key")?,
        &key_path(at, "dtype"),
    )?;
    let fill = match map.get("fill") {
        None => None,
        Some(Value::Null) if tag != MetaTag::Json => {
            refuse!(
                FillNullJsonOnly,
                key_path(at, "fill"),
                "a null fill is allowed only for a json key, not {}",
                tag.name()
            )
        }
        Some(f) => Some(
            normalize(tag, f)
                .map_err(|e| Error::refused(Clause::TypedValue, key_path(at, "fill"), e))?,
        ),
    };
    Ok(MetaDecl { tag, fill })
}

/// Writes a `sequence_schema`; a column's `trailing` is omitted when empty,
/// `nullable` when false, `precision` when not declared.
pub fn schema_to_json(s: &SequenceSchema) -> Value {
    let blocks = s
        .blocks
        .iter()
        .map(|(k, b)| (k.clone(), block_decl_to_json(b)))
        .collect();
    let meta = s
        .meta
        .iter()
        .map(|(k, d)| {
            let mut m = Map::new();
            m.insert("dtype".into(), Value::String(d.tag.name().into()));
            if let Some(fill) = &d.fill {
                m.insert("fill".into(), fill.clone());
            }
            (k.clone(), Value::Object(m))
        })
        .collect();
    let mut map = Map::new();
    map.insert("blocks".into(), Value::Object(blocks));
    map.insert("meta".into(), Value::Object(meta));
    Value::Object(map)
}

fn block_decl_to_json(b: &BlockDecl) -> Value {
    let columns = b
        .columns
        .iter()
        .map(|(k, c)| {
            let mut m = Map::new();
            m.insert("dtype".into(), Value::String(c.dtype.name().into()));
            if !c.trailing.is_empty() {
                m.insert("trailing".into(), u64s_to_json(&c.trailing));
            }
            if c.nullable {
                m.insert("nullable".into(), Value::Bool(true));
            }
            if let Some(p) = c.precision {
                m.insert("precision".into(), f64_to_json(p));
            }
            (k.clone(), Value::Object(m))
        })
        .collect();
    let mut map = Map::new();
    map.insert("columns".into(), Value::Object(columns));
    if let Some(s) = &b.structural_shape {
        map.insert("structural_shape".into(), u64s_to_json(s));
    }
    if !b.targets.is_empty() {
        map.insert("targets".into(), string_map_to_json(&b.targets));
    }
    if let Some(a) = &b.aligned_with {
        map.insert("aligned_with".into(), Value::String(a.clone()));
    }
    Value::Object(map)
}

// ----------------------------------------------------------- trajectory --

const TRAJECTORY_KEYS: &[&str] = &["frames", "schema"];
const STEP_KEYS: &[&str] = &["step", "time", "meta", "blocks", "box"];

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

const RECORD_KEYS: &[&str] = &["meta", "system", "trajectory"];

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

const COLLECTION_KEYS: &[&str] = &["meta", "sequence_schema", "index", "forcefield", "records"];

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
