//! The molrec conformance harness: suites, an independent judge, adapters, reports.
//!
//! Independence: nothing in `judge`, `inspect` or `recipe` calls the
//! reference crate. The reference is only reached through
//! [`adapter::Implementation`], like any other implementation
//! (`adapter::reference`).

pub mod adapter;
pub mod data;
pub mod golden;
pub mod inspect;
pub mod interop;
pub mod judge;
pub mod many;
pub mod recipe;
pub mod report;
pub mod runner;
pub mod smoke;
pub mod suite;
pub mod trace;
