//! Sharded sets (`lmdb::Set`): several files read as one, numbered across
//! shards; declarations that differ refused naming the shard and what
//! differs; the manifest (written last, read lazily, a missing or changed
//! shard refused by name); a pending write refused.

mod common;

use common::{collection_json, scratch_dir};
use molrec::lmdb::set::{Manifest, MANIFEST_NAME, PENDING_NAME};
use molrec::lmdb::{write_collection, Reader, Set, SetOptions, ShardInfo, WriterOptions};
use molrec::model_json::collection_from_json;
use molrec::{Error, SetProblem};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Writes `records` records of `frames` frames each at `path`, with the
/// declaration stated (a derived one depends on the records).
fn shard(path: &Path, records: usize, frames: usize, shift: f64) {
    write_json(path, &declared(collection_json(records, frames, shift)));
}

fn declared(mut json: Value) -> Value {
    json["sequence_schema"] = serde_json::json!({"blocks": {"atoms": {"columns": {
        "x": {"dtype": "f64"}}}}, "meta": {"pe": {"dtype": "f64"}}});
    json
}

fn write_json(path: &Path, json: &Value) {
    let c = collection_from_json(json).unwrap();
    let options = WriterOptions {
        overwrite: true,
        ..WriterOptions::default()
    };
    write_collection(path, c, options).unwrap();
}

/// Three shards of 2, 0 and 3 records (2, 3 and 1 frames each).
fn three(what: &str) -> (PathBuf, Vec<PathBuf>) {
    let dir = scratch_dir(what);
    let files: Vec<PathBuf> = ["a", "b", "c"]
        .iter()
        .map(|n| dir.join(format!("{n}.mrec.lmdb")))
        .collect();
    shard(&files[0], 2, 2, 0.0);
    // A shard without records is a set's shard too.
    shard(&files[1], 0, 3, 1.0);
    shard(&files[2], 3, 1, 2.0);
    (dir, files)
}

/// The set a directory, a manifest, a pattern or a file names.
fn open(spec: &Path) -> molrec::Result<Set> {
    Set::open(&[spec.to_path_buf()], SetOptions::default())
}

fn problem(e: &Error) -> Option<(SetProblem, String)> {
    match e {
        Error::Set { problem, shard, .. } => Some((*problem, shard.clone())),
        _ => None,
    }
}

#[test]
fn a_directory_reads_as_its_shards_one_after_the_other() {
    let (dir, files) = three("set-dir");
    let set = open(&dir).unwrap();
    assert_eq!(set.n_shards(), 3);
    assert_eq!(set.n_records(), 5);
    assert_eq!(set.n_frames(), 2 * 2 + 3);
    let mut r = 0;
    let txn = set.txn();
    for file in &files {
        let reader = Reader::open(file).unwrap();
        for local in 0..reader.n_records() {
            assert_eq!(
                txn.record(r).unwrap(),
                reader.record(local).unwrap(),
                "record {r}"
            );
            r += 1;
        }
    }
    assert!(txn.record(r).is_err());
    // Frames by ordinal across shards, in any order: each frame is the
    // same frame of its record read whole.
    let js: Vec<u64> = (0..set.n_frames()).rev().collect();
    let mut seen = Vec::new();
    set.frames(&js, |f| {
        let record = set.record_arrays(f.record)?;
        let x = record.trajectory.as_ref().unwrap().blocks["atoms"]
            .f64_at("x", f.frame.position as usize)
            .unwrap()
            .to_vec();
        let mut got = Vec::new();
        if let Some(c) = f.frame.block("atoms").and_then(|b| b.column("x")) {
            let mut data = molrec::model::ColumnData::F64(Vec::new());
            c.append_to(&mut data)?;
            if let molrec::model::ColumnData::F64(v) = data {
                got = v;
            }
        }
        assert_eq!(got, x, "frame {}", f.ordinal);
        assert_eq!(set.locate_frame(f.ordinal).map(|(s, _)| s), Some(f.shard));
        seen.push(f.ordinal);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, js);
    assert_eq!(set.frame_counts().unwrap(), vec![2, 2, 1, 1, 1]);
    let whole = set.read_collection().unwrap();
    assert_eq!(whole.records.len(), 5);
    // A glob names the same set; a list of files too.
    let glob = Set::open(&[dir.join("*.mrec.lmdb")], SetOptions::default()).unwrap();
    assert_eq!(glob.n_records(), 5);
    let listed = Set::open(&files, SetOptions { checked: true }).unwrap();
    assert_eq!(listed.declaration_sha256(), set.declaration_sha256());
}

#[test]
fn a_shard_whose_declaration_differs_is_refused_by_name() {
    let (dir, _) = three("set-declaration");
    let mut other = declared(collection_json(1, 1, 0.0));
    other["meta"]["units"]["energy"] = "eV".into();
    write_json(&dir.join("d.mrec.lmdb"), &other);
    let e = open(&dir).expect_err("refused");
    assert_eq!(
        problem(&e),
        Some((SetProblem::Declaration, "d.mrec.lmdb".into()))
    );
    let message = e.to_string();
    assert!(message.contains("units.energy"), "{message}");
    assert!(
        message.contains("\"eV\"") && message.contains("kcal/mol"),
        "{message}"
    );
    assert!(message.contains("a.mrec.lmdb"), "{message}");
    // A schema that differs names its path.
    let mut other = declared(collection_json(1, 1, 0.0));
    other["sequence_schema"]["blocks"]["atoms"]["columns"]["y"] =
        serde_json::json!({"dtype": "f64"});
    write_json(&dir.join("d.mrec.lmdb"), &other);
    let e = open(&dir).expect_err("refused");
    assert!(
        e.to_string()
            .contains("sequence_schema.blocks.atoms.columns.y"),
        "{e}"
    );
}

#[test]
fn a_manifest_opens_the_set_without_opening_its_shards() {
    let (dir, files) = three("set-manifest");
    let set = open(&dir).unwrap();
    let manifest = set.manifest(&dir).unwrap();
    assert_eq!(manifest.shards.len(), 3);
    assert_eq!(manifest.n_records(), 5);
    let path = manifest.install(&dir).unwrap();
    assert_eq!(path, dir.join(MANIFEST_NAME));
    assert_eq!(Manifest::read(&path).unwrap(), manifest);
    drop(set);
    let lazy = open(&dir).unwrap();
    assert_eq!(lazy.manifest_path(), Some(path.as_path()));
    assert_eq!((lazy.n_records(), lazy.n_frames()), (5, 7));
    assert!((0..3).all(|s| !lazy.is_open(s)));
    // Reading record 4 opens its shard only.
    let eager = Set::open_files(&files, SetOptions::default()).unwrap();
    assert_eq!(lazy.record(4).unwrap(), eager.record(4).unwrap());
    assert!(!lazy.is_open(0) && !lazy.is_open(1) && lazy.is_open(2));
    // The manifest file itself names the set too.
    assert_eq!(open(&path).unwrap().n_records(), 5);
}

#[test]
fn a_missing_or_changed_shard_is_refused_by_name() {
    let (dir, files) = three("set-missing");
    let set = open(&dir).unwrap();
    set.manifest(&dir).unwrap().install(&dir).unwrap();
    drop(set);
    // Changed: another collection (another size) under the shard's name.
    shard(&files[2], 3000, 3, 2.0);
    let e = open(&dir).expect_err("refused");
    assert_eq!(
        problem(&e),
        Some((SetProblem::Changed, "c.mrec.lmdb".into()))
    );
    // Missing.
    molrec::lmdb::remove_with_lock_file(&files[1]);
    let e = open(&dir).expect_err("refused");
    assert_eq!(
        problem(&e),
        Some((SetProblem::Missing, "b.mrec.lmdb".into()))
    );
    assert!(e.to_string().contains("b.mrec.lmdb"), "{e}");
}

#[test]
fn a_shard_is_checked_against_its_description_when_it_opens() {
    let (_, files) = three("set-described");
    let info = |p: &Path| {
        let r = Reader::open(p).unwrap();
        ShardInfo {
            path: p.to_path_buf(),
            n_records: r.n_records(),
            n_frames: r.n_frames(),
            bytes: std::fs::metadata(p).unwrap().len(),
        }
    };
    let good = Set::open_files(&files, SetOptions::default()).unwrap();
    let digest = good.declaration_sha256().to_string();
    // Counts that are not the shard's.
    let mut wrong = info(&files[0]);
    wrong.n_records += 1;
    let set = Set::from_parts(
        vec![wrong, info(&files[2])],
        digest.clone(),
        SetOptions::default(),
    )
    .unwrap();
    assert!(set.record(3).is_ok(), "the other shard reads");
    let e = set.record(0).expect_err("refused");
    assert_eq!(
        problem(&e),
        Some((SetProblem::Changed, "a.mrec.lmdb".into()))
    );
    // A declaration digest that is not the shard's.
    let set =
        Set::from_parts(vec![info(&files[0])], "0".repeat(64), SetOptions::default()).unwrap();
    let e = set.record(0).expect_err("refused");
    assert_eq!(
        problem(&e),
        Some((SetProblem::Changed, "a.mrec.lmdb".into()))
    );
    assert!(e.to_string().contains("sha256"), "{e}");
}

#[test]
fn a_pending_write_or_an_empty_directory_does_not_open() {
    let (dir, _) = three("set-pending");
    std::fs::write(dir.join(PENDING_NAME), "{}").unwrap();
    let e = open(&dir).expect_err("refused");
    assert_eq!(problem(&e).map(|p| p.0), Some(SetProblem::Incomplete));
    // Installing the manifest ends the pending state.
    let files = molrec::lmdb::set::shard_files(&dir).unwrap();
    let set = Set::open_files(&files, SetOptions::default()).unwrap();
    set.manifest(&dir).unwrap().install(&dir).unwrap();
    assert!(!dir.join(PENDING_NAME).exists());
    assert_eq!(open(&dir).unwrap().n_records(), 5);
    let empty = scratch_dir("set-empty");
    let e = open(&empty).expect_err("refused");
    assert_eq!(problem(&e).map(|p| p.0), Some(SetProblem::Empty));
    let e = Set::open(&[empty.join("*.mrec.lmdb")], SetOptions::default()).expect_err("refused");
    assert_eq!(problem(&e).map(|p| p.0), Some(SetProblem::Empty));
    // A file listed twice.
    let (_, files) = three("set-twice");
    let e = Set::open(&[files[0].clone(), files[0].clone()], SetOptions::default())
        .expect_err("refused");
    assert_eq!(problem(&e).map(|p| p.0), Some(SetProblem::Duplicate));
}

#[test]
fn a_manifest_that_is_not_one_is_refused() {
    let (dir, _) = three("set-bad-manifest");
    let path = dir.join(MANIFEST_NAME);
    for text in [
        "not json".to_string(),
        "{}".to_string(),
        r#"{"format": "mrec-set", "version": 1, "declaration_sha256": "x", "shards": []}"#.into(),
        " ".repeat((molrec::lmdb::set::MAX_MANIFEST_BYTES + 1) as usize),
    ] {
        std::fs::write(&path, &text).unwrap();
        let e = open(&dir).expect_err("refused");
        assert_eq!(problem(&e).map(|p| p.0), Some(SetProblem::Manifest), "{e}");
    }
    // A shard outside the manifest's directory cannot be listed in it.
    let (_, files) = three("set-elsewhere");
    let set = Set::open_files(&files, SetOptions::default()).unwrap();
    let e = set.manifest(&dir).expect_err("refused");
    assert_eq!(problem(&e).map(|p| p.0), Some(SetProblem::Manifest));
}

#[test]
fn errors_inside_a_shard_name_the_shard() {
    let (dir, files) = three("set-in-shard");
    std::fs::write(&files[1], b"").unwrap();
    let e = open(&dir).expect_err("refused");
    match e {
        Error::InShard { shard, error } => {
            assert_eq!(shard, files[1]);
            assert!(matches!(*error, Error::Uncommitted));
        }
        other => panic!("{other}"),
    }
}

#[test]
fn the_writer_hashes_what_it_installs_and_verify_compares_it() {
    let (dir, files) = three("set-digests");
    let c = collection_from_json(&declared(collection_json(2, 2, 5.0))).unwrap();
    let d = dir.join("d.mrec.lmdb");
    let options = WriterOptions {
        digest: true,
        ..WriterOptions::default()
    };
    let written = write_collection(&d, c, options).unwrap();
    let on_disk = std::fs::read(&d).unwrap();
    assert_eq!(written.bytes, on_disk.len() as u64);
    assert_eq!(written.digest, Some(molrec::lmdb::digest_of(&on_disk)));
    // Without the option the file is not hashed.
    let plain = collection_from_json(&declared(collection_json(1, 1, 6.0))).unwrap();
    let e = dir.join("e.mrec.lmdb");
    let unhashed = write_collection(&e, plain, WriterOptions::default()).unwrap();
    assert_eq!(unhashed.digest, None);
    std::fs::remove_file(&e).unwrap();

    let mut files = files;
    files.push(d.clone());
    let set = Set::open_files(&files, SetOptions::default()).unwrap();
    let mut manifest = set.manifest(&dir).unwrap();
    assert!(manifest.shards.iter().all(|s| s.digest.is_none()));
    manifest.shards[3].digest = written.digest.clone();
    manifest.fill_digests(&dir).unwrap();
    manifest.install(&dir).unwrap();
    let checks = molrec::lmdb::set::verify_digests(std::slice::from_ref(&dir)).unwrap();
    assert_eq!(checks.len(), 4);
    assert!(checks
        .iter()
        .all(|c| c.is_verified() && c.error().is_none()));
    // One byte of the second shard changed, its size kept: named, with the
    // digest kept and the one found.
    let mut bytes = std::fs::read(&files[1]).unwrap();
    bytes[7_000] ^= 1;
    std::fs::write(&files[1], &bytes).unwrap();
    let checks = molrec::lmdb::set::verify_digests(std::slice::from_ref(&dir)).unwrap();
    let bad: Vec<_> = checks.iter().filter_map(|c| c.error()).collect();
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(
        problem(&bad[0]),
        Some((SetProblem::Digest, "b.mrec.lmdb".into()))
    );
    assert_eq!(
        checks[1].actual,
        Some(molrec::lmdb::digest_of(&bytes)),
        "the digest found"
    );
    assert_eq!(checks[1].expected, manifest.shards[1].digest);
    // The set itself still opens: its sizes and counts are the manifest's.
    assert!(open(&dir).is_ok());
    // A file alone: its own manifest, which must list it.
    let alone = molrec::lmdb::set::verify_digests(std::slice::from_ref(&d)).unwrap();
    let e = alone[0].error().expect("no manifest lists it");
    assert_eq!(
        problem(&e),
        Some((SetProblem::NoDigest, "d.mrec.lmdb".into()))
    );
    let sidecar = molrec::lmdb::set::sidecar_manifest(&d);
    let mut own = manifest.clone();
    own.shards.retain(|s| s.file == "a.mrec.lmdb");
    own.install_at(&sidecar).unwrap();
    let e = molrec::lmdb::set::verify_digests(std::slice::from_ref(&d)).unwrap_err();
    assert_eq!(problem(&e).map(|p| p.0), Some(SetProblem::Manifest));
    assert!(e.to_string().contains("does not list this file"), "{e}");
    let mut own = manifest.clone();
    own.shards.retain(|s| s.file == "d.mrec.lmdb");
    own.install_at(&sidecar).unwrap();
    let alone = molrec::lmdb::set::verify_digests(std::slice::from_ref(&d)).unwrap();
    assert!(alone[0].is_verified());
    let _ = std::fs::remove_dir_all(&dir);
}
