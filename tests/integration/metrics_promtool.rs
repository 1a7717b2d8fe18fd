//! The metrics textfile as Prometheus' own checker sees it: `promtool check
//! metrics` parses it and lints names, units, types and help, over the
//! report of a node laid out like Kubernetes, planned by the real planner.
//!
//! `promtool` comes from Debian's `prometheus` package; `scripts/deps.sh`
//! installs it (the tool alone) when it is missing.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use safeprune::execute::{Outcome, Reason};
use safeprune::inventory::{
    BuildCacheEntry, Container, ContainerState, Image, Inventory, Labels, Network, PodIdentity,
    PodSandbox, Volume,
};
use safeprune::plan::{Action, plan};
use safeprune::policy::Policy;
use safeprune::report::{Report, render_metrics};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 5, 0, 7).unwrap() + chrono::Duration::milliseconds(250)
}

fn hours_ago(h: i64) -> DateTime<Utc> {
    now() - chrono::Duration::hours(h)
}

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn pod(sandbox: &str, uid: &str, name: &str, is_sandbox: bool) -> PodIdentity {
    PodIdentity {
        sandbox_id: (!is_sandbox).then(|| sandbox.to_owned()),
        pod_uid: Some(uid.to_owned()),
        pod_name: Some(name.to_owned()),
        pod_namespace: Some("default".to_owned()),
        is_sandbox,
    }
}

fn container(id: &str, name: &str, state: ContainerState, pod: Option<PodIdentity>) -> Container {
    let container_name = name.split('_').nth(1).unwrap_or(name);
    Container {
        image_mounts: Vec::new(),
        layer: None,
        id: format!("{id:0<64}"),
        names: vec![name.to_owned()],
        state,
        labels: labels(&[("io.kubernetes.container.name", container_name)]),
        image_id: "sha256:app".to_owned(),
        image_ref: "registry.example/app:1.4".to_owned(),
        created: hours_ago(72),
        finished: (state == ContainerState::Exited).then(|| hours_ago(48)),
        volumes: vec![],
        networks: vec!["bridge".to_owned()],
        pod,
        size: Some(8_192),
    }
}

fn image(id: &str, tags: &[&str], size: u64) -> Image {
    Image {
        parent: None,
        id: id.to_owned(),
        tags: tags.iter().map(|&t| t.to_owned()).collect(),
        digests: vec![],
        created: Some(hours_ago(2_000)),
        last_tagged: Some(hours_ago(500)),
        size: Some(size),
        pinned: false,
        cri_pinned: false,
        unique_size: None,
        recorded_use: None,
        first_seen: None,
        provenance: safeprune::inventory::provenance::Provenance::default(),
    }
}

/// A live pod `web` (sandbox running, `istio-init` and `setup` exited, `app`
/// running), a dead pod `batch`, a plain old container, images, networks,
/// a volume and build cache.
fn node() -> Inventory {
    use ContainerState::{Exited, Running};
    let web = |sandbox| pod("5b", "uid-web", "web", sandbox);
    let batch = |sandbox| pod("6c", "uid-batch", "batch", sandbox);
    Inventory {
        runtime: "docker".to_owned(),
        containers: vec![
            container(
                "5b",
                "k8s_POD_web_default_uid-web_0",
                Running,
                Some(web(true)),
            ),
            container(
                "a1",
                "k8s_istio-init_web_default_uid-web_0",
                Exited,
                Some(web(false)),
            ),
            container(
                "a2",
                "k8s_setup_web_default_uid-web_0",
                Exited,
                Some(web(false)),
            ),
            container(
                "a3",
                "k8s_app_web_default_uid-web_0",
                Running,
                Some(web(false)),
            ),
            container(
                "6c",
                "k8s_POD_batch_default_uid-batch_0",
                Exited,
                Some(batch(true)),
            ),
            container(
                "b1",
                "k8s_job_batch_default_uid-batch_0",
                Exited,
                Some(batch(false)),
            ),
            container("c1", "old-debug", Exited, None),
        ],
        images: vec![
            image("sha256:pause", &["registry.k8s.io/pause:3.9"], 744_000),
            image("sha256:app", &["registry.example/app:1.4"], 98_000_000),
            image("sha256:old", &["registry.example/app:1.3"], 97_000_000),
            image("sha256:dangling", &[], 12_000_000),
        ],
        volumes: vec![Volume {
            name: "data".to_owned(),
            anonymous: false,
            labels: Labels::new(),
            created: Some(hours_ago(1_000)),
            size: Some(1_000_000),
        }],
        networks: vec![
            Network {
                id: "n-bridge".to_owned(),
                name: "bridge".to_owned(),
                created: Some(hours_ago(9_000)),
                labels: Labels::new(),
            },
            Network {
                id: "n-old".to_owned(),
                name: "ci-old".to_owned(),
                created: Some(hours_ago(300)),
                labels: Labels::new(),
            },
        ],
        build_cache: vec![BuildCacheEntry {
            parents: Vec::new(),
            id: "bc-1".to_owned(),
            description: "mount / from exec /bin/sh -c make".to_owned(),
            created: Some(hours_ago(400)),
            last_used: Some(hours_ago(300)),
            size: None,
            in_use: false,
        }],
        sandboxes: vec![
            PodSandbox {
                id: format!("{:0<64}", "5b"),
                pod_uid: Some("uid-web".to_owned()),
                pod_name: Some("web".to_owned()),
                pod_namespace: Some("default".to_owned()),
                ready: true,
            },
            PodSandbox {
                id: format!("{:0<64}", "6c"),
                pod_uid: Some("uid-batch".to_owned()),
                pod_name: Some("batch".to_owned()),
                pod_namespace: Some("default".to_owned()),
                ready: false,
            },
        ],
        // No image file system, API version or CRI runtime; the graph store.
        ..Inventory::default()
    }
}

/// The report of a run over [`node`]: every deletion attempted, the first
/// skipped (its pod came back) and the last failed.
fn run_report() -> Report {
    let planned = plan(&node(), &Policy::builtin(), now());
    let deletions: Vec<_> = planned
        .decisions
        .iter()
        .filter(|d| d.decision == Action::Delete)
        .collect();
    assert!(
        deletions.len() >= 3,
        "the node has work to do: {deletions:?}"
    );
    let outcomes = deletions
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let not_deleted = match i {
                0 => Some(Reason::InUse),
                i if i + 1 == deletions.len() => Some(Reason::EngineError),
                _ => None,
            };
            Outcome::of(d, not_deleted.map(|r| (r, "conflict".to_owned())))
        })
        .collect();
    Report::new("docker", "node1", now(), false, &planned, outcomes)
}

/// `promtool check metrics` over `text` on stdin: its exit status and what
/// it said (problems go to stdout or stderr depending on the version).
fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (scripts/deps.sh installs it from Debian's prometheus package)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said)
}

#[test]
fn promtool_passes_the_metrics_of_a_run_without_a_lint_problem() {
    let report = run_report();
    assert!(report.summary.failed == 1 && report.summary.skipped == 1);
    let text = render_metrics(&report, Duration::from_millis(3_456), false);
    // The planner kept what a Kubernetes node needs kept: the figures the
    // alerts of docs/operations.md watch are really there.
    for line in [
        r#"safeprune_last_run_kept_objects{kind="container",rule="protected_label"} 1"#,
        r#"safeprune_last_run_kept_objects{kind="container",rule="live_pod_sandbox"} 1"#,
        r#"safeprune_last_run_kept_objects{kind="container",rule="pod_sandbox"} 1"#,
        r#"safeprune_last_run_removals{kind="container",result="skipped"} 1"#,
        "safeprune_last_run_timestamp_seconds 1795323607.25",
        "safeprune_last_run_success 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
    }
    let (ok, said) = promtool_check(&text);
    assert!(ok && said.is_empty(), "promtool: {said}\n{text}");
}

#[test]
fn promtool_passes_the_metrics_of_a_dry_run_without_a_lint_problem() {
    let planned = plan(&node(), &Policy::builtin(), now());
    let report = Report::new("docker", "node1", now(), true, &planned, vec![]);
    let text = render_metrics(&report, Duration::from_secs(1), true);
    assert!(text.lines().any(|l| l == "safeprune_last_run_dry_run 1"));
    let (ok, said) = promtool_check(&text);
    assert!(ok && said.is_empty(), "promtool: {said}\n{text}");
}

/// Without this, a promtool that only parsed (or a harness that lost its
/// output) would pass the tests above whatever the names.
#[test]
fn promtool_flags_what_its_lint_forbids() {
    let counter = "# HELP safeprune_x x\n# TYPE safeprune_x counter\nsafeprune_x 1\n";
    let (ok, said) = promtool_check(counter);
    assert!(!ok && said.contains("_total"), "promtool: {said}");
    let unhelped = "# TYPE safeprune_y gauge\nsafeprune_y 1\n";
    let (ok, said) = promtool_check(unhelped);
    assert!(!ok && said.contains("no help text"), "promtool: {said}");
}
