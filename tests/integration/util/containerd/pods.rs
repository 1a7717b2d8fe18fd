//! CRI fixtures: pod sandboxes and their containers, made through CRI as
//! kubelet makes them; among them pods with an image volume (KEP-4639, CRI
//! `Mount.image`, containerd 2.1 and later).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerState as CriContainerState,
    ContainerStatusRequest, ContainerStatusResponse, CreateContainerRequest, Image, ImageSpec,
    LinuxContainerConfig, LinuxContainerResources, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, ListContainersRequest, ListImagesRequest, Mount, NamespaceMode,
    NamespaceOption, PodSandboxConfig, PodSandboxMetadata, RemoveImageRequest,
    RemovePodSandboxRequest, RunPodSandboxRequest, StartContainerRequest, StatusRequest,
    StopContainerRequest, StopPodSandboxRequest,
};

use containerd_client::tonic::Status;
use k8s_cri::v1::image_service_client::ImageServiceClient;

use super::{ContainerdVersion, PrivateContainerd, STATE_TIMEOUT};
use crate::util::pod::Pod;
use crate::util::{EXIT_0, RUN_FOREVER, scoped_labels};

/// Where [`PrivateContainerd::run_image_volume_pod`] mounts the image.
pub const IMAGE_VOLUME_PATH: &str = "/volume";

/// A CRI mount of image `image` (a reference, or an image id
/// `sha256:<config digest>`) at `container_path`, read only: an image
/// volume as kubelet asks for one (Kubernetes forces image volumes read
/// only).
pub fn image_volume_mount(image: &str, container_path: &str) -> Mount {
    Mount {
        container_path: container_path.to_owned(),
        readonly: true,
        image: Some(ImageSpec {
            image: image.to_owned(),
            ..ImageSpec::default()
        }),
        ..Mount::default()
    }
}

/// One of a pod's containers, as kubelet asks CRI to make it.
#[derive(Debug, Clone, Default)]
pub struct PodContainer<'a> {
    /// Its name in the pod (`io.kubernetes.container.name`).
    pub name: &'a str,
    /// Its restart count: kubelet makes a new container of the same name
    /// with the next attempt (CRI refuses a second one of the same name
    /// and attempt: the name is reserved).
    pub attempt: u32,
    /// Its image, a reference or an id.
    pub image: &'a str,
    pub cmd: &'a [&'a str],
    /// Labels besides kubelet's.
    pub labels: &'a [(&'a str, &'a str)],
    pub mounts: Vec<Mount>,
}

/// A running pod whose container mounts an image as a volume.
#[derive(Debug, Clone)]
pub struct ImageVolumePod {
    pub pod: Pod,
    /// The pod's sandbox id.
    pub sandbox_id: String,
    /// The name of the container that mounts the image, and its image.
    pub name: String,
    pub image: String,
    /// The id of the container that mounts the image; it runs until stopped.
    pub container_id: String,
    /// The mount, as `CreateContainer` was given it.
    pub mount: Mount,
}

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
        let container = PodContainer {
            name,
            image,
            cmd,
            labels,
            ..PodContainer::default()
        };
        self.try_create_pod_container(pod, sandbox_id, container)
            .await
            .unwrap_or_else(|e| panic!("create container {name} in {}: {e}", pod.name))
    }

    /// Creates (does not start) `container` in a pod through CRI, as
    /// [`Self::create_pod_container`], with its mounts and attempt; its
    /// error as CRI gave it (code and message, as kubelet logs them): a
    /// test may expect the refusal.
    ///
    /// # Errors
    /// CRI's answer when `CreateContainer` fails.
    pub async fn try_create_pod_container(
        &self,
        pod: &Pod,
        sandbox_id: &str,
        container: PodContainer<'_>,
    ) -> Result<String, Status> {
        let PodContainer {
            name,
            attempt,
            image,
            cmd,
            labels,
            mounts,
        } = container;
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
                attempt,
            }),
            image: Some(ImageSpec {
                image: image.to_owned(),
                ..ImageSpec::default()
            }),
            command: cmd.iter().map(|&s| s.to_owned()).collect(),
            mounts,
            labels: all_labels,
            annotations: HashMap::from([(
                "io.kubernetes.container.restartCount".to_owned(),
                attempt.to_string(),
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
            .map(|answer| answer.into_inner().container_id)
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

    /// A running pod `pod`: its container `name` runs `image` (until
    /// stopped) and mounts image `volume_image` at [`IMAGE_VOLUME_PATH`],
    /// read only: a Kubernetes image volume, as kubelet asks for it. Import
    /// both images first; nothing is pulled. `volume_image` may be a
    /// reference or an image id (kubelet passes the id its pull resolved).
    ///
    /// # Panics
    /// On containerd 1.6, which knows no image volumes (they came with
    /// containerd 2.1), and when CRI refuses.
    pub async fn run_image_volume_pod(
        &self,
        pod: &Pod,
        name: &str,
        image: &str,
        volume_image: &str,
    ) -> ImageVolumePod {
        assert_ne!(
            self.version(),
            ContainerdVersion::V1_6,
            "containerd 1.6 has no image volumes (CRI Mount.image): start containerd 2.x"
        );
        let sandbox_id = self.run_pod_sandbox(pod).await;
        let mount = image_volume_mount(volume_image, IMAGE_VOLUME_PATH);
        let container = PodContainer {
            name,
            image,
            cmd: RUN_FOREVER,
            mounts: vec![mount.clone()],
            ..PodContainer::default()
        };
        let container_id = self
            .try_create_pod_container(pod, &sandbox_id, container)
            .await
            .unwrap_or_else(|e| panic!("create container {name} mounting {volume_image}: {e}"));
        self.start_container(&container_id).await;
        ImageVolumePod {
            pod: pod.clone(),
            sandbox_id,
            name: name.to_owned(),
            image: image.to_owned(),
            container_id,
            mount,
        }
    }

    /// What kubelet does once the container of `pod` that mounts the image
    /// has exited: a new container of the same name, the next `attempt`
    /// (its restart count, from 1), with the same mount, started. Returns
    /// its id, or CRI's refusal (of the create or the start).
    ///
    /// # Errors
    /// CRI's answer when `CreateContainer` or `StartContainer` fails.
    pub async fn recreate_image_volume_container(
        &self,
        pod: &ImageVolumePod,
        attempt: u32,
    ) -> Result<String, Status> {
        let container = PodContainer {
            name: &pod.name,
            attempt,
            image: &pod.image,
            cmd: RUN_FOREVER,
            mounts: vec![pod.mount.clone()],
            ..PodContainer::default()
        };
        let id = self
            .try_create_pod_container(&pod.pod, &pod.sandbox_id, container)
            .await?;
        Box::pin(self.cri().start_container(StartContainerRequest {
            container_id: id.clone(),
        }))
        .await?;
        Ok(id)
    }

    /// CRI's `ContainerStatus` of container `id`, verbose (with `info`) or
    /// not.
    pub async fn container_status(&self, id: &str, verbose: bool) -> ContainerStatusResponse {
        Box::pin(self.cri().container_status(ContainerStatusRequest {
            container_id: id.to_owned(),
            verbose,
        }))
        .await
        .unwrap_or_else(|e| panic!("container status {id}: {e}"))
        .into_inner()
    }

    /// Every image, as kubelet lists them through CRI.
    pub async fn cri_images(&self) -> Vec<Image> {
        Box::pin(
            ImageServiceClient::new(self.channel()).list_images(ListImagesRequest { filter: None }),
        )
        .await
        .expect("list images through CRI")
        .into_inner()
        .images
    }

    /// CRI's `RemoveImage` of `image` (a reference or an id), as kubelet's
    /// image GC or `crictl rmi` calls it; its error as CRI gave it.
    ///
    /// # Errors
    /// CRI's answer when `RemoveImage` fails.
    pub async fn try_remove_image(&self, image: &str) -> Result<(), Status> {
        Box::pin(
            ImageServiceClient::new(self.channel()).remove_image(RemoveImageRequest {
                image: Some(ImageSpec {
                    image: image.to_owned(),
                    ..ImageSpec::default()
                }),
            }),
        )
        .await
        .map(|_| ())
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
