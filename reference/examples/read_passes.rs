//! Repeats one read path of `mrec bench` over an existing collection, for
//! profiling it alone (`perf record`, `valgrind --tool=callgrind`):
//!
//! ```sh
//! target/release/mrec bench --records 2000 --keep --dir /tmp/b
//! cargo run --release --example read_passes -- /tmp/b/bench.mrec.lmdb views 5
//! ```
//!
//! Paths: `arrays` (`RecordTxn::record_arrays`), `owned` (`RecordTxn::record`),
//! `views` (`for_each_frame`, every f64 column read in place or copied),
//! `system` (`RecordTxn::system` alone), `arrays2` (`arrays` on two threads,
//! taking 64 records of the order at a time, as `mrec bench`'s (7)).
//! Records are read in index order, or with `shuffled` in one fixed
//! shuffled order (as `mrec bench` reads them).

/// The allocator `mrec` runs with, so the profile is of what `mrec bench` measures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use molrec::lmdb::Reader;
use molrec::DType;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (path, mode, passes, shuffled) = match &args[..] {
        [_, path, mode, passes] => (path, mode, passes, false),
        [_, path, mode, passes, order] if order == "shuffled" => (path, mode, passes, true),
        _ => {
            return Err(
                "usage: read_passes FILE arrays|arrays2|owned|views|system PASSES [shuffled]"
                    .into(),
            )
        }
    };
    let passes: u32 = passes.parse()?;
    let reader = Reader::open(Path::new(path))?;
    let mut order: Vec<u64> = (0..reader.n_records()).collect();
    if shuffled {
        // Fisher-Yates with a fixed SplitMix64 stream: the same order every run.
        let mut state = 1u64;
        for i in (1..order.len()).rev() {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            order.swap(i, ((z ^ (z >> 31)) % (i as u64 + 1)) as usize);
        }
    }
    if mode == "arrays2" {
        // `mrec bench`'s (7): two threads taking 64 records at a time.
        for pass in 0..passes {
            let start = Instant::now();
            let next = std::sync::atomic::AtomicUsize::new(0);
            let work = || -> u64 {
                let txn = reader.txn().expect("a read transaction");
                let mut frames = 0;
                loop {
                    let take = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(records) = order.chunks(64).nth(take) else {
                        return frames;
                    };
                    for &r in records {
                        let record = txn.record_arrays(r).expect("a record");
                        frames += record.trajectory.as_ref().map_or(0, |t| t.len()) as u64;
                    }
                }
            };
            let frames = std::thread::scope(|scope| {
                let other = scope.spawn(work);
                work() + other.join().expect("a thread")
            });
            let secs = start.elapsed().as_secs_f64();
            println!(
                "pass {pass}: {frames} frames in {secs:.3} s, {:.0} frames/s",
                frames as f64 / secs
            );
        }
        return Ok(());
    }
    let txn = reader.txn()?;
    let mut scratch = Vec::new();
    for pass in 0..passes {
        let start = Instant::now();
        let mut frames = 0u64;
        for &r in &order {
            match mode.as_str() {
                "arrays" => {
                    let record = txn.record_arrays(r)?;
                    frames += record.trajectory.as_ref().map_or(0, |t| t.len()) as u64;
                    black_box(record);
                }
                "system" => {
                    // Only the systems: what a record's fixed cost is made of.
                    black_box(txn.system(r)?);
                    frames += reader.record_frames(r).unwrap_or(0);
                }
                "owned" => {
                    let record = txn.record(r)?;
                    frames += record.trajectory.as_ref().map_or(0, |t| t.frames.len()) as u64;
                    black_box(record);
                }
                "views" => {
                    black_box(txn.record_meta(r)?);
                    black_box(txn.system(r)?);
                    txn.for_each_frame(r, |view| {
                        for block in view.blocks.values() {
                            for col in block.columns.values() {
                                if col.dtype == DType::F64 {
                                    black_box(col.f64_values(&mut scratch));
                                }
                            }
                        }
                        frames += 1;
                        Ok(())
                    })?;
                }
                other => return Err(format!("unknown path {other:?}").into()),
            }
        }
        let secs = start.elapsed().as_secs_f64();
        println!(
            "pass {pass}: {frames} frames in {secs:.3} s, {:.0} frames/s",
            frames as f64 / secs
        );
    }
    Ok(())
}
