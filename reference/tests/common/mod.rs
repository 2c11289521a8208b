//! What several test binaries share (the library's, and through
//! `cli/tests/common` the command line's): deterministic randomness, a
//! small generated collection, checks of a written file. Each uses a part.
#![allow(dead_code)]

use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use molrec::lmdb::Reader;
use serde_json::{json, Value};
use std::path::Path;

/// SplitMix64: deterministic for a seed, no dependency.
pub struct Rng(pub u64);

impl Rng {
    /// Seeded, with the first output discarded.
    pub fn new(seed: u64) -> Rng {
        let mut r = Rng(seed);
        r.next();
        r
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// In `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// An index in `0..n` (0 when `n` is 0).
    pub fn index(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    /// True once in `n` draws.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// True `percent` times in 100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.index(items.len())]
    }
}

/// `records` records in canonical JSON: a 3-atom system, `frames` small
/// trajectory frames each; `shift` moves the first coordinate.
pub fn collection_json(records: usize, frames: usize, shift: f64) -> Value {
    let recs: Vec<Value> = (0..records)
        .map(|r| {
            let s = shift + r as f64 * 1e-4;
            let frames: Vec<Value> = (0..frames)
                .map(|k| {
                    let x = [s, 0.96 + k as f64 * 0.01, -0.24];
                    json!({"step": k, "meta": {"pe": -76.0 - k as f64 * 0.1},
                        "blocks": {"atoms": {"count": 3, "columns": {
                            "x": {"dtype": "f64", "shape": [3], "values": x}}}}})
                })
                .collect();
            json!({
                "meta": {"n": r},
                "system": {"blocks": {"atoms": {"count": 3, "columns": {
                    "element": {"dtype": "string", "shape": [3], "values": ["O", "H", "H"]}}}}},
                "trajectory": {"frames": frames}
            })
        })
        .collect();
    json!({"meta": {"units": {"length": "angstrom", "energy": "kcal/mol"}}, "records": recs})
}

/// Writes a line to the real stderr (libtest captures `eprintln!`, not this).
pub fn report(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// This process's `molrec-test-<what>-<pid>` directory, in the temporary
/// directory. The first call also deletes the directories of that form
/// that test processes no longer running left there (libtest has no hook to
/// delete a directory when the tests of a binary end; a run of the lmdb
/// tests leaves about 40 MiB).
fn scratch_path(what: &str) -> std::path::PathBuf {
    static SWEEP: std::sync::Once = std::sync::Once::new();
    let tmp = std::env::temp_dir();
    SWEEP.call_once(|| {
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.starts_with("molrec-test-"))
                .and_then(|n| n.rsplit_once('-'))
                .and_then(|(_, pid)| pid.parse::<u32>().ok())
            else {
                continue;
            };
            // An hour untouched as well: a process of another PID
            // namespace sharing this directory is not in our /proc.
            let running = std::path::Path::new("/proc").join(pid.to_string()).exists();
            let idle = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age.as_secs() > 3600);
            if !running && idle && entry.file_type().is_ok_and(|t| t.is_dir()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    });
    tmp.join(format!("molrec-test-{what}-{}", std::process::id()))
}

/// A fresh, empty directory for this process: `molrec-test-<what>-<pid>`.
pub fn scratch_dir(what: &str) -> std::path::PathBuf {
    let dir = scratch_path(what);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `<name>.mrec.lmdb` in this process's `molrec-test-<what>-<pid>` directory,
/// with no file or lock file there yet (the directory is kept: tests of one
/// binary share it).
pub fn scratch_file(what: &str, name: &str) -> std::path::PathBuf {
    let dir = scratch_path(what);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{name}.mrec.lmdb"));
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(lock_path(&path));
    path
}

/// LMDB's lock file beside `path`.
pub fn lock_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-lock");
    std::path::PathBuf::from(s)
}

/// An f64 column of canonical JSON.
pub fn f64col(values: &[f64]) -> Value {
    json!({"dtype": "f64", "shape": [values.len()], "values": values})
}

/// `"MRF1"`, the header length, the header, zero padding to 8, the payload.
pub fn frame_value(header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = b"MRF1".to_vec();
    v.extend_from_slice(&(header.len() as u32).to_le_bytes());
    v.extend_from_slice(header);
    v.resize(v.len().next_multiple_of(8), 0);
    v.extend_from_slice(payload);
    v
}

/// A second `Writer` on `path`, while a first one holds it, is refused as
/// busy (`lmdb.file.one-writer`), even when told to overwrite.
pub fn assert_second_writer_refused(path: &std::path::Path, header: molrec::model::Header) {
    use molrec::lmdb::{Writer, WriterOptions};
    let options = WriterOptions {
        overwrite: true,
        ..WriterOptions::default()
    };
    match Writer::create(path, header, options) {
        Err(e @ molrec::Error::Busy(_)) => {
            assert_eq!(e.clause(), Some(molrec::Clause::WriterExclusive))
        }
        Err(e) => panic!("expected busy, got {e}"),
        Ok(_) => panic!("two writers on one file"),
    }
}

/// Writes `value` as a JSON file (a model for `mrec write`, an expectation).
pub fn write_json_file(path: &std::path::Path, value: &Value) {
    std::fs::write(path, serde_json::to_vec(value).unwrap()).unwrap();
}

/// Every frame value of the file is what `frame_bytes::encode` writes for
/// its decoded content, byte for byte: the writer's reuse of the last
/// frame's `blocks` text never writes other bytes. Returns the frames seen.
pub fn frames_reencode_identically(path: &Path) -> usize {
    let mut options = EnvOpenOptions::new();
    // SAFETY: valid flags for a read-only open; nothing writes the file now.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) };
    // SAFETY: no other Env of this path is open in the process now.
    let env = unsafe { options.open(path) }.unwrap();
    let txn = env.read_txn().unwrap();
    let db: Database<Bytes, Bytes> = env.open_database(&txn, None).unwrap().unwrap();
    let mut frames = 0;
    let mut again = Vec::new();
    for item in db.iter(&txn).unwrap() {
        let (key, value) = item.unwrap();
        if key.len() != 9 || key[0] != b'f' {
            continue;
        }
        let frame = molrec::frame_bytes::decode(value).unwrap();
        let blocks = frame.to_blocks().unwrap();
        molrec::frame_bytes::encode(&blocks, &frame.info, false, &mut again);
        assert!(
            again == value,
            "{}: frame {key:?} is not what encode writes",
            path.display()
        );
        frames += 1;
    }
    drop(txn);
    env.prepare_for_closing().wait();
    frames
}

/// Every record of the file reads the same through `record` (column-wise,
/// `record_arrays`) and `record_reference` (the model, then
/// `prepare_record`), and the arrays' accessors hand back what the model
/// holds at every frame. Debug text, not `==`: NaN is not equal to itself.
pub fn records_read_alike(path: &Path) {
    let reader = Reader::open(path).unwrap();
    let txn = reader.txn().unwrap();
    for r in 0..reader.n_records() {
        let arrays = txn.record_arrays(r).unwrap();
        let model = txn.record_reference(r).unwrap();
        let fast = arrays.clone().into_record();
        assert_eq!(
            format!("{fast:?}"),
            format!("{model:?}"),
            "{} records[{r}]",
            path.display()
        );
        let (Some(traj), Some(frames)) = (&arrays.trajectory, &model.trajectory) else {
            continue;
        };
        assert_eq!(traj.len(), frames.frames.len());
        for (k, step) in frames.frames.iter().enumerate() {
            assert_eq!(traj.steps[k], step.step);
            for (name, series) in &traj.blocks {
                let block = step.blocks.get(name);
                assert_eq!(series.update_at(k).map(|u| u.count), block.map(|b| b.count));
                for (col, column) in &series.columns {
                    let want = block.and_then(|b| match &b.columns[col].data {
                        molrec::model::ColumnData::F64(v) => Some(v.as_slice()),
                        _ => None,
                    });
                    if column.dtype() == molrec::DType::F64 {
                        let got = series.f64_at(col, k);
                        assert_eq!(
                            format!("{got:?}"),
                            format!("{want:?}"),
                            "{name}.{col} at {k}"
                        );
                    }
                }
            }
        }
    }
}

/// The `mrec` binary: in the command line's own tests the one cargo built
/// for them; in the library's, built on first use by the cargo running the
/// tests, in the same profile and target directory (a no-op after `cargo
/// test --workspace`, which has built it already).
pub fn mrec_binary() -> &'static Path {
    static BINARY: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BINARY.get_or_init(|| {
        if let Some(built) = option_env!("CARGO_BIN_EXE_mrec") {
            return built.into();
        }
        let mut cargo = std::process::Command::new(env!("CARGO"));
        cargo.args(["build", "-q", "-p", "mrec-cli", "--bin", "mrec"]);
        if !cfg!(debug_assertions) {
            cargo.arg("--release");
        }
        let status = cargo.status().expect("cargo runs");
        assert!(status.success(), "building mrec failed");
        // <target>/<profile>/deps/<this test> -> <target>/<profile>/mrec
        let exe = std::env::current_exe().expect("the test's path");
        let profile = exe.parent().and_then(Path::parent).expect("target dir");
        profile.join(format!("mrec{}", std::env::consts::EXE_SUFFIX))
    })
}

/// Runs the `mrec` binary with `args` (and an empty stdin): its exit code
/// (`None` when a signal ended it), stdout and stderr.
pub fn mrec<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(mrec_binary())
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
