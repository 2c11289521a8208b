//! The Python template adapter (`adapters/python/mrec_adapter.py`) run
//! through the whole suite: a writer and a reader. Every round-trip case
//! passes in every direction (its files written, inspected and read back by
//! the reference; the reference's files and the golden files read), and no
//! trial is an error. Refusal cases may fail (a template checks little),
//! but never crash it. Run beside the reference (`harness run --adapter
//! py=…`), the 2 × 2 writer × reader interop matrix agrees on every
//! positive case.
//! `harness smoke` passes the template. The `harness` binary copied alone
//! into an empty directory and run there
//! without `--root` (the suites, fixtures and spec map it carries) gives
//! the template and the reference the verdicts a run from the tree gives.
//! A libtest-mimic driver, so that on a machine whose `python3` lacks `lmdb`
//! or `numpy` each trial is reported as ignored, with that reason.

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
    let interop = Trial::ignorable_test(
        "the_python_template_and_the_reference_interoperate_both_ways",
        || {
            if !python_has(&["lmdb", "numpy"]) {
                return Ok(Completion::ignored_with(
                    "python3 lacks lmdb or numpy (pip install lmdb numpy)",
                ));
            }
            the_python_template_and_the_reference_interoperate_both_ways();
            Ok(Completion::Completed)
        },
    );
    let alone = Trial::ignorable_test(
        "a_copied_binary_alone_gives_the_verdicts_of_a_run_from_the_tree",
        || {
            if !python_has(&["lmdb", "numpy"]) {
                return Ok(Completion::ignored_with(
                    "python3 lacks lmdb or numpy (pip install lmdb numpy)",
                ));
            }
            a_copied_binary_alone_gives_the_verdicts_of_a_run_from_the_tree();
            Ok(Completion::Completed)
        },
    );
    let smoke = Trial::ignorable_test("harness_smoke_passes_the_python_template", || {
        if !python_has(&["lmdb", "numpy"]) {
            return Ok(Completion::ignored_with(
                "python3 lacks lmdb or numpy (pip install lmdb numpy)",
            ));
        }
        harness_smoke_passes_the_python_template();
        Ok(Completion::Completed)
    });
    libtest_mimic::run(&Arguments::from_args(), vec![trial, interop, alone, smoke]).exit();
}

/// `harness smoke` on the template: every step ok, exit status 0.
fn harness_smoke_passes_the_python_template() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/python/mrec_adapter.py");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["smoke", "--adapter"])
        .arg(format!("python3 '{}'", script.display()))
        .output()
        .expect("harness runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    let steps: Vec<&str> = said
        .lines()
        .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with('|'))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(steps, ["ok", "ok", "ok", "ok", "ok"], "{said}");
    assert!(said.contains("harness smoke: ready in "), "{said}");
}

/// `harness run --adapter py=…` twice: by a copy of the binary alone in an
/// empty directory (its working directory, no `--root`), and by the built
/// binary with `--root` at this repository. Every trial of each
/// implementation and every interop trial has the same verdict (and the
/// same clause named) in both, and both runs exit alike.
fn a_copied_binary_alone_gives_the_verdicts_of_a_run_from_the_tree() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/python/mrec_adapter.py");
    let adapter = format!("py=python3 '{}'", script.display());
    let alone = harness::runner::scratch_dir("alone");
    std::fs::create_dir_all(&alone).expect("scratch");
    let copy = alone.join("harness");
    std::fs::copy(env!("CARGO_BIN_EXE_harness"), &copy).expect("copy the binary");
    let run = |binary: &Path, cwd: &Path, root: Option<&Path>, reports: &Path| {
        let mut command = Command::new(binary);
        command
            .current_dir(cwd)
            .args(["run", "--adapter", &adapter, "--report"]);
        command.arg(reports);
        if let Some(root) = root {
            command.arg("--root").arg(root);
        }
        let out = command.output().expect("harness runs");
        let report: serde_json::Value = serde_json::from_slice(
            &std::fs::read(cwd.join(reports).join("report.json")).expect("report.json"),
        )
        .expect("JSON");
        (out.status.code(), verdicts(&report))
    };
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let (alone_status, alone_verdicts) = run(&copy, &alone, None, Path::new("reports"));
    let from_tree = alone.join("from-tree");
    let (tree_status, tree_verdicts) = run(
        Path::new(env!("CARGO_BIN_EXE_harness")),
        &repository,
        Some(&repository),
        &from_tree,
    );
    // The directory held the binary alone: what the run left is its reports.
    let mut left: Vec<String> = std::fs::read_dir(&alone)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    let _ = std::fs::remove_dir_all(&alone);
    assert_eq!(left, ["from-tree", "harness", "reports"]);
    assert!(
        tree_verdicts.len() > 500,
        "{} verdicts",
        tree_verdicts.len()
    );
    let differ: Vec<String> = tree_verdicts
        .iter()
        .filter(|(trial, v)| alone_verdicts.get(*trial) != Some(v))
        .map(|(trial, v)| format!("{trial}: tree {v:?}, alone {:?}", alone_verdicts.get(trial)))
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    assert_eq!(alone_verdicts.len(), tree_verdicts.len());
    assert_eq!(alone_status, tree_status);
}

/// Every trial of a report.json (each implementation's, by name, and the
/// interop trials) -> (verdict, clause named).
fn verdicts(report: &serde_json::Value) -> std::collections::BTreeMap<String, (String, String)> {
    let mut out = std::collections::BTreeMap::new();
    let entry = |e: &serde_json::Value| {
        (
            e["verdict"].as_str().unwrap_or_default().to_owned(),
            e["named_clause"].as_str().unwrap_or_default().to_owned(),
        )
    };
    for imp in report["implementations"]
        .as_array()
        .expect("implementations")
    {
        let name = imp["implementation"]["name"].as_str().unwrap_or_default();
        for e in imp["results"].as_array().expect("results") {
            out.insert(format!("[{name}] {}", e["trial"]), entry(e));
        }
    }
    for e in report["interop"].as_array().expect("interop") {
        out.insert(e["trial"].to_string(), entry(e));
    }
    out
}

/// `harness run --adapter py=…`: two writers and two readers, and every
/// cell of the 2 × 2 interop matrix agrees on every positive case.
fn the_python_template_and_the_reference_interoperate_both_ways() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../adapters/python/mrec_adapter.py");
    let dir = harness::runner::scratch_dir("python-interop");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--filter", "::interop::", "--adapter"])
        .arg(format!("py=python3 '{}'", script.display()))
        .arg("--report")
        .arg(&dir)
        .output()
        .expect("harness runs");
    assert!(out.status.success(), "{out:?}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).expect("report.json"))
            .expect("JSON");
    let _ = std::fs::remove_dir_all(&dir);
    let interop = report["interop"].as_array().expect("interop");
    let mut pairs = std::collections::BTreeMap::<(String, String), usize>::new();
    for e in interop {
        assert_eq!(e["verdict"], "pass", "{}: {}", e["trial"], e["detail"]);
        let pair = (
            e["writer"].as_str().unwrap_or_default().to_owned(),
            e["reader"].as_str().unwrap_or_default().to_owned(),
        );
        *pairs.entry(pair).or_default() += 1;
    }
    let names = ["molrec-reference", "py"];
    assert_eq!(pairs.len(), 4, "{pairs:?}");
    let cases = harness::interop::interop_cases(&harness::suite::Layout::repository())
        .expect("cases")
        .len();
    for w in names {
        for r in names {
            assert_eq!(pairs.get(&(w.into(), r.into())), Some(&cases), "{w} -> {r}");
        }
    }
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
