//! `harness`: run the molrec conformance suites against an implementation.

use clap::{Parser, Subcommand};
use harness::adapter::reference::Reference;
use harness::adapter::{
    Implementation, Limits, Subprocess, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_FAILURES,
    DEFAULT_TIMEOUT,
};
use harness::report::{Expectations, Report, SuiteInfo};
use harness::runner::{run_all, scratch_dir, Verdict};
use harness::suite::{lint, Layout};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Conformance harness for molrec collections and their LMDB binding.
#[derive(Parser)]
#[command(
    name = "harness",
    version,
    after_help = "Exit codes: 0 every result as expected; 1 an unexpected result; 2 usage or setup error."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the suites and write the reports.
    Run {
        /// The implementation as a command speaking docs/adapters.md (default: the bundled reference, in process).
        #[arg(long)]
        adapter: Option<String>,
        /// Known failures (TOML: [[expected-failure]] case = "...", reason = "...").
        #[arg(long)]
        expectations: Option<PathBuf>,
        /// Directory for report.json, junit.xml, report.md, report.html.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Only trials whose name contains this.
        #[arg(long)]
        filter: Option<String>,
        /// Seconds an adapter may take for its greeting and for each whole answer.
        #[arg(long, default_value_t = DEFAULT_TIMEOUT.as_secs())]
        timeout: u64,
        /// Failed requests in a row (timeouts, crashes, malformed answers) after
        /// which an adapter is not asked again and its remaining trials are errors (0: never).
        #[arg(long, default_value_t = DEFAULT_MAX_FAILURES)]
        max_failures: u32,
        /// Seconds the whole run may take per adapter; past it, its remaining trials are errors.
        #[arg(long)]
        deadline: Option<u64>,
        /// The longest answer line an adapter may send, MiB; a longer one is an error.
        #[arg(long, default_value_t = DEFAULT_MAX_ANSWER_BYTES >> 20)]
        max_answer_mib: u64,
        /// Repository root holding suites/, fixtures/ and spec-map.toml.
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Check the suites: duplicate ids, unknown clauses, missing or unused fixtures.
    Lint {
        /// Repository root.
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Check one `.mrec.lmdb` file with the harness's own code (its LMDB
    /// pages, then the binding's file-level rules), as `run` checks every
    /// file an implementation writes; prints `[clause] message` per finding.
    Inspect {
        /// The file.
        file: PathBuf,
    },
    /// Regenerate fixtures/golden/ with the reference (never done by a test).
    Golden {
        /// Repository root.
        #[arg(long)]
        root: Option<PathBuf>,
    },
}

fn layout(root: Option<PathBuf>) -> Layout {
    root.map(|r| Layout::at(&r))
        .unwrap_or_else(Layout::repository)
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run {
            adapter,
            expectations,
            report,
            filter,
            timeout,
            max_failures,
            deadline,
            max_answer_mib,
            root,
        } => {
            let limits = Limits {
                timeout: Duration::from_secs(timeout),
                max_failures,
                max_answer_bytes: max_answer_mib.saturating_mul(1 << 20),
                deadline: deadline.map(Duration::from_secs),
            };
            run(layout(root), adapter, expectations, report, filter, limits)
        }
        Command::Lint { root } => {
            let problems = lint(&layout(root));
            for p in &problems {
                eprintln!("{p}");
            }
            if problems.is_empty() {
                println!("suites are clean");
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Command::Inspect { file } => {
            let findings = harness::inspect::inspect_file(&file, None);
            for f in &findings {
                eprintln!("[{}] {}", f.clause, f.message);
            }
            if findings.is_empty() {
                println!("{}: no findings", file.display());
                ExitCode::SUCCESS
            } else {
                eprintln!("{}: {} finding(s)", file.display(), findings.len());
                ExitCode::from(1)
            }
        }
        Command::Golden { root } => match harness::golden::regenerate(&layout(root)) {
            Ok(written) => {
                for w in written {
                    println!("wrote {}", w.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("harness: {e}");
                ExitCode::from(2)
            }
        },
    }
}

fn run(
    layout: Layout,
    adapter: Option<String>,
    expectations: Option<PathBuf>,
    report_dir: Option<PathBuf>,
    filter: Option<String>,
    limits: Limits,
) -> ExitCode {
    let expectations = match expectations.map(std::fs::read_to_string) {
        None => Expectations::default(),
        Some(Ok(text)) => match Expectations::parse(&text) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("harness: expectations: {e}");
                return ExitCode::from(2);
            }
        },
        Some(Err(e)) => {
            eprintln!("harness: expectations: {e}");
            return ExitCode::from(2);
        }
    };
    let workdir = scratch_dir("run");
    end_adapters_on_signals(workdir.clone());
    let mut imp: Box<dyn Implementation> = match adapter {
        None => Box::new(Reference::new()),
        Some(cmd) => match Subprocess::spawn_with(&cmd, limits) {
            Ok(s) => Box::new(s),
            Err(e) => {
                eprintln!("harness: cannot start `{cmd}`: {e}");
                return ExitCode::from(2);
            }
        },
    };
    let mut reference = Reference::new();
    let description = imp.describe().clone();
    eprintln!(
        "running the suites against {} {}",
        description.name, description.version
    );
    let results = run_all(
        &layout,
        imp.as_mut(),
        &mut reference,
        &workdir,
        filter.as_deref(),
        |r| {
            let mark = match r.verdict {
                Verdict::Pass => "ok",
                Verdict::PassUnnamed => "ok (unnamed refusal)",
                Verdict::Fail => "FAIL",
                Verdict::Error => "ERROR",
                Verdict::Unsupported => "unsupported",
            };
            eprintln!("{:<70} {mark}", r.trial);
        },
    );
    let _ = std::fs::remove_dir_all(&workdir);
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    let trial_names: Vec<String> = results.iter().map(|r| r.trial.clone()).collect();
    let unknown = expectations.unknown(&trial_names);
    let suites = layout
        .suites()
        .unwrap_or_default()
        .iter()
        .map(|s| SuiteInfo {
            module: s.module.clone(),
            version: s.version,
        })
        .collect();
    let spec = match layout.spec_map() {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    let report = Report::new(description, suites, results, &expectations).with_spec(&spec);
    if let Some(dir) = report_dir {
        if let Err(e) = report.write_all(&dir, &spec) {
            eprintln!("harness: cannot write reports to {}: {e}", dir.display());
            return ExitCode::from(2);
        }
        eprintln!("reports written to {}", dir.display());
    }
    let s = &report.summary;
    // The plain closing line CI readers recognize.
    println!(
        "harness: {} passed, {} failed, {} skipped ({} unnamed refusals, {} expected failures, {} unexpected passes, {} errors)",
        s.pass + s.expected_failure,
        s.fail + s.error + s.unexpected_pass,
        s.unsupported,
        s.pass_unnamed,
        s.expected_failure,
        s.unexpected_pass,
        s.error
    );
    for u in &unknown {
        eprintln!("harness: expectation names no trial: {u}");
    }
    if report.has_unexpected() || !unknown.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// SIGINT, SIGTERM and SIGHUP end every adapter (`bye`, a second's grace,
/// then their process groups killed) and remove the run's scratch
/// directory; the harness then dies of the signal, so its exit status is
/// the signal's. A harness that returns or panics drops its adapters,
/// which does the same.
#[cfg(unix)]
fn end_adapters_on_signals(workdir: PathBuf) {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = match signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP]) {
        Ok(signals) => signals,
        Err(e) => {
            eprintln!(
                "harness: cannot handle signals ({e}); a stopped run may leave adapters running"
            );
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                eprintln!("harness: signal {signal}: ending the adapters");
                harness::adapter::end_all_adapters(Duration::from_secs(1));
                let _ = std::fs::remove_dir_all(&workdir);
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                std::process::exit(128 + signal);
            }
        });
    if let Err(e) = spawned {
        eprintln!("harness: cannot handle signals ({e}); a stopped run may leave adapters running");
    }
}

#[cfg(not(unix))]
fn end_adapters_on_signals(_workdir: PathBuf) {}
