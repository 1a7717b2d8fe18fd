//! Docker's answers as runtime-neutral data: pure conversions, each quirk
//! of the data Docker sends handled where it is read.
//!
//! Timestamps arrive as strings (bollard is built without its `chrono` or
//! `time` feature) and are parsed here, so one odd value costs one field, not
//! the whole listing.

use std::collections::{BTreeSet, HashMap};

use bollard::models::{
    ContainerInspectResponse, ContainerSummary, ContainerSummaryStateEnum, EndpointSettings,
    ImageInspect, MountPoint, Network as DockerNetwork, Volume as DockerVolume,
};
use chrono::{DateTime, Datelike, Utc};

use crate::inventory::{
    Container, ContainerState, Image, Labels, Network, PodIdentity, Volume, refs,
};

/// cri-dockerd's labels (`core/docker_service.go`, `core/sandbox_helpers.go`).
pub(super) const LABEL_DOCKER_TYPE: &str = "io.kubernetes.docker.type";
const LABEL_SANDBOX_ID: &str = "io.kubernetes.sandbox.id";
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub(super) const TYPE_SANDBOX: &str = "podsandbox";
const TYPE_CONTAINER: &str = "container";
/// API 1.42+ labels anonymous volumes; 1.41 does not.
const LABEL_ANONYMOUS_VOLUME: &str = "com.docker.volume.anonymous";

/// Parses a Docker timestamp (RFC 3339). Docker's zero time
/// `0001-01-01T00:00:00Z` ("never"), an empty string and junk are `None`.
pub(super) fn parse_docker_time(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&Utc))
        .filter(|t| t.year() > 1)
}

fn from_unix_seconds(secs: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(secs, 0)
}

/// The chain id of each layer of an image whose diff ids are `diff_ids`
/// (bottom first): the first layer's is its diff id; each next is the
/// SHA-256 of the chain id below, a space, and its own diff id (the OCI
/// image spec, `ChainID`). Two images share a layer exactly when they share
/// its chain id.
pub(super) fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let mut chains: Vec<String> = Vec::with_capacity(diff_ids.len());
    for diff in diff_ids {
        let chain = match chains.last() {
            None => diff.clone(),
            Some(below) => {
                let digest = Sha256::digest(format!("{below} {diff}").as_bytes());
                digest.iter().fold(String::from("sha256:"), |mut hex, b| {
                    let _ = write!(hex, "{b:02x}");
                    hex
                })
            }
        };
        chains.push(chain);
    }
    chains
}

/// A size in bytes; Docker says -1 for "not computed".
pub(super) fn byte_size(n: i64) -> Option<u64> {
    u64::try_from(n).ok()
}

fn labels_of(map: Option<HashMap<String, String>>) -> Labels {
    map.unwrap_or_default().into_iter().collect()
}

/// A label's value, with an empty value read as absent.
fn label<'a>(labels: &'a Labels, key: &str) -> Option<&'a str> {
    labels
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// Which pod a container belongs to, from cri-dockerd's labels; `None` for a
/// container kubelet did not make.
fn pod_identity(labels: &Labels) -> Option<PodIdentity> {
    let kind = label(labels, LABEL_DOCKER_TYPE);
    let pod_uid = label(labels, LABEL_POD_UID);
    if !matches!(kind, Some(TYPE_SANDBOX | TYPE_CONTAINER)) && pod_uid.is_none() {
        return None;
    }
    let is_sandbox = kind == Some(TYPE_SANDBOX);
    let owned = |key| label(labels, key).map(str::to_owned);
    Some(PodIdentity {
        sandbox_id: if is_sandbox {
            None
        } else {
            owned(LABEL_SANDBOX_ID)
        },
        pod_uid: pod_uid.map(str::to_owned),
        pod_name: owned(LABEL_POD_NAME),
        pod_namespace: owned(LABEL_POD_NAMESPACE),
        is_sandbox,
    })
}

/// Whether a volume is anonymous: named by Docker with 64 lowercase hex
/// characters, or (API 1.42+) labelled so.
fn is_anonymous_volume(name: &str, labels: &Labels) -> bool {
    labels.contains_key(LABEL_ANONYMOUS_VOLUME)
        || (name.len() == 64 && name.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// Container names without the leading `/`. Legacy links add names like
/// `/web/db` (the alias `db` inside `web`) to the list; those name another
/// container's view, not this one, and are dropped.
fn container_names(names: Option<Vec<String>>) -> Vec<String> {
    names
        .unwrap_or_default()
        .into_iter()
        .map(|n| n.strip_prefix('/').map(str::to_owned).unwrap_or(n))
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .collect()
}

/// Image references without API 1.41's placeholders for "none"
/// (`<none>:<none>`, `<none>@<none>`).
pub(super) fn real_refs(refs: Vec<String>) -> Vec<String> {
    refs.into_iter()
        .filter(|r| !r.is_empty() && !r.starts_with("<none>"))
        .collect()
}

/// Whether Docker deletes an image with these references by id:
/// every reference names one repository, with at most one tag (moby's
/// `isSingleReference`). No reference at all is deleted by id too.
pub(super) fn is_single_repository(refs: &[String]) -> bool {
    let mut repository = None;
    let mut tags = 0;
    for reference in refs {
        let name = refs::repository(reference);
        let is_tag = !refs::is_digest(reference);
        tags += usize::from(is_tag);
        if tags > 1 || repository.is_some_and(|r| r != name) {
            return false;
        }
        repository = Some(name);
    }
    true
}

fn container_state(state: Option<&ContainerSummaryStateEnum>) -> ContainerState {
    match state {
        Some(state) => state_named(state.as_ref()),
        None => ContainerState::Unknown,
    }
}

/// The named volumes among a container's mounts, sorted, each once.
fn volume_names(mounts: Option<Vec<MountPoint>>) -> Vec<String> {
    let names: BTreeSet<String> = mounts
        .unwrap_or_default()
        .into_iter()
        .filter(|m| m.typ.as_deref() == Some("volume"))
        .filter_map(|m| m.name.filter(|n| !n.is_empty()))
        .collect();
    names.into_iter().collect()
}

/// The networks a container is attached to, by name and by id, sorted:
/// a policy or a report may speak of either. With the default bridge
/// disabled, Docker still lists `bridge` with an empty `NetworkID`
/// (measured).
fn network_keys(networks: Option<HashMap<String, EndpointSettings>>) -> Vec<String> {
    let mut keys = BTreeSet::new();
    for (name, endpoint) in networks.unwrap_or_default() {
        if let Some(network_id) = endpoint.network_id.filter(|i| !i.is_empty()) {
            keys.insert(network_id);
        }
        keys.insert(name);
    }
    keys.into_iter().collect()
}

/// A container from its list entry, exit time not yet known. `None` when
/// the entry has no id.
pub(super) fn container_from_summary(summary: ContainerSummary) -> Option<Container> {
    let id = summary.id.filter(|id| !id.is_empty())?;
    let labels = labels_of(summary.labels);
    let volumes = volume_names(summary.mounts);
    let networks = network_keys(summary.network_settings.and_then(|s| s.networks));
    Some(Container {
        image_mounts: Vec::new(),
        layer: None,
        names: container_names(summary.names),
        state: container_state(summary.state.as_ref()),
        pod: pod_identity(&labels),
        labels,
        image_id: summary.image_id.unwrap_or_default(),
        image_ref: summary.image.unwrap_or_default(),
        // Docker always sends `Created`; were it missing, "just now" keeps
        // the container for a while instead of making it look ancient.
        created: summary
            .created
            .and_then(from_unix_seconds)
            .unwrap_or_else(Utc::now),
        finished: None,
        size: None,
        volumes,
        networks,
        id,
    })
}

/// A container from its inspect answer: what its list entry says, plus its
/// exit time. `None` when the answer has no id.
pub(super) fn container_from_inspect(inspect: ContainerInspectResponse) -> Option<Container> {
    let id = inspect.id.filter(|id| !id.is_empty())?;
    let config = inspect.config.unwrap_or_default();
    let labels = labels_of(config.labels);
    let volumes = volume_names(inspect.mounts);
    let networks = network_keys(inspect.network_settings.and_then(|s| s.networks));
    let docker_state = inspect.state.unwrap_or_default();
    let state = docker_state
        .status
        .map_or(ContainerState::Unknown, |s| state_named(s.as_ref()));
    // Only exited and dead containers have run to an end; a `created` one
    // whose start failed may carry an exit time too (as in `containers`).
    let finished = if matches!(state, ContainerState::Exited | ContainerState::Dead) {
        docker_state
            .finished_at
            .as_deref()
            .and_then(parse_docker_time)
    } else {
        None
    };
    // Inspect names the container `/name`, as the list does.
    let names = container_names(inspect.name.map(|n| vec![n]));
    Some(Container {
        image_mounts: Vec::new(),
        layer: None,
        names,
        state,
        pod: pod_identity(&labels),
        labels,
        image_id: inspect.image.unwrap_or_default(),
        image_ref: config.image.unwrap_or_default(),
        // As in a list entry: a missing creation time reads "just now".
        created: inspect
            .created
            .as_deref()
            .and_then(parse_docker_time)
            .unwrap_or_else(Utc::now),
        finished,
        size: inspect.size_rw.and_then(byte_size),
        volumes,
        networks,
        id,
    })
}

/// An image from its inspect answer, with `size` as its list entry gives
/// it (`/images/json` `Size`, which `/system/df` agrees with). `None` when
/// the answer has no id.
///
/// Inspect's own `Size` is not used: on Docker 29's containerd image store
/// it is the compressed content of the host platform alone, about a third
/// to a half of what the list says (the list adds the unpacked snapshots;
/// measured, `tests/integration/docker28.rs`), while on the graph driver
/// store both say the same.
pub(super) fn image_from_inspect(inspect: ImageInspect, size: Option<u64>) -> Option<Image> {
    let id = inspect.id.filter(|id| !id.is_empty())?;
    // Sorted: the first tag is the image's display name, and the same image
    // should read the same on every run.
    let sorted = |mut refs: Vec<String>| {
        refs.sort();
        refs
    };
    Some(Image {
        cri_pinned: false,
        // Only the list has it (`ParentId`): see `with_parent`.
        parent: None,
        id,
        tags: sorted(real_refs(inspect.repo_tags.unwrap_or_default())),
        digests: sorted(real_refs(inspect.repo_digests.unwrap_or_default())),
        created: inspect.created.as_deref().and_then(parse_docker_time),
        // Zero for an image never tagged (a build's intermediate image).
        last_tagged: inspect
            .metadata
            .and_then(|m| m.last_tag_time)
            .as_deref()
            .and_then(parse_docker_time),
        size,
        // Docker pins nothing; the policy's `images.keep` covers the pause
        // image.
        pinned: false,
        unique_size: None,
        recorded_use: None,
        first_seen: None,
        // Read by the caller, which knows the image store.
        provenance: crate::inventory::provenance::Provenance::default(),
    })
}

/// A container's state as Docker names it (`State`); anything unexpected
/// is `Unknown`, which counts as live: a state we cannot name is not one
/// we delete in.
pub(super) fn state_named(state: &str) -> ContainerState {
    match state {
        "created" => ContainerState::Created,
        "running" => ContainerState::Running,
        "paused" => ContainerState::Paused,
        "restarting" => ContainerState::Restarting,
        "removing" => ContainerState::Removing,
        "exited" => ContainerState::Exited,
        "dead" => ContainerState::Dead,
        _ => ContainerState::Unknown,
    }
}

/// Whether the engine keeps its images in containerd's store (Docker 29's
/// default, `"features": {"containerd-snapshotter": true}`): `/info`'s
/// driver status then says `driver-type io.containerd.snapshotter.v1`.
pub(super) fn uses_containerd_store(info: &bollard::models::SystemInfo) -> bool {
    info.driver_status.iter().flatten().any(|pair| {
        pair.first().map(String::as_str) == Some("driver-type")
            && pair
                .get(1)
                .is_some_and(|v| v.starts_with("io.containerd.snapshotter"))
    })
}

pub(super) fn volume_from_docker(volume: DockerVolume) -> Volume {
    let labels: Labels = volume.labels.into_iter().collect();
    Volume {
        anonymous: is_anonymous_volume(&volume.name, &labels),
        created: volume.created_at.as_deref().and_then(parse_docker_time),
        // Only `/system/df` fills UsageData; the list leaves it out.
        size: volume.usage_data.and_then(|u| byte_size(u.size)),
        labels,
        name: volume.name,
    }
}

pub(super) fn network_from_docker(network: DockerNetwork) -> Option<Network> {
    let id = network.id.filter(|id| !id.is_empty())?;
    Some(Network {
        name: network.name.unwrap_or_default(),
        created: network.created.as_deref().and_then(parse_docker_time),
        labels: labels_of(network.labels),
        id,
    })
}

#[cfg(test)]
mod tests {
    /// The OCI image spec's `ChainID`, checked against Python's hashlib:
    /// `sha256("<chain below> <diff id>")`.
    #[test]
    fn chain_ids_follow_the_oci_image_spec() {
        let diff = |c: char| format!("sha256:{}", c.to_string().repeat(64));
        assert_eq!(
            super::chain_ids(&[diff('a'), diff('b'), diff('c')]),
            [
                diff('a'),
                "sha256:ccd722928bd92476ba1745586fed6e45a102504185ad88cd89e01ff116fd146c"
                    .to_owned(),
                "sha256:c1377126441fb2f5ec2c21ae2a60255331d639e830f0ee1b40a36e52d4c40588"
                    .to_owned(),
            ]
        );
        assert!(super::chain_ids(&[]).is_empty());
    }

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn docker_states_fold_and_an_unknown_one_is_live() {
        assert_eq!(state_named("exited"), ContainerState::Exited);
        assert_eq!(state_named("paused"), ContainerState::Paused);
        assert!(state_named("frobbed").is_live());
        assert!(!state_named("created").is_live());
    }

    #[test]
    fn one_repository_with_at_most_one_tag_is_deleted_by_id() {
        let refs = |list: &[&str]| list.iter().map(|r| (*r).to_owned()).collect::<Vec<_>>();
        for single in [
            refs(&[]),
            refs(&["app:1"]),
            refs(&["app:1", "app@sha256:aa"]),
            refs(&["app@sha256:aa", "app@sha256:bb"]),
            refs(&["reg:5000/team/app:1", "reg:5000/team/app@sha256:aa"]),
        ] {
            assert!(is_single_repository(&single), "{single:?}");
        }
        for several in [
            refs(&["app:1", "app:2"]),
            refs(&["app:1", "other:1"]),
            refs(&["app:1", "other@sha256:aa"]),
            refs(&["app@sha256:aa", "other@sha256:aa"]),
            refs(&["reg:5000/app:1", "reg:5001/app:1"]),
        ] {
            assert!(!is_single_repository(&several), "{several:?}");
        }
    }

    #[test]
    fn zero_empty_and_junk_times_are_none() {
        assert_eq!(parse_docker_time("0001-01-01T00:00:00Z"), None);
        assert_eq!(parse_docker_time(""), None);
        assert_eq!(parse_docker_time("yesterday"), None);
        let t = parse_docker_time("2026-11-22T16:23:05.838801127Z").unwrap();
        assert_eq!(t.timestamp(), 1_795_364_585);
        let offset = parse_docker_time("2026-11-22T17:23:05+01:00").unwrap();
        assert_eq!(offset.timestamp(), 1_795_364_585);
    }

    #[test]
    fn negative_sizes_mean_unknown() {
        assert_eq!(byte_size(-1), None);
        assert_eq!(byte_size(0), Some(0));
        assert_eq!(byte_size(1_982_270), Some(1_982_270));
    }

    #[test]
    fn anonymous_volumes_by_name_or_label() {
        let hex = "a3370ccf827bc78b9677d5ae60d92d1a5002f6d6d61ee13807aca435019b14e3";
        assert!(is_anonymous_volume(hex, &Labels::new()));
        assert!(!is_anonymous_volume(&hex.to_uppercase(), &Labels::new()));
        assert!(!is_anonymous_volume(&hex[1..], &Labels::new()));
        assert!(!is_anonymous_volume("pgdata", &Labels::new()));
        assert!(is_anonymous_volume(
            "pgdata",
            &labels(&[(LABEL_ANONYMOUS_VOLUME, "")])
        ));
    }

    #[test]
    fn sandbox_labels_make_a_sandbox_identity() {
        let pod = pod_identity(&labels(&[
            (LABEL_DOCKER_TYPE, "podsandbox"),
            (LABEL_POD_UID, "uid-1"),
            (LABEL_POD_NAME, "web"),
            (LABEL_POD_NAMESPACE, "default"),
            (LABEL_SANDBOX_ID, "ignored-for-a-sandbox"),
        ]))
        .unwrap();
        assert!(pod.is_sandbox);
        assert_eq!(pod.sandbox_id, None);
        assert_eq!(pod.pod_uid.as_deref(), Some("uid-1"));
        assert_eq!(pod.pod_name.as_deref(), Some("web"));
        assert_eq!(pod.pod_namespace.as_deref(), Some("default"));
    }

    #[test]
    fn container_labels_name_their_sandbox() {
        let pod = pod_identity(&labels(&[
            (LABEL_DOCKER_TYPE, "container"),
            (LABEL_SANDBOX_ID, "abc"),
            (LABEL_POD_UID, "uid-1"),
        ]))
        .unwrap();
        assert!(!pod.is_sandbox);
        assert_eq!(pod.sandbox_id.as_deref(), Some("abc"));
        assert_eq!(pod.pod_name, None);
    }

    #[test]
    fn empty_or_missing_kube_labels_are_no_pod() {
        assert_eq!(pod_identity(&Labels::new()), None);
        assert_eq!(pod_identity(&labels(&[(LABEL_DOCKER_TYPE, "")])), None);
        assert_eq!(pod_identity(&labels(&[(LABEL_DOCKER_TYPE, "other")])), None);
        // A pod uid alone is enough to belong to a pod; empty values are absent.
        let pod =
            pod_identity(&labels(&[(LABEL_POD_UID, "uid-1"), (LABEL_SANDBOX_ID, "")])).unwrap();
        assert_eq!(pod.sandbox_id, None);
        assert!(!pod.is_sandbox);
    }

    #[test]
    fn names_lose_slash_and_link_aliases() {
        let names = container_names(Some(vec![
            "/web".to_owned(),
            "/web/db".to_owned(),
            "/".to_owned(),
            "plain".to_owned(),
        ]));
        assert_eq!(names, ["web", "plain"]);
        assert!(container_names(None).is_empty());
    }

    #[test]
    fn none_placeholders_are_not_references() {
        let refs = real_refs(vec![
            "<none>:<none>".to_owned(),
            "<none>@<none>".to_owned(),
            String::new(),
            "busybox:1.36".to_owned(),
        ]);
        assert_eq!(refs, ["busybox:1.36"]);
    }

    #[test]
    fn a_summary_with_odd_data_still_converts() {
        let summary = ContainerSummary {
            id: Some("c1".to_owned()),
            ..ContainerSummary::default()
        };
        let c = container_from_summary(summary).unwrap();
        assert!(c.names.is_empty());
        assert_eq!(c.state, ContainerState::Unknown);
        assert_eq!(c.pod, None);
        assert_eq!(c.display_name(), "c1");
        assert!(container_from_summary(ContainerSummary::default()).is_none());
    }

    #[test]
    fn paused_sandboxes_are_ready() {
        let summary = |id: &str, state| ContainerSummary {
            id: Some(id.to_owned()),
            state: Some(state),
            labels: Some(HashMap::from([(
                LABEL_DOCKER_TYPE.to_owned(),
                TYPE_SANDBOX.to_owned(),
            )])),
            ..ContainerSummary::default()
        };
        let containers: Vec<Container> = [
            summary("running", ContainerSummaryStateEnum::RUNNING),
            summary("paused", ContainerSummaryStateEnum::PAUSED),
            summary("exited", ContainerSummaryStateEnum::EXITED),
        ]
        .into_iter()
        .filter_map(container_from_summary)
        .collect();
        let ready: Vec<(String, bool)> = crate::inventory::sandboxes_from_containers(&containers)
            .into_iter()
            .map(|s| (s.id, s.ready))
            .collect();
        assert_eq!(
            ready,
            [
                ("running".to_owned(), true),
                ("paused".to_owned(), true),
                ("exited".to_owned(), false)
            ]
        );
    }
}
