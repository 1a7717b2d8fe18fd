//! containerd's and CRI's records as the inventory's containers, sandboxes
//! and pods, with CRI answering and without it.

use chrono::DateTime;
use containerd_client::types::Descriptor;
use k8s_cri::v1::{ContainerMetadata, ContainerState as CriState, PodSandboxMetadata};
use prost_types::Timestamp;

use super::*;

fn labels(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn ts(seconds: i64) -> Timestamp {
    Timestamp { seconds, nanos: 0 }
}

const SANDBOX: &str = "5b0000000000000000000000000000000000000000000000000000000000000a";

fn cri_labels(kind: &str) -> HashMap<String, String> {
    labels(&[
        (LABEL_CRI_KIND, kind),
        (LABEL_POD_UID, "uid-1"),
        (LABEL_POD_NAME, "web"),
        (LABEL_POD_NAMESPACE, "default"),
        ("io.kubernetes.container.name", "istio-init"),
    ])
}

fn native(id: &str, labels: HashMap<String, String>) -> NativeContainer {
    NativeContainer {
        id: id.to_owned(),
        labels,
        image: "docker.io/library/busybox:1.36".to_owned(),
        created_at: Some(ts(1_795_000_000)),
        ..NativeContainer::default()
    }
}

fn with_extension(mut c: NativeContainer, key: &str, json: &str) -> NativeContainer {
    c.extensions.insert(
        key.to_owned(),
        Any {
            type_url: "github.com/containerd/cri/pkg/store/container/Metadata".to_owned(),
            value: json.as_bytes().to_vec(),
        },
    );
    c
}

fn with_spec_annotation(mut c: NativeContainer, key: &str, value: &str) -> NativeContainer {
    let spec = serde_json::json!({ "ociVersion": "1.0.2", "annotations": { key: value } });
    c.spec = Some(Any {
        type_url: "types.containerd.io/opencontainers/runtime-spec/1/Spec".to_owned(),
        value: spec.to_string().into_bytes(),
    });
    c
}

fn task(id: &str, status: TaskStatus, exited_at: Option<Timestamp>) -> Process {
    // containerd 1.6 fills `id`, not `container_id` (measured).
    Process {
        id: id.to_owned(),
        status: status as i32,
        exited_at,
        ..Process::default()
    }
}

fn record(name: &str, digest: &str) -> ImageRecord {
    ImageRecord {
        name: name.to_owned(),
        target: Some(Descriptor {
            digest: digest.to_owned(),
            ..Descriptor::default()
        }),
        ..ImageRecord::default()
    }
}

fn cri_container(id: &str, state: CriState) -> CriContainer {
    CriContainer {
        id: id.to_owned(),
        pod_sandbox_id: SANDBOX.to_owned(),
        metadata: Some(ContainerMetadata {
            name: "istio-init".to_owned(),
            attempt: 0,
        }),
        state: state as i32,
        ..CriContainer::default()
    }
}

fn cri_sandbox(id: &str, ready: bool) -> CriPod {
    CriPod {
        id: id.to_owned(),
        metadata: Some(PodSandboxMetadata {
            name: "web".to_owned(),
            uid: "uid-1".to_owned(),
            namespace: "default".to_owned(),
            attempt: 0,
        }),
        state: if ready {
            PodSandboxState::SandboxReady as i32
        } else {
            PodSandboxState::SandboxNotready as i32
        },
        ..CriPod::default()
    }
}

fn data(containers: Vec<NativeContainer>, tasks: Vec<Process>) -> NamespaceData {
    NamespaceData {
        namespace: "k8s.io".to_owned(),
        containers,
        tasks,
        images: vec![record("docker.io/library/busybox:1.36", "sha256:feed")],
        content: HashMap::new(),
    }
}

#[test]
fn unset_zero_and_odd_timestamps_are_none() {
    assert_eq!(timestamp(None), None);
    assert_eq!(timestamp(Some(&ts(0))), None);
    // Go's zero time, which containerd sends for "never".
    assert_eq!(timestamp(Some(&ts(-62_135_596_800))), None);
    let negative_nanos = Timestamp {
        seconds: 1,
        nanos: -1,
    };
    assert_eq!(timestamp(Some(&negative_nanos)), None);
    let t = timestamp(Some(&Timestamp {
        seconds: 1_795_364_585,
        nanos: 838_801_127,
    }))
    .unwrap();
    assert_eq!(t.timestamp(), 1_795_364_585);
    assert_eq!(t.timestamp_subsec_nanos(), 838_801_127);
}

#[test]
fn cri_nanoseconds_zero_is_never() {
    assert_eq!(from_unix_nanos(0), None);
    assert_eq!(from_unix_nanos(-5), None);
    let t = from_unix_nanos(1_795_364_585_838_801_127).unwrap();
    assert_eq!(t.timestamp(), 1_795_364_585);
}

#[test]
fn qualified_ids_split_at_the_first_slash() {
    assert_eq!(qualified("k8s.io", "abc"), "k8s.io/abc");
    assert_eq!(split_qualified("k8s.io/abc"), Some(("k8s.io", "abc")));
    assert_eq!(
        split_qualified("k8s.io/sha256:ab/cd"),
        Some(("k8s.io", "sha256:ab/cd"))
    );
    for bad in ["abc", "/abc", "k8s.io/", ""] {
        assert_eq!(split_qualified(bad), None, "{bad}");
    }
}

#[test]
fn tasks_are_found_by_id_when_container_id_is_empty() {
    let mut newer = task("exec-or-id", TaskStatus::Running, None);
    newer.container_id = "c2".to_owned();
    let tasks = vec![task("c1", TaskStatus::Stopped, None), newer];
    let by_container = tasks_by_container(&tasks);
    assert!(by_container.contains_key("c1"));
    assert!(by_container.contains_key("c2"));
    assert!(!by_container.contains_key("exec-or-id"));
}

#[test]
fn task_states_fold_into_container_states() {
    assert_eq!(task_state(None), ContainerState::Created);
    let state = |s| task_state(Some(&task("c", s, None)));
    assert_eq!(state(TaskStatus::Created), ContainerState::Created);
    assert_eq!(state(TaskStatus::Running), ContainerState::Running);
    assert_eq!(state(TaskStatus::Stopped), ContainerState::Exited);
    assert_eq!(state(TaskStatus::Paused), ContainerState::Paused);
    assert_eq!(state(TaskStatus::Pausing), ContainerState::Paused);
    assert_eq!(state(TaskStatus::Unknown), ContainerState::Unknown);
    let mut odd = task("c", TaskStatus::Running, None);
    odd.status = 42;
    assert_eq!(task_state(Some(&odd)), ContainerState::Unknown);
}

#[test]
fn a_cri_container_takes_state_exit_time_and_sandbox_from_cri() {
    let exited = with_extension(
        native("c1", cri_labels(KIND_CONTAINER)),
        EXTENSION_CONTAINER,
        r#"{"Version":"v1","Metadata":{"Name":"istio-init_web_default_uid-1_0","SandboxID":"other"}}"#,
    );
    let status = ContainerStatus {
        id: "c1".to_owned(),
        state: CriState::ContainerExited as i32,
        finished_at: 1_795_364_585_000_000_000,
        ..ContainerStatus::default()
    };
    let mut view = CriView::default();
    view.containers.insert(
        "c1".to_owned(),
        (cri_container("c1", CriState::ContainerExited), Some(status)),
    );
    let containers = containers_of(&data(vec![exited], Vec::new()), Some(&view));
    let c = &containers[0];
    assert_eq!(c.id, "k8s.io/c1");
    assert_eq!(c.names, ["istio-init_web_default_uid-1_0"]);
    assert_eq!(c.state, ContainerState::Exited);
    assert_eq!(c.finished.unwrap().timestamp(), 1_795_364_585);
    assert_eq!(c.image_ref, "docker.io/library/busybox:1.36");
    assert_eq!(c.image_id, "k8s.io/sha256:feed");
    assert_eq!(c.labels["io.kubernetes.container.name"], "istio-init");
    let pod = c.pod.as_ref().unwrap();
    assert!(!pod.is_sandbox);
    // CRI's answer wins over the extension record.
    assert_eq!(pod.sandbox_id, Some(format!("k8s.io/{SANDBOX}")));
    assert_eq!(pod.pod_uid.as_deref(), Some("uid-1"));
    assert_eq!(pod.pod_name.as_deref(), Some("web"));
    assert_eq!(pod.pod_namespace.as_deref(), Some("default"));
}

#[test]
fn a_cri_container_unknown_to_a_answering_cri_is_unknown() {
    let view = CriView::default();
    let stopped = task("c1", TaskStatus::Stopped, Some(ts(1_795_000_100)));
    let containers = containers_of(
        &data(
            vec![native("c1", cri_labels(KIND_CONTAINER))],
            vec![stopped],
        ),
        Some(&view),
    );
    assert_eq!(containers[0].state, ContainerState::Unknown);
    assert!(containers[0].state.is_live());
}

#[test]
fn without_cri_the_sandbox_id_comes_from_the_record_or_the_spec() {
    let from_record = with_extension(
        native("c1", cri_labels(KIND_CONTAINER)),
        EXTENSION_CONTAINER,
        r#"{"Metadata":{"SandboxID":"sb-record"}}"#,
    );
    let from_spec = with_spec_annotation(
        native("c2", cri_labels(KIND_CONTAINER)),
        ANNOTATION_SANDBOX_ID,
        "sb-spec",
    );
    let unreadable = with_extension(
        native("c3", cri_labels(KIND_CONTAINER)),
        EXTENSION_CONTAINER,
        "not json",
    );
    let containers = containers_of(
        &data(vec![from_record, from_spec, unreadable], Vec::new()),
        None,
    );
    let sandbox = |i: usize| containers[i].pod.as_ref().unwrap().sandbox_id.clone();
    assert_eq!(sandbox(0).as_deref(), Some("k8s.io/sb-record"));
    assert_eq!(sandbox(1).as_deref(), Some("k8s.io/sb-spec"));
    assert_eq!(sandbox(2), None);
    // No task and no CRI: it has no process, and its exit time is unknown.
    assert_eq!(containers[0].state, ContainerState::Created);
    assert_eq!(containers[0].finished, None);
    assert_eq!(containers[2].names, ["c3"]);
}

#[test]
fn a_slim_record_converts_as_the_full_one_and_drops_the_spec_it_does_not_need() {
    let from_record = with_spec_annotation(
        with_extension(
            native("c1", cri_labels(KIND_CONTAINER)),
            EXTENSION_CONTAINER,
            r#"{"Metadata":{"SandboxID":"sb-record"}}"#,
        ),
        ANNOTATION_SANDBOX_ID,
        "sb-record",
    );
    let from_spec = with_spec_annotation(
        native("c2", cri_labels(KIND_CONTAINER)),
        ANNOTATION_SANDBOX_ID,
        "sb-spec",
    );
    let plain = with_spec_annotation(native("c3", labels(&[("a", "b")])), "x", "y");
    let full = vec![from_record, from_spec, plain];
    let slim: Vec<NativeContainer> = full.iter().map(slim_record).collect();
    let kept: Vec<bool> = slim.iter().map(|c| c.spec.is_some()).collect();
    assert_eq!(
        kept,
        [false, true, false],
        "the spec only where it names the sandbox"
    );
    let tasks = vec![task("c3", TaskStatus::Stopped, Some(ts(1_700_000_000)))];
    // (Compared as printed: a container is not `PartialEq`.)
    assert_eq!(
        format!("{:?}", containers_of(&data(slim, tasks.clone()), None)),
        format!("{:?}", containers_of(&data(full, tasks), None))
    );
}

#[test]
fn a_plain_container_takes_state_and_exit_time_from_its_task() {
    let exited_at = Some(ts(1_795_000_100));
    let mut ns = data(
        vec![
            native("stopped", HashMap::new()),
            native("running", HashMap::new()),
            native("never", labels(&[(LABEL_NERDCTL_NAME, "web")])),
        ],
        vec![
            task("stopped", TaskStatus::Stopped, exited_at),
            task("running", TaskStatus::Running, None),
        ],
    );
    ns.namespace = "other".to_owned();
    let containers = containers_of(&ns, None);
    let find = |id: &str| containers.iter().find(|c| c.id == id).unwrap();
    let stopped = find("other/stopped");
    assert_eq!(stopped.state, ContainerState::Exited);
    assert_eq!(stopped.finished.unwrap().timestamp(), 1_795_000_100);
    assert_eq!(stopped.names, ["stopped"]);
    assert_eq!(stopped.pod, None);
    assert_eq!(stopped.image_id, "other/sha256:feed");
    assert_eq!(find("other/running").state, ContainerState::Running);
    assert_eq!(find("other/running").finished, None);
    let never = find("other/never");
    assert_eq!(never.state, ContainerState::Created);
    assert_eq!(never.names, ["web"]);
}

#[test]
fn sandboxes_are_ready_by_cri_or_by_their_task() {
    let sandbox = |id: &str| native(id, cri_labels(KIND_SANDBOX));
    let ns = data(
        vec![sandbox("ready"), sandbox("stopped")],
        vec![task("ready", TaskStatus::Running, None)],
    );
    let view = CriView {
        sandboxes: vec![cri_sandbox("ready", true), cri_sandbox("stopped", false)],
        ..CriView::default()
    };
    let containers = containers_of(&ns, Some(&view));
    assert_eq!(containers[0].id, "k8s.io/ready");
    assert_eq!(containers[0].state, ContainerState::Running);
    assert_eq!(containers[1].state, ContainerState::Exited);
    assert!(
        containers
            .iter()
            .all(|c| c.pod.as_ref().unwrap().is_sandbox)
    );
    assert!(
        containers
            .iter()
            .all(|c| c.pod.as_ref().unwrap().sandbox_id.is_none())
    );

    let with_cri = sandboxes_of("k8s.io", Some(&view), &[]);
    let ready: Vec<(&str, bool)> = with_cri.iter().map(|s| (s.id.as_str(), s.ready)).collect();
    assert_eq!(ready, [("k8s.io/ready", true), ("k8s.io/stopped", false)]);
    assert_eq!(with_cri[0].pod_uid.as_deref(), Some("uid-1"));
    assert_eq!(with_cri[0].pod_name.as_deref(), Some("web"));

    let natively = containers_of(&ns, None);
    let without_cri = sandboxes_of("k8s.io", None, &natively);
    let ready: Vec<(&str, bool)> = without_cri
        .iter()
        .map(|s| (s.id.as_str(), s.ready))
        .collect();
    assert_eq!(ready, [("k8s.io/ready", true), ("k8s.io/stopped", false)]);
}

#[test]
fn odd_containers_do_not_panic() {
    let mut odd = native("", HashMap::new());
    odd.created_at = None;
    let mut no_time = native("x", labels(&[(LABEL_CRI_KIND, "")]));
    no_time.created_at = Some(ts(-1));
    no_time.spec = Some(Any {
        type_url: String::new(),
        value: b"\xff".to_vec(),
    });
    let containers = containers_of(&data(vec![odd, no_time], Vec::new()), None);
    assert_eq!(containers.len(), 1, "a container without id is left out");
    assert_eq!(containers[0].pod, None);
    assert!(containers[0].created > DateTime::<Utc>::MIN_UTC);
}

#[test]
fn sandbox_image_comes_from_the_verbose_config() {
    let info = |config: &str| HashMap::from([("config".to_owned(), config.to_owned())]);
    assert_eq!(
        sandbox_image_of(&info(r#"{"sandboxImage":"registry.k8s.io/pause:3.6"}"#)).as_deref(),
        Some("registry.k8s.io/pause:3.6")
    );
    assert_eq!(sandbox_image_of(&info(r#"{"sandboxImage":""}"#)), None);
    assert_eq!(sandbox_image_of(&info(r#"{"other":1}"#)), None);
    assert_eq!(sandbox_image_of(&info("not json")), None);
    assert_eq!(sandbox_image_of(&HashMap::new()), None);
}

#[test]
fn image_volumes_come_from_cri_records_config_and_the_specs_mount_sources() {
    // As containerd 2.3.4 records a container mounting two images (one by
    // reference, one by CRI's id) and lays the first out in its spec
    // (docs/engines.md, containerd 2.x).
    let manifest = "7f5b22770000000000000000000000000000000000000000000000000000790a";
    let config = serde_json::json!({
        "Metadata": {
            "Name": "app_web_default_uid-1_0",
            "SandboxID": SANDBOX,
            "Config": {"mounts": [
                {"container_path": "/volume", "readonly": true,
                 "image": {"image": "docker.io/library/data:1"}},
                {"container_path": "/models", "image": {"image": "sha256:d686"}},
                {"container_path": "/plain", "host_path": "/srv"}
            ]}
        }
    });
    let mut c = with_extension(
        native("app", cri_labels("container")),
        EXTENSION_CONTAINER,
        &config.to_string(),
    );
    let spec = serde_json::json!({"mounts": [
        {"destination": "/volume", "type": "bind", "options": ["rbind", "ro"],
         "source": format!("/run/containerd/io.containerd.grpc.v1.cri/image-volumes/{SANDBOX}/{manifest}")},
        {"destination": "/etc/hosts", "source": "/var/lib/kubelet/pods/uid-1/etc-hosts"}
    ]});
    c.spec = Some(Any {
        type_url: String::new(),
        value: spec.to_string().into_bytes(),
    });
    let data = NamespaceData {
        namespace: "k8s.io".into(),
        containers: vec![c],
        images: vec![record("sha256:d686", "sha256:models-manifest")],
        ..NamespaceData::default()
    };
    let containers = containers_of(&data, None);
    assert_eq!(
        containers[0].image_mounts,
        [
            "docker.io/library/data:1".to_owned(),
            format!("k8s.io/sha256:{manifest}"),
            "k8s.io/sha256:models-manifest".to_owned(),
            "sha256:d686".to_owned(),
        ]
    );
    // The watch keeps the spec of such a container: it names the volumes.
    assert!(slim_record(&data.containers[0]).spec.is_some());
    // A plain container mounts no image; an odd config hides nothing else.
    let odd = with_extension(
        native("odd", cri_labels("container")),
        EXTENSION_CONTAINER,
        &serde_json::json!({"Metadata": {"Name": "n", "SandboxID": SANDBOX, "Config": null}})
            .to_string(),
    );
    let data = NamespaceData {
        namespace: "k8s.io".into(),
        containers: vec![odd],
        ..NamespaceData::default()
    };
    let odd = &containers_of(&data, None)[0];
    assert!(odd.image_mounts.is_empty());
    assert_eq!(
        odd.pod.as_ref().and_then(|p| p.sandbox_id.clone()),
        Some(format!("k8s.io/{SANDBOX}"))
    );
}
