//! Text -> canonical JSON collection -> `write_collection` -> `Reader` ->
//! read back. Whatever the writer accepts, the reader must read: every
//! record through both read paths (`record`, the column-wise resolver, and
//! `record_reference`, the model then `prepare_record`), which must agree,
//! and `read_collection`, whose canonical JSON written again must read back
//! the same (a fixed point: nothing lost, nothing changed). Any panic, hang,
//! refusal of a file the writer made, or disagreement is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use molrec::lmdb::{write_collection, Reader, WriterOptions};
use molrec::model_json::{collection_from_json, collection_from_str, collection_to_json};
use molrec_fuzz::scratch;

fn options() -> WriterOptions {
    WriterOptions {
        overwrite: true,
        // Small batches: several commits per input, as a large collection has.
        batch_bytes: 4096,
        ..WriterOptions::default()
    }
}

fuzz_target!(|data: &[u8]| {
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
});
