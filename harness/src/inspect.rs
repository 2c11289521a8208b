//! File-level inspection of a written `.mrec.lmdb` file, with the harness's
//! own code (never the reference's): the file, the key scheme, `meta`, the
//! `index`, frame keys and frame bytes (spec text 000, DIGEST §§1-4).
//!
//! The file's LMDB pages are checked first ([`pages`]: a damaged page could
//! crash LMDB, and with it the harness); a sound file is then opened
//! read-only through `heed` and read key by key. Every breach is reported
//! as a [`Finding`] naming its clause id.

mod content;
pub mod frame_bytes;
pub mod pages;
pub mod records;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, RoTxn};
use serde_json::{Map, Value};

use frame_bytes::{json_kind, FrameView};

/// One breach of a binding rule found in a file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Finding {
    /// The clause id (a key of `spec-map.toml`).
    pub clause: String,
    /// What is wrong and where (the key, spelled as in recipes).
    pub message: String,
}

impl Finding {
    /// A finding under `clause`.
    pub fn new(clause: &str, message: impl Into<String>) -> Finding {
        Finding {
            clause: clause.to_string(),
            message: message.into(),
        }
    }
}

/// Clause ids of the LMDB binding's file-level rules.
pub mod clause {
    /// One environment in one file (plus LMDB's `-lock` file).
    pub const FILE_SINGLE: &str = "lmdb.file.single";
    /// `meta` is present.
    pub const META_REQUIRED: &str = "lmdb.meta.required";
    /// `meta` is a JSON object of the documented form.
    pub const META_WELL_FORMED: &str = "lmdb.meta.well-formed";
    /// `layout == "mrec-lmdb"`.
    pub const META_LAYOUT: &str = "lmdb.meta.layout";
    /// `layout_version` is the JSON integer 1.
    pub const META_LAYOUT_VERSION: &str = "lmdb.meta.layout-version";
    /// `collection.molrec_version`, when present, is the integer 1.
    pub const MOLREC_VERSION: &str = "collection.meta.molrec-version";
    /// `collection.units` is present (an object).
    pub const UNITS_REQUIRED: &str = "collection.meta.units-required";
    /// The index block's count equals `n_records`.
    pub const INDEX_COUNT: &str = "lmdb.index.count";
    /// `first_frame` is the exclusive prefix sum of `n_frames`.
    pub const INDEX_PREFIX_SUM: &str = "lmdb.index.prefix-sum";
    /// The last `first_frame + n_frames` equals `meta.n_frames`.
    pub const INDEX_TOTAL: &str = "lmdb.index.total";
    /// The index has block `records` with the four binding columns.
    pub const INDEX_COLUMNS: &str = "lmdb.index.columns";
    /// Every ordinal `0..n_frames` has its frame key.
    pub const FRAME_MISSING: &str = "lmdb.frame.missing";
    /// A record's first frame holds every block present there.
    pub const FRAME_FIRST_RESTATES: &str = "lmdb.frame.first-restates";
    /// The cell is stated where it changes: at a record's first frame too.
    pub const BOX_ON_CHANGE: &str = "lmdb.frame.box-on-change";
    /// A writer stores the value it was handed under a null row.
    pub const NULL_ROW_VALUE: &str = "column.validity.null-value";
    /// An `r` value is a JSON object.
    pub const RECORD_META_JSON: &str = "lmdb.record.meta-json";
    /// Every key is one of the scheme's.
    pub const KEYS_SCHEME: &str = "lmdb.keys.scheme";
    /// Every trajectory update carries its step.
    pub const FRAME_STEP: &str = "lmdb.frame.step";
    /// The `ff` frame's meta is the plain force-field document.
    pub const FF_META: &str = "mrf1.ff-meta";
    /// `step` and `time` only on trajectory updates.
    pub const STEP_TIME_PLACEMENT: &str = "mrf1.step-time-placement";
    /// `n_atoms` is the rows of the record's `atoms` (lmdb.md, index).
    pub const INDEX_N_ATOMS: &str = "lmdb.index.n-atoms";
    /// A writer stores an undefined cell with identity vectors and an
    /// explicit all-false boundary.
    pub const BOX_UNDEFINED_CELL: &str = "box.undefined-cell";
    /// A trajectory update's header states its block's declared
    /// `structural_shape` (our reading, spec-map's decision).
    pub const STRUCTURAL_SHAPE_DECLARED: &str = "trajectory.block.structural-shape-declared";
}

/// What the harness knows a written file must hold, from the fixture.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// For record r, the blocks present at its first resolved frame.
    pub first_frame_blocks: Vec<Vec<String>>,
    /// The fixture the writer was handed (canonical JSON), when known: the
    /// file's content, read by the harness, must be its logical content.
    pub fixture: Option<Value>,
}

/// The most findings one inspection reports.
pub const MAX_FINDINGS: usize = 100;

/// Checks a written `.mrec.lmdb` file against the binding's rules with the
/// harness's own code.
///
/// `expected`: optional, what the fixture says the file must hold: its
/// logical content (read from the file with the harness's own code and
/// compared by the judge), and the blocks of each record's first resolved
/// frame, for the first-restates rule (`"box"` is satisfied by a `box`
/// block or by the header's `box`). Without it, every rule the file itself
/// determines is still checked (`n_atoms` among them). Returns every
/// finding (at most [`MAX_FINDINGS`]); empty means the file conforms.
/// Never panics.
pub fn inspect_file(path: &Path, expected: Option<&Expected>) -> Vec<Finding> {
    let mut out = Findings::default();
    if check_file_shape(path, &mut out) {
        match pages::check(path) {
            Ok(()) => inspect_env(path, expected, &mut out),
            Err((clause, e)) => out.push(clause, format!("{}: {e}", path.display())),
        }
    }
    out.items
}

/// A bounded list of findings.
#[derive(Default)]
struct Findings {
    items: Vec<Finding>,
}

impl Findings {
    fn push(&mut self, clause: &str, message: impl Into<String>) {
        if self.items.len() < MAX_FINDINGS {
            self.items.push(Finding::new(clause, message));
        }
    }

    fn full(&self) -> bool {
        self.items.len() >= MAX_FINDINGS
    }
}

/// The path must be one regular file; beside it only `<name>-lock`.
/// Returns whether the file can be opened at all.
fn check_file_shape(path: &Path, out: &mut Findings) -> bool {
    let md = match std::fs::metadata(path) {
        Ok(md) => md,
        Err(e) => {
            out.push(
                clause::FILE_SINGLE,
                format!("{}: cannot stat the file: {e}", path.display()),
            );
            return false;
        }
    };
    if md.is_dir() {
        out.push(
            clause::FILE_SINGLE,
            format!(
                "{} is a directory (LMDB's sub-directory layout), not one file",
                path.display()
            ),
        );
        return false;
    }
    if !md.is_file() {
        out.push(
            clause::FILE_SINGLE,
            format!("{} is not a regular file", path.display()),
        );
        return false;
    }
    // Companion files a writer might leave: `<name>-*` or `<name>.*`, other
    // than LMDB's own `<name>-lock`.
    if let (Some(name), Some(dir)) = (path.file_name(), path.parent()) {
        let name = name.to_string_lossy().into_owned();
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        let lock = format!("{name}-lock");
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut extra: Vec<String> = entries
                .filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| {
                    n != &lock
                        && n.strip_prefix(name.as_str())
                            .is_some_and(|rest| rest.starts_with('-') || rest.starts_with('.'))
                })
                .collect();
            extra.sort();
            for n in extra {
                out.push(
                    clause::FILE_SINGLE,
                    format!("`{n}` sits beside the file; only `{lock}` may"),
                );
            }
        }
    }
    true
}

/// Opens the env read-only; retries without the lock file when LMDB cannot
/// create it (read-only directory).
fn open_read_only(path: &Path) -> heed::Result<Env> {
    let open = |flags: EnvFlags| {
        let mut options = EnvOpenOptions::new();
        // SAFETY: the harness never opens the same env twice concurrently in
        // one process (heed refuses a second open of one path anyway), and
        // the file is not being modified while it is inspected: inspection
        // runs after the writer under test has finished.
        unsafe {
            options.flags(flags);
            options.open(path)
        }
    };
    match open(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) {
        Err(heed::Error::Io(e)) if lock_unavailable(&e) => {
            open(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY | EnvFlags::NO_LOCK)
        }
        other => other,
    }
}

fn lock_unavailable(e: &std::io::Error) -> bool {
    // EROFS is 30 on Linux and the BSDs/macOS.
    e.kind() == std::io::ErrorKind::PermissionDenied || e.raw_os_error() == Some(30)
}

fn inspect_env(path: &Path, expected: Option<&Expected>, out: &mut Findings) {
    let env = match open_read_only(path) {
        Ok(env) => env,
        Err(e) => {
            out.push(
                clause::FILE_SINGLE,
                format!(
                    "{} does not open as one LMDB environment (NO_SUB_DIR, read-only): {e}",
                    path.display()
                ),
            );
            return;
        }
    };
    {
        match env.read_txn() {
            Ok(rtxn) => match env.open_database::<Bytes, Bytes>(&rtxn, None) {
                Ok(Some(db)) => inspect_db(db, &rtxn, expected, out),
                Ok(None) => out.push(clause::FILE_SINGLE, "the unnamed database is missing"),
                Err(e) => out.push(
                    clause::FILE_SINGLE,
                    format!("cannot open the unnamed database: {e}"),
                ),
            },
            Err(e) => out.push(
                clause::FILE_SINGLE,
                format!("cannot begin a read transaction: {e}"),
            ),
        }
    }
    env.prepare_for_closing().wait();
}

/// A key of the scheme (DIGEST §1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// `meta`
    Meta,
    /// `index`
    Index,
    /// `ff`
    ForceField,
    /// `r` + u64be(r)
    Record(u64),
    /// `s` + u64be(r)
    System(u64),
    /// `f` + u64be(j)
    Frame(u64),
}

impl Key {
    /// Classifies raw key bytes; `None` for a key outside the scheme.
    pub fn classify(key: &[u8]) -> Option<Key> {
        match key {
            b"meta" => Some(Key::Meta),
            b"index" => Some(Key::Index),
            b"ff" => Some(Key::ForceField),
            [prefix, rest @ ..] if rest.len() == 8 => {
                let mut n = [0u8; 8];
                n.copy_from_slice(rest);
                let n = u64::from_be_bytes(n);
                match prefix {
                    b'r' => Some(Key::Record(n)),
                    b's' => Some(Key::System(n)),
                    b'f' => Some(Key::Frame(n)),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The raw key bytes.
    pub fn encode(self) -> Vec<u8> {
        let numbered = |p: u8, n: u64| {
            let mut k = vec![p];
            k.extend_from_slice(&n.to_be_bytes());
            k
        };
        match self {
            Key::Meta => b"meta".to_vec(),
            Key::Index => b"index".to_vec(),
            Key::ForceField => b"ff".to_vec(),
            Key::Record(r) => numbered(b'r', r),
            Key::System(r) => numbered(b's', r),
            Key::Frame(j) => numbered(b'f', j),
        }
    }
}

/// Spells raw key bytes as recipes do: `meta`, `index`, `ff`, `r:<n>`,
/// `s:<n>`, `f:<n>`, or `hex:<bytes>` for anything else.
pub fn key_label(key: &[u8]) -> String {
    match Key::classify(key) {
        Some(Key::Meta) => "meta".into(),
        Some(Key::Index) => "index".into(),
        Some(Key::ForceField) => "ff".into(),
        Some(Key::Record(n)) => format!("r:{n}"),
        Some(Key::System(n)) => format!("s:{n}"),
        Some(Key::Frame(n)) => format!("f:{n}"),
        None => {
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            format!("hex:{hex}")
        }
    }
}

/// What `meta` says about the counts, when it says it well.
#[derive(Default)]
struct MetaCounts {
    n_records: Option<u64>,
    n_frames: Option<u64>,
    /// `sequence_schema` blocks that declare a `structural_shape`, with it.
    declared_shapes: BTreeMap<String, Value>,
    /// `sequence_schema`, as stored.
    schema: Option<Value>,
}

fn inspect_db(
    db: Database<Bytes, Bytes>,
    rtxn: &RoTxn,
    expected: Option<&Expected>,
    out: &mut Findings,
) {
    let counts = match db.get(rtxn, b"meta") {
        Ok(Some(bytes)) => check_meta(bytes, out),
        Ok(None) => {
            out.push(
                clause::META_REQUIRED,
                "no `meta` key: the file is not a collection",
            );
            MetaCounts::default()
        }
        Err(e) => {
            out.push(clause::META_REQUIRED, format!("cannot read `meta`: {e}"));
            MetaCounts::default()
        }
    };

    // One pass over every key: scheme, ranges, frame bytes, record meta.
    let mut frames: Vec<u64> = Vec::new();
    let iter = match db.iter(rtxn) {
        Ok(iter) => iter,
        Err(e) => {
            out.push(
                clause::FILE_SINGLE,
                format!("cannot iterate the database: {e}"),
            );
            return;
        }
    };
    for item in iter {
        if out.full() {
            return;
        }
        let (key, value) = match item {
            Ok(kv) => kv,
            Err(e) => {
                out.push(clause::FILE_SINGLE, format!("cannot read an entry: {e}"));
                return;
            }
        };
        let label = key_label(key);
        let Some(k) = Key::classify(key) else {
            out.push(
                clause::KEYS_SCHEME,
                format!(
                    "key {label} ({} bytes) is outside the scheme (meta, index, ff, r/s/f + u64 big-endian)",
                    key.len()
                ),
            );
            continue;
        };
        match k {
            Key::Meta => {}
            Key::Index => {
                check_frame_value(&label, value, None, out);
                if let Ok(view) = frame_bytes::parse(value) {
                    for (name, block) in view.blocks().into_iter().flatten() {
                        records::check_columns(&label, name, block, out);
                    }
                }
            }
            Key::ForceField => {
                check_frame_value(&label, value, None, out);
                if frame_bytes::parse(value).is_ok_and(|v| v.header.contains_key("meta_types")) {
                    out.push(
                        clause::FF_META,
                        format!("{label}: the force-field frame carries meta_types (its meta is the plain document)"),
                    );
                }
            }
            Key::Record(r) => {
                check_record_number(&label, r, counts.n_records, out);
                match serde_json::from_slice::<Value>(value) {
                    Ok(Value::Object(_)) => {}
                    Ok(other) => out.push(
                        clause::RECORD_META_JSON,
                        format!(
                            "{label}: the record meta is {}, not an object",
                            json_kind(&other)
                        ),
                    ),
                    Err(e) => out.push(
                        clause::RECORD_META_JSON,
                        format!("{label}: the record meta is not UTF-8 JSON: {e}"),
                    ),
                }
            }
            Key::System(r) => {
                check_record_number(&label, r, counts.n_records, out);
                check_frame_value(&label, value, None, out);
                if let Ok(view) = frame_bytes::parse(value) {
                    records::check_system(&label, &view, out);
                }
            }
            Key::Frame(j) => {
                match counts.n_frames {
                    Some(n) if j >= n => out.push(
                        clause::KEYS_SCHEME,
                        format!("{label}: frame ordinal {j} is not below meta.n_frames = {n}"),
                    ),
                    _ => frames.push(j),
                }
                check_frame_value(&label, value, Some(&counts.declared_shapes), out);
            }
        }
    }

    // Frame keys below meta.n_frames (keys are unique): the per-record
    // checks below read only files whose every ordinal has its key, so a
    // hostile count never makes them look up keys that are not there.
    let found = frames.len() as u64;
    if let Some(n_frames) = counts.n_frames {
        check_missing_frames(frames, n_frames, out);
    }

    let index = check_index(db, rtxn, &counts, out);
    // The records' updates, when the index says soundly which are whose:
    // the prefix sum holds, the total is meta's and every ordinal has its
    // key (a broken index was reported above; its numbers may be anything).
    let sound = index.as_ref().filter(|index| {
        let mut sum = 0u64;
        index
            .first_frame
            .iter()
            .zip(&index.n_frames)
            .all(|(&ff, &nf)| {
                let ok = ff == sum;
                sum = sum.saturating_add(nf);
                ok
            })
            && Some(sum) == counts.n_frames
            && sum == found
    });
    if let Some(index) = sound {
        let declared = records::Declaration::of(counts.schema.as_ref());
        for (r, (&ff, &nf)) in index.first_frame.iter().zip(&index.n_frames).enumerate() {
            if out.full() {
                return;
            }
            let updates = records::stored_updates(db, rtxn, ff, nf);
            records::check_record_updates(&updates, r, &declared, out);
            check_n_atoms(db, rtxn, r, index.n_atoms[r], &updates, out);
        }
    }
    if let Some(fixture) = expected.and_then(|e| e.fixture.as_ref()) {
        check_content(db, rtxn, fixture, out);
    }
    if let (Some(expected), Some(index)) = (expected, index) {
        check_first_frames(db, rtxn, &index, &expected.first_frame_blocks, out);
    }
}

/// `n_atoms` of record `r` as the file itself determines it (lmdb.md,
/// index): the rows of the system's `atoms` block (even zero), else of the
/// record's first stored update that has `atoms` (a record's first frame
/// restates every block present there, so that is the trajectory's first
/// update of `atoms`), else 0.
fn check_n_atoms(
    db: Database<Bytes, Bytes>,
    rtxn: &RoTxn,
    r: usize,
    stored: u64,
    updates: &[(u64, FrameView<'_>)],
    out: &mut Findings,
) {
    let atoms = |view: &FrameView<'_>| view.blocks()?.get("atoms")?.get("count")?.as_u64();
    let system = db
        .get(rtxn, &Key::System(r as u64).encode())
        .ok()
        .flatten()
        .and_then(|value| frame_bytes::parse(value).ok());
    let (rows, from) = match system.as_ref().and_then(atoms) {
        Some(rows) => (rows, "the system's `atoms` block".to_string()),
        None => match updates.iter().find_map(|(j, u)| Some((atoms(u)?, j))) {
            Some((rows, j)) => (rows, format!("the first update of `atoms` (f:{j})")),
            None => (
                0,
                "no `atoms` block in the system or the trajectory".to_string(),
            ),
        },
    };
    if stored != rows {
        out.push(
            clause::INDEX_N_ATOMS,
            format!("index: n_atoms[{r}] is {stored}; {from} gives {rows}"),
        );
    }
}

/// The file's content, read with the harness's own code, is the fixture's
/// logical content: one finding per difference, at its path.
fn check_content(db: Database<Bytes, Bytes>, rtxn: &RoTxn, fixture: &Value, out: &mut Findings) {
    let read = match content::read(db, rtxn) {
        Ok(read) => read,
        Err(finding) => return out.push(&finding.clause, finding.message),
    };
    for d in crate::judge::null_row_differences(fixture, &read) {
        out.push(
            clause::NULL_ROW_VALUE,
            format!(
                "the value under a null row is not carried as written at {}: the fixture has {}, the file {}",
                d.path, d.expected, d.actual
            ),
        );
    }
    match crate::judge::compare_file(fixture, &read) {
        Ok(differences) => {
            for d in differences {
                out.push(
                    content::clause::SAME_CONTENT,
                    format!(
                        "the file's content differs from the fixture at {}: the fixture has {}, the file {}",
                        d.path, d.expected, d.actual
                    ),
                );
            }
        }
        Err(e) => out.push(
            content::clause::SAME_CONTENT,
            format!("the file's content does not read as a collection: {e}"),
        ),
    }
}

fn check_record_number(label: &str, r: u64, n_records: Option<u64>, out: &mut Findings) {
    if let Some(n) = n_records {
        if r >= n {
            out.push(
                clause::KEYS_SCHEME,
                format!("{label}: record number {r} is not below meta.n_records = {n}"),
            );
        }
    }
}

/// Frame bytes, plus where `step` and `time` may be: on every trajectory
/// update a `step`, and neither on a system, index or force-field frame.
/// `declared_shapes` is given for a trajectory update: a block the
/// sequence_schema gives a shape carries that shape in its header whenever
/// it has rows.
fn check_frame_value(
    label: &str,
    value: &[u8],
    declared_shapes: Option<&BTreeMap<String, Value>>,
    out: &mut Findings,
) {
    let trajectory = declared_shapes.is_some();
    let (view, problems) = frame_bytes::check(value);
    for p in problems {
        out.push(p.clause, format!("{label}: {}", p.message));
    }
    let Some(view) = view else { return };
    let blocks = view.header.get("blocks").and_then(Value::as_object);
    for (name, declared) in declared_shapes.into_iter().flatten() {
        let Some(block) = blocks.and_then(|b| b.get(name)) else {
            continue;
        };
        let stated = block.get("structural_shape").unwrap_or(&Value::Null);
        let has_rows = block.get("count").and_then(Value::as_u64) != Some(0);
        if has_rows && stated != declared {
            out.push(
                clause::STRUCTURAL_SHAPE_DECLARED,
                format!(
                    "{label}: block `{name}` has structural_shape {stated}, not the declared {declared}"
                ),
            );
        }
    }
    if trajectory && !view.header.contains_key("step") {
        out.push(
            clause::FRAME_STEP,
            format!("{label}: a trajectory update carries no `step`"),
        );
    }
    if !trajectory {
        for key in ["step", "time"] {
            if view.header.contains_key(key) {
                out.push(
                    clause::STEP_TIME_PLACEMENT,
                    format!("{label}: `{key}` on a frame that is not a trajectory update"),
                );
            }
        }
    }
    if let Some(Value::Object(cell)) = view.header.get("box") {
        check_undefined_cell(label, cell, out);
    }
}

/// What a writer stores for an undefined cell (frame.md, "An undefined
/// cell"): the identity matrix as `vectors`, and `boundary` written out as
/// all-false (omitted, it would mean all-periodic). A reader tolerates
/// either being off; a writer may not produce it.
fn check_undefined_cell(label: &str, cell: &Map<String, Value>, out: &mut Findings) {
    if cell.get("cell_defined") != Some(&Value::Bool(false)) {
        return;
    }
    let identity =
        cell.get("vectors")
            .and_then(Value::as_array)
            .is_some_and(|rows| {
                rows.len() == 3
                    && rows.iter().enumerate().all(|(i, row)| {
                        row.as_array().is_some_and(|row| {
                            row.len() == 3
                                && row.iter().enumerate().all(|(j, x)| {
                                    x.as_f64() == Some(if i == j { 1.0 } else { 0.0 })
                                })
                        })
                    })
            });
    if !identity {
        out.push(
            clause::BOX_UNDEFINED_CELL,
            format!("{label}: an undefined cell's `vectors` are not the identity matrix"),
        );
    }
    let all_false = Value::Array(vec![Value::Bool(false); 3]);
    if cell.get("boundary") != Some(&all_false) {
        out.push(
            clause::BOX_UNDEFINED_CELL,
            format!(
                "{label}: an undefined cell's `boundary` is not written as [false, false, false]"
            ),
        );
    }
}

fn check_meta(bytes: &[u8], out: &mut Findings) -> MetaCounts {
    let mut counts = MetaCounts::default();
    let meta = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(m)) => m,
        Ok(other) => {
            out.push(
                clause::META_WELL_FORMED,
                format!("meta is {}, not a JSON object", json_kind(&other)),
            );
            return counts;
        }
        Err(e) => {
            out.push(
                clause::META_WELL_FORMED,
                format!("meta is not UTF-8 JSON: {e}"),
            );
            return counts;
        }
    };

    match meta.get("layout") {
        Some(Value::String(s)) if s == "mrec-lmdb" => {}
        Some(other) => out.push(
            clause::META_LAYOUT,
            format!("meta.layout is {other}, not \"mrec-lmdb\""),
        ),
        None => out.push(clause::META_LAYOUT, "meta has no layout"),
    }

    match meta.get("layout_version") {
        None => out.push(
            clause::META_LAYOUT_VERSION,
            "meta has no layout_version (required)",
        ),
        Some(Value::Number(n)) if n.is_u64() || n.is_i64() => {
            if n.as_u64() != Some(1) {
                out.push(
                    clause::META_LAYOUT_VERSION,
                    format!("meta.layout_version is {n}; this binding supports 1..=1"),
                );
            }
        }
        Some(other) => out.push(
            clause::META_LAYOUT_VERSION,
            format!("meta.layout_version is {other}, not a JSON integer"),
        ),
    }

    match meta.get("collection") {
        Some(Value::Object(collection)) => {
            match collection.get("units") {
                Some(Value::Object(_)) => {}
                Some(other) => out.push(
                    clause::UNITS_REQUIRED,
                    format!(
                        "meta.collection.units is {}, not an object",
                        json_kind(other)
                    ),
                ),
                None => out.push(clause::UNITS_REQUIRED, "meta.collection has no units"),
            }
            match collection.get("molrec_version") {
                None => {}
                Some(Value::Number(n)) if n.as_u64() == Some(1) => {}
                Some(other) => out.push(
                    clause::MOLREC_VERSION,
                    format!(
                        "meta.collection.molrec_version is {other}; it must be an integer in 1..=1"
                    ),
                ),
            }
        }
        Some(other) => out.push(
            clause::META_WELL_FORMED,
            format!("meta.collection is {}, not an object", json_kind(other)),
        ),
        None => out.push(clause::META_WELL_FORMED, "meta has no collection"),
    }

    match meta.get("sequence_schema") {
        Some(Value::Object(schema)) => {
            for part in ["blocks", "meta"] {
                match schema.get(part) {
                    Some(Value::Object(_)) => {}
                    Some(other) => out.push(
                        clause::META_WELL_FORMED,
                        format!(
                            "meta.sequence_schema.{part} is {}, not an object",
                            json_kind(other)
                        ),
                    ),
                    None => out.push(
                        clause::META_WELL_FORMED,
                        format!("meta.sequence_schema has no {part}"),
                    ),
                }
            }
        }
        Some(other) => out.push(
            clause::META_WELL_FORMED,
            format!(
                "meta.sequence_schema is {}, not an object",
                json_kind(other)
            ),
        ),
        None => out.push(clause::META_WELL_FORMED, "meta has no sequence_schema"),
    }

    let fills = meta
        .get("sequence_schema")
        .and_then(|s| s.get("meta"))
        .and_then(Value::as_object);
    for (key, entry) in fills.into_iter().flatten() {
        if let (Some(tag), Some(fill)) = (
            entry.get("dtype").and_then(Value::as_str),
            entry.get("fill"),
        ) {
            records::check_typed(
                tag,
                fill,
                &format!("meta.sequence_schema.meta.{key}.fill"),
                out,
            );
        }
    }

    counts.declared_shapes = meta
        .get("sequence_schema")
        .and_then(|s| s.get("blocks"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, b)| {
            let shape = b.get("structural_shape").filter(|s| !s.is_null())?;
            Some((name.clone(), shape.clone()))
        })
        .collect();
    counts.schema = meta.get("sequence_schema").cloned();
    counts.n_records = unsigned_count(&meta, "n_records", out);
    counts.n_frames = unsigned_count(&meta, "n_frames", out);
    counts
}

fn unsigned_count(meta: &Map<String, Value>, key: &str, out: &mut Findings) -> Option<u64> {
    match meta.get(key) {
        Some(Value::Number(n)) if n.is_u64() => n.as_u64(),
        Some(other) => {
            out.push(
                clause::META_WELL_FORMED,
                format!("meta.{key} is {other}, not an unsigned integer"),
            );
            None
        }
        None => {
            out.push(clause::META_WELL_FORMED, format!("meta has no {key}"));
            None
        }
    }
}

/// Every ordinal `0..n_frames` must have its key (`frames` holds the
/// ordinals below `n_frames` that were found).
fn check_missing_frames(mut frames: Vec<u64>, n_frames: u64, out: &mut Findings) {
    frames.sort_unstable();
    frames.dedup();
    let mut next = 0u64;
    let report = |from: u64, to: u64, out: &mut Findings| {
        if to == from + 1 {
            out.push(
                clause::FRAME_MISSING,
                format!("frame key f:{from} is missing (meta.n_frames = {n_frames})"),
            );
        } else {
            out.push(
                clause::FRAME_MISSING,
                format!(
                    "frame keys f:{from} .. f:{} ({} ordinals) are missing (meta.n_frames = {n_frames})",
                    to - 1,
                    to - from
                ),
            );
        }
    };
    for j in frames {
        if j > next {
            report(next, j, out);
        }
        next = j + 1;
    }
    if next < n_frames {
        report(next, n_frames, out);
    }
}

/// The index columns the first-restates check needs.
struct IndexColumns {
    first_frame: Vec<u64>,
    n_frames: Vec<u64>,
    n_atoms: Vec<u64>,
}

fn check_index(
    db: Database<Bytes, Bytes>,
    rtxn: &RoTxn,
    counts: &MetaCounts,
    out: &mut Findings,
) -> Option<IndexColumns> {
    let value = match db.get(rtxn, b"index") {
        Ok(Some(v)) => v,
        Ok(None) => {
            out.push(clause::INDEX_COLUMNS, "no `index` key");
            return None;
        }
        Err(e) => {
            out.push(clause::INDEX_COLUMNS, format!("cannot read `index`: {e}"));
            return None;
        }
    };
    // Frame-bytes problems were reported during the key scan.
    let view = frame_bytes::parse(value).ok()?;
    let blocks = view.blocks()?;
    for name in blocks.keys().filter(|n| n.as_str() != "records") {
        out.push(
            clause::INDEX_COLUMNS,
            format!("index: block `{name}` besides `records` (the index has exactly one block)"),
        );
    }
    let Some(records) = blocks.get("records").and_then(Value::as_object) else {
        out.push(clause::INDEX_COLUMNS, "index: no block `records`");
        return None;
    };
    let count = records.get("count").and_then(Value::as_u64);
    if let (Some(count), Some(n)) = (count, counts.n_records) {
        if count != n {
            out.push(
                clause::INDEX_COUNT,
                format!("index: block `records` has count {count}, meta.n_records is {n}"),
            );
        }
    }
    let columns = records.get("columns").and_then(Value::as_object);
    let mut all_columns_ok = true;
    for (name, dtype) in [
        ("first_frame", "u64"),
        ("n_frames", "u64"),
        ("n_atoms", "u64"),
        ("has_trajectory", "bool"),
    ] {
        let entry = columns.and_then(|c| c.get(name));
        let Some(entry) = entry else {
            out.push(
                clause::INDEX_COLUMNS,
                format!("index: block `records` has no column `{name}`"),
            );
            all_columns_ok = false;
            continue;
        };
        let got = entry.get("dtype").and_then(Value::as_str);
        if got != Some(dtype) {
            out.push(
                clause::INDEX_COLUMNS,
                format!(
                    "index: column `{name}` has dtype {}, must be {dtype}",
                    entry
                        .get("dtype")
                        .map_or("none".to_string(), Value::to_string)
                ),
            );
            all_columns_ok = false;
        }
        let shape_ok = match (entry.get("shape").and_then(Value::as_array), count) {
            (Some(dims), Some(count)) => dims.len() == 1 && dims[0].as_u64() == Some(count),
            _ => false,
        };
        if !shape_ok {
            out.push(
                clause::INDEX_COLUMNS,
                format!(
                    "index: column `{name}` has shape {}, must be [count]",
                    entry
                        .get("shape")
                        .map_or("none".to_string(), Value::to_string)
                ),
            );
            all_columns_ok = false;
        }
    }
    if !all_columns_ok {
        return None;
    }
    let first_frame = read_index_column(&view, "first_frame")?;
    let n_frames = read_index_column(&view, "n_frames")?;
    let n_atoms = read_index_column(&view, "n_atoms")?;

    // Exclusive prefix sum.
    let mut sum = 0u64;
    for (r, (&ff, &nf)) in first_frame.iter().zip(&n_frames).enumerate() {
        if ff != sum {
            out.push(
                clause::INDEX_PREFIX_SUM,
                format!(
                    "index: record {r} has first_frame {ff}, the exclusive prefix sum of n_frames is {sum}"
                ),
            );
        }
        match sum.checked_add(nf) {
            Some(s) => sum = s,
            None => {
                out.push(
                    clause::INDEX_PREFIX_SUM,
                    format!("index: the prefix sum of n_frames overflows u64 at record {r}"),
                );
                return None;
            }
        }
    }
    // Total.
    if let Some(meta_frames) = counts.n_frames {
        match (first_frame.last(), n_frames.last()) {
            (Some(&ff), Some(&nf)) => match ff.checked_add(nf) {
                Some(end) if end == meta_frames => {}
                Some(end) => out.push(
                    clause::INDEX_TOTAL,
                    format!(
                        "index: the last first_frame + n_frames is {end}, meta.n_frames is {meta_frames}"
                    ),
                ),
                None => out.push(
                    clause::INDEX_TOTAL,
                    "index: the last first_frame + n_frames overflows u64",
                ),
            },
            _ => {
                if meta_frames != 0 {
                    out.push(
                        clause::INDEX_TOTAL,
                        format!("index: no records, but meta.n_frames is {meta_frames}"),
                    );
                }
            }
        }
    }
    Some(IndexColumns {
        first_frame,
        n_frames,
        n_atoms,
    })
}

fn read_index_column(view: &FrameView<'_>, name: &str) -> Option<Vec<u64>> {
    // A buffer out of bounds was reported by the frame-bytes check.
    frame_bytes::read_u64_column(view, "records", name)
}

fn check_first_frames(
    db: Database<Bytes, Bytes>,
    rtxn: &RoTxn,
    index: &IndexColumns,
    expected: &[Vec<String>],
    out: &mut Findings,
) {
    for (r, names) in expected.iter().enumerate() {
        if out.full() {
            return;
        }
        let (Some(&ff), Some(&nf)) = (index.first_frame.get(r), index.n_frames.get(r)) else {
            return;
        };
        if nf == 0 || names.is_empty() {
            continue;
        }
        let key = Key::Frame(ff).encode();
        // A missing or undecodable first frame was reported already.
        let Ok(Some(value)) = db.get(rtxn, &key) else {
            continue;
        };
        let Ok(view) = frame_bytes::parse(value) else {
            continue;
        };
        let blocks = view.blocks();
        let missing: BTreeSet<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|name| {
                let in_blocks = blocks.is_some_and(|b| b.contains_key(*name));
                let as_box = *name == "box" && view.header.get("box").is_some_and(|b| !b.is_null());
                !in_blocks && !as_box
            })
            .collect();
        if missing.contains("box") {
            out.push(
                clause::BOX_ON_CHANGE,
                format!("record {r}: its first frame f:{ff} does not state the cell in effect there (the cell is record-local)"),
            );
        }
        let blocks: Vec<&str> = missing.into_iter().filter(|n| *n != "box").collect();
        if !blocks.is_empty() {
            out.push(
                clause::FRAME_FIRST_RESTATES,
                format!(
                    "record {r}: its first frame f:{ff} does not restate block(s) {} present there",
                    blocks.join(", ")
                ),
            );
        }
    }
}
