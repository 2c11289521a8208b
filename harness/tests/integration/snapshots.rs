//! Behaviour changes of the reference show up as snapshot diffs to review:
//! its Markdown report and every refusal message it gives.

use crate::common::run_everything;
use harness::adapter::reference::Reference;
use harness::adapter::Implementation;
use harness::report::{Expectations, Report, SuiteInfo};
use harness::suite::Layout;

#[test]
fn reference_markdown_report() {
    let layout = Layout::repository();
    let mut reference = Reference::new();
    let mut description = reference.describe().clone();
    // The version moves with every release; the snapshot should not.
    description.version = "(version)".into();
    let results = run_everything(&mut reference, "snapshot-report");
    let suites = layout
        .suites()
        .expect("suites")
        .iter()
        .map(|s| SuiteInfo {
            module: s.module.clone(),
            version: s.version,
        })
        .collect();
    let report = Report::new(description, suites, results, &Expectations::default());
    let spec = layout.spec_map().expect("spec map");
    insta::assert_snapshot!("reference_report", report.to_markdown(&spec));
}

#[test]
fn reference_refusal_messages() {
    let results = run_everything(&mut Reference::new(), "snapshot-refusals");
    let mut lines = Vec::new();
    for r in results.iter().filter(|r| r.expected_clause.is_some()) {
        lines.push(format!(
            "{}\n    {}",
            r.trial,
            r.detail.replace('\n', "\n    ")
        ));
    }
    insta::assert_snapshot!("reference_refusals", lines.join("\n"));
}
