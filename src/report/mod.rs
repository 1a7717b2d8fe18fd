//! What a plan or a run comes to, for people (table) and scripts (JSON).
//!
//! One [`Report`] model feeds every reporter: the table, the JSON document of
//! docs/reports.md, the `report.json_path` file and the audit log.

pub mod compare;
mod files;
mod fit;
mod metrics;
mod table;

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::execute::{Outcome, Reason, RemovalResult};
use crate::inventory::Kind;
use crate::plan::{Action, Decision, Plan, Rule};

pub use files::{AuditLog, read_bounded, write_atomically};
pub use metrics::{RunFacts, last_success_in, render_metrics, render_run_metrics};
pub use table::{human_bytes, plural, render_table, render_table_fitted};

/// Counts by kind, in the JSON's fixed shape; a kind the runtime does not
/// have (volumes on containerd) is `null`, not zero.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KindCounts {
    pub container: usize,
    pub image: usize,
    pub volume: usize,
    pub network: usize,
    pub build_cache: usize,
    /// Kinds that do not exist on this runtime.
    pub not_applicable: BTreeSet<Kind>,
}

impl Serialize for KindCounts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(Kind::ALL.len()))?;
        for kind in Kind::ALL {
            let count = (!self.not_applicable.contains(&kind)).then(|| self.get(kind));
            map.serialize_entry(kind.as_str(), &count)?;
        }
        map.end()
    }
}

impl KindCounts {
    fn add(&mut self, kind: Kind) {
        *match kind {
            Kind::Container => &mut self.container,
            Kind::Image => &mut self.image,
            Kind::Volume => &mut self.volume,
            Kind::Network => &mut self.network,
            Kind::BuildCache => &mut self.build_cache,
        } += 1;
    }

    /// The count for one kind.
    #[must_use]
    pub fn get(&self, kind: Kind) -> usize {
        match kind {
            Kind::Container => self.container,
            Kind::Image => self.image,
            Kind::Volume => self.volume,
            Kind::Network => self.network,
            Kind::BuildCache => self.build_cache,
        }
    }
}

/// What `plan --only` and `--kind` let through to the list of objects.
/// The summary is never filtered: it stays the whole plan's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Filter {
    /// Only objects with this decision; `None`: both.
    pub only: Option<Action>,
    /// Only objects of these kinds (in removal order); `None`: every kind.
    pub kinds: Option<BTreeSet<Kind>>,
}

impl Filter {
    /// Whether an object of `kind` that the plan decides `action` is listed.
    #[must_use]
    pub fn shows(&self, kind: Kind, action: Action) -> bool {
        self.only.is_none_or(|only| only == action)
            && self
                .kinds
                .as_ref()
                .is_none_or(|kinds| kinds.contains(&kind))
    }

    /// Whether it lets everything through.
    #[must_use]
    pub fn is_everything(&self) -> bool {
        self.only.is_none() && self.kinds.is_none()
    }
}

/// As the table says it: `delete only; kinds: container, image`.
impl std::fmt::Display for Filter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(only) = self.only {
            parts.push(format!("{} only", only.as_str()));
        }
        if let Some(kinds) = &self.kinds {
            let names: Vec<&str> = kinds.iter().map(|k| k.as_str()).collect();
            parts.push(format!("kinds: {}", names.join(", ")));
        }
        if parts.is_empty() {
            parts.push("everything".to_owned());
        }
        f.write_str(&parts.join("; "))
    }
}

/// The totals at the end of the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub delete: KindCounts,
    pub keep: KindCounts,
    /// Objects kept, by kind and rule: how many `protected_label`,
    /// `live_pod_sandbox` and so on. An addition to docs/reports.md's summary.
    pub kept_by_rule: BTreeMap<Kind, BTreeMap<Rule, usize>>,
    pub reclaimable_bytes: u64,
    pub reclaimed_bytes: u64,
    pub skipped: usize,
    /// The skipped removals by reason: `gone`, `in_use`, `changed`,
    /// `not_attempted`, each present.
    pub skipped_by_reason: BTreeMap<Reason, usize>,
    /// The `changed` ones by the rule that keeps them now.
    pub changed_by_rule: BTreeMap<Rule, usize>,
    pub failed: usize,
    /// Kinds this runtime does not have, e.g. `volume` on containerd. An
    /// addition to docs/reports.md's summary.
    pub not_applicable: Vec<Kind>,
}

/// The whole report of one plan or run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub version: u32,
    pub runtime: String,
    /// Why this runtime (the policy named it, or what `auto` found). An
    /// addition to docs/reports.md's JSON.
    pub runtime_reason: String,
    pub node: String,
    #[serde(serialize_with = "rfc3339")]
    pub started_at: DateTime<Utc>,
    pub dry_run: bool,
    /// What `plan --only` and `--kind` listed, when they were given:
    /// `decisions` is then partial, the summary still whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
    pub decisions: Vec<Decision>,
    pub outcomes: Vec<Outcome>,
    pub summary: Summary,
    /// The image file system's usage before and after the run, when
    /// `images.disk` had it measured; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image_fs: Option<ImageFs>,
    /// On Docker, the bytes `docker system prune -a -f` would free from the
    /// same node (`src/plan/prune_model/`), beside `reclaimable_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub docker_prune_bytes: Option<u64>,
    /// How a run's removals were paced, with `safety.pace` set; absent for
    /// a dry run and when it is off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pace: Option<crate::pace::PaceReport>,
    /// Set when this is the plan of a run refused for deleting too much:
    /// the table says so. The exit code (5) tells scripts.
    #[serde(skip)]
    pub refused: Option<Refusal>,
}

/// How full the image store's file system was, in percent as `df` says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ImageFs {
    pub path: String,
    /// When the inventory was taken.
    pub before_percent: f64,
    /// After the removals; `None` for a dry run, or when it could not be
    /// measured again.
    pub after_percent: Option<f64>,
    /// The watermarks the run worked to (`images.disk`, or what
    /// `from_kubelet` derived): above `high_percent` it removes images
    /// until `low_percent`. Absent where the report was made without the
    /// policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub high_percent: Option<u8>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub low_percent: Option<u8>,
    /// When the planned removals leave the file system over `low_percent`
    /// while `images.keep_unpullable` keeps images no registry can give
    /// back: how many, and their bytes. Absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_unpullable: Option<crate::plan::KeptUnpullable>,
}

/// Why a run was refused: its plan deletes more than the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    pub planned: usize,
    pub limit: u64,
}

/// A percentage to two decimals: what `df` users read, stable in JSON.
fn round_percent(p: f64) -> f64 {
    (p * 100.0).round() / 100.0
}

fn rfc3339<S: Serializer>(t: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&t.to_rfc3339_opts(SecondsFormat::Secs, true))
}

impl Report {
    /// Builds the report of a plan and, for a run, its outcomes.
    #[must_use]
    pub fn new(
        runtime: &str,
        node: &str,
        started_at: DateTime<Utc>,
        dry_run: bool,
        plan: &Plan,
        outcomes: Vec<Outcome>,
    ) -> Self {
        let mut summary = Summary {
            skipped_by_reason: Reason::SKIPPED.iter().map(|r| (*r, 0)).collect(),
            ..Summary::default()
        };
        for d in &plan.decisions {
            match d.decision {
                Action::Delete => summary.delete.add(d.kind),
                Action::Keep => {
                    summary.keep.add(d.kind);
                    *summary
                        .kept_by_rule
                        .entry(d.kind)
                        .or_default()
                        .entry(d.rule)
                        .or_insert(0) += 1;
                }
            }
        }
        summary.reclaimable_bytes = plan.reclaimable_bytes();
        for o in &outcomes {
            match o.result {
                RemovalResult::Deleted => summary.reclaimed_bytes += o.bytes.unwrap_or(0),
                RemovalResult::Skipped => {
                    summary.skipped += 1;
                    if let Some(reason) = o.reason {
                        *summary.skipped_by_reason.entry(reason).or_default() += 1;
                    }
                    if let Some(rule) = o.kept_by {
                        *summary.changed_by_rule.entry(rule).or_default() += 1;
                    }
                }
                RemovalResult::Failed => summary.failed += 1,
            }
        }
        Self {
            version: 1,
            runtime: runtime.to_owned(),
            runtime_reason: String::new(),
            node: node.to_owned(),
            started_at,
            dry_run,
            decisions: plan.decisions.clone(),
            outcomes,
            summary,
            image_fs: plan.image_fs.as_ref().map(|fs| ImageFs {
                path: fs.path.clone(),
                before_percent: round_percent(fs.percent()),
                after_percent: None,
                high_percent: None,
                low_percent: None,
                kept_unpullable: plan.kept_unpullable,
            }),
            refused: None,
            docker_prune_bytes: None,
            pace: None,
            filter: None,
        }
    }

    /// Adds what `docker system prune -a -f` would free from `inventory`.
    #[must_use]
    pub fn with_docker_prune_bytes(mut self, inventory: &crate::inventory::Inventory) -> Self {
        let verdicts = crate::plan::prune_model::docker_system_prune(inventory, false);
        self.docker_prune_bytes = Some(
            self.decisions
                .iter()
                .filter(|d| {
                    verdicts
                        .get(&(d.kind, d.id.clone()))
                        .is_some_and(|v| v.removes)
                })
                .map(|d| d.bytes.unwrap_or(0))
                .sum(),
        );
        self
    }

    /// Records the image file system's usage after the removals.
    #[must_use]
    pub fn with_image_fs_after(mut self, after: Option<&crate::inventory::FsUsage>) -> Self {
        if let (Some(fs), Some(after)) = (self.image_fs.as_mut(), after) {
            fs.after_percent = Some(round_percent(after.percent()));
        }
        self
    }

    /// Records the watermarks the run worked to (`images.disk`).
    #[must_use]
    pub fn with_image_fs_watermarks(
        mut self,
        disk: Option<&crate::policy::DiskWatermarks>,
    ) -> Self {
        if let (Some(fs), Some(disk)) = (self.image_fs.as_mut(), disk) {
            fs.high_percent = Some(disk.high_percent);
            fs.low_percent = Some(disk.low_percent);
        }
        self
    }

    /// Records how the run's removals were paced.
    #[must_use]
    pub fn with_pace(mut self, pace: Option<crate::pace::PaceReport>) -> Self {
        self.pace = pace;
        self
    }

    /// How many objects the run deleted.
    #[must_use]
    pub fn deleted_count(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| o.result == RemovalResult::Deleted)
            .count()
    }

    /// Lists only the decisions (and outcomes) `filter` lets through; the
    /// summary, and `docker_prune_bytes`, stay the whole plan's. A filter
    /// that lets everything through changes nothing.
    #[must_use]
    pub fn listing_only(mut self, filter: Filter) -> Self {
        if filter.is_everything() {
            return self;
        }
        self.decisions.retain(|d| filter.shows(d.kind, d.decision));
        self.outcomes
            .retain(|o| filter.shows(o.kind, Action::Delete));
        self.filter = Some(filter);
        self
    }

    /// Marks this as the plan of a run refused for `refusal`.
    #[must_use]
    pub fn refused(mut self, refusal: Refusal) -> Self {
        self.refused = Some(refusal);
        self
    }

    /// Records why this runtime was chosen.
    #[must_use]
    pub fn with_runtime_reason(mut self, reason: &str) -> Self {
        reason.clone_into(&mut self.runtime_reason);
        self
    }

    /// Marks kinds this runtime does not have: their counts become `null`
    /// and the table says "not applicable" instead of showing zeros.
    #[must_use]
    pub fn with_not_applicable(mut self, kinds: &[Kind]) -> Self {
        let kinds: BTreeSet<Kind> = kinds.iter().copied().collect();
        self.summary.delete.not_applicable.clone_from(&kinds);
        self.summary.keep.not_applicable.clone_from(&kinds);
        self.summary.not_applicable = Kind::ALL
            .into_iter()
            .filter(|k| kinds.contains(k))
            .collect();
        self
    }

    /// The JSON document of docs/reports.md, pretty-printed, with a final newline.
    ///
    /// # Panics
    /// Never: every field serializes.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a report always serializes");
        text.push('\n');
        text
    }
}

#[cfg(test)]
mod listing_tests;
#[cfg(test)]
mod tests;
