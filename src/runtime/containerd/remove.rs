//! Removals, one object at a time: CRI's containers through CRI, plain
//! containers and images natively, each after a fresh check that it may go.

use containerd_client::tonic::{Code, Status};
use containerd_client::types::v1::Status as TaskStatus;
use k8s_cri::v1::ContainerState as CriState;
use tokio::time::Instant;

use super::convert::cri_made;
use super::watch::Known;
use super::{CRI_NAMESPACE, ContainerdRuntime, cri, native};
use crate::inventory::Container;
use crate::runtime::engine::{Removal, failed};

impl ContainerdRuntime {
    /// Removes one container as its re-check found it, never a sandbox,
    /// never a live one.
    pub(super) async fn remove_container(&self, container: &Container) -> Removal {
        let id = container.id.as_str();
        let (namespace, local) = match self.parse_id(id) {
            Ok(parts) => parts,
            Err(e) => return Removal::Failed(e),
        };
        let (by_cri, sandbox) = cri_made(&container.labels);
        if sandbox {
            return Removal::InUse(format!(
                "{id} is a pod sandbox: kubelet owns it, and safeprune never removes one"
            ));
        }
        if namespace == CRI_NAMESPACE && by_cri {
            return self.remove_cri_container(local).await;
        }
        self.remove_native_container(namespace, local).await
    }

    /// Removes a CRI container through CRI, after checking that CRI knows
    /// it and that it is not running: CRI would answer OK for an unknown
    /// container and stop a running one. A container that CRI said had
    /// exited at the inventory (final: CRI never starts it again) and that
    /// the watch, brought up to date after this removal began, still holds
    /// needs no more asking: CRI listed it, and cannot run it.
    async fn remove_cri_container(&self, id: &str) -> Removal {
        let began = Instant::now();
        let watched = self
            .synced_for_removal(began, |known| {
                let there = known.container_facts(CRI_NAMESPACE, id).is_some();
                (there, known.exited_cri_container(id).is_some())
            })
            .await;
        match watched {
            Some((false, _)) => return Removal::Gone,
            Some((true, true)) => return self.remove_through_cri(id).await,
            Some((true, false)) | None => {}
        }
        let mut client = cri::client(self.channel.clone());
        match cri::status_of(&mut client, id).await {
            Err(e) => {
                return Removal::Failed(format!(
                    "CRI does not answer ({}): a CRI container is removed only through CRI",
                    e.message()
                ));
            }
            Ok(None) => {
                return Removal::InUse(
                    "CRI does not know this container; it is not removed behind kubelet's back"
                        .to_owned(),
                );
            }
            Ok(Some(status))
                if matches!(
                    CriState::try_from(status.state),
                    Ok(CriState::ContainerRunning | CriState::ContainerUnknown) | Err(_)
                ) =>
            {
                return Removal::InUse(
                    "container is running, or in a state CRI cannot name".to_owned(),
                );
            }
            Ok(Some(_)) => {}
        }
        self.remove_through_cri(id).await
    }

    /// CRI's `RemoveContainer`, once it is known safe.
    async fn remove_through_cri(&self, id: &str) -> Removal {
        match cri::remove_container(&self.channel, id).await {
            Ok(()) => Removal::Removed,
            Err(e) => removal_from_status("CRI remove container", &e),
        }
    }

    /// Removes a plain container: a stopped task first, then the container
    /// (its snapshot goes when the removals settle). A live task (running,
    /// paused, created) is a conflict: deleting the container would orphan
    /// it (measured). Its task is read after this removal began: from the
    /// watch, brought up to date by a barrier published since (shared with
    /// the removals and the re-check that wait at the same time), or, with
    /// no watch, by `Get`.
    async fn remove_native_container(&self, namespace: &str, id: &str) -> Removal {
        let began = Instant::now();
        let watched = self
            .synced_for_removal(began, |known| {
                known
                    .container_facts(namespace, id)
                    .map(|facts| facts.tasks.into_iter().next())
            })
            .await;
        let task = match watched {
            Some(Some(task)) => task,
            Some(None) => return Removal::Gone,
            None => match native::task(&self.channel, namespace, id).await {
                Ok(task) => task,
                Err(e) => return removal_from_status("get task", &e),
            },
        };
        match task {
            None => {}
            Some(task) if task.status == TaskStatus::Stopped as i32 => {
                match native::delete_task(&self.channel, namespace, id).await {
                    Ok(()) => {}
                    // Deleted meanwhile by someone else: fine.
                    Err(e) if e.code() == Code::NotFound => {}
                    Err(e) => return removal_from_status("delete task", &e),
                }
            }
            Some(task) => {
                let state = TaskStatus::try_from(task.status)
                    .map_or("unknown", |s| s.as_str_name())
                    .to_lowercase();
                return Removal::InUse(format!("container has a live task ({state})"));
            }
        }
        match native::delete_container(&self.channel, namespace, id).await {
            // Its writable snapshot, which the record does not own, is now
            // unreferenced: the garbage collection that settles the
            // removals takes it, with every other one, in one pass.
            Ok(()) => Removal::Removed,
            Err(e) => removal_from_status("delete container", &e),
        }
    }

    /// Removes every name of one image, after a fresh check that no
    /// container of any configured namespace refers to it by name or by
    /// target: containerd deletes an image in use without a word
    /// (measured). The check reads the watch brought up to date by a
    /// barrier published after this removal began, or, without one, lists
    /// every namespace.
    pub(super) async fn remove_image(&self, id: &str) -> Removal {
        let began = Instant::now();
        let (namespace, digest) = match self.parse_id(id) {
            Ok(parts) => parts,
            Err(e) => return Removal::Failed(e),
        };
        let check = |known: &Known| {
            let users = known.users_of_images(&[(namespace, digest)]);
            (known.records_of(namespace, digest), users)
        };
        let (records, users) = match self.synced_for_removal(began, check).await {
            Some(checked) => checked,
            None => match self.all_containers().await {
                Ok(everyone) => check(&Known::listed(&everyone)),
                Err(e) => return failed(&e),
            },
        };
        if let Some(user) = users.first() {
            return Removal::InUse(format!("image is used by container {}", user.id));
        }
        if records.is_empty() {
            return Removal::Gone;
        }
        let mut deleted = 0;
        for record in &records {
            // Their content goes when the removals settle.
            match native::delete_image(
                &self.channel,
                namespace,
                &record.name,
                record.target.clone(),
            )
            .await
            {
                Ok(()) => deleted += 1,
                Err(e) if e.code() == Code::NotFound => {}
                Err(e) => return removal_from_status("delete image", &e),
            }
        }
        if deleted == 0 {
            return Removal::Gone;
        }
        // Under `images.disk` the executor measures the disk before each
        // removal: what this one freed must be gone by then, not at the
        // end of the kind.
        if self.measure_image_fs
            && let Err(e) = native::collect_garbage(&self.channel, namespace).await
        {
            tracing::warn!(error = %e, "cannot run containerd's garbage collector: the disk is measured before this image's content is freed");
        }
        Removal::Removed
    }
}

/// `NotFound` is gone, `FailedPrecondition` is in use or changed, anything
/// else failed.
pub(super) fn removal_from_status(call: &str, e: &Status) -> Removal {
    match e.code() {
        Code::NotFound => Removal::Gone,
        Code::FailedPrecondition => Removal::InUse(e.message().to_owned()),
        _ => Removal::Failed(format!(
            "containerd {call} failed: {} ({:?})",
            e.message(),
            e.code()
        )),
    }
}
