//! safeprune on a CRI-O node through CRI alone (`runtime.kind: cri`), as an
//! operator runs it: a private CRI-O 1.36.3 (`util::crio`), pods made
//! through CRI as kubelet makes them, and the `safeprune` binary on a
//! policy pointing at its socket. What kubelet still needs stays (a live
//! pod's exited init container, a protected label, an image a container of
//! any state was made from or mounts, the pinned pause image); what it no
//! longer needs goes (the exited containers of a pod whose sandbox is not
//! ready, images no container uses); and CRI-O answers kubelet as before.
//! Each test prints that it is skipped where `$SAFEPRUNE_TEST_RUNTIMES` is
//! unset.

use std::collections::BTreeSet;

use safeprune::inventory::Kind;
use safeprune::runtime::cri::CriRuntime;
use safeprune::runtime::{Engine, Removal, Target};
use serde_json::Value;

use crate::util;
use util::crio::{CrioContainer, CrioPod, PAUSE_IMAGE, PrivateCrio};
use util::node::{Cli, Layout, Runtime, decision};
use util::pod::Pod;
use util::{EXIT_0, RUN_FOREVER, Required};

const APP: &str = "docker.io/library/app:1";
/// Mounted as a volume by the live pod's app.
const DATA: &str = "docker.io/library/data:1";
/// The image of the finished job's container only.
const JOB: &str = "docker.io/library/job:1";
/// No container uses it.
const OLD: &str = "docker.io/library/old:1";

/// Pruning at once: ages are not what these tests are about.
const AT_ONCE: &str = "containers: { min_age: \"0\" }\nimages: { min_age: \"0\" }\n";

/// A CRI-O node: pod `default/web` live, its `istio-init` exited and its
/// `app` running with `DATA` mounted; pod `batch/job` finished, its
/// sandbox stopped (not ready), its `task` exited; `OLD` unused.
struct Node<'a> {
    layout: Layout,
    web: CrioPod<'a>,
    job: CrioPod<'a>,
}

fn lay_out(crio: &PrivateCrio) -> Node<'_> {
    let mut layout = Layout::default();
    for (role, name, variant) in [
        ("app image", APP, "app"),
        ("data image", DATA, "data"),
        ("job image", JOB, "job"),
        ("old image", OLD, "old"),
    ] {
        layout.insert(role, crio.import_image(name, variant));
    }
    layout.insert("pause image", crio.image_id(PAUSE_IMAGE));

    let web = crio.run_pod(&Pod::new("web", "default"));
    let init = web.container("istio-init", APP, &["sh", "-c", "exit 0"]);
    web.wait_exited(&init);
    let app = web.create(&CrioContainer {
        name: "app",
        image: APP,
        cmd: RUN_FOREVER,
        image_volumes: &[("/data", DATA)],
        ..CrioContainer::default()
    });
    web.start(&app);
    layout.insert("live pod's exited istio-init", init);
    layout.insert("live pod's running app", app);

    let job = crio.run_pod(&Pod::new("job", "batch"));
    let task = job.container("task", JOB, EXIT_0);
    job.wait_exited(&task);
    job.stop();
    layout.insert("finished pod's exited task", task);
    Node { layout, web, job }
}

#[tokio::test]
async fn a_run_removes_what_kubelet_no_longer_needs_and_crio_still_answers() {
    let crio = PrivateCrio::start().await.required();
    let node = lay_out(&crio);
    let layout = &node.layout;
    let cli = Cli::new(&Runtime::Cri(&crio.endpoint()), AT_ONCE);

    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    assert_eq!(plan["runtime"], "cri");
    assert!(
        plan["runtime_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("runtime.kind: cri, cri-o 1.36.3 at ")),
        "{}",
        plan["runtime_reason"]
    );
    assert_eq!(
        plan["summary"]["not_applicable"],
        serde_json::json!(["volume", "network", "build_cache"])
    );
    layout.assert_decisions(
        &plan,
        &["finished pod's exited task", "job image", "old image"],
    );
    let rule = |role: &str| decision(&plan, layout.id(role))["rule"].clone();
    assert_eq!(rule("live pod's exited istio-init"), "protected_label");
    assert_eq!(rule("live pod's running app"), "running");
    assert_eq!(rule("app image"), "in_use");
    // The default policy keeps pause images by name, before CRI's pin.
    assert_eq!(rule("pause image"), "keep_pattern");
    let data = decision(&plan, layout.id("data image"));
    assert_eq!(data["rule"], "in_use", "{data}");
    assert!(
        data["detail"]
            .as_str()
            .unwrap()
            .starts_with("mounted as a volume by kept container app_web_default_"),
        "{data}"
    );
    // Sandboxes are kubelet's, and not containers to CRI: never decided.
    for sandbox in [&node.web.sandbox_id, &node.job.sandbox_id] {
        assert!(
            plan["decisions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|d| &d["id"] != sandbox),
            "{sandbox} was decided on"
        );
    }

    let (code, explained) = {
        let out = cli.run(&["explain", DATA]);
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{explained}");
    assert!(
        explained.contains("mounted as a volume by kept container"),
        "{explained}"
    );
    assert!(
        !explained.contains("frees"),
        "CRI cannot tell what a removal alone frees: {explained}"
    );

    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    layout.assert_deleted(
        &report,
        &["finished pod's exited task", "job image", "old image"],
    );

    // What kubelet asks next, it is answered.
    let pods = crio.ctl().pods();
    assert_eq!(pods.len(), 2, "{pods:?}");
    for sandbox in [&node.web.sandbox_id, &node.job.sandbox_id] {
        crio.ctl().sandbox_status(sandbox);
    }
    assert_eq!(
        crio.container_ids(),
        [
            layout.id("live pod's exited istio-init"),
            layout.id("live pod's running app"),
        ]
        .map(str::to_owned)
        .into()
    );
    assert_eq!(
        crio.image_ids(),
        ["app image", "data image", "pause image"]
            .map(|r| layout.id(r).to_owned())
            .into()
    );
    // A run again finds nothing more to do.
    let (code, again) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{again}");
    assert_eq!(again["outcomes"].as_array().unwrap().len(), 0, "{again}");
    drop(node);
}

/// CRI has no pull or tag time: an image is dated by safeprune's first
/// sighting, kept in `state_dir`, so `min_age` counts from there.
/// A container's removal costs CRI-O two calls beyond what the inventory
/// makes (`plan` alone): the `ContainerStatus` that shows it still exited,
/// just before `RemoveContainer`. Its re-check takes the exited container
/// as the inventory found it (CRI never starts it again), and lists the
/// pods once per batch, not per container.
#[tokio::test]
async fn a_container_removal_costs_two_calls_beyond_the_inventory() {
    const FINISHED: usize = 6;
    let crio = PrivateCrio::start().await.required();
    crio.import_image(JOB, "job");
    for i in 0..FINISHED {
        let pod = crio.run_pod(&Pod::new(&format!("job-{i}"), "batch"));
        let task = pod.container("task", JOB, EXIT_0);
        pod.wait_exited(&task);
        pod.stop();
    }
    let cli = Cli::new(
        &Runtime::Cri(&crio.endpoint()),
        "containers: { min_age: \"0\" }\nimages: { enabled: false }\n",
    );
    let since = |before: &std::collections::BTreeMap<String, u64>,
                 after: &std::collections::BTreeMap<String, u64>| {
        after
            .iter()
            .map(|(method, n)| (method.clone(), n - before.get(method).copied().unwrap_or(0)))
            .filter(|(_, n)| *n > 0)
            .collect::<std::collections::BTreeMap<String, u64>>()
    };
    let start = crio.operations();
    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    let planned = crio.operations();
    let (code, run) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{run}");
    let ran = crio.operations();
    let (inventory, run_calls) = (since(&start, &planned), since(&planned, &ran));
    let deleted = run["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["result"] == "deleted")
        .count();
    assert_eq!(deleted, FINISHED, "{run}");
    let beyond: std::collections::BTreeMap<&str, u64> = run_calls
        .iter()
        .map(|(method, n)| {
            let listed = inventory.get(method).copied().unwrap_or(0);
            (method.as_str(), n.saturating_sub(listed))
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    let why = format!("inventory {inventory:?}, run {run_calls:?}");
    let per_batch = beyond.get("ListPodSandbox").copied().unwrap_or(0);
    assert!(
        (1..=u64::try_from(FINISHED).unwrap()).contains(&per_batch),
        "the pods are listed once per re-check batch: {why}"
    );
    let per_container: std::collections::BTreeMap<&str, u64> = beyond
        .into_iter()
        .filter(|(method, _)| *method != "ListPodSandbox")
        .collect();
    let finished = u64::try_from(FINISHED).unwrap();
    assert_eq!(
        per_container,
        [("ContainerStatus", finished), ("RemoveContainer", finished)].into(),
        "{why}"
    );
}

#[tokio::test]
async fn an_image_is_as_old_as_safepruness_first_sighting_of_it() {
    let crio = PrivateCrio::start().await.required();
    let old = crio.import_image(OLD, "old");
    let cli = Cli::new(&Runtime::Cri(&crio.endpoint()), "images: { min_age: 1h }\n");
    let (_, first) = cli.json(&["plan", "--output", "json"]);
    let d = decision(&first, &old);
    assert_eq!(d["rule"], "too_young", "{d}");
    assert_eq!(d["last_used_source"], "first_seen", "{d}");
    let seen = d["last_used"].as_str().unwrap().to_owned();
    let history: Value = serde_json::from_slice(
        &std::fs::read(cli.path("state/image-usage.json")).expect("the history is written"),
    )
    .unwrap();
    assert!(history["first_seen"][&old].is_string(), "{history}");

    // Seen again: still first seen then, not now.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let (_, second) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(decision(&second, &old)["last_used"], seen.as_str());

    // A run honours it too: nothing goes.
    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    assert!(crio.image_ids().contains(&old));
}

/// `auto` finds CRI-O when neither Docker nor containerd answers; `kind:
/// containerd` at CRI-O's socket says to use `kind: cri`.
#[tokio::test]
async fn auto_finds_crio_and_containerd_at_its_socket_says_what_to_use() {
    let crio = PrivateCrio::start().await.required();
    let endpoint = crio.endpoint();
    let nowhere = crio.dir().join("nothing.sock");
    let nowhere = nowhere.to_str().unwrap();
    let cli = Cli::with_yaml(&format!(
        "runtime:\n  kind: auto\n  docker: {{ endpoint: \"unix://{nowhere}\" }}\n  \
         containerd: {{ endpoint: \"{nowhere}\" }}\n  cri: {{ endpoint: \"{endpoint}\" }}\n\
         state_dir: {}\n",
        crio.dir().join("state").display()
    ));
    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    assert_eq!(plan["runtime"], "cri");
    assert!(
        plan["runtime_reason"]
            .as_str()
            .unwrap()
            .contains("cri-o 1.36.3 answered CRI at"),
        "{}",
        plan["runtime_reason"]
    );

    let wrong = Cli::new(
        &Runtime::Containerd(endpoint.trim_start_matches("unix://"), &[]),
        "",
    );
    let out = wrong.run(&["plan"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("use runtime.kind: cri"), "{stderr}");
}

/// The adapter's own refusals, below the planner: CRI's `RemoveContainer`
/// would stop a running container and answer OK for an unknown one, and
/// CRI-O refuses an image a container (exited too) was made from.
#[tokio::test]
async fn the_adapter_never_trusts_cri_to_refuse() {
    let crio = PrivateCrio::start().await.required();
    let node = lay_out(&crio);
    let layout = &node.layout;
    let cri = CriRuntime::connect(&crio.endpoint())
        .await
        .expect("connect to CRI-O");
    let inventory = cri.inventory().await.expect("inventory");
    let pause = inventory
        .images
        .iter()
        .find(|i| i.id == layout.id("pause image"))
        .expect("the pause image");
    assert!(
        pause.pinned && pause.cri_pinned,
        "CRI-O pins its pause image"
    );
    let find = |kind, role: &str| {
        Target::find(&inventory, kind, layout.id(role))
            .unwrap_or_else(|| panic!("{role} in the inventory"))
    };

    let running = find(Kind::Container, "live pod's running app");
    assert!(
        matches!(cri.remove(&running).await, Removal::InUse(why) if why.contains("running")),
        "a running container is refused"
    );
    assert!(
        crio.container_ids()
            .contains(layout.id("live pod's running app"))
    );
    let unknown = Target::by_id(Kind::Container, &"0".repeat(64));
    assert_eq!(cri.remove(&unknown).await, Removal::Gone);

    // The job's image, while its exited container is left: CRI-O refuses.
    let job_image = find(Kind::Image, "job image");
    assert!(
        matches!(cri.remove(&job_image).await, Removal::InUse(why) if why.contains("in use")),
        "an image an exited container was made from is refused"
    );
    // Its re-check sees the container, as the plan did.
    let fresh = cri
        .recheck(Kind::Image, &[layout.id("job image")])
        .await
        .expect("recheck");
    assert_eq!(fresh.images.len(), 1);
    assert!(
        fresh
            .containers
            .iter()
            .any(|c| c.id == layout.id("finished pod's exited task")),
        "{fresh:#?}"
    );
    // Exited, in a pod that is not ready: it goes, then its image.
    let task = find(Kind::Container, "finished pod's exited task");
    assert_eq!(cri.remove(&task).await, Removal::Removed);
    assert_eq!(cri.remove(&task).await, Removal::Gone);
    assert_eq!(cri.remove(&job_image).await, Removal::Removed);
    assert!(!crio.image_ids().contains(layout.id("job image")));
    assert_eq!(cri.remove(&job_image).await, Removal::Gone);
}

/// `plan --compare crictl-prune` predicts what `crictl rmi --prune`
/// removes from the same CRI-O node, its logic as cri-tools 1.36 has it
/// played over CRI by the harness (`Kubelet::rmi_prune`; no crictl binary
/// is served here, so the model is held to that replay): every image no
/// container (of any state) was made from, but the pinned pause image and
/// an image a running container mounts as a volume, which crictl tries to
/// remove and CRI-O refuses.
#[tokio::test]
async fn the_crictl_prediction_matches_a_replay_of_crictl_rmi_prune_on_crio() {
    let crio = PrivateCrio::start().await.required();
    let app = crio.import_image(APP, "app");
    let job = crio.import_image(JOB, "job");
    let old = crio.import_image(OLD, "old");
    let data = crio.import_image(DATA, "data");
    let pod = crio.run_pod(&Pod::new("job", "batch"));
    let task = pod.container("task", JOB, EXIT_0);
    pod.wait_exited(&task);
    pod.stop();
    let web = crio.run_pod(&Pod::new("web", "default"));
    let reader = web.create(&CrioContainer {
        name: "reader",
        image: JOB,
        cmd: RUN_FOREVER,
        image_volumes: &[("/data", DATA)],
        ..CrioContainer::default()
    });
    web.start(&reader);
    let cli = Cli::new(&Runtime::Cri(&crio.endpoint()), AT_ONCE);
    let (code, comparison) = cli.json(&["plan", "--compare", "crictl-prune", "--output", "json"]);
    assert_eq!(code, Some(0), "{comparison}");
    let predicted: BTreeSet<String> = ["only_command", "both"]
        .iter()
        .flat_map(|list| comparison[*list].as_array().unwrap().clone())
        .filter(|d| d["kind"] == "image")
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(predicted, [app, old].into(), "{comparison}");

    let before = crio.image_ids();
    // The replay, as crictl, ignores CRI-O's refusal of the mounted image.
    crio.ctl().rmi_prune();
    let removed: BTreeSet<String> = before.difference(&crio.image_ids()).cloned().collect();
    assert_eq!(
        predicted, removed,
        "the model and the replay of crictl's logic differ"
    );
    assert!(
        crio.image_ids().contains(&job),
        "its exited container holds it"
    );
    assert!(
        crio.image_ids().contains(&data),
        "CRI-O refuses it: a running container mounts it"
    );
}

/// `images.disk` on CRI-O: the file system measured is the one CRI's
/// `ImageFsInfo` names (`<root>/overlay-images`); under the high
/// watermark nothing goes, over it the unused images go.
#[tokio::test]
async fn disk_watermarks_measure_the_directory_cri_names() {
    let crio = PrivateCrio::start().await.required();
    let old = crio.import_image(OLD, "old");
    let store = crio.root().join("overlay-images");
    let runtime = Runtime::Cri(&crio.endpoint());
    let cli = Cli::new(
        &runtime,
        "images: { min_age: \"0\", disk: { high_percent: 100, low_percent: 99 } }\n",
    );
    let (code, calm) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{calm}");
    assert_eq!(calm["image_fs"]["path"], store.to_str().unwrap(), "{calm}");
    assert_eq!(decision(&calm, &old)["rule"], "disk_below_threshold");
    assert!(crio.image_ids().contains(&old));

    cli.rewrite(
        &runtime,
        "images: { min_age: \"0\", disk: { high_percent: 1, low_percent: 0 } }\n",
    );
    let (code, pressed) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{pressed}");
    assert_eq!(decision(&pressed, &old)["decision"], "delete", "{pressed}");
    assert!(
        pressed["image_fs"]["after_percent"].is_number(),
        "{pressed}"
    );
    assert!(!crio.image_ids().contains(&old));
}

/// A reviewed plan on CRI-O: `plan --save`, then `run --plan` removes
/// what was reviewed and nothing the node gained since.
#[tokio::test]
async fn a_reviewed_plan_runs_on_crio() {
    let crio = PrivateCrio::start().await.required();
    let old = crio.import_image(OLD, "old");
    let cli = Cli::new(&Runtime::Cri(&crio.endpoint()), AT_ONCE);
    let file = cli.path("reviewed.plan.json");
    let file = file.to_str().unwrap();
    let (code, planned) = cli.json(&["plan", "--save", file, "--output", "json"]);
    assert_eq!(code, Some(0), "{planned}");
    assert_eq!(decision(&planned, &old)["decision"], "delete");
    // Came after the review: not in it, so not removed.
    let later = crio.import_image(JOB, "job");
    let (code, report) = cli.json(&["run", "--plan", file, "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    let ids = crio.image_ids();
    assert!(!ids.contains(&old), "{report}");
    assert!(ids.contains(&later), "{report}");
}

/// The daemon follows CRI-O's `GetContainerEvents` when it serves them
/// (`enable_pod_events = true`), recording each container's use of its
/// image as it comes; without them it says so once and records uses at
/// each cycle.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_follows_crio_events_where_it_serves_them() {
    use util::crio::CrioOptions;
    use util::daemon::Daemon;
    const POLICY: &str = "schedule: \"0 0 1 1 *\"\nimages: { keep_recent: 2 }\n";
    let options = CrioOptions {
        pod_events: true,
        ..CrioOptions::default()
    };
    let (with, without) = tokio::join!(PrivateCrio::start_with(options), PrivateCrio::start());
    let (with, without) = (with.required(), without.required());

    let quiet = Cli::new(&Runtime::Cri(&without.endpoint()), POLICY);
    let daemon = Daemon::start(&quiet);
    daemon
        .wait_for("the CRI runtime serves no container events", 1)
        .await;
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));

    let app = with.import_image(APP, "app");
    let cli = Cli::new(&Runtime::Cri(&with.endpoint()), POLICY);
    let daemon = Daemon::start(&cli);
    daemon
        .wait_for("following the CRI runtime's container events", 1)
        .await;
    let pod = with.run_pod(&Pod::new("web", "default"));
    let task = pod.container("task", APP, EXIT_0);
    pod.wait_exited(&task);
    let history = cli.path("state/image-usage.json");
    let begun = std::time::Instant::now();
    let source = loop {
        let source = std::fs::read(&history)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .and_then(|v| v["images"][&app]["source"].as_str().map(str::to_owned));
        if source.as_deref() == Some("container_exit") {
            break source;
        }
        assert!(
            begun.elapsed() < std::time::Duration::from_secs(30),
            "no exit recorded for {app}: {source:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(source.as_deref(), Some("container_exit"));
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));
}
