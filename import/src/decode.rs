//! One ASE-LMDB row: zlib inflated (bounded), then ASE's JSON encoding
//! (`ase.io.jsonio.encode`) read into a [`Row`].
//!
//! ASE writes rows with Python's `json`, which writes non-finite floats as
//! the bare tokens `NaN`, `Infinity` and `-Infinity` (not JSON). A row that
//! holds one is rewritten first ([`sanitize`]): each token outside a string
//! becomes a string with a NUL prefix that no JSON text from ASE holds
//! (`"\u0000NaN"`), which the array and number readers take as the float
//! and the meta documents write as typed JSON's `"NaN"` (counted).
//!
//! Arrays come as `{"__ndarray__": [shape, dtype, flat]}` (what ASE writes)
//! or as nested lists (what `numpyfy` also reads). Every size is bounded by
//! the text: a flat list is read element by element, and its length must
//! equal the product of the shape (checked multiplication).

use super::*;
use flate2::{Decompress, FlushDecompress, Status};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use std::fmt;

/// The NUL-prefixed strings [`sanitize`] writes for non-finite tokens.
pub const NAN_MARK: &str = "\u{0}NaN";
/// See [`NAN_MARK`].
pub const INF_MARK: &str = "\u{0}Infinity";
/// See [`NAN_MARK`].
pub const NEG_INF_MARK: &str = "\u{0}-Infinity";

/// The float a marker string stands for.
pub fn marked_float(s: &str) -> Option<f64> {
    match s {
        NAN_MARK => Some(f64::NAN),
        INF_MARK => Some(f64::INFINITY),
        NEG_INF_MARK => Some(f64::NEG_INFINITY),
        _ => None,
    }
}

/// Inflates one zlib stream into `out` (cleared), refusing more than
/// `limit` bytes of output, a truncated stream and bytes after its end.
pub fn inflate(
    d: &mut Decompress,
    input: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
) -> Result<(), String> {
    d.reset(true);
    out.clear();
    loop {
        if out.capacity() - out.len() < 4096 {
            let want = out
                .capacity()
                .max(8192)
                .min(limit + 1 - out.len().min(limit));
            out.reserve(want.max(1));
        }
        let consumed = d.total_in() as usize;
        let produced = out.len();
        let status = d
            .decompress_vec(&input[consumed..], out, FlushDecompress::Finish)
            .map_err(|e| format!("not a zlib stream ({e})"))?;
        if out.len() > limit {
            return Err(format!(
                "the row inflates past {limit} bytes (--max-row-bytes)"
            ));
        }
        match status {
            Status::StreamEnd => {
                if (d.total_in() as usize) < input.len() {
                    return Err(format!(
                        "{} bytes after the end of the zlib stream",
                        input.len() - d.total_in() as usize
                    ));
                }
                return Ok(());
            }
            _ if d.total_in() as usize == consumed && out.len() == produced => {
                return Err(format!(
                    "truncated zlib stream (ends after {} bytes, {} inflated)",
                    input.len(),
                    out.len()
                ))
            }
            _ => {}
        }
    }
}

/// Rewrites Python's non-finite tokens outside strings as marker strings;
/// `None` when the text holds none (the common case, found without a copy).
pub fn sanitize(text: &[u8]) -> Option<Vec<u8>> {
    let finder = |needle: &[u8]| memchr::memmem::find(text, needle).is_some();
    if !finder(b"NaN") && !finder(b"Infinity") {
        return None;
    }
    let mut out = Vec::with_capacity(text.len() + 64);
    let (mut i, mut in_string) = (0, false);
    while i < text.len() {
        let b = text[i];
        if in_string {
            out.push(b);
            if b == b'\\' && i + 1 < text.len() {
                out.push(text[i + 1]);
                i += 2;
                continue;
            }
            in_string = b != b'"';
            i += 1;
            continue;
        }
        let rest = &text[i..];
        let token: Option<(&[u8], &str)> = if rest.starts_with(b"NaN") {
            Some((b"NaN", "\"\\u0000NaN\""))
        } else if rest.starts_with(b"Infinity") {
            Some((b"Infinity", "\"\\u0000Infinity\""))
        } else if rest.starts_with(b"-Infinity") {
            Some((b"-Infinity", "\"\\u0000-Infinity\""))
        } else {
            None
        };
        match token {
            Some((t, replacement)) => {
                out.extend_from_slice(replacement.as_bytes());
                i += t.len();
            }
            None => {
                in_string = b == b'"';
                out.push(b);
                i += 1;
            }
        }
    }
    Some(out)
}

/// Flat values of an array, by what its dtype holds.
#[derive(Clone, Debug, PartialEq)]
pub enum Flat {
    /// `float64`, or `float32` (each value rounded to f32, as numpy
    /// stores it, then widened exactly).
    F64(Vec<f64>),
    /// Any integer dtype (`uint64` within i64).
    I64(Vec<i64>),
    /// `bool`.
    Bool(Vec<bool>),
    /// Any other dtype (strings, complex, objects): kept as JSON.
    Other(String, Value),
}

/// An array as ASE encodes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Arr {
    /// numpy's shape.
    pub shape: Vec<u64>,
    /// The flat, row-major values.
    pub data: Flat,
}

impl Arr {
    /// The values as f64 (integers converted as Python's `float` does).
    pub fn f64s(&self) -> Option<Vec<f64>> {
        match &self.data {
            Flat::F64(v) => Some(v.clone()),
            Flat::I64(v) => Some(v.iter().map(|&x| x as f64).collect()),
            _ => None,
        }
    }

    /// Element count.
    pub fn len(&self) -> usize {
        match &self.data {
            Flat::F64(v) => v.len(),
            Flat::I64(v) => v.len(),
            Flat::Bool(v) => v.len(),
            Flat::Other(_, _) => 0,
        }
    }

    /// Whether it has no elements (of a kind it reads).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A float as typed JSON (`"NaN"`, `"Infinity"`, `"-Infinity"` for the
/// non-finite ones).
pub fn f64_json(x: f64) -> Value {
    molrec::typed_json::f64_to_json(x)
}

/// A row of an ASE-LMDB shard as ASE writes it (`LMDBDatabase._write`).
#[derive(Clone, Debug, Default)]
pub struct Row {
    /// Atomic numbers (required).
    pub numbers: Option<Arr>,
    /// Positions, `[n, 3]` (required).
    pub positions: Option<Arr>,
    /// The cell, `[3, 3]`, lattice vectors as rows.
    pub cell: Option<Arr>,
    /// Periodicity, `[3]`.
    pub pbc: Option<Arr>,
    /// Per-atom arrays of the `Atoms` object and of its calculator, by
    /// ASE's key (`initial_charges`, `forces`, ...).
    pub arrays: BTreeMap<String, Arr>,
    /// Scalar calculator results by ASE's key (`energy`, `free_energy`, `magmom`).
    pub scalars: BTreeMap<String, f64>,
    /// Vector calculator results (`stress`, `dipole`).
    pub vectors: BTreeMap<String, Arr>,
    /// `constraints` as written (a list of `{name, kwargs}`).
    pub constraints: Option<Value>,
    /// `key_value_pairs`.
    pub key_value_pairs: Map<String, Value>,
    /// `data`.
    pub data: Option<Value>,
    /// Everything else (`unique_id`, `ctime`, `mtime`, `user`,
    /// `calculator`, `calculator_parameters`, unknown keys), as JSON.
    pub other: Map<String, Value>,
}

/// The per-atom arrays a row may hold (besides `numbers` and `positions`).
pub const ATOM_ARRAYS: &[&str] = &[
    "initial_charges",
    "initial_magmoms",
    "masses",
    "tags",
    "momenta",
    "forces",
    "charges",
    "magmoms",
    "energies",
];
/// Scalar calculator results.
pub const SCALARS: &[&str] = &["energy", "free_energy", "magmom"];
/// Vector calculator results.
pub const VECTORS: &[&str] = &["stress", "dipole"];

/// Decodes the JSON text of one row. Errors say which key and what is wrong.
pub fn decode_row(text: &[u8]) -> Result<Row, String> {
    let sanitized = sanitize(text);
    let text = sanitized.as_deref().unwrap_or(text);
    let mut de = serde_json::Deserializer::from_slice(text);
    let row = RowSeed.deserialize(&mut de).map_err(|e| describe(&e))?;
    de.end().map_err(|e| format!("not JSON: {e}"))?;
    Ok(row)
}

/// The message of a decoding error: our own (a key and what is wrong),
/// serde's type errors, or JSON syntax (also when met inside a key's
/// value, which our messages prefix with the key).
fn describe(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let text = match text.rfind(" at line ") {
        Some(at) if e.line() > 0 => &text[..at],
        _ => &text,
    };
    let syntax = [
        "EOF while parsing",
        "expected value",
        "expected `,`",
        "key must be a string",
        "invalid number",
        "control character",
    ];
    if !e.is_data() || syntax.iter().any(|s| text.contains(s)) {
        format!("not JSON: {text} (line {} column {})", e.line(), e.column())
    } else {
        text.to_string()
    }
}

/// An object key, borrowed from the text when it holds no escape.
struct Key<'de>(std::borrow::Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a key")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v.to_string())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key(std::borrow::Cow::Owned(v)))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

struct RowSeed;

impl<'de> DeserializeSeed<'de> for RowSeed {
    type Value = Row;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Row, D::Error> {
        d.deserialize_any(RowVisitor)
    }
}

struct RowVisitor;

impl<'de> Visitor<'de> for RowVisitor {
    type Value = Row;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an ASE row (a JSON object)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Row, A::Error> {
        let mut row = Row::default();
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let key = key.as_ref();
            let at = |e: A::Error| de::Error::custom(format!("`{key}`: {e}"));
            match key {
                "numbers" => row.numbers = Some(map.next_value_seed(ArrSeed).map_err(at)?),
                "positions" => row.positions = Some(map.next_value_seed(ArrSeed).map_err(at)?),
                "cell" => row.cell = Some(map.next_value_seed(ArrSeed).map_err(at)?),
                "pbc" => row.pbc = Some(map.next_value_seed(ArrSeed).map_err(at)?),
                k if ATOM_ARRAYS.contains(&k) => {
                    let a = map.next_value_seed(ArrSeed).map_err(at)?;
                    row.arrays.insert(k.to_string(), a);
                }
                k if VECTORS.contains(&k) => {
                    let a = map.next_value_seed(ArrSeed).map_err(at)?;
                    row.vectors.insert(k.to_string(), a);
                }
                k if SCALARS.contains(&k) => {
                    let x = map.next_value_seed(ScalarSeed).map_err(at)?;
                    row.scalars.insert(k.to_string(), x);
                }
                "constraints" => row.constraints = Some(map.next_value()?),
                "key_value_pairs" => {
                    row.key_value_pairs = match map.next_value()? {
                        Value::Object(m) => m,
                        other => {
                            return Err(de::Error::custom(format!(
                                "`key_value_pairs`: expected an object, got {}",
                                molrec::typed_json::brief(&other)
                            )))
                        }
                    }
                }
                "data" => row.data = Some(map.next_value()?),
                "id" => {
                    // Not written by ASE (the key is the id); ignored as ASE
                    // overwrites it on reading.
                    map.next_value::<IgnoredAny>()?;
                }
                k => {
                    let v: Value = map.next_value()?;
                    row.other.insert(k.to_string(), v);
                }
            }
        }
        Ok(row)
    }
}

/// A scalar float: a number, a non-finite marker, or an array of one value.
struct ScalarSeed;

impl<'de> DeserializeSeed<'de> for ScalarSeed {
    type Value = f64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<f64, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

/// What a scalar float is besides an array of one value: an element
/// ([`FlatFloat`]).
impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        FlatFloat.visit_f64(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        FlatFloat.visit_i64(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        FlatFloat.visit_u64(v)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        FlatFloat.visit_str(v)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<f64, A::Error> {
        let arr = ArrVisitor.visit_map(map)?;
        match arr.f64s().as_deref() {
            Some([x]) => Ok(*x),
            _ => Err(de::Error::custom("expected a number, got an array")),
        }
    }
}

/// An array: `{"__ndarray__": [shape, dtype, flat]}` or nested lists.
pub struct ArrSeed;

impl<'de> DeserializeSeed<'de> for ArrSeed {
    type Value = Arr;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Arr, D::Error> {
        d.deserialize_any(ArrVisitor)
    }
}

struct ArrVisitor;

impl<'de> Visitor<'de> for ArrVisitor {
    type Value = Arr;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array ({\"__ndarray__\": [shape, dtype, values]} or nested lists)")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Arr, A::Error> {
        let mut arr = None;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            if key != "__ndarray__" || arr.is_some() {
                return Err(de::Error::custom(format!(
                    "expected {{\"__ndarray__\": [shape, dtype, values]}}, found the key {key:?}"
                )));
            }
            arr = Some(map.next_value_seed(NdarraySeed)?);
        }
        arr.ok_or_else(|| de::Error::custom("expected {\"__ndarray__\": ...}, got {}"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Arr, A::Error> {
        let value = Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        nested_list(&value).map_err(de::Error::custom)
    }
}

/// A nested list as numpy's `array` makes it (rectangular; bool, int or
/// float elements).
fn nested_list(value: &Value) -> Result<Arr, String> {
    let mut shape = Vec::new();
    let mut v = value;
    while let Value::Array(items) = v {
        shape.push(items.len() as u64);
        match items.first() {
            Some(first) => v = first,
            None => break,
        }
    }
    let mut leaves = Vec::new();
    fn walk<'a>(
        v: &'a Value,
        depth: usize,
        shape: &[u64],
        out: &mut Vec<&'a Value>,
    ) -> Result<(), String> {
        match (v, shape.get(depth)) {
            (Value::Array(items), Some(&n)) if items.len() as u64 == n => items
                .iter()
                .try_for_each(|i| walk(i, depth + 1, shape, out)),
            (Value::Array(_), _) => Err("a ragged nested list".into()),
            (leaf, None) => {
                out.push(leaf);
                Ok(())
            }
            (_, Some(_)) => Err("a ragged nested list".into()),
        }
    }
    walk(value, 0, &shape, &mut leaves)?;
    let data = if leaves.iter().all(|l| l.is_boolean()) && !leaves.is_empty() {
        Flat::Bool(leaves.iter().map(|l| l.as_bool() == Some(true)).collect())
    } else if leaves.iter().all(|l| l.is_i64()) {
        Flat::I64(leaves.iter().filter_map(|l| l.as_i64()).collect())
    } else {
        let mut out = Vec::with_capacity(leaves.len());
        for l in &leaves {
            let x = match l {
                Value::Number(n) => n.as_f64(),
                Value::String(s) => marked_float(s),
                _ => None,
            };
            out.push(x.ok_or_else(|| {
                format!(
                    "a nested list holding {}, not numbers",
                    molrec::typed_json::brief(l)
                )
            })?);
        }
        Flat::F64(out)
    };
    Ok(Arr { shape, data })
}

struct NdarraySeed;

impl<'de> DeserializeSeed<'de> for NdarraySeed {
    type Value = Arr;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Arr, D::Error> {
        d.deserialize_seq(NdarrayVisitor)
    }
}

struct NdarrayVisitor;

impl<'de> Visitor<'de> for NdarrayVisitor {
    type Value = Arr;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("[shape, dtype, values]")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Arr, A::Error> {
        let shape: Vec<u64> = seq
            .next_element()?
            .ok_or_else(|| de::Error::custom("__ndarray__ lacks its shape"))?;
        let Key(dtype) = seq
            .next_element::<Key<'de>>()?
            .ok_or_else(|| de::Error::custom("__ndarray__ lacks its dtype"))?;
        let kind = Kind::of(&dtype);
        let data = seq
            .next_element_seed(FlatSeed { kind })?
            .ok_or_else(|| de::Error::custom("__ndarray__ lacks its values"))?;
        if seq.next_element::<IgnoredAny>()?.is_some() {
            return Err(de::Error::custom("__ndarray__ has more than 3 entries"));
        }
        let data = match data {
            Flat::Other(_, v) => Flat::Other(dtype.to_string(), v),
            d => d,
        };
        let arr = Arr { shape, data };
        if !matches!(arr.data, Flat::Other(..)) {
            let want = arr
                .shape
                .iter()
                .try_fold(1u64, |acc, &n| acc.checked_mul(n))
                .ok_or_else(|| de::Error::custom("__ndarray__ shape overflows"))?;
            if want != arr.len() as u64 {
                return Err(de::Error::custom(format!(
                    "__ndarray__ shape {:?} holds {want} values, the list {}",
                    arr.shape,
                    arr.len()
                )));
            }
        }
        Ok(arr)
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    F64,
    F32,
    Int,
    Bool,
    Other,
}

impl Kind {
    fn of(dtype: &str) -> Kind {
        match dtype.trim_start_matches(['<', '>', '=', '|']) {
            "float64" | "f8" | "double" => Kind::F64,
            "float32" | "f4" => Kind::F32,
            "int8" | "int16" | "int32" | "int64" | "uint8" | "uint16" | "uint32" | "uint64"
            | "i1" | "i2" | "i4" | "i8" | "u1" | "u2" | "u4" | "u8" => Kind::Int,
            "bool" | "b1" => Kind::Bool,
            _ => Kind::Other,
        }
    }
}

struct FlatSeed {
    kind: Kind,
}

impl<'de> DeserializeSeed<'de> for FlatSeed {
    type Value = Flat;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Flat, D::Error> {
        if self.kind == Kind::Other {
            return Ok(Flat::Other(String::new(), Value::deserialize(d)?));
        }
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for FlatSeed {
    type Value = Flat;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a flat list of values")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Flat, A::Error> {
        // Bounded by the text: `size_hint` is not trusted.
        let cap = seq.size_hint().unwrap_or(0).min(1 << 16);
        match self.kind {
            Kind::F64 | Kind::F32 => {
                let mut out = Vec::with_capacity(cap);
                while let Some(x) = seq.next_element_seed(ScalarSeedFlat)? {
                    out.push(if self.kind == Kind::F32 {
                        x as f32 as f64
                    } else {
                        x
                    });
                }
                Ok(Flat::F64(out))
            }
            Kind::Int => {
                let mut out = Vec::with_capacity(cap);
                while let Some(x) = seq.next_element::<i64>()? {
                    out.push(x);
                }
                Ok(Flat::I64(out))
            }
            Kind::Bool => {
                let mut out = Vec::with_capacity(cap);
                while let Some(x) = seq.next_element::<bool>()? {
                    out.push(x);
                }
                Ok(Flat::Bool(out))
            }
            Kind::Other => unreachable!("handled in deserialize"),
        }
    }
}

/// A float element: a number or a non-finite marker (not an array).
struct ScalarSeedFlat;

impl<'de> DeserializeSeed<'de> for ScalarSeedFlat {
    type Value = f64;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<f64, D::Error> {
        d.deserialize_any(FlatFloat)
    }
}

struct FlatFloat;

impl<'de> Visitor<'de> for FlatFloat {
    type Value = f64;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
        Ok(v)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
        Ok(v as f64)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<f64, E> {
        marked_float(v).ok_or_else(|| E::custom(format!("expected a number, got the string {v:?}")))
    }
}

/// A row's `key_value_pairs` and the scalars of its `data`.
pub type Keys = (Map<String, Value>, Map<String, Value>);

/// What a group-by pass needs of a row: its `key_value_pairs` and the
/// scalars of its `data`, the rest skipped without being kept.
pub fn decode_keys(text: &[u8]) -> Result<Keys, String> {
    let sanitized = sanitize(text);
    let text = sanitized.as_deref().unwrap_or(text);
    let mut de = serde_json::Deserializer::from_slice(text);
    let keys = KeysVisitor.deserialize(&mut de).map_err(|e| describe(&e))?;
    de.end().map_err(|e| format!("not JSON: {e}"))?;
    Ok(keys)
}

struct KeysVisitor;

impl<'de> DeserializeSeed<'de> for KeysVisitor {
    type Value = Keys;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for KeysVisitor {
    type Value = Keys;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an ASE row (a JSON object)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut kvp, mut data) = (Map::new(), Map::new());
        let mut numbers = false;
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            match key.as_ref() {
                "key_value_pairs" => match map.next_value()? {
                    Value::Object(m) => kvp = m,
                    _ => return Err(de::Error::custom("`key_value_pairs`: expected an object")),
                },
                "data" => {
                    if let Value::Object(m) = map.next_value()? {
                        data = m.into_iter().filter(|(_, v)| is_scalar(v)).collect();
                    }
                }
                "numbers" => {
                    numbers = true;
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        if !numbers {
            return Err(de::Error::custom("not an ASE row: no `numbers`"));
        }
        Ok((kvp, data))
    }
}

/// A JSON scalar (what a key-value pair or an index column can hold).
pub fn is_scalar(v: &Value) -> bool {
    matches!(v, Value::Bool(_) | Value::Number(_) | Value::String(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_tokens_outside_strings_become_markers() {
        let text = br#"{"a": NaN, "b": [1.0, -Infinity, Infinity], "s": "NaN \" Infinity"}"#;
        let out = String::from_utf8(sanitize(text).unwrap()).unwrap();
        assert_eq!(
            out,
            r#"{"a": "\u0000NaN", "b": [1.0, "\u0000-Infinity", "\u0000Infinity"], "s": "NaN \" Infinity"}"#
        );
        assert!(sanitize(br#"{"a": 1.5}"#).is_none());
    }

    #[test]
    fn arrays_in_both_encodings() {
        let row = decode_row(
            br#"{"numbers": {"__ndarray__": [[2], "int64", [8, 1]]},
                 "positions": [[0.0, 0.0, 0.5], [1, 2, NaN]],
                 "energy": -1.5, "pbc": {"__ndarray__": [[3], "bool", [true, false, true]]},
                 "cell": {"__ndarray__": [[3, 3], "float32", [0.1, 0, 0, 0, 1, 0, 0, 0, 1]]}}"#,
        )
        .unwrap();
        assert_eq!(row.numbers.unwrap().data, Flat::I64(vec![8, 1]));
        let p = row.positions.unwrap();
        assert_eq!(p.shape, vec![2, 3]);
        let Flat::F64(v) = p.data else { panic!() };
        assert!(v[5].is_nan() && v[3] == 1.0);
        assert_eq!(row.scalars["energy"], -1.5);
        let Flat::F64(c) = row.cell.unwrap().data else {
            panic!()
        };
        assert_eq!(c[0], 0.1f32 as f64);
    }

    #[test]
    fn bad_rows_say_what_is_wrong() {
        let cases: &[(&[u8], &str)] = &[
            (b"{\"numbers\": [1, 2", "not JSON"),
            (b"[1, 2]", "an ASE row"),
            (
                br#"{"numbers": {"__ndarray__": [[3], "int64", [1, 2]]}}"#,
                "holds 3 values, the list 2",
            ),
            (
                br#"{"positions": {"__ndarray__": [[1, 3], "float64", [1, "x", 2]]}}"#,
                "`positions`",
            ),
            (br#"{"energy": "high"}"#, "`energy`"),
            (
                br#"{"numbers": {"__ndarray__": [[18446744073709551615, 2], "int64", []]}}"#,
                "overflows",
            ),
        ];
        for (text, says) in cases {
            let e = decode_row(text).unwrap_err();
            assert!(e.contains(says), "{}: {e}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn inflate_refuses_bombs_truncation_and_garbage() {
        use std::io::Write;
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
        e.write_all(&vec![b'a'; 1 << 20]).unwrap();
        let z = e.finish().unwrap();
        let mut d = Decompress::new(true);
        let mut out = Vec::new();
        inflate(&mut d, &z, &mut out, 2 << 20).unwrap();
        assert_eq!(out.len(), 1 << 20);
        let e = inflate(&mut d, &z, &mut out, 1000).unwrap_err();
        assert!(e.contains("inflates past 1000"), "{e}");
        let e = inflate(&mut d, &z[..z.len() / 2], &mut out, 2 << 20).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        let e = inflate(&mut d, b"{\"numbers\": 1}", &mut out, 2 << 20).unwrap_err();
        assert!(e.contains("not a zlib stream"), "{e}");
    }
}
