//! The page-flip campaign of issue #52, against content digests: a set of
//! two ~400-record shards with a manifest (`mrec set manifest`), and copies
//! of it each with one byte flipped on an LMDB page of one shard (a random
//! shard, page and byte, a random non-zero XOR; seeded). Every copy is read
//! by `mrec set verify` (which must refuse it, naming the shard, with the
//! digest the manifest keeps and the one of the flipped bytes, and verify
//! the other shard) and by `mrec validate` of the flipped shard (what the
//! reader alone makes of it: refused, or read as valid).
//!
//! `MREC_DIGEST_FLIPS` (default 60: a few seconds) and `MREC_DIGEST_SEED`
//! (default 1) set the campaign; `MREC_DIGEST_FLIPS=2000` is the issue's.

mod common;

use common::{collection_json, mrec, report, scratch_dir, Rng};
use molrec::lmdb::{digest_of, write_collection, WriterOptions, DEFAULT_PAGE_SIZE};
use molrec::model_json::collection_from_json;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn every_flipped_byte_is_refused_by_verify_naming_its_shard() {
    let copies = env("MREC_DIGEST_FLIPS", 60);
    let seed = env("MREC_DIGEST_SEED", 1);
    let dir = scratch_dir("digest-flips");
    let names = ["a.mrec.lmdb", "b.mrec.lmdb"];
    for (i, name) in names.iter().enumerate() {
        let c = collection_from_json(&collection_json(400, 2, i as f64)).unwrap();
        write_collection(&dir.join(name), c, WriterOptions::default()).unwrap();
    }
    let (code, _, err) = mrec(&["set", "manifest", s(&dir)]);
    assert_eq!(code, Some(0), "{err}");
    let originals: Vec<Vec<u8>> = names
        .iter()
        .map(|n| std::fs::read(dir.join(n)).unwrap())
        .collect();
    let kept: Vec<String> = originals.iter().map(|b| digest_of(b)).collect();
    let (code, _, err) = mrec(&["set", "verify", s(&dir)]);
    assert_eq!(code, Some(0), "the untouched set: {err}");

    let page = DEFAULT_PAGE_SIZE as usize;
    let mut rng = Rng::new(seed);
    let (mut refused_by_verify, mut reader_accepted, mut reader_refused) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    for n in 0..copies {
        let shard = rng.index(names.len());
        let bytes = &originals[shard];
        let at = rng.index(bytes.len() / page) * page + rng.index(page);
        let flip = 1 + rng.below(255) as u8;
        let path = dir.join(names[shard]);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(&[bytes[at] ^ flip], at as u64).unwrap();
        let mut flipped = bytes.clone();
        flipped[at] ^= flip;
        let what = format!(
            "seed {seed} copy {n}: {} byte {at} ^= {flip:#04x}",
            names[shard]
        );

        let (code, out, err) = mrec(&["set", "verify", s(&dir)]);
        assert_eq!(code, Some(1), "{what}: verify accepted it: {out}{err}");
        let expected = format!(
            "set (digest): shard {}: its bytes changed since {} was written: xxh3_128 expected {}, actual {}",
            names[shard],
            dir.join("mrec-set.json").display(),
            kept[shard],
            digest_of(&flipped)
        );
        assert!(err.contains(&expected), "{what}: {err}");
        let other = dir.join(names[1 - shard]);
        assert!(
            out.contains(&format!("verified  {}", s(&other))),
            "{what}: {out}"
        );
        refused_by_verify += 1;

        match mrec(&["validate", s(&path)]).0 {
            Some(0) => reader_accepted += 1,
            _ => reader_refused += 1,
        }
        file.write_all_at(&bytes[at..at + 1], at as u64).unwrap();
    }
    let (code, _, err) = mrec(&["set", "verify", s(&dir)]);
    assert_eq!(code, Some(0), "the set restored: {err}");
    report(&format!(
        "digest flips: {copies} copies ({} and {} bytes, {page}-byte pages), seed {seed}, {:.1} s: \
         mrec set verify refused {refused_by_verify}, accepted {}; mrec validate of the flipped \
         shard (the reader alone): {reader_refused} refused, {reader_accepted} read as valid",
        originals[0].len(),
        originals[1].len(),
        start.elapsed().as_secs_f64(),
        copies - refused_by_verify,
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
