//! The suite's power (harness/src/power): every writer trace has a check,
//! every writer and reader bug of the catalogs is caught by at least two
//! cases resting on the text wherever it shows, every `must` clause of the
//! text has at least two cases that fail on its violation, and
//! docs/power.md holds the inventory as it is now.

use harness::adapter::reference::Reference;
use harness::power::{measure, with_table, Inventory};
use harness::runner::scratch_dir;
use harness::suite::Layout;

fn inventory() -> Inventory {
    let layout = Layout::repository();
    let spec = layout.spec_map().expect("spec map");
    let workdir = scratch_dir("power");
    let inventory = measure(&layout, &spec, &mut Reference::new(), &workdir).expect("measured");
    let _ = std::fs::remove_dir_all(&workdir);
    inventory
}

#[test]
fn every_trace_is_checked_and_every_rule_guarded_by_two_cases() {
    let layout = Layout::repository();
    let spec = layout.spec_map().expect("spec map");
    let suites = layout.suites().expect("suites");
    let inventory = inventory();
    let mut problems = inventory.problems(&spec);
    for (clause, cases) in inventory.unguarded(&suites, &spec) {
        problems.push(format!(
            "clause {clause}: {} case(s) would fail on its violation ({cases:?})",
            cases.len()
        ));
    }
    assert!(
        problems.is_empty(),
        "the suite's power falls short (harness power --root . says the same):\n{}",
        problems.join("\n")
    );
    // The measure can fail: a writer bug left uncaught is reported.
    let mut blind = inventory.clone();
    blind.writers[0].missed.push("some-case".into());
    assert!(!blind.problems(&spec).is_empty());
}

#[test]
fn docs_suites_md_holds_the_inventory_as_it_is() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/power.md");
    let doc = std::fs::read_to_string(&path).expect("docs/power.md");
    let table = inventory().markdown();
    let regenerated = with_table(&doc, &table).expect("docs/power.md has the power markers");
    assert!(
        regenerated == doc,
        "docs/power.md's inventory is stale: run `cargo run --release -p harness -- power --root . --docs docs/power.md` and review the diff"
    );
}
