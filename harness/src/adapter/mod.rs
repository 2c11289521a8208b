//! How the harness talks to an implementation under test.
//!
//! Every implementation, the reference included, is reached through the
//! [`Implementation`] trait. An implementation in another language plugs in
//! as a [`Subprocess`] speaking the newline-delimited JSON protocol of
//! [`protocol`] (documented for third parties in `docs/adapters.md`).
//!
//! The outcome of every request is an [`Outcome`]: a result, a refusal (which
//! may name the spec clause it enforces), "unsupported", or an error. Errors
//! (a crash, a timeout, a malformed answer) are never counted as refusals.

pub mod protocol;
pub mod reference;
pub mod subprocess;

pub use subprocess::{
    end_all_adapters, Limits, Subprocess, BYE_GRACE, DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_MAX_FAILURES, DEFAULT_TIMEOUT,
};

use std::path::Path;

use serde::{Deserialize, Serialize};

/// What an implementation says about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Description {
    /// The implementation's name, as shown in reports.
    pub name: String,
    /// The implementation's version, free-form.
    pub version: String,
    /// The operations the implementation performs.
    pub capabilities: Capabilities,
}

/// The operations an implementation performs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// It writes collections to `.mrec.lmdb` files.
    pub write: bool,
    /// It reads `.mrec.lmdb` files back to collections.
    pub read: bool,
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome<T> {
    /// The operation succeeded.
    Done(T),
    /// The implementation refused, optionally naming the clause id it enforces.
    Refused {
        /// The implementation's explanation, for humans.
        message: String,
        /// The id of the spec clause the refusal enforces (a key of
        /// `spec-map.toml`), if the implementation names one.
        clause: Option<String>,
    },
    /// The implementation does not do this operation.
    Unsupported,
    /// Crash, timeout, malformed answer: never counted as a refusal.
    Error(String),
}

impl<T> Outcome<T> {
    /// Maps the value of [`Outcome::Done`], keeping every other variant.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Outcome<U> {
        match self {
            Outcome::Done(value) => Outcome::Done(f(value)),
            Outcome::Refused { message, clause } => Outcome::Refused { message, clause },
            Outcome::Unsupported => Outcome::Unsupported,
            Outcome::Error(message) => Outcome::Error(message),
        }
    }
}

/// An implementation under test.
pub trait Implementation {
    /// Who the implementation is and what it can do.
    fn describe(&self) -> &Description;

    /// Writes `collection` (canonical JSON, presentation form) to a new file
    /// at `path`.
    fn write(&mut self, collection: &serde_json::Value, path: &Path) -> Outcome<()>;

    /// Reads the file at `path` back to canonical JSON (resolved form).
    fn read(&mut self, path: &Path) -> Outcome<serde_json::Value>;

    /// Called before each trial with its name, for messages that say which
    /// trial something began at. Nothing by default.
    fn begin_trial(&mut self, _trial: &str) {}
}
