//! Bytes -> a small LMDB file of keys and values (`molrec_fuzz::entries`)
//! -> `Reader::open` -> `read_collection`, the view path, and the two
//! record paths compared: `record` (the column-wise resolver, the rules
//! checked as it reads) and `record_reference` (the model, then
//! `prepare_record`) must return the same record or refuse with the same
//! clause at the same place. LMDB's own page structure is trusted (see
//! SECURITY.md): the file is always written by LMDB, only keys and values
//! are fuzzed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use molrec::lmdb::{Reader, RecordTxn};
use molrec::Error;
use molrec_fuzz::{entries, scratch, write_entries};

fn agree(txn: &RecordTxn<'_>, r: u64) {
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

fuzz_target!(|data: &[u8]| {
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
        agree(&txn, r);
        let _ = txn.for_each_frame(r, |view| {
            for block in view.blocks.values() {
                for column in block.columns.values() {
                    let _ = column.f64_view();
                }
            }
            Ok(())
        });
    }
});
