//! safeprune end to end on a real, private containerd laid out like a
//! Kubernetes node (pods made through CRI as kubelet makes them) plus a
//! second namespace of plain containers: `plan` then `run` through the CLI
//! remove exactly what they should, kubelet's view (CRI) keeps the live
//! pod's init containers and loses the removed ones, a second run removes
//! nothing, and a pod that comes back or an image newly used between plan
//! and removal is skipped. Each test runs on containerd 1.6.20 and on 2.3.4
//! (`containerd_tests!`).

use crate::util;

use safeprune::execute::{Reason, RemovalResult};
use safeprune::runtime::containerd::ContainerdRuntime;
use util::containerd::{CRI_NAMESPACE, ContainerdVersion, PrivateContainerd, containerd_tests};
use util::node::{Cli, Layout, Runtime, decision, execute_plan, plan_now};
use util::pod::Pod;
use util::{RUN_FOREVER, Required};

const OTHER: &str = "other";
const BASE: &str = "docker.io/library/base:1";
const UNUSED: &str = "docker.io/library/unused:1";
const KEEP_ME: &str = "docker.io/library/keepme:1";
const TOOL: &str = "docker.io/library/tool:1";
const OTHER_UNUSED: &str = "docker.io/library/other-unused:1";

containerd_tests! {
    #[tokio::test(flavor = "multi_thread")]
    plan_then_run_removes_exactly_the_expected_objects_through_cri,
    #[tokio::test(flavor = "multi_thread")]
    a_pod_back_or_an_image_newly_used_after_planning_is_skipped,
    #[tokio::test(flavor = "multi_thread")]
    auto_falls_back_to_containerd_and_says_why,
}

/// Roles safeprune must delete; every other role must stay.
const DELETED: &[&str] = &[
    "gone-pod job",
    "other stopped task",
    "other never started",
    "image unused",
    "other image unused",
];

/// Builds the node: pods made through CRI in `k8s.io`, plain containers
/// and images in [`OTHER`]. Ids by role, as `<namespace>/<id>`.
async fn lay_out(containerd: &PrivateContainerd) -> Layout {
    let mut layout = Layout::default();
    let cri = |id: &str| format!("{CRI_NAMESPACE}/{id}");
    let other = |id: &str| format!("{OTHER}/{id}");
    let base = containerd.import_busybox_image(CRI_NAMESPACE, BASE);
    layout.insert("image base (in use)", cri(&base.digest));
    let unused = containerd.import_busybox_image(CRI_NAMESPACE, UNUSED);
    containerd.tag_image(CRI_NAMESPACE, UNUSED, "docker.io/library/unused:also");
    layout.insert("image unused", cri(&unused.digest));
    let keep = containerd.import_busybox_image(CRI_NAMESPACE, KEEP_ME);
    layout.insert("image keep pattern", cri(&keep.digest));

    // A live pod: sandbox READY, istio-init and another init container
    // exited, the app running.
    let web = Pod::new("web", "default");
    let web_sandbox = containerd.run_pod_sandbox(&web).await;
    layout.insert("web sandbox", cri(&web_sandbox));
    for (role, name) in [("web istio-init", "istio-init"), ("web init", "setup")] {
        let id = containerd
            .run_pod_container_to_exit(&web, &web_sandbox, name, BASE, &[])
            .await;
        layout.insert(role, cri(&id));
    }
    let app = containerd
        .run_pod_container(&web, &web_sandbox, "app", BASE, &[])
        .await;
    layout.insert("web app running", cri(&app));

    // A stopped pod with an exited container.
    let gone = Pod::new("gone", "jobs");
    let (gone_sandbox, job) = containerd.run_stopped_pod(&gone, "job", BASE).await;
    layout.insert("gone-pod sandbox", cri(&gone_sandbox));
    layout.insert("gone-pod job", cri(&job));

    // A second namespace of plain containers and images.
    let tool = containerd.import_busybox_image(OTHER, TOOL);
    layout.insert("other image in use", other(&tool.digest));
    let spare = containerd.import_busybox_image(OTHER, OTHER_UNUSED);
    layout.insert("other image unused", other(&spare.digest));
    containerd.run_native(OTHER, "runner", TOOL, RUN_FOREVER);
    layout.insert("other running", other("runner"));
    containerd.run_native(OTHER, "quick", TOOL, &["sh", "-c", "exit 0"]);
    containerd.wait_task_stopped(OTHER, "quick").await;
    layout.insert("other stopped task", other("quick"));
    containerd.create_native(OTHER, "never", TOOL);
    layout.insert("other never started", other("never"));
    layout
}

/// A policy for the private containerd and both namespaces: no age limits,
/// so the layout, made seconds ago, is decided by the other rules.
fn safeprune_on(containerd: &PrivateContainerd) -> Cli {
    Cli::new(
        &Runtime::Containerd(&containerd.endpoint(), &[CRI_NAMESPACE, OTHER]),
        "containers: { min_age: \"0\" }\n\
         images:\n  min_age: \"0\"\n  keep: [\"registry.k8s.io/pause:*\", \"keepme:*\"]\n",
    )
}

/// Container ids as kubelet sees them through CRI, as `<ns>/<id>`.
async fn cri_ids(containerd: &PrivateContainerd) -> Vec<String> {
    containerd
        .cri_container_ids()
        .await
        .into_iter()
        .map(|id| format!("{CRI_NAMESPACE}/{id}"))
        .collect()
}

/// Every container id in both namespaces, natively, as `<ns>/<id>`.
fn native_ids(containerd: &PrivateContainerd) -> Vec<String> {
    [CRI_NAMESPACE, OTHER]
        .iter()
        .flat_map(|ns| {
            containerd
                .container_ids(ns)
                .into_iter()
                .map(move |id| format!("{ns}/{id}"))
        })
        .collect()
}

async fn plan_then_run_removes_exactly_the_expected_objects_through_cri(
    version: ContainerdVersion,
) {
    let containerd = PrivateContainerd::start_version(version).await.required();
    let layout = lay_out(&containerd).await;
    let safeprune = safeprune_on(&containerd);
    let events = |calls: &std::collections::BTreeMap<String, u64>| {
        ["Subscribe", "Publish"].map(|m| {
            calls
                .get(&format!("containerd.services.events.v1.Events/{m}"))
                .copied()
                .unwrap_or(0)
        })
    };

    let before = events(&containerd.grpc_calls());
    let (code, report) = safeprune.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0));
    assert_eq!(
        events(&containerd.grpc_calls()),
        before,
        "plan removes nothing: it neither follows nor publishes events"
    );
    assert_eq!(report["runtime"], "containerd");
    assert!(
        report["runtime_reason"]
            .as_str()
            .unwrap()
            .contains("containerd")
    );
    layout.assert_decisions(&report, DELETED);
    let rule = |role: &str| decision(&report, layout.id(role))["rule"].clone();
    assert_eq!(rule("web istio-init"), "protected_label");
    assert_eq!(rule("web init"), "live_pod_sandbox");
    assert_eq!(rule("gone-pod sandbox"), "pod_sandbox");
    assert_eq!(rule("web app running"), "running");
    assert_eq!(rule("other running"), "running");
    assert_eq!(rule("image base (in use)"), "in_use");
    assert_eq!(rule("image keep pattern"), "keep_pattern");
    assert_eq!(rule("other image in use"), "in_use");
    for kind in ["volume", "network", "build_cache"] {
        assert!(report["summary"]["delete"][kind].is_null(), "{kind}");
    }

    let (code, report) = safeprune.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report:#}");
    layout.assert_deleted(&report, DELETED);
    let [subscribed, published] = events(&containerd.grpc_calls());
    assert_eq!(subscribed, before[0] + 1, "run follows the events once");
    assert!(published > before[1], "and publishes its barriers");

    // kubelet's view keeps the live pod's init containers and has lost the
    // removed one: no stale entry, and the native view agrees.
    let cri = cri_ids(&containerd).await;
    let native = native_ids(&containerd);
    for role in ["web istio-init", "web init", "web app running"] {
        assert!(cri.contains(&layout.ids[role]), "{role} gone from CRI");
        assert!(native.contains(&layout.ids[role]), "{role} gone natively");
    }
    for role in ["gone-pod job", "other stopped task", "other never started"] {
        assert!(!cri.contains(&layout.ids[role]), "{role} still in CRI");
        assert!(
            !native.contains(&layout.ids[role]),
            "{role} still there natively"
        );
    }
    assert!(native.contains(&layout.ids["other running"]));
    let images = containerd.image_names(CRI_NAMESPACE);
    assert!(
        !images
            .iter()
            .any(|n| n.starts_with("docker.io/library/unused:")),
        "{images:?}"
    );
    for name in [BASE, KEEP_ME, util::containerd::SANDBOX_IMAGE] {
        assert!(
            images.iter().any(|n| n == name),
            "{name} removed: {images:?}"
        );
    }
    let others = containerd.image_names(OTHER);
    assert!(others.iter().any(|n| n == TOOL) && !others.iter().any(|n| n == OTHER_UNUSED));

    // The same audit log and metrics as on Docker, without the kinds
    // containerd lacks.
    let audit = std::fs::read_to_string(safeprune.path("audit.jsonl")).unwrap();
    assert_eq!(audit.lines().count(), DELETED.len());
    assert!(
        audit
            .lines()
            .all(|l| l.contains("\"runtime\":\"containerd\"")),
        "{audit}"
    );
    let metrics = std::fs::read_to_string(safeprune.path("safeprune.prom")).unwrap();
    assert!(
        metrics.contains("safeprune_last_run_success 1"),
        "{metrics}"
    );
    assert!(!metrics.contains("kind=\"volume\""), "{metrics}");

    let (code, again) = safeprune.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0));
    assert!(
        again["outcomes"].as_array().unwrap().is_empty(),
        "{again:#}"
    );
}

async fn a_pod_back_or_an_image_newly_used_after_planning_is_skipped(version: ContainerdVersion) {
    let containerd = PrivateContainerd::start_version(version).await.required();
    let layout = lay_out(&containerd).await;
    let safeprune = safeprune_on(&containerd);
    let policy = safeprune.policy();
    let namespaces = [CRI_NAMESPACE.to_owned(), OTHER.to_owned()];
    let runtime = ContainerdRuntime::connect(&containerd.endpoint(), &namespaces)
        .await
        .unwrap();
    let planned = plan_now(&runtime, &policy).await;

    // Between plan and removal: the stopped pod comes back (kubelet makes it
    // a new sandbox, same pod uid), and a container is made from the
    // unused image of the second namespace.
    let mut gone = Pod::new("gone", "jobs");
    gone.attempt = 1;
    containerd.run_pod_sandbox(&gone).await;
    containerd.create_native(OTHER, "new-user", OTHER_UNUSED);

    let outcomes = execute_plan(&runtime, &planned, &policy).await;
    assert!(
        runtime.follows_events().await,
        "the re-checks saw both through containerd's events, not by listing everything"
    );
    for role in ["gone-pod job", "other image unused"] {
        let o = layout.outcome(&outcomes, role);
        assert_eq!(o.result, RemovalResult::Skipped, "{role}: {o:?}");
        assert_eq!(o.reason, Some(Reason::Changed), "{role}: {o:?}");
    }
    assert!(
        cri_ids(&containerd)
            .await
            .contains(&layout.ids["gone-pod job"])
    );
    assert!(
        containerd
            .image_names(OTHER)
            .iter()
            .any(|n| n == OTHER_UNUSED)
    );
    for role in ["other stopped task", "image unused"] {
        assert_eq!(
            layout.outcome(&outcomes, role).result,
            RemovalResult::Deleted,
            "{role}"
        );
    }
}

async fn auto_falls_back_to_containerd_and_says_why(version: ContainerdVersion) {
    let containerd = PrivateContainerd::start_version(version).await.required();
    let layout = lay_out(&containerd).await;
    let safeprune = Cli::with_yaml("");
    let no_docker = format!("unix://{}", safeprune.path("docker.sock").display());
    safeprune.rewrite(
        &Runtime::Auto {
            docker: &no_docker,
            containerd: &containerd.endpoint(),
            namespaces: &[CRI_NAMESPACE, "moby"],
        },
        "",
    );
    let out = safeprune.run(&["plan"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8(out.stdout).unwrap();
    assert!(
        table.contains("runtime: containerd (auto: Docker did not answer at unix://"),
        "{table}"
    );
    assert!(
        table.contains("not applicable on containerd: volume, network, build_cache"),
        "{table}"
    );
    // Docker's own namespace is never pruned through containerd, and it says so.
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("moby"), "{stderr}");

    // explain finds a containerd object by its id without the namespace.
    let bare = layout.id("web istio-init").trim_start_matches("k8s.io/");
    let out = safeprune.run(&["explain", &bare[..12]]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("protected_label"), "{text}");
    assert!(
        text.contains(layout.id("web sandbox")),
        "names the sandbox: {text}"
    );

    // Neither engine: exit 1, naming both endpoints.
    let d_sock = format!("unix://{}", safeprune.path("d.sock").display());
    let c_sock = safeprune.path("c.sock").display().to_string();
    safeprune.rewrite(
        &Runtime::Auto {
            docker: &d_sock,
            containerd: &c_sock,
            namespaces: &[],
        },
        "",
    );
    let out = safeprune.run(&["plan"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("d.sock") && stderr.contains("c.sock"),
        "{stderr}"
    );
}
