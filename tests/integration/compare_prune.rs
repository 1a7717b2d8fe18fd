//! `plan --compare docker-prune-volumes` held to the real
//! command: two private dockerds laid out alike, the prediction on one,
//! the real `docker system prune -a -f --volumes` on the other, and the
//! same objects (by name) removed. Also what safeprune keeps that the
//! command removes, with safeprune's rule.

use crate::util;

use std::collections::{BTreeMap, BTreeSet};

use bollard::models::HostConfig;
use bollard::query_parameters::{ListContainersOptionsBuilder, ListImagesOptionsBuilder};
use serde_json::Value;
use util::docker::PrivateDockerd;
use util::node::{Cli, Runtime};
use util::{EXIT_0, RUN_FOREVER};

/// One node of every case the model distinguishes: a running container on
/// a network with a named volume, an exited one on another with its own,
/// one only created, images used by each and by none (one tagged twice),
/// a network and volumes nobody uses, an anonymous one among them.
async fn lay_out(e: &PrivateDockerd) {
    e.import_busybox_image("used:1", Some("used")).await;
    e.import_busybox_image("stopped:1", Some("stopped")).await;
    e.import_busybox_image("unused:1", Some("unused")).await;
    let multi = e.import_busybox_image("multi:1", Some("multi")).await;
    e.tag_image(&multi, "multi:2").await;
    for network in ["front", "back", "spare"] {
        e.create_network(network, &[]).await;
    }
    for volume in ["data", "cache", "loose"] {
        e.create_volume(Some(volume)).await;
    }
    e.create_volume(None).await;
    let with = |network: &str, volume: &str| HostConfig {
        network_mode: Some(network.to_owned()),
        binds: Some(vec![format!("{volume}:/{volume}")]),
        ..HostConfig::default()
    };
    let web = e
        .create_container_with("web", "used:1", &[], RUN_FOREVER, with("front", "data"))
        .await;
    e.start_container(&web).await;
    let old = e
        .create_container_with("old", "stopped:1", &[], EXIT_0, with("back", "cache"))
        .await;
    e.start_container(&old).await;
    assert_eq!(e.wait_container(&old).await, 0);
    e.create_container("new", "stopped:1", &[], EXIT_0).await;
    // A BuildKit build: an image, and build cache records.
    e.build_with_buildkit("built:1");
    // An image in use under several names, which the command
    // strips down to one reference; and `docker commit` of a container of
    // base:1 into committed:1, which runs: the command takes only base:1's
    // name.
    let used = e
        .docker()
        .inspect_image("used:1")
        .await
        .unwrap()
        .id
        .unwrap();
    for extra in ["used:2", "zed/used:1", "other:1"] {
        e.tag_image(&used, extra).await;
    }
    e.import_busybox_image("base:1", Some("base")).await;
    let source = e.create_container("source", "base:1", &[], EXIT_0).await;
    util::run_ok(e.cli().args(["commit", &source, "committed:1"]));
    let child = e
        .create_container("child", "committed:1", &[], RUN_FOREVER)
        .await;
    e.start_container(&child).await;
}

/// Every object of the engine: (kind, id) → its names, as the report
/// kinds name them. An anonymous volume is named `<anonymous>`: its name
/// is random, so two engines cannot share it.
async fn objects(e: &PrivateDockerd) -> BTreeMap<(String, String), BTreeSet<String>> {
    let d = e.docker();
    let mut all = BTreeMap::new();
    let options = ListContainersOptionsBuilder::default().all(true).build();
    for c in d.list_containers(Some(options)).await.unwrap() {
        let names = c
            .names
            .unwrap_or_default()
            .iter()
            .map(|n| n.trim_start_matches('/').to_owned())
            .collect();
        all.insert(("container".into(), c.id.unwrap()), names);
    }
    // Every image, the untagged parents `docker images` hides too: the
    // command leaves such a parent behind it, with no name.
    let options = ListImagesOptionsBuilder::default().all(true).build();
    for i in d.list_images(Some(options)).await.unwrap() {
        all.insert(("image".into(), i.id), i.repo_tags.into_iter().collect());
    }
    for n in d
        .list_networks(None::<bollard::query_parameters::ListNetworksOptions>)
        .await
        .unwrap()
    {
        all.insert(("network".into(), n.id.unwrap()), [n.name.unwrap()].into());
    }
    for v in d
        .list_volumes(None::<bollard::query_parameters::ListVolumesOptions>)
        .await
        .unwrap()
        .volumes
        .unwrap_or_default()
    {
        let name = if v.name.len() == 64 && v.name.bytes().all(|b| b.is_ascii_hexdigit()) {
            "<anonymous>".to_owned()
        } else {
            v.name.clone()
        };
        all.insert(("volume".into(), v.name), [name].into());
    }
    // Build cache ids are random: named by what made them.
    for b in build_cache(e).await {
        let description = b["Description"].as_str().unwrap_or_default();
        all.insert(
            ("build_cache".into(), b["ID"].as_str().unwrap().to_owned()),
            [format!("<build cache: {description}>")].into(),
        );
    }
    all
}

/// The build cache records of `/system/df` (API 1.41 answers them there;
/// bollard's type reads the field of later versions), asked over the
/// socket by hand.
/// Waits until no build cache record of `e` is in use, for at most 10 s.
async fn records_released(e: &PrivateDockerd) {
    let begun = std::time::Instant::now();
    loop {
        let records = build_cache(e).await;
        if !records.iter().any(|r| r["InUse"].as_bool() == Some(true)) {
            return;
        }
        assert!(
            begun.elapsed() < std::time::Duration::from_secs(10),
            "records still in use after 10 s: {records:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn build_cache(e: &PrivateDockerd) -> Vec<Value> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = e.endpoint().trim_start_matches("unix://");
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    stream
        .write_all(b"GET /v1.41/system/df HTTP/1.0\r\nHost: docker\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let at = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("an HTTP answer");
    let body: Value = serde_json::from_slice(&answer[at + 4..]).unwrap();
    body["BuildCache"].as_array().cloned().unwrap_or_default()
}

/// The names of `ids` in `objects`, by kind, sorted (a multiset: several
/// anonymous volumes share a name).
pub(super) fn names(
    objects: &BTreeMap<(String, String), BTreeSet<String>>,
    ids: impl IntoIterator<Item = (String, String)>,
) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = ids
        .into_iter()
        .flat_map(|key| {
            let names = objects
                .get(&key)
                .unwrap_or_else(|| panic!("{key:?} is not on the engine"));
            names
                .iter()
                .map(move |n| (key.0.clone(), n.clone()))
                .collect::<Vec<_>>()
        })
        .collect();
    out.sort();
    out
}

/// `(kind, id)` of every entry of list `list` of a comparison.
pub(super) fn listed(comparison: &Value, list: &str) -> Vec<(String, String)> {
    comparison[list]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_owned(),
                d["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The prediction of `--compare compare` on `predicted_on`, and the real
/// `docker system prune -a -f` with `flags` on `pruned` (laid out alike):
/// the same objects, by name. Returns the comparison.
async fn predicted_as_removed(
    predicted_on: &PrivateDockerd,
    pruned: &PrivateDockerd,
    compare: &str,
    flags: &[&str],
) -> Value {
    let cli = Cli::new(&Runtime::Docker(predicted_on.endpoint()), "");
    let (code, comparison) = cli.json(&["plan", "--compare", compare, "--output", "json"]);
    assert_eq!(code, Some(0), "{comparison}");
    let line = ["docker system prune"]
        .into_iter()
        .chain(flags.iter().copied());
    assert_eq!(comparison["command"], line.collect::<Vec<_>>().join(" "));
    let before = objects(predicted_on).await;
    let predicted = names(
        &before,
        listed(&comparison, "only_command")
            .into_iter()
            .chain(listed(&comparison, "both")),
    );
    let before_pruned = objects(pruned).await;
    util::run_ok(pruned.cli().args(["system", "prune"]).args(flags));
    let after = objects(pruned).await;
    let removed = names(
        &before_pruned,
        before_pruned
            .keys()
            .filter(|k| !after.contains_key(*k))
            .cloned(),
    );
    eprintln!("removed by docker system prune {flags:?}: {removed:?}");
    assert!(!removed.is_empty());
    assert_eq!(predicted, removed, "the model and the command differ");
    // The names it took off images it kept, by name.
    let mut untagged: Vec<String> = before_pruned
        .iter()
        .filter(|(k, _)| k.0 == "image")
        .filter_map(|(k, names)| Some(names.difference(after.get(k)?).cloned().collect::<Vec<_>>()))
        .flatten()
        .collect();
    untagged.sort();
    let mut predicted_untags: Vec<String> = comparison["untagged"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|u| u["names"].as_array().unwrap().clone())
        .map(|n| n.as_str().unwrap().to_owned())
        .filter(|n| !n.contains('@'))
        .collect();
    predicted_untags.sort();
    eprintln!("untagged by docker system prune {flags:?}: {untagged:?}");
    assert_eq!(
        predicted_untags, untagged,
        "the model and the command take different names off kept images"
    );
    // The plan removed nothing.
    assert_eq!(objects(predicted_on).await, before);
    comparison
}

#[tokio::test(flavor = "multi_thread")]
async fn the_prediction_matches_docker_system_prune_object_for_object() {
    let (predicted_on, pruned, pruned_with_volumes) = tokio::join!(
        PrivateDockerd::start(),
        PrivateDockerd::start(),
        PrivateDockerd::start()
    );
    tokio::join!(
        lay_out(&predicted_on),
        lay_out(&pruned),
        lay_out(&pruned_with_volumes)
    );
    let without = predicted_as_removed(&predicted_on, &pruned, "docker-prune", &["-a", "-f"]).await;
    let removes = without["summary"]["command_removes"].as_u64().unwrap();
    assert!(removes > 7, "no build cache predicted: {without}");
    let comparison = predicted_as_removed(
        &predicted_on,
        &pruned_with_volumes,
        "docker-prune-volumes",
        &["-a", "-f", "--volumes"],
    )
    .await;

    // safeprune's default policy keeps, for instance, the exited
    // container (younger than min_age) and every volume (volumes are off).
    let kept: BTreeMap<(String, String), String> = comparison["only_command"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                (
                    d["kind"].as_str().unwrap().to_owned(),
                    d["name"].as_str().unwrap().to_owned(),
                ),
                d["rule"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(kept[&("container".into(), "old".into())], "too_young");
    assert_eq!(kept[&("volume".into(), "loose".into())], "disabled");
    // With the volumes: the two named ones no running container mounts (API
    // 1.41 prunes named ones too) and the anonymous one.
    let summary = &comparison["summary"];
    assert_eq!(
        summary["command_removes"].as_u64(),
        Some(removes + 3),
        "{summary}"
    );
}

/// A build of nine chained steps leaves nine build cache
/// records, each built on the one before. `docker builder prune -a -f`
/// removes them all; so does `safeprune run` now, leaves first (in id
/// order it left 5 or 6, refused while their children were left).
#[tokio::test(flavor = "multi_thread")]
async fn a_chain_of_build_cache_records_goes_whole_as_with_docker_builder_prune() {
    let (ours, theirs) = tokio::join!(PrivateDockerd::start(), PrivateDockerd::start());
    for e in [&ours, &theirs] {
        e.build_chain_with_buildkit("chain:1", 9);
    }
    // BuildKit holds a build's records a moment after the build answers
    // (on a loaded machine, long enough for a prune to find the dockerfile's
    // source record in use): both sides start once none is.
    for e in [&ours, &theirs] {
        records_released(e).await;
    }
    let before = build_cache(&ours).await.len();
    assert!(before >= 9, "{before} build cache records");
    assert!(
        build_cache(&ours)
            .await
            .iter()
            .any(|r| r["Parent"].as_str().is_some_and(|p| !p.is_empty())),
        "the records are not chained"
    );
    util::run_ok(theirs.cli().args(["builder", "prune", "-a", "-f"]));
    assert_eq!(build_cache(&theirs).await.len(), 0);
    let cli = Cli::new(
        &Runtime::Docker(ours.endpoint()),
        "containers: {enabled: false}\nimages: {enabled: false}\nbuild_cache: {min_age: 0s}\n",
    );
    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    let left = build_cache(&ours).await;
    assert!(left.is_empty(), "left: {left:#?}\nreport: {report}");
    assert_eq!(
        report["summary"]["delete"]["build_cache"].as_u64(),
        Some(before as u64)
    );
}

/// On the real engine: a parent of an image in use is kept as in
/// use, its child named, and keeps its name; an unused parent and child
/// both go in one run, the child first (in id order the parent was
/// refused, 409, in one run out of two).
#[tokio::test(flavor = "multi_thread")]
async fn safeprune_keeps_a_parent_in_use_and_removes_an_unused_chain_children_first() {
    let e = PrivateDockerd::start().await;
    let commit = |from: &str, to: &str| {
        let e = &e;
        let (from, to) = (from.to_owned(), to.to_owned());
        async move {
            let source = e
                .create_container(&to.replace(':', "-"), &from, &[], EXIT_0)
                .await;
            util::run_ok(e.cli().args(["commit", &source, &to]));
            util::run_ok(e.cli().args(["rm", &source]));
        }
    };
    e.import_busybox_image("base:1", Some("base")).await;
    commit("base:1", "committed:1").await;
    let child = e
        .create_container("child", "committed:1", &[], RUN_FOREVER)
        .await;
    e.start_container(&child).await;
    // Several parent-child pairs, so that id order puts some parents first.
    for n in 0..4 {
        e.import_busybox_image(&format!("old{n}:1"), Some(&format!("old{n}")))
            .await;
        commit(&format!("old{n}:1"), &format!("old{n}-child:1")).await;
    }
    let cli = Cli::new(
        &Runtime::Docker(e.endpoint()),
        "images: {min_age: 0s}\nbuild_cache: {enabled: false}\n",
    );
    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    let base = util::node::decision_named(&plan, "base:1");
    assert_eq!(base["rule"], "in_use", "{base}");
    assert_eq!(
        base["detail"], "image committed:1 is built on it and is kept (in_use)",
        "{base}"
    );
    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    let outcomes = report["outcomes"].as_array().unwrap();
    let deleted: BTreeSet<&str> = outcomes
        .iter()
        .filter(|o| o["result"] == "deleted")
        .map(|o| o["name"].as_str().unwrap())
        .collect();
    for n in 0..4 {
        assert!(deleted.contains(format!("old{n}:1").as_str()), "{report}");
        assert!(
            deleted.contains(format!("old{n}-child:1").as_str()),
            "{report}"
        );
    }
    assert!(
        outcomes.iter().all(|o| o["result"] == "deleted"),
        "a removal was refused: {report}"
    );
    let names: BTreeSet<String> = objects(&e)
        .await
        .into_iter()
        .filter(|(k, _)| k.0 == "image")
        .flat_map(|(_, names)| names)
        .collect();
    assert_eq!(
        names,
        ["base:1", "committed:1"].map(str::to_owned).into(),
        "safeprune takes no name off what it keeps"
    );
}

/// The ids (`kind/id`) a comparison says the command removes.
fn command_removes(comparison: &Value) -> BTreeSet<String> {
    listed(comparison, "only_command")
        .into_iter()
        .chain(listed(comparison, "both"))
        .map(|(kind, id)| format!("{kind} {id}"))
        .collect()
}

util::containerd::containerd_tests! {
    #[tokio::test(flavor = "multi_thread")]
    on_containerd_the_crictl_and_nerdctl_models_read_the_cri_node,
    #[tokio::test(flavor = "multi_thread")]
    the_crictl_prediction_matches_a_replay_of_crictl_rmi_prune,
}

/// On containerd through CRI: what `crictl rmi --prune` and `nerdctl -n
/// k8s.io system prune -a -f` would remove from a node with a live pod
/// (its app running, its init container exited) and an unused image, by
/// the models; `docker-prune` is refused there.
async fn on_containerd_the_crictl_and_nerdctl_models_read_the_cri_node(
    version: util::containerd::ContainerdVersion,
) {
    use util::Required;
    use util::containerd::{CRI_NAMESPACE, PrivateContainerd};
    use util::pod::Pod;
    let engine = PrivateContainerd::start_version(version).await.required();
    let images = engine.import_images(
        CRI_NAMESPACE,
        &[
            "docker.io/library/app:1",
            "docker.io/library/init:1",
            "docker.io/library/unused:1",
        ],
        &["sh"],
    );
    let image = |n: usize| format!("image {CRI_NAMESPACE}/{}", images[n].digest);
    let pod = Pod::new("web", "default");
    let sandbox = engine.run_pod_sandbox(&pod).await;
    engine
        .run_pod_container(&pod, &sandbox, "app", "docker.io/library/app:1", &[])
        .await;
    let init = engine
        .run_pod_container_to_exit(&pod, &sandbox, "init", "docker.io/library/init:1", &[])
        .await;
    let endpoint = engine.endpoint();
    let cli = Cli::new(&Runtime::Containerd(&endpoint, &[CRI_NAMESPACE]), "");
    let compare = |with: &str| {
        let (code, comparison) = cli.json(&["plan", "--compare", with, "--output", "json"]);
        assert_eq!(code, Some(0), "{comparison}");
        comparison
    };

    // crictl: the images no CRI container was made from and CRI does not
    // report pinned; the exited init container holds its image (held to
    // crictl's logic over CRI below).
    let crictl = compare("crictl-prune");
    assert_eq!(crictl["command"], "crictl rmi --prune");
    let removes = command_removes(&crictl);
    assert!(removes.contains(&image(2)), "{crictl}");
    assert_crictl_and_the_sandbox_image(version, &crictl);

    // nerdctl: the exited init container, then the images no container
    // left names; safeprune keeps the init container of a live pod.
    let nerdctl = compare("nerdctl-prune");
    let init_id = format!("container {CRI_NAMESPACE}/{init}");
    assert_eq!(
        command_removes(&nerdctl),
        [init_id.clone(), image(1), image(2)].into()
    );
    let kept = nerdctl["only_command"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| {
            format!(
                "{} {}",
                d["kind"].as_str().unwrap(),
                d["id"].as_str().unwrap()
            ) == init_id
        })
        .expect("the init container in only_command");
    assert_eq!(kept["rule"], "live_pod_sandbox", "{kept}");

    // With `auto`, the runtime is known once it answers: still refused
    // before `--save` writes anything.
    let saved = tempfile::tempdir().unwrap();
    let saved = saved.path().join("plan.json");
    let auto = Cli::with_yaml(&format!(
        "runtime:\n  kind: auto\n  docker: {{endpoint: /nonexistent/docker.sock}}\n  \
         containerd: {{endpoint: {endpoint}, namespaces: [{CRI_NAMESPACE}]}}\n"
    ));
    let out = auto.run(&[
        "plan",
        "--compare",
        "docker-prune",
        "--save",
        saved.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!saved.exists(), "the plan was saved before the refusal");
    let out = cli.run(&["plan", "--compare", "docker-prune"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("models a docker node; this one runs containerd"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What `--compare crictl-prune` says of the sandbox image of pod
/// `default/web`, beside the one unused image crictl removes.
fn assert_crictl_and_the_sandbox_image(
    version: util::containerd::ContainerdVersion,
    crictl: &Value,
) {
    use util::containerd::{ContainerdVersion, SANDBOX_IMAGE};
    let removes = command_removes(crictl);
    let pause = crictl["only_command"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == SANDBOX_IMAGE);
    match version {
        // 1.6.20's CRI reports nothing pinned, so the sandbox image goes
        // too, though safeprune keeps it in use.
        ContainerdVersion::V1_6 => {
            assert_eq!(removes.len(), 2, "{crictl}");
            let pause = pause.expect("the sandbox image, removed by crictl, kept by safeprune");
            assert_eq!(pause["rule"], "in_use", "{pause}");
            assert!(
                pause["detail"]
                    .as_str()
                    .unwrap()
                    .starts_with("the sandbox image of pod default/web: "),
                "{pause}"
            );
        }
        // 2.3.4's CRI reports the sandbox image pinned (`pinned_images`;
        // docs/engines.md, "containerd 2.x"): crictl keeps it.
        ContainerdVersion::V2 => {
            assert_eq!(removes.len(), 1, "{crictl}");
            assert!(pause.is_none(), "{crictl}");
        }
    }
}

/// One CRI node for the crictl comparison: pod `default/web` with `app`
/// running and `init` exited, an unused image, one labelled pinned by hand,
/// and on containerd 2.x a pod whose container mounts `data:1` as a volume.
async fn lay_out_cri(engine: &util::containerd::PrivateContainerd) {
    use util::containerd::{CRI_NAMESPACE, ContainerdVersion};
    use util::pod::Pod;
    engine.import_images(
        CRI_NAMESPACE,
        &[
            "docker.io/library/app:1",
            "docker.io/library/init:1",
            "docker.io/library/unused:1",
            "docker.io/library/labelled:1",
        ],
        &["sh"],
    );
    engine.ctr_ok(
        CRI_NAMESPACE,
        &[
            "images",
            "label",
            "docker.io/library/labelled:1",
            "io.cri-containerd.pinned=pinned",
        ],
    );
    let pod = Pod::new("web", "default");
    let sandbox = engine.run_pod_sandbox(&pod).await;
    engine
        .run_pod_container(&pod, &sandbox, "app", "docker.io/library/app:1", &[])
        .await;
    engine
        .run_pod_container_to_exit(&pod, &sandbox, "init", "docker.io/library/init:1", &[])
        .await;
    if engine.version() == ContainerdVersion::V2 {
        let data =
            engine.import_image_with_extra(CRI_NAMESPACE, "docker.io/library/data:1", "volume");
        engine
            .run_image_volume_pod(
                &Pod::new("reader", "default"),
                "app",
                "docker.io/library/app:1",
                &data.config_digest,
            )
            .await;
    }
}

/// The images CRI lists, each by its first tag (sorted), as the report
/// names an image.
async fn cri_image_names(engine: &util::containerd::PrivateContainerd) -> BTreeSet<String> {
    engine
        .cri_images()
        .await
        .into_iter()
        .filter_map(|i| {
            let mut tags = i.repo_tags;
            tags.sort();
            tags.into_iter().next()
        })
        .collect()
}

/// `--compare crictl-prune` held to what `crictl rmi --prune`
/// removes, its logic as cri-tools 1.36 has it played over CRI by the
/// harness (`Kubelet::rmi_prune`, honouring CRI's `pinned`): no crictl
/// binary is served here, so two readings of crictl's logic (safeprune's
/// model, the harness's replay) are held to agree on a real CRI; on twin
/// private containerds laid out alike,
/// on 1.6.20 (whose CRI reports nothing pinned: the sandbox image and a
/// hand-labelled one go, though safeprune keeps both) and on 2.3.4 (which
/// pins the sandbox image; an image mounted as a volume goes, though
/// safeprune keeps it in use).
async fn the_crictl_prediction_matches_a_replay_of_crictl_rmi_prune(
    version: util::containerd::ContainerdVersion,
) {
    use util::Required;
    use util::containerd::{CRI_NAMESPACE, ContainerdVersion, PrivateContainerd, SANDBOX_IMAGE};
    use util::kubelet::Kubelet;
    let (predicted_on, pruned) = tokio::join!(
        PrivateContainerd::start_version(version),
        PrivateContainerd::start_version(version)
    );
    let (predicted_on, pruned) = (predicted_on.required(), pruned.required());
    tokio::join!(lay_out_cri(&predicted_on), lay_out_cri(&pruned));
    let endpoint = predicted_on.endpoint();
    let predict = |cli: &Cli| -> BTreeSet<String> {
        let (code, comparison) =
            cli.json(&["plan", "--compare", "crictl-prune", "--output", "json"]);
        assert_eq!(code, Some(0), "{comparison}");
        ["only_command", "both"]
            .iter()
            .flat_map(|list| comparison[*list].as_array().unwrap().clone())
            .filter(|d| d["kind"] == "image")
            .map(|d| d["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let cli = Cli::new(&Runtime::Containerd(&endpoint, &[CRI_NAMESPACE]), "");
    let predicted = predict(&cli);
    // Through CRI alone (`runtime.kind: cri` at the same socket) the model
    // predicts the same: containerd, unlike CRI-O, removes an image a
    // running container mounts.
    let through_cri = Cli::new(&Runtime::Cri(&format!("unix://{endpoint}")), "");
    assert_eq!(predict(&through_cri), predicted, "{version:?}: kind cri");

    let before = cri_image_names(&pruned).await;
    // containerd serves CRI on its own socket.
    Kubelet::new(pruned.socket(), &pruned.path("kubelet"), pruned.scope()).rmi_prune();
    let after = cri_image_names(&pruned).await;
    let removed: BTreeSet<String> = before.difference(&after).cloned().collect();
    eprintln!("{version:?}: the replay of crictl rmi --prune removed {removed:?}");
    assert_eq!(
        predicted, removed,
        "{version:?}: the model and the replay of crictl's logic differ"
    );
    let pause_removed = removed.contains(SANDBOX_IMAGE);
    match version {
        ContainerdVersion::V1_6 => {
            assert!(pause_removed, "{removed:?}");
            assert!(removed.contains("docker.io/library/labelled:1"));
        }
        ContainerdVersion::V2 => {
            assert!(!pause_removed, "{removed:?}");
            assert!(removed.contains("docker.io/library/data:1"));
        }
    }
    // safeprune itself keeps the sandbox image, the labelled one, and
    // the one mounted as a volume.
    let (_, plan) = cli.json(&["plan", "--output", "json"]);
    for d in plan["decisions"].as_array().unwrap() {
        if [
            SANDBOX_IMAGE,
            "docker.io/library/labelled:1",
            "docker.io/library/data:1",
        ]
        .contains(&d["name"].as_str().unwrap_or_default())
        {
            assert_eq!(d["decision"], "keep", "{version:?}: {d}");
        }
    }
}
