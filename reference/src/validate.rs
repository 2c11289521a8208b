//! Every rule a collection writer enforces (spec text 001, DIGEST §§5-11).
//!
//! Validation also *prepares* what it checks, so that the writer encodes
//! exactly what was validated: typed meta normalized, fills materialized,
//! declared precision applied, all-true masks dropped.

use crate::clause::Clause;
use crate::dtype::DType;
use crate::error::{refuse, Error, Result};
use crate::model::*;
use crate::precision::{precision_in_range, round_column};
use crate::typed_json::{self, MetaTag};
use crate::units::check_unit;
use serde_json::Value;
use std::collections::BTreeMap;

/// Block names a trajectory declaration may not use.
pub const RESERVED_BLOCK_NAMES: [&str; 4] = ["step", "time", "meta", "box"];
/// Column names a trajectory declaration may not use.
pub const RESERVED_TRAJECTORY_COLUMNS: [&str; 2] = ["offset", "step_index"];
/// The binding's own index columns.
pub const RESERVED_INDEX_COLUMNS: [&str; 4] =
    ["first_frame", "n_frames", "n_atoms", "has_trajectory"];
/// Per-step keys that must be declared f64.
pub const CANONICAL_F64_STEP_KEYS: [&str; 6] = ["pe", "ke", "etotal", "temp", "press", "volume"];
/// Row-reference columns that point at `atoms` of the same frame by convention.
pub const ENDPOINT_COLUMNS: [&str; 4] = ["atomi", "atomj", "atomk", "atoml"];
/// Newest `molrec_version` this implementation supports.
pub const MOLREC_VERSION: i64 = 1;

/// What the checks do with a column's declared precision. A writer stores
/// the rounded values; a reader hands back the stored bits and neither
/// re-rounds nor refuses a value off the grid (frame.md, "Declared
/// precision": that is the writer's defect, which a validator reports, see
/// [`off_grid`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// Round every value to its column's quantum (the writer).
    Apply,
    /// Leave the values as they are (readers).
    Keep,
}

/// Checks the collection document and stamps `molrec_version`.
pub fn prepare_collection_meta(meta: &mut Document) -> Result<()> {
    match meta.get("molrec_version") {
        None => {
            meta.insert("molrec_version".into(), Value::from(MOLREC_VERSION));
        }
        Some(v) => check_version(v, "meta.molrec_version", Clause::MolrecVersion)?,
    }
    let Some(units) = meta.get("units") else {
        refuse!(
            UnitsRequired,
            "meta",
            "the collection document has no `units`"
        );
    };
    let Some(units) = units.as_object() else {
        refuse!(
            UnitsRequired,
            "meta.units",
            "`units` must be an object of quantity -> unit string"
        );
    };
    for (quantity, unit) in units {
        let at = format!("meta.units.{quantity}");
        let Some(text) = unit.as_str() else {
            refuse!(
                UnitParseable,
                at,
                "a unit must be a string, got {}",
                typed_json::brief(unit)
            );
        };
        check_unit(text).map_err(|e| Error::refused(Clause::UnitParseable, &at, e.to_string()))?;
    }
    Ok(())
}

/// Checks a version field: a JSON integer in `1..=1`, never null, a bool, a real or a string.
pub fn check_version(v: &Value, at: &str, clause: Clause) -> Result<()> {
    match v.as_i64() {
        Some(n) if v.is_i64() && (1..=MOLREC_VERSION).contains(&n) => Ok(()),
        _ => Err(Error::refused(
            clause,
            at,
            format!("must be an integer in 1..=1, got {}", json_text(v)),
        )),
    }
}

fn json_text(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 60 {
        format!("{}...", &s[..s.floor_char_boundary(60)])
    } else {
        s
    }
}

/// Checks a trajectory declaration.
///
/// Runs for every record of a collection without a declaration of its own
/// (the derived one grows record by record), so paths are formatted only on
/// the error path.
pub fn check_schema(schema: &SequenceSchema, at: &str) -> Result<()> {
    for (name, decl) in &schema.blocks {
        let bat = || format!("{at}.blocks.{name}");
        if RESERVED_BLOCK_NAMES.contains(&name.as_str()) {
            refuse!(ReservedBlockName, bat(), "block name `{name}` is reserved");
        }
        for (col, cd) in &decl.columns {
            let cat = || format!("{at}.blocks.{name}.columns.{col}");
            if col == "_validity" {
                refuse!(
                    ColumnReservedName,
                    cat(),
                    "column name `_validity` is reserved"
                );
            }
            if RESERVED_TRAJECTORY_COLUMNS.contains(&col.as_str()) {
                refuse!(ReservedColumnName, cat(), "column name `{col}` is reserved");
            }
            // Both refuse at exactly the path they are given: "" made whole.
            check_canonical(col, cd.dtype, &cd.trailing, "").map_err(|e| e.within(&cat()))?;
            check_precision(cd.precision, cd.dtype, "").map_err(|e| e.within(&cat()))?;
        }
        if let Some(target) = &decl.aligned_with {
            if decl.structural_shape.is_some() {
                refuse!(
                    AlignedNoStructuralShape,
                    bat(),
                    "an aligned block has no structural_shape"
                );
            }
            match schema.blocks.get(target) {
                None => refuse!(
                    AlignedTarget,
                    bat(),
                    "aligned_with `{target}`, which is not a declared block"
                ),
                Some(_) if target == name => {
                    refuse!(
                        AlignedTarget,
                        bat(),
                        "a block cannot be aligned with itself"
                    )
                }
                Some(t) if t.aligned_with.is_some() => {
                    refuse!(
                        AlignedTarget,
                        bat(),
                        "aligned_with `{target}`, which is itself aligned"
                    )
                }
                Some(t) => {
                    if let Some(shared) = decl.columns.keys().find(|c| t.columns.contains_key(*c)) {
                        refuse!(
                            AlignedNoSharedColumn,
                            bat(),
                            "shares column `{shared}` with its target `{target}`"
                        );
                    }
                }
            }
        }
        if let Some(shape) = &decl.structural_shape {
            if shape_product(shape).is_none() {
                refuse!(
                    StructuralShapeProduct,
                    bat(),
                    "structural_shape product overflows"
                );
            }
        }
    }
    for (key, md) in &schema.meta {
        let at = || format!("{at}.meta.{key}");
        if CANONICAL_F64_STEP_KEYS.contains(&key.as_str()) && md.tag != MetaTag::F64 {
            refuse!(
                StepMetaCanonicalF64,
                at(),
                "per-step key `{key}` must be declared f64, not {}",
                md.tag.name()
            );
        }
        if key == "_meta_types" {
            refuse!(MetaReservedKey, at(), "meta key `_meta_types` is reserved");
        }
        match &md.fill {
            Some(Value::Null) if md.tag != MetaTag::Json => {
                refuse!(
                    FillNullJsonOnly,
                    at(),
                    "`fill: null` is only valid for a json key, not {}",
                    md.tag.name()
                )
            }
            Some(fill) => {
                typed_json::normalize(md.tag, fill)
                    .map_err(|e| Error::refused(Clause::TypedValue, at(), format!("fill: {e}")))?;
            }
            None => {}
        }
    }
    Ok(())
}

/// A canonical key has one dtype and one value per row (conventions.md,
/// "Canonical dtypes"): `trailing` is the column's shape after its rows.
fn check_canonical(col: &str, dtype: DType, trailing: &[u64], at: &str) -> Result<()> {
    match DType::canonical_for(col) {
        Some(want) if want != dtype => Err(Error::refused(
            Clause::DtypeCanonical,
            at,
            format!("canonical column `{col}` must be {want}, not {dtype}"),
        )),
        Some(_) if !trailing.is_empty() => Err(Error::refused(
            Clause::CanonicalShape,
            at,
            format!(
                "canonical column `{col}` is one value per row, not rows of shape {trailing:?}"
            ),
        )),
        _ => Ok(()),
    }
}

fn check_precision(precision: Option<f64>, dtype: DType, at: &str) -> Result<()> {
    let Some(p) = precision else { return Ok(()) };
    if dtype != DType::F64 {
        refuse!(
            PrecisionF64Only,
            at,
            "precision on a {dtype} column; only f64 columns take one"
        );
    }
    if !precision_in_range(p) {
        refuse!(
            PrecisionRange,
            at,
            "precision {p} outside 2^-1000 ..= 2^1000"
        );
    }
    Ok(())
}

/// Checks one column against its block's row count, and with
/// [`Rounding::Apply`] rounds it to its declared precision (`precision`
/// overrides the column's own when given).
pub fn prepare_column(
    col: &mut Column,
    name: &str,
    count: u64,
    precision: Option<f64>,
    rounding: Rounding,
    at: &str,
) -> Result<()> {
    if name == "_validity" {
        refuse!(
            ColumnReservedName,
            at,
            "column name `_validity` is reserved"
        );
    }
    check_canonical(
        name,
        col.dtype(),
        col.shape.get(1..).unwrap_or_default(),
        at,
    )?;
    if col.shape.first() != Some(&count) {
        refuse!(
            ColumnShape,
            at,
            "shape {:?} does not lead with the block's count {count}",
            col.shape
        );
    }
    let product = shape_product(&col.shape);
    if product != Some(col.data.len() as u64) {
        refuse!(
            ColumnValues,
            at,
            "{} values for shape {:?}",
            col.data.len(),
            col.shape
        );
    }
    if let Some(mask) = &col.validity {
        if mask.len() as u64 != count {
            refuse!(
                ValidityLength,
                at,
                "mask of {} for {count} rows",
                mask.len()
            );
        }
    }
    col.normalize_mask();
    check_precision(col.precision, col.dtype(), at)?;
    if let Some(p) = precision.or(col.precision) {
        check_precision(Some(p), col.dtype(), at)?;
        if let (Rounding::Apply, ColumnData::F64(values)) = (rounding, &mut col.data) {
            round_column(values, p);
        }
    }
    Ok(())
}

/// Checks a block of a system, the index or a force field (and rounds its
/// columns with [`Rounding::Apply`]).
pub fn prepare_block(block: &mut Block, rounding: Rounding, at: &str) -> Result<()> {
    check_shape_product(block.structural_shape.as_deref(), block.count, at)?;
    let count = block.count;
    for (name, col) in &mut block.columns {
        // prepare_column refuses at exactly the path it is given.
        prepare_column(col, name, count, None, rounding, "")
            .map_err(|e| e.within(&format!("{at}.columns.{name}")))?;
    }
    Ok(())
}

/// The product of a shape's axes; `None` if it overflows.
fn shape_product(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |a, &b| a.checked_mul(b))
}

/// A block's own `structural_shape`, if it has one, multiplies to its count.
pub(crate) fn check_shape_product(shape: Option<&[u64]>, count: u64, at: &str) -> Result<()> {
    if let Some(shape) = shape {
        let product = shape_product(shape);
        if product != Some(count) {
            refuse!(
                StructuralShapeProduct,
                at,
                "structural_shape {shape:?} does not multiply to count {count}"
            );
        }
    }
    Ok(())
}

/// The declaration of trajectory block `name`, whose update has `count`
/// rows: refused if `sequence_schema` does not declare it, or declares a
/// `structural_shape` that fixes another count (an update that empties
/// the block has 0). Paths relative to the block. The writer's
/// `prepare_update` and the reader's resolver share it, so that they
/// refuse alike.
pub(crate) fn trajectory_block_decl<'s>(
    schema: &'s SequenceSchema,
    name: &str,
    count: u64,
) -> Result<&'s BlockDecl> {
    let Some(decl) = schema.blocks.get(name) else {
        refuse!(
            RecordOutsideDeclaration,
            "",
            "block `{name}` is not declared in sequence_schema"
        );
    };
    if let Some(shape) = &decl.structural_shape {
        let product = shape_product(shape);
        if count != 0 && product != Some(count) {
            refuse!(
                StructuralShapeFixed,
                "",
                "count {count} differs from the declared structural_shape {shape:?}"
            );
        }
    }
    Ok(decl)
}

/// An update's `targets` and `structural_shape` belong to its block's
/// declaration (ragged.md, "Row references"): one the update restates must
/// be the declared one (paths relative to the block). Shared with the
/// reader's resolver, which checks a header's the same way.
pub(crate) fn check_declared_head(
    targets: &BTreeMap<String, String>,
    structural_shape: Option<&[u64]>,
    decl: &BlockDecl,
) -> Result<()> {
    if !targets.is_empty() && *targets != decl.targets {
        refuse!(
            TrajectoryTargetsDeclared,
            "targets",
            "targets {targets:?} differ from the declared {:?}",
            decl.targets
        );
    }
    match (structural_shape, decl.structural_shape.as_deref()) {
        (Some(shape), Some(declared)) if shape != declared => refuse!(
            TrajectoryStructuralShapeDeclared,
            "structural_shape",
            "structural_shape {shape:?} differs from the declared {declared:?}"
        ),
        (Some(shape), None) => refuse!(
            TrajectoryStructuralShapeDeclared,
            "structural_shape",
            "structural_shape {shape:?}, but the block's declaration has none"
        ),
        _ => {}
    }
    Ok(())
}

/// [`check_declared_head`], then gives the update its declaration's
/// targets, and its structural shape unless the update empties the block
/// (a shape's product is never 0): what the writer stores in the update's
/// header and what a reader hands back on every update.
fn take_declared_head(block: &mut Block, decl: &BlockDecl) -> Result<()> {
    check_declared_head(&block.targets, block.structural_shape.as_deref(), decl)?;
    if block.targets != decl.targets {
        block.targets = decl.targets.clone();
    }
    let shape = declared_shape(decl, block.count);
    if block.structural_shape.as_deref() != shape {
        block.structural_shape = shape.map(<[u64]>::to_vec);
    }
    Ok(())
}

/// The structural shape an update of `count` rows has: the declaration's,
/// except on an update that empties the block (a shape's product is never
/// 0). The writer stores it; the reader hands it back.
pub(crate) fn declared_shape(decl: &BlockDecl, count: u64) -> Option<&[u64]> {
    decl.structural_shape.as_deref().filter(|_| count > 0)
}

/// A trajectory block of `count` rows with these columns, against the
/// system's block of the same name, if there is one: the same row count,
/// and no column in both. Paths relative to the trajectory block; shared
/// as [`trajectory_block_decl`] is.
pub(crate) fn check_against_system_block<'c>(
    name: &str,
    count: u64,
    mut columns: impl Iterator<Item = &'c str>,
    system_blocks: &BTreeMap<String, Block>,
) -> Result<()> {
    let Some(sys) = system_blocks.get(name) else {
        return Ok(());
    };
    if count != sys.count {
        refuse!(
            SystemTrajectoryRowCount,
            "",
            "{count} rows; the system block `{name}` has {}",
            sys.count
        );
    }
    if let Some(col) = columns.find(|c| sys.columns.contains_key(*c)) {
        refuse!(
            SystemTrajectoryColumnDisjoint,
            format!("columns.{col}"),
            "column `{col}` is in both the system and the trajectory block"
        );
    }
    Ok(())
}

/// Checks a system frame: typed meta, reserved names, blocks, row references, cell.
pub fn prepare_system(frame: &mut Frame, rounding: Rounding, at: &str) -> Result<()> {
    // Paths are formatted only on the error path: readers run this for
    // every record they read whole.
    prepare_typed_meta(&mut frame.meta, &mut frame.meta_types, "meta").map_err(|e| e.within(at))?;
    for (name, block) in &mut frame.blocks {
        let bat = || format!("{at}.blocks.{name}");
        if name == "box" {
            refuse!(
                FrameReservedBlockName,
                bat(),
                "block name `box` is reserved in a frame"
            );
        }
        prepare_block(block, rounding, "").map_err(|e| e.within(&bat()))?;
    }
    check_cell(frame.cell.as_mut(), "box").map_err(|e| e.within(at))?;
    let blocks: BTreeMap<&str, &Block> =
        frame.blocks.iter().map(|(k, v)| (k.as_str(), v)).collect();
    check_row_references(&blocks, None).map_err(|e| e.within(at))
}

/// Tags every meta key (inferring missing tags) and normalizes each value.
pub fn prepare_typed_meta(
    meta: &mut Document,
    types: &mut BTreeMap<String, MetaTag>,
    at: &str,
) -> Result<()> {
    if let Some(extra) = types.keys().find(|k| !meta.contains_key(*k)) {
        refuse!(
            TypedValue,
            format!("{at}.{extra}"),
            "a tag for a key the meta does not have"
        );
    }
    for (key, value) in meta.iter_mut() {
        let kat = || format!("{at}.{key}");
        if key == "_meta_types" {
            refuse!(MetaReservedKey, kat(), "meta key `_meta_types` is reserved");
        }
        let tag = *types
            .entry(key.clone())
            .or_insert_with(|| MetaTag::infer(value));
        *value = typed_json::normalize(tag, value)
            .map_err(|e| Error::refused(Clause::TypedValue, kat(), e))?;
    }
    Ok(())
}

fn check_cell(cell: Option<&mut Cell>, at: &str) -> Result<()> {
    if let Some(cell) = cell {
        if !cell.defined {
            if cell.boundary.iter().any(|&b| b) {
                refuse!(
                    BoxUndefinedBoundary,
                    at,
                    "an undefined cell has a periodic boundary flag"
                );
            }
            // Only the vectors mean nothing: the origin keeps its
            // meaning (frame.md, "An undefined cell").
            cell.vectors = Cell::IDENTITY;
        }
    }
    Ok(())
}

/// An update's cell against the trajectory's one `cell_defined` (that of
/// its first cell): frame.md, "Simulation box": on a trajectory the flag is
/// the box section's one attribute and an update carries none of its own,
/// so a cell that becomes defined or undefined mid-record has no form.
/// Shared by the writer and the reader's resolver; paths relative to the
/// frame.
pub(crate) fn check_cell_defined(cell: Option<&Cell>, trajectory: Option<bool>) -> Result<()> {
    match (cell, trajectory) {
        (Some(cell), Some(first)) if cell.defined != first => refuse!(
            BoxCellDefinedOne,
            "box.cell_defined",
            "is {} here and {first} at the trajectory's first cell: a trajectory has one cell_defined",
            cell.defined
        ),
        _ => Ok(()),
    }
}

/// Checks the row references of resolved `blocks`: endpoint columns point at
/// `atoms`, declared `targets` at their block; `fallback` supplies blocks of
/// the system for a trajectory frame (the two sides are presented joined).
/// Paths are relative to the frame (`blocks.<name>.columns.<col>`).
fn check_row_references(
    blocks: &BTreeMap<&str, &Block>,
    fallback: Option<&BTreeMap<&str, &Block>>,
) -> Result<()> {
    for (name, block) in blocks {
        for (col, column) in &block.columns {
            let target = match block.targets.get(col) {
                Some(t) => t.as_str(),
                None if is_endpoint(col) => "atoms",
                None => continue,
            };
            if block.count == 0 {
                continue;
            }
            let cat = || format!("blocks.{name}.columns.{col}");
            let rows = if let Some(abs) = target.strip_prefix('/') {
                let Some(("system", tb)) = abs.split_once('/') else {
                    refuse!(
                        RowReferenceTarget,
                        cat(),
                        "absolute target `{target}` is not a system block"
                    );
                };
                fallback.unwrap_or(blocks).get(tb).map(|b| b.count)
            } else {
                blocks
                    .get(target)
                    .or_else(|| fallback.and_then(|f| f.get(target)))
                    .map(|b| b.count)
            };
            let Some(rows) = rows else {
                refuse!(
                    RowReferenceTarget,
                    cat(),
                    "references block `{target}`, which is not in the frame"
                );
            };
            let Some(values) = column.data.as_u64() else {
                refuse!(
                    RowReferenceRange,
                    cat(),
                    "a row reference must be u64, not {}",
                    column.dtype()
                );
            };
            let width = values.len() / block.count.max(1) as usize;
            let out_of_range = match &column.validity {
                // The common case, one scan without a row division per value.
                None => values.iter().position(|&v| v >= rows),
                Some(mask) => values.iter().enumerate().position(|(i, &v)| {
                    let row = i.checked_div(width).unwrap_or(0);
                    v >= rows && mask.get(row).copied().unwrap_or(true)
                }),
            };
            if let Some(i) = out_of_range {
                refuse!(
                    RowReferenceRange,
                    format!("{}.values[{i}]", cat()),
                    "row {} out of range: `{target}` has {rows} rows",
                    values[i]
                );
            }
        }
    }
    Ok(())
}

/// Checks the collection's own index columns against the number of records.
pub fn prepare_index(
    index: &mut BTreeMap<String, Column>,
    n_records: u64,
    rounding: Rounding,
) -> Result<()> {
    for (name, col) in index.iter_mut() {
        let at = format!("index.{name}");
        if RESERVED_INDEX_COLUMNS.contains(&name.as_str()) {
            refuse!(
                IndexReservedName,
                at,
                "`{name}` is one of the binding's own index columns"
            );
        }
        if col.rows() != n_records {
            refuse!(
                IndexRowCount,
                at,
                "{} rows for {n_records} records",
                col.rows()
            );
        }
        prepare_column(col, name, n_records, None, rounding, &at)?;
    }
    Ok(())
}

/// Checks the force-field document and its style tables (forcefield.md;
/// [`crate::forcefield`]), then every block of `ff` as a frame block.
pub fn prepare_forcefield(ff: &mut ForceField) -> Result<()> {
    crate::forcefield::check(ff)?;
    // Every block of `ff`, a style's table or unknown content kept as it
    // is, is a block of the frame model; none declares a precision.
    for (name, table) in &mut ff.tables {
        let at = format!("forcefield.blocks.{name}");
        for (col, column) in &table.columns {
            if column.precision.is_some() {
                refuse!(
                    PrecisionPlacement,
                    format!("{at}.columns.{col}"),
                    "force-field tables declare no precision"
                );
            }
        }
        prepare_block(table, Rounding::Keep, &at)?;
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
fn infer_step_tag(key: &str, value: &Value) -> MetaTag {
    let special = matches!(value.as_str(), Some("NaN" | "Infinity" | "-Infinity"));
    if special || (CANONICAL_F64_STEP_KEYS.contains(&key) && value.is_number()) {
        MetaTag::F64
    } else {
        MetaTag::infer(value)
    }
}

fn is_real_tag(tag: MetaTag) -> bool {
    matches!(tag, MetaTag::I64 | MetaTag::U64 | MetaTag::F64)
}

/// A collection declaration derived from its records: the union of their
/// blocks (agreeing on shared columns) and the one meta declaration they share.
#[derive(Clone, Debug, Default)]
pub struct DerivedSchema {
    schema: SequenceSchema,
    meta_fixed: bool,
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
fn merge_column_decl(
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

/// Checks a record against the collection declaration and (with
/// [`Rounding::Apply`]) prepares it for encoding. `schema` is the
/// collection's (given, or derived over all records).
pub fn prepare_record(
    record: &mut Record,
    schema: &SequenceSchema,
    rounding: Rounding,
    at: &str,
) -> Result<()> {
    if record.system.is_none() && record.trajectory.is_none() {
        refuse!(
            RecordNotEmpty,
            at,
            "a record needs a system or a trajectory (or both)"
        );
    }
    if let Some(system) = &mut record.system {
        prepare_system(system, rounding, &format!("{at}.system"))?;
    }
    if let Some(traj) = &mut record.trajectory {
        let tat = format!("{at}.trajectory");
        // A record without a declaration of its own takes the collection's
        // (its frames are checked against it below); one that states its own
        // must state exactly the collection's.
        if let Some(own) = &traj.schema {
            check_schema(own, &format!("{tat}.schema"))?;
            if own.meta != schema.meta {
                refuse!(
                    RecordMetaDeclaration,
                    tat,
                    "per-step meta declaration {} differs from the collection's {}",
                    meta_decl_text(own),
                    meta_decl_text(schema)
                );
            }
            for (name, decl) in &own.blocks {
                if schema.blocks.get(name) != Some(decl) {
                    refuse!(
                        RecordOutsideDeclaration,
                        format!("{tat}.schema.blocks.{name}"),
                        "block declaration differs from or is outside sequence_schema"
                    );
                }
            }
        }
        prepare_trajectory(traj, record.system.as_ref(), schema, rounding, &tat)?;
    }
    Ok(())
}

fn meta_decl_text(s: &SequenceSchema) -> String {
    let keys: Vec<String> = s
        .meta
        .iter()
        .map(|(k, d)| {
            format!(
                "{k}:{}{}",
                d.tag.name(),
                if d.fill.is_some() { "+fill" } else { "" }
            )
        })
        .collect();
    format!("{{{}}}", keys.join(", "))
}

fn prepare_trajectory(
    traj: &mut Trajectory,
    system: Option<&Frame>,
    schema: &SequenceSchema,
    rounding: Rounding,
    at: &str,
) -> Result<()> {
    let no_blocks = BTreeMap::new();
    let system_blocks = system.map(|s| &s.blocks).unwrap_or(&no_blocks);
    check_aligned_names(schema, system_blocks, at)?;
    // Paths are formatted only on the error path: readers run this for every
    // record they hand back, so the loop must not allocate per frame.
    let facts = TrajectoryFacts {
        has_time: traj.frames.first().is_some_and(|f| f.time.is_some()),
        cell_defined: traj.frames.iter().find_map(|f| f.cell.map(|c| c.defined)),
        rounds: rounding == Rounding::Apply
            && schema
                .blocks
                .values()
                .any(|d| d.columns.values().any(|c| c.precision.is_some())),
    };
    let mut previous_step: Option<i64> = None;
    let mut column_sets: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..traj.frames.len() {
        let (done, rest) = traj.frames.split_at_mut(i);
        let step = &mut rest[0];
        prepare_step(
            step,
            done.last(),
            previous_step,
            facts,
            &mut column_sets,
            system_blocks,
            schema,
        )
        .map_err(|e| e.within(&format!("{at}.frames[{i}]")))?;
        previous_step = Some(step.step);
    }
    // Resolution: the aligned-block rule and row references hold on every
    // resolved frame; they can only change where an update arrives.
    let system_refs: BTreeMap<&str, &Block> =
        system_blocks.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut resolved: BTreeMap<&str, &Block> = BTreeMap::new();
    // Whether a resolved block has row-reference columns (else the rule
    // has nothing to check).
    let mut references = false;
    for (i, step) in traj.frames.iter().enumerate() {
        if step.blocks.is_empty() {
            continue;
        }
        for (name, block) in &step.blocks {
            references |= !block.targets.is_empty() || block.columns.keys().any(|c| is_endpoint(c));
            resolved.insert(name, block);
        }
        check_aligned(&resolved, schema)
            .and_then(|()| match references {
                true => check_row_references(&resolved, Some(&system_refs)),
                false => Ok(()),
            })
            .map_err(|e| e.within(&format!("{at}.frames[{i}]")))?;
    }
    Ok(())
}

/// Refuses an aligned block of the declaration that shares its name with a
/// block of the record's system.
pub fn check_aligned_names(
    schema: &SequenceSchema,
    system_blocks: &BTreeMap<String, Block>,
    at: &str,
) -> Result<()> {
    for (name, decl) in &schema.blocks {
        if decl.aligned_with.is_some() && system_blocks.contains_key(name) {
            refuse!(
                AlignedNotSystemName,
                at,
                "aligned block `{name}` shares its name with a system block"
            );
        }
    }
    Ok(())
}

/// What holds for every frame of a trajectory, found once.
#[derive(Clone, Copy)]
struct TrajectoryFacts {
    /// The first frame has a time, so every frame must.
    has_time: bool,
    /// `cell_defined` of the first cell: the trajectory's one flag, which
    /// every update with a cell must agree with.
    cell_defined: Option<bool>,
    /// Some declared column has a precision and the values are rounded.
    rounds: bool,
}

/// Whether `column` is one of the [`ENDPOINT_COLUMNS`]; asked of every
/// column of every update, so other lengths are answered at once.
pub(crate) fn is_endpoint(column: &str) -> bool {
    column.len() == ENDPOINT_LEN && ENDPOINT_COLUMNS.contains(&column)
}

/// The length of every endpoint name (that they share it is checked when
/// the crate compiles).
const ENDPOINT_LEN: usize = ENDPOINT_COLUMNS[0].len();
const _: () = {
    let mut i = 0;
    while i < ENDPOINT_COLUMNS.len() {
        assert!(ENDPOINT_COLUMNS[i].len() == ENDPOINT_LEN);
        i += 1;
    }
};

/// One trajectory frame; error paths are relative to the frame. A block
/// laid out as the previous frame presented it (already checked, see
/// [`same_update_layout`]) is only rounded to its declared precision.
fn prepare_step(
    step: &mut Step,
    previous: Option<&Step>,
    previous_step: Option<i64>,
    facts: TrajectoryFacts,
    column_sets: &mut BTreeMap<String, Vec<String>>,
    system_blocks: &BTreeMap<String, Block>,
    schema: &SequenceSchema,
) -> Result<()> {
    if let Some(prev) = previous_step {
        if step.step <= prev {
            refuse!(
                StepIncreasing,
                "step",
                "step {} after step {prev}: steps must strictly increase",
                step.step
            );
        }
    }
    if step.time.is_some() != facts.has_time {
        refuse!(
            TimeAllOrNone,
            "time",
            "time must be on every frame or on none"
        );
    }
    prepare_step_meta(&mut step.meta, schema)?;
    check_cell(step.cell.as_mut(), "box")?;
    check_cell_defined(step.cell.as_ref(), facts.cell_defined)?;
    for (name, block) in &mut step.blocks {
        let repeated = previous
            .and_then(|p| p.blocks.get(name))
            .is_some_and(|p| same_update_layout(p, block));
        if repeated {
            if facts.rounds {
                round_update(name, block, schema);
            }
            continue;
        }
        prepare_update(
            name,
            block,
            column_sets,
            system_blocks,
            schema,
            facts.rounds,
        )
        .map_err(|e| e.within(&format!("blocks.{name}")))?;
    }
    Ok(())
}

/// Whether `cur` is laid out as `prev`, an update of the same block at the
/// previous frame that passed [`prepare_update`]: then every rule of
/// `prepare_update` has the same outcome for `cur`, since they depend only
/// on the block's name, count, structural shape and targets and on its
/// columns' names, dtypes, shapes, lengths, masks and precisions (here: no
/// mask and no precision, both of which need the full checks).
fn same_update_layout(prev: &Block, cur: &Block) -> bool {
    prev.same_layout_where(cur, |p, c| {
        p.validity.is_none() && c.validity.is_none() && c.precision.is_none()
    })
}

/// What `prepare_update` does to a block's values: rounding to the
/// declared precisions.
fn round_update(name: &str, block: &mut Block, schema: &SequenceSchema) {
    let Some(decl) = schema.blocks.get(name) else {
        return;
    };
    if decl.columns.values().all(|cd| cd.precision.is_none()) {
        return;
    }
    for (col, column) in &mut block.columns {
        let precision = decl.columns.get(col).and_then(|cd| cd.precision);
        if let (Some(p), ColumnData::F64(values)) = (precision, &mut column.data) {
            round_column(values, p);
        }
    }
}

/// One presented block of a trajectory frame; error paths are relative to it.
fn prepare_update(
    name: &str,
    block: &mut Block,
    column_sets: &mut BTreeMap<String, Vec<String>>,
    system_blocks: &BTreeMap<String, Block>,
    schema: &SequenceSchema,
    rounds: bool,
) -> Result<()> {
    let decl = trajectory_block_decl(schema, name, block.count)?;
    take_declared_head(block, decl)?;
    if name == "box" {
        refuse!(
            FrameReservedBlockName,
            "",
            "block name `box` is reserved in a frame"
        );
    }
    check_shape_product(block.structural_shape.as_deref(), block.count, "")?;
    match column_sets.get(name) {
        Some(first)
            if first.len() != block.columns.len()
                || !first.iter().zip(block.columns.keys()).all(|(a, b)| a == b) =>
        {
            let names: Vec<&String> = block.columns.keys().collect();
            refuse!(
                BlockColumnSetStable,
                "",
                "columns {names:?} differ from this record's earlier update {first:?}"
            );
        }
        Some(_) => {}
        None => {
            column_sets.insert(name.to_string(), block.columns.keys().cloned().collect());
        }
    }
    let count = block.count;
    for (col, column) in &mut block.columns {
        prepare_trajectory_column(name, col, column, count, decl, rounds)
            .map_err(|e| e.within(&format!("columns.{col}")))?;
    }
    check_against_system_block(
        name,
        block.count,
        block.columns.keys().map(String::as_str),
        system_blocks,
    )
}

fn prepare_trajectory_column(
    block: &str,
    col: &str,
    column: &mut Column,
    count: u64,
    decl: &BlockDecl,
    rounds: bool,
) -> Result<()> {
    let Some(cd) = decl.columns.get(col) else {
        refuse!(
            RecordOutsideDeclaration,
            "",
            "column `{col}` is not declared for block `{block}`"
        );
    };
    if column.precision.is_some() {
        refuse!(
            PrecisionPlacement,
            "",
            "a trajectory column takes its precision from sequence_schema"
        );
    }
    if column.dtype() != cd.dtype
        || column.shape.get(1..).unwrap_or_default() != cd.trailing.as_slice()
    {
        refuse!(
            RecordOutsideDeclaration,
            "",
            "{} {:?} differs from the declared {} with trailing {:?}",
            column.dtype(),
            column.shape,
            cd.dtype,
            cd.trailing
        );
    }
    let rounding = if rounds {
        Rounding::Apply
    } else {
        Rounding::Keep
    };
    prepare_column(column, col, count, cd.precision, rounding, "")?;
    column.precision = None;
    if column.validity.is_some() && !cd.nullable {
        refuse!(
            RecordOutsideDeclaration,
            "",
            "a mask on a column not declared nullable"
        );
    }
    Ok(())
}

/// Per-step meta: every key declared, values normalized, fills materialized.
/// Error paths are relative to the frame (`meta.<key>`).
fn prepare_step_meta(meta: &mut Document, schema: &SequenceSchema) -> Result<()> {
    if let Some(extra) = meta.keys().find(|k| !schema.meta.contains_key(*k)) {
        refuse!(
            RecordOutsideDeclaration,
            format!("meta.{extra}"),
            "per-step key `{extra}` is not declared"
        );
    }
    for (key, decl) in &schema.meta {
        let given = meta.get(key);
        let value = match (given, &decl.fill) {
            (Some(v), _) => v,
            (None, Some(fill)) => fill,
            (None, None) => refuse!(
                StepMetaRequired,
                format!("meta.{key}"),
                "declared per-step key `{key}` is missing and has no fill"
            ),
        };
        let normal = typed_json::normalize(decl.tag, value)
            .map_err(|e| Error::refused(Clause::TypedValue, format!("meta.{key}"), e))?;
        // Already canonical (the common case): leave the map as it is.
        if given != Some(&normal) {
            meta.insert(key.clone(), normal);
        }
    }
    Ok(())
}

/// The aligned-block row-count rule on one resolved frame (paths relative to it).
fn check_aligned(resolved: &BTreeMap<&str, &Block>, schema: &SequenceSchema) -> Result<()> {
    for (name, decl) in &schema.blocks {
        let (Some(target), Some(block)) = (&decl.aligned_with, resolved.get(name.as_str())) else {
            continue;
        };
        match resolved.get(target.as_str()) {
            None => refuse!(
                AlignedRowCount,
                format!("blocks.{name}"),
                "aligned block is present while its target `{target}` is absent"
            ),
            Some(t) if t.count != block.count => refuse!(
                AlignedRowCount,
                format!("blocks.{name}"),
                "{} rows, its target `{target}` has {}",
                block.count,
                t.count
            ),
            Some(_) => {}
        }
    }
    Ok(())
}

/// Validates a whole collection in memory and prepares it for writing;
/// returns the effective declaration (given or derived).
pub fn prepare_collection(c: &mut Collection) -> Result<SequenceSchema> {
    prepare_collection_meta(&mut c.header.meta)?;
    if let Some(ff) = &mut c.header.forcefield {
        prepare_forcefield(ff)?;
    }
    let schema = effective_schema(&c.header, &c.records)?;
    for (r, record) in c.records.iter_mut().enumerate() {
        prepare_record(record, &schema, Rounding::Apply, &format!("records[{r}]"))?;
    }
    prepare_index(&mut c.index, c.records.len() as u64, Rounding::Apply)?;
    Ok(schema)
}

/// The collection's declaration: the given one, or the derived union.
pub fn effective_schema(header: &Header, records: &[Record]) -> Result<SequenceSchema> {
    if let Some(s) = &header.sequence_schema {
        check_schema(s, "sequence_schema")?;
        return Ok(s.clone());
    }
    let mut derived = DerivedSchema::default();
    for (r, record) in records.iter().enumerate() {
        if let Some(traj) = &record.trajectory {
            let at = format!("records[{r}].trajectory");
            derived.merge(&record_declaration(traj, &at)?, &at)?;
        }
    }
    Ok(derived.schema)
}
