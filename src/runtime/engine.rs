//! What the app and the executor need from a runtime ([`Engine`]), and
//! what passes between them: the object a re-check found ([`Target`]) and
//! what its removal came to ([`Removal`]).

use super::error::RuntimeError;
use crate::inventory::{Inventory, Kind, RuntimeKind};
use crate::output::Chain;

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

    /// How much more than Docker's this engine's removals cost the node's
    /// workloads beside what their stall shows: a paced run's least cost
    /// per removal is multiplied by it (`src/pace/budget.rs`, `Weight`).
    fn removal_weight(&self) -> f64 {
        1.0
    }

    /// Whether a removal's bytes go only when its kind settles
    /// (containerd: the garbage collector frees what a removal
    /// unreferenced). A paced run then settles before each pressure
    /// reading that follows a removal, so that the reading weighs the
    /// freeing too, rather than once at the end, outside the pacer.
    fn frees_when_settled(&self) -> bool {
        false
    }

    /// The uses of images the engine still remembers from `since` on (all
    /// it holds when `None`), or that `inventory`, just taken, shows where
    /// the engine keeps no history of its own: each as the image reference
    /// or id a container was made from, with when and how.
    async fn image_uses(
        &self,
        _inventory: &Inventory,
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
}
