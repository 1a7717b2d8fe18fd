//! The container image `scripts/image.sh` builds offline (docs/install.md,
//! "The container image"), from the binary under test: it holds the binary, the
//! libraries the loader needs and root's passwd and group entries, nothing
//! else; it builds the same bytes twice; and both engines import it as the
//! docs/install.md says and run it as the Kubernetes pod does, read-only and with no
//! capability. The images lie in the tests' private engines alone. Docker
//! runs it on 20.10 and on 29 with each image store (`docker_tests!`),
//! containerd on 1.6 and 2.3 (`containerd_tests!`).

use crate::util;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use util::Required;
use util::containerd::{CRI_NAMESPACE, ContainerdVersion, PrivateContainerd, containerd_tests};
use util::docker::PrivateDockerd;
use util::docker_matrix::{DockerVersion, VersionedDockerd, docker_tests};
use util::image::{
    BINARY, BuiltImage, Entry, Node, OciArchive, entries, file_digest, file_mode, image_name, ldd,
    resolve, tree,
};
use util::node::run as safeprune;

const ENTRYPOINT: &str = "/usr/sbin/safeprune";
const PASSWD: &str = "root:x:0:0:root:/:/usr/sbin/nologin\n";
const GROUP: &str = "root:x:0:\n";

fn digest_of_text(text: &str) -> String {
    util::image::digest_of(&mut text.as_bytes())
}

/// Where `path` ends up when the loader follows it in the image.
fn resolved(entries: &BTreeMap<String, Entry>, path: &str) -> (String, Vec<String>) {
    resolve(entries, path).unwrap_or_else(|| panic!("{path} leads nowhere in the image"))
}

#[test]
fn image_sh_writes_exactly_that_root_as_a_tar_and_an_oci_archive_reproducibly() {
    let image = BuiltImage::build();
    assert_root_holds_the_binary_its_libraries_and_root_alone(&image);
    assert_oci_archive_names_the_image_and_holds_the_root(&image);
    // The same bytes again.
    let again = BuiltImage::build();
    for (first, second) in [
        (image.rootfs_tar(), again.rootfs_tar()),
        (image.oci_tar(), again.oci_tar()),
    ] {
        let same = std::fs::read(&first).ok() == std::fs::read(&second).ok();
        assert!(same, "{} differs on a second build", first.display());
    }
}

fn assert_root_holds_the_binary_its_libraries_and_root_alone(image: &BuiltImage) {
    let root = entries(&image.rootfs_tar());
    for (path, entry) in &root {
        assert_eq!((entry.uid, entry.gid, entry.mtime), (0, 0, 0), "{path}");
    }
    // Each library ldd names, by the path the loader asks for, leads to
    // the host's file at its real path.
    let mut files = BTreeMap::from([
        // The binary under test, stripped as the Debian package's is: the
        // unstripped one made the release image half as big again.
        (
            "usr/sbin/safeprune".to_owned(),
            file_digest(&image.stripped_binary()),
        ),
        ("etc/passwd".to_owned(), digest_of_text(PASSWD)),
        ("etc/group".to_owned(), digest_of_text(GROUP)),
    ]);
    let mut links_used = BTreeSet::new();
    let libraries = ldd(Path::new(BINARY));
    assert!(
        libraries.iter().any(|l| l.contains("libc.so")),
        "{libraries:?}"
    );
    for library in &libraries {
        let (found, links) = resolved(&root, library);
        let real = std::fs::canonicalize(library).expect("the host's library");
        assert_eq!(Path::new("/").join(&found), real, "{library}");
        let Node::File { mode, .. } = &root[&found].node else {
            panic!("{library} ends at {found}, no file");
        };
        assert_eq!(*mode, file_mode(&real), "{library}");
        files.insert(found, file_digest(&real));
        links_used.extend(links);
    }
    // Exactly those files, and only the links and directories that lead to
    // them: no shell, no certificates, nothing else.
    let found_files: BTreeMap<String, String> = root
        .iter()
        .filter_map(|(path, e)| match &e.node {
            Node::File { digest, .. } => Some((path.clone(), digest.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(found_files, files);
    let links: BTreeSet<&String> = root
        .iter()
        .filter(|(_, e)| matches!(e.node, Node::Link(_)))
        .map(|(path, _)| path)
        .collect();
    assert_eq!(links, links_used.iter().collect());
    for (path, entry) in &root {
        if entry.node == Node::Dir {
            let inside = format!("{path}/");
            assert!(root.keys().any(|p| p.starts_with(&inside)), "empty {path}");
        }
    }
    assert!(!root.contains_key("bin/sh") && !root.contains_key("bin"));
    let Node::File { mode, .. } = root["usr/sbin/safeprune"].node else {
        panic!("no binary");
    };
    assert_eq!(mode, 0o755);
    // The directory the Dockerfile copies holds the same.
    let listed: BTreeSet<String> = root.keys().cloned().collect();
    assert_eq!(tree(&image.rootfs()), listed);
}

fn assert_oci_archive_names_the_image_and_holds_the_root(image: &BuiltImage) {
    let oci = OciArchive::read(&image.oci_tar());
    assert_eq!(oci.oci_layout, json!({"imageLayoutVersion": "1.0.0"}));
    let manifests = oci.index["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 1, "{:#}", oci.index);
    let descriptor = &manifests[0];
    assert_eq!(
        descriptor["annotations"],
        json!({
            "io.containerd.image.name": image_name(),
            "org.opencontainers.image.ref.name": env!("CARGO_PKG_VERSION"),
        })
    );
    let manifest = oci.json(descriptor);
    assert_eq!(
        manifest["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    let config = oci.json(&manifest["config"]);
    assert_eq!(
        config["config"],
        json!({"Entrypoint": [ENTRYPOINT], "Cmd": ["daemon"], "User": "0:0"})
    );
    assert_eq!(config["os"], "linux");
    assert_eq!(
        descriptor["platform"]["architecture"],
        config["architecture"]
    );
    // One gzipped layer, which is the root tar.
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1);
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let layer = layers[0]["digest"].as_str().expect("layer digest");
    assert_eq!(layers[0]["size"].as_u64(), oci.layers.get(layer).copied());
    assert_eq!(
        config["rootfs"],
        json!({"type": "layers", "diff_ids": [file_digest(&image.rootfs_tar())]})
    );
}

/// `docker run` as Kubernetes runs the pod: a read-only root, no
/// capability, no privilege escalation, no network.
fn docker_run(dockerd: &PrivateDockerd, volume: Option<&str>, args: &[&str]) -> Output {
    let mut cmd = dockerd.cli();
    cmd.args([
        "run",
        "--rm",
        "--read-only",
        "--cap-drop",
        "ALL",
        "--network",
        "none",
    ])
    .args(["--security-opt", "no-new-privileges"]);
    if let Some(volume) = volume {
        cmd.args(["--volume", volume]);
    }
    let out = cmd
        .arg(image_name())
        .args(args)
        .output()
        .expect("docker run");
    assert!(
        out.status.success(),
        "docker run {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

docker_tests! {
    docker_imports_the_rootfs_and_runs_it_read_only_with_no_capability,
}

async fn docker_imports_the_rootfs_and_runs_it_read_only_with_no_capability(
    version: DockerVersion,
) {
    let dockerd = VersionedDockerd::start(version).await.required();
    let image = BuiltImage::build();
    // docs/install.md's command.
    let import = dockerd
        .cli()
        .args([
            "import",
            "--change",
            &format!(r#"ENTRYPOINT ["{ENTRYPOINT}"]"#),
        ])
        .args(["--change", r#"CMD ["daemon"]"#, "--change", "USER 0:0"])
        .arg(image.rootfs_tar())
        .arg(image_name())
        .output()
        .expect("docker import");
    assert!(import.status.success(), "{import:?}");

    let inspect = dockerd
        .docker()
        .inspect_image(&image_name())
        .await
        .expect("inspect the image");
    let config = inspect.config.expect("image config");
    assert_eq!(config.entrypoint, Some(vec![ENTRYPOINT.to_owned()]));
    assert_eq!(config.cmd, Some(vec!["daemon".to_owned()]));
    assert_eq!(config.user.as_deref(), Some("0:0"));
    assert_eq!(
        inspect.root_fs.and_then(|r| r.layers),
        Some(vec![file_digest(&image.rootfs_tar())]),
        "the same layer as the OCI archive's"
    );

    let version = docker_run(&dockerd, None, &["--version"]);
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        format!("safeprune {}\n", env!("CARGO_PKG_VERSION"))
    );
    // No policy file in the image: the built-in default, as on the host.
    let check = docker_run(&dockerd, None, &["check", "--offline"]);
    let host = safeprune(&["--config", "config/policy.yaml", "check", "--offline"]);
    assert_eq!(check.stdout, host.stdout);
    assert!(
        String::from_utf8_lossy(&check.stderr)
            .starts_with("safeprune: policy from the built-in default"),
        "{check:?}"
    );
    // Root with no capability may still use the engine's socket, and keeps
    // the image its own container runs.
    let socket = dockerd.endpoint().trim_start_matches("unix://").to_owned();
    let plan = docker_run(
        &dockerd,
        Some(&format!("{socket}:/var/run/docker.sock")),
        &["plan", "--output", "json"],
    );
    let report: Value = serde_json::from_slice(&plan.stdout).expect("a JSON report");
    assert_eq!(report["runtime"], "docker", "{report:#}");
    let own = report["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .find(|d| {
            d["kind"] == "image"
                && d["refs"]
                    .as_array()
                    .is_some_and(|r| r.contains(&json!(image_name())))
        })
        .unwrap_or_else(|| panic!("no decision on its own image: {report:#}"));
    assert_eq!(
        (&own["decision"], &own["rule"]),
        (&json!("keep"), &json!("in_use"))
    );
}

containerd_tests! {
    containerd_imports_the_oci_archive_under_its_name_for_cri,
}

async fn containerd_imports_the_oci_archive_under_its_name_for_cri(version: ContainerdVersion) {
    let containerd = PrivateContainerd::start_version(version).await.required();
    let image = BuiltImage::build();
    let archive = image.oci_tar().to_string_lossy().into_owned();
    // docs/install.md's command.
    containerd.ctr_ok(CRI_NAMESPACE, &["images", "import", &archive]);
    assert!(
        containerd
            .image_names(CRI_NAMESPACE)
            .contains(&image_name()),
        "{:?}",
        containerd.image_names(CRI_NAMESPACE)
    );

    // What kubelet sees of it: the name the DaemonSet asks for, root, the
    // entrypoint and command.
    let status = containerd.cri_image_status(&image_name()).await;
    let found = status.image.expect("CRI knows the image");
    assert!(found.repo_tags.contains(&image_name()), "{found:?}");
    assert_eq!(found.uid.map(|u| u.value), Some(0), "{found:?}");
    let info: Value = serde_json::from_str(&status.info["info"]).expect("verbose info");
    let spec = &info["imageSpec"];
    assert_eq!(spec["config"]["Entrypoint"], json!([ENTRYPOINT]));
    assert_eq!(spec["config"]["Cmd"], json!(["daemon"]));
    assert_eq!(
        spec["rootfs"]["diff_ids"],
        json!([file_digest(&image.rootfs_tar())])
    );

    // Unpacked by containerd's snapshotter, it runs on a read-only root.
    // Its output goes to a file: ctr's own stdio fifos would lie in a /run
    // the private containerd does not see.
    let cgroup = format!("/{}/safeprune-version", containerd.scope());
    let log = containerd.socket().with_file_name("safeprune-version.log");
    let out = containerd
        .ctr(CRI_NAMESPACE)
        .args([
            "run",
            "--rm",
            "--read-only",
            "--cgroup",
            &cgroup,
            "--log-uri",
        ])
        .arg(format!("file://{}", log.display()))
        .args([&image_name(), "safeprune-version", ENTRYPOINT, "--version"])
        .output()
        .expect("ctr run");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&log).expect("the container's output"),
        format!("safeprune {}\n", env!("CARGO_PKG_VERSION"))
    );
}
