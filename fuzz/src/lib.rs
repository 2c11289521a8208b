//! The fuzz targets' bodies, one function each ([`frame_decode`],
//! [`open_and_read`], [`write_read`], [`inspect_file`]), and what they share:
//! the split of an input into LMDB entries and the small LMDB file written
//! from them.
//!
//! The targets in `fuzz_targets/` only hand libFuzzer's input to these
//! functions, so `harness/tests/fuzz_replay.rs` runs the same bodies over the
//! seeds and the regressions without libFuzzer (it includes this file by
//! path: nothing here may name this crate).

use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use molrec::frame_bytes::{decode, decode_update, BlocksMemo, FrameRef, Update};
use molrec::lmdb::{write_collection, Reader, RecordTxn, WriterOptions};
use molrec::model_json::{collection_from_json, collection_from_str, collection_to_json};
use molrec::Error;
use std::path::{Path, PathBuf};

/// Bytes -> `frame_bytes::decode` -> `to_column` on every column, the
/// views, `to_blocks`; then the same bytes through `decode_update` twice
/// (the repeated-blocks path), which must agree with `decode`.
pub fn frame_decode(data: &[u8]) {
    let Ok(frame) = decode(data) else {
        return;
    };
    for block in frame.blocks.values() {
        for column in block.columns.values() {
            let _ = column.to_column();
            let _ = column.f64_view();
            let _ = column.u64_view();
        }
        let _ = block.to_block();
    }
    let _ = frame.to_blocks();

    let mut memo = BlocksMemo::default();
    let Ok(Update::Full {
        frame: first,
        payload,
    }) = decode_update(data, &mut memo)
    else {
        panic!("decode accepted what decode_update refuses");
    };
    memo.recycle(first.info.meta.clone());
    let again = match decode_update(data, &mut memo) {
        Ok(Update::Full { frame, .. }) => frame,
        Ok(Update::SameBlocks {
            payload: same,
            info,
        }) => {
            let mut blocks = first.blocks.clone();
            for block in blocks.values_mut() {
                block.rebase(payload, same).expect("same payload");
            }
            FrameRef { blocks, info }
        }
        Err(e) => panic!("decode_update refused a value it accepted: {e}"),
    };
    assert_eq!(format!("{again:?}"), format!("{frame:?}"));
}

/// Bytes -> a small LMDB file of keys and values ([`entries`]) ->
/// `Reader::open` -> `read_collection`, the view path, and the two record
/// paths compared: `record` (the column-wise resolver, the rules checked as
/// it reads) and `record_reference` (the model, then `prepare_record`) must
/// return the same record or refuse with the same clause at the same place.
/// LMDB's own page structure is LMDB's (see SECURITY.md): only keys and
/// values are fuzzed.
pub fn open_and_read(data: &[u8]) {
    let path = scratch("open_and_read", "input");
    if !write_entries(&path, &entries(data)) {
        return;
    }
    let Ok(reader) = Reader::open(&path) else {
        return;
    };
    let _ = reader.read_collection();
    let Ok(txn) = reader.txn() else {
        return;
    };
    for r in 0..reader.n_records().min(16) {
        records_agree(&txn, r);
        let _ = txn.for_each_frame(r, |view| {
            for block in view.blocks.values() {
                for column in block.columns.values() {
                    let _ = column.f64_view();
                }
            }
            Ok(())
        });
    }
}

/// `record` and `record_reference` return the same record, or refuse with
/// the same clause at the same place.
fn records_agree(txn: &RecordTxn<'_>, r: u64) {
    let place = |e: &Error| match e {
        Error::Refused { clause, at, .. } => format!("[{}] at {at}", clause.id()),
        other => format!("{other}"),
    };
    match (txn.record(r), txn.record_reference(r)) {
        // Debug text, not `==`: NaN is not equal to itself.
        (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "records[{r}]"),
        (Err(a), Err(b)) => assert_eq!(place(&a), place(&b), "records[{r}]"),
        (a, b) => panic!(
            "records[{r}]: record -> {:?}, record_reference -> {:?}",
            a.err(),
            b.err()
        ),
    }
}

/// Text -> `collection_from_str` -> `write_collection` -> read back. A file
/// the writer made must be read, both record paths must agree on every
/// record, and the canonical JSON read back, written again, must read back
/// the same.
pub fn write_read(data: &[u8]) {
    let options = || WriterOptions {
        overwrite: true,
        // Small batches: several commits per input, as a large collection has.
        batch_bytes: 4096,
        ..WriterOptions::default()
    };
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(collection) = collection_from_str(text) else {
        return;
    };
    let first = scratch("write_read", "a");
    if write_collection(&first, collection, options()).is_err() {
        return;
    }
    let reader = Reader::open(&first).expect("the reader opens what the writer wrote");
    let txn = reader.txn().expect("a read transaction");
    for r in 0..reader.n_records() {
        let fast = txn.record(r);
        let model = txn.record_reference(r);
        match (&fast, &model) {
            // Debug text, not `==`: NaN is not equal to itself.
            (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "records[{r}]"),
            _ => panic!(
                "records[{r}] of a file the writer made: record -> {:?}, record_reference -> {:?}",
                fast.as_ref().err(),
                model.as_ref().err()
            ),
        }
    }
    drop(txn);
    let once = collection_to_json(&reader.read_collection().expect("read_collection"));
    drop(reader);
    let second = scratch("write_read", "b");
    let again = collection_from_json(&once).expect("the canonical JSON of a read collection");
    write_collection(&second, again, options()).expect("the writer takes what it wrote");
    let twice = collection_to_json(
        &Reader::open(&second)
            .and_then(|r| r.read_collection())
            .expect("read the second file"),
    );
    assert_eq!(once, twice, "write(read(file)) reads back differently");
}

/// The same entries as [`open_and_read`], judged by the harness's own
/// inspector (`harness::inspect::inspect_file`) and its frame-bytes checker
/// on every value, which must never panic on a file an implementation under
/// test wrote. With `agree` (the target's `MOLREC_FUZZ_AGREE=1`), also one
/// direction of agreement: when the inspector finds a binding rule broken,
/// the reference reader's validation (`mrec validate`) refuses the file.
pub fn inspect_file(data: &[u8], agree: bool) {
    let entries = entries(data);
    for (_, value) in &entries {
        let _ = harness::inspect::frame_bytes::check(value);
    }
    let path = scratch("inspect_file", "input");
    if !write_entries(&path, &entries) {
        return;
    }
    let findings = harness::inspect::inspect_file(&path, None);
    if agree && !findings.is_empty() {
        let refused = Reader::open(&path).map_or(true, |r| !r.violations().is_empty());
        assert!(
            refused,
            "the inspector finds {findings:?}; the reference's validation (`mrec validate`) finds nothing"
        );
    }
}

/// The input split into `(key, value)` entries:
///
/// ```text
/// entry := key_len: u8 | value_len: u16 LE | key | value
/// ```
///
/// A key of length 0 or one that runs past the input ends the split; a
/// value that runs past it is cut at its end. A key starting `0xFF` names a
/// well-known key by its second byte ([`well_known`]).
pub fn entries(data: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = data;
    while rest.len() >= 3 {
        let klen = rest[0] as usize;
        let vlen = u16::from_le_bytes([rest[1], rest[2]]) as usize;
        rest = &rest[3..];
        if klen == 0 || rest.len() < klen {
            break;
        }
        let (key, tail) = rest.split_at(klen);
        let vlen = vlen.min(tail.len());
        let (value, tail) = tail.split_at(vlen);
        out.push((well_known(key), value.to_vec()));
        rest = tail;
    }
    out
}

/// Keys starting with 0xFF name a well-known key by their second byte
/// (`meta`, `index`, `ff`, or `r`/`s`/`f` + u64 BE of the third byte), so
/// that the fuzzer does not have to find them.
pub fn well_known(key: &[u8]) -> Vec<u8> {
    if key.len() >= 2 && key[0] == 0xFF {
        let n = key.get(2).copied().unwrap_or(0) as u64;
        let numbered = |p: u8| {
            let mut k = vec![p];
            k.extend_from_slice(&n.to_be_bytes());
            k
        };
        return match key[1] % 6 {
            0 => b"meta".to_vec(),
            1 => b"index".to_vec(),
            2 => b"ff".to_vec(),
            3 => numbered(b'r'),
            4 => numbered(b's'),
            _ => numbered(b'f'),
        };
    }
    key.to_vec()
}

/// A path of this process's own, in a directory of its own (the file-shape
/// rule allows only the file and its `-lock` beside it): `/dev/shm` when it
/// exists (syncs cost nothing there), else the temporary directory.
pub fn scratch(target: &str, name: &str) -> PathBuf {
    let dir = scratch_dir(target);
    let _ = std::fs::create_dir_all(&dir);
    dir.join(format!("{name}.mrec.lmdb"))
}

/// The directory of [`scratch`]'s files for `target` (not created here), for
/// whoever runs a target many times in one process to remove when done.
pub fn scratch_dir(target: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    base.join(format!("molrec-fuzz-{target}-{}", std::process::id()))
}

/// Writes `entries` into a new LMDB file at `path` (an old one and its lock
/// are removed first). LMDB's own page structure is trusted (SECURITY.md):
/// only keys and values are the fuzzer's. `false` when LMDB could not
/// write them (a key longer than LMDB takes is skipped, not a failure).
pub fn write_entries(path: &Path, entries: &[(Vec<u8>, Vec<u8>)]) -> bool {
    let mut lock = path.as_os_str().to_owned();
    lock.push("-lock");
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(lock);
    let mut options = EnvOpenOptions::new();
    options.map_size(64 << 20);
    // SAFETY: valid flags for a new private file.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC) };
    // SAFETY: the path is private to this process and opened once at a time.
    let Ok(env) = (unsafe { options.open(path) }) else {
        return false;
    };
    let result = (|| -> heed::Result<()> {
        let mut txn = env.write_txn()?;
        let db: Database<Bytes, Bytes> = env.create_database(&mut txn, None)?;
        for (k, v) in entries {
            // LMDB refuses keys longer than 511 bytes: not the reader's concern.
            let _ = db.put(&mut txn, k, v);
        }
        txn.commit()
    })();
    env.prepare_for_closing().wait();
    result.is_ok()
}
