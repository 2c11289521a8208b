//! Typed JSON (DIGEST §5-§7), read by the judge itself.
//!
//! Every scalar is turned into one *normal* JSON value, itself canonical
//! JSON: f64 as a JSON float when finite (`-0.0` included) and as `"NaN"`
//! (every NaN payload), `"Infinity"` or `"-Infinity"` otherwise; integers as
//! JSON integers whatever their written form. Leaves are then compared with
//! floats by bits (`leaf_eq` in the parent), so `-0.0 != 0.0`.

use serde_json::Value;

use super::{fail, idx, JudgeError};

/// The closed set of column dtypes (§5).
pub(super) const DTYPES: [&str; 13] = [
    "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool", "string", "c64", "c128",
];

/// The closed set of meta tags (§7).
pub(super) const TAGS: [&str; 16] = [
    "bool", "i32", "i64", "u32", "u64", "f64", "string", "json", "bool3", "i32x3", "i64x3",
    "u32x3", "u64x3", "f64x3", "f64x6", "f64x9",
];

/// 2^52: at and above `2^52 * q` a multiple of `q` needs no rounding (§6).
const TWO_POW_52: f64 = 4_503_599_627_370_496.0;

/// A short name of a JSON value's kind, for error messages.
pub(super) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(n) if n.is_f64() => "a real number",
        Value::Number(_) => "an integer",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Reads a typed f64: a number, or one of the three non-finite spellings.
pub(super) fn read_f64(v: &Value, path: &str) -> Result<f64, JudgeError> {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(x) => Ok(x),
            None => fail(path, "a number that is not representable as f64"),
        },
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => fail(path, format!("expected an f64, found the string {s:?}")),
        },
        _ => fail(path, format!("expected an f64, found {}", kind(v))),
    }
}

/// The normal form of an f64 (see the module comment).
pub(super) fn f64_value(x: f64) -> Value {
    if x.is_nan() {
        Value::from("NaN")
    } else if x == f64::INFINITY {
        Value::from("Infinity")
    } else if x == f64::NEG_INFINITY {
        Value::from("-Infinity")
    } else {
        Value::from(x)
    }
}

/// The inclusive range of an integer dtype or tag; `None` when not an integer type.
fn int_range(dtype: &str) -> Option<(i128, i128)> {
    Some(match dtype {
        "i8" => (i8::MIN.into(), i8::MAX.into()),
        "i16" => (i16::MIN.into(), i16::MAX.into()),
        "i32" => (i32::MIN.into(), i32::MAX.into()),
        "i64" => (i64::MIN.into(), i64::MAX.into()),
        "u8" => (0, u8::MAX.into()),
        "u16" => (0, u16::MAX.into()),
        "u32" => (0, u32::MAX.into()),
        "u64" => (0, u64::MAX.into()),
        _ => return None,
    })
}

/// Reads a typed integer: a JSON integer or a decimal string, never a real
/// (a real is refused, not rounded: §7).
fn read_int(v: &Value, path: &str, dtype: &str, lo: i128, hi: i128) -> Result<Value, JudgeError> {
    let n: i128 = match v {
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into(),
            (None, Some(i)) => i.into(),
            _ => return fail(path, format!("a real number for the integer type {dtype}")),
        },
        Value::String(s) => {
            let digits = s.strip_prefix('-').unwrap_or(s);
            let parsed = if digits.is_empty()
                || digits.len() > 39
                || !digits.bytes().all(|b| b.is_ascii_digit())
            {
                None
            } else {
                s.parse::<i128>().ok()
            };
            match parsed {
                Some(n) => n,
                None => return fail(path, format!("{s:?} is not a decimal integer")),
            }
        }
        _ => return fail(path, format!("expected an {dtype}, found {}", kind(v))),
    };
    if n < lo || n > hi {
        return fail(path, format!("{n} is out of the range of {dtype}"));
    }
    // Non-negative values go through u64 so that i64 and u64 spellings of one
    // integer give the same `Value` (serde_json keeps them apart otherwise).
    Ok(match (u64::try_from(n), i64::try_from(n)) {
        (Ok(u), _) => Value::from(u),
        (_, Ok(i)) => Value::from(i),
        _ => return fail(path, format!("{n} is out of the range of {dtype}")),
    })
}

/// The normal form of one column cell of `dtype` (a c64/c128 cell is one `[re, im]` pair).
pub(super) fn cell(dtype: &str, v: &Value, path: &str) -> Result<Value, JudgeError> {
    if let Some((lo, hi)) = int_range(dtype) {
        return read_int(v, path, dtype, lo, hi);
    }
    match dtype {
        "f64" => Ok(f64_value(read_f64(v, path)?)),
        "bool" => match v {
            Value::Bool(b) => Ok(Value::Bool(*b)),
            _ => fail(path, format!("expected a bool, found {}", kind(v))),
        },
        "string" => match v {
            Value::String(s) => Ok(Value::String(s.clone())),
            _ => fail(path, format!("expected a string, found {}", kind(v))),
        },
        "c64" | "c128" => {
            let pair = match v {
                Value::Array(a) if a.len() == 2 => a,
                _ => return fail(path, format!("expected a [re, im] pair, found {}", kind(v))),
            };
            let mut re = read_f64(&pair[0], &idx(path, 0))?;
            let mut im = read_f64(&pair[1], &idx(path, 1))?;
            if dtype == "c64" {
                // A c64 part is stored as f32: both sides are compared at that
                // width, so a writer handed 0.1 and a reader printing the f32's
                // shortest form both compare equal to the stored value.
                re = f64::from(re as f32);
                im = f64::from(im as f32);
            }
            Ok(Value::Array(vec![f64_value(re), f64_value(im)]))
        }
        _ => fail(path, format!("unknown dtype {dtype:?}")),
    }
}

/// The normal form of a meta value under `tag` (§7).
pub(super) fn tag_value(tag: &str, v: &Value, path: &str) -> Result<Value, JudgeError> {
    let (base, width) = match tag {
        "json" => return Ok(plain(v)),
        "bool" | "i32" | "i64" | "u32" | "u64" | "f64" | "string" => return cell(tag, v, path),
        "bool3" => ("bool", 3),
        "i32x3" => ("i32", 3),
        "i64x3" => ("i64", 3),
        "u32x3" => ("u32", 3),
        "u64x3" => ("u64", 3),
        "f64x3" => ("f64", 3),
        "f64x6" => ("f64", 6),
        "f64x9" => ("f64", 9),
        _ => return fail(path, format!("unknown meta tag {tag:?}")),
    };
    match v {
        Value::Array(a) if a.len() == width => a
            .iter()
            .enumerate()
            .map(|(i, x)| cell(base, x, &idx(path, i)))
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array),
        _ => fail(
            path,
            format!("a {tag} value is an array of exactly {width}"),
        ),
    }
}

/// The elements of `v` when `tag` is an integer tag or a vector of one
/// (`u64x3`); `None` for any other tag.
fn integer_elements<'v>(tag: &str, v: &'v Value) -> Option<&'v [Value]> {
    int_range(tag.split('x').next().unwrap_or(tag))?;
    Some(match v {
        Value::Array(a) => a.as_slice(),
        one => std::slice::from_ref(one),
    })
}

/// 2^53: the largest magnitude a typed integer is written as a JSON number.
const EXACT_INTEGER_LIMIT: i128 = 1 << 53;

/// Whether a value that reads under `tag` is in the one form a writer
/// writes (conventions.md, "Typed JSON values"): an integer as a JSON
/// number when `|v| <= 2^53` and as its decimal string (no sign but `-`,
/// no leading zero) beyond. `None` when it is; else what is off.
pub(super) fn integer_form_problem(tag: &str, v: &Value) -> Option<String> {
    let elements = integer_elements(tag, v)?;
    elements.iter().find_map(|x| {
        let Value::String(s) = x else { return None };
        let digits = s.strip_prefix('-').unwrap_or(s);
        let n: i128 = s.parse().ok()?;
        if n.abs() <= EXACT_INTEGER_LIMIT {
            Some(format!(
                "the integer {s:?} is written as a string; within ±2^53 it is a JSON number"
            ))
        } else if digits.len() > 1 && digits.starts_with('0') {
            Some(format!(
                "{s:?} is not the integer's decimal string (a leading zero)"
            ))
        } else {
            None
        }
    })
}

/// A JSON number beyond ±2^53 where `tag` is an integer tag (or a vector
/// of one): readers accept it, but the one form a writer writes there is
/// the decimal string (`typed-json.forms.big-int-string`, a decision).
pub(super) fn big_integer_as_number(tag: &str, v: &Value) -> Option<String> {
    let elements = integer_elements(tag, v)?;
    elements.iter().find_map(|x| {
        let Value::Number(n) = x else { return None };
        let n = n
            .as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))?;
        (n.abs() > EXACT_INTEGER_LIMIT).then(|| {
            format!("the integer {n} is written as a JSON number; beyond ±2^53 it is its decimal string")
        })
    })
}

/// The tag an untagged system-meta value reads back as (§7).
pub fn infer_tag(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "i64",
        Value::Number(n) if n.is_u64() => "u64",
        Value::Number(_) => "f64",
        Value::String(_) => "string",
        Value::Null | Value::Array(_) | Value::Object(_) => "json",
    }
}

/// The normal form of a plain JSON document (collection and record meta,
/// `json`-tagged values, force-field document, block attributes).
///
/// Numbers compare by mathematical value (`1.0` equals `1`): JSON does not
/// tell them apart, and an implementation in a language with one number type
/// cannot either. Typed values (where the difference matters) go through a tag.
pub(super) fn plain(v: &Value) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(x) if n.is_f64() && x.fract() == 0.0 => {
                if (0.0..18_446_744_073_709_551_616.0).contains(&x) {
                    Value::from(x as u64)
                } else if (-9_223_372_036_854_775_808.0..0.0).contains(&x) {
                    Value::from(x as i64)
                } else {
                    v.clone()
                }
            }
            _ => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(plain).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, x)| (k.clone(), plain(x))).collect()),
        _ => v.clone(),
    }
}

/// The quantum of a declared precision: the largest power of two not above
/// `p`, read from the exponent bits (exact, unlike `log2`). `None` when `p`
/// is outside `[2^-1000, 2^1000]` or not finite (§6).
pub(super) fn quantum(p: f64) -> Option<f64> {
    let lo = f64::from_bits((1023 - 1000) << 52);
    let hi = f64::from_bits((1023 + 1000) << 52);
    if !(p.is_finite() && (lo..=hi).contains(&p)) {
        return None;
    }
    // p is normal here, so clearing the mantissa leaves 2^floor(log2 p).
    Some(f64::from_bits(p.to_bits() & 0x7ff0_0000_0000_0000))
}

/// What a writer stores for `x` under quantum `q` (§6): ties to even, and
/// NaN, infinities and `|x| >= 2^52 q` unchanged. `x / q` and the product
/// are exact because `q` is a power of two and the quotient stays below 2^52.
pub(super) fn round_to(x: f64, q: f64) -> f64 {
    if x.is_finite() && x.abs() < TWO_POW_52 * q {
        (x / q).round_ties_even() * q
    } else {
        x
    }
}
