//! The peer format: the same frames as ASE-LMDB rows (one zlib-compressed
//! JSON value per frame), written and read for figure (5).

use super::*;

/// One row as ASE's LMDB backend stores it (a dict serialized by orjson,
/// arrays as nested lists), before compression.
#[derive(Serialize)]
pub(super) struct PeerRowOut<'a> {
    pub(super) numbers: Vec<u64>,
    pub(super) positions: Vec<[f64; 3]>,
    pub(super) cell: [[f64; 3]; 3],
    pub(super) pbc: [bool; 3],
    pub(super) ctime: f64,
    pub(super) mtime: f64,
    pub(super) user: &'a str,
    pub(super) unique_id: String,
    pub(super) calculator: &'a str,
    pub(super) energy: f64,
    pub(super) forces: Vec<[f64; 3]>,
    pub(super) key_value_pairs: PeerKeyValues<'a>,
    pub(super) data: BTreeMap<String, Value>,
}

#[derive(Serialize)]
pub(super) struct PeerKeyValues<'a> {
    pub(super) code: &'a str,
    pub(super) step: u64,
}

/// What a peer reader decodes (other keys are parsed and skipped).
#[derive(Deserialize)]
pub(super) struct PeerRowIn {
    pub(super) numbers: Vec<u64>,
    pub(super) positions: Vec<[f64; 3]>,
    pub(super) forces: Vec<[f64; 3]>,
    pub(super) energy: f64,
}

/// The JSON rows of one molecule's frames, global ordinals from `first`.
pub(super) fn peer_rows(m: &Molecule, first: u64, mut emit: impl FnMut(u64, Vec<u8>)) {
    let numbers: Vec<u64> = m.elements.iter().map(|&e| ELEMENTS[e].1).collect();
    for (k, s) in m.frames.iter().enumerate() {
        let j = first + k as u64;
        let triples = |a: &[f64], b: &[f64], c: &[f64]| -> Vec<[f64; 3]> {
            a.iter()
                .zip(b)
                .zip(c)
                .map(|((&a, &b), &c)| [a, b, c])
                .collect()
        };
        let row = PeerRowOut {
            numbers: numbers.clone(),
            positions: triples(&s.x, &s.y, &s.z),
            cell: [[0.0; 3]; 3],
            pbc: [false; 3],
            ctime: 24.0 + j as f64 * 1e-6,
            mtime: 24.0 + j as f64 * 1e-6,
            user: "bench",
            unique_id: format!("{:016x}{:016x}", mix(j), mix(!j)),
            calculator: "unknown",
            energy: s.pe,
            forces: triples(&s.fx, &s.fy, &s.fz),
            key_value_pairs: PeerKeyValues {
                code: &m.code,
                step: k as u64,
            },
            data: BTreeMap::new(),
        };
        // Serializing plain numbers and strings cannot fail.
        let bytes = serde_json::to_vec(&row).unwrap_or_default();
        emit(j, bytes);
    }
}

/// zlib (RFC 1950) at the default level 6, as Python's `zlib.compress`.
pub(super) fn zlib_compress(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut e = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(bytes.len() / 2 + 64),
        Compression::new(6),
    );
    e.write_all(bytes)?;
    Ok(e.finish()?)
}

/// Inflates one whole zlib stream into `out` (cleared), reusing `d`.
pub(super) fn zlib_inflate(d: &mut Decompress, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
    d.reset(true);
    out.clear();
    loop {
        if out.capacity() - out.len() < 4096 {
            out.reserve(out.capacity().max(8192));
        }
        let consumed = d.total_in() as usize;
        let produced = out.len();
        let status = d
            .decompress_vec(&input[consumed..], out, FlushDecompress::Finish)
            .map_err(|e| Error::Lmdb(format!("peer row: {e}")))?;
        match status {
            Status::StreamEnd => return Ok(()),
            _ if d.total_in() as usize == consumed && out.len() == produced => {
                return Err(Error::Lmdb("peer row: truncated zlib stream".into()))
            }
            _ => {}
        }
    }
}

pub(super) fn lmdb(e: heed::Error) -> Error {
    match e {
        heed::Error::Io(io) => Error::Io(io),
        other => Error::Lmdb(other.to_string()),
    }
}

/// A map size for reading a file of `size` bytes.
pub(super) fn map_size(size: u64) -> usize {
    let mib = 1u64 << 20;
    (size.saturating_add(mib).div_ceil(mib) * mib).max(16 * mib) as usize
}

pub(super) type Db = Database<Bytes, Bytes>;

/// Opens an LMDB file read-only, as any reader would.
pub(super) fn open_ro(path: &Path) -> Result<(Env<WithoutTls>, Db)> {
    let size = std::fs::metadata(path)?.len();
    let mut options = EnvOpenOptions::new().read_txn_without_tls();
    options.map_size(map_size(size)).max_dbs(0);
    // SAFETY: valid flags for a read-only open of a NO_SUB_DIR file.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) };
    // SAFETY: nothing writes the file while this Env lives (the benchmark
    // wrote it and closed its writer before).
    let env = unsafe { options.open(path) }.map_err(lmdb)?;
    let txn = env.read_txn().map_err(lmdb)?;
    let db: Db = env
        .open_database(&txn, None)
        .map_err(lmdb)?
        .ok_or_else(|| Error::Lmdb(format!("{}: no database", path.display())))?;
    drop(txn);
    Ok((env, db))
}

/// What writing the peer file cost.
pub(super) struct PeerWrite {
    pub(super) secs: f64,
    pub(super) json_bytes: u64,
    pub(super) file_bytes: u64,
}

/// The peer file at `path`, new and empty, for [`write_peer`].
pub(super) fn create_peer(path: &Path) -> Result<Env> {
    remove_lmdb(path);
    let mut options = EnvOpenOptions::new();
    options.map_size(1 << 40).max_dbs(0);
    // SAFETY: valid flags for a writable NO_SUB_DIR environment.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC) };
    // SAFETY: a fresh file, written only through this Env.
    unsafe { options.open(path) }.map_err(lmdb)
}

/// Writes the same frames as ASE-LMDB rows: key = ASCII id (1-based), value
/// = zlib(JSON), plus ASE's `nextid` key. `first[r]` is record r's first
/// global frame ordinal. Rows are built and compressed on every core (this
/// file is the baseline's input, its writing is not a measured figure) and
/// put in order, into `env` (from [`create_peer`], at `path`).
pub(super) fn write_peer(
    env: Env,
    path: &Path,
    seed: u64,
    first: &[u64],
    n_frames: u64,
    bar: &ProgressBar,
) -> Result<PeerWrite> {
    const CHUNK: u64 = 64;
    type Rows = Vec<(Vec<u8>, Vec<u8>)>;
    let mut txn = env.write_txn().map_err(lmdb)?;
    let db: Db = env.create_database(&mut txn, None).map_err(lmdb)?;
    txn.commit().map_err(lmdb)?;
    let flush = |batch: &mut Rows| -> Result<()> {
        let mut txn = env.write_txn().map_err(lmdb)?;
        for (k, v) in batch.iter() {
            db.put(&mut txn, k, v).map_err(lmdb)?;
        }
        txn.commit().map_err(lmdb)?;
        batch.clear();
        Ok(())
    };
    let n_records = first.len() as u64;
    let n_chunks = n_records.div_ceil(CHUNK);
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8) as u64;
    let start = Instant::now();
    let json_bytes = std::thread::scope(|s| -> Result<u64> {
        let (tx, rx) =
            std::sync::mpsc::sync_channel::<(u64, Result<(Rows, u64)>)>(2 * workers as usize);
        for w in 0..workers {
            let tx = tx.clone();
            s.spawn(move || {
                for c in (w..n_chunks).step_by(workers as usize) {
                    let mut rows = Rows::new();
                    let mut json = 0u64;
                    let mut failure = None;
                    for r in c * CHUNK..((c + 1) * CHUNK).min(n_records) {
                        let m = Molecule::generate(seed, r);
                        peer_rows(&m, first[r as usize], |j, row| {
                            json += row.len() as u64;
                            match zlib_compress(&row) {
                                Ok(value) => rows.push(((j + 1).to_string().into_bytes(), value)),
                                Err(e) => failure = Some(e),
                            }
                        });
                    }
                    let chunk = match failure {
                        Some(e) => Err(e),
                        None => Ok((rows, json)),
                    };
                    if tx.send((c, chunk)).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        // Put the chunks in order; a failure drops `rx`, which stops the workers.
        let mut pending = BTreeMap::new();
        let (mut next, mut json_bytes) = (0u64, 0u64);
        let mut batch = Rows::new();
        let mut batch_bytes = 0usize;
        for (c, chunk) in rx {
            pending.insert(c, chunk?);
            while let Some((rows, json)) = pending.remove(&next) {
                json_bytes += json;
                batch_bytes += rows.iter().map(|(_, v)| v.len()).sum::<usize>();
                batch.extend(rows);
                if batch_bytes >= 32 << 20 {
                    flush(&mut batch)?;
                    batch_bytes = 0;
                }
                bar.inc((CHUNK * (next + 1)).min(n_records) - CHUNK * next);
                next += 1;
            }
        }
        let next_id = serde_json::to_vec(&json!(n_frames + 1)).unwrap_or_default();
        batch.push((b"nextid".to_vec(), zlib_compress(&next_id)?));
        flush(&mut batch)?;
        Ok(json_bytes)
    })?;
    env.force_sync().map_err(lmdb)?;
    let secs = start.elapsed().as_secs_f64();
    env.prepare_for_closing().wait();
    Ok(PeerWrite {
        secs,
        json_bytes,
        file_bytes: std::fs::metadata(path)?.len(),
    })
}

/// Deletes an LMDB file, its lock file and those of a write in progress.
pub(super) fn remove_lmdb(path: &Path) {
    molrec::lmdb::remove_with_lock_file(path);
    molrec::lmdb::remove_with_lock_file(&molrec::lmdb::partial_path(path));
}
