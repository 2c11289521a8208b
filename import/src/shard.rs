//! The shards: opened and checked (`check_shards`, LMDB's page check in a
//! child process), their rows fetched by id and decoded on a reader thread
//! (`read_all`), and the pages of their maps given back as the pass goes
//! (`PageWatch`), so that resident memory follows the rows in flight, not
//! the bytes read.

use super::*;

/// One shard, open for reading.
pub(super) struct Shard {
    pub(super) path: PathBuf,
    /// The file's name (or the source's, for [`Origin::Ase`]).
    pub(super) name: String,
    /// How messages name it: `shard PATH` or `source NAME`.
    pub(super) label: String,
    pub(super) env: Env<WithoutTls>,
    pub(super) db: Database<Bytes, Bytes>,
    pub(super) nextid: u64,
    pub(super) deleted: HashSet<u64>,
    pub(super) metadata: Option<Value>,
    pub(super) entries: u64,
    pub(super) reserved: u64,
}

impl Shard {
    /// The ids `LMDBDatabase` reads, in its order.
    pub(super) fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        (1..self.nextid).filter(|i| !self.deleted.contains(i))
    }
    pub(super) fn n_rows(&self) -> u64 {
        self.ids().count() as u64
    }
    pub(super) fn deleted_in_range(&self) -> u64 {
        self.deleted
            .iter()
            .filter(|&&i| i >= 1 && i < self.nextid)
            .count() as u64
    }
    pub(super) fn bad(&self, key: &str, what: impl std::fmt::Display) -> String {
        format!("{}: key {key:?}: {what}", self.label)
    }
}

pub(super) fn lmdb_err(path: &Path, e: heed::Error) -> ImportError {
    match e {
        heed::Error::Io(io) => ImportError::Mrec(molrec::Error::io_at(path, io)),
        other => ImportError::Bad(format!(
            "shard {}: not a readable LMDB file: {other}",
            path.display()
        )),
    }
}

/// [`lmdb_err`] of a write: an operating-system error (a full disk) also
/// says how much its file system has left.
fn write_err(path: &Path, e: heed::Error) -> ImportError {
    match e {
        heed::Error::Io(io) => {
            ImportError::Mrec(molrec::lmdb::located_io(path, molrec::Error::Io(io)))
        }
        other => lmdb_err(path, other),
    }
}

/// Inflates and parses a reserved key's value as JSON.
pub(super) fn reserved_json(
    key: &str,
    value: &[u8],
    limit: usize,
) -> std::result::Result<Value, String> {
    let mut d = Decompress::new(true);
    let mut out = Vec::new();
    inflate(&mut d, value, &mut out, limit)?;
    let text = decode::sanitize(&out).unwrap_or(out);
    serde_json::from_slice(&text).map_err(|e| format!("`{key}` is not JSON: {e}"))
}

/// Checks the LMDB page structure of each shard (the library's
/// `check_pages`, which every `mrec` command runs on a file from
/// elsewhere), so that a damaged file is refused before LMDB maps it.
/// The check maps the whole file and reads every page of its tree, so it
/// runs in a child process when `command` names one (`mrec import
/// check-pages`): the pages it touched are not this process's resident
/// memory, which stays flat in the shards' size. Where no child can be
/// started, it runs here.
pub(super) fn check_shards(paths: &[PathBuf], command: Option<&[std::ffi::OsString]>) -> Res<()> {
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|e| molrec::Error::io_at(path, e))?;
        if !meta.is_file() {
            return Err(ImportError::Bad(format!(
                "shard {}: not a file (an ASE-LMDB shard is one LMDB file, no subdirectory)",
                path.display()
            )));
        }
    }
    let Some((program, args)) = command.and_then(|c| c.split_first()) else {
        return check_pages(paths);
    };
    let child = std::process::Command::new(program)
        .args(args)
        .args(paths)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output();
    match child {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) if out.status.code() == Some(4) => Err(ImportError::Bad(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        )),
        _ => check_pages(paths),
    }
}

/// `mrec import check-pages`: [`molrec::lmdb::check_pages`] of each
/// shard; `Err` names the first that fails.
pub fn check_pages(paths: &[PathBuf]) -> Res<()> {
    for path in paths {
        if let Err(e) = molrec::lmdb::check_pages(path) {
            return Err(ImportError::Bad(format!(
                "shard {}: not a sound LMDB file: {e}",
                path.display()
            )));
        }
    }
    Ok(())
}

pub(super) fn open_shard(path: &Path, label: &str, limit: usize) -> Res<Shard> {
    let meta = std::fs::metadata(path).map_err(|e| molrec::Error::io_at(path, e))?;
    if !meta.is_file() {
        return Err(ImportError::Bad(format!(
            "shard {}: not a file (an ASE-LMDB shard is one LMDB file, no subdirectory)",
            path.display()
        )));
    }
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    let mib = 1u64 << 20;
    options
        .map_size(((meta.len() + mib).div_ceil(mib) * mib) as usize)
        .max_dbs(0);
    // SAFETY: valid flags for a read-only open of a NO_SUB_DIR file;
    // NO_LOCK as ASE's own readonly mode (nothing writes a shard being
    // imported).
    unsafe {
        options.flags(
            EnvFlags::NO_SUB_DIR
                | EnvFlags::READ_ONLY
                | EnvFlags::NO_LOCK
                | EnvFlags::NO_READ_AHEAD,
        )
    };
    // SAFETY: the file is only read through this environment.
    let env = unsafe { options.open(path) }.map_err(|e| lmdb_err(path, e))?;
    let txn = env.read_txn().map_err(|e| lmdb_err(path, e))?;
    let db: Database<Bytes, Bytes> = env
        .open_database(&txn, None)
        .map_err(|e| lmdb_err(path, e))?
        .ok_or_else(|| ImportError::Bad(format!("shard {}: no database", path.display())))?;
    let entries = db.len(&txn).map_err(|e| lmdb_err(path, e))?;
    let bad = |key: &str, what: String| ImportError::Bad(format!("{label}: key {key:?}: {what}"));
    let get = |key: &str| -> Res<Option<Value>> {
        match db
            .get(&txn, key.as_bytes())
            .map_err(|e| lmdb_err(path, e))?
        {
            None => Ok(None),
            Some(v) => reserved_json(key, v, limit)
                .map(Some)
                .map_err(|e| bad(key, e)),
        }
    };
    let mut reserved = 0;
    let nextid = match get("nextid")? {
        None => 1,
        Some(v) => {
            reserved += 1;
            v.as_u64()
                .filter(|&n| n >= 1)
                .ok_or_else(|| bad("nextid", format!("expected an integer >= 1, got {v}")))?
        }
    };
    let deleted: HashSet<u64> = match get("deleted_ids")? {
        None => HashSet::new(),
        Some(v) => {
            reserved += 1;
            let list = v
                .as_array()
                .ok_or_else(|| bad("deleted_ids", "expected a list of ids".into()))?;
            list.iter()
                .map(|i| {
                    i.as_u64()
                        .ok_or_else(|| bad("deleted_ids", format!("{i} is not an id")))
                })
                .collect::<Res<_>>()?
        }
    };
    let metadata = get("metadata")?;
    if metadata.is_some() {
        reserved += 1;
    }
    drop(txn);
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into(),
    );
    let shard = Shard {
        path: path.to_path_buf(),
        name,
        label: label.to_string(),
        env,
        db,
        nextid,
        deleted,
        metadata,
        entries,
        reserved,
    };
    // Every id below `nextid` is a row or deleted: a `nextid` far beyond
    // the file's entries is not a shard (and would make a long walk).
    let claimed = (nextid - 1).saturating_sub(shard.deleted_in_range());
    if claimed > entries.saturating_add(1 << 16) {
        return Err(ImportError::Bad(shard.bad(
            "nextid",
            format!("{nextid} claims {claimed} rows; the file holds {entries} entries"),
        )));
    }
    Ok(shard)
}

/// A row read from a shard: decoded (and mapped, unless decode-only),
/// or what is wrong with it.
pub(super) enum Item {
    Decoded {
        shard: usize,
    },
    Mapped {
        shard: usize,
        id: u64,
        record: Box<molrec::model::Record>,
        tally: Tally,
        index: Vec<Option<Value>>,
    },
    Bad {
        shard: usize,
        id: u64,
        what: String,
    },
}

/// Reads, inflates and decodes one row by id.
pub(super) fn fetch(
    shard: &Shard,
    txn: &RoTxn<WithoutTls>,
    id: u64,
    d: &mut Decompress,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Res<std::result::Result<Row, String>> {
    let key = id.to_string();
    let value = shard
        .db
        .get(txn, key.as_bytes())
        .map_err(|e| lmdb_err(&shard.path, e))?;
    let Some(value) = value else {
        return Ok(Err(
            "missing: below nextid and not in deleted_ids (ase raises KeyError)".into(),
        ));
    };
    if let Err(e) = inflate(d, value, buf, limit) {
        return Ok(Err(e));
    }
    Ok(decode::decode_row(buf))
}

/// Rows per chunk: the unit a reader thread hands over.
const CHUNK: usize = 32;

/// The read side of the pass, one of `workers` threads: every row of
/// every shard is in a chunk (up to [`CHUNK`] rows of one shard, in
/// order), chunk k belongs to thread k mod `workers`, which reads,
/// inflates, decodes and (unless `decode_only`) maps its rows to records
/// and sends the chunk through its own bounded channel `tx`; the
/// appending thread takes the chunks from the threads in turn, so the
/// records are appended in row order and memory holds a few chunks per
/// thread. Stops when its receiver is gone.
pub(super) fn read_all(
    shards: &[Shard],
    tx: std::sync::mpsc::SyncSender<Res<Vec<Item>>>,
    (worker, workers): (usize, usize),
    limit: usize,
    decode_only: bool,
    index_keys: &[String],
) {
    let mut d = Decompress::new(true);
    let mut buf = Vec::new();
    let mut k = 0usize;
    for (s, shard) in shards.iter().enumerate() {
        let txn = match shard.env.read_txn() {
            Ok(t) => t,
            Err(e) => {
                let _ = tx.send(Err(lmdb_err(&shard.path, e)));
                return;
            }
        };
        let mut pages = PageWatch::new(&shard.path);
        let mut ids = shard.ids().peekable();
        while ids.peek().is_some() {
            let mine = k % workers == worker;
            k += 1;
            if !mine {
                ids.by_ref().take(CHUNK).for_each(drop);
                continue;
            }
            let mut chunk = Vec::with_capacity(CHUNK);
            for id in ids.by_ref().take(CHUNK) {
                let row = match fetch(shard, &txn, id, &mut d, &mut buf, limit) {
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                    Ok(row) => row,
                };
                chunk.push(match row {
                    Err(what) => Item::Bad { shard: s, id, what },
                    Ok(_) if decode_only => Item::Decoded { shard: s },
                    Ok(row) => map_row(shard, s, id, row, index_keys),
                });
                pages.row();
            }
            if tx.send(Ok(chunk)).is_err() {
                return;
            }
        }
        pages.release();
    }
}

/// Keeps the shard's pages this process maps from piling up: every few
/// rows it reads the resident size, and past [`PageWatch::HEADROOM`] above
/// the last release it gives the shard's mapped pages back
/// ([`release_mapped_pages`]). The kernel maps a file's pages in large
/// folios, so the resident size grows many times faster than the bytes
/// read (2 GB/s while reading 100 MB/s here): counting bytes is not enough.
pub(super) struct PageWatch<'a> {
    pub(super) path: &'a Path,
    pub(super) rows: u32,
    pub(super) base: u64,
}

impl<'a> PageWatch<'a> {
    const HEADROOM: u64 = 16 << 20;
    const EVERY: u32 = 8;

    pub(super) fn new(path: &'a Path) -> Self {
        PageWatch {
            path,
            rows: 0,
            base: resident_bytes().unwrap_or(0),
        }
    }

    pub(super) fn row(&mut self) {
        self.rows += 1;
        if self.rows == Self::EVERY {
            self.rows = 0;
            if let Some(now) = resident_bytes() {
                if now > self.base + Self::HEADROOM {
                    self.release();
                }
            }
        }
    }

    pub(super) fn release(&mut self) {
        release_mapped_pages(self.path);
        self.base = resident_bytes().unwrap_or(0);
    }
}

/// This process's resident bytes (`/proc/self/statm`).
pub(super) fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_ascii_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// One row, one record (`Item::Mapped`), or what is wrong with the row.
pub(super) fn map_row(shard: &Shard, s: usize, id: u64, row: Row, index_keys: &[String]) -> Item {
    let index = index_keys.iter().map(|k| row_lookup(&row, k)).collect();
    let mut tally = Tally::default();
    let record = mapping::parse(row, &shard.name, id, &mut tally).and_then(|parsed| {
        let shape = mapping::Shape {
            group_meta: None,
            steps: vec![0],
        };
        mapping::build(vec![parsed], shape, &mut tally)
    });
    match record {
        Ok(record) => Item::Mapped {
            shard: s,
            id,
            record: Box::new(record),
            tally,
            index,
        },
        Err(what) => Item::Bad { shard: s, id, what },
    }
}

/// Drops this process's page-table entries of a shard's read-only shared
/// mappings (LMDB's map), as the library's writer does for its own file:
/// the next access maps the page cache's page again, same bytes.
pub(super) fn release_mapped_pages(path: &Path) {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let (Ok(meta), Ok(maps)) = (
            std::fs::metadata(path),
            std::fs::read_to_string("/proc/self/maps"),
        ) else {
            return;
        };
        let device = (
            libc::major(meta.dev()) as usize,
            libc::minor(meta.dev()) as usize,
        );
        let hex = |s: &str| usize::from_str_radix(s, 16).ok();
        for line in maps.lines() {
            let range = (|| {
                let mut fields = line.split_ascii_whitespace();
                let (range, perms) = (fields.next()?, fields.next()?);
                let dev = fields.nth(1)?;
                let inode: u64 = fields.next()?.parse().ok()?;
                let (major, minor) = dev.split_once(':')?;
                let (start, end) = range.split_once('-')?;
                let (start, end) = (hex(start)?, hex(end)?);
                let ours = (hex(major)?, hex(minor)?) == device && inode == meta.ino();
                (ours && perms == "r--s" && end > start).then_some((start, end))
            })();
            if let Some((start, end)) = range {
                // SAFETY: a shared, read-only mapping of the shard (LMDB's
                // read-only map). On a shared file mapping MADV_DONTNEED
                // only drops page-table entries; the next access maps the
                // page cache's page again with the same bytes, so every
                // pointer into the range stays valid.
                unsafe {
                    libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
                }
            }
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = path;
}

/// Writes an ASE-LMDB shard as `ase-db-backends` does: each row's JSON
/// text zlib-compressed under its id in ASCII (`"1"`, `"2"`, ...), then
/// `nextid`. The benchmark's workload and the Python importer's scratch
/// shards are written by it. Rows are put in transactions of 4096.
pub struct ShardWriter {
    path: PathBuf,
    env: Env<WithoutTls>,
    db: Database<Bytes, Bytes>,
    level: u32,
    pending: Vec<(u64, Vec<u8>)>,
    rows: u64,
    deleted: Vec<u64>,
    json_bytes: u64,
}

impl ShardWriter {
    /// Creates the shard at `path` (replacing a file there), compressing
    /// at zlib `level` (ASE's is 6; 1 is the fastest).
    pub fn create(path: &Path, level: u32) -> Res<Self> {
        molrec::lmdb::remove_with_lock_file(path);
        let mut options = EnvOpenOptions::new().read_txn_without_tls();
        options.map_size(1 << 40).max_dbs(0);
        // SAFETY: valid flags for a writable NO_SUB_DIR environment.
        unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC) };
        // SAFETY: a fresh file, written only through this environment.
        let env = unsafe { options.open(path) }.map_err(|e| write_err(path, e))?;
        let mut txn = env.write_txn().map_err(|e| write_err(path, e))?;
        let db: Database<Bytes, Bytes> = env
            .create_database(&mut txn, None)
            .map_err(|e| write_err(path, e))?;
        txn.commit().map_err(|e| write_err(path, e))?;
        Ok(ShardWriter {
            path: path.to_path_buf(),
            env,
            db,
            level,
            pending: Vec::new(),
            rows: 0,
            deleted: Vec::new(),
            json_bytes: 0,
        })
    }

    /// Appends one row's JSON text under the next id; returns the id.
    pub fn append(&mut self, json: &[u8]) -> Res<u64> {
        self.rows += 1;
        self.json_bytes += json.len() as u64;
        let value = zlib(json, self.level)?;
        self.pending.push((self.rows, value));
        if self.pending.len() >= 4096 {
            self.flush(None)?;
        }
        Ok(self.rows)
    }

    /// Takes the next id without a row: it is listed in `deleted_ids`,
    /// as ASE lists a deleted row's, so later ids keep their positions.
    pub fn skip(&mut self) -> u64 {
        self.rows += 1;
        self.deleted.push(self.rows);
        self.rows
    }

    /// Ids taken so far (rows appended and skipped).
    pub fn rows(&self) -> u64 {
        self.rows
    }

    fn flush(&mut self, nextid: Option<u64>) -> Res<()> {
        let path = &self.path;
        let mut txn = self.env.write_txn().map_err(|e| write_err(path, e))?;
        for (id, value) in self.pending.drain(..) {
            self.db
                .put(&mut txn, id.to_string().as_bytes(), &value)
                .map_err(|e| write_err(path, e))?;
        }
        if let Some(nextid) = nextid {
            let value = zlib(nextid.to_string().as_bytes(), self.level)?;
            self.db
                .put(&mut txn, b"nextid", &value)
                .map_err(|e| write_err(path, e))?;
            if !self.deleted.is_empty() {
                let list = serde_json::to_string(&self.deleted)
                    .map_err(|e| ImportError::Mrec(molrec::Error::Io(std::io::Error::other(e))))?;
                let value = zlib(list.as_bytes(), self.level)?;
                self.db
                    .put(&mut txn, b"deleted_ids", &value)
                    .map_err(|e| write_err(path, e))?;
            }
        }
        txn.commit().map_err(|e| write_err(path, e))
    }

    /// Writes `nextid`, syncs and closes the shard; returns the bytes of
    /// JSON text it holds (before compression).
    pub fn finish(mut self) -> Res<u64> {
        self.flush(Some(self.rows + 1))?;
        self.env
            .force_sync()
            .map_err(|e| write_err(&self.path, e))?;
        self.env.prepare_for_closing().wait();
        Ok(self.json_bytes)
    }
}

fn zlib(text: &[u8], level: u32) -> Res<Vec<u8>> {
    use std::io::Write;
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(level));
    e.write_all(text).map_err(molrec::Error::Io)?;
    Ok(e.finish().map_err(molrec::Error::Io)?)
}
