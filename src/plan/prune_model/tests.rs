//! The models held to the commands' documented behaviour, one node at a
//! time.

use std::collections::HashMap;

use super::docker::untagged_while_in_use;
use super::*;
use crate::inventory::{
    BuildCacheEntry, Container, Image, ImageStore, Inventory, Kind, Labels, Network, Volume,
};

fn container(
    id: &str,
    state: ContainerState,
    image: &str,
    nets: &[&str],
    vols: &[&str],
) -> Container {
    Container {
        image_mounts: Vec::new(),
        layer: None,
        id: id.into(),
        names: vec![id.into()],
        state,
        labels: Labels::new(),
        image_id: image.into(),
        image_ref: image.into(),
        created: chrono::Utc::now(),
        finished: None,
        volumes: vols.iter().map(|v| (*v).to_owned()).collect(),
        networks: nets.iter().map(|n| (*n).to_owned()).collect(),
        pod: None,
        size: None,
    }
}

fn node(api: &str) -> Inventory {
    let volume = |name: &str, anonymous| Volume {
        name: name.into(),
        anonymous,
        labels: Labels::new(),
        created: None,
        size: None,
    };
    let network = |name: &str| Network {
        id: format!("id-{name}"),
        name: name.into(),
        created: None,
        labels: Labels::new(),
    };
    let image = |id: &str| Image {
        id: id.into(),
        ..Image::default()
    };
    Inventory {
        runtime: "docker".into(),
        containers: vec![
            container(
                "web",
                ContainerState::Running,
                "sha256:web",
                &["front"],
                &["data"],
            ),
            container("paused", ContainerState::Paused, "sha256:p", &[], &[]),
            container(
                "old",
                ContainerState::Exited,
                "sha256:old",
                &["back"],
                &["cache"],
            ),
            container("new", ContainerState::Created, "sha256:old", &[], &[]),
            container("dead", ContainerState::Dead, "sha256:old", &[], &[]),
            container("odd", ContainerState::Unknown, "sha256:odd", &[], &[]),
        ],
        images: vec![
            image("sha256:web"),
            image("sha256:p"),
            image("sha256:old"),
            image("sha256:odd"),
            image("sha256:unused"),
        ],
        volumes: vec![
            volume("data", false),
            volume("cache", false),
            volume(&"a".repeat(64), true),
        ],
        networks: vec![
            network("bridge"),
            network("host"),
            network("front"),
            network("back"),
        ],
        build_cache: vec![
            BuildCacheEntry {
                parents: Vec::new(),
                id: "busy".into(),
                description: String::new(),
                created: None,
                last_used: None,
                size: None,
                in_use: true,
            },
            BuildCacheEntry {
                parents: Vec::new(),
                id: "idle".into(),
                description: String::new(),
                created: None,
                last_used: None,
                size: None,
                in_use: false,
            },
        ],
        api_version: crate::inventory::ApiVersion::parse(api),
        ..Inventory::default()
    }
}

fn removed(v: &HashMap<(Kind, String), Verdict>) -> Vec<(Kind, String)> {
    let mut r: Vec<(Kind, String)> = v
        .iter()
        .filter(|(_, v)| v.removes)
        .map(|(k, _)| k.clone())
        .collect();
    r.sort();
    r
}

fn ids(kind: Kind, list: &[&str]) -> Vec<(Kind, String)> {
    list.iter().map(|i| (kind, (*i).to_owned())).collect()
}

fn tagged(id: &str, names: &[&str], parent: Option<&str>) -> Image {
    Image {
        id: id.into(),
        tags: names
            .iter()
            .filter(|n| !n.contains('@'))
            .map(|n| (*n).to_owned())
            .collect(),
        digests: names
            .iter()
            .filter(|n| n.contains('@'))
            .map(|n| (*n).to_owned())
            .collect(),
        parent: parent.map(str::to_owned),
        ..Image::default()
    }
}

#[test]
fn a_parent_of_an_image_in_use_loses_only_its_names() {
    // `docker commit`: base:1 <- committed:1, which runs; an unused
    // chain of three goes whole, its untagged middle with it.
    let inv = Inventory {
        containers: vec![container(
            "web",
            ContainerState::Running,
            "sha256:committed",
            &[],
            &[],
        )],
        images: vec![
            tagged("sha256:base", &["base:1"], None),
            tagged("sha256:committed", &["committed:1"], Some("sha256:base")),
            tagged("sha256:root", &["root:1"], None),
            tagged("sha256:mid", &[], Some("sha256:root")),
            tagged("sha256:tip", &["tip:1"], Some("sha256:mid")),
        ],
        ..Inventory::default()
    };
    let v = docker_system_prune(&inv, false);
    let base = &v[&(Kind::Image, "sha256:base".into())];
    assert!(!base.removes);
    assert_eq!(base.untags, ["base:1"]);
    assert_eq!(
        base.why,
        "image committed:1 is built on it and stays: only its names go"
    );
    assert_eq!(
        removed(&v),
        ids(Kind::Image, &["sha256:mid", "sha256:root", "sha256:tip"])
    );
    assert_eq!(
        v[&(Kind::Image, "sha256:mid".into())].why,
        "dangling parent of a deleted image"
    );
}

#[test]
fn an_image_in_use_loses_its_extra_names_down_to_one_reference() {
    // Lexical order over full names: docker.io/library/app:1,
    // docker.io/library/app:2, docker.io/library/app@sha256:…,
    // docker.io/library/zed:1, docker.io/other/app:1. Each is untagged
    // while the rest are not a single reference (the last tag of a
    // repository takes its digests along): other/app:1 stays.
    let names = ["app:2", "other/app:1", "app:1", "app@sha256:0123", "zed:1"];
    let inv = Inventory {
        containers: vec![container(
            "web",
            ContainerState::Running,
            "sha256:app",
            &[],
            &[],
        )],
        images: vec![tagged("sha256:app", &names, None)],
        ..Inventory::default()
    };
    let v = docker_system_prune(&inv, false);
    let app = &v[&(Kind::Image, "sha256:app".into())];
    assert!(!app.removes);
    assert_eq!(app.untags, ["app:1", "app:2", "app@sha256:0123", "zed:1"]);
    // One tag and its repository's digests are a single reference: a
    // used image keeps them all.
    assert!(untagged_while_in_use(&["app:1".into(), "app@sha256:0123".into()]).is_empty());
    assert!(untagged_while_in_use(&["app:1".into()]).is_empty());
    assert!(untagged_while_in_use(&[]).is_empty());
}

#[test]
fn on_the_containerd_store_only_the_names_containers_were_made_with_stay() {
    // As measured on Docker 29.7.2 (tests/integration/docker28.rs).
    let names = [
        "used:1",
        "used:2",
        "zed/used:1",
        "other:1",
        "used@sha256:d",
        "zed/used@sha256:d",
        "other@sha256:d",
    ];
    let node = |web_made_with: &str| {
        let mut web = container("web", ContainerState::Running, "sha256:used", &[], &[]);
        web.image_ref = web_made_with.to_owned();
        let mut child = container(
            "child",
            ContainerState::Running,
            "sha256:committed",
            &[],
            &[],
        );
        child.image_ref = "committed:1".to_owned();
        Inventory {
            containers: vec![web, child],
            images: vec![
                tagged("sha256:used", &names, None),
                tagged("sha256:base", &["base:1"], None),
                tagged("sha256:committed", &["committed:1"], Some("sha256:base")),
            ],
            image_store: ImageStore::Containerd,
            ..Inventory::default()
        }
    };
    let by_name = docker_system_prune(&node("used:1"), false);
    let used = &by_name[&(Kind::Image, "sha256:used".into())];
    assert!(!used.removes);
    assert_eq!(
        used.untags,
        [
            "used:2",
            "zed/used:1",
            "other:1",
            "zed/used@sha256:d",
            "other@sha256:d"
        ]
    );
    // Parents do not count: base goes whole.
    assert_eq!(removed(&by_name), ids(Kind::Image, &["sha256:base"]));
    let committed = &by_name[&(Kind::Image, "sha256:committed".into())];
    assert!(committed.untags.is_empty());
    // Made by id: the last name in full spelling stays
    // (docker.io/zed/used:1).
    let by_id = docker_system_prune(&node("sha256:used"), false);
    assert_eq!(
        by_id[&(Kind::Image, "sha256:used".into())].untags,
        [
            "used:1",
            "used:2",
            "other:1",
            "used@sha256:d",
            "other@sha256:d"
        ]
    );
}

#[test]
fn the_docker_model_is_linear_in_the_node() {
    // 20,000 images over 100,000 containers (the model once
    // scanned the running containers once per image, about 10^9
    // steps). Unoptimized, this finishes in well under the test's
    // patience only when each image costs a lookup.
    let containers: Vec<Container> = (0..100_000)
        .map(|n| {
            container(
                &format!("c{n:06}"),
                if n % 2 == 0 {
                    ContainerState::Running
                } else {
                    ContainerState::Exited
                },
                &format!("sha256:i{:05}", n % 20_000),
                &[],
                &[],
            )
        })
        .collect();
    let images = (0..20_000)
        .map(|n| tagged(&format!("sha256:i{n:05}"), &[], None))
        .collect();
    let inv = Inventory {
        containers,
        images,
        ..Inventory::default()
    };
    let started = std::time::Instant::now();
    let v = docker_system_prune(&inv, false);
    assert_eq!(v.len(), 120_000);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn stopped_containers_then_whatever_no_running_container_holds() {
    let v = docker_system_prune(&node("1.41"), false);
    let mut want = ids(Kind::Container, &["dead", "new", "old"]);
    want.extend(ids(Kind::Image, &["sha256:old", "sha256:unused"]));
    want.extend(ids(Kind::Network, &["id-back"]));
    want.extend(ids(Kind::BuildCache, &["idle"]));
    want.sort();
    assert_eq!(removed(&v), want);
    assert_eq!(
        v[&(Kind::Image, "sha256:web".into())].why,
        "used by running container web"
    );
    assert_eq!(
        v[&(Kind::Network, "id-bridge".into())].why,
        "predefined network"
    );
    assert_eq!(
        v[&(Kind::Volume, "cache".into())].why,
        "volumes are pruned only with --volumes"
    );
}

#[test]
fn volumes_go_with_the_flag_named_ones_only_before_api_1_42() {
    let anonymous = "a".repeat(64);
    let v = docker_system_prune(&node("1.41"), true);
    let gone: Vec<_> = removed(&v)
        .into_iter()
        .filter(|(k, _)| *k == Kind::Volume)
        .collect();
    let mut want = ids(Kind::Volume, &["cache", &anonymous]);
    want.sort();
    assert_eq!(gone, want);
    let v = docker_system_prune(&node("1.43"), true);
    let gone: Vec<_> = removed(&v)
        .into_iter()
        .filter(|(k, _)| *k == Kind::Volume)
        .collect();
    assert_eq!(gone, ids(Kind::Volume, &[&anonymous]));
    assert!(
        v[&(Kind::Volume, "cache".into())]
            .why
            .starts_with("named volume")
    );
    assert_eq!(
        v[&(Kind::Volume, "data".into())].why,
        "mounted by running container web"
    );
}

mod cri;
