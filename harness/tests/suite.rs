//! The suites against the bundled reference, one libtest trial per
//! (case, direction), named `module::case::direction`; libtest's filtering
//! flags work (`cargo test -p harness --test suite -- collection::units`).
//!
//! Besides the trials, this binary holds the checks of the harness itself:
//! the suite lint and the spec-map coverage rule.

use harness::adapter::reference::Reference;
use harness::runner::{run_trial, scratch_dir, trial_name, trials, Context, Verdict};
use harness::suite::{lint, Layout};
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use std::path::{Path, PathBuf};

#[path = "suite/quotes.rs"]
mod quotes;

fn main() {
    let args = Arguments::from_args();
    let layout = Layout::repository();
    let mut tests = vec![Trial::test("harness::lint", || {
        let problems = lint(&Layout::repository());
        if problems.is_empty() {
            Ok(())
        } else {
            Err(problems.join("\n").into())
        }
    })];
    tests.push(Trial::ignorable_test("harness::quotes", || {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let dir = |var: &str, default: &str| {
            std::env::var_os(var).map_or_else(|| root.join(default), PathBuf::from)
        };
        let (seeds, v1) = (dir("MREC_SPEC_DIR", "../shared/spec"), dir("MREC_V1_DIR", "../v1"));
        if !seeds.is_dir() || !v1.is_dir() {
            return Ok(Completion::ignored_with(format!(
                "the spec texts are not on this machine: MREC_SPEC_DIR (the seeds, {}) and MREC_V1_DIR (the v1 chapters as <chapter>@<commit8>.md, {})",
                seeds.display(),
                v1.display()
            )));
        }
        let map = Layout::repository().spec_map().map_err(Failed::from)?;
        let problems = quotes::check(&map, &seeds, &v1);
        if problems.is_empty() {
            Ok(Completion::Completed)
        } else {
            Err(problems.join("\n").into())
        }
    }));
    let all = match trials(&layout) {
        Ok(t) => t,
        Err(e) => panic!("cannot load the suites: {e}"),
    };
    for (suite, case, direction) in all {
        let name = trial_name(&suite.module, &case.id, direction);
        tests.push(Trial::test(name, move || {
            let layout = Layout::repository();
            let spec = layout.spec_map().expect("spec map");
            let mut imp = Reference::new();
            let mut reference = Reference::new();
            let workdir = scratch_dir(&case.id);
            let mut ctx = Context {
                layout: &layout,
                spec: &spec,
                workdir: workdir.clone(),
                reference: &mut reference,
            };
            let result = run_trial(&suite, &case, direction, &mut imp, &mut ctx);
            let _ = std::fs::remove_dir_all(&workdir);
            match result.verdict {
                Verdict::Pass => Ok(()),
                other => Err(Failed::from(format!("{other:?}: {}", result.detail))),
            }
        }));
    }
    libtest_mimic::run(&args, tests).exit();
}
