//! The `harness` binary alone: copied into an empty directory and run
//! there, it carries its suites, fixtures and spec map (`--version` names
//! them) and every command works; `--root` still runs a tree being edited.
//! (A copy's verdicts against the Python template, compared with a run
//! from the tree: `tests/python_adapter.rs`.)

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// An empty scratch directory holding a copy of the built binary.
fn binary_alone(tag: &str) -> (PathBuf, PathBuf) {
    let dir = harness::runner::scratch_dir(tag);
    std::fs::create_dir_all(&dir).expect("scratch");
    let copy = dir.join("harness");
    std::fs::copy(env!("CARGO_BIN_EXE_harness"), &copy).expect("copy the binary");
    (dir, copy)
}

/// Runs the copy with `dir` as its working directory.
fn run(copy: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(copy)
        .current_dir(dir)
        .args(args)
        .output()
        .expect("harness runs")
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_copy_of_the_binary_alone_runs_every_command() {
    let (dir, copy) = binary_alone("alone-commands");

    let version = run(&copy, &dir, &["--version"]);
    let said = text(&version);
    assert!(version.status.success(), "{said}");
    for needle in [
        "harness 0.1.0",
        "suites: collection v1 (",
        "spec sources: 000 LMDB binding, 001 Collection",
        "ragged.md @ f6ef43bf",
        "adapter protocol: 1",
        "built into this binary, digest ",
    ] {
        assert!(said.contains(needle), "{needle:?} not in {said}");
    }

    let first = run(
        &copy,
        &dir,
        &["run", "--filter", "example-round-trip", "--report", "a"],
    );
    assert!(first.status.success(), "{}", text(&first));
    assert!(
        text(&first).contains("collection::example-round-trip::golden"),
        "the golden file comes from the binary: {}",
        text(&first)
    );
    // A second run, as of another day: the same trials.
    let second = run(
        &copy,
        &dir,
        &["run", "--filter", "example-round-trip", "--report", "b"],
    );
    assert!(second.status.success(), "{}", text(&second));

    let trace = run(&copy, &dir, &["trace", "collection.meta.units-required"]);
    assert!(trace.status.success(), "{}", text(&trace));
    assert!(text(&trace).contains("collection::refuse-no-units::write"));

    let lint = run(&copy, &dir, &["lint"]);
    assert!(lint.status.success(), "{}", text(&lint));

    let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/golden/example-round-trip.mrec.lmdb");
    std::fs::copy(golden, dir.join("g.mrec.lmdb")).expect("copy a golden file");
    let inspect = run(&copy, &dir, &["inspect", "g.mrec.lmdb"]);
    assert!(inspect.status.success(), "{}", text(&inspect));
    assert!(text(&inspect).contains("no findings"));

    let diff = run(
        &copy,
        &dir,
        &["report", "diff", "a/report.json", "b/report.json"],
    );
    assert!(diff.status.success(), "{}", text(&diff));
    assert!(text(&diff).contains("0 worse"), "{}", text(&diff));

    let merge = run(
        &copy,
        &dir,
        &[
            "report",
            "merge",
            "a/report.json",
            "b/report.json",
            "--out",
            "m",
        ],
    );
    assert!(merge.status.success(), "{}", text(&merge));
    assert!(dir.join("m/report.html").is_file());

    // Nothing but what the commands were asked to write (and the lock
    // file LMDB creates beside a file it opens).
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|name| !name.ends_with("-lock"))
        .collect();
    left.sort();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(left, ["a", "b", "g.mrec.lmdb", "harness", "m"]);
}

/// `--root DIR` reads a tree instead of the embedded data: a tree whose
/// suite holds only the first three cases runs those cases' trials only.
#[test]
fn root_runs_a_tree_being_edited() {
    let (dir, copy) = binary_alone("alone-root");
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let tree = dir.join("tree");
    for sub in ["suites", "fixtures"] {
        for entry in walkdir::WalkDir::new(repository.join(sub)) {
            let entry = entry.expect("entry");
            let rel = entry
                .path()
                .strip_prefix(&repository)
                .expect("in the repository");
            if entry.file_type().is_dir() {
                std::fs::create_dir_all(tree.join(rel)).expect("dir");
            } else {
                std::fs::copy(entry.path(), tree.join(rel)).expect("copy");
            }
        }
    }
    std::fs::copy(repository.join("spec-map.toml"), tree.join("spec-map.toml")).expect("spec map");
    let suite = std::fs::read_to_string(repository.join("suites/collection.toml")).expect("suite");
    let fourth = suite
        .match_indices("[[case]]")
        .nth(3)
        .map(|(at, _)| at)
        .expect("four cases");
    std::fs::write(tree.join("suites/collection.toml"), &suite[..fourth]).expect("edit");

    let edited = run(
        &copy,
        &dir,
        &["run", "--root", tree.to_str().expect("UTF-8")],
    );
    let said = text(&edited);
    assert!(edited.status.success(), "{said}");
    let trials = said
        .lines()
        .filter(|l| l.starts_with("collection::"))
        .count();
    // example-round-trip in three directions, two refusals.
    assert_eq!(trials, 5, "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}
