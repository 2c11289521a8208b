//! The spec map and the suites agree: every `must` clause has a passing case
//! or a waiver, every case names clauses of the map, and every clause the
//! reference can name is in the map.

use crate::common::run_everything;
use harness::adapter::reference::Reference;
use harness::suite::{Kind, Layout, Level};
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn every_must_clause_is_covered_by_a_passing_case_or_waived() {
    let layout = Layout::repository();
    let map = layout.spec_map().expect("spec map");
    let results = run_everything(&mut Reference::new(), "coverage");
    let mut covered = BTreeSet::new();
    for r in results.iter().filter(|r| r.verdict.passed()) {
        covered.extend(r.clauses.iter().cloned());
    }
    let mut missing = Vec::new();
    for (id, clause) in &map {
        let waived = clause.waiver.as_ref().is_some_and(|w| !w.trim().is_empty());
        if clause.level == Level::Must && !waived && !covered.contains(id) {
            missing.push(id.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{} must clause(s) with neither a passing case nor a waiver:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

#[test]
fn every_clause_the_reference_names_is_in_the_map() {
    let map = Layout::repository().spec_map().expect("spec map");
    let missing: Vec<&str> = molrec::Clause::ALL
        .iter()
        .map(|c| c.id())
        .filter(|id| !map.contains_key(*id))
        .collect();
    assert!(missing.is_empty(), "not in spec-map.toml: {missing:?}");
}

/// A reader that gets one refusal right by accident (a check on the wrong
/// field, a bound off by one) passes a single case: every clause of the
/// text a reader is asked to refuse with has at least two read-refusal
/// cases (a decision's reader refusal is this project's extra, and may
/// have one).
#[test]
fn every_reader_refusal_clause_has_two_cases() {
    let layout = Layout::repository();
    let map = layout.spec_map().expect("spec map");
    let mut cases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for suite in layout.suites().expect("suites") {
        for case in suite.cases.iter().filter(|c| c.kind == Kind::ReadRefusal) {
            if let Some(clause) = case
                .expect
                .as_ref()
                .filter(|c| !map.get(*c).is_some_and(|c| c.is_decision()))
            {
                cases
                    .entry(clause.clone())
                    .or_default()
                    .push(case.id.clone());
            }
        }
    }
    let thin: Vec<String> = cases
        .iter()
        .filter(|(_, ids)| ids.len() < 2)
        .map(|(clause, ids)| format!("{clause}: only {}", ids.join(", ")))
        .collect();
    assert!(
        thin.is_empty(),
        "reader-refusal clauses with fewer than two read-refusal cases:\n{}",
        thin.join("\n")
    );
}

#[test]
fn every_decision_gives_its_reason() {
    let map = Layout::repository().spec_map().expect("spec map");
    let decisions: Vec<&String> = map
        .iter()
        .filter(|(_, c)| c.is_decision())
        .map(|(id, _)| id)
        .collect();
    // The loader refuses a decision without a reason; the map has some.
    assert!(!decisions.is_empty());
    for id in decisions {
        assert!(
            map[id]
                .reason
                .as_deref()
                .is_some_and(|r| !r.trim().is_empty()),
            "{id}"
        );
    }
}
