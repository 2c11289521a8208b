//! What the machine and the process are doing: memory, CPU time, page
//! faults, load, the CPU's cache, DAMON.

use super::*;

/// Resident memory of this process, from /proc/self/status (bytes).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Mem {
    pub(super) rss: u64,
    pub(super) hwm: u64,
    pub(super) anon: u64,
    pub(super) file: u64,
}

/// The peak resident memory of this process so far (`VmHWM`, bytes), as
/// the write's figure reads it (public for profiling drivers).
pub fn peak_resident_bytes() -> u64 {
    mem().hwm
}

pub(super) fn mem() -> Mem {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mut m = Mem::default();
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let kb = rest
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .unwrap_or(0)
            * 1024;
        match key {
            "VmRSS" => m.rss = kb,
            "VmHWM" => m.hwm = kb,
            "RssAnon" => m.anon = kb,
            "RssFile" => m.file = kb,
            _ => {}
        }
    }
    m
}

/// Major page faults of this process so far (field 12 of /proc/self/stat).
pub(super) fn major_faults_so_far() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(9))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Whether the kernel's DAMON runs a `pageout` scheme: it evicts pages not
/// touched for a while, page-cache pages of the benchmark's files too, so
/// a "warm" cache can turn cold between passes (the major faults show it).
pub(super) fn damon_pageout() -> bool {
    let root = Path::new("/sys/kernel/mm/damon/admin/kdamonds");
    let Ok(kdamonds) = std::fs::read_dir(root) else {
        return false;
    };
    kdamonds.flatten().any(|k| {
        let on = std::fs::read_to_string(k.path().join("state")).is_ok_and(|s| s.trim() == "on");
        let pageout = std::fs::read_dir(k.path().join("contexts")).is_ok_and(|contexts| {
            contexts.flatten().any(|c| {
                std::fs::read_dir(c.path().join("schemes")).is_ok_and(|schemes| {
                    schemes.flatten().any(|sc| {
                        std::fs::read_to_string(sc.path().join("action"))
                            .is_ok_and(|a| a.trim() == "pageout")
                    })
                })
            })
        });
        on && pageout
    })
}

/// User + system CPU seconds of this process so far (all threads), from
/// /proc/self/stat, in clock ticks of 1/100 s.
pub(super) fn cpu_secs() -> f64 {
    let (user, system) = cpu_user_system_secs();
    user + system
}

/// User and system (kernel) CPU seconds of this process so far (all
/// threads), from /proc/self/stat, in clock ticks of 1/100 s. The write
/// reports them apart: its slow runs spend the extra time in the kernel.
pub(super) fn cpu_user_system_secs() -> (f64, f64) {
    user_system_secs(&std::fs::read_to_string("/proc/self/stat").unwrap_or_default())
}

/// The user and system seconds of a `/proc/.../stat` text (a process's or
/// a thread's: the same fields); zero where a field is missing.
pub(super) fn user_system_secs(stat: &str) -> (f64, f64) {
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    // After the command name: state is field 3, utime 14, stime 15.
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(11) / 100.0, tick(12) / 100.0)
}

/// A note for the table when the write spent more CPU in the kernel than
/// in user code: then its pace was the kernel's (taking the file into the
/// page cache), not the writer's, and the write figure says more about the
/// machine than about the binding. Not below 0.2 s of kernel time: the
/// counters tick at 1/100 s, too coarse to compare a short write's parts.
pub(super) fn kernel_bound_write_note(user_secs: f64, system_secs: f64) -> Option<String> {
    (system_secs > user_secs && system_secs >= 0.2).then(|| {
        format!(
            "note: the write spent more CPU in the kernel ({system_secs:.2} s) than in user code \
             ({user_secs:.2} s, the generator's included): its pace was the kernel's, taking the \
             file into the page cache (docs/benchmark.md, \"What limits the figures\")\n"
        )
    })
}

/// The 1-minute load average (runnable processes), from /proc/loadavg.
pub(super) fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
        .unwrap_or(f64::NAN)
}

/// A field of /proc/meminfo (`MemTotal`, `MemAvailable`, ...) in bytes.
pub(super) fn meminfo_bytes(field: &str) -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb = meminfo.lines().find_map(|l| {
        l.strip_prefix(field)?
            .strip_prefix(':')?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
    })?;
    Some(kb.saturating_mul(1024))
}

pub(super) fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|r| r.trim_start_matches([' ', '\t', ':']))
        })
        .unwrap_or("unknown")
        .to_string();
    let mem_bytes = meminfo_bytes("MemTotal");
    json!({
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": cpu,
        "memory_bytes": mem_bytes,
        "last_level_cache_bytes": last_level_cache_bytes(Path::new("/sys/devices/system/cpu/cpu0/cache")),
        "os": std::env::consts::OS,
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string()).ok(),
        "release_build": !cfg!(debug_assertions),
    })
}

/// The size of CPU 0's last-level cache: the highest level that holds data
/// (the largest, if sysfs lists two), from sysfs (`cache`:
/// `/sys/devices/system/cpu/cpu0/cache`). A file it holds reads in
/// shuffled order nearly as fast as in order; one larger is read from
/// memory (docs/benchmark.md).
pub(super) fn last_level_cache_bytes(cache: &Path) -> Option<u64> {
    let field = |dir: &Path, name: &str| std::fs::read_to_string(dir.join(name)).ok();
    std::fs::read_dir(cache)
        .ok()?
        .flatten()
        .map(|entry| entry.path())
        .filter(|dir| field(dir, "type").is_some_and(|t| t.trim() != "Instruction"))
        .filter_map(|dir| {
            let level: u32 = field(&dir, "level")?.trim().parse().ok()?;
            Some((level, cache_size_bytes(&field(&dir, "size")?)?))
        })
        .max()
        .map(|(_, bytes)| bytes)
}

/// A sysfs cache size (`48K`, `2048K`, `32M`) in bytes.
pub(super) fn cache_size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, ""),
    };
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

/// A note for the table when the collection file is larger than the CPU's
/// last-level cache: then a shuffled read fetches each record from memory,
/// and reads slower than on a file the cache holds (the peer, bound by
/// zlib and JSON, does not).
pub(super) fn file_beyond_cache_note(file_bytes: u64, cache_bytes: Option<u64>) -> Option<String> {
    let cache = cache_bytes.filter(|&c| c > 0 && file_bytes > c)?;
    Some(format!(
        "note: the collection file ({}) is larger than the CPU's last-level cache ({}): the \
         shuffled reads fetch each record from memory, slower than from a file the cache holds \
         (docs/benchmark.md, \"What limits the figures\")\n",
        mib(file_bytes),
        mib(cache)
    ))
}

/// Bytes the two files take per record, a tenth over what they took at the
/// default scale (ours 406,913,024 and the peer's 642,260,992 for 8,400
/// records: 48,443 and 76,460 per record), for the spread of the
/// workload's sizes.
pub(super) const FILES_BYTES_PER_RECORD: u64 = (48_443 + 76_460) * 11 / 10;

/// Refuses a run whose two files (`files`, which replace any files of
/// those names) would not fit in the free space of `dir`'s file system (or
/// whose size does not fit a `u64`) before anything is generated; warns
/// when they would not fit in the memory available for the page cache,
/// where every read figure is meant to be taken.
pub(super) fn check_room(dir: &Path, files: &[&Path], records: u64) -> Result<()> {
    let gib = |bytes: u64| bytes as f64 / f64::from(1u32 << 30);
    let Some(needed) = records.checked_mul(FILES_BYTES_PER_RECORD) else {
        return Err(Error::io_at(
            dir,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("{records} records: the files' size does not fit in 64 bits"),
            ),
        ));
    };
    let replaced: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    if let Some(free) = molrec::lmdb::free_bytes(dir).map(|f| f.saturating_add(replaced)) {
        if needed > free {
            return Err(Error::io_at(
                dir,
                std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    format!(
                        "{records} records need about {:.1} GiB for the two files, and the \
                         file system has {:.1} GiB free",
                        gib(needed),
                        gib(free)
                    ),
                ),
            ));
        }
    }
    let available = meminfo_bytes("MemAvailable");
    if let Some(available) = available.filter(|&a| needed > a) {
        eprintln!(
            "mrec bench: the two files (about {:.1} GiB) may not stay in the page cache \
             ({:.1} GiB of memory available): a read figure may include disk reads (see \
             its major faults)",
            gib(needed),
            gib(available)
        );
    }
    Ok(())
}
