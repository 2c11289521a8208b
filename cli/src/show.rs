//! `mrec info`, `dump` and `validate` of one file or of a sharded set
//! (several files, a directory, a glob pattern, a manifest: docs/shards.md),
//! and `mrec set manifest` and `mrec set verify`. One path that is a
//! collection file reads as before; anything else opens a `Set`, checking
//! each shard's pages as it opens it.

use crate::exit_code;
use molrec::lmdb::set::{is_manifest_name, shard_files, sidecar_manifest, verify_digests};
use molrec::lmdb::{Reader, Set, SetOptions, DIGEST_FIELD};
use molrec::model::SequenceSchema;
use molrec::model_json::collection_to_json;
use molrec::Error;
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The one collection file `paths` name, if they name one (not a set).
fn single(paths: &[PathBuf]) -> Option<&Path> {
    match paths {
        [one]
            if one.is_file()
                && !one
                    .file_name()
                    .is_some_and(|n| is_manifest_name(&n.to_string_lossy())) =>
        {
            Some(one)
        }
        _ => None,
    }
}

fn open_set(paths: &[PathBuf]) -> Result<Set, Error> {
    Set::open(paths, SetOptions { checked: true })
}

/// How a set is named in messages: its one path, or its first and a count.
fn label(paths: &[PathBuf]) -> String {
    match paths {
        [one] => one.display().to_string(),
        [first, rest @ ..] => format!("{} and {} more", first.display(), rest.len()),
        [] => "the set".into(),
    }
}

/// `mrec dump`: the collection, or the whole set as one collection (its
/// first shard's document, every record in order), as canonical JSON.
pub fn dump(paths: &[PathBuf]) -> Result<(), Error> {
    let collection = match single(paths) {
        Some(file) => Reader::open_checked(file)?.read_collection()?,
        None => open_set(paths)?.read_collection()?,
    };
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &collection_to_json(&collection))
        .map_err(|e| Error::Io(e.into()))?;
    writeln!(out)?;
    Ok(())
}

/// `mrec info`: a summary of the file, or of the set and its shards.
pub fn info(paths: &[PathBuf]) -> Result<(), Error> {
    if let Some(file) = single(paths) {
        let reader = Reader::open_checked(file)?;
        let size = std::fs::metadata(file)?.len();
        println!("file          {} ({size} bytes)", file.display());
        println!("records       {}", reader.n_records());
        println!("frames        {}", reader.n_frames());
        return declaration(&reader, reader.schema(), "");
    }
    let set = open_set(paths)?;
    let bytes: u64 = set.shard_infos().map(|s| s.bytes).sum();
    let how = match set.manifest_path() {
        Some(m) => format!("manifest {}", m.display()),
        None => "no manifest: every shard opened".into(),
    };
    println!(
        "set           {} ({} shards, {bytes} bytes; {how})",
        label(paths),
        set.n_shards()
    );
    println!("records       {}", set.n_records());
    println!("frames        {}", set.n_frames());
    println!("declaration   sha256 {}", set.declaration_sha256());
    // The declaration is every shard's; the first shard's own index
    // columns stand for the others' (validate checks that they agree).
    let first = set.shard(0)?;
    declaration(first, first.schema(), " (first shard's)")?;
    const SHOWN: usize = 20;
    for (s, shard) in set.shard_infos().enumerate().take(SHOWN) {
        println!(
            "shard {s:>7}  {} records, {} frames, {} bytes: {}",
            shard.n_records,
            shard.n_frames,
            shard.bytes,
            shard.path.display()
        );
    }
    if set.n_shards() > SHOWN {
        println!("shards ...    and {} more", set.n_shards() - SHOWN);
    }
    Ok(())
}

/// The lines of `info` that say what the collection declares.
fn declaration(reader: &Reader, schema: &SequenceSchema, own: &str) -> Result<(), Error> {
    let units = reader
        .collection_meta()
        .get("units")
        .cloned()
        .unwrap_or(Value::Null);
    let blocks: Vec<String> = schema
        .blocks
        .iter()
        .map(|(name, b)| {
            format!(
                "{name}({})",
                b.columns.keys().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    let meta: Vec<String> = schema
        .meta
        .iter()
        .map(|(k, d)| format!("{k}:{}", d.tag.name()))
        .collect();
    let index: Vec<String> = reader
        .index_columns()?
        .iter()
        .map(|(k, c)| format!("{k}:{}", c.dtype()))
        .collect();
    let or_dash = |v: Vec<String>, sep: &str| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.join(sep)
        }
    };
    println!("units         {units}");
    println!("blocks        {}", or_dash(blocks, "; "));
    println!("step meta     {}", or_dash(meta, ", "));
    println!("own index     {}{own}", or_dash(index, ", "));
    let ff = if reader.forcefield()?.is_some() {
        "yes"
    } else {
        "no"
    };
    println!("force field   {ff}");
    Ok(())
}

/// The worse of two exit statuses (the higher code).
fn worse(a: ExitCode, b: ExitCode) -> ExitCode {
    if format!("{b:?}") > format!("{a:?}") {
        b
    } else {
        a
    }
}

/// `mrec validate`: every violation of the file (or of each shard, named),
/// then the findings; for a set also what the set itself requires (each
/// shard as the manifest describes it, own index columns that line up).
/// With `digests`, first `mrec set verify` of the same paths.
pub fn validate(paths: &[PathBuf], digests: bool) -> ExitCode {
    let verified = match digests {
        true => verify(paths),
        false => ExitCode::SUCCESS,
    };
    let validated = match single(paths) {
        Some(file) => validate_one(file),
        None => validate_set(paths),
    };
    worse(verified, validated)
}

fn validate_set(paths: &[PathBuf]) -> ExitCode {
    let set = match open_set(paths) {
        Ok(set) => set,
        Err(e) => {
            eprintln!("mrec: {e}");
            return exit_code(&e);
        }
    };
    let mut set_errors = Vec::new();
    let mut shards = Vec::new();
    for s in 0..set.n_shards() {
        let name = set
            .shard_info(s)
            .map_or(String::new(), |i| format!("shard {}: ", i.path.display()));
        shards.push((name, set.shard(s).map(|_| s)));
    }
    if shards.iter().all(|(_, r)| r.is_ok()) {
        if let Err(e) = set.index_columns() {
            set_errors.push(e);
        }
    }
    let mut violations = 0usize;
    let mut findings = 0usize;
    let mut worst = ExitCode::SUCCESS;
    let judge = |e: &Error, worst: &mut ExitCode| *worst = worse(*worst, exit_code(e));
    for (name, opened) in &shards {
        match opened {
            Err(e) => {
                eprintln!("{e}");
                violations += 1;
                judge(e, &mut worst);
            }
            Ok(s) => {
                let reader = set.shard(*s).expect("opened above");
                for v in reader.violations() {
                    eprintln!("{name}{v}");
                    violations += 1;
                    judge(&v, &mut worst);
                }
                for f in reader.findings() {
                    eprintln!("{name}{f}");
                    findings += 1;
                }
            }
        }
    }
    for e in &set_errors {
        eprintln!("{e}");
        violations += 1;
        judge(e, &mut worst);
    }
    let should = match findings {
        0 => String::new(),
        n => format!("; {n} finding(s) of level should (readers accept these)"),
    };
    let what = label(paths);
    if violations == 0 {
        println!(
            "{what}: conforms ({} shards, {} records, {} frames){should}",
            set.n_shards(),
            set.n_records(),
            set.n_frames()
        );
        return ExitCode::SUCCESS;
    }
    eprintln!("{what}: {violations} violation(s){should}");
    worst
}

/// `validate` of one file: `Reader::violations` (every failing part, not
/// only the first: the exit status), then `Reader::findings` (the
/// `should`s broken, which readers accept: printed, never an exit status).
fn validate_one(file: &Path) -> ExitCode {
    let reader = match Reader::open_checked(file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("mrec: {e}");
            return exit_code(&e);
        }
    };
    let violations = reader.violations();
    let findings = reader.findings();
    for v in &violations {
        eprintln!("{v}");
    }
    for f in &findings {
        eprintln!("{f}");
    }
    let should = match findings.len() {
        0 => String::new(),
        n => format!("; {n} finding(s) of level should (readers accept these)"),
    };
    if violations.is_empty() {
        println!(
            "{}: conforms ({} records, {} frames){should}",
            file.display(),
            reader.n_records(),
            reader.n_frames()
        );
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "{}: {} violation(s){should}",
        file.display(),
        violations.len()
    );
    violations
        .iter()
        .map(exit_code)
        .fold(ExitCode::from(1), worse)
}

/// `mrec set manifest PATH`: opens every `*.mrec.lmdb` of the directory
/// `PATH` as a set (pages checked, declarations compared), computes each
/// shard's content digest, and writes the manifest, last. Of one file: its
/// own manifest beside it (`<file>.mrec-set.json`), a set of that file.
pub fn write_manifest(path: &Path) -> Result<(), Error> {
    let (files, dir, target) = if path.is_dir() {
        (shard_files(path)?, path, None)
    } else {
        let dir = match path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        (vec![path.to_path_buf()], dir, Some(sidecar_manifest(path)))
    };
    let set = Set::open_files(&files, SetOptions { checked: true })?;
    let mut manifest = set.manifest(dir)?;
    manifest.fill_digests(dir)?;
    let written = match target {
        None => manifest.install(dir)?,
        Some(sidecar) => manifest.install_at(&sidecar)?,
    };
    println!(
        "{}: {} shards, {} records, {} frames; {DIGEST_FIELD} digests",
        written.display(),
        set.n_shards(),
        set.n_records(),
        set.n_frames()
    );
    Ok(())
}

/// `mrec set verify PATH...`: every shard hashed again and compared with
/// the digest its manifest keeps (docs/shards.md). Each shard verified is
/// a line on stdout; each that is not (changed, without a digest, not
/// there) an error on stderr, naming it. Exit 0 when every shard is
/// verified, else the worst of its errors' statuses (1, or 3 for a shard
/// that is not there).
pub fn verify(paths: &[PathBuf]) -> ExitCode {
    let start = std::time::Instant::now();
    let checks = match verify_digests(paths) {
        Ok(checks) => checks,
        Err(e) => {
            eprintln!("mrec: {e}");
            return exit_code(&e);
        }
    };
    let mut code = ExitCode::SUCCESS;
    let mut bytes = 0u64;
    for check in &checks {
        match check.error() {
            None => {
                bytes += check.actual_bytes.unwrap_or(0);
                println!(
                    "verified  {} ({DIGEST_FIELD} {})",
                    check.path.display(),
                    check.expected.as_deref().unwrap_or_default()
                );
            }
            Some(e) => {
                eprintln!("{e}");
                code = worse(code, exit_code(&e));
            }
        }
    }
    let what = label(paths);
    let good = checks.iter().filter(|c| c.is_verified()).count();
    if good == checks.len() {
        println!(
            "{what}: {good} shards verified, {bytes} bytes, {:.2} s",
            start.elapsed().as_secs_f64()
        );
    } else {
        eprintln!(
            "{what}: {} of {} shards not verified",
            checks.len() - good,
            checks.len()
        );
    }
    code
}
