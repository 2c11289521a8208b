//! `mrec`'s errors outside the format: an operating-system error names the
//! path it is about and exits with 3, and `mrec bench` finds what would make
//! it fail (a `--json` path it cannot write, files the disk cannot hold)
//! before it runs, not after minutes of work.

use std::os::unix::process::CommandExt;
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

/// A record count whose files no disk holds (or whose size overflows) is
/// refused before anything is generated, not met by a panic or by a full
/// disk minutes later. The child may write no file past 64 MiB: should the
/// check go, the test fails on that limit instead of filling the disk.
#[test]
fn bench_refuses_more_records_than_the_disk_holds_before_it_runs() {
    for (records, says) in [
        ("1000000000000", "records need about"),
        ("18446744073709551615", "does not fit in 64 bits"),
    ] {
        let mut command = Command::new(MREC);
        command.args(["bench", "--quiet", "--records", records]);
        // SAFETY: between fork and exec the closure only calls setrlimit,
        // which is async-signal-safe, on a struct on its own stack.
        unsafe {
            command.pre_exec(|| {
                let limit = libc::rlimit {
                    rlim_cur: 64 << 20,
                    rlim_max: 64 << 20,
                };
                if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{records}: {stderr}");
        assert!(stderr.contains(says), "{records}: {stderr}");
        assert!(out.stdout.is_empty());
    }
}
