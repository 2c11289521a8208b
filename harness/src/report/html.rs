//! A self-contained HTML page: implementations side by side, and the clause
//! by implementation matrix with a drill-down per clause. No external
//! resources; the inline script only adds filtering and expand/collapse all,
//! the page works without it.
//!
//! Written with maud, whose templates escape every text and attribute
//! they are handed (only the page's own CSS and script go in as they are),
//! then made [`visible`]: no text of an adapter becomes markup.

use super::groups::failure_groups;
use super::run::{interop_matrix, InteropEntry, RunReport};
use super::{
    does, first_line, level_name, shown_detail, unmapped_clauses, visible, Coverage, Outcome,
    Report, ResultEntry, Status,
};
use crate::runner::Verdict;
use crate::suite::{Clause, Direction, Level, SpecMap};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use std::collections::BTreeMap;

const STYLE: &str = include_str!("style.css");
const SCRIPT: &str = include_str!("script.js");

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
    let names: Vec<&str> = reports
        .iter()
        .map(|r| r.implementation.name.as_str())
        .collect();
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title {
                    "molrec conformance: "
                    @if names.is_empty() { "no implementation" } @else { (names.join(", ")) }
                }
                style { "\n" (PreEscaped(STYLE)) }
            }
            body {
                (header(reports, spec))
                main {
                    (conformance(reports))
                    (unexpected(reports))
                    (read_otherwise(reports))
                    (implementations(reports, spec))
                    (interop_section(reports, interop))
                    (matrix(reports, spec))
                }
                script { "\n" (PreEscaped(SCRIPT)) }
            }
        }
    };
    let mut page = page.into_string();
    page.push('\n');
    visible(page)
}

/// `1 implementation`, `2 implementations`.
fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn header(reports: &[Report], spec: &SpecMap) -> Markup {
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
    // Clauses no case covers, in any report: a property of the suites, not of an implementation.
    let (mut must, mut waived) = (0, 0);
    for (id, clause) in spec {
        if reports.iter().all(|r| r.covering(id).is_empty()) {
            match (&clause.waiver, clause.level) {
                (Some(_), _) => waived += 1,
                (None, Level::Must) => must += 1,
                (None, _) => {}
            }
        }
    }
    html! {
        header.top { div.inner {
            h1 { "molrec conformance" }
            p.meta {
                "harness " @if harness.is_empty() { "?" } @else { (harness.join(", ")) }
                " · suites: " @if suites.is_empty() { "none" } @else { (suites.join(", ")) }
                " · " (plural(reports.len(), "implementation", "implementations"))
                " · " (plural(spec.len(), "clause", "clauses")) " in the spec map"
                @if must + waived > 0 { " (" (must) " " i { "must" } " without a case, " (waived) " waived)" }
            }
        } }
    }
}

fn implementations(reports: &[Report], spec: &SpecMap) -> Markup {
    html! { section {
        h2 { "Implementations" }
        table.impls {
            thead { tr {
                th { "Implementation" }
                @for o in Outcome::ALL {
                    @let (first, rest) = o.name().split_once(' ').map_or((o.name(), None), |(a, b)| (a, Some(b)));
                    th.num {
                        span.nw { span class={ "dot o-" (o.slug()) } {} (first) }
                        @if let Some(rest) = rest { " " span { (rest) } }
                    }
                }
                th.num { "total" } th { "Trials" } th { "Clauses" } th { "Result" }
            } }
            tbody {
                @if reports.is_empty() { tr { td colspan="12" class="none" { "No report." } } }
                @for r in reports { (implementation_row(r, spec)) }
            }
        }
    } }
}

fn implementation_row(r: &Report, spec: &SpecMap) -> Markup {
    let imp = &r.implementation;
    let s = &r.summary;
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    let mut failing = (0, 0);
    for (id, clause) in spec {
        let status = Coverage::of(&r.covering(id), Some(clause)).status;
        *statuses.entry(status.slug()).or_default() += 1;
        if matches!(status, Status::Fail | Status::Partial) {
            failing.0 += 1;
            failing.1 += usize::from(clause.is_decision());
        }
    }
    let shown: Vec<(&str, usize)> = ["pass", "partial", "fail", "unsupported"]
        .into_iter()
        .filter_map(|k| statuses.get(k).map(|n| (k, *n)))
        .collect();
    let otherwise = r.decisions_read_otherwise().len();
    html! { tr {
        td.name {
            b { (imp.name) } " " span.ver { (imp.version) }
            div.note { (does(imp)) }
        }
        @for o in Outcome::ALL {
            @let n = s.count(o);
            td class={ "num count" @if n == 0 { " zero" } } { (n) }
        }
        td class="num count" { b { (s.total) } }
        td.trials {
            div.bar {
                @for o in Outcome::ALL {
                    @let n = s.count(o);
                    @if n > 0 {
                        span class={ "o-" (o.slug()) } style={ "flex:" (n) } title={ (n) " " (o.name()) } {}
                    }
                }
            }
            @if s.pass_unnamed > 0 { div.note { (s.pass_unnamed) " refusals named no clause" } }
        }
        td.clauses {
            @for (i, (k, n)) in shown.iter().enumerate() {
                @if i > 0 { " · " }
                span class={ "t-" (k) } { (n) " " (k) }
            }
            @if failing.1 > 0 {
                div.note { (failing.1) " of " (failing.0) " failing clauses rest on a decision" }
            }
        }
        td.result {
            (verdict(r.conforming))
            @if otherwise > 0 { div.note { (otherwise) " decision trials read otherwise" } }
        }
    } }
}

/// `conforming` or `not conforming`, as a coloured pill.
fn verdict(conforming: bool) -> Markup {
    html! {
        @if conforming { span class="verdict ok" { "conforming" } }
        @else { span class="verdict bad" { "not conforming" } }
    }
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

impl<'a> Row<'a> {
    fn new(id: &'a str, clause: Option<&'a Clause>, reports: &'a [Report]) -> Row<'a> {
        let trials: Vec<Vec<&ResultEntry>> = reports.iter().map(|r| r.covering(id)).collect();
        let coverage = trials.iter().map(|t| Coverage::of(t, clause)).collect();
        Row {
            id,
            clause,
            trials,
            coverage,
        }
    }

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

/// The legend of the matrix's cells: class, word, meaning.
const LEGEND: [(&str, &str, &str); 7] = [
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
];

fn matrix(reports: &[Report], spec: &SpecMap) -> Markup {
    let mut groups: BTreeMap<String, Vec<Row<'_>>> = BTreeMap::new();
    for (id, clause) in spec {
        groups
            .entry(clause.source.clone())
            .or_default()
            .push(Row::new(id, Some(clause), reports));
    }
    let unmapped = unmapped_clauses(reports, spec);
    let mut all: Vec<(String, Vec<Row<'_>>)> = groups.into_iter().collect();
    all.sort_by(|a, b| natural_cmp(&a.0, &b.0));
    if !unmapped.is_empty() {
        let rows = unmapped.iter().map(|id| Row::new(id, None, reports));
        all.push(("Not in the spec map".to_owned(), rows.collect()));
    }
    html! { section {
        h2 { "Clauses × implementations" }
        p.hint {
            "One row per clause of the spec map, grouped by source section. A cell counts the passing trials \
             of the cases that cover the clause, for one implementation (unsupported trials left out). \
             Open a row for its cases, their verdicts and the failure details."
        }
        div class="toolbar js-only" {
            input type="search" id="q" placeholder="Filter clauses by id or text" aria-label="Filter clauses";
            label { input type="checkbox" id="problems"; " only problems" }
            button type="button" id="open-all" { "Expand all" }
            button type="button" id="close-all" { "Collapse all" }
            span id="shown" class="shown" {}
        }
        div.legend {
            @for (slug, name, what) in LEGEND {
                span { span class={ "cell s-" (slug) } { (name) } " " (what) }
            }
        }
        div.matrix style={ "--n:" (reports.len().max(1)) } {
            div class="mrow mhead" {
                div { "Clause" } div { "Level" }
                @for r in reports {
                    @let imp = &r.implementation;
                    div.imp title={ (imp.name) " " (imp.version) } { (imp.name) small { (imp.version) } }
                }
                @if reports.is_empty() { div.imp { "—" } }
            }
            @for (source, rows) in &all { (group(source, rows, reports)) }
        }
    } }
}

fn group(source: &str, rows: &[Row<'_>], reports: &[Report]) -> Markup {
    html! { section.group {
        div class="mrow ghead" {
            div {
                span.src { (source) } " "
                span.gcount { (rows.len()) " clause" @if rows.len() != 1 { "s" } }
            }
            div {}
            @for i in 0..reports.len() {
                @let n = |s: Status| rows.iter().filter(|r| r.coverage[i].status == s).count();
                @let covered = rows.len() - n(Status::Waived) - n(Status::Uncovered);
                div class={ "gsum" @if n(Status::Fail) + n(Status::Partial) > 0 { " bad" } } {
                    (n(Status::Pass)) " of " (covered) " pass"
                }
            }
        }
        @for row in rows { (clause_row(row, reports)) }
    } }
}

fn clause_row(row: &Row<'_>, reports: &[Report]) -> Markup {
    let text = row
        .clause
        .map(|c| c.text.as_str())
        .unwrap_or("(named by cases, missing from spec-map.toml)");
    let first = row.coverage.first().map(|c| c.status);
    // No case covers the clause: the same for every implementation, said once.
    let once = matches!(first, Some(Status::Uncovered | Status::Waived))
        && row.coverage.iter().all(|c| Some(c.status) == first);
    html! {
        details.clause id={ "clause-" (row.id) } data-search=((format!("{} {}", row.id, text).to_lowercase())) data-problem=(u8::from(row.problem())) {
            summary.mrow {
                div.cl { code { (row.id) } span.txt { (text) } }
                @match row.clause {
                    Some(c) => div {
                        span class={ "lvl " (level_name(c.level)) } { (level_name(c.level)) }
                        @if let (true, Some(reason)) = (c.is_decision(), &c.reason) {
                            span class="lvl decision" title={ "this project's reading: " (reason) } { "decision" }
                        }
                    },
                    None => div { span class="lvl unknown" { "?" } },
                }
                @if once { (cell(&row.coverage[0], row.clause, row.coverage.len())) }
                @else { @for cov in &row.coverage { (cell(cov, row.clause, 1)) } }
            }
            div.drill { (drill(row, reports)) }
        }
    }
}

/// A matrix cell; `span` > 1 when one cell stands for every implementation.
fn cell(cov: &Coverage, clause: Option<&Clause>, span: usize) -> Markup {
    let must = clause.is_some_and(|c| c.level == Level::Must);
    let (slug, word) = match cov.status {
        Status::Uncovered if must => ("uncovered-must", "NOT COVERED"),
        Status::Uncovered => ("uncovered", "not covered"),
        s => (s.slug(), s.slug()),
    };
    let counted = matches!(cov.status, Status::Pass | Status::Partial | Status::Fail);
    let why = match (cov.status, clause) {
        (Status::Waived, Some(c)) => c.waiver.clone().unwrap_or_default(),
        (Status::Uncovered, _) if must => "no case covers it and no waiver".to_owned(),
        (Status::Uncovered, _) => "no case covers it".to_owned(),
        _ => String::new(),
    };
    let title = if span > 1 && !why.is_empty() {
        format!("{}: {}", cov.text(), why)
    } else {
        cov.text()
    };
    html! {
        div class={ "cell s-" (slug) } style=[(span > 1).then(|| format!("grid-column: span {span}"))] title=(title) {
            span { (word) }
            @if span > 1 { span.why { (why) } }
            @if cov.expected > 0 {
                span.known title={ (cov.expected) " expected failure(s)" } { (cov.expected) " known" }
            }
            span.ct { @if counted { (cov.passed) "/" (cov.judged) } }
        }
    }
}

fn drill(row: &Row<'_>, reports: &[Report]) -> Markup {
    // The union of the trials over the implementations, by case then direction.
    type PerImpl<'a> = Vec<Option<&'a ResultEntry>>;
    let mut by_case: BTreeMap<(&str, &str), BTreeMap<Direction, PerImpl<'_>>> = BTreeMap::new();
    for (i, entries) in row.trials.iter().enumerate() {
        for e in entries {
            let case = (e.result.module.as_str(), e.result.case.as_str());
            by_case
                .entry(case)
                .or_default()
                .entry(e.result.direction)
                .or_insert_with(|| vec![None; reports.len()])[i] = Some(e);
        }
    }
    let details: Vec<(&ResultEntry, &Report)> = by_case
        .values()
        .flat_map(BTreeMap::values)
        .flat_map(|per| per.iter().zip(reports))
        .filter_map(|(e, r)| Some(((*e)?, r)))
        .filter(|(e, _)| e.result.verdict != Verdict::Pass || e.outcome != Outcome::Pass)
        .filter(|(e, _)| e.outcome != Outcome::Unsupported)
        .collect();
    html! {
        dl.facts {
            @if let Some(c) = row.clause {
                dt { "Source" } dd { (c.source) }
                dt { "Level" } dd { (level_name(c.level)) }
                dt { "Clause" } dd { (c.text) }
                @if let Some(q) = &c.quote { dt { "Text" } dd { q { (q) } } }
                @if let Some(w) = &c.waiver { dt { "Waiver" } dd { (w) } }
                @if let (true, Some(reason)) = (c.is_decision(), &c.reason) {
                    dt { "Basis" }
                    dd { "decision: this project's reading where the spec is silent or ambiguous. " (reason) }
                    @if let Some(contrary) = &c.contrary {
                        dt { "Reads otherwise" } dd { (contrary.source) ": " q { (contrary.quote) } }
                    }
                }
            } @else {
                dt { "Clause" } dd { "This id is named by cases but missing from " code { "spec-map.toml" } "." }
            }
            dt { "Link" } dd { a href={ "#clause-" (row.id) } { "#clause-" (row.id) } }
        }
        @if by_case.is_empty() {
            p.none {
                @match row.clause.and_then(|c| c.waiver.as_deref()) {
                    Some(w) => { "No case covers this clause; it is waived: " (w) },
                    None if row.clause.is_some_and(|c| c.level == Level::Must) => {
                        "No case covers this " b { "must" } " clause and the spec map gives no waiver."
                    },
                    None => "No case covers this clause.",
                }
            }
        } @else {
            table.cases {
                thead { tr {
                    th { "Case" } th { "Direction" }
                    @for r in reports { th { (r.implementation.name) } }
                } }
                tbody {
                    @for ((module, case), dirs) in &by_case {
                        @let title = dirs.values().flatten().flatten().map(|e| e.result.title.as_str()).next().unwrap_or("");
                        @for (k, (direction, per)) in dirs.iter().enumerate() {
                            tr {
                                @if k == 0 {
                                    td rowspan=(dirs.len()) class="case" {
                                        code { (module) "::" (case) } div.title { (title) }
                                    }
                                }
                                td.dir { (direction.to_string()) }
                                @for e in per {
                                    @match e {
                                        Some(e) => td { (badge(e)) },
                                        None => td.zero { "—" },
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if !details.is_empty() {
                div.details { @for (e, r) in details { (detail(e, Some(r))) } }
            }
        }
    }
}

fn badge(e: &ResultEntry) -> Markup {
    let unnamed = e.outcome == Outcome::Pass && e.result.verdict == Verdict::PassUnnamed;
    let mut title = e.label().to_owned();
    if let Some(reason) = &e.expected_failure {
        title.push_str(&format!(" — expected to fail: {reason}"));
    }
    if !e.result.detail.is_empty() {
        title.push_str(&format!(" — {}", first_line(&e.result.detail, 160)));
    }
    html! {
        span class={ "badge o-" (e.outcome.slug()) @if unnamed { " unnamed" } } title=(title) {
            @if unnamed { "pass · no clause" } @else { (e.outcome.name()) }
        }
    }
}

/// A trial's verdict and detail; under an implementation's heading
/// (`report` is `None`) the case title replaces the implementation's name.
fn detail(e: &ResultEntry, report: Option<&Report>) -> Markup {
    let r = &e.result;
    let named = match (&r.named_clause, r.verdict) {
        (Some(named), _) => Some(html! { "named " code { (named) } }),
        (None, Verdict::PassUnnamed | Verdict::Fail) => Some(html! { "named none" }),
        (None, _) => None,
    };
    html! { div.det {
        div.dethead {
            (badge(e))
            @if let Some(report) = report {
                b { (report.implementation.name) } span.m { code { (r.trial) } }
            } @else {
                span { code { (r.trial) } }
            }
            @if let Some(c) = &r.expected_clause {
                span.m { "must name " code { (c) } }
                @if let Some(named) = named { span.m { (named) } }
            }
        }
        @if report.is_none() { div.dtitle { (r.title) } }
        @if let Some(reason) = &e.expected_failure { div.reason { "Expected to fail: " (reason) } }
        @if !r.detail.is_empty() { pre { (shown_detail(r.detail.trim_end())) } }
    } }
}

/// Each implementation's conformance line, first on the page.
fn conformance(reports: &[Report]) -> Markup {
    html! { section.conformance {
        @for r in reports {
            p.verdict-line {
                (verdict(r.conforming)) " " b { (r.implementation.name) } ": " (r.conformance_line())
            }
        }
    } }
}

/// The decision trials each implementation reads otherwise, apart from
/// the failures, with each decision's reason and contrary text.
fn read_otherwise(reports: &[Report]) -> Markup {
    let rows = super::read_otherwise(reports);
    html! { @if !rows.is_empty() { section {
        h2 { "Decision trials read otherwise (" (rows.len()) ")" }
        p.note {
            "These rest on this project's reading where the spec's text is silent or ambiguous, not on the text: reading one otherwise is not a defect."
        }
        @for (r, e) in rows {
            details class="unexp decision" {
                summary {
                    b { (r.implementation.name) } " — " code { (e.result.trial) } " "
                    span.ver { (e.decisions.join(", ")) }
                }
                dl.decision {
                    @for (id, d) in e.decisions.iter().filter_map(|id| Some((id, r.decisions.get(id)?))) {
                        dt { code { (id) } }
                        dd {
                            (d.reason)
                            @if let Some(c) = &d.contrary {
                                div.note { "Reads otherwise: " (c.source) " — " q { (c.quote) } }
                            }
                        }
                    }
                }
                (detail(e, None))
            }
        }
    } } }
}

/// The unexpected results of every implementation on trials that rest on
/// the spec's text, grouped by cause, largest group first; each group
/// opens onto its trials.
fn unexpected(reports: &[Report]) -> Markup {
    let groups = failure_groups(reports);
    html! { section {
        h2 { "Unexpected results on the spec's text, by cause" }
        @if groups.is_empty() {
            p.none { "None: every trial that rests on the spec's text passed or failed as expected." }
        }
        @for g in &groups {
            details.unexp {
                summary { b { (g.implementation) } " — " (g.headline()) " " span.ver { (g.outcome.name()) } }
                @for e in &g.entries { (detail(e, None)) }
            }
        }
    } }
}

/// The writer × reader matrix: cases each pair agrees on; a cell opens onto
/// the pair's failing trials.
fn interop_section(reports: &[Report], interop: &[InteropEntry]) -> Markup {
    if interop.is_empty() {
        return html! {};
    }
    let names: Vec<&str> = reports
        .iter()
        .map(|r| r.implementation.name.as_str())
        .collect();
    let (writers, readers, counts) = interop_matrix(&names, interop);
    // Per case: one writer × reader row of verdicts.
    let mut cases: BTreeMap<&str, BTreeMap<(&str, &str), &InteropEntry>> = BTreeMap::new();
    for e in interop {
        let case = e.result.trial.split("::interop::").next();
        cases
            .entry(case.unwrap_or_default())
            .or_default()
            .insert((e.result.writer.as_str(), e.result.reader.as_str()), e);
    }
    let pairs: Vec<(&str, &str)> = writers
        .iter()
        .flat_map(|w| readers.iter().map(move |r| (*w, *r)))
        .collect();
    html! { section {
        h2 { "Interop: writer × reader" }
        p.meta { "Positive cases the row's implementation wrote, the harness's inspection accepted, and the column's implementation read back as the fixture (passed / judged)." }
        table class="impls interop" {
            thead { tr { th { "writer \\ reader" } @for r in &readers { th.num { (r) } } } }
            tbody {
                @for w in &writers { tr {
                    th { (w) }
                    @for r in &readers {
                        @let failing: Vec<&InteropEntry> = interop.iter().filter(|e| {
                            e.result.writer == *w && e.result.reader == *r && e.outcome.is_unexpected()
                        }).collect();
                        @let shown = match counts.get(&(*w, *r)) {
                            None => "not run".to_owned(),
                            Some(c) if c.judged == 0 => "unsupported".to_owned(),
                            Some(c) => format!("{}/{}", c.passed, c.judged),
                        };
                        @if failing.is_empty() { td.num { (shown) } } @else {
                            td { details {
                                summary { b { (shown) } }
                                @for e in failing {
                                    div.det {
                                        code { (e.result.trial) } " " (e.outcome.name())
                                        pre { (shown_detail(e.result.detail.trim_end())) }
                                    }
                                }
                            } }
                        }
                    }
                } }
            }
        }
        details {
            summary { "Per case (" (cases.len()) " cases)" }
            table class="impls pairs" {
                thead { tr { th { "case" } @for (w, r) in &pairs { th { (w) " → " (r) } } } }
                tbody {
                    @for (case, by_pair) in &cases { tr {
                        // A break may come after each `::` of a long case name.
                        td.case { code {
                            @for (i, part) in case.split("::").enumerate() {
                                @if i > 0 { "::" wbr; }
                                (part)
                            }
                        } }
                        @for pair in &pairs {
                            @match by_pair.get(pair) {
                                Some(e) => td { (interop_badge(e)) },
                                None => td { "—" },
                            }
                        }
                    } }
                }
            }
        }
    } }
}

/// An interop trial's outcome as a badge, its first line of detail as the title.
fn interop_badge(e: &InteropEntry) -> Markup {
    let mut title = e.outcome.name().to_owned();
    if !e.result.detail.is_empty() {
        title.push_str(&format!(" — {}", first_line(&e.result.detail, 160)));
    }
    html! { span class={ "badge o-" (e.outcome.slug()) } title=(title) { (e.outcome.name()) } }
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
