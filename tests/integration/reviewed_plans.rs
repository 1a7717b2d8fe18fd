//! Reviewed plans on real private engines: `plan --save FILE`
//! writes a plan that identifies itself and diffs; `run --plan FILE`
//! deletes only what FILE deleted and the rules still find eligible,
//! reports what changed since (kept now, gone), keeps what FILE did not
//! list, and refuses a plan of another node or policy, or too old, with
//! exit 2 and nothing removed. On Docker 20.10 and Docker 29 with each
//! image store (`docker_tests!`), and on containerd 1.6 and 2.3
//! (`containerd_tests!`).

use crate::util;

use std::path::Path;

use serde_json::Value;
use util::Required;
use util::containerd::{ContainerdVersion, PrivateContainerd, containerd_tests};
use util::docker_matrix::{DockerVersion, VersionedDockerd, docker_tests};
use util::node::{Cli, Runtime, decision, outcome};

/// Everything exited or unused goes at once; nothing else is pruned.
const POLICY: &str = "containers: { min_age: \"0\" }\n\
                      images: { min_age: \"0\" }\n\
                      networks: { enabled: false }\n\
                      build_cache: { enabled: false }\n";

fn read(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The ids a saved plan deletes.
fn deletions(saved: &Value) -> Vec<String> {
    saved["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["decision"] == "delete")
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect()
}

/// `run --plan` with `file`: refused with exit 2 and `why` on stderr.
fn assert_refused(cli: &Cli, file: &Path, why: &str) {
    let out = cli.run(&["run", "--plan", file.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(why), "not '{why}': {err}");
}

/// `run --plan` refuses `file` (saved as `saved`) under another policy,
/// and copies of it made on another node, too old, or not a plan.
fn assert_refusals(cli: &Cli, runtime: &Runtime, file: &Path, saved: &Value) {
    // Refused: another policy, another node, too old, not a plan.
    cli.rewrite(
        runtime,
        &format!("{POLICY}safety: {{ max_deletions: 7 }}\n"),
    );
    assert_refused(cli, file, "it was made under another policy");
    cli.rewrite(runtime, POLICY);
    let tampered = cli.path("tampered.json");
    let mut other = saved.clone();
    other["node"] = "elsewhere".into();
    std::fs::write(&tampered, other.to_string()).unwrap();
    assert_refused(cli, &tampered, "it was made on node elsewhere");
    let mut stale = saved.clone();
    stale["created_at"] = (chrono::Utc::now() - chrono::Duration::hours(25))
        .to_rfc3339()
        .into();
    std::fs::write(&tampered, stale.to_string()).unwrap();
    assert_refused(cli, &tampered, "more than safety.max_plan_age (24h) ago");
    std::fs::write(&tampered, "{ not json").unwrap();
    assert_refused(cli, &tampered, "cannot use the plan");
}

/// The same node under the same policy: the same file as `saved` but its
/// time.
fn assert_planned_again_alike(cli: &Cli, saved: &Value) {
    let again = cli.path("again.json");
    let (code, _) = cli.json(&[
        "plan",
        "--save",
        again.to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(code, Some(0));
    let (mut first, mut second) = (saved.clone(), read(&again));
    first["created_at"] = Value::Null;
    second["created_at"] = Value::Null;
    assert_eq!(first, second, "two plans of one node state differ");
}

docker_tests! {
    #[tokio::test(flavor = "multi_thread")]
    on_docker_a_run_applies_the_reviewed_plan_and_only_it,
}

async fn on_docker_a_run_applies_the_reviewed_plan_and_only_it(version: DockerVersion) {
    let engine = VersionedDockerd::start(version).await.required();
    let base = engine.import_busybox_image("base:1", Some("base")).await;
    let old = engine.import_busybox_image("old:1", Some("old")).await;
    let later = engine.import_busybox_image("later:1", Some("later")).await;
    let a = engine.run_to_exit("ran-a", &base, &[]).await;
    let b = engine.run_to_exit("ran-b", &base, &[]).await;
    let runtime = Runtime::Docker(engine.endpoint());
    let cli = Cli::new(&runtime, POLICY);
    let file = cli.path("plan.json");
    let file_arg = file.to_str().unwrap();

    let (code, planned) = cli.json(&["plan", "--save", file_arg, "--output", "json"]);
    assert_eq!(code, Some(0), "{planned}");
    // Beside safeprune's bytes, what `docker system prune -a -f` would
    // free: here the same objects (everything is stopped or unused).
    assert_eq!(
        planned["docker_prune_bytes"], planned["summary"]["reclaimable_bytes"],
        "{planned}"
    );
    let saved = read(&file);
    assert_eq!(saved["plan_version"], 1);
    assert_eq!(saved["node"], planned["node"]);
    assert_eq!(saved["runtime"], "docker");
    assert_eq!(saved["endpoint"], engine.endpoint());
    assert!(
        saved["policy_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    let mut listed = deletions(&saved);
    listed.sort();
    let mut expected = vec![
        a.clone(),
        b.clone(),
        base.clone(),
        old.clone(),
        later.clone(),
    ];
    expected.sort();
    assert_eq!(listed, expected);
    assert_planned_again_alike(&cli, &saved);

    // Between the review and the run: a new exited container, one planned
    // container removed by someone else, a planned image used again.
    let c = engine.run_to_exit("ran-c", &base, &[]).await;
    engine.docker().remove_container(&b, None).await.unwrap();
    engine.run_forever("uses-later", &later, &[]).await;

    assert_refusals(&cli, &runtime, &file, &saved);
    let exists = async |id: &str| engine.docker().inspect_container(id, None).await.is_ok();
    assert!(
        exists(&a).await && exists(&c).await,
        "a refused run removed something"
    );

    let (code, report) = cli.json(&["run", "--plan", file_arg, "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(outcome(&report, &a)["result"], "deleted");
    assert_eq!(outcome(&report, &old)["result"], "deleted");
    assert!(!exists(&a).await);
    // Not in the plan: kept, though eligible now.
    assert_eq!(decision(&report, &c)["rule"], "not_in_plan");
    assert!(exists(&c).await);
    // Listed, but kept now (a container uses it), with the rule that keeps it.
    for image in [&later, &base] {
        let o = outcome(&report, image);
        assert_eq!(o["reason"], "changed", "{o}");
        assert!(
            o["error"]
                .as_str()
                .unwrap()
                .starts_with("now kept by in_use"),
            "{o}"
        );
        assert!(engine.docker().inspect_image(image).await.is_ok());
    }
    let o = outcome(&report, &b);
    assert_eq!(o["reason"], "gone", "{o}");
    // Counted by reason, and the changed ones by the rule that keeps them.
    assert_eq!(outcome(&report, &later)["kept_by"], "in_use");
    let summary = &report["summary"];
    assert_eq!(
        summary["skipped_by_reason"],
        serde_json::json!({"gone": 1, "in_use": 0, "changed": 2, "not_attempted": 0}),
        "{summary}"
    );
    assert_eq!(summary["changed_by_rule"], serde_json::json!({"in_use": 2}));
    let metrics = std::fs::read_to_string(cli.path("safeprune.prom")).unwrap();
    assert!(
        metrics.contains("safeprune_last_run_changed_removals{kind=\"image\",rule=\"in_use\"} 2"),
        "{metrics}"
    );
    // Nothing the plan did not list was deleted.
    for o in report["outcomes"].as_array().unwrap() {
        if o["result"] == "deleted" {
            assert!(listed.iter().any(|id| o["id"] == id.as_str()), "{o}");
        }
    }
}

containerd_tests! {
    #[tokio::test(flavor = "multi_thread")]
    on_containerd_a_run_applies_the_reviewed_plan_and_only_it,
}

async fn on_containerd_a_run_applies_the_reviewed_plan_and_only_it(version: ContainerdVersion) {
    const NS: &str = "sp-reviewed";
    let engine = PrivateContainerd::start_version(version).await.required();
    let one = engine.import_busybox_image(NS, "docker.io/library/one:1");
    let two = engine.import_busybox_image(NS, "docker.io/library/two:1");
    let endpoint = engine.endpoint();
    let runtime = Runtime::Containerd(&endpoint, &[NS]);
    let cli = Cli::new(&runtime, POLICY);
    let file = cli.path("plan.json");
    let file_arg = file.to_str().unwrap();
    let (code, planned) = cli.json(&["plan", "--save", file_arg, "--output", "json"]);
    assert_eq!(code, Some(0), "{planned}");
    assert!(planned.get("docker_prune_bytes").is_none(), "{planned}");
    let saved = read(&file);
    assert_eq!(saved["runtime"], "containerd");
    assert_eq!(saved["endpoint"], endpoint);
    let id = |digest: &str| format!("{NS}/{digest}");
    let mut listed = deletions(&saved);
    listed.sort();
    let mut want = vec![id(&one.digest), id(&two.digest)];
    want.sort();
    assert_eq!(listed, want);

    // After the review: one of them removed by hand, a new one imported.
    engine.ctr_ok(NS, &["images", "rm", "docker.io/library/two:1"]);
    let three = engine.import_busybox_image(NS, "docker.io/library/three:1");

    let (code, report) = cli.json(&["run", "--plan", file_arg, "--output", "json"]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(outcome(&report, &id(&one.digest))["result"], "deleted");
    assert_eq!(outcome(&report, &id(&two.digest))["reason"], "gone");
    assert_eq!(decision(&report, &id(&three.digest))["rule"], "not_in_plan");
    assert_eq!(
        engine.image_names(NS),
        ["docker.io/library/three:1"],
        "only the reviewed deletion went"
    );
}
