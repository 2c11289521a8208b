//! JUnit XML, the form CI systems read, written by quick-xml's writer
//! (which escapes every attribute and text it is handed) and then made
//! [`visible`]: no text of an adapter can leave the file ill-formed.
//!
//! A trial that rests on a decision and fails is `<skipped>` with the
//! decision in its message, not a `<failure>`: it is not a defect, and a
//! CI system should show the run as `harness run` (without `--strict`)
//! ends it. Each implementation's conformance line is an XML comment
//! before the suites and the `conformance` property of each of its suites.

use super::run::RunReport;
use super::{first_line, shown_detail, visible, Decision, Outcome, Report, ResultEntry};
use crate::runner::Verdict;
use crate::suite::Basis;
use quick_xml::events::{BytesDecl, BytesText, Event};
use std::collections::BTreeMap;
use std::fmt::Write as _;
type Written = std::io::Result<()>;

type Xml = quick_xml::Writer<Vec<u8>>;

impl Report {
    /// JUnit XML: one `<testsuite>` per module, one `<testcase
    /// name="case::direction" classname="module">` per trial; `<failure>`
    /// for fail and unexpected pass, `<error>` for error, `<skipped>` for
    /// unsupported and expected failures.
    pub fn to_junit(&self) -> String {
        let imp = &self.implementation;
        document(
            &[self.conformance_line()],
            &format!("molrec conformance: {} {}", imp.name, imp.version),
            &self.results.iter().collect::<Vec<_>>(),
            |w| testsuites(w, self, None),
        )
    }
}

impl RunReport {
    /// JUnit XML: one implementation without interop as
    /// [`Report::to_junit`]; otherwise each implementation's modules as
    /// `<testsuite name="implementation: module">` (classname
    /// `implementation.module`), then one testsuite of the interop trials
    /// (`case::interop::writer->reader`, classname `interop.module`).
    pub fn to_junit(&self) -> String {
        if let ([only], []) = (self.implementations.as_slice(), self.interop.as_slice()) {
            return only.to_junit();
        }
        let interop: Vec<ResultEntry> = self.interop.iter().map(|e| e.as_entry()).collect();
        let all: Vec<&ResultEntry> = self
            .implementations
            .iter()
            .flat_map(|r| &r.results)
            .chain(&interop)
            .collect();
        document(
            &self.conformance_lines(),
            &format!("molrec conformance: {}", self.names().join(", ")),
            &all,
            |w| {
                for r in &self.implementations {
                    testsuites(w, r, Some(&r.implementation.name))?;
                }
                if interop.is_empty() {
                    return Ok(());
                }
                let cases = interop.iter().map(|e| {
                    let trial = &e.result.trial;
                    let name = trial.split_once("::").map_or(trial.as_str(), |(_, n)| n);
                    (name, format!("interop.{}", e.result.module), e)
                });
                testsuite(w, "interop", &[], cases, &BTreeMap::new())
            },
        )
    }
}

/// The XML declaration, `comments`, and `<testsuites>` holding what
/// `suites` writes.
fn document(
    comments: &[String],
    name: &str,
    trials: &[&ResultEntry],
    suites: impl FnOnce(&mut Xml) -> Written,
) -> String {
    let mut w = Xml::new_with_indent(Vec::new(), b' ', 2);
    let written = (|| {
        w.write_event(Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)))?;
        for line in comments {
            // `--` may not appear inside an XML comment.
            let mut line = line.clone();
            while line.contains("--") {
                line = line.replace("--", "- -");
            }
            w.write_event(Event::Comment(BytesText::from_escaped(format!(" {line} "))))?;
        }
        w.create_element("testsuites")
            .with_attributes(
                attributes(name, trials)
                    .iter()
                    .map(|(k, v)| (*k, v.as_str())),
            )
            .write_inner_content(suites)?;
        Ok::<(), std::io::Error>(())
    })();
    written.expect("writing to memory cannot fail");
    let mut text = String::from_utf8(w.into_inner()).expect("written from UTF-8 text");
    text.push('\n');
    visible(text)
}

/// `name`, and the `tests`, `failures`, `errors` and `skipped` of `trials`.
fn attributes(name: &str, trials: &[&ResultEntry]) -> [(&'static str, String); 5] {
    let mut c = [0; 4];
    for e in trials {
        c[0] += 1;
        match junit_kind(e) {
            "failure" => c[1] += 1,
            "error" => c[2] += 1,
            "skipped" => c[3] += 1,
            _ => {}
        }
    }
    [
        ("name", name.to_owned()),
        ("tests", c[0].to_string()),
        ("failures", c[1].to_string()),
        ("errors", c[2].to_string()),
        ("skipped", c[3].to_string()),
    ]
}

/// The element a trial is in JUnit: `failure`, `error`, `skipped`, or
/// `passed` (a testcase with no such child).
fn junit_kind(e: &ResultEntry) -> &'static str {
    match e.outcome {
        Outcome::Pass => "passed",
        Outcome::ExpectedFailure | Outcome::Unsupported => "skipped",
        _ if e.tier == Basis::Decision => "skipped",
        Outcome::Fail | Outcome::UnexpectedPass => "failure",
        Outcome::Error => "error",
    }
}

/// One `<testsuite>` per module of `report`; with `prefix` (the
/// implementation's name) in the suite's name and the testcases' classname.
fn testsuites(w: &mut Xml, report: &Report, prefix: Option<&str>) -> Written {
    let mut modules: BTreeMap<&str, Vec<&ResultEntry>> = BTreeMap::new();
    for info in &report.suites {
        modules.entry(&info.module).or_default();
    }
    for e in &report.results {
        modules.entry(&e.result.module).or_default().push(e);
    }
    let imp = &report.implementation;
    for (module, entries) in modules {
        let (name, classname) = match prefix {
            Some(p) => (format!("{p}: {module}"), format!("{p}.{module}")),
            None => (module.to_owned(), module.to_owned()),
        };
        let version = report.suites.iter().find(|i| i.module == module);
        let properties = [
            ("implementation", imp.name.clone()),
            ("implementation.version", imp.version.clone()),
            ("harness.version", report.harness_version.clone()),
            (
                "suite.version",
                version.map(|i| i.version.to_string()).unwrap_or_default(),
            ),
            ("conformance", report.conformance_line()),
        ];
        let cases = entries
            .into_iter()
            .map(|e| (e.short_name(), classname.clone(), e));
        testsuite(w, &name, &properties, cases, &report.decisions)?;
    }
    Ok(())
}

/// A `<testsuite>` of `cases` (name, classname, trial).
fn testsuite<'a, N: AsRef<str>>(
    w: &mut Xml,
    name: &str,
    properties: &[(&str, String)],
    cases: impl Iterator<Item = (N, String, &'a ResultEntry)>,
    decisions: &BTreeMap<String, Decision>,
) -> Written {
    let cases: Vec<(N, String, &ResultEntry)> = cases.collect();
    let trials: Vec<&ResultEntry> = cases.iter().map(|c| c.2).collect();
    w.create_element("testsuite")
        .with_attributes(
            attributes(name, &trials)
                .iter()
                .map(|(k, v)| (*k, v.as_str())),
        )
        .write_inner_content(|w| {
            property_list(w, properties)?;
            for (name, classname, e) in &cases {
                testcase(w, name.as_ref(), classname, e, decisions)?;
            }
            Ok(())
        })?;
    Ok(())
}

fn property_list(w: &mut Xml, properties: &[(&str, String)]) -> Written {
    if properties.is_empty() {
        return Ok(());
    }
    w.create_element("properties").write_inner_content(|w| {
        for (name, value) in properties {
            w.create_element("property")
                .with_attributes([("name", *name), ("value", value.as_str())])
                .write_empty()?;
        }
        Ok(())
    })?;
    Ok(())
}

/// A trial whose case lists a clause resting on a decision carries
/// `basis = decision` and one `decision` property per such clause; when
/// it fails, it is skipped with the decision in its message.
fn testcase(
    w: &mut Xml,
    name: &str,
    classname: &str,
    e: &ResultEntry,
    decisions: &BTreeMap<String, Decision>,
) -> Written {
    let r = &e.result;
    let reason = e.expected_failure.as_deref().unwrap_or("");
    let first = first_line(&r.detail, 200);
    // The child element: tag, `type`, `message`, text.
    let child: Option<(&str, Option<&str>, String, Option<String>)> = match e.outcome {
        _ if e.tier == Basis::Decision && e.outcome.is_unexpected() => {
            let mut why = e.outcome.name().to_owned();
            if !e.decisions.is_empty() {
                let _ = write!(why, "; {}", e.decisions.join(", "));
            }
            let message = format!("decision trial read otherwise ({why}): {first}");
            Some(("skipped", None, message, Some(with_context(e))))
        }
        Outcome::Pass if r.detail.is_empty() => None,
        Outcome::Pass => Some(("system-out", None, String::new(), Some(r.detail.clone()))),
        Outcome::Fail => Some(("failure", Some("fail"), first, Some(with_context(e)))),
        Outcome::UnexpectedPass => {
            let message = format!("passed, but expected to fail: {reason}");
            Some((
                "failure",
                Some("unexpected-pass"),
                message,
                Some(with_context(e)),
            ))
        }
        Outcome::Error => Some(("error", Some("error"), first, Some(with_context(e)))),
        Outcome::ExpectedFailure => {
            let message = format!("expected failure ({}): {reason}", verdict_name(r.verdict));
            Some(("skipped", None, message, Some(with_context(e))))
        }
        Outcome::Unsupported => Some(("skipped", None, format!("unsupported: {first}"), None)),
    };
    let mut properties = Vec::new();
    if !e.decisions.is_empty() {
        properties.push(("basis", "decision".to_owned()));
    }
    for id in &e.decisions {
        let reason = decisions
            .get(id)
            .map(|d| d.reason.as_str())
            .unwrap_or_default();
        properties.push(("decision", format!("{id}: {reason}")));
    }
    let element = w
        .create_element("testcase")
        .with_attributes([("name", name), ("classname", classname)]);
    if child.is_none() && properties.is_empty() {
        element.write_empty()?;
        return Ok(());
    }
    element.write_inner_content(|w| {
        property_list(w, &properties)?;
        let Some((tag, kind, message, text)) = child else {
            return Ok(());
        };
        let mut element = w.create_element(tag);
        if let Some(kind) = kind {
            element = element.with_attribute(("type", kind));
        }
        if tag != "system-out" {
            element = element.with_attribute(("message", message.as_str()));
        }
        match text {
            Some(text) => element.write_text_content(BytesText::new(&shown_detail(&text)))?,
            None => element.write_empty()?,
        };
        Ok(())
    })?;
    Ok(())
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
