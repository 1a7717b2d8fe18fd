//! A command on a real pseudo-terminal: script(1)'s, which gives `line`
//! (run by `sh -c`) a terminal for stdin, stdout and stderr and copies
//! what it shows to its own stdout. What a person at a terminal meets: the
//! question, the progress line, tables fitted to the width.

use std::process::{Child, Command, Stdio};

/// `script -qefc LINE /dev/null`, without the variables that would point
/// safeprune elsewhere or change what it prints (`SAFEPRUNE_CONFIG`,
/// `SAFEPRUNE_NODE_NAME`, `RUST_LOG`, `COLUMNS`): `line` says all. Set
/// the width with `stty cols N;` in `line`.
#[must_use]
pub fn script(line: &str) -> Command {
    let mut cmd = Command::new("script");
    cmd.args(["-qefc", line, "/dev/null"])
        .env_remove("SAFEPRUNE_CONFIG")
        .env_remove("SAFEPRUNE_NODE_NAME")
        .env_remove("RUST_LOG")
        .env_remove("COLUMNS");
    cmd
}

/// [`script`] started with its stdin, stdout and stderr piped: the test
/// types on the terminal through stdin and reads what it showed on stdout.
#[must_use]
pub fn spawn(line: &str) -> Child {
    script(line)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script runs (bsdutils; scripts/deps.sh installs it)")
}
