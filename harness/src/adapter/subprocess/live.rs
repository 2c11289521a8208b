//! The process behind a [`Subprocess`]: spawning it in its own process
//! group, the threads that feed its stdin and read its stdout and stderr,
//! the registry of running process groups that [`end_all_adapters`]
//! empties, and killing a group.

use super::*;

/// One event of the stdout reader thread.
pub(super) enum Event {
    /// A line, newline stripped.
    Line(String),
    /// Stdout closed: the process exited (or closed it).
    Eof,
    /// Stdout could not be read (not UTF-8, line too long, I/O error).
    Broken(String),
}

/// One running process and its threads.
pub(super) struct Live {
    pub(super) child: Child,
    pub(super) requests: Option<Sender<String>>,
    pub(super) events: Receiver<Event>,
    pub(super) stderr: Arc<Mutex<Tail>>,
    pub(super) stderr_done: Receiver<()>,
}

/// A running adapter as [`end_all_adapters`] reaches it: its process group
/// and the way to its stdin.
pub(super) struct Running {
    pub(super) group: u32,
    pub(super) requests: Sender<String>,
}

/// Every adapter process group running now.
pub(super) static RUNNING: Mutex<Vec<Running>> = Mutex::new(Vec::new());

pub(super) fn running() -> std::sync::MutexGuard<'static, Vec<Running>> {
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

/// Spawns `sh -c command` as every adapter runs: in a process group of its
/// own (so a kill reaches whatever `sh` started), its three streams piped.
pub(crate) fn spawn_adapter(
    command: &str,
) -> Result<(Child, ChildStdin, ChildStdout, ChildStderr), String> {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        cmd.process_group(0);
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot spawn `sh -c {command:?}`: {e}"))?;
    match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
        (Some(stdin), Some(stdout), Some(stderr)) => Ok((child, stdin, stdout, stderr)),
        _ => {
            kill_and_reap(&mut child);
            Err("the process has no stdin, stdout or stderr pipe".to_string())
        }
    }
}

/// Puts a running adapter's process group (and the way to its stdin) in
/// the registry [`end_all_adapters`] empties; [`kill_and_reap`] takes it out.
pub(crate) fn register_adapter(group: u32, requests: Sender<String>) {
    running().push(Running { group, requests });
}

/// Lets the registry's handle on an adapter's stdin go, so that stdin
/// closes once its owner drops its own (end of input for the adapter),
/// while the group stays registered for [`end_all_adapters`].
pub(crate) fn release_adapter_stdin(group: u32) {
    let (dead, _) = mpsc::channel();
    for r in running().iter_mut().filter(|r| r.group == group) {
        r.requests = dead.clone();
    }
}

impl Live {
    /// Spawns the process and reads its greeting.
    pub(super) fn start(
        command: &str,
        timeout: Duration,
        max_answer_bytes: u64,
    ) -> Result<(Live, Description), String> {
        let (mut child, stdin, stdout, stderr) = spawn_adapter(command)?;
        let tail = Arc::new(Mutex::new(Tail::new(STDERR_TAIL_BYTES)));
        let (request_tx, request_rx) = mpsc::channel();
        let (event_tx, events) = mpsc::sync_channel(LINES_AHEAD);
        let (done_tx, stderr_done) = mpsc::channel();
        register_adapter(child.id(), request_tx.clone());
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
    pub(super) fn send(&mut self, mut line: String) -> Result<(), String> {
        line.push('\n');
        match &self.requests {
            Some(requests) => requests
                .send(line)
                .map_err(|_| "the process has closed its stdin".to_string()),
            None => Err("the process's stdin is closed".to_string()),
        }
    }

    /// The next non-blank stdout line, whole, within `timeout`.
    pub(super) fn next_line(&mut self, timeout: Duration) -> Result<String, (Failure, String)> {
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
    pub(super) fn kill(mut self) -> (String, String) {
        self.requests = None;
        let status = kill_and_reap(&mut self.child);
        let _ = self.stderr_done.recv_timeout(STDERR_SETTLE);
        let tail = lock(&self.stderr).text();
        (status, tail)
    }

    /// Says `bye`, gives the process [`BYE_GRACE`] to exit, then kills what
    /// is left.
    pub(super) fn bye(mut self) {
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
pub(crate) fn kill_and_reap(child: &mut Child) -> String {
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
    pub(super) fn kill(pid: i32, sig: i32) -> i32;
}

/// Sends `signal` to the process group `group` leads; whether it reached a
/// process.
#[cfg(unix)]
pub(super) fn signal_group(group: u32, signal: i32) -> bool {
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
pub(super) fn kill_group(group: u32) {
    const SIGKILL: i32 = 9;
    signal_group(group, SIGKILL);
}

/// Whether a process of the group is left (signal 0 checks, sends nothing).
#[cfg(unix)]
pub(super) fn group_alive(group: u32) -> bool {
    signal_group(group, 0)
}

#[cfg(not(unix))]
pub(super) fn kill_group(_group: u32) {}

#[cfg(not(unix))]
pub(super) fn group_alive(_group: u32) -> bool {
    false
}

pub(super) fn spawn_thread(name: &str, body: impl FnOnce() + Send + 'static) -> Result<(), String> {
    thread::Builder::new()
        .name(name.to_string())
        .spawn(body)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

pub(super) fn feed_stdin(mut stdin: ChildStdin, requests: Receiver<String>) {
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

pub(super) fn read_stdout(stdout: ChildStdout, events: SyncSender<Event>, max_line_bytes: u64) {
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

pub(super) fn read_stderr(mut stderr: ChildStderr, tail: Arc<Mutex<Tail>>, done: Sender<()>) {
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

pub(super) fn lock(tail: &Mutex<Tail>) -> std::sync::MutexGuard<'_, Tail> {
    tail.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A bounded ring buffer of the last bytes written to it.
#[derive(Debug)]
pub(super) struct Tail {
    pub(super) bytes: VecDeque<u8>,
    pub(super) capacity: usize,
}

impl Tail {
    pub(super) fn new(capacity: usize) -> Tail {
        Tail {
            bytes: VecDeque::with_capacity(capacity),
            capacity,
        }
    }

    pub(super) fn push(&mut self, data: &[u8]) {
        let data = &data[data.len().saturating_sub(self.capacity)..];
        let overflow = (self.bytes.len() + data.len()).saturating_sub(self.capacity);
        self.bytes.drain(..overflow);
        self.bytes.extend(data);
    }

    pub(super) fn text(&self) -> String {
        let (a, b) = self.bytes.as_slices();
        let mut all = Vec::with_capacity(a.len() + b.len());
        all.extend_from_slice(a);
        all.extend_from_slice(b);
        String::from_utf8_lossy(&all).into_owned()
    }
}
