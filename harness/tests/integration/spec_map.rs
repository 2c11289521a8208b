//! The spec map and the suites agree: every `must` clause has a passing case
//! or a waiver, every case names clauses of the map, and every clause the
//! reference can name is in the map.

use crate::common::run_everything;
use harness::adapter::reference::Reference;
use harness::suite::{Layout, Level};
use std::collections::BTreeSet;

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
