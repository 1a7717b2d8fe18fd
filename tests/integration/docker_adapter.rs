//! The Docker adapter against a real Docker Engine: what `inventory` reads,
//! what `recheck` answers, what `remove` does and what it refuses.
//!
//! Each test starts its own private dockerd (see `util`), so tests run in
//! parallel and touch only what they made; every test of an engine runs on
//! Docker 20.10 and on Docker 29 with each image store (`docker_tests!`),
//! and asserts the fact of each where they differ.

use crate::util;

use bollard::models::HostConfig;
use chrono::Utc;
use safeprune::inventory::{ContainerState, Kind};
use safeprune::runtime::docker::DockerRuntime;
use safeprune::runtime::{Engine, Removal, RuntimeError};
use util::df;
use util::docker::PrivateDockerd;
use util::docker_matrix::{DockerVersion, VersionedDockerd, docker_tests};
use util::docker28::PrivateDockerd28;
use util::node::{container, ready_sandbox_ids};
use util::pod::Pod;
use util::{RUN_FOREVER, Required, TEST_LABEL};

/// A private engine of `version` and safeprune's adapter on it; `None`
/// when Docker 29 is not on this machine (printed).
async fn engine(version: DockerVersion) -> (VersionedDockerd, DockerRuntime) {
    let dockerd = VersionedDockerd::start(version).await.required();
    let runtime = DockerRuntime::connect(dockerd.endpoint())
        .await
        .expect("connect to the private dockerd");
    (dockerd, runtime)
}

docker_tests! {
    inventory_reads_pods_sandbox_readiness_and_exit_times,
    inventory_reads_tags_dangling_images_and_last_tag_time,
    inventory_tells_anonymous_from_named_volumes_and_reads_networks,
    removing_a_running_container_is_a_conflict_and_leaves_it_running,
    removing_what_does_not_exist_is_gone,
    a_multi_tagged_image_loses_every_tag_and_goes,
    an_image_a_stopped_container_uses_is_a_conflict_and_keeps_its_tags,
    a_single_tagged_and_a_dangling_image_are_removed_by_id,
    volumes_and_networks_in_use_are_conflicts_until_freed,
    recheck_of_a_container_carries_its_pods_sandboxes_and_is_empty_once_removed,
    recheck_of_an_image_volume_or_network_carries_the_containers_using_it,
    a_volume_made_again_or_an_image_tagged_since_the_snapshot_is_read_again,
    build_cache_records_are_listed_and_removed_one_at_a_time,
    a_bare_socket_path_connects,
    the_image_file_system_is_measured_where_docker_keeps_its_data,
    with_the_disk_measured_images_have_their_unique_sizes,
    a_run_keeps_its_connections_to_the_engine_open,
    a_sandbox_the_watch_missed_still_keeps_its_pods_containers,
    a_tag_the_watch_missed_still_keeps_the_image,
    a_user_the_watch_missed_keeps_every_name_of_a_multi_tagged_image,
}

async fn image_exists(dockerd: &PrivateDockerd, reference: &str) -> bool {
    dockerd.docker().inspect_image(reference).await.is_ok()
}

async fn inventory_reads_pods_sandbox_readiness_and_exit_times(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/busy:v1", None).await;

    let web = Pod::new("web", "default");
    let web_sandbox = dockerd.create_sandbox(&web, &image, true).await;
    let init = dockerd
        .run_pod_container_to_exit(&web, &web_sandbox, "istio-init", 0, &image, util::EXIT_0)
        .await;
    let app = dockerd
        .create_pod_container(&web, &web_sandbox, "app", 0, &image, RUN_FOREVER)
        .await;
    dockerd.start_container(&app).await;

    let gone = Pod::new("gone", "jobs");
    let gone_sandbox = dockerd.create_sandbox(&gone, &image, false).await;
    let never_started = dockerd
        .create_container("plain", &image, &[], RUN_FOREVER)
        .await;

    let inventory = runtime.inventory().await.expect("inventory");
    let now = Utc::now();
    assert_eq!(inventory.runtime, "docker");

    let sandbox = container(&inventory, &web_sandbox);
    assert_eq!(sandbox.pod, Some(web.sandbox_identity()));
    assert_eq!(sandbox.names, ["k8s_POD_web_default_uid-default-web_0"]);

    let init = container(&inventory, &init);
    assert_eq!(init.state, ContainerState::Exited);
    assert_eq!(init.names, ["k8s_istio-init_web_default_uid-default-web_0"]);
    assert_eq!(init.pod, Some(web.container_identity(&web_sandbox)));
    assert_eq!(
        init.labels
            .get("io.kubernetes.container.name")
            .map(String::as_str),
        Some("istio-init")
    );
    let finished = init.finished.expect("an exited container has an exit time");
    assert!(finished >= init.created && finished <= now, "{finished}");
    assert_eq!(init.image_id, image);
    assert_eq!(init.image_ref, image, "created from the id, so named by it");

    let app = container(&inventory, &app);
    assert_eq!(app.state, ContainerState::Running);
    assert_eq!(app.finished, None);

    let plain = container(&inventory, &never_started);
    assert_eq!(plain.state, ContainerState::Created);
    assert_eq!(
        plain.finished, None,
        "never ran: Docker's zero time is None"
    );
    assert_eq!(plain.pod, None);
    assert_eq!(plain.names, ["plain"]);

    let mut ready: Vec<(String, bool)> = inventory
        .sandboxes
        .iter()
        .map(|s| (s.id.clone(), s.ready))
        .collect();
    ready.sort();
    let mut expected = vec![(web_sandbox, true), (gone_sandbox.clone(), false)];
    expected.sort();
    assert_eq!(ready, expected);
    gone.assert_owns(
        inventory
            .sandboxes
            .iter()
            .find(|s| s.id == gone_sandbox)
            .unwrap(),
    );
}

async fn inventory_reads_tags_dangling_images_and_last_tag_time(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let before = Utc::now() - chrono::Duration::seconds(1);
    let tagged = dockerd.import_busybox_image("sp/a:v1", Some("a")).await;
    dockerd.tag_image(&tagged, "sp/a:v2").await;
    dockerd.tag_image(&tagged, "other/a:latest").await;
    // Importing again under the same tag leaves the first image dangling,
    // as a `docker pull` of a moved tag does.
    let replaced = dockerd.import_busybox_image("sp/b:v1", Some("one")).await;
    let current = dockerd.import_busybox_image("sp/b:v1", Some("two")).await;
    let untagged = dockerd.import_dangling_image(Some("d")).await;

    let inventory = runtime.inventory().await.expect("inventory");
    let image = |id: &str| {
        inventory
            .images
            .iter()
            .find(|i| i.id == id)
            .unwrap_or_else(|| panic!("image {id} in the inventory"))
    };

    let a = image(&tagged);
    assert_eq!(a.tags, ["other/a:latest", "sp/a:v1", "sp/a:v2"]);
    if version.containerd_store() {
        // The containerd store names an image by its manifest digest in
        // each repository it is tagged in (docs/engines.md, "Docker 29").
        let digest = |repo: &str| format!("{repo}@{tagged}");
        assert_eq!(a.digests, [digest("other/a"), digest("sp/a")]);
    } else {
        assert!(a.digests.is_empty(), "imported images have no digest");
    }
    assert!(a.size.is_some_and(|s| s > 0));
    let created = a.created.expect("created");
    assert!(created >= before, "{created}");
    let last_tagged = a.last_tagged.expect("a tagged image has LastTagTime");
    assert!(last_tagged >= created, "{last_tagged} before {created}");
    assert_eq!(a.display_name(), "other/a:latest");

    assert!(image(&replaced).is_dangling());
    assert_eq!(image(&current).tags, ["sp/b:v1"]);
    let d = image(&untagged);
    assert!(d.is_dangling());
    assert!(d.digests.is_empty());
    if version.containerd_store() {
        // The containerd store sets LastTagTime when an image comes in,
        // tagged or not (docs/engines.md, "Docker 29"): safeprune ages the
        // import from then.
        let imported = d.last_tagged.expect("LastTagTime set at the import");
        assert!(imported >= d.created.expect("created"), "{imported}");
    } else {
        assert_eq!(
            d.last_tagged, None,
            "never tagged: zero LastTagTime is None"
        );
    }
    assert_eq!(inventory.images.len(), 4);
}

async fn inventory_tells_anonymous_from_named_volumes_and_reads_networks(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/busy:v1", None).await;
    let named = dockerd.create_volume(Some("pgdata")).await;
    let anonymous = dockerd.create_volume(None).await;
    let network = dockerd.create_network("backend", &[("team", "a")]).await;
    let user = dockerd
        .create_container_with(
            "db",
            &image,
            &[],
            RUN_FOREVER,
            HostConfig {
                network_mode: Some("backend".to_owned()),
                binds: Some(vec![
                    format!("{named}:/data"),
                    format!("{anonymous}:/scratch"),
                ]),
                ..HostConfig::default()
            },
        )
        .await;
    dockerd.start_container(&user).await;

    let inventory = runtime.inventory().await.expect("inventory");

    let volume = |name: &str| {
        inventory
            .volumes
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| panic!("volume {name} in the inventory"))
    };
    assert!(!volume(&named).anonymous);
    assert!(volume(&anonymous).anonymous, "{anonymous}");
    assert!(volume(&named).created.is_some());
    assert_eq!(
        volume(&named).labels.get(TEST_LABEL).map(String::as_str),
        Some(dockerd.scope())
    );
    assert_eq!(volume(&named).size, None, "the volume list has no sizes");

    let backend = inventory
        .networks
        .iter()
        .find(|n| n.id == network)
        .expect("the network in the inventory");
    assert_eq!(backend.name, "backend");
    assert!(backend.created.is_some());
    assert_eq!(backend.labels.get("team").map(String::as_str), Some("a"));
    let mut network_names: Vec<&str> = inventory.networks.iter().map(|n| n.name.as_str()).collect();
    network_names.sort_unstable();
    assert_eq!(
        network_names,
        ["backend", "host", "none"],
        "--bridge=none: no bridge"
    );

    let db = container(&inventory, &user);
    let mut volumes = vec![named.clone(), anonymous.clone()];
    volumes.sort();
    assert_eq!(db.volumes, volumes);
    assert!(db.networks.contains(&network), "{:?}", db.networks);
    assert!(db.networks.contains(&"backend".to_owned()));
}

async fn removing_a_running_container_is_a_conflict_and_leaves_it_running(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/busy:v1", None).await;
    let running = dockerd.run_forever("busy", &image, &[]).await;

    let removal = util::remove(&runtime, Kind::Container, &running).await;
    assert!(
        matches!(&removal, Removal::InUse(msg) if msg.contains("running")),
        "{removal:?}"
    );
    let state = dockerd
        .docker()
        .inspect_container(&running, None)
        .await
        .expect("still there")
        .state
        .and_then(|s| s.running);
    assert_eq!(state, Some(true));

    dockerd.stop_container(&running).await;
    assert_eq!(
        util::remove(&runtime, Kind::Container, &running).await,
        Removal::Removed
    );
}

async fn removing_what_does_not_exist_is_gone(version: DockerVersion) {
    let (_dockerd, runtime) = engine(version).await;
    let missing_id = "0".repeat(64);
    for (kind, id) in [
        (Kind::Container, missing_id.clone()),
        (Kind::Image, format!("sha256:{missing_id}")),
        (Kind::Volume, "no-such-volume".to_owned()),
        (Kind::Network, missing_id.clone()),
        (Kind::BuildCache, "nosuchrecord0000000000000".to_owned()),
    ] {
        // Known by id alone: no re-check finds it, the engine answers 404.
        let target = safeprune::runtime::Target::by_id(kind, &id);
        assert_eq!(runtime.remove(&target).await, Removal::Gone, "{kind}");
    }
}

async fn a_multi_tagged_image_loses_every_tag_and_goes(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/m:v1", None).await;
    dockerd.tag_image(&image, "sp/m:v2").await;
    dockerd.tag_image(&image, "other/m:v3").await;
    let bystander = dockerd.import_busybox_image("sp/keep:v1", None).await;

    assert_eq!(
        util::remove(&runtime, Kind::Image, &image).await,
        Removal::Removed
    );

    for reference in [image.as_str(), "sp/m:v1", "sp/m:v2", "other/m:v3"] {
        assert!(!image_exists(&dockerd, reference).await, "{reference}");
    }
    assert!(image_exists(&dockerd, &bystander).await);
    assert_eq!(
        util::remove(&runtime, Kind::Image, &image).await,
        Removal::Gone
    );
}

async fn an_image_a_stopped_container_uses_is_a_conflict_and_keeps_its_tags(
    version: DockerVersion,
) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/u:v1", None).await;
    dockerd.tag_image(&image, "sp/u:v2").await;
    let user = dockerd.run_to_exit("user", &image, &[]).await;

    let short_id = &image.trim_start_matches("sha256:")[..12];
    let removal = util::remove(&runtime, Kind::Image, &image).await;
    assert!(
        matches!(&removal, Removal::InUse(msg) if msg.contains(&user)),
        "{removal:?}"
    );
    // Known by a short id alone (no re-check finds that id), dockerd
    // itself refuses: still in use, nothing untagged.
    let removal = util::remove(&runtime, Kind::Image, short_id).await;
    assert!(matches!(&removal, Removal::InUse(_)), "{removal:?}");
    // Docker would have untagged all but the last tag; none may be lost.
    for reference in ["sp/u:v1", "sp/u:v2"] {
        assert!(image_exists(&dockerd, reference).await, "{reference}");
    }

    assert_eq!(
        util::remove(&runtime, Kind::Container, &user).await,
        Removal::Removed
    );
    assert_eq!(
        util::remove(&runtime, Kind::Image, &image).await,
        Removal::Removed
    );
}

async fn a_single_tagged_and_a_dangling_image_are_removed_by_id(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let tagged = dockerd.import_busybox_image("sp/one:v1", None).await;
    let dangling = dockerd.import_dangling_image(None).await;

    assert_eq!(
        util::remove(&runtime, Kind::Image, &tagged).await,
        Removal::Removed
    );
    assert_eq!(
        util::remove(&runtime, Kind::Image, &dangling).await,
        Removal::Removed
    );
    assert!(!image_exists(&dockerd, "sp/one:v1").await);
    assert!(!image_exists(&dockerd, &dangling).await);
}

async fn volumes_and_networks_in_use_are_conflicts_until_freed(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/busy:v1", None).await;
    let volume = dockerd.create_volume(Some("cache")).await;
    let network = dockerd.create_network("front", &[]).await;
    let user = dockerd
        .create_container_with(
            "user",
            &image,
            &[],
            RUN_FOREVER,
            HostConfig {
                network_mode: Some("front".to_owned()),
                binds: Some(vec![format!("{volume}:/cache")]),
                ..HostConfig::default()
            },
        )
        .await;
    dockerd.start_container(&user).await;

    // Docker answers 409 for the volume but 403 for the network with
    // endpoints; both mean "in use".
    let removal = util::remove(&runtime, Kind::Volume, &volume).await;
    assert!(
        matches!(&removal, Removal::InUse(msg) if msg.contains("in use")),
        "{removal:?}"
    );
    let removal = util::remove(&runtime, Kind::Network, &network).await;
    assert!(
        matches!(&removal, Removal::InUse(msg) if msg.contains("active endpoints")),
        "{removal:?}"
    );

    dockerd.stop_container(&user).await;
    assert_eq!(
        util::remove(&runtime, Kind::Container, &user).await,
        Removal::Removed
    );
    assert_eq!(
        util::remove(&runtime, Kind::Volume, &volume).await,
        Removal::Removed
    );
    assert_eq!(
        util::remove(&runtime, Kind::Network, &network).await,
        Removal::Removed
    );
}

async fn recheck_of_a_container_carries_its_pods_sandboxes_and_is_empty_once_removed(
    version: DockerVersion,
) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/busy:v1", None).await;
    let pod = Pod::new("web", "default");
    let sandbox = dockerd.create_sandbox(&pod, &image, false).await;
    let init = dockerd
        .run_pod_container_to_exit(&pod, &sandbox, "istio-init", 0, &image, util::EXIT_0)
        .await;
    let elsewhere = dockerd
        .create_sandbox(&Pod::new("other", "default"), &image, true)
        .await;
    let other = dockerd.run_to_exit("bystander", &image, &[]).await;
    inventory_once_exited(&runtime, &[&init, &other]).await;

    let fresh = runtime
        .recheck(Kind::Container, &[init.as_str(), other.as_str()])
        .await
        .expect("recheck");
    let ids: Vec<&str> = fresh.containers.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids.len(), 2, "only the containers asked about: {ids:?}");
    assert!(ids.contains(&init.as_str()) && ids.contains(&other.as_str()));
    assert!(fresh.containers.iter().all(|c| c.finished.is_some()));
    let sandboxes: Vec<(&str, bool)> = fresh
        .sandboxes
        .iter()
        .map(|s| (s.id.as_str(), s.ready))
        .collect();
    assert_eq!(
        sandboxes,
        [(sandbox.as_str(), false)],
        "{elsewhere} is another pod's"
    );

    // kubelet recreates the pod's sandbox after the snapshot: the re-check
    // sees it, by the pod's uid, from the engine's events.
    let mut again = pod.clone();
    again.attempt += 1;
    let recreated = dockerd.create_sandbox(&again, &image, true).await;
    let fresh = runtime
        .recheck(Kind::Container, &[init.as_str()])
        .await
        .expect("recheck");
    let ready = ready_sandbox_ids(&fresh);
    assert_eq!(ready, [recreated.as_str()]);

    assert_eq!(
        util::remove(&runtime, Kind::Container, &init).await,
        Removal::Removed
    );
    let fresh = runtime
        .recheck(Kind::Container, &[init.as_str()])
        .await
        .expect("recheck");
    assert!(fresh.containers.is_empty(), "{:?}", fresh.containers);
    // An id prefix is not the container.
    let fresh = runtime
        .recheck(Kind::Container, &[&other[..12]])
        .await
        .expect("recheck");
    assert!(fresh.containers.is_empty());
}

/// The ids of the containers of a re-check's answer, sorted.
fn container_ids(fresh: &safeprune::inventory::Inventory) -> Vec<&str> {
    let mut ids: Vec<&str> = fresh.containers.iter().map(|c| c.id.as_str()).collect();
    ids.sort_unstable();
    ids
}

fn sorted(mut ids: Vec<&str>) -> Vec<&str> {
    ids.sort_unstable();
    ids
}

async fn recheck_of_an_image_volume_or_network_carries_the_containers_using_it(
    version: DockerVersion,
) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/busy:v1", None).await;
    let unrelated = dockerd.import_busybox_image("sp/other:v1", Some("o")).await;
    let volume = dockerd.create_volume(Some("data")).await;
    let network = dockerd.create_network("net", &[]).await;
    let user = dockerd
        .create_container_with(
            "user",
            &image,
            &[],
            RUN_FOREVER,
            HostConfig {
                network_mode: Some("net".to_owned()),
                binds: Some(vec![format!("{volume}:/data")]),
                ..HostConfig::default()
            },
        )
        .await;
    let exited = dockerd.run_to_exit("exited", &image, &[]).await;
    dockerd.run_to_exit("bystander", &unrelated, &[]).await;
    runtime.inventory().await.expect("inventory");

    let expect = [
        (Kind::Image, image.as_str(), sorted(vec![&user, &exited])),
        (Kind::Volume, volume.as_str(), vec![user.as_str()]),
        (Kind::Network, network.as_str(), vec![user.as_str()]),
    ];
    for (kind, id, users) in &expect {
        let fresh = runtime.recheck(*kind, &[id]).await.expect("recheck");
        let found = match kind {
            Kind::Image => fresh.images.iter().any(|i| i.id == *id),
            Kind::Volume => fresh.volumes.iter().any(|v| v.name == *id),
            _ => fresh.networks.iter().any(|n| n.id == *id),
        };
        assert!(found, "{kind} {id} in its recheck");
        assert_eq!(&container_ids(&fresh), users, "{kind}: its users");
    }

    // Made after the snapshot: seen from the engine's events, with the
    // container removed meanwhile gone.
    let late = dockerd
        .create_container_with(
            "late",
            &image,
            &[],
            RUN_FOREVER,
            HostConfig {
                binds: Some(vec![format!("{volume}:/data")]),
                ..HostConfig::default()
            },
        )
        .await;
    assert_eq!(
        util::remove(&runtime, Kind::Container, &exited).await,
        Removal::Removed
    );
    let fresh = runtime
        .recheck(Kind::Volume, &[&volume])
        .await
        .expect("recheck");
    assert_eq!(container_ids(&fresh), sorted(vec![&user, &late]));

    // Made, then pushed out of the events dockerd keeps (256) by others:
    // the adapter sees the history may have lost events, lists again, and
    // still finds it.
    let later = dockerd.run_to_exit("later", &image, &[]).await;
    for k in 0..300 {
        dockerd
            .tag_image(&unrelated, &format!("sp/churn:{k}"))
            .await;
    }
    let fresh = runtime
        .recheck(Kind::Image, &[&image])
        .await
        .expect("recheck");
    assert_eq!(container_ids(&fresh), sorted(vec![&user, &late, &later]));

    assert_eq!(
        util::remove(&runtime, Kind::Container, &user).await,
        Removal::Removed
    );
    assert_eq!(
        util::remove(&runtime, Kind::Network, &network).await,
        Removal::Removed
    );
    let fresh = runtime
        .recheck(Kind::Network, &[network.as_str()])
        .await
        .expect("recheck");
    assert!(fresh.networks.is_empty());
    assert!(fresh.containers.is_empty(), "{:?}", fresh.containers);
}

async fn a_volume_made_again_or_an_image_tagged_since_the_snapshot_is_read_again(
    version: DockerVersion,
) {
    let (dockerd, runtime) = engine(version).await;
    let spare = dockerd.create_volume(Some("spare")).await;
    let image = dockerd.import_busybox_image("sp/busy:v1", None).await;
    let snapshot = runtime.inventory().await.expect("inventory");
    let spare_then = snapshot.volumes.iter().find(|v| v.name == spare).unwrap();

    // An image no event has named is as the snapshot read it; one tagged
    // since is read again, with its new tag and last tag time.
    let fresh = runtime
        .recheck(Kind::Image, &[&image])
        .await
        .expect("recheck");
    assert_eq!(fresh.images[0].tags, ["sp/busy:v1"]);
    dockerd.tag_image(&image, "sp/busy:v2").await;
    let fresh = runtime
        .recheck(Kind::Image, &[&image])
        .await
        .expect("recheck");
    assert_eq!(fresh.images[0].tags, ["sp/busy:v1", "sp/busy:v2"]);
    let then = snapshot.images.iter().find(|i| i.id == image).unwrap();
    assert!(
        fresh.images[0].last_tagged > then.last_tagged,
        "{:?} after {:?}",
        fresh.images[0].last_tagged,
        then.last_tagged
    );
    // Tagging another image with that name takes it off this one, with no
    // event about this one: its re-check must not keep the name.
    let other = dockerd.import_busybox_image("sp/other:v1", Some("o")).await;
    runtime.inventory().await.expect("inventory");
    dockerd.tag_image(&other, "sp/busy:v2").await;
    let fresh = runtime
        .recheck(Kind::Image, &[&image])
        .await
        .expect("recheck");
    assert_eq!(fresh.images[0].tags, ["sp/busy:v1"]);

    // A volume removed and made again under the same name since the
    // snapshot is read again: it is a new volume (Docker dates volumes to
    // the second).
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    dockerd
        .docker()
        .remove_volume(
            &spare,
            None::<bollard::query_parameters::RemoveVolumeOptions>,
        )
        .await
        .expect("remove spare");
    dockerd.create_volume(Some("spare")).await;
    let fresh = runtime
        .recheck(Kind::Volume, &[&spare])
        .await
        .expect("recheck");
    assert!(
        fresh.volumes[0].created > spare_then.created,
        "{:?} after {:?}",
        fresh.volumes[0].created,
        spare_then.created
    );
}

async fn build_cache_records_are_listed_and_removed_one_at_a_time(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    dockerd.build_with_buildkit("sp/built:v1");

    let inventory = runtime.inventory().await.expect("inventory");
    assert!(
        !inventory.build_cache.is_empty(),
        "a BuildKit build leaves cache records"
    );
    let record = inventory
        .build_cache
        .iter()
        .find(|r| !r.in_use)
        .expect("a record not in use");
    assert!(record.created.is_some());
    assert!(record.last_used.is_some());
    // On API 1.41 the records come from dockerd's BuildKit, not from
    // /system/df (which sizes everything): the same records either way.
    let read: Vec<(&str, bool, Option<u64>)> = inventory
        .build_cache
        .iter()
        .map(|r| (r.id.as_str(), r.in_use, r.size))
        .collect();
    let df = system_df_build_cache(dockerd.endpoint());
    let df: Vec<(&str, bool, Option<u64>)> = df
        .iter()
        .map(|(id, in_use, size)| (id.as_str(), *in_use, *size))
        .collect();
    assert_eq!(read, df);
    // A policy that does not prune the build cache does not read it (on
    // API 1.41 that is a full /system/df).
    let unread = DockerRuntime::connect(dockerd.endpoint())
        .await
        .expect("connect")
        .without_build_cache()
        .inventory()
        .await
        .expect("inventory");
    assert!(unread.build_cache.is_empty());
    assert_eq!(unread.images.len(), inventory.images.len());

    let fresh = runtime
        .recheck(Kind::BuildCache, &[record.id.as_str()])
        .await
        .expect("recheck");
    assert_eq!(fresh.build_cache.len(), 1);
    assert_eq!(fresh.build_cache[0].id, record.id);

    // A prefix of a real id is not that record, and must not prune it.
    assert_eq!(
        util::remove(&runtime, Kind::BuildCache, &record.id[..4]).await,
        Removal::Gone
    );
    assert_eq!(
        util::remove(&runtime, Kind::BuildCache, &record.id).await,
        Removal::Removed
    );
    let after = runtime.inventory().await.expect("inventory");
    assert!(!after.build_cache.iter().any(|r| r.id == record.id));
    assert_eq!(
        after.build_cache.len(),
        inventory.build_cache.len() - 1,
        "only that record went"
    );
    assert_eq!(
        util::remove(&runtime, Kind::BuildCache, &record.id).await,
        Removal::Gone
    );
}

#[tokio::test]
async fn connecting_to_nothing_is_unreachable_with_a_hint() {
    for endpoint in [
        "unix:///tmp/sp-none/docker.sock",
        "/tmp/sp-none/docker.sock",
        "tcp://127.0.0.1:2375",
    ] {
        let Err(error) = DockerRuntime::connect(endpoint).await else {
            panic!("{endpoint} connected");
        };
        assert!(
            matches!(error, RuntimeError::Unreachable { .. }),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains(endpoint), "{message}");
    }
}

async fn a_bare_socket_path_connects(version: DockerVersion) {
    let dockerd = VersionedDockerd::start(version).await.required();
    let path = dockerd.endpoint().trim_start_matches("unix://").to_owned();
    let runtime = DockerRuntime::connect(&path).await.expect("connect");
    assert_eq!(runtime.kind(), safeprune::inventory::RuntimeKind::Docker);
    assert!(
        runtime
            .inventory()
            .await
            .expect("inventory")
            .containers
            .is_empty()
    );
}

/// The build cache records `/system/df` lists (id, in use, size), sorted
/// by id: one HTTP/1.0 request on the engine's socket.
fn system_df_build_cache(endpoint: &str) -> Vec<(String, bool, Option<u64>)> {
    use std::io::{Read, Write};
    let socket = endpoint.trim_start_matches("unix://");
    let ask = || {
        let mut stream =
            std::os::unix::net::UnixStream::connect(socket).expect("the engine's socket");
        stream
            .write_all(b"GET /v1.41/system/df HTTP/1.0\r\nHost: docker\r\n\r\n")
            .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).unwrap();
        let (_, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
        let df: serde_json::Value = serde_json::from_str(body).expect("JSON");
        (raw, df)
    };
    // Right after a build, Docker 28's containerd store may answer an
    // error while BuildKit still cleans up after it (seen under load in
    // full runs, never alone): asked again, each error printed.
    let (mut raw, mut df) = ask();
    for _ in 0..5 {
        if df["BuildCache"].is_array() {
            break;
        }
        eprintln!("/system/df answered {raw}; again in 1 s");
        std::thread::sleep(std::time::Duration::from_secs(1));
        (raw, df) = ask();
    }
    let mut records: Vec<(String, bool, Option<u64>)> = df["BuildCache"]
        .as_array()
        .unwrap_or_else(|| panic!("no BuildCache in /system/df: {raw}"))
        .iter()
        .map(|r| {
            (
                r["ID"].as_str().unwrap().to_owned(),
                r["InUse"].as_bool().unwrap(),
                r["Size"].as_u64(),
            )
        })
        .collect();
    records.sort();
    records
}

async fn the_image_file_system_is_measured_where_docker_keeps_its_data(version: DockerVersion) {
    let dockerd = VersionedDockerd::start_on_small_fs(version, 256)
        .await
        .required();
    dockerd.import_busybox_image("base:1", None).await;
    // The data root; on the containerd store, containerd's snapshotter root.
    let root = dockerd.image_root();
    let runtime = DockerRuntime::connect(dockerd.endpoint())
        .await
        .expect("connect to the private dockerd");
    // Measured only when asked (`images.disk`): no engine call otherwise.
    assert_eq!(runtime.inventory().await.unwrap().image_fs, None);
    let runtime = runtime.measuring_image_fs();
    let before = runtime
        .inventory()
        .await
        .unwrap()
        .image_fs
        .expect("measured");
    assert_eq!(before.path, root.display().to_string());
    // The file system is the test's alone: df agrees to the byte.
    assert_eq!((before.used_bytes, before.available_bytes), df(&root));
    // 64 MiB more in the data root is 64 MiB more used.
    let filler = root.join("filler");
    std::fs::write(&filler, vec![1_u8; 64 << 20]).unwrap();
    let after = runtime
        .inventory()
        .await
        .unwrap()
        .image_fs
        .expect("measured");
    assert!(
        after.used_bytes >= before.used_bytes + (64 << 20),
        "{before:?} then {after:?}"
    );
    assert!(after.percent() > before.percent());
    std::fs::remove_file(filler).unwrap();
}

async fn with_the_disk_measured_images_have_their_unique_sizes(version: DockerVersion) {
    let dockerd = VersionedDockerd::start(version).await.required();
    let base = dockerd.import_busybox_image("base:1", Some("base")).await;
    let other = dockerd.import_busybox_image("other:1", Some("other")).await;
    // An image made on top of base: it shares base's layer.
    let writer = dockerd
        .create_container("writer", "base:1", &[], &["sh", "-c", "echo derived > /d"])
        .await;
    dockerd.start_container(&writer).await;
    assert_eq!(dockerd.wait_container(&writer).await, 0);
    util::run_ok(dockerd.cli().args(["commit", &writer, "derived:1"]));
    let runtime = DockerRuntime::connect(dockerd.endpoint())
        .await
        .expect("connect to the private dockerd")
        .measuring_image_fs();
    let inventory = runtime.inventory().await.unwrap();
    let image = |id: &str| inventory.images.iter().find(|i| i.id == id).unwrap();
    let derived = inventory
        .images
        .iter()
        .find(|i| i.tags.contains(&"derived:1".to_owned()))
        .unwrap();
    // Removing base alone frees no layer: derived holds it. On overlay2
    // nothing at all (the engine refuses to delete a parent); on the
    // containerd store base's own manifest and config, which it deletes.
    // Docker 28 (API 1.51) counts as shared only the unpacked snapshots,
    // not the compressed layer blob derived's manifest names too: its
    // `SharedSize` leaves that blob in base's unique size, and safeprune
    // says what the engine says (measured on 28.5.2; docs/engines.md,
    // "Docker 28").
    let base_own = match dockerd.as_28() {
        Some(e) if version.containerd_store() && util::docker28::api_at_least(52) => {
            manifest_and_config_bytes(e, &base)
        }
        Some(e) if version.containerd_store() => content_bytes(e, &base),
        _ => 0,
    };
    assert_eq!(image(&base).unique_size, Some(base_own));
    // derived frees what it does not share with base; other shares nothing.
    let (base_size, derived_size) = (image(&base).size.unwrap(), derived.size.unwrap());
    assert_eq!(
        derived.unique_size,
        Some(derived_size - (base_size - base_own))
    );
    assert_eq!(image(&other).unique_size, image(&other).size);
}

/// The bytes of the manifest and the config of `image` (its id: the
/// manifest digest) in the containerd store of `engine`, read from its
/// content store.
fn manifest_and_config_bytes(engine: &PrivateDockerd28, image: &str) -> u64 {
    let manifest = engine.ctr_ok(&["content", "get", image]);
    let config = serde_json::from_str::<serde_json::Value>(&manifest).expect("a manifest")
        ["config"]["digest"]
        .as_str()
        .expect("the manifest names its config")
        .to_owned();
    let config = engine.ctr_ok(&["content", "get", &config]);
    u64::try_from(manifest.len() + config.len()).expect("small blobs")
}

/// The bytes of image `image`'s content in the containerd store of
/// `engine`: its manifest, its config and its compressed layers.
fn content_bytes(engine: &PrivateDockerd28, image: &str) -> u64 {
    let manifest = engine.ctr_ok(&["content", "get", image]);
    let layers: u64 =
        serde_json::from_str::<serde_json::Value>(&manifest).expect("a manifest")["layers"]
            .as_array()
            .expect("the manifest lists its layers")
            .iter()
            .map(|l| l["size"].as_u64().expect("a layer's size"))
            .sum();
    manifest_and_config_bytes(engine, image) + layers
}

/// Forwards every connection made to `proxy` to the engine's socket
/// `engine`, counting them.
fn counting_proxy(
    proxy: &std::path::Path,
    engine: &str,
) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
    let listener = tokio::net::UnixListener::bind(proxy).expect("bind the proxy socket");
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = accepted.clone();
    let engine = engine.trim_start_matches("unix://").to_owned();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let engine = engine.clone();
            tokio::spawn(async move {
                if let Ok(mut upstream) = tokio::net::UnixStream::connect(&engine).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                }
            });
        }
    });
    accepted
}

/// A run's thousands of calls go over a few kept connections: each new
/// one costs dockerd a connection's set-up, and bollard's own unix client
/// opened one per call (BENCHMARKS.md, "Kept connections").
async fn a_run_keeps_its_connections_to_the_engine_open(version: DockerVersion) {
    let dockerd = VersionedDockerd::start(version).await.required();
    let image = dockerd.import_busybox_image("conn:1", None).await;
    let mut stopped = Vec::new();
    for i in 0..40 {
        let name = format!("conn-{i}");
        stopped.push(
            dockerd
                .create_container(&name, &image, &[], &["true"])
                .await,
        );
    }
    let dir = tempfile::tempdir().expect("a directory for the proxy");
    let proxy = dir.path().join("proxy.sock");
    let accepted = counting_proxy(&proxy, dockerd.endpoint());
    let endpoint = format!("unix://{}", proxy.display());
    let runtime = DockerRuntime::connect(&endpoint)
        .await
        .expect("connect through the proxy");
    let cli = util::node::Cli::new(
        &util::node::Runtime::Docker(&endpoint),
        "containers: { min_age: \"0\" }\nimages: { enabled: false }\n\
         networks: { enabled: false }\nbuild_cache: { enabled: false }\n\
         safety: { concurrency: 2 }\n",
    );
    let policy = cli.policy();
    let planned = util::node::plan_now(&runtime, &policy).await;
    let after_plan = accepted.load(std::sync::atomic::Ordering::SeqCst);
    let outcomes = util::node::execute_plan(&runtime, &planned, &policy).await;
    let deleted: std::collections::BTreeSet<&str> = outcomes
        .iter()
        .filter(|o| o.result == safeprune::execute::RemovalResult::Deleted)
        .map(|o| o.id.as_str())
        .collect();
    assert_eq!(
        deleted,
        stopped.iter().map(String::as_str).collect(),
        "{outcomes:?}"
    );
    // 40 removals and their re-checks' reads, at most 2 removals and a
    // re-check in flight at once: a handful of connections, not one a call.
    let during_run = accepted.load(std::sync::atomic::Ordering::SeqCst) - after_plan;
    assert!(
        during_run <= 6,
        "the run's 40 removals opened {during_run} connections to the engine"
    );
}

/// The watch learns of a new sandbox from dockerd's events, and an event
/// appended to dockerd's history after a read took it is read by no later
/// read. A pod the watch finds dead is therefore asked of the engine itself
/// before its containers go: kubelet's new sandbox keeps them.
async fn a_sandbox_the_watch_missed_still_keeps_its_pods_containers(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/missed:v1", None).await;
    let pod = Pod::new("web", "default");
    let sandbox = dockerd.create_sandbox(&pod, &image, false).await;
    let init = dockerd
        .run_pod_container_to_exit(&pod, &sandbox, "setup", 0, &image, util::EXIT_0)
        .await;
    // The events that would correct a snapshot taken too early are
    // skipped below.
    inventory_once_exited(&runtime, &[&init]).await;

    // kubelet brings the pod back; its events are never read.
    let mut again = pod.clone();
    again.attempt += 1;
    let recreated = dockerd.create_sandbox(&again, &image, true).await;
    hide_events_so_far(&runtime).await;
    let fresh = runtime
        .recheck(Kind::Container, &[init.as_str()])
        .await
        .expect("recheck");
    assert_eq!(ready_sandbox_ids(&fresh), [recreated.as_str()]);
    let policy =
        util::node::Cli::new(&util::node::Runtime::Docker(dockerd.endpoint()), "").policy();
    let now = safeprune::plan::recheck(
        Kind::Container,
        &[init.as_str()],
        &fresh,
        (&policy, &safeprune::plan::Plan::default()),
        Utc::now(),
    );
    let decision = now[0].as_ref().expect("the container is still there");
    assert_eq!(
        decision.rule,
        safeprune::plan::Rule::LivePodSandbox,
        "{decision:?}"
    );
}

/// A dangling image tagged after the snapshot, the tag's event never read:
/// its re-check still reads its names, and `images.mode: dangling` keeps
/// it (a delete by id would take the new tag with it).
async fn a_tag_the_watch_missed_still_keeps_the_image(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_dangling_image(Some("missed tag")).await;
    runtime.inventory().await.expect("inventory");
    dockerd.tag_image(&image, "sp/named:v1").await;
    hide_events_so_far(&runtime).await;
    let fresh = runtime
        .recheck(Kind::Image, &[&image])
        .await
        .expect("recheck");
    assert_eq!(fresh.images.len(), 1, "{:?}", fresh.images);
    assert_eq!(fresh.images[0].tags, ["sp/named:v1"]);
    let policy = util::node::Cli::new(
        &util::node::Runtime::Docker(dockerd.endpoint()),
        "images: { mode: dangling, min_age: \"0\" }\n",
    )
    .policy();
    let now = safeprune::plan::recheck(
        Kind::Image,
        &[image.as_str()],
        &fresh,
        (&policy, &safeprune::plan::Plan::default()),
        Utc::now(),
    );
    let decision = now[0].as_ref().expect("the image is still there");
    assert_eq!(decision.rule, safeprune::plan::Rule::Tagged, "{decision:?}");
}

/// An inventory in which each of `ids` has exited. dockerd's list can
/// still say running just after a container's wait returned (seen once in
/// `a_sandbox_the_watch_missed_still_keeps_its_pods_containers`, under the
/// whole suite's load), and a snapshot taken then is corrected only by
/// events.
async fn inventory_once_exited(runtime: &DockerRuntime, ids: &[&str]) {
    for _ in 0..50 {
        let snapshot = runtime.inventory().await.expect("inventory");
        let exited = ids.iter().all(|id| {
            snapshot
                .containers
                .iter()
                .any(|c| c.id == *id && !c.state.is_live())
        });
        if exited {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{ids:?} not all listed as exited within 5 s");
}

/// An image with two names loses them one at a time, and dockerd refuses
/// only the last untag while a container uses it. A container made from it
/// whose create event the watch never read must stop the untags before the
/// first: a lost name does not come back.
async fn a_user_the_watch_missed_keeps_every_name_of_a_multi_tagged_image(version: DockerVersion) {
    let (dockerd, runtime) = engine(version).await;
    let image = dockerd.import_busybox_image("sp/m:v1", None).await;
    dockerd.tag_image(&image, "sp/m:v2").await;
    runtime.inventory().await.expect("inventory");
    let user = dockerd
        .create_container("late-user", &image, &[], &["true"])
        .await;
    hide_events_so_far(&runtime).await;
    let removal = util::remove(&runtime, Kind::Image, &image).await;
    assert!(
        matches!(&removal, Removal::InUse(msg) if msg.contains(&user)),
        "{removal:?}"
    );
    for reference in ["sp/m:v1", "sp/m:v2"] {
        assert!(image_exists(&dockerd, reference).await, "{reference}");
    }
}

/// Makes the watch read no event of what the test did so far. dockerd can
/// stamp an event a little after the call that made it has answered (a
/// container's `create`, measured on 20.10), so the events are given
/// 300 ms to be stamped first.
async fn hide_events_so_far(runtime: &DockerRuntime) {
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    runtime.skip_events_until_now().await;
}
