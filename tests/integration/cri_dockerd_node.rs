//! safeprune on a Docker node whose pods a real cri-dockerd made, with
//! the harness playing kubelet over CRI (`util::cri_dockerd`,
//! `util::kubelet`): cri-dockerd 0.3.25 over
//! Debian's Docker 20.10, and 0.4.3 over Docker 29 on each image store.
//!
//! What cri-dockerd makes is what safeprune reads and what the
//! hand-labelled fixtures of `util::docker` imitate (names, labels,
//! annotations as `annotation.*` labels); on the node scenario `plan` keeps
//! a live pod's exited init containers and every sandbox, `run` removes
//! exactly what the plan said, and cri-dockerd still answers kubelet's
//! `ListPodSandbox`, `ListContainers` and `PodSandboxStatus` afterwards
//! (what `crictl pods`, `ps -a` and `inspectp` ask), where `docker system
//! prune -a -f` takes the live pod's `istio-init`. Each test prints that it
//! is skipped where `$SAFEPRUNE_TEST_RUNTIMES` is unset.

use std::collections::{BTreeMap, BTreeSet};

use bollard::query_parameters::{ListContainersOptionsBuilder, ListImagesOptionsBuilder};
use k8s_cri::v1::{ContainerState as CriState, PodSandboxState};
use safeprune::inventory::ContainerState;
use safeprune::runtime::Engine;
use safeprune::runtime::docker::DockerRuntime;

use crate::util;
use util::cri_dockerd::{Combo, PAUSE_IMAGE, PrivateCriDockerd, cri_dockerd_tests};
use util::kubelet::{CriContainer, CriPod};
use util::node::{Cli, Layout, Runtime, container, decision};
use util::pod::Pod;
use util::{EXIT_0, RUN_FOREVER, Required, TEST_LABEL};

/// The image of every container of the pods but the finished pod's app.
const APP: &str = "docker.io/library/app:1";
/// The image of the finished pod's app only.
const JOB: &str = "docker.io/library/job:1";
/// No container uses it.
const UNUSED: &str = "docker.io/library/unused:1";

/// Pruning at once: ages are not what these tests are about.
const AT_ONCE: &str = "containers: { min_age: \"0\" }\nimages: { min_age: \"0\" }\n";

cri_dockerd_tests!(
    a_what_cri_dockerd_makes_is_what_safeprune_reads,
    b_a_run_removes_what_the_plan_said_and_cri_dockerd_still_answers,
    c_docker_system_prune_takes_the_live_pods_istio_init,
    d_through_cri_alone_at_cri_dockerds_socket,
);

/// An init container of `image` that exits 0 at once.
fn init<'a>(name: &'a str, image: &'a str) -> CriContainer<'a> {
    CriContainer {
        name,
        image,
        cmd: EXIT_0,
        init: true,
        ..CriContainer::default()
    }
}

/// A container's inspect: its name (without `/`), labels, image as
/// created (`Config.Image`), image id (`Image`) and `State.FinishedAt`.
struct Inspected {
    name: String,
    labels: BTreeMap<String, String>,
    config_image: String,
    image_id: String,
    finished_at: String,
    oom_score_adj: Option<i64>,
}

async fn inspect(node: &PrivateCriDockerd, id: &str) -> Inspected {
    let c = node
        .docker()
        .inspect_container(id, None)
        .await
        .unwrap_or_else(|e| panic!("inspect {id}: {e}"));
    let config = c.config.unwrap_or_default();
    let oom_score_adj = c.host_config.and_then(|h| h.oom_score_adj);
    Inspected {
        name: c
            .name
            .unwrap_or_default()
            .trim_start_matches('/')
            .to_owned(),
        labels: config.labels.unwrap_or_default().into_iter().collect(),
        config_image: config.image.unwrap_or_default(),
        image_id: c.image.unwrap_or_default(),
        finished_at: c.state.and_then(|s| s.finished_at).unwrap_or_default(),
        oom_score_adj,
    }
}

/// Asserts that every label of `imitation` (a hand-labelled fixture's) is
/// on `real` with the same value, but those in `differing`, which must be
/// there with any value.
fn assert_imitates(real: &Inspected, imitation: &Inspected, differing: &[&str]) {
    for (key, value) in &imitation.labels {
        let found = real.labels.get(key);
        if differing.contains(&key.as_str()) {
            assert!(
                found.is_some(),
                "{key} missing on {}: {:?}",
                real.name,
                real.labels
            );
        } else {
            assert_eq!(
                found,
                Some(value),
                "{key} on {}: {:?}",
                real.name,
                real.labels
            );
        }
    }
}

async fn a_what_cri_dockerd_makes_is_what_safeprune_reads(combo: Combo) {
    let node = PrivateCriDockerd::start(combo).await.required();
    let what = combo.name();
    let app_image = node.import_busybox_image(APP, Some("app")).await;
    let web = Pod::new("web", "default");
    let web_pod = node.run_pod(&web);
    let sandbox_id = web_pod.sandbox_id.clone();
    let istio = web_pod.run_to_exit(&init("istio-init", APP));
    let app = web_pod.container("app", APP, RUN_FOREVER);
    let gone = Pod::new("gone", "jobs");
    let gone_pod = node.run_pod(&gone);
    gone_pod.stop();

    let (sandbox, istio_seen) = assert_names_and_labels(&node, &web_pod, &istio).await;
    assert_eq!(istio_seen.image_id, app_image, "{what}");
    assert_inventory_reads(&node, (&web_pod, &gone_pod), (&istio, &app), &app_image).await;

    // The hand-labelled fixtures (`util::docker`) carry a subset of these
    // labels, with the same values, and name alike: made for the same pod
    // at attempt 9, beside the real ones.
    let hand = Pod {
        attempt: 9,
        ..web.clone()
    };
    let hand_sandbox = node.create_sandbox(&hand, &app_image, true).await;
    let hand_sandbox = inspect(&node, &hand_sandbox).await;
    assert_eq!(
        hand_sandbox.name,
        sandbox.name.strip_suffix("_0").unwrap().to_owned() + "_9"
    );
    assert_imitates(&sandbox, &hand_sandbox, &[]);
    let hand_istio = node
        .create_pod_container(&web, &sandbox_id, "istio-init", 9, &app_image, EXIT_0)
        .await;
    let hand_istio = inspect(&node, &hand_istio).await;
    assert_eq!(
        hand_istio.name,
        istio_seen.name.strip_suffix("_0").unwrap().to_owned() + "_9"
    );
    assert_imitates(
        &istio_seen,
        &hand_istio,
        &["annotation.io.kubernetes.container.restartCount"],
    );
}

/// Asserts the names and labels cri-dockerd gave pod `web`'s sandbox and
/// its exited `istio` container, and what it answers kubelet about it;
/// returns both inspected.
async fn assert_names_and_labels(
    node: &PrivateCriDockerd,
    web_pod: &CriPod<'_>,
    istio: &str,
) -> (Inspected, Inspected) {
    let what = node.combo().name();
    let sandbox_id = &web_pod.sandbox_id;
    let web = &web_pod.pod;
    // Names and labels, as Docker shows them.
    let sandbox = inspect(node, sandbox_id).await;
    let uid = &web.uid;
    assert_eq!(
        sandbox.name,
        format!("k8s_POD_web_default_{uid}_0"),
        "{what}"
    );
    let istio_seen = inspect(node, istio).await;
    assert_eq!(
        istio_seen.name,
        format!("k8s_istio-init_web_default_{uid}_0")
    );
    let label = |c: &Inspected, key: &str| c.labels.get(key).cloned();
    let expected_sandbox = [
        ("io.kubernetes.docker.type", "podsandbox"),
        ("io.kubernetes.container.name", "POD"),
        ("io.kubernetes.pod.uid", uid.as_str()),
        ("io.kubernetes.pod.name", "web"),
        ("io.kubernetes.pod.namespace", "default"),
        // The pod's annotations, as labels.
        ("annotation.kubernetes.io/config.source", "api"),
        (TEST_LABEL, node.scope()),
    ];
    for (key, value) in expected_sandbox {
        assert_eq!(
            label(&sandbox, key).as_deref(),
            Some(value),
            "{key}: {what}"
        );
    }
    assert_eq!(label(&sandbox, "io.kubernetes.sandbox.id"), None, "{what}");
    let log_path = web_pod.log_dir().join("istio-init/0.log");
    let expected_container = [
        ("io.kubernetes.docker.type", "container"),
        ("io.kubernetes.sandbox.id", sandbox_id.as_str()),
        ("io.kubernetes.container.name", "istio-init"),
        ("io.kubernetes.pod.uid", uid.as_str()),
        ("io.kubernetes.pod.name", "web"),
        ("io.kubernetes.pod.namespace", "default"),
        (
            "io.kubernetes.container.logpath",
            log_path.to_str().unwrap(),
        ),
        // kubelet's container annotations, as labels.
        ("annotation.io.kubernetes.container.restartCount", "0"),
        ("annotation.io.kubernetes.container.type", "init"),
        (
            "annotation.io.kubernetes.container.terminationMessagePath",
            "/dev/termination-log",
        ),
        ("annotation.io.kubernetes.pod.terminationGracePeriod", "30"),
    ];
    for (key, value) in expected_container {
        assert_eq!(
            label(&istio_seen, key).as_deref(),
            Some(value),
            "{key}: {what}"
        );
    }
    assert!(
        label(&istio_seen, "annotation.io.kubernetes.container.hash").is_some(),
        "{what}"
    );
    // The sandbox runs the pause image by name; containers are made from
    // the id kubelet's pull resolved.
    assert_eq!(sandbox.config_image, PAUSE_IMAGE);
    // Below what root may set here: the harness's runc wrapper raises it.
    assert_eq!(sandbox.oom_score_adj, Some(-998), "{what}");
    assert_eq!(istio_seen.oom_score_adj, Some(0), "{what}");
    let cri_image_id = node.ctl().image_id(APP);
    assert_eq!(istio_seen.config_image, cri_image_id, "{what}");

    // cri-dockerd answers kubelet with the annotations split off again.
    let status = node.ctl().container_status(istio);
    assert_eq!(status.state(), CriState::ContainerExited);
    assert_eq!(
        status
            .annotations
            .get("io.kubernetes.container.type")
            .map(String::as_str),
        Some("init"),
        "{status:?}"
    );
    assert_eq!(
        status
            .labels
            .get("io.kubernetes.container.name")
            .map(String::as_str),
        Some("istio-init"),
        "{status:?}"
    );
    assert!(
        status.labels.keys().all(|k| !k.starts_with("annotation.")),
        "{status:?}"
    );

    (sandbox, istio_seen)
}

/// Asserts that safeprune's Docker inventory reads the pods, the
/// sandboxes' readiness and the exit times off what cri-dockerd made:
/// pod `web` live with its exited `istio-init` and running `app`, pod
/// `gone` stopped.
async fn assert_inventory_reads(
    node: &PrivateCriDockerd,
    (web_pod, gone_pod): (&CriPod<'_>, &CriPod<'_>),
    (istio, app): (&str, &str),
    app_image: &str,
) {
    let what = node.combo().name();
    let (web, gone) = (&web_pod.pod, &gone_pod.pod);
    let sandbox_id = &web_pod.sandbox_id;
    // safeprune's Docker inventory reads the pods, the sandboxes' readiness
    // and the exit times off them.
    let runtime = DockerRuntime::connect(node.endpoint()).await.unwrap();
    let inventory = runtime.inventory().await.expect("inventory");
    let mut ready: Vec<(String, bool)> = inventory
        .sandboxes
        .iter()
        .map(|s| (s.id.clone(), s.ready))
        .collect();
    ready.sort();
    let mut expected = vec![
        (sandbox_id.clone(), true),
        (gone_pod.sandbox_id.clone(), false),
    ];
    expected.sort();
    assert_eq!(ready, expected, "{what}");
    for (pod, id) in [(web, sandbox_id), (gone, &gone_pod.sandbox_id)] {
        pod.assert_owns(inventory.sandboxes.iter().find(|s| &s.id == id).unwrap());
        assert_eq!(container(&inventory, id).pod, Some(pod.sandbox_identity()));
    }
    let seen = container(&inventory, istio);
    assert_eq!(seen.pod, Some(web.container_identity(sandbox_id)), "{what}");
    assert_eq!(seen.state, ContainerState::Exited);
    assert_eq!(seen.image_id, app_image, "{what}");
    let status = node.ctl().container_status(istio);
    let finished = seen.finished.expect("an exited container has an exit time");
    assert!(status.finished_at > 0, "no finished_at: {status:?}");
    let cri_finished = chrono::DateTime::from_timestamp_nanos(status.finished_at);
    assert_eq!(finished, cri_finished, "the exit time kubelet sees: {what}");
    assert_eq!(
        finished,
        inspect(node, istio)
            .await
            .finished_at
            .parse::<chrono::DateTime<chrono::Utc>>()
            .unwrap()
    );
    let running = container(&inventory, app);
    assert_eq!(running.state, ContainerState::Running);
    assert_eq!(running.pod, Some(web.container_identity(sandbox_id)));
}

/// The node: pod `default/web` live (its sandbox ready), its init
/// containers `istio-init` and `setup` exited, its `app` running; pod
/// `batch/old` finished (its sandbox stopped), its `istio-init` and `app`
/// exited; images `APP` (used by both pods), `JOB` (only by the old pod's
/// app), `UNUSED`, and the pause image.
struct Node<'a> {
    layout: Layout,
    web: CriPod<'a>,
    old: CriPod<'a>,
}

/// Roles safeprune must delete; every other must stay.
const DELETED: &[&str] = &["old pod's app", "job image (freed)", "unused image"];

async fn lay_out(node: &PrivateCriDockerd) -> Node<'_> {
    let mut layout = Layout::default();
    layout.insert(
        "app image",
        node.import_busybox_image(APP, Some("app")).await,
    );
    layout.insert(
        "job image (freed)",
        node.import_busybox_image(JOB, Some("job")).await,
    );
    layout.insert(
        "unused image",
        node.import_busybox_image(UNUSED, Some("unused")).await,
    );
    let pause = node
        .docker()
        .inspect_image(PAUSE_IMAGE)
        .await
        .expect("the pause image")
        .id
        .expect("an image id");
    layout.insert("pause image", pause);

    let web = node.run_pod(&Pod::new("web", "default"));
    layout.insert("live pod's sandbox", web.sandbox_id.clone());
    layout.insert(
        "live pod's istio-init",
        web.run_to_exit(&init("istio-init", APP)),
    );
    layout.insert("live pod's setup", web.run_to_exit(&init("setup", APP)));
    layout.insert("live pod's app", web.container("app", APP, RUN_FOREVER));

    let old = node.run_pod(&Pod::new("old", "batch"));
    layout.insert("old pod's sandbox", old.sandbox_id.clone());
    layout.insert(
        "old pod's istio-init",
        old.run_to_exit(&init("istio-init", APP)),
    );
    let task = old.container("app", JOB, EXIT_0);
    old.wait_exited(&task);
    layout.insert("old pod's app", task);
    old.stop();
    Node { layout, web, old }
}

/// Every container id (sandboxes too) and image id Docker lists now.
async fn existing(node: &PrivateCriDockerd) -> BTreeSet<String> {
    let docker = node.docker();
    let containers = docker
        .list_containers(Some(
            ListContainersOptionsBuilder::default().all(true).build(),
        ))
        .await
        .unwrap();
    let images = docker
        .list_images(Some(ListImagesOptionsBuilder::default().all(true).build()))
        .await
        .unwrap();
    containers
        .into_iter()
        .filter_map(|c| c.id)
        .chain(images.into_iter().map(|i| i.id))
        .collect()
}

/// The pods cri-dockerd lists (`ListPodSandbox`): sandbox id → state.
fn pods(node: &PrivateCriDockerd) -> BTreeMap<String, PodSandboxState> {
    node.ctl()
        .pods()
        .into_iter()
        .map(|p| {
            let state = p.state();
            (p.id, state)
        })
        .collect()
}

/// The containers cri-dockerd lists (`ListContainers`), of any state.
fn cri_containers(node: &PrivateCriDockerd) -> BTreeSet<String> {
    node.ctl().container_ids()
}

async fn b_a_run_removes_what_the_plan_said_and_cri_dockerd_still_answers(combo: Combo) {
    let node = PrivateCriDockerd::start(combo).await.required();
    let what = combo.name();
    let Node { layout, web, old } = lay_out(&node).await;
    let cli = Cli::new(&Runtime::Docker(node.endpoint()), AT_ONCE);
    let before = existing(&node).await;

    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    assert_eq!(plan["runtime"], "docker");
    layout.assert_decisions(&plan, DELETED);
    let rule = |role: &str| decision(&plan, layout.id(role))["rule"].clone();
    assert_eq!(rule("live pod's istio-init"), "protected_label", "{what}");
    assert_eq!(rule("old pod's istio-init"), "protected_label", "{what}");
    assert_eq!(rule("live pod's setup"), "live_pod_sandbox", "{what}");
    assert_eq!(rule("live pod's app"), "running", "{what}");
    assert_eq!(rule("live pod's sandbox"), "running", "{what}");
    assert_eq!(rule("old pod's sandbox"), "pod_sandbox", "{what}");
    assert_eq!(rule("app image"), "in_use", "{what}");
    // Both sandboxes were made from it, the stopped one too.
    assert_eq!(rule("pause image"), "in_use", "{what}");
    assert_eq!(existing(&node).await, before, "plan removed something");

    run_removes_what_the_plan_said(&node, &cli, &layout, (&web, &old)).await;
    assert_eq!(
        node.ctl().sandbox_status(&web.sandbox_id).state(),
        PodSandboxState::SandboxReady
    );
    let left: BTreeSet<String> = [
        "live pod's istio-init",
        "live pod's setup",
        "live pod's app",
        "old pod's istio-init",
    ]
    .map(|role| layout.id(role).to_owned())
    .into();
    assert_eq!(cri_containers(&node), left, "{what}");
    for id in &left {
        node.ctl().container_status(id);
    }

    // A run again finds nothing more to do.
    let (code, again) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{again}");
    assert!(again["outcomes"].as_array().unwrap().is_empty(), "{again}");
}

async fn c_docker_system_prune_takes_the_live_pods_istio_init(combo: Combo) {
    let node = PrivateCriDockerd::start(combo).await.required();
    let what = combo.name();
    let Node { layout, web, old } = lay_out(&node).await;
    let out = node
        .cli()
        .args(["system", "prune", "-a", "-f"])
        .output()
        .expect("docker CLI runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = existing(&node).await;
    for role in [
        "live pod's istio-init",
        "live pod's setup",
        "old pod's sandbox",
    ] {
        assert!(!after.contains(layout.id(role)), "{role} kept: {what}");
    }
    assert!(after.contains(layout.id("live pod's app")));
    // kubelet sees no finished init container of the live pod any more.
    assert_eq!(
        cri_containers(&node),
        BTreeSet::from([layout.id("live pod's app").to_owned()]),
        "{what}"
    );
    // The finished pod's sandbox went behind cri-dockerd's back: it lists
    // the live pod alone, and its checkpoint makes kubelet's status call
    // on the other fail until kubelet's GC removes it.
    assert_eq!(
        pods(&node),
        BTreeMap::from([(web.sandbox_id.clone(), PodSandboxState::SandboxReady)]),
        "{what}"
    );
    let refused = node
        .ctl()
        .try_sandbox_status(&old.sandbox_id)
        .expect_err("the status of a sandbox pruned behind cri-dockerd");
    assert!(refused.contains("No such container"), "{what}: {refused}");
    assert_eq!(
        node.ctl().sandbox_status(&web.sandbox_id).state(),
        PodSandboxState::SandboxReady
    );
}

/// `runtime.kind: cri` at cri-dockerd's socket: safeprune through CRI
/// alone, as on CRI-O, on a runtime it was not written against. The same
/// node decides the same way (sandboxes are kubelet's and never decided),
/// `run` removes what the plan said, and cri-dockerd still answers.
async fn d_through_cri_alone_at_cri_dockerds_socket(combo: Combo) {
    let node = PrivateCriDockerd::start(combo).await.required();
    let what = combo.name();
    let Node {
        mut layout,
        web,
        old,
    } = lay_out(&node).await;
    let cli = Cli::new(&Runtime::Cri(node.cri_endpoint()), AT_ONCE);
    let before = existing(&node).await;

    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    assert_eq!(plan["runtime"], "cri");
    assert!(
        plan["runtime_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("runtime.kind: cri, docker ")),
        "{what}: {}",
        plan["runtime_reason"]
    );
    // Sandboxes are no containers to CRI: the layout's others are decided
    // as through Docker, and the sandboxes stand, ready or not (below).
    layout.ids.retain(|role, _| !role.ends_with("sandbox"));
    layout.assert_decisions(&plan, DELETED);
    let rule = |role: &str| decision(&plan, layout.id(role))["rule"].clone();
    assert_eq!(rule("live pod's istio-init"), "protected_label", "{what}");
    assert_eq!(rule("old pod's istio-init"), "protected_label", "{what}");
    assert_eq!(rule("live pod's setup"), "live_pod_sandbox", "{what}");
    assert_eq!(rule("live pod's app"), "running", "{what}");
    assert_eq!(rule("app image"), "in_use", "{what}");
    assert_eq!(rule("pause image"), "keep_pattern", "{what}");
    for sandbox in [&web.sandbox_id, &old.sandbox_id] {
        assert!(
            plan["decisions"]
                .as_array()
                .unwrap()
                .iter()
                .all(|d| &d["id"] != sandbox),
            "{sandbox} was decided on: {what}"
        );
    }
    assert_eq!(existing(&node).await, before, "plan removed something");

    run_removes_what_the_plan_said(&node, &cli, &layout, (&web, &old)).await;
}

/// `safeprune run` on `cli` removes exactly `DELETED` of `layout`, and
/// what kubelet asks next cri-dockerd answers: both pods listed, the live
/// one still ready, each inspectable.
async fn run_removes_what_the_plan_said(
    node: &PrivateCriDockerd,
    cli: &Cli,
    layout: &Layout,
    (web, old): (&CriPod<'_>, &CriPod<'_>),
) {
    let what = node.combo().name();
    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    layout.assert_deleted(&report, DELETED);
    let after = existing(node).await;
    layout.assert_left(|id| after.contains(id), DELETED);
    assert_eq!(
        pods(node),
        BTreeMap::from([
            (web.sandbox_id.clone(), PodSandboxState::SandboxReady),
            (old.sandbox_id.clone(), PodSandboxState::SandboxNotready),
        ]),
        "{what}"
    );
    for sandbox in [&web.sandbox_id, &old.sandbox_id] {
        node.ctl().sandbox_status(sandbox);
    }
}
