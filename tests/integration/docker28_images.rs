//! Images on Docker Engine 28 and later, on both its image stores,
//! measured as `docker28.rs` measures the engine: safeprune's image sizes
//! and what `run` frees (e), `explain` and the image file system (f), a
//! just-loaded image (g), a multi-platform image (h), a stopped container
//! without its snapshot (i), a multi-platform image with one platform
//! present (j). Each test prints what it measured, and holds it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::docker28::{API, LEGACY_DF_KEYS, cli_ok, start_each, store_bytes};
use crate::util;
use util::docker28::{PrivateDockerd28, Store, api_at_least};

/// Each image's `Size` as `/images/json?all=1` gives it: id → bytes.
async fn list_sizes(e: &PrivateDockerd28) -> BTreeMap<String, u64> {
    let (_, list) = e.get(&format!("/{API}/images/json?all=1")).await;
    list.as_array()
        .expect("an image list")
        .iter()
        .map(|i| {
            (
                i["Id"].as_str().unwrap().to_owned(),
                i["Size"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Image `id`'s `Size` as `docker image inspect` gives it.
async fn inspect_size(e: &PrivateDockerd28, id: &str) -> u64 {
    let (_, inspect) = e.get(&format!("/{API}/images/{id}/json")).await;
    inspect["Size"].as_u64().expect("inspect's Size")
}

/// Five distinct unused images (`five0:1` … `five4:1`, no layer shared):
/// their ids.
async fn five_images(e: &PrivateDockerd28) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..5 {
        let extra = format!("image {n} {}", "x".repeat(n * 1000));
        ids.push(
            e.import_busybox_image(&format!("five{n}:1"), Some(&extra))
                .await,
        );
    }
    ids
}

/// (e) safeprune's image sizes on each store are the image
/// list's (`/images/json`, as `/system/df`), never inspect's, which on the
/// containerd store is the compressed content alone: in the adapter's
/// inventory, in its re-check after an image event (each image read
/// again), in the plan's decisions and reclaimable bytes; and `run` frees
/// about what the plan projected, as `du -sb` of the stores measures it.
#[tokio::test(flavor = "multi_thread")]
async fn e_image_sizes_are_the_lists_in_plans_rechecks_and_what_run_frees() {
    use safeprune::inventory::Kind;
    use safeprune::runtime::Engine;
    use safeprune::runtime::docker::DockerRuntime;
    use util::node::{Cli, Runtime};
    let engines = start_each(&Store::ALL).await;
    for e in &engines {
        let store = e.store().name();
        let ids = five_images(e).await;
        let listed = list_sizes(e).await;
        let mut inspected = BTreeMap::new();
        for id in &ids {
            inspected.insert(id.clone(), inspect_size(e, id).await);
        }
        eprintln!("(e) {store}: list sizes {listed:?}\n(e) {store}: inspect sizes {inspected:?}");
        assert_eq!(listed.len(), 5, "{store}: {listed:?}");
        for id in &ids {
            match e.store() {
                Store::Overlay2 => assert_eq!(inspected[id], listed[id], "{store}"),
                // Content alone: about a third of content and snapshots.
                Store::Containerd => assert!(inspected[id] * 2 < listed[id], "{store}"),
            }
        }
        let projected: u64 = listed.values().sum();
        df_image_shapes(e, &listed).await;

        // The adapter: the inventory, then a re-check after a tag, an
        // event after which no image of the snapshot is trusted.
        let runtime = DockerRuntime::connect(e.endpoint()).await.unwrap();
        let inventory = runtime.inventory().await.unwrap();
        let batch: Vec<&str> = ids.iter().map(String::as_str).collect();
        e.tag_image(&ids[0], "five0:again").await;
        let fresh = runtime.recheck(Kind::Image, &batch).await.unwrap();
        cli_ok(e, &["image", "rm", "five0:again"]);
        for (what, images) in [
            ("inventory", &inventory.images),
            ("re-check", &fresh.images),
        ] {
            let sizes: BTreeMap<String, Option<u64>> =
                images.iter().map(|i| (i.id.clone(), i.size)).collect();
            eprintln!("(e) {store}: {what}: sizes {sizes:?}");
            assert_eq!(sizes.len(), 5, "{store}: {what}");
            for (id, size) in sizes {
                assert_eq!(size, Some(listed[&id]), "{store}: {what}: {id}");
            }
        }
        assert!(fresh.images[0].tags.contains(&"five0:again".to_owned()));

        // The plan: each image's bytes, and the sum.
        let cli = Cli::new(&Runtime::Docker(e.endpoint()), "images: {min_age: 0s}\n");
        let (code, plan) = cli.json(&["plan", "--output", "json"]);
        assert_eq!(code, Some(0), "{store}: {plan}");
        for id in &ids {
            let d = util::node::decision(&plan, id);
            assert_eq!(d["decision"], "delete", "{store}: {d}");
            assert_eq!(d["bytes"].as_u64(), Some(listed[id]), "{store}: {d}");
        }
        assert_eq!(
            plan["summary"]["reclaimable_bytes"].as_u64(),
            Some(projected),
            "{store}"
        );

        // The run frees about that, on the disk.
        let before = store_bytes(e);
        let (code, report) = cli.json(&["run", "--output", "json"]);
        assert_eq!(code, Some(0), "{store}: {report}");
        let after = store_bytes(e);
        assert!(list_sizes(e).await.is_empty(), "{store}");
        assert_eq!(
            report["summary"]["reclaimed_bytes"].as_u64(),
            Some(projected),
            "{store}: {report}"
        );
        let freed = before.saturating_sub(after);
        eprintln!(
            "(e) {store}: projected {projected}, du -sb of the stores {before} -> {after}: \
             freed {freed}; inspect's sizes sum to {}",
            inspected.values().sum::<u64>()
        );
        // Within 10%: the stores' metadata (bolt pages, layer records)
        // moves a little too.
        assert!(
            freed.abs_diff(projected) <= projected / 10,
            "{store}: projected {projected}, freed {freed}"
        );
    }
}

/// The shapes of `/system/df?type=image` safeprune reads unique sizes
/// from, at the APIs around the change (1.52) and bollard's (1.53): the
/// legacy `Images`, `ImageUsage.Items` beside it from 1.52, and with
/// `verbose=1` `ImageUsage.Items` alone; every list with the list's sizes
/// and a `SharedSize`.
async fn df_image_shapes(e: &PrivateDockerd28, listed: &BTreeMap<String, u64>) {
    let store = e.store().name();
    let newest = API.to_string();
    // Docker 28 (API 1.51) answers every key of the legacy shape whatever
    // `type` asks, verbose or not; Docker 29 at 1.51 only `Images` and
    // `LayersSize` (measured on 28.5.2 and 29.7.2).
    let (at_1_51, newest_keys, newest_verbose_keys): (&[&str], &[&str], &[&str]) =
        if api_at_least(52) {
            (
                &["Images", "LayersSize"],
                &["ImageUsage", "Images", "LayersSize"],
                &["ImageUsage"],
            )
        } else {
            (&LEGACY_DF_KEYS, &LEGACY_DF_KEYS, &LEGACY_DF_KEYS)
        };
    for (api, verbose, keys) in [
        ("v1.51", false, at_1_51),
        ("v1.52", false, &["ImageUsage", "Images", "LayersSize"]),
        ("v1.53", false, &["ImageUsage", "Images", "LayersSize"]),
        ("v1.53", true, &["ImageUsage"]),
        (newest.as_str(), false, newest_keys),
        (newest.as_str(), true, newest_verbose_keys),
    ]
    .into_iter()
    .filter(|(api, _, _)| {
        api.strip_prefix("v1.")
            .and_then(|m| m.parse::<u32>().ok())
            .is_some_and(api_at_least)
    }) {
        let path = format!(
            "/{api}/system/df?type=image{}",
            if verbose { "&verbose=1" } else { "" }
        );
        let (status, body) = e.get(&path).await;
        let top: Vec<&str> = body
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        eprintln!("(e) {store}: GET {path}: {status}, keys {top:?}");
        assert_eq!(top, keys, "{store}: {path}");
        for list in [&body["Images"], &body["ImageUsage"]["Items"]] {
            let Some(list) = list.as_array() else {
                continue;
            };
            let sizes: BTreeMap<String, u64> = list
                .iter()
                .map(|i| {
                    assert_eq!(i["SharedSize"], 0, "{store}: {path}: {i}");
                    (
                        i["Id"].as_str().unwrap().to_owned(),
                        i["Size"].as_u64().unwrap(),
                    )
                })
                .collect();
            assert_eq!(&sizes, listed, "{store}: {path}");
        }
    }
}

/// The value of `explain`'s row `what` (`size`, `frees`).
fn explain_row<'a>(text: &'a str, what: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.trim_start().strip_prefix(&format!("{what}:")))
        .map(str::trim)
}

/// (f) With `images.disk`: `explain` of an image says a size and
/// what removing it frees that agree (the list's size, no layer shared),
/// not inspect's; the report's `image_fs.path` is where the store keeps
/// its images: the data root on overlay2, the snapshotter's root under
/// containerd's root on the containerd store. There, with containerd's
/// socket out of reach, the data root stands in, and the warning and the
/// rules' details say so.
#[tokio::test(flavor = "multi_thread")]
async fn f_explain_and_the_image_file_system_on_each_store() {
    use safeprune::report::human_bytes;
    use util::node::{Cli, Runtime};
    let engines = start_each(&Store::ALL).await;
    for e in &engines {
        let store = e.store().name();
        let id = e.import_busybox_image("shown:1", Some("shown")).await;
        let listed = list_sizes(e).await[&id];
        let inspected = inspect_size(e, &id).await;
        let runtime = Runtime::Docker(e.endpoint());
        let cli = Cli::new(&runtime, "");
        cli.rewrite(
            &runtime,
            &format!(
                "images: {{min_age: 0s, disk: {{}}}}\nstate_dir: {}\n",
                cli.path("state").display()
            ),
        );

        let out = cli.run(&["explain", "shown:1"]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!(
            "(f) {store}: list Size {listed}, inspect Size {inspected}; explain shown:1:\n{text}"
        );
        assert_eq!(out.status.code(), Some(0), "{store}: {text}");
        let size = explain_row(&text, "size").unwrap_or_else(|| panic!("no size: {text}"));
        let frees = explain_row(&text, "frees").unwrap_or_else(|| panic!("no frees: {text}"));
        assert_eq!(size, human_bytes(listed), "{store}");
        assert_eq!(
            frees,
            format!("{size} (shared with no other image)"),
            "{store}"
        );
        if e.store() == Store::Containerd {
            assert_ne!(human_bytes(inspected), size, "{store}");
        }

        let (code, plan) = cli.json(&["plan", "--output", "json"]);
        assert_eq!(code, Some(0), "{store}: {plan}");
        let image_fs = plan["image_fs"]["path"].as_str().expect("image_fs.path");
        let data_root = e.data_root().display().to_string();
        let snapshotter_root = e
            .containerd_root()
            .join("io.containerd.snapshotter.v1.overlayfs")
            .display()
            .to_string();
        eprintln!("(f) {store}: image_fs {}", plan["image_fs"]);
        match e.store() {
            Store::Overlay2 => assert_eq!(image_fs, data_root, "{store}"),
            Store::Containerd => assert_eq!(image_fs, snapshotter_root, "{store}"),
        }
        // The disk rules name the file system, with no stand-in.
        disk_rule_names(&plan, &id, "the image file system is ", store);
        if e.store() == Store::Containerd {
            data_root_stands_in(e, &cli, &id);
        }
    }
}

/// On the containerd store with containerd's socket out of reach (renamed
/// for a moment; dockerd keeps its own connection): the data root stands
/// in, with a warning, and the rules' details say so.
fn data_root_stands_in(e: &PrivateDockerd28, cli: &util::node::Cli, id: &str) {
    let socket = e.containerd_socket();
    let away = socket.with_extension("away");
    std::fs::rename(socket, &away).unwrap();
    let out = cli.run(&["plan", "--output", "json"]);
    std::fs::rename(&away, socket).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let plan: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|err| panic!("{err}: {}\n{stderr}", String::from_utf8_lossy(&out.stdout)));
    eprintln!(
        "(f) containerd, its socket away: image_fs {}; stderr:\n{stderr}",
        plan["image_fs"]
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        plan["image_fs"]["path"].as_str(),
        Some(e.data_root().display().to_string().as_str())
    );
    assert!(
        stderr.contains("DockerRootDir stands in")
            && stderr.contains("cannot connect to containerd"),
        "{stderr}"
    );
    disk_rule_names(
        &plan,
        id,
        "the image file system (measured at DockerRootDir: containerd's image store could not \
         be measured) is ",
        "containerd, its socket away",
    );
}

/// The disk rules' reason for image `id` in `plan` names the file system
/// as `words` say. Under `high_percent` the image is kept, and the reason
/// says how full that file system is; this node's disk may be over it,
/// and then the image goes, as the rules allow, to bring it down.
fn disk_rule_names(plan: &serde_json::Value, id: &str, words: &str, store: &str) {
    let decision = util::node::decision(plan, id);
    let fs = &plan["image_fs"];
    let before = fs["before_percent"].as_f64().expect("before_percent");
    let high = fs["high_percent"].as_f64().expect("high_percent");
    if before > high {
        assert_eq!(decision["decision"], "delete", "{store}: {fs}: {decision}");
    } else {
        let detail = decision["detail"].as_str().unwrap();
        assert!(detail.contains(words), "{store}: {fs}: {detail}");
    }
}

/// `docker load` of an image built in 2024 (air-gapped nodes
/// preload theirs so). On the overlay2 store Docker leaves its
/// `LastTagTime` zero, so by its dates alone it was two years old and
/// `eligible` under `min_age: 1h`; it is dated by safeprune's first
/// sighting instead. The containerd store sets `LastTagTime` at load.
#[tokio::test(flavor = "multi_thread")]
async fn g_a_just_loaded_image_is_new_on_each_store() {
    use util::node::{Cli, Runtime, decision};
    const LOADED: &str = "docker.io/library/loaded:1";
    let engines = start_each(&Store::ALL).await;
    let (archive, _) = util::crio::oci_archive_of(
        &util::busybox_rootfs(Some("loaded")),
        &["sh"],
        "2024-01-01T00:00:00Z",
        Some(LOADED),
    );
    for e in &engines {
        let store = e.store().name();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &archive).unwrap();
        util::run_ok(e.cli().arg("load").arg("-i").arg(file.path()));
        let inspected = e.docker().inspect_image(LOADED).await.unwrap();
        let id = inspected.id.clone().expect("an id");
        let tagged = inspected
            .metadata
            .and_then(|m| m.last_tag_time)
            .unwrap_or_default();
        eprintln!(
            "(g) {store}: loaded {LOADED}, created {:?}, LastTagTime {tagged:?}",
            inspected.created
        );
        let runtime = Runtime::Docker(e.endpoint());
        let cli = Cli::new(&runtime, "images: { min_age: 1h }\n");
        let (code, plan) = cli.json(&["plan", "--output", "json"]);
        assert_eq!(code, Some(0), "{store}: {plan}");
        let d = decision(&plan, &id);
        assert_eq!(d["rule"], "too_young", "{store}: {d}");
        match e.store() {
            Store::Overlay2 => {
                assert!(
                    tagged.starts_with("0001-01-01") || tagged.is_empty(),
                    "{tagged}"
                );
                assert_eq!(d["last_used_source"], "first_seen", "{store}: {d}");
            }
            Store::Containerd => assert_eq!(d["last_used_source"], "pull_or_tag", "{store}: {d}"),
        }
    }
}

/// An OCI archive of `name`, an index of this machine's platform and
/// another (each a busybox of its own), with the `manifest.json` of this
/// platform's image that `docker load` on a graph driver reads; the
/// index's digest, and the two images. Without `other_present` the other
/// platform's manifest, config and layer are left out of the archive, as
/// a registry pull leaves them out of the store.
fn multi_platform_archive(
    name: &str,
    other_present: bool,
) -> (Vec<u8>, String, [util::oci::Image; 2]) {
    use util::oci;
    let created = "2024-01-01T00:00:00Z";
    let host_layer = util::busybox_rootfs(Some("multi-host"));
    let host = oci::Image::new(&host_layer, &[], created, &Value::Null);
    let other_arch = if oci::arch() == "arm64" {
        "amd64"
    } else {
        "arm64"
    };
    let other_layer = util::busybox_rootfs(Some("multi-other"));
    let other = oci::Image::for_arch(&other_layer, &[], created, &Value::Null, other_arch);
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [host.descriptor(None), other.descriptor(None)],
    })
    .to_string()
    .into_bytes();
    let index_digest = oci::digest(&index);
    let legacy = oci::docker_load_manifest(&host, name);
    let blobs: [(&str, &[u8]); 7] = [
        (&index_digest, &index),
        (&host.manifest_digest, &host.manifest),
        (&host.config_digest, &host.config),
        (&host.layer_digest, &host_layer),
        (&other.manifest_digest, &other.manifest),
        (&other.config_digest, &other.config),
        (&other.layer_digest, &other_layer),
    ];
    let archive = oci::layout_tar(
        &[json!({
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": index_digest,
            "size": index.len(),
            "annotations": { "io.containerd.image.name": name },
        })],
        &blobs[..if other_present { 7 } else { 4 }],
        &[("manifest.json", legacy.as_bytes())],
    );
    (archive, index_digest, [host, other])
}

/// A multi-platform image (an OCI index of this machine's platform and
/// another), loaded with `docker load` as air-gapped nodes preload them:
/// its id on each store, what safeprune reads of it, keeps while a
/// container uses it, and frees when it goes.
#[tokio::test(flavor = "multi_thread")]
async fn h_a_multi_platform_image_on_each_store() {
    use util::node::{Cli, Runtime, decision};
    const MULTI: &str = "docker.io/library/multi:1";
    let engines = start_each(&Store::ALL).await;
    let (archive, index_digest, [host, other]) = multi_platform_archive(MULTI, true);
    let platforms = [&host, &other];
    for e in &engines {
        let store = e.store().name();
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &archive).unwrap();
        util::run_ok(e.cli().arg("load").arg("-i").arg(file.path()));
        let inspected = e.docker().inspect_image(MULTI).await.unwrap();
        let id = inspected.id.clone().expect("an id");
        // The overlay2 store loads this platform's image alone; the
        // containerd store keeps the index, named by its digest.
        let expected = match e.store() {
            Store::Overlay2 => &host.config_digest,
            Store::Containerd => &index_digest,
        };
        assert_eq!(&id, expected, "{store}");
        let (_, listed) = e.get("/images/json").await;
        let listed_size = listed
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["Id"] == id.as_str())
            .and_then(|i| i["Size"].as_i64())
            .expect("the image is listed with a size");
        eprintln!("(h) {store}: id {id}, listed size {listed_size}");

        let runtime = Runtime::Docker(e.endpoint());
        let cli = Cli::new(&runtime, "images: { min_age: \"0\" }\n");
        let user = e.run_forever("multi-user", MULTI, &[]).await;
        let (code, plan) = cli.json(&["plan", "--output", "json"]);
        assert_eq!(code, Some(0), "{store}: {plan}");
        let while_used = decision(&plan, &id);
        assert_eq!(while_used["rule"], "in_use", "{store}: {while_used}");
        e.stop_container(&user).await;
        e.docker()
            .remove_container(
                &user,
                None::<bollard::query_parameters::RemoveContainerOptions>,
            )
            .await
            .unwrap();

        // What goes is every platform's content: the list's size is what
        // the image holds (on the containerd store: both platforms'
        // content and this platform's unpacked snapshot).
        let (code, run) = cli.json(&["run", "--output", "json"]);
        assert_eq!(code, Some(0), "{store}: {run}");
        let went = decision(&run, &id);
        assert_eq!(went["decision"], "delete", "{store}: {went}");
        assert_eq!(went["bytes"], listed_size, "{store}: {went}");
        let (_, after) = e.get("/images/json?all=1").await;
        assert_eq!(after, json!([]), "{store}");
        if e.store() == Store::Containerd {
            let content = e.ctr_ok(&["content", "ls", "-q"]);
            for image in platforms {
                for digest in [
                    &image.manifest_digest,
                    &image.config_digest,
                    &image.layer_digest,
                ] {
                    assert!(
                        !content.contains(digest.as_str()),
                        "{digest} stays: {content}"
                    );
                }
            }
            assert!(!content.contains(&index_digest), "{content}");
        }
    }
}

/// On the containerd store, a stopped container whose writable snapshot is
/// gone (what a dockerd killed in the middle of removing it leaves: it
/// comes back `dead`, its snapshot deleted and its record not) answers
/// `GET /containers/{id}/json?size=1` with 404 "rw layer snapshot not
/// found", while the plain inspect and `DELETE` work. safeprune must not
/// take that 404 for a container that is gone: it plans the container
/// like any other, its size unknown, and removes it.
#[tokio::test(flavor = "multi_thread")]
async fn i_a_stopped_container_without_its_snapshot_is_planned_and_removed() {
    use util::node::{Cli, Runtime, decision};
    let engines = start_each(&[Store::Containerd]).await;
    let e = &engines[0];
    let image = e.import_busybox_image("base:1", None).await;
    let id = e.run_to_exit("snapshotless", &image, &[]).await;
    let kept = e.run_to_exit("whole", &image, &[]).await;
    e.ctr_ok(&["snapshots", "rm", &id]);

    // The engine's answers, as measured on 29.7.2.
    let (sized, body) = e.get(&format!("/containers/{id}/json?size=1")).await;
    assert_eq!(sized, 404, "{body}");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("snapshot not found")),
        "{body}"
    );
    let (unsized_status, body) = e.get(&format!("/containers/{id}/json")).await;
    assert_eq!(unsized_status, 200, "{body}");

    let runtime = Runtime::Docker(e.endpoint());
    let cli = Cli::new(
        &runtime,
        "containers: { min_age: \"0\" }\nimages: { enabled: false }\n",
    );
    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    let d = decision(&plan, &id);
    assert_eq!(d["decision"], "delete", "{d}");
    assert_eq!(d["bytes"], Value::Null, "its size is unknown: {d}");
    // The whole one still has its writable layer's size.
    assert!(decision(&plan, &kept)["bytes"].is_u64(), "{plan}");

    let (code, run) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{run}");
    let (_, left) = e.get("/containers/json?all=1").await;
    assert_eq!(left, json!([]), "{run}");
}

/// A multi-platform image as a pull leaves it on the containerd store: the
/// index whole, and of its platforms only this machine's content (imported
/// into dockerd's namespace with `ctr images import --platform`, which
/// fetches as a pull does). The list's size is what is there; safeprune
/// plans that size, removes the image, and what the stores free
/// (`du -sb`) is about what it said.
#[tokio::test(flavor = "multi_thread")]
async fn j_a_multi_platform_image_with_one_platform_present() {
    use util::node::{Cli, Runtime, decision};
    const MULTI: &str = "docker.io/library/multi:1";
    let engines = start_each(&[Store::Containerd]).await;
    let e = &engines[0];
    let (archive, index_digest, [host, other]) = multi_platform_archive(MULTI, false);
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), &archive).unwrap();
    util::run_ok(e.cli().arg("load").arg("-i").arg(file.path()));
    let content = e.ctr_ok(&["content", "ls", "-q"]);
    assert!(content.contains(&host.layer_digest), "{content}");
    assert!(!content.contains(&other.layer_digest), "{content}");
    let listed = list_sizes(e).await;
    let size = listed[&index_digest];
    eprintln!("(j) listed with one platform present: {size}");

    let runtime = Runtime::Docker(e.endpoint());
    let cli = Cli::new(&runtime, "images: { min_age: \"0\" }\n");
    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    let planned = decision(&plan, &index_digest);
    assert_eq!(planned["decision"], "delete", "{planned}");
    assert_eq!(planned["bytes"], size, "{planned}");

    let before = store_bytes(e);
    let (code, run) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{run}");
    let freed = before - store_bytes(e);
    eprintln!("(j) run freed {freed} by du, planned {size}");
    let (_, after) = e.get("/images/json?all=1").await;
    assert_eq!(after, json!([]), "{run}");
    let content = e.ctr_ok(&["content", "ls", "-q"]);
    for digest in [&index_digest, &host.manifest_digest, &host.layer_digest] {
        assert!(!content.contains(digest.as_str()), "{digest}: {content}");
    }
    // Within 2% (metadata and directories round either way).
    let off = freed.abs_diff(size);
    assert!(off * 50 <= size, "freed {freed}, planned {size}");
}
