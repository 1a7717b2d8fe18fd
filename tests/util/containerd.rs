//! A private containerd for each test, and fixtures to fill it the way
//! kubelet and `ctr` would.
//!
//! [`PrivateContainerd::start`] runs its own `containerd` in fresh pid, mount
//! and network namespaces, under a short directory `/tmp/spc-XXXXXX` that
//! holds its config, root, state, socket and log. It never touches the
//! node's containerd (nor the one Docker manages). Its CRI plugin has
//! `restrict_oom_score_adj = true` (root here lacks `CAP_SYS_RESOURCE`, and
//! sandboxes would ask for -998: FACTS.md) and the sandbox image
//! `registry.k8s.io/pause:3.6`, which [`PrivateContainerd::start`] imports
//! (a busybox that sleeps and exits on TERM: there is no registry here).
//! Pods use the host network, which is the private network namespace: no
//! CNI needed.
//!
//! Dropping it kills containerd, the init of its pid namespace, so the
//! kernel ends every process in it (shims, pause and test containers); the
//! namespaces take their mounts (a private tmpfs on `/run` holds the shim
//! sockets, fixed at `/run/containerd/s`) with them. What is left, cgroups
//! and the directory, is removed.
//!
//! Everything the fixtures create carries the label `safeprune.test=<scope>`
//! with the engine's own scope.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use containerd_client::services::v1::GetRequest;
use containerd_client::tonic::Request;
use containerd_client::tonic::transport::Channel;
use containerd_client::types::v1::Status as TaskStatus;
use containerd_client::with_namespace;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerState as CriContainerState,
    ContainerStatusRequest, CreateContainerRequest, ImageSpec, LinuxContainerConfig,
    LinuxContainerResources, LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode,
    NamespaceOption, PodSandboxConfig, PodSandboxMetadata, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StatusRequest, StopContainerRequest,
    StopPodSandboxRequest,
};
use sha2::{Digest, Sha256};

use super::{Pod, RUN_FOREVER, TEST_LABEL, busybox_rootfs};

/// The namespace the CRI plugin keeps kubelet's objects in.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// The sandbox image the private CRI plugin is configured with.
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.6";

const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a fixture waits for a container or task to reach a state.
const STATE_TIMEOUT: Duration = Duration::from_secs(20);

/// Mounts the private `/run` and brings up loopback (the CRI plugin's
/// stream server listens on 127.0.0.1), then becomes containerd.
const LAUNCH_SCRIPT: &str = r#"mount -n -t tmpfs -o mode=755 spc-run /run && ip link set lo up && exec containerd --config "$1""#;

/// A containerd of the test's own, with the CRI plugin.
pub struct PrivateContainerd {
    channel: Channel,
    socket: PathBuf,
    scope: String,
    /// Last, so the clients are gone before the daemon is torn down.
    process: DaemonProcess,
}

impl PrivateContainerd {
    /// Starts a private containerd, waits until both its own API and CRI
    /// answer, and imports the sandbox image into `k8s.io`.
    ///
    /// # Panics
    /// When containerd cannot be started or does not answer within 30 s; the
    /// message holds the tail of its log.
    pub async fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("spc-")
            .tempdir_in("/tmp")
            .expect("create a directory for the private containerd")
            .keep();
        let scope = dir
            .file_name()
            .expect("temp dir has a name")
            .to_string_lossy()
            .into_owned();
        let socket = dir.join("c.sock");
        let config = dir.join("config.toml");
        fs::write(&config, config_toml(&dir, &socket)).expect("write config.toml");
        let mut process = DaemonProcess {
            unshare: launch(&dir, &config),
            dir,
            scope: scope.clone(),
            containerd_pid: None,
        };
        let channel = process.await_answer(&socket).await;
        let containerd = Self {
            channel,
            socket,
            scope,
            process,
        };
        containerd.import_image(
            CRI_NAMESPACE,
            SANDBOX_IMAGE,
            &["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
        );
        containerd
    }

    /// The socket path, `/tmp/spc-XXXXXX/c.sock`.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The socket path as a string, for `ContainerdRuntime::connect`.
    pub fn endpoint(&self) -> String {
        self.socket.to_string_lossy().into_owned()
    }

    /// The value of `safeprune.test` on everything the fixtures create.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The gRPC channel to this containerd (its own API and CRI alike).
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// A client of containerd's own API.
    pub fn native(&self) -> containerd_client::Client {
        containerd_client::Client::from(self.channel())
    }

    /// A CRI runtime service client, as kubelet has.
    pub fn cri(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel())
    }

    /// `ctr`, pointed at this containerd and `namespace`.
    pub fn ctr(&self, namespace: &str) -> Command {
        let mut cmd = Command::new("ctr");
        cmd.arg("--address")
            .arg(&self.socket)
            .args(["--namespace", namespace]);
        cmd
    }

    /// Runs `ctr` with `args`; panics with its output when it fails.
    pub fn ctr_ok(&self, namespace: &str, args: &[&str]) -> String {
        let output = self
            .ctr(namespace)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ctr");
        assert!(
            output.status.success(),
            "ctr -n {namespace} {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Imports a busybox image (`/bin/sh`, `/bin/sleep`) named `name` (a
    /// full reference such as `docker.io/library/busybox:1.36`) into
    /// `namespace`, with `entrypoint` as its entrypoint. Every import is a
    /// distinct image (its creation time is part of its config). Returns the
    /// image's target (manifest) digest.
    pub fn import_image(&self, namespace: &str, name: &str, entrypoint: &[&str]) -> String {
        let (archive, digest) = image_archive(name, entrypoint);
        let mut child = self
            .ctr(namespace)
            .args(["images", "import", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run ctr images import");
        child
            .stdin
            .take()
            .expect("ctr stdin")
            .write_all(&archive)
            .expect("write the image archive to ctr");
        let output = child.wait_with_output().expect("wait for ctr");
        assert!(
            output.status.success(),
            "import {name} into {namespace}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        digest
    }

    /// Imports a busybox image whose entrypoint is `sh`.
    pub fn import_busybox_image(&self, namespace: &str, name: &str) -> String {
        self.import_image(namespace, name, &["sh"])
    }

    /// Gives image `source` the extra name `target` in `namespace`.
    pub fn tag_image(&self, namespace: &str, source: &str, target: &str) {
        self.ctr_ok(namespace, &["images", "tag", source, target]);
    }

    /// The names of every image record in `namespace`.
    pub fn image_names(&self, namespace: &str) -> Vec<String> {
        self.ctr_ok(namespace, &["images", "ls", "-q"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The ids of every native container in `namespace`.
    pub fn container_ids(&self, namespace: &str) -> Vec<String> {
        self.ctr_ok(namespace, &["containers", "ls", "-q"])
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Runs a plain containerd container `id` from `image` in `namespace`,
    /// detached, as `ctr run -d` does; its task stays once it exits. The
    /// container's cgroup lies under this engine's scope.
    pub fn run_native(&self, namespace: &str, id: &str, image: &str, cmd: &[&str]) {
        let cgroup = format!("/{}/{id}", self.scope);
        let label = format!("{TEST_LABEL}={}", self.scope);
        let mut args = vec![
            "run",
            "-d",
            "--null-io",
            "--cgroup",
            &cgroup,
            "--label",
            &label,
            image,
            id,
        ];
        args.extend(cmd);
        self.ctr_ok(namespace, &args);
    }

    /// Creates a plain containerd container with no task: it never ran.
    pub fn create_native(&self, namespace: &str, id: &str, image: &str) {
        let label = format!("{TEST_LABEL}={}", self.scope);
        self.ctr_ok(
            namespace,
            &["containers", "create", "--label", &label, image, id],
        );
    }

    /// Waits until the task of native container `id` has stopped.
    pub async fn wait_task_stopped(&self, namespace: &str, id: &str) {
        let begun = Instant::now();
        loop {
            let request = with_namespace!(
                GetRequest {
                    container_id: id.to_owned(),
                    exec_id: String::new(),
                },
                namespace
            );
            let status = self
                .native()
                .tasks()
                .get(request)
                .await
                .unwrap_or_else(|e| panic!("get task {namespace}/{id}: {e}"))
                .into_inner()
                .process
                .map(|p| p.status);
            if status == Some(TaskStatus::Stopped as i32) {
                return;
            }
            assert!(
                begun.elapsed() < STATE_TIMEOUT,
                "task {namespace}/{id} did not stop: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Runs a pod sandbox through CRI, as kubelet does, on the host network.
    /// Returns its id.
    pub async fn run_pod_sandbox(&self, pod: &Pod) -> String {
        let request = RunPodSandboxRequest {
            config: Some(self.sandbox_config(pod)),
            runtime_handler: String::new(),
        };
        self.cri()
            .run_pod_sandbox(request)
            .await
            .unwrap_or_else(|e| panic!("run pod sandbox {}: {e}", pod.name))
            .into_inner()
            .pod_sandbox_id
    }

    /// Stops a pod sandbox through CRI: it is no longer READY.
    pub async fn stop_pod_sandbox(&self, sandbox_id: &str) {
        self.cri()
            .stop_pod_sandbox(StopPodSandboxRequest {
                pod_sandbox_id: sandbox_id.to_owned(),
            })
            .await
            .unwrap_or_else(|e| panic!("stop pod sandbox {sandbox_id}: {e}"));
    }

    /// Removes a stopped pod sandbox (and its containers) through CRI.
    pub async fn remove_pod_sandbox(&self, sandbox_id: &str) {
        self.cri()
            .remove_pod_sandbox(RemovePodSandboxRequest {
                pod_sandbox_id: sandbox_id.to_owned(),
            })
            .await
            .unwrap_or_else(|e| panic!("remove pod sandbox {sandbox_id}: {e}"));
    }

    /// Creates (does not start) one of a pod's containers through CRI, with
    /// the labels kubelet gives it plus `labels`. Returns its id.
    pub async fn create_pod_container(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        name: &str,
        image: &str,
        cmd: &[&str],
        labels: &[(&str, &str)],
    ) -> String {
        let mut all_labels = self.labels(&pod.labels());
        all_labels.insert("io.kubernetes.container.name".to_owned(), name.to_owned());
        all_labels.extend(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: name.to_owned(),
                attempt: 0,
            }),
            image: Some(ImageSpec {
                image: image.to_owned(),
                ..ImageSpec::default()
            }),
            command: cmd.iter().map(|&s| s.to_owned()).collect(),
            labels: all_labels,
            annotations: HashMap::from([(
                "io.kubernetes.container.restartCount".to_owned(),
                "0".to_owned(),
            )]),
            linux: Some(LinuxContainerConfig {
                // Not below containerd's own score: see FACTS.md.
                resources: Some(LinuxContainerResources {
                    oom_score_adj: 0,
                    ..LinuxContainerResources::default()
                }),
                security_context: None,
            }),
            ..ContainerConfig::default()
        };
        let request = CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            config: Some(config),
            sandbox_config: Some(self.sandbox_config(pod)),
        };
        self.cri()
            .create_container(request)
            .await
            .unwrap_or_else(|e| panic!("create container {name} in {}: {e}", pod.name))
            .into_inner()
            .container_id
    }

    /// Starts a CRI container.
    pub async fn start_container(&self, id: &str) {
        self.cri()
            .start_container(StartContainerRequest {
                container_id: id.to_owned(),
            })
            .await
            .unwrap_or_else(|e| panic!("start container {id}: {e}"));
    }

    /// Stops a CRI container (TERM, then KILL after 1 s).
    pub async fn stop_container(&self, id: &str) {
        self.cri()
            .stop_container(StopContainerRequest {
                container_id: id.to_owned(),
                timeout: 1,
            })
            .await
            .unwrap_or_else(|e| panic!("stop container {id}: {e}"));
    }

    /// Waits until a CRI container has exited; returns its exit code.
    pub async fn wait_container_exited(&self, id: &str) -> i32 {
        let begun = Instant::now();
        loop {
            let status = self
                .cri()
                .container_status(ContainerStatusRequest {
                    container_id: id.to_owned(),
                    verbose: false,
                })
                .await
                .unwrap_or_else(|e| panic!("container status {id}: {e}"))
                .into_inner()
                .status
                .unwrap_or_else(|| panic!("no status for container {id}"));
            if status.state == CriContainerState::ContainerExited as i32 {
                return status.exit_code;
            }
            assert!(
                begun.elapsed() < STATE_TIMEOUT,
                "container {id} did not exit: state {}",
                status.state
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Creates, starts and waits for a pod container that exits 0 at once.
    pub async fn run_pod_container_to_exit(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        name: &str,
        image: &str,
        labels: &[(&str, &str)],
    ) -> String {
        let id = self
            .create_pod_container(pod, sandbox_id, name, image, super::EXIT_0, labels)
            .await;
        self.start_container(&id).await;
        assert_eq!(self.wait_container_exited(&id).await, 0, "{name} exits 0");
        id
    }

    /// Creates and starts a pod container that runs until stopped.
    pub async fn run_pod_container(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        name: &str,
        image: &str,
        labels: &[(&str, &str)],
    ) -> String {
        let id = self
            .create_pod_container(pod, sandbox_id, name, image, RUN_FOREVER, labels)
            .await;
        self.start_container(&id).await;
        id
    }

    /// The CRI plugin's verbose status: its config as JSON under `config`.
    pub async fn cri_status(&self) -> HashMap<String, String> {
        self.cri()
            .status(StatusRequest { verbose: true })
            .await
            .expect("CRI status")
            .into_inner()
            .info
    }

    fn sandbox_config(&self, pod: &Pod) -> PodSandboxConfig {
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                attempt: pod.attempt,
            }),
            // No hostname: with the host network there is no UTS
            // namespace of the pod's own to set it in (runc refuses).
            labels: self.labels(&pod.labels()),
            linux: Some(LinuxPodSandboxConfig {
                // The pod's cgroups under this engine's scope, removed on
                // drop. Without a parent, CRI puts them at /k8s.io/<id>
                // (the default spec's path), and a killed engine leaves
                // those behind where every test's engine shares them
                // (measured).
                cgroup_parent: format!("/{}", self.scope),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        // The host network: no CNI needed.
                        network: NamespaceMode::Node as i32,
                        pid: NamespaceMode::Pod as i32,
                        ipc: NamespaceMode::Pod as i32,
                        ..NamespaceOption::default()
                    }),
                    ..LinuxSandboxSecurityContext::default()
                }),
                ..LinuxPodSandboxConfig::default()
            }),
            ..PodSandboxConfig::default()
        }
    }

    fn labels(&self, extra: &[(&str, String)]) -> HashMap<String, String> {
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .chain([(TEST_LABEL.to_owned(), self.scope.clone())])
            .collect()
    }
}

/// The private containerd's config: its own root, state, socket and CRI
/// settings; plugins that would reach outside the directory are off.
fn config_toml(dir: &Path, socket: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
# opt installs into /opt/containerd; the rest probe host devices or need
# tools that are not here.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{socket}"

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "{SANDBOX_IMAGE}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  # An empty CNI directory of our own: pods use the host network, and the
  # node's /etc/cni stays unread.
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "{d}/cni"
    bin_dir = "{d}/cni"
"#,
        socket = socket.display(),
    )
}

/// An OCI image archive (`oci-layout`, `index.json`, blobs) of a busybox
/// image named `name`, as `ctr images import` reads it, and its manifest
/// digest. The name travels in the annotation containerd's importer reads
/// for a full reference, `io.containerd.image.name`.
fn image_archive(name: &str, entrypoint: &[&str]) -> (Vec<u8>, String) {
    fn digest(data: &[u8]) -> String {
        let hash = Sha256::digest(data);
        hash.iter().fold(String::from("sha256:"), |mut hex, b| {
            let _ = write!(hex, "{b:02x}");
            hex
        })
    }
    let layer = busybox_rootfs(None);
    let layer_digest = digest(&layer);
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        // Distinct per import, like `docker import`.
        "created": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "config": { "Entrypoint": entrypoint, "Env": ["PATH=/bin"] },
        "rootfs": { "type": "layers", "diff_ids": [layer_digest] },
    })
    .to_string()
    .into_bytes();
    let config_digest = digest(&config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer.len(),
        }],
    })
    .to_string()
    .into_bytes();
    let manifest_digest = digest(&manifest);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest,
            "size": manifest.len(),
            "annotations": { "io.containerd.image.name": name },
            "platform": { "architecture": "amd64", "os": "linux" },
        }],
    })
    .to_string()
    .into_bytes();
    let mut tar = tar::Builder::new(Vec::new());
    let blob = |d: &str| format!("blobs/sha256/{}", d.trim_start_matches("sha256:"));
    let entries: [(String, &[u8]); 5] = [
        (
            "oci-layout".to_owned(),
            br#"{"imageLayoutVersion":"1.0.0"}"#,
        ),
        ("index.json".to_owned(), &index),
        (blob(&layer_digest), &layer),
        (blob(&config_digest), &config),
        (blob(&manifest_digest), &manifest),
    ];
    for (path, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(data.len() as u64);
        tar.append_data(&mut header, path, data)
            .expect("tar an archive entry");
    }
    (
        tar.into_inner().expect("finish the archive"),
        manifest_digest,
    )
}

/// Runs containerd with `config`, appending to its log in `dir`.
fn launch(dir: &Path, config: &Path) -> Child {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("containerd.log"))
        .expect("open containerd.log");
    let log_err = log.try_clone().expect("clone the log handle");
    Command::new("unshare")
        // containerd becomes pid 1 of a new pid namespace: when it dies the
        // kernel kills all in it (shims, containers). Private mounts and
        // network: nothing it mounts (overlays, shm, /run) or sets up
        // reaches the host. --kill-child: if unshare dies, so does
        // containerd.
        .args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc"])
        .args(["--net", "--propagation", "private"])
        .args(["sh", "-c", LAUNCH_SCRIPT, "containerd"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run unshare (util-linux) to start containerd: {e}"))
}

/// Whether both containerd's own API and its CRI plugin answer on `channel`.
async fn answers(channel: &Channel) -> bool {
    let native = containerd_client::Client::from(channel.clone());
    if native.version().version(()).await.is_err() {
        return false;
    }
    RuntimeServiceClient::new(channel.clone())
        .status(StatusRequest { verbose: false })
        .await
        .is_ok()
}

/// The first child of process `pid` (unshare's only child is containerd).
fn child_of(pid: u32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The daemon's processes and files, torn down on drop (also when start-up
/// fails half-way).
struct DaemonProcess {
    dir: PathBuf,
    scope: String,
    unshare: Child,
    containerd_pid: Option<u32>,
}

impl DaemonProcess {
    /// Waits until containerd and its CRI plugin answer on `socket`.
    async fn await_answer(&mut self, socket: &Path) -> Channel {
        let begun = Instant::now();
        let channel = loop {
            if socket.exists()
                && let Ok(channel) = containerd_client::connect(socket).await
                && answers(&channel).await
            {
                break channel;
            }
            if let Ok(Some(status)) = self.unshare.try_wait() {
                panic!(
                    "private containerd exited ({status}) before answering; log tail:\n{}",
                    self.log_tail()
                );
            }
            assert!(
                begun.elapsed() < START_TIMEOUT,
                "private containerd did not answer within {START_TIMEOUT:?}; log tail:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.containerd_pid = child_of(self.unshare.id());
        eprintln!(
            "private containerd at {} answered after {} ms",
            socket.display(),
            begun.elapsed().as_millis()
        );
        channel
    }

    fn log_tail(&self) -> String {
        let Ok(log) = fs::File::open(self.dir.join("containerd.log")) else {
            return "(no log)".to_owned();
        };
        let lines: Vec<String> = BufReader::new(log).lines().map_while(Result::ok).collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Kills containerd and waits until its pid namespace is empty.
    fn kill(&mut self) {
        if matches!(self.unshare.try_wait(), Ok(Some(_))) {
            return;
        }
        // SIGKILL to containerd, the namespace's init: the kernel kills the
        // rest and reaps them before containerd's own exit completes, so
        // unshare's wait returns only when the namespace is empty. While
        // unshare lives, containerd's pid cannot be reused.
        let killed = self.containerd_pid.is_some_and(|pid| {
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        });
        if !killed {
            let _ = self.unshare.kill();
        }
        let begun = Instant::now();
        while begun.elapsed() < STOP_TIMEOUT {
            if matches!(self.unshare.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

impl DaemonProcess {
    /// Unmounts anything still mounted under the directory; with private
    /// namespaces there should be nothing.
    fn unmount_leftovers(&self) {
        let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else {
            return;
        };
        let mut points: Vec<&str> = mountinfo
            .lines()
            .filter_map(|line| line.split(' ').nth(4))
            .filter(|point| Path::new(point).starts_with(&self.dir))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for point in points {
            eprintln!("unmounting leftover {point}");
            let _ = Command::new("umount").args(["-l", point]).status();
        }
    }

    /// Removes the cgroup trees the daemon's containers leave behind when
    /// they are killed with it, from every hierarchy (v1: one per
    /// controller; v2: the unified root).
    fn remove_cgroups(&self) {
        let root = Path::new("/sys/fs/cgroup");
        let mut trees = vec![root.join(&self.scope)];
        if let Ok(hierarchies) = fs::read_dir(root) {
            trees.extend(hierarchies.flatten().map(|h| h.path().join(&self.scope)));
        }
        for tree in trees.iter().filter(|t| t.is_dir()) {
            if let Err(e) = super::retry(|| super::remove_cgroup_tree(tree)) {
                eprintln!("cannot remove cgroup {}: {e}", tree.display());
            }
        }
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        self.kill();
        self.unmount_leftovers();
        self.remove_cgroups();
        if let Err(e) = super::retry(|| fs::remove_dir_all(&self.dir)) {
            eprintln!("cannot remove {}: {e}", self.dir.display());
        }
    }
}
