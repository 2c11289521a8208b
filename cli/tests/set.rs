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

/// The digests `mrec set manifest` keeps, and each shard's digest now.
fn digests(dir: &Path) -> Vec<(String, String)> {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("mrec-set.json")).unwrap()).unwrap();
    manifest["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let file = s["file"].as_str().unwrap().to_string();
            (file, s["xxh3_128"].as_str().unwrap().to_string())
        })
        .collect()
}

/// Flips one byte of `path` in place (its size unchanged).
fn flip_byte(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8];
    file.read_exact_at(&mut b, at).unwrap();
    file.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
}

#[test]
fn verify_names_a_shard_whose_bytes_changed_with_both_digests() {
    let dir = shards("verify", 3);
    let (code, _, err) = mrec(&["set", "manifest", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    let kept = digests(&dir);
    for (file, digest) in &kept {
        assert_eq!(digest, &molrec::lmdb::file_digest(&dir.join(file)).unwrap());
    }
    let (code, out, err) = mrec(&["set", "verify", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("3 shards verified"), "{out}");
    // A byte of the last shard's first meta page past LMDB's meta fields,
    // where no reader looks.
    let changed = dir.join("part-2.mrec.lmdb");
    flip_byte(&changed, 5_000);
    let now = molrec::lmdb::file_digest(&changed).unwrap();
    for args in [&["set", "verify"][..], &["validate", "--digests"][..]] {
        let (code, out, err) = mrec(&[args, &[s(&dir)]].concat());
        assert_eq!(code, Some(1), "{args:?}: {out}{err}");
        assert!(
            err.contains(&format!(
                "set (digest): shard part-2.mrec.lmdb: its bytes changed since {} was written: \
                 xxh3_128 expected {}, actual {now}",
                dir.join("mrec-set.json").display(),
                kept[2].1
            )),
            "{args:?}: {err}"
        );
        assert!(err.contains("1 of 3 shards not verified"), "{err}");
        for ok in ["part-0", "part-1"] {
            assert!(
                out.contains(&format!("verified  {}", s(&dir.join(ok)))),
                "{out}"
            );
        }
    }
    // The reader's own checks do not see it: the byte is in no value.
    let (code, _, err) = mrec(&["validate", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    // A shard the manifest lists that is gone: exit 3, by name.
    std::fs::remove_file(dir.join("part-0.mrec.lmdb")).unwrap();
    let (code, _, err) = mrec(&["set", "verify", s(&dir)]);
    assert_eq!(code, Some(3), "{err}");
    assert!(
        err.contains("set (missing): shard part-0.mrec.lmdb"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn one_file_gets_its_own_manifest_beside_it() {
    let dir = shards("single", 1);
    let file = dir.join("part-0.mrec.lmdb");
    let (code, _, err) = mrec(&["set", "verify", s(&file)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("set (no-digest): shard part-0.mrec.lmdb: no manifest lists it"),
        "{err}"
    );
    let (code, out, err) = mrec(&["set", "manifest", s(&file)]);
    assert_eq!(code, Some(0), "{err}");
    let sidecar = dir.join("part-0.mrec.lmdb.mrec-set.json");
    assert!(out.contains(s(&sidecar)), "{out}");
    // The directory is not made a set of that one file.
    assert!(!dir.join("mrec-set.json").exists());
    let (code, out, err) = mrec(&["set", "verify", s(&file)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("1 shards verified"), "{out}");
    // The manifest opens as a set of one; the file alone reads as before.
    let (code, out, err) = mrec(&["info", s(&sidecar)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("1 shards") && out.contains("manifest"),
        "{out}"
    );
    let (code, out, _) = mrec(&["info", s(&file)]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("file "), "{out}");
    flip_byte(&file, 40_000);
    let (code, _, err) = mrec(&["set", "verify", s(&file)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("set (digest): shard part-0.mrec.lmdb"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_manifest_without_digests_reads_and_verify_says_so() {
    let dir = shards("old-manifest", 2);
    let (code, _, err) = mrec(&["set", "manifest", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    let path = dir.join("mrec-set.json");
    let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let good = manifest.clone();
    for shard in manifest["shards"].as_array_mut().unwrap() {
        shard.as_object_mut().unwrap().remove("xxh3_128");
    }
    std::fs::write(&path, manifest.to_string()).unwrap();
    let (code, out, err) = mrec(&["info", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("2 shards"), "{out}");
    let (code, _, err) = mrec(&["set", "verify", s(&dir)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("set (no-digest): shard part-1.mrec.lmdb: ")
            && err.contains("keeps no `xxh3_128` digest of it"),
        "{err}"
    );
    assert!(err.contains("2 of 2 shards not verified"), "{err}");
    // A digest that is not 32 lowercase hex digits: the manifest is refused.
    let mut bad = good.clone();
    bad["shards"][1]["xxh3_128"] = good["shards"][1]["xxh3_128"]
        .as_str()
        .unwrap()
        .to_uppercase()
        .into();
    std::fs::write(&path, bad.to_string()).unwrap();
    for command in ["info", "verify"] {
        let args: Vec<&str> = match command {
            "info" => vec!["info", s(&dir)],
            _ => vec!["set", "verify", s(&dir)],
        };
        let (code, _, err) = mrec(&args);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains("set (manifest): ")
                && err.contains("shards[1]: `xxh3_128` is not 32 lowercase hex digits"),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
