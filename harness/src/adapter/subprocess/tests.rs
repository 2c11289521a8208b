//! Tests of the subprocess adapter: the protocol's answers, timeouts,
//! restarts, the limits and the end of process groups, against small
//! Python and shell adapters.

use super::*;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "harness-adapter-{tag}-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// Writes a fake implementation: a common prelude (greeting with
    /// `write` capability `write`, request loop) around `handle`, the
    /// Python body of `def handle(req):`. Returns the command to run it.
    fn fake(&self, write: bool, handle: &str) -> String {
        let write = if write { "True" } else { "False" };
        let script = format!(
            r#"import json, os, sys, time
COUNT = 0
def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()
def handle(req):
{handle}
send({{"type": "hello", "protocol": 1, "name": "fake", "version": "0.0",
       "capabilities": {{"write": {write}, "read": True}}}})
for line in sys.stdin:
    req = json.loads(line)
    if req.get("op") == "bye":
        break
    COUNT += 1
    req["name"] = os.path.basename(req.get("path", ""))
    handle(req)
"#
        );
        let path = self.path("fake.py");
        std::fs::write(&path, script).unwrap();
        format!("python3 '{}'", path.display())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const WELL_BEHAVED: &str = r#"
    name, rid = req["name"], req["id"]
    if "refuse-named" in name:
        send({"id": rid, "status": "refused", "message": "no units",
              "clause": "collection.meta.units-required"})
    elif "refuse" in name:
        send({"id": rid, "status": "refused", "message": "no", "clause": None})
    elif "unsupported" in name:
        send({"id": rid, "status": "unsupported"})
    elif req["op"] == "write":
        if "blank" in name:
            sys.stdout.write("\n")
        with open(req["path"], "w") as f:
            json.dump(req["collection"], f)
        send({"id": rid, "status": "ok"})
    else:
        with open(req["path"]) as f:
            send({"id": rid, "status": "ok", "collection": json.load(f)})
"#;

fn spawn(command: &str, timeout: Duration) -> Subprocess {
    match Subprocess::spawn(command, timeout) {
        Ok(s) => s,
        Err(e) => panic!("spawn failed: {e}"),
    }
}

fn error_of<T: std::fmt::Debug>(outcome: Outcome<T>) -> String {
    match outcome {
        Outcome::Error(e) => e,
        other => panic!("expected an error, got {other:?}"),
    }
}

#[test]
fn well_behaved_round_trip_and_refusals() {
    let dir = Scratch::new("good");
    let mut imp = spawn(&dir.fake(true, WELL_BEHAVED), DEFAULT_TIMEOUT);
    assert_eq!(
        imp.describe(),
        &Description {
            name: "fake".into(),
            version: "0.0".into(),
            capabilities: super::super::Capabilities {
                write: true,
                read: true
            },
        }
    );
    let collection =
        json!({"meta": {"units": {"length": "angstrom"}}, "records": [{"meta": {"é": "ü"}}]});
    let file = dir.path("a.json");
    assert_eq!(imp.write(&collection, &file), Outcome::Done(()));
    assert_eq!(imp.read(&file), Outcome::Done(collection.clone()));
    assert_eq!(
        imp.write(&collection, &dir.path("blank.json")),
        Outcome::Done(())
    );
    assert_eq!(
        imp.write(&collection, &dir.path("refuse-named")),
        Outcome::Refused {
            message: "no units".into(),
            clause: Some("collection.meta.units-required".into())
        }
    );
    assert_eq!(
        imp.read(&dir.path("refuse")),
        Outcome::Refused {
            message: "no".into(),
            clause: None
        }
    );
    assert_eq!(imp.read(&dir.path("unsupported")), Outcome::Unsupported);
    assert_eq!(imp.restarts(), 0);
}

#[test]
fn large_lines_travel() {
    let dir = Scratch::new("large");
    let mut imp = spawn(&dir.fake(true, WELL_BEHAVED), DEFAULT_TIMEOUT);
    let values: Vec<f64> = (0..600_000).map(|i| i as f64 * 0.125).collect();
    let collection = json!({"meta": {}, "records": [], "big": values});
    let file = dir.path("big.json");
    assert_eq!(imp.write(&collection, &file), Outcome::Done(()));
    assert_eq!(imp.read(&file), Outcome::Done(collection));
}

#[test]
fn crash_is_an_error_then_a_restart() {
    let dir = Scratch::new("crash");
    let handle = r#"
    if COUNT == 2:
        sys.stderr.write("boom: crashing on request 2\n")
        sys.exit(3)
    send({"id": req["id"], "status": "ok", "collection": {"n": COUNT}})
"#;
    let mut imp = spawn(&dir.fake(false, handle), DEFAULT_TIMEOUT);
    let p = dir.path("x");
    assert_eq!(imp.read(&p), Outcome::Done(json!({"n": 1})));
    let e = error_of(imp.read(&p));
    assert!(e.contains("boom: crashing on request 2"), "{e}");
    assert!(e.contains("exit status: 3"), "{e}");
    // A fresh process: its count starts again.
    assert_eq!(imp.read(&p), Outcome::Done(json!({"n": 1})));
    assert_eq!(imp.restarts(), 1);
}

#[test]
fn hang_times_out_then_restarts() {
    let dir = Scratch::new("hang");
    let handle = r#"
    if "hang" in req["name"]:
        time.sleep(3600)
    send({"id": req["id"], "status": "ok", "collection": {}})
"#;
    let mut imp = spawn(&dir.fake(false, handle), Duration::from_secs(1));
    let started = Instant::now();
    let e = error_of(imp.read(&dir.path("hang")));
    let took = started.elapsed();
    assert!(e.contains("timed out"), "{e}");
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // A loaded machine may take more than 1 s to start python again.
    imp.set_timeout(Duration::from_secs(30));
    assert_eq!(imp.read(&dir.path("fine")), Outcome::Done(json!({})));
    assert_eq!(imp.restarts(), 1);
}

#[test]
fn garbage_is_an_error_never_a_refusal() {
    let dir = Scratch::new("garbage");
    let handle = r#"
    name, rid = req["name"], req["id"]
    if "not-json" in name:
        print("this is not json", flush=True)
    elif "not-utf8" in name:
        sys.stdout.buffer.write(b"\xff\xfe\n")
        sys.stdout.flush()
    elif "wrong-id" in name:
        send({"id": rid + 100, "status": "ok", "collection": {}})
    elif "unknown-status" in name:
        send({"id": rid, "status": "maybe"})
    elif "no-collection" in name:
        send({"id": rid, "status": "ok"})
    elif "bad-clause" in name:
        send({"id": rid, "status": "refused", "message": "m", "clause": 5})
    else:
        send({"id": rid, "status": "ok", "collection": {"fine": True}})
"#;
    let mut imp = spawn(&dir.fake(false, handle), Duration::from_secs(20));
    let bad = [
        "not-json",
        "not-utf8",
        "wrong-id",
        "unknown-status",
        "no-collection",
        "bad-clause",
    ];
    for (n, name) in bad.iter().enumerate() {
        let e = error_of(imp.read(&dir.path(name)));
        assert!(e.starts_with("read request"), "{e}");
        assert_eq!(
            imp.read(&dir.path("ok")),
            Outcome::Done(json!({"fine": true}))
        );
        assert_eq!(imp.restarts(), n + 1);
    }
}

#[test]
fn stderr_tail_is_quoted_and_bounded() {
    let dir = Scratch::new("stderr");
    let handle = r#"
    sys.stderr.write("x" * 100000 + "\n")
    sys.stderr.write("diagnostic-marker-%d\n" % req["id"])
    sys.stderr.flush()
    print("garbage", flush=True)
"#;
    let mut imp = spawn(&dir.fake(false, handle), DEFAULT_TIMEOUT);
    let e = error_of(imp.read(&dir.path("x")));
    assert!(e.contains("diagnostic-marker-1"), "{e}");
    assert!(e.len() < STDERR_TAIL_BYTES + 1024, "{} bytes", e.len());
    let e = error_of(imp.read(&dir.path("x")));
    assert!(e.contains("diagnostic-marker-2"), "{e}");
    assert!(
        !e.contains("diagnostic-marker-1"),
        "tail of the new process only"
    );
}

#[test]
fn write_on_a_read_only_implementation_is_unsupported_without_asking() {
    let dir = Scratch::new("readonly");
    let handle = r#"
    if req["op"] == "write":
        sys.exit(5)
    send({"id": req["id"], "status": "ok", "collection": {}})
"#;
    let mut imp = spawn(&dir.fake(false, handle), DEFAULT_TIMEOUT);
    assert!(!imp.describe().capabilities.write);
    assert_eq!(imp.write(&json!({}), &dir.path("w")), Outcome::Unsupported);
    assert_eq!(imp.read(&dir.path("r")), Outcome::Done(json!({})));
    assert_eq!(imp.restarts(), 0);
}

#[test]
fn bad_greetings_fail_spawn() {
    let dir = Scratch::new("greeting");
    let script = dir.path("g.py");
    let cases = [
        (
            r#"print('{"type": "hello", "protocol": 2, "name": "x", "version": "1", "capabilities": {"write": true, "read": true}}', flush=True)
import time; time.sleep(30)"#,
            "protocol 2",
            20,
        ),
        (
            "import sys\nsys.stderr.write('cannot start: missing module\\n')\nsys.exit(1)",
            "cannot start: missing module",
            20,
        ),
        (
            "print('hello', flush=True)\nimport time; time.sleep(30)",
            "not JSON",
            20,
        ),
        ("import time; time.sleep(30)", "timed out", 1),
    ];
    for (body, expected, seconds) in cases {
        std::fs::write(&script, body).unwrap();
        let command = format!("python3 '{}'", script.display());
        match Subprocess::spawn(&command, Duration::from_secs(seconds)) {
            Ok(_) => panic!("spawn of {body:?} succeeded"),
            Err(e) => assert!(e.contains(expected), "{expected:?} not in {e}"),
        }
    }
}

#[cfg(target_os = "linux")]
#[test]
fn drop_kills_a_process_that_ignores_bye_and_its_group() {
    let dir = Scratch::new("drop");
    let pid_file = dir.path("pid");
    let script = dir.path("stubborn.py");
    std::fs::write(
        &script,
        format!(
            r#"import json, os, sys, time
open({pid:?}, "w").write(str(os.getpid()))
print(json.dumps({{"type": "hello", "protocol": 1, "name": "s", "version": "1",
                  "capabilities": {{"write": False, "read": True}}}}), flush=True)
for line in sys.stdin:
    pass
time.sleep(3600)
"#,
            pid = pid_file.display().to_string()
        ),
    )
    .unwrap();
    // `; true` keeps `sh` from exec-ing python: python is a grandchild.
    let command = format!("python3 '{}'; true", script.display());
    let imp = spawn(&command, DEFAULT_TIMEOUT);
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let started = Instant::now();
    drop(imp);
    assert!(started.elapsed() < Duration::from_secs(10));
    // Gone, or a zombie waiting for its new parent to reap it.
    let stat = format!("/proc/{}/stat", pid.trim());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match std::fs::read_to_string(&stat) {
            Err(_) => break,
            Ok(s) if s.rsplit(") ").next().is_some_and(|r| r.starts_with('Z')) => break,
            Ok(s) if Instant::now() > deadline => panic!("still running: {s}"),
            Ok(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[test]
fn subprocess_can_move_to_another_thread() {
    fn assert_send<T: Send>() {}
    assert_send::<Subprocess>();
}

fn limited(command: &str, limits: Limits) -> Subprocess {
    match Subprocess::spawn_with(command, limits) {
        Ok(s) => s,
        Err(e) => panic!("spawn failed: {e}"),
    }
}

/// Three timeouts in a row give the adapter up: the fourth request is
/// not sent (answered at once), and says since which trial.
#[test]
fn three_timeouts_in_a_row_give_an_adapter_up() {
    let dir = Scratch::new("given-up");
    let handle = r#"
    time.sleep(3600)
"#;
    let limits = Limits {
        timeout: Duration::from_millis(500),
        ..Limits::default()
    };
    let mut imp = limited(&dir.fake(false, handle), limits);
    for k in 0..3 {
        imp.begin_trial(&format!("collection::case-{k}::read"));
        let e = error_of(imp.read(&dir.path("x")));
        assert!(e.contains("timed out"), "{e}");
    }
    imp.begin_trial("collection::case-3::read");
    let started = Instant::now();
    let e = error_of(imp.read(&dir.path("x")));
    assert!(started.elapsed() < Duration::from_millis(100));
    assert_eq!(
            e,
            "adapter unresponsive since trial collection::case-0::read: 3 timeouts in a row; it is not asked again (--max-failures 3)"
        );
    assert_eq!(imp.given_up(), Some(e.as_str()));
    assert_eq!(imp.restarts(), 2);
}

/// A good answer between failures starts the count again.
#[test]
fn a_good_answer_resets_the_failure_count() {
    let dir = Scratch::new("reset");
    let handle = r#"
    if "crash" in req["name"]:
        sys.exit(3)
    send({"id": req["id"], "status": "ok", "collection": {}})
"#;
    let mut imp = spawn(&dir.fake(false, handle), Duration::from_secs(30));
    for _ in 0..3 {
        error_of(imp.read(&dir.path("crash")));
        error_of(imp.read(&dir.path("crash")));
        assert_eq!(imp.read(&dir.path("fine")), Outcome::Done(json!({})));
    }
    assert_eq!(imp.given_up(), None);
    error_of(imp.read(&dir.path("crash")));
    error_of(imp.read(&dir.path("crash")));
    let e = error_of(imp.read(&dir.path("crash")));
    assert!(e.contains("exit status: 3"), "{e}");
    let e = error_of(imp.read(&dir.path("fine")));
    assert!(
        e.contains("3 failed requests (crashes or malformed answers) in a row"),
        "{e}"
    );
}

/// The timeout covers the whole answer: bytes trickling in slower than
/// that do not keep the harness waiting.
#[test]
fn an_answer_trickling_in_times_out_as_a_whole() {
    let dir = Scratch::new("trickle");
    let handle = r#"
    line = json.dumps({"id": req["id"], "status": "ok", "collection": {}}) + "\n"
    for c in line:
        sys.stdout.write(c)
        sys.stdout.flush()
        time.sleep(0.2)
"#;
    let mut imp = spawn(&dir.fake(false, handle), Duration::from_secs(1));
    let started = Instant::now();
    let e = error_of(imp.read(&dir.path("x")));
    let took = started.elapsed();
    assert!(e.contains("no whole answer within 1s (timed out)"), "{e}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

/// A line longer than the cap is an error naming the cap; the harness
/// never holds more than the cap of it.
#[test]
fn an_endless_line_is_stopped_at_the_cap() {
    let dir = Scratch::new("endless");
    let handle = r#"
    while True:
        sys.stdout.write("x" * 65536)
"#;
    let limits = Limits {
        timeout: Duration::from_secs(30),
        max_answer_bytes: 1 << 20,
        ..Limits::default()
    };
    let mut imp = limited(&dir.fake(false, handle), limits);
    let started = Instant::now();
    let e = error_of(imp.read(&dir.path("x")));
    assert!(
        e.contains("an answer line is longer than the cap of 1048576 bytes"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// Past the run's deadline no request is sent.
#[test]
fn past_the_deadline_every_request_is_an_error() {
    let dir = Scratch::new("deadline");
    let handle = r#"
    time.sleep(0.3)
    send({"id": req["id"], "status": "ok", "collection": {}})
"#;
    let limits = Limits {
        timeout: Duration::from_secs(30),
        deadline: Some(Duration::from_secs(2)),
        ..Limits::default()
    };
    let mut imp = limited(&dir.fake(false, handle), limits);
    let started = Instant::now();
    let mut answered = 0;
    let e = loop {
        imp.begin_trial(&format!("t{answered}"));
        match imp.read(&dir.path("x")) {
            Outcome::Done(_) => answered += 1,
            Outcome::Error(e) => break e,
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(20), "no deadline");
    };
    assert!(answered >= 1, "{e}");
    let why = format!("adapter given up at trial t{answered}: the run's deadline of 2s has passed; it is not asked again");
    assert!(e.starts_with(&why), "{e}");
    assert_eq!(error_of(imp.read(&dir.path("x"))), why);
}

/// A panic unwinding through the owner of a subprocess ends it (the
/// drop guard). (`end_all_adapters` reaches every adapter of the
/// process, so its test is the harness's signal test, in a process of
/// its own.)
#[cfg(target_os = "linux")]
#[test]
fn a_panic_leaves_no_process_of_the_group() {
    let dir = Scratch::new("panic");
    let handle = r#"
    time.sleep(3600)
"#;
    let command = dir.fake(false, handle);
    let owner = thread::spawn(move || {
        let imp = spawn(&command, DEFAULT_TIMEOUT);
        let group = imp.live.as_ref().map(|l| l.child.id()).unwrap_or(0);
        if group != 0 {
            panic!("{group}");
        }
    });
    let payload = owner.join().expect_err("the owner panics");
    let group: u32 = payload
        .downcast_ref::<String>()
        .and_then(|g| g.parse().ok())
        .expect("the group id");
    assert!(wait_gone(group), "group {group} still has processes");
}

/// Whether no process of `group` but zombies is left within 5 s.
#[cfg(target_os = "linux")]
fn wait_gone(group: u32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if processes_of_group(group) == 0 {
            return true;
        }
        thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Processes of `group` that are not zombies, from `/proc`.
#[cfg(target_os = "linux")]
fn processes_of_group(group: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("stat")).ok())
        .filter(|stat| {
            // pid (comm) state ppid pgrp ...
            let mut after = stat.rsplit(") ").next().unwrap_or("").split(' ');
            let state = after.next();
            let pgrp = after.nth(1).and_then(|g| g.parse::<u32>().ok());
            pgrp == Some(group) && state != Some("Z")
        })
        .count()
}

#[test]
fn tail_keeps_the_last_bytes() {
    let mut tail = Tail::new(8);
    tail.push(b"abc");
    assert_eq!(tail.text(), "abc");
    tail.push(b"defghij");
    assert_eq!(tail.text(), "cdefghij");
    tail.push(b"0123456789");
    assert_eq!(tail.text(), "23456789");
    tail.push(b"");
    assert_eq!(tail.text(), "23456789");
}
