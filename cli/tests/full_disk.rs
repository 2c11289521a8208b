//! A write to a full file system names the file and the free space left.
//! A libtest-mimic driver: where no private tmpfs can be mounted (no mount
//! namespace for this user), the trial is reported as ignored, with why.

mod common;

use libtest_mimic::{Arguments, Completion, Trial};
use std::process::Command;

const MREC: &str = env!("CARGO_BIN_EXE_mrec");

fn main() {
    let trial = Trial::ignorable_test(
        "a_write_to_a_full_file_system_says_how_much_is_free",
        || {
            Ok(
                match a_write_to_a_full_file_system_says_how_much_is_free() {
                    None => Completion::Completed,
                    Some(why) => Completion::ignored_with(why),
                },
            )
        },
    );
    libtest_mimic::run(&Arguments::from_args(), vec![trial]).exit();
}

/// A write to a file system that fills up (a 1 MiB tmpfs mounted in a
/// private mount namespace: `unshare -m`, or `unshare -rm` in a user
/// namespace) names the file and the free space left when it failed, since
/// LMDB reports the short write as EIO. `None` where neither may mount: why.
fn a_write_to_a_full_file_system_says_how_much_is_free() -> Option<String> {
    let dir = common::scratch_dir("cli-test-full");
    let model = dir.join("collection.json");
    common::write_json_file(&model, &common::collection_json(400, 40, 0.0));
    let mount = dir.join("mnt");
    std::fs::create_dir_all(&mount).unwrap();
    let out_path = mount.join("c.mrec.lmdb");
    let script = format!(
        "mount -t tmpfs -o size=1m tmpfs '{}' || {{ echo 'setup failed' >&2; exit 99; }}; \
         exec '{MREC}' write '{}' '{}'",
        mount.display(),
        model.display(),
        out_path.display()
    );
    let mut attempts = Vec::new();
    for flags in [&["-m"][..], &["-r", "-m"][..]] {
        let out = Command::new("unshare")
            .args(flags)
            .args(["--", "sh", "-c", &script])
            .output();
        let out = match out {
            Ok(out) => out,
            Err(e) => {
                attempts.push(format!("unshare: {e}"));
                continue;
            }
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(3) && !stderr.contains("mrec:") {
            attempts.push(format!("unshare {}: {}", flags.join(" "), stderr.trim()));
            continue;
        }
        assert_eq!(out.status.code(), Some(3), "{stderr}");
        assert!(
            stderr.contains(&format!("i/o: {}: ", out_path.display())),
            "{stderr}"
        );
        // Measured while the write's files still take their room (the
        // partial file is deleted afterwards): less than the whole tmpfs.
        let free: Option<u64> = stderr
            .split("its file system has ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|n| n.parse().ok());
        assert!(free.is_some_and(|free| free < 1 << 20), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
        return None;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Some(format!(
        "no private tmpfs could be mounted ({})",
        attempts.join("; ")
    ))
}
