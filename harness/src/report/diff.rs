//! What changed between two runs (`harness report diff OLD.json NEW.json`):
//! trial by trial and clause by clause, for a pull request's review.
//!
//! A trial in both runs whose outcome, verdict or named clause changed is a
//! *change*, ranked by what the trial shows of the implementation:
//!
//! | rank | outcome |
//! |---|---|
//! | 3 | pass, naming the clause asked for (or no clause asked for) |
//! | 2 | pass, a refusal that named no clause |
//! | 1 | expected failure, unsupported |
//! | 0 | fail, error, unexpected pass |
//!
//! A change to a lower rank is *worse*, to a higher one *better*, within a
//! rank *other* (expected failure to unsupported, another clause named).
//! A trial only in the new run is worse when its outcome is unexpected; a
//! trial only in the old run is listed as removed. A clause's coverage (the
//! passing and judged trials of the cases listing it) changed when either
//! count did; worse when its status fell (pass, then partial, then fail;
//! a clause that loses every case is worse too). A refusal whose message
//! (the trial's detail) changed is listed with both messages, so a reworded
//! refusal is reviewed like a snapshot.

use super::markdown::{code, fence_for, literal};
use super::run::{suites_text, RunReport};
use super::{shown_detail, visible, Outcome, Report, ResultEntry, SuiteInfo, Summary};
use crate::adapter::{Capabilities, Description};
use crate::runner::Verdict;
use crate::suite::Basis;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// The version of the diff's JSON form.
pub const DIFF_FORMAT_VERSION: u32 = 1;

/// Which side of a comparison got better.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// The new run shows the implementation doing less well.
    Worse,
    /// The new run shows it doing better.
    Better,
    /// Changed without a rank's change.
    Other,
}

/// One run as the diff names it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Side {
    /// The implementation's name and version.
    pub implementation: String,
    /// The suite modules and versions of the run.
    pub suites: Vec<SuiteInfo>,
    /// Trials of the run.
    pub trials: usize,
    /// Fails, errors and unexpected passes of the run.
    pub unexpected: usize,
    /// The run's conformance line (conforming or not, and the decision
    /// trials read otherwise).
    #[serde(default)]
    pub conformance: String,
}

/// One trial's state in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialState {
    /// The outcome.
    pub outcome: Outcome,
    /// The verdict.
    pub verdict: Verdict,
    /// The clause a refusal named.
    pub named_clause: Option<String>,
    /// The first line of the detail.
    pub detail: String,
    /// Whether the trial rests on the text or on a decision.
    #[serde(default)]
    pub tier: Basis,
}

/// A trial of both runs that changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialChange {
    /// `module::case::direction`.
    pub trial: String,
    /// Worse, better or other.
    pub direction: Direction,
    /// In the old run.
    pub old: TrialState,
    /// In the new run.
    pub new: TrialState,
}

/// A trial of one run only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrialOnly {
    /// `module::case::direction`.
    pub trial: String,
    /// Its state in the run that has it.
    pub state: TrialState,
}

/// A clause's coverage in one run: trials of the cases that list it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClauseCount {
    /// Trials that passed.
    pub passed: usize,
    /// Trials judged (not unsupported).
    pub judged: usize,
    /// Every trial listing the clause.
    pub trials: usize,
}

impl ClauseCount {
    /// 3 every judged trial passed, 2 some, 1 none, 0 no case lists it;
    /// covered but never judged (unsupported) ranks with a partial pass.
    fn rank(self) -> u8 {
        match (self.trials, self.judged, self.passed) {
            (0, _, _) => 0,
            (_, 0, _) => 2,
            (_, j, p) if p == j => 3,
            (_, _, 0) => 1,
            _ => 2,
        }
    }

    fn text(self) -> String {
        match self.rank() {
            0 => "no case".into(),
            _ if self.judged == 0 => format!("unsupported ({} trials)", self.trials),
            _ => format!("{}/{} pass", self.passed, self.judged),
        }
    }
}

/// A clause whose coverage changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClauseChange {
    /// The clause id.
    pub clause: String,
    /// Worse, better or other.
    pub direction: Direction,
    /// In the old run.
    pub old: ClauseCount,
    /// In the new run.
    pub new: ClauseCount,
}

/// A refusal of both runs whose message changed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageChange {
    /// `module::case::direction`.
    pub trial: String,
    /// The old message (the trial's whole detail).
    pub old: String,
    /// The new message.
    pub new: String,
}

/// What changed between two reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportDiff {
    /// [`DIFF_FORMAT_VERSION`].
    pub format_version: u32,
    /// The old run.
    pub old: Side,
    /// The new run.
    pub new: Side,
    /// Whether the two runs ran different suite versions (their trials may
    /// then differ in meaning, not only in result).
    pub suites_differ: bool,
    /// Trials of both runs that changed, by trial name.
    pub changed: Vec<TrialChange>,
    /// Trials only the new run has.
    pub added: Vec<TrialOnly>,
    /// Trials only the old run has.
    pub removed: Vec<TrialOnly>,
    /// Clauses whose coverage changed.
    pub clauses: Vec<ClauseChange>,
    /// Refusals whose message changed.
    pub messages: Vec<MessageChange>,
    /// Worse trials (changed or added) and worse clauses.
    pub worse: usize,
    /// Better trials and better clauses.
    pub better: usize,
}

/// When `harness report diff` exits with 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailOn {
    /// Something got worse.
    Worse,
    /// Anything changed (a message, a trial added, a clause's counts).
    Any,
    /// Never (the diff is for reading only).
    Never,
}

impl ReportDiff {
    /// Compares two reports.
    pub fn between(old: &Report, new: &Report) -> ReportDiff {
        let old_trials = by_trial(old);
        let new_trials = by_trial(new);
        let mut changed = Vec::new();
        let mut messages = Vec::new();
        let mut removed = Vec::new();
        for (trial, o) in &old_trials {
            let Some(n) = new_trials.get(trial) else {
                removed.push(TrialOnly {
                    trial: trial.clone(),
                    state: state(o),
                });
                continue;
            };
            let (os, ns) = (state(o), state(n));
            if os.outcome != ns.outcome
                || os.verdict != ns.verdict
                || os.named_clause != ns.named_clause
            {
                changed.push(TrialChange {
                    trial: trial.clone(),
                    direction: compare(rank(o), rank(n)),
                    old: os,
                    new: ns,
                });
            }
            let refusal = o.result.expected_clause.is_some() || n.result.expected_clause.is_some();
            if refusal && o.result.detail != n.result.detail {
                messages.push(MessageChange {
                    trial: trial.clone(),
                    old: o.result.detail.clone(),
                    new: n.result.detail.clone(),
                });
            }
        }
        let added: Vec<TrialOnly> = new_trials
            .iter()
            .filter(|(trial, _)| !old_trials.contains_key(*trial))
            .map(|(trial, n)| TrialOnly {
                trial: trial.clone(),
                state: state(n),
            })
            .collect();
        let (old_clauses, new_clauses) = (clause_counts(old), clause_counts(new));
        let ids: BTreeSet<&String> = old_clauses.keys().chain(new_clauses.keys()).collect();
        let none = ClauseCount {
            passed: 0,
            judged: 0,
            trials: 0,
        };
        let clauses: Vec<ClauseChange> = ids
            .into_iter()
            .filter_map(|id| {
                let o = old_clauses.get(id).copied().unwrap_or(none);
                let n = new_clauses.get(id).copied().unwrap_or(none);
                (o != n).then(|| ClauseChange {
                    clause: id.clone(),
                    direction: compare(o.rank(), n.rank()),
                    old: o,
                    new: n,
                })
            })
            .collect();
        let count = |d: Direction| {
            changed.iter().filter(|c| c.direction == d).count()
                + clauses.iter().filter(|c| c.direction == d).count()
        };
        let worse = count(Direction::Worse)
            + added
                .iter()
                .filter(|a| a.state.outcome.is_unexpected())
                .count();
        let better = count(Direction::Better);
        ReportDiff {
            format_version: DIFF_FORMAT_VERSION,
            old: side(old),
            new: side(new),
            suites_differ: old.suites != new.suites,
            changed,
            added,
            removed,
            clauses,
            messages,
            worse,
            better,
        }
    }

    /// Whether nothing changed at all.
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty()
            && self.added.is_empty()
            && self.removed.is_empty()
            && self.clauses.is_empty()
            && self.messages.is_empty()
    }

    /// Whether `harness report diff --fail-on <fail_on>` exits with 1.
    pub fn fails(&self, fail_on: FailOn) -> bool {
        match fail_on {
            FailOn::Worse => self.worse > 0,
            FailOn::Any => !self.is_empty(),
            FailOn::Never => false,
        }
    }

    /// The diff as pretty JSON.
    pub fn to_json(&self) -> String {
        super::pretty_json(self)
    }

    /// Markdown to paste in a pull request: a summary table, then worse,
    /// better and other changes, trials added and removed, clauses and
    /// refusal messages (as a `diff` block). Deterministic.
    pub fn to_markdown(&self) -> String {
        visible(self.markdown())
    }

    fn markdown(&self) -> String {
        let mut md = String::new();
        let (o, n) = (&self.old, &self.new);
        let _ = writeln!(
            md,
            "## Conformance diff: {} → {}\n",
            literal(&o.implementation),
            literal(&n.implementation)
        );
        let (old, new) = (literal(&o.conformance), literal(&n.conformance));
        if old == new {
            let _ = writeln!(md, "Old and new: {new}\n");
        } else {
            let _ = writeln!(md, "- old: {old}\n- new: {new}\n");
        }
        if self.suites_differ {
            let _ = writeln!(
                md,
                "The runs used different suite versions ({} → {}): some trials may differ in meaning, not only in result.\n",
                literal(&suites_text(&o.suites)),
                literal(&suites_text(&n.suites))
            );
        }
        let _ = writeln!(md, "| | old | new |\n|---|---|---|");
        let _ = writeln!(md, "| trials | {} | {} |", o.trials, n.trials);
        let _ = writeln!(
            md,
            "| unexpected (fail, error, unexpected pass) | {} | {} |\n",
            o.unexpected, n.unexpected
        );
        if self.is_empty() {
            md.push_str("No trial, clause or refusal message changed.\n");
            return md;
        }
        let clauses = |d: Direction| self.clauses.iter().filter(|c| c.direction == d).count();
        let (worse_clauses, better_clauses) =
            (clauses(Direction::Worse), clauses(Direction::Better));
        let _ = writeln!(
            md,
            "**{} worse** (trials: {}, clauses: {}), **{} better** (trials: {}, clauses: {}). Trials changed: {}, added: {}, removed: {}. Clauses changed: {}. Refusal messages changed: {}.\n",
            self.worse,
            self.worse - worse_clauses,
            worse_clauses,
            self.better,
            self.better - better_clauses,
            better_clauses,
            self.changed.len(),
            self.added.len(),
            self.removed.len(),
            self.clauses.len(),
            self.messages.len()
        );
        for (direction, title) in [
            (Direction::Worse, "Worse"),
            (Direction::Better, "Better"),
            (Direction::Other, "Other changes"),
        ] {
            let rows: Vec<&TrialChange> = self
                .changed
                .iter()
                .filter(|c| c.direction == direction)
                .collect();
            if rows.is_empty() {
                continue;
            }
            let _ = writeln!(md, "### {title} ({})\n", rows.len());
            let _ = writeln!(md, "| trial | old | new | new detail |\n|---|---|---|---|");
            for c in rows {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} |",
                    code(&c.trial),
                    state_text(&c.old),
                    state_text(&c.new),
                    literal(&c.new.detail)
                );
            }
            md.push('\n');
        }
        for (rows, title) in [
            (&self.added, "Trials added"),
            (&self.removed, "Trials removed"),
        ] {
            if rows.is_empty() {
                continue;
            }
            let _ = writeln!(md, "### {title} ({})\n", rows.len());
            let _ = writeln!(md, "| trial | outcome | detail |\n|---|---|---|");
            for t in rows {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} |",
                    code(&t.trial),
                    state_text(&t.state),
                    literal(&t.state.detail)
                );
            }
            md.push('\n');
        }
        if !self.clauses.is_empty() {
            let _ = writeln!(
                md,
                "### Clauses whose coverage changed ({})\n",
                self.clauses.len()
            );
            let _ = writeln!(md, "| clause | | old | new |\n|---|---|---|---|");
            for c in &self.clauses {
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {} |",
                    code(&c.clause),
                    direction_name(c.direction),
                    c.old.text(),
                    c.new.text()
                );
            }
            md.push('\n');
        }
        if !self.messages.is_empty() {
            let _ = writeln!(
                md,
                "### Refusal messages that changed ({})\n",
                self.messages.len()
            );
            let mut body = String::new();
            for m in &self.messages {
                let _ = writeln!(body, " {}", m.trial);
                for line in shown_detail(&m.old).lines() {
                    let _ = writeln!(body, "-    {line}");
                }
                for line in shown_detail(&m.new).lines() {
                    let _ = writeln!(body, "+    {line}");
                }
            }
            let fence = fence_for(&body);
            let _ = write!(md, "{fence}diff\n{body}{fence}\n");
        }
        md
    }
}

fn by_trial(report: &Report) -> BTreeMap<String, &ResultEntry> {
    report
        .results
        .iter()
        .map(|e| (e.result.trial.clone(), e))
        .collect()
}

fn state(e: &ResultEntry) -> TrialState {
    TrialState {
        outcome: e.outcome,
        verdict: e.result.verdict,
        named_clause: e.result.named_clause.clone(),
        detail: super::first_line(&e.result.detail, 160),
        tier: e.tier,
    }
}

/// The rank of the module documentation's table.
fn rank(e: &ResultEntry) -> u8 {
    match (e.outcome, e.result.verdict) {
        (Outcome::Pass, Verdict::PassUnnamed) => 2,
        (Outcome::Pass, _) => 3,
        (Outcome::ExpectedFailure | Outcome::Unsupported, _) => 1,
        (Outcome::Fail | Outcome::Error | Outcome::UnexpectedPass, _) => 0,
    }
}

fn compare(old: u8, new: u8) -> Direction {
    match new.cmp(&old) {
        std::cmp::Ordering::Less => Direction::Worse,
        std::cmp::Ordering::Greater => Direction::Better,
        std::cmp::Ordering::Equal => Direction::Other,
    }
}

fn clause_counts(report: &Report) -> BTreeMap<String, ClauseCount> {
    let mut counts: BTreeMap<String, ClauseCount> = BTreeMap::new();
    for e in &report.results {
        let clauses: BTreeSet<&String> = e.result.clauses.iter().collect();
        for clause in clauses {
            let c = counts.entry(clause.clone()).or_insert(ClauseCount {
                passed: 0,
                judged: 0,
                trials: 0,
            });
            c.trials += 1;
            if e.result.verdict != Verdict::Unsupported {
                c.judged += 1;
            }
            if e.result.verdict.passed() {
                c.passed += 1;
            }
        }
    }
    counts
}

fn side(report: &Report) -> Side {
    Side {
        implementation: format!(
            "{} {}",
            report.implementation.name, report.implementation.version
        ),
        suites: report.suites.clone(),
        trials: report.results.len(),
        unexpected: report
            .results
            .iter()
            .filter(|e| e.outcome.is_unexpected())
            .count(),
        conformance: report.conformance_line(),
    }
}

fn state_text(s: &TrialState) -> String {
    let mut text = match (s.outcome, s.verdict) {
        (Outcome::Pass, Verdict::PassUnnamed) => "pass (no clause named)".to_owned(),
        (outcome, _) => outcome.name().to_owned(),
    };
    if let Some(clause) = &s.named_clause {
        let _ = write!(text, " {}", code(clause));
    }
    if s.tier == Basis::Decision {
        text.push_str(" · decision");
    }
    text
}

fn direction_name(d: Direction) -> &'static str {
    match d {
        Direction::Worse => "worse",
        Direction::Better => "better",
        Direction::Other => "changed",
    }
}

/// What changed between two runs of one or several implementations: a
/// [`ReportDiff`] per implementation in both runs (matched by name; two
/// runs of one implementation each are compared whatever their names), one
/// for the interop trials when either run has them, and the
/// implementations only one run has.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunDiff {
    /// [`RUN_DIFF_FORMAT_VERSION`].
    pub format_version: u32,
    /// One diff per implementation in both runs, then the interop trials'.
    pub diffs: Vec<ReportDiff>,
    /// Implementations only the new run has.
    pub implementations_added: Vec<String>,
    /// Implementations only the old run has.
    pub implementations_removed: Vec<String>,
}

/// The version of [`RunDiff`]'s JSON form.
pub const RUN_DIFF_FORMAT_VERSION: u32 = 2;

impl RunDiff {
    /// Compares two runs.
    pub fn between(old: &RunReport, new: &RunReport) -> RunDiff {
        let mut diffs = Vec::new();
        let mut added = Vec::new();
        let mut removed = Vec::new();
        if let ([o], [n]) = (
            old.implementations.as_slice(),
            new.implementations.as_slice(),
        ) {
            diffs.push(ReportDiff::between(o, n));
        } else {
            for n in &new.implementations {
                match old
                    .implementations
                    .iter()
                    .find(|o| o.implementation.name == n.implementation.name)
                {
                    Some(o) => diffs.push(ReportDiff::between(o, n)),
                    None => added.push(n.implementation.name.clone()),
                }
            }
            for o in &old.implementations {
                if !new
                    .implementations
                    .iter()
                    .any(|n| n.implementation.name == o.implementation.name)
                {
                    removed.push(o.implementation.name.clone());
                }
            }
        }
        if !old.interop.is_empty() || !new.interop.is_empty() {
            diffs.push(ReportDiff::between(
                &interop_report(old),
                &interop_report(new),
            ));
        }
        RunDiff {
            format_version: RUN_DIFF_FORMAT_VERSION,
            diffs,
            implementations_added: added,
            implementations_removed: removed,
        }
    }

    /// (worse, better, trials changed), summed over the diffs.
    pub fn counts(&self) -> (usize, usize, usize) {
        self.diffs.iter().fold((0, 0, 0), |(w, b, c), d| {
            (w + d.worse, b + d.better, c + d.changed.len())
        })
    }

    /// Whether `harness report diff --fail-on <fail_on>` exits with 1; an
    /// implementation added or removed is a change, not worse.
    pub fn fails(&self, fail_on: FailOn) -> bool {
        let membership =
            !self.implementations_added.is_empty() || !self.implementations_removed.is_empty();
        self.diffs.iter().any(|d| d.fails(fail_on)) || (fail_on == FailOn::Any && membership)
    }

    /// The diff as pretty JSON.
    pub fn to_json(&self) -> String {
        super::pretty_json(self)
    }

    /// Markdown: each implementation's diff (one section each), then the
    /// implementations only one run has.
    pub fn to_markdown(&self) -> String {
        let mut md = String::new();
        for d in &self.diffs {
            md.push_str(&d.to_markdown());
            md.push('\n');
        }
        for (what, names) in [
            ("only in the new run", &self.implementations_added),
            ("only in the old run", &self.implementations_removed),
        ] {
            if !names.is_empty() {
                let _ = writeln!(
                    md,
                    "Implementations {what}: {}.\n",
                    literal(&names.join(", "))
                );
            }
        }
        while md.ends_with("\n\n") {
            md.pop();
        }
        visible(md)
    }
}

/// The interop trials of a run as one report of an implementation called
/// `interop`, so that [`ReportDiff`] compares them as it compares trials.
fn interop_report(run: &RunReport) -> Report {
    let results: Vec<ResultEntry> = run.interop.iter().map(|e| e.as_entry()).collect();
    let mut report = Report {
        harness_version: run.harness_version.clone(),
        suites: run.suites.clone(),
        implementation: Description {
            name: "interop".into(),
            version: format!("{} implementations", run.implementations.len()),
            capabilities: Capabilities {
                write: true,
                read: true,
            },
        },
        summary: Summary::of(&results),
        results,
        tiers: Default::default(),
        conforming: false,
        decisions: BTreeMap::new(),
    };
    report.count_tiers();
    report
}
