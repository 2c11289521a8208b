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

/// Kept here too: the force field's own rules live in [`crate::forcefield`].
pub use crate::forcefield::encode_style;

mod declaration;
mod trajectory;

// The parts share their helpers through this module (each is `use
// super::*`); a glob re-exports each item at its own visibility.
pub use declaration::*;
pub use trajectory::*;

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
