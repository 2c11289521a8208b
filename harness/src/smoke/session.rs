//! The exchanges of `harness smoke` with an adapter: its greeting, and its
//! answers to the requests the runner makes through [`Session`] (an
//! [`Implementation`]), each line validated against the protocol's schema
//! and every mistake said in a sentence that names the fix.

use super::schema::{Schemas, Violation};
use super::wire::{Read, Wire};
use super::{seconds, Mark, Step};
use crate::adapter::protocol::{self, Op, PROTOCOL_VERSION};
use crate::adapter::{Capabilities, Description, Implementation, Outcome};
use serde_json::{Map, Value};
use std::path::Path;
use std::time::{Duration, Instant};

/// How many stray lines a sentence quotes.
const QUOTED: usize = 3;

/// A line as a sentence quotes it: in quotes, cut at 120 characters.
fn quote(line: &str) -> String {
    let cut: String = line.chars().take(120).collect();
    if cut.len() < line.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// Lines on stdout that are not protocol messages: how many, and the
/// first few, cut short (an adapter that floods stdout costs no memory).
#[derive(Debug, Default)]
struct Strays {
    count: usize,
    first: Vec<String>,
}

impl Strays {
    fn push(&mut self, line: &str) {
        self.count += 1;
        if self.first.len() < QUOTED {
            self.first.push(quote(line));
        }
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// `1 line ("...")` or `3 lines ("...", "...", ...)`.
    fn text(&self) -> String {
        format!(
            "{} line{} ({}{})",
            self.count,
            if self.count == 1 { "" } else { "s" },
            self.first.join(", "),
            if self.count > QUOTED { ", …" } else { "" }
        )
    }
}

/// Whether a line is the adapter's attempt at a greeting: a JSON object
/// that says `"type": "hello"` or gives a `protocol`.
fn greeting_like(line: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(o)) if o.get("type") == Some(&"hello".into()) => Some(o),
        Ok(Value::Object(o)) if o.contains_key("protocol") => Some(o),
        _ => None,
    }
}

/// Waits for the greeting and checks it: the step to show, and what the
/// adapter says it is when the requests can go on.
pub(super) fn greet(
    wire: &mut Wire,
    schemas: &Schemas,
    timeout: Duration,
) -> (Step, Option<Description>) {
    let mut step = Step::new("greeting");
    let mut strays = Strays::default();
    let found = loop {
        match wire.next_line(wire.started + timeout) {
            Read::Line(line, at) => match greeting_like(&line) {
                Some(_) => break Some((line, at - wire.started)),
                None => strays.push(&line),
            },
            Read::TimedOut(partial) => break late(wire, &mut step, timeout, &strays, &partial),
            Read::Closed(partial) => {
                let status = wire.kill();
                let mut said = format!("the adapter exited before its greeting ({status})");
                if !strays.is_empty() {
                    said.push_str(&format!(
                        "; stdout had {}, none of them a greeting",
                        strays.text()
                    ));
                }
                if !partial.is_empty() {
                    said.push_str(&format!(
                        "; it wrote {} without a newline",
                        quote(&String::from_utf8_lossy(&partial))
                    ));
                }
                said.push_str(": its stderr, below, says why.");
                step.fail(said);
                break None;
            }
            Read::TooLong => {
                step.fail(
                    "the first line on stdout is longer than the answer cap: it is not a greeting."
                        .into(),
                );
                break None;
            }
        }
    };
    let Some((line, took)) = found else {
        return (step, None);
    };
    if !strays.is_empty() {
        step.fail(format!(
            "the adapter wrote {} on stdout before its greeting. stdout carries the protocol only, the greeting first: write logs and banners to stderr.",
            strays.text()
        ));
    }
    let description = check_greeting(&line, schemas, &mut step);
    if step.mark == Mark::Ok && took > timeout / 2 {
        step.warn(format!(
            "the greeting took {} of the {} timeout: on a slower machine `harness run` may give up on it (--timeout).",
            seconds(took),
            seconds(timeout)
        ));
    }
    if let Some(d) = &description {
        let protocol = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v.get("protocol").map(Value::to_string))
            .unwrap_or_else(|| "missing".into());
        step.lines.insert(
            0,
            format!(
                "{} {}, protocol {protocol}, {}; greeted in {}",
                d.name,
                d.version,
                does(&d.capabilities),
                seconds(took)
            ),
        );
    }
    (step, description)
}

/// What the capabilities say, in words.
pub(super) fn does(c: &Capabilities) -> &'static str {
    match (c.write, c.read) {
        (true, true) => "writes and reads",
        (true, false) => "writes only",
        (false, true) => "reads only",
        (false, false) => "neither writes nor reads",
    }
}

/// No whole greeting line within the timeout: tells a slow start, a
/// greeting without a newline and an unflushed stdout apart.
fn late(
    wire: &mut Wire,
    step: &mut Step,
    timeout: Duration,
    strays: &Strays,
    partial: &[u8],
) -> Option<(String, Duration)> {
    if !strays.is_empty() {
        step.fail(format!(
            "no greeting within {}, and stdout had {} instead. The greeting is the first line on stdout: write logs to stderr.",
            seconds(timeout),
            strays.text()
        ));
        return None;
    }
    if !partial.is_empty() {
        let text = String::from_utf8_lossy(partial);
        if greeting_like(text.trim()).is_some() {
            step.fail(
                "the greeting came without a newline at its end: end every message with \"\\n\" (and flush stdout after it)."
                    .into(),
            );
        } else {
            step.fail(format!(
                "{} bytes came on stdout within {} but no newline ({}): end every message with \"\\n\".",
                partial.len(),
                seconds(timeout),
                quote(&text)
            ));
        }
        return None;
    }
    // Nothing yet: a slow start, if it greets within as long again.
    match wire.next_line(wire.started + timeout * 2) {
        Read::Line(line, at) if greeting_like(&line).is_some() => {
            let took = at - wire.started;
            let suggested = took.as_secs() + 2;
            step.fail(format!(
                "the greeting came after {}, past the timeout of {}: `harness run` would give up on the adapter. Greet first and load what is slow after, or give `harness run --timeout {suggested}`.",
                seconds(took),
                seconds(timeout)
            ));
            return Some((line, took));
        }
        Read::Line(line, _) => {
            step.fail(format!(
                "no greeting within {}; then stdout had {}. The greeting is the first line on stdout: write logs to stderr.",
                seconds(timeout),
                quote(&line)
            ));
            return None;
        }
        Read::Closed(_) | Read::TooLong => {
            let status = wire.kill();
            step.fail(format!(
                "no greeting within {}, then the adapter exited ({status}): its stderr, below, says why.",
                seconds(timeout)
            ));
            return None;
        }
        Read::TimedOut(partial) if !partial.is_empty() => {
            step.fail(format!(
                "no whole greeting within {}: {} came without a newline. End every message with \"\\n\".",
                seconds(timeout * 2),
                quote(&String::from_utf8_lossy(&partial))
            ));
            return None;
        }
        Read::TimedOut(_) => {}
    }
    // Still nothing: end its input. A greeting that comes out as it exits
    // was sitting in a buffer all along.
    wire.close_stdin();
    wire.wait_closed(Duration::from_secs(2));
    let flushed = String::from_utf8_lossy(wire.unread()).into_owned();
    if flushed.lines().next().and_then(greeting_like).is_some() {
        step.fail(
            "the greeting came only when the adapter exited (its stdin closed): its stdout is buffered. Flush stdout after every message (Python: print(..., flush=True); C: fflush(stdout))."
                .into(),
        );
    } else {
        step.fail(format!(
            "no greeting within {}, nor when its stdin was closed: the adapter must write its greeting as the first line on stdout when it starts, and flush it.",
            seconds(timeout * 2)
        ));
    }
    None
}

/// Validates the greeting line; what it describes, when a run could use it.
fn check_greeting(line: &str, schemas: &Schemas, step: &mut Step) -> Option<Description> {
    let Ok(value) = serde_json::from_str::<Value>(line) else {
        step.fail(format!("the greeting is not JSON: {}", quote(line)));
        return None;
    };
    let mut said_protocol = false;
    match value.get("protocol") {
        Some(Value::Number(n)) if n.as_u64() == Some(PROTOCOL_VERSION) => {}
        Some(other) => {
            said_protocol = true;
            step.fail(format!(
                "the greeting says protocol {other}; this harness speaks protocol {PROTOCOL_VERSION} (docs/adapters.md, \"The protocol (version {PROTOCOL_VERSION})\"): send \"protocol\": {PROTOCOL_VERSION}."
            ));
        }
        None => {}
    }
    for v in schemas.validate("hello.json", &value) {
        if said_protocol && v.at == "/protocol" {
            continue;
        }
        step.fail(greeting_violation(&v));
    }
    match protocol::parse_hello(line) {
        Ok(d) => Some(d),
        Err(e) => {
            // Said above through the schema; a run cannot start either way.
            if step.mark == Mark::Ok {
                step.fail(format!("the harness cannot read the greeting: {e}"));
            }
            // The requests can still go on when the rest of it is readable.
            let mut object = value.as_object().cloned()?;
            object.remove("type");
            object.remove("protocol");
            serde_json::from_value(Value::Object(object)).ok()
        }
    }
}

/// A schema violation of the greeting, in the words that fix it.
fn greeting_violation(v: &Violation) -> String {
    let missing = |name: &str| v.at.is_empty() && v.message.contains(&format!("`{name}`"));
    if missing("capabilities") {
        "the greeting has no \"capabilities\": say what the adapter does, as \"capabilities\": {\"write\": true, \"read\": true} (false for an operation it does not do).".into()
    } else if missing("type") {
        "the greeting has no \"type\": \"hello\".".into()
    } else {
        format!("the greeting does not follow docs/schemas/hello.json: {v}.")
    }
}

/// What one request and its answer came to.
#[derive(Clone, Debug, Default)]
pub(super) struct Exchange {
    /// From the request sent to its answer's newline.
    pub(super) took: Option<Duration>,
    /// The answer in words: `ok`, `refused naming X`, ...
    pub(super) answered: Option<String>,
    /// The mistakes that break the exchange, one sentence each.
    pub(super) problems: Vec<String>,
    /// What is wrong with the answer's content, not its form.
    pub(super) warnings: Vec<String>,
    /// The exchange cannot go on (no answer, the wrong id): later requests
    /// are not sent.
    pub(super) fatal: bool,
}

/// The adapter behind the runner's requests: each request one line, each
/// answer validated and recorded.
pub(super) struct Session<'a> {
    pub(super) wire: &'a mut Wire,
    schemas: &'a Schemas,
    timeout: Duration,
    description: Description,
    next_id: u64,
    /// The last request's exchange, taken by the caller after each trial.
    pub(super) exchange: Option<Exchange>,
}

impl<'a> Session<'a> {
    pub(super) fn new(
        wire: &'a mut Wire,
        schemas: &'a Schemas,
        timeout: Duration,
        description: Description,
    ) -> Session<'a> {
        Session {
            wire,
            schemas,
            timeout,
            description,
            next_id: 1,
            exchange: None,
        }
    }

    /// Sends one request and reads its answer.
    fn exchange(&mut self, op: Op, id: u64, request: &str) -> Outcome<Option<Value>> {
        let mut exchange = Exchange::default();
        let outcome = self.answer(op, id, request, &mut exchange);
        self.exchange = Some(exchange);
        outcome
    }

    fn answer(
        &mut self,
        op: Op,
        id: u64,
        request: &str,
        exchange: &mut Exchange,
    ) -> Outcome<Option<Value>> {
        let what = format!("the {} request (id {id})", op.as_str());
        let sent = Instant::now();
        if let Err(e) = self.wire.send(request) {
            exchange.fatal = true;
            exchange
                .problems
                .push(format!("{what} could not be sent: {e}."));
            return Outcome::Error(e);
        }
        let mut strays = Strays::default();
        let (line, value) = loop {
            match self.wire.next_line(sent + self.timeout) {
                Read::Line(line, at) => match serde_json::from_str::<Value>(&line) {
                    Ok(value @ Value::Object(_))
                        if value.get("id").is_some() || value.get("status").is_some() =>
                    {
                        exchange.took = Some(at - sent);
                        break (line, value);
                    }
                    _ => strays.push(&line),
                },
                Read::TimedOut(partial) => {
                    exchange.fatal = true;
                    let mut said = if partial.is_empty() {
                        format!("no answer to {what} within {}", seconds(self.timeout))
                    } else {
                        format!(
                            "no whole answer to {what} within {}: {} bytes came without a newline; end every message with \"\\n\" and flush",
                            seconds(self.timeout),
                            partial.len()
                        )
                    };
                    if !strays.is_empty() {
                        said.push_str(&format!(
                            "; stdout had {} instead (stdout carries the protocol only: log to stderr)",
                            strays.text()
                        ));
                    }
                    exchange.problems.push(said + ".");
                    return Outcome::Error("no answer".into());
                }
                Read::Closed(_) => {
                    exchange.fatal = true;
                    let status = self.wire.kill();
                    exchange.problems.push(format!(
                        "the adapter exited while answering {what} ({status}): its stderr, below, says why."
                    ));
                    return Outcome::Error("exited".into());
                }
                Read::TooLong => {
                    exchange.fatal = true;
                    exchange.problems.push(format!(
                        "the answer to {what} is longer than the cap (--max-answer-mib)."
                    ));
                    return Outcome::Error("too long".into());
                }
            }
        };
        if !strays.is_empty() {
            exchange.problems.push(format!(
                "the adapter wrote {} on stdout before its answer to {what}. stdout carries the protocol only: write logs to stderr.",
                strays.text()
            ));
        }
        match value.get("id") {
            Some(Value::Number(n)) if n.as_u64() == Some(id) => {}
            Some(other) => {
                exchange.fatal = true;
                exchange.problems.push(format!(
                    "the answer to request {id} carries id {other}: every answer carries the id of the request it answers."
                ));
            }
            None => {
                exchange.fatal = true;
                exchange.problems.push(format!(
                    "the answer to request {id} has no \"id\": every answer carries the id of the request it answers."
                ));
            }
        }
        let status = value.get("status").and_then(Value::as_str).unwrap_or("");
        exchange.answered = Some(match value.get("id") {
            Some(Value::Number(n)) if n.as_u64() == Some(id) => format!("answered {status:?}"),
            Some(other) => format!("answered {status:?} with id {other}"),
            None => format!("answered {status:?} without an id"),
        });
        let schema =
            match (status, op) {
                ("ok", Op::Write) => Some("answer-ok.json"),
                ("ok", Op::Read) => Some("answer-read.json"),
                ("refused", _) => Some("answer-refused.json"),
                ("unsupported", _) => Some("answer-unsupported.json"),
                _ => {
                    exchange.problems.push(format!(
                    "the answer's \"status\" is {}: it is \"ok\", \"refused\" or \"unsupported\".",
                    value.get("status").map_or("missing".to_owned(), Value::to_string)
                ));
                    None
                }
            };
        if let Some(schema) = schema {
            let violations = self.schemas.validate(schema, &value);
            // A collection read back that is not canonical JSON is a wrong
            // answer the judge fails, not a broken exchange: a run can start.
            let (content, form): (Vec<&Violation>, Vec<&Violation>) = violations
                .iter()
                .filter(|v| v.at != "/id")
                .partition(|v| v.at.starts_with("/collection"));
            for v in form.iter().take(5) {
                exchange.problems.push(format!(
                    "the answer does not follow docs/schemas/{schema}: {v}."
                ));
            }
            for v in content.iter().take(3) {
                exchange.warnings.push(format!(
                    "the collection read back is not canonical JSON (docs/canonical-json.schema.json): {v}."
                ));
            }
        }
        match protocol::parse_answer(&line, id, op) {
            Ok(answer) => {
                let outcome = match answer {
                    protocol::Answer::Ok(collection) => Outcome::Done(collection),
                    protocol::Answer::Refused { message, clause } => {
                        Outcome::Refused { message, clause }
                    }
                    protocol::Answer::Unsupported => Outcome::Unsupported,
                };
                exchange.answered = Some(match &outcome {
                    Outcome::Done(_) => "answered ok".to_owned(),
                    Outcome::Refused {
                        clause: Some(c), ..
                    } => format!("refused naming {c}"),
                    Outcome::Refused { clause: None, .. } => "refused naming no clause".to_owned(),
                    _ => "answered unsupported".to_owned(),
                });
                outcome
            }
            Err(e) => {
                if exchange.problems.is_empty() {
                    exchange
                        .problems
                        .push(format!("the harness cannot read the answer: {e}."));
                }
                Outcome::Error(e)
            }
        }
    }
}

impl Implementation for Session<'_> {
    fn describe(&self) -> &Description {
        &self.description
    }

    fn write(&mut self, collection: &Value, path: &Path) -> Outcome<()> {
        if !self.description.capabilities.write {
            return Outcome::Unsupported;
        }
        let id = self.next_id;
        self.next_id += 1;
        let request = match protocol::write_request(id, &path.display().to_string(), collection) {
            Ok(r) => r,
            Err(e) => return Outcome::Error(e),
        };
        self.exchange(Op::Write, id, &request).map(drop)
    }

    fn read(&mut self, path: &Path) -> Outcome<Value> {
        if !self.description.capabilities.read {
            return Outcome::Unsupported;
        }
        let id = self.next_id;
        self.next_id += 1;
        let request = protocol::read_request(id, &path.display().to_string());
        match self.exchange(Op::Read, id, &request) {
            Outcome::Done(Some(collection)) => Outcome::Done(collection),
            Outcome::Done(None) => Outcome::Error("a read answer without a collection".into()),
            Outcome::Refused { message, clause } => Outcome::Refused { message, clause },
            Outcome::Unsupported => Outcome::Unsupported,
            Outcome::Error(e) => Outcome::Error(e),
        }
    }
}
