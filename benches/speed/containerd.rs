//! `safeprune run` on containerd: the API calls it makes per removal
//! candidate, and its time per removal, as the node grows.
//!
//! Each run starts a private containerd (the tests' harness: its own
//! namespaces and directory under /tmp) and lays out a node of N objects:
//! a fifth unused images (distinct manifests over one shared layer), the
//! rest plain containers (never started, a 4 KiB OCI spec each, their
//! snapshots prepared; half of them labelled as istio-init containers, so
//! kept, as the live containers of a real node are), in the namespace
//! `bench`; and, in `k8s.io`
//! through CRI, five stopped pods each with an exited container, and a
//! live pod with an exited init container that stays. containerd counts
//! the gRPC calls it serves (its own API and CRI's); the bench reads the
//! counts before and after `safeprune run` and prints them by method.
//!
//! Run: `cargo bench --bench containerd` (sizes in objects:
//! `CONTAINERD_SIZES=1000,5000`, runs per size: `RUNS=3`). `SAFEPRUNE_BIN`
//! runs another build of safeprune (to compare commits) on the same
//! fixtures. BENCHMARKS.md holds the figures.

#[path = "../../tests/integration/util/mod.rs"]
#[allow(dead_code, clippy::all, clippy::pedantic)]
mod util;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use containerd_client::services::v1::container::Runtime;
use containerd_client::services::v1::containers_client::ContainersClient;
use containerd_client::services::v1::leases_client::LeasesClient;
use containerd_client::services::v1::snapshots::PrepareSnapshotRequest;
use containerd_client::services::v1::snapshots::snapshots_client::SnapshotsClient;
use containerd_client::services::v1::{
    Container, CreateContainerRequest, CreateRequest, DeleteRequest,
};
use containerd_client::tonic::Request;
use containerd_client::tonic::metadata::MetadataValue;
use futures_util::{StreamExt, stream};
use util::containerd::{CRI_NAMESPACE, PrivateContainerd};
use util::node::{Cli, Runtime as PolicyRuntime};
use util::pod::Pod;

const NAMESPACE: &str = "bench";
const BASE: &str = "bench.local/base:1";
const BUSYBOX: &str = "docker.io/library/busybox:1.36";
/// Pods through CRI: stopped ones (their exited container goes) and the
/// live one (its exited init container stays).
const STOPPED_PODS: usize = 5;
/// The default policy protects containers with this label.
const PROTECTED: (&str, &str) = ("io.kubernetes.container.name", "istio-init");

fn namespaced<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.metadata_mut().insert(
        "containerd-namespace",
        MetadataValue::from_static(NAMESPACE),
    );
    request
}

/// The lease the fixture's snapshots are made under, as containerd's
/// clients make them: without one, containerd's garbage collector may take
/// a snapshot before its container refers to it.
const FIXTURE_LEASE: &str = "bench-fixture";

fn leased<T>(message: T) -> Request<T> {
    let mut request = namespaced(message);
    request.metadata_mut().insert(
        "containerd-lease",
        MetadataValue::from_static(FIXTURE_LEASE),
    );
    request
}

/// `count` containers from `BASE`, never started, each with its snapshot;
/// the even ones protected.
async fn create_containers(containerd: &PrivateContainerd, count: usize, chain_id: &str) {
    // About the size of a real OCI spec.
    let spec = serde_json::json!({
        "ociVersion": "1.0.2",
        "process": { "args": ["sh"], "env": ["PATH=/bin"], "cwd": "/" },
        "annotations": { "padding": "x".repeat(4000) },
    })
    .to_string()
    .into_bytes();
    let channel = containerd.channel();
    LeasesClient::new(channel.clone())
        .create(namespaced(CreateRequest {
            id: FIXTURE_LEASE.to_owned(),
            labels: std::collections::HashMap::new(),
        }))
        .await
        .expect("create the fixture's lease");
    stream::iter(0..count)
        .map(|i| {
            let (channel, spec) = (channel.clone(), spec.clone());
            async move {
                let id = format!("c{i:06}");
                SnapshotsClient::new(channel.clone())
                    .prepare(leased(PrepareSnapshotRequest {
                        snapshotter: "overlayfs".to_owned(),
                        key: id.clone(),
                        parent: chain_id.to_owned(),
                        labels: std::collections::HashMap::default(),
                    }))
                    .await
                    .expect("prepare a snapshot");
                let container = Container {
                    id: id.clone(),
                    image: BASE.to_owned(),
                    runtime: Some(Runtime {
                        name: "io.containerd.runc.v2".to_owned(),
                        options: None,
                    }),
                    spec: Some(prost_types::Any {
                        type_url: "types.containerd.io/opencontainers/runtime-spec/1/Spec"
                            .to_owned(),
                        value: spec,
                    }),
                    snapshotter: "overlayfs".to_owned(),
                    snapshot_key: id,
                    labels: if i % 2 == 0 {
                        [(PROTECTED.0.to_owned(), PROTECTED.1.to_owned())].into()
                    } else {
                        std::collections::HashMap::new()
                    },
                    ..Container::default()
                };
                ContainersClient::new(channel)
                    .create(leased(CreateContainerRequest {
                        container: Some(container),
                    }))
                    .await
                    .expect("create a container");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    // Each snapshot now has its container.
    LeasesClient::new(channel)
        .delete(namespaced(DeleteRequest {
            id: FIXTURE_LEASE.to_owned(),
            sync: false,
        }))
        .await
        .expect("delete the fixture's lease");
}

struct Figures {
    objects: usize,
    candidates: usize,
    deleted: usize,
    /// `safeprune plan`, whole process.
    plan_seconds: f64,
    /// `safeprune run`, whole process.
    seconds: f64,
    calls: BTreeMap<String, u64>,
}

impl Figures {
    fn total_calls(&self) -> u64 {
        self.calls.values().sum()
    }

    /// The run's time beyond what its inventory takes (a `plan`), per
    /// removal.
    fn ms_per_removal(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)]
        let deleted = self.deleted as f64;
        (self.seconds - self.plan_seconds).max(0.0) * 1000.0 / deleted
    }

    /// The inventory's measurements of stopped containers' writable
    /// snapshots, one per container (kept ones too).
    fn size_calls(&self) -> u64 {
        self.calls
            .iter()
            .filter(|(method, _)| method.ends_with("Snapshots/Usage"))
            .map(|(_, n)| n)
            .sum()
    }

    /// Calls whose answer holds every object of a kind.
    fn list_calls(&self) -> u64 {
        self.calls
            .iter()
            .filter(|(method, _)| {
                let name = method.rsplit('/').next().unwrap_or("");
                name.starts_with("List")
            })
            .map(|(_, n)| n)
            .sum()
    }
}

async fn one_run(objects: usize, bin: &PathBuf) -> Figures {
    let containerd = PrivateContainerd::start().await;
    let images = objects / 5;
    let stopped = objects - images;
    let names: Vec<String> = (0..images)
        .map(|i| format!("bench.local/app-{i}:1"))
        .chain([BASE.to_owned()])
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    // Distinct images over one layer: its digest is their chain id.
    let chain_id = containerd.import_images(NAMESPACE, &names, &["sh"])[0]
        .layer_digest
        .clone();
    create_containers(&containerd, stopped, &chain_id).await;
    containerd.import_busybox_image(CRI_NAMESPACE, BUSYBOX);
    let web = Pod::new("web", "default");
    let sandbox = containerd.run_pod_sandbox(&web).await;
    containerd
        .run_pod_container_to_exit(&web, &sandbox, "istio-init", BUSYBOX, &[])
        .await;
    for i in 0..STOPPED_PODS {
        let pod = Pod::new(&format!("job-{i}"), "jobs");
        containerd.run_stopped_pod(&pod, "job", BUSYBOX).await;
    }
    let cli = Cli::new(
        &PolicyRuntime::Containerd(&containerd.endpoint(), &[CRI_NAMESPACE, NAMESPACE]),
        "safety: { max_deletions: 100000 }\n\
         containers: { min_age: \"0\" }\n\
         images:\n  min_age: \"0\"\n  keep: [\"registry.k8s.io/pause:*\", \"docker.io/library/busybox:*\"]\n",
    );
    // Whole process, with its time.
    let safeprune = |command: &str| {
        let begun = Instant::now();
        let out = Command::new(bin)
            .arg("--config")
            .arg(cli.policy_path())
            .args([command, "--output", "json"])
            .env_remove("RUST_LOG")
            .output()
            .expect("run safeprune");
        (out, begun.elapsed().as_secs_f64())
    };
    // The inventory alone, to tell it from the removals.
    let (planned, plan_seconds) = safeprune("plan");
    assert!(
        planned.status.success(),
        "{}",
        String::from_utf8_lossy(&planned.stderr)
    );
    let before = containerd.grpc_calls();
    let (out, seconds) = safeprune("run");
    let after = containerd.grpc_calls();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("a JSON report");
    let outcomes = report["outcomes"].as_array().expect("outcomes");
    let deleted = outcomes.iter().filter(|o| o["result"] == "deleted").count();
    // Every unprotected container and every unused image, and nothing
    // else (the protected containers keep the base image).
    let expected = stopped / 2 + images + STOPPED_PODS;
    let odd: Vec<&serde_json::Value> = outcomes
        .iter()
        .filter(|o| {
            let id = o["id"].as_str().unwrap_or("");
            !id.starts_with("bench/c") && !id.starts_with("bench/sha256:")
        })
        .collect();
    assert_eq!(deleted, expected, "{odd:#?}");
    // The removed containers' snapshots went with the garbage collection
    // that settled their removals: only the kept ones' are left.
    let snapshots = containerd.ctr_ok(NAMESPACE, &["snapshots", "ls"]);
    let container_snapshots = snapshots
        .lines()
        .filter(|line| line.starts_with('c'))
        .count();
    assert_eq!(container_snapshots, stopped - stopped / 2, "{snapshots}");
    let calls = after
        .iter()
        .map(|(method, n)| (method.clone(), n - before.get(method).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect();
    Figures {
        objects,
        candidates: outcomes.len(),
        deleted,
        plan_seconds,
        seconds,
        calls,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let sizes: Vec<usize> = std::env::var("CONTAINERD_SIZES")
        .unwrap_or_else(|_| "1000,5000".to_owned())
        .split(',')
        .map(|s| s.trim().parse().expect("CONTAINERD_SIZES: numbers"))
        .collect();
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let bin = std::env::var_os("SAFEPRUNE_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_safeprune")),
        PathBuf::from,
    );
    let tokio = tokio::runtime::Runtime::new().expect("a tokio runtime");
    println!("safeprune: {}", bin.display());
    println!(
        "objects  candidates  deleted  calls  lists  sizes  calls/candidate  beyond lists and sizes  plan (s)  run (s)  ms/removal"
    );
    for objects in sizes {
        let mut all = Vec::new();
        for _ in 0..runs {
            let f = tokio.block_on(one_run(objects, &bin));
            #[allow(clippy::cast_precision_loss)]
            let per_candidate = f.total_calls() as f64 / f.candidates as f64;
            #[allow(clippy::cast_precision_loss)]
            let beyond =
                (f.total_calls() - f.list_calls() - f.size_calls()) as f64 / f.candidates as f64;
            let per_removal = f.ms_per_removal();
            println!(
                "{:>7}  {:>10}  {:>7}  {:>5}  {:>5}  {:>5}  {per_candidate:>15.2}  {beyond:>22.2}  {:>8.2}  {:>7.2}  {per_removal:>10.2}",
                f.objects,
                f.candidates,
                f.deleted,
                f.total_calls(),
                f.list_calls(),
                f.size_calls(),
                f.plan_seconds,
                f.seconds,
            );
            all.push(f);
        }
        let seconds = median(all.iter().map(|f| f.seconds).collect());
        let plan_seconds = median(all.iter().map(|f| f.plan_seconds).collect());
        let per_removal = median(all.iter().map(Figures::ms_per_removal).collect());
        println!(
            "median at {objects} objects: plan {plan_seconds:.2} s, run {seconds:.2} s, \
             {per_removal:.2} ms per removal"
        );
        if let Some(last) = all.last() {
            println!("calls of the last run, by method:");
            let mut by_count: Vec<(&String, &u64)> = last.calls.iter().collect();
            by_count.sort_by(|a, b| b.1.cmp(a.1));
            for (method, n) in by_count {
                println!("  {n:>6}  {method}");
            }
        }
    }
}
