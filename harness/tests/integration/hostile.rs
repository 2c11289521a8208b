//! `harness run` against hostile adapters: one that hangs on every request
//! is given up after three timeouts and the run ends with one group of
//! errors; SIGINT, SIGTERM and SIGHUP to the harness leave no process of
//! the adapter's group behind; a line past the answer cap is an error; one
//! whose every word is markup, control characters and broken escapes, with
//! answers of 1 MiB, leaves every report parseable and its text inert.

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

/// An adapter that hangs on every request: after three timeouts (2 s here)
/// the run ends, every trial after the third is an error with one message,
/// and the Markdown report shows them as one section. The defaults, 15 s
/// and 3 failures, end such a run within a minute.
#[test]
fn an_adapter_hanging_on_every_request_is_given_up_after_three_timeouts() {
    let help = harness(&["run", "--help"]).output().expect("harness runs");
    let help = String::from_utf8_lossy(&help.stdout);
    let default_of = |flag: &str| -> u64 {
        let from = help
            .find(flag)
            .unwrap_or_else(|| panic!("{flag} in {help}"));
        let rest = &help[from..];
        let value = &rest[rest.find("[default: ").expect("a default") + 10..];
        value[..value.find(']').expect("]")]
            .parse()
            .expect("a number")
    };
    assert_eq!(default_of("--timeout <TIMEOUT>"), 15, "{help}");
    assert_eq!(default_of("--max-failures <MAX_FAILURES>"), 3, "{help}");
    let dir = Scratch::new("hang");
    let command = dir.adapter("", "    time.sleep(3600)");
    let reports = dir.path("reports");
    let started = Instant::now();
    let out = harness(&["run", "--adapter", &command, "--timeout", "2", "--report"])
        .arg(&reports)
        .output()
        .expect("harness runs");
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert!(
        took >= Duration::from_secs(6),
        "three timeouts of 2 s: {took:?}"
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

/// What the hostile adapter puts in its name, version, messages, clause
/// names and stderr: HTML and Markdown markup, the ends of a CDATA section
/// and of an XML comment, NUL, an ANSI colour code, a line break,
/// noncharacters.
const HOSTILE: &str = "<script>alert(\"x&y\")</script><img src=x onerror=alert(1)> ]]> -- ---> \u{0} \u{1b}[31mred\u{1b}[0m | `a``b` *em* [l](javascript:x) $x$ \r\nline2 \u{fffe}\u{ffff}";

/// An adapter that refuses every request with hostile text: the 2nd and
/// 6th answers carry 1 MiB messages, every 4th an escaped lone surrogate
/// (not JSON serde_json accepts: an error, quoted with the stderr, which
/// holds the hostile text and bytes that are not UTF-8). Returns the
/// command that runs it.
fn hostile_adapter(dir: &Scratch) -> String {
    let words = dir.path("hostile.json");
    std::fs::write(&words, serde_json::to_string(HOSTILE).expect("json")).expect("words");
    let script = format!(
        r#"import json, os, sys
H = json.load(open({words:?}))
COUNT = {count:?}
print(json.dumps({{"type": "hello", "protocol": 1, "name": "hostile " + H, "version": "1 " + H,
                  "capabilities": {{"write": True, "read": True}}}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req.get("op") == "bye":
        break
    n = int(open(COUNT).read()) + 1 if os.path.exists(COUNT) else 1
    open(COUNT, "w").write(str(n))
    sys.stderr.write("stderr " + H + "\n")
    sys.stderr.flush()
    sys.stderr.buffer.write(b"not UTF-8: \xed\xa0\x80 \xff\n")
    sys.stderr.flush()
    answer = {{"id": req["id"], "status": "refused", "message": "refused " + H, "clause": "clause " + H}}
    if n % 4 == 3:
        answer["message"] = "lone \ud800 surrogate " + H
    elif n in (2, 6):
        answer["message"] = "big " + H + "x" * (1 << 20)
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()
"#,
        words = words.display().to_string(),
        count = dir.path("count").display().to_string(),
    );
    let path = dir.path("hostile.py");
    std::fs::write(&path, script).expect("adapter");
    format!("python3 '{}'", path.display())
}

/// The hostile adapter beside the reference, through `harness run` on the
/// cases of the box (refusals of both kinds, round trips, interop):
/// report.json keeps every text exact; junit.xml is XML a strict parser
/// accepts; report.html parses without an error into a page with the
/// page's one script, no handler attribute and no element the adapter
/// wrote; report.md has no raw HTML and no link, and every table row has
/// its table's columns. In every form but JSON a NUL or ESC is spelled
/// out, and a 1 MiB message is cut, saying so.
#[test]
fn hostile_text_from_an_adapter_leaves_every_report_well_formed_and_inert() {
    let dir = Scratch::new("text");
    let command = hostile_adapter(&dir);
    let reports = dir.path("reports");
    let out = harness(&["run", "--adapter", &command, "--filter", "box-", "--report"])
        .arg(&reports)
        .output()
        .expect("harness runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let read = |name: &str| std::fs::read_to_string(reports.join(name)).expect(name);
    let name = format!("hostile {HOSTILE}");

    // report.json: exact.
    let json: Value = serde_json::from_str(&read("report.json")).expect("report.json");
    let hostile = &json["implementations"][1];
    assert_eq!(hostile["implementation"]["name"], name.as_str());
    let details: Vec<&str> = hostile["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|r| r["detail"].as_str())
        .collect();
    assert!(details.iter().any(|d| d.contains(HOSTILE)), "{details:?}");
    assert!(
        details.iter().any(|d| d.len() > 1 << 20),
        "a 1 MiB message, whole"
    );
    assert!(
        details.iter().any(|d| d.contains("\\ud800")),
        "the lone surrogate, quoted"
    );

    // Every other form: nothing XML cannot carry, the controls spelled out.
    let xml = read("junit.xml");
    let html = read("report.html");
    let md = read("report.md");
    let spelled = "\\u{0} \\u{1b}[31mred\\u{1b}[0m";
    for (form, text) in [
        ("junit.xml", &xml),
        ("report.html", &html),
        ("report.md", &md),
    ] {
        let hidden = text.chars().find(|c| {
            c.is_control() && !matches!(c, '\t' | '\n' | '\r')
                || matches!(c, '\u{fffe}' | '\u{ffff}')
        });
        assert_eq!(hidden, None, "{form}");
        assert!(text.contains(spelled), "{form} spells NUL and ESC out");
        assert!(
            text.contains("more bytes cut; report.json has the whole detail"),
            "{form}"
        );
        assert!(text.len() < 1 << 20, "{form}: {} bytes", text.len());
    }

    // junit.xml: a strict XML parser reads it; the name is text.
    let doc = roxmltree::Document::parse(&xml).expect("junit.xml is well-formed XML");
    let suites = doc.root_element();
    assert_eq!(suites.tag_name().name(), "testsuites");
    assert!(suites
        .attribute("name")
        .is_some_and(|n| n.contains("<script>alert(")));
    assert!(doc.descendants().filter(|n| n.is_comment()).count() >= 2);
    let failures = doc
        .descendants()
        .filter(|n| n.has_tag_name("failure"))
        .count();
    assert!(failures >= 5, "{failures} failures");

    // report.html: parsed as a browser does, without an error.
    let page = scraper::Html::parse_document(&html);
    assert_eq!(page.errors, Vec::<std::borrow::Cow<str>>::new());
    let select = |css: &str| scraper::Selector::parse(css).expect("selector");
    assert_eq!(
        page.select(&select("script")).count(),
        1,
        "the page's own script"
    );
    assert_eq!(page.select(&select("img")).count(), 0);
    for element in page.select(&select("*")) {
        let handler = element.value().attrs().find(|(a, _)| a.starts_with("on"));
        assert_eq!(handler, None, "{}", element.value().name());
    }
    let title: String = page
        .select(&select("title"))
        .flat_map(|t| t.text())
        .collect();
    assert!(title.contains("<script>alert(\"x&y\")</script>"), "{title}");

    // report.md: no raw HTML, no link; every table row has its table's columns.
    use pulldown_cmark::{Event, Options, Parser, Tag};
    for event in Parser::new_ext(&md, Options::ENABLE_TABLES) {
        match event {
            Event::Html(h) | Event::InlineHtml(h) => panic!("raw HTML in report.md: {h}"),
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                panic!("a link in report.md: {dest_url}")
            }
            _ => {}
        }
    }
    let rows = markdown_table_rows(&md);
    assert!(rows > 20, "{rows} table rows checked");
    assert!(md.contains("| hostile &lt;script&gt;"), "{md}");
}

/// Checks that each row of each Markdown table outside fenced code has as
/// many cells as its header (cells split by pipes not escaped with `\`),
/// and that a table ends only at a blank line; returns the rows checked.
fn markdown_table_rows(md: &str) -> usize {
    let cells = |line: &str| {
        let mut escaped = false;
        let mut pipes = 0;
        for c in line.chars() {
            pipes += usize::from(c == '|' && !escaped);
            escaped = c == '\\' && !escaped;
        }
        pipes
    };
    let lines: Vec<&str> = md.lines().collect();
    let mut fence: Option<usize> = None;
    let mut rows = 0;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let ticks = line.chars().take_while(|c| *c == '`').count();
        match fence {
            Some(open) if ticks >= open && line.trim_end().len() == ticks => fence = None,
            Some(_) => {}
            None if ticks >= 3 => fence = Some(ticks),
            None if line.starts_with('|')
                && lines
                    .get(i + 1)
                    .is_some_and(|l| l.starts_with("|:-") || l.starts_with("|--")) =>
            {
                let columns = cells(line);
                i += 1;
                while let Some(row) = lines.get(i).filter(|l| !l.is_empty()) {
                    assert!(
                        row.starts_with('|') && row.ends_with('|'),
                        "a broken table row: {row:?}"
                    );
                    assert_eq!(
                        cells(row),
                        columns,
                        "a row of another width: {row:?} under {line:?}"
                    );
                    rows += 1;
                    i += 1;
                }
            }
            None => {}
        }
        i += 1;
    }
    rows
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
