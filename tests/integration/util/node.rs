//! safeprune as an operator runs it, for the node scenarios and the CLI
//! tests: a policy in a directory of its own pointing at an engine, the
//! `safeprune` binary run on it, its JSON report read back, the assertions
//! every scenario makes on what was to go and what went, and the lookups by
//! id in what safeprune answers (report, outcomes, inventory) that the
//! adapter tests share.
//!
//! Every path the policy names (report, audit log, metrics textfile, lock)
//! lies in that directory, so runs of parallel tests never meet; and the
//! binary never reads the caller's `SAFEPRUNE_CONFIG` or `RUST_LOG`, so
//! what a test sees does not depend on the shell it was started from.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use safeprune::execute::{Outcome, execute};
use safeprune::inventory::{Container, Inventory};
use safeprune::pace::Pacer;
use safeprune::plan::{Plan, plan};
use safeprune::policy::Policy;
use safeprune::runtime::Engine;
use safeprune::shutdown::Shutdown;
use serde_json::Value;

/// The engine a policy points safeprune at.
pub enum Runtime<'a> {
    /// Docker at an endpoint (`unix://…`).
    Docker(&'a str),
    /// containerd at a socket path, pruning these namespaces (none:
    /// safeprune's default).
    Containerd(&'a str, &'a [&'a str]),
    /// A CRI runtime (CRI-O) at an endpoint (`unix://…`).
    Cri(&'a str),
    /// `auto`: Docker at `docker` if it answers, else containerd at
    /// `containerd` with its namespaces.
    Auto {
        docker: &'a str,
        containerd: &'a str,
        namespaces: &'a [&'a str],
    },
}

impl Runtime<'_> {
    /// The policy's `runtime:` section.
    fn yaml(&self) -> String {
        let containerd = |endpoint: &str, namespaces: &[&str]| {
            let mut section = format!("  containerd:\n    endpoint: \"{endpoint}\"\n");
            if !namespaces.is_empty() {
                let list: Vec<String> = namespaces.iter().map(|n| format!("\"{n}\"")).collect();
                let _ = writeln!(section, "    namespaces: [{}]", list.join(", "));
            }
            section
        };
        let docker = |endpoint: &str| format!("  docker:\n    endpoint: \"{endpoint}\"\n");
        match self {
            Self::Docker(endpoint) => format!("runtime:\n  kind: docker\n{}", docker(endpoint)),
            Self::Cri(endpoint) => {
                format!("runtime:\n  kind: cri\n  cri:\n    endpoint: \"{endpoint}\"\n")
            }
            Self::Containerd(endpoint, namespaces) => format!(
                "runtime:\n  kind: containerd\n{}",
                containerd(endpoint, namespaces)
            ),
            Self::Auto {
                docker: docker_endpoint,
                containerd: containerd_endpoint,
                namespaces,
            } => format!(
                "runtime:\n  kind: auto\n{}{}",
                docker(docker_endpoint),
                containerd(containerd_endpoint, namespaces)
            ),
        }
    }
}

/// A policy file in a directory of its own, and the `safeprune` binary run
/// on it. The directory goes on drop.
pub struct Cli {
    dir: tempfile::TempDir,
    policy: PathBuf,
}

impl Cli {
    /// A policy for `runtime` with the JSON report, audit log, metrics
    /// textfile, lock and usage history in the directory (`report.json`,
    /// `audit.jsonl`, `safeprune.prom`, `safeprune.lock`, `state/`), then
    /// `extra` (top-level keys but `runtime`, `report` and `lock_file`;
    /// `state_dir` replaces the directory's).
    pub fn new(runtime: &Runtime, extra: &str) -> Self {
        let cli = Self::with_yaml("");
        cli.rewrite(runtime, extra);
        cli
    }

    /// A policy of exactly `yaml`: for policies that are the test's subject.
    pub fn with_yaml(yaml: &str) -> Self {
        let dir = tempfile::tempdir().expect("create a directory for the policy");
        let policy = dir.path().join("policy.yaml");
        let cli = Self { dir, policy };
        cli.write(yaml);
        cli
    }

    /// Replaces the policy with [`Self::new`]'s for `runtime` and `extra`,
    /// as an operator editing it would. Unless `extra` says how to pace,
    /// `safety.pace` is off: a developer's machine may be a Kubernetes
    /// node, whose pods' cgroup must not pace a test (the default policy
    /// paces by it). Unless `extra` names `keep_unpullable`,
    /// `images.keep_unpullable` is `false`: the fixtures' images are
    /// imported, which no registry can give back, and a test of another
    /// rule must not be decided by that one.
    pub fn rewrite(&self, runtime: &Runtime, extra: &str) {
        let extra = &keeping_no_unpullable(&unpaced(extra));
        let d = self.dir.path().display();
        // The usage history too, unless the test names its own.
        let state_dir = if extra.contains("state_dir:") {
            String::new()
        } else {
            format!("state_dir: {d}/state\n")
        };
        self.write(&format!(
            "{}report:\n  json_path: {d}/report.json\n  audit_log: {d}/audit.jsonl\n  \
             metrics_textfile: {d}/safeprune.prom\nlock_file: {d}/safeprune.lock\n{state_dir}{extra}",
            runtime.yaml()
        ));
    }

    /// Replaces the policy with `yaml`.
    pub fn write(&self, yaml: &str) {
        fs::write(&self.policy, yaml).expect("write the policy");
    }

    /// The policy file.
    pub fn policy_path(&self) -> &Path {
        &self.policy
    }

    /// The policy, as safeprune loads it.
    pub fn policy(&self) -> Policy {
        Policy::load(&self.policy).expect("the test's policy loads")
    }

    /// `name` in the policy's directory: `report.json`, `audit.jsonl`,
    /// `safeprune.prom`, `safeprune.lock`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `safeprune --config <policy> args…`, to spawn.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = command(&[]);
        cmd.arg("--config").arg(&self.policy).args(args);
        cmd
    }

    /// Runs `safeprune --config <policy> args…` to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("safeprune runs")
    }

    /// Runs `safeprune --config <policy> args…` in a mount namespace of
    /// its own, after the shell commands `setup` and before `teardown`,
    /// both run in that namespace (so what `setup` mounts is the run's
    /// alone); the exit status is safeprune's.
    pub fn run_unshared(&self, setup: &str, teardown: &str, args: &[&str]) -> Output {
        let script = format!("{setup}\n\"$@\"; rc=$?\n{teardown}\nexit $rc");
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(script)
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_safeprune"))
            .arg("--config")
            .arg(&self.policy)
            .args(args);
        without_safeprune_env(&mut cmd)
            .output()
            .expect("unshare runs")
    }

    /// Runs safeprune with `args` (which ask for `--output json`); its exit
    /// code and the one JSON document on its stdout.
    ///
    /// # Panics
    /// When stdout is not one JSON document; the message holds stdout and
    /// stderr.
    pub fn json(&self, args: &[&str]) -> (Option<i32>, Value) {
        let out = self.run(args);
        let value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not one JSON document ({e}):\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), value)
    }
}

/// `extra` (top-level policy keys) with `safety.pace: null` added, unless
/// it names `pace` itself.
fn unpaced(extra: &str) -> String {
    with_key(extra, "pace", ("safety", "pace: null"))
}

/// `extra` (top-level policy keys) with `images.keep_unpullable: false`
/// added, unless it names `keep_unpullable` itself.
fn keeping_no_unpullable(extra: &str) -> String {
    with_key(
        extra,
        "keep_unpullable",
        ("images", "keep_unpullable: false"),
    )
}

/// `extra` with `entry` (`key: value`) added to its top-level `mapping`,
/// unless `extra` names `named`: in that mapping where it has one (flow
/// `mapping: { … }` or block `mapping:` on a line of its own), else as one.
fn with_key(extra: &str, named: &str, (mapping, entry): (&str, &str)) -> String {
    if extra.contains(named) {
        return extra.to_owned();
    }
    let mut text = extra.to_owned();
    let (flow, block) = (format!("{mapping}: {{"), format!("{mapping}:\n"));
    if let Some(at) = text.find(&flow) {
        text.insert_str(at + flow.len(), &format!(" {entry},"));
    } else if let Some(at) = text.find(&block) {
        text.insert_str(at + block.len(), &format!("  {entry}\n"));
    } else {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&block);
        text.push_str("  ");
        text.push_str(entry);
        text.push('\n');
    }
    text
}

/// `safeprune args…` with no policy of the test's, to spawn; none of
/// `SAFEPRUNE_CONFIG`, `SAFEPRUNE_NODE_NAME` and `RUST_LOG` comes from the
/// caller.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_safeprune"));
    cmd.args(args);
    without_safeprune_env(&mut cmd);
    cmd
}

/// `cmd` without the environment that would change what safeprune does
/// (a policy path, a node name, a log filter).
fn without_safeprune_env(cmd: &mut Command) -> &mut Command {
    cmd.env_remove("SAFEPRUNE_CONFIG")
        .env_remove("SAFEPRUNE_NODE_NAME")
        .env_remove("RUST_LOG")
}

/// `GET path` over HTTP/1.0 at `addr`: the status code and the body.
///
/// # Errors
/// The connection fails or the answer is not a whole HTTP response.
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: safeprune\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, response.clone());
    let (head, body) = response.split_once("\r\n\r\n").ok_or_else(bad)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    Ok((status, body.to_owned()))
}

/// Runs `safeprune args…` with no policy of the test's to its end.
pub fn run(args: &[&str]) -> Output {
    command(args).output().expect("safeprune runs")
}

/// The decision on object `id` in a JSON report.
pub fn decision<'a>(report: &'a Value, id: &str) -> &'a Value {
    find(report, "decisions", "id", id)
}

/// The decision on the object named `name` (an image by its first
/// reference) in a JSON report.
pub fn decision_named<'a>(report: &'a Value, name: &str) -> &'a Value {
    find(report, "decisions", "name", name)
}

/// The outcome of removing object `id` in a JSON report.
pub fn outcome<'a>(report: &'a Value, id: &str) -> &'a Value {
    find(report, "outcomes", "id", id)
}

fn find<'a>(report: &'a Value, list: &str, key: &str, value: &str) -> &'a Value {
    report[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} in {report:#}"))
        .iter()
        .find(|d| d[key] == value)
        .unwrap_or_else(|| panic!("no {list} entry with {key} {value} in {report:#}"))
}

/// The first half of a run, for tests that change the node before the
/// second: the plan for what `engine` holds now.
pub async fn plan_now(engine: &impl Engine, policy: &Policy) -> Plan {
    let inventory = engine.inventory().await.expect("inventory");
    plan(&inventory, policy, chrono::Utc::now())
}

/// The second half of a run: the removals `planned` holds, each rechecked
/// first, uninterrupted, paced as `policy` says.
pub async fn execute_plan(engine: &impl Engine, planned: &Plan, policy: &Policy) -> Vec<Outcome> {
    let mut pacer = Pacer::for_policy(policy).expect("the policy's pacer");
    execute(
        engine,
        planned,
        policy,
        &mut pacer,
        &Shutdown::new(),
        |_, _, _| {},
    )
    .await
}

/// The ids of an inventory's READY sandboxes, in its order.
pub fn ready_sandbox_ids(inventory: &Inventory) -> Vec<&str> {
    inventory
        .sandboxes
        .iter()
        .filter(|s| s.ready)
        .map(|s| s.id.as_str())
        .collect()
}

/// Container `id` in an inventory.
pub fn container<'a>(inventory: &'a Inventory, id: &str) -> &'a Container {
    inventory
        .containers
        .iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("container {id} in the inventory"))
}

/// The objects of a node scenario, by the role they play (role → id as the
/// report names it).
#[derive(Debug, Default)]
pub struct Layout {
    pub ids: BTreeMap<&'static str, String>,
}

impl Layout {
    /// Records the object playing `role`.
    pub fn insert(&mut self, role: &'static str, id: impl Into<String>) {
        let id = id.into();
        if let Some(earlier) = self.ids.insert(role, id) {
            panic!("role {role} laid out twice (first {earlier})");
        }
    }

    /// The id of the object playing `role`.
    pub fn id(&self, role: &str) -> &str {
        self.ids
            .get(role)
            .unwrap_or_else(|| panic!("no role {role} in the layout"))
    }

    /// The outcome, among `outcomes`, for the object playing `role`.
    pub fn outcome<'a>(&self, outcomes: &'a [Outcome], role: &str) -> &'a Outcome {
        let id = self.id(role);
        outcomes
            .iter()
            .find(|o| o.id == id)
            .unwrap_or_else(|| panic!("no outcome for {role} ({id}) in {outcomes:#?}"))
    }

    /// Asserts that a plan report decides `delete` for the roles in
    /// `deleted` and `keep` for every other.
    pub fn assert_decisions(&self, report: &Value, deleted: &[&str]) {
        self.assert_roles_known(deleted);
        for (role, id) in &self.ids {
            let expected = if deleted.contains(role) {
                "delete"
            } else {
                "keep"
            };
            let d = decision(report, id);
            assert_eq!(d["decision"], expected, "{role}: {d}");
        }
    }

    /// Asserts that a run report removed the roles in `deleted`, each
    /// without an error, and attempted nothing else.
    pub fn assert_deleted(&self, report: &Value, deleted: &[&str]) {
        self.assert_roles_known(deleted);
        let outcomes = report["outcomes"]
            .as_array()
            .unwrap_or_else(|| panic!("no outcomes in {report:#}"));
        assert_eq!(outcomes.len(), deleted.len(), "{outcomes:#?}");
        assert!(
            outcomes
                .iter()
                .all(|o| o["result"] == "deleted" && o["error"].is_null()),
            "{outcomes:#?}"
        );
        for role in deleted {
            outcome(report, self.id(role));
        }
    }

    /// Asserts that exactly the roles not in `deleted` still `exist`.
    pub fn assert_left(&self, exists: impl Fn(&str) -> bool, deleted: &[&str]) {
        self.assert_roles_known(deleted);
        for (role, id) in &self.ids {
            assert_eq!(exists(id), !deleted.contains(role), "{role} ({id})");
        }
    }

    /// A role misspelt in `deleted` would make every check on it vacuous.
    fn assert_roles_known(&self, deleted: &[&str]) {
        for role in deleted {
            assert!(self.ids.contains_key(role), "no role {role} in the layout");
        }
    }
}
