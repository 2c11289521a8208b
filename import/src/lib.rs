//! Importers into molrec collections, shared by `mrec import aselmdb` and
//! the Python package's `mrec.from_ase` / `python -m mrec import`: ASE
//! rows into records by the one mapping of `docs/import.md`
//! (`mapping.json`), written through the library's streaming `Writer`.
//!
//! The input is ASE-LMDB shards (the `aselmdb` backend of
//! `ase-db-backends`, as FairChem uses it). The Python importer encodes
//! each `Atoms` as the row ASE itself would write and puts it in a scratch
//! shard ([`ShardWriter`]), so both paths run the same decoding, mapping,
//! grouping and report ([`Origin`] says which one is running).
//!
//! A shard is an LMDB file (no subdirectory) whose values are
//! zlib-compressed JSON in ASE's encoding: the rows under their ids as
//! ASCII decimal keys (`"1"`, `"2"`, ...), and the reserved keys `nextid`
//! (the next id), `deleted_ids` (a list) and `metadata` (a document). The
//! rows are ids `1..nextid` minus `deleted_ids`, read in that order, as
//! `LMDBDatabase` reads them; other keys are not rows (counted).
//!
//! Files by concern: `decode.rs` (a value into a [`decode::Row`]),
//! `mapping.rs` (rows into a record: `docs/import.md`, `mapping.json`),
//! `shard.rs` (shards opened, checked, read and written), this file (the
//! pass over the rows, grouping, the report).
//!
//! Memory: the rows are read and decoded on a second thread, a bounded
//! channel apart from the thread that maps them and hands each record to
//! the library's streaming `Writer`; neither keeps a row once its record
//! is appended. With `--group-by`, a first pass reads every row's
//! `key_value_pairs` (and `data` scalars) into a plan of a few tens of
//! bytes per row; the second fetches each group's rows by key, so memory
//! holds the plan and the largest group.

#![warn(missing_docs)]

pub mod decode;
pub mod mapping;
mod shard;
pub use shard::{check_pages, ShardWriter};

use decode::{inflate, Row};
use flate2::Decompress;
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, RoTxn, WithoutTls};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use molrec::lmdb::{Writer, WriterOptions};
use molrec::model::{Column, ColumnData, Header};
use serde_json::{json, Map, Value};
use shard::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Where the rows come from: the words of messages and of the
/// collection's `source`, and whether the shards are checked.
#[derive(Clone, Debug)]
pub enum Origin {
    /// ASE-LMDB shards from elsewhere (`mrec import aselmdb`): each is
    /// checked page by page before LMDB maps it (`check_pages`), in a
    /// child process when `check_command` names one (the program and its
    /// arguments, run with the shards' paths appended; exit 4 and a
    /// message on stderr say a shard is damaged), else in this process.
    AseLmdb {
        /// The child process that checks the pages, if any.
        check_command: Option<Vec<std::ffi::OsString>>,
    },
    /// Scratch shards a Python importer wrote from `Atoms` objects, one
    /// per source (named by `labels`, e.g. the file ASE read them from);
    /// they are this process's own files and are not page-checked. A
    /// row's key is its position in its source, from 1.
    Ase {
        /// What imported them (`mrec.from_ase`, `python -m mrec import`).
        tool: String,
        /// One name per input shard.
        labels: Vec<String>,
    },
}

/// What `mrec import aselmdb` is asked to do.
pub struct Options {
    /// The shards, in order.
    pub inputs: Vec<PathBuf>,
    /// Where they come from.
    pub origin: Origin,
    /// The collection to write.
    pub out: PathBuf,
    /// One record per value of this key (`key_value_pairs`, then `data`).
    pub group_by: Option<String>,
    /// The frames of a group in the order of this integer key (its value
    /// is the step); without it, in shard and id order (steps 0, 1, ...).
    pub order_by: Option<String>,
    /// Own index columns: one value per record from this key.
    pub index_columns: Vec<String>,
    /// Count and report bad rows and refused records instead of stopping.
    pub skip_bad: bool,
    /// A progress bar on stderr.
    pub progress: bool,
    /// Read and decode every row, write nothing (the benchmark's baseline).
    pub decode_only: bool,
    /// Threads that read, decode and map rows (the records are appended
    /// in row order on the calling thread).
    pub workers: usize,
    /// The most bytes one row may inflate to.
    pub max_row_bytes: usize,
    /// The writer's options (`--overwrite`, batch and page size).
    pub writer: WriterOptions,
    /// Asked between rows: whether Ctrl-C was pressed.
    pub interrupted: fn() -> bool,
}

impl Options {
    /// An import of `inputs` into `out` with the defaults of `mrec import
    /// aselmdb`: one record per row, a page check in this process, no
    /// progress bar, up to 4 worker threads.
    pub fn new(inputs: Vec<PathBuf>, out: PathBuf) -> Self {
        Options {
            inputs,
            origin: Origin::AseLmdb {
                check_command: None,
            },
            out,
            group_by: None,
            order_by: None,
            index_columns: Vec::new(),
            skip_bad: false,
            progress: false,
            decode_only: false,
            workers: std::thread::available_parallelism().map_or(1, |n| n.get().min(4)),
            max_row_bytes: DEFAULT_MAX_ROW_BYTES,
            // The written file's digest is in the report (a set's manifest
            // keeps it): a fraction of a percent of an import's time.
            writer: WriterOptions {
                digest: true,
                ..WriterOptions::default()
            },
            interrupted: || false,
        }
    }
}

/// The default bound on one row's inflated JSON: 256 MiB.
pub const DEFAULT_MAX_ROW_BYTES: usize = 256 << 20;

/// Why an import stopped.
#[derive(Debug)]
pub enum ImportError {
    /// The input is not what ASE writes (names the shard, the key and
    /// what is wrong), or a row the collection rules refuse.
    Bad(String),
    /// The library refused or failed (i/o, a full disk).
    Mrec(molrec::Error),
    /// Ctrl-C: nothing was written.
    Interrupted,
}

impl From<molrec::Error> for ImportError {
    fn from(e: molrec::Error) -> Self {
        ImportError::Mrec(e)
    }
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ImportError::Bad(m) => f.write_str(m),
            ImportError::Mrec(e) => write!(f, "{e}"),
            ImportError::Interrupted => f.write_str("interrupted"),
        }
    }
}

type Res<T> = std::result::Result<T, ImportError>;

/// Counts of what the mapping did besides the plain mapping, by what.
#[derive(Default, Debug)]
pub struct Tally {
    mapped: BTreeMap<String, u64>,
    changed: BTreeMap<String, u64>,
    kept: BTreeMap<String, u64>,
    dropped: BTreeMap<String, u64>,
    samples: Vec<String>,
}

fn bump(map: &mut BTreeMap<String, u64>, what: &str) {
    match map.get_mut(what) {
        Some(n) => *n += 1,
        None => {
            map.insert(what.to_string(), 1);
        }
    }
}

impl Tally {
    /// A mapping that is worth counting (constraints).
    pub fn map(&mut self, what: &str) {
        bump(&mut self.mapped, what);
    }
    /// A value the mapping changed (a fill, a conversion, a mask).
    pub fn change(&mut self, what: impl AsRef<str>) {
        bump(&mut self.changed, what.as_ref());
    }
    /// Something kept in a document rather than a column.
    pub fn keep(&mut self, what: impl AsRef<str>) {
        bump(&mut self.kept, what.as_ref());
    }
    /// Adds the counts of one record once it is written.
    fn absorb(&mut self, other: Tally) {
        for (mine, theirs) in [
            (&mut self.mapped, other.mapped),
            (&mut self.changed, other.changed),
            (&mut self.kept, other.kept),
        ] {
            for (k, n) in theirs {
                *mine.entry(k).or_insert(0) += n;
            }
        }
    }

    fn drop_row(&mut self, kind: &str, message: String) {
        bump(&mut self.dropped, kind);
        if self.samples.len() < 10 {
            self.samples.push(message);
        }
    }
}

/// A scalar a key names in a row: its `key_value_pairs`, then its `data`.
fn lookup(kvp: &Map<String, Value>, data: Option<&Map<String, Value>>, key: &str) -> Option<Value> {
    kvp.get(key)
        .or_else(|| data.and_then(|d| d.get(key)))
        .filter(|v| decode::is_scalar(v))
        .cloned()
}

fn row_lookup(row: &Row, key: &str) -> Option<Value> {
    lookup(
        &row.key_value_pairs,
        row.data.as_ref().and_then(Value::as_object),
        key,
    )
}

/// One own index column as its values arrive, record by record.
#[derive(Default)]
struct IndexColumn {
    values: Vec<Option<Value>>,
    kind: Option<&'static str>,
}

impl IndexColumn {
    /// The kind the column has once `v` is in it; `Err` when `v` does
    /// not fit the values before it.
    fn check(&self, v: &Option<Value>) -> std::result::Result<Option<&'static str>, String> {
        let Some(v) = v else {
            return Ok(self.kind);
        };
        let kind = match v {
            Value::Bool(_) => "bool",
            Value::Number(n) if n.is_i64() => "int",
            Value::Number(_) => "float",
            _ => "string",
        };
        Ok(match (self.kind, kind) {
            (None, k) => Some(k),
            (Some(a), b) if a == b => Some(a),
            (Some("int"), "float") | (Some("float"), "int") => Some("float"),
            (Some(a), b) => return Err(format!("a {b} value where earlier records have {a}s")),
        })
    }

    fn push(&mut self, v: Option<Value>) {
        if let Ok(kind) = self.check(&v) {
            self.kind = kind;
        }
        self.values.push(v);
    }

    fn column(self) -> Column {
        let n = self.values.len() as u64;
        let valid: Vec<bool> = self.values.iter().map(Option::is_some).collect();
        let data = match self.kind {
            Some("bool") => ColumnData::Bool(
                self.values
                    .iter()
                    .map(|v| v.as_ref().and_then(Value::as_bool).unwrap_or(false))
                    .collect(),
            ),
            Some("int") => ColumnData::I64(
                self.values
                    .iter()
                    .map(|v| v.as_ref().and_then(Value::as_i64).unwrap_or(0))
                    .collect(),
            ),
            Some("string") => ColumnData::String(
                self.values
                    .into_iter()
                    .map(|v| match v {
                        Some(Value::String(s)) => s,
                        _ => String::new(),
                    })
                    .collect(),
            ),
            _ => ColumnData::F64(
                self.values
                    .iter()
                    .map(|v| v.as_ref().and_then(Value::as_f64).unwrap_or(f64::NAN))
                    .collect(),
            ),
        };
        let mut c = Column::new(vec![n], data);
        c.validity = Some(valid);
        c.normalize_mask();
        c
    }
}

/// Whether a record's index values fit the columns (a string where the
/// column holds numbers does not): the import stops, naming the row.
fn check_index(
    index: &BTreeMap<String, IndexColumn>,
    values: &[Option<Value>],
    at: &str,
) -> Res<()> {
    for ((key, col), v) in index.iter().zip(values) {
        col.check(v)
            .map_err(|e| ImportError::Bad(format!("{at}: --index-column {key}: {e}")))?;
    }
    Ok(())
}

/// What an import did, for the report.
#[derive(Default, Debug)]
pub struct Report {
    shards: Vec<(String, u64, u64, u64, u64)>,
    rows: u64,
    records: u64,
    frames: u64,
    tally: Tally,
    decode_only: bool,
    /// The rows came from [`Origin::Ase`] sources, not shards.
    from_ase: bool,
    /// Seconds the whole pass took.
    pub secs: f64,
    /// Seconds of those in the writer's `finish` (which syncs: the disk).
    pub finish_secs: f64,
    /// The written file's content digest (`molrec::lmdb::file_digest`),
    /// when the writer's options asked for it (the default).
    pub digest: Option<String>,
}

impl Report {
    /// Records written.
    pub fn records(&self) -> u64 {
        self.records
    }
    /// Frames written (one per imported row).
    pub fn frames(&self) -> u64 {
        self.frames
    }
    /// Rows imported (in a written record).
    pub fn rows_imported(&self) -> u64 {
        self.rows
    }
    /// What the mapping counted, by section (`mapped`, `changed`, `kept`,
    /// `dropped`): what -> how many.
    pub fn counts(&self) -> [(&'static str, &BTreeMap<String, u64>); 4] {
        [
            ("mapped", &self.tally.mapped),
            ("changed", &self.tally.changed),
            ("kept", &self.tally.kept),
            ("dropped", &self.tally.dropped),
        ]
    }
    /// The first (up to 10) messages of what `skip_bad` dropped.
    pub fn dropped_samples(&self) -> &[String] {
        &self.tally.samples
    }
    /// Rows read and decoded (imported or not).
    pub fn rows_read(&self) -> u64 {
        self.shards.iter().map(|s| s.1).sum()
    }

    /// The summary: deterministic for one input (no times).
    pub fn text(&self, out: &Path) -> String {
        let mut t = String::new();
        let verb = if self.decode_only {
            "decoded"
        } else {
            "imported"
        };
        let _ = writeln!(
            t,
            "{verb} {} of {} rows from {} {}(s){}",
            self.rows,
            self.rows_read(),
            self.shards.len(),
            if self.from_ase { "source" } else { "shard" },
            if self.decode_only {
                String::new()
            } else {
                format!(
                    " into {}: {} records, {} frames",
                    out.file_name().map_or("?".into(), |n| n.to_string_lossy()),
                    self.records,
                    self.frames
                )
            }
        );
        for (name, rows, nextid, deleted, ignored) in &self.shards {
            if self.from_ase {
                let _ = writeln!(t, "  source {name}: {rows} rows");
                continue;
            }
            let _ = write!(
                t,
                "  shard {name}: {rows} rows (ids 1 to {}, {deleted} deleted ids skipped)",
                nextid.saturating_sub(1)
            );
            if *ignored > 0 {
                let _ = write!(t, "; {ignored} keys that are not rows ignored");
            }
            t.push('\n');
        }
        let section = |t: &mut String, title: &str, m: &BTreeMap<String, u64>| {
            if !m.is_empty() {
                let _ = writeln!(t, "{title}");
                for (what, n) in m {
                    let _ = writeln!(t, "  {n:>8}  {what}");
                }
            }
        };
        section(&mut t, "mapped (counted):", &self.tally.mapped);
        section(&mut t, "changed:", &self.tally.changed);
        section(&mut t, "kept in documents (no column):", &self.tally.kept);
        section(&mut t, "dropped (--skip-bad):", &self.tally.dropped);
        if !self.tally.samples.is_empty() {
            let _ = writeln!(t, "first of what was dropped:");
            for s in &self.tally.samples {
                let _ = writeln!(t, "  {s}");
            }
        }
        t
    }
}

fn bar(progress: bool, len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    if !progress {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    if let Ok(style) = ProgressStyle::with_template(
        "{prefix} [{elapsed_precise}] [{wide_bar}] {human_pos}/{human_len} rows, {per_sec}, ETA {eta}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_prefix(what.to_string());
    bar
}

/// The collection document: units, where it came from, how.
fn collection_meta(shards: &[Shard], options: &Options) -> Map<String, Value> {
    let sources: Vec<Value> = shards
        .iter()
        .map(|s| {
            let mut m = json!({
                "file": s.name, "rows": s.n_rows(), "nextid": s.nextid,
                "deleted_ids": s.deleted_in_range(),
            });
            if let Some(md) = &s.metadata {
                m["metadata"] = md.clone();
            }
            m
        })
        .collect();
    let tool = match &options.origin {
        Origin::AseLmdb { .. } => "mrec import aselmdb",
        Origin::Ase { tool, .. } => tool,
    };
    let mut import = json!({"tool": tool, "version": env!("CARGO_PKG_VERSION")});
    if let Some(g) = &options.group_by {
        import["group_by"] = json!(g);
    }
    if let Some(o) = &options.order_by {
        import["order_by"] = json!(o);
    }
    if !options.index_columns.is_empty() {
        import["index_columns"] = json!(options.index_columns);
    }
    let mut meta = Map::new();
    meta.insert("units".into(), mapping::units());
    let source = match &options.origin {
        Origin::AseLmdb { .. } => json!({"format": "ase-lmdb", "shards": sources}),
        Origin::Ase { .. } => json!({
            "format": "ase",
            "sources": shards
                .iter()
                .map(|s| json!({"name": s.name, "rows": s.n_rows()}))
                .collect::<Vec<_>>(),
        }),
    };
    meta.insert("source".into(), source);
    meta.insert("import".into(), import);
    meta
}

/// Runs `mrec import aselmdb`. The collection appears at `options.out`
/// whole, or (an error, an interrupt) not at all.
pub fn run(options: &Options) -> Res<Report> {
    if options.order_by.is_some() && options.group_by.is_none() {
        return Err(ImportError::Bad("--order-by needs --group-by".into()));
    }
    let start = Instant::now();
    // Per input: how messages name it, and the name the collection's
    // `source` gives it (None: the file's name).
    let names: Vec<(String, Option<String>)> = match &options.origin {
        Origin::AseLmdb { check_command } => {
            check_shards(&options.inputs, check_command.as_deref())?;
            options
                .inputs
                .iter()
                .map(|p| (format!("shard {}", p.display()), None))
                .collect()
        }
        Origin::Ase { labels, .. } => {
            if labels.len() != options.inputs.len() {
                return Err(ImportError::Bad(format!(
                    "{} labels for {} sources",
                    labels.len(),
                    options.inputs.len()
                )));
            }
            labels
                .iter()
                .map(|l| (format!("source {l}"), Some(l.clone())))
                .collect()
        }
    };
    let shards: Vec<Shard> = options
        .inputs
        .iter()
        .zip(names)
        .map(|(p, (label, name))| {
            let shard = open_shard(p, &label, options.max_row_bytes)?;
            Ok(match name {
                Some(name) => Shard { name, ..shard },
                None => shard,
            })
        })
        .collect::<Res<_>>()?;
    let mut report = Report {
        decode_only: options.decode_only,
        from_ase: matches!(options.origin, Origin::Ase { .. }),
        ..Report::default()
    };
    let header = Header {
        meta: collection_meta(&shards, options),
        sequence_schema: Some(mapping::declaration(options.group_by.is_some())),
        forcefield: None,
    };
    let mut writer = if options.decode_only {
        None
    } else {
        Some(Writer::create(
            &options.out,
            header,
            options.writer.clone(),
        )?)
    };
    let mut index: BTreeMap<String, IndexColumn> = options
        .index_columns
        .iter()
        .map(|k| (k.clone(), IndexColumn::default()))
        .collect();
    let total: u64 = shards.iter().map(Shard::n_rows).sum();
    let found = if options.group_by.is_some() {
        run_grouped(
            options,
            &shards,
            writer.as_mut(),
            &mut index,
            &mut report,
            total,
        )?
    } else {
        run_rows(
            options,
            &shards,
            writer.as_mut(),
            &mut index,
            &mut report,
            total,
        )?
    };
    for (s, shard) in shards.iter().enumerate() {
        let ignored = shard.entries.saturating_sub(shard.reserved + found[s]);
        report.shards.push((
            shard.name.clone(),
            shard.n_rows(),
            shard.nextid,
            shard.deleted_in_range(),
            ignored,
        ));
    }
    if let Some(writer) = writer {
        if (options.interrupted)() {
            return Err(ImportError::Interrupted);
        }
        let columns = index.into_iter().map(|(k, c)| (k, c.column())).collect();
        let finish = Instant::now();
        report.digest = writer.finish(columns)?.digest;
        report.finish_secs = finish.elapsed().as_secs_f64();
    }
    report.secs = start.elapsed().as_secs_f64();
    Ok(report)
}

/// This process's peak resident memory (`VmHWM` of /proc/self/status), KiB.
pub fn peak_memory_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// What to do with a bad row or a refused record: stop, or count it.
fn bad(options: &Options, report: &mut Report, kind: &str, message: String) -> Res<()> {
    if options.skip_bad {
        report.tally.drop_row(kind, message);
        Ok(())
    } else {
        Err(ImportError::Bad(message))
    }
}

/// Appends a record; a refusal of the collection rules is a bad row.
fn append(
    options: &Options,
    report: &mut Report,
    writer: Option<&mut Writer>,
    record: molrec::model::Record,
    frames: u64,
    rows: u64,
    at: String,
) -> Res<bool> {
    if let Some(w) = writer {
        match w.append(record) {
            Ok(()) => {}
            Err(e @ molrec::Error::Refused { .. }) => {
                bad(
                    options,
                    report,
                    "records refused by the collection rules",
                    format!("{at}: refused by the collection rules: {e}"),
                )?;
                return Ok(false);
            }
            Err(e) => return Err(e.into()),
        }
    }
    report.records += 1;
    report.frames += frames;
    report.rows += rows;
    Ok(true)
}

/// One row, one record: rows read, decoded and mapped on a second
/// thread, appended on this one.
fn run_rows(
    options: &Options,
    shards: &[Shard],
    mut writer: Option<&mut Writer>,
    index: &mut BTreeMap<String, IndexColumn>,
    report: &mut Report,
    total: u64,
) -> Res<Vec<u64>> {
    let bar = bar(options.progress, total, "import");
    let mut found = vec![0u64; shards.len()];
    let limit = options.max_row_bytes;
    let keys: Vec<String> = index.keys().cloned().collect();
    let workers = options.workers.max(1);
    let result = std::thread::scope(|scope| -> Res<()> {
        let (decode_only, keys) = (options.decode_only, &keys);
        let mut receivers = Vec::with_capacity(workers);
        for worker in 0..workers {
            let (tx, rx) = std::sync::mpsc::sync_channel(4);
            receivers.push(rx);
            scope.spawn(move || read_all(shards, tx, (worker, workers), limit, decode_only, keys));
        }
        // Chunk k from thread k mod workers: row order. A thread without
        // a next chunk has ended, and so has the pass.
        for k in 0.. {
            let Ok(chunk) = receivers[k % workers].recv() else {
                break;
            };
            let chunk = chunk?;
            if (options.interrupted)() {
                return Err(ImportError::Interrupted);
            }
            bar.inc(chunk.len() as u64);
            for item in chunk {
                let (s, id, record, tally, values) = match item {
                    Item::Decoded { shard } => {
                        found[shard] += 1;
                        report.rows += 1;
                        continue;
                    }
                    Item::Bad { shard, id, what } => {
                        if !what.starts_with("missing") {
                            found[shard] += 1;
                        }
                        let message = shards[shard].bad(&id.to_string(), what);
                        bad(options, report, "bad rows", message)?;
                        continue;
                    }
                    Item::Mapped {
                        shard,
                        id,
                        record,
                        tally,
                        index,
                    } => (shard, id, record, tally, index),
                };
                found[s] += 1;
                let at = format!("{}: key {:?}", shards[s].label, id.to_string());
                // The index values are checked before the record is
                // appended: a refused value leaves nothing half-counted.
                check_index(index, &values, &at)?;
                if append(options, report, writer.as_deref_mut(), *record, 1, 1, at)? {
                    report.tally.absorb(tally);
                    for (col, v) in index.values_mut().zip(values) {
                        col.push(v);
                    }
                }
            }
        }
        Ok(())
    });
    bar.finish_and_clear();
    result?;
    Ok(found)
}

/// One planned row of a group: its order value, shard and id.
#[derive(Clone, Copy)]
struct Planned {
    order: i64,
    shard: u32,
    id: u64,
}

/// `--group-by`: a pass over the keys, then one record per group.
fn run_grouped(
    options: &Options,
    shards: &[Shard],
    mut writer: Option<&mut Writer>,
    index: &mut BTreeMap<String, IndexColumn>,
    report: &mut Report,
    total: u64,
) -> Res<Vec<u64>> {
    let group_key = options.group_by.as_deref().expect("grouped");
    let limit = options.max_row_bytes;
    let mut groups: Vec<(Value, Vec<Planned>)> = Vec::new();
    let mut by_text: HashMap<String, usize> = HashMap::new();
    let mut found = vec![0u64; shards.len()];
    let mut d = Decompress::new(true);
    let mut buf = Vec::new();
    let scan = bar(options.progress, total, "scan keys");
    for (s, shard) in shards.iter().enumerate() {
        let txn = shard.env.read_txn().map_err(|e| lmdb_err(&shard.path, e))?;
        let mut pages = PageWatch::new(&shard.path);
        for id in shard.ids() {
            if (options.interrupted)() {
                return Err(ImportError::Interrupted);
            }
            scan.inc(1);
            let key = id.to_string();
            let Some(value) = shard
                .db
                .get(&txn, key.as_bytes())
                .map_err(|e| lmdb_err(&shard.path, e))?
            else {
                let what = "missing: below nextid and not in deleted_ids (ase raises KeyError)";
                bad(options, report, "bad rows", shard.bad(&key, what))?;
                continue;
            };
            found[s] += 1;
            pages.row();
            let keys =
                inflate(&mut d, value, &mut buf, limit).and_then(|()| decode::decode_keys(&buf));
            let (kvp, data) = match keys {
                Ok(k) => k,
                Err(what) => {
                    bad(options, report, "bad rows", shard.bad(&key, what))?;
                    continue;
                }
            };
            let Some(g) = lookup(&kvp, Some(&data), group_key) else {
                let what = format!("no key_value_pair or data scalar `{group_key}` (--group-by)");
                bad(options, report, "bad rows", shard.bad(&key, what))?;
                continue;
            };
            let order = match &options.order_by {
                None => 0,
                Some(o) => match lookup(&kvp, Some(&data), o).and_then(|v| v.as_i64()) {
                    Some(v) => v,
                    None => {
                        let what =
                            format!("no integer key_value_pair or data scalar `{o}` (--order-by)");
                        bad(options, report, "bad rows", shard.bad(&key, what))?;
                        continue;
                    }
                },
            };
            let text = g.to_string();
            let slot = match by_text.get(&text) {
                Some(&i) => i,
                None => {
                    by_text.insert(text, groups.len());
                    groups.push((g, Vec::new()));
                    groups.len() - 1
                }
            };
            groups[slot].1.push(Planned {
                order,
                shard: s as u32,
                id,
            });
        }
    }
    scan.finish_and_clear();
    drop(by_text);
    let txns: Vec<RoTxn<WithoutTls>> = shards
        .iter()
        .map(|s| s.env.read_txn().map_err(|e| lmdb_err(&s.path, e)))
        .collect::<Res<_>>()?;
    let planned: u64 = groups.iter().map(|g| g.1.len() as u64).sum();
    let bar = bar(options.progress, planned, "import");
    let mut watches: Vec<PageWatch> = shards.iter().map(|s| PageWatch::new(&s.path)).collect();
    for (value, mut rows) in groups {
        let name = format!("group {group_key}={value}");
        if options.order_by.is_some() {
            rows.sort_by_key(|p| p.order);
            if let Some(w) = rows.windows(2).find(|w| w[0].order == w[1].order) {
                let (a, b) = (&shards[w[0].shard as usize], &shards[w[1].shard as usize]);
                let what = format!(
                    "{name}: order-by value {} appears twice ({} key \"{}\", {} key \"{}\"): steps must increase",
                    w[0].order, a.label, w[0].id, b.label, w[1].id
                );
                bar.inc(rows.len() as u64);
                bad(
                    options,
                    report,
                    "groups with repeated order-by values",
                    what,
                )?;
                continue;
            }
        } else {
            for (k, p) in rows.iter_mut().enumerate() {
                p.order = k as i64;
            }
        }
        let mut parsed = Vec::with_capacity(rows.len());
        let mut steps = Vec::with_capacity(rows.len());
        let mut values: Vec<Option<Value>> = vec![None; index.len()];
        let mut index_error = None;
        let mut local = Tally::default();
        for p in &rows {
            if (options.interrupted)() {
                return Err(ImportError::Interrupted);
            }
            bar.inc(1);
            let shard = &shards[p.shard as usize];
            let txn = &txns[p.shard as usize];
            watches[p.shard as usize].row();
            let key = p.id.to_string();
            let row = match fetch(shard, txn, p.id, &mut d, &mut buf, limit)? {
                Ok(r) => r,
                Err(what) => {
                    bad(options, report, "bad rows", shard.bad(&key, what))?;
                    continue;
                }
            };
            for ((k, slot), _) in values
                .iter_mut()
                .zip(index.keys())
                .map(|(s, k)| ((k, s), ()))
            {
                let v = if k == group_key {
                    Some(value.clone())
                } else {
                    row_lookup(&row, k)
                };
                if parsed.is_empty() {
                    *slot = v;
                } else if *slot != v && index_error.is_none() {
                    index_error = Some(format!(
                        "{name}: --index-column {k}: {} in one row, {} in another ({} key \"{key}\")",
                        slot.as_ref().map_or("absent".into(), Value::to_string),
                        v.as_ref().map_or("absent".into(), Value::to_string),
                        shard.label
                    ));
                }
            }
            if options.decode_only {
                parsed.push(None);
                continue;
            }
            match mapping::parse(row, &shard.name, p.id, &mut local) {
                Ok(r) => {
                    parsed.push(Some(r));
                    steps.push(p.order);
                }
                Err(what) => bad(options, report, "bad rows", shard.bad(&key, what))?,
            }
        }
        if options.decode_only {
            report.rows += parsed.len() as u64;
            continue;
        }
        if let Some(e) = index_error {
            bad(options, report, "groups whose index value varies", e)?;
            continue;
        }
        let parsed: Vec<mapping::Parsed> = parsed.into_iter().flatten().collect();
        if parsed.is_empty() {
            continue;
        }
        let n = parsed.len() as u64;
        let mut meta = Map::new();
        meta.insert("group_by".into(), json!({ group_key: value }));
        if let Some(o) = &options.order_by {
            meta.insert("order_by".into(), json!(o));
        }
        meta.insert("rows".into(), json!(n));
        let shape = mapping::Shape {
            group_meta: Some(meta),
            steps,
        };
        let record = match mapping::build(parsed, shape, &mut local) {
            Ok(r) => r,
            Err(what) => {
                bad(
                    options,
                    report,
                    "groups that form no record",
                    format!("{name}: {what}"),
                )?;
                continue;
            }
        };
        check_index(index, &values, &name)?;
        if append(options, report, writer.as_deref_mut(), record, n, n, name)? {
            report.tally.absorb(local);
            for (col, v) in index.values_mut().zip(values) {
                col.push(v);
            }
        }
    }
    bar.finish_and_clear();
    Ok(found)
}
