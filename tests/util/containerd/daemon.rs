//! The containerd process: its config (CRI on or off, and a pod network
//! of its own), and how to tell that it answers. The process itself, its
//! namespaces and its teardown are [`EngineProcess`]'s.

use std::fs;
use std::path::Path;

use containerd_client::tonic::transport::Channel;
use k8s_cri::v1::StatusRequest;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;

use super::SANDBOX_IMAGE;
use crate::util::engine::EngineProcess;

/// Brings up loopback (the CRI plugin's stream server listens on
/// 127.0.0.1), then becomes containerd with the config file `$1`.
const EXEC: &str = r#"ip link set lo up && exec containerd --config "$1""#;

/// The socket containerd listens on.
pub(super) const SOCKET: &str = "c.sock";
/// Where containerd serves its metrics, in its private network namespace.
pub(super) const METRICS_ADDRESS: &str = "127.0.0.1:1338";

/// The private containerd's config: its own root, state, socket and CRI
/// settings; plugins that would reach outside the directory are off.
fn config_toml(dir: &Path, socket: &Path, cri: bool) -> String {
    let d = dir.display();
    let cri_off = if cri {
        ""
    } else {
        "\n  \"io.containerd.grpc.v1.cri\","
    };
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
# opt installs into /opt/containerd; the rest probe host devices or need
# tools that are not here.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",{cri_off}
]

[grpc]
  address = "{socket}"

# In the engine's own network namespace: see `PrivateContainerd::grpc_calls`.
[metrics]
  address = "{METRICS_ADDRESS}"

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "{SANDBOX_IMAGE}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  # A CNI directory of our own, with Debian's plugins: the node's /etc/cni
  # stays unread. Most pods use the host network; a pod on the pod network
  # gets a bridge inside the engine's private network namespace.
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "{d}/cni"
    bin_dir = "{CNI_BIN_DIR}"
"#,
        socket = socket.display(),
    )
}

/// Where Debian's containernetworking-plugins puts the CNI plugins.
const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The pod network: a bridge with its own addresses, in the engine's
/// private network namespace, so nothing of it is seen outside. No
/// masquerading (no iptables), and the address book under the directory.
fn cni_conflist(dir: &Path) -> String {
    format!(
        r#"{{
  "cniVersion": "0.4.0",
  "name": "safeprune-test",
  "plugins": [
    {{
      "type": "bridge",
      "bridge": "sptbr0",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {{
        "type": "host-local",
        "ranges": [[{{"subnet": "10.88.0.0/24"}}]],
        "dataDir": "{}/cni-ipam"
      }}
    }}
  ]
}}
"#,
        dir.display()
    )
}

/// Writes a config as `config` (CRI on or off) in the directory of
/// `process`, runs containerd with it and waits until its own API, and CRI
/// when on, answer; returns a channel to it.
pub(super) async fn launch(process: &mut EngineProcess, config: &str, cri: bool) -> Channel {
    let socket = process.path(SOCKET);
    let config = process.path(config);
    fs::write(&config, config_toml(process.dir(), &socket, cri))
        .unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
    let cni = process.path("cni");
    fs::create_dir_all(&cni).expect("create the CNI config directory");
    fs::write(
        cni.join("10-safeprune-test.conflist"),
        cni_conflist(process.dir()),
    )
    .expect("write the CNI config");
    process.launch(EXEC, [&config]);
    process
        .await_answer(async || {
            if socket.exists()
                && let Ok(channel) = containerd_client::connect(&socket).await
                && answers(&channel, cri).await
            {
                Some(channel)
            } else {
                None
            }
        })
        .await
}

/// Whether containerd's own API, and its CRI plugin when `cri`, answer on
/// `channel`.
async fn answers(channel: &Channel, cri: bool) -> bool {
    let native = containerd_client::Client::from(channel.clone());
    if native.version().version(()).await.is_err() {
        return false;
    }
    !cri || RuntimeServiceClient::new(channel.clone())
        .status(StatusRequest { verbose: false })
        .await
        .is_ok()
}
