//! Every message of the subprocess protocol has a JSON Schema in
//! `docs/schemas/`, and real traffic follows it: every line the harness and
//! the reference's `mrec adapter` exchange over a whole run, and a tiny
//! adapter's `unsupported` answers, are valid, by the `jsonschema` crate
//! and by the harness's own validator (`harness smoke`'s) alike. Broken
//! messages (each member of real ones removed or replaced) are judged the
//! same by both, so the small validator holds to the standard one.

use crate::subprocess::mrec_binary;
use harness::smoke::Schemas;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The schemas' base, so that `../canonical-json.schema.json` resolves.
const BASE: &str = "https://molrec.invalid/";

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The schemas as the `jsonschema` crate reads them, from the tree.
struct FromTree;

impl jsonschema::Retrieve for FromTree {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let rel = uri
            .as_str()
            .strip_prefix(BASE)
            .ok_or_else(|| format!("{uri} is not in the repository"))?;
        let text = std::fs::read_to_string(repository().join(rel))?;
        Ok(serde_json::from_str(&text)?)
    }
}

/// The standard validator of each message schema, by file name.
fn oracles() -> BTreeMap<&'static str, jsonschema::Validator> {
    harness::smoke::MESSAGES
        .iter()
        .map(|name| {
            let rel = format!("docs/schemas/{name}");
            let schema: Value = serde_json::from_str(
                &std::fs::read_to_string(repository().join(&rel)).expect("schema"),
            )
            .expect("JSON");
            jsonschema::meta::validate(&schema).expect("a valid draft 2020-12 schema");
            let validator = jsonschema::options()
                .with_base_uri(format!("{BASE}{rel}"))
                .with_retriever(FromTree)
                .build(&schema)
                .expect("the schema compiles");
            (*name, validator)
        })
        .collect()
}

/// Runs `harness run` with `command` (an adapter) between two `tee`s, and
/// returns the lines the harness sent and the lines the adapter answered.
fn traffic(tag: &str, command: &str, args: &[&str]) -> (Vec<String>, Vec<String>) {
    let dir = harness::runner::scratch_dir(&format!("traffic-{tag}"));
    std::fs::create_dir_all(&dir).expect("scratch");
    let (sent, answered) = (dir.join("sent.jsonl"), dir.join("answered.jsonl"));
    let wrapped = format!(
        "tee -a '{}' | {command} | tee -a '{}'",
        sent.display(),
        answered.display()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--no-interop", "--adapter"])
        .arg(format!("{tag}={wrapped}"))
        .args(args)
        .output()
        .expect("harness runs");
    assert!(
        out.status.code().is_some_and(|c| c < 2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = |p: &Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .expect("traffic")
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()
    };
    let traffic = (lines(&sent), lines(&answered));
    let _ = std::fs::remove_dir_all(&dir);
    traffic
}

/// Each line with the schema it must follow: requests by their `op`, the
/// first answer line is the greeting, the others by their `status` and the
/// `op` of the request with their id.
fn classify(sent: &[String], answered: &[String]) -> Vec<(&'static str, Value)> {
    let mut ops: BTreeMap<u64, String> = BTreeMap::new();
    let mut out = Vec::new();
    for line in sent {
        let v: Value = serde_json::from_str(line).expect("the harness sends JSON");
        let op = v["op"].as_str().expect("op").to_owned();
        if let Some(id) = v["id"].as_u64() {
            ops.insert(id, op.clone());
        }
        let schema = match op.as_str() {
            "write" => "request-write.json",
            "read" => "request-read.json",
            "bye" => "request-bye.json",
            other => panic!("unknown op {other}"),
        };
        out.push((schema, v));
    }
    for (i, line) in answered.iter().enumerate() {
        let v: Value = serde_json::from_str(line).expect("the adapter answers JSON");
        let schema = if i == 0 {
            "hello.json"
        } else {
            let op = ops
                .get(&v["id"].as_u64().expect("id"))
                .map(String::as_str)
                .expect("a request with the answer's id");
            match (v["status"].as_str().expect("status"), op) {
                ("ok", "write") => "answer-ok.json",
                ("ok", _) => "answer-read.json",
                ("refused", _) => "answer-refused.json",
                ("unsupported", _) => "answer-unsupported.json",
                (other, _) => panic!("unknown status {other}"),
            }
        };
        out.push((schema, v));
    }
    out
}

#[test]
fn real_traffic_follows_the_schema_of_every_message() {
    let mrec = mrec_binary();
    let (sent, answered) = traffic("ref", &format!("'{}' adapter", mrec.display()), &[]);
    let mut messages = classify(&sent, &answered);
    // An adapter that does nothing answers "unsupported".
    let tiny = r#"printf '%s\n' '{"type":"hello","protocol":1,"name":"tiny","version":"0","capabilities":{"write":true,"read":true}}'; while IFS= read -r line; do case "$line" in *'"op":"bye"'*) break ;; esac; id=${line#'{"id":'}; id=${id%%,*}; printf '{"id":%s,"status":"unsupported"}\n' "$id"; done"#;
    let script = harness::runner::scratch_dir("traffic-tiny-script");
    std::fs::write(&script, tiny).expect("script");
    let (sent, answered) = traffic(
        "tiny",
        &format!("sh '{}'", script.display()),
        &["--filter", "example-round-trip"],
    );
    let _ = std::fs::remove_file(&script);
    messages.extend(classify(&sent, &answered));

    let oracles = oracles();
    let ours = Schemas::embedded().expect("the embedded schemas");
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (schema, message) in &messages {
        let standard: Vec<String> = oracles[schema]
            .iter_errors(message)
            .take(3)
            .map(|e| format!("{e} at {}", e.instance_path()))
            .collect();
        assert!(standard.is_empty(), "{schema}: {standard:?}");
        let own = ours.validate(schema, message);
        assert!(own.is_empty(), "{schema}: {own:?}");
        *seen.entry(schema).or_default() += 1;
    }
    for name in harness::smoke::MESSAGES {
        assert!(
            seen.get(name).is_some_and(|n| *n > 0),
            "no {name} in {seen:?}"
        );
    }
    assert!(seen["answer-read.json"] > 50, "{seen:?}");
}

/// Every member of a message: removed (in an object) or replaced by a
/// value of each JSON type; the messages these make.
fn broken(message: &Value) -> Vec<Value> {
    let mut pointers = Vec::new();
    fn walk(v: &Value, at: String, out: &mut Vec<String>) {
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                    walk(x, here.clone(), out);
                    out.push(here);
                }
            }
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    let here = format!("{at}/{i}");
                    walk(x, here.clone(), out);
                    out.push(here);
                }
            }
            _ => {}
        }
    }
    walk(message, String::new(), &mut pointers);
    let replacements = [
        Value::Null,
        Value::Bool(true),
        Value::from(-1),
        Value::from(1.5),
        Value::from("x"),
        Value::from("NaN"),
        Value::Array(vec![]),
        serde_json::json!({}),
    ];
    let mut out = Vec::new();
    for pointer in pointers {
        let (parent, last) = pointer.rsplit_once('/').expect("a member");
        let mut removed = message.clone();
        if let Some(Value::Object(o)) = removed.pointer_mut(parent) {
            o.remove(&last.replace("~1", "/").replace("~0", "~"));
            out.push(removed);
        }
        for r in &replacements {
            let mut changed = message.clone();
            if let Some(slot) = changed.pointer_mut(&pointer) {
                *slot = r.clone();
                out.push(changed);
            }
        }
    }
    out
}

#[test]
fn broken_messages_are_judged_alike_by_both_validators() {
    let oracles = oracles();
    let ours = Schemas::embedded().expect("the embedded schemas");
    let collection: Value = serde_json::from_str(
        &std::fs::read_to_string(repository().join("fixtures/examples/water-and-ammonia.json"))
            .expect("fixture"),
    )
    .expect("JSON");
    let samples = [
        (
            "hello.json",
            serde_json::json!({"type": "hello", "protocol": 1, "name": "x", "version": "1",
                "capabilities": {"write": true, "read": false}}),
        ),
        (
            "request-write.json",
            serde_json::json!({"id": 1, "op": "write", "path": "/x", "collection": collection}),
        ),
        (
            "request-read.json",
            serde_json::json!({"id": 2, "op": "read", "path": "/x"}),
        ),
        ("request-bye.json", serde_json::json!({"op": "bye"})),
        (
            "answer-ok.json",
            serde_json::json!({"id": 3, "status": "ok"}),
        ),
        (
            "answer-read.json",
            serde_json::json!({"id": 4, "status": "ok", "collection": collection}),
        ),
        (
            "answer-refused.json",
            serde_json::json!({"id": 5, "status": "refused", "message": "m", "clause": "a.b"}),
        ),
        (
            "answer-unsupported.json",
            serde_json::json!({"id": 6, "status": "unsupported"}),
        ),
    ];
    let (mut judged, mut invalid) = (0, 0);
    for (schema, sample) in &samples {
        assert!(oracles[schema].is_valid(sample), "{schema}: the sample");
        for message in broken(sample) {
            let standard = oracles[schema].is_valid(&message);
            let own = ours.validate(schema, &message);
            assert_eq!(
                standard,
                own.is_empty(),
                "{schema}: jsonschema says {}, the harness {own:?}, of {}",
                if standard { "valid" } else { "invalid" },
                serde_json::to_string(&message).unwrap_or_default()
            );
            judged += 1;
            invalid += usize::from(!standard);
        }
    }
    assert!(
        judged > 1000 && invalid > 300,
        "{judged} judged, {invalid} invalid"
    );
}
