//! The dockerd process: its config and flags, what a restart must clear,
//! and how to tell that it answers. The process itself, its namespaces and
//! its teardown are [`EngineProcess`]'s.

use std::fs;

use bollard::{API_DEFAULT_VERSION, Docker};

use crate::util::engine::EngineProcess;

/// Becomes dockerd, with the flags after the script as its arguments, its
/// network namespace's loopback up: a registry of the test's own listens
/// there (`util::registry`), and dockerd pulls from it.
const EXEC: &str = r#"ip link set lo up && exec dockerd "$@""#;

/// The socket dockerd listens on, as a Docker endpoint.
pub(super) fn endpoint(process: &EngineProcess) -> String {
    format!("unix://{}", process.path("docker.sock").display())
}

/// Writes dockerd's own config file. Without one dockerd reads
/// /etc/docker/daemon.json, and 20.10 writes its trust key to
/// /etc/docker/key.json unless told otherwise (hidden option
/// `deprecated-key-path`).
pub(super) fn write_config(process: &EngineProcess) {
    let config = serde_json::json!({ "deprecated-key-path": process.path("key.json") });
    fs::write(process.path("daemon.json"), config.to_string()).expect("write daemon.json");
}

/// Clears what a killed dockerd leaves and would trip over on a restart: its
/// socket, its pid file (it refuses to start while that is there) and its
/// exec root, which holds the managed containerd's pid file: in a fresh pid
/// namespace that pid may well be alive, and dockerd would wait for a
/// containerd that is not there. The exec root is runtime state, like /run
/// after a reboot: nothing of it survives its processes.
pub(super) fn clear_runtime_state(process: &EngineProcess) {
    let _ = fs::remove_file(process.path("docker.sock"));
    let _ = fs::remove_file(process.path("dockerd.pid"));
    let _ = fs::remove_dir_all(process.path("exec"));
}

/// Runs dockerd on the directory of `process` and waits until it answers;
/// returns a client on it.
pub(super) async fn launch(process: &mut EngineProcess) -> Docker {
    let d = |name: &str| process.path(name).to_string_lossy().into_owned();
    let args: Vec<String> = [
        "--config-file".to_owned(),
        d("daemon.json"),
        "--data-root".to_owned(),
        d("data"),
        "--exec-root".to_owned(),
        d("exec"),
        "--pidfile".to_owned(),
        d("dockerd.pid"),
        "-H".to_owned(),
        endpoint(process),
    ]
    .into_iter()
    .chain(isolation_flags(process))
    .collect::<Vec<_>>();
    process.launch(EXEC, &args);
    await_dockerd(process).await
}

/// dockerd's flags that keep it to itself: nothing of the host's network
/// (no default bridge, no iptables rules, no forwarding; the namespace is
/// private anyway), and container cgroups in a tree of our own, which the
/// teardown removes (a killed engine leaves them behind).
pub(in crate::util) fn isolation_flags(process: &EngineProcess) -> Vec<String> {
    vec![
        "--bridge=none".to_owned(),
        "--iptables=false".to_owned(),
        "--ip6tables=false".to_owned(),
        "--ip-masq=false".to_owned(),
        "--ip-forward=false".to_owned(),
        "--userland-proxy=false".to_owned(),
        "--cgroup-parent".to_owned(),
        format!("/{}", process.scope()),
    ]
}

/// Waits until the dockerd of `process` answers on its socket; returns a
/// client negotiated down to the engine's API version.
pub(in crate::util) async fn await_dockerd(process: &mut EngineProcess) -> Docker {
    let socket = process.path("docker.sock");
    process
        .await_answer(async || {
            if !socket.exists() {
                return None;
            }
            let docker =
                Docker::connect_with_unix(&socket.to_string_lossy(), 30, API_DEFAULT_VERSION)
                    .ok()?
                    .negotiate_version()
                    .await
                    .ok()?;
            docker.ping().await.ok()?;
            Some(docker)
        })
        .await
}

/// The runc wrapper [`oom_floor_runtime`] writes, in the engine's directory.
const OOM_FLOOR_RUNC: &str = "runc-oom-floor";

/// Writes a runc wrapper that raises a negative `oomScoreAdj` in the
/// bundle's `config.json` to 0 before runc creates the container, and
/// returns the dockerd config that makes it the default runtime.
///
/// cri-dockerd gives every sandbox `OomScoreAdj -998` (its
/// `defaultSandboxOOMAdj`), and root on these machines lacks
/// `CAP_SYS_RESOURCE`, so runc fails to lower the score (`can't get final
/// child's PID from pipe`): docs/engines.md, "Test engines". The shim
/// passes the bundle as `--bundle DIR` to `create` (and `run`); the
/// config's JSON is compact (`"oomScoreAdj":-998`).
pub(in crate::util) fn oom_floor_runtime(process: &EngineProcess) -> serde_json::Value {
    use std::os::unix::fs::PermissionsExt as _;
    let runc = ["/usr/sbin/runc", "/usr/bin/runc"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("runc (Debian package runc) for the private dockerd");
    let wrapper = process.path(OOM_FLOOR_RUNC);
    let script = format!(
        r#"#!/bin/sh
# Raises a negative oom_score_adj to 0: root here may not lower it.
previous=
for arg in "$@"; do
  if [ "$previous" = --bundle ] || [ "$previous" = -b ]; then
    sed -i 's/"oomScoreAdj":-[0-9]*/"oomScoreAdj":0/' "$arg/config.json" || exit 1
  fi
  previous=$arg
done
exec {runc} "$@"
"#
    );
    fs::write(&wrapper, script).expect("write the runc wrapper");
    fs::set_permissions(&wrapper, fs::Permissions::from_mode(0o755))
        .expect("make the runc wrapper executable");
    serde_json::json!({
        "runtimes": { "oom-floor": { "path": wrapper } },
        "default-runtime": "oom-floor",
    })
}

/// [`write_config`] with the keys of `extra` added.
pub(in crate::util) fn write_config_with(process: &EngineProcess, extra: serde_json::Value) {
    let mut config = serde_json::json!({ "deprecated-key-path": process.path("key.json") });
    if let (Some(config), serde_json::Value::Object(extra)) = (config.as_object_mut(), extra) {
        config.extend(extra);
    }
    fs::write(process.path("daemon.json"), config.to_string()).expect("write daemon.json");
}
