//! `NativeAseImport`: the Rust half of `mrec.from_ase` and `python -m mrec
//! import`. Python encodes each `Atoms` as the row ASE would write
//! (`ase.db.row.atoms2dict`, `ase.io.jsonio.encode`); the rows go into
//! scratch ASE-LMDB shards beside the output, one per source, and
//! `finish` runs the importer of `mrec import aselmdb` (`mrec_import`)
//! over them: the same decoding, mapping, grouping and report. The scratch
//! shards are removed when the import finishes, fails or is dropped.

use crate::errors::{errors_class_call, guard, internal_error, to_py_err, without_gil};
use mrec_import::{ImportError, Options, Origin, ShardWriter};
use pyo3::exceptions::{PyKeyboardInterrupt, PyRuntimeError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::{Path, PathBuf};

/// One import in progress.
#[pyclass(module = "mrec._native")]
pub struct NativeAseImport {
    /// The import to run at `finish` (its inputs and labels are the
    /// sources, filled in then).
    options: Options,
    tool: String,
    /// Finished scratch shards: (label, path).
    sources: Vec<(String, PathBuf)>,
    /// The source being written.
    current: Option<(String, PathBuf, ShardWriter)>,
    done: bool,
}

/// Asked between rows while the import runs without the GIL: whether
/// Python has a pending signal (Ctrl-C). Only the main thread runs
/// Python's handlers; elsewhere this is always false.
fn python_interrupted() -> bool {
    Python::attach(|py| py.check_signals().is_err())
}

fn import_err(e: ImportError, out: &Path) -> PyErr {
    match e {
        ImportError::Bad(message) => {
            Python::attach(|py| errors_class_call(py, "BadInput", (message,)))
        }
        ImportError::Mrec(e) => to_py_err(e, out),
        ImportError::Interrupted => PyKeyboardInterrupt::new_err(format!(
            "import interrupted; {} is as it was",
            out.display()
        )),
    }
}

/// An import's report as the dict `ImportReport` is made of.
fn report_dict<'py>(
    py: Python<'py>,
    report: &mrec_import::Report,
    out: &Path,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("text", report.text(out))?;
    d.set_item("records", report.records())?;
    d.set_item("frames", report.frames())?;
    d.set_item("rows", report.rows_imported())?;
    d.set_item("rows_read", report.rows_read())?;
    for (section, counts) in report.counts() {
        let m = PyDict::new(py);
        for (what, n) in counts {
            m.set_item(what, n)?;
        }
        d.set_item(section, m)?;
    }
    d.set_item("dropped_samples", report.dropped_samples().to_vec())?;
    d.set_item("secs", report.secs)?;
    d.set_item("xxh3_128", report.digest.as_deref())?;
    Ok(d)
}

/// `mrec import aselmdb` from Python: the ASE-LMDB shards `inputs`
/// (each page-checked first, in this process) into the collection `out`,
/// with the GIL released; `threads` read and decode rows (the records are
/// appended on the calling thread). Returns the report as a dict.
#[pyfunction]
#[pyo3(signature = (inputs, out, group_by=None, order_by=None, index_columns=Vec::new(), skip_bad=false, overwrite=false, threads=1, progress=false))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn import_aselmdb<'py>(
    py: Python<'py>,
    inputs: Vec<PathBuf>,
    out: PathBuf,
    group_by: Option<String>,
    order_by: Option<String>,
    index_columns: Vec<String>,
    skip_bad: bool,
    overwrite: bool,
    threads: usize,
    progress: bool,
) -> PyResult<Bound<'py, PyDict>> {
    guard(|| {
        let mut options = Options::new(inputs, out);
        options.group_by = group_by;
        options.order_by = order_by;
        options.index_columns = index_columns;
        options.skip_bad = skip_bad;
        options.progress = progress;
        options.workers = threads.max(1);
        options.writer.overwrite = overwrite;
        options.interrupted = python_interrupted;
        let result = without_gil(py, || mrec_import::run(&options));
        let report = result
            .map_err(|m| internal_error(&m))?
            .map_err(|e| import_err(e, &options.out))?;
        report_dict(py, &report, &options.out)
    })
}

impl NativeAseImport {
    fn scratch_path(&self, k: usize) -> PathBuf {
        let name = self
            .options
            .out
            .file_name()
            .map_or_else(|| "out".into(), |n| n.to_string_lossy().into_owned());
        let dir = self.options.out.parent().unwrap_or(Path::new("."));
        dir.join(format!(
            ".{name}.{}.{k}.scratch.aselmdb",
            std::process::id()
        ))
    }

    /// Finishes the current scratch shard; one that cannot be finished (a
    /// full disk) is removed. Errors of the scratch shards name the output
    /// (and the scratch file, its file system's free space on a full disk).
    fn close_current(&mut self) -> PyResult<()> {
        if let Some((label, path, writer)) = self.current.take() {
            if let Err(e) = writer.finish() {
                molrec::lmdb::remove_with_lock_file(&path);
                return Err(import_err(e, &self.options.out));
            }
            self.sources.push((label, path));
        }
        Ok(())
    }

    fn remove_scratch(&mut self) {
        if let Some((_, path, writer)) = self.current.take() {
            drop(writer);
            molrec::lmdb::remove_with_lock_file(&path);
        }
        for (_, path) in self.sources.drain(..) {
            molrec::lmdb::remove_with_lock_file(&path);
        }
    }
}

impl Drop for NativeAseImport {
    fn drop(&mut self) {
        self.remove_scratch();
    }
}

#[pymethods]
impl NativeAseImport {
    #[new]
    #[pyo3(signature = (out, tool, group_by=None, order_by=None, index_columns=Vec::new(), skip_bad=false, overwrite=false, progress=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        out: PathBuf,
        tool: String,
        group_by: Option<String>,
        order_by: Option<String>,
        index_columns: Vec<String>,
        skip_bad: bool,
        overwrite: bool,
        progress: bool,
    ) -> Self {
        let mut options = Options::new(Vec::new(), out);
        options.group_by = group_by;
        options.order_by = order_by;
        options.index_columns = index_columns;
        options.skip_bad = skip_bad;
        options.progress = progress;
        options.writer.overwrite = overwrite;
        options.interrupted = python_interrupted;
        NativeAseImport {
            options,
            tool,
            sources: Vec::new(),
            current: None,
            done: false,
        }
    }

    /// Starts a new source named `label` (a file ASE reads, or the
    /// iterable given to `from_ase`); rows added next belong to it.
    fn begin(&mut self, label: String) -> PyResult<()> {
        guard(|| {
            if self.done {
                return Err(PyRuntimeError::new_err("the import has finished"));
            }
            self.close_current()?;
            let path = self.scratch_path(self.sources.len());
            let writer =
                ShardWriter::create(&path, 1).map_err(|e| import_err(e, &self.options.out))?;
            self.current = Some((label, path, writer));
            Ok(())
        })
    }

    /// Adds one row (ASE's JSON text of it) to the current source;
    /// returns its key there (1, 2, ...).
    fn add(&mut self, row: &[u8]) -> PyResult<u64> {
        guard(|| match &mut self.current {
            None => Err(PyRuntimeError::new_err("add before begin")),
            Some((_, _, writer)) => writer
                .append(row)
                .map_err(|e| import_err(e, &self.options.out)),
        })
    }

    /// Skips one key of the current source (a structure Python could not
    /// encode, with `skip_bad`): later keys keep their positions.
    fn skip(&mut self) -> PyResult<u64> {
        match &mut self.current {
            None => Err(PyRuntimeError::new_err("skip before begin")),
            Some((_, _, writer)) => Ok(writer.skip()),
        }
    }

    /// Keys taken in the current source so far.
    fn rows(&self) -> u64 {
        self.current.as_ref().map_or(0, |c| c.2.rows())
    }

    /// Runs the import over every source; returns the report as a dict.
    /// The scratch shards are removed whatever happens.
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        guard(|| {
            if self.done {
                return Err(PyRuntimeError::new_err("the import has finished"));
            }
            self.done = true;
            let closed = self.close_current();
            if let Err(e) = closed {
                self.remove_scratch();
                return Err(e);
            }
            let (labels, inputs): (Vec<String>, Vec<PathBuf>) =
                self.sources.iter().cloned().unzip();
            self.options.inputs = inputs;
            self.options.origin = Origin::Ase {
                tool: self.tool.clone(),
                labels,
            };
            let options = &self.options;
            let result = without_gil(py, || mrec_import::run(options));
            self.remove_scratch();
            let report = result
                .map_err(|m| internal_error(&m))?
                .map_err(|e| import_err(e, &self.options.out))?;
            report_dict(py, &report, &self.options.out)
        })
    }

    /// Gives up: removes the scratch shards; nothing is written at the
    /// output.
    fn abort(&mut self) {
        self.done = true;
        self.remove_scratch();
    }
}
