//! The streaming writer: records appended one at a time, `meta` last.
//!
//! Commit protocol: encoded keys and values are buffered up to
//! `WriterOptions::batch_bytes` and written in one transaction per batch;
//! the last transaction writes the `index` and then `meta`. A file whose
//! writer died before that last commit has no `meta` key, and every reader
//! refuses it as uncommitted. Memory holds one batch and four small numbers
//! per record (for the index), never the records themselves.

use super::{
    frame_key, lmdb_error, record_key, system_key, Db, FF_KEY, INDEX_KEY, LAYOUT, LAYOUT_VERSION,
    META_KEY,
};
use crate::error::{Error, Result};
use crate::frame_bytes::{encode, FrameInfo};
use crate::model::*;
use crate::validate;
use heed::{Env, EnvFlags, EnvOpenOptions, MdbError, WithoutTls};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};

/// How a writer behaves.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Replace an existing file at the path (otherwise refuse to touch it).
    pub overwrite: bool,
    /// Bytes of encoded values buffered before a transaction commits them.
    pub batch_bytes: usize,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            overwrite: false,
            batch_bytes: 32 << 20,
        }
    }
}

/// Writes one collection file, record after record.
pub struct Writer {
    env: Option<Env<WithoutTls>>,
    db: Db,
    path: PathBuf,
    // Held for the writer's life: a second writer's `try_lock` fails.
    _lock: File,
    options: WriterOptions,
    meta: Document,
    given_schema: Option<SequenceSchema>,
    derived_schema: validate::DerivedSchema,
    batch: Vec<(Vec<u8>, Vec<u8>)>,
    batch_size: usize,
    n_frames: Vec<u64>,
    n_atoms: Vec<u64>,
    has_trajectory: Vec<bool>,
    total_frames: u64,
    scratch: Vec<u8>,
}

impl Writer {
    /// Creates the file and checks the collection document, the declaration
    /// (when given) and the force field.
    pub fn create(path: &Path, mut header: Header, options: WriterOptions) -> Result<Writer> {
        validate::prepare_collection_meta(&mut header.meta)?;
        if let Some(schema) = &header.sequence_schema {
            validate::check_schema(schema, "sequence_schema")?;
        }
        if let Some(ff) = &mut header.forcefield {
            validate::prepare_forcefield(ff)?;
        }
        let lock = claim(path, options.overwrite)?;
        let mut env_options = EnvOpenOptions::new().read_txn_without_tls();
        env_options.map_size(64 << 20).max_dbs(0);
        // SAFETY: NO_SUB_DIR and NO_SYNC are valid flags for a writable env.
        // NO_SYNC: intermediate commits need not reach the disk before the
        // last one; `finish` syncs before it writes `meta`.
        unsafe { env_options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC) };
        // SAFETY: the file was just created (or emptied) under our exclusive
        // lock; no other mapping of it is written while this Env lives.
        let env = unsafe { env_options.open(path) }.map_err(lmdb_error)?;
        let mut txn = env.write_txn().map_err(lmdb_error)?;
        let db: Db = env.create_database(&mut txn, None).map_err(lmdb_error)?;
        txn.commit().map_err(lmdb_error)?;
        let mut writer = Writer {
            env: Some(env),
            db,
            path: path.to_path_buf(),
            _lock: lock,
            options,
            meta: header.meta,
            given_schema: header.sequence_schema,
            derived_schema: validate::DerivedSchema::default(),
            batch: Vec::new(),
            batch_size: 0,
            n_frames: Vec::new(),
            n_atoms: Vec::new(),
            has_trajectory: Vec::new(),
            total_frames: 0,
            scratch: Vec::new(),
        };
        if let Some(ff) = header.forcefield {
            let info = FrameInfo {
                meta: ff.document,
                ..FrameInfo::default()
            };
            encode(&ff.tables, &info, false, &mut writer.scratch);
            let value = std::mem::take(&mut writer.scratch);
            writer.push(FF_KEY.to_vec(), value)?;
        }
        Ok(writer)
    }

    /// Number of records appended so far.
    pub fn records(&self) -> u64 {
        self.n_frames.len() as u64
    }

    /// Number of frames written so far.
    pub fn frames(&self) -> u64 {
        self.total_frames
    }

    /// Validates and writes one record.
    pub fn append(&mut self, mut record: Record) -> Result<()> {
        let r = self.records();
        let at = format!("records[{r}]");
        let schema = match &self.given_schema {
            Some(s) => s,
            None => {
                if let Some(traj) = &record.trajectory {
                    let tat = format!("{at}.trajectory");
                    let decl = validate::record_declaration(traj, &tat)?;
                    // Merge into a copy: a refused record leaves the declaration as it was.
                    let mut merged = self.derived_schema.clone();
                    merged.merge(&decl, &tat)?;
                    self.derived_schema = merged;
                }
                self.derived_schema.schema()
            }
        };
        validate::prepare_record(&mut record, schema, &at)?;
        self.encode_record(r, record)
    }

    fn encode_record(&mut self, r: u64, record: Record) -> Result<()> {
        if !record.meta.is_empty() {
            let value = serde_json::to_vec(&record.meta).map_err(|e| Error::Lmdb(e.to_string()))?;
            self.push(record_key(r).to_vec(), value)?;
        }
        let mut n_atoms = None;
        if let Some(system) = record.system {
            n_atoms = Some(system.blocks.get("atoms").map_or(0, |b| b.count));
            let info = FrameInfo {
                meta: system.meta,
                meta_types: Some(system.meta_types),
                cell: system.cell,
                ..FrameInfo::default()
            };
            encode(&system.blocks, &info, true, &mut self.scratch);
            let value = std::mem::take(&mut self.scratch);
            self.push(system_key(r).to_vec(), value)?;
        }
        let mut frames = 0u64;
        let has_trajectory = record.trajectory.is_some();
        if let Some(traj) = record.trajectory {
            // Carry-forward state of this record only: it starts empty, so the
            // first frame restates every block it presents.
            let mut current: BTreeMap<String, Block> = BTreeMap::new();
            let mut current_cell: Option<Cell> = None;
            for step in traj.frames {
                // Only blocks that differ bit for bit from what carries
                // forward are written; they then become what carries forward.
                let mut changed = BTreeMap::new();
                for (name, block) in step.blocks {
                    if n_atoms.is_none() && name == "atoms" {
                        n_atoms = Some(block.count);
                    }
                    if current.get(&name).is_some_and(|c| c.same_bits(&block)) {
                        continue;
                    }
                    changed.insert(name, block);
                }
                let cell = match step.cell {
                    Some(cell) if current_cell.is_none_or(|c| !c.same_bits(&cell)) => {
                        current_cell = Some(cell);
                        Some(cell)
                    }
                    _ => None,
                };
                let info = FrameInfo {
                    meta: step.meta,
                    meta_types: None,
                    step: Some(step.step),
                    time: step.time,
                    cell,
                };
                encode(&changed, &info, false, &mut self.scratch);
                current.extend(changed);
                let value = std::mem::take(&mut self.scratch);
                let j = self.total_frames + frames;
                self.push(frame_key(j).to_vec(), value)?;
                frames += 1;
            }
        }
        self.n_frames.push(frames);
        self.n_atoms.push(n_atoms.unwrap_or(0));
        self.has_trajectory.push(has_trajectory);
        self.total_frames += frames;
        Ok(())
    }

    fn push(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.batch_size += key.len() + value.len();
        self.batch.push((key, value));
        if self.batch_size >= self.options.batch_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered batch in one transaction, growing the map on `MDB_MAP_FULL`.
    fn flush(&mut self) -> Result<()> {
        let env = self
            .env
            .as_ref()
            .ok_or_else(|| Error::Lmdb("writer already closed".into()))?;
        self.batch.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        loop {
            let attempt = (|| -> heed::Result<()> {
                let mut txn = env.write_txn()?;
                for (k, v) in &self.batch {
                    self.db.put(&mut txn, k, v)?;
                }
                txn.commit()
            })();
            match attempt {
                Ok(()) => break,
                Err(heed::Error::Mdb(MdbError::MapFull)) => {
                    let grown = env
                        .info()
                        .map_size
                        .saturating_mul(2)
                        .max(self.batch_size.saturating_mul(4));
                    let page = 1 << 20;
                    // SAFETY: the failed transaction was dropped (aborted);
                    // this Env is private to the writer, so no transaction is active.
                    unsafe { env.resize(grown.div_ceil(page) * page) }.map_err(lmdb_error)?;
                }
                Err(e) => return Err(lmdb_error(e)),
            }
        }
        self.batch.clear();
        self.batch_size = 0;
        Ok(())
    }

    /// Writes the index (the binding's four columns and the collection's own
    /// `index` columns) and `meta`, commits, and syncs the file.
    pub fn finish(mut self, mut index: BTreeMap<String, Column>) -> Result<()> {
        let n = self.records();
        validate::prepare_index(&mut index, n)?;
        let mut first = Vec::with_capacity(self.n_frames.len());
        let mut sum = 0u64;
        for &f in &self.n_frames {
            first.push(sum);
            sum += f;
        }
        let own = |name: &str, data: ColumnData| (name.to_string(), Column::new(vec![n], data));
        index.extend([
            own("first_frame", ColumnData::U64(first)),
            own(
                "n_frames",
                ColumnData::U64(std::mem::take(&mut self.n_frames)),
            ),
            own(
                "n_atoms",
                ColumnData::U64(std::mem::take(&mut self.n_atoms)),
            ),
            own(
                "has_trajectory",
                ColumnData::Bool(std::mem::take(&mut self.has_trajectory)),
            ),
        ]);
        let block = Block {
            count: n,
            columns: index,
            ..Block::default()
        };
        encode(
            &BTreeMap::from([("records".to_string(), block)]),
            &FrameInfo::default(),
            true,
            &mut self.scratch,
        );
        let value = std::mem::take(&mut self.scratch);
        self.push(INDEX_KEY.to_vec(), value)?;
        self.flush()?;
        let env = self
            .env
            .take()
            .ok_or_else(|| Error::Lmdb("writer already closed".into()))?;
        // Every record is on disk before `meta` says the collection exists.
        env.force_sync().map_err(lmdb_error)?;
        let schema = self
            .given_schema
            .take()
            .unwrap_or_else(|| self.derived_schema.schema().clone());
        let meta = json!({
            "layout": LAYOUT,
            "layout_version": LAYOUT_VERSION,
            "collection": Value::Object(std::mem::take(&mut self.meta)),
            "sequence_schema": crate::model_json::schema_to_json(&schema),
            "n_records": n,
            "n_frames": self.total_frames,
        });
        let value = serde_json::to_vec(&meta).map_err(|e| Error::Lmdb(e.to_string()))?;
        self.env = Some(env);
        self.push(META_KEY.to_vec(), value)?;
        self.flush()?;
        let env = self
            .env
            .take()
            .ok_or_else(|| Error::Lmdb("writer already closed".into()))?;
        env.force_sync().map_err(lmdb_error)?;
        env.prepare_for_closing().wait();
        Ok(())
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Takes the writer's exclusive lock on `path`, creating the file.
fn claim(path: &Path, overwrite: bool) -> Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    if file.try_lock().is_err() {
        return Err(Error::Busy(format!(
            "{} is being written by another writer",
            path.display()
        )));
    }
    if file.metadata()?.len() > 0 {
        if !overwrite {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!("{} exists (pass overwrite to replace it)", path.display()),
            )));
        }
        file.set_len(0)?;
        let _ = std::fs::remove_file(lock_path(path));
    }
    Ok(file)
}

/// LMDB's lock file beside a `NO_SUB_DIR` environment.
pub(crate) fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-lock");
    PathBuf::from(name)
}

/// Writes a whole in-memory collection to a new file.
pub fn write_collection(path: &Path, collection: Collection, options: WriterOptions) -> Result<()> {
    let Collection {
        header,
        index,
        records,
    } = collection;
    let mut writer = Writer::create(path, header, options)?;
    for record in records {
        writer.append(record)?;
    }
    writer.finish(index)
}
