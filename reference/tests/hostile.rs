//! Hostile values: each refused quickly, with a typed error naming its
//! clause, without a panic and without an allocation sized by what the value
//! claims rather than by what it holds.
//!
//! Decode-level cases go through `molrec::frame_bytes::decode` (and
//! `to_column` on every column when a decode succeeds); file-level cases
//! edit a committed file through raw heed writes and go through
//! `Reader::open` + `read_collection`.
//!
//! Every case is timed (printed on stderr, and asserted generously: < 2 s)
//! and the largest single allocation made while it ran is measured by a
//! counting global allocator (asserted to stay within a small multiple of
//! the input's own size).

mod common;

use common::{f64col, frame_value, report, scratch_file};
use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use molrec::frame_bytes::{decode, MAX_HEADER_LEN};
use molrec::lmdb::{frame_key, record_key, system_key, write_collection, Reader, WriterOptions};
use molrec::model_json::collection_from_json;
use molrec::{Clause, Error};
use serde_json::{json, Value};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// A global allocator that records, per thread, the largest single request
// and the bytes requested in total while tracking is on.
// ---------------------------------------------------------------------------

struct Counting;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
    static TOTAL: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = TRACKING.try_with(|t| {
        if t.get() {
            let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
            let _ = TOTAL.try_with(|c| c.set(c.get().saturating_add(size)));
        }
    });
}

// SAFETY: every call is forwarded unchanged to the system allocator; the
// bookkeeping touches only const-initialized thread-locals (no allocation).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` was allocated by `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// What one measured call cost.
struct Cost {
    elapsed: Duration,
    largest: usize,
    total: usize,
}

/// Runs `f` with allocation tracking on, timing it.
fn measure<T>(f: impl FnOnce() -> T) -> (T, Cost) {
    LARGEST.with(|l| l.set(0));
    TOTAL.with(|c| c.set(0));
    TRACKING.with(|t| t.set(true));
    let start = Instant::now();
    let out = f();
    let elapsed = start.elapsed();
    TRACKING.with(|t| t.set(false));
    let cost = Cost {
        elapsed,
        largest: LARGEST.with(Cell::get),
        total: TOTAL.with(Cell::get),
    };
    (out, cost)
}

/// Generous bounds: a hostile value is refused in well under 100 ms in a
/// release build; 2 s leaves room for a loaded CI machine and debug builds.
const TIME_LIMIT: Duration = Duration::from_secs(2);

/// The largest single allocation allowed for an input of `len` bytes: a
/// small multiple of the input (the header is parsed into owned names,
/// shapes and documents) plus a fixed allowance (error messages, maps).
fn allocation_bound(len: usize) -> usize {
    len.saturating_mul(4) + (256 << 10)
}

// ---------------------------------------------------------------------------
// Frame values built by hand
// ---------------------------------------------------------------------------

fn frame_json(header: &Value, payload: &[u8]) -> Vec<u8> {
    frame_value(&serde_json::to_vec(header).unwrap(), payload)
}

/// One block `atoms` whose single column is `column`, with block count `count`.
fn one_column(count: Value, column: Value) -> Value {
    json!({"blocks": {"atoms": {"count": count, "structural_shape": null,
        "columns": {"x": column}}}, "meta": {}})
}

/// Decodes `value` (and copies every column out when it decodes), checks the
/// time and the allocations, and returns the clause of the refusal.
fn decode_refusal(name: &str, value: &[u8]) -> Clause {
    let (result, cost) = measure(|| {
        let frame = decode(value)?;
        for block in frame.blocks.values() {
            for column in block.columns.values() {
                column.to_column()?;
                let _ = column.f64_view();
            }
        }
        Ok::<_, Error>(())
    });
    report(&format!(
        "hostile decode {name:<34} {:>9.3} ms  largest alloc {:>9} B  total {:>9} B  value {:>9} B",
        cost.elapsed.as_secs_f64() * 1e3,
        cost.largest,
        cost.total,
        value.len()
    ));
    assert!(
        cost.elapsed < TIME_LIMIT,
        "{name}: took {:?} (limit {TIME_LIMIT:?})",
        cost.elapsed
    );
    assert!(
        cost.largest <= allocation_bound(value.len()),
        "{name}: a single allocation of {} bytes for a value of {} bytes",
        cost.largest,
        value.len()
    );
    match result {
        Ok(()) => panic!("{name}: a hostile value was accepted"),
        Err(e) => e
            .clause()
            .unwrap_or_else(|| panic!("{name}: refusal without a clause: {e}")),
    }
}

fn expect(name: &str, value: &[u8], clause: Clause) {
    let got = decode_refusal(name, value);
    assert_eq!(got, clause, "{name}: refused with {}", got.id());
}

const TWO_40: u64 = 1 << 40;

#[test]
fn header_length_all_ones_is_refused() {
    let mut v = frame_json(&json!({"blocks": {}, "meta": {}}), &[0; 64]);
    v.resize(100, 0);
    v[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    expect("header-len-0xffffffff", &v, Clause::FrameHeaderBounds);
}

#[test]
fn header_length_past_the_value_is_refused() {
    let base = frame_json(&json!({"blocks": {}, "meta": {}}), &[]);
    for (name, len) in [
        ("header-len-max", MAX_HEADER_LEN),
        ("header-len-max+1", MAX_HEADER_LEN + 1),
        ("header-len-value+1", base.len() as u32 - 7),
        ("header-len-1MiB", 1 << 20),
    ] {
        let mut v = base.clone();
        v[4..8].copy_from_slice(&len.to_le_bytes());
        expect(name, &v, Clause::FrameHeaderBounds);
    }
    // The header fits but its padding does not.
    let header = br#"{"blocks":{},"meta":{}}"#; // 23 bytes: ends at 31, padding to 32
    let mut v = b"MRF1".to_vec();
    v.extend_from_slice(&(header.len() as u32).to_le_bytes());
    v.extend_from_slice(header);
    assert_eq!(v.len(), 31);
    expect("header-padding-past-value", &v, Clause::FrameHeaderBounds);
}

#[test]
fn shape_products_that_overflow_are_refused() {
    for (name, dtype, shape) in [
        (
            "shape-2^32x2^32x2-f64",
            "f64",
            json!([1u64 << 32, 1u64 << 32, 2]),
        ),
        ("shape-u64max-x2-u8", "u8", json!([u64::MAX, 2])),
        (
            "shape-2^32x2^32-string",
            "string",
            json!([1u64 << 32, 1u64 << 32]),
        ),
    ] {
        let count = shape[0].clone();
        let column = if dtype == "string" {
            json!({"dtype": dtype, "shape": shape, "values": ["a"]})
        } else {
            json!({"dtype": dtype, "shape": shape, "offset": 0})
        };
        expect(
            name,
            &frame_json(&one_column(count, column), &[0; 64]),
            Clause::FrameSizeOverflow,
        );
    }
    // Elements fit in u64, bytes do not: 2^61 f64 = 2^64 bytes.
    expect(
        "bytes-2^61-f64",
        &frame_json(
            &one_column(
                json!(1u64 << 61),
                json!({"dtype": "f64", "shape": [1u64 << 61], "offset": 0}),
            ),
            &[0; 64],
        ),
        Clause::FrameSizeOverflow,
    );
    expect(
        "bytes-2^60-c128",
        &frame_json(
            &one_column(
                json!(1u64 << 60),
                json!({"dtype": "c128", "shape": [1u64 << 60], "offset": 0}),
            ),
            &[0; 64],
        ),
        Clause::FrameSizeOverflow,
    );
}

#[test]
fn a_shape_of_2_40_rows_in_a_100_byte_value_is_refused() {
    for dtype in ["f64", "u8", "bool", "c64", "i16"] {
        let mut v = frame_json(
            &one_column(
                json!(TWO_40),
                json!({"dtype": dtype, "shape": [TWO_40], "offset": 0}),
            ),
            &[],
        );
        v.resize(v.len().max(100), 0);
        expect(&format!("rows-2^40-{dtype}"), &v, Clause::FrameBufferBounds);
    }
    // A zero-width trailing axis: no buffer at all, but a mask of 2^40 rows.
    let v = frame_json(
        &one_column(
            json!(TWO_40),
            json!({"dtype": "f64", "shape": [TWO_40, 0], "offset": 0, "validity": 0}),
        ),
        &[1; 16],
    );
    expect("mask-of-2^40-rows", &v, Clause::FrameBufferBounds);
    // u64::MAX rows of one byte: the size fits, the bounds do not.
    let v = frame_json(
        &one_column(
            json!(u64::MAX),
            json!({"dtype": "u8", "shape": [u64::MAX], "offset": 0}),
        ),
        &[0; 32],
    );
    expect("rows-u64max-u8", &v, Clause::FrameBufferBounds);
}

#[test]
fn a_string_column_whose_values_do_not_match_its_shape_is_refused() {
    for (name, shape, values) in [
        ("strings-shorter", json!([3]), json!(["a"])),
        ("strings-longer", json!([3]), json!(["a", "b", "c", "d"])),
        ("strings-none-for-3", json!([3]), json!([])),
        ("strings-2x2-given-3", json!([2, 2]), json!(["a", "b", "c"])),
        ("strings-2^40-given-2", json!([TWO_40]), json!(["a", "b"])),
    ] {
        let count = shape[0].clone();
        let v = frame_json(
            &one_column(
                count,
                json!({"dtype": "string", "shape": shape, "values": values}),
            ),
            &[],
        );
        expect(name, &v, Clause::FrameStringValues);
    }
}

/// `depth` nested arrays around a zero.
fn nested_arrays(depth: usize) -> String {
    format!("{}0{}", "[".repeat(depth), "]".repeat(depth))
}

/// `depth` nested objects `{"a":{"a":...}}`.
fn nested_objects(depth: usize) -> String {
    format!("{}0{}", r#"{"a":"#.repeat(depth), "}".repeat(depth))
}

#[test]
fn a_deeply_nested_header_is_refused_without_overflowing_the_stack() {
    const DEPTH: usize = 100_000;
    let arrays = nested_arrays(DEPTH);
    let objects = nested_objects(DEPTH);
    let headers = [
        (
            "nested-meta-arrays",
            format!(r#"{{"blocks":{{}},"meta":{{"k":{arrays}}}}}"#),
        ),
        (
            "nested-meta-objects",
            format!(r#"{{"blocks":{{}},"meta":{objects}}}"#),
        ),
        (
            "nested-step",
            format!(r#"{{"blocks":{{}},"step":{arrays}}}"#),
        ),
        (
            "nested-box",
            format!(r#"{{"blocks":{{}},"box":{objects}}}"#),
        ),
        (
            "nested-meta-types",
            format!(r#"{{"blocks":{{}},"meta_types":{objects}}}"#),
        ),
        ("nested-blocks", format!(r#"{{"blocks":{objects}}}"#)),
        (
            "nested-attributes",
            format!(
                r#"{{"blocks":{{"a":{{"count":0,"columns":{{}},"attributes":{{"k":{arrays}}}}}}}}}"#
            ),
        ),
        ("nested-header-itself", arrays.clone()),
    ];
    for (name, header) in headers {
        let v = frame_value(header.as_bytes(), &[]);
        expect(name, &v, Clause::FrameHeaderJson);
    }
}

/// Unknown keys are ignored (forward compatibility), and serde_json skips an
/// ignored value without recursion: a deep value there is accepted, in
/// bounded time and memory, and never reaches the stack limit.
#[test]
fn a_deeply_nested_ignored_value_is_skipped_in_bounded_time() {
    let arrays = nested_arrays(1_000_000);
    for (name, header) in [
        (
            "nested-unknown-key",
            format!(r#"{{"blocks":{{}},"zzz":{arrays}}}"#),
        ),
        (
            "nested-column-unknown-key",
            format!(
                r#"{{"blocks":{{"a":{{"count":0,"columns":{{"x":{{"dtype":"f64","shape":[0],"offset":0,"q":{arrays}}}}}}}}}}}"#
            ),
        ),
    ] {
        let value = frame_value(header.as_bytes(), &[]);
        let (result, cost) = measure(|| decode(&value).map(|f| f.blocks.len()));
        report(&format!(
            "hostile decode {name:<34} {:>9.3} ms  largest alloc {:>9} B  total {:>9} B  value {:>9} B  (accepted: {})",
            cost.elapsed.as_secs_f64() * 1e3,
            cost.largest,
            cost.total,
            value.len(),
            result.is_ok()
        ));
        assert!(cost.elapsed < TIME_LIMIT, "{name}: took {:?}", cost.elapsed);
        assert!(
            cost.largest <= allocation_bound(value.len()),
            "{name}: a single allocation of {} bytes",
            cost.largest
        );
        if let Err(e) = result {
            assert_eq!(e.clause(), Some(Clause::FrameHeaderJson), "{name}: {e}");
        }
    }
}

#[test]
fn offsets_near_u64_max_are_refused() {
    let col = |offset: Value, validity: Option<Value>| {
        let mut c = json!({"dtype": "f64", "shape": [2], "offset": offset});
        if let Some(v) = validity {
            c["validity"] = v;
        }
        frame_json(&one_column(json!(2), c), &[0; 32])
    };
    expect(
        "offset-u64max",
        &col(json!(u64::MAX), None),
        Clause::FrameOffsetAligned,
    );
    expect(
        "offset-u64max-aligned",
        &col(json!(u64::MAX - 7), None),
        Clause::FrameBufferBounds,
    );
    expect(
        "offset-2^63",
        &col(json!(1u64 << 63), None),
        Clause::FrameBufferBounds,
    );
    expect(
        "validity-u64max-aligned",
        &col(json!(0), Some(json!(u64::MAX - 7))),
        Clause::FrameBufferBounds,
    );
    expect(
        "validity-u64max",
        &col(json!(0), Some(json!(u64::MAX))),
        Clause::FrameOffsetAligned,
    );
    // Beyond u64: not a valid offset at all.
    let text = r#"{"blocks":{"atoms":{"count":2,"columns":{"x":{"dtype":"f64","shape":[2],"offset":18446744073709551616}}}},"meta":{}}"#;
    expect(
        "offset-2^64",
        &frame_value(text.as_bytes(), &[0; 32]),
        Clause::FrameHeaderJson,
    );
    let text = r#"{"blocks":{"atoms":{"count":2,"columns":{"x":{"dtype":"f64","shape":[2],"offset":-8}}}},"meta":{}}"#;
    expect(
        "offset-negative",
        &frame_value(text.as_bytes(), &[0; 32]),
        Clause::FrameHeaderJson,
    );
}

#[test]
fn a_header_of_max_header_len_is_parsed_within_bounds() {
    // A real header just under the limit, mostly one long unknown string:
    // refused for the missing `blocks`, after one linear parse.
    let filler = "x".repeat(MAX_HEADER_LEN as usize - 64);
    let header = format!(r#"{{"zzz":"{filler}"}}"#);
    assert!(header.len() <= MAX_HEADER_LEN as usize);
    let v = frame_value(header.as_bytes(), &[]);
    expect("header-near-max-len", &v, Clause::FrameHeaderJson);
}

// ---------------------------------------------------------------------------
// File level: committed files edited through heed
// ---------------------------------------------------------------------------

/// Records with a 3-atom system and three trajectory frames each.
fn water_collection(records: usize) -> Value {
    let recs: Vec<Value> = (0..records)
        .map(|r| {
            let s = r as f64 * 0.01;
            let atoms = |x: &[f64]| json!({"count": 3, "columns": {"x": f64col(x)}});
            json!({
                "meta": {"n": r},
                "system": {"blocks": {"atoms": {"count": 3, "columns": {
                    "element": {"dtype": "string", "shape": [3], "values": ["O", "H", "H"]}}},
                    "bonds": {"count": 2, "columns": {
                        "atomi": {"dtype": "u64", "shape": [2], "values": [0, 0]},
                        "atomj": {"dtype": "u64", "shape": [2], "values": [1, 2]}}}}},
                "trajectory": {"frames": [
                    {"step": 0, "meta": {"pe": -76.0 - s}, "blocks": {"atoms": atoms(&[0.0, 0.96 + s, -0.24])}},
                    {"step": 1, "meta": {"pe": -76.1}, "blocks": {"atoms": atoms(&[0.0, 0.96 + s, -0.24])}},
                    {"step": 2, "meta": {"pe": -76.2}, "blocks": {"atoms": atoms(&[0.01, 0.95, -0.25])}}
                ]}
            })
        })
        .collect();
    json!({"meta": {"units": {"length": "angstrom", "energy": "kcal/mol"}}, "records": recs})
}

fn base_file(name: &str) -> PathBuf {
    let path = scratch_file("hostile", name);
    write_collection(
        &path,
        collection_from_json(&water_collection(3)).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();
    path
}

type Db = Database<Bytes, Bytes>;

/// Applies raw edits to a committed file through heed.
fn edit(path: &Path, f: impl FnOnce(Db, &mut heed::RwTxn)) {
    let mut options = EnvOpenOptions::new();
    options.map_size(256 << 20);
    // SAFETY: valid flags; the test holds the only handle on this file.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR) };
    // SAFETY: no other Env of this path is open in the process now.
    let env = unsafe { options.open(path) }.unwrap();
    let mut txn = env.write_txn().unwrap();
    let db: Db = env.open_database(&txn, None).unwrap().unwrap();
    f(db, &mut txn);
    txn.commit().unwrap();
    env.prepare_for_closing().wait();
}

fn get_meta(db: Db, txn: &heed::RwTxn) -> Value {
    serde_json::from_slice(db.get(txn, b"meta").unwrap().unwrap()).unwrap()
}

fn put_meta(db: Db, txn: &mut heed::RwTxn, meta: &Value) {
    db.put(txn, b"meta", &serde_json::to_vec(meta).unwrap())
        .unwrap();
}

/// Opens and reads the whole file; checks time and allocations; returns the error.
fn file_refusal(name: &str, path: &Path) -> Error {
    let size = std::fs::metadata(path).unwrap().len() as usize;
    let (result, cost) = measure(|| Reader::open(path).and_then(|r| r.read_collection()));
    report(&format!(
        "hostile file   {name:<34} {:>9.3} ms  largest alloc {:>9} B  total {:>9} B  file  {:>9} B",
        cost.elapsed.as_secs_f64() * 1e3,
        cost.largest,
        cost.total,
        size
    ));
    assert!(
        cost.elapsed < TIME_LIMIT,
        "{name}: took {:?} (limit {TIME_LIMIT:?})",
        cost.elapsed
    );
    assert!(
        cost.largest <= allocation_bound(size),
        "{name}: a single allocation of {} bytes for a file of {size} bytes",
        cost.largest
    );
    // The file is no longer needed (the reader, if any, is dropped).
    let _ = std::fs::remove_file(path);
    let mut lock = path.as_os_str().to_owned();
    lock.push("-lock");
    let _ = std::fs::remove_file(lock);
    match result {
        Ok(_) => panic!("{name}: a hostile file was read"),
        Err(e) => e,
    }
}

fn expect_file(name: &str, path: &Path, clause: Clause) {
    let e = file_refusal(name, path);
    assert_eq!(e.clause(), Some(clause), "{name}: refused with {e}");
}

/// The index frame with the binding's four columns given as u64 / bool rows,
/// `count` rows declared (buffers hold what the slices hold).
fn index_value(count: u64, first: &[u64], n: &[u64], atoms: &[u64], traj: &[bool]) -> Vec<u8> {
    let mut payload = Vec::new();
    let mut column = |dtype: &str, bytes: Vec<u8>| {
        let offset = payload.len();
        payload.extend_from_slice(&bytes);
        payload.resize(payload.len().next_multiple_of(8), 0);
        json!({"dtype": dtype, "shape": [count], "offset": offset})
    };
    let u64s = |v: &[u64]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let first_c = column("u64", u64s(first));
    let n_c = column("u64", u64s(n));
    let atoms_c = column("u64", u64s(atoms));
    let traj_c = column("bool", traj.iter().map(|&b| b as u8).collect());
    let header = json!({"blocks": {"records": {"count": count, "structural_shape": null, "columns": {
        "first_frame": first_c, "n_frames": n_c, "n_atoms": atoms_c, "has_trajectory": traj_c}}},
        "meta": {}});
    frame_json(&header, &payload)
}

#[test]
fn huge_counts_in_meta_are_refused() {
    for (name, key, clause) in [
        ("meta-n-records-u64max", "n_records", Clause::IndexCount),
        ("meta-n-frames-u64max", "n_frames", Clause::IndexTotal),
    ] {
        let path = base_file(name);
        edit(&path, |db, txn| {
            let mut meta = get_meta(db, txn);
            meta[key] = json!(u64::MAX);
            put_meta(db, txn, &meta);
        });
        expect_file(name, &path, clause);
    }
    // Both at once, with an index that claims u64::MAX rows too.
    let path = base_file("meta-and-index-u64max");
    edit(&path, |db, txn| {
        let mut meta = get_meta(db, txn);
        meta["n_records"] = json!(u64::MAX);
        meta["n_frames"] = json!(u64::MAX);
        put_meta(db, txn, &meta);
        let v = index_value(u64::MAX, &[0, 3, 6], &[3, 3, 3], &[3, 3, 3], &[true; 3]);
        db.put(txn, b"index", &v).unwrap();
    });
    // u64::MAX rows of 8 bytes: the size itself overflows.
    expect_file("meta-and-index-u64max", &path, Clause::FrameSizeOverflow);
}

#[test]
fn an_index_claiming_more_rows_than_its_buffers_hold_is_refused() {
    for (name, count) in [("index-2^40-rows", TWO_40), ("index-5-rows-for-3", 5)] {
        let path = base_file(name);
        edit(&path, |db, txn| {
            let mut meta = get_meta(db, txn);
            meta["n_records"] = json!(count);
            put_meta(db, txn, &meta);
            let v = index_value(count, &[0, 3, 6], &[3, 3, 3], &[3, 3, 3], &[true; 3]);
            db.put(txn, b"index", &v).unwrap();
        });
        expect_file(name, &path, Clause::FrameBufferBounds);
    }
}

#[test]
fn a_frame_range_needing_more_frames_than_the_file_has_is_refused() {
    // Record 1 claims 2^40 frames; the prefix sums and meta agree with it.
    let path = base_file("frames-2^40");
    edit(&path, |db, txn| {
        let mut meta = get_meta(db, txn);
        meta["n_frames"] = json!(3 + TWO_40 + 3);
        put_meta(db, txn, &meta);
        let v = index_value(
            3,
            &[0, 3, 3 + TWO_40],
            &[3, TWO_40, 3],
            &[3, 3, 3],
            &[true; 3],
        );
        db.put(txn, b"index", &v).unwrap();
    });
    expect_file("frames-2^40", &path, Clause::FrameMissing);

    // Frame counts whose sum overflows u64.
    let path = base_file("frames-overflow");
    edit(&path, |db, txn| {
        let v = index_value(
            3,
            &[0, 3, 3 + (u64::MAX - 4)],
            &[3, u64::MAX - 4, 3],
            &[3, 3, 3],
            &[true; 3],
        );
        db.put(txn, b"index", &v).unwrap();
    });
    expect_file("frames-overflow", &path, Clause::IndexTotal);

    // The last record's range ends at u64::MAX: its keys are far past the file.
    let path = base_file("frames-to-u64max");
    edit(&path, |db, txn| {
        let mut meta = get_meta(db, txn);
        meta["n_frames"] = json!(u64::MAX);
        put_meta(db, txn, &meta);
        let v = index_value(3, &[0, 3, 6], &[3, 3, u64::MAX - 6], &[3, 3, 3], &[true; 3]);
        db.put(txn, b"index", &v).unwrap();
    });
    expect_file("frames-to-u64max", &path, Clause::FrameMissing);
}

#[test]
fn deeply_nested_json_values_in_the_file_are_refused() {
    let deep = nested_arrays(100_000);
    let path = base_file("meta-nested");
    edit(&path, |db, txn| {
        db.put(txn, b"meta", deep.as_bytes()).unwrap();
    });
    expect_file("meta-nested", &path, Clause::MetaWellFormed);

    let path = base_file("meta-nested-in-collection");
    let objects = nested_objects(100_000);
    edit(&path, |db, txn| {
        let meta = String::from_utf8(db.get(txn, b"meta").unwrap().unwrap().to_vec()).unwrap();
        let meta = meta.replacen('{', &format!(r#"{{"zzz":{objects},"#), 1);
        db.put(txn, b"meta", meta.as_bytes()).unwrap();
    });
    expect_file("meta-nested-in-collection", &path, Clause::MetaWellFormed);

    let path = base_file("record-meta-nested");
    edit(&path, |db, txn| {
        db.put(txn, &record_key(1), format!(r#"{{"k":{deep}}}"#).as_bytes())
            .unwrap();
    });
    expect_file("record-meta-nested", &path, Clause::RecordMetaValue);

    let path = base_file("system-header-nested");
    edit(&path, |db, txn| {
        let header = format!(r#"{{"blocks":{{}},"meta":{{"k":{deep}}},"meta_types":{{}}}}"#);
        db.put(txn, &system_key(2), &frame_value(header.as_bytes(), &[]))
            .unwrap();
    });
    expect_file("system-header-nested", &path, Clause::FrameHeaderJson);
}

#[test]
fn hostile_frame_values_in_a_file_are_refused_with_their_clause() {
    let cases: Vec<(&str, Vec<u8>, Clause)> = vec![
        (
            "file-header-len-0xffffffff",
            {
                let mut v = frame_json(&json!({"blocks": {}, "meta": {}, "step": 0}), &[0; 64]);
                v[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
                v
            },
            Clause::FrameHeaderBounds,
        ),
        (
            "file-rows-2^40",
            frame_json(
                &json!({"blocks": {"atoms": {"count": TWO_40, "columns": {
                    "x": {"dtype": "f64", "shape": [TWO_40], "offset": 0}}}},
                    "meta": {"pe": -1.0}, "step": 0}),
                &[0; 24],
            ),
            Clause::FrameBufferBounds,
        ),
        (
            "file-offset-u64max-aligned",
            frame_json(
                &json!({"blocks": {"atoms": {"count": 3, "columns": {
                    "x": {"dtype": "f64", "shape": [3], "offset": u64::MAX - 7}}}},
                    "meta": {"pe": -1.0}, "step": 0}),
                &[0; 24],
            ),
            Clause::FrameBufferBounds,
        ),
        (
            "file-shape-overflow",
            frame_json(
                &json!({"blocks": {"atoms": {"count": 1u64 << 32, "columns": {
                    "x": {"dtype": "f64", "shape": [1u64 << 32, 1u64 << 32, 2], "offset": 0}}}},
                    "meta": {"pe": -1.0}, "step": 0}),
                &[0; 24],
            ),
            Clause::FrameSizeOverflow,
        ),
        (
            "file-strings-short",
            frame_json(
                &json!({"blocks": {"atoms": {"count": 3, "columns": {
                    "element": {"dtype": "string", "shape": [3], "values": ["O"]}}}},
                    "meta": {}, "meta_types": {}}),
                &[],
            ),
            Clause::FrameStringValues,
        ),
    ];
    for (name, value, clause) in cases {
        let path = base_file(name);
        let key = if name == "file-strings-short" {
            system_key(1)
        } else {
            frame_key(4)
        };
        edit(&path, |db, txn| db.put(txn, &key, &value).unwrap());
        let e = file_refusal(name, &path);
        assert_eq!(e.clause(), Some(clause), "{name}: refused with {e}");
        // The refusal says where: the record and the frame or the system.
        let Error::Refused { at, .. } = &e else {
            panic!("{name}: {e}")
        };
        assert!(at.starts_with("records[1]"), "{name}: refused at {at:?}");
    }
}

// ---------------------------------------------------------------------------
// The collection's own index columns: a reader hands back only what a
// writer accepts (found by tests/mutation.rs: the reader accepted them, the
// writer then refused what it had read).
// ---------------------------------------------------------------------------

/// A committed file whose index frame gets `edit` applied to its `records` block.
fn file_with_index_edit(name: &str, edit_block: impl FnOnce(&mut molrec::model::Block)) -> PathBuf {
    use molrec::frame_bytes::encode;
    let path = base_file(name);
    edit(&path, |db, txn| {
        let value = db.get(txn, b"index").unwrap().unwrap().to_vec();
        let frame = decode(&value).unwrap();
        let mut blocks = frame.to_blocks().unwrap();
        edit_block(blocks.get_mut("records").unwrap());
        let mut out = Vec::new();
        encode(&blocks, &frame.info, true, &mut out);
        db.put(txn, b"index", &out).unwrap();
    });
    path
}

fn own_column(
    name: &str,
    data: molrec::model::ColumnData,
    precision: Option<f64>,
) -> impl FnOnce(&mut molrec::model::Block) + '_ {
    move |block| {
        let mut column = molrec::model::Column::new(vec![block.count], data);
        column.precision = precision;
        block.columns.insert(name.to_string(), column);
    }
}

#[test]
fn reader_refuses_an_own_index_column_at_a_non_canonical_dtype() {
    use molrec::model::ColumnData;
    // DIGEST §5: `x` is f64 and `id` u64 wherever they appear; a reader must refuse other widths.
    for (name, col, data) in [
        ("index-own-x-u64", "x", ColumnData::U64(vec![1, 2, 3])),
        (
            "index-own-id-string",
            "id",
            ColumnData::String(vec!["a".into(), "b".into(), "c".into()]),
        ),
    ] {
        let path = file_with_index_edit(name, own_column(col, data, None));
        let e = match Reader::open(&path).and_then(|r| r.read_collection()) {
            Ok(c) => panic!(
                "{name}: read, with own index columns {:?}; the writer refuses them \
                 ([column.dtype.canonical])",
                c.index.keys().collect::<Vec<_>>()
            ),
            Err(e) => e,
        };
        assert_eq!(e.clause(), Some(Clause::DtypeCanonical), "{name}: {e}");
    }
}

#[test]
fn reader_refuses_an_own_index_column_named_validity() {
    use molrec::model::ColumnData;
    // DIGEST §6: the column name `_validity` is reserved.
    let path = file_with_index_edit(
        "index-own-validity",
        own_column("_validity", ColumnData::U64(vec![7, 7, 7]), None),
    );
    match Reader::open(&path).and_then(|r| r.read_collection()) {
        Ok(c) => panic!(
            "read, with own index columns {:?}; the writer refuses `_validity` \
             ([column.reserved-names])",
            c.index.keys().collect::<Vec<_>>()
        ),
        Err(e) => assert_eq!(e.clause(), Some(Clause::ColumnReservedName), "{e}"),
    }
}

#[test]
fn reader_refuses_precision_on_a_non_f64_index_column() {
    use molrec::model::ColumnData;
    // DIGEST §6: a declared precision is for f64 columns only.
    let path = file_with_index_edit(
        "index-own-string-precision",
        own_column(
            "code",
            ColumnData::String(vec!["a".into(), "b".into(), "c".into()]),
            Some(0.001),
        ),
    );
    match Reader::open(&path).and_then(|r| r.read_collection()) {
        Ok(c) => panic!(
            "read, with a string index column of precision {:?}; the writer refuses it \
             ([column.precision.f64-only])",
            c.index.get("code").map(|c| c.precision)
        ),
        Err(e) => assert_eq!(e.clause(), Some(Clause::PrecisionF64Only), "{e}"),
    }
}
