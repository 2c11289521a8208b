//! The streaming writer: records appended one at a time, `meta` last.
//!
//! Key order: every value is put in ascending key order with `MDB_APPEND`,
//! so LMDB fills its leaf pages instead of splitting them in the middle
//! (which left them about half full). The global order is
//! `f`+j (frames) < `ff` < `index` < `meta` < `r`+r < `s`+r. Frames arrive
//! in that order and go straight into the batch; a record's `r` (meta
//! document) and `s` (system) values sort after every frame, so `append`
//! spills them to two unnamed temporary files beside the collection (a few
//! hundred bytes to a few KiB per record: memory stays flat in the number
//! of records) and `finish` streams them back, all `r` then all `s`. The
//! force field, known at `create`, is held until the frames are written.
//!
//! Commit protocol: encoded values are buffered up to
//! `WriterOptions::batch_bytes` and written in one transaction per batch:
//! the frames while records are appended, then at `finish` the force field,
//! `index`, every `r` and every `s`. The file is synced, and the last
//! transaction writes `meta` alone (a plain put: `meta` sorts before `r`),
//! and one more writes it again, so that both meta pages of the file lead
//! to the whole collection (see `finish_file`).
//! A file whose writer died before that last commit has no `meta` key, and
//! every reader refuses it as uncommitted. Memory holds two batches (one
//! being filled, one being committed), two file buffers and four small
//! numbers per record (for the index), never the records themselves. After
//! each commit the file's writeback is started ([`start_writeback`]), so
//! the disk works while records are appended and `finish`'s syncs find
//! little left to write, and the pages LMDB read through its map are
//! unmapped ([`release_mapped_pages`]), so the writer's resident memory
//! does not grow with the file.
//!
//! Where: the collection is written into [`partial_path`] (`<path>.partial`)
//! under an exclusive `flock` of that file, and `finish` renames it to the
//! path once `meta` is committed. So the path never holds part of a
//! collection, a failed or interrupted write leaves it as it was, and an
//! overwrite never touches a file that readers may have mapped (it is
//! replaced, and they keep reading it whole). A writer dropped unfinished
//! deletes its partial file; one killed leaves it, refused as uncommitted,
//! and the next writer of the path empties it.

mod commit;
mod install;
mod spill;

use commit::*;
pub use install::located_io;
pub use install::partial_path;
use install::*;
use spill::*;

use super::{
    frame_key, lmdb_error, lock_path, record_key, system_key, Db, FF_KEY, INDEX_KEY, LAYOUT,
    LAYOUT_VERSION, META_KEY,
};
use crate::clause::Clause;
use crate::error::{Error, Result};
use crate::frame_bytes::{
    check_written_header, encode, encode_append, encode_update, BlocksText, FrameInfo,
};
use crate::model::*;
use crate::validate::{self, Rounding};
use heed::{Env, EnvFlags, EnvOpenOptions, MdbError, PutFlags, WithoutTls};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// How a writer behaves.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Replace an existing file at the path (otherwise refuse to touch it).
    pub overwrite: bool,
    /// Bytes of encoded values buffered before a transaction commits them
    /// (4 MiB by default). Memory holds two batches and LMDB one
    /// transaction's dirty pages; at 4 MiB the three fit in the project
    /// machine's 32 MiB L3 cache while the commit thread copies what the
    /// caller's thread just encoded, at 16 MiB they do not, and the same
    /// write took 1.22x as long (median of 10 interleaved runs,
    /// `docs/benchmark.md`). Much smaller batches pay a commit every few
    /// records: 256 KiB took 1.25x as long as 16 MiB.
    pub batch_bytes: usize,
    /// LMDB's page size for the new file: a power of two from 4 KiB to
    /// 32 KiB (LMDB's largest). Every LMDB reader takes a file's page size
    /// from its meta page. See [`DEFAULT_PAGE_SIZE`].
    pub page_size: u32,
    /// Compute the finished file's content digest ([`Written::digest`],
    /// what a set's manifest keeps of a shard): the file is read once
    /// more, from the page cache, after the last sync (0.13-0.35x of one
    /// full read of it, docs/shards.md). Off by default.
    pub digest: bool,
}

/// What [`Writer::finish`] installed at the path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The file's size in bytes.
    pub bytes: u64,
    /// Its content digest ([`crate::lmdb::file_digest`]) when
    /// [`WriterOptions::digest`] asked for it.
    pub digest: Option<String>,
}

/// The page size new files get: 32 KiB. LMDB keeps a value of more than
/// about half a page on overflow pages of its own, whole pages each, and
/// leaves the rest of a leaf page empty when the next value does not fit.
/// With 4 KiB pages a frame of 35-60 atoms (2-3.3 KiB) took a 4 KiB page
/// to itself and the file was 1.8 times its payload; with 32 KiB pages the
/// frames of small molecules share leaf pages (docs/benchmark.md). Values
/// inside leaf pages sit at odd addresses, so they are copied rather than
/// viewed in place; larger values (over 16 KiB) still get page-aligned
/// overflow pages.
pub const DEFAULT_PAGE_SIZE: u32 = 32 << 10;

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            overwrite: false,
            batch_bytes: 4 << 20,
            page_size: DEFAULT_PAGE_SIZE,
            digest: false,
        }
    }
}

/// Writes one collection file, record after record, into
/// [`partial_path`] until [`Writer::finish`] moves the committed collection
/// to its path.
pub struct Writer {
    // The fields drop in this order: the environment closes, then an
    // unfinished file is deleted, then the lock is released (so no other
    // writer can have claimed the file that is deleted).
    sink: Sink,
    output: Output,
    // Held for the writer's life: a second writer's `try_lock` fails.
    _lock: File,
    meta: Document,
    given_schema: Option<SequenceSchema>,
    derived_schema: validate::DerivedSchema,
    /// The force field's value: its key `ff` sorts after every frame key.
    forcefield: Option<Vec<u8>>,
    /// Record meta documents (`r` keys), written at `finish`.
    record_spill: Spill,
    /// System frames (`s` keys), written at `finish`.
    system_spill: Spill,
    n_frames: Vec<u64>,
    n_atoms: Vec<u64>,
    has_trajectory: Vec<bool>,
    total_frames: u64,
    scratch: Vec<u8>,
    /// The system frame of the record being encoded, spilled once the
    /// whole record is.
    system_value: Vec<u8>,
    /// The `blocks` text of the last frame written.
    blocks_text: BlocksText,
    /// Why the writer stopped taking records: a record was refused after
    /// part of it was committed (see [`Writer::append`]).
    stopped: Option<String>,
}

impl Writer {
    /// Checks the collection document, the declaration (when given) and the
    /// force field, and starts the file in [`partial_path`]. Refused: a
    /// `path` that is not a file, or (without `options.overwrite`) one that
    /// is not empty.
    pub fn create(path: &Path, mut header: Header, options: WriterOptions) -> Result<Writer> {
        validate::prepare_collection_meta(&mut header.meta)?;
        if let Some(schema) = &header.sequence_schema {
            validate::check_schema(schema, "sequence_schema")?;
        }
        if let Some(ff) = &mut header.forcefield {
            validate::prepare_forcefield(ff)?;
        }
        if !options.page_size.is_power_of_two() || !(4096..=32768).contains(&options.page_size) {
            return Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!(
                    "page size {} is not a power of two from 4096 to 32768",
                    options.page_size
                ),
            )));
        }
        check_target(path, options.overwrite)?;
        let lock = claim(&partial_path(path), path)?;
        // Holds the lock until `create_claimed` has returned: when it fails,
        // it deletes the partial file while no other writer can claim it.
        let _held = lock.try_clone().map_err(|e| Error::io_at(path, e))?;
        let output = Output {
            path: path.to_path_buf(),
            overwrite: options.overwrite,
            digest: options.digest,
            complete: false,
        };
        Writer::create_claimed(output, lock, header, options).map_err(|e| located_io(path, e))
    }

    /// The rest of [`Writer::create`], once `lock` holds the partial file.
    fn create_claimed(
        output: Output,
        lock: File,
        header: Header,
        options: WriterOptions,
    ) -> Result<Writer> {
        // LMDB gives a new environment the system's page size; one whose
        // file already holds meta pages keeps theirs. So the two meta pages
        // of an empty environment are written first, with our page size.
        write_empty_environment(&lock, options.page_size, 64 << 20)?;
        let dir = directory_of(&output.path);
        let record_spill = Spill::new(dir)?;
        let system_spill = Spill::new(dir)?;
        let mut env_options = EnvOpenOptions::new().read_txn_without_tls();
        env_options.map_size(64 << 20).max_dbs(0);
        // SAFETY: NO_SUB_DIR and NO_SYNC are valid flags for a writable env.
        // NO_SYNC: intermediate commits need not reach the disk before the
        // last one; `finish` syncs before it writes `meta`.
        unsafe { env_options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC) };
        // SAFETY: the file was just created (or emptied) under our exclusive
        // lock; no other mapping of it is written while this Env lives.
        let env = unsafe { env_options.open(partial_path(&output.path)) }.map_err(lmdb_error)?;
        let mut txn = env.write_txn().map_err(lmdb_error)?;
        let db: Db = env.create_database(&mut txn, None).map_err(lmdb_error)?;
        txn.commit().map_err(lmdb_error)?;
        let mut writer = Writer {
            sink: Sink::start(env, db, lock.try_clone()?, options.batch_bytes)?,
            output,
            _lock: lock,
            meta: header.meta,
            given_schema: header.sequence_schema,
            derived_schema: validate::DerivedSchema::default(),
            forcefield: None,
            record_spill,
            system_spill,
            n_frames: Vec::new(),
            n_atoms: Vec::new(),
            has_trajectory: Vec::new(),
            total_frames: 0,
            scratch: Vec::new(),
            system_value: Vec::new(),
            blocks_text: BlocksText::default(),
            stopped: None,
        };
        if let Some(ff) = header.forcefield {
            let info = FrameInfo {
                meta: ff.document,
                ..FrameInfo::default()
            };
            let mut value = Vec::new();
            encode(&ff.tables, &info, false, &mut value);
            check_written_header(&value).map_err(|e| e.within("forcefield"))?;
            writer.forcefield = Some(value);
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

    /// Validates and writes one record. A refused record leaves the writer
    /// as it was (the next record takes its place), with one exception: a
    /// frame whose header would pass [`crate::frame_bytes::MAX_HEADER_LEN`]
    /// after earlier frames of its record were committed stops the writer,
    /// which then refuses every call (nothing reaches the path). An
    /// operating-system error (a full disk) names the file.
    pub fn append(&mut self, record: Record) -> Result<()> {
        self.append_record(record)
            .map_err(|e| located_io(&self.output.path, e))
    }

    fn append_record(&mut self, mut record: Record) -> Result<()> {
        self.check_running()?;
        let r = self.records();
        let at = format!("records[{r}]");
        // Merged into a copy, kept once the record is written: a refused
        // record leaves the declaration as it was.
        let merged = match (&self.given_schema, &mut record.trajectory) {
            (None, Some(traj)) => {
                let tat = format!("{at}.trajectory");
                let decl = validate::record_declaration(traj, &tat)?;
                let mut merged = self.derived_schema.clone();
                merged.merge(&decl, &tat)?;
                // The blocks a record states agree with the merged
                // declaration (the merge checked them, nullability OR'd
                // over the records): each is held to the merged one, as
                // the block of a record that states nothing is.
                if let Some(own) = &mut traj.schema {
                    for (name, block) in own.blocks.iter_mut() {
                        if let Some(union) = merged.schema().blocks.get(name) {
                            block.clone_from(union);
                        }
                    }
                }
                Some(merged)
            }
            _ => None,
        };
        let schema = match (&self.given_schema, &merged) {
            (Some(given), _) => given,
            (None, Some(merged)) => merged.schema(),
            (None, None) => self.derived_schema.schema(),
        };
        validate::prepare_record(&mut record, schema, Rounding::Apply, &at)?;
        self.encode_record(r, record).map_err(|e| e.within(&at))?;
        if let Some(merged) = merged {
            self.derived_schema = merged;
        }
        Ok(())
    }

    /// Refuses every call once the writer has stopped.
    fn check_running(&self) -> Result<()> {
        match &self.stopped {
            Some(why) => Err(Error::refused(
                Clause::FrameHeaderBounds,
                "",
                format!("the writer stopped, and writes no collection: {why}"),
            )),
            None => Ok(()),
        }
    }

    /// Encodes a record the model rules accepted: its frames into the
    /// batch, then its meta and system into the spills, so that a frame
    /// refused on its header's length (paths relative to the record) is
    /// taken back whole while the batch still holds the record's first
    /// frame, and otherwise stops the writer.
    fn encode_record(&mut self, r: u64, record: Record) -> Result<()> {
        let mut n_atoms = None;
        let has_system = record.system.is_some();
        if let Some(system) = record.system {
            // The system's atoms rows (even 0); a system without `atoms`
            // leaves it to the trajectory's first update of `atoms`.
            n_atoms = system.blocks.get("atoms").map(|b| b.count);
            let info = FrameInfo {
                meta: system.meta,
                meta_types: Some(system.meta_types),
                cell: system.cell.map(Box::new),
                ..FrameInfo::default()
            };
            encode(&system.blocks, &info, true, &mut self.system_value);
            check_written_header(&self.system_value).map_err(|e| e.within("system"))?;
        }
        let start = (
            self.sink.commits,
            self.sink.batch.entries.len(),
            self.sink.batch.data.len(),
        );
        let mut frames = 0u64;
        let has_trajectory = record.trajectory.is_some();
        if let Some(traj) = record.trajectory {
            // Carry-forward state of this record only: it starts empty, so the
            // first frame restates every block it presents.
            let mut current: BTreeMap<String, Block> = BTreeMap::new();
            let mut current_cell: Option<Cell> = None;
            // Each presented block against what carries forward (`None`:
            // nothing does yet).
            let mut compared: Vec<Option<Sameness>> = Vec::new();
            // The blocks written at the last frame, whose `blocks` text
            // `self.blocks_text` holds (none yet in this record).
            let mut last_written: Vec<String> = Vec::new();
            let mut text_kept = false;
            for step in traj.frames {
                if n_atoms.is_none() {
                    n_atoms = step.blocks.get("atoms").map(|b| b.count);
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
                    cell: cell.map(Box::new),
                };
                // Only blocks that differ bit for bit from what carries
                // forward are written (compared in place, nothing cloned);
                // they then become what carries forward.
                compared.clear();
                compared.extend(
                    step.blocks
                        .iter()
                        .map(|(name, block)| current.get(name).map(|c| c.compare(block))),
                );
                let changed = |s: &Option<Sameness>| s.is_none_or(|s| !s.bits);
                let j = self.total_frames + frames;
                let written = || {
                    step.blocks
                        .iter()
                        .zip(&compared)
                        .filter(|(_, s)| changed(s))
                        .map(|((name, block), s)| (name.as_str(), block, s))
                };
                // The same blocks as the last frame wrote, each laid out as
                // it was there (what carries forward is what it wrote):
                // the same `blocks` text.
                let reuse = text_kept
                    && written().count() == last_written.len()
                    && written()
                        .zip(&last_written)
                        .all(|((name, _, s), last)| name == last && s.is_some_and(|s| s.layout));
                let value_start = self.sink.batch.data.len();
                text_kept = encode_update(
                    written().map(|(name, block, _)| (name, block)),
                    &info,
                    false,
                    Some((&mut self.blocks_text, reuse)),
                    &mut self.sink.batch.data,
                );
                if let Err(e) = check_written_header(&self.sink.batch.data[value_start..]) {
                    let e = e.within(&format!("trajectory.frames[{frames}]"));
                    let (commits, entries, data) = start;
                    if self.sink.commits == commits {
                        self.sink.batch.entries.truncate(entries);
                        self.sink.batch.data.truncate(data);
                    } else {
                        self.stopped = Some(format!("records[{r}]: {e}"));
                    }
                    return Err(e);
                }
                if !reuse {
                    last_written.clear();
                    last_written.extend(written().map(|(name, _, _)| name.to_string()));
                }
                for ((name, block), s) in step.blocks.into_iter().zip(&compared) {
                    if changed(s) {
                        match current.get_mut(&name) {
                            Some(slot) => *slot = block,
                            None => {
                                current.insert(name, block);
                            }
                        }
                    }
                }
                self.sink.closed(&frame_key(j))?;
                frames += 1;
            }
        }
        // Every record's `r` key is written, `{}` for an empty document:
        // the key table gives no absence rule for `r` (a reader that reads
        // a missing one as `{}` does so by this project's decision,
        // lmdb.record.meta-absent), so a file from here never relies on it.
        self.scratch.clear();
        serde_json::to_writer(&mut self.scratch, &record.meta)
            .map_err(|e| Error::Lmdb(e.to_string()))?;
        self.record_spill.push(r, &self.scratch)?;
        if has_system {
            self.system_spill.push(r, &self.system_value)?;
        }
        self.n_frames.push(frames);
        self.n_atoms.push(n_atoms.unwrap_or(0));
        self.has_trajectory.push(has_trajectory);
        self.total_frames += frames;
        Ok(())
    }

    /// Writes the force field, the index (the binding's four columns and
    /// the collection's own `index` columns) and the spilled `r` and `s`
    /// values, syncs, then writes `meta` in the last two transactions and
    /// syncs; with [`WriterOptions::digest`], hashes the finished file
    /// before it is moved to the path.
    /// An operating-system error (a full disk) names the file.
    pub fn finish(mut self, index: BTreeMap<String, Column>) -> Result<Written> {
        // Located before `self` is dropped, which deletes an unfinished
        // partial file: the free space it reports is the space the write
        // ran out of, not the space its deletion gave back.
        self.finish_file(index)
            .map_err(|e| located_io(&self.output.path, e))
    }

    fn finish_file(&mut self, mut index: BTreeMap<String, Column>) -> Result<Written> {
        self.check_running()?;
        let n = self.records();
        validate::prepare_index(&mut index, n, Rounding::Apply)?;
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
        // In key order after the frames: `ff`, `index`, every `r`, every `s`.
        if let Some(ff) = self.forcefield.take() {
            self.sink.push(FF_KEY, &ff)?;
        }
        // Encoded straight into the batch, as frames are: the index grows
        // with the records, and a copy of it in `scratch` as well would
        // make the writer's peak grow twice as fast.
        let index_start = self.sink.batch.data.len();
        encode_append(
            std::iter::once(("records", &block)),
            &FrameInfo::default(),
            true,
            &mut self.sink.batch.data,
        );
        check_written_header(&self.sink.batch.data[index_start..])
            .map_err(|e| e.within("index"))?;
        // Freed before the batch may be committed, which lowers the peak.
        drop(block);
        self.sink.closed(INDEX_KEY)?;
        self.sink.drain(&mut self.record_spill, record_key)?;
        self.sink.drain(&mut self.system_spill, system_key)?;
        // Every record is on disk before `meta` says the collection exists.
        self.sink.sync()?;
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
        // `meta` in two transactions, so that both of LMDB's meta pages
        // point at a tree that holds it. A reader picks its meta page by the
        // parity of the transaction id in the lock file, and one that opens
        // the path through a lock file still held by readers of the file it
        // replaced (an id of that file) finds the whole collection on either
        // page; with one commit, half of such readers found the tree before
        // `meta` and refused the collection as uncommitted.
        self.sink.push(META_KEY, &value)?;
        self.sink.flush()?;
        self.sink.push(META_KEY, &value)?;
        self.sink.sync()?;
        self.sink.close()?;
        // The partial file holds the whole collection now: it is never
        // deleted, even if it cannot be moved to the path.
        self.output.complete = true;
        // Hashed where it was built, under the writer's lock: the digest is
        // of the bytes the path gets.
        let partial = partial_path(&self.output.path);
        let bytes = std::fs::metadata(&partial)
            .map_err(|e| Error::io_at(&partial, e))?
            .len();
        let digest = match self.output.digest {
            true => Some(crate::lmdb::file_digest(&partial)?),
            false => None,
        };
        install(&self.output)?;
        Ok(Written { bytes, digest })
    }

    /// The path `finish` puts the collection at.
    pub fn path(&self) -> &Path {
        &self.output.path
    }
}

/// Writes a whole in-memory collection to a new file.
pub fn write_collection(
    path: &Path,
    collection: Collection,
    options: WriterOptions,
) -> Result<Written> {
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

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_os = "linux")]
    use crate::lmdb::file_mappings;

    /// The writer encodes frames straight into its batch, after other
    /// values: padding counts from the value's start, so each value is
    /// what `encode` writes on its own.
    #[test]
    fn a_frame_encoded_after_other_values_is_the_frame_encode_writes() {
        let mut block = Block {
            count: 3,
            ..Block::default()
        };
        block.columns.insert(
            "flag".into(),
            Column::new(vec![3], ColumnData::Bool(vec![true, false, true])),
        );
        block.columns.insert(
            "x".into(),
            Column {
                validity: Some(vec![true, false, true]),
                ..Column::new(vec![3], ColumnData::F64(vec![0.5, -0.0, 2.0]))
            },
        );
        let blocks = BTreeMap::from([("atoms".to_string(), block)]);
        let info = FrameInfo {
            step: Some(7),
            ..FrameInfo::default()
        };
        let mut alone = Vec::new();
        encode(&blocks, &info, false, &mut alone);
        for prefix in 0..17 {
            let mut batch = vec![0xAB; prefix];
            let iter = blocks.iter().map(|(n, b)| (n.as_str(), b));
            encode_append(iter, &info, false, &mut batch);
            assert!(batch[..prefix].iter().all(|&b| b == 0xAB));
            assert_eq!(&batch[prefix..], &alone[..], "after {prefix} bytes");
        }
    }

    /// Only LMDB's map of the collection file is unmapped after a commit:
    /// a shared, read-only mapping of its device and inode; not the lock
    /// file, a private or writable mapping of the same file, the same inode
    /// number on another device, or other lines.
    #[cfg(target_os = "linux")]
    #[test]
    fn only_the_shared_read_only_mapping_of_the_file_is_released() {
        let maps = "\
55d0c0000000-55d0c0100000 r-xp 00000000 fe:00 42                         /usr/bin/mrec
7f3db4000000-7f3e34000000 r--s 00000000 fe:00 5310418                    /data/c.mrec.lmdb
7f3e40000000-7f3e40001000 rw-s 00000000 fe:00 5310418                    /data/c.mrec.lmdb
7f3e50000000-7f3e50100000 r--p 00000000 fe:00 5310418                    /data/c.mrec.lmdb
7fbd00448000-7fbd0044a000 rw-s 00000000 fe:00 5310140                    /data/c.mrec.lmdb-lock
7f0000000000-7f0000001000 rw-p 00000000 00:00 0
7f0000002000-7f0000001000 r--s 00000000 fe:00 5310418                    /data/backwards
7f0000004000-7f0000005000 r--s 00000000 103:0a 5310418                   /other/disk.mrec.lmdb
not a maps line
";
        let found: Vec<_> = file_mappings(maps, (0xfe, 0), 5310418).collect();
        assert_eq!(found, vec![(0x7f3d_b400_0000, 0x7f3e_3400_0000)]);
        let other: Vec<_> = file_mappings(maps, (0x103, 0x0a), 5310418).collect();
        assert_eq!(other, vec![(0x7f00_0000_4000, 0x7f00_0000_5000)]);
        assert_eq!(file_mappings(maps, (0xfe, 0), 7).count(), 0);
        assert_eq!(file_mappings("", (0xfe, 0), 5310418).count(), 0);
    }
}
