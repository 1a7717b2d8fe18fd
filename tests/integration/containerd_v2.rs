//! containerd 2.x as safeprune meets it on newer nodes, measured on a
//! private containerd 2.3.4 (from `$SAFEPRUNE_TEST_RUNTIMES`; each such
//! test prints that it is skipped where the variable is unset) and, where
//! the releases differ, on Debian's 1.6.20: image volumes (KEP-4639, CRI
//! `Mount.image`) and where they show, the lease that holds them, what
//! deleting their image does to the pod, and how each release names and
//! pins the sandbox image. docs/engines.md, "containerd 2.x", states these
//! facts; these tests hold them.

use crate::util;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use containerd_client::services::v1::{ListImagesRequest, PluginInfoRequest, PluginsRequest};
use containerd_client::tonic::{Code, Request};
use containerd_client::with_namespace;
use k8s_cri::v1::{
    ContainerState, ImageSpec, Mount, MountPropagation, PodSandboxStatusRequest,
    StartContainerRequest,
};
use serde_json::{Value, json};
use util::containerd::{
    CRI_NAMESPACE, ContainerdVersion, IMAGE_VOLUME_PATH, ImageVolumePod, Imported, LeaseResources,
    PodContainer, PrivateContainerd, SANDBOX_IMAGE, image_volume_mount,
};
use util::pod::Pod;
use util::{RUN_FOREVER, Required, runtime_in};

const APP: &str = "docker.io/library/app:1";
/// The image mounted as a volume.
const DATA: &str = "docker.io/library/data:1";
/// Where the CRI plugin keeps image volumes: under containerd's state.
const IMAGE_VOLUMES: &str = "state/io.containerd.grpc.v1.cri/image-volumes";
/// The extension in which the CRI plugin keeps a container's CRI config.
const CRI_METADATA: &str = "io.cri-containerd.container.metadata";
const PINNED_LABEL: &str = "io.cri-containerd.pinned";

/// A private containerd 2.3.4 with image `APP`, and `DATA` of a layer of
/// its own; `None` (printed: skipped) without the runtimes.
async fn engine() -> (PrivateContainerd, Imported, Imported) {
    let containerd = PrivateContainerd::start_v2().await.required();
    let app = containerd.import_busybox_image(CRI_NAMESPACE, APP);
    let data = containerd.import_image_with_extra(CRI_NAMESPACE, DATA, "volume");
    (containerd, app, data)
}

/// Pod `default/web` whose container `app` mounts `DATA`, named by its id
/// (as kubelet names it: the id its pull resolved).
async fn pod_mounting_data(containerd: &PrivateContainerd, data: &Imported) -> ImageVolumePod {
    let pod = Pod::new("web", "default");
    containerd
        .run_image_volume_pod(&pod, "app", APP, &data.config_digest)
        .await
}

/// Where the CRI plugin mounts `image` for the pod of `sandbox_id`:
/// `<state>/io.containerd.grpc.v1.cri/image-volumes/<sandbox id>/<hex>`,
/// with the hex of the image's manifest digest (its target), not its id.
fn volume_source(containerd: &PrivateContainerd, sandbox_id: &str, image: &Imported) -> String {
    let hex = image.digest.trim_start_matches("sha256:");
    format!(
        "{}/{sandbox_id}/{hex}",
        containerd.path(IMAGE_VOLUMES).display()
    )
}

/// The snapshot `key` as `ctr snapshots info` shows it, if it exists.
fn snapshot(containerd: &PrivateContainerd, key: &str) -> Option<Value> {
    let output = containerd
        .ctr(CRI_NAMESPACE)
        .args(["snapshots", "info", key])
        .output()
        .expect("run ctr snapshots info");
    output
        .status
        .success()
        .then(|| serde_json::from_slice(&output.stdout).expect("ctr prints JSON"))
}

/// `(name, labels)` of every image record in `k8s.io`, natively.
async fn native_images(
    containerd: &PrivateContainerd,
) -> BTreeMap<String, BTreeMap<String, String>> {
    let request = with_namespace!(ListImagesRequest { filters: vec![] }, CRI_NAMESPACE);
    Box::pin(containerd.native().images().list(request))
        .await
        .expect("list images natively")
        .into_inner()
        .images
        .into_iter()
        .map(|i| (i.name, i.labels.into_iter().collect()))
        .collect()
}

/// The reason containerd puts before an image volume's mount error:
/// `ImageVolumeMountFailed: ` from 2.3 on, none in 2.1 (measured on
/// Debian's 2.1.9).
fn mount_failed(containerd: &PrivateContainerd) -> &'static str {
    if containerd.release_at_least(2, 3) {
        "ImageVolumeMountFailed: "
    } else {
        ""
    }
}

fn is_mounted(containerd: &PrivateContainerd, path: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{}/mountinfo", containerd.pid()))
        .expect("containerd's mountinfo")
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(path))
}

/// Without the runtimes a test of containerd 2 fails, saying how to fetch
/// them: Debian's runtimes are never optional.
#[test]
fn without_the_runtimes_a_test_of_containerd_2_fails_saying_how_to_fetch_them() {
    let missing = runtime_in(None, "containerd", "containerd 2.x").unwrap_err();
    assert_eq!(
        missing.to_string(),
        "containerd 2.x tests need Debian's newer runtimes: run scripts/runtimes.sh target/runtimes (scripts/test.sh does), or set SAFEPRUNE_TEST_RUNTIMES to where they are"
    );
    assert_eq!(
        runtime_in(Some("".into()), "containerd", "containerd 2.x").unwrap_err(),
        missing
    );
    let failed =
        std::panic::catch_unwind(|| runtime_in(None, "containerd", "containerd 2.x").required())
            .expect_err("a test that needs a missing runtime fails");
    assert_eq!(failed.downcast_ref::<String>(), Some(&missing.to_string()));
}

/// A set no registry serves (CRI-O, cri-dockerd) says what to provide
/// where it is missing; a fetched set that is missing says how to fetch
/// it. Either way a test that needs it fails: the optional sets' tests
/// are left out of a run where their set is absent, not passed.
#[test]
fn a_missing_runtime_says_what_to_provide_and_a_found_one_its_version() {
    let root = tempfile::tempdir().expect("a temporary directory");
    let missing = runtime_in(Some(root.path().into()), "crio", "CRI-O").unwrap_err();
    assert_eq!(
        missing.to_string(),
        format!(
            "CRI-O tests need {}/crio (crio, pinns and copyimg (CRI-O 1.36 or later); no registry here serves it): CONTRIBUTING.md, \"Runtimes\"",
            root.path().display()
        )
    );
    std::fs::create_dir(root.path().join("crio")).expect("mkdir crio");
    let found = runtime_in(Some(root.path().into()), "crio", "CRI-O").expect("found");
    assert_eq!(found.version, "its own build");
    std::fs::create_dir(root.path().join("containerd")).expect("mkdir containerd");
    std::fs::write(root.path().join("containerd/VERSION"), "2.1.9\n").expect("VERSION");
    let found =
        runtime_in(Some(root.path().into()), "containerd", "containerd 2.x").expect("found");
    assert_eq!(found.version, "2.1.9");
    let missing = runtime_in(Some(root.path().into()), "docker", "Docker 28+").unwrap_err();
    assert_eq!(
        missing.to_string(),
        format!(
            "Docker 28+ tests need {}/docker: run scripts/runtimes.sh {} (scripts/test.sh does)",
            root.path().display(),
            root.path().display()
        )
    );
}

#[tokio::test]
async fn an_image_volume_shows_only_in_the_containers_mounts_never_as_its_image() {
    let (containerd, app, data) = engine().await;
    assert_eq!(containerd.version(), ContainerdVersion::V2);
    let pod = pod_mounting_data(&containerd, &data).await;
    // A second container of the pod mounts it by reference: both share
    // the pod's one mount of the image.
    let reader = PodContainer {
        name: "reader",
        image: APP,
        cmd: RUN_FOREVER,
        mounts: vec![image_volume_mount(DATA, "/data")],
        ..PodContainer::default()
    };
    let reader = containerd
        .try_create_pod_container(&pod.pod, &pod.sandbox_id, reader)
        .await
        .expect("create a container mounting the image by reference");
    containerd.start_container(&reader).await;
    let source = volume_source(&containerd, &pod.sandbox_id, &data);
    assert!(is_mounted(&containerd, &source), "{source} is mounted");

    let cases = [
        (
            &pod.container_id,
            data.config_digest.as_str(),
            IMAGE_VOLUME_PATH,
        ),
        (&reader, DATA, "/data"),
    ];
    for (id, given, path) in cases {
        // The native record: the container's own image, no label of the
        // volume's; the mount in its spec, bound read-only from the pod's
        // mount; the image as CRI was given it only in the CRI plugin's
        // extension.
        let record = containerd.native_container(CRI_NAMESPACE, id).await;
        assert_eq!(record.image, APP);
        assert!(
            record
                .labels
                .iter()
                .all(|(k, v)| !format!("{k}={v}").contains("data")
                    && !v.contains(data.digest.trim_start_matches("sha256:"))),
            "{:?}",
            record.labels
        );
        let spec: Value =
            serde_json::from_slice(&record.spec.expect("a spec").value).expect("spec JSON");
        let mount = spec["mounts"]
            .as_array()
            .expect("spec mounts")
            .iter()
            .find(|m| m["destination"] == path)
            .unwrap_or_else(|| panic!("no mount at {path}: {spec}"));
        assert_eq!(
            mount,
            &json!({
                "destination": path,
                "type": "bind",
                "source": source,
                "options": ["rbind", "rprivate", "ro"],
            })
        );
        let cri_mounts = json!([{
            "container_path": path,
            "host_path": source,
            "readonly": true,
            "image": { "image": given },
        }]);
        let metadata: Value =
            serde_json::from_slice(&record.extensions[CRI_METADATA].value).expect("JSON");
        assert_eq!(metadata["Metadata"]["Config"]["mounts"], cri_mounts);

        // CRI: the image as given (an id or a reference, verbatim) in
        // `mounts`, verbose or not; `image` and `imageRef` are the
        // container's own.
        for verbose in [false, true] {
            let answer = containerd.container_status(id, verbose).await;
            let status = answer.status.expect("a status");
            assert_eq!(status.state, ContainerState::ContainerRunning as i32);
            assert_eq!(status.image.expect("an image").image, APP);
            assert_eq!(status.image_ref, app.config_digest);
            // CRI's `image_id` is filled from containerd 2.3 on; 2.1
            // leaves it empty (measured on Debian's 2.1.9). safeprune reads
            // `image_ref`.
            let image_id = if containerd.release_at_least(2, 3) {
                app.config_digest.as_str()
            } else {
                ""
            };
            assert_eq!(status.image_id, image_id);
            assert_eq!(
                status.mounts,
                vec![Mount {
                    container_path: path.to_owned(),
                    host_path: source.clone(),
                    readonly: true,
                    propagation: MountPropagation::PropagationPrivate as i32,
                    image: Some(ImageSpec {
                        image: given.to_owned(),
                        ..ImageSpec::default()
                    }),
                    ..Mount::default()
                }]
            );
            if verbose {
                let info: Value = serde_json::from_str(&answer.info["info"]).expect("info JSON");
                assert_eq!(info["config"]["mounts"], cri_mounts);
                assert_eq!(info["sandboxID"], json!(pod.sandbox_id));
            } else {
                assert!(answer.info.is_empty(), "{:?}", answer.info);
            }
        }
    }
}

#[tokio::test]
async fn the_sandboxs_lease_holds_the_image_volume_until_the_pod_is_removed() {
    let (containerd, _, data) = engine().await;
    assert_eq!(containerd.leases(CRI_NAMESPACE).await, vec![]);
    let pod = pod_mounting_data(&containerd, &data).await;
    let source = volume_source(&containerd, &pod.sandbox_id, &data);
    // One lease, named after the sandbox, with no label: it holds the
    // volume's snapshot, whose key is the mount's path, and through it the
    // image's unpacked layer.
    let lease = LeaseResources {
        id: pod.sandbox_id.clone(),
        labels: BTreeMap::new(),
        resources: vec![("snapshots/overlayfs".to_owned(), source.clone())],
    };
    assert_eq!(containerd.leases(CRI_NAMESPACE).await, vec![lease.clone()]);
    let volume = snapshot(&containerd, &source).expect("the volume's snapshot");
    assert_eq!(volume["Kind"], "Active");
    assert_eq!(volume["Parent"], json!(data.layer_digest));

    // A stopped pod: the mount and its snapshot are gone, the lease stays
    // (naming the snapshot no more there).
    containerd.stop_pod_sandbox(&pod.sandbox_id).await;
    assert!(!is_mounted(&containerd, &source));
    assert_eq!(snapshot(&containerd, &source), None);
    assert_eq!(containerd.leases(CRI_NAMESPACE).await, vec![lease]);

    containerd.remove_pod_sandbox(&pod.sandbox_id).await;
    assert_eq!(containerd.leases(CRI_NAMESPACE).await, vec![]);
}

/// How the test deletes the volume's image while the pod runs.
#[derive(Debug, Clone, Copy)]
enum Deletion {
    /// CRI `RemoveImage` by id, as kubelet's image GC or `crictl rmi`.
    CriRemoveImage,
    /// `ctr images rm` of every name: the reference and the id the CRI
    /// plugin names it by too.
    NativeEveryName,
}

async fn deleting_the_volume_image_while_the_pod_runs(deletion: Deletion) {
    let (containerd, _, data) = engine().await;
    let pod = pod_mounting_data(&containerd, &data).await;
    let source = volume_source(&containerd, &pod.sandbox_id, &data);
    match deletion {
        // containerd does not ask whether a container mounts it.
        Deletion::CriRemoveImage => containerd
            .try_remove_image(&data.config_digest)
            .await
            .expect("CRI removes an image a running pod mounts"),
        Deletion::NativeEveryName => {
            containerd.ctr_ok(CRI_NAMESPACE, &["images", "rm", DATA, &data.config_digest]);
        }
    }
    let images = native_images(&containerd).await;
    assert!(
        !images.contains_key(DATA) && !images.contains_key(&data.config_digest),
        "{deletion:?}: {images:?}"
    );
    // CRI learns of a native delete from containerd's events, a moment
    // later (measured: once in a CI run it still listed the image when
    // asked at once); a CRI removal is immediate.
    let deadline = Instant::now() + Duration::from_secs(10);
    while containerd
        .cri_images()
        .await
        .iter()
        .any(|i| i.id == data.config_digest)
    {
        assert!(
            Instant::now() < deadline,
            "{deletion:?}: CRI still lists {DATA} 10 s after its deletion"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The pod runs on, its volume mounted and held by the lease: the
    // unpacked layer stays, while the image's content (manifest, config,
    // layer blob) goes with containerd's next garbage collection.
    let status = containerd.container_status(&pod.container_id, false).await;
    assert_eq!(
        status.status.expect("a status").state,
        ContainerState::ContainerRunning as i32,
        "{deletion:?}"
    );
    assert!(is_mounted(&containerd, &source), "{deletion:?}");
    assert_eq!(containerd.leases(CRI_NAMESPACE).await.len(), 1);
    assert!(snapshot(&containerd, &data.layer_digest).is_some());
    let begun = Instant::now();
    while containerd
        .ctr_ok(CRI_NAMESPACE, &["content", "ls", "-q"])
        .contains(&data.digest)
    {
        assert!(
            begun.elapsed() < Duration::from_secs(20),
            "{deletion:?}: the manifest stays"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Its container exits; CRI never starts an exited container again:
    // kubelet makes a new one, which cannot mount the image.
    containerd.stop_container(&pod.container_id).await;
    containerd.wait_container_exited(&pod.container_id).await;
    let again = Box::pin(containerd.cri().start_container(StartContainerRequest {
        container_id: pod.container_id.clone(),
    }))
    .await
    .expect_err("an exited container does not start again");
    assert_eq!(again.code(), Code::Unknown);
    assert_eq!(
        again.message(),
        format!(
            "failed to set starting state for container \"{}\": container is in CONTAINER_EXITED state",
            pod.container_id
        )
    );
    let refused = containerd
        .recreate_image_volume_container(&pod, 1)
        .await
        .expect_err("no container mounts a deleted image");
    assert_eq!(refused.code(), Code::NotFound, "{deletion:?}");
    assert_eq!(
        refused.message(),
        format!(
            "failed to mount image volume: {}failed to resolve image \"{}\": not found",
            mount_failed(&containerd),
            data.config_digest
        ),
        "{deletion:?}"
    );
}

#[tokio::test]
async fn cri_removes_a_mounted_image_and_the_pods_next_container_fails() {
    deleting_the_volume_image_while_the_pod_runs(Deletion::CriRemoveImage).await;
}

#[tokio::test]
async fn ctr_removes_a_mounted_image_and_the_pods_next_container_fails() {
    deleting_the_volume_image_while_the_pod_runs(Deletion::NativeEveryName).await;
}

#[tokio::test]
async fn removing_only_the_reference_natively_leaves_the_image_under_its_id() {
    let (containerd, _, data) = engine().await;
    let pod = pod_mounting_data(&containerd, &data).await;
    containerd.ctr_ok(CRI_NAMESPACE, &["images", "rm", DATA]);
    // The CRI plugin's own record, named by the id, keeps the image: CRI
    // lists it untagged (once it has the deletion's event: a moment after
    // the native delete), and it still mounts by id, no longer by name.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = containerd.cri_images().await;
        let image = listed
            .iter()
            .find(|i| i.id == data.config_digest)
            .expect("the image, by its id");
        if image.repo_tags.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "CRI still lists {:?} 10 s after their removal",
            image.repo_tags
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let by_id = containerd.recreate_image_volume_container(&pod, 1).await;
    assert!(by_id.is_ok(), "{by_id:?}");
    let by_name = PodContainer {
        name: "by-name",
        image: APP,
        cmd: RUN_FOREVER,
        mounts: vec![image_volume_mount(DATA, "/data")],
        ..PodContainer::default()
    };
    let by_name = containerd
        .try_create_pod_container(&pod.pod, &pod.sandbox_id, by_name)
        .await
        .expect_err("the name is gone");
    assert_eq!(
        by_name.message(),
        format!(
            "failed to mount image volume: {}failed to resolve image \"{DATA}\": not found",
            mount_failed(&containerd)
        )
    );
}

/// The sandbox image as CRI and the native store show it, on either
/// release: pinned (CRI), the pin label on each of its records (natively),
/// and the sandbox image in the verbose status's config.
async fn sandbox_image_facts(containerd: &PrivateContainerd) -> (bool, Vec<bool>, Option<String>) {
    let pause = containerd
        .cri_images()
        .await
        .into_iter()
        .find(|i| i.repo_tags == [SANDBOX_IMAGE])
        .expect("the sandbox image, imported");
    let labelled = native_images(containerd)
        .await
        .into_iter()
        .filter(|(name, _)| name == SANDBOX_IMAGE || *name == pause.id)
        .map(|(_, labels)| labels.get(PINNED_LABEL).map(String::as_str) == Some("pinned"))
        .collect();
    let config: Value =
        serde_json::from_str(&containerd.cri_status().await["config"]).expect("config JSON");
    let named = config
        .get("sandboxImage")
        .map(|v| v.as_str().expect("a string").to_owned());
    (pause.pinned, labelled, named)
}

#[tokio::test]
async fn containerd_2_pins_the_imported_sandbox_image_and_1_6_names_it_in_its_status() {
    let old = PrivateContainerd::start().await;
    assert_eq!(
        sandbox_image_facts(&old).await,
        (false, vec![false, false], Some(SANDBOX_IMAGE.to_owned())),
        "1.6.20: not pinned, no label, named in the status"
    );
    let (containerd, _, _) = engine().await;
    assert_eq!(
        sandbox_image_facts(&containerd).await,
        (true, vec![true, true], None),
        "2.3.4: pinned, labelled, not in the status"
    );
    let status = containerd.cri_status().await;
    assert!(
        !status["config"].contains("pause"),
        "2.3.4's status names no sandbox image: {}",
        status["config"]
    );
    // Only user images are pinned.
    let pinned: Vec<_> = containerd
        .cri_images()
        .await
        .into_iter()
        .filter(|i| i.pinned)
        .flat_map(|i| i.repo_tags)
        .collect();
    assert_eq!(pinned, [SANDBOX_IMAGE]);
    // A pod's verbose status names the image its sandbox runs.
    let pod = Pod::new("web", "default");
    let sandbox_id = containerd.run_pod_sandbox(&pod).await;
    let answer = Box::pin(
        containerd
            .cri()
            .pod_sandbox_status(PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id,
                verbose: true,
            }),
    )
    .await
    .expect("sandbox status")
    .into_inner();
    let info: Value = serde_json::from_str(&answer.info["info"]).expect("info JSON");
    assert_eq!(info["image"], SANDBOX_IMAGE);
}

#[tokio::test]
async fn introspection_exports_no_cri_image_config_on_containerd_2() {
    let (containerd, _, _) = engine().await;
    let plugins = Box::pin(
        containerd
            .native()
            .introspection()
            .plugins(PluginsRequest { filters: vec![] }),
    )
    .await
    .expect("introspection")
    .into_inner()
    .plugins;
    let cri: BTreeMap<String, BTreeMap<String, String>> = plugins
        .into_iter()
        .filter(|p| p.r#type.starts_with("io.containerd.cri.") || p.id == "cri")
        .map(|p| {
            (
                format!("{}.{}", p.r#type, p.id),
                p.exports.into_iter().collect(),
            )
        })
        .collect();
    assert_eq!(
        cri,
        BTreeMap::from([
            ("io.containerd.cri.v1.images".to_owned(), BTreeMap::new()),
            (
                "io.containerd.cri.v1.runtime".to_owned(),
                BTreeMap::from([("CRIVersion".to_owned(), "v1".to_owned())])
            ),
            ("io.containerd.grpc.v1.cri".to_owned(), BTreeMap::new()),
        ])
    );
    let info = Box::pin(
        containerd
            .native()
            .introspection()
            .plugin_info(PluginInfoRequest {
                r#type: "io.containerd.cri.v1".to_owned(),
                id: "images".to_owned(),
                options: None,
            }),
    )
    .await
    .expect("plugin info")
    .into_inner();
    assert_eq!(info.extra, None);
}

/// safeprune keeps an image a live pod mounts as a volume. Its
/// container has exited (crashed) when safeprune runs; the image would be
/// eligible by age; after the run, kubelet's restart of the container
/// (attempt 1, the same mount) succeeds. Before, `run` deleted the image
/// and the restart failed with `ImageVolumeMountFailed`.
#[tokio::test]
async fn an_image_a_live_pod_mounts_is_kept_and_the_pods_container_restarts_after_a_run() {
    use util::node::{Cli, Runtime};
    let (containerd, _app, data) = engine().await;
    let p = pod_mounting_data(&containerd, &data).await;
    containerd.stop_container(&p.container_id).await;
    containerd.wait_container_exited(&p.container_id).await;
    let endpoint = containerd.endpoint();
    let cli = Cli::new(
        &Runtime::Containerd(&endpoint, &[CRI_NAMESPACE]),
        "images: {min_age: 0s}\ncontainers: {min_age: 0s}\n",
    );
    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    let decision = util::node::decision_named(&report, DATA);
    assert_eq!(decision["rule"], "in_use", "{decision}");
    assert!(
        decision["detail"]
            .as_str()
            .unwrap()
            .starts_with("mounted as a volume by kept container app_web_default_"),
        "{decision}"
    );
    assert!(
        containerd
            .cri_images()
            .await
            .iter()
            .any(|i| i.repo_tags.iter().any(|t| t == DATA)),
        "{DATA} is gone"
    );
    // kubelet restarts the container: its mount resolves.
    containerd
        .recreate_image_volume_container(&p, 1)
        .await
        .unwrap_or_else(|e| panic!("the restart after safeprune's run failed: {e}"));
    // And `explain` names the use.
    let out = cli.run(&["explain", DATA]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("mounted as a volume by kept container"),
        "{text}"
    );
}

/// The node's sandbox image is kept whatever it is named, by the
/// runtime's own facts: with no keep pattern and no pod left, containerd
/// 2.3.4's CRI reports it pinned, and 1.6.20 names it in its status.
#[tokio::test]
async fn the_sandbox_image_is_kept_by_the_runtimes_pin_whatever_its_name() {
    use util::node::{Cli, Runtime};
    for version in [ContainerdVersion::V1_6, ContainerdVersion::V2] {
        let containerd = PrivateContainerd::start_version(version).await.required();
        let endpoint = containerd.endpoint();
        let cli = Cli::new(
            &Runtime::Containerd(&endpoint, &[CRI_NAMESPACE]),
            "images: {min_age: 0s, keep: []}\n",
        );
        let (code, report) = cli.json(&["run", "--output", "json"]);
        assert_eq!(code, Some(0), "{version:?}: {report}");
        let pause = util::node::decision_named(&report, SANDBOX_IMAGE);
        assert_eq!(pause["rule"], "pinned", "{version:?}: {pause}");
        assert!(
            containerd
                .cri_images()
                .await
                .iter()
                .any(|i| i.repo_tags.iter().any(|t| t == SANDBOX_IMAGE)),
            "{version:?}: the sandbox image is gone"
        );
    }
}

/// Image volumes, with the harness playing kubelet over CRI (`util::kubelet`,
/// as crictl did before): a pod whose container mounts `DATA` as an image
/// volume, made by `RunPodSandbox`, `CreateContainer` and `StartContainer`
/// as kubelet makes it (each image named by the id its pull resolved, with
/// the pod spec's name). The container exits; safeprune runs with every
/// age rule at 0; then kubelet's restart, the next attempt with the same
/// mount, starts.
#[tokio::test]
async fn a_pod_kubelet_made_with_an_image_volume_restarts_after_a_run() {
    use util::kubelet::{CriContainer, Kubelet};
    use util::node::{Cli, Runtime};
    let (containerd, _app, data) = engine().await;
    // containerd serves CRI on its own socket.
    let kubelet = Kubelet::new(
        containerd.socket(),
        &containerd.path("kubelet"),
        containerd.scope(),
    );
    let pod = kubelet.run_pod(&Pod::new("reader", "default"));
    let container = |attempt: u32| CriContainer {
        name: "app",
        attempt,
        image: APP,
        cmd: RUN_FOREVER,
        image_volumes: &[(IMAGE_VOLUME_PATH, DATA)],
        ..CriContainer::default()
    };
    let first = pod.create(&container(0));
    pod.start(&first);
    pod.stop_container(&first);

    let endpoint = containerd.endpoint();
    let cli = Cli::new(
        &Runtime::Containerd(&endpoint, &[CRI_NAMESPACE]),
        "images: {min_age: 0s}\ncontainers: {min_age: 0s}\n",
    );
    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    let kept = util::node::decision_named(&report, DATA);
    assert_eq!(kept["rule"], "in_use", "{kept}");
    assert!(
        kubelet.image_ids().contains(&data.config_digest),
        "CRI no longer lists {DATA}"
    );
    // kubelet's restart of the container: the next attempt, same mount.
    let again = pod.create(&container(1));
    pod.start(&again);
    assert_eq!(
        kubelet.container_status(&again).state(),
        ContainerState::ContainerRunning
    );
}
