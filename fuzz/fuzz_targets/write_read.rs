//! Canonical JSON -> the writer -> the reader -> the writer again: `molrec_fuzz::write_read`.
//! The body is in `fuzz/src/lib.rs`, which the replay test also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| molrec_fuzz::write_read(data));
