//! Reports of runs of the suite.
//!
//! [`run::RunReport`] is `report.json`: every implementation of a run side
//! by side, with the writer × reader interop trials; each implementation's
//! part is a [`Report`], described here.
//!
//! A [`Report`] is built from the [`TrialResult`]s of a run and the
//! implementation's [`Expectations`] (known failures with a reason). It is
//! the source of every other form:
//!
//! - [`Report::to_json`]: the report itself, pretty JSON (`report.json`);
//!   [`Report::from_json`] reads it back, so reports of several runs can be
//!   combined later;
//! - [`Report::to_junit`]: JUnit XML for CI systems (`junit.xml`);
//! - [`Report::to_markdown`]: a summary, the unexpected results with their
//!   details and a per-clause coverage table, for pull requests
//!   (`report.md`); deterministic, so it can be snapshot-tested;
//! - [`Report::to_html`]: a self-contained page with the clause by
//!   implementation matrix, for one or several reports (`report.html`);
//! - [`diff::ReportDiff`]: what changed between two reports, for review.
//!
//! Layers, bottom up, no file importing one above it: the data (this
//! file: [`Report`] and its parts; `run.rs`: [`run::RunReport`];
//! `groups.rs`: failures grouped by cause); the renderers (`junit.rs`,
//! `markdown.rs`, `html.rs`, `diff.rs`), each adding its `to_*` methods to
//! the data types in its own file; `files.rs`, which writes the four
//! files of a run. So the data depends on no renderer, and a new form is
//! one new file.
//!
//! Outcomes: a trial's [`Verdict`] is the harness's judgement; its
//! [`Outcome`] adds the expectations. A failure (fail or error) named in the
//! expectations is an *expected failure*; a trial named there that passes is
//! an *unexpected pass*. Anything else that fails or errs is unexpected too
//! ([`Report::has_unexpected`]). An unsupported operation is never unexpected.
//!
//! Clause status (Markdown coverage and HTML matrix), per implementation:
//! the trials of every case that lists the clause, unsupported ones left out;
//! `pass` when all of them pass, `fail` when none does, `partial` otherwise.
//! A clause no case covers is `waived` when the spec map gives a waiver and
//! `not covered` otherwise (an alarm for a `must`).

pub mod diff;
mod files;
pub mod groups;
mod html;
mod junit;
mod markdown;
pub mod run;
#[cfg(test)]
mod tests;

use crate::adapter::Description;
use crate::runner::{TrialResult, Verdict};
use crate::suite::{Basis, Clause, Level, Quoted, SpecMap, Suite};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A suite module that took part in the run, with its version.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct SuiteInfo {
    /// Module name (`collection`).
    pub module: String,
    /// Version of the suite file.
    pub version: u32,
}

impl SuiteInfo {
    /// The module and version of a loaded suite.
    pub fn of(suite: &Suite) -> SuiteInfo {
        SuiteInfo {
            module: suite.module.clone(),
            version: suite.version,
        }
    }
}

/// A trial's verdict in the light of the expectations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Passed (with or without naming a clause, see the verdict), as expected.
    Pass,
    /// Failed or erred, and the expectations name it with a reason.
    ExpectedFailure,
    /// Passed although the expectations say it fails.
    UnexpectedPass,
    /// Failed, unexpectedly.
    Fail,
    /// Crashed, timed out, answered garbage or could not be set up, unexpectedly.
    Error,
    /// The implementation does not do this operation.
    Unsupported,
}

impl Outcome {
    /// Every outcome, in report order.
    pub const ALL: [Outcome; 6] = [
        Outcome::Pass,
        Outcome::ExpectedFailure,
        Outcome::UnexpectedPass,
        Outcome::Fail,
        Outcome::Error,
        Outcome::Unsupported,
    ];

    /// The outcome of a verdict, given whether the trial is expected to fail.
    pub fn of(verdict: Verdict, expected_failure: bool) -> Outcome {
        match (verdict, expected_failure) {
            (Verdict::Pass | Verdict::PassUnnamed, false) => Outcome::Pass,
            (Verdict::Pass | Verdict::PassUnnamed, true) => Outcome::UnexpectedPass,
            (Verdict::Fail | Verdict::Error, true) => Outcome::ExpectedFailure,
            (Verdict::Fail, false) => Outcome::Fail,
            (Verdict::Error, false) => Outcome::Error,
            (Verdict::Unsupported, _) => Outcome::Unsupported,
        }
    }

    /// The name used in reports (`expected failure`).
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::ExpectedFailure => "expected failure",
            Outcome::UnexpectedPass => "unexpected pass",
            Outcome::Fail => "fail",
            Outcome::Error => "error",
            Outcome::Unsupported => "unsupported",
        }
    }

    /// The kebab-case name of the JSON form, used as a CSS class.
    pub fn slug(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::ExpectedFailure => "expected-failure",
            Outcome::UnexpectedPass => "unexpected-pass",
            Outcome::Fail => "fail",
            Outcome::Error => "error",
            Outcome::Unsupported => "unsupported",
        }
    }

    /// Whether this outcome makes a run fail (fail, error, unexpected pass).
    pub fn is_unexpected(self) -> bool {
        matches!(
            self,
            Outcome::Fail | Outcome::Error | Outcome::UnexpectedPass
        )
    }
}

/// One trial of the run, with what the expectations say about it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ResultEntry {
    /// The trial as the runner decided it.
    #[serde(flatten)]
    pub result: TrialResult,
    /// The reason the expectations give, when they expect this trial to fail.
    #[serde(default)]
    pub expected_failure: Option<String>,
    /// The verdict in the light of the expectations.
    pub outcome: Outcome,
    /// The clauses the trial's case lists that rest on a decision (this
    /// project's reading where the spec is silent), from [`Report::with_spec`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub decisions: Vec<String>,
    /// The trial's tier: it rests on the text (`spec`) or on a decision
    /// (its case lists decisions only), from [`Report::with_spec`].
    #[serde(default)]
    pub tier: Basis,
}

impl ResultEntry {
    /// `module::case`.
    pub fn case_name(&self) -> String {
        format!("{}::{}", self.result.module, self.result.case)
    }

    /// `case::direction`, the trial's name inside its module.
    pub fn short_name(&self) -> String {
        format!("{}::{}", self.result.case, self.result.direction)
    }

    /// Whether the trial failed or erred (expected or not): on a trial of
    /// the `spec` tier, the implementation does not conform.
    pub fn failed(&self) -> bool {
        matches!(self.result.verdict, Verdict::Fail | Verdict::Error)
    }

    /// The outcome as a short label; a pass without a named clause says so.
    pub fn label(&self) -> &'static str {
        match (self.outcome, self.result.verdict) {
            (Outcome::Pass, Verdict::PassUnnamed) => "pass (no clause named)",
            (outcome, _) => outcome.name(),
        }
    }
}

/// How many trials ended in each outcome.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Summary {
    /// Every trial.
    pub total: usize,
    /// Passed as expected.
    pub pass: usize,
    /// Of `pass`: refusals that named no clause.
    pub pass_unnamed: usize,
    /// Failed or erred as the expectations say.
    pub expected_failure: usize,
    /// Passed although expected to fail.
    pub unexpected_pass: usize,
    /// Failed unexpectedly.
    pub fail: usize,
    /// Erred unexpectedly.
    pub error: usize,
    /// Operations the implementation does not do.
    pub unsupported: usize,
}

impl Summary {
    /// Counts the outcomes of `entries`.
    pub fn of<'a>(entries: impl IntoIterator<Item = &'a ResultEntry>) -> Summary {
        let mut s = Summary::default();
        for e in entries {
            s.count_one(e.outcome, e.result.verdict);
        }
        s
    }

    /// Counts one trial of `outcome` and `verdict`.
    pub fn count_one(&mut self, outcome: Outcome, verdict: Verdict) {
        self.total += 1;
        match outcome {
            Outcome::Pass => self.pass += 1,
            Outcome::ExpectedFailure => self.expected_failure += 1,
            Outcome::UnexpectedPass => self.unexpected_pass += 1,
            Outcome::Fail => self.fail += 1,
            Outcome::Error => self.error += 1,
            Outcome::Unsupported => self.unsupported += 1,
        }
        if outcome == Outcome::Pass && verdict == Verdict::PassUnnamed {
            self.pass_unnamed += 1;
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Summary) {
        self.total += other.total;
        self.pass += other.pass;
        self.pass_unnamed += other.pass_unnamed;
        self.expected_failure += other.expected_failure;
        self.unexpected_pass += other.unexpected_pass;
        self.fail += other.fail;
        self.error += other.error;
        self.unsupported += other.unsupported;
    }

    /// The number of trials with `outcome`.
    pub fn count(&self, outcome: Outcome) -> usize {
        match outcome {
            Outcome::Pass => self.pass,
            Outcome::ExpectedFailure => self.expected_failure,
            Outcome::UnexpectedPass => self.unexpected_pass,
            Outcome::Fail => self.fail,
            Outcome::Error => self.error,
            Outcome::Unsupported => self.unsupported,
        }
    }

    /// Fails, errors and unexpected passes.
    pub fn unexpected(&self) -> usize {
        self.fail + self.error + self.unexpected_pass
    }
}

/// Per-implementation known failures: trial or case name -> reason.
///
/// The file form is TOML, one table per entry:
///
/// ```toml
/// [[expected-failure]]
/// case = "collection::units-missing::read"   # one trial
/// reason = "does not check units yet"
///
/// [[expected-failure]]
/// case = "collection::nan-values"             # every direction of a case
/// reason = "NaN payloads are not kept"
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expectations {
    entries: BTreeMap<String, String>,
}

impl Expectations {
    /// Parses `[[expected-failure]]\ncase = "collection::x::read"\nreason = "..."` TOML.
    /// An entry may name a trial (`module::case::direction`) or a case
    /// (`module::case`, all its directions). Every entry needs a reason; a
    /// name given twice, an unknown key or an empty name is refused.
    pub fn parse(text: &str) -> Result<Expectations, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            #[serde(rename = "expected-failure", default)]
            entries: Vec<Entry>,
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            case: String,
            reason: String,
        }
        let file: File = toml::from_str(text).map_err(|e| format!("expectations: {e}"))?;
        let mut entries = BTreeMap::new();
        for Entry { case, reason } in file.entries {
            let case = case.trim().to_owned();
            if case.split("::").count() < 2 || case.split("::").any(str::is_empty) {
                return Err(format!("expectations: `{case}` is neither `module::case` nor `module::case::direction`"));
            }
            if reason.trim().is_empty() {
                return Err(format!("expectations: `{case}` has no reason"));
            }
            if entries
                .insert(case.clone(), reason.trim().to_owned())
                .is_some()
            {
                return Err(format!("expectations: `{case}` is listed twice"));
            }
        }
        Ok(Expectations { entries })
    }

    /// Reads and parses an expectations file.
    pub fn load(path: &Path) -> Result<Expectations, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Expectations::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The reason `trial` (`module::case::direction`) is expected to fail: its
    /// own entry, else its case's.
    pub fn reason(&self, trial: &str) -> Option<&str> {
        self.entries
            .get(trial)
            .or_else(|| {
                trial
                    .rsplit_once("::")
                    .and_then(|(case, _)| self.entries.get(case))
            })
            .map(String::as_str)
    }

    /// Entries that name no trial of `results` (an error for the CLI).
    pub fn unknown(&self, trials: &[String]) -> Vec<String> {
        let mut known: BTreeSet<&str> = BTreeSet::new();
        for trial in trials {
            known.insert(trial);
            if let Some((case, _)) = trial.rsplit_once("::") {
                known.insert(case);
            }
        }
        self.entries
            .keys()
            .filter(|k| !known.contains(k.as_str()))
            .cloned()
            .collect()
    }

    /// The entries, name -> reason, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The outcomes of one implementation's trials, tier by tier.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Tiers {
    /// Trials whose case rests on the spec's text.
    pub spec: Summary,
    /// Trials whose case rests on a project decision.
    pub decision: Summary,
}

/// A decision of the run, as the spec map gives it.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Decision {
    /// Why the rule is this project's reading.
    pub reason: String,
    /// Text that reads otherwise, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contrary: Option<Quoted>,
}

impl Decision {
    /// The decision of the spec map's `clause`.
    pub fn of(clause: &Clause) -> Decision {
        Decision {
            reason: clause.reason.clone().unwrap_or_default(),
            contrary: clause.contrary.clone(),
        }
    }
}

impl<'de> Deserialize<'de> for Decision {
    /// An object, or (reports of format 2) the reason alone.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Decision, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Form {
            Reason(String),
            Full {
                reason: String,
                #[serde(default)]
                contrary: Option<Quoted>,
            },
        }
        Ok(match Form::deserialize(d)? {
            Form::Reason(reason) => Decision {
                reason,
                contrary: None,
            },
            Form::Full { reason, contrary } => Decision { reason, contrary },
        })
    }
}

/// One run of the suite against one implementation: the source of every other report.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Report {
    /// The version of the harness that ran.
    pub harness_version: String,
    /// The suite modules that ran, sorted by module.
    pub suites: Vec<SuiteInfo>,
    /// The implementation under test.
    pub implementation: Description,
    /// Every trial, sorted by module, case and direction.
    pub results: Vec<ResultEntry>,
    /// Counts per outcome.
    pub summary: Summary,
    /// Counts per outcome, tier by tier, from [`Report::with_spec`].
    #[serde(default)]
    pub tiers: Tiers,
    /// Whether no trial that rests on the spec's text fails or errs (a
    /// failure the expectations name included): the implementation
    /// conforms, whatever it makes of the decisions.
    #[serde(default)]
    pub conforming: bool,
    /// Every clause of the run that rests on a decision, with the spec
    /// map's reason and contrary text, from [`Report::with_spec`].
    #[serde(default)]
    pub decisions: BTreeMap<String, Decision>,
}

impl Report {
    /// Builds the report of a run: applies `expectations`, sorts the trials
    /// and counts the outcomes.
    pub fn new(
        implementation: Description,
        mut suites: Vec<SuiteInfo>,
        results: Vec<TrialResult>,
        expectations: &Expectations,
    ) -> Report {
        suites.sort();
        let mut results: Vec<ResultEntry> = results
            .into_iter()
            .map(|result| {
                let expected_failure = expectations.reason(&result.trial).map(str::to_owned);
                let outcome = Outcome::of(result.verdict, expected_failure.is_some());
                ResultEntry {
                    result,
                    expected_failure,
                    outcome,
                    decisions: Vec::new(),
                    tier: Basis::Spec,
                }
            })
            .collect();
        results.sort_by(|a, b| {
            let key = |e: &ResultEntry| {
                (
                    e.result.module.clone(),
                    e.result.case.clone(),
                    e.result.direction,
                )
            };
            key(a).cmp(&key(b))
        });
        let summary = Summary::of(&results);
        let mut report = Report {
            harness_version: env!("CARGO_PKG_VERSION").to_owned(),
            suites,
            implementation,
            results,
            summary,
            tiers: Tiers::default(),
            conforming: false,
            decisions: BTreeMap::new(),
        };
        report.count_tiers();
        report
    }

    /// Recounts [`Report::tiers`] and [`Report::conforming`] from the trials.
    pub(super) fn count_tiers(&mut self) {
        let (decided, stated): (Vec<&ResultEntry>, Vec<&ResultEntry>) =
            self.results.iter().partition(|e| e.tier == Basis::Decision);
        self.conforming = !stated.iter().any(|e| e.failed());
        self.tiers = Tiers {
            spec: Summary::of(stated),
            decision: Summary::of(decided),
        };
    }

    /// The trials of the decision tier that failed or erred: where the
    /// implementation reads a decision otherwise.
    pub fn decisions_read_otherwise(&self) -> Vec<&ResultEntry> {
        self.results
            .iter()
            .filter(|e| e.tier == Basis::Decision && e.failed())
            .collect()
    }

    /// The verdict of the run in one sentence, the first line of every
    /// report: conforming or not, on how many trials of each tier.
    pub fn conformance_line(&self) -> String {
        let spec = &self.tiers.spec;
        let judged = spec.total - spec.unsupported;
        let failed = self
            .results
            .iter()
            .filter(|e| e.tier == Basis::Spec && e.failed())
            .count();
        let otherwise = self.decisions_read_otherwise().len();
        let decisions = if otherwise == 0 {
            if self.tiers.decision.total == self.tiers.decision.unsupported {
                String::new()
            } else {
                "; it follows every decision of this project too".to_owned()
            }
        } else {
            format!(
                "; it reads {otherwise} decision trial{} otherwise (this project's reading where the text is silent: not a defect)",
                if otherwise == 1 { "" } else { "s" }
            )
        };
        if self.conforming {
            format!(
                "Conforming: passes all {} trials that rest on the spec's text{decisions}.",
                judged - failed
            )
        } else {
            format!(
                "Not conforming: {failed} of {judged} trials that rest on the spec's text fail{decisions}."
            )
        }
    }

    /// Whether the run fails: an unexpected outcome on a trial of the
    /// `spec` tier, or (`strict`) of either tier.
    pub fn fails_run(&self, strict: bool) -> bool {
        self.results
            .iter()
            .any(|e| e.outcome.is_unexpected() && (strict || e.tier == Basis::Spec))
    }

    /// Marks, from the spec map, which clauses of the run rest on a
    /// decision: on every trial that lists one and in [`Report::decisions`].
    pub fn with_spec(mut self, spec: &SpecMap) -> Report {
        self.decisions.clear();
        for entry in &mut self.results {
            let r = &entry.result;
            let mut ids: Vec<String> = r
                .clauses
                .iter()
                .chain(r.expected_clause.iter())
                .filter(|id| spec.get(*id).is_some_and(Clause::is_decision))
                .cloned()
                .collect();
            ids.sort();
            ids.dedup();
            for id in &ids {
                self.decisions.insert(id.clone(), Decision::of(&spec[id]));
            }
            entry.tier = if ids.is_empty() {
                Basis::Spec
            } else {
                Basis::Decision
            };
            entry.decisions = ids;
        }
        self.count_tiers();
        self
    }

    /// Whether anything is unexpected (fail or error not expected, or an expected failure that passed).
    pub fn has_unexpected(&self) -> bool {
        self.results.iter().any(|e| e.outcome.is_unexpected())
    }

    /// The trial names of the run (for [`Expectations::unknown`]).
    pub fn trials(&self) -> Vec<String> {
        self.results
            .iter()
            .map(|e| e.result.trial.clone())
            .collect()
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        pretty_json(self)
    }

    /// Reads a report written by [`Report::to_json`].
    pub fn from_json(text: &str) -> Result<Report, String> {
        serde_json::from_str(text).map_err(|e| format!("report: {e}"))
    }

    /// The trials of cases that list `clause`.
    fn covering(&self, clause: &str) -> Vec<&ResultEntry> {
        self.results
            .iter()
            .filter(|e| e.result.clauses.iter().any(|c| c == clause))
            .collect()
    }
}

/// How one implementation fares on one clause.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// Every judged trial passed.
    Pass,
    /// Some passed, some did not.
    Partial,
    /// None passed.
    Fail,
    /// Covered, but every trial was unsupported.
    Unsupported,
    /// No case covers it; the spec map gives a waiver.
    Waived,
    /// No case covers it and no waiver.
    Uncovered,
}

impl Status {
    fn slug(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Partial => "partial",
            Status::Fail => "fail",
            Status::Unsupported => "unsupported",
            Status::Waived => "waived",
            Status::Uncovered => "uncovered",
        }
    }
}

/// The status of a clause for one implementation, with its counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Coverage {
    status: Status,
    /// Trials that passed.
    passed: usize,
    /// Trials judged (not unsupported).
    judged: usize,
    /// Of the failing ones: expected failures.
    expected: usize,
}

impl Coverage {
    fn of(entries: &[&ResultEntry], clause: Option<&Clause>) -> Coverage {
        let judged = entries
            .iter()
            .filter(|e| e.result.verdict != Verdict::Unsupported)
            .count();
        let passed = entries.iter().filter(|e| e.result.verdict.passed()).count();
        let expected = entries
            .iter()
            .filter(|e| e.outcome == Outcome::ExpectedFailure)
            .count();
        let status = if entries.is_empty() {
            if clause.is_some_and(|c| c.waiver.is_some()) {
                Status::Waived
            } else {
                Status::Uncovered
            }
        } else if judged == 0 {
            Status::Unsupported
        } else if passed == judged {
            Status::Pass
        } else if passed == 0 {
            Status::Fail
        } else {
            Status::Partial
        };
        Coverage {
            status,
            passed,
            judged,
            expected,
        }
    }

    /// `pass 3/3`, `partial 2/3 (1 expected)`, `waived`, `not covered`.
    fn text(&self) -> String {
        let mut text = match self.status {
            Status::Waived => return "waived".into(),
            Status::Uncovered => return "not covered".into(),
            Status::Unsupported => return "unsupported".into(),
            s => format!("{} {}/{}", s.slug(), self.passed, self.judged),
        };
        if self.expected > 0 {
            text.push_str(&format!(" ({} expected)", self.expected));
        }
        text
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Must => "must",
        Level::Should => "should",
        Level::May => "may",
    }
}

/// Clause ids the results refer to that the spec map does not have.
fn unmapped_clauses<'a>(
    reports: impl IntoIterator<Item = &'a Report>,
    spec: &SpecMap,
) -> BTreeSet<String> {
    reports
        .into_iter()
        .flat_map(|r| r.results.iter())
        .flat_map(|e| e.result.clauses.iter())
        .filter(|c| !spec.contains_key(*c))
        .cloned()
        .collect()
}

/// The decision trials each of `reports` reads otherwise, with its report,
/// in report order (what every form lists apart from the failures).
pub(crate) fn read_otherwise(reports: &[Report]) -> Vec<(&Report, &ResultEntry)> {
    reports
        .iter()
        .flat_map(|r| {
            r.decisions_read_otherwise()
                .into_iter()
                .map(move |e| (r, e))
        })
        .collect()
}

/// What an implementation does, in words (`writes and reads`).
pub(crate) fn does(implementation: &Description) -> &'static str {
    match (
        implementation.capabilities.write,
        implementation.capabilities.read,
    ) {
        (true, true) => "writes and reads",
        (true, false) => "writes only",
        (false, true) => "reads only",
        (false, false) => "neither writes nor reads",
    }
}

/// Pretty JSON with a final newline, of plain data (which always serializes).
pub(crate) fn pretty_json(value: &impl Serialize) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("plain data always serializes");
    text.push('\n');
    text
}

/// A rendered report (JUnit, Markdown, HTML) with every character XML 1.0
/// cannot carry, or that HTML reads as a control, spelled out as Rust
/// writes it (`\u{1b}`): the C0 controls but tab, line feed and carriage
/// return, DEL and the C1 controls, and the noncharacters (U+FFFE, U+FFFF,
/// U+FDD0 to U+FDEF, and the last two of each plane). So an adapter's
/// NUL or ANSI colour code is seen where it was, and the file stays well
/// formed; `report.json` keeps the text exact.
pub(crate) fn visible(text: String) -> String {
    let hidden = |c: char| {
        (c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
            || ('\u{FDD0}'..='\u{FDEF}').contains(&c)
            || (c as u32) & 0xFFFE == 0xFFFE
    };
    if !text.contains(hidden) {
        return text;
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The most of a trial's detail a rendered report shows, in bytes: an
/// adapter may answer with a message of up to `--max-answer-mib`, which
/// every form would repeat wherever the trial appears.
const SHOWN_DETAIL_BYTES: usize = 16 * 1024;

/// A trial's detail as a rendered report shows it: whole up to
/// [`SHOWN_DETAIL_BYTES`], else cut there (on a character boundary) with
/// a line that says how much is left out and where it is whole.
pub(crate) fn shown_detail(detail: &str) -> std::borrow::Cow<'_, str> {
    if detail.len() <= SHOWN_DETAIL_BYTES {
        return detail.into();
    }
    let mut end = SHOWN_DETAIL_BYTES;
    while !detail.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[… {} more bytes cut; report.json has the whole detail]",
        &detail[..end],
        detail.len() - end
    )
    .into()
}

/// The first line of a detail, shortened to `max` characters.
pub(crate) fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}
