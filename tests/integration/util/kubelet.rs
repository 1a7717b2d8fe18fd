//! kubelet's side of a CRI runtime, played over CRI's own gRPC API (the
//! `k8s-cri` clients on a tonic channel to the runtime's unix socket): pods
//! and containers made exactly as kubelet makes them, whichever runtime
//! answers (CRI-O in `crio.rs`, cri-dockerd in `cri_dockerd.rs`, the CRI
//! plugin of a private containerd).
//!
//! [`Kubelet`] is pointed at one engine's socket, keeps the pods' log
//! directories under its `pods/`, and labels what it makes with the
//! engine's scope. [`Kubelet::run_pod`] sends `RunPodSandbox` with
//! kubelet's pod labels (`newPodLabels`: the `io.kubernetes.pod.*` three)
//! and annotations (`kubernetes.io/config.source`, `.seen`), on the host
//! network with no shared PID namespace, its cgroups under `/<scope>`.
//! [`CriPod::create`] sends `CreateContainer` with kubelet's container
//! labels (`newContainerLabels`: the pod's three and
//! `io.kubernetes.container.name`) and annotations
//! (`newContainerAnnotations`: `io.kubernetes.container.hash`,
//! `.restartCount`, `.terminationMessagePath`, `.terminationMessagePolicy`,
//! `.type` `init` or `container`, `io.kubernetes.pod.terminationGracePeriod`),
//! the image by the id its pull resolved with the pod spec's name as
//! `user_specified_image`, the log path `<name>/<attempt>.log` in the
//! pod's log directory (which kubelet makes), and the pod's sandbox config
//! again, as kubelet sends it. Sources: kubernetes
//! `pkg/kubelet/kuberuntime/labels.go`, `kuberuntime_sandbox.go`,
//! `kuberuntime_container.go`.
//!
//! The API is synchronous, as the fixtures' call sites are: each call runs
//! on a fresh current-thread tokio runtime in a thread of its own, over a
//! fresh connection, with a deadline of 30 s ([`DEADLINE`]); so it works
//! from inside a test's runtime, of either flavour, and never waits on it.
//! Where a call may be refused (`try_*`), the error is the gRPC status's
//! message, as the runtime wrote it (CRI-O's "image is in use by a
//! container").
//!
//! Everything made carries the label `safeprune.test=<scope>`.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use containerd_client::tonic::transport::{Channel, Endpoint};
use containerd_client::tonic::{Response, Status};
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    Container, ContainerConfig, ContainerMetadata, ContainerState, ContainerStatus,
    ContainerStatusRequest, CreateContainerRequest, ExecSyncRequest, ExecSyncResponse, Image,
    ImageFsInfoRequest, ImageFsInfoResponse, ImageSpec, ImageStatusRequest, LinuxContainerConfig,
    LinuxContainerResources, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, ListContainersRequest, ListImagesRequest, ListPodSandboxRequest,
    Mount, NamespaceMode, NamespaceOption, PodSandbox, PodSandboxConfig, PodSandboxMetadata,
    PodSandboxStatus, PodSandboxStatusRequest, RemoveContainerRequest, RemoveImageRequest,
    RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest, StatusRequest,
    StatusResponse, StopContainerRequest, StopPodSandboxRequest, VersionRequest, VersionResponse,
};

use super::pod::Pod;
use super::scoped_labels;

/// How long each CRI call may take: a loaded 2-core machine needs more
/// than crictl's default 2 s (the harness gave crictl 30 s too).
pub const DEADLINE: Duration = Duration::from_secs(30);

/// How long [`Kubelet::answers`] waits: for the wait after a launch.
const PROBE_DEADLINE: Duration = Duration::from_secs(2);

/// How long a fixture waits for a container to reach a state.
const STATE_TIMEOUT: Duration = Duration::from_secs(20);

/// CRI's two services on one connection.
struct Clients {
    runtime: RuntimeServiceClient<Channel>,
    images: ImageServiceClient<Channel>,
}

/// kubelet's side of one CRI runtime: its socket, the directory where it
/// keeps the pods' log directories (`pods/`), and the scope its pods and
/// containers are labelled with and their cgroups lie under.
#[derive(Debug, Clone)]
pub struct Kubelet {
    socket: PathBuf,
    /// `unix://<socket>`, as kubelet's `--container-runtime-endpoint`.
    endpoint: String,
    dir: PathBuf,
    scope: String,
}

impl Kubelet {
    /// kubelet's side of the CRI runtime at unix socket `socket`, keeping
    /// the pods' logs in `<dir>/pods` (kubelet's `/var/log/pods`); what it
    /// makes is labelled, and its pods' cgroups lie under, `scope`.
    pub fn new(socket: &Path, dir: &Path, scope: &str) -> Self {
        fs::create_dir_all(dir.join("pods")).expect("create kubelet's pods directory");
        Self {
            socket: socket.to_path_buf(),
            endpoint: format!("unix://{}", socket.display()),
            dir: dir.to_path_buf(),
            scope: scope.to_owned(),
        }
    }

    /// The CRI endpoint it speaks to, `unix://<socket>`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The socket it speaks to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The directory of the pods' logs, `<dir>/pods` (kubelet's
    /// `/var/log/pods`).
    pub fn pods_dir(&self) -> PathBuf {
        self.dir.join("pods")
    }

    /// Runs `call` on CRI's clients over a fresh connection, on a
    /// current-thread runtime in a thread of its own, every request failing
    /// after `deadline`; its answer, or the gRPC status's message (or what
    /// kept the connection from being made).
    fn call_within<T, F, Fut>(&self, deadline: Duration, call: F) -> Result<T, String>
    where
        T: Send,
        F: FnOnce(Clients) -> Fut + Send,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let socket = self.socket.as_path();
        std::thread::scope(|threads| {
            threads
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a runtime for a CRI call");
                    runtime.block_on(async move {
                        let channel = connect(socket, deadline)
                            .await
                            .map_err(|e| format!("connect to {}: {e}", socket.display()))?;
                        let clients = Clients {
                            runtime: RuntimeServiceClient::new(channel.clone()),
                            images: ImageServiceClient::new(channel),
                        };
                        call(clients)
                            .await
                            .map(Response::into_inner)
                            .map_err(|status| message(&status))
                    })
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// [`Self::call_within`] with the deadline [`DEADLINE`].
    fn call<T, F, Fut>(&self, call: F) -> Result<T, String>
    where
        T: Send,
        F: FnOnce(Clients) -> Fut + Send,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        self.call_within(DEADLINE, call)
    }

    /// Whether the runtime answers `Version` within 2 s: for the wait
    /// after its launch.
    pub fn answers(&self) -> bool {
        self.call_within(PROBE_DEADLINE, |mut c| async move {
            c.runtime.version(VersionRequest::default()).await
        })
        .is_ok()
    }

    /// `Version`: the runtime's name and version.
    pub fn version(&self) -> VersionResponse {
        self.call(|mut c| async move { c.runtime.version(VersionRequest::default()).await })
            .unwrap_or_else(|e| panic!("Version at {}: {e}", self.endpoint))
    }

    /// `Status`, verbose (as `crictl info` asks): the runtime's conditions,
    /// and in `info` what the runtime adds, such as CRI-O's `config` (a
    /// JSON text; [`Self::info`]).
    pub fn status(&self) -> StatusResponse {
        self.call(|mut c| async move { c.runtime.status(StatusRequest { verbose: true }).await })
            .unwrap_or_else(|e| panic!("Status at {}: {e}", self.endpoint))
    }

    /// The entry `key` of the verbose `Status`'s `info`, read as JSON (as
    /// `crictl info` prints it): CRI-O's `config` holds its configuration.
    ///
    /// # Panics
    /// When there is no such entry, or it is no JSON.
    pub fn info(&self, key: &str) -> serde_json::Value {
        let status = self.status();
        let text = status
            .info
            .get(key)
            .unwrap_or_else(|| panic!("no {key} in Status's info: {:?}", status.info.keys()));
        serde_json::from_str(text).unwrap_or_else(|e| panic!("Status's {key} is no JSON ({e})"))
    }

    /// Every image CRI lists (`ListImages`): `id`, `repo_tags`,
    /// `repo_digests`, `size`, `pinned`.
    pub fn images(&self) -> Vec<Image> {
        self.call(|mut c| async move { c.images.list_images(ListImagesRequest::default()).await })
            .unwrap_or_else(|e| panic!("ListImages at {}: {e}", self.endpoint))
            .images
    }

    /// The image ids CRI lists now.
    pub fn image_ids(&self) -> BTreeSet<String> {
        self.images().into_iter().map(|i| i.id).collect()
    }

    /// `ImageStatus` of `reference` (a name or an id): the image, or `None`
    /// where CRI has none such.
    ///
    /// # Errors
    /// The runtime's answer when `ImageStatus` fails.
    pub fn try_image_status(&self, reference: &str) -> Result<Option<Image>, String> {
        let request = ImageStatusRequest {
            image: Some(ImageSpec {
                image: reference.to_owned(),
                ..ImageSpec::default()
            }),
            verbose: false,
        };
        self.call(|mut c| async move { c.images.image_status(request).await })
            .map(|answer| answer.image)
    }

    /// [`Self::try_image_status`]; panics when the call fails.
    pub fn image_status(&self, reference: &str) -> Option<Image> {
        self.try_image_status(reference)
            .unwrap_or_else(|e| panic!("ImageStatus of {reference}: {e}"))
    }

    /// The CRI image id (as `ImageStatus` gives it) of image `reference`;
    /// what kubelet passes to `CreateContainer` once its pull has resolved
    /// the pod spec's image.
    pub fn image_id(&self, reference: &str) -> String {
        self.image_status(reference)
            .unwrap_or_else(|| panic!("no image {reference} in CRI"))
            .id
    }

    /// `ImageFsInfo`: the file systems the runtime keeps images and
    /// containers' writable layers on.
    pub fn image_fs_info(&self) -> ImageFsInfoResponse {
        self.call(|mut c| async move { c.images.image_fs_info(ImageFsInfoRequest {}).await })
            .unwrap_or_else(|e| panic!("ImageFsInfo at {}: {e}", self.endpoint))
    }

    /// Removes image `id` (`RemoveImage`), as kubelet's image GC does.
    ///
    /// # Errors
    /// The runtime's refusal (CRI-O: "image is in use by a container").
    pub fn remove_image(&self, id: &str) -> Result<(), String> {
        let request = RemoveImageRequest {
            image: Some(ImageSpec {
                image: id.to_owned(),
                ..ImageSpec::default()
            }),
        };
        self.call(|mut c| async move { c.images.remove_image(request).await })
            .map(|_| ())
    }

    /// What `crictl rmi --prune` does, as cri-tools v1.36.0 has it
    /// (`cmd/crictl/image.go`, the `rmi` command, with `k8s.io/cri-client`'s
    /// checks): every image `ListImages` lists and does not report
    /// `pinned` (skipped since crictl v1.30) is a candidate; for every
    /// container `ListContainers` lists (no filter: of any state), the id
    /// `ImageStatus` gives for its `image.image` is not (a failed status is
    /// logged and skipped); each candidate left is looked up again
    /// (`ImageStatus`) and removed by id (`RemoveImage`), a refused removal
    /// ignored ("there might be races"). crictl removes them concurrently,
    /// this one by one; neither order changes what goes. Returns the ids
    /// CRI removed.
    ///
    /// # Panics
    /// Where crictl exits non-zero: `ListImages` or `ListContainers` fails,
    /// or a candidate's `ImageStatus` fails or finds no image (after the
    /// others have been tried, as crictl aggregates those errors).
    pub fn rmi_prune(&self) -> BTreeSet<String> {
        let mut remove: HashMap<String, bool> = HashMap::new();
        for image in self.images() {
            if !image.pinned {
                remove.insert(image.id, true);
            }
        }
        for container in self.containers() {
            let image = container.image.map(|spec| spec.image).unwrap_or_default();
            match self.crictl_image_status(&image) {
                Ok(status) => {
                    let id = status.map(|i| i.id).unwrap_or_default();
                    remove.insert(id, false);
                }
                Err(e) => eprintln!("rmi --prune: image status request for {image:?} failed: {e}"),
            }
        }
        let mut removed = BTreeSet::new();
        let mut errors = Vec::new();
        let mut candidates: Vec<String> = remove
            .into_iter()
            .filter_map(|(id, remove)| remove.then_some(id))
            .collect();
        candidates.sort();
        for id in candidates {
            match self.crictl_image_status(&id) {
                Err(e) => errors.push(format!("image status request for {id:?} failed: {e}")),
                Ok(None) => errors.push(format!("no such image {id}")),
                Ok(Some(_)) => match self.remove_image(&id) {
                    Ok(()) => {
                        removed.insert(id);
                    }
                    Err(e) => eprintln!("rmi --prune: {id} not removed (ignored, as crictl): {e}"),
                },
            }
        }
        assert!(errors.is_empty(), "rmi --prune failed: {errors:?}");
        removed
    }

    /// `ImageStatus` as crictl's CRI client (`k8s.io/cri-client`,
    /// `imageStatusV1`) takes it: an image without an id or size is an
    /// error.
    fn crictl_image_status(&self, reference: &str) -> Result<Option<Image>, String> {
        let image = self.try_image_status(reference)?;
        if let Some(image) = &image
            && (image.id.is_empty() || image.size == 0)
        {
            return Err(format!("Id or size of image {reference:?} is not set"));
        }
        Ok(image)
    }

    /// Every container CRI lists (`ListContainers`, no filter: of any
    /// state).
    pub fn containers(&self) -> Vec<Container> {
        self.call(|mut c| async move {
            c.runtime
                .list_containers(ListContainersRequest::default())
                .await
        })
        .unwrap_or_else(|e| panic!("ListContainers at {}: {e}", self.endpoint))
        .containers
    }

    /// The ids of every container CRI lists, of any state.
    pub fn container_ids(&self) -> BTreeSet<String> {
        self.containers().into_iter().map(|c| c.id).collect()
    }

    /// Every pod sandbox CRI lists (`ListPodSandbox`, no filter: ready or
    /// not).
    pub fn pods(&self) -> Vec<PodSandbox> {
        self.call(|mut c| async move {
            c.runtime
                .list_pod_sandbox(ListPodSandboxRequest::default())
                .await
        })
        .unwrap_or_else(|e| panic!("ListPodSandbox at {}: {e}", self.endpoint))
        .items
    }

    /// The status of container `id` (`ContainerStatus`, verbose as `crictl
    /// inspect` asked): `state`, `exit_code`, `finished_at` (ns since the
    /// epoch), `image_id`, `mounts`...
    ///
    /// # Errors
    /// The runtime's answer when `ContainerStatus` fails.
    pub fn try_container_status(&self, id: &str) -> Result<ContainerStatus, String> {
        let request = ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose: true,
        };
        let answer = self.call(|mut c| async move { c.runtime.container_status(request).await })?;
        answer
            .status
            .ok_or_else(|| format!("ContainerStatus of {id} holds no status"))
    }

    /// [`Self::try_container_status`]; panics when it fails.
    pub fn container_status(&self, id: &str) -> ContainerStatus {
        self.try_container_status(id)
            .unwrap_or_else(|e| panic!("ContainerStatus of {id}: {e}"))
    }

    /// The status of pod sandbox `id` (`PodSandboxStatus`, verbose as
    /// `crictl inspectp` asked): `state` (`SandboxReady`,
    /// `SandboxNotready`), `metadata`, `labels`, `annotations`...
    ///
    /// # Errors
    /// The runtime's answer when `PodSandboxStatus` fails (cri-dockerd's
    /// "No such container" for a sandbox pruned behind its back).
    pub fn try_sandbox_status(&self, id: &str) -> Result<PodSandboxStatus, String> {
        let request = PodSandboxStatusRequest {
            pod_sandbox_id: id.to_owned(),
            verbose: true,
        };
        let answer =
            self.call(|mut c| async move { c.runtime.pod_sandbox_status(request).await })?;
        answer
            .status
            .ok_or_else(|| format!("PodSandboxStatus of {id} holds no status"))
    }

    /// [`Self::try_sandbox_status`]; panics when it fails.
    pub fn sandbox_status(&self, id: &str) -> PodSandboxStatus {
        self.try_sandbox_status(id)
            .unwrap_or_else(|e| panic!("PodSandboxStatus of {id}: {e}"))
    }

    /// Runs `cmd` in container `id` and waits for it (`ExecSync`, no
    /// timeout of its own: the call's deadline bounds it); its output and
    /// exit code.
    ///
    /// # Errors
    /// The runtime's answer when `ExecSync` fails.
    pub fn try_exec_sync(&self, id: &str, cmd: &[&str]) -> Result<ExecSyncResponse, String> {
        let request = ExecSyncRequest {
            container_id: id.to_owned(),
            cmd: cmd.iter().map(|&a| a.to_owned()).collect(),
            timeout: 0,
        };
        self.call(|mut c| async move { c.runtime.exec_sync(request).await })
    }

    /// Runs `cmd` in container `id` (`ExecSync`); its stdout.
    ///
    /// # Panics
    /// When the call fails or `cmd` exits non-zero (as `crictl exec` then
    /// does).
    pub fn exec(&self, id: &str, cmd: &[&str]) -> String {
        let answer = self
            .try_exec_sync(id, cmd)
            .unwrap_or_else(|e| panic!("ExecSync {cmd:?} in {id}: {e}"));
        assert_eq!(
            answer.exit_code,
            0,
            "{cmd:?} in {id} exited {}: {}",
            answer.exit_code,
            String::from_utf8_lossy(&answer.stderr)
        );
        String::from_utf8_lossy(&answer.stdout).into_owned()
    }

    /// Runs a pod sandbox (`RunPodSandbox`) as kubelet does for a pod on
    /// the host network that shares no PID namespace: kubelet's labels and
    /// annotations, its log directory (which kubelet makes, and conmon
    /// needs), its cgroups under `/<scope>`.
    pub fn run_pod(&self, pod: &Pod) -> CriPod<'_> {
        self.try_run_pod(pod)
            .unwrap_or_else(|e| panic!("run pod {}/{}: {e}", pod.namespace, pod.name))
    }

    /// [`Self::run_pod`], the runtime's refusal as the error.
    ///
    /// # Errors
    /// The runtime's answer when `RunPodSandbox` fails.
    pub fn try_run_pod(&self, pod: &Pod) -> Result<CriPod<'_>, String> {
        let log_dir = self
            .pods_dir()
            .join(format!("{}_{}_{}", pod.namespace, pod.name, pod.uid));
        fs::create_dir_all(&log_dir).expect("create the pod's log directory");
        let config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: pod.name.clone(),
                uid: pod.uid.clone(),
                namespace: pod.namespace.clone(),
                attempt: pod.attempt,
            }),
            log_directory: log_dir.to_string_lossy().into_owned(),
            labels: scoped_labels(&self.scope, pod.labels()),
            annotations: HashMap::from([
                ("kubernetes.io/config.source".to_owned(), "api".to_owned()),
                (
                    "kubernetes.io/config.seen".to_owned(),
                    chrono::Utc::now().to_rfc3339(),
                ),
            ]),
            linux: Some(LinuxPodSandboxConfig {
                // Under this engine's scope, which the teardown removes.
                cgroup_parent: format!("/{}", self.scope),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(namespace_options()),
                    ..LinuxSandboxSecurityContext::default()
                }),
                ..LinuxPodSandboxConfig::default()
            }),
            ..PodSandboxConfig::default()
        };
        let request = RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        };
        let sandbox_id = self
            .call(|mut c| async move { c.runtime.run_pod_sandbox(request).await })?
            .pod_sandbox_id;
        Ok(CriPod {
            kubelet: self,
            pod: pod.clone(),
            sandbox_id,
            config,
            log_dir,
        })
    }

    /// The CRI image spec kubelet sends for `reference`: the image id its
    /// pull resolved, and the name the pod spec gave.
    fn image_spec(&self, reference: &str) -> ImageSpec {
        ImageSpec {
            image: self.image_id(reference),
            user_specified_image: reference.to_owned(),
            ..ImageSpec::default()
        }
    }

    /// Runs `call` on the runtime service; panics with `what` when it fails.
    fn runtime_ok<T, F, Fut>(&self, what: &str, call: F) -> T
    where
        T: Send,
        F: FnOnce(RuntimeServiceClient<Channel>) -> Fut + Send,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        self.call(|c| call(c.runtime))
            .unwrap_or_else(|e| panic!("{what}: {e}"))
    }
}

/// A tonic channel to the unix socket at `socket`, every request on it
/// failing after `deadline` (as `src/runtime/grpc.rs` connects).
async fn connect(
    socket: &Path,
    deadline: Duration,
) -> Result<Channel, containerd_client::tonic::transport::Error> {
    let socket = socket.to_path_buf();
    // tonic wants a URI; the connector ignores it.
    Endpoint::from_static("http://[::]")
        .connect_timeout(deadline)
        .timeout(deadline)
        .connect_with_connector(tower::service_fn(move |_| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
}

/// What a refused call says: the status's message, or its code where the
/// runtime gave none.
fn message(status: &Status) -> String {
    if status.message().is_empty() {
        format!("{:?}", status.code())
    } else {
        status.message().to_owned()
    }
}

/// The namespaces kubelet asks for a pod on the host network whose
/// containers share no PID namespace (`NODE` = 2, `CONTAINER` = 1, `POD` =
/// 0): no infra container on CRI-O with `drop_infra_ctr`.
fn namespace_options() -> NamespaceOption {
    NamespaceOption {
        network: NamespaceMode::Node as i32,
        pid: NamespaceMode::Container as i32,
        ipc: NamespaceMode::Pod as i32,
        ..NamespaceOption::default()
    }
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
    /// for [`Self::image`]. CRI-O 1.36 and containerd 2.1 mount them
    /// (measured).
    pub image_volumes: &'a [(&'a str, &'a str)],
}

/// A pod sandbox run through a [`Kubelet`]; its containers are made through
/// CRI as kubelet makes them. Nothing happens on drop: the engine's
/// teardown takes it.
pub struct CriPod<'a> {
    kubelet: &'a Kubelet,
    /// The pod, as kubelet names it.
    pub pod: Pod,
    /// Its sandbox id (`RunPodSandbox`'s answer).
    pub sandbox_id: String,
    /// The sandbox config it was run with, which kubelet sends again with
    /// each container.
    config: PodSandboxConfig,
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
    /// The runtime's answer when `CreateContainer` fails.
    pub fn try_create(&self, container: &CriContainer) -> Result<String, String> {
        let kubelet = self.kubelet;
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
        let mut all_labels = scoped_labels(&kubelet.scope, self.pod.labels());
        all_labels.insert(
            "io.kubernetes.container.name".to_owned(),
            (*name).to_owned(),
        );
        all_labels.extend(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let mounts: Vec<Mount> = image_volumes
            .iter()
            .map(|(path, reference)| Mount {
                container_path: (*path).to_owned(),
                readonly: true,
                image: Some(kubelet.image_spec(reference)),
                ..Mount::default()
            })
            .collect();
        let annotations: HashMap<String, String> = [
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
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let config = ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: (*name).to_owned(),
                attempt: *attempt,
            }),
            image: Some(kubelet.image_spec(image)),
            command: cmd.iter().map(|&a| a.to_owned()).collect(),
            log_path: format!("{name}/{attempt}.log"),
            mounts,
            labels: all_labels,
            annotations,
            linux: Some(LinuxContainerConfig {
                // Not below the engine's own score: docs/engines.md, "Test engines".
                resources: Some(LinuxContainerResources {
                    oom_score_adj: 0,
                    ..LinuxContainerResources::default()
                }),
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(namespace_options()),
                    ..LinuxContainerSecurityContext::default()
                }),
            }),
            ..ContainerConfig::default()
        };
        let request = CreateContainerRequest {
            pod_sandbox_id: self.sandbox_id.clone(),
            config: Some(config),
            sandbox_config: Some(self.config.clone()),
        };
        kubelet
            .call(|mut c| async move { c.runtime.create_container(request).await })
            .map(|answer| answer.container_id)
    }

    /// Starts container `id` (`StartContainer`).
    pub fn start(&self, id: &str) {
        let request = StartContainerRequest {
            container_id: id.to_owned(),
        };
        self.kubelet
            .runtime_ok(&format!("StartContainer {id}"), |mut r| async move {
                r.start_container(request).await
            });
    }

    /// Stops container `id` (`StopContainer`: TERM, then KILL after 1 s).
    pub fn stop_container(&self, id: &str) {
        let request = StopContainerRequest {
            container_id: id.to_owned(),
            timeout: 1,
        };
        self.kubelet
            .runtime_ok(&format!("StopContainer {id}"), |mut r| async move {
                r.stop_container(request).await
            });
    }

    /// Removes container `id` (`RemoveContainer`), as kubelet's GC does.
    pub fn remove_container(&self, id: &str) {
        let request = RemoveContainerRequest {
            container_id: id.to_owned(),
        };
        self.kubelet
            .runtime_ok(&format!("RemoveContainer {id}"), |mut r| async move {
                r.remove_container(request).await
            });
    }

    /// Waits until container `id` has exited (`ContainerStatus` says
    /// `CONTAINER_EXITED`); returns its exit code.
    ///
    /// # Panics
    /// When it has not exited within 20 s.
    pub fn wait_exited(&self, id: &str) -> i32 {
        let begun = Instant::now();
        loop {
            let status = self.kubelet.container_status(id);
            if status.state == ContainerState::ContainerExited as i32 {
                return status.exit_code;
            }
            assert!(
                begun.elapsed() < STATE_TIMEOUT,
                "container {id} did not exit: {:?}",
                status.state()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the sandbox (`StopPodSandbox`): its containers stop, and it
    /// is `NotReady`, as when kubelet ends the pod.
    pub fn stop(&self) {
        let request = StopPodSandboxRequest {
            pod_sandbox_id: self.sandbox_id.clone(),
        };
        self.kubelet.runtime_ok(
            &format!("StopPodSandbox {}", self.sandbox_id),
            |mut r| async move { r.stop_pod_sandbox(request).await },
        );
    }

    /// Stops and removes the sandbox with its containers
    /// (`StopPodSandbox`, `RemovePodSandbox`), as kubelet does once the
    /// pod is deleted.
    pub fn remove(self) {
        self.stop();
        let request = RemovePodSandboxRequest {
            pod_sandbox_id: self.sandbox_id.clone(),
        };
        self.kubelet.runtime_ok(
            &format!("RemovePodSandbox {}", self.sandbox_id),
            |mut r| async move { r.remove_pod_sandbox(request).await },
        );
    }
}
