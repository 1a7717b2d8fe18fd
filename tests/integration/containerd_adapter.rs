//! The containerd adapter against a real containerd with its CRI plugin:
//! what `inventory` reads through containerd's API and CRI, what `recheck`
//! answers, what `remove` does (through CRI for kubelet's containers) and
//! what it refuses.
//!
//! Each test starts its own private containerd (see `util::containerd`),
//! with pods made through CRI as kubelet makes them, so tests run in
//! parallel and touch only what they made; each runs on containerd 1.6.20
//! and on 2.3.4 (`containerd_tests!`).

use crate::util;

use std::collections::BTreeMap;

use chrono::{Duration, Utc};
use k8s_cri::v1::ListImagesRequest;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use safeprune::inventory::Kind;
use safeprune::inventory::{ContainerState, Image, Inventory};
use safeprune::plan::{self, Rule};
use safeprune::policy::Policy;
use safeprune::runtime::containerd::ContainerdRuntime;
use safeprune::runtime::{Engine, Removal, RuntimeError};
use util::RUN_FOREVER;
use util::Required;
use util::containerd::{
    CRI_NAMESPACE, ContainerdVersion, Imported, PrivateContainerd, SANDBOX_IMAGE, containerd_tests,
};
use util::node::{container, ready_sandbox_ids};
use util::pod::Pod;

const OTHER: &str = "other";
const BUSYBOX: &str = "docker.io/library/busybox:1.36";
const UNUSED: &str = "docker.io/library/unused:1";
const TOOL: &str = "docker.io/library/tool:1";

containerd_tests! {
    inventory_reads_pods_through_cri_and_plain_containers_natively,
    inventory_folds_every_name_of_an_image_and_pins_the_sandbox_image,
    the_planner_reads_the_inventory_as_kubelet_would,
    recheck_answers_fresh_for_one_container_and_one_image,
    a_cri_container_is_removed_through_cri,
    a_plain_container_loses_its_stopped_task_first,
    what_is_live_used_or_kubelets_own_is_refused,
    an_unused_image_loses_every_name_and_its_content,
    without_cri_the_inventory_falls_back_and_cri_containers_stay,
    connect_skips_dockers_namespace,
    after_an_inventory_rechecks_follow_events_and_list_again_once_they_break,
    rechecks_read_again_only_the_containers_an_event_named,
    the_image_file_system_is_the_one_cri_names,
}

/// A private containerd of `version` and the adapter connected to it;
/// `None` (printed: skipped) when that release is not on this machine.
async fn engine(version: ContainerdVersion) -> (PrivateContainerd, ContainerdRuntime) {
    let containerd = PrivateContainerd::start_version(version).await.required();
    let runtime = connect(&containerd).await;
    (containerd, runtime)
}

async fn connect(containerd: &PrivateContainerd) -> ContainerdRuntime {
    let namespaces = [CRI_NAMESPACE.to_owned(), OTHER.to_owned()];
    ContainerdRuntime::connect(&containerd.endpoint(), &namespaces)
        .await
        .expect("connect to the private containerd")
}

fn image<'a>(inventory: &'a Inventory, id: &str) -> &'a Image {
    inventory
        .images
        .iter()
        .find(|i| i.id == id)
        .unwrap_or_else(|| panic!("image {id} in {:#?}", inventory.images))
}

fn cri_id(id: &str) -> String {
    format!("{CRI_NAMESPACE}/{id}")
}

fn other_id(id: &str) -> String {
    format!("{OTHER}/{id}")
}

/// A node laid out as kubelet and `ctr` would leave it.
struct Node {
    busybox: Imported,
    unused: Imported,
    tool: Imported,
    web: Pod,
    web_sandbox: String,
    istio_init: String,
    app: String,
    gone_sandbox: String,
    gone_job: String,
}

/// - `k8s.io`: pod `default/web`, READY, with an exited `istio-init` and a
///   running `app`; pod `jobs/gone`, stopped, with an exited `job`; images
///   busybox (used), unused (tagged twice), and the sandbox image.
/// - `other`: `runner` (running task), `quick` (stopped task), `never`
///   (no task), all from image tool.
async fn lay_out(containerd: &PrivateContainerd) -> Node {
    let busybox = containerd.import_busybox_image(CRI_NAMESPACE, BUSYBOX);
    let unused = containerd.import_busybox_image(CRI_NAMESPACE, UNUSED);
    containerd.tag_image(CRI_NAMESPACE, UNUSED, "docker.io/library/unused:also");

    let web = Pod::new("web", "default");
    let web_sandbox = containerd.run_pod_sandbox(&web).await;
    let istio_init = containerd
        .run_pod_container_to_exit(&web, &web_sandbox, "istio-init", BUSYBOX, &[])
        .await;
    let app = containerd
        .run_pod_container(&web, &web_sandbox, "app", "busybox:1.36", &[])
        .await;

    let gone = Pod::new("gone", "jobs");
    let (gone_sandbox, gone_job) = containerd.run_stopped_pod(&gone, "job", BUSYBOX).await;

    let tool = containerd.import_busybox_image(OTHER, TOOL);
    containerd.run_native(OTHER, "runner", TOOL, RUN_FOREVER);
    // 100 KiB in its writable layer.
    let write_and_exit = "busybox dd if=/dev/zero of=/blob bs=1024 count=100 2>/dev/null; exit 3";
    containerd.run_native(OTHER, "quick", TOOL, &["sh", "-c", write_and_exit]);
    containerd.create_native(OTHER, "never", TOOL);
    containerd.wait_task_stopped(OTHER, "quick").await;
    Node {
        busybox,
        unused,
        tool,
        web,
        web_sandbox,
        istio_init,
        app,
        gone_sandbox,
        gone_job,
    }
}

async fn inventory_reads_pods_through_cri_and_plain_containers_natively(
    version: ContainerdVersion,
) {
    let (containerd, runtime) = engine(version).await;
    let node = lay_out(&containerd).await;
    let mut inventory = runtime.inventory().await.expect("inventory");
    let now = Utc::now();
    assert!(
        inventory.containers.iter().all(|c| c.size.is_none()),
        "the inventory measures no snapshot: a kept container's size is left unknown"
    );
    // What a plan removes is measured, and only that.
    let (quick_id, init_id, runner_id) = (
        other_id("quick"),
        cri_id(&node.istio_init),
        other_id("runner"),
    );
    runtime
        .measure_containers(&mut inventory, &[&quick_id, &init_id, &runner_id])
        .await;
    assert_eq!(
        container(&inventory, &other_id("never")).size,
        None,
        "not asked for"
    );
    assert_eq!(inventory.runtime, "containerd");
    assert_eq!(
        runtime.kind(),
        safeprune::inventory::RuntimeKind::Containerd
    );
    assert!(inventory.volumes.is_empty() && inventory.networks.is_empty());
    assert!(inventory.build_cache.is_empty());

    let sandbox = container(&inventory, &cri_id(&node.web_sandbox));
    assert_eq!(sandbox.state, ContainerState::Running);
    assert_eq!(sandbox.names, ["web_default_uid-default-web_0"]);
    assert_eq!(sandbox.image_ref, SANDBOX_IMAGE);
    assert_eq!(sandbox.pod, Some(node.web.sandbox_identity()));

    let init = container(&inventory, &cri_id(&node.istio_init));
    assert_eq!(init.state, ContainerState::Exited);
    assert_eq!(init.names, ["istio-init_web_default_uid-default-web_0"]);
    assert_eq!(init.labels["io.kubernetes.container.name"], "istio-init");
    assert_eq!(init.labels["io.cri-containerd.kind"], "container");
    let finished = init.finished.expect("CRI gives the exit time");
    assert!(finished >= init.created && finished <= now, "{init:?}");
    assert!(now - finished < Duration::minutes(5));
    assert_eq!(
        init.pod,
        Some(node.web.container_identity(&cri_id(&node.web_sandbox)))
    );
    assert_eq!(init.image_ref, BUSYBOX);
    assert_eq!(init.image_id, cri_id(&node.busybox.digest));

    let app = container(&inventory, &cri_id(&node.app));
    assert_eq!(app.state, ContainerState::Running);
    assert_eq!(app.finished, None);
    // CRI stores the image by its full name, whatever kubelet asked for.
    assert_eq!(app.image_ref, BUSYBOX);

    let job = container(&inventory, &cri_id(&node.gone_job));
    assert_eq!(job.state, ContainerState::Exited);
    assert_eq!(
        job.pod.as_ref().unwrap().sandbox_id,
        Some(cri_id(&node.gone_sandbox))
    );
    let ready: Vec<(String, bool)> = inventory
        .sandboxes
        .iter()
        .map(|s| (s.id.clone(), s.ready))
        .collect();
    let mut expected = vec![
        (cri_id(&node.web_sandbox), true),
        (cri_id(&node.gone_sandbox), false),
    ];
    expected.sort();
    assert_eq!(ready, expected);
    node.web
        .assert_owns(inventory.sandboxes.iter().find(|s| s.ready).unwrap());

    let runner = container(&inventory, &other_id("runner"));
    assert_eq!(runner.state, ContainerState::Running);
    assert_eq!(runner.names, ["runner"]);
    assert_eq!(runner.pod, None);
    assert_eq!(runner.image_id, other_id(&node.tool.digest));
    let quick = container(&inventory, &other_id("quick"));
    assert_eq!(quick.state, ContainerState::Exited);
    assert!(
        quick
            .finished
            .is_some_and(|f| f >= quick.created && f <= now)
    );
    let written = quick
        .size
        .expect("a stopped container's writable layer is measured");
    assert!((100 * 1024..200 * 1024).contains(&written), "{written}");
    assert_eq!(runner.size, None, "a running container is not measured");
    assert!(
        init.size.is_some(),
        "an exited CRI container is measured too"
    );
    let never = container(&inventory, &other_id("never"));
    assert_eq!(never.state, ContainerState::Created);
    assert_eq!(never.finished, None);
    assert_eq!(inventory.containers.len(), 8, "{:#?}", inventory.containers);
}

async fn inventory_folds_every_name_of_an_image_and_pins_the_sandbox_image(
    version: ContainerdVersion,
) {
    let (containerd, runtime) = engine(version).await;
    let node = lay_out(&containerd).await;
    // CRI adds its own `sha256:<config>` record beside each named one.
    let names = containerd.image_names(CRI_NAMESPACE);
    assert!(
        names.iter().filter(|n| n.starts_with("sha256:")).count() >= 3,
        "{names:?}"
    );
    let inventory = runtime.inventory().await.expect("inventory");

    let busybox = image(&inventory, &cri_id(&node.busybox.digest));
    assert_eq!(busybox.tags, [BUSYBOX]);
    assert_eq!(
        busybox.digests,
        [format!("docker.io/library/busybox@{}", node.busybox.digest)]
    );
    assert_eq!(busybox.size, Some(node.busybox.content_bytes));
    assert!(!busybox.pinned);
    let imported = busybox.created.expect("created");
    assert!(Utc::now() - imported < Duration::minutes(5));
    assert!(busybox.last_tagged >= busybox.created);

    let unused = image(&inventory, &cri_id(&node.unused.digest));
    assert_eq!(
        unused.tags,
        [
            "docker.io/library/unused:1",
            "docker.io/library/unused:also"
        ]
    );
    // The tag came after the import.
    assert!(unused.last_tagged > unused.created, "{unused:?}");
    assert!(!unused.pinned);

    let pause: Vec<&Image> = inventory
        .images
        .iter()
        .filter(|i| i.tags.iter().any(|t| t == SANDBOX_IMAGE))
        .collect();
    assert_eq!(pause.len(), 1);
    assert!(pause[0].pinned, "the sandbox image CRI names is pinned");
    assert_eq!(
        inventory
            .images
            .iter()
            .filter(|i| i.id.starts_with("k8s.io/"))
            .count(),
        3,
        "one image per target: {:#?}",
        inventory.images
    );

    let tool = image(&inventory, &other_id(&node.tool.digest));
    assert_eq!(tool.tags, [TOOL]);
    assert_eq!(tool.size, Some(node.tool.content_bytes));
    assert_eq!(inventory.images.len(), 4);

    // The fixtures share one busybox layer, in both namespaces: removing
    // one image alone frees its manifest and config, a few hundred bytes.
    assert_eq!(node.busybox.layer_digest, node.tool.layer_digest);
    for i in [busybox, unused, tool] {
        let (size, unique) = (i.size.unwrap(), i.unique_size.unwrap());
        assert!(unique > 0 && unique < 4096 && unique < size, "{i:?}");
    }
}

async fn the_planner_reads_the_inventory_as_kubelet_would(version: ContainerdVersion) {
    let (containerd, runtime) = engine(version).await;
    let node = lay_out(&containerd).await;
    // kubelet may name the image by its id, as PullImage answered it.
    let by_id = containerd.import_busybox_image(CRI_NAMESPACE, "docker.io/library/by-id:1");
    let setup = containerd
        .run_pod_container_to_exit(
            &node.web,
            &node.web_sandbox,
            "setup",
            &by_id.config_digest,
            &[],
        )
        .await;
    let inventory = runtime.inventory().await.expect("inventory");
    assert_eq!(
        container(&inventory, &cri_id(&setup)).image_id,
        cri_id(&by_id.digest),
        "any name of the image finds it"
    );
    let policy = Policy::from_yaml(
        // The images are imported: no registry can give them back.
        "containers: { min_age: 0s }\nimages: { min_age: 0s, keep: [], keep_unpullable: false }\n",
        "test",
    )
    .expect("policy");
    let plan = plan::plan(&inventory, &policy, Utc::now());
    let rule = |kind: Kind, id: &str| {
        plan.decisions
            .iter()
            .find(|d| d.kind == kind && d.id == id)
            .unwrap_or_else(|| panic!("{kind} {id} decided"))
            .rule
    };
    let container = |id: &str| rule(Kind::Container, id);
    assert_eq!(container(&cri_id(&node.istio_init)), Rule::ProtectedLabel);
    assert_eq!(container(&cri_id(&node.app)), Rule::Running);
    assert_eq!(container(&cri_id(&node.web_sandbox)), Rule::Running);
    assert_eq!(container(&cri_id(&node.gone_sandbox)), Rule::PodSandbox);
    assert_eq!(container(&cri_id(&node.gone_job)), Rule::Eligible);
    assert_eq!(container(&other_id("runner")), Rule::Running);
    assert_eq!(container(&other_id("quick")), Rule::Eligible);
    assert_eq!(container(&cri_id(&setup)), Rule::LivePodSandbox);
    // Kept containers hold their images, by id within the namespace.
    assert_eq!(
        rule(Kind::Image, &cri_id(&node.busybox.digest)),
        Rule::InUse
    );
    assert_eq!(rule(Kind::Image, &other_id(&node.tool.digest)), Rule::InUse);
    assert_eq!(
        rule(Kind::Image, &cri_id(&node.unused.digest)),
        Rule::Eligible
    );
    assert_eq!(rule(Kind::Image, &cri_id(&by_id.digest)), Rule::InUse);
    let pause = inventory
        .images
        .iter()
        .find(|i| i.tags.iter().any(|t| t == SANDBOX_IMAGE))
        .unwrap();
    // The READY sandbox uses it; the pin holds it once no sandbox does.
    assert_eq!(rule(Kind::Image, &pause.id), Rule::InUse);
    let fresh = runtime
        .recheck(Kind::Image, &[pause.id.as_str()])
        .await
        .expect("recheck");
    assert!(fresh.images[0].pinned);
}

async fn recheck_answers_fresh_for_one_container_and_one_image(version: ContainerdVersion) {
    let (containerd, runtime) = engine(version).await;
    let node = lay_out(&containerd).await;

    let fresh = runtime
        .recheck(Kind::Container, &[cri_id(&node.istio_init).as_str()])
        .await
        .expect("recheck container");
    assert_eq!(fresh.containers.len(), 1);
    let init = &fresh.containers[0];
    assert_eq!(init.id, cri_id(&node.istio_init));
    assert_eq!(init.state, ContainerState::Exited);
    assert!(init.finished.is_some());
    assert_eq!(
        init.pod.as_ref().unwrap().sandbox_id,
        Some(cri_id(&node.web_sandbox))
    );
    assert_eq!(fresh.sandboxes.len(), 2);
    assert!(fresh.images.is_empty());

    let fresh = runtime
        .recheck(Kind::Container, &[other_id("quick").as_str()])
        .await
        .expect("recheck native container");
    assert_eq!(fresh.containers[0].state, ContainerState::Exited);

    let fresh = runtime
        .recheck(Kind::Image, &[cri_id(&node.busybox.digest).as_str()])
        .await
        .expect("recheck image");
    assert_eq!(fresh.images.len(), 1);
    assert_eq!(fresh.images[0].tags, [BUSYBOX]);
    // Every container of every namespace: at that stage all count as kept.
    assert_eq!(fresh.containers.len(), 8);
    assert!(
        fresh
            .containers
            .iter()
            .any(|c| c.image_id == cri_id(&node.busybox.digest))
    );

    let missing = runtime
        .recheck(Kind::Container, &[cri_id("no-such-container").as_str()])
        .await
        .expect("recheck of a missing container");
    assert!(missing.containers.is_empty());
    assert!(
        runtime
            .recheck(Kind::Container, &["moby/abc"])
            .await
            .is_err(),
        "Docker's namespace is never looked at"
    );
}

async fn a_cri_container_is_removed_through_cri(version: ContainerdVersion) {
    let (containerd, runtime) = engine(version).await;
    let node = lay_out(&containerd).await;
    let id = cri_id(&node.gone_job);
    assert!(
        containerd
            .cri_container_ids()
            .await
            .contains(&node.gone_job)
    );

    assert_eq!(
        util::remove(&runtime, Kind::Container, &id).await,
        Removal::Removed
    );

    // Had it gone natively, CRI (and kubelet) would still list it.
    let listed = containerd.cri_container_ids().await;
    assert!(!listed.contains(&node.gone_job), "CRI still lists it");
    assert!(
        !containerd
            .container_ids(CRI_NAMESPACE)
            .contains(&node.gone_job),
        "the native view still has it"
    );
    // The live pod's init container is untouched.
    assert!(listed.contains(&node.istio_init));
    let fresh = runtime
        .recheck(Kind::Container, &[id.as_str()])
        .await
        .expect("recheck");
    assert!(fresh.containers.is_empty(), "{:?}", fresh.containers);
    assert_eq!(
        util::remove(&runtime, Kind::Container, &id).await,
        Removal::Gone
    );
}

async fn a_plain_container_loses_its_stopped_task_first(version: ContainerdVersion) {
    let (containerd, runtime) = engine(version).await;
    lay_out(&containerd).await;
    assert_eq!(
        util::remove(&runtime, Kind::Container, &other_id("quick")).await,
        Removal::Removed
    );
    assert_eq!(
        util::remove(&runtime, Kind::Container, &other_id("never")).await,
        Removal::Removed
    );
    assert_eq!(containerd.container_ids(OTHER), ["runner"]);
    let tasks = containerd.ctr_ok(OTHER, &["tasks", "ls", "-q"]);
    assert_eq!(
        tasks.lines().collect::<Vec<_>>(),
        ["runner"],
        "no orphaned task"
    );
    // Their writable snapshots go with the garbage collection that settles
    // the removals.
    runtime.settle(Kind::Container).await;
    let snapshots = containerd.ctr_ok(OTHER, &["snapshots", "ls"]);
    assert!(!snapshots.contains("quick") && !snapshots.contains("never"));
    assert!(snapshots.contains("runner"), "{snapshots}");
}

async fn what_is_live_used_or_kubelets_own_is_refused(version: ContainerdVersion) {
    let (containerd, runtime) = engine(version).await;
    let node = lay_out(&containerd).await;

    let refused = |removal: Removal, what: &str| match removal {
        Removal::InUse(msg) => msg,
        other => panic!("{what}: expected a conflict, got {other:?}"),
    };
    let msg = refused(
        util::remove(&runtime, Kind::Container, &cri_id(&node.app)).await,
        "running CRI container",
    );
    assert!(msg.contains("running"), "{msg}");
    let msg = refused(
        util::remove(&runtime, Kind::Container, &cri_id(&node.gone_sandbox)).await,
        "sandbox",
    );
    assert!(msg.contains("sandbox"), "{msg}");
    let msg = refused(
        util::remove(&runtime, Kind::Container, &other_id("runner")).await,
        "running task",
    );
    assert!(msg.contains("live task"), "{msg}");
    let msg = refused(
        util::remove(&runtime, Kind::Image, &cri_id(&node.busybox.digest)).await,
        "image in use",
    );
    assert!(
        msg.contains(&cri_id(&node.app)) || msg.contains("used by"),
        "{msg}"
    );
    refused(
        util::remove(&runtime, Kind::Image, &other_id(&node.tool.digest)).await,
        "image of a plain container",
    );

    let listed = containerd.cri_container_ids().await;
    assert!(listed.contains(&node.app));
    assert!(
        containerd
            .container_ids(CRI_NAMESPACE)
            .contains(&node.gone_sandbox)
    );
    assert!(
        containerd
            .container_ids(OTHER)
            .contains(&"runner".to_owned())
    );
    let runner_task = containerd.ctr_ok(OTHER, &["tasks", "ls"]);
    assert!(runner_task.contains("RUNNING"), "{runner_task}");
    assert!(
        containerd
            .image_names(CRI_NAMESPACE)
            .contains(&BUSYBOX.to_owned())
    );
    assert!(containerd.image_names(OTHER).contains(&TOOL.to_owned()));

    assert_eq!(
        util::remove(&runtime, Kind::Container, &cri_id("no-such-container")).await,
        Removal::Gone
    );
    assert_eq!(
        util::remove(&runtime, Kind::Image, &cri_id("sha256:0000000000000000")).await,
        Removal::Gone
    );
    for kind in [Kind::Volume, Kind::Network, Kind::BuildCache] {
        match runtime
            .remove(&safeprune::runtime::Target::by_id(kind, "k8s.io/x"))
            .await
        {
            Removal::Failed(msg) => assert!(msg.contains("not applicable"), "{msg}"),
            other => panic!("{kind}: {other:?}"),
        }
    }
    assert!(matches!(
        util::remove(&runtime, Kind::Container, "moby/abc").await,
        Removal::Failed(_)
    ));
}

async fn an_unused_image_loses_every_name_and_its_content(version: ContainerdVersion) {
    let (containerd, runtime) = engine(version).await;
    let node = lay_out(&containerd).await;
    let id = cri_id(&node.unused.digest);
    assert_eq!(
        util::remove(&runtime, Kind::Image, &id).await,
        Removal::Removed
    );

    let names = containerd.image_names(CRI_NAMESPACE);
    assert!(
        !names.iter().any(|n| n.contains("unused")),
        "names left: {names:?}"
    );
    // The removals over, one garbage collection frees their content.
    runtime.settle(Kind::Image).await;
    let content = containerd.ctr_ok(CRI_NAMESPACE, &["content", "ls", "-q"]);
    assert!(
        !content.contains(&node.unused.digest),
        "its manifest is gone once the removals settle"
    );
    let leases = containerd.ctr_ok(CRI_NAMESPACE, &["leases", "ls", "-q"]);
    assert!(
        !leases.contains("safeprune"),
        "the lease that ran the collector is gone: {leases}"
    );
    // CRI learns of native image deletes from containerd's events.
    let mut images = ImageServiceClient::new(containerd.channel());
    let mut cri_sees_it = true;
    for _ in 0..100 {
        let listed = images
            .list_images(ListImagesRequest { filter: None })
            .await
            .expect("CRI list images")
            .into_inner()
            .images;
        cri_sees_it = listed
            .iter()
            .any(|i| i.repo_tags.iter().any(|t| t.contains("unused")));
        if !cri_sees_it {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!cri_sees_it, "CRI still lists the removed image");
    assert_eq!(
        util::remove(&runtime, Kind::Image, &id).await,
        Removal::Gone
    );
    // The others stay.
    assert!(names.contains(&BUSYBOX.to_owned()));
    assert!(names.contains(&SANDBOX_IMAGE.to_owned()));
}

async fn without_cri_the_inventory_falls_back_and_cri_containers_stay(version: ContainerdVersion) {
    let mut containerd = PrivateContainerd::start_version(version).await.required();
    let node = lay_out(&containerd).await;
    containerd.restart(false).await;
    let runtime = connect(&containerd).await;

    let inventory = runtime.inventory().await.expect("inventory without CRI");
    let init = container(&inventory, &cri_id(&node.istio_init));
    assert_eq!(
        init.pod.as_ref().unwrap().sandbox_id,
        Some(cri_id(&node.web_sandbox)),
        "the sandbox id from CRI's record on the container"
    );
    // Every task died with the old daemon.
    assert!(inventory.sandboxes.iter().all(|s| !s.ready));
    assert_eq!(inventory.sandboxes.len(), 2);
    let pause = inventory
        .images
        .iter()
        .find(|i| i.tags.iter().any(|t| t == SANDBOX_IMAGE))
        .unwrap();
    assert!(pause.pinned, "the sandboxes' image stays pinned");

    match util::remove(&runtime, Kind::Container, &cri_id(&node.istio_init)).await {
        Removal::Failed(msg) => assert!(msg.contains("only through CRI"), "{msg}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    assert!(
        containerd
            .container_ids(CRI_NAMESPACE)
            .contains(&node.istio_init)
    );
}

/// Needs no engine of its own: once, not per release.
#[tokio::test]
async fn connect_refuses_what_is_not_containerd() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing.sock");
    match ContainerdRuntime::connect(&missing.to_string_lossy(), &[]).await {
        Err(RuntimeError::Unreachable { hint, .. }) => {
            assert!(hint.contains("containerd running"), "{hint}");
        }
        other => panic!("expected unreachable, got {:?}", other.err()),
    }
    // A socket that accepts and hangs up: not containerd.
    let silent = dir.path().join("silent.sock");
    let listener = tokio::net::UnixListener::bind(&silent).expect("bind");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    let err = ContainerdRuntime::connect(&format!("unix://{}", silent.display()), &[])
        .await
        .err()
        .expect("a silent socket is refused");
    assert!(matches!(err, RuntimeError::Unreachable { .. }), "{err}");
    assert!(matches!(
        ContainerdRuntime::connect("tcp://127.0.0.1:1", &[]).await,
        Err(RuntimeError::Unreachable { .. })
    ));
}

async fn connect_skips_dockers_namespace(version: ContainerdVersion) {
    let containerd = PrivateContainerd::start_version(version).await.required();
    let namespaces = ["moby", CRI_NAMESPACE, "moby"].map(str::to_owned);
    let runtime = ContainerdRuntime::connect(&containerd.endpoint(), &namespaces)
        .await
        .expect("connect");
    assert_eq!(runtime.namespaces(), [CRI_NAMESPACE]);
}

async fn after_an_inventory_rechecks_follow_events_and_list_again_once_they_break(
    version: ContainerdVersion,
) {
    let (mut containerd, runtime) = engine(version).await;
    let node = lay_out(&containerd).await;
    let unused = cri_id(&node.unused.digest);
    runtime.inventory().await.expect("inventory");
    assert!(runtime.follows_events().await);
    let listed = |calls: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
        calls
            .iter()
            .filter(|(method, _)| {
                method
                    .rsplit('/')
                    .next()
                    .is_some_and(|m| m.starts_with("List"))
            })
            .map(|(m, n)| (m.clone(), *n))
            .collect()
    };
    let lists_after_inventory = listed(&containerd.grpc_calls());

    // Only the batch's pod: the web pod's sandbox, not every sandbox.
    let fresh = runtime
        .recheck(Kind::Container, &[cri_id(&node.istio_init).as_str()])
        .await
        .expect("recheck container");
    assert_eq!(fresh.containers.len(), 1);
    let sandboxes: Vec<(&str, bool)> = fresh
        .sandboxes
        .iter()
        .map(|s| (s.id.as_str(), s.ready))
        .collect();
    assert_eq!(sandboxes, [(cri_id(&node.web_sandbox).as_str(), true)]);

    // Made after the inventory: a second sandbox of the stopped pod (kubelet
    // bringing it back), a new name for the unused image, and a plain
    // container made from the unused image by that name.
    let mut back = Pod::new("gone", "jobs");
    back.attempt = 1;
    let back_sandbox = containerd.run_pod_sandbox(&back).await;
    containerd.tag_image(CRI_NAMESPACE, UNUSED, "docker.io/library/unused:late");
    let fresh = runtime
        .recheck(Kind::Image, &[unused.as_str()])
        .await
        .expect("recheck image");
    assert_eq!(
        fresh.images[0].tags,
        [
            "docker.io/library/unused:1",
            "docker.io/library/unused:also",
            "docker.io/library/unused:late"
        ]
    );
    assert!(fresh.containers.is_empty(), "{:?}", fresh.containers);
    containerd.create_native(CRI_NAMESPACE, "late-user", "docker.io/library/unused:late");
    let fresh = runtime
        .recheck(Kind::Image, &[unused.as_str()])
        .await
        .expect("recheck image");
    let users: Vec<&str> = fresh.containers.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(users, [cri_id("late-user")], "only the image's users");
    assert!(matches!(
        util::remove(&runtime, Kind::Image, &unused).await,
        Removal::InUse(why) if why.contains("late-user")
    ));

    let fresh = runtime
        .recheck(Kind::Container, &[cri_id(&node.gone_job).as_str()])
        .await
        .expect("recheck container");
    let ready = ready_sandbox_ids(&fresh);
    assert_eq!(
        ready,
        [cri_id(&back_sandbox)],
        "the pod's new sandbox is seen"
    );
    let planned = plan::recheck(
        Kind::Container,
        &[cri_id(&node.gone_job).as_str()],
        &fresh,
        (&Policy::builtin(), &plan::Plan::default()),
        Utc::now(),
    );
    assert_eq!(
        planned[0].as_ref().map(|d| d.rule),
        Some(Rule::LivePodSandbox)
    );
    assert!(runtime.follows_events().await);
    assert_eq!(
        listed(&containerd.grpc_calls()),
        lists_after_inventory,
        "no re-check or removal lists anything: their cost does not grow with the node"
    );

    // containerd restarts: the stream ends, and the next re-check lists
    // everything instead, with the same answer.
    containerd.restart(true).await;
    let fresh = runtime
        .recheck(Kind::Image, &[unused.as_str()])
        .await
        .expect("recheck image after a restart");
    assert!(!runtime.follows_events().await);
    assert!(fresh.containers.iter().any(|c| c.id == cri_id("late-user")));
}

/// Changes a task of the layout's plain containers, as its test needs, and
/// gives the states of "quick" and "runner" after it. On 1.6.20 the stopped
/// task of "quick" is deleted (it now looks never run). 2.3.4 does not
/// always publish `/tasks/delete` for a plain container's task (measured:
/// 28 to 36 of 40 `ctr tasks delete`, where 1.6.20 published 40 of 40;
/// docs/engines.md, "containerd 2.x"), so no watch can be held to see that
/// there: "runner" is stopped instead, whose `/tasks/exit` 2.3.4 published
/// every time (40 of 40), a moment after `ctr` returns.
fn change_a_task(
    containerd: &PrivateContainerd,
    version: ContainerdVersion,
) -> (ContainerState, ContainerState) {
    match version {
        ContainerdVersion::V1_6 => {
            containerd.ctr_ok(OTHER, &["tasks", "delete", "quick"]);
            (ContainerState::Created, ContainerState::Running)
        }
        ContainerdVersion::V2 => {
            containerd.ctr_ok(OTHER, &["tasks", "kill", "runner"]);
            (ContainerState::Exited, ContainerState::Exited)
        }
    }
}

/// After an inventory, a container that no event has named since is
/// re-checked as the inventory read it, without a call of its own; one
/// whose task or record an event named is read again, and only that.
async fn rechecks_read_again_only_the_containers_an_event_named(version: ContainerdVersion) {
    let (containerd, runtime) = engine(version).await;
    lay_out(&containerd).await;
    runtime.inventory().await.expect("inventory");
    let reads = || -> BTreeMap<String, u64> {
        containerd
            .grpc_calls()
            .into_iter()
            .filter(|(method, _)| {
                method.ends_with("Containers/Get") || method.ends_with("Tasks/Get")
            })
            .collect()
    };
    let ids = [other_id("never"), other_id("quick"), other_id("runner")];
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let recheck = async || {
        let fresh = runtime
            .recheck(Kind::Container, &ids)
            .await
            .expect("recheck");
        let states: Vec<(String, ContainerState)> = fresh
            .containers
            .iter()
            .map(|c| (c.id.clone(), c.state))
            .collect();
        (fresh, states)
    };
    let expected = |never, quick, runner| {
        [
            (other_id("never"), never),
            (other_id("quick"), quick),
            (other_id("runner"), runner),
        ]
    };

    let before = reads();
    let (fresh, states) = recheck().await;
    assert_eq!(
        states,
        expected(
            ContainerState::Created,
            ContainerState::Exited,
            ContainerState::Running
        )
    );
    assert!(
        container(&fresh, &other_id("quick")).finished.is_some(),
        "its exit time, from its task"
    );
    assert_eq!(reads(), before, "nothing read again that no event named");

    // After the inventory: a task changes, and "never" gets a label.
    let (quick, runner) = change_a_task(&containerd, version);
    let now = expected(ContainerState::Created, quick, runner);
    containerd.ctr_ok(OTHER, &["containers", "label", "never", "team=late"]);
    // (`ctr` reads what it changes: count from here.)
    let before = reads();
    // On 1.6.20 the first re-check has the change; on 2.3.4 it may come
    // a moment later. An event is read once, however many re-checks come
    // before it.
    let begun = std::time::Instant::now();
    let fresh = loop {
        let (fresh, states) = recheck().await;
        if states == now {
            break fresh;
        }
        assert!(
            version == ContainerdVersion::V2 && begun.elapsed().as_secs() < 10,
            "{states:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        container(&fresh, &other_id("never"))
            .labels
            .get("team")
            .map(String::as_str),
        Some("late")
    );
    let after = reads();
    let read_again = |method: &str| {
        let key = |calls: &BTreeMap<String, u64>| {
            calls
                .iter()
                .find(|(m, _)| m.ends_with(method))
                .map_or(0, |(_, n)| *n)
        };
        key(&after) - key(&before)
    };
    assert_eq!(
        (read_again("Tasks/Get"), read_again("Containers/Get")),
        (1, 1),
        "the changed task and the relabelled container, each once"
    );
}

async fn the_image_file_system_is_the_one_cri_names(version: ContainerdVersion) {
    let (containerd, runtime) = engine(version).await;
    // Measured only when asked (`images.disk`).
    assert_eq!(runtime.inventory().await.unwrap().image_fs, None);
    let runtime = runtime.measuring_image_fs();
    let fs = runtime
        .inventory()
        .await
        .unwrap()
        .image_fs
        .expect("measured");
    // CRI names its snapshotter's directory, under the engine's root.
    let root = containerd.path("root");
    assert!(
        fs.path.starts_with(&root.display().to_string()),
        "{} is not under {}",
        fs.path,
        root.display()
    );
    let (used, available) = util::df(std::path::Path::new(&fs.path));
    // The same file system: the same size (usage moves with the host).
    assert_eq!(fs.used_bytes + fs.available_bytes, used + available);
}
