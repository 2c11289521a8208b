//! `mrec bench`: a benchmark any user can run on their own machine
//! (docs/benchmark.md).
//!
//! One run generates a deterministic, seed-shaped workload (small molecules
//! with a topology and a relaxation trajectory), streams it into a
//! collection file record by record, writes the same frames the way
//! ASE-LMDB datasets ship (one zlib-compressed JSON row per frame), and then
//! measures, on the same data and in one shuffled record order:
//!
//! 1. the write (frames/s, peak and growth of resident memory, file size
//!    against the raw payload),
//! 2. reading records as owned arrays ([`RecordTxn::record_arrays`]),
//!    (2b) as the model ([`RecordTxn::record`]), and (2c) as owned arrays
//!    in index order (what the shuffle costs),
//! 3. reading records as views ([`RecordTxn::for_each_frame`]),
//! 4. reading the same keys as raw LMDB values (nothing decoded),
//! 5. reading the peer file (inflate + JSON parse),
//! 6. an index query answered from the index alone,
//! 7. two threads reading owned arrays concurrently (and views, 7b),
//! 8. the page check of [`Reader::open_checked`] (`check_pages`), against
//!    one full read as owned arrays,
//! 9. the file's content digest (`file_digest`, what `mrec set verify`
//!    computes of each shard), against the same read.
//!
//! The read figures are measured in `passes` rounds after a warm-up round,
//! each round one pass of every figure; a figure is the median of its
//! passes (min and max kept as the spread), a ratio the median of the
//! rounds' ratios.

use flate2::{Compression, Decompress, FlushDecompress, Status};
use heed::types::Bytes;
use heed::{Database, Env, EnvFlags, EnvOpenOptions, WithoutTls};
use indicatif::{ProgressBar, ProgressStyle};
use molrec::dtype::DType;
use molrec::error::{Error, Result};
use molrec::lmdb::{
    check_pages, file_digest, frame_key, record_key, system_key, Reader, RecordTxn, Writer,
    WriterOptions,
};
use molrec::model::*;
use molrec::typed_json::MetaTag;
use molrec::Clause;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::io::Write;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// What a benchmark run does.
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// Number of records to generate (the seed dataset has 83,951).
    pub records: u64,
    /// Seed of the workload generator and of the shuffled order.
    pub seed: u64,
    /// Timed rounds of the read figures (after one warm-up round).
    pub passes: usize,
    /// Where the files go; `None` = a new temporary directory.
    pub dir: Option<PathBuf>,
    /// Keep the files after the run.
    pub keep: bool,
    /// Show progress bars and phase lines on stderr.
    pub progress: bool,
    /// The global allocator of the program running the benchmark, for the
    /// report (the library cannot tell).
    pub allocator: String,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            records: 8_400,
            seed: 1,
            passes: 5,
            dir: None,
            keep: false,
            progress: true,
            allocator: "the system's".into(),
        }
    }
}

/// The figures of one run: [`Report::table`] prints them, [`Report::json`]
/// holds the same figures as JSON.
#[derive(Clone, Debug)]
pub struct Report {
    json: Value,
    table: String,
}

impl Report {
    /// The human-readable table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// Every figure as JSON (what `--json FILE` writes).
    pub fn json(&self) -> &Value {
        &self.json
    }
}

mod machine;
mod measure;
mod peer;
mod run;
mod workload;

// The parts share their helpers through this module (each is `use
// super::*`); a glob re-exports each item at its own visibility.
pub use machine::*;
pub use measure::*;
use peer::*;
pub use run::*;
pub use workload::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generator_is_deterministic_and_seed_shaped() {
        let a = Molecule::generate(7, 3);
        let b = Molecule::generate(7, 3);
        assert_eq!(a.code, b.code);
        assert_eq!(a.frames[0].x, b.frames[0].x);
        let (mut atoms, mut frames) = (0usize, 0usize);
        for r in 0..2000 {
            let m = Molecule::generate(1, r);
            assert!((10..=60).contains(&m.n_atoms()));
            assert!((1..=48).contains(&m.frames.len()));
            assert_eq!(m.bonds.len(), m.n_atoms() - 1);
            assert!(m.frames.windows(2).all(|w| w[1].pe < w[0].pe));
            assert!(m.frames.iter().all(|f| (-1000.0..=-100.0).contains(&f.pe)));
            atoms += m.n_atoms();
            frames += m.frames.len();
        }
        let mean_atoms = atoms as f64 / 2000.0;
        let mean_frames = frames as f64 / 2000.0;
        assert!((27.0..33.0).contains(&mean_atoms), "{mean_atoms}");
        assert!((22.0..27.0).contains(&mean_frames), "{mean_frames}");
    }

    #[test]
    fn hill_formula_orders_c_h_then_alphabetical() {
        assert_eq!(hill_formula(&[1, 1, 0, 0, 0, 6, 3]), "C2H3ClO");
    }

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    #[cfg(target_os = "linux")] // /proc/thread-self
    fn cpu_split_counts_a_busy_loop_as_user_time() {
        // This thread's counters, not the process's: the tests running
        // beside this one (files written, syncs) add system time to those.
        let thread =
            || user_system_secs(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
        let (user_start, system_start) = thread();
        let wall = Instant::now();
        let mut x = 1u64;
        // CPU time, not wall time, ends the loop (20 ticks of 1/100 s): a
        // loaded machine makes it longer, never wrong. Each round spins
        // about a millisecond between two reads of /proc, so nearly all
        // of the time is user time.
        let spent = loop {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
            }
            let (user, system) = thread();
            let spent = (user - user_start, system - system_start);
            if spent.0 + spent.1 >= 0.2 {
                break spent;
            }
            assert!(
                wall.elapsed().as_secs() < 60,
                "60 s of spinning took no CPU time"
            );
        };
        assert!(
            spent.0 >= 0.75 * (spent.0 + spent.1),
            "user, system: {spent:?}"
        );
        // The process's counters include this thread's.
        let (user, _) = cpu_user_system_secs();
        assert!(user >= spent.0, "the process's user time {user}");
    }

    #[test]
    fn user_system_secs_reads_fields_14_and_15() {
        // A command name with a space and a parenthesis, as the kernel
        // allows: the fields are counted after the last `)`.
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 1 0";
        assert_eq!(user_system_secs(stat), (2.5, 0.75));
        assert_eq!(user_system_secs(""), (0.0, 0.0));
    }

    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(cache_size_bytes("48K\n"), Some(48 << 10));
        assert_eq!(cache_size_bytes("491520K"), Some(480 << 20));
        assert_eq!(cache_size_bytes("32M"), Some(32 << 20));
        assert_eq!(cache_size_bytes("512"), Some(512));
        for bad in ["", "K", "12 K", "12T", "-1K", "99999999999999999999K"] {
            assert_eq!(cache_size_bytes(bad), None, "{bad:?}");
        }
    }

    /// The largest level that holds data wins: an instruction cache, a
    /// directory without a level or size, and a bad size are passed over.
    #[test]
    fn the_last_level_cache_is_the_highest_data_level() {
        let root = std::env::temp_dir().join(format!("mrec-bench-cache-{}", std::process::id()));
        let index = |i: u32, level: &str, kind: &str, size: &str| {
            let dir = root.join(format!("index{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            for (name, text) in [("level", level), ("type", kind), ("size", size)] {
                if !text.is_empty() {
                    std::fs::write(dir.join(name), format!("{text}\n")).unwrap();
                }
            }
        };
        index(0, "1", "Data", "48K");
        index(1, "1", "Instruction", "64K");
        index(2, "2", "Unified", "2048K");
        assert_eq!(last_level_cache_bytes(&root), Some(2048 << 10));
        index(3, "3", "Unified", "32M");
        index(4, "4", "Instruction", "1G");
        index(5, "", "Unified", "2G");
        index(6, "5", "Unified", "lots");
        std::fs::create_dir_all(root.join("power")).unwrap();
        assert_eq!(last_level_cache_bytes(&root), Some(32 << 20));
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(last_level_cache_bytes(&root), None);
    }

    #[test]
    fn a_file_beyond_the_cache_is_noted() {
        assert_eq!(file_beyond_cache_note(100 << 20, Some(480 << 20)), None);
        assert_eq!(file_beyond_cache_note(480 << 20, Some(480 << 20)), None);
        assert_eq!(file_beyond_cache_note(100 << 20, None), None);
        assert_eq!(file_beyond_cache_note(100 << 20, Some(0)), None);
        let note = file_beyond_cache_note(3872 << 20, Some(480 << 20)).unwrap();
        assert!(
            note.contains("(3872.0 MiB)") && note.contains("cache (480.0 MiB)"),
            "{note}"
        );
    }

    #[test]
    fn kernel_bound_write_is_noted_only_when_the_kernel_took_more() {
        assert_eq!(kernel_bound_write_note(0.60, 0.59), None);
        assert_eq!(kernel_bound_write_note(0.60, 0.60), None);
        assert_eq!(kernel_bound_write_note(0.03, 0.11), None);
        let note = kernel_bound_write_note(0.60, 1.53).unwrap();
        assert!(
            note.contains("kernel (1.53 s)") && note.contains("user code (0.60 s"),
            "{note}"
        );
    }

    #[test]
    fn zlib_round_trip() {
        let data = br#"{"numbers": [1, 6], "energy": -1.5}"#.repeat(50);
        let z = zlib_compress(&data).unwrap();
        let mut out = Vec::new();
        zlib_inflate(&mut Decompress::new(true), &z, &mut out).unwrap();
        assert_eq!(out, data);
    }

    #[test]
    fn small_run_completes() {
        let dir = std::env::temp_dir().join(format!("mrec-bench-test-{}", std::process::id()));
        let report = run(&BenchOptions {
            records: 40,
            passes: 1,
            dir: Some(dir.clone()),
            progress: false,
            ..BenchOptions::default()
        })
        .unwrap();
        assert!(report.table().contains("(7) two threads"));
        assert!(report.table().contains("user / system (kernel)"));
        assert!(report.table().contains("(2c) read in index order"));
        assert_eq!(report.json()["workload"]["records"], 40);
        // (2c) and its ratio to (2) are in the JSON (`run` has checked that
        // it read every frame and the same x as the peer).
        let in_order = &report.json()["read_owned_arrays_in_index_order"]["frames_per_s"];
        assert!(in_order["median"].as_f64().unwrap() > 0.0, "{in_order}");
        let ratio = &report.json()["ratios"]["speed_index_order_over_shuffled"];
        assert!(ratio["median"].as_f64().unwrap() > 0.0, "{ratio}");
        let write = &report.json()["write"];
        let (all, system) = (
            write["cpu_secs_with_generation"].as_f64().unwrap(),
            write["system_cpu_secs_with_generation"].as_f64().unwrap(),
        );
        assert!((0.0..=all).contains(&system), "{system} of {all}");
        assert!(!dir.join("bench.mrec.lmdb").exists());
        let _ = std::fs::remove_dir_all(dir);
    }
}
