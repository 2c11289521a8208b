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
    let spec = layout.spec_map().expect("spec map");
    let report =
        Report::new(description, suites, results, &Expectations::default()).with_spec(&spec);
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

/// Each golden file reads back, through the reference, exactly as the dump
/// committed beside it: a reference change that alters what committed files
/// mean shows up here (regenerate only with `cargo run -p harness -- golden`).
#[test]
fn golden_files_read_back_as_their_dumps() {
    use harness::adapter::Outcome;
    let layout = Layout::repository();
    let dir = layout.fixtures.join("golden");
    let work = harness::runner::scratch_dir("golden-dumps");
    std::fs::create_dir_all(&work).expect("scratch");
    let mut reference = Reference::new();
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("fixtures/golden") {
        let path = entry.expect("entry").path();
        let Some(name) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".mrec.lmdb"))
        else {
            continue;
        };
        let copy = work.join(format!("{name}.mrec.lmdb"));
        std::fs::copy(&path, &copy).expect("copy");
        let dump: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join(format!("{name}.dump.json"))).expect("dump"),
        )
        .expect("json");
        match reference.read(&copy) {
            Outcome::Done(read) => assert_eq!(read, dump, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
        checked += 1;
    }
    let _ = std::fs::remove_dir_all(&work);
    assert!(checked >= 5, "only {checked} golden files");
}
