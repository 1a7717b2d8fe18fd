//! Snapshot tests of the table and the JSON: the shapes users read and parse.

use chrono::{TimeZone, Utc};

use super::*;
use crate::inventory::{
    Container, ContainerState, Image, Inventory, Labels, PodIdentity, PodSandbox,
};
use crate::plan::plan;
use crate::policy::Policy;

fn sample_report(outcomes: Vec<Outcome>) -> Report {
    let now = Utc.with_ymd_and_hms(2026, 11, 22, 5, 0, 0).unwrap();
    let ago = |h| now - chrono::Duration::hours(h);
    let container =
        |id: &str, name: &str, labels: &[(&str, &str)], sandbox: Option<&str>| Container {
            id: format!("{id:0<64}"),
            names: vec![name.to_owned()],
            state: ContainerState::Exited,
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<Labels>(),
            image_id: "sha256:feed".into(),
            image_ref: "busybox:1".into(),
            created: ago(50),
            finished: Some(ago(48)),
            volumes: vec![],
            networks: vec![],
            size: Some(12_000),
            pod: sandbox.map(|s| PodIdentity {
                sandbox_id: Some(format!("{s:0<64}")),
                pod_uid: Some("uid-1".into()),
                pod_name: Some("web".into()),
                pod_namespace: Some("default".into()),
                is_sandbox: false,
            }),
        };
    let inv = Inventory {
        runtime: "docker".into(),
        containers: vec![
            container(
                "aa",
                "k8s_istio-init_web_default_uid-1_0",
                &[("io.kubernetes.container.name", "istio-init")],
                Some("5b"),
            ),
            container("bb", "k8s_setup_web_default_uid-1_0", &[], Some("5b")),
            container("cc", "old-job", &[], None),
        ],
        images: vec![
            Image {
                id: "sha256:feed".into(),
                tags: vec!["busybox:1".into()],
                digests: vec![],
                created: Some(ago(1000)),
                last_tagged: None,
                size: Some(4_860_000),
                pinned: false,
            },
            Image {
                id: "sha256:dead".into(),
                tags: vec![],
                digests: vec![],
                created: Some(ago(1000)),
                last_tagged: None,
                size: Some(187_000_000),
                pinned: false,
            },
        ],
        sandboxes: vec![PodSandbox {
            id: format!("{:0<64}", "5b"),
            pod_uid: Some("uid-1".into()),
            pod_name: Some("web".into()),
            pod_namespace: Some("default".into()),
            ready: true,
        }],
        ..Inventory::default()
    };
    let p = plan(&inv, &Policy::builtin(), now);
    Report::new("docker", "node1", now, outcomes.is_empty(), &p, outcomes)
}

#[test]
fn plan_table_snapshot() {
    insta::assert_snapshot!(render_table(&sample_report(vec![])));
}

#[test]
fn plan_json_snapshot() {
    insta::assert_snapshot!(sample_report(vec![]).to_json());
}

#[test]
fn run_table_snapshot_shows_outcomes() {
    let outcomes = vec![
        Outcome {
            kind: Kind::Container,
            id: format!("{:0<64}", "cc"),
            name: "old-job".into(),
            result: RemovalResult::Deleted,
            bytes: None,
            error: None,
        },
        Outcome {
            kind: Kind::Image,
            id: "sha256:dead".into(),
            name: "sha256:dead".into(),
            result: RemovalResult::Skipped,
            bytes: Some(187_000_000),
            error: Some("in use: conflict".into()),
        },
    ];
    let report = sample_report(outcomes);
    assert_eq!(report.summary.skipped, 1);
    assert_eq!(report.summary.reclaimed_bytes, 0);
    insta::assert_snapshot!(render_table(&report));
}

#[test]
fn json_has_the_documented_fields() {
    let v: serde_json::Value = serde_json::from_str(&sample_report(vec![]).to_json()).unwrap();
    for key in [
        "version",
        "runtime",
        "node",
        "started_at",
        "dry_run",
        "decisions",
        "outcomes",
        "summary",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["started_at"], "2026-11-22T05:00:00Z");
    let d = &v["decisions"][0];
    for key in ["kind", "id", "name", "decision", "rule", "detail", "bytes"] {
        assert!(d.get(key).is_some(), "decision missing {key}");
    }
    assert!(d.get("facts").is_none());
    for key in ["container", "image", "volume", "network", "build_cache"] {
        assert!(
            v["summary"]["delete"].get(key).is_some(),
            "summary.delete missing {key}"
        );
    }
    assert_eq!(
        v["summary"]["kept_by_rule"]["container"]["protected_label"],
        1
    );
    assert_eq!(
        v["summary"]["kept_by_rule"]["container"]["live_pod_sandbox"],
        1
    );
}

#[test]
fn human_bytes_uses_decimal_units() {
    assert_eq!(human_bytes(0), "0B");
    assert_eq!(human_bytes(999), "999B");
    assert_eq!(human_bytes(4_860_000), "4.9MB");
    assert_eq!(human_bytes(187_000_000), "187.0MB");
    assert_eq!(human_bytes(u64::MAX), "18446.7PB");
}

#[test]
fn kinds_a_runtime_lacks_are_null_not_zero() {
    let report =
        sample_report(vec![]).with_not_applicable(&[Kind::Volume, Kind::Network, Kind::BuildCache]);
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    for kind in ["volume", "network", "build_cache"] {
        assert!(v["summary"]["delete"][kind].is_null(), "{kind}");
        assert!(v["summary"]["keep"][kind].is_null(), "{kind}");
    }
    assert_eq!(v["summary"]["delete"]["container"], 1);
    assert_eq!(
        v["summary"]["not_applicable"],
        serde_json::json!(["volume", "network", "build_cache"])
    );
    let table = render_table(&report);
    assert!(
        table.contains("not applicable on docker: volume, network, build_cache"),
        "{table}"
    );
    assert!(!table.contains("0 volumes"), "{table}");
}
