//! CRI's answers as runtime-neutral data: pure conversions, each quirk of
//! the data handled where it is read (docs/engines.md, "CRI").
//!
//! Ids are CRI's own: containers and sandboxes by their id, images by the
//! id `ListImages` gives (bare hex on CRI-O, `sha256:<config digest>` on
//! containerd). A container's image is resolved to that id, so that any
//! spelling the runtime uses elsewhere finds it.

use std::collections::HashMap;

use chrono::Utc;
use k8s_cri::v1::{Container as CriContainer, ContainerStatus, Image as CriImage};

use crate::inventory::provenance::Provenance;
use crate::inventory::{Container, ContainerState, Image, PodIdentity, Use};
pub(super) use crate::runtime::grpc::cri::{from_unix_nanos, sandbox_of as sandbox, state};

/// kubelet's pod labels on every container it makes.
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";

/// An id without its `sha256:` prefix: CRI-O gives image ids bare in
/// `ListImages` and may prefix them elsewhere.
fn bare(id: &str) -> &str {
    id.strip_prefix("sha256:").unwrap_or(id)
}

/// The images CRI lists, to resolve what a container names to an image id.
#[derive(Debug, Default)]
pub(super) struct ImageIndex {
    /// By bare id.
    by_id: HashMap<String, String>,
    /// By tag or digest reference, in every spelling.
    by_name: HashMap<String, String>,
}

impl ImageIndex {
    pub(super) fn new(images: &[CriImage]) -> Self {
        let mut index = Self::default();
        for i in images.iter().filter(|i| !i.id.is_empty()) {
            index.by_id.insert(bare(&i.id).to_owned(), i.id.clone());
            for name in i.repo_tags.iter().chain(&i.repo_digests) {
                for form in crate::inventory::reference_forms(name) {
                    index.by_name.entry(form).or_insert_with(|| i.id.clone());
                }
            }
        }
        index
    }

    /// The id of the image `name` names: an id (bare or prefixed) or a
    /// reference in any spelling; `None` for an image CRI does not list.
    pub(super) fn resolve(&self, name: &str) -> Option<&str> {
        if name.is_empty() {
            return None;
        }
        self.by_id
            .get(bare(name))
            .or_else(|| {
                crate::inventory::reference_forms(name)
                    .iter()
                    .find_map(|f| self.by_name.get(f))
            })
            .map(String::as_str)
    }
}

/// One image as CRI lists it. CRI has no pull or tag time: an image is
/// dated by safeprune's first sighting (`state_dir`). Its size is the
/// whole image, shared layers counted in each (CRI cannot tell unique
/// bytes). Where it was pulled from CRI cannot tell: its repo digests are
/// no evidence (an imported image with a digest reference shows one too).
pub(super) fn image(i: CriImage) -> Image {
    Image {
        id: i.id,
        tags: i.repo_tags,
        digests: i.repo_digests,
        size: (i.size > 0).then_some(i.size),
        pinned: i.pinned,
        cri_pinned: i.pinned,
        provenance: Provenance::Unknown {
            why: THROUGH_CRI.into(),
        },
        ..Image::default()
    }
}

/// Why no image's provenance is known through CRI alone.
pub(crate) const THROUGH_CRI: &str = "through CRI alone: CRI's repo digests are no evidence of a pull, \
     as an image never pulled may carry one too";

/// One container: as listed, with its status (the only place that has its
/// exit time, its image id and its mounts).
pub(super) fn container(
    listed: &CriContainer,
    status: Option<&ContainerStatus>,
    index: &ImageIndex,
) -> Container {
    let labels = &listed.labels;
    let label = |key: &str| {
        labels
            .get(key)
            .filter(|v| !v.is_empty())
            .map(ToOwned::to_owned)
    };
    let pod_uid = label(LABEL_POD_UID);
    let pod_name = label(LABEL_POD_NAME);
    let pod_namespace = label(LABEL_POD_NAMESPACE);
    let given_image = listed
        .image
        .as_ref()
        .map(|s| s.image.as_str())
        .filter(|s| !s.is_empty())
        .unwrap_or(&listed.image_ref);
    // The status's image id (CRI 1.31+) is the reliable match; then the
    // listed image ref, then the name kubelet gave.
    let image_id = status
        .map(|s| s.image_id.as_str())
        .into_iter()
        .chain([listed.image_ref.as_str(), given_image])
        .find_map(|name| index.resolve(name))
        .map_or_else(
            || {
                status
                    .map(|s| s.image_id.clone())
                    .filter(|id| !id.is_empty())
                    .unwrap_or_else(|| listed.image_ref.clone())
            },
            ToOwned::to_owned,
        );
    let mut image_mounts: Vec<String> = status
        .into_iter()
        .flat_map(|s| &s.mounts)
        .filter_map(|m| m.image.as_ref())
        .map(|spec| spec.image.as_str())
        .filter(|name| !name.is_empty())
        .flat_map(|name| {
            std::iter::once(name.to_owned()).chain(index.resolve(name).map(ToOwned::to_owned))
        })
        .collect();
    image_mounts.sort();
    image_mounts.dedup();
    let state = state(status.map_or(listed.state, |s| s.state));
    let finished = status
        .filter(|_| state == ContainerState::Exited)
        .and_then(|s| from_unix_nanos(s.finished_at));
    let metadata = listed.metadata.as_ref();
    let name = metadata.map_or("", |m| m.name.as_str());
    let attempt = metadata.map_or(0, |m| m.attempt);
    // kubelet's own naming of a CRI container, as containerd's CRI
    // records it: `<container>_<pod>_<namespace>_<uid>_<attempt>`.
    let display = match (&pod_name, &pod_namespace, &pod_uid) {
        (Some(pod), Some(ns), Some(uid)) if !name.is_empty() => {
            format!("{name}_{pod}_{ns}_{uid}_{attempt}")
        }
        _ if !name.is_empty() => name.to_owned(),
        _ => listed.id.clone(),
    };
    let in_pod = pod_uid.is_some() || !listed.pod_sandbox_id.is_empty();
    Container {
        id: listed.id.clone(),
        names: vec![display],
        state,
        labels: labels.clone().into_iter().collect(),
        image_id,
        image_ref: given_image.to_owned(),
        // CRI always sends it; were it missing, "just now" keeps the
        // container for a while instead of making it look ancient.
        created: from_unix_nanos(listed.created_at).unwrap_or_else(Utc::now),
        finished,
        volumes: Vec::new(),
        image_mounts,
        layer: None,
        networks: Vec::new(),
        pod: in_pod.then(|| PodIdentity {
            sandbox_id: Some(listed.pod_sandbox_id.clone()).filter(|id| !id.is_empty()),
            pod_uid,
            pod_name,
            pod_namespace,
            is_sandbox: false,
        }),
        size: None,
    }
}

/// The uses of images the containers of a snapshot show: each creation,
/// and each exit, by image id. What the usage history keeps once the
/// containers are gone.
pub(super) fn uses_of(containers: &[Container]) -> Vec<(String, Use)> {
    let mut uses = Vec::new();
    for c in containers {
        let images = std::iter::once(&c.image_id)
            .chain(&c.image_mounts)
            .filter(|id| !id.is_empty());
        for image in images {
            for used in c.image_uses() {
                uses.push((image.clone(), used));
            }
        }
    }
    uses
}

#[cfg(test)]
mod tests {
    use chrono::DateTime;
    use k8s_cri::v1::{ContainerMetadata, ContainerState as CriState, ImageSpec, Mount};

    use super::*;
    use crate::inventory::UseSource;

    fn cri_image(id: &str, tags: &[&str]) -> CriImage {
        CriImage {
            id: id.to_owned(),
            repo_tags: tags.iter().map(|t| (*t).to_owned()).collect(),
            size: 4096,
            ..CriImage::default()
        }
    }

    fn listed(id: &str, image: &str, state: CriState) -> CriContainer {
        CriContainer {
            id: id.to_owned(),
            pod_sandbox_id: "sb1".to_owned(),
            metadata: Some(ContainerMetadata {
                name: "istio-init".to_owned(),
                attempt: 2,
            }),
            image: Some(ImageSpec {
                image: image.to_owned(),
                ..ImageSpec::default()
            }),
            image_ref: String::new(),
            state: state as i32,
            created_at: 1_700_000_000_000_000_000,
            labels: [
                ("io.kubernetes.pod.uid", "uid-1"),
                ("io.kubernetes.pod.name", "web"),
                ("io.kubernetes.pod.namespace", "shop"),
                ("io.kubernetes.container.name", "istio-init"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
            ..CriContainer::default()
        }
    }

    #[test]
    fn a_containers_image_is_resolved_to_the_listed_id_whatever_the_spelling() {
        let hex = "a".repeat(64);
        let index = ImageIndex::new(&[cri_image(&hex, &["docker.io/library/app:1"])]);
        for name in [
            hex.clone(),
            format!("sha256:{hex}"),
            "app:1".to_owned(),
            "docker.io/library/app:1".to_owned(),
        ] {
            assert_eq!(index.resolve(&name), Some(hex.as_str()), "{name}");
        }
        assert_eq!(index.resolve("app:2"), None);
        assert_eq!(index.resolve(""), None);
    }

    #[test]
    fn an_exited_container_is_aged_from_its_status_and_names_its_pod() {
        let hex = "b".repeat(64);
        let volume = "c".repeat(64);
        let index =
            ImageIndex::new(&[cri_image(&hex, &["app:1"]), cri_image(&volume, &["data:1"])]);
        let l = listed("c1", "app:1", CriState::ContainerExited);
        let status = ContainerStatus {
            id: "c1".to_owned(),
            state: CriState::ContainerExited as i32,
            finished_at: 1_700_000_100_000_000_000,
            image_id: format!("sha256:{hex}"),
            mounts: vec![Mount {
                container_path: "/data".to_owned(),
                image: Some(ImageSpec {
                    image: "data:1".to_owned(),
                    ..ImageSpec::default()
                }),
                ..Mount::default()
            }],
            ..ContainerStatus::default()
        };
        let c = container(&l, Some(&status), &index);
        assert_eq!(c.state, ContainerState::Exited);
        assert_eq!(c.finished, from_unix_nanos(1_700_000_100_000_000_000));
        assert_eq!(c.image_id, hex);
        assert_eq!(c.image_ref, "app:1");
        assert_eq!(c.image_mounts, vec![volume, "data:1".to_owned()]);
        assert_eq!(c.names, ["istio-init_web_shop_uid-1_2"]);
        let pod = c.pod.unwrap();
        assert_eq!(pod.sandbox_id.as_deref(), Some("sb1"));
        assert_eq!(pod.pod_uid.as_deref(), Some("uid-1"));
        assert!(!pod.is_sandbox);
    }

    #[test]
    fn without_a_status_a_container_has_no_exit_time_and_its_state_as_listed() {
        let index = ImageIndex::default();
        let c = container(
            &listed("c2", "app:1", CriState::ContainerRunning),
            None,
            &index,
        );
        assert_eq!(c.state, ContainerState::Running);
        assert_eq!(c.finished, None);
        // An image CRI does not list stays as given: the one definition of
        // use matches it by name.
        assert_eq!(c.image_ref, "app:1");
        let unknown = container(
            &listed("c3", "app:1", CriState::ContainerUnknown),
            None,
            &index,
        );
        assert!(unknown.state.is_live(), "an unknown state is kept");
    }

    #[test]
    fn images_carry_the_runtimes_pin_and_no_time() {
        let mut i = cri_image("d", &["pause:3.10"]);
        i.pinned = true;
        let image = image(i);
        assert!(image.pinned && image.cri_pinned);
        assert_eq!(image.created, None);
        assert_eq!(image.last_tagged, None);
        assert_eq!(image.size, Some(4096));
    }

    #[test]
    fn each_container_records_its_creation_and_exit_for_its_images() {
        let c = Container {
            image_id: "img".to_owned(),
            image_mounts: vec!["vol".to_owned()],
            layer: None,
            created: DateTime::from_timestamp(100, 0).unwrap(),
            finished: DateTime::from_timestamp(200, 0),
            ..Container::default()
        };
        let uses = uses_of(&[c]);
        assert_eq!(uses.len(), 4);
        assert!(
            uses.iter()
                .any(|(i, u)| i == "vol" && u.source == UseSource::ContainerExit)
        );
        assert!(
            uses.iter()
                .any(|(i, u)| i == "img" && u.source == UseSource::ContainerCreate)
        );
    }
}
