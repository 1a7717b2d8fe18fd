//! Planner benchmark: how long `plan` takes on nodes of growing size, and
//! whether it grows linearly (the ratio column should stay near 1.0).
//!
//! Run: `cargo bench --bench plan`. Prints figures; asserts nothing, because
//! these machines are noisy.

use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use safeprune::inventory::{
    Container, ContainerState, Image, Inventory, Labels, Network, PodIdentity, PodSandbox, Volume,
};
use safeprune::plan::plan;
use safeprune::policy::Policy;

/// A node with `pods` pods (a sandbox and three containers each, one of them
/// an exited istio-init), one image per ten pods, a volume and a network per pod.
fn node(pods: usize) -> Inventory {
    let now = Utc.with_ymd_and_hms(2026, 11, 22, 5, 0, 0).unwrap();
    let old = now - chrono::Duration::days(3);
    let mut inv = Inventory {
        runtime: "bench".into(),
        ..Inventory::default()
    };
    for p in 0..pods {
        let uid = format!("uid-{p}");
        let sandbox_id = format!("{p:064x}");
        inv.sandboxes.push(PodSandbox {
            id: sandbox_id.clone(),
            pod_uid: Some(uid.clone()),
            pod_name: Some(format!("pod{p}")),
            pod_namespace: Some("default".into()),
            ready: p % 2 == 0,
        });
        for (k, name) in ["POD", "istio-init", "app"].iter().enumerate() {
            let mut labels = Labels::new();
            labels.insert("io.kubernetes.container.name".into(), (*name).into());
            labels.insert("io.kubernetes.pod.uid".into(), uid.clone());
            inv.containers.push(Container {
                id: if k == 0 {
                    sandbox_id.clone()
                } else {
                    format!("{:064x}", p * 10 + k + (1 << 40))
                },
                names: vec![format!("k8s_{name}_pod{p}_default_{uid}_0")],
                state: if k == 2 && p % 3 == 0 {
                    ContainerState::Running
                } else {
                    ContainerState::Exited
                },
                labels,
                image_id: format!("sha256:{:064x}", p / 10),
                image_ref: format!("registry.example.com/app{}:1", p / 10),
                created: old,
                finished: Some(old),
                volumes: vec![format!("vol-{p}")],
                networks: vec![format!("net-{p}")],
                size: Some(4096),
                pod: Some(PodIdentity {
                    sandbox_id: (k > 0).then(|| sandbox_id.clone()),
                    pod_uid: Some(uid.clone()),
                    pod_name: Some(format!("pod{p}")),
                    pod_namespace: Some("default".into()),
                    is_sandbox: k == 0,
                }),
            });
        }
        inv.volumes.push(Volume {
            name: format!("vol-{p}"),
            anonymous: true,
            labels: Labels::new(),
            created: Some(old),
            size: Some(1 << 20),
        });
        inv.networks.push(Network {
            id: format!("net-{p}"),
            name: format!("net-{p}"),
            created: Some(old),
            labels: Labels::new(),
        });
    }
    for i in 0..pods.div_ceil(10) {
        inv.images.push(Image {
            id: format!("sha256:{i:064x}"),
            tags: vec![format!("registry.example.com/app{i}:1")],
            digests: vec![format!("registry.example.com/app{i}@sha256:{i:064x}")],
            created: Some(old),
            last_tagged: None,
            size: Some(100 << 20),
            pinned: false,
        });
    }
    inv
}

fn time_plan(inv: &Inventory, policy: &Policy) -> Duration {
    let now = Utc.with_ymd_and_hms(2026, 11, 22, 5, 0, 0).unwrap();
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        black_box(plan(black_box(inv), policy, now));
        best = best.min(start.elapsed());
    }
    best
}

fn main() {
    let policy = Policy::builtin();
    println!(
        "{:>8} {:>10} {:>12} {:>14} {:>8}",
        "pods", "objects", "plan (ms)", "ns/object", "ratio"
    );
    let mut base: Option<f64> = None;
    for pods in [1_000, 10_000, 50_000] {
        let inv = node(pods);
        let objects =
            inv.containers.len() + inv.images.len() + inv.volumes.len() + inv.networks.len();
        let took = time_plan(&inv, &policy);
        #[expect(clippy::cast_precision_loss, reason = "a printed figure")]
        let per_object = took.as_nanos() as f64 / objects as f64;
        let ratio = per_object / *base.get_or_insert(per_object);
        println!(
            "{pods:>8} {objects:>10} {:>12.1} {per_object:>14.0} {ratio:>8.2}",
            took.as_secs_f64() * 1000.0
        );
    }
}
