//! Edits of stored values: typed header reals printed short, precision
//! rounding done another way, tags inferred from a value's spelling.

use serde_json::Value;

use super::super::image::{Frame, Image};
use super::edits::*;
use crate::inspect::Key;

/// Where a column with a precision is stored.
#[derive(Clone, Copy)]
pub(super) enum At {
    /// Record `r`'s system frame (the column's own precision).
    System(u64),
    /// The index (an own column's precision).
    Index,
    /// Trajectory update `j` (the declared precision).
    Update(u64),
}

/// What an edit of a precision column is handed: where it is, its block
/// and column, its precision, its values (f64 little-endian) and its mask.
pub(super) struct Rounded<'a> {
    /// The frame holding it.
    pub at: At,
    /// Its block.
    pub block: &'a str,
    /// Its name.
    pub column: &'a str,
    /// The precision it is stored under.
    pub precision: f64,
    /// Its values as stored, f64 little-endian.
    pub values: &'a mut Vec<u8>,
    /// Its validity mask, one byte a row, when it has one.
    pub mask: Option<&'a [u8]>,
}

/// Each column stored under a precision: a system's or the index's own
/// (on its header), a trajectory column's declared one (in
/// `sequence_schema`); whether `edit` changed one.
pub(super) fn edit_precision_columns(
    img: &mut Image,
    mut edit: impl FnMut(Rounded<'_>) -> bool,
) -> bool {
    let declared = img
        .meta()
        .pointer("/sequence_schema/blocks")
        .cloned()
        .unwrap_or_default();
    let own = |f: &Frame, b: &str, c: &str| {
        f.header
            .get("blocks")?
            .get(b)?
            .get("columns")?
            .get(c)?
            .get("precision")?
            .as_f64()
    };
    let in_schema = |_: &Frame, b: &str, c: &str| {
        declared
            .get(b)?
            .get("columns")?
            .get(c)?
            .get("precision")?
            .as_f64()
    };
    let keys: Vec<Vec<u8>> = img.entries.keys().cloned().collect();
    let mut changed = false;
    for k in keys {
        let at = match (k.len(), k.first()) {
            (9, Some(b's')) => {
                At::System(u64::from_be_bytes(k[1..].try_into().unwrap_or_default()))
            }
            (9, Some(b'f')) => {
                At::Update(u64::from_be_bytes(k[1..].try_into().unwrap_or_default()))
            }
            _ if k == Key::Index.encode() => At::Index,
            _ => continue,
        };
        let Some(mut f) = img.entries.get(&k).and_then(|v| Frame::parse(v)) else {
            continue;
        };
        let columns: Vec<(String, String, f64)> = f
            .buffers
            .keys()
            .filter(|(_, _, m)| !m)
            .filter_map(|(b, c, _)| {
                let p = match at {
                    At::Update(_) => in_schema(&f, b, c),
                    _ => own(&f, b, c),
                }?;
                Some((b.clone(), c.clone(), p))
            })
            .collect();
        let mut edited = false;
        for (b, c, p) in columns {
            let mask = f.buffers.get(&(b.clone(), c.clone(), true)).cloned();
            if let Some(values) = f.buffers.get_mut(&(b.clone(), c.clone(), false)) {
                edited |= edit(Rounded {
                    at,
                    block: &b,
                    column: &c,
                    precision: p,
                    values,
                    mask: mask.as_deref(),
                });
            }
        }
        if edited {
            img.entries.insert(k, f.encode(8, true));
            changed = true;
        }
    }
    changed
}

fn f64s(bytes: &[u8]) -> impl Iterator<Item = f64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap_or_default()))
}

/// Whether value `element` of a column of `len` values lies in a null row.
fn null_at(mask: Option<&[u8]>, element: usize, len: usize) -> bool {
    let Some(mask) = mask.filter(|m| !m.is_empty()) else {
        return false;
    };
    let per_row = (len / mask.len()).max(1);
    mask.get(element / per_row) == Some(&0)
}

/// f64 buffers of columns with a declared precision, each nonzero finite
/// value moved by one unit in the last place.
pub(super) fn off_grid(img: &mut Image) -> bool {
    edit_precision_columns(img, |col| {
        let mut changed = false;
        for c in col.values.chunks_exact_mut(8) {
            let x = f64::from_le_bytes(c.try_into().unwrap_or_default());
            if x != 0.0 && x.is_finite() {
                c.copy_from_slice(&f64::from_bits(x.to_bits() + 1).to_le_bytes());
                changed = true;
            }
        }
        changed
    })
}

/// Rounding through an integer (`llrint(x / q) * q`), which has no -0:
/// every -0.0 a precision column stores becomes +0.0. It shows where a
/// valid row held one (a null row's value means nothing), but the writer
/// rounds null rows too.
pub(super) fn negative_zero_lost(img: &mut Image) -> bool {
    edit_precision_columns(img, |col| {
        let len = col.values.len() / 8;
        let mut shows = false;
        for (i, c) in col.values.chunks_exact_mut(8).enumerate() {
            if f64::from_le_bytes(c.try_into().unwrap_or_default()).to_bits() == (-0.0f64).to_bits()
            {
                c.copy_from_slice(&0.0f64.to_le_bytes());
                shows |= !null_at(col.mask, i, len);
            }
        }
        shows
    })
}

/// The quantum of precision `p`: the largest power of two not above it
/// (frame.md, "Declared precision"), the exponent kept, the mantissa
/// cleared.
fn quantum(p: f64) -> f64 {
    f64::from_bits(p.to_bits() & 0xFFF0_0000_0000_0000)
}

/// The quantum as `2 ** floor(log2(p))`: for `p` one ulp below a power of
/// two, `log2` rounds up to the integer exponent wherever the doubles near
/// it are coarser than `log2`'s distance from it (0.25 and below, 8 and
/// above), so it is then `p`'s next power of two, above `p`.
fn quantum_log2(p: f64) -> f64 {
    2f64.powi(p.log2().floor() as i32)
}

/// Values as the writer rounds them with quantum `q`: ties to even for
/// finite `|x| < 2^52 q`, anything else kept.
fn rounded(x: f64, q: f64) -> f64 {
    if !x.is_finite() || x.abs() >= q * 2f64.powi(52) {
        x
    } else {
        (x / q).round_ties_even() * q
    }
}

/// A typed f64 of canonical JSON (a number, or `NaN`, `Infinity`,
/// `-Infinity`).
fn typed_f64(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

/// The values the fixture gives the column stored at `at`: the value
/// rounded is the one handed to the writer, not the one it stored.
fn given_values(
    img: &Image,
    fixture: &Value,
    at: At,
    block: &str,
    column: &str,
) -> Option<Vec<f64>> {
    let values = match at {
        At::Index => fixture.get("index")?.get(column)?,
        At::System(r) => fixture
            .get("records")?
            .get(r as usize)?
            .get("system")?
            .get("blocks")?
            .get(block)?
            .get("columns")?
            .get(column)?,
        At::Update(j) => {
            let (r, &(first, _)) = img
                .spans()
                .iter()
                .enumerate()
                .find(|(_, s)| s.0 <= j && j < s.0 + s.1)?;
            fixture
                .get("records")?
                .get(r)?
                .get("trajectory")?
                .get("frames")?
                .get((j - first) as usize)?
                .get("blocks")?
                .get(block)?
                .get("columns")?
                .get(column)?
        }
    };
    values
        .get("values")?
        .as_array()?
        .iter()
        .map(typed_f64)
        .collect()
}

/// A precision one ulp below a power of two rounded with the quantum
/// `2 ** floor(log2(p))`: each value given is rounded again with it.
pub(super) fn quantum_from_log2(img: &mut Image, fixture: &Value) -> bool {
    let before = img.clone();
    edit_precision_columns(img, |col| {
        let (q, wrong) = (quantum(col.precision), quantum_log2(col.precision));
        if q == wrong || !col.precision.is_normal() {
            return false;
        }
        let Some(given) = given_values(&before, fixture, col.at, col.block, col.column) else {
            return false;
        };
        if given.len() * 8 != col.values.len() {
            return false;
        }
        let len = given.len();
        let mut shows = false;
        let stored: Vec<f64> = f64s(col.values).collect();
        for (i, (x, s)) in given.into_iter().zip(stored).enumerate() {
            let y = rounded(x, wrong);
            if y.to_bits() != s.to_bits() {
                col.values[8 * i..8 * i + 8].copy_from_slice(&y.to_le_bytes());
                shows |= !null_at(col.mask, i, len);
            }
        }
        shows
    })
}

/// `x` printed with 15 significant digits (`%.15g`) and read back.
fn digits15(x: f64) -> f64 {
    format!("{x:.14e}").parse().unwrap_or(x)
}

/// A typed f64 value (or each one of a vector) printed with 15
/// significant digits; whether one changed.
fn to_15_digits(v: &mut Value) -> bool {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(x) if digits15(x).to_bits() != x.to_bits() => {
                *v = Value::from(digits15(x));
                true
            }
            _ => false,
        },
        Value::Array(items) => items.iter_mut().fold(false, |c, x| to_15_digits(x) | c),
        _ => false,
    }
}

fn is_f64_tag(tag: &str) -> bool {
    matches!(tag, "f64" | "f64x3" | "f64x6" | "f64x9")
}

/// Every typed f64 of a header or of `meta` printed with 15 significant
/// digits: per-step values and fills of f64 tags, `time`, the cell's
/// vectors and origin, system meta of f64 tags.
pub(super) fn f64_15_digits(img: &mut Image) -> bool {
    let tags = per_step_tags(img);
    let fills = edit_schema_entries(img, "meta", |e| {
        let f64_tag = e
            .get("dtype")
            .and_then(Value::as_str)
            .is_some_and(is_f64_tag);
        f64_tag && e.get_mut("fill").is_some_and(to_15_digits)
    });
    let updates = img.edit_headers(b'f', |h| {
        let time = h.get_mut("time").is_some_and(to_15_digits);
        let cell = h
            .get_mut("box")
            .and_then(Value::as_object_mut)
            .is_some_and(|b| {
                let vectors = b.get_mut("vectors").is_some_and(to_15_digits);
                b.get_mut("origin").is_some_and(to_15_digits) | vectors
            });
        let meta = each_meta(h, |k, v| {
            tags.get(k).is_some_and(|t| is_f64_tag(t)) && to_15_digits(v)
        });
        time | cell | meta
    });
    let systems = img.edit_headers(b's', |h| {
        let types = h.get("meta_types").cloned().unwrap_or_default();
        each_meta(h, |k, v| {
            types.get(k).and_then(Value::as_str).is_some_and(is_f64_tag) && to_15_digits(v)
        })
    });
    fills | updates | systems
}

/// An untagged system meta string spelled `NaN`, `Infinity` or
/// `-Infinity` tagged f64 (the per-step inference reused): the stored
/// value is that string, read back as a real.
pub(super) fn special_strings_as_f64(img: &mut Image, fixture: &Value) -> bool {
    let special = |v: &Value| {
        v.as_str()
            .is_some_and(|s| ["NaN", "Infinity", "-Infinity"].contains(&s))
    };
    let mut changed = false;
    for (r, entries) in untagged_system_meta(fixture, special) {
        let tags = entries.into_iter().map(|(k, _)| (k.clone(), "f64".into()));
        changed |= retag_system_meta(img, r, tags);
    }
    changed
}

/// An untagged system meta list of 3, 6 or 9 reals tagged as the vector
/// of that width (`f64x3`, `f64x6`, `f64x9`) instead of `json`.
pub(super) fn real_lists_as_vectors(img: &mut Image, fixture: &Value) -> bool {
    let real_list = |v: &Value| {
        v.as_array().is_some_and(|items| {
            items.iter().all(Value::is_f64) && [3, 6, 9].contains(&items.len())
        })
    };
    let mut changed = false;
    for (r, entries) in untagged_system_meta(fixture, real_list) {
        let tags = entries.into_iter().map(|(k, v)| {
            let n = v.as_array().map_or(0, Vec::len);
            (k.clone(), format!("f64x{n}"))
        });
        changed |= retag_system_meta(img, r, tags);
    }
    changed
}

/// Each fixed-width column's values under its null rows set to zero bytes
/// (a masked array's `.filled(0)`); whether a nonzero value was zeroed.
pub(super) fn null_row_values_zeroed(img: &mut Image) -> bool {
    edit_frames(img, |f| {
        let masks: Vec<_> = f
            .buffers
            .iter()
            .filter(|((_, _, is_mask), _)| *is_mask)
            .map(|((b, c, _), mask)| ((b.clone(), c.clone(), false), mask.clone()))
            .collect();
        let mut changed = false;
        for (key, mask) in masks {
            let Some(values) = f.buffers.get_mut(&key) else {
                continue;
            };
            if mask.is_empty() || values.len() % mask.len() != 0 {
                continue;
            }
            let row = values.len() / mask.len();
            for (bytes, _) in values
                .chunks_mut(row.max(1))
                .zip(&mask)
                .filter(|(_, &flag)| flag == 0)
            {
                changed |= bytes.iter().any(|&b| b != 0);
                bytes.fill(0);
            }
        }
        changed
    })
}
