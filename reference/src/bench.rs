//! `mrec bench`: a benchmark any user can run on their own machine
//! (docs/benchmark.md).
//!
//! One run generates a deterministic, seed-shaped workload (small molecules
//! with a topology and a relaxation trajectory), streams it into a
//! collection file record by record, writes the same frames the way
//! ASE-LMDB datasets ship (one zlib-compressed JSON row per frame), and then
//! measures, on the same data and in one shuffled record order:
//!
//! 1. the write (frames/s, peak and growth of resident memory, file size
//!    against the raw payload),
//! 2. reading records as owned arrays ([`RecordTxn::record_arrays`]),
//!    (2b) as the model ([`RecordTxn::record`]), and (2c) as owned arrays
//!    in index order (what the shuffle costs),
//! 3. reading records as views ([`RecordTxn::for_each_frame`]),
//! 4. reading the same keys as raw LMDB values (nothing decoded),
//! 5. reading the peer file (inflate + JSON parse),
//! 6. an index query answered from the index alone,
//! 7. two threads reading owned arrays concurrently (and views, 7b),
//! 8. the page check of [`Reader::open_checked`] (`check_pages`), against
//!    one full read as owned arrays.
//!
//! The read figures are measured in `passes` rounds after a warm-up round,
//! each round one pass of every figure; a figure is the median of its
//! passes (min and max kept as the spread), a ratio the median of the
//! rounds' ratios.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::lmdb::{
    check_pages, frame_key, record_key, system_key, Reader, RecordTxn, Writer, WriterOptions,
};
use crate::model::*;
use crate::typed_json::MetaTag;
use crate::Clause;
use flate2::{Compression, Decompress, FlushDecompress, Status};
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, WithoutTls};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::Write;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What a benchmark run does.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Number of records to generate (the seed dataset has 83,951).
    pub records: u64,
    /// Seed of the workload generator and of the shuffled order.
    pub seed: u64,
    /// Timed rounds of the read figures (after one warm-up round).
    pub passes: usize,
    /// Where the files go; `None` = a new temporary directory.
    pub dir: Option<PathBuf>,
    /// Keep the files after the run.
    pub keep: bool,
    /// Show progress bars and phase lines on stderr.
    pub progress: bool,
    /// The global allocator of the program running the benchmark, for the
    /// report (the library cannot tell).
    pub allocator: String,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            records: 8_400,
            seed: 1,
            passes: 5,
            dir: None,
            keep: false,
            progress: true,
            allocator: "the system's".into(),
        }
    }
}

/// The figures of one run: [`Report::table`] prints them, [`Report::json`]
/// holds the same figures as JSON.
#[derive(Clone, Debug)]
pub struct Report {
    json: Value,
    table: String,
}

impl Report {
    /// The human-readable table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Every figure as JSON (what `--json FILE` writes).
    pub fn json(&self) -> &Value {
        &self.json
    }
}

// ---------------------------------------------------------------------------
// Deterministic generator
// ---------------------------------------------------------------------------

/// SplitMix64 finalizer.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// SplitMix64: small, fast, and the same on every platform.
struct Rng(u64);

impl Rng {
    /// The stream of record `r`: records can be regenerated independently.
    fn for_record(seed: u64, r: u64) -> Rng {
        Rng(mix(seed ^ 0x6d72_6563_2d62_656e) ^ mix(r.wrapping_add(0x5eed)))
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    /// Uniform in 0..n (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// Elements of small organic molecules with their share of atoms (per mille).
const ELEMENTS: [(&str, u64, u64); 7] = [
    ("H", 1, 460),
    ("C", 6, 340),
    ("N", 7, 70),
    ("O", 8, 90),
    ("F", 9, 15),
    ("S", 16, 15),
    ("Cl", 17, 10),
];
const HYDROGEN: usize = 0;
const CARBON: usize = 1;

/// One relaxation step of one molecule.
struct Snapshot {
    x: Vec<f64>,
    y: Vec<f64>,
    z: Vec<f64>,
    fx: Vec<f64>,
    fy: Vec<f64>,
    fz: Vec<f64>,
    pe: f64,
}

/// One generated molecule and its relaxation.
struct Molecule {
    /// Indices into [`ELEMENTS`], heavy atoms first.
    elements: Vec<usize>,
    /// A spanning tree over the atoms.
    bonds: Vec<[u64; 2]>,
    frames: Vec<Snapshot>,
    /// Molecule code: Hill formula and record number.
    code: String,
}

impl Molecule {
    /// Record `r` of the workload of `seed`: 10-60 atoms (about 30 on
    /// average), 1-48 frames (about 24 on average).
    fn generate(seed: u64, r: u64) -> Molecule {
        let mut rng = Rng::for_record(seed, r);
        let u = rng.unit();
        // u^1.5 has mean 0.4: 10 + 50 * 0.4 = 30 atoms on average.
        let n = 10 + (50.0 * u * u.sqrt()).round() as usize;
        let n_frames = 1 + rng.below(48) as usize;
        let mut elements: Vec<usize> = (0..n)
            .map(|i| {
                if i == 0 {
                    return CARBON;
                }
                let mut t = rng.below(1000);
                ELEMENTS
                    .iter()
                    .position(|&(_, _, w)| {
                        let hit = t < w;
                        t = t.saturating_sub(w);
                        hit
                    })
                    .unwrap_or(CARBON)
            })
            .collect();
        // Heavy atoms first, hydrogens last (a stable order).
        elements.sort_by_key(|&e| e == HYDROGEN);
        let heavy = elements.iter().filter(|&&e| e != HYDROGEN).count() as u64;
        let mut bonds = Vec::with_capacity(n - 1);
        for i in 1..n as u64 {
            // Heavy atoms form a tree; each hydrogen hangs on a heavy atom.
            let parent = if i < heavy {
                rng.below(i)
            } else {
                rng.below(heavy)
            };
            bonds.push([parent, i]);
        }
        let mut pos: Vec<[f64; 3]> = (0..n)
            .map(|_| {
                [
                    rng.uniform(-5.0, 5.0),
                    rng.uniform(-5.0, 5.0),
                    rng.uniform(-5.0, 5.0),
                ]
            })
            .collect();
        let pe0 = rng.uniform(-900.0, -100.0);
        let drop = rng.uniform(1.0, 100.0);
        let tau = (n_frames as f64 / 4.0).max(1.0);
        let mut frames = Vec::with_capacity(n_frames);
        for k in 0..n_frames {
            let amplitude = 1.0 - 0.8 * k as f64 / n_frames as f64;
            let mut s = Snapshot {
                x: Vec::with_capacity(n),
                y: Vec::with_capacity(n),
                z: Vec::with_capacity(n),
                fx: Vec::with_capacity(n),
                fy: Vec::with_capacity(n),
                fz: Vec::with_capacity(n),
                pe: pe0 - drop * k as f64 / (k as f64 + tau),
            };
            for p in &mut pos {
                let f = [
                    amplitude * rng.uniform(-1.0, 1.0),
                    amplitude * rng.uniform(-1.0, 1.0),
                    amplitude * rng.uniform(-1.0, 1.0),
                ];
                s.x.push(p[0]);
                s.y.push(p[1]);
                s.z.push(p[2]);
                s.fx.push(f[0]);
                s.fy.push(f[1]);
                s.fz.push(f[2]);
                // A steepest-descent step along the force.
                for a in 0..3 {
                    p[a] += 0.02 * f[a];
                }
            }
            frames.push(s);
        }
        let code = format!("{}-{r:06}", hill_formula(&elements));
        Molecule {
            elements,
            bonds,
            frames,
            code,
        }
    }

    fn n_atoms(&self) -> usize {
        self.elements.len()
    }

    /// Bit `Z` set for every atomic number `Z` present.
    fn element_mask(&self) -> u64 {
        self.elements
            .iter()
            .fold(0, |m, &e| m | 1u64 << ELEMENTS[e].1)
    }

    fn heavy_atoms(&self) -> u64 {
        self.elements.iter().filter(|&&e| e != HYDROGEN).count() as u64
    }

    /// Bytes of every column buffer and string this record hands the writer
    /// (system, trajectory, per-step `pe`, own index row); documents and the
    /// binding's own index columns are not counted.
    fn payload_bytes(&self) -> u64 {
        let n = self.n_atoms() as u64;
        let strings: u64 = self
            .elements
            .iter()
            .map(|&e| ELEMENTS[e].0.len() as u64)
            .sum();
        let system = strings + 8 * n + 16 * self.bonds.len() as u64;
        let trajectory = self.frames.len() as u64 * (6 * 8 * n + 8);
        let index = self.code.len() as u64 + 8 + 8;
        system + trajectory + index
    }

    /// The molecule as a model record (consumes the arrays).
    fn into_record(self) -> Record {
        let n = self.n_atoms() as u64;
        let column = |data: ColumnData| Column::new(vec![n], data);
        let atoms = Block {
            count: n,
            columns: BTreeMap::from([
                (
                    "element".to_string(),
                    column(ColumnData::String(
                        self.elements
                            .iter()
                            .map(|&e| ELEMENTS[e].0.to_string())
                            .collect(),
                    )),
                ),
                (
                    "atomic_number".to_string(),
                    column(ColumnData::U64(
                        self.elements.iter().map(|&e| ELEMENTS[e].1).collect(),
                    )),
                ),
            ]),
            ..Block::default()
        };
        let n_bonds = self.bonds.len() as u64;
        let bonds = Block {
            count: n_bonds,
            columns: BTreeMap::from([
                (
                    "atomi".to_string(),
                    Column::new(
                        vec![n_bonds],
                        ColumnData::U64(self.bonds.iter().map(|b| b[0]).collect()),
                    ),
                ),
                (
                    "atomj".to_string(),
                    Column::new(
                        vec![n_bonds],
                        ColumnData::U64(self.bonds.iter().map(|b| b[1]).collect()),
                    ),
                ),
            ]),
            ..Block::default()
        };
        let system = Frame {
            blocks: BTreeMap::from([("atoms".to_string(), atoms), ("bonds".to_string(), bonds)]),
            ..Frame::default()
        };
        let frames = self
            .frames
            .into_iter()
            .enumerate()
            .map(|(k, s)| {
                let f64s = |v: Vec<f64>| column(ColumnData::F64(v));
                let atoms = Block {
                    count: n,
                    columns: BTreeMap::from([
                        ("x".to_string(), f64s(s.x)),
                        ("y".to_string(), f64s(s.y)),
                        ("z".to_string(), f64s(s.z)),
                        ("fx".to_string(), f64s(s.fx)),
                        ("fy".to_string(), f64s(s.fy)),
                        ("fz".to_string(), f64s(s.fz)),
                    ]),
                    ..Block::default()
                };
                let mut meta = Document::new();
                meta.insert("pe".into(), json!(s.pe));
                Step {
                    step: k as i64,
                    time: None,
                    meta,
                    blocks: BTreeMap::from([("atoms".to_string(), atoms)]),
                    cell: None,
                }
            })
            .collect();
        let mut meta = Document::new();
        meta.insert("code".into(), Value::String(self.code));
        Record {
            meta,
            system: Some(system),
            trajectory: Some(Trajectory {
                schema: None,
                frames,
            }),
        }
    }
}

/// The header the benchmark writes for `n` records of the workload of `seed`
/// (public for profiling drivers such as `examples/write_profile.rs`).
pub fn workload_header(seed: u64, n: u64) -> Header {
    let mut collection_meta = Document::new();
    collection_meta.insert(
        "units".into(),
        json!({"length": "angstrom", "energy": "kcal/mol", "force": "kcal/mol/angstrom"}),
    );
    collection_meta.insert(
        "source".into(),
        json!(format!("mrec bench, seed {seed}, {n} records")),
    );
    Header {
        meta: collection_meta,
        sequence_schema: Some(sequence_schema()),
        forcefield: None,
    }
}

/// Record `r` of the workload of `seed`, exactly as the benchmark hands it
/// to the writer (public for profiling drivers).
pub fn workload_record(seed: u64, r: u64) -> Record {
    Molecule::generate(seed, r).into_record()
}

/// `C`, `H`, then the others alphabetically (Hill order).
fn hill_formula(elements: &[usize]) -> String {
    let mut counts = [0usize; ELEMENTS.len()];
    for &e in elements {
        counts[e] += 1;
    }
    let mut order: Vec<usize> = (0..ELEMENTS.len())
        .filter(|&e| e != CARBON && e != HYDROGEN)
        .collect();
    order.sort_by_key(|&e| ELEMENTS[e].0);
    let mut out = String::new();
    for e in [CARBON, HYDROGEN].into_iter().chain(order) {
        match counts[e] {
            0 => {}
            1 => out.push_str(ELEMENTS[e].0),
            c => out.push_str(&format!("{}{c}", ELEMENTS[e].0)),
        }
    }
    out
}

/// The one trajectory declaration: atoms x y z fx fy fz, per-step pe.
fn sequence_schema() -> SequenceSchema {
    let f64_col = || ColumnDecl {
        dtype: DType::F64,
        trailing: vec![],
        nullable: false,
        precision: None,
    };
    SequenceSchema {
        blocks: BTreeMap::from([(
            "atoms".to_string(),
            BlockDecl {
                columns: ["x", "y", "z", "fx", "fy", "fz"]
                    .iter()
                    .map(|c| (c.to_string(), f64_col()))
                    .collect(),
                ..BlockDecl::default()
            },
        )]),
        meta: BTreeMap::from([(
            "pe".to_string(),
            MetaDecl {
                tag: MetaTag::F64,
                fill: None,
            },
        )]),
    }
}

/// A permutation of `0..n` (Fisher-Yates), from the seed.
fn shuffled(n: u64, seed: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..n).collect();
    let mut rng = Rng(mix(seed ^ 0x5348_5546_464c_4521));
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

// ---------------------------------------------------------------------------
// The peer format: ASE-LMDB rows
// ---------------------------------------------------------------------------

/// One row as ASE's LMDB backend stores it (a dict serialized by orjson,
/// arrays as nested lists), before compression.
#[derive(Serialize)]
struct PeerRowOut<'a> {
    numbers: Vec<u64>,
    positions: Vec<[f64; 3]>,
    cell: [[f64; 3]; 3],
    pbc: [bool; 3],
    ctime: f64,
    mtime: f64,
    user: &'a str,
    unique_id: String,
    calculator: &'a str,
    energy: f64,
    forces: Vec<[f64; 3]>,
    key_value_pairs: PeerKeyValues<'a>,
    data: BTreeMap<String, Value>,
}

#[derive(Serialize)]
struct PeerKeyValues<'a> {
    code: &'a str,
    step: u64,
}

/// What a peer reader decodes (other keys are parsed and skipped).
#[derive(Deserialize)]
struct PeerRowIn {
    numbers: Vec<u64>,
    positions: Vec<[f64; 3]>,
    forces: Vec<[f64; 3]>,
    energy: f64,
}

/// The JSON rows of one molecule's frames, global ordinals from `first`.
fn peer_rows(m: &Molecule, first: u64, mut emit: impl FnMut(u64, Vec<u8>)) {
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
fn zlib_compress(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut e = flate2::write::ZlibEncoder::new(
        Vec::with_capacity(bytes.len() / 2 + 64),
        Compression::new(6),
    );
    e.write_all(bytes)?;
    Ok(e.finish()?)
}

/// Inflates one whole zlib stream into `out` (cleared), reusing `d`.
fn zlib_inflate(d: &mut Decompress, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
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

fn lmdb(e: heed::Error) -> Error {
    match e {
        heed::Error::Io(io) => Error::Io(io),
        other => Error::Lmdb(other.to_string()),
    }
}

/// A map size for reading a file of `size` bytes.
fn map_size(size: u64) -> usize {
    let mib = 1u64 << 20;
    (size.saturating_add(mib).div_ceil(mib) * mib).max(16 * mib) as usize
}

type Db = Database<Bytes, Bytes>;

/// Opens an LMDB file read-only, as any reader would.
fn open_ro(path: &Path) -> Result<(Env<WithoutTls>, Db)> {
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
struct PeerWrite {
    secs: f64,
    json_bytes: u64,
    file_bytes: u64,
}

/// Writes the same frames as ASE-LMDB rows: key = ASCII id (1-based), value
/// = zlib(JSON), plus ASE's `nextid` key. `first[r]` is record r's first
/// global frame ordinal. Rows are built and compressed on every core (this
/// file is the baseline's input, its writing is not a measured figure) and
/// put in order.
fn write_peer(
    path: &Path,
    seed: u64,
    first: &[u64],
    n_frames: u64,
    bar: &ProgressBar,
) -> Result<PeerWrite> {
    const CHUNK: u64 = 64;
    type Rows = Vec<(Vec<u8>, Vec<u8>)>;
    remove_lmdb(path);
    let mut options = EnvOpenOptions::new();
    options.map_size(1 << 40).max_dbs(0);
    // SAFETY: valid flags for a writable NO_SUB_DIR environment.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC) };
    // SAFETY: a fresh file, written only through this Env.
    let env = unsafe { options.open(path) }.map_err(lmdb)?;
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
fn remove_lmdb(path: &Path) {
    crate::lmdb::remove_with_lock_file(path);
    crate::lmdb::remove_with_lock_file(&crate::lmdb::partial_path(path));
}

// ---------------------------------------------------------------------------
// Measurement
// ---------------------------------------------------------------------------

/// Seconds of the timed passes.
#[derive(Clone, Debug, Default)]
struct Timing {
    secs: Vec<f64>,
    /// CPU seconds of the whole process during each pass.
    cpu: Vec<f64>,
    /// Major page faults of the process during each pass: pages of the file
    /// read from disk, that is, not in the page cache.
    major_faults: Vec<u64>,
}

impl Timing {
    fn sorted(&self) -> Vec<f64> {
        let mut s = self.secs.clone();
        s.sort_by(f64::total_cmp);
        s
    }

    fn median(&self) -> f64 {
        let s = self.sorted();
        let m = s.len() / 2;
        if s.len() % 2 == 1 {
            s[m]
        } else {
            (s[m - 1] + s[m]) / 2.0
        }
    }

    fn min(&self) -> f64 {
        self.sorted()[0]
    }

    fn max(&self) -> f64 {
        *self.sorted().last().unwrap_or(&0.0)
    }

    /// `units` per second: median, min (slowest pass), max (fastest pass).
    fn rate(&self, units: u64) -> Spread {
        let u = units as f64;
        Spread {
            median: u / self.median(),
            min: u / self.max(),
            max: u / self.min(),
        }
    }

    /// CPU seconds over wall seconds, summed over the passes: about 1 for
    /// one thread that had a core to itself (2 for two threads); lower when
    /// other processes took the CPU.
    fn cpu_share(&self) -> f64 {
        let wall = self.secs.iter().sum::<f64>();
        if wall < 0.5 {
            // Too short for clock ticks of 1/100 s.
            return f64::NAN;
        }
        self.cpu.iter().sum::<f64>() / wall
    }

    fn json(&self, units: u64, unit: &str) -> Value {
        let r = self.rate(units);
        json!({
            unit: {"median": r.median, "min": r.min, "max": r.max},
            "secs": {"median": self.median(), "min": self.min(), "max": self.max(),
                     "passes": self.secs},
            "cpu_secs": self.cpu,
            "cpu_share": self.cpu_share(),
            "major_faults": self.major_faults,
        })
    }

    /// Major page faults over every timed pass.
    fn faults(&self) -> u64 {
        self.major_faults.iter().sum()
    }
}

/// A figure with its spread.
#[derive(Clone, Copy, Debug)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    fn json(&self) -> Value {
        json!({"median": self.median, "min": self.min, "max": self.max})
    }
}

/// Time ratio a/b of two timings, round by round (the two passes of a
/// round ran seconds apart): the median and the extremes over the rounds.
fn time_ratio(a: &Timing, b: &Timing) -> Spread {
    let ratios = Timing {
        secs: a.secs.iter().zip(&b.secs).map(|(x, y)| x / y).collect(),
        ..Timing::default()
    };
    Spread {
        median: ratios.median(),
        min: ratios.min(),
        max: ratios.max(),
    }
}

/// One warm-up round, then `passes` timed rounds; a round runs every
/// figure once, in order, so that figures a ratio compares were measured
/// seconds apart whatever the machine did meanwhile (a noisy shared host
/// can be a third slower for minutes). The first figure is run but not
/// reported. Returns each figure's timing and what its last pass saw.
fn measure_rounds<const N: usize>(
    passes: usize,
    bar: &ProgressBar,
    figures: &mut [(&str, &dyn Fn() -> Result<Seen>); N],
) -> Result<([Timing; N], [Seen; N])> {
    let mut timings: [Timing; N] = std::array::from_fn(|_| Timing::default());
    let mut seen = [Seen::default(); N];
    for round in 0..=passes {
        for (i, (what, pass)) in figures.iter().enumerate() {
            bar.set_message(what.to_string());
            let (cpu_start, faults_start) = (cpu_secs(), major_faults_so_far());
            let start = Instant::now();
            seen[i] = black_box(pass()?);
            let secs = start.elapsed().as_secs_f64();
            if round > 0 {
                let t = &mut timings[i];
                t.secs.push(secs);
                t.cpu.push(cpu_secs() - cpu_start);
                t.major_faults
                    .push(major_faults_so_far().saturating_sub(faults_start));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((timings, seen))
}

/// What a pass saw: the frames it read and what it checks them by.
#[derive(Clone, Copy, Debug, Default)]
struct Seen {
    frames: u64,
    /// f64 columns viewed in place.
    views: u64,
    /// f64 columns whose address was not 8-aligned: copied into a reused
    /// buffer by `ColumnRef::f64_values`.
    fallbacks: u64,
    /// The sum of every `x`.
    sum_x: f64,
    /// Bytes copied (the raw pass).
    bytes: u64,
    /// The index query's two counts.
    matches: (u64, u64),
}

impl Seen {
    fn add(self, o: Seen) -> Seen {
        Seen {
            frames: self.frames + o.frames,
            views: self.views + o.views,
            fallbacks: self.fallbacks + o.fallbacks,
            sum_x: self.sum_x + o.sum_x,
            bytes: self.bytes + o.bytes,
            matches: (self.matches.0 + o.matches.0, self.matches.1 + o.matches.1),
        }
    }

    fn frames(frames: u64) -> Seen {
        Seen {
            frames,
            ..Seen::default()
        }
    }

    fn bytes(bytes: u64) -> Seen {
        Seen {
            bytes,
            ..Seen::default()
        }
    }

    fn matches(matches: (u64, u64)) -> Seen {
        Seen {
            matches,
            ..Seen::default()
        }
    }
}

/// (2): every record of `order` read whole, its trajectory resolved into
/// one owned array per column (`record_arrays`); x summed over every frame
/// (as the views pass does), so the figure checks what it reads.
#[inline(never)] // a frame of its own in profiles
fn arrays_pass(txn: &RecordTxn<'_>, order: &[u64]) -> Result<Seen> {
    let mut t = Seen::default();
    for &r in order {
        let record = txn.record_arrays(r)?;
        if let Some(traj) = &record.trajectory {
            t.frames += traj.len() as u64;
            if let Some(ColumnData::F64(x)) = traj
                .blocks
                .get("atoms")
                .and_then(|b| b.columns.get("x"))
                .map(|c| &c.data)
            {
                t.sum_x += x.iter().sum::<f64>();
            }
        }
        black_box(&record);
    }
    Ok(t)
}

/// (2b): every record of `order` resolved frame by frame into the model
/// (`record`: one `Step` of blocks and columns per frame).
#[inline(never)] // a frame of its own in profiles
fn owned_pass(txn: &RecordTxn<'_>, order: &[u64]) -> Result<u64> {
    let mut frames = 0u64;
    for &r in order {
        let record = txn.record(r)?;
        frames += record
            .trajectory
            .as_ref()
            .map_or(0, |t| t.frames.len() as u64);
        black_box(&record);
    }
    Ok(frames)
}

/// (3): the record's meta and system (owned: there is no view of a system),
/// then every frame through `for_each_frame`, every f64 column viewed in
/// place (or copied when its address is not 8-aligned), x summed.
#[inline(never)] // a frame of its own in profiles
fn views_pass(txn: &RecordTxn<'_>, order: &[u64]) -> Result<Seen> {
    let mut t = Seen::default();
    let mut scratch = Vec::new();
    for &r in order {
        black_box(txn.record_meta(r)?);
        black_box(txn.system(r)?);
        txn.for_each_frame(r, |view| {
            for block in view.blocks.values() {
                for (name, col) in &block.columns {
                    if col.dtype != DType::F64 {
                        continue;
                    }
                    if col.f64_view().is_some() {
                        t.views += 1;
                    } else {
                        t.fallbacks += 1;
                    }
                    let Some(v) = col.f64_values(&mut scratch) else {
                        return Err(Error::refused(
                            Clause::FrameBufferBounds,
                            "",
                            "an f64 column is not whole f64s",
                        ));
                    };
                    if name == "x" {
                        t.sum_x += v.iter().sum::<f64>();
                    } else {
                        black_box(v);
                    }
                }
            }
            t.frames += 1;
            Ok(())
        })?;
    }
    Ok(t)
}

/// (7) as `mrec bench` runs it, for profiling drivers
/// (`examples/read_passes.rs`): `record_arrays` for every record of
/// `order` on two threads; the frames read.
pub fn two_thread_arrays_pass(reader: &Reader, order: &[u64]) -> Result<u64> {
    two_thread_pass(reader, order, arrays_pass).map(|seen| seen.frames)
}

/// Records a thread of (7) takes from the shared order at a time.
const RECORDS_PER_TAKE: usize = 64;

/// (7): `pass` (the arrays or the views pass) on two threads, one shared
/// reader, each thread with its own read transaction taking the next
/// [`RECORDS_PER_TAKE`] records of `order` until none are left, as a
/// loader's workers take indices from one queue. (Fixed halves left one
/// thread idle at the end whenever the host slowed the other.)
#[inline(never)] // a frame of its own in profiles
fn two_thread_pass(
    reader: &Reader,
    order: &[u64],
    pass: fn(&RecordTxn<'_>, &[u64]) -> Result<Seen>,
) -> Result<Seen> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Result<Seen> {
        let txn = reader.txn()?;
        let mut seen = Seen::default();
        loop {
            let take = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(records) = order.chunks(RECORDS_PER_TAKE).nth(take) else {
                return Ok(seen);
            };
            seen = seen.add(pass(&txn, records)?);
        }
    };
    std::thread::scope(|s| {
        let other = s.spawn(work);
        let mine = work();
        let theirs = other
            .join()
            .map_err(|_| Error::Lmdb("reader thread panicked".into()))?;
        Ok(mine?.add(theirs?))
    })
}

/// Every value of an LMDB file read once (the first byte of each summed):
/// its pages in the page cache. Returns the values' bytes.
fn touch_all(env: &Env<WithoutTls>, db: &Db) -> Result<u64> {
    let txn = env.read_txn().map_err(lmdb)?;
    let (mut bytes, mut sum) = (0u64, 0u64);
    for item in db.iter(&txn).map_err(lmdb)? {
        let (_, v) = item.map_err(lmdb)?;
        bytes += v.len() as u64;
        sum = sum.wrapping_add(v.iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>());
    }
    black_box(sum);
    Ok(bytes)
}

/// (6): records with at most 20 atoms (binding index), and records holding
/// S or Cl with at most 12 heavy atoms (own index columns).
#[inline(never)] // a frame of its own in profiles
fn index_pass(reader: &Reader) -> Result<(u64, u64)> {
    let small = reader.atom_counts().iter().filter(|&&n| n <= 20).count() as u64;
    let columns = reader.index_columns()?;
    let u64s = |name: &str| {
        columns
            .get(name)
            .and_then(|c| c.data.as_u64())
            .ok_or_else(|| Error::Lmdb(format!("own index column `{name}` missing")))
    };
    let mask = u64s("element_mask")?;
    let heavy = u64s("heavy_atoms")?;
    let s_or_cl = (1u64 << 16) | (1u64 << 17);
    let hits = mask
        .iter()
        .zip(heavy)
        .filter(|&(&m, &h)| m & s_or_cl != 0 && h <= 12)
        .count() as u64;
    Ok((small, hits))
}

/// (4): the record's meta key, system key and frame key range, copied into
/// one buffer, nothing decoded. Returns bytes copied.
#[inline(never)] // a frame of its own in profiles
fn raw_pass(
    env: &Env<WithoutTls>,
    db: &Db,
    order: &[u64],
    first: &[u64],
    counts: &[u64],
) -> Result<u64> {
    let txn = env.read_txn().map_err(lmdb)?;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut bytes = 0u64;
    for &r in order {
        buf.clear();
        if let Some(v) = db.get(&txn, &record_key(r)).map_err(lmdb)? {
            buf.extend_from_slice(v);
        }
        if let Some(v) = db.get(&txn, &system_key(r)).map_err(lmdb)? {
            buf.extend_from_slice(v);
        }
        let (f, n) = (first[r as usize], counts[r as usize]);
        let (lo, hi) = (frame_key(f), frame_key(f + n));
        let range = (Bound::Included(&lo[..]), Bound::Excluded(&hi[..]));
        for item in db.range(&txn, &range).map_err(lmdb)? {
            let (_, v) = item.map_err(lmdb)?;
            buf.extend_from_slice(v);
        }
        bytes += buf.len() as u64;
        black_box(&buf);
    }
    Ok(bytes)
}

/// (5): the same frames from the peer file: get, inflate, parse.
#[inline(never)] // a frame of its own in profiles
fn peer_pass(
    env: &Env<WithoutTls>,
    db: &Db,
    order: &[u64],
    first: &[u64],
    counts: &[u64],
) -> Result<(u64, f64)> {
    let txn = env.read_txn().map_err(lmdb)?;
    let mut inflate = Decompress::new(true);
    let mut json_buf = Vec::with_capacity(1 << 16);
    let mut key = String::new();
    let (mut frames, mut sum_x) = (0u64, 0.0f64);
    for &r in order {
        let f = first[r as usize];
        for j in f..f + counts[r as usize] {
            key.clear();
            std::fmt::Write::write_fmt(&mut key, format_args!("{}", j + 1))
                .map_err(|e| Error::Lmdb(e.to_string()))?;
            let value = db
                .get(&txn, key.as_bytes())
                .map_err(lmdb)?
                .ok_or_else(|| Error::Lmdb(format!("peer row {key} missing")))?;
            zlib_inflate(&mut inflate, value, &mut json_buf)?;
            let row: PeerRowIn = serde_json::from_slice(&json_buf)
                .map_err(|e| Error::Lmdb(format!("peer row {key}: {e}")))?;
            sum_x += row.positions.iter().map(|p| p[0]).sum::<f64>();
            black_box((&row.numbers, &row.forces, row.energy));
            frames += 1;
        }
    }
    Ok((frames, sum_x))
}

// ---------------------------------------------------------------------------
// Memory and machine
// ---------------------------------------------------------------------------

/// Resident memory of this process, from /proc/self/status (bytes).
#[derive(Clone, Copy, Debug, Default)]
struct Mem {
    rss: u64,
    hwm: u64,
    anon: u64,
    file: u64,
}

/// The peak resident memory of this process so far (`VmHWM`, bytes), as
/// the write's figure reads it (public for profiling drivers).
pub fn peak_resident_bytes() -> u64 {
    mem().hwm
}

fn mem() -> Mem {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut m = Mem::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let kb = rest
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
            * 1024;
        match key {
            "VmRSS" => m.rss = kb,
            "VmHWM" => m.hwm = kb,
            "RssAnon" => m.anon = kb,
            "RssFile" => m.file = kb,
            _ => {}
        }
    }
    m
}

/// Major page faults of this process so far (field 12 of /proc/self/stat).
fn major_faults_so_far() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(9))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Whether the kernel's DAMON runs a `pageout` scheme: it evicts pages not
/// touched for a while, page-cache pages of the benchmark's files too, so
/// a "warm" cache can turn cold between passes (the major faults show it).
fn damon_pageout() -> bool {
    let root = Path::new("/sys/kernel/mm/damon/admin/kdamonds");
    let Ok(kdamonds) = std::fs::read_dir(root) else {
        return false;
    };
    kdamonds.flatten().any(|k| {
        let on = std::fs::read_to_string(k.path().join("state")).is_ok_and(|s| s.trim() == "on");
        let pageout = std::fs::read_dir(k.path().join("contexts")).is_ok_and(|contexts| {
            contexts.flatten().any(|c| {
                std::fs::read_dir(c.path().join("schemes")).is_ok_and(|schemes| {
                    schemes.flatten().any(|sc| {
                        std::fs::read_to_string(sc.path().join("action"))
                            .is_ok_and(|a| a.trim() == "pageout")
                    })
                })
            })
        });
        on && pageout
    })
}

/// User + system CPU seconds of this process so far (all threads), from
/// /proc/self/stat, in clock ticks of 1/100 s.
fn cpu_secs() -> f64 {
    let (user, system) = cpu_user_system_secs();
    user + system
}

/// User and system (kernel) CPU seconds of this process so far (all
/// threads), from /proc/self/stat, in clock ticks of 1/100 s. The write
/// reports them apart: its slow runs spend the extra time in the kernel.
fn cpu_user_system_secs() -> (f64, f64) {
    user_system_secs(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default())
}

/// The user and system seconds of a `/proc/.../stat` text (a process's or
/// a thread's: the same fields); zero where a field is missing.
fn user_system_secs(stat: &str) -> (f64, f64) {
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // After the command name: state is field 3, utime 14, stime 15.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(11) / 100.0, tick(12) / 100.0)
}

/// A note for the table when the write spent more CPU in the kernel than
/// in user code: then its pace was the kernel's (taking the file into the
/// page cache), not the writer's, and the write figure says more about the
/// machine than about the binding. Not below 0.2 s of kernel time: the
/// counters tick at 1/100 s, too coarse to compare a short write's parts.
fn kernel_bound_write_note(user_secs: f64, system_secs: f64) -> Option<String> {
    (system_secs > user_secs && system_secs >= 0.2).then(|| {
        format!(
            "note: the write spent more CPU in the kernel ({system_secs:.2} s) than in user code \
             ({user_secs:.2} s, the generator's included): its pace was the kernel's, taking the \
             file into the page cache (docs/benchmark.md, \"What limits the figures\")\n"
        )
    })
}

/// The 1-minute load average (runnable processes), from /proc/loadavg.
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// A field of /proc/meminfo (`MemTotal`, `MemAvailable`, ...) in bytes.
fn meminfo_bytes(field: &str) -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = meminfo.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
    })?;
    Some(kb.saturating_mul(1024))
}

fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']))
        })
        .unwrap_or("unknown")
        .to_string();
    let mem_bytes = meminfo_bytes("MemTotal");
    json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": cpu,
        "memory_bytes": mem_bytes,
        "last_level_cache_bytes": last_level_cache_bytes(Path::new("/sys/devices/system/cpu/cpu0/cache")),
        "os": std::env::consts::OS,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string()).ok(),
        "release_build": !cfg!(debug_assertions),
    })
}

/// The size of CPU 0's last-level cache: the highest level that holds data
/// (the largest, if sysfs lists two), from sysfs (`cache`:
/// `/sys/devices/system/cpu/cpu0/cache`). A file it holds reads in
/// shuffled order nearly as fast as in order; one larger is read from
/// memory (docs/benchmark.md).
fn last_level_cache_bytes(cache: &Path) -> Option<u64> {
    let field = |dir: &Path, name: &str| std::fs::read_to_string(dir.join(name)).ok();
    std::fs::read_dir(cache)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .filter(|dir| field(dir, "type").is_some_and(|t| t.trim() != "Instruction"))
        .filter_map(|dir| {
            let level: u32 = field(&dir, "level")?.trim().parse().ok()?;
            Some((level, cache_size_bytes(&field(&dir, "size")?)?))
        })
        .max()
        .map(|(_, bytes)| bytes)
}

/// A sysfs cache size (`48K`, `2048K`, `32M`) in bytes.
fn cache_size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// A note for the table when the collection file is larger than the CPU's
/// last-level cache: then a shuffled read fetches each record from memory,
/// and reads slower than on a file the cache holds (the peer, bound by
/// zlib and JSON, does not).
fn file_beyond_cache_note(file_bytes: u64, cache_bytes: Option<u64>) -> Option<String> {
    let cache = cache_bytes.filter(|&c| c > 0 && file_bytes > c)?;
    Some(format!(
        "note: the collection file ({}) is larger than the CPU's last-level cache ({}): the \
         shuffled reads fetch each record from memory, slower than from a file the cache holds \
         (docs/benchmark.md, \"What limits the figures\")\n",
        mib(file_bytes),
        mib(cache)
    ))
}

/// Bytes the two files take per record, a tenth over what they took at the
/// default scale (ours 406,913,024 and the peer's 642,260,992 for 8,400
/// records: 48,443 and 76,460 per record), for the spread of the
/// workload's sizes.
const FILES_BYTES_PER_RECORD: u64 = (48_443 + 76_460) * 11 / 10;

/// Refuses a run whose two files (`files`, which replace any files of
/// those names) would not fit in the free space of `dir`'s file system (or
/// whose size does not fit a `u64`) before anything is generated; warns
/// when they would not fit in the memory available for the page cache,
/// where every read figure is meant to be taken.
fn check_room(dir: &Path, files: &[&Path], records: u64) -> Result<()> {
    let gib = |bytes: u64| bytes as f64 / f64::from(1u32 << 30);
    let Some(needed) = records.checked_mul(FILES_BYTES_PER_RECORD) else {
        return Err(Error::io_at(
            dir,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{records} records: the files' size does not fit in 64 bits"),
            ),
        ));
    };
    let replaced: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    if let Some(free) = crate::lmdb::free_bytes(dir).map(|f| f.saturating_add(replaced)) {
        if needed > free {
            return Err(Error::io_at(
                dir,
                std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!(
                        "{records} records need about {:.1} GiB for the two files, and the \
                         file system has {:.1} GiB free",
                        gib(needed),
                        gib(free)
                    ),
                ),
            ));
        }
    }
    let available = meminfo_bytes("MemAvailable");
    if let Some(available) = available.filter(|&a| needed > a) {
        eprintln!(
            "mrec bench: the two files (about {:.1} GiB) may not stay in the page cache \
             ({:.1} GiB of memory available): a read figure may include disk reads (see \
             its major faults)",
            gib(needed),
            gib(available)
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------

/// Deletes what the run created unless asked to keep it: when the run
/// ends, or through [`remove_files_of_runs_in_progress`] when the process
/// is interrupted first. What to delete waits in [`PENDING`] under `id`
/// (`None` for a run that keeps its files).
struct Cleanup {
    id: Option<u64>,
}

/// The files (and temporary directory) of every run in progress that does
/// not keep them, by [`Cleanup::id`].
type Pending = BTreeMap<u64, (Vec<PathBuf>, Option<PathBuf>)>;
static PENDING: std::sync::Mutex<Pending> = std::sync::Mutex::new(BTreeMap::new());

fn pending() -> std::sync::MutexGuard<'static, Pending> {
    // A panic while the map was held left it whole: every update is one call.
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cleanup {
    fn new(files: Vec<PathBuf>, dir: Option<PathBuf>, keep: bool) -> Cleanup {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = (!keep).then(|| NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        if let Some(id) = id {
            pending().insert(id, (files, dir));
        }
        Cleanup { id }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let run = self.id.and_then(|id| pending().remove(&id));
        if let Some((files, dir)) = run {
            remove_run_files(&files, dir.as_deref());
        }
    }
}

fn remove_run_files(files: &[PathBuf], dir: Option<&Path>) {
    for f in files {
        remove_lmdb(f);
    }
    if let Some(d) = dir {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Deletes the files of every run of this process still in progress (those
/// not asked to keep them), as each run does when it ends: for a program
/// about to exit on an interrupt (`mrec bench` calls it on Ctrl-C), which
/// would otherwise leave gigabytes behind. Best effort: a file a run
/// creates while this runs may stay.
pub fn remove_files_of_runs_in_progress() {
    let runs = std::mem::take(&mut *pending());
    for (files, dir) in runs.values() {
        remove_run_files(files, dir.as_deref());
    }
}

fn bar(progress: bool, len: u64, prefix: &'static str, unit: &str) -> ProgressBar {
    if !progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len).with_prefix(prefix);
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{prefix:>24}} [{{bar:32}}] {{pos}}/{{len}} {unit}  {{msg}}  {{elapsed_precise}} (eta {{eta}})"
    )) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Runs the whole benchmark and returns its figures.
pub fn run(opts: &BenchOptions) -> Result<Report> {
    if opts.records == 0 || opts.passes == 0 {
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the records and the passes must be at least 1",
        )));
    }
    let say = |s: String| {
        if opts.progress {
            eprintln!("{s}");
        }
    };
    let (dir, temp) = match &opts.dir {
        Some(d) => {
            std::fs::create_dir_all(d).map_err(|e| Error::io_at(d, e))?;
            (d.clone(), false)
        }
        None => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let d = std::env::temp_dir().join(format!("mrec-bench-{}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&d).map_err(|e| Error::io_at(&d, e))?;
            (d, true)
        }
    };
    let path = dir.join("bench.mrec.lmdb");
    let peer_path = dir.join("peer.ase.lmdb");
    let _cleanup = Cleanup::new(
        vec![path.clone(), peer_path.clone()],
        temp.then(|| dir.clone()),
        opts.keep,
    );
    check_room(&dir, &[&path, &peer_path], opts.records)?;
    // The room check counts the files of an earlier run as free: they go
    // now, not when the new ones replace them.
    remove_lmdb(&path);
    remove_lmdb(&peer_path);
    let n = opts.records;
    let seed = opts.seed;
    let load_start = loadavg();

    // (1) Write, one record at a time.
    let header = workload_header(seed, n);
    let mem_before = mem();
    let cpu_start = cpu_user_system_secs();
    let wall = Instant::now();
    let mut writer_secs = 0.0f64;
    let t = Instant::now();
    let mut writer = Writer::create(
        &path,
        header,
        WriterOptions {
            overwrite: true,
            ..WriterOptions::default()
        },
    )?;
    writer_secs += t.elapsed().as_secs_f64();
    let mem_start = mem();
    let mut samples: Vec<(u64, Mem)> = vec![(0, mem_start)];
    let mut max_rss = mem_start.rss;
    let mut max_anon = mem_start.anon;
    let sample_every = (n / 100).max(1);
    let mut codes = Vec::with_capacity(n as usize);
    let mut masks = Vec::with_capacity(n as usize);
    let mut heavy = Vec::with_capacity(n as usize);
    let mut counts: Vec<u64> = Vec::with_capacity(n as usize);
    let (mut payload, mut atom_frames) = (0u64, 0u64);
    let write_bar = bar(opts.progress, n, "(1) write mrec", "records");
    for r in 0..n {
        let m = Molecule::generate(seed, r);
        payload += m.payload_bytes();
        counts.push(m.frames.len() as u64);
        atom_frames += (m.n_atoms() * m.frames.len()) as u64;
        codes.push(m.code.clone());
        masks.push(m.element_mask());
        heavy.push(m.heavy_atoms());
        let record = m.into_record();
        let t = Instant::now();
        writer.append(record)?;
        writer_secs += t.elapsed().as_secs_f64();
        if (r + 1) % sample_every == 0 {
            let m = mem();
            max_rss = max_rss.max(m.rss);
            max_anon = max_anon.max(m.anon);
            samples.push((r + 1, m));
        }
        write_bar.inc(1);
        if r % 64 == 0 {
            write_bar.set_message(format!("{} frames", thousands(writer.frames())));
        }
    }
    let n_frames = writer.frames();
    let index = BTreeMap::from([
        (
            "code".to_string(),
            Column::new(vec![n], ColumnData::String(codes)),
        ),
        (
            "element_mask".to_string(),
            Column::new(vec![n], ColumnData::U64(masks)),
        ),
        (
            "heavy_atoms".to_string(),
            Column::new(vec![n], ColumnData::U64(heavy)),
        ),
    ]);
    let t = Instant::now();
    writer.finish(index)?;
    let finish_secs = t.elapsed().as_secs_f64();
    writer_secs += finish_secs;
    let write_wall = wall.elapsed().as_secs_f64();
    let cpu_end = cpu_user_system_secs();
    let write_cpu_user = cpu_end.0 - cpu_start.0;
    let write_cpu_system = cpu_end.1 - cpu_start.1;
    write_bar.finish_and_clear();
    let mem_end = mem();
    max_rss = max_rss.max(mem_end.rss);
    max_anon = max_anon.max(mem_end.anon);
    samples.push((n, mem_end));
    let file_bytes = std::fs::metadata(&path)?.len();
    say(format!(
        "wrote {} records, {} frames in {:.2} s ({:.2} s in the writer) to {}",
        thousands(n),
        thousands(n_frames),
        write_wall,
        writer_secs,
        path.display()
    ));

    let first: Vec<u64> = counts
        .iter()
        .scan(0u64, |s, &c| {
            let f = *s;
            *s += c;
            Some(f)
        })
        .collect();

    // The peer file: the same frames as ASE-LMDB rows.
    let peer_bar = bar(opts.progress, n, "write peer file", "records");
    let peer_write = write_peer(&peer_path, seed, &first, n_frames, &peer_bar)?;
    peer_bar.finish_and_clear();
    say(format!(
        "wrote the peer file ({} bytes) in {:.2} s",
        thousands(peer_write.file_bytes),
        peer_write.secs
    ));

    let order = shuffled(n, seed);
    let reader = Reader::open(&path)?;
    if (0..n).any(|r| reader.record_frames(r) != Some(counts[r as usize])) {
        return Err(Error::Lmdb(
            "the index disagrees with the frames written".into(),
        ));
    }
    let passes = opts.passes;
    say(format!(
        "measuring the read figures: 1 warm-up round + {passes} rounds, each one pass of every figure"
    ));
    let (peer_env, peer_db) = open_ro(&peer_path)?;
    let (env, db) = reader.raw();
    let arrays = || arrays_pass(&reader.txn()?, &order);
    let index_order: Vec<u64> = (0..n).collect();
    let arrays_in_order = || arrays_pass(&reader.txn()?, &index_order);
    let raw = || raw_pass(env, db, &order, &first, &counts).map(Seen::bytes);
    let owned = || owned_pass(&reader.txn()?, &order).map(Seen::frames);
    let views = || views_pass(&reader.txn()?, &order);
    let threads = || two_thread_pass(&reader, &order, arrays_pass);
    let threads_views = || two_thread_pass(&reader, &order, views_pass);
    let index = || index_pass(&reader).map(Seen::matches);
    let page_check = || check_pages(&path).map(|_| Seen::default());
    let peer = || {
        let (frames, sum_x) = peer_pass(&peer_env, &peer_db, &order, &first, &counts)?;
        Ok(Seen {
            sum_x,
            ..Seen::frames(frames)
        })
    };
    // Before each round, untimed, both files are read once: the page cache
    // may have dropped them during the last round (see `damon_pageout`).
    let touch = || {
        raw_pass(env, db, &order, &first, &counts)?;
        touch_all(&peer_env, &peer_db).map(Seen::bytes)
    };
    let mut figures: [(&str, &dyn Fn() -> Result<Seen>); 11] = [
        ("touch both files", &touch),
        ("(2) owned arrays", &arrays),
        ("(2c) owned arrays, index order", &arrays_in_order),
        ("(4) raw LMDB", &raw),
        ("(2b) owned model", &owned),
        ("(3) views", &views),
        ("(7) two threads, owned arrays", &threads),
        ("(7b) two threads, views", &threads_views),
        ("(6) index query", &index),
        ("(8) page check", &page_check),
        ("(5) peer", &peer),
    ];
    let round_bar = bar(opts.progress, passes as u64 + 1, "read rounds", "rounds");
    let (timings, seen) = measure_rounds(passes, &round_bar, &mut figures)?;
    let [_, arrays_t, in_order_t, raw_t, owned_t, views_t, threads_t, threads_views_t, index_t, check_t, peer_t] =
        timings;
    let [_, arrays_tally, in_order_tally, raw_seen, owned_seen, views_tally, threads_tally, threads_views_tally, index_seen, _, peer_seen] =
        seen;
    let (raw_bytes, owned_frames) = (raw_seen.bytes, owned_seen.frames);
    let (small, hits) = index_seen.matches;
    let (peer_frames, peer_sum_x) = (peer_seen.frames, peer_seen.sum_x);
    drop(peer_env);
    drop(reader);
    let mem_final = mem();
    let load_end = loadavg();

    for (what, got) in [
        ("owned arrays", arrays_tally.frames),
        ("owned arrays in index order", in_order_tally.frames),
        ("owned model", owned_frames),
        ("views", views_tally.frames),
        ("two threads", threads_tally.frames),
        ("two threads, views", threads_views_tally.frames),
        ("peer", peer_frames),
    ] {
        if got != n_frames {
            return Err(Error::Lmdb(format!(
                "the {what} pass read {got} frames, the file has {n_frames}"
            )));
        }
    }
    for (what, sum_x) in [
        ("views", views_tally.sum_x),
        ("owned arrays", arrays_tally.sum_x),
        ("owned arrays in index order", in_order_tally.sum_x),
    ] {
        if (sum_x - peer_sum_x).abs() > 1e-6 * (1.0 + peer_sum_x.abs()) {
            return Err(Error::Lmdb(format!(
                "{what} and peer disagree on the sum of x: {sum_x} vs {peer_sum_x}"
            )));
        }
    }

    let figures = Figures {
        opts: opts.clone(),
        dir,
        temp,
        n_records: n,
        n_frames,
        atom_frames,
        payload,
        file_bytes,
        writer_secs,
        finish_secs,
        write_wall,
        write_cpu_user,
        write_cpu_system,
        mem_before,
        mem_start,
        mem_end,
        max_rss,
        max_anon,
        samples,
        peer_write,
        arrays: arrays_t,
        arrays_in_order: in_order_t,
        owned: owned_t,
        views: views_t,
        views_tally,
        raw: raw_t,
        raw_bytes,
        peer: peer_t,
        index: index_t,
        index_hits: (small, hits),
        page_check: check_t,
        threads: threads_t,
        threads_views: threads_views_t,
        mem_final,
        load: (load_start, load_end),
        damon_pageout: damon_pageout(),
    };
    Ok(figures.report())
}

/// Everything measured, before formatting.
struct Figures {
    opts: BenchOptions,
    dir: PathBuf,
    temp: bool,
    n_records: u64,
    n_frames: u64,
    atom_frames: u64,
    payload: u64,
    file_bytes: u64,
    writer_secs: f64,
    /// Of `writer_secs`, the time in `Writer::finish`.
    finish_secs: f64,
    write_wall: f64,
    /// User CPU seconds of the process over `write_wall`.
    write_cpu_user: f64,
    /// System (kernel) CPU seconds of the process over `write_wall`.
    write_cpu_system: f64,
    mem_before: Mem,
    mem_start: Mem,
    mem_end: Mem,
    max_rss: u64,
    max_anon: u64,
    samples: Vec<(u64, Mem)>,
    peer_write: PeerWrite,
    arrays: Timing,
    /// (2c): the arrays read in index order.
    arrays_in_order: Timing,
    owned: Timing,
    views: Timing,
    views_tally: Seen,
    raw: Timing,
    raw_bytes: u64,
    peer: Timing,
    index: Timing,
    index_hits: (u64, u64),
    /// (8): `check_pages` of the collection file.
    page_check: Timing,
    threads: Timing,
    threads_views: Timing,
    mem_final: Mem,
    /// 1-minute load average at the start and at the end.
    load: (f64, f64),
    /// Whether DAMON's pageout scheme runs ([`damon_pageout`]).
    damon_pageout: bool,
}

/// One line of the table.
struct Row {
    label: String,
    median: String,
    min: String,
    max: String,
    target: String,
    met: Option<bool>,
    /// CPU seconds / wall seconds of the passes behind the figure.
    cpu: String,
}

fn row(label: &str, median: String, min: String, max: String) -> Row {
    Row {
        label: label.to_string(),
        median,
        min,
        max,
        target: String::new(),
        met: None,
        cpu: String::new(),
    }
}

impl Row {
    fn target(mut self, target: &str, met: bool) -> Row {
        self.target = target.to_string();
        self.met = Some(met);
        self
    }

    fn cpu(mut self, share: f64) -> Row {
        self.cpu = if share.is_finite() {
            format!("{share:.2}")
        } else {
            "-".into()
        };
        self
    }
}

fn thousands(v: u64) -> String {
    let s = v.to_string();
    let head = match s.len() % 3 {
        0 => 3.min(s.len()),
        k => k,
    };
    let mut out = s[..head].to_string();
    for group in s.as_bytes()[head..].chunks(3) {
        out.push(',');
        out.push_str(std::str::from_utf8(group).unwrap_or(""));
    }
    out
}

fn rate(v: f64) -> String {
    thousands(v.round() as u64)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

fn signed_mib(delta: i64) -> String {
    format!("{:+.1} MiB", delta as f64 / (1u64 << 20) as f64)
}

fn times(v: f64) -> String {
    format!("{v:.2}x")
}

impl Figures {
    /// CPU seconds of the process over `write_wall`, user and system.
    fn write_cpu(&self) -> f64 {
        self.write_cpu_user + self.write_cpu_system
    }

    fn report(&self) -> Report {
        let n_frames = self.n_frames;
        let arrays = self.arrays.rate(n_frames);
        let in_order = self.arrays_in_order.rate(n_frames);
        let owned = self.owned.rate(n_frames);
        let views = self.views.rate(n_frames);
        let raw = self.raw.rate(n_frames);
        let peer = self.peer.rate(n_frames);
        let threads = self.threads.rate(n_frames);
        let threads_views = self.threads_views.rate(n_frames);
        let index = self.index.rate(self.n_records);
        let write_rate = n_frames as f64 / self.writer_secs;
        let file_ratio = self.file_bytes as f64 / self.payload as f64;
        let arrays_raw = time_ratio(&self.arrays, &self.raw);
        let owned_raw = time_ratio(&self.owned, &self.raw);
        let views_raw = time_ratio(&self.views, &self.raw);
        // Speed ratios: (a frames/s) / (b frames/s) = time(b) / time(a).
        let arrays_peer = time_ratio(&self.peer, &self.arrays);
        let owned_peer = time_ratio(&self.peer, &self.owned);
        let views_peer = time_ratio(&self.peer, &self.views);
        let threads_arrays = time_ratio(&self.arrays, &self.threads);
        let in_order_arrays = time_ratio(&self.arrays, &self.arrays_in_order);
        let threads_views_scaling = time_ratio(&self.views, &self.threads_views);
        let check_arrays = time_ratio(&self.page_check, &self.arrays);
        let rss_growth = self.mem_end.rss as i64 - self.mem_start.rss as i64;
        let anon_growth = self.max_anon as i64 - self.mem_start.anon as i64;
        let tally = self.views_tally;
        let f64_columns = tally.views + tally.fallbacks;
        let fallback_share = tally.fallbacks as f64 / f64_columns.max(1) as f64;

        let r3 = |s: Spread, f: fn(f64) -> String| (f(s.median), f(s.min), f(s.max));
        let mut rows = Vec::new();
        let dash = || "-".to_string();
        rows.push(
            row(
                "(1) write (Writer::append + finish)",
                format!("{} frames/s", rate(write_rate)),
                "single run".into(),
                dash(),
            )
            .target(">= 500,000 frames/s", write_rate >= 500_000.0)
            .cpu(self.write_cpu() / self.write_wall),
        );
        rows.push(row(
            "    of which Writer::finish (index, r/s values, syncs)",
            format!("{:.2} s", self.finish_secs),
            format!("of {:.2} s", self.writer_secs),
            dash(),
        ));
        rows.push(row(
            "    write incl. generating the records",
            format!("{} frames/s", rate(n_frames as f64 / self.write_wall)),
            "single run".into(),
            dash(),
        ));
        rows.push(row(
            "    CPU incl. generating: user / system (kernel)",
            format!("{:.2} s", self.write_cpu_user),
            format!("{:.2} s", self.write_cpu_system),
            format!("of {:.2} s wall", self.write_wall),
        ));
        rows.push(row(
            "    peak resident memory (VmHWM)",
            mib(self.mem_end.hwm),
            dash(),
            dash(),
        ));
        rows.push(row(
            "    RSS during write: start -> end (max)",
            format!("{} -> {}", mib(self.mem_start.rss), mib(self.mem_end.rss)),
            format!("growth {}", signed_mib(rss_growth)),
            format!("max {}", mib(self.max_rss)),
        ));
        rows.push(row(
            "    anonymous RSS: start -> max",
            format!("{} -> {}", mib(self.mem_start.anon), mib(self.max_anon)),
            format!("growth {}", signed_mib(anon_growth)),
            dash(),
        ));
        let at = |q: u64| {
            let want = self.n_records * q / 4;
            self.samples
                .iter()
                .find(|(r, _)| *r >= want)
                .map_or(0, |(_, m)| m.anon)
        };
        rows.push(row(
            "    anonymous RSS at 25% / 50% / 75% / 100%",
            format!("{} / {}", mib(at(1)), mib(at(2))),
            format!("{} / {}", mib(at(3)), mib(at(4))),
            dash(),
        ));
        rows.push(
            row(
                "    file size / raw payload",
                times(file_ratio),
                mib(self.file_bytes),
                format!("payload {}", mib(self.payload)),
            )
            .target("<= 1.25x", file_ratio <= 1.25),
        );
        rows.push(row(
            "    of which: stored values / payload",
            times(self.raw_bytes as f64 / self.payload as f64),
            mib(self.raw_bytes),
            "r, s, f values".into(),
        ));
        rows.push(row(
            "    of which: file / stored values",
            times(self.file_bytes as f64 / self.raw_bytes as f64),
            dash(),
            "LMDB pages".into(),
        ));
        let (m, lo, hi) = r3(arrays, rate);
        rows.push(
            row("(2) read shuffled, owned arrays (frames/s)", m, lo, hi)
                .target(">= 1,000,000 frames/s", arrays.median >= 1e6)
                .cpu(self.arrays.cpu_share()),
        );
        let (m, lo, hi) = r3(in_order, rate);
        rows.push(
            row(
                "(2c) read in index order, owned arrays (frames/s)",
                m,
                lo,
                hi,
            )
            .cpu(self.arrays_in_order.cpu_share()),
        );
        let (m, lo, hi) = r3(in_order_arrays, times);
        rows.push(row("    speed (2c)/(2): what the shuffle costs", m, lo, hi));
        let (m, lo, hi) = r3(owned, rate);
        rows.push(
            row("(2b) read shuffled, owned model (frames/s)", m, lo, hi)
                .cpu(self.owned.cpu_share()),
        );
        let (m, lo, hi) = r3(views, rate);
        rows.push(
            row("(3) read shuffled, views (frames/s)", m, lo, hi).cpu(self.views.cpu_share()),
        );
        rows.push(row(
            "    f64 columns viewed / copied (unaligned)",
            thousands(tally.views),
            thousands(tally.fallbacks),
            format!("{:.1}% copied", 100.0 * fallback_share),
        ));
        let (m, lo, hi) = r3(raw, rate);
        rows.push(row("(4) raw LMDB values, heed (frames/s)", m, lo, hi).cpu(self.raw.cpu_share()));
        let (m, lo, hi) = r3(arrays_raw, times);
        rows.push(row("    time (2)/(4)", m, lo, hi).target("<= 3x", arrays_raw.median <= 3.0));
        let (m, lo, hi) = r3(owned_raw, times);
        rows.push(row("    time (2b)/(4)", m, lo, hi));
        let (m, lo, hi) = r3(views_raw, times);
        rows.push(row("    time (3)/(4)", m, lo, hi));
        let (m, lo, hi) = r3(peer, rate);
        rows.push(
            row("(5) peer: ASE-LMDB zlib JSON (frames/s)", m, lo, hi).cpu(self.peer.cpu_share()),
        );
        rows.push(row(
            "    peer file size / ours",
            mib(self.peer_write.file_bytes),
            times(self.peer_write.file_bytes as f64 / self.file_bytes as f64),
            format!("json {}", mib(self.peer_write.json_bytes)),
        ));
        let (m, lo, hi) = r3(arrays_peer, times);
        rows.push(row("    speed (2)/(5)", m, lo, hi).target(">= 30x", arrays_peer.median >= 30.0));
        let (m, lo, hi) = r3(owned_peer, times);
        rows.push(row("    speed (2b)/(5)", m, lo, hi));
        let (m, lo, hi) = r3(views_peer, times);
        rows.push(row("    speed (3)/(5)", m, lo, hi));
        rows.push(row(
            "    major page faults in the timed passes: (2) (3) (4)",
            thousands(self.arrays.faults()),
            thousands(self.views.faults()),
            thousands(self.raw.faults()),
        ));
        let (m, lo, hi) = r3(index, rate);
        rows.push(row("(6) index query (records/s)", m, lo, hi).cpu(self.index.cpu_share()));
        rows.push(row(
            "    matches: <= 20 atoms / S|Cl, <= 12 heavy",
            thousands(self.index_hits.0),
            thousands(self.index_hits.1),
            dash(),
        ));
        let ms = |s: f64| format!("{:.1} ms", s * 1e3);
        rows.push(
            row(
                "(8) page check of the file (Reader::open_checked)",
                ms(self.page_check.median()),
                ms(self.page_check.min()),
                ms(self.page_check.max()),
            )
            .cpu(self.page_check.cpu_share()),
        );
        let (m, lo, hi) = r3(check_arrays, times);
        rows.push(
            row(
                "    time (8)/(2): the check against one full read",
                m,
                lo,
                hi,
            )
            .target("<= 0.10x", check_arrays.median <= 0.10),
        );
        let (m, lo, hi) = r3(threads, rate);
        rows.push(
            row("(7) two threads, owned arrays (frames/s)", m, lo, hi)
                .cpu(self.threads.cpu_share()),
        );
        let (m, lo, hi) = r3(threads_arrays, times);
        rows.push(
            row("    speed (7)/(2)", m, lo, hi).target(">= 1.7x", threads_arrays.median >= 1.7),
        );
        let (m, lo, hi) = r3(threads_views, rate);
        rows.push(
            row("(7b) two threads, views (frames/s)", m, lo, hi)
                .cpu(self.threads_views.cpu_share()),
        );
        let (m, lo, hi) = r3(threads_views_scaling, times);
        rows.push(row("    speed (7b)/(3)", m, lo, hi));

        let machine = machine();
        let mut table = String::new();
        let cores = machine["cores"].as_u64().unwrap_or(1);
        table.push_str(&format!(
            "mrec bench: {} records, {} frames ({:.1} frames/record, {:.1} atoms/frame), seed {}\n",
            thousands(self.n_records),
            thousands(n_frames),
            n_frames as f64 / self.n_records as f64,
            self.atom_frames as f64 / n_frames as f64,
            self.opts.seed
        ));
        table.push_str(&format!(
            "machine: {cores} cores, {}{}, {}; allocator: {}{}\n",
            machine["cpu"].as_str().unwrap_or("?"),
            machine["last_level_cache_bytes"]
                .as_u64()
                .map_or(String::new(), |b| format!(" ({} last-level cache)", mib(b))),
            machine["memory_bytes"]
                .as_u64()
                .map_or("?".into(), |b| format!(
                    "{:.1} GiB RAM",
                    b as f64 / (1u64 << 30) as f64
                )),
            self.opts.allocator,
            if cfg!(debug_assertions) {
                "  ** DEBUG BUILD: figures are not meaningful **"
            } else {
                ""
            }
        ));
        table.push_str(&format!(
            "load average (1 min): {:.2} at the start, {:.2} at the end{}\n",
            self.load.0,
            self.load.1,
            if self.load.0.max(self.load.1) > cores as f64 * 0.5 {
                " (other processes were running: see cpu/wall)"
            } else {
                ""
            }
        ));
        if self.damon_pageout {
            table.push_str(
                "note: DAMON's pageout scheme runs on this machine: it evicts pages not touched for a \
                 few seconds, the files' too, so the page cache is not always warm (see the major \
                 page faults)\n",
            );
        }
        if let Some(note) = kernel_bound_write_note(self.write_cpu_user, self.write_cpu_system) {
            table.push_str(&note);
        }
        let cache = machine["last_level_cache_bytes"].as_u64();
        if let Some(note) = file_beyond_cache_note(self.file_bytes, cache) {
            table.push_str(&note);
        }
        table.push_str(&format!(
            "reads: {} rounds after 1 warm-up round, each one pass of every read figure (both \
             files read once, untimed, before each round: page cache warm); a figure is the \
             median of its passes (min/max = slowest/fastest), a ratio the median of the \
             rounds' ratios (min/max over the rounds)\n\
             cpu/wall: CPU seconds of this process per wall second (1.00 = one core to itself; \
             2.00 for two threads on two idle cores)\n",
            self.opts.passes
        ));
        table.push_str(&format!(
            "files: {}{}\n\n",
            self.dir.display(),
            if self.opts.keep {
                " (kept)"
            } else if self.temp {
                " (temporary, deleted)"
            } else {
                " (files deleted)"
            }
        ));
        let head = ["figure", "median", "min", "max", "cpu/wall", "target", ""];
        let cells: Vec<[String; 7]> = rows
            .iter()
            .map(|r| {
                [
                    r.label.clone(),
                    r.median.clone(),
                    r.min.clone(),
                    r.max.clone(),
                    r.cpu.clone(),
                    r.target.clone(),
                    match r.met {
                        Some(true) => "✓".into(),
                        Some(false) => "✗".into(),
                        None => String::new(),
                    },
                ]
            })
            .collect();
        let width = |i: usize| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..7).map(width).collect();
        let line = |c: [&str; 7]| {
            let pad = |s: &str, w: usize, right: bool| {
                let fill = " ".repeat(w.saturating_sub(s.chars().count()));
                if right {
                    format!("{fill}{s}")
                } else {
                    format!("{s}{fill}")
                }
            };
            format!(
                "{}  {}  {}  {}  {}  {}  {}",
                pad(c[0], widths[0], false),
                pad(c[1], widths[1], true),
                pad(c[2], widths[2], true),
                pad(c[3], widths[3], true),
                pad(c[4], widths[4], true),
                pad(c[5], widths[5], false),
                c[6]
            )
            .trim_end()
            .to_string()
        };
        table.push_str(&line(head));
        table.push('\n');
        for c in &cells {
            table.push_str(&line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6]]));
            table.push('\n');
        }

        let targets: Vec<Value> = rows
            .iter()
            .filter_map(|r| {
                r.met.map(|met| {
                    json!({"figure": r.label.trim(), "measured": r.median, "target": r.target,
                           "met": met})
                })
            })
            .collect();
        let mem_json =
            |m: &Mem| json!({"rss": m.rss, "hwm": m.hwm, "anon": m.anon, "file": m.file});
        let json = json!({
            "tool": "mrec bench",
            "version": crate::VERSION,
            "params": {
                "records": self.n_records, "seed": self.opts.seed, "passes": self.opts.passes,
                "warmup_passes": 1, "dir": self.dir.display().to_string(),
                "kept": self.opts.keep, "allocator": self.opts.allocator,
            },
            "machine": machine,
            "load_average_1min": {"start": self.load.0, "end": self.load.1},
            "page_cache": "warm: both files are read once, untimed, before each round",
            "rounds": "every round runs one pass of each read figure; ratios are per round",
            "damon_pageout": self.damon_pageout,
            "workload": {
                "records": self.n_records,
                "frames": n_frames,
                "frames_per_record": n_frames as f64 / self.n_records as f64,
                "atoms_per_frame": self.atom_frames as f64 / n_frames as f64,
                "payload_bytes": self.payload,
            },
            "write": {
                "frames_per_s": write_rate,
                "writer_secs": self.writer_secs,
                "finish_secs": self.finish_secs,
                "frames_per_s_with_generation": n_frames as f64 / self.write_wall,
                "wall_secs_with_generation": self.write_wall,
                "cpu_secs_with_generation": self.write_cpu(),
                "system_cpu_secs_with_generation": self.write_cpu_system,
                "cpu_share": self.write_cpu() / self.write_wall,
                "peak_rss_bytes_vmhwm": self.mem_end.hwm,
                "rss_before_writer": mem_json(&self.mem_before),
                "rss_start": mem_json(&self.mem_start),
                "rss_end": mem_json(&self.mem_end),
                "rss_max_bytes": self.max_rss,
                "rss_growth_bytes": rss_growth,
                "anon_max_bytes": self.max_anon,
                "anon_growth_bytes": anon_growth,
                "rss_samples": self.samples.iter().map(|(r, m)| json!({
                    "records": r, "rss": m.rss, "anon": m.anon, "file": m.file,
                })).collect::<Vec<_>>(),
                "file_bytes": self.file_bytes,
                "payload_bytes": self.payload,
                "file_over_payload": file_ratio,
                "stored_value_bytes": self.raw_bytes,
                "values_over_payload": self.raw_bytes as f64 / self.payload as f64,
                "file_over_values": self.file_bytes as f64 / self.raw_bytes as f64,
            },
            "read_owned_arrays": self.arrays.json(n_frames, "frames_per_s"),
            "read_owned_arrays_in_index_order": self.arrays_in_order.json(n_frames, "frames_per_s"),
            "read_owned_model": self.owned.json(n_frames, "frames_per_s"),
            "read_views": {
                "timing": self.views.json(n_frames, "frames_per_s"),
                "f64_views": tally.views,
                "f64_fallbacks_to_column": tally.fallbacks,
                "fallback_share": fallback_share,
            },
            "raw_baseline": {
                "timing": self.raw.json(n_frames, "frames_per_s"),
                "bytes_per_pass": self.raw_bytes,
            },
            "peer_baseline": {
                "timing": self.peer.json(n_frames, "frames_per_s"),
                "file_bytes": self.peer_write.file_bytes,
                "json_bytes": self.peer_write.json_bytes,
                "write_secs": self.peer_write.secs,
            },
            "index_query": {
                "timing": self.index.json(self.n_records, "records_per_s"),
                "matches_at_most_20_atoms": self.index_hits.0,
                "matches_s_or_cl_at_most_12_heavy": self.index_hits.1,
            },
            "page_check": self.page_check.json(1, "checks_per_s"),
            "two_threads_owned_arrays": self.threads.json(n_frames, "frames_per_s"),
            "two_threads_views": self.threads_views.json(n_frames, "frames_per_s"),
            "ratios": {
                "time_owned_arrays_over_raw": arrays_raw.json(),
                "time_owned_model_over_raw": owned_raw.json(),
                "time_views_over_raw": views_raw.json(),
                "speed_owned_arrays_over_peer": arrays_peer.json(),
                "speed_owned_model_over_peer": owned_peer.json(),
                "speed_views_over_peer": views_peer.json(),
                "speed_two_threads_over_owned_arrays": threads_arrays.json(),
                "speed_two_threads_views_over_views": threads_views_scaling.json(),
                "speed_index_order_over_shuffled": in_order_arrays.json(),
                "time_page_check_over_owned_arrays": check_arrays.json(),
                "file_over_payload": file_ratio,
                "peer_file_over_ours": self.peer_write.file_bytes as f64 / self.file_bytes as f64,
            },
            "targets": targets,
            "final_rss": mem_json(&self.mem_final),
        });
        Report { json, table }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_is_deterministic_and_seed_shaped() {
        let a = Molecule::generate(7, 3);
        let b = Molecule::generate(7, 3);
        assert_eq!(a.code, b.code);
        assert_eq!(a.frames[0].x, b.frames[0].x);
        let (mut atoms, mut frames) = (0usize, 0usize);
        for r in 0..2000 {
            let m = Molecule::generate(1, r);
            assert!((10..=60).contains(&m.n_atoms()));
            assert!((1..=48).contains(&m.frames.len()));
            assert_eq!(m.bonds.len(), m.n_atoms() - 1);
            assert!(m.frames.windows(2).all(|w| w[1].pe < w[0].pe));
            assert!(m.frames.iter().all(|f| (-1000.0..=-100.0).contains(&f.pe)));
            atoms += m.n_atoms();
            frames += m.frames.len();
        }
        let mean_atoms = atoms as f64 / 2000.0;
        let mean_frames = frames as f64 / 2000.0;
        assert!((27.0..33.0).contains(&mean_atoms), "{mean_atoms}");
        assert!((22.0..27.0).contains(&mean_frames), "{mean_frames}");
    }

    #[test]
    fn hill_formula_orders_c_h_then_alphabetical() {
        assert_eq!(hill_formula(&[1, 1, 0, 0, 0, 6, 3]), "C2H3ClO");
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    #[cfg(target_os = "linux")] // /proc/thread-self
    fn cpu_split_counts_a_busy_loop_as_user_time() {
        // This thread's counters, not the process's: the tests running
        // beside this one (files written, syncs) add system time to those.
        let thread =
            || user_system_secs(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
        let (user_start, system_start) = thread();
        let wall = Instant::now();
        let mut x = 1u64;
        // CPU time, not wall time, ends the loop (20 ticks of 1/100 s): a
        // loaded machine makes it longer, never wrong. Each round spins
        // about a millisecond between two reads of /proc, so nearly all
        // of the time is user time.
        let spent = loop {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
            let (user, system) = thread();
            let spent = (user - user_start, system - system_start);
            if spent.0 + spent.1 >= 0.2 {
                break spent;
            }
            assert!(
                wall.elapsed().as_secs() < 60,
                "60 s of spinning took no CPU time"
            );
        };
        assert!(
            spent.0 >= 0.75 * (spent.0 + spent.1),
            "user, system: {spent:?}"
        );
        // The process's counters include this thread's.
        let (user, _) = cpu_user_system_secs();
        assert!(user >= spent.0, "the process's user time {user}");
    }

    #[test]
    fn user_system_secs_reads_fields_14_and_15() {
        // A command name with a space and a parenthesis, as the kernel
        // allows: the fields are counted after the last `)`.
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 1 0";
        assert_eq!(user_system_secs(stat), (2.5, 0.75));
        assert_eq!(user_system_secs(""), (0.0, 0.0));
    }

    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(cache_size_bytes("48K\n"), Some(48 << 10));
        assert_eq!(cache_size_bytes("491520K"), Some(480 << 20));
        assert_eq!(cache_size_bytes("32M"), Some(32 << 20));
        assert_eq!(cache_size_bytes("512"), Some(512));
        for bad in ["", "K", "12 K", "12T", "-1K", "99999999999999999999K"] {
            assert_eq!(cache_size_bytes(bad), None, "{bad:?}");
        }
    }

    /// The largest level that holds data wins: an instruction cache, a
    /// directory without a level or size, and a bad size are passed over.
    #[test]
    fn the_last_level_cache_is_the_highest_data_level() {
        let root = std::env::temp_dir().join(format!("mrec-bench-cache-{}", std::process::id()));
        let index = |i: u32, level: &str, kind: &str, size: &str| {
            let dir = root.join(format!("index{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            for (name, text) in [("level", level), ("type", kind), ("size", size)] {
                if !text.is_empty() {
                    std::fs::write(dir.join(name), format!("{text}\n")).unwrap();
                }
            }
        };
        index(0, "1", "Data", "48K");
        index(1, "1", "Instruction", "64K");
        index(2, "2", "Unified", "2048K");
        assert_eq!(last_level_cache_bytes(&root), Some(2048 << 10));
        index(3, "3", "Unified", "32M");
        index(4, "4", "Instruction", "1G");
        index(5, "", "Unified", "2G");
        index(6, "5", "Unified", "lots");
        std::fs::create_dir_all(root.join("power")).unwrap();
        assert_eq!(last_level_cache_bytes(&root), Some(32 << 20));
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(last_level_cache_bytes(&root), None);
    }

    #[test]
    fn a_file_beyond_the_cache_is_noted() {
        assert_eq!(file_beyond_cache_note(100 << 20, Some(480 << 20)), None);
        assert_eq!(file_beyond_cache_note(480 << 20, Some(480 << 20)), None);
        assert_eq!(file_beyond_cache_note(100 << 20, None), None);
        assert_eq!(file_beyond_cache_note(100 << 20, Some(0)), None);
        let note = file_beyond_cache_note(3872 << 20, Some(480 << 20)).unwrap();
        assert!(
            note.contains("(3872.0 MiB)") && note.contains("cache (480.0 MiB)"),
            "{note}"
        );
    }

    #[test]
    fn kernel_bound_write_is_noted_only_when_the_kernel_took_more() {
        assert_eq!(kernel_bound_write_note(0.60, 0.59), None);
        assert_eq!(kernel_bound_write_note(0.60, 0.60), None);
        assert_eq!(kernel_bound_write_note(0.03, 0.11), None);
        let note = kernel_bound_write_note(0.60, 1.53).unwrap();
        assert!(
            note.contains("kernel (1.53 s)") && note.contains("user code (0.60 s"),
            "{note}"
        );
    }

    #[test]
    fn zlib_round_trip() {
        let data = br#"{"numbers": [1, 6], "energy": -1.5}"#.repeat(50);
        let z = zlib_compress(&data).unwrap();
        let mut out = Vec::new();
        zlib_inflate(&mut Decompress::new(true), &z, &mut out).unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn small_run_completes() {
        let dir = std::env::temp_dir().join(format!("mrec-bench-test-{}", std::process::id()));
        let report = run(&BenchOptions {
            records: 40,
            passes: 1,
            dir: Some(dir.clone()),
            progress: false,
            ..BenchOptions::default()
        })
        .unwrap();
        assert!(report.table().contains("(7) two threads"));
        assert!(report.table().contains("user / system (kernel)"));
        assert!(report.table().contains("(2c) read in index order"));
        assert_eq!(report.json()["workload"]["records"], 40);
        // (2c) and its ratio to (2) are in the JSON (`run` has checked that
        // it read every frame and the same x as the peer).
        let in_order = &report.json()["read_owned_arrays_in_index_order"]["frames_per_s"];
        assert!(in_order["median"].as_f64().unwrap() > 0.0, "{in_order}");
        let ratio = &report.json()["ratios"]["speed_index_order_over_shuffled"];
        assert!(ratio["median"].as_f64().unwrap() > 0.0, "{ratio}");
        let write = &report.json()["write"];
        let (all, system) = (
            write["cpu_secs_with_generation"].as_f64().unwrap(),
            write["system_cpu_secs_with_generation"].as_f64().unwrap(),
        );
        assert!((0.0..=all).contains(&system), "{system} of {all}");
        assert!(!dir.join("bench.mrec.lmdb").exists());
        let _ = std::fs::remove_dir_all(dir);
    }
}
