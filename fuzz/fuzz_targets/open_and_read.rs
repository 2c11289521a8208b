//! Bytes -> a small LMDB file of keys and values -> `Reader::open` ->
//! `read_collection` (and the view path). The input is split into entries:
//!
//! ```text
//! entry := key_len: u8 | value_len: u16 LE | key | value
//! ```
//!
//! A key of length 0 or one that runs past the input ends the split; one
//! leading selector byte may replace the first key with a well-known one
//! (`meta`, `index`, `ff`, `r`/`s`/`f` + u64 BE) so that the fuzzer does not
//! have to find them. LMDB's own page structure is trusted (see SECURITY.md):
//! the file is always written by LMDB, only keys and values are fuzzed.
#![no_main]

use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use libfuzzer_sys::fuzz_target;
use molrec::lmdb::Reader;
use std::path::PathBuf;

fn entries(data: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = data;
    while rest.len() >= 3 {
        let klen = rest[0] as usize;
        let vlen = u16::from_le_bytes([rest[1], rest[2]]) as usize;
        rest = &rest[3..];
        if klen == 0 || rest.len() < klen {
            break;
        }
        let (key, tail) = rest.split_at(klen);
        let vlen = vlen.min(tail.len());
        let (value, tail) = tail.split_at(vlen);
        out.push((well_known(key), value.to_vec()));
        rest = tail;
    }
    out
}

/// Keys starting with 0xFF name a well-known key by their second byte.
fn well_known(key: &[u8]) -> Vec<u8> {
    if key.len() >= 2 && key[0] == 0xFF {
        let n = key.get(2).copied().unwrap_or(0) as u64;
        let numbered = |p: u8| {
            let mut k = vec![p];
            k.extend_from_slice(&n.to_be_bytes());
            k
        };
        return match key[1] % 6 {
            0 => b"meta".to_vec(),
            1 => b"index".to_vec(),
            2 => b"ff".to_vec(),
            3 => numbered(b'r'),
            4 => numbered(b's'),
            _ => numbered(b'f'),
        };
    }
    key.to_vec()
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("molrec-fuzz-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir.join("input.mrec.lmdb")
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    let lock = path.with_extension("lmdb-lock");
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&lock);
    let written = {
        let mut options = EnvOpenOptions::new();
        options.map_size(64 << 20);
        // SAFETY: valid flags for a new private file.
        unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC) };
        // SAFETY: the path is private to this process and opened once at a time.
        let Ok(env) = (unsafe { options.open(&path) }) else {
            return;
        };
        let result = (|| -> heed::Result<()> {
            let mut txn = env.write_txn()?;
            let db: Database<Bytes, Bytes> = env.create_database(&mut txn, None)?;
            for (k, v) in entries(data) {
                // LMDB refuses keys longer than 511 bytes: not the reader's concern.
                let _ = db.put(&mut txn, &k, &v);
            }
            txn.commit()
        })();
        env.prepare_for_closing().wait();
        result.is_ok()
    };
    if !written {
        return;
    }
    if let Ok(reader) = Reader::open(&path) {
        let _ = reader.read_collection();
        if let Ok(txn) = reader.txn() {
            for r in 0..reader.n_records().min(16) {
                let _ = txn.for_each_frame(r, |view| {
                    for block in view.blocks.values() {
                        for column in block.columns.values() {
                            let _ = column.f64_view();
                        }
                    }
                    Ok(())
                });
            }
        }
    }
});
