//! safeprune end to end on a real, private Docker Engine laid out like a
//! Kubernetes node (cri-dockerd labels): `plan` then `run` through the CLI
//! remove exactly what they should, a second run removes nothing, the safety
//! cap and the lock stop a run whole, a container restarted between plan and
//! removal is skipped, and `docker system prune -a -f` on the same layout
//! removes the live pod's istio-init where safeprune does not. Each test
//! runs on Docker 20.10 and on Docker 29 with each image store
//! (`docker_tests!`).

use crate::util;

use std::collections::BTreeSet;

use bollard::models::HostConfig;
use bollard::query_parameters::{
    ListContainersOptionsBuilder, ListImagesOptionsBuilder, ListNetworksOptions, ListVolumesOptions,
};
use safeprune::execute::{Reason, RemovalResult};
use safeprune::runtime::docker::DockerRuntime;
use serde_json::Value;
use util::docker::PrivateDockerd;
use util::docker_matrix::{DockerVersion, VersionedDockerd, docker_tests};
use util::node::{Cli, Layout, Runtime, decision, execute_plan, plan_now};
use util::pod::Pod;
use util::{RUN_FOREVER, Required};

docker_tests! {
    #[tokio::test(flavor = "multi_thread")]
    plan_then_run_removes_exactly_the_expected_objects,
    #[tokio::test(flavor = "multi_thread")]
    docker_system_prune_removes_the_live_pods_istio_init_and_safeprune_does_not,
    #[tokio::test(flavor = "multi_thread")]
    over_the_cap_and_under_a_held_lock_nothing_is_removed,
    #[tokio::test(flavor = "multi_thread")]
    a_container_restarted_after_planning_is_skipped_not_removed,
    #[tokio::test(flavor = "multi_thread")]
    explain_names_the_rule_and_the_facts,
    #[tokio::test(flavor = "multi_thread")]
    a_reader_that_closed_the_pipe_is_no_error,
    #[tokio::test(flavor = "multi_thread")]
    sigterm_finishes_the_removals_in_flight_and_still_reports,
    #[tokio::test(flavor = "multi_thread")]
    run_dry_run_decides_as_plan_does_and_removes_nothing,
    #[tokio::test(flavor = "multi_thread")]
    a_policy_that_does_not_prune_the_build_cache_does_not_read_it,
    #[tokio::test(flavor = "multi_thread")]
    check_says_ok_for_each_on_a_working_node_and_what_to_do_as_nobody,
    #[tokio::test(flavor = "multi_thread")]
    a_dry_run_needs_no_lock,
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
/// containers, images, volumes and networks. Ids by role (volume: name).
async fn lay_out(engine: &PrivateDockerd) -> Layout {
    let mut layout = Layout::default();
    let base = engine.import_busybox_image("base:1", Some("base")).await;
    let pause = engine
        .import_busybox_image("registry.k8s.io/pause:3.9", Some("pause"))
        .await;
    layout.insert("image base (in use)", base.clone());
    layout.insert("image pause (in use)", pause.clone());
    layout.insert(
        "image pause 3.6 (keep pattern)",
        engine
            .import_busybox_image("registry.k8s.io/pause:3.6", Some("pause 3.6"))
            .await,
    );

    // A live pod: its sandbox runs, istio-init and another init container
    // exited, an earlier attempt of its app crashed, the app runs again.
    let web = Pod::new("web", "default");
    let web_sandbox = engine.create_sandbox(&web, &pause, true).await;
    layout.insert("web sandbox", web_sandbox.clone());
    for (role, name, restart, cmd) in [
        ("web istio-init", "istio-init", 0, ["sh", "-c", "exit 0"]),
        ("web init", "setup", 0, ["sh", "-c", "exit 0"]),
        ("web app crashed attempt", "app", 0, ["sh", "-c", "exit 1"]),
    ] {
        let id = engine
            .run_pod_container_to_exit(&web, &web_sandbox, name, restart, &base, &cmd)
            .await;
        layout.insert(role, id);
    }
    let app = engine
        .create_pod_container(&web, &web_sandbox, "app", 1, &base, RUN_FOREVER)
        .await;
    engine.start_container(&app).await;
    layout.insert("web app running", app);

    // A dead pod: sandbox and containers exited.
    let old = Pod::new("old", "default");
    let old_sandbox = engine.create_sandbox(&old, &pause, false).await;
    layout.insert("old-pod sandbox", old_sandbox.clone());
    for (role, name) in [("old-pod istio-init", "istio-init"), ("old-pod app", "app")] {
        let id = engine
            .run_pod_container_to_exit(&old, &old_sandbox, name, 0, &base, &["sh", "-c", "exit 0"])
            .await;
        layout.insert(role, id);
    }

    // A pod whose sandbox was recreated: the first sandbox exited, the second
    // runs; an init container of the first attempt still belongs to the pod.
    let mut db = Pod::new("db", "default");
    let first = engine.create_sandbox(&db, &pause, false).await;
    layout.insert("db first sandbox", first.clone());
    let migrate = engine
        .run_pod_container_to_exit(&db, &first, "migrate", 0, &base, &["sh", "-c", "exit 0"])
        .await;
    layout.insert("db init of first sandbox", migrate);
    db.attempt = 1;
    layout.insert(
        "db second sandbox",
        engine.create_sandbox(&db, &pause, true).await,
    );

    lay_out_plain(engine, &base, &mut layout).await;
    layout
}

/// Plain containers, images, volumes and networks beside the pods.
async fn lay_out_plain(engine: &PrivateDockerd, base: &str, layout: &mut Layout) {
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
    layout.insert("plain running", running);
    layout.insert("volume anonymous in use", used_volume);
    layout.insert("network in use", used_net);
    layout.insert(
        "plain exited",
        engine.run_to_exit("plain-exited", base, &[]).await,
    );
    // Stopped rather than exited by itself, so that a test can start it again.
    let stopped = engine
        .create_container("plain-stopped", base, &[], RUN_FOREVER)
        .await;
    engine.start_container(&stopped).await;
    engine.stop_container(&stopped).await;
    layout.insert("plain stopped", stopped);
    let own = engine.import_busybox_image("freed:1", Some("freed")).await;
    layout.insert(
        "plain exited on its own image",
        engine.run_to_exit("plain-exited-own", &own, &[]).await,
    );
    layout.insert("image freed by a deleted container", own);
    layout.insert(
        "image unused",
        engine
            .import_busybox_image("unused:1", Some("unused"))
            .await,
    );
    let multi = engine.import_busybox_image("multi:1", Some("multi")).await;
    engine.tag_image(&multi, "multi:2").await;
    engine.tag_image(&multi, "other/multi:3").await;
    layout.insert("image multi-tagged", multi);
    layout.insert(
        "image dangling",
        engine.import_dangling_image(Some("dangling")).await,
    );
    layout.insert("volume anonymous unused", engine.create_volume(None).await);
    layout.insert(
        "volume named unused",
        engine.create_volume(Some("keep-me")).await,
    );
    layout.insert(
        "network unused",
        engine.create_network("unused-net", &[]).await,
    );
}

/// Every age limit at zero, so the layout, made seconds ago, is decided by
/// the other rules; volumes on.
const ZERO_AGES: &str = "containers: { min_age: \"0\" }\n\
                         images: { min_age: \"0\" }\n\
                         volumes: { enabled: true, min_age: \"0\" }\n\
                         networks: { min_age: \"0\" }\n\
                         build_cache: { min_age: \"0\" }\n";

/// A policy for the private engine: [`ZERO_AGES`], then `extra`.
fn safeprune_on(engine: &PrivateDockerd, extra: &str) -> Cli {
    Cli::new(
        &Runtime::Docker(engine.endpoint()),
        &format!("{ZERO_AGES}{extra}"),
    )
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

async fn plan_then_run_removes_exactly_the_expected_objects(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let layout = lay_out(&engine).await;
    let safeprune = safeprune_on(&engine, "");
    let before = existing(&engine).await;

    // plan: every object decided, the right ones for deletion, nothing removed.
    let (code, report) = safeprune.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0));
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["runtime"], "docker");
    layout.assert_decisions(&report, DELETED);
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
    let table = String::from_utf8(safeprune.run(&["plan"]).stdout).unwrap();
    assert!(
        table.contains("protected: protected_label 2 containers"),
        "{table}"
    );
    assert!(table.contains("live_pod_sandbox 3 containers"), "{table}");

    // run: exactly the planned objects go.
    let (code, report) = safeprune.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["dry_run"], false);
    layout.assert_deleted(&report, DELETED);
    let after = existing(&engine).await;
    layout.assert_left(|id| after.contains(id), DELETED);
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
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(safeprune.path("report.json")).unwrap())
            .unwrap();
    assert_eq!(file, report);
    let audit = std::fs::read_to_string(safeprune.path("audit.jsonl")).unwrap();
    assert_eq!(audit.lines().count(), DELETED.len());

    // A second run finds nothing more to do.
    let (code, again) = safeprune.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0));
    assert!(again["outcomes"].as_array().unwrap().is_empty(), "{again}");
    for kind in ["container", "image", "volume", "network", "build_cache"] {
        assert_eq!(again["summary"]["delete"][kind], 0, "{kind}");
    }
    assert_eq!(existing(&engine).await, after);
}

async fn docker_system_prune_removes_the_live_pods_istio_init_and_safeprune_does_not(
    version: DockerVersion,
) {
    let engine = VersionedDockerd::start(version).await.required();
    let layout = lay_out(&engine).await;
    let istio = layout.id("web istio-init").to_owned();
    let init = layout.id("web init").to_owned();

    let safeprune = safeprune_on(&engine, "");
    // From cron: -q prints nothing on success, so cron mails nothing.
    let quiet = safeprune.run(&["-q", "run"]);
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

async fn over_the_cap_and_under_a_held_lock_nothing_is_removed(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    lay_out(&engine).await;
    let safeprune = safeprune_on(&engine, "safety: { max_deletions: 3 }\n");
    let before = existing(&engine).await;

    let out = safeprune.run(&["run"]);
    assert_eq!(out.status.code(), Some(5));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("deletes {}", DELETED.len())), "{err}");
    assert!(err.contains("limit of 3"), "{err}");
    assert_eq!(existing(&engine).await, before);
    // The flag overrides the policy, both ways.
    assert_eq!(
        safeprune
            .run(&["run", "--max-deletions", "2"])
            .status
            .code(),
        Some(5)
    );
    assert_eq!(existing(&engine).await, before);

    let lock = std::fs::File::create(safeprune.path("safeprune.lock")).unwrap();
    lock.try_lock().unwrap();
    let out = safeprune.run(&["run", "--max-deletions", "100"]);
    assert_eq!(out.status.code(), Some(4));
    assert_eq!(safeprune.run(&["run", "--dry-run"]).status.code(), Some(4));
    assert_eq!(
        safeprune.run(&["plan"]).status.code(),
        Some(0),
        "plan takes no lock"
    );
    assert_eq!(existing(&engine).await, before);
    drop(lock);
    assert_eq!(
        safeprune
            .run(&["run", "--max-deletions", "100"])
            .status
            .code(),
        Some(0)
    );
    assert_ne!(existing(&engine).await, before);
}

async fn a_container_restarted_after_planning_is_skipped_not_removed(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let layout = lay_out(&engine).await;
    let safeprune = safeprune_on(&engine, "");
    let policy = safeprune.policy();
    let runtime = DockerRuntime::connect(engine.endpoint()).await.unwrap();
    let planned = plan_now(&runtime, &policy).await;

    // Between plan and removal: a plain container is started again, and the
    // dead pod comes back (kubelet makes it a new sandbox, same pod uid).
    let restarted = layout.id("plain stopped");
    engine.start_container(restarted).await;
    let mut old = Pod::new("old", "default");
    old.attempt = 1;
    engine
        .create_sandbox(&old, layout.id("image pause (in use)"), true)
        .await;

    let outcomes = execute_plan(&runtime, &planned, &policy).await;
    for role in ["plain stopped", "old-pod app"] {
        let o = layout.outcome(&outcomes, role);
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
            layout.outcome(&outcomes, role).result,
            RemovalResult::Deleted,
            "{role}"
        );
    }
    let after = existing(&engine).await;
    assert!(after.contains(restarted));
    assert!(after.contains(layout.id("old-pod app")));
}

async fn explain_names_the_rule_and_the_facts(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let layout = lay_out(&engine).await;
    let safeprune = safeprune_on(&engine, "");
    let out = safeprune.run(&["explain", "k8s_istio-init_web_default_uid-default-web_0"]);
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

    // The same as one JSON document: the report's decision, and the facts.
    let (code, doc) = safeprune.json(&[
        "explain",
        "-o",
        "json",
        "k8s_istio-init_web_default_uid-default-web_0",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(doc["query"], "k8s_istio-init_web_default_uid-default-web_0");
    assert_eq!(doc["runtime"], "docker");
    let decisions = doc["decisions"].as_array().unwrap();
    assert_eq!(decisions.len(), 1, "{doc}");
    let init = &decisions[0];
    assert_eq!(init["kind"], "container");
    assert_eq!(init["decision"], "keep");
    assert_eq!(init["rule"], "protected_label");
    assert_eq!(init["facts"]["state"], "exited", "{doc}");
    assert_eq!(
        init["facts"]["protect_rule"], "io.kubernetes.container.name=istio-init",
        "{doc}"
    );
    assert_eq!(init["facts"]["sandbox"], layout.id("web sandbox"), "{doc}");

    let out = safeprune.run(&["explain", "base:1"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("in_use"), "{text}");

    // Asked by any of its tags, a multi-tagged image answers under that tag
    // and lists every other.
    for tag in ["multi:2", "other/multi:3", "docker.io/library/multi:1"] {
        let out = safeprune.run(&["explain", tag]);
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
    let out = safeprune.run(&["plan"]);
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(table.contains("multi:1,2 other/multi:3"), "{table}");
    let (_, report) = safeprune.json(&["plan", "--output", "json"]);
    let multi = decision(&report, layout.id("image multi-tagged"));
    let refs: Vec<&str> = multi["refs"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_str())
        .filter(|r| !r.contains('@'))
        .collect();
    assert_eq!(refs, ["multi:1", "multi:2", "other/multi:3"]);

    // Nothing of that name: exit 6, which says the engine was asked.
    for args in [
        &["explain", "no-such-thing"][..],
        &["explain", "-o", "json", "no-such-thing"],
    ] {
        let out = safeprune.run(args);
        assert_eq!(out.status.code(), Some(6), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no container, image, volume or network matches 'no-such-thing'"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

async fn a_reader_that_closed_the_pipe_is_no_error(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    lay_out(&engine).await;
    let safeprune = safeprune_on(&engine, "");
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
        let out = safeprune.command(&args).stdout(writer).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    }
}

async fn sigterm_finishes_the_removals_in_flight_and_still_reports(version: DockerVersion) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", None).await;
    let mut created = Vec::new();
    for i in 0..60 {
        created.push(
            engine
                .create_container(&format!("never-ran-{i}"), &base, &[], util::EXIT_0)
                .await,
        );
    }
    let safeprune = safeprune_on(&engine, "safety: { concurrency: 1 }\n");
    let mut child = safeprune
        .command(&["-v", "run", "--output", "json"])
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
    assert!(safeprune.path("report.json").exists());
}

async fn run_dry_run_decides_as_plan_does_and_removes_nothing(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    lay_out(&engine).await;
    let safeprune = safeprune_on(&engine, "");
    let before = existing(&engine).await;
    let (code, report) = safeprune.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0));
    let (code, dry) = safeprune.json(&["run", "--dry-run", "--output", "json"]);
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
    assert!(safeprune.path("report.json").exists());
    assert_eq!(
        existing(&engine).await,
        before,
        "a dry run removed something"
    );
}

async fn a_policy_that_does_not_prune_the_build_cache_does_not_read_it(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    engine.build_with_buildkit("sp/built:v1");
    let build_cache = |policy: &str| {
        let (code, report) = Cli::new(&Runtime::Docker(engine.endpoint()), policy)
            .json(&["plan", "--output", "json"]);
        assert_eq!(code, Some(0), "{report}");
        report["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["kind"] == "build_cache")
            .count()
    };
    assert!(
        build_cache("") > 0,
        "the default policy reads the build cache"
    );
    assert_eq!(build_cache("build_cache: { enabled: false }\n"), 0);
}

/// `safeprune --config <policy> args…` as nobody, with no group.
fn as_nobody(cli: &Cli, args: &[&str]) -> std::process::Output {
    std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_safeprune"))
        .arg("--config")
        .arg(cli.policy_path())
        .args(args)
        .env_remove("SAFEPRUNE_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("setpriv runs (util-linux)")
}

async fn check_says_ok_for_each_on_a_working_node_and_what_to_do_as_nobody(version: DockerVersion) {
    use std::os::unix::fs::PermissionsExt;
    let engine = VersionedDockerd::start(version).await.required();
    // Pacing too, where this machine shows its I/O pressure.
    let psi = std::fs::read_to_string("/proc/pressure/io").is_ok_and(|t| t.contains("avg300"));
    let safeprune = safeprune_on(
        &engine,
        if psi {
            "safety:\n  pace: {workloads_cgroup: node}\n"
        } else {
            ""
        },
    );
    let out = safeprune.run(&["check"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(0), "{err}");
    // stdout is the policy alone, as offline.
    assert_eq!(out.stdout, safeprune.run(&["check", "--offline"]).stdout);
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines[0].starts_with("safeprune: policy from "), "{err}");
    let engine_line = lines
        .iter()
        .find(|l| l.starts_with("safeprune: engine: "))
        .unwrap_or_else(|| panic!("no engine line: {err}"));
    assert!(
        engine_line.starts_with("safeprune: engine: ok: docker ")
            && engine_line.contains(" (API 1.")
            && engine_line.ends_with(&format!(") at {}", engine.endpoint())),
        "{err}"
    );
    let mut checked: Vec<&str> = lines[1..]
        .iter()
        .filter_map(|l| {
            let (what, rest) = l.strip_prefix("safeprune: ")?.split_once(": ")?;
            assert!(
                rest.starts_with("ok: ")
                    || (what == "safety.pace" && rest.starts_with("by the node's I/O stall ")),
                "{err}"
            );
            Some(what)
        })
        .collect();
    checked.sort_unstable();
    let mut expected = vec![
        "engine",
        "images.keep_unpullable",
        "lock_file",
        "report.audit_log",
        "report.json_path",
        "report.metrics_textfile",
        "state_dir",
    ];
    if psi {
        expected.push("safety.pace");
        expected.sort_unstable();
    }
    assert_eq!(checked, expected, "{err}");

    // The engine's socket for root alone: nobody is told why and what to do.
    let socket = engine.endpoint().trim_start_matches("unix://").to_owned();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
    let dir = safeprune.policy_path().parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        safeprune.policy_path(),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let denied = format!(
        "cannot reach Docker at {socket}: permission denied (run as root, or as a member of the \
         docker group)"
    );
    let out = as_nobody(&safeprune, &["check"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("\nsafeprune: engine: {denied}\n")),
        "{err}"
    );
    let out = as_nobody(&safeprune, &["plan"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.ends_with(&format!("safeprune: error: {denied}\n")),
        "{err}"
    );
    assert!(
        !err.contains("client error"),
        "no cause chain without -v: {err}"
    );
    assert_eq!(
        as_nobody(&safeprune, &["check", "--offline"]).status.code(),
        Some(0)
    );
}

async fn a_dry_run_needs_no_lock(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    engine
        .run_to_exit(
            "exited",
            &engine.import_busybox_image("sp-busybox:1", None).await,
            &[],
        )
        .await;
    let safeprune = safeprune_on(&engine, "");
    // A lock file it cannot open, as /run/safeprune.lock is for a user.
    let lock = format!(
        "/nonexistent/safeprune{}",
        safeprune.path("safeprune.lock").display()
    );
    let yaml = std::fs::read_to_string(safeprune.policy_path())
        .unwrap()
        .replace("lock_file: ", "lock_file: /nonexistent/safeprune");
    safeprune.write(&yaml);
    let (code, dry) = safeprune.json(&["run", "--dry-run", "--output", "json"]);
    assert_eq!(code, Some(0), "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert!(
        dry["summary"]["delete"]["container"].as_u64() >= Some(1),
        "{dry}"
    );
    // A real run still takes it, and stops before the engine.
    let out = safeprune.run(&["run"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with(&format!("safeprune: error: cannot use {lock}: ")),
        "{err}"
    );
    assert!(
        engine
            .docker()
            .inspect_container("exited", None)
            .await
            .is_ok(),
        "the real run removed nothing"
    );
}
