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
        self.inner.read(path).map(|mut c| {
            match self.fault {
                Fault::NoCarryForwardOnRead => drop_carried_blocks(&mut c),
                Fault::U64AsI64 => u64_to_i64(&mut c),
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

fn check(fault: Fault, should_fail: impl Fn(&TrialResult) -> bool) {
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
                "box-changes-and-undefined" | "box-undefined-origin"
            )
    });
}
