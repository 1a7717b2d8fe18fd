//! The runtime-neutral snapshot of a node that the planner decides over.
//!
//! Adapters fill an [`Inventory`] from their engine's answers and convert
//! every quirk at that boundary; nothing here knows bollard or containerd.
//! The planner reads it and never touches a runtime.

pub mod pods;
pub mod provenance;
pub mod refs;
pub mod uses;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use chrono::{DateTime, Utc};
use serde::Serialize;

/// Parsing image references: one place for the whole crate.
pub use refs as references;
pub use refs::reference_forms;

/// The kinds of object safeprune decides over, in removal order.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Container,
    Network,
    Volume,
    Image,
    BuildCache,
}

impl Kind {
    /// Every kind, in the order reports list them.
    pub const ALL: [Kind; 5] = [
        Kind::Container,
        Kind::Image,
        Kind::Volume,
        Kind::Network,
        Kind::BuildCache,
    ];

    /// Every kind, in the order the executor removes them.
    pub const REMOVAL_ORDER: [Kind; 5] = [
        Kind::Container,
        Kind::Network,
        Kind::Volume,
        Kind::Image,
        Kind::BuildCache,
    ];

    /// The name used in reports and JSON.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Container => "container",
            Self::Network => "network",
            Self::Volume => "volume",
            Self::Image => "image",
            Self::BuildCache => "build_cache",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The runtimes safeprune speaks to. Commands compare these, never names;
/// each runtime's own vocabulary stays in its adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Docker,
    Containerd,
    /// Any CRI runtime (CRI-O), through CRI alone.
    Cri,
}

impl RuntimeKind {
    /// The name reports, logs and saved plans give it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Docker => "docker",
            Self::Containerd => "containerd",
            Self::Cri => "cri",
        }
    }
}

impl fmt::Display for RuntimeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Labels as the runtime reports them, ordered for deterministic output.
pub type Labels = BTreeMap<String, String>;

/// Everything the planner needs to know about one node, taken at one moment.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Inventory {
    /// Which runtime the snapshot came from: `docker`, `containerd` or
    /// `cri`.
    pub runtime: String,
    pub containers: Vec<Container>,
    pub images: Vec<Image>,
    pub volumes: Vec<Volume>,
    pub networks: Vec<Network>,
    pub build_cache: Vec<BuildCacheEntry>,
    /// Pod sandboxes as kubelet sees them, with their READY state.
    pub sandboxes: Vec<PodSandbox>,
    /// The image store's file system, when the runtime could measure it.
    pub image_fs: Option<FsUsage>,
    /// The engine API version spoken (Docker: 1.41): what `docker system
    /// prune` does depends on it. `None` where it does not matter.
    pub api_version: Option<ApiVersion>,
    /// How the engine keeps its images, where its own prune depends on it.
    pub image_store: ImageStore,
    /// On a `cri` node, the runtime behind CRI as its `Version` names it
    /// (`cri-o`, `containerd`): what `crictl rmi --prune` meets there
    /// depends on it. Empty elsewhere.
    pub cri_runtime: String,
}

impl Inventory {
    /// Why this is a Kubernetes node, when it is: a CRI runtime answers
    /// (containerd, or any runtime through CRI alone), or kubelet's
    /// containers are seen on Docker (a pod's labels, or a sandbox). What
    /// `images.keep_unpullable: auto` decides by.
    #[must_use]
    pub fn kubernetes_node(&self) -> Option<String> {
        match self.runtime.as_str() {
            "containerd" | "cri" => Some(format!("a CRI runtime ({})", self.runtime)),
            _ if !self.sandboxes.is_empty() || self.containers.iter().any(|c| c.pod.is_some()) => {
                Some(format!("kubelet's containers seen on {}", self.runtime))
            }
            _ => None,
        }
    }
}

/// What each image holds on disk, resource by resource (a content blob, an
/// unpacked snapshot), where the runtime can itemize it: by image id, each
/// resource's key and bytes. A resource two images share is one resource.
/// Removing a set of images frees the resources only images of the set
/// hold; an image the runtime could not itemize counts whole, as before.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageHolds(pub HashMap<String, Vec<(String, u64)>>);

impl ImageHolds {
    /// Whether `image` is itemized.
    #[must_use]
    pub fn itemizes(&self, image: &str) -> bool {
        self.0.contains_key(image)
    }

    /// The bytes removing every itemized image of `removed` frees: each
    /// resource once, and only those no image outside `removed` holds.
    #[must_use]
    pub fn freed_by<'a>(&self, removed: impl IntoIterator<Item = &'a str>) -> u64 {
        let removed: std::collections::HashSet<&str> = removed.into_iter().collect();
        let mut kept: std::collections::HashSet<&str> = std::collections::HashSet::new();
        let mut freed: HashMap<&str, u64> = HashMap::new();
        for (image, resources) in &self.0 {
            let gone = removed.contains(image.as_str());
            for (key, bytes) in resources {
                if gone {
                    freed.insert(key, *bytes);
                } else {
                    kept.insert(key);
                }
            }
        }
        freed
            .into_iter()
            .filter(|(key, _)| !kept.contains(key))
            .map(|(_, bytes)| bytes)
            .sum()
    }
}

/// An engine API version, `major.minor`, compared by number (1.9 is
/// older than 1.41, which is older than 1.100).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    pub major: u32,
    pub minor: u32,
}

impl ApiVersion {
    #[must_use]
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// `1.41` as a version; `None` for anything else.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        let (major, minor) = text.split_once('.')?;
        Some(Self::new(major.parse().ok()?, minor.parse().ok()?))
    }
}

/// Written as the engine writes it: `"1.41"`.
impl Serialize for ApiVersion {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// How an engine keeps its images: what a prune of its own does differs
/// (Docker's graph drivers against Docker 29's containerd image store).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageStore {
    /// Docker's graph drivers (overlay2), and every runtime where it does
    /// not matter.
    #[default]
    Graph,
    /// containerd's image store under Docker (Docker 29's default).
    Containerd,
}

/// The lifecycle state of a container, folded across runtimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    Created,
    Running,
    Paused,
    Restarting,
    Removing,
    Exited,
    Dead,
    /// The runtime reported a state we do not know; treated as live (kept).
    /// The default: a container whose state is not known is not deleted.
    #[default]
    Unknown,
}

impl ContainerState {
    /// Whether the container is alive or in a state we must not touch.
    ///
    /// `Unknown` counts as live: a state we cannot name is not one we delete in.
    #[must_use]
    pub fn is_live(self) -> bool {
        matches!(
            self,
            Self::Running | Self::Paused | Self::Restarting | Self::Removing | Self::Unknown
        )
    }

    /// The lowercase name used in reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Running => "running",
            Self::Paused => "paused",
            Self::Restarting => "restarting",
            Self::Removing => "removing",
            Self::Exited => "exited",
            Self::Dead => "dead",
            Self::Unknown => "unknown",
        }
    }
}

/// Which pod a container belongs to, read from kubelet's labels.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PodIdentity {
    /// The sandbox this container runs in (none for a sandbox itself).
    pub sandbox_id: Option<String>,
    pub pod_uid: Option<String>,
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
    /// Whether this container is the pod's sandbox (pause) container.
    pub is_sandbox: bool,
}

/// One container of any state.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Container {
    /// Full runtime id (containerd: `<namespace>/<id>`).
    pub id: String,
    /// Names without Docker's leading `/`; may be empty.
    pub names: Vec<String>,
    pub state: ContainerState,
    pub labels: Labels,
    /// The id of the image it was created from (Docker `ImageID`).
    pub image_id: String,
    /// The reference it was created from, as given (may be an id).
    pub image_ref: String,
    pub created: DateTime<Utc>,
    /// When it last exited; `None` if it never ran or the runtime did not say.
    pub finished: Option<DateTime<Utc>>,
    /// Names of the volumes it mounts.
    pub volumes: Vec<String>,
    /// The images it mounts as volumes (CRI `Mount.image`, KEP-4639), each
    /// as the inventory's images name them: an image id or a reference.
    /// They are in use as long as the container is: its next start mounts
    /// them again.
    pub image_mounts: Vec<String>,
    /// Ids and names of the networks it is attached to.
    pub networks: Vec<String>,
    /// Set when kubelet made it; `None` for plain containers.
    pub pod: Option<PodIdentity>,
    /// Bytes of its writable layer: what removing it frees. `None` when
    /// the runtime does not say (Docker computes it only for stopped
    /// containers, which are the ones that can go).
    pub size: Option<u64>,
    /// Its writable layer as the runtime names it, where sizing it is left
    /// to `Engine::measure_containers` (containerd): what measuring it
    /// needs travels with the container. Not part of any output.
    #[serde(skip)]
    pub layer: Option<Box<LayerRef>>,
}

/// A writable layer as containerd names it: its snapshotter and the
/// snapshot's key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerRef {
    pub snapshotter: String,
    pub key: String,
}

impl Container {
    /// The name to show: the first name, else the short id.
    #[must_use]
    pub fn display_name(&self) -> String {
        self.names
            .first()
            .cloned()
            .unwrap_or_else(|| short_id(&self.id))
    }

    /// `namespace/name` of its pod, `?` for what kubelet did not label;
    /// `None` outside a pod.
    #[must_use]
    pub fn pod_display_name(&self) -> Option<String> {
        self.pod.as_ref().map(|p| {
            format!(
                "{}/{}",
                p.pod_namespace.as_deref().unwrap_or("?"),
                p.pod_name.as_deref().unwrap_or("?")
            )
        })
    }

    /// The uses it makes of the images it was made from or mounts: its
    /// creation, then its exit when it has exited.
    pub fn image_uses(&self) -> impl Iterator<Item = Use> + use<> {
        let created = Use {
            at: self.created,
            source: UseSource::ContainerCreate,
        };
        let exited = self.finished.map(|at| Use {
            at,
            source: UseSource::ContainerExit,
        });
        std::iter::once(created).chain(exited)
    }

    /// What `explain` shows of it besides its decision: (what, value).
    #[must_use]
    pub fn facts(&self) -> Vec<(&'static str, String)> {
        let mut facts = vec![
            ("state", self.state.as_str().to_owned()),
            ("image", self.image_ref.clone()),
        ];
        if let Some(pod) = self.pod_display_name() {
            facts.push(("pod", pod));
            if let Some(sandbox) = self.pod.as_ref().and_then(|p| p.sandbox_id.clone()) {
                facts.push(("sandbox", sandbox));
            }
        }
        facts
    }
}

/// One image, with every reference that points at it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Image {
    /// Full id (`sha256:...`; containerd: `<namespace>/<target digest>`).
    pub id: String,
    /// `repo:tag` references; empty for a dangling image.
    pub tags: Vec<String>,
    /// `repo@digest` references.
    pub digests: Vec<String>,
    pub created: Option<DateTime<Utc>>,
    /// The last time the runtime itself saw it used: pulled, tagged, loaded.
    /// The planner adds container use on top.
    pub last_tagged: Option<DateTime<Utc>>,
    /// Bytes on disk; `None` when the runtime does not say.
    pub size: Option<u64>,
    /// Pinned by the runtime: CRI reports it pinned, containerd's pinned
    /// label, or a name of the runtime's configured sandbox image.
    pub pinned: bool,
    /// Pinned as CRI reports it (`Image.pinned` of `ListImages`): what
    /// crictl and kubelet honour. containerd before 1.6.22 and 1.7.3
    /// reports nothing pinned, whatever its labels.
    pub cri_pinned: bool,
    /// The id of the image it was built on, where the engine refuses to
    /// delete a parent while a child exists (Docker's overlay2 store:
    /// `docker commit`, a classic build). `None` elsewhere.
    pub parent: Option<String>,
    /// What removing it alone frees: its bytes that no other image shares;
    /// `None` when the runtime does not say (`size` stands in).
    pub unique_size: Option<u64>,
    /// Its latest use that safeprune recorded (the usage history): a
    /// container created or started from it since, perhaps, deleted.
    pub recorded_use: Option<Use>,
    /// When safeprune first saw it on this node (the usage history), given
    /// only where the runtime says nothing of when it came: CRI has no pull
    /// or tag time, and `docker load` leaves Docker's `LastTagTime` zero.
    /// An image just loaded counts as new, not as old as its build.
    pub first_seen: Option<DateTime<Utc>>,
    /// Where its content was pulled from, as the runtime's evidence says:
    /// whether each of its names can come back once it is removed.
    pub provenance: provenance::Provenance,
}

/// A use of an image, and what it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Use {
    pub at: DateTime<Utc>,
    pub source: UseSource,
}

/// What an image's last use was.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum UseSource {
    /// The image was made (its creation time): nothing later is known.
    Created,
    /// Pulled, imported or tagged.
    PullOrTag,
    /// A container was created from it.
    ContainerCreate,
    /// A container made from it was started.
    ContainerStart,
    /// A container made from it exited.
    ContainerExit,
    /// safeprune first saw it on the node, and the runtime says nothing
    /// later (CRI; an image `docker load` brought).
    FirstSeen,
}

impl UseSource {
    /// As reports write it: `container start`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "image created",
            Self::PullOrTag => "pull, import or tag",
            Self::ContainerCreate => "container create",
            Self::ContainerStart => "container start",
            Self::ContainerExit => "container exit",
            Self::FirstSeen => "first seen by safeprune",
        }
    }
}

/// How full the file system holding the image store is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FsUsage {
    /// The directory measured (Docker's root dir; on Docker's containerd
    /// image store and on containerd, the snapshotter's directory).
    pub path: String,
    /// Bytes in use.
    pub used_bytes: u64,
    /// Bytes still free for an unprivileged writer (as `df` counts them).
    pub available_bytes: u64,
    /// Set when `path` only stands in for where the engine keeps its
    /// images, which could not be found or measured: what it is, for
    /// the rules' details (Docker's containerd image store measured at
    /// `DockerRootDir`). `None` when `path` is that place.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stand_in: Option<String>,
}

impl FsUsage {
    /// "the image file system", and what stands in for it when something
    /// does: how the rules' details name it.
    #[must_use]
    pub fn named(&self) -> String {
        match &self.stand_in {
            None => "the image file system".to_owned(),
            Some(what) => format!("the image file system ({what})"),
        }
    }

    /// Usage as `df` reports it: used over used plus available, in percent.
    #[must_use]
    pub fn percent(&self) -> f64 {
        Self::percent_of(self.used_bytes, self.available_bytes)
    }

    /// The usage percent once `freed` more bytes are free.
    #[must_use]
    pub fn percent_after(&self, freed: u64) -> f64 {
        let freed = freed.min(self.used_bytes);
        Self::percent_of(self.used_bytes - freed, self.available_bytes + freed)
    }

    #[expect(clippy::cast_precision_loss, reason = "a percentage")]
    fn percent_of(used: u64, available: u64) -> f64 {
        let total = used.saturating_add(available);
        if total == 0 {
            return 100.0;
        }
        used as f64 * 100.0 / total as f64
    }
}

impl Image {
    /// The name to show: the first tag, else the first digest, else the id.
    #[must_use]
    pub fn display_name(&self) -> String {
        self.tags
            .first()
            .or_else(|| self.digests.first())
            .cloned()
            .unwrap_or_else(|| short_id(&self.id))
    }

    /// Whether the image has no tag (Docker's "dangling").
    #[must_use]
    pub fn is_dangling(&self) -> bool {
        self.tags.is_empty()
    }

    /// Whether the runtime says nothing of when the image came to the
    /// node: no pull or tag time, and either no time at all (CRI) or a
    /// name it came with but no time for it (`docker load` on Docker's
    /// overlay2 store leaves `LastTagTime` zero). Its build time then says
    /// nothing: it is dated by safeprune's first sighting instead. A
    /// dangling image Docker built here keeps its creation time.
    #[must_use]
    pub fn arrival_unknown(&self) -> bool {
        self.last_tagged.is_none() && (self.created.is_none() || !self.tags.is_empty())
    }

    /// Its names no registry can give back, as its provenance says: tags
    /// and digest references, in order. None for a dangling image (it is
    /// pruned as any other), nor where the runtime cannot tell.
    #[must_use]
    pub fn lost_names(&self) -> Vec<&str> {
        if self.is_dangling() {
            return Vec::new();
        }
        self.provenance.lost(self.tags.iter().chain(&self.digests))
    }

    /// What `explain` says of it beside its decision: where it was pulled
    /// from, as the runtime's evidence says.
    #[must_use]
    pub fn facts(&self) -> Vec<(&'static str, String)> {
        vec![("provenance", self.provenance.describe())]
    }
}

/// One volume.
#[derive(Debug, Clone, Serialize)]
pub struct Volume {
    pub name: String,
    /// Made by the runtime for a container, with no name of its own.
    pub anonymous: bool,
    pub labels: Labels,
    pub created: Option<DateTime<Utc>>,
    pub size: Option<u64>,
}

/// One network.
#[derive(Debug, Clone, Serialize)]
pub struct Network {
    pub id: String,
    pub name: String,
    pub created: Option<DateTime<Utc>>,
    pub labels: Labels,
}

/// One build cache record.
#[derive(Debug, Clone, Serialize)]
pub struct BuildCacheEntry {
    pub id: String,
    pub description: String,
    pub created: Option<DateTime<Utc>>,
    pub last_used: Option<DateTime<Utc>>,
    pub size: Option<u64>,
    /// Held by a running build right now.
    pub in_use: bool,
    /// The records it was built on: `BuildKit` refuses to prune a parent
    /// while a child is left, so children go first.
    pub parents: Vec<String>,
}

/// A pod sandbox as kubelet sees it.
#[derive(Debug, Clone, Serialize)]
pub struct PodSandbox {
    pub id: String,
    pub pod_uid: Option<String>,
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
    /// READY: its sandbox container is running.
    pub ready: bool,
}

/// Pod sandboxes read off their sandbox containers, READY while the
/// container is live. Docker keeps `Running` true while a container is
/// paused or restarting, so every live state counts: calling a sandbox ready
/// keeps its pod's containers, the safe side.
#[must_use]
pub fn sandboxes_from_containers(containers: &[Container]) -> Vec<PodSandbox> {
    containers
        .iter()
        .filter_map(|c| {
            let pod = c.pod.as_ref().filter(|p| p.is_sandbox)?;
            Some(PodSandbox {
                id: c.id.clone(),
                pod_uid: pod.pod_uid.clone(),
                pod_name: pod.pod_name.clone(),
                pod_namespace: pod.pod_namespace.clone(),
                ready: c.state.is_live(),
            })
        })
        .collect()
}

/// The first 12 characters of an id, after any `sha256:` prefix; a
/// containerd id keeps its namespace: `k8s.io/0123456789ab`.
#[must_use]
pub fn short_id(id: &str) -> String {
    let (namespace, rest) = match id.split_once('/') {
        Some((ns, rest)) => (Some(ns), rest),
        None => (None, id),
    };
    let bare = strip_digest_prefix(rest);
    let short = match bare.char_indices().nth(12) {
        Some((at, _)) => &bare[..at],
        None => bare,
    };
    match namespace {
        Some(ns) => format!("{ns}/{short}"),
        None => short.to_owned(),
    }
}

/// An id without its `sha256:` prefix.
#[must_use]
pub fn strip_digest_prefix(id: &str) -> &str {
    id.strip_prefix("sha256:").unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_id_strips_digest_prefix_and_truncates() {
        assert_eq!(short_id("sha256:0123456789abcdef"), "0123456789ab");
        assert_eq!(short_id("abc"), "abc");
        assert_eq!(short_id(""), "");
        assert_eq!(
            short_id("k8s.io/sha256:0123456789abcdef"),
            "k8s.io/0123456789ab"
        );
        assert_eq!(short_id("k8s.io/0123456789abcdef"), "k8s.io/0123456789ab");
    }

    #[test]
    fn api_versions_compare_by_number() {
        let v = |t| ApiVersion::parse(t).unwrap();
        assert!(v("1.9") < v("1.41") && v("1.41") < v("1.100") && v("1.100") < v("2.0"));
        assert_eq!(v("1.42"), ApiVersion::new(1, 42));
        assert_eq!(ApiVersion::parse("x"), None);
        assert_eq!(ApiVersion::parse("1"), None);
        assert_eq!(v("1.55").to_string(), "1.55");
    }

    #[test]
    fn unknown_state_is_treated_as_live() {
        assert!(ContainerState::Unknown.is_live());
        assert!(!ContainerState::Exited.is_live());
        assert!(!ContainerState::Created.is_live());
    }
}
