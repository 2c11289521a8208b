//! Shared helpers: running every trial against an implementation.

use harness::adapter::reference::Reference;
use harness::adapter::Implementation;
use harness::runner::{run_all, scratch_dir, TrialResult};
use harness::suite::Layout;

/// Runs every trial against `imp`, with the in-process reference on the other side.
pub fn run_everything(imp: &mut dyn Implementation, tag: &str) -> Vec<TrialResult> {
    let layout = Layout::repository();
    let mut reference = Reference::new();
    let workdir = scratch_dir(tag);
    let results =
        run_all(&layout, imp, &mut reference, &workdir, None, |_| {}).expect("suites load");
    let _ = std::fs::remove_dir_all(&workdir);
    results
}
