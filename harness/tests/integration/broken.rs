//! Wrappers around the reference that each break one rule. Each must fail
//! the cases covering its rule and pass every other case.

use crate::common::run_everything;
use harness::adapter::reference::Reference;
use harness::adapter::{Description, Implementation, Outcome};
use harness::runner::{TrialResult, Verdict};
use harness::suite::{Direction, Kind};
use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use serde_json::Value;
use std::path::Path;

#[derive(Clone, Copy, Debug)]
enum Fault {
    /// The reader hands back only the blocks updated at each ordinal.
    NoCarryForwardOnRead,
    /// The writer adds units to a collection that has none.
    AcceptsMissingUnits,
    /// The reader returns u64 columns as i64.
    U64AsI64,
    /// The writer's index has `first_frame[last] + 1`.
    PrefixSumOffByOne,
    /// The writer's first frame has a column offset that is not a multiple of 8.
    MisalignedBuffer,
    /// The writer leaves out an undefined cell's all-false `boundary` (which
    /// then reads as the same cell: only inspecting the file catches it).
    OmitsUndefinedBoundary,
    /// The writer's quantum is the power of two nearest the precision, not
    /// the largest one not above it.
    QuantumNearest,
    /// The writer's quantum is the smallest power of two above the precision.
    QuantumAbove,
    /// The writer rounds a tie away from zero, not to even.
    RoundsTiesAway,
    /// The reader rounds values to their declared precision again.
    ReroundsOnRead,
    /// The reader hands back an undefined cell's stored `vectors` instead of
    /// the identity.
    StoredUndefinedVectors,
    /// The writer carries a block across a record boundary: a record's
    /// first frame leaves out a block equal to the previous record's last.
    CarriesAcrossRecords,
    /// The reader refuses a repeated step but accepts a decreasing one.
    AcceptsDecreasingSteps,
}

/// Which quantum a writer takes for a precision.
#[derive(Clone, Copy)]
enum Quantum {
    LargestNotAbove,
    Nearest,
    SmallestAbove,
    /// The right quantum, with ties rounded away from zero.
    TiesAway,
}

struct Broken {
    inner: Reference,
    fault: Fault,
}

impl Implementation for Broken {
    fn describe(&self) -> &Description {
        self.inner.describe()
    }

    fn write(&mut self, collection: &Value, path: &Path) -> Outcome<()> {
        let mut collection = collection.clone();
        // Rounded to a coarser grid first, the reference's own rounding (to
        // the right grid) leaves the values where the wrong quantum put them.
        match self.fault {
            Fault::QuantumNearest => round_declared(&mut collection, Quantum::Nearest),
            Fault::QuantumAbove => round_declared(&mut collection, Quantum::SmallestAbove),
            Fault::RoundsTiesAway => round_declared(&mut collection, Quantum::TiesAway),
            _ => {}
        }
        if let Fault::CarriesAcrossRecords = self.fault {
            carry_across_records(&mut collection);
        }
        if let Fault::AcceptsMissingUnits = self.fault {
            if collection.pointer("/meta/units").is_none() {
                if let Some(meta) = collection.get_mut("meta").and_then(Value::as_object_mut) {
                    meta.insert("units".into(), serde_json::json!({"length": "angstrom"}));
                }
            }
        }
        let outcome = self.inner.write(&collection, path);
        if let Outcome::Done(()) = outcome {
            match self.fault {
                Fault::PrefixSumOffByOne => corrupt_prefix_sum(path),
                Fault::MisalignedBuffer => misalign_first_buffer(path),
                Fault::OmitsUndefinedBoundary => omit_undefined_boundary(path),
                _ => {}
            }
        }
        outcome
    }

    fn read(&mut self, path: &Path) -> Outcome<Value> {
        let outcome = self.inner.read(path);
        if let (Fault::AcceptsDecreasingSteps, Outcome::Refused { clause, .. }) =
            (self.fault, &outcome)
        {
            let steps_rule = clause
                .as_deref()
                .is_some_and(|c| c.starts_with("trajectory.step.increasing"));
            if steps_rule && !repeats_a_step(path) {
                return Outcome::Done(Value::Null);
            }
        }
        outcome.map(|mut c| {
            match self.fault {
                Fault::NoCarryForwardOnRead => drop_carried_blocks(&mut c),
                Fault::U64AsI64 => u64_to_i64(&mut c),
                Fault::ReroundsOnRead => round_declared(&mut c, Quantum::LargestNotAbove),
                Fault::StoredUndefinedVectors => stored_undefined_vectors(path, &mut c),
                _ => {}
            }
            c
        })
    }
}

/// Removes, from every frame after the first, the blocks equal to the previous frame's.
fn drop_carried_blocks(c: &mut Value) {
    let Some(records) = c.get_mut("records").and_then(Value::as_array_mut) else {
        return;
    };
    for record in records {
        let Some(frames) = record
            .pointer_mut("/trajectory/frames")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        let before: Vec<Value> = frames.iter().map(|f| f["blocks"].clone()).collect();
        for (k, frame) in frames.iter_mut().enumerate().skip(1) {
            if let Some(blocks) = frame.get_mut("blocks").and_then(Value::as_object_mut) {
                blocks.retain(|name, block| before[k - 1].get(name) != Some(block));
            }
        }
    }
}

/// Leaves out, from each record's first frame, the blocks equal to the
/// ones the previous record ended with (as if carry-forward went on).
fn carry_across_records(c: &mut Value) {
    let Some(records) = c.get_mut("records").and_then(Value::as_array_mut) else {
        return;
    };
    // What the writer last wrote of each block, never cleared between records.
    let mut ended_with = serde_json::Map::new();
    for record in records {
        let Some(frames) = record
            .pointer_mut("/trajectory/frames")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        // Blocks by name, and the cell under the name `box` (a block name
        // no frame may use).
        let mut resolved = serde_json::Map::new();
        for frame in frames.iter() {
            if let Some(blocks) = frame["blocks"].as_object() {
                resolved.extend(blocks.clone());
            }
            if let Some(cell) = frame.get("box") {
                resolved.insert("box".into(), cell.clone());
            }
        }
        if let Some(first) = frames.first_mut().and_then(Value::as_object_mut) {
            if first.get("box").is_some() && first.get("box") == ended_with.get("box") {
                first.remove("box");
            }
            if let Some(blocks) = first.get_mut("blocks").and_then(Value::as_object_mut) {
                blocks.retain(|name, block| ended_with.get(name) != Some(block));
            }
        }
        ended_with.extend(resolved);
    }
}

/// Whether two frames in a row of the file (by ordinal) state one step.
fn repeats_a_step(path: &Path) -> bool {
    let mut steps = Vec::new();
    let copy = path.with_extension("steps.mrec.lmdb");
    std::fs::copy(path, &copy).expect("copy");
    with_db(&copy, |db, txn| {
        for item in db.iter(txn).expect("iter") {
            let (key, value) = item.expect("entry");
            if key.len() == 9 && key[0] == b'f' && value.starts_with(b"MRF1") {
                steps.push(split_frame(value).0["step"].clone());
            }
        }
    });
    let _ = std::fs::remove_file(&copy);
    steps.windows(2).any(|w| w[0] == w[1])
}

fn u64_to_i64(v: &mut Value) {
    match v {
        Value::Object(map) => {
            if map.get("dtype") == Some(&Value::String("u64".into())) && map.contains_key("values")
            {
                map.insert("dtype".into(), Value::String("i64".into()));
            }
            map.values_mut().for_each(u64_to_i64);
        }
        Value::Array(items) => items.iter_mut().for_each(u64_to_i64),
        _ => {}
    }
}

fn quantum(p: f64, rule: Quantum) -> f64 {
    let below = 2f64.powi(p.log2().floor() as i32);
    match rule {
        _ if below == p => p,
        Quantum::LargestNotAbove | Quantum::TiesAway => below,
        Quantum::Nearest if p - below < 2.0 * below - p => below,
        Quantum::Nearest | Quantum::SmallestAbove => 2.0 * below,
    }
}

fn round_values(column: &mut Value, p: f64, rule: Quantum) {
    // Refusal fixtures hold precisions on other dtypes and out of range:
    // those are the writer's to refuse, untouched here.
    if column.get("dtype").and_then(Value::as_str) != Some("f64") || !(p.is_normal() && p > 0.0) {
        return;
    }
    let q = quantum(p, rule);
    let Some(values) = column.get_mut("values").and_then(Value::as_array_mut) else {
        return;
    };
    for v in values {
        if let Some(x) = v.as_f64().filter(|x| x.abs() < 2f64.powi(52) * q) {
            let steps = match rule {
                Quantum::TiesAway => (x / q).round(),
                _ => (x / q).round_ties_even(),
            };
            *v = Value::from(steps * q);
        }
    }
}

/// Rounds every column that declares a precision (system and index columns
/// by their own `precision`, trajectory columns by sequence_schema's) with
/// the quantum `rule` picks.
fn round_declared(c: &mut Value, rule: Quantum) {
    let own = |column: &mut Value| {
        if let Some(p) = column.get("precision").and_then(Value::as_f64) {
            round_values(column, p, rule);
        }
    };
    if let Some(index) = c.get_mut("index").and_then(Value::as_object_mut) {
        index.values_mut().for_each(own);
    }
    let schema = c.get("sequence_schema").cloned().unwrap_or_default();
    let Some(records) = c.get_mut("records").and_then(Value::as_array_mut) else {
        return;
    };
    for record in records {
        if let Some(blocks) = record
            .pointer_mut("/system/blocks")
            .and_then(Value::as_object_mut)
        {
            for block in blocks.values_mut() {
                if let Some(cols) = block.get_mut("columns").and_then(Value::as_object_mut) {
                    cols.values_mut().for_each(own);
                }
            }
        }
        let Some(frames) = record
            .pointer_mut("/trajectory/frames")
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for frame in frames {
            let Some(blocks) = frame.get_mut("blocks").and_then(Value::as_object_mut) else {
                continue;
            };
            for (name, block) in blocks {
                let Some(cols) = block.get_mut("columns").and_then(Value::as_object_mut) else {
                    continue;
                };
                for (col, column) in cols {
                    let pointer = format!("/blocks/{name}/columns/{col}/precision");
                    if let Some(p) = schema.pointer(&pointer).and_then(Value::as_f64) {
                        round_values(column, p, rule);
                    }
                }
            }
        }
    }
}

/// Puts the `vectors` stored with every undefined cell (system `s:r`,
/// update `f:j`) in place of the identity the reference handed back.
fn stored_undefined_vectors(path: &Path, c: &mut Value) {
    let mut options = EnvOpenOptions::new();
    // SAFETY: valid flags for a read-only environment (golden files are
    // read here too, and must not change).
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) };
    // SAFETY: nothing writes the file while this test reads it.
    let env = unsafe { options.open(path) }.expect("open");
    let txn = env.read_txn().expect("txn");
    let db: Database<Bytes, Bytes> = env
        .open_database(&txn, None)
        .expect("db")
        .expect("unnamed db");
    let stored = |prefix: u8, n: u64| -> Option<Value> {
        let mut key = vec![prefix];
        key.extend_from_slice(&n.to_be_bytes());
        let value = db.get(&txn, &key).ok()??;
        let (header, _) = split_frame(value);
        let cell = header.get("box")?;
        (cell.get("cell_defined") == Some(&Value::Bool(false)))
            .then(|| cell.get("vectors").cloned())
            .flatten()
    };
    let mut ordinal = 0;
    let records = c.get_mut("records").and_then(Value::as_array_mut);
    for (r, record) in records.into_iter().flatten().enumerate() {
        if let (Some(vectors), Some(cell)) =
            (stored(b's', r as u64), record.pointer_mut("/system/box"))
        {
            cell["vectors"] = vectors;
        }
        let frames = record
            .pointer_mut("/trajectory/frames")
            .and_then(Value::as_array_mut);
        for frame in frames.into_iter().flatten() {
            if let (Some(vectors), Some(cell)) = (stored(b'f', ordinal), frame.get_mut("box")) {
                cell["vectors"] = vectors;
            }
            ordinal += 1;
        }
    }
}

fn with_db(path: &Path, f: impl FnOnce(Database<Bytes, Bytes>, &mut heed::RwTxn)) {
    let mut options = EnvOpenOptions::new();
    options.map_size(256 << 20);
    // SAFETY: valid flags for a writable environment.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR) };
    // SAFETY: the test is the only user of this file and opens it once.
    let env = unsafe { options.open(path) }.expect("open");
    let mut txn = env.write_txn().expect("txn");
    let db: Database<Bytes, Bytes> = env
        .open_database(&txn, None)
        .expect("db")
        .expect("unnamed db");
    f(db, &mut txn);
    txn.commit().expect("commit");
    env.prepare_for_closing().wait();
}

/// Splits a frame value into (header JSON, payload).
fn split_frame(value: &[u8]) -> (Value, Vec<u8>) {
    let len = u32::from_le_bytes(value[4..8].try_into().expect("4 bytes")) as usize;
    let header: Value = serde_json::from_slice(&value[8..8 + len]).expect("header");
    let start = (8 + len).div_ceil(8) * 8;
    (header, value[start..].to_vec())
}

fn join_frame(header: &Value, payload: &[u8]) -> Vec<u8> {
    let text = serde_json::to_vec(header).expect("json");
    let mut out = b"MRF1".to_vec();
    out.extend_from_slice(&(text.len() as u32).to_le_bytes());
    out.extend_from_slice(&text);
    out.resize((8 + text.len()).div_ceil(8) * 8, 0);
    out.extend_from_slice(payload);
    out
}

fn corrupt_prefix_sum(path: &Path) {
    with_db(path, |db, txn| {
        let value = db.get(txn, b"index").expect("get").expect("index").to_vec();
        let (header, mut payload) = split_frame(&value);
        let col = &header["blocks"]["records"]["columns"]["first_frame"];
        let rows = col["shape"][0].as_u64().expect("rows") as usize;
        if rows == 0 {
            return;
        }
        let at = col["offset"].as_u64().expect("offset") as usize + (rows - 1) * 8;
        let v = u64::from_le_bytes(payload[at..at + 8].try_into().expect("8 bytes")) + 1;
        payload[at..at + 8].copy_from_slice(&v.to_le_bytes());
        db.put(txn, b"index", &join_frame(&header, &payload))
            .expect("put");
    });
}

fn misalign_first_buffer(path: &Path) {
    with_db(path, |db, txn| {
        let value = db.get(txn, b"index").expect("get").expect("index").to_vec();
        let (mut header, mut payload) = split_frame(&value);
        // Move n_frames' buffer 4 bytes further (payload grows by 8 at the end).
        let col = &mut header["blocks"]["records"]["columns"]["n_frames"];
        let offset = col["offset"].as_u64().expect("offset");
        col["offset"] = Value::from(offset + 4);
        payload.extend_from_slice(&[0; 8]);
        db.put(txn, b"index", &join_frame(&header, &payload))
            .expect("put");
    });
}

fn omit_undefined_boundary(path: &Path) {
    with_db(path, |db, txn| {
        let mut edited = Vec::new();
        for item in db.iter(txn).expect("iter") {
            let (key, value) = item.expect("entry");
            if !value.starts_with(b"MRF1") {
                continue;
            }
            let (mut header, payload) = split_frame(value);
            let Some(cell) = header.get_mut("box").and_then(Value::as_object_mut) else {
                continue;
            };
            if cell.get("cell_defined") == Some(&Value::Bool(false)) {
                cell.remove("boundary");
                edited.push((key.to_vec(), join_frame(&header, &payload)));
            }
        }
        for (key, value) in edited {
            db.put(txn, &key, &value).expect("put");
        }
    });
}

/// Runs the suite against the fault; every failure is a `Fail` that
/// `should_fail` allows, every other trial passes. Returns the failed trials.
fn check(fault: Fault, should_fail: impl Fn(&TrialResult) -> bool) -> Vec<String> {
    let mut imp = Broken {
        inner: Reference::new(),
        fault,
    };
    let results = run_everything(&mut imp, &format!("{fault:?}"));
    let failed: Vec<&TrialResult> = results.iter().filter(|r| !r.verdict.passed()).collect();
    assert!(!failed.is_empty(), "{fault:?} was not caught by any case");
    for r in &results {
        if should_fail(r) {
            continue;
        }
        assert!(
            r.verdict.passed(),
            "{fault:?}: {} should pass but is {:?}: {}",
            r.trial,
            r.verdict,
            r.detail
        );
    }
    for r in &failed {
        assert!(
            should_fail(r),
            "{fault:?}: {} failed outside the rule: {}",
            r.trial,
            r.detail
        );
        assert_eq!(r.verdict, Verdict::Fail, "{}: {}", r.trial, r.detail);
    }
    failed.iter().map(|r| r.trial.clone()).collect()
}

/// At least two trials caught the fault, among them every one of `must`.
fn caught_twice(fault: Fault, failed: &[String], must: &[&str]) {
    assert!(failed.len() >= 2, "{fault:?} failed only {failed:?}");
    for trial in must {
        assert!(
            failed.iter().any(|t| t == trial),
            "{fault:?}: {trial} passed; failed: {failed:?}"
        );
    }
}

/// Trials that judge what the implementation's reader hands back.
fn reads(r: &TrialResult) -> bool {
    match r.kind {
        Kind::RoundTrip => matches!(r.direction, Direction::Read | Direction::Golden),
        Kind::ReadAccept => true,
        Kind::WriteRefusal | Kind::ReadRefusal => false,
    }
}

fn writes(r: &TrialResult) -> bool {
    r.kind == Kind::RoundTrip && r.direction == Direction::Write
}

#[test]
fn dropping_carry_forward_on_read_is_caught() {
    // Only round trips read by the broken reader, and only where a block carries forward.
    check(Fault::NoCarryForwardOnRead, reads);
}

#[test]
fn accepting_a_collection_without_units_is_caught() {
    check(Fault::AcceptsMissingUnits, |r| {
        r.clauses
            .iter()
            .any(|c| c == "collection.meta.units-required")
            && r.kind == Kind::WriteRefusal
    });
}

#[test]
fn u64_returned_as_i64_is_caught() {
    check(Fault::U64AsI64, reads);
}

#[test]
fn an_index_prefix_sum_off_by_one_is_caught() {
    check(Fault::PrefixSumOffByOne, writes);
}

#[test]
fn a_misaligned_buffer_is_caught() {
    check(Fault::MisalignedBuffer, writes);
}

#[test]
fn an_omitted_undefined_cell_boundary_is_caught() {
    // Only the write round trips of the cases with an undefined cell.
    check(Fault::OmitsUndefinedBoundary, |r| {
        writes(r)
            && matches!(
                r.case.as_str(),
                "box-changes-and-undefined"
                    | "box-undefined-origin"
                    | "system-box"
                    | "box-undefined-cell-spelled-twice"
            )
    });
}

/// Issue #43's first hole: a writer that lets a block carry over from the
/// previous record is caught by a case whose record starts with a block
/// equal to the previous record's last (the inspection's first-frame rule,
/// and the content read back).
#[test]
fn a_writer_carrying_a_block_across_records_is_caught() {
    let failed = check(Fault::CarriesAcrossRecords, |r| {
        writes(r)
            && matches!(
                r.case.as_str(),
                "carry-forward-record-boundary"
                    | "records-different-subsets"
                    | "cells-across-records-and-masks"
                    | "time-second-record"
                    | "ff-empty-frame-102-second-record"
                    | "step-meta-nan-fill-json-string-later"
                    | "box-boundary-change-later-record"
                    | "reappear-after-empty-twice"
                    | "zero-row-trailing-two-axes"
                    | "index-nullable-trailing"
                    | "box-negative-zero-vector"
                    | "box-undefined-cell-spelled-twice"
                    | "derived-targets-shape-later"
            )
    });
    caught_twice(
        Fault::CarriesAcrossRecords,
        &failed,
        &[
            "collection::carry-forward-record-boundary::write",
            "collection::records-different-subsets::write",
            "collection::cells-across-records-and-masks::write",
        ],
    );
}

/// Issue #43's second hole: a reader that refuses an equal step but not a
/// decreasing one.
#[test]
fn a_reader_accepting_decreasing_steps_is_caught() {
    let failed = check(Fault::AcceptsDecreasingSteps, |r| {
        matches!(
            r.case.as_str(),
            "read-refuse-step-decreasing" | "read-refuse-step-decreasing-first"
        )
    });
    caught_twice(
        Fault::AcceptsDecreasingSteps,
        &failed,
        &[
            "collection::read-refuse-step-decreasing::read",
            "collection::read-refuse-step-decreasing-first::read",
        ],
    );
}

#[test]
fn a_quantum_nearest_the_precision_is_caught() {
    let failed = check(Fault::QuantumNearest, writes);
    caught_twice(
        Fault::QuantumNearest,
        &failed,
        &[
            "collection::precision-quantum-system::write",
            "collection::precision-quantum-trajectory::write",
        ],
    );
}

#[test]
fn a_quantum_above_the_precision_is_caught() {
    let failed = check(Fault::QuantumAbove, writes);
    caught_twice(
        Fault::QuantumAbove,
        &failed,
        &[
            "collection::precision-quantum-system::write",
            "collection::precision-quantum-trajectory::write",
        ],
    );
}

#[test]
fn rounding_ties_away_from_zero_is_caught() {
    let failed = check(Fault::RoundsTiesAway, writes);
    caught_twice(
        Fault::RoundsTiesAway,
        &failed,
        &[
            "collection::precision-quantum-system::write",
            "collection::precision-quantum-trajectory::write",
        ],
    );
}

#[test]
fn a_reader_that_rounds_again_is_caught() {
    let failed = check(Fault::ReroundsOnRead, reads);
    caught_twice(
        Fault::ReroundsOnRead,
        &failed,
        &[
            "collection::read-precision-off-grid-system::read",
            "collection::read-precision-off-grid-trajectory::read",
        ],
    );
}

#[test]
fn a_reader_handing_back_an_undefined_cells_stored_vectors_is_caught() {
    let failed = check(Fault::StoredUndefinedVectors, reads);
    caught_twice(
        Fault::StoredUndefinedVectors,
        &failed,
        &[
            "collection::read-undefined-cell-vectors-system::read",
            "collection::read-undefined-cell-vectors-trajectory::read",
        ],
    );
}

/// `harness report diff` of the reference's run against a run with one rule
/// broken lists exactly the trials the broken rule fails, as worse, and
/// exits 1 with `--fail-on worse` (0 with `never`, 0 for a run against
/// itself).
#[test]
fn report_diff_lists_exactly_the_trials_a_broken_rule_changes() {
    use harness::report::{Expectations, Report};
    let report = |imp: &mut dyn Implementation, tag: &str| {
        let results = run_everything(imp, tag);
        Report::new(
            imp.describe().clone(),
            Vec::new(),
            results,
            &Expectations::default(),
        )
    };
    let old = report(&mut Reference::new(), "diff-old");
    let new = report(
        &mut Broken {
            inner: Reference::new(),
            fault: Fault::PrefixSumOffByOne,
        },
        "diff-new",
    );
    assert_eq!(
        old.summary.unexpected(),
        0,
        "the reference passes everything"
    );
    let broken: Vec<String> = new
        .results
        .iter()
        .filter(|e| !e.result.verdict.passed())
        .map(|e| e.result.trial.clone())
        .collect();
    assert!(!broken.is_empty());
    let dir = harness::runner::scratch_dir("report-diff");
    std::fs::create_dir_all(&dir).expect("scratch");
    let (old_path, new_path) = (dir.join("old.json"), dir.join("new.json"));
    std::fs::write(&old_path, old.to_json()).expect("old.json");
    std::fs::write(&new_path, new.to_json()).expect("new.json");
    let diff = |a: &Path, b: &Path, fail_on: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["report", "diff"])
            .args([a, b])
            .args(["--fail-on", fail_on, "--json"])
            .arg(dir.join("diff.json"))
            .output()
            .expect("harness runs")
    };
    let out = diff(&old_path, &new_path, "worse");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let md = String::from_utf8_lossy(&out.stdout);
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("diff.json")).expect("diff.json"))
            .expect("JSON");
    // One implementation on each side: one diff.
    assert_eq!(json["diffs"].as_array().map(Vec::len), Some(1), "{json}");
    let json = &json["diffs"][0];
    let mut changed: Vec<&str> = json["changed"]
        .as_array()
        .expect("changed")
        .iter()
        .map(|c| {
            assert_eq!(c["direction"], "worse", "{c}");
            c["trial"].as_str().expect("trial")
        })
        .collect();
    // The diff lists trials by name; the run, in the suite's order.
    changed.sort_unstable();
    let mut sorted = broken.clone();
    sorted.sort_unstable();
    assert_eq!(changed, sorted, "{md}");
    for trial in &broken {
        assert!(md.contains(&format!("| `{trial}` | pass | fail |")), "{md}");
    }
    assert_eq!(
        json["worse"].as_u64(),
        Some(
            broken.len() as u64
                + json["clauses"]
                    .as_array()
                    .expect("clauses")
                    .iter()
                    .filter(|c| c["direction"] == "worse")
                    .count() as u64
        )
    );
    assert!(json["added"].as_array().expect("added").is_empty());
    assert!(json["removed"].as_array().expect("removed").is_empty());
    assert_eq!(diff(&old_path, &new_path, "never").status.code(), Some(0));
    let same = diff(&old_path, &old_path, "any");
    assert_eq!(same.status.code(), Some(0), "{same:?}");
    assert!(String::from_utf8_lossy(&same.stdout)
        .contains("No trial, clause or refusal message changed."));
    let _ = std::fs::remove_dir_all(&dir);
}
