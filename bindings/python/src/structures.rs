//! Structures (`mrec.Structures`): frames by ordinal gathered straight
//! into the arrays of one graph-ready batch, by a plan the Python side
//! makes from the ASE mapping (docs/import.md read backwards): per-atom
//! arrays concatenated (several columns side by side, `x, y, z` into
//! `(n, 3)`), per-structure values stacked, the cell as ASE holds it.
//! One read transaction, the GIL released; only the columns the plan
//! names are copied.

use crate::acc::pad_data;
use crate::convert::{column_to_numpy, json_to_py, vec_to_numpy};
use crate::errors::errors_class_call;
use molrec::arrays::StepSeries;
use molrec::lmdb::{FrameColumn, ResolvedFrame, Set, SetFrame};
use molrec::model::{ColumnData, Document};
use molrec::typed_json::{self, MetaTag};
use molrec::DType;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// What one output array is made of.
#[derive(Clone, Debug)]
pub(crate) enum Output {
    /// Per row of `block` (at each frame: the trajectory's block where it
    /// is present, else the system's): `columns` side by side, cast to
    /// `cast` (`None`: the column's own dtype, one column only); `fill`
    /// where a frame lacks a column or a row is masked. `row`: the shape of
    /// one row of the output (`None`: the first frame's). `required`: a
    /// frame without one of the columns is an error. Rows of a block other
    /// than `atoms` come with their count per structure (`<name>.count`).
    Rows {
        name: String,
        block: String,
        columns: Vec<String>,
        cast: Option<DType>,
        fill: f64,
        row: Option<Vec<u64>>,
        required: bool,
    },
    /// A per-step key: `(B,)` or `(B, width)` as f64 for a numeric tag
    /// (`numeric`), else the key's own values (a list for `json`).
    Step {
        name: String,
        key: String,
        numeric: bool,
    },
    /// A number of the structure's per-step `ase` document or of its
    /// record's meta (see `lookup`), cast to `cast` (i64 or f64), `fill`
    /// where it has none.
    Scalar {
        name: String,
        key: String,
        cast: DType,
        fill: f64,
    },
    /// `cell` `(B, 3, 3)` (lattice vectors as rows, as ASE holds them;
    /// zeros where there is no defined cell) and `pbc` `(B, 3)`.
    Cell,
}

impl Output {
    /// The plan's form from Python: `(kind, name, source, columns, dtype,
    /// fill, row, required)` (`row`: a rows output's row shape, or None).
    pub(crate) fn from_tuple(
        (kind, name, source, columns, dtype, fill, row, required): PlanEntry,
    ) -> PyResult<Output> {
        let cast = match dtype.as_str() {
            "native" => None,
            other => Some(DType::parse(other).ok_or_else(|| {
                pyo3::exceptions::PyValueError::new_err(format!("unknown dtype {other:?}"))
            })?),
        };
        Ok(match kind.as_str() {
            "rows" => Output::Rows {
                name,
                block: source,
                columns,
                cast,
                fill,
                row,
                required,
            },
            "step" => Output::Step {
                name,
                key: source,
                numeric: cast.is_some(),
            },
            "scalar" => Output::Scalar {
                name,
                key: source,
                cast: cast.unwrap_or(DType::F64),
                fill,
            },
            "cell" => Output::Cell,
            other => {
                return Err(pyo3::exceptions::PyValueError::new_err(format!(
                    "unknown plan entry kind {other:?}"
                )))
            }
        })
    }
}

/// One entry of the plan as Python passes it.
pub(crate) type PlanEntry = (
    String,
    String,
    String,
    Vec<String>,
    String,
    f64,
    Option<Vec<u64>>,
    bool,
);

/// A structure that lacks what the plan requires: `mrec.Missing`.
#[derive(Debug)]
pub(crate) struct Missing {
    pub(crate) what: String,
    pub(crate) j: u64,
    pub(crate) record: u64,
    pub(crate) position: u64,
}

impl Missing {
    pub(crate) fn into_py_err(self, py: Python<'_>, file: &str) -> PyErr {
        let message = format!(
            "{file}: frame {} (record {}, frame {} of it) has no {}",
            self.j, self.record, self.position, self.what
        );
        errors_class_call(
            py,
            "Missing",
            (message, self.what, self.j, self.record, self.position),
        )
    }
}

/// The values gathered for one output.
enum Gathered {
    Rows {
        data: ColumnData,
        width: usize,
        trailing: Vec<u64>,
        counts: Option<Vec<i64>>,
        /// Frames that lacked one of the columns (filled).
        lacking: usize,
    },
    Step(Option<StepSeries>, bool),
    Scalar(ColumnData),
    Cell {
        cell: Vec<f64>,
        pbc: Vec<bool>,
    },
}

/// A plan made once (`mrec.Structures` makes one per collection): the
/// outputs of every batch.
#[pyclass(frozen, module = "mrec._native")]
pub(crate) struct Plan {
    pub(crate) outputs: Arc<Vec<Output>>,
}

#[pymethods]
impl Plan {
    /// `entries`: `(kind, name, source, columns, dtype, fill, row,
    /// required)` each (see `Output`).
    #[new]
    fn new(entries: Vec<PlanEntry>) -> PyResult<Plan> {
        let outputs = entries
            .into_iter()
            .map(Output::from_tuple)
            .collect::<PyResult<Vec<_>>>()?;
        Ok(Plan {
            outputs: Arc::new(outputs),
        })
    }
}

/// The structures of frames `js`: each output's values, `natoms`, and
/// each frame's record and position.
pub(crate) struct StructuresAcc {
    plan: Arc<Vec<Output>>,
    gathered: Vec<Gathered>,
    natoms: Vec<i64>,
    ordinals: Vec<i64>,
    records: Vec<i64>,
    positions: Vec<i64>,
    /// Record metas read, by record (for `Scalar` outputs).
    metas: HashMap<u64, Document>,
    scratch: Vec<f64>,
}

/// Where a frame's column is: a trajectory update's bytes, or the
/// system's values.
enum Source<'a> {
    Frame(FrameColumn<'a>),
    System(&'a molrec::model::Column),
}

impl Source<'_> {
    fn dtype(&self) -> DType {
        match self {
            Source::Frame(c) => c.dtype(),
            Source::System(c) => c.dtype(),
        }
    }

    fn trailing(&self) -> &[u64] {
        match self {
            Source::Frame(c) => c.trailing(),
            Source::System(c) => c.shape.get(1..).unwrap_or_default(),
        }
    }

    fn mask(&self) -> molrec::Result<Option<Vec<bool>>> {
        match self {
            Source::Frame(c) => c.mask(),
            Source::System(c) => Ok(c.validity.clone()),
        }
    }

    /// The values appended to `out` (of the column's dtype).
    fn append(&self, out: &mut ColumnData) -> molrec::Result<()> {
        match self {
            Source::Frame(c) => c.append_to(out),
            Source::System(c) => {
                let n = c.data.len();
                crate::acc::extend_data(out, &c.data, 0..n);
                Ok(())
            }
        }
    }

    /// The values as f64, into `out` (cleared first): numbers converted,
    /// bools 0 / 1; `None` for strings and complex numbers.
    fn f64s(&self, out: &mut Vec<f64>) -> molrec::Result<Option<()>> {
        out.clear();
        if let Source::Frame(c) = self {
            if c.dtype() == DType::F64 {
                // Copied in one go (the bytes are the values' memory on
                // a little-endian machine), into `out`'s own buffer.
                let mut values = ColumnData::F64(std::mem::take(out));
                let appended = c.append_to(&mut values);
                if let ColumnData::F64(v) = values {
                    *out = v;
                }
                return appended.map(Some);
            }
        }
        if let Source::System(c) = self {
            return Ok(as_f64s(&c.data, out));
        }
        let mut data = ColumnData::empty(self.dtype());
        self.append(&mut data)?;
        Ok(as_f64s(&data, out))
    }
}

/// Numeric values as f64 (bools 0 / 1); `None` for strings and complex.
fn as_f64s(data: &ColumnData, out: &mut Vec<f64>) -> Option<()> {
    match data {
        ColumnData::F64(v) => out.extend_from_slice(v),
        ColumnData::I8(v) => out.extend(v.iter().map(|&x| f64::from(x))),
        ColumnData::I16(v) => out.extend(v.iter().map(|&x| f64::from(x))),
        ColumnData::I32(v) => out.extend(v.iter().map(|&x| f64::from(x))),
        ColumnData::I64(v) => out.extend(v.iter().map(|&x| x as f64)),
        ColumnData::U8(v) => out.extend(v.iter().map(|&x| f64::from(x))),
        ColumnData::U16(v) => out.extend(v.iter().map(|&x| f64::from(x))),
        ColumnData::U32(v) => out.extend(v.iter().map(|&x| f64::from(x))),
        ColumnData::U64(v) => out.extend(v.iter().map(|&x| x as f64)),
        ColumnData::Bool(v) => out.extend(v.iter().map(|&x| f64::from(u8::from(x)))),
        ColumnData::String(_) | ColumnData::C64(_) | ColumnData::C128(_) => return None,
    }
    Some(())
}

/// A number of a JSON value: a number, a bool (0 / 1), or typed JSON's
/// "NaN" / "Infinity" / "-Infinity" / big-integer strings.
fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        Value::Number(_) | Value::String(_) => typed_json::f64_from_json(value).ok(),
        _ => None,
    }
}

/// `key` of a structure, looked up in the frame's per-step meta (the key
/// itself, then the `ase` document a grouped import keeps per step: its
/// `key_value_pairs`, `data`, then top level), then in the record's meta
/// (top level, `key_value_pairs`, `data`): where the importer puts an
/// `Atoms`' `info` (docs/import.md).
fn lookup(frame_meta: &Document, record_meta: &Document, key: &str) -> Option<f64> {
    let within = |doc: &serde_json::Map<String, Value>| -> Option<f64> {
        if let Some(v) = doc.get(key).and_then(number) {
            return Some(v);
        }
        for part in ["key_value_pairs", "data"] {
            if let Some(v) = doc
                .get(part)
                .and_then(Value::as_object)
                .and_then(|o| o.get(key))
                .and_then(number)
            {
                return Some(v);
            }
        }
        None
    };
    if let Some(v) = frame_meta.get(key).and_then(number) {
        return Some(v);
    }
    if let Some(v) = frame_meta
        .get("ase")
        .and_then(Value::as_object)
        .and_then(within)
    {
        return Some(v);
    }
    within(record_meta)
}

impl StructuresAcc {
    /// Frames `js` (each in range) gathered by `plan`, in one read
    /// transaction.
    /// `tick` is called after every frame (the reader's map budget looked
    /// at within a long read).
    pub(crate) fn read(
        reader: &Set,
        js: &[u64],
        plan: Arc<Vec<Output>>,
        tick: &(dyn Fn() + Sync),
    ) -> Result<StructuresAcc, GatherError> {
        let n = js.len();
        let schema = reader.schema().map_err(GatherError::Read)?;
        let gathered = plan
            .iter()
            .map(|o| match o {
                Output::Rows { cast, row, .. } => Gathered::Rows {
                    data: ColumnData::empty(cast.unwrap_or(DType::F64)),
                    width: row
                        .as_ref()
                        .map_or(0, |r| r.iter().product::<u64>().max(1) as usize),
                    trailing: row.clone().unwrap_or_default(),
                    counts: (!is_atoms(o)).then(Vec::new),
                    lacking: 0,
                },
                Output::Step { key, numeric, .. } => Gathered::Step(
                    schema.meta.get(key).map(|d| StepSeries::new(d.tag)),
                    *numeric,
                ),
                Output::Scalar { cast, .. } => Gathered::Scalar(ColumnData::empty(*cast)),
                Output::Cell => Gathered::Cell {
                    cell: Vec::with_capacity(9 * n),
                    pbc: Vec::with_capacity(3 * n),
                },
            })
            .collect();
        let mut acc = StructuresAcc {
            plan,
            gathered,
            natoms: Vec::with_capacity(n),
            ordinals: Vec::with_capacity(n),
            records: Vec::with_capacity(n),
            positions: Vec::with_capacity(n),
            metas: HashMap::new(),
            scratch: Vec::new(),
        };
        let wants_record_meta = acc.plan.iter().any(|o| matches!(o, Output::Scalar { .. }));
        let txn = wants_record_meta.then(|| reader.txn());
        let mut i = 0usize;
        let mut missing = None;
        reader
            .frames(js, |frame| {
                if missing.is_some() {
                    return Ok(()); // the batch is refused below
                }
                if let Some(txn) = &txn {
                    if let std::collections::hash_map::Entry::Vacant(e) =
                        acc.metas.entry(frame.record)
                    {
                        e.insert(txn.record_meta(frame.record)?);
                    }
                }
                match acc.push(frame, js[i]) {
                    Ok(()) => {}
                    Err(GatherError::Read(e)) => return Err(e),
                    Err(GatherError::Missing(m)) => missing = Some(m),
                }
                i += 1;
                tick();
                Ok(())
            })
            .map_err(GatherError::Read)?;
        match missing {
            Some(m) => Err(GatherError::Missing(m)),
            None => Ok(acc),
        }
    }

    fn push(&mut self, located: &SetFrame<'_, '_>, j: u64) -> Result<(), GatherError> {
        let frame: &ResolvedFrame<'_> = located.frame;
        // The `atoms` block is looked up once for the outputs that read it.
        let atoms = Place::of(frame, "atoms");
        let natoms = atoms.rows();
        self.natoms.push(natoms as i64);
        self.ordinals.push(j as i64);
        self.records.push(located.record as i64);
        self.positions.push(frame.position as i64);
        let record_meta = self.metas.get(&located.record);
        for (output, gathered) in self.plan.iter().zip(&mut self.gathered) {
            match (output, gathered) {
                (
                    Output::Rows {
                        block,
                        columns,
                        cast,
                        fill,
                        required,
                        ..
                    },
                    Gathered::Rows {
                        data,
                        width,
                        trailing,
                        counts,
                        lacking,
                    },
                ) => {
                    let other;
                    let at = if block == "atoms" {
                        &atoms
                    } else {
                        other = Place::of(frame, block);
                        &other
                    };
                    let n = at.rows() as usize;
                    if let Some(counts) = counts {
                        counts.push(n as i64);
                    }
                    let missing = columns.iter().find(|c| at.column(c).is_none());
                    if missing.is_some() {
                        *lacking += 1;
                    }
                    if *required {
                        if let Some(missing) = missing {
                            return Err(GatherError::Missing(Missing {
                                what: format!(
                                    "column `{missing}` of block `{block}` (needed: {})",
                                    columns.join(", ")
                                ),
                                j,
                                record: located.record,
                                position: frame.position,
                            }));
                        }
                    }
                    let rows = Rows {
                        n,
                        cast: *cast,
                        fill: *fill,
                    };
                    rows.gather(at, columns, data, width, trailing, &mut self.scratch)
                        .map_err(|e| {
                            GatherError::Read(e.within(&format!("frames[{j}].blocks.{block}")))
                        })?;
                }
                (Output::Step { key, .. }, Gathered::Step(Some(series), _)) => {
                    let value = frame.meta.get(key.as_str()).unwrap_or(&Value::Null);
                    series.push(value).map_err(|e| {
                        GatherError::Read(molrec::Error::refused(
                            molrec::Clause::TypedValue,
                            format!("frames[{j}].meta.{key}"),
                            e,
                        ))
                    })?;
                }
                (Output::Step { .. }, Gathered::Step(None, _)) => {}
                (Output::Scalar { key, fill, .. }, Gathered::Scalar(data)) => {
                    let empty = Document::new();
                    let v = lookup(&frame.meta, record_meta.unwrap_or(&empty), key);
                    let v = v.unwrap_or(*fill);
                    match data {
                        ColumnData::I64(out) => out.push(if v.is_finite() { v as i64 } else { 0 }),
                        ColumnData::F64(out) => out.push(v),
                        _ => {}
                    }
                }
                (Output::Cell, Gathered::Cell { cell, pbc }) => {
                    let c = frame
                        .cell
                        .or_else(|| frame.system().and_then(|s| s.cell))
                        .filter(|c| c.defined);
                    match c {
                        Some(c) => {
                            // molrec's lattice vectors are columns, ASE's rows.
                            for row in 0..3 {
                                for col in 0..3 {
                                    cell.push(c.vectors[col * 3 + row]);
                                }
                            }
                            pbc.extend_from_slice(&c.boundary);
                        }
                        None => {
                            cell.extend_from_slice(&[0.0; 9]);
                            pbc.extend_from_slice(&[false; 3]);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The batch as Python: one array per output; `natoms`; `batch` (the
    /// structure of each atom); `index` (the ordinals), `record`, `frame`.
    pub(crate) fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let b = self.natoms.len();
        let d = PyDict::new(py);
        for (output, gathered) in self.plan.iter().zip(self.gathered) {
            match (output, gathered) {
                (
                    Output::Rows { name, .. },
                    Gathered::Rows {
                        data,
                        width,
                        trailing,
                        counts,
                        ..
                    },
                ) => {
                    let rows = data.len() / width.max(1);
                    let mut shape = vec![rows];
                    shape.extend(trailing.iter().map(|&t| t as usize));
                    d.set_item(name, column_to_numpy(py, data, &shape)?)?;
                    if let Some(counts) = counts {
                        d.set_item(format!("{name}.count"), vec_to_numpy(py, counts))?;
                    }
                }
                (Output::Step { name, .. }, Gathered::Step(series, numeric)) => {
                    d.set_item(name, step_to_py(py, series, numeric, b)?)?;
                }
                (Output::Scalar { name, .. }, Gathered::Scalar(data)) => {
                    d.set_item(name, column_to_numpy(py, data, &[b])?)?;
                }
                (Output::Cell, Gathered::Cell { cell, pbc }) => {
                    d.set_item(
                        "cell",
                        column_to_numpy(py, ColumnData::F64(cell), &[b, 3, 3])?,
                    )?;
                    d.set_item("pbc", column_to_numpy(py, ColumnData::Bool(pbc), &[b, 3])?)?;
                }
                _ => {}
            }
        }
        let batch: Vec<i64> = (0..b as i64)
            .zip(&self.natoms)
            .flat_map(|(s, &n)| std::iter::repeat_n(s, n.max(0) as usize))
            .collect();
        d.set_item("batch", vec_to_numpy(py, batch))?;
        d.set_item("natoms", vec_to_numpy(py, self.natoms))?;
        d.set_item("index", vec_to_numpy(py, self.ordinals))?;
        d.set_item("record", vec_to_numpy(py, self.records))?;
        d.set_item("frame", vec_to_numpy(py, self.positions))?;
        Ok(d)
    }
}

impl StructuresAcc {
    /// One structure as Python, per-structure values without the leading
    /// axis: numbers as Python numbers, `cell` `(3, 3)`, `pbc` a tuple
    /// (what `get_atoms` hands to ASE, with the fewest objects made); a
    /// per-atom output whose columns the structure lacks is left out.
    pub(crate) fn into_py_one<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (output, gathered) in self.plan.iter().zip(self.gathered) {
            match (output, gathered) {
                (
                    Output::Rows { name, .. },
                    Gathered::Rows {
                        data,
                        width,
                        trailing,
                        lacking,
                        ..
                    },
                ) => {
                    if lacking > 0 {
                        continue; // the structure has none: no key
                    }
                    let mut shape = vec![data.len() / width.max(1)];
                    shape.extend(trailing.iter().map(|&t| t as usize));
                    d.set_item(name, column_to_numpy(py, data, &shape)?)?;
                }
                (Output::Step { name, .. }, Gathered::Step(series, numeric)) => match series {
                    // A scalar f64 key (`pe`, ...) as a Python float.
                    Some(StepSeries::Typed {
                        tag: MetaTag::F64,
                        values: ColumnData::F64(v),
                    }) => d.set_item(name, v.first().copied().unwrap_or(f64::NAN))?,
                    None => d.set_item(name, f64::NAN)?,
                    series => {
                        // `(1,)` as its one value, `(1, w)` as `(w,)`.
                        let value = step_to_py(py, series, numeric, 1)?;
                        d.set_item(name, value.get_item(0)?)?;
                    }
                },
                (Output::Scalar { name, .. }, Gathered::Scalar(data)) => match data {
                    ColumnData::I64(v) => d.set_item(name, v.first().copied().unwrap_or(0))?,
                    ColumnData::F64(v) => {
                        d.set_item(name, v.first().copied().unwrap_or(f64::NAN))?
                    }
                    _ => {}
                },
                (Output::Cell, Gathered::Cell { cell, pbc }) => {
                    d.set_item("cell", column_to_numpy(py, ColumnData::F64(cell), &[3, 3])?)?;
                    d.set_item("pbc", (pbc[0], pbc[1], pbc[2]))?;
                }
                _ => {}
            }
        }
        d.set_item("natoms", self.natoms.first().copied().unwrap_or(0))?;
        Ok(d)
    }
}

fn is_atoms(o: &Output) -> bool {
    matches!(o, Output::Rows { block, .. } if block == "atoms")
}

/// What stops a gather: the reader's refusal, or a structure that lacks
/// what the plan requires.
pub(crate) enum GatherError {
    Read(molrec::Error),
    Missing(Missing),
}

/// Where a block's columns are at a frame: its trajectory update there,
/// and the system's block.
struct Place<'a> {
    trajectory: Option<molrec::lmdb::FrameBlock<'a>>,
    system: Option<&'a molrec::model::Block>,
}

impl<'a> Place<'a> {
    /// Block `block` at `frame`.
    fn of(frame: &'a ResolvedFrame<'_>, block: &str) -> Place<'a> {
        Place {
            trajectory: frame.block(block),
            system: frame.system().and_then(|s| s.blocks.get(block)),
        }
    }

    /// The block's rows: the trajectory's where present, else the
    /// system's, else 0.
    fn rows(&self) -> u64 {
        match (&self.trajectory, self.system) {
            (Some(b), _) => b.count(),
            (None, Some(b)) => b.count,
            (None, None) => 0,
        }
    }

    /// Column `name`: the trajectory's where its block is there and has
    /// it, else the system's.
    fn column(&self, name: &str) -> Option<Source<'a>> {
        if let Some(c) = self.trajectory.as_ref().and_then(|b| b.column(name)) {
            return Some(Source::Frame(c));
        }
        self.system?.columns.get(name).map(Source::System)
    }
}

/// One frame's rows of an output.
struct Rows {
    n: usize,
    cast: Option<DType>,
    fill: f64,
}

impl Rows {
    /// The frame's `n` rows of `columns` appended to `data`: side by side,
    /// cast to `cast`; or (one column, `cast` None) in the column's own
    /// dtype. `fill` where a column is missing and in masked rows.
    fn gather(
        &self,
        at: &Place<'_>,
        columns: &[String],
        data: &mut ColumnData,
        width: &mut usize,
        trailing: &mut Vec<u64>,
        scratch: &mut Vec<f64>,
    ) -> molrec::Result<()> {
        let n = self.n;
        let Some(cast) = self.cast else {
            return self.native(at.column(&columns[0]), data, width, trailing);
        };
        let width_of = |s: &Option<Source<'_>>| {
            s.as_ref().map_or(1, |s| {
                s.trailing()
                    .iter()
                    .map(|&t| t as usize)
                    .product::<usize>()
                    .max(1)
            })
        };
        if *width == 0 {
            // The first frame fixes the row: each column's width side by side.
            let first: Vec<Option<Source<'_>>> = columns.iter().map(|c| at.column(c)).collect();
            *width = first.iter().map(width_of).sum();
            *trailing = match (&first[..], columns.len()) {
                ([Some(s)], 1) => s.trailing().to_vec(),
                _ => vec![*width as u64],
            };
        }
        let row = *width;
        let start = data.len();
        match &mut *data {
            ColumnData::F64(v) => v.resize(start + n * row, self.fill),
            ColumnData::I64(v) => v.resize(start + n * row, self.fill as i64),
            ColumnData::Bool(v) => v.resize(start + n * row, self.fill != 0.0),
            other => pad_data(other, n * row),
        }
        let mut offset = 0;
        for name in columns {
            let source = at.column(name);
            let w = width_of(&source);
            if let Some(source) = source.filter(|_| offset + w <= row) {
                if source.f64s(scratch)?.is_some() && scratch.len() == n * w {
                    let mask = source.mask()?;
                    let (mask, src) = (mask.as_deref(), &scratch[..]);
                    let rows = start..start + n * row;
                    match (cast, &mut *data) {
                        (DType::F64, ColumnData::F64(v)) => {
                            scatter(&mut v[rows], row, offset, w, src, mask, |x| x)
                        }
                        (DType::I64, ColumnData::I64(v)) => {
                            scatter(&mut v[rows], row, offset, w, src, mask, |x| x as i64)
                        }
                        (DType::Bool, ColumnData::Bool(v)) => {
                            scatter(&mut v[rows], row, offset, w, src, mask, |x| x != 0.0)
                        }
                        _ => {}
                    }
                }
            }
            offset += w;
        }
        Ok(())
    }

    /// One column in its own dtype (the first frame's; a frame whose
    /// column has another dtype or shape, or none, gives defaults).
    fn native(
        &self,
        source: Option<Source<'_>>,
        data: &mut ColumnData,
        width: &mut usize,
        trailing: &mut Vec<u64>,
    ) -> molrec::Result<()> {
        let Some(source) = source else {
            pad_data(data, self.n * (*width).max(1));
            return Ok(());
        };
        if *width == 0 {
            if data.is_empty() {
                *data = ColumnData::empty(source.dtype());
            }
            *trailing = source.trailing().to_vec();
            *width = trailing
                .iter()
                .map(|&t| t as usize)
                .product::<usize>()
                .max(1);
        }
        if data.dtype() == source.dtype() && source.trailing() == trailing.as_slice() {
            source.append(data)
        } else {
            pad_data(data, self.n * *width);
            Ok(())
        }
    }
}

/// `src` (rows of `w` values) into the rows of `out` (rows of `row`
/// values) at `offset` of each, converted; rows `mask` says are not valid
/// are left as they are (the fill).
fn scatter<T>(
    out: &mut [T],
    row: usize,
    offset: usize,
    w: usize,
    src: &[f64],
    mask: Option<&[bool]>,
    convert: impl Fn(f64) -> T,
) {
    let pairs = out.chunks_exact_mut(row).zip(src.chunks_exact(w));
    for (i, (to, from)) in pairs.enumerate() {
        if mask.is_some_and(|m| !m.get(i).copied().unwrap_or(true)) {
            continue;
        }
        for (o, &x) in to[offset..offset + w].iter_mut().zip(from) {
            *o = convert(x);
        }
    }
}

/// A per-step key's values as Python.
fn step_to_py<'py>(
    py: Python<'py>,
    series: Option<StepSeries>,
    numeric: bool,
    frames: usize,
) -> PyResult<Bound<'py, PyAny>> {
    match series {
        None => column_to_numpy(py, ColumnData::F64(vec![f64::NAN; frames]), &[frames]),
        Some(StepSeries::Typed { tag, values }) => {
            let width = tag.shape().1;
            let shape = match width {
                Some(w) => vec![frames, w],
                None => vec![frames],
            };
            if numeric && tag != MetaTag::String {
                let mut out = Vec::with_capacity(values.len());
                if as_f64s(&values, &mut out).is_some() {
                    return column_to_numpy(py, ColumnData::F64(out), &shape);
                }
            }
            column_to_numpy(py, values, &shape)
        }
        Some(StepSeries::Json(values)) => {
            let list = PyList::empty(py);
            for v in &values {
                list.append(json_to_py(py, v)?)?;
            }
            Ok(list.into_any())
        }
    }
}
