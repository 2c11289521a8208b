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
//!
//! What one adapter may cost the harness is bounded ([`Limits`]): each
//! answer must arrive whole within the timeout and within
//! [`Limits::max_answer_bytes`]; after [`Limits::max_failures`] failed
//! requests in a row with no good answer between them, or past the run's
//! [`Limits::deadline`], the adapter is not asked again and every later
//! request is an error with one message (so the report shows one group).
//! Every running adapter's process group is in a registry that
//! [`end_all_adapters`] empties, for a harness that is stopped by a signal.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::protocol::{self, Answer, Op};
use super::{Description, Implementation, Outcome};

/// The default time an implementation has to greet and to answer each
/// request. With [`DEFAULT_MAX_FAILURES`], an adapter that hangs on every
/// request costs a run 45 s before it is given up.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// The default number of failed requests in a row (timeouts, crashes,
/// malformed answers, failed restarts) after which an adapter is given up.
pub const DEFAULT_MAX_FAILURES: u32 = 3;

/// The default longest answer line, bytes (the suites' largest collection
/// is a few hundred KiB of JSON).
pub const DEFAULT_MAX_ANSWER_BYTES: u64 = 256 << 20;

/// How much of the process's stderr is kept (its last bytes) for error messages.
pub const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// Stdout lines read ahead of the harness: the reader thread blocks (and
/// the adapter with it) beyond these, so unasked output holds no memory.
const LINES_AHEAD: usize = 4;

/// What one adapter may cost a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The time for the greeting and for each whole answer (not per read:
    /// an adapter that sleeps between the bytes of a line times out too).
    pub timeout: Duration,
    /// Failed requests in a row after which the adapter is not asked
    /// again (0: never given up).
    pub max_failures: u32,
    /// The longest answer line; a longer one is an error naming this cap,
    /// and no more than this is ever held.
    pub max_answer_bytes: u64,
    /// The whole run's time for this adapter, from its first spawn; past
    /// it, every request is an error. `None`: no bound.
    pub deadline: Option<Duration>,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            timeout: DEFAULT_TIMEOUT,
            max_failures: DEFAULT_MAX_FAILURES,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            deadline: None,
        }
    }
}

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
    limits: Limits,
    /// When the run's deadline passes, if it has one.
    ends: Option<Instant>,
    description: Description,
    live: Option<Live>,
    next_id: u64,
    restarts: usize,
    /// The trial being run ([`Implementation::begin_trial`]).
    trial: String,
    /// Failed requests since the last good answer, and the trial of the
    /// first of them.
    failures: Vec<Failure>,
    streak_began: String,
    /// Set once the adapter is given up: the error of every later request.
    given_up: Option<String>,
}

/// What kind of failure a request met, for the message that gives an
/// adapter up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Failure {
    Timeout,
    Other,
}

impl std::fmt::Debug for Subprocess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subprocess")
            .field("command", &self.command)
            .field("limits", &self.limits)
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
        Subprocess::spawn_with(
            command,
            Limits {
                timeout,
                ..Limits::default()
            },
        )
    }

    /// Spawns `command` under `limits` (see [`Limits`]), reads its greeting.
    pub fn spawn_with(command: &str, limits: Limits) -> Result<Subprocess, String> {
        let ends = limits.deadline.map(|d| Instant::now() + d);
        let (live, description) = Live::start(command, limits.timeout, limits.max_answer_bytes)?;
        Ok(Subprocess {
            command: command.to_string(),
            limits,
            ends,
            description,
            live: Some(live),
            next_id: 1,
            restarts: 0,
            trial: String::new(),
            failures: Vec::new(),
            streak_began: String::new(),
            given_up: None,
        })
    }

    /// The command the process runs (through `sh -c`).
    pub fn command(&self) -> &str {
        &self.command
    }

    /// The time allowed for the greeting and for each answer.
    pub fn timeout(&self) -> Duration {
        self.limits.timeout
    }

    /// Changes the time allowed for each later request (and greeting).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.limits.timeout = timeout;
    }

    /// Why the adapter is no longer asked anything, once it is given up.
    pub fn given_up(&self) -> Option<&str> {
        self.given_up.as_deref()
    }

    /// How many times the process was re-spawned after an error.
    pub fn restarts(&self) -> usize {
        self.restarts
    }

    /// Sends one request and waits for its answer. `Err` is the full error
    /// message (stderr tail included); the process has then been killed.
    fn exchange(&mut self, op: Op, id: u64, line: String) -> Result<Answer, String> {
        if let Some(why) = &self.given_up {
            return Err(why.clone());
        }
        let deadline_passed = |trial: &str, limits: &Limits| {
            format!(
                "adapter given up at trial {trial}: the run's deadline of {:?} has passed; it is not asked again",
                limits.deadline.unwrap_or_default()
            )
        };
        let timeout = match self.ends {
            None => self.limits.timeout,
            Some(ends) => match ends.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => self.limits.timeout.min(left),
                _ => {
                    let why = deadline_passed(&self.trial, &self.limits);
                    self.fail("");
                    self.given_up = Some(why.clone());
                    return Err(why);
                }
            },
        };
        let result = self.request(op, id, line, timeout);
        match result {
            Ok(answer) => {
                self.failures.clear();
                Ok(answer)
            }
            // The deadline cut this request's time short.
            Err((Failure::Timeout, what)) if timeout < self.limits.timeout => {
                let why = deadline_passed(&self.trial, &self.limits);
                let error = self.fail(&what);
                self.given_up = Some(why.clone());
                Err(format!("{why}\n{error}"))
            }
            Err((kind, what)) => {
                if self.failures.is_empty() {
                    self.streak_began = self.trial.clone();
                }
                self.failures.push(kind);
                let error = self.fail(&what);
                let n = self.failures.len();
                if self.limits.max_failures > 0 && n >= self.limits.max_failures as usize {
                    let timeouts = self
                        .failures
                        .iter()
                        .filter(|f| **f == Failure::Timeout)
                        .count();
                    let kinds = match timeouts {
                        0 => format!("{n} failed requests (crashes or malformed answers)"),
                        t if t == n => format!("{n} timeouts"),
                        t => format!("{n} failed requests ({t} timeouts)"),
                    };
                    self.given_up = Some(format!(
                        "adapter unresponsive since trial {}: {kinds} in a row; it is not asked again (--max-failures {})",
                        self.streak_began, self.limits.max_failures
                    ));
                }
                Err(error)
            }
        }
    }

    /// One request on a running process (started again first if an earlier
    /// error killed it).
    fn request(
        &mut self,
        op: Op,
        id: u64,
        line: String,
        timeout: Duration,
    ) -> Result<Answer, (Failure, String)> {
        if self.live.is_none() {
            let (live, _) = Live::start(&self.command, timeout, self.limits.max_answer_bytes)
                .map_err(|e| {
                    let kind = if e.contains("(timed out)") {
                        Failure::Timeout
                    } else {
                        Failure::Other
                    };
                    (kind, format!("restarting the implementation failed: {e}"))
                })?;
            self.live = Some(live);
            self.restarts += 1;
        }
        let Some(live) = self.live.as_mut() else {
            return Err((Failure::Other, "the implementation is not running".into()));
        };
        let at = |what: String| format!("{} request {id}: {what}", op.as_str());
        live.send(line).map_err(|e| (Failure::Other, at(e)))?;
        let text = live.next_line(timeout).map_err(|(kind, e)| (kind, at(e)))?;
        protocol::parse_answer(&text, id, op).map_err(|e| (Failure::Other, at(e)))
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

    fn begin_trial(&mut self, trial: &str) {
        self.trial.clear();
        self.trial.push_str(trial);
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

/// A running adapter as [`end_all_adapters`] reaches it: its process group
/// and the way to its stdin.
struct Running {
    group: u32,
    requests: Sender<String>,
}

/// Every adapter process group running now.
static RUNNING: Mutex<Vec<Running>> = Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<Running>> {
    RUNNING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Ends every adapter of this process: says `bye` to each, gives them
/// `grace` to exit, then kills each process group. For a harness stopped
/// by a signal, before it exits (the [`Subprocess`] values are not dropped
/// then); a harness that ends normally drops them, which does the same.
pub fn end_all_adapters(grace: Duration) {
    let all: Vec<Running> = running().drain(..).collect();
    for adapter in &all {
        let _ = adapter.requests.send(protocol::bye_request() + "\n");
    }
    let until = Instant::now() + grace;
    while Instant::now() < until && all.iter().any(|a| group_alive(a.group)) {
        thread::sleep(Duration::from_millis(20));
    }
    for adapter in &all {
        kill_group(adapter.group);
    }
}

impl Live {
    /// Spawns the process and reads its greeting.
    fn start(
        command: &str,
        timeout: Duration,
        max_answer_bytes: u64,
    ) -> Result<(Live, Description), String> {
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
        let (event_tx, events) = mpsc::sync_channel(LINES_AHEAD);
        let (done_tx, stderr_done) = mpsc::channel();
        running().push(Running {
            group: child.id(),
            requests: request_tx.clone(),
        });
        let threads = spawn_thread("adapter-stdin", move || feed_stdin(stdin, request_rx))
            .and_then(|()| {
                spawn_thread("adapter-stdout", move || {
                    read_stdout(stdout, event_tx, max_answer_bytes)
                })
            })
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
            .map_err(|(_, e)| format!("no greeting: {e}"))
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

    /// The next non-blank stdout line, whole, within `timeout`.
    fn next_line(&mut self, timeout: Duration) -> Result<String, (Failure, String)> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Line(line)) if line.trim().is_empty() => continue,
                Ok(Event::Line(line)) => return Ok(line),
                Ok(Event::Eof) | Err(RecvTimeoutError::Disconnected) => {
                    return Err((
                        Failure::Other,
                        "the process closed stdout (exited?)".to_string(),
                    ))
                }
                Ok(Event::Broken(e)) => return Err((Failure::Other, e)),
                Err(RecvTimeoutError::Timeout) => {
                    return Err((
                        Failure::Timeout,
                        format!("no whole answer within {timeout:?} (timed out)"),
                    ))
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
        // Closes stdin once the line is written (the registry's handle on
        // it too).
        let group = self.child.id();
        running().retain(|r| r.group != group);
        self.requests = None;
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
    let group = child.id();
    running().retain(|r| r.group != group);
    kill_group(group);
    let _ = child.kill();
    match child.wait() {
        Ok(status) => status.to_string(),
        Err(e) => format!("exit status unknown: {e}"),
    }
}

#[cfg(unix)]
extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
}

/// Sends `signal` to the process group `group` leads; whether it reached a
/// process.
#[cfg(unix)]
fn signal_group(group: u32, signal: i32) -> bool {
    match i32::try_from(group) {
        // SAFETY: kill(2) takes plain integers and touches no memory of
        // ours; `-group` names the process group the child leads
        // (`process_group(0)`), signalled only while the child is not
        // reaped (or, from `end_all_adapters`, while it is registered,
        // which it stays until reaped), so the id cannot have been reused.
        Ok(pid) if pid > 0 => unsafe { kill(-pid, signal) == 0 },
        _ => false,
    }
}

#[cfg(unix)]
fn kill_group(group: u32) {
    const SIGKILL: i32 = 9;
    signal_group(group, SIGKILL);
}

/// Whether a process of the group is left (signal 0 checks, sends nothing).
#[cfg(unix)]
fn group_alive(group: u32) -> bool {
    signal_group(group, 0)
}

#[cfg(not(unix))]
fn kill_group(_group: u32) {}

#[cfg(not(unix))]
fn group_alive(_group: u32) -> bool {
    false
}

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

fn read_stdout(stdout: ChildStdout, events: SyncSender<Event>, max_line_bytes: u64) {
    let mut reader = BufReader::with_capacity(1 << 16, stdout);
    loop {
        let mut line = String::new();
        let event = match (&mut reader).take(max_line_bytes + 1).read_line(&mut line) {
            Ok(0) => Event::Eof,
            Ok(_) if line.ends_with('\n') => {
                line.pop();
                if line.ends_with('\r') {
                    line.pop();
                }
                Event::Line(line)
            }
            Ok(n) if n as u64 > max_line_bytes => Event::Broken(format!(
                "an answer line is longer than the cap of {max_line_bytes} bytes (--max-answer-mib); not read further"
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
}
