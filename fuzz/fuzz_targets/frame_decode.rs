//! Bytes -> `molrec_fuzz::frame_decode`: the checked frame decoder and its update path.
//! The body is in `fuzz/src/lib.rs`, which the replay test also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| molrec_fuzz::frame_decode(data));
