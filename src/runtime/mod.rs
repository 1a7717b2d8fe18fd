//! The runtimes safeprune talks to, behind one interface.
//!
//! [`Engine`] is what the app and the executor need from a runtime: a
//! snapshot, fresh facts about one object just before its removal, and the
//! removal itself. [`Runtime`] dispatches to the real adapters; tests of the
//! planner and executor use an in-memory engine instead.

pub mod containerd;
pub mod cri;
pub mod docker;
mod grpc;
#[cfg(test)]
pub mod memory;

use std::path::PathBuf;

use crate::inventory::{Inventory, Kind, RuntimeKind};
use crate::output::Chain;

/// Why a runtime could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The engine did not answer at its endpoint.
    #[error("cannot reach {runtime} at {endpoint} ({hint})")]
    Unreachable {
        runtime: &'static str,
        endpoint: String,
        hint: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The engine answered, but a call failed.
    #[error("{runtime} {call} failed")]
    Call {
        runtime: &'static str,
        call: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl RuntimeError {
    /// This error as one short line a person can act on: what failed, the
    /// cause in a few words and what to do (`cannot reach Docker at
    /// /var/run/docker.sock: permission denied (run as root, or as a
    /// member of the docker group)`). [`Chain`] says every cause, for `-v`.
    #[must_use]
    pub fn brief(&self) -> String {
        match self {
            Self::Unreachable {
                runtime,
                endpoint,
                hint,
                source,
            } => {
                let at = socket_of(endpoint);
                let (cause, todo) = match source.downcast_ref::<NoneAnswered>() {
                    Some(each) => (each.brief(), (*hint).to_owned()),
                    None => unanswered(runtime, at, hint, source.as_ref()),
                };
                format!("cannot reach {} at {at}: {cause} ({todo})", shown(runtime))
            }
            Self::Call { source, .. } => {
                let root = crate::output::root_cause(source.as_ref());
                let cause = crate::output::io_cause(source.as_ref())
                    .map_or_else(|| root.to_string(), crate::output::io_words);
                format!("{self}: {cause}")
            }
        }
    }
}

/// An endpoint as a person names the socket: without `unix://`.
fn socket_of(endpoint: &str) -> &str {
    endpoint.strip_prefix("unix://").unwrap_or(endpoint)
}

/// A runtime's name as a sentence gives it.
fn shown(runtime: &str) -> &str {
    match runtime {
        "docker" => "Docker",
        "cri" => "a CRI runtime",
        other => other,
    }
}

/// Why `runtime` did not answer, in a few words, and what to do about it:
/// `hint`, unless the cause says better (no permission on the socket).
fn unanswered(
    runtime: &str,
    socket: &str,
    hint: &str,
    source: &(dyn std::error::Error + 'static),
) -> (String, String) {
    use std::io::ErrorKind;
    let denied = || {
        (
            "permission denied".to_owned(),
            match runtime {
                "docker" => "run as root, or as a member of the docker group",
                _ => "run as root",
            }
            .to_owned(),
        )
    };
    let mut next = Some(source);
    while let Some(e) = next {
        // bollard looks for the socket itself before it connects, and
        // takes a directory it may not search for no socket at all.
        if let Some(bollard::errors::Error::SocketNotFoundError(_)) =
            e.downcast_ref::<bollard::errors::Error>()
        {
            return match std::fs::metadata(socket) {
                Err(e) if e.kind() == ErrorKind::PermissionDenied => denied(),
                _ => ("no such socket".to_owned(), hint.to_owned()),
            };
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                ErrorKind::NotFound => ("no such socket".to_owned(), hint.to_owned()),
                ErrorKind::PermissionDenied => denied(),
                ErrorKind::ConnectionRefused => (
                    "connection refused: nothing listens on the socket".to_owned(),
                    hint.to_owned(),
                ),
                _ => (crate::output::io_words(io), hint.to_owned()),
            };
        }
        next = e.source();
    }
    let root = crate::output::root_cause(source);
    (root.to_string(), hint.to_owned())
}

/// Why `auto` found no runtime: each one's error, in the order asked.
#[derive(Debug)]
pub struct NoneAnswered(pub Vec<RuntimeError>);

impl NoneAnswered {
    /// Each runtime's cause, short: `docker: no such socket; containerd: …`.
    fn brief(&self) -> String {
        let each: Vec<String> = self
            .0
            .iter()
            .map(|e| match e {
                RuntimeError::Unreachable {
                    runtime,
                    endpoint,
                    hint,
                    source,
                } => {
                    let (cause, _) =
                        unanswered(runtime, socket_of(endpoint), hint, source.as_ref());
                    format!("{runtime}: {cause}")
                }
                call @ RuntimeError::Call { .. } => call.brief(),
            })
            .collect();
        each.join("; ")
    }
}

impl std::fmt::Display for NoneAnswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let each: Vec<String> = self.0.iter().map(|e| Chain(e).to_string()).collect();
        write!(f, "{}", each.join("; "))
    }
}

impl std::error::Error for NoneAnswered {}

/// The socket path of an endpoint written `unix:///path` or `/path`.
///
/// # Errors
/// [`RuntimeError::Unreachable`] for any other scheme (`tcp://`) or an empty
/// path: both runtimes are reached through their unix socket only.
pub(crate) fn socket_path(runtime: &'static str, endpoint: &str) -> Result<PathBuf, RuntimeError> {
    let path = socket_of(endpoint);
    if path.is_empty() || path.contains("://") {
        return Err(RuntimeError::Unreachable {
            runtime,
            endpoint: endpoint.to_owned(),
            hint: "only unix sockets are supported: unix:///path or /path",
            source: "unsupported endpoint scheme".into(),
        });
    }
    Ok(PathBuf::from(path))
}

/// A protobuf timestamp, as containerd's and `BuildKit`'s gRPC answers carry
/// them. Unset (the Unix epoch) and Go's zero time (`0001-01-01`, what Go
/// services send for "never") are `None`.
pub(crate) fn protobuf_time(
    t: Option<&prost_types::Timestamp>,
) -> Option<chrono::DateTime<chrono::Utc>> {
    let t = t?;
    let nanos = u32::try_from(t.nanos).ok()?;
    chrono::DateTime::from_timestamp(t.seconds, nanos).filter(|t| t.timestamp() > 0)
}

/// One object as a re-check found it: what the rules judged, and all its
/// removal acts on. `remove` takes it from the executor, so an adapter
/// keeps nothing between a re-check and a removal, and a test engine sees
/// what a real one does.
#[derive(Debug, Clone)]
pub enum Target {
    Container(crate::inventory::Container),
    /// With the references the re-check read: what a removal untags.
    Image(crate::inventory::Image),
    Volume(crate::inventory::Volume),
    Network(crate::inventory::Network),
    BuildCache(crate::inventory::BuildCacheEntry),
}

impl Target {
    /// The object `id` of `kind` in `inventory`, when it holds it.
    #[must_use]
    pub fn find(inventory: &Inventory, kind: Kind, id: &str) -> Option<Self> {
        match kind {
            Kind::Container => inventory
                .containers
                .iter()
                .find(|c| c.id == id)
                .cloned()
                .map(Self::Container),
            Kind::Image => inventory
                .images
                .iter()
                .find(|i| i.id == id)
                .cloned()
                .map(Self::Image),
            Kind::Volume => inventory
                .volumes
                .iter()
                .find(|v| v.name == id)
                .cloned()
                .map(Self::Volume),
            Kind::Network => inventory
                .networks
                .iter()
                .find(|n| n.id == id)
                .cloned()
                .map(Self::Network),
            Kind::BuildCache => inventory
                .build_cache
                .iter()
                .find(|b| b.id == id)
                .cloned()
                .map(Self::BuildCache),
        }
    }

    /// An object known by its id alone, as a removal sees one no re-check
    /// found: for the adapters' tests of their own refusals.
    #[must_use]
    pub fn by_id(kind: Kind, id: &str) -> Self {
        let id = id.to_owned();
        match kind {
            Kind::Container => Self::Container(crate::inventory::Container {
                id,
                ..Default::default()
            }),
            Kind::Image => Self::Image(crate::inventory::Image {
                id,
                ..Default::default()
            }),
            Kind::Volume => Self::Volume(crate::inventory::Volume {
                name: id,
                anonymous: false,
                labels: crate::inventory::Labels::new(),
                created: None,
                size: None,
            }),
            Kind::Network => Self::Network(crate::inventory::Network {
                name: id.clone(),
                id,
                created: None,
                labels: crate::inventory::Labels::new(),
            }),
            Kind::BuildCache => Self::BuildCache(crate::inventory::BuildCacheEntry {
                id,
                description: String::new(),
                created: None,
                last_used: None,
                size: None,
                in_use: false,
                parents: Vec::new(),
            }),
        }
    }

    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            Self::Container(_) => Kind::Container,
            Self::Image(_) => Kind::Image,
            Self::Volume(_) => Kind::Volume,
            Self::Network(_) => Kind::Network,
            Self::BuildCache(_) => Kind::BuildCache,
        }
    }

    /// Its id as decisions give it (a volume's name).
    #[must_use]
    pub fn id(&self) -> &str {
        match self {
            Self::Container(c) => &c.id,
            Self::Image(i) => &i.id,
            Self::Volume(v) => &v.name,
            Self::Network(n) => &n.id,
            Self::BuildCache(b) => &b.id,
        }
    }
}

/// What one removal attempt came to, as the runtime answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The object is gone, by this call.
    Removed,
    /// It was already gone (404).
    Gone,
    /// The runtime refused because the object is in use or live now
    /// (Docker's 409 and 403, a containerd task that runs, a container that
    /// uses the image): the engine's words.
    InUse(String),
    /// Any other failure: the engine's error.
    Failed(String),
}

/// A removal that failed with `e`, said with every cause: a bare
/// "docker read events failed" tells an operator nothing.
pub(crate) fn failed(e: &(dyn std::error::Error + 'static)) -> Removal {
    Removal::Failed(Chain(e).to_string())
}

/// What the app and the executor need from a container runtime.
///
/// Implementations hold every runtime quirk; callers see only
/// runtime-neutral data.
#[expect(
    async_fn_in_trait,
    reason = "used only generically, never as dyn, within this crate"
)]
pub trait Engine: Sync {
    /// Which runtime this is.
    fn kind(&self) -> RuntimeKind;

    /// Kinds of object this runtime does not have (containerd: volumes,
    /// networks, build cache). Reports show them as not applicable.
    fn not_applicable(&self) -> &'static [Kind] {
        &[]
    }

    /// A full snapshot of the node.
    async fn inventory(&self) -> Result<Inventory, RuntimeError>;

    /// Fresh facts about a batch of objects of one kind, just before
    /// removing them: an inventory holding those that still exist, and what
    /// their rules depend on. Its cost grows with the batch, not with the
    /// node: the executor calls it once per batch of every run.
    ///
    /// For containers: each container (with its exit time) and the pod
    /// sandboxes of their pods (by sandbox id and by pod uid), at least. For
    /// images, volumes or networks: each object and every container that
    /// uses one of them, at least (exit times may be absent: at that stage
    /// any container left counts as kept).
    async fn recheck(&self, kind: Kind, ids: &[&str]) -> Result<Inventory, RuntimeError>;

    /// Measures what removing each container of `inventory` named in `ids`
    /// frees, where the inventory leaves that to one call per container
    /// (containerd: a writable snapshot's usage): the caller asks for the
    /// containers its plan removes, and the others keep an unknown size.
    /// Nothing to do where the inventory sized every container already.
    async fn measure_containers(&self, _inventory: &mut Inventory, _ids: &[&str]) {}

    /// Whether [`Engine::measure_containers`] has anything to do: whether
    /// the inventory leaves containers' sizes to it. When not, the caller
    /// need not plan to learn which containers to measure.
    fn measures_containers(&self) -> bool {
        false
    }

    /// Removes one object as its re-check found it, never with force. An
    /// image is removed by id; an adapter removes a multi-tagged image
    /// name by name, the names the re-check read.
    async fn remove(&self, target: &Target) -> Removal;

    /// Called once the removals of one kind are over, when at least one
    /// removed something: what the engine would otherwise do after every
    /// removal at a cost that grows with the node (containerd's garbage
    /// collection of what the removals freed) is done here, once; in a
    /// paced run on an engine that [frees when settled], also between
    /// batches.
    ///
    /// [frees when settled]: Engine::frees_when_settled
    async fn settle(&self, _kind: Kind) {}

    /// Whether a removal's bytes go only when its kind settles
    /// (containerd: the garbage collector frees what a removal
    /// unreferenced). A paced run then settles before each pressure
    /// reading that follows a removal, so that the reading weighs the
    /// freeing too, rather than once at the end, outside the pacer.
    fn frees_when_settled(&self) -> bool {
        false
    }

    /// The uses of images the engine still remembers from `since` on (all
    /// it holds when `None`): each as the image reference or id a
    /// container was made from, with when and how. Empty where the engine
    /// keeps no such history.
    async fn image_uses(
        &self,
        _since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Vec<(String, crate::inventory::Use)> {
        Vec::new()
    }

    /// Follows the engine's events from now on, sending each image use as
    /// it happens: the image's id as the inventory names it, and the use.
    /// Returns when the stream ends or `uses` is closed; never, where the
    /// engine has no events to follow.
    ///
    /// # Errors
    /// The stream cannot be opened, or breaks (the engine stopped).
    async fn follow_image_uses(
        &self,
        _uses: &tokio::sync::mpsc::Sender<(String, crate::inventory::Use)>,
    ) -> Result<(), RuntimeError> {
        std::future::pending().await
    }
}

/// The runtime chosen by the policy: one enum, so the app stays generic-free.
pub enum Runtime {
    Docker(docker::DockerRuntime),
    Containerd(containerd::ContainerdRuntime),
    Cri(cri::CriRuntime),
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
        let docker = || docker::DockerRuntime::connect(&config.docker.endpoint);
        let containerd = || {
            containerd::ContainerdRuntime::connect(
                &config.containerd.endpoint,
                &config.containerd.namespaces,
            )
        };
        let cri = || cri::CriRuntime::connect(&config.cri.endpoint);
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

    fn chosen(chosen: Chosen) -> Chosen {
        tracing::debug!(runtime = %chosen.runtime.kind(), reason = %chosen.reason, "runtime chosen");
        chosen
    }
}

/// How full the file system holding `path` is, as `df` counts it; `None`
/// when `path` cannot be measured from here (safeprune in a pod that does
/// not mount the engine's directory).
#[must_use]
pub fn fs_usage(path: &std::path::Path) -> Option<crate::inventory::FsUsage> {
    match nix::sys::statvfs::statvfs(path) {
        Ok(s) => {
            let usage = usage_of(
                path,
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.fragment_size(),
            );
            if usage.is_none() {
                tracing::warn!(
                    path = %path.display(),
                    blocks = s.blocks(),
                    free = s.blocks_free(),
                    available = s.blocks_available(),
                    "the image file system's reading makes no sense: its usage is unknown, and nothing is pruned by disk pressure"
                );
            }
            usage
        }
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot measure the image file system");
            None
        }
    }
}

/// A `statvfs(2)` reading as usage, `None` when it makes no sense: more
/// blocks free (or available to users) than the file system has, or no
/// blocks at all. Unchecked, `blocks - free` wrapped to about 100% in a
/// release build, and `images.disk` would have pruned every eligible
/// image (issue 22).
fn usage_of(
    path: &std::path::Path,
    blocks: u64,
    free: u64,
    available: u64,
    block_size: u64,
) -> Option<crate::inventory::FsUsage> {
    if blocks == 0 || block_size == 0 || free > blocks || available > free {
        return None;
    }
    Some(crate::inventory::FsUsage {
        path: path.display().to_string(),
        used_bytes: (blocks - free).checked_mul(block_size)?,
        available_bytes: available.checked_mul(block_size)?,
        stand_in: None,
    })
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

    fn frees_when_settled(&self) -> bool {
        match self {
            Self::Docker(d) => d.frees_when_settled(),
            Self::Containerd(c) => c.frees_when_settled(),
            Self::Cri(c) => c.frees_when_settled(),
        }
    }

    async fn image_uses(
        &self,
        since: Option<chrono::DateTime<chrono::Utc>>,
    ) -> Vec<(String, crate::inventory::Use)> {
        match self {
            Self::Docker(d) => d.image_uses(since).await,
            Self::Containerd(c) => c.image_uses(since).await,
            Self::Cri(c) => c.image_uses(since).await,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_removal_says_every_cause() {
        let e = RuntimeError::Call {
            runtime: "docker",
            call: "read events",
            source: "connection reset by peer".into(),
        };
        assert_eq!(
            failed(&e),
            Removal::Failed("docker read events failed: connection reset by peer".to_owned())
        );
    }

    #[test]
    fn a_reading_that_makes_no_sense_is_unknown_not_full() {
        let path = std::path::Path::new("/var/lib/docker");
        let usage = usage_of(path, 100, 40, 30, 4096).unwrap();
        assert_eq!(usage.used_bytes, 60 * 4096);
        assert_eq!(usage.available_bytes, 30 * 4096);
        // More free than there is: the subtraction wrapped before.
        assert_eq!(usage_of(path, 100, 101, 30, 4096), None);
        assert_eq!(usage_of(path, 100, 40, 41, 4096), None);
        assert_eq!(usage_of(path, 0, 0, 0, 4096), None);
        assert_eq!(usage_of(path, 100, 40, 30, 0), None);
        assert_eq!(usage_of(path, u64::MAX, 0, 0, 4096), None);
    }

    #[test]
    fn endpoints_are_unix_sockets_only() {
        let path = |e| socket_path("docker", e).ok();
        assert_eq!(
            path("unix:///var/run/docker.sock"),
            Some(PathBuf::from("/var/run/docker.sock"))
        );
        assert_eq!(
            path("/run/containerd/containerd.sock"),
            Some(PathBuf::from("/run/containerd/containerd.sock"))
        );
        for bad in ["unix://", "tcp://10.0.0.1:2375", ""] {
            let e = socket_path("docker", bad).unwrap_err().to_string();
            assert!(e.contains("only unix sockets"), "{bad}: {e}");
        }
    }
}
