//! Writes to a full file system: `mrec write` and `mrec import aselmdb`
//! onto a small tmpfs mounted in a private mount namespace (`unshare -m`,
//! or `unshare -rm` in a user namespace) that fills mid-write. Each names
//! the file and the free space left (LMDB reports the short write as EIO,
//! which says neither), exits 3, leaves the collection it was to replace
//! byte for byte as it was, and leaves nothing else behind (no `.partial`,
//! no lock file, no spill file).
//!
//! A libtest-mimic driver: where no private tmpfs can be mounted (no mount
//! namespace for this user), each trial is reported as ignored, with why.

mod common;

use libtest_mimic::{Arguments, Completion, Trial};
use std::path::{Path, PathBuf};
use std::process::Command;

const MREC: &str = env!("CARGO_BIN_EXE_mrec");

type Body = fn() -> Option<String>;

fn main() {
    let trials: [(&str, Body); 3] = [
        (
            "a_write_to_a_full_file_system_says_how_much_is_free",
            a_write_to_a_full_file_system_says_how_much_is_free,
        ),
        (
            "an_overwrite_that_fills_the_disk_leaves_the_old_collection",
            an_overwrite_that_fills_the_disk_leaves_the_old_collection,
        ),
        (
            "an_import_that_fills_the_disk_leaves_the_old_collection",
            an_import_that_fills_the_disk_leaves_the_old_collection,
        ),
    ];
    let trials = trials
        .into_iter()
        .map(|(name, body)| {
            Trial::ignorable_test(name, move || {
                Ok(match body() {
                    None => Completion::Completed,
                    Some(why) => Completion::ignored_with(why),
                })
            })
        })
        .collect();
    libtest_mimic::run(&Arguments::from_args(), trials).exit();
}

/// What a command run on the full tmpfs left: its exit status and stderr,
/// the tmpfs's entries afterwards, and the bytes at `out` then.
struct Run {
    code: Option<i32>,
    stderr: String,
    entries: Vec<String>,
    out_bytes: Option<Vec<u8>>,
}

/// Mounts a tmpfs of `size` at `dir/mnt` in a private mount namespace, runs
/// `setup` there (its failure fails the test), then `command` (a shell
/// line; `$MNT` is the mount point), and keeps what `Run` says in `dir`
/// before the namespace goes. `Err`: no private tmpfs could be mounted
/// (why).
fn on_full_tmpfs(dir: &Path, size: &str, setup: &str, command: &str) -> Result<Run, String> {
    let mount = dir.join("mnt");
    std::fs::create_dir_all(&mount).unwrap();
    let kept = dir.join("kept");
    let script = format!(
        "set -u; MNT='{mnt}'; \
         mount -t tmpfs -o size={size} tmpfs \"$MNT\" || {{ echo 'setup failed' >&2; exit 99; }}; \
         {setup} || exit 98; \
         {command} 2> '{kept}.stderr'; echo $? > '{kept}.code'; \
         ls -A \"$MNT\" > '{kept}.entries'; \
         if [ -e \"$MNT/out.mrec.lmdb\" ]; then cp \"$MNT/out.mrec.lmdb\" '{kept}.out'; fi",
        mnt = mount.display(),
        kept = kept.display(),
    );
    let mut attempts = Vec::new();
    for flags in [&["-m"][..], &["-r", "-m"][..]] {
        let out = match Command::new("unshare")
            .args(flags)
            .args(["--", "sh", "-c", &script])
            .output()
        {
            Ok(out) => out,
            Err(e) => {
                attempts.push(format!("unshare: {e}"));
                continue;
            }
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() == Some(98) {
            panic!("the setup on the tmpfs failed: {stderr}");
        }
        if out.status.code() != Some(0) {
            attempts.push(format!("unshare {}: {}", flags.join(" "), stderr.trim()));
            continue;
        }
        let read = |ext: &str| std::fs::read_to_string(format!("{}.{ext}", kept.display()));
        return Ok(Run {
            code: read("code").unwrap().trim().parse().ok(),
            stderr: read("stderr").unwrap(),
            entries: read("entries")
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect(),
            out_bytes: std::fs::read(format!("{}.out", kept.display())).ok(),
        });
    }
    Err(format!(
        "no private tmpfs could be mounted ({})",
        attempts.join("; ")
    ))
}

/// The free space the error reports, checked to be below `size` bytes.
fn reported_free(stderr: &str, size: u64) -> u64 {
    let free: Option<u64> = stderr
        .split("its file system has ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok());
    match free {
        Some(free) if free < size => free,
        _ => panic!("no free space below {size} bytes said: {stderr}"),
    }
}

/// A canonical-JSON collection too large for 1 MiB (about 1.3 MiB written).
fn large_model(dir: &Path) -> PathBuf {
    let model = dir.join("collection.json");
    common::write_json_file(&model, &common::collection_json(400, 40, 0.0));
    model
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/examples/water-and-ammonia.json")
}

/// A write to a file system that fills up names the file and the free
/// space left when it failed, and leaves nothing at the path.
fn a_write_to_a_full_file_system_says_how_much_is_free() -> Option<String> {
    let dir = common::scratch_dir("cli-test-full");
    let model = large_model(&dir);
    let run = match on_full_tmpfs(
        &dir,
        "1m",
        "true",
        &format!(
            "'{MREC}' write '{}' \"$MNT/out.mrec.lmdb\"",
            model.display()
        ),
    ) {
        Ok(run) => run,
        Err(why) => return Some(why),
    };
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    let out = dir.join("mnt/out.mrec.lmdb");
    assert!(
        run.stderr.contains(&format!("i/o: {}: ", out.display())),
        "{}",
        run.stderr
    );
    // Measured while the write's files still take their room (the partial
    // file is deleted afterwards): less than the whole tmpfs.
    reported_free(&run.stderr, 1 << 20);
    assert!(run.entries.is_empty(), "left behind: {:?}", run.entries);
    let _ = std::fs::remove_dir_all(&dir);
    None
}

/// `mrec write --overwrite` that fills the disk: the collection it was to
/// replace is there, byte for byte, and nothing else.
fn an_overwrite_that_fills_the_disk_leaves_the_old_collection() -> Option<String> {
    let dir = common::scratch_dir("cli-test-full-overwrite");
    let model = large_model(&dir);
    overwrite_on_full_tmpfs(
        &dir,
        &format!(
            "'{MREC}' write --overwrite '{}' \"$MNT/out.mrec.lmdb\"",
            model.display()
        ),
    )
}

/// `mrec import aselmdb --overwrite` of an ASE-LMDB shard too large for
/// the tmpfs: as `mrec write`.
fn an_import_that_fills_the_disk_leaves_the_old_collection() -> Option<String> {
    let dir = common::scratch_dir("cli-test-full-import");
    let source = dir.join("source.aselmdb");
    let mut shard = mrec_import::ShardWriter::create(&source, 1).unwrap();
    for i in 0..3000 {
        let n = 20;
        let positions: Vec<String> = (0..3 * n)
            .map(|k| format!("{}", (i + k) as f64 * 0.25))
            .collect();
        let row = format!(
            "{{\"numbers\": {{\"__ndarray__\": [[{n}], \"int64\", [{}]]}}, \
             \"positions\": {{\"__ndarray__\": [[{n}, 3], \"float64\", [{}]]}}, \"energy\": {i}.5}}",
            vec!["6"; n].join(", "),
            positions.join(", ")
        );
        shard.append(row.as_bytes()).unwrap();
    }
    shard.finish().unwrap();
    overwrite_on_full_tmpfs(
        &dir,
        &format!(
            "'{MREC}' import aselmdb --quiet --overwrite '{}' \"$MNT/out.mrec.lmdb\"",
            source.display()
        ),
    )
}

/// Runs `command` over a small collection at `$MNT/out.mrec.lmdb` on a
/// 1 MiB tmpfs it fills: exit 3 naming the path and the free space, the
/// old collection byte for byte, nothing else on the tmpfs. `Some`: the
/// tmpfs could not be mounted (why).
fn overwrite_on_full_tmpfs(dir: &Path, command: &str) -> Option<String> {
    let old = dir.join("old.mrec.lmdb");
    let (code, _, err) = common::mrec(&["write", example().to_str()?, old.to_str()?]);
    assert_eq!(code, Some(0), "{err}");
    let setup = format!("cp '{}' \"$MNT/out.mrec.lmdb\"", old.display());
    let run = match on_full_tmpfs(dir, "1m", &setup, command) {
        Ok(run) => run,
        Err(why) => return Some(why),
    };
    assert_eq!(run.code, Some(3), "{}", run.stderr);
    assert!(
        run.stderr
            .contains(&format!("{}: ", dir.join("mnt/out.mrec.lmdb").display())),
        "{}",
        run.stderr
    );
    reported_free(&run.stderr, 1 << 20);
    assert_eq!(run.entries, ["out.mrec.lmdb"], "left behind");
    assert!(
        run.out_bytes == Some(std::fs::read(&old).unwrap()),
        "the old collection changed"
    );
    let _ = std::fs::remove_dir_all(dir);
    None
}
