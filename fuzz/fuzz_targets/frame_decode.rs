//! Bytes -> `frame_bytes::decode` -> `to_column` on every column, the
//! in-place views, and `to_blocks`. Any panic, out-of-bounds read, hang or
//! allocation beyond the input's size is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use molrec::frame_bytes::decode;

fuzz_target!(|data: &[u8]| {
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
});
