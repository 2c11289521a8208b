//! Writer × reader interop: every implementation that writes, read back by
//! every implementation that reads.
//!
//! For each positive case (a round trip with both a write and a read
//! direction), each writer writes the fixture once; the harness inspects the
//! file with its own code ([`inspect_file`]); then each reader reads that
//! file and the judge compares what it hands back with the fixture. The
//! trial `module::case::interop::W->R` passes when W's file passes the
//! inspection and R reads it back as the fixture's content.
//!
//! The two phases (all writes, then all reads) each run one thread per
//! implementation, so a slow or given-up adapter holds up only its own
//! column or row.

use crate::adapter::{Implementation, Outcome};
use crate::runner::{
    inspect_written, read_and_judge, remove_file_and_lock, Decided, Expect, Verdict,
};
use crate::suite::{Case, Direction, Kind, Layout, SpecMap, Suite};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// One writer × reader trial.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct InteropResult {
    /// `module::case::interop::writer->reader`.
    pub trial: String,
    /// The suite module.
    pub module: String,
    /// The case id.
    pub case: String,
    /// The case title.
    pub title: String,
    /// The implementation that wrote the file.
    pub writer: String,
    /// The implementation that read it.
    pub reader: String,
    /// Clauses the case covers.
    pub clauses: Vec<String>,
    /// The verdict: pass, fail (the file or what was read back is wrong),
    /// error, or unsupported (the writer does not write or the reader does
    /// not read).
    pub verdict: Verdict,
    /// Why, when it is not a pass; says which side failed.
    pub detail: String,
}

/// The name of the interop trial of `case`, written by `writer` and read by `reader`.
pub fn interop_trial_name(module: &str, case: &str, writer: &str, reader: &str) -> String {
    format!("{module}::{case}::interop::{writer}->{reader}")
}

/// The cases interop runs: round trips with both a write and a read direction.
pub fn interop_cases(layout: &Layout) -> Result<Vec<(Suite, Case)>, String> {
    let mut out = Vec::new();
    for suite in layout.suites()? {
        for case in &suite.cases {
            let directions = case.directions(layout);
            if case.kind == Kind::RoundTrip
                && directions.contains(&Direction::Write)
                && directions.contains(&Direction::Read)
            {
                out.push((suite.clone(), case.clone()));
            }
        }
    }
    Ok(out)
}

/// What one writer made of one case: the file, ready for the readers, or
/// why there is none to read.
#[derive(Clone, Debug)]
pub struct Written {
    /// `module::case`.
    pub case: String,
    /// The file, when the writer wrote it and the inspection found nothing;
    /// `None` when no selected trial reads the case.
    pub file: Option<Result<PathBuf, (Verdict, String)>>,
}

/// Phase one: `writer` writes each case that `wanted` marks into `dir`,
/// each file inspected.
pub fn write_cases(
    layout: &Layout,
    cases: &[(Suite, Case)],
    wanted: &[bool],
    writer: &mut dyn Implementation,
    dir: &Path,
) -> Vec<Written> {
    let _ = std::fs::create_dir_all(dir);
    let spec = layout.spec_map().unwrap_or_default();
    let name = writer.describe().name.clone();
    let writes = writer.describe().capabilities.write;
    cases
        .iter()
        .zip(wanted)
        .map(|((suite, case), wanted)| {
            let file = if !wanted {
                None
            } else if writes {
                writer.begin_trial(&interop_trial_name(&suite.module, &case.id, &name, "*"));
                Some(write_one(
                    layout,
                    &spec,
                    case,
                    writer,
                    &dir.join(format!("{}.mrec.lmdb", case.id)),
                ))
            } else {
                Some(Err((
                    Verdict::Unsupported,
                    format!("{name} does not write"),
                )))
            };
            Written {
                case: format!("{}::{}", suite.module, case.id),
                file,
            }
        })
        .collect()
}

fn write_one(
    layout: &Layout,
    spec: &SpecMap,
    case: &Case,
    writer: &mut dyn Implementation,
    path: &Path,
) -> Result<PathBuf, (Verdict, String)> {
    remove_file_and_lock(path);
    let fixture = fixture_of(layout, case).map_err(|e| (Verdict::Error, e))?;
    match writer.write(&fixture, path) {
        Outcome::Done(()) => {}
        Outcome::Refused { message, .. } => {
            return Err((
                Verdict::Fail,
                format!("the writer refused a valid collection: {message}"),
            ))
        }
        Outcome::Unsupported => {
            return Err((Verdict::Unsupported, "the writer does not write".into()))
        }
        Outcome::Error(e) => return Err((Verdict::Error, format!("the writer: {e}"))),
    }
    inspect_written(&fixture, path, case, spec)
        .map_err(|(verdict, detail)| (verdict, format!("the writer's {detail}")))?;
    Ok(path.to_path_buf())
}

/// Phase two: `reader` reads the files of every writer (`(name, files)`)
/// that `selected(module, case, writer)` takes; `progress` sees each result.
/// A reader reads a copy of each file, so that readers running at the same
/// time never share one file's lock.
pub fn read_cases(
    layout: &Layout,
    cases: &[(Suite, Case)],
    reader: &mut dyn Implementation,
    writers: &[(String, Vec<Written>)],
    selected: &dyn Fn(&str, &str, &str) -> bool,
    scratch: &Path,
    progress: &dyn Fn(&InteropResult),
) -> Vec<InteropResult> {
    let _ = std::fs::create_dir_all(scratch);
    let name = reader.describe().name.clone();
    let reads = reader.describe().capabilities.read;
    let mut out = Vec::new();
    for (writer, files) in writers {
        for ((suite, case), written) in cases.iter().zip(files) {
            let Some(file) = &written.file else { continue };
            if !selected(&suite.module, &case.id, writer) {
                continue;
            }
            let trial = interop_trial_name(&suite.module, &case.id, writer, &name);
            let (verdict, detail) = match file {
                Err((verdict, why)) => (*verdict, why.clone()),
                Ok(_) if !reads => (Verdict::Unsupported, format!("{name} does not read")),
                Ok(file) => {
                    reader.begin_trial(&trial);
                    let copy = scratch.join(format!("{}-{}.mrec.lmdb", writer, case.id));
                    remove_file_and_lock(&copy);
                    let decided = match std::fs::copy(file, &copy) {
                        Ok(_) => read_one(layout, case, reader, &copy),
                        Err(e) => (
                            Verdict::Error,
                            format!("harness: cannot copy the written file: {e}"),
                            None,
                        ),
                    };
                    remove_file_and_lock(&copy);
                    (decided.0, decided.1)
                }
            };
            let result = InteropResult {
                trial,
                module: suite.module.clone(),
                case: case.id.clone(),
                title: case.title.clone(),
                writer: writer.clone(),
                reader: name.clone(),
                clauses: case.clauses.clone(),
                verdict,
                detail,
            };
            progress(&result);
            out.push(result);
        }
    }
    out
}

fn read_one(layout: &Layout, case: &Case, reader: &mut dyn Implementation, path: &Path) -> Decided {
    match fixture_of(layout, case) {
        Ok(fixture) => read_and_judge(&fixture, Expect::Written, reader, path),
        Err(e) => (Verdict::Error, e, None),
    }
}

fn fixture_of(layout: &Layout, case: &Case) -> Result<Value, String> {
    let name = case
        .fixture
        .as_deref()
        .ok_or("harness: the case has no fixture")?;
    layout.fixture(name).map_err(|e| format!("harness: {e}"))
}
