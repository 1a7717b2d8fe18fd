//! The textfile's shape (snapshot), its well-formedness and its agreement
//! with the report's summary over random reports, and the file it lands in.

#![expect(
    clippy::float_cmp,
    reason = "the values are integers below 2^53 or floats read back from their shortest exact text: equal means equal"
)]

use std::collections::{BTreeMap, BTreeSet};

use chrono::TimeZone;
use proptest::prelude::*;

use super::*;
use crate::execute::{Outcome, Reason};
use crate::plan::{Decision, Plan};

const RULES: [Rule; 16] = [
    Rule::Running,
    Rule::PodSandbox,
    Rule::ProtectedLabel,
    Rule::LivePodSandbox,
    Rule::InUse,
    Rule::KeepPattern,
    Rule::Pinned,
    Rule::Builtin,
    Rule::Disabled,
    Rule::Tagged,
    Rule::NamedVolume,
    Rule::TooYoung,
    Rule::KeepRecent,
    Rule::DiskBelowThreshold,
    Rule::LruNotNeeded,
    Rule::Eligible,
];

fn decision(kind: Kind, id: &str, rule: Rule, bytes: Option<u64>) -> Decision {
    Decision {
        wave: 0,
        kind,
        id: id.to_owned(),
        name: id.to_owned(),
        refs: None,
        decision: rule.action(),
        rule,
        detail: String::new(),
        bytes,
        last_used: None,
        last_used_source: None,
        facts: vec![],
        provenance: None,
    }
}

/// The outcome of removing `id`: deleted without a reason, else for it.
fn outcome(kind: Kind, id: &str, reason: Option<Reason>, bytes: Option<u64>) -> Outcome {
    Outcome {
        kind,
        id: id.to_owned(),
        name: id.to_owned(),
        refs: None,
        result: reason.map_or(RemovalResult::Deleted, Reason::result),
        bytes,
        reason,
        error: reason.map(|r| r.as_str().to_owned()),
        kept_by: None,
    }
}

/// How an attempt can end: deleted, or not for one of the reasons.
const ENDINGS: [Option<Reason>; 6] = [
    None,
    Some(Reason::Gone),
    Some(Reason::InUse),
    Some(Reason::Changed),
    Some(Reason::NotAttempted),
    Some(Reason::EngineError),
];

fn started_at() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 5, 0, 0).unwrap()
}

/// A node after a run: pods protected, some removals done, one skipped
/// (a pod came back), one failed.
fn sample_run() -> Report {
    let plan = Plan {
        decisions: vec![
            decision(
                Kind::Container,
                "c-istio",
                Rule::ProtectedLabel,
                Some(12_000),
            ),
            decision(
                Kind::Container,
                "c-setup",
                Rule::LivePodSandbox,
                Some(12_000),
            ),
            decision(Kind::Container, "c-setup2", Rule::LivePodSandbox, Some(0)),
            decision(Kind::Container, "c-app", Rule::Running, None),
            decision(Kind::Container, "c-old", Rule::Eligible, Some(40_000)),
            decision(Kind::Container, "c-gone", Rule::Eligible, Some(1_000)),
            decision(Kind::Network, "n-bridge", Rule::Builtin, None),
            decision(Kind::Network, "n-old", Rule::Eligible, None),
            decision(Kind::Volume, "v-data", Rule::Disabled, Some(5_000)),
            decision(
                Kind::Image,
                "sha256:pause",
                Rule::KeepPattern,
                Some(700_000),
            ),
            decision(Kind::Image, "sha256:app", Rule::InUse, Some(50_000_000)),
            decision(
                Kind::Image,
                "sha256:dead",
                Rule::Eligible,
                Some(187_000_000),
            ),
            decision(Kind::Image, "sha256:busy", Rule::Eligible, Some(4_860_000)),
            decision(Kind::BuildCache, "bc1", Rule::Eligible, None),
        ],
        ..Plan::default()
    };
    let outcomes = vec![
        outcome(Kind::Container, "c-old", None, Some(40_000)),
        outcome(Kind::Container, "c-gone", Some(Reason::Gone), Some(1_000)),
        outcome(Kind::Network, "n-old", None, None),
        outcome(Kind::Image, "sha256:dead", None, Some(187_000_000)),
        outcome(
            Kind::Image,
            "sha256:busy",
            Some(Reason::EngineError),
            Some(4_860_000),
        ),
        outcome(Kind::BuildCache, "bc1", None, None),
        Outcome {
            kept_by: Some(Rule::InUse),
            ..outcome(Kind::Image, "sha256:again", Some(Reason::Changed), Some(9))
        },
    ];
    Report::new("docker", "node1", started_at(), false, &plan, outcomes)
}

#[test]
fn run_metrics_snapshot() {
    let text = render_metrics(&sample_run(), Duration::from_millis(12_345), false);
    insta::assert_snapshot!(text);
}

#[test]
fn a_dry_run_says_so_and_still_writes_every_alerting_series() {
    let plan = Plan {
        decisions: vec![decision(Kind::Image, "sha256:x", Rule::Eligible, Some(7))],
        ..Plan::default()
    };
    let report = Report::new("docker", "node1", started_at(), true, &plan, vec![]);
    let series = parse(&render_metrics(&report, Duration::ZERO, true)).unwrap();
    assert_eq!(series[&("safeprune_last_run_dry_run".into(), vec![])], 1.0);
    assert_eq!(series[&("safeprune_last_run_success".into(), vec![])], 1.0);
    let image = vec![("kind".to_owned(), "image".to_owned())];
    let planned = (
        "safeprune_last_run_planned_deletions".to_owned(),
        image.clone(),
    );
    assert_eq!(series[&planned], 1.0);
    let reclaimable = ("safeprune_last_run_reclaimable_bytes".to_owned(), image);
    assert_eq!(series[&reclaimable], 7.0);
    for (kind, rule) in ALWAYS_KEPT {
        let labels = vec![
            ("kind".to_owned(), kind.as_str().to_owned()),
            ("rule".to_owned(), rule.as_str().to_owned()),
        ];
        assert_eq!(
            series[&("safeprune_last_run_kept_objects".into(), labels)],
            0.0
        );
    }
    for kind in Kind::ALL {
        for reason in Reason::SKIPPED {
            let labels = vec![
                ("kind".to_owned(), kind.as_str().to_owned()),
                ("reason".to_owned(), reason.as_str().to_owned()),
            ];
            let name = "safeprune_last_run_skipped_removals";
            assert_eq!(series[&(name.into(), labels)], 0.0);
        }
        for result in RemovalResult::ALL {
            let labels = vec![
                ("kind".to_owned(), kind.as_str().to_owned()),
                ("result".to_owned(), result.as_str().to_owned()),
            ];
            assert_eq!(series[&("safeprune_last_run_removals".into(), labels)], 0.0);
        }
    }
}

#[test]
fn kinds_the_runtime_lacks_have_no_series() {
    let report = sample_run().with_not_applicable(&[Kind::Volume, Kind::Network, Kind::BuildCache]);
    let text = render_metrics(&report, Duration::from_secs(1), true);
    parse(&text).unwrap();
    for kind in ["volume", "network", "build_cache"] {
        assert!(
            !text.contains(&format!("kind=\"{kind}\"")),
            "{kind} in:\n{text}"
        );
    }
    assert!(text.contains("kind=\"container\""));
}

#[test]
fn timestamps_are_exact_seconds_with_milliseconds() {
    let at = |ms| DateTime::<Utc>::from_timestamp_millis(ms).unwrap();
    assert_eq!(unix_seconds(at(1_795_237_200_000)), "1795237200");
    assert_eq!(unix_seconds(at(1_795_237_200_500)), "1795237200.5");
    assert_eq!(unix_seconds(at(1_795_237_200_042)), "1795237200.042");
    assert_eq!(unix_seconds(at(-1_500)), "-1.5");
    assert_eq!(unix_seconds(at(0)), "0");
}

#[test]
fn escaped_label_values_and_help_read_back_as_written() {
    for raw in [
        "plain",
        r"back\slash",
        "quo\"te",
        "new\nline",
        "\\\"\n\\n",
        "",
    ] {
        let mut out = Exposition::default();
        out.gauge("m", raw, [(vec![("l", raw)], "1".to_owned())]);
        let series = parse(&out.text).unwrap_or_else(|e| panic!("{raw:?}: {e}\n{}", out.text));
        let labels = vec![("l".to_owned(), raw.to_owned())];
        assert_eq!(series.get(&("m".to_owned(), labels)), Some(&1.0), "{raw:?}");
        assert_eq!(out.text.lines().count(), 3, "one line each: {raw:?}");
    }
}

/// The checker below must reject what the format forbids, or the property
/// test proves nothing.
#[test]
fn the_checker_rejects_malformed_text() {
    let ok = "# HELP a_b x\n# TYPE a_b gauge\na_b{k=\"v\"} 1\n";
    assert!(parse(ok).is_ok());
    for bad in [
        "# HELP a_b x\n# TYPE a_b gauge\na_b{k=\"v\"} 1",
        "# TYPE a_b gauge\na_b 1\n",
        "# HELP a_b x\n# HELP a_b x\n# TYPE a_b gauge\na_b 1\n",
        "# HELP a_b x\n# TYPE a_b gauge\n# TYPE a_b gauge\na_b 1\n",
        "# HELP a_b x\n# TYPE a_b counter\na_b 1\n",
        "# HELP 1ab x\n# TYPE 1ab gauge\n1ab 1\n",
        "# HELP a-b x\n# TYPE a-b gauge\na-b 1\n",
        "# HELP a_b x\n# TYPE a_b gauge\na_b{k=\"v\"} one\n",
        "# HELP a_b x\n# TYPE a_b gauge\na_b{k=\"v} 1\n",
        "# HELP a_b x\n# TYPE a_b gauge\na_b{__k=\"v\"} 1\n",
        "# HELP a_b x\n# TYPE a_b gauge\na_b 1\na_b 2\n",
        // node_exporter's textfile collector refuses samples with timestamps.
        "# HELP a_b x\n# TYPE a_b gauge\na_b 1 1795237200000\n",
        "# HELP a_b x\n# TYPE a_b gauge\nc_d 1\n",
        "# HELP a_b x\n# TYPE a_b gauge\na_b{k=\"a\\qb\"} 1\n",
        "# HELP a_b x\n# TYPE a_b gauge\n\na_b 1\n",
        "# HELP a_b x\n# TYPE a_b gauge\na_b{k=\"v\" 1\n",
        "# HELP a_b x\n# TYPE a_b gauge\na_b{k=\"v\"j=\"w\"} 1\n",
    ] {
        assert!(parse(bad).is_err(), "accepted: {bad:?}");
    }
}

/// Series by metric name and labels.
type Series = BTreeMap<(String, Vec<(String, String)>), f64>;

/// Series by (name, labels), after checking the text against the exposition
/// format: one HELP then one TYPE (gauge) before each family's samples, the
/// samples of a family together, valid metric and label names, well-escaped
/// label values, float values, no series twice, a final newline.
fn parse(text: &str) -> Result<Series, String> {
    let body = text.strip_suffix('\n').ok_or("no final newline")?;
    let mut series = BTreeMap::new();
    let mut helped = BTreeSet::new();
    let mut typed = BTreeSet::new();
    let mut current: Option<&str> = None;
    for line in body.split('\n') {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest.split_once(' ').ok_or("HELP without text")?;
            check_metric_name(name)?;
            if !helped.insert(name) {
                return Err(format!("HELP twice for {name}"));
            }
            current = None;
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').ok_or("TYPE without type")?;
            if !helped.contains(name) || !typed.insert(name) || kind != "gauge" {
                return Err(format!("bad TYPE line: {line}"));
            }
            current = Some(name);
        } else {
            let (name, labels, value) = parse_sample(line)?;
            if current != Some(name) {
                return Err(format!("sample outside its family: {line}"));
            }
            let value: f64 = value.parse().map_err(|_| format!("bad value: {line}"))?;
            if series.insert((name.to_owned(), labels), value).is_some() {
                return Err(format!("series twice: {line}"));
            }
        }
    }
    Ok(series)
}

type Sample<'a> = (&'a str, Vec<(String, String)>, &'a str);

fn parse_sample(line: &str) -> Result<Sample<'_>, String> {
    let end = line.find(['{', ' ']).ok_or(format!("no value: {line:?}"))?;
    let (name, mut rest) = line.split_at(end);
    check_metric_name(name)?;
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        loop {
            let (key, after) = rest
                .split_once("=\"")
                .ok_or(format!("bad labels: {line:?}"))?;
            check_label_name(key)?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let close = loop {
                match chars.next() {
                    Some((i, '"')) => break i,
                    Some((_, '\\')) => match chars.next() {
                        Some((_, '\\')) => value.push('\\'),
                        Some((_, '"')) => value.push('"'),
                        Some((_, 'n')) => value.push('\n'),
                        _ => return Err(format!("bad escape: {line:?}")),
                    },
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("unclosed label value: {line:?}")),
                }
            };
            labels.push((key.to_owned(), value));
            rest = &after[close + 1..];
            if let Some(next) = rest.strip_prefix(',') {
                rest = next;
            } else if let Some(done) = rest.strip_prefix('}') {
                rest = done;
                break;
            } else {
                return Err(format!("bad labels: {line:?}"));
            }
        }
    }
    let value = rest
        .strip_prefix(' ')
        .ok_or(format!("no value: {line:?}"))?;
    Ok((name, labels, value))
}

fn check_metric_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
        Ok(())
    } else {
        Err(format!("bad metric name {name:?}"))
    }
}

fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && !name.starts_with("__") && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(format!("bad label name {name:?}"))
    }
}

/// A plan of random decisions, and for each deletion maybe an outcome (none:
/// the run stopped before it).
fn arb_report() -> impl Strategy<Value = (Report, u64, bool)> {
    let decisions = proptest::collection::vec(
        (
            0..Kind::ALL.len(),
            0..RULES.len(),
            proptest::option::of(0u64..1 << 40),
        ),
        0..40,
    );
    let results = proptest::collection::vec(proptest::option::of(0..ENDINGS.len()), 40);
    (
        decisions,
        results,
        any::<bool>(),
        0u64..1 << 20,
        any::<bool>(),
    )
        .prop_map(|(decisions, results, dry_run, millis, success)| {
            let decisions: Vec<Decision> = decisions
                .into_iter()
                .enumerate()
                .map(|(i, (k, r, bytes))| decision(Kind::ALL[k], &format!("o{i}"), RULES[r], bytes))
                .collect();
            let outcomes = decisions
                .iter()
                .filter(|d| d.decision == Action::Delete)
                .zip(&results)
                .filter_map(|(d, r)| r.map(|r| outcome(d.kind, &d.id, ENDINGS[r], d.bytes)))
                .collect();
            let plan = Plan {
                decisions,
                ..Plan::default()
            };
            let report = Report::new("docker", "n", started_at(), dry_run, &plan, outcomes);
            (report, millis, success)
        })
}

fn family_sum(series: &Series, name: &str, filter: &[(&str, &str)]) -> f64 {
    series
        .iter()
        .filter(|((n, labels), _)| {
            n == name
                && filter
                    .iter()
                    .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, v)| v)
        .sum()
}

#[expect(
    clippy::cast_precision_loss,
    reason = "the generated counts and sizes stay far below 2^53"
)]
fn as_f64(n: impl Into<u64>) -> f64 {
    n.into() as f64
}

proptest! {
    #[test]
    fn metrics_are_well_formed_and_agree_with_the_summary((report, millis, success) in arb_report()) {
        let text = render_metrics(&report, Duration::from_millis(millis), success);
        let series = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        let s = &report.summary;
        let count = |n: usize| as_f64(u64::try_from(n).unwrap());
        let total = |c: &crate::report::KindCounts| count(Kind::ALL.iter().map(|&k| c.get(k)).sum());
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_planned_deletions", &[]), total(&s.delete));
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_kept_objects", &[]), total(&s.keep));
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_reclaimable_bytes", &[]), as_f64(s.reclaimable_bytes));
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_reclaimed_bytes", &[]), as_f64(s.reclaimed_bytes));
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_removals", &[("result", "skipped")]), count(s.skipped));
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_removals", &[("result", "failed")]), count(s.failed));
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_removals", &[]), count(report.outcomes.len()));
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_skipped_removals", &[]), count(s.skipped));
        for reason in Reason::SKIPPED {
            let n = report.outcomes.iter().filter(|o| o.reason == Some(reason)).count();
            let f = [("reason", reason.as_str())];
            prop_assert_eq!(family_sum(&series, "safeprune_last_run_skipped_removals", &f), count(n));
        }
        for (kind, rules) in &s.kept_by_rule {
            for (rule, &n) in rules {
                let f = [("kind", kind.as_str()), ("rule", rule.as_str())];
                prop_assert_eq!(family_sum(&series, "safeprune_last_run_kept_objects", &f), count(n));
            }
        }
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_dry_run", &[]), f64::from(u8::from(report.dry_run)));
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_success", &[]), f64::from(u8::from(success)));
        prop_assert_eq!(family_sum(&series, "safeprune_last_run_duration_seconds", &[]), Duration::from_millis(millis).as_secs_f64());
    }

    #[test]
    fn the_order_of_decisions_and_outcomes_does_not_change_the_text(
        (report, millis, success) in arb_report(),
        seed in any::<u64>(),
    ) {
        let mut shuffled = report.clone();
        // A cheap deterministic shuffle: sort by a hash of position and seed.
        let key = |i: usize| (u64::try_from(i).unwrap() ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut order: Vec<usize> = (0..shuffled.outcomes.len()).collect();
        order.sort_by_key(|&i| key(i));
        shuffled.outcomes = order.iter().map(|&i| report.outcomes[i].clone()).collect();
        let mut order: Vec<usize> = (0..shuffled.decisions.len()).collect();
        order.sort_by_key(|&i| key(i));
        shuffled.decisions = order.iter().map(|&i| report.decisions[i].clone()).collect();
        let d = Duration::from_millis(millis);
        prop_assert_eq!(render_metrics(&report, d, success), render_metrics(&shuffled, d, success));
    }
}

/// The stall budget's figures of a paced run.
fn budget(baseline: Option<f64>, rate: Option<f64>) -> crate::pace::BudgetReport {
    crate::pace::BudgetReport {
        signal: Some("workloads"),
        cpu_source: None,
        baseline_io_pressure_percent: baseline,
        last_baseline_io_pressure_percent: baseline.map(|b| b + 1.5),
        baseline_remeasured: 2,
        added_io_pressure_percent: 0.5,
        added_stall_seconds: 1.25,
        on_max_delay: crate::policy::OnMaxDelay::Continue,
        objects_per_second: rate,
    }
}

/// A paced run's `pace` (`source` `None`: one that found no signal and
/// was not paced), the highest window `max`.
fn pace(
    source: Option<&str>,
    max: Option<f64>,
    budget: crate::pace::BudgetReport,
) -> crate::pace::PaceReport {
    crate::pace::PaceReport {
        source: source.map(str::to_owned),
        workloads_cgroup: "auto".into(),
        io_pressure_percent: 10.0,
        max_delay_seconds: 600,
        paced_seconds: 12.5,
        readings: 9,
        max_io_pressure_percent: max,
        lowest_concurrency: 1,
        delay_exhausted: false,
        disk_emergency: false,
        budget,
    }
}

const PODS: Option<&str> = Some("/sys/fs/cgroup/kubepods.slice/io.pressure");

#[test]
fn a_paced_run_says_how_long_it_waited_and_the_stall_it_saw() {
    let report = sample_run().with_pace(Some(pace(PODS, Some(38.25), budget(Some(1.0), None))));
    let series = parse(&render_metrics(&report, Duration::from_secs(1), true)).unwrap();
    assert_eq!(
        series[&("safeprune_last_run_paced_seconds".into(), vec![])],
        12.5
    );
    assert!(
        (series[&("safeprune_last_run_io_pressure_max_ratio".into(), vec![])] - 0.3825).abs()
            < 1e-9
    );
    // No window read, no stall series.
    let report = sample_run().with_pace(Some(pace(PODS, None, budget(None, None))));
    let text = render_metrics(&report, Duration::from_secs(1), true);
    let series = parse(&text).unwrap();
    assert!(series.contains_key(&("safeprune_last_run_paced_seconds".into(), vec![])));
    assert!(!text.contains("io_pressure_max_ratio"), "{text}");
    // Off, or not paced for want of a signal: no pacing family at all.
    let text = render_metrics(&sample_run(), Duration::from_secs(1), true);
    assert!(!text.contains("paced_seconds"), "{text}");
    let report = sample_run().with_pace(Some(pace(None, None, budget(None, None))));
    let text = render_metrics(&report, Duration::from_secs(1), true);
    assert!(
        !text.contains("paced_seconds") && !text.contains("io_stall"),
        "{text}"
    );
}

#[test]
fn a_paced_run_says_the_baseline_the_added_stall_and_its_rate() {
    let report = sample_run().with_pace(Some(pace(PODS, Some(4.0), budget(Some(1.0), Some(2.5)))));
    let series = parse(&render_metrics(&report, Duration::from_secs(1), true)).unwrap();
    let baseline = |when: &str| {
        series[&(
            "safeprune_last_run_io_stall_baseline_ratio".into(),
            vec![
                ("signal".into(), "workloads".into()),
                ("when".into(), when.into()),
            ],
        )]
    };
    assert!((baseline("before") - 0.01).abs() < 1e-12);
    assert!((baseline("after") - 0.025).abs() < 1e-12);
    assert_eq!(
        series[&("safeprune_last_run_added_io_stall_seconds".into(), vec![])],
        1.25
    );
    assert_eq!(
        series[&("safeprune_last_run_removals_per_second".into(), vec![])],
        2.5
    );
    // Nothing removed: no baseline measured, no rate; the added stall is 0.
    let report = sample_run().with_pace(Some(pace(PODS, Some(4.0), budget(None, None))));
    let text = render_metrics(&report, Duration::from_secs(1), true);
    assert!(
        !text.contains("baseline_ratio") && !text.contains("removals_per_second"),
        "{text}"
    );
    assert!(
        text.contains("safeprune_last_run_added_io_stall_seconds 1.25"),
        "{text}"
    );
}

#[test]
fn the_last_success_is_the_runs_own_or_carried_forward_through_failures() {
    let report = sample_run();
    let key = (
        "safeprune_last_success_timestamp_seconds".to_owned(),
        vec![],
    );
    // A success: its own start.
    let text = render_metrics(&report, Duration::from_secs(1), true);
    let own = parse(&text).unwrap()[&key];
    assert_eq!(
        own.to_string(),
        unix_seconds(report.started_at),
        "exactly as written"
    );
    assert_eq!(last_success_in(&text), Some(report.started_at));
    // A failure with none before: no series (an alert on its age cannot
    // fire on a node that never succeeded; the failure's own alert does).
    let text = render_metrics(&report, Duration::from_secs(1), false);
    assert!(!text.contains("last_success"), "{text}");
    assert_eq!(last_success_in(&text), None);
    // A failure after one: the earlier success, read back exactly.
    let earlier =
        Utc.with_ymd_and_hms(2026, 11, 19, 5, 0, 3).unwrap() + chrono::Duration::milliseconds(125);
    let facts = RunFacts {
        last_success: Some(earlier),
        ..RunFacts::of(&report, Duration::from_secs(1), false)
    };
    let text = render_run_metrics(&report, &facts);
    assert_eq!(parse(&text).unwrap()[&key], 1_795_064_403.125);
    assert_eq!(last_success_in(&text), Some(earlier));
    assert_eq!(
        last_success_in("safeprune_last_success_timestamp_seconds NaN\n"),
        None
    );
    assert_eq!(
        last_success_in("safeprune_last_success_timestamp_seconds -1\n"),
        None
    );
}

#[test]
fn a_refused_run_a_daemons_period_and_the_watermarks_have_their_series() {
    let refused = sample_run().refused(super::super::Refusal {
        planned: 12,
        limit: 10,
    });
    let key = |name: &str| (name.to_owned(), vec![]);
    let series = parse(&render_metrics(&refused, Duration::from_secs(1), false)).unwrap();
    assert_eq!(series[&key("safeprune_last_run_refused")], 1.0);
    let series = parse(&render_metrics(
        &sample_run(),
        Duration::from_secs(1),
        false,
    ))
    .unwrap();
    assert_eq!(series[&key("safeprune_last_run_refused")], 0.0);
    assert!(!series.contains_key(&key("safeprune_schedule_period_seconds")));

    let facts = RunFacts {
        schedule_period: Some(Duration::from_secs(7 * 86_400)),
        ..RunFacts::of(&sample_run(), Duration::from_secs(1), true)
    };
    let series = parse(&render_run_metrics(&sample_run(), &facts)).unwrap();
    assert_eq!(series[&key("safeprune_schedule_period_seconds")], 604_800.0);

    let mut report = sample_run();
    report.image_fs = Some(super::super::ImageFs {
        path: "/var/lib/docker".into(),
        before_percent: 91.5,
        after_percent: Some(86.25),
        high_percent: Some(85),
        low_percent: Some(80),
        kept_unpullable: None,
    });
    let series = parse(&render_metrics(&report, Duration::from_secs(1), true)).unwrap();
    let watermark = |level: &str| {
        series[&(
            "safeprune_last_run_image_fs_watermark_ratio".to_owned(),
            vec![("level".to_owned(), level.to_owned())],
        )]
    };
    assert_eq!(watermark("high"), 0.85);
    assert_eq!(watermark("low"), 0.8);
    // Without the policy's watermarks (a report made without it), none.
    report.image_fs.as_mut().unwrap().high_percent = None;
    let text = render_metrics(&report, Duration::from_secs(1), true);
    assert!(!text.contains("watermark"), "{text}");
}
