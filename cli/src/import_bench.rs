//! `mrec import bench`: import speed against just decoding the same
//! source, and peak memory at two scales (docs/import.md).
//!
//! The workload is written here as an ASE-LMDB shard in ASE's own
//! encoding (`{"__ndarray__": [shape, dtype, flat]}`, Python's `json`
//! separators, zlib level 6, ASCII ids and `nextid`): molecules of 8 to
//! 64 atoms with positions, forces, energy, a zero cell and
//! key_value_pairs, the shape of a FairChem dataset. Each figure is a
//! child process (`mrec import aselmdb`, with `--decode-only` for the
//! baseline), timed by the wall clock; its peak resident memory is the
//! `VmHWM` it reports at its end (its own, not that of the page check's
//! child process).

use mrec_import::{ImportError, ShardWriter};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

type Res<T> = std::result::Result<T, ImportError>;

/// The benchmark's options.
pub struct BenchOptions {
    /// Rows of the small scale (the large one has 4 times as many).
    pub rows: u64,
    /// Timed runs of each figure (the median is reported).
    pub runs: usize,
    /// Directory for the files, kept there (default: a new temporary
    /// directory, deleted after).
    pub dir: Option<PathBuf>,
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A float in [-1, 1) from a seed.
fn unit(seed: u64) -> f64 {
    (mix(seed) >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

fn floats(out: &mut String, v: impl Iterator<Item = f64>) {
    for (i, x) in v.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{}", serde_json::Value::from(x));
    }
}

/// Row `id` (1-based) of the workload, as ASE's `encode` writes it.
pub fn workload_row(id: u64) -> String {
    let n = 8 + mix(id) % 57;
    let mut t = String::with_capacity(160 * n as usize + 600);
    t.push_str("{\"numbers\": {\"__ndarray__\": [[");
    let _ = write!(t, "{n}], \"int64\", [");
    for i in 0..n {
        if i > 0 {
            t.push_str(", ");
        }
        let z = [1, 6, 7, 8, 16][(mix(id * 131 + i) % 5) as usize];
        let _ = write!(t, "{z}");
    }
    let _ = write!(
        t,
        "]]}}, \"positions\": {{\"__ndarray__\": [[{n}, 3], \"float64\", ["
    );
    floats(&mut t, (0..3 * n).map(|k| 6.0 * unit(id << 20 | k)));
    t.push_str("]]}, \"unique_id\": \"");
    let _ = write!(t, "{:016x}{:016x}", mix(id), mix(!id));
    t.push_str("\", \"cell\": {\"__ndarray__\": [[3, 3], \"float64\", [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]}, \"pbc\": {\"__ndarray__\": [[3], \"bool\", [false, false, false]]}, \"calculator\": \"unknown\", \"calculator_parameters\": {}, \"energy\": ");
    let _ = write!(t, "{}", serde_json::Value::from(-100.0 * unit(!id)));
    let _ = write!(
        t,
        ", \"forces\": {{\"__ndarray__\": [[{n}, 3], \"float64\", ["
    );
    floats(&mut t, (0..3 * n).map(|k| unit(id << 21 | k)));
    let _ = write!(
        t,
        "]]}}, \"ctime\": 25.{id}, \"user\": \"bench\", \"mtime\": 25.{id}, \"key_value_pairs\": {{\"sid\": {}, \"fid\": {}}}, \"data\": {{}}}}",
        id / 8,
        id % 8
    );
    t
}

/// Writes an ASE-LMDB shard of `rows` workload rows.
pub fn write_workload(path: &Path, rows: u64) -> Res<u64> {
    let mut shard = ShardWriter::create(path, 6)?;
    for id in 1..=rows {
        shard.append(workload_row(id).as_bytes())?;
    }
    shard.finish()
}

/// One child run: wall seconds, CPU seconds (user and system, `wait4`'s
/// usage of the child) and the peak resident KiB it reports (its own
/// `VmHWM`, not that of the page check's child process).
fn child(args: &[&std::ffi::OsStr]) -> Res<(f64, f64, u64)> {
    use std::io::Read;
    let exe = std::env::current_exe().map_err(molrec::Error::Io)?;
    let start = Instant::now();
    let mut child = Command::new(exe)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(molrec::Error::Io)?;
    let (ok, cpu) = wait_rusage(&child)?;
    let secs = start.elapsed().as_secs_f64();
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    if !ok {
        return Err(ImportError::Bad(format!("mrec {args:?} failed: {stderr}")));
    }
    let peak = stderr
        .split("peak memory ")
        .nth(1)
        .and_then(|t| t.split_ascii_whitespace().next())
        .and_then(|k| k.parse().ok())
        .unwrap_or(0);
    Ok((secs, cpu, peak))
}

/// Waits for `child`: whether it succeeded, and its CPU seconds.
#[cfg(target_os = "linux")]
fn wait_rusage(child: &std::process::Child) -> Res<(bool, f64)> {
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value of the plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for this child, which nothing else waits for; both
    // pointers are to live locals.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    if pid < 0 {
        return Err(molrec::Error::Io(std::io::Error::last_os_error()).into());
    }
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Ok((ok, secs(usage.ru_utime) + secs(usage.ru_stime)))
}

#[cfg(not(target_os = "linux"))]
fn wait_rusage(child: &std::process::Child) -> Res<(bool, f64)> {
    let _ = child;
    Err(ImportError::Bad(
        "mrec import bench runs on Linux only".into(),
    ))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Runs the benchmark and prints its table.
pub fn run(options: &BenchOptions) -> Res<()> {
    if cfg!(debug_assertions) {
        eprintln!("mrec import bench: a debug build; build with --release for meaningful figures");
    }
    let dir = match &options.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("mrec-import-bench-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).map_err(|e| molrec::Error::io_at(&dir, e))?;
    let mut lines = Vec::new();
    let mut peaks = Vec::new();
    for rows in [options.rows, 4 * options.rows] {
        let src = dir.join(format!("bench-{rows}.aselmdb"));
        let out = dir.join(format!("bench-{rows}.mrec.lmdb"));
        eprintln!(
            "mrec import bench: writing {rows} rows to {}",
            src.display()
        );
        let json_bytes = write_workload(&src, rows)?;
        let file_bytes = std::fs::metadata(&src).map_or(0, |m| m.len());
        let (mut decode, mut import) = (Vec::new(), Vec::new());
        let (mut decode_cpu, mut import_cpu) = (Vec::new(), Vec::new());
        let (mut decode_peak, mut import_peak) = (0, 0);
        for run in 0..options.runs {
            eprintln!(
                "mrec import bench: {rows} rows, run {}/{}",
                run + 1,
                options.runs
            );
            let (s, cpu, peak) = child(&[
                "import".as_ref(),
                "aselmdb".as_ref(),
                "--quiet".as_ref(),
                "--decode-only".as_ref(),
                src.as_os_str(),
                out.as_os_str(),
            ])?;
            decode.push(s);
            decode_cpu.push(cpu);
            decode_peak = decode_peak.max(peak);
            let (s, cpu, peak) = child(&[
                "import".as_ref(),
                "aselmdb".as_ref(),
                "--quiet".as_ref(),
                "--overwrite".as_ref(),
                src.as_os_str(),
                out.as_os_str(),
            ])?;
            import.push(s);
            import_cpu.push(cpu);
            import_peak = import_peak.max(peak);
        }
        let (d, i) = (median(decode), median(import));
        let (dc, ic) = (median(decode_cpu), median(import_cpu));
        peaks.push(import_peak);
        lines.push(format!(
            "{rows:>9} {:>8.1} {:>8.1} {:>9.0} {:>9.0} {:>6.2} {:>7.2} {:>7.2} {:>9.1} {:>9.1}",
            json_bytes as f64 / 1048576.0,
            file_bytes as f64 / 1048576.0,
            rows as f64 / d,
            rows as f64 / i,
            d / i,
            dc,
            ic,
            decode_peak as f64 / 1024.0,
            import_peak as f64 / 1024.0,
        ));
        if options.dir.is_none() {
            molrec::lmdb::remove_with_lock_file(&src);
            molrec::lmdb::remove_with_lock_file(&out);
        }
    }
    if options.dir.is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!("mrec import bench: ASE-LMDB rows of 8-64 atoms (positions, forces, energy), median of {} run(s)", options.runs);
    println!("     rows  JSON MiB file MiB  decode/s  import/s  ratio cpu dec cpu imp  peak dec  peak imp");
    for l in &lines {
        println!("{l}");
    }
    println!(
        "rows/s by the wall clock; ratio = import/s over decode/s; cpu = user + system seconds of the run;"
    );
    println!(
        "peak = the run's VmHWM in MiB; import's peak at 4x rows / at 1x rows = {:.2}",
        peaks[1] as f64 / peaks[0].max(1) as f64
    );
    Ok(())
}
