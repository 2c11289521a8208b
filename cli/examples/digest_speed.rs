//! Which content digest a set's manifest keeps (docs/shards.md): the
//! candidates side by side on one collection file, against one full read
//! of it, in interleaved rounds (the page cache warm: every round reads
//! the file first, untimed).
//!
//! ```sh
//! target/release/mrec bench --keep --dir /tmp/b --quiet
//! cargo run --release -p mrec-cli --example digest_speed -- /tmp/b/bench.mrec.lmdb 7
//! ```
//!
//! Rows: the full read (`RecordTxn::record_arrays` of every record, in
//! index order: what verifying is compared with), the file's bytes
//! `read` into a 1 MiB buffer (the copy alone), XXH3-128 as the library
//! computes it (the file mapped 64 MiB at a time), XXH3-128 over `read`,
//! BLAKE3 over the same map on one thread and on two (the file split into
//! BLAKE3's two subtrees, merged), SHA-256 over `read`. Each is the median
//! of the rounds, with its time over the full read's in the same round.

/// The allocator `mrec` runs with, so the full read is what `mrec bench` measures.
#[global_allocator]
static ALLOCATOR: mrec_cli::allocator::Mimalloc = mrec_cli::allocator::Mimalloc;

use blake3::hazmat::{left_subtree_len, merge_subtrees_root, HasherExt, Mode};
use molrec::lmdb::{file_digest, Reader};
use sha2::Digest as _;
use std::hint::black_box;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

type Pass<'a> = Box<dyn Fn() -> Result<u64, Box<dyn std::error::Error>> + 'a>;

/// `f` over each 1 MiB of the file as `read` hands it.
fn read_chunks(path: &Path, mut f: impl FnMut(&[u8])) -> std::io::Result<()> {
    let mut file = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        f(&buf[..n]);
    }
}

fn map(path: &Path) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: a read-only map of a file nobody writes while this runs.
    unsafe { memmap2::Mmap::map(&std::fs::File::open(path)?) }
}

/// BLAKE3 of `bytes` on two threads: its two subtrees hashed apart and
/// merged (the same hash as one thread's).
fn blake3_two_threads(bytes: &[u8]) -> blake3::Hash {
    if bytes.len() <= 1024 {
        return blake3::hash(bytes);
    }
    let split = left_subtree_len(bytes.len() as u64) as usize;
    let (left, right) = bytes.split_at(split);
    let (l, r) = std::thread::scope(|s| {
        let r = s.spawn(|| {
            blake3::Hasher::new()
                .set_input_offset(split as u64)
                .update(right)
                .finalize_non_root()
        });
        let l = blake3::Hasher::new().update(left).finalize_non_root();
        (l, r.join().expect("the hashing thread"))
    });
    merge_subtrees_root(&l, &r, Mode::Hash)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (path, rounds) = match &args[..] {
        [_, path] => (Path::new(path), 7),
        [_, path, rounds] => (Path::new(path), rounds.parse()?),
        _ => return Err("usage: digest_speed FILE [ROUNDS]".into()),
    };
    let reader = Reader::open(path)?;
    let bytes = std::fs::metadata(path)?.len();
    let whole = map(path)?;
    assert_eq!(blake3_two_threads(&whole), blake3::hash(&whole));
    drop(whole);
    let passes: Vec<(&str, Pass)> = vec![
        (
            "full read (record_arrays, index order)",
            Box::new(|| {
                let txn = reader.txn()?;
                let mut frames = 0;
                for r in 0..reader.n_records() {
                    let record = txn.record_arrays(r)?;
                    frames += record.trajectory.map_or(0, |t| t.steps.len() as u64);
                }
                Ok(frames)
            }),
        ),
        (
            "the bytes read (1 MiB buffer), no digest",
            Box::new(|| {
                let mut last = 0u64;
                read_chunks(path, |b| last = u64::from(b[b.len() - 1]))?;
                Ok(last)
            }),
        ),
        (
            "XXH3-128, mapped (molrec::lmdb::file_digest)",
            Box::new(|| Ok(file_digest(path)?.len() as u64)),
        ),
        (
            "XXH3-128, read",
            Box::new(|| {
                let mut h = xxhash_rust::xxh3::Xxh3::new();
                read_chunks(path, |b| h.update(b))?;
                Ok(h.digest128() as u64)
            }),
        ),
        (
            "BLAKE3, mapped, 1 thread",
            Box::new(|| {
                let m = map(path)?;
                Ok(u64::from(blake3::hash(&m).as_bytes()[0]))
            }),
        ),
        (
            "BLAKE3, mapped, 2 threads",
            Box::new(|| Ok(u64::from(blake3_two_threads(&map(path)?).as_bytes()[0]))),
        ),
        (
            "SHA-256, read",
            Box::new(|| {
                let mut h = sha2::Sha256::new();
                read_chunks(path, |b| h.update(b))?;
                Ok(u64::from(h.finalize()[0]))
            }),
        ),
    ];
    let mut times = vec![Vec::new(); passes.len()];
    for _ in 0..rounds {
        read_chunks(path, |b| {
            black_box(b);
        })?;
        for (i, (_, pass)) in passes.iter().enumerate() {
            let start = Instant::now();
            black_box(pass()?);
            times[i].push(start.elapsed().as_secs_f64());
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!(
        "{}: {bytes} bytes, {rounds} rounds, page cache warm; medians",
        path.display()
    );
    println!(
        "{:<46} {:>10} {:>10} {:>16}",
        "", "time", "GB/s", "time / full read"
    );
    for (i, (name, _)) in passes.iter().enumerate() {
        let t = median(times[i].clone());
        let ratio = median(times[i].iter().zip(&times[0]).map(|(a, b)| a / b).collect());
        println!(
            "{name:<46} {:>7.1} ms {:>10.2} {:>15.3}x",
            t * 1e3,
            bytes as f64 / t / 1e9,
            ratio
        );
    }
    Ok(())
}
