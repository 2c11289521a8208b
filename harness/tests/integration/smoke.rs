//! `harness smoke`: it passes a working adapter (the reference's `mrec
//! adapter`, a tiny reader in `sh`), and fails each deliberately broken
//! adapter with the sentence that says what to fix: a log line on stdout
//! before the greeting, a greeting without a newline, stdout not flushed,
//! protocol 2, a start slower than the timeout, a greeting without
//! capabilities, an answer with another id. `harness run` points to it
//! when an adapter fails from its first requests. (The Python template:
//! `tests/python_adapter.rs`.)

use crate::subprocess::mrec_binary;
use std::path::PathBuf;
use std::process::{Command, Output};

/// A tiny adapter in `sh` that reads only and refuses every file, naming
/// no clause: correct as far as the protocol goes. Each broken one below
/// changes one line of it.
const TINY: &str = r#"hello='{"type":"hello","protocol":1,"name":"tiny","version":"0","capabilities":{"write":false,"read":true}}'
BEFORE
GREET
while IFS= read -r line; do
  case "$line" in *'"op":"bye"'*) break ;; esac
  id=${line#'{"id":'}; id=${id%%,*}
  printf '{"id":%s,"status":"refused","message":"not read"}\n' "ID"
done
AFTER
"#;

/// The tiny adapter with its lines replaced: what runs before the
/// greeting, how the greeting is written, the id an answer carries, what
/// runs at the end.
struct Broken {
    before: &'static str,
    greet: &'static str,
    id: &'static str,
    after: &'static str,
}

const WORKING: Broken = Broken {
    before: ":",
    greet: r#"printf '%s\n' "$hello""#,
    id: "$id",
    after: ":",
};

/// Writes `adapter` as a script and runs `harness smoke --timeout 1` on it.
fn smoke(tag: &str, adapter: &Broken) -> (Output, String) {
    let dir = harness::runner::scratch_dir(&format!("smoke-{tag}"));
    std::fs::create_dir_all(&dir).expect("scratch");
    let script: PathBuf = dir.join("adapter.sh");
    let text = TINY
        .replace("BEFORE", adapter.before)
        .replace("GREET", adapter.greet)
        .replace("ID", adapter.id)
        .replace("AFTER", adapter.after);
    std::fs::write(&script, text).expect("script");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["smoke", "--timeout", "1", "--adapter"])
        .arg(format!("sh '{}'", script.display()))
        .output()
        .expect("harness runs");
    let _ = std::fs::remove_dir_all(&dir);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, said)
}

/// Not ready (exit status 1), the greeting step failed, saying `sentence`.
fn fails_with(tag: &str, adapter: &Broken, step: &str, sentence: &str) {
    let (out, said) = smoke(tag, adapter);
    assert_eq!(out.status.code(), Some(1), "{said}");
    let line = said
        .lines()
        .find(|l| l.trim_start().starts_with("FAIL"))
        .unwrap_or_else(|| panic!("no failed step: {said}"));
    assert!(line.contains(step), "{step} did not fail: {said}");
    assert!(said.contains(sentence), "{sentence:?} not in\n{said}");
    assert!(said.contains("harness smoke: not ready"), "{said}");
}

#[test]
fn the_reference_adapter_is_ready() {
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["smoke", "--adapter"])
        .arg(format!("'{}' adapter", mrec_binary().display()))
        .output()
        .expect("harness runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    for needle in [
        "ok    greeting  molrec-reference 0.1.0, protocol 1, writes and reads; greeted in ",
        "ok    write     collection::example-round-trip::write: answered ok in ",
        "ok    read      collection::example-round-trip::read: answered ok in ",
        "ok    refusal   collection::read-refuse-no-meta::read: refused naming lmdb.meta.required in ",
        "ok    bye       exited ",
        "adapter stderr: empty",
        "harness smoke: ready in ",
    ] {
        assert!(said.contains(needle), "{needle:?} not in\n{said}");
    }
}

/// A working reader that refuses what it should read: ready (a run can
/// start), the wrong verdict a warning.
#[test]
fn a_working_adapter_with_wrong_verdicts_is_ready_with_a_warning() {
    let (out, said) = smoke("working", &WORKING);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(
            "warn  read      collection::example-round-trip::read: refused naming no clause"
        ),
        "{said}"
    );
    assert!(
        said.contains("a run can start, but this trial fails: refused a valid file: not read"),
        "{said}"
    );
    assert!(
        !said.contains(" write     "),
        "a reader is not asked to write: {said}"
    );
}

#[test]
fn a_log_line_before_the_greeting() {
    let adapter = Broken {
        before: "echo 'loading the model...'",
        ..WORKING
    };
    fails_with(
        "log",
        &adapter,
        "greeting",
        "the adapter wrote 1 line (\"loading the model...\") on stdout before its greeting. stdout carries the protocol only, the greeting first: write logs and banners to stderr.",
    );
}

#[test]
fn a_greeting_without_a_newline() {
    let adapter = Broken {
        greet: r#"printf '%s' "$hello""#,
        ..WORKING
    };
    fails_with(
        "newline",
        &adapter,
        "greeting",
        "the greeting came without a newline at its end: end every message with \"\\n\" (and flush stdout after it).",
    );
}

/// The greeting held back until the adapter exits, as a buffered stdout
/// (Python's `print` to a pipe without `flush=True`) holds it.
#[test]
fn a_greeting_that_is_not_flushed() {
    let adapter = Broken {
        greet: r#"buffered="$hello""#,
        after: r#"printf '%s\n' "$buffered""#,
        ..WORKING
    };
    fails_with(
        "flush",
        &adapter,
        "greeting",
        "the greeting came only when the adapter exited (its stdin closed): its stdout is buffered. Flush stdout after every message (Python: print(..., flush=True); C: fflush(stdout)).",
    );
}

#[test]
fn a_greeting_of_protocol_2() {
    let adapter = Broken {
        before: r#"hello=$(printf '%s' "$hello" | sed 's/"protocol":1/"protocol":2/')"#,
        ..WORKING
    };
    fails_with(
        "protocol",
        &adapter,
        "greeting",
        "the greeting says protocol 2; this harness speaks protocol 1 (docs/adapters.md, \"The protocol (version 1)\"): send \"protocol\": 1.",
    );
}

#[test]
fn a_start_slower_than_the_timeout() {
    let adapter = Broken {
        before: "sleep 1.5",
        ..WORKING
    };
    fails_with(
        "slow",
        &adapter,
        "greeting",
        "past the timeout of 1 s: `harness run` would give up on the adapter. Greet first and load what is slow after, or give `harness run --timeout 3`.",
    );
}

#[test]
fn a_greeting_without_capabilities() {
    let adapter = Broken {
        before: r#"hello='{"type":"hello","protocol":1,"name":"tiny","version":"0"}'"#,
        ..WORKING
    };
    fails_with(
        "capabilities",
        &adapter,
        "greeting",
        "the greeting has no \"capabilities\": say what the adapter does, as \"capabilities\": {\"write\": true, \"read\": true} (false for an operation it does not do).",
    );
}

#[test]
fn an_answer_with_another_id() {
    let adapter = Broken {
        id: "$((id + 1))",
        ..WORKING
    };
    fails_with(
        "id",
        &adapter,
        "read",
        "the answer to request 1 carries id 2: every answer carries the id of the request it answers.",
    );
}

/// A log line before an answer: the answer still read, the line named.
#[test]
fn a_log_line_before_an_answer() {
    let mut text = TINY.to_owned();
    text = text.replace("  id=${line#", "  echo 'reading...'\n  id=${line#");
    let dir = harness::runner::scratch_dir("smoke-answer-log");
    std::fs::create_dir_all(&dir).expect("scratch");
    let script = dir.join("adapter.sh");
    std::fs::write(
        &script,
        text.replace("BEFORE", ":")
            .replace("GREET", WORKING.greet)
            .replace("ID", "$id")
            .replace("AFTER", ":"),
    )
    .expect("script");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["smoke", "--timeout", "1", "--adapter"])
        .arg(format!("sh '{}'", script.display()))
        .output()
        .expect("harness runs");
    let _ = std::fs::remove_dir_all(&dir);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("the adapter wrote 1 line (\"reading...\") on stdout before its answer to the read request (id 1). stdout carries the protocol only: write logs to stderr."),
        "{said}"
    );
}

/// `harness run` points to `harness smoke` when an adapter cannot start,
/// and when its first requests all err.
#[test]
fn run_points_to_smoke_when_an_adapter_fails_from_the_start() {
    let dir = harness::runner::scratch_dir("smoke-hint");
    std::fs::create_dir_all(&dir).expect("scratch");
    let no_caps = dir.join("no-caps.sh");
    let wrong_id = dir.join("wrong-id.sh");
    let script = |adapter: &Broken| {
        TINY.replace("BEFORE", adapter.before)
            .replace("GREET", adapter.greet)
            .replace("ID", adapter.id)
            .replace("AFTER", adapter.after)
    };
    std::fs::write(
        &no_caps,
        script(&Broken {
            before: r#"hello='{"type":"hello","protocol":1,"name":"tiny","version":"0"}'"#,
            ..WORKING
        }),
    )
    .expect("script");
    std::fs::write(
        &wrong_id,
        script(&Broken {
            id: "$((id + 1))",
            ..WORKING
        }),
    )
    .expect("script");
    let run = |script: &PathBuf| {
        let out = Command::new(env!("CARGO_BIN_EXE_harness"))
            .args([
                "run",
                "--timeout",
                "1",
                "--filter",
                "example-round-trip",
                "--adapter",
            ])
            .arg(format!("sh '{}'", script.display()))
            .output()
            .expect("harness runs");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let cannot_start = run(&no_caps);
    let first_requests = run(&wrong_id);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        cannot_start.contains(&format!(
            "`harness smoke --adapter 'sh '\\''{}'\\'''` checks an adapter",
            no_caps.display()
        )),
        "{cannot_start}"
    );
    assert!(
        first_requests.contains(
            "`tiny` failed its first requests (errors, not verdicts): `harness smoke --adapter"
        ),
        "{first_requests}"
    );
}
