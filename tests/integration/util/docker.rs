//! A private Docker Engine for each test, and fixtures to fill it the way
//! cri-dockerd and `docker` would.
//!
//! [`PrivateDockerd::start`] runs its own `dockerd` (with its own managed
//! containerd) as an [`EngineProcess`] under `/tmp/sp-XXXXXX`, which holds
//! its data root, exec root, socket and log. It never touches the node's
//! Docker. Its containers' cgroups lie under the parent `/<scope>`, removed
//! with the directory on drop. Start-up takes well under a second
//! (measured: 0.15 to 0.65 s on 2 cores), so every test gets its own engine
//! and touches nothing else. The dockerd flags are in `docker/daemon.rs`.
//!
//! Everything the fixtures create carries the label `safeprune.test=<scope>`
//! with the engine's own scope.

pub(in crate::util) mod daemon;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use bollard::Docker;
use bollard::body_full;
use bollard::models::{ContainerCreateBody, HostConfig, NetworkCreateRequest, VolumeCreateRequest};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, CreateImageOptionsBuilder, StopContainerOptionsBuilder,
    TagImageOptionsBuilder,
};
use futures_util::{StreamExt, TryStreamExt};

use super::engine::EngineProcess;
use super::pod::Pod;
use super::{EXIT_0, RUN_FOREVER, TEST_LABEL, busybox_rootfs, scoped_labels};

/// A Docker Engine of the test's own.
pub struct PrivateDockerd {
    docker: Docker,
    endpoint: String,
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
        Self::start_in(EngineProcess::new("dockerd", "sp-")).await
    }

    /// [`Self::start`] for cri-dockerd: the engine's default runtime is a
    /// runc wrapper that raises a negative `oom_score_adj` to 0 (cri-dockerd
    /// gives sandboxes -998, which root here may not set; see
    /// `daemon::oom_floor_runtime`).
    pub async fn start_with_oom_floor() -> Self {
        let mut process = EngineProcess::new("dockerd", "sp-");
        let runtime = daemon::oom_floor_runtime(&process);
        daemon::write_config_with(&process, runtime);
        let endpoint = daemon::endpoint(&process);
        let docker = daemon::launch(&mut process).await;
        Self {
            docker,
            endpoint,
            process,
        }
    }

    /// The fixtures on an engine launched elsewhere that answers at
    /// `endpoint` (`docker28.rs`: Docker 29 over a containerd of its own).
    /// Not for [`Self::restart`], which launches Debian's dockerd.
    pub(super) fn launched(docker: Docker, endpoint: String, process: EngineProcess) -> Self {
        Self {
            docker,
            endpoint,
            process,
        }
    }

    async fn start_in(mut process: EngineProcess) -> Self {
        daemon::write_config(&process);
        let endpoint = daemon::endpoint(&process);
        let docker = daemon::launch(&mut process).await;
        Self {
            docker,
            endpoint,
            process,
        }
    }

    /// A private engine whose data root is a file system of its own of
    /// `megabytes`, loop-mounted: a disk the test can fill.
    pub async fn start_on_small_fs(megabytes: u64) -> Self {
        let mut process = EngineProcess::new("dockerd", "sp-");
        process.mount_small_fs("data", megabytes);
        Self::start_in(process).await
    }

    /// The engine's data root, where its images are stored.
    pub fn data_root(&self) -> std::path::PathBuf {
        self.process.path("data")
    }

    /// Kills the engine, as a crash or `systemctl stop docker` would; its
    /// data stays for [`Self::restart`].
    pub fn stop(&mut self) {
        self.process.stop();
    }

    /// Freezes the engine (SIGSTOP): a hung engine, whose socket accepts
    /// and never answers, until [`Self::thaw`].
    pub fn freeze(&self) {
        self.process.freeze();
    }

    /// Lets a frozen engine go on.
    pub fn thaw(&self) {
        self.process.thaw();
    }

    /// Starts the engine again on the same data, socket and scope (killing
    /// it first if it still runs).
    pub async fn restart(&mut self) {
        self.process.stop();
        daemon::clear_runtime_state(&self.process);
        self.docker = daemon::launch(&mut self.process).await;
    }

    /// [`Self::restart`] for an engine [`Self::launched`] elsewhere: kills
    /// it, and starts it again on the same directory with `launch`.
    pub(super) async fn relaunch(
        &mut self,
        launch: impl AsyncFnOnce(&mut EngineProcess) -> Docker,
    ) {
        self.process.stop();
        daemon::clear_runtime_state(&self.process);
        self.docker = launch(&mut self.process).await;
    }

    /// The pid of dockerd, the init of the engine's namespaces: its
    /// network namespace is where it pulls from and pushes to.
    pub fn pid(&self) -> u32 {
        self.process.pid().expect("dockerd has answered")
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
        self.process.scope()
    }

    /// Builds a one-file image tagged `tag` with `BuildKit`, which leaves
    /// build cache records. `BuildKit` needs a session with the client,
    /// which bollard offers only behind its `buildkit` feature; the docker
    /// CLI does it.
    pub fn build_with_buildkit(&self, tag: &str) {
        let context = tempfile::tempdir().expect("build context");
        std::fs::write(context.path().join("f"), "hi").expect("write the build context");
        std::fs::write(
            context.path().join("Dockerfile"),
            "FROM scratch\nCOPY f /f\n",
        )
        .expect("write the Dockerfile");
        super::run_ok(
            self.cli()
                .env("DOCKER_BUILDKIT", "1")
                .args(["build", "-q", "-t", tag])
                .arg(context.path()),
        );
    }

    /// Builds `tag` with `BuildKit` from `steps` files, one `COPY` each: a
    /// chain of build cache records, each built on the one before.
    pub fn build_chain_with_buildkit(&self, tag: &str, steps: usize) {
        let context = tempfile::tempdir().expect("build context");
        let mut dockerfile = "FROM scratch\n".to_owned();
        for n in 0..steps {
            std::fs::write(
                context.path().join(format!("f{n}")),
                format!("step {n} of {tag}"),
            )
            .expect("write the build context");
            let _ = writeln!(dockerfile, "COPY f{n} /f{n}");
        }
        std::fs::write(context.path().join("Dockerfile"), dockerfile)
            .expect("write the Dockerfile");
        super::run_ok(
            self.cli()
                .env("DOCKER_BUILDKIT", "1")
                .args(["build", "-q", "-t", tag])
                .arg(context.path()),
        );
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
                format!("LABEL {TEST_LABEL}={}", self.scope()),
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

    /// Creates, starts and waits for one of a pod's containers until it has
    /// exited, whatever its code (a crashed attempt exits 1). Returns its id.
    pub async fn run_pod_container_to_exit(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        container: &str,
        restart: u32,
        image: &str,
        cmd: &[&str],
    ) -> String {
        let id = self
            .create_pod_container(pod, sandbox_id, container, restart, image, cmd)
            .await;
        self.start_container(&id).await;
        self.wait_container(&id).await;
        id
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
        scoped_labels(self.scope(), extra.iter().copied())
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
