//! Failures grouped by cause.
//!
//! One defect in an implementation (a reader that drops the last record, an
//! adapter that stopped answering) fails many trials with the same shape of
//! message. Reports lead with these groups, so the defect reads as one
//! finding and its trials as its evidence.
//!
//! A trial's *signature* is what its failure looks like once the parts that
//! depend on the case are masked: numbers become `N`, quoted text and paths
//! of files become `…`. Refusal cases are keyed by the clause they expected,
//! since "did not refuse" says nothing more. Trials with equal
//! (implementation, outcome, signature) form one group.

use super::{Outcome, Report, ResultEntry};
use crate::suite::Basis;
use std::collections::{BTreeMap, BTreeSet};

/// Unexpected results of one implementation that share a cause.
#[derive(Clone, Debug, PartialEq)]
pub struct FailureGroup<'a> {
    /// The implementation's name.
    pub implementation: &'a str,
    /// The outcome every trial of the group has (fail, error, unexpected pass).
    pub outcome: Outcome,
    /// The masked failure shared by the trials.
    pub signature: String,
    /// The trials, in report order.
    pub entries: Vec<&'a ResultEntry>,
}

impl FailureGroup<'_> {
    /// The clauses the group's cases cover, sorted.
    pub fn clauses(&self) -> BTreeSet<&str> {
        self.entries
            .iter()
            .flat_map(|e| e.result.clauses.iter().map(String::as_str))
            .collect()
    }

    /// The detail to show once for the whole group: its first trial's.
    pub fn example(&self) -> &str {
        self.entries
            .first()
            .map(|e| e.result.detail.as_str())
            .unwrap_or("")
    }

    /// `records[N]: expected …, got …: 119 trials, 124 clauses`.
    pub fn headline(&self) -> String {
        let n = self.entries.len();
        let clauses = self.clauses().len();
        format!(
            "{}: {} {}, {} {}",
            self.signature,
            n,
            if n == 1 { "trial" } else { "trials" },
            clauses,
            if clauses == 1 { "clause" } else { "clauses" }
        )
    }
}

/// The unexpected results of `reports` on trials that rest on the spec's
/// text (decision trials are listed apart, each with its decision),
/// grouped by cause, largest group first; groups of one size in the order of their first trial (reports in
/// order, trials in report order).
pub fn failure_groups(reports: &[Report]) -> Vec<FailureGroup<'_>> {
    let mut index: BTreeMap<(&str, Outcome, String), usize> = BTreeMap::new();
    let mut out: Vec<FailureGroup<'_>> = Vec::new();
    for report in reports {
        let implementation = report.implementation.name.as_str();
        let stated = report
            .results
            .iter()
            .filter(|e| e.outcome.is_unexpected() && e.tier == Basis::Spec);
        for e in stated {
            let signature = signature(e);
            let at = *index
                .entry((implementation, e.outcome, signature.clone()))
                .or_insert_with(|| {
                    out.push(FailureGroup {
                        implementation,
                        outcome: e.outcome,
                        signature,
                        entries: Vec::new(),
                    });
                    out.len() - 1
                });
            out[at].entries.push(e);
        }
    }
    // Stable: groups of one size keep the order of their first trial.
    out.sort_by_key(|g| std::cmp::Reverse(g.entries.len()));
    out
}

/// What a trial's failure looks like with its case-specific parts masked.
pub fn signature(e: &ResultEntry) -> String {
    let r = &e.result;
    if e.outcome == Outcome::UnexpectedPass {
        return "passed although expected to fail".into();
    }
    if let Some(expected) = &r.expected_clause {
        if e.outcome == Outcome::Fail {
            return match &r.named_clause {
                Some(named) if named != expected => {
                    format!("refused naming `{named}`, expected `{expected}`")
                }
                _ => format!(
                    "{} (must refuse naming `{expected}`)",
                    mask(first_meaningful_line(&r.detail))
                ),
            };
        }
    }
    mask(first_meaningful_line(&r.detail))
}

/// The line of a detail that says what went wrong: the first difference of
/// a read-back (`  records[3].meta: expected …, got …`) or the first finding
/// of a file inspection, else the first non-empty line.
fn first_meaningful_line(detail: &str) -> &str {
    let mut lines = detail.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    let summarizes = first.ends_with("place(s):") || first == "file inspection:";
    match lines.next() {
        Some(next) if summarizes => next,
        _ => first,
    }
}

/// Masks what differs between cases with the same cause: runs of digits
/// (`N`), double-quoted text and paths of files (`…`). At most 160
/// characters are kept.
pub fn mask(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            while chars.peek().is_some_and(|c| c.is_ascii_digit()) {
                chars.next();
            }
            out.push('N');
        } else if c == '"' {
            for c in chars.by_ref() {
                if c == '"' {
                    break;
                }
            }
            out.push_str("\"…\"");
        } else if c == '/' && out.chars().last().is_none_or(char::is_whitespace) {
            while chars
                .peek()
                .is_some_and(|c| !c.is_whitespace() && *c != ':' && *c != ',')
            {
                chars.next();
            }
            out.push('…');
        } else {
            out.push(c);
        }
    }
    if out.chars().count() > 160 {
        out = out.chars().take(159).collect();
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_numbers_strings_and_paths() {
        assert_eq!(
            mask("records[12].x: expected \"a b\", got 3.5 at /tmp/x-1/y.mrec.lmdb: gone"),
            "records[N].x: expected \"…\", got N.N at …: gone"
        );
        assert_eq!(mask("ratio 1/2"), "ratio N/N");
    }

    #[test]
    fn a_read_back_difference_is_keyed_by_its_first_difference() {
        let detail = "read back differs from the fixture in 2 place(s):\n  records: expected array of length 3, got 2\n  records[2]: expected …";
        assert_eq!(
            first_meaningful_line(detail),
            "records: expected array of length 3, got 2"
        );
        assert_eq!(
            first_meaningful_line("file inspection:\n[lmdb.meta] no meta"),
            "[lmdb.meta] no meta"
        );
        assert_eq!(first_meaningful_line("timed out"), "timed out");
    }
}
