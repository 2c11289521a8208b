//! Typed JSON (DIGEST §7): how a value of a declared type is written in JSON,
//! and the closed set of 16 meta tags.

use serde_json::{Number, Value};

/// Integers beyond this magnitude are written as decimal strings.
pub const EXACT_INTEGER_LIMIT: i128 = 1 << 53;

/// A meta tag: the declared type of a meta value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MetaTag {
    /// `true` / `false`.
    Bool,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// Double.
    F64,
    /// UTF-8 string.
    String,
    /// Any finite JSON document.
    Json,
    /// Three bools.
    Bool3,
    /// Three i32.
    I32x3,
    /// Three i64.
    I64x3,
    /// Three u32.
    U32x3,
    /// Three u64.
    U64x3,
    /// Three f64.
    F64x3,
    /// Six f64.
    F64x6,
    /// Nine f64.
    F64x9,
}

/// The scalar type inside a tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    /// bool
    Bool,
    /// An integer in `[min, max]`.
    Int(i128, i128),
    /// f64
    F64,
    /// string
    String,
    /// a JSON document
    Json,
}

impl MetaTag {
    /// All 16 tags.
    pub const ALL: [MetaTag; 16] = [
        MetaTag::Bool,
        MetaTag::I32,
        MetaTag::I64,
        MetaTag::U32,
        MetaTag::U64,
        MetaTag::F64,
        MetaTag::String,
        MetaTag::Json,
        MetaTag::Bool3,
        MetaTag::I32x3,
        MetaTag::I64x3,
        MetaTag::U32x3,
        MetaTag::U64x3,
        MetaTag::F64x3,
        MetaTag::F64x6,
        MetaTag::F64x9,
    ];

    /// The tag's name.
    pub fn name(self) -> &'static str {
        match self {
            MetaTag::Bool => "bool",
            MetaTag::I32 => "i32",
            MetaTag::I64 => "i64",
            MetaTag::U32 => "u32",
            MetaTag::U64 => "u64",
            MetaTag::F64 => "f64",
            MetaTag::String => "string",
            MetaTag::Json => "json",
            MetaTag::Bool3 => "bool3",
            MetaTag::I32x3 => "i32x3",
            MetaTag::I64x3 => "i64x3",
            MetaTag::U32x3 => "u32x3",
            MetaTag::U64x3 => "u64x3",
            MetaTag::F64x3 => "f64x3",
            MetaTag::F64x6 => "f64x6",
            MetaTag::F64x9 => "f64x9",
        }
    }

    /// Parses a tag name.
    pub fn parse(name: &str) -> Option<MetaTag> {
        MetaTag::ALL.iter().copied().find(|t| t.name() == name)
    }

    /// The element type and, for vector tags, the width.
    pub fn shape(self) -> (Scalar, Option<usize>) {
        const I32: Scalar = Scalar::Int(i32::MIN as i128, i32::MAX as i128);
        const I64: Scalar = Scalar::Int(i64::MIN as i128, i64::MAX as i128);
        const U32: Scalar = Scalar::Int(0, u32::MAX as i128);
        const U64: Scalar = Scalar::Int(0, u64::MAX as i128);
        match self {
            MetaTag::Bool => (Scalar::Bool, None),
            MetaTag::I32 => (I32, None),
            MetaTag::I64 => (I64, None),
            MetaTag::U32 => (U32, None),
            MetaTag::U64 => (U64, None),
            MetaTag::F64 => (Scalar::F64, None),
            MetaTag::String => (Scalar::String, None),
            MetaTag::Json => (Scalar::Json, None),
            MetaTag::Bool3 => (Scalar::Bool, Some(3)),
            MetaTag::I32x3 => (I32, Some(3)),
            MetaTag::I64x3 => (I64, Some(3)),
            MetaTag::U32x3 => (U32, Some(3)),
            MetaTag::U64x3 => (U64, Some(3)),
            MetaTag::F64x3 => (Scalar::F64, Some(3)),
            MetaTag::F64x6 => (Scalar::F64, Some(6)),
            MetaTag::F64x9 => (Scalar::F64, Some(9)),
        }
    }

    /// The tag an untagged system-meta value gets (DIGEST §7).
    pub fn infer(value: &Value) -> MetaTag {
        match value {
            Value::Bool(_) => MetaTag::Bool,
            Value::Number(n) if n.is_i64() => MetaTag::I64,
            Value::Number(n) if n.is_u64() => MetaTag::U64,
            Value::Number(_) => MetaTag::F64,
            Value::String(_) => MetaTag::String,
            Value::Array(_) | Value::Object(_) | Value::Null => MetaTag::Json,
        }
    }
}

/// Checks that `value` is a valid typed-JSON value for `tag` and returns its
/// canonical form (integers beyond 2^53 as strings, f64 as numbers or the
/// three special strings). The error says what does not fit.
pub fn normalize(tag: MetaTag, value: &Value) -> Result<Value, String> {
    let (scalar, width) = tag.shape();
    match width {
        None => normalize_scalar(scalar, value),
        Some(n) => match value {
            Value::Array(items) if items.len() == n => Ok(Value::Array(
                items
                    .iter()
                    .map(|v| normalize_scalar(scalar, v))
                    .collect::<Result<_, _>>()?,
            )),
            other => Err(format!(
                "expected an array of {n} for tag {}, got {}",
                tag.name(),
                brief(other)
            )),
        },
    }
}

/// Checks that `value` fits `tag` without building its canonical form (the
/// reader's per-frame check).
pub fn check(tag: MetaTag, value: &Value) -> Result<(), String> {
    let (scalar, width) = tag.shape();
    match (width, value) {
        (None, v) => check_scalar(scalar, v),
        (Some(n), Value::Array(items)) if items.len() == n => {
            items.iter().try_for_each(|v| check_scalar(scalar, v))
        }
        (Some(n), other) => Err(format!(
            "expected an array of {n} for tag {}, got {}",
            tag.name(),
            brief(other)
        )),
    }
}

fn check_scalar(scalar: Scalar, value: &Value) -> Result<(), String> {
    match (scalar, value) {
        (Scalar::F64, Value::Number(_))
        | (Scalar::Bool, Value::Bool(_))
        | (Scalar::String, Value::String(_))
        | (Scalar::Json, _) => Ok(()),
        _ => normalize_scalar(scalar, value).map(drop),
    }
}

fn normalize_scalar(scalar: Scalar, value: &Value) -> Result<Value, String> {
    match scalar {
        Scalar::Bool => match value {
            Value::Bool(_) => Ok(value.clone()),
            other => Err(format!("expected a bool, got {}", brief(other))),
        },
        Scalar::Int(min, max) => {
            let v = int_from_json(value)?;
            if v < min || v > max {
                return Err(format!("integer {v} out of range {min}..={max}"));
            }
            Ok(int_to_json(v))
        }
        Scalar::F64 => f64_from_json(value).map(f64_to_json),
        Scalar::String => match value {
            Value::String(_) => Ok(value.clone()),
            other => Err(format!("expected a string, got {}", brief(other))),
        },
        Scalar::Json => Ok(value.clone()),
    }
}

/// Reads a typed f64: a JSON number or `"NaN"`, `"Infinity"`, `"-Infinity"`.
pub fn f64_from_json(value: &Value) -> Result<f64, String> {
    match value {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| format!("number {n} is not an f64")),
        Value::String(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => Err(format!("expected a number, got string {s:?}")),
        },
        other => Err(format!("expected a number, got {}", brief(other))),
    }
}

/// Writes a typed f64.
pub fn f64_to_json(v: f64) -> Value {
    if v.is_nan() {
        Value::String("NaN".into())
    } else if v.is_infinite() {
        Value::String(if v > 0.0 { "Infinity" } else { "-Infinity" }.into())
    } else {
        Number::from_f64(v)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    }
}

/// Reads a typed integer in the forms a reader accepts (conventions.md,
/// "Typed JSON values"): a JSON integer (exact at any size), or the decimal
/// string of one beyond 2^53 in magnitude; never a real, and never a
/// string for an integer a JSON number holds exactly (`"2"`), which no
/// writer writes.
pub fn int_from_json(value: &Value) -> Result<i128, String> {
    match value {
        Value::Number(n) => {
            if let Some(v) = n.as_i64() {
                Ok(v as i128)
            } else if let Some(v) = n.as_u64() {
                Ok(v as i128)
            } else {
                Err(format!("expected an integer, got the real {n}"))
            }
        }
        Value::String(s) => {
            let digits = s.strip_prefix('-').unwrap_or(s);
            let decimal = !digits.is_empty()
                && digits.len() <= 30
                && digits.bytes().all(|b| b.is_ascii_digit())
                && !(digits.len() > 1 && digits.starts_with('0'));
            match s.parse::<i128>() {
                Ok(v) if decimal && v.abs() > EXACT_INTEGER_LIMIT => Ok(v),
                Ok(_) if decimal => Err(format!(
                    "expected an integer, got the string {s:?} (within ±2^53 an integer is a JSON number)"
                )),
                _ => Err(format!("expected an integer, got string {s:?}")),
            }
        }
        other => Err(format!("expected an integer, got {}", brief(other))),
    }
}

/// Writes a typed integer: a number up to 2^53 in magnitude, a string beyond.
pub fn int_to_json(v: i128) -> Value {
    if v.abs() <= EXACT_INTEGER_LIMIT {
        Value::Number(Number::from(v as i64))
    } else {
        Value::String(v.to_string())
    }
}

/// A short description of a JSON value for messages.
pub fn brief(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.len() > 40 => {
            format!("a string {:?}...", &s[..s.floor_char_boundary(40)])
        }
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(a) => format!("an array of {}", a.len()),
        Value::Object(_) => "an object".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn special_floats_round_trip() {
        for v in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -0.0,
            1e-300,
            f64::MAX,
        ] {
            let back = f64_from_json(&f64_to_json(v)).unwrap();
            assert_eq!(
                back.to_bits(),
                if v.is_nan() {
                    back.to_bits()
                } else {
                    v.to_bits()
                }
            );
            assert_eq!(back.is_nan(), v.is_nan());
        }
        assert_eq!(f64_to_json(-0.0).to_string(), "-0.0");
        assert!(f64_from_json(&json!("nan")).is_err());
        assert!(f64_from_json(&json!(null)).is_err());
        assert!(f64_from_json(&json!(true)).is_err());
    }

    #[test]
    fn integers_beyond_2_53_are_strings() {
        assert_eq!(int_to_json(1 << 53), json!(9007199254740992u64));
        assert_eq!(int_to_json((1 << 53) + 1), json!("9007199254740993"));
        assert_eq!(int_to_json(u64::MAX as i128), json!("18446744073709551615"));
        assert_eq!(int_to_json(i64::MIN as i128), json!("-9223372036854775808"));
        assert_eq!(
            normalize(MetaTag::U64, &json!(18446744073709551615u64)).unwrap(),
            json!("18446744073709551615")
        );
        assert_eq!(
            normalize(MetaTag::I64, &json!("-9223372036854775808")).unwrap(),
            json!("-9223372036854775808")
        );
    }

    #[test]
    fn values_that_do_not_fit_are_refused() {
        assert!(normalize(MetaTag::I64, &json!(1.5)).is_err());
        assert!(normalize(MetaTag::I64, &json!(1.0)).is_err());
        assert!(normalize(MetaTag::U32, &json!(-1)).is_err());
        assert!(normalize(MetaTag::U32, &json!(4294967296u64)).is_err());
        assert!(normalize(MetaTag::I64, &json!("9223372036854775808")).is_err());
        assert!(normalize(MetaTag::F64, &json!(null)).is_err());
        assert!(normalize(MetaTag::F64, &json!(false)).is_err());
        assert!(normalize(MetaTag::F64x3, &json!([1, 2])).is_err());
        assert!(normalize(MetaTag::Bool3, &json!([true, false, 1])).is_err());
        assert!(normalize(MetaTag::String, &json!(3)).is_err());
        assert!(normalize(MetaTag::I32, &json!("12a")).is_err());
        assert!(normalize(MetaTag::I32, &json!("")).is_err());
    }

    #[test]
    fn inference_follows_the_digest() {
        assert_eq!(MetaTag::infer(&json!(true)), MetaTag::Bool);
        assert_eq!(MetaTag::infer(&json!(-3)), MetaTag::I64);
        assert_eq!(MetaTag::infer(&json!(9223372036854775808u64)), MetaTag::U64);
        assert_eq!(MetaTag::infer(&json!(2.0)), MetaTag::F64);
        assert_eq!(MetaTag::infer(&json!("s")), MetaTag::String);
        assert_eq!(MetaTag::infer(&json!(null)), MetaTag::Json);
        assert_eq!(MetaTag::infer(&json!([1])), MetaTag::Json);
    }

    #[test]
    fn complex_and_vectors_normalize() {
        assert_eq!(
            normalize(MetaTag::F64x3, &json!([1, "NaN", 2.5])).unwrap(),
            json!([1.0, "NaN", 2.5])
        );
    }
}
