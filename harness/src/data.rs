//! The data this binary was built with, embedded by `build.rs`: the suites
//! (`suites/*.toml`), the fixtures (`fixtures/**`, golden files included),
//! `spec-map.toml` and the protocol's JSON Schemas (`docs/schemas/*.json`,
//! `docs/canonical-json.schema.json`), each under its path from the
//! repository root.
//!
//! [`crate::suite::Layout::embedded`] reads suites, fixtures and the spec
//! map from here, so the binary judges alone, without the repository it was
//! built from; `--root DIR` reads a tree instead (one being edited).

mod bundle {
    include!(concat!(env!("OUT_DIR"), "/bundle.rs"));
}

/// The bytes of the embedded file at `path` (from the repository root,
/// `/`-separated: `fixtures/examples/water-and-ammonia.json`).
pub fn file(path: &str) -> Option<&'static [u8]> {
    bundle::FILES
        .binary_search_by(|(p, _)| (*p).cmp(path))
        .ok()
        .map(|i| bundle::FILES[i].1)
}

/// The embedded files whose path starts with `prefix`, sorted by path.
pub fn files_under(prefix: &str) -> impl Iterator<Item = (&'static str, &'static [u8])> + '_ {
    bundle::FILES
        .iter()
        .filter(move |(p, _)| p.starts_with(prefix))
        .map(|(p, bytes)| (*p, *bytes))
}

/// A short fingerprint of all embedded data (FNV-1a, 64 bits, over every
/// path and its bytes): two binaries with the same one judge with the same
/// suites, fixtures and spec map.
pub fn digest() -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for (path, bytes) in bundle::FILES {
        for b in path.bytes().chain([0]).chain(bytes.iter().copied()) {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bundle_holds_the_suites_the_spec_map_and_the_schemas() {
        assert!(super::file("spec-map.toml").is_some());
        assert!(super::file("docs/schemas/hello.json").is_some());
        assert!(super::files_under("suites/").count() >= 1);
        assert!(super::files_under("fixtures/golden/").count() >= 5);
        assert!(super::file("nope").is_none());
        assert_eq!(super::digest().len(), 16);
    }
}
