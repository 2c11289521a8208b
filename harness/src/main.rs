//! `harness`: run the molrec conformance suites against an implementation.

use clap::{Parser, Subcommand};
use harness::adapter::reference::Reference;
use harness::adapter::{
    Implementation, Limits, Subprocess, DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_FAILURES,
    DEFAULT_TIMEOUT,
};
use harness::many::{run_many, Boxed, Named, Progress};
use harness::report::diff::{FailOn, RunDiff};
use harness::report::run::{RunReport, RUN_FORMAT_VERSION};
use harness::report::{Expectations, Outcome, Report, SuiteInfo};
use harness::runner::{scratch_dir, Verdict};
use harness::suite::{lint, Basis, Layout};
use std::collections::BTreeMap;
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
    /// Run the suites against the bundled reference and every adapter
    /// given, side by side, then writer × reader interop between them, and
    /// write the reports.
    Run {
        /// An implementation under test: `NAME=COMMAND`, or `COMMAND` (named
        /// by its greeting), a command speaking docs/adapters.md. Repeatable;
        /// the bundled reference (`molrec-reference`) always runs too.
        #[arg(long = "adapter", value_name = "[NAME=]COMMAND")]
        adapters: Vec<String>,
        /// Known failures of one implementation: `NAME=FILE`, or `FILE` for
        /// the only adapter (the reference when there is none). TOML:
        /// [[expected-failure]] case = "...", reason = "...". Repeatable.
        #[arg(long, value_name = "[NAME=]FILE")]
        expectations: Vec<String>,
        /// No writer × reader interop trials (they run when two or more
        /// implementations take part).
        #[arg(long)]
        no_interop: bool,
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
        /// Exit 1 on an unexpected result of any trial, one that rests on a
        /// decision included (without it, only trials that rest on the
        /// spec's text decide the exit status). The bundled reference runs
        /// with it in CI: it must follow every decision.
        #[arg(long)]
        strict: bool,
        /// A tree holding suites/, fixtures/ and spec-map.toml, read instead of
        /// the data built into this binary (to run a tree being edited).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Check an adapter before a run, in a few seconds: its greeting, one
    /// write and one read of the simplest case and one refusal, each answer
    /// validated against the protocol's schemas; shows its stderr and
    /// timings, says what is wrong in plain words. Exit 0 when a run can start.
    Smoke {
        /// The adapter's command (run through `sh -c`, as `harness run` runs it).
        #[arg(long = "adapter", value_name = "COMMAND")]
        adapter: String,
        /// Seconds the adapter may take for its greeting and for each answer
        /// (as `harness run --timeout`).
        #[arg(long, default_value_t = DEFAULT_TIMEOUT.as_secs())]
        timeout: u64,
        /// A tree holding suites/, fixtures/ and spec-map.toml, read instead of
        /// the data built into this binary (to run a tree being edited).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Check the suites: duplicate ids, unknown clauses, missing or unused fixtures.
    Lint {
        /// A tree holding suites/, fixtures/ and spec-map.toml, read instead of
        /// the data built into this binary (to run a tree being edited).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Check one `.mrec.lmdb` file with the harness's own code (its LMDB
    /// pages, then the binding's file-level rules), as `run` checks every
    /// file an implementation writes; prints `[clause] message` per finding.
    Inspect {
        /// The file.
        file: PathBuf,
        /// The canonical-JSON collection the file was written from: its
        /// content, read by the harness, is compared with it, and each
        /// record's first frame must restate the blocks present there.
        #[arg(long)]
        fixture: Option<PathBuf>,
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
        /// A tree holding suites/, fixtures/ and spec-map.toml, read instead of
        /// the data built into this binary (to run a tree being edited).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// The suite's power: every writer trace and reader rule with a
    /// plausible bug of an independent implementation, and the cases whose
    /// trials catch it (the table of docs/power.md); exit 1 when a trace
    /// has no check or a bug fewer than two catching cases.
    Power {
        /// Print only the problems, not the table.
        #[arg(long)]
        quiet: bool,
        /// Write the table into this Markdown file, between its markers
        /// (docs/power.md of a checkout).
        #[arg(long)]
        docs: Option<PathBuf>,
        /// A tree holding suites/, fixtures/ and spec-map.toml, read instead of
        /// the data built into this binary (to run a tree being edited).
        #[arg(long)]
        root: Option<PathBuf>,
    },
    /// Work with written reports (report.json).
    Report {
        #[command(subcommand)]
        command: ReportCommand,
    },
    /// Regenerate fixtures/golden/ with the reference (never done by a test),
    /// in a checkout of the repository.
    Golden {
        /// Repository root [default: the current directory].
        #[arg(long)]
        root: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum ReportCommand {
    /// One report of several runs (other machines, other days): every
    /// implementation side by side, the interop trials of each run; the
    /// four reports written into --out.
    Merge {
        /// The runs' report.json files.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// Directory for report.json, junit.xml, report.md, report.html.
        #[arg(long)]
        out: PathBuf,
        /// Merge runs of different suite versions (refused by default).
        #[arg(long)]
        allow_suite_mismatch: bool,
        /// A tree holding suites/, fixtures/ and spec-map.toml, read instead of
        /// the data built into this binary (to run a tree being edited).
        #[arg(long)]
        root: Option<PathBuf>,
    },
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
        /// A tree holding suites/, fixtures/ and spec-map.toml, read instead of
        /// the data built into this binary (to run a tree being edited).
        #[arg(long)]
        root: Option<PathBuf>,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum FailOnArg {
    Worse,
    Any,
    Never,
}

/// The tree at `--root`, else the data embedded in this binary.
fn layout(root: Option<PathBuf>) -> Layout {
    root.map(|r| Layout::at(&r))
        .unwrap_or_else(Layout::embedded)
}

/// What `--version` says: the harness, and the suites, spec map and
/// protocol it judges with (the embedded data: what this binary carries
/// wherever it is copied).
fn long_version() -> String {
    let layout = Layout::embedded();
    let mut text = format!("{}\n", env!("CARGO_PKG_VERSION"));
    match layout.suites() {
        Ok(suites) => {
            let listed: Vec<String> = suites
                .iter()
                .map(|s| format!("{} v{} ({} cases)", s.module, s.version, s.cases.len()))
                .collect();
            text.push_str(&format!("suites: {}\n", listed.join(", ")));
        }
        Err(e) => text.push_str(&format!("suites: {e}\n")),
    }
    match layout.spec_map() {
        Ok(spec) => {
            let sources: std::collections::BTreeSet<&str> = spec
                .values()
                .flat_map(|c| c.source.split("; "))
                .map(|s| s.split(" > ").next().unwrap_or(s).trim())
                .collect();
            text.push_str(&format!(
                "spec map: {} clauses; spec sources: {}\n",
                spec.len(),
                sources.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
        Err(e) => text.push_str(&format!("spec map: {e}\n")),
    }
    text.push_str(&format!(
        "adapter protocol: {}\ndata: built into this binary, digest {} (--root DIR reads a tree instead)",
        harness::adapter::protocol::PROTOCOL_VERSION,
        harness::data::digest()
    ));
    text
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let mut command = Cli::command();
    // Only `--version` needs the suites parsed.
    if std::env::args().any(|a| a == "--version") {
        // clap keeps a `&'static str`; the process prints it and exits.
        command = command.long_version(&*Box::leak(long_version().into_boxed_str()));
    }
    let cli = match Cli::from_arg_matches(&command.get_matches()) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Run {
            adapters,
            expectations,
            no_interop,
            report,
            filter,
            timeout,
            max_failures,
            deadline,
            max_answer_mib,
            strict,
            root,
        } => {
            let limits = Limits {
                timeout: Duration::from_secs(timeout),
                max_failures,
                max_answer_bytes: max_answer_mib.saturating_mul(1 << 20),
                deadline: deadline.map(Duration::from_secs),
            };
            run(
                layout(root),
                &adapters,
                &expectations,
                RunOptions {
                    interop: !no_interop,
                    report_dir: report,
                    filter,
                    limits,
                    strict,
                },
            )
        }
        Command::Smoke {
            adapter,
            timeout,
            root,
        } => smoke(&layout(root), adapter, timeout),
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
        Command::Inspect { file, fixture } => {
            let expected = match fixture.as_deref().map(expected_of) {
                None => None,
                Some(Ok(expected)) => Some(expected),
                Some(Err(e)) => {
                    eprintln!("harness: {e}");
                    return ExitCode::from(2);
                }
            };
            let findings = harness::inspect::inspect_file(&file, expected.as_ref());
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
        Command::Power { quiet, docs, root } => power(&layout(root), quiet, docs),
        Command::Report {
            command:
                ReportCommand::Merge {
                    reports,
                    out,
                    allow_suite_mismatch,
                    root,
                },
        } => report_merge(layout(root), &reports, &out, allow_suite_mismatch),
        Command::Report {
            command:
                ReportCommand::Diff {
                    old,
                    new,
                    json,
                    markdown,
                    fail_on,
                    root,
                },
        } => report_diff(layout(root), &old, &new, json, markdown, fail_on),
        Command::Golden { root } => match harness::golden::regenerate(&Layout::at(
            &root.unwrap_or_else(|| PathBuf::from(".")),
        )) {
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

/// `harness smoke`: 0 when a run can start, 1 when not, 2 when the harness
/// itself cannot check (its suites do not load).
fn smoke(layout: &Layout, command: String, timeout: u64) -> ExitCode {
    let workdir = scratch_dir("smoke");
    end_adapters_on_signals(workdir.clone());
    let options = harness::smoke::Options {
        command,
        timeout: Duration::from_secs(timeout.max(1)),
    };
    match harness::smoke::check(layout, &options, &workdir) {
        Ok(smoke) => {
            print!("{}", smoke.render());
            if smoke.ready() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&workdir);
            eprintln!("harness: {e}");
            ExitCode::from(2)
        }
    }
}

/// The bundled reference's name in reports.
const REFERENCE: &str = "molrec-reference";

/// `NAME=VALUE` when what stands before the first `=` is a plain name
/// (letters, digits, `-`, `_`, `.`), else `(None, VALUE)`.
fn named(arg: &str) -> (Option<&str>, &str) {
    match arg.split_once('=') {
        Some((name, value))
            if !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) =>
        {
            (Some(name), value)
        }
        _ => (None, arg),
    }
}

/// How `harness run` runs, besides what it runs against.
struct RunOptions {
    /// Writer × reader trials between the implementations.
    interop: bool,
    /// Where the reports go.
    report_dir: Option<PathBuf>,
    /// Only trials whose name contains this.
    filter: Option<String>,
    /// What an adapter may cost.
    limits: Limits,
    /// Decision trials count toward the exit status.
    strict: bool,
}

fn run(
    layout: Layout,
    adapters: &[String],
    expectation_args: &[String],
    options: RunOptions,
) -> ExitCode {
    let RunOptions {
        interop,
        report_dir,
        filter,
        limits,
        strict,
    } = options;
    let workdir = scratch_dir("run");
    end_adapters_on_signals(workdir.clone());
    let mut imps: Vec<Boxed> = vec![Box::new(Reference::new())];
    let mut names: Vec<String> = vec![REFERENCE.to_owned()];
    // Each adapter's command, in the order of `names[1..]`.
    let mut commands: Vec<String> = Vec::new();
    for arg in adapters {
        let (name, command) = named(arg);
        let spawned = match Subprocess::spawn_with(command, limits) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("harness: cannot start `{command}`: {e}");
                eprintln!("harness: {}", smoke_hint(command));
                return ExitCode::from(2);
            }
        };
        commands.push(command.to_owned());
        let name = match name {
            Some(name) if names.iter().any(|n| n == name) || name == "reference" => {
                eprintln!("harness: two implementations are called `{name}`");
                return ExitCode::from(2);
            }
            Some(name) => name.to_owned(),
            // Named by its greeting; a name taken already gets a number.
            None => {
                let greeted = spawned.describe().name.clone();
                let mut name = greeted.clone();
                let mut n = 1;
                while names.contains(&name) {
                    n += 1;
                    name = format!("{greeted}-{n}");
                }
                if name != greeted {
                    eprintln!("harness: `{command}` greets as `{greeted}`, a name taken: called `{name}` (name it with --adapter NAME=COMMAND)");
                }
                name
            }
        };
        names.push(name.clone());
        imps.push(Box::new(Named::new(&name, Box::new(spawned))));
    }
    let expectations = match expectations_by_name(expectation_args, &names) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("harness: expectations: {e}");
            return ExitCode::from(2);
        }
    };
    let many = names.len() > 1;
    for imp in &imps {
        let d = imp.describe();
        println!("running the suites against {} {}", d.name, d.version);
    }
    let print = |p: Progress<'_>| {
        let (name, trial, verdict) = match p {
            Progress::Own(name, r) => (name, r.trial.as_str(), r.verdict),
            Progress::Interop(r) => ("interop", r.trial.as_str(), r.verdict),
        };
        let mark = match verdict {
            Verdict::Pass => "ok",
            Verdict::PassUnnamed => "ok (unnamed refusal)",
            Verdict::Fail => "FAIL",
            Verdict::Error => "ERROR",
            Verdict::Unsupported => "unsupported",
        };
        if many {
            println!("{:<18} {trial:<70} {mark}", format!("[{name}]"));
        } else {
            println!("{trial:<70} {mark}");
        }
    };
    let results = run_many(
        &layout,
        &mut imps,
        &workdir,
        filter.as_deref(),
        interop,
        &print,
    );
    let _ = std::fs::remove_dir_all(&workdir);
    drop(imps);
    let results = match results {
        Ok(r) => r,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    for ((description, trials), command) in results.own.iter().skip(1).zip(&commands) {
        if failed_from_the_start(trials) {
            eprintln!(
                "harness: `{}` failed its first requests (errors, not verdicts): {}",
                description.name,
                smoke_hint(command)
            );
        }
    }
    let suites: Vec<SuiteInfo> = layout
        .suites()
        .unwrap_or_default()
        .iter()
        .map(SuiteInfo::of)
        .collect();
    let spec = match layout.spec_map() {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    let none = Expectations::default();
    let mut unknown = Vec::new();
    let mut reports = Vec::new();
    for (description, trials) in results.own {
        let name = description.name.clone();
        let expected = expectations.get(&name).unwrap_or(&none);
        let mut trial_names: Vec<String> = trials.iter().map(|r| r.trial.clone()).collect();
        trial_names.extend(
            results
                .interop
                .iter()
                .filter(|r| r.writer == name || r.reader == name)
                .map(|r| r.trial.clone()),
        );
        unknown.extend(
            expected
                .unknown(&trial_names)
                .into_iter()
                .map(|u| format!("{u} ({name})")),
        );
        reports.push(Report::new(description, suites.clone(), trials, expected).with_spec(&spec));
    }
    let run = RunReport::new(suites, reports, results.interop, &expectations, &spec);
    // The verdict first: conforming or not, tier by tier.
    for line in run.conformance_lines() {
        println!("harness: {line}");
    }
    let mut total = (0usize, 0usize);
    for r in &run.implementations {
        let s = &r.summary;
        println!(
            "harness: {}: {} pass ({} without naming a clause), {} expected failures, {} unexpected passes, {} fail, {} errors, {} unsupported",
            r.implementation.name,
            s.pass,
            s.pass_unnamed,
            s.expected_failure,
            s.unexpected_pass,
            s.fail,
            s.error,
            s.unsupported
        );
        total.0 += s.pass + s.expected_failure;
        total.1 += r
            .results
            .iter()
            .filter(|e| e.outcome.is_unexpected() && (strict || e.tier == Basis::Spec))
            .count();
    }
    if !run.interop.is_empty() {
        let count = |o: Outcome| run.interop.iter().filter(|e| e.outcome == o).count();
        let (writers, readers, _) = run.interop_matrix();
        println!(
            "harness: interop ({} writers x {} readers): {} pass, {} expected failures, {} unexpected passes, {} fail, {} errors, {} unsupported",
            writers.len(),
            readers.len(),
            count(Outcome::Pass),
            count(Outcome::ExpectedFailure),
            count(Outcome::UnexpectedPass),
            count(Outcome::Fail),
            count(Outcome::Error),
            count(Outcome::Unsupported)
        );
        total.0 += count(Outcome::Pass) + count(Outcome::ExpectedFailure);
        total.1 += run
            .interop
            .iter()
            .filter(|e| e.outcome.is_unexpected() && (strict || e.tier == Basis::Spec))
            .count();
    }
    let otherwise: usize = run
        .implementations
        .iter()
        .map(|r| {
            r.results
                .iter()
                .filter(|e| e.tier == Basis::Decision && e.outcome.is_unexpected())
                .count()
        })
        .sum::<usize>()
        + run
            .interop
            .iter()
            .filter(|e| e.tier == Basis::Decision && e.outcome.is_unexpected())
            .count();
    if otherwise > 0 {
        println!(
            "harness: {otherwise} unexpected result(s) on trials that rest on a decision{}",
            if strict {
                " (counted as failed: --strict)"
            } else {
                " (not counted as failed; --strict counts them)"
            }
        );
    }
    for u in &unknown {
        eprintln!("harness: expectation names no trial: {u}");
    }
    // The plain closing line CI readers recognize; unsupported trials are
    // neither passed nor failed.
    println!("harness: {} passed, {} failed", total.0, total.1);
    if let Some(dir) = report_dir {
        if let Err(e) = run.write_all(&dir, &spec) {
            eprintln!("harness: cannot write reports to {}: {e}", dir.display());
            return ExitCode::from(2);
        }
        println!(
            "reports: open {} first (clauses x implementations{}, failures by cause); {} for a pull request; report.json and junit.xml beside them",
            dir.join("report.html").display(),
            if run.interop.is_empty() { "" } else { ", the interop matrix" },
            dir.join("report.md").display(),
        );
    }
    if run.fails_run(strict) || !unknown.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// Where to turn when an adapter does not get going.
fn smoke_hint(command: &str) -> String {
    format!(
        "`harness smoke --adapter '{}'` checks an adapter in a few seconds and says what is wrong in plain words",
        command.replace('\'', "'\\''")
    )
}

/// Whether an adapter's first requests (up to three) all erred: it most
/// likely never worked (a greeting, a framing or a start-up problem)
/// rather than failing some cases.
fn failed_from_the_start(trials: &[harness::runner::TrialResult]) -> bool {
    let asked: Vec<&harness::runner::TrialResult> = trials
        .iter()
        .filter(|t| t.verdict != Verdict::Unsupported)
        .take(3)
        .collect();
    !asked.is_empty() && asked.iter().all(|t| t.verdict == Verdict::Error)
}

/// `--expectations [NAME=]FILE` arguments, loaded and keyed by
/// implementation name. A bare FILE belongs to the only adapter, or to the
/// reference when no adapter is given; `reference` names the reference.
fn expectations_by_name(
    args: &[String],
    names: &[String],
) -> Result<BTreeMap<String, Expectations>, String> {
    let mut out = BTreeMap::new();
    for arg in args {
        let (name, file) = match named(arg) {
            (Some(name), file) if !Path::new(arg).exists() => (name.to_owned(), file),
            _ => match names {
                [only] => (only.clone(), arg.as_str()),
                [_, adapter] => (adapter.clone(), arg.as_str()),
                _ => {
                    return Err(format!(
                        "`{arg}`: several adapters run; say whose it is: --expectations NAME=FILE"
                    ))
                }
            },
        };
        let name = if name == "reference" {
            REFERENCE.to_owned()
        } else {
            name
        };
        if !names.contains(&name) {
            return Err(format!(
                "`{arg}`: no implementation is called `{name}` (running: {})",
                names.join(", ")
            ));
        }
        let loaded = Expectations::load(Path::new(file))?;
        if out.insert(name.clone(), loaded).is_some() {
            return Err(format!("two files for `{name}`"));
        }
    }
    Ok(out)
}

/// What a file written from the fixture at `path` must hold.
fn expected_of(path: &Path) -> Result<harness::inspect::Expected, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let fixture: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let logical = harness::judge::expected_logical(&fixture)
        .map_err(|e| format!("{}: not a collection: {e}", path.display()))?;
    Ok(harness::runner::expected_file(&fixture, &logical))
}

fn power(layout: &Layout, quiet: bool, docs: Option<PathBuf>) -> ExitCode {
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
    let workdir = harness::runner::scratch_dir("power");
    let measured = harness::power::measure(layout, &spec, &mut Reference::new(), &workdir);
    let _ = std::fs::remove_dir_all(&workdir);
    let inventory = match measured {
        Ok(inventory) => inventory,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    let table = inventory.markdown();
    if let Some(path) = docs {
        let written = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|doc| {
                harness::power::with_table(&doc, &table)
                    .ok_or_else(|| format!("no `{}` line in it", harness::power::DOCS_BEGIN))
            })
            .and_then(|doc| std::fs::write(&path, doc).map_err(|e| e.to_string()));
        if let Err(e) = written {
            eprintln!("harness: {}: {e}", path.display());
            return ExitCode::from(2);
        }
    } else if !quiet {
        print!("{table}");
    }
    let mut problems = inventory.problems(&spec);
    for (clause, cases) in inventory.unguarded(&suites, &spec) {
        problems.push(format!(
            "clause {clause} (must, the text's): {} case(s) would fail on its violation ({}); at least {} must",
            cases.len(),
            cases.join(", "),
            harness::power::MIN_CATCHING_CASES
        ));
    }
    for p in &problems {
        eprintln!("{p}");
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
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
        match RunReport::load(path) {
            Ok(r) => loaded.extend(r.upgraded(&spec).implementations),
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
            Ok(results) => loaded.push(
                Report::new(
                    imp.describe().clone(),
                    suites.iter().map(SuiteInfo::of).collect(),
                    results,
                    &Expectations::default(),
                )
                .with_spec(&spec),
            ),
            Err(e) => {
                eprintln!("harness: {e}");
                return ExitCode::from(2);
            }
        }
    }
    match harness::trace::clause(&spec, &suites, &id, &loaded) {
        Ok(text) => {
            // Whole runs read from reports: each one's verdict comes first.
            if !reports.is_empty() {
                for r in &loaded {
                    println!("{}: {}", r.implementation.name, r.conformance_line());
                }
                println!();
            }
            print!("{text}");
            let workdir = scratch_dir("trace-power");
            let measured = harness::power::measure(&layout, &spec, &mut Reference::new(), &workdir);
            let _ = std::fs::remove_dir_all(&workdir);
            match measured {
                Ok(inventory) => print!("{}", harness::trace::simulated(&inventory, &id)),
                Err(e) => eprintln!("harness: the suite's power could not be measured: {e}"),
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("harness: {e}");
            ExitCode::from(2)
        }
    }
}

fn report_diff(
    layout: Layout,
    old: &Path,
    new: &Path,
    json: Option<PathBuf>,
    markdown: Option<PathBuf>,
    fail_on: FailOnArg,
) -> ExitCode {
    let (old, new) = match (RunReport::load(old), RunReport::load(new)) {
        (Ok(old), Ok(new)) => (old, new),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    let (old, new) =
        if old.format_version < RUN_FORMAT_VERSION || new.format_version < RUN_FORMAT_VERSION {
            match layout.spec_map() {
                Ok(spec) => (old.upgraded(&spec), new.upgraded(&spec)),
                Err(e) => {
                    eprintln!("harness: a report of an older format needs the spec map: {e}");
                    return ExitCode::from(2);
                }
            }
        } else {
            (old, new)
        };
    let diff = RunDiff::between(&old, &new);
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
    let (worse, better, changed) = diff.counts();
    eprintln!("harness: {worse} worse, {better} better, {changed} trials changed");
    if diff.fails(fail_on) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn report_merge(
    layout: Layout,
    paths: &[PathBuf],
    out: &Path,
    allow_suite_mismatch: bool,
) -> ExitCode {
    let spec = match layout.spec_map() {
        Ok(spec) => spec,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    let mut runs = Vec::new();
    for path in paths {
        match RunReport::load(path) {
            Ok(run) => runs.push((path.display().to_string(), run.upgraded(&spec))),
            Err(e) => {
                eprintln!("harness: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let merged = match RunReport::merge(runs, allow_suite_mismatch) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("harness: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = merged.write_all(out, &spec) {
        eprintln!("harness: cannot write reports to {}: {e}", out.display());
        return ExitCode::from(2);
    }
    println!(
        "merged {} reports: {} ({} interop trials); open {} first",
        paths.len(),
        merged.names().join(", "),
        merged.interop.len(),
        out.join("report.html").display()
    );
    ExitCode::SUCCESS
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
