//! Several implementations in one run: side by side with the reference,
//! writer × reader interop, failures grouped by cause, `report merge`, and
//! the commands the docs quote.

use crate::subprocess::mrec_binary;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let dir = harness::runner::scratch_dir(&format!("many-{tag}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Scratch(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// A Python adapter at `name.py`: greets as `name`, runs `on_request`
    /// (with `req` in scope) for each request. Returns its command.
    fn python_adapter(&self, name: &str, on_request: &str) -> String {
        let script = format!(
            r#"import json, sys, time
print(json.dumps({{"type": "hello", "protocol": 1, "name": "{name}", "version": "0",
                  "capabilities": {{"write": True, "read": True}}}}), flush=True)
for line in sys.stdin:
    req = json.loads(line)
    if req.get("op") == "bye":
        break
{on_request}
"#
        );
        let path = self.path(&format!("{name}.py"));
        std::fs::write(&path, script).expect("adapter");
        format!("python3 '{}'", path.display())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn harness(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("harness runs")
}

fn load(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("report.json")).expect("JSON")
}

fn names(report: &Value) -> Vec<&str> {
    report["implementations"]
        .as_array()
        .expect("implementations")
        .iter()
        .map(|r| r["implementation"]["name"].as_str().expect("name"))
        .collect()
}

/// (trial, verdict) of one implementation of a report.json.
fn verdicts(report: &Value, name: &str) -> Vec<(String, String)> {
    report["implementations"]
        .as_array()
        .expect("implementations")
        .iter()
        .find(|r| r["implementation"]["name"] == name)
        .expect("the implementation")["results"]
        .as_array()
        .expect("results")
        .iter()
        .map(|e| {
            (
                e["trial"].as_str().unwrap_or_default().to_owned(),
                e["verdict"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// The Markdown section that starts at `heading`, up to the next `## `.
fn section<'a>(markdown: &'a str, heading: &str) -> &'a str {
    let start = markdown.find(heading).expect(heading);
    let rest = &markdown[start + heading.len()..];
    &rest[..rest.find("\n## ").unwrap_or(rest.len())]
}

/// The reference and two adapters: three implementations side by side,
/// every interop pair run and passing, interop trials named so that a
/// filter selects them, and the report valid by its JSON Schema.
#[test]
fn adapters_run_beside_the_reference_with_every_interop_pair() {
    let dir = Scratch::new("pairs");
    let mrec = format!("'{}' adapter", mrec_binary().display());
    let reports = dir.path("reports");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--adapter", &format!("a={mrec}"), "--adapter"])
        .arg(format!("b={mrec}"))
        .arg("--report")
        .arg(&reports)
        .output()
        .expect("harness runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{out:?}");
    let last: Vec<&str> = stdout.lines().rev().take(2).collect();
    assert!(last[0].starts_with("reports: open "), "{stdout}");
    assert!(last[0].contains("report.html"), "{stdout}");
    assert!(last[1].ends_with(" passed, 0 failed"), "{stdout}");
    let report = load(&reports.join("report.json"));
    assert_eq!(report["format_version"], 3);
    assert_eq!(names(&report), ["molrec-reference", "a", "b"]);
    let interop = report["interop"].as_array().expect("interop");
    let cases = harness::interop::interop_cases(&harness::suite::Layout::repository())
        .expect("cases")
        .len();
    assert!(cases >= 10, "{cases}");
    assert_eq!(interop.len(), cases * 9, "every writer x every reader");
    for e in interop {
        assert_eq!(e["outcome"], "pass", "{e}");
    }
    assert!(interop
        .iter()
        .any(|e| e["trial"] == "collection::example-round-trip::interop::a->b"));
    let md = std::fs::read_to_string(reports.join("report.md")).expect("report.md");
    let matrix = section(&md, "## Interop: writer × reader");
    assert!(
        matrix.contains(&format!(
            "| **a** | {cases}/{cases} | {cases}/{cases} | {cases}/{cases} |"
        )),
        "{matrix}"
    );
    let html = std::fs::read_to_string(reports.join("report.html")).expect("report.html");
    assert!(html.contains("Interop: writer × reader"));
    let junit = std::fs::read_to_string(reports.join("junit.xml")).expect("junit.xml");
    assert!(junit.contains("<testsuite name=\"a: collection\""));
    assert!(junit.contains("<testsuite name=\"interop\""));

    let schema: Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/schemas/report.schema.json"),
        )
        .expect("schema"),
    )
    .expect("schema JSON");
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    let errors: Vec<String> = validator
        .iter_errors(&report)
        .take(5)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:?}");

    // A filter selects interop trials by name.
    let out = harness(&[
        "run",
        "--adapter",
        &format!("a={mrec}"),
        "--filter",
        "::interop::a->",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let lines: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("::interop::"))
        .collect();
    assert_eq!(
        lines.len(),
        cases * 2,
        "a->a and a->molrec-reference: {stdout}"
    );
}

/// One adapter crashes on every request, one never answers: each is an
/// error of its own, the good adapter's results are all passes, and the
/// hanging one (given up after three 1 s timeouts) does not hold the run
/// up for long.
#[test]
fn a_crashing_and_a_hanging_adapter_do_not_break_the_others() {
    let dir = Scratch::new("crash-hang");
    let mrec = format!("'{}' adapter", mrec_binary().display());
    let crash = dir.python_adapter("crash", "    sys.exit(3)");
    let hang = dir.python_adapter("hang", "    time.sleep(3600)");
    let reports = dir.path("reports");
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "run",
            "--timeout",
            "1",
            "--adapter",
            &format!("good={mrec}"),
        ])
        .args(["--adapter", &crash, "--adapter", &hang, "--report"])
        .arg(&reports)
        .stdin(Stdio::null())
        .output()
        .expect("harness runs");
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    let report = load(&reports.join("report.json"));
    assert_eq!(
        names(&report),
        ["molrec-reference", "good", "crash", "hang"]
    );
    for name in ["molrec-reference", "good"] {
        for (trial, verdict) in verdicts(&report, name) {
            assert_eq!(verdict, "pass", "{name}: {trial}");
        }
    }
    for name in ["crash", "hang"] {
        let v = verdicts(&report, name);
        assert!(!v.is_empty());
        for (trial, verdict) in v {
            assert!(
                verdict == "error" || verdict == "unsupported",
                "{name}: {trial}: {verdict}"
            );
        }
    }
    // Interop between the good ones passes; with a broken one it errs.
    for e in report["interop"].as_array().expect("interop") {
        let pair = (e["writer"].as_str().unwrap(), e["reader"].as_str().unwrap());
        let broken = ["crash", "hang"].contains(&pair.0) || ["crash", "hang"].contains(&pair.1);
        let verdict = e["verdict"].as_str().unwrap();
        assert_eq!(verdict == "pass", !broken, "{e}");
    }
    let md = std::fs::read_to_string(reports.join("report.md")).expect("report.md");
    let groups = section(&md, "## Failures by cause");
    assert!(
        groups.contains("### hang: adapter unresponsive since"),
        "{groups}"
    );
    assert!(groups.contains("### crash: "), "{groups}");
}

/// A reader that drops the last record: one failure group leads report.md,
/// with every read it got wrong, not a section per trial.
#[test]
fn a_reader_dropping_the_last_record_is_one_group_at_the_top() {
    let dir = Scratch::new("drop-last");
    let proxy = dir.path("drop_last.py");
    std::fs::write(
        &proxy,
        r#"import json, subprocess, sys
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
hello = json.loads(child.stdout.readline())
hello["name"] = "drops-last"
print(json.dumps(hello), flush=True)
for line in sys.stdin:
    child.stdin.write(line)
    child.stdin.flush()
    if json.loads(line).get("op") == "bye":
        break
    answer = json.loads(child.stdout.readline())
    records = (answer.get("collection") or {}).get("records")
    if records:
        records.pop()
    print(json.dumps(answer), flush=True)
"#,
    )
    .expect("proxy");
    let command = format!(
        "python3 '{}' '{}' adapter",
        proxy.display(),
        mrec_binary().display()
    );
    let reports = dir.path("reports");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--no-interop", "--adapter", &command, "--report"])
        .arg(&reports)
        .output()
        .expect("harness runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let md = std::fs::read_to_string(reports.join("report.md")).expect("report.md");
    let headings: Vec<&str> = md.lines().filter(|l| l.starts_with("### ")).collect();
    assert!(
        headings[0].starts_with(
            "### drops-last: records: expected array of length N, got array of length N: "
        ),
        "{md}"
    );
    let report = load(&reports.join("report.json"));
    // The groups are of the trials that rest on the text; a decision
    // trial the adapter fails is listed apart.
    let failed = report["implementations"]
        .as_array()
        .expect("implementations")
        .iter()
        .find(|r| r["implementation"]["name"] == "drops-last")
        .expect("drops-last")["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter(|e| e["verdict"] == "fail" && e["tier"] != "decision")
        .count();
    assert!(failed >= 40, "{failed}");
    assert!(
        headings[0].contains(&format!(": {failed} trials, ")),
        "every failure in the one group: {}",
        headings[0]
    );
    assert_eq!(headings.len(), 1, "{md}");
}

/// `report merge` of three runs of one adapter each gives the clause ×
/// implementation matrix of one run with all three; runs of different
/// suite versions are refused unless told otherwise.
#[test]
fn merged_runs_match_one_run_and_mismatched_suites_are_refused() {
    let dir = Scratch::new("merge");
    let mrec = format!("'{}' adapter", mrec_binary().display());
    let run = |adapters: &[&str], out: &Path| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_harness"));
        command.args(["run", "--no-interop"]);
        for name in adapters {
            command.args(["--adapter", &format!("{name}={mrec}")]);
        }
        let status = command
            .arg("--report")
            .arg(out)
            .stdout(Stdio::null())
            .status()
            .expect("harness runs");
        assert!(status.success());
    };
    run(&["x", "y", "z"], &dir.path("all"));
    for name in ["x", "y", "z"] {
        run(&[name], &dir.path(name));
    }
    let parts: Vec<PathBuf> = ["x", "y", "z"]
        .iter()
        .map(|n| dir.path(n).join("report.json"))
        .collect();
    let merged = dir.path("merged");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["report", "merge"])
        .args(&parts)
        .arg("--out")
        .arg(&merged)
        .output()
        .expect("harness runs");
    assert!(out.status.success(), "{out:?}");
    let one = std::fs::read_to_string(dir.path("all").join("report.md")).expect("one run");
    let many = std::fs::read_to_string(merged.join("report.md")).expect("merged");
    let matrix = "## Clauses × implementations";
    assert_eq!(section(&one, matrix), section(&many, matrix));
    let (one, many) = (
        load(&dir.path("all").join("report.json")),
        load(&merged.join("report.json")),
    );
    assert_eq!(names(&one), names(&many));
    for name in names(&one) {
        assert_eq!(verdicts(&one, name), verdicts(&many, name), "{name}");
    }

    // Another suite version in one of them.
    let mut other: Value = load(&parts[1]);
    other["suites"][0]["version"] = Value::from(99);
    for r in other["implementations"]
        .as_array_mut()
        .expect("implementations")
    {
        r["suites"][0]["version"] = Value::from(99);
    }
    let changed = dir.path("other-version.json");
    std::fs::write(&changed, other.to_string()).expect("write");
    let merge = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["report", "merge"])
            .arg(&parts[0])
            .arg(&changed)
            .arg("--out")
            .arg(dir.path("mismatch"))
            .args(extra)
            .output()
            .expect("harness runs")
    };
    let refused = merge(&[]);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("collection v99"), "{stderr}");
    assert!(stderr.contains("--allow-suite-mismatch"), "{stderr}");
    assert!(merge(&["--allow-suite-mismatch"]).status.success());
}

/// Every `cargo` command that README.md, docs/ and adapters/python/README.md
/// quote uses `--release` (the build of the README's first command), and
/// every `harness` command line among them, through `cargo run` or the
/// installed binary in a shell block, is one the harness accepts (run with
/// `--help` appended: an unknown option or subcommand fails).
#[test]
fn documented_commands_use_release_and_parse() {
    let mut checked = 0;
    for doc in &crate::common::user_docs() {
        let text = std::fs::read_to_string(doc)
            .expect("doc")
            .replace("\\\n", " ");
        let mut in_shell = false;
        for line in text.lines() {
            if line.trim_start().starts_with("```") {
                in_shell = line.trim_start() == "```sh";
                continue;
            }
            // `harness …` in a shell block: the installed binary's command line.
            if let Some(args) = line
                .trim_start()
                .strip_prefix("harness ")
                .filter(|_| in_shell)
            {
                let args = args.split('#').next().unwrap_or(args);
                let args = shell_words(&args.replace(['[', ']'], ""));
                assert_harness_accepts(doc, &args);
                checked += 1;
                continue;
            }
            for (at, _) in line
                .match_indices("cargo run")
                .chain(line.match_indices("cargo test"))
            {
                let command = &line[at..];
                // A command with arguments, not the words in prose.
                if !command["cargo run".len()..].starts_with(" -") {
                    continue;
                }
                assert!(
                    command.contains("--release"),
                    "{}: `{}` without --release",
                    doc.display(),
                    command.trim()
                );
                let Some(args) = command
                    .strip_prefix("cargo run --release -p harness -- ")
                    .map(|rest| rest.split(['`', '#']).next().unwrap_or(rest))
                else {
                    continue;
                };
                // `[--option value]`: an optional part, checked as given.
                let args = shell_words(&args.replace(['[', ']'], ""));
                assert_harness_accepts(doc, &args);
                checked += 1;
            }
        }
    }
    assert!(checked >= 5, "only {checked} commands checked");
}

/// Runs `harness ARGS --help`: an unknown option or subcommand in a
/// documented command line fails, naming the document.
fn assert_harness_accepts(doc: &Path, args: &[String]) {
    let out = harness(
        &args
            .iter()
            .map(String::as_str)
            .chain(["--help"])
            .collect::<Vec<_>>(),
    );
    assert!(
        out.status.success(),
        "{}: `harness {}` is refused: {}",
        doc.display(),
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Splits a command line as `sh` would for plain words and single quotes.
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    words.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        words.push(word);
    }
    words
}
