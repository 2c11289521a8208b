//! Markdown, for pull requests: deterministic, so it can be snapshot-tested.

use super::groups::{failure_groups, FailureGroup};
use super::run::{suites_text, RunReport};
use super::{
    does, first_line, level_name, shown_detail, unmapped_clauses, visible, Coverage, Outcome,
    Report, ResultEntry, Status, Summary,
};
use crate::runner::Verdict;
use crate::suite::{Basis, Clause, Level, SpecMap};
use std::collections::BTreeMap;
use std::fmt::Write;

impl Report {
    /// Markdown for a pull request: a summary table, the unexpected results
    /// with their details (fenced), the expected failures, and a coverage
    /// table with every clause of `spec`. Sorted, no timestamps.
    pub fn to_markdown(&self, spec: &SpecMap) -> String {
        visible(render(self, spec))
    }
}

impl RunReport {
    /// Markdown: for one implementation without interop, its own report;
    /// otherwise the failure groups first, then each implementation's
    /// summary, the interop matrix and the clause × implementation table.
    pub fn to_markdown(&self, spec: &SpecMap) -> String {
        visible(match self.implementations.as_slice() {
            [only] if self.interop.is_empty() => render(only, spec),
            _ => render_run(self, spec),
        })
    }
}

fn render(report: &Report, spec: &SpecMap) -> String {
    let mut out = String::new();
    header(&mut out, report);
    unexpected(&mut out, report);
    read_otherwise(&mut out, std::slice::from_ref(report));
    summary(&mut out, report);
    expected(&mut out, report);
    unnamed(&mut out, report);
    unsupported(&mut out, report);
    coverage(&mut out, report, spec);
    out
}

fn header(out: &mut String, report: &Report) {
    let imp = &report.implementation;
    let _ = writeln!(
        out,
        "# Conformance report: {} {}\n",
        literal(&imp.name),
        literal(&imp.version)
    );
    let _ = writeln!(out, "**{}**\n", literal(&report.conformance_line()));
    let suites: Vec<String> = report
        .suites
        .iter()
        .map(|s| format!("{} v{}", code(&s.module), s.version))
        .collect();
    let _ = writeln!(
        out,
        "Harness {} · suites: {} · the implementation {}\n",
        literal(&report.harness_version),
        if suites.is_empty() {
            "none".to_owned()
        } else {
            suites.join(", ")
        },
        does(imp),
    );
    let s = &report.tiers.spec;
    if s.unexpected() > 0 {
        let parts: Vec<String> = [Outcome::Fail, Outcome::Error, Outcome::UnexpectedPass]
            .into_iter()
            .filter(|o| s.count(*o) > 0)
            .map(|o| format!("{} {}", s.count(o), o.name()))
            .collect();
        let _ = writeln!(
            out,
            "Result: {} unexpected on trials that rest on the spec's text ({}).\n",
            s.unexpected(),
            parts.join(", ")
        );
    } else {
        let _ = writeln!(
            out,
            "Result: nothing unexpected on trials that rest on the spec's text.\n"
        );
    }
}

/// The trials of the decision tier that the implementations read
/// otherwise, apart from the failures: each with its decision's reason and
/// the text that reads otherwise, where there is one.
fn read_otherwise(out: &mut String, reports: &[Report]) {
    let rows = super::read_otherwise(reports);
    if rows.is_empty() {
        return;
    }
    out.push_str("## Decision trials read otherwise

These trials rest on this project's reading where the spec's text is silent or ambiguous (`basis = \"decision\"` in spec-map.toml), not on the text: reading one otherwise is not a defect and does not make an implementation non-conforming. To argue with a decision, see docs/suites.md (Tiers).\n\n");
    let several = reports.len() > 1;
    let mut decisions: BTreeMap<&str, &Report> = BTreeMap::new();
    out.push_str(if several {
        "| implementation | trial | decision | outcome | detail |\n|:--|:--|:--|:--|:--|\n"
    } else {
        "| trial | decision | outcome | detail |\n|:--|:--|:--|:--|\n"
    });
    for (r, e) in &rows {
        for id in &e.decisions {
            decisions.entry(id).or_insert(r);
        }
        let ids: Vec<String> = e.decisions.iter().map(|d| code(d)).collect();
        if several {
            let _ = write!(out, "| {} ", literal(&r.implementation.name));
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(&e.result.trial),
            ids.join(", "),
            e.outcome.name(),
            literal(&first_line(&e.result.detail, 120))
        );
    }
    out.push_str("\nThe decisions:\n\n");
    for (id, r) in decisions {
        let Some(d) = r.decisions.get(id) else {
            continue;
        };
        let _ = writeln!(out, "- {}: {}", code(id), text(&d.reason));
        if let Some(c) = &d.contrary {
            let _ = writeln!(
                out,
                "  - the text that reads otherwise ({}): \"{}\"",
                text(&c.source),
                text(&c.quote)
            );
        }
    }
    out.push('\n');
}

fn summary(out: &mut String, report: &Report) {
    let (s, spec, decision) = (&report.summary, &report.tiers.spec, &report.tiers.decision);
    out.push_str(
        "## Summary\n\n| outcome | spec's text | decisions | trials |\n|:--|--:|--:|--:|\n",
    );
    for o in Outcome::ALL {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            o.name(),
            spec.count(o),
            decision.count(o),
            s.count(o)
        );
        if o == Outcome::Pass && s.pass_unnamed > 0 {
            let _ = writeln!(
                out,
                "| … of which refused without naming a clause | {} | {} | {} |",
                spec.pass_unnamed, decision.pass_unnamed, s.pass_unnamed
            );
        }
    }
    let _ = writeln!(
        out,
        "| **total** | **{}** | **{}** | **{}** |\n",
        spec.total, decision.total, s.total
    );
}

fn unexpected(out: &mut String, report: &Report) {
    let groups = failure_groups(std::slice::from_ref(report));
    if groups.is_empty() {
        return;
    }
    out.push_str("## Unexpected results\n\n");
    if groups.iter().any(|g| g.entries.len() > 1) {
        let trials: usize = groups.iter().map(|g| g.entries.len()).sum();
        let _ = writeln!(
            out,
            "{trials} trials in {} groups by cause (the failure with its case-specific parts masked), largest first.\n",
            groups.len()
        );
    }
    for g in &groups {
        match g.entries.as_slice() {
            [e] => single(out, e),
            _ => group(out, g),
        }
    }
}

/// A group of trials with one cause: its headline, its trials, the first
/// trial's detail once.
fn group(out: &mut String, g: &FailureGroup<'_>) {
    let _ = writeln!(
        out,
        "### {} — {}\n",
        literal(&g.headline()),
        g.outcome.name()
    );
    let trials = g.entries.iter().map(|e| e.result.trial.as_str());
    let _ = writeln!(out, "- trials: {}", codes(trials, 12));
    let _ = writeln!(out, "- clauses: {}\n", codes(g.clauses().into_iter(), 12));
    if let Some(first) = g.entries.first() {
        let _ = writeln!(out, "The first, {}:\n", code(&first.result.trial));
    }
    fenced(out, g.example());
}

/// One unexpected trial with everything about it.
fn single(out: &mut String, e: &ResultEntry) {
    let r = &e.result;
    let _ = writeln!(out, "### {} — {}\n", code(&r.trial), e.outcome.name());
    let _ = writeln!(out, "{}\n", text(&r.title));
    let clauses: Vec<String> = r.clauses.iter().map(|c| code(c)).collect();
    let _ = writeln!(
        out,
        "- kind: {}, clauses: {}",
        kind_name(e),
        clauses.join(", ")
    );
    if let Some(c) = &r.expected_clause {
        let named = r
            .named_clause
            .as_deref()
            .map(code)
            .unwrap_or_else(|| "none".into());
        let _ = writeln!(out, "- a refusal must name {}; named: {named}", code(c));
    }
    if let Some(reason) = &e.expected_failure {
        let _ = writeln!(out, "- expected to fail: {}", literal(reason));
    }
    out.push('\n');
    if !r.detail.is_empty() {
        fenced(out, &r.detail);
    }
}

fn expected(out: &mut String, report: &Report) {
    let entries: Vec<&ResultEntry> = report
        .results
        .iter()
        .filter(|e| e.outcome == Outcome::ExpectedFailure)
        .collect();
    if entries.is_empty() {
        return;
    }
    out.push_str(
        "## Expected failures\n\n| trial | verdict | reason | detail |\n|:--|:--|:--|:--|\n",
    );
    for e in entries {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            code(&e.result.trial),
            verdict_label(e),
            literal(e.expected_failure.as_deref().unwrap_or("")),
            literal(&first_line(&e.result.detail, 120)),
        );
    }
    out.push('\n');
}

fn unnamed(out: &mut String, report: &Report) {
    let entries: Vec<&ResultEntry> = report
        .results
        .iter()
        .filter(|e| e.outcome == Outcome::Pass && e.result.verdict == Verdict::PassUnnamed)
        .collect();
    if entries.is_empty() {
        return;
    }
    out.push_str("## Refusals that named no clause\n\nThese pass; naming the clause makes a refusal checkable.\n\n");
    out.push_str("| trial | must name | message |\n|:--|:--|:--|\n");
    for e in entries {
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            code(&e.result.trial),
            e.result
                .expected_clause
                .as_deref()
                .map(code)
                .unwrap_or_default(),
            literal(&first_line(&e.result.detail, 120)),
        );
    }
    out.push('\n');
}

fn unsupported(out: &mut String, report: &Report) {
    let mut groups: BTreeMap<(String, &str), usize> = BTreeMap::new();
    for e in report
        .results
        .iter()
        .filter(|e| e.outcome == Outcome::Unsupported)
    {
        *groups
            .entry((e.result.direction.to_string(), e.result.detail.as_str()))
            .or_default() += 1;
    }
    if groups.is_empty() {
        return;
    }
    out.push_str("## Unsupported\n\n| direction | why | trials |\n|:--|:--|--:|\n");
    for ((direction, detail), n) in groups {
        let _ = writeln!(
            out,
            "| {direction} | {} | {n} |",
            literal(&first_line(detail, 120))
        );
    }
    out.push('\n');
}

fn coverage(out: &mut String, report: &Report, spec: &SpecMap) {
    out.push_str("## Coverage\n\n");
    let rows: Vec<(&String, Coverage)> = spec
        .iter()
        .map(|(id, c)| (id, Coverage::of(&report.covering(id), Some(c))))
        .collect();
    let count = |s: Status| rows.iter().filter(|(_, c)| c.status == s).count();
    let must_uncovered = rows
        .iter()
        .filter(|(id, c)| c.status == Status::Uncovered && spec[*id].level == Level::Must)
        .count();
    let _ = writeln!(
        out,
        "{} clauses: {} pass, {} partial, {} fail, {} unsupported, {} waived, {} not covered ({} of them *must*).\n",
        rows.len(),
        count(Status::Pass),
        count(Status::Partial),
        count(Status::Fail),
        count(Status::Unsupported),
        count(Status::Waived),
        count(Status::Uncovered),
        must_uncovered,
    );
    out.push_str("| clause | level | status | cases |\n|:--|:--|:--|:--|\n");
    for (id, cov) in &rows {
        let clause = &spec[*id];
        let status = match cov.status {
            Status::Uncovered if clause.level == Level::Must => "**NOT COVERED**".to_owned(),
            Status::Pass | Status::Uncovered | Status::Waived | Status::Unsupported => cov.text(),
            Status::Partial | Status::Fail => format!("**{}**", cov.text()),
        };
        let cases = match (&clause.waiver, cov.status) {
            (Some(w), Status::Waived) => format!("waived: {}", cell(w)),
            _ => cases_cell(&report.covering(id)),
        };
        let level = if clause.is_decision() {
            format!("{} · decision", level_name(clause.level))
        } else {
            level_name(clause.level).to_owned()
        };
        let _ = writeln!(out, "| {} | {} | {} | {} |", code(id), level, status, cases);
    }
    out.push('\n');
    let decisions: Vec<(&String, &Clause)> = spec.iter().filter(|(_, c)| c.is_decision()).collect();
    if !decisions.is_empty() {
        out.push_str("## Decisions\n\nClauses that are this project's reading where the spec is silent or ambiguous (`basis = \"decision\"` in spec-map.toml); a failure here is a defensible reading rather than a defect.\n\n| clause | status | reason | text that reads otherwise |\n|:--|:--|:--|:--|\n");
        for (id, clause) in decisions {
            let cov = Coverage::of(&report.covering(id), Some(clause));
            let reason = clause.reason.as_deref().unwrap_or_default();
            let contrary = clause
                .contrary
                .as_ref()
                .map(|c| format!("{}: \"{}\"", c.source, c.quote))
                .unwrap_or_else(|| "—".into());
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} |",
                code(id),
                cov.text(),
                cell(reason),
                cell(&contrary)
            );
        }
        out.push('\n');
    }
    let unmapped = unmapped_clauses([report], spec);
    if !unmapped.is_empty() {
        out.push_str("## Clauses not in the spec map\n\n");
        for id in unmapped {
            let _ = writeln!(
                out,
                "- {}: {}",
                code(&id),
                cases_cell(&report.covering(&id))
            );
        }
        out.push('\n');
    }
}

/// Markdown of a run of several implementations: the failure groups of
/// all of them first, then a summary per implementation, the interop
/// matrix and its failures, and the clause × implementation table.
fn render_run(run: &RunReport, spec: &SpecMap) -> String {
    let mut out = String::new();
    let names = run.names();
    let _ = writeln!(
        out,
        "# Conformance report: {}\n",
        literal(&names.join(", "))
    );
    let _ = writeln!(
        out,
        "Harness {} · suites: {} · {} implementations, {} interop trials\n",
        literal(&run.harness_version),
        suites_text(&run.suites),
        names.len(),
        run.interop.len()
    );
    for line in run.conformance_lines() {
        let _ = writeln!(out, "- **{}**", literal(&line));
    }
    out.push('\n');
    let mut total = Summary::default();
    for r in &run.implementations {
        total.add(&r.tiers.spec);
    }
    let interop_unexpected = run
        .interop
        .iter()
        .filter(|e| e.outcome.is_unexpected() && e.tier == Basis::Spec)
        .count();
    if total.unexpected() + interop_unexpected > 0 {
        let _ = writeln!(
            out,
            "Result: {} unexpected on trials that rest on the spec's text ({} in the implementations' own trials, {} in interop).\n",
            total.unexpected() + interop_unexpected,
            total.unexpected(),
            interop_unexpected
        );
    } else {
        let _ = writeln!(
            out,
            "Result: nothing unexpected on trials that rest on the spec's text.\n"
        );
    }
    let groups = run.failure_groups();
    if !groups.is_empty() {
        out.push_str("## Failures by cause\n\nEach group is one implementation's trials that failed the same way (the failure with its case-specific parts masked), largest first.\n\n");
        for g in &groups {
            let _ = writeln!(
                out,
                "### {}: {} — {}\n",
                literal(g.implementation),
                literal(&g.headline()),
                g.outcome.name()
            );
            let trials = g.entries.iter().map(|e| e.result.trial.as_str());
            let _ = writeln!(out, "- trials: {}\n", codes(trials, 8));
            fenced(&mut out, g.example());
        }
    }
    read_otherwise(&mut out, &run.implementations);
    out.push_str("## Implementations\n\n| implementation | version | does | conforming | pass | expected failure | unexpected pass | fail | error | unsupported | total |\n|:--|:--|:--|:--|--:|--:|--:|--:|--:|--:|--:|\n");
    for r in &run.implementations {
        let s = &r.summary;
        let imp = &r.implementation;
        let does = match (imp.capabilities.write, imp.capabilities.read) {
            (true, true) => "writes, reads",
            (true, false) => "writes",
            (false, true) => "reads",
            (false, false) => "neither",
        };
        let _ = writeln!(
            out,
            "| {} | {} | {does} | {} | {} | {} | {} | {} | {} | {} | {} |",
            literal(&imp.name),
            literal(&imp.version),
            if r.conforming { "yes" } else { "**no**" },
            s.pass,
            s.expected_failure,
            s.unexpected_pass,
            s.fail,
            s.error,
            s.unsupported,
            s.total
        );
    }
    out.push('\n');
    interop(&mut out, run);
    out.push_str("## Clauses × implementations\n\n");
    let _ = write!(out, "| clause | level |");
    for n in &names {
        let _ = write!(out, " {} |", literal(n));
    }
    out.push_str("\n|:--|:--|");
    for _ in &names {
        out.push_str(":--|");
    }
    out.push('\n');
    for (id, clause) in spec {
        let level = if clause.is_decision() {
            format!("{} · decision", level_name(clause.level))
        } else {
            level_name(clause.level).to_owned()
        };
        let _ = write!(out, "| {} | {level} |", code(id));
        for r in &run.implementations {
            let cov = Coverage::of(&r.covering(id), Some(clause));
            let shown = match cov.status {
                Status::Partial | Status::Fail => format!("**{}**", cov.text()),
                _ => cov.text(),
            };
            let _ = write!(out, " {shown} |");
        }
        out.push('\n');
    }
    out.push('\n');
    out
}

/// The writer × reader matrix (cases each pair agrees on) and the interop
/// trials that failed, grouped by cause.
fn interop(out: &mut String, run: &RunReport) {
    if run.interop.is_empty() {
        return;
    }
    let (writers, readers, counts) = run.interop_matrix();
    out.push_str("## Interop: writer × reader\n\nEach cell: the positive cases that the row's implementation wrote, the harness's inspection accepted, and the column's implementation read back as the fixture (passed / judged). Trials: `module::case::interop::writer->reader`.\n\n| writer \\ reader |");
    for r in &readers {
        let _ = write!(out, " {} |", literal(r));
    }
    out.push_str("\n|:--|");
    for _ in &readers {
        out.push_str("--:|");
    }
    out.push('\n');
    for w in &writers {
        let _ = write!(out, "| **{}** |", literal(w));
        for r in &readers {
            let shown = match counts.get(&(*w, *r)) {
                None => "not run".to_owned(),
                Some(c) if c.judged == 0 => "unsupported".to_owned(),
                Some(c) if c.passed == c.judged => format!("{}/{}", c.passed, c.judged),
                Some(c) => format!("**{}/{}**", c.passed, c.judged),
            };
            let _ = write!(out, " {shown} |");
        }
        out.push('\n');
    }
    out.push('\n');
    let mut by_cause: BTreeMap<(String, &str, &str), Vec<&str>> = BTreeMap::new();
    for e in run.interop.iter().filter(|e| e.outcome.is_unexpected()) {
        let r = &e.result;
        let line = r
            .detail
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.ends_with(':'));
        let mut cause = super::groups::mask(line.unwrap_or(""));
        if e.tier == Basis::Decision {
            cause.insert_str(0, "(a decision trial: not a defect) ");
        }
        by_cause
            .entry((cause, &r.writer, &r.reader))
            .or_default()
            .push(&r.trial);
    }
    if by_cause.is_empty() {
        return;
    }
    out.push_str("### Interop failures\n\n| writer → reader | cause | trials |\n|:--|:--|:--|\n");
    for ((cause, w, r), trials) in by_cause {
        let _ = writeln!(
            out,
            "| {} → {} | {} | {} ({}) |",
            literal(w),
            literal(r),
            literal(&cause),
            trials.len(),
            codes(trials.iter().copied(), 4)
        );
    }
    out.push('\n');
}

/// The first `limit` of `names` as code, `, `-separated, then how many more.
fn codes<'a>(names: impl ExactSizeIterator<Item = &'a str>, limit: usize) -> String {
    let more = names.len().saturating_sub(limit);
    let listed: Vec<String> = names.take(limit).map(code).collect();
    match more {
        0 => listed.join(", "),
        more => format!("{} and {more} more", listed.join(", ")),
    }
}

/// `` `collection::x` (write: pass, read: fail); `collection::y` (write: pass) ``, or `—`.
fn cases_cell(entries: &[&ResultEntry]) -> String {
    if entries.is_empty() {
        return "—".into();
    }
    let mut cases: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in entries {
        cases.entry(e.case_name()).or_default().push(format!(
            "{}: {}",
            e.result.direction,
            e.label()
        ));
    }
    let parts: Vec<String> = cases
        .into_iter()
        .map(|(case, dirs)| format!("{} ({})", code(&case), dirs.join(", ")))
        .collect();
    parts.join("; ")
}

fn kind_name(e: &ResultEntry) -> String {
    serde_json::to_value(e.result.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn verdict_label(e: &ResultEntry) -> String {
    serde_json::to_value(e.result.verdict)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// A fenced block longer than any run of backticks inside, of a trial's
/// detail as the rendered reports show it (cut past a bound).
fn fenced(out: &mut String, body: &str) {
    let body = shown_detail(body);
    let fence = fence_for(&body);
    let _ = writeln!(
        out,
        "{fence}text\n{}\n{fence}\n",
        body.trim_end_matches('\n')
    );
}

/// A code fence longer than any run of backticks in `body` (at least three),
/// so nothing inside can end it.
pub(super) fn fence_for(body: &str) -> String {
    "`".repeat((longest_backtick_run(body) + 1).max(3))
}

fn longest_backtick_run(text: &str) -> usize {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    longest
}

/// Inline code of any text, on one line and safe in a table cell: its
/// delimiters are longer than any run of backticks inside.
pub(super) fn code(s: &str) -> String {
    let s = s.replace('|', "\\|").replace(['\n', '\r'], " ");
    if s.contains('`') {
        let fence = "`".repeat(longest_backtick_run(&s) + 1);
        format!("{fence} {s} {fence}")
    } else {
        format!("`{s}`")
    }
}

/// Text in a table cell: one line, no pipes, no raw HTML.
fn cell(s: &str) -> String {
    text(s).replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// Free text of this harness (titles, the spec map's reasons and quotes,
/// which may use Markdown's code spans): no raw HTML.
fn text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Text an adapter or a user chose (a name, a version, a message, a
/// reason), shown as it is: on one line, HTML's and Markdown's special
/// characters escaped, so it neither makes markup nor breaks a table.
pub(super) fn literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\n' | '\r' => out.push(' '),
            '\\' | '`' | '*' | '_' | '[' | ']' | '~' | '|' | '#' | '!' | '$' => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out
}
