//! The benchmark's workload (`mrec bench`) written through the library:
//! its frames re-encode byte for byte and its records read alike on both
//! paths.

mod common;

use common::{frames_reencode_identically, records_read_alike, scratch_file};
use molrec::lmdb::{Reader, Writer, WriterOptions};

/// The same over the benchmark's workload: long runs of frames with the
/// same layout, records of every size one after the other.
#[test]
fn benchmark_frames_reencode_identically() {
    let path = scratch_file("lmdb-test", "bench-reencode");
    let n = 300;
    let mut writer = Writer::create(
        &path,
        mrec_cli::bench::workload_header(1, n),
        WriterOptions {
            overwrite: true,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for r in 0..n {
        writer
            .append(mrec_cli::bench::workload_record(1, r))
            .unwrap();
    }
    let written = writer.frames();
    writer.finish(Default::default()).unwrap();
    assert_eq!(frames_reencode_identically(&path) as u64, written);
    // Records of one size share their first update's layout: most of
    // them take it from the transaction's cache, and read alike.
    records_read_alike(&path);
    let reader = Reader::open(&path).unwrap();
    let txn = reader.txn().unwrap();
    for r in (0..n).rev() {
        txn.record_arrays(r).unwrap();
    }
    assert!(
        txn.layouts_reused() > n / 2,
        "{} of {n} records took their layout from the cache",
        txn.layouts_reused()
    );
}
