use super::*;
use crate::adapter::Capabilities;
use crate::suite::{Basis, Direction, Kind};
use serde_json::{json, Value};

fn trial(
    case: &str,
    direction: Direction,
    kind: Kind,
    clauses: &[&str],
    verdict: Verdict,
    detail: &str,
) -> TrialResult {
    TrialResult {
        trial: crate::runner::trial_name("collection", case, direction),
        module: "collection".into(),
        case: case.into(),
        title: format!("Title of {case}"),
        direction,
        kind,
        clauses: clauses.iter().map(|c| c.to_string()).collect(),
        expected_clause: None,
        also_accepted: Vec::new(),
        named_clause: None,
        verdict,
        detail: detail.into(),
    }
}

const FAIL_DETAIL: &str = "read back differs from the fixture in 1 place(s):\n  /records/0/meta/x: expected <&>, got \"y\"\n```\nnot a fence end\n";

fn results() -> Vec<TrialResult> {
    let mut unnamed = trial(
        "refusal-unnamed",
        Direction::Write,
        Kind::WriteRefusal,
        &["b.unnamed"],
        Verdict::PassUnnamed,
        "refused without naming a clause: units missing",
    );
    unnamed.expected_clause = Some("b.unnamed".into());
    vec![
        // Deliberately out of order: the report sorts.
        trial(
            "values-differ",
            Direction::Read,
            Kind::RoundTrip,
            &["a.pass", "c.fail"],
            Verdict::Fail,
            FAIL_DETAIL,
        ),
        trial(
            "basic",
            Direction::Write,
            Kind::RoundTrip,
            &["a.pass"],
            Verdict::Pass,
            "",
        ),
        unnamed,
        trial(
            "crashes",
            Direction::Read,
            Kind::ReadRefusal,
            &["c.fail"],
            Verdict::Error,
            "process exited: signal 11",
        ),
        trial(
            "basic",
            Direction::Golden,
            Kind::RoundTrip,
            &["a.pass"],
            Verdict::Unsupported,
            "does not read",
        ),
        trial(
            "known-bad",
            Direction::Write,
            Kind::RoundTrip,
            &["g.known", "z.unmapped"],
            Verdict::Fail,
            "wrote garbage",
        ),
        trial(
            "fixed-now",
            Direction::Read,
            Kind::RoundTrip,
            &["g.known"],
            Verdict::Pass,
            "",
        ),
    ]
}

const EXPECTATIONS: &str = r#"
# Known failures of the test implementation.
[[expected-failure]]
case = "collection::known-bad"
reason = "does not write <blocks> & such yet"

[[expected-failure]]
case = "collection::fixed-now::read"
reason = "was broken"
"#;

fn description() -> Description {
    Description {
        name: "test-impl".into(),
        version: "1.2.3".into(),
        capabilities: Capabilities {
            write: true,
            read: true,
        },
    }
}

fn report() -> Report {
    let expectations = Expectations::parse(EXPECTATIONS).unwrap();
    let mut report = Report::new(
        description(),
        vec![SuiteInfo {
            module: "collection".into(),
            version: 1,
        }],
        results(),
        &expectations,
    );
    report.harness_version = "test".into();
    report
}

fn clause(source: &str, level: Level, text: &str, waiver: Option<&str>) -> Clause {
    Clause {
        source: source.into(),
        level,
        text: text.into(),
        waiver: waiver.map(str::to_owned),
        basis: Basis::Spec,
        reason: None,
        quote: None,
        contrary: None,
    }
}

fn spec() -> SpecMap {
    let mut spec = SpecMap::new();
    spec.insert(
        "a.pass".into(),
        clause(
            "001 collection §1",
            Level::Must,
            "Round trips keep values.",
            None,
        ),
    );
    spec.insert(
        "b.unnamed".into(),
        clause(
            "001 collection §1",
            Level::Must,
            "Units are required.",
            None,
        ),
    );
    spec.insert(
        "c.fail".into(),
        clause(
            "000 LMDB binding §2",
            Level::Should,
            "Readers refuse <bad> & broken files.",
            None,
        ),
    );
    spec.insert(
        "d.waived".into(),
        clause(
            "000 LMDB binding §2",
            Level::Must,
            "Map size is large.",
            Some("not observable"),
        ),
    );
    spec.insert(
        "e.uncovered".into(),
        clause(
            "000 LMDB binding §3",
            Level::Must,
            "Keys are big-endian.",
            None,
        ),
    );
    spec.insert(
        "f.optional".into(),
        clause(
            "000 LMDB binding §3",
            Level::May,
            "A reader may cache.",
            None,
        ),
    );
    spec.insert(
        "g.known".into(),
        clause(
            "001 collection §2",
            Level::Must,
            "Blocks are written.",
            None,
        ),
    );
    spec
}

fn outcome_of(report: &Report, trial: &str) -> Outcome {
    report
        .results
        .iter()
        .find(|e| e.result.trial == trial)
        .unwrap()
        .outcome
}

#[test]
fn outcomes_and_counts() {
    let r = report();
    assert_eq!(outcome_of(&r, "collection::basic::write"), Outcome::Pass);
    assert_eq!(
        outcome_of(&r, "collection::refusal-unnamed::write"),
        Outcome::Pass
    );
    assert_eq!(
        outcome_of(&r, "collection::values-differ::read"),
        Outcome::Fail
    );
    assert_eq!(outcome_of(&r, "collection::crashes::read"), Outcome::Error);
    assert_eq!(
        outcome_of(&r, "collection::basic::golden"),
        Outcome::Unsupported
    );
    assert_eq!(
        outcome_of(&r, "collection::known-bad::write"),
        Outcome::ExpectedFailure
    );
    assert_eq!(
        outcome_of(&r, "collection::fixed-now::read"),
        Outcome::UnexpectedPass
    );
    let known = r
        .results
        .iter()
        .find(|e| e.result.case == "known-bad")
        .unwrap();
    assert_eq!(
        known.expected_failure.as_deref(),
        Some("does not write <blocks> & such yet")
    );
    assert_eq!(
        r.summary,
        Summary {
            total: 7,
            pass: 2,
            pass_unnamed: 1,
            expected_failure: 1,
            unexpected_pass: 1,
            fail: 1,
            error: 1,
            unsupported: 1
        }
    );
    assert_eq!(r.summary.unexpected(), 3);
    let order: Vec<&str> = r.results.iter().map(|e| e.result.trial.as_str()).collect();
    assert_eq!(
        order,
        [
            "collection::basic::write",
            "collection::basic::golden",
            "collection::crashes::read",
            "collection::fixed-now::read",
            "collection::known-bad::write",
            "collection::refusal-unnamed::write",
            "collection::values-differ::read",
        ]
    );
}

#[test]
fn unexpected_only_for_fail_error_and_unexpected_pass() {
    assert!(report().has_unexpected());
    let quiet: Vec<TrialResult> = results()
        .into_iter()
        .filter(|t| !matches!(t.case.as_str(), "values-differ" | "crashes" | "fixed-now"))
        .collect();
    let expectations = Expectations::parse(EXPECTATIONS).unwrap();
    let r = Report::new(description(), vec![], quiet, &expectations);
    assert!(!r.has_unexpected(), "{:?}", r.summary);
    // An expected error is an expected failure; an expected unsupported stays unsupported.
    assert_eq!(Outcome::of(Verdict::Error, true), Outcome::ExpectedFailure);
    assert_eq!(
        Outcome::of(Verdict::Unsupported, true),
        Outcome::Unsupported
    );
    assert_eq!(
        Outcome::of(Verdict::PassUnnamed, true),
        Outcome::UnexpectedPass
    );
}

#[test]
fn json_round_trips_and_is_flat() {
    let r = report();
    let json = r.to_json();
    assert_eq!(Report::from_json(&json).unwrap(), r);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let first = &v["results"][0];
    assert_eq!(first["trial"], "collection::basic::write");
    assert_eq!(first["outcome"], "pass");
    assert_eq!(first["verdict"], "pass");
    assert_eq!(first["expected_failure"], serde_json::Value::Null);
    assert_eq!(v["results"][3]["outcome"], "unexpected-pass");
    assert_eq!(v["summary"]["pass_unnamed"], 1);
    assert_eq!(v["implementation"]["name"], "test-impl");
}

#[test]
fn expectations_parse() {
    let e = Expectations::parse(EXPECTATIONS).unwrap();
    assert_eq!(e.len(), 2);
    assert_eq!(
        e.reason("collection::known-bad::write"),
        Some("does not write <blocks> & such yet")
    );
    assert_eq!(
        e.reason("collection::known-bad::read"),
        Some("does not write <blocks> & such yet")
    );
    assert_eq!(e.reason("collection::fixed-now::read"), Some("was broken"));
    assert_eq!(e.reason("collection::fixed-now::write"), None);
    assert_eq!(e.reason("collection::known-bad-2::write"), None);
    assert!(Expectations::parse("").unwrap().is_empty());

    // A trial entry wins over its case's entry.
    let both = Expectations::parse(
        "[[expected-failure]]\ncase = \"m::c\"\nreason = \"case\"\n[[expected-failure]]\ncase = \"m::c::read\"\nreason = \"trial\"\n",
    )
    .unwrap();
    assert_eq!(both.reason("m::c::read"), Some("trial"));
    assert_eq!(both.reason("m::c::write"), Some("case"));

    let refused = |text: &str, needle: &str| {
        let err = Expectations::parse(text).unwrap_err();
        assert!(err.contains(needle), "{err}");
    };
    refused("[[expected-failure]]\ncase = \"m::c\"\n", "reason");
    refused(
        "[[expected-failure]]\ncase = \"m::c\"\nreason = \"  \"\n",
        "no reason",
    );
    refused("[[expected-failure]]\ncase = \"m::c\"\nreason = \"a\"\n[[expected-failure]]\ncase = \"m::c\"\nreason = \"b\"\n", "twice");
    refused(
        "[[expected-failure]]\ncase = \"m::c\"\nreason = \"a\"\nwhy = \"b\"\n",
        "why",
    );
    refused(
        "[[expected_failure]]\ncase = \"m::c\"\nreason = \"a\"\n",
        "expected_failure",
    );
    refused(
        "[[expected-failure]]\ncase = \"just-a-case\"\nreason = \"a\"\n",
        "neither",
    );
    refused(
        "[[expected-failure]]\ncase = \"m::::read\"\nreason = \"a\"\n",
        "neither",
    );
    refused("not toml at all", "expectations");
}

#[test]
fn expectations_unknown() {
    let e = Expectations::parse(
        "[[expected-failure]]\ncase = \"collection::basic\"\nreason = \"r\"\n\
         [[expected-failure]]\ncase = \"collection::basic::golden\"\nreason = \"r\"\n\
         [[expected-failure]]\ncase = \"collection::basic::read\"\nreason = \"no such direction\"\n\
         [[expected-failure]]\ncase = \"collection::gone\"\nreason = \"no such case\"\n\
         [[expected-failure]]\ncase = \"other::basic\"\nreason = \"no such module\"\n",
    )
    .unwrap();
    let trials = report().trials();
    assert_eq!(
        e.unknown(&trials),
        [
            "collection::basic::read",
            "collection::gone",
            "other::basic"
        ]
    );
    assert!(Expectations::parse(EXPECTATIONS)
        .unwrap()
        .unknown(&trials)
        .is_empty());
}

/// Checks that `xml` is well-formed XML, with a strict parser.
fn check_xml(xml: &str) {
    if let Err(e) = roxmltree::Document::parse(xml) {
        panic!("not well-formed XML ({e}):\n{xml}");
    }
}

#[test]
fn junit_is_well_formed_and_escaped() {
    let xml = report().to_junit();
    check_xml(&xml);
    assert!(xml.contains(
        "<testsuites name=\"molrec conformance: test-impl 1.2.3\" tests=\"7\" failures=\"2\" errors=\"1\" skipped=\"2\">"
    ));
    assert!(xml.contains(
        "<testsuite name=\"collection\" tests=\"7\" failures=\"2\" errors=\"1\" skipped=\"2\">"
    ));
    assert!(xml.contains("<testcase name=\"basic::write\" classname=\"collection\"/>"));
    assert!(xml.contains(
        "<failure type=\"fail\" message=\"read back differs from the fixture in 1 place(s):\">"
    ));
    assert!(xml.contains("expected &lt;&amp;&gt;, got &quot;y&quot;"));
    assert!(xml.contains("<error type=\"error\" message=\"process exited: signal 11\">"));
    assert!(xml.contains("<skipped message=\"unsupported: does not read\"/>"));
    assert!(xml.contains("<skipped message=\"expected failure (fail): does not write &lt;blocks&gt; &amp; such yet\">"));
    assert!(xml.contains(
        "<failure type=\"unexpected-pass\" message=\"passed, but expected to fail: was broken\">"
    ));
    assert!(xml.contains("<system-out>refused without naming a clause: units missing</system-out>"));
    assert!(xml.contains("<property name=\"suite.version\" value=\"1\"/>"));
    assert_eq!(xml.matches("<testcase ").count(), 7);
}

#[test]
fn junit_spells_out_control_characters() {
    let mut results = results();
    results[0].detail = "bad\u{1}byte \"q\" 'a' \u{1b}[0m\u{ffff}\r\nsecond line".into();
    let r = Report::new(description(), vec![], results, &Expectations::default());
    let xml = r.to_junit();
    check_xml(&xml);
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let messages: Vec<&str> = doc
        .descendants()
        .filter_map(|n| n.attribute("message"))
        .collect();
    assert!(
        messages.contains(&"bad\\u{1}byte \"q\" 'a' \\u{1b}[0m\\u{ffff}"),
        "{messages:?}"
    );
    assert!(!xml.contains('\u{1}') && !xml.contains('\u{1b}'), "{xml}");
}

#[test]
fn visible_spells_out_what_xml_cannot_carry() {
    assert_eq!(visible("a\tb\nc\r".into()), "a\tb\nc\r");
    assert_eq!(
        visible("\u{0}\u{1b}[1m\u{7f}\u{85}\u{fdd0}\u{fffe}\u{ffff}\u{1fffe}é€".into()),
        "\\u{0}\\u{1b}[1m\\u{7f}\\u{85}\\u{fdd0}\\u{fffe}\\u{ffff}\\u{1fffe}é€"
    );
}

#[test]
fn a_long_detail_is_cut_visibly_on_a_character_boundary() {
    let short = "é".repeat(100);
    assert_eq!(shown_detail(&short), short.as_str());
    let long = format!("x{}", "é".repeat(20_000));
    let shown = shown_detail(&long);
    assert!(shown.len() < 16 * 1024 + 100, "{}", shown.len());
    assert!(
        shown.ends_with(&format!(
            "é\n[… {} more bytes cut; report.json has the whole detail]",
            long.len() - 16 * 1024 + 1
        )),
        "{}",
        &shown[shown.len() - 80..]
    );
}

#[test]
fn markdown_has_summary_failures_and_coverage() {
    let md = report().to_markdown(&spec());
    assert!(md.starts_with("# Conformance report: test-impl 1.2.3\n"));
    assert!(
        md.contains("**Not conforming: 3 of 6 trials that rest on the spec's text fail.**"),
        "{md}"
    );
    assert!(md.contains(
        "Result: 3 unexpected on trials that rest on the spec's text (1 fail, 1 error, 1 unexpected pass)."
    ));
    assert!(
        md.contains(
            "| pass | 2 | 0 | 2 |\n| … of which refused without naming a clause | 1 | 0 | 1 |\n"
        ),
        "{md}"
    );
    assert!(md.contains("| **total** | **7** | **0** | **7** |"));
    // Details are fenced with a fence longer than any run of backticks inside.
    assert!(md.contains(&format!("````text\n{}\n````\n", FAIL_DETAIL.trim_end())));
    assert!(md.contains("### `collection::fixed-now::read` — unexpected pass"));
    assert!(md.contains("- expected to fail: was broken"));
    // Coverage: every clause, sorted, with its level and outcome.
    let coverage = md.split("## Coverage").nth(1).unwrap();
    let row = |id: &str| {
        coverage
            .lines()
            .find(|l| l.starts_with(&format!("| `{id}` |")))
            .unwrap_or_else(|| panic!("no row {id}"))
    };
    assert_eq!(
        row("a.pass"),
        "| `a.pass` | must | **partial 1/2** | `collection::basic` (write: pass, golden: unsupported); `collection::values-differ` (read: fail) |"
    );
    assert_eq!(row("b.unnamed"), "| `b.unnamed` | must | pass 1/1 | `collection::refusal-unnamed` (write: pass (no clause named)) |");
    assert_eq!(
        row("c.fail"),
        "| `c.fail` | should | **fail 0/2** | `collection::crashes` (read: error); `collection::values-differ` (read: fail) |"
    );
    assert_eq!(
        row("d.waived"),
        "| `d.waived` | must | waived | waived: not observable |"
    );
    assert_eq!(
        row("e.uncovered"),
        "| `e.uncovered` | must | **NOT COVERED** | — |"
    );
    assert_eq!(
        row("f.optional"),
        "| `f.optional` | may | not covered | — |"
    );
    assert_eq!(
        row("g.known"),
        "| `g.known` | must | **partial 1/2 (1 expected)** | `collection::fixed-now` (read: unexpected pass); `collection::known-bad` (write: expected failure) |"
    );
    let ids: Vec<&str> = coverage
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .map(|l| &l[..l.find('`').unwrap()])
        .collect();
    assert_eq!(
        ids,
        [
            "a.pass",
            "b.unnamed",
            "c.fail",
            "d.waived",
            "e.uncovered",
            "f.optional",
            "g.known"
        ]
    );
    assert!(md.contains("## Clauses not in the spec map\n\n- `z.unmapped`: `collection::known-bad` (write: expected failure)\n"));
    assert!(md.contains("7 clauses: 1 pass, 2 partial, 1 fail, 0 unsupported, 1 waived, 2 not covered (1 of them *must*)."));
    // Deterministic: the same results in another order give the same text.
    let mut shuffled = results();
    shuffled.reverse();
    let mut again = Report::new(
        description(),
        vec![SuiteInfo {
            module: "collection".into(),
            version: 1,
        }],
        shuffled,
        &Expectations::parse(EXPECTATIONS).unwrap(),
    );
    again.harness_version = "test".into();
    assert_eq!(again.to_markdown(&spec()), md);
}

#[test]
fn markdown_snapshot() {
    insta::assert_snapshot!(report().to_markdown(&spec()));
}

#[test]
fn markdown_when_all_is_well() {
    let r = Report::new(
        description(),
        vec![],
        results()
            .into_iter()
            .filter(|t| t.verdict.passed() && t.case != "fixed-now")
            .collect(),
        &Expectations::default(),
    );
    let md = r.to_markdown(&spec());
    assert!(
        md.contains("**Conforming: passes all 2 trials that rest on the spec's text.**"),
        "{md}"
    );
    assert!(md.contains("Result: nothing unexpected on trials that rest on the spec's text."));
    assert!(!md.contains("## Unexpected results"));
    assert!(!md.contains("## Expected failures"));
}

#[test]
fn html_is_self_contained_and_escaped() {
    let other = {
        let mut results = results();
        for t in &mut results {
            t.verdict = Verdict::Pass;
            t.detail.clear();
        }
        let mut imp = description();
        imp.name = "other <impl>".into();
        Report::new(
            imp,
            vec![SuiteInfo {
                module: "collection".into(),
                version: 1,
            }],
            results,
            &Expectations::default(),
        )
    };
    let page = Report::to_html(&[report(), other], &spec());
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.ends_with("</html>\n"));
    for external in ["src=", "href=\"http", "@import", "url("] {
        assert!(!page.contains(external), "external resource: {external}");
    }
    assert!(page.contains("other &lt;impl&gt;"));
    assert!(!page.contains("other <impl>"));
    assert!(page.contains("expected &lt;&amp;&gt;, got &quot;y&quot;"));
    // Every clause has a row, inside a group per source section.
    for id in spec().keys() {
        assert!(
            page.contains(&format!("<details class=\"clause\" id=\"clause-{id}\"")),
            "{id}"
        );
    }
    assert!(page.contains("<details class=\"clause\" id=\"clause-z.unmapped\""));
    for source in [
        "000 LMDB binding §2",
        "000 LMDB binding §3",
        "001 collection §1",
        "001 collection §2",
        "Not in the spec map",
    ] {
        assert!(
            page.contains(&format!("<span class=\"src\">{source}</span>")),
            "{source}"
        );
    }
    assert!(page.contains("NOT COVERED"));
    assert!(page.contains("class=\"cell s-partial\""));
    assert!(page.contains("class=\"cell s-waived\""));
    for tag in [
        "details", "summary", "section", "table", "div", "pre", "tr", "td",
    ] {
        let opened =
            page.matches(&format!("<{tag}>")).count() + page.matches(&format!("<{tag} ")).count();
        assert_eq!(
            opened,
            page.matches(&format!("</{tag}>")).count(),
            "<{tag}> unbalanced"
        );
    }
}

#[test]
fn write_all_writes_four_files() {
    let dir = std::env::temp_dir().join(format!("harness-report-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    report().write_all(&dir, &spec()).unwrap();
    for name in ["report.json", "junit.xml", "report.md", "report.html"] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(!text.is_empty(), "{name}");
    }
    let back =
        Report::from_json(&std::fs::read_to_string(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(back, report());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Writes a sample page to `/tmp/report-sample.html` for a look in a
/// browser: the repository's spec map and suites, with made-up results for
/// three implementations.
/// `cargo test -p harness --lib report::tests::sample_page -- --ignored`.
#[test]
#[ignore]
fn sample_page() {
    let layout = crate::suite::Layout::repository();
    let (spec, suites) = match (layout.spec_map(), layout.suites()) {
        (Ok(spec), Ok(suites)) => (spec, suites),
        _ => (spec(), Vec::new()),
    };
    let reports = if suites.is_empty() {
        vec![report()]
    } else {
        sample_reports(&layout, &suites)
    };
    std::fs::write("/tmp/report-sample.html", Report::to_html(&reports, &spec)).unwrap();
}

fn sample_reports(layout: &crate::suite::Layout, suites: &[crate::suite::Suite]) -> Vec<Report> {
    let infos: Vec<SuiteInfo> = suites.iter().map(SuiteInfo::of).collect();
    let imp = |name: &str, version: &str, write: bool, read: bool| Description {
        name: name.into(),
        version: version.into(),
        capabilities: Capabilities { write, read },
    };
    let mut reports = Vec::new();
    for (n, description) in [
        imp("molrec-reference", "0.1.0", true, true),
        imp("molrec-py", "0.4.0-dev", true, true),
        imp("mrec.js", "0.0.3", false, true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut results = Vec::new();
        let mut expected = String::new();
        for suite in suites {
            for (k, case) in suite.cases.iter().enumerate() {
                for direction in case.directions(layout) {
                    let mut t = trial(&case.id, direction, case.kind, &[], Verdict::Pass, "");
                    t.module = suite.module.clone();
                    t.trial = crate::runner::trial_name(&suite.module, &case.id, direction);
                    t.title = case.title.clone();
                    t.clauses = case.clauses.clone();
                    t.expected_clause = case.expect.clone();
                    t.named_clause = case.expect.clone();
                    let refusal = case.kind != Kind::RoundTrip;
                    if refusal {
                        t.detail = format!("refused: {}", case.title);
                    }
                    match (n, direction, k % 17) {
                        (0, _, _) => {}
                        (2, Direction::Write, _) => {
                            (t.verdict, t.detail) = (Verdict::Unsupported, "does not write".into())
                        }
                        (_, _, 3) if refusal => {
                            t.verdict = Verdict::PassUnnamed;
                            t.named_clause = None;
                            t.detail = "refused without naming a clause: invalid collection".into();
                        }
                        (1, _, 5) | (2, _, 7) => {
                            t.verdict = Verdict::Fail;
                            t.detail = if refusal {
                                "read a malformed file without refusing it".into()
                            } else {
                                "read back differs from the fixture in 2 place(s):\n  /records/0/trajectory/frames/1/blocks/atoms/columns/x/values/4: expected 0.125, got 0.12499999\n  /records/0/meta/name: expected \"w<1>\", got null\n--- expected\n+++ actual\n@@ -12,3 +12,3 @@\n-  \"name\": \"w<1>\"\n+  \"name\": null".into()
                            };
                        }
                        (1, _, 9) => {
                            t.verdict = Verdict::Fail;
                            t.detail = format!(
                                "refused naming `column.values`, expected `{}`: bad column",
                                case.expect.clone().unwrap_or_default()
                            );
                            t.named_clause = Some("column.values".into());
                        }
                        (2, _, 11) => {
                            (t.verdict, t.detail) = (Verdict::Error, "timed out after 10 s".into())
                        }
                        (1, _, 13) => {
                            t.verdict = Verdict::Fail;
                            t.detail = "file inspection:\n[lmdb.frame-bytes.alignment] frame 3: buffer at offset 13 is not 8-aligned".into();
                            expected.push_str(&format!("[[expected-failure]]\ncase = \"{}\"\nreason = \"alignment of ragged buffers not done yet\"\n", t.trial));
                        }
                        _ => {}
                    }
                    results.push(t);
                }
            }
        }
        let expectations = Expectations::parse(&expected).unwrap();
        reports.push(Report::new(
            description,
            infos.clone(),
            results,
            &expectations,
        ));
    }
    reports
}

/// `c.fail` made a decision: every form of the report says so.
fn spec_with_decision() -> SpecMap {
    let mut spec = spec();
    let c = spec.get_mut("c.fail").unwrap();
    c.basis = Basis::Decision;
    c.reason = Some("the text is silent on broken files".into());
    c.contrary = Some(crate::suite::Quoted {
        source: "frame.md @ 2a5cc2d7 > Nullable columns".into(),
        quote: "a reader hands it back".into(),
    });
    spec
}

#[test]
fn a_clause_resting_on_a_decision_is_marked_in_every_form() {
    let spec = spec_with_decision();
    let report = report().with_spec(&spec);
    assert_eq!(
        report.decisions.get("c.fail").map(|d| d.reason.as_str()),
        Some("the text is silent on broken files")
    );
    let crashes = report
        .results
        .iter()
        .find(|e| e.result.case == "crashes")
        .unwrap();
    assert_eq!(crashes.decisions, vec!["c.fail".to_string()]);
    let basic = report
        .results
        .iter()
        .find(|e| e.result.case == "basic")
        .unwrap();
    assert!(basic.decisions.is_empty());

    let json = report.to_json();
    assert!(
        json.contains("\"decisions\": [\n        \"c.fail\""),
        "{json}"
    );
    assert_eq!(Report::from_json(&json).unwrap(), report);

    let junit = report.to_junit();
    assert!(junit.contains("<property name=\"basis\" value=\"decision\"/>"));
    assert!(junit.contains("c.fail: the text is silent on broken files"));

    let md = report.to_markdown(&spec);
    assert!(md.contains("## Decision trials read otherwise"), "{md}");
    assert!(
        md.contains("| `collection::crashes::read` | `c.fail` | error |"),
        "{md}"
    );
    assert!(
        md.contains("(frame.md @ 2a5cc2d7 &gt; Nullable columns): \"a reader hands it back\""),
        "{md}"
    );
    assert!(md.contains("| `c.fail` | should · decision |"), "{md}");
    assert!(md.contains("## Decisions"), "{md}");

    let html = Report::to_html(std::slice::from_ref(&report), &spec);
    assert!(html.contains("<span class=\"lvl decision\""));
    assert!(
        html.contains("Decision trials read otherwise (2)"),
        "{html}"
    );
}

/// A trial rests on the text or on a decision: an implementation whose
/// only failures are decision trials conforms, and every form says so
/// first; the run fails on them only when strict.
#[test]
fn failures_of_decision_trials_leave_an_implementation_conforming() {
    // Only the decision trial fails: drop the spec-tier failures.
    let mut report = report();
    report
        .results
        .retain(|e| !matches!(e.result.case.as_str(), "values-differ" | "known-bad"));
    let report = Report::new(
        report.implementation.clone(),
        report.suites.clone(),
        report.results.into_iter().map(|e| e.result).collect(),
        &Expectations::default(),
    );
    let plain = report.clone().with_spec(&spec());
    assert!(!plain.conforming, "c.fail is on the text in spec()");
    assert!(plain.fails_run(false));
    let report = report.with_spec(&spec_with_decision());
    assert!(report.conforming);
    assert_eq!(report.tiers.decision.error, 1);
    assert_eq!(report.tiers.spec.unexpected(), 0);
    assert!(!report.fails_run(false));
    assert!(report.fails_run(true));
    let line = report.conformance_line();
    assert!(line.starts_with("Conforming: passes all 3 trials that rest on the spec's text; it reads 1 decision trial otherwise"), "{line}");

    let md = report.to_markdown(&spec_with_decision());
    let second = md.lines().nth(2).unwrap_or_default();
    assert_eq!(second, format!("**{line}**"), "{md}");
    let junit = report.to_junit();
    assert!(
        junit.lines().nth(1).unwrap().contains("Conforming"),
        "{junit}"
    );
    assert!(junit.contains("failures=\"0\" errors=\"0\""), "{junit}");
    assert!(
        junit.contains("<skipped message=\"decision trial read otherwise (error; c.fail)"),
        "{junit}"
    );
    let html = Report::to_html(std::slice::from_ref(&report), &spec_with_decision());
    let main = &html[html.find("<main>").unwrap()..];
    assert!(
        main.starts_with("<main><section class=\"conformance\"><p class=\"verdict-line\"><span class=\"verdict ok\">conforming</span>"),
        "{main}"
    );
    let json = report.to_json();
    assert!(json.contains("\"conforming\": true"), "{json}");
    assert_eq!(Report::from_json(&json).unwrap(), report);
}

#[test]
fn without_decisions_no_form_mentions_them() {
    let spec = spec();
    let report = report().with_spec(&spec);
    assert!(report.decisions.is_empty());
    assert!(!report.to_junit().contains("decision"));
    assert!(!report.to_markdown(&spec).contains("## Decisions"));
}

/// The diff's ranks: pass > pass without a clause > expected failure and
/// unsupported > unexpected; a new failing trial is worse; a refusal's
/// reworded message is listed; a clause that loses its passing trial is worse.
#[test]
fn diff_ranks_changes_and_lists_added_trials_and_messages() {
    let refusal = |verdict, detail: &str| {
        let mut t = trial(
            "refuse",
            Direction::Write,
            Kind::WriteRefusal,
            &["r.refuse"],
            verdict,
            detail,
        );
        t.expected_clause = Some("r.refuse".into());
        t
    };
    let basic = |verdict| {
        trial(
            "basic",
            Direction::Read,
            Kind::RoundTrip,
            &["a.pass"],
            verdict,
            "",
        )
    };
    let report = |results, expectations: &Expectations| {
        Report::new(description(), Vec::new(), results, expectations)
    };
    let old = report(
        vec![
            refusal(Verdict::Pass, "[r.refuse] units missing"),
            basic(Verdict::Fail),
        ],
        &Expectations::default(),
    );
    let new = report(
        vec![
            refusal(Verdict::PassUnnamed, "units are missing"),
            basic(Verdict::Pass),
            trial(
                "fresh",
                Direction::Write,
                Kind::RoundTrip,
                &["a.pass"],
                Verdict::Error,
                "crashed",
            ),
        ],
        &Expectations::default(),
    );
    let d = diff::ReportDiff::between(&old, &new);
    let directions: Vec<(&str, diff::Direction)> = d
        .changed
        .iter()
        .map(|c| (c.trial.as_str(), c.direction))
        .collect();
    assert_eq!(
        directions,
        [
            ("collection::basic::read", diff::Direction::Better),
            ("collection::refuse::write", diff::Direction::Worse),
        ]
    );
    assert_eq!(d.added.len(), 1);
    assert_eq!(d.messages.len(), 1);
    assert_eq!(d.messages[0].new, "units are missing");
    // a.pass: 0/1 -> 1/2 (better rank 1 -> 2); r.refuse: pass both times.
    assert_eq!(d.clauses.len(), 1, "{:?}", d.clauses);
    assert_eq!(d.clauses[0].direction, diff::Direction::Better);
    // Worse: the unnamed refusal and the added error.
    assert_eq!((d.worse, d.better), (2, 2));
    assert!(d.fails(diff::FailOn::Worse));
    assert!(!d.fails(diff::FailOn::Never));
    let md = d.to_markdown();
    assert!(
        md.contains("-    [r.refuse] units missing\n+    units are missing\n"),
        "{md}"
    );

    // An expected failure that becomes unsupported is neither.
    let known = Expectations::parse(
        "[[expected-failure]]\ncase = \"collection::basic::read\"\nreason = \"known\"\n",
    )
    .expect("expectations");
    let old = report(vec![basic(Verdict::Fail)], &known);
    let new = report(vec![basic(Verdict::Unsupported)], &known);
    let d = diff::ReportDiff::between(&old, &new);
    assert_eq!(d.changed[0].direction, diff::Direction::Other);
    assert!(!d.fails(diff::FailOn::Worse));
    assert!(d.fails(diff::FailOn::Any));
}

/// A report.json of format 2 (no tiers, decisions as bare reasons) reads
/// as a run whose trials all rest on the text until it is upgraded with a
/// spec map; upgraded, its tiers and conformance are today's.
#[test]
fn a_format_2_report_reads_and_takes_the_tiers_of_the_spec_map() {
    use super::run::{RunReport, RUN_FORMAT_VERSION};
    let spec = spec_with_decision();
    let run = RunReport::single(report().with_spec(&spec));
    let mut old: Value = serde_json::from_str(&run.to_json()).unwrap();
    old["format_version"] = json!(2);
    let imp = &mut old["implementations"][0];
    let object = imp.as_object_mut().unwrap();
    object.remove("tiers");
    object.remove("conforming");
    object.insert(
        "decisions".into(),
        json!({"c.fail": "the text is silent on broken files"}),
    );
    for e in imp["results"].as_array_mut().unwrap() {
        e.as_object_mut().unwrap().remove("tier");
    }
    let read = RunReport::from_json(&old.to_string()).unwrap();
    assert_eq!(read.format_version, 2);
    assert!(read.implementations[0]
        .results
        .iter()
        .all(|e| e.tier == Basis::Spec));
    let upgraded = read.upgraded(&spec);
    assert_eq!(upgraded.format_version, RUN_FORMAT_VERSION);
    let (a, b) = (&upgraded.implementations[0], &run.implementations[0]);
    assert_eq!(a.tiers, b.tiers);
    assert_eq!(a.conforming, b.conforming);
    assert_eq!(a.decisions, b.decisions);
    let tiers = |r: &Report| r.results.iter().map(|e| e.tier).collect::<Vec<_>>();
    assert_eq!(tiers(a), tiers(b));
}
