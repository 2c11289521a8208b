//! Seeds the corpora of the cargo-fuzz targets in `fuzz/` from the
//! project's fixtures (SECURITY.md, "Fuzzing"):
//!
//! - `frame_decode`: every frame value of `fixtures/golden/*.mrec.lmdb`,
//!   one file per value;
//! - `open_and_read`: each golden file's keys and values as one input, in
//!   the target's `key_len u8 | value_len u16 LE | key | value` entries;
//! - `write_read`: every canonical JSON collection under `fixtures/`
//!   (`collection/`, `binding/`, the golden `*.dump.json`), without
//!   whitespace.
//!
//! ```sh
//! cargo run --example fuzz_seeds -- fuzz/corpus
//! ```
//!
//! Run from the repository's root. Existing seed files of the same names
//! are replaced; other files of the corpora are left alone.
//! `harness/tests/fuzz_replay.rs` includes this file to make the seeds it
//! replays ([`write_seeds`]).

use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use std::fs;
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "fuzz/corpus".into()),
    );
    let fixtures = Path::new("fixtures");
    if !fixtures.is_dir() {
        return Err("run from the repository's root (no fixtures/ here)".into());
    }
    println!("{}", write_seeds(fixtures, &out)?);
    Ok(())
}

/// Writes the three corpora's seeds from `fixtures` under `out`; returns a
/// line that counts them.
pub fn write_seeds(fixtures: &Path, out: &Path) -> Result<String, Box<dyn std::error::Error>> {
    let dirs = ["frame_decode", "open_and_read", "write_read"].map(|d| out.join(d));
    for dir in &dirs {
        fs::create_dir_all(dir)?;
    }
    let [frames_dir, entries_dir, json_dir] = &dirs;
    let (mut frames, mut files, mut texts) = (0, 0, 0);
    for path in sorted_files(&fixtures.join("golden"), ".mrec.lmdb")? {
        let stem = file_stem(&path, ".mrec.lmdb");
        let mut entries = Vec::new();
        let mut fits = true;
        for (k, (key, value)) in key_values(&path)?.into_iter().enumerate() {
            if value.starts_with(b"MRF1") {
                fs::write(frames_dir.join(format!("{stem}-{k}")), &value)?;
                frames += 1;
            }
            // The target's entry lengths: a u8 key length, a u16 value length.
            let (Ok(klen), Ok(vlen)) = (u8::try_from(key.len()), u16::try_from(value.len())) else {
                fits = false;
                continue;
            };
            entries.push(klen);
            entries.extend_from_slice(&vlen.to_le_bytes());
            entries.extend_from_slice(&key);
            entries.extend_from_slice(&value);
        }
        if fits {
            fs::write(entries_dir.join(&stem), &entries)?;
            files += 1;
        }
    }
    for (dir, suffix) in [
        ("collection", ".json"),
        ("binding", ".json"),
        ("golden", ".dump.json"),
    ] {
        for path in sorted_files(&fixtures.join(dir), suffix)? {
            let value: serde_json::Value = serde_json::from_slice(&fs::read(&path)?)?;
            let name = format!("{dir}-{}", file_stem(&path, suffix));
            fs::write(json_dir.join(name), serde_json::to_string(&value)?)?;
            texts += 1;
        }
    }
    Ok(format!(
        "{frames} frame values, {files} files as entries, {texts} collections, under {}",
        out.display()
    ))
}

/// The files of `dir` whose names end with `suffix`, in name order.
fn sorted_files(dir: &Path, suffix: &str) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.to_string_lossy().ends_with(suffix) {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

fn file_stem(path: &Path, suffix: &str) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    name.strip_suffix(suffix).unwrap_or(&name).to_string()
}

/// A key and its value.
type Entry = (Vec<u8>, Vec<u8>);

/// Every key and value of an LMDB file, in key order.
fn key_values(path: &Path) -> Result<Vec<Entry>, heed::Error> {
    let mut options = EnvOpenOptions::new();
    // SAFETY: NO_LOCK leaves no lock file beside the fixture; the fixtures
    // are only read, and nothing writes them while this runs.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY | EnvFlags::NO_LOCK) };
    // SAFETY: the file is opened once in this process, read-only.
    let env = unsafe { options.open(path) }?;
    let txn = env.read_txn()?;
    let Some(db): Option<Database<Bytes, Bytes>> = env.open_database(&txn, None)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for item in db.iter(&txn)? {
        let (key, value) = item?;
        out.push((key.to_vec(), value.to_vec()));
    }
    Ok(out)
}
