//! Images pruned by disk pressure on a real private dockerd
//! whose data root is a small loop-mounted ext4: filled past
//! `high_percent` with images of known sizes used in a known order, `run`
//! brings the file system to `low_percent` or under by removing the least
//! recently used images first, keeps the newest of each repository
//! (`keep_recent`) and what is in use, and stops removing images once the
//! target is met (here sooner than planned: the plan does not count what
//! the containers' removals free). The Docker tests run on Docker 20.10
//! and on Docker 29 with each image store (`docker_tests!`); on the
//! containerd store the small file system holds containerd's root, where
//! that store keeps images.

use crate::util;

use std::collections::HashMap;
use std::path::Path;

use util::Required;
use util::containerd::{CRI_NAMESPACE, ContainerdVersion, PrivateContainerd, containerd_tests};
use util::daemon::Daemon;
use util::df;
use util::docker::PrivateDockerd;
use util::docker_matrix::{DockerVersion, VersionedDockerd, docker_tests};
use util::node::{Cli, Runtime, decision};
use util::pod::Pod;

docker_tests! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    under_pressure_the_least_recently_used_go_until_low_percent,
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    the_usage_history_remembers_uses_whose_containers_are_gone,
}

/// How full the file system holding `path` is, in percent as `df` says.
#[expect(clippy::cast_precision_loss, reason = "a percentage")]
pub(crate) fn percent(path: &Path) -> f64 {
    let (used, avail) = df(path);
    used as f64 * 100.0 / (used + avail) as f64
}

/// What each image holds of its own, and what one container leaves in its
/// writable layer.
const EXTRA_MIB: u32 = 16;
const WRITTEN_MIB: u32 = 40;

/// Lays the node out: images imported in order, then used in order by
/// containers that exit (one leaving `WRITTEN_MIB` behind), then one in
/// use. The image ids by name.
async fn lay_out(engine: &PrivateDockerd) -> HashMap<&'static str, String> {
    // Imported in this order: each import is a use (its tag time).
    let names = [
        "app:1", "app:2", "app:3", "app:4", "tool:1", "tool:2", "tool:3",
    ];
    let mut ids = HashMap::new();
    for name in names {
        let extra = format!("{name}{}", "x".repeat((EXTRA_MIB << 20) as usize));
        ids.insert(name, engine.import_busybox_image(name, Some(&extra)).await);
    }
    let write =
        format!("busybox dd if=/dev/zero of=/big bs=1048576 count={WRITTEN_MIB} 2>/dev/null");
    for name in ["app:2", "tool:1", "app:1", "tool:3"] {
        let cmd: &[&str] = if name == "tool:1" {
            &["sh", "-c", &write]
        } else {
            util::EXIT_0
        };
        let id = engine
            .create_container(&format!("ran-{}", name.replace(':', "-")), name, &[], cmd)
            .await;
        engine.start_container(&id).await;
        assert_eq!(engine.wait_container(&id).await, 0, "{name} exits 0");
    }
    // And one in use, last: Docker's container list dates a container to
    // the second, so it starts a second after the last exit.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    engine.run_forever("running-tool-2", "tool:2", &[]).await;
    ids
}

/// Watermarks for a file system now `start` percent full: a little under
/// it, and low enough that, after the container's removal, one and a half
/// images more must go.
fn watermarks(root: &Path, start: f64) -> (u8, u8) {
    let (used, avail) = df(root);
    #[expect(clippy::cast_precision_loss, reason = "a percentage")]
    let mib = f64::from(1 << 20) * 100.0 / (used + avail) as f64;
    let low = start - f64::from(WRITTEN_MIB) * mib - 1.5 * f64::from(EXTRA_MIB) * mib;
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "percents of a small file system"
    )]
    let (high, low) = ((start - 2.0) as u8, low as u8);
    assert!(
        low > 0 && low < high,
        "start {start:.1}%: high {high}, low {low}"
    );
    (high, low)
}

/// The policy of these tests: `images` with `keep_recent: 1`, then `disk`,
/// a schedule that does not come during the test, the history in `state`.
fn policy(state: &Path, disk: &str) -> String {
    format!(
        "schedule: \"0 0 1 1 *\"\nstate_dir: {}\n\
         containers: {{ min_age: \"0\" }}\n\
         images: {{ min_age: \"0\", keep_recent: 1{disk} }}\n\
         networks: {{ enabled: false }}\nbuild_cache: {{ enabled: false }}\n",
        state.display()
    )
}

/// The history's entries, by image id: (source, when), once it holds at
/// least `n` (the daemon writes them within seconds).
async fn recorded(state: &Path, n: usize) -> HashMap<String, (String, String)> {
    let file = state.join("image-usage.json");
    let begun = std::time::Instant::now();
    loop {
        let entries: HashMap<String, (String, String)> = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| v["images"].as_object().cloned())
            .unwrap_or_default()
            .into_iter()
            .map(|(id, e)| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                (id, (s("source"), s("at")))
            })
            .collect();
        if entries.len() >= n {
            return entries;
        }
        assert!(
            begun.elapsed() < std::time::Duration::from_secs(30),
            "{} entries, not {n}: {entries:?}",
            entries.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// [`lay_out`] while `safeprune daemon` watches: it records each use in
/// `state` as it comes, in the order they came.
async fn lay_out_watched(
    engine: &PrivateDockerd,
    cli: &Cli,
    state: &Path,
) -> HashMap<&'static str, String> {
    let daemon = Daemon::start(cli);
    daemon
        .wait_for("following docker's events: image uses are recorded", 1)
        .await;
    let ids = lay_out(engine).await;
    // Stopped at once: what it had not written yet is written as it stops.
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));
    let ran = ["app:2", "tool:1", "app:1", "tool:3"];
    let entries = recorded(state, ran.len()).await;
    assert_ran_in_order(&entries, &ids, &ran);
    ids
}

/// The history records the images of `ran` as used by containers that
/// exited, in that order.
fn assert_ran_in_order(
    entries: &HashMap<String, (String, String)>,
    ids: &HashMap<&str, String>,
    ran: &[&str],
) {
    let mut times = Vec::new();
    for name in ran {
        let (source, at) = &entries[&ids[name]];
        assert_eq!(source, "container_exit", "{name}: {entries:?}");
        times.push(chrono::DateTime::parse_from_rfc3339(at).unwrap());
    }
    assert!(times.is_sorted(), "not in the order they ran: {times:?}");
}

/// `run` with the watermarks `high` and `low`: its JSON report.
fn run_at(cli: &Cli, runtime: &Runtime, state: &Path, (high, low): (u8, u8)) -> serde_json::Value {
    cli.rewrite(
        runtime,
        &policy(
            state,
            &format!(", disk: {{ high_percent: {high}, low_percent: {low} }}"),
        ),
    );
    let (code, report) = cli.json(&["run", "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    report
}

async fn under_pressure_the_least_recently_used_go_until_low_percent(version: DockerVersion) {
    let engine = VersionedDockerd::start_on_small_fs(version, 256)
        .await
        .required();
    let root = engine.image_root();
    let runtime = Runtime::Docker(engine.endpoint());
    let cli = Cli::new(&runtime, "");
    let state = cli.path("state");
    cli.rewrite(&runtime, &policy(&state, ""));
    let ids = lay_out_watched(&engine, &cli, &state).await;

    let start = percent(&root);
    let (high, low) = watermarks(&root, start);
    let report = run_at(&cli, &runtime, &state, (high, low));
    let end = percent(&root);
    assert!(
        end <= f64::from(low),
        "{start:.1}% to {end:.1}%, low_percent {low}"
    );
    // The report and the metrics say so too.
    let fs = &report["image_fs"];
    assert_eq!(fs["path"], root.display().to_string());
    let before = fs["before_percent"].as_f64().unwrap();
    let after = fs["after_percent"].as_f64().unwrap();
    assert!((before - start).abs() < 1.0, "{before} against {start:.2}");
    assert!(
        (after - end).abs() < 1.0 && after <= f64::from(low),
        "{after} against {end:.2}"
    );
    let metrics = std::fs::read_to_string(cli.path("safeprune.prom")).unwrap();
    for when in ["before", "after"] {
        let series = format!("safeprune_last_run_image_fs_used_ratio{{when=\"{when}\"}} 0.");
        assert!(metrics.contains(&series), "{metrics}");
    }

    // Least recently used first: app:3 and app:4 (imported, never run),
    // then app:2, tool:1, tool:3 (in the order they ran). app:1 is app's
    // newest, tool:2 in use (and tool's newest).
    let lru = ["app:3", "app:4", "app:2", "tool:1", "tool:3"];
    let removed: Vec<&str> = lru
        .iter()
        .copied()
        .filter(|name| {
            let outcome = report["outcomes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|o| o["id"] == ids[name].as_str());
            outcome.is_some_and(|o| o["result"] == "deleted")
        })
        .collect();
    eprintln!("{start:.1}% to {end:.1}% (high {high}, low {low}); removed {removed:?}");
    assert!(!removed.is_empty(), "{report}");
    assert_eq!(
        removed,
        lru[..removed.len()],
        "not least recently used first"
    );
    for &kept in &lru[removed.len()..] {
        let d = decision(&report, &ids[kept]);
        assert!(
            d["rule"] == "lru_not_needed" || d["rule"] == "eligible",
            "{kept}: {d}"
        );
        assert!(
            engine.docker().inspect_image(kept).await.is_ok(),
            "{kept} is gone"
        );
    }
    assert_eq!(decision(&report, &ids["app:1"])["rule"], "keep_recent");
    assert_eq!(decision(&report, &ids["tool:2"])["rule"], "in_use");
    for kept in ["app:1", "tool:2"] {
        assert!(
            engine.docker().inspect_image(kept).await.is_ok(),
            "{kept} is gone"
        );
    }
    // The container's 40 MiB went first: the target was met before all
    // the planned images had gone, and the rest says so.
    let not_needed: Vec<&serde_json::Value> = report["outcomes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["kind"] == "image" && o["reason"] == "not_attempted")
        .collect();
    assert!(!not_needed.is_empty(), "{report}");
    for o in not_needed {
        let why = o["error"].as_str().unwrap();
        assert!(
            why.contains(&format!("at or under low_percent {low}")),
            "{why}"
        );
    }
}

/// The usage history (`state_dir`) keeps the uses of images whose
/// containers are gone, across runs, and a corrupt file is rebuilt.
async fn the_usage_history_remembers_uses_whose_containers_are_gone(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let older = engine.import_busybox_image("app:1", Some("1")).await;
    let newer = engine.import_busybox_image("app:2", Some("2")).await;
    // app:1 is used after app:2 was imported, by a container since removed:
    // only the engine's events say so.
    let used = engine.run_to_exit("used-then-removed", "app:1", &[]).await;
    engine.docker().remove_container(&used, None).await.unwrap();
    let runtime = Runtime::Docker(engine.endpoint());
    let cli = Cli::new(&runtime, "");
    let state = cli.path("state");
    cli.rewrite(
        &runtime,
        &format!(
            "images: {{ min_age: \"0\", keep_recent: 1 }}\nstate_dir: {}\n",
            state.display()
        ),
    );
    let plan_now = |expect_stderr: &str| {
        let out = cli.run(&["plan", "--output", "json"]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.contains(expect_stderr), "{err}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report
    };
    let check = |report: &serde_json::Value| {
        let kept = decision(report, &older);
        assert_eq!(kept["rule"], "keep_recent", "{kept}");
        assert_eq!(kept["last_used_source"], "container_exit", "{kept}");
        assert_eq!(decision(report, &newer)["rule"], "eligible");
    };
    check(&plan_now("no image usage history yet"));
    let file = state.join("image-usage.json");
    let saved: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["version"], 1);
    assert_eq!(saved["images"][&older]["source"], "container_exit");
    // The next run reads the engine's events only from where the last one
    // stopped: the use of app:1 comes from the file.
    check(&plan_now(""));
    // A corrupt file is rebuilt, with a warning, from what the engine
    // still remembers.
    std::fs::write(&file, "{ not json").unwrap();
    check(&plan_now(
        "the image usage history cannot be used: it is rebuilt",
    ));
    let again: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(again["images"][&older]["source"], "container_exit");
}

containerd_tests! {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    on_containerd_the_daemon_records_cri_uses_and_run_frees_by_them,
}

/// The same on a private containerd whose root is a small ext4, its
/// images used by pods through CRI while the daemon watches: the pods are
/// gone before the run, so only the usage history the daemon wrote knows
/// the order they ran in. The disk is measured where CRI's `ImageFsInfo`
/// says, and each image's content is freed before the next measure. On
/// containerd 1.6.20 and on 2.3.4.
async fn on_containerd_the_daemon_records_cri_uses_and_run_frees_by_them(
    version: ContainerdVersion,
) {
    let engine = PrivateContainerd::start_on_small_fs(version, 256)
        .await
        .required();
    let image_fs = engine.image_fs();
    let endpoint = engine.endpoint();
    let runtime = Runtime::Containerd(&endpoint, &[CRI_NAMESPACE]);
    let cli = Cli::new(&runtime, "");
    let state = cli.path("state");
    cli.rewrite(&runtime, &policy(&state, ""));

    let before = percent(&image_fs);
    let names = [
        "app:1", "app:2", "app:3", "app:4", "tool:1", "tool:2", "tool:3",
    ];
    // Each image is stored twice: its layer in the content store, and
    // unpacked.
    let extra = "x".repeat(8 << 20);
    let mut ids = HashMap::new();
    for name in names {
        let full = format!("docker.io/library/{name}");
        let imported = engine.import_image_with_extra(CRI_NAMESPACE, &full, &extra);
        ids.insert(name, format!("{CRI_NAMESPACE}/{}", imported.digest));
    }
    #[expect(clippy::cast_precision_loss, reason = "a count of seven")]
    let per_image = (percent(&image_fs) - before) / names.len() as f64;

    // Used in this order while the daemon watches, by pods since gone.
    let daemon = Daemon::start(&cli);
    daemon
        .wait_for("following containerd's events: image uses are recorded", 1)
        .await;
    let ran = ["app:2", "tool:1", "app:1", "tool:3"];
    for name in ran {
        let pod = Pod::new(&format!("ran-{}", name.replace(':', "-")), "default");
        let image = format!("docker.io/library/{name}");
        let (sandbox, _) = engine.run_stopped_pod(&pod, "main", &image).await;
        engine.remove_pod_sandbox(&sandbox).await;
    }
    let pod = Pod::new("running-tool-2", "default");
    let sandbox = engine.run_pod_sandbox(&pod).await;
    engine
        .run_pod_container(&pod, &sandbox, "main", "docker.io/library/tool:2", &[])
        .await;
    let entries = recorded(&state, ran.len() + 2).await;
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));
    assert_ran_in_order(&entries, &ids, &ran);

    // Two and a half images over the target: three go.
    let start = percent(&image_fs);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "percents of a small file system"
    )]
    let (high, low) = ((start - 2.0) as u8, (start - 2.5 * per_image) as u8);
    let report = run_at(&cli, &runtime, &state, (high, low));
    let end = percent(&image_fs);
    eprintln!("{start:.1}% to {end:.1}% (high {high}, low {low}, {per_image:.1}% per image)");
    assert!(end <= f64::from(low), "{start:.1}% to {end:.1}%, low {low}");
    assert_eq!(report["image_fs"]["path"], image_fs.display().to_string());

    let lru = ["app:3", "app:4", "app:2", "tool:1", "tool:3"];
    let removed: Vec<&str> = lru
        .iter()
        .copied()
        .filter(|name| outcome_of(&report, &ids[name]) == Some("deleted"))
        .collect();
    assert_eq!(removed, lru[..3], "{report}");
    for kept in &lru[3..] {
        assert_eq!(decision(&report, &ids[kept])["rule"], "eligible");
        assert_eq!(outcome_of(&report, &ids[kept]), Some("not_attempted"));
    }
    assert_eq!(decision(&report, &ids["app:1"])["rule"], "keep_recent");
    assert_eq!(decision(&report, &ids["tool:2"])["rule"], "in_use");
    let left = engine.image_names(CRI_NAMESPACE);
    for name in ["app:1", "tool:1", "tool:2", "tool:3"] {
        let full = format!("docker.io/library/{name}");
        assert!(left.contains(&full), "{full} is gone: {left:?}");
    }
}

/// The result of `id`'s outcome in `report`, or its skip reason.
fn outcome_of<'a>(report: &'a serde_json::Value, id: &str) -> Option<&'a str> {
    let o = report["outcomes"]
        .as_array()?
        .iter()
        .find(|o| o["id"] == id)?;
    o["reason"].as_str().or_else(|| o["result"].as_str())
}
