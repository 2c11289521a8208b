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
//! taking 64 records of the order at a time, as `mrec bench`'s (7)),
//! `check` (`check_pages` of the file, `mrec bench`'s (8); counts pages),
//! `frames` (`Reader::frames` of every frame by its global ordinal, its
//! columns copied out; with `shuffled`, the frames in one shuffled order,
//! as `python -m mrec.bench` reads them).
//! Records are read in index order, or with `shuffled` in one fixed
//! shuffled order (as `mrec bench` reads them).

/// The allocator `mrec` runs with, so the profile is of what `mrec bench` measures.
#[global_allocator]
static ALLOCATOR: mrec_cli::allocator::Mimalloc = mrec_cli::allocator::Mimalloc;

use molrec::lmdb::{check_pages, Reader, RecordTxn};
use molrec::model::ColumnData;
use molrec::DType;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (path, mode, passes, shuffled) =
        match &args[..] {
            [_, path, mode, passes] => (path, mode, passes, false),
            [_, path, mode, passes, order] if order == "shuffled" => (path, mode, passes, true),
            _ => return Err(
                "usage: read_passes FILE arrays|arrays2|owned|views|system|check|frames PASSES \
                 [shuffled]"
                    .into(),
            ),
        };
    let passes: u32 = passes.parse()?;
    let reader = Reader::open(Path::new(path))?;
    let items = if mode == "frames" {
        reader.n_frames()
    } else {
        reader.n_records()
    };
    let mut order: Vec<u64> = (0..items).collect();
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
    let txn = reader.txn()?;
    let mut scratch = Vec::new();
    for pass in 0..passes {
        let start = Instant::now();
        let frames = match mode.as_str() {
            "arrays2" => mrec_cli::bench::two_thread_arrays_pass(&reader, &order)?,
            "check" => {
                let counts = check_pages(Path::new(path))?;
                counts.branch_pages + counts.leaf_pages + counts.overflow_pages
            }
            _ => one_thread_pass(&reader, &txn, mode, &order, &mut scratch)?,
        };
        let secs = start.elapsed().as_secs_f64();
        println!(
            "pass {pass}: {frames} frames in {secs:.5} s, {:.0} frames/s",
            frames as f64 / secs
        );
    }
    Ok(())
}

/// One pass of a one-thread path over `order`: the frames read.
fn one_thread_pass(
    reader: &Reader,
    txn: &RecordTxn<'_>,
    mode: &str,
    order: &[u64],
    scratch: &mut Vec<f64>,
) -> Result<u64, Box<dyn std::error::Error>> {
    let mut frames = 0u64;
    if mode == "frames" {
        // 256 ordinals a call, as `python -m mrec.bench` asks for them.
        for chunk in order.chunks(256) {
            reader.frames(chunk, |frame| {
                for block in frame.blocks() {
                    for column in block.columns() {
                        let mut out = ColumnData::empty(column.dtype());
                        column.append_to(&mut out)?;
                        black_box(out);
                    }
                }
                frames += 1;
                Ok(())
            })?;
        }
        return Ok(frames);
    }
    for &r in order {
        match mode {
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
                                black_box(col.f64_values(scratch));
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
    Ok(frames)
}
