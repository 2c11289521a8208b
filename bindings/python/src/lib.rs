//! `mrec._native`: the Rust half of the Python package `mrec`.
//!
//! A thin layer over the `molrec` library: `NativeReader` (one open
//! collection, one process), `NativeWriter` (the streaming writer),
//! `NativeAseImport` (`from_ase`, over the `mrec-import` crate), and the
//! conversions between the library's owned arrays and NumPy. The Python
//! half (`python/mrec/`) adds what a training loader needs around them:
//! pickling, fork safety, the Dataset shape.
//!
//! Nothing panics across the boundary: every entry point runs under
//! `errors::guard`, which turns a panic into `mrec.InternalError` (a
//! `RuntimeError`), and every library error becomes one of `mrec`'s
//! exceptions (`errors::to_py_err`).

mod acc;
mod convert;
mod errors;
mod frames;
mod import;
mod read;
mod structures;
mod write;

use errors::{guard, internal_error, to_py_err, without_gil};
use molrec::lmdb::{Set, SetOptions};
use pyo3::prelude::*;
use std::path::PathBuf;

/// Every Rust allocation of the extension (the arrays handed to NumPy are
/// freed through it too: NumPy calls back into Rust to drop them).
#[global_allocator]
static ALLOCATOR: mrec_allocator::Mimalloc = mrec_allocator::Mimalloc;

/// Panics on purpose: the tests check that a panic reaches Python as
/// `mrec.InternalError`, not as PyO3's `PanicException` (a BaseException).
#[pyfunction]
fn _panic_for_test(in_detached_thread: bool) -> PyResult<()> {
    guard(|| {
        if in_detached_thread {
            let r = Python::attach(|py| without_gil(py, || panic!("test panic without the GIL")));
            r.map_err(|m| internal_error(&m))
        } else {
            panic!("test panic")
        }
    })
}

/// Writes the manifest of the set of `shards` (files of `dir`, in this
/// order) into `dir`, last: each shard is opened (its counts, its
/// declaration, which must be the first's), then `mrec-set.json` is
/// installed (temporary file, rename) and the pending marker removed.
/// Returns the manifest's path.
#[pyfunction]
fn write_manifest(py: Python<'_>, shards: Vec<PathBuf>, dir: PathBuf) -> PyResult<PathBuf> {
    guard(|| {
        let at = dir.clone();
        let written = without_gil(py, move || {
            let set = Set::open_files(&shards, SetOptions::default())?;
            set.manifest(&dir)?.install(&dir)
        })
        .map_err(|m| internal_error(&m))?;
        written.map_err(|e| to_py_err(e, &at))
    })
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("VERSION", molrec::VERSION)?;
    m.add_class::<read::NativeReader>()?;
    m.add_class::<structures::Plan>()?;
    m.add_class::<write::NativeWriter>()?;
    m.add_class::<import::NativeAseImport>()?;
    m.add("ASE_MAPPING", mrec_import::mapping::MAPPING_JSON)?;
    m.add_function(wrap_pyfunction!(_panic_for_test, m)?)?;
    m.add_function(wrap_pyfunction!(write_manifest, m)?)?;
    m.add_function(wrap_pyfunction!(import::import_aselmdb, m)?)?;
    m.add_function(wrap_pyfunction!(read::_after_fork_in_child, m)?)?;
    Ok(())
}
