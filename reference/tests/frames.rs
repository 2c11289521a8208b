//! Frames by global ordinal (`Reader::frame`, `Reader::frames`): every
//! frame of every fixture and golden file is the same frame of its record
//! read whole; blocks carried over long stretches resolve to the update in
//! effect, reading only it; refusals name their clause.

mod common;

use common::{f64col, scratch_file, Rng};
use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use molrec::lmdb::{frame_key, write_collection, Reader, ResolvedFrame, WriterOptions};
use molrec::model::{Block, Column, ColumnData, Step};
use molrec::model_json::collection_from_json;
use molrec::Clause;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// A resolved frame in the model's form, its columns copied out.
fn step_of(frame: &ResolvedFrame<'_>) -> Step {
    let blocks = frame
        .blocks()
        .map(|b| {
            let columns = b
                .columns()
                .map(|c| {
                    let mut data = ColumnData::empty(c.dtype());
                    c.append_to(&mut data).unwrap();
                    let mut shape = vec![c.count()];
                    shape.extend_from_slice(c.trailing());
                    let column = Column {
                        shape,
                        data,
                        validity: c.mask().unwrap(),
                        precision: None,
                    };
                    (c.name().to_string(), column)
                })
                .collect();
            let block = Block {
                count: b.count(),
                columns,
                structural_shape: b.structural_shape().map(<[u64]>::to_vec),
                targets: b.targets().cloned().unwrap_or_default(),
                attributes: b.attributes().clone(),
            };
            (b.name().to_string(), block)
        })
        .collect();
    Step {
        step: frame.step,
        time: frame.time,
        meta: frame.meta.clone(),
        blocks,
        cell: frame.cell,
    }
}

/// Every frame of the file by its ordinal, one by one and through
/// `frames` in a shuffled order, against the frames of `record` (the
/// model); Debug text, not `==`: NaN is not equal to itself. Returns the
/// frames compared.
fn frames_match_records(path: &Path) -> u64 {
    let reader = Reader::open(path).unwrap();
    let mut want = Vec::new();
    for r in 0..reader.n_records() {
        let record = reader.record(r).unwrap();
        let Some(trajectory) = record.trajectory else {
            continue;
        };
        for (k, step) in trajectory.frames.into_iter().enumerate() {
            let j = reader.first_frames()[r as usize] + k as u64;
            want.push((
                j,
                r,
                k as u64,
                format!("{step:?}"),
                format!("{:?}", record.system),
            ));
        }
    }
    for (j, r, k, step, system) in &want {
        let frame = reader.frame(*j).unwrap();
        assert_eq!(
            (frame.record, frame.position),
            (*r, *k),
            "{}",
            path.display()
        );
        assert_eq!(
            &format!("{:?}", step_of(&frame)),
            step,
            "{} frame {j}",
            path.display()
        );
        assert_eq!(&format!("{:?}", frame.system()), system);
    }
    let mut order: Vec<usize> = (0..want.len()).collect();
    let mut rng = Rng::new(want.len() as u64);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.index(i + 1));
    }
    let js: Vec<u64> = order.iter().map(|&i| want[i].0).collect();
    let mut seen = 0;
    reader
        .frames(&js, |frame| {
            let (_, _, _, step, _) = &want[order[seen]];
            assert_eq!(&format!("{:?}", step_of(frame)), step);
            seen += 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(seen, want.len());
    want.len() as u64
}

fn fixture_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let mut stack = vec![root];
    let mut files = Vec::new();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_frame_by_ordinal_is_that_frame_of_its_record() {
    let (mut files, mut frames) = (0, 0);
    for path in fixture_files() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".mrec.lmdb") {
            // Golden files: some written unlike the reference writes.
            frames += frames_match_records(&path);
            files += 1;
            continue;
        }
        if !name.ends_with(".json") || name.ends_with(".dump.json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let Ok(collection) = molrec::model_json::collection_from_str(&text) else {
            continue;
        };
        let out = scratch_file("frames-test", &name);
        if write_collection(&out, collection, WriterOptions::default()).is_err() {
            continue; // a write-refusal fixture
        }
        frames += frames_match_records(&out);
        files += 1;
    }
    assert!(
        files >= 50 && frames >= 190,
        "{files} files, {frames} frames"
    );
}

/// One record of `n` frames: `atoms` moves at every frame, `charges`
/// changes every `every` frames (carried forward between), the cell is
/// set at frame 0 and changes at `n / 2`.
fn long_record(n: usize, every: usize) -> Value {
    let frames: Vec<Value> = (0..n)
        .map(|k| {
            let mut blocks = json!({"atoms": {"count": 2, "columns": {
                "x": f64col(&[k as f64, -(k as f64)])}}});
            if k % every == 0 {
                blocks["charges"] = json!({"count": 1, "columns": {"q": f64col(&[k as f64])}});
            }
            let mut frame = json!({"step": k, "meta": {"pe": -(k as f64)}, "blocks": blocks});
            if k == 0 || k == n / 2 {
                let a = 10.0 + k as f64;
                frame["box"] = json!({"vectors": [[a, 0, 0], [0, a, 0], [0, 0, a]]});
            }
            frame
        })
        .collect();
    let short = json!({"meta": {}, "trajectory": {"frames": [
        {"step": 0, "meta": {"pe": 1.0}, "blocks": {"atoms": {"count": 2, "columns": {"x": f64col(&[7.0, 8.0])}}}}]}});
    json!({"meta": {"units": {"length": "angstrom", "energy": "eV"}},
           "records": [short, {"meta": {}, "trajectory": {"frames": frames}}, short]})
}

#[test]
fn blocks_carried_over_long_stretches_resolve_to_the_update_in_effect() {
    let (n, every) = (3000, 700);
    let path = scratch_file("frames-test", "long");
    write_collection(
        &path,
        collection_from_json(&long_record(n, every)).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();
    let reader = Reader::open(&path).unwrap();
    assert_eq!(reader.n_frames(), n as u64 + 2);
    for k in [0usize, 1, 699, 700, 1499, 1500, 1501, 2099, 2100, 2999] {
        let frame = reader.frame(1 + k as u64).unwrap();
        assert_eq!(
            (frame.record, frame.position, frame.step),
            (1, k as u64, k as i64)
        );
        let x = frame.block("atoms").unwrap().column("x").unwrap();
        let mut values = ColumnData::empty(x.dtype());
        x.append_to(&mut values).unwrap();
        assert_eq!(values, ColumnData::F64(vec![k as f64, -(k as f64)]));
        let charges = frame.block("charges").unwrap();
        let at = k / every * every;
        assert_eq!(charges.position, at as u64);
        let q = charges.column("q").unwrap();
        let mut values = ColumnData::empty(q.dtype());
        q.append_to(&mut values).unwrap();
        assert_eq!(values, ColumnData::F64(vec![at as f64]));
        let cell_at = if k >= n / 2 { n / 2 } else { 0 };
        assert_eq!(frame.cell.unwrap().vectors[0], 10.0 + cell_at as f64);
        // Only the updates in effect are read: this frame's, the
        // charges' and the cell's.
        let mut read = vec![k, at, cell_at];
        read.sort();
        read.dedup();
        assert_eq!(frame.values_read, read.len(), "frame {k}");
    }
    // The records beside it resolve within themselves.
    let last = reader.frame(n as u64 + 1).unwrap();
    assert_eq!((last.record, last.position), (2, 0));
    assert!(last.block("charges").is_none() && last.cell.is_none());
    frames_match_records(&path);
}

#[test]
fn an_ordinal_out_of_range_is_refused() {
    let path = scratch_file("frames-test", "range");
    write_collection(
        &path,
        collection_from_json(&long_record(4, 2)).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();
    let reader = Reader::open(&path).unwrap();
    let err = reader.frame(6).err().unwrap();
    assert_eq!(err.clause(), Some(Clause::IndexCount), "{err}");
    assert!(
        err.to_string().contains("no frame 6: the collection has 6"),
        "{err}"
    );
    assert!(reader.frames(&[0, 6], |_| Ok(())).is_err());
}

/// A frame whose record has a bad update elsewhere is refused: the
/// record's headers are all read (and checked) once before any of its
/// frames is handed out.
#[test]
fn a_bad_update_anywhere_in_the_record_is_refused() {
    let path = scratch_file("frames-test", "bad-step");
    write_collection(
        &path,
        collection_from_json(&long_record(6, 2)).unwrap(),
        WriterOptions::default(),
    )
    .unwrap();
    // Record 1's frame 4 (ordinal 5) becomes a copy of its frame 2: step 2
    // after step 3.
    let mut options = EnvOpenOptions::new();
    options.map_size(64 << 20);
    // SAFETY: valid flags; the test holds the only handle on this file.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR) };
    // SAFETY: no other Env of this path is open in the process now.
    let env = unsafe { options.open(&path) }.unwrap();
    let mut txn = env.write_txn().unwrap();
    let db: Database<Bytes, Bytes> = env.open_database(&txn, None).unwrap().unwrap();
    let copy = db.get(&txn, &frame_key(3)).unwrap().unwrap().to_vec();
    db.put(&mut txn, &frame_key(5), &copy).unwrap();
    txn.commit().unwrap();
    env.prepare_for_closing().wait();
    let reader = Reader::open(&path).unwrap();
    let err = reader.frame(2).err().unwrap();
    assert_eq!(err.clause(), Some(Clause::StepIncreasing), "{err}");
    assert!(
        err.to_string().contains("records[1].trajectory.frames[4]"),
        "{err}"
    );
    // Its neighbours are not affected.
    assert_eq!(reader.frame(0).unwrap().record, 0);
    assert_eq!(reader.frame(7).unwrap().record, 2);
}
