//! `mrec import aselmdb` against the real thing, and `mrec write`'s
//! streaming of its JSON input.
//!
//! * Shards written by the real `ase` and `ase-db-backends`
//!   (`import_data/make_aselmdb.py`: molecules, slabs and crystals, with
//!   and without energy, forces, charges, tags, momenta, masses and
//!   constraints; deleted ids; two shards; and a shard of interleaved
//!   trajectories) are imported, and every frame read back through the
//!   reader is compared with what ase reads from the source: numbers,
//!   positions, cell, pbc, energy and forces (and charges, tags, momenta,
//!   masses, fixed atoms) bit for bit. Where `python3` lacks ase,
//!   ase-db-backends, lmdb or numpy, these trials are reported ignored,
//!   with the reason.
//! * The summary of one import is a snapshot (`snapshots/`).
//! * Bad input (hand-made shards, no Python needed): an invalid or
//!   truncated zlib stream, JSON that is not ASE's, a missing `numbers`,
//!   a wrong shape, a missing row, an absurd `nextid`, a file that is not
//!   LMDB: a clear error naming the shard, the key and what is wrong,
//!   exit 4, nothing written; `--skip-bad` counts and reports them.
//! * Ctrl-C during an import leaves the output as it was.
//! * `mrec write` of documents whose `records` come before or after the
//!   other keys, from a file and from stdin, writes what the whole-document
//!   parse wrote.

mod common;

use flate2::write::ZlibEncoder;
use flate2::Compression;
use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use libtest_mimic::{Arguments, Completion, Trial};
use molrec::lmdb::{partial_path, Reader};
use molrec::model::{Column, ColumnData, Record};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const MREC: &str = env!("CARGO_BIN_EXE_mrec");

fn main() {
    let python = |name: &'static str, f: fn(&Path)| {
        Trial::ignorable_test(name, move || {
            Ok(match python_data() {
                Ok(dir) => {
                    f(dir);
                    Completion::Completed
                }
                Err(why) => Completion::ignored_with(why.clone()),
            })
        })
    };
    let trials = vec![
        python(
            "every_frame_reads_back_as_ase_reads_it_one_row_one_record",
            every_frame_reads_back_as_ase_reads_it,
        ),
        python(
            "grouped_trajectories_read_back_as_ase_reads_their_rows",
            grouped_trajectories_read_back_as_ase_reads_their_rows,
        ),
        python("the_summary_of_one_import_is_a_snapshot", summary_snapshot),
        Trial::test("bad_rows_are_named_by_shard_key_and_problem", || {
            bad_rows_are_named_by_shard_key_and_problem();
            Ok(())
        }),
        Trial::test("skip_bad_counts_and_reports_what_it_dropped", || {
            skip_bad_counts_and_reports_what_it_dropped();
            Ok(())
        }),
        Trial::test("bad_shards_are_refused_before_anything_is_written", || {
            bad_shards_are_refused_before_anything_is_written();
            Ok(())
        }),
        Trial::test("an_interrupted_import_leaves_its_output_as_it_was", || {
            an_interrupted_import_leaves_its_output_as_it_was();
            Ok(())
        }),
        Trial::test("write_streams_documents_in_any_key_order", || {
            write_streams_documents_in_any_key_order();
            Ok(())
        }),
    ];
    let args = Arguments::from_args();
    libtest_mimic::run(&args, trials).exit();
}

/// The shards and what ase reads from them, generated once per run; `Err`
/// says why they cannot be (no python3, or it lacks a package).
fn python_data() -> &'static Result<PathBuf, String> {
    static DATA: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DATA.get_or_init(|| {
        let probe = Command::new("python3")
            .args(["-c", "import ase, ase_db_backends.aselmdb, lmdb, numpy"])
            .output();
        match probe {
            Err(e) => return Err(format!("no python3 ({e})")),
            Ok(o) if !o.status.success() => {
                return Err(format!(
                    "python3 lacks ase, ase-db-backends, lmdb or numpy (pip install ase ase-db-backends lmdb numpy): {}",
                    String::from_utf8_lossy(&o.stderr).lines().last().unwrap_or("")
                ))
            }
            Ok(_) => {}
        }
        let dir = common::scratch_dir("import-ase");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/import_data/make_aselmdb.py");
        let out = Command::new("python3")
            .arg(&script)
            .arg(&dir)
            .arg("150")
            .output()
            .map_err(|e| format!("python3 {}: {e}", script.display()))?;
        assert!(
            out.status.success(),
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(dir)
    })
}

fn run(args: &[&std::ffi::OsStr]) -> (Option<i32>, String, String) {
    let out = Command::new(MREC)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn import(inputs: &[PathBuf], out: &Path, extra: &[&str]) -> (Option<i32>, String, String) {
    let mut args: Vec<&std::ffi::OsStr> =
        vec!["import".as_ref(), "aselmdb".as_ref(), "--quiet".as_ref()];
    args.extend(extra.iter().map(std::ffi::OsStr::new));
    args.extend(inputs.iter().map(|p| p.as_os_str()));
    args.push(out.as_os_str());
    run(&args)
}

/// Floats of `expected.json`: the integers of their IEEE-754 bits.
fn bits(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

fn f64_bits(c: &Column) -> Vec<u64> {
    match &c.data {
        ColumnData::F64(v) => v.iter().map(|x| x.to_bits()).collect(),
        other => panic!("not f64: {other:?}"),
    }
}

/// Interleaves x, y, z columns into ASE's `[n, 3]` order.
fn xyz_bits(cols: &std::collections::BTreeMap<String, Column>, names: [&str; 3]) -> Vec<u64> {
    let [x, y, z] = names.map(|n| f64_bits(&cols[n]));
    (0..x.len()).flat_map(|i| [x[i], y[i], z[i]]).collect()
}

/// A column of the frame's `atoms`: from the system, else the resolved frame.
fn atoms_column<'a>(record: &'a Record, frame: usize, name: &str) -> Option<&'a Column> {
    let system = record
        .system
        .as_ref()
        .and_then(|s| s.blocks.get("atoms"))
        .and_then(|b| b.columns.get(name));
    system.or_else(|| {
        record.trajectory.as_ref().unwrap().frames[frame].blocks["atoms"]
            .columns
            .get(name)
            .filter(|c| c.validity.as_ref().is_none_or(|m| m.iter().any(|&v| v)))
    })
}

/// Compares frame `frame` of `record` with one row of `expected.json`.
fn check_frame(record: &Record, frame: usize, e: &Value, what: &str) {
    let step = &record.trajectory.as_ref().unwrap().frames[frame];
    let atoms = &step.blocks["atoms"].columns;
    let numbers: Vec<u64> = e["numbers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    let z = atoms_column(record, frame, "atomic_number").unwrap();
    assert_eq!(z.data, ColumnData::U64(numbers.clone()), "{what}: numbers");
    let elements = atoms_column(record, frame, "element").unwrap();
    let ColumnData::String(elements) = &elements.data else {
        panic!("{what}: element is not a string column")
    };
    assert_eq!(elements.len(), numbers.len(), "{what}: elements");
    assert_eq!(
        xyz_bits(atoms, ["x", "y", "z"]),
        bits(&e["positions"]),
        "{what}: positions"
    );
    // The cell: ASE's rows are molrec's columns; none for a zero cell
    // without periodicity.
    let cell = bits(&e["cell"]);
    let pbc: Vec<bool> = e["pbc"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_bool().unwrap())
        .collect();
    match step.cell {
        None => {
            assert!(
                cell.iter().all(|&b| f64::from_bits(b) == 0.0),
                "{what}: cell lost"
            );
            assert!(pbc.iter().all(|&b| !b), "{what}: pbc lost");
        }
        Some(c) => {
            assert!(c.defined, "{what}");
            let transposed: Vec<u64> = (0..9)
                .map(|k| c.vectors[(k % 3) * 3 + k / 3].to_bits())
                .collect();
            assert_eq!(transposed, cell, "{what}: cell");
            assert_eq!(c.boundary.to_vec(), pbc, "{what}: pbc");
        }
    }
    let pe = step.meta["pe"].clone();
    match &e["energy"] {
        Value::Null => assert_eq!(pe, json!("NaN"), "{what}: no energy"),
        b => assert_eq!(
            molrec::typed_json::f64_from_json(&pe).unwrap().to_bits(),
            b.as_u64().unwrap(),
            "{what}: energy"
        ),
    }
    let forces_present = atoms
        .get("fx")
        .is_some_and(|c| c.validity.as_ref().is_none_or(|m| m.iter().all(|&v| v)));
    match &e["forces"] {
        Value::Null => assert!(!forces_present, "{what}: forces where ase has none"),
        f => {
            assert!(forces_present, "{what}: forces missing");
            assert_eq!(
                xyz_bits(atoms, ["fx", "fy", "fz"]),
                bits(f),
                "{what}: forces"
            );
        }
    }
    let optional = |key: &str, col: &str| match &e[key] {
        Value::Null => assert!(atoms_column(record, frame, col).is_none(), "{what}: {col}"),
        v => assert_eq!(
            f64_bits(atoms_column(record, frame, col).unwrap()),
            bits(v),
            "{what}: {key}"
        ),
    };
    optional("charges", "charge");
    optional("masses", "mass");
    match &e["momenta"] {
        Value::Null => assert!(!atoms.contains_key("px"), "{what}: momenta"),
        m => assert_eq!(
            xyz_bits(atoms, ["px", "py", "pz"]),
            bits(m),
            "{what}: momenta"
        ),
    }
    match &e["tags"] {
        Value::Null => assert!(atoms_column(record, frame, "tag").is_none(), "{what}: tags"),
        t => {
            let want: Vec<i64> = t
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect();
            assert_eq!(
                atoms_column(record, frame, "tag").unwrap().data,
                ColumnData::I64(want),
                "{what}: tags"
            );
        }
    }
    match &e["fixed"] {
        Value::Null => assert!(
            atoms_column(record, frame, "fixed").is_none(),
            "{what}: fixed"
        ),
        f => {
            let want: Vec<bool> = f
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_bool().unwrap())
                .collect();
            assert_eq!(
                atoms_column(record, frame, "fixed").unwrap().data,
                ColumnData::Bool(want),
                "{what}: fixed"
            );
        }
    }
}

fn every_frame_reads_back_as_ase_reads_it(dir: &Path) {
    let out = dir.join("ab.mrec.lmdb");
    let inputs = [dir.join("a.aselmdb"), dir.join("b.aselmdb")];
    let (code, stdout, stderr) = import(&inputs, &out, &["--overwrite", "--index-column", "sid"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let expected: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected.json")).unwrap()).unwrap();
    assert!(expected.len() > 250, "{}", expected.len());
    let reader = Reader::open_checked(&out).unwrap();
    assert_eq!(reader.n_records(), expected.len() as u64);
    let violations = reader.violations();
    assert!(violations.is_empty(), "{violations:?}");
    let units = &reader.collection_meta()["units"];
    assert_eq!(units["length"], "angstrom");
    assert_eq!(units["energy"], "eV");
    assert_eq!(units["force"], "eV/angstrom");
    let txn = reader.txn().unwrap();
    let (mut with_forces, mut periodic, mut fixed) = (0, 0, 0);
    for (i, e) in expected.iter().enumerate() {
        let record = txn.record(i as u64).unwrap();
        let what = format!("record {i} (ase id {})", e["id"]);
        assert_eq!(
            record.trajectory.as_ref().unwrap().frames.len(),
            1,
            "{what}"
        );
        assert_eq!(record.meta["id"], e["id"], "{what}: id");
        assert_eq!(
            record.meta["key_value_pairs"], e["key_value_pairs"],
            "{what}: key_value_pairs"
        );
        check_frame(&record, 0, e, &what);
        with_forces += e["forces"].is_array() as usize;
        periodic += e["pbc"].as_array().unwrap().iter().any(|b| b == true) as usize;
        fixed += e["fixed"].is_array() as usize;
    }
    // The data holds what the test claims to cover.
    assert!(
        with_forces > 100 && with_forces < expected.len(),
        "{with_forces}"
    );
    assert!(periodic > 50 && fixed > 20, "{periodic} {fixed}");
    let index = reader.index_columns().unwrap();
    let sids: Vec<i64> = expected
        .iter()
        .map(|e| e["key_value_pairs"]["sid"].as_i64().unwrap())
        .collect();
    assert_eq!(index["sid"].data, ColumnData::I64(sids));
    drop(txn);
    drop(reader);
    molrec::lmdb::remove_with_lock_file(&out);
}

fn grouped_trajectories_read_back_as_ase_reads_their_rows(dir: &Path) {
    let out = dir.join("t.mrec.lmdb");
    let (code, stdout, stderr) = import(
        &[dir.join("t.aselmdb")],
        &out,
        &["--overwrite", "--group-by", "traj", "--order-by", "step"],
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(stdout.contains("masked"), "{stdout}");
    let expected: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("expected-t.json")).unwrap())
            .unwrap();
    let reader = Reader::open_checked(&out).unwrap();
    let violations = reader.violations();
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(reader.n_records(), 4);
    assert_eq!(reader.n_frames(), expected.len() as u64);
    let txn = reader.txn().unwrap();
    for r in 0..reader.n_records() {
        let record = txn.record(r).unwrap();
        let traj = record.meta["group_by"]["traj"]
            .as_str()
            .unwrap()
            .to_string();
        let mut rows: Vec<&Value> = expected
            .iter()
            .filter(|e| e["key_value_pairs"]["traj"] == traj.as_str())
            .collect();
        rows.sort_by_key(|e| e["key_value_pairs"]["step"].as_i64());
        let frames = &record.trajectory.as_ref().unwrap().frames;
        assert_eq!(frames.len(), rows.len(), "{traj}");
        for (k, e) in rows.iter().enumerate() {
            assert_eq!(
                Some(frames[k].step),
                e["key_value_pairs"]["step"].as_i64(),
                "{traj}"
            );
            assert_eq!(frames[k].meta["ase"]["id"], e["id"], "{traj} frame {k}");
            check_frame(&record, k, e, &format!("{traj} frame {k}"));
        }
        // Topology in the system when constant, in the trajectory when not.
        let system_z = record.system.as_ref().is_some_and(|s| {
            s.blocks
                .get("atoms")
                .is_some_and(|b| b.columns.contains_key("atomic_number"))
        });
        assert_eq!(system_z, traj != "grow", "{traj}");
        let system_tag = record
            .system
            .as_ref()
            .is_some_and(|s| s.blocks["atoms"].columns.contains_key("tag"));
        assert_eq!(system_tag, traj == "relax", "{traj}: tags");
    }
    drop(txn);
    drop(reader);
    molrec::lmdb::remove_with_lock_file(&out);
}

fn summary_snapshot(dir: &Path) {
    let out = dir.join("summary.mrec.lmdb");
    let inputs = [dir.join("a.aselmdb"), dir.join("b.aselmdb")];
    let (code, stdout, stderr) = import(&inputs, &out, &["--overwrite"]);
    assert_eq!(code, Some(0), "{stderr}");
    insta::with_settings!({snapshot_path => Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots"), prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!("import_aselmdb_summary", stdout);
    });
    molrec::lmdb::remove_with_lock_file(&out);
}

// ------------------------------------------------------- hand-made shards --

fn zlib(bytes: &[u8]) -> Vec<u8> {
    let mut e = ZlibEncoder::new(Vec::new(), Compression::new(6));
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// An ASE row of `n` hydrogens, as ASE's JSON encoding writes it.
fn good_row(n: usize) -> Vec<u8> {
    let numbers = vec!["1"; n].join(", ");
    let positions: Vec<String> = (0..3 * n).map(|k| format!("{}", k as f64 * 0.5)).collect();
    format!(
        "{{\"numbers\": {{\"__ndarray__\": [[{n}], \"int64\", [{numbers}]]}}, \"positions\": {{\"__ndarray__\": [[{n}, 3], \"float64\", [{}]]}}, \"cell\": {{\"__ndarray__\": [[3, 3], \"float64\", [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]}}, \"pbc\": {{\"__ndarray__\": [[3], \"bool\", [false, false, false]]}}, \"energy\": NaN, \"key_value_pairs\": {{\"k\": 1}}}}",
        positions.join(", ")
    )
    .into_bytes()
}

/// Writes an LMDB file with these raw (already encoded) values.
fn shard(path: &Path, entries: &[(&str, Vec<u8>)]) {
    molrec::lmdb::remove_with_lock_file(path);
    let mut options = EnvOpenOptions::new();
    options.map_size(1 << 30).max_dbs(0);
    // SAFETY: valid flags for a writable NO_SUB_DIR environment.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR) };
    // SAFETY: a new file, only written through this environment.
    let env = unsafe { options.open(path) }.unwrap();
    let mut txn = env.write_txn().unwrap();
    let db: Database<Bytes, Bytes> = env.create_database(&mut txn, None).unwrap();
    for (k, v) in entries {
        db.put(&mut txn, k.as_bytes(), v).unwrap();
    }
    txn.commit().unwrap();
    env.prepare_for_closing().wait();
    let _ = std::fs::remove_file(common::lock_path(path));
}

/// One bad value per case and what the error must say about it.
fn bad_values() -> Vec<(Vec<u8>, &'static str)> {
    let full = zlib(&good_row(2));
    vec![
        (b"not zlib at all".to_vec(), "not a zlib stream"),
        (full[..full.len() / 2].to_vec(), "truncated zlib stream"),
        (zlib(b"[1, 2, 3]"), "expected an ASE row (a JSON object)"),
        (zlib(b"{\"numbers\": {\"__ndarray__\": [[2], \"int64\", [1, 1]]"), "not JSON"),
        (zlib(b"{\"positions\": [[0.0, 0.0, 0.0]]}"), "no `numbers`"),
        (
            zlib(b"{\"numbers\": {\"__ndarray__\": [[2], \"int64\", [1, 1]]}, \"positions\": {\"__ndarray__\": [[1, 3], \"float64\", [0.0, 0.0, 0.0]]}}"),
            "`positions`: shape [1, 3], expected [2, 3]",
        ),
        (
            zlib(b"{\"numbers\": {\"__ndarray__\": [[1], \"int64\", [200]]}, \"positions\": [[0.0, 0.0, 0.0]]}"),
            "is not an atomic number",
        ),
        (
            zlib(b"{\"numbers\": {\"__ndarray__\": [[1], \"int64\", [1]]}, \"positions\": [[0.0, 0.0, 0.0]], \"forces\": {\"__ndarray__\": [[5, 3], \"float64\", [1.0]]}}"),
            "holds 15 values, the list 1",
        ),
    ]
}

fn bad_rows_are_named_by_shard_key_and_problem() {
    let dir = common::scratch_dir("import-bad");
    let out = dir.join("out.mrec.lmdb");
    for (i, (value, says)) in bad_values().into_iter().enumerate() {
        let path = dir.join(format!("bad-{i}.aselmdb"));
        shard(
            &path,
            &[
                ("1", zlib(&good_row(3))),
                ("2", value),
                ("nextid", zlib(b"3")),
            ],
        );
        let (code, stdout, stderr) = import(std::slice::from_ref(&path), &out, &[]);
        assert_eq!(code, Some(4), "case {i}: {stdout}{stderr}");
        let named = format!("shard {}: key \"2\": ", path.display());
        assert!(
            stderr.contains(&named) && stderr.contains(says),
            "case {i}: {stderr}"
        );
        assert!(
            !out.exists() && !partial_path(&out).exists(),
            "case {i}: a file was left"
        );
    }
    // A row below nextid that is neither there nor deleted.
    let path = dir.join("missing.aselmdb");
    shard(
        &path,
        &[
            ("1", zlib(&good_row(1))),
            ("3", zlib(&good_row(1))),
            ("deleted_ids", zlib(b"[4]")),
            ("nextid", zlib(b"5")),
        ],
    );
    let (code, _, stderr) = import(std::slice::from_ref(&path), &out, &[]);
    assert_eq!(code, Some(4), "{stderr}");
    assert!(stderr.contains("key \"2\": missing"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn skip_bad_counts_and_reports_what_it_dropped() {
    let dir = common::scratch_dir("import-skip");
    let path = dir.join("mixed.aselmdb");
    let bad = bad_values();
    let n_bad = bad.len();
    let mut entries: Vec<(String, Vec<u8>)> = vec![("1".into(), zlib(&good_row(2)))];
    for (i, (v, _)) in bad.into_iter().enumerate() {
        entries.push(((i + 2).to_string(), v));
    }
    let last = n_bad + 2;
    entries.push((last.to_string(), zlib(&good_row(4))));
    // Id `last + 1` is deleted, `last + 2` missing.
    entries.push((
        "deleted_ids".into(),
        zlib(format!("[{}]", last + 1).as_bytes()),
    ));
    entries.push(("nextid".into(), zlib((last + 3).to_string().as_bytes())));
    entries.push(("metadata".into(), zlib(b"{\"title\": \"mixed\"}")));
    entries.push(("stray".into(), zlib(b"1")));
    let refs: Vec<(&str, Vec<u8>)> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    shard(&path, &refs);
    let out = dir.join("out.mrec.lmdb");
    let (code, stdout, stderr) = import(std::slice::from_ref(&path), &out, &["--skip-bad"]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("imported 2 of {} rows", n_bad + 3)),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{:>8}  bad rows", n_bad + 1)),
        "{stdout}"
    );
    assert!(stdout.contains("1 deleted ids skipped"), "{stdout}");
    assert!(
        stdout.contains("1 keys that are not rows ignored"),
        "{stdout}"
    );
    assert!(stdout.contains("key \"2\": not a zlib stream"), "{stdout}");
    let reader = Reader::open_checked(&out).unwrap();
    assert_eq!(reader.n_records(), 2);
    let txn = reader.txn().unwrap();
    let record = txn.record(1).unwrap();
    assert_eq!(record.meta["id"], json!(last));
    // A NaN energy (Python's `NaN` token) reads back as NaN.
    assert_eq!(
        record.trajectory.unwrap().frames[0].meta["pe"],
        json!("NaN")
    );
    assert_eq!(
        reader.collection_meta()["source"]["shards"][0]["metadata"]["title"],
        "mixed"
    );
    drop(txn);
    drop(reader);
    let _ = std::fs::remove_dir_all(&dir);
}

fn bad_shards_are_refused_before_anything_is_written() {
    let dir = common::scratch_dir("import-bad-shard");
    let out = dir.join("out.mrec.lmdb");
    let huge = dir.join("huge-nextid.aselmdb");
    shard(
        &huge,
        &[
            ("1", zlib(&good_row(1))),
            ("nextid", zlib(b"99999999999999")),
        ],
    );
    let notjson = dir.join("bad-deleted.aselmdb");
    shard(
        &notjson,
        &[
            ("1", zlib(&good_row(1))),
            ("deleted_ids", zlib(b"{\"a\": 1}")),
        ],
    );
    let text = dir.join("text.aselmdb");
    std::fs::write(&text, vec![b'x'; 70000]).unwrap();
    let cases: [(&Path, &str); 4] = [
        (&huge, "key \"nextid\": 99999999999999 claims"),
        (&notjson, "key \"deleted_ids\": expected a list"),
        (&text, "not a sound LMDB file"),
        (&dir, "not a file"),
    ];
    for (path, says) in cases {
        let (code, stdout, stderr) = import(&[path.to_path_buf()], &out, &[]);
        assert_eq!(code, Some(4), "{}: {stdout}{stderr}", path.display());
        assert!(stderr.contains(says), "{}: {stderr}", path.display());
        assert!(stderr.contains(&path.display().to_string()), "{stderr}");
        assert!(!out.exists() && !partial_path(&out).exists());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C (SIGINT) while rows are appended: exit 130, the output as it
/// was (absent), no partial file left.
fn an_interrupted_import_leaves_its_output_as_it_was() {
    let dir = common::scratch_dir("import-interrupted");
    let path = dir.join("big.aselmdb");
    let rows = 40_000u64;
    let row = zlib(&good_row(30));
    let mut entries: Vec<(String, Vec<u8>)> =
        (1..=rows).map(|id| (id.to_string(), row.clone())).collect();
    entries.push(("nextid".into(), zlib((rows + 1).to_string().as_bytes())));
    let refs: Vec<(&str, Vec<u8>)> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    shard(&path, &refs);
    drop(refs);
    let out = dir.join("out.mrec.lmdb");
    let partial = partial_path(&out);
    let child = Command::new(MREC)
        .args(["import", "aselmdb", "--quiet"])
        .arg(&path)
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    while std::fs::metadata(&partial).map_or(true, |m| m.len() == 0) {
        assert!(started.elapsed().as_secs() < 120, "no partial file");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // SAFETY: kill sends a signal to the child, which this test owns and
    // has not waited for, so the pid is still the child's.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let done = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&done.stderr);
    common::report(&format!(
        "import: interrupted {:.0} ms after it started: exit {:?}: {}",
        started.elapsed().as_secs_f64() * 1e3,
        done.status.code(),
        stderr.trim()
    ));
    assert_eq!(done.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("is as it was"), "{stderr}");
    assert!(!out.exists() && !partial.exists() && !common::lock_path(&partial).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------ mrec write stream --

/// `mrec write` reads `records` one at a time whatever the key order: a
/// document with `sequence_schema` (and `meta`) after `records`, from a
/// file and from stdin, writes the collection the whole-document parse
/// writes.
fn write_streams_documents_in_any_key_order() {
    let dir = common::scratch_dir("import-write-stream");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
    let mut checked = 0;
    for sub in ["examples", "collection"] {
        for entry in std::fs::read_dir(fixtures.join(sub)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().to_string();
            if name.starts_with("refuse") || !name.ends_with(".json") {
                continue;
            }
            let doc: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let want = molrec::model_json::collection_from_json(&doc);
            let Ok(want) = want else { continue };
            // Text with `records` first and every other key after it.
            let Value::Object(map) = &doc else { panic!() };
            let mut text = format!("{{\"records\": {}", map["records"]);
            for (k, v) in map.iter().filter(|(k, _)| *k != "records") {
                text.push_str(&format!(", {}: {v}", Value::from(k.as_str())));
            }
            text.push('}');
            let reordered = dir.join("reordered.json");
            std::fs::write(&reordered, &text).unwrap();
            let out = dir.join("c.mrec.lmdb");
            let (code, _, stderr) = run(&[
                "write".as_ref(),
                reordered.as_os_str(),
                out.as_os_str(),
                "--overwrite".as_ref(),
            ]);
            if code != Some(0) {
                // The fixture's collection is refused by the writer either way.
                let whole = molrec::lmdb::write_collection(
                    &dir.join("whole.mrec.lmdb"),
                    want.clone(),
                    molrec::lmdb::WriterOptions {
                        overwrite: true,
                        ..Default::default()
                    },
                );
                let e = whole.expect_err(&format!("{name}: streamed write failed: {stderr}"));
                assert!(stderr.contains(&e.to_string()), "{name}: {stderr} vs {e}");
                continue;
            }
            let got = Reader::open_checked(&out)
                .unwrap()
                .read_collection()
                .unwrap();
            // From stdin too.
            let out2 = dir.join("c2.mrec.lmdb");
            let status = Command::new(MREC)
                .arg("write")
                .arg("-")
                .arg(&out2)
                .arg("--overwrite")
                .stdin(std::fs::File::open(&reordered).unwrap())
                .status()
                .unwrap();
            assert!(status.success(), "{name}: stdin");
            let got2 = Reader::open_checked(&out2)
                .unwrap()
                .read_collection()
                .unwrap();
            assert_eq!(format!("{got:?}"), format!("{got2:?}"), "{name}");
            let whole = dir.join("whole.mrec.lmdb");
            molrec::lmdb::write_collection(
                &whole,
                want,
                molrec::lmdb::WriterOptions {
                    overwrite: true,
                    ..Default::default()
                },
            )
            .unwrap();
            let want = Reader::open_checked(&whole)
                .unwrap()
                .read_collection()
                .unwrap();
            assert_eq!(format!("{got:?}"), format!("{want:?}"), "{name}");
            checked += 1;
        }
    }
    assert!(checked > 20, "{checked}");
    let _ = std::fs::remove_dir_all(&dir);
}
