//! The sequence schema: block, column and per-step meta declarations.

use super::*;

// --------------------------------------------------------------- schema --

pub(super) const SCHEMA_KEYS: &[&str] = &["blocks", "meta"];
pub(super) const BLOCK_DECL_KEYS: &[&str] =
    &["columns", "structural_shape", "targets", "aligned_with"];
pub(super) const COLUMN_DECL_KEYS: &[&str] = &["dtype", "trailing", "nullable", "precision"];
pub(super) const META_DECL_KEYS: &[&str] = &["dtype", "fill"];

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

pub(super) fn block_decl_from_json(v: &Value, at: &str) -> Result<BlockDecl> {
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

pub(super) fn column_decl_from_json(v: &Value, at: &str) -> Result<ColumnDecl> {
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

pub(super) fn meta_decl_from_json(v: &Value, at: &str) -> Result<MetaDecl> {
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

pub(super) fn block_decl_to_json(b: &BlockDecl) -> Value {
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
