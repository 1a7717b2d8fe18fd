//! kubelet's side of a CRI runtime, played by `crictl`: pods and containers
//! made through CRI exactly as kubelet makes them, whichever runtime
//! answers (CRI-O in `crio.rs`, cri-dockerd in `cri_dockerd.rs`).
//!
//! [`Crictl`] is the set's `crictl` (`cri-tools-1.36/`) pointed at one
//! engine's socket, with a config file of the engine's own (never
//! `/etc/crictl.yaml`), and optionally run in the engine's network
//! namespace. [`Crictl::run_pod`] sends `RunPodSandbox` with kubelet's pod
//! labels (`newPodLabels`: the `io.kubernetes.pod.*` three) and
//! annotations (`kubernetes.io/config.source`, `.seen`), on the host
//! network with no shared PID namespace, its cgroups under `/<scope>`.
//! [`CriPod::create`] sends `CreateContainer` with kubelet's container
//! labels (`newContainerLabels`: the pod's three and
//! `io.kubernetes.container.name`) and annotations
//! (`newContainerAnnotations`: `io.kubernetes.container.hash`,
//! `.restartCount`, `.terminationMessagePath`, `.terminationMessagePolicy`,
//! `.type` `init` or `container`, `io.kubernetes.pod.terminationGracePeriod`),
//! the image by the id its pull resolved with the pod spec's name as
//! `user_specified_image`, the log path `<name>/<attempt>.log` in the
//! pod's log directory (which kubelet makes). Sources: kubernetes
//! `pkg/kubelet/kuberuntime/labels.go`, `kuberuntime_sandbox.go`,
//! `kuberuntime_container.go`.
//!
//! Everything made carries the label `safeprune.test=<scope>`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::pod::Pod;
use super::scoped_labels;

/// How long `crictl` waits for each answer: its default, 2 s, leaves a
/// loaded 2-core machine no room.
const CRICTL_TIMEOUT: &str = "30s";

/// How long a fixture waits for a container to reach a state.
const STATE_TIMEOUT: Duration = Duration::from_secs(20);

/// The set's `crictl`, pointed at one engine, with the directories where
/// kubelet's side keeps its files: `cri/` (the configs sent) and `pods/`
/// (the pods' log directories).
#[derive(Debug, Clone)]
pub struct Crictl {
    binary: PathBuf,
    endpoint: String,
    dir: PathBuf,
    scope: String,
    /// Run in this network namespace (`nsenter --net`), when set.
    netns: Option<PathBuf>,
}

impl Crictl {
    /// `crictl` at `binary` for the CRI `endpoint` (`unix://…`), keeping
    /// its config (`crictl.yaml`), the configs it sends (`cri/`) and the
    /// pods' logs (`pods/`) in `dir`; what it makes is labelled, and its
    /// pods' cgroups lie under, `scope`.
    pub fn new(binary: PathBuf, dir: &Path, endpoint: String, scope: &str) -> Self {
        for sub in ["cri", "pods"] {
            fs::create_dir_all(dir.join(sub)).expect("create crictl's directories");
        }
        fs::write(
            dir.join("crictl.yaml"),
            format!(
                "runtime-endpoint: {endpoint}\nimage-endpoint: {endpoint}\ntimeout: 30\npull-image-on-create: false\n"
            ),
        )
        .expect("write crictl.yaml");
        Self {
            binary,
            endpoint,
            dir: dir.to_path_buf(),
            scope: scope.to_owned(),
            netns: None,
        }
    }

    /// The same, run in the network namespace of process `pid` (CRI-O's
    /// stream server, which `exec` goes through, listens on 127.0.0.1
    /// there).
    #[must_use]
    pub fn in_net_of(mut self, pid: u32) -> Self {
        self.netns = Some(PathBuf::from(format!("/proc/{pid}/ns/net")));
        self
    }

    /// The CRI endpoint it speaks to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The directory of the pods' logs, `<dir>/pods` (kubelet's
    /// `/var/log/pods`).
    pub fn pods_dir(&self) -> PathBuf {
        self.dir.join("pods")
    }

    /// Whether the engine answers `crictl version` within 2 s: for the
    /// wait after its launch.
    pub fn answers(&self) -> bool {
        Command::new(&self.binary)
            .arg("--config")
            .arg(self.dir.join("crictl.yaml"))
            .args(["--runtime-endpoint", &self.endpoint, "--timeout", "2s"])
            .arg("version")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `crictl args…`, runtime and image endpoint this engine's.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = match &self.netns {
            Some(netns) => {
                let mut cmd = Command::new("nsenter");
                cmd.arg(format!("--net={}", netns.display()))
                    .arg(&self.binary);
                cmd
            }
            None => Command::new(&self.binary),
        };
        cmd.arg("--config")
            .arg(self.dir.join("crictl.yaml"))
            .args(["--runtime-endpoint", &self.endpoint])
            .args(["--image-endpoint", &self.endpoint])
            .args(["--timeout", CRICTL_TIMEOUT])
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `crictl` with `args`; its stdout, or its stderr as the error
    /// (what the runtime answered): for a test that expects a refusal.
    ///
    /// # Errors
    /// crictl's stderr when it exits non-zero.
    pub fn try_run(&self, args: &[&str]) -> Result<String, String> {
        let out = self.command(args).output().expect("run crictl");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }

    /// Runs `crictl` with `args`; its stdout. Panics with its output when
    /// it fails.
    pub fn ok(&self, args: &[&str]) -> String {
        self.try_run(args)
            .unwrap_or_else(|stderr| panic!("crictl {} failed: {stderr}", args.join(" ")))
    }

    /// Runs `crictl` with `args`, a command and what it takes, and `-o
    /// json`; its answer.
    pub fn json(&self, args: &[&str]) -> Value {
        // Right after the command: crictl takes no option after the first
        // argument.
        let (command, rest) = args.split_first().expect("a crictl command");
        let args: Vec<&str> = [*command, "-o", "json"]
            .into_iter()
            .chain(rest.iter().copied())
            .collect();
        let out = self.ok(&args);
        serde_json::from_str(&out)
            .unwrap_or_else(|e| panic!("crictl {} printed no JSON ({e}): {out}", args.join(" ")))
    }

    /// Every image CRI lists (`ListImages`, `crictl images -o json`): `id`,
    /// `repoTags`, `repoDigests`, `size`, `pinned`.
    pub fn images(&self) -> Vec<Value> {
        let list = self.json(&["images"]);
        list["images"].as_array().cloned().unwrap_or_default()
    }

    /// The CRI image id (as `ImageStatus` gives it) of image `reference`;
    /// what kubelet passes to `CreateContainer` once its pull has resolved
    /// the pod spec's image.
    pub fn image_id(&self, reference: &str) -> String {
        let status = self.json(&["inspecti", reference]);
        status["status"]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("no image {reference} in CRI: {status}"))
            .to_owned()
    }

    /// The status of container `id` (`ContainerStatus`, `crictl inspect`):
    /// `state`, `exitCode`, `finishedAt`, `imageId`, `mounts`...
    pub fn container_status(&self, id: &str) -> Value {
        self.json(&["inspect", id])["status"].clone()
    }

    /// The status of pod sandbox `id` (`PodSandboxStatus`, `crictl
    /// inspectp`): `state` (`SANDBOX_READY`, `SANDBOX_NOTREADY`),
    /// `metadata`, `labels`, `annotations`...
    pub fn sandbox_status(&self, id: &str) -> Value {
        self.json(&["inspectp", id])["status"].clone()
    }

    /// Runs a pod sandbox (`RunPodSandbox`, `crictl runp`) as kubelet does
    /// for a pod on the host network that shares no PID namespace:
    /// kubelet's labels and annotations, its log directory (which kubelet
    /// makes, and conmon needs), its cgroups under `/<scope>`.
    pub fn run_pod(&self, pod: &Pod) -> CriPod<'_> {
        self.try_run_pod(pod)
            .unwrap_or_else(|e| panic!("run pod {}/{}: {e}", pod.namespace, pod.name))
    }

    /// [`Self::run_pod`], the runtime's refusal as the error.
    ///
    /// # Errors
    /// crictl's stderr when `RunPodSandbox` fails.
    pub fn try_run_pod(&self, pod: &Pod) -> Result<CriPod<'_>, String> {
        let log_dir = self
            .pods_dir()
            .join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid));
        fs::create_dir_all(&log_dir).expect("create the pod's log directory");
        let config = json!({
            "metadata": {
                "name": pod.name,
                "namespace": pod.namespace,
                "uid": pod.uid,
                "attempt": pod.attempt,
            },
            "log_directory": log_dir,
            "labels": scoped_labels(&self.scope, pod.labels()),
            "annotations": {
                "kubernetes.io/config.source": "api",
                "kubernetes.io/config.seen": chrono::Utc::now().to_rfc3339(),
            },
            "linux": {
                // Under this engine's scope, which the teardown removes.
                "cgroup_parent": format!("/{}", self.scope),
                "security_context": { "namespace_options": namespace_options() },
            },
        });
        let path = self.dir.join("cri").join(format!(
            "pod-{}_{}_{}_{}.json",
            pod.namespace, pod.name, pod.uid, pod.attempt
        ));
        fs::write(&path, config.to_string()).expect("write the pod's sandbox config");
        let sandbox_id = self
            .try_run(&["runp", &path.to_string_lossy()])?
            .trim()
            .to_owned();
        Ok(CriPod {
            crictl: self,
            pod: pod.clone(),
            sandbox_id,
            config: path,
            log_dir,
        })
    }

    /// The CRI image spec kubelet sends for `reference`: the image id its
    /// pull resolved, and the name the pod spec gave.
    fn image_spec(&self, reference: &str) -> Value {
        json!({ "image": self.image_id(reference), "user_specified_image": reference })
    }
}

/// The namespaces kubelet asks for a pod on the host network whose
/// containers share no PID namespace (`NODE` = 2, `CONTAINER` = 1, `POD` =
/// 0): no infra container on CRI-O with `drop_infra_ctr`.
fn namespace_options() -> Value {
    json!({ "network": 2, "pid": 1, "ipc": 0 })
}

/// A stable hex hash of `parts` (FNV-1a), standing in for kubelet's
/// `HashContainer` of the container spec.
fn spec_hash(parts: &[&str]) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|p| p.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:x}")
}

/// One of a pod's containers, as kubelet asks CRI to make it.
#[derive(Debug, Clone, Default)]
pub struct CriContainer<'a> {
    /// Its name in the pod (`io.kubernetes.container.name`).
    pub name: &'a str,
    /// Its restart count: kubelet makes a new container of the same name
    /// with the next attempt, and its log `<name>/<attempt>.log`.
    pub attempt: u32,
    /// Its image as the pod spec names it. It is sent as kubelet sends it:
    /// the image id its pull resolved, with the name as
    /// `user_specified_image` (CRI-O refuses an id without it, measured).
    pub image: &'a str,
    /// Its command (the image's entrypoint is `sh`).
    pub cmd: &'a [&'a str],
    /// An init container of the pod spec: kubelet's annotation
    /// `io.kubernetes.container.type` says `init`, else `container`.
    pub init: bool,
    /// Labels besides kubelet's.
    pub labels: &'a [(&'a str, &'a str)],
    /// Image volumes (KEP-4639, CRI `Mount.image`): `(container path,
    /// image reference)`, read only, each sent by id with its name, as
    /// for [`Self::image`]. CRI-O 1.36 mounts them (measured).
    pub image_volumes: &'a [(&'a str, &'a str)],
}

/// A pod sandbox run through a [`Crictl`]; its containers are made through
/// CRI as kubelet makes them. Nothing happens on drop: the engine's
/// teardown takes it.
pub struct CriPod<'a> {
    crictl: &'a Crictl,
    /// The pod, as kubelet names it.
    pub pod: Pod,
    /// Its sandbox id (`RunPodSandbox`'s answer).
    pub sandbox_id: String,
    /// The sandbox config it was run with, which `crictl create` sends
    /// again with each container, as kubelet does.
    config: PathBuf,
    log_dir: PathBuf,
}

impl CriPod<'_> {
    /// The pod's log directory, `<dir>/pods/<ns>_<name>_<uid>`.
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// Creates and starts container `name` of `image` running `cmd`.
    /// Returns its id.
    pub fn container(&self, name: &str, image: &str, cmd: &[&str]) -> String {
        let id = self.create(&CriContainer {
            name,
            image,
            cmd,
            ..CriContainer::default()
        });
        self.start(&id);
        id
    }

    /// Creates, starts and waits for `container` until it has exited, as
    /// kubelet runs an init container; returns its id.
    pub fn run_to_exit(&self, container: &CriContainer) -> String {
        let id = self.create(container);
        self.start(&id);
        self.wait_exited(&id);
        id
    }

    /// Creates (does not start) `container`; returns its id.
    pub fn create(&self, container: &CriContainer) -> String {
        self.try_create(container).unwrap_or_else(|e| {
            panic!(
                "create container {} in {}: {e}",
                container.name, self.pod.name
            )
        })
    }

    /// [`Self::create`], the runtime's refusal as the error.
    ///
    /// # Errors
    /// crictl's stderr when `CreateContainer` fails.
    pub fn try_create(&self, container: &CriContainer) -> Result<String, String> {
        let crictl = self.crictl;
        let CriContainer {
            name,
            attempt,
            image,
            cmd,
            init,
            labels,
            image_volumes,
        } = container;
        fs::create_dir_all(self.log_dir.join(name)).expect("create the container's log dir");
        let mut all_labels = scoped_labels(&crictl.scope, self.pod.labels());
        all_labels.insert(
            "io.kubernetes.container.name".to_owned(),
            (*name).to_owned(),
        );
        all_labels.extend(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let mounts: Vec<Value> = image_volumes
            .iter()
            .map(|(path, reference)| {
                json!({
                    "container_path": path,
                    "readonly": true,
                    "image": crictl.image_spec(reference),
                })
            })
            .collect();
        let annotations = HashMap::from([
            // kubelet's hash of the container spec, in hex.
            ("io.kubernetes.container.hash", spec_hash(&[name, image])),
            ("io.kubernetes.container.restartCount", attempt.to_string()),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log".to_owned(),
            ),
            (
                "io.kubernetes.container.terminationMessagePolicy",
                "File".to_owned(),
            ),
            (
                "io.kubernetes.container.type",
                if *init { "init" } else { "container" }.to_owned(),
            ),
            ("io.kubernetes.pod.terminationGracePeriod", "30".to_owned()),
        ]);
        let config = json!({
            "metadata": { "name": name, "attempt": attempt },
            "image": crictl.image_spec(image),
            "command": cmd,
            "log_path": format!("{name}/{attempt}.log"),
            "mounts": mounts,
            "labels": all_labels,
            "annotations": annotations,
            "linux": {
                // Not below the engine's own score: docs/engines.md, "Test engines".
                "resources": { "oom_score_adj": 0 },
                "security_context": { "namespace_options": namespace_options() },
            },
        });
        let short = self
            .sandbox_id
            .trim_start_matches("sha256:")
            .get(..12)
            .unwrap_or(&self.sandbox_id);
        let path = crictl
            .dir
            .join("cri")
            .join(format!("container-{short}-{name}-{attempt}.json"));
        fs::write(&path, config.to_string()).expect("write the container config");
        let out = crictl.try_run(&[
            "create",
            &self.sandbox_id,
            &path.to_string_lossy(),
            &self.config.to_string_lossy(),
        ])?;
        Ok(out.trim().to_owned())
    }

    /// Starts container `id` (`StartContainer`).
    pub fn start(&self, id: &str) {
        self.crictl.ok(&["start", id]);
    }

    /// Stops container `id` (`StopContainer`: TERM, then KILL after 1 s).
    pub fn stop_container(&self, id: &str) {
        self.crictl.ok(&["stop", "--timeout", "1", id]);
    }

    /// Removes container `id` (`RemoveContainer`), as kubelet's GC does.
    pub fn remove_container(&self, id: &str) {
        self.crictl.ok(&["rm", id]);
    }

    /// Waits until container `id` has exited; returns its exit code.
    ///
    /// # Panics
    /// When it has not exited within 20 s.
    pub fn wait_exited(&self, id: &str) -> i64 {
        let begun = Instant::now();
        loop {
            let status = self.crictl.container_status(id);
            if status["state"] == "CONTAINER_EXITED" {
                return status["exitCode"]
                    .as_i64()
                    .unwrap_or_else(|| panic!("no exit code for {id}: {status}"));
            }
            assert!(
                begun.elapsed() < STATE_TIMEOUT,
                "container {id} did not exit: {}",
                status["state"]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the sandbox (`StopPodSandbox`): its containers stop, and it
    /// is `NotReady`, as when kubelet ends the pod.
    pub fn stop(&self) {
        self.crictl.ok(&["stopp", &self.sandbox_id]);
    }

    /// Stops and removes the sandbox with its containers
    /// (`StopPodSandbox`, `RemovePodSandbox`), as kubelet does once the
    /// pod is deleted.
    pub fn remove(self) {
        self.stop();
        self.crictl.ok(&["rmp", &self.sandbox_id]);
    }
}
