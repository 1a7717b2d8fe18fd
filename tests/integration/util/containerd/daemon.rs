//! The containerd process: its config (CRI on or off, and a pod network
//! of its own), and how to tell that it answers. The process itself, its
//! namespaces and its teardown are [`EngineProcess`]'s.
//!
//! Two versions: Debian 12's containerd 1.6.20 (config `version = 2`) and
//! Debian unstable's containerd 2.x from the test runtimes (config
//! `version = 3`; see docs/engines.md, "containerd 2.x").

use std::fs;
use std::path::{Path, PathBuf};

use containerd_client::tonic::transport::Channel;
use k8s_cri::v1::StatusRequest;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;

use super::{ContainerdVersion, SANDBOX_IMAGE};
use crate::util::engine::{CNI_BIN_DIR, EngineProcess, cni_conflist};
use crate::util::{Missing, test_runtime};

/// Brings up loopback (the CRI plugin's stream server listens on
/// 127.0.0.1), then becomes containerd with the config file `$1`.
/// Debian's containerd, its shim and runc are on PATH.
const EXEC: &str = r#"ip link set lo up && exec containerd --config "$1""#;

/// [`EXEC`] for the containerd in directory `$2`. containerd looks its shim
/// up on PATH before its own directory, and Debian's 1.6 shim is on PATH:
/// the directory goes first, so the shim is the one of its release (with
/// the 1.6 shim, 2.3.4's `RunPodSandbox` fails: "failed to start shim:
/// start failed: io.containerd.runc.v2: type with url <sandbox id>: not
/// found", measured).
const EXEC_IN: &str =
    r#"ip link set lo up && PATH="$2:$PATH" && export PATH && exec "$2/containerd" --config "$1""#;

/// The socket containerd listens on.
pub(super) const SOCKET: &str = "c.sock";
/// Where containerd serves its metrics, in its private network namespace.
pub(super) const METRICS_ADDRESS: &str = "127.0.0.1:1338";

/// The runtime set of `$SAFEPRUNE_TEST_RUNTIMES` that holds containerd
/// 2.x: Debian unstable's package, unpacked by `scripts/runtimes.sh`.
const V2_SET: &str = "containerd";

/// The binaries of a private containerd: which release, and where.
#[derive(Debug, Clone)]
pub(super) struct Binaries {
    pub(super) version: ContainerdVersion,
    /// The directory of `containerd`, `containerd-shim-runc-v2` and `ctr`;
    /// `None`: Debian's, on PATH.
    dir: Option<PathBuf>,
    /// Its `major.minor.patch` (`1.6.20`, `2.1.9`).
    pub(super) release: String,
}

impl Binaries {
    /// Where `version`'s binaries are.
    ///
    /// # Errors
    /// [`Missing`] for 2.x when `$SAFEPRUNE_TEST_RUNTIMES` is unset.
    pub(super) fn find(version: ContainerdVersion) -> Result<Self, Missing> {
        let (dir, release) = match version {
            // Debian 12's, which scripts/deps.sh installs.
            ContainerdVersion::V1_6 => (None, "1.6.20".to_owned()),
            ContainerdVersion::V2 => {
                let set = test_runtime(V2_SET, "containerd 2.x")?;
                (Some(set.dir), set.version)
            }
        };
        Ok(Self {
            version,
            dir,
            release,
        })
    }

    /// The `ctr` of the same release: a client of its own version, as an
    /// operator of that node has.
    pub(super) fn ctr(&self) -> PathBuf {
        self.dir
            .as_ref()
            .map_or_else(|| PathBuf::from("ctr"), |dir| dir.join("ctr"))
    }
}

/// The private containerd 1.6's config: its own root, state, socket and CRI
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
  # A CRI pull's registry hosts (`hosts.toml`), where a test writes them:
  # the node's /etc/containerd/certs.d stays unread.
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{d}/certs.d"
"#,
        socket = socket.display(),
    )
}

/// The private containerd 2.3's config, as [`config_toml`] in the schema of
/// containerd 2.0 (`version = 3`; 2.3 migrates it to 4 at start, with a
/// warning in its log). The CRI plugin is split in two: images (the
/// snapshotter, and the sandbox image among `pinned_images`) and runtime.
/// NRI, on by default, listens on a socket of the directory and reads its
/// plugins from there, as CDI its specs; nothing reads `/etc` or `/opt`.
/// A config file given with `--config` imports nothing of
/// `/etc/containerd/conf.d`, though `config dump` lists that default
/// (measured: a setting put there is not applied).
fn config_toml_v3(dir: &Path, socket: &Path, cri: bool) -> String {
    let d = dir.display();
    let cri_off = if cri {
        ""
    } else {
        "\n  \"io.containerd.grpc.v1.cri\","
    };
    format!(
        r#"version = 3
root = "{d}/root"
state = "{d}/state"
# opt installs into /opt/containerd; the rest probe host devices or need
# tools that are not here.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",{cri_off}
]

[grpc]
  address = "{socket}"

# In the engine's own network namespace: see `PrivateContainerd::grpc_calls`.
[metrics]
  address = "{METRICS_ADDRESS}"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  # Pinned: CRI lists it with `pinned: true` and containerd labels it
  # `io.cri-containerd.pinned=pinned`. The harness imports it.
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{SANDBOX_IMAGE}"
  # See `config_toml`.
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{d}/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  cdi_spec_dirs = ["{d}/cdi"]
  # See `config_toml`.
  [plugins."io.containerd.cri.v1.runtime".cni]
    conf_dir = "{d}/cni"
    bin_dirs = ["{CNI_BIN_DIR}"]

[plugins."io.containerd.nri.v1.nri"]
  socket_path = "{d}/nri.sock"
  plugin_path = "{d}/nri/plugins"
  plugin_config_path = "{d}/nri/conf.d"

[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = "{d}/image-verifier"
"#,
        socket = socket.display(),
    )
}

/// Writes a config as `config` (CRI on or off) in the directory of
/// `process`, runs containerd of `binaries` with it and waits until its own
/// API, and CRI when on, answer; returns a channel to it.
pub(super) async fn launch(
    process: &mut EngineProcess,
    binaries: &Binaries,
    config: &str,
    cri: bool,
) -> Channel {
    let socket = process.path(SOCKET);
    let config = process.path(config);
    let toml = match binaries.version {
        ContainerdVersion::V1_6 => config_toml(process.dir(), &socket, cri),
        ContainerdVersion::V2 => config_toml_v3(process.dir(), &socket, cri),
    };
    fs::write(&config, toml).unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
    let cni = process.path("cni");
    fs::create_dir_all(&cni).expect("create the CNI config directory");
    fs::write(
        cni.join("10-safeprune-test.conflist"),
        cni_conflist(process.dir()),
    )
    .expect("write the CNI config");
    match &binaries.dir {
        None => process.launch(EXEC, [config.as_os_str()]),
        Some(dir) => process.launch(EXEC_IN, [config.as_os_str(), dir.as_os_str()]),
    }
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
