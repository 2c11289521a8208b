//! The `harness` command line against third parties: the reference as a
//! subprocess writes all four reports; the Python template adapter (read
//! only) is run and its results reported as what they are.

use crate::common::run_everything;
use crate::subprocess::mrec_binary;
use harness::adapter::Subprocess;
use harness::runner::Verdict;
use harness::suite::{Direction, Kind};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

#[test]
fn run_against_the_reference_subprocess_writes_four_reports() {
    let mrec = mrec_binary();
    let dir = std::env::temp_dir().join(format!("molrec-cli-reports-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let output = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "run",
            "--adapter",
            &format!("'{}' adapter", mrec.display()),
            "--report",
        ])
        .arg(&dir)
        .output()
        .expect("harness runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "harness run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    for name in ["report.json", "junit.xml", "report.md", "report.html"] {
        let path = dir.join(name);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(len > 100, "{} missing or empty", path.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn expectations_naming_no_case_are_an_error() {
    let dir = std::env::temp_dir().join(format!("molrec-cli-expect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("expect.toml");
    std::fs::write(
        &file,
        "[[expected-failure]]\ncase = \"collection::no-such-case::write\"\nreason = \"typo\"\n",
    )
    .expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--filter", "refuse-no-units", "--expectations"])
        .arg(&file)
        .output()
        .expect("harness runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no-such-case"));
    let _ = std::fs::remove_dir_all(&dir);
}

fn python_has(modules: &[&str]) -> bool {
    let probe = format!("import {}", modules.join(", "));
    Command::new("python3")
        .args(["-c", &probe])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_python_template_adapter_is_reported_as_read_only() {
    if !python_has(&["lmdb", "numpy"]) {
        eprintln!("skipped: python3 lacks lmdb or numpy (pip install lmdb numpy)");
        return;
    }
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
