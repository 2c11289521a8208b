//! Runs one (case, direction) against an implementation and decides the verdict.
//!
//! The verdict is the harness's own: file inspection (`inspect`), the
//! expected logical content (`judge`) and malformed files (`recipe`) never
//! call the implementation under test. The other side of a direction (the
//! writer of a file an implementation reads, the reader of a file it wrote)
//! is the reference, reached through the same `Implementation` trait.

use crate::adapter::{Implementation, Outcome};
use crate::inspect::{inspect_file, Expected};
use crate::judge;
use crate::recipe::materialize;
use crate::suite::{Case, Direction, Kind, Layout, SpecMap, Suite};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// How a trial ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Did what the case asks.
    Pass,
    /// Refused as asked, without naming a clause.
    PassUnnamed,
    /// Did something else (accepted what it must refuse, named another clause, read back other content).
    Fail,
    /// Crashed, timed out, answered garbage, or the harness could not set the trial up.
    Error,
    /// The implementation does not do this operation.
    Unsupported,
}

impl Verdict {
    /// Whether this counts as passing.
    pub fn passed(self) -> bool {
        matches!(self, Verdict::Pass | Verdict::PassUnnamed)
    }
}

/// The outcome of one trial, with everything a report needs.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TrialResult {
    /// `module::case::direction`.
    pub trial: String,
    /// The suite module.
    pub module: String,
    /// The case id.
    pub case: String,
    /// The case title.
    pub title: String,
    /// The direction.
    pub direction: Direction,
    /// The case kind.
    pub kind: Kind,
    /// Clauses the case covers.
    pub clauses: Vec<String>,
    /// The clause a refusal must name.
    pub expected_clause: Option<String>,
    /// Other clauses a refusal may name instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_accepted: Vec<String>,
    /// The clause the implementation named, when it refused.
    pub named_clause: Option<String>,
    /// The verdict.
    pub verdict: Verdict,
    /// Why, when it is not a plain pass (differences, findings, messages).
    pub detail: String,
}

/// The trial name of a case in a direction.
pub fn trial_name(module: &str, case: &str, direction: Direction) -> String {
    format!("{module}::{case}::{direction}")
}

/// Everything a trial needs besides the implementation under test.
pub struct Context<'a> {
    /// Where suites and fixtures are.
    pub layout: &'a Layout,
    /// The spec map: which clauses are decisions.
    pub spec: &'a SpecMap,
    /// A scratch directory for the files of trials.
    pub workdir: PathBuf,
    /// Writes the files an implementation reads, and reads the files it writes.
    pub reference: &'a mut dyn Implementation,
}

/// Runs `case` in `direction` against `imp`.
pub fn run_trial(
    suite: &Suite,
    case: &Case,
    direction: Direction,
    imp: &mut dyn Implementation,
    ctx: &mut Context<'_>,
) -> TrialResult {
    let mut result = TrialResult {
        trial: trial_name(&suite.module, &case.id, direction),
        module: suite.module.clone(),
        case: case.id.clone(),
        title: case.title.clone(),
        direction,
        kind: case.kind,
        clauses: case.clauses.clone(),
        expected_clause: case.expect.clone(),
        also_accepted: case.also_accept.clone(),
        named_clause: None,
        verdict: Verdict::Error,
        detail: String::new(),
    };
    if let Err(e) = std::fs::create_dir_all(&ctx.workdir) {
        result.detail = format!("harness: cannot create {}: {e}", ctx.workdir.display());
        return result;
    }
    let path = ctx.workdir.join(format!(
        "{}-{}-{}.mrec.lmdb",
        suite.module, case.id, direction
    ));
    remove_file_and_lock(&path);
    // Every read direction hands the implementation a file to read.
    let reads = matches!(direction, Direction::Read | Direction::Golden);
    let (verdict, detail, named) = match (case.kind, direction) {
        _ if reads && !imp.describe().capabilities.read => {
            (Verdict::Unsupported, "does not read".into(), None)
        }
        (Kind::RoundTrip, Direction::Write) => round_trip_write(case, imp, ctx, &path),
        (Kind::RoundTrip, Direction::Read) => round_trip_read(case, imp, ctx, &path, false),
        (Kind::RoundTrip, Direction::Golden) => round_trip_read(case, imp, ctx, &path, true),
        (Kind::WriteRefusal, Direction::Write) => write_refusal(case, imp, ctx, &path),
        (Kind::ReadRefusal, Direction::Read) => read_refusal(case, imp, ctx, &path),
        (Kind::ReadAccept, Direction::Read) => read_accept(case, imp, ctx, &path),
        (kind, dir) => (
            Verdict::Error,
            format!("harness: a {kind:?} case has no {dir} direction"),
            None,
        ),
    };
    remove_file_and_lock(&path);
    result.verdict = verdict;
    result.detail = detail;
    result.named_clause = named;
    result
}

/// A verdict, its detail, and the clause a refusal named.
pub(crate) type Decided = (Verdict, String, Option<String>);

pub(crate) fn fixture(case: &Case, ctx: &Context<'_>) -> Result<Value, String> {
    let name = case
        .fixture
        .as_deref()
        .ok_or("harness: the case has no fixture")?;
    ctx.layout
        .fixture(name)
        .map_err(|e| format!("harness: {e}"))
}

fn round_trip_write(
    case: &Case,
    imp: &mut dyn Implementation,
    ctx: &mut Context<'_>,
    path: &Path,
) -> Decided {
    let fixture = match fixture(case, ctx) {
        Ok(f) => f,
        Err(e) => return (Verdict::Error, e, None),
    };
    match imp.write(&fixture, path) {
        Outcome::Done(()) => {}
        Outcome::Refused { message, clause } => {
            return (
                Verdict::Fail,
                format!("refused a valid collection: {message}"),
                clause,
            );
        }
        Outcome::Unsupported => return (Verdict::Unsupported, "does not write".into(), None),
        Outcome::Error(e) => return (Verdict::Error, e, None),
    }
    let notes = match inspect_written(&fixture, path, case, ctx.spec) {
        Ok(notes) => notes,
        Err((verdict, detail)) => return (verdict, detail, None),
    };
    match ctx.reference.read(path) {
        Outcome::Done(actual) => {
            let (verdict, mut detail, named) = judged(
                &fixture,
                Expect::Written,
                &actual,
                "the reference read back",
            );
            if !notes.is_empty() {
                detail = if detail.is_empty() {
                    notes
                } else {
                    format!("{detail}\n{notes}")
                };
            }
            (verdict, detail, named)
        }
        Outcome::Refused { message, clause } => (
            Verdict::Fail,
            format!("the reference refused the written file: {message}"),
            clause,
        ),
        Outcome::Unsupported => (
            Verdict::Error,
            "harness: the reference does not read".into(),
            None,
        ),
        Outcome::Error(e) => (
            Verdict::Error,
            format!("harness: the reference failed: {e}"),
            None,
        ),
    }
}

/// The harness's inspection of a file written from `fixture` for `case`:
/// an error when the fixture has no expected form, a failure listing the
/// findings (`file inspection:` then `[clause] message` lines). A finding
/// under a decision the case does not list never fails it (a trial rests
/// on the text or on a decision, not both): it comes back as a note for
/// the trial's detail (empty when there is none).
pub(crate) fn inspect_written(
    fixture: &Value,
    path: &Path,
    case: &Case,
    spec: &SpecMap,
) -> Result<String, (Verdict, String)> {
    let expected = judge::expected_logical(fixture)
        .map_err(|e| (Verdict::Error, format!("harness: fixture: {e}")))?;
    let findings = inspect_file(path, Some(&expected_file(fixture, &expected)));
    let (charged, noted): (Vec<_>, Vec<_>) = findings.iter().partition(|f| charged(f, case, spec));
    let lines = |findings: &[&crate::inspect::Finding]| {
        findings
            .iter()
            .map(|f| format!("[{}] {}", f.clause, f.message))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if !charged.is_empty() {
        return Err((
            Verdict::Fail,
            format!("file inspection:\n{}", lines(&charged)),
        ));
    }
    if noted.is_empty() {
        return Ok(String::new());
    }
    Ok(format!(
        "file inspection, under decisions this case does not test (not charged):\n{}",
        lines(&noted)
    ))
}

/// Whether a finding fails a write trial of `case`: one under a clause of
/// the text always, one under a decision only when the case lists it.
pub(crate) fn charged(finding: &crate::inspect::Finding, case: &Case, spec: &SpecMap) -> bool {
    !spec.get(&finding.clause).is_some_and(|c| c.is_decision())
        || case.clauses.contains(&finding.clause)
}

/// The implementation reads a file of the fixture's content: one the
/// reference writes now, or (`golden`) the committed golden file.
fn round_trip_read(
    case: &Case,
    imp: &mut dyn Implementation,
    ctx: &mut Context<'_>,
    path: &Path,
    golden: bool,
) -> Decided {
    let fixture = match fixture(case, ctx) {
        Ok(f) => f,
        Err(e) => return (Verdict::Error, e, None),
    };
    let prepared = if golden {
        // Read a copy, in the scratch directory: opening may create a lock
        // file beside the file, and embedded golden files are not on disk.
        ctx.layout
            .copy_golden(&case.id, path)
            .map_err(|e| format!("harness: cannot copy the golden file: {e}"))
    } else {
        match ctx.reference.write(&fixture, path) {
            Outcome::Done(()) => Ok(()),
            other => Err(format!(
                "harness: the reference could not write the fixture: {other:?}"
            )),
        }
    };
    if let Err(e) = prepared {
        return (Verdict::Error, e, None);
    }
    read_and_judge(&fixture, Expect::Written, imp, path)
}

/// What a fixture is to the judge: the collection a writer was handed
/// (its values rounded to their declared precisions, as a writer stores
/// them) or what a file holds, values as stored (read-accept cases, whose
/// file a recipe built: a reader hands back the stored bits).
#[derive(Clone, Copy)]
pub(crate) enum Expect {
    Written,
    Stored,
}

pub(crate) fn read_and_judge(
    fixture: &Value,
    expect: Expect,
    imp: &mut dyn Implementation,
    path: &Path,
) -> Decided {
    match imp.read(path) {
        Outcome::Done(actual) => judged(fixture, expect, &actual, "read back"),
        Outcome::Refused { message, clause } => (
            Verdict::Fail,
            format!("refused a valid file: {message}"),
            clause,
        ),
        Outcome::Unsupported => (Verdict::Unsupported, "does not read".into(), None),
        Outcome::Error(e) => (Verdict::Error, e, None),
    }
}

fn judged(fixture: &Value, expect: Expect, actual: &Value, what: &str) -> Decided {
    let compared = match expect {
        Expect::Written => judge::compare(fixture, actual),
        Expect::Stored => judge::compare_stored(fixture, actual),
    };
    match compared {
        Ok(diffs) if diffs.is_empty() => (Verdict::Pass, String::new(), None),
        Ok(diffs) => {
            let mut detail = format!(
                "{what} differs from the fixture in {} place(s):\n",
                diffs.len()
            );
            for d in diffs.iter().take(20) {
                detail.push_str(&format!(
                    "  {}: expected {}, got {}\n",
                    d.path, d.expected, d.actual
                ));
            }
            if let (Ok(e), Ok(a)) = (
                match expect {
                    Expect::Written => judge::expected_logical(fixture),
                    Expect::Stored => judge::stored_logical(fixture),
                },
                judge::actual_logical(actual),
            ) {
                detail.push_str(&judge::short_diff(&e, &a, 40));
            }
            (Verdict::Fail, detail, None)
        }
        Err(e) => (
            Verdict::Fail,
            format!("{what} is not canonical JSON: {e}"),
            None,
        ),
    }
}

fn write_refusal(
    case: &Case,
    imp: &mut dyn Implementation,
    ctx: &mut Context<'_>,
    path: &Path,
) -> Decided {
    let fixture = match fixture(case, ctx) {
        Ok(f) => f,
        Err(e) => return (Verdict::Error, e, None),
    };
    expect_refusal(
        case,
        imp.write(&fixture, path),
        "wrote a collection it must refuse",
        "does not write",
    )
}

fn read_refusal(
    case: &Case,
    imp: &mut dyn Implementation,
    ctx: &mut Context<'_>,
    path: &Path,
) -> Decided {
    if let Err(e) = build_recipe(case, ctx.layout, &mut *ctx.reference, path) {
        return (Verdict::Error, e, None);
    }
    expect_refusal(
        case,
        imp.read(path),
        "read a malformed file without refusing it",
        "does not read",
    )
}

/// The verdict on an operation the case says must be refused: `accepted`
/// is the failure when it was not, `unsupported` what an implementation
/// without the operation is reported as.
fn expect_refusal<T>(
    case: &Case,
    outcome: Outcome<T>,
    accepted: &str,
    unsupported: &str,
) -> Decided {
    match outcome {
        Outcome::Done(_) => (Verdict::Fail, accepted.into(), None),
        Outcome::Refused { message, clause } => refusal(case, message, clause),
        Outcome::Unsupported => (Verdict::Unsupported, unsupported.into(), None),
        Outcome::Error(e) => (Verdict::Error, e, None),
    }
}

/// The implementation reads the file the recipe builds (a conforming file
/// the reference's writer would not write that way) as the fixture's
/// content.
fn read_accept(
    case: &Case,
    imp: &mut dyn Implementation,
    ctx: &mut Context<'_>,
    path: &Path,
) -> Decided {
    let fixture = match fixture(case, ctx) {
        Ok(f) => f,
        Err(e) => return (Verdict::Error, e, None),
    };
    if let Err(e) = build_recipe(case, ctx.layout, &mut *ctx.reference, path) {
        return (Verdict::Error, e, None);
    }
    read_and_judge(&fixture, Expect::Stored, imp, path)
}

/// Builds the case's recipe at `path`, its base written by `reference`.
pub(crate) fn build_recipe(
    case: &Case,
    layout: &Layout,
    reference: &mut dyn Implementation,
    path: &Path,
) -> Result<(), String> {
    let Some(recipe) = &case.recipe else {
        return Err("harness: the case has no recipe".into());
    };
    let mut write_base = |json: &Value, out: &Path| -> Result<(), String> {
        match reference.write(json, out) {
            Outcome::Done(()) => Ok(()),
            other => Err(format!("the reference could not write the base: {other:?}")),
        }
    };
    materialize(recipe, path, &mut write_base, &|name| layout.fixture(name))
        .map_err(|e| format!("harness: recipe: {e}"))
}

/// Whether a refusal naming `named` names `expected`: the clause itself,
/// or a clause it refines (`X` for `X.read`, the reader half of a writer's
/// rule; `X` for `X.id`, a reading of `X` in one case): a reader that
/// refuses a file breaking a writer's rule may well name that rule.
pub fn names_expected(named: &str, expected: &str) -> bool {
    named == expected
        || expected
            .strip_prefix(named)
            .is_some_and(|rest| rest.starts_with('.'))
}

fn refusal(case: &Case, message: String, clause: Option<String>) -> Decided {
    match (&clause, &case.expect) {
        (None, _) => (
            Verdict::PassUnnamed,
            format!("refused without naming a clause: {message}"),
            None,
        ),
        (Some(named), Some(expected))
            if names_expected(named, expected)
                || case.also_accept.iter().any(|a| names_expected(named, a)) =>
        {
            (Verdict::Pass, message, clause)
        }
        (Some(named), expected) => (
            Verdict::Fail,
            format!(
                "refused naming `{named}`, expected `{}`: {message}",
                expected.as_deref().unwrap_or("?")
            ),
            clause,
        ),
    }
}

/// What a written file must hold, from the fixture and its expected logical
/// collection: its content, and for each record the blocks present at its
/// first resolved frame (that frame must restate them).
pub fn expected_file(fixture: &Value, expected: &Value) -> Expected {
    let records = expected
        .get("records")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let first_frame_blocks = records
        .iter()
        .map(|r| {
            let mut names: Vec<String> = r
                .pointer("/trajectory/frames/0/blocks")
                .and_then(Value::as_object)
                .map(|b| b.keys().cloned().collect())
                .unwrap_or_default();
            // The cell in effect at the first frame is stated there too.
            if r.pointer("/trajectory/frames/0/box").is_some() {
                names.push("box".into());
            }
            names
        })
        .collect();
    Expected {
        first_frame_blocks,
        fixture: Some(fixture.clone()),
    }
}

pub(crate) fn remove_file_and_lock(path: &Path) {
    let _ = std::fs::remove_file(path);
    let mut lock = path.as_os_str().to_owned();
    lock.push("-lock");
    let _ = std::fs::remove_file(PathBuf::from(lock));
}

/// Every trial of every suite, in order: (suite, case, direction).
pub fn trials(layout: &Layout) -> Result<Vec<(Suite, Case, Direction)>, String> {
    let mut out = Vec::new();
    for suite in layout.suites()? {
        for case in &suite.cases {
            for direction in case.directions(layout) {
                out.push((suite.clone(), case.clone(), direction));
            }
        }
    }
    Ok(out)
}

/// Runs every trial whose name contains `filter` (all when `None`).
pub fn run_all(
    layout: &Layout,
    imp: &mut dyn Implementation,
    reference: &mut dyn Implementation,
    workdir: &Path,
    filter: Option<&str>,
    progress: impl FnMut(&TrialResult),
) -> Result<Vec<TrialResult>, String> {
    run_selected(
        layout,
        imp,
        reference,
        workdir,
        |suite, case, direction| {
            filter.is_none_or(|f| trial_name(&suite.module, &case.id, direction).contains(f))
        },
        progress,
    )
}

/// Runs every trial that `select` takes, in suite order.
pub fn run_selected(
    layout: &Layout,
    imp: &mut dyn Implementation,
    reference: &mut dyn Implementation,
    workdir: &Path,
    select: impl Fn(&Suite, &Case, Direction) -> bool,
    mut progress: impl FnMut(&TrialResult),
) -> Result<Vec<TrialResult>, String> {
    let spec = layout.spec_map()?;
    let mut ctx = Context {
        layout,
        spec: &spec,
        workdir: workdir.to_path_buf(),
        reference,
    };
    let mut results = Vec::new();
    for (suite, case, direction) in trials(layout)? {
        if !select(&suite, &case, direction) {
            continue;
        }
        imp.begin_trial(&trial_name(&suite.module, &case.id, direction));
        let result = run_trial(&suite, &case, direction, imp, &mut ctx);
        progress(&result);
        results.push(result);
    }
    Ok(results)
}

/// A fresh scratch directory for one run.
pub fn scratch_dir(tag: &str) -> PathBuf {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("molrec-harness-{tag}-{}-{n}", std::process::id()))
}
