//! The random-access reader: open checks `meta` and the index; record r is
//! read on demand, its frames resolved by carry-forward and checked against
//! the declaration and the model rules.

mod frames;
mod open;
mod validator;
pub(crate) mod walk;

use super::layout::{Layout, LayoutCache};
use super::resolve::Resolver;
use super::{
    frame_key, lmdb_error, open_read_env, record_key, system_key, Db, SharedEnv, FF_KEY, INDEX_KEY,
    META_KEY,
};
use crate::arrays::RecordArrays;
use crate::clause::Clause;
use crate::error::{refuse, Error, Result};
use crate::frame_bytes::{
    decode, decode_update, decode_update_known, plain_document, BlockRef, BlocksMemo, FrameInfo,
    FrameRef, Known, Update,
};
use crate::model::*;
use crate::validate::{self, Rounding};
use heed::{Env, RoTxn, WithoutTls};
use open::{parse_index, parse_meta};
use serde_json::Value;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use walk::{check_update_blocks, update_step, Walked};

pub use frames::{FrameBlock, FrameColumn, ResolvedFrame};
use frames::{FramesTxn, RecordCache};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What [`RecordTxn::decode_walked`] makes of one frame value: the
/// blocks decoded in full (`None` when `memo` or the cache knew them), the
/// layout (with a cache), the payload, and meta, step, time and cell.
pub(super) type DecodedUpdate<'t> = (
    Option<BTreeMap<String, BlockRef<'t>>>,
    Option<Arc<Layout>>,
    &'t [u8],
    FrameInfo,
);

/// An open collection file.
pub struct Reader {
    /// Declared first, so dropped first: it holds the environment open.
    frames_txn: Mutex<FramesTxn>,
    env: SharedEnv,
    db: Db,
    collection: Document,
    schema: SequenceSchema,
    n_frames: u64,
    first_frame: Vec<u64>,
    frame_counts: Vec<u64>,
    atom_counts: Vec<u64>,
    has_trajectory: Vec<bool>,
    /// The entries (update maps, systems, ...) of the records `Reader::frame` met.
    record_cache: Mutex<RecordCache>,
}

impl Reader {
    /// [`check_pages`](super::check_pages), then [`Reader::open`]: for a
    /// file from elsewhere (a download, another writer, a copy that may
    /// have lost a sector). LMDB trusts its pages, and a damaged page can
    /// crash the process inside LMDB's C code; the check refuses it first
    /// (`lmdb.file.pages`, with the page and what is wrong). It reads
    /// every page of the tree once, so it costs about one pass over the
    /// file; [`Reader::open`] skips it for files this process or a trusted
    /// pipeline wrote. A file at rest is assumed: one written in place
    /// while it is checked may be refused. `mrec` checks every file it
    /// opens.
    pub fn open_checked(path: &Path) -> Result<Reader> {
        super::check_pages(path)?;
        Reader::open(path)
    }

    /// Opens a committed collection and checks `meta` and the index.
    ///
    /// Readers of one file in a process share LMDB's environment, which
    /// LMDB opens once per process: a second `open` of a file (by the same
    /// path or another link) works while the first reader lives. It fails
    /// (`ResourceBusy`) for a file installed at a path whose earlier file
    /// this process still reads, until that reader is dropped.
    pub fn open(path: &Path) -> Result<Reader> {
        let env = open_read_env(path)?;
        let txn = env.env().read_txn().map_err(lmdb_error)?;
        let db: Db = env
            .env()
            .open_database(&txn, None)
            .map_err(lmdb_error)?
            .ok_or(Error::Uncommitted)?;
        let meta = db
            .get(&txn, META_KEY)
            .map_err(lmdb_error)?
            .ok_or(Error::Uncommitted)?;
        let (collection, schema, n_records, n_frames) = parse_meta(meta)?;
        let index = db
            .get(&txn, INDEX_KEY)
            .map_err(lmdb_error)?
            .ok_or_else(|| Error::refused(Clause::IndexCount, "index", "no `index` key"))?;
        let (first_frame, frame_counts, atom_counts, has_trajectory) =
            parse_index(index, n_records, n_frames)?;
        drop(txn);
        Ok(Reader {
            frames_txn: Mutex::default(),
            env,
            db,
            collection,
            schema,
            n_frames,
            first_frame,
            frame_counts,
            atom_counts,
            has_trajectory,
            record_cache: Mutex::default(),
        })
    }

    /// Whether the file was opened without LMDB's lock file (read-only medium).
    pub fn is_lock_free(&self) -> bool {
        self.env.no_lock()
    }

    /// The collection document (`units`, provenance, ...).
    pub fn collection_meta(&self) -> &Document {
        &self.collection
    }

    /// The one trajectory declaration.
    pub fn schema(&self) -> &SequenceSchema {
        &self.schema
    }

    /// Number of records.
    pub fn n_records(&self) -> u64 {
        self.first_frame.len() as u64
    }

    /// Number of frame keys.
    pub fn n_frames(&self) -> u64 {
        self.n_frames
    }

    /// Frames of record r.
    pub fn record_frames(&self, r: u64) -> Option<u64> {
        self.frame_counts.get(r as usize).copied()
    }

    /// `first_frame` of the binding's index, per record: the global
    /// ordinal of each record's first frame.
    pub fn first_frames(&self) -> &[u64] {
        &self.first_frame
    }

    /// The record and position of global frame ordinal `j` (`None` past
    /// the last frame).
    pub fn locate_frame(&self, j: u64) -> Option<(u64, u64)> {
        if j >= self.n_frames {
            return None;
        }
        // Records without frames share `first_frame` with the next one:
        // the last record starting at or before j is the one holding it.
        let r = self
            .first_frame
            .partition_point(|&f| f <= j)
            .checked_sub(1)?;
        let k = j - self.first_frame[r];
        (k < *self.frame_counts.get(r)?).then_some((r as u64, k))
    }

    fn frames_txn(&self) -> MutexGuard<'_, FramesTxn> {
        // Consistent between statements, as `record_cache`.
        self.frames_txn
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn record_cache(&self) -> MutexGuard<'_, RecordCache> {
        // The cache is consistent between statements.
        self.record_cache
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops counting the file's pages this process went through in its
    /// resident memory (Linux `madvise(MADV_DONTNEED)` over LMDB's map):
    /// a shuffled reader touches pages all over the file, and they stay
    /// mapped; a loader that wants its memory flat in the collection's
    /// size calls this now and then. The page cache keeps the pages; every
    /// view and transaction stays valid. Best effort.
    pub fn release_mapped_pages(&self) {
        super::release_file_pages(self.env.file());
    }

    /// `n_atoms` of the binding's index, per record (no record decoded).
    pub fn atom_counts(&self) -> &[u64] {
        &self.atom_counts
    }

    /// `has_trajectory` of the binding's index, per record.
    pub fn trajectory_flags(&self) -> &[bool] {
        &self.has_trajectory
    }

    /// The LMDB environment and main database under this reader, for a
    /// caller that reads raw values itself (`mrec bench`'s baseline). LMDB
    /// allows one environment per file and process: use this one rather
    /// than opening another.
    pub fn raw(&self) -> (&Env<WithoutTls>, &Db) {
        (self.env.env(), &self.db)
    }

    /// Opens a read transaction; views borrowed from it stay valid while it lives.
    pub fn txn(&self) -> Result<RecordTxn<'_>> {
        Ok(RecordTxn {
            reader: self,
            txn: self.env.env().read_txn().map_err(lmdb_error)?,
            layouts: RefCell::default(),
        })
    }

    /// The collection's own index columns, as written.
    pub fn index_columns(&self) -> Result<BTreeMap<String, Column>> {
        self.txn()?.index_columns()
    }

    /// The force field, if the collection has one.
    pub fn forcefield(&self) -> Result<Option<ForceField>> {
        self.txn()?.forcefield()
    }

    /// Record r, its trajectory resolved frame by frame, fully checked.
    pub fn record(&self, r: u64) -> Result<Record> {
        self.txn()?.record(r)
    }

    /// The whole collection, back into the model.
    pub fn read_collection(&self) -> Result<Collection> {
        let txn = self.txn()?;
        let mut records = Vec::with_capacity(self.first_frame.len());
        for r in 0..self.n_records() {
            records.push(txn.record(r)?);
        }
        Ok(Collection {
            header: Header {
                meta: self.collection.clone(),
                sequence_schema: Some(self.schema.clone()),
                forcefield: txn.forcefield()?,
            },
            index: txn.index_columns()?,
            records,
        })
    }
}

/// A read transaction over a collection.
pub struct RecordTxn<'r> {
    reader: &'r Reader,
    txn: RoTxn<'r, WithoutTls>,
    /// Layouts of full updates met by `record_arrays` in this transaction.
    layouts: RefCell<LayoutCache>,
}

impl<'r> RecordTxn<'r> {
    fn get(&self, key: &[u8]) -> Result<Option<&[u8]>> {
        self.reader.db.get(&self.txn, key).map_err(lmdb_error)
    }

    fn check_record(&self, r: u64) -> Result<(u64, u64)> {
        let i = r as usize;
        match (
            self.reader.first_frame.get(i),
            self.reader.frame_counts.get(i),
        ) {
            (Some(&first), Some(&n)) => Ok((first, n)),
            _ => Err(Error::refused(
                Clause::IndexCount,
                format!("records[{r}]"),
                format!(
                    "no record {r}: the collection has {}",
                    self.reader.n_records()
                ),
            )),
        }
    }

    /// The collection's own index columns, as written.
    pub fn index_columns(&self) -> Result<BTreeMap<String, Column>> {
        let value = self
            .get(INDEX_KEY)?
            .ok_or_else(|| Error::refused(Clause::IndexCount, "index", "no `index` key"))?;
        let frame = decode(value).map_err(|e| e.within("index"))?;
        let mut out = BTreeMap::new();
        if let Some(block) = frame.blocks.get("records") {
            for (name, col) in &block.columns {
                if !validate::RESERVED_INDEX_COLUMNS.contains(&name.as_str()) {
                    out.insert(
                        name.to_string(),
                        col.to_column()
                            .map_err(|e| e.within(&format!("index.{name}")))?,
                    );
                }
            }
        }
        // Own columns obey the column rules (canonical dtypes, reserved
        // names, precision) like any other; their values are handed back
        // as stored, never rounded again (frame.md, "Declared precision").
        validate::prepare_index(&mut out, self.reader.n_records(), Rounding::Keep)?;
        Ok(out)
    }

    /// The force field, if any.
    pub fn forcefield(&self) -> Result<Option<ForceField>> {
        let Some(value) = self.get(FF_KEY)? else {
            return Ok(None);
        };
        let frame = decode(value).map_err(|e| e.within("forcefield"))?;
        let tables = frame.to_blocks().map_err(|e| e.within("forcefield"))?;
        let mut ff = ForceField {
            document: frame.info.meta.clone(),
            tables,
        };
        validate::prepare_forcefield(&mut ff)?;
        Ok(Some(ff))
    }

    /// Record r's meta document (`{}` when the key is absent).
    pub fn record_meta(&self, r: u64) -> Result<Document> {
        self.check_record(r)?;
        match self.get(&record_key(r))? {
            None => Ok(Document::new()),
            Some(bytes) => match plain_document(bytes)
                .map(Value::Object)
                .map_or_else(|| serde_json::from_slice::<Value>(bytes), Ok)
            {
                Ok(Value::Object(m)) => Ok(m),
                _ => Err(Error::refused(
                    Clause::RecordMetaValue,
                    format!("records[{r}].meta"),
                    "not a JSON object",
                )),
            },
        }
    }

    /// Record r's system, if it has one.
    pub fn system(&self, r: u64) -> Result<Option<Frame>> {
        let mut system = self.decoded_system(r)?;
        if let Some(frame) = &mut system {
            prepare_system(r, frame)?;
        }
        Ok(system)
    }

    /// Record r's system decoded into owned arrays, not yet checked by the
    /// model rules (`system` and `record` check it, each once).
    fn decoded_system(&self, r: u64) -> Result<Option<Frame>> {
        self.check_record(r)?;
        let Some(value) = self.get(&system_key(r))? else {
            return Ok(None);
        };
        let at = || format!("records[{r}].system");
        let FrameRef { blocks, info } = decode(value).map_err(|e| e.within(&at()))?;
        let blocks = FrameRef {
            blocks,
            info: FrameInfo::default(),
        }
        .into_blocks()
        .map_err(|e| e.within(&at()))?;
        Ok(Some(Frame {
            meta: info.meta,
            meta_types: info.meta_types.unwrap_or_default(),
            blocks,
            cell: info.cell.map(|c| *c),
        }))
    }

    /// The raw update of global frame ordinal j, decoded in place.
    pub fn frame_update(&self, j: u64) -> Result<FrameRef<'_>> {
        let value = self.get(&frame_key(j))?.ok_or_else(|| {
            Error::refused(
                Clause::FrameMissing,
                "",
                format!("frame key {j} is missing"),
            )
        })?;
        decode(value)
    }

    /// Visits record r's frames resolved, as views into the transaction: for
    /// each ordinal, the step, the time, the per-step meta, every block present
    /// or empty there and the cell in effect. Checks the declaration of every
    /// update (blocks, columns, per-step keys), not the cross-block model rules
    /// (`record` does those).
    pub fn for_each_frame<F>(&self, r: u64, mut visit: F) -> Result<()>
    where
        F: FnMut(&ResolvedView<'_, '_>) -> Result<()>,
    {
        let mut blocks: BTreeMap<String, BlockRef<'_>> = BTreeMap::new();
        let mut cell: Option<Cell> = None;
        // Names of the blocks of the last full update, which a repeated
        // update restates, and the payload their buffers point into.
        let mut repeated: Vec<String> = Vec::new();
        let mut payload: &[u8] = &[];
        let schema = &self.reader.schema;
        self.walk_updates(r, None, |u| {
            let step = update_step(&u.info, schema).map_err(|e| u.located(e))?;
            let full = match u.blocks.take() {
                Some(full) => Some(full),
                None => {
                    let moved = repeated.iter().all(|name| {
                        blocks
                            .get_mut(name)
                            .is_some_and(|b| b.rebase(payload, u.payload).is_some())
                    });
                    if moved {
                        payload = u.payload;
                        None
                    } else {
                        // Not expected (the blocks were decoded from
                        // `payload`); decoding in full is always right.
                        Some(decode(u.value)?.blocks)
                    }
                }
            };
            if let Some(full) = full {
                repeated.clear();
                for (name, block) in full {
                    repeated.push(name.clone());
                    blocks.insert(name, block);
                }
                payload = u.payload;
            }
            if u.info.cell.is_some() {
                cell = u.info.cell.as_deref().copied();
            }
            visit(&ResolvedView {
                step,
                time: u.info.time,
                meta: &u.info.meta,
                blocks: &blocks,
                cell: cell.as_ref(),
            })
        })
    }

    /// Walks record r's frame keys in order and decodes each update (a
    /// repeated `blocks` text is not decoded again), refusing what the
    /// bytes and the declaration of blocks refuse, with paths of the record
    /// (`records[r].trajectory.frames[k]`). `visit` gets each update, and
    /// checks its per-step keys and step first ([`update_step`]); what it
    /// leaves of the meta document serves the next update.
    ///
    /// With `layouts` (the resolver's walk), a full update comes as its
    /// [`Layout`], which the cache may already hold for its `blocks` text
    /// (then the text is not decoded again) and is offered to it.
    pub(super) fn walk_updates<'t, F>(
        &'t self,
        r: u64,
        layouts: Option<&RefCell<LayoutCache>>,
        mut visit: F,
    ) -> Result<()>
    where
        F: FnMut(&mut Walked<'t>) -> Result<()>,
    {
        let (first, n) = self.check_record(r)?;
        // The record's frames are consecutive keys: one cursor walks them
        // instead of one tree search per frame.
        let lo = frame_key(first);
        let hi = frame_key(first.saturating_add(n));
        let mut values = self
            .reader
            .db
            .range(
                &self.txn,
                &(Bound::Included(&lo[..]), Bound::Excluded(&hi[..])),
            )
            .map_err(lmdb_error)?;
        let mut memo = BlocksMemo::default();
        // One value ahead: while frame k is decoded, frame k + 1's bytes
        // are on their way into the cache (a shuffled reader finds every
        // record's pages cold). Its cursor step is only judged at k + 1.
        let mut ahead = if n > 0 { values.next() } else { None };
        for k in 0..n {
            // Paths are only formatted on the error path: this loop is the
            // reader's hot path.
            let located = |e: Error| e.within(&format!("records[{r}].trajectory.frames[{k}]"));
            let key = frame_key(first + k);
            let this = ahead.take();
            if k + 1 < n {
                ahead = values.next();
                if let Some(Ok((_, value))) = &ahead {
                    prefetch(value.as_ptr(), value.len());
                    prefetch_node_below(value);
                }
            }
            let value = match this.transpose().map_err(lmdb_error)? {
                Some((found, value)) if found == key => value,
                _ => {
                    return Err(located(Error::refused(
                        Clause::FrameMissing,
                        "",
                        format!("frame key {} is missing", first + k),
                    )))
                }
            };
            let (blocks, layout, payload, info) = self
                .decode_walked(value, &mut memo, layouts)
                .map_err(located)?;
            let mut walked = Walked {
                r,
                k,
                value,
                payload,
                blocks,
                layout,
                info,
            };
            visit(&mut walked)?;
            memo.recycle(std::mem::take(&mut walked.info.meta));
        }
        Ok(())
    }

    /// One frame value of a walk decoded (paths relative to the frame):
    /// its blocks checked against the declaration when decoded in full;
    /// with `layouts`, a full update's [`Layout`], looked up in the cache
    /// by its `blocks` text (then the text is not decoded again) or made
    /// and offered to it. `memo` holds the last full update's text.
    pub(super) fn decode_walked<'t>(
        &'t self,
        value: &'t [u8],
        memo: &mut BlocksMemo,
        layouts: Option<&RefCell<LayoutCache>>,
    ) -> Result<DecodedUpdate<'t>> {
        // The cache is skipped if it is in use (a walk inside a walk).
        let mut cache = layouts.and_then(|c| c.try_borrow_mut().ok());
        let decoded = match &mut cache {
            None => Known::Update(decode_update(value, memo)?),
            Some(cache) => decode_update_known(value, memo, &mut |text, len| cache.get(text, len))?,
        };
        let (mut blocks, mut layout, payload, info) = match decoded {
            Known::Update(Update::Full { frame, payload }) => {
                check_update_blocks(&frame, &self.reader.schema)?;
                (Some(frame.blocks), None, payload, frame.info)
            }
            Known::Update(Update::SameBlocks { payload, info }) => (None, None, payload, info),
            Known::Found {
                known,
                payload,
                info,
            } => (None, Some(known), payload, info),
        };
        if let (Some(cache), Some(full)) = (&mut cache, blocks.take_if(|_| layouts.is_some())) {
            let kept = Layout::of(full, payload).map(Arc::new);
            if let (Some(kept), Some((text, len))) = (&kept, memo.holds()) {
                cache.offer(text, len, kept);
            }
            layout = kept;
            if layout.is_none() {
                // Not expected: a buffer outside the payload. The
                // caller decodes the update itself.
                blocks = Some(decode(value)?.blocks);
            }
        }
        Ok((blocks, layout, payload, info))
    }

    /// Record r: meta, system and trajectory, the trajectory resolved into
    /// one array per column, and every model rule a file can break checked
    /// (those `validate::prepare_record` checks, refused as it refuses
    /// them). The fast way to read a record whole.
    pub fn record_arrays(&self, r: u64) -> Result<RecordArrays> {
        let meta = self.record_meta(r)?;
        let mut system = self.decoded_system(r)?;
        let i = r as usize;
        let tat = || format!("records[{r}].trajectory");
        let trajectory = if self.reader.has_trajectory.get(i).copied().unwrap_or(false) {
            let no_blocks = BTreeMap::new();
            let system_blocks = system.as_ref().map_or(&no_blocks, |s| &s.blocks);
            let frames = self.reader.frame_counts.get(i).copied().unwrap_or(0);
            let mut resolver = Resolver::new(&self.reader.schema, system_blocks, frames);
            self.walk_updates(r, Some(&self.layouts), |u| {
                resolver.update(u).map_err(|e| e.within(&tat()))
            })?;
            Some(resolver.finish())
        } else {
            if self.reader.frame_counts.get(i).copied().unwrap_or(0) != 0 {
                refuse!(
                    IndexHasTrajectory,
                    format!("index.has_trajectory[{r}]"),
                    "record without a trajectory has frames"
                );
            }
            None
        };
        // The order of `prepare_record`: the record's parts, its system,
        // then the trajectory's rules.
        if system.is_none() && trajectory.is_none() {
            refuse!(
                RecordNotEmpty,
                format!("records[{r}]"),
                "a record needs a system or a trajectory (or both)"
            );
        }
        if let Some(frame) = &mut system {
            prepare_system(r, frame)?;
        }
        let trajectory = match trajectory {
            None => None,
            Some(resolved) => {
                if let Some(system) = &system {
                    validate::check_aligned_names(&self.reader.schema, &system.blocks, "")
                        .map_err(|e| e.within(&tat()))?;
                }
                Some(resolved.map_err(|e| e.within(&tat()))?)
            }
        };
        Ok(RecordArrays {
            meta,
            system,
            trajectory,
        })
    }

    /// How many updates `record_arrays` found the layout of in this
    /// transaction's cache instead of decoding their `blocks` text. For
    /// tests and profiles. Not for general use.
    #[doc(hidden)]
    pub fn layouts_reused(&self) -> u64 {
        self.layouts.try_borrow().map_or(0, |c| c.hits)
    }

    /// Record r: meta, system and trajectory resolved into owned arrays
    /// frame by frame (the model), and every model rule a file can break
    /// checked: [`RecordTxn::record_arrays`] in the model's form.
    pub fn record(&self, r: u64) -> Result<Record> {
        self.record_arrays(r).map(RecordArrays::into_record)
    }

    /// [`RecordTxn::record`] the way it was first built: every frame's
    /// resolved blocks copied into the model, then `validate::prepare_record`
    /// run on the whole record. The reference `record_arrays` is tested
    /// against (same records, same refusals). Not for general use.
    #[doc(hidden)]
    pub fn record_reference(&self, r: u64) -> Result<Record> {
        let at = format!("records[{r}]");
        let meta = self.record_meta(r)?;
        let system = self.decoded_system(r)?;
        let trajectory = if self
            .reader
            .has_trajectory
            .get(r as usize)
            .copied()
            .unwrap_or(false)
        {
            let mut frames = Vec::new();
            self.for_each_frame(r, |view| {
                let mut blocks = BTreeMap::new();
                for (name, b) in view.blocks {
                    blocks.insert(
                        name.clone(),
                        b.to_block().map_err(|e| {
                            e.within(&format!(
                                "{at}.trajectory.frames[{}].blocks.{name}",
                                frames.len()
                            ))
                        })?,
                    );
                }
                frames.push(Step {
                    step: view.step,
                    time: view.time,
                    meta: view.meta.clone(),
                    blocks,
                    cell: view.cell.copied(),
                });
                Ok(())
            })?;
            Some(Trajectory {
                schema: None,
                frames,
            })
        } else {
            if self
                .reader
                .frame_counts
                .get(r as usize)
                .copied()
                .unwrap_or(0)
                != 0
            {
                refuse!(
                    IndexHasTrajectory,
                    format!("index.has_trajectory[{r}]"),
                    "record without a trajectory has frames"
                );
            }
            None
        };
        let mut record = Record {
            meta,
            system,
            trajectory,
        };
        validate::prepare_record(&mut record, &self.reader.schema, Rounding::Keep, &at)?;
        Ok(record)
    }
}

/// Asks the processor to bring the `len` bytes at `start` (up to 16 KiB)
/// into its cache, without waiting: a hint that changes no result.
#[inline]
pub(super) fn prefetch(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    for offset in (0..len.min(16 << 10)).step_by(64) {
        // SAFETY: a prefetch reads nothing the program sees and never
        // faults, whatever the address (the processor drops one it cannot
        // reach); the address is only computed (wrapping), never
        // dereferenced. SSE is part of x86_64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                start.wrapping_add(offset).cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

/// Prefetches where the next frame's LMDB node most likely is, so that the
/// cursor's next step does not wait for it: LMDB places the nodes of keys
/// appended in order one below the other in a leaf page, each 8 header
/// bytes, the 9-byte key and the value, rounded up to an even size; and a
/// record's frames are mostly of one size. A wrong guess (the next frame
/// on another page, or of another size) costs a few useless prefetches.
#[inline]
fn prefetch_node_below(value: &[u8]) {
    const NODE_HEADER_AND_KEY: usize = 8 + 9;
    let node_size = (NODE_HEADER_AND_KEY + value.len()).next_multiple_of(2);
    let this_node = value.as_ptr().wrapping_sub(NODE_HEADER_AND_KEY);
    prefetch(this_node.wrapping_sub(node_size), node_size);
}

/// `validate::prepare_system` on record r's system, values kept as
/// stored, its path formatted only on the error path (readers check every
/// record they read whole).
fn prepare_system(r: u64, frame: &mut Frame) -> Result<()> {
    validate::prepare_system(frame, Rounding::Keep, "system")
        .map_err(|e| e.within(&format!("records[{r}]")))
}

/// One resolved frame, borrowed from the read transaction.
pub struct ResolvedView<'a, 't> {
    /// Step number.
    pub step: i64,
    /// Time, when the trajectory has times.
    pub time: Option<f64>,
    /// Per-step meta (typed JSON).
    pub meta: &'a Document,
    /// Every block present or empty at this ordinal.
    pub blocks: &'a BTreeMap<String, BlockRef<'t>>,
    /// The cell in effect.
    pub cell: Option<&'a Cell>,
}
