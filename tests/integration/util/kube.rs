//! Kubelet's part for the `DaemonSet`'s pod: `deploy/kubernetes/` read as
//! kubelet reads the pod it schedules, and turned into the CRI configs
//! kubelet would send, so that a test runs safeprune's pod exactly as the
//! manifest says without restating it.
//!
//! What is read: the resources the kustomization lists; the `DaemonSet`'s
//! pod template (its one container's image, args, env, ports, volume
//! mounts, resources, security contexts, liveness probe, grace period);
//! the `ConfigMap` its volume names. What a field the stand-in does not know
//! would need (another kind of volume, another `fieldRef`) panics, so a
//! manifest change cannot pass unseen. The host paths of `hostPath`
//! volumes are the node's; a test maps each to its private engine's
//! (`HostPaths`), and an unmapped one panics: a new host path in the
//! manifest is a new privilege, and must be looked at.

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::FileTypeExt as _;
use std::path::{Path, PathBuf};

use k8s_cri::v1::security_profile::ProfileType;
use k8s_cri::v1::{
    Capability, ContainerConfig, ContainerMetadata, ImageSpec, Int64Value, KeyValue,
    LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, Mount, NamespaceMode, NamespaceOption,
    PodSandboxConfig, PodSandboxMetadata, SecurityProfile,
};
use serde_json::Value;

/// The repository's Kubernetes manifests.
const DEPLOY_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes");

/// The paths kubelet masks and makes read-only in a container that is not
/// privileged (Kubernetes' defaults for `procMount: Default`); containerd
/// applies none of its own when CRI sends none.
const MASKED_PATHS: &[&str] = &[
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
];
const READONLY_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The objects `kubectl apply -k deploy/kubernetes` would create.
pub struct Manifests {
    pub objects: Vec<Value>,
}

impl Manifests {
    /// Reads the resources `deploy/kubernetes/kustomization.yaml` lists,
    /// following those that are directories (bases) to their own.
    pub fn load() -> Self {
        let mut objects = Vec::new();
        kustomization_objects(Path::new(DEPLOY_DIR), &mut objects);
        Self { objects }
    }

    /// The objects `kubectl apply -k deploy/kubernetes/<overlay>` would
    /// create: its resources, with its JSON patches applied.
    pub fn load_overlay(overlay: &str) -> Self {
        let mut objects = Vec::new();
        kustomization_objects(&Path::new(DEPLOY_DIR).join(overlay), &mut objects);
        Self { objects }
    }

    /// The `hostPath` volume `volume` moved to `path`, host and mount alike:
    /// what an operator does for a node that keeps that directory
    /// elsewhere (the overlays mount each host path at its own path).
    pub fn move_host_path(&mut self, volume: &str, path: &str) {
        let daemonset = self
            .objects
            .iter_mut()
            .find(|o| o["kind"] == "DaemonSet")
            .expect("a DaemonSet");
        let spec = &mut daemonset["spec"]["template"]["spec"];
        let old = {
            let found = spec["volumes"]
                .as_array_mut()
                .expect("volumes")
                .iter_mut()
                .find(|v| v["name"] == volume)
                .unwrap_or_else(|| panic!("no volume {volume}"));
            std::mem::replace(&mut found["hostPath"]["path"], Value::from(path))
        };
        for mount in spec["containers"][0]["volumeMounts"]
            .as_array_mut()
            .expect("volumeMounts")
            .iter_mut()
            .filter(|m| m["name"] == volume)
        {
            assert_eq!(
                mount["mountPath"], old,
                "{volume} is mounted at its host path"
            );
            mount["mountPath"] = Value::from(path);
        }
    }

    /// The one object of `kind`.
    pub fn one(&self, kind: &str) -> &Value {
        let mut found = self.objects.iter().filter(|o| o["kind"] == kind);
        let object = found
            .next()
            .unwrap_or_else(|| panic!("no {kind} in deploy/kubernetes"));
        assert!(found.next().is_none(), "more than one {kind}");
        object
    }

    /// The `ConfigMap` named `name`.
    fn config_map(&self, name: &str) -> &Value {
        self.objects
            .iter()
            .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no ConfigMap {name} in deploy/kubernetes"))
    }

    /// The `DaemonSet`'s pod spec.
    pub fn pod_spec(&self) -> &Value {
        &self.one("DaemonSet")["spec"]["template"]["spec"]
    }

    /// The pod's one container.
    pub fn container(&self) -> &Value {
        let containers = self.pod_spec()["containers"]
            .as_array()
            .expect("containers");
        assert_eq!(containers.len(), 1, "safeprune's pod has one container");
        &containers[0]
    }

    /// The text of the file `key` of the `ConfigMap` volume mounted at
    /// `mount_path`.
    pub fn config_file(&self, mount_path: &str, key: &str) -> String {
        let mount = self.container()["volumeMounts"]
            .as_array()
            .expect("volumeMounts")
            .iter()
            .find(|m| m["mountPath"] == mount_path)
            .unwrap_or_else(|| panic!("nothing is mounted at {mount_path}"));
        let volume = self.volume(str_of(&mount["name"]));
        let name = str_of(&volume["configMap"]["name"]);
        str_of(&self.config_map(name)["data"][key]).to_owned()
    }

    fn volume(&self, name: &str) -> &Value {
        self.pod_spec()["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["name"] == name)
            .unwrap_or_else(|| panic!("no volume {name}"))
    }

    /// Where the liveness probe asks: its path and the container port.
    pub fn liveness(&self) -> (String, u16) {
        let get = &self.container()["livenessProbe"]["httpGet"];
        (str_of(&get["path"]).to_owned(), self.port(&get["port"]))
    }

    /// A probe's port, by number or by the name of a container port.
    fn port(&self, port: &Value) -> u16 {
        let number = match port {
            Value::String(name) => self.container()["ports"]
                .as_array()
                .expect("ports")
                .iter()
                .find(|p| p["name"] == name.as_str())
                .unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"]
                .clone(),
            number => number.clone(),
        };
        u16::try_from(number.as_u64().expect("a port number")).expect("a port")
    }

    /// How long kubelet waits after SIGTERM before it kills.
    pub fn grace_seconds(&self) -> i64 {
        self.pod_spec()["terminationGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(30)
    }
}

/// What a node gives the pod: its name, the node's paths for each
/// `hostPath` of the manifest, and where kubelet keeps `ConfigMap` files.
pub struct Node<'a> {
    pub name: &'a str,
    /// The manifest's host path, and the test engine's path standing for it.
    pub host_paths: HashMap<&'a str, PathBuf>,
    /// A directory for the `ConfigMap` volumes' files.
    pub volumes_dir: PathBuf,
    /// The cgroup parent of the pod, and the labels of everything made.
    pub cgroup_parent: String,
    pub labels: HashMap<String, String>,
}

/// The pod's identity, as the `DaemonSet` controller would name it.
pub struct PodIdentity {
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

impl Manifests {
    /// The identity of the `DaemonSet`'s pod on `node`.
    pub fn pod_identity(&self, node: &str) -> PodIdentity {
        let daemonset = self.one("DaemonSet");
        let name = str_of(&daemonset["metadata"]["name"]);
        PodIdentity {
            name: format!("{name}-{node}"),
            namespace: str_of(&daemonset["metadata"]["namespace"]).to_owned(),
            uid: format!("uid-daemonset-{name}-{node}"),
        }
    }

    /// kubelet's labels for the pod's objects on `node`, besides the node's.
    fn pod_labels(&self, node: &Node) -> HashMap<String, String> {
        let pod = self.pod_identity(node.name);
        let mut labels = node.labels.clone();
        labels.extend([
            ("io.kubernetes.pod.name".to_owned(), pod.name),
            ("io.kubernetes.pod.namespace".to_owned(), pod.namespace),
            ("io.kubernetes.pod.uid".to_owned(), pod.uid),
        ]);
        labels
    }

    /// The pod's namespaces, as kubelet's `namespacesForPod` sets them:
    /// the node's where `hostNetwork`, `hostPID` or `hostIPC` asks, else
    /// the pod's own; and a process namespace per container unless
    /// `shareProcessNamespace` (CRI-O runs an infra container only then).
    fn namespace_options(&self) -> NamespaceOption {
        let spec = self.pod_spec();
        let set = |field: &str| spec[field].as_bool().unwrap_or(false);
        let mode = |field: &str| {
            if set(field) {
                NamespaceMode::Node as i32
            } else {
                NamespaceMode::Pod as i32
            }
        };
        let pid = if set("hostPID") {
            NamespaceMode::Node
        } else if set("shareProcessNamespace") {
            NamespaceMode::Pod
        } else {
            NamespaceMode::Container
        };
        NamespaceOption {
            network: mode("hostNetwork"),
            pid: pid as i32,
            ipc: mode("hostIPC"),
            ..NamespaceOption::default()
        }
    }

    /// A container's namespaces: the pod's.
    fn container_namespace_options(&self) -> NamespaceOption {
        self.namespace_options()
    }

    /// The sandbox config kubelet sends for the pod, on the pod network
    /// unless `hostNetwork`.
    pub fn sandbox_config(&self, node: &Node) -> PodSandboxConfig {
        let pod = self.pod_identity(node.name);
        let mut labels = self.pod_labels(node);
        labels.extend(template_labels(self.one("DaemonSet")));
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: pod.name.clone(),
                uid: pod.uid,
                namespace: pod.namespace,
                attempt: 0,
            }),
            hostname: pod.name,
            labels,
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: node.cgroup_parent.clone(),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(self.namespace_options()),
                    seccomp: seccomp(&self.pod_spec()["securityContext"]),
                    ..LinuxSandboxSecurityContext::default()
                }),
                ..LinuxPodSandboxConfig::default()
            }),
            ..PodSandboxConfig::default()
        }
    }

    /// The container config kubelet sends for the pod's container. Its
    /// `ConfigMap` volumes are written under `node.volumes_dir`, each file
    /// passed through `edit(key, text)` first (the test's only change to
    /// what the manifest holds).
    pub fn container_config(
        &self,
        node: &Node,
        edit: impl Fn(&str, &str) -> String,
    ) -> ContainerConfig {
        let container = self.container();
        let context = &container["securityContext"];
        let pod_context = &self.pod_spec()["securityContext"];
        let int = |field: &str| {
            context[field]
                .as_i64()
                .or_else(|| pod_context[field].as_i64())
                .map(|value| Int64Value { value })
        };
        let privileged = context["privileged"].as_bool().unwrap_or(false);
        let mut labels = self.pod_labels(node);
        labels.insert(
            "io.kubernetes.container.name".to_owned(),
            str_of(&container["name"]).to_owned(),
        );
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: str_of(&container["name"]).to_owned(),
                attempt: 0,
            }),
            // kubelet sends the id it resolved in `image`; the name, which
            // both runtimes resolve alike, stands for it. The pod spec's
            // name goes in `user_specified_image` (CRI-O refuses a
            // container without it).
            image: Some(ImageSpec {
                image: str_of(&container["image"]).to_owned(),
                user_specified_image: str_of(&container["image"]).to_owned(),
                ..ImageSpec::default()
            }),
            command: strings(&container["command"]),
            args: strings(&container["args"]),
            envs: self.envs(node),
            mounts: self.mounts(node, &edit),
            labels,
            linux: Some(LinuxContainerConfig {
                resources: Some(resources(&container["resources"])),
                security_context: Some(LinuxContainerSecurityContext {
                    capabilities: Some(Capability {
                        add_capabilities: strings(&context["capabilities"]["add"]),
                        drop_capabilities: strings(&context["capabilities"]["drop"]),
                        ..Capability::default()
                    }),
                    privileged,
                    namespace_options: Some(self.container_namespace_options()),
                    run_as_user: int("runAsUser"),
                    run_as_group: int("runAsGroup"),
                    readonly_rootfs: context["readOnlyRootFilesystem"].as_bool().unwrap_or(false),
                    // allowPrivilegeEscalation: false is no_new_privs.
                    no_new_privs: context["allowPrivilegeEscalation"].as_bool() == Some(false),
                    masked_paths: if privileged {
                        vec![]
                    } else {
                        MASKED_PATHS.iter().map(|&p| p.to_owned()).collect()
                    },
                    readonly_paths: if privileged {
                        vec![]
                    } else {
                        READONLY_PATHS.iter().map(|&p| p.to_owned()).collect()
                    },
                    seccomp: seccomp(context).or_else(|| seccomp(pod_context)),
                    ..LinuxContainerSecurityContext::default()
                }),
            }),
            ..ContainerConfig::default()
        }
    }

    fn envs(&self, node: &Node) -> Vec<KeyValue> {
        self.container()["env"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|env| {
                let value = if let Some(value) = env["value"].as_str() {
                    value.to_owned()
                } else {
                    let field = str_of(&env["valueFrom"]["fieldRef"]["fieldPath"]);
                    assert_eq!(
                        field, "spec.nodeName",
                        "the kubelet stand-in resolves spec.nodeName only"
                    );
                    node.name.to_owned()
                };
                KeyValue {
                    key: str_of(&env["name"]).to_owned(),
                    value,
                }
            })
            .collect()
    }

    fn mounts(&self, node: &Node, edit: &impl Fn(&str, &str) -> String) -> Vec<Mount> {
        self.container()["volumeMounts"]
            .as_array()
            .expect("volumeMounts")
            .iter()
            .map(|mount| {
                let name = str_of(&mount["name"]);
                let volume = self.volume(name);
                let host_path = if let Some(path) = volume["hostPath"]["path"].as_str() {
                    host_path(node, path, volume["hostPath"]["type"].as_str())
                } else if let Some(map) = volume["configMap"]["name"].as_str() {
                    let data = self.config_map(map)["data"]
                        .as_object()
                        .expect("the ConfigMap has data");
                    let dir = node.volumes_dir.join(name);
                    config_map_volume(&dir, data, edit);
                    dir
                } else {
                    panic!("volume {name}: the kubelet stand-in knows hostPath and configMap only")
                };
                Mount {
                    container_path: str_of(&mount["mountPath"]).to_owned(),
                    host_path: host_path.display().to_string(),
                    readonly: mount["readOnly"].as_bool().unwrap_or(false),
                    ..Mount::default()
                }
            })
            .collect()
    }
}

/// A `ConfigMap` volume in `dir` laid out as kubelet's atomic writer does:
/// the directory mode 0777 (an emptyDir's), the files 0644 (`defaultMode`)
/// in a dated directory that `..data` points to, and each key a symlink
/// through `..data`.
fn config_map_volume(
    dir: &Path,
    data: &serde_json::Map<String, Value>,
    edit: &impl Fn(&str, &str) -> String,
) {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dated = "..2026_11_23_05_00_00.000000001";
    fs::create_dir_all(dir.join(dated)).expect("create a ConfigMap volume");
    for (key, text) in data {
        let file = dir.join(dated).join(key);
        fs::write(&file, edit(key, str_of(text))).expect("write a ConfigMap file");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).expect("chmod");
        symlink(format!("..data/{key}"), dir.join(key)).expect("link a ConfigMap key");
    }
    symlink(dated, dir.join("..data")).expect("link ..data");
    fs::set_permissions(dir, fs::Permissions::from_mode(0o777)).expect("chmod");
}

/// The engine's path for the manifest's host path `path`, checked or made
/// as its `type` says.
fn host_path(node: &Node, path: &str, kind: Option<&str>) -> PathBuf {
    let mapped = node
        .host_paths
        .get(path)
        .unwrap_or_else(|| {
            panic!("the manifest mounts host path {path}, which the test does not map")
        })
        .clone();
    match kind {
        Some("Socket") => assert!(
            fs::metadata(&mapped).is_ok_and(|m| m.file_type().is_socket()),
            "{path}: no socket at {}",
            mapped.display()
        ),
        Some("DirectoryOrCreate") => fs::create_dir_all(&mapped).expect("create a hostPath"),
        Some("Directory") => assert!(
            mapped.is_dir(),
            "{path}: no directory at {}",
            mapped.display()
        ),
        Some("File") => assert!(mapped.is_file(), "{path}: no file at {}", mapped.display()),
        other => panic!("{path}: hostPath type {other:?} is not one the stand-in checks"),
    }
    mapped
}

/// The objects of the kustomization in `dir`, in order. Only plain
/// resources are read: a kustomization that transforms them would make
/// this reading wrong, so any other key panics.
fn kustomization_objects(dir: &Path, objects: &mut Vec<Value>) {
    let kustomization = read_yaml(&dir.join("kustomization.yaml"));
    for key in kustomization.as_object().expect("a kustomization").keys() {
        assert!(
            ["apiVersion", "kind", "resources", "patches"].contains(&key.as_str()),
            "{}: the stand-in reads plain resources and JSON patches only, not {key}",
            dir.display()
        );
    }
    for resource in kustomization["resources"]
        .as_array()
        .expect("the kustomization lists resources")
    {
        let path = dir.join(str_of(resource));
        if path.is_dir() {
            kustomization_objects(&path, objects);
        } else {
            objects.push(read_yaml(&path));
        }
    }
    for patch in kustomization["patches"].as_array().into_iter().flatten() {
        let path = dir.join(str_of(&patch["path"]));
        let target = &patch["target"];
        let group_version = match target["group"].as_str() {
            Some(group) => format!("{group}/{}", str_of(&target["version"])),
            None => str_of(&target["version"]).to_owned(),
        };
        let object = objects
            .iter_mut()
            .find(|o| {
                o["apiVersion"] == group_version.as_str()
                    && o["kind"] == target["kind"]
                    && o["metadata"]["name"] == target["name"]
            })
            .unwrap_or_else(|| panic!("{}: no object {target}", path.display()));
        let operations = read_yaml(&path);
        for operation in operations.as_array().expect("a JSON patch is a list") {
            apply_operation(object, operation, &path);
        }
    }
}

/// One JSON patch (RFC 6902) operation of `file`: `test`, `replace` or
/// `add`, the only ones the overlays use; kustomize fails the rendering
/// when a `test` fails, and so does this.
fn apply_operation(object: &mut Value, operation: &Value, file: &Path) {
    let pointer = str_of(&operation["path"]);
    if str_of(&operation["op"]) == "add" {
        // At the end of an array (`/-`), or a new key of an object.
        let (parent, last) = pointer.rsplit_once('/').expect("a JSON pointer");
        let at = object
            .pointer_mut(parent)
            .unwrap_or_else(|| panic!("{}: nothing at {parent}", file.display()));
        match at {
            Value::Array(items) if last == "-" => items.push(operation["value"].clone()),
            Value::Object(map) if !map.contains_key(last) => {
                map.insert(last.to_owned(), operation["value"].clone());
            }
            _ => panic!(
                "{}: the stand-in adds at {pointer} only to the end of an array or as a new key",
                file.display()
            ),
        }
        return;
    }
    let at = object
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("{}: nothing at {pointer}", file.display()));
    match str_of(&operation["op"]) {
        "test" => assert_eq!(
            *at,
            operation["value"],
            "{}: the test at {pointer} fails",
            file.display()
        ),
        "replace" => *at = operation["value"].clone(),
        other => panic!("{}: the stand-in applies no {other}", file.display()),
    }
}

/// A pod template's labels.
fn template_labels(daemonset: &Value) -> HashMap<String, String> {
    daemonset["spec"]["template"]["metadata"]["labels"]
        .as_object()
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| (k.clone(), str_of(v).to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

/// A security context's seccomp profile, as CRI takes it.
fn seccomp(context: &Value) -> Option<SecurityProfile> {
    let kind = context["seccompProfile"]["type"].as_str()?;
    let profile_type = match kind {
        "RuntimeDefault" => ProfileType::RuntimeDefault,
        "Unconfined" => ProfileType::Unconfined,
        other => panic!("seccomp profile {other} is not one the stand-in knows"),
    };
    Some(SecurityProfile {
        profile_type: profile_type as i32,
        localhost_ref: String::new(),
    })
}

/// Requests and limits, as kubelet turns them into cgroup settings.
fn resources(resources: &Value) -> LinuxContainerResources {
    let millicores = |v: &Value| v.as_str().map(cpu_millicores);
    let requested = millicores(&resources["requests"]["cpu"]);
    let limit = millicores(&resources["limits"]["cpu"]);
    LinuxContainerResources {
        cpu_shares: requested.map_or(2, |m| (m * 1024 / 1000).max(2)),
        cpu_period: limit.map_or(0, |_| 100_000),
        cpu_quota: limit.map_or(0, |m| m * 100),
        memory_limit_in_bytes: resources["limits"]["memory"]
            .as_str()
            .map_or(0, memory_bytes),
        // Not below containerd's own score: see docs/engines.md, "Test engines".
        oom_score_adj: 0,
        ..LinuxContainerResources::default()
    }
}

/// `250m` or `1` (cores) in millicores.
fn cpu_millicores(quantity: &str) -> i64 {
    quantity.strip_suffix('m').map_or_else(
        || quantity.parse::<i64>().expect("cores") * 1000,
        |m| m.parse().expect("millicores"),
    )
}

/// `128Mi`, `1Gi`, `64M` or plain bytes.
fn memory_bytes(quantity: &str) -> i64 {
    let units = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ];
    for (suffix, factor) in units {
        if let Some(n) = quantity.strip_suffix(suffix) {
            return n.parse::<i64>().expect("a memory quantity") * factor;
        }
    }
    quantity.parse().expect("a memory quantity in bytes")
}

fn strings(list: &Value) -> Vec<String> {
    list.as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|s| str_of(s).to_owned())
        .collect()
}

fn str_of(value: &Value) -> &str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("expected a string, found {value}"))
}

fn read_yaml(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("parse {}: {e}", path.display()))
}
