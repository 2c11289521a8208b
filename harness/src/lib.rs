//! The molrec conformance harness: suites, an independent judge, adapters, reports.
//!
//! The suites, fixtures and spec map are embedded in the library at build
//! time ([`data`]), so the `harness` binary runs alone, wherever it is
//! copied; [`suite::Layout`] reads them, or a tree given with `--root`.
//! [`smoke`] checks an adapter in seconds before a run.
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
pub mod power;
pub mod recipe;
pub mod report;
pub mod runner;
pub mod smoke;
pub mod suite;
pub mod trace;
