//! Bytes -> `frame_bytes::decode` -> `to_column` on every column, the
//! in-place views, and `to_blocks`; then the same bytes through
//! `decode_update` after themselves (the repeated-blocks path), which must
//! agree with `decode`. Any panic, out-of-bounds read, hang, allocation
//! beyond the input's size or disagreement is a finding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use molrec::frame_bytes::{decode, decode_update, BlocksMemo, FrameRef, Update};

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
});
