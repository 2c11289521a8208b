//! Tests of the harness itself (the suites run in `tests/suite.rs`).
//!
//! Index:
//! - `alone`: a copy of the binary alone in an empty directory carries its
//!   suites, fixtures and spec map (`--version` names them) and runs every
//!   command; `--root` runs a tree being edited.
//! - `broken`: implementations that each break one rule are caught by the
//!   cases covering that rule, and pass the rest; `harness report diff`
//!   lists exactly the trials one broken rule changes.
//! - `corrupt`: `harness inspect` on files with damaged LMDB pages ends in
//!   findings, never a signal or a hang.
//! - `cli`: the command line writes the four reports; expectations are
//!   checked; `harness trace` shows a clause, its cases and verdicts.
//!   (The Python template adapter's run is `tests/python_adapter.rs`, a
//!   driver that reports it ignored where `python3` lacks what it needs.)
//! - `layering`: the files of `harness/src` import each other in no cycle (a
//!   module file may reach down into its parts); the report's data imports no renderer.
//! - `many`: the reference and several adapters side by side, every
//!   writer × reader interop pair, a crashing and a hanging adapter beside
//!   good ones, a reader dropping the last record as one failure group at
//!   the top of report.md, `report merge` of separate runs equal to one run
//!   (and refusing mismatched suite versions), the report's JSON Schema,
//!   and the commands the docs quote.
//! - `hostile`: an adapter that hangs is given up after three timeouts, a
//!   signal to the harness leaves no adapter process, an answer past the cap
//!   is an error naming it; one whose every word is markup, control
//!   characters and broken escapes, with 1 MiB messages, leaves every report
//!   parseable (XML, HTML and Markdown parsers) and its text inert.
//! - `subprocess`: the reference as a subprocess gives the same verdicts as
//!   in process.
//! - `power`: every writer trace has an inspection check, each writer and
//!   reader bug of `harness power`'s catalogs is caught by two cases resting
//!   on the text, every `must` clause of the text has two cases that fail on
//!   its violation, and docs/power.md holds the inventory as it is.
//! - `protocol`: every message has a schema in `docs/schemas/`; a whole
//!   run's traffic follows them, judged by `jsonschema` and by the
//!   harness's own validator alike, which agree on broken messages too.
//! - `smoke`: `harness smoke` passes working adapters and fails each
//!   deliberately broken one with the sentence that says what to fix;
//!   `harness run` points to it when an adapter fails from the start.
//! - `snapshots`: the reference's Markdown report and refusal messages; a
//!   reworded refusal message is a snapshot diff of its one line.
//! - `spec_map`: every `must` clause is covered by a passing case or waived;
//!   every clause the reference names is in the map.
//! - `workflow`: the forge's CI workflow parses and runs only commands that
//!   `.ci/run` or these tests also run.

mod alone;
mod broken;
mod cli;
mod common;
mod corrupt;
mod hostile;
mod layering;
mod many;
mod power;
mod protocol;
mod smoke;
mod snapshots;
mod spec_map;
mod subprocess;
mod workflow;
