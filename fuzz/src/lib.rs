//! What the fuzz targets share: the split of an input into LMDB entries and
//! the small LMDB file written from them.

use heed::types::Bytes;
use heed::{Database, EnvFlags, EnvOpenOptions};
use std::path::{Path, PathBuf};

/// The input split into `(key, value)` entries:
///
/// ```text
/// entry := key_len: u8 | value_len: u16 LE | key | value
/// ```
///
/// A key of length 0 or one that runs past the input ends the split; a
/// value that runs past it is cut at its end. A key starting `0xFF` names a
/// well-known key by its second byte ([`well_known`]).
pub fn entries(data: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
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

/// Keys starting with 0xFF name a well-known key by their second byte
/// (`meta`, `index`, `ff`, or `r`/`s`/`f` + u64 BE of the third byte), so
/// that the fuzzer does not have to find them.
pub fn well_known(key: &[u8]) -> Vec<u8> {
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

/// A path of this process's own, in a directory of its own (the file-shape
/// rule allows only the file and its `-lock` beside it): `/dev/shm` when it
/// exists (syncs cost nothing there), else the temporary directory.
pub fn scratch(target: &str, name: &str) -> PathBuf {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("molrec-fuzz-{target}-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir.join(format!("{name}.mrec.lmdb"))
}

/// Writes `entries` into a new LMDB file at `path` (an old one and its lock
/// are removed first). LMDB's own page structure is trusted (SECURITY.md):
/// only keys and values are the fuzzer's. `false` when LMDB could not
/// write them (a key longer than LMDB takes is skipped, not a failure).
pub fn write_entries(path: &Path, entries: &[(Vec<u8>, Vec<u8>)]) -> bool {
    let mut lock = path.as_os_str().to_owned();
    lock.push("-lock");
    let _ = std::fs::remove_file(path);
    let _ = std::fs::remove_file(lock);
    let mut options = EnvOpenOptions::new();
    options.map_size(64 << 20);
    // SAFETY: valid flags for a new private file.
    unsafe { options.flags(EnvFlags::NO_SUB_DIR | EnvFlags::NO_SYNC) };
    // SAFETY: the path is private to this process and opened once at a time.
    let Ok(env) = (unsafe { options.open(path) }) else {
        return false;
    };
    let result = (|| -> heed::Result<()> {
        let mut txn = env.write_txn()?;
        let db: Database<Bytes, Bytes> = env.create_database(&mut txn, None)?;
        for (k, v) in entries {
            // LMDB refuses keys longer than 511 bytes: not the reader's concern.
            let _ = db.put(&mut txn, k, v);
        }
        txn.commit()
    })();
    env.prepare_for_closing().wait();
    result.is_ok()
}
