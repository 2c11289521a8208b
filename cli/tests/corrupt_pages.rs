//! The corruption campaign of issue #31: a collection file's LMDB pages
//! damaged one byte at a time (page headers, node pointer arrays, branch
//! pointers, meta pages, overflow headers, free pages, values), each copy
//! read by `mrec validate` (and every third by `mrec dump`) in a child
//! process. Every outcome is counted: refused naming a clause, read (the
//! flip hit a value's bytes or space nobody reads), killed by a signal, or
//! hung. The test fails on any signal or hang.
//!
//! Deterministic for a seed. `MREC_CORRUPT_FILES` (default 3,000) and
//! `MREC_CORRUPT_SEED` (default 1) set the campaign; `MREC_CORRUPT_BIN`
//! runs another `mrec` (an older build, to see what it did).

mod common;

use common::{collection_json, report, scratch_dir, Rng};
use molrec::lmdb::{write_collection, WriterOptions};
use molrec::model_json::collection_from_json;
use serde_json::json;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PAGE: usize = 4096;
const HUNG: Duration = Duration::from_secs(20);

/// Where a flipped byte lands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    MetaPage,
    PageHeader,
    NodePointers,
    BranchPointer,
    NodeHeader,
    OverflowHeader,
    Value,
    FreePage,
}

/// What one read of a damaged copy did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ending {
    Refused,
    Read,
    Signal(i32),
    Hung,
    /// Exited non-zero without naming a clause.
    Unnamed,
}

/// The last line of a child's stderr, for the report.
fn last_line(err: &str) -> String {
    err.lines().last().unwrap_or_default().to_string()
}

/// A file with branch pages, leaf pages and overflow runs, at 4 KiB pages.
fn base_file(dir: &Path) -> PathBuf {
    let mut c = collection_json(120, 12, 0.0);
    // A system-only record too large for a leaf: its value takes an
    // overflow run.
    let n = 700;
    let elements: Vec<&str> = (0..n).map(|i| ["C", "H", "O"][i % 3]).collect();
    let charges: Vec<f64> = (0..n).map(|i| (i as f64 * 0.37).sin()).collect();
    c["records"].as_array_mut().unwrap().push(json!({
        "meta": {"n": "big"},
        "system": {"blocks": {"atoms": {"count": n, "columns": {
            "element": {"dtype": "string", "shape": [n], "values": elements},
            "charge": {"dtype": "f64", "shape": [n], "values": charges}}}}}
    }));
    let path = dir.join("base.mrec.lmdb");
    let options = WriterOptions {
        page_size: PAGE as u32,
        ..WriterOptions::default()
    };
    write_collection(&path, collection_from_json(&c).unwrap(), options).unwrap();
    path
}

fn u16_at(b: &[u8], at: usize) -> usize {
    usize::from(u16::from_le_bytes([b[at], b[at + 1]]))
}

/// The byte ranges of each kind in the file, read from its pages with a
/// few lines of our own (flags at 10, lower at 12, upper at 14).
fn targets(file: &[u8]) -> Vec<(Target, usize, usize)> {
    let mut out = vec![
        (Target::MetaPage, 0, 152),
        (Target::MetaPage, PAGE, PAGE + 152),
    ];
    let pages = file.len() / PAGE;
    let mut p = 2;
    while p < pages {
        let page = &file[p * PAGE..(p + 1) * PAGE];
        let base = p * PAGE;
        let flags = u16_at(page, 10);
        match flags {
            0x01 | 0x02 => {
                out.push((Target::PageHeader, base, base + 16));
                let lower = u16_at(page, 12).clamp(16, PAGE);
                out.push((Target::NodePointers, base + 16, base + lower));
                for i in 0..(lower - 16) / 2 {
                    let off = u16_at(page, 16 + 2 * i);
                    if off + 8 > PAGE {
                        continue;
                    }
                    let kind = if flags == 0x01 {
                        Target::BranchPointer
                    } else {
                        Target::NodeHeader
                    };
                    out.push((kind, base + off, base + off + 8));
                    let ksize = u16_at(page, off + 6);
                    let size = u16_at(page, off) | u16_at(page, off + 2) << 16;
                    let data = off + 8 + ksize;
                    if flags == 0x02 && u16_at(page, off + 4) == 0 && data + size <= PAGE {
                        out.push((Target::Value, base + data, base + data + size));
                    }
                }
                p += 1;
            }
            0x04 => {
                out.push((Target::OverflowHeader, base, base + 16));
                let run = u32::from_le_bytes(page[12..16].try_into().unwrap()) as usize;
                if run > 1 {
                    out.push((
                        Target::Value,
                        base + 16,
                        (base + run * PAGE).min(file.len()),
                    ));
                }
                p += run.max(1);
            }
            _ => {
                out.push((Target::FreePage, base, base + PAGE));
                p += 1;
            }
        }
    }
    out.retain(|(_, a, b)| b > a);
    out
}

fn run(bin: &str, command: &str, file: &Path) -> (Ending, String) {
    let mut child = Command::new(bin)
        .args([command, file.to_str().unwrap()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            let ending = match (status.signal(), status.code()) {
                (Some(sig), _) => Ending::Signal(sig),
                (_, Some(0)) => Ending::Read,
                _ if err.contains("] ") && err.contains('[') => Ending::Refused,
                _ => Ending::Unnamed,
            };
            return (ending, last_line(&err));
        }
        if start.elapsed() > HUNG {
            let _ = child.kill();
            let _ = child.wait();
            return (Ending::Hung, String::new());
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

#[derive(Default)]
struct Tally {
    refused: u64,
    read: u64,
    unnamed: u64,
    /// The first few messages of refusals that named no clause.
    unnamed_lines: Vec<String>,
    bad: Vec<String>,
}

impl Tally {
    fn add(&mut self, (ending, line): (Ending, String), what: impl FnOnce() -> String) {
        match ending {
            Ending::Refused => self.refused += 1,
            Ending::Read => self.read += 1,
            Ending::Unnamed => {
                self.unnamed += 1;
                if self.unnamed_lines.len() < 3 {
                    self.unnamed_lines.push(format!("{line} ({})", what()));
                }
            }
            Ending::Signal(_) | Ending::Hung => self.bad.push(format!("{ending:?}: {}", what())),
        }
    }
}

/// One worker: `count` damaged copies of `base` in its own file.
fn campaign(bin: &str, base: &[u8], dir: &Path, seed: u64, count: u64) -> (Tally, Tally) {
    let ranges = targets(base);
    let kinds: Vec<Target> = {
        let mut k: Vec<Target> = ranges.iter().map(|r| r.0).collect();
        k.sort();
        k.dedup();
        k
    };
    let path = dir.join(format!("damaged-{seed}.mrec.lmdb"));
    std::fs::write(&path, base).unwrap();
    let mut rng = Rng::new(seed);
    let (mut validate, mut dump) = (Tally::default(), Tally::default());
    let mut bytes = base.to_vec();
    for n in 0..count {
        // Each kind equally often, then a range of it, then a byte.
        let kind = *rng.pick(&kinds);
        let of_kind: Vec<&(Target, usize, usize)> = ranges.iter().filter(|r| r.0 == kind).collect();
        let &&(_, lo, hi) = rng.pick(&of_kind);
        let at = lo + rng.index(hi - lo);
        let flip = 1 + rng.below(255) as u8;
        bytes[at] ^= flip;
        std::fs::write(&path, &bytes).unwrap();
        let what = || format!("seed {seed} copy {n}: {kind:?} byte {at} ^= {flip:#04x}");
        validate.add(run(bin, "validate", &path), what);
        if n % 3 == 0 {
            dump.add(run(bin, "dump", &path), what);
        }
        bytes[at] ^= flip;
    }
    (validate, dump)
}

#[test]
fn damaged_pages_are_refused_never_crash_or_hang() {
    let files: u64 = std::env::var("MREC_CORRUPT_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let seed: u64 = std::env::var("MREC_CORRUPT_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let bin = std::env::var("MREC_CORRUPT_BIN").unwrap_or(env!("CARGO_BIN_EXE_mrec").into());
    let dir = scratch_dir("corrupt-pages");
    let base_path = base_file(&dir);
    let counts = molrec::lmdb::check_pages(&base_path).unwrap();
    let base = std::fs::read(&base_path).unwrap();
    let kinds = targets(&base);
    for kind in [
        Target::BranchPointer,
        Target::OverflowHeader,
        Target::NodePointers,
    ] {
        assert!(
            kinds.iter().any(|k| k.0 == kind),
            "the base file has no {kind:?}"
        );
    }
    let start = Instant::now();
    let workers = 2;
    let results: Vec<(Tally, Tally)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let (bin, base, dir) = (&bin, &base, &dir);
                let share = files / workers + u64::from(w < files % workers);
                s.spawn(move || campaign(bin, base, dir, seed * 1000 + w, share))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut bad = Vec::new();
    let mut line = format!(
        "corruption campaign: {files} damaged copies of a {}-byte file ({} branch, {} leaf, {} overflow pages, depth {}), seed {seed}, {:.1} s",
        base.len(),
        counts.branch_pages,
        counts.leaf_pages,
        counts.overflow_pages,
        counts.depth,
        start.elapsed().as_secs_f64()
    );
    for (name, pick) in [("validate", 0usize), ("dump", 1)] {
        let (mut refused, mut read, mut unnamed, mut failed) = (0, 0, 0, 0);
        for r in &results {
            let t = if pick == 0 { &r.0 } else { &r.1 };
            refused += t.refused;
            read += t.read;
            unnamed += t.unnamed;
            failed += t.bad.len();
            for l in &t.unnamed_lines {
                report(&format!("  mrec {name}, refused without a clause: {l}"));
            }
            bad.extend(t.bad.iter().map(|b| format!("mrec {name}: {b}")));
        }
        line.push_str(&format!(
            "; mrec {name}: {refused} refused naming a clause, {read} read, {unnamed} refused without a clause, {failed} signals or hangs"
        ));
    }
    report(&line);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        bad.is_empty(),
        "{} reads ended in a signal or a hang:\n{}",
        bad.len(),
        bad.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}
