//! safeprune end to end on a real, private Docker Engine laid out like a
//! Kubernetes node (cri-dockerd labels): `plan` then `run` through the CLI
//! remove exactly what they should, a second run removes nothing, the safety
//! cap and the lock stop a run whole, a container restarted between plan and
//! removal is skipped, and `docker system prune -a -f` on the same layout
//! removes the live pod's istio-init where safeprune does not.

mod util;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Output;
use std::sync::atomic::AtomicBool;

use bollard::models::HostConfig;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, ListNetworksOptions, ListVolumesOptions,
};
use safeprune::execute::{Reason, RemovalResult, execute};
use safeprune::plan::plan;
use safeprune::policy::Policy;
use safeprune::runtime::Engine;
use safeprune::runtime::docker::DockerRuntime;
use serde_json::Value;
use util::{Pod, PrivateDockerd, RUN_FOREVER};

/// The objects of the layout, by the role they play.
struct Layout {
    /// Role → id (volume: name).
    ids: BTreeMap<&'static str, String>,
}

impl Layout {
    fn id(&self, role: &str) -> &str {
        &self.ids[role]
    }
}

/// Roles safeprune must delete; every other role must stay.
const DELETED: &[&str] = &[
    "old-pod app",
    "plain exited",
    "plain stopped",
    "plain exited on its own image",
    "image unused",
    "image multi-tagged",
    "image dangling",
    "image freed by a deleted container",
    "volume anonymous unused",
    "network unused",
];

/// Builds the node: pods as kubelet (cri-dockerd) makes them, plain
/// containers, images, volumes and networks.
async fn lay_out(engine: &PrivateDockerd) -> Layout {
    let mut ids = BTreeMap::new();
    let base = engine.import_busybox_image("base:1", Some("base")).await;
    let pause = engine
        .import_busybox_image("registry.k8s.io/pause:3.9", Some("pause"))
        .await;
    ids.insert("image base (in use)", base.clone());
    ids.insert("image pause (in use)", pause.clone());
    ids.insert(
        "image pause 3.6 (keep pattern)",
        engine
            .import_busybox_image("registry.k8s.io/pause:3.6", Some("pause 3.6"))
            .await,
    );

    // A live pod: its sandbox runs, istio-init and another init container
    // exited, an earlier attempt of its app crashed, the app runs again.
    let web = Pod::new("web", "default");
    let web_sandbox = engine.create_sandbox(&web, &pause, true).await;
    ids.insert("web sandbox", web_sandbox.clone());
    for (role, name, restart, cmd) in [
        ("web istio-init", "istio-init", 0, ["sh", "-c", "exit 0"]),
        ("web init", "setup", 0, ["sh", "-c", "exit 0"]),
        ("web app crashed attempt", "app", 0, ["sh", "-c", "exit 1"]),
    ] {
        let id = engine
            .create_pod_container(&web, &web_sandbox, name, restart, &base, &cmd)
            .await;
        engine.start_container(&id).await;
        engine.wait_container(&id).await;
        ids.insert(role, id);
    }
    let app = engine
        .create_pod_container(&web, &web_sandbox, "app", 1, &base, RUN_FOREVER)
        .await;
    engine.start_container(&app).await;
    ids.insert("web app running", app);

    // A dead pod: sandbox and containers exited.
    let old = Pod::new("old", "default");
    let old_sandbox = engine.create_sandbox(&old, &pause, false).await;
    ids.insert("old-pod sandbox", old_sandbox.clone());
    for (role, name) in [("old-pod istio-init", "istio-init"), ("old-pod app", "app")] {
        let id = engine
            .create_pod_container(&old, &old_sandbox, name, 0, &base, &["sh", "-c", "exit 0"])
            .await;
        engine.start_container(&id).await;
        engine.wait_container(&id).await;
        ids.insert(role, id);
    }

    // A pod whose sandbox was recreated: the first sandbox exited, the second
    // runs; an init container of the first attempt still belongs to the pod.
    let mut db = Pod::new("db", "default");
    let first = engine.create_sandbox(&db, &pause, false).await;
    ids.insert("db first sandbox", first.clone());
    let migrate = engine
        .create_pod_container(&db, &first, "migrate", 0, &base, &["sh", "-c", "exit 0"])
        .await;
    engine.start_container(&migrate).await;
    engine.wait_container(&migrate).await;
    ids.insert("db init of first sandbox", migrate);
    db.attempt = 1;
    ids.insert(
        "db second sandbox",
        engine.create_sandbox(&db, &pause, true).await,
    );

    lay_out_plain(engine, &base, &mut ids).await;
    Layout { ids }
}

/// Plain containers, images, volumes and networks beside the pods.
async fn lay_out_plain(
    engine: &PrivateDockerd,
    base: &str,
    ids: &mut BTreeMap<&'static str, String>,
) {
    let used_volume = engine.create_volume(None).await;
    let used_net = engine.create_network("used-net", &[]).await;
    let running = engine
        .create_container_with(
            "plain-running",
            base,
            &[],
            RUN_FOREVER,
            HostConfig {
                binds: Some(vec![format!("{used_volume}:/data")]),
                network_mode: Some("used-net".into()),
                ..HostConfig::default()
            },
        )
        .await;
    engine.start_container(&running).await;
    ids.insert("plain running", running);
    ids.insert("volume anonymous in use", used_volume);
    ids.insert("network in use", used_net);
    ids.insert(
        "plain exited",
        engine.run_to_exit("plain-exited", base, &[]).await,
    );
    // Stopped rather than exited by itself, so that a test can start it again.
    let stopped = engine
        .create_container("plain-stopped", base, &[], RUN_FOREVER)
        .await;
    engine.start_container(&stopped).await;
    engine.stop_container(&stopped).await;
    ids.insert("plain stopped", stopped);
    let own = engine.import_busybox_image("freed:1", Some("freed")).await;
    ids.insert(
        "plain exited on its own image",
        engine.run_to_exit("plain-exited-own", &own, &[]).await,
    );
    ids.insert("image freed by a deleted container", own);
    ids.insert(
        "image unused",
        engine
            .import_busybox_image("unused:1", Some("unused"))
            .await,
    );
    let multi = engine.import_busybox_image("multi:1", Some("multi")).await;
    engine.tag_image(&multi, "multi:2").await;
    engine.tag_image(&multi, "other/multi:3").await;
    ids.insert("image multi-tagged", multi);
    ids.insert(
        "image dangling",
        engine.import_dangling_image(Some("dangling")).await,
    );
    ids.insert("volume anonymous unused", engine.create_volume(None).await);
    ids.insert(
        "volume named unused",
        engine.create_volume(Some("keep-me")).await,
    );
    ids.insert(
        "network unused",
        engine.create_network("unused-net", &[]).await,
    );
}

/// A policy for the private engine: every age limit at zero so the layout,
/// made seconds ago, is decided by the other rules; volumes on.
struct Setup {
    dir: tempfile::TempDir,
    policy: PathBuf,
}

impl Setup {
    fn new(engine: &PrivateDockerd, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let policy = dir.path().join("policy.yaml");
        let d = dir.path().display();
        std::fs::write(
            &policy,
            format!(
                "runtime:\n  kind: docker\n  docker: {{ endpoint: \"{}\" }}\n\
                 containers: {{ min_age: \"0\" }}\n\
                 images: {{ min_age: \"0\" }}\n\
                 volumes: {{ enabled: true, min_age: \"0\" }}\n\
                 networks: {{ min_age: \"0\" }}\n\
                 build_cache: {{ min_age: \"0\" }}\n\
                 report: {{ json_path: {d}/report.json, audit_log: {d}/audit.jsonl }}\n\
                 lock_file: {d}/safeprune.lock\n{extra}",
                engine.endpoint()
            ),
        )
        .unwrap();
        Self { dir, policy }
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_safeprune"));
        command
            .arg("--config")
            .arg(&self.policy)
            .args(args)
            .env_remove("SAFEPRUNE_CONFIG");
        command
    }

    fn safeprune(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("safeprune runs")
    }

    fn json(&self, args: &[&str]) -> (Option<i32>, Value) {
        let out = self.safeprune(args);
        let stdout = String::from_utf8(out.stdout).unwrap();
        let value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e}):\n{stdout}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), value)
    }

    fn policy(&self) -> Policy {
        Policy::load(&self.policy).unwrap()
    }
}

/// Every object id (volume name) on the engine, and every image tag.
async fn existing(engine: &PrivateDockerd) -> BTreeSet<String> {
    let docker = engine.docker();
    let mut all = BTreeSet::new();
    let containers = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::default().all(true).build(),
        ))
        .await
        .unwrap();
    all.extend(containers.into_iter().filter_map(|c| c.id));
    let images = docker
        .list_images(Some(ListImagesOptionsBuilder::default().all(true).build()))
        .await
        .unwrap();
    for image in images {
        all.extend(image.repo_tags);
        all.insert(image.id);
    }
    let volumes = docker
        .list_volumes(None::<ListVolumesOptions>)
        .await
        .unwrap();
    all.extend(
        volumes
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| v.name),
    );
    let networks = docker
        .list_networks(None::<ListNetworksOptions>)
        .await
        .unwrap();
    all.extend(networks.into_iter().filter_map(|n| n.id));
    all
}

fn decision<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"] == id)
        .unwrap_or_else(|| panic!("no decision for {id}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_then_run_removes_exactly_the_expected_objects() {
    let engine = PrivateDockerd::start().await;
    let layout = lay_out(&engine).await;
    let setup = Setup::new(&engine, "");
    let before = existing(&engine).await;

    // plan: every object decided, the right ones for deletion, nothing removed.
    let (code, report) = setup.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0));
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["runtime"], "docker");
    for (role, id) in &layout.ids {
        let d = decision(&report, id);
        let expected = if DELETED.contains(role) {
            "delete"
        } else {
            "keep"
        };
        assert_eq!(d["decision"], expected, "{role}: {d}");
    }
    let rule = |role: &str| decision(&report, layout.id(role))["rule"].clone();
    assert_eq!(rule("web istio-init"), "protected_label");
    assert_eq!(rule("old-pod istio-init"), "protected_label");
    assert_eq!(rule("web init"), "live_pod_sandbox");
    assert_eq!(rule("web app crashed attempt"), "live_pod_sandbox");
    assert_eq!(rule("db init of first sandbox"), "live_pod_sandbox");
    assert_eq!(rule("old-pod sandbox"), "pod_sandbox");
    assert_eq!(rule("web app running"), "running");
    assert_eq!(rule("image pause 3.6 (keep pattern)"), "keep_pattern");
    assert_eq!(rule("image base (in use)"), "in_use");
    assert_eq!(rule("volume named unused"), "named_volume");
    assert_eq!(rule("volume anonymous in use"), "in_use");
    assert_eq!(rule("network in use"), "in_use");
    assert_eq!(existing(&engine).await, before, "plan removed something");
    // What goes has a size: images theirs, stopped containers their writable layer.
    for role in ["plain exited", "image unused", "image multi-tagged"] {
        let bytes = &decision(&report, layout.id(role))["bytes"];
        assert!(bytes.is_u64(), "{role}: bytes {bytes}");
    }
    assert!(report["summary"]["reclaimable_bytes"].as_u64().unwrap() > 0);

    // The table tells an operator what was spared and why.
    let table = String::from_utf8(setup.safeprune(&["plan"]).stdout).unwrap();
    assert!(
        table.contains("protected: protected_label 2 containers"),
        "{table}"
    );
    assert!(table.contains("live_pod_sandbox 3 containers"), "{table}");

    // run: exactly the planned objects go.
    let (code, report) = setup.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["dry_run"], false);
    let outcomes = report["outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), DELETED.len(), "{outcomes:#?}");
    assert!(
        outcomes
            .iter()
            .all(|o| o["result"] == "deleted" && o["error"].is_null()),
        "{outcomes:#?}"
    );
    let after = existing(&engine).await;
    for (role, id) in &layout.ids {
        assert_eq!(after.contains(id), !DELETED.contains(role), "{role} ({id})");
    }
    for tag in ["multi:1", "multi:2", "other/multi:3", "unused:1", "freed:1"] {
        assert!(!after.contains(tag), "tag {tag} left behind");
    }
    for tag in [
        "base:1",
        "registry.k8s.io/pause:3.9",
        "registry.k8s.io/pause:3.6",
    ] {
        assert!(after.contains(tag), "tag {tag} removed");
    }

    // The report file holds the same document; the audit log a line per attempt.
    let file: Value = serde_json::from_str(
        &std::fs::read_to_string(setup.dir.path().join("report.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(file, report);
    let audit = std::fs::read_to_string(setup.dir.path().join("audit.jsonl")).unwrap();
    assert_eq!(audit.lines().count(), DELETED.len());

    // A second run finds nothing more to do.
    let (code, again) = setup.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0));
    assert!(again["outcomes"].as_array().unwrap().is_empty(), "{again}");
    for kind in ["container", "image", "volume", "network", "build_cache"] {
        assert_eq!(again["summary"]["delete"][kind], 0, "{kind}");
    }
    assert_eq!(existing(&engine).await, after);
}

#[tokio::test(flavor = "multi_thread")]
async fn docker_system_prune_removes_the_live_pods_istio_init_and_safeprune_does_not() {
    let engine = PrivateDockerd::start().await;
    let layout = lay_out(&engine).await;
    let istio = layout.id("web istio-init").to_owned();
    let init = layout.id("web init").to_owned();

    let setup = Setup::new(&engine, "");
    // From cron: -q prints nothing on success, so cron mails nothing.
    let quiet = setup.safeprune(&["-q", "run"]);
    assert_eq!(quiet.status.code(), Some(0));
    assert!(
        quiet.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stdout)
    );
    assert!(
        quiet.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    let after = existing(&engine).await;
    assert!(after.contains(&istio) && after.contains(&init));

    let out = engine
        .cli()
        .args(["system", "prune", "-a", "-f"])
        .output()
        .expect("docker CLI runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = existing(&engine).await;
    assert!(
        !after.contains(&istio),
        "docker system prune kept istio-init"
    );
    assert!(
        !after.contains(&init),
        "docker system prune kept the init container"
    );
    assert!(after.contains(layout.id("web app running")));
}

#[tokio::test(flavor = "multi_thread")]
async fn over_the_cap_and_under_a_held_lock_nothing_is_removed() {
    let engine = PrivateDockerd::start().await;
    lay_out(&engine).await;
    let setup = Setup::new(&engine, "safety: { max_deletions: 3 }\n");
    let before = existing(&engine).await;

    let out = setup.safeprune(&["run"]);
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("deletes {}", DELETED.len())), "{err}");
    assert!(err.contains("limit of 3"), "{err}");
    assert_eq!(existing(&engine).await, before);
    // The flag overrides the policy, both ways.
    assert_eq!(
        setup
            .safeprune(&["run", "--max-deletions", "2"])
            .status
            .code(),
        Some(5)
    );
    assert_eq!(existing(&engine).await, before);

    let lock = std::fs::File::create(setup.dir.path().join("safeprune.lock")).unwrap();
    lock.try_lock().unwrap();
    let out = setup.safeprune(&["run", "--max-deletions", "100"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(
        setup.safeprune(&["run", "--dry-run"]).status.code(),
        Some(4)
    );
    assert_eq!(
        setup.safeprune(&["plan"]).status.code(),
        Some(0),
        "plan takes no lock"
    );
    assert_eq!(existing(&engine).await, before);
    drop(lock);
    assert_eq!(
        setup
            .safeprune(&["run", "--max-deletions", "100"])
            .status
            .code(),
        Some(0)
    );
    assert_ne!(existing(&engine).await, before);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_restarted_after_planning_is_skipped_not_removed() {
    let engine = PrivateDockerd::start().await;
    let layout = lay_out(&engine).await;
    let setup = Setup::new(&engine, "");
    let policy = setup.policy();
    let runtime = DockerRuntime::connect(engine.endpoint()).await.unwrap();
    let planned = plan(
        &runtime.inventory().await.unwrap(),
        &policy,
        chrono::Utc::now(),
    );

    // Between plan and removal: a plain container is started again, and the
    // dead pod comes back (kubelet makes it a new sandbox, same pod uid).
    let restarted = layout.id("plain stopped");
    engine.start_container(restarted).await;
    let mut old = Pod::new("old", "default");
    old.attempt = 1;
    engine
        .create_sandbox(&old, layout.id("image pause (in use)"), true)
        .await;

    let outcomes = execute(
        &runtime,
        &planned,
        &policy,
        &AtomicBool::new(false),
        |_, _, _| {},
    )
    .await;
    let result = |id: &str| outcomes.iter().find(|o| o.id == id).unwrap();
    for role in ["plain stopped", "old-pod app"] {
        let o = result(layout.id(role));
        assert_eq!(o.result, RemovalResult::Skipped, "{role}: {o:?}");
        assert_eq!(o.reason, Some(Reason::Changed), "{role}: {o:?}");
        assert!(
            o.error
                .as_deref()
                .unwrap()
                .contains("changed since planning"),
            "{o:?}"
        );
    }
    for role in ["plain exited", "plain exited on its own image"] {
        assert_eq!(
            result(layout.id(role)).result,
            RemovalResult::Deleted,
            "{role}"
        );
    }
    let after = existing(&engine).await;
    assert!(after.contains(restarted));
    assert!(after.contains(layout.id("old-pod app")));
}

#[tokio::test(flavor = "multi_thread")]
async fn explain_names_the_rule_and_the_facts() {
    let engine = PrivateDockerd::start().await;
    let layout = lay_out(&engine).await;
    let setup = Setup::new(&engine, "");
    let out = setup.safeprune(&["explain", "k8s_istio-init_web_default_uid-default-web_0"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("protected_label"), "{text}");
    assert!(
        text.contains("io.kubernetes.container.name=istio-init"),
        "{text}"
    );
    assert!(
        text.contains(layout.id("web sandbox")),
        "names the sandbox: {text}"
    );

    let out = setup.safeprune(&["explain", "base:1"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("in_use"), "{text}");

    // Asked by any of its tags, a multi-tagged image answers under that tag
    // and lists every other.
    for tag in ["multi:2", "other/multi:3", "docker.io/library/multi:1"] {
        let out = setup.safeprune(&["explain", tag]);
        assert_eq!(out.status.code(), Some(0), "{tag}");
        let text = String::from_utf8(out.stdout).unwrap();
        let short = tag.trim_start_matches("docker.io/library/");
        assert!(text.starts_with(&format!("image {short}\n")), "{text}");
        assert!(
            text.contains("references: multi:1, multi:2, other/multi:3"),
            "{text}"
        );
        assert!(text.contains(layout.id("image multi-tagged")), "{text}");
    }
    // The plan shows every tag too, in its table and its JSON.
    let out = setup.safeprune(&["plan"]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("multi:1,2 other/multi:3"), "{table}");
    let (_, report) = setup.json(&["plan", "--output", "json"]);
    let multi = report["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["id"].as_str() == Some(layout.id("image multi-tagged")))
        .unwrap();
    let refs: Vec<&str> = multi["refs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_str())
        .filter(|r| !r.contains('@'))
        .collect();
    assert_eq!(refs, ["multi:1", "multi:2", "other/multi:3"]);

    // Nothing of that name: exit 6, which says the engine was asked.
    let out = setup.safeprune(&["explain", "no-such-thing"]);
    assert_eq!(out.status.code(), Some(6));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no container, image, volume or network matches 'no-such-thing'"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reader_that_closed_the_pipe_is_no_error() {
    let engine = PrivateDockerd::start().await;
    lay_out(&engine).await;
    let setup = Setup::new(&engine, "");
    // `safeprune explain … | head -1` once head has gone: the write fails
    // with EPIPE, which must neither panic nor change the exit code.
    for args in [
        vec!["explain", "k8s_istio-init_web_default_uid-default-web_0"],
        vec!["plan"],
        vec!["plan", "--output", "json"],
        vec!["run", "--dry-run"],
    ] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let out = setup.command(&args).stdout(writer).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_finishes_the_removals_in_flight_and_still_reports() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let engine = PrivateDockerd::start().await;
    let base = engine.import_busybox_image("base:1", None).await;
    let mut created = Vec::new();
    for i in 0..60 {
        created.push(
            engine
                .create_container(&format!("never-ran-{i}"), &base, &[], util::EXIT_0)
                .await,
        );
    }
    let setup = Setup::new(&engine, "safety: { concurrency: 1 }\n");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_safeprune"))
        .arg("--config")
        .arg(&setup.policy)
        .args(["-v", "run", "--output", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first removal, then ask it to stop.
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut lines = stderr.lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("removed") {
            break;
        }
    }
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{rest:?}");
    assert!(
        rest.iter().any(|l| l.contains("signal received")),
        "{rest:?}"
    );

    let report: Value = serde_json::from_slice(&out.stdout).expect("one JSON report on stdout");
    let outcomes = report["outcomes"].as_array().unwrap();
    // Every planned object has an outcome: the containers, and the image
    // they would free.
    assert_eq!(outcomes.len(), created.len() + 1);
    let deleted = outcomes.iter().filter(|o| o["result"] == "deleted").count();
    let not_attempted: Vec<&Value> = outcomes
        .iter()
        .filter(|o| o["result"] == "skipped")
        .collect();
    assert!(deleted >= 1, "{outcomes:#?}");
    assert!(
        !not_attempted.is_empty(),
        "the signal came too late to matter"
    );
    assert!(
        not_attempted
            .iter()
            .all(|o| o["error"].as_str().unwrap().contains("not attempted")
                && o["reason"] == "not_attempted")
    );
    // What was not attempted is still there; what was deleted is gone.
    let after = existing(&engine).await;
    for o in outcomes {
        let id = o["id"].as_str().unwrap();
        assert_eq!(after.contains(id), o["result"] != "deleted", "{o}");
    }
    assert!(setup.dir.path().join("report.json").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn run_dry_run_decides_as_plan_does_and_removes_nothing() {
    let engine = PrivateDockerd::start().await;
    lay_out(&engine).await;
    let setup = Setup::new(&engine, "");
    let before = existing(&engine).await;
    let (code, report) = setup.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0));
    let (code, dry) = setup.json(&["run", "--dry-run", "--output", "json"]);
    assert_eq!(code, Some(0));
    assert_eq!(dry["dry_run"], true);
    assert!(dry["outcomes"].as_array().unwrap().is_empty());
    // Details hold ages ("exited 3s ago") that move between two runs.
    let verdicts = |r: &Value| -> Vec<(String, String, String)> {
        r["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                (
                    d["id"].to_string(),
                    d["decision"].to_string(),
                    d["rule"].to_string(),
                )
            })
            .collect()
    };
    assert_eq!(verdicts(&dry), verdicts(&report));
    assert!(setup.dir.path().join("report.json").exists());
    assert_eq!(
        existing(&engine).await,
        before,
        "a dry run removed something"
    );
}
