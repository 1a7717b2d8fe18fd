//! Planner benchmark: how long `plan` takes on nodes of growing size, and
//! whether its cost per object stays flat (the ratio columns, against the
//! smallest size, should stay near 1.0; the target is at most 1.3 from
//! 1,000 to 100,000 containers, and the 100,000-container node, with 20,000
//! images and 20,000 volumes, planned in under 200 ms).
//!
//! Run: `cargo bench --bench plan` (`PLAN_SIZES=1000,100000` for other
//! sizes, `PLAN_REPS=3` for that many plans of each kind per size). Prints
//! figures and the targets met or not; asserts nothing.
//!
//! Each size is timed two ways:
//!
//! - **warm**: the same inventory planned again and again, so that what a
//!   small node's plan reads stays in the caches;
//! - **cold**: a 128 MiB buffer (four times this machine's 32 MiB L3)
//!   written through before each plan, so that no cache holds the
//!   inventory, as when a cycle plans what it has just read.
//!
//! Beside them, `read ns/ob`: a cold read of the node alone (each string
//! touched once, no index, no decision), the floor under a cold plan's
//! cost per object; its ratio says how much of the growth is the node's
//! own memory.
//!
//! A figure is the median of many plans, each timed alone (the plan only:
//! building the inventory and freeing the plan are not timed): hundreds
//! for the smallest node, whose plan takes under a millisecond, at least
//! nine for the largest. Time is the thread's CPU time, so that the other
//! processes of a shared machine, which take the core away for whole
//! milliseconds, do not land in one size's figure and not another's; the
//! wall-clock median is printed beside it for the large node.

use std::hint::black_box;
use std::time::{Duration, Instant};

use nix::time::{ClockId, clock_gettime};

use chrono::{TimeZone, Utc};
use safeprune::inventory::{
    Container, ContainerState, Image, Inventory, Labels, Network, PodIdentity, PodSandbox, Volume,
};
use safeprune::plan::plan;
use safeprune::policy::Policy;

/// A node of `containers` containers in pods of four (a sandbox, an exited
/// istio-init, an app and a sidecar), with a fifth as many images and a
/// fifth as many volumes as containers, and a network per hundred
/// containers: the targets' shape, 100,000 containers with 20,000 images and
/// 20,000 volumes at the large end.
fn node(containers: usize) -> Inventory {
    let pods = containers / 4;
    let images = containers / 5;
    let old = now() - chrono::Duration::days(3);
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
                layer: None,
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
            provenance: safeprune::inventory::provenance::Provenance::default(),
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

/// How many plans to time at a size of `objects`: enough that a small
/// node's figure is a median of hundreds, not one run's noise.
fn repetitions(objects: usize, budget: usize, least: usize, most: usize) -> usize {
    (budget / objects.max(1)).clamp(least, most)
}

/// The medians of `reps` plans, in CPU time and in wall time, each plan
/// from cold caches when `evict` is given.
fn time_plan(
    inv: &Inventory,
    policy: &Policy,
    reps: usize,
    mut evict: Option<&mut [u8]>,
) -> (Duration, Duration) {
    let mut cpu = Vec::with_capacity(reps);
    let mut wall = Vec::with_capacity(reps);
    for _ in 0..reps {
        if let Some(buffer) = evict.as_deref_mut() {
            evict_caches(buffer);
        }
        let (cpu_start, start) = (cpu_time(), Instant::now());
        let planned = black_box(plan(black_box(inv), policy, now()));
        wall.push(start.elapsed());
        cpu.push(cpu_time().saturating_sub(cpu_start));
        // Freeing the plan is the caller's, after the report: not timed.
        drop(planned);
    }
    (median(cpu), median(wall))
}

/// Touches every string of the node once (first and last byte, as a
/// compare or a hash does), in inventory order: what any plan must read,
/// with no index and no decision. Its cost per object, cold, is a floor
/// under the planner's: how much of the growth from 1k to 100k is the
/// node's own memory outgrowing the caches and the TLB.
fn read_node(inv: &Inventory) -> u64 {
    let touch = |s: &str| {
        let b = s.as_bytes();
        u64::from(b.first().copied().unwrap_or(0)) + u64::from(b.last().copied().unwrap_or(0))
    };
    let mut sum = 0_u64;
    for c in &inv.containers {
        sum += touch(&c.id) + touch(&c.image_id) + touch(&c.image_ref);
        sum += c
            .names
            .iter()
            .chain(&c.volumes)
            .chain(&c.networks)
            .map(|s| touch(s))
            .sum::<u64>();
        sum += c
            .labels
            .iter()
            .map(|(k, v)| touch(k) + touch(v))
            .sum::<u64>();
        if let Some(p) = &c.pod {
            sum += [&p.sandbox_id, &p.pod_uid, &p.pod_name, &p.pod_namespace]
                .into_iter()
                .flatten()
                .map(|s| touch(s))
                .sum::<u64>();
        }
    }
    for i in &inv.images {
        sum += touch(&i.id)
            + i.tags
                .iter()
                .chain(&i.digests)
                .map(|s| touch(s))
                .sum::<u64>();
    }
    sum += inv.volumes.iter().map(|v| touch(&v.name)).sum::<u64>();
    sum += inv
        .networks
        .iter()
        .map(|n| touch(&n.id) + touch(&n.name))
        .sum::<u64>();
    sum += inv.sandboxes.iter().map(|s| touch(&s.id)).sum::<u64>();
    sum
}

/// The median CPU time of `reps` cold reads of the node ([`read_node`]).
fn time_read(inv: &Inventory, reps: usize, buffer: &mut [u8]) -> Duration {
    let mut cpu = Vec::with_capacity(reps);
    for _ in 0..reps {
        evict_caches(buffer);
        let start = cpu_time();
        black_box(read_node(black_box(inv)));
        cpu.push(cpu_time().saturating_sub(start));
    }
    median(cpu)
}

/// The CPU time this thread has used.
fn cpu_time() -> Duration {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
        .expect("Linux has a CPU clock per thread")
        .into()
}

fn median(mut took: Vec<Duration>) -> Duration {
    took.sort_unstable();
    took[took.len() / 2]
}

/// The moment every plan is made at: the bench's objects are three days old.
fn now() -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 5, 0, 0).unwrap()
}

/// The targets: the large node planned within this...
const TARGET: Duration = Duration::from_millis(200);
/// ...and the cost per object at most this many times the 1k node's.
const TARGET_RATIO: f64 = 1.3;

/// One size's figures.
struct Row {
    containers: usize,
    images: usize,
    volumes: usize,
    objects: usize,
    /// Medians: (CPU, wall), warm then cold.
    warm: (Duration, Duration),
    cold: (Duration, Duration),
    /// Median CPU time of a cold read of the node alone.
    read: Duration,
}

impl Row {
    #[expect(clippy::cast_precision_loss, reason = "a printed figure")]
    fn per_object(&self, took: Duration) -> f64 {
        took.as_nanos() as f64 / self.objects as f64
    }
}

fn ms(took: Duration) -> f64 {
    took.as_secs_f64() * 1000.0
}

fn main() {
    let policy = Policy::builtin();
    println!(
        "{:>10} {:>8} {:>6} {:>9} {:>9} {:>6} {:>6} {:>9} {:>9} {:>6} {:>10} {:>6}",
        "containers",
        "objects",
        "warm n",
        "warm ms",
        "ns/object",
        "ratio",
        "cold n",
        "cold ms",
        "ns/object",
        "ratio",
        "read ns/ob",
        "ratio"
    );
    let mut buffer = vec![0_u8; EVICT_BYTES];
    let sizes: Vec<usize> = std::env::var("PLAN_SIZES").map_or_else(
        |_| vec![1_000, 10_000, 100_000],
        |v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect(),
    );
    // PLAN_REPS=3: that many plans of each kind at every size, e.g. under
    // valgrind, to count cache misses.
    let reps: Option<usize> = std::env::var("PLAN_REPS")
        .ok()
        .and_then(|n| n.parse().ok())
        .filter(|&n| n > 0);
    let mut rows: Vec<Row> = Vec::new();
    for containers in sizes {
        let inv = node(containers);
        let objects =
            inv.containers.len() + inv.images.len() + inv.volumes.len() + inv.networks.len();
        let (warm_reps, cold_reps) = reps.map_or_else(
            || {
                (
                    repetitions(objects, 2_000_000, 9, 501),
                    repetitions(objects, 300_000, 9, 101),
                )
            },
            |n| (n, n),
        );
        // One plan first, untimed: the allocator grows its heap once, as in
        // any process that has planned before.
        drop(black_box(plan(&inv, &policy, now())));
        let row = Row {
            containers: inv.containers.len(),
            images: inv.images.len(),
            volumes: inv.volumes.len(),
            objects,
            warm: time_plan(&inv, &policy, warm_reps, None),
            cold: time_plan(&inv, &policy, cold_reps, Some(&mut buffer)),
            read: time_read(&inv, cold_reps, &mut buffer),
        };
        let base = rows.first().unwrap_or(&row);
        let ratio = |of: fn(&Row) -> Duration| row.per_object(of(&row)) / base.per_object(of(base));
        println!(
            "{containers:>10} {objects:>8} {warm_reps:>6} {:>9.2} {:>9.0} {:>6.2} \
             {cold_reps:>6} {:>9.2} {:>9.0} {:>6.2} {:>10.0} {:>6.2}",
            ms(row.warm.0),
            row.per_object(row.warm.0),
            ratio(|r| r.warm.0),
            ms(row.cold.0),
            row.per_object(row.cold.0),
            ratio(|r| r.cold.0),
            row.per_object(row.read),
            ratio(|r| r.read),
        );
        rows.push(row);
    }
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return;
    };
    let met = |ok: bool| if ok { "met" } else { "NOT met" };
    let ratio = |of: fn(&Row) -> Duration| last.per_object(of(last)) / first.per_object(of(first));
    let slowest = last.warm.0.max(last.cold.0);
    println!(
        "\n{} containers, {} images, {} volumes: CPU warm {:.1} ms, cold {:.1} ms \
         (wall {:.1} / {:.1} ms): under {} ms {}",
        last.containers,
        last.images,
        last.volumes,
        ms(last.warm.0),
        ms(last.cold.0),
        ms(last.warm.1),
        ms(last.cold.1),
        TARGET.as_millis(),
        met(slowest < TARGET),
    );
    let (warm, cold) = (ratio(|r| r.warm.0), ratio(|r| r.cold.0));
    println!(
        "per object, {} against {} containers: warm {warm:.2}x ({}), cold {cold:.2}x ({}), \
         within {TARGET_RATIO}x",
        last.containers,
        first.containers,
        met(warm <= TARGET_RATIO),
        met(cold <= TARGET_RATIO),
    );
}
