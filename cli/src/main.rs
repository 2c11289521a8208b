//! `mrec`: write, dump, inspect and validate molrec collection files.

use clap::{Parser, Subcommand};
use molrec::lmdb::{write_collection, Reader, Writer, WriterOptions};
use molrec::model::Collection;
use molrec::model_json::{collection_from_str, collection_to_json};
use molrec::Error;
use serde_json::{json, Value};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU8, Ordering::SeqCst};

/// mimalloc, not the system's allocator: reading a record whole makes and
/// frees a hundred small allocations (names, strings, arrays), where
/// glibc's malloc spends about a sixth of the read (docs/benchmark.md).
/// The library leaves the choice to the program that links it.
#[global_allocator]
static ALLOCATOR: mrec_cli::allocator::Mimalloc = mrec_cli::allocator::Mimalloc;

const EXIT_HELP: &str = "Exit codes:
  0  success (for `validate`: the file conforms)
  1  refused: the input breaks a spec clause (each printed on stderr as [clause-id])
  2  usage error
  3  i/o or environment error (missing file, full disk, lock held)";

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
    Dump {
        /// A `.mrec.lmdb` file.
        file: PathBuf,
    },
    /// Summarize a collection file.
    Info {
        /// A `.mrec.lmdb` file.
        file: PathBuf,
    },
    /// Check a file against the spec; list every violation found.
    ///
    /// Violations (a `must` broken; readers refuse the file) are printed on
    /// stderr as `[clause-id] where: what` and set the exit status to 1.
    /// Findings (a `should` broken that readers accept, e.g. a value off
    /// the grid of its declared precision: the writer's defect) follow
    /// them as `[clause-id] (should) where: what` and leave the exit
    /// status alone.
    Validate {
        /// A `.mrec.lmdb` file.
        file: PathBuf,
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
            },
        ),
        Command::Dump { file } => dump(&file),
        Command::Info { file } => info(&file),
        Command::Validate { file } => return validate(&file),
        Command::Adapter => adapter(),
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
        _ => ExitCode::from(3),
    }
}

fn read_model(model: &Path) -> Result<String, Error> {
    if model == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(model).map_err(|e| Error::io_at(model, e))
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
    let Collection {
        header,
        index,
        records,
    } = collection_from_str(&read_model(model)?)?;
    // Before `create`: an interrupt while it starts the partial file is
    // seen at the first record.
    WRITE_STATE.store(WRITING, SeqCst);
    let mut writer = Writer::create(out, header, options)?;
    for record in records {
        if WRITE_STATE.load(SeqCst) == INTERRUPTED {
            // Deletes the partial file; `out` stays as it was.
            drop(writer);
            eprintln!("\nmrec write: interrupted; {} is as it was", out.display());
            std::process::exit(130);
        }
        writer.append(record)?;
    }
    writer.finish(index)
}

fn dump(file: &Path) -> Result<(), Error> {
    let collection = Reader::open_checked(file)?.read_collection()?;
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &collection_to_json(&collection))
        .map_err(|e| Error::Io(e.into()))?;
    writeln!(out)?;
    Ok(())
}

fn info(file: &Path) -> Result<(), Error> {
    let reader = Reader::open_checked(file)?;
    let size = std::fs::metadata(file)?.len();
    let units = reader
        .collection_meta()
        .get("units")
        .cloned()
        .unwrap_or(Value::Null);
    let schema = reader.schema();
    let blocks: Vec<String> = schema
        .blocks
        .iter()
        .map(|(name, b)| {
            format!(
                "{name}({})",
                b.columns.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    let meta: Vec<String> = schema
        .meta
        .iter()
        .map(|(k, d)| format!("{k}:{}", d.tag.name()))
        .collect();
    let index: Vec<String> = reader
        .index_columns()?
        .iter()
        .map(|(k, c)| format!("{k}:{}", c.dtype()))
        .collect();
    println!("file          {} ({size} bytes)", file.display());
    println!("records       {}", reader.n_records());
    println!("frames        {}", reader.n_frames());
    println!("units         {units}");
    println!(
        "blocks        {}",
        if blocks.is_empty() {
            "-".into()
        } else {
            blocks.join("; ")
        }
    );
    println!(
        "step meta     {}",
        if meta.is_empty() {
            "-".into()
        } else {
            meta.join(", ")
        }
    );
    println!(
        "own index     {}",
        if index.is_empty() {
            "-".into()
        } else {
            index.join(", ")
        }
    );
    println!(
        "force field   {}",
        if reader.forcefield()?.is_some() {
            "yes"
        } else {
            "no"
        }
    );
    Ok(())
}

/// Opens the file, then reports `Reader::violations` (every failing part,
/// not only the first: the exit status) and then `Reader::findings` (the
/// `should`s broken, which readers accept: printed, never an exit status).
fn validate(file: &Path) -> ExitCode {
    let reader = match Reader::open_checked(file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mrec: {e}");
            return exit_code(&e);
        }
    };
    let violations = reader.violations();
    let findings = reader.findings();
    for v in &violations {
        eprintln!("{v}");
    }
    for f in &findings {
        eprintln!("{f}");
    }
    let should = match findings.len() {
        0 => String::new(),
        n => format!("; {n} finding(s) of level should (readers accept these)"),
    };
    if violations.is_empty() {
        println!(
            "{}: conforms ({} records, {} frames){should}",
            file.display(),
            reader.n_records(),
            reader.n_frames()
        );
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "{}: {} violation(s){should}",
        file.display(),
        violations.len()
    );
    violations
        .iter()
        .map(exit_code)
        .max_by_key(|c| format!("{c:?}"))
        .unwrap_or(ExitCode::from(1))
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
                answer(id, result.map(|()| None))
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
