//! The manifest of a set (`mrec-set.json` beside its shards, or
//! `<file>.mrec-set.json` beside one file): the shards in order with their
//! counts, sizes and content digests, and the digest of the declaration
//! they share, so that a set of thousands of shards opens from one small
//! file and a shard whose bytes changed is found. Input from disk: read
//! with a size bound and checked whole before it is used. Written to a
//! temporary name, synced and renamed, last.

use super::source::{MANIFEST_NAME, PENDING_NAME};
use crate::error::{Error, Result, SetProblem};
use crate::lmdb::digest::{file_digest, is_digest, DIGEST_FIELD, DIGEST_HEX_LEN};
use serde_json::{json, Map, Value};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// `format` of a manifest.
pub const MANIFEST_FORMAT: &str = "mrec-set";
/// `version` of the manifests this implementation reads and writes.
pub const MANIFEST_VERSION: u64 = 1;
/// The largest manifest read: 64 MiB (about 500,000 shards).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// The longest shard file name a manifest may hold.
const MAX_NAME_BYTES: usize = 255;

/// One shard as the manifest lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestShard {
    /// Its file name, in the manifest's directory (no directory part).
    pub file: String,
    /// Records in it.
    pub n_records: u64,
    /// Frames in it.
    pub n_frames: u64,
    /// The file's size in bytes.
    pub bytes: u64,
    /// The file's content digest ([`crate::lmdb::file_digest`], field
    /// `xxh3_128`); `None` in a manifest written before digests were.
    pub digest: Option<String>,
}

/// A set's manifest (docs/shards.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    /// SHA-256 (lowercase hex) of the declaration every shard has.
    pub declaration_sha256: String,
    /// The shards, in the set's order.
    pub shards: Vec<ManifestShard>,
}

fn bad(path: &Path, detail: impl std::fmt::Display) -> Error {
    Error::set(
        SetProblem::Manifest,
        "",
        format!("{}: {detail}", path.display()),
    )
}

impl Manifest {
    /// Records in all shards.
    pub fn n_records(&self) -> u64 {
        self.shards.iter().map(|s| s.n_records).sum()
    }

    /// Frames in all shards.
    pub fn n_frames(&self) -> u64 {
        self.shards.iter().map(|s| s.n_frames).sum()
    }

    /// The manifest as JSON.
    pub fn to_json(&self) -> Value {
        let shards: Vec<Value> = self
            .shards
            .iter()
            .map(|s| {
                let mut shard = json!({"file": s.file, "n_records": s.n_records,
                                       "n_frames": s.n_frames, "bytes": s.bytes});
                if let Some(digest) = &s.digest {
                    shard[DIGEST_FIELD] = json!(digest);
                }
                shard
            })
            .collect();
        json!({
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "declaration_sha256": self.declaration_sha256,
            "n_records": self.n_records(),
            "n_frames": self.n_frames(),
            "shards": shards,
        })
    }

    /// Reads and checks the manifest at `path` (at most
    /// [`MAX_MANIFEST_BYTES`]).
    pub fn read(path: &Path) -> Result<Manifest> {
        let file = std::fs::File::open(path).map_err(|e| Error::io_at(path, e))?;
        let mut text = Vec::new();
        file.take(MAX_MANIFEST_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|e| Error::io_at(path, e))?;
        if text.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(bad(
                path,
                format!("larger than {MAX_MANIFEST_BYTES} bytes: not a manifest"),
            ));
        }
        let value: Value =
            serde_json::from_slice(&text).map_err(|e| bad(path, format!("not JSON: {e}")))?;
        Manifest::from_json(&value).map_err(|detail| bad(path, detail))
    }

    /// A manifest from its JSON, every field checked; the error says what
    /// is wrong.
    pub fn from_json(value: &Value) -> std::result::Result<Manifest, String> {
        let top = value.as_object().ok_or("not a JSON object")?;
        match top.get("format") {
            Some(Value::String(s)) if s == MANIFEST_FORMAT => {}
            other => return Err(format!("`format` is {other:?}, not \"{MANIFEST_FORMAT}\"")),
        }
        match top.get("version").and_then(Value::as_u64) {
            Some(MANIFEST_VERSION) => {}
            _ => {
                return Err(format!(
                    "`version` is {:?}, not {MANIFEST_VERSION} (the version read here)",
                    top.get("version")
                ))
            }
        }
        let digest = match top.get("declaration_sha256") {
            Some(Value::String(s))
                if s.len() == 64
                    && s.bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
            {
                s.clone()
            }
            _ => return Err("`declaration_sha256` is not 64 lowercase hex digits".into()),
        };
        let list = top
            .get("shards")
            .and_then(Value::as_array)
            .ok_or("`shards` is not an array")?;
        if list.is_empty() {
            return Err("`shards` is empty".into());
        }
        let mut shards = Vec::with_capacity(list.len());
        let mut seen = std::collections::HashSet::with_capacity(list.len());
        let (mut records, mut frames) = (0u64, 0u64);
        for (i, s) in list.iter().enumerate() {
            let shard = shard_from_json(s).map_err(|e| format!("shards[{i}]: {e}"))?;
            if !seen.insert(shard.file.clone()) {
                return Err(format!("shards[{i}]: {:?} is listed twice", shard.file));
            }
            records = records
                .checked_add(shard.n_records)
                .ok_or("the record counts overflow")?;
            frames = frames
                .checked_add(shard.n_frames)
                .ok_or("the frame counts overflow")?;
            shards.push(shard);
        }
        for (key, sum) in [("n_records", records), ("n_frames", frames)] {
            if let Some(total) = top.get(key) {
                if total.as_u64() != Some(sum) {
                    return Err(format!("`{key}` is {total}, its shards add up to {sum}"));
                }
            }
        }
        Ok(Manifest {
            declaration_sha256: digest,
            shards,
        })
    }

    /// Computes the digest of every shard that has none (its file in
    /// `dir`, read whole).
    pub fn fill_digests(&mut self, dir: &Path) -> Result<()> {
        for shard in self.shards.iter_mut().filter(|s| s.digest.is_none()) {
            shard.digest = Some(file_digest(&dir.join(&shard.file))?);
        }
        Ok(())
    }

    /// Writes the manifest into `dir` as [`MANIFEST_NAME`] (see
    /// [`Manifest::install_at`]); then deletes the pending marker
    /// ([`PENDING_NAME`]) if there is one. So the manifest appears whole,
    /// and only once its shards are.
    pub fn install(&self, dir: &Path) -> Result<PathBuf> {
        let path = self.install_at(&dir.join(MANIFEST_NAME))?;
        match std::fs::remove_file(dir.join(PENDING_NAME)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io_at(&dir.join(PENDING_NAME), e)),
        }
        Ok(path)
    }

    /// Writes the manifest at `path` (its shards' directory): to a
    /// temporary file, synced, renamed over `path`, the directory synced.
    pub fn install_at(&self, path: &Path) -> Result<PathBuf> {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let name = path
            .file_name()
            .map_or_else(|| MANIFEST_NAME.into(), |n| n.to_string_lossy());
        let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let text = serde_json::to_string_pretty(&self.to_json())
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        let written = (|| -> std::io::Result<()> {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(text.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()?;
            std::fs::rename(&temp, path)?;
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(crate::lmdb::located_io(path, Error::Io(e)));
        }
        Ok(path.to_path_buf())
    }
}

fn shard_from_json(value: &Value) -> std::result::Result<ManifestShard, String> {
    let s: &Map<String, Value> = value.as_object().ok_or("not an object")?;
    let file = s
        .get("file")
        .and_then(Value::as_str)
        .ok_or("`file` is not a string")?;
    if !plain_file_name(file) {
        return Err(format!(
            "`file` {file:?} is not a plain file name (no directory part, at most {MAX_NAME_BYTES} bytes)"
        ));
    }
    let count = |key: &str| {
        s.get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("`{key}` is not an unsigned integer"))
    };
    let digest = match s.get(DIGEST_FIELD) {
        None => None,
        Some(Value::String(d)) if is_digest(d) => Some(d.clone()),
        Some(_) => {
            return Err(format!(
                "`{DIGEST_FIELD}` is not {DIGEST_HEX_LEN} lowercase hex digits"
            ))
        }
    };
    Ok(ManifestShard {
        file: file.to_string(),
        n_records: count("n_records")?,
        n_frames: count("n_frames")?,
        bytes: count("bytes")?,
        digest,
    })
}

/// A name that stays in the manifest's directory: not empty, not `.` or
/// `..`, no separator, no NUL.
pub(crate) fn plain_file_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_BYTES
        && name != "."
        && name != ".."
        && !name.contains(['/', '\\', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        Manifest {
            declaration_sha256: "ab".repeat(32),
            shards: vec![
                ManifestShard {
                    file: "a.mrec.lmdb".into(),
                    n_records: 2,
                    n_frames: 5,
                    bytes: 4096,
                    digest: Some("0123456789abcdef".repeat(2)),
                },
                ManifestShard {
                    file: "b.mrec.lmdb".into(),
                    n_records: 0,
                    n_frames: 0,
                    bytes: 4096,
                    digest: None,
                },
            ],
        }
    }

    #[test]
    fn reads_back_what_it_writes() {
        let m = sample();
        assert_eq!(Manifest::from_json(&m.to_json()), Ok(m));
        // A shard without a digest (a manifest written before them) has no
        // field, and reads back without one.
        assert!(sample().to_json()["shards"][1].get(DIGEST_FIELD).is_none());
    }

    #[test]
    fn refuses_what_is_not_a_manifest() {
        let good = sample().to_json();
        type Edit = Box<dyn Fn(&mut Value)>;
        let cases: Vec<(&str, Edit)> = vec![
            ("`format`", Box::new(|v| v["format"] = json!("other"))),
            ("`version`", Box::new(|v| v["version"] = json!(2))),
            (
                "declaration_sha256",
                Box::new(|v| v["declaration_sha256"] = json!("AB")),
            ),
            ("`shards` is empty", Box::new(|v| v["shards"] = json!([]))),
            (
                "plain file name",
                Box::new(|v| v["shards"][0]["file"] = json!("../x.mrec.lmdb")),
            ),
            (
                "plain file name",
                Box::new(|v| v["shards"][0]["file"] = json!("")),
            ),
            (
                "listed twice",
                Box::new(|v| v["shards"][1]["file"] = json!("a.mrec.lmdb")),
            ),
            (
                "`n_frames`",
                Box::new(|v| v["shards"][1]["n_frames"] = json!(-1)),
            ),
            ("add up", Box::new(|v| v["n_records"] = json!(3))),
            (
                "shards[0]: `xxh3_128` is not 32 lowercase hex digits",
                Box::new(|v| v["shards"][0][DIGEST_FIELD] = json!("0123456789ABCDEF".repeat(2))),
            ),
            (
                "shards[1]: `xxh3_128` is not 32 lowercase hex digits",
                Box::new(|v| v["shards"][1][DIGEST_FIELD] = json!("ab".repeat(17))),
            ),
            (
                "shards[0]: `xxh3_128`",
                Box::new(|v| v["shards"][0][DIGEST_FIELD] = json!(12)),
            ),
            (
                "shards[0]: `xxh3_128`",
                Box::new(|v| v["shards"][0][DIGEST_FIELD] = Value::Null),
            ),
            (
                "overflow",
                Box::new(|v| {
                    v["shards"][0]["n_records"] = json!(u64::MAX);
                    v["shards"][1]["n_records"] = json!(1);
                }),
            ),
        ];
        for (expected, edit) in cases {
            let mut v = good.clone();
            edit(&mut v);
            let e = Manifest::from_json(&v).expect_err(expected);
            assert!(e.contains(expected), "{expected:?} not in {e:?}");
        }
    }
}
