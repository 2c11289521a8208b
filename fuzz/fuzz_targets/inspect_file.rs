//! Bytes -> LMDB entries -> the harness's inspector: `molrec_fuzz::inspect_file`
//! (with `MOLREC_FUZZ_AGREE=1`, also its agreement with `mrec validate`).
//! The body is in `fuzz/src/lib.rs`, which the replay test also runs.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| molrec_fuzz::inspect_file(data, std::env::var_os("MOLREC_FUZZ_AGREE").is_some()));
