//! A profiling driver for the streaming writer: generates the benchmark's
//! workload in memory first, then times only `Writer::append` and `finish`,
//! so that `perf record` sees the writer and nothing else of `mrec bench`.
//!
//! ```text
//! cargo build --release --example write_profile
//! perf record --call-graph dwarf target/release/examples/write_profile 500 /tmp/p.mrec.lmdb
//! target/release/examples/write_profile RECORDS PATH BATCH_BYTES PAGE_SIZE
//! ```

/// The allocator `mrec` runs with, so the profile is of what `mrec bench` measures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use molrec::bench::{workload_header, workload_record};
use molrec::lmdb::{Writer, WriterOptions};
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
    // Generated up front: the timed loop below is the writer alone.
    let records: Vec<_> = (0..n).map(|r| workload_record(seed, r)).collect();
    // `WRITE_PROFILE_PAUSE=S`: wait S seconds here, so that a profiler
    // attached meanwhile (`perf record -p`) sees only the writer.
    if let Some(pause) = std::env::var("WRITE_PROFILE_PAUSE")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        eprintln!("generated; writing in {pause} s");
        std::thread::sleep(std::time::Duration::from_secs_f64(pause));
    }
    let (t, cpu, faults) = (Instant::now(), cpu_secs(), minor_faults());
    let mut options = WriterOptions::default();
    if let Some(bytes) = args.next() {
        options.batch_bytes = bytes.parse()?;
    }
    if let Some(page) = args.next() {
        options.page_size = page.parse()?;
    }
    let mut writer = Writer::create(&path, workload_header(seed, n), options)?;
    for record in records {
        writer.append(record)?;
    }
    let frames = writer.frames();
    let appended = t.elapsed().as_secs_f64();
    writer.finish(BTreeMap::new())?;
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu;
    let faults = minor_faults() - faults;
    let size = std::fs::metadata(&path)?.len();
    println!(
        "{n} records, {frames} frames: append {appended:.3} s, total {secs:.3} s \
         (cpu {cpu:.3} s, {faults} page faults), {:.0} frames/s, file {size} bytes",
        frames as f64 / secs
    );
    Ok(())
}

/// Minor page faults of this process so far.
fn minor_faults() -> i64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed value we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    usage.ru_minflt
}

/// CPU seconds (user + system) of this process so far.
fn cpu_secs() -> f64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed value we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}
