//! The reference as a subprocess (`mrec adapter`) must give the verdicts it
//! gives in process, case by case: the protocol loses nothing.

use crate::common::run_everything;
use harness::adapter::reference::Reference;
use harness::adapter::Subprocess;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Builds `mrec` in this test's profile and returns its path.
pub fn mrec_binary() -> PathBuf {
    let release = !cfg!(debug_assertions);
    let mut cargo = Command::new(env!("CARGO"));
    cargo.args(["build", "-q", "-p", "mrec-cli", "--bin", "mrec"]);
    if release {
        cargo.arg("--release");
    }
    let status = cargo.status().expect("cargo runs");
    assert!(status.success(), "building mrec failed");
    let exe = std::env::current_exe().expect("test path");
    // target/<profile>/deps/<test> -> target/<profile>/mrec
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("mrec")
}

#[test]
fn subprocess_and_in_process_verdicts_are_identical() {
    let mrec = mrec_binary();
    let mut sub = Subprocess::spawn(
        &format!("'{}' adapter", mrec.display()),
        Duration::from_secs(60),
    )
    .expect("spawn");
    let by_subprocess = run_everything(&mut sub, "subprocess");
    let by_process = run_everything(&mut Reference::new(), "in-process");
    assert_eq!(by_subprocess.len(), by_process.len());
    for (s, p) in by_subprocess.iter().zip(&by_process) {
        assert_eq!(s.trial, p.trial);
        assert_eq!(
            (s.verdict, &s.named_clause),
            (p.verdict, &p.named_clause),
            "{}: subprocess {:?} ({}) vs in process {:?} ({})",
            s.trial,
            s.verdict,
            s.detail,
            p.verdict,
            p.detail
        );
    }
}
