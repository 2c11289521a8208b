//! The run: the files, the write, the read rounds, and the report (table
//! and JSON).

use super::*;

/// Deletes what the run created unless asked to keep it: when the run
/// ends, or through [`remove_files_of_runs_in_progress`] when the process
/// is interrupted first. What to delete waits in [`PENDING`] under `id`
/// (`None` for a run that keeps its files).
pub(super) struct Cleanup {
    pub(super) id: Option<u64>,
}

/// The files (and temporary directory) of every run in progress that does
/// not keep them, by [`Cleanup::id`].
pub(super) type Pending = BTreeMap<u64, (Vec<PathBuf>, Option<PathBuf>)>;
pub(super) static PENDING: std::sync::Mutex<Pending> = std::sync::Mutex::new(BTreeMap::new());

pub(super) fn pending() -> std::sync::MutexGuard<'static, Pending> {
    // A panic while the map was held left it whole: every update is one call.
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cleanup {
    pub(super) fn new(files: Vec<PathBuf>, dir: Option<PathBuf>, keep: bool) -> Cleanup {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let id = (!keep).then(|| NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        if let Some(id) = id {
            pending().insert(id, (files, dir));
        }
        Cleanup { id }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let run = self.id.and_then(|id| pending().remove(&id));
        if let Some((files, dir)) = run {
            remove_run_files(&files, dir.as_deref());
        }
    }
}

pub(super) fn remove_run_files(files: &[PathBuf], dir: Option<&Path>) {
    for f in files {
        remove_lmdb(f);
    }
    if let Some(d) = dir {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// Held while a run creates or opens its files (an LMDB open creates the
/// `-lock` file), and taken for good by
/// [`remove_files_of_runs_in_progress`]: each such step of a run ends
/// before the interrupt's deletion starts, or never starts.
static FILE_STEPS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `step`, run while no interrupt deletes the run's files.
pub(super) fn file_step<T>(step: impl FnOnce() -> T) -> T {
    let _held = FILE_STEPS.lock().unwrap_or_else(|e| e.into_inner());
    step()
}

/// Deletes the files of every run of this process still in progress (those
/// not asked to keep them), as each run does when it ends: for a program
/// about to exit on an interrupt (`mrec bench` calls it on Ctrl-C), which
/// would otherwise leave gigabytes behind. It waits for a run's file step
/// in progress (creating the collection, renaming it, opening a file) to
/// end, and every later one waits for ever: call it only on the way out.
pub fn remove_files_of_runs_in_progress() {
    std::mem::forget(FILE_STEPS.lock().unwrap_or_else(|e| e.into_inner()));
    let runs = std::mem::take(&mut *pending());
    for (files, dir) in runs.values() {
        remove_run_files(files, dir.as_deref());
    }
}

pub(super) fn bar(progress: bool, len: u64, prefix: &'static str, unit: &str) -> ProgressBar {
    if !progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len).with_prefix(prefix);
    if let Ok(style) = ProgressStyle::with_template(&format!(
        "{{prefix:>24}} [{{bar:32}}] {{pos}}/{{len}} {unit}  {{msg}}  {{elapsed_precise}} (eta {{eta}})"
    )) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Runs the whole benchmark and returns its figures.
pub fn run(opts: &BenchOptions) -> Result<Report> {
    if opts.records == 0 || opts.passes == 0 {
        return Err(Error::Io(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the records and the passes must be at least 1",
        )));
    }
    let say = |s: String| {
        if opts.progress {
            eprintln!("{s}");
        }
    };
    // The directory and its files' cleanup come in one step: an interrupt
    // finds a temporary directory registered for deletion, or none.
    let (dir, temp, _cleanup) = file_step(|| -> Result<(PathBuf, bool, Cleanup)> {
        let (dir, temp) = match &opts.dir {
            Some(d) => {
                std::fs::create_dir_all(d).map_err(|e| Error::io_at(d, e))?;
                (d.clone(), false)
            }
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0);
                let d =
                    std::env::temp_dir().join(format!("mrec-bench-{}-{nanos}", std::process::id()));
                std::fs::create_dir_all(&d).map_err(|e| Error::io_at(&d, e))?;
                (d, true)
            }
        };
        let files = vec![dir.join("bench.mrec.lmdb"), dir.join("peer.ase.lmdb")];
        let cleanup = Cleanup::new(files, temp.then(|| dir.clone()), opts.keep);
        Ok((dir, temp, cleanup))
    })?;
    let path = dir.join("bench.mrec.lmdb");
    let peer_path = dir.join("peer.ase.lmdb");
    check_room(&dir, &[&path, &peer_path], opts.records)?;
    // The room check counts the files of an earlier run as free: they go
    // now, not when the new ones replace them.
    remove_lmdb(&path);
    remove_lmdb(&peer_path);
    let n = opts.records;
    let seed = opts.seed;
    let load_start = loadavg();

    // (1) Write, one record at a time.
    let header = workload_header(seed, n);
    let mem_before = mem();
    let cpu_start = cpu_user_system_secs();
    let wall = Instant::now();
    let mut writer_secs = 0.0f64;
    let t = Instant::now();
    let mut writer = file_step(|| {
        Writer::create(
            &path,
            header,
            WriterOptions {
                overwrite: true,
                ..WriterOptions::default()
            },
        )
    })?;
    writer_secs += t.elapsed().as_secs_f64();
    let mem_start = mem();
    let mut samples: Vec<(u64, Mem)> = vec![(0, mem_start)];
    let mut max_rss = mem_start.rss;
    let mut max_anon = mem_start.anon;
    let sample_every = (n / 100).max(1);
    let mut codes = Vec::with_capacity(n as usize);
    let mut masks = Vec::with_capacity(n as usize);
    let mut heavy = Vec::with_capacity(n as usize);
    let mut counts: Vec<u64> = Vec::with_capacity(n as usize);
    let (mut payload, mut atom_frames) = (0u64, 0u64);
    let write_bar = bar(opts.progress, n, "(1) write mrec", "records");
    for r in 0..n {
        let m = Molecule::generate(seed, r);
        payload += m.payload_bytes();
        counts.push(m.frames.len() as u64);
        atom_frames += (m.n_atoms() * m.frames.len()) as u64;
        codes.push(m.code.clone());
        masks.push(m.element_mask());
        heavy.push(m.heavy_atoms());
        let record = m.into_record();
        let t = Instant::now();
        writer.append(record)?;
        writer_secs += t.elapsed().as_secs_f64();
        if (r + 1) % sample_every == 0 {
            let m = mem();
            max_rss = max_rss.max(m.rss);
            max_anon = max_anon.max(m.anon);
            samples.push((r + 1, m));
        }
        write_bar.inc(1);
        if r % 64 == 0 {
            write_bar.set_message(format!("{} frames", thousands(writer.frames())));
        }
    }
    let n_frames = writer.frames();
    let index = BTreeMap::from([
        (
            "code".to_string(),
            Column::new(vec![n], ColumnData::String(codes)),
        ),
        (
            "element_mask".to_string(),
            Column::new(vec![n], ColumnData::U64(masks)),
        ),
        (
            "heavy_atoms".to_string(),
            Column::new(vec![n], ColumnData::U64(heavy)),
        ),
    ]);
    let t = Instant::now();
    file_step(|| writer.finish(index))?;
    let finish_secs = t.elapsed().as_secs_f64();
    writer_secs += finish_secs;
    let write_wall = wall.elapsed().as_secs_f64();
    let cpu_end = cpu_user_system_secs();
    let write_cpu_user = cpu_end.0 - cpu_start.0;
    let write_cpu_system = cpu_end.1 - cpu_start.1;
    write_bar.finish_and_clear();
    let mem_end = mem();
    max_rss = max_rss.max(mem_end.rss);
    max_anon = max_anon.max(mem_end.anon);
    samples.push((n, mem_end));
    let file_bytes = std::fs::metadata(&path)?.len();
    say(format!(
        "wrote {} records, {} frames in {:.2} s ({:.2} s in the writer) to {}",
        thousands(n),
        thousands(n_frames),
        write_wall,
        writer_secs,
        path.display()
    ));

    let first: Vec<u64> = counts
        .iter()
        .scan(0u64, |s, &c| {
            let f = *s;
            *s += c;
            Some(f)
        })
        .collect();

    // The peer file: the same frames as ASE-LMDB rows.
    let peer_bar = bar(opts.progress, n, "write peer file", "records");
    let peer_env = file_step(|| create_peer(&peer_path))?;
    let peer_write = write_peer(peer_env, &peer_path, seed, &first, n_frames, &peer_bar)?;
    peer_bar.finish_and_clear();
    say(format!(
        "wrote the peer file ({} bytes) in {:.2} s",
        thousands(peer_write.file_bytes),
        peer_write.secs
    ));

    let order = shuffled(n, seed);
    let reader = file_step(|| Reader::open(&path))?;
    if (0..n).any(|r| reader.record_frames(r) != Some(counts[r as usize])) {
        return Err(Error::Lmdb(
            "the index disagrees with the frames written".into(),
        ));
    }
    let passes = opts.passes;
    say(format!(
        "measuring the read figures: 1 warm-up round + {passes} rounds, each one pass of every figure"
    ));
    let (peer_env, peer_db) = file_step(|| open_ro(&peer_path))?;
    let (env, db) = reader.raw();
    let arrays = || arrays_pass(&reader.txn()?, &order);
    let index_order: Vec<u64> = (0..n).collect();
    let arrays_in_order = || arrays_pass(&reader.txn()?, &index_order);
    let raw = || raw_pass(env, db, &order, &first, &counts).map(Seen::bytes);
    let owned = || owned_pass(&reader.txn()?, &order).map(Seen::frames);
    let views = || views_pass(&reader.txn()?, &order);
    let threads = || two_thread_pass(&reader, &order, arrays_pass);
    let threads_views = || two_thread_pass(&reader, &order, views_pass);
    let index = || index_pass(&reader).map(Seen::matches);
    let page_check = || check_pages(&path).map(|_| Seen::default());
    let digest = || file_digest(&path).map(|_| Seen::default());
    let peer = || {
        let (frames, sum_x) = peer_pass(&peer_env, &peer_db, &order, &first, &counts)?;
        Ok(Seen {
            sum_x,
            ..Seen::frames(frames)
        })
    };
    // Before each round, untimed, both files are read once: the page cache
    // may have dropped them during the last round (see `damon_pageout`).
    let touch = || {
        raw_pass(env, db, &order, &first, &counts)?;
        touch_all(&peer_env, &peer_db).map(Seen::bytes)
    };
    let mut figures: [(&str, &dyn Fn() -> Result<Seen>); 12] = [
        ("touch both files", &touch),
        ("(2) owned arrays", &arrays),
        ("(2c) owned arrays, index order", &arrays_in_order),
        ("(4) raw LMDB", &raw),
        ("(2b) owned model", &owned),
        ("(3) views", &views),
        ("(7) two threads, owned arrays", &threads),
        ("(7b) two threads, views", &threads_views),
        ("(6) index query", &index),
        ("(8) page check", &page_check),
        ("(9) digest", &digest),
        ("(5) peer", &peer),
    ];
    let round_bar = bar(opts.progress, passes as u64 + 1, "read rounds", "rounds");
    let (timings, seen) = measure_rounds(passes, &round_bar, &mut figures)?;
    let [_, arrays_t, in_order_t, raw_t, owned_t, views_t, threads_t, threads_views_t, index_t, check_t, digest_t, peer_t] =
        timings;
    let [_, arrays_tally, in_order_tally, raw_seen, owned_seen, views_tally, threads_tally, threads_views_tally, index_seen, _, _, peer_seen] =
        seen;
    let (raw_bytes, owned_frames) = (raw_seen.bytes, owned_seen.frames);
    let (small, hits) = index_seen.matches;
    let (peer_frames, peer_sum_x) = (peer_seen.frames, peer_seen.sum_x);
    drop(peer_env);
    drop(reader);
    let mem_final = mem();
    let load_end = loadavg();

    for (what, got) in [
        ("owned arrays", arrays_tally.frames),
        ("owned arrays in index order", in_order_tally.frames),
        ("owned model", owned_frames),
        ("views", views_tally.frames),
        ("two threads", threads_tally.frames),
        ("two threads, views", threads_views_tally.frames),
        ("peer", peer_frames),
    ] {
        if got != n_frames {
            return Err(Error::Lmdb(format!(
                "the {what} pass read {got} frames, the file has {n_frames}"
            )));
        }
    }
    for (what, sum_x) in [
        ("views", views_tally.sum_x),
        ("owned arrays", arrays_tally.sum_x),
        ("owned arrays in index order", in_order_tally.sum_x),
    ] {
        if (sum_x - peer_sum_x).abs() > 1e-6 * (1.0 + peer_sum_x.abs()) {
            return Err(Error::Lmdb(format!(
                "{what} and peer disagree on the sum of x: {sum_x} vs {peer_sum_x}"
            )));
        }
    }

    let figures = Figures {
        opts: opts.clone(),
        dir,
        temp,
        n_records: n,
        n_frames,
        atom_frames,
        payload,
        file_bytes,
        writer_secs,
        finish_secs,
        write_wall,
        write_cpu_user,
        write_cpu_system,
        mem_before,
        mem_start,
        mem_end,
        max_rss,
        max_anon,
        samples,
        peer_write,
        arrays: arrays_t,
        arrays_in_order: in_order_t,
        owned: owned_t,
        views: views_t,
        views_tally,
        raw: raw_t,
        raw_bytes,
        peer: peer_t,
        index: index_t,
        index_hits: (small, hits),
        page_check: check_t,
        digest: digest_t,
        threads: threads_t,
        threads_views: threads_views_t,
        mem_final,
        load: (load_start, load_end),
        damon_pageout: damon_pageout(),
    };
    Ok(figures.report())
}

/// Everything measured, before formatting.
pub(super) struct Figures {
    pub(super) opts: BenchOptions,
    pub(super) dir: PathBuf,
    pub(super) temp: bool,
    pub(super) n_records: u64,
    pub(super) n_frames: u64,
    pub(super) atom_frames: u64,
    pub(super) payload: u64,
    pub(super) file_bytes: u64,
    pub(super) writer_secs: f64,
    /// Of `writer_secs`, the time in `Writer::finish`.
    pub(super) finish_secs: f64,
    pub(super) write_wall: f64,
    /// User CPU seconds of the process over `write_wall`.
    pub(super) write_cpu_user: f64,
    /// System (kernel) CPU seconds of the process over `write_wall`.
    pub(super) write_cpu_system: f64,
    pub(super) mem_before: Mem,
    pub(super) mem_start: Mem,
    pub(super) mem_end: Mem,
    pub(super) max_rss: u64,
    pub(super) max_anon: u64,
    pub(super) samples: Vec<(u64, Mem)>,
    pub(super) peer_write: PeerWrite,
    pub(super) arrays: Timing,
    /// (2c): the arrays read in index order.
    pub(super) arrays_in_order: Timing,
    pub(super) owned: Timing,
    pub(super) views: Timing,
    pub(super) views_tally: Seen,
    pub(super) raw: Timing,
    pub(super) raw_bytes: u64,
    pub(super) peer: Timing,
    pub(super) index: Timing,
    pub(super) index_hits: (u64, u64),
    /// (8): `check_pages` of the collection file.
    pub(super) page_check: Timing,
    /// (9): the collection file's content digest (`file_digest`).
    pub(super) digest: Timing,
    pub(super) threads: Timing,
    pub(super) threads_views: Timing,
    pub(super) mem_final: Mem,
    /// 1-minute load average at the start and at the end.
    pub(super) load: (f64, f64),
    /// Whether DAMON's pageout scheme runs ([`damon_pageout`]).
    pub(super) damon_pageout: bool,
}

/// One line of the table.
pub(super) struct Row {
    pub(super) label: String,
    pub(super) median: String,
    pub(super) min: String,
    pub(super) max: String,
    pub(super) target: String,
    pub(super) met: Option<bool>,
    /// CPU seconds / wall seconds of the passes behind the figure.
    pub(super) cpu: String,
}

pub(super) fn row(label: &str, median: String, min: String, max: String) -> Row {
    Row {
        label: label.to_string(),
        median,
        min,
        max,
        target: String::new(),
        met: None,
        cpu: String::new(),
    }
}

impl Row {
    pub(super) fn target(mut self, target: &str, met: bool) -> Row {
        self.target = target.to_string();
        self.met = Some(met);
        self
    }

    pub(super) fn cpu(mut self, share: f64) -> Row {
        self.cpu = if share.is_finite() {
            format!("{share:.2}")
        } else {
            "-".into()
        };
        self
    }
}

pub(super) fn thousands(v: u64) -> String {
    let s = v.to_string();
    let head = match s.len() % 3 {
        0 => 3.min(s.len()),
        k => k,
    };
    let mut out = s[..head].to_string();
    for group in s.as_bytes()[head..].chunks(3) {
        out.push(',');
        out.push_str(std::str::from_utf8(group).unwrap_or(""));
    }
    out
}

pub(super) fn rate(v: f64) -> String {
    thousands(v.round() as u64)
}

pub(super) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

pub(super) fn signed_mib(delta: i64) -> String {
    format!("{:+.1} MiB", delta as f64 / (1u64 << 20) as f64)
}

pub(super) fn times(v: f64) -> String {
    format!("{v:.2}x")
}

impl Figures {
    /// CPU seconds of the process over `write_wall`, user and system.
    pub(super) fn write_cpu(&self) -> f64 {
        self.write_cpu_user + self.write_cpu_system
    }

    pub(super) fn report(&self) -> Report {
        let n_frames = self.n_frames;
        let arrays = self.arrays.rate(n_frames);
        let in_order = self.arrays_in_order.rate(n_frames);
        let owned = self.owned.rate(n_frames);
        let views = self.views.rate(n_frames);
        let raw = self.raw.rate(n_frames);
        let peer = self.peer.rate(n_frames);
        let threads = self.threads.rate(n_frames);
        let threads_views = self.threads_views.rate(n_frames);
        let index = self.index.rate(self.n_records);
        let write_rate = n_frames as f64 / self.writer_secs;
        let file_ratio = self.file_bytes as f64 / self.payload as f64;
        let arrays_raw = time_ratio(&self.arrays, &self.raw);
        let owned_raw = time_ratio(&self.owned, &self.raw);
        let views_raw = time_ratio(&self.views, &self.raw);
        // Speed ratios: (a frames/s) / (b frames/s) = time(b) / time(a).
        let arrays_peer = time_ratio(&self.peer, &self.arrays);
        let owned_peer = time_ratio(&self.peer, &self.owned);
        let views_peer = time_ratio(&self.peer, &self.views);
        let threads_arrays = time_ratio(&self.arrays, &self.threads);
        let in_order_arrays = time_ratio(&self.arrays, &self.arrays_in_order);
        let threads_views_scaling = time_ratio(&self.views, &self.threads_views);
        let check_arrays = time_ratio(&self.page_check, &self.arrays);
        let digest_arrays = time_ratio(&self.digest, &self.arrays);
        let rss_growth = self.mem_end.rss as i64 - self.mem_start.rss as i64;
        let anon_growth = self.max_anon as i64 - self.mem_start.anon as i64;
        let tally = self.views_tally;
        let f64_columns = tally.views + tally.fallbacks;
        let fallback_share = tally.fallbacks as f64 / f64_columns.max(1) as f64;

        let r3 = |s: Spread, f: fn(f64) -> String| (f(s.median), f(s.min), f(s.max));
        let mut rows = Vec::new();
        let dash = || "-".to_string();
        rows.push(
            row(
                "(1) write (Writer::append + finish)",
                format!("{} frames/s", rate(write_rate)),
                "single run".into(),
                dash(),
            )
            .target(">= 500,000 frames/s", write_rate >= 500_000.0)
            .cpu(self.write_cpu() / self.write_wall),
        );
        rows.push(row(
            "    of which Writer::finish (index, r/s values, syncs)",
            format!("{:.2} s", self.finish_secs),
            format!("of {:.2} s", self.writer_secs),
            dash(),
        ));
        rows.push(row(
            "    write incl. generating the records",
            format!("{} frames/s", rate(n_frames as f64 / self.write_wall)),
            "single run".into(),
            dash(),
        ));
        rows.push(row(
            "    CPU incl. generating: user / system (kernel)",
            format!("{:.2} s", self.write_cpu_user),
            format!("{:.2} s", self.write_cpu_system),
            format!("of {:.2} s wall", self.write_wall),
        ));
        rows.push(row(
            "    peak resident memory (VmHWM)",
            mib(self.mem_end.hwm),
            dash(),
            dash(),
        ));
        rows.push(row(
            "    RSS during write: start -> end (max)",
            format!("{} -> {}", mib(self.mem_start.rss), mib(self.mem_end.rss)),
            format!("growth {}", signed_mib(rss_growth)),
            format!("max {}", mib(self.max_rss)),
        ));
        rows.push(row(
            "    anonymous RSS: start -> max",
            format!("{} -> {}", mib(self.mem_start.anon), mib(self.max_anon)),
            format!("growth {}", signed_mib(anon_growth)),
            dash(),
        ));
        let at = |q: u64| {
            let want = self.n_records * q / 4;
            self.samples
                .iter()
                .find(|(r, _)| *r >= want)
                .map_or(0, |(_, m)| m.anon)
        };
        rows.push(row(
            "    anonymous RSS at 25% / 50% / 75% / 100%",
            format!("{} / {}", mib(at(1)), mib(at(2))),
            format!("{} / {}", mib(at(3)), mib(at(4))),
            dash(),
        ));
        rows.push(
            row(
                "    file size / raw payload",
                times(file_ratio),
                mib(self.file_bytes),
                format!("payload {}", mib(self.payload)),
            )
            .target("<= 1.25x", file_ratio <= 1.25),
        );
        rows.push(row(
            "    of which: stored values / payload",
            times(self.raw_bytes as f64 / self.payload as f64),
            mib(self.raw_bytes),
            "r, s, f values".into(),
        ));
        rows.push(row(
            "    of which: file / stored values",
            times(self.file_bytes as f64 / self.raw_bytes as f64),
            dash(),
            "LMDB pages".into(),
        ));
        let (m, lo, hi) = r3(arrays, rate);
        rows.push(
            row("(2) read shuffled, owned arrays (frames/s)", m, lo, hi)
                .target(">= 1,000,000 frames/s", arrays.median >= 1e6)
                .cpu(self.arrays.cpu_share()),
        );
        let (m, lo, hi) = r3(in_order, rate);
        rows.push(
            row(
                "(2c) read in index order, owned arrays (frames/s)",
                m,
                lo,
                hi,
            )
            .cpu(self.arrays_in_order.cpu_share()),
        );
        let (m, lo, hi) = r3(in_order_arrays, times);
        rows.push(row("    speed (2c)/(2): what the shuffle costs", m, lo, hi));
        let (m, lo, hi) = r3(owned, rate);
        rows.push(
            row("(2b) read shuffled, owned model (frames/s)", m, lo, hi)
                .cpu(self.owned.cpu_share()),
        );
        let (m, lo, hi) = r3(views, rate);
        rows.push(
            row("(3) read shuffled, views (frames/s)", m, lo, hi).cpu(self.views.cpu_share()),
        );
        rows.push(row(
            "    f64 columns viewed / copied (unaligned)",
            thousands(tally.views),
            thousands(tally.fallbacks),
            format!("{:.1}% copied", 100.0 * fallback_share),
        ));
        let (m, lo, hi) = r3(raw, rate);
        rows.push(row("(4) raw LMDB values, heed (frames/s)", m, lo, hi).cpu(self.raw.cpu_share()));
        let (m, lo, hi) = r3(arrays_raw, times);
        rows.push(row("    time (2)/(4)", m, lo, hi).target("<= 3x", arrays_raw.median <= 3.0));
        let (m, lo, hi) = r3(owned_raw, times);
        rows.push(row("    time (2b)/(4)", m, lo, hi));
        let (m, lo, hi) = r3(views_raw, times);
        rows.push(row("    time (3)/(4)", m, lo, hi));
        let (m, lo, hi) = r3(peer, rate);
        rows.push(
            row("(5) peer: ASE-LMDB zlib JSON (frames/s)", m, lo, hi).cpu(self.peer.cpu_share()),
        );
        rows.push(row(
            "    peer file size / ours",
            mib(self.peer_write.file_bytes),
            times(self.peer_write.file_bytes as f64 / self.file_bytes as f64),
            format!("json {}", mib(self.peer_write.json_bytes)),
        ));
        let (m, lo, hi) = r3(arrays_peer, times);
        rows.push(row("    speed (2)/(5)", m, lo, hi).target(">= 30x", arrays_peer.median >= 30.0));
        let (m, lo, hi) = r3(owned_peer, times);
        rows.push(row("    speed (2b)/(5)", m, lo, hi));
        let (m, lo, hi) = r3(views_peer, times);
        rows.push(row("    speed (3)/(5)", m, lo, hi));
        rows.push(row(
            "    major page faults in the timed passes: (2) (3) (4)",
            thousands(self.arrays.faults()),
            thousands(self.views.faults()),
            thousands(self.raw.faults()),
        ));
        let (m, lo, hi) = r3(index, rate);
        rows.push(row("(6) index query (records/s)", m, lo, hi).cpu(self.index.cpu_share()));
        rows.push(row(
            "    matches: <= 20 atoms / S|Cl, <= 12 heavy",
            thousands(self.index_hits.0),
            thousands(self.index_hits.1),
            dash(),
        ));
        let ms = |s: f64| format!("{:.1} ms", s * 1e3);
        rows.push(
            row(
                "(8) page check of the file (Reader::open_checked)",
                ms(self.page_check.median()),
                ms(self.page_check.min()),
                ms(self.page_check.max()),
            )
            .cpu(self.page_check.cpu_share()),
        );
        let (m, lo, hi) = r3(check_arrays, times);
        rows.push(
            row(
                "    time (8)/(2): the check against one full read",
                m,
                lo,
                hi,
            )
            .target("<= 0.10x", check_arrays.median <= 0.10),
        );
        rows.push(
            row(
                "(9) content digest of the file (mrec set verify)",
                ms(self.digest.median()),
                ms(self.digest.min()),
                ms(self.digest.max()),
            )
            .cpu(self.digest.cpu_share()),
        );
        let (m, lo, hi) = r3(digest_arrays, times);
        rows.push(
            row(
                "    time (9)/(2): verifying against one full read",
                m,
                lo,
                hi,
            )
            .target("<= 0.50x", digest_arrays.median <= 0.50),
        );
        let (m, lo, hi) = r3(threads, rate);
        rows.push(
            row("(7) two threads, owned arrays (frames/s)", m, lo, hi)
                .cpu(self.threads.cpu_share()),
        );
        let (m, lo, hi) = r3(threads_arrays, times);
        rows.push(
            row("    speed (7)/(2)", m, lo, hi).target(">= 1.7x", threads_arrays.median >= 1.7),
        );
        let (m, lo, hi) = r3(threads_views, rate);
        rows.push(
            row("(7b) two threads, views (frames/s)", m, lo, hi)
                .cpu(self.threads_views.cpu_share()),
        );
        let (m, lo, hi) = r3(threads_views_scaling, times);
        rows.push(row("    speed (7b)/(3)", m, lo, hi));

        let machine = machine();
        let mut table = String::new();
        let cores = machine["cores"].as_u64().unwrap_or(1);
        table.push_str(&format!(
            "mrec bench: {} records, {} frames ({:.1} frames/record, {:.1} atoms/frame), seed {}\n",
            thousands(self.n_records),
            thousands(n_frames),
            n_frames as f64 / self.n_records as f64,
            self.atom_frames as f64 / n_frames as f64,
            self.opts.seed
        ));
        table.push_str(&format!(
            "machine: {cores} cores, {}{}, {}; allocator: {}{}\n",
            machine["cpu"].as_str().unwrap_or("?"),
            machine["last_level_cache_bytes"]
                .as_u64()
                .map_or(String::new(), |b| format!(" ({} last-level cache)", mib(b))),
            machine["memory_bytes"]
                .as_u64()
                .map_or("?".into(), |b| format!(
                    "{:.1} GiB RAM",
                    b as f64 / (1u64 << 30) as f64
                )),
            self.opts.allocator,
            if cfg!(debug_assertions) {
                "  ** DEBUG BUILD: figures are not meaningful **"
            } else {
                ""
            }
        ));
        table.push_str(&format!(
            "load average (1 min): {:.2} at the start, {:.2} at the end{}\n",
            self.load.0,
            self.load.1,
            if self.load.0.max(self.load.1) > cores as f64 * 0.5 {
                " (other processes were running: see cpu/wall)"
            } else {
                ""
            }
        ));
        if self.damon_pageout {
            table.push_str(
                "note: DAMON's pageout scheme runs on this machine: it evicts pages not touched for a \
                 few seconds, the files' too, so the page cache is not always warm (see the major \
                 page faults)\n",
            );
        }
        if let Some(note) = kernel_bound_write_note(self.write_cpu_user, self.write_cpu_system) {
            table.push_str(&note);
        }
        let cache = machine["last_level_cache_bytes"].as_u64();
        if let Some(note) = file_beyond_cache_note(self.file_bytes, cache) {
            table.push_str(&note);
        }
        table.push_str(&format!(
            "reads: {} rounds after 1 warm-up round, each one pass of every read figure (both \
             files read once, untimed, before each round: page cache warm); a figure is the \
             median of its passes (min/max = slowest/fastest), a ratio the median of the \
             rounds' ratios (min/max over the rounds)\n\
             cpu/wall: CPU seconds of this process per wall second (1.00 = one core to itself; \
             2.00 for two threads on two idle cores)\n",
            self.opts.passes
        ));
        table.push_str(&format!(
            "files: {}{}\n\n",
            self.dir.display(),
            if self.opts.keep {
                " (kept)"
            } else if self.temp {
                " (temporary, deleted)"
            } else {
                " (files deleted)"
            }
        ));
        let head = ["figure", "median", "min", "max", "cpu/wall", "target", ""];
        let cells: Vec<[String; 7]> = rows
            .iter()
            .map(|r| {
                [
                    r.label.clone(),
                    r.median.clone(),
                    r.min.clone(),
                    r.max.clone(),
                    r.cpu.clone(),
                    r.target.clone(),
                    match r.met {
                        Some(true) => "✓".into(),
                        Some(false) => "✗".into(),
                        None => String::new(),
                    },
                ]
            })
            .collect();
        let width = |i: usize| {
            cells
                .iter()
                .map(|c| c[i].chars().count())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..7).map(width).collect();
        let line = |c: [&str; 7]| {
            let pad = |s: &str, w: usize, right: bool| {
                let fill = " ".repeat(w.saturating_sub(s.chars().count()));
                if right {
                    format!("{fill}{s}")
                } else {
                    format!("{s}{fill}")
                }
            };
            format!(
                "{}  {}  {}  {}  {}  {}  {}",
                pad(c[0], widths[0], false),
                pad(c[1], widths[1], true),
                pad(c[2], widths[2], true),
                pad(c[3], widths[3], true),
                pad(c[4], widths[4], true),
                pad(c[5], widths[5], false),
                c[6]
            )
            .trim_end()
            .to_string()
        };
        table.push_str(&line(head));
        table.push('\n');
        for c in &cells {
            table.push_str(&line([&c[0], &c[1], &c[2], &c[3], &c[4], &c[5], &c[6]]));
            table.push('\n');
        }

        let targets: Vec<Value> = rows
            .iter()
            .filter_map(|r| {
                r.met.map(|met| {
                    json!({"figure": r.label.trim(), "measured": r.median, "target": r.target,
                           "met": met})
                })
            })
            .collect();
        let mem_json =
            |m: &Mem| json!({"rss": m.rss, "hwm": m.hwm, "anon": m.anon, "file": m.file});
        let json = json!({
            "tool": "mrec bench",
            "version": molrec::VERSION,
            "params": {
                "records": self.n_records, "seed": self.opts.seed, "passes": self.opts.passes,
                "warmup_passes": 1, "dir": self.dir.display().to_string(),
                "kept": self.opts.keep, "allocator": self.opts.allocator,
            },
            "machine": machine,
            "load_average_1min": {"start": self.load.0, "end": self.load.1},
            "page_cache": "warm: both files are read once, untimed, before each round",
            "rounds": "every round runs one pass of each read figure; ratios are per round",
            "damon_pageout": self.damon_pageout,
            "workload": {
                "records": self.n_records,
                "frames": n_frames,
                "frames_per_record": n_frames as f64 / self.n_records as f64,
                "atoms_per_frame": self.atom_frames as f64 / n_frames as f64,
                "payload_bytes": self.payload,
            },
            "write": {
                "frames_per_s": write_rate,
                "writer_secs": self.writer_secs,
                "finish_secs": self.finish_secs,
                "frames_per_s_with_generation": n_frames as f64 / self.write_wall,
                "wall_secs_with_generation": self.write_wall,
                "cpu_secs_with_generation": self.write_cpu(),
                "system_cpu_secs_with_generation": self.write_cpu_system,
                "cpu_share": self.write_cpu() / self.write_wall,
                "peak_rss_bytes_vmhwm": self.mem_end.hwm,
                "rss_before_writer": mem_json(&self.mem_before),
                "rss_start": mem_json(&self.mem_start),
                "rss_end": mem_json(&self.mem_end),
                "rss_max_bytes": self.max_rss,
                "rss_growth_bytes": rss_growth,
                "anon_max_bytes": self.max_anon,
                "anon_growth_bytes": anon_growth,
                "rss_samples": self.samples.iter().map(|(r, m)| json!({
                    "records": r, "rss": m.rss, "anon": m.anon, "file": m.file,
                })).collect::<Vec<_>>(),
                "file_bytes": self.file_bytes,
                "payload_bytes": self.payload,
                "file_over_payload": file_ratio,
                "stored_value_bytes": self.raw_bytes,
                "values_over_payload": self.raw_bytes as f64 / self.payload as f64,
                "file_over_values": self.file_bytes as f64 / self.raw_bytes as f64,
            },
            "read_owned_arrays": self.arrays.json(n_frames, "frames_per_s"),
            "read_owned_arrays_in_index_order": self.arrays_in_order.json(n_frames, "frames_per_s"),
            "read_owned_model": self.owned.json(n_frames, "frames_per_s"),
            "read_views": {
                "timing": self.views.json(n_frames, "frames_per_s"),
                "f64_views": tally.views,
                "f64_fallbacks_to_column": tally.fallbacks,
                "fallback_share": fallback_share,
            },
            "raw_baseline": {
                "timing": self.raw.json(n_frames, "frames_per_s"),
                "bytes_per_pass": self.raw_bytes,
            },
            "peer_baseline": {
                "timing": self.peer.json(n_frames, "frames_per_s"),
                "file_bytes": self.peer_write.file_bytes,
                "json_bytes": self.peer_write.json_bytes,
                "write_secs": self.peer_write.secs,
            },
            "index_query": {
                "timing": self.index.json(self.n_records, "records_per_s"),
                "matches_at_most_20_atoms": self.index_hits.0,
                "matches_s_or_cl_at_most_12_heavy": self.index_hits.1,
            },
            "page_check": self.page_check.json(1, "checks_per_s"),
            "digest": self.digest.json(1, "digests_per_s"),
            "two_threads_owned_arrays": self.threads.json(n_frames, "frames_per_s"),
            "two_threads_views": self.threads_views.json(n_frames, "frames_per_s"),
            "ratios": {
                "time_owned_arrays_over_raw": arrays_raw.json(),
                "time_owned_model_over_raw": owned_raw.json(),
                "time_views_over_raw": views_raw.json(),
                "speed_owned_arrays_over_peer": arrays_peer.json(),
                "speed_owned_model_over_peer": owned_peer.json(),
                "speed_views_over_peer": views_peer.json(),
                "speed_two_threads_over_owned_arrays": threads_arrays.json(),
                "speed_two_threads_views_over_views": threads_views_scaling.json(),
                "speed_index_order_over_shuffled": in_order_arrays.json(),
                "time_page_check_over_owned_arrays": check_arrays.json(),
                "time_digest_over_owned_arrays": digest_arrays.json(),
                "file_over_payload": file_ratio,
                "peer_file_over_ours": self.peer_write.file_bytes as f64 / self.file_bytes as f64,
            },
            "targets": targets,
            "final_rss": mem_json(&self.mem_final),
        });
        Report { json, table }
    }
}
