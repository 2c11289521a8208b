//! A file's content digest: XXH3-128 of its bytes, as 32 lowercase hex
//! digits (the canonical big-endian form `xxhsum -H2` and Python's
//! `xxhash.xxh3_128_hexdigest` print). A set's manifest keeps one per shard
//! (docs/shards.md), so that a shard whose bytes changed on disk or in a
//! copy is refused by name, where the binding's own checks cannot see a
//! changed value (v1 frames carry no checksum).
//!
//! Why XXH3-128: verifying a file should cost a fraction of reading it
//! once. On the project machine XXH3-128 of a file in the page cache took
//! about 0.35x of one full read of the collection (as long as copying its
//! bytes), BLAKE3 0.84x and SHA-256 2x (`cli/examples/digest_speed.rs`,
//! docs/shards.md). It detects any accidental change (a flipped bit, a
//! torn or truncated copy) but is not a cryptographic hash: it does not
//! prove that nobody crafted a file to match.

use crate::error::{Error, Result};
use std::path::Path;
use xxhash_rust::xxh3::Xxh3;

/// The manifest field that holds a shard's digest, and the algorithm's name.
pub const DIGEST_FIELD: &str = "xxh3_128";

/// Hex digits of a digest.
pub const DIGEST_HEX_LEN: usize = 32;

/// The file is read through a map of this many bytes at a time: the map
/// costs no copy (a `read` into a buffer took 1.4 times as long here), and
/// a window bounds what the process has mapped whatever the file's size.
const WINDOW: u64 = 64 << 20;

/// A digest's text: the 128-bit value, high half first.
fn hex(value: u128) -> String {
    format!("{value:0width$x}", width = DIGEST_HEX_LEN)
}

/// The digest of `bytes` (32 lowercase hex digits).
pub fn digest_of(bytes: &[u8]) -> String {
    hex(xxhash_rust::xxh3::xxh3_128(bytes))
}

/// The digest of the file at `path`, read whole. The file is mapped a
/// window at a time: like every reader of a mapped file, this assumes the
/// file is not cut short while it is read.
pub fn file_digest(path: &Path) -> Result<String> {
    digest_in_windows(path, WINDOW)
}

fn digest_in_windows(path: &Path, window: u64) -> Result<String> {
    let file = std::fs::File::open(path).map_err(|e| Error::io_at(path, e))?;
    let len = file.metadata().map_err(|e| Error::io_at(path, e))?.len();
    let mut hasher = Xxh3::new();
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(window);
        // SAFETY: a read-only, private map of a file this function only
        // reads, dropped before the next one is made; the file is assumed
        // not to shrink meanwhile (see above), as LMDB's own map assumes.
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(at)
                .len(n as usize)
                .map(&file)
        }
        .map_err(|e| Error::io_at(path, e))?;
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Sequential);
        hasher.update(&map);
        at += n;
    }
    Ok(hex(hasher.digest128()))
}

/// Whether `s` is a digest as this implementation writes it: exactly
/// [`DIGEST_HEX_LEN`] lowercase hex digits.
pub fn is_digest(s: &str) -> bool {
    s.len() == DIGEST_HEX_LEN && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference implementation's values (libxxhash's `XXH3_128bits`,
    /// high half first).
    #[test]
    fn digests_are_the_reference_xxh3_128() {
        assert_eq!(digest_of(b""), "99aa06d3014798d86001c324468d497f");
        assert_eq!(digest_of(b"abc"), "06b05ab6733a618578af5f94892f3950");
    }

    #[test]
    fn a_file_hashed_in_windows_is_hashed_whole() {
        let path = std::env::temp_dir().join(format!("molrec-digest-{}", std::process::id()));
        // Three windows of 8 KiB and part of a fourth, not a multiple of
        // the page size; and one window.
        let bytes: Vec<u8> = (0..3 * 8192 + 1234).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(digest_in_windows(&path, 8192).unwrap(), digest_of(&bytes));
        assert_eq!(file_digest(&path).unwrap(), digest_of(&bytes));
        std::fs::write(&path, b"").unwrap();
        assert_eq!(file_digest(&path).unwrap(), digest_of(b""));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn only_lowercase_hex_of_the_right_length_is_a_digest() {
        assert!(is_digest(&"0123456789abcdef".repeat(2)));
        assert!(!is_digest(&"0123456789ABCDEF".repeat(2)));
        assert!(!is_digest(&"0".repeat(31)));
        assert!(!is_digest(&"0".repeat(33)));
        assert!(!is_digest(&format!("{}g", "0".repeat(31))));
        assert!(!is_digest(&format!("{}é", "0".repeat(30))));
    }
}
