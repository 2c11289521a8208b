//! A self-contained HTML page: implementations side by side, and the clause
//! by implementation matrix with a drill-down per clause. No external
//! resources; the inline script only adds filtering and expand/collapse all,
//! the page works without it.

use super::groups::failure_groups;
use super::run::{interop_matrix, InteropEntry, RunReport};
use super::{
    escape_xml, first_line, level_name, unmapped_clauses, Coverage, Outcome, Report, ResultEntry,
    Status,
};
use crate::runner::Verdict;
use crate::suite::{Clause, Direction, Level, SpecMap};
use std::collections::BTreeMap;
use std::fmt::Write;

const STYLE: &str = include_str!("style.css");
const SCRIPT: &str = include_str!("script.js");

/// Text content.
fn h(s: &str) -> String {
    escape_xml(s, false)
}

/// An attribute value.
fn at(s: &str) -> String {
    escape_xml(s, true)
}

impl Report {
    /// A self-contained HTML page (inline CSS and a little inline JS, no
    /// external resources): a summary per implementation and a clause by
    /// implementation matrix grouped by source section; each clause row opens
    /// onto its cases with their verdicts and failure details.
    pub fn to_html(reports: &[Report], spec: &SpecMap) -> String {
        render(reports, &[], spec)
    }
}

impl RunReport {
    /// The HTML page: failure groups, implementations, the interop matrix,
    /// the clause × implementation matrix.
    pub fn to_html(&self, spec: &SpecMap) -> String {
        render(&self.implementations, &self.interop, spec)
    }
}

fn render(reports: &[Report], interop: &[InteropEntry], spec: &SpecMap) -> String {
    let mut out = String::new();
    let names: Vec<String> = reports
        .iter()
        .map(|r| r.implementation.name.clone())
        .collect();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>molrec conformance: {}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n",
        h(&if names.is_empty() {
            "no implementation".to_owned()
        } else {
            names.join(", ")
        })
    );
    header(&mut out, reports, spec);
    out.push_str("<main>\n");
    conformance(&mut out, reports);
    unexpected(&mut out, reports);
    read_otherwise(&mut out, reports);
    implementations(&mut out, reports, spec);
    interop_section(&mut out, reports, interop);
    matrix(&mut out, reports, spec);
    out.push_str("</main>\n");
    let _ = write!(out, "<script>\n{SCRIPT}</script>\n</body>\n</html>\n");
    out
}

fn header(out: &mut String, reports: &[Report], spec: &SpecMap) {
    let mut harness: Vec<&str> = reports.iter().map(|r| r.harness_version.as_str()).collect();
    harness.sort();
    harness.dedup();
    let mut suites: Vec<String> = reports
        .iter()
        .flat_map(|r| r.suites.iter())
        .map(|s| format!("{} v{}", s.module, s.version))
        .collect();
    suites.sort();
    suites.dedup();
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    // Clauses no case covers, in any report: a property of the suites, not of an implementation.
    let mut no_case = (0, 0);
    for (id, clause) in spec {
        if reports.iter().all(|r| r.covering(id).is_empty()) {
            match (&clause.waiver, clause.level) {
                (Some(_), _) => no_case.1 += 1,
                (None, Level::Must) => no_case.0 += 1,
                (None, _) => {}
            }
        }
    }
    let uncovered = match no_case {
        (0, 0) => String::new(),
        (m, w) => format!(" ({m} <i>must</i> without a case, {w} waived)"),
    };
    let _ = writeln!(
        out,
        "<header class=\"top\"><div class=\"inner\"><h1>molrec conformance</h1>\
         <p class=\"meta\">harness {} · suites: {} · {} · {} in the spec map{}</p></div></header>",
        h(&if harness.is_empty() {
            "?".to_owned()
        } else {
            harness.join(", ")
        }),
        h(&if suites.is_empty() {
            "none".to_owned()
        } else {
            suites.join(", ")
        }),
        plural(reports.len(), "implementation", "implementations"),
        plural(spec.len(), "clause", "clauses"),
        uncovered,
    );
}

fn count_cell(n: usize) -> String {
    if n == 0 {
        "<td class=\"num count zero\">0</td>".to_owned()
    } else {
        format!("<td class=\"num count\">{n}</td>")
    }
}

fn implementations(out: &mut String, reports: &[Report], spec: &SpecMap) {
    out.push_str("<section>\n<h2>Implementations</h2>\n<table class=\"impls\">\n<thead><tr><th>Implementation</th>");
    for o in Outcome::ALL {
        let _ = write!(
            out,
            "<th class=\"num\"><span class=\"nw\"><span class=\"dot o-{}\"></span>{}</span></th>",
            o.slug(),
            h(o.name()).replacen(' ', "</span> <span>", 1)
        );
    }
    out.push_str("<th class=\"num\">total</th><th>Trials</th><th>Clauses</th><th>Result</th></tr></thead>\n<tbody>\n");
    if reports.is_empty() {
        out.push_str("<tr><td colspan=\"12\" class=\"none\">No report.</td></tr>\n");
    }
    for r in reports {
        let imp = &r.implementation;
        let s = &r.summary;
        let does = match (imp.capabilities.write, imp.capabilities.read) {
            (true, true) => "writes and reads",
            (true, false) => "writes only",
            (false, true) => "reads only",
            (false, false) => "neither writes nor reads",
        };
        let _ = write!(
            out,
            "<tr><td class=\"name\"><b>{}</b> <span class=\"ver\">{}</span><div class=\"note\">{does}</div></td>",
            h(&imp.name),
            h(&imp.version),
        );
        for o in Outcome::ALL {
            out.push_str(&count_cell(s.count(o)));
        }
        let _ = write!(
            out,
            "<td class=\"num count\"><b>{}</b></td><td class=\"trials\"><div class=\"bar\">",
            s.total
        );
        for o in Outcome::ALL {
            let n = s.count(o);
            if n > 0 {
                let _ = write!(
                    out,
                    "<span class=\"o-{}\" style=\"flex:{n}\" title=\"{n} {}\"></span>",
                    o.slug(),
                    at(o.name())
                );
            }
        }
        out.push_str("</div>");
        if s.pass_unnamed > 0 {
            let _ = write!(
                out,
                "<div class=\"note\">{} refusals named no clause</div>",
                s.pass_unnamed
            );
        }
        out.push_str("</td><td class=\"clauses\">");
        let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
        for (id, clause) in spec {
            *statuses
                .entry(Coverage::of(&r.covering(id), Some(clause)).status.slug())
                .or_default() += 1;
        }
        let parts: Vec<String> = ["pass", "partial", "fail", "unsupported"]
            .into_iter()
            .filter_map(|k| {
                statuses
                    .get(k)
                    .map(|n| format!("<span class=\"t-{k}\">{n} {k}</span>"))
            })
            .collect();
        out.push_str(&parts.join(" · "));
        let failing: Vec<&Clause> = spec
            .iter()
            .filter(|(id, c)| {
                let status = Coverage::of(&r.covering(id), Some(c)).status;
                matches!(status, Status::Fail | Status::Partial)
            })
            .map(|(_, c)| c)
            .collect();
        let decided = failing.iter().filter(|c| c.is_decision()).count();
        if decided > 0 {
            let _ = write!(
                out,
                "<div class=\"note\">{decided} of {} failing clauses rest on a decision</div>",
                failing.len()
            );
        }
        out.push_str("</td><td class=\"result\">");
        if r.conforming {
            out.push_str("<span class=\"verdict ok\">conforming</span>");
        } else {
            out.push_str("<span class=\"verdict bad\">not conforming</span>");
        }
        let otherwise = r.decisions_read_otherwise().len();
        if otherwise > 0 {
            let _ = write!(
                out,
                "<div class=\"note\">{otherwise} decision trials read otherwise</div>"
            );
        }
        out.push_str("</td></tr>\n");
    }
    out.push_str("</tbody>\n</table>\n</section>\n");
}

/// One row of the matrix: a clause (from the spec map, or only named by cases).
struct Row<'a> {
    id: &'a str,
    clause: Option<&'a Clause>,
    /// Per report, the trials covering the clause.
    trials: Vec<Vec<&'a ResultEntry>>,
    /// Per report.
    coverage: Vec<Coverage>,
}

impl Row<'_> {
    fn problem(&self) -> bool {
        let uncovered_must = self.clause.is_some_and(|c| c.level == Level::Must)
            && self.coverage.iter().any(|c| c.status == Status::Uncovered);
        uncovered_must
            || self.clause.is_none()
            || self
                .coverage
                .iter()
                .any(|c| matches!(c.status, Status::Fail | Status::Partial))
            || self
                .trials
                .iter()
                .flatten()
                .any(|e| e.outcome.is_unexpected())
    }
}

fn matrix(out: &mut String, reports: &[Report], spec: &SpecMap) {
    let mut groups: BTreeMap<String, Vec<Row<'_>>> = BTreeMap::new();
    for (id, clause) in spec {
        let trials: Vec<Vec<&ResultEntry>> = reports.iter().map(|r| r.covering(id)).collect();
        let coverage = trials
            .iter()
            .map(|t| Coverage::of(t, Some(clause)))
            .collect();
        groups.entry(clause.source.clone()).or_default().push(Row {
            id,
            clause: Some(clause),
            trials,
            coverage,
        });
    }
    let unmapped = unmapped_clauses(reports, spec);
    let mut unmapped_rows = Vec::new();
    for id in &unmapped {
        let trials: Vec<Vec<&ResultEntry>> = reports.iter().map(|r| r.covering(id)).collect();
        let coverage = trials.iter().map(|t| Coverage::of(t, None)).collect();
        unmapped_rows.push(Row {
            id,
            clause: None,
            trials,
            coverage,
        });
    }

    out.push_str("<section>\n<h2>Clauses × implementations</h2>\n");
    out.push_str(
        "<p class=\"hint\">One row per clause of the spec map, grouped by source section. A cell counts the passing trials \
         of the cases that cover the clause, for one implementation (unsupported trials left out). \
         Open a row for its cases, their verdicts and the failure details.</p>\n",
    );
    out.push_str(
        "<div class=\"toolbar js-only\"><input type=\"search\" id=\"q\" placeholder=\"Filter clauses by id or text\" aria-label=\"Filter clauses\">\
         <label><input type=\"checkbox\" id=\"problems\"> only problems</label>\
         <button type=\"button\" id=\"open-all\">Expand all</button><button type=\"button\" id=\"close-all\">Collapse all</button>\
         <span id=\"shown\" class=\"shown\"></span></div>\n",
    );
    out.push_str("<div class=\"legend\">");
    for (slug, name, what) in [
        ("pass", "pass", "every trial passed"),
        ("partial", "partial", "some trials failed"),
        ("fail", "fail", "every trial failed"),
        (
            "unsupported",
            "unsupported",
            "the implementation does not do it",
        ),
        ("waived", "waived", "no case, with a reason"),
        (
            "uncovered-must",
            "not covered",
            "a must without a case or waiver",
        ),
        ("uncovered", "not covered", "a should or may without a case"),
    ] {
        let _ = write!(
            out,
            "<span><span class=\"cell s-{slug}\">{name}</span> {what}</span>"
        );
    }
    out.push_str("</div>\n");
    let _ = writeln!(
        out,
        "<div class=\"matrix\" style=\"--n:{}\">",
        reports.len().max(1)
    );
    out.push_str("<div class=\"mrow mhead\"><div>Clause</div><div>Level</div>");
    for r in reports {
        let _ = write!(
            out,
            "<div class=\"imp\" title=\"{} {}\">{}<small>{}</small></div>",
            at(&r.implementation.name),
            at(&r.implementation.version),
            h(&r.implementation.name),
            h(&r.implementation.version)
        );
    }
    if reports.is_empty() {
        out.push_str("<div class=\"imp\">—</div>");
    }
    out.push_str("</div>\n");
    let mut all: Vec<(String, Vec<Row<'_>>)> = groups.into_iter().collect();
    all.sort_by(|a, b| natural_cmp(&a.0, &b.0));
    if !unmapped_rows.is_empty() {
        all.push(("Not in the spec map".to_owned(), unmapped_rows));
    }
    for (source, rows) in &all {
        group(out, source, rows, reports);
    }
    out.push_str("</div>\n</section>\n");
}

fn group(out: &mut String, source: &str, rows: &[Row<'_>], reports: &[Report]) {
    out.push_str("<section class=\"group\">\n<div class=\"mrow ghead\">");
    let _ = write!(
        out,
        "<div><span class=\"src\">{}</span> <span class=\"gcount\">{} clause{}</span></div><div></div>",
        h(source),
        rows.len(),
        if rows.len() == 1 { "" } else { "s" }
    );
    for i in 0..reports.len() {
        let statuses: Vec<Status> = rows.iter().map(|r| r.coverage[i].status).collect();
        let n = |s: Status| statuses.iter().filter(|x| **x == s).count();
        let bad = n(Status::Fail) + n(Status::Partial);
        let covered = statuses.len() - n(Status::Waived) - n(Status::Uncovered);
        let class = if bad > 0 { "gsum bad" } else { "gsum" };
        let _ = write!(
            out,
            "<div class=\"{class}\">{} of {covered} pass</div>",
            n(Status::Pass)
        );
    }
    out.push_str("</div>\n");
    for row in rows {
        clause_row(out, row, reports);
    }
    out.push_str("</section>\n");
}

fn clause_row(out: &mut String, row: &Row<'_>, reports: &[Report]) {
    let text = row
        .clause
        .map(|c| c.text.as_str())
        .unwrap_or("(named by cases, missing from spec-map.toml)");
    let _ = write!(
        out,
        "<details class=\"clause\" id=\"clause-{}\" data-search=\"{}\" data-problem=\"{}\">\n<summary class=\"mrow\">",
        at(row.id),
        at(&format!("{} {}", row.id, text).to_lowercase()),
        u8::from(row.problem())
    );
    let _ = write!(
        out,
        "<div class=\"cl\"><code>{}</code><span class=\"txt\">{}</span></div>",
        h(row.id),
        h(text)
    );
    match row.clause {
        Some(c) => {
            let decision = match &c.reason {
                Some(reason) if c.is_decision() => format!(
                    "<span class=\"lvl decision\" title=\"{}\">decision</span>",
                    at(&format!("this project's reading: {reason}"))
                ),
                _ => String::new(),
            };
            let _ = write!(
                out,
                "<div><span class=\"lvl {0}\">{0}</span>{decision}</div>",
                level_name(c.level)
            );
        }
        None => out.push_str("<div><span class=\"lvl unknown\">?</span></div>"),
    }
    let first = row.coverage.first().map(|c| c.status);
    let same = row.coverage.iter().all(|c| Some(c.status) == first);
    match first {
        // No case covers the clause: the same for every implementation, said once.
        Some(Status::Uncovered | Status::Waived) if same => {
            cell(out, &row.coverage[0], row.clause, row.coverage.len())
        }
        _ => {
            for cov in &row.coverage {
                cell(out, cov, row.clause, 1);
            }
        }
    }
    out.push_str("</summary>\n<div class=\"drill\">\n");
    drill(out, row, reports);
    out.push_str("</div>\n</details>\n");
}

/// A matrix cell; `span` > 1 when one cell stands for every implementation.
fn cell(out: &mut String, cov: &Coverage, clause: Option<&Clause>, span: usize) {
    let (slug, word) = match cov.status {
        Status::Uncovered if clause.is_some_and(|c| c.level == Level::Must) => {
            ("uncovered-must", "NOT COVERED")
        }
        Status::Uncovered => ("uncovered", "not covered"),
        s => (s.slug(), s.slug()),
    };
    let count = match cov.status {
        Status::Pass | Status::Partial | Status::Fail => format!("{}/{}", cov.passed, cov.judged),
        _ => String::new(),
    };
    let known = if cov.expected > 0 {
        format!(
            "<span class=\"known\" title=\"{0} expected failure(s)\">{0} known</span>",
            cov.expected
        )
    } else {
        String::new()
    };
    let why = match (cov.status, clause) {
        (Status::Waived, Some(c)) => c.waiver.clone().unwrap_or_default(),
        (Status::Uncovered, Some(c)) if c.level == Level::Must => {
            "no case covers it and no waiver".to_owned()
        }
        (Status::Uncovered, _) => "no case covers it".to_owned(),
        _ => String::new(),
    };
    let (style, why) = if span > 1 {
        (
            format!(" style=\"grid-column: span {span}\""),
            format!("<span class=\"why\">{}</span>", h(&why)),
        )
    } else {
        (String::new(), String::new())
    };
    let title = if span > 1 && !why.is_empty() {
        format!("{}: {}", cov.text(), why)
    } else {
        cov.text()
    };
    let _ = write!(
        out,
        "<div class=\"cell s-{slug}\"{style} title=\"{}\"><span>{word}</span>{why}{known}<span class=\"ct\">{count}</span></div>",
        at(&title)
    );
}

fn drill(out: &mut String, row: &Row<'_>, reports: &[Report]) {
    out.push_str("<dl class=\"facts\">");
    if let Some(c) = row.clause {
        let _ = write!(
            out,
            "<dt>Source</dt><dd>{}</dd><dt>Level</dt><dd>{}</dd>",
            h(&c.source),
            level_name(c.level)
        );
        let _ = write!(out, "<dt>Clause</dt><dd>{}</dd>", h(&c.text));
        if let Some(q) = &c.quote {
            let _ = write!(out, "<dt>Text</dt><dd><q>{}</q></dd>", h(q));
        }
        if let Some(w) = &c.waiver {
            let _ = write!(out, "<dt>Waiver</dt><dd>{}</dd>", h(w));
        }
        if let (true, Some(reason)) = (c.is_decision(), &c.reason) {
            let _ = write!(
                out,
                "<dt>Basis</dt><dd>decision: this project's reading where the spec is silent or ambiguous. {}</dd>",
                h(reason)
            );
            if let Some(contrary) = &c.contrary {
                let _ = write!(
                    out,
                    "<dt>Reads otherwise</dt><dd>{}: <q>{}</q></dd>",
                    h(&contrary.source),
                    h(&contrary.quote)
                );
            }
        }
    } else {
        out.push_str("<dt>Clause</dt><dd>This id is named by cases but missing from <code>spec-map.toml</code>.</dd>");
    }
    let _ = write!(
        out,
        "<dt>Link</dt><dd><a href=\"#clause-{0}\">#clause-{1}</a></dd>",
        at(row.id),
        h(row.id)
    );
    out.push_str("</dl>\n");

    // The union of the trials over the implementations, by case then direction.
    type Key = (String, String, Direction);
    let mut trials: BTreeMap<Key, Vec<Option<&ResultEntry>>> = BTreeMap::new();
    for (i, entries) in row.trials.iter().enumerate() {
        for e in entries {
            let key = (
                e.result.module.clone(),
                e.result.case.clone(),
                e.result.direction,
            );
            trials
                .entry(key)
                .or_insert_with(|| vec![None; reports.len()])[i] = Some(e);
        }
    }
    if trials.is_empty() {
        let why = match row.clause.and_then(|c| c.waiver.as_deref()) {
            Some(w) => format!("No case covers this clause; it is waived: {}", h(w)),
            None if row.clause.is_some_and(|c| c.level == Level::Must) => {
                "No case covers this <b>must</b> clause and the spec map gives no waiver."
                    .to_owned()
            }
            None => "No case covers this clause.".to_owned(),
        };
        let _ = writeln!(out, "<p class=\"none\">{why}</p>");
        return;
    }
    out.push_str("<table class=\"cases\"><thead><tr><th>Case</th><th>Direction</th>");
    for r in reports {
        let _ = write!(out, "<th>{}</th>", h(&r.implementation.name));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    /// Per implementation, the trial (if it ran).
    type PerImpl<'a> = Vec<Option<&'a ResultEntry>>;
    let mut by_case: BTreeMap<(String, String), Vec<(Direction, &PerImpl<'_>)>> = BTreeMap::new();
    for ((module, case, direction), per) in &trials {
        by_case
            .entry((module.clone(), case.clone()))
            .or_default()
            .push((*direction, per));
    }
    for ((module, case), dirs) in &by_case {
        let title = dirs
            .iter()
            .flat_map(|(_, per)| per.iter().flatten())
            .map(|e| e.result.title.as_str())
            .next()
            .unwrap_or("");
        for (k, (direction, per)) in dirs.iter().enumerate() {
            out.push_str("<tr>");
            if k == 0 {
                let _ = write!(
                    out,
                    "<td rowspan=\"{}\" class=\"case\"><code>{}::{}</code><div class=\"title\">{}</div></td>",
                    dirs.len(),
                    h(module),
                    h(case),
                    h(title)
                );
            }
            let _ = write!(out, "<td class=\"dir\">{direction}</td>");
            for e in per.iter() {
                match e {
                    Some(e) => {
                        let _ = write!(out, "<td>{}</td>", badge(e));
                    }
                    None => out.push_str("<td class=\"zero\">—</td>"),
                }
            }
            out.push_str("</tr>\n");
        }
    }
    out.push_str("</tbody></table>\n");

    let mut details = String::new();
    for per in trials.values() {
        for (i, e) in per.iter().enumerate() {
            let Some(e) = e else { continue };
            if e.outcome == Outcome::Pass && e.result.verdict == Verdict::Pass {
                continue;
            }
            if e.outcome == Outcome::Unsupported {
                continue;
            }
            detail(&mut details, e, Some(&reports[i]));
        }
    }
    if !details.is_empty() {
        let _ = writeln!(out, "<div class=\"details\">{details}</div>");
    }
}

fn badge(e: &ResultEntry) -> String {
    let unnamed = e.outcome == Outcome::Pass && e.result.verdict == Verdict::PassUnnamed;
    let mut title = e.label().to_owned();
    if let Some(reason) = &e.expected_failure {
        title.push_str(&format!(" — expected to fail: {reason}"));
    }
    if !e.result.detail.is_empty() {
        title.push_str(&format!(" — {}", first_line(&e.result.detail, 160)));
    }
    let text = if unnamed {
        "pass · no clause"
    } else {
        e.outcome.name()
    };
    format!(
        "<span class=\"badge o-{}{}\" title=\"{}\">{}</span>",
        e.outcome.slug(),
        if unnamed { " unnamed" } else { "" },
        at(&title),
        h(text)
    )
}

/// A trial's verdict and detail; under an implementation's heading
/// (`report` is `None`) the case title replaces the implementation's name.
fn detail(out: &mut String, e: &ResultEntry, report: Option<&Report>) {
    let r = &e.result;
    let _ = write!(
        out,
        "<div class=\"det\"><div class=\"dethead\">{}",
        badge(e)
    );
    if let Some(report) = report {
        let _ = write!(
            out,
            "<b>{}</b><span class=\"m\">",
            h(&report.implementation.name)
        );
    } else {
        out.push_str("<span>");
    }
    let _ = write!(out, "<code>{}</code></span>", h(&r.trial));
    if let Some(c) = &r.expected_clause {
        let _ = write!(
            out,
            "<span class=\"m\">must name <code>{}</code></span>",
            h(c)
        );
        match (&r.named_clause, r.verdict) {
            (Some(named), _) => {
                let _ = write!(
                    out,
                    "<span class=\"m\">named <code>{}</code></span>",
                    h(named)
                );
            }
            (None, Verdict::PassUnnamed | Verdict::Fail) => {
                out.push_str("<span class=\"m\">named none</span>")
            }
            (None, _) => {}
        }
    }
    out.push_str("</div>");
    if report.is_none() {
        let _ = write!(out, "<div class=\"dtitle\">{}</div>", h(&r.title));
    }
    if let Some(reason) = &e.expected_failure {
        let _ = write!(
            out,
            "<div class=\"reason\">Expected to fail: {}</div>",
            h(reason)
        );
    }
    if !r.detail.is_empty() {
        let _ = write!(out, "<pre>{}</pre>", h(r.detail.trim_end()));
    }
    out.push_str("</div>\n");
}

/// Each implementation's conformance line, first on the page.
fn conformance(out: &mut String, reports: &[Report]) {
    out.push_str("<section class=\"conformance\">\n");
    for r in reports {
        let _ = writeln!(
            out,
            "<p class=\"verdict-line\"><span class=\"verdict {}\">{}</span> <b>{}</b>: {}</p>",
            if r.conforming { "ok" } else { "bad" },
            if r.conforming {
                "conforming"
            } else {
                "not conforming"
            },
            h(&r.implementation.name),
            h(&r.conformance_line())
        );
    }
    out.push_str("</section>\n");
}

/// The decision trials each implementation reads otherwise, apart from
/// the failures, with each decision's reason and contrary text.
fn read_otherwise(out: &mut String, reports: &[Report]) {
    let rows = super::read_otherwise(reports);
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "<section>\n<h2>Decision trials read otherwise ({})</h2>\n<p class=\"note\">These rest on this project's reading where the spec's text is silent or ambiguous, not on the text: reading one otherwise is not a defect.</p>",
        rows.len()
    );
    for (r, e) in rows {
        let _ = writeln!(
            out,
            "<details class=\"unexp decision\"><summary><b>{}</b> — <code>{}</code> <span class=\"ver\">{}</span></summary>",
            h(&r.implementation.name),
            h(&e.result.trial),
            h(&e.decisions.join(", "))
        );
        out.push_str("<dl class=\"decision\">");
        for id in &e.decisions {
            if let Some(d) = r.decisions.get(id) {
                let _ = write!(out, "<dt><code>{}</code></dt><dd>{}", h(id), h(&d.reason));
                if let Some(c) = &d.contrary {
                    let _ = write!(
                        out,
                        "<div class=\"note\">Reads otherwise: {} — <q>{}</q></div>",
                        h(&c.source),
                        h(&c.quote)
                    );
                }
                out.push_str("</dd>");
            }
        }
        out.push_str("</dl>\n");
        detail(out, e, None);
        out.push_str("</details>\n");
    }
    out.push_str("</section>\n");
}

/// The unexpected results of every implementation on trials that rest on
/// the spec's text, grouped by cause, largest group first; each group
/// opens onto its trials.
fn unexpected(out: &mut String, reports: &[Report]) {
    out.push_str("<section>\n<h2>Unexpected results on the spec's text, by cause</h2>\n");
    let groups = failure_groups(reports);
    if groups.is_empty() {
        out.push_str("<p class=\"none\">None: every trial that rests on the spec's text passed or failed as expected.</p>\n");
    }
    for g in &groups {
        let _ = writeln!(
            out,
            "<details class=\"unexp\"><summary><b>{}</b> — {} <span class=\"ver\">{}</span></summary>",
            h(g.implementation),
            h(&g.headline()),
            h(g.outcome.name())
        );
        for e in &g.entries {
            detail(out, e, None);
        }
        out.push_str("</details>\n");
    }
    out.push_str("</section>\n");
}

/// The writer × reader matrix: cases each pair agrees on; a cell opens onto
/// the pair's failing trials.
fn interop_section(out: &mut String, reports: &[Report], interop: &[InteropEntry]) {
    if interop.is_empty() {
        return;
    }
    let names: Vec<&str> = reports
        .iter()
        .map(|r| r.implementation.name.as_str())
        .collect();
    let (writers, readers, counts) = interop_matrix(&names, interop);
    out.push_str("<section>\n<h2>Interop: writer × reader</h2>\n<p class=\"meta\">Positive cases the row's implementation wrote, the harness's inspection accepted, and the column's implementation read back as the fixture (passed / judged).</p>\n<table class=\"impls interop\">\n<thead><tr><th>writer \\ reader</th>");
    for r in &readers {
        let _ = write!(out, "<th class=\"num\">{}</th>", h(r));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for w in &writers {
        let _ = write!(out, "<tr><th>{}</th>", h(w));
        for r in &readers {
            let failing: Vec<&InteropEntry> = interop
                .iter()
                .filter(|e| {
                    e.result.writer == *w && e.result.reader == *r && e.outcome.is_unexpected()
                })
                .collect();
            let shown = match counts.get(&(*w, *r)) {
                None => "not run".to_owned(),
                Some(c) if c.judged == 0 => "unsupported".to_owned(),
                Some(c) => format!("{}/{}", c.passed, c.judged),
            };
            if failing.is_empty() {
                let _ = write!(out, "<td class=\"num\">{}</td>", h(&shown));
            } else {
                let _ = write!(out, "<td><details><summary><b>{}</b></summary>", h(&shown));
                for e in failing {
                    let _ = write!(
                        out,
                        "<div class=\"det\"><code>{}</code> {}<pre>{}</pre></div>",
                        h(&e.result.trial),
                        h(e.outcome.name()),
                        h(e.result.detail.trim_end())
                    );
                }
                out.push_str("</details></td>");
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n");
    // Per case: one producer × consumer row of verdicts.
    let mut cases: BTreeMap<&str, BTreeMap<(&str, &str), &InteropEntry>> = BTreeMap::new();
    for e in interop {
        let case = e
            .result
            .trial
            .split("::interop::")
            .next()
            .unwrap_or_default();
        cases
            .entry(case)
            .or_default()
            .insert((e.result.writer.as_str(), e.result.reader.as_str()), e);
    }
    let pairs: Vec<(&str, &str)> = writers
        .iter()
        .flat_map(|w| readers.iter().map(move |r| (*w, *r)))
        .collect();
    let _ = write!(
        out,
        "<details><summary>Per case ({} cases)</summary>\n<table class=\"impls pairs\">\n<thead><tr><th>case</th>",
        cases.len()
    );
    for (w, r) in &pairs {
        let _ = write!(out, "<th>{} → {}</th>", h(w), h(r));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (case, by_pair) in &cases {
        // A break may come after each `::` of a long case name.
        let _ = write!(
            out,
            "<tr><td class=\"case\"><code>{}</code></td>",
            h(case).replace("::", "::<wbr>")
        );
        for pair in &pairs {
            match by_pair.get(pair) {
                Some(e) => {
                    let _ = write!(out, "<td>{}</td>", interop_badge(e));
                }
                None => out.push_str("<td>—</td>"),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n</details>\n</section>\n");
}

/// An interop trial's outcome as a badge, its first line of detail as the title.
fn interop_badge(e: &InteropEntry) -> String {
    let mut title = e.outcome.name().to_owned();
    if !e.result.detail.is_empty() {
        title.push_str(&format!(" — {}", first_line(&e.result.detail, 160)));
    }
    format!(
        "<span class=\"badge o-{}\" title=\"{}\">{}</span>",
        e.outcome.slug(),
        at(&title),
        h(e.outcome.name())
    )
}

/// Compares with runs of digits as numbers (`§2` before `§10`).
fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = Vec::new();
        let mut start = 0;
        let bytes = s.as_bytes();
        for i in 1..=bytes.len() {
            if i == bytes.len() || bytes[i].is_ascii_digit() != bytes[start].is_ascii_digit() {
                out.push((bytes[start].is_ascii_digit(), &s[start..i]));
                start = i;
            }
        }
        out
    }
    let (ca, cb) = (chunks(a), chunks(b));
    for ((da, xa), (db, xb)) in ca.iter().zip(cb.iter()) {
        let ord = if *da && *db {
            let (ta, tb) = (xa.trim_start_matches('0'), xb.trim_start_matches('0'));
            ta.len()
                .cmp(&tb.len())
                .then_with(|| ta.cmp(tb))
                .then_with(|| xa.len().cmp(&xb.len()))
        } else {
            xa.cmp(xb)
        };
        if ord != std::cmp::Ordering::Equal {
            return ord;
        }
    }
    ca.len().cmp(&cb.len())
}
