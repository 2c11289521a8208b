//! A record's trajectory declaration, its own or inferred from its frames,
//! and the collection's declaration derived over all records.

use super::*;

/// The declaration a record's trajectory presents.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordDeclaration {
    /// Blocks and per-step meta.
    pub schema: SequenceSchema,
    /// Whether the record states a per-step meta declaration (its own schema,
    /// or frames to infer it from); a zero-frame record without a schema
    /// states none and takes the collection's.
    pub states_meta: bool,
}

/// The declaration a record's trajectory presents: its own, or one inferred
/// from its frames (block columns from the updates, meta tags by DIGEST §7).
pub fn record_declaration(traj: &Trajectory, at: &str) -> Result<RecordDeclaration> {
    if let Some(schema) = &traj.schema {
        check_schema(schema, &format!("{at}.schema"))?;
        return Ok(RecordDeclaration {
            schema: schema.clone(),
            states_meta: true,
        });
    }
    // Per frame and column: nothing is allocated once a block, column or
    // key has been seen, and paths are formatted only on the error path.
    let mut decl = SequenceSchema::default();
    for (i, step) in traj.frames.iter().enumerate() {
        for (name, block) in &step.blocks {
            if !decl.blocks.contains_key(name) {
                decl.blocks.insert(name.clone(), BlockDecl::default());
            }
            let entry = decl.blocks.get_mut(name).expect("inserted above");
            // An update that states no targets or shape says nothing; the
            // first that states them declares them (one that states others
            // is refused against the declaration).
            if entry.targets.is_empty() && !block.targets.is_empty() {
                entry.targets = block.targets.clone();
            }
            if entry.structural_shape.is_none() && block.count > 0 {
                entry.structural_shape = block.structural_shape.clone();
            }
            for (col, column) in &block.columns {
                merge_column_decl(
                    entry,
                    col,
                    column.dtype(),
                    column.shape.get(1..).unwrap_or_default(),
                    None,
                    column
                        .validity
                        .as_ref()
                        .is_some_and(|m| m.iter().any(|v| !v)),
                    || format!("{at}.frames[{i}].blocks.{name}.columns.{col}"),
                    Clause::BlockColumnSetStable,
                )?;
            }
        }
        for (key, value) in &step.meta {
            let tag = infer_step_tag(key, value);
            match decl.meta.get_mut(key) {
                // Integers and reals (and the special-float strings) of one
                // key across frames are one f64 key.
                Some(entry) => {
                    if entry.tag != tag && is_real_tag(entry.tag) && is_real_tag(tag) {
                        entry.tag = MetaTag::F64;
                    }
                }
                None => {
                    decl.meta.insert(key.clone(), MetaDecl { tag, fill: None });
                }
            }
        }
    }
    check_schema(&decl, at)?;
    Ok(RecordDeclaration {
        schema: decl,
        states_meta: !traj.frames.is_empty(),
    })
}

/// The tag of an undeclared per-step value: DIGEST §7's inference, except
/// that the special-float strings and the canonical per-step keys are f64.
pub(super) fn infer_step_tag(key: &str, value: &Value) -> MetaTag {
    let special = matches!(value.as_str(), Some("NaN" | "Infinity" | "-Infinity"));
    if special || (CANONICAL_F64_STEP_KEYS.contains(&key) && value.is_number()) {
        MetaTag::F64
    } else {
        MetaTag::infer(value)
    }
}

pub(super) fn is_real_tag(tag: MetaTag) -> bool {
    matches!(tag, MetaTag::I64 | MetaTag::U64 | MetaTag::F64)
}

/// A collection declaration derived from its records: the union of their
/// blocks (agreeing on shared columns) and the one meta declaration they share.
#[derive(Clone, Debug, Default)]
pub struct DerivedSchema {
    pub(super) schema: SequenceSchema,
    pub(super) meta_fixed: bool,
}

impl DerivedSchema {
    /// The declaration so far.
    pub fn schema(&self) -> &SequenceSchema {
        &self.schema
    }

    /// Adds one record's declaration.
    pub fn merge(&mut self, record: &RecordDeclaration, at: &str) -> Result<()> {
        if record.states_meta {
            if !self.meta_fixed {
                self.schema.meta = record.schema.meta.clone();
                self.meta_fixed = true;
            } else if self.schema.meta != record.schema.meta {
                refuse!(
                    RecordMetaDeclaration,
                    at,
                    "per-step meta declaration {} differs from the other records' {}",
                    meta_decl_text(&record.schema),
                    meta_decl_text(&self.schema)
                );
            }
        }
        let schema = &mut self.schema;
        for (name, rb) in &record.schema.blocks {
            let bat = || format!("{at}.blocks.{name}");
            let entry = schema
                .blocks
                .entry(name.clone())
                .or_insert_with(|| BlockDecl {
                    columns: BTreeMap::new(),
                    ..rb.clone()
                });
            if entry.structural_shape != rb.structural_shape
                || entry.targets != rb.targets
                || entry.aligned_with != rb.aligned_with
            {
                refuse!(
                    DerivedColumnsAgree,
                    bat(),
                    "records disagree on this block's structure"
                );
            }
            for (col, cd) in &rb.columns {
                merge_column_decl(
                    entry,
                    col,
                    cd.dtype,
                    &cd.trailing,
                    cd.precision,
                    cd.nullable,
                    || format!("{at}.blocks.{name}.columns.{col}"),
                    Clause::DerivedColumnsAgree,
                )?;
            }
        }
        check_schema(schema, "sequence_schema")
    }
}

/// Adds a column (`dtype`, `trailing` shape, `precision`, `nullable`) to a
/// block declaration, or checks it against the one there. Takes the parts
/// by reference and the path as a closure: the common case (a column seen
/// before, agreeing) allocates nothing.
#[allow(clippy::too_many_arguments)]
pub(super) fn merge_column_decl(
    block: &mut BlockDecl,
    col: &str,
    dtype: DType,
    trailing: &[u64],
    precision: Option<f64>,
    nullable: bool,
    at: impl FnOnce() -> String,
    clause: Clause,
) -> Result<()> {
    match block.columns.get_mut(col) {
        None => {
            let cd = ColumnDecl {
                dtype,
                trailing: trailing.to_vec(),
                nullable,
                precision,
            };
            block.columns.insert(col.to_string(), cd);
        }
        Some(have) => {
            if have.dtype != dtype
                || have.trailing != trailing
                || have.precision.map(f64::to_bits) != precision.map(f64::to_bits)
            {
                return Err(Error::refused(
                    clause,
                    at(),
                    format!(
                        "column declared {} {:?} elsewhere, {} {:?} here",
                        have.dtype, have.trailing, dtype, trailing
                    ),
                ));
            }
            have.nullable |= nullable;
        }
    }
    Ok(())
}
