//! Frames by global ordinal (`Collection.frames`): each one resolved by
//! `Reader::frames` (the record's system and each block's update in
//! effect, nothing else), all of them in one read transaction with the GIL
//! released, gathered into the flat layout of a batch.

use crate::acc::{BlockAcc, CellAcc, SystemAcc};
use crate::convert::{column_to_numpy, document_to_py, json_to_py, vec_to_numpy};
use molrec::arrays::StepSeries;
use molrec::lmdb::{Set, SetFrame};
use molrec::model::{Document, SequenceSchema};
use molrec::{Clause, Error};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::collections::{BTreeMap, HashMap};

/// The per-step keys through the frames, one series per declared key.
struct StepMetaAcc {
    series: Vec<(String, StepSeries)>,
}

impl StepMetaAcc {
    fn new(schema: &SequenceSchema) -> StepMetaAcc {
        StepMetaAcc {
            series: schema
                .meta
                .iter()
                .map(|(key, decl)| (key.clone(), StepSeries::new(decl.tag)))
                .collect(),
        }
    }

    /// One frame's meta (every declared key: the reader checked it).
    fn push(&mut self, meta: &Document, at: u64) -> molrec::Result<()> {
        for (key, series) in &mut self.series {
            let value = meta.get(key.as_str()).unwrap_or(&serde_json::Value::Null);
            series.push(value).map_err(|e| {
                Error::refused(Clause::TypedValue, format!("frames[{at}].meta.{key}"), e)
            })?;
        }
        Ok(())
    }

    fn into_py<'py>(
        self,
        py: Python<'py>,
        frames: usize,
    ) -> PyResult<(Bound<'py, PyDict>, Bound<'py, PyDict>)> {
        let (meta, types) = (PyDict::new(py), PyDict::new(py));
        for (key, series) in self.series {
            match series {
                StepSeries::Typed { tag, values } => {
                    let shape = match tag.shape().1 {
                        Some(width) => vec![frames, width],
                        None => vec![frames],
                    };
                    meta.set_item(&key, column_to_numpy(py, values, &shape)?)?;
                    types.set_item(&key, tag.name())?;
                }
                StepSeries::Json(values) => {
                    let list = PyList::empty(py);
                    for v in &values {
                        list.append(json_to_py(py, v)?)?;
                    }
                    meta.set_item(&key, list)?;
                    types.set_item(&key, "json")?;
                }
            }
        }
        Ok((meta, types))
    }
}

/// Frames gathered in the order asked.
pub(crate) struct FramesAcc {
    ordinals: Vec<i64>,
    records: Vec<i64>,
    positions: Vec<i64>,
    steps: Vec<i64>,
    times: Option<Vec<f64>>,
    meta: StepMetaAcc,
    blocks: BTreeMap<String, BlockAcc>,
    cell: CellAcc,
    /// The systems of the frames' records, each once, in the order met
    /// (when asked for).
    systems: Option<SystemAcc>,
    system_of: HashMap<u64, i64>,
    /// For each frame, its record's system among `systems`.
    system_index: Vec<i64>,
    /// Each frame's record meta, when asked for.
    record_meta: Option<Vec<Document>>,
}

impl FramesAcc {
    /// Frames `js` of the collection (each in range) read in one read
    /// transaction (of each shard); with `systems`, the systems of their
    /// records, and with `record_meta`, each frame's record meta.
    /// `tick` is called after every frame (the reader's map budget looked
    /// at within a long read).
    pub(crate) fn read(
        reader: &Set,
        js: &[u64],
        systems: bool,
        record_meta: bool,
        tick: &(dyn Fn() + Sync),
    ) -> molrec::Result<Self> {
        let schema = reader.schema()?;
        let mut acc = FramesAcc {
            ordinals: Vec::with_capacity(js.len()),
            records: Vec::with_capacity(js.len()),
            positions: Vec::with_capacity(js.len()),
            steps: Vec::with_capacity(js.len()),
            times: None,
            meta: StepMetaAcc::new(schema),
            blocks: schema
                .blocks
                .keys()
                .map(|name| (name.clone(), BlockAcc::default()))
                .collect(),
            cell: CellAcc::default(),
            systems: systems.then(SystemAcc::default),
            system_of: HashMap::new(),
            system_index: Vec::with_capacity(js.len()),
            record_meta: record_meta.then(Vec::new),
        };
        let txn = record_meta.then(|| reader.txn());
        let mut i = 0usize;
        reader.frames(js, |frame| {
            acc.push(frame, js[i])?;
            if let (Some(metas), Some(txn)) = (&mut acc.record_meta, &txn) {
                metas.push(txn.record_meta(frame.record)?);
            }
            i += 1;
            tick();
            Ok(())
        })?;
        Ok(acc)
    }

    fn push(&mut self, at: &SetFrame<'_, '_>, j: u64) -> molrec::Result<()> {
        let frame = at.frame;
        let n = self.ordinals.len();
        self.ordinals.push(j as i64);
        self.records.push(at.record as i64);
        self.positions.push(frame.position as i64);
        self.steps.push(frame.step);
        match (frame.time, &mut self.times) {
            (Some(t), Some(times)) => times.push(t),
            (Some(t), None) => {
                let mut times = vec![f64::NAN; n];
                times.push(t);
                self.times = Some(times);
            }
            (None, Some(times)) => times.push(f64::NAN),
            (None, None) => {}
        }
        self.meta.push(&frame.meta, j)?;
        for (name, acc) in &mut self.blocks {
            acc.push_frame(frame.block(name).as_ref())
                .map_err(|e| e.within(&format!("frames[{j}].blocks.{name}")))?;
        }
        self.cell.push(frame.cell.as_ref());
        if let Some(systems) = &mut self.systems {
            let next = self.system_of.len() as i64;
            let index = *self.system_of.entry(at.record).or_insert(next);
            if index == next {
                systems.add(frame.shared_system());
            }
            self.system_index.push(index);
        }
        Ok(())
    }

    /// The frames as Python (see `Collection.frames`).
    pub(crate) fn into_py<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let n = self.ordinals.len();
        let d = PyDict::new(py);
        d.set_item("frames", vec_to_numpy(py, self.ordinals))?;
        d.set_item("record", vec_to_numpy(py, self.records))?;
        d.set_item("position", vec_to_numpy(py, self.positions))?;
        if let Some(metas) = self.record_meta {
            let list = PyList::empty(py);
            for m in &metas {
                list.append(document_to_py(py, m)?)?;
            }
            d.set_item("meta", list)?;
        }
        if let Some(systems) = self.systems {
            d.set_item("system", systems.into_py(py)?)?;
            d.set_item("system_index", vec_to_numpy(py, self.system_index))?;
        }
        let t = PyDict::new(py);
        t.set_item("n_frames", n)?;
        t.set_item("step", vec_to_numpy(py, self.steps))?;
        match self.times {
            Some(times) => t.set_item("time", vec_to_numpy(py, times))?,
            None => t.set_item("time", py.None())?,
        }
        let (meta, types) = self.meta.into_py(py, n)?;
        t.set_item("meta", meta)?;
        t.set_item("meta_types", types)?;
        let blocks = PyDict::new(py);
        for (name, acc) in self.blocks {
            if acc.any_present() {
                blocks.set_item(&name, acc.into_py(py, false)?)?;
            }
        }
        t.set_item("blocks", blocks)?;
        if self.cell.any_present() {
            t.set_item("cell", self.cell.into_py(py)?)?;
        } else {
            t.set_item("cell", py.None())?;
        }
        d.set_item("trajectory", t)?;
        Ok(d)
    }
}
