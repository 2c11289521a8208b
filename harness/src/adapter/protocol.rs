//! The subprocess protocol, version 1: encoding of requests and strict
//! decoding of the greeting and of answers.
//!
//! One JSON object per line. The implementation greets first
//! (`{"type": "hello", ...}`), then answers each request (`write`, `read`)
//! with one line carrying the request's `id`; `{"op": "bye"}` asks it to
//! exit. `docs/adapters.md` is the guide for third parties and
//! `docs/schemas/*.json` hold one JSON Schema per message.
//!
//! Decoding is strict about what it needs (the id, a known status, the
//! fields each status requires) and ignores keys it does not know, so the
//! protocol can grow without breaking adapters.

use serde::Serialize;
use serde_json::{Map, Value};

use super::Description;

/// The protocol version this harness speaks; the greeting must carry it.
pub const PROTOCOL_VERSION: u64 = 1;

/// The operation a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Write a collection to a new file.
    Write,
    /// Read a file back to a collection.
    Read,
}

impl Op {
    /// The operation's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::Read => "read",
        }
    }
}

/// A well-formed answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// `"status": "ok"`; carries the collection for a read, `None` for a write.
    Ok(Option<Value>),
    /// `"status": "refused"`.
    Refused {
        /// The refusal's explanation.
        message: String,
        /// The clause id named, if any.
        clause: Option<String>,
    },
    /// `"status": "unsupported"`.
    Unsupported,
}

#[derive(Serialize)]
struct WriteRequest<'a> {
    id: u64,
    op: &'static str,
    path: &'a str,
    collection: &'a Value,
}

#[derive(Serialize)]
struct ReadRequest<'a> {
    id: u64,
    op: &'static str,
    path: &'a str,
}

/// The line (without its newline) of a `write` request.
pub fn write_request(id: u64, path: &str, collection: &Value) -> Result<String, String> {
    let request = WriteRequest {
        id,
        op: Op::Write.as_str(),
        path,
        collection,
    };
    serde_json::to_string(&request).map_err(|e| format!("cannot encode the write request: {e}"))
}

/// The line (without its newline) of a `read` request.
pub fn read_request(id: u64, path: &str) -> String {
    let request = ReadRequest {
        id,
        op: Op::Read.as_str(),
        path,
    };
    // Serializing a struct of an integer and strings cannot fail.
    serde_json::to_string(&request).unwrap_or_default()
}

/// The line (without its newline) that asks the implementation to exit.
pub fn bye_request() -> String {
    r#"{"op":"bye"}"#.to_string()
}

/// Decodes the greeting line into the implementation's description.
pub fn parse_hello(line: &str) -> Result<Description, String> {
    let mut object = parse_object(line)?;
    match object.get("type") {
        Some(Value::String(t)) if t == "hello" => {}
        _ => {
            return Err(format!(
                "the first line is not a greeting (`\"type\": \"hello\"`): {}",
                excerpt(line)
            ))
        }
    }
    match object.get("protocol") {
        Some(Value::Number(n)) if n.as_u64() == Some(PROTOCOL_VERSION) => {}
        Some(other) => {
            return Err(format!(
                "the implementation speaks protocol {other}, the harness speaks {PROTOCOL_VERSION}"
            ))
        }
        None => return Err("the greeting has no `protocol`".to_string()),
    }
    object.remove("type");
    object.remove("protocol");
    serde_json::from_value(Value::Object(object)).map_err(|e| format!("malformed greeting: {e}"))
}

/// Decodes the answer line to request `id` (operation `op`).
///
/// Every deviation (not a JSON object, another id, an unknown status, a
/// missing required field) is an `Err` describing it.
pub fn parse_answer(line: &str, id: u64, op: Op) -> Result<Answer, String> {
    let mut object = parse_object(line)?;
    match object.get("id") {
        Some(Value::Number(n)) if n.as_u64() == Some(id) => {}
        Some(other) => return Err(format!("answer to request {id} carries id {other}")),
        None => {
            return Err(format!(
                "answer to request {id} has no id: {}",
                excerpt(line)
            ))
        }
    }
    let status = match object.get("status") {
        Some(Value::String(s)) => s.clone(),
        _ => return Err(format!("answer to request {id} has no string `status`")),
    };
    match status.as_str() {
        "ok" => match op {
            Op::Write => Ok(Answer::Ok(None)),
            Op::Read => match object.remove("collection") {
                Some(collection @ Value::Object(_)) => Ok(Answer::Ok(Some(collection))),
                Some(_) => Err(format!(
                    "read answer {id}: `collection` is not a JSON object"
                )),
                None => Err(format!("read answer {id}: status ok without `collection`")),
            },
        },
        "refused" => {
            let message = match object.remove("message") {
                Some(Value::String(m)) => m,
                _ => return Err(format!("refusal {id} has no string `message`")),
            };
            let clause = match object.remove("clause") {
                None | Some(Value::Null) => None,
                Some(Value::String(c)) => Some(c),
                Some(other) => {
                    return Err(format!(
                        "refusal {id}: `clause` is neither a string nor null: {other}"
                    ))
                }
            };
            Ok(Answer::Refused { message, clause })
        }
        "unsupported" => Ok(Answer::Unsupported),
        other => Err(format!(
            "answer to request {id} has unknown status {other:?}"
        )),
    }
}

fn parse_object(line: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(format!("not a JSON object: {}", excerpt(line))),
        Err(e) => Err(format!("not JSON ({e}): {}", excerpt(line))),
    }
}

/// The start of `line`, cut at 200 bytes on a character boundary, for
/// error messages.
pub(crate) fn excerpt(line: &str) -> String {
    const MAX: usize = 200;
    if line.len() <= MAX {
        return format!("{line:?}");
    }
    let mut end = MAX;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &line[..end], line.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hello_decodes() {
        let line = r#"{"type":"hello","protocol":1,"name":"x","version":"0.1","capabilities":{"write":false,"read":true},"extra":1}"#;
        let d = parse_hello(line).unwrap();
        assert_eq!(d.name, "x");
        assert_eq!(d.version, "0.1");
        assert!(!d.capabilities.write);
        assert!(d.capabilities.read);
    }

    #[test]
    fn hello_rejects_other_protocols_and_shapes() {
        for line in [
            r#"{"type":"hello","protocol":2,"name":"x","version":"1","capabilities":{"write":true,"read":true}}"#,
            r#"{"type":"hello","name":"x","version":"1","capabilities":{"write":true,"read":true}}"#,
            r#"{"type":"hi","protocol":1,"name":"x","version":"1","capabilities":{"write":true,"read":true}}"#,
            r#"{"type":"hello","protocol":1,"name":"x","version":"1"}"#,
            r#"{"type":"hello","protocol":1,"name":"x","version":"1","capabilities":{"write":1,"read":true}}"#,
            r#"[1]"#,
            "hello",
        ] {
            assert!(parse_hello(line).is_err(), "{line}");
        }
    }

    #[test]
    fn answers_decode() {
        assert_eq!(
            parse_answer(r#"{"id":3,"status":"ok"}"#, 3, Op::Write),
            Ok(Answer::Ok(None))
        );
        assert_eq!(
            parse_answer(
                r#"{"id":3,"status":"ok","collection":{"a":1}}"#,
                3,
                Op::Read
            ),
            Ok(Answer::Ok(Some(json!({"a": 1}))))
        );
        assert_eq!(
            parse_answer(
                r#"{"id":3,"status":"refused","message":"m","clause":"c.d"}"#,
                3,
                Op::Read
            ),
            Ok(Answer::Refused {
                message: "m".into(),
                clause: Some("c.d".into())
            })
        );
        assert_eq!(
            parse_answer(
                r#"{"id":3,"status":"refused","message":"m","clause":null}"#,
                3,
                Op::Write
            ),
            Ok(Answer::Refused {
                message: "m".into(),
                clause: None
            })
        );
        assert_eq!(
            parse_answer(r#"{"id":3,"status":"unsupported"}"#, 3, Op::Write),
            Ok(Answer::Unsupported)
        );
    }

    #[test]
    fn malformed_answers_are_errors() {
        for (line, op) in [
            ("garbage", Op::Write),
            ("", Op::Write),
            ("[]", Op::Write),
            (r#"{"id":4,"status":"ok"}"#, Op::Write),
            (r#"{"id":"3","status":"ok"}"#, Op::Write),
            (r#"{"status":"ok"}"#, Op::Write),
            (r#"{"id":3,"status":"fine"}"#, Op::Write),
            (r#"{"id":3}"#, Op::Write),
            (r#"{"id":3,"status":"ok"}"#, Op::Read),
            (r#"{"id":3,"status":"ok","collection":[1]}"#, Op::Read),
            (r#"{"id":3,"status":"refused"}"#, Op::Read),
            (
                r#"{"id":3,"status":"refused","message":"m","clause":7}"#,
                Op::Read,
            ),
        ] {
            assert!(parse_answer(line, 3, op).is_err(), "{line}");
        }
    }

    #[test]
    fn requests_encode() {
        let w = write_request(1, "/a b/x.mrec.lmdb", &json!({"meta": {}})).unwrap();
        let w: Value = serde_json::from_str(&w).unwrap();
        assert_eq!(
            w,
            json!({"id": 1, "op": "write", "path": "/a b/x.mrec.lmdb", "collection": {"meta": {}}})
        );
        let r: Value = serde_json::from_str(&read_request(2, "/x")).unwrap();
        assert_eq!(r, json!({"id": 2, "op": "read", "path": "/x"}));
        let b: Value = serde_json::from_str(&bye_request()).unwrap();
        assert_eq!(b, json!({"op": "bye"}));
    }

    #[test]
    fn excerpt_cuts_on_char_boundary() {
        let long = "é".repeat(300);
        let e = excerpt(&long);
        assert!(e.contains("600 bytes"));
    }
}
