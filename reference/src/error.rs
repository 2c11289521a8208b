//! The one error type of the reference: every refusal names its clause.

use crate::clause::Clause;
use std::fmt;
use std::path::{Path, PathBuf};

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
    /// A sharded set's own refusal ([`crate::lmdb::Set`]: this project's
    /// extension, docs/shards.md, not a rule of the spec, so no clause):
    /// `shard` names the file at fault (empty for the set as a whole),
    /// `problem` the kind, `detail` what differs.
    Set {
        /// What kind of fault.
        problem: SetProblem,
        /// The shard's file name (or path), empty for the whole set.
        shard: String,
        /// What was seen, e.g. what differs between two declarations.
        detail: String,
    },
    /// An error met in one shard of a set, with the shard's path.
    InShard {
        /// The shard's file.
        shard: PathBuf,
        /// What went wrong there.
        error: Box<Error>,
    },
}

/// What is wrong with a sharded set ([`Error::Set`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetProblem {
    /// A shard's declaration (units, `sequence_schema`, force field)
    /// differs from the first shard's.
    Declaration,
    /// A shard the manifest names is not there.
    Missing,
    /// A shard is not what the manifest says (size, counts, declaration).
    Changed,
    /// The manifest is not one (unreadable, too large, malformed).
    Manifest,
    /// A write of the set started and did not finish: no manifest, a
    /// pending marker.
    Incomplete,
    /// No shard: an empty directory, a pattern that matches nothing.
    Empty,
    /// A file listed twice.
    Duplicate,
    /// The shards' own index columns do not line up (names, dtypes,
    /// shapes, precisions).
    Index,
    /// A shard's bytes are not those its manifest's content digest was
    /// computed from: it changed on disk or in a copy.
    Digest,
    /// No content digest to verify a shard against: its manifest predates
    /// digests, or no manifest lists it.
    NoDigest,
}

impl SetProblem {
    /// A short stable name: `declaration`, `missing`, `changed`,
    /// `manifest`, `incomplete`, `empty`, `duplicate`, `index`, `digest`,
    /// `no-digest`.
    pub fn name(self) -> &'static str {
        match self {
            SetProblem::Declaration => "declaration",
            SetProblem::Missing => "missing",
            SetProblem::Changed => "changed",
            SetProblem::Manifest => "manifest",
            SetProblem::Incomplete => "incomplete",
            SetProblem::Empty => "empty",
            SetProblem::Duplicate => "duplicate",
            SetProblem::Index => "index",
            SetProblem::Digest => "digest",
            SetProblem::NoDigest => "no-digest",
        }
    }
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

    /// A refusal of a sharded set.
    pub fn set(problem: SetProblem, shard: impl Into<String>, detail: impl Into<String>) -> Error {
        Error::Set {
            problem,
            shard: shard.into(),
            detail: detail.into(),
        }
    }

    /// This error, met in the shard at `shard` (an [`Error::Set`] names
    /// its shard itself and is kept as it is).
    pub fn in_shard(self, shard: &Path) -> Error {
        match self {
            e @ (Error::Set { .. } | Error::InShard { .. }) => e,
            e => Error::InShard {
                shard: shard.to_path_buf(),
                error: Box::new(e),
            },
        }
    }

    /// The clause this error enforces, if it is a refusal.
    pub fn clause(&self) -> Option<Clause> {
        match self {
            Error::Refused { clause, .. } => Some(*clause),
            Error::Uncommitted => Some(Clause::MetaRequired),
            Error::Busy(_) => Some(Clause::WriterExclusive),
            Error::Io(_) | Error::Lmdb(_) | Error::Set { .. } => None,
            Error::InShard { error, .. } => error.clause(),
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
            Error::Set {
                problem,
                shard,
                detail,
            } if shard.is_empty() => write!(f, "set ({}): {detail}", problem.name()),
            Error::Set {
                problem,
                shard,
                detail,
            } => write!(f, "set ({}): shard {shard}: {detail}", problem.name()),
            Error::InShard { shard, error } => write!(f, "shard {}: {error}", shard.display()),
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
