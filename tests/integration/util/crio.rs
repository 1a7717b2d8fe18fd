//! A private CRI-O 1.36.3 for a test, and fixtures that fill it the way
//! kubelet would, through CRI (kubelet's side, shared with cri-dockerd, is
//! `kubelet.rs`).
//!
//! [`PrivateCrio::start`] runs `crio` from `$SAFEPRUNE_TEST_RUNTIMES`
//! (`crio/`, with its `pinns` and `copyimg`) as an [`EngineProcess`] under
//! `/tmp/spo-XXXXXX`: its config, storage root and run root, socket, log,
//! pod logs and every other path it would otherwise take from `/etc`,
//! `/var` or `/run`. Where the set is absent the start is [`Missing`]
//! (and its tests are left out of the run: `.config/nextest.toml`). It never touches the node's own CRI-O, nor
//! `/etc/containers`, nor the network:
//!
//! - `--config` is a file of its own and `--config-dir` an empty directory
//!   of its own (else `/etc/crio/crio.conf.d` is read); registries
//!   (`--registries-conf`: none, short names off), signature policy
//!   (accept anything), storage config, mounts file, CDI, hooks and NRI
//!   (off) are its own too.
//! - Nothing is ever pulled. Images are put into its storage with the
//!   set's `copyimg` (the storage library CRI-O runs on) from OCI archives
//!   the harness builds from Debian's static busybox
//!   ([`PrivateCrio::import_image`]); CRI-O lists them at once, while it
//!   runs. copyimg runs in a mount namespace of its own whose `/var/tmp`
//!   and `/var/lib` are the directory's: it unpacks there whatever TMPDIR
//!   says, and keeps a blob cache in `/var/lib/containers/cache`. The
//!   pause image [`PAUSE_IMAGE`] is imported before start. CRI-O pins it
//!   by itself (`pinned: true` in CRI, measured), besides
//!   [`CrioOptions::pinned_images`].
//! - Runtime: Debian's runc (Debian's crun 1.8.1 refuses the OCI spec
//!   1.3.0 CRI-O writes) and conmon, `cgroupfs`, and the default
//!   `drop_infra_ctr = true`: pods that share no PID namespace run no infra
//!   container, so the pause image is never run (a sandbox would get
//!   `oom_score_adj -998`, which root here may not set: docs/engines.md,
//!   "Test engines").
//! - No CNI: pods use the host network, which is the engine's private
//!   network namespace, so no plugin is ever invoked. CRI-O starts without
//!   a CNI config and reports `NetworkReady false` (`NetworkPluginNotReady`,
//!   "no CNI configuration file in …/cni"), which host-network pods do not
//!   need (measured).
//!
//! CRI-O runs in fresh pid, mount and network namespaces, under a shell
//! that is the namespace's init: conmon daemonizes, and an orphaned conmon
//! is re-parented to the init, which CRI-O as pid 1 never reaps (one zombie
//! per container, measured); the shell's `wait` reaps them. Killing the
//! init ends CRI-O, every conmon and container, and takes every mount
//! (overlays, image volumes, pinned namespaces) with the mount namespace;
//! [`EngineProcess`] then removes the cgroups under `/<scope>` and the
//! directory. kubelet's side ([`Kubelet`]) reaches the socket through the
//! file system, and runs commands in containers with CRI's `ExecSync`,
//! which goes over the socket too (not through CRI-O's stream server on
//! 127.0.0.1 in the engine's network namespace, as crictl's `exec` did).
//! CRI-O answers `Version` 0.08 to 0.19 s after its launch, and
//! the pause image's import before it takes 0.13 to 0.5 s (measured: four
//! engines starting at once on 2 cores; up to 1 s on a busy machine).
//!
//! Everything the fixtures create carries the label `safeprune.test=<scope>`
//! with the engine's own scope.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use containerd_client::tonic::transport::Channel;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{ContainerStatus, Image};
use serde_json::Value;

use super::engine::EngineProcess;
use super::kubelet::{CriContainer, CriPod, Kubelet};
use super::oci;
use super::pod::Pod;
use super::{Missing, busybox_rootfs, test_runtime};

/// The runtime set of `$SAFEPRUNE_TEST_RUNTIMES` that holds crio, pinns
/// and copyimg.
const CRIO_SET: &str = "crio";

/// The pause image CRI-O is configured with (`pause_image`), imported at
/// start: a busybox whose entrypoint sleeps until TERM.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The pause image's entrypoint: `pause_command = ""` makes CRI-O run the
/// image's own, should a pod ever get an infra container.
const PAUSE_ENTRYPOINT: &[&str] = &["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"];

/// The `created` of every imported image's config: fixed, so that one
/// variant is one image id however often it is imported.
const CREATED: &str = "2026-01-01T00:00:00Z";

/// Brings up loopback (the stream server listens on 127.0.0.1), then runs
/// the command after the script (`env … crio …`) and waits for it. The
/// shell stays as the pid namespace's init: its `wait` reaps the conmon
/// processes re-parented to it, which CRI-O as init would leave as
/// zombies. Plain lines: `a && b &` would put the whole chain in the
/// background.
const EXEC: &str = r#"ip link set lo up || exit 1
"$@" &
wait $!"#;

/// Runs copyimg (`$3`, with its arguments after it) in a mount namespace
/// of its own whose `/var/tmp` is `$1` and `/var/lib` is `$2`: copyimg
/// ignores TMPDIR and unpacks an archive under `/var/tmp`, and keeps a blob
/// cache in `/var/lib/containers/cache` (measured with strace); neither
/// may land on the host.
const COPYIMG: &str =
    r#"mount -n --bind "$1" /var/tmp && mount -n --bind "$2" /var/lib && shift 2 && exec "$@""#;

/// What a [`PrivateCrio`] is started with besides the defaults.
#[derive(Debug, Clone, Default)]
pub struct CrioOptions {
    /// `enable_pod_events = true`: CRI-O streams container events
    /// (`GetContainerEvents`, `crictl events`); off, as in CRI-O's default,
    /// the stream closes at once.
    pub pod_events: bool,
    /// `pinned_images`, besides [`PAUSE_IMAGE`], which CRI-O pins anyway:
    /// exact names, `prefix*` globs or `*keyword*`.
    pub pinned_images: Vec<String>,
    /// A pod network: the CNI bridge the private containerd has (Debian's
    /// containernetworking-plugins), inside the engine's own network
    /// namespace. Without it CRI-O runs host-network pods only.
    pub pod_network: bool,
}

/// The binaries a private CRI-O runs with.
#[derive(Debug, Clone)]
struct Tools {
    crio: PathBuf,
    pinns: PathBuf,
    copyimg: PathBuf,
    runc: PathBuf,
    conmon: PathBuf,
}

impl Tools {
    /// The set's binaries and Debian's runc and conmon.
    fn find() -> Result<Self, Missing> {
        let set = test_runtime(CRIO_SET, "CRI-O")?;
        Ok(Self {
            crio: set.join("crio"),
            pinns: set.join("pinns"),
            copyimg: set.join("copyimg"),
            runc: on_path("runc"),
            conmon: on_path("conmon"),
        })
    }
}

/// `program` as found on PATH.
///
/// # Panics
/// When it is not there: scripts/deps.sh installs it.
fn on_path(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!("{program} is not on PATH: run scripts/deps.sh (Debian package {program})")
        })
}

/// A CRI-O of the test's own.
pub struct PrivateCrio {
    tools: Tools,
    /// kubelet's side: CRI at the socket.
    ctl: Kubelet,
    socket: PathBuf,
    root: PathBuf,
    runroot: PathBuf,
    /// Last: its drop kills CRI-O and removes everything.
    process: EngineProcess,
}

impl PrivateCrio {
    /// Starts a private CRI-O with the defaults and waits until it answers.
    ///
    /// ```ignore
    /// let crio = PrivateCrio::start().await.required();
    /// ```
    ///
    /// # Errors
    /// [`Missing`] when `$SAFEPRUNE_TEST_RUNTIMES` is unset.
    ///
    /// # Panics
    /// When CRI-O cannot be started or does not answer within 30 s; the
    /// message holds the tail of its log. When runc or conmon is missing.
    pub async fn start() -> Result<Self, Missing> {
        Self::start_with(CrioOptions::default()).await
    }

    /// [`Self::start`] with `options`.
    ///
    /// # Errors
    /// As [`Self::start`].
    ///
    /// # Panics
    /// As [`Self::start`].
    pub async fn start_with(options: CrioOptions) -> Result<Self, Missing> {
        let tools = Tools::find()?;
        let begun = Instant::now();
        let process = EngineProcess::new("crio", "spo-");
        let dir = process.dir().to_path_buf();
        for sub in [
            "conf.d",
            "registries.d",
            "policies",
            "cni",
            "cni-bin",
            "cdi",
            "hooks",
            "keys",
            "tmp",
            "var-lib",
        ] {
            fs::create_dir_all(dir.join(sub)).expect("create the private CRI-O's directories");
        }
        write_configs(&dir, &tools, &options);
        let socket = dir.join("crio.sock");
        let ctl = Kubelet::new(&socket, &dir, process.scope());
        let crio = Self {
            ctl,
            socket,
            root: dir.join("root"),
            runroot: dir.join("runroot"),
            tools,
            process,
        };
        crio.import(PAUSE_IMAGE, "pause", PAUSE_ENTRYPOINT);
        let imported = begun.elapsed();
        let crio = crio.launch().await;
        eprintln!(
            "private CRI-O started in {} ms (the pause image's import: {} ms)",
            begun.elapsed().as_millis(),
            imported.as_millis()
        );
        Ok(crio)
    }

    /// Runs CRI-O on the directory and waits until CRI's `Version`
    /// answers on its socket.
    async fn launch(mut self) -> Self {
        let path = |name: &str| self.process.path(name).to_string_lossy().into_owned();
        let args = [
            "env".to_owned(),
            // containers/storage reads /etc/containers/storage.conf unless
            // told otherwise; Go's temporary files go to TMPDIR.
            format!("CONTAINERS_STORAGE_CONF={}", path("storage.conf")),
            format!("TMPDIR={}", path("tmp")),
            self.tools.crio.to_string_lossy().into_owned(),
            "--config".to_owned(),
            path("crio.conf"),
            "--config-dir".to_owned(),
            path("conf.d"),
            "--registries-conf".to_owned(),
            path("registries.conf"),
            "--registries-conf-dir".to_owned(),
            path("registries.d"),
            "--root".to_owned(),
            path("root"),
            "--runroot".to_owned(),
            path("runroot"),
            "--listen".to_owned(),
            path("crio.sock"),
            "--cgroup-manager".to_owned(),
            "cgroupfs".to_owned(),
        ];
        self.process.launch(EXEC, args);
        let (ctl, socket) = (self.ctl.clone(), self.socket.clone());
        self.process
            .await_answer(async || (socket.exists() && ctl.answers()).then_some(()))
            .await;
        self
    }

    /// The CRI endpoint, `unix:///tmp/spo-XXXXXX/crio.sock`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The storage root (`--root`): `ImageFsInfo` names
    /// `<root>/overlay-images` as the image file system (measured).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The storage run root (`--runroot`): per-container state.
    pub fn runroot(&self) -> &Path {
        &self.runroot
    }

    /// The engine's directory, `/tmp/spo-XXXXXX`.
    pub fn dir(&self) -> &Path {
        self.process.dir()
    }

    /// The value of `safeprune.test` on everything the fixtures create.
    pub fn scope(&self) -> &str {
        self.process.scope()
    }

    /// The pid of the namespace's init (the shell CRI-O runs under): its
    /// network namespace is the pods' host network.
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("CRI-O has answered")
    }

    /// How many times CRI-O has served each CRI call since it started, by
    /// method (`ContainerStatus`, `RemoveContainer`, …): its
    /// `operations_total` counter, read from its metrics socket.
    ///
    /// # Panics
    /// When the socket does not answer with the counter.
    pub fn operations(&self) -> std::collections::BTreeMap<String, u64> {
        use std::io::{Read, Write};
        let mut stream = std::os::unix::net::UnixStream::connect(self.dir().join("metrics.sock"))
            .expect("CRI-O's metrics socket");
        stream
            .write_all(b"GET /metrics HTTP/1.0\r\nHost: crio\r\n\r\n")
            .expect("ask CRI-O for its metrics");
        let mut body = String::new();
        stream
            .read_to_string(&mut body)
            .expect("read CRI-O's metrics");
        let counts: std::collections::BTreeMap<String, u64> = body
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.split_once('{')?;
                if !name.ends_with("operations_total") {
                    return None;
                }
                let (labels, count) = rest.split_once("} ")?;
                let start = labels.find("operation=\"")? + "operation=\"".len();
                let end = labels[start..].find('"')? + start;
                // Counts print as floats ("1.234567e+06" when large).
                let count = count.trim().parse::<f64>().ok()?;
                #[expect(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    reason = "a count of calls"
                )]
                Some((labels[start..end].to_owned(), count.round() as u64))
            })
            .collect();
        assert!(
            !counts.is_empty(),
            "no operations_total in CRI-O's metrics: {body}"
        );
        counts
    }

    /// CRI-O's log so far (`crio.log` in the directory).
    pub fn log(&self) -> String {
        fs::read_to_string(self.process.path("crio.log")).unwrap_or_default()
    }

    /// A gRPC channel to CRI-O's socket, for CRI's typed clients.
    ///
    /// # Panics
    /// When the socket does not take the connection.
    pub async fn channel(&self) -> Channel {
        containerd_client::connect(&self.socket)
            .await
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.socket.display()))
    }

    /// A CRI runtime service client, as kubelet has.
    pub async fn cri(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel().await)
    }

    /// A CRI image service client, as kubelet has.
    pub async fn image_service(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel().await)
    }

    /// kubelet's side of this CRI-O: CRI at its socket, for every call a
    /// test makes as kubelet (`pods()`, `sandbox_status()`, `exec()`,
    /// `status()`, `image_fs_info()`, `rmi_prune()`...).
    pub fn ctl(&self) -> &Kubelet {
        &self.ctl
    }

    /// Every image CRI lists (`ListImages`): `id` (bare hex), `repo_tags`,
    /// `repo_digests`, `size`, `pinned`.
    pub fn images(&self) -> Vec<Image> {
        self.ctl.images()
    }

    /// The image ids CRI lists now.
    pub fn image_ids(&self) -> std::collections::BTreeSet<String> {
        self.ctl.image_ids()
    }

    /// The container ids CRI lists now, of any state.
    pub fn container_ids(&self) -> std::collections::BTreeSet<String> {
        self.ctl.container_ids()
    }

    /// The CRI image id (bare hex, as `ImageStatus` gives it) of image
    /// `reference`; what kubelet passes to `CreateContainer` once its pull
    /// has resolved the pod spec's image.
    pub fn image_id(&self, reference: &str) -> String {
        self.ctl.image_id(reference)
    }

    /// The status of container `id` (`ContainerStatus`): `state`,
    /// `exit_code`, `finished_at`, `image_id`, `mounts`...
    pub fn container_status(&self, id: &str) -> ContainerStatus {
        self.ctl.container_status(id)
    }

    /// Imports a busybox image (`/bin/sh`, `/bin/sleep`, entrypoint `sh`)
    /// named `name` (a full reference, such as
    /// `docker.io/library/app:1`), whose one layer also holds `/extra` with
    /// `variant` as its text; returns its CRI image id (bare hex: its
    /// config digest). Distinct variants are distinct images; the same
    /// variant again, under another name, is the same image with one more
    /// name (measured: one id, two `repoTags`); a name already taken moves
    /// to the new image. It goes in with the set's `copyimg`, into the
    /// storage CRI-O runs on, and CRI-O sees it at once.
    ///
    /// # Panics
    /// When `copyimg` fails, or CRI-O does not list the image under `name`
    /// with the id of its config.
    pub fn import_image(&self, name: &str, variant: &str) -> String {
        self.import(name, variant, &["sh"])
    }

    /// [`Self::import_image`] with `entrypoint`; before CRI-O runs, the id
    /// is not checked against it.
    fn import(&self, name: &str, variant: &str, entrypoint: &[&str]) -> String {
        let (archive, config_digest) = oci_archive(&busybox_rootfs(Some(variant)), entrypoint);
        let file = tempfile::Builder::new()
            .prefix("import-")
            .suffix(".tar")
            .tempfile_in(self.process.path("tmp"))
            .expect("create the image archive");
        fs::write(file.path(), archive).expect("write the image archive");
        self.import_archive(file.path(), name);
        let id = config_digest.trim_start_matches("sha256:").to_owned();
        if self.process.pid().is_some() {
            assert_eq!(self.image_id(name), id, "CRI-O's id of {name}");
        }
        id
    }

    /// Puts the image of the OCI archive at `archive` into CRI-O's storage
    /// under `name`, as [`Self::import_image`] does.
    ///
    /// # Panics
    /// When `copyimg` fails.
    pub fn import_archive(&self, archive: &Path, name: &str) {
        let out = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", COPYIMG])
            .arg("copyimg")
            .arg(self.process.path("tmp"))
            .arg(self.process.path("var-lib"))
            .arg(&self.tools.copyimg)
            .env("CONTAINERS_STORAGE_CONF", self.process.path("storage.conf"))
            .arg("--root")
            .arg(&self.root)
            .arg("--runroot")
            .arg(&self.runroot)
            .args(["--storage-driver", "overlay"])
            .arg("--signature-policy")
            .arg(self.process.path("policy.json"))
            .args(["--image-name", name])
            .arg("--import-from")
            .arg(format!("oci-archive:{}", archive.display()))
            .stdin(Stdio::null())
            .output()
            .expect("run copyimg");
        assert!(
            out.status.success(),
            "copyimg of {name} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs a pod sandbox (`RunPodSandbox`) as kubelet does for a pod on
    /// the host network that shares no PID namespace (`kubelet.rs`): the
    /// `io.kubernetes.pod.*` labels, its log directory (which kubelet
    /// makes, and conmon needs), its cgroups under `/<scope>`. With
    /// `drop_infra_ctr` such a pod runs no infra container.
    pub fn run_pod(&self, pod: &Pod) -> CrioPod<'_> {
        self.ctl.run_pod(pod)
    }

    /// [`Self::run_pod`], CRI-O's refusal as the error.
    ///
    /// # Errors
    /// CRI-O's answer when `RunPodSandbox` fails.
    pub fn try_run_pod(&self, pod: &Pod) -> Result<CrioPod<'_>, String> {
        self.ctl.try_run_pod(pod)
    }
}

/// A pod sandbox run on a [`PrivateCrio`] (`kubelet.rs`).
pub type CrioPod<'a> = CriPod<'a>;

/// One of a pod's containers, as kubelet asks CRI-O to make it
/// (`kubelet.rs`).
pub type CrioContainer<'a> = CriContainer<'a>;

/// Where CRI-O finds CNI plugins: Debian's with a pod network, whose
/// config it writes in the directory's `cni/`; else an empty directory.
fn cni_plugins(dir: &Path, options: &CrioOptions) -> PathBuf {
    if !options.pod_network {
        return dir.join("cni-bin");
    }
    fs::write(
        dir.join("cni/10-safeprune-test.conflist"),
        super::engine::cni_conflist(dir),
    )
    .expect("write the pod network's CNI config");
    PathBuf::from(super::engine::CNI_BIN_DIR)
}

/// Writes the engine's config files into `dir`.
fn write_configs(dir: &Path, tools: &Tools, options: &CrioOptions) {
    let d = dir.display();
    let pinned = options
        .pinned_images
        .iter()
        .map(|name| serde_json::to_string(name).expect("a name as a TOML string"))
        .collect::<Vec<_>>()
        .join(", ");
    let crio_conf = format!(
        r#"# A private CRI-O: every path its own, nothing pulled, no CNI.
[crio]
root = "{d}/root"
runroot = "{d}/runroot"
storage_driver = "overlay"
log_dir = "{d}/pods"
version_file = "{d}/version"
version_file_persist = "{d}/version-persist"
clean_shutdown_file = "{d}/clean.shutdown"

[crio.api]
listen = "{d}/crio.sock"
# In the engine's private network namespace.
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
cgroup_manager = "cgroupfs"
default_runtime = "runc"
# Pods that share no PID namespace get no infra container: the default,
# stated because a sandbox's oom_score_adj -998 fails here.
drop_infra_ctr = true
enable_pod_events = {pod_events}
pinns_path = "{pinns}"
namespaces_dir = "{d}/ns"
container_exits_dir = "{d}/exits"
container_attach_socket_dir = "{d}/attach"
cdi_spec_dirs = ["{d}/cdi"]
hooks_dir = ["{d}/hooks"]
default_mounts_file = "{d}/mounts.conf"
decryption_keys_path = "{d}/keys"
irqbalance_config_file = "{d}/irqbalance"
irqbalance_config_restore_file = "disable"

# Debian's runc: its crun 1.8.1 refuses the OCI spec 1.3.0 CRI-O writes.
[crio.runtime.runtimes.runc]
runtime_path = "{runc}"
runtime_type = "oci"
runtime_root = "{d}/runc"
monitor_path = "{conmon}"
# With cgroupfs, conmon goes into the pod's cgroup.
monitor_cgroup = "pod"

[crio.image]
pause_image = "{PAUSE_IMAGE}"
# "": the pause image's own entrypoint.
pause_command = ""
pinned_images = [{pinned}]
signature_policy = "{d}/policy.json"
signature_policy_dir = "{d}/policies"
short_name_mode = "disabled"
big_files_temporary_dir = "{d}/tmp"

[crio.network]
# Empty unless the test asks for a pod network: pods use the host network,
# no plugin runs.
network_dir = "{d}/cni"
plugin_dirs = ["{cni_bin}"]

[crio.nri]
enable_nri = false

# Counts of the CRI calls served (`operations`), on a socket of its own.
[crio.metrics]
enable_metrics = true
metrics_socket = "{d}/metrics.sock"
"#,
        pod_events = options.pod_events,
        pinns = tools.pinns.display(),
        runc = tools.runc.display(),
        conmon = tools.conmon.display(),
        cni_bin = cni_plugins(dir, options).display(),
    );
    let files = [
        ("crio.conf", crio_conf),
        (
            "policy.json",
            r#"{"default":[{"type":"insecureAcceptAnything"}]}"#.to_owned(),
        ),
        (
            "registries.conf",
            "unqualified-search-registries = []\nshort-name-mode = \"disabled\"\n".to_owned(),
        ),
        (
            "storage.conf",
            format!(
                "[storage]\ndriver = \"overlay\"\ngraphroot = \"{d}/root\"\nrunroot = \"{d}/runroot\"\n"
            ),
        ),
        ("mounts.conf", String::new()),
    ];
    for (name, text) in files {
        fs::write(dir.join(name), text).unwrap_or_else(|e| panic!("write {name}: {e}"));
    }
}

/// An OCI archive (`oci-layout`, `index.json`, blobs) of one image, as
/// `oci-archive:` reads it: one uncompressed `layer`, a config with
/// `entrypoint`; and that config's digest, the image id.
fn oci_archive(layer: &[u8], entrypoint: &[&str]) -> (Vec<u8>, String) {
    oci_archive_of(layer, entrypoint, CREATED, None)
}

/// [`oci_archive`] with the config's `created`, and the image's `name`
/// when given (`io.containerd.image.name`, as `ctr import` and Docker's
/// containerd store read it, and `manifest.json`, as `docker load` on a
/// graph driver store reads it): for an image built long before it is
/// loaded.
pub fn oci_archive_of(
    layer: &[u8],
    entrypoint: &[&str],
    created: &str,
    name: Option<&str>,
) -> (Vec<u8>, String) {
    let image = oci::Image::new(layer, entrypoint, created, &Value::Null);
    let legacy = name.map(|name| oci::docker_load_manifest(&image, name));
    let files: Vec<(&str, &[u8])> = legacy
        .iter()
        .map(|text| ("manifest.json", text.as_bytes()))
        .collect();
    let archive = oci::layout_tar(
        &[image.descriptor(name)],
        &[
            (&image.config_digest, &image.config),
            (&image.manifest_digest, &image.manifest),
            (&image.layer_digest, layer),
        ],
        &files,
    );
    (archive, image.config_digest)
}
