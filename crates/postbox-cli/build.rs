//! `postbox --version` names the commit it was built from: the git commit
//! of the checkout, or `POSTBOX_GIT_COMMIT` when the build has no `.git`
//! (a container build, a crates.io package), else "unknown".

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=POSTBOX_GIT_COMMIT");
    let git_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.git");
    if git_dir.exists() {
        // A new commit moves HEAD or the branch it points at.
        for f in ["HEAD", "packed-refs"] {
            println!("cargo:rerun-if-changed={}", git_dir.join(f).display());
        }
        if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD")) {
            if let Some(r) = head.strip_prefix("ref: ") {
                println!(
                    "cargo:rerun-if-changed={}",
                    git_dir.join(r.trim()).display()
                );
            }
        }
    }
    let commit = std::env::var("POSTBOX_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=POSTBOX_GIT_COMMIT={commit}");
}

fn git_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|c| !c.is_empty())
}
