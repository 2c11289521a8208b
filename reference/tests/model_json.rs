//! Canonical JSON (`docs/canonical-json.md`): round trips, typed edge values,
//! refusals with their paths, and the JSON Schema of the form.

use molrec::model::{Cell, Collection, Column, ColumnData};
use molrec::model_json::{
    cell_from_json, cell_to_json, collection_from_json, collection_from_str, collection_to_json,
    column_from_json, column_to_json, frame_from_json, frame_to_json, key_path, schema_from_json,
    schema_to_json,
};
use molrec::typed_json::MetaTag;
use molrec::{Clause, Error, Result};
use serde_json::{json, Value};

const EXAMPLE: &str = include_str!("../../fixtures/examples/water-and-ammonia.json");
const SCHEMA: &str = include_str!("../../docs/canonical-json.schema.json");

fn example_value() -> Value {
    serde_json::from_str(EXAMPLE).expect("the example is JSON")
}

fn example() -> Collection {
    collection_from_str(EXAMPLE).expect("the example reads")
}

/// The clause and path of a refusal.
#[track_caller]
fn refusal<T: std::fmt::Debug>(r: Result<T>) -> (Clause, String) {
    match r {
        Err(Error::Refused { clause, at, .. }) => (clause, at),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

/// Reads the example after `edit`, expecting a refusal of `clause` at `at`.
#[track_caller]
fn refused_after(edit: impl FnOnce(&mut Value), clause: Clause, at: &str) {
    let mut v = example_value();
    edit(&mut v);
    let (c, a) = refusal(collection_from_json(&v));
    assert_eq!((c.id(), a.as_str()), (clause.id(), at));
}

fn column(v: Value) -> Column {
    column_from_json(&v, "c").expect("the column reads")
}

// ------------------------------------------------------------ round trip --

#[test]
fn example_round_trips() {
    let c = example();
    let v = collection_to_json(&c);
    let back = collection_from_json(&v).unwrap();
    assert_eq!(back, c);
    let once = serde_json::to_string(&v).unwrap();
    let twice = serde_json::to_string(&collection_to_json(&back)).unwrap();
    assert_eq!(once, twice);
    // The fixture is itself canonical (sorted keys, two-space indent).
    assert_eq!(serde_json::to_string_pretty(&v).unwrap() + "\n", EXAMPLE);
    // And the canonical text reads back to the same collection.
    assert_eq!(collection_from_str(&once).unwrap(), c);
}

#[test]
fn example_content() {
    let c = example();
    assert_eq!(c.records.len(), 3);
    assert_eq!(c.header.meta["units"]["force"], json!("kcal/mol/angstrom"));
    assert_eq!(
        c.index["code"].data,
        ColumnData::String(vec!["h2o".into(), "nh3".into(), "empty-run".into()])
    );
    assert_eq!(
        c.index["element_mask"].data,
        ColumnData::U64(vec![258, 130, 0])
    );
    assert_eq!(c.index["n_heavy"].data, ColumnData::U64(vec![1, 1, 0]));

    let water = &c.records[0];
    let system = water.system.as_ref().unwrap();
    assert_eq!(system.meta_types["charge"], MetaTag::I64);
    assert_eq!(
        system.blocks["bonds"].columns["atomj"].data,
        ColumnData::U64(vec![1, 2])
    );
    let frames = &water.trajectory.as_ref().unwrap().frames;
    assert_eq!(frames.iter().map(|f| f.step).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(frames[1].time, Some(0.5));
    assert_eq!(frames[2].meta["pe"], json!(0.1874));
    assert!(frames[1].blocks["atoms"].same_bits(&frames[2].blocks["atoms"]));
    assert_eq!(
        frames[0].blocks["atoms"].columns["x"].data,
        ColumnData::F64(vec![0.0, 0.9572, -0.24])
    );

    assert!(c.records[1].trajectory.is_none());
    assert_eq!(
        c.records[1].system.as_ref().unwrap().blocks["atoms"].count,
        4
    );
    assert!(c.records[2].system.is_none());
    assert!(c.records[2].trajectory.as_ref().unwrap().frames.is_empty());

    let schema = c.header.sequence_schema.as_ref().unwrap();
    assert_eq!(schema.blocks["atoms"].columns.len(), 6);
    assert_eq!(schema.meta["pe"].tag, MetaTag::F64);
    assert_eq!(schema.meta["pe"].fill, None);
}

// --------------------------------------------------------- JSON Schema --

#[test]
fn example_matches_the_json_schema() {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    jsonschema::meta::validate(&schema).expect("the schema is a valid draft 2020-12 schema");
    let validator = jsonschema::draft202012::new(&schema).expect("the schema compiles");

    let given = example_value();
    let errors: Vec<String> = validator
        .iter_errors(&given)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
    assert!(validator.is_valid(&collection_to_json(&example())));

    // The schema sees the same faults the reader refuses.
    let broken: [fn(&mut Value); 5] = [
        |v| v["records"][0]["system"]["blocks"]["atoms"]["count"] = json!("3"),
        |v| v["index"]["code"]["dtype"] = json!("f32"),
        // (Not `1.0`: JSON Schema counts `1.0` as an integer; only the reader refuses it.)
        |v| v["index"]["n_heavy"]["values"][0] = json!(1.5),
        |v| v["records"][0]["extra"] = json!(1),
        |v| v["records"][2] = json!({"meta": {}}),
    ];
    for edit in broken {
        let mut v = example_value();
        edit(&mut v);
        assert!(!validator.is_valid(&v), "{v}");
        assert!(collection_from_json(&v).is_err());
    }
}

// -------------------------------------------------------- typed values --

#[test]
fn f64_edge_values() {
    let c = column(
        json!({"dtype": "f64", "shape": [7], "values": ["NaN", "Infinity", "-Infinity", -0.0, 0.0, 5e-324, 1.7976931348623157e308]}),
    );
    let ColumnData::F64(v) = &c.data else {
        panic!("{:?}", c.data)
    };
    assert!(v[0].is_nan());
    assert_eq!(v[1], f64::INFINITY);
    assert_eq!(v[2], f64::NEG_INFINITY);
    assert_eq!(v[3].to_bits(), (-0.0f64).to_bits());
    assert_eq!(v[4].to_bits(), 0.0f64.to_bits());
    assert_eq!(v[5].to_bits(), 1);
    assert_eq!(v[6], f64::MAX);
    let out = column_to_json(&c);
    assert_eq!(
        out["values"],
        json!([
            "NaN",
            "Infinity",
            "-Infinity",
            -0.0,
            0.0,
            5e-324,
            1.7976931348623157e308
        ])
    );
    let text = serde_json::to_string(&out).unwrap();
    assert!(
        text.contains("\"NaN\",\"Infinity\",\"-Infinity\",-0.0,0.0,5e-324"),
        "{text}"
    );
    assert!(column(out).same_bits(&c));
}

#[test]
fn integer_edge_values() {
    let c = column(json!({"dtype": "u64", "shape": [5], "values": [
        "9007199254740993", "18446744073709551615", 18446744073709551615u64, 9007199254740992u64, 0
    ]}));
    assert_eq!(
        c.data,
        ColumnData::U64(vec![(1 << 53) + 1, u64::MAX, u64::MAX, 1 << 53, 0])
    );
    assert_eq!(
        column_to_json(&c)["values"],
        json!([
            "9007199254740993",
            "18446744073709551615",
            "18446744073709551615",
            9007199254740992u64,
            0
        ])
    );

    let c = column(json!({"dtype": "i64", "shape": [4], "values": [
        "-9223372036854775808", -9223372036854775808i64, "9223372036854775807", -9007199254740992i64
    ]}));
    assert_eq!(
        c.data,
        ColumnData::I64(vec![i64::MIN, i64::MIN, i64::MAX, -(1 << 53)])
    );
    assert_eq!(
        column_to_json(&c)["values"],
        json!([
            "-9223372036854775808",
            "-9223372036854775808",
            "9223372036854775807",
            -9007199254740992i64
        ])
    );

    let c = column(json!({"dtype": "i8", "shape": [2], "values": [-128, 127]}));
    assert_eq!(c.data, ColumnData::I8(vec![-128, 127]));
    // Within ±2^53 an integer is a JSON number: its string, or a decimal
    // string with a leading zero, is a form no writer writes, refused
    // (conventions.md, "Typed JSON values").
    for bad in [
        json!("0"),
        json!("127"),
        json!("-9007199254740992"),
        json!("09007199254740993"),
    ] {
        let v = json!({"dtype": "i64", "shape": [1], "values": [bad]});
        assert!(column_from_json(&v, "c").is_err(), "{bad} was read");
    }
    let c = column(json!({"dtype": "u16", "shape": [1], "values": [65535]}));
    assert_eq!(c.data, ColumnData::U16(vec![65535]));

    for (dtype, bad) in [
        ("i8", json!(-129)),
        ("u8", json!(256)),
        ("u32", json!(-1)),
        ("i64", json!("9223372036854775808")),
        ("u64", json!("18446744073709551616")),
        ("u64", json!(1.0)),
        ("i32", json!(2.5)),
        ("i32", json!("1e3")),
        ("i32", json!(true)),
        ("u64", json!(null)),
    ] {
        let r = column_from_json(
            &json!({"dtype": dtype, "shape": [2], "values": [0, bad]}),
            "c",
        );
        assert_eq!(
            refusal(r),
            (Clause::TypedValue, "c.values[1]".into()),
            "{dtype} {bad}"
        );
    }
}

#[test]
fn complex_bool_string_values() {
    let c = column(
        json!({"dtype": "c64", "shape": [3], "values": [[1.5, "NaN"], ["-Infinity", -0.0], [0.10000000149011612, 3]]}),
    );
    let ColumnData::C64(v) = &c.data else {
        panic!("{:?}", c.data)
    };
    assert_eq!(v[0][0], 1.5f32);
    assert!(v[0][1].is_nan());
    assert_eq!(v[1][0], f32::NEG_INFINITY);
    assert_eq!(v[1][1].to_bits(), (-0.0f32).to_bits());
    assert_eq!(v[2], [0.1f32, 3.0]);
    assert_eq!(
        column_to_json(&c)["values"],
        json!([
            [1.5, "NaN"],
            ["-Infinity", -0.0],
            [0.10000000149011612, 3.0]
        ])
    );
    assert!(column(column_to_json(&c)).same_bits(&c));

    // A c64 part that an f32 cannot hold exactly is refused, never narrowed.
    for (bad, at) in [
        (json!([[0.1, 0]]), "c.values[0][0]"),
        (json!([[0, 1e300]]), "c.values[0][1]"),
    ] {
        let r = column_from_json(&json!({"dtype": "c64", "shape": [1], "values": bad}), "c");
        assert_eq!(refusal(r), (Clause::TypedValue, at.into()));
    }
    for bad in [
        json!(1.0),
        json!([1.0]),
        json!([1.0, 2.0, 3.0]),
        json!({"re": 1}),
    ] {
        let r = column_from_json(
            &json!({"dtype": "c128", "shape": [1], "values": [bad]}),
            "c",
        );
        assert_eq!(refusal(r), (Clause::TypedValue, "c.values[0]".into()));
    }
    let r = column_from_json(
        &json!({"dtype": "c128", "shape": [1], "values": [[0, null]]}),
        "c",
    );
    assert_eq!(refusal(r), (Clause::TypedValue, "c.values[0][1]".into()));

    let c =
        column(json!({"dtype": "c128", "shape": [1, 2], "values": [[0.1, -0.0], ["Infinity", 2]]}));
    assert_eq!(c.data.dtype(), molrec::DType::C128);
    let ColumnData::C128(v) = &c.data else {
        panic!()
    };
    assert_eq!(v[0][0], 0.1);
    assert_eq!(v[0][1].to_bits(), (-0.0f64).to_bits());
    assert!(column(column_to_json(&c)).same_bits(&c));

    let c = column(
        json!({"dtype": "bool", "shape": [2, 1], "values": [true, false], "validity": [true, false]}),
    );
    assert_eq!(c.data, ColumnData::Bool(vec![true, false]));
    assert_eq!(c.validity, Some(vec![true, false]));
    assert_eq!(column_to_json(&c)["validity"], json!([true, false]));
    let r = column_from_json(&json!({"dtype": "bool", "shape": [1], "values": [1]}), "c");
    assert_eq!(refusal(r), (Clause::TypedValue, "c.values[0]".into()));
    let r = column_from_json(
        &json!({"dtype": "string", "shape": [2], "values": ["a", 1]}),
        "c",
    );
    assert_eq!(refusal(r), (Clause::TypedValue, "c.values[1]".into()));
}

#[test]
fn masks_and_precision_are_kept_as_given() {
    let c = column(
        json!({"dtype": "f64", "shape": [2, 3], "values": [1, 2, 3, 4, 5, 6], "validity": [true, true], "precision": 0.001}),
    );
    assert_eq!(c.validity, Some(vec![true, true]));
    assert_eq!(c.precision, Some(0.001));
    let out = column_to_json(&c);
    assert_eq!(out["validity"], json!([true, true]));
    assert_eq!(out["precision"], json!(0.001));
    assert_eq!(out["shape"], json!([2, 3]));

    let c = column(json!({"dtype": "f64", "shape": [0, 3], "values": [], "validity": []}));
    assert_eq!(c.validity, Some(vec![]));
    let c = column(json!({"dtype": "string", "shape": [0], "values": []}));
    assert_eq!(
        column_to_json(&c),
        json!({"dtype": "string", "shape": [0], "values": []})
    );

    let r = column_from_json(
        &json!({"dtype": "f64", "shape": [2], "values": [1, 2], "validity": [true]}),
        "c",
    );
    assert_eq!(refusal(r), (Clause::ValidityLength, "c.validity".into()));
    let r = column_from_json(
        &json!({"dtype": "f64", "shape": [1], "values": [1], "validity": [1]}),
        "c",
    );
    assert_eq!(refusal(r), (Clause::ModelJson, "c.validity[0]".into()));
    let r = column_from_json(
        &json!({"dtype": "f64", "shape": [1], "values": [1], "precision": "small"}),
        "c",
    );
    assert_eq!(refusal(r), (Clause::TypedValue, "c.precision".into()));
}

#[test]
fn shapes_are_checked_without_overflow_or_allocation() {
    for (shape, at) in [
        (json!([4294967296u64, 4294967296u64]), "c.shape"),
        (json!([u64::MAX, 2]), "c.shape"),
        (json!([4294967296u64, 4294967295u64]), "c.values"),
        (json!([u64::MAX]), "c.values"),
        (json!([3, 0, u64::MAX]), "c.values"),
    ] {
        let r = column_from_json(
            &json!({"dtype": "f64", "shape": shape, "values": [1.0]}),
            "c",
        );
        assert_eq!(refusal(r), (Clause::ColumnValues, at.into()), "{shape}");
    }
    let r = column_from_json(&json!({"dtype": "f64", "shape": [], "values": [1.0]}), "c");
    assert_eq!(refusal(r), (Clause::ColumnShape, "c.shape".into()));
    let r = column_from_json(&json!({"dtype": "f64", "shape": [-1], "values": []}), "c");
    assert_eq!(refusal(r), (Clause::ModelJson, "c.shape[0]".into()));
    let r = column_from_json(&json!({"dtype": "f64", "shape": [1.0], "values": [0]}), "c");
    assert_eq!(refusal(r), (Clause::ModelJson, "c.shape[0]".into()));
}

// ------------------------------------------------------------ refusals --

#[test]
fn refusals_name_their_path() {
    refused_after(
        |v| v["records"][0]["system"]["blocks"]["atoms"]["count"] = json!("3"),
        Clause::ModelJson,
        "records[0].system.blocks.atoms.count",
    );
    refused_after(
        |v| {
            v["records"][0]["trajectory"]["frames"][1]["blocks"]["atoms"]["columns"]["fx"]
                ["dtype"] = json!("f32")
        },
        Clause::DtypeClosedSet,
        "records[0].trajectory.frames[1].blocks.atoms.columns.fx.dtype",
    );
    refused_after(
        |v| v["index"]["n_heavy"]["values"][2] = json!(1.0),
        Clause::TypedValue,
        "index.n_heavy.values[2]",
    );
    refused_after(
        |v| {
            v["records"][1]["system"]["blocks"]["bonds"]["columns"]["atomj"]["values"][1] =
                json!(2.5)
        },
        Clause::TypedValue,
        "records[1].system.blocks.bonds.columns.atomj.values[1]",
    );
    refused_after(
        |v| {
            v["records"][0]["trajectory"]["frames"][2]["blocks"]["atoms"]["columns"]["z"]
                ["values"][1] = json!("nan")
        },
        Clause::TypedValue,
        "records[0].trajectory.frames[2].blocks.atoms.columns.z.values[1]",
    );
    refused_after(
        |v| {
            let values = v["records"][1]["system"]["blocks"]["atoms"]["columns"]["x"]["values"]
                .as_array_mut()
                .unwrap();
            values.pop();
        },
        Clause::ColumnValues,
        "records[1].system.blocks.atoms.columns.x.values",
    );
    refused_after(
        |v| {
            v["records"][0]["trajectory"]["frames"][2]["blocks"]["atoms"]["columns"]["x"]["unit"] =
                json!("angstrom")
        },
        Clause::ModelJson,
        "records[0].trajectory.frames[2].blocks.atoms.columns.x.unit",
    );
    refused_after(
        |v| v["records"][0]["extra"] = json!(1),
        Clause::RecordParts,
        "records[0].extra",
    );
    refused_after(|v| v["version"] = json!(1), Clause::ModelJson, "version");
    refused_after(
        |v| v["records"][0]["trajectory"]["frames"][0]["energy"] = json!(1),
        Clause::ModelJson,
        "records[0].trajectory.frames[0].energy",
    );
    refused_after(
        |v| v["records"][0]["system"]["blocks"]["atoms"]["colums"] = json!({}),
        Clause::ModelJson,
        "records[0].system.blocks.atoms.colums",
    );
    refused_after(
        |v| {
            v["records"][0]["trajectory"]["frames"][0]["blocks"]["odd name"] =
                json!({"count": -1, "columns": {}})
        },
        Clause::ModelJson,
        "records[0].trajectory.frames[0].blocks[\"odd name\"].count",
    );
    refused_after(
        |v| v["sequence_schema"]["blocks"]["atoms"]["columns"]["x"]["dtype"] = json!("float"),
        Clause::DtypeClosedSet,
        "sequence_schema.blocks.atoms.columns.x.dtype",
    );
    refused_after(
        |v| v["sequence_schema"]["meta"]["pe"]["dtype"] = json!("double"),
        Clause::MetaTagClosedSet,
        "sequence_schema.meta.pe.dtype",
    );
    refused_after(
        |v| v["sequence_schema"]["meta"]["pe"]["fill"] = json!(null),
        Clause::FillNullJsonOnly,
        "sequence_schema.meta.pe.fill",
    );
    refused_after(
        |v| v["sequence_schema"]["meta"]["pe"]["fill"] = json!("zero"),
        Clause::TypedValue,
        "sequence_schema.meta.pe.fill",
    );
    refused_after(
        |v| v["sequence_schema"]["blocks"]["atoms"]["columns"]["x"]["trailing"] = json!([3.0]),
        Clause::ModelJson,
        "sequence_schema.blocks.atoms.columns.x.trailing[0]",
    );
    refused_after(
        |v| v["records"][0]["system"]["meta_types"]["charge"] = json!("int"),
        Clause::MetaTagClosedSet,
        "records[0].system.meta_types.charge",
    );
    refused_after(
        |v| v["records"][0]["system"]["meta"]["charge"] = json!(0.5),
        Clause::TypedValue,
        "records[0].system.meta.charge",
    );
    refused_after(
        |v| v["records"][0]["system"]["meta_types"]["spin"] = json!("f64"),
        Clause::TypedValue,
        "records[0].system.meta_types.spin",
    );
    refused_after(
        |v| v["records"][0]["trajectory"]["frames"][1]["step"] = json!(1.5),
        Clause::TypedValue,
        "records[0].trajectory.frames[1].step",
    );
    refused_after(
        |v| v["records"][0]["trajectory"]["frames"][1]["step"] = json!("9223372036854775808"),
        Clause::TypedValue,
        "records[0].trajectory.frames[1].step",
    );
    refused_after(
        |v| {
            v["records"][0]["trajectory"]["frames"][1]
                .as_object_mut()
                .unwrap()
                .remove("step");
        },
        Clause::ModelJson,
        "records[0].trajectory.frames[1].step",
    );
    refused_after(
        |v| v["records"][0]["trajectory"]["frames"][1]["time"] = json!(null),
        Clause::TypedValue,
        "records[0].trajectory.frames[1].time",
    );
    refused_after(
        |v| {
            v["records"][0]["trajectory"]["frames"][1]["box"] =
                json!({"vectors": [[1, 0, 0], [0, 1, 0]]})
        },
        Clause::BoxShape,
        "records[0].trajectory.frames[1].box.vectors",
    );
    refused_after(
        |v| {
            v["records"][0]["system"]["box"] =
                json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, "one"]]})
        },
        Clause::TypedValue,
        "records[0].system.box.vectors[2][2]",
    );
    refused_after(
        |v| v["records"][1]["meta"] = json!([]),
        Clause::RecordMetaDocument,
        "records[1].meta",
    );
    refused_after(
        |v| v["records"][2] = json!({"meta": {}}),
        Clause::RecordNotEmpty,
        "records[2]",
    );
    refused_after(|v| v["records"] = json!({}), Clause::ModelJson, "records");
    refused_after(
        |v| {
            v.as_object_mut().unwrap().remove("meta");
        },
        Clause::ModelJson,
        "meta",
    );
    refused_after(
        |v| v["forcefield"] = json!({"meta": {"name": "x"}, "blocks": {"pair.lj%2Fcut": {"count": 1, "columns": {}, "meta_types": {}}}}),
        Clause::ModelJson,
        "forcefield.blocks[\"pair.lj%2Fcut\"].meta_types",
    );

    let (clause, at) = refusal(collection_from_str("{\"meta\": {}, \"records\": [}"));
    assert_eq!((clause, at.as_str()), (Clause::ModelJson, ""));
    let (clause, _) = refusal(collection_from_str("[]"));
    assert_eq!(clause, Clause::ModelJson);
}

#[test]
fn paths_quote_keys_that_are_not_plain_names() {
    assert_eq!(key_path("", "records"), "records");
    assert_eq!(key_path("a", "x-1_Y"), "a.x-1_Y");
    assert_eq!(key_path("a", "pair.lj%2Fcut"), "a[\"pair.lj%2Fcut\"]");
    assert_eq!(key_path("a", ""), "a[\"\"]");
    assert_eq!(key_path("a", "q\"uote"), "a[\"q\\\"uote\"]");
}

// ------------------------------------------------------ frames, boxes --

#[test]
fn system_meta_is_typed_and_inferred() {
    let f = frame_from_json(
        &json!({
            "meta": {"big": 18446744073709551615u64, "n": -3, "r": 2.0, "s": "x", "doc": {"a": [1]}, "nul": null,
                     "cell": [1, "Infinity", 2.5], "count": 12, "flag": true},
            "meta_types": {"cell": "f64x3", "count": "u32"},
            "blocks": {}
        }),
        "system",
    )
    .unwrap();
    let tags: Vec<(&str, &str)> = f
        .meta_types
        .iter()
        .map(|(k, t)| (k.as_str(), t.name()))
        .collect();
    assert_eq!(
        tags,
        [
            ("big", "u64"),
            ("cell", "f64x3"),
            ("count", "u32"),
            ("doc", "json"),
            ("flag", "bool"),
            ("n", "i64"),
            ("nul", "json"),
            ("r", "f64"),
            ("s", "string")
        ]
    );
    assert_eq!(f.meta["big"], json!("18446744073709551615"));
    assert_eq!(f.meta["cell"], json!([1.0, "Infinity", 2.5]));
    assert_eq!(f.meta["count"], json!(12));
    assert_eq!(f.meta["r"], json!(2.0));
    let out = frame_to_json(&f);
    assert_eq!(out["meta_types"].as_object().unwrap().len(), 9);
    assert_eq!(frame_from_json(&out, "system").unwrap(), f);

    // Frames default `meta` and `meta_types` but need `blocks`.
    let f = frame_from_json(&json!({"blocks": {}}), "s").unwrap();
    assert_eq!(
        frame_to_json(&f),
        json!({"meta": {}, "meta_types": {}, "blocks": {}})
    );
    assert_eq!(
        refusal(frame_from_json(&json!({"meta": {}}), "s")),
        (Clause::ModelJson, "s.blocks".into())
    );
    assert_eq!(
        refusal(frame_from_json(&json!([]), "s")),
        (Clause::ModelJson, "s".into())
    );
}

#[test]
fn boxes_default_and_write_all_keys() {
    let c = cell_from_json(
        &json!({"vectors": [[10, 0, 0], [0, 11, 0], [0, 0, "Infinity"]]}),
        "box",
    )
    .unwrap();
    assert_eq!(
        c.vectors,
        [10.0, 0.0, 0.0, 0.0, 11.0, 0.0, 0.0, 0.0, f64::INFINITY]
    );
    assert_eq!(
        (c.origin, c.boundary, c.defined),
        ([0.0; 3], [true; 3], true)
    );
    assert_eq!(
        cell_to_json(&c),
        json!({"vectors": [[10.0, 0.0, 0.0], [0.0, 11.0, 0.0], [0.0, 0.0, "Infinity"]], "origin": [0.0, 0.0, 0.0],
               "boundary": [true, true, true], "cell_defined": true})
    );
    assert!(cell_from_json(&cell_to_json(&c), "box")
        .unwrap()
        .same_bits(&c));

    let u = cell_from_json(
        &json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "cell_defined": false}),
        "box",
    )
    .unwrap();
    assert!(u.same_bits(&Cell::UNDEFINED));

    let c = cell_from_json(
        &json!({"vectors": [[1, 2, 3], [4, 5, 6], [7, 8, 9]], "origin": [-0.0, 1, 2], "boundary": [true, false, true]}),
        "b",
    )
    .unwrap();
    assert_eq!(c.vectors, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    assert_eq!(c.origin[0].to_bits(), (-0.0f64).to_bits());
    assert_eq!(c.boundary, [true, false, true]);

    for (bad, clause, at) in [
        (json!([[1, 0, 0]]), Clause::BoxShape, "b"),
        (json!({"origin": [0, 0, 0]}), Clause::BoxShape, "b.vectors"),
        (
            json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1, 0]]}),
            Clause::BoxShape,
            "b.vectors[2]",
        ),
        (
            json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "origin": [0, 0]}),
            Clause::BoxShape,
            "b.origin",
        ),
        (
            json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "boundary": [1, 0, 0]}),
            Clause::TypedValue,
            "b.boundary[0]",
        ),
        (
            json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "cell_defined": "yes"}),
            Clause::TypedValue,
            "b.cell_defined",
        ),
        (
            json!({"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1]], "pbc": true}),
            Clause::ModelJson,
            "b.pbc",
        ),
    ] {
        assert_eq!(
            refusal(cell_from_json(&bad, "b")),
            (clause, at.into()),
            "{bad}"
        );
    }
}

#[test]
fn schema_round_trips_and_omits_defaults() {
    let given = json!({
        "blocks": {
            "atoms": {"columns": {"x": {"dtype": "f64", "precision": 0.0001}, "q": {"dtype": "f64", "trailing": [], "nullable": false}}},
            "dipoles": {"columns": {"mu": {"dtype": "f64", "trailing": [3], "nullable": true}}, "aligned_with": "atoms"},
            "grid": {"columns": {"rho": {"dtype": "c128"}, "cell": {"dtype": "u64"}}, "structural_shape": [2, 2], "targets": {"cell": "atoms"}}
        },
        "meta": {
            "pe": {"dtype": "f64"},
            "note": {"dtype": "json", "fill": null},
            "nstep": {"dtype": "u64", "fill": 18446744073709551615u64},
            "temp": {"dtype": "f64", "fill": "NaN"}
        }
    });
    let s = schema_from_json(&given, "sequence_schema").unwrap();
    assert_eq!(s.meta["note"].fill, Some(Value::Null));
    assert_eq!(s.meta["pe"].fill, None);
    assert_eq!(s.meta["nstep"].fill, Some(json!("18446744073709551615")));
    assert_eq!(s.blocks["dipoles"].aligned_with.as_deref(), Some("atoms"));
    let out = schema_to_json(&s);
    assert_eq!(
        out["blocks"]["atoms"]["columns"]["q"],
        json!({"dtype": "f64"})
    );
    assert_eq!(
        out["blocks"]["atoms"]["columns"]["x"],
        json!({"dtype": "f64", "precision": 0.0001})
    );
    assert_eq!(
        out["blocks"]["dipoles"]["columns"]["mu"],
        json!({"dtype": "f64", "trailing": [3], "nullable": true})
    );
    assert_eq!(out["meta"]["note"], json!({"dtype": "json", "fill": null}));
    assert_eq!(out["meta"]["pe"], json!({"dtype": "f64"}));
    assert_eq!(schema_from_json(&out, "s").unwrap(), s);

    assert_eq!(
        refusal(schema_from_json(&json!({"blocks": {}}), "s")),
        (Clause::ModelJson, "s.meta".into())
    );
    assert_eq!(
        refusal(schema_from_json(
            &json!({"blocks": {}, "meta": {"k": {"fill": 1}}}),
            "s"
        )),
        (Clause::ModelJson, "s.meta.k.dtype".into())
    );
}

#[test]
fn trajectory_meta_is_kept_raw_and_own_schema_is_read() {
    let v = json!({"meta": {}, "records": [{"trajectory": {
    "schema": {"blocks": {}, "meta": {"pe": {"dtype": "f64"}}},
    "frames": [
        {"step": "-9223372036854775808", "meta": {"pe": 1, "big": 18446744073709551615u64}, "blocks": {}},
        {"step": 9223372036854775807i64, "blocks": {}, "box": {"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, 1]]}}
    ]}}]});
    let c = collection_from_json(&v).unwrap();
    let t = c.records[0].trajectory.as_ref().unwrap();
    assert!(t.schema.is_some());
    assert_eq!(t.frames[0].step, i64::MIN);
    assert_eq!(t.frames[1].step, i64::MAX);
    // Not normalized here: the tags live in the declaration.
    assert_eq!(t.frames[0].meta["pe"], json!(1));
    assert_eq!(t.frames[0].meta["big"], json!(18446744073709551615u64));
    assert!(t.frames[1].meta.is_empty());
    let out = collection_to_json(&c);
    assert_eq!(
        out["records"][0]["trajectory"]["frames"][0]["step"],
        json!("-9223372036854775808")
    );
    assert_eq!(out["records"][0]["meta"], json!({}));
    assert!(out.get("sequence_schema").is_none());
    assert!(out.get("index").is_none());
    assert!(out.get("forcefield").is_none());
    assert_eq!(collection_from_json(&out).unwrap(), c);
}

#[test]
fn forcefield_round_trips() {
    let mut v = example_value();
    v["forcefield"] = json!({
        "meta": {"name": "tip3p", "units": {"preset": "real"}, "styles": [{"category": "pair", "style": "lj/cut"}], "extra": [1, 2]},
        "blocks": {"pair.lj%2Fcut": {"count": 2, "columns": {
            "name": {"dtype": "string", "shape": [2], "values": ["OW-OW", "HW-HW"]},
            "itom": {"dtype": "string", "shape": [2], "values": ["OW", "HW"]},
            "epsilon": {"dtype": "f64", "shape": [2], "values": [0.102, 0.0], "validity": [true, false]}
        }}}
    });
    let c = collection_from_json(&v).unwrap();
    let ff = c.header.forcefield.as_ref().unwrap();
    assert_eq!(ff.document["extra"], json!([1, 2]));
    assert_eq!(ff.tables["pair.lj%2Fcut"].count, 2);
    let out = collection_to_json(&c);
    assert_eq!(out["forcefield"], v["forcefield"]);
    assert_eq!(collection_from_json(&out).unwrap(), c);
}

// ------------------------------------------------------------ no panic --

/// Every node of `v`, as a path of keys and indices.
fn pointers(v: &Value, here: String, out: &mut Vec<String>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => m
            .iter()
            .for_each(|(k, x)| pointers(x, format!("{here}/{k}"), out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, x)| pointers(x, format!("{here}/{i}"), out)),
        _ => {}
    }
}

#[test]
fn no_input_panics() {
    let base = example_value();
    let mut all = Vec::new();
    pointers(&base, String::new(), &mut all);
    let junk = [
        json!(null),
        json!(true),
        json!(-1),
        json!(1.5),
        json!(18446744073709551615u64),
        json!("NaN"),
        json!("x"),
        json!([]),
        json!([1, 2, 3]),
        json!({}),
        json!({"dtype": "c64", "shape": [1], "values": [[0.1, 0]]}),
    ];
    let mut refused = 0;
    for p in &all {
        for j in &junk {
            let mut v = base.clone();
            if let Some(slot) = v.pointer_mut(p) {
                *slot = j.clone();
            }
            if collection_from_json(&v).is_err() {
                refused += 1;
            }
        }
    }
    assert!(refused > all.len());

    // Truncated and spliced text.
    for cut in (0..EXAMPLE.len()).step_by(97) {
        let _ = collection_from_str(&EXAMPLE[..cut]);
        let _ = collection_from_str(&format!("{}{}", &EXAMPLE[..cut], &EXAMPLE[cut / 2..]));
    }
}
