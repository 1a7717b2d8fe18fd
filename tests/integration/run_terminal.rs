//! `safeprune run` on a terminal behaves as `docker system prune` does:
//! it asks `Delete N objects (SIZE)? [y/N]` first, removes only
//! on yes, shows its progress on stderr while it removes, and ends its
//! table with `Total reclaimed space: SIZE`. `--yes` (`-y`, `-f`) and a
//! stdin that is no terminal never ask. The terminal is script(1)'s
//! pseudo-terminal, the answer typed on it; the engine a private dockerd.

use crate::util;
use crate::util::pty;

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use bollard::query_parameters::ListContainersOptionsBuilder;
use util::docker::PrivateDockerd;
use util::node::{Cli, Runtime};

/// Containers at any age; images, and so what the containers free, kept:
/// the run deletes exactly the containers a test makes.
const CONTAINERS_ONLY: &str = "containers: { min_age: \"0\" }\nimages: { enabled: false }\n";

/// Makes `n` containers that never ran (eligible at once), named
/// `prefix-i`; their ids.
async fn containers(engine: &PrivateDockerd, base: &str, prefix: &str, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            engine
                .create_container(&format!("{prefix}-{i}"), base, &[], util::EXIT_0)
                .await,
        );
    }
    ids
}

/// The ids of every container on the engine.
async fn existing(engine: &PrivateDockerd) -> BTreeSet<String> {
    engine
        .docker()
        .list_containers(Some(
            ListContainersOptionsBuilder::default().all(true).build(),
        ))
        .await
        .unwrap()
        .into_iter()
        .filter_map(|c| c.id)
        .collect()
}

/// `safeprune --config … args` on a pseudo-terminal 60 columns wide (its
/// stdin, stdout and stderr), with `typed` typed on it and then the end of
/// input: the exit code and all the terminal showed.
fn on_a_terminal(cli: &Cli, args: &str, typed: &str) -> (Option<i32>, String) {
    let line = format!(
        "stty cols 60; exec {} --config {} {args}",
        env!("CARGO_BIN_EXE_safeprune"),
        cli.policy_path().display()
    );
    let mut child = pty::spawn(&line);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(typed.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

const QUESTION: &str = "? [y/N] ";

/// `safeprune run` on a pseudo-terminal, sent SIGINT (as Ctrl-C would) once
/// it asks, nothing typed: the exit code and what the terminal showed.
fn interrupted_at_the_question(cli: &Cli) -> (Option<i32>, String) {
    let line = format!(
        "exec {} --config {} run",
        env!("CARGO_BIN_EXE_safeprune"),
        cli.policy_path().display()
    );
    let mut child = pty::spawn(&line);
    let mut stdout = child.stdout.take().unwrap();
    let mut shown = Vec::new();
    let mut chunk = [0u8; 4096];
    while !String::from_utf8_lossy(&shown).contains(QUESTION) {
        let n = std::io::Read::read(&mut stdout, &mut chunk).unwrap();
        assert!(
            n > 0,
            "ended before asking: {}",
            String::from_utf8_lossy(&shown)
        );
        shown.extend_from_slice(&chunk[..n]);
    }
    // safeprune is script's child, the shell having exec'd it.
    let pgrep = Command::new("pgrep")
        .args(["-P", &child.id().to_string()])
        .output()
        .unwrap();
    let pid = String::from_utf8_lossy(&pgrep.stdout).trim().to_owned();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success(),
        "{pid:?}"
    );
    std::io::Read::read_to_end(&mut stdout, &mut shown).unwrap();
    let status = child.wait().unwrap();
    drop(child.stdin.take());
    (status.code(), String::from_utf8_lossy(&shown).into_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn on_a_terminal_run_asks_first_and_removes_only_on_yes() {
    let engine = PrivateDockerd::start().await;
    let base = engine.import_busybox_image("confirm/base:1", None).await;
    let ids = containers(&engine, &base, "asked", 3).await;
    let cli = Cli::new(&Runtime::Docker(engine.endpoint()), CONTAINERS_ONLY);

    // No, and an empty line, and the end of input: nothing removed, exit 0,
    // said so, and nothing written as a run.
    for typed in ["n\n", "\n", "", "nope\n"] {
        let (code, shown) = on_a_terminal(&cli, "run", typed);
        assert_eq!(code, Some(0), "{typed:?}: {shown}");
        assert!(
            shown.contains("safeprune: this run deletes 3 containers ("),
            "{typed:?}: {shown}"
        );
        assert!(shown.contains("Delete 3 objects ("), "{typed:?}: {shown}");
        assert!(shown.contains(QUESTION), "{typed:?}: {shown}");
        assert!(
            shown.contains("safeprune: nothing removed (not confirmed)"),
            "{typed:?}: {shown}"
        );
        assert!(!shown.contains("SUMMARY"), "no report: {shown}");
        assert!(!shown.contains("removing "), "{typed:?}: {shown}");
        let left = existing(&engine).await;
        assert!(ids.iter().all(|id| left.contains(id)), "{typed:?}: {shown}");
        for file in ["report.json", "safeprune.prom"] {
            assert!(!cli.path(file).exists(), "{typed:?}: {file} written");
        }
        let audit = std::fs::read_to_string(cli.path("audit.jsonl")).unwrap_or_default();
        assert!(audit.is_empty(), "{typed:?}: {audit}");
    }

    // Ctrl-C at the question: nothing removed, at once, exit 0.
    let (code, shown) = interrupted_at_the_question(&cli);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.contains("safeprune: nothing removed (stopped by a signal before an answer)"),
        "{shown}"
    );
    let left = existing(&engine).await;
    assert!(ids.iter().all(|id| left.contains(id)), "{shown}");
    assert!(!cli.path("report.json").exists());

    // Yes: removed, with the progress line on stderr, no wider than the
    // terminal, erased at the end, and docker's last line.
    let (code, shown) = on_a_terminal(&cli, "run", "Yes\n");
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains(QUESTION), "{shown}");
    let left = existing(&engine).await;
    assert!(ids.iter().all(|id| !left.contains(id)), "{shown}");
    let drawn: Vec<&str> = shown
        .split("\r\x1b[K")
        .skip(1)
        .map(|s| s.split(['\r', '\n']).next().unwrap_or_default())
        .filter(|s| !s.is_empty())
        .collect();
    assert!(
        drawn
            .iter()
            .any(|l| l.starts_with("removing 3/3 objects") && l.contains("container asked-")),
        "{drawn:?}: {shown}"
    );
    assert!(
        drawn.iter().all(|l| l.chars().count() < 60),
        "wider than the terminal: {drawn:?}"
    );
    let tail = &shown[shown.rfind("removing ").unwrap()..];
    let line_end = tail.find('\n').unwrap_or(tail.len());
    assert!(
        tail[..line_end].contains("\r\x1b[K"),
        "the line is erased at the end: {tail:?}"
    );
    let last = shown.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("Total reclaimed space: "),
        "the table ends with docker's line: {shown}"
    );
    assert!(cli.path("report.json").exists());

    // A dry run never asks, and says what it would reclaim in its own
    // words.
    containers(&engine, &base, "dry", 1).await;
    let (code, shown) = on_a_terminal(&cli, "run --dry-run", "n\n");
    assert_eq!(code, Some(0), "{shown}");
    assert!(!shown.contains(QUESTION), "{shown}");
    assert!(shown.contains("would delete: 1 container"), "{shown}");
    assert!(!shown.contains("Total reclaimed space"), "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn yes_force_and_a_stdin_that_is_no_terminal_never_ask() {
    let engine = PrivateDockerd::start().await;
    let base = engine.import_busybox_image("confirm/base:1", None).await;
    let cli = Cli::new(&Runtime::Docker(engine.endpoint()), CONTAINERS_ONLY);

    // --yes and its aliases on a terminal: removed at once, whatever is
    // typed.
    for flag in ["--yes", "-y", "-f", "--force"] {
        let ids = containers(&engine, &base, flag.trim_start_matches('-'), 2).await;
        let (code, shown) = on_a_terminal(&cli, &format!("run {flag}"), "n\n");
        assert_eq!(code, Some(0), "{flag}: {shown}");
        assert!(!shown.contains(QUESTION), "{flag}: {shown}");
        let left = existing(&engine).await;
        assert!(ids.iter().all(|id| !left.contains(id)), "{flag}: {shown}");
        assert!(shown.contains("Total reclaimed space: "), "{flag}: {shown}");
    }

    // stdin a pipe (cron, systemd, a script), stderr and stdout too: as
    // before, no question, no progress line.
    let ids = containers(&engine, &base, "piped", 2).await;
    let mut child = cli
        .command(&["run"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"n\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains(QUESTION), "{err}");
    assert!(!err.contains("removing "), "{err}");
    let left = existing(&engine).await;
    assert!(ids.iter().all(|id| !left.contains(id)), "{err}");
    let last = table.trim_end().lines().last().unwrap_or_default();
    assert!(last.starts_with("Total reclaimed space: "), "{table}");

    // stdin a terminal but stderr not: nobody would see the question.
    let ids = containers(&engine, &base, "stderr-piped", 1).await;
    let (code, shown) = on_a_terminal(&cli, "run 2>/dev/null", "n\n");
    assert_eq!(code, Some(0), "{shown}");
    assert!(!shown.contains(QUESTION), "{shown}");
    let left = existing(&engine).await;
    assert!(ids.iter().all(|id| !left.contains(id)), "{shown}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_terminal_a_long_run_logs_its_progress_after_10_s_at_the_default_level() {
    let engine = PrivateDockerd::start().await;
    let base = engine.import_busybox_image("progress/base:1", None).await;
    let ids = containers(&engine, &base, "long", 40).await;
    let cli = Cli::new(
        &Runtime::Docker(engine.endpoint()),
        &format!(
            "{CONTAINERS_ONLY}networks: {{ enabled: false }}\nbuild_cache: {{ enabled: false }}\n\
             safety: {{ concurrency: 1 }}\n"
        ),
    );
    // As cron runs it: no terminal anywhere, no -v.
    let run = cli
        .command(&["run"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Once it removes, the engine hangs for 11 s: the run is a long one.
    let started = std::time::Instant::now();
    while std::fs::read_to_string(cli.path("audit.jsonl")).map_or(0, |t| t.lines().count()) == 0 {
        assert!(started.elapsed().as_secs() < 60, "no removal");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    engine.freeze();
    std::thread::sleep(std::time::Duration::from_secs(11));
    engine.thaw();
    let out = run.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let left = existing(&engine).await;
    assert!(ids.iter().all(|id| !left.contains(id)), "{err}");
    // One line for the 11 s: the first comes only after 10 s, the rest of
    // the run took less than 10 s more. A log line, not a terminal's.
    let progress: Vec<&str> = err.lines().filter(|l| l.contains("removing ")).collect();
    assert_eq!(progress.len(), 1, "{err}");
    assert!(progress[0].contains(" INFO "), "{err}");
    assert!(progress[0].contains("/40 objects"), "{err}");
    assert!(
        progress[0].contains("done=") && progress[0].contains("planned=40"),
        "{err}"
    );
    assert!(!err.contains('\r'), "{err:?}");
}
