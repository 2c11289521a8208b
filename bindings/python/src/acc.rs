//! Accumulators: trajectories, systems and cells gathered frame by frame
//! (or record by record) into flat per-column buffers, then handed to
//! Python as NumPy arrays in one go. `NativeReader`'s records and batches
//! and the frames by ordinal (`frames.rs`) fill them.

use crate::convert::{column_to_numpy, document_to_py, json_to_py, objects_to_numpy, vec_to_numpy};
use molrec::arrays::{StepSeries, TrajectoryArrays};
use molrec::lmdb::{FrameBlock, FrameColumn};
use molrec::model::{Cell, ColumnData, Frame};
use molrec::typed_json::MetaTag;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Default values of `n` elements of `data`'s dtype appended.
pub(crate) fn pad_data(data: &mut ColumnData, n: usize) {
    match data {
        ColumnData::F64(v) => v.resize(v.len() + n, 0.0),
        ColumnData::I8(v) => v.resize(v.len() + n, 0),
        ColumnData::I16(v) => v.resize(v.len() + n, 0),
        ColumnData::I32(v) => v.resize(v.len() + n, 0),
        ColumnData::I64(v) => v.resize(v.len() + n, 0),
        ColumnData::U8(v) => v.resize(v.len() + n, 0),
        ColumnData::U16(v) => v.resize(v.len() + n, 0),
        ColumnData::U32(v) => v.resize(v.len() + n, 0),
        ColumnData::U64(v) => v.resize(v.len() + n, 0),
        ColumnData::Bool(v) => v.resize(v.len() + n, false),
        ColumnData::String(v) => v.resize(v.len() + n, String::new()),
        ColumnData::C64(v) => v.resize(v.len() + n, [0.0; 2]),
        ColumnData::C128(v) => v.resize(v.len() + n, [0.0; 2]),
    }
}

/// Capacity for `n` more elements.
pub(crate) fn reserve_data(data: &mut ColumnData, n: usize) {
    match data {
        ColumnData::F64(v) => v.reserve_exact(n),
        ColumnData::I8(v) => v.reserve_exact(n),
        ColumnData::I16(v) => v.reserve_exact(n),
        ColumnData::I32(v) => v.reserve_exact(n),
        ColumnData::I64(v) => v.reserve_exact(n),
        ColumnData::U8(v) => v.reserve_exact(n),
        ColumnData::U16(v) => v.reserve_exact(n),
        ColumnData::U32(v) => v.reserve_exact(n),
        ColumnData::U64(v) => v.reserve_exact(n),
        ColumnData::Bool(v) => v.reserve_exact(n),
        ColumnData::String(v) => v.reserve_exact(n),
        ColumnData::C64(v) => v.reserve_exact(n),
        ColumnData::C128(v) => v.reserve_exact(n),
    }
}

/// Elements `range` of `src` appended to `dst` (same dtype; a different
/// one appends defaults, which the schema's one declaration rules out).
pub(crate) fn extend_data(dst: &mut ColumnData, src: &ColumnData, range: std::ops::Range<usize>) {
    let n = range.len();
    match (dst, src) {
        (ColumnData::F64(d), ColumnData::F64(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::I8(d), ColumnData::I8(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::I16(d), ColumnData::I16(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::I32(d), ColumnData::I32(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::I64(d), ColumnData::I64(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::U8(d), ColumnData::U8(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::U16(d), ColumnData::U16(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::U32(d), ColumnData::U32(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::U64(d), ColumnData::U64(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::Bool(d), ColumnData::Bool(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::String(d), ColumnData::String(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::C64(d), ColumnData::C64(s)) => d.extend_from_slice(&s[range]),
        (ColumnData::C128(d), ColumnData::C128(s)) => d.extend_from_slice(&s[range]),
        (d, _) => pad_data(d, n),
    }
}

/// One column's rows, concatenated.
pub(crate) struct ColAcc {
    trailing: Vec<u64>,
    width: usize,
    data: ColumnData,
    /// One bool per row, once some row is not valid.
    validity: Option<Vec<bool>>,
    rows: usize,
}

impl ColAcc {
    pub(crate) fn new(dtype: molrec::DType, trailing: &[u64], rows_before: usize) -> ColAcc {
        let width = trailing.iter().map(|&d| d as usize).product();
        let mut c = ColAcc {
            trailing: trailing.to_vec(),
            width,
            data: ColumnData::empty(dtype),
            validity: None,
            rows: 0,
        };
        c.pad(rows_before);
        c
    }

    /// `n` rows of defaults, not valid (a column the block's update lacks).
    pub(crate) fn pad(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        pad_data(&mut self.data, n * self.width);
        let rows = self.rows;
        self.validity
            .get_or_insert_with(|| vec![true; rows])
            .resize(rows + n, false);
        self.rows += n;
    }

    /// `n` rows of `data` from element `start`, with `mask` (None: valid).
    pub(crate) fn push(
        &mut self,
        data: &ColumnData,
        start: usize,
        n: usize,
        mask: Option<&[bool]>,
    ) {
        extend_data(&mut self.data, data, start..start + n * self.width);
        match (mask, &mut self.validity) {
            (Some(m), v) => {
                let rows = self.rows;
                v.get_or_insert_with(|| vec![true; rows])
                    .extend_from_slice(m);
            }
            (None, Some(v)) => v.resize(v.len() + n, true),
            (None, None) => {}
        }
        self.rows += n;
    }
}

impl ColAcc {
    /// A resolved frame's column appended, with its mask.
    pub(crate) fn push_frame(&mut self, column: &FrameColumn<'_>) -> molrec::Result<()> {
        let n = column.count() as usize;
        column.append_to(&mut self.data)?;
        match (column.mask()?, &mut self.validity) {
            (Some(m), v) => {
                let rows = self.rows;
                v.get_or_insert_with(|| vec![true; rows])
                    .extend_from_slice(&m);
            }
            (None, Some(v)) => v.resize(v.len() + n, true),
            (None, None) => {}
        }
        self.rows += n;
        Ok(())
    }
}

/// A block through the frames of one record or a batch.
#[derive(Default)]
pub(crate) struct BlockAcc {
    present: Vec<bool>,
    counts: Vec<i64>,
    rows: usize,
    columns: BTreeMap<String, ColAcc>,
    /// Every column met (string columns of systems too, which the caller
    /// gathers), with the entries (frames, or a batch's records) where the
    /// block is there without it, ascending: its padded rows there are
    /// not a mask of the block's own.
    lacks: BTreeMap<String, Vec<usize>>,
    /// Per column, the systems (of a batch's records) whose column has
    /// another dtype or row shape than the batch's (its first): padded
    /// there, as a lacking column is.
    differs: BTreeMap<String, Vec<usize>>,
    structural_shape: Option<Vec<u64>>,
    targets: BTreeMap<String, String>,
}

impl BlockAcc {
    pub(crate) fn with_frames(n: usize) -> BlockAcc {
        BlockAcc {
            present: vec![false; n],
            counts: vec![0; n],
            ..BlockAcc::default()
        }
    }

    /// Whether some frame (or record) has the block.
    pub(crate) fn any_present(&self) -> bool {
        self.present.contains(&true)
    }

    pub(crate) fn absent(&mut self, n: usize) {
        self.present.resize(self.present.len() + n, false);
        self.counts.resize(self.counts.len() + n, 0);
    }

    /// The columns met so far that an entry holding the block with the
    /// columns `names` lacks, after meeting `names` (a column met first
    /// is lacked by every earlier entry holding the block).
    fn lacking<'a>(&mut self, names: impl Iterator<Item = &'a str> + Clone) -> Vec<String> {
        for name in names.clone() {
            if !self.lacks.contains_key(name) {
                let before = (0..self.present.len()).filter(|&i| self.present[i]);
                self.lacks.insert(name.to_string(), before.collect());
            }
        }
        self.lacks
            .keys()
            .filter(|k| !names.clone().any(|n| n == k.as_str()))
            .cloned()
            .collect()
    }

    /// The next entry (not yet pushed) holds the block without `columns`.
    fn lacks_next(&mut self, columns: &[String]) {
        let e = self.present.len();
        for col in columns {
            if let Some(at) = self.lacks.get_mut(col) {
                at.push(e);
            }
        }
    }

    /// A system's block (its string columns left to the caller): rows
    /// appended, the block's other columns padded, and so the columns
    /// `differing` (of another dtype or row shape than the batch's).
    pub(crate) fn push_model_block(&mut self, block: &molrec::model::Block, differing: &[&str]) {
        let count = block.count as usize;
        let lacking = self.lacking(block.columns.keys().map(String::as_str));
        self.lacks_next(&lacking);
        for &col in differing {
            let at = self.differs.entry(col.to_string()).or_default();
            at.push(self.present.len());
        }
        self.present.push(true);
        self.counts.push(count as i64);
        for (col, column) in &block.columns {
            if matches!(column.data, ColumnData::String(_)) || differing.contains(&col.as_str()) {
                continue;
            }
            if !self.columns.contains_key(col) {
                let trailing = column.shape.get(1..).unwrap_or_default();
                let c = ColAcc::new(column.dtype(), trailing, self.rows);
                self.columns.insert(col.clone(), c);
            }
            if let Some(c) = self.columns.get_mut(col) {
                c.push(&column.data, 0, count, column.validity.as_deref());
            }
        }
        for c in self.columns.values_mut() {
            // A column this system's block lacks.
            if c.rows == self.rows {
                c.pad(count);
            }
        }
        self.rows += count;
    }

    /// One resolved frame's block (present or empty there), or `None`
    /// where the block is absent.
    pub(crate) fn push_frame(&mut self, block: Option<&FrameBlock<'_>>) -> molrec::Result<()> {
        let Some(block) = block else {
            self.absent(1);
            return Ok(());
        };
        if self.structural_shape.is_none() {
            self.structural_shape = block.structural_shape().map(<[u64]>::to_vec);
        }
        if self.targets.is_empty() {
            if let Some(targets) = block.targets() {
                self.targets = targets.clone();
            }
        }
        let count = block.count() as usize;
        let names: Vec<&str> = block.columns().map(|c| c.name()).collect();
        let lacking = self.lacking(names.iter().copied());
        self.lacks_next(&lacking);
        self.present.push(true);
        self.counts.push(count as i64);
        for column in block.columns() {
            let c = match self.columns.get_mut(column.name()) {
                Some(c) => c,
                None => self
                    .columns
                    .entry(column.name().to_string())
                    .or_insert(ColAcc::new(column.dtype(), column.trailing(), self.rows)),
            };
            c.push_frame(&column)?;
        }
        for c in self.columns.values_mut() {
            // A column this frame's block lacks (with no rows, padding
            // them is nothing either way).
            if c.rows == self.rows {
                c.pad(count);
            }
        }
        self.rows += count;
        Ok(())
    }

    /// Converts to Python: flat rows and offsets, or stacked
    /// `(frames, rows, ...)` when `stack` and every frame has the same rows.
    pub(crate) fn into_py<'py>(self, py: Python<'py>, stack: bool) -> PyResult<Bound<'py, PyDict>> {
        let n = self.present.len();
        let stacked = stack
            && n > 0
            && self.present.iter().all(|&p| p)
            && self.counts.iter().all(|&c| c == self.counts[0]);
        let d = PyDict::new(py);
        if !stacked {
            let mut offsets = Vec::with_capacity(n + 1);
            let mut sum = 0i64;
            offsets.push(0);
            for &c in &self.counts {
                sum += c;
                offsets.push(sum);
            }
            d.set_item("offsets", vec_to_numpy(py, offsets))?;
        }
        let lead: Vec<usize> = if stacked {
            vec![n, self.counts[0] as usize]
        } else {
            vec![self.rows]
        };
        let (columns, validity) = (PyDict::new(py), PyDict::new(py));
        for (name, c) in self.columns {
            let mut shape = lead.clone();
            shape.extend(c.trailing.iter().map(|&t| t as usize));
            columns.set_item(&name, column_to_numpy(py, c.data, &shape)?)?;
            if let Some(v) = c.validity.filter(|v| !v.iter().all(|&b| b)) {
                validity.set_item(&name, column_to_numpy(py, ColumnData::Bool(v), &lead)?)?;
            }
        }
        d.set_item("present", vec_to_numpy(py, self.present))?;
        d.set_item("count", vec_to_numpy(py, self.counts))?;
        d.set_item("columns", columns)?;
        d.set_item("validity", validity)?;
        d.set_item("lacks", entry_flags(py, self.lacks, n)?)?;
        d.set_item("differs", entry_flags(py, self.differs, n)?)?;
        d.set_item("structural_shape", self.structural_shape)?;
        d.set_item("targets", self.targets.into_pyobject(py)?)?;
        Ok(d)
    }
}

/// Per column, a bool per entry (of `n`), true at the entries listed; only
/// the columns with some.
fn entry_flags<'py>(
    py: Python<'py>,
    entries: BTreeMap<String, Vec<usize>>,
    n: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (name, at) in entries.into_iter().filter(|(_, at)| !at.is_empty()) {
        let mut flags = vec![false; n];
        for e in at {
            flags[e] = true;
        }
        out.set_item(&name, vec_to_numpy(py, flags))?;
    }
    Ok(out)
}

/// Cells through the frames (or through a batch's records).
#[derive(Default)]
pub(crate) struct CellAcc {
    present: Vec<bool>,
    vectors: Vec<f64>,
    origin: Vec<f64>,
    boundary: Vec<bool>,
    defined: Vec<bool>,
}

impl CellAcc {
    /// Whether some frame (or record) has a cell.
    pub(crate) fn any_present(&self) -> bool {
        self.present.contains(&true)
    }

    pub(crate) fn push(&mut self, cell: Option<&Cell>) {
        let c = cell.unwrap_or(&Cell::UNDEFINED);
        self.present.push(cell.is_some());
        self.vectors.extend_from_slice(&c.vectors);
        self.origin.extend_from_slice(&c.origin);
        self.boundary.extend_from_slice(&c.boundary);
        self.defined.push(c.defined);
    }

    pub(crate) fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let n = self.present.len();
        let d = PyDict::new(py);
        d.set_item("present", vec_to_numpy(py, self.present))?;
        d.set_item(
            "vectors",
            column_to_numpy(py, ColumnData::F64(self.vectors), &[n, 3, 3])?,
        )?;
        d.set_item(
            "origin",
            column_to_numpy(py, ColumnData::F64(self.origin), &[n, 3])?,
        )?;
        d.set_item(
            "boundary",
            column_to_numpy(py, ColumnData::Bool(self.boundary), &[n, 3])?,
        )?;
        d.set_item("defined", vec_to_numpy(py, self.defined))?;
        Ok(d)
    }
}

/// One per-step key through the frames.
pub(crate) enum MetaAcc {
    Typed {
        tag: MetaTag,
        width: usize,
        values: ColumnData,
    },
    Json(Vec<Value>),
}

impl MetaAcc {
    pub(crate) fn new(series: &StepSeries) -> MetaAcc {
        match series {
            StepSeries::Typed { tag, values } => MetaAcc::Typed {
                tag: *tag,
                width: tag.shape().1.unwrap_or(1),
                values: ColumnData::empty(values.dtype()),
            },
            StepSeries::Json(_) => MetaAcc::Json(Vec::new()),
        }
    }

    pub(crate) fn pad(&mut self, n: usize) {
        match self {
            MetaAcc::Typed { width, values, .. } => pad_data(values, n * *width),
            MetaAcc::Json(v) => v.resize(v.len() + n, Value::Null),
        }
    }

    pub(crate) fn push(&mut self, series: &StepSeries, n: usize) {
        match (self, series) {
            (MetaAcc::Typed { values, .. }, StepSeries::Typed { values: src, .. }) => {
                extend_data(values, src, 0..src.len())
            }
            (MetaAcc::Json(v), StepSeries::Json(src)) => v.extend_from_slice(src),
            (other, _) => other.pad(n),
        }
    }

    pub(crate) fn into_py<'py>(
        self,
        py: Python<'py>,
        frames: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        match self {
            MetaAcc::Typed { tag, width, values } => {
                let shape: Vec<usize> = if tag.shape().1.is_some() {
                    vec![frames, width]
                } else {
                    vec![frames]
                };
                column_to_numpy(py, values, &shape)
            }
            MetaAcc::Json(values) => {
                let list = PyList::empty(py);
                for v in &values {
                    list.append(json_to_py(py, v)?)?;
                }
                Ok(list.into_any())
            }
        }
    }
}

/// Trajectories resolved frame by frame into flat buffers: one record's,
/// or a batch's one after the other.
#[derive(Default)]
pub(crate) struct Acc {
    frames: usize,
    frame_offsets: Vec<i64>,
    steps: Vec<i64>,
    times: Option<Vec<f64>>,
    /// Per trajectory added (or record without one), whether it has
    /// times: a batch's `times` are NaN where it has none.
    timed: Vec<bool>,
    meta: BTreeMap<String, MetaAcc>,
    meta_tags: BTreeMap<String, &'static str>,
    blocks: BTreeMap<String, BlockAcc>,
    cell: Option<CellAcc>,
}

impl Acc {
    /// Sizes every buffer for `trajectories` (added next, in any order):
    /// the blocks and columns they have, created empty, with the capacity
    /// of all their rows.
    pub(crate) fn reserve_for<'t>(
        &mut self,
        trajectories: impl Iterator<Item = &'t TrajectoryArrays> + Clone,
    ) {
        let frames: usize = trajectories.clone().map(TrajectoryArrays::len).sum();
        self.steps.reserve(frames);
        self.frame_offsets.reserve(frames + 1);
        let mut rows: BTreeMap<&str, usize> = BTreeMap::new();
        for t in trajectories.clone() {
            for (name, series) in &t.blocks {
                let n: u64 = series
                    .frame_updates
                    .iter()
                    .flatten()
                    .filter_map(|&u| series.updates.get(u as usize))
                    .map(|u| u.count)
                    .sum();
                *rows.entry(name.as_str()).or_default() += n as usize;
            }
        }
        for t in trajectories {
            for (name, series) in &t.blocks {
                let acc = self.blocks.entry(name.clone()).or_default();
                if acc.present.capacity() == 0 {
                    acc.present.reserve(frames);
                    acc.counts.reserve(frames);
                }
                for (col, cs) in &series.columns {
                    if !acc.columns.contains_key(col) {
                        let mut c = ColAcc::new(cs.dtype(), &cs.trailing, 0);
                        reserve_data(&mut c.data, rows[name.as_str()] * c.width);
                        acc.columns.insert(col.clone(), c);
                    }
                }
            }
        }
    }

    /// A record without a trajectory (in a batch): no frames.
    pub(crate) fn add_empty(&mut self) {
        if self.frame_offsets.is_empty() {
            self.frame_offsets.push(0);
        }
        self.frame_offsets.push(self.frames as i64);
        self.timed.push(false);
    }

    pub(crate) fn add_trajectory(&mut self, t: &TrajectoryArrays) {
        if self.frame_offsets.is_empty() {
            self.frame_offsets.push(0);
        }
        let (base, n) = (self.frames, t.len());
        self.steps.extend_from_slice(&t.steps);
        self.timed.push(t.times.is_some());
        match (&t.times, &mut self.times) {
            (Some(src), Some(dst)) => dst.extend_from_slice(src),
            (Some(src), None) => {
                let mut v = vec![f64::NAN; base];
                v.extend_from_slice(src);
                self.times = Some(v);
            }
            (None, Some(dst)) => dst.resize(dst.len() + n, f64::NAN),
            (None, None) => {}
        }
        for (key, series) in &t.meta {
            if !self.meta.contains_key(key) {
                let mut m = MetaAcc::new(series);
                m.pad(base);
                self.meta.insert(key.clone(), m);
                let tag = match series {
                    StepSeries::Typed { tag, .. } => tag.name(),
                    StepSeries::Json(_) => MetaTag::Json.name(),
                };
                self.meta_tags.insert(key.clone(), tag);
            }
            if let Some(acc) = self.meta.get_mut(key) {
                acc.push(series, n);
            }
        }
        for (key, acc) in self.meta.iter_mut() {
            if !t.meta.contains_key(key) {
                acc.pad(n);
            }
        }
        for (name, series) in &t.blocks {
            if !self.blocks.contains_key(name) {
                self.blocks
                    .insert(name.clone(), BlockAcc::with_frames(base));
            }
            let acc = self.blocks.get_mut(name).expect("inserted above");
            if let Some(head) = series.head(0) {
                if acc.structural_shape.is_none() {
                    acc.structural_shape = head.structural_shape.clone();
                }
                if acc.targets.is_empty() {
                    acc.targets = head.targets.clone();
                }
            }
            for (col, cs) in &series.columns {
                if !acc.columns.contains_key(col) {
                    let c = ColAcc::new(cs.dtype(), &cs.trailing, acc.rows);
                    acc.columns.insert(col.clone(), c);
                }
            }
            // One column set per block in a record: the same at each frame.
            let lacking = acc.lacking(series.columns.keys().map(String::as_str));
            let BlockAcc {
                present,
                counts,
                rows,
                columns,
                lacks,
                ..
            } = acc;
            let mut lacking: Vec<&mut Vec<usize>> = lacks
                .iter_mut()
                .filter(|(col, _)| lacking.contains(col))
                .map(|(_, at)| at)
                .collect();
            // Each column with its series in this record (None: the
            // record's block lacks it), paired once, not per frame.
            let mut pairs: Vec<(&mut ColAcc, Option<&molrec::arrays::ColumnSeries>)> = columns
                .iter_mut()
                .map(|(col, c)| (c, series.columns.get(col)))
                .collect();
            for k in 0..n {
                let Some(u) = series.frame_updates.get(k).copied().flatten() else {
                    present.push(false);
                    counts.push(0);
                    continue;
                };
                let update = series.updates[u as usize];
                let count = update.count as usize;
                for at in lacking.iter_mut() {
                    at.push(present.len());
                }
                present.push(true);
                counts.push(count as i64);
                for (c, cs) in pairs.iter_mut() {
                    match cs {
                        Some(cs) => {
                            let start = cs.elements(&update).start;
                            c.push(&cs.data, start, count, cs.mask(u));
                        }
                        None => c.pad(count),
                    }
                }
                *rows += count;
            }
        }
        for (name, acc) in self.blocks.iter_mut() {
            if !t.blocks.contains_key(name) {
                acc.absent(n);
            }
        }
        if !t.cells.is_empty() || self.cell.is_some() {
            let cell = self.cell.get_or_insert_with(|| {
                let mut c = CellAcc::default();
                for _ in 0..base {
                    c.push(None);
                }
                c
            });
            for k in 0..n {
                cell.push(t.cell_at(k));
            }
        }
        self.frames += n;
        self.frame_offsets.push(self.frames as i64);
    }

    /// The trajectory as Python: a record's (`single`: blocks stacked
    /// where their rows are constant) or a batch's.
    pub(crate) fn into_py<'py>(
        self,
        py: Python<'py>,
        single: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("n_frames", self.frames)?;
        if !single {
            d.set_item("offsets", vec_to_numpy(py, self.frame_offsets))?;
            d.set_item("timed", vec_to_numpy(py, self.timed))?;
        }
        d.set_item("step", vec_to_numpy(py, self.steps))?;
        match self.times {
            Some(t) => d.set_item("time", vec_to_numpy(py, t))?,
            None => d.set_item("time", py.None())?,
        }
        let meta = PyDict::new(py);
        for (key, acc) in self.meta {
            meta.set_item(&key, acc.into_py(py, self.frames)?)?;
        }
        d.set_item("meta", meta)?;
        d.set_item("meta_types", self.meta_tags.into_pyobject(py)?)?;
        let blocks = PyDict::new(py);
        for (name, acc) in self.blocks {
            blocks.set_item(&name, acc.into_py(py, single)?)?;
        }
        d.set_item("blocks", blocks)?;
        match self.cell {
            Some(c) => d.set_item("cell", c.into_py(py)?)?,
            None => d.set_item("cell", py.None())?,
        }
        Ok(d)
    }
}

/// Systems (a batch's records', or the records of frames), concatenated
/// per block when handed to Python. They are kept shared until then: a
/// string column becomes Python objects straight from the system's
/// values, one object per distinct string (frames of one record would
/// otherwise copy its names once per frame).
#[derive(Default)]
pub(crate) struct SystemAcc {
    systems: Vec<Option<Arc<Frame>>>,
}

impl SystemAcc {
    pub(crate) fn add(&mut self, system: Option<Arc<Frame>>) {
        self.systems.push(system);
    }

    pub(crate) fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let systems = &self.systems;
        let d = PyDict::new(py);
        let present: Vec<bool> = systems.iter().map(Option::is_some).collect();
        d.set_item("present", vec_to_numpy(py, present))?;
        let (meta, types) = (PyList::empty(py), PyList::empty(py));
        let mut cell = CellAcc::default();
        for system in systems {
            let Some(system) = system else {
                meta.append(PyDict::new(py))?;
                types.append(PyDict::new(py))?;
                cell.push(None);
                continue;
            };
            meta.append(document_to_py(py, &system.meta)?)?;
            let td = PyDict::new(py);
            for (k, tag) in &system.meta_types {
                td.set_item(k, tag.name())?;
            }
            types.append(td)?;
            cell.push(system.cell.as_ref());
        }
        d.set_item("meta", meta)?;
        d.set_item("meta_types", types)?;
        let names: std::collections::BTreeSet<&str> = systems
            .iter()
            .flatten()
            .flat_map(|s| s.blocks.keys().map(String::as_str))
            .collect();
        let mut strings = Interned::default();
        let blocks = PyDict::new(py);
        for name in names {
            let mut acc = BlockAcc::default();
            let mut text: BTreeMap<&str, StringColumn> = BTreeMap::new();
            // Each column's dtype and row shape in the batch: its first
            // record's (systems are not declared: records may differ).
            let mut kinds: BTreeMap<&str, (molrec::DType, &[u64])> = BTreeMap::new();
            let headers = PyList::empty(py);
            for block in systems
                .iter()
                .map(|s| s.as_ref().and_then(|s| s.blocks.get(name)))
            {
                let Some(block) = block else {
                    acc.absent(1);
                    headers.append(py.None())?;
                    continue;
                };
                match block_header(py, block)? {
                    Some(header) => headers.append(header)?,
                    None => headers.append(py.None())?,
                }
                let count = block.count as usize;
                let mut differing = Vec::new();
                for (col, column) in &block.columns {
                    let kind = (column.dtype(), column.shape.get(1..).unwrap_or_default());
                    if *kinds.entry(col.as_str()).or_insert(kind) != kind {
                        differing.push(col.as_str());
                        continue;
                    }
                    if let ColumnData::String(values) = &column.data {
                        let trailing = column.shape.get(1..).unwrap_or_default();
                        let c = text
                            .entry(col)
                            .or_insert_with(|| StringColumn::new(py, trailing, acc.rows));
                        c.push(py, &mut strings, values, column.validity.as_deref(), count);
                    }
                }
                for c in text.values_mut() {
                    // A string column this system's block lacks.
                    if c.rows == acc.rows {
                        c.pad(py, count);
                    }
                }
                acc.push_model_block(block, &differing);
            }
            let out = acc.into_py(py, false)?;
            let (Some(columns), Some(validity)) =
                (out.get_item("columns")?, out.get_item("validity")?)
            else {
                unreachable!("BlockAcc::into_py sets both")
            };
            for (col, c) in text {
                c.into_py(py, &columns, &validity, col)?;
            }
            out.set_item("headers", headers)?;
            blocks.set_item(name, out)?;
        }
        d.set_item("blocks", blocks)?;
        if cell.any_present() {
            d.set_item("cell", cell.into_py(py)?)?;
        } else {
            d.set_item("cell", py.None())?;
        }
        Ok(d)
    }
}

/// What a system's block says besides its rows (a batch keeps one per
/// record): its columns' precisions, structural shape, targets and
/// attributes; `None` when it says none of these.
fn block_header<'py>(
    py: Python<'py>,
    block: &molrec::model::Block,
) -> PyResult<Option<Bound<'py, PyDict>>> {
    let plain = block.structural_shape.is_none()
        && block.targets.is_empty()
        && block.attributes.is_empty()
        && block.columns.values().all(|c| c.precision.is_none());
    if plain {
        return Ok(None);
    }
    let d = PyDict::new(py);
    let precision = PyDict::new(py);
    for (col, column) in &block.columns {
        if let Some(p) = column.precision {
            precision.set_item(col, p)?;
        }
    }
    d.set_item("precision", precision)?;
    d.set_item("structural_shape", block.structural_shape.clone())?;
    d.set_item("targets", block.targets.clone().into_pyobject(py)?)?;
    d.set_item("attributes", document_to_py(py, &block.attributes)?)?;
    Ok(Some(d))
}

/// One Python string per distinct value.
#[derive(Default)]
struct Interned<'a> {
    made: HashMap<&'a str, Py<PyAny>>,
}

impl<'a> Interned<'a> {
    fn get(&mut self, py: Python<'_>, s: &'a str) -> Py<PyAny> {
        self.made
            .entry(s)
            .or_insert_with(|| PyString::new(py, s).into_any().unbind())
            .clone_ref(py)
    }
}

/// A string column of systems, as Python objects.
struct StringColumn {
    trailing: Vec<u64>,
    values: Vec<Py<PyAny>>,
    validity: Option<Vec<bool>>,
    rows: usize,
}

impl StringColumn {
    /// A column first met after `rows_before` rows of its block (invalid
    /// empty strings there).
    fn new(py: Python<'_>, trailing: &[u64], rows_before: usize) -> StringColumn {
        let mut c = StringColumn {
            trailing: trailing.to_vec(),
            values: Vec::new(),
            validity: None,
            rows: 0,
        };
        c.pad(py, rows_before);
        c
    }

    fn width(&self) -> usize {
        self.trailing.iter().map(|&t| t as usize).product()
    }

    fn push<'a>(
        &mut self,
        py: Python<'_>,
        strings: &mut Interned<'a>,
        values: &'a [String],
        mask: Option<&[bool]>,
        count: usize,
    ) {
        for s in values {
            self.values.push(strings.get(py, s));
        }
        match (mask, &mut self.validity) {
            (Some(m), v) => {
                let rows = self.rows;
                v.get_or_insert_with(|| vec![true; rows])
                    .extend_from_slice(m)
            }
            (None, Some(v)) => v.resize(self.rows + count, true),
            (None, None) => {}
        }
        self.rows += count;
    }

    /// `n` rows of invalid empty strings (a system whose block lacks it).
    fn pad(&mut self, py: Python<'_>, n: usize) {
        if n == 0 {
            return;
        }
        let empty = PyString::new(py, "").into_any().unbind();
        for _ in 0..n * self.width() {
            self.values.push(empty.clone_ref(py));
        }
        let rows = self.rows;
        self.validity
            .get_or_insert_with(|| vec![true; rows])
            .resize(rows + n, false);
        self.rows += n;
    }

    fn into_py<'py>(
        self,
        py: Python<'py>,
        columns: &Bound<'py, PyAny>,
        validity: &Bound<'py, PyAny>,
        name: &str,
    ) -> PyResult<()> {
        let mut shape = vec![self.rows];
        shape.extend(self.trailing.iter().map(|&t| t as usize));
        columns.set_item(name, objects_to_numpy(py, self.values, &shape)?)?;
        if let Some(v) = self.validity.filter(|v| !v.iter().all(|&b| b)) {
            validity.set_item(name, vec_to_numpy(py, v))?;
        }
        Ok(())
    }
}
