//! The `DaemonSet`'s pod, run for real: the image from the offline build
//! (`scripts/image.sh`) imported into a private containerd, and the pod of
//! `deploy/kubernetes/` made through CRI as kubelet would make it from the
//! manifest (its args, env, mounts, security contexts, resources and
//! `ConfigMap`, read from the files, not restated: `util/kube.rs`), on the
//! pod network, on a node laid out like `containerd_node.rs`. The safeprune
//! inside keeps what must be kept, removes through CRI what is eligible,
//! answers its liveness probe and serves its metrics on the pod's address,
//! and exits 0 when kubelet stops the pod.
//!
//! It runs on containerd 1.6.20 and on 2.3.4 (`containerd_tests!`), and
//! `deploy/kubernetes/crio`'s pod on CRI-O 1.36.3 through CRI alone. The
//! overlay `examples/kubelet-image-gc` runs on containerd too, with a
//! kubelet configuration file of the test's and the image file system
//! its CRI names, and `examples/kubelet-image-gc-crio` on CRI-O; and the
//! base pod on containerd paces by the pods' I/O stall, read through the
//! node's cgroup file system mounted read-only.
//!
//! The test changes one thing of the manifest: the `ConfigMap`'s policy gets
//! a schedule every two seconds, no jitter and no minimum ages, so that the
//! layout, made seconds ago, is pruned now. The unused image is pulled
//! through a registry of the test's own, as kubelet pulls: the default
//! policy keeps the imported ones, which no registry can give back.

use crate::util;

use std::collections::HashMap;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use containerd_client::tonic::transport::Channel;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerState, ContainerStatsRequest, ContainerStatus, CreateContainerRequest,
    PodSandboxStatusRequest, RunPodSandboxRequest, StartContainerRequest, StopContainerRequest,
};
use serde_json::Value;
use util::Required;
use util::containerd::{
    CRI_NAMESPACE, ContainerdVersion, PrivateContainerd, SANDBOX_IMAGE, containerd_tests,
};
use util::image::BuiltImage;
use util::kube::{Manifests, Node};
use util::node::{decision, http_get};
use util::pod::Pod;
use util::registry::Registry;

const NODE_NAME: &str = "node-1";
const BASE: &str = "docker.io/library/base:1";
/// Pulled through a registry of the test's own, as kubelet pulls: an
/// image a registry can give back, which the default policy prunes.
const UNUSED: &str = "127.0.0.1:5000/library/unused:1";
const PINNED: &str = "docker.io/library/pinned:1";

/// The policy of the `ConfigMap`, pruning now: the test's only change.
fn prune_now(key: &str, text: &str) -> String {
    assert_eq!(key, "policy.yaml", "the ConfigMap holds the policy only");
    let mut policy: serde_yaml::Mapping = serde_yaml::from_str(text).expect("the policy is YAML");
    policy.insert("schedule".into(), "*/2 * * * * *".into());
    policy.insert("schedule_jitter".into(), "0".into());
    for kind in ["containers", "images"] {
        let mut section = policy
            .get(kind)
            .and_then(serde_yaml::Value::as_mapping)
            .cloned()
            .unwrap_or_default();
        section.insert("min_age".into(), "0".into());
        policy.insert(kind.into(), section.into());
    }
    serde_yaml::to_string(&policy).expect("a policy serializes")
}

/// Builds the image from the test's safeprune with the repository's
/// script, and imports it into `k8s.io`, as an operator would offline;
/// returns once CRI knows it, as kubelet would wait.
async fn import_safeprune_image(containerd: &PrivateContainerd, name: &str) {
    let image = BuiltImage::build();
    let archive = image.oci_tar();
    containerd.ctr_ok(
        CRI_NAMESPACE,
        &["images", "import", archive.to_str().expect("a UTF-8 path")],
    );
    containerd.cri_image_status(name).await;
}

/// `GET path` on the pod's `port`, from the node's network namespace (the
/// private containerd's), as kubelet's prober and a scraper reach a pod.
fn get_from_node(node_pid: u32, addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let path = path.to_owned();
    std::thread::spawn(move || {
        let netns = fs::File::open(format!("/proc/{node_pid}/ns/net")).expect("the node's netns");
        nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).expect("enter the netns");
        http_get(addr, &path).ok()
    })
    .join()
    .expect("the probe thread")
}

/// Waits for `path` to be written whole (atomically) and returns it.
async fn wait_for_json(path: &Path, log: &Path) -> Value {
    let begun = Instant::now();
    loop {
        if let Ok(bytes) = fs::read(path) {
            return serde_json::from_slice(&bytes).expect("the report is JSON");
        }
        assert!(
            begun.elapsed() < Duration::from_secs(60),
            "no report at {} after 60 s; the pod's log:\n{}",
            path.display(),
            fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The decision and rule of the report on `k8s.io/<id>`.
fn rule_of<'a>(report: &'a Value, id: &str) -> (&'a str, &'a str) {
    decided(report, &format!("{CRI_NAMESPACE}/{id}"))
}

/// The decision and rule of object `id`, as the report names it.
fn decided<'a>(report: &'a Value, id: &str) -> (&'a str, &'a str) {
    let decision = decision(report, id);
    (
        decision["decision"].as_str().unwrap(),
        decision["rule"].as_str().unwrap(),
    )
}

/// What the node holds before the pod comes: ids and digests by role.
struct Layout {
    istio: String,
    setup: String,
    app: String,
    web_sandbox: String,
    gone_sandbox: String,
    job: String,
    base: String,
    unused: String,
    pinned: String,
}

/// A live pod with exited init containers, a stopped pod, an unused, a
/// pinned and the sandbox image: `containerd_node.rs`'s node in `k8s.io`.
async fn lay_out(containerd: &PrivateContainerd) -> Layout {
    let base = containerd.import_busybox_image(CRI_NAMESPACE, BASE);
    let registry = Registry::start_beside(containerd.pid()).required();
    let unused = registry.pulled_by_cri(containerd, UNUSED, "unused").await;
    let pinned = containerd.import_busybox_image(CRI_NAMESPACE, PINNED);
    containerd.ctr_ok(
        CRI_NAMESPACE,
        &["images", "label", PINNED, "io.cri-containerd.pinned=pinned"],
    );
    let web = Pod::new("web", "default");
    let web_sandbox = containerd.run_pod_sandbox(&web).await;
    let istio = containerd
        .run_pod_container_to_exit(&web, &web_sandbox, "istio-init", BASE, &[])
        .await;
    let setup = containerd
        .run_pod_container_to_exit(&web, &web_sandbox, "setup", BASE, &[])
        .await;
    let app = containerd
        .run_pod_container(&web, &web_sandbox, "app", BASE, &[])
        .await;
    let gone = Pod::new("gone", "jobs");
    let (gone_sandbox, job) = containerd.run_stopped_pod(&gone, "job", BASE).await;
    Layout {
        istio,
        setup,
        app,
        web_sandbox,
        gone_sandbox,
        job,
        base: base.digest,
        unused,
        pinned: pinned.digest,
    }
}

/// `lay_out`'s node on CRI-O, its pods made as kubelet makes them (on the
/// host network: `util::crio`), `PINNED` pinned by CRI-O's
/// `pinned_images`.
fn lay_out_on_crio(crio: &util::crio::PrivateCrio) -> Layout {
    use util::{EXIT_0, RUN_FOREVER};
    let base = crio.import_image(BASE, "base");
    let unused = crio.import_image(UNUSED, "unused");
    let pinned = crio.import_image(PINNED, "pinned");
    let web = crio.run_pod(&Pod::new("web", "default"));
    let istio = web.container("istio-init", BASE, EXIT_0);
    web.wait_exited(&istio);
    let setup = web.container("setup", BASE, EXIT_0);
    web.wait_exited(&setup);
    let app = web.container("app", BASE, RUN_FOREVER);
    let gone = crio.run_pod(&Pod::new("gone", "jobs"));
    let job = gone.container("job", BASE, EXIT_0);
    gone.wait_exited(&job);
    gone.stop();
    Layout {
        istio,
        setup,
        app,
        web_sandbox: web.sandbox_id.clone(),
        gone_sandbox: gone.sandbox_id.clone(),
        job,
        base,
        unused,
        pinned,
    }
}

/// The `DaemonSet`'s pod, running on `node`.
struct SafeprunePod {
    sandbox: String,
    container: String,
    /// Its stdout and stderr, as CRI logs them.
    log: PathBuf,
}

/// Kubelet's part: runs the pod as the manifest says, on `node`, through
/// the runtime's CRI.
async fn run_pod(
    cri: RuntimeServiceClient<Channel>,
    manifests: &Manifests,
    node: &Node<'_>,
) -> SafeprunePod {
    Box::pin(run_pod_with(cri, manifests, node, prune_now)).await
}

/// [`run_pod`], the `ConfigMap`'s policy changed by `edit` (key, text).
async fn run_pod_with(
    mut cri: RuntimeServiceClient<Channel>,
    manifests: &Manifests,
    node: &Node<'_>,
    edit: impl Fn(&str, &str) -> String,
) -> SafeprunePod {
    let logs = node.volumes_dir.join("pod-logs");
    fs::create_dir_all(&logs).unwrap();
    let mut sandbox_config = manifests.sandbox_config(node);
    sandbox_config.log_directory = logs.display().to_string();
    let sandbox = cri
        .run_pod_sandbox(RunPodSandboxRequest {
            config: Some(sandbox_config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .expect("run the DaemonSet's pod sandbox on the pod network")
        .into_inner()
        .pod_sandbox_id;
    let mut config = manifests.container_config(node, edit);
    "safeprune.log".clone_into(&mut config.log_path);
    let container = cri
        .create_container(CreateContainerRequest {
            pod_sandbox_id: sandbox.clone(),
            config: Some(config),
            sandbox_config: Some(sandbox_config),
        })
        .await
        .expect("create safeprune's container as the manifest says")
        .into_inner()
        .container_id;
    cri.start_container(StartContainerRequest {
        container_id: container.clone(),
    })
    .await
    .expect("start safeprune's container");
    SafeprunePod {
        sandbox,
        container,
        log: logs.join("safeprune.log"),
    }
}

/// The pod's address on the pod network.
async fn pod_ip(mut cri: RuntimeServiceClient<Channel>, sandbox: &str) -> std::net::IpAddr {
    cri.pod_sandbox_status(PodSandboxStatusRequest {
        pod_sandbox_id: sandbox.to_owned(),
        verbose: false,
    })
    .await
    .unwrap()
    .into_inner()
    .status
    .and_then(|s| s.network)
    .map(|n| n.ip)
    .expect("the pod has an address")
    .parse()
    .expect("an IP")
}

/// kubelet's liveness probe and a scrape, on the pod's address `ip`, from
/// the node's network namespace (that of the engine whose pid is
/// `node_pid`): both answer 200, and the metrics show the last run's
/// success and the protected init container kept.
fn assert_probe_and_metrics(node_pid: u32, manifests: &Manifests, ip: std::net::IpAddr) {
    let (probe_path, port) = manifests.liveness();
    let pod_addr = SocketAddr::new(ip, port);
    let (status, body) = get_from_node(node_pid, pod_addr, &probe_path)
        .unwrap_or_else(|| panic!("no answer at {pod_addr}{probe_path}"));
    assert_eq!(status, 200, "{body}");
    let (status, metrics) = get_from_node(node_pid, pod_addr, "/metrics").expect("/metrics");
    assert_eq!(status, 200);
    for series in [
        "safeprune_last_run_success 1",
        r#"safeprune_last_run_kept_objects{kind="container",rule="protected_label"} 1"#,
    ] {
        assert!(
            metrics.lines().any(|l| l == series),
            "{series} in:\n{metrics}"
        );
    }
}

/// The most memory the container's cgroup has held, in KiB: cgroup v1's
/// `memory.max_usage_in_bytes` or v2's `memory.peak`, where either is.
fn peak_kib(scope: &str, container: &str) -> Option<u64> {
    ["memory/", ""].iter().find_map(|hierarchy| {
        let dir = Path::new("/sys/fs/cgroup")
            .join(hierarchy)
            .join(scope)
            .join(container);
        ["memory.max_usage_in_bytes", "memory.peak"]
            .iter()
            .find_map(|file| fs::read_to_string(dir.join(file)).ok())
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map(|bytes| bytes / 1024)
    })
}

/// The container's memory working set, as kubelet's summary API reads it.
async fn working_set_kib(containerd: &PrivateContainerd, container: &str) -> u64 {
    containerd
        .cri()
        .container_stats(ContainerStatsRequest {
            container_id: container.to_owned(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .and_then(|s| s.memory)
        .and_then(|m| m.working_set_bytes)
        .map_or(0, |b| b.value / 1024)
}

/// Kubelet's view, through CRI, and the images: the job and the unused
/// image are gone, the live pod's init containers and what is kept are not.
async fn assert_kubelet_sees_the_removals(
    containerd: &PrivateContainerd,
    manifests: &Manifests,
    layout: &Layout,
    pod: &SafeprunePod,
) {
    let listed = containerd.cri_container_ids().await;
    assert!(
        !listed.contains(&layout.job),
        "the stopped pod's job is still there"
    );
    for kept in [&layout.istio, &layout.setup, &layout.app, &pod.container] {
        assert!(listed.contains(kept), "{kept} was removed");
    }
    let images = containerd.image_names(CRI_NAMESPACE);
    assert!(!images.iter().any(|i| i == UNUSED), "{images:?}");
    let own_image = manifests.container()["image"].as_str().unwrap();
    for kept in [BASE, PINNED, SANDBOX_IMAGE, own_image] {
        assert!(
            images.iter().any(|i| i == kept),
            "{kept} removed: {images:?}"
        );
    }
}

/// What a test node gives the pod: its engine's `socket` (the manifest's
/// path, and the test engine's) and `state` for the manifest's
/// `/var/lib/safeprune`, an empty directory for its `/sys/fs/cgroup` (this
/// machine's pods, where it is a Kubernetes node, must not pace a test:
/// `more` may map the real one), and `more`; the pod's volumes in `dir`,
/// its cgroup and labels those of the engine's `scope`.
fn pod_node<'a>(
    socket: (&'a str, &Path),
    state: &Path,
    dir: &Path,
    scope: &str,
    more: &[(&'a str, PathBuf)],
) -> Node<'a> {
    let no_cgroup = dir.join("no-cgroup");
    fs::create_dir_all(&no_cgroup).expect("an empty directory for /sys/fs/cgroup");
    let mut host_paths = HashMap::from([
        (socket.0, socket.1.to_owned()),
        ("/var/lib/safeprune", state.to_owned()),
        ("/sys/fs/cgroup", no_cgroup),
    ]);
    host_paths.extend(more.iter().cloned());
    Node {
        name: NODE_NAME,
        host_paths,
        volumes_dir: dir.join("volumes"),
        cgroup_parent: format!("/{scope}"),
        labels: HashMap::from([("safeprune.test".to_owned(), scope.to_owned())]),
    }
}

/// A private containerd node for the pod: the engine of `version`, with
/// safeprune's image imported and the node laid out; `None` (the test
/// skipped) where that containerd is absent.
struct PodNode {
    containerd: PrivateContainerd,
    dir: tempfile::TempDir,
    layout: Layout,
    /// The node's directory for the manifest's `/var/lib/safeprune`.
    state: PathBuf,
}

impl PodNode {
    async fn start(manifests: &Manifests, version: ContainerdVersion) -> Self {
        let containerd = PrivateContainerd::start_version(version).await.required();
        let dir = tempfile::tempdir().unwrap();
        import_safeprune_image(
            &containerd,
            manifests.container()["image"].as_str().unwrap(),
        )
        .await;
        let layout = lay_out(&containerd).await;
        let state = dir.path().join("var-lib-safeprune");
        Self {
            containerd,
            dir,
            layout,
            state,
        }
    }

    /// What this node gives the pod: the engine's socket and the state
    /// directory for the manifest's two host paths, and `more`.
    fn node<'a>(&'a self, more: &[(&'a str, PathBuf)]) -> Node<'a> {
        let socket = ("/run/containerd/containerd.sock", self.containerd.socket());
        pod_node(
            socket,
            &self.state,
            self.dir.path(),
            self.containerd.scope(),
            more,
        )
    }

    /// kubelet stops the pod: SIGTERM, then the grace period. The
    /// container's exit code.
    async fn stop(&self, manifests: &Manifests, pod: &SafeprunePod) -> i32 {
        self.containerd
            .cri()
            .stop_container(StopContainerRequest {
                container_id: pod.container.clone(),
                timeout: manifests.grace_seconds(),
            })
            .await
            .expect("stop safeprune's container");
        self.containerd.wait_container_exited(&pod.container).await
    }
}

containerd_tests! {
    #[tokio::test(flavor = "multi_thread")]
    the_daemonset_pod_prunes_its_node_through_cri_and_stops_cleanly,
}

async fn the_daemonset_pod_prunes_its_node_through_cri_and_stops_cleanly(
    version: ContainerdVersion,
) {
    let manifests = Manifests::load();
    let node = PodNode::start(&manifests, version).await;
    let (containerd, layout, state) = (&node.containerd, &node.layout, &node.state);
    let pod = Box::pin(run_pod(containerd.cri(), &manifests, &node.node(&[]))).await;

    // Its first cycle's report, in the state directory on the node.
    let report = wait_for_json(&state.join("last-run.json"), &pod.log).await;
    assert_eq!(report["node"], NODE_NAME, "named from spec.nodeName");
    assert_eq!(report["runtime"], "containerd");
    for (id, expected) in [
        (&layout.istio, ("keep", "protected_label")),
        (&layout.setup, ("keep", "live_pod_sandbox")),
        (&layout.app, ("keep", "running")),
        // A READY sandbox is live: `running` comes first.
        (&layout.web_sandbox, ("keep", "running")),
        (&layout.gone_sandbox, ("keep", "pod_sandbox")),
        (&pod.container, ("keep", "running")),
        (&pod.sandbox, ("keep", "running")),
        (&layout.job, ("delete", "eligible")),
        (&layout.base, ("keep", "in_use")),
        (&layout.pinned, ("keep", "pinned")),
        (&layout.unused, ("delete", "eligible")),
    ] {
        assert_eq!(rule_of(&report, id), expected, "{id}");
    }
    assert_kubelet_sees_the_removals(containerd, &manifests, layout, &pod).await;
    assert!(
        state.join("audit.jsonl").exists(),
        "the audit log is on the node"
    );

    // The liveness probe and a scrape, on the pod's own address.
    let ip = pod_ip(containerd.cri(), &pod.sandbox).await;
    assert_probe_and_metrics(containerd.pid(), &manifests, ip);
    eprintln!(
        "safeprune's pod: memory working set {} KiB after its cycles, peak {:?} KiB",
        working_set_kib(containerd, &pod.container).await,
        peak_kib(containerd.scope(), &pod.container)
    );

    let begun = Instant::now();
    let code = node.stop(&manifests, &pod).await;
    assert_eq!(
        code,
        0,
        "the daemon's exit on the pod's stop; log:\n{}",
        fs::read_to_string(&pod.log).unwrap_or_default()
    );
    eprintln!("safeprune's pod stopped in {:?}", begun.elapsed());
}

containerd_tests! {
    #[tokio::test(flavor = "multi_thread")]
    the_kubelet_image_gc_overlay_works_to_kubelets_thresholds_on_the_measured_image_fs,
}

/// The cgroup v2 directory of this node's pods (the test engine's scope:
/// every pod's cgroup parent), made when missing: under the hybrid
/// hierarchy's `unified` where there is one, else the v2 root. The
/// engine's teardown removes it with the scope's other cgroups.
fn pods_cgroup_v2(scope: &str) -> PathBuf {
    let root = Path::new("/sys/fs/cgroup");
    let mount = if root.join("unified/cgroup.controllers").exists() {
        root.join("unified")
    } else {
        root.to_owned()
    };
    let dir = mount.join(scope);
    fs::create_dir_all(&dir).expect("a cgroup v2 directory for the pods");
    dir
}

/// The `DaemonSet` paces by the node's pods: the pod reads their I/O stall
/// (here the test engine's pods' cgroup, which the policy names, as an
/// operator does where kubelet's is not found) through the node's cgroup
/// file system the base mounts read-only over the pod's own, paces its
/// removals by it at the default target, and says so.
async fn the_daemonset_pod_reads_the_pods_stall_through_the_read_only_cgroup_mount(
    version: ContainerdVersion,
) {
    let manifests = Manifests::load();
    let node = PodNode::start(&manifests, version).await;
    let (containerd, layout) = (&node.containerd, &node.layout);
    let pods = pods_cgroup_v2(containerd.scope());
    let pods_text = pods.display().to_string();
    let host_paths = [("/sys/fs/cgroup", PathBuf::from("/sys/fs/cgroup"))];
    let edit = |key: &str, text: &str| {
        let text = prune_now(key, text);
        let mut policy: serde_yaml::Mapping = serde_yaml::from_str(&text).unwrap();
        let mut pace = serde_yaml::Mapping::new();
        pace.insert("workloads_cgroup".into(), pods_text.clone().into());
        let mut safety = serde_yaml::Mapping::new();
        safety.insert("pace".into(), pace.into());
        assert!(
            policy.insert("safety".into(), safety.into()).is_none(),
            "the base's policy leaves safety to its defaults"
        );
        serde_yaml::to_string(&policy).unwrap()
    };
    let pod = Box::pin(run_pod_with(
        containerd.cri(),
        &manifests,
        &node.node(&host_paths),
        edit,
    ))
    .await;

    let report = wait_for_json(&node.state.join("last-run.json"), &pod.log).await;
    let log = || fs::read_to_string(&pod.log).unwrap_or_default();
    let pace = &report["pace"];
    assert_eq!(pace["signal"], "workloads", "{pace}; log:\n{}", log());
    assert_eq!(
        pace["source"].as_str(),
        Some(pods.join("io.pressure").to_str().unwrap()),
        "{pace}"
    );
    let baseline = pace["baseline_io_pressure_percent"]
        .as_f64()
        .unwrap_or_else(|| panic!("a baseline measured in the pod: {pace}; log:\n{}", log()));
    assert!((0.0..100.0).contains(&baseline), "{pace}");
    assert_eq!(pace["added_io_pressure_percent"], 0.1, "{pace}");
    assert_eq!(pace["on_max_delay"], "continue", "{pace}");
    assert!(pace["objects_per_second"].as_f64().is_some(), "{pace}");
    for (id, expected) in [
        (&layout.istio, ("keep", "protected_label")),
        (&layout.setup, ("keep", "live_pod_sandbox")),
        (&layout.job, ("delete", "eligible")),
    ] {
        assert_eq!(rule_of(&report, id), expected, "{id}");
    }
    let deleted = report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["result"] == "deleted")
        .count();
    assert!(deleted > 0, "the run removed: {report}");

    assert_eq!(node.stop(&manifests, &pod).await, 0, "log:\n{}", log());
}

containerd_tests! {
    #[tokio::test(flavor = "multi_thread")]
    the_daemonset_pod_reads_the_pods_stall_through_the_read_only_cgroup_mount,
}

/// kubelet's --config in `dir`, as kubeadm writes it, with thresholds of
/// its own: 90 and 70, and `imageMinimumGCAge` left at its default, 2m.
fn kubelet_config_in(dir: &Path) -> PathBuf {
    let file = dir.join("kubelet-config.yaml");
    fs::write(
        &file,
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 70\n",
    )
    .unwrap();
    file
}

/// What the pod of a kubelet-image-gc overlay reported, with
/// [`kubelet_config_in`]'s file: it measured `image_fs`, worked to the
/// watermarks 5 points under kubelet's, and kept the `unused` image,
/// pulled seconds ago, as younger than kubelet's `imageMinimumGCAge`,
/// whatever the policy's `min_age` (0 here) and the disk say.
fn assert_worked_to_kubelets_thresholds(
    report: &Value,
    image_fs: &str,
    unused: &str,
    log: &dyn Fn() -> String,
) {
    let measured = &report["image_fs"];
    assert_eq!(
        measured["path"].as_str(),
        Some(image_fs),
        "the image file system CRI names, measured in the pod; log:\n{}",
        log()
    );
    assert_eq!(measured["high_percent"], 85, "90 - 5, from kubelet's file");
    assert_eq!(measured["low_percent"], 65, "70 - 5, from kubelet's file");
    let before = measured["before_percent"]
        .as_f64()
        .unwrap_or_else(|| panic!("the usage measured: {measured}; log:\n{}", log()));
    assert!(before > 0.0 && before <= 100.0, "{measured}");
    let unused = decision(report, unused);
    assert_eq!(unused["rule"], "too_young", "{unused}");
    assert!(
        unused["detail"]
            .as_str()
            .unwrap()
            .contains("younger than kubelet's imageMinimumGCAge 2m"),
        "{unused}"
    );
}

/// `deploy/kubernetes/examples/kubelet-image-gc`: the pod reads kubelet's
/// configuration file and measures containerd's image file system through
/// the two read-only mounts the overlay adds, and works to the watermarks
/// 5 points under kubelet's.
async fn the_kubelet_image_gc_overlay_works_to_kubelets_thresholds_on_the_measured_image_fs(
    version: ContainerdVersion,
) {
    let mut manifests = Manifests::load_overlay("examples/kubelet-image-gc");
    let node = PodNode::start(&manifests, version).await;
    let (containerd, layout, dir) = (&node.containerd, &node.layout, node.dir.path());
    let kubelet_config = kubelet_config_in(dir);
    // This node's containerd keeps its root elsewhere than /var/lib: the
    // image file system its CRI names moves, in both places, as the
    // overlay tells an operator to.
    let image_fs = containerd
        .path("root")
        .join("io.containerd.snapshotter.v1.overlayfs");
    let image_fs_text = image_fs.display().to_string();
    manifests.move_host_path("image-fs", &image_fs_text);
    let host_paths = [
        ("/var/lib/kubelet/config.yaml", kubelet_config),
        (image_fs_text.as_str(), image_fs.clone()),
    ];
    let pod = Box::pin(run_pod(
        containerd.cri(),
        &manifests,
        &node.node(&host_paths),
    ))
    .await;

    let report = wait_for_json(&node.state.join("last-run.json"), &pod.log).await;
    let log = || fs::read_to_string(&pod.log).unwrap_or_default();
    let unused = format!("{CRI_NAMESPACE}/{}", layout.unused);
    assert_worked_to_kubelets_thresholds(&report, &image_fs_text, &unused, &log);
    for (id, expected) in [
        (&layout.istio, ("keep", "protected_label")),
        (&layout.setup, ("keep", "live_pod_sandbox")),
        (&layout.base, ("keep", "in_use")),
        (&layout.pinned, ("keep", "pinned")),
        (&layout.job, ("delete", "eligible")),
    ] {
        assert_eq!(rule_of(&report, id), expected, "{id}");
    }

    assert_eq!(node.stop(&manifests, &pod).await, 0, "log:\n{}", log());
}

#[test]
fn the_configmaps_policies_pass_check_as_they_are() {
    // Each overlay's policy, as its JSON patches leave the ConfigMap.
    let policy = |manifests: Manifests| manifests.config_file("/etc/safeprune", "policy.yaml");
    for (variant, policy, kind) in [
        ("base", policy(Manifests::load()), "containerd"),
        (
            "docker",
            policy(Manifests::load_overlay("docker")),
            "docker",
        ),
        ("crio", policy(Manifests::load_overlay("crio")), "cri"),
    ] {
        let safeprune = util::node::Cli::with_yaml(&policy);
        // The policy alone: the node's engine and paths are the pod's.
        let out = safeprune.run(&["check", "--offline"]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{variant}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let checked: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).unwrap();
        assert_eq!(checked["runtime"]["kind"].as_str(), Some(kind), "{variant}");
        assert_eq!(
            checked["metrics"]["listen"].as_str(),
            Some("0.0.0.0:9573"),
            "{variant}"
        );
    }
}

/// A private CRI-O node for the pod, as `PodNode` on containerd: the pinned
/// image pinned, a pod network, safeprune's image imported and the node
/// laid out; `None` (the test skipped) where CRI-O is absent.
struct CrioPodNode {
    crio: util::crio::PrivateCrio,
    dir: tempfile::TempDir,
    layout: Layout,
    /// The node's directory for the manifest's `/var/lib/safeprune`.
    state: PathBuf,
}

impl CrioPodNode {
    async fn start(manifests: &Manifests) -> Self {
        use util::crio::{CrioOptions, PrivateCrio};
        let options = CrioOptions {
            pinned_images: vec![PINNED.to_owned()],
            pod_network: true,
            ..CrioOptions::default()
        };
        let crio = PrivateCrio::start_with(options).await.required();
        let dir = tempfile::tempdir().unwrap();
        let built = BuiltImage::build();
        crio.import_archive(
            &built.oci_tar(),
            manifests.container()["image"].as_str().unwrap(),
        );
        let layout = lay_out_on_crio(&crio);
        let state = dir.path().join("var-lib-safeprune");
        Self {
            crio,
            dir,
            layout,
            state,
        }
    }

    /// What this node gives the pod: CRI-O's socket and the state
    /// directory for the manifest's two host paths, and `more`.
    fn node<'a>(&'a self, more: &[(&'a str, PathBuf)]) -> Node<'a> {
        let socket = ("/var/run/crio/crio.sock", self.crio.socket());
        pod_node(
            socket,
            &self.state,
            self.dir.path(),
            self.crio.scope(),
            more,
        )
    }

    /// kubelet stops the pod: SIGTERM, then the grace period. The
    /// container's status after.
    async fn stop(&self, manifests: &Manifests, container: &str) -> ContainerStatus {
        self.crio
            .cri()
            .await
            .stop_container(StopContainerRequest {
                container_id: container.to_owned(),
                timeout: manifests.grace_seconds(),
            })
            .await
            .expect("stop safeprune's container");
        self.crio.container_status(container)
    }
}

/// The `DaemonSet` of `deploy/kubernetes/crio` on a CRI-O node, through CRI
/// alone: its image imported into CRI-O's storage as an operator would
/// offline, its pod run on the pod network (a CNI bridge inside the
/// private CRI-O's network namespace) as kubelet runs it from the
/// overlay's manifest, beside `crio_node.rs`'s node. The safeprune inside
/// keeps what must be kept, removes what is eligible, answers its liveness
/// probe and serves its metrics on the pod's address, and exits 0 when
/// kubelet stops the pod.
#[tokio::test(flavor = "multi_thread")]
async fn on_crio_the_daemonset_pod_prunes_its_node_through_cri_and_stops_cleanly() {
    use util::crio::PAUSE_IMAGE;

    let manifests = Manifests::load_overlay("crio");
    let node = CrioPodNode::start(&manifests).await;
    let (crio, layout) = (&node.crio, &node.layout);
    let own_image = manifests.container()["image"].as_str().unwrap().to_owned();

    // kubelet's part, from the overlay's manifest.
    let pod = Box::pin(run_pod(crio.cri().await, &manifests, &node.node(&[]))).await;
    let (sandbox, container, log) = (pod.sandbox, pod.container, pod.log);

    let report = wait_for_json(&node.state.join("last-run.json"), &log).await;
    assert_eq!(report["node"], NODE_NAME, "named from spec.nodeName");
    assert_eq!(report["runtime"], "cri");
    let pause = crio.image_id(PAUSE_IMAGE);
    let own = crio.image_id(&own_image);
    // Sandboxes are not containers to CRI: never decided.
    for (id, expected) in [
        (&layout.istio, ("keep", "protected_label")),
        (&layout.setup, ("keep", "live_pod_sandbox")),
        (&layout.app, ("keep", "running")),
        (&container, ("keep", "running")),
        (&layout.job, ("delete", "eligible")),
        (&layout.base, ("keep", "in_use")),
        (&own, ("keep", "in_use")),
        (&layout.pinned, ("keep", "pinned")),
        // The default policy keeps pause images by name, before CRI's pin.
        (&pause, ("keep", "keep_pattern")),
        (&layout.unused, ("delete", "eligible")),
    ] {
        assert_eq!(
            decided(&report, id),
            expected,
            "{id}: {}",
            decision(&report, id)
        );
    }

    // kubelet's view: the job and the unused image are gone, the rest not.
    let listed = crio.container_ids();
    assert!(
        !listed.contains(&layout.job),
        "the finished pod's job is still there"
    );
    for kept in [&layout.istio, &layout.setup, &layout.app, &container] {
        assert!(listed.contains(kept), "{kept} was removed");
    }
    let images = crio.image_ids();
    assert!(!images.contains(&layout.unused), "{images:?}");
    for kept in [&layout.base, &own, &layout.pinned, &pause] {
        assert!(images.contains(kept), "{kept} removed: {images:?}");
    }
    // CRI-O answers kubelet for every pod.
    crio.ctl().pods();
    for pod in [&layout.web_sandbox, &layout.gone_sandbox, &sandbox] {
        crio.ctl().sandbox_status(pod);
    }

    let ip = pod_ip(crio.cri().await, &sandbox).await;
    assert_probe_and_metrics(crio.pid(), &manifests, ip);

    // kubelet stops the pod: SIGTERM, then the grace period.
    let begun = Instant::now();
    let status = node.stop(&manifests, &container).await;
    assert_eq!(
        status.state(),
        ContainerState::ContainerExited,
        "{status:?}"
    );
    assert_eq!(
        status.exit_code,
        0,
        "the daemon's exit on the pod's stop; log:\n{}",
        fs::read_to_string(&log).unwrap_or_default()
    );
    eprintln!("safeprune's pod on CRI-O stopped in {:?}", begun.elapsed());
}

/// `deploy/kubernetes/examples/kubelet-image-gc-crio` on a CRI-O node: the
/// pod reads kubelet's configuration file and measures the directory
/// CRI-O's CRI names as its image file system, through the two read-only
/// mounts the overlay adds, and works to the watermarks 5 points under
/// kubelet's, never removing an image kubelet would still keep.
#[tokio::test(flavor = "multi_thread")]
async fn on_crio_the_kubelet_image_gc_overlay_works_to_kubelets_thresholds() {
    let mut manifests = Manifests::load_overlay("examples/kubelet-image-gc-crio");
    let node = CrioPodNode::start(&manifests).await;
    let (crio, layout) = (&node.crio, &node.layout);
    let kubelet_config = kubelet_config_in(node.dir.path());
    // This CRI-O keeps its storage elsewhere than /var/lib/containers: the
    // directory its CRI names moves, in both places, as the overlay tells
    // an operator to.
    let image_fs = crio.root().join("overlay-images");
    let image_fs_text = image_fs.display().to_string();
    manifests.move_host_path("image-fs", &image_fs_text);
    let host_paths = [
        ("/var/lib/kubelet/config.yaml", kubelet_config),
        (image_fs_text.as_str(), image_fs.clone()),
    ];
    let pod = Box::pin(run_pod(
        crio.cri().await,
        &manifests,
        &node.node(&host_paths),
    ))
    .await;

    let report = wait_for_json(&node.state.join("last-run.json"), &pod.log).await;
    let log = || fs::read_to_string(&pod.log).unwrap_or_default();
    assert_eq!(report["runtime"], "cri");
    assert_worked_to_kubelets_thresholds(&report, &image_fs_text, &layout.unused, &log);
    for (id, expected) in [
        (&layout.istio, ("keep", "protected_label")),
        (&layout.setup, ("keep", "live_pod_sandbox")),
        (&layout.base, ("keep", "in_use")),
        (&layout.pinned, ("keep", "pinned")),
        (&layout.job, ("delete", "eligible")),
    ] {
        assert_eq!(
            decided(&report, id),
            expected,
            "{id}: {}",
            decision(&report, id)
        );
    }
    assert!(crio.image_ids().contains(&layout.unused), "kept");
    assert!(!crio.container_ids().contains(&layout.job), "removed");
    let status = node.stop(&manifests, &pod.container).await;
    assert_eq!(status.exit_code, 0, "{status:?}; log:\n{}", log());
}
