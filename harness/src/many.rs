//! Several implementations in one run, side by side.
//!
//! Each implementation runs its own trials (every direction, the reference
//! on the other side) on a thread of its own, so a slow or given-up adapter
//! holds up only its own results. Then, when two or more implementations
//! take part, the interop phases ([`crate::interop`]): every writer writes
//! every positive case (a thread per writer), then every reader reads every
//! writer's files (a thread per reader).

use crate::adapter::reference::Reference;
use crate::adapter::{Description, Implementation, Outcome};
use crate::interop::{
    interop_cases, interop_trial_name, read_cases, write_cases, InteropResult, Written,
};
use crate::runner::{run_all, TrialResult};
use crate::suite::Layout;
use std::path::Path;

/// An implementation under test that may move to a thread of its own.
pub type Boxed = Box<dyn Implementation + Send>;

/// An implementation under another name (`--adapter NAME=COMMAND`): what
/// reports and interop trial names call it.
pub struct Named {
    inner: Boxed,
    description: Description,
}

impl Named {
    /// `inner`, called `name`.
    pub fn new(name: &str, inner: Boxed) -> Named {
        let mut description = inner.describe().clone();
        description.name = name.to_owned();
        Named { inner, description }
    }
}

impl Implementation for Named {
    fn describe(&self) -> &Description {
        &self.description
    }

    fn write(&mut self, collection: &serde_json::Value, path: &Path) -> Outcome<()> {
        self.inner.write(collection, path)
    }

    fn read(&mut self, path: &Path) -> Outcome<serde_json::Value> {
        self.inner.read(path)
    }

    fn begin_trial(&mut self, trial: &str) {
        self.inner.begin_trial(trial)
    }
}

/// What a run of several implementations found.
pub struct ManyResults {
    /// Each implementation's own trials, in the order given.
    pub own: Vec<(Description, Vec<TrialResult>)>,
    /// The writer × reader trials.
    pub interop: Vec<InteropResult>,
}

/// What progress reports: one implementation's trial, or an interop trial.
pub enum Progress<'a> {
    /// A trial of the named implementation.
    Own(&'a str, &'a TrialResult),
    /// A writer × reader trial.
    Interop(&'a InteropResult),
}

/// Runs every trial whose name contains `filter` against each of `imps`
/// in parallel, then (with `interop` and two or more implementations) the
/// interop trials whose names contain it. `workdir` holds one scratch
/// directory per implementation. `progress` is called from the
/// implementations' threads, one trial at a time.
pub fn run_many(
    layout: &Layout,
    imps: &mut [Boxed],
    workdir: &Path,
    filter: Option<&str>,
    interop: bool,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> Result<ManyResults, String> {
    let own: Vec<Result<(Description, Vec<TrialResult>), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = imps
            .iter_mut()
            .enumerate()
            .map(|(i, imp)| {
                let dir = workdir.join(format!("own-{i}"));
                s.spawn(move || {
                    let description = imp.describe().clone();
                    let mut reference = Reference::new();
                    let results =
                        run_all(layout, imp.as_mut(), &mut reference, &dir, filter, |r| {
                            progress(Progress::Own(&description.name, r))
                        });
                    let _ = std::fs::remove_dir_all(&dir);
                    results.map(|r| (description, r))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("harness: a run thread panicked".into()))
            })
            .collect()
    });
    let own = own.into_iter().collect::<Result<Vec<_>, String>>()?;
    let interop = if interop && imps.len() > 1 {
        run_interop(layout, imps, workdir, filter, progress)?
    } else {
        Vec::new()
    };
    Ok(ManyResults { own, interop })
}

fn run_interop(
    layout: &Layout,
    imps: &mut [Boxed],
    workdir: &Path,
    filter: Option<&str>,
    progress: &(dyn Fn(Progress<'_>) + Sync),
) -> Result<Vec<InteropResult>, String> {
    let cases = interop_cases(layout)?;
    let names: Vec<String> = imps.iter().map(|i| i.describe().name.clone()).collect();
    let selected = |module: &str, case: &str, writer: &str, reader: &str| {
        filter.is_none_or(|f| interop_trial_name(module, case, writer, reader).contains(f))
    };
    // Phase one: each writer writes the cases some selected trial reads.
    let written: Vec<(String, Vec<Written>)> = std::thread::scope(|s| {
        let handles: Vec<_> = imps
            .iter_mut()
            .enumerate()
            .map(|(i, imp)| {
                let (cases, names, selected) = (&cases, &names, &selected);
                let dir = workdir.join(format!("interop-written-{i}"));
                s.spawn(move || {
                    let writer = imp.describe().name.clone();
                    let wanted: Vec<bool> = cases
                        .iter()
                        .map(|(suite, case)| {
                            names
                                .iter()
                                .any(|r| selected(&suite.module, &case.id, &writer, r))
                        })
                        .collect();
                    let files = write_cases(layout, cases, &wanted, imp.as_mut(), &dir);
                    (writer, files)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an interop writer thread panicked"))
            .collect()
    });
    // Phase two: each reader reads the selected files of every writer.
    let results: Vec<Vec<InteropResult>> = std::thread::scope(|s| {
        let handles: Vec<_> = imps
            .iter_mut()
            .enumerate()
            .map(|(i, imp)| {
                let (cases, written, selected) = (&cases, &written, &selected);
                let scratch = workdir.join(format!("interop-read-{i}"));
                s.spawn(move || {
                    let reader = imp.describe().name.clone();
                    let results = read_cases(
                        layout,
                        cases,
                        imp.as_mut(),
                        written,
                        &|module, case, writer| selected(module, case, writer, &reader),
                        &scratch,
                        &|r| progress(Progress::Interop(r)),
                    );
                    let _ = std::fs::remove_dir_all(&scratch);
                    results
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("an interop reader thread panicked"))
            .collect()
    });
    for i in 0..imps.len() {
        let _ = std::fs::remove_dir_all(workdir.join(format!("interop-written-{i}")));
    }
    let mut all: Vec<InteropResult> = results.into_iter().flatten().collect();
    all.sort_by(|a, b| a.trial.cmp(&b.trial));
    Ok(all)
}
