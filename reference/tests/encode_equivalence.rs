//! The hand-written frame encoder writes exactly the bytes of the serde
//! encoder it replaced (`frame_bytes::encode_reference`): a seeded property
//! test over varied frames, with strings that need escapes, NaN and
//! infinite typed values, -0.0, subnormals, integers past 2^53, every dtype,
//! masks, cells and free-form documents.

mod common;

use common::Rng;
use molrec::frame_bytes::{decode, encode, encode_reference, FrameInfo};
use molrec::model::{Block, Cell, Column, ColumnData, Document};
use molrec::typed_json::MetaTag;
use molrec::DType;
use serde_json::{Number, Value};
use std::collections::BTreeMap;

const STRINGS: [&str; 16] = [
    "",
    "x",
    "atoms",
    "a\"b",
    "back\\slash",
    "\n\t\r\u{8}\u{c}",
    "\u{0}\u{1}\u{1f}\u{7f}",
    "ünïcödé",
    "😀 emoji",
    "/solidus/",
    "esc\u{1b}[0m",
    "tab\there",
    "quote\"",
    "\u{2028}\u{2029}",
    "name with spaces",
    "<>&'",
];

fn string(rng: &mut Rng) -> String {
    if rng.one_in(3) {
        // A random mix of awkward characters.
        let chars = [
            'a', 'Z', '0', '"', '\\', '\n', '\u{0}', '\u{1f}', '\u{7f}', 'é', '😀', '/', ' ',
        ];
        (0..rng.below(8)).map(|_| *rng.pick(&chars)).collect()
    } else {
        rng.pick(&STRINGS).to_string()
    }
}

fn float(rng: &mut Rng) -> f64 {
    let special = [
        0.0,
        -0.0,
        1.0,
        -1.5,
        0.1,
        1.0 / 3.0,
        1e300,
        -1e-300,
        5e-324,
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        f64::EPSILON,
        1e15,
        1e16,
        1e21,
        123456789.0,
        -76.123456789012,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    match rng.below(3) {
        0 => *rng.pick(&special),
        // Any bit pattern: subnormals, NaN payloads, huge exponents.
        1 => f64::from_bits(rng.next()),
        _ => (rng.next() as i64 as f64) / 1e6,
    }
}

fn finite(rng: &mut Rng) -> f64 {
    let v = float(rng);
    if v.is_finite() {
        v
    } else {
        -0.0
    }
}

fn int(rng: &mut Rng) -> i64 {
    let limit = 1i64 << 53;
    let special = [
        0,
        1,
        -1,
        limit - 1,
        limit,
        limit + 1,
        -limit,
        -limit - 1,
        i64::MAX,
        i64::MIN,
        i64::MIN + 1,
    ];
    if rng.one_in(2) {
        *rng.pick(&special)
    } else {
        rng.next() as i64 >> rng.below(64)
    }
}

fn value(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth >= 3 { 6 } else { 8 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => Value::Number(Number::from(rng.next() >> rng.below(64))),
        3 => Value::Number(Number::from(int(rng))),
        4 => Value::Number(Number::from_f64(finite(rng)).expect("finite")),
        5 => Value::String(string(rng)),
        6 => Value::Array((0..rng.below(4)).map(|_| value(rng, depth + 1)).collect()),
        _ => Value::Object(document(rng, depth + 1)),
    }
}

fn document(rng: &mut Rng, depth: u32) -> Document {
    (0..rng.below(4))
        .map(|_| (string(rng), value(rng, depth)))
        .collect()
}

fn column_data(rng: &mut Rng, dtype: DType, n: usize) -> ColumnData {
    let mut data = ColumnData::empty(dtype);
    macro_rules! fill {
        ($v:ident, $make:expr) => {{
            *$v = (0..n).map(|_| $make).collect()
        }};
    }
    match &mut data {
        ColumnData::F64(v) => fill!(v, float(rng)),
        ColumnData::I8(v) => fill!(v, rng.next() as i8),
        ColumnData::I16(v) => fill!(v, rng.next() as i16),
        ColumnData::I32(v) => fill!(v, rng.next() as i32),
        ColumnData::I64(v) => fill!(v, int(rng)),
        ColumnData::U8(v) => fill!(v, rng.next() as u8),
        ColumnData::U16(v) => fill!(v, rng.next() as u16),
        ColumnData::U32(v) => fill!(v, rng.next() as u32),
        ColumnData::U64(v) => fill!(v, rng.next()),
        ColumnData::Bool(v) => fill!(v, rng.one_in(2)),
        ColumnData::String(v) => fill!(v, string(rng)),
        ColumnData::C64(v) => fill!(v, [float(rng) as f32, float(rng) as f32]),
        ColumnData::C128(v) => fill!(v, [float(rng), float(rng)]),
    }
    data
}

fn block(rng: &mut Rng) -> Block {
    let count = rng.below(5);
    let mut columns = BTreeMap::new();
    for _ in 0..rng.below(5) {
        let dtype = *rng.pick(&DType::ALL);
        let mut shape = vec![count];
        if rng.one_in(3) {
            shape.push(rng.below(4));
        }
        let n = shape.iter().product::<u64>() as usize;
        let validity = match rng.below(3) {
            0 => None,
            1 => Some(vec![true; count as usize]),
            _ => Some((0..count).map(|_| rng.one_in(2)).collect()),
        };
        let precision = rng.one_in(2).then(|| float(rng));
        columns.insert(
            string(rng),
            Column {
                shape,
                data: column_data(rng, dtype, n),
                validity,
                precision,
            },
        );
    }
    Block {
        count,
        columns,
        structural_shape: rng.one_in(3).then(|| {
            (0..rng.below(3))
                .map(|_| rng.next() >> rng.below(64))
                .collect()
        }),
        targets: (0..rng.below(3))
            .map(|_| (string(rng), string(rng)))
            .collect(),
        attributes: if rng.one_in(2) {
            document(rng, 0)
        } else {
            Document::new()
        },
    }
}

fn info(rng: &mut Rng) -> FrameInfo {
    let meta = document(rng, 0);
    let meta_types = rng.one_in(2).then(|| {
        meta.keys()
            .map(|k| (k.clone(), *rng.pick(&MetaTag::ALL)))
            .collect()
    });
    let mut vectors = [0.0; 9];
    vectors.iter_mut().for_each(|v| *v = float(rng));
    let cell = rng.one_in(2).then(|| Cell {
        vectors,
        origin: [float(rng), float(rng), float(rng)],
        boundary: [rng.one_in(2), rng.one_in(2), rng.one_in(2)],
        defined: rng.one_in(3),
    });
    FrameInfo {
        meta,
        meta_types,
        step: rng.one_in(2).then(|| int(rng)),
        time: rng.one_in(2).then(|| float(rng)),
        cell: cell.map(Box::new),
    }
}

#[test]
fn the_hand_written_encoder_writes_the_serde_encoders_bytes() {
    let mut rng = Rng(0x656e_636f_6465);
    let (mut new, mut old) = (Vec::new(), Vec::new());
    let mut decoded = 0;
    for case in 0..20_000 {
        let blocks: BTreeMap<String, Block> = (0..rng.below(4))
            .map(|_| (string(&mut rng), block(&mut rng)))
            .collect();
        let info = info(&mut rng);
        let with_precision = rng.one_in(2);
        // A stale buffer: `encode` clears what it is handed.
        new.extend_from_slice(b"stale");
        encode(&blocks, &info, with_precision, &mut new);
        encode_reference(&blocks, &info, with_precision, &mut old);
        assert!(
            new == old,
            "case {case}: the encoders differ\nnew: {}\nold: {}\nblocks: {blocks:?}\ninfo: {info:?}",
            String::from_utf8_lossy(&new),
            String::from_utf8_lossy(&old)
        );
        decoded += usize::from(decode(&new).is_ok());
    }
    // The inputs are not all valid frames (random names and tags), but
    // enough of them are that decoding is exercised on the new bytes.
    assert!(decoded > 1000, "only {decoded} cases decoded");
}

/// The frame shapes the writer produces most: f64 coordinates, a per-step
/// meta value, a step and a time, a cell; and an empty frame.
#[test]
fn typical_frames_encode_identically() {
    let atoms = Block {
        count: 3,
        columns: ["x", "y", "z"]
            .iter()
            .map(|c| {
                (
                    c.to_string(),
                    Column::new(vec![3], ColumnData::F64(vec![0.0, -0.0, 0.96])),
                )
            })
            .collect(),
        ..Block::default()
    };
    let mut meta = Document::new();
    meta.insert("pe".into(), serde_json::json!(-76.1));
    meta.insert("flag".into(), serde_json::json!("NaN"));
    let infos = [
        FrameInfo::default(),
        FrameInfo {
            meta,
            step: Some(9_007_199_254_740_993),
            time: Some(f64::NEG_INFINITY),
            cell: Some(Box::new(Cell::UNDEFINED)),
            ..FrameInfo::default()
        },
    ];
    for info in &infos {
        for blocks in [
            BTreeMap::new(),
            BTreeMap::from([("atoms".to_string(), atoms.clone())]),
        ] {
            let (mut new, mut old) = (Vec::new(), Vec::new());
            encode(&blocks, info, true, &mut new);
            encode_reference(&blocks, info, true, &mut old);
            assert_eq!(String::from_utf8_lossy(&new), String::from_utf8_lossy(&old));
            assert_eq!(new, old);
        }
    }
}
