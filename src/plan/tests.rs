//! Table tests: one case per rule code, plus the interactions between kinds.

use chrono::{Duration, TimeZone};

use super::*;
use crate::inventory::{
    BuildCacheEntry, Container, ContainerState, Image, Labels, Network, PodIdentity, PodSandbox,
    Volume,
};
use crate::policy::{Age, ImageMode};

pub(super) fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 5, 0, 0).unwrap()
}

pub(super) fn hours_ago(h: i64) -> DateTime<Utc> {
    now() - Duration::hours(h)
}

pub(super) fn exited(id: &str, hours: i64) -> Container {
    Container {
        image_mounts: Vec::new(),
        layer: None,
        id: id.to_owned(),
        names: vec![id.to_owned()],
        state: ContainerState::Exited,
        labels: Labels::new(),
        image_id: "sha256:app".to_owned(),
        image_ref: "app:1".to_owned(),
        created: hours_ago(hours + 1),
        finished: Some(hours_ago(hours)),
        volumes: vec![],
        networks: vec![],
        pod: None,
        size: Some(5),
    }
}

fn in_pod(mut c: Container, sandbox: &str, uid: &str, name: &str) -> Container {
    c.labels
        .insert("io.kubernetes.container.name".into(), name.into());
    c.pod = Some(PodIdentity {
        sandbox_id: Some(sandbox.to_owned()),
        pod_uid: Some(uid.to_owned()),
        pod_name: Some("web".into()),
        pod_namespace: Some("default".into()),
        is_sandbox: false,
    });
    c
}

fn sandbox(id: &str, uid: &str, ready: bool) -> PodSandbox {
    PodSandbox {
        id: id.to_owned(),
        pod_uid: Some(uid.to_owned()),
        pod_name: Some("web".into()),
        pod_namespace: Some("default".into()),
        ready,
    }
}

pub(super) fn image(id: &str, tags: &[&str], hours: i64) -> Image {
    Image {
        cri_pinned: false,
        parent: None,
        id: id.to_owned(),
        tags: tags.iter().map(|t| (*t).to_owned()).collect(),
        digests: vec![],
        created: Some(hours_ago(hours)),
        last_tagged: None,
        size: Some(1000),
        pinned: false,
        unique_size: None,
        recorded_use: None,
        first_seen: None,
        provenance: crate::inventory::provenance::Provenance::default(),
    }
}

pub(super) fn decide(inv: &Inventory) -> Plan {
    plan(inv, &Policy::builtin(), now())
}

pub(super) fn find<'a>(p: &'a Plan, kind: Kind, id: &str) -> &'a Decision {
    p.decisions
        .iter()
        .find(|d| d.kind == kind && d.id == id)
        .unwrap_or_else(|| panic!("no decision for {kind} {id}"))
}

fn rule_of(inv: &Inventory, kind: Kind, id: &str) -> Rule {
    find(&decide(inv), kind, id).rule
}

fn with_containers(cs: Vec<Container>) -> Inventory {
    Inventory {
        runtime: "docker".into(),
        containers: cs,
        ..Inventory::default()
    }
}

#[test]
fn container_rules_one_case_each() {
    let mut running = exited("running", 100);
    running.state = ContainerState::Running;
    let mut paused = exited("paused", 100);
    paused.state = ContainerState::Paused;
    let mut sandbox_container = exited("sb", 100);
    sandbox_container.pod = Some(PodIdentity {
        is_sandbox: true,
        ..PodIdentity::default()
    });
    let istio = in_pod(
        exited("istio", 100),
        "dead-sandbox",
        "uid-dead",
        "istio-init",
    );
    let live_init = in_pod(exited("init", 100), "ready-sandbox", "uid-1", "setup");
    let by_uid = in_pod(exited("by-uid", 100), "old-sandbox", "uid-1", "app");
    let dead_pod = in_pod(exited("dead", 100), "dead-sandbox", "uid-dead", "app");
    let young = exited("young", 0);
    let mut never_ran = exited("never-ran", 0);
    never_ran.state = ContainerState::Created;
    never_ran.finished = None;
    never_ran.created = hours_ago(2);
    let mut inv = with_containers(vec![
        running,
        paused,
        sandbox_container,
        istio,
        live_init,
        by_uid,
        dead_pod,
        young,
        never_ran,
        exited("old", 100),
    ]);
    inv.sandboxes = vec![
        sandbox("ready-sandbox", "uid-1", true),
        sandbox("dead-sandbox", "uid-dead", false),
    ];
    let cases = [
        ("running", Rule::Running),
        ("paused", Rule::Running),
        ("sb", Rule::PodSandbox),
        ("istio", Rule::ProtectedLabel),
        ("init", Rule::LivePodSandbox),
        ("by-uid", Rule::LivePodSandbox),
        ("dead", Rule::Eligible),
        ("young", Rule::TooYoung),
        ("never-ran", Rule::Eligible),
        ("old", Rule::Eligible),
    ];
    for (id, rule) in cases {
        assert_eq!(rule_of(&inv, Kind::Container, id), rule, "container {id}");
    }
}

#[test]
fn protected_label_wins_over_live_pod_and_says_which_label() {
    let istio = in_pod(exited("istio", 100), "ready", "uid-1", "istio-init");
    let mut inv = with_containers(vec![istio]);
    inv.sandboxes = vec![sandbox("ready", "uid-1", true)];
    let p = decide(&inv);
    let d = find(&p, Kind::Container, "istio");
    assert_eq!(d.rule, Rule::ProtectedLabel);
    assert_eq!(
        d.detail,
        "label io.kubernetes.container.name=istio-init is protected"
    );
}

#[test]
fn disabled_containers_are_kept_but_protections_still_name_themselves() {
    let mut policy = Policy::builtin();
    policy.containers.enabled = false;
    let inv = with_containers(vec![exited("old", 100)]);
    let p = plan(&inv, &policy, now());
    assert_eq!(find(&p, Kind::Container, "old").rule, Rule::Disabled);
}

#[test]
fn unprotected_policy_deletes_live_pod_init_containers_but_never_a_sandbox() {
    // The switches really switch: with protection off, the same container goes.
    let mut policy = Policy::builtin();
    policy.protect.live_pod_sandboxes = false;
    // No policy unprotects a sandbox, not even one set in code.
    policy.protect.pod_sandboxes = false;
    let mut sb = exited("sb", 100);
    sb.pod = Some(PodIdentity {
        is_sandbox: true,
        ..PodIdentity::default()
    });
    let mut inv = with_containers(vec![in_pod(exited("init", 100), "ready", "u", "setup"), sb]);
    inv.sandboxes = vec![sandbox("ready", "u", true)];
    let p = plan(&inv, &policy, now());
    assert_eq!(find(&p, Kind::Container, "init").rule, Rule::Eligible);
    assert_eq!(find(&p, Kind::Container, "sb").rule, Rule::PodSandbox);
}

#[test]
fn image_rules_one_case_each() {
    let mut kept_user = exited("kept-user", 0);
    kept_user.image_id = "sha256:used".into();
    let mut deleted_user = exited("deleted-user", 100);
    deleted_user.image_id = "sha256:freed".into();
    deleted_user.image_ref = "freed:1".into();
    let mut pinned = image("sha256:pinned", &["my/sandbox:1"], 100);
    pinned.pinned = true;
    let mut retagged = image("sha256:retagged", &["retagged:1"], 100);
    retagged.last_tagged = Some(hours_ago(1));
    let mut inv = with_containers(vec![kept_user, deleted_user]);
    inv.images = vec![
        image("sha256:used", &["used:1"], 100),
        image("sha256:freed", &["freed:1"], 100),
        image("sha256:pause", &["registry.k8s.io/pause:3.9"], 100),
        image("sha256:hub-pause", &["docker.io/library/pause:3.1"], 100),
        pinned,
        retagged,
        image("sha256:new", &["new:1"], 1),
        image("sha256:dangling", &[], 100),
    ];
    let cases = [
        ("sha256:used", Rule::InUse),
        ("sha256:freed", Rule::Eligible),
        ("sha256:pause", Rule::KeepPattern),
        ("sha256:hub-pause", Rule::Eligible),
        ("sha256:pinned", Rule::Pinned),
        ("sha256:retagged", Rule::TooYoung),
        ("sha256:new", Rule::TooYoung),
        ("sha256:dangling", Rule::Eligible),
    ];
    for (id, rule) in cases {
        assert_eq!(rule_of(&inv, Kind::Image, id), rule, "image {id}");
    }
}

#[test]
fn image_is_as_young_as_its_last_container_run() {
    // Built long ago, but a container ran it two hours ago: not stale.
    let mut user = exited("user", 2);
    user.image_id = "sha256:old".into();
    let mut policy = Policy::builtin();
    policy.containers.min_age = Age::hours(1);
    let mut inv = with_containers(vec![user]);
    inv.images = vec![image("sha256:old", &["old:1"], 1000)];
    let p = plan(&inv, &policy, now());
    assert_eq!(find(&p, Kind::Container, "user").rule, Rule::Eligible);
    assert_eq!(find(&p, Kind::Image, "sha256:old").rule, Rule::TooYoung);
}

#[test]
fn dangling_mode_keeps_tagged_images() {
    let mut policy = Policy::builtin();
    policy.images.mode = ImageMode::Dangling;
    let mut inv = with_containers(vec![]);
    inv.images = vec![
        image("sha256:t", &["t:1"], 100),
        image("sha256:d", &[], 100),
    ];
    let p = plan(&inv, &policy, now());
    assert_eq!(find(&p, Kind::Image, "sha256:t").rule, Rule::Tagged);
    assert_eq!(find(&p, Kind::Image, "sha256:d").rule, Rule::Eligible);
    policy.images.enabled = false;
    let p = plan(&inv, &policy, now());
    assert_eq!(find(&p, Kind::Image, "sha256:d").rule, Rule::Disabled);
}

#[test]
fn image_used_by_reference_counts_as_in_use() {
    // containerd containers name their image, not its id.
    let mut user = exited("user", 0);
    user.image_id = String::new();
    user.image_ref = "docker.io/library/busybox:latest".into();
    let mut inv = with_containers(vec![user]);
    inv.images = vec![image("sha256:bb", &["busybox:latest"], 100)];
    assert_eq!(rule_of(&inv, Kind::Image, "sha256:bb"), Rule::InUse);
}

#[test]
fn every_spelling_of_a_reference_names_the_same_image() {
    // Each pair names one Docker Hub image, whichever side the engine
    // spelled fully; a name on another registry, or another tag, is not it.
    let same = [
        ("library/busybox:1", "busybox:1"),
        ("busybox:1", "library/busybox:1"),
        ("docker.io/busybox:1", "library/busybox:1"),
        ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
    ];
    let other = [
        ("busybox:1", "busybox:2"),
        ("quay.io/busybox:1", "busybox:1"),
        ("bitnami/redis:7", "redis:7"),
    ];
    let cases = same.iter().map(|&(r, t)| (r, t, Rule::InUse));
    let cases = cases.chain(other.iter().map(|&(r, t)| (r, t, Rule::Eligible)));
    for (reference, tag, expected) in cases {
        let mut user = exited("user", 0);
        user.image_id = String::new();
        user.image_ref = reference.into();
        let mut inv = with_containers(vec![user]);
        inv.images = vec![image("sha256:bb", &[tag], 100)];
        assert_eq!(
            rule_of(&inv, Kind::Image, "sha256:bb"),
            expected,
            "a container made from {reference} and an image tagged {tag}"
        );
    }
}

fn vol(name: &str, anonymous: bool, hours: i64) -> Volume {
    Volume {
        name: name.to_owned(),
        anonymous,
        labels: Labels::new(),
        created: Some(hours_ago(hours)),
        size: None,
    }
}

#[test]
fn volume_rules_one_case_each() {
    let mut policy = Policy::builtin();
    policy.volumes.enabled = true;
    policy.volumes.keep_labels = vec!["keep".parse().unwrap()];
    let mut holder = exited("holder", 0);
    holder.volumes = vec!["mounted".into()];
    let mut freed = exited("freed", 100);
    freed.volumes = vec!["freed-vol".into()];
    let mut labelled = vol("labelled", true, 1000);
    labelled.labels.insert("keep".into(), "yes".into());
    let mut inv = with_containers(vec![holder, freed]);
    inv.volumes = vec![
        vol("mounted", true, 1000),
        vol("freed-vol", true, 1000),
        vol("named", false, 1000),
        labelled,
        vol("young", true, 1),
        vol("old", true, 1000),
    ];
    let p = plan(&inv, &policy, now());
    for (id, rule) in [
        ("mounted", Rule::InUse),
        ("freed-vol", Rule::Eligible),
        ("named", Rule::NamedVolume),
        ("labelled", Rule::ProtectedLabel),
        ("young", Rule::TooYoung),
        ("old", Rule::Eligible),
    ] {
        assert_eq!(find(&p, Kind::Volume, id).rule, rule, "volume {id}");
    }
    // The built-in policy leaves volumes alone.
    assert_eq!(rule_of(&inv, Kind::Volume, "old"), Rule::Disabled);
}

fn net(id: &str, name: &str, hours: i64) -> Network {
    Network {
        id: id.to_owned(),
        name: name.to_owned(),
        created: Some(hours_ago(hours)),
        labels: Labels::new(),
    }
}

#[test]
fn network_rules_one_case_each() {
    let mut holder = exited("holder", 0);
    holder.networks = vec!["n-used".into()];
    let mut by_name = exited("by-name", 0);
    by_name.networks = vec!["named-net".into()];
    let mut inv = with_containers(vec![holder, by_name]);
    inv.networks = vec![
        net("n-bridge", "bridge", 1000),
        net("n-used", "used", 1000),
        net("n-named", "named-net", 1000),
        net("n-young", "young", 0),
        net("n-old", "old", 1000),
    ];
    for (id, rule) in [
        ("n-bridge", Rule::Builtin),
        ("n-used", Rule::InUse),
        ("n-named", Rule::InUse),
        ("n-young", Rule::TooYoung),
        ("n-old", Rule::Eligible),
    ] {
        assert_eq!(rule_of(&inv, Kind::Network, id), rule, "network {id}");
    }
    let mut policy = Policy::builtin();
    policy.networks.enabled = false;
    let p = plan(&inv, &policy, now());
    assert_eq!(find(&p, Kind::Network, "n-old").rule, Rule::Disabled);
}

#[test]
fn build_cache_rules_one_case_each() {
    let entry = |id: &str, hours: i64, in_use: bool| BuildCacheEntry {
        parents: Vec::new(),
        id: id.to_owned(),
        description: String::new(),
        created: Some(hours_ago(1000)),
        last_used: Some(hours_ago(hours)),
        size: None,
        in_use,
    };
    let mut inv = with_containers(vec![]);
    inv.build_cache = vec![
        entry("old", 100, false),
        entry("young", 1, false),
        entry("busy", 100, true),
    ];
    assert_eq!(rule_of(&inv, Kind::BuildCache, "old"), Rule::Eligible);
    assert_eq!(rule_of(&inv, Kind::BuildCache, "young"), Rule::TooYoung);
    assert_eq!(rule_of(&inv, Kind::BuildCache, "busy"), Rule::TooYoung);
    let mut policy = Policy::builtin();
    policy.build_cache.enabled = false;
    let p = plan(&inv, &policy, now());
    assert_eq!(find(&p, Kind::BuildCache, "old").rule, Rule::Disabled);
    // Unknown sizes stay unknown, not zero.
    assert_eq!(find(&p, Kind::BuildCache, "old").bytes, None);
}

#[test]
fn recheck_keeps_a_container_whose_pod_came_back() {
    let init = in_pod(exited("init", 100), "sb", "u", "setup");
    let mut inv = with_containers(vec![init]);
    inv.sandboxes = vec![sandbox("sb", "u", false)];
    assert_eq!(rule_of(&inv, Kind::Container, "init"), Rule::Eligible);
    inv.sandboxes[0].ready = true;
    let fresh = recheck(
        Kind::Container,
        &["gone", "init"],
        &inv,
        (&Policy::builtin(), &Plan::default()),
        now(),
    );
    assert!(fresh[0].is_none(), "{fresh:?}");
    assert_eq!(fresh[1].as_ref().unwrap().rule, Rule::LivePodSandbox);
}

#[test]
fn recheck_counts_every_remaining_container_as_holding_its_image() {
    let mut user = exited("user", 100);
    user.image_id = "sha256:x".into();
    let mut inv = with_containers(vec![user]);
    inv.images = vec![image("sha256:x", &["x:1"], 100)];
    assert_eq!(rule_of(&inv, Kind::Image, "sha256:x"), Rule::Eligible);
    let fresh = recheck(
        Kind::Image,
        &["sha256:x"],
        &inv,
        (&Policy::builtin(), &Plan::default()),
        now(),
    );
    assert_eq!(fresh[0].as_ref().unwrap().rule, Rule::InUse);
}

#[test]
fn odd_engine_data_does_not_panic() {
    let mut c = exited("", 100);
    c.names.clear();
    c.labels.insert(String::new(), String::new());
    c.pod = Some(PodIdentity::default());
    let mut inv = with_containers(vec![c]);
    inv.images = vec![Image {
        cri_pinned: false,
        parent: None,
        id: String::new(),
        tags: vec![],
        digests: vec![],
        created: None,
        last_tagged: None,
        size: None,
        pinned: false,
        unique_size: None,
        recorded_use: None,
        first_seen: None,
        provenance: crate::inventory::provenance::Provenance::default(),
    }];
    inv.sandboxes = vec![PodSandbox {
        id: String::new(),
        pod_uid: None,
        pod_name: None,
        pod_namespace: None,
        ready: true,
    }];
    let p = decide(&inv);
    assert_eq!(p.decisions.len(), 2);
    // An image we cannot date is not deleted.
    assert_eq!(find(&p, Kind::Image, "").rule, Rule::TooYoung);
}

#[test]
fn human_age_reads_naturally() {
    assert_eq!(human_age(Duration::seconds(45)), "45s");
    assert_eq!(human_age(Duration::minutes(12)), "12m");
    assert_eq!(human_age(Duration::minutes(90)), "1h30m");
    assert_eq!(human_age(Duration::hours(2)), "2h");
    assert_eq!(human_age(Duration::hours(76)), "3d4h");
    assert_eq!(human_age(Duration::hours(48)), "2d");
    assert_eq!(human_age(Duration::seconds(-5)), "0s");
}

#[test]
fn plan_counts_and_sizes() {
    let mut inv = with_containers(vec![exited("a", 100), exited("b", 0)]);
    inv.images = vec![image("sha256:app", &["app:1"], 100)];
    let p = decide(&inv);
    // "b" is kept (too young) and uses the image, so the image stays.
    assert_eq!(p.deletion_count(), 1);
    // Only "a" goes: its writable layer, not the image "b" still holds.
    assert_eq!(p.reclaimable_bytes(), 5);
    assert_eq!(p.kept_by_rule()[&(Kind::Image, Rule::InUse)], 1);
}

mod disk;
mod unpullable;
