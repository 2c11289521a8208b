//! One run of the suites against several implementations: their reports
//! side by side and the writer × reader interop matrix. This is
//! `report.json` (format [`RUN_FORMAT_VERSION`], JSON Schema:
//! `docs/schemas/report.schema.json`); a single-implementation report of
//! format 1 (a [`Report`] alone) is read as a run of one.

use super::{groups, Expectations, Outcome, Report, ResultEntry, SuiteInfo};
use crate::interop::InteropResult;
use crate::runner::{TrialResult, Verdict};
use crate::suite::{Basis, Direction, Kind, SpecMap};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The format of `report.json` this harness writes. Format 1 was one
/// implementation's [`Report`] alone; format 2 had no tiers (every trial
/// reads as resting on the text until [`RunReport::with_spec`] marks it).
pub const RUN_FORMAT_VERSION: u32 = 3;

/// An interop trial in the light of the expectations of its two sides.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct InteropEntry {
    /// The trial as the harness decided it.
    #[serde(flatten)]
    pub result: InteropResult,
    /// The reason the writer's or the reader's expectations give, when
    /// either expects this trial (or its case) to fail.
    #[serde(default)]
    pub expected_failure: Option<String>,
    /// The verdict in the light of the expectations.
    pub outcome: Outcome,
    /// The trial's tier: its case rests on the text or on a decision.
    #[serde(default)]
    pub tier: Basis,
}

impl InteropEntry {
    /// The trial as an implementation's trial of a round-trip case read
    /// back, so that what lists trials (JUnit, `report diff`) lists it too.
    pub fn as_entry(&self) -> ResultEntry {
        let r = &self.result;
        ResultEntry {
            result: TrialResult {
                trial: r.trial.clone(),
                module: r.module.clone(),
                case: r.case.clone(),
                title: r.title.clone(),
                direction: Direction::Read,
                kind: Kind::RoundTrip,
                clauses: r.clauses.clone(),
                expected_clause: None,
                also_accepted: Vec::new(),
                named_clause: None,
                verdict: r.verdict,
                detail: r.detail.clone(),
            },
            expected_failure: self.expected_failure.clone(),
            outcome: self.outcome,
            decisions: Vec::new(),
            tier: self.tier,
        }
    }
}

/// Every implementation's report of one run (or of several runs, merged),
/// and the interop trials between them.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RunReport {
    /// [`RUN_FORMAT_VERSION`].
    pub format_version: u32,
    /// The version of the harness that ran (of the newest, when merged).
    pub harness_version: String,
    /// The suite modules that ran, sorted.
    pub suites: Vec<SuiteInfo>,
    /// One report per implementation, in the order they were named.
    pub implementations: Vec<Report>,
    /// Writer × reader trials, sorted by trial name.
    #[serde(default)]
    pub interop: Vec<InteropEntry>,
}

/// How many interop cases one writer × reader pair agrees on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairCount {
    /// Trials that passed.
    pub passed: usize,
    /// Trials judged (not unsupported).
    pub judged: usize,
}

impl RunReport {
    /// The run of `implementations` (reports built with their own
    /// expectations) and the interop trials, the latter judged against the
    /// expectations of their writer and reader (`expectations` by name).
    pub fn new(
        mut suites: Vec<SuiteInfo>,
        implementations: Vec<Report>,
        interop: Vec<InteropResult>,
        expectations: &BTreeMap<String, Expectations>,
        spec: &SpecMap,
    ) -> RunReport {
        suites.sort();
        suites.dedup();
        let none = Expectations::default();
        let mut interop: Vec<InteropEntry> = interop
            .into_iter()
            .map(|result| {
                let reason = [&result.writer, &result.reader]
                    .into_iter()
                    .find_map(|name| {
                        expectations
                            .get(name)
                            .unwrap_or(&none)
                            .reason(&result.trial)
                            .or_else(|| {
                                let case = format!("{}::{}", result.module, result.case);
                                expectations.get(name).unwrap_or(&none).reason(&case)
                            })
                    })
                    .map(str::to_owned);
                let outcome = Outcome::of(result.verdict, reason.is_some());
                let tier = Basis::of_clauses(&result.clauses, spec);
                InteropEntry {
                    result,
                    expected_failure: reason,
                    outcome,
                    tier,
                }
            })
            .collect();
        interop.sort_by(|a, b| a.result.trial.cmp(&b.result.trial));
        RunReport {
            format_version: RUN_FORMAT_VERSION,
            harness_version: env!("CARGO_PKG_VERSION").to_owned(),
            suites,
            implementations,
            interop,
        }
    }

    /// A run of one implementation, without interop.
    pub fn single(report: Report) -> RunReport {
        RunReport {
            format_version: RUN_FORMAT_VERSION,
            harness_version: report.harness_version.clone(),
            suites: report.suites.clone(),
            implementations: vec![report],
            interop: Vec::new(),
        }
    }

    /// Reads `report.json`: this format, or format 1 (one implementation's
    /// [`Report`]), read as a run of one.
    pub fn from_json(text: &str) -> Result<RunReport, String> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("report: {e}"))?;
        if value.get("implementation").is_some() && value.get("implementations").is_none() {
            return Report::from_json(text).map(RunReport::single);
        }
        match value.get("format_version").and_then(serde_json::Value::as_u64) {
            Some(v) if v == 2 || v == u64::from(RUN_FORMAT_VERSION) => {
                serde_json::from_value(value).map_err(|e| format!("report: {e}"))
            }
            Some(v) => Err(format!(
                "report: format {v}; this harness reads formats 1 to {RUN_FORMAT_VERSION}"
            )),
            None => Err("report: neither a run (`format_version`) nor one implementation's report (`implementation`)".into()),
        }
    }

    /// Reads and parses a `report.json` file.
    pub fn load(path: &Path) -> Result<RunReport, String> {
        std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| RunReport::from_json(&text))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The run as pretty JSON.
    pub fn to_json(&self) -> String {
        super::pretty_json(self)
    }

    /// Merges the runs of several files (`(label, run)`, the label naming
    /// the file in errors) into one: every implementation side by side, the
    /// interop trials of every run. An implementation in several runs must
    /// have the same verdicts in each (the bundled reference usually is);
    /// runs of different suite versions are refused unless
    /// `allow_suite_mismatch`.
    pub fn merge(
        runs: Vec<(String, RunReport)>,
        allow_suite_mismatch: bool,
    ) -> Result<RunReport, String> {
        let Some((first_label, first)) = runs.first().cloned() else {
            return Err("merge: no report given".into());
        };
        let mut merged = RunReport {
            format_version: RUN_FORMAT_VERSION,
            harness_version: first.harness_version.clone(),
            suites: first.suites.clone(),
            implementations: Vec::new(),
            interop: Vec::new(),
        };
        let mut origin: BTreeMap<String, String> = BTreeMap::new();
        for (label, run) in runs {
            if run.suites != first.suites && !allow_suite_mismatch {
                return Err(format!(
                    "merge: {label} ran suites {} but {first_label} ran {} (--allow-suite-mismatch merges them anyway)",
                    suites_text(&run.suites),
                    suites_text(&first.suites)
                ));
            }
            for s in &run.suites {
                if !merged.suites.contains(s) {
                    merged.suites.push(s.clone());
                }
            }
            if run.harness_version > merged.harness_version {
                merged.harness_version = run.harness_version.clone();
            }
            for report in run.implementations {
                let name = report.implementation.name.clone();
                match merged
                    .implementations
                    .iter()
                    .find(|r| r.implementation.name == name)
                {
                    Some(kept) if verdicts(kept) == verdicts(&report) => {}
                    Some(_) => {
                        return Err(format!(
                            "merge: `{name}` has other verdicts in {label} than in {}; merge runs of different implementations, or rename one",
                            origin[&name]
                        ))
                    }
                    None => {
                        origin.insert(name, label.clone());
                        merged.implementations.push(report);
                    }
                }
            }
            for entry in run.interop {
                if !merged
                    .interop
                    .iter()
                    .any(|e| e.result.trial == entry.result.trial)
                {
                    merged.interop.push(entry);
                }
            }
        }
        merged.suites.sort();
        merged
            .interop
            .sort_by(|a, b| a.result.trial.cmp(&b.result.trial));
        Ok(merged)
    }

    /// The run in this format, a report of an older format (whose trials
    /// carry no tier) given the tiers of `spec`; a report of this format
    /// keeps the tiers of the spec map it ran with.
    pub fn upgraded(self, spec: &SpecMap) -> RunReport {
        if self.format_version >= RUN_FORMAT_VERSION {
            return self;
        }
        let mut run = self.with_spec(spec);
        run.format_version = RUN_FORMAT_VERSION;
        run
    }

    /// The run with every trial's tier taken from `spec`.
    pub fn with_spec(mut self, spec: &SpecMap) -> RunReport {
        self.implementations = self
            .implementations
            .into_iter()
            .map(|r| r.with_spec(spec))
            .collect();
        for e in &mut self.interop {
            e.tier = Basis::of_clauses(&e.result.clauses, spec);
        }
        self
    }

    /// The implementations' names, in order.
    pub fn names(&self) -> Vec<&str> {
        self.implementations
            .iter()
            .map(|r| r.implementation.name.as_str())
            .collect()
    }

    /// Whether anything is unexpected, in any implementation or interop trial.
    pub fn has_unexpected(&self) -> bool {
        self.implementations.iter().any(Report::has_unexpected)
            || self.interop.iter().any(|e| e.outcome.is_unexpected())
    }

    /// Whether the run fails: an unexpected outcome on a trial that rests
    /// on the spec's text, or (`strict`) on any trial.
    pub fn fails_run(&self, strict: bool) -> bool {
        self.implementations.iter().any(|r| r.fails_run(strict))
            || self
                .interop
                .iter()
                .any(|e| e.outcome.is_unexpected() && (strict || e.tier == Basis::Spec))
    }

    /// The conformance line of every implementation, `name: line`.
    pub fn conformance_lines(&self) -> Vec<String> {
        self.implementations
            .iter()
            .map(|r| format!("{}: {}", r.implementation.name, r.conformance_line()))
            .collect()
    }

    /// Interop trials per (writer, reader), for the writers and readers
    /// that took part, in implementation order.
    pub fn interop_matrix(&self) -> InteropMatrix<'_> {
        interop_matrix(&self.names(), &self.interop)
    }

    /// The unexpected results of every implementation, grouped by cause.
    pub fn failure_groups(&self) -> Vec<groups::FailureGroup<'_>> {
        groups::failure_groups(&self.implementations)
    }
}

/// Writers, readers, and the count of each (writer, reader) pair.
pub type InteropMatrix<'a> = (
    Vec<&'a str>,
    Vec<&'a str>,
    BTreeMap<(&'a str, &'a str), PairCount>,
);

/// The interop matrix of `interop`, writers and readers in the order of
/// `names` (any other after them).
pub fn interop_matrix<'a>(names: &[&'a str], interop: &'a [InteropEntry]) -> InteropMatrix<'a> {
    let mut counts: BTreeMap<(&str, &str), PairCount> = BTreeMap::new();
    for e in interop {
        let c = counts
            .entry((&e.result.writer, &e.result.reader))
            .or_default();
        if e.result.verdict != Verdict::Unsupported {
            c.judged += 1;
        }
        if e.result.verdict.passed() {
            c.passed += 1;
        }
    }
    let order = |pick: fn(&(&'a str, &'a str)) -> &'a str| -> Vec<&'a str> {
        let mut out: Vec<&'a str> = names
            .iter()
            .copied()
            .filter(|n| counts.keys().any(|k| pick(k) == *n))
            .collect();
        for k in counts.keys() {
            if !out.contains(&pick(k)) {
                out.push(pick(k));
            }
        }
        out
    };
    let writers = order(|k| k.0);
    let readers = order(|k| k.1);
    (writers, readers, counts)
}

fn verdicts(report: &Report) -> Vec<(&str, Verdict)> {
    report
        .results
        .iter()
        .map(|e| (e.result.trial.as_str(), e.result.verdict))
        .collect()
}

pub(super) fn suites_text(suites: &[SuiteInfo]) -> String {
    if suites.is_empty() {
        return "none".into();
    }
    suites
        .iter()
        .map(|s| format!("{} v{}", s.module, s.version))
        .collect::<Vec<_>>()
        .join(", ")
}
