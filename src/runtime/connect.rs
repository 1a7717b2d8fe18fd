//! The runtime the policy names, connected ([`Runtime::connect`]), and
//! the one enum the app holds it in: each call goes to its adapter.

use super::containerd::ContainerdRuntime;
use super::cri::CriRuntime;
use super::docker::DockerRuntime;
use super::engine::{Engine, Removal, Target};
use super::error::{NoneAnswered, RUN_AS_ROOT, RuntimeError};
use crate::inventory::{Inventory, Kind, RuntimeKind};

/// The runtime chosen by the policy: one enum, so the app stays generic-free.
pub enum Runtime {
    Docker(DockerRuntime),
    Containerd(ContainerdRuntime),
    Cri(CriRuntime),
}

/// A connected runtime and why it was chosen, for the report.
pub struct Chosen {
    pub runtime: Runtime,
    /// E.g. "auto: Docker did not answer at …; containerd answered at …".
    pub reason: String,
}

impl Runtime {
    /// Connects to the runtime the policy names. `auto` means Docker when its
    /// socket answers, else containerd, else a CRI runtime (CRI-O's socket
    /// by default).
    ///
    /// # Errors
    /// The runtime does not answer (with `auto`: neither does).
    pub async fn connect(config: &crate::policy::RuntimeConfig) -> Result<Chosen, RuntimeError> {
        use crate::policy::RuntimeChoice;
        let docker = || DockerRuntime::connect(&config.docker.endpoint);
        let containerd = || {
            ContainerdRuntime::connect(&config.containerd.endpoint, &config.containerd.namespaces)
        };
        let cri = || CriRuntime::connect(&config.cri.endpoint);
        let docker_endpoint = &config.docker.endpoint;
        let containerd_endpoint = &config.containerd.endpoint;
        let cri_endpoint = &config.cri.endpoint;
        let chosen = match config.kind {
            RuntimeChoice::Docker => Chosen {
                runtime: Self::Docker(docker().await?),
                reason: format!("runtime.kind: docker, at {docker_endpoint}"),
            },
            RuntimeChoice::Containerd => Chosen {
                runtime: Self::Containerd(containerd().await?),
                reason: format!("runtime.kind: containerd, at {containerd_endpoint}"),
            },
            RuntimeChoice::Cri => {
                let c = cri().await?;
                let reason = format!("runtime.kind: cri, {} at {cri_endpoint}", c.name());
                Chosen {
                    runtime: Self::Cri(c),
                    reason,
                }
            }
            RuntimeChoice::Auto => {
                let docker_error = match docker().await {
                    Ok(d) => {
                        return Ok(Self::chosen(Chosen {
                            runtime: Self::Docker(d),
                            reason: format!("auto: Docker answered at {docker_endpoint}"),
                        }));
                    }
                    Err(e) => e,
                };
                let containerd_error = match containerd().await {
                    Ok(c) => {
                        return Ok(Self::chosen(Chosen {
                            runtime: Self::Containerd(c),
                            reason: format!(
                                "auto: Docker did not answer at {docker_endpoint}; containerd answered at {containerd_endpoint}"
                            ),
                        }));
                    }
                    Err(e) => e,
                };
                match cri().await {
                    Ok(c) => {
                        let reason = format!(
                            "auto: neither Docker at {docker_endpoint} nor containerd at {containerd_endpoint} answered; {} answered CRI at {cri_endpoint}",
                            c.name()
                        );
                        Chosen {
                            runtime: Self::Cri(c),
                            reason,
                        }
                    }
                    Err(cri_error) => {
                        return Err(RuntimeError::Unreachable {
                            runtime: "docker, containerd or a CRI runtime",
                            endpoint: format!(
                                "{docker_endpoint}, {containerd_endpoint} or {cri_endpoint}"
                            ),
                            hint: "runtime.kind is auto and no engine answered: is one running, and are the endpoints right?",
                            denied: RUN_AS_ROOT,
                            source: Box::new(NoneAnswered(vec![
                                docker_error,
                                containerd_error,
                                cri_error,
                            ])),
                        });
                    }
                }
            }
        };
        Ok(Self::chosen(chosen))
    }

    /// What answered, as `check` says it: `docker 28.5.2 (API 1.51)`,
    /// `containerd v2.3.4`, `cri-o 1.36.3 (CRI v1)`. One call more than
    /// connecting; what it cannot learn it leaves out.
    pub async fn describe(&self) -> String {
        match self {
            Self::Docker(d) => d.describe().await,
            Self::Containerd(c) => c.describe().await,
            Self::Cri(c) => c.describe().await,
        }
    }

    /// What says which images no registry can give back, as `check`
    /// says it; why this runtime cannot tell, when it cannot (every named
    /// image then counts as one that can come back).
    ///
    /// # Errors
    /// The runtime keeps no evidence safeprune can trust, or it cannot be
    /// read: why, in words.
    pub async fn pull_evidence(&self) -> Result<String, String> {
        match self {
            Self::Docker(d) => d.pull_evidence().await,
            Self::Containerd(_) => {
                Ok("the distribution-source labels a pull writes on an image's content".to_owned())
            }
            Self::Cri(_) => Err(super::cri::THROUGH_CRI.to_owned()),
        }
    }

    fn chosen(chosen: Chosen) -> Chosen {
        tracing::debug!(runtime = %chosen.runtime.kind(), reason = %chosen.reason, "runtime chosen");
        chosen
    }
}

impl Runtime {
    /// This runtime, with inventories that measure the image store's file
    /// system (`images.disk`): one more call, and a `statvfs(2)`.
    #[must_use]
    pub fn measuring_image_fs(self) -> Self {
        match self {
            Self::Docker(d) => Self::Docker(d.measuring_image_fs()),
            Self::Containerd(c) => Self::Containerd(c.measuring_image_fs()),
            Self::Cri(c) => Self::Cri(c.measuring_image_fs()),
        }
    }

    /// What each image of `images` holds on disk, resource by resource,
    /// where this runtime can itemize it (Docker's containerd image
    /// store): for `plan --compare`, so that shared layers count once.
    /// Elsewhere nothing is itemized.
    pub async fn image_holds(
        &self,
        images: &[crate::inventory::Image],
    ) -> crate::inventory::ImageHolds {
        match self {
            Self::Docker(d) => d.image_holds(images).await,
            Self::Containerd(_) | Self::Cri(_) => crate::inventory::ImageHolds::default(),
        }
    }

    /// This runtime, with inventories that leave the build cache unread:
    /// for a policy that does not prune it (on Docker's API 1.41 reading it
    /// sizes every object of the node).
    #[must_use]
    pub fn without_build_cache(self) -> Self {
        match self {
            Self::Docker(d) => Self::Docker(d.without_build_cache()),
            Self::Containerd(c) => Self::Containerd(c),
            Self::Cri(c) => Self::Cri(c),
        }
    }

    /// The runtime, for a command that removes nothing: containerd's
    /// adapter then does not follow the engine's events (which it does by
    /// publishing barrier events of its own). Docker's watch reads the
    /// engine's event history and changes nothing, so it stays.
    #[must_use]
    pub fn read_only(self) -> Self {
        match self {
            Self::Docker(d) => Self::Docker(d),
            Self::Containerd(c) => Self::Containerd(c.read_only()),
            Self::Cri(c) => Self::Cri(c),
        }
    }
}

impl Engine for Runtime {
    fn kind(&self) -> RuntimeKind {
        match self {
            Self::Docker(d) => d.kind(),
            Self::Containerd(c) => c.kind(),
            Self::Cri(c) => c.kind(),
        }
    }

    fn not_applicable(&self) -> &'static [Kind] {
        match self {
            Self::Docker(d) => d.not_applicable(),
            Self::Containerd(c) => c.not_applicable(),
            Self::Cri(c) => c.not_applicable(),
        }
    }

    async fn inventory(&self) -> Result<Inventory, RuntimeError> {
        match self {
            Self::Docker(d) => d.inventory().await,
            Self::Containerd(c) => c.inventory().await,
            Self::Cri(c) => c.inventory().await,
        }
    }

    async fn recheck(&self, kind: Kind, ids: &[&str]) -> Result<Inventory, RuntimeError> {
        match self {
            Self::Docker(d) => d.recheck(kind, ids).await,
            Self::Containerd(c) => c.recheck(kind, ids).await,
            Self::Cri(c) => c.recheck(kind, ids).await,
        }
    }

    async fn measure_containers(&self, inventory: &mut Inventory, ids: &[&str]) {
        match self {
            Self::Docker(d) => d.measure_containers(inventory, ids).await,
            Self::Containerd(c) => c.measure_containers(inventory, ids).await,
            Self::Cri(c) => c.measure_containers(inventory, ids).await,
        }
    }

    fn measures_containers(&self) -> bool {
        match self {
            Self::Docker(d) => d.measures_containers(),
            Self::Containerd(c) => c.measures_containers(),
            Self::Cri(c) => c.measures_containers(),
        }
    }

    async fn remove(&self, target: &Target) -> Removal {
        match self {
            Self::Docker(d) => d.remove(target).await,
            Self::Containerd(c) => c.remove(target).await,
            Self::Cri(c) => c.remove(target).await,
        }
    }

    async fn settle(&self, kind: Kind) {
        match self {
            Self::Docker(d) => d.settle(kind).await,
            Self::Containerd(c) => c.settle(kind).await,
            Self::Cri(c) => c.settle(kind).await,
        }
    }

    fn removal_weight(&self) -> f64 {
        match self {
            Self::Docker(d) => d.removal_weight(),
            Self::Containerd(c) => c.removal_weight(),
            Self::Cri(c) => c.removal_weight(),
        }
    }

    fn frees_when_settled(&self) -> bool {
        match self {
            Self::Docker(d) => d.frees_when_settled(),
            Self::Containerd(c) => c.frees_when_settled(),
            Self::Cri(c) => c.frees_when_settled(),
        }
    }

    async fn image_uses(
        &self,
        inventory: &Inventory,
        since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Vec<(String, crate::inventory::Use)> {
        match self {
            Self::Docker(d) => d.image_uses(inventory, since).await,
            Self::Containerd(c) => c.image_uses(inventory, since).await,
            Self::Cri(c) => c.image_uses(inventory, since).await,
        }
    }

    async fn follow_image_uses(
        &self,
        uses: &tokio::sync::mpsc::Sender<(String, crate::inventory::Use)>,
    ) -> Result<(), RuntimeError> {
        match self {
            Self::Docker(d) => d.follow_image_uses(uses).await,
            Self::Containerd(c) => c.follow_image_uses(uses).await,
            Self::Cri(c) => c.follow_image_uses(uses).await,
        }
    }
}
