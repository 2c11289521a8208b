//! Behaviour changes of the reference show up as snapshot diffs to review:
//! its Markdown report and every refusal message it gives.

use crate::common::run_everything;
use harness::adapter::reference::Reference;
use harness::adapter::{Description, Implementation, Outcome};
use harness::report::{Expectations, Report, SuiteInfo};
use harness::runner::TrialResult;
use harness::suite::Layout;
use serde_json::Value;
use std::path::Path;

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
    let lines = refusal_lines(&results);
    insta::assert_snapshot!("reference_refusals", lines.join("\n"));
}

/// One entry per refusal trial: its name, then its detail, indented.
fn refusal_lines(results: &[TrialResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.expected_clause.is_some())
        .map(|r| format!("{}\n    {}", r.trial, r.detail.replace('\n', "\n    ")))
        .collect()
}

/// The reference, with the message of one refusal reworded (the clause it
/// names stays).
struct Reworded {
    inner: Reference,
    trial: String,
}

const MISSING_UNITS: &str = "collection::refuse-no-units::write";
const REWORDED: &str = " (reworded)";

impl Implementation for Reworded {
    fn describe(&self) -> &Description {
        self.inner.describe()
    }
    fn write(&mut self, collection: &Value, path: &Path) -> Outcome<()> {
        match self.inner.write(collection, path) {
            Outcome::Refused { clause, message } if self.trial == MISSING_UNITS => {
                Outcome::Refused {
                    message: format!("{message}{REWORDED}"),
                    clause,
                }
            }
            other => other,
        }
    }
    fn read(&mut self, path: &Path) -> Outcome<Value> {
        self.inner.read(path)
    }
    fn begin_trial(&mut self, trial: &str) {
        self.trial = trial.to_owned();
    }
}

/// A reworded refusal message fails the refusal snapshot (CONTRIBUTING.md:
/// a behaviour change is a snapshot diff to review), and the diff a
/// reviewer sees is that message's one line, old and new. Both sides are
/// this build's own runs, so the test holds while a real change waits for
/// its snapshot to be accepted.
#[test]
fn a_reworded_refusal_message_is_a_snapshot_diff() {
    // `cargo insta test` and INSTA_UPDATE=always make every assertion
    // pass: there is nothing to prove then.
    let accepting = ["INSTA_FORCE_PASS", "INSTA_UPDATE"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|x| x == "1" || x == "always"));
    if accepting {
        return;
    }
    let plain = refusal_lines(&run_everything(&mut Reference::new(), "snapshot-plain")).join("\n");
    let reworded = refusal_lines(&run_everything(
        &mut Reworded {
            inner: Reference::new(),
            trial: String::new(),
        },
        "snapshot-reworded",
    ))
    .join("\n");
    let edits: Vec<String> = similar::TextDiff::from_lines(&plain, &reworded)
        .iter_all_changes()
        .filter(|c| c.tag() != similar::ChangeTag::Equal)
        .map(|c| format!("{}{}", c.tag(), c.value().trim_end()))
        .collect();
    let [old, new] = &edits[..] else {
        panic!("one line should change, in {MISSING_UNITS}: {edits:#?}");
    };
    assert!(
        old.starts_with("-    [collection.meta.units-required] "),
        "{old}"
    );
    assert_eq!(new, &format!("+{}{REWORDED}", &old[1..]));
    // And insta fails on it, against a snapshot of the plain run in a
    // scratch directory (nothing is written beside the committed ones).
    let scratch = harness::runner::scratch_dir("snapshot-reworded");
    std::fs::create_dir_all(&scratch).expect("scratch");
    std::fs::write(
        scratch.join("integration__snapshots__reference_refusals.snap"),
        format!("---\nsource: harness/tests/integration/snapshots.rs\nexpression: plain\n---\n{plain}\n"),
    )
    .expect("scratch snapshot");
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(&scratch);
    let passes = |text: &str| {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            settings.bind(|| insta::assert_snapshot!("reference_refusals", text));
        }))
        .is_ok()
    };
    let (plain_passes, reworded_passes) = (passes(&plain), passes(&reworded));
    let _ = std::fs::remove_dir_all(&scratch);
    assert!(plain_passes, "insta refused the snapshot it was given");
    assert!(
        !reworded_passes,
        "insta accepted a reworded refusal message"
    );
}

/// Each golden file reads back, through the reference, exactly as the dump
/// committed beside it: a reference change that alters what committed files
/// mean shows up here (regenerate only with `cargo run -p harness -- golden`).
#[test]
fn golden_files_read_back_as_their_dumps() {
    use harness::adapter::Outcome;
    let layout = Layout::repository();
    let dir = layout.root().expect("a tree").join("fixtures/golden");
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
