//! Engine faults: a socket that accepts and never answers, or
//! answers garbage, is exit 1 naming the endpoint, in bounded time and
//! without a panic; a real engine killed in the middle of a run leaves a
//! valid JSON report and audit log, exit 1 or 3, and the next run finishes
//! the work; a report on a full file system is exit 1 naming the path and
//! leaves no partial file. A SIGTERM while safeprune waits on an engine
//! that never answers ends `run` and `daemon` within 5 s, every file
//! written. The Docker tests run on Docker 20.10 and on
//! Docker 29 with each image store (`docker_tests!`): frozen, dockerd 29
//! hangs alone (its containerd runs on); killed, it takes its containerd.

use crate::util;

use std::io::{Read, Write};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use util::Required;
use util::containerd::{ContainerdVersion, PrivateContainerd, containerd_tests};
use util::daemon::Daemon;
use util::docker_matrix::{DockerVersion, VersionedDockerd, docker_tests};
use util::node::{Cli, Runtime};

docker_tests! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    a_report_on_a_full_file_system_is_exit_1_and_leaves_no_partial_file,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    docker_killed_mid_run_leaves_valid_reports_and_the_next_run_completes,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    sigterm_while_docker_hangs_mid_run_exits_within_5s_with_every_file_written,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    sigterm_while_docker_hangs_mid_cycle_ends_the_daemon_within_5s,
}

/// A report on a full file system: exit 1 naming the path, and nothing
/// left in its directory, neither a partial report nor a temporary file.
async fn a_report_on_a_full_file_system_is_exit_1_and_leaves_no_partial_file(
    version: DockerVersion,
) {
    let engine = VersionedDockerd::start(version).await.required();
    let image = engine.import_busybox_image("base:1", None).await;
    engine.create_container("old", &image, &[], &["true"]).await;
    let cli = Cli::new(
        &Runtime::Docker(engine.endpoint()),
        "containers: { min_age: \"0\" }\n",
    );
    let full = cli.path("full");
    std::fs::create_dir(&full).unwrap();
    let report = full.join("report.json");
    let text = std::fs::read_to_string(cli.policy_path()).unwrap();
    let text = text.replace(
        &format!("json_path: {}", cli.path("report.json").display()),
        &format!("json_path: {}", report.display()),
    );
    cli.write(&text);
    let listing = cli.path("listing");
    // A 64 KiB tmpfs over `full`, filled, in a mount namespace of the run's
    // own; what is in it once safeprune is done is listed before it goes.
    let (dir, listed) = (full.display(), listing.display());
    let out = cli.run_unshared(
        &format!(
            "mount -t tmpfs -o size=64k sp-full '{dir}' || exit 99\n\
             dd if=/dev/zero of='{dir}/fill' bs=4096 2>/dev/null"
        ),
        &format!("ls -A '{dir}' > '{listed}'"),
        &["run"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(&report.display().to_string()), "{err}");
    assert_eq!(std::fs::read_to_string(&listing).unwrap(), "fill\n");
}

/// A socket whose server accepts every connection, then says nothing
/// (`garbage: false`) or answers each request with bytes that are neither
/// HTTP nor HTTP/2. Serves until the test ends.
fn fake_engine(dir: &Path, garbage: bool) -> String {
    let path = dir.join(if garbage {
        "garbage.sock"
    } else {
        "silent.sock"
    });
    let listener = UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            if garbage {
                let mut buf = [0_u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(&[0xde, 0xad, 0xbe, 0xef].repeat(256));
            }
            held.push(stream);
        }
    });
    path.display().to_string()
}

/// safeprune `args` on `cli`'s policy, ended after two minutes at most so
/// that a hang fails the test instead of holding it.
fn bounded(cli: &Cli, args: &[&str]) -> std::process::Child {
    let mut command = Command::new("timeout");
    command
        .args(["-k", "5", "120"])
        .arg(env!("CARGO_BIN_EXE_safeprune"))
        .arg("--config")
        .arg(cli.policy_path())
        .args(args)
        .env_remove("SAFEPRUNE_CONFIG")
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    command.spawn().unwrap()
}

#[test]
fn a_socket_that_never_answers_or_answers_garbage_is_exit_1_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let silent = fake_engine(dir.path(), false);
    let garbage = fake_engine(dir.path(), true);
    // All at once: a silent engine costs each its 10 s connect timeout.
    let mut runs = Vec::new();
    for endpoint in [&silent, &garbage] {
        let runtimes = [
            Runtime::Docker(endpoint),
            Runtime::Containerd(endpoint, &[]),
            Runtime::Auto {
                docker: endpoint,
                containerd: endpoint,
                namespaces: &[],
            },
        ];
        for runtime in &runtimes {
            let cli = std::rc::Rc::new(Cli::new(runtime, ""));
            for command in [&["plan"][..], &["run"], &["explain", "x"]] {
                let child = bounded(&cli, command);
                let what = format!("{endpoint} {command:?}");
                runs.push((what, endpoint, std::rc::Rc::clone(&cli), child));
            }
        }
    }
    let started = Instant::now();
    // The policy directories stay until every run has ended.
    for (what, endpoint, _cli, child) in runs {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let took = started.elapsed();
        assert_eq!(out.status.code(), Some(1), "{what} after {took:?}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert!(err.contains(endpoint.as_str()), "{what}: {err}");
        if endpoint == &silent {
            assert!(err.contains("no answer within 10s"), "{what}: {err}");
        }
    }
}

/// What the run wrote: its JSON report and each line of its audit log, all
/// of which must parse.
fn written(cli: &Cli) -> (Value, Vec<Value>) {
    let report = std::fs::read(cli.path("report.json")).expect("the report is written");
    let report: Value = serde_json::from_slice(&report).expect("the report is one JSON document");
    let audit = std::fs::read_to_string(cli.path("audit.jsonl")).unwrap_or_default();
    let lines = audit
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("audit line {l:?}: {e}")))
        .collect();
    (report, lines)
}

/// Waits until the audit log of `cli` holds at least `n` lines.
fn wait_for_audit_lines(cli: &Cli, n: usize) {
    let started = Instant::now();
    loop {
        let lines =
            std::fs::read_to_string(cli.path("audit.jsonl")).map_or(0, |t| t.lines().count());
        if lines >= n {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run did not get to {n} removals"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Checks a run cut short by its engine: exit 1 or 3, the report and the
/// audit log valid, the report's outcomes and the log agreeing on what was
/// deleted.
fn assert_cut_short(cli: &Cli, out: &Output) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(1 | 3)),
        "exit {:?}: {err}",
        out.status.code()
    );
    assert!(!err.contains("panicked"), "{err}");
    let (report, audit) = written(cli);
    let deleted_in_audit = audit.iter().filter(|l| l["result"] == "deleted").count();
    let outcomes = report["outcomes"].as_array().expect("outcomes");
    let deleted_in_report = outcomes.iter().filter(|o| o["result"] == "deleted").count();
    assert!(
        deleted_in_audit >= 10,
        "{deleted_in_audit} deleted before the kill"
    );
    assert_eq!(deleted_in_report, deleted_in_audit);
    assert!(
        outcomes.iter().any(|o| o["result"] != "deleted"),
        "the kill came before the end"
    );
}

/// Runs `safeprune run` on `cli`, calls `kill` once ten removals are in
/// the audit log, and checks what the run, cut short, left.
async fn run_and_kill_after_ten_removals(cli: &Cli, kill: impl FnOnce()) {
    let child = cli.command(&["run"]).spawn().unwrap();
    wait_for_audit_lines(cli, 10);
    kill();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert_cut_short(cli, &out);
}

/// With the engine back, the next run finishes (exit 0).
fn assert_next_run_completes(cli: &Cli) {
    let again = cli.run(&["run"]);
    let err = String::from_utf8_lossy(&again.stderr);
    assert_eq!(again.status.code(), Some(0), "{err}");
}

const CONTAINERS: usize = 150;

containerd_tests! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    containerd_killed_mid_run_leaves_valid_reports_and_the_next_run_completes,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    sigterm_while_containerd_hangs_mid_run_exits_within_5s_with_every_file_written,
}

async fn docker_killed_mid_run_leaves_valid_reports_and_the_next_run_completes(
    version: DockerVersion,
) {
    let mut engine = VersionedDockerd::start(version).await.required();
    let image = engine.import_busybox_image("base:1", None).await;
    for i in 0..CONTAINERS {
        engine
            .create_container(&format!("c{i}"), &image, &[], &["true"])
            .await;
    }
    let cli = Cli::new(
        &Runtime::Docker(engine.endpoint()),
        "containers: { min_age: \"0\" }\nimages: { enabled: false }\n\
         networks: { enabled: false }\nbuild_cache: { enabled: false }\n\
         safety: { concurrency: 1 }\n",
    );
    run_and_kill_after_ten_removals(&cli, || engine.stop()).await;
    // Back up, the next run removes the rest. On Docker 29's containerd
    // store the container whose removal the kill cut short comes back
    // `dead` with its snapshot gone, and inspecting it with its size
    // answers 404 (measured): it must still be seen, and removed.
    engine.restart().await;
    assert_next_run_completes(&cli);
    let left = engine
        .docker()
        .list_containers(Some(
            bollard::query_parameters::ListContainersOptionsBuilder::default()
                .all(true)
                .build(),
        ))
        .await
        .unwrap();
    assert_eq!(left.len(), 0, "containers left: {left:?}");
}

async fn containerd_killed_mid_run_leaves_valid_reports_and_the_next_run_completes(
    version: ContainerdVersion,
) {
    let mut engine = PrivateContainerd::start_version(version).await.required();
    let namespace = "faults";
    let image = "docker.io/library/base:1";
    engine.import_busybox_image(namespace, image);
    for i in 0..CONTAINERS {
        engine.create_native(namespace, &format!("c{i}"), image);
    }
    let cli = Cli::new(
        &Runtime::Containerd(&engine.endpoint(), &[namespace]),
        "containers: { min_age: \"0\" }\nimages: { enabled: false }\n\
         safety: { concurrency: 1 }\n",
    );
    run_and_kill_after_ten_removals(&cli, || engine.stop()).await;
    engine.restart(false).await;
    assert_next_run_completes(&cli);
    assert_eq!(engine.container_ids(namespace), Vec::<String>::new());
}

/// How soon after SIGTERM safeprune must have exited, whatever its engine
/// does: a pod's grace period (60 s in our `DaemonSet`) and systemd's stop
/// timeout must never run out first.
const STOP_BOUND: Duration = Duration::from_secs(5);

/// Sends SIGTERM to `child` and waits for its exit: its status and the
/// time from the signal to the exit, printed. Past 30 s it is killed and
/// the test fails: an old safeprune waited out a 120 s deadline.
fn terminate(child: &mut Child, what: &str) -> (ExitStatus, Duration) {
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    let sent = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let took = sent.elapsed();
            eprintln!("{what}: SIGTERM to exit in {took:?} ({status})");
            return (status, took);
        }
        if sent.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running 30 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// `safeprune args…` on `cli`, its stderr into `stderr.log` beside the
/// policy (read once it has exited: nothing reads a pipe meanwhile).
fn spawn_logged(cli: &Cli, args: &[&str]) -> Child {
    let log = std::fs::File::create(cli.path("stderr.log")).unwrap();
    cli.command(args)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap()
}

/// A series' value in the metrics textfile `cli`'s runs write.
fn metric(cli: &Cli, series: &str) -> Option<f64> {
    let text = std::fs::read_to_string(cli.path("safeprune.prom")).expect("the metrics textfile");
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn sigterm_while_the_engine_never_answers_exits_0_at_once_with_the_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let silent = fake_engine(dir.path(), false);
    for runtime in [Runtime::Docker(&silent), Runtime::Containerd(&silent, &[])] {
        let cli = Cli::new(&runtime, "");
        let mut run = spawn_logged(&cli, &["run"]);
        // The audit log is opened just before the engine is reached, which
        // holds the run for its 10 s connect deadline.
        let begun = Instant::now();
        while !cli.path("audit.jsonl").exists() {
            assert!(
                begun.elapsed() < Duration::from_secs(10),
                "the run never got going"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(500));
        let (status, took) = terminate(&mut run, "run on a silent socket");
        let err = std::fs::read_to_string(cli.path("stderr.log")).unwrap();
        assert!(took < STOP_BOUND, "{took:?}: {err}");
        // A stop signal that cut a run short is exit 0 (docs/contracts.md).
        assert_eq!(status.code(), Some(0), "{err}");
        assert!(
            err.contains("stopped by a signal before the inventory was taken"),
            "{err}"
        );
        // No inventory, so no report; the metrics say the run failed.
        assert!(!cli.path("report.json").exists());
        assert_eq!(metric(&cli, "safeprune_last_run_success"), Some(0.0));
    }
}

/// Checks what a run stopped by SIGTERM while its engine hung left, with
/// its exit status: the report, the audit log and the metrics written and
/// agreeing; everything not done `not_attempted` because of the stop, but
/// a removal the engine did not answer within the grace, which failed
/// (then exit 3 for `run`).
fn assert_stopped_while_hung(cli: &Cli, status: ExitStatus, daemon: bool) {
    let err = std::fs::read_to_string(cli.path("stderr.log")).unwrap_or_default();
    assert!(!err.contains("panicked"), "{err}");
    let (report, audit) = written(cli);
    let outcomes = report["outcomes"].as_array().expect("outcomes");
    let count = |reason: &Value| outcomes.iter().filter(|o| &o["reason"] == reason).count();
    let deleted = count(&Value::Null);
    let not_attempted = count(&"not_attempted".into());
    let cut_short = count(&"engine_error".into());
    assert!(deleted >= 10, "{deleted} deleted before the engine hung");
    assert!(not_attempted > 0, "the stop came before the end");
    assert_eq!(
        deleted + not_attempted + cut_short,
        outcomes.len(),
        "{report:#}"
    );
    assert!(cut_short <= 1, "one removal in flight at most: {report:#}");
    for o in outcomes {
        match o["reason"].as_str() {
            Some("not_attempted") => {
                assert_eq!(o["error"], "not attempted: safeprune was asked to stop");
            }
            Some("engine_error") => assert_eq!(
                o["error"],
                "no answer within 2s of the stop signal: the engine may still remove it"
            ),
            _ => {}
        }
    }
    // Every outcome, in the audit log too, and the same deletions.
    assert_eq!(audit.len(), outcomes.len());
    let deleted_in_audit = audit.iter().filter(|l| l["result"] == "deleted").count();
    assert_eq!(deleted_in_audit, deleted);
    let series =
        |name: &str, label: &str| metric(cli, &format!("{name}{{kind=\"container\",{label}}}"));
    #[expect(clippy::cast_precision_loss, reason = "counts of a few hundred")]
    let as_metric = |n: usize| Some(n as f64);
    assert_eq!(
        series("safeprune_last_run_removals", "result=\"deleted\""),
        as_metric(deleted)
    );
    assert_eq!(
        series(
            "safeprune_last_run_skipped_removals",
            "reason=\"not_attempted\""
        ),
        as_metric(not_attempted)
    );
    let success = if cut_short == 0 { 1.0 } else { 0.0 };
    assert_eq!(metric(cli, "safeprune_last_run_success"), Some(success));
    let code = match (daemon, cut_short) {
        (true, _) | (false, 0) => 0,
        (false, _) => 3,
    };
    assert_eq!(status.code(), Some(code), "{err}");
}

/// The policy of the runs below: the created containers, one at a time.
const ONE_CONTAINER_AT_A_TIME: &str = "containers: { min_age: \"0\" }\nimages: { enabled: false }\n\
    networks: { enabled: false }\nbuild_cache: { enabled: false }\n\
    safety: { concurrency: 1 }\n";

/// Ten removals into `safeprune run` on `cli`, `freeze` hangs the engine;
/// once the run waits on it, SIGTERM. Checks the bound and what the run
/// left; `thaw` lets the engine go on, and the next run finishes.
fn sigterm_while_hung_mid_run(cli: &Cli, what: &str, freeze: impl FnOnce(), thaw: impl FnOnce()) {
    let mut run = spawn_logged(cli, &["run"]);
    wait_for_audit_lines(cli, 10);
    freeze();
    // Whatever call is in flight, and any after it, now waits for ever
    // (its deadline is 120 s).
    std::thread::sleep(Duration::from_millis(500));
    let (status, took) = terminate(&mut run, what);
    thaw();
    assert!(took < STOP_BOUND, "{what}: {took:?}");
    assert_stopped_while_hung(cli, status, false);
    assert_next_run_completes(cli);
}

async fn sigterm_while_docker_hangs_mid_run_exits_within_5s_with_every_file_written(
    version: DockerVersion,
) {
    let engine = VersionedDockerd::start(version).await.required();
    let image = engine.import_busybox_image("base:1", None).await;
    for i in 0..CONTAINERS {
        engine
            .create_container(&format!("c{i}"), &image, &[], &["true"])
            .await;
    }
    let cli = Cli::new(&Runtime::Docker(engine.endpoint()), ONE_CONTAINER_AT_A_TIME);
    tokio::task::block_in_place(|| {
        sigterm_while_hung_mid_run(
            &cli,
            "run, docker frozen",
            || engine.freeze(),
            || engine.thaw(),
        );
    });
}

async fn sigterm_while_containerd_hangs_mid_run_exits_within_5s_with_every_file_written(
    version: ContainerdVersion,
) {
    let engine = PrivateContainerd::start_version(version).await.required();
    let namespace = "faults";
    let image = "docker.io/library/base:1";
    engine.import_busybox_image(namespace, image);
    for i in 0..CONTAINERS {
        engine.create_native(namespace, &format!("c{i}"), image);
    }
    let cli = Cli::new(
        &Runtime::Containerd(&engine.endpoint(), &[namespace]),
        "containers: { min_age: \"0\" }\nimages: { enabled: false }\n\
         safety: { concurrency: 1 }\n",
    );
    tokio::task::block_in_place(|| {
        sigterm_while_hung_mid_run(
            &cli,
            "run, containerd frozen",
            || engine.freeze(),
            || engine.thaw(),
        );
    });
    assert_eq!(engine.container_ids(namespace), Vec::<String>::new());
}

async fn sigterm_while_docker_hangs_mid_cycle_ends_the_daemon_within_5s(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let image = engine.import_busybox_image("base:1", None).await;
    for i in 0..CONTAINERS {
        engine
            .create_container(&format!("c{i}"), &image, &[], &["true"])
            .await;
    }
    let cli = Cli::new(
        &Runtime::Docker(engine.endpoint()),
        &format!("schedule: \"*/2 * * * * *\"\n{ONE_CONTAINER_AT_A_TIME}"),
    );
    let mut daemon = Daemon::start(&cli);
    // Its first cycle: no report files before it.
    tokio::task::block_in_place(|| wait_for_audit_lines(&cli, 10));
    engine.freeze();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (status, took) =
        tokio::task::block_in_place(|| terminate(&mut daemon.child, "daemon, docker frozen"));
    engine.thaw();
    assert!(took < STOP_BOUND, "{took:?}");
    daemon.wait_for("daemon stopping", 1).await;
    assert_eq!(daemon.count("cycle finished"), 1);
    assert_stopped_while_hung(&cli, status, true);
}
