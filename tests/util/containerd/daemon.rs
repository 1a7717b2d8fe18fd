//! The containerd process: its config, its launch in private namespaces,
//! and its teardown.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use containerd_client::tonic::transport::Channel;
use k8s_cri::v1::StatusRequest;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;

use super::SANDBOX_IMAGE;
use crate::util::{log_tail, tear_down, unmount_under};

const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// Mounts the private `/run` and brings up loopback (the CRI plugin's
/// stream server listens on 127.0.0.1), then becomes containerd.
const LAUNCH_SCRIPT: &str = r#"mount -n -t tmpfs -o mode=755 spc-run /run && ip link set lo up && exec containerd --config "$1""#;

/// The private containerd's config: its own root, state, socket and CRI
/// settings; plugins that would reach outside the directory are off.
pub(super) fn config_toml(dir: &Path, socket: &Path, cri: bool) -> String {
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

[plugins."io.containerd.grpc.v1.cri"]
  restrict_oom_score_adj = true
  sandbox_image = "{SANDBOX_IMAGE}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  # An empty CNI directory of our own: pods use the host network, and the
  # node's /etc/cni stays unread.
  [plugins."io.containerd.grpc.v1.cri".cni]
    conf_dir = "{d}/cni"
    bin_dir = "{d}/cni"
"#,
        socket = socket.display(),
    )
}

/// Runs containerd with `config`, appending to its log in `dir`.
pub(super) fn launch(dir: &Path, config: &Path) -> Child {
    let log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("containerd.log"))
        .expect("open containerd.log");
    let log_err = log.try_clone().expect("clone the log handle");
    Command::new("unshare")
        // containerd becomes pid 1 of a new pid namespace: when it dies the
        // kernel kills all in it (shims, containers). Private mounts and
        // network: nothing it mounts (overlays, shm, /run) or sets up
        // reaches the host. --kill-child: if unshare dies, so does
        // containerd.
        .args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc"])
        .args(["--net", "--propagation", "private"])
        .args(["sh", "-c", LAUNCH_SCRIPT, "containerd"])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run unshare (util-linux) to start containerd: {e}"))
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

/// The first child of process `pid` (unshare's only child is containerd).
fn child_of(pid: u32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The daemon's processes and files, torn down on drop (also when start-up
/// fails half-way).
pub(super) struct DaemonProcess {
    pub(super) dir: PathBuf,
    pub(super) scope: String,
    pub(super) unshare: Child,
    pub(super) containerd_pid: Option<u32>,
}

impl DaemonProcess {
    /// Waits until containerd (and its CRI plugin when `cri`) answer on
    /// `socket`.
    pub(super) async fn await_answer(&mut self, socket: &Path, cri: bool) -> Channel {
        let begun = Instant::now();
        let channel = loop {
            if socket.exists()
                && let Ok(channel) = containerd_client::connect(socket).await
                && answers(&channel, cri).await
            {
                break channel;
            }
            if let Ok(Some(status)) = self.unshare.try_wait() {
                panic!(
                    "private containerd exited ({status}) before answering; log tail:\n{}",
                    self.log_tail()
                );
            }
            assert!(
                begun.elapsed() < START_TIMEOUT,
                "private containerd did not answer within {START_TIMEOUT:?}; log tail:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        self.containerd_pid = child_of(self.unshare.id());
        eprintln!(
            "private containerd at {} answered after {} ms",
            socket.display(),
            begun.elapsed().as_millis()
        );
        channel
    }

    fn log_tail(&self) -> String {
        log_tail(&self.dir.join("containerd.log"))
    }

    /// Kills containerd and waits until its pid namespace is empty.
    pub(super) fn kill(&mut self) {
        if matches!(self.unshare.try_wait(), Ok(Some(_))) {
            return;
        }
        // SIGKILL to containerd, the namespace's init: the kernel kills the
        // rest and reaps them before containerd's own exit completes, so
        // unshare's wait returns only when the namespace is empty. While
        // unshare lives, containerd's pid cannot be reused.
        let killed = self.containerd_pid.is_some_and(|pid| {
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        });
        if !killed {
            let _ = self.unshare.kill();
        }
        let begun = Instant::now();
        while begun.elapsed() < STOP_TIMEOUT {
            if matches!(self.unshare.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.unshare.kill();
        let _ = self.unshare.wait();
    }
}

impl DaemonProcess {
    /// Unmounts anything still mounted under the directory.
    pub(super) fn unmount_leftovers(&self) {
        unmount_under(&self.dir);
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        self.kill();
        tear_down(&self.dir, &self.scope);
    }
}
