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

/// The documents a newcomer follows: README.md, CONTRIBUTING.md, the
/// Python template's README and every `docs/*.md`.
#[allow(dead_code)] // tests/python_adapter.rs includes this file too
pub fn user_docs() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs = vec![
        root.join("README.md"),
        root.join("CONTRIBUTING.md"),
        root.join("adapters/python/README.md"),
    ];
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "md") {
            docs.push(path);
        }
    }
    docs
}
