//! The adapter's process as `harness smoke` sees it: stdout as bytes with
//! the time they came, so a check can tell a line from bytes without a
//! newline, and an answer that never came from one that came only when the
//! process exited (its stdout unflushed); stderr kept whole (up to a cap)
//! to show.
//!
//! The process is spawned as `harness run` spawns adapters (`sh -c`, a
//! process group of its own, in the registry a signal empties) and killed
//! with its group when the check ends.

use crate::adapter::subprocess::{
    kill_and_reap, register_adapter, release_adapter_stdin, spawn_adapter,
};
use std::io::{Read as _, Write as _};
use std::process::Child;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How much of stderr is kept to show (its last bytes).
const STDERR_KEPT: usize = 16 * 1024;

/// What stdout gave, read up to a deadline.
#[derive(Debug)]
pub(super) enum Read {
    /// A whole line (without its newline), and when its newline came.
    Line(String, Instant),
    /// The deadline passed; the bytes that came without a newline.
    TimedOut(Vec<u8>),
    /// stdout was closed (the process exited); the bytes after the last newline.
    Closed(Vec<u8>),
    /// A line longer than the cap, not read further.
    TooLong,
}

enum Chunk {
    Bytes(Vec<u8>),
    End,
}

/// A running adapter.
pub(super) struct Wire {
    child: Child,
    /// When the process was spawned.
    pub(super) started: Instant,
    requests: Option<Sender<String>>,
    chunks: Receiver<Chunk>,
    /// Bytes of stdout not yet handed out as a line.
    pending: Vec<u8>,
    closed: bool,
    max_line: usize,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Says when the stderr reader has read the end of stderr.
    stderr_done: Receiver<()>,
    status: Option<String>,
}

impl Wire {
    /// Spawns `command`; lines longer than `max_line` bytes are refused.
    pub(super) fn start(command: &str, max_line: usize) -> Result<Wire, String> {
        let (child, mut stdin, mut stdout, mut stderr) = spawn_adapter(command)?;
        let started = Instant::now();
        let (request_tx, request_rx) = mpsc::channel::<String>();
        register_adapter(child.id(), request_tx.clone());
        // Bounded: an adapter that floods stdout blocks on its writes
        // instead of filling the harness's memory (64 chunks of 64 KiB).
        let (chunk_tx, chunks) = mpsc::sync_channel(64);
        let kept = Arc::new(Mutex::new(Vec::new()));
        let (done_tx, stderr_done) = mpsc::channel();
        let spawned = spawn("smoke-stdin", move || {
            for line in request_rx {
                if stdin
                    .write_all(line.as_bytes())
                    .and_then(|()| stdin.flush())
                    .is_err()
                {
                    return;
                }
            }
        })
        .and_then(|()| {
            spawn("smoke-stdout", move || {
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    match stdout.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            if chunk_tx.send(Chunk::Bytes(buf[..n].to_vec())).is_err() {
                                return;
                            }
                        }
                    }
                }
                let _ = chunk_tx.send(Chunk::End);
            })
        })
        .and_then(|()| {
            let kept = Arc::clone(&kept);
            spawn("smoke-stderr", move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = stderr.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let mut all = kept.lock().unwrap_or_else(|p| p.into_inner());
                    all.extend_from_slice(&buf[..n]);
                    let excess = all.len().saturating_sub(STDERR_KEPT);
                    all.drain(..excess);
                }
                let _ = done_tx.send(());
            })
        });
        let mut wire = Wire {
            child,
            started,
            requests: Some(request_tx),
            chunks,
            pending: Vec::new(),
            closed: false,
            max_line,
            stderr: kept,
            stderr_done,
            status: None,
        };
        match spawned {
            Ok(()) => Ok(wire),
            Err(e) => {
                wire.kill();
                Err(format!("cannot start a reader thread: {e}"))
            }
        }
    }

    /// Writes one line (a newline is added) to the process's stdin.
    pub(super) fn send(&mut self, line: &str) -> Result<(), String> {
        match &self.requests {
            Some(requests) => requests
                .send(format!("{line}\n"))
                .map_err(|_| "the process has closed its stdin".to_string()),
            None => Err("its stdin is closed".to_string()),
        }
    }

    /// Closes the process's stdin: end of input, which an adapter treats as `bye`.
    pub(super) fn close_stdin(&mut self) {
        self.requests = None;
        release_adapter_stdin(self.child.id());
    }

    /// The next non-blank stdout line, waiting until `until`.
    pub(super) fn next_line(&mut self, until: Instant) -> Read {
        loop {
            if let Some(end) = self.pending.iter().position(|b| *b == b'\n') {
                let mut line: Vec<u8> = self.pending.drain(..=end).collect();
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                let line = String::from_utf8_lossy(&line).into_owned();
                if line.trim().is_empty() {
                    continue;
                }
                return Read::Line(line, Instant::now());
            }
            if self.pending.len() > self.max_line {
                return Read::TooLong;
            }
            if self.closed {
                return Read::Closed(std::mem::take(&mut self.pending));
            }
            let left = until.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(Chunk::Bytes(bytes)) => self.pending.extend_from_slice(&bytes),
                Ok(Chunk::End) | Err(RecvTimeoutError::Disconnected) => self.closed = true,
                Err(RecvTimeoutError::Timeout) => return Read::TimedOut(self.pending.clone()),
            }
        }
    }

    /// Whether stdout closes (the process, and whatever it started, has
    /// exited) within `within`; what comes meanwhile stays pending. The
    /// process is not reaped here: [`Wire::kill`] signals its group first.
    pub(super) fn wait_closed(&mut self, within: Duration) -> bool {
        let until = Instant::now() + within;
        while !self.closed {
            let left = until.saturating_duration_since(Instant::now());
            match self.chunks.recv_timeout(left) {
                Ok(Chunk::Bytes(bytes)) => {
                    if self.pending.len() <= self.max_line {
                        self.pending.extend_from_slice(&bytes);
                    }
                }
                Ok(Chunk::End) | Err(RecvTimeoutError::Disconnected) => self.closed = true,
                Err(RecvTimeoutError::Timeout) => return false,
            }
        }
        true
    }

    /// The bytes stdout gave that no [`Wire::next_line`] took yet.
    pub(super) fn unread(&self) -> &[u8] {
        &self.pending
    }

    /// What the process wrote to stderr (its last bytes).
    pub(super) fn stderr(&self) -> String {
        let all = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        String::from_utf8_lossy(&all).into_owned()
    }

    /// Kills the process's group (it leads one), then reaps the process;
    /// returns its exit status (its own, when it had exited already).
    pub(super) fn kill(&mut self) -> String {
        self.requests = None;
        if self.status.is_none() {
            self.status = Some(kill_and_reap(&mut self.child));
            // What the process wrote last, before it died, is still in the pipe.
            let _ = self.stderr_done.recv_timeout(Duration::from_millis(500));
        }
        self.status.clone().unwrap_or_default()
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.kill();
    }
}

fn spawn(name: &str, body: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .map(drop)
        .map_err(|e| e.to_string())
}
