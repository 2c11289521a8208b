//! Frame bytes: round trips of every dtype, alignment, views, and every refusal.

mod common;

use common::frame_value;
use molrec::frame_bytes::{
    decode, decode_fast, decode_reference, decode_update, encode, BlocksMemo, ColumnBytes,
    FrameInfo, FrameRef, Update, MAX_HEADER_LEN,
};
use molrec::model::{Block, Cell, Column, ColumnData, Document};
use molrec::typed_json::MetaTag;
use molrec::{Clause, DType};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A small deterministic xorshift64* generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn f64(&mut self) -> f64 {
        match self.below(12) {
            0 => f64::NAN,
            1 => -0.0,
            2 => f64::INFINITY,
            3 => f64::NEG_INFINITY,
            4 => f64::from_bits(self.next()),
            _ => (self.next() as i64 as f64) / 1e12,
        }
    }
    fn f32(&mut self) -> f32 {
        match self.below(6) {
            0 => f32::NAN,
            1 => -0.0,
            2 => f32::from_bits(self.next() as u32),
            _ => (self.next() as i32 as f32) / 1e3,
        }
    }
    fn string(&mut self) -> String {
        const PIECES: [&str; 8] = ["C", "H", "Ow", "\"q\"", "\\", "\u{e9}", "\u{1F600}", "\n"];
        (0..self.below(5))
            .map(|_| PIECES[self.below(8) as usize])
            .collect()
    }
}

fn data(dtype: DType, n: usize, rng: &mut Rng) -> ColumnData {
    macro_rules! ints {
        ($v:ident, $t:ty) => {
            ColumnData::$v((0..n).map(|_| rng.next() as $t).collect())
        };
    }
    match dtype {
        DType::F64 => ColumnData::F64((0..n).map(|_| rng.f64()).collect()),
        DType::I8 => ints!(I8, i8),
        DType::I16 => ints!(I16, i16),
        DType::I32 => ints!(I32, i32),
        DType::I64 => ints!(I64, i64),
        DType::U8 => ints!(U8, u8),
        DType::U16 => ints!(U16, u16),
        DType::U32 => ints!(U32, u32),
        DType::U64 => ints!(U64, u64),
        DType::Bool => ColumnData::Bool((0..n).map(|_| rng.below(2) == 1).collect()),
        DType::String => ColumnData::String((0..n).map(|_| rng.string()).collect()),
        DType::C64 => ColumnData::C64((0..n).map(|_| [rng.f32(), rng.f32()]).collect()),
        DType::C128 => ColumnData::C128((0..n).map(|_| [rng.f64(), rng.f64()]).collect()),
    }
}

fn column(dtype: DType, rows: u64, trailing: &[u64], masked: bool, rng: &mut Rng) -> Column {
    let mut shape = vec![rows];
    shape.extend_from_slice(trailing);
    let n = shape.iter().product::<u64>() as usize;
    let mut c = Column::new(shape, data(dtype, n, rng));
    if masked {
        let mut mask: Vec<bool> = (0..rows).map(|_| rng.below(3) != 0).collect();
        if let Some(first) = mask.first_mut() {
            *first = false; // at least one null row when there are rows
        }
        c.validity = Some(mask);
    }
    if dtype == DType::F64 && rng.below(2) == 0 {
        c.precision = Some(0.001);
    }
    c
}

fn frame_info_variants() -> Vec<FrameInfo> {
    let mut meta = Document::new();
    meta.insert("pe".into(), json!(-503415.87));
    meta.insert("label".into(), json!("x"));
    meta.insert("big".into(), json!("9007199254740993"));
    meta.insert("nan".into(), json!("NaN"));
    meta.insert("doc".into(), json!({"a": [1, null, {"b": true}]}));
    let tags = BTreeMap::from([
        ("pe".to_string(), MetaTag::F64),
        ("label".to_string(), MetaTag::String),
        ("big".to_string(), MetaTag::U64),
        ("nan".to_string(), MetaTag::F64),
        ("doc".to_string(), MetaTag::Json),
    ]);
    let cell = Cell {
        vectors: [10.0, 0.5, 0.0, 0.0, 11.0, f64::NAN, -0.0, 0.0, 12.25],
        origin: [1.0, -2.0, f64::INFINITY],
        boundary: [true, false, true],
        defined: true,
    };
    vec![
        FrameInfo::default(),
        FrameInfo {
            meta: meta.clone(),
            ..FrameInfo::default()
        },
        FrameInfo {
            meta: meta.clone(),
            meta_types: Some(tags),
            cell: Some(Box::new(cell)),
            ..FrameInfo::default()
        },
        FrameInfo {
            meta: Document::new(),
            meta_types: Some(BTreeMap::new()),
            ..FrameInfo::default()
        },
        FrameInfo {
            meta: meta.clone(),
            step: Some(0),
            time: Some(0.0),
            ..FrameInfo::default()
        },
        FrameInfo {
            step: Some(i64::MIN),
            time: Some(f64::NAN),
            cell: Some(Box::new(Cell::UNDEFINED)),
            ..FrameInfo::default()
        },
        FrameInfo {
            step: Some((1 << 53) + 1),
            time: Some(f64::NEG_INFINITY),
            ..FrameInfo::default()
        },
        FrameInfo {
            step: Some(i64::MAX),
            time: Some(-0.0),
            cell: Some(Box::new(cell)),
            ..FrameInfo::default()
        },
        FrameInfo {
            step: Some(-(1 << 53)),
            time: Some(1e-300),
            ..FrameInfo::default()
        },
    ]
}

fn same_info(a: &FrameInfo, b: &FrameInfo) -> bool {
    a.meta == b.meta
        && a.meta_types == b.meta_types
        && a.step == b.step
        && a.time.map(f64::to_bits) == b.time.map(f64::to_bits)
        && match (&a.cell, &b.cell) {
            (None, None) => true,
            (Some(x), Some(y)) => x.same_bits(y),
            _ => false,
        }
}

/// The payload start of an encoded value and its header as JSON.
fn header_of(value: &[u8]) -> (usize, Value) {
    let len = u32::from_le_bytes(value[4..8].try_into().unwrap()) as usize;
    (
        (8 + len).next_multiple_of(8),
        serde_json::from_slice(&value[8..8 + len]).unwrap(),
    )
}

/// Every buffer offset, from the start of the value, is a multiple of 8 —
/// both as written in the header and as the decoder resolved it.
fn check_alignment(value: &[u8], frame: &FrameRef<'_>) {
    let (payload, header) = header_of(value);
    assert_eq!(payload % 8, 0);
    for block in header["blocks"].as_object().unwrap().values() {
        for col in block["columns"].as_object().unwrap().values() {
            for key in ["offset", "validity"] {
                if let Some(off) = col.get(key) {
                    assert_eq!(
                        (payload as u64 + off.as_u64().unwrap()) % 8,
                        0,
                        "{key} in {col}"
                    );
                }
            }
        }
    }
    for block in frame.blocks.values() {
        for col in block.columns.values() {
            let mut slices = vec![];
            if let ColumnBytes::Buffer(b) = col.data {
                slices.push(b);
            }
            slices.extend(col.validity);
            for s in slices.into_iter().filter(|s| !s.is_empty()) {
                let at = s.as_ptr() as usize - value.as_ptr() as usize;
                assert_eq!(at % 8, 0);
            }
        }
    }
}

fn round_trip(blocks: &BTreeMap<String, Block>, info: &FrameInfo, with_precision: bool) -> Vec<u8> {
    let mut out = vec![1, 2, 3]; // encode clears it
    encode(blocks, info, with_precision, &mut out);
    assert_eq!(&out[..4], b"MRF1");
    let frame = decode(&out).unwrap_or_else(|e| panic!("{e}\n{}", String::from_utf8_lossy(&out)));
    check_alignment(&out, &frame);
    assert!(
        same_info(&frame.info, info),
        "{:?} vs {:?}",
        frame.info,
        info
    );
    assert_eq!(frame.blocks.len(), blocks.len());
    let back = frame.to_blocks().unwrap();
    for (name, block) in blocks {
        let got = &back[name];
        let mut want = block.clone();
        for c in want.columns.values_mut() {
            c.normalize_mask();
            if !with_precision {
                c.precision = None;
            }
        }
        assert!(got.same_bits(&want), "block {name}:\n{got:?}\nvs\n{want:?}");
        for (cname, c) in &frame.blocks[name].columns {
            assert_eq!(c.dtype, block.columns[cname].dtype());
            assert_eq!(c.shape, block.columns[cname].shape);
        }
    }
    out
}

#[test]
fn every_dtype_round_trips() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let trailings: [&[u64]; 4] = [&[], &[3], &[2, 2], &[0]];
    for dtype in DType::ALL {
        for trailing in trailings {
            for rows in [0u64, 1, 3, 7, 33] {
                for masked in [false, true] {
                    let mut block = Block {
                        count: rows,
                        ..Block::default()
                    };
                    block
                        .columns
                        .insert("a".into(), column(dtype, rows, trailing, masked, &mut rng));
                    // A neighbour of another width, so offsets are exercised after odd sizes.
                    block
                        .columns
                        .insert("b".into(), column(DType::U8, rows, &[], !masked, &mut rng));
                    block
                        .columns
                        .insert("c".into(), column(DType::F64, rows, &[3], false, &mut rng));
                    let blocks = BTreeMap::from([("atoms".to_string(), block)]);
                    for with_precision in [false, true] {
                        round_trip(&blocks, &FrameInfo::default(), with_precision);
                    }
                }
            }
        }
    }
}

/// Random blocks: up to 3 blocks of up to 5 columns of any dtype, masks,
/// structural shapes, targets and attributes.
fn random_blocks(rng: &mut Rng) -> BTreeMap<String, Block> {
    let mut blocks = BTreeMap::new();
    for b in 0..rng.below(4) {
        let rows = rng.below(9);
        let mut block = Block {
            count: rows,
            ..Block::default()
        };
        if rng.below(3) == 0 && rows > 0 {
            block.structural_shape = Some(vec![1, rows]);
        }
        if rng.below(3) == 0 {
            block.targets.insert("ref".into(), "atoms".into());
            block
                .attributes
                .insert("note".into(), json!({"k": [1, 2.5, "s"]}));
        }
        for c in 0..rng.below(6) {
            let dtype = DType::ALL[rng.below(13) as usize];
            let trailing: Vec<u64> = (0..rng.below(3)).map(|_| rng.below(4)).collect();
            let masked = rng.below(2) == 0;
            block.columns.insert(
                format!("c{c}\u{e9}"),
                column(dtype, rows, &trailing, masked, rng),
            );
        }
        blocks.insert(format!("b{b}"), block);
    }
    blocks
}

#[test]
fn random_frames_round_trip() {
    let mut rng = Rng(42);
    let infos = frame_info_variants();
    for i in 0..300 {
        let blocks = random_blocks(&mut rng);
        let info = &infos[i % infos.len()];
        round_trip(&blocks, info, rng.below(2) == 0);
    }
}

#[test]
fn all_true_mask_reads_as_none_and_is_not_written() {
    let mut c = Column::new(vec![3], ColumnData::F64(vec![1.0, 2.0, 3.0]));
    c.validity = Some(vec![true; 3]);
    let block = Block {
        count: 3,
        columns: BTreeMap::from([("x".to_string(), c)]),
        ..Block::default()
    };
    let value = round_trip(
        &BTreeMap::from([("atoms".to_string(), block)]),
        &FrameInfo::default(),
        false,
    );
    let (_, header) = header_of(&value);
    assert!(header["blocks"]["atoms"]["columns"]["x"]
        .get("validity")
        .is_none());
}

#[test]
fn header_keys_follow_the_brief() {
    let mut c = Column::new(vec![2], ColumnData::F64(vec![1.0, 2.0]));
    c.precision = Some(0.5);
    let block = Block {
        count: 2,
        columns: BTreeMap::from([("x".to_string(), c)]),
        ..Block::default()
    };
    let blocks = BTreeMap::from([("atoms".to_string(), block)]);
    let mut out = Vec::new();
    encode(&blocks, &FrameInfo::default(), true, &mut out);
    let (_, h) = header_of(&out);
    assert_eq!(
        h,
        json!({"blocks": {"atoms": {"count": 2, "structural_shape": null,
            "columns": {"x": {"dtype": "f64", "shape": [2], "offset": 0, "precision": 0.5}}}}, "meta": {}})
    );
    encode(
        &blocks,
        &FrameInfo {
            step: Some((1 << 53) + 1),
            time: Some(f64::NAN),
            ..FrameInfo::default()
        },
        false,
        &mut out,
    );
    let (_, h) = header_of(&out);
    assert_eq!(h["step"], json!("9007199254740993"));
    assert_eq!(h["time"], json!("NaN"));
    assert!(h["blocks"]["atoms"]["columns"]["x"]
        .get("precision")
        .is_none());
    assert!(h.get("meta_types").is_none() && h.get("box").is_none());
}

/// Copies `value` into an over-allocated buffer at an address whose
/// remainder modulo 8 is `rem`.
fn placed(value: &[u8], rem: usize) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; value.len() + 16];
    let base = buf.as_ptr() as usize;
    let start = (8 - base % 8) % 8 + rem;
    buf[start..start + value.len()].copy_from_slice(value);
    (buf, start)
}

#[test]
fn views_need_real_alignment() {
    let xs: Vec<f64> = (0..30).map(|i| i as f64 * 0.25 - 3.0).collect();
    let ids: Vec<u64> = (0..30).map(|i| u64::MAX - i).collect();
    let block = Block {
        count: 30,
        columns: BTreeMap::from([
            (
                "a".to_string(),
                Column::new(vec![30], ColumnData::U8(vec![7; 30])),
            ),
            (
                "id".to_string(),
                Column::new(vec![30], ColumnData::U64(ids.clone())),
            ),
            (
                "x".to_string(),
                Column::new(vec![30], ColumnData::F64(xs.clone())),
            ),
        ]),
        ..Block::default()
    };
    let mut value = Vec::new();
    encode(
        &BTreeMap::from([("atoms".to_string(), block)]),
        &FrameInfo::default(),
        false,
        &mut value,
    );

    let (buf, start) = placed(&value, 0);
    let frame = decode(&buf[start..start + value.len()]).unwrap();
    let cols = &frame.blocks["atoms"].columns;
    assert_eq!(cols["x"].f64_view().unwrap(), &xs[..]);
    assert_eq!(cols["id"].u64_view().unwrap(), &ids[..]);
    assert!(
        cols["x"].u64_view().is_none()
            && cols["id"].f64_view().is_none()
            && cols["a"].f64_view().is_none()
    );

    let (buf, start) = placed(&value, 2);
    let frame = decode(&buf[start..start + value.len()]).unwrap();
    let cols = &frame.blocks["atoms"].columns;
    assert!(cols["x"].f64_view().is_none());
    assert!(cols["id"].u64_view().is_none());
    assert_eq!(cols["x"].to_column().unwrap().data, ColumnData::F64(xs));
    assert_eq!(cols["id"].to_column().unwrap().data, ColumnData::U64(ids));
}

// ---------------------------------------------------------------------------
// Refusals
// ---------------------------------------------------------------------------

/// A value from a header text and payload bytes (header length patched in).
fn value_of(header: &str, payload: &[u8]) -> Vec<u8> {
    frame_value(header.as_bytes(), payload)
}

fn refused(value: &[u8]) -> Clause {
    match decode(value) {
        Ok(f) => panic!("accepted: {f:?}"),
        Err(e) => e.clause().unwrap_or_else(|| panic!("not a refusal: {e}")),
    }
}

fn one_column(col: &str, count: u64) -> String {
    format!(
        r#"{{"blocks": {{"atoms": {{"count": {count}, "structural_shape": null, "columns": {{"x": {col}}}}}}}, "meta": {{}}}}"#
    )
}

#[test]
fn hand_written_value_decodes() {
    let v = value_of(
        &one_column(r#"{"dtype": "f64", "shape": [2], "offset": 0}"#, 2),
        &[0u8; 16],
    );
    let f = decode(&v).unwrap();
    assert_eq!(
        f.blocks["atoms"].columns["x"].to_column().unwrap().data,
        ColumnData::F64(vec![0.0, 0.0])
    );
}

#[test]
fn short_magic_and_header_bounds() {
    assert_eq!(refused(b""), Clause::FrameTooShort);
    assert_eq!(refused(b"MRF1\0\0\0"), Clause::FrameTooShort);
    let mut v = value_of(r#"{"blocks": {}}"#, &[]);
    decode(&v).unwrap();
    v[3] = b'2';
    assert_eq!(refused(&v), Clause::FrameMagic);

    let mut v = value_of(r#"{"blocks": {}}"#, &[]);
    v[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(refused(&v), Clause::FrameHeaderBounds);
    v[4..8].copy_from_slice(&(MAX_HEADER_LEN + 1).to_le_bytes());
    assert_eq!(refused(&v), Clause::FrameHeaderBounds);
    v[4..8].copy_from_slice(&100u32.to_le_bytes());
    assert_eq!(refused(&v), Clause::FrameHeaderBounds);
}

#[test]
fn header_json_refusals() {
    let mut v = value_of(r#"{"blocks": {}, "meta": {"k": "ab"}}"#, &[]);
    let at = v.windows(2).position(|w| w == b"ab").unwrap();
    v[at] = 0xFF;
    v[at + 1] = 0xFE;
    assert_eq!(refused(&v), Clause::FrameHeaderJson, "not UTF-8");
    for header in [
        "{blocks",
        "",
        "   ",
        r#"{"blocks": {}} x"#,
        "[]",
        r#"[{"atoms": {"count": 0, "columns": {}}}, {}]"#,
        "null",
        "3",
        r#""blocks""#,
        r#"{"meta": {}}"#,
        r#"{"blocks": []}"#,
        r#"{"blocks": {}, "meta": []}"#,
        r#"{"blocks": {}, "meta": null}"#,
        r#"{"blocks": {}, "blocks": {}}"#,
        r#"{"blocks": {"a": {"count": "3", "columns": {}}}}"#,
        r#"{"blocks": {"a": {"count": -1, "columns": {}}}}"#,
        r#"{"blocks": {"a": {"count": 0}}}"#,
        r#"{"blocks": {"a": [0, null, {}]}}"#,
        r#"{"blocks": {"a": {"count": 0, "columns": {}}, "a": {"count": 0, "columns": {}}}}"#,
        r#"{"blocks": {"a": {"count": 0, "columns": {}, "targets": {"r": 3}}}}"#,
        r#"{"blocks": {"a": {"count": 0, "columns": {}, "attributes": 3}}}"#,
        r#"{"blocks": {"a": {"count": 0, "columns": {}, "structural_shape": [1.5]}}}"#,
        r#"{"blocks": {}, "meta_types": {"k": 3}}"#,
        &one_column(r#"{"dtype": 64, "shape": [1], "offset": 0}"#, 1),
        &one_column(r#"{"shape": [1], "offset": 0}"#, 1),
        &one_column(r#"{"dtype": "f64", "offset": 0}"#, 1),
        &one_column(r#"{"dtype": "f64", "shape": [1]}"#, 1),
        &one_column(r#"{"dtype": "f64", "shape": [1], "offset": -8}"#, 1),
        &one_column(r#"{"dtype": "f64", "shape": [1], "offset": 8.0}"#, 1),
        &one_column(
            r#"{"dtype": "f64", "shape": [1], "offset": 0, "values": [1.0]}"#,
            1,
        ),
        &one_column(
            r#"{"dtype": "f64", "shape": [1], "offset": 0, "offset": 0}"#,
            1,
        ),
        &one_column(
            r#"{"dtype": "f64", "shape": [1], "offset": 0, "precision": "x"}"#,
            1,
        ),
        &one_column(r#"{"dtype": "string", "shape": [1], "values": [1]}"#, 1),
        &one_column(r#"["f64", [1], 0]"#, 1),
    ] {
        let v = value_of(header, &[0; 8]);
        assert_eq!(refused(&v), Clause::FrameHeaderJson, "{header}");
    }
}

#[test]
fn deep_nesting_is_refused_without_overflow() {
    let deep = "[".repeat(100_000);
    assert_eq!(refused(&value_of(&deep, &[])), Clause::FrameHeaderJson);
    let deep_obj = "{\"a\":".repeat(100_000);
    assert_eq!(refused(&value_of(&deep_obj, &[])), Clause::FrameHeaderJson);
    // Inside a document that is parsed into a tree (meta) ...
    let h = format!(
        r#"{{"blocks": {{}}, "meta": {{"k": {}}}}}"#,
        "[".repeat(100_000)
    );
    assert_eq!(refused(&value_of(&h, &[])), Clause::FrameHeaderJson);
    // ... and inside an unknown key that is skipped.
    let h = format!(r#"{{"blocks": {{}}, "future": {}}}"#, "[".repeat(100_000));
    assert_eq!(refused(&value_of(&h, &[])), Clause::FrameHeaderJson);
    // Balanced deep nesting in an unknown key is skipped without recursion.
    let h = format!(
        r#"{{"blocks": {{}}, "future": {}{}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    decode(&value_of(&h, &[])).unwrap();
}

#[test]
fn column_refusals() {
    let cases: &[(&str, u64, usize, Clause)] = &[
        (
            r#"{"dtype": "f32", "shape": [1], "offset": 0}"#,
            1,
            8,
            Clause::FrameDtype,
        ),
        (
            r#"{"dtype": "float", "shape": [1], "offset": 0}"#,
            1,
            8,
            Clause::FrameDtype,
        ),
        (
            r#"{"dtype": "json", "shape": [1], "offset": 0}"#,
            1,
            8,
            Clause::FrameDtype,
        ),
        (
            r#"{"dtype": "f64", "shape": [1], "offset": 4}"#,
            1,
            16,
            Clause::FrameOffsetAligned,
        ),
        (
            r#"{"dtype": "u8", "shape": [1], "offset": 0, "validity": 12}"#,
            1,
            32,
            Clause::FrameOffsetAligned,
        ),
        (
            r#"{"dtype": "f64", "shape": [2], "offset": 0}"#,
            2,
            8,
            Clause::FrameBufferBounds,
        ),
        (
            r#"{"dtype": "f64", "shape": [1], "offset": 8}"#,
            1,
            8,
            Clause::FrameBufferBounds,
        ),
        (
            r#"{"dtype": "u8", "shape": [4], "offset": 0, "validity": 8}"#,
            4,
            8,
            Clause::FrameBufferBounds,
        ),
        (
            r#"{"dtype": "u8", "shape": [4], "offset": 0, "validity": 8}"#,
            4,
            11,
            Clause::FrameBufferBounds,
        ),
        (
            r#"{"dtype": "f64", "shape": [18446744073709551615], "offset": 0}"#,
            u64::MAX,
            8,
            Clause::FrameSizeOverflow,
        ),
        (
            r#"{"dtype": "f64", "shape": [4294967296, 4294967296], "offset": 0}"#,
            1 << 32,
            8,
            Clause::FrameSizeOverflow,
        ),
        (
            r#"{"dtype": "u8", "shape": [4294967296, 4294967296], "offset": 0}"#,
            1 << 32,
            8,
            Clause::FrameSizeOverflow,
        ),
        (
            r#"{"dtype": "c128", "shape": [1152921504606846976], "offset": 0}"#,
            1 << 60,
            8,
            Clause::FrameSizeOverflow,
        ),
        (
            r#"{"dtype": "f64", "shape": [1], "offset": 18446744073709551615}"#,
            1,
            8,
            Clause::FrameOffsetAligned,
        ),
        (
            r#"{"dtype": "f64", "shape": [1], "offset": 18446744073709551608}"#,
            1,
            8,
            Clause::FrameBufferBounds,
        ),
        (
            r#"{"dtype": "u8", "shape": [1], "offset": 0, "validity": 18446744073709551608}"#,
            1,
            8,
            Clause::FrameBufferBounds,
        ),
        (
            r#"{"dtype": "string", "shape": [3], "values": ["a", "b"]}"#,
            3,
            0,
            Clause::FrameStringValues,
        ),
        (
            r#"{"dtype": "string", "shape": [1], "values": ["a", "b"]}"#,
            1,
            0,
            Clause::FrameStringValues,
        ),
        (
            r#"{"dtype": "string", "shape": [2, 2], "values": ["a", "b", "c"]}"#,
            2,
            0,
            Clause::FrameStringValues,
        ),
        (
            r#"{"dtype": "string", "shape": [1], "values": ["a"], "offset": 0}"#,
            1,
            8,
            Clause::FrameStringValues,
        ),
        (
            r#"{"dtype": "string", "shape": [1]}"#,
            1,
            0,
            Clause::FrameStringValues,
        ),
        (
            r#"{"dtype": "f64", "shape": [2], "offset": 0}"#,
            3,
            16,
            Clause::ColumnShape,
        ),
        (
            r#"{"dtype": "string", "shape": [1], "values": ["a"]}"#,
            2,
            0,
            Clause::ColumnShape,
        ),
        (
            r#"{"dtype": "f64", "shape": [], "offset": 0}"#,
            1,
            8,
            Clause::ColumnShape,
        ),
    ];
    for (col, count, payload, clause) in cases {
        let v = value_of(&one_column(col, *count), &vec![0u8; *payload]);
        assert_eq!(refused(&v), *clause, "{col}");
    }
    // Bool bytes and mask bytes other than 0 / 1.
    let v = value_of(
        &one_column(r#"{"dtype": "bool", "shape": [2], "offset": 0}"#, 2),
        &[1, 2, 0, 0, 0, 0, 0, 0],
    );
    assert_eq!(refused(&v), Clause::FrameBoolByte);
    let v = value_of(
        &one_column(
            r#"{"dtype": "u8", "shape": [2], "offset": 0, "validity": 8}"#,
            2,
        ),
        &[0; 8].iter().chain(&[1, 7]).copied().collect::<Vec<u8>>(),
    );
    assert_eq!(refused(&v), Clause::FrameValidity);
    // A zero axis makes the product 0 whatever the others are.
    let v = value_of(
        &one_column(
            r#"{"dtype": "f64", "shape": [0, 18446744073709551615, 2], "offset": 0}"#,
            0,
        ),
        &[],
    );
    assert!(decode(&v).unwrap().blocks["atoms"].columns["x"]
        .to_column()
        .unwrap()
        .data
        .is_empty());
}

#[test]
fn huge_shape_is_refused_quickly() {
    let h = r#"{"blocks":{"a":{"count":1099511627776,"columns":{"x":{"dtype":"f64","shape":[1099511627776],"offset":0}}}}}"#;
    let v = value_of(h, &[]);
    assert!(v.len() <= 120, "{}", v.len());
    let t = Instant::now();
    assert_eq!(refused(&v), Clause::FrameBufferBounds);
    let v = value_of(
        &one_column(
            r#"{"dtype": "string", "shape": [1099511627776], "values": []}"#,
            1 << 40,
        ),
        &[],
    );
    assert_eq!(refused(&v), Clause::FrameStringValues);
    let v = value_of(
        &one_column(
            r#"{"dtype": "u8", "shape": [1099511627776], "offset": 0, "validity": 0}"#,
            1 << 40,
        ),
        &[],
    );
    assert_eq!(refused(&v), Clause::FrameBufferBounds);
    assert!(t.elapsed() < Duration::from_millis(100));
}

#[test]
fn null_time_and_box_read_as_absent() {
    // lmdb.md's v1 header example writes both (spec-map: mrf1.null-time-box).
    let value = value_of(
        r#"{"blocks": {}, "step": 0, "time": null, "box": null}"#,
        &[],
    );
    let frame = decode(&value).unwrap();
    assert_eq!(frame.info.step, Some(0));
    assert_eq!(frame.info.time, None);
    assert!(frame.info.cell.is_none());
}

#[test]
fn typed_parts_are_checked() {
    let cases: &[(&str, Clause)] = &[
        (r#"{"blocks": {}, "step": 1.5}"#, Clause::TypedValue),
        (r#"{"blocks": {}, "step": "abc"}"#, Clause::TypedValue),
        (r#"{"blocks": {}, "step": null}"#, Clause::TypedValue),
        (
            r#"{"blocks": {}, "step": "9223372036854775808"}"#,
            Clause::TypedValue,
        ),
        (r#"{"blocks": {}, "time": "nan"}"#, Clause::TypedValue),
        (
            r#"{"blocks": {}, "meta": {"a": 1.5}, "meta_types": {"a": "i64"}}"#,
            Clause::TypedValue,
        ),
        (
            r#"{"blocks": {}, "meta": {"a": [1, 2]}, "meta_types": {"a": "f64x3"}}"#,
            Clause::TypedValue,
        ),
        (
            r#"{"blocks": {}, "meta": {"a": 1}, "meta_types": {"a": "f32"}}"#,
            Clause::MetaTagClosedSet,
        ),
        (r#"{"blocks": {}, "box": 3}"#, Clause::BoxShape),
        (r#"{"blocks": {}, "box": {}}"#, Clause::BoxShape),
        (
            r#"{"blocks": {}, "box": {"vectors": [[1, 0, 0], [0, 1, 0]]}}"#,
            Clause::BoxShape,
        ),
        (
            r#"{"blocks": {}, "box": {"vectors": [[1, 0, 0], [0, 1, 0], [0, 0, null]]}}"#,
            Clause::BoxShape,
        ),
        (
            r#"{"blocks": {}, "box": {"vectors": [[1,0,0],[0,1,0],[0,0,1]], "boundary": [true, 1, true]}}"#,
            Clause::BoxShape,
        ),
        (
            r#"{"blocks": {}, "box": {"vectors": [[1,0,0],[0,1,0],[0,0,1]], "origin": [0, 0]}}"#,
            Clause::BoxShape,
        ),
        (
            r#"{"blocks": {}, "box": {"vectors": [[1,0,0],[0,1,0],[0,0,1]], "cell_defined": 1}}"#,
            Clause::BoxShape,
        ),
        (
            r#"{"blocks": {}, "box": {"vectors": [[1,0,0],[0,1,0],[0,0,1]], "boundary": [true, false, false], "cell_defined": false}}"#,
            Clause::BoxUndefinedBoundary,
        ),
    ];
    for (h, clause) in cases {
        assert_eq!(refused(&value_of(h, &[])), *clause, "{h}");
    }
    // Accepted forms: a big exact integer step, defaults of the box, an
    // undefined cell's stored vectors ignored, meta normalized to canonical.
    let v = value_of(
        r#"{"blocks": {}, "step": -9223372036854775808, "time": "Infinity", "meta": {"u": 18446744073709551615, "v": [1, "NaN", 2]}, "meta_types": {"u": "u64", "v": "f64x3"}, "box": {"vectors": [[2,0,0],[0,2,0],[0,0,2]], "cell_defined": false, "boundary": [false, false, false]}}"#,
        &[],
    );
    let f = decode(&v).unwrap();
    assert_eq!(f.info.step, Some(i64::MIN));
    assert_eq!(f.info.time, Some(f64::INFINITY));
    assert_eq!(f.info.meta["u"], json!("18446744073709551615"));
    assert_eq!(f.info.meta["v"], json!([1.0, "NaN", 2.0]));
    assert_eq!(f.info.cell.as_deref(), Some(&Cell::UNDEFINED));
    let v = value_of(
        r#"{"blocks": {}, "box": {"vectors": [[2,0,0],[0,2,0],[0,0,2]]}}"#,
        &[],
    );
    let f = decode(&v).unwrap();
    let c = f.info.cell.unwrap();
    assert_eq!(
        (c.origin, c.boundary, c.defined),
        ([0.0; 3], [true; 3], true)
    );
    // An undefined cell keeps its origin, and one whose boundary another
    // writer omitted is periodic on no axis (frame.md, "An undefined cell").
    let v = value_of(
        r#"{"blocks": {}, "box": {"vectors": [[0,0,0],[0,0,0],[0,0,0]], "origin": [1.5, -2, 0.25], "cell_defined": false}}"#,
        &[],
    );
    let c = decode(&v).unwrap().info.cell.unwrap();
    assert_eq!(
        *c,
        Cell {
            origin: [1.5, -2.0, 0.25],
            ..Cell::UNDEFINED
        }
    );
}

fn typical_frame() -> (BTreeMap<String, Block>, FrameInfo) {
    let mut rng = Rng(7);
    let mut block = Block {
        count: 30,
        ..Block::default()
    };
    for name in ["x", "y", "z", "fx", "fy", "fz"] {
        let v = (0..30).map(|_| (rng.next() as i64 as f64) / 1e18).collect();
        block
            .columns
            .insert(name.into(), Column::new(vec![30], ColumnData::F64(v)));
    }
    let mut meta = Document::new();
    meta.insert("pe".into(), json!(-503415.87));
    (
        BTreeMap::from([("atoms".to_string(), block)]),
        FrameInfo {
            meta,
            step: Some(1234),
            ..FrameInfo::default()
        },
    )
}

#[test]
fn every_truncation_is_refused() {
    let (blocks, info) = typical_frame();
    let mut value = Vec::new();
    encode(&blocks, &info, false, &mut value);
    for len in 0..value.len() {
        assert!(
            decode(&value[..len]).is_err(),
            "accepted a truncation to {len} of {}",
            value.len()
        );
    }
    // A frame of every dtype: no truncation panics; one that decodes has only
    // lost the zero padding after the last buffer.
    let mut rng = Rng(99);
    let mut block = Block {
        count: 5,
        ..Block::default()
    };
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        block.columns.insert(
            format!("c{i:02}"),
            column(dtype, 5, &[2], i % 2 == 0, &mut rng),
        );
    }
    let info = &frame_info_variants()[2];
    let value = round_trip(&BTreeMap::from([("b".to_string(), block)]), info, true);
    let last = value.iter().rposition(|&b| b != 0).unwrap();
    for len in 0..value.len() {
        if decode(&value[..len]).is_ok() {
            assert!(len > last, "accepted a truncation to {len}");
        }
    }
    // Every single-byte corruption: no panic.
    for at in 0..value.len() {
        for byte in [0u8, 1, b'"', b'9', 0xFF] {
            let mut v = value.clone();
            v[at] = byte;
            let _ = decode(&v).map(|f| f.to_blocks());
        }
    }
}

#[test]
fn random_corruptions_never_panic() {
    let mut rng = Rng(2024);
    let mut block = Block {
        count: 4,
        ..Block::default()
    };
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        block.columns.insert(
            format!("c{i:02}"),
            column(dtype, 4, &[], i % 3 == 0, &mut rng),
        );
    }
    let value = round_trip(
        &BTreeMap::from([("b".to_string(), block)]),
        &frame_info_variants()[2],
        true,
    );
    let mut accepted = 0;
    for _ in 0..20_000 {
        let mut v = value.clone();
        for _ in 0..=rng.below(4) {
            let at = rng.below(v.len() as u64) as usize;
            v[at] = match rng.below(4) {
                0 => rng.next() as u8,
                1 => b"0123456789"[rng.below(10) as usize],
                2 => b"{}[]\":,-"[rng.below(8) as usize],
                _ => v[at] ^ 1,
            };
        }
        if let Ok(f) = decode(&v) {
            accepted += 1;
            for block in f.blocks.values() {
                for c in block.columns.values() {
                    let _ = c.to_column();
                    let _ = (c.f64_view(), c.u64_view());
                }
            }
        }
    }
    assert!(accepted < 20_000);
}

/// Best ns per call over `batches` batches of `per` calls (the minimum is
/// the least disturbed by other load on the machine).
fn best_ns(batches: usize, per: usize, mut f: impl FnMut() -> f64) -> (f64, f64) {
    let mut best = f64::INFINITY;
    let mut sum = 0.0;
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..per {
            sum += f();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / per as f64);
    }
    (best, sum)
}

/// Prints encode / decode speed of a typical 30-atom frame (run with
/// `--release -- --nocapture`).
#[test]
fn speed_typical_frame() {
    let (blocks, info) = typical_frame();
    let mut out = Vec::new();
    encode(&blocks, &info, false, &mut out);
    let value = out.clone();
    // FRAME_BYTES_SPEED_CALLS overrides the calls per batch (e.g. 1 under callgrind).
    let per_env = std::env::var("FRAME_BYTES_SPEED_CALLS")
        .ok()
        .and_then(|s| s.parse().ok());
    let (batches, per) = match per_env {
        Some(per) => (1, per),
        None if cfg!(debug_assertions) => (2, 500),
        None => (40, 10_000),
    };
    let (enc, _) = best_ns(batches, per, || {
        encode(std::hint::black_box(&blocks), &info, false, &mut out);
        out.len() as f64
    });
    let (dec, _) = best_ns(batches, per, || {
        let f = decode(std::hint::black_box(&value)).unwrap();
        f.blocks["atoms"].columns.len() as f64
    });
    let (buf, start) = placed(&value, 0);
    let aligned = &buf[start..start + value.len()];
    let (view, _) = best_ns(batches, per, || {
        let f = decode(std::hint::black_box(aligned)).unwrap();
        f.blocks["atoms"]
            .columns
            .values()
            .map(|c| c.f64_view().unwrap()[29])
            .sum()
    });
    let (copy, _) = best_ns(batches, per, || {
        let f = decode(std::hint::black_box(&value)).unwrap();
        f.blocks["atoms"]
            .columns
            .values()
            .map(|c| c.to_column().unwrap().data.len() as f64)
            .sum()
    });
    // Baseline: the same header parsed into a generic `serde_json::Value` tree.
    let (payload, _) = header_of(&value);
    let header = &value[8..8 + u32::from_le_bytes(value[4..8].try_into().unwrap()) as usize];
    let (tree, _) = best_ns(batches, per, || {
        let v: Value = serde_json::from_slice(std::hint::black_box(header)).unwrap();
        v.as_object().map_or(0, |o| o.len()) as f64
    });
    println!(
        "typical 30-atom frame: {} bytes (header {} bytes, payload from {payload}); best of {batches}x{per}: \
         encode {enc:.0} ns/frame, decode {dec:.0} ns/frame, decode + 6 f64 views {view:.0} ns/frame, \
         decode + 6 to_column {copy:.0} ns/frame; baseline serde_json::Value parse of the header {tree:.0} ns",
        value.len(),
        header.len()
    );
}

/// Decodes the typical frame `FRAME_BYTES_DECODE_CALLS` times (default 1000)
/// and nothing else: run it under `valgrind --tool=callgrind` with two call
/// counts and divide the difference of the totals by the difference of the
/// counts for the instructions of one decode (drop included).
#[test]
fn decode_loop_typical_frame() {
    let (blocks, info) = typical_frame();
    let mut value = Vec::new();
    encode(&blocks, &info, false, &mut value);
    let calls: usize = std::env::var("FRAME_BYTES_DECODE_CALLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let mut rows = 0;
    for _ in 0..calls {
        let f = decode(std::hint::black_box(&value)).unwrap();
        rows += f.blocks["atoms"].count;
    }
    assert_eq!(rows, 30 * calls as u64);
}

// ---------------------------------------------------------------------------
// The fast header scanner against the serde path
// ---------------------------------------------------------------------------

/// `decode` gives exactly what the serde path gives (the same frame, or the
/// same refusal: clause, place and detail), and the fast scanner alone, when
/// it answers, gives the serde path's frame. Returns whether the scanner answered.
fn same_as_reference(v: &[u8]) -> bool {
    let want = decode_reference(v);
    assert_same_outcome("decode", &decode(v), &want, v);
    let Some(fast) = decode_fast(v) else {
        return false;
    };
    match &want {
        Ok(b) => assert_eq!(format!("{fast:?}"), format!("{b:?}")),
        Err(e) => panic!(
            "the fast scanner accepted what the serde path refuses ({e}): {:?}",
            String::from_utf8_lossy(v)
        ),
    }
    true
}

/// After `prev`, `decode_update` gives for `v` exactly what the serde path
/// gives for `v` alone (a `SameBlocks` answer is compared after rebasing
/// `prev`'s blocks onto `v`'s payload). Returns whether it answered
/// `SameBlocks`.
fn same_after(prev: &[u8], v: &[u8]) -> bool {
    let mut memo = BlocksMemo::default();
    let Ok(Update::Full {
        frame: prev_frame,
        payload: prev_payload,
    }) = decode_update(prev, &mut memo)
    else {
        return false;
    };
    // The previous meta document, handed back as a reader does: `v`'s meta
    // may be read into its map.
    memo.recycle(prev_frame.info.meta.clone());
    let mut same = false;
    let got = decode_update(v, &mut memo).map(|update| match update {
        Update::Full { frame, .. } => frame,
        Update::SameBlocks { payload, info } => {
            same = true;
            let mut blocks = prev_frame.blocks.clone();
            for block in blocks.values_mut() {
                block
                    .rebase(prev_payload, payload)
                    .expect("a same-length payload takes every buffer");
            }
            FrameRef { blocks, info }
        }
    });
    assert_same_outcome("decode_update", &got, &decode_reference(v), v);
    same
}

/// `got` (from the decoder called `what`) is the serde path's `want` on `v`:
/// the same frame, or the same refusal (clause, place and detail).
fn assert_same_outcome(
    what: &str,
    got: &molrec::Result<FrameRef<'_>>,
    want: &molrec::Result<FrameRef<'_>>,
    v: &[u8],
) {
    match (got, want) {
        (Ok(a), Ok(b)) => assert_eq!(format!("{a:?}"), format!("{b:?}"), "{v:?}"),
        (Err(a), Err(b)) => assert_eq!(
            (a.clause(), a.to_string()),
            (b.clause(), b.to_string()),
            "{v:?}"
        ),
        (a, b) => panic!(
            "{what} {:?} but the serde path {:?} on {:?}",
            a.as_ref().map(|_| ()).map_err(|e| e.to_string()),
            b.as_ref().map(|_| ()).map_err(|e| e.to_string()),
            String::from_utf8_lossy(v)
        ),
    }
}

#[test]
fn consecutive_updates_reuse_their_blocks() {
    let (blocks, mut info) = typical_frame();
    let mut first = Vec::new();
    encode(&blocks, &info, false, &mut first);
    let mut memo = BlocksMemo::default();
    assert!(matches!(
        decode_update(&first, &mut memo),
        Ok(Update::Full { .. })
    ));
    // Later steps: another step number and per-step value, other payload
    // bytes, the same blocks text.
    let mut next = Vec::new();
    for step in 1..50i64 {
        info.step = Some(step);
        info.meta
            .insert("pe".into(), json!(-100.25 - step as f64 / 7.0));
        let mut later = blocks.clone();
        for c in later.get_mut("atoms").unwrap().columns.values_mut() {
            if let ColumnData::F64(v) = &mut c.data {
                v.iter_mut().for_each(|x| *x += step as f64);
            }
        }
        encode(&later, &info, false, &mut next);
        assert!(matches!(
            decode_update(&next, &mut memo),
            Ok(Update::SameBlocks { .. })
        ));
        assert!(same_after(&first, &next), "step {step}");
    }
    // Another atom count changes the blocks text: decoded in full.
    let mut other = blocks.clone();
    let atoms = other.get_mut("atoms").unwrap();
    atoms.count -= 1;
    for c in atoms.columns.values_mut() {
        c.shape[0] -= 1;
        if let ColumnData::F64(v) = &mut c.data {
            v.pop();
        }
    }
    encode(&other, &info, false, &mut next);
    assert!(!same_after(&first, &next));
    // A bool column or a mask reads payload bytes: never reused.
    let mut rng = Rng(3);
    let mut masked = blocks.clone();
    masked
        .get_mut("atoms")
        .unwrap()
        .columns
        .insert("flag".into(), column(DType::Bool, 30, &[], false, &mut rng));
    let mut value = Vec::new();
    encode(&masked, &info, false, &mut value);
    assert!(!same_after(&value, &value));
}

/// A value with its header text replaced (payload kept).
fn with_header(value: &[u8], header: &[u8]) -> Vec<u8> {
    let (payload, _) = header_of(value);
    frame_value(header, &value[payload..])
}

#[test]
fn fast_scanner_matches_serde_on_random_frames() {
    let mut rng = Rng(31337);
    let infos = frame_info_variants();
    let (mut fast, mut total) = (0, 0);
    for i in 0..3000 {
        let mut blocks = random_blocks(&mut rng);
        if rng.below(10) == 0 {
            // Names that need escapes: the scanner gives them to serde.
            let b = blocks.pop_first().map(|(_, b)| b).unwrap_or_default();
            blocks.insert("q\"\\\n".into(), b);
        }
        let mut value = Vec::new();
        encode(
            &blocks,
            &infos[i % infos.len()],
            rng.below(2) == 0,
            &mut value,
        );
        fast += usize::from(same_as_reference(&value));
        total += 1;
        // The same header pretty-printed (whitespace everywhere).
        let len = u32::from_le_bytes(value[4..8].try_into().unwrap()) as usize;
        let header: Value = serde_json::from_slice(&value[8..8 + len]).unwrap();
        let pretty = serde_json::to_vec_pretty(&header).unwrap();
        // serde_json::Value re-sorts keys: offsets stay valid, only order changes.
        fast += usize::from(same_as_reference(&with_header(&value, &pretty)));
        total += 1;
    }
    // Most frames take the fast path.
    assert!(fast * 10 > total * 8, "fast path on {fast} of {total}");
}

/// Typical values to mutate: the typical frame, a system-like frame with
/// meta types, a cell and precisions, and a frame of every dtype.
fn typical_values() -> Vec<Vec<u8>> {
    let (blocks, info) = typical_frame();
    let mut typical = Vec::new();
    encode(&blocks, &info, false, &mut typical);
    let mut rng = Rng(5);
    let mut block = Block {
        count: 3,
        ..Block::default()
    };
    for (i, dtype) in DType::ALL.into_iter().enumerate() {
        block.columns.insert(
            format!("c{i:02}"),
            column(dtype, 3, &[], i % 3 == 0, &mut rng),
        );
    }
    block.targets.insert("c00".into(), "b".into());
    block.attributes.insert("a".into(), json!([1, {"b": null}]));
    let mut all = Vec::new();
    encode(
        &BTreeMap::from([("b".to_string(), block)]),
        &frame_info_variants()[2],
        true,
        &mut all,
    );
    let mut system = Vec::new();
    let (mut blocks, _) = typical_frame();
    for c in blocks.get_mut("atoms").unwrap().columns.values_mut() {
        c.precision = Some(1e-3);
    }
    encode(&blocks, &frame_info_variants()[7], true, &mut system);
    vec![typical, all, system]
}

#[test]
fn fast_scanner_matches_serde_on_mutations() {
    let mut rng = Rng(77);
    for value in typical_values() {
        assert!(
            same_as_reference(&value),
            "the fast path takes a typical value"
        );
        // Every mutation is also decoded after the value itself, where
        // `decode_update` may reuse the value's blocks.
        let mut reused = 0usize;
        let mut same_as_reference = |v: &[u8]| {
            reused += usize::from(same_after(&value, v));
            same_as_reference(v)
        };
        let (payload, _) = header_of(&value);
        let len = u32::from_le_bytes(value[4..8].try_into().unwrap()) as usize;
        let header = value[8..8 + len].to_vec();
        // Every truncation of the value, and of the header text alone.
        for cut in 0..value.len() {
            same_as_reference(&value[..cut]);
        }
        for cut in 0..header.len() {
            same_as_reference(&with_header(&value, &header[..cut]));
        }
        // Every single-byte substitution over the prefix and the header.
        const BYTES: &[u8] = b" \t\n\"\\0159-+.eE{}[],:nulltrfa_xyz\x00\x1f\x7f\xc3\xff";
        for at in 0..payload.min(value.len()) {
            for &b in BYTES {
                if value[at] != b {
                    let mut v = value.clone();
                    v[at] = b;
                    same_as_reference(&v);
                }
            }
        }
        // Every deletion and duplication of one header byte.
        for at in 0..header.len() {
            let mut h = header.clone();
            h.remove(at);
            same_as_reference(&with_header(&value, &h));
            let mut h = header.clone();
            h.insert(at, header[at]);
            same_as_reference(&with_header(&value, &h));
        }
        // Random splices: a piece of the header copied over another place.
        for _ in 0..20_000 {
            let a = rng.below(header.len() as u64) as usize;
            let b = a + rng.below((header.len() - a) as u64 + 1) as usize;
            let at = rng.below(header.len() as u64 + 1) as usize;
            let mut h = header.clone();
            if rng.below(2) == 0 {
                let end = (at + rng.below(8) as usize).min(h.len());
                h.splice(at..end, header[a..b].iter().copied());
            } else {
                h.splice(at..at, header[a..b].iter().copied());
            }
            same_as_reference(&with_header(&value, &h));
        }
        // (Not the value with a bool column and masks: never reused.)
        assert!(
            reused > 200 || !same_after(&value, &value),
            "blocks reused on {reused} mutations"
        );
    }
}

#[test]
fn fast_scanner_matches_serde_on_hand_written_headers() {
    let col = r#"{"dtype": "f64", "shape": [2], "offset": 0}"#;
    let headers = [
        one_column(col, 2),
        one_column(r#"{"dtype": "f64", "shape": [2], "offset": 0, "extra": [1, {"a": "\u00e9"}]}"#, 2),
        one_column(r#"{"dtype": "f64", "shape": [2], "offset": 0, "dtype": "f64"}"#, 2),
        one_column(r#"{"dtype": "f\u0036\u0034", "shape": [2], "offset": 0}"#, 2),
        one_column(r#"{"dtype": "f64", "shape": [2.0], "offset": 0}"#, 2),
        one_column(r#"{"dtype": "f64", "shape": [2], "offset": 0e0}"#, 2),
        one_column(r#"{"dtype": "f64", "shape": [2], "offset": -0}"#, 2),
        one_column(r#"{"dtype": "f64", "shape": [02], "offset": 0}"#, 2),
        one_column(r#"{"dtype": "f64", "shape": [2], "offset": 0, "precision": 1}"#, 2),
        one_column(r#"{"dtype": "f64", "shape": [2], "offset": 0, "precision": -0}"#, 2),
        one_column(r#"{"dtype": "f64", "shape": [2], "offset": 0, "precision": 1e999}"#, 2),
        one_column(r#"{"dtype": "f64", "shape": [2], "offset": 0, "precision": null}"#, 2),
        one_column(r#"{"dtype": "string", "shape": [2], "values": ["a", "\"b\""]}"#, 2),
        one_column(r#"{"dtype": "string", "shape": [2], "values": ["a"]}"#, 2),
        one_column(r#"{"dtype": "u8", "shape": [2, 0], "offset": 0, "validity": 0}"#, 2),
        one_column(r#"{"dtype": "u8", "shape": [2], "offset": 0, "validity": 8}"#, 2),
        one_column(col, 3),
        r#"{"blocks": {}}"#.into(),
        r#" {"blocks": {}} "#.into(),
        r#"{"blocks": {}} x"#.into(),
        r#"{"blocks": {}, "blocks": {}}"#.into(),
        r#"{"blocks": {}, "step": -0}"#.into(),
        r#"{"blocks": {}, "step": -9223372036854775808}"#.into(),
        r#"{"blocks": {}, "step": -9223372036854775809}"#.into(),
        r#"{"blocks": {}, "step": 18446744073709551615}"#.into(),
        r#"{"blocks": {}, "step": 1.5}"#.into(),
        r#"{"blocks": {}, "step": "12"}"#.into(),
        r#"{"blocks": {}, "time": 1e-7, "box": {"vectors": [[1,0,0],[0,1,0],[0,0,1]]}}"#.into(),
        r#"{"blocks": {}, "meta": {"a": 1, "a": 2}, "meta_types": {"a": "i64"}}"#.into(),
        r#"{"blocks": {}, "meta": {"a": "x"}, "meta_types": {"a": "i64"}}"#.into(),
        r#"{"blocks": {}, "meta": null}"#.into(),
        r#"{"blocks": {"a": {"count": 0, "columns": {}, "structural_shape": null, "targets": {}, "attributes": {}}}}"#.into(),
        r#"{"blocks": {"a": {"count": 0, "columns": {}, "structural_shape": nul}}}"#.into(),
        r#"{"blocks": {"a": {"count": 0, "columns": {}, "structural_shape": nullx}}}"#.into(),
        r#"{"blocks": {"a": {"count": 0, "columns": {}}, "a": {"count": 0, "columns": {}}}}"#.into(),
        format!(r#"{{"blocks": {{}}, "meta": {{"a": {}1{}}}}}"#, "[".repeat(70), "]".repeat(70)),
        format!(r#"{{"blocks": {{}}, "meta": {{"a": {}1{}}}}}"#, "[".repeat(126), "]".repeat(126)),
        format!(r#"{{"blocks": {{}}, "x": {}1{}}}"#, "[".repeat(127), "]".repeat(127)),
    ];
    for h in &headers {
        same_as_reference(&value_of(h, &[1u8; 16]));
    }
    // Numbers in a simple meta: the scanner's reals are serde_json's.
    let mut rng = Rng(11);
    let fixed = [
        "-0",
        "0",
        "-0.0",
        "0e0",
        "1E+2",
        "1e-400",
        "-1e-400",
        "4.9e-324",
        "2.4703282292062328e-324",
        "2.2250738585072011e-308",
        "1.7976931348623157e308",
        "1.7976931348623158e308",
        "1.7976931348623159e308",
        "1e309",
        "9007199254740993",
        "9007199254740993.0",
        "18446744073709551615",
        "18446744073709551616",
        "-9223372036854775808",
        "-9223372036854775809",
        "123456789012345678901234567890",
        "0.1",
        "1.",
        ".5",
        "01",
        "1e",
        "-",
        "+1",
        "1.5e3.2",
        "0.30000000000000004",
        "1_0",
    ];
    let mut numbers: Vec<String> = fixed.iter().map(|s| s.to_string()).collect();
    for _ in 0..20_000 {
        let x = f64::from_bits(rng.next());
        numbers.push(match rng.below(4) {
            0 => format!("{x:e}"),
            1 => format!("{x:.3e}"),
            2 => format!(
                "{:.*}",
                rng.below(25) as usize,
                (rng.next() as i64 as f64) / 1e9
            ),
            _ => format!("{x}"),
        });
    }
    for n in &numbers {
        let h = format!(r#"{{"blocks": {{}}, "meta": {{"pe": {n}, "s": "x"}}}}"#);
        same_as_reference(&value_of(&h, &[]));
    }
    assert!(same_as_reference(&value_of(&headers[0], &[0u8; 16])));
}
