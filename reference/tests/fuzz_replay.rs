//! The cargo-fuzz targets of `fuzz/` (outside the workspace: SECURITY.md,
//! "Fuzzing"), built without instrumentation and run once over every seed
//! `examples/fuzz_seeds` makes from the fixtures and every input a fuzzer
//! found, kept in `fuzz/regressions/<target>/`. So an API change cannot leave
//! the targets broken unnoticed, what they assert (both record paths agree,
//! whatever the writer accepts reads back, the judge and `mrec validate`
//! agree) holds on every fixture, and no finding comes back.
//!
//! libFuzzer's C++ runtime needs a C++ compiler: without `c++` on the path
//! the trial is reported as ignored, with that reason (a libtest-mimic
//! driver, so that a skip shows as one).

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Each target, the seed directory of `fuzz_seeds` it runs (`inspect_file`
/// takes the same entries inputs as `open_and_read`), and whether it runs
/// in agreement mode.
const TARGETS: [(&str, &str, bool); 4] = [
    ("frame_decode", "frame_decode", false),
    ("open_and_read", "open_and_read", false),
    ("write_read", "write_read", false),
    ("inspect_file", "open_and_read", true),
];

fn main() {
    let trial = Trial::ignorable_test(
        "fuzz_targets_build_and_pass_their_seeds_and_regressions",
        || -> Result<Completion, Failed> {
            let has_cxx = Command::new("c++")
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success());
            if !has_cxx {
                return Ok(Completion::ignored_with(
                    "no C++ compiler (`c++`) for libFuzzer's runtime",
                ));
            }
            fuzz_targets_build_and_pass_their_seeds_and_regressions();
            Ok(Completion::Completed)
        },
    );
    libtest_mimic::run(&Arguments::from_args(), vec![trial]).exit();
}

/// Builds the targets, makes their seeds, runs each over its seeds and
/// regressions; panics (failing the trial) on the first thing wrong.
fn fuzz_targets_build_and_pass_their_seeds_and_regressions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let fuzz = root.join("fuzz");
    // The workspace's target directory (wherever `CARGO_TARGET_DIR` put
    // it; cargo's `CARGO_TARGET_TMPDIR` is its `tmp`): `fuzz/Cargo.toml`
    // has the workspace's release profile and libc's features, so the
    // targets' build reuses the dependencies already built there.
    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("CARGO_TARGET_TMPDIR is inside the target directory");
    // `--locked`: `fuzz/Cargo.lock` is committed, and a dependency added to
    // the reference must reach it too (`cargo update --manifest-path
    // fuzz/Cargo.toml -p molrec`), or it silently goes stale.
    cargo(
        &root,
        &[
            "build",
            "--release",
            "-q",
            "--locked",
            "--bins",
            "--target-dir",
            &target_dir.display().to_string(),
            "--manifest-path",
        ],
        &fuzz.join("Cargo.toml"),
    );
    let seeds = std::env::temp_dir().join(format!("molrec-fuzz-seeds-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&seeds);
    cargo(
        &root,
        &[
            "run",
            "--release",
            "-q",
            "-p",
            "molrec",
            "--example",
            "fuzz_seeds",
            "--",
        ],
        &seeds,
    );
    for (target, seed_dir, agree) in TARGETS {
        let mut inputs = files(&seeds.join(seed_dir));
        let seeded = inputs.len();
        assert!(
            seeded > 0,
            "{target}: no seeds in {}",
            seeds.join(seed_dir).display()
        );
        inputs.extend(files(&fuzz.join("regressions").join(target)));
        let binary = target_dir.join("release").join(target);
        assert!(
            binary.is_file(),
            "{target}: cargo built no {}",
            binary.display()
        );
        let mut run = Command::new(&binary);
        run.args(&inputs);
        if agree {
            run.env("MOLREC_FUZZ_AGREE", "1");
        }
        let out = run.output().expect("the fuzz target runs");
        let log = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{target} failed on one of its {} inputs:\n{}",
            inputs.len(),
            tail(&log, 60)
        );
        // libFuzzer prints one line per input it ran: all of them ran.
        let executed = log.lines().filter(|l| l.starts_with("Executed ")).count();
        assert_eq!(
            executed,
            inputs.len(),
            "{target}: {seeded} seeds and regressions"
        );
    }
    let _ = std::fs::remove_dir_all(&seeds);
}

/// Runs cargo in `dir` with `args` and then `last` (its output but errors
/// dropped); panics if it fails.
fn cargo(dir: &Path, args: &[&str], last: &Path) {
    let status = Command::new(env!("CARGO"))
        .current_dir(dir)
        .args(args)
        .arg(last)
        .stdout(Stdio::null())
        .status()
        .expect("cargo runs");
    assert!(
        status.success(),
        "cargo {} {} failed",
        args.join(" "),
        last.display()
    );
}

/// The files of `dir` in name order (none when it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| p.is_file());
    found.sort();
    found
}

/// The last `n` lines of `text`.
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
