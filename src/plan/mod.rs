//! The pure planner: every object of an [`Inventory`] gets exactly one
//! [`Decision`], with a [`Rule`] code and a sentence saying why.
//!
//! `plan` reads no clock and calls no runtime: the same inventory, policy and
//! `now` always give the same plan, in the same order. The executor calls
//! [`recheck`] on fresh data just before each removal, so one set of rules
//! decides both.

mod rules;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::inventory::{Inventory, Kind};
use crate::policy::Policy;

/// Delete or keep.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Delete,
    Keep,
}

impl Action {
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Keep => "keep",
        }
    }
}

/// The rule that decided an object. The codes are a contract (docs/design.md).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Rule {
    Running,
    PodSandbox,
    ProtectedLabel,
    LivePodSandbox,
    InUse,
    KeepPattern,
    Pinned,
    Builtin,
    Disabled,
    Tagged,
    Unpullable,
    NamedVolume,
    TooYoung,
    KeepRecent,
    DiskBelowThreshold,
    LruNotNeeded,
    /// `run --plan`: eligible now, but the reviewed plan did not delete it.
    NotInPlan,
    Eligible,
}

impl Rule {
    /// The rule code as it appears in reports.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::PodSandbox => "pod_sandbox",
            Self::ProtectedLabel => "protected_label",
            Self::LivePodSandbox => "live_pod_sandbox",
            Self::InUse => "in_use",
            Self::KeepPattern => "keep_pattern",
            Self::Pinned => "pinned",
            Self::Builtin => "builtin",
            Self::Disabled => "disabled",
            Self::Tagged => "tagged",
            Self::Unpullable => "unpullable",
            Self::NamedVolume => "named_volume",
            Self::TooYoung => "too_young",
            Self::KeepRecent => "keep_recent",
            Self::DiskBelowThreshold => "disk_below_threshold",
            Self::LruNotNeeded => "lru_not_needed",
            Self::NotInPlan => "not_in_plan",
            Self::Eligible => "eligible",
        }
    }

    /// The action this rule always leads to.
    #[must_use]
    pub fn action(self) -> Action {
        if self == Self::Eligible {
            Action::Delete
        } else {
            Action::Keep
        }
    }
}

/// The decision for one object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub kind: Kind,
    /// The runtime's full id (volume: its name).
    pub id: String,
    /// A name for people: container name, first image reference, and so on.
    pub name: String,
    /// Every reference of an image (tags, then digests), so that a
    /// multi-tagged image shows under each of its names; absent for other
    /// kinds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refs: Option<Vec<String>>,
    pub decision: Action,
    pub rule: Rule,
    /// One sentence on why.
    pub detail: String,
    /// Bytes freed by deleting it; `None` when the runtime does not say.
    pub bytes: Option<u64>,
    /// Images: when the image was last used, and what that use was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_used: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_used_source: Option<crate::inventory::UseSource>,
    /// The facts behind the decision, for `explain`: (what, value).
    #[serde(skip)]
    pub facts: Vec<(&'static str, String)>,
    /// Images: where the plan's inventory says it was pulled from. A
    /// re-check reads the names again and decides by this evidence: it
    /// only grows between the two (a pull adds a digest or a label;
    /// nothing takes one away), so the plan's errs toward keeping, and no
    /// engine is asked again for it.
    /// Boxed: only images carry it, and every decision has the field.
    #[serde(skip)]
    pub provenance: Option<Box<crate::inventory::provenance::Provenance>>,
    /// When it may go among the deletions of its kind: the executor
    /// removes every object of one wave before the next starts. Images
    /// and build cache records go children first (0: nothing of the
    /// inventory is built on it); other kinds are all wave 0.
    #[serde(skip)]
    pub wave: u32,
}

impl Decision {
    /// An object a saved plan deleted, as it listed it: what a report says
    /// of it once it is gone.
    #[must_use]
    pub fn saved(
        kind: Kind,
        id: &str,
        name: &str,
        refs: Option<Vec<String>>,
        bytes: Option<u64>,
    ) -> Self {
        let mut d = Self::new(kind, id, name.to_owned(), Rule::Eligible, String::new());
        d.refs = refs;
        d.bytes = bytes;
        d
    }

    fn new(kind: Kind, id: &str, name: String, rule: Rule, detail: String) -> Self {
        Self {
            kind,
            id: id.to_owned(),
            name,
            refs: None,
            decision: rule.action(),
            rule,
            detail,
            bytes: None,
            last_used: None,
            last_used_source: None,
            facts: Vec::new(),
            provenance: None,
            wave: 0,
        }
    }

    fn with_refs(mut self, refs: Vec<String>) -> Self {
        self.refs = Some(refs);
        self
    }

    fn with_bytes(mut self, bytes: Option<u64>) -> Self {
        self.bytes = bytes;
        self
    }

    fn with_last_use(mut self, last_use: Option<crate::inventory::Use>) -> Self {
        self.last_used = last_use.map(|u| u.at);
        self.last_used_source = last_use.map(|u| u.source);
        self
    }

    fn with_fact(mut self, what: &'static str, value: impl Into<String>) -> Self {
        self.facts.push((what, value.into()));
        self
    }
}

/// Every decision for one inventory, sorted by kind (in removal order) and id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub decisions: Vec<Decision>,
    /// The image store's file system as the inventory measured it, when
    /// `images.disk` asked for it.
    #[serde(skip)]
    pub image_fs: Option<crate::inventory::FsUsage>,
    /// Why the inventory is a Kubernetes node, when it is
    /// ([`Inventory::kubernetes_node`]): what `images.keep_unpullable:
    /// auto` decided by, and the re-checks decide by again (their fresh
    /// facts may not show kubelet's containers).
    #[serde(skip)]
    pub kubernetes_node: Option<String>,
    /// With `images.disk`, when the planned removals leave the image file
    /// system over `low_percent` while images no registry can give back
    /// are kept (`unpullable`): how many, and their bytes.
    #[serde(skip)]
    pub kept_unpullable: Option<KeptUnpullable>,
}

/// Images kept because no registry can give them back, where the image
/// file system stays over `images.disk.low_percent` without them: why the
/// watermark is not met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KeptUnpullable {
    pub images: usize,
    /// Their unique sizes where the runtime gives them, else their sizes.
    pub bytes: u64,
}

impl Plan {
    /// The decisions to delete, in removal order.
    pub fn deletions(&self) -> impl Iterator<Item = &Decision> {
        self.decisions
            .iter()
            .filter(|d| d.decision == Action::Delete)
    }

    /// How many objects are to be deleted.
    #[must_use]
    pub fn deletion_count(&self) -> usize {
        self.deletions().count()
    }

    /// Bytes the deletions would free, counting unknown sizes as zero.
    #[must_use]
    pub fn reclaimable_bytes(&self) -> u64 {
        self.deletions().filter_map(|d| d.bytes).sum()
    }

    /// How many objects each rule kept, by kind: what the summary shows.
    #[must_use]
    pub fn kept_by_rule(&self) -> BTreeMap<(Kind, Rule), usize> {
        let mut counts = BTreeMap::new();
        for d in self.decisions.iter().filter(|d| d.decision == Action::Keep) {
            *counts.entry((d.kind, d.rule)).or_insert(0) += 1;
        }
        counts
    }
}

/// Decides every object of `inventory` under `policy` as of `now`.
#[must_use]
pub fn plan(inventory: &Inventory, policy: &Policy, now: DateTime<Utc>) -> Plan {
    rules::decide_all(inventory, policy, now, rules::HeldBy::Kept, None)
}

/// Whether `images.keep_unpullable` keeps images no registry can give back
/// on the node `plan` was made for.
#[must_use]
pub fn keeps_unpullable(policy: &Policy, plan: &Plan) -> bool {
    policy
        .images
        .keep_unpullable
        .keeps(plan.kubernetes_node.is_some())
}

/// The objects a reviewed plan deletes, by kind and id.
pub type Within = std::collections::HashSet<(Kind, String)>;

/// [`plan`], deleting only objects of `within` (`run --plan`): an object
/// the rules find eligible but `within` does not hold is kept
/// (`not_in_plan`), and so is what it uses.
#[must_use]
pub fn plan_within(
    inventory: &Inventory,
    policy: &Policy,
    now: DateTime<Utc>,
    within: &Within,
) -> Plan {
    rules::decide_all(inventory, policy, now, rules::HeldBy::Kept, Some(within))
}

/// Decides a batch of objects of one kind again on fresh data, just before
/// their removal: one decision per id, in the order of `ids`, `None` for an
/// object that no longer exists.
///
/// `fresh` is what the runtime answers now (see `Engine::recheck`). For an
/// image, volume or network, every container in `fresh` counts as kept: by
/// then the containers planned for deletion have been removed, so any left
/// were skipped or are new, and they hold what they use. `planned` is the
/// plan the batch came from: whether the node is a Kubernetes node is
/// decided once, when planning.
#[must_use]
pub fn recheck(
    kind: Kind,
    ids: &[&str],
    fresh: &Inventory,
    (policy, planned): (&Policy, &Plan),
    now: DateTime<Utc>,
) -> Vec<Option<Decision>> {
    let use_rule = if kind == Kind::Container {
        rules::HeldBy::Kept
    } else {
        rules::HeldBy::All
    };
    let mut decided: std::collections::HashMap<String, Decision> = rules::decide_all_on(
        fresh,
        policy,
        now,
        use_rule,
        (None, planned.kubernetes_node.clone()),
    )
    .decisions
    .into_iter()
    .filter(|d| d.kind == kind)
    .map(|d| (d.id.clone(), d))
    .collect();
    ids.iter().map(|id| decided.remove(*id)).collect()
}

/// A short human age: `3d4h`, `12m`, `45s`, `0s`.
#[must_use]
pub fn human_age(age: chrono::Duration) -> String {
    let secs = age.num_seconds().max(0);
    let (d, h, m, s) = (
        secs / 86_400,
        secs % 86_400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s}s"),
        (0, 0, _) => format!("{m}m"),
        (0, _, 0) => format!("{h}h"),
        (0, _, _) => format!("{h}h{m}m"),
        (_, 0, _) => format!("{d}d"),
        _ => format!("{d}d{h}h"),
    }
}

pub mod prune_model;

#[cfg(test)]
mod in_use_tests;
#[cfg(test)]
pub(crate) mod props;
#[cfg(test)]
mod tests;
