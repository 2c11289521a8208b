//! Embeds the data the `harness` binary judges with: the suites, the
//! fixtures, the spec map and the protocol's JSON Schemas, read from the
//! repository around this crate (`../suites`, `../fixtures`,
//! `../spec-map.toml`, `../docs/schemas`, `../docs/canonical-json.schema.json`).
//!
//! It writes `$OUT_DIR/bundle.rs`: one `include_bytes!` per file, sorted by
//! path, which `src/data.rs` includes. So the binary runs alone (copied to
//! a CI runner, `cargo install`ed), and a build from the repository
//! (`cargo build`, `cargo install --path harness`, `cargo install --git`,
//! which checks out the whole repository) always carries the tree's
//! current files: cargo reruns this script when any of them changes.
//!
//! The data lives outside the crate's directory, so `cargo package` (a
//! crate on its own) could not build it: the crate is not published
//! (`publish = false`; its `molrec` dependency is a path too).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// What is embedded, relative to the repository root: directories (walked,
/// files of these extensions only) and single files.
const DIRECTORIES: &[(&str, &[&str])] = &[
    ("suites", &["toml"]),
    ("fixtures", &["json", "mrec.lmdb"]),
    ("docs/schemas", &["json"]),
];
const FILES: &[&str] = &["spec-map.toml", "docs/canonical-json.schema.json"];

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = manifest.parent().unwrap_or(Path::new("..")).to_path_buf();
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    for (dir, extensions) in DIRECTORIES {
        let path = root.join(dir);
        println!("cargo:rerun-if-changed={}", path.display());
        if !path.is_dir() {
            missing(&path);
        }
        walk(&root, &path, extensions, &mut found);
    }
    for file in FILES {
        let path = root.join(file);
        println!("cargo:rerun-if-changed={}", path.display());
        if !path.is_file() {
            missing(&path);
        }
        found.push(((*file).to_owned(), path));
    }
    found.sort();
    let mut out = String::from(
        "/// Every embedded file: its path from the repository root, and its bytes; sorted by path.\n\
         pub static FILES: &[(&str, &[u8])] = &[\n",
    );
    for (rel, path) in &found {
        let absolute = path.canonicalize().unwrap_or_else(|_| path.clone());
        let _ = writeln!(
            out,
            "    ({rel:?}, include_bytes!({:?})),",
            absolute.display().to_string()
        );
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it")).join("bundle.rs");
    if let Err(e) = std::fs::write(&dest, out) {
        panic!("cannot write {}: {e}", dest.display());
    }
}

fn missing(path: &Path) -> ! {
    panic!(
        "{} is missing: the harness embeds the repository's suites, fixtures, spec map and \
         schemas, so it builds only from a checkout of the whole repository \
         (`cargo install --path harness` or `cargo install --git URL harness`)",
        path.display()
    )
}

/// The files under `dir` whose names end in one of `extensions`, as
/// (path from `root` with `/`, path).
fn walk(root: &Path, dir: &Path, extensions: &[&str], out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            walk(root, &path, extensions, out);
        } else if extensions.iter().any(|x| name.ends_with(&format!(".{x}"))) {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            let rel: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push((rel.join("/"), path));
        }
    }
}
