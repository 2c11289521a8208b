//! Reference implementation of molrec collections and their LMDB binding.

pub mod clause;
pub mod units;
