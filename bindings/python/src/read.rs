//! `NativeReader`: one open collection in one process, and the records it
//! reads as NumPy arrays.
//!
//! A record is read with `RecordTxn::record_arrays` (every model rule
//! checked) with the GIL released, its trajectory resolved frame by frame
//! into flat per-column buffers ([`Acc`]), and only then turned into
//! Python objects. A batch is the same accumulation over many records in
//! one read transaction.
//!
//! Fork: LMDB's environment must not be used in a forked child, and the
//! library shares one environment per file and process (a registry keyed
//! by the file), which a child inherits. Every reader of this process is
//! listed in [`LIVE`]; `_after_fork_in_child` (run by `os.register_at_fork`)
//! drops each one's `Reader` in the child, which closes the inherited
//! environment there (LMDB's close touches only the child's own reader
//! slots and descriptors) and empties the registry, so the child's next open
//! is a fresh environment. A reader also refuses any use from a process
//! other than the one that opened it.

use crate::convert::{column_to_numpy, document_to_py, json_to_py, vec_to_numpy};
use crate::{guard, internal_error, to_py_err, without_gil};
use molrec::arrays::{RecordArrays, StepSeries, TrajectoryArrays};
use molrec::lmdb::Reader;
use molrec::model::{Block, Cell, Column, ColumnData, Document, Frame};
use molrec::model_json::{forcefield_to_json, schema_to_json};
use molrec::typed_json::MetaTag;
use molrec::Error;
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

/// One open collection and the process that opened it.
struct Slot {
    pid: u32,
    path: PathBuf,
    reader: RwLock<Option<Reader>>,
}

/// Every reader opened in this process (weakly: a dropped one is gone).
static LIVE: Mutex<Vec<Weak<Slot>>> = Mutex::new(Vec::new());

/// Set in a child whose inherited readers could not all be dropped (one
/// was in use by another thread at the fork): opening is refused there,
/// since it could share the parent's environment.
static FORK_LEFTOVER: AtomicBool = AtomicBool::new(false);

/// Drops, in a forked child, every reader inherited from the parent.
#[pyfunction]
pub(crate) fn _after_fork_in_child() {
    // Another thread may have held the list at the fork (it is gone here,
    // and its lock with it): then nothing inherited can be known closed.
    let mut guard = match LIVE.try_lock() {
        Ok(guard) => guard,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => {
            FORK_LEFTOVER.store(true, Ordering::SeqCst);
            return;
        }
    };
    let live = std::mem::take(&mut *guard);
    drop(guard);
    for slot in live.iter().filter_map(Weak::upgrade) {
        match slot.reader.try_write() {
            Ok(mut reader) => drop(reader.take()),
            Err(_) => FORK_LEFTOVER.store(true, Ordering::SeqCst),
        }
    }
}

/// An open collection file (`molrec::lmdb::Reader`), usable only in the
/// process that opened it.
#[pyclass(frozen, module = "mrec._native")]
pub(crate) struct NativeReader {
    slot: Arc<Slot>,
}

impl NativeReader {
    /// Runs `f` on the reader, refusing a closed one or one from another
    /// process.
    fn with<T>(&self, f: impl FnOnce(&Reader) -> Result<T, Error>) -> PyResult<T> {
        if self.slot.pid != std::process::id() {
            return Err(PyRuntimeError::new_err(format!(
                "{}: this reader was opened in process {} and is not usable after fork \
                 (mrec.Collection reopens per process by itself)",
                self.slot.path.display(),
                self.slot.pid
            )));
        }
        let guard = self
            .slot
            .reader
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let reader = guard.as_ref().ok_or_else(|| {
            PyValueError::new_err(format!(
                "{}: the reader is closed",
                self.slot.path.display()
            ))
        })?;
        f(reader).map_err(|e| to_py_err(e, &self.slot.path))
    }

    /// `with`, the GIL released during `f`.
    fn detached<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Reader) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        let slot = &self.slot;
        if slot.pid != std::process::id() {
            return self.with(|_| unreachable!("refused above"));
        }
        let out = without_gil(py, || {
            let guard = slot.reader.read().unwrap_or_else(PoisonError::into_inner);
            guard.as_ref().map(f)
        })
        .map_err(|m| internal_error(&m))?;
        match out {
            None => Err(PyValueError::new_err(format!(
                "{}: the reader is closed",
                slot.path.display()
            ))),
            Some(r) => r.map_err(|e| to_py_err(e, &slot.path)),
        }
    }
}

#[pymethods]
impl NativeReader {
    /// Opens `path`; `checked` runs the page check first (a file from
    /// elsewhere).
    #[new]
    fn new(py: Python<'_>, path: PathBuf, checked: bool) -> PyResult<NativeReader> {
        guard(|| {
            if FORK_LEFTOVER.load(Ordering::SeqCst) {
                return Err(PyRuntimeError::new_err(
                    "a reader was in use by another thread when this process was forked: \
                     its LMDB environment could not be closed here, so this process opens \
                     no collection (open collections after fork, or fork while no thread reads)",
                ));
            }
            let p = path.clone();
            let reader = without_gil(py, move || {
                if checked {
                    Reader::open_checked(&p)
                } else {
                    Reader::open(&p)
                }
            })
            .map_err(|m| internal_error(&m))?
            .map_err(|e| to_py_err(e, &path))?;
            let slot = Arc::new(Slot {
                pid: std::process::id(),
                path,
                reader: RwLock::new(Some(reader)),
            });
            let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
            live.retain(|w| w.strong_count() > 0);
            live.push(Arc::downgrade(&slot));
            Ok(NativeReader { slot })
        })
    }

    /// The process that opened this reader.
    #[getter]
    fn pid(&self) -> u32 {
        self.slot.pid
    }

    /// Closes the reader (its LMDB environment, once no other reader of
    /// the file in this process uses it).
    fn close(&self) {
        if self.slot.pid == std::process::id() {
            let mut reader = self
                .slot
                .reader
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            drop(reader.take());
        }
    }

    fn __len__(&self) -> PyResult<usize> {
        guard(|| self.with(|r| Ok(r.n_records() as usize)))
    }

    #[getter]
    fn n_frames(&self) -> PyResult<u64> {
        guard(|| self.with(|r| Ok(r.n_frames())))
    }

    #[getter]
    fn lock_free(&self) -> PyResult<bool> {
        guard(|| self.with(|r| Ok(r.is_lock_free())))
    }

    /// The collection document.
    fn meta<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let meta = self.with(|r| Ok(r.collection_meta().clone()))?;
            document_to_py(py, &meta)
        })
    }

    /// The trajectory declaration, in canonical JSON.
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let schema = self.with(|r| Ok(schema_to_json(r.schema())))?;
            json_to_py(py, &schema)
        })
    }

    /// The force field in canonical JSON, or None.
    fn forcefield<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let ff = self.detached(py, |r| r.forcefield())?;
            match ff {
                Some(ff) => json_to_py(py, &forcefield_to_json(&ff)),
                None => Ok(py.None().into_bound(py)),
            }
        })
    }

    /// The binding's four index columns, from the index read at open:
    /// `first_frame`, `n_frames`, `n_atoms` (uint64) and `has_trajectory`
    /// (bool).
    fn binding_index<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let (counts, atoms, flags) = self.with(|r| {
                let counts: Vec<u64> = (0..r.n_records())
                    .map(|i| r.record_frames(i).unwrap_or(0))
                    .collect();
                Ok((
                    counts,
                    r.atom_counts().to_vec(),
                    r.trajectory_flags().to_vec(),
                ))
            })?;
            let mut first = Vec::with_capacity(counts.len());
            let mut sum = 0u64;
            for &n in &counts {
                first.push(sum);
                sum += n;
            }
            let d = PyDict::new(py);
            d.set_item("first_frame", vec_to_numpy(py, first))?;
            d.set_item("n_frames", vec_to_numpy(py, counts))?;
            d.set_item("n_atoms", vec_to_numpy(py, atoms))?;
            d.set_item("has_trajectory", vec_to_numpy(py, flags))?;
            Ok(d)
        })
    }

    /// The collection's own index columns: `(columns, validity,
    /// precision)`, each a dict by column name (validity only for masked
    /// columns, precision only where declared).
    fn index<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        guard(|| {
            let columns = self.detached(py, |r| r.index_columns())?;
            let (out, validity, precision) = (PyDict::new(py), PyDict::new(py), PyDict::new(py));
            for (name, column) in columns {
                put_column(py, &name, column, &out, &validity, &precision)?;
            }
            Ok((out, validity, precision))
        })
    }

    /// `mrec bench`'s figure (2) in this process, for `mrec.bench`'s
    /// ratio: `record_arrays` of every record of `indices` in one read
    /// transaction, nothing handed to Python; returns the frames read.
    fn _rust_owned_arrays(&self, py: Python<'_>, indices: Vec<u64>) -> PyResult<u64> {
        guard(|| {
            self.detached(py, move |reader| {
                let txn = reader.txn()?;
                let mut frames = 0u64;
                for r in indices {
                    let record = txn.record_arrays(r)?;
                    frames += record.trajectory.map_or(0, |t| t.len() as u64);
                }
                Ok(frames)
            })
        })
    }

    /// Record `r` (see the package's documentation for its shape).
    fn record<'py>(&self, py: Python<'py>, r: i64) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let r = self.check_index(r)?;
            let (meta, system, acc) = self.detached(py, move |reader| {
                let arrays = reader.txn()?.record_arrays(r)?;
                let RecordArrays {
                    meta,
                    system,
                    trajectory,
                } = arrays;
                let acc = trajectory.map(|t| {
                    let mut acc = Acc::default();
                    acc.reserve_for(std::iter::once(&t));
                    acc.add_trajectory(&t);
                    acc
                });
                Ok((meta, system, acc))
            })?;
            let d = PyDict::new(py);
            d.set_item("meta", document_to_py(py, &meta)?)?;
            match system {
                Some(system) => d.set_item("system", system_to_py(py, system)?)?,
                None => d.set_item("system", py.None())?,
            }
            match acc {
                Some(acc) => d.set_item("trajectory", acc.into_py(py, true)?)?,
                None => d.set_item("trajectory", py.None())?,
            }
            Ok(d)
        })
    }

    /// Records `indices` in one read transaction, concatenated (see the
    /// package's documentation).
    fn batch<'py>(&self, py: Python<'py>, indices: Vec<i64>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let rs = indices
                .iter()
                .map(|&r| self.check_index(r))
                .collect::<PyResult<Vec<u64>>>()?;
            let rs_for_read = rs.clone();
            let (metas, systems, acc) = self.detached(py, move |reader| {
                let txn = reader.txn()?;
                let records = rs_for_read
                    .iter()
                    .map(|&r| txn.record_arrays(r))
                    .collect::<Result<Vec<RecordArrays>, Error>>()?;
                drop(txn);
                // Every buffer allocated once at its final size: no copy
                // as it grows, and the allocator reuses the same sizes
                // from one batch to the next.
                let mut acc = Acc::default();
                acc.reserve_for(records.iter().filter_map(|r| r.trajectory.as_ref()));
                let mut systems = SystemAcc::default();
                let mut metas = Vec::with_capacity(records.len());
                for record in records {
                    let RecordArrays {
                        meta,
                        system,
                        trajectory,
                    } = record;
                    metas.push(meta);
                    systems.add(system);
                    match trajectory {
                        Some(t) => acc.add_trajectory(&t),
                        None => acc.add_empty(),
                    }
                }
                Ok((metas, systems, acc))
            })?;
            let d = PyDict::new(py);
            d.set_item("records", vec_to_numpy(py, rs))?;
            let list = PyList::empty(py);
            for m in &metas {
                list.append(document_to_py(py, m)?)?;
            }
            d.set_item("meta", list)?;
            d.set_item("system", systems.into_py(py)?)?;
            d.set_item("trajectory", acc.into_py(py, false)?)?;
            Ok(d)
        })
    }
}

impl NativeReader {
    fn check_index(&self, r: i64) -> PyResult<u64> {
        let n = self.with(|reader| Ok(reader.n_records()))? as i64;
        let i = if r < 0 { r + n } else { r };
        if i < 0 || i >= n {
            return Err(PyIndexError::new_err(format!(
                "record {r} out of range: the collection has {n}"
            )));
        }
        Ok(i as u64)
    }
}

/// Puts a model column into `out` (its values shaped), `validity` (its
/// mask, when some row is not valid) and `precision` (when declared).
fn put_column(
    py: Python<'_>,
    name: &str,
    column: Column,
    out: &Bound<'_, PyDict>,
    validity: &Bound<'_, PyDict>,
    precision: &Bound<'_, PyDict>,
) -> PyResult<()> {
    let shape: Vec<usize> = column.shape.iter().map(|&d| d as usize).collect();
    out.set_item(name, column_to_numpy(py, column.data, &shape)?)?;
    if let Some(mask) = column.validity.filter(|m| !m.iter().all(|&b| b)) {
        validity.set_item(name, vec_to_numpy(py, mask))?;
    }
    if let Some(p) = column.precision {
        precision.set_item(name, p)?;
    }
    Ok(())
}

fn block_to_py<'py>(py: Python<'py>, block: Block) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("count", block.count)?;
    let (columns, validity, precision) = (PyDict::new(py), PyDict::new(py), PyDict::new(py));
    for (name, column) in block.columns {
        put_column(py, &name, column, &columns, &validity, &precision)?;
    }
    d.set_item("columns", columns)?;
    d.set_item("validity", validity)?;
    d.set_item("precision", precision)?;
    d.set_item("structural_shape", block.structural_shape)?;
    d.set_item("targets", block.targets.into_pyobject(py)?)?;
    d.set_item("attributes", document_to_py(py, &block.attributes)?)?;
    Ok(d)
}

fn cell_to_py<'py>(py: Python<'py>, cell: &Cell) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item(
        "vectors",
        column_to_numpy(py, ColumnData::F64(cell.vectors.to_vec()), &[3, 3])?,
    )?;
    d.set_item("origin", vec_to_numpy(py, cell.origin.to_vec()))?;
    d.set_item("boundary", vec_to_numpy(py, cell.boundary.to_vec()))?;
    d.set_item("defined", cell.defined)?;
    Ok(d)
}

fn system_to_py<'py>(py: Python<'py>, system: Frame) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("meta", document_to_py(py, &system.meta)?)?;
    let types = PyDict::new(py);
    for (k, tag) in &system.meta_types {
        types.set_item(k, tag.name())?;
    }
    d.set_item("meta_types", types)?;
    let blocks = PyDict::new(py);
    for (name, block) in system.blocks {
        blocks.set_item(name, block_to_py(py, block)?)?;
    }
    d.set_item("blocks", blocks)?;
    match &system.cell {
        Some(cell) => d.set_item("cell", cell_to_py(py, cell)?)?,
        None => d.set_item("cell", py.None())?,
    }
    Ok(d)
}

/// Default values of `n` elements of `data`'s dtype appended.
fn pad_data(data: &mut ColumnData, n: usize) {
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
fn reserve_data(data: &mut ColumnData, n: usize) {
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
fn extend_data(dst: &mut ColumnData, src: &ColumnData, range: std::ops::Range<usize>) {
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
struct ColAcc {
    trailing: Vec<u64>,
    width: usize,
    data: ColumnData,
    /// One bool per row, once some row is not valid.
    validity: Option<Vec<bool>>,
    rows: usize,
}

impl ColAcc {
    fn new(dtype: molrec::DType, trailing: &[u64], rows_before: usize) -> ColAcc {
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
    fn pad(&mut self, n: usize) {
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
    fn push(&mut self, data: &ColumnData, start: usize, n: usize, mask: Option<&[bool]>) {
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

/// A block through the frames of one record or a batch.
#[derive(Default)]
struct BlockAcc {
    present: Vec<bool>,
    counts: Vec<i64>,
    rows: usize,
    columns: BTreeMap<String, ColAcc>,
    structural_shape: Option<Vec<u64>>,
    targets: BTreeMap<String, String>,
}

impl BlockAcc {
    fn with_frames(n: usize) -> BlockAcc {
        BlockAcc {
            present: vec![false; n],
            counts: vec![0; n],
            ..BlockAcc::default()
        }
    }

    fn absent(&mut self, n: usize) {
        self.present.resize(self.present.len() + n, false);
        self.counts.resize(self.counts.len() + n, 0);
    }

    /// Converts to Python: flat rows and offsets, or stacked
    /// `(frames, rows, ...)` when `stack` and every frame has the same rows.
    fn into_py<'py>(self, py: Python<'py>, stack: bool) -> PyResult<Bound<'py, PyDict>> {
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
        d.set_item("structural_shape", self.structural_shape)?;
        d.set_item("targets", self.targets.into_pyobject(py)?)?;
        Ok(d)
    }
}

/// Cells through the frames (or through a batch's records).
#[derive(Default)]
struct CellAcc {
    present: Vec<bool>,
    vectors: Vec<f64>,
    origin: Vec<f64>,
    boundary: Vec<bool>,
    defined: Vec<bool>,
}

impl CellAcc {
    fn push(&mut self, cell: Option<&Cell>) {
        let c = cell.unwrap_or(&Cell::UNDEFINED);
        self.present.push(cell.is_some());
        self.vectors.extend_from_slice(&c.vectors);
        self.origin.extend_from_slice(&c.origin);
        self.boundary.extend_from_slice(&c.boundary);
        self.defined.push(c.defined);
    }

    fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
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
enum MetaAcc {
    Typed {
        tag: MetaTag,
        width: usize,
        values: ColumnData,
    },
    Json(Vec<Value>),
}

impl MetaAcc {
    fn new(series: &StepSeries) -> MetaAcc {
        match series {
            StepSeries::Typed { tag, values } => MetaAcc::Typed {
                tag: *tag,
                width: tag.shape().1.unwrap_or(1),
                values: ColumnData::empty(values.dtype()),
            },
            StepSeries::Json(_) => MetaAcc::Json(Vec::new()),
        }
    }

    fn pad(&mut self, n: usize) {
        match self {
            MetaAcc::Typed { width, values, .. } => pad_data(values, n * *width),
            MetaAcc::Json(v) => v.resize(v.len() + n, Value::Null),
        }
    }

    fn push(&mut self, series: &StepSeries, n: usize) {
        match (self, series) {
            (MetaAcc::Typed { values, .. }, StepSeries::Typed { values: src, .. }) => {
                extend_data(values, src, 0..src.len())
            }
            (MetaAcc::Json(v), StepSeries::Json(src)) => v.extend_from_slice(src),
            (other, _) => other.pad(n),
        }
    }

    fn into_py<'py>(self, py: Python<'py>, frames: usize) -> PyResult<Bound<'py, PyAny>> {
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
struct Acc {
    frames: usize,
    frame_offsets: Vec<i64>,
    steps: Vec<i64>,
    times: Option<Vec<f64>>,
    meta: BTreeMap<String, MetaAcc>,
    meta_tags: BTreeMap<String, &'static str>,
    blocks: BTreeMap<String, BlockAcc>,
    cell: Option<CellAcc>,
}

impl Acc {
    /// Sizes every buffer for `trajectories` (added next, in any order):
    /// the blocks and columns they have, created empty, with the capacity
    /// of all their rows.
    fn reserve_for<'t>(
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
    fn add_empty(&mut self) {
        if self.frame_offsets.is_empty() {
            self.frame_offsets.push(0);
        }
        self.frame_offsets.push(self.frames as i64);
    }

    fn add_trajectory(&mut self, t: &TrajectoryArrays) {
        if self.frame_offsets.is_empty() {
            self.frame_offsets.push(0);
        }
        let (base, n) = (self.frames, t.len());
        self.steps.extend_from_slice(&t.steps);
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
            let BlockAcc {
                present,
                counts,
                rows,
                columns,
                ..
            } = acc;
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
    fn into_py<'py>(self, py: Python<'py>, single: bool) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("n_frames", self.frames)?;
        if !single {
            d.set_item("offsets", vec_to_numpy(py, self.frame_offsets))?;
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

/// The systems of a batch's records, concatenated per block.
#[derive(Default)]
struct SystemAcc {
    records: usize,
    present: Vec<bool>,
    meta: Vec<Document>,
    meta_types: Vec<BTreeMap<String, MetaTag>>,
    blocks: BTreeMap<String, BlockAcc>,
    cell: CellAcc,
}

impl SystemAcc {
    fn add(&mut self, system: Option<Frame>) {
        let base = self.records;
        self.records += 1;
        self.present.push(system.is_some());
        let Some(system) = system else {
            self.meta.push(Document::new());
            self.meta_types.push(BTreeMap::new());
            for acc in self.blocks.values_mut() {
                acc.absent(1);
            }
            self.cell.push(None);
            return;
        };
        self.meta.push(system.meta);
        self.meta_types.push(system.meta_types);
        self.cell.push(system.cell.as_ref());
        for (name, block) in &system.blocks {
            let acc = self
                .blocks
                .entry(name.clone())
                .or_insert_with(|| BlockAcc::with_frames(base));
            let count = block.count as usize;
            acc.present.push(true);
            acc.counts.push(count as i64);
            for (col, column) in &block.columns {
                let rows_before = acc.rows;
                let trailing = column.shape.get(1..).unwrap_or_default();
                let c = acc
                    .columns
                    .entry(col.clone())
                    .or_insert_with(|| ColAcc::new(column.dtype(), trailing, rows_before));
                let mask = column.validity.as_deref();
                c.push(&column.data, 0, count, mask);
            }
            for (col, c) in acc.columns.iter_mut() {
                if !block.columns.contains_key(col) {
                    c.pad(count);
                }
            }
            acc.rows += count;
        }
        for (name, acc) in self.blocks.iter_mut() {
            if !system.blocks.contains_key(name) {
                acc.absent(1);
            }
        }
    }

    fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("present", vec_to_numpy(py, self.present))?;
        let (meta, types) = (PyList::empty(py), PyList::empty(py));
        for (m, t) in self.meta.iter().zip(&self.meta_types) {
            meta.append(document_to_py(py, m)?)?;
            let td = PyDict::new(py);
            for (k, tag) in t {
                td.set_item(k, tag.name())?;
            }
            types.append(td)?;
        }
        d.set_item("meta", meta)?;
        d.set_item("meta_types", types)?;
        let blocks = PyDict::new(py);
        for (name, acc) in self.blocks {
            blocks.set_item(&name, acc.into_py(py, false)?)?;
        }
        d.set_item("blocks", blocks)?;
        if self.cell.present.iter().any(|&p| p) {
            d.set_item("cell", self.cell.into_py(py)?)?;
        } else {
            d.set_item("cell", py.None())?;
        }
        Ok(d)
    }
}
