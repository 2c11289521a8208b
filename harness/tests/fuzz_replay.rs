//! The bodies of the cargo-fuzz targets of `fuzz/` (outside the workspace:
//! SECURITY.md, "Fuzzing"), run once over every seed that
//! `examples/fuzz_seeds` makes from the fixtures and every input a fuzzer
//! found, kept in `fuzz/regressions/<target>/`. So an API change cannot leave
//! the targets broken unnoticed, what they assert (both record paths agree,
//! whatever the writer accepts reads back, the judge and `mrec validate`
//! agree) holds on every fixture, and no finding comes back.
//!
//! The bodies are `fuzz/src/lib.rs`, included here by path; libFuzzer is
//! not needed to run them (its C++ runtime was most of this test's time).
//! One trial per target; a failure names the input.

#[allow(dead_code)] // its `main` is the example's
#[path = "../../reference/examples/fuzz_seeds.rs"]
mod fuzz_seeds;
#[path = "../../fuzz/src/lib.rs"]
mod molrec_fuzz;

use libtest_mimic::{Arguments, Failed, Trial};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A target's name (its `fuzz/fuzz_targets/<name>.rs`, its regressions'
/// folder), the seed folder it runs (`inspect_file` takes the same entries
/// inputs as `open_and_read`), the call its file makes, and its body.
struct Target {
    name: &'static str,
    seeds: &'static str,
    call: &'static str,
    body: fn(&[u8]),
}

const TARGETS: [Target; 4] = [
    Target {
        name: "frame_decode",
        seeds: "frame_decode",
        call: "molrec_fuzz::frame_decode(data)",
        body: molrec_fuzz::frame_decode,
    },
    Target {
        name: "open_and_read",
        seeds: "open_and_read",
        call: "molrec_fuzz::open_and_read(data)",
        body: molrec_fuzz::open_and_read,
    },
    Target {
        name: "write_read",
        seeds: "write_read",
        call: "molrec_fuzz::write_read(data)",
        body: molrec_fuzz::write_read,
    },
    // Replayed in agreement mode, as the target runs with MOLREC_FUZZ_AGREE=1.
    Target {
        name: "inspect_file",
        seeds: "open_and_read",
        call: "molrec_fuzz::inspect_file(data, std::env::var_os(\"MOLREC_FUZZ_AGREE\").is_some())",
        body: |data| molrec_fuzz::inspect_file(data, true),
    },
];

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let seeds =
        Arc::new(std::env::temp_dir().join(format!("molrec-fuzz-seeds-{}", std::process::id())));
    let made = fuzz_seeds::write_seeds(&root.join("fixtures"), &seeds)
        .unwrap_or_else(|e| panic!("the seeds under {}: {e}", seeds.display()));
    eprintln!("fuzz_replay: {made}");
    let trials = TARGETS
        .iter()
        .map(|target| {
            let (root, seeds) = (root.clone(), Arc::clone(&seeds));
            Trial::test(target.name, move || replay(target, &root, &seeds))
        })
        .collect();
    let conclusion = libtest_mimic::run(&Arguments::from_args(), trials);
    let _ = std::fs::remove_dir_all(&*seeds);
    conclusion.exit();
}

/// Runs `target`'s body over its seeds and regressions; the first input
/// that panics fails the trial, named.
fn replay(target: &Target, root: &Path, seeds: &Path) -> Result<(), Failed> {
    let file = root
        .join("fuzz/fuzz_targets")
        .join(format!("{}.rs", target.name));
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    if !text.contains(target.call) {
        return Err(format!("{} does not call `{}`", file.display(), target.call).into());
    }
    let mut inputs = files(&seeds.join(target.seeds));
    if inputs.is_empty() {
        return Err(format!("no seeds in {}", seeds.join(target.seeds).display()).into());
    }
    inputs.extend(files(&root.join("fuzz/regressions").join(target.name)));
    let outcome = inputs.iter().try_for_each(|input| {
        let data = std::fs::read(input).map_err(|e| format!("{}: {e}", input.display()))?;
        catch_unwind(AssertUnwindSafe(|| (target.body)(&data))).map_err(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("(not a string)");
            format!(
                "{} panicked on {} (of {} inputs): {message}",
                target.name,
                input.display(),
                inputs.len()
            )
        })
    });
    let _ = std::fs::remove_dir_all(molrec_fuzz::scratch_dir(target.name));
    outcome.map_err(Failed::from)
}

/// The files of `dir` in name order (none when it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| p.is_file());
    found.sort();
    found
}
