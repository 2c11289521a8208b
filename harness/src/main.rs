//! `harness`: run the molrec conformance suites against an implementation.

use clap::{Parser, Subcommand};
use harness::adapter::reference::Reference;
use harness::adapter::{
    Implementation, Limits, Subprocess, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_FAILURES,
    DEFAULT_TIMEOUT,
};
use harness::report::diff::{FailOn, ReportDiff};
use harness::report::{Expectations, Report, SuiteInfo};
use harness::runner::{run_all, scratch_dir, Verdict};
use harness::suite::{lint, Layout};
use std::path::{Path, PathBuf};
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
    /// A clause's text, source, basis, cases and verdicts (of the reports
    /// given, else of the bundled reference, run on those cases now); with
    /// --uncovered, every clause no case covers (exit 1 if one is not waived).
    Trace {
        /// The clause id (a key of spec-map.toml).
        #[arg(required_unless_present = "uncovered")]
        clause: Option<String>,
        /// List the clauses without cases: waived, with their reasons, and not.
        #[arg(long, conflicts_with = "clause")]
        uncovered: bool,
        /// Verdicts from this report.json instead of a run of the reference (repeatable).
        #[arg(long)]
        report: Vec<PathBuf>,
        /// Repository root.
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Work with written reports (report.json).
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// Regenerate fixtures/golden/ with the reference (never done by a test).
    Golden {
        /// Repository root.
        #[arg(long)]
        root: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ReportCommand {
    /// What changed from OLD to NEW (two report.json files), trial by trial
    /// and clause by clause: Markdown on stdout, for a pull request.
    Diff {
        /// The earlier run's report.json (e.g. the base branch's).
        old: PathBuf,
        /// The later run's report.json.
        new: PathBuf,
        /// Also write the diff as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Also write the Markdown to this file.
        #[arg(long)]
        markdown: Option<PathBuf>,
        /// When to exit with 1: something got worse, anything changed, or never.
        #[arg(long, value_enum, default_value_t = FailOnArg::Worse)]
        fail_on: FailOnArg,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FailOnArg {
    Worse,
    Any,
    Never,
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
        Command::Trace {
            clause,
            uncovered,
            report,
            root,
        } => trace(layout(root), clause, uncovered, &report),
        Command::Report {
            command:
                ReportCommand::Diff {
                    old,
                    new,
                    json,
                    markdown,
                    fail_on,
                },
        } => report_diff(&old, &new, json, markdown, fail_on),
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

fn trace(layout: Layout, clause: Option<String>, uncovered: bool, reports: &[PathBuf]) -> ExitCode {
    let loaded = layout
        .spec_map()
        .and_then(|spec| Ok((spec, layout.suites()?)));
    let (spec, suites) = match loaded {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    if uncovered {
        let (text, bare) = harness::trace::uncovered(&spec, &suites);
        print!("{text}");
        return if bare > 0 {
            ExitCode::from(1)
        } else {
            ExitCode::SUCCESS
        };
    }
    let id = clause.unwrap_or_default();
    if !spec.contains_key(&id) {
        // The same message as below, without running anything.
        if let Err(e) = harness::trace::clause(&spec, &suites, &id, &[]) {
            eprintln!("harness: {e}");
        }
        return ExitCode::from(2);
    }
    let mut loaded = Vec::new();
    for path in reports {
        match load_report(path) {
            Ok(r) => loaded.push(r),
            Err(e) => {
                eprintln!("harness: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if loaded.is_empty() {
        let cases: Vec<(String, String)> = harness::trace::covering(&suites, &id)
            .iter()
            .map(|c| (c.module.to_owned(), c.case.id.clone()))
            .collect();
        let workdir = scratch_dir("trace");
        let mut imp = Reference::new();
        let mut reference = Reference::new();
        let results = harness::runner::run_selected(
            &layout,
            &mut imp,
            &mut reference,
            &workdir,
            |suite, case, _| {
                cases
                    .iter()
                    .any(|(m, c)| *m == suite.module && *c == case.id)
            },
            |_| {},
        );
        let _ = std::fs::remove_dir_all(&workdir);
        match results {
            Ok(results) => loaded.push(Report::new(
                imp.describe().clone(),
                suites.iter().map(SuiteInfo::of).collect(),
                results,
                &Expectations::default(),
            )),
            Err(e) => {
                eprintln!("harness: {e}");
                return ExitCode::from(2);
            }
        }
    }
    match harness::trace::clause(&spec, &suites, &id, &loaded) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness: {e}");
            ExitCode::from(2)
        }
    }
}

/// A report.json, or what is wrong with it, naming the file.
fn load_report(path: &Path) -> Result<Report, String> {
    std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|text| Report::from_json(&text))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn report_diff(
    old: &Path,
    new: &Path,
    json: Option<PathBuf>,
    markdown: Option<PathBuf>,
    fail_on: FailOnArg,
) -> ExitCode {
    let (old, new) = match (load_report(old), load_report(new)) {
        (Ok(old), Ok(new)) => (old, new),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    let diff = ReportDiff::between(&old, &new);
    let md = diff.to_markdown();
    print!("{md}");
    for (path, text) in [(json, diff.to_json()), (markdown, md)] {
        if let Some(path) = path {
            if let Err(e) = std::fs::write(&path, text) {
                eprintln!("harness: cannot write {}: {e}", path.display());
                return ExitCode::from(2);
            }
        }
    }
    let fail_on = match fail_on {
        FailOnArg::Worse => FailOn::Worse,
        FailOnArg::Any => FailOn::Any,
        FailOnArg::Never => FailOn::Never,
    };
    eprintln!(
        "harness: {} worse, {} better, {} trials changed",
        diff.worse,
        diff.better,
        diff.changed.len()
    );
    if diff.fails(fail_on) {
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
