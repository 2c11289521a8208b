//! What the `mrec` command line is built from besides the library: the
//! benchmark behind `mrec bench` and the global allocator `mrec` links. The
//! library (`molrec`) carries neither; this crate is for `mrec` and its
//! profiling examples.

#![warn(missing_docs)]

/// The global allocator `mrec` links (the `mrec-allocator` crate).
pub use mrec_allocator as allocator;
pub mod bench;
