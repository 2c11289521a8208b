//! The rules of a record and its trajectory: steps, times, per-step meta
//! and fills, every update against the declaration, the resolved frames
//! (aligned blocks, row references), shared with the reader's resolver.

use super::*;

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

pub(super) fn meta_decl_text(s: &SequenceSchema) -> String {
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

pub(super) fn prepare_trajectory(
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
pub(super) struct TrajectoryFacts {
    /// The first frame has a time, so every frame must.
    pub(super) has_time: bool,
    /// `cell_defined` of the first cell: the trajectory's one flag, which
    /// every update with a cell must agree with.
    pub(super) cell_defined: Option<bool>,
    /// Some declared column has a precision and the values are rounded.
    pub(super) rounds: bool,
}

/// Whether `column` is one of the [`ENDPOINT_COLUMNS`]; asked of every
/// column of every update, so other lengths are answered at once.
pub(crate) fn is_endpoint(column: &str) -> bool {
    column.len() == ENDPOINT_LEN && ENDPOINT_COLUMNS.contains(&column)
}

/// The length of every endpoint name (that they share it is checked when
/// the crate compiles).
pub(super) const ENDPOINT_LEN: usize = ENDPOINT_COLUMNS[0].len();
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
pub(super) fn prepare_step(
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
pub(super) fn same_update_layout(prev: &Block, cur: &Block) -> bool {
    prev.same_layout_where(cur, |p, c| {
        p.validity.is_none() && c.validity.is_none() && c.precision.is_none()
    })
}

/// What `prepare_update` does to a block's values: rounding to the
/// declared precisions.
pub(super) fn round_update(name: &str, block: &mut Block, schema: &SequenceSchema) {
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
pub(super) fn prepare_update(
    name: &str,
    block: &mut Block,
    column_sets: &mut BTreeMap<String, Vec<String>>,
    system_blocks: &BTreeMap<String, Block>,
    schema: &SequenceSchema,
    rounds: bool,
) -> Result<()> {
    let decl = trajectory_block_decl(schema, name, block.count)?;
    // The shape an update presents multiplies to its own count, as any
    // block's does: a zero-row update that states a shape is refused here,
    // before its shape is replaced by the declaration's (none, on an
    // update that empties the block).
    check_shape_product(block.structural_shape.as_deref(), block.count, "")?;
    take_declared_head(block, decl)?;
    if name == "box" {
        refuse!(
            FrameReservedBlockName,
            "",
            "block name `box` is reserved in a frame"
        );
    }
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

pub(super) fn prepare_trajectory_column(
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
pub(super) fn prepare_step_meta(meta: &mut Document, schema: &SequenceSchema) -> Result<()> {
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
pub(super) fn check_aligned(
    resolved: &BTreeMap<&str, &Block>,
    schema: &SequenceSchema,
) -> Result<()> {
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
