//! The forge's CI workflow (`.github/workflows/ci.yml`) cannot run here, so
//! it is kept small and checked: it parses as YAML, runs on pushes and pull
//! requests, and every `run` is one of the commands `.ci/run` or a test of
//! this suite also runs (so a green run here means the workflow's commands
//! work).

use std::path::Path;
use yaml_rust2::{Yaml, YamlLoader};

/// What a `run` line may start with, and where else it runs.
const ALLOWED: &[(&str, &str)] = &[
    ("./.ci/run", "CI itself"),
    (
        "cargo run --release -p harness -- run --strict --report ",
        "cli::the_workflow_commands_run_the_suite_and_diff_its_report",
    ),
    (
        "cargo run --release --manifest-path ../base/Cargo.toml -p harness -- run --report ",
        "the same, on the base branch's checkout",
    ),
    (
        "cargo run --release -p harness -- report diff ",
        "cli::the_workflow_commands_run_the_suite_and_diff_its_report",
    ),
    ("cat reports/report.md >> \"$GITHUB_STEP_SUMMARY\"", "shell"),
    ("git worktree add ../base ", "git"),
];

#[test]
fn the_forge_workflow_parses_and_runs_only_commands_tested_here() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.github/workflows/ci.yml");
    let text = std::fs::read_to_string(&path).expect(".github/workflows/ci.yml");
    let docs = YamlLoader::load_from_str(&text).expect("the workflow is YAML");
    let [workflow] = &docs[..] else {
        panic!("one YAML document, not {}", docs.len());
    };
    let on = &workflow["on"];
    assert!(!on["push"].is_badvalue(), "runs on push");
    assert!(!on["pull_request"].is_badvalue(), "runs on pull requests");
    let jobs = workflow["jobs"].as_hash().expect("jobs");
    assert!(!jobs.is_empty());
    let mut runs = Vec::new();
    for (name, job) in jobs {
        assert!(job["runs-on"].as_str().is_some(), "{name:?}: runs-on");
        for step in job["steps"].as_vec().expect("steps") {
            let (uses, run) = (&step["uses"], &step["run"]);
            assert!(
                uses.as_str().is_some() != run.as_str().is_some(),
                "a step uses an action or runs a command: {step:?}"
            );
            if let Some(run) = run.as_str() {
                runs.extend(run.lines().map(str::trim).filter(|l| !l.is_empty()));
            }
            if let Some(uses) = uses.as_str() {
                assert!(uses.contains('@'), "{uses}: pinned to a version");
            }
        }
    }
    for line in &runs {
        assert!(
            ALLOWED.iter().any(|(prefix, _)| line.starts_with(prefix)),
            "`{line}` is not a command `.ci/run` or a test runs"
        );
    }
    for needed in [
        "./.ci/run",
        "-- run --strict --report reports",
        "-- report diff ",
    ] {
        assert!(
            runs.iter().any(|l| l.contains(needed)),
            "the workflow runs {needed}"
        );
    }
    assert!(matches!(workflow["name"], Yaml::String(_)));
}
