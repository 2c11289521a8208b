//! JUnit XML, the form CI systems read.
//!
//! A trial that rests on a decision and fails is `<skipped>` with the
//! decision in its message, not a `<failure>`: it is not a defect, and a
//! CI system should show the run as `harness run` (without `--strict`)
//! ends it. Each implementation's conformance line is an XML comment
//! before the suites and the `conformance` property of each of its suites.

use super::run::RunReport;
use super::{escape_xml, first_line, Decision, Outcome, Report, ResultEntry};
use crate::runner::Verdict;
use crate::suite::Basis;
use std::collections::BTreeMap;
use std::fmt::Write;

/// How a trial appears in JUnit.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Junit {
    Passed,
    Failure,
    Error,
    Skipped,
}

fn junit_kind(outcome: Outcome, tier: Basis) -> Junit {
    match outcome {
        Outcome::Pass => Junit::Passed,
        Outcome::ExpectedFailure | Outcome::Unsupported => Junit::Skipped,
        _ if tier == Basis::Decision => Junit::Skipped,
        Outcome::Fail | Outcome::UnexpectedPass => Junit::Failure,
        Outcome::Error => Junit::Error,
    }
}

/// `tests`, `failures`, `errors` and `skipped` of trials of these outcomes and tiers.
fn counts(trials: impl IntoIterator<Item = (Outcome, Basis)>) -> [usize; 4] {
    let mut c = [0; 4];
    for (outcome, tier) in trials {
        c[0] += 1;
        match junit_kind(outcome, tier) {
            Junit::Passed => {}
            Junit::Failure => c[1] += 1,
            Junit::Error => c[2] += 1,
            Junit::Skipped => c[3] += 1,
        }
    }
    c
}

fn comment(out: &mut String, lines: &[String]) {
    for line in lines {
        // `--` may not appear inside an XML comment.
        let _ = writeln!(out, "<!-- {} -->", line.replace("--", "- -"));
    }
}

impl Report {
    /// JUnit XML: one `<testsuite>` per module, one `<testcase
    /// name="case::direction" classname="module">` per trial; `<failure>`
    /// for fail and unexpected pass, `<error>` for error, `<skipped>` for
    /// unsupported and expected failures.
    pub fn to_junit(&self) -> String {
        render(self)
    }
}

impl RunReport {
    /// JUnit XML: one `<testsuite>` per implementation and module, and one
    /// for the interop trials.
    pub fn to_junit(&self) -> String {
        render_run(self)
    }
}

fn render(report: &Report) -> String {
    let imp = &report.implementation;
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    comment(&mut out, &[report.conformance_line()]);
    open_testsuites(
        &mut out,
        &format!("molrec conformance: {} {}", imp.name, imp.version),
        counts(report.results.iter().map(|e| (e.outcome, e.tier))),
    );
    testsuites(&mut out, report, None);
    out.push_str("</testsuites>\n");
    out
}

/// A run: one implementation without interop as [`render`]; otherwise
/// each implementation's modules as `<testsuite name="implementation:
/// module">` (classname `implementation.module`), then one testsuite of the
/// interop trials (`case::interop::writer->reader`).
fn render_run(run: &RunReport) -> String {
    if let [only] = run.implementations.as_slice() {
        if run.interop.is_empty() {
            return render(only);
        }
    }
    let total = counts(
        run.implementations
            .iter()
            .flat_map(|r| r.results.iter().map(|e| (e.outcome, e.tier)))
            .chain(run.interop.iter().map(|e| (e.outcome, e.tier))),
    );
    let interop = counts(run.interop.iter().map(|e| (e.outcome, e.tier)));
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    comment(&mut out, &run.conformance_lines());
    open_testsuites(
        &mut out,
        &format!("molrec conformance: {}", run.names().join(", ")),
        total,
    );
    for r in &run.implementations {
        testsuites(&mut out, r, Some(&r.implementation.name));
    }
    if !run.interop.is_empty() {
        let a = |s: &str| escape_xml(s, true);
        let t = |s: &str| escape_xml(s, false);
        let _ = writeln!(
            out,
            "  <testsuite name=\"interop\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
            interop[0], interop[1], interop[2], interop[3],
        );
        for e in &run.interop {
            let r = &e.result;
            let _ = write!(
                out,
                "    <testcase name=\"{}\" classname=\"{}\"",
                a(r.trial
                    .split_once("::")
                    .map_or(r.trial.as_str(), |(_, rest)| rest)),
                a(&format!("interop.{}", r.module))
            );
            let context = format!(
                "{}\nclauses: {}\n\n{}",
                r.title,
                r.clauses.join(", "),
                r.detail
            );
            let body = match e.outcome {
                Outcome::Pass => None,
                _ if junit_kind(e.outcome, e.tier) == Junit::Skipped
                    && e.tier == Basis::Decision
                    && e.outcome.is_unexpected() =>
                {
                    Some(format!(
                        "      <skipped message=\"{}\">{}</skipped>\n",
                        a(&format!(
                            "decision trial read otherwise ({}): {}",
                            e.outcome.name(),
                            first_line(&r.detail, 200)
                        )),
                        t(&context)
                    ))
                }
                Outcome::Fail | Outcome::UnexpectedPass => Some(format!(
                    "      <failure type=\"{}\" message=\"{}\">{}</failure>\n",
                    e.outcome.slug(),
                    a(&first_line(&r.detail, 200)),
                    t(&context)
                )),
                Outcome::Error => Some(format!(
                    "      <error type=\"error\" message=\"{}\">{}</error>\n",
                    a(&first_line(&r.detail, 200)),
                    t(&context)
                )),
                Outcome::ExpectedFailure | Outcome::Unsupported => Some(format!(
                    "      <skipped message=\"{}\"/>\n",
                    a(&format!(
                        "{}: {}",
                        e.outcome.name(),
                        first_line(&r.detail, 200)
                    ))
                )),
            };
            match body {
                None => out.push_str("/>\n"),
                Some(body) => {
                    out.push_str(">\n");
                    out.push_str(&body);
                    out.push_str("    </testcase>\n");
                }
            }
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn open_testsuites(out: &mut String, name: &str, c: [usize; 4]) {
    let _ = writeln!(
        out,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
        escape_xml(name, true),
        c[0],
        c[1],
        c[2],
        c[3],
    );
}

/// One `<testsuite>` per module of `report`; with `prefix` (the
/// implementation's name) in the suite's name and the testcases' classname.
fn testsuites(out: &mut String, report: &Report, prefix: Option<&str>) {
    let mut modules: BTreeMap<&str, Vec<&ResultEntry>> = BTreeMap::new();
    for info in &report.suites {
        modules.entry(&info.module).or_default();
    }
    for e in &report.results {
        modules.entry(&e.result.module).or_default().push(e);
    }
    let imp = &report.implementation;
    let a = |s: &str| escape_xml(s, true);
    for (module, entries) in modules {
        let c = counts(entries.iter().map(|e| (e.outcome, e.tier)));
        let (name, classname) = match prefix {
            Some(p) => (format!("{p}: {module}"), format!("{p}.{module}")),
            None => (module.to_owned(), module.to_owned()),
        };
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
            a(&name),
            c[0],
            c[1],
            c[2],
            c[3],
        );
        out.push_str("    <properties>\n");
        let version = report
            .suites
            .iter()
            .find(|i| i.module == module)
            .map(|i| i.version.to_string());
        let props = [
            ("implementation", imp.name.clone()),
            ("implementation.version", imp.version.clone()),
            ("harness.version", report.harness_version.clone()),
            ("suite.version", version.unwrap_or_default()),
            ("conformance", report.conformance_line()),
        ];
        for (name, value) in props {
            let _ = writeln!(
                out,
                "      <property name=\"{}\" value=\"{}\"/>",
                a(name),
                a(&value)
            );
        }
        out.push_str("    </properties>\n");
        for e in entries {
            testcase(out, e, &classname, &report.decisions);
        }
        out.push_str("  </testsuite>\n");
    }
}

/// A trial whose case lists a clause resting on a decision carries
/// `basis = decision` and one `decision` property per such clause; when
/// it fails, it is skipped with the decision in its message.
fn testcase(
    out: &mut String,
    e: &ResultEntry,
    classname: &str,
    decisions: &BTreeMap<String, Decision>,
) {
    let a = |s: &str| escape_xml(s, true);
    let t = |s: &str| escape_xml(s, false);
    let r = &e.result;
    let _ = write!(
        out,
        "    <testcase name=\"{}\" classname=\"{}\"",
        a(&e.short_name()),
        a(classname)
    );
    let reason = e.expected_failure.as_deref().unwrap_or("");
    let body = match e.outcome {
        _ if e.tier == Basis::Decision && e.outcome.is_unexpected() => Some(format!(
            "      <skipped message=\"{}\">{}</skipped>\n",
            a(&format!(
                "decision trial read otherwise ({}; {}): {}",
                e.outcome.name(),
                e.decisions.join(", "),
                first_line(&r.detail, 200)
            )),
            t(&with_context(e))
        )),
        Outcome::Pass if r.detail.is_empty() => None,
        Outcome::Pass => Some(format!("      <system-out>{}</system-out>\n", t(&r.detail))),
        Outcome::Fail => Some(format!(
            "      <failure type=\"fail\" message=\"{}\">{}</failure>\n",
            a(&first_line(&r.detail, 200)),
            t(&with_context(e))
        )),
        Outcome::UnexpectedPass => Some(format!(
            "      <failure type=\"unexpected-pass\" message=\"{}\">{}</failure>\n",
            a(&format!("passed, but expected to fail: {reason}")),
            t(&with_context(e))
        )),
        Outcome::Error => Some(format!(
            "      <error type=\"error\" message=\"{}\">{}</error>\n",
            a(&first_line(&r.detail, 200)),
            t(&with_context(e))
        )),
        Outcome::ExpectedFailure => Some(format!(
            "      <skipped message=\"{}\">{}</skipped>\n",
            a(&format!(
                "expected failure ({}): {reason}",
                verdict_name(r.verdict)
            )),
            t(&with_context(e))
        )),
        Outcome::Unsupported => Some(format!(
            "      <skipped message=\"{}\"/>\n",
            a(&format!("unsupported: {}", r.detail))
        )),
    };
    let mut properties = String::new();
    if !e.decisions.is_empty() {
        properties.push_str(
            "      <properties>\n        <property name=\"basis\" value=\"decision\"/>\n",
        );
        for id in &e.decisions {
            let reason = decisions
                .get(id)
                .map(|d| d.reason.as_str())
                .unwrap_or_default();
            let _ = writeln!(
                properties,
                "        <property name=\"decision\" value=\"{}\"/>",
                a(&format!("{id}: {reason}"))
            );
        }
        properties.push_str("      </properties>\n");
    }
    match body {
        None if properties.is_empty() => out.push_str("/>\n"),
        body => {
            out.push_str(">\n");
            out.push_str(&properties);
            out.push_str(body.as_deref().unwrap_or_default());
            out.push_str("    </testcase>\n");
        }
    }
}

fn verdict_name(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::PassUnnamed => "pass without a clause",
        Verdict::Fail => "fail",
        Verdict::Error => "error",
        Verdict::Unsupported => "unsupported",
    }
}

/// The detail, preceded by the case title and the clauses.
fn with_context(e: &ResultEntry) -> String {
    let r = &e.result;
    let mut text = format!("{}\nclauses: {}\n", r.title, r.clauses.join(", "));
    if let Some(expected) = &r.expected_clause {
        let _ = writeln!(text, "expected clause: {expected}");
    }
    if let Some(named) = &r.named_clause {
        let _ = writeln!(text, "named clause: {named}");
    }
    if !r.detail.is_empty() {
        text.push('\n');
        text.push_str(&r.detail);
    }
    text
}
