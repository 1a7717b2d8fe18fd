//! Every kind of use the one definition knows (image volumes,
//! child images, sandboxes) holds its image in the plan and in the
//! re-check, and images and build cache records go children first.

use super::tests::{decide, exited, find, hours_ago, image, now};
use super::*;
use crate::inventory::{BuildCacheEntry, ContainerState, Image, PodIdentity};

fn child_of(id: &str, parent: &str, tags: &[&str]) -> Image {
    Image {
        parent: Some(parent.to_owned()),
        ..image(id, tags, 100)
    }
}

#[test]
fn an_image_mounted_as_a_volume_by_a_kept_container_is_in_use_and_names_it() {
    // The pod's container runs another image and mounts `data:1` (CRI
    // `Mount.image`): its next start needs `data:1` again.
    let mut web = exited("web", 0);
    web.state = ContainerState::Running;
    web.image_mounts = vec!["data:1".to_owned()];
    let mut by_id = exited("by-id", 0);
    by_id.state = ContainerState::Running;
    by_id.image_mounts = vec!["sha256:models".to_owned()];
    let inv = Inventory {
        containers: vec![web, by_id],
        images: vec![
            image("sha256:app", &["app:1"], 100),
            image("sha256:data", &["docker.io/library/data:1"], 100),
            image("sha256:models", &["models:2"], 100),
        ],
        ..Inventory::default()
    };
    let p = decide(&inv);
    let data = find(&p, Kind::Image, "sha256:data");
    assert_eq!(data.rule, Rule::InUse, "{data:?}");
    assert_eq!(data.detail, "mounted as a volume by kept container web");
    assert!(data.facts.contains(&("mounted by", "web".to_owned())));
    assert_eq!(find(&p, Kind::Image, "sha256:models").rule, Rule::InUse);
    // The image both run: made from it comes first.
    assert_eq!(
        find(&p, Kind::Image, "sha256:app").detail,
        "used by kept container by-id"
    );
}

#[test]
fn a_mount_of_a_container_planned_for_deletion_holds_nothing_but_a_recheck_counts_it() {
    let mut old = exited("old", 100);
    old.image_mounts = vec!["data:1".to_owned()];
    let inv = Inventory {
        containers: vec![old],
        images: vec![image("sha256:data", &["data:1"], 100)],
        ..Inventory::default()
    };
    assert_eq!(
        find(&decide(&inv), Kind::Image, "sha256:data").rule,
        Rule::Eligible
    );
    // The container was not removed after all: it still mounts the image.
    let again = recheck(
        Kind::Image,
        &["sha256:data"],
        &inv,
        (&Policy::builtin(), &Plan::default()),
        now(),
    );
    assert_eq!(again[0].as_ref().unwrap().rule, Rule::InUse);
}

#[test]
fn a_parent_of_a_kept_image_is_in_use_with_the_child_named() {
    // `docker commit`: base <- committed, which a running container uses.
    let mut running = exited("web", 0);
    running.state = ContainerState::Running;
    running.image_id = "sha256:committed".into();
    running.image_ref = "committed:1".into();
    let inv = Inventory {
        containers: vec![running],
        images: vec![
            image("sha256:base", &["base:1"], 100),
            child_of("sha256:committed", "sha256:base", &["committed:1"]),
        ],
        ..Inventory::default()
    };
    let p = decide(&inv);
    let base = find(&p, Kind::Image, "sha256:base");
    assert_eq!(base.rule, Rule::InUse, "{base:?}");
    assert_eq!(
        base.detail,
        "image committed:1 is built on it and is kept (in_use)"
    );
    assert!(
        base.facts
            .contains(&("child image", "sha256:committed".to_owned()))
    );
}

#[test]
fn a_chain_kept_at_its_tip_is_kept_whole_whatever_rule_keeps_the_tip() {
    let mut policy = Policy::builtin();
    policy.images.keep = vec!["tip:*".parse().unwrap()];
    let inv = Inventory {
        images: vec![
            image("sha256:a-root", &[], 100),
            child_of("sha256:b-mid", "sha256:a-root", &[]),
            child_of("sha256:c-tip", "sha256:b-mid", &["tip:1"]),
        ],
        ..Inventory::default()
    };
    let p = plan(&inv, &policy, now());
    assert_eq!(
        find(&p, Kind::Image, "sha256:c-tip").rule,
        Rule::KeepPattern
    );
    for id in ["sha256:b-mid", "sha256:a-root"] {
        assert_eq!(find(&p, Kind::Image, id).rule, Rule::InUse, "{id}");
    }
}

#[test]
fn an_unused_chain_goes_children_first_whatever_the_ids() {
    // Ids ordered against the chain: the root sorts last.
    let inv = Inventory {
        images: vec![
            image("sha256:z-root", &["root:1"], 100),
            child_of("sha256:m-mid", "sha256:z-root", &["mid:1"]),
            child_of("sha256:a-tip", "sha256:m-mid", &["tip:1"]),
            child_of("sha256:b-tip", "sha256:z-root", &[]),
        ],
        ..Inventory::default()
    };
    let p = decide(&inv);
    let wave = |id| {
        let d = find(&p, Kind::Image, id);
        assert_eq!(d.rule, Rule::Eligible, "{id}");
        d.wave
    };
    assert_eq!(wave("sha256:a-tip"), 0);
    assert_eq!(wave("sha256:b-tip"), 0);
    assert_eq!(wave("sha256:m-mid"), 1);
    assert_eq!(wave("sha256:z-root"), 2);
    // The report's order stays by id.
    let ids: Vec<&str> = p.decisions.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "sha256:a-tip",
            "sha256:b-tip",
            "sha256:m-mid",
            "sha256:z-root"
        ]
    );
}

#[test]
fn a_recheck_keeps_a_parent_while_any_child_is_left() {
    // The child's removal was skipped: the parent must stay.
    let inv = Inventory {
        images: vec![
            image("sha256:base", &["base:1"], 100),
            child_of("sha256:child", "sha256:base", &[]),
        ],
        ..Inventory::default()
    };
    let again = recheck(
        Kind::Image,
        &["sha256:base"],
        &inv,
        (&Policy::builtin(), &Plan::default()),
        now(),
    );
    assert_eq!(again[0].as_ref().unwrap().rule, Rule::InUse);
}

#[test]
fn a_chain_that_loops_is_decided_without_hanging() {
    let inv = Inventory {
        images: vec![
            child_of("sha256:a", "sha256:b", &[]),
            child_of("sha256:b", "sha256:a", &[]),
            child_of("sha256:self", "sha256:self", &[]),
        ],
        ..Inventory::default()
    };
    let p = decide(&inv);
    assert_eq!(p.decisions.len(), 3);
    // Each holds the other: nothing of the loop is deleted.
    assert_eq!(find(&p, Kind::Image, "sha256:a").rule, Rule::InUse);
    assert_eq!(find(&p, Kind::Image, "sha256:b").rule, Rule::InUse);
}

#[test]
fn the_sandbox_image_names_the_pod_it_serves() {
    let mut pause = exited("k8s_POD_web", 100);
    pause.image_id = "sha256:pause".into();
    pause.image_ref = "localhost/kubernetes/pause:0.1.0".into();
    pause.pod = Some(PodIdentity {
        pod_name: Some("web".into()),
        pod_namespace: Some("default".into()),
        is_sandbox: true,
        ..PodIdentity::default()
    });
    let inv = Inventory {
        containers: vec![pause],
        // Bottlerocket's name: no keep pattern matches it (eraser#1107).
        images: vec![image(
            "sha256:pause",
            &["localhost/kubernetes/pause:0.1.0"],
            100,
        )],
        ..Inventory::default()
    };
    let d = find(&decide(&inv), Kind::Image, "sha256:pause").clone();
    assert_eq!(d.rule, Rule::InUse);
    assert_eq!(
        d.detail,
        "the sandbox image of pod default/web: used by kept container k8s_POD_web"
    );
}

fn record(id: &str, parents: &[&str]) -> BuildCacheEntry {
    BuildCacheEntry {
        id: id.to_owned(),
        description: String::new(),
        created: Some(hours_ago(100)),
        last_used: None,
        size: Some(1),
        in_use: false,
        parents: parents.iter().map(|p| (*p).to_owned()).collect(),
    }
}

#[test]
fn build_cache_records_go_leaves_first() {
    // Nine records chained as BuildKit chains a build's steps, ids in the
    // opposite order of the chain.
    let mut records = vec![record("r9", &[])];
    for n in (1..9).rev() {
        let parent = format!("r{}", n + 1);
        records.push(record(&format!("r{n}"), &[parent.as_str()]));
    }
    let inv = Inventory {
        build_cache: records,
        ..Inventory::default()
    };
    let p = decide(&inv);
    for n in 1..=9 {
        let d = find(&p, Kind::BuildCache, &format!("r{n}"));
        assert_eq!(d.rule, Rule::Eligible);
        assert_eq!(d.wave, n - 1, "r{n}");
    }
}
