//! The private CRI-O of the tests (`util::crio`) proved on itself, before
//! adapter tests lean on it: its images (distinct variants, a second name,
//! the pinned pause image), a pod made as kubelet makes it (an exited
//! container's status, an image volume, the sandbox's states), its
//! options, and a teardown that leaves nothing. Each test prints that it
//! is skipped where `$SAFEPRUNE_TEST_RUNTIMES` is unset.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::time::Duration;

use containerd_client::tonic::Status;
use k8s_cri::v1::{
    ContainerEventType, ContainerState, GetEventsRequest, Image, PodSandbox, PodSandboxState,
    VersionRequest,
};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::util;
use util::crio::{CrioContainer, CrioOptions, PAUSE_IMAGE, PrivateCrio};
use util::pod::Pod;
use util::{EXIT_0, RUN_FOREVER, Required, TEST_LABEL};

const APP: &str = "docker.io/library/app:1";
/// The image mounted as a volume.
const DATA: &str = "docker.io/library/data:1";

/// The one image of `images` (CRI's list) with id `id`.
fn image<'a>(images: &'a [Image], id: &str) -> &'a Image {
    images
        .iter()
        .find(|image| image.id == id)
        .unwrap_or_else(|| panic!("no image {id} in {images:?}"))
}

/// The strings of a list.
fn strings(list: &[String]) -> BTreeSet<&str> {
    list.iter().map(String::as_str).collect()
}

/// The sandboxes CRI lists (`ListPodSandbox`).
fn pods(crio: &PrivateCrio) -> Vec<PodSandbox> {
    crio.ctl().pods()
}

#[tokio::test]
async fn variants_are_distinct_images_and_the_pause_image_is_pinned() {
    let crio = PrivateCrio::start().await.required();
    let version = crio
        .cri()
        .await
        .version(VersionRequest::default())
        .await
        .expect("Version over gRPC")
        .into_inner();
    assert_eq!(
        (
            version.runtime_name.as_str(),
            version.runtime_version.as_str()
        ),
        ("cri-o", "1.36.3")
    );

    let app = crio.import_image(APP, "app");
    let data = crio.import_image(DATA, "data");
    assert_ne!(app, data, "two variants, two images");
    let app_again = crio.import_image("docker.io/library/app:again", "app");
    assert_eq!(app_again, app, "the same variant again is the same image");

    let images = crio.images();
    let pause = crio.image_id(PAUSE_IMAGE);
    let ids: BTreeSet<&str> = images.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(
        ids,
        BTreeSet::from([app.as_str(), data.as_str(), pause.as_str()])
    );
    assert_eq!(
        strings(&image(&images, &app).repo_tags),
        BTreeSet::from([APP, "docker.io/library/app:again"]),
        "a second import of a variant adds its name"
    );
    for (id, pinned) in [(&pause, true), (&app, false), (&data, false)] {
        assert_eq!(image(&images, id).pinned, pinned, "{id} in ListImages");
    }
    let status = crio.ctl().image_status(PAUSE_IMAGE);
    assert!(
        status.as_ref().is_some_and(|i| i.pinned),
        "ImageStatus: {status:?}"
    );

    // A taken name moves to the new image; the old one stays, nameless.
    let data_2 = crio.import_image(DATA, "data-2");
    assert_ne!(data_2, data);
    let images = crio.images();
    assert_eq!(strings(&image(&images, &data_2).repo_tags), [DATA].into());
    assert_eq!(strings(&image(&images, &data).repo_tags), BTreeSet::new());

    let image_fs = crio.ctl().image_fs_info();
    assert_eq!(
        image_fs
            .image_filesystems
            .first()
            .and_then(|fs| fs.fs_id.as_ref())
            .map(|id| id.mountpoint.as_str()),
        Some(
            crio.root()
                .join("overlay-images")
                .to_string_lossy()
                .as_ref()
        ),
        "{image_fs:?}"
    );

    // With pod events off, CRI-O's default, the stream ends at once.
    let mut events = crio
        .cri()
        .await
        .get_container_events(GetEventsRequest {})
        .await
        .expect("GetContainerEvents")
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), events.message()).await;
    assert!(
        matches!(first, Ok(Ok(None))),
        "the event stream ends: {first:?}"
    );

    // Status, verbose, as `crictl info` asked it: CRI-O's config in `info`.
    let status = crio.ctl().status();
    let config = crio.ctl().info("config");
    assert_eq!(config["sandboxImage"], PAUSE_IMAGE, "verbose Status");
    assert_eq!(config["crio"]["EnablePodEvents"], false);
    assert_eq!(config["crio"]["DropInfraCtr"], true);
    let conditions: Vec<(&str, bool)> = status
        .status
        .as_ref()
        .expect("conditions")
        .conditions
        .iter()
        .map(|c| (c.r#type.as_str(), c.status))
        .collect();
    assert_eq!(
        conditions,
        [("RuntimeReady", true), ("NetworkReady", false)],
        "no CNI config, and none needed: {status:?}"
    );
}

#[tokio::test]
async fn a_pod_run_as_kubelet_runs_it() {
    let crio = PrivateCrio::start().await.required();
    let app = crio.import_image(APP, "app");
    let data = crio.import_image(DATA, "data");
    let pod = crio.run_pod(&Pod::new("web", "default"));

    let listed = pods(&crio);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, pod.sandbox_id);
    assert_eq!(listed[0].state(), PodSandboxState::SandboxReady);
    assert_eq!(listed[0].labels["io.kubernetes.pod.uid"], pod.pod.uid);
    assert_eq!(listed[0].labels[TEST_LABEL], crio.scope());

    // An init container that exits.
    let init = pod.container("init", APP, &["sh", "-c", "echo init; exit 3"]);
    assert_eq!(pod.wait_exited(&init), 3);
    let all = crio.ctl().containers();
    let row = all
        .iter()
        .find(|c| c.id == init)
        .unwrap_or_else(|| panic!("{init} not in ListContainers: {all:?}"));
    assert_eq!(row.state(), ContainerState::ContainerExited);
    assert_eq!(row.pod_sandbox_id, pod.sandbox_id);
    let status = crio.container_status(&init);
    assert_eq!(status.exit_code, 3, "{status:?}");
    // An exit time in this century (ns since the epoch).
    let finished = chrono::DateTime::from_timestamp_nanos(status.finished_at);
    assert!(
        finished.to_rfc3339().starts_with("20"),
        "{finished}: {status:?}"
    );
    assert_eq!(status.image_id, app, "{status:?}");
    assert_eq!(status.labels["io.kubernetes.container.name"], "init");
    assert_eq!(
        status.annotations["io.kubernetes.container.restartCount"],
        "0"
    );
    let log = pod.log_dir().join("init/0.log");
    assert_eq!(status.log_path, log.to_string_lossy());
    let text = fs::read_to_string(&log).expect("the container's log");
    assert!(text.ends_with(" stdout F init\n"), "{text}");

    // A container that mounts an image as a volume, and runs until stopped.
    let mounting = pod.create(&CrioContainer {
        name: "app",
        image: APP,
        cmd: RUN_FOREVER,
        image_volumes: &[("/data", DATA)],
        ..CrioContainer::default()
    });
    pod.start(&mounting);
    let seen = crio
        .ctl()
        .exec(&mounting, &["busybox", "cat", "/data/extra"]);
    assert_eq!(seen, "data", "the volume is the image's layer");
    let status = crio.container_status(&mounting);
    assert_eq!(status.state(), ContainerState::ContainerRunning);
    let mount = status
        .mounts
        .first()
        .unwrap_or_else(|| panic!("no mount: {status:?}"));
    assert_eq!(mount.container_path, "/data", "{status:?}");
    assert_eq!(
        mount.image.as_ref().map(|i| i.image.as_str()),
        Some(data.as_str()),
        "{status:?}"
    );
    assert!(mount.readonly, "{status:?}");
    pod.stop_container(&mounting);
    assert_eq!(pod.wait_exited(&mounting), 0, "it exits on TERM");

    pod.stop();
    assert_eq!(pods(&crio)[0].state(), PodSandboxState::SandboxNotready);
    pod.remove();
    assert!(pods(&crio).is_empty());
    assert_eq!(crio.container_ids(), BTreeSet::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn options_turn_pod_events_on_and_pin_more_images() {
    let options = CrioOptions {
        pod_events: true,
        pinned_images: vec!["docker.io/library/pinned*".to_owned()],
        ..CrioOptions::default()
    };
    let crio = PrivateCrio::start_with(options).await.required();
    let app = crio.import_image(APP, "app");
    let pinned = crio.import_image("docker.io/library/pinned:1", "pinned");
    let pause = crio.image_id(PAUSE_IMAGE);
    let images = crio.images();
    for (id, is_pinned) in [(&pause, true), (&pinned, true), (&app, false)] {
        assert_eq!(image(&images, id).pinned, is_pinned, "{id}");
    }
    let config = crio.ctl().info("config");
    assert_eq!(config["crio"]["EnablePodEvents"], true);

    // The stream is up once a container's event comes through it: until
    // then, each try makes another container.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut cri = crio.cri().await;
    let reader = tokio::spawn(async move {
        let mut stream = cri
            .get_container_events(GetEventsRequest {})
            .await?
            .into_inner();
        while let Some(event) = stream.message().await? {
            let _ = tx.send((event.container_id, event.container_event_type));
        }
        Ok::<_, Status>(())
    });
    let pod = crio.run_pod(&Pod::new("web", "default"));
    for attempt in 0.. {
        let warm = pod.container(&format!("warm-{attempt}"), APP, EXIT_0);
        let seen = events_until(&mut rx, Duration::from_secs(2), |(id, _)| *id == warm).await;
        if seen.is_some() {
            break;
        }
        assert!(attempt < 10, "no event comes through GetContainerEvents");
    }
    let init = pod.container("init", APP, EXIT_0);
    let stopped = ContainerEventType::ContainerStoppedEvent as i32;
    let seen = events_until(&mut rx, Duration::from_secs(20), |(id, kind)| {
        *id == init && *kind == stopped
    })
    .await
    .unwrap_or_else(|| panic!("no CONTAINER_STOPPED_EVENT of {init}"));
    // CREATED always comes before STOPPED; STARTED of a container that
    // exits at once may not come at all (measured once in a CI run: CRI-O
    // sent CREATED and STOPPED only).
    let created = (
        init.clone(),
        ContainerEventType::ContainerCreatedEvent as i32,
    );
    assert!(seen.contains(&created), "CREATED of {init} in {seen:?}");
    reader.abort();
}

/// The events from `rx` up to the first that `until` takes, that one
/// included; `None` if it has not come `within`.
async fn events_until(
    rx: &mut UnboundedReceiver<(String, i32)>,
    within: Duration,
    until: impl Fn(&(String, i32)) -> bool,
) -> Option<Vec<(String, i32)>> {
    let mut seen = Vec::new();
    tokio::time::timeout(within, async {
        while let Some(event) = rx.recv().await {
            let done = until(&event);
            seen.push(event);
            if done {
                return true;
            }
        }
        false
    })
    .await
    .ok()
    .filter(|done| *done)
    .map(|_| seen)
}

/// The processes whose command line names `dir`.
fn processes_naming(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy();
    fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|entry| fs::read(entry.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(dir.as_ref()))
        .collect()
}

/// The mounts under `dir` in the mount namespace of any process.
fn mounts_naming(dir: &Path) -> BTreeSet<String> {
    let dir = dir.to_string_lossy();
    fs::read_dir("/proc")
        .expect("read /proc")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|entry| fs::read_to_string(entry.path().join("mountinfo")).ok())
        .flat_map(|mountinfo| {
            mountinfo
                .lines()
                .filter_map(|line| line.split(' ').nth(4))
                .filter(|point| point.starts_with(dir.as_ref()))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test]
async fn drop_leaves_no_process_mount_cgroup_or_directory() {
    let crio = PrivateCrio::start().await.required();
    crio.import_image(APP, "app");
    crio.import_image(DATA, "data");
    let pod = crio.run_pod(&Pod::new("web", "default"));
    let running = pod.create(&CrioContainer {
        name: "app",
        image: APP,
        cmd: RUN_FOREVER,
        image_volumes: &[("/data", DATA)],
        ..CrioContainer::default()
    });
    pod.start(&running);
    let dir = crio.dir().to_path_buf();
    let scope = crio.scope().to_owned();
    let processes = processes_naming(&dir);
    assert!(
        processes.iter().any(|p| p
            .split(' ')
            .next()
            .is_some_and(|bin| bin.ends_with("/conmon"))),
        "a conmon runs: {processes:#?}"
    );
    let mounts = mounts_naming(&dir);
    assert!(
        mounts.iter().any(|m| m.ends_with("/merged")),
        "overlays are mounted in CRI-O's namespace: {mounts:#?}"
    );
    drop(pod);

    drop(crio);
    assert_eq!(processes_naming(&dir), Vec::<String>::new());
    assert_eq!(mounts_naming(&dir), BTreeSet::new());
    assert!(!dir.exists(), "{} is left", dir.display());
    let cgroups: Vec<_> = fs::read_dir("/sys/fs/cgroup")
        .expect("read /sys/fs/cgroup")
        .flatten()
        .map(|hierarchy| hierarchy.path().join(&scope))
        .chain([Path::new("/sys/fs/cgroup").join(&scope)])
        .filter(|tree| tree.exists())
        .collect();
    assert_eq!(cgroups, Vec::<std::path::PathBuf>::new());
}
