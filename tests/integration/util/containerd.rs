//! A private containerd for each test, and fixtures to fill it the way
//! kubelet and `ctr` would.
//!
//! [`PrivateContainerd::start`] runs its own `containerd` as an
//! [`EngineProcess`] under `/tmp/spc-XXXXXX`, which holds its config, root,
//! state, socket and log. It never touches the node's containerd (nor the
//! one Docker manages). Its CRI plugin has `restrict_oom_score_adj = true`
//! (root here lacks `CAP_SYS_RESOURCE`, and sandboxes would ask for -998:
//! docs/engines.md, "Test engines") and the sandbox image
//! `registry.k8s.io/pause:3.6`, which
//! [`PrivateContainerd::start`] imports (a busybox that sleeps and exits on
//! TERM: there is no registry here). Pods use the host network, which is
//! the private network namespace, unless a test asks for the pod network:
//! a CNI bridge inside that namespace (Debian's containernetworking-plugins).
//! The config and its CRI switch are in `containerd/daemon.rs`.
//!
//! Pods get the cgroup parent `/<scope>` and `ctr` containers the cgroup
//! `/<scope>/<id>`, so every cgroup a killed daemon leaves lies in the one
//! tree the teardown removes. Start-up, until both containerd's API and CRI
//! answer, takes about 0.1 s (measured: 70 to 130 ms on 2 cores); the
//! sandbox image import adds about as much.
//!
//! [`PrivateContainerd::start_version`] runs either release a node may
//! have: Debian 12's containerd 1.6.20 ([`ContainerdVersion::V1_6`], what
//! [`PrivateContainerd::start`] runs) or Debian unstable's containerd 2.x
//! ([`ContainerdVersion::V2`], [`PrivateContainerd::start_v2`]), found
//! under `$SAFEPRUNE_TEST_RUNTIMES` (`scripts/runtimes.sh`); where they
//! are not, the test fails saying how to fetch them. Each runs with its own `ctr`
//! and shim. [`containerd_tests!`] makes of one test body a test on each
//! release (`<name>::on_1_6`, `<name>::on_2`): every test that starts a private
//! containerd runs on both, except those about what differs between the
//! releases (`containerd_v2.rs`).
//!
//! Everything the fixtures create carries the label `safeprune.test=<scope>`
//! with the engine's own scope.

mod archive;
mod daemon;
mod pods;

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use containerd_client::services::v1::{
    Container, GetContainerRequest, GetRequest, ListRequest as ListLeasesRequest,
    ListResourcesRequest,
};
use containerd_client::tonic::Request;
use containerd_client::tonic::transport::Channel;
use containerd_client::types::v1::Status as TaskStatus;
use containerd_client::with_namespace;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;

#[allow(
    unused_imports,
    reason = "each test binary uses its own subset of the harness"
)]
pub use self::pods::{IMAGE_VOLUME_PATH, ImageVolumePod, PodContainer, image_volume_mount};

use self::archive::images_archive;
use self::daemon::Binaries;
use super::engine::EngineProcess;
use super::node::http_get;
use super::{Missing, TEST_LABEL};

/// The namespace the CRI plugin keeps kubelet's objects in.
pub const CRI_NAMESPACE: &str = "k8s.io";

/// The sandbox image the private CRI plugin is configured with.
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.6";

/// How long a fixture waits for a container or task to reach a state.
const STATE_TIMEOUT: Duration = Duration::from_secs(20);

/// An image the harness imported.
#[derive(Debug, Clone)]
pub struct Imported {
    /// Its target: the manifest digest.
    pub digest: String,
    /// Its config digest: the image id, as CRI and Docker name it.
    pub config_digest: String,
    /// The bytes of its manifest, config and layer.
    pub content_bytes: u64,
    /// Its one layer's digest, uncompressed: its chain id, which names the
    /// unpacked snapshot a container's snapshot is prepared from.
    pub layer_digest: String,
}

/// The containerd release a [`PrivateContainerd`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainerdVersion {
    /// Debian 12's containerd 1.6.20 (package `containerd`): `containerd`,
    /// its shim and `ctr` on PATH.
    V1_6,
    /// containerd 2.x, Debian unstable's package `containerd` (2.1.9 when
    /// this was written), unpacked by `scripts/runtimes.sh` into
    /// `$SAFEPRUNE_TEST_RUNTIMES/containerd/`.
    V2,
}

/// One test per containerd release from one test body. For each `name`,
/// an `async fn name(version: ContainerdVersion)` of the calling module,
/// it makes a module `name` of two tests: `on_1_6` runs the body on
/// Debian's 1.6.20, `on_2` on 2.x. A test's full name is thus
/// `<subject>::<name>::on_1_6`: `cargo nextest run --test integration
/// containerd_adapter::` runs both releases, adding `on_2` only the
/// newer. The body starts its engine with
/// [`PrivateContainerd::start_version`]`(version)` and `.required()`, so
/// that without the runtimes the 2.x test fails saying how to fetch them;
/// where the releases truly differ, the body
/// branches on `version` and says which measured fact it follows.
///
/// A name may carry the test attribute its body needs; the default is
/// `#[tokio::test]`:
///
/// ```ignore
/// containerd_tests! {
///     inventory_reads_pods,
///     #[tokio::test(flavor = "multi_thread")]
///     plan_then_run,
/// }
/// ```
#[allow(
    unused_macros,
    reason = "benches/speed/containerd.rs includes this harness and runs one release"
)]
macro_rules! containerd_tests {
    () => {};
    (#[$test:meta] $name:ident $(, $($rest:tt)*)?) => {
        mod $name {
            use $crate::util::containerd::ContainerdVersion;

            #[$test]
            async fn on_1_6() {
                super::$name(ContainerdVersion::V1_6).await;
            }

            #[$test]
            async fn on_2() {
                super::$name(ContainerdVersion::V2).await;
            }
        }
        $($crate::util::containerd::containerd_tests! { $($rest)* })?
    };
    ($name:ident $(, $($rest:tt)*)?) => {
        $crate::util::containerd::containerd_tests! { #[tokio::test] $name $(, $($rest)*)? }
    };
}
#[allow(
    unused_imports,
    reason = "benches/speed/containerd.rs includes this harness and runs one release"
)]
pub(crate) use containerd_tests;

/// A lease and what it holds, as containerd's leases API lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseResources {
    pub id: String,
    pub labels: BTreeMap<String, String>,
    /// `(type, id)` of each resource, such as `("snapshots/overlayfs", key)`.
    pub resources: Vec<(String, String)>,
}

/// A containerd of the test's own, with the CRI plugin.
pub struct PrivateContainerd {
    channel: Channel,
    socket: PathBuf,
    binaries: Binaries,
    /// Last, so the clients are gone before the daemon is torn down.
    process: EngineProcess,
}

/// Debian's containerd, which is always there (scripts/deps.sh).
fn debian() -> Binaries {
    Binaries::find(ContainerdVersion::V1_6).expect("Debian's containerd needs no runtimes")
}

impl PrivateContainerd {
    /// [`Self::start_version`], with its root (image store and snapshots)
    /// on a fresh ext4 file system of `megabytes`: a disk the test can fill.
    ///
    /// # Errors
    /// As [`Self::start_version`], before anything is mounted.
    pub async fn start_on_small_fs(
        version: ContainerdVersion,
        megabytes: u64,
    ) -> Result<Self, Missing> {
        let binaries = Binaries::find(version)?;
        let mut process = EngineProcess::new("containerd", "spc-");
        process.mount_small_fs("root", megabytes);
        Ok(Self::start_in(process, binaries).await)
    }

    /// Where the CRI plugin stores unpacked images: its image file system.
    pub fn image_fs(&self) -> PathBuf {
        self.process
            .path("root")
            .join("io.containerd.snapshotter.v1.overlayfs")
    }

    /// Starts a private containerd, waits until both its own API and CRI
    /// answer, and imports the sandbox image into `k8s.io`.
    ///
    /// # Panics
    /// When containerd cannot be started or does not answer within 30 s; the
    /// message holds the tail of its log.
    pub async fn start() -> Self {
        Self::start_in(EngineProcess::new("containerd", "spc-"), debian()).await
    }

    /// [`Self::start`] on containerd 2.x: `start_version(V2)`.
    ///
    /// ```ignore
    /// let containerd = PrivateContainerd::start_v2().await.required();
    /// ```
    ///
    /// # Errors
    /// [`Missing`] when `$SAFEPRUNE_TEST_RUNTIMES` is unset.
    pub async fn start_v2() -> Result<Self, Missing> {
        Self::start_version(ContainerdVersion::V2).await
    }

    /// [`Self::start`] on the containerd release `version`, with the
    /// config of that release and its own `ctr` and shim.
    ///
    /// # Errors
    /// [`Missing`] for [`ContainerdVersion::V2`] when
    /// `$SAFEPRUNE_TEST_RUNTIMES` is unset (never for 1.6).
    ///
    /// # Panics
    /// As [`Self::start`]; and when `$SAFEPRUNE_TEST_RUNTIMES` is set but
    /// lacks `containerd/`.
    pub async fn start_version(version: ContainerdVersion) -> Result<Self, Missing> {
        let binaries = Binaries::find(version)?;
        Ok(Self::start_in(EngineProcess::new("containerd", "spc-"), binaries).await)
    }

    async fn start_in(mut process: EngineProcess, binaries: Binaries) -> Self {
        let socket = process.path(daemon::SOCKET);
        let channel = daemon::launch(&mut process, &binaries, "config.toml", true).await;
        let containerd = Self {
            channel,
            socket,
            binaries,
            process,
        };
        containerd.import_image(
            CRI_NAMESPACE,
            SANDBOX_IMAGE,
            &["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
        );
        containerd
    }

    /// Kills containerd, as a crash would; its root and state stay for
    /// [`Self::restart`].
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Freezes containerd (SIGSTOP): a hung engine, whose socket accepts
    /// and never answers, until [`Self::thaw`].
    pub fn freeze(&self) {
        self.process.freeze();
    }

    /// Lets a frozen containerd go on.
    pub fn thaw(&self) {
        self.process.thaw();
    }

    /// Kills containerd, as a crash would, and starts it again on the same
    /// root, state and socket; with `cri: false` the CRI plugin is off, so
    /// CRI calls fail as on a node whose CRI plugin does not load. Every
    /// task dies with the old daemon (containers and images stay).
    pub async fn restart(&mut self, cri: bool) {
        self.process.stop();
        // A killed containerd leaves its socket; the answer must come from
        // the new one.
        let _ = fs::remove_file(&self.socket);
        self.channel = daemon::launch(
            &mut self.process,
            &self.binaries,
            "config-restart.toml",
            cri,
        )
        .await;
    }

    /// The pid of containerd, the init of the node's namespaces: its
    /// network namespace is where pods on the pod network are reached.
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("containerd has answered")
    }

    /// The gRPC calls containerd has served so far, its own API's and
    /// CRI's, by `service/method` (containerd counts them for its metrics,
    /// `grpc_server_started_total`).
    pub fn grpc_calls(&self) -> BTreeMap<String, u64> {
        let pid = self.pid();
        let body = std::thread::spawn(move || {
            // This thread alone enters containerd's network namespace.
            let netns = fs::File::open(format!("/proc/{pid}/ns/net")).expect("containerd's netns");
            nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("enter containerd's netns");
            let address = daemon::METRICS_ADDRESS.parse().expect("an address");
            http_get(address, "/v1/metrics").expect("containerd's metrics")
        })
        .join()
        .expect("read containerd's metrics");
        assert_eq!(body.0, 200, "{}", body.1);
        body.1
            .lines()
            .filter_map(|line| {
                let labels = line.strip_prefix("grpc_server_started_total{")?;
                let (labels, count) = labels.split_once("} ")?;
                let label = |key: &str| {
                    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
                    let end = labels[start..].find('"')? + start;
                    Some(&labels[start..end])
                };
                let name = format!("{}/{}", label("grpc_service")?, label("grpc_method")?);
                // Counts print as floats ("1.234567e+06" when large).
                let count = count.trim().parse::<f64>().ok()?;
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                Some((name, count.round() as u64))
            })
            .filter(|(_, count)| *count > 0)
            .collect()
    }

    /// The release this containerd is.
    pub fn version(&self) -> ContainerdVersion {
        self.binaries.version
    }

    /// Whether its release is `major.minor` or later: for the facts that
    /// changed within 2.x (docs/engines.md, "containerd 2.x").
    pub fn release_at_least(&self, major: u32, minor: u32) -> bool {
        let mut parts = self
            .binaries
            .release
            .split('.')
            .map(|p| p.parse::<u32>().unwrap_or(0));
        let found = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
        found >= (major, minor)
    }

    /// Its release, `1.6.20` or `2.1.9`.
    pub fn release(&self) -> &str {
        &self.binaries.release
    }

    /// The socket path, `/tmp/spc-XXXXXX/c.sock`.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The socket path as a string, for `ContainerdRuntime::connect`.
    pub fn endpoint(&self) -> String {
        self.socket.to_string_lossy().into_owned()
    }

    /// `name` in the engine's directory (`root` is its root).
    pub fn path(&self, name: &str) -> std::path::PathBuf {
        self.process.path(name)
    }

    /// The value of `safeprune.test` on everything the fixtures create.
    pub fn scope(&self) -> &str {
        self.process.scope()
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

    /// `ctr` of this containerd's release, pointed at it and `namespace`.
    pub fn ctr(&self, namespace: &str) -> Command {
        let mut cmd = Command::new(self.binaries.ctr());
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
    /// distinct image (its creation time is part of its config).
    pub fn import_image(&self, namespace: &str, name: &str, entrypoint: &[&str]) -> Imported {
        self.import_images(namespace, &[name], entrypoint)
            .pop()
            .expect("one image imported")
    }

    /// Imports one busybox image per name, distinct images over one shared
    /// layer, in one `ctr images import` (and one unpack).
    pub fn import_images(
        &self,
        namespace: &str,
        names: &[&str],
        entrypoint: &[&str],
    ) -> Vec<Imported> {
        self.import_archive(namespace, names, images_archive(names, entrypoint, None))
    }

    /// Imports a busybox image named `name` into `namespace` whose layer is
    /// its own, holding a file of `extra`'s bytes (and the name's): an
    /// image of a known size, that shares no layer.
    pub fn import_image_with_extra(&self, namespace: &str, name: &str, extra: &str) -> Imported {
        self.import_archive(
            namespace,
            &[name],
            images_archive(&[name], &["sh"], Some(extra)),
        )
        .pop()
        .expect("one image imported")
    }

    fn import_archive(
        &self,
        namespace: &str,
        names: &[&str],
        (archive, imported): (Vec<u8>, Vec<Imported>),
    ) -> Vec<Imported> {
        let mut child = self
            .ctr(namespace)
            .args(["images", "import", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run ctr images import");
        let written = child.stdin.take().expect("ctr stdin").write_all(&archive);
        let output = child.wait_with_output().expect("wait for ctr");
        assert!(
            output.status.success() && written.is_ok(),
            "import {names:?} into {namespace}: {written:?} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        imported
    }

    /// Imports a busybox image whose entrypoint is `sh`.
    pub fn import_busybox_image(&self, namespace: &str, name: &str) -> Imported {
        self.import_image(namespace, name, &["sh"])
    }

    /// Gives image `source` the extra name `target` in `namespace`.
    pub fn tag_image(&self, namespace: &str, source: &str, target: &str) {
        self.ctr_ok(namespace, &["images", "tag", source, target]);
    }

    /// CRI's `ImageStatus` of `name` (verbose), once CRI knows it: the
    /// CRI plugin learns of an image imported natively (`ctr images
    /// import`) from containerd's events, a moment later (measured on
    /// 2.3.4: not always at once), and kubelet asks again until it does.
    ///
    /// # Panics
    /// When CRI does not know it within 10 s.
    pub async fn cri_image_status(&self, name: &str) -> k8s_cri::v1::ImageStatusResponse {
        let mut images = k8s_cri::v1::image_service_client::ImageServiceClient::new(self.channel());
        let begun = Instant::now();
        loop {
            let status = images
                .image_status(k8s_cri::v1::ImageStatusRequest {
                    image: Some(k8s_cri::v1::ImageSpec {
                        image: name.to_owned(),
                        ..k8s_cri::v1::ImageSpec::default()
                    }),
                    verbose: true,
                })
                .await
                .expect("CRI ImageStatus")
                .into_inner();
            if status.image.is_some() {
                return status;
            }
            assert!(
                begun.elapsed() < Duration::from_secs(10),
                "CRI does not know {name} 10 s after its import"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
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
        let cgroup = format!("/{}/{id}", self.scope());
        let label = format!("{TEST_LABEL}={}", self.scope());
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
        let label = format!("{TEST_LABEL}={}", self.scope());
        self.ctr_ok(
            namespace,
            &["containers", "create", "--label", &label, image, id],
        );
    }

    /// The native record of container `id` in `namespace`, as containerd's
    /// API returns it (its spec and extensions as JSON in `Any`s).
    pub async fn native_container(&self, namespace: &str, id: &str) -> Container {
        let request = with_namespace!(GetContainerRequest { id: id.to_owned() }, namespace);
        Box::pin(self.native().containers().get(request))
            .await
            .unwrap_or_else(|e| panic!("get container {namespace}/{id}: {e}"))
            .into_inner()
            .container
            .unwrap_or_else(|| panic!("no record for container {namespace}/{id}"))
    }

    /// Every lease in `namespace` with the resources it holds, by id.
    pub async fn leases(&self, namespace: &str) -> Vec<LeaseResources> {
        let request = with_namespace!(ListLeasesRequest { filters: vec![] }, namespace);
        let leases = Box::pin(self.native().leases().list(request))
            .await
            .unwrap_or_else(|e| panic!("list leases in {namespace}: {e}"))
            .into_inner()
            .leases;
        let mut all = Vec::new();
        for lease in leases {
            let request = with_namespace!(
                ListResourcesRequest {
                    id: lease.id.clone()
                },
                namespace
            );
            let resources = Box::pin(self.native().leases().list_resources(request))
                .await
                .unwrap_or_else(|e| panic!("list the resources of lease {}: {e}", lease.id))
                .into_inner()
                .resources;
            all.push(LeaseResources {
                id: lease.id,
                labels: lease.labels.into_iter().collect(),
                resources: resources.into_iter().map(|r| (r.r#type, r.id)).collect(),
            });
        }
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
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
            let status = Box::pin(self.native().tasks().get(request))
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
}
