//! The `harness` command line against a third party: the reference as a
//! subprocess writes all four reports, and expectations are checked.

use crate::subprocess::mrec_binary;
use std::process::Command;

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
