//! The independent judge: compares an expected collection (a fixture) with
//! what an implementation read back, both in canonical JSON
//! (`docs/canonical-json.md`), and reports every difference with its path.
//!
//! Independence (design.md): nothing here calls the reference crate. The
//! judge reads canonical JSON, typed JSON, precision rounding and trajectory
//! resolution from DIGEST.md on its own, so a bug in the reference can fail
//! the suite instead of being reproduced by the judge.
//!
//! Both inputs are brought to one *logical form* (see `logical`), where two
//! collections with the same logical content are the same JSON tree (floats
//! compared by bits); comparing is then a walk over the two trees. Decisions:
//! - numbers in plain documents (collection/record meta, `json` values,
//!   attributes, the force-field document) compare by value (`1.0 == 1`);
//!   typed values compare by their tag (f64 by bits, all NaNs equal,
//!   `-0.0 != 0.0`; integers exactly whatever their spelling);
//! - c64 parts compare at f32 width (the stored width);
//! - when the fixture has no `sequence_schema`, the judge derives one (union
//!   of the records' stated `trajectory.schema` and presented blocks; the
//!   per-step declaration the records state, else tags inferred by §7 from
//!   the values) and does not compare the columns' `nullable` flags, which a
//!   presentation cannot pin;
//! - a record's own `trajectory.schema` is checked for form but is not part
//!   of the logical content (a file keeps only `sequence_schema`);
//! - on trajectory updates, `structural_shape`, `targets` and column
//!   `precision` are compared in `sequence_schema` only;
//! - an optional key given as `null` is read as absent; an unknown key is refused.

mod logical;
mod null_rows;
mod typed;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use similar::TextDiff;

use logical::{collection, Side};
pub use typed::infer_tag;

/// At most this many differences are listed; one more entry says how many were left out.
pub const MAX_DIFFERENCES: usize = 200;

/// Longest rendering of one side of a difference, in characters.
const MAX_RENDER: usize = 200;

/// One difference between expected and actual, at a JSON path like
/// `records[3].trajectory.frames[2].blocks.atoms.columns.x.values[7]`.
///
/// Paths are in the logical form; a key that is not made of `A-Z a-z 0-9 _ -`
/// is written `["key"]` (JSON-quoted), so `forcefield.blocks["pair.lj%2Fcut"]`.
/// `expected` and `actual` are compact JSON of the logical values, `<absent>`
/// for a missing key, or `array of length n` when lengths differ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    /// Where the two collections differ.
    pub path: String,
    /// The expected value there.
    pub expected: String,
    /// The actual value there.
    pub actual: String,
}

/// Why a collection could not even be read as canonical JSON by the judge.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeError {
    /// JSON path of the offending value (empty for the document itself).
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

impl JudgeError {
    fn new(path: &str, message: impl Into<String>) -> Self {
        JudgeError {
            path: path.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for JudgeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(document)"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

impl std::error::Error for JudgeError {}

fn fail<T>(path: &str, message: impl Into<String>) -> Result<T, JudgeError> {
    Err(JudgeError::new(path, message))
}

/// `path.k`, or `path["k"]` when `k` is not a plain name.
fn key(path: &str, k: &str) -> String {
    let simple = !k.is_empty()
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match (simple, path.is_empty()) {
        (true, true) => k.to_string(),
        (true, false) => format!("{path}.{k}"),
        (false, _) => format!("{path}[{}]", Value::from(k)),
    }
}

fn idx(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// Whether `v` is a value of the meta tag `tag` in typed JSON (§7); the
/// error says where (`path`) and why. The inspection of written files
/// holds per-step values to their declared tags with it.
pub fn check_tag(tag: &str, v: &Value, path: &str) -> Result<(), String> {
    typed::tag_value(tag, v, path)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Whether a value that fits `tag` ([`check_tag`]) is in the one form a
/// writer writes for it: a typed integer within ±2^53 is a JSON number,
/// never a string (a reader refuses any other form; conventions.md, "Typed
/// JSON values"). The inspection holds a written file's typed values to it.
pub fn check_typed_form(tag: &str, v: &Value, path: &str) -> Result<(), String> {
    match typed::integer_form_problem(tag, v) {
        Some(problem) => Err(format!("{path}: {problem}")),
        None => Ok(()),
    }
}

/// `Err` when a typed integer beyond ±2^53 is a JSON number, not its
/// decimal string (a decision: readers accept both, writers write one).
pub fn check_big_integer_form(tag: &str, v: &Value, path: &str) -> Result<(), String> {
    match typed::big_integer_as_number(tag, v) {
        Some(problem) => Err(format!("{path}: {problem}")),
        None => Ok(()),
    }
}

/// The expected logical content of a fixture: resolved, normalized canonical JSON.
pub fn expected_logical(fixture: &Value) -> Result<Value, JudgeError> {
    collection(fixture, Side::Expected).map(|l| l.value)
}

/// The logical content a fixture states as stored: resolved and normalized
/// like [`expected_logical`], its values not rounded (see [`compare_stored`]).
pub fn stored_logical(fixture: &Value) -> Result<Value, JudgeError> {
    collection(fixture, Side::Stored).map(|l| l.value)
}

/// Normalizes what an implementation returned (masks, undefined cells, typed
/// values, defaults) into the same logical form, without resolving it.
pub fn actual_logical(read_back: &Value) -> Result<Value, JudgeError> {
    collection(read_back, Side::Actual).map(|l| l.value)
}

/// Compares a fixture with a read-back; an empty list means equal. A
/// `JudgeError` says which input could not be read (message prefixed
/// `expected:` or `actual:`).
pub fn compare(expected_fixture: &Value, actual: &Value) -> Result<Vec<Difference>, JudgeError> {
    compare_sides(expected_fixture, Side::Expected, actual)
}

/// [`compare`] for a fixture that states what a file holds, values as
/// stored: nothing is rounded to its declared precision on the expected
/// side either (a reader hands back the stored bits, off the grid or not;
/// frame.md, "Declared precision"). For read-accept cases, whose file a
/// recipe built rather than a writer.
pub fn compare_stored(
    stored_fixture: &Value,
    actual: &Value,
) -> Result<Vec<Difference>, JudgeError> {
    compare_sides(stored_fixture, Side::Stored, actual)
}

/// Compares a fixture with a written file's content as the harness's
/// inspection read it: every update as stored (a presentation, which is
/// resolved here, values never rounded). A writer that stored other
/// content than it was handed differs; one that restated what it could
/// have carried forward does not.
pub fn compare_file(
    expected_fixture: &Value,
    file_content: &Value,
) -> Result<Vec<Difference>, JudgeError> {
    let expected = expected_side(expected_fixture, Side::Expected)?;
    let file = collection(file_content, Side::File).map_err(|e| tagged("file", e))?;
    Ok(compare_logical(expected, file.value))
}

/// Every value under a fixture's null row that a written file stores
/// otherwise (frame.md: "The value stored under a null row is carried as
/// written"), which [`compare_file`] cannot see: the logical form drops
/// those values, as a reader must not interpret them. `file_content` as for
/// [`compare_file`].
pub fn null_row_differences(expected_fixture: &Value, file_content: &Value) -> Vec<Difference> {
    null_rows::differences(expected_fixture, file_content)
}

fn compare_sides(
    expected_fixture: &Value,
    side: Side,
    actual: &Value,
) -> Result<Vec<Difference>, JudgeError> {
    let expected = expected_side(expected_fixture, side)?;
    let a = actual_logical(actual).map_err(|e| tagged("actual", e))?;
    Ok(compare_logical(expected, a))
}

fn tagged(who: &str, e: JudgeError) -> JudgeError {
    JudgeError {
        message: format!("{who}: {}", e.message),
        ..e
    }
}

fn expected_side(fixture: &Value, side: Side) -> Result<logical::Logical, JudgeError> {
    collection(fixture, side).map_err(|e| tagged("expected", e))
}

/// Every difference between the expected logical form and another side's.
fn compare_logical(expected: logical::Logical, mut a: Value) -> Vec<Difference> {
    let mut e = expected.value;
    if expected.schema_derived {
        strip_nullable(&mut e);
        strip_nullable(&mut a);
    }
    let mut out = Collector::default();
    walk("", Some(&e), Some(&a), &mut out);
    if out.more > 0 {
        out.list.push(Difference {
            path: "...".into(),
            expected: format!("... and {} more", out.more),
            actual: format!("... and {} more", out.more),
        });
    }
    out.list
}

/// Removes `nullable` from every column declaration of `sequence_schema`.
fn strip_nullable(v: &mut Value) {
    let blocks = v
        .get_mut("sequence_schema")
        .and_then(|s| s.get_mut("blocks"))
        .and_then(Value::as_object_mut);
    for b in blocks.into_iter().flat_map(|b| b.values_mut()) {
        let cols = b.get_mut("columns").and_then(Value::as_object_mut);
        for c in cols.into_iter().flat_map(|c| c.values_mut()) {
            if let Some(c) = c.as_object_mut() {
                c.remove("nullable");
            }
        }
    }
}

#[derive(Default)]
struct Collector {
    list: Vec<Difference>,
    more: usize,
}

impl Collector {
    fn push(&mut self, path: &str, expected: String, actual: String) {
        if self.list.len() < MAX_DIFFERENCES {
            self.list.push(Difference {
                path: path.to_string(),
                expected,
                actual,
            });
        } else {
            self.more += 1;
        }
    }
}

fn render(v: Option<&Value>) -> String {
    let Some(v) = v else { return "<absent>".into() };
    let s = v.to_string();
    if s.chars().count() <= MAX_RENDER {
        s
    } else {
        let mut cut: String = s.chars().take(MAX_RENDER).collect();
        cut.push_str("...");
        cut
    }
}

fn walk(path: &str, e: Option<&Value>, a: Option<&Value>, out: &mut Collector) {
    match (e, a) {
        (Some(Value::Object(em)), Some(Value::Object(am))) => {
            let keys: BTreeSet<&String> = em.keys().chain(am.keys()).collect();
            for k in keys {
                walk(&key(path, k), em.get(k), am.get(k), out);
            }
        }
        (Some(Value::Array(ea)), Some(Value::Array(aa))) => {
            if ea.len() != aa.len() {
                out.push(
                    path,
                    format!("array of length {}", ea.len()),
                    format!("array of length {}", aa.len()),
                );
            }
            for (i, (x, y)) in ea.iter().zip(aa).enumerate() {
                walk(&idx(path, i), Some(x), Some(y), out);
            }
        }
        (Some(x), Some(y)) if leaf_eq(x, y) => {}
        _ => out.push(path, render(e), render(a)),
    }
}

/// Leaf equality: floats by bits (normal forms never hold a NaN number, so
/// this is "bit equality, all NaNs equal" for f64; `-0.0 != 0.0`).
fn leaf_eq(x: &Value, y: &Value) -> bool {
    match (x, y) {
        (Value::Number(a), Value::Number(b)) if a.is_f64() && b.is_f64() => {
            a.as_f64().map(f64::to_bits) == b.as_f64().map(f64::to_bits)
        }
        _ => x == y,
    }
}

/// A unified diff of the two logical forms pretty-printed, kept to at most
/// `max_lines` lines of hunks (a last line says how many were cut). Empty
/// when the two are equal.
pub fn short_diff(expected_logical: &Value, actual_logical: &Value, max_lines: usize) -> String {
    let pretty = |v: &Value| serde_json::to_string_pretty(v).unwrap_or_default() + "\n";
    let (e, a) = (pretty(expected_logical), pretty(actual_logical));
    let diff = TextDiff::from_lines(&e, &a);
    let mut lines = Vec::new();
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        lines.extend(hunk.to_string().lines().map(str::to_string));
    }
    if lines.is_empty() {
        return String::new();
    }
    let total = lines.len();
    let mut text = String::from("--- expected\n+++ actual\n");
    for l in lines.iter().take(max_lines) {
        text.push_str(l);
        text.push('\n');
    }
    if total > max_lines {
        text.push_str(&format!("... {} more lines\n", total - max_lines));
    }
    text
}
