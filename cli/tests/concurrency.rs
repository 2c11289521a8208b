//! Concurrency and read-only media.
//!
//! * 64 reader threads share one `Reader` (each its own read transaction)
//!   and read random records while another process (`mrec write`) writes a
//!   different file; meanwhile a poller opens that file and its partial file
//!   again and again: it sees no file, a partial file refused as
//!   uncommitted, or the complete collection, nothing between.
//! * A second writer on a file is refused (`Error::Busy`,
//!   `lmdb.file.one-writer`), in process and across processes.
//! * Read-only media: the file is put behind a read-only bind mount in a
//!   private mount namespace (`unshare -m`), where the lock file really
//!   cannot be created; the reader falls back to `NO_LOCK`
//!   (`Reader::is_lock_free`) and reads the whole collection.

mod common;

use common::{
    assert_second_writer_refused, collection_json, lock_path, report, scratch_dir, write_json_file,
    Rng,
};
use libtest_mimic::{Arguments, Completion, Trial};
use molrec::lmdb::{partial_path, write_collection, Reader, Writer, WriterOptions, MAX_READERS};
use molrec::model_json::{collection_from_json, collection_to_json, record_to_json};
use molrec::{Clause, Error};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MREC: &str = env!("CARGO_BIN_EXE_mrec");

/// A libtest-mimic driver: the two read-only-media trials need a mount
/// namespace or `chattr +i`, and where the machine allows neither they
/// are reported as ignored, with why. `read_only_inner` is the one trial
/// of this binary started again inside the read-only trial's namespace.
fn main() {
    let mut trials: Vec<Trial> = vec![
        Trial::test(
            "sixty_four_reader_threads_share_one_reader_while_another_process_writes",
            || {
                sixty_four_reader_threads_share_one_reader_while_another_process_writes();
                Ok(())
            },
        ),
        Trial::test(
            "a_second_writer_is_refused_in_process_and_across_processes",
            || {
                a_second_writer_is_refused_in_process_and_across_processes();
                Ok(())
            },
        ),
        Trial::test(
            "a_file_opened_while_its_writer_commits_is_uncommitted_never_truncated",
            || {
                a_file_opened_while_its_writer_commits_is_uncommitted_never_truncated();
                Ok(())
            },
        ),
        Trial::ignorable_test(
            "a_file_on_read_only_media_is_read_without_a_lock_file",
            || {
                Ok(completion(
                    a_file_on_read_only_media_is_read_without_a_lock_file(),
                ))
            },
        ),
        Trial::ignorable_test(
            "a_file_in_an_immutable_directory_is_read_through_the_no_lock_fallback",
            || {
                Ok(completion(
                    a_file_in_an_immutable_directory_is_read_through_the_no_lock_fallback(),
                ))
            },
        ),
    ];
    // Started again inside the read-only trial's namespace: only the
    // inner trial, which is not listed otherwise.
    if let Ok(spec) = std::env::var(INNER) {
        trials = vec![Trial::test("read_only_inner", move || {
            read_only_inner(spec);
            Ok(())
        })];
    }
    let args = Arguments::from_args();
    libtest_mimic::run(&args, trials).exit();
}

/// A trial that returns why it could not run: ignored with that reason.
fn completion(skipped: Option<String>) -> Completion {
    skipped.map_or(Completion::Completed, Completion::ignored_with)
}

fn spawn_write(model: &Path, out: &Path, extra: &[&str]) -> Child {
    Command::new(MREC)
        .arg("write")
        .arg(model)
        .arg(out)
        .args(["--batch-bytes", "65536"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// What a reader opening a file `mrec write` is writing sees.
enum Opened {
    /// No file (yet, or no longer: a partial file renamed to its path).
    Absent,
    /// A partial file before its last commit.
    Uncommitted,
    /// A whole collection: at the path, or in the partial file between
    /// the last commit and the rename.
    Complete(Box<Reader>),
}

/// Opens `path` (`partial`: a writer's partial file) while its writer may
/// be running; anything a reader may not see there is an `Err`.
fn open_during_write(path: &Path, partial: bool) -> Result<Opened, String> {
    let existed = path.exists();
    match Reader::open(path) {
        Err(Error::Uncommitted) if partial => Ok(Opened::Uncommitted),
        Err(Error::Io(e)) if (partial || !existed) && e.kind() == std::io::ErrorKind::NotFound => {
            Ok(Opened::Absent)
        }
        Err(e) => Err(e.to_string()),
        Ok(reader) => Ok(Opened::Complete(Box::new(reader))),
    }
}

fn sixty_four_reader_threads_share_one_reader_while_another_process_writes() {
    let dir = scratch_dir("concurrency-readers");
    // The file the threads read.
    let path = dir.join("shared.mrec.lmdb");
    let source = collection_json(500, 4, 0.0);
    write_collection(
        &path,
        collection_from_json(&source).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();
    let reader = Reader::open(&path).unwrap();
    let whole = reader.read_collection().unwrap();
    let expected: Vec<Value> = whole.records.iter().map(record_to_json).collect();

    // The file another process writes meanwhile.
    let model = dir.join("other.json");
    write_json_file(&model, &collection_json(3000, 4, 1.0));
    let other = dir.join("other.mrec.lmdb");
    let mut child = spawn_write(&model, &other, &[]);

    let stop = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let views = AtomicU64::new(0);
    let start = Instant::now();
    let (poll_uncommitted, poll_complete, poll_absent, poll_bad, complete_json) =
        std::thread::scope(|s| {
            let mut handles = Vec::new();
            for t in 0..64u64 {
                let reader = &reader;
                let expected = &expected;
                let reads = &reads;
                let views = &views;
                handles.push(s.spawn(move || {
                    let mut rng = Rng(t + 1);
                    for i in 0..60 {
                        // Each thread its own read transaction, a fresh one now and then.
                        let txn = reader.txn().expect("a read transaction");
                        for _ in 0..5 {
                            let r = rng.next() % expected.len() as u64;
                            let record = txn.record(r).expect("a record");
                            assert!(
                                record_to_json(&record) == expected[r as usize],
                                "thread {t}: record {r} read differently"
                            );
                            reads.fetch_add(1, Ordering::Relaxed);
                            if i % 4 == 0 {
                                txn.for_each_frame(r, |view| {
                                    let x = &view.blocks["atoms"].columns["x"];
                                    let owned = x.to_column()?;
                                    if let Some(v) = x.f64_view() {
                                        assert_eq!(
                                            owned.data,
                                            molrec::model::ColumnData::F64(v.to_vec())
                                        );
                                    }
                                    Ok(())
                                })
                                .expect("views");
                                views.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                }));
            }
            // The poller: opens the file being written and its partial
            // file, in turn, again and again.
            let poller = s.spawn(|| {
                let (mut uncommitted, mut complete, mut absent) = (0u64, 0u64, 0u64);
                let mut bad = Vec::new();
                let mut complete_json = None;
                let other_partial = partial_path(&other);
                let mut turn = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    turn += 1;
                    let (path, partial) = match turn % 2 {
                        0 => (&other, false),
                        _ => (&other_partial, true),
                    };
                    match open_during_write(path, partial) {
                        Ok(Opened::Absent) => absent += 1,
                        Ok(Opened::Uncommitted) => uncommitted += 1,
                        Ok(Opened::Complete(r)) => match r.read_collection() {
                            Ok(c) if c.records.len() == 3000 => {
                                complete += 1;
                                complete_json.get_or_insert_with(|| collection_to_json(&c));
                            }
                            Ok(c) => bad.push(format!("opened with {} records", c.records.len())),
                            Err(e) => bad.push(format!("opened, then: {e}")),
                        },
                        Err(e) => bad.push(format!("{}: {e}", path.display())),
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
                (uncommitted, complete, absent, bad, complete_json)
            });
            for h in handles {
                h.join().unwrap();
            }
            // Let the writer finish, then stop the poller.
            let status = child.wait().unwrap();
            assert!(status.success(), "mrec write failed: {status}");
            std::thread::sleep(Duration::from_millis(50));
            stop.store(true, Ordering::Relaxed);
            poller.join().unwrap()
        });
    let elapsed = start.elapsed();
    // Whatever the poller read complete is the collection the writer committed.
    let committed = collection_to_json(&Reader::open(&other).unwrap().read_collection().unwrap());
    if let Some(seen) = &complete_json {
        assert!(
            *seen == committed,
            "a concurrent open read something else than the committed collection"
        );
    }
    let summary = format!(
        "concurrency: 64 threads, {} record reads, {} view passes in {:.0} ms (max_readers {MAX_READERS}); \
         poller on the file being written and its partial file: {poll_absent} absent, \
         {poll_uncommitted} uncommitted, {poll_complete} complete, {} other",
        reads.load(Ordering::Relaxed),
        views.load(Ordering::Relaxed),
        elapsed.as_secs_f64() * 1e3,
        poll_bad.len()
    );
    report(&summary);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(reads.load(Ordering::Relaxed), 64 * 60 * 5, "{summary}");
    assert!(
        poll_bad.is_empty(),
        "a reader opening a file under its writer saw neither a refusal nor the whole \
         collection: {poll_bad:?}\n{summary}"
    );
    assert!(poll_complete > 0, "{summary}");
}

fn a_second_writer_is_refused_in_process_and_across_processes() {
    let dir = scratch_dir("concurrency-writers");
    let small = collection_json(2, 2, 0.0);
    let small_model = dir.join("small.json");
    write_json_file(&small_model, &small);

    // In process holds the file; another process tries, with and without --overwrite.
    let path = dir.join("held.mrec.lmdb");
    let header = collection_from_json(&small).unwrap().header;
    let first = Writer::create(&path, header.clone(), WriterOptions::default()).unwrap();
    for extra in [&[][..], &["--overwrite"][..]] {
        let out = spawn_write(&small_model, &path, extra)
            .wait_with_output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        report(&format!(
            "concurrency: mrec write {extra:?} on a file held in process: exit {:?}: {}",
            out.status.code(),
            stderr.trim()
        ));
        assert!(!out.status.success(), "a second writer succeeded");
        assert!(stderr.contains(Clause::WriterExclusive.id()), "{stderr}");
    }
    // And in process: a second Writer on the same path.
    assert_second_writer_refused(&path, header.clone());
    drop(first);

    // A process holds the file; this process and a third process try.
    let mut records = 20_000;
    loop {
        let model = dir.join(format!("big{records}.json"));
        write_json_file(&model, &collection_json(records, 4, 0.0));
        let path = dir.join(format!("busy{records}.mrec.lmdb"));
        let mut writer = spawn_write(&model, &path, &[]);
        // Wait until LMDB has initialized the partial file: the writer's
        // lock is held by then.
        while std::fs::metadata(partial_path(&path)).map_or(true, |m| m.len() == 0)
            && writer.try_wait().unwrap().is_none()
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        let in_process = Writer::create(
            &path,
            header.clone(),
            WriterOptions {
                overwrite: true,
                ..WriterOptions::default()
            },
        );
        let third = spawn_write(&small_model, &path, &["--overwrite"])
            .wait_with_output()
            .unwrap();
        let still_running = writer.try_wait().unwrap().is_none();
        let status = writer.wait().unwrap();
        if !still_running && records < 200_000 {
            // The first writer finished before the others tried: inconclusive, try larger.
            report(&format!(
                "concurrency: the writer of {records} records finished too early; retrying larger"
            ));
            drop(in_process);
            records *= 3;
            continue;
        }
        assert!(still_running, "could not keep a writer running long enough");
        let stderr = String::from_utf8_lossy(&third.stderr);
        report(&format!(
            "concurrency: while `mrec write` of {records} records ran: Writer::create -> {}; \
             a third `mrec write --overwrite` exits {:?}: {}",
            match &in_process {
                Ok(_) => "Ok".to_string(),
                Err(e) => e.to_string(),
            },
            third.status.code(),
            stderr.trim()
        ));
        match in_process {
            Err(e @ Error::Busy(_)) => assert_eq!(e.clause(), Some(Clause::WriterExclusive)),
            Err(e) => panic!("expected busy, got {e}"),
            Ok(_) => panic!("two writers on one file"),
        }
        assert!(!third.status.success());
        assert!(stderr.contains(Clause::WriterExclusive.id()), "{stderr}");
        // The refused writers did not disturb the first one.
        assert!(status.success(), "the first writer failed: {status}");
        let reader = Reader::open(&path).unwrap();
        assert_eq!(reader.n_records(), records as u64);
        break;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------
// Read-only media
// ---------------------------------------------------------------------------

/// Set in the child process that runs [`read_only_inner`].
const INNER: &str = "MOLREC_READONLY_INNER";
/// Printed by [`read_only_inner`] when the namespace allows no read-only mount.
const SETUP_FAILED: &str = "readonly: SETUP FAILED";

fn run(cmd: &mut Command) -> Result<(), String> {
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{cmd:?}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{cmd:?}: {e}")),
    }
}

/// Runs inside a private mount namespace (see the outer test; `spec` is
/// its `INNER` variable): makes the
/// directory read-only by a bind mount, shows the lock file cannot be
/// created, and reads the collection (in process, and with `mrec`).
fn read_only_inner(spec: String) {
    let (src, mount, expected_path) = {
        let parts: Vec<&str> = spec.split('\n').collect();
        (
            PathBuf::from(parts[0]),
            PathBuf::from(parts[1]),
            PathBuf::from(parts[2]),
        )
    };
    run(Command::new("mount").arg("--make-rprivate").arg("/")).ok();
    let setup = run(Command::new("mount").arg("--bind").arg(&src).arg(&mount)).and_then(|()| {
        run(Command::new("mount")
            .args(["-o", "remount,bind,ro"])
            .arg(&mount))
    });
    if let Err(e) = setup {
        // The outer test tries the next way, or skips with this reason.
        report(&format!("{SETUP_FAILED}: {e}"));
        return;
    }
    let file = mount.join("data.mrec.lmdb");
    // The medium is really read-only: nothing can be created beside the file.
    let probe = std::fs::File::create(mount.join("data.mrec.lmdb-lock"));
    let errno = probe.as_ref().err().and_then(|e| e.raw_os_error());
    assert!(
        probe.is_err(),
        "the read-only mount accepted a new file: the test would prove nothing"
    );
    let expected: Value = serde_json::from_slice(&std::fs::read(&expected_path).unwrap()).unwrap();
    let reader = Reader::open(&file).expect("a committed file on read-only media opens");
    let lock_free = reader.is_lock_free();
    let back = collection_to_json(&reader.read_collection().unwrap());
    assert!(
        back == expected,
        "read back differently from read-only media"
    );
    drop(reader);
    let validate = Command::new(MREC)
        .arg("validate")
        .arg(&file)
        .output()
        .unwrap();
    let dump = Command::new(MREC).arg("dump").arg(&file).output().unwrap();
    let dumped: Value = serde_json::from_slice(&dump.stdout).unwrap_or(Value::Null);
    report(&format!(
        "readonly: lock file creation fails with errno {errno:?}; Reader::is_lock_free() = \
         {lock_free}; read_collection equal; mrec validate exits {:?}; mrec dump exits {:?} \
         (equal: {})",
        validate.status.code(),
        dump.status.code(),
        dumped == expected
    ));
    assert!(
        validate.status.success(),
        "{}",
        String::from_utf8_lossy(&validate.stderr)
    );
    assert!(dump.status.success() && dumped == expected);
    assert!(
        !mount.join("data.mrec.lmdb-lock").exists(),
        "a lock file appeared on read-only media"
    );
    assert!(
        lock_free,
        "the file was read without a lock file (the medium is read-only, errno {errno:?}), \
         but Reader::is_lock_free() reports false: LMDB itself skips the lock file on EROFS \
         for a read-only environment, so open_read_env's NO_LOCK fallback is never taken"
    );
    // A lock file left on the medium (written before it was made
    // read-only; here through the writable source of the bind mount):
    // LMDB cannot open it either, and the reader still says so.
    let left = src.join("data.mrec.lmdb-lock");
    std::fs::write(&left, b"").unwrap();
    let reader = Reader::open(&file).expect("opens beside a lock file it cannot use");
    let lock_free = reader.is_lock_free();
    assert_eq!(
        reader
            .read_collection()
            .map(|c| collection_to_json(&c))
            .ok(),
        Some(expected)
    );
    drop(reader);
    std::fs::remove_file(&left).unwrap();
    assert!(
        lock_free,
        "a lock file beside a file on read-only media was taken as used"
    );
}

/// `medium/data.mrec.lmdb` holding 50 records, and what it reads as on
/// ordinary media. Reading creates the lock file; it is removed, so the
/// medium carries the data file only.
fn collection_on_medium(medium: &Path) -> (PathBuf, Value) {
    std::fs::create_dir_all(medium).unwrap();
    let file = medium.join("data.mrec.lmdb");
    write_collection(
        &file,
        collection_from_json(&collection_json(50, 3, 0.0)).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();
    let expected = collection_to_json(&Reader::open(&file).unwrap().read_collection().unwrap());
    std::fs::remove_file(lock_path(&file)).unwrap();
    (file, expected)
}

/// A committed file on a read-only medium reads back whole, without a lock
/// file. Uses a read-only bind mount inside a private mount namespace
/// (`unshare -m`, needs CAP_SYS_ADMIN); falls back to a user namespace
/// (`unshare -rm`); skips with a printed reason when neither is allowed.
fn a_file_on_read_only_media_is_read_without_a_lock_file() -> Option<String> {
    let dir = scratch_dir("readonly");
    let src = dir.join("medium");
    let mount = dir.join("mnt");
    std::fs::create_dir_all(&mount).unwrap();
    let (_, expected) = collection_on_medium(&src);
    let expected_path = dir.join("expected.json");
    write_json_file(&expected_path, &expected);

    let exe = std::env::current_exe().unwrap();
    let spec = format!(
        "{}\n{}\n{}",
        src.display(),
        mount.display(),
        expected_path.display()
    );
    let mut attempts = Vec::new();
    for flags in [&["-m"][..], &["-r", "-m"][..]] {
        let out = Command::new("unshare")
            .args(flags)
            .arg("--")
            .arg(&exe)
            .args([
                "--exact",
                "read_only_inner",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(INNER, &spec)
            .stdin(Stdio::null())
            .output();
        match out {
            Ok(o) => {
                let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
                let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
                let setup_failed = stderr.contains("unshare failed")
                    || stderr.contains("Operation not permitted")
                        && !stdout.contains("test read_only_inner");
                if o.status.success() && stderr.contains(SETUP_FAILED) {
                    attempts.push(format!("unshare {}: {}", flags.join(" "), stderr.trim()));
                    continue;
                }
                if o.status.success() {
                    for line in stderr.lines().filter(|l| l.starts_with("readonly:")) {
                        report(line);
                    }
                    report(&format!(
                        "readonly: used `unshare {}` + a read-only bind mount",
                        flags.join(" ")
                    ));
                    let _ = std::fs::remove_dir_all(&dir);
                    return None;
                }
                if !setup_failed {
                    let _ = std::fs::remove_dir_all(&dir);
                    panic!(
                        "the read-only test failed inside `unshare {}`:\n{stdout}\n{stderr}",
                        flags.join(" ")
                    );
                }
                attempts.push(format!("unshare {}: {}", flags.join(" "), stderr.trim()));
            }
            Err(e) => attempts.push(format!("unshare {}: {e}", flags.join(" "))),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Some(format!(
        "this machine allows no read-only mount for this test ({attempts:?})"
    ))
}

/// Clears the immutable attribute again, whatever happens to the test.
struct Mutable(PathBuf);

impl Drop for Mutable {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(&self.0).output();
    }
}

/// The `NO_LOCK` fallback itself: a directory where no file can be created
/// (`chattr +i`: even root gets EPERM), so LMDB cannot create its lock file
/// and `open_read_env` retries without it. Skips with a printed reason when
/// the file system or the capabilities do not allow the attribute.
fn a_file_in_an_immutable_directory_is_read_through_the_no_lock_fallback() -> Option<String> {
    let dir = scratch_dir("immutable");
    let medium = dir.join("medium");
    let (file, expected) = collection_on_medium(&medium);
    if let Err(e) = run(Command::new("chattr").arg("+i").arg(&medium)) {
        let _ = std::fs::remove_dir_all(&dir);
        return Some(format!("`chattr +i` is not allowed here: {e}"));
    }
    let guard = Mutable(medium.clone());
    let probe = std::fs::File::create(medium.join("probe"));
    let errno = probe.as_ref().err().and_then(|e| e.raw_os_error());
    assert!(probe.is_err(), "an immutable directory accepted a new file");
    let reader = Reader::open(&file).expect("opens without a lock file");
    let lock_free = reader.is_lock_free();
    let back = collection_to_json(&reader.read_collection().unwrap());
    drop(reader);
    let validate = Command::new(MREC)
        .arg("validate")
        .arg(&file)
        .output()
        .unwrap();
    report(&format!(
        "readonly: immutable directory (chattr +i): lock file creation fails with errno \
         {errno:?}; Reader::is_lock_free() = {lock_free}; read_collection equal: {}; mrec \
         validate exits {:?}",
        back == expected,
        validate.status.code()
    ));
    assert!(!medium.join("data.mrec.lmdb-lock").exists());
    drop(guard);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        back == expected,
        "read back differently without a lock file"
    );
    assert!(lock_free, "the NO_LOCK fallback was not reported");
    assert!(validate.status.success());
    None
}

/// A reader that opens a file while its writer commits batch after batch
/// (its partial file) must see it as uncommitted (or, once `meta` is in,
/// complete): never as a truncated copy, never as anything else; and at
/// the path, nothing or the whole collection. Opens as often as it can for
/// the whole write, the partial file three times in four.
fn a_file_opened_while_its_writer_commits_is_uncommitted_never_truncated() {
    let dir = scratch_dir("concurrency-growing");
    let model = dir.join("big.json");
    write_json_file(&model, &collection_json(10_000, 4, 0.0));
    let path = dir.join("growing.mrec.lmdb");
    let partial = partial_path(&path);
    let mut writer = spawn_write(&model, &path, &[]);
    let (mut absent, mut uncommitted, mut complete) = (0u64, 0u64, 0u64);
    let mut other: Vec<String> = Vec::new();
    let start = Instant::now();
    let mut opens = 0u64;
    loop {
        let running = writer.try_wait().unwrap().is_none();
        opens += 1;
        let (file, is_partial) = match opens % 4 {
            0 => (&path, false),
            _ => (&partial, true),
        };
        let existed = file.exists();
        match open_during_write(file, is_partial) {
            Ok(Opened::Absent) => absent += 1,
            Ok(Opened::Uncommitted) => uncommitted += 1,
            Ok(Opened::Complete(r)) => {
                complete += 1;
                if r.n_records() != 10_000 {
                    other.push(format!("opened with {} records", r.n_records()));
                }
            }
            Err(e) => other.push(e),
        }
        if !running {
            break;
        }
        if !existed {
            // Leave the CPU to the writer while it parses its input.
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    let status = writer.wait().unwrap();
    let written = Reader::open(&path).map(|r| r.n_records());
    let summary = format!(
        "concurrency: {} opens during a write of {:.0} ms: {absent} of no file, \
         {uncommitted} uncommitted, {complete} complete, {} other",
        absent + uncommitted + complete + other.len() as u64,
        start.elapsed().as_secs_f64() * 1e3,
        other.len()
    );
    report(&summary);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(status.success());
    assert!(matches!(written, Ok(10_000)), "{written:?}");
    let mut kinds: Vec<&String> = other.iter().collect();
    kinds.dedup_by(|a, b| a.split(':').next() == b.split(':').next());
    assert!(
        other.is_empty(),
        "opening a file under its writer gave neither `uncommitted` nor the whole collection \
         ({} times), e.g. {:?}\n{summary}",
        other.len(),
        kinds.iter().take(3).collect::<Vec<_>>()
    );
}
