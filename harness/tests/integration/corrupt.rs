//! `harness inspect` (the inspection `harness run` applies to every file an
//! implementation writes) on files whose LMDB pages are damaged one byte at
//! a time: each read in a child process, never a signal or a hang.

use harness::adapter::reference::Reference;
use harness::adapter::{Implementation, Outcome};
use serde_json::{json, Value};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// SplitMix64, for a campaign that is the same on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n.max(1) as u64) as usize
    }
}

fn collection() -> Value {
    let records: Vec<Value> = (0..80)
        .map(|r| {
            let frames: Vec<Value> = (0..10)
                .map(|k| {
                    json!({"step": k, "blocks": {"atoms": {"count": 2, "columns": {
                    "x": {"dtype": "f64", "shape": [2], "values": [r as f64, k as f64]}}}}})
                })
                .collect();
            json!({"meta": {"r": r}, "trajectory": {"frames": frames}})
        })
        .collect();
    json!({"meta": {"units": {"length": "angstrom"}}, "records": records})
}

/// Where a flip lands: a meta page, a page header, a node pointer, a node
/// header, or any byte of the file.
fn pick(file: &[u8], page: usize, rng: &mut Rng) -> usize {
    let pages = file.len() / page;
    let p = 2 + rng.below(pages - 2);
    let base = p * page;
    let lower = usize::from(u16::from_le_bytes([file[base + 12], file[base + 13]]));
    let ptrs = lower.clamp(17, page) - 16;
    match rng.below(5) {
        0 => rng.below(2) * page + rng.below(152),
        1 => base + rng.below(16),
        2 => base + 16 + rng.below(ptrs),
        3 => {
            let i = 16 + 2 * rng.below(ptrs / 2);
            let off = usize::from(u16::from_le_bytes([file[base + i], file[base + i + 1]]));
            base + off.min(page - 8) + rng.below(8)
        }
        _ => rng.below(file.len()),
    }
}

#[test]
fn inspecting_damaged_pages_never_crashes_or_hangs() {
    let dir = std::env::temp_dir().join(format!("harness-corrupt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let base = dir.join("base.mrec.lmdb");
    let mut reference = Reference::with_page_size(4096);
    assert!(matches!(
        reference.write(&collection(), &base),
        Outcome::Done(())
    ));
    let clean = std::fs::read(&base).unwrap();
    let damaged = dir.join("damaged.mrec.lmdb");
    // `MREC_CORRUPT_FILES` and `MREC_CORRUPT_SEED` set up longer campaigns
    // (as for `cli/tests/corrupt_pages.rs`).
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let (files, seed) = (env("MREC_CORRUPT_FILES", 1000), env("MREC_CORRUPT_SEED", 3));
    let mut rng = Rng(seed);
    let (mut findings, mut clean_reads, mut bad) = (0, 0, Vec::new());
    let started = Instant::now();
    for n in 0..files {
        let mut bytes = clean.clone();
        let at = pick(&bytes, 4096, &mut rng);
        bytes[at] ^= 1 + rng.below(255) as u8;
        std::fs::write(&damaged, &bytes).unwrap();
        match inspect(&damaged) {
            Some(true) => findings += 1,
            Some(false) => clean_reads += 1,
            None => bad.push(format!("copy {n}: byte {at}")),
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "harness inspect campaign: {files} damaged copies, seed {seed}, {:.1} s: {findings} with findings, {clean_reads} without, {} signals or hangs",
        started.elapsed().as_secs_f64(),
        bad.len()
    );
    assert!(bad.is_empty(), "{} signals or hangs: {bad:?}", bad.len());
    assert!(
        findings > files / 2,
        "only {findings} of {files} damaged copies had findings"
    );
    assert!(clean_reads > 0);
}

/// `Some(has findings)`, or `None` for a signal or a hang.
fn inspect(file: &Path) -> Option<bool> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("inspect")
        .arg(file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return match (status.signal(), status.code()) {
                (Some(_), _) => None,
                (_, code) => Some(code != Some(0)),
            };
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}
