//! What paths name a set: files, a directory (its manifest, else its
//! `*.mrec.lmdb` files), or a glob pattern in the last component, in a
//! stable order (file names sorted byte-wise).

use crate::error::{Error, Result, SetProblem};
use std::path::{Path, PathBuf};

/// The manifest's file name, in the shards' directory.
pub const MANIFEST_NAME: &str = "mrec-set.json";
/// The marker a write of a set leaves in its directory until the manifest
/// is written: a directory holding it and no manifest does not open.
pub const PENDING_NAME: &str = "mrec-set.pending";
/// The suffix of a shard's file name in a directory listing.
pub const SHARD_SUFFIX: &str = ".mrec.lmdb";

/// Whether a file of this name is a manifest: [`MANIFEST_NAME`], or the
/// manifest of one file beside it (`<file>.mrec-set.json`,
/// [`super::sidecar_manifest`]).
pub fn is_manifest_name(name: &str) -> bool {
    name == MANIFEST_NAME || name.ends_with(super::SIDECAR_SUFFIX)
}

/// What one or more paths name.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// These files, in this order (each opened to learn its counts).
    Files(Vec<PathBuf>),
    /// The manifest at this path (the shards beside it).
    Manifest(PathBuf),
}

/// What `specs` name: one spec is a file, a directory (its manifest if it
/// has one, else its `*.mrec.lmdb` files sorted by name), a manifest, or a
/// pattern (`*`, `?`, `[...]` in the last component; its matches sorted);
/// several are the concatenation of what each names (none may be a
/// manifest: a set with one is opened alone).
pub fn resolve(specs: &[PathBuf]) -> Result<Source> {
    match specs {
        [] => Err(Error::set(SetProblem::Empty, "", "no path given")),
        [one] => resolve_one(one),
        many => {
            let mut files = Vec::new();
            for spec in many {
                match resolve_one(spec)? {
                    Source::Files(found) => files.extend(found),
                    Source::Manifest(m) => {
                        return Err(Error::set(
                            SetProblem::Manifest,
                            "",
                            format!(
                                "{}: a set with a manifest is opened alone, not among other paths",
                                m.display()
                            ),
                        ))
                    }
                }
            }
            Ok(Source::Files(files))
        }
    }
}

fn resolve_one(spec: &Path) -> Result<Source> {
    if spec.is_dir() {
        let manifest = spec.join(MANIFEST_NAME);
        if manifest.is_file() {
            return Ok(Source::Manifest(manifest));
        }
        let pending = spec.join(PENDING_NAME);
        if pending.exists() {
            return Err(Error::set(
                SetProblem::Incomplete,
                "",
                format!(
                    "{}: a write of this set started and has not finished (no {MANIFEST_NAME}; \
                     {PENDING_NAME} is there): rerun it, or delete the marker to open the \
                     shards that are there",
                    spec.display()
                ),
            ));
        }
        return Ok(Source::Files(shard_files(spec)?));
    }
    let name = spec.file_name().map(|n| n.to_string_lossy().into_owned());
    if name
        .as_deref()
        .is_some_and(|n| is_manifest_name(n) && !is_pattern(n))
    {
        return Ok(Source::Manifest(spec.to_path_buf()));
    }
    match name {
        Some(pattern) if is_pattern(&pattern) => {
            let dir = match spec.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            let mut found: Vec<PathBuf> = listing(&dir)?
                .into_iter()
                .filter(|n| glob_match(pattern.as_bytes(), n.as_bytes()))
                .map(|n| dir.join(n))
                .filter(|p| p.is_file())
                .collect();
            found.sort();
            if found.is_empty() {
                return Err(Error::set(
                    SetProblem::Empty,
                    "",
                    format!("{}: no file matches", spec.display()),
                ));
            }
            Ok(Source::Files(found))
        }
        _ => Ok(Source::Files(vec![spec.to_path_buf()])),
    }
}

/// The shards of a directory: its `*.mrec.lmdb` files (not hidden ones,
/// not `.partial` files of writers at work), sorted by name.
pub fn shard_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut names: Vec<String> = listing(dir)?
        .into_iter()
        .filter(|n| n.ends_with(SHARD_SUFFIX) && !n.starts_with('.'))
        .collect();
    names.sort();
    let files: Vec<PathBuf> = names
        .into_iter()
        .map(|n| dir.join(n))
        .filter(|p| p.is_file())
        .collect();
    if files.is_empty() {
        return Err(Error::set(
            SetProblem::Empty,
            "",
            format!(
                "{}: no *{SHARD_SUFFIX} file in this directory",
                dir.display()
            ),
        ));
    }
    Ok(files)
}

/// The names of a directory's entries (those that are UTF-8).
fn listing(dir: &Path) -> Result<Vec<String>> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io_at(dir, e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| Error::io_at(dir, e))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    Ok(names)
}

fn is_pattern(name: &str) -> bool {
    name.contains(['*', '?', '['])
}

/// Whether `name` matches the shell pattern `pattern`: `*` any run, `?`
/// one byte, `[abc]`, `[a-z]`, `[!a]` / `[^a]` one byte of (or not of) a
/// set; anything else itself. Iterative, with one backtrack point, so
/// linear-ish whatever the pattern.
pub(crate) fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        let step = match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some(b'?') => Some(p + 1),
            Some(b'[') => match class(&pattern[p..], name[n]) {
                Some((true, len)) => Some(p + len),
                Some((false, _)) => None,
                // An unclosed `[` is itself.
                None => (name[n] == b'[').then_some(p + 1),
            },
            Some(&c) => (c == name[n]).then_some(p + 1),
            None => None,
        };
        match (step, star) {
            (Some(next), _) => {
                p = next;
                n += 1;
            }
            (None, Some((sp, sn))) => {
                p = sp + 1;
                n = sn + 1;
                star = Some((sp, sn + 1));
            }
            (None, None) => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// A `[...]` class at the start of `pattern`: whether `c` is in it, and
/// the class's length; `None` when it is not closed.
fn class(pattern: &[u8], c: u8) -> Option<(bool, usize)> {
    let mut i = 1;
    let negated = matches!(pattern.get(1), Some(b'!' | b'^'));
    if negated {
        i += 1;
    }
    let mut found = false;
    let mut first = true;
    loop {
        let lo = *pattern.get(i)?;
        if lo == b']' && !first {
            return Some((found != negated, i + 1));
        }
        first = false;
        if pattern.get(i + 1) == Some(&b'-') && pattern.get(i + 2).is_some_and(|&h| h != b']') {
            let hi = pattern[i + 2];
            found |= lo <= c && c <= hi;
            i += 3;
        } else {
            found |= lo == c;
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_patterns() {
        let m = |p: &str, n: &str| glob_match(p.as_bytes(), n.as_bytes());
        assert!(m("*.mrec.lmdb", "data0001.mrec.lmdb"));
        assert!(!m("*.mrec.lmdb", "data0001.mrec.lmdb.partial"));
        assert!(m("data00?1.*", "data0001.mrec.lmdb"));
        assert!(m("data[0-9][0-9]*", "data42.x"));
        assert!(!m("data[!0-9]*", "data42.x"));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(m("[abc", "[abc"));
        assert!(m("*", ""));
        assert!(!m("?", ""));
        // Many stars do not blow up.
        let long = "a".repeat(200);
        assert!(!m(&format!("{}b", "*a".repeat(30)), &long));
        assert!(m(&"a*".repeat(30), &long));
    }
}
