//! The `node_exporter` textfile of the last run: its figures as Prometheus
//! gauges, in the text exposition format.
//!
//! Every family is a gauge. The file holds one run's figures and the next run
//! replaces it whole, so its counts go down as often as up; a counter
//! (`_total`) would promise a series that only grows, and `rate()` over it
//! would be nonsense. Names follow Prometheus' conventions: the `safeprune_`
//! prefix, base units (`_seconds`, `_bytes`), no `_total`.
//!
//! The series alerts are written against are always present, 0 when there is
//! nothing to count: every kind, every removal result and skip reason, and the rules that
//! protect pods (`pod_sandbox`, `protected_label`, `live_pod_sandbox`). An
//! alert on a missing series never fires, so a quiet node must still say 0.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::Report;
use crate::execute::{Outcome, Reason, RemovalResult};
use crate::inventory::Kind;
use crate::plan::{Action, Rule};

/// Kept-by-rule series written even when no object was kept by the rule.
const ALWAYS_KEPT: [(Kind, Rule); 3] = [
    (Kind::Container, Rule::PodSandbox),
    (Kind::Container, Rule::ProtectedLabel),
    (Kind::Container, Rule::LivePodSandbox),
];

/// What the textfile says of a run beyond its report.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunFacts {
    /// How long the run took.
    pub duration: Duration,
    /// It finished without error (exit 0).
    pub success: bool,
    /// When the last successful run started: this one's start when it
    /// succeeded, else what the previous figures said; `None` when no run
    /// is known to have succeeded.
    pub last_success: Option<DateTime<Utc>>,
    /// A daemon's: the longest time between two scheduled runs (its
    /// schedule's period, jitter left out); `None` for a run from cron.
    pub schedule_period: Option<Duration>,
}

impl RunFacts {
    /// A run of `report` that took `duration`, on its own: the last success
    /// is its own start when `success`, and no schedule is known.
    #[must_use]
    pub fn of(report: &Report, duration: Duration, success: bool) -> Self {
        Self {
            duration,
            success,
            last_success: success.then_some(report.started_at),
            schedule_period: None,
        }
    }
}

/// The last successful run's start in a textfile this module wrote
/// (`safeprune_last_success_timestamp_seconds`), if it has one.
#[must_use]
pub fn last_success_in(text: &str) -> Option<DateTime<Utc>> {
    let value = text
        .lines()
        .find_map(|line| line.strip_prefix("safeprune_last_success_timestamp_seconds "))?;
    let seconds: f64 = value.trim().parse().ok()?;
    if !seconds.is_finite() || seconds < 0.0 {
        return None;
    }
    // Milliseconds, as written.
    #[allow(clippy::cast_possible_truncation)]
    let millis = (seconds * 1000.0).round() as i64;
    DateTime::from_timestamp_millis(millis)
}

/// Renders the textfile for the run `report` describes: it took `duration`
/// and `success` says whether it finished without error (exit 0); see
/// [`render_run_metrics`].
#[must_use]
pub fn render_metrics(report: &Report, duration: Duration, success: bool) -> String {
    render_run_metrics(report, &RunFacts::of(report, duration, success))
}

/// Renders the textfile for the run `report` describes, with `facts`.
///
/// The text is deterministic: families in a fixed order, series by kind in
/// report order ([`Kind::ALL`]), then by rule or result; the order of the
/// report's outcomes does not matter.
#[must_use]
pub fn render_run_metrics(report: &Report, facts: &RunFacts) -> String {
    let mut reclaimed: BTreeMap<Kind, u64> = BTreeMap::new();
    for o in &report.outcomes {
        if o.result == RemovalResult::Deleted {
            *reclaimed.entry(o.kind).or_default() += o.bytes.unwrap_or(0);
        }
    }
    let mut reclaimable: BTreeMap<Kind, u64> = BTreeMap::new();
    for d in report
        .decisions
        .iter()
        .filter(|d| d.decision == Action::Delete)
    {
        *reclaimable.entry(d.kind).or_default() += d.bytes.unwrap_or(0);
    }
    let mut kept: BTreeMap<(Kind, Rule), usize> = ALWAYS_KEPT.iter().map(|&k| (k, 0)).collect();
    for (&kind, rules) in &report.summary.kept_by_rule {
        for (&rule, &n) in rules {
            kept.insert((kind, rule), n);
        }
    }

    // Kinds the runtime lacks (volumes on containerd) get no series at all:
    // a zero would claim there were none to find.
    let kinds: Vec<Kind> = Kind::ALL
        .into_iter()
        .filter(|k| !report.summary.not_applicable.contains(k))
        .collect();
    let mut out = Exposition::default();
    run_families(&mut out, report, facts);
    out.gauge(
        "safeprune_last_run_planned_deletions",
        "Objects the last run's plan decided to delete, by kind.",
        kinds.iter().map(|&k| {
            (
                vec![("kind", k.as_str())],
                report.summary.delete.get(k).to_string(),
            )
        }),
    );
    out.gauge(
        "safeprune_last_run_reclaimable_bytes",
        "Bytes the last run's planned deletions would free, by kind (sizes the engine reports).",
        kinds.iter().map(|&k| {
            let bytes = reclaimable.get(&k).copied().unwrap_or(0);
            (vec![("kind", k.as_str())], bytes.to_string())
        }),
    );
    out.gauge(
        "safeprune_last_run_kept_objects",
        "Objects the last run kept, by kind and the rule that kept them.",
        kinds.iter().flat_map(|&k| {
            kept.iter()
                .filter(move |((kind, _), _)| *kind == k)
                .map(|((kind, rule), n)| {
                    let labels = vec![("kind", kind.as_str()), ("rule", rule.as_str())];
                    (labels, n.to_string())
                })
        }),
    );
    measured_families(&mut out, report);
    removal_families(&mut out, &kinds, &report.outcomes);
    out.gauge(
        "safeprune_last_run_reclaimed_bytes",
        "Bytes the last run freed, by kind (sizes the engine reports).",
        kinds.iter().map(|&k| {
            let bytes = reclaimed.get(&k).copied().unwrap_or(0);
            (vec![("kind", k.as_str())], bytes.to_string())
        }),
    );
    out.text
}

/// What the run was: when, how it ended, how long it took; the last
/// success and the daemon's period.
fn run_families(out: &mut Exposition, report: &Report, facts: &RunFacts) {
    let RunFacts {
        duration, success, ..
    } = *facts;
    out.gauge(
        "safeprune_last_run_timestamp_seconds",
        "Unix time the last safeprune run started (took its inventory).",
        [(vec![], unix_seconds(report.started_at))],
    );
    out.gauge(
        "safeprune_last_run_success",
        "1 if the last safeprune run finished without error, else 0.",
        [(vec![], flag(success))],
    );
    out.gauge(
        "safeprune_last_run_duration_seconds",
        "How long the last safeprune run took.",
        [(vec![], duration.as_secs_f64().to_string())],
    );
    out.gauge(
        "safeprune_last_run_dry_run",
        "1 if the last safeprune run was a dry run (it removed nothing), else 0.",
        [(vec![], flag(report.dry_run))],
    );
    out.gauge(
        "safeprune_last_run_refused",
        "1 if the last safeprune run was refused because its plan deleted more than safety.max_deletions, else 0.",
        [(vec![], flag(report.refused.is_some()))],
    );
    if let Some(at) = facts.last_success {
        out.gauge(
            "safeprune_last_success_timestamp_seconds",
            "Unix time the last successful safeprune run started.",
            [(vec![], unix_seconds(at))],
        );
    }
    if let Some(period) = facts.schedule_period {
        out.gauge(
            "safeprune_schedule_period_seconds",
            "The daemon's schedule: the longest time between two scheduled runs, jitter left out.",
            [(vec![], period.as_secs().to_string())],
        );
    }
}

/// The families of what only some runs measure: the image file system
/// (`images.disk`) and the I/O pressure (`safety.pace`).
fn measured_families(out: &mut Exposition, report: &Report) {
    if let Some(fs) = &report.image_fs {
        out.gauge(
            "safeprune_last_run_image_fs_used_ratio",
            "How full the image store's file system was before and after the last run (images.disk).",
            [Some(("before", fs.before_percent)), fs.after_percent.map(|p| ("after", p))]
                .into_iter()
                .flatten()
                .map(|(when, percent)| (vec![("when", when)], (percent / 100.0).to_string())),
        );
        if fs.high_percent.is_some() {
            out.gauge(
                "safeprune_last_run_image_fs_watermark_ratio",
                "The image file system watermarks the last run worked to, 0 to 1: above high it removes images until low (images.disk).",
                [("high", fs.high_percent), ("low", fs.low_percent)]
                    .into_iter()
                    .filter_map(|(level, percent)| {
                        percent.map(|p| (vec![("level", level)], (f64::from(p) / 100.0).to_string()))
                    }),
            );
        }
    }
    // A paced run's: one whose pace found a signal to read.
    if let Some(pace) = report.pace.as_ref().filter(|pace| pace.source.is_some()) {
        out.gauge(
            "safeprune_last_run_paced_seconds",
            "Seconds pacing held the last run's removals back (safety.pace).",
            [(vec![], pace.paced_seconds.to_string())],
        );
        if let Some(max) = pace.max_io_pressure_percent {
            out.gauge(
                "safeprune_last_run_io_pressure_max_ratio",
                "The highest I/O stall (PSI some: the share of a window stalled, 0 to 1) of the workloads the last run read while it removed (safety.pace).",
                [(vec![], (max / 100.0).to_string())],
            );
        }
        budget_families(out, &pace.budget);
    }
}

/// The stall budget's families.
fn budget_families(out: &mut Exposition, budget: &crate::pace::BudgetReport) {
    let signal = budget.signal.unwrap_or("workloads");
    if let Some(before) = budget.baseline_io_pressure_percent {
        let after = budget.last_baseline_io_pressure_percent.unwrap_or(before);
        out.gauge(
            "safeprune_last_run_io_stall_baseline_ratio",
            "The workloads' own I/O stall (PSI some of the pods' cgroup, or the node's: signal), 0 to 1: measured before the last run's first removal, and as it stood at its end (safety.pace).",
            [("before", before), ("after", after)].map(|(when, percent)| {
                (
                    vec![("signal", signal), ("when", when)],
                    (percent / 100.0).to_string(),
                )
            }),
        );
    }
    out.gauge(
        "safeprune_last_run_added_io_stall_seconds",
        "Seconds of I/O stall above the workloads' baseline while the last run removed (safety.pace).",
        [(vec![], budget.added_stall_seconds.to_string())],
    );
    if let Some(rate) = budget.objects_per_second {
        out.gauge(
            "safeprune_last_run_removals_per_second",
            "Removals the last run answered per second, from its first to its last (safety.pace).",
            [(vec![], rate.to_string())],
        );
    }
}

/// The removal attempts by result, and the skipped ones by reason.
fn removal_families(out: &mut Exposition, kinds: &[Kind], outcomes: &[Outcome]) {
    let mut removals: BTreeMap<(Kind, &str), usize> = BTreeMap::new();
    let mut skipped: BTreeMap<(Kind, &str), usize> = BTreeMap::new();
    let mut changed: BTreeMap<(Kind, &str), usize> = BTreeMap::new();
    for o in outcomes {
        if let Some(rule) = o.kept_by {
            *changed.entry((o.kind, rule.as_str())).or_default() += 1;
        }
        *removals.entry((o.kind, o.result.as_str())).or_default() += 1;
        if let Some(reason) = o.reason.filter(|_| o.result == RemovalResult::Skipped) {
            *skipped.entry((o.kind, reason.as_str())).or_default() += 1;
        }
    }
    let results = RemovalResult::ALL.map(RemovalResult::as_str);
    out.gauge(
        "safeprune_last_run_removals",
        "Removal attempts of the last run, by kind and result (deleted, skipped, failed).",
        every_pair(kinds, "result", &results, &removals),
    );
    let reasons = Reason::SKIPPED.map(Reason::as_str);
    out.gauge(
        "safeprune_last_run_skipped_removals",
        "Removals the last run skipped, by kind and reason (gone, in_use, changed, not_attempted).",
        every_pair(kinds, "reason", &reasons, &skipped),
    );
    // Only the pairs that happened: kinds times rules would be a hundred
    // series of zeros.
    out.gauge(
        "safeprune_last_run_changed_removals",
        "Removals the last run skipped as changed since planning, by kind and the rule that keeps them now.",
        changed.iter().map(|(&(kind, rule), n)| {
            (vec![("kind", kind.as_str()), ("rule", rule)], n.to_string())
        }),
    );
}

/// A sample for every kind and value of `label`, 0 where `counts` has none:
/// an alert on a series that is missing never fires.
fn every_pair<'a>(
    kinds: &'a [Kind],
    label: &'a str,
    values: &'a [&'a str],
    counts: &'a BTreeMap<(Kind, &str), usize>,
) -> impl Iterator<Item = (Vec<(&'a str, &'a str)>, String)> + 'a {
    kinds.iter().flat_map(move |&kind| {
        values.iter().map(move |&value| {
            let n = counts.get(&(kind, value)).copied().unwrap_or(0);
            (vec![("kind", kind.as_str()), (label, value)], n.to_string())
        })
    })
}

/// Text exposition format 0.0.4, gauges only.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn gauge<'a>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (Vec<(&'a str, &'a str)>, String)>,
    ) {
        let _ = writeln!(self.text, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.text, "# TYPE {name} gauge");
        for (labels, value) in samples {
            self.text.push_str(name);
            if !labels.is_empty() {
                let pairs: Vec<String> = labels
                    .iter()
                    .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
                    .collect();
                let _ = write!(self.text, "{{{}}}", pairs.join(","));
            }
            let _ = writeln!(self.text, " {value}");
        }
    }
}

/// A label value as the format wants it: `\`, `"` and newline escaped.
fn escape_label_value(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', r#"\""#)
        .replace('\n', r"\n")
}

/// HELP text as the format wants it: `\` and newline escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', r"\\").replace('\n', r"\n")
}

fn flag(on: bool) -> String {
    u8::from(on).to_string()
}

/// Seconds since the epoch with the milliseconds, exactly (no float rounding).
fn unix_seconds(at: DateTime<Utc>) -> String {
    let millis = at.timestamp_millis();
    let sign = if millis < 0 { "-" } else { "" };
    let millis = millis.unsigned_abs();
    match millis % 1000 {
        0 => format!("{sign}{}", millis / 1000),
        frac => {
            let text = format!("{sign}{}.{frac:03}", millis / 1000);
            text.trim_end_matches('0').to_owned()
        }
    }
}

#[cfg(test)]
mod tests;
