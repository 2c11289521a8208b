//! The `harness` command line against a third party: the reference as a
//! subprocess writes all four reports, and expectations are checked.

use crate::subprocess::mrec_binary;
use std::process::Command;

#[test]
fn run_against_the_reference_subprocess_writes_four_reports() {
    let mrec = mrec_binary();
    let dir = std::env::temp_dir().join(format!("molrec-cli-reports-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let output = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "run",
            "--adapter",
            &format!("'{}' adapter", mrec.display()),
            "--report",
        ])
        .arg(&dir)
        .output()
        .expect("harness runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "harness run failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    for name in ["report.json", "junit.xml", "report.md", "report.html"] {
        let path = dir.join(name);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(len > 100, "{} missing or empty", path.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn expectations_naming_no_case_are_an_error() {
    let dir = std::env::temp_dir().join(format!("molrec-cli-expect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("expect.toml");
    std::fs::write(
        &file,
        "[[expected-failure]]\ncase = \"collection::no-such-case::write\"\nreason = \"typo\"\n",
    )
    .expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--filter", "refuse-no-units", "--expectations"])
        .arg(&file)
        .output()
        .expect("harness runs");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("no-such-case"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `harness trace CLAUSE` prints the clause's text, its cases and the
/// reference's verdicts on them; `--uncovered` lists what no case covers;
/// an unknown id is a usage error naming the ids close to it.
#[test]
fn trace_shows_a_clause_its_cases_and_verdicts() {
    let harness = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(args)
            .output()
            .expect("harness runs")
    };
    let out = harness(&["trace", "lmdb.index.prefix-sum"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.starts_with("lmdb.index.prefix-sum: must\n"), "{text}");
    assert!(
        text.contains("  source: 000 LMDB binding > index"),
        "{text}"
    );
    assert!(
        text.contains("exclusive prefix sum of `n_frames`"),
        "{text}"
    );
    assert!(
        text.contains("collection::read-refuse-index-prefix-sum (read-refusal, refusal naming lmdb.index.prefix-sum)"),
        "{text}"
    );
    let (text, simulated) = text
        .split_once("\nsimulated violations (harness power): ")
        .expect("the simulated violations after the verdicts");
    assert!(
        simulated.contains("index/first-frame-inclusive (writes an inclusive prefix sum as `first_frame`): caught by"),
        "{simulated}"
    );
    let verdicts = text
        .split("verdicts of molrec-reference")
        .nth(1)
        .expect("verdicts");
    let trials: Vec<&str> = verdicts.lines().skip(1).filter(|l| !l.is_empty()).collect();
    assert!(!trials.is_empty(), "{text}");
    for line in trials {
        assert!(line.trim_end().ends_with(" pass"), "{line}");
    }

    let out = harness(&["trace", "--uncovered"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains(" 0 neither covered nor waived"), "{text}");
    assert!(
        text.contains("  lmdb.file.suffix (must, 000 LMDB binding > The file): "),
        "{text}"
    );

    let out = harness(&["trace", "prefix-sum"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("no clause `prefix-sum`; close: lmdb.index.prefix-sum"),
        "{out:?}"
    );
}

/// The forge workflow's commands (`.github/workflows/ci.yml`), as it runs
/// them: the suite against the bundled reference with its reports, then
/// the report diffed against a base run (here: itself).
#[test]
fn the_workflow_commands_run_the_suite_and_diff_its_report() {
    let dir = harness::runner::scratch_dir("workflow-commands");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["run", "--strict", "--report"])
        .arg(&dir)
        .output()
        .expect("harness runs");
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("harness: molrec-reference: Conforming: passes all "),
        "{stdout}"
    );
    for name in ["report.json", "junit.xml", "report.md", "report.html"] {
        assert!(dir.join(name).is_file(), "{name}");
    }
    let report = dir.join("report.json");
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["report", "diff"])
        .args([&report, &report])
        .args(["--fail-on", "never"])
        .output()
        .expect("harness runs");
    assert!(out.status.success(), "{out:?}");
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(
        md.starts_with("## Conformance diff: molrec-reference "),
        "{md}"
    );
    assert!(md.contains("\nOld and new: Conforming: "), "{md}");
    // trace of a clause over a whole run's report opens with its verdict.
    let out = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(["trace", "lmdb.index.prefix-sum", "--report"])
        .arg(&report)
        .output()
        .expect("harness runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.starts_with("molrec-reference: Conforming: passes all "),
        "{text}"
    );
    assert!(text.contains("\nlmdb.index.prefix-sum: must\n"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every trial or case name the docs quote (`collection::case` or
/// `collection::case::direction`) exists, and docs/adapters.md's
/// expectations example parses and names only real trials, so copying it
/// works.
#[test]
fn trial_names_in_the_docs_exist() {
    use harness::report::Expectations;
    use harness::runner::{trial_name, trials};
    use harness::suite::Layout;
    let layout = Layout::repository();
    let names: Vec<String> = trials(&layout)
        .expect("suites")
        .iter()
        .map(|(suite, case, direction)| trial_name(&suite.module, &case.id, *direction))
        .collect();
    let known = |quoted: &str| {
        names.iter().any(|n| {
            n == quoted
                || n.strip_prefix(quoted)
                    .is_some_and(|rest| rest.starts_with("::"))
        })
    };
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let docs = crate::common::user_docs();
    let mut checked = 0;
    for doc in &docs {
        let text = std::fs::read_to_string(doc).expect("doc");
        for (at, _) in text.match_indices("collection::") {
            let quoted: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | ':' | '>' | '_'))
                .collect();
            // An interop trial names a case, then its writer and reader.
            let quoted = quoted.split("::interop::").next().unwrap_or_default();
            let quoted = quoted.trim_end_matches(':');
            // `collection::<case>::...` placeholders and libtest filter
            // prefixes (`collection::refuse`) are not names.
            if quoted == "collection" || text[at + quoted.len()..].starts_with('<') {
                continue;
            }
            let is_filter = text[..at].ends_with("-- ");
            if is_filter {
                assert!(
                    names.iter().any(|n| n.starts_with(quoted)),
                    "{}: filter `{quoted}` selects nothing",
                    doc.display()
                );
                continue;
            }
            assert!(
                known(quoted),
                "{}: `{quoted}` is no trial or case",
                doc.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 3, "only {checked} names checked");
    let adapters = std::fs::read_to_string(root.join("docs/adapters.md")).expect("adapters.md");
    let example = adapters
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the expectations example");
    let expectations = Expectations::parse(example).expect("the example parses");
    assert_eq!(expectations.len(), 2);
    assert!(
        expectations.unknown(&names).is_empty(),
        "{:?}",
        expectations.unknown(&names)
    );
}
