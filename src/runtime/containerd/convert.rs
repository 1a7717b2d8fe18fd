//! containerd's and CRI's answers as runtime-neutral data: pure
//! conversions, each quirk of the data handled where it is read.
//!
//! Container ids are qualified with their namespace (`<namespace>/<id>`):
//! the same id may exist in two namespaces. A container's `image_id` is its
//! image's id, `<namespace>/<target digest>` (see `images`), so that any
//! name of the image it was made from finds it.

use std::collections::HashMap;

use chrono::Utc;
use containerd_client::services::v1::{Container as NativeContainer, Image as ImageRecord};
use containerd_client::types::v1::{Process, Status as TaskStatus};
use k8s_cri::v1::{
    Container as CriContainer, ContainerStatus, PodSandbox as CriPod, PodSandboxState,
};
use prost_types::Any;
use serde::Deserialize;

use crate::inventory::{
    Container, ContainerState, LayerRef, PodIdentity, PodSandbox, sandboxes_from_containers,
};

/// The CRI plugin's labels on the containers it makes (`pkg/cri/util`).
const LABEL_CRI_KIND: &str = "io.cri-containerd.kind";
const KIND_SANDBOX: &str = "sandbox";
const KIND_CONTAINER: &str = "container";
/// kubelet's pod labels, which CRI copies onto the containerd containers.
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
/// The OCI spec annotation naming a CRI container's sandbox.
const ANNOTATION_SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";
/// CRI's own record of a container or sandbox, a JSON extension of the
/// containerd container (`pkg/cri/store/{container,sandbox}/metadata.go`).
const EXTENSION_CONTAINER: &str = "io.cri-containerd.container.metadata";
const EXTENSION_SANDBOX: &str = "io.cri-containerd.sandbox.metadata";
/// nerdctl keeps a container's name in this label (`pkg/labels`); its id
/// is random.
const LABEL_NERDCTL_NAME: &str = "nerdctl/name";

/// What the CRI plugin told us about the CRI namespace.
#[derive(Debug, Default)]
pub(super) struct CriView {
    pub sandboxes: Vec<CriPod>,
    /// By container id. Exited containers come with their status, the only
    /// place that has their exit time.
    pub containers: HashMap<String, (CriContainer, Option<ContainerStatus>)>,
    /// The sandbox (pause) image the plugin is configured with.
    pub sandbox_image: Option<String>,
    /// The names of the images CRI reports pinned (`cri::pinned_images`).
    pub pinned: Vec<String>,
}

pub(super) use crate::runtime::grpc::containerd::NamespaceData;

/// `<namespace>/<id>`.
pub(super) fn qualified(namespace: &str, id: &str) -> String {
    format!("{namespace}/{id}")
}

/// Splits `<namespace>/<id>`; `None` when either part is empty.
pub(super) fn split_qualified(id: &str) -> Option<(&str, &str)> {
    id.split_once('/')
        .filter(|(ns, rest)| !ns.is_empty() && !rest.is_empty())
}

pub(super) use crate::runtime::grpc::protobuf_time as timestamp;

pub(super) use crate::runtime::grpc::cri::from_unix_nanos;

pub(super) fn label<'a>(labels: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    labels
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The state of a native container from its task. Without a task it has
/// no process: it never ran, or its task was deleted after it exited
/// (`ctr run` without `-d` does that); containerd keeps no record of which,
/// so it is `created`, aged from its creation.
fn task_state(task: Option<&Process>) -> ContainerState {
    let Some(task) = task else {
        return ContainerState::Created;
    };
    match TaskStatus::try_from(task.status) {
        Ok(TaskStatus::Created) => ContainerState::Created,
        Ok(TaskStatus::Running) => ContainerState::Running,
        Ok(TaskStatus::Stopped) => ContainerState::Exited,
        Ok(TaskStatus::Paused | TaskStatus::Pausing) => ContainerState::Paused,
        Ok(TaskStatus::Unknown) | Err(_) => ContainerState::Unknown,
    }
}

use crate::runtime::grpc::cri::state as cri_state;

/// The part of CRI's extension record we read.
#[derive(Debug, Default, Deserialize)]
struct CriRecord {
    #[serde(rename = "Metadata", default)]
    metadata: CriRecordMetadata,
}

#[derive(Debug, Default, Deserialize)]
struct CriRecordMetadata {
    /// CRI's own name: `<container>_<pod>_<namespace>_<uid>_<attempt>`,
    /// or `<pod>_<namespace>_<uid>_<attempt>` for a sandbox.
    #[serde(rename = "Name", default)]
    name: String,
    #[serde(rename = "SandboxID", default)]
    sandbox_id: String,
    /// The container's CRI config as kubelet sent it, read leniently: its
    /// `mounts[].image.image` name the images it mounts as volumes. Any
    /// shape parses, so an odd one cannot hide the name and sandbox id.
    #[serde(rename = "Config", default)]
    config: serde_json::Value,
}

impl CriRecordMetadata {
    /// The images its container mounts as volumes (CRI `Mount.image`,
    /// KEP-4639), as kubelet named them: a reference, or CRI's image id
    /// (`sha256:<config digest>`). Measured on containerd 2.3.4
    /// (docs/engines.md, containerd 2.x).
    fn image_mounts(&self) -> Vec<String> {
        self.config
            .get("mounts")
            .and_then(serde_json::Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("image")?.get("image")?.as_str())
            .filter(|image| !image.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// The manifest digests of the image volumes an OCI spec mounts: containerd
/// 2.1+ mounts each at `<state>/io.containerd.grpc.v1.cri/image-volumes/
/// <sandbox id>/<hex of the manifest digest>` (measured on 2.3.4).
fn spec_image_volumes(spec: Option<&Any>) -> Vec<String> {
    let Some(spec) = spec.and_then(|s| serde_json::from_slice::<serde_json::Value>(&s.value).ok())
    else {
        return Vec::new();
    };
    spec.get("mounts")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("source")?.as_str())
        .filter_map(|source| {
            let (_, rest) = source.split_once(IMAGE_VOLUMES_DIR)?;
            let hex = rest.rsplit('/').next()?;
            (hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| format!("sha256:{hex}"))
        })
        .collect()
}

/// Where containerd's CRI plugin lays out image volumes, under its state
/// directory.
const IMAGE_VOLUMES_DIR: &str = "/io.containerd.grpc.v1.cri/image-volumes/";

/// The images `native` mounts as volumes, each as a key the inventory's
/// images are known by: the name kubelet gave, its target in `namespace`
/// when `target` resolves it (CRI's id record `sha256:<config>` points at
/// the manifest), and the manifest digests of the spec's mount sources.
pub(super) fn image_mounts<'a>(
    namespace: &str,
    native: &NativeContainer,
    target: impl Fn(&str) -> Option<&'a str>,
) -> Vec<String> {
    let mut mounts = Vec::new();
    for given in cri_record(native).image_mounts() {
        if let Some(digest) = target(&given) {
            mounts.push(qualified(namespace, digest));
        }
        mounts.push(given);
    }
    mounts.extend(
        spec_image_volumes(native.spec.as_ref())
            .iter()
            .map(|digest| qualified(namespace, digest)),
    );
    mounts.sort();
    mounts.dedup();
    mounts
}

/// CRI's record of a container, from its extension; empty when absent or
/// unreadable.
fn cri_record(container: &NativeContainer) -> CriRecordMetadata {
    [EXTENSION_CONTAINER, EXTENSION_SANDBOX]
        .iter()
        .find_map(|key| container.extensions.get(*key))
        .and_then(|any| serde_json::from_slice::<CriRecord>(&any.value).ok())
        .map(|r| r.metadata)
        .unwrap_or_default()
}

/// The annotations of an OCI spec (`Any` holding JSON); empty when absent
/// or unreadable.
fn spec_annotations(spec: Option<&Any>) -> HashMap<String, String> {
    #[derive(Deserialize)]
    struct Spec {
        #[serde(default)]
        annotations: HashMap<String, String>,
    }
    spec.and_then(|s| serde_json::from_slice::<Spec>(&s.value).ok())
        .map(|s| s.annotations)
        .unwrap_or_default()
}

/// Which pod a container of the CRI namespace belongs to; `None` for a
/// container CRI did not make. The sandbox id comes from CRI when it
/// answered, else from CRI's extension record or the OCI spec annotation.
fn pod_identity(
    namespace: &str,
    container: &NativeContainer,
    cri_sandbox_id: Option<&str>,
) -> Option<PodIdentity> {
    let labels = &container.labels;
    if !in_pod(labels) {
        return None;
    }
    let pod_uid = label(labels, LABEL_POD_UID);
    let is_sandbox = is_cri_sandbox(labels);
    let sandbox_id = if is_sandbox {
        None
    } else {
        cri_sandbox_id
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .or_else(|| Some(cri_record(container).sandbox_id).filter(|id| !id.is_empty()))
            .or_else(|| {
                spec_annotations(container.spec.as_ref())
                    .remove(ANNOTATION_SANDBOX_ID)
                    .filter(|id| !id.is_empty())
            })
            .map(|id| qualified(namespace, &id))
    };
    let owned = |key| label(labels, key).map(str::to_owned);
    Some(PodIdentity {
        sandbox_id,
        pod_uid: pod_uid.map(str::to_owned),
        pod_name: owned(LABEL_POD_NAME),
        pod_namespace: owned(LABEL_POD_NAMESPACE),
        is_sandbox,
    })
}

/// Whether this container belongs to a pod: CRI made it, or kubelet's
/// labels name the pod.
fn in_pod(labels: &HashMap<String, String>) -> bool {
    is_cri_kind(labels) || label(labels, LABEL_POD_UID).is_some()
}

/// Whether CRI made this container (or sandbox): removal must then go
/// through CRI.
pub(super) fn is_cri_kind(labels: &HashMap<String, String>) -> bool {
    matches!(
        label(labels, LABEL_CRI_KIND),
        Some(KIND_SANDBOX | KIND_CONTAINER)
    )
}

/// Whether CRI made this container as a pod sandbox.
pub(super) fn is_cri_sandbox(labels: &HashMap<String, String>) -> bool {
    label(labels, LABEL_CRI_KIND) == Some(KIND_SANDBOX)
}

/// What CRI made a container of the inventory as, by the label it put on
/// the record (copied to the container's labels): `(made by CRI, a
/// sandbox)`.
pub(super) fn cri_made(labels: &crate::inventory::Labels) -> (bool, bool) {
    let kind = labels.get(LABEL_CRI_KIND).map(String::as_str);
    (
        matches!(kind, Some(KIND_SANDBOX | KIND_CONTAINER)),
        kind == Some(KIND_SANDBOX),
    )
}

/// Tasks by container id. containerd 1.6 leaves `Process.container_id`
/// empty in `ListTasks` and puts the container id in `Process.id`
/// (measured); newer ones fill both.
pub(super) fn tasks_by_container(tasks: &[Process]) -> HashMap<&str, &Process> {
    tasks
        .iter()
        .map(|t| {
            let id = if t.container_id.is_empty() {
                t.id.as_str()
            } else {
                t.container_id.as_str()
            };
            (id, t)
        })
        .collect()
}

/// Image names of one namespace, resolved to their target digest.
pub(super) fn targets_by_name(images: &[ImageRecord]) -> HashMap<&str, &str> {
    images
        .iter()
        .filter_map(|i| Some((i.name.as_str(), i.target.as_ref()?.digest.as_str())))
        .filter(|(name, digest)| !name.is_empty() && !digest.is_empty())
        .collect()
}

/// A container record as a watch keeps it: without its OCI spec (a few
/// KiB each), unless the spec is where its pod's sandbox id is read from
/// (a CRI container whose CRI record does not name it). What
/// [`containers_of`] makes of it is the same as of the full record.
pub(super) fn slim_record(native: &NativeContainer) -> NativeContainer {
    let labels = &native.labels;
    // The spec also names the image volumes by manifest digest: kept when
    // it does, beside the names CRI's record gives.
    let spec_read =
        (in_pod(labels) && !is_cri_sandbox(labels) && cri_record(native).sandbox_id.is_empty())
            || !spec_image_volumes(native.spec.as_ref()).is_empty();
    let mut slim = native.clone();
    if !spec_read {
        slim.spec = None;
    }
    slim
}

/// Every container of one namespace. `cri` is what CRI said, when this is
/// the CRI namespace and CRI answered.
pub(super) fn containers_of(data: &NamespaceData, cri: Option<&CriView>) -> Vec<Container> {
    let tasks = tasks_by_container(&data.tasks);
    let targets = targets_by_name(&data.images);
    let mut containers: Vec<Container> = data
        .containers
        .iter()
        .filter(|c| !c.id.is_empty())
        .map(|c| {
            let task = tasks.get(c.id.as_str()).copied();
            container(&data.namespace, c, task, cri, &targets)
        })
        .collect();
    containers.sort_by(|a, b| a.id.cmp(&b.id));
    containers
}

/// One container as its record alone says: no task and no CRI (so its
/// state is `created`), and no image id. What decides an image's users
/// needs no more.
pub(super) fn plain_container(namespace: &str, native: &NativeContainer) -> Container {
    container(namespace, native, None, None, &HashMap::new())
}

fn container(
    namespace: &str,
    native: &NativeContainer,
    task: Option<&Process>,
    cri: Option<&CriView>,
    targets: &HashMap<&str, &str>,
) -> Container {
    let cri_kind = is_cri_kind(&native.labels);
    let from_cri = cri
        .filter(|_| cri_kind)
        .and_then(|v| v.containers.get(&native.id));
    let cri_sandbox = cri
        .filter(|_| is_cri_sandbox(&native.labels))
        .and_then(|v| v.sandboxes.iter().find(|s| s.id == native.id));
    let (state, finished) = match (from_cri, cri_sandbox) {
        (Some((listed, status)), _) => (
            cri_state(status.as_ref().map_or(listed.state, |s| s.state)),
            status.as_ref().and_then(|s| from_unix_nanos(s.finished_at)),
        ),
        // A READY sandbox is live whatever its task says; a sandbox that is
        // not ready has usually lost its task too.
        (None, Some(sandbox)) if sandbox.state == PodSandboxState::SandboxReady as i32 => {
            (ContainerState::Running, None)
        }
        (None, Some(_)) => match task_state(task) {
            ContainerState::Created => (ContainerState::Exited, None),
            state => (state, None),
        },
        // CRI answered but does not know a container labelled as its own:
        // being created or removed right now, or lost. Not ours to judge.
        (None, None) if cri.is_some() && cri_kind => (ContainerState::Unknown, None),
        (None, None) => {
            let state = task_state(task);
            let finished = task
                .filter(|_| state == ContainerState::Exited)
                .and_then(|t| timestamp(t.exited_at.as_ref()));
            (state, finished)
        }
    };
    let record = cri_kind.then(|| cri_record(native));
    let names = match (&record, label(&native.labels, LABEL_NERDCTL_NAME)) {
        (Some(r), _) if !r.name.is_empty() => vec![r.name.clone()],
        (_, Some(name)) => vec![name.to_owned()],
        _ => vec![native.id.clone()],
    };
    let cri_sandbox_id = from_cri.map(|(listed, _)| listed.pod_sandbox_id.as_str());
    Container {
        layer: (!native.snapshotter.is_empty() && !native.snapshot_key.is_empty()).then(|| {
            Box::new(LayerRef {
                snapshotter: native.snapshotter.clone(),
                key: native.snapshot_key.clone(),
            })
        }),
        image_mounts: if cri_kind {
            image_mounts(namespace, native, |name| targets.get(name).copied())
        } else {
            Vec::new()
        },
        id: qualified(namespace, &native.id),
        names,
        state,
        labels: native.labels.clone().into_iter().collect(),
        image_id: targets
            .get(native.image.as_str())
            .map(|digest| qualified(namespace, digest))
            .unwrap_or_default(),
        image_ref: native.image.clone(),
        // containerd always sends it; were it missing, "just now" keeps the
        // container for a while instead of making it look ancient.
        created: timestamp(native.created_at.as_ref()).unwrap_or_else(Utc::now),
        finished,
        volumes: Vec::new(),
        networks: Vec::new(),
        pod: pod_identity(namespace, native, cri_sandbox_id),
        size: None,
    }
}

/// Pod sandboxes: CRI's list when it answered, else every sandbox
/// container, READY while it runs.
pub(super) fn sandboxes_of(
    namespace: &str,
    cri: Option<&CriView>,
    containers: &[Container],
) -> Vec<PodSandbox> {
    let mut sandboxes: Vec<PodSandbox> = match cri {
        Some(view) => view
            .sandboxes
            .iter()
            .filter(|s| !s.id.is_empty())
            .map(|s| PodSandbox {
                id: qualified(namespace, &s.id),
                ..crate::runtime::grpc::cri::sandbox_of(s)
            })
            .collect(),
        None => sandboxes_from_containers(containers),
    };
    sandboxes.sort_by(|a, b| a.id.cmp(&b.id));
    sandboxes
}

/// The sandbox image from CRI's verbose status: its config is JSON under
/// `config`, with the image as `sandboxImage`.
pub(super) fn sandbox_image_of(info: &HashMap<String, String>) -> Option<String> {
    let config: serde_json::Value = serde_json::from_str(info.get("config")?).ok()?;
    config
        .get("sandboxImage")?
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests;
