//! Repeats one read path of `mrec bench` over an existing collection, for
//! profiling it alone (`perf record`, `valgrind --tool=callgrind`):
//!
//! ```sh
//! target/release/mrec bench --records 2000 --keep --dir /tmp/b
//! cargo run --release --example read_passes -- /tmp/b/bench.mrec.lmdb views 5
//! ```
//!
//! Paths: `owned` (`RecordTxn::record`), `views` (`for_each_frame`, every
//! f64 column read in place or copied). Records are read in index order.

use molrec::lmdb::Reader;
use molrec::DType;
use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, path, mode, passes] = &args[..] else {
        return Err("usage: read_passes FILE owned|views PASSES".into());
    };
    let passes: u32 = passes.parse()?;
    let reader = Reader::open(Path::new(path))?;
    let txn = reader.txn()?;
    let mut scratch = Vec::new();
    for pass in 0..passes {
        let start = Instant::now();
        let mut frames = 0u64;
        for r in 0..reader.n_records() {
            match mode.as_str() {
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
