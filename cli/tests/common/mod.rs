//! The library's test helpers (`reference/tests/common`), shared with the
//! command line's tests.
#![allow(dead_code)]

#[path = "../../../reference/tests/common/mod.rs"]
mod shared;
pub use shared::*;
