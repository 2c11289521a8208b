//! The suite's power, measured: an inventory of every trace a writer
//! leaves in a file and every rule a reader resolves by, each with a
//! plausible bug of an independent implementation ([`writer`],
//! [`reader`]), and the cases whose trials would fail on it.
//!
//! A writer bug is the file a conforming writer wrote for a round-trip
//! case, edited into the file the bug would have written; it is caught
//! when the harness's inspection (its own reading of the file, with the
//! fixture, as a write trial runs it) finds something under a clause of
//! the text. Whether `harness inspect FILE` alone (no fixture) catches it
//! is measured too. A reader bug is the answer a conforming reader gives
//! for a file a read trial hands out (the reference's file, a golden file,
//! a read-accept recipe's file), changed as the bug would change it; it is
//! caught when the judge finds a difference. A reader bug that lets a
//! malformed file through is caught by a read-refusal case whose recipe's
//! file has the shape it reads. Only trials of cases that
//! rest on the text count: they are what makes an implementation
//! non-conforming.
//!
//! `harness power` prints the inventory; `docs/power.md` holds it
//! (checked by `harness/tests/integration/power.rs`, which also fails when
//! a trace has no check or a bug fewer than two catching cases).

pub mod image;
pub mod reader;
mod shapes;
pub mod writer;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use crate::adapter::{Implementation, Outcome};
use crate::inspect::inspect_file;
use crate::judge;
use crate::runner::{build_recipe, charged, expected_file, remove_file_and_lock, Expect};
use crate::suite::{Basis, Kind, Layout, SpecMap};
use image::Image;
use reader::Stored;

/// The families of traces a writer leaves in a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Trace {
    /// Which keys hold what (`meta`, `index`, `ff`, `r`/`s`/`f` + u64).
    KeyTable,
    /// The members of `meta`.
    Meta,
    /// The index's columns, the binding's and the collection's own.
    Index,
    /// A frame's header members and its bytes.
    Header,
    /// Per-step keys and fills.
    PerStep,
    /// Where `step`, `time`, `box` and block updates are written.
    Placement,
    /// A system frame's `meta_types`.
    MetaTypes,
    /// Where precisions are stated, and the values they round.
    Precision,
    /// Validity masks.
    Mask,
    /// Valid input a writer must take (not a trace: a refusal of it fails).
    Accepts,
}

impl Trace {
    /// Every family, in table order.
    pub const ALL: [Trace; 10] = [
        Trace::KeyTable,
        Trace::Meta,
        Trace::Index,
        Trace::Header,
        Trace::PerStep,
        Trace::Placement,
        Trace::MetaTypes,
        Trace::Precision,
        Trace::Mask,
        Trace::Accepts,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Trace::KeyTable => "key table",
            Trace::Meta => "meta members",
            Trace::Index => "index columns",
            Trace::Header => "frame headers and bytes",
            Trace::PerStep => "per-step keys and fills",
            Trace::Placement => "step, time, box and update placement",
            Trace::MetaTypes => "meta_types",
            Trace::Precision => "precision",
            Trace::Mask => "validity masks",
            Trace::Accepts => "valid input refused",
        }
    }
}

/// One case whose trial catches a bug.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Catch {
    /// The case id.
    pub case: String,
    /// The tier of the case's trials.
    pub basis: Basis,
    /// The clauses the inspection's findings name (empty for a reader bug:
    /// the judge's differences name none).
    pub clauses: Vec<String>,
    /// A writer bug: `harness inspect FILE` without the fixture catches it too.
    pub without_fixture: bool,
}

impl Catch {
    /// A trial failed by a refusal of a valid collection or file.
    fn refused(case: &str, basis: Basis) -> Catch {
        Catch {
            case: case.to_string(),
            basis,
            clauses: Vec::new(),
            without_fixture: true,
        }
    }
}

/// One bug, measured over the suite.
#[derive(Clone, Debug)]
pub struct Measured {
    /// The bug's id.
    pub id: &'static str,
    /// Its trace family (writers) or rule (readers).
    pub family: &'static str,
    /// The clauses it breaks, the first the nearest.
    pub clauses: &'static [&'static str],
    /// What the buggy implementation does.
    pub what: &'static str,
    /// A writer bug the file alone shows.
    pub file_determines: bool,
    /// The cases whose trials catch it, where it shows.
    pub caught: Vec<Catch>,
    /// The cases where it shows and nothing catches it.
    pub missed: Vec<String>,
}

impl Measured {
    /// The distinct cases, resting on the text, whose trials catch it.
    pub fn spec_cases(&self) -> BTreeSet<&str> {
        self.caught
            .iter()
            .filter(|c| c.basis == Basis::Spec)
            .map(|c| c.case.as_str())
            .collect()
    }
}

/// Every writer and reader bug, measured.
#[derive(Clone, Debug)]
pub struct Inventory {
    /// Writer bugs, in catalog order.
    pub writers: Vec<Measured>,
    /// Reader bugs, in catalog order.
    pub readers: Vec<Measured>,
}

/// The fewest cases resting on the text that must catch each bug, and
/// that must fail on a violation of each `must` clause of the text.
pub const MIN_CATCHING_CASES: usize = 2;

/// The lines of `docs/power.md` between which [`Inventory::markdown`] stands.
pub const DOCS_BEGIN: &str = "<!-- harness power: begin (generated; `cargo run --release -p harness -- power --root . --docs docs/power.md`) -->";
/// See [`DOCS_BEGIN`].
pub const DOCS_END: &str = "<!-- harness power: end -->";

/// `doc` with the text between [`DOCS_BEGIN`] and [`DOCS_END`] replaced by
/// `table`; `None` when the markers are missing.
pub fn with_table(doc: &str, table: &str) -> Option<String> {
    let start = doc.find(DOCS_BEGIN)? + DOCS_BEGIN.len();
    let end = doc[start..].find(DOCS_END)? + start;
    Some(format!("{}\n{table}{}", &doc[..start], &doc[end..]))
}

/// Runs every bug of both catalogs over the suites of `layout`, the files
/// written by `reference` (through the trait, as any writer), in `workdir`.
pub fn measure(
    layout: &Layout,
    spec: &SpecMap,
    reference: &mut dyn Implementation,
    workdir: &Path,
) -> Result<Inventory, String> {
    std::fs::create_dir_all(workdir).map_err(|e| format!("{}: {e}", workdir.display()))?;
    let writers = writer::catalog();
    let readers = reader::catalog();
    let mut inventory = Inventory {
        writers: writers
            .iter()
            .map(|b| Measured {
                id: b.id,
                family: b.trace.name(),
                clauses: b.clauses,
                what: b.what,
                file_determines: b.file_determines,
                caught: Vec::new(),
                missed: Vec::new(),
            })
            .collect(),
        readers: readers
            .iter()
            .map(|b| Measured {
                id: b.id,
                family: b.rule,
                clauses: b.clauses,
                what: b.what,
                file_determines: false,
                caught: Vec::new(),
                missed: Vec::new(),
            })
            .collect(),
    };
    let base = workdir.join("base.mrec.lmdb");
    let scratch = workdir.join("bug.mrec.lmdb");
    for suite in layout.suites()? {
        for case in &suite.cases {
            let basis = case.basis(spec);
            let fixture_name = case.fixture.as_deref().unwrap_or_default();
            let (image, expect) = match case.kind {
                Kind::RoundTrip => {
                    let fixture = layout.fixture(fixture_name)?;
                    remove_file_and_lock(&base);
                    match reference.write(&fixture, &base) {
                        Outcome::Done(()) => {}
                        other => {
                            return Err(format!(
                                "{}: the reference did not write: {other:?}",
                                case.id
                            ))
                        }
                    }
                    let image = Image::read(&base)?;
                    let expected = judge::expected_logical(&fixture).map_err(|e| e.to_string())?;
                    let expected = expected_file(&fixture, &expected);
                    let clean: Vec<_> = inspect_file(&base, Some(&expected))
                        .into_iter()
                        .filter(|f| charged(f, case, spec))
                        .collect();
                    if !clean.is_empty() {
                        return Err(format!(
                            "{}: the conforming file has findings: {clean:?}",
                            case.id
                        ));
                    }
                    for (bug, row) in writers.iter().zip(&mut inventory.writers) {
                        let mut buggy = image.clone();
                        let shows = match bug.effect {
                            writer::Effect::Edit(edit) => edit(&mut buggy),
                            writer::Effect::EditGiven(edit) => edit(&mut buggy, &fixture),
                            writer::Effect::Refuses(shape) => {
                                // A refused valid collection fails the trial
                                // whatever else holds.
                                if shape(&image, &fixture) {
                                    row.caught.push(Catch::refused(&case.id, basis));
                                }
                                continue;
                            }
                        };
                        if !shows {
                            continue;
                        }
                        buggy.write(&scratch)?;
                        let spec_findings = |e: Option<&crate::inspect::Expected>| -> Vec<String> {
                            inspect_file(&scratch, e)
                                .into_iter()
                                .filter(|f| charged(f, case, spec))
                                .map(|f| f.clause)
                                .collect::<BTreeSet<_>>()
                                .into_iter()
                                .collect()
                        };
                        let clauses = spec_findings(Some(&expected));
                        if clauses.is_empty() {
                            row.missed.push(case.id.clone());
                        } else {
                            row.caught.push(Catch {
                                case: case.id.clone(),
                                basis,
                                clauses,
                                without_fixture: !spec_findings(None).is_empty(),
                            });
                        }
                    }
                    (image, Expect::Written)
                }
                Kind::ReadAccept => {
                    remove_file_and_lock(&base);
                    build_recipe(case, layout, reference, &base)?;
                    (Image::read(&base)?, Expect::Stored)
                }
                Kind::ReadRefusal => {
                    // Only a bug that lets a malformed file through shows
                    // here; a file that is not one LMDB file shows none.
                    remove_file_and_lock(&base);
                    build_recipe(case, layout, reference, &base)?;
                    let Ok(image) = Image::read(&base) else {
                        continue;
                    };
                    for (bug, row) in readers.iter().zip(&mut inventory.readers) {
                        if let reader::Effect::Accepts(shape) = bug.effect {
                            if shape(&image) {
                                row.caught.push(Catch::refused(&case.id, basis));
                            }
                        }
                    }
                    continue;
                }
                _ => continue,
            };
            let fixture = layout.fixture(fixture_name)?;
            let mut read_files = vec![image];
            if case.kind == Kind::RoundTrip && layout.has_golden(&case.id) {
                remove_file_and_lock(&base);
                layout.copy_golden(&case.id, &base)?;
                read_files.push(Image::read(&base)?);
            }
            for file in read_files {
                let stored = Stored::of(&file);
                let conforming = match expect {
                    Expect::Written => judge::expected_logical(&fixture),
                    Expect::Stored => judge::stored_logical(&fixture),
                }
                .map_err(|e| e.to_string())?;
                let conforming_text = conforming.to_string();
                for (bug, row) in readers.iter().zip(&mut inventory.readers) {
                    if row.caught.iter().any(|c| c.case == case.id) {
                        continue;
                    }
                    let answer = match bug.effect {
                        reader::Effect::Answer(answer) => answer(&conforming, &stored),
                        reader::Effect::Refuses(shape) => {
                            if shape(&file, &stored) {
                                row.caught.push(Catch::refused(&case.id, basis));
                            }
                            continue;
                        }
                        reader::Effect::Accepts(_) => continue,
                    };
                    // By text: `Value`'s equality takes -0.0 for 0.0.
                    if serde_json::to_string(&answer).unwrap_or_default() == conforming_text {
                        continue;
                    }
                    let compared = match expect {
                        Expect::Written => judge::compare(&fixture, &answer),
                        Expect::Stored => judge::compare_stored(&fixture, &answer),
                    };
                    match compared {
                        Ok(d) if d.is_empty() => row.missed.push(case.id.clone()),
                        _ => row.caught.push(Catch {
                            case: case.id.clone(),
                            basis,
                            clauses: Vec::new(),
                            without_fixture: false,
                        }),
                    }
                }
            }
        }
    }
    remove_file_and_lock(&base);
    remove_file_and_lock(&scratch);
    Ok(inventory)
}

impl Inventory {
    /// What breaks the inventory's rules: a family of traces without a
    /// bug, a bug under a clause the spec map lacks, a bug some case shows
    /// and nothing catches, a bug fewer than [`MIN_CATCHING_CASES`] cases
    /// resting on the text catch, and a writer bug the file determines
    /// that `harness inspect FILE` misses.
    pub fn problems(&self, spec: &SpecMap) -> Vec<String> {
        let mut out = Vec::new();
        let writer_families: BTreeSet<&str> = self.writers.iter().map(|w| w.family).collect();
        for t in Trace::ALL {
            if !writer_families.contains(t.name()) {
                out.push(format!("trace family `{}` has no writer bug", t.name()));
            }
        }
        for (side, rows) in [("writer", &self.writers), ("reader", &self.readers)] {
            for m in rows.iter() {
                for clause in m.clauses {
                    match spec.get(*clause) {
                        None => out.push(format!("{side} bug {}: clause `{clause}` is not in the spec map", m.id)),
                        Some(c) if c.is_decision() => out.push(format!(
                            "{side} bug {}: clause `{clause}` is a decision; a bug breaks a sentence of the text",
                            m.id
                        )),
                        Some(_) => {}
                    }
                }
                if !m.missed.is_empty() {
                    out.push(format!(
                        "{side} bug {} shows in {} and no trial catches it there",
                        m.id,
                        m.missed.join(", ")
                    ));
                }
                let cases = m.spec_cases();
                if cases.len() < MIN_CATCHING_CASES {
                    out.push(format!(
                        "{side} bug {} ({}) is caught by {} case(s) resting on the text ({}); at least {MIN_CATCHING_CASES} must catch it",
                        m.id,
                        m.what,
                        cases.len(),
                        cases.into_iter().collect::<Vec<_>>().join(", ")
                    ));
                }
                let blind: Vec<&str> = m
                    .caught
                    .iter()
                    .filter(|c| m.file_determines && !c.without_fixture)
                    .map(|c| c.case.as_str())
                    .collect();
                if !blind.is_empty() {
                    out.push(format!(
                        "{side} bug {}: the file determines it, but `harness inspect FILE` misses it in {}",
                        m.id,
                        blind.join(", ")
                    ));
                }
            }
        }
        out
    }

    /// The inventory as the Markdown of `docs/power.md`.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let cases = |m: &Measured| {
            let all: Vec<&str> = m.spec_cases().into_iter().collect();
            let shown = all
                .iter()
                .take(3)
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ");
            match all.len() {
                0 => "none".to_string(),
                n if n > 3 => format!("{n}: {shown}, ..."),
                n => format!("{n}: {shown}"),
            }
        };
        let clauses = |m: &Measured| {
            m.clauses
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            out,
            "| trace | writer bug | clauses | inspection catches it in | without a fixture |"
        );
        let _ = writeln!(out, "|---|---|---|---|---|");
        for m in &self.writers {
            let alone = if m.caught.iter().all(|c| c.without_fixture) && !m.caught.is_empty() {
                "yes"
            } else if m.caught.iter().any(|c| c.without_fixture) {
                "in some"
            } else {
                "no"
            };
            let _ = writeln!(
                out,
                "| {} | `{}`: {} | {} | {} | {} |",
                m.family,
                m.id,
                m.what,
                clauses(m),
                cases(m),
                alone
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "| reader rule | reader bug | clauses | read trials catch it in |"
        );
        let _ = writeln!(out, "|---|---|---|---|");
        for m in &self.readers {
            let _ = writeln!(
                out,
                "| {} | `{}`: {} | {} | {} |",
                m.family,
                m.id,
                m.what,
                clauses(m),
                cases(m)
            );
        }
        out
    }

    /// For each clause, the cases that would fail on its violation: the
    /// refusal cases that expect it, and the cases whose trials catch a
    /// bug under it (trials resting on the text only).
    pub fn guarding(
        &self,
        suites: &[crate::suite::Suite],
        spec: &SpecMap,
    ) -> BTreeMap<String, BTreeSet<String>> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for case in suites.iter().flat_map(|s| &s.cases) {
            if case.basis(spec) != Basis::Spec {
                continue;
            }
            // A refusal case hands over input that breaks every rule it
            // lists: accepting it violates each.
            if matches!(case.kind, Kind::WriteRefusal | Kind::ReadRefusal) {
                for clause in case.clauses.iter().chain(&case.expect) {
                    out.entry(clause.clone())
                        .or_default()
                        .insert(case.id.clone());
                }
            }
        }
        for m in self.writers.iter().chain(&self.readers) {
            for clause in m.clauses {
                for case in m.spec_cases() {
                    out.entry(clause.to_string())
                        .or_default()
                        .insert(case.to_string());
                }
            }
        }
        out
    }

    /// The `must` clauses of the text (not waived) that fewer than
    /// [`MIN_CATCHING_CASES`] cases would fail on, with those cases.
    pub fn unguarded(
        &self,
        suites: &[crate::suite::Suite],
        spec: &SpecMap,
    ) -> Vec<(String, Vec<String>)> {
        let guarding = self.guarding(suites, spec);
        spec.iter()
            .filter(|(_, c)| {
                !c.is_decision() && c.level == crate::suite::Level::Must && c.waiver.is_none()
            })
            .filter_map(|(id, _)| {
                let cases: Vec<String> = guarding.get(id).into_iter().flatten().cloned().collect();
                (cases.len() < MIN_CATCHING_CASES).then(|| (id.clone(), cases))
            })
            .collect()
    }

    /// The bugs under `clause` and the cases that catch each.
    pub fn catching(&self, clause: &str) -> Vec<&Measured> {
        self.writers
            .iter()
            .chain(&self.readers)
            .filter(|m| m.clauses.contains(&clause))
            .collect()
    }
}
