//! The manifest of a set (`mrec-set.json` beside its shards): the shards in
//! order with their counts and sizes, and the digest of the declaration
//! they share, so that a set of thousands of shards opens from one small
//! file. Input from disk: read with a size bound and checked whole before
//! it is used. Written to a temporary name, synced and renamed, last.

use super::source::{MANIFEST_NAME, PENDING_NAME};
use crate::error::{Error, Result, SetProblem};
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
                json!({"file": s.file, "n_records": s.n_records,
                       "n_frames": s.n_frames, "bytes": s.bytes})
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

    /// Writes the manifest into `dir` as [`MANIFEST_NAME`]: to a temporary
    /// file, synced, renamed over the name, the directory synced; then
    /// deletes the pending marker ([`PENDING_NAME`]) if there is one. So
    /// the manifest appears whole, and only once its shards are.
    pub fn install(&self, dir: &Path) -> Result<PathBuf> {
        let path = dir.join(MANIFEST_NAME);
        let temp = dir.join(format!(".{MANIFEST_NAME}.{}.tmp", std::process::id()));
        let text = serde_json::to_string_pretty(&self.to_json())
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
        let written = (|| -> std::io::Result<()> {
            let mut file = std::fs::File::create(&temp)?;
            file.write_all(text.as_bytes())?;
            file.write_all(b"\n")?;
            file.sync_all()?;
            std::fs::rename(&temp, &path)?;
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(())
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_file(&temp);
            return Err(Error::io_at(&path, e));
        }
        match std::fs::remove_file(dir.join(PENDING_NAME)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io_at(&dir.join(PENDING_NAME), e)),
        }
        Ok(path)
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
    Ok(ManifestShard {
        file: file.to_string(),
        n_records: count("n_records")?,
        n_frames: count("n_frames")?,
        bytes: count("bytes")?,
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
                },
                ManifestShard {
                    file: "b.mrec.lmdb".into(),
                    n_records: 0,
                    n_frames: 0,
                    bytes: 4096,
                },
            ],
        }
    }

    #[test]
    fn reads_back_what_it_writes() {
        let m = sample();
        assert_eq!(Manifest::from_json(&m.to_json()), Ok(m));
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
