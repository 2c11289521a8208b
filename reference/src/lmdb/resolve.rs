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

use super::reader::{update_step, Walked};
use crate::arrays::{
    BlockHead, BlockSeries, BlockUpdate, ColumnSeries, StepSeries, TrajectoryArrays,
};
use crate::clause::Clause;
use crate::dtype::DType;
use crate::error::{refuse, Error, Result};
use crate::frame_bytes::{decode, extend_buffer, BlockRef, ColumnBytes};
use crate::model::*;
use crate::precision::round_column;
use crate::typed_json::MetaTag;
use crate::validate::ENDPOINT_COLUMNS;
use std::collections::BTreeMap;

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
    previous_step: Option<i64>,
    has_time: Option<bool>,
    /// Where each buffer of the last full update is in its payload; `None`
    /// when an update cannot be repeated from its payload alone.
    plan: Option<Vec<PlannedBlock>>,
    /// The payload length the plan's buffers need.
    plan_needs: usize,
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
    /// Declared precision of each column, in `columns` order.
    precisions: Vec<Option<f64>>,
    /// Row-reference columns of the update in effect: column index, target.
    references: Vec<(usize, String)>,
}

/// A block of the last full update: its row count and where its buffers are.
struct PlannedBlock {
    block: usize,
    count: u64,
    /// Whether a column is a string column.
    strings: bool,
    /// For each column in order, where its values are.
    buffers: Vec<Planned>,
}

/// Where a column of a repeated update finds its values.
#[derive(Clone, Copy)]
enum Planned {
    /// A numeric buffer: offset and length in the payload.
    Buffer(usize, usize),
    /// A string column: its values are in the header, so the previous
    /// update's again.
    Strings,
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
                .map(|(key, decl)| (key.as_str(), decl.tag, StepSeries::new(decl.tag)))
                .collect(),
            blocks: Vec::new(),
            cells: Vec::new(),
            frame_cells: Vec::with_capacity(reserve),
            cell_now: None,
            previous_step: None,
            has_time: None,
            plan: None,
            plan_needs: 0,
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
        let step = self
            .meta_and_step(&u.info)
            .map_err(|e| e.within(&format!("frames[{k}]")))?;
        if self.step_fault.is_none() {
            if let Err(e) = self.step_rules(u, step) {
                self.step_fault = Some((k, e));
            }
        }
        if !self.building() {
            return Ok(());
        }
        let located = |e: Error| e.within(&format!("frames[{k}]"));
        let updated = match u.blocks.take() {
            Some(blocks) => self.append_full(blocks, u.payload).map_err(located)?,
            None => match self.append_same(u.payload) {
                Some(updated) => updated,
                None => {
                    // Not expected (the payload has the length the plan was
                    // made for); decoding in full is always right.
                    let frame = decode(u.value).map_err(located)?;
                    let payload_start = u.value.len() - u.payload.len();
                    let payload = &u.value[payload_start..];
                    self.append_full(frame.blocks, payload).map_err(located)?
                }
            },
        };
        self.steps.push(step);
        if let (Some(times), Some(t)) = (&mut self.times, u.info.time) {
            times.push(t);
        }
        // `meta_and_step` checked that the update carries exactly the
        // declared keys: both hold the same keys in the same (sorted) order.
        for ((key, _, series), value) in self.meta.iter_mut().zip(u.info.meta.values()) {
            series.push(value).map_err(|e| {
                Error::refused(Clause::TypedValue, format!("frames[{k}].meta.{key}"), e)
            })?;
        }
        if let Some(cell) = u.info.cell {
            self.cell_now = Some(self.cells.len() as u32);
            self.cells.push(cell);
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
    /// declared keys, each value of its tag's usual JSON type); paths
    /// relative to the frame.
    fn meta_and_step(&self, info: &crate::frame_bytes::FrameInfo) -> Result<i64> {
        let usual = info.meta.len() == self.meta.len()
            && info
                .meta
                .iter()
                .zip(&self.meta)
                .all(|((given, value), (key, tag, _))| {
                    given == key
                        && match tag {
                            MetaTag::F64 => value.is_number(),
                            _ => false,
                        }
                });
        match info.step {
            Some(step) if usual => Ok(step),
            _ => update_step(info, self.schema),
        }
    }

    /// The rules of one update that `prepare_step` checks, in its order;
    /// paths relative to the trajectory.
    fn step_rules(&mut self, u: &Walked<'_>, step: i64) -> Result<()> {
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
        // Per-step meta and the cell were checked by the walk (a reader's
        // file must carry every key; the decoder normalizes the cell).
        // An update with the same blocks text as the last full one has the
        // same outcome: only full updates are checked again.
        if let Some(blocks) = &u.blocks {
            for (name, block) in blocks {
                self.block_rules(name, block)
                    .map_err(|e| located(e.within(&format!("blocks.{name}"))))?;
            }
        }
        Ok(())
    }

    /// `prepare_update`'s rules for one block of a full update (paths
    /// relative to the block). Also records the record's first column set.
    fn block_rules(&mut self, name: &str, block: &BlockRef<'_>) -> Result<()> {
        let Some(decl) = self.schema.blocks.get(name) else {
            refuse!(
                RecordOutsideDeclaration,
                "",
                "block `{name}` is not declared in sequence_schema"
            );
        };
        if let Some(shape) = &decl.structural_shape {
            let product = shape.iter().try_fold(1u64, |a, &b| a.checked_mul(b));
            if block.count != 0 && product != Some(block.count) {
                refuse!(
                    StructuralShapeFixed,
                    "",
                    "count {} differs from the declared structural_shape {shape:?}",
                    block.count
                );
            }
        }
        if let Some(shape) = &block.structural_shape {
            let product = shape.iter().try_fold(1u64, |a, &b| a.checked_mul(b));
            if product != Some(block.count) {
                refuse!(
                    StructuralShapeProduct,
                    "",
                    "structural_shape {shape:?} does not multiply to count {}",
                    block.count
                );
            }
        }
        match self.blocks.iter().find(|b| b.name == name) {
            Some(state)
                if state.column_set.len() != block.columns.len()
                    || !state
                        .column_set
                        .iter()
                        .zip(block.columns.keys())
                        .all(|(a, b)| a == b) =>
            {
                let names: Vec<&String> = block.columns.keys().collect();
                refuse!(
                    BlockColumnSetStable,
                    "",
                    "columns {names:?} differ from this record's earlier update {:?}",
                    state.column_set
                );
            }
            Some(_) => {}
            None => self.blocks.push(BlockState {
                name: name.to_string(),
                updates: Vec::new(),
                heads: Vec::new(),
                frame_updates: vec![None; self.steps.len()],
                columns: Vec::new(),
                column_set: block.columns.keys().cloned().collect(),
                current: None,
                precisions: Vec::new(),
                references: Vec::new(),
            }),
        }
        for (col, column) in &block.columns {
            let cat = || format!("columns.{col}");
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
            let nullable = decl.columns.get(col.as_str()).is_some_and(|cd| cd.nullable);
            if !nullable && column.validity.is_some_and(|m| m.contains(&0)) {
                return Err(Error::refused(
                    Clause::RecordOutsideDeclaration,
                    cat(),
                    "a mask on a column not declared nullable",
                ));
            }
        }
        if let Some(sys) = self.system.get(name) {
            if block.count != sys.count {
                refuse!(
                    SystemTrajectoryRowCount,
                    "",
                    "{} rows; the system block `{name}` has {}",
                    block.count,
                    sys.count
                );
            }
            if let Some(col) = block.columns.keys().find(|c| sys.columns.contains_key(*c)) {
                refuse!(
                    SystemTrajectoryColumnDisjoint,
                    format!("columns.{col}"),
                    "column `{col}` is in both the system and the trajectory block"
                );
            }
        }
        Ok(())
    }

    /// Appends a full update's blocks and makes the plan for the updates
    /// that repeat its blocks text. Returns whether it updated any block.
    fn append_full<'t>(
        &mut self,
        blocks: BTreeMap<String, BlockRef<'t>>,
        payload: &'t [u8],
    ) -> Result<bool> {
        let schema = self.schema;
        let frames_claimed = self.frames_claimed as u64;
        let mut plan = Some(Vec::with_capacity(blocks.len()));
        let mut plan_needs = 0usize;
        let updated = !blocks.is_empty();
        for (name, mut block) in blocks {
            let bat = |col: &str| format!("blocks.{name}.columns.{col}");
            // `block_rules` made the state of every block it passed.
            let Some(b) = self.blocks.iter().position(|s| s.name == name) else {
                refuse!(
                    RecordOutsideDeclaration,
                    format!("blocks.{name}"),
                    "block `{name}` is not declared in sequence_schema"
                );
            };
            let state = &mut self.blocks[b];
            if state.columns.is_empty() {
                let decl = schema.blocks.get(&name);
                for (col, column) in &block.columns {
                    let trailing = column.shape.get(1..).unwrap_or_default();
                    let mut series = ColumnSeries::new(column.dtype, trailing.to_vec());
                    let elements = block
                        .count
                        .saturating_mul(product(trailing))
                        .saturating_mul(frames_claimed);
                    reserve_data(
                        &mut series.data,
                        elements.min(RESERVE_ELEMENTS as u64) as usize,
                    );
                    state.columns.push((col.clone(), series));
                    state.precisions.push(
                        decl.and_then(|d| d.columns.get(col.as_str()))
                            .and_then(|cd| cd.precision),
                    );
                }
            }
            let u = state.updates.len() as u32;
            let first_row = state.rows();
            let mut buffers = Vec::with_capacity(block.columns.len());
            state.references.clear();
            for (i, ((col, column), (kept, series))) in block
                .columns
                .iter_mut()
                .zip(state.columns.iter_mut())
                .enumerate()
            {
                if col != kept {
                    // Not expected: `block_rules` compared the column sets.
                    refuse!(
                        BlockColumnSetStable,
                        bat(col),
                        "column `{col}` is not in this record's earlier update"
                    );
                }
                // `decode_update` never repeats an update whose payload it
                // reads (masks, bool buffers): neither can the plan.
                buffers.push(match column.data {
                    ColumnBytes::Buffer(bytes) if column.dtype != DType::Bool => (bytes.as_ptr()
                        as usize)
                        .checked_sub(payload.as_ptr() as usize)
                        .filter(|&o| o.saturating_add(bytes.len()) <= payload.len())
                        .map(|o| Planned::Buffer(o, bytes.len())),
                    ColumnBytes::Strings(_) => Some(Planned::Strings),
                    ColumnBytes::Buffer(_) => None,
                });
                if column.validity.is_some() {
                    plan = None;
                }
                let from = series.data.len();
                column
                    .append_to(&mut series.data)
                    .map_err(|e| e.within(&bat(col)))?;
                if let Some(mask) = column.mask().map_err(|e| e.within(&bat(col)))? {
                    series.masks.push((u, mask));
                }
                round_appended(series, from, state.precisions[i]);
                let target = match block.targets.get(col) {
                    Some(t) => Some(t.clone()),
                    None if ENDPOINT_COLUMNS.contains(&col.as_str()) => Some("atoms".to_string()),
                    None => None,
                };
                if let Some(target) = target {
                    state.references.push((i, target));
                }
            }
            let head = BlockHead {
                structural_shape: block.structural_shape,
                targets: block.targets,
                attributes: block.attributes,
            };
            if state.heads.last().is_none_or(|(_, last)| *last != head) {
                state.heads.push((u, head));
            }
            match (&mut plan, buffers.into_iter().collect::<Option<Vec<_>>>()) {
                (Some(plan), Some(buffers)) => {
                    for buffer in &buffers {
                        if let Planned::Buffer(offset, len) = *buffer {
                            plan_needs = plan_needs.max(offset + len);
                        }
                    }
                    plan.push(PlannedBlock {
                        block: b,
                        count: block.count,
                        strings: buffers.iter().any(|b| matches!(b, Planned::Strings)),
                        buffers,
                    })
                }
                _ => plan = None,
            }
            state.updates.push(BlockUpdate {
                count: block.count,
                first_row,
            });
            state.current = Some(u);
        }
        self.plan = plan;
        self.plan_needs = plan_needs;
        Ok(updated)
    }

    /// Appends an update that repeats the last full update's blocks text,
    /// from its payload, and returns whether it updated any block. `None`
    /// when the plan does not fit it (then nothing was appended).
    fn append_same(&mut self, payload: &[u8]) -> Option<bool> {
        let plan = self.plan.as_ref()?;
        // Everything is checked before anything is appended: the buffers
        // fit (`plan_needs`), string columns have a last update to repeat.
        if payload.len() < self.plan_needs {
            return None;
        }
        for p in plan {
            let state = self.blocks.get(p.block)?;
            if p.buffers.len() != state.columns.len() {
                return None;
            }
            if p.strings {
                for (buffer, (_, series)) in p.buffers.iter().zip(&state.columns) {
                    if let Planned::Strings = buffer {
                        last_strings(series, state.updates.last()?)?;
                    }
                }
            }
        }
        for p in plan {
            let state = &mut self.blocks[p.block];
            let u = state.updates.len() as u32;
            let first_row = state.rows();
            let last = state.updates.last().copied().unwrap_or_default();
            for (i, (buffer, (_, series))) in p.buffers.iter().zip(&mut state.columns).enumerate() {
                let from = series.data.len();
                match *buffer {
                    Planned::Buffer(offset, len) => {
                        // Inside `plan_needs`; numeric, not bool (see
                        // `append_full`): cannot fail.
                        extend_buffer(&mut series.data, &payload[offset..offset + len]).ok()?;
                    }
                    Planned::Strings => {
                        // The same header text: the last update's values again.
                        let range = last_strings(series, &last)?;
                        if let ColumnData::String(v) = &mut series.data {
                            v.extend_from_within(range);
                        }
                    }
                }
                round_appended(series, from, state.precisions[i]);
            }
            // The same header text: the same head, which holds on.
            state.updates.push(BlockUpdate {
                count: p.count,
                first_row,
            });
            state.current = Some(u);
        }
        Some(!plan.is_empty())
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

impl BlockState {
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

/// Where the string values of `last` (the block's last update) are in a
/// string column's values.
fn last_strings(series: &ColumnSeries, last: &BlockUpdate) -> Option<std::ops::Range<usize>> {
    let range = series.elements(last);
    match &series.data {
        ColumnData::String(v) if range.end <= v.len() && range.start <= range.end => Some(range),
        _ => None,
    }
}

/// Rounds the values appended since `from` to a declared precision (what
/// `prepare_record` does to what it reads; a no-op on a conforming file).
fn round_appended(series: &mut ColumnSeries, from: usize, precision: Option<f64>) {
    if let (Some(p), ColumnData::F64(v)) = (precision, &mut series.data) {
        round_column(&mut v[from..], p);
    }
}

fn reserve_data(data: &mut ColumnData, n: usize) {
    crate::model::with_vec!(data, v => v.reserve(n));
}
