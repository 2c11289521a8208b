//! A set's shards verified against the content digests its manifest keeps
//! (docs/shards.md): each shard's file hashed again and compared, so that
//! one whose bytes changed since the manifest was written (on disk, in a
//! copy) is named, with the digest expected and the one found. A file
//! given alone is verified against its own manifest beside it,
//! `<file>.mrec-set.json` ([`sidecar_manifest`]), which `mrec set manifest
//! FILE` writes.

use super::manifest::Manifest;
use super::shard_name;
use super::source::{resolve, Source};
use crate::error::{Error, Result, SetProblem};
use crate::lmdb::digest::{file_digest, DIGEST_FIELD};
use std::path::{Path, PathBuf};

/// The suffix of the manifest of one file: `<file>` + this, beside it.
pub const SIDECAR_SUFFIX: &str = ".mrec-set.json";

/// The manifest of the one file `file`, beside it (`<file>.mrec-set.json`):
/// a set of one shard, so that a single collection file can be verified.
pub fn sidecar_manifest(file: &Path) -> PathBuf {
    crate::lmdb::suffixed(file, SIDECAR_SUFFIX)
}

/// One shard checked against its manifest ([`verify_digests`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardCheck {
    /// The shard's file.
    pub path: PathBuf,
    /// The manifest that lists it, if one does.
    pub manifest: Option<PathBuf>,
    /// The digest the manifest keeps for it, if any.
    pub expected: Option<String>,
    /// The size the manifest gives it.
    pub expected_bytes: Option<u64>,
    /// Its digest now; `None` when there is none to compare with (the file
    /// is then not read) or the file is not there.
    pub actual: Option<String>,
    /// Its size now; `None` when it is not there.
    pub actual_bytes: Option<u64>,
}

impl ShardCheck {
    /// Whether the shard's bytes are those its digest was computed from.
    pub fn is_verified(&self) -> bool {
        self.expected.is_some() && self.expected == self.actual
    }

    /// Why the shard is not verified (`None` when it is): missing, no
    /// digest to compare with, or bytes that changed (naming the digest
    /// expected and the one found).
    pub fn error(&self) -> Option<Error> {
        let name = shard_name(&self.path);
        let Some(actual_bytes) = self.actual_bytes else {
            return Some(Error::set(
                SetProblem::Missing,
                name,
                format!("{} is not there", self.path.display()),
            ));
        };
        let (expected, manifest) = match (&self.expected, &self.manifest) {
            (Some(expected), Some(manifest)) => (expected, manifest),
            (_, manifest) => {
                let why = match manifest {
                    Some(m) => format!(
                        "{} keeps no `{DIGEST_FIELD}` digest of it (written before digests; \
                         `mrec set manifest` writes one from the file as it is now)",
                        m.display()
                    ),
                    None => format!(
                        "no manifest lists it: `mrec set manifest {}` writes one beside it \
                         (from the file as it is now)",
                        self.path.display()
                    ),
                };
                return Some(Error::set(SetProblem::NoDigest, name, why));
            }
        };
        let actual = self.actual.as_deref().unwrap_or("(not computed)");
        if actual == expected {
            return None;
        }
        let size = match self.expected_bytes {
            Some(b) if b != actual_bytes => {
                format!("; its size is {actual_bytes} bytes, the manifest's {b}")
            }
            _ => String::new(),
        };
        Some(Error::set(
            SetProblem::Digest,
            name,
            format!(
                "its bytes changed since {} was written: {DIGEST_FIELD} expected {expected}, \
                 actual {actual}{size}",
                manifest.display()
            ),
        ))
    }
}

/// Every shard of the set `specs` name ([`resolve`]) checked against the
/// digest its manifest keeps: the set's manifest, or, for shards named
/// without one (files, a directory without a manifest, a pattern), each
/// file's own ([`sidecar_manifest`]). Each shard with a digest is read
/// whole and hashed; the others are listed without being read. An error
/// is what stops the check itself (no such path, a manifest that is not
/// one, an unreadable file); what is wrong with a shard is in its
/// [`ShardCheck`].
pub fn verify_digests(specs: &[PathBuf]) -> Result<Vec<ShardCheck>> {
    let listed: Vec<(PathBuf, Option<Listed>)> = match resolve(specs)? {
        Source::Manifest(path) => {
            let manifest = Manifest::read(&path)?;
            let dir = path.parent().unwrap_or(Path::new("."));
            manifest
                .shards
                .into_iter()
                .map(|s| {
                    let listed = Listed {
                        manifest: path.clone(),
                        digest: s.digest,
                        bytes: s.bytes,
                    };
                    (dir.join(&s.file), Some(listed))
                })
                .collect()
        }
        Source::Files(files) => {
            let mut out = Vec::with_capacity(files.len());
            for file in files {
                let sidecar = sidecar_manifest(&file);
                let entry = match sidecar.is_file() {
                    true => Some(sidecar_entry(&sidecar, &file)?),
                    false => None,
                };
                out.push((file, entry));
            }
            out
        }
    };
    listed
        .into_iter()
        .map(|(path, entry)| {
            let actual_bytes = match std::fs::metadata(&path) {
                Ok(m) => Some(m.len()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(Error::io_at(&path, e)),
            };
            let (manifest, expected, expected_bytes) = match entry {
                Some(l) => (Some(l.manifest), l.digest, Some(l.bytes)),
                None => (None, None, None),
            };
            let actual = match (&expected, actual_bytes) {
                (Some(_), Some(_)) => Some(file_digest(&path)?),
                _ => None,
            };
            Ok(ShardCheck {
                path,
                manifest,
                expected,
                expected_bytes,
                actual,
                actual_bytes,
            })
        })
        .collect()
}

/// A shard as a manifest lists it.
struct Listed {
    manifest: PathBuf,
    digest: Option<String>,
    bytes: u64,
}

/// What the manifest beside `file` keeps of it: the manifest must list
/// that file.
fn sidecar_entry(sidecar: &Path, file: &Path) -> Result<Listed> {
    let manifest = Manifest::read(sidecar)?;
    let name = shard_name(file);
    match manifest.shards.into_iter().find(|s| s.file == name) {
        Some(s) => Ok(Listed {
            manifest: sidecar.to_path_buf(),
            digest: s.digest,
            bytes: s.bytes,
        }),
        None => Err(Error::set(
            SetProblem::Manifest,
            name,
            format!("{}: does not list this file", sidecar.display()),
        )),
    }
}
