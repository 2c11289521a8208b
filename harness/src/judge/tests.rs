//! Small inline fixtures for the judge: resolution, typing, precision,
//! normalization, paths and the diff.

use serde_json::{json, Value};

use super::typed::{quantum, round_to};
use super::*;

fn f64col(values: Value) -> Value {
    let n = values.as_array().map_or(0, Vec::len);
    json!({"dtype": "f64", "shape": [n], "values": values})
}

fn block(cols: Value) -> Value {
    let count = cols
        .as_object()
        .and_then(|c| c.values().next())
        .map_or(0, |c| c["shape"][0].as_u64().unwrap_or(0));
    json!({"count": count, "columns": cols})
}

/// A collection of one record holding `system`.
fn with_system(system: Value) -> Value {
    json!({"meta": {"units": {"length": "angstrom"}, "molrec_version": 1},
        "sequence_schema": {"blocks": {}, "meta": {}}, "records": [{"system": system}]})
}

fn paths(d: &[Difference]) -> Vec<&str> {
    d.iter().map(|d| d.path.as_str()).collect()
}

#[test]
fn carry_forward_resolves_blocks_within_a_record_only() {
    let schema = json!({"blocks": {"atoms": {"columns": {"x": {"dtype": "f64"}}},
                                   "bonds": {"columns": {"atomi": {"dtype": "u64"}}}}, "meta": {}});
    let atoms = block(json!({"x": f64col(json!([1.0, 2.0]))}));
    let bonds = block(json!({"atomi": {"dtype": "u64", "shape": [1], "values": [0]}}));
    let empty_atoms =
        json!({"count": 0, "columns": {"x": {"dtype": "f64", "shape": [0], "values": []}}});
    let fixture = json!({"meta": {"units": {}}, "sequence_schema": schema, "records": [
        {"trajectory": {"frames": [
            {"step": 0, "blocks": {"atoms": atoms, "bonds": bonds}},
            {"step": 1},
            {"step": 2, "blocks": {"atoms": empty_atoms}}]}},
        {"trajectory": {"frames": [{"step": 0, "blocks": {}}]}}]});
    let e = expected_logical(&fixture).unwrap();
    let frames = &e["records"][0]["trajectory"]["frames"];
    assert_eq!(frames[1]["blocks"], frames[0]["blocks"]);
    assert_eq!(frames[2]["blocks"]["bonds"], frames[0]["blocks"]["bonds"]);
    assert_eq!(
        frames[2]["blocks"]["atoms"],
        json!({"count": 0, "columns": {"x": {"dtype": "f64", "shape": [0], "values": []}}})
    );
    assert_eq!(frames[1]["meta"], json!({}));
    // Carry-forward never crosses records.
    assert_eq!(
        e["records"][1]["trajectory"]["frames"][0]["blocks"],
        json!({})
    );
    // A resolved read-back of the same content is equal; one that forgot a
    // carried block is not (the actual side is never resolved).
    let mut actual = e.clone();
    assert_eq!(compare(&fixture, &actual).unwrap(), vec![]);
    actual["records"][0]["trajectory"]["frames"][1]["blocks"]
        .as_object_mut()
        .unwrap()
        .remove("bonds");
    let d = compare(&fixture, &actual).unwrap();
    assert_eq!(paths(&d), ["records[0].trajectory.frames[1].blocks.bonds"]);
    assert_eq!(d[0].actual, "<absent>");
}

#[test]
fn fills_are_materialized_typed_and_required_without_fill() {
    let schema = json!({"blocks": {}, "meta": {"pe": {"dtype": "f64"}, "flag": {"dtype": "bool", "fill": false},
        "extra": {"dtype": "json", "fill": null}, "n": {"dtype": "u64", "fill": "18446744073709551615"}}});
    let fixture = json!({"meta": {"units": {}}, "sequence_schema": schema, "records": [{"trajectory": {"frames": [
        {"step": 0, "time": 0.5, "meta": {"pe": -1, "flag": true}}]}}]});
    let e = expected_logical(&fixture).unwrap();
    assert_eq!(
        e["records"][0]["trajectory"]["frames"][0]["meta"],
        json!({"pe": -1.0, "flag": true, "extra": null, "n": 18446744073709551615u64})
    );
    assert_eq!(
        e["sequence_schema"]["meta"]["extra"],
        json!({"dtype": "json", "fill": null})
    );
    let mut missing = fixture.clone();
    missing["records"][0]["trajectory"]["frames"][0]["meta"] = json!({"flag": true});
    let err = expected_logical(&missing).unwrap_err();
    assert_eq!(err.path, "records[0].trajectory.frames[0].meta.pe");
    // fill: null is a fill only for a json key.
    let mut bad = fixture;
    bad["sequence_schema"]["meta"]["flag"]["fill"] = Value::Null;
    assert_eq!(
        expected_logical(&bad).unwrap_err().path,
        "sequence_schema.meta.flag.fill"
    );
}

#[test]
fn time_is_on_all_frames_or_none() {
    let fixture = json!({"meta": {}, "sequence_schema": {"blocks": {}, "meta": {}}, "records": [
        {"trajectory": {"frames": [{"step": 0, "time": 0.0}, {"step": 1}]}}]});
    assert_eq!(
        expected_logical(&fixture).unwrap_err().path,
        "records[0].trajectory.frames[1].time"
    );
}

#[test]
fn box_carries_forward_and_undefined_cell_normalizes() {
    let fixture = json!({"meta": {}, "sequence_schema": {"blocks": {}, "meta": {}}, "records": [
        {"trajectory": {"frames": [
            {"step": 0},
            {"step": 1, "box": {"vectors": [[2, 0, 0], [0, 2, 0], [0, 0, 2]]}},
            {"step": 2},
            {"step": 3, "box": {"vectors": [[5, 0, 0], [0, 5, 0], [0, 0, 5]], "boundary": [true, true, true], "cell_defined": false}}]}}]});
    let e = expected_logical(&fixture).unwrap();
    let frames = &e["records"][0]["trajectory"]["frames"];
    assert!(frames[0].get("box").is_none());
    let resolved = json!({"vectors": [[2.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 2.0]],
        "origin": [0.0, 0.0, 0.0], "boundary": [true, true, true], "cell_defined": true});
    assert_eq!(frames[1]["box"], resolved);
    assert_eq!(frames[2]["box"], resolved);
    assert_eq!(
        frames[3]["box"],
        json!({"vectors": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
        "origin": [0.0, 0.0, 0.0], "boundary": [false, false, false], "cell_defined": false})
    );
}

#[test]
fn precision_quantum_is_exact_and_rounding_ties_to_even() {
    assert_eq!(quantum(0.1), Some(0.0625));
    assert_eq!(quantum(1.0), Some(1.0));
    assert_eq!(quantum(0.999_999_999), Some(0.5));
    assert_eq!(
        quantum(f64::from_bits((1023 + 1000) << 52)),
        Some(f64::from_bits((1023 + 1000) << 52))
    );
    assert_eq!(quantum(f64::from_bits((1023 + 1001) << 52)), None);
    assert_eq!(quantum(f64::from_bits((1023 - 1001) << 52)), None);
    assert_eq!(quantum(f64::NAN), None);
    assert_eq!(round_to(0.25, 0.5), 0.0); // 0.5 ties to 0
    assert_eq!(round_to(0.75, 0.5), 1.0); // 1.5 ties to 2
    let two52 = 4_503_599_627_370_496.0_f64;
    assert_eq!(round_to(two52 - 0.5, 1.0), two52); // ...95.5 ties to ...96
    assert_eq!(round_to(two52 - 1.5, 1.0), two52 - 2.0); // ...94.5 ties to ...94
    assert_eq!(round_to(1e300, 0.5), 1e300); // at or above 2^52 q: unchanged
    assert!(round_to(f64::NAN, 0.5).is_nan());
    assert_eq!(round_to(f64::INFINITY, 0.5), f64::INFINITY);
    assert!(round_to(-0.2, 0.5).is_sign_negative()); // -0.4 rounds to -0.0
}

#[test]
fn precision_applies_to_expected_only_system_and_trajectory() {
    let mut x = f64col(json!([0.25, 0.75, 0.3, "NaN", -0.2, 1e300]));
    x["precision"] = json!(0.6);
    let fixture = json!({"meta": {}, "sequence_schema": {"blocks": {"atoms": {"columns": {"y": {"dtype": "f64", "precision": 0.5}}}}, "meta": {}},
        "records": [{"system": {"blocks": {"atoms": block(json!({"x": x}))}},
                     "trajectory": {"frames": [{"step": 0, "blocks": {"atoms": block(json!({"y": f64col(json!([0.75]))}))}}]}}]});
    let e = expected_logical(&fixture).unwrap();
    assert_eq!(
        e["records"][0]["system"]["blocks"]["atoms"]["columns"]["x"],
        json!({"dtype": "f64", "shape": [6], "values": [0.0, 1.0, 0.5, "NaN", -0.0, 1e300], "precision": 0.6})
    );
    let minus_zero = &e["records"][0]["system"]["blocks"]["atoms"]["columns"]["x"]["values"][4];
    assert!(minus_zero
        .as_f64()
        .is_some_and(|z| z == 0.0 && z.is_sign_negative()));
    assert_eq!(
        e["records"][0]["trajectory"]["frames"][0]["blocks"]["atoms"]["columns"]["y"]["values"],
        json!([1.0])
    );
    // Readers never re-round: an actual carrying the unrounded value differs.
    let mut actual = e.clone();
    actual["records"][0]["trajectory"]["frames"][0]["blocks"]["atoms"]["columns"]["y"]["values"] =
        json!([0.75]);
    assert_eq!(
        actual_logical(&actual).unwrap()["records"][0]["trajectory"]["frames"][0]["blocks"]
            ["atoms"]["columns"]["y"]["values"],
        json!([0.75])
    );
    let d = compare(&fixture, &actual).unwrap();
    assert_eq!(
        paths(&d),
        ["records[0].trajectory.frames[0].blocks.atoms.columns.y.values[0]"]
    );
    assert_eq!(
        (d[0].expected.as_str(), d[0].actual.as_str()),
        ("1.0", "0.75")
    );
}

#[test]
fn dtype_is_strict_and_integers_compare_by_value() {
    let col = |d: &str, v: Value| {
        with_system(
            json!({"blocks": {"b": {"count": 2, "columns": {"n": {"dtype": d, "shape": [2], "values": v}}}}}),
        )
    };
    let d = compare(&col("i64", json!([1, 2])), &col("u64", json!([1, 2]))).unwrap();
    assert_eq!(paths(&d), ["records[0].system.blocks.b.columns.n.dtype"]);
    assert_eq!(
        (d[0].expected.as_str(), d[0].actual.as_str()),
        ("\"i64\"", "\"u64\"")
    );
    // A big integer as a decimal string equals the same JSON integer.
    let big = compare(
        &col("u64", json!(["18446744073709551615", "7"])),
        &col("u64", json!([18446744073709551615u64, 7])),
    )
    .unwrap();
    assert_eq!(big, vec![]);
    // A real for an integer dtype and an out-of-range value are refused.
    assert_eq!(
        expected_logical(&col("i64", json!([1.0, 2])))
            .unwrap_err()
            .path,
        "records[0].system.blocks.b.columns.n.values[0]"
    );
    assert_eq!(
        expected_logical(&col("u8", json!([1, 256])))
            .unwrap_err()
            .path,
        "records[0].system.blocks.b.columns.n.values[1]"
    );
    let err = compare(&col("i64", json!([1, 2])), &col("f32", json!([1, 2]))).unwrap_err();
    assert_eq!(err.path, "records[0].system.blocks.b.columns.n.dtype");
    assert!(err.message.starts_with("actual:"));
}

#[test]
fn nan_equals_nan_and_negative_zero_differs() {
    let sys = |v: Value| with_system(json!({"blocks": {"atoms": block(json!({"x": f64col(v)}))}}));
    assert_eq!(
        compare(&sys(json!(["NaN", 1.5])), &sys(json!(["NaN", 1.5]))).unwrap(),
        vec![]
    );
    let d = compare(&sys(json!(["NaN", 0.0])), &sys(json!(["NaN", -0.0]))).unwrap();
    assert_eq!(
        paths(&d),
        ["records[0].system.blocks.atoms.columns.x.values[1]"]
    );
    assert_eq!(
        (d[0].expected.as_str(), d[0].actual.as_str()),
        ("0.0", "-0.0")
    );
    // Typed meta: "NaN" under f64 equals "NaN"; 2.0 untagged infers f64.
    let meta = |m: Value, t: Value| with_system(json!({"meta": m, "meta_types": t}));
    let e = meta(
        json!({"e": "NaN", "a": 2.0, "b": 2, "c": 9223372036854775808u64, "s": "x", "j": [1]}),
        json!({"e": "f64"}),
    );
    let a = meta(
        json!({"e": "NaN", "a": 2, "b": "2", "c": "9223372036854775808", "s": "x", "j": [1.0]}),
        json!({"e": "f64", "a": "f64", "b": "i64", "c": "u64", "s": "string", "j": "json"}),
    );
    assert_eq!(compare(&e, &a).unwrap(), vec![]);
}

#[test]
fn masks_normalize_and_null_row_values_are_ignored() {
    let sys = |c: Value| {
        with_system(
            json!({"blocks": {"atoms": {"count": c["shape"][0].clone(), "columns": {"q": c}}}}),
        )
    };
    let plain = sys(json!({"dtype": "f64", "shape": [2], "values": [1.0, 2.0]}));
    let all_true =
        sys(json!({"dtype": "f64", "shape": [2], "values": [1.0, 2.0], "validity": [true, true]}));
    assert_eq!(compare(&plain, &all_true).unwrap(), vec![]);
    let empty = sys(json!({"dtype": "f64", "shape": [0], "values": []}));
    let empty_mask = sys(json!({"dtype": "f64", "shape": [0], "values": [], "validity": []}));
    assert_eq!(compare(&empty, &empty_mask).unwrap(), vec![]);
    let null_a =
        sys(json!({"dtype": "f64", "shape": [2], "values": [1.0, 2.0], "validity": [true, false]}));
    let null_b = sys(
        json!({"dtype": "f64", "shape": [2], "values": [1.0, "garbage"], "validity": [true, false]}),
    );
    assert_eq!(compare(&null_a, &null_b).unwrap(), vec![]);
    let d = compare(&null_a, &plain).unwrap();
    assert_eq!(
        paths(&d),
        [
            "records[0].system.blocks.atoms.columns.q.validity",
            "records[0].system.blocks.atoms.columns.q.values[1]"
        ]
    );
    assert_eq!(d[1].expected, "null");
}

#[test]
fn difference_paths_are_exact() {
    let e = json!({"meta": {"units": {"length": "nm"}}, "index": {"code": {"dtype": "string", "shape": [2], "values": ["a", "b"]}},
        "forcefield": {"meta": {"name": "ff"}, "blocks": {"pair.lj%2Fcut": {"count": 1, "columns": {"name": {"dtype": "string", "shape": [1], "values": ["A"]}}}}},
        "records": [{"meta": {"k": 1}, "system": {}}, {"trajectory": {"frames": []}}]});
    let a = json!({"meta": {"units": {"length": "nm"}, "molrec_version": 1, "extra": true}, "sequence_schema": {"blocks": {}, "meta": {}},
        "index": {"code": {"dtype": "string", "shape": [2], "values": ["a", "c"]}},
        "forcefield": {"meta": {"name": "ff"}, "blocks": {"pair.lj%2Fcut": {"count": 1, "columns": {"name": {"dtype": "string", "shape": [1], "values": ["B"]}}}}},
        "records": [{"meta": {"k": 1.0}, "system": {"meta": {}, "meta_types": {}, "blocks": {}}}, {}, {"system": {}}]});
    let d = compare(&e, &a).unwrap();
    assert_eq!(
        paths(&d),
        [
            "forcefield.blocks[\"pair.lj%2Fcut\"].columns.name.values[0]",
            "index.code.values[1]",
            "meta.extra",
            "records",
            "records[1].trajectory",
        ]
    );
    assert_eq!(d[2].expected, "<absent>");
    assert_eq!(
        (d[3].expected.as_str(), d[3].actual.as_str()),
        ("array of length 2", "array of length 3")
    );
    assert_eq!(
        (d[4].expected.as_str(), d[4].actual.as_str()),
        ("{\"frames\":[]}", "<absent>")
    );
}

#[test]
fn derived_schema_ignores_nullable_and_defaults_to_empty() {
    let no_traj = json!({"meta": {}, "records": [{"system": {}}]});
    assert_eq!(
        expected_logical(&no_traj).unwrap()["sequence_schema"],
        json!({"blocks": {}, "meta": {}})
    );
    let q = json!({"dtype": "f64", "shape": [2, 3], "values": [1, 2, 3, 4, 5, 6], "validity": [true, false]});
    let e = json!({"meta": {}, "records": [{"trajectory": {"frames": [
        {"step": 0, "meta": {"pe": 1, "k": 1, "s": "NaN"}, "blocks": {"atoms": {"count": 2, "columns": {"q": q}}}},
        {"step": 1, "meta": {"pe": 2, "k": "NaN", "s": "x"}}]}}]});
    let mut a = expected_logical(&e).unwrap();
    assert_eq!(
        a["sequence_schema"],
        json!({"blocks": {"atoms": {"columns": {"q": {"dtype": "f64", "trailing": [3], "nullable": true}}}}, "meta": {"pe": {"dtype": "f64"}, "k": {"dtype": "f64"}, "s": {"dtype": "string"}}})
    );
    a["sequence_schema"]["blocks"]["atoms"]["columns"]["q"]["nullable"] = json!(false);
    assert_eq!(compare(&e, &a).unwrap(), vec![]);
    a["sequence_schema"]["blocks"]["atoms"]["columns"]["q"]["trailing"] = json!([4]);
    assert_eq!(
        paths(&compare(&e, &a).unwrap()),
        ["sequence_schema.blocks.atoms.columns.q.trailing[0]"]
    );
}

#[test]
fn derived_schema_takes_the_records_own_declarations() {
    let own = json!({"blocks": {"atoms": {"columns": {"x": {"dtype": "f64", "precision": 0.5}}}},
        "meta": {"pe": {"dtype": "f64", "fill": "NaN"}, "n": {"dtype": "i64"}}});
    let rec = |own: Value| json!({"trajectory": {"schema": own, "frames": [{"step": 0, "meta": {"n": 2}, "blocks": {"atoms": block(json!({"x": f64col(json!([0.75]))}))}}]}});
    let e = expected_logical(&json!({"meta": {}, "records": [rec(own.clone()), rec(own.clone())]}))
        .unwrap();
    assert_eq!(
        e["sequence_schema"]["meta"],
        json!({"pe": {"dtype": "f64", "fill": "NaN"}, "n": {"dtype": "i64"}})
    );
    assert_eq!(
        e["sequence_schema"]["blocks"]["atoms"]["columns"]["x"]["precision"],
        json!(0.5)
    );
    let frame = &e["records"][1]["trajectory"]["frames"][0];
    assert_eq!(frame["meta"], json!({"pe": "NaN", "n": 2}));
    assert_eq!(
        frame["blocks"]["atoms"]["columns"]["x"]["values"],
        json!([1.0])
    );
    assert!(e["records"][0]["trajectory"].get("schema").is_none());
    let mut other = own;
    other["meta"]["pe"]["fill"] = json!(0.0);
    let err = expected_logical(
        &json!({"meta": {}, "records": [rec(e["sequence_schema"].clone()), rec(other)]}),
    )
    .unwrap_err();
    assert_eq!(err.path, "records[1].trajectory.schema.meta");
}

#[test]
fn derived_schema_refuses_records_that_disagree() {
    let rec = |d: &str| {
        json!({"trajectory": {"frames": [{"step": 0, "blocks": {"atoms": {"count": 1,
        "columns": {"x": {"dtype": d, "shape": [1], "values": [1]}}}}}]}})
    };
    let e = json!({"meta": {}, "records": [rec("f64"), rec("i64")]});
    let err = expected_logical(&e).unwrap_err();
    assert_eq!(
        err.path,
        "records[1].trajectory.frames[0].blocks.atoms.columns.x"
    );
}

#[test]
fn c64_parts_compare_at_f32_width() {
    let sys = |v: Value| {
        with_system(
            json!({"blocks": {"w": {"count": 1, "columns": {"z": {"dtype": "c64", "shape": [1], "values": [v]}}}}}),
        )
    };
    let same = compare(
        &sys(json!([0.1, "NaN"])),
        &sys(json!([0.10000000149011612, "NaN"])),
    );
    assert_eq!(same.unwrap(), vec![]);
    let d = compare(&sys(json!([0.1, 0.0])), &sys(json!([0.2, 0.0]))).unwrap();
    assert_eq!(
        paths(&d),
        ["records[0].system.blocks.w.columns.z.values[0][0]"]
    );
}

#[test]
fn malformed_inputs_are_refused_with_a_path_and_never_panic() {
    let bad_len = with_system(
        json!({"blocks": {"atoms": {"count": 2, "columns": {"x": {"dtype": "f64", "shape": [2, 3], "values": [1, 2]}}}}}),
    );
    assert_eq!(
        expected_logical(&bad_len).unwrap_err().path,
        "records[0].system.blocks.atoms.columns.x.values"
    );
    let overflow = with_system(
        json!({"blocks": {"atoms": {"count": 2, "columns": {"x": {"dtype": "f64", "shape": [2, u64::MAX, 4], "values": []}}}}}),
    );
    assert_eq!(
        expected_logical(&overflow).unwrap_err().path,
        "records[0].system.blocks.atoms.columns.x.shape"
    );
    let unknown = with_system(json!({"blocks": {}, "colour": 1}));
    assert_eq!(
        expected_logical(&unknown).unwrap_err().path,
        "records[0].system.colour"
    );
    for junk in [
        json!(null),
        json!([]),
        json!({"meta": 1, "records": []}),
        json!({"meta": {}, "records": [1]}),
        json!({"meta": {}, "records": [{"trajectory": {"frames": [{"step": "x"}]}}]}),
        json!({"meta": {}, "records": [{"system": {"box": {"vectors": [[1]]}}}]}),
        json!({"meta": {}, "records": [{"system": {"blocks": {"a": {"count": 1, "columns": {"c": {"dtype": "c64", "shape": [1], "values": [[1]]}}}}}}]}),
    ] {
        assert!(expected_logical(&junk).is_err());
        assert!(actual_logical(&junk).is_err());
    }
}

#[test]
fn differences_are_capped() {
    let sys = |v: Vec<f64>| {
        with_system(json!({"blocks": {"atoms": block(json!({"x": f64col(json!(v))}))}}))
    };
    let d = compare(&sys(vec![0.0; 300]), &sys(vec![1.0; 300])).unwrap();
    assert_eq!(d.len(), MAX_DIFFERENCES + 1);
    assert_eq!(d[MAX_DIFFERENCES].expected, "... and 100 more");
}

#[test]
fn short_diff_is_cut_to_max_lines() {
    let e = json!({"v": (0..50).collect::<Vec<_>>()});
    let a = json!({"v": (100..150).collect::<Vec<_>>()});
    let text = short_diff(&e, &a, 10);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(&lines[..2], ["--- expected", "+++ actual"]);
    assert_eq!(lines.len(), 2 + 10 + 1);
    assert!(lines[2].starts_with("@@"));
    assert!(lines[12].starts_with("... ") && lines[12].ends_with(" more lines"));
    assert_eq!(short_diff(&e, &e, 10), "");
    assert!(!short_diff(&e, &json!({"v": 1}), 1000).contains("more lines"));
}

#[test]
fn an_answer_omitting_an_undefined_cells_boundary_reads_as_all_false() {
    // canonical-json.md, "Box": all keys but `vectors` are optional, and an
    // undefined cell's omitted boundary is all-false, in an answer too.
    let undefined = |boundary: Option<Value>| {
        let mut cell = json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "cell_defined": false});
        if let Some(b) = boundary {
            cell["boundary"] = b;
        }
        json!({"meta": {"units": {"length": "angstrom"}, "molrec_version": 1},
            "sequence_schema": {"blocks": {}, "meta": {}},
            "records": [{"trajectory": {"frames": [{"step": 0, "box": cell}]}}]})
    };
    let fixture = undefined(Some(json!([false, false, false])));
    assert_eq!(compare(&fixture, &undefined(None)).unwrap(), vec![]);
    // A stated periodic axis in the answer is still a difference.
    let periodic = compare(&fixture, &undefined(Some(json!([true, false, false])))).unwrap();
    assert_eq!(
        paths(&periodic),
        vec!["records[0].trajectory.frames[0].box.boundary[0]"]
    );
}

/// A masked column of `values` whose second row is null, with `extra` keys.
fn masked(dtype: &str, values: Value, extra: Value) -> Value {
    let mut c =
        json!({"dtype": dtype, "shape": [3], "values": values, "validity": [true, false, true]});
    for (k, v) in extra.as_object().into_iter().flatten() {
        c[k] = v.clone();
    }
    c
}

fn masked_file(col: Value) -> Value {
    with_system(json!({"blocks": {"atoms": {"count": 3, "columns": {"q": col}}}}))
}

#[test]
fn a_value_under_a_null_row_must_be_carried_as_written() {
    let given = masked_file(masked("f64", json!([0.5, 7.25, 1.0]), json!({})));
    let zeroed = masked_file(masked("f64", json!([0.5, 0.0, 1.0]), json!({})));
    let d = null_row_differences(&given, &zeroed);
    assert_eq!(
        paths(&d),
        ["records[0].system.blocks.atoms.columns.q.values[1]"]
    );
    assert_eq!(
        (d[0].expected.as_str(), d[0].actual.as_str()),
        ("7.25", "0.0")
    );
    // The logical comparison cannot see it: those values mean nothing to a reader.
    assert!(compare_file(&given, &zeroed).unwrap().is_empty());
    assert!(null_row_differences(&given, &given).is_empty());
    // Spellings of one value are one value; valid rows are not this check's.
    let respelled = masked_file(masked("i64", json!([1, 7, 3]), json!({})));
    let same = masked_file(masked("i64", json!([9, "7", 3]), json!({})));
    assert!(null_row_differences(&respelled, &same).is_empty());
}

#[test]
fn null_rows_under_a_precision_or_unmasked_in_the_file_are_not_compared() {
    let p = json!({"precision": 0.5});
    let given = masked_file(masked("f64", json!([0.5, 7.3, 1.0]), p.clone()));
    let stored = masked_file(masked("f64", json!([0.5, 0.0, 1.0]), p));
    assert!(null_row_differences(&given, &stored).is_empty());
    let given = masked_file(masked("f64", json!([0.5, 7.25, 1.0]), json!({})));
    let unmasked = masked_file(json!({"dtype": "f64", "shape": [3], "values": [0.5, 0.0, 1.0]}));
    assert!(null_row_differences(&given, &unmasked).is_empty());
}

/// One record whose trajectory's first update holds the masked column `q`
/// of block `atoms`, under a sequence_schema declaring `q` with `decl`.
fn masked_update(col: Value, decl: Value) -> Value {
    json!({"meta": {"units": {"length": "angstrom"}},
        "sequence_schema": {"blocks": {"atoms": {"columns": {"q": decl}}}, "meta": {}},
        "records": [{"trajectory": {"frames": [
            {"step": 0, "blocks": {"atoms": {"count": 3, "columns": {"q": col}}}}]}}]})
}

#[test]
fn a_trajectory_update_carries_its_null_rows_unless_its_precision_is_declared() {
    let plain = json!({"dtype": "f64", "nullable": true});
    let given = masked_update(
        masked("f64", json!([0.5, 7.3, 1.0]), json!({})),
        plain.clone(),
    );
    let zeroed = masked_update(masked("f64", json!([0.5, 0.0, 1.0]), json!({})), plain);
    assert_eq!(
        paths(&null_row_differences(&given, &zeroed)),
        ["records[0].trajectory.frames[0].blocks.atoms.columns.q.values[1]"]
    );
    let precise = json!({"dtype": "f64", "nullable": true, "precision": 0.5});
    let given = masked_update(
        masked("f64", json!([0.5, 7.3, 1.0]), json!({})),
        precise.clone(),
    );
    let rounded = masked_update(masked("f64", json!([0.5, 7.5, 1.0]), json!({})), precise);
    assert!(null_row_differences(&given, &rounded).is_empty());
}
