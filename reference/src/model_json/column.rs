//! Columns and blocks: dtypes, typed values, validity masks, a block's
//! count, columns, structural shape, targets and attributes.

use super::*;

// --------------------------------------------------------------- column --

pub(super) const COLUMN_KEYS: &[&str] = &["dtype", "shape", "values", "validity", "precision"];

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

pub(super) fn validity_from_json(v: &Value, at: &str, rows: u64) -> Result<Vec<bool>> {
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
pub(super) fn typed_values<T>(
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
pub(super) fn int_value<T: TryFrom<i128>>(v: &Value, dtype: DType) -> Result<T, String> {
    let x = int_from_json(v)?;
    T::try_from(x).map_err(|_| format!("integer {x} is out of the range of {dtype}"))
}

/// The f32 of a c64 part, if it is exactly one.
pub(super) fn exact_f32(x: f64) -> Result<f32, String> {
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
pub(super) fn complex_values<T>(
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

pub(super) fn column_data_from_json(
    dtype: DType,
    values: &[Value],
    at: &str,
) -> Result<ColumnData> {
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

pub(super) fn u64s_to_json(v: &[u64]) -> Value {
    Value::Array(v.iter().map(|&n| Value::from(n)).collect())
}

pub(super) fn ints_to_json<T: Copy + Into<i128>>(v: &[T]) -> Vec<Value> {
    v.iter().map(|&x| int_to_json(x.into())).collect()
}

pub(super) fn column_data_to_json(data: &ColumnData) -> Vec<Value> {
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

pub(super) const BLOCK_KEYS: &[&str] = &[
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

pub(super) fn block_parts<C>(
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

pub(super) fn string_map_to_json(m: &BTreeMap<String, String>) -> Value {
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
