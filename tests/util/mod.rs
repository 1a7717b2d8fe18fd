//! A private Docker Engine for each test, and fixtures to fill it.
//!
//! [`PrivateDockerd::start`] runs its own `dockerd` (with its own managed
//! containerd) in fresh pid, mount and network namespaces, under a short
//! directory `/tmp/sp-XXXXXX` that holds its data root, exec root, socket
//! and log. It never touches the node's Docker. Dropping it kills dockerd,
//! the init of its pid namespace, so the kernel ends every process in it
//! (containerd, shims, containers); the namespaces take their mounts, shim
//! sockets (a private tmpfs on `/run`) and bridges with them. What is left,
//! the container cgroups under a private cgroup parent and the directory, is
//! removed. Start-up takes well under a second (measured: 0.15 to 0.65 s on
//! 2 cores), so every test gets its own engine and touches nothing else.
//!
//! Everything the fixtures create carries the label `safeprune.test=<scope>`
//! with the engine's own scope.

#![allow(
    dead_code,
    reason = "each test binary uses its own subset of the harness; `expect` would fail in the ones that use it all"
)]

pub mod containerd;

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bollard::models::{ContainerCreateBody, HostConfig, NetworkCreateRequest, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, StopContainerOptionsBuilder,
    TagImageOptionsBuilder,
};
use bollard::{API_DEFAULT_VERSION, Docker, body_full};
use futures_util::{StreamExt, TryStreamExt};

/// The label every fixture object carries.
pub const TEST_LABEL: &str = "safeprune.test";

/// A command that runs until stopped and exits 0 at once on SIGTERM (a
/// plain busybox `sleep` as pid 1 ignores TERM and waits for the kill).
pub const RUN_FOREVER: &[&str] = &["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"];

/// A command that exits 0 at once.
pub const EXIT_0: &[&str] = &["sh", "-c", "exit 0"];

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Mounts the private `/run`, then becomes dockerd.
const LAUNCH_SCRIPT: &str = r#"mount -n -t tmpfs -o mode=755 sp-run /run && exec dockerd "$@""#;
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// A Docker Engine of the test's own.
pub struct PrivateDockerd {
    docker: Docker,
    endpoint: String,
    scope: String,
    /// Last, so the client is gone before the engine is torn down.
    process: EngineProcess,
}

impl PrivateDockerd {
    /// Starts a private engine and waits until it answers `_ping`.
    ///
    /// # Panics
    /// When dockerd cannot be started or does not answer within 30 s; the
    /// message holds the tail of its log.
    pub async fn start() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("sp-")
            .tempdir_in("/tmp")
            .expect("create a directory for the private dockerd")
            .keep();
        let scope = dir
            .file_name()
            .expect("temp dir has a name")
            .to_string_lossy()
            .into_owned();
        let socket = dir.join("docker.sock");
        let endpoint = format!("unix://{}", socket.display());
        // Without its own config file dockerd reads /etc/docker/daemon.json,
        // and 20.10 writes its trust key to /etc/docker/key.json unless told
        // otherwise (hidden option `deprecated-key-path`).
        let config = serde_json::json!({ "deprecated-key-path": dir.join("key.json") });
        fs::write(dir.join("daemon.json"), config.to_string()).expect("write daemon.json");
        let mut process = EngineProcess {
            unshare: launch(&dir, &scope, &endpoint),
            dir,
            scope: scope.clone(),
            dockerd_pid: None,
        };
        let docker = process.await_ping(&socket).await;
        Self {
            docker,
            endpoint,
            scope,
            process,
        }
    }

    /// Kills the engine, as a crash or `systemctl stop docker` would; its
    /// data stays for [`Self::restart`].
    pub fn stop(&mut self) {
        self.process.kill();
        self.process.unmount_leftovers();
    }

    /// Starts the engine again on the same data, socket and scope.
    pub async fn restart(&mut self) {
        let socket = self.process.dir.join("docker.sock");
        // A killed dockerd leaves its socket, its pid file (it refuses to
        // start while that is there) and its exec root, which holds the
        // managed containerd's pid file: in a fresh pid namespace that pid
        // may well be alive, and dockerd would wait for a containerd that is
        // not there. The exec root is runtime state, like /run after a
        // reboot: nothing of it survives its processes.
        let _ = fs::remove_file(&socket);
        let _ = fs::remove_file(self.process.dir.join("dockerd.pid"));
        let _ = fs::remove_dir_all(self.process.dir.join("exec"));
        self.process.unshare = launch(&self.process.dir, &self.scope, &self.endpoint);
        self.docker = self.process.await_ping(&socket).await;
    }

    /// `unix:///tmp/sp-XXXXXX/docker.sock`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// A bollard client on this engine, for fixtures and assertions.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The value of `safeprune.test` on everything this engine's fixtures
    /// create.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// The docker CLI, pointed at this engine. Prefers Debian's 20.10 CLI
    /// (`/usr/bin/docker`, with `BuildKit` built in) over newer ones that need
    /// the buildx plugin to build.
    pub fn cli(&self) -> Command {
        let binary = ["/usr/bin/docker", "docker"]
            .into_iter()
            .find(|p| !p.starts_with('/') || Path::new(p).exists())
            .unwrap_or("docker");
        let mut cmd = Command::new(binary);
        cmd.args(["-H", &self.endpoint]);
        cmd
    }

    /// Imports a busybox image (`/bin/sh`, `/bin/sleep`) tagged `reference`
    /// (`repo:tag`), with `/extra` holding `extra_file` when given. Every
    /// import is a distinct image (its creation time differs). Returns the
    /// image id.
    pub async fn import_busybox_image(&self, reference: &str, extra_file: Option<&str>) -> String {
        let (repo, tag) = split_reference(reference);
        self.import(Some((repo, tag)), extra_file).await
    }

    /// Imports a busybox image with no tag at all: dangling from birth.
    pub async fn import_dangling_image(&self, extra_file: Option<&str>) -> String {
        self.import(None, extra_file).await
    }

    async fn import(&self, reference: Option<(&str, &str)>, extra_file: Option<&str>) -> String {
        let mut options = CreateImageOptionsBuilder::default()
            .from_src("-")
            .changes(vec![
                format!("LABEL {TEST_LABEL}={}", self.scope),
                r#"CMD ["sh"]"#.to_owned(),
            ]);
        if let Some((repo, tag)) = reference {
            options = options.repo(repo).tag(tag);
        }
        let rootfs = busybox_rootfs(extra_file);
        let answers: Vec<_> = self
            .docker
            .create_image(Some(options.build()), Some(body_full(rootfs.into())), None)
            .try_collect()
            .await
            .expect("import the busybox image");
        // The import answers with the new image's id as its status.
        answers
            .iter()
            .filter_map(|a| a.status.as_deref())
            .find(|s| s.starts_with("sha256:"))
            .unwrap_or_else(|| panic!("no image id in the import answer: {answers:?}"))
            .to_owned()
    }

    /// Tags `image` as `reference` (`repo:tag`).
    pub async fn tag_image(&self, image: &str, reference: &str) {
        let (repo, tag) = split_reference(reference);
        let options = TagImageOptionsBuilder::default()
            .repo(repo)
            .tag(tag)
            .build();
        self.docker
            .tag_image(image, Some(options))
            .await
            .unwrap_or_else(|e| panic!("tag {image} as {reference}: {e}"));
    }

    /// Creates (does not start) a container running `cmd`.
    pub async fn create_container(
        &self,
        name: &str,
        image: &str,
        labels: &[(&str, &str)],
        cmd: &[&str],
    ) -> String {
        self.create_container_with(name, image, labels, cmd, HostConfig::default())
            .await
    }

    /// Creates a container with the given host config (mounts, network).
    pub async fn create_container_with(
        &self,
        name: &str,
        image: &str,
        labels: &[(&str, &str)],
        cmd: &[&str],
        host_config: HostConfig,
    ) -> String {
        let body = ContainerCreateBody {
            image: Some(image.to_owned()),
            cmd: Some(cmd.iter().map(|&s| s.to_owned()).collect()),
            labels: Some(self.labels(labels)),
            stop_timeout: Some(1),
            host_config: Some(host_config),
            ..ContainerCreateBody::default()
        };
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        self.docker
            .create_container(Some(options), body)
            .await
            .unwrap_or_else(|e| panic!("create container {name}: {e}"))
            .id
    }

    pub async fn start_container(&self, id: &str) {
        self.docker
            .start_container(id, None)
            .await
            .unwrap_or_else(|e| panic!("start container {id}: {e}"));
    }

    /// Stops a container (TERM, then KILL after 1 s).
    pub async fn stop_container(&self, id: &str) {
        let options = StopContainerOptionsBuilder::default().t(1).build();
        self.docker
            .stop_container(id, Some(options))
            .await
            .unwrap_or_else(|e| panic!("stop container {id}: {e}"));
    }

    /// Waits until a container has exited; returns its exit code.
    pub async fn wait_container(&self, id: &str) -> i64 {
        let answers: Vec<_> = self
            .docker
            .wait_container(id, None)
            .collect::<Vec<_>>()
            .await;
        match answers.into_iter().last() {
            Some(Ok(answer)) => answer.status_code,
            // bollard reports a non-zero exit as an error carrying the code.
            Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
            other => panic!("wait for container {id}: {other:?}"),
        }
    }

    /// Creates, starts and waits for a container that exits 0 at once.
    pub async fn run_to_exit(&self, name: &str, image: &str, labels: &[(&str, &str)]) -> String {
        let id = self.create_container(name, image, labels, EXIT_0).await;
        self.start_container(&id).await;
        assert_eq!(self.wait_container(&id).await, 0, "{name} exits 0");
        id
    }

    /// Creates and starts a container that runs until stopped.
    pub async fn run_forever(&self, name: &str, image: &str, labels: &[(&str, &str)]) -> String {
        let id = self
            .create_container(name, image, labels, RUN_FOREVER)
            .await;
        self.start_container(&id).await;
        id
    }

    /// Creates a pod's sandbox the way cri-dockerd names and labels it,
    /// running (READY) or stopped. Returns its id.
    pub async fn create_sandbox(&self, pod: &Pod, image: &str, running: bool) -> String {
        let name = format!(
            "k8s_POD_{}_{}_{}_{}",
            pod.name, pod.namespace, pod.uid, pod.attempt
        );
        let mut labels = pod.labels();
        labels.push(("io.kubernetes.docker.type", "podsandbox".to_owned()));
        labels.push(("io.kubernetes.container.name", "POD".to_owned()));
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if running {
            self.run_forever(&name, image, &labels).await
        } else {
            self.run_to_exit(&name, image, &labels).await
        }
    }

    /// Creates (does not start) one of a pod's containers, the way
    /// cri-dockerd names and labels it. Returns its id.
    pub async fn create_pod_container(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        container: &str,
        restart: u32,
        image: &str,
        cmd: &[&str],
    ) -> String {
        let name = format!(
            "k8s_{container}_{}_{}_{}_{restart}",
            pod.name, pod.namespace, pod.uid
        );
        let mut labels = pod.labels();
        labels.push(("io.kubernetes.docker.type", "container".to_owned()));
        labels.push(("io.kubernetes.sandbox.id", sandbox_id.to_owned()));
        labels.push(("io.kubernetes.container.name", container.to_owned()));
        labels.push((
            "annotation.io.kubernetes.container.restartCount",
            restart.to_string(),
        ));
        let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
        self.create_container(&name, image, &labels, cmd).await
    }

    /// Creates a volume; with no name Docker names it like an anonymous one
    /// (64 hex characters). Returns its name.
    pub async fn create_volume(&self, name: Option<&str>) -> String {
        let request = VolumeCreateRequest {
            name: name.map(str::to_owned),
            labels: Some(self.labels(&[])),
            ..VolumeCreateRequest::default()
        };
        self.docker
            .create_volume(request)
            .await
            .unwrap_or_else(|e| panic!("create volume {name:?}: {e}"))
            .name
    }

    /// Creates a bridge network (inside the engine's network namespace).
    /// Returns its id.
    pub async fn create_network(&self, name: &str, labels: &[(&str, &str)]) -> String {
        let request = NetworkCreateRequest {
            name: name.to_owned(),
            driver: Some("bridge".to_owned()),
            labels: Some(self.labels(labels)),
            ..NetworkCreateRequest::default()
        };
        self.docker
            .create_network(request)
            .await
            .unwrap_or_else(|e| panic!("create network {name}: {e}"))
            .id
    }

    fn labels(&self, extra: &[(&str, &str)]) -> HashMap<String, String> {
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .chain([(TEST_LABEL.to_owned(), self.scope.clone())])
            .collect()
    }
}

/// A pod as kubelet names it.
#[derive(Debug, Clone)]
pub struct Pod {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The sandbox attempt, the last part of its name.
    pub attempt: u32,
}

impl Pod {
    /// A pod with a uid derived from its name (unique within a test).
    pub fn new(name: &str, namespace: &str) -> Self {
        Self {
            name: name.to_owned(),
            namespace: namespace.to_owned(),
            uid: format!("uid-{namespace}-{name}"),
            attempt: 0,
        }
    }

    /// The `io.kubernetes.pod.*` labels.
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        vec![
            ("io.kubernetes.pod.uid", self.uid.clone()),
            ("io.kubernetes.pod.name", self.name.clone()),
            ("io.kubernetes.pod.namespace", self.namespace.clone()),
        ]
    }
}

/// `repo:tag`, `repo` alone meaning `latest`; a `:` before the last `/` is a
/// registry port.
fn split_reference(reference: &str) -> (&str, &str) {
    match reference.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => (repo, tag),
        _ => (reference, "latest"),
    }
}

/// A tar of a minimal root file system: the static busybox from Debian's
/// busybox-static as `/bin/busybox`, `sh` and `sleep` linked to it.
fn busybox_rootfs(extra_file: Option<&str>) -> Vec<u8> {
    let busybox = fs::read("/bin/busybox")
        .expect("read /bin/busybox (Debian package busybox-static) for the test image");
    let mut tar = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    tar.append_data(&mut dir, "bin/", std::io::empty())
        .expect("tar bin/");
    let mut file = tar::Header::new_gnu();
    file.set_mode(0o755);
    file.set_size(busybox.len() as u64);
    tar.append_data(&mut file, "bin/busybox", busybox.as_slice())
        .expect("tar bin/busybox");
    for applet in ["sh", "sleep"] {
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_mode(0o777);
        link.set_size(0);
        tar.append_link(&mut link, format!("bin/{applet}"), "busybox")
            .expect("tar an applet link");
    }
    if let Some(content) = extra_file {
        let mut extra = tar::Header::new_gnu();
        extra.set_mode(0o644);
        extra.set_size(content.len() as u64);
        tar.append_data(&mut extra, "extra", content.as_bytes())
            .expect("tar extra");
    }
    tar.into_inner().expect("finish the tar")
}

/// Runs dockerd for the engine in `dir`, appending to its log.
fn launch(dir: &Path, scope: &str, endpoint: &str) -> Child {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("dockerd.log"))
        .expect("open dockerd.log");
    let log_err = log.try_clone().expect("clone the log handle");
    let d = |name: &str| dir.join(name).to_string_lossy().into_owned();
    Command::new("unshare")
        // dockerd becomes pid 1 of a new pid namespace: when it dies the
        // kernel kills all in it. Private mounts and network: nothing
        // it mounts or creates (overlays, netns, bridges) reaches the
        // host. --kill-child: if unshare dies, dockerd dies too.
        .args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc"])
        .args(["--net", "--propagation", "private"])
        // A tmpfs on /run keeps containerd's shim sockets
        // (/run/containerd/s, fixed there) and /run/docker private.
        // `-n`: no /run/mount/utab entry on the host.
        .args(["sh", "-c", LAUNCH_SCRIPT])
        .arg("dockerd")
        .args(["--config-file", &d("daemon.json")])
        .args(["--data-root", &d("data")])
        .args(["--exec-root", &d("exec")])
        .args(["--pidfile", &d("dockerd.pid")])
        .args(["-H", endpoint])
        .args(["--bridge=none", "--iptables=false", "--ip6tables=false"])
        .args([
            "--ip-masq=false",
            "--ip-forward=false",
            "--userland-proxy=false",
        ])
        // Container cgroups in a tree of our own, to remove afterwards:
        // a killed engine leaves them behind.
        .args(["--cgroup-parent", &format!("/{scope}")])
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run unshare (util-linux) to start dockerd: {e}"))
}

/// A client on `socket` once the engine there answers, negotiated down to
/// its API version.
async fn ping(socket: &Path) -> Option<Docker> {
    if !socket.exists() {
        return None;
    }
    let docker = Docker::connect_with_unix(&socket.to_string_lossy(), 30, API_DEFAULT_VERSION)
        .ok()?
        .negotiate_version()
        .await
        .ok()?;
    docker.ping().await.ok()?;
    Some(docker)
}

/// The first child of process `pid` (unshare's only child is dockerd).
fn child_of(pid: u32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The engine's processes and files, torn down on drop (also when start-up
/// fails half-way).
struct EngineProcess {
    dir: PathBuf,
    scope: String,
    unshare: Child,
    dockerd_pid: Option<u32>,
}

impl EngineProcess {
    /// Waits until the engine answers on `socket`.
    async fn await_ping(&mut self, socket: &Path) -> Docker {
        let begun = Instant::now();
        let docker = loop {
            if let Some(docker) = ping(socket).await {
                break docker;
            }
            if let Ok(Some(status)) = self.unshare.try_wait() {
                panic!(
                    "private dockerd exited ({status}) before answering; log tail:\n{}",
                    self.log_tail()
                );
            }
            assert!(
                begun.elapsed() < START_TIMEOUT,
                "private dockerd did not answer within {START_TIMEOUT:?}; log tail:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        self.dockerd_pid = child_of(self.unshare.id());
        eprintln!(
            "private dockerd at {} answered after {} ms",
            socket.display(),
            begun.elapsed().as_millis()
        );
        docker
    }

    fn log_tail(&self) -> String {
        log_tail(&self.dir.join("dockerd.log"))
    }

    /// Kills dockerd and waits until its pid namespace is empty.
    fn kill(&mut self) {
        if matches!(self.unshare.try_wait(), Ok(Some(_))) {
            return;
        }
        // SIGKILL to dockerd, the namespace's init: the kernel kills the rest
        // and reaps them before dockerd's own exit completes, so unshare's
        // wait returns only when the namespace is empty. While unshare lives,
        // dockerd's pid cannot be reused. If dockerd's pid is unknown, kill
        // unshare and let --kill-child pass the SIGKILL on.
        let killed = self.dockerd_pid.is_some_and(|pid| {
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

    /// Unmounts anything still mounted under the directory.
    fn unmount_leftovers(&self) {
        unmount_under(&self.dir);
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        self.kill();
        tear_down(&self.dir, &self.scope);
    }
}

/// The last 30 lines of an engine's log, for a failure message.
pub(crate) fn log_tail(path: &Path) -> String {
    let Ok(log) = fs::File::open(path) else {
        return "(no log)".to_owned();
    };
    let lines: Vec<String> = BufReader::new(log).lines().map_while(Result::ok).collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// What a killed engine leaves, removed: mounts under `dir` (with private
/// namespaces there should be none), the cgroup tree `/<scope>` its
/// containers had, and `dir` itself.
pub(crate) fn tear_down(dir: &Path, scope: &str) {
    unmount_under(dir);
    remove_cgroups(scope);
    if let Err(e) = retry(|| fs::remove_dir_all(dir)) {
        eprintln!("cannot remove {}: {e}", dir.display());
    }
}

/// Unmounts anything mounted under `dir`, deepest first.
pub(crate) fn unmount_under(dir: &Path) {
    let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<&str> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| Path::new(point).starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for point in points {
        eprintln!("unmounting leftover {point}");
        let _ = Command::new("umount").args(["-l", point]).status();
    }
}

/// Removes the cgroup tree `/<scope>` from every hierarchy (v1: one per
/// controller; v2: the unified root).
fn remove_cgroups(scope: &str) {
    let root = Path::new("/sys/fs/cgroup");
    let mut trees = vec![root.join(scope)];
    if let Ok(hierarchies) = fs::read_dir(root) {
        trees.extend(hierarchies.flatten().map(|h| h.path().join(scope)));
    }
    for tree in trees.iter().filter(|t| t.is_dir()) {
        if let Err(e) = retry(|| remove_cgroup_tree(tree)) {
            eprintln!("cannot remove cgroup {}: {e}", tree.display());
        }
    }
}

/// cgroup directories go with rmdir, children first; their files cannot be
/// removed.
fn remove_cgroup_tree(dir: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&entry.path())?;
        }
    }
    fs::remove_dir(dir)
}

/// Retries a teardown step briefly: the last processes of a killed
/// namespace may still be letting go.
fn retry(mut step: impl FnMut() -> std::io::Result<()>) -> std::io::Result<()> {
    let mut last = Ok(());
    for _ in 0..50 {
        last = step();
        match &last {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    last
}
