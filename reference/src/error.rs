//! The one error type of the reference: every refusal names its clause.

use crate::clause::Clause;
use std::fmt;
use std::path::Path;

/// Everything that can go wrong while writing, reading or validating.
#[derive(Debug)]
pub enum Error {
    /// The input breaks a rule of the spec: `clause` says which, `at` says
    /// where (record, frame, block, column or key), `detail` what was seen.
    Refused {
        /// The clause enforced.
        clause: Clause,
        /// Where the fault is, e.g. `records[3].trajectory.frames[2].blocks.atoms`.
        at: String,
        /// What is wrong there.
        detail: String,
    },
    /// The collection file is not committed (no `meta` key): a writer
    /// failed or was killed before its last transaction.
    Uncommitted,
    /// Another writer holds the file.
    Busy(String),
    /// An operating-system error outside the format (a file that cannot be
    /// created, a full disk).
    Io(std::io::Error),
    /// An LMDB error that is not a property of the data (map full after
    /// growing, reader table full, ...).
    Lmdb(String),
}

impl Error {
    /// A refusal of `clause` at `at`.
    pub fn refused(clause: Clause, at: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::Refused {
            clause,
            at: at.into(),
            detail: detail.into(),
        }
    }

    /// An operating-system error on `path`, which the message names (the
    /// error's kind is kept).
    pub fn io_at(path: &Path, e: std::io::Error) -> Error {
        Error::Io(std::io::Error::new(
            e.kind(),
            format!("{}: {e}", path.display()),
        ))
    }

    /// The clause this error enforces, if it is a refusal.
    pub fn clause(&self) -> Option<Clause> {
        match self {
            Error::Refused { clause, .. } => Some(*clause),
            Error::Uncommitted => Some(Clause::MetaRequired),
            Error::Busy(_) => Some(Clause::WriterExclusive),
            Error::Io(_) | Error::Lmdb(_) => None,
        }
    }

    /// Prefixes the location with an outer path segment.
    pub fn within(self, outer: &str) -> Error {
        match self {
            Error::Refused { clause, at, detail } => {
                let at = if at.is_empty() {
                    outer.to_string()
                } else if at.starts_with('[') || at.starts_with('.') {
                    format!("{outer}{at}")
                } else {
                    format!("{outer}.{at}")
                };
                Error::Refused { clause, at, detail }
            }
            other => other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Refused { clause, at, detail } if at.is_empty() => {
                write!(f, "[{}] {detail}", clause.id())
            }
            Error::Refused { clause, at, detail } => write!(f, "[{}] {at}: {detail}", clause.id()),
            Error::Uncommitted => write!(
                f,
                "[{}] no `meta` key: not a collection, or its writer never committed",
                Clause::MetaRequired.id()
            ),
            Error::Busy(what) => write!(f, "[{}] {what}", Clause::WriterExclusive.id()),
            Error::Io(e) => write!(f, "i/o: {e}"),
            Error::Lmdb(e) => write!(f, "lmdb: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// What a validator reports about a file that readers accept: a `should`
/// of the spec it breaks (a value off its declared precision's grid), kept
/// apart from the refusals.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// The clause (of level `should`) the file breaks.
    pub clause: Clause,
    /// Where, e.g. `records[3].system.blocks.atoms.columns.x`.
    pub at: String,
    /// What was seen there.
    pub detail: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}] (should) {}: {}",
            self.clause.id(),
            self.at,
            self.detail
        )
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Io(e)
    }
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Shorthand for returning a refusal.
macro_rules! refuse {
    ($clause:ident, $at:expr, $($fmt:tt)+) => {
        return Err($crate::error::Error::refused($crate::clause::Clause::$clause, $at, format!($($fmt)+)))
    };
}
pub(crate) use refuse;
