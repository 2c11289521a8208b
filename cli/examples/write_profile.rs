//! A profiling driver for the streaming writer: generates the benchmark's
//! workload in memory first, then times only `Writer::append` and `finish`,
//! so that `perf record` sees the writer and nothing else of `mrec bench`.
//!
//! ```text
//! cargo build --release --example write_profile
//! perf record --call-graph dwarf target/release/examples/write_profile 500 /tmp/p.mrec.lmdb
//! target/release/examples/write_profile RECORDS PATH BATCH_BYTES PAGE_SIZE
//! WRITE_PROFILE_INLINE=1 target/release/examples/write_profile 8400 /tmp/p.mrec.lmdb
//! ```
//!
//! It prints the seconds of `append` and of the whole write, the CPU
//! seconds and page faults of those calls, and the process's peak
//! resident memory.

/// The allocator `mrec` runs with, so the profile is of what `mrec bench` measures.
#[global_allocator]
static ALLOCATOR: mrec_cli::allocator::Mimalloc = mrec_cli::allocator::Mimalloc;

use molrec::lmdb::{Writer, WriterOptions};
use mrec_cli::bench::{workload_header, workload_record};
use std::collections::BTreeMap;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().map_or(Ok(2000), |a| a.parse())?;
    let path = args.next().map_or_else(
        || std::env::temp_dir().join("write_profile.mrec.lmdb"),
        Into::into,
    );
    // A fresh file, as `mrec bench` writes: truncating an old one costs time.
    let _ = std::fs::remove_file(&path);
    let seed = 1;
    // Generated up front, so the timed loop is the writer alone; or, with
    // `WRITE_PROFILE_INLINE=1`, each record just before it is appended, as
    // `mrec bench` does (then the record is in the cache when the writer
    // reads it; only `append` and `finish` are timed either way).
    let inline = std::env::var_os("WRITE_PROFILE_INLINE").is_some_and(|v| v == "1");
    let records: Vec<_> = match inline {
        true => Vec::new(),
        false => (0..n).map(|r| workload_record(seed, r)).collect(),
    };
    // `WRITE_PROFILE_PAUSE=S`: wait S seconds here, so that a profiler
    // attached meanwhile (`perf record -p`) sees only the writer.
    if let Some(pause) = std::env::var("WRITE_PROFILE_PAUSE")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        eprintln!("generated; writing in {pause} s");
        std::thread::sleep(std::time::Duration::from_secs_f64(pause));
    }
    let mut options = WriterOptions::default();
    if let Some(bytes) = args.next() {
        options.batch_bytes = bytes.parse()?;
    }
    if let Some(page) = args.next() {
        options.page_size = page.parse()?;
    }
    let mut clock = Clock::default();
    let mut writer = clock.time(|| Writer::create(&path, workload_header(seed, n), options))?;
    let mut records = records.into_iter();
    for r in 0..n {
        let record = match inline {
            true => workload_record(seed, r),
            false => records.next().expect("one generated per record"),
        };
        clock.time(|| writer.append(record))?;
    }
    let frames = writer.frames();
    let appended = clock.secs;
    clock.time(|| writer.finish(BTreeMap::new()))?;
    let Clock { secs, cpu, faults } = clock;
    let peak = mrec_cli::bench::peak_resident_bytes();
    let size = std::fs::metadata(&path)?.len();
    println!(
        "{n} records, {frames} frames: append {appended:.3} s, total {secs:.3} s \
         (cpu {cpu:.3} s, {faults} page faults), {:.0} frames/s, file {size} bytes, \
         peak resident {:.1} MiB",
        frames as f64 / secs,
        peak as f64 / f64::from(1 << 20)
    );
    Ok(())
}

/// Wall and CPU seconds and minor page faults of the timed calls only.
#[derive(Default)]
struct Clock {
    secs: f64,
    cpu: f64,
    faults: i64,
}

impl Clock {
    /// Runs `f`, adding its wall seconds, CPU seconds and page faults. The
    /// usage is read outside the wall interval: two system calls per
    /// record would otherwise be timed as the writer's.
    fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let (cpu, faults) = usage();
        let t = Instant::now();
        let result = f();
        self.secs += t.elapsed().as_secs_f64();
        let (cpu_after, faults_after) = usage();
        self.cpu += cpu_after - cpu;
        self.faults += faults_after - faults;
        result
    }
}

/// CPU seconds (user + system) and minor page faults of this process so far.
fn usage() -> (f64, i64) {
    // SAFETY: getrusage writes one `rusage` into the zeroed value we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (secs(usage.ru_utime) + secs(usage.ru_stime), usage.ru_minflt)
}
