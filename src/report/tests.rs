//! Snapshot tests of the table and the JSON: the shapes users read and parse.

use chrono::{TimeZone, Utc};

use super::*;
use crate::execute::Reason;
use crate::inventory::{
    Container, ContainerState, Image, Inventory, Labels, PodIdentity, PodSandbox,
};
use crate::plan::plan;
use crate::policy::Policy;

pub(super) fn sample_report(outcomes: Vec<Outcome>) -> Report {
    let now = Utc.with_ymd_and_hms(2026, 11, 22, 5, 0, 0).unwrap();
    let ago = |h| now - chrono::Duration::hours(h);
    let container =
        |id: &str, name: &str, labels: &[(&str, &str)], sandbox: Option<&str>| Container {
            image_mounts: Vec::new(),
            layer: None,
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
                cri_pinned: false,
                parent: None,
                id: "sha256:feed".into(),
                tags: vec![
                    "busybox:1".into(),
                    "busybox:latest".into(),
                    "registry.local:5000/tools/busybox:1".into(),
                ],
                digests: vec![format!("busybox@sha256:{:0<64}", "ab")],
                created: Some(ago(1000)),
                last_tagged: None,
                size: Some(4_860_000),
                pinned: false,
                unique_size: None,
                recorded_use: None,
                first_seen: None,
                provenance: crate::inventory::provenance::Provenance::default(),
            },
            Image {
                cri_pinned: false,
                parent: None,
                id: "sha256:dead".into(),
                tags: vec![],
                digests: vec![],
                created: Some(ago(1000)),
                last_tagged: None,
                size: Some(187_000_000),
                pinned: false,
                unique_size: None,
                recorded_use: None,
                first_seen: None,
                provenance: crate::inventory::provenance::Provenance::default(),
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
            refs: None,
            result: RemovalResult::Deleted,
            bytes: None,
            reason: None,
            error: None,
            kept_by: None,
        },
        Outcome {
            kind: Kind::Image,
            id: "sha256:dead".into(),
            name: "sha256:dead".into(),
            refs: Some(vec![]),
            result: RemovalResult::Skipped,
            bytes: Some(187_000_000),
            reason: Some(Reason::InUse),
            error: Some("in use: conflict".into()),
            kept_by: None,
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
fn every_reference_of_an_image_shows_in_json_and_table() {
    let report = sample_report(vec![]);
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    let decision = |id: &str| {
        v["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["id"] == id)
            .unwrap()
            .clone()
    };
    assert_eq!(
        decision("sha256:feed")["refs"],
        serde_json::json!([
            "busybox:1",
            "busybox:latest",
            "registry.local:5000/tools/busybox:1",
            format!("busybox@sha256:{:0<64}", "ab"),
        ])
    );
    assert_eq!(decision("sha256:dead")["refs"], serde_json::json!([]));
    let container = &v["decisions"][0];
    assert_eq!(container["kind"], "container");
    assert!(container.get("refs").is_none(), "{container}");
    let table = render_table(&report);
    assert!(
        table.contains("busybox:1,latest registry.local:5000/tools/busybox:1"),
        "{table}"
    );
}

#[test]
fn compact_references_group_tags_by_repository() {
    let refs = |r: &[&str]| r.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        table::compact_refs(&refs(&[
            "nginx:1.25",
            "nginx:latest",
            "localhost:5000/nginx:1"
        ])),
        Some("nginx:1.25,latest localhost:5000/nginx:1".into())
    );
    // Digests only for an image without a tag, shortened.
    let digest = format!("nginx@sha256:{:0<64}", "0123456789abcdef");
    assert_eq!(
        table::compact_refs(&refs(&["nginx:1", &digest])),
        Some("nginx:1".into())
    );
    assert_eq!(
        table::compact_refs(&refs(&[&digest])),
        Some("nginx@sha256:0123456789ab".into())
    );
    assert_eq!(table::compact_refs(&[]), None);
}

#[test]
fn a_refused_run_says_so_above_its_plan() {
    let report = sample_report(vec![]).refused(Refusal {
        planned: 2,
        limit: 1,
    });
    let table = render_table(&report);
    let first = table.lines().next().unwrap();
    assert!(
        first.starts_with("safeprune run REFUSED on node1"),
        "{first}"
    );
    assert!(
        first.contains("deletes 2 objects, more than the limit of 1"),
        "{first}"
    );
    assert!(first.contains("nothing was removed"), "{first}");
    assert!(!table.contains("safeprune plan"), "{table}");
}

#[test]
fn outcomes_carry_their_reason() {
    let d = sample_report(vec![]).decisions[0].clone();
    let report = sample_report(vec![
        Outcome::of(&d, Some((Reason::Changed, "now kept".into()))),
        Outcome::of(&d, None),
    ]);
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(v["outcomes"][0]["result"], "skipped");
    assert_eq!(v["outcomes"][0]["reason"], "changed");
    assert_eq!(v["outcomes"][1]["result"], "deleted");
    assert!(v["outcomes"][1]["reason"].is_null());
    assert_eq!(report.summary.skipped, 1);
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

#[test]
fn images_that_cannot_come_back_and_keep_the_disk_over_low_are_said() {
    let plan = crate::plan::Plan {
        image_fs: Some(crate::inventory::FsUsage {
            path: "/var/lib/containerd".into(),
            used_bytes: 950,
            available_bytes: 50,
            stand_in: None,
        }),
        kept_unpullable: Some(crate::plan::KeptUnpullable {
            images: 2,
            bytes: 1_200_000_000,
        }),
        ..crate::plan::Plan::default()
    };
    let disk = crate::policy::DiskWatermarks::percents(85, 70);
    let report = Report::new("containerd", "n", Utc::now(), true, &plan, vec![])
        .with_image_fs_watermarks(Some(&disk));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(
        json["image_fs"]["kept_unpullable"],
        serde_json::json!({"images": 2, "bytes": 1_200_000_000_u64})
    );
    let table = render_table(&report);
    assert!(
        table.contains(
            "  disk: low_percent 70 not reached: 2 images (1.2GB) no registry can give back are kept (images.keep_unpullable)\n"
        ),
        "{table}"
    );
    // Without it, neither says a word.
    let without = Report::new(
        "containerd",
        "n",
        Utc::now(),
        true,
        &crate::plan::Plan::default(),
        vec![],
    );
    assert!(!render_table(&without).contains("disk:"));
}
