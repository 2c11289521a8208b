//! Golden files: `.mrec.lmdb` files written by the reference and committed,
//! read by every implementation. Regenerated only by `harness golden`.

use crate::adapter::reference::Reference;
use crate::adapter::{Implementation, Outcome};
use crate::suite::{Kind, Layout};
use std::path::PathBuf;

/// Cases that get a golden file: a few round trips that together pin every
/// dtype, masks, precision, cells, aligned blocks, the force field and the key scheme.
pub const GOLDEN_CASES: &[&str] = &[
    "example-round-trip",
    "round-trip-all-parts",
    "all-dtypes-system",
    "all-dtypes-trajectory",
    "nullable-columns-masks",
    "precision-system-and-trajectory",
    "box-changes-and-undefined",
    "aligned-restated-on-growth",
    "forcefield-tip3p",
    "binding-file-shape",
];

/// LMDB's page size in golden files: 4 KiB, LMDB's smallest, where the
/// writer's default is 32 KiB.
pub const GOLDEN_PAGE_SIZE: u32 = 4096;

/// Writes `fixtures/golden/<case>.mrec.lmdb` and the canonical JSON it reads
/// back as (`<case>.dump.json`) for every round-trip case listed in
/// [`GOLDEN_CASES`], in the tree of `layout` (the embedded data cannot be
/// rewritten: regenerate in a checkout, then rebuild).
pub fn regenerate(layout: &Layout) -> Result<Vec<PathBuf>, String> {
    let Some(root) = layout.root() else {
        return Err("golden files are regenerated in a source tree: give --root DIR".into());
    };
    let dir = root.join("fixtures").join("golden");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut reference = Reference::with_page_size(GOLDEN_PAGE_SIZE);
    let mut written = Vec::new();
    for suite in layout.suites()? {
        for case in suite.cases.iter().filter(|c| c.kind == Kind::RoundTrip) {
            if !GOLDEN_CASES.contains(&case.id.as_str()) {
                continue;
            }
            let Some(name) = &case.fixture else { continue };
            let fixture = layout.fixture(name)?;
            let path = root.join(Layout::golden_name(&case.id));
            let _ = std::fs::remove_file(&path);
            match reference.write(&fixture, &path) {
                Outcome::Done(()) => {}
                other => {
                    return Err(format!(
                        "{}: the reference could not write it: {other:?}",
                        case.id
                    ))
                }
            }
            let mut lock = path.clone().into_os_string();
            lock.push("-lock");
            match reference.read(&path) {
                Outcome::Done(json) => {
                    let dump = dir.join(format!("{}.dump.json", case.id));
                    let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
                    std::fs::write(&dump, text + "\n")
                        .map_err(|e| format!("{}: {e}", dump.display()))?;
                    written.push(dump);
                }
                other => {
                    return Err(format!(
                        "{}: the reference could not read it back: {other:?}",
                        case.id
                    ))
                }
            }
            let _ = std::fs::remove_file(PathBuf::from(lock));
            written.push(path);
        }
    }
    Ok(written)
}
