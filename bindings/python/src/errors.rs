//! Library errors and panics into `mrec`'s Python exceptions: [`guard`]
//! around every entry point, [`without_gil`] around the work done with the
//! GIL released, [`to_py_err`] for every library error.

use molrec::Error;
use pyo3::exceptions::{PyFileNotFoundError, PyOSError, PyPermissionError};
use pyo3::prelude::*;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

/// Runs `f`, turning a panic into `mrec.InternalError`.
pub(crate) fn guard<T>(f: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => Err(internal_error(&panic_message(payload.as_ref()))),
    }
}

/// Runs `f` with the GIL released, a panic caught inside (so it never
/// unwinds through PyO3's release of the GIL).
pub(crate) fn without_gil<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> T + Send,
) -> Result<T, String> {
    py.detach(|| {
        catch_unwind(AssertUnwindSafe(f)).map_err(|payload| panic_message(payload.as_ref()))
    })
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

/// An exception class of `mrec._errors`, instantiated with `args`.
pub(crate) fn errors_class_call<'py>(
    py: Python<'py>,
    name: &str,
    args: impl pyo3::call::PyCallArgs<'py>,
) -> PyErr {
    let made = py
        .import("mrec._errors")
        .and_then(|m| m.getattr(name))
        .and_then(|class| class.call1(args));
    match made {
        Ok(value) => PyErr::from_value(value),
        Err(e) => e,
    }
}

/// `mrec.InternalError` (a panic of the Rust side).
pub(crate) fn internal_error(message: &str) -> PyErr {
    Python::attach(|py| {
        errors_class_call(
            py,
            "InternalError",
            (format!("internal error in mrec's Rust code: {message}"),),
        )
    })
}

/// The Python exception of a library error about the file at `file`.
pub(crate) fn to_py_err(e: Error, file: &Path) -> PyErr {
    let file = file.display().to_string();
    Python::attach(|py| match e {
        Error::Refused {
            clause,
            ref at,
            ref detail,
        } => errors_class_call(
            py,
            "Refused",
            (e.to_string(), clause.id(), at.clone(), file, detail.clone()),
        ),
        Error::Uncommitted => {
            let clause = e.clause().map(|c| c.id()).unwrap_or_default();
            errors_class_call(py, "Uncommitted", (e.to_string(), clause, "", file))
        }
        Error::Busy(ref what) => {
            let clause = e.clause().map(|c| c.id()).unwrap_or_default();
            errors_class_call(py, "Busy", (e.to_string(), clause, "", file, what.clone()))
        }
        Error::Io(io) => {
            // The library names the file of most of its errors already.
            let text = io.to_string();
            let message = match text.starts_with(&file) {
                true => text,
                false => format!("{file}: {text}"),
            };
            match (io.raw_os_error(), io.kind()) {
                (Some(errno), _) => PyOSError::new_err((errno, message)),
                (None, std::io::ErrorKind::NotFound) => PyFileNotFoundError::new_err(message),
                (None, std::io::ErrorKind::PermissionDenied) => PyPermissionError::new_err(message),
                _ => PyOSError::new_err(message),
            }
        }
        Error::Lmdb(message) => errors_class_call(py, "LmdbError", (format!("{file}: {message}"),)),
        Error::Set {
            problem,
            ref shard,
            ref detail,
        } => errors_class_call(
            py,
            "SetRefused",
            (e.to_string(), problem.name(), shard.clone(), detail.clone()),
        ),
        // The shard's own error, about the shard's file.
        Error::InShard { shard, error } => to_py_err(*error, &shard),
    })
}
