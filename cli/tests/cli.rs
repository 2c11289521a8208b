//! `mrec`'s errors outside the format: an operating-system error names the
//! path it is about and exits with 3, and `mrec bench` finds what would make
//! it fail (a `--json` path it cannot write, files the disk cannot hold)
//! before it runs, not after minutes of work.

use common::mrec;
use molrec::lmdb::partial_path;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

const MREC: &str = env!("CARGO_BIN_EXE_mrec");

/// A directory that does not exist, under this test's scratch directory.
fn missing_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir()
        .join(format!("mrec-cli-test-{}", std::process::id()))
        .join(name);
    assert!(!dir.exists());
    dir
}

/// Limits each file `command`'s process writes to `bytes` (RLIMIT_FSIZE),
/// with SIGXFSZ ignored so that a write past the limit fails with EFBIG
/// instead of killing the process: a full disk that needs no mount.
fn limit_file_size(command: &mut Command, bytes: u64) {
    // SAFETY: between fork and exec the closure only calls signal and
    // setrlimit, both async-signal-safe, on values on its own stack.
    unsafe {
        command.pre_exec(move || {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let limit = libc::rlimit {
                rlim_cur: bytes,
                rlim_max: bytes,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
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

/// A write that runs out of room (here a file-size limit of 256 KiB, which
/// the kernel enforces as it would a full disk, with EFBIG for ENOSPC)
/// names the collection file.
#[test]
fn a_write_that_runs_out_of_room_names_the_file() {
    let dir = common::scratch_dir("cli-test-no-room");
    let model = dir.join("collection.json");
    common::write_json_file(&model, &common::collection_json(400, 40, 0.0));
    let out_path = dir.join("c.mrec.lmdb");
    let mut command = Command::new(MREC);
    command.arg("write").arg(&model).arg(&out_path);
    limit_file_size(&mut command, 256 << 10);
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains(&format!("i/o: {}: ", out_path.display())),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
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
        limit_file_size(&mut command, 64 << 20);
        let out = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{records}: {stderr}");
        assert!(stderr.contains(says), "{records}: {stderr}");
        assert!(out.stdout.is_empty());
    }
}

/// An interrupted `mrec write` stops after the record it is writing,
/// deletes its partial file and exits with 130; its output is as it was:
/// absent, or (`--overwrite`) the collection it would replace, byte for
/// byte.
#[test]
fn an_interrupted_write_leaves_its_output_as_it_was() {
    let dir = common::scratch_dir("cli-test-interrupted-write");
    let big = dir.join("big.json");
    common::write_json_file(&big, &common::collection_json(30_000, 4, 0.0));
    let small = dir.join("small.json");
    common::write_json_file(&small, &common::collection_json(2, 2, 0.0));
    let out = dir.join("out.mrec.lmdb");
    let partial = partial_path(&out);
    for overwrite in [false, true] {
        let before = overwrite.then(|| {
            let status = Command::new(MREC)
                .arg("write")
                .arg(&small)
                .arg(&out)
                .status()
                .unwrap();
            assert!(status.success());
            std::fs::read(&out).unwrap()
        });
        let mut write = Command::new(MREC);
        write
            .arg("write")
            .arg(&big)
            .arg(&out)
            .stderr(std::process::Stdio::piped());
        if overwrite {
            write.arg("--overwrite");
        }
        let child = write.spawn().unwrap();
        let started = std::time::Instant::now();
        while std::fs::metadata(&partial).map_or(true, |m| m.len() == 0) {
            assert!(started.elapsed().as_secs() < 120, "no partial file");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // SAFETY: kill sends a signal to the child, which this test owns
        // and has not waited for, so the pid is still the child's.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
        let done = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&done.stderr);
        common::report(&format!(
            "cli: mrec write{} interrupted {:.0} ms after it started: exit {:?}: {}",
            if overwrite { " --overwrite" } else { "" },
            started.elapsed().as_secs_f64() * 1e3,
            done.status.code(),
            stderr.trim()
        ));
        assert_eq!(done.status.code(), Some(130), "{stderr}");
        assert!(stderr.contains("is as it was"), "{stderr}");
        assert!(!partial.exists() && !common::lock_path(&partial).exists());
        match before {
            Some(bytes) => assert!(std::fs::read(&out).unwrap() == bytes, "the file changed"),
            None => assert!(!out.exists()),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// An interrupted `mrec bench` deletes what it wrote (its temporary
/// directory, or in a `--dir` both files and the partial file being
/// written, and the `--json` file it created) and exits with 130.
#[test]
fn an_interrupted_bench_deletes_its_files() {
    for in_dir in [false, true] {
        let tmp = missing_dir(if in_dir {
            "interrupted-dir"
        } else {
            "interrupted"
        });
        std::fs::create_dir_all(&tmp).unwrap();
        let json = tmp.join("figures.json");
        let run_dir = tmp.join("run");
        let mut bench = Command::new(MREC);
        bench
            .args(["bench", "--quiet", "--records", "3000", "--json"])
            .arg(&json)
            .env("TMPDIR", &tmp)
            .stderr(std::process::Stdio::piped());
        if in_dir {
            bench.arg("--dir").arg(&run_dir);
        }
        let child = bench.spawn().unwrap();
        // Interrupt it in its write phase, once the partial file exists.
        let started = std::time::Instant::now();
        let writing = || {
            std::fs::read_dir(&tmp)
                .unwrap()
                .flatten()
                .any(|run| partial_path(&run.path().join("bench.mrec.lmdb")).exists())
        };
        while !writing() {
            assert!(
                started.elapsed().as_secs() < 120,
                "no bench.mrec.lmdb.partial in {}",
                tmp.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        // SAFETY: kill sends a signal to the child, which this test owns
        // and has not waited for, so the pid is still the child's.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(130), "{stderr}");
        assert!(stderr.contains("interrupted"), "{stderr}");
        let mut left: Vec<_> = walk(&tmp);
        if in_dir {
            // The directory was asked for: it stays, empty.
            left.retain(|p| p != &run_dir);
        }
        assert!(left.is_empty(), "left behind: {left:?}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}

/// Every file and directory under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}

/// Overwrites row `row` of column `column` (8-byte elements) of block
/// `block` in the frame stored under `key`, as a third-party writer's
/// defect would leave it.
fn patch_cell(file: &Path, key: &[u8], block: &str, column: &str, row: usize, bytes: [u8; 8]) {
    use heed::types::Bytes;
    let mut options = heed::EnvOpenOptions::new();
    options.map_size(64 << 20);
    // SAFETY: valid flags for a writable environment.
    unsafe { options.flags(heed::EnvFlags::NO_SUB_DIR) };
    // SAFETY: this test is the only user of the file and opens it once.
    let env = unsafe { options.open(file) }.unwrap();
    let mut txn = env.write_txn().unwrap();
    let db: heed::Database<Bytes, Bytes> = env.open_database(&txn, None).unwrap().unwrap();
    let mut value = db.get(&txn, key).unwrap().unwrap().to_vec();
    let len = u32::from_le_bytes(value[4..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&value[8..8 + len]).unwrap();
    let offset = header["blocks"][block]["columns"][column]["offset"]
        .as_u64()
        .unwrap() as usize;
    let at = (8 + len).div_ceil(8) * 8 + offset + row * 8;
    value[at..at + 8].copy_from_slice(&bytes);
    db.put(&mut txn, key, &value).unwrap();
    txn.commit().unwrap();
    env.prepare_for_closing().wait();
}

fn written(name: &str, fixture_name: &str) -> PathBuf {
    let dir = missing_dir(name);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("c.mrec.lmdb");
    let (code, _, err) = mrec(&["write", &fixture(fixture_name), file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    file
}

#[test]
fn validate_reports_an_index_n_atoms_that_differs_from_the_record() {
    let file = written("validate-n-atoms", "records-different-subsets.json");
    patch_cell(&file, b"index", "records", "n_atoms", 1, 7u64.to_le_bytes());
    let (code, out, err) = mrec(&["validate", file.to_str().unwrap()]);
    assert_ne!(code, Some(0), "{out}{err}");
    assert!(
        err.contains(
            "[lmdb.index.n-atoms] index.records.columns.n_atoms[1]: is 7; record 1 has 3 atoms"
        ),
        "{err}"
    );
    assert!(err.contains("1 violation(s)"), "{err}");
}

#[test]
fn validate_reports_off_grid_values_as_should_findings_and_still_conforms() {
    let file = written("validate-off-grid", "precision-off-grid-system.json");
    // charge is declared at 0.25: 0.3 is off its grid.
    patch_cell(
        &file,
        &[b's', 0, 0, 0, 0, 0, 0, 0, 0],
        "atoms",
        "charge",
        2,
        0.3f64.to_le_bytes(),
    );
    let (code, out, err) = mrec(&["validate", file.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("conforms") && out.contains("1 finding(s) of level should"),
        "{out}"
    );
    assert!(err.contains("(should)") && err.contains("charge"), "{err}");
    let (_, help, _) = mrec(&["validate", "--help"]);
    assert!(help.contains("should"), "{help}");
}
