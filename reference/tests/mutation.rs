//! Mutation testing: a deterministic, seeded mutator applied to every frame
//! value and every `meta` value of the committed fixtures, with zero panics
//! and zero hangs allowed, and every outcome a successful read or a typed
//! refusal.
//!
//! * `mutated_frame_values_never_panic`: at least 200,000 mutated frame
//!   values (bit flips, truncation, extension, header-length and offset
//!   edits, JSON edits of the header, dtype / shape / count swaps, splices,
//!   re-encoded semantic edits), each through `frame_bytes::decode`,
//!   `to_column` on every column, `f64_view` and `u64_view`.
//! * `mutated_files_never_panic`: at least 2,000 mutated files (edits of
//!   keys and values, `meta` JSON edits, index and frame edits re-encoded so
//!   they pass the byte checks and reach the model checks), written through
//!   heed, each opened and read end to end (`Reader::open`,
//!   `read_collection`, `for_each_frame` views). A file that reads is
//!   written again and read back: the reader must hand back only what a
//!   writer accepts, unchanged.
//!
//! The base corpus: every `fixtures/**/*.json` the reference accepts
//! (written to a temporary file first) and every `fixtures/golden/*.mrec.lmdb`.
//!
//! Counts are printed on the real stderr (visible in CI output without
//! `--nocapture`), kept in the assertion messages, and written to
//! `mutation-summary.txt` in cargo's `CARGO_TARGET_TMPDIR` (`<target dir>/tmp`). `MOLREC_MUTATION_SCALE=10` runs ten times as
//! many mutations; `MOLREC_MUTATION_SEED=n` picks another seed. A value or
//! file that panics is saved under `<target dir>/tmp/mutation-failures/`.

mod common;

use common::{frame_value, lock_path, report, scratch_dir, Rng};
use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use molrec::frame_bytes::{decode, encode, ColumnBytes, FrameInfo};
use molrec::lmdb::{write_collection, Reader, WriterOptions};
use molrec::model::{Block, Cell, Column, ColumnData};
use molrec::model_json::{collection_from_str, collection_to_json};
use molrec::typed_json::MetaTag;
use molrec::{DType, Error};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Mutated frame values decoded at scale 1.
const VALUES_AT_SCALE_1: f64 = 300_000.0;
/// Mutated files read at scale 1.
const FILES_AT_SCALE_1: f64 = 5_000.0;
/// The default seed.
const SEED: u64 = 0x6d72_6563_2d6d_7574; // "mrec-mut"
/// One decode or one file read taking longer than this is a hang: the
/// watchdog reports it and aborts the test binary.
const HANG_LIMIT: Duration = Duration::from_secs(60);
/// Asserted per operation (generous: a loaded 2-core CI machine).
const SLOW_LIMIT: Duration = Duration::from_secs(5);

fn scale() -> f64 {
    std::env::var("MOLREC_MUTATION_SCALE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0)
}

fn seed() -> u64 {
    std::env::var("MOLREC_MUTATION_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(SEED)
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Replaces the line of `<target dir>/tmp/mutation-summary.txt` that
/// starts with `tag`.
fn write_summary(tag: &str, line: &str) {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let _ = std::fs::create_dir_all(dir);
    let path = dir.join("mutation-summary.txt");
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let mut lines: Vec<String> = old
        .lines()
        .filter(|l| !l.starts_with(tag))
        .map(str::to_string)
        .collect();
    lines.push(line.to_string());
    lines.sort();
    let _ = std::fs::write(&path, lines.join("\n") + "\n");
}

fn save_failure(name: &str, bytes: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mutation-failures");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(name);
    let _ = std::fs::write(&path, bytes);
    path
}

// ---------------------------------------------------------------------------
// Deterministic randomness (SplitMix64)
// ---------------------------------------------------------------------------

fn mix(a: u64, b: u64) -> u64 {
    Rng::new(a ^ b.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next()
}

// ---------------------------------------------------------------------------
// Panic capture and the watchdog
// ---------------------------------------------------------------------------

thread_local! {
    static IN_TRIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn panic_messages() -> &'static Mutex<Vec<String>> {
    static M: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    M.get_or_init(|| Mutex::new(Vec::new()))
}

/// Installs (once) a hook that records panics raised inside a trial and
/// leaves every other panic (a failing assertion) to the default hook.
fn install_panic_hook() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_TRIAL.with(|t| t.get()) {
                let mut m = panic_messages().lock().unwrap_or_else(|e| e.into_inner());
                if m.len() < 100 {
                    m.push(info.to_string());
                }
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, catching a panic; returns `None` when it panicked.
fn trial<T>(f: impl FnOnce() -> T) -> Option<T> {
    IN_TRIAL.with(|t| t.set(true));
    let out = catch_unwind(AssertUnwindSafe(f)).ok();
    IN_TRIAL.with(|t| t.set(false));
    out
}

/// Aborts the process when one operation runs past [`HANG_LIMIT`].
struct Watchdog {
    state: Arc<(AtomicU64, AtomicU64, AtomicBool)>,
    origin: Instant,
}

impl Watchdog {
    fn start(what: &'static str) -> Watchdog {
        let state = Arc::new((
            AtomicU64::new(0),
            AtomicU64::new(u64::MAX),
            AtomicBool::new(false),
        ));
        let origin = Instant::now();
        let s = Arc::clone(&state);
        std::thread::spawn(move || {
            while !s.2.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let started = s.0.load(Ordering::Relaxed);
                if started == 0 {
                    continue;
                }
                let now = origin.elapsed().as_millis() as u64;
                if now.saturating_sub(started) > HANG_LIMIT.as_millis() as u64 {
                    report(&format!(
                        "mutation {what}: HANG: operation {} has run for more than {HANG_LIMIT:?} \
                         (seed {}); aborting",
                        s.1.load(Ordering::Relaxed),
                        seed()
                    ));
                    std::process::abort();
                }
            }
        });
        Watchdog { state, origin }
    }
    fn begin(&self, op: u64) {
        self.state.1.store(op, Ordering::Relaxed);
        let now = (self.origin.elapsed().as_millis() as u64).max(1);
        self.state.0.store(now, Ordering::Relaxed);
    }
    fn end(&self) {
        self.state.0.store(0, Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.state.2.store(true, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------
// The corpus
// ---------------------------------------------------------------------------

type Kvs = Vec<(Vec<u8>, Vec<u8>)>;
type Db = Database<Bytes, Bytes>;

struct Base {
    name: String,
    kvs: Kvs,
}

fn remove_file_and_lock(path: &Path) {
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(lock_path(path));
}

fn json_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            json_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "json") {
            out.push(path);
        }
    }
}

/// Every key and value of a file, in key order.
fn read_kvs(path: &Path) -> Kvs {
    let mut options = EnvOpenOptions::new();
    options.map_size(crate_map_size(std::fs::metadata(path).unwrap().len()));
    // SAFETY: valid flags; nothing else in this process has the file open.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR) };
    // SAFETY: as above.
    let env = unsafe { options.open(path) }.unwrap();
    let txn = env.read_txn().unwrap();
    let db: Db = env.open_database(&txn, None).unwrap().unwrap();
    let kvs = db
        .iter(&txn)
        .unwrap()
        .map(|kv| {
            let (k, v) = kv.unwrap();
            (k.to_vec(), v.to_vec())
        })
        .collect();
    drop(txn);
    env.prepare_for_closing().wait();
    kvs
}

fn crate_map_size(bytes: u64) -> usize {
    let mib = 1u64 << 20;
    ((bytes.saturating_mul(3) + 4 * mib).div_ceil(mib) * mib).max(16 * mib) as usize
}

/// The committed fixtures the reference accepts, written to files.
fn corpus() -> &'static Vec<Base> {
    static CORPUS: OnceLock<Vec<Base>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = scratch_dir("mutation-corpus");
        let fixtures = workspace().join("fixtures");
        let mut files = Vec::new();
        json_files(&fixtures, &mut files);
        files.sort();
        let mut bases = Vec::new();
        let mut refused = 0;
        for (i, file) in files.iter().enumerate() {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            let Ok(collection) = collection_from_str(&text) else {
                refused += 1;
                continue;
            };
            let path = dir.join(format!("base{i}.mrec.lmdb"));
            if write_collection(&path, collection, WriterOptions::default()).is_err() {
                refused += 1;
                remove_file_and_lock(&path);
                continue;
            }
            let name = file
                .strip_prefix(&fixtures)
                .unwrap_or(file)
                .display()
                .to_string();
            bases.push(Base {
                name,
                kvs: read_kvs(&path),
            });
            remove_file_and_lock(&path);
        }
        let mut golden = Vec::new();
        if let Ok(entries) = std::fs::read_dir(fixtures.join("golden")) {
            for entry in entries.flatten() {
                let p = entry.path();
                if p.to_string_lossy().ends_with(".mrec.lmdb") {
                    golden.push(p);
                }
            }
        }
        golden.sort();
        for (i, file) in golden.iter().enumerate() {
            // Copied first: opening creates a lock file beside the data file.
            let path = dir.join(format!("golden{i}.mrec.lmdb"));
            if std::fs::copy(file, &path).is_ok() {
                bases.push(Base {
                    name: format!("golden/{}", file.file_name().unwrap().to_string_lossy()),
                    kvs: read_kvs(&path),
                });
            }
            remove_file_and_lock(&path);
        }
        let _ = std::fs::remove_dir_all(&dir);
        report(&format!(
            "mutation corpus: {} base files ({} fixture JSON files, {refused} refused by the \
             reference and skipped, {} golden files)",
            bases.len(),
            files.len(),
            golden.len()
        ));
        assert!(
            bases.len() >= 10,
            "expected at least 10 accepted fixtures, found {}",
            bases.len()
        );
        bases
    })
}

fn is_frame(value: &[u8]) -> bool {
    value.starts_with(b"MRF1")
}

/// Every frame value of the corpus.
fn frame_values() -> Vec<&'static [u8]> {
    corpus()
        .iter()
        .flat_map(|b| b.kvs.iter())
        .filter(|(_, v)| is_frame(v))
        .map(|(_, v)| v.as_slice())
        .collect()
}

// ---------------------------------------------------------------------------
// Interesting values
// ---------------------------------------------------------------------------

const INTERESTING_U64: [u64; 24] = [
    0,
    1,
    2,
    3,
    7,
    8,
    9,
    255,
    256,
    65_535,
    (1 << 31) - 1,
    1 << 31,
    1 << 32,
    (1 << 32) + 8,
    1 << 40,
    1 << 53,
    (1 << 53) + 1,
    (1 << 61) - 1,
    1 << 61,
    (1 << 63) - 1,
    1 << 63,
    u64::MAX - 7,
    u64::MAX - 1,
    u64::MAX,
];

const DTYPE_NAMES: [&str; 21] = [
    "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool", "string", "c64", "c128",
    "f32", "f16", "float", "int", "json", "", "F64", "u64 ",
];

const TAG_NAMES: [&str; 19] = [
    "bool", "i32", "i64", "u32", "u64", "f64", "string", "json", "bool3", "i32x3", "i64x3",
    "u32x3", "u64x3", "f64x3", "f64x6", "f64x9", "f32", "", "int",
];

const NAMES: [&str; 24] = [
    "atoms",
    "bonds",
    "box",
    "step",
    "time",
    "meta",
    "records",
    "x",
    "y",
    "z",
    "id",
    "atomi",
    "atomj",
    "element",
    "_validity",
    "offset",
    "step_index",
    "first_frame",
    "n_frames",
    "has_trajectory",
    "pair.lj%2Fcut",
    "name",
    "",
    "é",
];

const UNITS: [&str; 14] = [
    "angstrom",
    "kcal/mol",
    "",
    "kcal/mool",
    "m**2(s)",
    "((((((((((m",
    "1/0",
    "Å",
    "m**0",
    "%",
    "e",
    "m^-1.5",
    "m**99999999999",
    "m^^2",
];

fn interesting_json(rng: &mut Rng) -> Value {
    match rng.index(40) {
        0 => Value::Null,
        1 => json!(true),
        2 => json!(false),
        3..=12 => json!(*rng.pick(&INTERESTING_U64)),
        13 => json!(-1),
        14 => json!(i64::MIN),
        15 => json!(1.5),
        16 => json!(-0.0),
        17 => json!(1e308),
        18 => json!(5e-324),
        19 => json!(""),
        20 => json!("NaN"),
        21 => json!("Infinity"),
        22 => json!("-Infinity"),
        23 => json!("18446744073709551616"),
        24 => json!("-9223372036854775809"),
        25 => json!(rng.pick(&DTYPE_NAMES)),
        26 => json!(rng.pick(&NAMES)),
        27 => json!(rng.pick(&TAG_NAMES)),
        28 => json!([]),
        29 => json!({}),
        30 => json!([0, 1, 2]),
        31 => json!([[1, 0, 0], [0, 1, 0], [0, 0, 1]]),
        32 => json!({"a": 1}),
        33 => json!("x".repeat(1000)),
        34 => json!([rng.next(), rng.next()]),
        35 => json!(rng.pick(&UNITS)),
        36 => json!(["O", "H", "H"]),
        37 => json!([1.5, "NaN"]),
        38 => json!(rng.next() as i64),
        _ => json!("\u{0}\u{ffff}"),
    }
}

// ---------------------------------------------------------------------------
// JSON tree mutation
// ---------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

/// The member `key` of `v`, which becomes an object first if it is not one
/// (stacked mutations may have turned any node into anything).
fn at<'a>(v: &'a mut Value, key: &str) -> &'a mut Value {
    if !v.is_object() {
        *v = json!({});
    }
    match v {
        Value::Object(m) => m.entry(key.to_string()).or_insert(Value::Null),
        _ => unreachable!(),
    }
}

/// Paths of up to `limit` nodes (a reservoir sample of all of them).
fn sample_paths(v: &Value, rng: &mut Rng, limit: usize) -> Vec<Vec<Seg>> {
    let mut out = Vec::new();
    let mut seen = 0usize;
    let mut stack: Vec<(Vec<Seg>, &Value)> = vec![(Vec::new(), v)];
    while let Some((path, node)) = stack.pop() {
        seen += 1;
        if out.len() < limit {
            out.push(path.clone());
        } else {
            let j = rng.index(seen);
            if j < limit {
                out[j] = path.clone();
            }
        }
        match node {
            Value::Object(m) => {
                for (k, child) in m {
                    let mut p = path.clone();
                    p.push(Seg::Key(k.clone()));
                    stack.push((p, child));
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate().take(64) {
                    let mut p = path.clone();
                    p.push(Seg::Index(i));
                    stack.push((p, child));
                }
            }
            _ => {}
        }
    }
    out
}

fn node_mut<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    let mut cur = v;
    for seg in path {
        cur = match (seg, cur) {
            (Seg::Key(k), Value::Object(m)) => m.get_mut(k)?,
            (Seg::Index(i), Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// One random edit somewhere in the tree.
fn mutate_tree(v: &mut Value, rng: &mut Rng) {
    let paths = sample_paths(v, rng, 256);
    let path = rng.pick(&paths).clone();
    let op = rng.index(10);
    if op == 0 && !path.is_empty() {
        // Delete the node.
        let (last, parent) = path.split_last().unwrap();
        if let Some(p) = node_mut(v, parent) {
            match (last, p) {
                (Seg::Key(k), Value::Object(m)) => {
                    m.remove(k);
                }
                (Seg::Index(i), Value::Array(a)) if *i < a.len() => {
                    a.remove(*i);
                }
                _ => {}
            }
        }
        return;
    }
    let Some(node) = node_mut(v, &path) else {
        return;
    };
    match op {
        1 => {
            // Numbers move a little.
            if let Some(n) = node.as_u64() {
                *node = json!(match rng.index(4) {
                    0 => n.wrapping_add(1),
                    1 => n.wrapping_sub(1),
                    2 => n.wrapping_add(8),
                    _ => n.wrapping_mul(2),
                });
            } else if let Some(x) = node.as_f64() {
                *node = json!(-x);
            } else {
                *node = interesting_json(rng);
            }
        }
        2 => match node {
            Value::Object(m) => {
                m.insert(rng.pick(&NAMES).to_string(), interesting_json(rng));
            }
            Value::Array(a) => {
                if a.is_empty() || rng.percent(50) {
                    a.push(interesting_json(rng));
                } else {
                    let i = rng.index(a.len());
                    let dup = a[i].clone();
                    a.insert(i, dup);
                }
            }
            other => *other = interesting_json(rng),
        },
        3 => {
            if let Value::Array(a) = node {
                if rng.percent(50) {
                    a.pop();
                } else {
                    a.clear();
                }
            } else if let Value::Object(m) = node {
                m.clear();
            } else {
                *node = interesting_json(rng);
            }
        }
        4 => {
            // A wrapped value: the same content one level deeper.
            let inner = node.take();
            *node = if rng.percent(50) {
                json!([inner])
            } else {
                json!({"v": inner})
            };
        }
        5 => {
            if let Value::String(s) = node {
                match rng.index(3) {
                    0 => s.push('x'),
                    1 => {
                        s.pop();
                    }
                    _ => *s = s.to_uppercase(),
                }
            } else {
                *node = interesting_json(rng);
            }
        }
        _ => *node = interesting_json(rng),
    }
}

/// Textual edits of JSON bytes: numbers replaced, keys duplicated, bytes cut.
fn mutate_json_text(text: &mut Vec<u8>, rng: &mut Rng) {
    if text.is_empty() {
        text.extend_from_slice(b"{}");
        return;
    }
    match rng.index(7) {
        0 => {
            // Replace a run of digits with an interesting number.
            let starts: Vec<usize> = (0..text.len())
                .filter(|&i| text[i].is_ascii_digit() && (i == 0 || !text[i - 1].is_ascii_digit()))
                .collect();
            if let Some(&s) = starts.get(rng.index(starts.len().max(1))) {
                let e = (s..text.len())
                    .find(|&i| !text[i].is_ascii_digit())
                    .unwrap_or(text.len());
                let with: String = match rng.index(4) {
                    0 => "18446744073709551616".into(),
                    1 => "99999999999999999999999999999999999999".into(),
                    2 => "1e400".into(),
                    _ => rng.pick(&INTERESTING_U64).to_string(),
                };
                text.splice(s..e, with.bytes());
            }
        }
        1 => {
            // Duplicate a key: insert a copy of the first member after `{`.
            let opens: Vec<usize> = (0..text.len()).filter(|&i| text[i] == b'{').collect();
            if let Some(&o) = opens.get(rng.index(opens.len().max(1))) {
                let key = format!("\"{}\":{},", rng.pick(&NAMES), interesting_json(rng));
                text.splice(o + 1..o + 1, key.bytes());
            }
        }
        2 => {
            let i = rng.index(text.len());
            text.remove(i);
        }
        3 => {
            let i = rng.index(text.len() + 1);
            let b = *rng.pick(b"{}[]\",:0-.e\\\x00\xff");
            text.insert(i, b);
        }
        4 => {
            // Deep nesting in place of a value.
            let depth = *rng.pick(&[64usize, 127, 128, 129, 1000, 100_000]);
            let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            let colons: Vec<usize> = (0..text.len()).filter(|&i| text[i] == b':').collect();
            if let Some(&c) = colons.get(rng.index(colons.len().max(1))) {
                text.splice(c + 1..c + 1, format!("{deep},\"zz\":").bytes());
            }
        }
        5 => {
            let n = rng.index(text.len());
            text.truncate(n);
        }
        _ => {
            for _ in 0..1 + rng.index(4) {
                let i = rng.index(text.len());
                text[i] ^= 1 << rng.index(8);
            }
        }
    }
}

/// Any JSON value: a tree edit (re-serialized) or a textual edit.
fn mutate_json_bytes(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    if rng.percent(65) {
        if let Ok(mut v) = serde_json::from_slice::<Value>(bytes) {
            for _ in 0..1 + rng.index(2) {
                mutate_tree(&mut v, rng);
            }
            return serde_json::to_vec(&v).unwrap();
        }
    }
    let mut text = bytes.to_vec();
    mutate_json_text(&mut text, rng);
    text
}

// ---------------------------------------------------------------------------
// Frame value mutation
// ---------------------------------------------------------------------------

/// The header bytes and the payload of a well-formed value.
fn split(value: &[u8]) -> Option<(&[u8], &[u8])> {
    if value.len() < 8 {
        return None;
    }
    let len = u32::from_le_bytes(value[4..8].try_into().ok()?) as usize;
    let end = 8usize.checked_add(len)?;
    let start = end.next_multiple_of(8);
    if start > value.len() {
        return None;
    }
    Some((&value[8..end], &value[start..]))
}

/// Every column object of a parsed header, as (block, column) names.
fn columns_of(header: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(blocks) = header.get("blocks").and_then(Value::as_object) {
        for (b, block) in blocks {
            if let Some(cols) = block.get("columns").and_then(Value::as_object) {
                for c in cols.keys() {
                    out.push((b.clone(), c.clone()));
                }
            }
        }
    }
    out
}

fn column_mut<'a>(header: &'a mut Value, b: &str, c: &str) -> Option<&'a mut Value> {
    header
        .get_mut("blocks")?
        .get_mut(b)?
        .get_mut("columns")?
        .get_mut(c)
}

fn interesting_shape(rng: &mut Rng, shape: &[u64]) -> Value {
    let count = shape.first().copied().unwrap_or(0);
    match rng.index(14) {
        0 => json!([]),
        1 => json!([0]),
        2 => json!([count.wrapping_add(1)]),
        3 => json!([count.wrapping_sub(1)]),
        4 => json!([1u64 << 40]),
        5 => json!([u64::MAX]),
        6 => json!([1u64 << 32, 1u64 << 32]),
        7 => json!([1u64 << 61]),
        8 => {
            let mut s = shape.to_vec();
            s.push(*rng.pick(&[0u64, 1, 2, 3, 1 << 40]));
            json!(s)
        }
        9 => {
            let mut s = shape.to_vec();
            s.reverse();
            json!(s)
        }
        10 => json!([count, 0]),
        11 => json!([-1]),
        12 => json!([count as f64 + 0.5]),
        _ => json!([count, 1u64 << 62, 4]),
    }
}

/// Edits of the header as JSON (the payload is kept as it was).
fn mutate_header(header: &mut Value, rng: &mut Rng) {
    let columns = columns_of(header);
    let target = (!columns.is_empty()).then(|| rng.pick(&columns).clone());
    match rng.index(12) {
        0 | 1 => {
            // Dtype swap.
            if let Some((b, c)) = &target {
                if let Some(col) = column_mut(header, b, c) {
                    *at(col, "dtype") = json!(rng.pick(&DTYPE_NAMES));
                    return;
                }
            }
            mutate_tree(header, rng);
        }
        2 | 3 => {
            // Shape swap.
            if let Some((b, c)) = &target {
                if let Some(col) = column_mut(header, b, c) {
                    let shape: Vec<u64> = col["shape"]
                        .as_array()
                        .map(|a| a.iter().filter_map(Value::as_u64).collect())
                        .unwrap_or_default();
                    *at(col, "shape") = interesting_shape(rng, &shape);
                    return;
                }
            }
            mutate_tree(header, rng);
        }
        4 => {
            // Offset / validity edits.
            if let Some((b, c)) = &target {
                if let Some(col) = column_mut(header, b, c) {
                    let key = if rng.percent(70) {
                        "offset"
                    } else {
                        "validity"
                    };
                    let old = col.get(key).and_then(Value::as_u64).unwrap_or(0);
                    let new = match rng.index(6) {
                        0 => json!(old.wrapping_add(8)),
                        1 => json!(old.wrapping_sub(8)),
                        2 => json!(old.wrapping_add(1)),
                        3 => json!(-8),
                        _ => json!(*rng.pick(&INTERESTING_U64) & !7),
                    };
                    *at(col, key) = new;
                    return;
                }
            }
            mutate_tree(header, rng);
        }
        5 => {
            // Count edits.
            if let Some(blocks) = header.get_mut("blocks").and_then(Value::as_object_mut) {
                let names: Vec<String> = blocks.keys().cloned().collect();
                if !names.is_empty() {
                    let name = rng.pick(&names).clone();
                    let Some(block) = blocks.get_mut(&name) else {
                        return;
                    };
                    let old = block["count"].as_u64().unwrap_or(0);
                    *at(block, "count") = match rng.index(5) {
                        0 => json!(old.wrapping_add(1)),
                        1 => json!(old.wrapping_sub(1)),
                        2 => json!(0),
                        3 => json!(null),
                        _ => json!(*rng.pick(&INTERESTING_U64)),
                    };
                    return;
                }
            }
            mutate_tree(header, rng);
        }
        6 => {
            // String values shorter, longer, of another type.
            let strings: Vec<(String, String)> = columns
                .iter()
                .filter(|(b, c)| header["blocks"][b]["columns"][c].get("values").is_some())
                .cloned()
                .collect();
            if let Some((b, c)) = strings.get(rng.index(strings.len().max(1))) {
                let Some(values) = column_mut(header, b, c)
                    .and_then(|col| col.get_mut("values"))
                    .and_then(Value::as_array_mut)
                else {
                    return;
                };
                match rng.index(4) {
                    0 => {
                        values.pop();
                    }
                    1 => values.push(json!("Z")),
                    2 => {
                        if !values.is_empty() {
                            values[0] = interesting_json(rng);
                        }
                    }
                    _ => values.clear(),
                }
                return;
            }
            mutate_tree(header, rng);
        }
        7 => {
            // Validity and precision keys.
            if let Some((b, c)) = &target {
                if let Some(col) = column_mut(header, b, c) {
                    match rng.index(4) {
                        0 => *at(col, "validity") = json!(0),
                        1 => {
                            if let Some(m) = col.as_object_mut() {
                                m.remove("validity");
                            }
                        }
                        2 => *at(col, "precision") = interesting_json(rng),
                        _ => *at(col, "values") = json!(["a"]),
                    }
                    return;
                }
            }
            mutate_tree(header, rng);
        }
        8 => {
            // Step, time, box, meta_types, structural_shape, targets.
            match rng.index(6) {
                0 => *at(header, "step") = interesting_json(rng),
                1 => *at(header, "time") = interesting_json(rng),
                2 => {
                    *at(header, "box") = json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1]],
                        "boundary": [rng.percent(50), true, false], "cell_defined": rng.percent(50)})
                }
                3 => {
                    *at(header, "meta_types") =
                        json!({rng.pick(&NAMES).to_string(): rng.pick(&TAG_NAMES)})
                }
                4 => {
                    if let Some((b, _)) = &target {
                        *at(at(at(header, "blocks"), b), "structural_shape") = interesting_shape(
                            rng,
                            &[header["blocks"][b]["count"].as_u64().unwrap_or(0)],
                        );
                    }
                }
                _ => {
                    if let Some((b, c)) = &target {
                        let t = *rng.pick(&[
                            "atoms",
                            "/system/atoms",
                            "/trajectory/atoms",
                            "nope",
                            "",
                            "bonds",
                        ]);
                        *at(at(at(header, "blocks"), b), "targets") = json!({c.clone(): t});
                    }
                }
            }
        }
        _ => {
            for _ in 0..1 + rng.index(3) {
                mutate_tree(header, rng);
            }
        }
    }
}

/// Writes interesting u64 values into the payload at 8-byte positions.
fn mutate_payload(payload: &mut [u8], rng: &mut Rng) {
    if payload.len() < 8 {
        return;
    }
    for _ in 0..1 + rng.index(3) {
        let at = rng.index(payload.len() / 8) * 8;
        let v: u64 = match rng.index(4) {
            0 => f64::NAN.to_bits(),
            1 => (-0.0f64).to_bits(),
            2 => 2,
            _ => *rng.pick(&INTERESTING_U64),
        };
        payload[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }
}

fn map_data(data: &mut ColumnData, rng: &mut Rng) {
    macro_rules! set_one {
        ($v:expr, $x:expr) => {
            if !$v.is_empty() {
                let i = rng.index($v.len());
                $v[i] = $x;
            }
        };
    }
    match data {
        ColumnData::F64(v) => set_one!(
            v,
            *rng.pick(&[f64::NAN, f64::INFINITY, -0.0, 1e308, -1e-310])
        ),
        ColumnData::U64(v) => set_one!(v, *rng.pick(&INTERESTING_U64)),
        ColumnData::I64(v) => set_one!(v, *rng.pick(&[i64::MIN, -1, i64::MAX])),
        ColumnData::Bool(v) => set_one!(v, rng.percent(50)),
        ColumnData::String(v) => set_one!(v, rng.pick(&NAMES).to_string()),
        ColumnData::U8(v) => set_one!(v, 255),
        ColumnData::I32(v) => set_one!(v, i32::MIN),
        _ => {}
    }
}

/// Keeps the first `keep` of `rows` rows (or repeats the last one to grow).
fn resize_rows(col: &mut Column, rows: u64, new_rows: u64) {
    let width = if rows == 0 {
        0
    } else {
        col.data.len() / rows as usize
    };
    let n = (new_rows as usize).saturating_mul(width);
    macro_rules! fit {
        ($v:expr) => {{
            if n <= $v.len() {
                $v.truncate(n);
            } else if let Some(last) = $v.last().cloned() {
                $v.resize(n, last);
            }
        }};
    }
    match &mut col.data {
        ColumnData::F64(v) => fit!(v),
        ColumnData::I8(v) => fit!(v),
        ColumnData::I16(v) => fit!(v),
        ColumnData::I32(v) => fit!(v),
        ColumnData::I64(v) => fit!(v),
        ColumnData::U8(v) => fit!(v),
        ColumnData::U16(v) => fit!(v),
        ColumnData::U32(v) => fit!(v),
        ColumnData::U64(v) => fit!(v),
        ColumnData::Bool(v) => fit!(v),
        ColumnData::String(v) => fit!(v),
        ColumnData::C64(v) => fit!(v),
        ColumnData::C128(v) => fit!(v),
    }
    if let Some(first) = col.shape.first_mut() {
        *first = new_rows;
    }
    if let Some(mask) = &mut col.validity {
        mask.resize(new_rows as usize, false);
    }
}

/// Converts a column's values to another dtype (shape kept).
fn cast(col: &mut Column, to: DType) {
    let len = col.data.len();
    col.data = match to {
        DType::F64 => ColumnData::F64(vec![0.5; len]),
        DType::I64 => ColumnData::I64(vec![1; len]),
        DType::U64 => ColumnData::U64(vec![1; len]),
        DType::I32 => ColumnData::I32(vec![1; len]),
        DType::U8 => ColumnData::U8(vec![1; len]),
        DType::Bool => ColumnData::Bool(vec![true; len]),
        DType::String => ColumnData::String(vec!["C".into(); len]),
        DType::C128 => ColumnData::C128(vec![[1.0, -1.0]; len]),
        _ => ColumnData::C64(vec![[1.0, 0.5]; len]),
    };
}

/// Decodes, edits the model-level content, and encodes again: the result
/// passes the byte checks and reaches the model checks.
fn mutate_semantic(value: &[u8], with_precision: bool, rng: &mut Rng) -> Option<Vec<u8>> {
    let frame = decode(value).ok()?;
    let mut blocks: BTreeMap<String, Block> = frame.to_blocks().ok()?;
    let mut info: FrameInfo = frame.info.clone();
    let names: Vec<String> = blocks.keys().cloned().collect();
    for _ in 0..1 + rng.index(2) {
        let name = (!names.is_empty()).then(|| rng.pick(&names).clone());
        match rng.index(16) {
            0..=2 => {
                if let Some(block) = name.as_ref().and_then(|n| blocks.get_mut(n)) {
                    let cols: Vec<String> = block.columns.keys().cloned().collect();
                    if !cols.is_empty() {
                        let c = rng.pick(&cols).clone();
                        if let Some(col) = block.columns.get_mut(&c) {
                            map_data(&mut col.data, rng);
                        }
                    }
                }
            }
            3 => {
                // Rows removed or added in every column (count follows).
                if let Some(block) = name.as_ref().and_then(|n| blocks.get_mut(n)) {
                    let rows = block.count;
                    let new_rows = match rng.index(3) {
                        0 => rows.saturating_sub(1),
                        1 => rows.saturating_add(1),
                        _ => 0,
                    };
                    for col in block.columns.values_mut() {
                        resize_rows(col, rows, new_rows);
                    }
                    block.count = new_rows;
                    if let Some(s) = &mut block.structural_shape {
                        if rng.percent(50) {
                            *s = vec![new_rows];
                        }
                    }
                }
            }
            4 => {
                if let Some(n) = &name {
                    blocks.remove(n);
                }
            }
            5 => {
                if let Some(b) = name.as_ref().and_then(|n| blocks.get(n)).cloned() {
                    blocks.insert(rng.pick(&NAMES).to_string(), b);
                }
            }
            6 => {
                if let Some(block) = name.as_ref().and_then(|n| blocks.get_mut(n)) {
                    let cols: Vec<String> = block.columns.keys().cloned().collect();
                    if !cols.is_empty() {
                        let c = rng.pick(&cols).clone();
                        match rng.index(3) {
                            0 => {
                                block.columns.remove(&c);
                            }
                            1 => {
                                if let Some(col) = block.columns.get(&c).cloned() {
                                    block.columns.insert(rng.pick(&NAMES).to_string(), col);
                                }
                            }
                            _ => {
                                let to = *rng.pick(&[
                                    DType::F64,
                                    DType::I64,
                                    DType::U64,
                                    DType::I32,
                                    DType::U8,
                                    DType::Bool,
                                    DType::String,
                                    DType::C64,
                                    DType::C128,
                                ]);
                                if let Some(col) = block.columns.get_mut(&c) {
                                    cast(col, to);
                                }
                            }
                        }
                    }
                }
            }
            7 => {
                if let Some(block) = name.as_ref().and_then(|n| blocks.get_mut(n)) {
                    let count = block.count.min(1 << 20) as usize;
                    if let Some(col) = block.columns.values_mut().next() {
                        let mut mask: Vec<bool> = (0..count).map(|_| rng.percent(70)).collect();
                        if rng.percent(20) {
                            mask.push(false);
                        }
                        col.validity = Some(mask);
                    }
                }
            }
            8 => {
                if let Some(block) = name.as_ref().and_then(|n| blocks.get_mut(n)) {
                    if let Some(col) = block.columns.values_mut().next() {
                        col.precision =
                            Some(*rng.pick(&[1e-3, 0.0, -1.0, f64::NAN, 1e-310, 1e308, 0.75]));
                    }
                }
            }
            9 => {
                let prev = info.step.unwrap_or(0);
                info.step = match rng.index(5) {
                    0 => None,
                    1 => Some(prev.wrapping_sub(1)),
                    2 => Some(i64::MIN),
                    3 => Some(i64::MAX),
                    _ => Some(prev),
                };
            }
            10 => {
                info.time = match rng.index(3) {
                    0 => None,
                    1 => Some(f64::NAN),
                    _ => Some(info.time.unwrap_or(0.0) + 1.0),
                };
            }
            11 => {
                let key = rng
                    .pick(&["pe", "ke", "charge", "label", "n", "_meta_types"])
                    .to_string();
                if rng.percent(40) {
                    info.meta.remove(&key);
                } else {
                    info.meta.insert(key, interesting_json(rng));
                }
            }
            12 => {
                info.meta_types = match rng.index(3) {
                    0 => None,
                    1 => Some(BTreeMap::new()),
                    _ => {
                        let mut t = info.meta_types.clone().unwrap_or_default();
                        let key = info
                            .meta
                            .keys()
                            .next()
                            .cloned()
                            .unwrap_or_else(|| "k".into());
                        t.insert(key, *rng.pick(&MetaTag::ALL));
                        Some(t)
                    }
                };
            }
            13 => {
                let cell = match rng.index(4) {
                    0 => None,
                    1 => Some(Cell {
                        vectors: [f64::NAN; 9],
                        origin: [0.0; 3],
                        boundary: [true; 3],
                        defined: true,
                    }),
                    2 => Some(Cell {
                        vectors: Cell::IDENTITY,
                        origin: [0.0; 3],
                        boundary: [false, true, false],
                        defined: false,
                    }),
                    _ => Some(Cell {
                        vectors: [2.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 2.0],
                        origin: [1.0; 3],
                        boundary: [true, false, true],
                        defined: true,
                    }),
                };
                info.cell = cell.map(Box::new);
            }
            14 => {
                if let Some(block) = name.as_ref().and_then(|n| blocks.get_mut(n)) {
                    let cols: Vec<String> = block.columns.keys().cloned().collect();
                    if !cols.is_empty() {
                        let c = rng.pick(&cols).clone();
                        let t = *rng.pick(&["atoms", "/system/atoms", "/system/nope", "bonds", ""]);
                        block.targets.insert(c, t.to_string());
                    }
                }
            }
            _ => {
                if let Some(block) = name.as_ref().and_then(|n| blocks.get_mut(n)) {
                    block.structural_shape = match rng.index(3) {
                        0 => None,
                        1 => Some(vec![block.count]),
                        _ => Some(vec![2, block.count]),
                    };
                }
            }
        }
    }
    let mut out = Vec::new();
    encode(&blocks, &info, with_precision, &mut out);
    Some(out)
}

/// One mutation of a frame value.
fn mutate_frame(value: &[u8], rng: &mut Rng, donors: &[&[u8]]) -> Vec<u8> {
    let mut v = value.to_vec();
    match rng.index(16) {
        0 => {
            // Bit flips, half of the time in the first 64 bytes.
            for _ in 0..1 + rng.index(8) {
                if v.is_empty() {
                    break;
                }
                let span = if rng.percent(50) {
                    v.len().min(64)
                } else {
                    v.len()
                };
                let i = rng.index(span);
                v[i] ^= 1 << rng.index(8);
            }
        }
        1 => {
            for _ in 0..1 + rng.index(4) {
                if v.is_empty() {
                    break;
                }
                let i = rng.index(v.len());
                v[i] = *rng.pick(&[0u8, 1, 2, 0x7f, 0x80, 0xff, b'"', b'{', b'[', b'0']);
            }
        }
        2 => {
            let n = rng.index(v.len() + 1);
            v.truncate(n);
        }
        3 => {
            let n = 1 + rng.index(64);
            let byte = if rng.percent(50) { 0 } else { rng.next() as u8 };
            v.extend(std::iter::repeat_n(byte, n));
        }
        4 => {
            // Header length edits.
            if v.len() >= 8 {
                let old = u32::from_le_bytes(v[4..8].try_into().unwrap());
                let new = match rng.index(10) {
                    0 => 0,
                    1 => old.wrapping_add(1),
                    2 => old.wrapping_sub(1),
                    3 => old.wrapping_add(8),
                    4 => old.wrapping_sub(8),
                    5 => u32::MAX,
                    6 => molrec::frame_bytes::MAX_HEADER_LEN,
                    7 => molrec::frame_bytes::MAX_HEADER_LEN + 1,
                    8 => (v.len() as u32).wrapping_sub(8),
                    _ => rng.next() as u32,
                };
                v[4..8].copy_from_slice(&new.to_le_bytes());
            }
        }
        5..=9 => {
            // JSON edits of the header; the payload is kept.
            if let Some((h, p)) = split(value) {
                if let Ok(mut header) = serde_json::from_slice::<Value>(h) {
                    mutate_header(&mut header, rng);
                    return frame_value(&serde_json::to_vec(&header).unwrap(), p);
                }
            }
        }
        10 => {
            // Textual edits of the header (numbers, duplicate keys, cuts).
            if let Some((h, p)) = split(value) {
                let mut text = h.to_vec();
                mutate_json_text(&mut text, rng);
                return frame_value(&text, p);
            }
        }
        11 => {
            // Splice: this header with another value's payload, or the reverse.
            let donor = *rng.pick(donors);
            if let (Some((h, _)), Some((_, p))) = (split(value), split(donor)) {
                return if rng.percent(50) {
                    frame_value(h, p)
                } else {
                    frame_value(split(donor).unwrap().0, split(value).unwrap().1)
                };
            }
        }
        12 => {
            if let Some((h, p)) = split(value) {
                let mut payload = p.to_vec();
                mutate_payload(&mut payload, rng);
                return frame_value(h, &payload);
            }
        }
        13 | 14 => {
            if let Some(out) = mutate_semantic(value, rng.percent(50), rng) {
                return out;
            }
        }
        _ => {
            // Stacked mutations.
            let mut out = value.to_vec();
            for _ in 0..2 + rng.index(2) {
                out = mutate_frame(&out, rng, donors);
            }
            return out;
        }
    }
    v
}

// ---------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------

#[derive(Default)]
struct Tally {
    trials: u64,
    ok: u64,
    by_clause: BTreeMap<String, u64>,
    io: u64,
    lmdb: BTreeMap<String, u64>,
    panics: Vec<String>,
    invariants: Vec<String>,
    max_time: Duration,
    max_at: u64,
}

impl Tally {
    /// What every mutation run asserts: the mutator never panicked, enough
    /// trials ran (at scale 1), nothing panicked, every error was a refusal
    /// (no i/o or LMDB error) and no trial took too long.
    fn assert_clean(&self, mutator_panics: u64, min_trials: u64, summary: &str) {
        assert_eq!(
            mutator_panics, 0,
            "the test's own mutator panicked\n{summary}"
        );
        assert!(self.trials >= min_trials || scale() < 1.0, "{summary}");
        assert!(
            self.panics.is_empty(),
            "panics: {:#?}\n{summary}",
            self.panics
        );
        assert!(
            self.io == 0 && self.lmdb.is_empty(),
            "an i/o or LMDB error instead of a refusal: {:?}\n{summary}",
            self.lmdb
        );
        assert!(self.max_time < SLOW_LIMIT, "{summary}");
    }

    fn refused(&self) -> u64 {
        self.by_clause.values().sum()
    }
    fn count_error(&mut self, e: &Error) {
        match e {
            Error::Io(_) => self.io += 1,
            Error::Lmdb(m) => *self.lmdb.entry(m.clone()).or_default() += 1,
            e => match e.clause() {
                Some(c) => *self.by_clause.entry(c.id().to_string()).or_default() += 1,
                None => *self.lmdb.entry(format!("no clause: {e}")).or_default() += 1,
            },
        }
    }
    /// Runs trial `op` under the watchdog (see [`trial`]), counting it and
    /// keeping the slowest time.
    fn timed_trial<T>(&mut self, watchdog: &Watchdog, op: u64, f: impl FnOnce() -> T) -> Option<T> {
        watchdog.begin(op);
        let start = Instant::now();
        let outcome = trial(f);
        let elapsed = start.elapsed();
        watchdog.end();
        self.trials += 1;
        if elapsed > self.max_time {
            self.max_time = elapsed;
            self.max_at = op;
        }
        outcome
    }
    fn clauses(&self) -> String {
        self.by_clause
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// Decodes one value and copies every column out, checking the view
/// invariants; `Err(Some(e))` a refusal, `Err(None)` an invariant broken.
fn check_value(value: &[u8]) -> Result<(), Result<Error, String>> {
    let frame = decode(value).map_err(Ok)?;
    for (bname, block) in &frame.blocks {
        for (cname, col) in &block.columns {
            let elements = col
                .shape
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .unwrap_or(u64::MAX);
            if col.shape.first() != Some(&block.count) {
                return Err(Err(format!(
                    "{bname}.{cname}: shape {:?} with count {}",
                    col.shape, block.count
                )));
            }
            if let ColumnBytes::Buffer(b) = col.data {
                let size = col.dtype.item_size().unwrap_or(0) as u64;
                if Some(b.len() as u64) != elements.checked_mul(size) {
                    return Err(Err(format!(
                        "{bname}.{cname}: buffer of {} bytes for {elements} x {size}",
                        b.len()
                    )));
                }
            }
            if let Some(view) = col.f64_view() {
                if col.dtype != DType::F64 || view.len() as u64 != elements {
                    return Err(Err(format!("{bname}.{cname}: f64 view of {}", view.len())));
                }
            }
            if let Some(view) = col.u64_view() {
                if col.dtype != DType::U64 || view.len() as u64 != elements {
                    return Err(Err(format!("{bname}.{cname}: u64 view of {}", view.len())));
                }
            }
            let owned = col.to_column().map_err(Ok)?;
            if owned.data.len() as u64 != elements || owned.dtype() != col.dtype {
                return Err(Err(format!(
                    "{bname}.{cname}: {} values of {} for {elements}",
                    owned.data.len(),
                    owned.dtype()
                )));
            }
            if owned
                .validity
                .as_ref()
                .is_some_and(|m| m.len() as u64 != block.count)
            {
                return Err(Err(format!("{bname}.{cname}: mask length")));
            }
        }
    }
    frame.to_blocks().map_err(Ok)?;
    Ok(())
}

#[test]
fn mutated_frame_values_never_panic() {
    install_panic_hook();
    let seed = seed();
    let values = frame_values();
    assert!(!values.is_empty());
    let target = (VALUES_AT_SCALE_1 * scale()).ceil() as u64;
    let per_value = target.div_ceil(values.len() as u64);
    let watchdog = Watchdog::start("values");
    let mut tally = Tally::default();
    let mut mutator_panics = 0u64;
    let start = Instant::now();
    for (vi, value) in values.iter().enumerate() {
        for m in 0..per_value {
            let op = vi as u64 * per_value + m;
            let mut rng = Rng::new(mix(seed, op));
            // A panic of the mutator itself is a bug of this test, counted apart.
            let Ok(mutated) =
                catch_unwind(AssertUnwindSafe(|| mutate_frame(value, &mut rng, &values)))
            else {
                mutator_panics += 1;
                continue;
            };
            let outcome = tally.timed_trial(&watchdog, op, || check_value(&mutated));
            match outcome {
                None => {
                    let path = save_failure(&format!("value-{seed}-{op}.bin"), &mutated);
                    let msg = panic_messages()
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .last()
                        .cloned()
                        .unwrap_or_default();
                    tally
                        .panics
                        .push(format!("op {op} (saved {}): {msg}", path.display()));
                }
                Some(Ok(())) => tally.ok += 1,
                Some(Err(Ok(e))) => tally.count_error(&e),
                Some(Err(Err(broken))) => {
                    let path = save_failure(&format!("value-invariant-{seed}-{op}.bin"), &mutated);
                    tally
                        .invariants
                        .push(format!("op {op} (saved {}): {broken}", path.display()));
                }
            }
        }
    }
    drop(watchdog);
    let total = start.elapsed();
    let summary = format!(
        "mutation values: seed={seed} scale={} base_values={} decoded={} ok={} refused={} \
         other(io={} lmdb={}) panics={} invariant_breaks={} mutator_panics={mutator_panics} max_op={:.1}ms (op {}) total={:.1}s \
         by_clause: {}",
        scale(),
        values.len(),
        tally.trials,
        tally.ok,
        tally.refused(),
        tally.io,
        tally.lmdb.values().sum::<u64>(),
        tally.panics.len(),
        tally.invariants.len(),
        tally.max_time.as_secs_f64() * 1e3,
        tally.max_at,
        total.as_secs_f64(),
        tally.clauses()
    );
    report(&summary);
    eprintln!("{summary}");
    write_summary("mutation values:", &summary);
    for p in tally.panics.iter().take(10) {
        report(&format!("  PANIC {p}"));
    }
    for p in tally.invariants.iter().take(10) {
        report(&format!("  INVARIANT {p}"));
    }
    tally.assert_clean(mutator_panics, 200_000, &summary);
    assert!(
        tally.invariants.is_empty(),
        "invariants broken: {:#?}\n{summary}",
        tally.invariants
    );
}

// ---------------------------------------------------------------------------
// File-level mutation
// ---------------------------------------------------------------------------

fn key_kind(key: &[u8]) -> &'static str {
    match key {
        b"meta" => "meta",
        b"index" => "index",
        b"ff" => "ff",
        [b'r', ..] if key.len() == 9 => "r",
        [b's', ..] if key.len() == 9 => "s",
        [b'f', ..] if key.len() == 9 => "f",
        _ => "other",
    }
}

fn numbered(prefix: u8, n: u64) -> Vec<u8> {
    let mut k = vec![prefix];
    k.extend_from_slice(&n.to_be_bytes());
    k
}

fn put(kvs: &mut Kvs, key: Vec<u8>, value: Vec<u8>) {
    match kvs.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => kvs.push((key, value)),
    }
}

fn get<'a>(kvs: &'a Kvs, key: &[u8]) -> Option<&'a Vec<u8>> {
    kvs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Semantic edits of `meta`.
fn mutate_meta(meta: &mut Value, rng: &mut Rng) {
    match rng.index(12) {
        0 => {
            let key = *rng.pick(&["n_records", "n_frames"]);
            let old = meta[key].as_u64().unwrap_or(0);
            *at(meta, key) = match rng.index(5) {
                0 => json!(old.wrapping_add(1)),
                1 => json!(old.wrapping_sub(1)),
                2 => json!(old as f64),
                3 => json!(old.to_string()),
                _ => interesting_json(rng),
            };
        }
        1 => {
            if rng.percent(50) {
                *at(meta, "layout") = interesting_json(rng);
            } else {
                *at(meta, "layout_version") = interesting_json(rng);
            }
        }
        2 => *at(at(meta, "collection"), "molrec_version") = interesting_json(rng),
        3 => {
            let q = *rng.pick(&[
                "length", "energy", "force", "time", "charge", "mass", "weird",
            ]);
            if rng.percent(20) {
                if let Some(c) = meta.get_mut("collection").and_then(Value::as_object_mut) {
                    c.remove("units");
                }
            } else {
                *at(at(at(meta, "collection"), "units"), q) = json!(rng.pick(&UNITS));
            }
        }
        4..=7 => {
            // The declaration: dtype, trailing, nullable, precision, shapes, alignment.
            let schema = at(meta, "sequence_schema");
            let blocks: Vec<String> = schema["blocks"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            if blocks.is_empty() {
                let name: &str = NAMES[rng.index(NAMES.len())];
                *at(at(schema, "blocks"), name) = json!({"columns": {"x": {"dtype": "f64"}}});
                return;
            }
            let b = rng.pick(&blocks).clone();
            let decl = at(at(schema, "blocks"), &b);
            let cols: Vec<String> = decl["columns"]
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            match rng.index(8) {
                0 if !cols.is_empty() => {
                    *at(at(at(decl, "columns"), rng.pick(&cols).as_str()), "dtype") =
                        json!(rng.pick(&DTYPE_NAMES))
                }
                1 if !cols.is_empty() => {
                    *at(
                        at(at(decl, "columns"), rng.pick(&cols).as_str()),
                        "trailing",
                    ) = json!(*rng.pick(&[
                        json!([]),
                        json!([3]),
                        json!([1u64 << 40]),
                        json!([-1]),
                        json!([3, 3])
                    ]))
                }
                2 if !cols.is_empty() => {
                    *at(
                        at(at(decl, "columns"), rng.pick(&cols).as_str()),
                        "nullable",
                    ) = json!(rng.percent(50))
                }
                3 if !cols.is_empty() => {
                    *at(
                        at(at(decl, "columns"), rng.pick(&cols).as_str()),
                        "precision",
                    ) = interesting_json(rng)
                }
                4 => *at(decl, "structural_shape") = interesting_shape(rng, &[3]),
                5 => *at(decl, "aligned_with") = json!(rng.pick(&blocks)),
                6 => {
                    if let Some(m) = schema.get_mut("blocks").and_then(Value::as_object_mut) {
                        m.remove(&b);
                    }
                }
                _ => {
                    *at(decl, "targets") =
                        json!({"atomi": rng.pick(&["atoms", "/system/atoms", "nope"])})
                }
            }
        }
        8 => {
            let smeta = at(at(meta, "sequence_schema"), "meta");
            let keys: Vec<String> = smeta
                .as_object()
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default();
            let key = if keys.is_empty() || rng.percent(30) {
                rng.pick(&["pe", "label", "n", "ke"]).to_string()
            } else {
                rng.pick(&keys).clone()
            };
            match rng.index(3) {
                0 => *at(at(smeta, &key), "dtype") = json!(rng.pick(&TAG_NAMES)),
                1 => *at(at(smeta, &key), "fill") = interesting_json(rng),
                _ => {
                    if let Some(m) = smeta.as_object_mut() {
                        m.remove(&key);
                    }
                }
            }
        }
        _ => {
            for _ in 0..1 + rng.index(2) {
                mutate_tree(meta, rng);
            }
        }
    }
}

/// Edits of the index that keep it decodable; half of them also keep the
/// prefix sums and `meta` consistent, so the reader goes on to the records.
fn mutate_index(kvs: &mut Kvs, rng: &mut Rng) -> Option<String> {
    let value = get(kvs, b"index")?.clone();
    let frame = decode(&value).ok()?;
    let mut blocks = frame.to_blocks().ok()?;
    let info = frame.info.clone();
    let block = blocks.get_mut("records")?;
    if block.count > 1 << 20 {
        return None;
    }
    let rows = block.count as usize;
    let what;
    match rng.index(7) {
        0 | 1 if rows > 0 => {
            // n_frames / has_trajectory changed, prefix sums recomputed, meta updated.
            let r = rng.index(rows);
            if let Some(Column {
                data: ColumnData::U64(n),
                ..
            }) = block.columns.get_mut("n_frames")
            {
                n[r] = match rng.index(4) {
                    0 => n[r].wrapping_add(1),
                    1 => n[r].saturating_sub(1),
                    2 => 0,
                    _ => 1 << 40,
                };
            }
            if rng.percent(30) {
                if let Some(Column {
                    data: ColumnData::Bool(t),
                    ..
                }) = block.columns.get_mut("has_trajectory")
                {
                    t[r] = !t[r];
                }
            }
            let counts = match &block.columns.get("n_frames")?.data {
                ColumnData::U64(n) => n.clone(),
                _ => return None,
            };
            let mut sum = 0u64;
            let first: Vec<u64> = counts
                .iter()
                .map(|&n| {
                    let f = sum;
                    sum = sum.saturating_add(n);
                    f
                })
                .collect();
            if let Some(c) = block.columns.get_mut("first_frame") {
                c.data = ColumnData::U64(first);
            }
            if let Some(meta) =
                get(kvs, b"meta").and_then(|m| serde_json::from_slice::<Value>(m).ok())
            {
                let mut meta = meta;
                *at(&mut meta, "n_frames") = json!(sum);
                put(kvs, b"meta".to_vec(), serde_json::to_vec(&meta).unwrap());
            }
            what = format!("index consistent edit of record {r}");
        }
        2 if rows > 0 => {
            let name = *rng.pick(&["first_frame", "n_frames", "n_atoms"]);
            let r = rng.index(rows);
            if let Some(Column {
                data: ColumnData::U64(v),
                ..
            }) = block.columns.get_mut(name)
            {
                v[r] = *rng.pick(&INTERESTING_U64);
            }
            what = format!("index {name}[{r}] set");
        }
        3 => {
            // A binding column at another dtype or shape.
            let name = *rng.pick(&["first_frame", "n_frames", "n_atoms", "has_trajectory"]);
            if let Some(col) = block.columns.get_mut(name) {
                match rng.index(3) {
                    0 => cast(
                        col,
                        *rng.pick(&[DType::I64, DType::U32, DType::F64, DType::Bool, DType::U64]),
                    ),
                    1 => col.shape = vec![rows as u64, 1],
                    _ => col.validity = Some((0..rows).map(|i| i % 2 == 0).collect()),
                }
            }
            what = format!("index {name} retyped");
        }
        4 => {
            let name = *rng.pick(&["first_frame", "n_frames", "n_atoms", "has_trajectory"]);
            block.columns.remove(name);
            what = format!("index {name} removed");
        }
        5 => {
            // An own column: reserved name, wrong length, any dtype.
            let mut col = Column::new(vec![rows as u64], ColumnData::U64(vec![7; rows]));
            if rng.percent(30) {
                resize_rows(&mut col, rows as u64, rows as u64 + 1);
            }
            if rng.percent(30) {
                cast(&mut col, DType::String);
            }
            block.columns.insert(
                rng.pick(&["code", "energy", "id", "_validity", "x"])
                    .to_string(),
                col,
            );
            what = "index own column added".into();
        }
        _ => {
            let old = block.count;
            let new = if rng.percent(50) {
                old.saturating_add(1)
            } else {
                old.saturating_sub(1)
            };
            for col in block.columns.values_mut() {
                resize_rows(col, old, new);
            }
            block.count = new;
            if rng.percent(50) {
                if let Some(meta) =
                    get(kvs, b"meta").and_then(|m| serde_json::from_slice::<Value>(m).ok())
                {
                    let mut meta = meta;
                    *at(&mut meta, "n_records") = json!(new);
                    put(kvs, b"meta".to_vec(), serde_json::to_vec(&meta).unwrap());
                }
            }
            what = format!("index rows {old} -> {new}");
        }
    }
    let mut out = Vec::new();
    encode(&blocks, &info, true, &mut out);
    put(kvs, b"index".to_vec(), out);
    Some(what)
}

/// One mutation at the level of keys and values; returns what it did.
fn mutate_file(kvs: &mut Kvs, rng: &mut Rng, donors: &[&[u8]]) -> String {
    if kvs.is_empty() {
        kvs.push((b"meta".to_vec(), b"{}".to_vec()));
        return "meta added to an empty file".into();
    }
    let i = rng.index(kvs.len());
    let key = kvs[i].0.clone();
    let kind = key_kind(&key);
    match rng.index(24) {
        0..=4 => {
            let frames: Vec<usize> = (0..kvs.len()).filter(|&j| is_frame(&kvs[j].1)).collect();
            if frames.is_empty() {
                return "no frame".into();
            }
            let j = *rng.pick(&frames);
            let k = key_kind(&kvs[j].0);
            kvs[j].1 = mutate_frame(&kvs[j].1.clone(), rng, donors);
            format!("frame value {k} mutated")
        }
        5..=8 => {
            let Some(meta) = get(kvs, b"meta").cloned() else {
                return "no meta".into();
            };
            let new = match serde_json::from_slice::<Value>(&meta) {
                Ok(mut m) if rng.percent(75) => {
                    mutate_meta(&mut m, rng);
                    serde_json::to_vec(&m).unwrap()
                }
                _ => mutate_json_bytes(&meta, rng),
            };
            put(kvs, b"meta".to_vec(), new);
            "meta mutated".into()
        }
        9 | 10 => mutate_index(kvs, rng).unwrap_or_else(|| "index not decodable".into()),
        11 => {
            // A record meta document: mutated, or a new one of any JSON.
            let r = rng.index(4) as u64;
            let key = numbered(b'r', r);
            let new = match get(kvs, &key) {
                Some(v) => mutate_json_bytes(v, rng),
                None => serde_json::to_vec(&interesting_json(rng)).unwrap(),
            };
            put(kvs, key, new);
            format!("record meta r{r} mutated")
        }
        12 => {
            kvs.remove(i);
            format!("key {kind} deleted")
        }
        13 => {
            // A value copied under another key.
            let j = rng.index(kvs.len());
            let v = kvs[j].1.clone();
            kvs[i].1 = v;
            format!("value of {} copied onto {kind}", key_kind(&kvs[j].0))
        }
        14 => {
            // Rename: another ordinal or another prefix.
            let mut k = key.clone();
            if k.len() == 9 && rng.percent(60) {
                let n = u64::from_be_bytes(k[1..9].try_into().unwrap());
                let m = match rng.index(4) {
                    0 => n.wrapping_add(1),
                    1 => n.wrapping_sub(1),
                    2 => u64::MAX,
                    _ => n.wrapping_add(1000),
                };
                k[1..].copy_from_slice(&m.to_be_bytes());
            } else {
                k[0] = *rng.pick(b"frsmix");
            }
            let v = kvs.remove(i).1;
            put(kvs, k, v);
            format!("key {kind} renamed")
        }
        15 => {
            let j = rng.index(kvs.len());
            let v = kvs[i].1.clone();
            kvs[i].1 = kvs[j].1.clone();
            kvs[j].1 = v;
            "values swapped".into()
        }
        16 => {
            // Junk keys the reader must ignore or refuse.
            let junk: Vec<u8> = match rng.index(6) {
                0 => numbered(b'f', rng.next()),
                1 => numbered(b's', rng.index(8) as u64),
                2 => b"f\x00\x00\x00".to_vec(),
                3 => {
                    let mut k = numbered(b'f', 0);
                    k.push(0);
                    k
                }
                4 => b"ff\x00".to_vec(),
                _ => (0..1 + rng.index(20)).map(|_| rng.next() as u8).collect(),
            };
            let value = if rng.percent(50) {
                kvs[i].1.clone()
            } else {
                b"junk".to_vec()
            };
            put(kvs, junk, value);
            "junk key added".into()
        }
        17 => {
            kvs[i].1.clear();
            format!("value of {kind} emptied")
        }
        18 => {
            let k = *rng.pick(&[&b"meta"[..], b"index", b"ff"]);
            kvs.retain(|(key, _)| key != k);
            format!("{} removed", String::from_utf8_lossy(k))
        }
        19 => {
            // A frame value replaced by a semantic edit of itself.
            let frames: Vec<usize> = (0..kvs.len()).filter(|&j| is_frame(&kvs[j].1)).collect();
            if frames.is_empty() {
                return "no frame".into();
            }
            let j = *rng.pick(&frames);
            let k = key_kind(&kvs[j].0);
            let with_precision = matches!(k, "s" | "index");
            match mutate_semantic(&kvs[j].1.clone(), with_precision, rng) {
                Some(v) => {
                    kvs[j].1 = v;
                    format!("frame {k} semantic edit")
                }
                None => "frame not decodable".into(),
            }
        }
        20 => {
            // A frame of one record moved to another ordinal (a hole and a duplicate).
            let frames: Vec<usize> = (0..kvs.len())
                .filter(|&j| key_kind(&kvs[j].0) == "f")
                .collect();
            if frames.len() < 2 {
                return "few frames".into();
            }
            let a = *rng.pick(&frames);
            let b = *rng.pick(&frames);
            let v = kvs[a].1.clone();
            kvs[b].1 = v;
            "frame duplicated onto another ordinal".into()
        }
        21 => {
            // A key LMDB itself refuses (longer than its 511-byte limit).
            if rng.percent(10) {
                put(kvs, vec![b'f'; 600], b"x".to_vec());
                "oversized key".into()
            } else {
                let v = kvs[i].1.clone();
                put(kvs, numbered(b'f', rng.index(64) as u64), v);
                "value copied to a frame key".into()
            }
        }
        _ => {
            let v = mutate_json_bytes(&kvs[i].1.clone(), rng);
            kvs[i].1 = v;
            format!("value of {kind} edited as JSON text")
        }
    }
}

/// Writes `kvs` to a new file through heed; `Err` when LMDB refuses a put.
fn build_file(path: &Path, kvs: &Kvs) -> Result<(), String> {
    let bytes: u64 = kvs.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum();
    let mut options = EnvOpenOptions::new();
    options.map_size(crate_map_size(bytes));
    // SAFETY: valid flags for a new private file.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC) };
    // SAFETY: a new path, opened once in this process.
    let env = unsafe { options.open(path) }.map_err(|e| e.to_string())?;
    let result = (|| {
        let mut txn = env.write_txn()?;
        let db: Db = env.create_database(&mut txn, None)?;
        for (k, v) in kvs {
            db.put(&mut txn, k, v)?;
        }
        txn.commit()
    })();
    env.prepare_for_closing().wait();
    result.map_err(|e| e.to_string())
}

/// How `RecordTxn::record` (column-wise resolution, the rules checked as
/// it reads) and `record_reference` (the model, then `prepare_record`)
/// disagree on record r, if they do: they must return the same record or
/// refuse with the same clause at the same place.
fn paths_disagree(txn: &molrec::lmdb::RecordTxn<'_>, r: u64) -> Option<String> {
    let (fast, model) = (txn.record(r), txn.record_reference(r));
    let place = |e: &Error| match e {
        Error::Refused { clause, at, .. } => format!("[{}] at {at}", clause.id()),
        other => format!("{other}"),
    };
    match (&fast, &model) {
        // Debug text, not `==`: a NaN is not equal to itself (and `-0.0`
        // is equal to `0.0`), their texts tell them apart.
        (Ok(a), Ok(b)) if format!("{a:?}") == format!("{b:?}") => None,
        (Err(a), Err(b)) if place(a) == place(b) => None,
        (Ok(a), Ok(b)) => Some(format!(
            "records[{r}]: both read, the records differ: {}",
            first_difference(a, b)
        )),
        _ => Some(format!(
            "records[{r}]: record -> {}, record_reference -> {}",
            fast.as_ref().map_or_else(place, |_| "read".into()),
            model.as_ref().map_or_else(place, |_| "read".into())
        )),
    }
}

/// Where two records differ first (for the message).
fn first_difference(a: &molrec::model::Record, b: &molrec::model::Record) -> String {
    fn differ<T: std::fmt::Debug>(a: &T, b: &T) -> bool {
        format!("{a:?}") != format!("{b:?}")
    }
    if differ(&a.meta, &b.meta) {
        return "meta".into();
    }
    if differ(&a.system, &b.system) {
        return "system".into();
    }
    let (Some(ta), Some(tb)) = (&a.trajectory, &b.trajectory) else {
        return "trajectory present in one only".into();
    };
    if ta.frames.len() != tb.frames.len() {
        return format!("{} frames vs {}", ta.frames.len(), tb.frames.len());
    }
    for (k, (fa, fb)) in ta.frames.iter().zip(&tb.frames).enumerate() {
        if !differ(fa, fb) {
            continue;
        }
        if differ(&fa.blocks, &fb.blocks) {
            for (name, ba) in &fa.blocks {
                match fb.blocks.get(name) {
                    Some(bb) if !differ(bb, ba) => {}
                    Some(bb) => return format!("frames[{k}].blocks.{name}: {ba:?} vs {bb:?}"),
                    None => return format!("frames[{k}].blocks.{name} in one only"),
                }
            }
            return format!("frames[{k}].blocks: names differ");
        }
        return format!("frames[{k}]: {fa:?} vs {fb:?}");
    }
    "schema".into()
}

/// Opens and reads a file end to end, views included; the disagreements of
/// the two record paths are pushed to `disagree`.
fn read_everything(
    path: &Path,
    disagree: &mut Vec<String>,
) -> Result<molrec::model::Collection, Error> {
    let reader = Reader::open(path)?;
    let collection = reader.read_collection();
    if let Ok(txn) = reader.txn() {
        disagree.extend((0..reader.n_records().min(64)).filter_map(|r| paths_disagree(&txn, r)));
    }
    // The view path too, whatever the owned read said.
    if let Ok(txn) = reader.txn() {
        for r in 0..reader.n_records().min(64) {
            let _ = txn.for_each_frame(r, |view| {
                for block in view.blocks.values() {
                    for col in block.columns.values() {
                        let _ = col.f64_view();
                        let _ = col.u64_view();
                    }
                }
                Ok(())
            });
            let _ = txn.system(r);
            let _ = txn.record_meta(r);
        }
        let _ = txn.index_columns();
        let _ = txn.forcefield();
    }
    let _ = reader.atom_counts();
    collection
}

#[test]
fn mutated_files_never_panic() {
    install_panic_hook();
    let seed = seed() ^ 0xF11E;
    let bases = corpus();
    let donors = frame_values();
    let target = ((FILES_AT_SCALE_1 * scale()).ceil() as u64).max(1);
    let dir = scratch_dir("mutation-files");
    let watchdog = Watchdog::start("files");
    let mut tally = Tally::default();
    let mut mutator_panics = 0u64;
    let mut uncommitted = 0u64;
    let mut lmdb_refused_puts: BTreeMap<String, u64> = BTreeMap::new();
    let mut roundtrip_failures: Vec<String> = Vec::new();
    let mut roundtrip_kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut disagreements: Vec<String> = Vec::new();
    let start = Instant::now();
    // MOLREC_MUTATION_OP=n replays one mutated file, verbosely.
    let only: Option<u64> = std::env::var("MOLREC_MUTATION_OP")
        .ok()
        .and_then(|s| s.parse().ok());
    let ops = match only {
        Some(op) => op..op + 1,
        None => 0..target,
    };
    for op in ops {
        let base = &bases[(op as usize) % bases.len()];
        let mut rng = Rng::new(mix(seed, op));
        let mut kvs = base.kvs.clone();
        let mut did = Vec::new();
        // A panic of the mutator itself is a bug of this test, counted apart.
        let mutated = catch_unwind(AssertUnwindSafe(|| {
            for _ in 0..1 + rng.index(3) {
                did.push(mutate_file(&mut kvs, &mut rng, &donors));
            }
        }));
        if mutated.is_err() {
            mutator_panics += 1;
            continue;
        }
        for d in &did {
            let kind = d.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
            *kinds.entry(kind).or_default() += 1;
        }
        if only.is_some() {
            report(&format!("op {op}: base {} mutations {did:?}", base.name));
            for (k, v) in &kvs {
                let text = String::from_utf8_lossy(&v[..v.len().min(600)]).into_owned();
                report(&format!("  {:?} => {text}", String::from_utf8_lossy(k)));
            }
        }
        let path = dir.join(format!("m{op}.mrec.lmdb"));
        if let Err(e) = build_file(&path, &kvs) {
            *lmdb_refused_puts.entry(e).or_default() += 1;
            remove_file_and_lock(&path);
            continue;
        }
        let mut disagree = Vec::new();
        let outcome = tally.timed_trial(&watchdog, op, || read_everything(&path, &mut disagree));
        disagreements.extend(
            disagree
                .into_iter()
                .map(|d| format!("op {op} base {} mutations {did:?}: {d}", base.name)),
        );
        match outcome {
            None => {
                let bytes = std::fs::read(&path).unwrap_or_default();
                let saved = save_failure(&format!("file-{seed}-{op}.mrec.lmdb"), &bytes);
                let msg = panic_messages()
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .last()
                    .cloned()
                    .unwrap_or_default();
                tally.panics.push(format!(
                    "op {op} base {} mutations {did:?} (saved {}): {msg}",
                    base.name,
                    saved.display()
                ));
            }
            Some(Ok(collection)) => {
                tally.ok += 1;
                // What a reader hands back, a writer accepts, and written again it
                // is stable (`dump | write | dump`). The first rewrite may normalize
                // what a reader hands back as stored: it stamps a missing
                // `molrec_version` and rounds values that lie off their declared
                // precision grid (readers never re-round).
                let again = dir.join(format!("m{op}-again.mrec.lmdb"));
                let twice = dir.join(format!("m{op}-twice.mrec.lmdb"));
                let records = collection.records.len();
                let check = trial(|| -> Result<(Value, Value), Error> {
                    write_collection(&again, collection, WriterOptions::default())?;
                    let second = Reader::open(&again)?.read_collection()?;
                    let second_json = collection_to_json(&second);
                    write_collection(&twice, second, WriterOptions::default())?;
                    let third = Reader::open(&twice)?.read_collection()?;
                    Ok((second_json, collection_to_json(&third)))
                });
                match check {
                    Some(Ok((second, third)))
                        if second == third
                            && second["records"].as_array().map(Vec::len) == Some(records) => {}
                    Some(Ok((second, third))) => {
                        *roundtrip_kinds
                            .entry(format!("not stable after a rewrite (first: op {op})"))
                            .or_default() += 1;
                        if only.is_some() {
                            report(&format!(
                                "after one rewrite:\n{second:#}\nafter two:\n{third:#}"
                            ));
                        }
                        roundtrip_failures.push(format!(
                            "op {op} base {} mutations {did:?}: not stable after a rewrite",
                            base.name
                        ))
                    }
                    Some(Err(e)) => {
                        let kind = match &e {
                            Error::Refused { clause, at, .. } => {
                                format!("writer refuses [{}] at {at}", clause.id())
                            }
                            other => format!("writer fails: {other}"),
                        };
                        *roundtrip_kinds.entry(kind).or_default() += 1;
                        let bytes = std::fs::read(&path).unwrap_or_default();
                        let saved =
                            save_failure(&format!("accepted-{seed}-{op}.mrec.lmdb"), &bytes);
                        roundtrip_failures.push(format!(
                            "op {op} base {} mutations {did:?} (saved {}): read, but the writer refuses it: {e}",
                            base.name,
                            saved.display()
                        ))
                    }
                    None => tally.panics.push(format!(
                        "op {op} base {} mutations {did:?}: the rewrite panicked",
                        base.name
                    )),
                }
                remove_file_and_lock(&again);
                remove_file_and_lock(&twice);
            }
            Some(Err(Error::Uncommitted)) => {
                uncommitted += 1;
                tally.count_error(&Error::Uncommitted);
            }
            Some(Err(e)) => tally.count_error(&e),
        }
        if only.is_some() {
            report(&format!(
                "op {op}: ok={} refused={:?} panics={:?}",
                tally.ok, tally.by_clause, tally.panics
            ));
        }
        remove_file_and_lock(&path);
    }
    drop(watchdog);
    let _ = std::fs::remove_dir_all(&dir);
    let total = start.elapsed();
    let summary = format!(
        "mutation files: seed={seed} scale={} bases={} mutated={target} built={} \
         lmdb_refused_puts={} read={} ok={} refused={} (uncommitted={uncommitted}) \
         other(io={} lmdb={:?}) panics={} reader_accepts_writer_refuses={} record_paths_disagree={} \
         mutator_panics={mutator_panics} max_op={:.1}ms \
         (op {}) total={:.1}s by_clause: {}",
        scale(),
        bases.len(),
        tally.trials,
        lmdb_refused_puts.values().sum::<u64>(),
        tally.trials,
        tally.ok,
        tally.refused(),
        tally.io,
        tally.lmdb,
        tally.panics.len(),
        roundtrip_failures.len(),
        disagreements.len(),
        tally.max_time.as_secs_f64() * 1e3,
        tally.max_at,
        total.as_secs_f64(),
        tally.clauses()
    );
    report(&summary);
    eprintln!("{summary}");
    write_summary("mutation files:", &summary);
    report(&format!("  mutation kinds: {kinds:?}"));
    for (e, n) in &lmdb_refused_puts {
        report(&format!("  lmdb refused a put ({n}x): {e}"));
    }
    for p in tally.panics.iter().take(10) {
        report(&format!("  PANIC {p}"));
    }
    for (kind, n) in &roundtrip_kinds {
        report(&format!("  ROUNDTRIP KIND {n}x: {kind}"));
    }
    for p in roundtrip_failures.iter().take(20) {
        report(&format!("  ROUNDTRIP {p}"));
    }
    for d in disagreements.iter().take(20) {
        report(&format!("  RECORD PATHS {d}"));
    }
    if only.is_some() {
        return;
    }
    assert!(
        disagreements.is_empty(),
        "record and record_reference disagree on {} files; first ones: {:#?}\n{summary}",
        disagreements.len(),
        disagreements.iter().take(5).collect::<Vec<_>>()
    );
    tally.assert_clean(mutator_panics, 2_000, &summary);
    assert!(
        roundtrip_failures.is_empty(),
        "the reader accepted files a writer refuses or reads differently: {roundtrip_kinds:#?}\n\
         first ones: {:#?}\n{summary}",
        roundtrip_failures.iter().take(5).collect::<Vec<_>>()
    );
}
