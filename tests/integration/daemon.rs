//! `safeprune daemon` against a real, private Docker Engine: cycles on a
//! seconds-level schedule, SIGTERM, SIGHUP with a good and a bad policy, an
//! engine that goes away and comes back, the `/metrics` and `/healthz`
//! listener; and two `run`s at once. Each test with an engine runs on
//! Docker 20.10 and on Docker 29 with each image store (`docker_tests!`).

use crate::util;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bollard::query_parameters::InspectContainerOptions;
use util::Required;
use util::daemon::Daemon;
use util::docker::PrivateDockerd;
use util::docker_matrix::{DockerVersion, VersionedDockerd, docker_tests};
use util::node::{Cli, Runtime};

fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    util::node::http_get(addr, path).unwrap()
}
use util::pod::Pod;

docker_tests! {
    #[tokio::test(flavor = "multi_thread")]
    cycles_remove_what_exits_between_them_and_spare_istio_init,
    #[tokio::test(flavor = "multi_thread")]
    sighup_keeps_the_old_policy_when_the_new_one_is_broken,
    #[tokio::test(flavor = "multi_thread")]
    every_run_writes_the_metrics_textfile_unless_another_holds_the_lock,
    #[tokio::test(flavor = "multi_thread")]
    json_logs_are_one_object_per_line,
    #[tokio::test(flavor = "multi_thread")]
    two_runs_at_once_one_works_and_the_other_exits_4,
    #[tokio::test(flavor = "multi_thread")]
    the_listener_serves_each_cycles_metrics_and_its_health,
    #[tokio::test(flavor = "multi_thread")]
    an_engine_that_stops_and_comes_back_is_survived,
    #[tokio::test(flavor = "multi_thread")]
    image_uses_are_followed_while_the_policy_asks_and_after_an_engine_restart,
}

/// The containers section that removes what exited, at once.
const PRUNE_EXITED: &str = "containers: { min_age: \"0\" }\n";

/// Cycles every two seconds, pruning containers as `containers` (a
/// `containers:` section) says and nothing else; then `extra`.
fn cycling(containers: &str, extra: &str) -> String {
    format!(
        "schedule: \"*/2 * * * * *\"\n\
         {containers}\
         images: {{ enabled: false }}\n\
         networks: {{ enabled: false }}\n\
         build_cache: {{ enabled: false }}\n{extra}"
    )
}

/// A policy for the private engine that cycles every two seconds and
/// removes what exited at once; then `extra`.
fn safeprune_on(engine: &PrivateDockerd, extra: &str) -> Cli {
    Cli::new(
        &Runtime::Docker(engine.endpoint()),
        &cycling(PRUNE_EXITED, extra),
    )
}

async fn exists(engine: &PrivateDockerd, id: &str) -> bool {
    engine
        .docker()
        .inspect_container(id, None::<InspectContainerOptions>)
        .await
        .is_ok()
}

/// Waits until the container `id` is gone.
async fn until_removed(engine: &PrivateDockerd, id: &str) {
    let begun = Instant::now();
    while exists(engine, id).await {
        assert!(
            begun.elapsed() < Duration::from_secs(30),
            "{id} still there after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn cycles_remove_what_exits_between_them_and_spare_istio_init(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", None).await;
    let web = Pod::new("web", "default");
    let sandbox = engine.create_sandbox(&web, &base, true).await;
    let istio = engine
        .run_pod_container_to_exit(&web, &sandbox, "istio-init", 0, &base, util::EXIT_0)
        .await;
    let safeprune = safeprune_on(&engine, "");
    let daemon = Daemon::start(&safeprune);

    daemon.wait_for("next cycle scheduled", 1).await;
    daemon.wait_for("cycle finished", 1).await;
    let late = engine
        .run_to_exit("exited-between-cycles", &base, &[])
        .await;
    until_removed(&engine, &late).await;
    let cycles = daemon.count("cycle finished");
    daemon.wait_for("cycle finished", cycles + 1).await;
    assert!(daemon.count("cycle finished") >= 2);
    assert!(
        exists(&engine, &istio).await,
        "istio-init of a live pod removed"
    );
    assert!(exists(&engine, &sandbox).await);
    // Each cycle is a run: its report and metrics files are there.
    assert!(safeprune.path("report.json").exists());
    assert!(safeprune.path("safeprune.prom").exists());

    let log = Arc::clone(&daemon.log);
    let (code, took) = daemon.terminate();
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(5), "took {took:?} to stop");
    assert!(
        log.lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("daemon stopping"))
    );
}

async fn sighup_keeps_the_old_policy_when_the_new_one_is_broken(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", None).await;
    let safeprune = safeprune_on(&engine, "");
    let daemon = Daemon::start(&safeprune);
    daemon.wait_for("cycle finished", 1).await;

    // A broken policy: logged, and the daemon goes on with the old one.
    safeprune.write("containers:\n  min_age: soon\n");
    daemon.signal("HUP");
    daemon.wait_for("policy not reloaded", 1).await;
    let first = engine.run_to_exit("first", &base, &[]).await;
    until_removed(&engine, &first).await;

    // A good one takes effect: containers are no longer pruned.
    safeprune.rewrite(
        &Runtime::Docker(engine.endpoint()),
        &cycling("containers: { enabled: false }\n", ""),
    );
    daemon.signal("HUP");
    daemon.wait_for("policy reloaded", 1).await;
    let second = engine.run_to_exit("second", &base, &[]).await;
    let cycles = daemon.count("cycle finished");
    daemon.wait_for("cycle finished", cycles + 2).await;
    assert!(
        exists(&engine, &second).await,
        "the reloaded policy was not applied"
    );
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));
}

async fn an_engine_that_stops_and_comes_back_is_survived(version: DockerVersion) {
    let mut engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", None).await;
    let safeprune = safeprune_on(&engine, "");
    let daemon = Daemon::start(&safeprune);
    daemon.wait_for("cycle finished", 1).await;

    engine.stop();
    daemon.wait_for("engine unreachable", 2).await;
    engine.restart().await;
    let after = engine.run_to_exit("after-restart", &base, &[]).await;
    until_removed(&engine, &after).await;
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0), "the daemon died while the engine was away");
}

/// The value of the sample `name{labels}` in a textfile, if present.
/// The series of containers a run deleted.
const DELETED_CONTAINERS: &str =
    r#"safeprune_last_run_removals{kind="container",result="deleted"}"#;

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

async fn every_run_writes_the_metrics_textfile_unless_another_holds_the_lock(
    version: DockerVersion,
) {
    let engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", None).await;
    let web = Pod::new("web", "default");
    let sandbox = engine.create_sandbox(&web, &base, true).await;
    engine
        .run_pod_container_to_exit(&web, &sandbox, "istio-init", 0, &base, util::EXIT_0)
        .await;
    engine.run_to_exit("exited", &base, &[]).await;
    let safeprune = safeprune_on(&engine, "");
    let prom = safeprune.path("safeprune.prom");

    assert_eq!(safeprune.run(&["-q", "run"]).status.code(), Some(0));
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert_eq!(
        sample(&metrics, "safeprune_last_run_success"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(sample(&metrics, DELETED_CONTAINERS), Some(1.0), "{metrics}");
    assert_eq!(
        sample(
            &metrics,
            r#"safeprune_last_run_kept_objects{kind="container",rule="protected_label"}"#
        ),
        Some(1.0),
        "{metrics}"
    );
    let check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::fs::File::open(&prom).unwrap())
        .output()
        .expect("promtool (scripts/deps.sh installs it)");
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );

    // Another run holds the lock: the file is that run's, left alone.
    let lock = std::fs::File::create(safeprune.path("safeprune.lock")).unwrap();
    lock.try_lock().unwrap();
    std::fs::remove_file(&prom).unwrap();
    assert_eq!(safeprune.run(&["run"]).status.code(), Some(4));
    assert!(!prom.exists());
    drop(lock);

    // The JSON report cannot be written (a directory stands at its path):
    // the run fails, and the textfile still tells what it removed.
    engine.run_to_exit("exited-again", &base, &[]).await;
    let json = safeprune.path("report.json");
    let _ = std::fs::remove_file(&json);
    std::fs::create_dir(&json).unwrap();
    let out = safeprune.run(&["-q", "run"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("report.json"),
        "names the file"
    );
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert_eq!(sample(&metrics, "safeprune_last_run_success"), Some(0.0));
    assert_eq!(sample(&metrics, DELETED_CONTAINERS), Some(1.0), "{metrics}");
    std::fs::remove_dir(&json).unwrap();

    // The engine is gone: the run fails, and the textfile says so.
    drop(engine);
    assert_eq!(safeprune.run(&["-q", "run"]).status.code(), Some(1));
    let metrics = std::fs::read_to_string(&prom).unwrap();
    assert_eq!(
        sample(&metrics, "safeprune_last_run_success"),
        Some(0.0),
        "{metrics}"
    );
}

async fn json_logs_are_one_object_per_line(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", None).await;
    engine.run_to_exit("exited", &base, &[]).await;
    let safeprune = safeprune_on(&engine, "");
    let out = safeprune.run(&["--log-format", "json", "-vv", "run", "--output", "json"]);
    assert_eq!(out.status.code(), Some(0));
    let stderr = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let messages: Vec<&str> = lines
        .iter()
        .filter_map(|l| l["fields"]["message"].as_str())
        .collect();
    assert!(messages.contains(&"removed"), "{messages:?}");
    assert!(messages.contains(&"run finished"), "{messages:?}");
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
    // stdout still holds exactly one JSON document.
    let _: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
}

async fn two_runs_at_once_one_works_and_the_other_exits_4(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", None).await;
    for i in 0..40 {
        engine
            .create_container(&format!("never-ran-{i}"), &base, &[], util::EXIT_0)
            .await;
    }
    let safeprune = safeprune_on(&engine, "safety: { concurrency: 1 }\n");
    let run = |extra: &[&str]| {
        let mut cmd = safeprune.command(&["-v", "run"]);
        cmd.args(extra).stdout(Stdio::null()).stderr(Stdio::piped());
        cmd
    };
    let mut first = run(&[]).spawn().unwrap();
    // Once the first holds the lock and works, start the second.
    let mut lines = BufReader::new(first.stderr.take().unwrap()).lines();
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("inventory taken")),
        "the first run never got going"
    );
    let second = run(&[]).output().unwrap();
    assert_eq!(
        second.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert!(String::from_utf8_lossy(&second.stderr).contains("holds the lock"));
    lines.for_each(drop);
    assert_eq!(first.wait().unwrap().code(), Some(0));
}

/// The series of a metrics text, without their values.
fn series(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').map(|(series, _)| series))
        .collect()
}

async fn the_listener_serves_each_cycles_metrics_and_its_health(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", None).await;
    engine.run_to_exit("exited", &base, &[]).await;
    let listen = "metrics: { listen: \"127.0.0.1:0\" }\n";

    // No cycle due for days: the textfile an earlier run left is served.
    let safeprune = Cli::new(
        &Runtime::Docker(engine.endpoint()),
        &format!("schedule: \"0 5 1 1 *\"\n{listen}"),
    );
    let earlier = "# an earlier run's figures\nsafeprune_last_run_success 1\n";
    std::fs::write(safeprune.path("safeprune.prom"), earlier).unwrap();
    let daemon = Daemon::start(&safeprune);
    daemon.wait_for("serving /metrics and /healthz", 1).await;
    let addr = daemon.listening_on();
    assert_eq!(http_get(addr, "/metrics"), (200, earlier.to_owned()));
    let (status, body) = http_get(addr, "/healthz");
    assert_eq!(
        (status, body.as_str()),
        (200, "ok: waiting for the next cycle\n")
    );
    assert_eq!(http_get(addr, "/").0, 404);
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));

    // Cycling, on a node named from the environment, as in a pod.
    let safeprune = safeprune_on(&engine, listen);
    let mut command = safeprune.command(&["daemon"]);
    command.env("SAFEPRUNE_NODE_NAME", "node-from-env");
    let daemon = Daemon::spawn(command);
    daemon.wait_for("cycle finished", 1).await;
    let addr = daemon.listening_on();
    let (status, served) = http_get(addr, "/metrics");
    assert_eq!(status, 200);
    assert_eq!(
        sample(&served, "safeprune_last_run_success"),
        Some(1.0),
        "{served}"
    );
    // The same series as the textfile the same cycles write.
    let textfile = std::fs::read_to_string(safeprune.path("safeprune.prom")).unwrap();
    assert_eq!(series(&served), series(&textfile));
    assert_eq!(http_get(addr, "/healthz").0, 200);
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(safeprune.path("report.json")).unwrap()).unwrap();
    assert_eq!(report["node"], "node-from-env");
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));
}

#[test]
fn a_listen_address_in_use_is_exit_1_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    // No engine is needed: the listener is bound before any cycle.
    let safeprune = Cli::with_yaml(&format!("metrics: {{ listen: \"{addr}\" }}\n"));
    let out = safeprune.run(&["daemon"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {addr} (metrics.listen)")),
        "{stderr}"
    );
}

/// The last use the usage history in `state` records of `image`, once it
/// is later than `after` (the daemon writes within seconds).
async fn recorded_use(state: &std::path::Path, image: &str, after: &str) -> (String, String) {
    let begun = Instant::now();
    loop {
        let entry = std::fs::read(state.join("image-usage.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .map(|v| v["images"][image].clone())
            .filter(|e| e["at"].is_string());
        if let Some(e) = entry {
            let at = e["at"].as_str().unwrap().to_owned();
            let source = e["source"].as_str().unwrap().to_owned();
            if after.is_empty()
                || chrono::DateTime::parse_from_rfc3339(&at).unwrap()
                    > chrono::DateTime::parse_from_rfc3339(after).unwrap()
            {
                return (source, at);
            }
        }
        assert!(
            begun.elapsed() < Duration::from_secs(30),
            "no use of {image} after '{after}' recorded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Between cycles the daemon follows the engine's events only while the
/// policy orders images by last use: a reload that asks for it starts
/// following, and an engine that restarts is followed again.
async fn image_uses_are_followed_while_the_policy_asks_and_after_an_engine_restart(
    version: DockerVersion,
) {
    const FOLLOWING: &str = "following docker's events";
    let mut engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", None).await;
    let runtime = Runtime::Docker(engine.endpoint());
    let cli = Cli::new(&runtime, "schedule: \"0 0 1 1 *\"\n");
    let state = cli.path("state");
    let daemon = Daemon::start(&cli);
    daemon.wait_for("next cycle scheduled", 1).await;
    engine.run_to_exit("unfollowed", &base, &[]).await;
    assert_eq!(daemon.count(FOLLOWING), 0, "the policy does not ask");
    assert!(!state.exists(), "nothing recorded");

    cli.rewrite(
        &runtime,
        &format!(
            "schedule: \"0 0 1 1 *\"\nstate_dir: {}\nimages: {{ keep_recent: 2 }}\n",
            state.display()
        ),
    );
    daemon.signal("HUP");
    daemon.wait_for(FOLLOWING, 1).await;
    engine.run_to_exit("followed", &base, &[]).await;
    let (source, first) = recorded_use(&state, &base, "").await;
    assert_eq!(source, "container_exit");

    engine.stop();
    daemon
        .wait_for("cannot follow the engine's events", 1)
        .await;
    engine.restart().await;
    daemon.wait_for(FOLLOWING, 2).await;
    engine.run_to_exit("followed-again", &base, &[]).await;
    let (source, _) = recorded_use(&state, &base, &first).await;
    assert_eq!(source, "container_exit");
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));
}
