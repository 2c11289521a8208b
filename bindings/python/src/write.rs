//! `NativeWriter`: the library's streaming `Writer`, taking records in the
//! shape `NativeReader::record` hands back (NumPy arrays, stacked or flat
//! with offsets), converted into the model under the GIL and appended with
//! the GIL released.

use crate::convert::{numpy_to_column, numpy_to_mask, py_to_json};
use crate::errors::{guard, internal_error, to_py_err, without_gil};
use molrec::lmdb::{Writer, WriterOptions};
use molrec::model::*;
use molrec::model_json::{cell_from_json, forcefield_from_json, schema_from_json};
use molrec::typed_json::{f64_to_json, int_to_json, MetaTag};
use molrec::validate::record_declaration;
use molrec::DType;
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

/// A collection being written; nothing is at the path until `finish`.
#[pyclass(frozen, module = "mrec._native")]
pub(crate) struct NativeWriter {
    path: PathBuf,
    writer: Mutex<Option<Writer>>,
    schema: Option<SequenceSchema>,
}

fn document(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Document> {
    match obj {
        None => Ok(Document::new()),
        Some(o) if o.is_none() => Ok(Document::new()),
        Some(o) => match py_to_json(o)? {
            Value::Object(m) => Ok(m),
            other => Err(PyTypeError::new_err(format!(
                "{what} must be a dict, got {other}"
            ))),
        },
    }
}

/// `d[key]` when present and not None.
fn item<'py>(d: &Bound<'py, PyDict>, key: &str) -> PyResult<Option<Bound<'py, PyAny>>> {
    Ok(d.get_item(key)?.filter(|v| !v.is_none()))
}

fn as_dict<'a, 'py>(obj: &'a Bound<'py, PyAny>, what: &str) -> PyResult<&'a Bound<'py, PyDict>> {
    obj.cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err(format!("{what} must be a dict")))
}

impl NativeWriter {
    /// The declared dtype of trajectory column `block.col`, if declared.
    fn declared(&self, block: &str, col: &str) -> Option<DType> {
        Some(
            self.schema
                .as_ref()?
                .blocks
                .get(block)?
                .columns
                .get(col)?
                .dtype,
        )
    }

    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Writer) -> molrec::Result<T> + Send,
    ) -> PyResult<T> {
        let out = without_gil(py, || {
            let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
            w.as_mut().map(f)
        })
        .map_err(|m| internal_error(&m))?;
        match out {
            None => Err(PyValueError::new_err(format!(
                "{}: the writer is finished or closed",
                self.path.display()
            ))),
            Some(r) => r.map_err(|e| to_py_err(e, &self.path)),
        }
    }
}

#[pymethods]
impl NativeWriter {
    #[new]
    #[pyo3(signature = (path, meta, schema=None, forcefield=None, overwrite=false, digest=false))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        meta: &Bound<'_, PyAny>,
        schema: Option<&Bound<'_, PyAny>>,
        forcefield: Option<&Bound<'_, PyAny>>,
        overwrite: bool,
        digest: bool,
    ) -> PyResult<NativeWriter> {
        guard(|| {
            let meta = document(Some(meta), "meta")?;
            let sequence_schema = match schema.filter(|s| !s.is_none()) {
                None => None,
                Some(s) => Some(
                    schema_from_json(&py_to_json(s)?, "sequence_schema")
                        .map_err(|e| to_py_err(e, &path))?,
                ),
            };
            let forcefield = match forcefield.filter(|s| !s.is_none()) {
                None => None,
                Some(f) => Some(
                    forcefield_from_json(&py_to_json(f)?, "forcefield")
                        .map_err(|e| to_py_err(e, &path))?,
                ),
            };
            let header = Header {
                meta,
                sequence_schema: sequence_schema.clone(),
                forcefield,
            };
            let options = WriterOptions {
                overwrite,
                digest,
                ..WriterOptions::default()
            };
            let p = path.clone();
            let writer = without_gil(py, move || Writer::create(&p, header, options))
                .map_err(|m| internal_error(&m))?
                .map_err(|e| to_py_err(e, &path))?;
            Ok(NativeWriter {
                path,
                writer: Mutex::new(Some(writer)),
                schema: sequence_schema,
            })
        })
    }

    /// Records appended so far.
    #[getter]
    fn records(&self) -> PyResult<u64> {
        let w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(w.as_ref().map_or(0, Writer::records))
    }

    /// Validates and writes one record; a refused record (`mrec.Refused`)
    /// leaves the writer as it was.
    #[pyo3(signature = (meta=None, system=None, trajectory=None))]
    fn append(
        &self,
        py: Python<'_>,
        meta: Option<&Bound<'_, PyAny>>,
        system: Option<&Bound<'_, PyAny>>,
        trajectory: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        guard(|| {
            let trajectory = match trajectory.filter(|s| !s.is_none()) {
                None => None,
                Some(t) => {
                    let (mut traj, tags) = self.trajectory_from_py(as_dict(t, "trajectory")?)?;
                    if self.schema.is_none() {
                        state_dtype_tags(&mut traj, &tags);
                    }
                    Some(traj)
                }
            };
            let record = Record {
                meta: document(meta, "meta")?,
                system: match system.filter(|s| !s.is_none()) {
                    None => None,
                    Some(s) => Some(system_from_py(as_dict(s, "system")?)?),
                },
                trajectory,
            };
            self.run(py, move |w| w.append(record))
        })
    }

    /// Writes the index (`index`: own columns, one row per record, with
    /// optional masks and precisions) and `meta`, and installs the file at
    /// its path. Returns the file's content digest when the writer was made
    /// with `digest=True`, else None.
    #[pyo3(signature = (index=None, validity=None, precision=None))]
    fn finish(
        &self,
        py: Python<'_>,
        index: Option<&Bound<'_, PyDict>>,
        validity: Option<&Bound<'_, PyDict>>,
        precision: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Option<String>> {
        guard(|| {
            let mut columns = BTreeMap::new();
            if let Some(index) = index {
                for (name, values) in index.iter() {
                    let name: String = name.extract()?;
                    columns.insert(
                        name.clone(),
                        column_from_py(&values, &name, validity, precision, None)?,
                    );
                }
            }
            let writer = self
                .writer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "{}: the writer is finished or closed",
                        self.path.display()
                    ))
                })?;
            let written = without_gil(py, move || writer.finish(columns))
                .map_err(|m| internal_error(&m))?
                .map_err(|e| to_py_err(e, &self.path))?;
            Ok(written.digest)
        })
    }

    /// Drops the writer unfinished: its partial file is deleted, nothing
    /// reaches the path.
    fn close(&self) {
        let w = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        drop(w);
    }

    /// Whether `finish` or `close` has run.
    #[getter]
    fn closed(&self) -> bool {
        self.writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none()
    }
}

/// A column: values (any array-like), the mask and precision of
/// `validity[name]` / `precision[name]`.
fn column_from_py(
    values: &Bound<'_, PyAny>,
    name: &str,
    validity: Option<&Bound<'_, PyDict>>,
    precision: Option<&Bound<'_, PyDict>>,
    want: Option<DType>,
) -> PyResult<Column> {
    let want = want.or_else(|| DType::canonical_for(name));
    let (data, shape) = numpy_to_column(values, want)?;
    let mut column = Column::new(shape, data);
    if let Some(v) = validity.map(|d| item(d, name)).transpose()?.flatten() {
        column.validity = Some(numpy_to_mask(&v)?);
    }
    if let Some(p) = precision.map(|d| item(d, name)).transpose()?.flatten() {
        column.precision = Some(p.extract()?);
    }
    Ok(column)
}

fn strings(d: Option<Bound<'_, PyAny>>) -> PyResult<BTreeMap<String, String>> {
    match d {
        None => Ok(BTreeMap::new()),
        Some(d) => d.extract(),
    }
}

fn block_from_py(d: &Bound<'_, PyDict>) -> PyResult<Block> {
    let validity = item(d, "validity")?;
    let validity = validity
        .as_ref()
        .map(|v| as_dict(v, "validity"))
        .transpose()?;
    let precision = item(d, "precision")?;
    let precision = precision
        .as_ref()
        .map(|v| as_dict(v, "precision"))
        .transpose()?;
    let mut columns = BTreeMap::new();
    if let Some(cols) = item(d, "columns")? {
        for (name, values) in as_dict(&cols, "columns")?.iter() {
            let name: String = name.extract()?;
            let column = column_from_py(&values, &name, validity, precision, None)?;
            columns.insert(name, column);
        }
    }
    let count = match item(d, "count")? {
        Some(c) => c.extract()?,
        None => columns.values().next().map_or(0, Column::rows),
    };
    Ok(Block {
        count,
        columns,
        structural_shape: item(d, "structural_shape")?
            .map(|s| s.extract())
            .transpose()?,
        targets: strings(item(d, "targets")?)?,
        attributes: document(item(d, "attributes")?.as_ref(), "attributes")?,
    })
}

fn cell_from_py(d: &Bound<'_, PyAny>) -> PyResult<Cell> {
    let json = py_to_json(d)?;
    // `defined` is this package's name of canonical JSON's `cell_defined`.
    let json = match json {
        Value::Object(mut m) => {
            if let Some(v) = m.remove("defined") {
                m.insert("cell_defined".into(), v);
            }
            m.remove("present");
            Value::Object(m)
        }
        other => other,
    };
    cell_from_json(&json, "cell").map_err(|e| PyValueError::new_err(e.to_string()))
}

fn system_from_py(d: &Bound<'_, PyDict>) -> PyResult<Frame> {
    let mut meta_types = BTreeMap::new();
    if let Some(types) = item(d, "meta_types")? {
        for (k, v) in as_dict(&types, "meta_types")?.iter() {
            let (k, v): (String, String) = (k.extract()?, v.extract()?);
            let tag = MetaTag::parse(&v)
                .ok_or_else(|| PyValueError::new_err(format!("meta_types.{k}: no tag {v:?}")))?;
            meta_types.insert(k, tag);
        }
    }
    let meta = document(item(d, "meta")?.as_ref(), "system meta")?;
    // Keys without a stated tag get the inferred one (canonical JSON's rule).
    for (k, v) in &meta {
        meta_types
            .entry(k.clone())
            .or_insert_with(|| MetaTag::infer(v));
    }
    let mut blocks = BTreeMap::new();
    if let Some(b) = item(d, "blocks")? {
        for (name, block) in as_dict(&b, "blocks")?.iter() {
            let name: String = name.extract()?;
            blocks.insert(name, block_from_py(as_dict(&block, "a block")?)?);
        }
    }
    Ok(Frame {
        meta,
        meta_types,
        blocks,
        cell: item(d, "cell")?.map(|c| cell_from_py(&c)).transpose()?,
    })
}

/// The per-step tag a NumPy array of `(frames,)` or `(frames, width)`
/// says: its dtype and width (`None`: none fits, the value's inferred tag
/// stands).
fn tag_of(data: &ColumnData, width: Option<usize>) -> Option<MetaTag> {
    Some(match (data, width) {
        (ColumnData::F64(_), None) => MetaTag::F64,
        (ColumnData::I32(_), None) => MetaTag::I32,
        (ColumnData::I64(_), None) => MetaTag::I64,
        (ColumnData::U32(_), None) => MetaTag::U32,
        (ColumnData::U64(_), None) => MetaTag::U64,
        (ColumnData::Bool(_), None) => MetaTag::Bool,
        (ColumnData::String(_), None) => MetaTag::String,
        (ColumnData::F64(_), Some(3)) => MetaTag::F64x3,
        (ColumnData::F64(_), Some(6)) => MetaTag::F64x6,
        (ColumnData::F64(_), Some(9)) => MetaTag::F64x9,
        (ColumnData::I32(_), Some(3)) => MetaTag::I32x3,
        (ColumnData::I64(_), Some(3)) => MetaTag::I64x3,
        (ColumnData::U32(_), Some(3)) => MetaTag::U32x3,
        (ColumnData::U64(_), Some(3)) => MetaTag::U64x3,
        (ColumnData::Bool(_), Some(3)) => MetaTag::Bool3,
        _ => return None,
    })
}

/// Without a given declaration, a record whose arrays' dtypes say other
/// per-step tags than inference from the values would (an i32 or u64 key
/// is inferred i64, a vector key json) states its own declaration: the one
/// the library infers from its frames, with those tags. A record without
/// frames states nothing (it takes the collection's, as inferred), and one
/// the inference refuses is left to the writer, which refuses it with its
/// path.
fn state_dtype_tags(traj: &mut Trajectory, tags: &BTreeMap<String, MetaTag>) {
    if traj.frames.is_empty() || tags.is_empty() {
        return;
    }
    let Ok(mut decl) = record_declaration(traj, "trajectory") else {
        return;
    };
    let mut differs = false;
    for (key, tag) in tags {
        if let Some(m) = decl.schema.meta.get_mut(key) {
            differs |= m.tag != *tag;
            m.tag = *tag;
        }
    }
    // Only then: a stated declaration is the record's whole one (blocks
    // too), which records presenting different subsets of blocks or
    // columns must not state (they are refused as outside the others').
    if differs {
        traj.schema = Some(decl.schema);
    }
}

/// Element `i` of a step key's values as typed JSON.
fn scalar(values: &ColumnData, i: usize) -> Value {
    match values {
        ColumnData::F64(v) => f64_to_json(v[i]),
        ColumnData::I8(v) => int_to_json(v[i].into()),
        ColumnData::I16(v) => int_to_json(v[i].into()),
        ColumnData::I32(v) => int_to_json(v[i].into()),
        ColumnData::I64(v) => int_to_json(v[i].into()),
        ColumnData::U8(v) => int_to_json(v[i].into()),
        ColumnData::U16(v) => int_to_json(v[i].into()),
        ColumnData::U32(v) => int_to_json(v[i].into()),
        ColumnData::U64(v) => int_to_json(v[i].into()),
        ColumnData::Bool(v) => Value::Bool(v[i]),
        ColumnData::String(v) => Value::String(v[i].clone()),
        ColumnData::C64(v) => Value::Array(vec![
            f64_to_json(v[i][0].into()),
            f64_to_json(v[i][1].into()),
        ]),
        ColumnData::C128(v) => Value::Array(vec![f64_to_json(v[i][0]), f64_to_json(v[i][1])]),
    }
}

/// Rows `rows` of a column whose leading axis is rows, as a model column.
fn rows_of(
    data: &ColumnData,
    shape: &[u64],
    mask: Option<&[bool]>,
    rows: std::ops::Range<usize>,
) -> Column {
    let width: usize = shape.iter().skip(1).map(|&d| d as usize).product();
    let mut out_shape = vec![rows.len() as u64];
    out_shape.extend_from_slice(shape.get(1..).unwrap_or_default());
    let mut c = Column::new(out_shape, data.slice(rows.start * width..rows.end * width));
    c.validity = mask.map(|m| m[rows.start.min(m.len())..rows.end.min(m.len())].to_vec());
    c.normalize_mask();
    c
}

impl NativeWriter {
    /// The trajectory, and the per-step tags its arrays' dtypes say.
    fn trajectory_from_py(
        &self,
        d: &Bound<'_, PyDict>,
    ) -> PyResult<(Trajectory, BTreeMap<String, MetaTag>)> {
        let mut tags = BTreeMap::new();
        let step = item(d, "step")?.ok_or_else(|| PyKeyError::new_err("trajectory: no `step`"))?;
        let steps = match numpy_to_column(&step, Some(DType::I64))? {
            (ColumnData::I64(v), _) => v,
            (data, _) => {
                let n = data.len();
                (0..n)
                    .map(|i| match scalar(&data, i) {
                        Value::Number(x) => x.as_i64().ok_or(()),
                        _ => Err(()),
                    })
                    .collect::<Result<Vec<i64>, ()>>()
                    .map_err(|_| PyTypeError::new_err("trajectory.step must be integers"))?
            }
        };
        let n = steps.len();
        let times = match item(d, "time")? {
            None => None,
            Some(t) => match numpy_to_column(&t, Some(DType::F64))? {
                (ColumnData::F64(v), _) if v.len() == n => Some(v),
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "trajectory.time must be {n} float64 values"
                    )))
                }
            },
        };
        let mut frames: Vec<Step> = (0..n)
            .map(|k| Step {
                step: steps[k],
                time: times.as_ref().map(|t| t[k]),
                ..Step::default()
            })
            .collect();
        if let Some(meta) = item(d, "meta")? {
            for (key, values) in as_dict(&meta, "trajectory.meta")?.iter() {
                let key: String = key.extract()?;
                if values.is_instance_of::<PyList>() {
                    let list = values.cast::<PyList>()?;
                    if list.len() != n {
                        return Err(PyValueError::new_err(format!(
                            "trajectory.meta.{key}: {} values for {n} frames",
                            list.len()
                        )));
                    }
                    for (k, v) in list.iter().enumerate() {
                        frames[k].meta.insert(key.clone(), py_to_json(&v)?);
                    }
                    continue;
                }
                let (data, shape) = numpy_to_column(&values, None)?;
                if shape.first() != Some(&(n as u64)) || shape.len() > 2 {
                    return Err(PyValueError::new_err(format!(
                        "trajectory.meta.{key}: shape {shape:?}, expected ({n},) or ({n}, width)"
                    )));
                }
                let width = shape.get(1).map(|&w| w as usize);
                if let Some(tag) = tag_of(&data, width) {
                    tags.insert(key.clone(), tag);
                }
                for (k, frame) in frames.iter_mut().enumerate() {
                    let v = match width {
                        None => scalar(&data, k),
                        Some(w) => {
                            Value::Array((k * w..(k + 1) * w).map(|i| scalar(&data, i)).collect())
                        }
                    };
                    frame.meta.insert(key.clone(), v);
                }
            }
        }
        if let Some(blocks) = item(d, "blocks")? {
            for (name, block) in as_dict(&blocks, "trajectory.blocks")?.iter() {
                let name: String = name.extract()?;
                self.block_frames(&name, as_dict(&block, "a block")?, &mut frames)?;
            }
        }
        if let Some(cell) = item(d, "cell")? {
            let cell = as_dict(&cell, "trajectory.cell")?;
            let get = |key: &str, want: DType| -> PyResult<ColumnData> {
                let v = item(cell, key)?
                    .ok_or_else(|| PyKeyError::new_err(format!("trajectory.cell: no `{key}`")))?;
                Ok(numpy_to_column(&v, Some(want))?.0)
            };
            let present = match item(cell, "present")? {
                Some(p) => numpy_to_mask(&p)?,
                None => vec![true; n],
            };
            let (ColumnData::F64(vectors), ColumnData::F64(origin)) =
                (get("vectors", DType::F64)?, get("origin", DType::F64)?)
            else {
                return Err(PyTypeError::new_err(
                    "trajectory.cell: vectors and origin are float64",
                ));
            };
            let (ColumnData::Bool(boundary), ColumnData::Bool(defined)) =
                (get("boundary", DType::Bool)?, get("defined", DType::Bool)?)
            else {
                return Err(PyTypeError::new_err(
                    "trajectory.cell: boundary and defined are bool",
                ));
            };
            if present.len() != n
                || vectors.len() != 9 * n
                || origin.len() != 3 * n
                || boundary.len() != 3 * n
                || defined.len() != n
            {
                return Err(PyValueError::new_err(format!(
                    "trajectory.cell: every array has {n} frames (vectors (n, 3, 3), origin and boundary (n, 3))"
                )));
            }
            for (k, frame) in frames.iter_mut().enumerate() {
                if present[k] {
                    let mut c = Cell::UNDEFINED;
                    c.vectors.copy_from_slice(&vectors[9 * k..9 * k + 9]);
                    c.origin.copy_from_slice(&origin[3 * k..3 * k + 3]);
                    c.boundary.copy_from_slice(&boundary[3 * k..3 * k + 3]);
                    c.defined = defined[k];
                    frame.cell = Some(c);
                }
            }
        }
        Ok((
            Trajectory {
                schema: None,
                frames,
            },
            tags,
        ))
    }

    /// A block given over the frames (stacked `(frames, rows, ...)`, or
    /// flat rows with `offsets`), presented at every frame where it is
    /// `present` (default: every frame).
    fn block_frames(&self, name: &str, d: &Bound<'_, PyDict>, frames: &mut [Step]) -> PyResult<()> {
        let n = frames.len();
        let at = |what: String| PyValueError::new_err(format!("trajectory.blocks.{name}: {what}"));
        let present = match item(d, "present")? {
            Some(p) => numpy_to_mask(&p)?,
            None => vec![true; n],
        };
        if present.len() != n {
            return Err(at(format!(
                "present has {} values for {n} frames",
                present.len()
            )));
        }
        // Absent only before it first appears: a block present at a frame
        // is present or emptied (0 rows) at every later one. (An absent
        // frame would otherwise carry the last update forward.)
        if let Some(first) = present.iter().position(|&p| p) {
            if let Some(k) = present[first..].iter().position(|&p| !p) {
                return Err(at(format!(
                    "absent at frame {} after it appeared at frame {first}: empty it (0 rows) instead",
                    first + k
                )));
            }
        }
        let has_columns = match item(d, "columns")? {
            Some(c) => c.len().unwrap_or(0) > 0,
            None => false,
        };
        let offsets: Option<Vec<usize>> = match item(d, "offsets")? {
            // A block without columns: its rows are its counts.
            None if !has_columns => match item(d, "count")? {
                Some(c) => match numpy_to_column(&c, Some(DType::I64))? {
                    (ColumnData::I64(v), _) if v.len() == n && v.iter().all(|&x| x >= 0) => {
                        let mut o = vec![0usize];
                        for x in v {
                            o.push(o[o.len() - 1] + x as usize);
                        }
                        Some(o)
                    }
                    _ => return Err(at(format!("count must be {n} non-negative integers"))),
                },
                None => None,
            },
            None => None,
            Some(o) => match numpy_to_column(&o, Some(DType::I64))? {
                (ColumnData::I64(v), _) if v.len() == n + 1 && v.iter().all(|&x| x >= 0) => {
                    Some(v.into_iter().map(|x| x as usize).collect())
                }
                _ => {
                    return Err(at(format!(
                        "offsets must be {} non-negative integers",
                        n + 1
                    )))
                }
            },
        };
        let validity = item(d, "validity")?;
        let validity = validity
            .as_ref()
            .map(|v| as_dict(v, "validity"))
            .transpose()?;
        let targets = strings(item(d, "targets")?)?;
        let structural_shape: Option<Vec<u64>> = item(d, "structural_shape")?
            .map(|s| s.extract())
            .transpose()?;
        // Each column flattened to rows: (data, row shape [rows, trailing..], mask).
        let mut columns = Vec::new();
        let mut stacked_rows: Option<usize> = None;
        if let Some(cols) = item(d, "columns")? {
            for (col, values) in as_dict(&cols, "columns")?.iter() {
                let col: String = col.extract()?;
                let want = self
                    .declared(name, &col)
                    .or_else(|| DType::canonical_for(&col));
                let (data, mut shape) = numpy_to_column(&values, want)?;
                let mut mask = match validity.map(|v| item(v, &col)).transpose()?.flatten() {
                    Some(m) => {
                        let (ColumnData::Bool(m), _) = numpy_to_column(&m, Some(DType::Bool))?
                        else {
                            return Err(at(format!("validity.{col} must be bool")));
                        };
                        Some(m)
                    }
                    None => None,
                };
                if offsets.is_none() {
                    // Stacked: (frames, rows, trailing..) -> (frames * rows, trailing..).
                    if shape.len() < 2 || shape[0] != n as u64 {
                        return Err(at(format!(
                            "column {col} has shape {shape:?}: without offsets, (frames={n}, rows, ...)"
                        )));
                    }
                    let rows = shape[1] as usize;
                    if stacked_rows.is_some_and(|r| r != rows) {
                        return Err(at(format!(
                            "column {col}: {rows} rows, other columns differ"
                        )));
                    }
                    stacked_rows = Some(rows);
                    let total = shape[0] * shape[1];
                    shape.splice(0..2, [total]);
                } else if shape.is_empty() {
                    return Err(at(format!("column {col} has no leading axis of rows")));
                }
                if let Some(m) = &mut mask {
                    if m.len() as u64 != shape[0] {
                        return Err(at(format!(
                            "validity.{col} has {} values for {} rows",
                            m.len(),
                            shape[0]
                        )));
                    }
                    if m.iter().all(|&b| b) {
                        mask = None;
                    }
                }
                columns.push((col, data, shape, mask));
            }
        }
        let row_range = |k: usize| -> std::ops::Range<usize> {
            match (&offsets, stacked_rows) {
                (Some(o), _) => o[k]..o[k + 1].max(o[k]),
                (None, Some(r)) => k * r..(k + 1) * r,
                (None, None) => 0..0,
            }
        };
        for (k, frame) in frames.iter_mut().enumerate() {
            if !present[k] {
                continue;
            }
            let rows = row_range(k);
            let mut block = Block {
                count: rows.len() as u64,
                targets: targets.clone(),
                structural_shape: structural_shape.clone().filter(|_| !rows.is_empty()),
                ..Block::default()
            };
            for (col, data, shape, mask) in &columns {
                if rows.end as u64 > shape[0] {
                    return Err(at(format!(
                        "column {col} has {} rows, frame {k} needs {}",
                        shape[0], rows.end
                    )));
                }
                block.columns.insert(
                    col.clone(),
                    rows_of(data, shape, mask.as_deref(), rows.clone()),
                );
            }
            frame.blocks.insert(name.to_string(), block);
        }
        Ok(())
    }
}
