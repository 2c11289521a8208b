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

use errors::{errors_class_call, guard, internal_error, to_py_err, without_gil};
use molrec::lmdb::{is_digest, Manifest, Set, SetOptions, DIGEST_HEX_LEN};
use molrec::{Error, SetProblem};
use pyo3::exceptions::PyValueError;
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
/// declaration, which must be the first's), each gets its content digest
/// (`digests[i]`, what the task that wrote it computed; the file is hashed
/// where that is None), then `mrec-set.json` is installed (temporary file,
/// rename) and the pending marker removed. `names`: the file names the
/// manifest lists instead of the shards' own, one per shard (`mrec.ray`
/// writes each shard under a name of its own and renames it once the
/// manifest is in place). Returns the manifest's path.
#[pyfunction]
#[pyo3(signature = (shards, dir, names=None, digests=None))]
fn write_manifest(
    py: Python<'_>,
    shards: Vec<PathBuf>,
    dir: PathBuf,
    names: Option<Vec<String>>,
    digests: Option<Vec<Option<String>>>,
) -> PyResult<PathBuf> {
    guard(|| {
        let digests = digests.unwrap_or_else(|| vec![None; shards.len()]);
        if digests.len() != shards.len() {
            return Err(PyValueError::new_err(format!(
                "{} digests for {} shards",
                digests.len(),
                shards.len()
            )));
        }
        if let Some(bad) = digests.iter().flatten().find(|d| !is_digest(d)) {
            return Err(PyValueError::new_err(format!(
                "{bad:?} is not a digest ({DIGEST_HEX_LEN} lowercase hex digits)"
            )));
        }
        let at = dir.clone();
        let written = without_gil(py, move || {
            let set = Set::open_files(&shards, SetOptions::default())?;
            let mut manifest = set.manifest(&dir)?;
            for (shard, digest) in manifest.shards.iter_mut().zip(digests) {
                shard.digest = digest;
            }
            // Hashed under the names the files have now, before renaming.
            manifest.fill_digests(&dir)?;
            if let Some(names) = names {
                manifest = renamed(manifest, names).map_err(|why| {
                    Error::set(
                        SetProblem::Manifest,
                        "",
                        format!("{}: {why}", dir.display()),
                    )
                })?;
            }
            manifest.install(&dir)
        })
        .map_err(|m| internal_error(&m))?;
        written.map_err(|e| to_py_err(e, &at))
    })
}

/// The content digest of the file at `path` (what a set's manifest keeps
/// of a shard: XXH3-128, 32 lowercase hex digits).
#[pyfunction]
fn file_digest(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    guard(|| {
        let at = path.clone();
        without_gil(py, move || molrec::lmdb::file_digest(&path))
            .map_err(|m| internal_error(&m))?
            .map_err(|e| to_py_err(e, &at))
    })
}

/// Every shard of the set `paths` name hashed and compared with the digest
/// its manifest keeps (`mrec set verify`). Returns `(path, digest)` of each
/// shard when all are verified; raises for the first that is not:
/// `mrec.DigestMismatch` (its bytes changed: the digest expected and the
/// one found), `mrec.SetRefused` (`no-digest`, `missing`, or a manifest
/// that is not one).
#[pyfunction]
fn verify_digests(py: Python<'_>, paths: Vec<PathBuf>) -> PyResult<Vec<(PathBuf, String)>> {
    guard(|| {
        let first = paths.first().cloned().unwrap_or_default();
        let checks = without_gil(py, move || molrec::lmdb::set::verify_digests(&paths))
            .map_err(|m| internal_error(&m))?
            .map_err(|e| to_py_err(e, &first))?;
        let mut verified = Vec::with_capacity(checks.len());
        for check in checks {
            let Some(e) = check.error() else {
                verified.push((check.path, check.expected.unwrap_or_default()));
                continue;
            };
            return Err(match &e {
                Error::Set {
                    problem: SetProblem::Digest,
                    shard,
                    detail,
                } => errors_class_call(
                    py,
                    "DigestMismatch",
                    (
                        e.to_string(),
                        SetProblem::Digest.name(),
                        shard.clone(),
                        detail.clone(),
                        check.expected.unwrap_or_default(),
                        check.actual.unwrap_or_default(),
                    ),
                ),
                _ => to_py_err(e, &check.path),
            });
        }
        Ok(verified)
    })
}

/// `manifest` listing its shards as `names`, checked as a manifest read
/// from disk is (plain file names, none twice).
fn renamed(mut manifest: Manifest, names: Vec<String>) -> Result<Manifest, String> {
    if names.len() != manifest.shards.len() {
        return Err(format!(
            "{} names for {} shards",
            names.len(),
            manifest.shards.len()
        ));
    }
    for (shard, name) in manifest.shards.iter_mut().zip(names) {
        shard.file = name;
    }
    Manifest::from_json(&manifest.to_json())
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
    m.add_function(wrap_pyfunction!(file_digest, m)?)?;
    m.add_function(wrap_pyfunction!(verify_digests, m)?)?;
    m.add_function(wrap_pyfunction!(import::import_aselmdb, m)?)?;
    m.add_function(wrap_pyfunction!(read::_after_fork_in_child, m)?)?;
    Ok(())
}
