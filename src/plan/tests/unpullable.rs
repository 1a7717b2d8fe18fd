//! `images.keep_unpullable`: an image with a name no registry can give back
//! is kept on Kubernetes nodes (`auto`), everywhere (`true`) or nowhere
//! (`false`), by its own rule, after the protections and before the age and
//! retention rules, and again when re-checked.

use super::*;
use crate::inventory::provenance::{Provenance, PullSource};
use crate::inventory::{Image, Kind, PodIdentity};
use crate::policy::{KeepUnpullable, Policy};

const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

/// An image pulled from `127.0.0.1:5000/<repo>` (its repo digest), under
/// `tags`.
fn pulled(id: &str, repo: &str, tags: &[&str]) -> Image {
    let digest = format!("127.0.0.1:5000/{repo}@{DIGEST}");
    Image {
        provenance: Provenance::from_repo_digests(std::slice::from_ref(&digest)),
        digests: vec![digest],
        ..image(id, tags, 100)
    }
}

/// An image loaded, imported or built here: no pull recorded.
fn local(id: &str, tags: &[&str]) -> Image {
    Image {
        provenance: Provenance::from_repo_digests(&[]),
        ..image(id, tags, 100)
    }
}

fn node(runtime: &str, images: Vec<Image>) -> Inventory {
    Inventory {
        runtime: runtime.into(),
        images,
        ..Inventory::default()
    }
}

fn with(keep: KeepUnpullable) -> Policy {
    let mut p = Policy::builtin();
    p.images.keep_unpullable = keep;
    p
}

fn rule(inv: &Inventory, policy: &Policy, id: &str) -> Rule {
    find(&plan(inv, policy, now()), Kind::Image, id).rule
}

#[test]
fn on_a_kubernetes_node_what_cannot_come_back_is_kept_and_the_rest_pruned() {
    let unknown = Image {
        provenance: Provenance::Unknown {
            why: "through CRI alone".into(),
        },
        ..image("sha256:unknown", &["app:3"], 100)
    };
    let inv = node(
        "containerd",
        vec![
            pulled("sha256:pulled", "acc/bb", &["127.0.0.1:5000/acc/bb:1"]),
            local("sha256:loaded", &["app:1"]),
            unknown,
            local("sha256:dangling", &[]),
        ],
    );
    let p = plan(&inv, &Policy::builtin(), now());
    assert_eq!(
        p.kubernetes_node.as_deref(),
        Some("a CRI runtime (containerd)")
    );
    let loaded = find(&p, Kind::Image, "sha256:loaded");
    assert_eq!(
        (loaded.rule, loaded.decision),
        (Rule::Unpullable, Action::Keep)
    );
    assert_eq!(
        loaded.detail,
        "loaded or built on this node: no registry can give back app:1"
    );
    assert!(
        loaded
            .facts
            .contains(&("cannot come back", "app:1".to_owned())),
        "{:?}",
        loaded.facts
    );
    // Pulled, unknown (counted as can come back), and dangling: pruned as
    // before.
    for id in ["sha256:pulled", "sha256:unknown", "sha256:dangling"] {
        assert_eq!(find(&p, Kind::Image, id).rule, Rule::Eligible, "{id}");
    }
}

#[test]
fn a_name_given_here_to_a_pulled_image_cannot_come_back() {
    // Pulled as acc/bb, tagged app:2 here: a pod naming app:2 could not pull
    // it again.
    let retagged = pulled(
        "sha256:retagged",
        "acc/bb",
        &["127.0.0.1:5000/acc/bb:1", "app:2", "tools:2"],
    );
    let inv = node("cri", vec![retagged]);
    let d = find(&decide(&inv), Kind::Image, "sha256:retagged").clone();
    assert_eq!(d.rule, Rule::Unpullable);
    assert_eq!(
        d.detail,
        "loaded or built on this node: no registry can give back app:2 and 1 more name"
    );
}

#[test]
fn auto_keeps_on_kubernetes_nodes_only_and_true_or_false_decide_everywhere() {
    let plain = node("docker", vec![local("sha256:built", &["app:1"])]);
    assert_eq!(plain.kubernetes_node(), None);
    assert_eq!(
        rule(&plain, &Policy::builtin(), "sha256:built"),
        Rule::Eligible
    );
    assert_eq!(
        rule(&plain, &with(KeepUnpullable::Always), "sha256:built"),
        Rule::Unpullable
    );
    // kubelet's containers on Docker make it a Kubernetes node.
    let mut kubelets = plain.clone();
    let mut c = exited("k8s_app", 100);
    c.pod = Some(PodIdentity {
        pod_uid: Some("u".into()),
        pod_name: Some("web".into()),
        pod_namespace: Some("default".into()),
        ..PodIdentity::default()
    });
    kubelets.containers = vec![c];
    assert_eq!(
        kubelets.kubernetes_node().as_deref(),
        Some("kubelet's containers seen on docker")
    );
    assert_eq!(
        rule(&kubelets, &Policy::builtin(), "sha256:built"),
        Rule::Unpullable
    );
    let cri = node("containerd", vec![local("sha256:built", &["app:1"])]);
    assert_eq!(
        rule(&cri, &with(KeepUnpullable::Never), "sha256:built"),
        Rule::Eligible
    );
}

#[test]
fn protections_come_first_and_age_and_retention_after() {
    let mut pinned = local("sha256:pinned", &["my/sandbox:1"]);
    pinned.pinned = true;
    let mut young = local("sha256:young", &["young:1"]);
    young.created = Some(hours_ago(1));
    let inv = node(
        "containerd",
        vec![
            local("sha256:pause", &["registry.k8s.io/pause:3.9"]),
            pinned,
            young,
        ],
    );
    assert_eq!(
        rule(&inv, &Policy::builtin(), "sha256:pause"),
        Rule::KeepPattern
    );
    assert_eq!(
        rule(&inv, &Policy::builtin(), "sha256:pinned"),
        Rule::Pinned
    );
    assert_eq!(
        rule(&inv, &Policy::builtin(), "sha256:young"),
        Rule::Unpullable
    );
    let mut off = Policy::builtin();
    off.images.enabled = false;
    assert_eq!(rule(&inv, &off, "sha256:young"), Rule::Disabled);
    let mut dangling_only = Policy::builtin();
    dangling_only.images.mode = crate::policy::ImageMode::Dangling;
    assert_eq!(rule(&inv, &dangling_only, "sha256:young"), Rule::Tagged);
}

#[test]
fn an_image_kept_because_it_cannot_come_back_still_counts_for_keep_recent() {
    // keep_recent counts every image of a repository, kept or not: the
    // newest cannot come back and is kept by its own rule, and is the one
    // keep_recent: 1 keeps, so the pulled ones are pruned.
    let mut newest = local("sha256:newest", &["127.0.0.1:5000/acc/bb:3"]);
    newest.created = Some(hours_ago(30));
    let mut middle = pulled("sha256:middle", "acc/bb", &["127.0.0.1:5000/acc/bb:2"]);
    middle.created = Some(hours_ago(40));
    let oldest = pulled("sha256:oldest", "acc/bb", &["127.0.0.1:5000/acc/bb:1"]);
    let inv = node("containerd", vec![newest, middle, oldest]);
    let mut p = Policy::builtin();
    p.images.keep_recent = 1;
    assert_eq!(rule(&inv, &p, "sha256:newest"), Rule::Unpullable);
    assert_eq!(rule(&inv, &p, "sha256:middle"), Rule::Eligible);
    assert_eq!(rule(&inv, &p, "sha256:oldest"), Rule::Eligible);
    p.images.keep_recent = 2;
    assert_eq!(rule(&inv, &p, "sha256:middle"), Rule::KeepRecent);
}

#[test]
fn a_recheck_decides_by_the_plans_node_not_its_fresh_facts() {
    // Docker's re-check of an image lists only that image's users: no pod
    // may be among them. The plan saw kubelet's containers.
    let fresh = node("docker", vec![local("sha256:built", &["app:1"])]);
    let planned = Plan {
        kubernetes_node: Some("kubelet's containers seen on docker".into()),
        ..Plan::default()
    };
    let again = recheck(
        Kind::Image,
        &["sha256:built"],
        &fresh,
        (&Policy::builtin(), &planned),
        now(),
    );
    assert_eq!(again[0].as_ref().unwrap().rule, Rule::Unpullable);
    let plain = recheck(
        Kind::Image,
        &["sha256:built"],
        &fresh,
        (&Policy::builtin(), &Plan::default()),
        now(),
    );
    assert_eq!(plain[0].as_ref().unwrap().rule, Rule::Eligible);
}

#[test]
fn containerd_labels_keep_an_archive_imported_under_a_new_name() {
    // The pulled image's content, imported again under another name: the
    // blobs carry the pulled repository's label, which the new name is not.
    let labels = PullSource::from_label("containerd.io/distribution.source.127.0.0.1", "acc/bb");
    let provenance = Provenance::Pulled {
        from: labels,
        looked_at: "distribution-source labels".into(),
    };
    let pulled = Image {
        provenance: provenance.clone(),
        ..image("k8s.io/sha256:a", &["127.0.0.1:5000/acc/bb:1"], 100)
    };
    let imported = Image {
        provenance,
        ..image("k8s.io/sha256:b", &["127.0.0.1:5000/acc/renamed:1"], 100)
    };
    let inv = node("containerd", vec![pulled, imported]);
    assert_eq!(
        rule(&inv, &Policy::builtin(), "k8s.io/sha256:a"),
        Rule::Eligible
    );
    assert_eq!(
        rule(&inv, &Policy::builtin(), "k8s.io/sha256:b"),
        Rule::Unpullable
    );
}

#[test]
fn under_disk_pressure_they_stay_and_the_plan_says_what_they_keep_from_low_percent() {
    // 95% full; high 85, low 70. The pulled image frees 100 bytes (10
    // points): 85% is left, over low, with the loaded one's 200 bytes kept.
    let fs = crate::inventory::FsUsage {
        path: "/var/lib/containerd".into(),
        used_bytes: 950,
        available_bytes: 50,
        stand_in: None,
    };
    let sized = |mut i: Image, size| {
        i.size = Some(size);
        i
    };
    let mut inv = node(
        "containerd",
        vec![
            sized(
                pulled("sha256:pulled", "acc/bb", &["127.0.0.1:5000/acc/bb:1"]),
                100,
            ),
            sized(local("sha256:loaded", &["app:1"]), 200),
        ],
    );
    inv.image_fs = Some(fs.clone());
    let mut policy = Policy::builtin();
    policy.images.disk = Some(crate::policy::DiskWatermarks::percents(85, 70));
    let p = plan(&inv, &policy, now());
    assert_eq!(find(&p, Kind::Image, "sha256:pulled").rule, Rule::Eligible);
    assert_eq!(
        find(&p, Kind::Image, "sha256:loaded").rule,
        Rule::Unpullable
    );
    assert_eq!(
        p.kept_unpullable,
        Some(KeptUnpullable {
            images: 1,
            bytes: 200
        })
    );
    // Where the eligible images reach low_percent, nothing is said: 86%
    // full, 76% after, low 80.
    inv.image_fs = Some(crate::inventory::FsUsage {
        used_bytes: 860,
        available_bytes: 140,
        ..fs
    });
    policy.images.disk = Some(crate::policy::DiskWatermarks::percents(85, 80));
    assert_eq!(plan(&inv, &policy, now()).kept_unpullable, None);
    policy.images.disk = Some(crate::policy::DiskWatermarks::percents(85, 70));
    // Nor with keep_unpullable off.
    policy.images.keep_unpullable = KeepUnpullable::Never;
    inv.image_fs = Some(crate::inventory::FsUsage {
        used_bytes: 950,
        available_bytes: 50,
        path: "/var/lib/containerd".into(),
        stand_in: None,
    });
    assert_eq!(plan(&inv, &policy, now()).kept_unpullable, None);
}
