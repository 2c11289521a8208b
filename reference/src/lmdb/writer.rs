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

/// The database side of the writer: the batch being filled, and a thread
/// that commits the previous one meanwhile (LMDB's puts and the copy of
/// the dirty pages into the page cache overlap the validation and
/// encoding of the next records). One batch at most is in the committer's
/// hands: memory holds two.
struct Sink {
    batch: Batch,
    /// The other batch, when it is not being committed.
    spare: Option<Batch>,
    batch_bytes: usize,
    /// Batches handed to the committer so far: while it is unchanged, what
    /// was buffered since can still be taken back.
    commits: u64,
    jobs: Option<mpsc::Sender<Job>>,
    done: mpsc::Receiver<Result<Done>>,
    committer: Option<std::thread::JoinHandle<()>>,
}

/// What the committer thread is asked to do.
enum Job {
    /// Write the batch in one transaction and hand it back, cleared.
    Commit(Batch),
    /// Flush the file to disk (everything committed so far).
    Sync,
}

/// What the committer hands back.
enum Done {
    Committed(Batch),
    Synced,
}

/// The committer thread's side: the environment and the append order.
struct Committer {
    env: Env<WithoutTls>,
    db: Db,
    /// The greatest key in the database: a put past it appends.
    last_key: Vec<u8>,
    /// The collection file, for [`start_writeback`].
    file: File,
}

/// Buffered keys and values, one contiguous buffer of values (a frame is
/// encoded straight into it) and their keys with the end of each value.
struct Batch {
    data: Vec<u8>,
    entries: Vec<Entry>,
}

struct Entry {
    key: [u8; 9],
    key_len: u8,
    end: usize,
}

impl Batch {
    /// Records that `data[previous end..]` is the value of `key`.
    fn close(&mut self, key: &[u8]) {
        let mut k = [0u8; 9];
        k[..key.len()].copy_from_slice(key);
        self.entries.push(Entry {
            key: k,
            key_len: key.len() as u8,
            end: self.data.len(),
        });
    }

    /// Keys and values in the order they were buffered.
    fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let mut start = 0;
        self.entries.iter().map(move |e| {
            let value = &self.data[start..e.end];
            start = e.end;
            (&e.key[..e.key_len as usize], value)
        })
    }

    /// An empty batch whose buffer already holds `batch_bytes` and a
    /// frame more. Grown by doubling instead, the buffer was copied five
    /// times on its way to 16 MiB and touched about three times the fresh
    /// pages it ended up using, and first touches of memory are slow on a
    /// VM (`perf`: 14% of the writer thread's time went to growing the two
    /// batches). A larger value still grows it. Best effort: when the
    /// reservation fails, the buffer grows as it goes.
    fn with_capacity(batch_bytes: usize) -> Batch {
        const SLACK: usize = 1 << 16;
        let mut data = Vec::new();
        let _ = data.try_reserve_exact(batch_bytes.min(1 << 30) + SLACK);
        Batch {
            data,
            entries: Vec::new(),
        }
    }

    fn clear(&mut self) {
        self.data.clear();
        self.entries.clear();
    }
}

impl Sink {
    /// Ends the value buffered since the previous one under `key`, and
    /// commits the batch when it is full.
    fn closed(&mut self, key: &[u8]) -> Result<()> {
        self.batch.close(key);
        if self.batch.data.len() >= self.batch_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// Buffers one value (copied) and commits the batch when it is full.
    fn push(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.batch.data.extend_from_slice(value);
        self.closed(key)
    }

    /// Streams spilled values back into batches under `key(r)`, in record order.
    fn drain(&mut self, spill: &mut Spill, key: fn(u64) -> [u8; 9]) -> Result<()> {
        let mut reader = spill.reader()?;
        while let Some((r, len)) = next_spilled(&mut reader)? {
            let at = self.batch.data.len();
            self.batch.data.resize(at + len, 0);
            reader.read_exact(&mut self.batch.data[at..])?;
            self.closed(&key(r))?;
        }
        Ok(())
    }

    /// A sink writing into `env`, with its committer thread started.
    fn start(env: Env<WithoutTls>, db: Db, file: File, batch_bytes: usize) -> Result<Sink> {
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (outbox, done) = mpsc::channel();
        let mut committer = Committer {
            env,
            db,
            last_key: Vec::new(),
            file,
        };
        let handle = std::thread::Builder::new()
            .name("mrec-commit".into())
            .spawn(move || {
                for job in inbox {
                    let answer = match job {
                        Job::Commit(mut batch) => committer.commit(&batch).map(|()| {
                            start_writeback(&committer.file);
                            release_mapped_pages(&committer.file);
                            batch.clear();
                            Done::Committed(batch)
                        }),
                        Job::Sync => committer
                            .env
                            .force_sync()
                            .map(|()| Done::Synced)
                            .map_err(lmdb_error),
                    };
                    if outbox.send(answer).is_err() {
                        break;
                    }
                }
                // The writer is gone (finished or dropped): no transaction
                // is open; close the environment before the file's lock
                // is released.
                committer.env.prepare_for_closing().wait();
            })?;
        Ok(Sink {
            batch: Batch::with_capacity(batch_bytes),
            spare: Some(Batch::with_capacity(batch_bytes)),
            batch_bytes,
            commits: 0,
            jobs: Some(jobs),
            done,
            committer: Some(handle),
        })
    }

    /// Hands the buffered batch to the committer, once it is done with the
    /// previous one.
    fn flush(&mut self) -> Result<()> {
        if self.batch.entries.is_empty() {
            return Ok(());
        }
        let next = match self.spare.take() {
            Some(batch) => batch,
            None => self.committed()?,
        };
        let full = std::mem::replace(&mut self.batch, next);
        self.commits += 1;
        self.send(Job::Commit(full))
    }

    /// Commits everything buffered, waits for it, and flushes the file to disk.
    fn sync(&mut self) -> Result<()> {
        self.flush()?;
        if self.spare.is_none() {
            let batch = self.committed()?;
            self.spare = Some(batch);
        }
        self.send(Job::Sync)?;
        match self.answer()? {
            Done::Synced => Ok(()),
            Done::Committed(_) => Err(Error::Lmdb("committer: out of order".into())),
        }
    }

    /// Stops the committer (which closes the environment) and waits for it.
    fn close(&mut self) -> Result<()> {
        self.jobs = None;
        match self.committer.take().map(std::thread::JoinHandle::join) {
            Some(Err(_)) => Err(Error::Lmdb("the commit thread panicked".into())),
            _ => Ok(()),
        }
    }

    fn send(&mut self, job: Job) -> Result<()> {
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok());
        if sent {
            Ok(())
        } else {
            Err(Error::Lmdb("the commit thread has stopped".into()))
        }
    }

    /// The batch in the committer's hands, once committed.
    fn committed(&mut self) -> Result<Batch> {
        match self.answer()? {
            Done::Committed(batch) => Ok(batch),
            Done::Synced => Err(Error::Lmdb("committer: out of order".into())),
        }
    }

    fn answer(&mut self) -> Result<Done> {
        self.done
            .recv()
            .map_err(|_| Error::Lmdb("the commit thread has stopped".into()))?
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        // A writer dropped before `finish`: the committer finishes what it
        // was given (a file without `meta`, refused as uncommitted).
        let _ = self.close();
    }
}

impl Committer {
    /// Writes `batch` in one transaction, growing the map on
    /// `MDB_MAP_FULL`. A key past every key in the database is appended
    /// (`MDB_APPEND`: no search, and a full leaf page is left full rather
    /// than split in half); any other key is put normally.
    fn commit(&mut self, batch: &Batch) -> Result<()> {
        let env = &self.env;
        loop {
            let mut last = self.last_key.clone();
            let attempt = (|| -> heed::Result<()> {
                let mut txn = env.write_txn()?;
                for (k, v) in batch.iter() {
                    if k > last.as_slice() {
                        self.db.put_with_flags(&mut txn, PutFlags::APPEND, k, v)?;
                        last.clear();
                        last.extend_from_slice(k);
                    } else {
                        self.db.put(&mut txn, k, v)?;
                    }
                }
                txn.commit()
            })();
            match attempt {
                Ok(()) => {
                    self.last_key = last;
                    return Ok(());
                }
                Err(heed::Error::Mdb(MdbError::MapFull)) => {
                    let grown = env
                        .info()
                        .map_size
                        .saturating_mul(2)
                        .max(batch.data.len().saturating_mul(4));
                    let page = 1 << 20;
                    // SAFETY: the failed transaction was dropped (aborted);
                    // this Env is private to the writer and only this
                    // thread opens transactions on it: none is active.
                    unsafe { env.resize(grown.div_ceil(page) * page) }.map_err(lmdb_error)?;
                }
                Err(e) => return Err(lmdb_error(e)),
            }
        }
    }
}

/// Starts the kernel writing the file's dirty pages to disk without
/// waiting for it (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`), after
/// each commit. Without it the pages stayed dirty until `finish`, whose
/// first sync then waited 0.2 s for the disk (`strace`, 8,400 records:
/// 43% of the whole write); started early, the disk writes while the next
/// batches are encoded. It changes nothing LMDB relies on (with `NO_SYNC`
/// the kernel may write pages back at any time) and syncs nothing: `finish`
/// still syncs before and after `meta`. Best effort: an error is ignored;
/// on other systems nothing is done.
fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the call reads no memory of ours; `file` keeps the
        // descriptor open for its duration.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// Drops this process's mappings of the file's pages (Linux
/// `madvise(MADV_DONTNEED)` over LMDB's map of `file`, found in
/// `/proc/self/maps` by the file's device and inode), after each commit.
/// Each transaction reads the path to the last leaf page through the map (those
/// pages were written by the previous commit), and they then stayed
/// mapped: the writer's resident memory grew with the number of commits,
/// from 10 MiB of file pages at 8,400 records to 26 MiB at 33,600 (4 MiB
/// batches), while its own (anonymous) memory stayed at 25 MiB. LMDB maps
/// the file shared and read-only (the writer has no `WRITE_MAP`), so this
/// loses nothing: the page cache keeps the pages and the next read maps
/// them again. Best effort: an error is ignored; on other systems nothing
/// is done.
fn release_mapped_pages(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let (Ok(meta), Ok(maps)) = (file.metadata(), std::fs::read_to_string("/proc/self/maps"))
        else {
            return;
        };
        let device = (libc::major(meta.dev()), libc::minor(meta.dev()));
        for (start, end) in file_mappings(&maps, device, meta.ino()) {
            // SAFETY: the range is a shared, read-only mapping of the
            // collection file: the writer's LMDB map (or a reader's of the
            // same file in this process). On a shared file mapping,
            // MADV_DONTNEED only drops this process's page-table entries:
            // the next access maps the page cache's page again, with the
            // same bytes, so every pointer into the range stays valid and
            // reads what it read before. No transaction of the writer is
            // open (only this thread opens them, and it has just committed).
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// The address ranges of `/proc/self/maps` lines (`start-end perms offset
/// major:minor inode path`, numbers of the range and device in hex) that
/// map inode `ino` of `device` shared and read-only (`r--s`).
#[cfg(target_os = "linux")]
fn file_mappings(
    maps: &str,
    device: (u32, u32),
    ino: u64,
) -> impl Iterator<Item = (usize, usize)> + '_ {
    let hex = |s: &str| usize::from_str_radix(s, 16).ok();
    maps.lines().filter_map(move |line| {
        let mut fields = line.split_ascii_whitespace();
        let (range, perms) = (fields.next()?, fields.next()?);
        // The offset, then the device.
        let dev = fields.nth(1)?;
        let inode: u64 = fields.next()?.parse().ok()?;
        let (major, minor) = dev.split_once(':')?;
        let on_device = (hex(major)?, hex(minor)?) == (device.0 as usize, device.1 as usize);
        let (start, end) = range.split_once('-')?;
        let (start, end) = (hex(start)?, hex(end)?);
        (on_device && inode == ino && perms == "r--s" && end > start).then_some((start, end))
    })
}

/// Values kept aside until `finish`, in an unnamed temporary file (gone
/// with the writer, even a killed one): each is `u64 LE record | u64 LE
/// length | bytes`, in record order.
struct Spill {
    file: BufWriter<File>,
}

impl Spill {
    /// A new spill file in `dir` (the collection's directory: the same file
    /// system, not a possibly memory-backed `/tmp`).
    fn new(dir: &Path) -> Result<Spill> {
        Ok(Spill {
            file: BufWriter::with_capacity(1 << 16, tempfile::tempfile_in(dir)?),
        })
    }

    fn push(&mut self, r: u64, value: &[u8]) -> Result<()> {
        self.file.write_all(&r.to_le_bytes())?;
        self.file.write_all(&(value.len() as u64).to_le_bytes())?;
        self.file.write_all(value)?;
        Ok(())
    }

    /// The spilled values from the first, for reading back.
    fn reader(&mut self) -> Result<BufReader<&mut File>> {
        self.file.flush()?;
        let file = self.file.get_mut();
        file.seek(SeekFrom::Start(0))?;
        Ok(BufReader::with_capacity(1 << 16, file))
    }
}

/// The next spilled value: its record number and length, or `None` at the end.
fn next_spilled(reader: &mut impl Read) -> Result<Option<(u64, usize)>> {
    let mut head = [0u8; 16];
    match reader.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let r = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(head[8..].try_into().expect("8 bytes"));
    let len = usize::try_from(len).map_err(|_| Error::Lmdb("spill file: bad length".into()))?;
    Ok(Some((r, len)))
}

/// The file a writer builds the collection for `path` in: `path` with
/// `.partial` appended, in the same directory. [`Writer::finish`] renames
/// it to `path` once the collection is committed, so `path` never holds a
/// part of one: a reader sees no file, the complete collection, or (with
/// `overwrite`) the file it replaces, whole, until the rename. A writer
/// dropped before `finish` deletes it; one killed leaves it behind,
/// uncommitted, and the next writer of `path` starts it again. An
/// overwrite needs room for both files until the rename.
pub fn partial_path(path: &Path) -> PathBuf {
    super::suffixed(path, ".partial")
}

/// Where a writer puts its collection: `path`, by way of its
/// [`partial_path`], which is deleted (with its lock file) when the writer
/// is dropped before the collection in it is complete.
struct Output {
    path: PathBuf,
    overwrite: bool,
    complete: bool,
}

impl Drop for Output {
    fn drop(&mut self) {
        if !self.complete {
            super::remove_with_lock_file(&partial_path(&self.path));
        }
    }
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
        let merged = match (&self.given_schema, &record.trajectory) {
            (None, Some(traj)) => {
                let tat = format!("{at}.trajectory");
                let decl = validate::record_declaration(traj, &tat)?;
                let mut merged = self.derived_schema.clone();
                merged.merge(&decl, &tat)?;
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
            n_atoms = Some(system.blocks.get("atoms").map_or(0, |b| b.count));
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
        if !record.meta.is_empty() {
            self.scratch.clear();
            serde_json::to_writer(&mut self.scratch, &record.meta)
                .map_err(|e| Error::Lmdb(e.to_string()))?;
            self.record_spill.push(r, &self.scratch)?;
        }
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
    /// syncs.
    /// An operating-system error (a full disk) names the file.
    pub fn finish(mut self, index: BTreeMap<String, Column>) -> Result<()> {
        // Located before `self` is dropped, which deletes an unfinished
        // partial file: the free space it reports is the space the write
        // ran out of, not the space its deletion gave back.
        self.finish_file(index)
            .map_err(|e| located_io(&self.output.path, e))
    }

    fn finish_file(&mut self, mut index: BTreeMap<String, Column>) -> Result<()> {
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
        install(&self.output)
    }

    /// The path `finish` puts the collection at.
    pub fn path(&self) -> &Path {
        &self.output.path
    }
}

/// Moves the committed collection in `partial` to `path`. With `overwrite`,
/// a rename: readers that have the replaced file open keep reading it,
/// whole (writing it in place would cut the pages they map from under
/// them, a SIGBUS). Without, a hard link, which fails rather than replace
/// a file created at `path` meanwhile (a rename where the file system has
/// no hard links). Best effort last: the directory is synced, so the new
/// name survives a power cut as the file's content does.
fn install(output: &Output) -> Result<()> {
    let (path, partial) = (&output.path, &partial_path(&output.path));
    let _ = std::fs::remove_file(lock_path(partial));
    // Whatever keeps the collection from its path, it stays in `partial`.
    // (`finish` names the path.)
    let not_placed = |kind, why: String| {
        let where_ = format!("{why}; the collection is complete in {}", partial.display());
        Error::Io(std::io::Error::new(kind, where_))
    };
    let occupied = || {
        not_placed(
            std::io::ErrorKind::AlreadyExists,
            "another program created this file during the write".into(),
        )
    };
    let rename = || std::fs::rename(partial, path).map_err(|e| not_placed(e.kind(), e.to_string()));
    if output.overwrite {
        rename()?;
    } else {
        match std::fs::hard_link(partial, path) {
            // Only the second name goes: the collection is at the path.
            Ok(()) => {
                let _ = std::fs::remove_file(partial);
            }
            // An empty file is not a collection: `create` takes it as free.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if !std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0) {
                    return Err(occupied());
                }
                rename()?;
            }
            Err(_) if path.exists() => return Err(occupied()),
            Err(_) => rename()?,
        }
    }
    // LMDB's readers take the current transaction from the lock file and
    // pick their meta page by its parity. A lock file left by readers of a
    // replaced file holds an id of that file; both meta pages lead to the
    // whole collection (`finish_file`), and without that lock file new
    // readers start one of their own. Readers of the replaced file keep
    // theirs open.
    let _ = std::fs::remove_file(lock_path(path));
    if let Ok(dir) = File::open(directory_of(path)) {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// Writes the two meta pages of an empty LMDB environment (LMDB's data
/// format 1, as `mdb_env_init_meta` writes them) with page size `page_size`
/// and map size `map_size` into the empty `file`: a main database and a
/// free-page database without pages, no transaction committed yet.
fn write_empty_environment(file: &File, page_size: u32, map_size: u64) -> Result<()> {
    use std::os::unix::fs::FileExt;
    const P_META: u16 = 0x08;
    const MDB_MAGIC: u32 = 0xBEEF_C0DE;
    const MDB_DATA_VERSION: u32 = 1;
    /// `MDB_NOSUBDIR` (this writer's only persistent environment flag)
    /// and `MDB_INTEGERKEY`, the free-page database's own flag.
    const FREE_DB_FLAGS: u16 = 0x4000 | 0x08;
    const NO_PAGE: u64 = u64::MAX;
    let size = page_size as usize;
    let mut pages = vec![0u8; 2 * size];
    for (pgno, page) in pages.chunks_exact_mut(size).enumerate() {
        let mut at = 0usize;
        let mut put = |bytes: &[u8]| {
            page[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        // MDB_page header: pgno, pad, flags, lower, upper.
        put(&(pgno as u64).to_le_bytes());
        put(&0u16.to_le_bytes());
        put(&P_META.to_le_bytes());
        put(&[0; 4]);
        // MDB_meta: magic, version, fixed-map address, map size.
        put(&MDB_MAGIC.to_le_bytes());
        put(&MDB_DATA_VERSION.to_le_bytes());
        put(&0u64.to_le_bytes());
        put(&map_size.to_le_bytes());
        // Two MDB_db: pad (the page size, for the free-page database),
        // flags, depth, branch, leaf and overflow pages, entries, root.
        for (pad, flags) in [(page_size, FREE_DB_FLAGS), (0, 0)] {
            put(&pad.to_le_bytes());
            put(&flags.to_le_bytes());
            put(&0u16.to_le_bytes());
            put(&[0; 32]);
            put(&NO_PAGE.to_le_bytes());
        }
        // Last page used (the second meta page), last transaction id.
        put(&1u64.to_le_bytes());
        put(&0u64.to_le_bytes());
    }
    file.write_all_at(&pages, 0)?;
    Ok(())
}

/// Refuses a `path` a collection cannot be put at: one that is not a file,
/// or without `overwrite` a file that is not empty.
fn check_target(path: &Path, overwrite: bool) -> Result<()> {
    let refuse = |kind, why: &str| Err(Error::io_at(path, std::io::Error::new(kind, why)));
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => refuse(std::io::ErrorKind::AlreadyExists, "not a file"),
        Ok(m) if m.len() > 0 && !overwrite => refuse(
            std::io::ErrorKind::AlreadyExists,
            "exists (pass overwrite to replace it)",
        ),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io_at(path, e)),
        _ => Ok(()),
    }
}

/// Takes the writer's exclusive lock on `partial` (creating it) and
/// empties it: what a killed writer left there is never a collection.
/// Busy while another writer of `target` holds it.
fn claim(partial: &Path, target: &Path) -> Result<File> {
    use std::os::unix::fs::MetadataExt;
    let busy = || {
        Error::Busy(format!(
            "{} is being written by another writer",
            target.display()
        ))
    };
    // A writer finishing meanwhile renames the file this one opened and
    // then releases it: the lock taken is then on its collection, not on
    // the partial path, and the path is opened again.
    for _ in 0..3 {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(partial)
            .map_err(|e| Error::io_at(target, e))?;
        if file.try_lock().is_err() {
            return Err(busy());
        }
        let held = file.metadata().map_err(|e| Error::io_at(target, e))?;
        let named = std::fs::metadata(partial);
        if !named.is_ok_and(|n| (n.dev(), n.ino()) == (held.dev(), held.ino())) {
            continue;
        }
        // A file with another name (a collection whose partial name was
        // left after its hard link) is not emptied: the name goes instead.
        if held.nlink() > 1 {
            std::fs::remove_file(partial).map_err(|e| Error::io_at(target, e))?;
            continue;
        }
        file.set_len(0).map_err(|e| Error::io_at(target, e))?;
        let _ = std::fs::remove_file(lock_path(partial));
        return Ok(file);
    }
    Err(busy())
}

/// `e`, naming `path` if it is an operating-system error (which, unlike a
/// refusal, says nothing of where it happened), and the free space of its
/// file system when little is left: LMDB reports a write cut short by a
/// full disk as EIO, "Input/output error", not as ENOSPC.
fn located_io(path: &Path, e: Error) -> Error {
    let Error::Io(io) = e else {
        return e;
    };
    match super::free_bytes(directory_of(path)).filter(|&free| free < 64 << 20) {
        Some(free) => Error::io_at(
            path,
            std::io::Error::new(
                io.kind(),
                format!("{io}; its file system has {free} bytes free"),
            ),
        ),
        None => Error::io_at(path, io),
    }
}

/// The directory holding `path` (`.` for a bare file name).
fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
