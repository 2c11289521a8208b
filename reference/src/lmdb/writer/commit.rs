//! The commit thread: batches of encoded values put in key order and
//! committed one transaction per batch, on a thread of its own, two batches
//! in flight at most; after each commit the file's writeback is started and
//! the pages LMDB read through its map are unmapped.

use super::*;

/// The database side of the writer: the batch being filled, and a thread
/// that commits the previous one meanwhile (LMDB's puts and the copy of
/// the dirty pages into the page cache overlap the validation and
/// encoding of the next records). One batch at most is in the committer's
/// hands: memory holds two.
pub(super) struct Sink {
    pub(super) batch: Batch,
    /// The other batch, when it is not being committed.
    pub(super) spare: Option<Batch>,
    pub(super) batch_bytes: usize,
    /// Batches handed to the committer so far: while it is unchanged, what
    /// was buffered since can still be taken back.
    pub(super) commits: u64,
    pub(super) jobs: Option<mpsc::Sender<Job>>,
    pub(super) done: mpsc::Receiver<Result<Done>>,
    pub(super) committer: Option<std::thread::JoinHandle<()>>,
}

/// What the committer thread is asked to do.
pub(super) enum Job {
    /// Write the batch in one transaction and hand it back, cleared.
    Commit(Batch),
    /// Flush the file to disk (everything committed so far).
    Sync,
}

/// What the committer hands back.
pub(super) enum Done {
    Committed(Batch),
    Synced,
}

/// The committer thread's side: the environment and the append order.
pub(super) struct Committer {
    pub(super) env: Env<WithoutTls>,
    pub(super) db: Db,
    /// The greatest key in the database: a put past it appends.
    pub(super) last_key: Vec<u8>,
    /// The collection file, for [`start_writeback`].
    pub(super) file: File,
}

/// Buffered keys and values, one contiguous buffer of values (a frame is
/// encoded straight into it) and their keys with the end of each value.
pub(super) struct Batch {
    pub(super) data: Vec<u8>,
    pub(super) entries: Vec<Entry>,
}

pub(super) struct Entry {
    pub(super) key: [u8; 9],
    pub(super) key_len: u8,
    pub(super) end: usize,
}

impl Batch {
    /// Records that `data[previous end..]` is the value of `key`.
    pub(super) fn close(&mut self, key: &[u8]) {
        let mut k = [0u8; 9];
        k[..key.len()].copy_from_slice(key);
        self.entries.push(Entry {
            key: k,
            key_len: key.len() as u8,
            end: self.data.len(),
        });
    }

    /// Keys and values in the order they were buffered.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
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
    pub(super) fn with_capacity(batch_bytes: usize) -> Batch {
        const SLACK: usize = 1 << 16;
        let mut data = Vec::new();
        let _ = data.try_reserve_exact(batch_bytes.min(1 << 30) + SLACK);
        Batch {
            data,
            entries: Vec::new(),
        }
    }

    pub(super) fn clear(&mut self) {
        self.data.clear();
        self.entries.clear();
    }
}

impl Sink {
    /// Ends the value buffered since the previous one under `key`, and
    /// commits the batch when it is full.
    pub(super) fn closed(&mut self, key: &[u8]) -> Result<()> {
        self.batch.close(key);
        if self.batch.data.len() >= self.batch_bytes {
            self.flush()?;
        }
        Ok(())
    }

    /// Buffers one value (copied) and commits the batch when it is full.
    pub(super) fn push(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.batch.data.extend_from_slice(value);
        self.closed(key)
    }

    /// Streams spilled values back into batches under `key(r)`, in record order.
    pub(super) fn drain(&mut self, spill: &mut Spill, key: fn(u64) -> [u8; 9]) -> Result<()> {
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
    pub(super) fn start(
        env: Env<WithoutTls>,
        db: Db,
        file: File,
        batch_bytes: usize,
    ) -> Result<Sink> {
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
    pub(super) fn flush(&mut self) -> Result<()> {
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
    pub(super) fn sync(&mut self) -> Result<()> {
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
    pub(super) fn close(&mut self) -> Result<()> {
        self.jobs = None;
        match self.committer.take().map(std::thread::JoinHandle::join) {
            Some(Err(_)) => Err(Error::Lmdb("the commit thread panicked".into())),
            _ => Ok(()),
        }
    }

    pub(super) fn send(&mut self, job: Job) -> Result<()> {
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
    pub(super) fn committed(&mut self) -> Result<Batch> {
        match self.answer()? {
            Done::Committed(batch) => Ok(batch),
            Done::Synced => Err(Error::Lmdb("committer: out of order".into())),
        }
    }

    pub(super) fn answer(&mut self) -> Result<Done> {
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
    pub(super) fn commit(&mut self, batch: &Batch) -> Result<()> {
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
pub(super) fn start_writeback(file: &File) {
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

/// Drops this process's mappings of the file's pages after each commit
/// ([`release_file_pages`](crate::lmdb::release_file_pages)). Each
/// transaction reads the path to the last leaf page through the map (those
/// pages were written by the previous commit), and they then stayed
/// mapped: the writer's resident memory grew with the number of commits,
/// from 10 MiB of file pages at 8,400 records to 26 MiB at 33,600 (4 MiB
/// batches), while its own (anonymous) memory stayed at 25 MiB. LMDB maps
/// the file shared and read-only (the writer has no `WRITE_MAP`), so this
/// loses nothing: the page cache keeps the pages and the next read maps
/// them again. No transaction of the writer is open (only the commit
/// thread opens them, and it has just committed).
pub(super) fn release_mapped_pages(file: &File) {
    use std::os::unix::fs::MetadataExt;
    if let Ok(meta) = file.metadata() {
        crate::lmdb::release_file_pages((meta.dev(), meta.ino()));
    }
}
