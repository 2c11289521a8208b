//! Declarative suites: `suites/<module>.toml`, one case per `[[case]]`.
//!
//! A case names the clauses it covers, its kind, its fixture (a canonical-JSON
//! collection under `fixtures/`) or a recipe for a malformed file, and for a
//! refusal the clause the refusal must name.

use crate::recipe::Recipe;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// What a case checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The collection survives writing and reading unchanged.
    RoundTrip,
    /// A writer must refuse the fixture.
    WriteRefusal,
    /// A reader must refuse the file a recipe builds.
    ReadRefusal,
    /// A reader must read the file a recipe builds (conforming, but not
    /// what the reference writes) as the fixture's content.
    ReadAccept,
}

/// One way of running a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// The implementation writes; the harness inspects the file, the
    /// reference reads it back and the judge compares.
    Write,
    /// The reference writes (or a recipe builds the file); the implementation reads.
    Read,
    /// The implementation reads the committed golden file of the case.
    Golden,
}

impl Direction {
    /// The name used in trial names and reports.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Write => "write",
            Direction::Read => "read",
            Direction::Golden => "golden",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A case as written in a suite file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// Stable id, never reused.
    pub id: String,
    /// What the case shows, in a line.
    pub title: String,
    /// Clause ids (keys of `spec-map.toml`) the case covers.
    pub clauses: Vec<String>,
    /// Round trip or refusal.
    pub kind: Kind,
    /// Canonical-JSON collection, relative to `fixtures/`.
    #[serde(default)]
    pub fixture: Option<String>,
    /// A malformed-file recipe (read refusals).
    #[serde(default)]
    pub recipe: Option<Recipe>,
    /// The clause a refusal must name.
    #[serde(default)]
    pub expect: Option<String>,
    /// Other clauses a refusal may name instead, where the file or the
    /// collection breaks several rules at once and the texts do not say
    /// which one a refusal names (a buffer past the value whose size also
    /// overflows, say).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also_accept: Vec<String>,
    /// Directions to run; defaults by kind.
    #[serde(default)]
    pub directions: Option<Vec<Direction>>,
}

impl Case {
    /// The directions this case runs in (golden only where `layout` has a
    /// golden file for it).
    pub fn directions(&self, layout: &Layout) -> Vec<Direction> {
        let mut dirs = self.directions.clone().unwrap_or_else(|| match self.kind {
            Kind::RoundTrip => vec![Direction::Write, Direction::Read, Direction::Golden],
            Kind::WriteRefusal => vec![Direction::Write],
            Kind::ReadRefusal | Kind::ReadAccept => vec![Direction::Read],
        });
        if !layout.has_golden(&self.id) {
            dirs.retain(|d| *d != Direction::Golden);
        }
        dirs
    }
}

/// A suite file.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// Module name (`collection`), the first part of a trial name.
    pub module: String,
    /// Version of the suite, bumped when cases change meaning.
    pub version: u32,
    /// The cases.
    #[serde(rename = "case", default)]
    pub cases: Vec<Case>,
}

/// An entry of `spec-map.toml`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clause {
    /// Spec file name and section heading.
    pub source: String,
    /// `must`, `should` or `may`.
    pub level: Level,
    /// What the statement requires, in our words.
    pub text: String,
    /// Why no case covers it, when none does.
    #[serde(default)]
    pub waiver: Option<String>,
    /// What the rule rests on: the spec's text, or this project's reading
    /// where the text is silent or ambiguous.
    #[serde(default)]
    pub basis: Basis,
    /// Why the rule is a decision (required with `basis = "decision"`, and
    /// only then).
    #[serde(default)]
    pub reason: Option<String>,
    /// The sentence(s) of `source` the rule rests on, verbatim (required
    /// with `basis = "spec"`; for a decision, the nearest text, which
    /// leaves the point open).
    #[serde(default)]
    pub quote: Option<String>,
    /// For a decision: text that reads otherwise, quoted with its source.
    #[serde(default)]
    pub contrary: Option<Quoted>,
}

/// A sentence quoted from a spec text, with where it stands.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Quoted {
    /// The text and section (`ragged.md @ f6ef43bf > Sparse updates`).
    pub source: String,
    /// The sentence(s), verbatim.
    pub quote: String,
}

/// What a clause rests on, and so the tier of every trial of a case that
/// lists it: a case lists clauses of one basis only (the lint), so that a
/// trial rests either on the text or on a decision, never on both.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Basis {
    /// The spec states the rule.
    #[default]
    Spec,
    /// The spec is silent or ambiguous; the rule is this project's reading
    /// (as WPT marks tentative tests). A failure here may be a defensible
    /// reading of the spec rather than a defect.
    Decision,
}

impl Basis {
    /// `spec` or `decision`, as in `spec-map.toml` and reports.
    pub fn name(self) -> &'static str {
        match self {
            Basis::Spec => "spec",
            Basis::Decision => "decision",
        }
    }

    /// The basis of a case that lists `clauses`: a decision when any of
    /// them is one (the lint refuses a case that mixes the two).
    pub fn of_clauses<'a>(clauses: impl IntoIterator<Item = &'a String>, spec: &SpecMap) -> Basis {
        let decision = clauses
            .into_iter()
            .any(|id| spec.get(id).is_some_and(Clause::is_decision));
        if decision {
            Basis::Decision
        } else {
            Basis::Spec
        }
    }
}

impl Clause {
    /// Whether the clause rests on this project's reading of the spec.
    pub fn is_decision(&self) -> bool {
        self.basis == Basis::Decision
    }
}

/// Whether `source` names a text a clause may rest on: a seed (`000 LMDB
/// binding`, `001 Collection`) or a chapter of the v1 era with its commit
/// (`ragged.md @ f6ef43bf`), each optionally followed by `> section`;
/// several such sources are separated by `; `.
pub fn is_citable_source(source: &str) -> bool {
    source.split("; ").all(|one| {
        let text = one.split(" > ").next().unwrap_or("").trim();
        if text == "000 LMDB binding" || text == "001 Collection" {
            return true;
        }
        match text.split_once(" @ ") {
            Some((chapter, commit)) => {
                chapter.ends_with(".md")
                    && !chapter.contains(' ')
                    && commit.len() == 8
                    && commit
                        .bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            }
            None => false,
        }
    })
}

impl Case {
    /// The case's tier: whether its trials rest on the text or on a decision.
    pub fn basis(&self, spec: &SpecMap) -> Basis {
        Basis::of_clauses(self.clauses.iter().chain(self.expect.iter()), spec)
    }
}

/// Normative strength of a clause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Required.
    Must,
    /// Recommended.
    Should,
    /// Allowed.
    May,
}

/// `spec-map.toml`: clause id -> clause.
pub type SpecMap = BTreeMap<String, Clause>;

/// Where the suites, the fixtures and the spec map come from: the data
/// embedded in this binary at build time ([`crate::data`]), or a tree on
/// disk holding `suites/`, `fixtures/` and `spec-map.toml` (`--root`, and
/// the repository's own tests).
#[derive(Clone, Debug)]
pub struct Layout {
    /// The tree's root; `None`: the embedded data.
    root: Option<PathBuf>,
}

impl Layout {
    /// The data embedded in this binary: what it judges with when no
    /// `--root` is given, wherever it runs.
    pub fn embedded() -> Layout {
        Layout { root: None }
    }

    /// The tree of the repository the harness crate was compiled in: the
    /// repository's own tests read it; the `harness` binary never does
    /// (it reads [`Layout::embedded`] unless given `--root`).
    pub fn repository() -> Layout {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .unwrap_or(Path::new("."))
            .to_path_buf();
        Layout::at(&root)
    }

    /// The tree under `root`.
    pub fn at(root: &Path) -> Layout {
        Layout {
            root: Some(root.to_path_buf()),
        }
    }

    /// The tree's root, for a layout read from disk.
    pub fn root(&self) -> Option<&Path> {
        self.root.as_deref()
    }

    /// Where the data comes from, for messages.
    pub fn describe(&self) -> String {
        match &self.root {
            Some(root) => format!("the tree at {}", root.display()),
            None => format!(
                "the data embedded in this binary (digest {})",
                crate::data::digest()
            ),
        }
    }

    /// The bytes of the file at `rel` (`/`-separated, from the root). An
    /// error names the file.
    fn read(&self, rel: &str) -> Result<Cow<'static, [u8]>, String> {
        match &self.root {
            Some(root) => {
                let path = root.join(rel);
                std::fs::read(&path)
                    .map(Cow::Owned)
                    .map_err(|e| format!("{}: {e}", path.display()))
            }
            None => crate::data::file(rel)
                .map(Cow::Borrowed)
                .ok_or_else(|| format!("{rel}: not in the data embedded in this binary")),
        }
    }

    fn read_text(&self, rel: &str) -> Result<String, String> {
        let bytes = self.read(rel)?;
        String::from_utf8(bytes.into_owned()).map_err(|e| format!("{}: {e}", self.name(rel)))
    }

    /// How a file is named in messages: its path on disk, or its path in
    /// the embedded data.
    fn name(&self, rel: &str) -> String {
        match &self.root {
            Some(root) => root.join(rel).display().to_string(),
            None => rel.to_owned(),
        }
    }

    fn exists(&self, rel: &str) -> bool {
        match &self.root {
            Some(root) => root.join(rel).is_file(),
            None => crate::data::file(rel).is_some(),
        }
    }

    /// The files under `dir` (from the root) whose names end in `suffix`,
    /// as paths relative to `dir`, sorted; `deep`: in subdirectories too.
    fn list(&self, dir: &str, suffix: &str, deep: bool) -> Result<Vec<String>, String> {
        let mut names: Vec<String> = match &self.root {
            Some(root) => {
                let base = root.join(dir);
                if !base.is_dir() {
                    return Err(format!("{}: not a directory", base.display()));
                }
                walkdir::WalkDir::new(&base)
                    .max_depth(if deep { usize::MAX } else { 1 })
                    .into_iter()
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_file())
                    .filter_map(|e| {
                        let rel = e.path().strip_prefix(&base).ok()?;
                        let parts: Vec<String> = rel
                            .components()
                            .map(|c| c.as_os_str().to_string_lossy().into_owned())
                            .collect();
                        Some(parts.join("/"))
                    })
                    .collect()
            }
            None => crate::data::files_under(&format!("{dir}/"))
                .map(|(path, _)| path[dir.len() + 1..].to_owned())
                .filter(|rel| deep || !rel.contains('/'))
                .collect(),
        };
        names.retain(|n| n.ends_with(suffix));
        names.sort();
        Ok(names)
    }

    /// Loads every suite file, sorted by module.
    pub fn suites(&self) -> Result<Vec<Suite>, String> {
        let mut suites = Vec::new();
        for name in self.list("suites", ".toml", false)? {
            let rel = format!("suites/{name}");
            let text = self.read_text(&rel)?;
            let suite: Suite =
                toml::from_str(&text).map_err(|e| format!("{}: {e}", self.name(&rel)))?;
            suites.push(suite);
        }
        Ok(suites)
    }

    /// Loads `spec-map.toml`.
    pub fn spec_map(&self) -> Result<SpecMap, String> {
        let rel = "spec-map.toml";
        let text = self.read_text(rel)?;
        #[derive(Deserialize)]
        struct File {
            clause: SpecMap,
        }
        let file: File = toml::from_str(&text).map_err(|e| format!("{}: {e}", self.name(rel)))?;
        for (id, clause) in &file.clause {
            let reason = clause.reason.as_deref().map(str::trim);
            match (clause.basis, reason) {
                (Basis::Decision, None | Some("")) => {
                    return Err(format!(
                        "{}: clause `{id}` has basis = \"decision\" and no `reason`",
                        self.name(rel)
                    ))
                }
                (Basis::Spec, Some(_)) => {
                    return Err(format!(
                        "{}: clause `{id}` gives a `reason` but not basis = \"decision\"",
                        self.name(rel)
                    ))
                }
                _ => {}
            }
        }
        Ok(file.clause)
    }

    /// Reads a fixture (`name` relative to `fixtures/`).
    pub fn fixture(&self, name: &str) -> Result<serde_json::Value, String> {
        let rel = format!("fixtures/{name}");
        let text = self.read_text(&rel)?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", self.name(&rel)))
    }

    /// Whether the fixture `name` (relative to `fixtures/`) exists.
    pub fn fixture_exists(&self, name: &str) -> bool {
        self.exists(&format!("fixtures/{name}"))
    }

    /// Every canonical-JSON fixture, relative to `fixtures/`, sorted; the
    /// golden files' dumps left out.
    pub fn fixture_names(&self) -> Result<Vec<String>, String> {
        let mut names = self.list("fixtures", ".json", true)?;
        names.retain(|n| !n.starts_with("golden/"));
        Ok(names)
    }

    /// Where case `id`'s golden file is, from the root.
    pub fn golden_name(id: &str) -> String {
        format!("fixtures/golden/{id}.mrec.lmdb")
    }

    /// Whether case `id` has a golden file.
    pub fn has_golden(&self, id: &str) -> bool {
        self.exists(&Layout::golden_name(id))
    }

    /// Writes a copy of case `id`'s golden file at `dest` (readers open a
    /// copy: opening may create a lock file beside the file, and the
    /// embedded data is not on disk at all).
    pub fn copy_golden(&self, id: &str, dest: &Path) -> Result<(), String> {
        let bytes = self.read(&Layout::golden_name(id))?;
        std::fs::write(dest, bytes).map_err(|e| format!("{}: {e}", dest.display()))
    }
}

fn join(ids: &[&String]) -> String {
    ids.iter()
        .map(|id| id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Problems with the spec map's entries: a clause that claims the text
/// (`basis = "spec"`) must cite a seed or a chapter of the v1 era with its
/// commit and quote the sentence it rests on; a decision's contrary text
/// is quoted the same way.
pub fn lint_spec_map(map: &SpecMap) -> Vec<String> {
    let mut problems = Vec::new();
    for (id, clause) in map {
        let quoted = clause
            .quote
            .as_deref()
            .is_some_and(|q| !q.trim().is_empty());
        if clause.basis == Basis::Spec {
            if !is_citable_source(&clause.source) {
                problems.push(format!(
                    "spec map: `{id}` rests on the text but its source `{}` is neither a seed (`000 LMDB binding`, `001 Collection`) nor a v1 chapter with its commit (`ragged.md @ f6ef43bf`)",
                    clause.source
                ));
            }
            if !quoted {
                problems.push(format!(
                    "spec map: `{id}` rests on the text but quotes no sentence (`quote`)"
                ));
            }
        }
        if let Some(contrary) = &clause.contrary {
            if clause.basis != Basis::Decision {
                problems.push(format!(
                    "spec map: `{id}` gives a `contrary` text but is not a decision"
                ));
            }
            if !is_citable_source(&contrary.source) || contrary.quote.trim().is_empty() {
                problems.push(format!(
                    "spec map: `{id}`'s contrary text needs a citable source and a quote"
                ));
            }
        }
    }
    problems
}

/// Problems with the suites themselves: duplicate ids, unknown clauses,
/// missing or unused fixtures, malformed cases. Empty = clean.
pub fn lint(layout: &Layout) -> Vec<String> {
    let mut problems = Vec::new();
    let suites = match layout.suites() {
        Ok(s) => s,
        Err(e) => return vec![e],
    };
    let map = match layout.spec_map() {
        Ok(m) => m,
        Err(e) => return vec![e],
    };
    problems.extend(lint_spec_map(&map));
    let mut ids = BTreeSet::new();
    let mut used = BTreeSet::new();
    for suite in &suites {
        for case in &suite.cases {
            let name = format!("{}::{}", suite.module, case.id);
            if !ids.insert(name.clone()) {
                problems.push(format!("{name}: duplicate case id"));
            }
            if case.clauses.is_empty() {
                problems.push(format!("{name}: covers no clause"));
            }
            for clause in case
                .clauses
                .iter()
                .chain(case.expect.iter())
                .chain(&case.also_accept)
            {
                if !map.contains_key(clause) {
                    problems.push(format!("{name}: unknown clause id `{clause}`"));
                }
            }
            if !case.also_accept.is_empty() && case.expect.is_none() {
                problems.push(format!("{name}: `also_accept` without `expect`"));
            }

            match (case.kind, &case.fixture, &case.recipe, &case.expect) {
                (Kind::RoundTrip, Some(_), None, None) | (Kind::WriteRefusal, Some(_), None, Some(_)) => {}
                (Kind::ReadRefusal, None, Some(_), Some(_)) | (Kind::ReadAccept, Some(_), Some(_), None) => {}
                _ => problems.push(format!(
                    "{name}: a round trip has a fixture, a write refusal a fixture and `expect`, a read refusal a recipe and `expect`, a read acceptance a fixture and a recipe"
                )),
            }
            let mut fixtures: Vec<&String> = case.fixture.iter().collect();
            if let Some(crate::recipe::Base::Fixture(f)) = case.recipe.as_ref().map(|r| &r.base) {
                fixtures.push(f);
            }
            for f in fixtures {
                if !layout.fixture_exists(f) {
                    problems.push(format!("{name}: fixture `{f}` does not exist"));
                }
                used.insert(f.clone());
            }
            let (decided, stated): (Vec<&String>, Vec<&String>) = case
                .clauses
                .iter()
                .filter(|id| map.contains_key(*id))
                .partition(|id| map[*id].is_decision());
            if !decided.is_empty() && !stated.is_empty() {
                problems.push(format!(
                    "{name}: mixes clauses that rest on the text ({}) with decisions ({}): a trial rests on one or the other",
                    join(&stated),
                    join(&decided)
                ));
            }
            if let Some(expect) = &case.expect {
                if !case.clauses.contains(expect) {
                    problems.push(format!(
                        "{name}: `expect` {expect} is not among its clauses"
                    ));
                }
            }
        }
    }
    match layout.fixture_names() {
        Ok(names) => {
            for name in names.into_iter().filter(|n| !used.contains(n)) {
                problems.push(format!("fixture `{name}` is used by no case"));
            }
        }
        Err(e) => problems.push(e),
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(entry: &str) -> Result<SpecMap, String> {
        // One tree per entry: the tests of this module run in parallel.
        let dir = std::env::temp_dir().join(format!(
            "harness-spec-map-{}-{}",
            std::process::id(),
            entry.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let text =
            format!("[clause.\"x.y\"]\nsource = \"s\"\nlevel = \"must\"\ntext = \"t\"\n{entry}\n");
        std::fs::write(dir.join("spec-map.toml"), text).unwrap();
        let loaded = Layout::at(&dir).spec_map();
        let _ = std::fs::remove_dir_all(&dir);
        loaded
    }

    #[test]
    fn a_decision_needs_a_reason_and_a_reason_needs_a_decision() {
        let map = load("basis = \"decision\"\nreason = \"the text is silent\"").unwrap();
        assert!(map["x.y"].is_decision());
        assert!(!load("").unwrap()["x.y"].is_decision());
        let no_reason = load("basis = \"decision\"").unwrap_err();
        assert!(no_reason.contains("no `reason`"), "{no_reason}");
        let blank = load("basis = \"decision\"\nreason = \"  \"").unwrap_err();
        assert!(blank.contains("no `reason`"), "{blank}");
        let stray = load("reason = \"why\"").unwrap_err();
        assert!(stray.contains("not basis"), "{stray}");
        let unknown = load("basis = \"tentative\"").unwrap_err();
        assert!(unknown.contains("tentative"), "{unknown}");
    }
}
