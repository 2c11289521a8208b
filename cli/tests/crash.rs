//! Crash safety: a writer killed at any moment leaves nothing at its path
//! or the whole collection there, and in its partial file (where it writes
//! until the collection is committed) a file every reader refuses as
//! uncommitted or (killed after its last commit) the whole collection.
//! Never a partially readable file.
//!
//! `mrec write` runs as a child process and is killed with SIGKILL at seeded
//! random points between zero and the measured duration of an uninterrupted
//! write. `MOLREC_CRASH_TRIALS=n` runs n trials (default 20).
//!
//! Also here, because their failure mode is the death of the reading
//! process: a truncated download is opened by `mrec validate` in a child
//! process, which must exit with a refusal rather than die of a signal.

mod common;

use common::{collection_json, lock_path, report, scratch_dir, write_json_file, Rng};
use molrec::lmdb::{partial_path, Reader, MAX_READERS};
use molrec::model_json::{collection_from_json, collection_to_json};
use molrec::Error;
use serde_json::Value;
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MREC: &str = env!("CARGO_BIN_EXE_mrec");

fn mrec_write(model: &Path, out: &Path, batch_bytes: usize) -> Command {
    let mut c = Command::new(MREC);
    c.arg("write")
        .arg(model)
        .arg(out)
        .arg("--batch-bytes")
        .arg(batch_bytes.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// `mrec validate FILE`: exit code (None when killed by a signal) and stderr.
fn validate(path: &Path) -> (Option<i32>, String) {
    let (code, _, stderr) = common::mrec(&[OsStr::new("validate"), path.as_os_str()]);
    (code, stderr)
}

/// Whether `a` and `b` name one file.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

fn trials() -> usize {
    std::env::var("MOLREC_CRASH_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20)
}

#[test]
fn a_killed_writer_leaves_the_whole_collection_or_nothing_but_an_uncommitted_partial_file() {
    let dir = scratch_dir("crash");
    let source = collection_json(3000, 4, 0.0);
    let model = dir.join("collection.json");
    write_json_file(&model, &source);
    let in_memory = collection_from_json(&source).unwrap();

    // The uninterrupted write: its duration, when its (partial) file
    // appears, what it reads back as.
    let reference = dir.join("reference.mrec.lmdb");
    let start = Instant::now();
    let mut child = mrec_write(&model, &reference, 65536).spawn().unwrap();
    let mut appeared = None;
    let status = loop {
        if appeared.is_none() && partial_path(&reference).exists() {
            appeared = Some(start.elapsed());
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    let duration = start.elapsed();
    assert!(status.success(), "the uninterrupted write failed: {status}");
    let appeared = appeared.unwrap_or(duration);
    let expected =
        collection_to_json(&Reader::open(&reference).unwrap().read_collection().unwrap());
    assert_eq!(
        expected["records"].as_array().map(Vec::len),
        Some(in_memory.records.len())
    );
    // Same records as the source read in memory (the file adds what a
    // reader always returns: the declaration, meta types, molrec_version).
    let records_of = |v: &Value| {
        v["records"]
            .as_array()
            .map(|a| a.iter().map(|r| r["meta"].clone()).collect::<Vec<_>>())
    };
    assert!(records_of(&expected) == records_of(&collection_to_json(&in_memory)));
    let size = std::fs::metadata(&reference).unwrap().len();
    report(&format!(
        "crash: uninterrupted write of 3000 records: {:.0} ms (file appears at {:.0} ms), {size} bytes",
        duration.as_secs_f64() * 1e3,
        appeared.as_secs_f64() * 1e3
    ));

    // Kill points, in time: one trial in eight at a random moment before the
    // file exists (while the JSON is parsed), the others at a random moment
    // of the writing phase, measured from when this trial's file appears
    // (parse times vary with the machine's load; the writing phase is what
    // the test is about).
    let mut rng = Rng(0x0063_7261_7368);
    let writing = duration.saturating_sub(appeared).as_secs_f64();
    let (mut absent, mut uncommitted, mut complete, mut empty) = (0, 0, 0, 0);
    // Of the complete ones, those still in the partial file (killed
    // between the last commit and the rename).
    let mut complete_partial = 0;
    let mut failures = Vec::new();
    let n = trials();
    for t in 0..n {
        let out = dir.join(format!("trial{t}.mrec.lmdb"));
        let partial = partial_path(&out);
        let before_file = rng.next().is_multiple_of(8);
        let fraction = rng.unit();
        let spawned = Instant::now();
        let mut child = mrec_write(&model, &out, 65536).spawn().unwrap();
        let when = if before_file {
            let delay = Duration::from_secs_f64(appeared.as_secs_f64() * fraction);
            std::thread::sleep(delay);
            format!("{:.0} ms after the start", delay.as_secs_f64() * 1e3)
        } else {
            while !partial.exists() && !out.exists() && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_micros(200));
            }
            let delay = Duration::from_secs_f64(writing * 1.3 * fraction);
            std::thread::sleep(delay);
            format!(
                "{:.0} ms after the file appeared ({:.0} ms after the start)",
                delay.as_secs_f64() * 1e3,
                spawned.elapsed().as_secs_f64() * 1e3
            )
        };
        let _ = child.kill(); // SIGKILL
        let status = child.wait().unwrap();
        let what = format!(
            "trial {t}: killed {when} ({})",
            if status.success() {
                "had finished"
            } else {
                "killed"
            }
        );
        // The path holds the whole collection or nothing; the partial
        // file, where the path holds nothing, may also be uncommitted.
        let (file, what) = match (out.exists(), partial.exists()) {
            // Killed between `finish`'s hard link and its removal of the
            // partial name: two names of one file, judged at the path.
            (true, true) if same_file(&out, &partial) => (&out, format!("{what}: two names")),
            (true, true) => {
                failures.push(format!("{what}: both the file and its partial file exist"));
                continue;
            }
            (true, false) => (&out, what),
            (false, true) => (&partial, format!("{what}: no file; its partial file")),
            (false, false) => {
                absent += 1;
                report(&format!("crash: {what}: no file yet"));
                continue;
            }
        };
        let len = std::fs::metadata(file).unwrap().len();
        if len == 0 {
            empty += 1;
        }
        match Reader::open(file) {
            Err(Error::Uncommitted) if file == &partial => {
                let (code, stderr) = validate(file);
                if code == Some(1) && stderr.contains("lmdb.meta.required") {
                    uncommitted += 1;
                    report(&format!("crash: {what}: {len} bytes, uncommitted"));
                } else {
                    failures.push(format!(
                        "{what}: {len} bytes: Reader says uncommitted, `mrec validate` exits {code:?}: {stderr}"
                    ));
                }
            }
            Err(e) => failures.push(format!(
                "{what}: {len} bytes: neither uncommitted (a partial file) nor complete: {e}{}",
                if len == 0 {
                    " (see a_file_left_empty_by_a_killed_writer_is_uncommitted)"
                } else {
                    ""
                }
            )),
            Ok(reader) => match reader.read_collection() {
                Ok(c) if collection_to_json(&c) == expected => {
                    complete += 1;
                    if file == &partial {
                        complete_partial += 1;
                    }
                    report(&format!("crash: {what}: {len} bytes, complete"));
                }
                Ok(c) => failures.push(format!(
                    "{what}: opened, but reads {} records, not the whole collection",
                    c.records.len()
                )),
                Err(e) => failures.push(format!("{what}: opened, then partially readable: {e}")),
            },
        }
        for f in [&out, &partial] {
            let _ = std::fs::remove_file(f);
            let _ = std::fs::remove_file(lock_path(f));
        }
    }
    let summary = format!(
        "crash: {n} trials: {uncommitted} uncommitted, {complete} complete ({complete_partial} of \
         them in the partial file), {absent} killed before the file existed ({empty} empty \
         files), {} failures",
        failures.len()
    );
    report(&summary);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{failures:#?}\n{summary}");
}

/// `claim` creates the partial file before LMDB writes its first pages: a
/// writer killed in between leaves an empty file, which is not a
/// collection, so it must be refused as uncommitted like any other file
/// without `meta` (`Error::Uncommitted`, `mrec validate` exit 1 with
/// `lmdb.meta.required`), not as an i/o error.
#[test]
fn a_file_left_empty_by_a_killed_writer_is_uncommitted() {
    let dir = scratch_dir("crash-empty");
    let path = dir.join("empty.mrec.lmdb");
    std::fs::File::create(&path).unwrap();
    let opened = Reader::open(&path).map(|_| ());
    let (code, stderr) = validate(&path);
    report(&format!(
        "crash: empty file: Reader::open -> {opened:?}; mrec validate exits {code:?}: {}",
        stderr.trim()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        matches!(opened, Err(Error::Uncommitted)),
        "an empty file (a writer killed before LMDB initialized it) must be refused as \
         uncommitted, got {opened:?}"
    );
    assert_eq!(code, Some(1), "mrec validate on an empty file: {stderr}");
    assert!(stderr.contains("lmdb.meta.required"), "{stderr}");
}

/// A truncated download: LMDB maps the file and trusts the page numbers of
/// its meta page, so touching a page past the end of a truncated file raises
/// SIGBUS. A reader must refuse such a file (its meta page names a last page
/// beyond the file's length) instead of dying.
#[test]
fn a_truncated_download_is_refused_without_a_crash() {
    let dir = scratch_dir("crash-truncated");
    let model = dir.join("collection.json");
    write_json_file(&model, &collection_json(300, 4, 0.0));
    let full = dir.join("full.mrec.lmdb");
    let status = mrec_write(&model, &full, 65536).status().unwrap();
    assert!(status.success());
    let bytes = std::fs::read(&full).unwrap();
    let mut outcomes = Vec::new();
    let mut crashed = Vec::new();
    let page = 4096;
    let mut cuts: Vec<usize> = vec![1, 100, page, 2 * page - 1, 2 * page, 2 * page + 1, 3 * page];
    cuts.extend([bytes.len() / 2, bytes.len() - page, bytes.len() - 1]);
    for cut in cuts {
        let path = dir.join(format!("cut{cut}.mrec.lmdb"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let (code, stderr) = validate(&path);
        let line = format!(
            "truncated to {cut} of {} bytes: mrec validate exits {code:?}: {}",
            bytes.len(),
            stderr.lines().last().unwrap_or("").trim()
        );
        report(&format!("crash: {line}"));
        if !matches!(code, Some(1) | Some(3)) {
            crashed.push(line.clone());
        }
        outcomes.push(line);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        crashed.is_empty(),
        "`mrec validate` died (killed by a signal, SIGBUS) on truncated files instead of \
         refusing them:\n{crashed:#?}\nall outcomes:\n{outcomes:#?}"
    );
}

/// Documents the reader-slot limit the concurrency notes in SECURITY.md cite.
#[test]
fn the_reader_slot_limit_is_what_security_md_says() {
    assert_eq!(MAX_READERS, 1024);
}
