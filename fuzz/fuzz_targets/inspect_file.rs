//! Bytes -> a small LMDB file of keys and values (`molrec_fuzz::entries`)
//! -> the harness's own inspector (`harness::inspect::inspect_file`, which
//! judges files an implementation under test wrote and must never panic on
//! one) and its frame-bytes checker on every value. Any panic, hang or
//! unbounded allocation is a finding.
//!
//! With `MOLREC_FUZZ_AGREE=1` it also holds the judge and the reference
//! reader to one direction of agreement: a file the inspector finds a
//! binding rule broken in must be refused by the reference's validation
//! (`Reader::open`, then `Reader::violations`, as `mrec validate`). Off by
//! default: a disagreement is a question for the spec's reading (which side
//! is right), not always a bug.
#![no_main]

use libfuzzer_sys::fuzz_target;
use molrec::lmdb::Reader;
use molrec_fuzz::{entries, scratch, write_entries};

fuzz_target!(|data: &[u8]| {
    let entries = entries(data);
    for (_, value) in &entries {
        let _ = harness::inspect::frame_bytes::check(value);
    }
    let path = scratch("inspect_file", "input");
    if !write_entries(&path, &entries) {
        return;
    }
    let findings = harness::inspect::inspect_file(&path, None);
    if std::env::var_os("MOLREC_FUZZ_AGREE").is_some() && !findings.is_empty() {
        let refused = Reader::open(&path).map_or(true, |r| !r.violations().is_empty());
        assert!(
            refused,
            "the inspector finds {findings:?}; the reference's validation (`mrec validate`) finds nothing"
        );
    }
});
