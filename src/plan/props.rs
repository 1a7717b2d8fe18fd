//! Property tests of the planner's invariants over random inventories.
//!
//! Ids come from small pools so that containers, sandboxes, images, volumes
//! and networks really refer to each other.

use std::collections::BTreeSet;

use chrono::Duration;
use proptest::prelude::*;

use super::tests::{exited, hours_ago, image, now};
use super::*;
use crate::inventory::{
    Container, ContainerState, Labels, Network, PodIdentity, PodSandbox, Volume,
};
use crate::policy::Age;

const STATES: [ContainerState; 8] = [
    ContainerState::Created,
    ContainerState::Running,
    ContainerState::Paused,
    ContainerState::Restarting,
    ContainerState::Removing,
    ContainerState::Exited,
    ContainerState::Dead,
    ContainerState::Unknown,
];

const NAMES: [&str; 4] = ["istio-init", "app", "setup", "POD"];

fn arb_container(i: usize) -> impl Strategy<Value = Container> {
    (
        0..STATES.len(),
        0i64..200,
        proptest::option::of(0usize..4),
        any::<bool>(),
        0usize..4,
        0usize..4,
        0usize..4,
        0usize..4,
        0usize..NAMES.len(),
        proptest::option::of((0usize..5, any::<bool>())),
    )
        .prop_map(
            move |(state, age, pod, is_sandbox, sb, img, vol, netw, name, mount)| {
                let mut c = exited(&format!("c{i}"), age);
                c.state = STATES[state];
                if c.state == ContainerState::Created {
                    c.finished = None;
                }
                c.image_id = format!("sha256:i{img}");
                c.image_ref = format!("img{img}:1");
                // An image volume, named by id or by a reference in
                // another spelling than the image's tag.
                c.image_mounts = mount
                    .map(|(m, by_id)| {
                        if by_id {
                            format!("sha256:i{m}")
                        } else {
                            format!("docker.io/library/img{}:{m}", m % 2)
                        }
                    })
                    .into_iter()
                    .collect();
                c.volumes = vec![format!("v{vol}")];
                c.networks = vec![format!("n{netw}")];
                c.labels
                    .insert("io.kubernetes.container.name".into(), NAMES[name].into());
                c.pod = pod.map(|p| PodIdentity {
                    sandbox_id: Some(format!("s{sb}")),
                    pod_uid: Some(format!("u{p}")),
                    pod_name: Some(format!("pod{p}")),
                    pod_namespace: Some("default".into()),
                    is_sandbox,
                });
                c
            },
        )
}

pub(crate) fn arb_inventory() -> impl Strategy<Value = Inventory> {
    let containers = (0usize..12).prop_flat_map(|n| (0..n).map(arb_container).collect::<Vec<_>>());
    let sandboxes = proptest::collection::vec((0usize..4, any::<bool>()), 0..4).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (uid, ready))| PodSandbox {
                id: format!("s{i}"),
                pod_uid: Some(format!("u{uid}")),
                pod_name: None,
                pod_namespace: None,
                ready,
            })
            .collect::<Vec<_>>()
    });
    let images = proptest::collection::vec(
        (
            0i64..200,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            proptest::option::of(0usize..5),
        ),
        0..5,
    )
    .prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (age, tagged, pinned, pause, parent))| {
                let tag = if pause {
                    "registry.k8s.io/pause:3.9".to_owned()
                } else {
                    // Two repositories, so that keep_recent ranks images.
                    format!("img{}:{i}", i % 2)
                };
                let mut img = image(&format!("sha256:i{i}"), &[], age);
                if tagged {
                    img.tags = vec![tag];
                }
                img.pinned = pinned;
                // Built on another image (loops and missing parents too:
                // engine data gone wrong must not make a plan unsafe).
                img.parent = parent.map(|p| format!("sha256:i{p}"));
                img
            })
            .collect::<Vec<_>>()
    });
    let volumes = proptest::collection::vec((0i64..400, any::<bool>()), 0..5).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, (age, anonymous))| Volume {
                name: format!("v{i}"),
                anonymous,
                labels: Labels::new(),
                created: Some(hours_ago(age)),
                size: Some(10),
            })
            .collect::<Vec<_>>()
    });
    let networks = proptest::collection::vec(0i64..200, 0..5).prop_map(|v| {
        v.into_iter()
            .enumerate()
            .map(|(i, age)| Network {
                id: format!("n{i}"),
                name: if i == 0 {
                    "bridge".into()
                } else {
                    format!("net{i}")
                },
                created: Some(hours_ago(age)),
                labels: Labels::new(),
            })
            .collect::<Vec<_>>()
    });
    (containers, sandboxes, images, volumes, networks).prop_map(
        |(containers, sandboxes, images, volumes, networks)| Inventory {
            runtime: "docker".into(),
            containers,
            images,
            volumes,
            networks,
            build_cache: vec![],
            sandboxes,
            image_fs: None,
            api_version: None,
            image_store: crate::inventory::ImageStore::Graph,
            cri_runtime: String::new(),
        },
    )
}

/// Parsed once: YAML parsing and glob compilation would dominate the cases.
fn builtin_policy() -> Policy {
    static BUILTIN: std::sync::LazyLock<Policy> = std::sync::LazyLock::new(Policy::builtin);
    BUILTIN.clone()
}

fn arb_policy() -> impl Strategy<Value = Policy> {
    (any::<bool>(), any::<bool>(), 0i64..100).prop_map(|(volumes, dangling, min_age)| {
        let mut p = builtin_policy();
        p.volumes.enabled = volumes;
        p.volumes.anonymous_only = !volumes;
        if dangling {
            p.images.mode = crate::policy::ImageMode::Dangling;
        }
        p.containers.min_age = Age::hours(min_age);
        p.images.min_age = Age::hours(min_age);
        p
    })
}

fn ids(inv: &Inventory) -> BTreeSet<(Kind, String)> {
    let mut all = BTreeSet::new();
    all.extend(
        inv.containers
            .iter()
            .map(|c| (Kind::Container, c.id.clone())),
    );
    all.extend(inv.images.iter().map(|c| (Kind::Image, c.id.clone())));
    all.extend(inv.volumes.iter().map(|c| (Kind::Volume, c.name.clone())));
    all.extend(inv.networks.iter().map(|c| (Kind::Network, c.id.clone())));
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn every_object_is_decided_exactly_once(inv in arb_inventory(), policy in arb_policy()) {
        let p = plan(&inv, &policy, now());
        let decided: Vec<(Kind, String)> =
            p.decisions.iter().map(|d| (d.kind, d.id.clone())).collect();
        let unique: BTreeSet<_> = decided.iter().cloned().collect();
        prop_assert_eq!(decided.len(), unique.len());
        prop_assert_eq!(unique, ids(&inv));
        for d in &p.decisions {
            prop_assert_eq!(d.decision, d.rule.action());
        }
    }

    #[test]
    fn nothing_live_protected_or_in_a_live_pod_is_deleted(inv in arb_inventory(), policy in arb_policy()) {
        let p = plan(&inv, &policy, now());
        let ready: Vec<&PodSandbox> = inv.sandboxes.iter().filter(|s| s.ready).collect();
        for c in &inv.containers {
            let d = p.decisions.iter().find(|d| d.kind == Kind::Container && d.id == c.id).unwrap();
            if d.decision == Action::Keep {
                continue;
            }
            prop_assert!(!c.state.is_live(), "live container {} deleted", c.id);
            prop_assert!(c.labels.get("io.kubernetes.container.name").map(String::as_str) != Some("istio-init"),
                "istio-init {} deleted", c.id);
            if let Some(pod) = &c.pod {
                prop_assert!(!pod.is_sandbox, "sandbox {} deleted", c.id);
                let live = ready.iter().any(|s| Some(&s.id) == pod.sandbox_id.as_ref() || s.pod_uid == pod.pod_uid);
                prop_assert!(!live, "container {} of a live pod deleted", c.id);
            }
            let age = now() - c.finished.unwrap_or(c.created);
            prop_assert!(age >= policy.containers.min_age.as_duration());
        }
    }

    #[test]
    fn nothing_a_kept_container_uses_is_deleted(inv in arb_inventory(), policy in arb_policy()) {
        let p = plan(&inv, &policy, now());
        let kept = super::rules::kept_ids(&p);
        let deleted: BTreeSet<(Kind, &str)> =
            p.deletions().map(|d| (d.kind, d.id.as_str())).collect();
        for c in inv.containers.iter().filter(|c| kept.contains(&c.id)) {
            prop_assert!(!deleted.contains(&(Kind::Image, c.image_id.as_str())));
            for v in &c.volumes {
                prop_assert!(!deleted.contains(&(Kind::Volume, v.as_str())));
            }
            for n in &c.networks {
                prop_assert!(!deleted.contains(&(Kind::Network, n.as_str())));
            }
        }
        for i in &inv.images {
            if i.pinned || i.tags.iter().any(|t| t.starts_with("registry.k8s.io/pause:")) {
                prop_assert!(!deleted.contains(&(Kind::Image, i.id.as_str())));
            }
        }
        // Every use the one definition knows, pair by pair: no kept
        // container makes or mounts a deleted image, and a deleted image's
        // children are deleted in an earlier wave.
        let wave: std::collections::HashMap<&str, u32> = p
            .deletions()
            .filter(|d| d.kind == Kind::Image)
            .map(|d| (d.id.as_str(), d.wave))
            .collect();
        for i in inv.images.iter().filter(|i| wave.contains_key(i.id.as_str())) {
            for c in inv.containers.iter().filter(|c| kept.contains(&c.id)) {
                prop_assert!(
                    crate::inventory::uses::container_uses_image(c, i).is_none(),
                    "{} deleted while kept {} uses it", i.id, c.id
                );
            }
            for child in inv.images.iter().filter(|c| c.parent.as_deref() == Some(i.id.as_str()) && c.id != i.id) {
                let child_wave = wave.get(child.id.as_str());
                prop_assert!(
                    child_wave.is_some_and(|w| *w < wave[i.id.as_str()]),
                    "{} deleted in wave {} but its child {} {:?}", i.id, wave[i.id.as_str()], child.id, child_wave
                );
            }
        }
    }

    #[test]
    fn the_plan_is_deterministic_and_order_free(inv in arb_inventory(), policy in arb_policy(), seed in any::<u64>()) {
        let first = plan(&inv, &policy, now());
        prop_assert_eq!(&first, &plan(&inv, &policy, now()));
        let mut shuffled = inv.clone();
        // A cheap deterministic shuffle: rotate each list by the seed.
        let rot = |n: usize| if n == 0 { 0 } else { usize::try_from(seed % n as u64).unwrap() };
        let n = shuffled.containers.len();
        shuffled.containers.rotate_left(rot(n));
        let n = shuffled.images.len();
        shuffled.images.rotate_left(rot(n));
        shuffled.sandboxes.reverse();
        prop_assert_eq!(&first, &plan(&shuffled, &policy, now()));
        // Time only ever moves objects from keep to delete, never protections.
        let later = plan(&inv, &policy, now() + Duration::days(365));
        for d in first.deletions() {
            let again = later.decisions.iter().find(|x| x.kind == d.kind && x.id == d.id).unwrap();
            prop_assert_eq!(again.decision, Action::Delete);
        }
    }

    #[test]
    fn disk_and_keep_recent_never_delete_what_the_plain_policy_keeps(
        inv in arb_inventory(),
        policy in arb_policy(),
        used in 0u64..=1000,
        high in 1u8..=100,
        gap in 1u8..=100,
        keep_recent in 0u32..4,
        seed in any::<u64>(),
    ) {
        let plain = plan(&inv, &policy, now());
        let mut inv = inv;
        for (n, i) in inv.images.iter_mut().enumerate() {
            i.unique_size = Some(40 * (n as u64 + 1));
        }
        inv.image_fs = Some(crate::inventory::FsUsage {
            path: "/var/lib/docker".into(),
            used_bytes: used,
            available_bytes: 1000 - used,
            stand_in: None,
        });
        let mut by_disk = policy.clone();
        by_disk.images.keep_recent = keep_recent;
        by_disk.images.disk = Some(crate::policy::DiskWatermarks::percents(high, high.saturating_sub(gap)));
        let p = plan(&inv, &by_disk, now());
        for (d, before) in p.decisions.iter().zip(&plain.decisions) {
            prop_assert_eq!((d.kind, &d.id), (before.kind, &before.id));
            if d.kind == Kind::Image {
                prop_assert!(d.decision == Action::Keep || before.decision == Action::Delete,
                    "{} deleted by disk rules, kept by {:?}", d.id, before.rule);
            } else {
                prop_assert_eq!(d, before);
            }
        }
        // The rules over all images do not depend on listing order.
        let mut shuffled = inv.clone();
        let n = shuffled.images.len();
        if n > 0 {
            shuffled.images.rotate_left(usize::try_from(seed % n as u64).unwrap());
        }
        prop_assert_eq!(&p, &plan(&shuffled, &by_disk, now()));
    }
}
