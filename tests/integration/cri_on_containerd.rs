//! `runtime.kind: cri` against containerd's CRI socket: safeprune through
//! CRI alone (no containerd API), as on a CRI-O node, on every commit, on
//! Debian 12's containerd 1.6.20 and Debian unstable's 2.x. Pods are made
//! through CRI as kubelet makes them (`util::containerd`, `pods.rs`); the
//! `safeprune` binary runs on a policy that points at the socket as a CRI
//! endpoint: `plan`, `explain`, `--compare crictl-prune`, a reviewed plan
//! (`plan --save`, `run --plan`), the disk watermarks on CRI's
//! `ImageFsInfo`, and `run`, after which kubelet's next asks are answered.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::util;
use util::Required;
use util::containerd::{CRI_NAMESPACE, ContainerdVersion, PrivateContainerd, SANDBOX_IMAGE};
use util::node::{Cli, Layout, Runtime, decision, outcome};
use util::pod::Pod;

const APP: &str = "docker.io/library/app:1";
const INIT: &str = "docker.io/library/init:1";
const JOB: &str = "docker.io/library/job:1";
const OLD: &str = "docker.io/library/old:1";
/// Mounted as an image volume by the live pod (containerd 2.x only).
const DATA: &str = "docker.io/library/data:1";

/// Pruning at once: ages are not what these tests are about.
const AT_ONCE: &str = "containers: { min_age: \"0\" }\nimages: { min_age: \"0\" }\n";

/// What a run on [`lay_out`]'s node removes.
const REMOVED: [&str; 3] = ["finished pod's exited task", "job image", "old image"];

/// A containerd node seen through CRI: pod `default/web` live, its
/// `istio-init` exited and its `app` running (on 2.x with `DATA` mounted
/// as an image volume by a second pod); pod `batch/job` finished, its
/// sandbox stopped, its `task` exited; `OLD` unused; the sandbox image.
async fn lay_out(engine: &PrivateContainerd) -> Layout {
    let mut layout = Layout::default();
    let images = engine.import_images(CRI_NAMESPACE, &[APP, INIT, JOB, OLD], &["sh"]);
    for (role, image) in ["app image", "init image", "job image", "old image"]
        .into_iter()
        .zip(&images)
    {
        layout.insert(role, image.config_digest.clone());
    }
    let pause = engine.cri_image_status(SANDBOX_IMAGE).await;
    layout.insert(
        "sandbox image",
        pause
            .image
            .expect("the sandbox image, imported at start")
            .id,
    );

    let web = Pod::new("web", "default");
    let sandbox = engine.run_pod_sandbox(&web).await;
    let init = engine
        .run_pod_container_to_exit(&web, &sandbox, "istio-init", INIT, &[])
        .await;
    let app = engine
        .run_pod_container(&web, &sandbox, "app", APP, &[])
        .await;
    layout.insert("live pod's exited istio-init", init);
    layout.insert("live pod's running app", app);

    let (_, task) = engine
        .run_stopped_pod(&Pod::new("job", "batch"), "task", JOB)
        .await;
    layout.insert("finished pod's exited task", task);

    if engine.version() == ContainerdVersion::V2 {
        let data = engine.import_image_with_extra(CRI_NAMESPACE, DATA, "volume");
        let reader = engine
            .run_image_volume_pod(
                &Pod::new("reader", "default"),
                "app",
                APP,
                &data.config_digest,
            )
            .await;
        layout.insert("data image", data.config_digest);
        layout.insert("reader's running app", reader.container_id);
    }
    layout
}

/// The policy for the engine's CRI socket, with `extra`.
fn cri_cli(engine: &PrivateContainerd, extra: &str) -> Cli {
    Cli::new(
        &Runtime::Cri(&format!("unix://{}", engine.endpoint())),
        extra,
    )
}

util::containerd::containerd_tests! {
    #[tokio::test(flavor = "multi_thread")]
    through_cri_alone_a_run_removes_what_kubelet_no_longer_needs,
    #[tokio::test(flavor = "multi_thread")]
    through_cri_alone_a_reviewed_plan_and_the_disk_watermarks_hold,
}

async fn through_cri_alone_a_run_removes_what_kubelet_no_longer_needs(version: ContainerdVersion) {
    let engine = PrivateContainerd::start_version(version).await.required();
    let layout = lay_out(&engine).await;
    let cli = cri_cli(&engine, AT_ONCE);

    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    assert_eq!(plan["runtime"], "cri");
    // CRI's `Version` as Debian builds it: `1.6.20~ds1`, `2.1.9+unknown`.
    let reason = plan["runtime_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with(&format!(
            "runtime.kind: cri, containerd {}",
            engine.release()
        )) && reason.ends_with(&format!(" at unix://{}", engine.endpoint())),
        "{reason}"
    );
    assert_eq!(
        plan["summary"]["not_applicable"],
        json!(["volume", "network", "build_cache"])
    );
    layout.assert_decisions(&plan, &REMOVED);
    let rule = |role: &str| decision(&plan, layout.id(role))["rule"].clone();
    assert_eq!(rule("live pod's exited istio-init"), "protected_label");
    assert_eq!(rule("live pod's running app"), "running");
    assert_eq!(rule("app image"), "in_use");
    assert_eq!(rule("init image"), "in_use");
    // The default policy keeps pause images by name, before CRI's pin.
    assert_eq!(rule("sandbox image"), "keep_pattern");
    if version == ContainerdVersion::V2 {
        let data = decision(&plan, layout.id("data image"));
        assert_eq!(data["rule"], "in_use", "{data}");
        assert!(
            data["detail"]
                .as_str()
                .unwrap()
                .starts_with("mounted as a volume by kept container app_reader_default_"),
            "{data}"
        );
    }

    let out = cli.run(&["explain", OLD]);
    let explained = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{explained}");
    assert!(explained.contains("eligible"), "{explained}");

    // crictl's model through CRI: the images no CRI container (of any
    // state) was made from and CRI does not report pinned; on 2.x CRI pins
    // the sandbox image (docs/engines.md, "containerd 2.x"). Held to what
    // crictl's logic removes in `compare_prune.rs`.
    let (code, compared) = cli.json(&["plan", "--compare", "crictl-prune", "--output", "json"]);
    assert_eq!(code, Some(0), "{compared}");
    assert_eq!(compared["command"], "crictl rmi --prune");
    let command_removes: BTreeSet<String> = ["only_command", "both"]
        .iter()
        .flat_map(|k| compared[*k].as_array().cloned().unwrap_or_default())
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect();
    let mut expected: BTreeSet<String> = [layout.id("old image").to_owned()].into();
    if version == ContainerdVersion::V2 {
        // crictl removes an image a running container mounts as a volume,
        // and containerd, unlike CRI-O, lets it.
        expected.insert(layout.id("data image").to_owned());
    } else {
        // 1.6.20 reports nothing pinned: crictl takes the sandbox image.
        expected.insert(layout.id("sandbox image").to_owned());
    }
    assert_eq!(command_removes, expected, "{compared}");

    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    layout.assert_deleted(&report, &REMOVED);
    let left: BTreeSet<String> = engine.cri_container_ids().await.into_iter().collect();
    let images: BTreeSet<String> = engine
        .cri_images()
        .await
        .into_iter()
        .map(|i| i.id)
        .collect();
    layout.assert_left(|id| left.contains(id) || images.contains(id), &REMOVED);
    // What kubelet asks next, containerd answers: the live pod's app runs.
    let app = engine
        .container_status(layout.id("live pod's running app"), false)
        .await;
    assert_eq!(
        app.status.expect("a status").state,
        k8s_cri::v1::ContainerState::ContainerRunning as i32
    );
}

async fn through_cri_alone_a_reviewed_plan_and_the_disk_watermarks_hold(
    version: ContainerdVersion,
) {
    let engine = PrivateContainerd::start_version(version).await.required();
    let layout = lay_out(&engine).await;

    // Under `high_percent` (100: never over it) every image is kept for the
    // disk, measured where CRI's ImageFsInfo says the images lie.
    let cli = cri_cli(
        &engine,
        "containers: { min_age: \"0\" }\nimages: { min_age: \"0\", disk: { high_percent: 100, low_percent: 0 } }\n",
    );
    let (code, plan) = cli.json(&["plan", "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    assert_eq!(
        plan["image_fs"]["path"],
        engine.image_fs().display().to_string(),
        "{}",
        plan["image_fs"]
    );
    for role in ["job image", "old image"] {
        assert_eq!(
            decision(&plan, layout.id(role))["rule"],
            "disk_below_threshold",
            "{role}"
        );
    }

    // Over `high_percent` (1), with `low_percent` 0 out of reach: every
    // eligible image goes, and the report says how full it was.
    cli.rewrite(
        &Runtime::Cri(&format!("unix://{}", engine.endpoint())),
        "containers: { min_age: \"0\" }\nimages: { min_age: \"0\", disk: { high_percent: 1, low_percent: 0 } }\n",
    );
    let saved = cli.path("reviewed.json");
    let saved_arg = saved.to_str().unwrap();
    let (code, plan) = cli.json(&["plan", "--save", saved_arg, "--output", "json"]);
    assert_eq!(code, Some(0), "{plan}");
    layout.assert_decisions(&plan, &REMOVED);
    assert!(plan["image_fs"]["before_percent"].as_f64().unwrap() > 1.0);

    // Between the review and the run, kubelet starts a container of the
    // old image: the reviewed plan lists it, the run keeps it.
    let late = Pod::new("late", "default");
    let sandbox = engine.run_pod_sandbox(&late).await;
    let uses_old = engine
        .run_pod_container(&late, &sandbox, "app", OLD, &[])
        .await;
    let (code, report) = cli.json(&["run", "--plan", saved_arg, "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    for role in ["finished pod's exited task", "job image"] {
        assert_eq!(
            outcome(&report, layout.id(role))["result"],
            "deleted",
            "{role}"
        );
    }
    let old = outcome(&report, layout.id("old image"));
    assert_eq!(old["reason"], "changed", "{old}");
    assert!(
        old["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("now kept by in_use")),
        "{old}"
    );
    let images: BTreeSet<String> = engine
        .cri_images()
        .await
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert!(images.contains(layout.id("old image")));
    assert!(!images.contains(layout.id("job image")));
    assert!(
        engine.cri_container_ids().await.contains(&uses_old),
        "the new container stays"
    );
    let after: &Value = &report["image_fs"];
    assert!(after["after_percent"].as_f64().is_some(), "{after}");
}
