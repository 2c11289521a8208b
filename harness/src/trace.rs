//! Traceability for spec maintainers (`harness trace`): one clause with its
//! text, source, basis, the cases that list it and each implementation's
//! verdicts on them; or every clause no case covers, waived or not.

use crate::report::{Outcome, Report};
use crate::suite::{Basis, Case, Clause, Kind, Level, SpecMap, Suite};
use std::fmt::Write as _;

/// A case that lists a clause, with its suite module.
pub struct Covering<'a> {
    /// The suite module.
    pub module: &'a str,
    /// The case.
    pub case: &'a Case,
}

/// The cases of `suites` that list `clause` (or expect a refusal naming
/// it), in suite order.
pub fn covering<'a>(suites: &'a [Suite], clause: &str) -> Vec<Covering<'a>> {
    suites
        .iter()
        .flat_map(|s| s.cases.iter().map(move |case| (s, case)))
        .filter(|(_, case)| {
            case.clauses.iter().any(|c| c == clause) || case.expect.as_deref() == Some(clause)
        })
        .map(|(s, case)| Covering {
            module: &s.module,
            case,
        })
        .collect()
}

/// `harness trace CLAUSE`: the clause, its cases and, for each report, the
/// verdict of every trial of those cases. `Err` names an unknown clause and
/// the ids that contain it.
pub fn clause(
    spec: &SpecMap,
    suites: &[Suite],
    id: &str,
    reports: &[Report],
) -> Result<String, String> {
    let Some(clause) = spec.get(id) else {
        let near: Vec<&str> = spec
            .keys()
            .filter(|k| k.contains(id) || id.contains(k.as_str()))
            .map(String::as_str)
            .take(10)
            .collect();
        return Err(if near.is_empty() {
            format!("spec-map.toml has no clause `{id}`")
        } else {
            format!(
                "spec-map.toml has no clause `{id}`; close: {}",
                near.join(", ")
            )
        });
    };
    let mut out = String::new();
    heading(&mut out, id, clause);
    let cases = covering(suites, id);
    let _ = writeln!(out, "\ncases ({}):", cases.len());
    if cases.is_empty() {
        match &clause.waiver {
            Some(w) => {
                let _ = writeln!(out, "  none; waived: {w}");
            }
            None => {
                let _ = writeln!(out, "  none, and no waiver: the clause is not covered");
            }
        }
    }
    for c in &cases {
        let expects = c
            .case
            .expect
            .as_deref()
            .map(|e| format!(", refusal naming {e}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {}::{} ({}{expects}): {}",
            c.module,
            c.case.id,
            kind_name(c.case.kind),
            c.case.title
        );
    }
    for report in reports {
        let _ = writeln!(
            out,
            "\nverdicts of {} {} ({})",
            report.implementation.name,
            report.implementation.version,
            report.conformance_line()
        );
        let mut any = false;
        for c in &cases {
            for e in report
                .results
                .iter()
                .filter(|e| e.result.module == c.module && e.result.case == c.case.id)
            {
                any = true;
                let detail = crate::report::first_line(&e.result.detail, 100);
                let outcome = e.label();
                if detail.is_empty() || e.outcome == Outcome::Pass {
                    let _ = writeln!(out, "  {:<64} {outcome}", e.result.trial);
                } else {
                    let _ = writeln!(out, "  {:<64} {outcome}: {detail}", e.result.trial);
                }
            }
        }
        if !any {
            let _ = writeln!(out, "  no trial of these cases in the report");
        }
    }
    Ok(out)
}

/// The part of `harness trace CLAUSE` that `harness power` measured: each
/// simulated bug under the clause and the cases whose trials catch it.
pub fn simulated(inventory: &crate::power::Inventory, id: &str) -> String {
    let mut out = String::new();
    let bugs = inventory.catching(id);
    let _ = writeln!(
        out,
        "\nsimulated violations (harness power): {}",
        bugs.len()
    );
    for m in bugs {
        let cases: Vec<&str> = m.spec_cases().into_iter().collect();
        let _ = writeln!(
            out,
            "  {} ({}): caught by {} case(s) resting on the text: {}",
            m.id,
            m.what,
            cases.len(),
            if cases.is_empty() {
                "none".to_string()
            } else {
                cases.join(", ")
            }
        );
    }
    out
}

/// `harness trace --uncovered`: every clause no case lists, the waived ones
/// with their reasons, then the ones with neither case nor waiver. The
/// second value counts the latter (an alarm, and the command's exit status).
pub fn uncovered(spec: &SpecMap, suites: &[Suite]) -> (String, usize) {
    let (mut waived, mut bare) = (Vec::new(), Vec::new());
    for (id, clause) in spec {
        if !covering(suites, id).is_empty() {
            continue;
        }
        match &clause.waiver {
            Some(w) => waived.push((id, clause, w)),
            None => bare.push((id, clause)),
        }
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} of {} clauses have no case: {} waived, {} neither covered nor waived",
        waived.len() + bare.len(),
        spec.len(),
        waived.len(),
        bare.len()
    );
    if !bare.is_empty() {
        out.push_str("\nneither covered nor waived:\n");
        for (id, clause) in &bare {
            let _ = writeln!(
                out,
                "  {id} ({}, {})",
                level_name(clause.level),
                clause.source
            );
        }
    }
    if !waived.is_empty() {
        out.push_str("\nwaived:\n");
        for (id, clause, reason) in &waived {
            let _ = writeln!(
                out,
                "  {id} ({}, {}): {reason}",
                level_name(clause.level),
                clause.source
            );
        }
    }
    (out, bare.len())
}

fn heading(out: &mut String, id: &str, clause: &Clause) {
    let basis = match clause.basis {
        Basis::Spec => "the spec's text",
        Basis::Decision => "a decision (this project's reading of silent or ambiguous text)",
    };
    let _ = writeln!(out, "{id}: {}", level_name(clause.level));
    let _ = writeln!(out, "  source: {}", clause.source);
    let _ = writeln!(out, "  basis:  {basis}");
    if let Some(reason) = &clause.reason {
        let _ = writeln!(out, "  reason: {reason}");
    }
    let _ = writeln!(out, "  text:   {}", clause.text);
    if let Some(quote) = &clause.quote {
        let _ = writeln!(out, "  quote:  \"{quote}\"");
    }
    if let Some(contrary) = &clause.contrary {
        let _ = writeln!(
            out,
            "  contrary text ({}): \"{}\"",
            contrary.source, contrary.quote
        );
    }
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Must => "must",
        Level::Should => "should",
        Level::May => "may",
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::RoundTrip => "round-trip",
        Kind::WriteRefusal => "write-refusal",
        Kind::ReadRefusal => "read-refusal",
        Kind::ReadAccept => "read-accept",
    }
}
