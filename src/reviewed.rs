//! Reviewed plans: `safeprune plan --save FILE` writes the plan
//! with what identifies it (node, runtime, endpoint, policy digest, time);
//! `safeprune run --plan FILE` deletes only objects that FILE decided to
//! delete and that the current rules, on fresh facts, still find eligible.
//!
//! The file is plain JSON and diffs: decisions in the plan's order (kind,
//! then id), each with its rule code but not its detail, whose ages ("3d
//! ago") change by the second; the same node state under the same policy
//! gives the same file but for `created_at`.

use std::collections::HashMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::execute::{Outcome, Reason};
use crate::inventory::{Kind, RuntimeKind};
use crate::plan::{Action, Decision, Plan, Rule, Within};
use crate::policy::Policy;

/// The file format this safeprune writes and reads.
pub const VERSION: u32 = 1;
/// The largest plan file read: far over any node's decisions.
const MAX_FILE_BYTES: u64 = 256 << 20;
/// How far in the future a plan's time may be (clocks of two machines).
const CLOCK_SKEW: chrono::Duration = chrono::Duration::minutes(5);

/// A saved plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedPlan {
    pub plan_version: u32,
    pub node: String,
    pub runtime: String,
    pub endpoint: String,
    /// `sha256:` of the policy as `safeprune check` prints it (defaults
    /// filled in): comments and layout do not count, any setting does.
    pub policy_digest: String,
    pub created_at: DateTime<Utc>,
    pub decisions: Vec<SavedDecision>,
}

/// One decision of a saved plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SavedDecision {
    pub kind: Kind,
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<Vec<String>>,
    pub decision: Action,
    pub rule: Rule,
    pub bytes: Option<u64>,
}

/// The digest of `policy` that a saved plan carries.
#[must_use]
pub fn policy_digest(policy: &Policy) -> String {
    let hash = Sha256::digest(policy.to_yaml().as_bytes());
    hash.iter().fold(String::from("sha256:"), |mut hex, b| {
        use std::fmt::Write as _;
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// The endpoint of `runtime` (its name) that `policy` names.
#[must_use]
pub fn endpoint(policy: &Policy, runtime: RuntimeKind) -> String {
    match runtime {
        RuntimeKind::Docker => policy.runtime.docker.endpoint.clone(),
        RuntimeKind::Containerd => policy.runtime.containerd.endpoint.clone(),
        RuntimeKind::Cri => policy.runtime.cri.endpoint.clone(),
    }
}

impl SavedPlan {
    /// `plan` as made on `node` by `runtime` under `policy` at `at`.
    #[must_use]
    pub fn new(
        plan: &Plan,
        node: &str,
        runtime: RuntimeKind,
        policy: &Policy,
        at: DateTime<Utc>,
    ) -> Self {
        Self {
            plan_version: VERSION,
            node: node.to_owned(),
            runtime: runtime.as_str().to_owned(),
            endpoint: endpoint(policy, runtime),
            policy_digest: policy_digest(policy),
            created_at: at,
            decisions: plan
                .decisions
                .iter()
                .map(|d| SavedDecision {
                    kind: d.kind,
                    id: d.id.clone(),
                    name: d.name.clone(),
                    refs: d.refs.clone(),
                    decision: d.decision,
                    rule: d.rule,
                    bytes: d.bytes,
                })
                .collect(),
        }
    }

    /// The file's text: pretty JSON, one field a line, so that it diffs.
    ///
    /// # Panics
    /// Never: every field serializes.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a plan always serializes");
        text.push('\n');
        text
    }

    /// Reads a saved plan.
    ///
    /// # Errors
    /// The file cannot be read, is too large, is not a plan, or is of
    /// another version: the message says which.
    pub fn read(path: &Path) -> Result<Self, String> {
        let bytes = crate::report::read_bounded(path, MAX_FILE_BYTES)
            .map_err(|e| format!("cannot read it: {e}"))?;
        let version = serde_json::from_slice::<serde_json::Value>(&bytes)
            .map_err(|e| format!("it is not JSON: {e}"))?
            .get("plan_version")
            .and_then(serde_json::Value::as_u64);
        match version {
            Some(v) if v == u64::from(VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "it is plan version {v}; this safeprune reads version {VERSION}"
                ));
            }
            None => {
                return Err(
                    "it is not a plan saved by `safeprune plan --save` (no plan_version)".into(),
                );
            }
        }
        serde_json::from_slice(&bytes).map_err(|e| format!("it is not a valid plan: {e}"))
    }

    /// Why this plan may not be applied on `node` through `runtime` under
    /// `policy` at `now`; `None` when it may.
    #[must_use]
    pub fn refusal(
        &self,
        node: &str,
        runtime: RuntimeKind,
        policy: &Policy,
        now: DateTime<Utc>,
    ) -> Option<String> {
        if self.node != node {
            return Some(format!("it was made on node {}, this is {node}", self.node));
        }
        if self.runtime != runtime.as_str() {
            return Some(format!(
                "it was made through {}, this run uses {runtime}",
                self.runtime
            ));
        }
        let here = endpoint(policy, runtime);
        if self.endpoint != here {
            return Some(format!(
                "it was made at {}, this run uses {here}",
                self.endpoint
            ));
        }
        if self.policy_digest != policy_digest(policy) {
            return Some(
                "it was made under another policy (compare `safeprune check` with the policy it was made under)"
                    .to_owned(),
            );
        }
        let max = policy.safety.max_plan_age.as_duration();
        if now - self.created_at > max {
            return Some(format!(
                "it was made at {}, more than safety.max_plan_age ({}) ago: make a new one",
                self.created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                policy.safety.max_plan_age
            ));
        }
        if self.created_at - now > CLOCK_SKEW {
            return Some(format!(
                "it was made at {}, in the future: check this machine's clock",
                self.created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            ));
        }
        None
    }
}

impl SavedPlan {
    /// The objects this plan deletes: all that `run --plan` may delete.
    #[must_use]
    pub fn within(&self) -> Within {
        self.decisions
            .iter()
            .filter(|d| d.decision == Action::Delete)
            .map(|d| (d.kind, d.id.clone()))
            .collect()
    }

    /// What this plan deleted but `fresh` (the current rules on fresh
    /// facts, [`crate::plan::plan_within`] this plan) does not: a skipped
    /// outcome each, `changed` with the rule that keeps it now, or `gone`.
    #[must_use]
    pub fn skipped(&self, fresh: &Plan) -> Vec<Outcome> {
        let now: HashMap<(Kind, &str), &Decision> = fresh
            .decisions
            .iter()
            .map(|d| ((d.kind, d.id.as_str()), d))
            .collect();
        self.decisions
            .iter()
            .filter(|d| d.decision == Action::Delete)
            .filter_map(|d| match now.get(&(d.kind, d.id.as_str())) {
                Some(kept) if kept.decision == Action::Keep => Some(Outcome::changed(
                    kept,
                    kept.rule,
                    format!("now kept by {}: {}", kept.rule.as_str(), kept.detail),
                )),
                Some(_) => None,
                None => Some(Outcome::of(
                    &Decision::saved(d.kind, &d.id, &d.name, d.refs.clone(), d.bytes),
                    Some((Reason::Gone, "it no longer exists".to_owned())),
                )),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(h: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 20, h, 0, 0).unwrap()
    }

    fn decision(kind: Kind, id: &str, rule: Rule) -> Decision {
        let mut d = Decision::saved(kind, id, id, None, Some(10));
        d.rule = rule;
        d.decision = rule.action();
        d.detail = format!("{} because", rule.as_str());
        d
    }

    fn plan(decisions: Vec<Decision>) -> Plan {
        Plan {
            decisions,
            ..Plan::default()
        }
    }

    fn saved(decisions: Vec<Decision>) -> SavedPlan {
        SavedPlan::new(
            &plan(decisions),
            "node1",
            RuntimeKind::Docker,
            &Policy::builtin(),
            at(9),
        )
    }

    #[test]
    fn what_the_reviewed_plan_deleted_but_is_kept_now_or_gone_is_skipped() {
        let reviewed = saved(vec![
            decision(Kind::Container, "a", Rule::Eligible),
            decision(Kind::Container, "kept-now", Rule::Eligible),
            decision(Kind::Image, "gone", Rule::Eligible),
            decision(Kind::Image, "was-kept", Rule::InUse),
        ]);
        let within: Vec<(Kind, String)> = {
            let mut w: Vec<_> = reviewed.within().into_iter().collect();
            w.sort();
            w
        };
        assert_eq!(
            within,
            [
                (Kind::Container, "a".to_owned()),
                (Kind::Container, "kept-now".to_owned()),
                (Kind::Image, "gone".to_owned()),
            ]
        );
        let fresh = plan(vec![
            decision(Kind::Container, "a", Rule::Eligible),
            decision(Kind::Container, "kept-now", Rule::Running),
            decision(Kind::Container, "new", Rule::NotInPlan),
            decision(Kind::Image, "was-kept", Rule::NotInPlan),
        ]);
        let skips: Vec<(String, Option<Reason>, Option<String>)> = reviewed
            .skipped(&fresh)
            .into_iter()
            .map(|o| (o.id, o.reason, o.error))
            .collect();
        assert_eq!(
            skips,
            [
                (
                    "kept-now".to_owned(),
                    Some(Reason::Changed),
                    Some("now kept by running: running because".to_owned())
                ),
                (
                    "gone".to_owned(),
                    Some(Reason::Gone),
                    Some("it no longer exists".to_owned())
                ),
            ]
        );
    }

    #[test]
    fn a_plan_of_another_node_runtime_endpoint_policy_or_time_is_refused() {
        let policy = Policy::builtin();
        let plan = saved(vec![decision(Kind::Container, "a", Rule::Eligible)]);
        assert_eq!(
            plan.refusal("node1", RuntimeKind::Docker, &policy, at(10)),
            None
        );
        let refused = |p: &SavedPlan, node, runtime, policy: &Policy, now| {
            p.refusal(node, runtime, policy, now).unwrap_or_default()
        };
        assert!(
            refused(&plan, "node2", RuntimeKind::Docker, &policy, at(10))
                .contains("made on node node1, this is node2")
        );
        assert!(
            refused(&plan, "node1", RuntimeKind::Containerd, &policy, at(10))
                .contains("made through docker")
        );
        let mut moved = plan.clone();
        moved.endpoint = "unix:///other.sock".into();
        assert!(
            refused(&moved, "node1", RuntimeKind::Docker, &policy, at(10))
                .contains("made at unix:///other.sock")
        );
        let mut other = Policy::builtin();
        other.safety.max_deletions = 5;
        assert!(
            refused(&plan, "node1", RuntimeKind::Docker, &other, at(10)).contains("another policy")
        );
        // 24 hours is the default age limit; a clock 5 minutes behind is
        // fine, more is not.
        let late = at(9) + chrono::Duration::hours(24) + chrono::Duration::seconds(1);
        assert!(
            refused(&plan, "node1", RuntimeKind::Docker, &policy, late)
                .contains("more than safety.max_plan_age (24h) ago")
        );
        let early = at(9) - chrono::Duration::minutes(4);
        assert_eq!(
            plan.refusal("node1", RuntimeKind::Docker, &policy, early),
            None
        );
        let early = at(9) - chrono::Duration::minutes(6);
        assert!(
            refused(&plan, "node1", RuntimeKind::Docker, &policy, early).contains("in the future")
        );
    }

    #[test]
    fn the_file_reads_back_and_differs_only_by_its_time() {
        let dir = tempfile::tempdir().unwrap();
        let decisions = vec![
            decision(Kind::Container, "a", Rule::Eligible),
            decision(Kind::Image, "b", Rule::KeepRecent),
        ];
        let first = saved(decisions.clone());
        let later = SavedPlan::new(
            &plan(decisions),
            "node1",
            RuntimeKind::Docker,
            &Policy::builtin(),
            at(11),
        );
        let (a, b) = (first.to_json(), later.to_json());
        let differing: Vec<(&str, &str)> =
            a.lines().zip(b.lines()).filter(|(a, b)| a != b).collect();
        assert_eq!(differing.len(), 1, "{differing:?}");
        assert!(differing[0].0.contains("\"created_at\""));
        let path = dir.path().join("plan.json");
        std::fs::write(&path, first.to_json()).unwrap();
        assert_eq!(SavedPlan::read(&path), Ok(first));
        for (text, why) in [
            ("{not json", "it is not JSON"),
            ("{}", "no plan_version"),
            (
                r#"{"plan_version": 2}"#,
                "it is plan version 2; this safeprune reads version 1",
            ),
            (r#"{"plan_version": 1}"#, "it is not a valid plan"),
        ] {
            std::fs::write(&path, text).unwrap();
            let e = SavedPlan::read(&path).unwrap_err();
            assert!(e.contains(why), "{text}: {e}");
        }
        assert!(
            SavedPlan::read(&dir.path().join("none"))
                .unwrap_err()
                .starts_with("cannot read it")
        );
    }
}
