//! Bad input gets a clear error and loses nothing.

use crate::support::*;
use std::process::Command;

mod command_line;
mod failing_rows;

pub(crate) fn relay_output(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("relay")
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("POSTBOX_DATABASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}
