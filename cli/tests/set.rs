//! `mrec info`, `dump` and `validate` over a sharded set (a directory, a
//! glob pattern, several files, a manifest), and `mrec set manifest`: the
//! set reads as its shards one after the other; shards that do not form a
//! set are refused naming the shard.

mod common;

use common::mrec;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/examples/water-and-ammonia.json")
}

/// A fresh directory of `n` shards, each the example collection.
fn shards(name: &str, n: usize) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mrec-set-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..n {
        let out = dir.join(format!("part-{i}.mrec.lmdb"));
        let (code, _, err) = mrec(&["write", example().to_str().unwrap(), out.to_str().unwrap()]);
        assert_eq!(code, Some(0), "{err}");
    }
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_directory_is_one_collection_to_info_dump_and_validate() {
    let dir = shards("dir", 3);
    let (code, out, err) = mrec(&["info", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("3 shards") && out.contains("no manifest"),
        "{out}"
    );
    assert!(out.contains("records       9"), "{out}");
    let (code, out, err) = mrec(&["dump", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    let whole: Value = serde_json::from_str(&out).unwrap();
    let (_, one, _) = mrec(&["dump", s(&dir.join("part-0.mrec.lmdb"))]);
    let one: Value = serde_json::from_str(&one).unwrap();
    let records = whole["records"].as_array().unwrap();
    assert_eq!(records.len(), 9);
    // The shards one after the other: the example's records three times.
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r, &one["records"][i % 3], "record {i}");
    }
    assert_eq!(whole["sequence_schema"], one["sequence_schema"]);
    assert_eq!(
        whole["index"]["code"]["values"].as_array().unwrap().len(),
        9
    );
    let (code, out, err) = mrec(&["validate", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("conforms (3 shards, 9 records"), "{out}");
    // A pattern, and a list of files, name sets too.
    let pattern = dir.join("part-[01].mrec.lmdb");
    let (code, out, _) = mrec(&["info", s(&pattern)]);
    assert_eq!(code, Some(0));
    assert!(out.contains("2 shards"), "{out}");
    let (a, b) = (dir.join("part-2.mrec.lmdb"), dir.join("part-0.mrec.lmdb"));
    let (code, out, _) = mrec(&["validate", s(&a), s(&b)]);
    assert_eq!(code, Some(0));
    assert!(out.contains("(2 shards, 6 records"), "{out}");
}

#[test]
fn the_manifest_is_written_and_then_opens_the_set() {
    let dir = shards("manifest", 2);
    let (code, out, err) = mrec(&["set", "manifest", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("2 shards, 6 records"), "{out}");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("mrec-set.json")).unwrap()).unwrap();
    assert_eq!(manifest["format"], "mrec-set");
    assert_eq!(manifest["shards"][1]["file"], "part-1.mrec.lmdb");
    let (code, out, _) = mrec(&["info", s(&dir)]);
    assert_eq!(code, Some(0));
    assert!(out.contains("manifest"), "{out}");
    // A shard the manifest names that is gone: refused by name, exit 3.
    std::fs::remove_file(dir.join("part-1.mrec.lmdb")).unwrap();
    let (code, _, err) = mrec(&["info", s(&dir)]);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("set (missing): shard part-1.mrec.lmdb"),
        "{err}"
    );
}

#[test]
fn shards_whose_declarations_differ_are_refused_naming_the_shard() {
    let dir = shards("differ", 2);
    let mut other: Value = serde_json::from_slice(&std::fs::read(example()).unwrap()).unwrap();
    other["meta"]["units"]["length"] = "nm".into();
    let json = dir.join("other.json");
    std::fs::write(&json, other.to_string()).unwrap();
    let (code, _, err) = mrec(&["write", s(&json), s(&dir.join("part-9.mrec.lmdb"))]);
    assert_eq!(code, Some(0), "{err}");
    for command in ["info", "validate", "dump"] {
        let (code, _, err) = mrec(&[command, s(&dir)]);
        assert_eq!(code, Some(1), "{command}: {err}");
        assert!(
            err.contains("set (declaration): shard part-9.mrec.lmdb"),
            "{err}"
        );
        assert!(err.contains("units.length"), "{err}");
    }
    let (code, _, err) = mrec(&["set", "manifest", s(&dir)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(!dir.join("mrec-set.json").exists());
}
