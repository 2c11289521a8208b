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
//!
//! Files by concern: this one (the protocol's requests and answers, the
//! limits, restarts), `live.rs` (the process, its threads, its process
//! group), `tests.rs`.

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

mod live;
#[cfg(test)]
mod tests;

pub use live::end_all_adapters;
use live::*;
pub(crate) use live::{kill_and_reap, register_adapter, release_adapter_stdin, spawn_adapter};

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
pub const BYE_GRACE: Duration = Duration::from_secs(1);

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
