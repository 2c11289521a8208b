//! `mrec`: write, dump, inspect and validate molrec collection files.

use clap::{Parser, Subcommand};
use molrec::lmdb::{write_collection, Reader, Writer, WriterOptions};
use molrec::model_json::collection_to_json;
use molrec::Error;
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering::SeqCst};

mod import_bench;
mod show;
use mrec_import as import;

/// mimalloc, not the system's allocator: reading a record whole makes and
/// frees a hundred small allocations (names, strings, arrays), where
/// glibc's malloc spends about a sixth of the read (docs/benchmark.md).
/// The library leaves the choice to the program that links it.
#[global_allocator]
static ALLOCATOR: mrec_cli::allocator::Mimalloc = mrec_cli::allocator::Mimalloc;

const EXIT_HELP: &str = "Exit codes:
  0  success (for `validate`: the file conforms)
  1  refused: the input breaks a spec clause (each printed on stderr as [clause-id]),
     or files that do not form one sharded set (`set (problem): shard NAME: ...`)
  2  usage error
  3  i/o or environment error (missing file or shard, full disk, lock held)
  4  `mrec import`: bad input (a row that is not what ASE writes), named by shard and key";

/// Write, dump, inspect and validate molrec collection files (`*.mrec.lmdb`).
#[derive(Parser)]
#[command(name = "mrec", version, after_help = EXIT_HELP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a collection from canonical JSON (docs/canonical-json.md) to a new file.
    Write {
        /// Canonical-JSON collection (`-` for stdin).
        model: PathBuf,
        /// Output `.mrec.lmdb` file.
        out: PathBuf,
        /// Replace an existing output file.
        #[arg(long)]
        overwrite: bool,
        /// Bytes of encoded records committed per transaction (`meta` is always in the last).
        #[arg(long, default_value_t = WriterOptions::default().batch_bytes)]
        batch_bytes: usize,
        /// LMDB page size of the new file (a power of two, 4096 to 32768).
        #[arg(long, default_value_t = WriterOptions::default().page_size)]
        page_size: u32,
    },
    /// Print the logical content (frames resolved) as canonical JSON.
    ///
    /// Of a sharded set (docs/shards.md): the set as one collection, its
    /// first shard's document, every record in order.
    Dump {
        /// A `.mrec.lmdb` file, or a set: several files, a directory, a
        /// glob pattern, a manifest.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
    /// Summarize a collection file or a sharded set.
    Info {
        /// A `.mrec.lmdb` file, or a set: several files, a directory, a
        /// glob pattern, a manifest.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
    /// Check a file against the spec; list every violation found.
    ///
    /// Violations (a `must` broken; readers refuse the file) are printed on
    /// stderr as `[clause-id] where: what` and set the exit status to 1.
    /// Findings (a `should` broken that readers accept, e.g. a value off
    /// the grid of its declared precision: the writer's defect) follow
    /// them as `[clause-id] (should) where: what` and leave the exit
    /// status alone.
    ///
    /// Of a sharded set: each shard's, named, and what the set requires
    /// (one declaration, shards as the manifest says, own index columns
    /// that line up).
    Validate {
        /// A `.mrec.lmdb` file, or a set: several files, a directory, a
        /// glob pattern, a manifest.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Also verify each shard's bytes against the content digest its
        /// manifest keeps (`mrec set verify`).
        #[arg(long)]
        digests: bool,
    },
    /// Sharded sets: many collection files read as one (docs/shards.md).
    Set {
        #[command(subcommand)]
        command: SetCommand,
    },
    /// Import another format into a new collection (docs/import.md).
    Import {
        #[command(subcommand)]
        format: ImportCommand,
    },
    /// Speak the harness's subprocess protocol on stdin/stdout (docs/adapters.md).
    Adapter,
    /// Benchmark writing and reading on a generated, seed-shaped workload
    /// (docs/benchmark.md). Build with --release.
    Bench {
        /// Records to generate (83951 is the seed dataset's full scale).
        #[arg(long, default_value_t = 8_400, value_parser = clap::value_parser!(u64).range(1..))]
        records: u64,
        /// Seed of the workload and of the shuffled read order.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Timed rounds, each one pass of every read figure, after one warm-up round.
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
        passes: u64,
        /// Directory for the files (default: a new temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Keep the files after the run.
        #[arg(long)]
        keep: bool,
        /// Also write every figure as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// No progress bars or phase lines on stderr.
        #[arg(long)]
        quiet: bool,
    },
}

#[derive(Subcommand)]
enum SetCommand {
    /// Write the manifest (`mrec-set.json`) of the `*.mrec.lmdb` files of
    /// DIR: each shard's counts, size and content digest (xxh3_128), the
    /// digest of the declaration they share (refused, naming the shard,
    /// when one differs). Of one FILE: `FILE.mrec-set.json` beside it, so
    /// that the file can be verified.
    Manifest {
        /// The shards' directory, or one collection file.
        #[arg(value_name = "DIR|FILE")]
        path: PathBuf,
    },
    /// Recompute each shard's content digest and compare it with its
    /// manifest's (a set's `mrec-set.json`; of a file given alone,
    /// `FILE.mrec-set.json`). Exit 0 when every shard is verified; 1 naming
    /// each shard whose bytes changed (the digest expected and the one
    /// found) or that has no digest to compare with; 3 for a shard that is
    /// not there.
    Verify {
        /// A directory with a manifest, a manifest, or files (each with its
        /// own manifest beside it).
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ImportCommand {
    /// ASE-LMDB shards (`ase-db-backends`' aselmdb, as FairChem uses it):
    /// `mrec import aselmdb IN... OUT.mrec.lmdb`. One row is one record
    /// of one frame, unless `--group-by`. The mapping: docs/import.md.
    Aselmdb {
        /// The shards (`IN...`), then the output `.mrec.lmdb` file (`OUT`).
        #[arg(required = true, num_args = 2.., value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// One record per value of this key (a key_value_pair, else a
        /// scalar of `data`), whose frames are its rows.
        #[arg(long, value_name = "KEY")]
        group_by: Option<String>,
        /// With --group-by: the frames in the order of this integer key,
        /// whose value is the step (default: shard and id order).
        #[arg(long, value_name = "KEY", requires = "group_by")]
        order_by: Option<String>,
        /// An own index column of the collection: one value per record
        /// from this key (repeatable).
        #[arg(long = "index-column", value_name = "KEY")]
        index_columns: Vec<String>,
        /// Count and report bad rows and refused records instead of stopping.
        #[arg(long)]
        skip_bad: bool,
        /// Replace an existing output file.
        #[arg(long)]
        overwrite: bool,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
        /// The most bytes one row may inflate to.
        #[arg(long, default_value_t = 256 << 20)]
        max_row_bytes: usize,
        /// Read and decode every row, write nothing (a benchmark baseline).
        #[arg(long, hide = true)]
        decode_only: bool,
        /// Threads that read, decode and map rows (default: the cores, at
        /// most 4; `--decode-only`: 1, the baseline).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
        threads: Option<u64>,
    },
    /// Check the LMDB page structure of shards (what `import aselmdb`
    /// runs in a child process first).
    #[command(hide = true)]
    CheckPages {
        /// The shards.
        paths: Vec<PathBuf>,
    },
    /// Benchmark: import speed against decoding the same source, and peak
    /// memory at two scales (build with --release).
    Bench {
        /// Rows of the small scale; the large one has four times as many.
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
        rows: u64,
        /// Runs of each figure (the median is printed).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
        runs: u64,
        /// Directory for the files (default: a temporary one, deleted after).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Write {
            model,
            out,
            overwrite,
            batch_bytes,
            page_size,
        } => write(
            &model,
            &out,
            WriterOptions {
                overwrite,
                batch_bytes,
                page_size,
                ..WriterOptions::default()
            },
        ),
        Command::Dump { paths } => show::dump(&paths),
        Command::Info { paths } => show::info(&paths),
        Command::Validate { paths, digests } => return show::validate(&paths, digests),
        Command::Set { command } => match command {
            SetCommand::Manifest { path } => show::write_manifest(&path),
            SetCommand::Verify { paths } => return show::verify(&paths),
        },
        Command::Adapter => adapter(),
        Command::Import { format } => return import_command(format),
        Command::Bench {
            records,
            seed,
            passes,
            dir,
            keep,
            json,
            quiet,
        } => bench(
            mrec_cli::bench::BenchOptions {
                records,
                seed,
                passes: passes as usize,
                dir,
                keep,
                progress: !quiet,
                allocator: "mimalloc (no transparent huge pages)".into(),
            },
            json.as_deref(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mrec: {e}");
            exit_code(&e)
        }
    }
}

fn exit_code(e: &Error) -> ExitCode {
    match e {
        Error::Refused { .. } | Error::Uncommitted => ExitCode::from(1),
        Error::Set { problem, .. } if *problem != molrec::SetProblem::Missing => ExitCode::from(1),
        Error::InShard { error, .. } => exit_code(error),
        _ => ExitCode::from(3),
    }
}

/// `mrec write`'s state for its interrupt handler.
static WRITE_STATE: AtomicU8 = AtomicU8::new(PARSING);
/// Reading the model: an interrupt exits at once (nothing is written yet).
const PARSING: u8 = 0;
/// Appending records: an interrupt asks the loop to stop after the record
/// it is writing, which deletes the partial file; a second one exits.
const WRITING: u8 = 1;
const INTERRUPTED: u8 = 2;

fn write(model: &Path, out: &Path, options: WriterOptions) -> Result<(), Error> {
    let handler = ctrlc::set_handler(|| {
        let asked = WRITE_STATE.compare_exchange(WRITING, INTERRUPTED, SeqCst, SeqCst);
        if asked.is_err() {
            eprintln!("\nmrec write: interrupted");
            std::process::exit(130);
        }
    });
    if let Err(e) = handler {
        eprintln!("mrec write: no interrupt handler ({e}): an interrupt leaves the partial file");
    }
    let mut input = stream_json::Input::open(model)?;
    // Pass 1: everything but the records (skipped as they are read).
    let (header, index) = stream_json::header(&mut input)?;
    // Before `create`: an interrupt while it starts the partial file is
    // seen at the first record.
    WRITE_STATE.store(WRITING, SeqCst);
    let mut writer = Writer::create(out, header, options)?;
    // Pass 2: the records, one at a time.
    let mut stopped = false;
    let streamed = stream_json::records(&mut input, |record| {
        if WRITE_STATE.load(SeqCst) == INTERRUPTED {
            stopped = true;
            return Err(Error::Io(std::io::ErrorKind::Interrupted.into()));
        }
        writer.append(record)
    });
    if stopped {
        // Deletes the partial file; `out` stays as it was.
        drop(writer);
        eprintln!("\nmrec write: interrupted; {} is as it was", out.display());
        std::process::exit(130);
    }
    streamed?;
    writer.finish(index).map(|_| ())
}

/// `mrec write`'s input read in two passes, so that memory holds one
/// record at a time, never the document: the first pass reads every key
/// but `records` (whose values it skips as it parses them) and checks
/// them as `collection_from_json` does, because `meta`,
/// `sequence_schema` and `forcefield` are needed before the first
/// record is written and may come after `records` (`mrec dump` writes
/// keys in sorted order: `sequence_schema` last); the second pass reads
/// the records one by one and hands each to the writer. A file is read
/// twice from disk; stdin is first copied to an unnamed temporary file
/// (disk, not memory, holds the document). Peak memory: the largest
/// record (as a JSON value and as the model), the header and `index`
/// values, and the writer's own (two batches).
mod stream_json {
    use molrec::model::Record;
    use molrec::model::{Column, Header};
    use molrec::model_json::{collection_from_json, index_path, key_path, record_from_json};
    use molrec::typed_json::brief;
    use molrec::{Clause, Error};
    use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde_json::{Map, Value};
    use std::collections::BTreeMap;
    use std::fmt;
    use std::fs::File;
    use std::io::{BufReader, Seek, SeekFrom};
    use std::path::{Path, PathBuf};

    const KEYS: &[&str] = &["meta", "sequence_schema", "index", "forcefield", "records"];

    /// The document, seekable.
    pub struct Input {
        file: File,
        path: PathBuf,
    }

    impl Input {
        /// Opens the document. Stdin (`-`) and anything else that is not
        /// a regular file (a pipe, `<(...)`) are first copied to an
        /// unnamed temporary file, which the two passes read.
        pub fn open(model: &Path) -> Result<Input, Error> {
            if model != Path::new("-") {
                let file = File::open(model).map_err(|e| Error::io_at(model, e))?;
                let regular = file.metadata().is_ok_and(|m| m.is_file());
                if regular {
                    return Ok(Input {
                        file,
                        path: model.to_path_buf(),
                    });
                }
                return Input::spooled(file, model);
            }
            Input::spooled(std::io::stdin().lock(), model)
        }

        fn spooled(mut from: impl std::io::Read, model: &Path) -> Result<Input, Error> {
            let dir = std::env::temp_dir();
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_nanos());
            let name = format!("mrec-write-input-{}-{nanos}.json", std::process::id());
            let path = dir.join(name);
            let mut file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(|e| Error::io_at(&path, e))?;
            // Unnamed from here on: the disk space goes with the process.
            let _ = std::fs::remove_file(&path);
            std::io::copy(&mut from, &mut file).map_err(|e| Error::io_at(&dir, e))?;
            Ok(Input {
                file,
                path: model.to_path_buf(),
            })
        }

        fn reader(&mut self) -> Result<BufReader<&File>, Error> {
            self.file
                .seek(SeekFrom::Start(0))
                .map_err(|e| Error::io_at(&self.path, e))?;
            Ok(BufReader::with_capacity(256 << 10, &self.file))
        }
    }

    fn not_json(e: serde_json::Error) -> Error {
        Error::refused(Clause::ModelJson, "", format!("not a JSON text: {e}"))
    }

    /// An error met inside a visitor, kept apart from serde's own.
    type Kept = std::cell::RefCell<Option<Error>>;

    fn keep<E: de::Error>(kept: &Kept, e: Error) -> E {
        let message = e.to_string();
        *kept.borrow_mut() = Some(e);
        E::custom(message)
    }

    /// Pass 1: the header and the index, checked as `collection_from_json`
    /// checks them (the same refusals, the same paths).
    pub fn header(input: &mut Input) -> Result<(Header, BTreeMap<String, Column>), Error> {
        let kept = Kept::default();
        let mut de = serde_json::Deserializer::from_reader(input.reader()?);
        let found = DocumentVisitor {
            kept: &kept,
            records: None,
        }
        .deserialize(&mut de);
        let found = match (found, kept.into_inner()) {
            (_, Some(e)) => return Err(e),
            (Err(e), None) => return Err(not_json(e)),
            (Ok(found), None) => found,
        };
        de.end().map_err(not_json)?;
        let c = collection_from_json(&Value::Object(found))?;
        Ok((c.header, c.index))
    }

    /// Pass 2: hands each record to `each`, in order; its first error stops.
    pub fn records(
        input: &mut Input,
        mut each: impl FnMut(Record) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let kept = Kept::default();
        let mut de = serde_json::Deserializer::from_reader(input.reader()?);
        let done = DocumentVisitor {
            kept: &kept,
            records: Some(&mut each),
        }
        .deserialize(&mut de);
        match (done, kept.into_inner()) {
            (_, Some(e)) => Err(e),
            (Err(e), None) => Err(not_json(e)),
            (Ok(_), None) => Ok(()),
        }
    }

    type Each<'a> = &'a mut dyn FnMut(Record) -> Result<(), Error>;

    /// The top-level object. Without `records`: keeps every other key's
    /// value and `"records": []` (the array's elements skipped). With it:
    /// skips every other key and hands each record to the callback.
    struct DocumentVisitor<'a, 'b> {
        kept: &'a Kept,
        records: Option<Each<'b>>,
    }

    impl<'de> DeserializeSeed<'de> for DocumentVisitor<'_, '_> {
        type Value = Map<String, Value>;
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for DocumentVisitor<'_, '_> {
        type Value = Map<String, Value>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a collection (a JSON object)")
        }

        fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = Map::new();
            let mut seen: Vec<String> = Vec::new();
            while let Some(key) = map.next_key::<String>()? {
                // A repeated key (which a whole-document parse took the
                // last of) is refused: the passes could not agree on it.
                if seen.contains(&key) {
                    return Err(keep(
                        self.kept,
                        Error::refused(
                            Clause::ModelJson,
                            key_path("", &key),
                            format!("the key {key:?} appears twice in the collection"),
                        ),
                    ));
                }
                seen.push(key.clone());
                if !KEYS.contains(&key.as_str()) {
                    return Err(keep(
                        self.kept,
                        Error::refused(
                            Clause::ModelJson,
                            key_path("", &key),
                            format!(
                                "unknown key {key:?} in a collection (allowed: {})",
                                KEYS.join(", ")
                            ),
                        ),
                    ));
                }
                match (&mut self.records, key.as_str()) {
                    (None, "records") => {
                        map.next_value_seed(RecordsSeed {
                            kept: self.kept,
                            each: None,
                        })?;
                        found.insert(key, Value::Array(Vec::new()));
                    }
                    (None, _) => {
                        found.insert(key, map.next_value()?);
                    }
                    (Some(each), "records") => {
                        map.next_value_seed(RecordsSeed {
                            kept: self.kept,
                            each: Some(&mut **each),
                        })?;
                    }
                    (Some(_), _) => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(found)
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut n = 0;
            while seq.next_element::<IgnoredAny>()?.is_some() {
                n += 1;
            }
            Err(self.not_object(&format!("an array of {n}")))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Err(self.not_object(&brief(&Value::from(v))))
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Err(self.not_object(&brief(&Value::from(v))))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Err(self.not_object(&brief(&Value::from(v))))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Err(self.not_object(&brief(&Value::from(v))))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Err(self.not_object(&brief(&Value::from(v))))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(self.not_object("null"))
        }
    }

    impl DocumentVisitor<'_, '_> {
        fn not_object<E: de::Error>(&self, got: &str) -> E {
            keep(
                self.kept,
                Error::refused(
                    Clause::ModelJson,
                    "",
                    format!("expected a collection (a JSON object), got {got}"),
                ),
            )
        }
    }

    /// `records`: an array, whose elements are skipped (`each` is `None`)
    /// or read one at a time into a record.
    struct RecordsSeed<'a, 'b> {
        kept: &'a Kept,
        each: Option<Each<'b>>,
    }

    impl<'de> DeserializeSeed<'de> for RecordsSeed<'_, '_> {
        type Value = ();
        fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }

    impl<'de> Visitor<'de> for RecordsSeed<'_, '_> {
        type Value = ();

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("the records (an array)")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let Some(each) = self.each else {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                return Ok(());
            };
            let mut i = 0;
            while let Some(value) = seq.next_element::<Value>()? {
                let record = record_from_json(&value, &index_path("records", i))
                    .map_err(|e| keep(self.kept, e))?;
                drop(value);
                each(record).map_err(|e| keep(self.kept, e))?;
                i += 1;
            }
            Ok(())
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Err(self.not_array("an object"))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
            Err(self.not_array(&brief(&Value::from(v))))
        }
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
            Err(self.not_array(&brief(&Value::from(v))))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
            Err(self.not_array(&brief(&Value::from(v))))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
            Err(self.not_array(&brief(&Value::from(v))))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
            Err(self.not_array(&brief(&Value::from(v))))
        }
        fn visit_unit<E: de::Error>(self) -> Result<(), E> {
            Err(self.not_array("null"))
        }
    }

    impl RecordsSeed<'_, '_> {
        fn not_array<E: de::Error>(&self, got: &str) -> E {
            keep(
                self.kept,
                Error::refused(
                    Clause::ModelJson,
                    "records",
                    format!("expected the records (an array), got {got}"),
                ),
            )
        }
    }
}

fn interrupted() -> bool {
    WRITE_STATE.load(SeqCst) == INTERRUPTED
}

/// `mrec import`: exit 0, or 1 (a refusal of the library), 3 (i/o), 4
/// (bad input), 130 (interrupted; the output is as it was).
fn import_command(command: ImportCommand) -> ExitCode {
    use import::ImportError;
    match command {
        ImportCommand::CheckPages { paths } => match import::check_pages(&paths) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(4)
            }
        },
        ImportCommand::Bench { rows, runs, dir } => {
            let options = import_bench::BenchOptions {
                rows,
                runs: runs as usize,
                dir,
            };
            match import_bench::run(&options) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("mrec import bench: {e}");
                    ExitCode::from(3)
                }
            }
        }
        ImportCommand::Aselmdb {
            mut paths,
            group_by,
            order_by,
            index_columns,
            skip_bad,
            overwrite,
            quiet,
            max_row_bytes,
            decode_only,
            threads,
        } => {
            let out = paths.pop().expect("clap requires two paths");
            let handler = ctrlc::set_handler(|| {
                let asked = WRITE_STATE.compare_exchange(WRITING, INTERRUPTED, SeqCst, SeqCst);
                if asked.is_err() {
                    eprintln!("\nmrec import: interrupted");
                    std::process::exit(130);
                }
            });
            if let Err(e) = handler {
                eprintln!(
                    "mrec import: no interrupt handler ({e}): an interrupt leaves the partial file"
                );
            }
            WRITE_STATE.store(WRITING, SeqCst);
            let check_command = std::env::current_exe()
                .ok()
                .map(|exe| vec![exe.into(), "import".into(), "check-pages".into()]);
            let options = import::Options {
                inputs: paths,
                origin: import::Origin::AseLmdb { check_command },
                out: out.clone(),
                group_by,
                order_by,
                index_columns,
                skip_bad,
                progress: !quiet,
                decode_only,
                workers: threads.map_or_else(
                    || {
                        if decode_only {
                            1
                        } else {
                            std::thread::available_parallelism().map_or(1, |n| n.get().min(4))
                        }
                    },
                    |t| t as usize,
                ),
                max_row_bytes,
                writer: WriterOptions {
                    overwrite,
                    ..WriterOptions::default()
                },
                interrupted,
            };
            match import::run(&options) {
                Ok(report) => {
                    print!("{}", report.text(&out));
                    let rate = report.rows_read() as f64 / report.secs.max(1e-9);
                    let peak = import::peak_memory_kib()
                        .map_or(String::new(), |k| format!(", peak memory {k} KiB (VmHWM)"));
                    eprintln!(
                        "mrec import: {} rows in {:.2} s ({rate:.0} rows/s; finish {:.2} s){peak}",
                        report.rows_read(),
                        report.secs,
                        report.finish_secs
                    );
                    ExitCode::SUCCESS
                }
                Err(ImportError::Interrupted) => {
                    eprintln!("\nmrec import: interrupted; {} is as it was", out.display());
                    ExitCode::from(130)
                }
                Err(ImportError::Bad(m)) => {
                    eprintln!("mrec import: {m}");
                    ExitCode::from(4)
                }
                Err(ImportError::Mrec(e)) => {
                    eprintln!("mrec import: {e}");
                    exit_code(&e)
                }
            }
        }
    }
}

/// `mrec bench`: runs the benchmark, prints the table, writes the JSON.
fn bench(options: mrec_cli::bench::BenchOptions, json_out: Option<&Path>) -> Result<(), Error> {
    if cfg!(debug_assertions) {
        eprintln!("mrec bench: this is a debug build; build with --release for meaningful figures");
    }
    // A path the figures cannot be written to fails now, not after a run
    // of minutes. A file this creates is removed if the run fails.
    let created = match json_out {
        Some(path) => {
            let existed = path.exists();
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(path)
                .map_err(|e| Error::io_at(path, e))?;
            (!existed).then_some(path)
        }
        None => None,
    };
    // Ctrl-C (or SIGTERM) deletes what the run wrote, as its end would,
    // instead of leaving up to ten gigabytes behind.
    let interrupted_json = created.map(Path::to_path_buf);
    let keep = options.keep;
    let handler = ctrlc::set_handler(move || {
        mrec_cli::bench::remove_files_of_runs_in_progress();
        if let Some(path) = &interrupted_json {
            let _ = std::fs::remove_file(path);
        }
        let files = if keep { "kept (--keep)" } else { "deleted" };
        eprintln!("\nmrec bench: interrupted; the files it wrote are {files}");
        std::process::exit(130);
    });
    if let Err(e) = handler {
        eprintln!("mrec bench: no interrupt handler ({e}): an interrupt leaves the files behind");
    }
    let report = match mrec_cli::bench::run(&options) {
        Ok(report) => report,
        Err(e) => {
            if let Some(path) = created {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
    };
    print!("{}", report.table());
    if let Some(path) = json_out {
        let text = serde_json::to_string_pretty(report.json()).map_err(|e| Error::Io(e.into()))?;
        std::fs::write(path, text + "\n").map_err(|e| Error::io_at(path, e))?;
    }
    Ok(())
}

/// The harness protocol: a greeting, then one answer per request line.
fn adapter() -> Result<(), Error> {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    let hello = json!({
        "type": "hello", "protocol": 1, "name": "molrec-reference",
        "version": env!("CARGO_PKG_VERSION"),
        "capabilities": {"write": true, "read": true},
    });
    writeln!(out, "{hello}")?;
    out.flush()?;
    for line in stdin.lock().lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let request: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("mrec adapter: request is not JSON: {e}");
                continue;
            }
        };
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        let path = request
            .get("path")
            .and_then(Value::as_str)
            .map(PathBuf::from);
        let answer = match (request.get("op").and_then(Value::as_str), path) {
            (Some("bye"), _) => break,
            (Some("write"), Some(path)) => {
                let collection = request.get("collection").cloned().unwrap_or(Value::Null);
                let result = molrec::model_json::collection_from_json(&collection).and_then(|c| {
                    write_collection(
                        &path,
                        c,
                        WriterOptions {
                            overwrite: true,
                            ..WriterOptions::default()
                        },
                    )
                });
                answer(id, result.map(|_| None))
            }
            (Some("read"), Some(path)) => {
                let result = Reader::open_checked(&path).and_then(|r| r.read_collection());
                answer(id, result.map(|c| Some(collection_to_json(&c))))
            }
            _ => json!({"id": id, "status": "unsupported"}),
        };
        writeln!(out, "{answer}")?;
        out.flush()?;
    }
    Ok(())
}

fn answer(id: Value, result: Result<Option<Value>, Error>) -> Value {
    match result {
        Ok(None) => json!({"id": id, "status": "ok"}),
        Ok(Some(collection)) => json!({"id": id, "status": "ok", "collection": collection}),
        Err(e) => json!({
            "id": id, "status": "refused", "message": e.to_string(),
            "clause": e.clause().map(|c| c.id()),
        }),
    }
}
