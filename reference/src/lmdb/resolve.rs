//! Resolving a record's trajectory column-wise: each update is checked by
//! the model rules as it is read and its rows appended to the record's
//! [`TrajectoryArrays`].
//!
//! The rules are those `validate::prepare_record` applies to a trajectory
//! (spec text 001, DIGEST §9), in the same order and with the same clauses
//! and paths, so that a file is refused here exactly as the model path
//! refuses it (`RecordTxn::record_reference` is kept to prove it):
//!
//! - the walk's own refusals (bytes, declaration, per-step keys: see
//!   `RecordTxn::walk_updates`) come first, at the frame where they occur;
//! - then, after the system's checks, the first *step rule* broken (step
//!   order, times, an update's block against the declaration, its column
//!   set and the system), in frame order;
//! - then the first *resolution rule* broken (aligned blocks, row
//!   references) on the resolved frames, in frame order.
//!
//! So a broken rule is kept, not returned, and the walk goes on (without
//! building arrays) in case a refusal that comes first is still ahead.
//!
//! Most updates restate the blocks of the previous one with new values:
//! their `blocks` text is the same ([`Update::SameBlocks`]), so their checks
//! against the declaration have the same outcome, and their rows are copied
//! straight from the payload at the offsets the last full update had.

use super::layout::{layout_of, Layout, LayoutBlock, LayoutColumn, LayoutData};
use super::reader::walk::{update_step, Walked};
use crate::arrays::{
    BlockHead, BlockSeries, BlockUpdate, ColumnSeries, StepSeries, TrajectoryArrays,
};
use crate::clause::Clause;
use crate::error::{refuse, Error, Result};
use crate::frame_bytes::{decode, extend_buffer};
use crate::model::*;
use crate::typed_json::MetaTag;
use crate::validate::{self, is_endpoint};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Frames reserved ahead for the per-frame arrays, and elements for each
/// column, from what the index claims: a typical record is gathered
/// without growing them, and a file that claims more frames than it has
/// makes the reader allocate no more than this before it is refused.
const RESERVE_FRAMES: usize = 1 << 10;
/// See [`RESERVE_FRAMES`].
const RESERVE_ELEMENTS: usize = 1 << 14;

/// The trajectory being resolved, and the first rule it broke.
pub(super) struct Resolver<'s> {
    schema: &'s SequenceSchema,
    system: &'s BTreeMap<String, Block>,
    frames_claimed: usize,
    steps: Vec<i64>,
    times: Option<Vec<f64>>,
    /// The declared per-step keys, in order, with their tags.
    meta: Vec<(&'s str, MetaTag, StepSeries)>,
    blocks: Vec<BlockState>,
    cells: Vec<Cell>,
    frame_cells: Vec<Option<u32>>,
    cell_now: Option<u32>,
    /// `cell_defined` of the record's first cell, the trajectory's one flag.
    cell_defined: Option<bool>,
    previous_step: Option<i64>,
    has_time: Option<bool>,
    /// The layout of the last full update: an update with the same
    /// `blocks` text finds its values at the same places of its payload.
    plan: Option<Arc<Layout>>,
    /// The state (index into `blocks`) of each block of the plan.
    plan_states: Vec<usize>,
    /// Whether the declaration has aligned blocks (else the aligned rule
    /// has nothing to check).
    has_aligned: bool,
    /// The first step rule broken (frame index, error located in the frame).
    step_fault: Option<(u64, Error)>,
    /// The first resolution rule broken.
    resolution_fault: Option<(u64, Error)>,
}

/// One block of the record: what is built and what the rules need.
struct BlockState {
    name: String,
    updates: Vec<BlockUpdate>,
    heads: Vec<(u32, BlockHead)>,
    frame_updates: Vec<Option<u32>>,
    /// Columns in name order: the column set of the record's first update.
    columns: Vec<(String, ColumnSeries)>,
    /// The column names of the first update (kept when building stops).
    column_set: Vec<String>,
    /// The update in effect.
    current: Option<u32>,
    /// Row-reference columns of the update in effect: column index, target.
    references: Vec<(usize, String)>,
}

impl<'s> Resolver<'s> {
    /// A resolver for a record whose index claims `frames_claimed` frames.
    pub(super) fn new(
        schema: &'s SequenceSchema,
        system: &'s BTreeMap<String, Block>,
        frames_claimed: u64,
    ) -> Resolver<'s> {
        let frames_claimed = usize::try_from(frames_claimed).unwrap_or(usize::MAX);
        let reserve = frames_claimed.min(RESERVE_FRAMES);
        Resolver {
            schema,
            system,
            frames_claimed,
            steps: Vec::with_capacity(reserve),
            times: None,
            meta: schema
                .meta
                .iter()
                .map(|(key, decl)| {
                    let mut series = StepSeries::new(decl.tag);
                    if let Some(values) = series.f64s_mut() {
                        values.reserve(reserve);
                    }
                    (key.as_str(), decl.tag, series)
                })
                .collect(),
            blocks: Vec::new(),
            cells: Vec::new(),
            frame_cells: Vec::with_capacity(reserve),
            cell_now: None,
            cell_defined: None,
            previous_step: None,
            has_time: None,
            plan: None,
            plan_states: Vec::new(),
            has_aligned: schema.blocks.values().any(|d| d.aligned_with.is_some()),
            step_fault: None,
            resolution_fault: None,
        }
    }

    /// Whether arrays are still built (no rule broken yet).
    fn building(&self) -> bool {
        self.step_fault.is_none() && self.resolution_fault.is_none()
    }

    /// Takes one update of the walk. Errors returned are the walk's kind
    /// (refusals that come before any rule); broken rules are kept.
    pub(super) fn update(&mut self, u: &mut Walked<'_>) -> Result<()> {
        let k = u.k;
        let located = |e: Error| e.within(&format!("frames[{k}]"));
        let (step, meta_kept) = self.meta_and_step(&u.info).map_err(located)?;
        // A full update's layout; `None`: the blocks of the last full one.
        let layout = match (u.blocks.take(), u.layout.take()) {
            (Some(blocks), _) => Some(Arc::new(layout_of(blocks, u.payload).map_err(located)?)),
            (None, layout) => layout,
        };
        if self.step_fault.is_none() {
            if let Err(e) = self.step_rules(u, step, layout.as_deref()) {
                self.step_fault = Some((k, e));
            }
        }
        if !self.building() {
            return Ok(());
        }
        // The blocks this update appends: its own (then they become the
        // plan), or the plan's again.
        let (layout, repeated) = match (layout, self.plan.clone()) {
            (Some(layout), _) => (layout, false),
            (None, Some(plan)) => (plan, true),
            (None, None) => {
                // Not expected (a repeated update follows a full one);
                // decoding in full is always right.
                let frame = decode(u.value).map_err(located)?;
                let layout = layout_of(frame.blocks, u.payload).map_err(located)?;
                (Arc::new(layout), false)
            }
        };
        let updated = if repeated {
            self.append_repeat(&layout, u.payload).map_err(located)?
        } else {
            let updated = self.append(&layout, u.payload).map_err(located)?;
            self.plan = Some(layout);
            updated
        };
        self.steps.push(step);
        if let (Some(times), Some(t)) = (&mut self.times, u.info.time) {
            times.push(t);
        }
        // `meta_and_step` checked that the update carries exactly the
        // declared keys: both hold the same keys in the same (sorted) order.
        if !meta_kept {
            for ((key, _, series), value) in self.meta.iter_mut().zip(u.info.meta.values()) {
                series.push(value).map_err(|e| {
                    Error::refused(Clause::TypedValue, format!("frames[{k}].meta.{key}"), e)
                })?;
            }
        }
        if let Some(cell) = &u.info.cell {
            self.cell_now = Some(self.cells.len() as u32);
            self.cells.push(**cell);
        }
        self.frame_cells.push(self.cell_now);
        for b in &mut self.blocks {
            b.frame_updates.push(b.current);
        }
        if updated {
            if let Err(e) = self.resolution_rules() {
                self.resolution_fault = Some((k, e.within(&format!("frames[{k}]"))));
            }
        }
        Ok(())
    }

    /// What [`update_step`] checks (the walk's refusals: per-step keys and
    /// the step), in one pass over the keys in the common case (exactly the
    /// declared keys, each an `f64` number), which also keeps the values
    /// while arrays are built (then the second result is `true`); paths
    /// relative to the frame.
    fn meta_and_step(&mut self, info: &crate::frame_bytes::FrameInfo) -> Result<(i64, bool)> {
        let building = self.building();
        let usual = info.meta.len() == self.meta.len()
            && info
                .meta
                .iter()
                .zip(&self.meta)
                .all(|((given, value), (key, tag, _))| {
                    given == key && *tag == MetaTag::F64 && value.is_number()
                });
        match info.step {
            Some(step) if usual => {
                if building {
                    for ((_, _, series), value) in self.meta.iter_mut().zip(info.meta.values()) {
                        if let (Some(out), Some(x)) = (series.f64s_mut(), value.as_f64()) {
                            out.push(x);
                        }
                    }
                }
                Ok((step, building))
            }
            _ => update_step(info, self.schema).map(|step| (step, false)),
        }
    }

    /// The rules of one update that `prepare_step` checks, in its order;
    /// paths relative to the trajectory.
    fn step_rules(&mut self, u: &Walked<'_>, step: i64, layout: Option<&Layout>) -> Result<()> {
        let located = |e: Error| e.within(&format!("frames[{}]", u.k));
        if let Some(prev) = self.previous_step {
            if step <= prev {
                return Err(located(Error::refused(
                    Clause::StepIncreasing,
                    "step",
                    format!("step {step} after step {prev}: steps must strictly increase"),
                )));
            }
        }
        self.previous_step = Some(step);
        let has_time = *self.has_time.get_or_insert(u.info.time.is_some());
        if has_time && self.times.is_none() {
            self.times = Some(Vec::with_capacity(self.frames_claimed.min(RESERVE_FRAMES)));
        }
        if u.info.time.is_some() != has_time {
            return Err(located(Error::refused(
                Clause::TimeAllOrNone,
                "time",
                "time must be on every frame or on none",
            )));
        }
        if let Some(cell) = &u.info.cell {
            let first = *self.cell_defined.get_or_insert(cell.defined);
            validate::check_cell_defined(Some(cell), Some(first)).map_err(located)?;
        }
        // Per-step meta and the cell were checked by the walk (a reader's
        // file must carry every key; the decoder normalizes the cell).
        // An update with the same blocks text as the last full one has the
        // same outcome: only full updates are checked again.
        if let Some(layout) = layout {
            for block in &layout.blocks {
                self.block_rules(block, u.payload)
                    .map_err(|e| located(e.within(&format!("blocks.{}", block.name))))?;
            }
        }
        Ok(())
    }

    /// `prepare_update`'s rules for one block of a full update (paths
    /// relative to the block). Also records the record's first column set
    /// while no array is built (the arrays hold it otherwise).
    fn block_rules(&mut self, block: &LayoutBlock, payload: &[u8]) -> Result<()> {
        let name = block.name.as_str();
        let decl = block_declaration(self.schema, block)?;
        let names = || block.columns.iter().map(|c| c.name.as_str());
        match self.blocks.iter().find(|b| b.name == name) {
            Some(state) if !names().eq(state.column_names()) => {
                let names: Vec<&str> = names().collect();
                let earlier: Vec<&str> = state.column_names().collect();
                refuse!(
                    BlockColumnSetStable,
                    "",
                    "columns {names:?} differ from this record's earlier update {earlier:?}"
                );
            }
            Some(_) => {}
            None => {
                let reserve = self.frames_claimed.min(RESERVE_FRAMES);
                let mut state = BlockState::new(name, self.steps.len(), reserve);
                if !self.building() {
                    // No array will hold the names: keep them here.
                    state.column_set = names().map(str::to_string).collect();
                }
                self.blocks.push(state);
            }
        }
        block_columns_rules(decl, block, payload, self.system)
    }

    /// Appends an update of the blocks `layout` describes, their values
    /// read from `payload` (with the checks of `ColumnRef::to_column`), and
    /// makes it the plan for updates that repeat its text. Returns whether
    /// it updated any block.
    fn append(&mut self, layout: &Layout, payload: &[u8]) -> Result<bool> {
        let frames_claimed = self.frames_claimed as u64;
        let schema = self.schema;
        self.plan_states.clear();
        for block in &layout.blocks {
            let name = block.name.as_str();
            let Some(b) = self.blocks.iter().position(|s| s.name == name) else {
                // `block_rules` made the state of every block it passed.
                refuse!(
                    RecordOutsideDeclaration,
                    format!("blocks.{name}"),
                    "block `{name}` is not declared in sequence_schema"
                );
            };
            self.plan_states.push(b);
            let state = &mut self.blocks[b];
            if state.columns.is_empty() && state.updates.is_empty() {
                for column in &block.columns {
                    let mut series = ColumnSeries::new(column.dtype, column.trailing.clone());
                    let elements = block
                        .count
                        .saturating_mul(product(&column.trailing))
                        .saturating_mul(frames_claimed);
                    reserve_data(
                        &mut series.data,
                        elements.min(RESERVE_ELEMENTS as u64) as usize,
                    );
                    state.columns.push((column.name.clone(), series));
                }
            }
            if state.columns.len() != block.columns.len() {
                // Not expected: `block_rules` compared the column sets.
                refuse!(
                    BlockColumnSetStable,
                    format!("blocks.{name}"),
                    "the columns differ from this record's earlier update"
                );
            }
            let u = state.append_update(block, payload)?;
            // Targets and shape are the declaration's (`block_rules` refused
            // a header that states others), whatever the header restates.
            let declared = schema.blocks.get(name);
            let no_targets = BTreeMap::new();
            let targets = declared.map_or(&no_targets, |d| &d.targets);
            let shape = declared.and_then(|d| validate::declared_shape(d, block.count));
            state.references = block
                .columns
                .iter()
                .enumerate()
                .filter_map(|(i, column)| match targets.get(&column.name) {
                    Some(t) => Some((i, t.clone())),
                    None if is_endpoint(&column.name) => Some((i, "atoms".to_string())),
                    None => None,
                })
                .collect();
            let unchanged = state.heads.last().is_some_and(|(_, last)| {
                last.structural_shape.as_deref() == shape
                    && last.targets == *targets
                    && last.attributes == block.head.attributes
            });
            if !unchanged {
                let head = BlockHead {
                    structural_shape: shape.map(<[u64]>::to_vec),
                    targets: targets.clone(),
                    attributes: block.head.attributes.clone(),
                };
                state.heads.push((u, head));
            }
        }
        Ok(!layout.blocks.is_empty())
    }

    /// [`Resolver::append`] of an update that repeats the last one's
    /// `blocks` text (the plan's): the same states, row references and
    /// heads; only the values are new. Returns whether it updated any block.
    fn append_repeat(&mut self, layout: &Layout, payload: &[u8]) -> Result<bool> {
        if self.plan_states.len() != layout.blocks.len() {
            // Not expected: the plan's states were found by `append`.
            return self.append(layout, payload);
        }
        for (block, &b) in layout.blocks.iter().zip(&self.plan_states) {
            if let Some(state) = self.blocks.get_mut(b) {
                state.append_update(block, payload)?;
            }
        }
        Ok(!layout.blocks.is_empty())
    }

    /// The rules of a resolved frame that `prepare_trajectory` checks after
    /// an update: aligned blocks, then row references (paths relative to
    /// the frame).
    fn resolution_rules(&self) -> Result<()> {
        if !self.has_aligned && self.blocks.iter().all(|b| b.references.is_empty()) {
            return Ok(());
        }
        let count_of = |name: &str| {
            let b = self.blocks.iter().find(|b| b.name == name)?;
            Some(b.updates.get(b.current? as usize)?.count)
        };
        for (name, decl) in &self.schema.blocks {
            let (Some(target), Some(count)) = (&decl.aligned_with, count_of(name)) else {
                continue;
            };
            match count_of(target) {
                None => refuse!(
                    AlignedRowCount,
                    format!("blocks.{name}"),
                    "aligned block is present while its target `{target}` is absent"
                ),
                Some(t) if t != count => refuse!(
                    AlignedRowCount,
                    format!("blocks.{name}"),
                    "{count} rows, its target `{target}` has {t}"
                ),
                Some(_) => {}
            }
        }
        let mut in_order: Vec<&BlockState> = self
            .blocks
            .iter()
            .filter(|b| b.current.is_some() && !b.references.is_empty())
            .collect();
        if in_order.is_empty() {
            return Ok(());
        }
        in_order.sort_by(|a, b| a.name.cmp(&b.name));
        for b in in_order {
            let Some(u) = b.current else { continue };
            let update = &b.updates[u as usize];
            if update.count == 0 {
                continue;
            }
            for (i, target) in &b.references {
                let (col, series) = &b.columns[*i];
                let cat = || format!("blocks.{}.columns.{col}", b.name);
                let rows = if let Some(abs) = target.strip_prefix('/') {
                    let Some(("system", tb)) = abs.split_once('/') else {
                        refuse!(
                            RowReferenceTarget,
                            cat(),
                            "absolute target `{target}` is not a system block"
                        );
                    };
                    self.system.get(tb).map(|b| b.count)
                } else {
                    count_of(target).or_else(|| self.system.get(target.as_str()).map(|b| b.count))
                };
                let Some(rows) = rows else {
                    refuse!(
                        RowReferenceTarget,
                        cat(),
                        "references block `{target}`, which is not in the frame"
                    );
                };
                let ColumnData::U64(all) = &series.data else {
                    refuse!(
                        RowReferenceRange,
                        cat(),
                        "a row reference must be u64, not {}",
                        series.dtype()
                    );
                };
                let values = all.get(series.elements(update)).unwrap_or_default();
                let width = values.len() / update.count.max(1) as usize;
                let mask = series.mask(u);
                for (i, v) in values.iter().enumerate() {
                    let row = i.checked_div(width).unwrap_or(0);
                    let valid = mask.is_none_or(|m| m.get(row).copied().unwrap_or(true));
                    if valid && *v >= rows {
                        refuse!(
                            RowReferenceRange,
                            format!("{}.values[{i}]", cat()),
                            "row {v} out of range: `{target}` has {rows} rows"
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// The arrays, or the first rule broken (step rules before resolution
    /// rules), located in the trajectory.
    pub(super) fn finish(self) -> std::result::Result<TrajectoryArrays, Error> {
        if let Some((_, e)) = self.step_fault {
            return Err(e);
        }
        if let Some((_, e)) = self.resolution_fault {
            return Err(e);
        }
        let blocks = self
            .blocks
            .into_iter()
            .map(|b| {
                (
                    b.name,
                    BlockSeries {
                        updates: b.updates,
                        heads: b.heads,
                        frame_updates: b.frame_updates,
                        columns: b.columns.into_iter().collect(),
                    },
                )
            })
            .collect();
        Ok(TrajectoryArrays {
            steps: self.steps,
            times: self.times,
            meta: self
                .meta
                .into_iter()
                .map(|(k, _, v)| (k.to_string(), v))
                .collect(),
            blocks,
            cells: self.cells,
            frame_cells: self.frame_cells,
        })
    }
}

/// The first of `prepare_update`'s rules for one block of a full update:
/// the block is declared, its count fits a declared structural shape, and
/// a header restating the declaration's shape or targets states the
/// declared ones. Paths relative to the block. Shared by the resolver and
/// the reader of single frames (`Reader::frame`).
pub(super) fn block_declaration<'s>(
    schema: &'s SequenceSchema,
    block: &LayoutBlock,
) -> Result<&'s BlockDecl> {
    let decl = validate::trajectory_block_decl(schema, &block.name, block.count)?;
    // A header's own shape multiplies to its count (none on an update that
    // empties the block), as the writer's `prepare_update` checks first.
    validate::check_shape_product(block.head.structural_shape.as_deref(), block.count, "")?;
    // A header restating the declaration's shape or targets states the
    // declared ones; the declared shape's product is the count (above).
    validate::check_declared_head(
        &block.head.targets,
        block.head.structural_shape.as_deref(),
        decl,
    )?;
    Ok(decl)
}

/// The rest of `prepare_update`'s rules for one block of a full update
/// (after the column set's stability in the record, which needs the
/// record's earlier updates): no column declares a precision, a mask only
/// on a nullable column, and the block agrees with the system's block of
/// the same name. Paths relative to the block; shared as
/// [`block_declaration`] is.
pub(super) fn block_columns_rules(
    decl: &BlockDecl,
    block: &LayoutBlock,
    payload: &[u8],
    system: &BTreeMap<String, Block>,
) -> Result<()> {
    for column in &block.columns {
        let cat = || format!("columns.{}", column.name);
        if column.precision.is_some() {
            return Err(Error::refused(
                Clause::PrecisionPlacement,
                cat(),
                "a trajectory column takes its precision from sequence_schema",
            ));
        }
        // Dtype and trailing shape were checked against the declaration
        // by the walk; the decoder checked the shape against the count,
        // the buffer against the shape and the mask's length. A mask
        // with every row valid is no mask.
        let nullable = decl
            .columns
            .get(column.name.as_str())
            .is_some_and(|cd| cd.nullable);
        let mask = column.mask.and_then(|(o, len)| payload.get(o..o + len));
        if !nullable && mask.is_some_and(|m| m.contains(&0)) {
            return Err(Error::refused(
                Clause::RecordOutsideDeclaration,
                cat(),
                "a mask on a column not declared nullable",
            ));
        }
    }
    let names = block.columns.iter().map(|c| c.name.as_str());
    validate::check_against_system_block(&block.name, block.count, names, system)
}

impl BlockState {
    /// The state of a block first met after `frames_before` frames, with
    /// room for `reserve` frames.
    fn new(name: &str, frames_before: usize, reserve: usize) -> BlockState {
        let mut frame_updates = Vec::with_capacity(reserve.max(frames_before));
        frame_updates.resize(frames_before, None);
        BlockState {
            name: name.to_string(),
            updates: Vec::with_capacity(reserve),
            heads: Vec::new(),
            frame_updates,
            columns: Vec::new(),
            column_set: Vec::new(),
            current: None,
            references: Vec::new(),
        }
    }

    /// The column names of the record's first update of the block.
    fn column_names(&self) -> impl Iterator<Item = &str> {
        let built = self.columns.iter().map(|(name, _)| name.as_str());
        let kept = self.column_set.iter().map(String::as_str);
        built.chain(kept)
    }

    /// Appends the values of an update of `block` (its columns as this
    /// state holds them) read from `payload`, as the next update; returns
    /// its number.
    fn append_update(&mut self, block: &LayoutBlock, payload: &[u8]) -> Result<u32> {
        let u = self.updates.len() as u32;
        let first_row = self.rows();
        for (column, (_, series)) in block.columns.iter().zip(self.columns.iter_mut()) {
            append_values(column, block.count, payload, series, u)
                .map_err(|e| e.within(&format!("blocks.{}.columns.{}", block.name, column.name)))?;
        }
        self.updates.push(BlockUpdate {
            count: block.count,
            first_row,
        });
        self.current = Some(u);
        Ok(u)
    }

    /// Rows of every update so far.
    fn rows(&self) -> u64 {
        self.updates
            .last()
            .map_or(0, |u| u.first_row.saturating_add(u.count))
    }
}

fn product(shape: &[u64]) -> u64 {
    shape.iter().fold(1u64, |a, &b| a.saturating_mul(b))
}

/// Appends `column`'s values for an update of `count` rows (update `u` of
/// its block) to `series`: a buffer read from `payload` (bool bytes
/// checked), or the header's strings; its mask, unless every row is valid.
#[inline(always)]
fn append_values(
    column: &LayoutColumn,
    count: u64,
    payload: &[u8],
    series: &mut ColumnSeries,
    u: u32,
) -> Result<()> {
    let bounds = || {
        Error::refused(
            Clause::FrameBufferBounds,
            "",
            "a buffer runs past the value",
        )
    };
    match &column.data {
        LayoutData::Buffer(offset, len) => {
            let bytes = payload.get(*offset..offset + len).ok_or_else(bounds)?;
            extend_buffer(&mut series.data, bytes)?;
        }
        LayoutData::Strings(values) => {
            if let ColumnData::String(out) = &mut series.data {
                out.extend_from_slice(values);
            }
        }
    }
    if let Some((offset, len)) = column.mask {
        let bytes = payload.get(offset..offset + len).ok_or_else(bounds)?;
        if bytes.len() as u64 != count {
            return Err(Error::refused(
                Clause::ValidityLength,
                "",
                format!("a mask of {} bytes for {count} rows", bytes.len()),
            ));
        }
        if bytes.contains(&0) {
            let mut mask = Vec::with_capacity(bytes.len());
            for &b in bytes {
                match b {
                    0 | 1 => mask.push(b == 1),
                    _ => {
                        return Err(Error::refused(
                            Clause::TypedValue,
                            "",
                            format!("a mask holds the byte {b}, not 0 / 1"),
                        ))
                    }
                }
            }
            series.masks.push((u, mask));
        } else if let Some(b) = bytes.iter().find(|&&b| b > 1) {
            return Err(Error::refused(
                Clause::TypedValue,
                "",
                format!("a mask holds the byte {b}, not 0 / 1"),
            ));
        }
    }
    Ok(())
}

fn reserve_data(data: &mut ColumnData, n: usize) {
    crate::model::with_vec!(data, v => v.reserve(n));
}
