//! The Python template adapter (`adapters/python/mrec_adapter.py`) run
//! through the whole suite: reported as read-only, reading without errors.
//! A libtest-mimic driver, so that on a machine whose `python3` lacks `lmdb`
//! or `numpy` the trial is reported as ignored, with that reason.

#[path = "integration/common.rs"]
mod common;

use common::run_everything;
use harness::adapter::Subprocess;
use harness::runner::Verdict;
use harness::suite::{Direction, Kind};
use libtest_mimic::{Arguments, Completion, Trial};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn main() {
    let trial = Trial::ignorable_test(
        "the_python_template_adapter_is_reported_as_read_only",
        || {
            if !python_has(&["lmdb", "numpy"]) {
                return Ok(Completion::ignored_with(
                    "python3 lacks lmdb or numpy (pip install lmdb numpy)",
                ));
            }
            the_python_template_adapter_is_reported_as_read_only();
            Ok(Completion::Completed)
        },
    );
    libtest_mimic::run(&Arguments::from_args(), vec![trial]).exit();
}

fn python_has(modules: &[&str]) -> bool {
    let probe = format!("import {}", modules.join(", "));
    Command::new("python3")
        .args(["-c", &probe])
        .status()
        .is_ok_and(|s| s.success())
}

/// Every trial of the suite through the template adapter: it writes
/// nothing (unsupported) and reads without errors.
fn the_python_template_adapter_is_reported_as_read_only() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/python/mrec_adapter.py");
    let mut sub = Subprocess::spawn(
        &format!("python3 '{}'", script.display()),
        Duration::from_secs(60),
    )
    .expect("spawn");
    let results = run_everything(&mut sub, "python");
    assert!(!results.is_empty());
    for r in &results {
        let writes = r.direction == Direction::Write;
        if writes {
            assert_eq!(
                r.verdict,
                Verdict::Unsupported,
                "{}: a read-only adapter cannot write",
                r.trial
            );
        } else {
            assert_ne!(r.verdict, Verdict::Unsupported, "{}: it reads", r.trial);
            assert_ne!(r.verdict, Verdict::Error, "{}: {}", r.trial, r.detail);
        }
    }
    let example = results
        .iter()
        .find(|r| r.trial == "collection::example-round-trip::read")
        .expect("example case");
    assert_eq!(example.verdict, Verdict::Pass, "{}", example.detail);
    let refusal = results
        .iter()
        .find(|r| r.kind == Kind::ReadRefusal && r.case == "read-refuse-no-meta")
        .expect("no-meta case");
    assert!(refusal.verdict.passed(), "{}", refusal.detail);
}
