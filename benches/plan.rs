//! Planner benchmark: how long `plan` takes on nodes of growing size, and
//! whether it grows linearly (the ratio column should stay near 1.0).
//!
//! Run: `cargo bench --bench plan`. Prints figures; asserts nothing, because
//! these machines are noisy. Each size is timed warm (the same inventory
//! planned five times over, so a small node runs from the caches) and cold
//! (the caches emptied before each plan, as when a cycle plans an inventory
//! it has just read).

use std::hint::black_box;
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use safeprune::inventory::{
    Container, ContainerState, Image, Inventory, Labels, Network, PodIdentity, PodSandbox, Volume,
};
use safeprune::plan::plan;
use safeprune::policy::Policy;

/// A node of `containers` containers in pods of four (a sandbox, an exited
/// istio-init, an app and a sidecar), with a fifth as many images and a
/// fifth as many volumes as containers, and a network per hundred
/// containers: issue 10's shape, 100,000 containers with 20,000 images and
/// 20,000 volumes at the large end.
fn node(containers: usize) -> Inventory {
    let pods = containers / 4;
    let images = containers / 5;
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
        for (k, name) in ["POD", "istio-init", "app", "sidecar"].iter().enumerate() {
            let mut labels = Labels::new();
            labels.insert("io.kubernetes.container.name".into(), (*name).into());
            labels.insert("io.kubernetes.pod.uid".into(), uid.clone());
            inv.containers.push(Container {
                image_mounts: Vec::new(),
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
                image_id: format!("sha256:{:064x}", (p * 4 + k) % images),
                image_ref: format!("registry.example.com/app{}:1", (p * 4 + k) % images),
                created: old,
                finished: Some(old),
                volumes: if (p * 4 + k) % 5 == 0 {
                    vec![format!("vol-{}", (p * 4 + k) / 5)]
                } else {
                    Vec::new()
                },
                networks: vec![format!("net-{}", p / 25)],
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
    }
    for v in 0..images {
        inv.volumes.push(Volume {
            name: format!("vol-{v}"),
            anonymous: true,
            labels: Labels::new(),
            created: Some(old),
            size: Some(1 << 20),
        });
    }
    for n in 0..containers.div_ceil(100) {
        inv.networks.push(Network {
            id: format!("net-{n}"),
            name: format!("net-{n}"),
            created: Some(old),
            labels: Labels::new(),
        });
    }
    for i in 0..images {
        inv.images.push(Image {
            parent: None,
            id: format!("sha256:{i:064x}"),
            tags: vec![format!("registry.example.com/app{i}:1")],
            digests: vec![format!("registry.example.com/app{i}@sha256:{i:064x}")],
            created: Some(old),
            last_tagged: None,
            size: Some(100 << 20),
            pinned: false,
            cri_pinned: false,
            unique_size: None,
            recorded_use: None,
            first_seen: None,
        });
    }
    // As the adapters give them: sorted by id (a volume's is its name).
    inv.containers.sort_by(|a, b| a.id.cmp(&b.id));
    inv.volumes.sort_by(|a, b| a.name.cmp(&b.name));
    inv.networks.sort_by(|a, b| a.id.cmp(&b.id));
    inv
}

/// More than this machine's caches hold (its L3 is 32 MiB).
const EVICT_BYTES: usize = 128 << 20;

/// Reads and writes `buffer` through, so that the caches hold none of the
/// inventory: a plan runs once per cycle, on an inventory just read.
fn evict_caches(buffer: &mut [u8]) {
    for (i, b) in buffer.iter_mut().enumerate().step_by(64) {
        #[expect(clippy::cast_possible_truncation, reason = "any byte will do")]
        {
            *b = b.wrapping_add(i as u8);
        }
    }
    black_box(buffer);
}

/// The best of five plans, each from cold caches when `evict` is given.
fn time_plan(inv: &Inventory, policy: &Policy, mut evict: Option<&mut [u8]>) -> Duration {
    let now = Utc.with_ymd_and_hms(2026, 11, 22, 5, 0, 0).unwrap();
    let mut best = Duration::MAX;
    for _ in 0..5 {
        if let Some(buffer) = evict.as_deref_mut() {
            evict_caches(buffer);
        }
        let start = Instant::now();
        let planned = black_box(plan(black_box(inv), policy, now));
        best = best.min(start.elapsed());
        // Freeing the plan is the caller's, after the report: not timed.
        drop(planned);
    }
    best
}

fn main() {
    let policy = Policy::builtin();
    println!(
        "{:>10} {:>10} {:>12} {:>10} {:>8} {:>12} {:>10} {:>8}",
        "containers",
        "objects",
        "warm (ms)",
        "ns/object",
        "ratio",
        "cold (ms)",
        "ns/object",
        "ratio"
    );
    let mut base: Option<(f64, f64)> = None;
    let mut buffer = vec![0_u8; EVICT_BYTES];
    // PLAN_SIZES=100000 (comma-separated) for other sizes, e.g. to profile.
    let sizes: Vec<usize> = std::env::var("PLAN_SIZES").map_or_else(
        |_| vec![1_000, 10_000, 100_000],
        |v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
    );
    for containers in sizes {
        let inv = node(containers);
        let objects =
            inv.containers.len() + inv.images.len() + inv.volumes.len() + inv.networks.len();
        // Warm: the same inventory planned again and again, as in the
        // figures before this column. Cold: the caches emptied first.
        let warm = time_plan(&inv, &policy, None);
        let cold = time_plan(&inv, &policy, Some(&mut buffer));
        #[expect(clippy::cast_precision_loss, reason = "a printed figure")]
        let per_object = |took: Duration| took.as_nanos() as f64 / objects as f64;
        let (warm_base, cold_base) = *base.get_or_insert((per_object(warm), per_object(cold)));
        println!(
            "{containers:>10} {objects:>10} {:>12.1} {:>10.0} {:>8.2} {:>12.1} {:>10.0} {:>8.2}",
            warm.as_secs_f64() * 1000.0,
            per_object(warm),
            per_object(warm) / warm_base,
            cold.as_secs_f64() * 1000.0,
            per_object(cold),
            per_object(cold) / cold_base,
        );
    }
}
