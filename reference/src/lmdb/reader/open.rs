//! The binding's `meta` and `index` values as [`Reader::open`](super::Reader)
//! parses and checks them.

use crate::clause::Clause;
use crate::error::{refuse, Error, Result};
use crate::frame_bytes::decode;
use crate::lmdb::{LAYOUT, LAYOUT_VERSION};
use crate::model::*;
use crate::{model_json, typed_json, validate};
use serde_json::Value;

pub(super) type ParsedMeta = (Document, SequenceSchema, u64, u64);

pub(super) fn parse_meta(bytes: &[u8]) -> Result<ParsedMeta> {
    let Ok(Value::Object(meta)) = serde_json::from_slice::<Value>(bytes) else {
        refuse!(MetaWellFormed, "meta", "`meta` is not a JSON object");
    };
    match meta.get("layout") {
        Some(Value::String(s)) if s == LAYOUT => {}
        other => refuse!(
            Layout,
            "meta.layout",
            "expected \"{LAYOUT}\", got {}",
            other.map_or("nothing".into(), typed_json::brief)
        ),
    }
    match meta.get("layout_version") {
        Some(v) if v.as_i64() == Some(LAYOUT_VERSION) && v.is_i64() => {}
        Some(v) => refuse!(
            LayoutVersion,
            "meta.layout_version",
            "must be the integer 1, got {v}"
        ),
        None => refuse!(
            LayoutVersion,
            "meta.layout_version",
            "`layout_version` is required"
        ),
    }
    let Some(Value::Object(collection)) = meta.get("collection") else {
        refuse!(
            MetaWellFormed,
            "meta.collection",
            "`collection` must be an object"
        );
    };
    if let Some(v) = collection.get("molrec_version") {
        validate::check_version(v, "meta.collection.molrec_version", Clause::MolrecVersion)?;
    }
    // Check units without stamping anything into what is handed back.
    let mut checked = collection.clone();
    validate::prepare_collection_meta(&mut checked).map_err(|e| e.within("meta.collection"))?;
    let schema_json = meta
        .get("sequence_schema")
        .ok_or_else(|| Error::refused(Clause::MetaWellFormed, "meta.sequence_schema", "missing"))?;
    let schema =
        model_json::schema_from_json(schema_json, "meta.sequence_schema").map_err(|e| match e {
            Error::Refused {
                clause: Clause::ModelJson,
                at,
                detail,
            } => Error::Refused {
                clause: Clause::MetaWellFormed,
                at,
                detail,
            },
            other => other,
        })?;
    validate::check_schema(&schema, "meta.sequence_schema")?;
    let count = |key: &str| {
        meta.get(key).and_then(Value::as_u64).ok_or_else(|| {
            Error::refused(
                Clause::MetaWellFormed,
                format!("meta.{key}"),
                "must be an unsigned integer",
            )
        })
    };
    Ok((
        collection.clone(),
        schema,
        count("n_records")?,
        count("n_frames")?,
    ))
}

pub(super) type ParsedIndex = (Vec<u64>, Vec<u64>, Vec<u64>, Vec<bool>);

pub(super) fn parse_index(value: &[u8], n_records: u64, n_frames: u64) -> Result<ParsedIndex> {
    let frame = decode(value).map_err(|e| e.within("index"))?;
    let Some(block) = frame.blocks.get("records") else {
        refuse!(IndexColumns, "index", "no block `records`");
    };
    if block.count != n_records {
        refuse!(
            IndexCount,
            "index.records",
            "{} rows, meta.n_records is {n_records}",
            block.count
        );
    }
    let u64s = |name: &str| -> Result<Vec<u64>> {
        let at = format!("index.records.columns.{name}");
        let col = block
            .columns
            .get(name)
            .ok_or_else(|| Error::refused(Clause::IndexColumns, &at, "missing"))?;
        match col.to_column().map_err(|e| e.within(&at))? {
            Column {
                data: ColumnData::U64(v),
                shape,
                ..
            } if shape.len() == 1 => Ok(v),
            c => Err(Error::refused(
                Clause::IndexColumns,
                at,
                format!("must be u64 of one axis, got {} {:?}", c.dtype(), c.shape),
            )),
        }
    };
    let first = u64s("first_frame")?;
    let counts = u64s("n_frames")?;
    let atoms = u64s("n_atoms")?;
    let at = "index.records.columns.has_trajectory";
    let flags = match block.columns.get("has_trajectory").map(|c| c.to_column()) {
        Some(Ok(Column {
            data: ColumnData::Bool(v),
            ..
        })) => v,
        Some(Err(e)) => return Err(e.within(at)),
        _ => refuse!(IndexColumns, at, "missing or not bool"),
    };
    let mut sum = 0u64;
    for (r, (&f, &n)) in first.iter().zip(&counts).enumerate() {
        if f != sum {
            refuse!(
                IndexPrefixSum,
                format!("index.records.columns.first_frame[{r}]"),
                "is {f}, the prefix sum of n_frames is {sum}"
            );
        }
        sum = sum
            .checked_add(n)
            .ok_or_else(|| Error::refused(Clause::IndexTotal, "index", "n_frames overflows"))?;
    }
    if sum != n_frames {
        refuse!(
            IndexTotal,
            "index.records",
            "frames add up to {sum}, meta.n_frames is {n_frames}"
        );
    }
    Ok((first, counts, atoms, flags))
}
