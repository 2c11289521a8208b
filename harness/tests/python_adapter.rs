//! The Python template adapter (`adapters/python/mrec_adapter.py`) run
//! through the whole suite: a writer and a reader. Every round-trip case
//! passes in every direction (its files written, inspected and read back by
//! the reference; the reference's files and the golden files read), and no
//! trial is an error. Refusal cases may fail (a template checks little),
//! but never crash it.
//! A libtest-mimic driver, so that on a machine whose `python3` lacks `lmdb`
//! or `numpy` the trial is reported as ignored, with that reason.

#[path = "integration/common.rs"]
mod common;

use common::run_everything;
use harness::adapter::Subprocess;
use harness::runner::{TrialResult, Verdict};
use harness::suite::{Direction, Kind};
use libtest_mimic::{Arguments, Completion, Trial};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn main() {
    let trial = Trial::ignorable_test(
        "the_python_template_adapter_writes_and_reads_every_round_trip",
        || {
            if !python_has(&["lmdb", "numpy"]) {
                return Ok(Completion::ignored_with(
                    "python3 lacks lmdb or numpy (pip install lmdb numpy)",
                ));
            }
            the_python_template_adapter_writes_and_reads_every_round_trip();
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

/// Every trial of the suite through the template adapter.
fn the_python_template_adapter_writes_and_reads_every_round_trip() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/python/mrec_adapter.py");
    let mut sub = Subprocess::spawn(
        &format!("python3 '{}'", script.display()),
        Duration::from_secs(60),
    )
    .expect("spawn");
    let results = run_everything(&mut sub, "python");
    assert!(!results.is_empty());

    // It does both operations, and nothing crashes it, refusal cases
    // included: a wrong answer there is a fail, never an error.
    for r in &results {
        assert_ne!(
            r.verdict,
            Verdict::Unsupported,
            "{}: it reads and writes",
            r.trial
        );
        assert_ne!(r.verdict, Verdict::Error, "{}: {}", r.trial, r.detail);
    }

    // Every positive case passes, in each direction it runs in: written by
    // the template (then inspected by the harness and read back by the
    // reference), written by the reference, and the golden files.
    let count = |kind: Kind, direction: Direction| {
        results
            .iter()
            .filter(|r| r.kind == kind && r.direction == direction)
            .count()
    };
    for (kind, direction) in [
        (Kind::RoundTrip, Direction::Write),
        (Kind::RoundTrip, Direction::Read),
        (Kind::ReadAccept, Direction::Read),
    ] {
        assert!(
            count(kind, direction) > 0,
            "the suite has {kind:?} trials in the {direction} direction"
        );
    }
    let positive = |r: &&TrialResult| matches!(r.kind, Kind::RoundTrip | Kind::ReadAccept);
    let failing: Vec<String> = results
        .iter()
        .filter(positive)
        .filter(|r| r.verdict != Verdict::Pass)
        .map(|r| format!("{} ({:?}): {}", r.trial, r.verdict, r.detail))
        .collect();
    assert!(
        failing.is_empty(),
        "{} positive trials do not pass:\n{}",
        failing.len(),
        failing.join("\n\n")
    );

    let example = results
        .iter()
        .find(|r| r.trial == "collection::example-round-trip::write")
        .expect("example case, write direction");
    assert_eq!(example.verdict, Verdict::Pass, "{}", example.detail);
    let refusal = results
        .iter()
        .find(|r| r.kind == Kind::ReadRefusal && r.case == "read-refuse-no-meta")
        .expect("no-meta case");
    assert!(refusal.verdict.passed(), "{}", refusal.detail);
}
