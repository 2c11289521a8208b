//! The protocol's JSON Schemas (`docs/schemas/*.json`, and
//! `docs/canonical-json.schema.json` for the collections in them), as
//! embedded in the binary, and a small validator of the part of JSON
//! Schema (draft 2020-12) they use.
//!
//! Why not the `jsonschema` crate (the tests' oracle): as a dependency of
//! the binary it would bring some 45 crates (regular expressions, big
//! numbers, URI handling) into every `cargo install`, for a dozen
//! keywords. This validator knows exactly those: `type`, `enum`, `const`,
//! `minimum`, `maximum`, `minItems`, `maxItems`, `pattern` (anchors,
//! literals, classes, `.` and `? * +`), `required`, `properties`,
//! `additionalProperties`, `items`, `prefixItems`, `anyOf`, `allOf`, `if` /
//! `then` / `else`, `$ref` (within a file and to another file of the
//! bundle) and `$defs`; annotations are skipped. A schema that uses
//! anything else is refused when it loads, never half-checked, and the
//! tests hold its verdicts to `jsonschema`'s on real traffic and on broken
//! messages.

use serde_json::{Map, Number, Value};
use std::cmp::Ordering;
use std::collections::BTreeMap;

/// Keywords that only annotate: skipped.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$comment",
    "title",
    "description",
    "default",
    "examples",
];

/// Keywords this validator checks (and `$defs`, which holds schemas).
const KNOWN: &[&str] = &[
    "type",
    "enum",
    "const",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "pattern",
    "required",
    "properties",
    "additionalProperties",
    "items",
    "prefixItems",
    "anyOf",
    "allOf",
    "if",
    "then",
    "else",
    "$ref",
    "$defs",
];

/// The protocol's messages' schemas, under `docs/schemas/` (beside them,
/// `report.schema.json` describes a report, not a message).
pub const MESSAGES: &[&str] = &[
    "hello.json",
    "request-write.json",
    "request-read.json",
    "request-bye.json",
    "answer-ok.json",
    "answer-read.json",
    "answer-refused.json",
    "answer-unsupported.json",
];

/// The schema of the collections in messages, which theirs refer to.
const COLLECTION: &str = "docs/canonical-json.schema.json";

/// How deep schemas may nest through `$ref` and subschemas: far beyond the
/// protocol's, short of a stack overflow on a reference cycle.
const MAX_DEPTH: usize = 256;

/// One way an instance breaks a schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// Where in the instance, as a JSON pointer (`""` for the whole of it).
    pub at: String,
    /// What is wrong, in words.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.at.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "at {}: {}", self.at, self.message)
        }
    }
}

/// Schema files by their path from the repository root.
#[derive(Clone, Debug)]
pub struct Schemas {
    files: BTreeMap<String, Value>,
}

impl Schemas {
    /// The protocol's schemas as embedded in this binary, each checked to
    /// use only what this validator knows.
    pub fn embedded() -> Result<Schemas, String> {
        let mut files = BTreeMap::new();
        let paths = MESSAGES
            .iter()
            .map(|m| format!("docs/schemas/{m}"))
            .chain([COLLECTION.to_owned()]);
        for path in paths {
            let bytes = crate::data::file(&path)
                .ok_or_else(|| format!("{path}: not in the data embedded in this binary"))?;
            let value: Value =
                serde_json::from_slice(bytes).map_err(|e| format!("{path}: not JSON: {e}"))?;
            files.insert(path, value);
        }
        Schemas::new(files)
    }

    /// Schemas from `files` (path -> schema), each checked to use only
    /// what this validator knows.
    pub fn new(files: BTreeMap<String, Value>) -> Result<Schemas, String> {
        for (path, schema) in &files {
            supported(schema, path, "#")?;
        }
        Ok(Schemas { files })
    }

    /// The violations of `instance` against the schema file `name` (under
    /// `docs/schemas/`, such as `hello.json`), in the order found; empty
    /// when it is valid.
    pub fn validate(&self, name: &str, instance: &Value) -> Vec<Violation> {
        let path = format!("docs/schemas/{name}");
        let mut out = Vec::new();
        match self.files.get(&path) {
            Some(schema) => self.check(&path, schema, instance, "", 0, &mut out),
            None => out.push(Violation {
                at: String::new(),
                message: format!("no schema {path}"),
            }),
        }
        out
    }

    /// Whether `instance` is valid against `schema` (of the file `file`).
    fn valid(&self, file: &str, schema: &Value, instance: &Value, depth: usize) -> bool {
        let mut out = Vec::new();
        self.check(file, schema, instance, "", depth, &mut out);
        out.is_empty()
    }

    fn check(
        &self,
        file: &str,
        schema: &Value,
        instance: &Value,
        at: &str,
        depth: usize,
        out: &mut Vec<Violation>,
    ) {
        let fail = |out: &mut Vec<Violation>, message: String| {
            out.push(Violation {
                at: at.to_owned(),
                message,
            })
        };
        if depth > MAX_DEPTH {
            fail(out, "the schemas nest too deep (a reference cycle?)".into());
            return;
        }
        let schema = match schema {
            Value::Bool(true) => return,
            Value::Bool(false) => {
                fail(out, "is not allowed here".into());
                return;
            }
            Value::Object(schema) => schema,
            _ => return,
        };
        if let Some(Value::String(reference)) = schema.get("$ref") {
            match self.resolve(file, reference) {
                Some((target_file, target)) => {
                    self.check(&target_file, target, instance, at, depth + 1, out)
                }
                None => fail(
                    out,
                    format!("the schema's reference {reference} leads nowhere"),
                ),
            }
        }
        if let Some(types) = schema.get("type") {
            let names: Vec<&str> = match types {
                Value::String(t) => vec![t.as_str()],
                Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            if !names.iter().any(|t| has_type(instance, t)) {
                fail(
                    out,
                    format!("is {}, not {}", type_name(instance), names.join(" or ")),
                );
            }
        }
        if let Some(Value::Array(options)) = schema.get("enum") {
            if !options.iter().any(|o| equal(o, instance)) {
                let listed: Vec<String> = options.iter().map(Value::to_string).collect();
                fail(
                    out,
                    format!("is {}, not one of {}", short(instance), listed.join(", ")),
                );
            }
        }
        if let Some(expected) = schema.get("const") {
            if !equal(expected, instance) {
                fail(out, format!("is {}, not {expected}", short(instance)));
            }
        }
        if let Value::Number(n) = instance {
            if let Some(Value::Number(min)) = schema.get("minimum") {
                if compare(n, min) == Some(Ordering::Less) {
                    fail(out, format!("is {n}, below the minimum {min}"));
                }
            }
            if let Some(Value::Number(max)) = schema.get("maximum") {
                if compare(n, max) == Some(Ordering::Greater) {
                    fail(out, format!("is {n}, above the maximum {max}"));
                }
            }
        }
        if let (Value::String(text), Some(Value::String(pattern))) =
            (instance, schema.get("pattern"))
        {
            if Pattern::parse(pattern).is_ok_and(|p| !p.is_match(text)) {
                fail(out, format!("{} does not match {pattern}", short(instance)));
            }
        }
        if let Value::Array(items) = instance {
            let count = |key: &str| schema.get(key).and_then(Value::as_u64);
            if let Some(min) = count("minItems") {
                if (items.len() as u64) < min {
                    fail(out, format!("has {} items, fewer than {min}", items.len()));
                }
            }
            if let Some(max) = count("maxItems") {
                if items.len() as u64 > max {
                    fail(out, format!("has {} items, more than {max}", items.len()));
                }
            }
            let prefix = match schema.get("prefixItems") {
                Some(Value::Array(p)) => p.as_slice(),
                _ => &[],
            };
            for (i, item) in items.iter().enumerate() {
                let sub = match prefix.get(i) {
                    Some(s) => Some(s),
                    None => schema.get("items"),
                };
                if let Some(sub) = sub {
                    let here = format!("{at}/{i}");
                    self.check(file, sub, item, &here, depth + 1, out);
                }
            }
        }
        if let Value::Object(members) = instance {
            self.check_object(file, schema, members, at, depth, out);
        }
        if let Some(Value::Array(all)) = schema.get("allOf") {
            for sub in all {
                self.check(file, sub, instance, at, depth + 1, out);
            }
        }
        if let Some(Value::Array(any)) = schema.get("anyOf") {
            if !any.iter().any(|s| self.valid(file, s, instance, depth + 1)) {
                fail(
                    out,
                    format!(
                        "{} matches none of the {} forms allowed here",
                        short(instance),
                        any.len()
                    ),
                );
            }
        }
        if let Some(condition) = schema.get("if") {
            let branch = if self.valid(file, condition, instance, depth + 1) {
                schema.get("then")
            } else {
                schema.get("else")
            };
            if let Some(branch) = branch {
                self.check(file, branch, instance, at, depth + 1, out);
            }
        }
    }

    fn check_object(
        &self,
        file: &str,
        schema: &Map<String, Value>,
        members: &Map<String, Value>,
        at: &str,
        depth: usize,
        out: &mut Vec<Violation>,
    ) {
        if let Some(Value::Array(required)) = schema.get("required") {
            for name in required.iter().filter_map(Value::as_str) {
                if !members.contains_key(name) {
                    out.push(Violation {
                        at: at.to_owned(),
                        message: format!("has no `{name}`, which is required"),
                    });
                }
            }
        }
        let properties = match schema.get("properties") {
            Some(Value::Object(p)) => Some(p),
            _ => None,
        };
        for (name, value) in members {
            let here = format!("{at}/{}", name.replace('~', "~0").replace('/', "~1"));
            match properties.and_then(|p| p.get(name)) {
                Some(sub) => self.check(file, sub, value, &here, depth + 1, out),
                None => {
                    if let Some(extra) = schema.get("additionalProperties") {
                        if extra == &Value::Bool(false) {
                            out.push(Violation {
                                at: at.to_owned(),
                                message: format!("has `{name}`, which is not allowed here"),
                            });
                        } else {
                            self.check(file, extra, value, &here, depth + 1, out);
                        }
                    }
                }
            }
        }
    }

    /// The schema a `$ref` written in `file` names: `[other-file]#pointer`,
    /// the file relative to `file`'s directory.
    fn resolve(&self, file: &str, reference: &str) -> Option<(String, &Value)> {
        let (target, pointer) = reference.split_once('#').unwrap_or((reference, ""));
        let target = if target.is_empty() {
            file.to_owned()
        } else {
            let mut parts: Vec<&str> = file.split('/').collect();
            parts.pop();
            for part in target.split('/') {
                match part {
                    ".." => {
                        parts.pop()?;
                    }
                    "." | "" => {}
                    part => parts.push(part),
                }
            }
            parts.join("/")
        };
        let document = self.files.get(&target)?;
        let found = if pointer.is_empty() {
            document
        } else {
            document.pointer(pointer)?
        };
        Some((target, found))
    }
}

/// Checks that `schema` (at `where_` in `file`) uses only known keywords
/// and patterns this validator reads.
fn supported(schema: &Value, file: &str, where_: &str) -> Result<(), String> {
    let schema = match schema {
        Value::Bool(_) => return Ok(()),
        Value::Object(schema) => schema,
        _ => {
            return Err(format!(
                "{file} {where_}: a schema is an object or a boolean"
            ))
        }
    };
    for (key, value) in schema {
        let here = format!("{where_}/{key}");
        if ANNOTATIONS.contains(&key.as_str()) {
            continue;
        }
        if !KNOWN.contains(&key.as_str()) {
            return Err(format!(
                "{file} {here}: the keyword `{key}` is not one the harness's validator knows"
            ));
        }
        match (key.as_str(), value) {
            ("properties" | "$defs", Value::Object(subs)) => {
                for (name, sub) in subs {
                    supported(sub, file, &format!("{here}/{name}"))?;
                }
            }
            ("prefixItems" | "anyOf" | "allOf", Value::Array(subs)) => {
                for (i, sub) in subs.iter().enumerate() {
                    supported(sub, file, &format!("{here}/{i}"))?;
                }
            }
            ("items" | "additionalProperties" | "if" | "then" | "else", sub) => {
                supported(sub, file, &here)?
            }
            ("pattern", Value::String(p)) => {
                Pattern::parse(p).map_err(|e| format!("{file} {here}: {e}"))?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn has_type(value: &Value, name: &str) -> bool {
    match (name, value) {
        ("null", Value::Null)
        | ("boolean", Value::Bool(_))
        | ("object", Value::Object(_))
        | ("array", Value::Array(_))
        | ("string", Value::String(_))
        | ("number", Value::Number(_)) => true,
        // JSON Schema counts 1.0 as an integer.
        ("integer", Value::Number(n)) => {
            n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => false,
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The value for a message: itself when short, else its type.
fn short(value: &Value) -> String {
    match value {
        Value::Array(_) | Value::Object(_) => type_name(value).to_owned(),
        v => {
            let text = v.to_string();
            if text.chars().count() > 60 {
                type_name(v).to_owned()
            } else {
                text
            }
        }
    }
}

/// Numbers compared by value, whatever their representation.
fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    let exact = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (exact(a), exact(b)) {
        (Some(x), Some(y)) => Some(x.cmp(&y)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

/// JSON Schema's equality: numbers by value (1 equals 1.0).
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare(x, y) == Some(Ordering::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

/// A regular expression of the small kind the schemas use: `^` and `$`,
/// literal characters (`\` escapes one), classes (`[0-9a-z]`, `[^...]`),
/// `.`, each optionally followed by `?`, `*` or `+`. Unanchored, it
/// matches anywhere in the text, as JSON Schema's `pattern` does.
#[derive(Clone, Debug)]
struct Pattern {
    start: bool,
    end: bool,
    atoms: Vec<(Atom, Repeat)>,
}

#[derive(Clone, Debug)]
enum Atom {
    Char(char),
    Any,
    Class {
        negated: bool,
        ranges: Vec<(char, char)>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Repeat {
    One,
    Optional,
    Many,
    OneOrMore,
}

impl Atom {
    fn matches(&self, c: char) -> bool {
        match self {
            Atom::Char(x) => *x == c,
            Atom::Any => c != '\n',
            Atom::Class { negated, ranges } => {
                ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated
            }
        }
    }
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, String> {
        let unsupported = |what: &str| {
            Err(format!(
                "the pattern {text:?} uses {what}, which the harness's validator does not read"
            ))
        };
        let mut chars: Vec<char> = text.chars().collect();
        let start = chars.first() == Some(&'^');
        if start {
            chars.remove(0);
        }
        let end =
            chars.last() == Some(&'$') && !(chars.len() >= 2 && chars[chars.len() - 2] == '\\');
        if end {
            chars.pop();
        }
        let mut atoms = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let atom = match chars[i] {
                '\\' => {
                    i += 1;
                    match chars.get(i) {
                        Some(c) if !c.is_alphanumeric() => Atom::Char(*c),
                        _ => return unsupported("an escape class"),
                    }
                }
                '.' => Atom::Any,
                '[' => {
                    let mut j = i + 1;
                    let negated = chars.get(j) == Some(&'^');
                    if negated {
                        j += 1;
                    }
                    let mut ranges = Vec::new();
                    while j < chars.len() && chars[j] != ']' {
                        let lo = chars[j];
                        if lo == '\\' || lo == '[' {
                            return unsupported("an escape or `[` in a class");
                        }
                        if chars.get(j + 1) == Some(&'-')
                            && chars.get(j + 2).is_some_and(|c| *c != ']')
                        {
                            ranges.push((lo, chars[j + 2]));
                            j += 3;
                        } else {
                            ranges.push((lo, lo));
                            j += 1;
                        }
                    }
                    if j >= chars.len() {
                        return unsupported("an unclosed class");
                    }
                    i = j;
                    Atom::Class { negated, ranges }
                }
                '(' | ')' | '|' | '{' | '}' | '?' | '*' | '+' | '^' | '$' => {
                    return unsupported(&format!("`{}`", chars[i]))
                }
                c => Atom::Char(c),
            };
            i += 1;
            let repeat = match chars.get(i) {
                Some('?') => Repeat::Optional,
                Some('*') => Repeat::Many,
                Some('+') => Repeat::OneOrMore,
                _ => Repeat::One,
            };
            if repeat != Repeat::One {
                i += 1;
            }
            atoms.push((atom, repeat));
        }
        Ok(Pattern { start, end, atoms })
    }

    fn is_match(&self, text: &str) -> bool {
        let chars: Vec<char> = text.chars().collect();
        let starts = if self.start { 0..=0 } else { 0..=chars.len() };
        starts.into_iter().any(|s| self.match_at(&chars, s, 0))
    }

    /// Whether atoms `k..` match `chars[at..]` (to the end, if anchored).
    fn match_at(&self, chars: &[char], at: usize, k: usize) -> bool {
        let Some((atom, repeat)) = self.atoms.get(k) else {
            return !self.end || at == chars.len();
        };
        let (least, most) = match repeat {
            Repeat::One => (1, 1),
            Repeat::Optional => (0, 1),
            Repeat::Many => (0, usize::MAX),
            Repeat::OneOrMore => (1, usize::MAX),
        };
        let mut n = 0;
        while n < most && at + n < chars.len() && atom.matches(chars[at + n]) {
            n += 1;
        }
        // Greedy, then backing off one character at a time.
        (least..=n)
            .rev()
            .any(|taken| self.match_at(chars, at + taken, k + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_message_has_a_schema_and_each_loads() {
        let schemas = Schemas::embedded().expect("the protocol's schemas");
        let beside: Vec<&str> = crate::data::files_under("docs/schemas/")
            .map(|(p, _)| &p["docs/schemas/".len()..])
            .filter(|name| *name != "report.schema.json")
            .collect();
        let mut listed = MESSAGES.to_vec();
        listed.sort();
        assert_eq!(
            beside, listed,
            "a schema in docs/schemas/ that MESSAGES does not list"
        );
        assert_eq!(schemas.files.len(), MESSAGES.len() + 1);
    }

    #[test]
    fn patterns_match_as_json_schema_says() {
        let p = |s: &str| Pattern::parse(s).expect(s);
        assert!(p("^-?[0-9]+$").is_match("-12"));
        assert!(p("^-?[0-9]+$").is_match("7"));
        assert!(!p("^-?[0-9]+$").is_match("1.5"));
        assert!(!p("^-?[0-9]+$").is_match(""));
        assert!(!p("^[0-9]+$").is_match("-3"));
        assert!(p("b+c").is_match("aabbbcd"));
        assert!(p("^a.c$").is_match("abc"));
        assert!(p("[^0-9]").is_match("12x"));
        assert!(!p("[^0-9]").is_match("123"));
        for unsupported in ["(a|b)", "a{2}", "\\d+", "[a"] {
            assert!(Pattern::parse(unsupported).is_err(), "{unsupported}");
        }
    }

    #[test]
    fn unknown_keywords_are_refused_when_loading() {
        let files = |schema: Value| BTreeMap::from([("docs/schemas/x.json".to_owned(), schema)]);
        assert!(Schemas::new(files(json!({"type": "object", "title": "t"}))).is_ok());
        let e =
            Schemas::new(files(json!({"properties": {"a": {"uniqueItems": true}}}))).unwrap_err();
        assert!(e.contains("uniqueItems"), "{e}");
        let e = Schemas::new(files(json!({"pattern": "(a|b)"}))).unwrap_err();
        assert!(e.contains("does not read"), "{e}");
    }

    #[test]
    fn numbers_compare_by_value() {
        let schemas = Schemas::embedded().expect("schemas");
        let ok = |v: Value| schemas.validate("answer-ok.json", &v);
        assert!(ok(json!({"id": 1.0, "status": "ok"})).is_empty());
        assert!(ok(json!({"id": 18446744073709551615u64, "status": "ok"})).is_empty());
        assert_eq!(
            ok(json!({"id": -1, "status": "ok"}))[0].to_string(),
            "at /id: is -1, below the minimum 0"
        );
        assert_eq!(
            ok(json!({"id": 1.5, "status": "ok"}))[0].to_string(),
            "at /id: is a number, not integer"
        );
    }
}
