//! `mrec`'s errors outside the format: an operating-system error names the
//! path it is about, exits with 3, and `mrec bench` finds a `--json` path it
//! cannot write before it runs, not after minutes of work.

use std::path::{Path, PathBuf};
use std::process::Command;

const MREC: &str = env!("CARGO_BIN_EXE_mrec");

/// A directory that does not exist, under this test's scratch directory.
fn missing_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("mrec-cli-test-{}", std::process::id()))
        .join(name);
    assert!(!dir.exists());
    dir
}

/// Runs `mrec` with `args`: the exit code, stdout and stderr.
fn mrec(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(MREC).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/collection")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn a_model_that_cannot_be_read_is_named() {
    let model = missing_dir("model").join("collection.json");
    let out = missing_dir("out").join("c.mrec.lmdb");
    let (code, _, stderr) = mrec(&[
        "write",
        &model.display().to_string(),
        &out.display().to_string(),
    ]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: ", model.display())),
        "{stderr}"
    );
}

#[test]
fn an_output_file_that_cannot_be_created_is_named() {
    let out = missing_dir("no-such-dir").join("c.mrec.lmdb");
    let (code, _, stderr) = mrec(&[
        "write",
        &fixture("aligned-base.json"),
        &out.display().to_string(),
    ]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains(&format!("{}: ", out.display())), "{stderr}");
    assert!(!out.exists());
}

#[test]
fn bench_refuses_a_json_path_it_cannot_write_before_it_runs() {
    let json = missing_dir("no-such-dir").join("figures.json");
    let (code, stdout, stderr) = mrec(&[
        "bench",
        "--quiet",
        "--records",
        "1",
        "--passes",
        "1",
        "--json",
        &json.display().to_string(),
    ]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: ", json.display())),
        "{stderr}"
    );
    // The table is printed after the run: none means nothing was run.
    assert_eq!(stdout, "");
}

#[test]
fn bench_refuses_zero_records_as_an_argument() {
    let (code, stdout, stderr) = mrec(&["bench", "--records", "0"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--records"), "{stderr}");
    assert_eq!(stdout, "");
}
