//! Bytes -> LMDB entries -> the reference reader: `molrec_fuzz::open_and_read`.
//! The body is in `fuzz/src/lib.rs`, which the replay test also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| molrec_fuzz::open_and_read(data));
