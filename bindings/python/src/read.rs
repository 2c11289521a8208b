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

use crate::acc::{Acc, SystemAcc};
use crate::convert::{column_to_numpy, document_to_py, json_to_py, vec_to_numpy};
use crate::errors::{guard, internal_error, to_py_err, without_gil};
use crate::frames::FramesAcc;
use crate::structures::{GatherError, Plan, StructuresAcc};
use molrec::arrays::RecordArrays;
use molrec::lmdb::{Set, SetOptions, ShardInfo};
use molrec::model::{Block, Cell, Column, ColumnData, Frame};
use molrec::model_json::{forcefield_to_json, schema_to_json};
use molrec::Error;
use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};

/// A shard as `NativeReader.parts` hands it to another process: its path,
/// records, frames and bytes.
type ShardParts = (PathBuf, u64, u64, u64);

/// One open collection (a file, or a sharded set of files: a file is a set
/// of one shard) and the process that opened it.
struct Slot {
    pid: u32,
    path: PathBuf,
    reader: RwLock<Option<Set>>,
    pages: PageWatch,
}

/// Keeps a reader's resident memory bounded whatever the collection's
/// size: a shuffled loader touches pages all over the file, which stay
/// mapped, in the page cache's large folios (one value read can map a
/// whole folio of up to 2 MiB, so one batch of 64 structures can map tens
/// of MiB). After every read that released the GIL, and every
/// [`PageWatch::EVERY_HELD`] reads that held it, it looks at the resident
/// size (`/proc/self/statm`, some microseconds), and past `budget` bytes
/// above where it last stood (its opening, first) it gives the files'
/// mapped pages back (`Set::release_mapped_pages`; the page cache keeps
/// them, and the next read of a page maps it again: a minor fault).
/// `budget` 0: never.
#[derive(Default)]
struct PageWatch {
    budget: u64,
    held_reads: std::sync::atomic::AtomicU32,
    base: std::sync::atomic::AtomicU64,
    /// Minor faults at the last look within a read.
    faults: std::sync::atomic::AtomicU64,
    /// Frames read within reads, counted to look every [`TICK_FRAMES`].
    frames: std::sync::atomic::AtomicU64,
}

impl PageWatch {
    /// Reads holding the GIL (one structure at a time) between looks.
    const EVERY_HELD: u32 = 32;

    /// The most a page fault maps: a folio of 2 MiB.
    const FAULT_MAPS: u64 = 2 << 20;

    /// Within a long read, after each frame; every [`TICK_FRAMES`] frames:
    /// a look at the resident size only when enough pages were faulted in
    /// since the last one to have passed the budget (counting faults costs
    /// a fraction of what reading the resident size does).
    fn within_read(&self, reader: &Set) {
        if self.budget == 0 || (self.frames.fetch_add(1, Ordering::Relaxed) + 1) % TICK_FRAMES != 0
        {
            return;
        }
        let faults = minor_faults();
        let since = faults.saturating_sub(self.faults.load(Ordering::Relaxed));
        if since.saturating_mul(Self::FAULT_MAPS) >= self.budget {
            self.faults.store(faults, Ordering::Relaxed);
            self.after_read(reader);
        }
    }

    fn new(budget: u64) -> PageWatch {
        PageWatch {
            budget,
            held_reads: Default::default(),
            base: (if budget == 0 {
                0
            } else {
                resident_bytes().unwrap_or(0)
            })
            .into(),
            faults: minor_faults().into(),
            frames: Default::default(),
        }
    }

    /// After a read holding the GIL: a look every [`Self::EVERY_HELD`].
    fn after_held_read(&self, reader: &Set) {
        if self.budget != 0
            && self.held_reads.fetch_add(1, Ordering::Relaxed) % Self::EVERY_HELD == 0
        {
            self.after_read(reader);
        }
    }

    fn after_read(&self, reader: &Set) {
        if self.budget == 0 {
            return;
        }
        let Some(now) = resident_bytes() else { return };
        let base = self.base.load(Ordering::Relaxed);
        if base == 0 || now < base {
            self.base.store(now, Ordering::Relaxed);
        } else if now > base + self.budget {
            reader.release_mapped_pages();
            self.base
                .store(resident_bytes().unwrap_or(now), Ordering::Relaxed);
        }
    }
}

/// Frames read between two looks at the map budget within reads.
const TICK_FRAMES: u64 = 16;

/// This process's minor page faults so far (`getrusage`, a fraction of a
/// microsecond): a fault is what maps a page, or a folio of them.
fn minor_faults() -> u64 {
    // SAFETY: `getrusage` fills the struct it is given; a zeroed `rusage`
    // is a valid value of it.
    unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) == 0 {
            usage.ru_minflt as u64
        } else {
            0
        }
    }
}

/// This process's resident bytes (`/proc/self/statm`; `None` elsewhere).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
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
    fn with<T>(&self, f: impl FnOnce(&Set) -> Result<T, Error>) -> PyResult<T> {
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
        let out = f(reader);
        self.slot.pages.after_held_read(reader);
        out.map_err(|e| to_py_err(e, &self.slot.path))
    }

    /// `with`, the GIL released during `f`.
    fn detached<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Set) -> Result<T, Error> + Send,
    ) -> PyResult<T> {
        let slot = &self.slot;
        if slot.pid != std::process::id() {
            return self.with(|_| unreachable!("refused above"));
        }
        let out = without_gil(py, || {
            let guard = slot.reader.read().unwrap_or_else(PoisonError::into_inner);
            let out = guard.as_ref().map(f);
            if let Some(reader) = guard.as_ref() {
                slot.pages.after_read(reader);
            }
            out
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
    /// Opens what `paths` name: one collection file, or a sharded set
    /// (several files, a directory, a glob pattern, a manifest);
    /// `checked` runs the page check of each file first (a file from
    /// elsewhere); `map_budget`: bytes of the files' pages this reader
    /// keeps mapped before it gives them back (0: never).
    #[new]
    #[pyo3(signature = (paths, checked, map_budget=0))]
    fn new(
        py: Python<'_>,
        paths: Vec<PathBuf>,
        checked: bool,
        map_budget: u64,
    ) -> PyResult<NativeReader> {
        guard(|| {
            opening_allowed()?;
            let label = paths.first().cloned().unwrap_or_default();
            let options = SetOptions { checked };
            let set = without_gil(py, move || Set::open(&paths, options))
                .map_err(|m| internal_error(&m))?
                .map_err(|e| to_py_err(e, &label))?;
            NativeReader::register(set, label, map_budget)
        })
    }

    /// A set already described (by `parts()` in another process: shards
    /// with their counts and sizes, the declaration's digest), none of
    /// its shards opened until read.
    #[staticmethod]
    #[pyo3(signature = (shards, digest, checked, map_budget=0))]
    fn from_parts(
        shards: Vec<ShardParts>,
        digest: String,
        checked: bool,
        map_budget: u64,
    ) -> PyResult<NativeReader> {
        guard(|| {
            opening_allowed()?;
            let label = shards.first().map(|s| s.0.clone()).unwrap_or_default();
            let infos = shards
                .into_iter()
                .map(|(path, n_records, n_frames, bytes)| ShardInfo {
                    path,
                    n_records,
                    n_frames,
                    bytes,
                })
                .collect();
            let set = Set::from_parts(infos, digest, SetOptions { checked })
                .map_err(|e| to_py_err(e, &label))?;
            NativeReader::register(set, label, map_budget)
        })
    }

    /// The set as described, for another process: `(shards, digest)`,
    /// each shard `(path, n_records, n_frames, bytes)`.
    fn parts(&self) -> PyResult<(Vec<ShardParts>, String)> {
        guard(|| {
            self.with(|set| {
                let shards = set
                    .shard_infos()
                    .map(|s| (s.path.clone(), s.n_records, s.n_frames, s.bytes))
                    .collect();
                Ok((shards, set.declaration_sha256().to_string()))
            })
        })
    }

    /// Number of shards (1 for a collection file).
    #[getter]
    fn n_shards(&self) -> PyResult<usize> {
        guard(|| self.with(|set| Ok(set.n_shards())))
    }

    /// The manifest the set was opened from, if any.
    #[getter]
    fn manifest_path(&self) -> PyResult<Option<PathBuf>> {
        guard(|| self.with(|set| Ok(set.manifest_path().map(PathBuf::from))))
    }

    /// The shards open in this process, by number.
    fn open_shards(&self) -> PyResult<Vec<usize>> {
        guard(|| self.with(|set| Ok((0..set.n_shards()).filter(|&s| set.is_open(s)).collect())))
    }

    /// The record of frame `j` of the set and the frame's position in it
    /// (opens the frame's shard only).
    fn locate(&self, j: i64) -> PyResult<(u64, u64)> {
        guard(|| {
            let j = self.check_frames(&[j])?[0];
            self.with(|set| {
                let (s, local) = set.locate_frame(j).expect("checked in range");
                let (r, k) = set
                    .shard(s)?
                    .locate_frame(local)
                    .expect("in the shard's range");
                Ok((set.record_start(s) + r, k))
            })
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

    /// Every shard's file, in order.
    #[getter]
    fn shard_paths(&self) -> PyResult<Vec<PathBuf>> {
        guard(|| self.with(|set| Ok(set.shard_infos().map(|s| s.path.clone()).collect())))
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
            let meta = self.detached(py, |r| Ok(r.collection_meta()?.clone()))?;
            document_to_py(py, &meta)
        })
    }

    /// The trajectory declaration, in canonical JSON.
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        guard(|| {
            let schema = self.detached(py, |r| Ok(schema_to_json(r.schema()?)))?;
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

    /// The binding's four index columns, from the index read at open (of
    /// every shard of a set, one after the other): `first_frame`,
    /// `n_frames`, `n_atoms` (uint64) and `has_trajectory` (bool).
    fn binding_index<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let (counts, atoms, flags) = self.detached(py, |r| {
                Ok((r.frame_counts()?, r.atom_counts()?, r.trajectory_flags()?))
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
                let txn = reader.txn();
                let mut frames = 0u64;
                for r in indices {
                    let record = txn.record_arrays(r)?;
                    frames += record.trajectory.map_or(0, |t| t.len() as u64);
                }
                Ok(frames)
            })
        })
    }

    /// Frames `js` by global ordinal, in one read transaction (see the
    /// package's documentation for the layout).
    #[pyo3(signature = (js, system=false, record_meta=false))]
    fn frames<'py>(
        &self,
        py: Python<'py>,
        js: Vec<i64>,
        system: bool,
        record_meta: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let js = self.check_frames(&js)?;
            let pages = &self.slot.pages;
            let acc = self.detached(py, move |reader| {
                FramesAcc::read(reader, &js, system, record_meta, &|| {
                    pages.within_read(reader)
                })
            })?;
            acc.into_py(py)
        })
    }

    /// Frames `js` gathered into one batch of structures by `plan` (see
    /// `mrec.Structures`).
    fn structures<'py>(
        &self,
        py: Python<'py>,
        js: Vec<i64>,
        plan: &Plan,
    ) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let plan = Arc::clone(&plan.outputs);
            let js = self.check_frames(&js)?;
            let pages = &self.slot.pages;
            let out = self.detached(py, move |reader| {
                Ok(StructuresAcc::read(reader, &js, plan, &|| {
                    pages.within_read(reader)
                }))
            })?;
            self.gathered(py, out, false)
        })
    }

    /// Frame `j` as one structure by `plan`, per-structure values without
    /// the leading axis (what `Structures.get_atoms` builds an `Atoms` of).
    /// Read holding the GIL: one structure is read faster than the GIL is
    /// let go and taken back.
    fn structure<'py>(&self, py: Python<'py>, j: i64, plan: &Plan) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let plan = Arc::clone(&plan.outputs);
            let out = self.with(|reader| {
                let n = reader.n_frames() as i64;
                let i = if j < 0 { j + n } else { j };
                Ok((0..n)
                    .contains(&i)
                    .then(|| StructuresAcc::read(reader, &[i as u64], plan, &|| {})))
            })?;
            let out =
                out.ok_or_else(|| PyIndexError::new_err(format!("frame {j} out of range")))?;
            self.gathered(py, out, true)
        })
    }

    /// The atoms of every frame (`natoms` of each structure), without
    /// decoding one: `(counts, systems_read, records_walked)`. From the
    /// index where it says (a record of at most one frame; a record whose
    /// system has the `atoms` block, whose every trajectory update then has
    /// its rows); else the record's headers are walked (`atoms` carried
    /// forward, 0 where absent), and its system read first to know.
    fn frame_atoms<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyAny>, u64, u64)> {
        guard(|| {
            let (counts, systems, walked) = self.detached(py, |set| {
                let mut counts = Vec::with_capacity(set.n_frames() as usize);
                let (mut systems, mut walked) = (0u64, 0u64);
                for s in 0..set.n_shards() {
                    let reader = set.shard(s)?;
                    let in_shard = |e: Error| e.in_shard(reader_path(set, s));
                    let txn = reader.txn().map_err(in_shard)?;
                    for r in 0..reader.n_records() {
                        let n = reader.record_frames(r).unwrap_or(0);
                        let atoms = reader.atom_counts()[r as usize] as i64;
                        if n <= 1 {
                            counts.extend(std::iter::repeat_n(atoms, n as usize));
                            continue;
                        }
                        systems += 1;
                        let in_system = txn
                            .system(r)
                            .map_err(in_shard)?
                            .is_some_and(|s| s.blocks.contains_key("atoms"));
                        if in_system {
                            counts.extend(std::iter::repeat_n(atoms, n as usize));
                            continue;
                        }
                        walked += 1;
                        let mut now = 0i64;
                        txn.for_each_frame(r, |view| {
                            if let Some(b) = view.blocks.get("atoms") {
                                now = b.count as i64;
                            }
                            counts.push(now);
                            Ok(())
                        })
                        .map_err(in_shard)?;
                    }
                }
                Ok((counts, systems, walked))
            })?;
            Ok((vec_to_numpy(py, counts), systems, walked))
        })
    }

    /// Record `r` (see the package's documentation for its shape).
    fn record<'py>(&self, py: Python<'py>, r: i64) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            let r = self.check_index(r)?;
            let (meta, system, acc) = self.detached(py, move |reader| {
                let arrays = reader.record_arrays(r)?;
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
                let txn = reader.txn();
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
                    systems.add(system.map(Arc::new));
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

/// Refuses to open anything in a child whose inherited readers could not
/// all be dropped (see `FORK_LEFTOVER`).
fn opening_allowed() -> PyResult<()> {
    if FORK_LEFTOVER.load(Ordering::SeqCst) {
        return Err(PyRuntimeError::new_err(
            "a reader was in use by another thread when this process was forked: \
             its LMDB environment could not be closed here, so this process opens \
             no collection (open collections after fork, or fork while no thread reads)",
        ));
    }
    Ok(())
}

/// The path of shard `s` of `set` (for messages).
fn reader_path(set: &Set, s: usize) -> &std::path::Path {
    set.shard_info(s)
        .map_or(std::path::Path::new(""), |i| &i.path)
}

impl NativeReader {
    /// Registers an opened set as this process's reader (so that a forked
    /// child drops it).
    fn register(set: Set, path: PathBuf, map_budget: u64) -> PyResult<NativeReader> {
        let slot = Arc::new(Slot {
            pid: std::process::id(),
            path,
            reader: RwLock::new(Some(set)),
            pages: PageWatch::new(map_budget),
        });
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|w| w.strong_count() > 0);
        live.push(Arc::downgrade(&slot));
        Ok(NativeReader { slot })
    }

    /// A gather as Python (`one`: a single structure's form), or its error.
    fn gathered<'py>(
        &self,
        py: Python<'py>,
        out: Result<StructuresAcc, GatherError>,
        one: bool,
    ) -> PyResult<Bound<'py, PyDict>> {
        match out {
            Ok(acc) if one => acc.into_py_one(py),
            Ok(acc) => acc.into_py(py),
            Err(GatherError::Read(e)) => Err(to_py_err(e, &self.slot.path)),
            Err(GatherError::Missing(m)) => {
                Err(m.into_py_err(py, &self.slot.path.display().to_string()))
            }
        }
    }

    /// Global frame ordinals, negative ones counted from the end; an
    /// ordinal out of range is an `IndexError`.
    fn check_frames(&self, js: &[i64]) -> PyResult<Vec<u64>> {
        let n = self.with(|reader| Ok(reader.n_frames()))? as i64;
        js.iter()
            .map(|&j| {
                let i = if j < 0 { j + n } else { j };
                if i < 0 || i >= n {
                    return Err(PyIndexError::new_err(format!(
                        "frame {j} out of range: the collection has {n} frames"
                    )));
                }
                Ok(i as u64)
            })
            .collect()
    }

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
