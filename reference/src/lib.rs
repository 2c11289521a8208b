//! Reference implementation of molrec collections and their LMDB binding.
//!
//! See `ARCHITECTURE.md` at the repository root for the code map.

#![warn(missing_docs)]

pub mod arrays;
pub mod clause;
pub mod dtype;
pub mod error;
pub mod forcefield;
pub mod frame_bytes;
pub mod lmdb;
pub mod model;
pub mod model_json;
pub mod precision;
pub mod typed_json;
pub mod units;
pub mod validate;

pub use clause::Clause;
pub use dtype::DType;
pub use error::{Error, Result, SetProblem};

/// The README's Rust examples, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeExamples;

/// The version of this implementation.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
