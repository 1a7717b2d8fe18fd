//! Re-checks, a batch of one kind at a time: containers with their pods'
//! sandboxes, images with every container made from one of them and CRI's
//! pins, from the watch brought up to date or, without one, from listings.

use std::collections::{BTreeSet, HashSet};

use containerd_client::services::v1::{Container as NativeContainer, Image as ImageRecord};
use containerd_client::types::v1::Process;
use futures_util::future::{join_all, try_join_all};
use k8s_cri::v1::{Container as CriContainer, ContainerStatus, PodSandbox as CriPod};

use super::convert::{
    CriView, NamespaceData, containers_of, is_cri_kind, is_cri_sandbox, sandboxes_of,
    split_qualified,
};
use super::images::images_of;
use super::{CRI_NAMESPACE, ContainerdRuntime, RUNTIME, cri, native, pins};
use crate::inventory::{Container, Image, Inventory, Kind, PodSandbox};
use crate::runtime::error::RuntimeError;

impl ContainerdRuntime {
    /// A batch of `kind`, re-checked: see `Engine::recheck`.
    pub(super) async fn recheck_batch(
        &self,
        kind: Kind,
        ids: &[&str],
    ) -> Result<Inventory, RuntimeError> {
        let mut fresh = Inventory {
            runtime: RUNTIME.to_owned(),
            ..Inventory::default()
        };
        match kind {
            Kind::Container => {
                let (containers, sandboxes) = self.recheck_containers(ids).await?;
                fresh.containers = containers;
                fresh.sandboxes = sandboxes;
            }
            Kind::Image => {
                let wanted = ids
                    .iter()
                    .map(|id| self.recheck_id(id))
                    .collect::<Result<Vec<_>, _>>()?;
                let (images, users) = self.recheck_images(&wanted).await?;
                fresh.images = images
                    .into_iter()
                    .filter(|i| ids.contains(&i.id.as_str()))
                    .collect();
                fresh.containers = users;
            }
            // Not on containerd: nothing to find.
            Kind::Volume | Kind::Network | Kind::BuildCache => {}
        }
        Ok(fresh)
    }

    /// The sandbox image CRI names now; none when it does not answer
    /// (`pins` then takes the sandboxes' own images).
    async fn sandbox_image(&self) -> (Option<String>, bool) {
        match cri::sandbox_image(&self.channel).await {
            Ok(image) => (image, true),
            Err(e) => {
                tracing::warn!(error = %e, "CRI does not answer: no sandbox image");
                (None, false)
            }
        }
    }

    /// Marks the images of a re-check's batch that CRI reports pinned,
    /// asking CRI about each by one of its names (`ImageStatus`: a call per
    /// image, not a listing of the node). An image CRI cannot be asked
    /// about keeps the pins its records carry.
    async fn with_cri_pins(&self, images: &mut [Image]) {
        let asked = images.iter().map(|image| async move {
            let in_cri = image
                .id
                .strip_prefix(CRI_NAMESPACE)
                .is_some_and(|rest| rest.starts_with('/'));
            let name = image.tags.iter().chain(&image.digests).next()?;
            if !in_cri {
                return None;
            }
            match cri::image_pinned(&self.channel, name).await {
                Ok(pinned) => Some(pinned),
                Err(e) => {
                    tracing::warn!(image = %image.id, error = %e, "CRI does not say whether the image is pinned: its labels alone say");
                    None
                }
            }
        });
        let answers = futures_util::future::join_all(asked).await;
        for (image, pinned) in images.iter_mut().zip(answers) {
            if pinned == Some(true) {
                image.cri_pinned = true;
                image.pinned = true;
            }
        }
    }

    /// Every pod sandbox, when the CRI namespace is configured: CRI's list,
    /// or the sandbox containers and their tasks when CRI does not answer.
    async fn sandboxes(&self) -> Result<Vec<PodSandbox>, RuntimeError> {
        if !self.has_cri_namespace() {
            return Ok(Vec::new());
        }
        match cri::sandboxes(&self.channel).await {
            Ok(listed) => Ok(cri_sandboxes(listed)),
            Err(e) => {
                tracing::warn!(error = %e, "CRI does not answer: sandboxes read natively");
                let (containers, tasks) = tokio::try_join!(
                    native::containers(&self.channel, CRI_NAMESPACE),
                    native::tasks(&self.channel, CRI_NAMESPACE),
                )
                .map_err(Self::call_error("list sandbox containers"))?;
                Ok(native_sandboxes(containers, tasks))
            }
        }
    }

    /// `parse_id` for a re-check: a bad id fails the re-check.
    fn recheck_id<'i>(&self, id: &'i str) -> Result<(&'i str, &'i str), RuntimeError> {
        self.parse_id(id).map_err(|e| RuntimeError::Call {
            runtime: RUNTIME,
            call: "recheck",
            source: e.into(),
        })
    }

    /// Fresh facts about one container, read by id: containerd's record
    /// and task. Without a watch.
    async fn read_container(&self, id: &str) -> Result<Vec<Container>, RuntimeError> {
        let (namespace, local) = self.recheck_id(id)?;
        let (found, task) = tokio::try_join!(
            async {
                native::container(&self.channel, namespace, local)
                    .await
                    .map_err(Self::call_error("get container"))
            },
            async {
                native::task(&self.channel, namespace, local)
                    .await
                    .map_err(Self::call_error("get task"))
            },
        )?;
        let Some(found) = found else {
            return Ok(Vec::new());
        };
        let data = NamespaceData {
            namespace: namespace.to_owned(),
            containers: vec![found],
            tasks: task.into_iter().collect(),
            ..NamespaceData::default()
        };
        Ok(self.rechecked_container(data, None).await)
    }

    /// One container as a re-check finds it, from what containerd says of
    /// it (`data`: its record and task), with CRI's status when it is a CRI
    /// container: the only place with an exited CRI container's state and
    /// exit time (CRI deletes its task). `settled` is what CRI said of it
    /// at the inventory when it had exited then (final: CRI never starts it
    /// again), taken as it is; else CRI is asked, when it answers. Its
    /// removal acts on what this finds (its id and the labels CRI put on
    /// it).
    async fn rechecked_container(
        &self,
        data: NamespaceData,
        settled: Option<(CriContainer, Option<ContainerStatus>)>,
    ) -> Vec<Container> {
        let Some(found) = data.containers.first() else {
            return Vec::new();
        };
        let view = if data.namespace == CRI_NAMESPACE && is_cri_kind(&found.labels) {
            let known = match settled {
                Some(exited) => Ok(Some(exited)),
                None => cri::container(&self.channel, &found.id).await,
            };
            match known {
                Ok(known) => Some(CriView {
                    containers: known.map(|c| (found.id.clone(), c)).into_iter().collect(),
                    ..CriView::default()
                }),
                Err(e) => {
                    tracing::warn!(error = %e, id = %found.id, "CRI does not answer: container read natively");
                    None
                }
            }
        } else {
            None
        };
        containers_of(&data, view.as_ref())
    }

    /// Fresh facts about a batch of containers, and the sandboxes of their
    /// pods. With a watch: each container as the watch, brought up to
    /// date, knows it (no call for one that no event has named since the
    /// inventory), and its pod's sandboxes by id (the one it names, and any
    /// other sandbox of the same pod the watch knows). Without one: each
    /// container read by id, and every sandbox listed.
    async fn recheck_containers(
        &self,
        ids: &[&str],
    ) -> Result<(Vec<Container>, Vec<PodSandbox>), RuntimeError> {
        let wanted = ids
            .iter()
            .map(|id| Ok((*id, self.recheck_id(id)?)))
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let watched = self
            .synced(|known| {
                let facts: Vec<(NamespaceData, Option<_>)> = wanted
                    .iter()
                    .filter_map(|(_, (ns, local))| {
                        let settled =
                            (*ns == CRI_NAMESPACE).then(|| known.exited_cri_container(local));
                        Some((known.container_facts(ns, local)?, settled.flatten()))
                    })
                    .collect();
                let uids: HashSet<&str> = wanted
                    .iter()
                    .filter(|(_, (ns, _))| *ns == CRI_NAMESPACE)
                    .filter_map(|(_, (ns, local))| known.pod_uid_of(ns, local))
                    .collect();
                (facts, known.sandboxes_of_pods(CRI_NAMESPACE, &uids))
            })
            .await;
        let (containers, of_pods) = match watched {
            Some((facts, of_pods)) => {
                let found = join_all(
                    facts
                        .into_iter()
                        .map(|(data, settled)| self.rechecked_container(data, settled)),
                )
                .await;
                (found, Some(of_pods))
            }
            None => (
                try_join_all(ids.iter().map(|id| self.read_container(id))).await?,
                None,
            ),
        };
        let containers: Vec<Container> = containers.into_iter().flatten().collect();
        let in_cri = wanted.iter().any(|(_, (ns, _))| *ns == CRI_NAMESPACE);
        if !in_cri {
            return Ok((containers, Vec::new()));
        }
        let Some(of_pods) = of_pods else {
            return Ok((containers, self.sandboxes().await?));
        };
        let mut sandbox_ids: BTreeSet<String> = of_pods.into_iter().collect();
        sandbox_ids.extend(
            containers
                .iter()
                .filter_map(|c| c.pod.as_ref()?.sandbox_id.as_deref())
                .filter_map(split_qualified)
                .map(|(_, local)| local.to_owned()),
        );
        let sandboxes = self.sandboxes_by_id(&sandbox_ids).await?;
        Ok((containers, sandboxes))
    }

    /// The CRI namespace's sandboxes with these local ids: their state from
    /// CRI, or from their tasks when CRI does not answer. One that CRI said
    /// at the inventory was not ready is taken as it was (never ready
    /// again), without a call. One that exists in neither is left out.
    async fn sandboxes_by_id(
        &self,
        ids: &BTreeSet<String>,
    ) -> Result<Vec<PodSandbox>, RuntimeError> {
        let stopped = self
            .watch
            .lock()
            .await
            .as_ref()
            .map(|watch| watch.known().stopped_sandboxes(CRI_NAMESPACE, ids))
            .unwrap_or_default();
        let ids: BTreeSet<String> = ids
            .iter()
            .filter(|id| !stopped.iter().any(|s| &s.id == *id))
            .cloned()
            .collect();
        let from_cri = try_join_all(ids.iter().map(|id| cri::sandbox(&self.channel, id))).await;
        match from_cri {
            Ok(found) => Ok(cri_sandboxes(
                stopped
                    .into_iter()
                    .chain(found.into_iter().flatten())
                    .collect(),
            )),
            Err(e) => {
                tracing::warn!(error = %e, "CRI does not answer: sandboxes read natively");
                let found = try_join_all(ids.iter().map(|id| async move {
                    tokio::try_join!(
                        native::container(&self.channel, CRI_NAMESPACE, id),
                        native::task(&self.channel, CRI_NAMESPACE, id),
                    )
                }))
                .await
                .map_err(Self::call_error("get sandbox container"))?;
                let (containers, tasks): (Vec<_>, Vec<_>) = found.into_iter().unzip();
                let mut sandboxes = cri_sandboxes(stopped);
                sandboxes.extend(native_sandboxes(
                    containers.into_iter().flatten().collect(),
                    tasks.into_iter().flatten().collect(),
                ));
                Ok(sandboxes)
            }
        }
    }

    /// Fresh facts about a batch of images (`(namespace, target digest)`):
    /// the images, and every container made from one of them. From the
    /// watch when there is one, else from a listing of every namespace.
    async fn recheck_images(
        &self,
        wanted: &[(&str, &str)],
    ) -> Result<(Vec<Image>, Vec<Container>), RuntimeError> {
        let cri_batch = wanted.iter().any(|(ns, _)| *ns == CRI_NAMESPACE);
        let (watched, (sandbox_image, cri_answered)) = tokio::join!(
            self.synced(|known| {
                let records: Vec<(&str, Vec<ImageRecord>)> = wanted
                    .iter()
                    .map(|(ns, digest)| (*ns, known.records_of(ns, digest)))
                    .collect();
                let sandboxes = known.sandbox_containers(CRI_NAMESPACE);
                (records, known.users_of_images(wanted), sandboxes)
            }),
            async {
                if cri_batch {
                    self.sandbox_image().await
                } else {
                    (None, false)
                }
            },
        );
        let Some((records, users, cri_containers)) = watched else {
            let (mut images, users) = self
                .recheck_images_listed(wanted, sandbox_image, cri_answered)
                .await?;
            self.with_cri_pins(&mut images).await;
            return Ok((images, users));
        };
        let mut images = Vec::new();
        for (namespace, records) in records {
            let pinned = pins(
                namespace,
                sandbox_image.as_ref(),
                &[],
                cri_answered,
                &cri_containers,
            );
            let data = NamespaceData {
                namespace: namespace.to_owned(),
                images: records,
                ..NamespaceData::default()
            };
            images.extend(images_of(&data, &pinned));
        }
        self.with_cri_pins(&mut images).await;
        Ok((images, users))
    }

    /// [`Self::recheck_images`] without a watch: every container and image
    /// record of every namespace, listed.
    async fn recheck_images_listed(
        &self,
        wanted: &[(&str, &str)],
        sandbox_image: Option<String>,
        cri_answered: bool,
    ) -> Result<(Vec<Image>, Vec<Container>), RuntimeError> {
        let mut images = Vec::new();
        let mut users = Vec::new();
        for data in &self.all_containers().await? {
            let containers = containers_of(data, None);
            if wanted.iter().any(|(ns, _)| *ns == data.namespace) {
                let pinned = pins(
                    &data.namespace,
                    sandbox_image.as_ref(),
                    &[],
                    cri_answered,
                    &containers,
                );
                images.extend(images_of(data, &pinned));
            }
            users.extend(containers);
        }
        Ok((images, users))
    }

    /// Every container of every configured namespace, with the image records
    /// of each namespace (what an image removal must check against).
    pub(super) async fn all_containers(&self) -> Result<Vec<NamespaceData>, RuntimeError> {
        try_join_all(self.namespaces.iter().map(|namespace| async move {
            let (containers, images) = tokio::try_join!(
                native::containers(&self.channel, namespace),
                native::images(&self.channel, namespace),
            )
            .map_err(Self::call_error("list containers and images"))?;
            Ok(NamespaceData {
                namespace: namespace.clone(),
                containers,
                images,
                ..NamespaceData::default()
            })
        }))
        .await
    }
}

/// The CRI namespace's sandboxes as CRI gave them.
fn cri_sandboxes(listed: Vec<CriPod>) -> Vec<PodSandbox> {
    let view = CriView {
        sandboxes: listed,
        ..CriView::default()
    };
    sandboxes_of(CRI_NAMESPACE, Some(&view), &[])
}

/// The CRI namespace's sandboxes read natively, from `containers` (those
/// CRI made as sandboxes) and their `tasks`: READY while the task runs.
fn native_sandboxes(containers: Vec<NativeContainer>, tasks: Vec<Process>) -> Vec<PodSandbox> {
    let data = NamespaceData {
        namespace: CRI_NAMESPACE.to_owned(),
        containers: containers
            .into_iter()
            .filter(|c| is_cri_sandbox(&c.labels))
            .collect(),
        tasks,
        ..NamespaceData::default()
    };
    sandboxes_of(CRI_NAMESPACE, None, &containers_of(&data, None))
}
