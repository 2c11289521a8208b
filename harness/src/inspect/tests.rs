//! Tests of file inspection and of recipes, on files built by hand: a tiny
//! test-only frame-bytes encoder, `Base::Empty` and `Put` edits.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{json, Value};

use super::frame_bytes::{self, clause as mrf1};
use super::{clause, inspect_file, key_label, Finding, Key};
use crate::recipe::{materialize, parse_key, Base, Edit, Recipe};

// ---------------------------------------------------------------------------
// A tiny frame-bytes encoder (test only).

enum Buf {
    Raw(Vec<u8>),
    Str(Vec<&'static str>),
}

struct Col {
    name: &'static str,
    dtype: &'static str,
    shape: Vec<u64>,
    buf: Buf,
}

fn f64s(name: &'static str, v: &[f64]) -> Col {
    Col {
        name,
        dtype: "f64",
        shape: vec![v.len() as u64],
        buf: Buf::Raw(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
    }
}

fn u64s(name: &'static str, v: &[u64]) -> Col {
    Col {
        name,
        dtype: "u64",
        shape: vec![v.len() as u64],
        buf: Buf::Raw(v.iter().flat_map(|x| x.to_le_bytes()).collect()),
    }
}

fn bools(name: &'static str, v: &[bool]) -> Col {
    Col {
        name,
        dtype: "bool",
        shape: vec![v.len() as u64],
        buf: Buf::Raw(v.iter().map(|&b| u8::from(b)).collect()),
    }
}

fn strs(name: &'static str, v: &[&'static str]) -> Col {
    Col {
        name,
        dtype: "string",
        shape: vec![v.len() as u64],
        buf: Buf::Str(v.to_vec()),
    }
}

/// Encodes a frame: `blocks` as (name, count, columns), `extra` members
/// merged into the header. Buffers are laid out in order, each 8-aligned.
fn encode(blocks: Vec<(&str, u64, Vec<Col>)>, extra: Value) -> Vec<u8> {
    let mut payload: Vec<u8> = Vec::new();
    let mut header_blocks = serde_json::Map::new();
    for (name, count, cols) in blocks {
        let mut columns = serde_json::Map::new();
        for col in cols {
            let mut entry = json!({"dtype": col.dtype, "shape": col.shape});
            match col.buf {
                Buf::Raw(bytes) => {
                    payload.resize(payload.len().next_multiple_of(8), 0);
                    entry["offset"] = json!(payload.len());
                    payload.extend_from_slice(&bytes);
                }
                Buf::Str(values) => entry["values"] = json!(values),
            }
            columns.insert(col.name.to_string(), entry);
        }
        header_blocks.insert(
            name.to_string(),
            json!({"count": count, "structural_shape": null, "columns": columns}),
        );
    }
    let mut header = json!({ "blocks": header_blocks });
    if let Value::Object(extra) = extra {
        for (k, v) in extra {
            header[k] = v;
        }
    }
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = b"MRF1".to_vec();
    out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    out.extend_from_slice(&header);
    out.resize(out.len().next_multiple_of(8), 0);
    out.extend_from_slice(&payload);
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn put_bytes(key: &str, bytes: &[u8]) -> Edit {
    Edit::Put {
        key: key.into(),
        json: None,
        hex: Some(hex(bytes)),
        text: None,
    }
}

fn put_json(key: &str, value: Value) -> Edit {
    Edit::Put {
        key: key.into(),
        json: Some(value),
        hex: None,
        text: None,
    }
}

fn set_json(key: &str, pointer: &str, value: Value) -> Edit {
    Edit::SetJson {
        key: key.into(),
        pointer: pointer.into(),
        value: Some(value),
        value_json: None,
    }
}

fn set_header(key: &str, pointer: &str, value: Value) -> Edit {
    Edit::SetHeader {
        key: key.into(),
        pointer: pointer.into(),
        value: Some(value),
        value_json: None,
    }
}

// ---------------------------------------------------------------------------
// A good two-record collection.

fn good_meta() -> Value {
    json!({
        "layout": "mrec-lmdb",
        "layout_version": 1,
        "collection": {"molrec_version": 1, "units": {"length": "angstrom", "energy": "kcal/mol"}},
        "sequence_schema": {
            "blocks": {"atoms": {"columns": {"x": {"dtype": "f64"}}}},
            "meta": {}
        },
        "n_records": 2,
        "n_frames": 3
    })
}

fn good_index() -> Vec<u8> {
    encode(
        vec![(
            "records",
            2,
            vec![
                u64s("first_frame", &[0, 2]),
                u64s("n_frames", &[2, 1]),
                u64s("n_atoms", &[2, 2]),
                bools("has_trajectory", &[true, true]),
                strs("code", &["a", "b"]),
            ],
        )],
        json!({"meta": {}}),
    )
}

fn good_system() -> Vec<u8> {
    encode(
        vec![(
            "atoms",
            2,
            vec![f64s("x", &[0.0, 1.5]), strs("element", &["O", "H"])],
        )],
        json!({"meta": {"charge": 0}, "meta_types": {"charge": "i64"}}),
    )
}

fn good_frame(step: i64, xs: Option<&[f64]>) -> Vec<u8> {
    let blocks = match xs {
        Some(xs) => vec![("atoms", xs.len() as u64, vec![f64s("x", xs)])],
        None => vec![],
    };
    encode(blocks, json!({"meta": {}, "step": step}))
}

fn good_ff() -> Vec<u8> {
    encode(
        vec![(
            "pair.lj%2Fcut",
            1,
            vec![strs("name", &["O-O"]), f64s("epsilon", &[0.15])],
        )],
        json!({"meta": {"name": "tip3p", "units": {"preset": "real"},
                        "styles": [{"category": "pair", "style": "lj/cut"}]}}),
    )
}

fn good_edits() -> Vec<Edit> {
    vec![
        put_bytes("index", &good_index()),
        put_json("r:0", json!({})),
        put_json("r:1", json!({"name": "b"})),
        put_bytes("s:0", &good_system()),
        put_bytes("f:0", &good_frame(0, Some(&[0.0, 1.0]))),
        put_bytes("f:1", &good_frame(1, None)),
        put_bytes("f:2", &good_frame(0, Some(&[2.0, 3.0]))),
        put_bytes("ff", &good_ff()),
        put_json("meta", good_meta()),
    ]
}

fn good_recipe_with(extra: Vec<Edit>) -> Recipe {
    let mut edits = good_edits();
    edits.extend(extra);
    Recipe {
        base: Base::Empty,
        edits,
    }
}

// ---------------------------------------------------------------------------
// Paths and helpers.

fn scratch_dir(name: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "harness-inspect-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Fixtures read from `dir`, as the runner reads them from its layout.
fn fixtures_in(dir: &Path) -> impl Fn(&str) -> Result<Value, String> + '_ {
    move |name| {
        let text = std::fs::read_to_string(dir.join(name)).map_err(|e| e.to_string())?;
        serde_json::from_str(&text).map_err(|e| e.to_string())
    }
}

fn no_writer(_: &Value, _: &Path) -> Result<(), String> {
    Err("no writer in this test".into())
}

fn build(name: &str, recipe: &Recipe) -> (PathBuf, PathBuf) {
    let dir = scratch_dir(name);
    let path = dir.join("c.mrec.lmdb");
    materialize(recipe, &path, &mut no_writer, &fixtures_in(&dir))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    (dir, path)
}

fn clauses(findings: &[Finding]) -> BTreeSet<String> {
    findings.iter().map(|f| f.clause.clone()).collect()
}

fn read_value(path: &Path, key: &str) -> Option<Vec<u8>> {
    let mut options = heed::EnvOpenOptions::new();
    // SAFETY: test files are private to one test and not written meanwhile.
    let env = unsafe {
        options.flags(heed::EnvFlags::NO_SUB_DIR | heed::EnvFlags::READ_ONLY);
        options.open(path).unwrap()
    };
    let value = {
        let rtxn = env.read_txn().unwrap();
        let db: heed::Database<heed::types::Bytes, heed::types::Bytes> =
            env.open_database(&rtxn, None).unwrap().unwrap();
        db.get(&rtxn, &parse_key(key).unwrap())
            .unwrap()
            .map(<[u8]>::to_vec)
    };
    env.prepare_for_closing().wait();
    value
}

// ---------------------------------------------------------------------------
// Inspection.

#[test]
fn good_file_has_no_findings() {
    let (dir, path) = build("good", &good_recipe_with(vec![]));
    let expected = vec![vec!["atoms".to_string()], vec!["atoms".to_string()]];
    assert_eq!(inspect_file(&path, None), vec![]);
    assert_eq!(inspect_file(&path, Some(&firsts(&expected))), vec![]);
    // Inspection closes the env: it can be inspected again, and rebuilt.
    assert_eq!(inspect_file(&path, None), vec![]);
    materialize(
        &good_recipe_with(vec![]),
        &path,
        &mut no_writer,
        &fixtures_in(&dir),
    )
    .unwrap();
    assert_eq!(inspect_file(&path, None), vec![]);
    let _ = std::fs::remove_dir_all(dir);
}

/// Builds each case's file (the good one with its edits) and requires a
/// finding under its clause; every case that fails is listed.
fn each_finds_its_clause(cases: Vec<(&str, Vec<Edit>, &str)>) {
    let mut failures = Vec::new();
    for (name, edits, want) in cases {
        let (dir, path) = build(name, &good_recipe_with(edits));
        let findings = inspect_file(&path, None);
        if !clauses(&findings).contains(want) {
            failures.push(format!("{name}: wanted {want}, got {findings:#?}"));
        }
        let _ = std::fs::remove_dir_all(dir);
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn each_broken_variant_names_its_clause() {
    let shape_overflow = json!([2u64, 1u64 << 62]);
    let cases: Vec<(&str, Vec<Edit>, &str)> = vec![
        (
            "bad-magic",
            vec![Edit::SetBytes {
                key: "f:0".into(),
                offset: 0,
                hex: hex(b"MRF2"),
            }],
            mrf1::MAGIC,
        ),
        (
            "too-short",
            vec![Edit::Truncate {
                key: "f:1".into(),
                len: 7,
            }],
            mrf1::TOO_SHORT,
        ),
        (
            "header-past-value",
            vec![Edit::SetBytes {
                key: "f:0".into(),
                offset: 4,
                hex: "ffff0000".into(),
            }],
            mrf1::HEADER_BOUNDS,
        ),
        (
            "header-not-json",
            vec![put_bytes(
                "f:1",
                b"MRF1\x02\x00\x00\x00{{\x00\x00\x00\x00\x00\x00",
            )],
            mrf1::HEADER_JSON,
        ),
        (
            "header-not-object",
            vec![put_bytes(
                "f:1",
                b"MRF1\x02\x00\x00\x00[]\x00\x00\x00\x00\x00\x00",
            )],
            mrf1::HEADER_JSON,
        ),
        (
            "misaligned-offset",
            vec![set_header(
                "f:0",
                "/blocks/atoms/columns/x/offset",
                json!(4),
            )],
            mrf1::OFFSET_ALIGNED,
        ),
        (
            "buffer-past-value",
            vec![set_header(
                "f:0",
                "/blocks/atoms/columns/x/offset",
                json!(8),
            )],
            mrf1::BUFFER_BOUNDS,
        ),
        (
            "buffer-truncated",
            vec![Edit::Truncate {
                key: "s:0".into(),
                len: good_system().len() as u64 - 1,
            }],
            mrf1::BUFFER_BOUNDS,
        ),
        (
            "validity-past-value",
            vec![set_header(
                "f:0",
                "/blocks/atoms/columns/x/validity",
                json!(16),
            )],
            mrf1::BUFFER_BOUNDS,
        ),
        (
            "size-overflow",
            vec![set_header(
                "f:0",
                "/blocks/atoms/columns/x/shape",
                shape_overflow,
            )],
            mrf1::SIZE_OVERFLOW,
        ),
        (
            "dtype-f32",
            vec![set_header(
                "f:0",
                "/blocks/atoms/columns/x/dtype",
                json!("f32"),
            )],
            mrf1::DTYPE,
        ),
        (
            "string-values-too-short",
            vec![Edit::RemoveHeader {
                key: "s:0".into(),
                pointer: "/blocks/atoms/columns/element/values/1".into(),
            }],
            mrf1::STRING_VALUES,
        ),
        (
            "string-with-offset",
            vec![set_header(
                "ff",
                "/blocks/pair.lj%2Fcut/columns/name/offset",
                json!(0),
            )],
            mrf1::STRING_VALUES,
        ),
        (
            "prefix-sum-off-by-one",
            vec![Edit::SetCell {
                key: "index".into(),
                block: "records".into(),
                column: "first_frame".into(),
                row: 1,
                value: json!(3),
            }],
            clause::INDEX_PREFIX_SUM,
        ),
        (
            "count-mismatch",
            vec![set_json("meta", "/n_records", json!(3))],
            clause::INDEX_COUNT,
        ),
        (
            "total-mismatch",
            vec![set_json("meta", "/n_frames", json!(4))],
            clause::INDEX_TOTAL,
        ),
        (
            "index-column-dtype",
            vec![set_header(
                "index",
                "/blocks/records/columns/has_trajectory/dtype",
                json!("u8"),
            )],
            clause::INDEX_COLUMNS,
        ),
        (
            "index-missing",
            vec![Edit::Delete {
                key: "index".into(),
            }],
            clause::INDEX_COLUMNS,
        ),
        (
            "missing-meta",
            vec![Edit::Delete { key: "meta".into() }],
            clause::META_REQUIRED,
        ),
        (
            "meta-not-json",
            vec![Edit::Put {
                key: "meta".into(),
                json: None,
                hex: None,
                text: Some("{not json".into()),
            }],
            clause::META_WELL_FORMED,
        ),
        (
            "layout",
            vec![set_json("meta", "/layout", json!("mrec-zarr"))],
            clause::META_LAYOUT,
        ),
        (
            "layout-version-string",
            vec![set_json("meta", "/layout_version", json!("1"))],
            clause::META_LAYOUT_VERSION,
        ),
        (
            "layout-version-float",
            vec![set_json("meta", "/layout_version", json!(1.0))],
            clause::META_LAYOUT_VERSION,
        ),
        (
            "layout-version-missing",
            vec![Edit::RemoveJson {
                key: "meta".into(),
                pointer: "/layout_version".into(),
            }],
            clause::META_LAYOUT_VERSION,
        ),
        (
            "layout-version-2",
            vec![set_json("meta", "/layout_version", json!(2))],
            clause::META_LAYOUT_VERSION,
        ),
        (
            "layout-version-null",
            vec![set_json("meta", "/layout_version", Value::Null)],
            clause::META_LAYOUT_VERSION,
        ),
        (
            "layout-version-bool",
            vec![set_json("meta", "/layout_version", json!(true))],
            clause::META_LAYOUT_VERSION,
        ),
        (
            "molrec-version-null",
            vec![set_json("meta", "/collection/molrec_version", Value::Null)],
            clause::MOLREC_VERSION,
        ),
        (
            "molrec-version-float",
            vec![set_json("meta", "/collection/molrec_version", json!(1.0))],
            clause::MOLREC_VERSION,
        ),
        (
            "units-missing",
            vec![Edit::RemoveJson {
                key: "meta".into(),
                pointer: "/collection/units".into(),
            }],
            clause::UNITS_REQUIRED,
        ),
        (
            "schema-not-object",
            vec![set_json("meta", "/sequence_schema/blocks", json!([]))],
            clause::META_WELL_FORMED,
        ),
        (
            "n-frames-negative",
            vec![set_json("meta", "/n_frames", json!(-1))],
            clause::META_WELL_FORMED,
        ),
        (
            "unknown-key",
            vec![Edit::Put {
                key: "hex:7a7a".into(),
                json: None,
                hex: None,
                text: Some("x".into()),
            }],
            clause::KEYS_SCHEME,
        ),
        (
            "record-key-too-long",
            vec![put_json("hex:72000000000000000000", json!({}))],
            clause::KEYS_SCHEME,
        ),
        (
            "record-beyond-n-records",
            vec![put_json("r:2", json!({}))],
            clause::KEYS_SCHEME,
        ),
        (
            "frame-beyond-n-frames",
            vec![put_bytes("f:3", &good_frame(5, None))],
            clause::KEYS_SCHEME,
        ),
        (
            "missing-frame-key",
            vec![Edit::Delete { key: "f:1".into() }],
            clause::FRAME_MISSING,
        ),
        (
            "record-meta-not-object",
            vec![put_json("r:1", json!([1, 2]))],
            clause::RECORD_META_JSON,
        ),
        (
            "undefined-cell-vectors-kept",
            vec![set_header(
                "f:0",
                "/box",
                json!({"vectors": [[2, 0, 0], [0, 2, 0], [0, 0, 2]], "boundary": [false, false, false], "cell_defined": false}),
            )],
            clause::BOX_UNDEFINED_CELL,
        ),
        (
            "undefined-cell-boundary-omitted",
            vec![set_header(
                "f:0",
                "/box",
                json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "cell_defined": false}),
            )],
            clause::BOX_UNDEFINED_CELL,
        ),
        (
            "update-shape-null-under-a-declared-shape",
            vec![set_json(
                "meta",
                "/sequence_schema/blocks/atoms/structural_shape",
                json!([2]),
            )],
            clause::STRUCTURAL_SHAPE_DECLARED,
        ),
    ];

    each_finds_its_clause(cases);
}

#[test]
fn an_undefined_cell_as_a_writer_stores_it_has_no_findings() {
    let cell = json!({"vectors": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], "origin": [1.5, -2.0, 0.25], "boundary": [false, false, false], "cell_defined": false});
    let (dir, path) = build(
        "undefined-cell-good",
        &good_recipe_with(vec![set_header("f:0", "/box", cell)]),
    );
    assert_eq!(inspect_file(&path, None), vec![]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn updates_stating_the_declared_shape_have_no_findings() {
    let (dir, path) = build(
        "declared-shape-good",
        &good_recipe_with(vec![
            set_json(
                "meta",
                "/sequence_schema/blocks/atoms/structural_shape",
                json!([2]),
            ),
            set_header("f:0", "/blocks/atoms/structural_shape", json!([2])),
            set_header("f:2", "/blocks/atoms/structural_shape", json!([2])),
        ]),
    );
    assert_eq!(inspect_file(&path, None), vec![]);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn every_finding_is_reported_not_only_the_first() {
    let (dir, path) = build(
        "many",
        &good_recipe_with(vec![
            set_json("meta", "/layout_version", json!("1")),
            Edit::Delete { key: "f:1".into() },
            set_header("f:2", "/blocks/atoms/columns/x/dtype", json!("f32")),
            put_json("hex:00", json!(0)),
        ]),
    );
    let got = clauses(&inspect_file(&path, None));
    for want in [
        clause::META_LAYOUT_VERSION,
        clause::FRAME_MISSING,
        mrf1::DTYPE,
        clause::KEYS_SCHEME,
    ] {
        assert!(got.contains(want), "{want} not in {got:?}");
    }
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn findings_are_capped() {
    let mut extra = Vec::new();
    for i in 0..150u64 {
        extra.push(put_json(&format!("hex:7a{i:04x}"), json!(0)));
    }
    let (dir, path) = build("cap", &good_recipe_with(extra));
    assert_eq!(inspect_file(&path, None).len(), super::MAX_FINDINGS);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn first_frame_must_restate_present_blocks() {
    let (dir, path) = build("restates", &good_recipe_with(vec![]));
    let expected = vec![
        vec!["atoms".to_string(), "bonds".to_string()],
        vec!["atoms".to_string()],
    ];
    let findings = inspect_file(&path, Some(&firsts(&expected)));
    assert_eq!(
        clauses(&findings),
        [clause::FRAME_FIRST_RESTATES.to_string()].into()
    );
    assert!(findings[0].message.contains("record 0"), "{findings:?}");
    assert!(findings[0].message.contains("bonds"), "{findings:?}");

    // A box counts as present when the header carries one; the cell in
    // effect at a first frame is stated there (its own clause).
    let with_box = vec![vec!["atoms".to_string(), "box".to_string()]];
    let findings = inspect_file(&path, Some(&firsts(&with_box)));
    assert_eq!(
        clauses(&findings),
        [clause::BOX_ON_CHANGE.to_string()].into()
    );
    let (dir2, path2) = build(
        "restates-box",
        &good_recipe_with(vec![set_header(
            "f:0",
            "/box",
            json!({"vectors": {"dtype": "f64", "shape": [3, 3], "offset": 0}}),
        )]),
    );
    assert_eq!(inspect_file(&path2, Some(&firsts(&with_box))), vec![]);

    // A first frame that lacks the block (restated only later) is caught.
    let (dir3, path3) = build(
        "restates-later",
        &good_recipe_with(vec![put_bytes("f:2", &good_frame(0, None))]),
    );
    let findings = inspect_file(&path3, Some(&firsts(&[vec![], vec!["atoms".to_string()]])));
    // The file alone also shows the index's n_atoms off: its record's first
    // update of atoms is now the one at f:2.
    assert_eq!(
        clauses(&findings),
        [
            clause::FRAME_FIRST_RESTATES.to_string(),
            clause::INDEX_N_ATOMS.to_string()
        ]
        .into()
    );
    let restates = findings
        .iter()
        .find(|f| f.clause == clause::FRAME_FIRST_RESTATES)
        .expect("a first-restates finding");
    assert!(restates.message.contains("f:2"), "{findings:?}");
    for d in [dir, dir2, dir3] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn file_shape_is_one_file() {
    let dir = scratch_dir("shape");
    // A directory (LMDB's default layout).
    let sub = dir.join("d.mrec.lmdb");
    std::fs::create_dir_all(&sub).unwrap();
    assert_eq!(
        clauses(&inspect_file(&sub, None)),
        [clause::FILE_SINGLE.to_string()].into()
    );
    // Nothing there.
    assert_eq!(
        clauses(&inspect_file(&dir.join("none.mrec.lmdb"), None)),
        [clause::FILE_SINGLE.to_string()].into()
    );
    // Not an LMDB file.
    let junk = dir.join("junk.mrec.lmdb");
    std::fs::write(&junk, vec![0x5a; 10000]).unwrap();
    assert_eq!(
        clauses(&inspect_file(&junk, None)),
        [clause::FILE_SINGLE.to_string()].into()
    );
    // A companion file beside a good one.
    let good = dir.join("good.mrec.lmdb");
    materialize(
        &good_recipe_with(vec![]),
        &good,
        &mut no_writer,
        &fixtures_in(&dir),
    )
    .unwrap();
    assert_eq!(inspect_file(&good, None), vec![]);
    std::fs::write(dir.join("good.mrec.lmdb-journal"), b"x").unwrap();
    let findings = inspect_file(&good, None);
    assert_eq!(clauses(&findings), [clause::FILE_SINGLE.to_string()].into());
    assert!(findings[0].message.contains("-journal"), "{findings:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn empty_env_is_not_a_collection() {
    let (dir, path) = build(
        "empty",
        &Recipe {
            base: Base::Empty,
            edits: vec![],
        },
    );
    let got = clauses(&inspect_file(&path, None));
    assert!(got.contains(clause::META_REQUIRED), "{got:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn zero_records_zero_frames_conform() {
    let index = encode(
        vec![(
            "records",
            0,
            vec![
                u64s("first_frame", &[]),
                u64s("n_frames", &[]),
                u64s("n_atoms", &[]),
                bools("has_trajectory", &[]),
            ],
        )],
        json!({"meta": {}}),
    );
    let mut meta = good_meta();
    meta["n_records"] = json!(0);
    meta["n_frames"] = json!(0);
    let recipe = Recipe {
        base: Base::Empty,
        edits: vec![put_bytes("index", &index), put_json("meta", meta)],
    };
    let (dir, path) = build("zero", &recipe);
    assert_eq!(inspect_file(&path, None), vec![]);
    let _ = std::fs::remove_dir_all(dir);
}

// ---------------------------------------------------------------------------
// Frame bytes.

#[test]
fn every_dtype_of_the_closed_set_passes() {
    let sizes = [
        ("f64", 8),
        ("i8", 1),
        ("i16", 2),
        ("i32", 4),
        ("i64", 8),
        ("u8", 1),
        ("u16", 2),
        ("u32", 4),
        ("u64", 8),
        ("bool", 1),
        ("c64", 8),
        ("c128", 16),
    ];
    for (dtype, size) in sizes {
        let col = Col {
            name: "c",
            dtype,
            shape: vec![3, 2],
            buf: Buf::Raw(vec![0; 6 * size]),
        };
        let value = encode(vec![("b", 3, vec![col])], json!({}));
        let (view, problems) = frame_bytes::check(&value);
        assert!(
            view.is_some() && problems.is_empty(),
            "{dtype}: {problems:?}"
        );
        // One byte short: the buffer runs past the value.
        let (_, problems) = frame_bytes::check(&value[..value.len() - 1]);
        assert_eq!(problems.len(), 1, "{dtype}");
        assert_eq!(problems[0].clause, mrf1::BUFFER_BOUNDS, "{dtype}");
    }
    for bad in ["f32", "f16", "float", "int", "json", "U64"] {
        assert_eq!(frame_bytes::dtype_kind(bad), None, "{bad}");
    }
}

#[test]
fn frame_check_never_panics_on_mangled_values() {
    let originals = [
        good_index(),
        good_system(),
        good_ff(),
        good_frame(3, Some(&[1.0])),
    ];
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for original in &originals {
        for len in 0..=original.len() {
            let _ = frame_bytes::check(&original[..len]);
        }
        for _ in 0..2000 {
            let mut v = original.clone();
            for _ in 0..(1 + next() % 4) {
                let i = (next() % v.len() as u64) as usize;
                v[i] = next() as u8;
            }
            let _ = frame_bytes::check(&v);
        }
    }
    // Header values that stress the arithmetic.
    for header in [
        json!({"blocks": {"b": {"count": u64::MAX, "columns": {"c": {"dtype": "c128", "shape": [u64::MAX, u64::MAX], "offset": u64::MAX - 7, "validity": u64::MAX}}}}}),
        json!({"blocks": {"b": {"count": 1, "columns": {"c": {"dtype": "string", "shape": [u64::MAX], "values": []}}}}}),
        json!({"blocks": {"b": {"count": 2, "columns": {"c": {"dtype": "u8", "shape": [], "offset": -8}}}}}),
        json!({"blocks": []}),
        json!({"blocks": {"b": 1}}),
        json!({}),
    ] {
        let text = serde_json::to_vec(&header).unwrap();
        let mut v = b"MRF1".to_vec();
        v.extend_from_slice(&(text.len() as u32).to_le_bytes());
        v.extend_from_slice(&text);
        v.resize(v.len().next_multiple_of(8), 0);
        let (view, problems) = frame_bytes::check(&v);
        assert!(view.is_some());
        assert!(!problems.is_empty(), "{header}");
    }
}

#[test]
fn padding_must_be_present_and_zero() {
    // Some step number gives a header length that needs padding.
    let (value, header_end) = (0..8)
        .map(|step| {
            let value = good_frame(10 + step, None);
            let end = 8 + u32::from_le_bytes(value[4..8].try_into().unwrap()) as usize;
            (value, end)
        })
        .find(|(_, end)| end % 8 != 0)
        .unwrap();
    assert!(frame_bytes::check(&value).1.is_empty());
    let (_, problems) = frame_bytes::check(&value[..header_end]);
    assert_eq!(problems[0].clause, mrf1::HEADER_BOUNDS);
    let mut dirty = value.clone();
    dirty[header_end] = 1;
    let (_, problems) = frame_bytes::check(&dirty);
    assert_eq!(problems[0].clause, mrf1::PADDING);
}

// ---------------------------------------------------------------------------
// Recipes.

#[test]
fn set_header_reencodes_and_keeps_the_payload() {
    let long = "x".repeat(37);
    let (dir, path) = build(
        "set-header",
        &good_recipe_with(vec![
            set_header("s:0", "/meta/comment", json!(long)),
            set_header("s:0", "/meta_types/comment", json!("string")),
            Edit::RemoveHeader {
                key: "f:0".into(),
                pointer: "/step".into(),
            },
        ]),
    );
    for (key, original) in [
        ("s:0", good_system()),
        ("f:0", good_frame(0, Some(&[0.0, 1.0]))),
    ] {
        let stored = read_value(&path, key).unwrap();
        let old = frame_bytes::parse(&original).unwrap();
        let new = frame_bytes::parse(&stored).unwrap();
        assert_ne!(old.header_len, new.header_len, "{key}");
        assert_eq!(new.payload_start % 8, 0, "{key}");
        assert_eq!(old.payload(), new.payload(), "{key}: payload changed");
        assert!(frame_bytes::check(&stored).1.is_empty(), "{key}");
    }
    let s0 = read_value(&path, "s:0").unwrap();
    assert_eq!(
        frame_bytes::parse(&s0).unwrap().header["meta"]["comment"],
        json!(long)
    );
    let f0 = read_value(&path, "f:0").unwrap();
    assert!(!frame_bytes::parse(&f0).unwrap().header.contains_key("step"));
    // The removed step is the only thing inspection objects to.
    let findings = inspect_file(&path, None);
    assert_eq!(findings.len(), 1, "{findings:?}");
    assert_eq!(findings[0].clause, "lmdb.frame.step");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn byte_edits_and_cells() {
    let (dir, path) = build(
        "bytes",
        &good_recipe_with(vec![
            Edit::SetCell {
                key: "index".into(),
                block: "records".into(),
                column: "n_atoms".into(),
                row: 1,
                value: json!("18446744073709551615"),
            },
            Edit::SetCell {
                key: "f:2".into(),
                block: "atoms".into(),
                column: "x".into(),
                row: 0,
                value: json!("-Infinity"),
            },
            Edit::SetCell {
                key: "index".into(),
                block: "records".into(),
                column: "has_trajectory".into(),
                row: 0,
                value: json!(false),
            },
            put_bytes("hex:0102", b"abc"),
            Edit::SetBytes {
                key: "hex:0102".into(),
                offset: 5,
                hex: "ff ee".into(),
            },
            Edit::Truncate {
                key: "r:1".into(),
                len: 2,
            },
        ]),
    );
    let index = read_value(&path, "index").unwrap();
    let view = frame_bytes::parse(&index).unwrap();
    assert_eq!(
        frame_bytes::read_u64_column(&view, "records", "n_atoms").unwrap(),
        vec![2, u64::MAX]
    );
    let layout = frame_bytes::column_layout(&view.header, "records", "has_trajectory").unwrap();
    let range = layout.buffer_range(&view).unwrap();
    assert_eq!(&index[range], &[0, 1]);
    let f2 = read_value(&path, "f:2").unwrap();
    let view = frame_bytes::parse(&f2).unwrap();
    let range = frame_bytes::column_layout(&view.header, "atoms", "x")
        .unwrap()
        .buffer_range(&view)
        .unwrap();
    assert_eq!(
        &f2[range.start..range.start + 8],
        &f64::NEG_INFINITY.to_le_bytes()
    );
    assert_eq!(
        read_value(&path, "hex:0102").unwrap(),
        b"abc\0\0\xff\xee".to_vec()
    );
    assert_eq!(read_value(&path, "r:1").unwrap(), b"{\"".to_vec());
    let got = clauses(&inspect_file(&path, None));
    assert!(got.contains(clause::RECORD_META_JSON), "{got:?}");
    assert!(got.contains(clause::KEYS_SCHEME), "{got:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn bad_edits_are_errors_naming_the_edit() {
    let cases: Vec<(Edit, &str)> = vec![
        (Edit::Delete { key: "f:9".into() }, "not in the file"),
        (set_json("meta", "/nope/deeper", json!(1)), "nope"),
        (set_json("meta", "no-slash", json!(1)), "'/'"),
        (
            Edit::Put {
                key: "r:0".into(),
                json: None,
                hex: Some("abc".into()),
                text: None,
            },
            "odd",
        ),
        (
            Edit::Put {
                key: "r:0".into(),
                json: Some(json!({})),
                hex: None,
                text: Some("{}".into()),
            },
            "exactly one",
        ),
        (
            set_header("meta", "/x", json!(1)),
            "header cannot be parsed",
        ),
        (
            Edit::RemoveJson {
                key: "meta".into(),
                pointer: "/absent".into(),
            },
            "absent",
        ),
        (
            Edit::Truncate {
                key: "r:0".into(),
                len: 99,
            },
            "truncate",
        ),
        (
            Edit::SetCell {
                key: "index".into(),
                block: "records".into(),
                column: "first_frame".into(),
                row: 2,
                value: json!(0),
            },
            "out of range",
        ),
        (
            Edit::SetCell {
                key: "index".into(),
                block: "records".into(),
                column: "first_frame".into(),
                row: 0,
                value: json!(-1),
            },
            "out of range",
        ),
        (
            Edit::SetCell {
                key: "index".into(),
                block: "records".into(),
                column: "code".into(),
                row: 0,
                value: json!("z"),
            },
            "string column",
        ),
        (put_json("q:1", json!({})), "prefix"),
        (put_json("hex:", json!({})), "empty key"),
    ];
    let dir = scratch_dir("bad-edits");
    for (edit, needle) in cases {
        let mut recipe = good_recipe_with(vec![]);
        let index = recipe.edits.len();
        recipe.edits.push(edit.clone());
        let path = dir.join("c.mrec.lmdb");
        let err = materialize(&recipe, &path, &mut no_writer, &fixtures_in(&dir))
            .expect_err(&format!("{edit:?} should fail"));
        assert_eq!(err.edit, Some(index), "{err}");
        assert!(err.message.contains(&format!("edit {index} ")), "{err}");
        assert!(err.message.contains(needle), "{needle:?} not in {err}");
    }
    // The failed transaction left nothing half-written, and the env closed.
    let path = dir.join("c.mrec.lmdb");
    assert!(read_value(&path, "meta").is_none());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn fixture_base_goes_through_the_supplied_writer() {
    let dir = scratch_dir("fixture");
    std::fs::create_dir_all(dir.join("collection")).unwrap();
    std::fs::write(
        dir.join("collection/tiny.json"),
        serde_json::to_vec(&json!({"meta": {"units": {}}, "records": []})).unwrap(),
    )
    .unwrap();
    let mut seen = Vec::new();
    let mut writer = |fixture: &Value, out: &Path| -> Result<(), String> {
        seen.push(fixture.clone());
        // A stand-in writer: the good collection, by recipe.
        materialize(
            &good_recipe_with(vec![]),
            out,
            &mut no_writer,
            &fixtures_in(Path::new(".")),
        )
        .map_err(|e| e.to_string())
    };
    let recipe = Recipe::from_toml(
        r#"
base = { fixture = "collection/tiny.json" }

[[edits]]
op = "set-json"
key = "meta"
pointer = "/layout_version"
value = "1"

[[edits]]
op = "set-header"
key = "f:0"
pointer = "/blocks/atoms/columns/x/dtype"
value = "f32"
"#,
    )
    .unwrap();
    let path = dir.join("out.mrec.lmdb");
    std::fs::write(&path, b"stale").unwrap();
    materialize(&recipe, &path, &mut writer, &fixtures_in(&dir)).unwrap();
    assert_eq!(seen, vec![json!({"meta": {"units": {}}, "records": []})]);
    let got = clauses(&inspect_file(&path, None));
    assert_eq!(
        got,
        [
            clause::META_LAYOUT_VERSION.to_string(),
            mrf1::DTYPE.to_string(),
            // The f32 x is also no declared column's dtype, nor x's canonical one.
            super::records::clause::RECORD_SUBSET.to_string(),
            super::records::clause::CANONICAL_DTYPE.to_string(),
        ]
        .into()
    );

    // A writer that refuses, and a missing fixture, are errors.
    let mut refusing = |_: &Value, _: &Path| -> Result<(), String> { Err("nope".into()) };
    let err = materialize(&recipe, &path, &mut refusing, &fixtures_in(&dir)).unwrap_err();
    assert!(err.message.contains("nope"), "{err}");
    let missing = Recipe {
        base: Base::Fixture("absent.json".into()),
        edits: vec![],
    };
    assert!(materialize(&missing, &path, &mut no_writer, &fixtures_in(&dir)).is_err());
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn recipes_round_trip_through_toml_and_reject_typos() {
    let recipe = good_recipe_with(vec![
        Edit::Delete { key: "f:1".into() },
        Edit::SetCell {
            key: "index".into(),
            block: "records".into(),
            column: "first_frame".into(),
            row: 1,
            value: json!(3),
        },
    ]);
    let text = toml::to_string(&recipe).unwrap();
    assert_eq!(Recipe::from_toml(&text).unwrap(), recipe);
    assert!(Recipe::from_toml(
        "base = \"empty\"\n[[edits]]\nop = \"delete\"\nkey = \"f:1\"\nkye = 1\n"
    )
    .is_err());
    assert!(
        Recipe::from_toml("base = \"empty\"\n[[edits]]\nop = \"explode\"\nkey = \"f:1\"\n")
            .is_err()
    );
    assert_eq!(
        Recipe::from_toml("base = \"empty\"").unwrap(),
        Recipe {
            base: Base::Empty,
            edits: vec![]
        }
    );
}

#[test]
fn key_spelling_round_trips() {
    for (spelling, bytes) in [
        ("meta", b"meta".to_vec()),
        ("index", b"index".to_vec()),
        ("ff", b"ff".to_vec()),
        ("r:0", Key::Record(0).encode()),
        ("s:258", [b"s".as_slice(), &258u64.to_be_bytes()].concat()),
        (
            "f:18446744073709551615",
            [b"f".as_slice(), &[0xff; 8]].concat(),
        ),
        ("hex:7a7a", b"zz".to_vec()),
    ] {
        assert_eq!(parse_key(spelling).unwrap(), bytes, "{spelling}");
        assert_eq!(key_label(&bytes), spelling);
    }
    for bad in [
        "r:",
        "r:-1",
        "f:18446744073709551616",
        "x:1",
        "f:1x",
        "hex:zz",
        "metadata",
    ] {
        assert!(parse_key(bad).is_err(), "{bad}");
    }
}

/// Expectations of first-frame blocks only.
fn firsts(blocks: &[Vec<String>]) -> crate::inspect::Expected {
    crate::inspect::Expected {
        first_frame_blocks: blocks.to_vec(),
        fixture: None,
    }
}

/// Issue #43: every writer rule that leaves a trace in a record's stored
/// frames is checked by the inspection itself, not left to a reader.
#[test]
fn stored_updates_and_systems_are_held_to_the_writers_rules() {
    use super::records::clause as rec;
    let atoms_entry = json!({"count": 2, "structural_shape": null,
        "columns": {"x": {"dtype": "f64", "shape": [2], "offset": 0}}});
    let cell = |defined: bool| {
        json!({"vectors": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
               "boundary": [!defined, !defined, !defined], "cell_defined": defined})
    };
    let cases: Vec<(&str, Vec<Edit>, &str)> = vec![
        (
            "per-step-key-not-materialized",
            vec![set_json(
                "meta",
                "/sequence_schema/meta/pe",
                json!({"dtype": "f64", "fill": "NaN"}),
            )],
            rec::META_MATERIALIZED,
        ),
        (
            "per-step-key-missing-on-one-update",
            vec![
                set_json("meta", "/sequence_schema/meta/pe", json!({"dtype": "f64"})),
                set_header("f:0", "/meta/pe", json!(-1.5)),
                set_header("f:2", "/meta/pe", json!(-2.5)),
            ],
            rec::META_MATERIALIZED,
        ),
        (
            "per-step-key-undeclared",
            vec![set_header("f:1", "/meta/spin", json!(1))],
            rec::RECORD_SUBSET,
        ),
        (
            "per-step-value-not-of-its-tag",
            vec![
                set_json("meta", "/sequence_schema/meta/pe", json!({"dtype": "f64"})),
                set_header("f:0", "/meta/pe", json!(-1.5)),
                set_header("f:1", "/meta/pe", json!(null)),
                set_header("f:2", "/meta/pe", json!(-2.5)),
            ],
            rec::FITS_TAG,
        ),
        (
            "step-repeated",
            vec![set_header("f:1", "/step", json!(0))],
            rec::STEP_INCREASING,
        ),
        (
            "step-decreasing",
            vec![set_header("f:1", "/step", json!(-3))],
            rec::STEP_INCREASING,
        ),
        (
            "time-on-one-update-only",
            vec![set_header("f:1", "/time", json!(0.5))],
            rec::TIME_ALL_OR_NONE,
        ),
        (
            "cell-becomes-defined",
            vec![
                set_header("f:0", "/box", cell(false)),
                set_header("f:1", "/box", cell(true)),
            ],
            rec::ONE_CELL_DEFINED,
        ),
        (
            "precision-on-an-update-column",
            vec![set_header(
                "f:0",
                "/blocks/atoms/columns/x/precision",
                json!(0.5),
            )],
            rec::PRECISION_PLACEMENT,
        ),
        (
            "update-column-at-another-dtype",
            vec![set_header(
                "f:0",
                "/blocks/atoms/columns/x/dtype",
                json!("i64"),
            )],
            rec::RECORD_SUBSET,
        ),
        (
            "update-block-undeclared",
            vec![set_header("f:0", "/blocks/extra", atoms_entry.clone())],
            rec::RECORD_SUBSET,
        ),
        (
            "update-mask-on-a-column-not-nullable",
            vec![set_header(
                "f:0",
                "/blocks/atoms/columns/x/validity",
                json!(0),
            )],
            rec::RECORD_SUBSET,
        ),
        (
            "update-targets-not-the-declared",
            vec![set_header(
                "f:0",
                "/blocks/atoms/targets",
                json!({"x": "atoms"}),
            )],
            rec::TARGETS_DECLARED,
        ),
        (
            "system-block-named-box",
            vec![set_header("s:0", "/blocks/box", atoms_entry)],
            rec::RESERVED_BLOCK,
        ),
        (
            "system-column-named-validity",
            vec![set_header(
                "s:0",
                "/blocks/atoms/columns/_validity",
                json!({"dtype": "f64", "shape": [2], "offset": 0}),
            )],
            rec::RESERVED_COLUMN,
        ),
        (
            "system-meta-key-untagged",
            vec![set_header("s:0", "/meta/label", json!("water"))],
            rec::META_TYPES,
        ),
        (
            "system-meta-reserved-key",
            vec![
                set_header("s:0", "/meta/_meta_types", json!({})),
                set_header("s:0", "/meta_types/_meta_types", json!("json")),
            ],
            rec::RESERVED_META_KEY,
        ),
        (
            "system-canonical-key-at-another-dtype",
            vec![set_header(
                "s:0",
                "/blocks/atoms/columns/x/dtype",
                json!("i64"),
            )],
            rec::CANONICAL_DTYPE,
        ),
        (
            "index-precision-on-u64",
            vec![set_header(
                "index",
                "/blocks/records/columns/n_atoms/precision",
                json!(1.0),
            )],
            rec::PRECISION_F64,
        ),
    ];
    each_finds_its_clause(cases);
}

/// What a conforming writer may do differently from the reference is
/// never a finding: restate an unchanged block at any update,
/// materialize a declared fill, leave `meta_types` out of an empty system
/// meta, write `"time": null` and `"box": null` (lmdb.md's v1 example).
#[test]
fn restating_and_other_conforming_choices_have_no_findings() {
    let cell = json!({"vectors": [[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0]]});
    // -0.0 differs from 0.0 bit for bit: a change, so stated.
    let cell_changed = json!({"vectors": [[5.0, -0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0]]});
    let (dir, path) = build(
        "restating",
        &good_recipe_with(vec![
            set_json(
                "meta",
                "/sequence_schema/meta/pe",
                json!({"dtype": "f64", "fill": "NaN"}),
            ),
            put_bytes("f:1", &good_frame(1, Some(&[0.0, 1.0]))),
            set_header("f:0", "/meta/pe", json!(-1.5)),
            set_header("f:1", "/meta/pe", json!("NaN")),
            set_header("f:2", "/meta/pe", json!(-2.5)),
            set_header("f:0", "/box", cell.clone()),
            set_header("f:1", "/box", cell_changed),
            set_header("f:0", "/time", json!(null)),
            set_header("f:2", "/box", json!(null)),
            set_header("s:0", "/meta", json!({})),
            Edit::RemoveHeader {
                key: "s:0".into(),
                pointer: "/meta_types".into(),
            },
        ]),
    );
    let expected = vec![
        vec!["atoms".to_string(), "box".to_string()],
        vec!["atoms".to_string()],
    ];
    assert_eq!(inspect_file(&path, Some(&firsts(&expected))), vec![]);
    let _ = std::fs::remove_dir_all(dir);
}

/// The cell is written "only at the ordinals where it changes" (seed 000,
/// Frames): a later update of the record restating the cell in effect
/// unchanged is a finding, the file alone shows it, and origin and
/// boundary given or left to their defaults are the same cell.
#[test]
fn a_cell_restated_unchanged_is_a_finding() {
    let cell = json!({"vectors": [[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0]]});
    let spelled = json!({"vectors": [[5.0, 0.0, 0.0], [0.0, 5.0, 0.0], [0.0, 0.0, 5.0]],
        "origin": [0.0, 0.0, 0.0], "boundary": [true, true, true], "cell_defined": true});
    let (dir, path) = build(
        "cell-restated",
        &good_recipe_with(vec![
            set_header("f:0", "/box", cell),
            set_header("f:1", "/box", spelled),
        ]),
    );
    let findings = inspect_file(&path, None);
    assert_eq!(
        clauses(&findings),
        [clause::BOX_ON_CHANGE.to_string()].into()
    );
    assert!(findings[0].message.contains("f:1"), "{findings:?}");
    assert!(findings[0].message.contains("unchanged"), "{findings:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A record's first frame states the cell in effect there: the cell does
/// not carry over from the previous record.
#[test]
fn a_first_frame_without_the_cell_in_effect_is_a_finding() {
    let (dir, path) = build("first-cell", &good_recipe_with(vec![]));
    let expected = vec![
        vec!["atoms".to_string(), "box".to_string()],
        vec!["atoms".to_string()],
    ];
    let findings = inspect_file(&path, Some(&firsts(&expected)));
    assert_eq!(
        clauses(&findings),
        BTreeSet::from([clause::BOX_ON_CHANGE.to_string()]),
        "{findings:#?}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
