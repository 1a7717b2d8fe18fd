//! CRI fixtures: pod sandboxes and their containers, made through CRI as
//! kubelet makes them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerState as CriContainerState,
    ContainerStatusRequest, CreateContainerRequest, ImageSpec, LinuxContainerConfig,
    LinuxContainerResources, LinuxPodSandboxConfig, LinuxSandboxSecurityContext,
    ListContainersRequest, NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata,
    RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest, StatusRequest,
    StopContainerRequest, StopPodSandboxRequest,
};

use super::{PrivateContainerd, STATE_TIMEOUT};
use crate::util::pod::Pod;
use crate::util::{EXIT_0, RUN_FOREVER, scoped_labels};

impl PrivateContainerd {
    /// Runs a pod sandbox through CRI, as kubelet does, on the host network.
    /// Returns its id.
    pub async fn run_pod_sandbox(&self, pod: &Pod) -> String {
        let request = RunPodSandboxRequest {
            config: Some(self.sandbox_config(pod)),
            runtime_handler: String::new(),
        };
        Box::pin(self.cri().run_pod_sandbox(request))
            .await
            .unwrap_or_else(|e| panic!("run pod sandbox {}: {e}", pod.name))
            .into_inner()
            .pod_sandbox_id
    }

    /// Stops a pod sandbox through CRI: it is no longer READY.
    pub async fn stop_pod_sandbox(&self, sandbox_id: &str) {
        Box::pin(self.cri().stop_pod_sandbox(StopPodSandboxRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
        }))
        .await
        .unwrap_or_else(|e| panic!("stop pod sandbox {sandbox_id}: {e}"));
    }

    /// Removes a stopped pod sandbox (and its containers) through CRI.
    pub async fn remove_pod_sandbox(&self, sandbox_id: &str) {
        Box::pin(self.cri().remove_pod_sandbox(RemovePodSandboxRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
        }))
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
        let mut all_labels = scoped_labels(self.scope(), pod.labels());
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
                // Not below containerd's own score: see docs/engines.md, "Test engines".
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
        Box::pin(self.cri().create_container(request))
            .await
            .unwrap_or_else(|e| panic!("create container {name} in {}: {e}", pod.name))
            .into_inner()
            .container_id
    }

    /// Starts a CRI container.
    pub async fn start_container(&self, id: &str) {
        Box::pin(self.cri().start_container(StartContainerRequest {
            container_id: id.to_owned(),
        }))
        .await
        .unwrap_or_else(|e| panic!("start container {id}: {e}"));
    }

    /// Stops a CRI container (TERM, then KILL after 1 s).
    pub async fn stop_container(&self, id: &str) {
        Box::pin(self.cri().stop_container(StopContainerRequest {
            container_id: id.to_owned(),
            timeout: 1,
        }))
        .await
        .unwrap_or_else(|e| panic!("stop container {id}: {e}"));
    }

    /// Waits until a CRI container has exited; returns its exit code.
    pub async fn wait_container_exited(&self, id: &str) -> i32 {
        let begun = Instant::now();
        loop {
            let status = Box::pin(self.cri().container_status(ContainerStatusRequest {
                container_id: id.to_owned(),
                verbose: false,
            }))
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
            .create_pod_container(pod, sandbox_id, name, image, EXIT_0, labels)
            .await;
        self.start_container(&id).await;
        assert_eq!(self.wait_container_exited(&id).await, 0, "{name} exits 0");
        id
    }

    /// A pod that has gone: its container `name` (from `image`) ran and
    /// exited 0, then its sandbox was stopped. Returns the sandbox's id
    /// and the container's.
    pub async fn run_stopped_pod(&self, pod: &Pod, name: &str, image: &str) -> (String, String) {
        let sandbox = self.run_pod_sandbox(pod).await;
        let container = self
            .run_pod_container_to_exit(pod, &sandbox, name, image, &[])
            .await;
        self.stop_pod_sandbox(&sandbox).await;
        (sandbox, container)
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

    /// The ids of every container, as kubelet sees them through CRI.
    pub async fn cri_container_ids(&self) -> Vec<String> {
        Box::pin(
            self.cri()
                .list_containers(ListContainersRequest { filter: None }),
        )
        .await
        .expect("list containers through CRI")
        .into_inner()
        .containers
        .into_iter()
        .map(|c| c.id)
        .collect()
    }

    /// The CRI plugin's verbose status: its config as JSON under `config`.
    pub async fn cri_status(&self) -> HashMap<String, String> {
        Box::pin(self.cri().status(StatusRequest { verbose: true }))
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
            labels: scoped_labels(self.scope(), pod.labels()),
            linux: Some(LinuxPodSandboxConfig {
                // The pod's cgroups under this engine's scope, removed on
                // drop. Without a parent, CRI puts them at /k8s.io/<id>
                // (the default spec's path), and a killed engine leaves
                // those behind where every test's engine shares them
                // (measured).
                cgroup_parent: format!("/{}", self.scope()),
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
}
