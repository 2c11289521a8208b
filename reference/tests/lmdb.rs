//! The LMDB binding through real files: writer, reader, refusals of files
//! broken by hand with raw heed writes.

mod common;

use common::{
    assert_second_writer_refused, collection_json, f64col, lock_path, mrec, scratch_file,
};
use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use molrec::lmdb::{frame_key, partial_path, write_collection, Reader, Writer, WriterOptions};
use molrec::model_json::{collection_from_json, collection_to_json};
use molrec::{Clause, Error};
use serde_json::{json, Value};
use std::ffi::OsStr;
use std::path::Path;

fn atoms(x: &[f64]) -> Value {
    json!({"count": x.len(), "columns": {"x": f64col(x), "y": f64col(&vec![0.0; x.len()]), "z": f64col(&vec![0.0; x.len()])}})
}

fn water_collection(records: usize) -> Value {
    let recs: Vec<Value> = (0..records)
        .map(|r| {
            let shift = r as f64 * 0.01;
            json!({
                "meta": {"n": r},
                "system": {"blocks": {"atoms": {"count": 3, "columns": {
                    "element": {"dtype": "string", "shape": [3], "values": ["O", "H", "H"]}}}}},
                "trajectory": {"frames": [
                    {"step": 0, "meta": {"pe": -76.0 - shift}, "blocks": {"atoms": atoms(&[0.0, 0.96 + shift, -0.24])}},
                    {"step": 1, "meta": {"pe": -76.1}, "blocks": {"atoms": atoms(&[0.0, 0.96 + shift, -0.24])}},
                    {"step": 2, "meta": {"pe": -76.2}, "blocks": {"atoms": atoms(&[0.01, 0.95, -0.25])}}
                ]}
            })
        })
        .collect();
    json!({"meta": {"units": {"length": "angstrom", "energy": "kcal/mol"}}, "records": recs})
}

fn write_json(path: &Path, c: &Value, options: WriterOptions) -> Result<(), Error> {
    write_collection(path, collection_from_json(c)?, options).map(|_| ())
}

fn update_blocks(reader: &Reader, j: u64) -> Vec<String> {
    let txn = reader.txn().unwrap();
    let frame = txn.frame_update(j).unwrap();
    frame.blocks.keys().map(|k| k.to_string()).collect()
}

#[test]
fn unchanged_blocks_are_not_restated_and_carry_forward_never_crosses_records() {
    let path = scratch_file("lmdb-test", "carry");
    write_json(&path, &water_collection(2), WriterOptions::default()).unwrap();
    let reader = Reader::open(&path).unwrap();
    // Record 0: frame 1 repeats frame 0 bit for bit, so it holds no block.
    assert_eq!(update_blocks(&reader, 0), vec!["atoms"]);
    assert_eq!(update_blocks(&reader, 1), Vec::<String>::new());
    assert_eq!(update_blocks(&reader, 2), vec!["atoms"]);
    // Record 1's first frame restates atoms although record 0 ended with
    // different values: nothing carries across the boundary.
    assert_eq!(update_blocks(&reader, 3), vec!["atoms"]);
    // Resolved, every frame has atoms.
    let record = reader.record(0).unwrap();
    let frames = &record.trajectory.unwrap().frames;
    assert!(frames.iter().all(|f| f.blocks.contains_key("atoms")));
}

#[test]
fn a_first_frame_restates_even_an_identical_block() {
    let mut c = water_collection(2);
    // Make record 1's frames identical to record 0's last frame.
    let last = c["records"][0]["trajectory"]["frames"][2]["blocks"].clone();
    for f in c["records"][1]["trajectory"]["frames"]
        .as_array_mut()
        .unwrap()
    {
        f["blocks"] = last.clone();
    }
    let path = scratch_file("lmdb-test", "restate");
    write_json(&path, &c, WriterOptions::default()).unwrap();
    let reader = Reader::open(&path).unwrap();
    assert_eq!(update_blocks(&reader, 3), vec!["atoms"]);
    assert_eq!(update_blocks(&reader, 4), Vec::<String>::new());
}

#[test]
fn many_small_transactions_read_back_whole() {
    let c = water_collection(50);
    let path = scratch_file("lmdb-test", "batches");
    write_json(
        &path,
        &c,
        WriterOptions {
            overwrite: false,
            batch_bytes: 1024,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let back = Reader::open(&path).unwrap().read_collection().unwrap();
    assert_eq!(back.records.len(), 50);
    let once = collection_to_json(&back);
    let path2 = scratch_file("lmdb-test", "batches-again");
    write_collection(
        &path2,
        collection_from_json(&once).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();
    let twice = collection_to_json(&Reader::open(&path2).unwrap().read_collection().unwrap());
    assert_eq!(once, twice);
}

/// A writer dropped before `finish`: its partial file, which every reader
/// refused as uncommitted while it was written, is deleted with its lock
/// file, and nothing ever appears at the path.
#[test]
fn a_writer_dropped_before_finish_leaves_nothing_at_its_path() {
    let path = scratch_file("lmdb-test", "uncommitted");
    let partial = partial_path(&path);
    let c = collection_from_json(&water_collection(20)).unwrap();
    let mut writer = Writer::create(
        &path,
        c.header.clone(),
        WriterOptions {
            overwrite: false,
            batch_bytes: 512,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for r in c.records {
        writer.append(r).unwrap();
    }
    // In another process: heed opens a path once per process.
    let (code, _, stderr) = mrec(&[OsStr::new("validate"), partial.as_os_str()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains(Clause::MetaRequired.id()), "{stderr}");
    assert!(!path.exists());
    drop(writer);
    for gone in [&path, &partial, &lock_path(&partial)] {
        assert!(!gone.exists(), "{} is left", gone.display());
    }
}

#[test]
fn a_second_writer_on_the_same_file_is_refused() {
    let path = scratch_file("lmdb-test", "busy");
    let c = collection_from_json(&water_collection(1)).unwrap();
    let first = Writer::create(&path, c.header.clone(), WriterOptions::default()).unwrap();
    assert_second_writer_refused(&path, c.header.clone());
    drop(first);
}

#[test]
fn an_existing_file_is_not_overwritten_by_default() {
    let path = scratch_file("lmdb-test", "exists");
    write_json(&path, &water_collection(1), WriterOptions::default()).unwrap();
    assert!(matches!(
        write_json(&path, &water_collection(1), WriterOptions::default()),
        Err(Error::Io(_))
    ));
    write_json(
        &path,
        &water_collection(2),
        WriterOptions {
            overwrite: true,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    assert_eq!(Reader::open(&path).unwrap().n_records(), 2);
}

/// Overwriting a collection a reader has open: the reader keeps reading the
/// old one, whole (the writer used to empty the file in place, and the
/// reader died of SIGBUS on its next read). A reader opening the path
/// afterwards, in another process while the first is still open, reads the
/// new one: LMDB's readers take the last transaction's id from the lock
/// file, so one left by the old file's readers sent them to the wrong meta
/// page of the new one ("no `meta` key") when the two ids' parities
/// differed. Four replacements of one to four records, in batches of 300
/// bytes, give both parities.
#[test]
fn an_overwrite_leaves_the_readers_of_the_old_file_reading_it_whole() {
    let path = scratch_file("lmdb-test", "replaced");
    let old = collection_from_json(&collection_json(3000, 4, 0.0)).unwrap();
    write_collection(&path, old.clone(), WriterOptions::default()).unwrap();
    let reader = Reader::open(&path).unwrap();
    let txn = reader.txn().unwrap();
    assert_eq!(txn.record(2999).unwrap(), old.records[2999]);

    let overwrite = WriterOptions {
        overwrite: true,
        batch_bytes: 300,
        ..WriterOptions::default()
    };
    for n in 1..=4 {
        write_json(&path, &collection_json(n, 4, 1.0), overwrite.clone()).unwrap();
        let (code, dump, stderr) = mrec(&[OsStr::new("dump"), path.as_os_str()]);
        assert_eq!(code, Some(0), "{n} records: {stderr}");
        let dumped: Value = serde_json::from_str(&dump).unwrap();
        assert_eq!(dumped["records"].as_array().map(Vec::len), Some(n));
    }
    for (r, record) in old.records.iter().enumerate() {
        assert_eq!(&txn.record(r as u64).unwrap(), record, "record {r}");
    }
    drop(txn);
    drop(reader);
    assert_eq!(Reader::open(&path).unwrap().n_records(), 4);
    assert!(!partial_path(&path).exists());
}

/// Whether heed itself can open `path` now: it cannot while an environment
/// of the path is open in this process.
fn heed_opens(path: &Path) -> Result<(), heed::Error> {
    let mut options = EnvOpenOptions::new();
    // SAFETY: valid flags for a read-only open; nothing writes the file now.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) };
    // SAFETY: read-only, and dropped at once.
    unsafe { options.open(path) }.map(drop)
}

/// Readers of one file in a process share its environment (LMDB opens a
/// file once per process): a second open works while the first reader
/// lives, by the same path or by a hard link, every reader reads the whole
/// collection, and dropping some leaves the others reading. Once all are
/// dropped the environment is closed: heed opens the path again.
#[test]
fn readers_of_one_file_share_its_environment() {
    let path = scratch_file("lmdb-test", "shared");
    let link = scratch_file("lmdb-test", "shared-link");
    let c = collection_from_json(&collection_json(5, 3, 0.0)).unwrap();
    write_collection(&path, c.clone(), WriterOptions::default()).unwrap();
    std::fs::hard_link(&path, &link).unwrap();

    let first = Reader::open(&path).unwrap();
    let held = first.txn().unwrap();
    let second = Reader::open(&path).unwrap();
    let linked = Reader::open(&link).unwrap();
    assert!(matches!(
        heed_opens(&path),
        Err(heed::Error::EnvAlreadyOpened)
    ));
    for reader in [&second, &linked] {
        let txn = reader.txn().unwrap();
        for (r, record) in c.records.iter().enumerate() {
            assert_eq!(&txn.record(r as u64).unwrap(), record, "record {r}");
        }
    }
    drop(second);
    drop(linked);
    assert_eq!(held.record(4).unwrap(), c.records[4]);
    assert!(heed_opens(&path).is_err(), "closed while a reader lives");
    drop(held);
    drop(first);
    heed_opens(&path).unwrap();
    heed_opens(&link).unwrap();
    assert_eq!(Reader::open(&link).unwrap().n_records(), 5);
}

/// Threads that open, read and drop readers of one file at once never meet
/// heed's refusal of a second open, nor an environment still closing.
#[test]
fn threads_opening_and_dropping_readers_of_one_file_all_read_it() {
    let path = scratch_file("lmdb-test", "shared-threads");
    let c = collection_from_json(&collection_json(4, 2, 0.0)).unwrap();
    write_collection(&path, c.clone(), WriterOptions::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (path, c) = (&path, &c);
            s.spawn(move || {
                for i in 0..200u64 {
                    let reader =
                        Reader::open(path).unwrap_or_else(|e| panic!("thread {t}, open {i}: {e}"));
                    let r = (t + i) % 4;
                    let record = reader.txn().unwrap().record(r).unwrap();
                    assert_eq!(record, c.records[r as usize], "thread {t}, open {i}");
                }
            });
        }
    });
    heed_opens(&path).unwrap();
}

/// A file installed at a path whose earlier file this process still reads
/// cannot be opened by that path until the earlier readers are dropped
/// (LMDB opens one file per path in a process); the refusal says so and
/// names the path, and the earlier reader reads its collection whole.
/// A path that this process opened through heed directly, or a writer's
/// partial file, is refused alike.
#[test]
fn a_file_installed_over_one_still_read_opens_once_its_readers_are_dropped() {
    let path = scratch_file("lmdb-test", "shared-replaced");
    let old = collection_from_json(&collection_json(3, 2, 0.0)).unwrap();
    write_collection(&path, old.clone(), WriterOptions::default()).unwrap();
    let reader = Reader::open(&path).unwrap();
    let overwrite = WriterOptions {
        overwrite: true,
        ..WriterOptions::default()
    };
    write_json(&path, &collection_json(4, 2, 1.0), overwrite).unwrap();
    let busy = |opened: &Path, why: &str| match Reader::open(opened).err() {
        Some(Error::Io(io)) => {
            let message = io.to_string();
            assert_eq!(io.kind(), std::io::ErrorKind::ResourceBusy, "{message}");
            assert!(message.contains(&*opened.to_string_lossy()), "{message}");
            assert!(message.contains(why), "{message}");
        }
        other => panic!("{other:?}"),
    };
    busy(&path, "drop it first");
    assert_eq!(reader.n_records(), 3);
    assert_eq!(reader.txn().unwrap().record(2).unwrap(), old.records[2]);
    drop(reader);
    assert_eq!(Reader::open(&path).unwrap().n_records(), 4);

    let mut options = EnvOpenOptions::new();
    // SAFETY: valid flags for a read-only open; nothing writes the file now.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) };
    // SAFETY: read-only; dropped at the end of the test.
    let outside = unsafe { options.open(&path) }.unwrap();
    busy(&path, "not by a Reader");
    drop(outside);
    assert_eq!(Reader::open(&path).unwrap().n_records(), 4);

    // The partial file of a writer in this process, alike.
    let next = scratch_file("lmdb-test", "shared-writing");
    let header = collection_from_json(&collection_json(1, 2, 0.0))
        .unwrap()
        .header;
    let writer = Writer::create(&next, header, WriterOptions::default()).unwrap();
    busy(&partial_path(&next), "not by a Reader");
    drop(writer);
}

/// A reader that opens the path through a lock file still held by readers
/// of the file it replaced (the moment between `finish`'s rename and its
/// removal of the lock file, or a lock file that could not be removed)
/// takes that file's transaction id and picks the meta page of its parity:
/// both meta pages lead to the whole collection. Replacements of one to
/// four records, in batches of 300 bytes, give both parities; with `meta`
/// in one commit, `mrec info` refused some of them as uncommitted.
#[test]
fn a_lock_file_left_by_readers_of_a_replaced_file_misleads_no_reader() {
    let path = scratch_file("lmdb-test", "stale-lock");
    let lock = lock_path(&path);
    write_json(&path, &collection_json(3, 4, 0.0), WriterOptions::default()).unwrap();
    // Holds the lock file, with the transaction id of the file at the path.
    let reader = Reader::open(&path).unwrap();
    assert!(lock.exists() && !reader.is_lock_free());
    let small_batches = WriterOptions {
        batch_bytes: 300,
        ..WriterOptions::default()
    };
    let mut parities = Vec::new();
    for n in 1..=4 {
        let next = scratch_file("lmdb-test", &format!("stale-lock-next-{n}"));
        write_json(&next, &collection_json(n, 4, 1.0), small_batches.clone()).unwrap();
        parities.push(last_transaction(&next) % 2);
        // A replacement that leaves the lock file in place.
        std::fs::rename(&next, &path).unwrap();
        assert!(lock.exists());
        let (code, info, stderr) = mrec(&[OsStr::new("info"), path.as_os_str()]);
        assert_eq!(code, Some(0), "{n} records: {stderr}");
        let records = info
            .lines()
            .find_map(|line| line.strip_prefix("records"))
            .map(str::trim);
        assert_eq!(records, Some(n.to_string().as_str()), "{info}");
    }
    assert!(
        parities.contains(&0) && parities.contains(&1),
        "{parities:?}"
    );
    drop(reader);
}

/// The id of the last transaction committed to the environment at `path`.
fn last_transaction(path: &Path) -> usize {
    let mut options = EnvOpenOptions::new();
    // SAFETY: valid flags for a read-only open; nothing writes the file now.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY | EnvFlags::NO_LOCK) };
    // SAFETY: no other Env of this path is open in the process now.
    let env = unsafe { options.open(path) }.unwrap();
    let id = env.info().last_txn_id;
    env.prepare_for_closing().wait();
    id
}

/// An overwrite that fails (a refused record, after batches were committed)
/// leaves the file it would have replaced byte for byte as it was, and no
/// partial file.
#[test]
fn a_failed_overwrite_leaves_the_file_it_would_replace_as_it_was() {
    let path = scratch_file("lmdb-test", "kept");
    write_json(&path, &water_collection(3), WriterOptions::default()).unwrap();
    let before = std::fs::read(&path).unwrap();
    let c = collection_from_json(&water_collection(40)).unwrap();
    let options = WriterOptions {
        overwrite: true,
        batch_bytes: 512,
        ..WriterOptions::default()
    };
    let mut writer = Writer::create(&path, c.header, options).unwrap();
    for r in c.records {
        writer.append(r).unwrap();
    }
    // A record with neither a system nor a trajectory.
    let refused = writer.append(molrec::model::Record::default());
    assert!(refused.is_err());
    drop(writer);
    assert!(std::fs::read(&path).unwrap() == before, "the file changed");
    assert!(!partial_path(&path).exists());
    assert_eq!(Reader::open(&path).unwrap().n_records(), 3);
}

/// Without `overwrite`, a file another program creates at the path while
/// the collection is written is not replaced: `finish` says so, and where
/// the complete collection is.
#[test]
fn a_file_created_at_the_path_during_the_write_is_not_replaced() {
    let path = scratch_file("lmdb-test", "raced");
    let c = collection_from_json(&water_collection(2)).unwrap();
    let mut writer = Writer::create(&path, c.header, WriterOptions::default()).unwrap();
    for r in c.records {
        writer.append(r).unwrap();
    }
    std::fs::write(&path, b"someone else's").unwrap();
    let err = writer.finish(c.index).unwrap_err();
    let partial = partial_path(&path);
    assert!(
        matches!(&err, Error::Io(e) if e.kind() == std::io::ErrorKind::AlreadyExists)
            && err.to_string().contains(&*partial.to_string_lossy()),
        "{err}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), b"someone else's");
    assert_eq!(Reader::open(&partial).unwrap().n_records(), 2);
}

/// With `overwrite`, a directory created at the path during the write
/// cannot be replaced: `finish` says so and where the complete collection
/// is, and leaves it there.
#[test]
fn a_failed_rename_leaves_the_collection_in_the_partial_file() {
    let path = scratch_file("lmdb-test", "rename-fails");
    let c = collection_from_json(&water_collection(2)).unwrap();
    let options = WriterOptions {
        overwrite: true,
        ..WriterOptions::default()
    };
    let mut writer = Writer::create(&path, c.header, options).unwrap();
    for r in c.records {
        writer.append(r).unwrap();
    }
    std::fs::create_dir(&path).unwrap();
    std::fs::write(path.join("inside"), b"kept").unwrap();
    let err = writer.finish(c.index).unwrap_err();
    let partial = partial_path(&path);
    // The path once, then why, then where the collection is.
    let message = err.to_string();
    let named = path.display().to_string();
    assert!(
        matches!(&err, Error::Io(_))
            && message.matches(&*named).count() == 2
            && message.ends_with(&format!("complete in {}", partial.display())),
        "{err}"
    );
    assert_eq!(std::fs::read(path.join("inside")).unwrap(), b"kept");
    assert_eq!(Reader::open(&partial).unwrap().n_records(), 2);
    std::fs::remove_dir_all(&path).unwrap();
}

/// What a killed writer left in the partial file is not a collection: the
/// next writer of the path empties it and writes its own, unless the file
/// has another name. A path that is a directory is refused before anything
/// is written.
#[test]
fn a_partial_file_left_behind_is_started_again() {
    let path = scratch_file("lmdb-test", "restarted");
    let partial = partial_path(&path);
    std::fs::write(&partial, vec![7u8; 100_000]).unwrap();
    std::fs::write(common::lock_path(&partial), b"stale").unwrap();
    write_json(&path, &water_collection(2), WriterOptions::default()).unwrap();
    assert_eq!(Reader::open(&path).unwrap().n_records(), 2);
    assert!(!partial.exists() && !common::lock_path(&partial).exists());

    // A partial name that is a second name of another file (as a hard link
    // whose old name could not be removed leaves it): that file is kept.
    let other = scratch_file("lmdb-test", "linked");
    write_json(&other, &water_collection(1), WriterOptions::default()).unwrap();
    let bytes = std::fs::read(&other).unwrap();
    std::fs::hard_link(&other, &partial).unwrap();
    let overwrite = WriterOptions {
        overwrite: true,
        ..WriterOptions::default()
    };
    write_json(&path, &water_collection(3), overwrite.clone()).unwrap();
    assert!(
        std::fs::read(&other).unwrap() == bytes,
        "the linked file changed"
    );
    assert_eq!(Reader::open(&path).unwrap().n_records(), 3);

    let dir = scratch_file("lmdb-test", "a-directory");
    std::fs::create_dir_all(&dir).unwrap();
    let header = collection_from_json(&water_collection(0)).unwrap().header;
    let err = Writer::create(&dir, header, overwrite).err().unwrap();
    assert!(err.to_string().contains("not a file"), "{err}");
    assert!(!partial_path(&dir).exists());
}

/// Applies raw edits to a committed file through heed.
fn edit(path: &Path, f: impl FnOnce(&heed::Env, Database<Bytes, Bytes>, &mut heed::RwTxn)) {
    let mut options = EnvOpenOptions::new();
    options.map_size(64 << 20);
    // SAFETY: valid flags; the test holds the only handle on this file.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR) };
    // SAFETY: no other Env of this path is open in the process now.
    let env = unsafe { options.open(path) }.unwrap();
    let mut txn = env.write_txn().unwrap();
    let db: Database<Bytes, Bytes> = env.open_database(&txn, None).unwrap().unwrap();
    f(&env, db, &mut txn);
    txn.commit().unwrap();
    env.prepare_for_closing().wait();
}

fn set_meta(path: &Path, change: impl FnOnce(&mut Value)) {
    edit(path, |_, db, txn| {
        let mut meta: Value =
            serde_json::from_slice(db.get(txn, b"meta").unwrap().unwrap()).unwrap();
        change(&mut meta);
        db.put(txn, b"meta", &serde_json::to_vec(&meta).unwrap())
            .unwrap();
    });
}

fn open_clause(path: &Path) -> Clause {
    match Reader::open(path).and_then(|r| r.read_collection()) {
        Err(e) => e
            .clause()
            .unwrap_or_else(|| panic!("refusal without clause: {e}")),
        Ok(_) => panic!("a broken file was read"),
    }
}

#[test]
fn reader_refuses_bad_meta() {
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Edit, Clause)> = vec![
        (
            "layout",
            Box::new(|m: &mut Value| m["layout"] = json!("mrec-zarr")),
            Clause::Layout,
        ),
        (
            "lv-missing",
            Box::new(|m: &mut Value| {
                m.as_object_mut().unwrap().remove("layout_version");
            }),
            Clause::LayoutVersion,
        ),
        (
            "lv-null",
            Box::new(|m: &mut Value| m["layout_version"] = json!(null)),
            Clause::LayoutVersion,
        ),
        (
            "lv-bool",
            Box::new(|m: &mut Value| m["layout_version"] = json!(true)),
            Clause::LayoutVersion,
        ),
        (
            "lv-float",
            Box::new(|m: &mut Value| m["layout_version"] = json!(1.0)),
            Clause::LayoutVersion,
        ),
        (
            "lv-string",
            Box::new(|m: &mut Value| m["layout_version"] = json!("1")),
            Clause::LayoutVersion,
        ),
        (
            "lv-0",
            Box::new(|m: &mut Value| m["layout_version"] = json!(0)),
            Clause::LayoutVersion,
        ),
        (
            "lv-2",
            Box::new(|m: &mut Value| m["layout_version"] = json!(2)),
            Clause::LayoutVersion,
        ),
        (
            "mv-null",
            Box::new(|m: &mut Value| m["collection"]["molrec_version"] = json!(null)),
            Clause::MolrecVersion,
        ),
        (
            "mv-2",
            Box::new(|m: &mut Value| m["collection"]["molrec_version"] = json!(2)),
            Clause::MolrecVersion,
        ),
        (
            "mv-float",
            Box::new(|m: &mut Value| m["collection"]["molrec_version"] = json!(1.0)),
            Clause::MolrecVersion,
        ),
        (
            "no-units",
            Box::new(|m: &mut Value| {
                m["collection"].as_object_mut().unwrap().remove("units");
            }),
            Clause::UnitsRequired,
        ),
        (
            "n-records",
            Box::new(|m: &mut Value| m["n_records"] = json!(3)),
            Clause::IndexCount,
        ),
        (
            "n-frames",
            Box::new(|m: &mut Value| m["n_frames"] = json!(7)),
            Clause::IndexTotal,
        ),
        (
            "n-frames-huge",
            Box::new(|m: &mut Value| m["n_frames"] = json!(u64::MAX)),
            Clause::IndexTotal,
        ),
        (
            "n-records-huge",
            Box::new(|m: &mut Value| m["n_records"] = json!(u64::MAX)),
            Clause::IndexCount,
        ),
        (
            "undeclared-meta",
            Box::new(|m: &mut Value| {
                m["sequence_schema"]["meta"]
                    .as_object_mut()
                    .unwrap()
                    .remove("pe");
            }),
            Clause::FrameUndeclaredMeta,
        ),
        (
            "undeclared-block",
            Box::new(|m: &mut Value| {
                m["sequence_schema"]["blocks"]
                    .as_object_mut()
                    .unwrap()
                    .remove("atoms");
            }),
            Clause::FrameUndeclaredBlock,
        ),
    ];
    for (name, change, clause) in cases {
        let path = scratch_file("lmdb-test", &format!("meta-{name}"));
        write_json(&path, &water_collection(2), WriterOptions::default()).unwrap();
        set_meta(&path, change);
        assert_eq!(open_clause(&path), clause, "case {name}");
    }
}

/// Keys outside the scheme (DIGEST §1: a junk key, `r`/`s` past
/// `n_records`, `f` past `n_frames`) break `lmdb.keys.scheme`, and a frame
/// value padded with bytes that are not zero breaks `mrf1.padding`. Reads
/// never address those bytes and read the file as before;
/// `Reader::violations` and `mrec validate` find them, count them and name
/// the first ones in key order.
#[test]
fn stray_keys_and_dirty_padding_are_found_by_violations_and_mrec_validate() {
    let path = scratch_file("lmdb-test", "stray-keys");
    write_json(&path, &water_collection(2), WriterOptions::default()).unwrap();
    let validate = |path: &Path| {
        let (code, _, stderr) = mrec(&[OsStr::new("validate"), path.as_os_str()]);
        (code, stderr)
    };
    assert!(Reader::open(&path).unwrap().violations().is_empty());
    assert_eq!(validate(&path).0, Some(0));

    let clean = collection_to_json(&Reader::open(&path).unwrap().read_collection().unwrap());
    let n_frames = Reader::open(&path).unwrap().n_frames();
    edit(&path, |_, db, txn| {
        for key in [
            frame_key(n_frames).to_vec(),
            molrec::lmdb::record_key(100).to_vec(),
            molrec::lmdb::record_key(101).to_vec(),
            molrec::lmdb::system_key(2).to_vec(),
            b"zz".to_vec(),
        ] {
            db.put(txn, &key, b"not a value of the scheme").unwrap();
        }
    });
    // The reads are as before; the one violation found is returned.
    let only_violation = |path: &Path| {
        let reader = Reader::open(path).unwrap();
        assert_eq!(
            collection_to_json(&reader.read_collection().unwrap()),
            clean
        );
        let mut found = reader.violations();
        assert_eq!(found.len(), 1, "{found:?}");
        found.remove(0)
    };
    let err = only_violation(&path);
    assert_eq!(err.clause(), Some(Clause::KeysScheme), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "5 key(s) outside the scheme (meta, index, ff, r/s + record number, f + frame \
             ordinal): f:{n_frames} is not below n_frames = {n_frames}; r:100 is not below \
             n_records = 2; r:101 is not below n_records = 2; s:2 is not below n_records = 2; ..."
        )),
        "{text}"
    );
    let (code, stderr) = validate(&path);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("[lmdb.keys.scheme] keys: 5 key(s)"),
        "{stderr}"
    );

    // Only the junk key left: named by its text.
    edit(&path, |_, db, txn| {
        for key in [
            frame_key(n_frames),
            molrec::lmdb::record_key(100),
            molrec::lmdb::record_key(101),
            molrec::lmdb::system_key(2),
        ] {
            assert!(db.delete(txn, &key).unwrap());
        }
    });
    let err = only_violation(&path);
    assert!(
        err.to_string()
            .ends_with("ordinal): zz is not a key of the scheme"),
        "{err}"
    );

    // A frame value whose padding is not zero bytes (`mrf1.padding`): read
    // as before, reported by the pass over every value.
    let mut padded = None;
    edit(&path, |_, db, txn| {
        assert!(db.delete(txn, b"zz").unwrap());
        for j in 0..n_frames {
            let mut value = db.get(txn, &frame_key(j)).unwrap().unwrap().to_vec();
            let end = 8 + u32::from_le_bytes(value[4..8].try_into().unwrap()) as usize;
            if !end.is_multiple_of(8) {
                value[end] = b' ';
                db.put(txn, &frame_key(j), &value).unwrap();
                padded = Some((j, end));
                break;
            }
        }
    });
    let (j, end) = padded.expect("a frame whose header needs padding");
    let err = only_violation(&path);
    assert_eq!(err.clause(), Some(Clause::FramePadding), "{err}");
    let start = end.next_multiple_of(8);
    assert!(
        err.to_string().ends_with(&format!(
            "1 key(s) whose frame value pads its header with bytes that are not zero: \
             f:{j} bytes {end}..{start}"
        )),
        "{err}"
    );
    let (code, stderr) = validate(&path);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("[mrf1.padding] keys: 1 key(s)"), "{stderr}");
}

/// Rewrites the `box` of frame value `key`'s header with `change`; the
/// payload is kept.
fn change_box(path: &Path, key: &[u8], change: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    edit(path, |_, db, txn| {
        let value = db.get(txn, key).unwrap().unwrap().to_vec();
        let len = u32::from_le_bytes(value[4..8].try_into().unwrap()) as usize;
        let mut header: Value = serde_json::from_slice(&value[8..8 + len]).unwrap();
        change(header["box"].as_object_mut().unwrap());
        let payload = &value[(8 + len).next_multiple_of(8)..];
        let text = serde_json::to_vec(&header).unwrap();
        db.put(txn, key, &common::frame_value(&text, payload))
            .unwrap();
    });
}

#[test]
fn an_undefined_cell_stored_off_its_form_reads_alike_and_is_found_by_violations() {
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/collection/system-box.json");
    let json: Value = serde_json::from_slice(&std::fs::read(fixture).unwrap()).unwrap();
    let path = scratch_file("lmdb-test", "undefined-cell");
    write_json(&path, &json, WriterOptions::default()).unwrap();
    let reader = Reader::open(&path).unwrap();
    let clean = collection_to_json(&reader.read_collection().unwrap());
    assert!(reader.violations().is_empty());
    drop(reader);
    // Another writer's undefined cells: the boundary left out on the first
    // update, stored vectors on the system. Both read as the same cells.
    change_box(&path, &frame_key(0), |cell| {
        assert!(cell.remove("boundary").is_some());
    });
    change_box(&path, &molrec::lmdb::system_key(0), |cell| {
        cell.insert(
            "vectors".into(),
            json!([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]]),
        );
    });
    let reader = Reader::open(&path).unwrap();
    assert_eq!(
        collection_to_json(&reader.read_collection().unwrap()),
        clean
    );
    let found = reader.violations();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].clause(), Some(Clause::BoxUndefinedCell));
    assert!(
        found[0].to_string().ends_with(
            "2 key(s) whose undefined cell is not stored as a writer must store it: \
             f:0 an undefined cell's boundary is left out, not written as all-false; \
             s:0 an undefined cell's vectors are not the identity matrix"
        ),
        "{}",
        found[0]
    );
}

#[test]
fn reader_refuses_missing_meta_and_missing_frames() {
    let path = scratch_file("lmdb-test", "no-meta");
    write_json(&path, &water_collection(2), WriterOptions::default()).unwrap();
    edit(&path, |_, db, txn| {
        db.delete(txn, b"meta").unwrap();
    });
    assert_eq!(open_clause(&path), Clause::MetaRequired);

    let path = scratch_file("lmdb-test", "missing-frame");
    write_json(&path, &water_collection(2), WriterOptions::default()).unwrap();
    edit(&path, |_, db, txn| {
        db.delete(txn, &frame_key(4)).unwrap();
    });
    assert_eq!(open_clause(&path), Clause::FrameMissing);

    let path = scratch_file("lmdb-test", "bad-magic");
    write_json(&path, &water_collection(2), WriterOptions::default()).unwrap();
    edit(&path, |_, db, txn| {
        let mut v = db.get(txn, &frame_key(0)).unwrap().unwrap().to_vec();
        v[..4].copy_from_slice(b"MRF2");
        db.put(txn, &frame_key(0), &v).unwrap();
    });
    assert_eq!(open_clause(&path), Clause::FrameMagic);

    let path = scratch_file("lmdb-test", "bad-record-meta");
    write_json(&path, &water_collection(2), WriterOptions::default()).unwrap();
    edit(&path, |_, db, txn| {
        db.put(txn, &molrec::lmdb::record_key(1), b"[1, 2]")
            .unwrap();
    });
    assert_eq!(open_clause(&path), Clause::RecordMetaValue);
}

#[test]
fn an_aligned_offset_view_is_zero_copy_and_matches_the_owned_copy() {
    let path = scratch_file("lmdb-test", "views");
    write_json(&path, &water_collection(3), WriterOptions::default()).unwrap();
    let reader = Reader::open(&path).unwrap();
    let owned = reader.record(1).unwrap();
    let txn = reader.txn().unwrap();
    let mut k = 0;
    txn.for_each_frame(1, |view| {
        let col = &view.blocks["atoms"].columns["x"];
        let copy = col.to_column()?;
        if let Some(v) = col.f64_view() {
            assert_eq!(molrec::model::ColumnData::F64(v.to_vec()), copy.data);
        }
        assert_eq!(
            owned.trajectory.as_ref().unwrap().frames[k].blocks["atoms"].columns["x"],
            copy
        );
        k += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(k, 3);
}

/// `mrec write` then `mrec dump` of every committed fixture the reference
/// accepts is stable: dumping, writing the dump again and dumping again gives
/// the same bytes.
#[test]
fn dump_write_dump_is_byte_stable_for_every_fixture() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let mut stack = vec![root];
    let mut stable = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|x| x != "json")
                || path.to_string_lossy().ends_with(".dump.json")
            {
                continue;
            }
            let Ok(collection) =
                molrec::model_json::collection_from_str(&std::fs::read_to_string(&path).unwrap())
            else {
                continue;
            };
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            let first = scratch_file("lmdb-test", &format!("stable-{name}-1"));
            if write_collection(&first, collection, WriterOptions::default()).is_err() {
                continue; // a write-refusal fixture
            }
            let dump = |p: &Path| {
                let c = Reader::open(p).unwrap().read_collection().unwrap();
                serde_json::to_string_pretty(&collection_to_json(&c)).unwrap()
            };
            common::frames_reencode_identically(&first);
            common::records_read_alike(&first);
            let once = dump(&first);
            let second = scratch_file("lmdb-test", &format!("stable-{name}-2"));
            write_collection(
                &second,
                molrec::model_json::collection_from_str(&once).unwrap(),
                WriterOptions::default(),
            )
            .unwrap();
            assert_eq!(once, dump(&second), "{}", path.display());
            stable += 1;
        }
    }
    assert!(stable >= 30, "only {stable} fixtures were written");
}

/// Every key is put in ascending order with `MDB_APPEND` (the `r`/`s`
/// values kept aside until `finish`): leaf pages come out full, not half
/// full as with puts that split pages in the middle. The keys themselves
/// are the binding's, in its order, whatever order they were written in.
#[test]
fn keys_are_appended_in_order_and_leaf_pages_fill_up() {
    let path = scratch_file("lmdb-test", "append-order");
    write_json(
        &path,
        &water_collection(4000),
        WriterOptions {
            overwrite: false,
            // Many transactions: the order must hold across commits.
            batch_bytes: 8192,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    let mut options = EnvOpenOptions::new();
    // SAFETY: valid flags for a read-only open; nothing writes the file now.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) };
    // SAFETY: no other Env of this path is open in the process now.
    let env = unsafe { options.open(&path) }.unwrap();
    let txn = env.read_txn().unwrap();
    let db: Database<Bytes, Bytes> = env.open_database(&txn, None).unwrap().unwrap();
    let stat = db.stat(&txn).unwrap();
    assert_eq!(
        stat.page_size,
        molrec::lmdb::DEFAULT_PAGE_SIZE,
        "the writer's page size"
    );
    // LMDB's `me_nodemax`: a node larger than this keeps its value on
    // overflow pages.
    let node_max = (((stat.page_size as usize - 16) / 2) & !1) - 2;
    let mut prefixes = Vec::new();
    let mut leaf_bytes = 0usize;
    for item in db.iter(&txn).unwrap() {
        let (k, v) = item.unwrap();
        let prefix = if k.len() == 9 { &k[..1] } else { k };
        if prefixes.last().map(Vec::as_slice) != Some(prefix) {
            prefixes.push(prefix.to_vec());
        }
        // A leaf node: its slot, header, key and value, 2-byte aligned; a
        // value too large for half a page lives on overflow pages, its
        // node holds a page number instead.
        let node = 8 + k.len() + v.len();
        let node = if node > node_max {
            8 + k.len() + 8
        } else {
            node
        };
        leaf_bytes += 2 + node.next_multiple_of(2);
    }
    let names: Vec<&[u8]> = prefixes.iter().map(Vec::as_slice).collect();
    assert_eq!(
        names,
        [&b"f"[..], b"index", b"meta", b"r", b"s"],
        "every key of a prefix is contiguous, in key order"
    );
    let leaf_space = stat.leaf_pages * stat.page_size as usize;
    assert!(
        // Appended: at most 6% over the nodes (page headers, the slack at
        // the end of each page, and of the one page the last `f` value
        // leaves partly empty, and of the page `meta` splits); in-order puts
        // without MDB_APPEND give 11%, the interleaved puts of the writer
        // before them 55%.
        leaf_space < leaf_bytes + leaf_bytes / 16,
        "{} leaf pages ({leaf_space} bytes) for {leaf_bytes} bytes of nodes: pages not filled",
        stat.leaf_pages
    );
    drop(txn);
    env.prepare_for_closing().wait();
    let back = Reader::open(&path).unwrap().read_collection().unwrap();
    assert_eq!(back.records.len(), 4000);
}

/// The values kept aside until `finish` live in unnamed temporary files,
/// and the collection in its partial file: nothing is left in the
/// collection's directory but the collection, whether the writer finishes
/// or is dropped.
#[test]
fn a_writer_leaves_no_file_but_the_collection() {
    let dir = scratch_file("lmdb-test", "spill-dir");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let listing = || {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let c = collection_from_json(&water_collection(20)).unwrap();
    let mut writer = Writer::create(
        &dir.join("a.mrec.lmdb"),
        c.header.clone(),
        WriterOptions::default(),
    )
    .unwrap();
    for r in c.records.clone() {
        writer.append(r).unwrap();
    }
    assert_eq!(
        listing(),
        ["a.mrec.lmdb.partial", "a.mrec.lmdb.partial-lock"]
    );
    drop(writer);
    assert_eq!(listing(), Vec::<String>::new());
    write_collection(&dir.join("b.mrec.lmdb"), c, WriterOptions::default()).unwrap();
    assert_eq!(listing(), ["b.mrec.lmdb"]);
    assert_eq!(
        Reader::open(&dir.join("b.mrec.lmdb"))
            .unwrap()
            .read_collection()
            .unwrap()
            .records
            .len(),
        20
    );
}

/// A record whose frames disagree on a column's dtype, in a collection
/// without a declaration: refused while its declaration is derived, at the
/// frame and column where it happens (the path is formatted only then).
#[test]
fn a_derived_declaration_refuses_at_the_frame_and_column() {
    let q = |dtype: &str, v: Value| json!({"dtype": dtype, "shape": [1], "values": [v]});
    let c = json!({
        "meta": {"units": {"length": "angstrom"}},
        "records": [
            {"trajectory": {"frames": [
                {"step": 0, "blocks": {"atoms": {"count": 1, "columns": {"q": q("f64", json!(0.5))}}}}
            ]}},
            {"trajectory": {"frames": [
                {"step": 0, "blocks": {"atoms": {"count": 1, "columns": {"q": q("f64", json!(0.5))}}}},
                {"step": 1, "blocks": {"atoms": {"count": 1, "columns": {"q": q("i64", json!(1))}}}}
            ]}}
        ]
    });
    let path = scratch_file("lmdb-test", "derived-refusal");
    match write_json(&path, &c, WriterOptions::default()) {
        Err(Error::Refused { clause, at, .. }) => {
            assert_eq!(clause, Clause::BlockColumnSetStable);
            assert_eq!(at, "records[1].trajectory.frames[1].blocks.atoms.columns.q");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// The writer gives a new file the page size it is asked for (LMDB's own
/// readers take it from the file), and refuses one LMDB cannot use; the
/// collection reads back the same whatever the page size.
#[test]
fn files_get_the_page_size_asked_for() {
    let collection = water_collection(50);
    let mut read_back = Vec::new();
    for page_size in [4096u32, 8192, 16384, 32768] {
        let path = scratch_file("lmdb-test", &format!("page-{page_size}"));
        let options = WriterOptions {
            page_size,
            ..WriterOptions::default()
        };
        write_json(&path, &collection, options).unwrap();
        let mut env_options = EnvOpenOptions::new();
        // SAFETY: valid flags for a read-only open; nothing writes the file now.
        unsafe { env_options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::READ_ONLY) };
        // SAFETY: no other Env of this path is open in the process now.
        let env = unsafe { env_options.open(&path) }.unwrap();
        assert_eq!(env.stat().page_size, page_size);
        env.prepare_for_closing().wait();
        let back = Reader::open(&path).unwrap().read_collection().unwrap();
        read_back.push(collection_to_json(&back));
    }
    assert!(read_back.windows(2).all(|w| w[0] == w[1]));
    for page_size in [0u32, 1000, 2048, 65536, 4097] {
        let path = scratch_file("lmdb-test", "page-bad");
        let options = WriterOptions {
            page_size,
            overwrite: true,
            ..WriterOptions::default()
        };
        match write_json(&path, &collection, options) {
            Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput),
            other => panic!("page size {page_size}: {other:?}"),
        }
    }
}

/// A string column of `n` strings of `len` bytes each.
fn long_strings(n: usize, len: usize) -> Value {
    json!({"dtype": "string", "shape": [n], "values": vec!["s".repeat(len); n]})
}

/// The records of a canonical JSON collection, in the model.
fn records_of(records: Vec<Value>) -> Vec<molrec::model::Record> {
    let c = json!({"meta": {"units": {"length": "angstrom"}}, "records": records});
    collection_from_json(&c).unwrap().records
}

/// A frame whose header would pass the readers' 64 MiB bound (string
/// columns live in the header) is refused with `mrf1.header-bounds` at
/// append, where it used to be written into a file its own reader then
/// refused. A refused record, its system's header or its first frame's,
/// leaves the writer as it was: the file holds the other records, and the
/// declaration derived from the records has nothing of the refused one.
#[test]
fn a_header_past_the_readers_bound_is_refused_at_append_and_the_writer_goes_on() {
    let water = water_collection(2)["records"].as_array().unwrap().clone();
    let too_long = long_strings(65, 1 << 20);
    let refused = records_of(vec![
        json!({"system": {"blocks": {"atoms": {"count": 65, "columns": {"name": too_long}}}}}),
        json!({"trajectory": {"frames": [{"step": 0, "meta": {"pe": -1.0}, "blocks": {
            "labels": {"count": 65, "columns": {"tag": too_long}}}}]}}),
    ]);
    let path = scratch_file("lmdb-test", "header-bound");
    let expected_path = scratch_file("lmdb-test", "header-bound-expected");
    let header = collection_from_json(&water_collection(0)).unwrap().header;
    write_collection(
        &expected_path,
        collection_from_json(&water_collection(2)).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();

    let mut writer = Writer::create(&path, header, WriterOptions::default()).unwrap();
    let mut good = records_of(water).into_iter();
    writer.append(good.next().unwrap()).unwrap();
    for (record, at) in refused.into_iter().zip([
        "records[1].system.header",
        "records[1].trajectory.frames[0].header",
    ]) {
        match writer.append(record) {
            Err(Error::Refused {
                clause,
                at: found,
                detail,
            }) => {
                assert_eq!(clause, Clause::FrameHeaderBounds, "{detail}");
                assert_eq!(found, at);
                assert!(detail.contains("over the limit of 67108864"), "{detail}");
            }
            other => panic!("expected a refusal at {at}, got {other:?}"),
        }
    }
    writer.append(good.next().unwrap()).unwrap();
    writer.finish(Default::default()).unwrap();
    let read = |p: &Path| collection_to_json(&Reader::open(p).unwrap().read_collection().unwrap());
    assert_eq!(read(&path), read(&expected_path));
    assert!(Reader::open(&path).unwrap().violations().is_empty());
}

/// A frame refused on its header's length after earlier frames of its
/// record were committed (a batch of 1 KiB commits every frame) cannot be
/// taken back: the writer stops, refuses every later call, and writes
/// nothing at its path.
#[test]
fn a_header_past_the_bound_after_a_commit_stops_the_writer() {
    let record = records_of(vec![json!({"trajectory": {"frames": [
        {"step": 0, "blocks": {"labels": {"count": 4, "columns": {"tag": long_strings(4, 300)}}}},
        {"step": 1, "blocks": {"labels": {"count": 65, "columns": {"tag": long_strings(65, 1 << 20)}}}}
    ]}})]);
    let path = scratch_file("lmdb-test", "header-bound-stop");
    let header = collection_from_json(&water_collection(0)).unwrap().header;
    let options = WriterOptions {
        batch_bytes: 1024,
        ..WriterOptions::default()
    };
    let mut writer = Writer::create(&path, header, options).unwrap();
    let err = writer
        .append(record.into_iter().next().unwrap())
        .unwrap_err();
    assert_eq!(err.clause(), Some(Clause::FrameHeaderBounds), "{err}");
    assert!(
        err.to_string()
            .contains("records[0].trajectory.frames[1].header"),
        "{err}"
    );
    let water = records_of(water_collection(1)["records"].as_array().unwrap().clone());
    let again = writer
        .append(water.into_iter().next().unwrap())
        .unwrap_err();
    assert!(
        again
            .to_string()
            .contains("the writer stopped, and writes no collection: records[0]"),
        "{again}"
    );
    let at_finish = writer.finish(Default::default()).unwrap_err();
    assert!(
        at_finish.to_string().contains("the writer stopped"),
        "{at_finish}"
    );
    assert!(!path.exists() && !partial_path(&path).exists());
}

/// A record the model rules refuse after its declaration merged with the
/// others' (here a row reference past its target's rows) leaves the
/// derived declaration as it was: the block only it declared is not in the
/// file's `sequence_schema`. It used to be.
#[test]
fn a_record_refused_by_the_model_rules_adds_nothing_to_the_derived_declaration() {
    let water = water_collection(2)["records"].as_array().unwrap().clone();
    let bad = records_of(vec![
        json!({"trajectory": {"frames": [{"step": 0, "meta": {"pe": -1.0},
        "blocks": {"atoms": atoms(&[0.0, 1.0, 2.0]), "bonds": {"count": 1, "columns": {
            "atomi": {"dtype": "u64", "shape": [1], "values": [7]},
            "atomj": {"dtype": "u64", "shape": [1], "values": [0]}}}}}]}}),
    ]);
    let path = scratch_file("lmdb-test", "refused-declaration");
    let expected_path = scratch_file("lmdb-test", "refused-declaration-expected");
    write_collection(
        &expected_path,
        collection_from_json(&water_collection(2)).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();
    let header = collection_from_json(&water_collection(0)).unwrap().header;
    let mut writer = Writer::create(&path, header, WriterOptions::default()).unwrap();
    let mut good = records_of(water).into_iter();
    writer.append(good.next().unwrap()).unwrap();
    let err = writer.append(bad.into_iter().next().unwrap()).unwrap_err();
    assert_eq!(err.clause(), Some(Clause::RowReferenceRange), "{err}");
    writer.append(good.next().unwrap()).unwrap();
    writer.finish(Default::default()).unwrap();
    let read = |p: &Path| collection_to_json(&Reader::open(p).unwrap().read_collection().unwrap());
    assert_eq!(read(&path), read(&expected_path));
}

/// docs/canonical-json.md, "Trajectory blocks": a reader hands back the
/// declaration's `targets` and `structural_shape` on every resolved update
/// of the block, whether or not the presented update stated them.
#[test]
fn every_resolved_update_carries_the_declared_targets_and_shape() {
    let u64col = |v: &[u64]| json!({"dtype": "u64", "shape": [v.len()], "values": v});
    let c = json!({
        "meta": {"units": {"length": "angstrom"}},
        "sequence_schema": {"meta": {}, "blocks": {
            "atoms": {"columns": {"x": {"dtype": "f64"}}},
            "beads": {"columns": {"ibead": {"dtype": "u64"}}, "targets": {"ibead": "atoms"}},
            "grid": {"columns": {"v": {"dtype": "f64"}}, "structural_shape": [2, 1]}
        }},
        "records": [{"meta": {}, "trajectory": {"frames": [
            {"step": 0, "blocks": {
                "atoms": {"count": 2, "columns": {"x": f64col(&[0.0, 1.0])}},
                "beads": {"count": 1, "columns": {"ibead": u64col(&[1])}},
                "grid": {"count": 2, "columns": {"v": f64col(&[0.1, 0.2])}}}},
            {"step": 1, "blocks": {
                "atoms": {"count": 3, "columns": {"x": f64col(&[0.0, 1.0, 2.0])}},
                "beads": {"count": 1, "targets": {"ibead": "atoms"}, "columns": {"ibead": u64col(&[2])}}}},
            {"step": 2, "blocks": {
                "grid": {"count": 2, "structural_shape": [2, 1], "columns": {"v": f64col(&[0.3, 0.4])}}}}
        ]}}]
    });
    let path = scratch_file("lmdb-test", "declared-head");
    write_json(&path, &c, WriterOptions::default()).unwrap();
    let record = Reader::open(&path).unwrap().record(0).unwrap();
    let frames = record.trajectory.unwrap().frames;
    assert_eq!(frames.len(), 3);
    let declared: std::collections::BTreeMap<String, String> =
        [("ibead".to_string(), "atoms".to_string())].into();
    for (j, frame) in frames.iter().enumerate() {
        assert_eq!(frame.blocks["beads"].targets, declared, "frame {j}");
        assert_eq!(
            frame.blocks["grid"].structural_shape,
            Some(vec![2, 1]),
            "frame {j}"
        );
        assert!(frame.blocks["atoms"].targets.is_empty(), "frame {j}");
    }
}

/// `check_pages` counts what LMDB's record says on a sound file, and
/// `Reader::open_checked` refuses a file whose first leaf's node pointer
/// points outside the page (what made LMDB's cursor crash, issue #31).
#[test]
fn a_damaged_node_pointer_is_refused_before_lmdb_walks_it() {
    use molrec::lmdb::check_pages;
    let path = scratch_file("lmdb-test", "pages");
    let options = WriterOptions {
        page_size: 4096,
        ..WriterOptions::default()
    };
    write_json(&path, &water_collection(40), options).unwrap();
    let counts = check_pages(&path).unwrap();
    assert_eq!(counts.page_size, 4096);
    assert!(counts.depth >= 2 && counts.branch_pages >= 1, "{counts:?}");
    assert!(Reader::open_checked(&path).is_ok());
    // The root is a branch page; find a leaf page and point its first
    // node 2 bytes before the end of the page.
    let mut bytes = std::fs::read(&path).unwrap();
    let leaf = (2..bytes.len() / 4096)
        .find(|p| u16::from_le_bytes([bytes[p * 4096 + 10], bytes[p * 4096 + 11]]) == 0x02)
        .unwrap();
    bytes[leaf * 4096 + 16..leaf * 4096 + 18].copy_from_slice(&4094u16.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    match Reader::open_checked(&path).map(|_| ()) {
        Err(Error::Refused { clause, at, detail }) => {
            assert_eq!(clause, Clause::FilePages);
            assert!(at.contains(&format!("page {leaf}")), "{at}: {detail}");
        }
        other => panic!("a damaged node pointer must be refused: {other:?}"),
    }
}
