//! An engine in memory, for the planner's and executor's unit tests.
//!
//! It refuses what Docker refuses (a live container, an image or volume a
//! container uses: 409) so executor tests meet the same answers as the real
//! engine. Integration tests never use it: they run real engines.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::engine::{Engine, Removal, Target};
use super::error::RuntimeError;
use crate::inventory::{Inventory, Kind};

type Hook = Box<dyn Fn(&mut Inventory) + Send + Sync>;

/// A node held in memory.
#[derive(Default)]
pub struct MemoryEngine {
    pub state: Mutex<Inventory>,
    /// Runs on the inventory before each re-check: the world moving on.
    pub before_recheck: Option<Hook>,
    /// Runs on the inventory between the re-check and the removal: the
    /// world moving on in that short window.
    pub before_remove: Option<Hook>,
    /// Ids whose removal fails with a server error.
    pub failing: BTreeSet<String>,
    /// After this many re-checks, every re-check fails: the engine went
    /// away.
    pub rechecks_answered: Option<usize>,
    /// After this many re-checks, every re-check waits forever: the engine
    /// hung (SIGSTOP), and its deadline is far off.
    pub rechecks_before_hang: Option<usize>,
    /// After this many removals have started, every removal waits forever.
    pub removals_before_hang: Option<usize>,
    /// Every `settle` waits forever.
    pub settle_hangs: bool,
    /// Removals free their bytes only when their kind settles, as on
    /// containerd.
    pub frees_when_settled: bool,
    /// [`Engine::removal_weight`]: 1, as Docker's.
    pub removal_weight: f64,
    /// How long each removal takes.
    pub removal_delay: Duration,
    pub removed: Mutex<Vec<(Kind, String)>>,
    /// The ids of each re-check, in order.
    pub rechecks: Mutex<Vec<Vec<String>>>,
    /// When each object was last re-checked, and when each removal started:
    /// (id, re-checked at, removal started at), one per removal.
    pub windows: Mutex<Vec<(String, Option<tokio::time::Instant>, tokio::time::Instant)>>,
    /// Each `settle`, with how many removals had started by then.
    pub settled: Mutex<Vec<(Kind, usize)>>,
    last_recheck: Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
    in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
}

impl MemoryEngine {
    #[must_use]
    pub fn new(inventory: Inventory) -> Self {
        Self {
            state: Mutex::new(inventory),
            removal_weight: 1.0,
            ..Self::default()
        }
    }

    fn exists(inv: &Inventory, kind: Kind, id: &str) -> bool {
        match kind {
            Kind::Container => inv.containers.iter().any(|c| c.id == id),
            Kind::Image => inv.images.iter().any(|i| i.id == id),
            Kind::Volume => inv.volumes.iter().any(|v| v.name == id),
            Kind::Network => inv.networks.iter().any(|n| n.id == id),
            Kind::BuildCache => inv.build_cache.iter().any(|b| b.id == id),
        }
    }

    fn conflict(inv: &Inventory, kind: Kind, id: &str) -> Option<String> {
        let used = match kind {
            Kind::Container => inv
                .containers
                .iter()
                .any(|c| c.id == id && c.state.is_live()),
            // What Docker's overlay2 store refuses: an image any container
            // uses or mounts, or one another image is built on.
            Kind::Image => inv.images.iter().find(|i| i.id == id).is_some_and(|image| {
                inv.containers
                    .iter()
                    .any(|c| crate::inventory::uses::container_uses_image(c, image).is_some())
                    || inv.images.iter().any(|i| i.parent.as_deref() == Some(id))
            }),
            Kind::BuildCache => inv
                .build_cache
                .iter()
                .any(|b| b.parents.iter().any(|p| p == id)),
            Kind::Volume => inv
                .containers
                .iter()
                .any(|c| c.volumes.iter().any(|v| v == id)),
            Kind::Network => false,
        };
        used.then(|| format!("{kind} {id} is in use"))
    }
}

impl Engine for MemoryEngine {
    /// It answers as Docker does (409 on what is in use).
    fn kind(&self) -> crate::inventory::RuntimeKind {
        crate::inventory::RuntimeKind::Docker
    }

    async fn inventory(&self) -> Result<Inventory, RuntimeError> {
        Ok(self.state.lock().unwrap().clone())
    }

    async fn recheck(&self, _kind: Kind, ids: &[&str]) -> Result<Inventory, RuntimeError> {
        let asked = {
            let mut rechecks = self.rechecks.lock().unwrap();
            rechecks.push(ids.iter().map(|id| (*id).to_owned()).collect());
            rechecks.len()
        };
        if self.rechecks_answered.is_some_and(|n| asked > n) {
            return Err(RuntimeError::Call {
                runtime: "memory",
                call: "re-check",
                source: "no answer within 120s".into(),
            });
        }
        if self.rechecks_before_hang.is_some_and(|n| asked > n) {
            std::future::pending::<()>().await;
        }
        let answered = tokio::time::Instant::now();
        let mut last = self.last_recheck.lock().unwrap();
        for id in ids {
            last.insert((*id).to_owned(), answered);
        }
        drop(last);
        let mut state = self.state.lock().unwrap();
        if let Some(hook) = &self.before_recheck {
            hook(&mut state);
        }
        Ok(state.clone())
    }

    async fn remove(&self, target: &Target) -> Removal {
        let (kind, id) = (target.kind(), target.id());
        let checked = self.last_recheck.lock().unwrap().get(id).copied();
        let started = {
            let mut windows = self.windows.lock().unwrap();
            windows.push((id.to_owned(), checked, tokio::time::Instant::now()));
            windows.len()
        };
        if self.removals_before_hang.is_some_and(|n| started > n) {
            std::future::pending::<()>().await;
        }
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(self.removal_delay).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        if self.failing.contains(id) {
            return Removal::Failed(format!("server error removing {id}"));
        }
        let mut inv = self.state.lock().unwrap();
        if let Some(hook) = &self.before_remove {
            hook(&mut inv);
        }
        if !Self::exists(&inv, kind, id) {
            return Removal::Gone;
        }
        if let Some(msg) = Self::conflict(&inv, kind, id) {
            return Removal::InUse(msg);
        }
        // As Docker's adapter does: it removes the names the re-check read,
        // and an image named anew since is in use by whoever named it.
        if let Target::Image(rechecked) = target
            && let Some(image) = inv.images.iter().find(|i| i.id == id)
            && let Some(new) = image
                .tags
                .iter()
                .chain(&image.digests)
                .find(|r| !rechecked.tags.contains(r) && !rechecked.digests.contains(r))
        {
            return Removal::InUse(format!("{id} was named {new} since its re-check"));
        }
        match kind {
            Kind::Container => inv.containers.retain(|c| c.id != id),
            Kind::Image => inv.images.retain(|i| i.id != id),
            Kind::Volume => inv.volumes.retain(|v| v.name != id),
            Kind::Network => inv.networks.retain(|n| n.id != id),
            Kind::BuildCache => inv.build_cache.retain(|b| b.id != id),
        }
        self.removed.lock().unwrap().push((kind, id.to_owned()));
        Removal::Removed
    }

    fn frees_when_settled(&self) -> bool {
        self.frees_when_settled
    }

    fn removal_weight(&self) -> f64 {
        self.removal_weight
    }

    async fn settle(&self, kind: Kind) {
        let started = self.windows.lock().unwrap().len();
        self.settled.lock().unwrap().push((kind, started));
        if self.settle_hangs {
            std::future::pending::<()>().await;
        }
    }
}
