//! The read passes and their timing: one warm-up round, then rounds of one
//! pass of every figure, medians and per-round ratios.

use super::*;

/// Seconds of the timed passes.
#[derive(Clone, Debug, Default)]
pub(super) struct Timing {
    pub(super) secs: Vec<f64>,
    /// CPU seconds of the whole process during each pass.
    pub(super) cpu: Vec<f64>,
    /// Major page faults of the process during each pass: pages of the file
    /// read from disk, that is, not in the page cache.
    pub(super) major_faults: Vec<u64>,
}

impl Timing {
    pub(super) fn sorted(&self) -> Vec<f64> {
        let mut s = self.secs.clone();
        s.sort_by(f64::total_cmp);
        s
    }

    pub(super) fn median(&self) -> f64 {
        let s = self.sorted();
        let m = s.len() / 2;
        if s.len() % 2 == 1 {
            s[m]
        } else {
            (s[m - 1] + s[m]) / 2.0
        }
    }

    pub(super) fn min(&self) -> f64 {
        self.sorted()[0]
    }

    pub(super) fn max(&self) -> f64 {
        *self.sorted().last().unwrap_or(&0.0)
    }

    /// `units` per second: median, min (slowest pass), max (fastest pass).
    pub(super) fn rate(&self, units: u64) -> Spread {
        let u = units as f64;
        Spread {
            median: u / self.median(),
            min: u / self.max(),
            max: u / self.min(),
        }
    }

    /// CPU seconds over wall seconds, summed over the passes: about 1 for
    /// one thread that had a core to itself (2 for two threads); lower when
    /// other processes took the CPU.
    pub(super) fn cpu_share(&self) -> f64 {
        let wall = self.secs.iter().sum::<f64>();
        if wall < 0.5 {
            // Too short for clock ticks of 1/100 s.
            return f64::NAN;
        }
        self.cpu.iter().sum::<f64>() / wall
    }

    pub(super) fn json(&self, units: u64, unit: &str) -> Value {
        let r = self.rate(units);
        json!({
            unit: {"median": r.median, "min": r.min, "max": r.max},
            "secs": {"median": self.median(), "min": self.min(), "max": self.max(),
                     "passes": self.secs},
            "cpu_secs": self.cpu,
            "cpu_share": self.cpu_share(),
            "major_faults": self.major_faults,
        })
    }

    /// Major page faults over every timed pass.
    pub(super) fn faults(&self) -> u64 {
        self.major_faults.iter().sum()
    }
}

/// A figure with its spread.
#[derive(Clone, Copy, Debug)]
pub(super) struct Spread {
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
}

impl Spread {
    pub(super) fn json(&self) -> Value {
        json!({"median": self.median, "min": self.min, "max": self.max})
    }
}

/// Time ratio a/b of two timings, round by round (the two passes of a
/// round ran seconds apart): the median and the extremes over the rounds.
pub(super) fn time_ratio(a: &Timing, b: &Timing) -> Spread {
    let ratios = Timing {
        secs: a.secs.iter().zip(&b.secs).map(|(x, y)| x / y).collect(),
        ..Timing::default()
    };
    Spread {
        median: ratios.median(),
        min: ratios.min(),
        max: ratios.max(),
    }
}

/// One warm-up round, then `passes` timed rounds; a round runs every
/// figure once, in order, so that figures a ratio compares were measured
/// seconds apart whatever the machine did meanwhile (a noisy shared host
/// can be a third slower for minutes). The first figure is run but not
/// reported. Returns each figure's timing and what its last pass saw.
pub(super) fn measure_rounds<const N: usize>(
    passes: usize,
    bar: &ProgressBar,
    figures: &mut [(&str, &dyn Fn() -> Result<Seen>); N],
) -> Result<([Timing; N], [Seen; N])> {
    let mut timings: [Timing; N] = std::array::from_fn(|_| Timing::default());
    let mut seen = [Seen::default(); N];
    for round in 0..=passes {
        for (i, (what, pass)) in figures.iter().enumerate() {
            bar.set_message(what.to_string());
            let (cpu_start, faults_start) = (cpu_secs(), major_faults_so_far());
            let start = Instant::now();
            seen[i] = black_box(pass()?);
            let secs = start.elapsed().as_secs_f64();
            if round > 0 {
                let t = &mut timings[i];
                t.secs.push(secs);
                t.cpu.push(cpu_secs() - cpu_start);
                t.major_faults
                    .push(major_faults_so_far().saturating_sub(faults_start));
            }
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((timings, seen))
}

/// What a pass saw: the frames it read and what it checks them by.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Seen {
    pub(super) frames: u64,
    /// f64 columns viewed in place.
    pub(super) views: u64,
    /// f64 columns whose address was not 8-aligned: copied into a reused
    /// buffer by `ColumnRef::f64_values`.
    pub(super) fallbacks: u64,
    /// The sum of every `x`.
    pub(super) sum_x: f64,
    /// Bytes copied (the raw pass).
    pub(super) bytes: u64,
    /// The index query's two counts.
    pub(super) matches: (u64, u64),
}

impl Seen {
    pub(super) fn add(self, o: Seen) -> Seen {
        Seen {
            frames: self.frames + o.frames,
            views: self.views + o.views,
            fallbacks: self.fallbacks + o.fallbacks,
            sum_x: self.sum_x + o.sum_x,
            bytes: self.bytes + o.bytes,
            matches: (self.matches.0 + o.matches.0, self.matches.1 + o.matches.1),
        }
    }

    pub(super) fn frames(frames: u64) -> Seen {
        Seen {
            frames,
            ..Seen::default()
        }
    }

    pub(super) fn bytes(bytes: u64) -> Seen {
        Seen {
            bytes,
            ..Seen::default()
        }
    }

    pub(super) fn matches(matches: (u64, u64)) -> Seen {
        Seen {
            matches,
            ..Seen::default()
        }
    }
}

/// (2): every record of `order` read whole, its trajectory resolved into
/// one owned array per column (`record_arrays`); x summed over every frame
/// (as the views pass does), so the figure checks what it reads.
#[inline(never)] // a frame of its own in profiles
pub(super) fn arrays_pass(txn: &RecordTxn<'_>, order: &[u64]) -> Result<Seen> {
    let mut t = Seen::default();
    for &r in order {
        let record = txn.record_arrays(r)?;
        if let Some(traj) = &record.trajectory {
            t.frames += traj.len() as u64;
            if let Some(ColumnData::F64(x)) = traj
                .blocks
                .get("atoms")
                .and_then(|b| b.columns.get("x"))
                .map(|c| &c.data)
            {
                t.sum_x += x.iter().sum::<f64>();
            }
        }
        black_box(&record);
    }
    Ok(t)
}

/// (2b): every record of `order` resolved frame by frame into the model
/// (`record`: one `Step` of blocks and columns per frame).
#[inline(never)] // a frame of its own in profiles
pub(super) fn owned_pass(txn: &RecordTxn<'_>, order: &[u64]) -> Result<u64> {
    let mut frames = 0u64;
    for &r in order {
        let record = txn.record(r)?;
        frames += record
            .trajectory
            .as_ref()
            .map_or(0, |t| t.frames.len() as u64);
        black_box(&record);
    }
    Ok(frames)
}

/// (3): the record's meta and system (owned: there is no view of a system),
/// then every frame through `for_each_frame`, every f64 column viewed in
/// place (or copied when its address is not 8-aligned), x summed.
#[inline(never)] // a frame of its own in profiles
pub(super) fn views_pass(txn: &RecordTxn<'_>, order: &[u64]) -> Result<Seen> {
    let mut t = Seen::default();
    let mut scratch = Vec::new();
    for &r in order {
        black_box(txn.record_meta(r)?);
        black_box(txn.system(r)?);
        txn.for_each_frame(r, |view| {
            for block in view.blocks.values() {
                for (name, col) in &block.columns {
                    if col.dtype != DType::F64 {
                        continue;
                    }
                    if col.f64_view().is_some() {
                        t.views += 1;
                    } else {
                        t.fallbacks += 1;
                    }
                    let Some(v) = col.f64_values(&mut scratch) else {
                        return Err(Error::refused(
                            Clause::FrameBufferBounds,
                            "",
                            "an f64 column is not whole f64s",
                        ));
                    };
                    if name == "x" {
                        t.sum_x += v.iter().sum::<f64>();
                    } else {
                        black_box(v);
                    }
                }
            }
            t.frames += 1;
            Ok(())
        })?;
    }
    Ok(t)
}

/// (7) as `mrec bench` runs it, for profiling drivers
/// (`examples/read_passes.rs`): `record_arrays` for every record of
/// `order` on two threads; the frames read.
pub fn two_thread_arrays_pass(reader: &Reader, order: &[u64]) -> Result<u64> {
    two_thread_pass(reader, order, arrays_pass).map(|seen| seen.frames)
}

/// Records a thread of (7) takes from the shared order at a time.
pub(super) const RECORDS_PER_TAKE: usize = 64;

/// (7): `pass` (the arrays or the views pass) on two threads, one shared
/// reader, each thread with its own read transaction taking the next
/// [`RECORDS_PER_TAKE`] records of `order` until none are left, as a
/// loader's workers take indices from one queue. (Fixed halves left one
/// thread idle at the end whenever the host slowed the other.)
#[inline(never)] // a frame of its own in profiles
pub(super) fn two_thread_pass(
    reader: &Reader,
    order: &[u64],
    pass: fn(&RecordTxn<'_>, &[u64]) -> Result<Seen>,
) -> Result<Seen> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Result<Seen> {
        let txn = reader.txn()?;
        let mut seen = Seen::default();
        loop {
            let take = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(records) = order.chunks(RECORDS_PER_TAKE).nth(take) else {
                return Ok(seen);
            };
            seen = seen.add(pass(&txn, records)?);
        }
    };
    std::thread::scope(|s| {
        let other = s.spawn(work);
        let mine = work();
        let theirs = other
            .join()
            .map_err(|_| Error::Lmdb("reader thread panicked".into()))?;
        Ok(mine?.add(theirs?))
    })
}

/// Every value of an LMDB file read once (the first byte of each summed):
/// its pages in the page cache. Returns the values' bytes.
pub(super) fn touch_all(env: &Env<WithoutTls>, db: &Db) -> Result<u64> {
    let txn = env.read_txn().map_err(lmdb)?;
    let (mut bytes, mut sum) = (0u64, 0u64);
    for item in db.iter(&txn).map_err(lmdb)? {
        let (_, v) = item.map_err(lmdb)?;
        bytes += v.len() as u64;
        sum = sum.wrapping_add(v.iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>());
    }
    black_box(sum);
    Ok(bytes)
}

/// (6): records with at most 20 atoms (binding index), and records holding
/// S or Cl with at most 12 heavy atoms (own index columns).
#[inline(never)] // a frame of its own in profiles
pub(super) fn index_pass(reader: &Reader) -> Result<(u64, u64)> {
    let small = reader.atom_counts().iter().filter(|&&n| n <= 20).count() as u64;
    let columns = reader.index_columns()?;
    let u64s = |name: &str| {
        columns
            .get(name)
            .and_then(|c| c.data.as_u64())
            .ok_or_else(|| Error::Lmdb(format!("own index column `{name}` missing")))
    };
    let mask = u64s("element_mask")?;
    let heavy = u64s("heavy_atoms")?;
    let s_or_cl = (1u64 << 16) | (1u64 << 17);
    let hits = mask
        .iter()
        .zip(heavy)
        .filter(|&(&m, &h)| m & s_or_cl != 0 && h <= 12)
        .count() as u64;
    Ok((small, hits))
}

/// (4): the record's meta key, system key and frame key range, copied into
/// one buffer, nothing decoded. Returns bytes copied.
#[inline(never)] // a frame of its own in profiles
pub(super) fn raw_pass(
    env: &Env<WithoutTls>,
    db: &Db,
    order: &[u64],
    first: &[u64],
    counts: &[u64],
) -> Result<u64> {
    let txn = env.read_txn().map_err(lmdb)?;
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 20);
    let mut bytes = 0u64;
    for &r in order {
        buf.clear();
        if let Some(v) = db.get(&txn, &record_key(r)).map_err(lmdb)? {
            buf.extend_from_slice(v);
        }
        if let Some(v) = db.get(&txn, &system_key(r)).map_err(lmdb)? {
            buf.extend_from_slice(v);
        }
        let (f, n) = (first[r as usize], counts[r as usize]);
        let (lo, hi) = (frame_key(f), frame_key(f + n));
        let range = (Bound::Included(&lo[..]), Bound::Excluded(&hi[..]));
        for item in db.range(&txn, &range).map_err(lmdb)? {
            let (_, v) = item.map_err(lmdb)?;
            buf.extend_from_slice(v);
        }
        bytes += buf.len() as u64;
        black_box(&buf);
    }
    Ok(bytes)
}

/// (5): the same frames from the peer file: get, inflate, parse.
#[inline(never)] // a frame of its own in profiles
pub(super) fn peer_pass(
    env: &Env<WithoutTls>,
    db: &Db,
    order: &[u64],
    first: &[u64],
    counts: &[u64],
) -> Result<(u64, f64)> {
    let txn = env.read_txn().map_err(lmdb)?;
    let mut inflate = Decompress::new(true);
    let mut json_buf = Vec::with_capacity(1 << 16);
    let mut key = String::new();
    let (mut frames, mut sum_x) = (0u64, 0.0f64);
    for &r in order {
        let f = first[r as usize];
        for j in f..f + counts[r as usize] {
            key.clear();
            std::fmt::Write::write_fmt(&mut key, format_args!("{}", j + 1))
                .map_err(|e| Error::Lmdb(e.to_string()))?;
            let value = db
                .get(&txn, key.as_bytes())
                .map_err(lmdb)?
                .ok_or_else(|| Error::Lmdb(format!("peer row {key} missing")))?;
            zlib_inflate(&mut inflate, value, &mut json_buf)?;
            let row: PeerRowIn = serde_json::from_slice(&json_buf)
                .map_err(|e| Error::Lmdb(format!("peer row {key}: {e}")))?;
            sum_x += row.positions.iter().map(|p| p[0]).sum::<f64>();
            black_box((&row.numbers, &row.forces, row.energy));
            frames += 1;
        }
    }
    Ok((frames, sum_x))
}
