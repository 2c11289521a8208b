//! JUnit XML, the form CI systems read.

use super::{escape_xml, first_line, Outcome, Report, ResultEntry, Summary};
use crate::runner::Verdict;
use std::collections::BTreeMap;
use std::fmt::Write;

pub(super) fn render(report: &Report) -> String {
    let mut modules: BTreeMap<&str, Vec<&ResultEntry>> = BTreeMap::new();
    for info in &report.suites {
        modules.entry(&info.module).or_default();
    }
    for e in &report.results {
        modules.entry(&e.result.module).or_default().push(e);
    }
    let imp = &report.implementation;
    let a = |s: &str| escape_xml(s, true);
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let s = &report.summary;
    let _ = writeln!(
        out,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
        a(&format!("molrec conformance: {} {}", imp.name, imp.version)),
        s.total,
        s.fail + s.unexpected_pass,
        s.error,
        s.expected_failure + s.unsupported,
    );
    for (module, entries) in modules {
        let s = Summary::of(entries.iter().copied());
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\">",
            a(module),
            s.total,
            s.fail + s.unexpected_pass,
            s.error,
            s.expected_failure + s.unsupported,
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
            testcase(&mut out, e, &report.decisions);
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

/// A trial whose case lists a clause resting on a decision carries
/// `basis = decision` and one `decision` property per such clause.
fn testcase(out: &mut String, e: &ResultEntry, reasons: &BTreeMap<String, String>) {
    let a = |s: &str| escape_xml(s, true);
    let t = |s: &str| escape_xml(s, false);
    let r = &e.result;
    let _ = write!(
        out,
        "    <testcase name=\"{}\" classname=\"{}\"",
        a(&e.short_name()),
        a(&r.module)
    );
    let reason = e.expected_failure.as_deref().unwrap_or("");
    let body = match e.outcome {
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
            let reason = reasons.get(id).map(String::as_str).unwrap_or_default();
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
