//! Images that cannot come back (`images.keep_unpullable`, rule
//! `unpullable`), against a registry of the test's own
//! ([`util::registry::Registry`]) and the real engines: an image pulled
//! from it, or pushed to it, can come back and is pruned; one loaded,
//! imported, built or committed on the node cannot, and is kept. After a
//! real run every pulled image removed pulls back from the registry and
//! every kept one is still there; `keep_unpullable: false` removes them;
//! and the what-if marks exactly the images `docker system prune -a -f`
//! then removes that the registry cannot serve.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::util::containerd::{ContainerdVersion, PrivateContainerd, containerd_tests};
use crate::util::docker_matrix::{DockerVersion, VersionedDockerd, docker_tests};
use crate::util::node::{Cli, Runtime};
use crate::util::registry::{ADDRESS, Registry};
use crate::util::{Required, run_ok};

/// The image decisions of a report (or plan): every reference of each,
/// its rule and its id.
fn images_of(report: &Value) -> Vec<(Vec<String>, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    report["decisions"]
        .as_array()
        .expect("decisions")
        .iter()
        .filter(|d| d["kind"] == "image")
        .map(|d| {
            let refs = d["refs"]
                .as_array()
                .map(|r| r.iter().map(text).collect())
                .unwrap_or_default();
            (refs, text(&d["rule"]), text(&d["id"]))
        })
        .collect()
}

/// The rule that decided the image named `name` (in any spelling Docker
/// gives it: `acc/x:1` is `docker.io/acc/x:1` on its containerd store).
fn rule_of(report: &Value, name: &str) -> String {
    let spellings = [name.to_owned(), format!("docker.io/{name}")];
    images_of(report)
        .into_iter()
        .find(|(refs, _, _)| refs.iter().any(|r| spellings.contains(r)))
        .map_or_else(
            || panic!("no image named {name} in {report:#}"),
            |(_, rule, _)| rule,
        )
}

/// Whether the registry serves `name` (`127.0.0.1:5000/repo:tag`); no
/// other registry is reachable here, so a name of any other serves none.
fn registry_serves(registry: &Registry, name: &str) -> bool {
    let Some(rest) = name.strip_prefix(&format!("{ADDRESS}/")) else {
        return false;
    };
    let (repository, tag) = rest.rsplit_once(':').expect("a tagged name");
    registry.tags(repository).iter().any(|t| t == tag)
}

/// Whether Docker still has an image named `name`.
fn docker_has(engine: &VersionedDockerd, name: &str) -> bool {
    engine
        .cli()
        .args(["image", "inspect", name])
        .output()
        .expect("run docker image inspect")
        .status
        .success()
}

/// The ids of every image Docker lists.
fn docker_image_ids(engine: &VersionedDockerd) -> BTreeSet<String> {
    let out = engine
        .cli()
        .args(["images", "-aq", "--no-trunc"])
        .output()
        .expect("run docker images");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn docker(engine: &VersionedDockerd, args: &[&str]) {
    run_ok(engine.cli().args(args));
}

/// The names of the six cases on one engine: each made as a node makes it,
/// its own content. Pulled and pushed ones are in the registry.
struct Made {
    pulled: String,
    pushed: String,
    kept: [&'static str; 4],
}

async fn make_each_case(engine: &VersionedDockerd) -> Made {
    // Pulled: imported, pushed, removed, and pulled from the registry.
    let pulled = format!("{ADDRESS}/acc/pulled:1");
    engine.import_busybox_image(&pulled, Some("pulled")).await;
    docker(engine, &["push", &pulled]);
    docker(engine, &["rmi", &pulled]);
    docker(engine, &["pull", &pulled]);
    // Pushed, then pulled again over the name it has.
    let pushed = format!("{ADDRESS}/acc/pushed:1");
    engine.import_busybox_image(&pushed, Some("pushed")).await;
    docker(engine, &["push", &pushed]);
    docker(engine, &["pull", &pushed]);
    // Loaded: saved, removed and loaded back (`docker load`).
    let archive = tempfile::tempdir().expect("a directory for the archive");
    let tar = archive.path().join("loaded.tar");
    let tar = tar.to_str().expect("a UTF-8 path");
    engine
        .import_busybox_image("acc/loaded:1", Some("loaded"))
        .await;
    docker(engine, &["save", "-o", tar, "acc/loaded:1"]);
    docker(engine, &["rmi", "acc/loaded:1"]);
    docker(engine, &["load", "-i", tar]);
    // Imported (`docker import`).
    engine
        .import_busybox_image("acc/imported:1", Some("imported"))
        .await;
    // Built from scratch, offline.
    engine.build_with_buildkit("acc/built:1");
    // Committed from a container, which is then left exited.
    let id = engine.run_to_exit("to-commit", "acc/imported:1", &[]).await;
    docker(engine, &["commit", &id, "acc/committed:1"]);
    Made {
        pulled,
        pushed,
        kept: [
            "acc/loaded:1",
            "acc/imported:1",
            "acc/built:1",
            "acc/committed:1",
        ],
    }
}

docker_tests! {
    #[tokio::test(flavor = "multi_thread")]
    docker_keeps_exactly_the_images_no_registry_can_give_back,
}

async fn docker_keeps_exactly_the_images_no_registry_can_give_back(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let registry = Registry::start_beside(engine.pid()).required();
    let made = make_each_case(&engine).await;
    let runtime = Runtime::Docker(engine.endpoint());
    let policy = |keep: &str| {
        format!(
            "containers: {{min_age: 0s}}\nimages: {{min_age: 0s, keep_unpullable: {keep}}}\n\
             build_cache: {{enabled: false}}\n"
        )
    };
    let cli = Cli::new(&runtime, &policy("true"));

    // The plan keeps exactly the names that cannot come back.
    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan:#}");
    for name in [&made.pulled, &made.pushed] {
        assert_eq!(rule_of(&plan, name), "eligible", "{name} ({version:?})");
    }
    for name in made.kept {
        assert_eq!(rule_of(&plan, name), "unpullable", "{name} ({version:?})");
    }
    // The repo digests Docker shows: none for an import on the graph
    // driver store; made up for every tagged image on the containerd
    // store (moby#45122), where they say nothing.
    let digests = engine
        .cli()
        .args([
            "image",
            "inspect",
            "--format",
            "{{len .RepoDigests}}",
            "acc/imported:1",
        ])
        .output()
        .expect("run docker image inspect");
    let digests = String::from_utf8_lossy(&digests.stdout).trim().to_owned();
    if version.containerd_store() {
        assert_ne!(digests, "0", "a made-up repo digest ({version:?})");
    } else {
        assert_eq!(digests, "0", "no repo digest ({version:?})");
    }
    let explained = cli.run(&["explain", "acc/imported:1"]);
    let explained = String::from_utf8_lossy(&explained.stdout);
    assert!(
        explained.contains("cannot come back:") && explained.contains("provenance:"),
        "{explained}"
    );

    // The what-if marks the command's removals that cannot come back.
    let (_, compared) = cli.json(&["plan", "--compare", "docker-prune", "--output", "json"]);
    let marked = marked_ids(&compared);
    assert_eq!(
        compared["summary"]["command_unpullable"],
        marked.len(),
        "{compared:#}"
    );

    // A real run: the pulled images go and pull back; the others stay.
    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report:#}");
    for name in [&made.pulled, &made.pushed] {
        assert!(!docker_has(&engine, name), "{name} removed");
        docker(&engine, &["pull", name]);
    }
    for name in made.kept {
        assert!(docker_has(&engine, name), "{name} kept ({version:?})");
    }

    // Off: the same images are pruned as any other.
    cli.rewrite(&runtime, &policy("false"));
    let (_, off) = cli.json(&["plan", "--output", "json"]);
    for name in made.kept {
        assert_eq!(rule_of(&off, name), "eligible", "{name} ({version:?})");
    }
    // auto: a plain Docker host prunes them; kubelet's containers make it
    // a Kubernetes node, which keeps them.
    cli.rewrite(&runtime, &policy("auto"));
    let (_, docker_host) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(rule_of(&docker_host, "acc/imported:1"), "eligible");
    let pod = crate::util::pod::Pod::new("web", "default");
    engine.create_sandbox(&pod, "acc/committed:1", false).await;
    let (_, kube) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(rule_of(&kube, "acc/imported:1"), "unpullable", "{kube:#}");

    // What the real `docker system prune -a -f` removes that the registry
    // cannot serve is what the what-if marks, image for image.
    let (_, compared) = cli.json(&["plan", "--compare", "docker-prune", "--output", "json"]);
    let marked = marked_ids(&compared);
    let names = names_by_id(&compared);
    let before = docker_image_ids(&engine);
    docker(&engine, &["system", "prune", "-a", "-f"]);
    let after = docker_image_ids(&engine);
    let lost: BTreeSet<String> = before
        .difference(&after)
        .filter(|id| {
            names
                .get(*id)
                .is_none_or(|names| !names.iter().any(|n| registry_serves(&registry, n)))
        })
        .cloned()
        .collect();
    assert!(
        !lost.is_empty(),
        "the command removed something that cannot come back"
    );
    assert_eq!(
        marked,
        lost,
        "{compared:#}\nregistry log: {}",
        registry.log()
    );
}

/// The ids of the images the what-if marks `cannot_come_back`.
fn marked_ids(compared: &Value) -> BTreeSet<String> {
    ["only_command", "both"]
        .iter()
        .flat_map(|list| compared[list].as_array().cloned().unwrap_or_default())
        .filter(|d| d["kind"] == "image" && d.get("cannot_come_back").is_some())
        .filter_map(|d| d["id"].as_str().map(str::to_owned))
        .collect()
}

/// Each image's names, as the what-if lists the command's removals (a
/// decision's name; an image without one is its id).
fn names_by_id(compared: &Value) -> std::collections::BTreeMap<String, Vec<String>> {
    ["only_command", "both", "only_safeprune"]
        .iter()
        .flat_map(|list| compared[list].as_array().cloned().unwrap_or_default())
        .filter(|d| d["kind"] == "image")
        .filter_map(|d| {
            Some((
                d["id"].as_str()?.to_owned(),
                vec![d["name"].as_str()?.to_owned()],
            ))
        })
        .collect()
}

/// An OCI archive of `source` (`ctr images export`) with its name
/// changed to `name`: the same content, imported under a new name.
fn renamed_archive(engine: &PrivateContainerd, source: &str, name: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().expect("a directory for the archive");
    let path = dir.path().join("export.tar");
    engine.ctr_ok(
        "k8s.io",
        &["images", "export", path.to_str().expect("UTF-8"), source],
    );
    let mut out = tar::Builder::new(Vec::new());
    let mut archive = tar::Archive::new(std::fs::File::open(&path).expect("the archive"));
    for entry in archive.entries().expect("the archive's entries") {
        let mut entry = entry.expect("an entry");
        let entry_path = entry.path().expect("a path").into_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).expect("read an entry");
        if entry_path == std::path::Path::new("index.json") {
            let mut index: Value = serde_json::from_slice(&data).expect("index.json");
            for manifest in index["manifests"].as_array_mut().expect("manifests") {
                let annotations = &mut manifest["annotations"];
                annotations["io.containerd.image.name"] = Value::from(name);
                annotations["org.opencontainers.image.ref.name"] =
                    Value::from(name.rsplit_once(':').expect("a tag").1);
            }
            data = serde_json::to_vec(&index).expect("index.json");
        }
        let mut header = entry.header().clone();
        header.set_size(data.len() as u64);
        header.set_cksum();
        out.append_data(&mut header, &entry_path, &data[..])
            .expect("append an entry");
    }
    out.into_inner().expect("finish the archive")
}

/// Imports `archive` into `k8s.io` with `ctr images import`.
fn import(engine: &PrivateContainerd, archive: &[u8]) {
    use std::io::Write;
    let mut child = engine
        .ctr("k8s.io")
        .args(["images", "import", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run ctr images import");
    let written = child.stdin.take().expect("stdin").write_all(archive);
    let output = child.wait_with_output().expect("wait for ctr");
    assert!(
        output.status.success() && written.is_ok(),
        "import: {written:?} {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

containerd_tests! {
    #[tokio::test(flavor = "multi_thread")]
    containerd_keeps_exactly_the_images_no_registry_can_give_back,
}

async fn containerd_keeps_exactly_the_images_no_registry_can_give_back(version: ContainerdVersion) {
    let engine = PrivateContainerd::start_version(version).await.required();
    let registry = Registry::start_beside(engine.pid()).required();
    let ns = "k8s.io";
    let ctr = |args: &[&str]| registry.ctr(&engine, ns, args);
    // Each pulled one is imported, pushed, removed with its content, and
    // pulled from the registry.
    let push_and_forget = |name: &str, extra: &str| {
        registry.push_and_forget(&engine, ns, name, extra);
    };
    let pulled = format!("{ADDRESS}/acc/pulled:1");
    push_and_forget(&pulled, "pulled");
    ctr(&["images", "pull", "--plain-http", &pulled]);
    // Pulled by CRI, through a hosts.toml of the registry.
    let by_cri = format!("{ADDRESS}/acc/cri:1");
    push_and_forget(&by_cri, "cri");
    registry.serve_cri(&engine);
    registry.cri_pull(&engine, &by_cri).await;
    // Imported from an archive, never pushed.
    let imported = format!("{ADDRESS}/acc/imported:1");
    let digest = engine
        .import_image_with_extra(ns, &imported, "imported")
        .digest;
    // A digest reference of its own repository beside its tag, as an
    // importer may write one: never pulled all the same.
    let by_digest = format!("{ADDRESS}/acc/imported@{digest}");
    engine.tag_image(ns, &imported, &by_digest);
    // An archive imported under a new name over content pulled under
    // another: the blobs carry the pulled repository's label.
    let origin = format!("{ADDRESS}/acc/origin:1");
    push_and_forget(&origin, "origin");
    ctr(&["images", "pull", "--plain-http", &origin]);
    let renamed = format!("{ADDRESS}/acc/renamed:1");
    import(&engine, &renamed_archive(&engine, &origin, &renamed));

    let endpoint = engine.endpoint();
    let runtime = Runtime::Containerd(&endpoint, &["k8s.io"]);
    let policy = |keep: &str| {
        format!(
            "images: {{min_age: 0s, keep_unpullable: {keep}}}\nbuild_cache: {{enabled: false}}\n"
        )
    };
    let cli = Cli::new(&runtime, &policy("auto"));
    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan:#}");
    assert_eq!(rule_of(&plan, &pulled), "eligible", "{plan:#}");
    assert_eq!(rule_of(&plan, &by_cri), "eligible", "{plan:#}");
    assert_eq!(rule_of(&plan, &imported), "unpullable", "{plan:#}");
    assert_eq!(rule_of(&plan, &renamed), "unpullable", "{plan:#}");
    let check = cli.run(&["check"]);
    let said = String::from_utf8_lossy(&check.stderr);
    assert!(
        said.contains("images.keep_unpullable: ok: auto, on here: a CRI runtime (containerd)"),
        "{said}"
    );
    // crictl's model removes both kept ones, and on 1.6 the sandbox
    // image (imported too; CRI reports nothing pinned there): marked are
    // exactly its removals with a name the registry does not serve.
    let (_, compared) = cli.json(&["plan", "--compare", "crictl-prune", "--output", "json"]);
    let removed: BTreeSet<String> = ["only_command", "both"]
        .iter()
        .flat_map(|list| compared[list].as_array().cloned().unwrap_or_default())
        .filter(|d| d["kind"] == "image")
        .filter_map(|d| d["id"].as_str().map(str::to_owned))
        .collect();
    let lost: BTreeSet<String> = images_of(&plan)
        .into_iter()
        .filter(|(refs, _, id)| {
            removed.contains(id)
                && refs
                    .iter()
                    .filter(|r| !r.contains('@'))
                    .any(|r| !registry_serves(&registry, r))
        })
        .map(|(_, _, id)| id)
        .collect();
    let kept_ids: BTreeSet<String> = images_of(&plan)
        .into_iter()
        .filter(|(refs, _, _)| refs.contains(&imported) || refs.contains(&renamed))
        .map(|(_, _, id)| id)
        .collect();
    assert!(kept_ids.is_subset(&lost), "{kept_ids:?} {lost:?}");
    assert_eq!(marked_ids(&compared), lost, "{compared:#}");

    // A real run: the pulled ones go and pull back; the others stay.
    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report:#}");
    let names = engine.image_names(ns);
    for name in [&pulled, &by_cri] {
        assert!(!names.contains(name), "{name} removed: {names:?}");
    }
    for name in [&imported, &origin, &renamed] {
        assert!(names.contains(name), "{name} kept: {names:?}");
    }
    ctr(&["images", "pull", "--plain-http", &pulled]);
    registry.cri_pull(&engine, &by_cri).await;

    // Off: pruned as any other.
    cli.rewrite(&runtime, &policy("false"));
    let (_, off) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(rule_of(&off, &imported), "eligible", "{off:#}");
    assert_eq!(rule_of(&off, &renamed), "eligible", "{off:#}");

    through_cri_alone_the_fact_is_unknown(&engine, &imported, &by_digest, &policy("true")).await;
}

/// Through CRI alone, at `engine`'s socket, with `policy`: CRI gives the
/// image `imported`, never pulled, the repo digest `by_digest` of its own
/// repository as it gives a pulled one, so the fact is unknown, nothing is
/// kept for it, and `check` and `explain` say so.
async fn through_cri_alone_the_fact_is_unknown(
    engine: &PrivateContainerd,
    imported: &str,
    by_digest: &str,
    policy: &str,
) {
    let endpoint = engine.endpoint();
    let status = engine.cri_image_status(imported).await;
    let digests = status.image.expect("CRI knows the image").repo_digests;
    assert!(
        digests.iter().any(|d| d == by_digest),
        "CRI's repo digests of an import: {digests:?}"
    );
    let cri = Cli::new(&Runtime::Cri(&endpoint), policy);
    let (_, through_cri) = cri.json(&["plan", "--output", "json"]);
    assert_eq!(
        rule_of(&through_cri, imported),
        "eligible",
        "{through_cri:#}"
    );
    let said = String::from_utf8_lossy(&cri.run(&["check"]).stderr).into_owned();
    assert!(
        said.contains(
            "but it cannot tell which images no registry can give back (through CRI alone"
        ),
        "{said}"
    );
    let explained = String::from_utf8_lossy(&cri.run(&["explain", imported]).stdout).into_owned();
    assert!(
        explained.contains("provenance:") && explained.contains("unknown (through CRI alone"),
        "{explained}"
    );
}
