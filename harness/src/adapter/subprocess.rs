//! An implementation running as a long-lived subprocess that speaks the
//! newline-delimited JSON protocol of [`super::protocol`].
//!
//! Four threads per process keep the harness responsive whatever the process
//! does: one writes requests to its stdin (a process that stops reading
//! cannot block the harness), one reads its stdout line by line into a
//! channel (so every request has a timeout), one keeps the last
//! [`STDERR_TAIL_BYTES`] of its stderr (quoted in every error), and the
//! caller's. Any error (exit, timeout, malformed answer) kills the process
//! and its process group; the next request re-spawns it and reads its
//! greeting again, so later cases still run.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::protocol::{self, Answer, Op};
use super::{Description, Implementation, Outcome};

/// The default time an implementation has to greet and to answer each request.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// How much of the process's stderr is kept (its last bytes) for error messages.
pub const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// The longest stdout line accepted (a collection of many MB fits easily).
const MAX_LINE_BYTES: u64 = 1 << 30;

/// How long a process has to exit after `bye` before it is killed.
const BYE_GRACE: Duration = Duration::from_secs(1);

/// How long to wait for the stderr reader to drain after a kill.
const STDERR_SETTLE: Duration = Duration::from_millis(500);

/// A long-lived subprocess speaking the newline-delimited JSON protocol.
///
/// Created by [`Subprocess::spawn`]; implements [`Implementation`]. Dropping
/// it sends `bye`, waits briefly, then kills what is left.
pub struct Subprocess {
    command: String,
    timeout: Duration,
    description: Description,
    live: Option<Live>,
    next_id: u64,
    restarts: usize,
}

impl std::fmt::Debug for Subprocess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subprocess")
            .field("command", &self.command)
            .field("timeout", &self.timeout)
            .field("description", &self.description)
            .field("running", &self.live.is_some())
            .field("restarts", &self.restarts)
            .finish()
    }
}

impl Subprocess {
    /// Spawns `command` (run through `sh -c`), reads its greeting.
    ///
    /// `timeout` bounds the greeting and, later, each request. An error names
    /// what went wrong and quotes the tail of the process's stderr.
    pub fn spawn(command: &str, timeout: Duration) -> Result<Subprocess, String> {
        let (live, description) = Live::start(command, timeout)?;
        Ok(Subprocess {
            command: command.to_string(),
            timeout,
            description,
            live: Some(live),
            next_id: 1,
            restarts: 0,
        })
    }

    /// The command the process runs (through `sh -c`).
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The time allowed for the greeting and for each answer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Changes the time allowed for each later request (and greeting).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// How many times the process was re-spawned after an error.
    pub fn restarts(&self) -> usize {
        self.restarts
    }

    /// Sends one request and waits for its answer. `Err` is the full error
    /// message (stderr tail included); the process has then been killed.
    fn exchange(&mut self, op: Op, id: u64, line: String) -> Result<Answer, String> {
        if self.live.is_none() {
            let (live, _) = Live::start(&self.command, self.timeout)
                .map_err(|e| format!("restarting the implementation failed: {e}"))?;
            self.live = Some(live);
            self.restarts += 1;
        }
        let Some(live) = self.live.as_mut() else {
            return Err("the implementation is not running".to_string());
        };
        let result = match live.send(line) {
            Ok(()) => live
                .next_line(self.timeout)
                .and_then(|text| protocol::parse_answer(&text, id, op)),
            Err(e) => Err(e),
        };
        match result {
            Ok(answer) => Ok(answer),
            Err(what) => Err(self.fail(&format!("{} request {id}: {what}", op.as_str()))),
        }
    }

    /// Kills the process after an error and returns the error message.
    fn fail(&mut self, what: &str) -> String {
        match self.live.take() {
            Some(live) => {
                let (status, tail) = live.kill();
                format_error(what, &status, &tail)
            }
            None => what.to_string(),
        }
    }

    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}

impl Implementation for Subprocess {
    fn describe(&self) -> &Description {
        &self.description
    }

    fn write(&mut self, collection: &Value, path: &Path) -> Outcome<()> {
        if !self.description.capabilities.write {
            return Outcome::Unsupported;
        }
        let path = match wire_path(path) {
            Ok(path) => path,
            Err(e) => return Outcome::Error(e),
        };
        let id = self.take_id();
        let line = match protocol::write_request(id, &path, collection) {
            Ok(line) => line,
            Err(e) => return Outcome::Error(e),
        };
        to_outcome(self.exchange(Op::Write, id, line)).map(|_| ())
    }

    fn read(&mut self, path: &Path) -> Outcome<Value> {
        if !self.description.capabilities.read {
            return Outcome::Unsupported;
        }
        let path = match wire_path(path) {
            Ok(path) => path,
            Err(e) => return Outcome::Error(e),
        };
        let id = self.take_id();
        let line = protocol::read_request(id, &path);
        match to_outcome(self.exchange(Op::Read, id, line)) {
            Outcome::Done(Some(collection)) => Outcome::Done(collection),
            // `parse_answer` guarantees a collection on a read's "ok".
            Outcome::Done(None) => Outcome::Error("read answer without a collection".into()),
            Outcome::Refused { message, clause } => Outcome::Refused { message, clause },
            Outcome::Unsupported => Outcome::Unsupported,
            Outcome::Error(e) => Outcome::Error(e),
        }
    }
}

impl Drop for Subprocess {
    fn drop(&mut self) {
        if let Some(live) = self.live.take() {
            live.bye();
        }
    }
}

fn to_outcome(result: Result<Answer, String>) -> Outcome<Option<Value>> {
    match result {
        Ok(Answer::Ok(collection)) => Outcome::Done(collection),
        Ok(Answer::Refused { message, clause }) => Outcome::Refused { message, clause },
        Ok(Answer::Unsupported) => Outcome::Unsupported,
        Err(e) => Outcome::Error(e),
    }
}

/// The path as sent on the wire: absolute, UTF-8.
fn wire_path(path: &Path) -> Result<String, String> {
    let absolute = std::path::absolute(path)
        .map_err(|e| format!("cannot make {} absolute: {e}", path.display()))?;
    absolute
        .to_str()
        .map(str::to_string)
        .ok_or_else(|| format!("path {} is not UTF-8", absolute.display()))
}

fn format_error(what: &str, status: &str, tail: &str) -> String {
    let tail = tail.trim_end();
    if tail.is_empty() {
        format!("{what} [{status}; stderr empty]")
    } else {
        format!("{what} [{status}]\n--- stderr (tail) ---\n{tail}")
    }
}

/// One event of the stdout reader thread.
enum Event {
    /// A line, newline stripped.
    Line(String),
    /// Stdout closed: the process exited (or closed it).
    Eof,
    /// Stdout could not be read (not UTF-8, line too long, I/O error).
    Broken(String),
}

/// One running process and its threads.
struct Live {
    child: Child,
    requests: Option<Sender<String>>,
    events: Receiver<Event>,
    stderr: Arc<Mutex<Tail>>,
    stderr_done: Receiver<()>,
}

impl Live {
    /// Spawns the process and reads its greeting.
    fn start(command: &str, timeout: Duration) -> Result<(Live, Description), String> {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        #[cfg(unix)]
        {
            // Its own process group, so a kill reaches whatever `sh` started.
            use std::os::unix::process::CommandExt;
            cmd.process_group(0);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot spawn `sh -c {command:?}`: {e}"))?;
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(stdin), Some(stdout), Some(stderr)) => (stdin, stdout, stderr),
                _ => {
                    kill_and_reap(&mut child);
                    return Err("the process has no stdin, stdout or stderr pipe".to_string());
                }
            };
        let tail = Arc::new(Mutex::new(Tail::new(STDERR_TAIL_BYTES)));
        let (request_tx, request_rx) = mpsc::channel();
        let (event_tx, events) = mpsc::channel();
        let (done_tx, stderr_done) = mpsc::channel();
        let threads = spawn_thread("adapter-stdin", move || feed_stdin(stdin, request_rx))
            .and_then(|()| spawn_thread("adapter-stdout", move || read_stdout(stdout, event_tx)))
            .and_then(|()| {
                let tail = Arc::clone(&tail);
                spawn_thread("adapter-stderr", move || read_stderr(stderr, tail, done_tx))
            });
        if let Err(e) = threads {
            kill_and_reap(&mut child);
            return Err(format!("cannot start a reader thread: {e}"));
        }
        let mut live = Live {
            child,
            requests: Some(request_tx),
            events,
            stderr: tail,
            stderr_done,
        };
        let greeting = live
            .next_line(timeout)
            .map_err(|e| format!("no greeting: {e}"))
            .and_then(|line| protocol::parse_hello(&line));
        match greeting {
            Ok(description) => Ok((live, description)),
            Err(what) => {
                let (status, tail) = live.kill();
                Err(format_error(&what, &status, &tail))
            }
        }
    }

    /// Queues one line for the process's stdin.
    fn send(&mut self, mut line: String) -> Result<(), String> {
        line.push('\n');
        match &self.requests {
            Some(requests) => requests
                .send(line)
                .map_err(|_| "the process has closed its stdin".to_string()),
            None => Err("the process's stdin is closed".to_string()),
        }
    }

    /// The next non-blank stdout line, within `timeout`.
    fn next_line(&mut self, timeout: Duration) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Line(line)) if line.trim().is_empty() => continue,
                Ok(Event::Line(line)) => return Ok(line),
                Ok(Event::Eof) | Err(RecvTimeoutError::Disconnected) => {
                    return Err("the process closed stdout (exited?)".to_string())
                }
                Ok(Event::Broken(e)) => return Err(e),
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!("no answer within {timeout:?} (timed out)"))
                }
            }
        }
    }

    /// Kills the process group, reaps the process and lets stderr drain.
    /// Returns (exit status, stderr tail).
    fn kill(mut self) -> (String, String) {
        self.requests = None;
        let status = kill_and_reap(&mut self.child);
        let _ = self.stderr_done.recv_timeout(STDERR_SETTLE);
        let tail = lock(&self.stderr).text();
        (status, tail)
    }

    /// Says `bye`, gives the process [`BYE_GRACE`] to exit, then kills what
    /// is left.
    fn bye(mut self) {
        let _ = self.send(protocol::bye_request());
        self.requests = None; // closes stdin once the line is written
        let deadline = Instant::now() + BYE_GRACE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Line(_)) => continue,
                _ => break,
            }
        }
        let _ = self.kill();
    }
}

/// Kills the process's group (it leads one) and the process, then reaps it.
/// The group is signalled before the reap, so its id cannot have been reused.
fn kill_and_reap(child: &mut Child) -> String {
    kill_group(child.id());
    let _ = child.kill();
    match child.wait() {
        Ok(status) => status.to_string(),
        Err(e) => format!("exit status unknown: {e}"),
    }
}

#[cfg(unix)]
fn kill_group(pid: u32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    const SIGKILL: i32 = 9;
    if let Ok(pid) = i32::try_from(pid) {
        if pid > 0 {
            // SAFETY: kill(2) takes plain integers and touches no memory of
            // ours; `-pid` names the process group the child leads
            // (`process_group(0)`), and the child is not reaped yet.
            unsafe {
                kill(-pid, SIGKILL);
            }
        }
    }
}

#[cfg(not(unix))]
fn kill_group(_pid: u32) {}

fn spawn_thread(name: &str, body: impl FnOnce() + Send + 'static) -> Result<(), String> {
    thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn feed_stdin(mut stdin: ChildStdin, requests: Receiver<String>) {
    for line in requests {
        if stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .is_err()
        {
            return;
        }
    }
    // Dropping `stdin` closes the pipe: end of input for the process.
}

fn read_stdout(stdout: ChildStdout, events: Sender<Event>) {
    let mut reader = BufReader::with_capacity(1 << 16, stdout);
    loop {
        let mut line = String::new();
        let event = match (&mut reader).take(MAX_LINE_BYTES + 1).read_line(&mut line) {
            Ok(0) => Event::Eof,
            Ok(_) if line.ends_with('\n') => {
                line.pop();
                if line.ends_with('\r') {
                    line.pop();
                }
                Event::Line(line)
            }
            Ok(n) if n as u64 > MAX_LINE_BYTES => Event::Broken(format!(
                "a stdout line is longer than {MAX_LINE_BYTES} bytes"
            )),
            // The last line, without a newline, before end of file.
            Ok(_) => Event::Line(line),
            Err(e) => Event::Broken(format!("cannot read stdout: {e}")),
        };
        let last = matches!(event, Event::Eof | Event::Broken(_));
        if events.send(event).is_err() || last {
            return;
        }
    }
}

fn read_stderr(mut stderr: ChildStderr, tail: Arc<Mutex<Tail>>, done: Sender<()>) {
    let mut buf = [0u8; 4096];
    loop {
        match stderr.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => lock(&tail).push(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
    }
    let _ = done.send(());
}

fn lock(tail: &Mutex<Tail>) -> std::sync::MutexGuard<'_, Tail> {
    tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A bounded ring buffer of the last bytes written to it.
#[derive(Debug)]
struct Tail {
    bytes: VecDeque<u8>,
    capacity: usize,
}

impl Tail {
    fn new(capacity: usize) -> Tail {
        Tail {
            bytes: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    fn push(&mut self, data: &[u8]) {
        let data = &data[data.len().saturating_sub(self.capacity)..];
        let overflow = (self.bytes.len() + data.len()).saturating_sub(self.capacity);
        self.bytes.drain(..overflow);
        self.bytes.extend(data);
    }

    fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        String::from_utf8_lossy(&all).into_owned()
    }
}

#[cfg(test)]
mod tests {
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
}
