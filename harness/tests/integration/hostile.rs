//! `harness run` against hostile adapters: one that hangs on every request
//! is given up after three timeouts and the run ends with one group of
//! errors; SIGINT, SIGTERM and SIGHUP to the harness leave no process of
//! the adapter's group behind; a line past the answer cap is an error.

use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A scratch directory for one test, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "molrec-harness-hostile-{tag}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    /// Writes an adapter that greets (reads and writes), records its
    /// process group in `group` and each request in `asked`, and runs
    /// `on_request` (Python, `req` in scope) for every request. Returns the
    /// command that runs it; `; true` keeps `sh` from exec-ing python, so
    /// python is a grandchild of the harness.
    fn adapter(&self, prelude: &str, on_request: &str) -> String {
        let script = format!(
            r#"import json, os, signal, subprocess, sys, time
{prelude}
open({group:?}, "w").write(str(os.getpgrp()))
print(json.dumps({{"type": "hello", "protocol": 1, "name": "hostile", "version": "0",
                  "capabilities": {{"write": True, "read": True}}}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    with open({asked:?}, "a") as f:
        f.write(str(req.get("id")) + "\n")
{on_request}
"#,
            group = self.0.join("group").display().to_string(),
            asked = self.0.join("asked").display().to_string(),
        );
        let path = self.0.join("adapter.py");
        std::fs::write(&path, script).expect("adapter");
        format!("python3 '{}'; true", path.display())
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn harness(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_harness"));
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// An adapter that hangs on every request, with the default limits: the
/// run ends well within a minute (three timeouts of 15 s), every trial
/// after the third is an error with one message, and the Markdown report
/// shows them as one section.
#[test]
fn an_adapter_hanging_on_every_request_is_given_up_after_three_timeouts() {
    let dir = Scratch::new("hang");
    let command = dir.adapter("", "    time.sleep(3600)");
    let reports = dir.path("reports");
    let started = Instant::now();
    let out = harness(&["run", "--adapter", &command, "--report"])
        .arg(&reports)
        .output()
        .expect("harness runs");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    assert!(
        took >= Duration::from_secs(45),
        "three timeouts of 15 s: {took:?}"
    );
    let asked = std::fs::read_to_string(dir.path("asked")).expect("asked");
    assert_eq!(asked.lines().count(), 3, "requests sent: {asked}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(reports.join("report.json")).expect("report"))
            .expect("json");
    // The reference runs beside the adapter: the adapter's report is the second.
    let results = report["implementations"][1]["results"]
        .as_array()
        .expect("results");
    let details: Vec<&str> = results
        .iter()
        .filter(|r| r["outcome"] == "error")
        .filter_map(|r| r["detail"].as_str())
        .collect();
    let given_up: Vec<&&str> = details
        .iter()
        .filter(|d| d.starts_with("adapter unresponsive since trial "))
        .collect();
    assert!(given_up.len() + 3 >= results.len(), "{details:?}");
    assert!(given_up.windows(2).all(|w| w[0] == w[1]), "one message");
    assert!(
        given_up[0].contains(": 3 timeouts in a row;"),
        "{}",
        given_up[0]
    );
    let markdown = std::fs::read_to_string(reports.join("report.md")).expect("report.md");
    let headings: Vec<&str> = markdown
        .lines()
        .filter(|l| l.starts_with("### ") && l.contains("adapter unresponsive since"))
        .collect();
    assert_eq!(headings.len(), 1, "one group: {markdown}");
    let first = markdown.lines().find(|l| l.starts_with("### "));
    assert_eq!(first, Some(headings[0]), "the group leads the report");
    assert!(headings[0].ends_with(" — error"), "{}", headings[0]);
}

/// Each of SIGINT, SIGTERM and SIGHUP to a running harness whose adapter
/// ignores `bye` and those signals (and has a child of its own): the
/// harness dies of the signal, and no process of the adapter's group is
/// left.
#[cfg(target_os = "linux")]
#[test]
fn a_signal_to_the_harness_leaves_no_adapter_process_behind() {
    for (signal, name) in [(2, "INT"), (15, "TERM"), (1, "HUP")] {
        let dir = Scratch::new(&format!("signal-{name}"));
        let prelude = "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n    signal.signal(s, signal.SIG_IGN)\nsubprocess.Popen(['sleep', '3600'])";
        let command = dir.adapter(prelude, "    time.sleep(3600)");
        let mut child = harness(&["run", "--adapter", &command, "--timeout", "600"])
            .spawn()
            .expect("harness runs");
        let asked = dir.path("asked");
        wait_for(&mut child, || asked.exists(), "the first request");
        let group: u32 = std::fs::read_to_string(dir.path("group"))
            .expect("group")
            .trim()
            .parse()
            .expect("a group id");
        assert!(processes_of_group(group) >= 2, "adapter and its child run");
        send_signal(child.id(), signal);
        let status = wait_exit(&mut child, Duration::from_secs(20));
        assert_eq!(status.signal(), Some(signal), "SIG{name}: {status:?}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while processes_of_group(group) > 0 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            processes_of_group(group),
            0,
            "SIG{name}: the adapter's group is left"
        );
    }
}

/// An adapter that answers with a line of 2 GiB is stopped at the default
/// cap (256 MiB), with an error naming it, and the run goes on.
#[test]
fn an_answer_past_the_cap_is_an_error_naming_it() {
    let dir = Scratch::new("cap");
    let on_request = "    chunk = 'x' * (1 << 20)\n    for _ in range(2048):\n        sys.stdout.write(chunk)\n    sys.stdout.write('\\n')\n    sys.stdout.flush()";
    let command = dir.adapter("", on_request);
    let out = harness(&[
        "run",
        "--adapter",
        &command,
        "--filter",
        "collection::example-round-trip::read",
    ])
    .output()
    .expect("harness runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 errors"), "{stdout}");
    let reports = dir.path("reports");
    let out = harness(&[
        "run",
        "--adapter",
        &command,
        "--filter",
        "collection::example-round-trip::read",
        "--report",
    ])
    .arg(&reports)
    .output()
    .expect("harness runs");
    assert_eq!(out.status.code(), Some(1));
    let md = std::fs::read_to_string(reports.join("report.md")).expect("report.md");
    assert!(
        md.contains("an answer line is longer than the cap of 268435456 bytes"),
        "{md}"
    );
}

fn wait_for(child: &mut Child, ready: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("the harness exited ({status}) before {what}");
        }
        assert!(Instant::now() < deadline, "no {what} within 30 s");
        thread::sleep(Duration::from_millis(20));
    }
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the harness did not exit within {limit:?} of the signal");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn send_signal(pid: u32, signal: i32) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// Processes of `group` that are not zombies, from `/proc`.
#[cfg(target_os = "linux")]
fn processes_of_group(group: u32) -> usize {
    let Ok(entries) = std::fs::read_dir(Path::new("/proc")) else {
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
