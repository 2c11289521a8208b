//! `harness smoke --adapter CMD`: is an adapter ready for a run? A check
//! of a few seconds, before the hundreds of trials of `harness run`.
//!
//! It starts the adapter once, as a run does, and
//!
//! 1. waits for the greeting and validates it against
//!    `docs/schemas/hello.json` (the protocol's version, name, version,
//!    capabilities);
//! 2. sends one write and one read of the suite's first round-trip case,
//!    and one refusal (the first read refusal for an adapter that reads,
//!    else the first write refusal), through the runner, as a run would:
//!    each answer validated against its schema, its id checked, and the
//!    runner's verdict shown;
//! 3. says `bye` and watches it exit;
//!
//! then shows the adapter's stderr and the timings. Each mistake a first
//! adapter usually makes (a log line on stdout, a message without a
//! newline, stdout not flushed, another protocol version, a slow start, a
//! greeting without capabilities, an answer with another id) is one
//! sentence that says what to change. [`Smoke::ready`] (exit status 0)
//! when a run can start: a wrong verdict is a warning, a broken exchange a
//! failure.
//!
//! Files by concern: this one (the steps and their report), `session.rs`
//! (the greeting and the answers, checked), `wire.rs` (the process, its
//! stdout as timed bytes), `schema.rs` (the schemas and their validator).

mod schema;
mod session;
mod wire;

pub use schema::{Schemas, Violation, MESSAGES};

use crate::adapter::reference::Reference;
use crate::adapter::{Description, BYE_GRACE, DEFAULT_MAX_ANSWER_BYTES};
use crate::runner::{run_trial, Context, Verdict};
use crate::suite::{Case, Direction, Kind, Layout, Suite};
use session::{does, greet, Session};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};
use wire::Wire;

/// How a step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mark {
    /// As a run needs it.
    Ok,
    /// A run can start, but something is off (a wrong verdict, a slow greeting).
    Warn,
    /// A run cannot start as things are.
    Fail,
    /// Not tried: an earlier step failed, or the adapter does not do it.
    Skipped,
}

impl Mark {
    /// The word shown before the step.
    pub fn word(self) -> &'static str {
        match self {
            Mark::Ok => "ok",
            Mark::Warn => "warn",
            Mark::Fail => "FAIL",
            Mark::Skipped => "skip",
        }
    }
}

/// One step of the check: the greeting, a request, `bye`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// `greeting`, `write`, `read`, `refusal`, `bye`.
    pub name: String,
    /// How it ended: the worst of what it found.
    pub mark: Mark,
    /// What it found: a summary, then each problem in a sentence.
    pub lines: Vec<String>,
}

impl Step {
    fn new(name: &str) -> Step {
        Step {
            name: name.to_owned(),
            mark: Mark::Ok,
            lines: Vec::new(),
        }
    }

    fn fail(&mut self, sentence: String) {
        self.mark = Mark::Fail;
        self.lines.push(sentence);
    }

    fn warn(&mut self, sentence: String) {
        self.mark = self.mark.max(Mark::Warn);
        self.lines.push(sentence);
    }

    fn skipped(name: &str, why: &str) -> Step {
        Step {
            name: name.to_owned(),
            mark: Mark::Skipped,
            lines: vec![why.to_owned()],
        }
    }
}

/// What `harness smoke` is asked to check.
#[derive(Clone, Debug)]
pub struct Options {
    /// The adapter's command, run through `sh -c` as `harness run` runs it.
    pub command: String,
    /// The time for the greeting and for each answer (`harness run --timeout`).
    pub timeout: Duration,
}

/// The check of one adapter.
#[derive(Clone, Debug)]
pub struct Smoke {
    /// The adapter's command.
    pub command: String,
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// What the adapter wrote to stderr (its last 16 KiB).
    pub stderr: String,
    /// The whole check's time.
    pub took: Duration,
}

impl Smoke {
    /// Whether a run can start: no step failed.
    pub fn ready(&self) -> bool {
        self.steps.iter().all(|s| s.mark != Mark::Fail)
    }

    /// The check as text: a line per step (and its sentences below), the
    /// adapter's stderr, the conclusion.
    pub fn render(&self) -> String {
        let mut out = format!("harness smoke: {}\n", self.command);
        for step in &self.steps {
            let mut lines = step.lines.iter();
            let _ = writeln!(
                out,
                "  {:<5} {:<9} {}",
                step.mark.word(),
                step.name,
                lines.next().map(String::as_str).unwrap_or("")
            );
            for line in lines {
                let _ = writeln!(out, "  {:<5} {:<9} {line}", "", "");
            }
        }
        let stderr = self.stderr.trim_end();
        if stderr.is_empty() {
            out.push_str("adapter stderr: empty\n");
        } else {
            let _ = writeln!(
                out,
                "adapter stderr ({} bytes):\n{}",
                self.stderr.len(),
                stderr
                    .lines()
                    .map(|l| format!("  | {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
        let failed = self.steps.iter().filter(|s| s.mark == Mark::Fail).count();
        if failed == 0 {
            let _ = writeln!(
                out,
                "harness smoke: ready in {}: harness run --adapter {}",
                seconds(self.took),
                shell_quote(&self.command)
            );
        } else {
            let _ = writeln!(
                out,
                "harness smoke: not ready ({failed} step{} failed, {}): fix what is said above (docs/adapters.md), then run this again.",
                if failed == 1 { "" } else { "s" },
                seconds(self.took)
            );
        }
        out
    }
}

/// A duration as people read it: `35 ms`, `3.2 s`.
pub(crate) fn seconds(d: Duration) -> String {
    if d < Duration::from_millis(1) {
        "under 1 ms".to_owned()
    } else if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// `text` as one word for `sh`.
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// The trials the check sends: the first round trip of the suites that
/// runs in both directions, and the first refusal the adapter can be
/// asked (a read refusal if it reads, else a write refusal).
fn planned<'a>(
    layout: &Layout,
    suites: &'a [Suite],
    d: &Description,
) -> Vec<(&'static str, &'a Suite, &'a Case, Direction)> {
    let cases = || {
        suites
            .iter()
            .flat_map(|s| s.cases.iter().map(move |c| (s, c)))
    };
    let mut out = Vec::new();
    let round_trip = cases().find(|(_, c)| {
        let dirs = c.directions(layout);
        c.kind == Kind::RoundTrip
            && dirs.contains(&Direction::Write)
            && dirs.contains(&Direction::Read)
    });
    if let Some((suite, case)) = round_trip {
        if d.capabilities.write {
            out.push(("write", suite, case, Direction::Write));
        }
        if d.capabilities.read {
            out.push(("read", suite, case, Direction::Read));
        }
    }
    let refusal = if d.capabilities.read {
        cases()
            .find(|(_, c)| c.kind == Kind::ReadRefusal)
            .map(|(s, c)| (s, c, Direction::Read))
    } else if d.capabilities.write {
        cases()
            .find(|(_, c)| c.kind == Kind::WriteRefusal)
            .map(|(s, c)| (s, c, Direction::Write))
    } else {
        None
    };
    if let Some((suite, case, direction)) = refusal {
        out.push(("refusal", suite, case, direction));
    }
    out
}

/// Checks the adapter `options` names with the suites of `layout`; its
/// files go to `workdir`. `Err` is the harness's own trouble (the suites do
/// not load), not the adapter's.
pub fn check(layout: &Layout, options: &Options, workdir: &Path) -> Result<Smoke, String> {
    let suites = layout.suites()?;
    let spec = layout.spec_map()?;
    let schemas = Schemas::embedded()?;
    let began = Instant::now();
    let mut smoke = Smoke {
        command: options.command.clone(),
        steps: Vec::new(),
        stderr: String::new(),
        took: Duration::ZERO,
    };
    let max_line = usize::try_from(DEFAULT_MAX_ANSWER_BYTES).unwrap_or(usize::MAX);
    let mut wire = match Wire::start(&options.command, max_line) {
        Ok(wire) => wire,
        Err(e) => {
            let mut step = Step::new("start");
            step.fail(format!("the adapter could not be started: {e}."));
            smoke.steps.push(step);
            smoke.took = began.elapsed();
            return Ok(smoke);
        }
    };
    let (step, description) = greet(&mut wire, &schemas, options.timeout);
    smoke.steps.push(step);
    let mut alive = description.is_some();
    if let Some(d) = description {
        std::fs::create_dir_all(workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;
        let mut reference = Reference::new();
        let mut ctx = Context {
            layout,
            spec: &spec,
            workdir: workdir.to_path_buf(),
            reference: &mut reference,
        };
        let mut session = Session::new(&mut wire, &schemas, options.timeout, d.clone());
        let plan = planned(layout, &suites, &d);
        if plan.is_empty() {
            smoke.steps.push(Step::skipped(
                "requests",
                &format!(
                    "none sent: the greeting says the adapter {}",
                    does(&d.capabilities)
                ),
            ));
        }
        for (name, suite, case, direction) in plan {
            if !alive {
                smoke.steps.push(Step::skipped(
                    name,
                    "not sent: the exchange above must work first",
                ));
                continue;
            }
            let result = run_trial(suite, case, direction, &mut session, &mut ctx);
            let exchange = session.exchange.take().unwrap_or_default();
            let mut step = Step::new(name);
            let took = exchange
                .took
                .map(|t| format!(" in {}", seconds(t)))
                .unwrap_or_default();
            let answered = exchange.answered.as_deref().unwrap_or("no answer");
            step.lines.push(format!(
                "{}: {answered}{took}; verdict: {}",
                result.trial,
                verdict_name(result.verdict)
            ));
            for problem in &exchange.problems {
                step.fail(problem.clone());
            }
            for warning in &exchange.warnings {
                step.warn(warning.clone());
            }
            if exchange.problems.is_empty() {
                match result.verdict {
                    Verdict::Pass => {}
                    Verdict::PassUnnamed => step.lines.push(
                        "a refusal that names no clause passes; the report lists the clauses an adapter does not name yet".into(),
                    ),
                    _ => step.warn(format!(
                        "a run can start, but this trial {}: {}",
                        if result.verdict == Verdict::Error { "errs" } else { "fails" },
                        first_lines(&result.detail, 4)
                    )),
                }
            }
            alive = !exchange.fatal;
            smoke.steps.push(step);
        }
    }
    if alive {
        smoke.steps.push(bye(&mut wire));
    }
    wire.kill();
    smoke.stderr = wire.stderr();
    smoke.took = began.elapsed();
    let _ = std::fs::remove_dir_all(workdir);
    Ok(smoke)
}

/// Says `bye` and watches the adapter exit within the grace `harness run`
/// gives it.
fn bye(wire: &mut Wire) -> Step {
    let mut step = Step::new("bye");
    let sent = Instant::now();
    let _ = wire.send(&crate::adapter::protocol::bye_request());
    wire.close_stdin();
    let closed = wire.wait_closed(BYE_GRACE);
    let took = sent.elapsed();
    let extra = String::from_utf8_lossy(wire.unread()).into_owned();
    let status = wire.kill();
    if closed {
        step.lines
            .push(format!("exited {} after bye ({status})", seconds(took)));
    } else {
        step.warn(format!(
            "still running {} after bye: `harness run` kills it then. Exit on bye and at the end of stdin.",
            seconds(BYE_GRACE)
        ));
    }
    if !extra.trim().is_empty() {
        step.warn(format!(
            "it wrote {} on stdout after bye: answer nothing to bye.",
            extra
                .trim()
                .lines()
                .next()
                .map(|l| format!("{l:?}"))
                .unwrap_or_default()
        ));
    }
    step
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::PassUnnamed => "pass (no clause named)",
        Verdict::Fail => "fail",
        Verdict::Error => "error",
        Verdict::Unsupported => "unsupported",
    }
}

/// The first `n` non-blank lines of a trial's detail, on one line.
fn first_lines(detail: &str, n: usize) -> String {
    let lines: Vec<&str> = detail
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .take(n)
        .collect();
    lines.join(" / ")
}
