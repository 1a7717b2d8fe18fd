//! A private Docker Engine 28 or later for a test (Debian unstable's
//! `docker.io`, 28.5.2 when this was written), over a containerd 2.x of its
//! own (Debian unstable's `containerd`), on the image store the test picks.
//!
//! [`PrivateDockerd28::start`] runs, as one [`EngineProcess`] under
//! `/tmp/sp28-XXXXXX`, a shell that starts containerd 2.x in the
//! background (config `containerd.toml`, root and state under
//! `containerd/`, socket `c.sock`, log `containerd.log`) and, once that
//! socket listens, becomes
//! dockerd (`--containerd` at that socket, data root, exec root,
//! socket and pid file as [`PrivateDockerd`]'s, no bridge, no iptables).
//! Both binaries come from `$SAFEPRUNE_TEST_RUNTIMES` (`docker/`,
//! `containerd/`, which `scripts/runtimes.sh` unpacks from Debian
//! unstable's packages); where it is unset the start is [`Missing`].
//! dockerd is the init of the namespaces and containerd its child, so the
//! teardown of [`PrivateDockerd`] takes both, their shims and containers.
//!
//! dockerd's config (`daemon.json`) holds only `features`:
//! `time-namespaces: false` (Debian's runc 1.1.5 knows no time namespace)
//! and `containerd-snapshotter`, which picks the [`Store`]. containerd runs
//! without CRI and NRI: dockerd needs neither. Start-up of both, until
//! dockerd answers, takes 0.15 to 0.5 s on 2 cores (measured).
//!
//! [`PrivateDockerd28`] dereferences to a [`PrivateDockerd`], so every
//! fixture of `docker.rs` works on it (`import_busybox_image`, `tag_image`,
//! `create_container`, `cli()`, `build_with_buildkit`...). Debian's docker
//! CLI 20.10 speaks API 1.41 to it (Docker 28 and 29 accept 1.40 and up), and
//! its built-in `BuildKit` client builds on it with `DOCKER_BUILDKIT=1`
//! (measured, both stores). [`PrivateDockerd28::restart`] starts both
//! engines again on the same directory (the [`PrivateDockerd`]'s own would
//! launch Debian's dockerd), and [`PrivateDockerd28::start_on_small_fs`]
//! puts the store's images on a small file system.

use std::fs;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::process::Command;

use bollard::Docker;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::docker::PrivateDockerd;
use super::docker::daemon::{await_dockerd, isolation_flags, oom_floor_runtime};
use super::engine::EngineProcess;
use super::{Missing, test_runtime};

/// The runtime set of `$SAFEPRUNE_TEST_RUNTIMES` that holds dockerd.
const DOCKER_SET: &str = "docker";
/// The one that holds containerd 2.x, its shim and `ctr`.
const CONTAINERD_SET: &str = "containerd";
/// For messages.
const WHAT: &str = "Docker 28+ (Debian unstable's docker.io, over its containerd 2.x)";

/// The newest API version the engines speak (`/version`'s `ApiVersion`,
/// `1.51` on Docker 28.5), once one has started.
static API_VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// [`API_VERSION`]: the newest API the Docker 28+ of this run speaks
/// (`1.51`).
///
/// # Panics
/// Before a [`PrivateDockerd28`] has started.
pub fn api_version() -> &'static str {
    API_VERSION
        .get()
        .expect("the API version is known once a Docker 28+ has started")
}

/// Whether [`api_version`] is `major.minor` or newer.
pub fn api_at_least(minor: u32) -> bool {
    api_version()
        .strip_prefix("1.")
        .and_then(|m| m.parse::<u32>().ok())
        .is_some_and(|m| m >= minor)
}

/// The containerd namespace dockerd keeps its objects in (its default,
/// `--containerd-namespace`).
pub const MOBY_NAMESPACE: &str = "moby";

/// Brings up loopback, starts containerd (`$3`, logging to `$4`) in the
/// background, then becomes dockerd with the flags after those four. The
/// directories of the two releases (`$1`: containerd's, `$2`: dockerd's)
/// go first on PATH, so that containerd finds the shim of its own release
/// (Debian's 1.6 shim is on PATH too) and dockerd that containerd. Plain
/// lines, not an `&&` chain: `a && b &` would put the whole chain in the
/// background.
const EXEC: &str = r#"ip link set lo up || exit 1
PATH="$1:$2:$PATH"
export PATH
socket=$5
# A killed containerd leaves its socket behind: on a restart the wait
# below would pass at once, and dockerd would dial a socket nobody
# listens on yet.
rm -f "$socket"
containerd --config "$3" >>"$4" 2>&1 &
shift 5
# dockerd answers before it dials containerd, and a call that needs
# containerd then fails at once with "connection refused": dockerd starts
# once containerd listens (20 s at most).
i=0
while [ ! -S "$socket" ] && [ "$i" -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
exec dockerd "$@""#;

/// Where a Docker 28+ engine keeps its images.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// The graph driver store (`"containerd-snapshotter": false`): `/info`
    /// says `Driver: overlay2`.
    Overlay2,
    /// containerd's image store (`"containerd-snapshotter": true`, the
    /// default of fresh installs): `Driver: overlayfs`, with
    /// `["driver-type", "io.containerd.snapshotter.v1"]` in `DriverStatus`.
    Containerd,
}

impl Store {
    /// Both stores, the graph driver's first.
    pub const ALL: [Self; 2] = [Self::Overlay2, Self::Containerd];

    /// `overlay2` or `containerd`, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Overlay2 => "overlay2",
            Self::Containerd => "containerd",
        }
    }

    /// `/info`'s `Driver` on this store.
    pub fn driver(self) -> &'static str {
        match self {
            Self::Overlay2 => "overlay2",
            Self::Containerd => "overlayfs",
        }
    }

    fn containerd_snapshotter(self) -> bool {
        self == Self::Containerd
    }
}

/// A Docker Engine 28+ of the test's own over its own containerd 2.x:
/// a [`PrivateDockerd`] (by [`Deref`]) with what only this engine has.
pub struct PrivateDockerd28 {
    store: Store,
    ctr: PathBuf,
    containerd_socket: PathBuf,
    /// Last: its drop tears both engines down.
    dockerd: PrivateDockerd,
}

impl Deref for PrivateDockerd28 {
    type Target = PrivateDockerd;

    fn deref(&self) -> &PrivateDockerd {
        &self.dockerd
    }
}

impl PrivateDockerd28 {
    /// Starts containerd 2.x and Docker 28+ on `store`, and waits
    /// until dockerd answers `_ping` on that store.
    ///
    /// ```ignore
    /// let e = PrivateDockerd28::start(Store::Containerd).await.required();
    /// ```
    ///
    /// # Errors
    /// [`Missing`] when `$SAFEPRUNE_TEST_RUNTIMES` is unset.
    ///
    /// # Panics
    /// When either engine cannot be started, dockerd does not answer within
    /// 30 s, or it answers on another store; the message holds the tail of
    /// dockerd's log (containerd's is `containerd.log` beside it).
    pub async fn start(store: Store) -> Result<Self, Missing> {
        Self::start_in(EngineProcess::new("dockerd", "sp28-"), store, false).await
    }

    /// [`Self::start`], with the images on a fresh ext4 file system of
    /// `megabytes`, loop-mounted: a disk the test can fill. On overlay2
    /// that is the data root, on the containerd store containerd's root
    /// (its content and snapshots; the data root then holds only
    /// dockerd's metadata).
    ///
    /// # Errors
    /// As [`Self::start`], before anything is mounted.
    pub async fn start_on_small_fs(store: Store, megabytes: u64) -> Result<Self, Missing> {
        test_runtime(DOCKER_SET, WHAT)?;
        test_runtime(CONTAINERD_SET, WHAT)?;
        let mut process = EngineProcess::new("dockerd", "sp28-");
        match store {
            Store::Overlay2 => process.mount_small_fs("data", megabytes),
            Store::Containerd => {
                fs::create_dir_all(process.path("containerd"))
                    .expect("make containerd's directory");
                process.mount_small_fs("containerd/root", megabytes);
            }
        }
        Self::start_in(process, store, false).await
    }

    /// [`Self::start`] for cri-dockerd: dockerd's default runtime is a runc
    /// wrapper that raises a negative `oom_score_adj` to 0 (cri-dockerd
    /// gives sandboxes -998, which root here may not set; see
    /// `docker/daemon.rs`, `oom_floor_runtime`).
    ///
    /// # Errors
    /// As [`Self::start`].
    ///
    /// # Panics
    /// As [`Self::start`].
    pub async fn start_with_oom_floor(store: Store) -> Result<Self, Missing> {
        Self::start_in(EngineProcess::new("dockerd", "sp28-"), store, true).await
    }

    async fn start_in(
        mut process: EngineProcess,
        store: Store,
        oom_floor: bool,
    ) -> Result<Self, Missing> {
        let docker_dir = test_runtime(DOCKER_SET, WHAT)?.dir;
        let containerd_dir = test_runtime(CONTAINERD_SET, WHAT)?.dir;
        let containerd_socket = process.path("c.sock");
        fs::write(
            process.path("containerd.toml"),
            containerd_toml(process.dir(), &containerd_socket),
        )
        .expect("write containerd.toml");
        let mut config = serde_json::json!({
            "features": {
                "time-namespaces": false,
                "containerd-snapshotter": store.containerd_snapshotter(),
            }
        });
        if oom_floor
            && let (Some(config), Value::Object(runtime)) =
                (config.as_object_mut(), oom_floor_runtime(&process))
        {
            config.extend(runtime);
        }
        fs::write(process.path("daemon.json"), config.to_string()).expect("write daemon.json");
        let endpoint = format!("unix://{}", process.path("docker.sock").display());
        let docker = launch(&mut process, &containerd_dir, &docker_dir, &endpoint).await;
        let version = docker.version().await.expect("/version of Docker 28+");
        let api = version.api_version.unwrap_or_default();
        let _ = API_VERSION.set(api.clone());
        assert_eq!(
            API_VERSION.get(),
            Some(&api),
            "every Docker 28+ of a test run is the same release"
        );
        let info = docker.info().await.expect("/info of Docker 28+");
        assert_eq!(
            info.driver.as_deref(),
            Some(store.driver()),
            "Docker 28+ started on another store than {}: {:?}",
            store.name(),
            info.driver_status
        );
        Ok(Self {
            store,
            ctr: containerd_dir.join("ctr"),
            containerd_socket,
            dockerd: PrivateDockerd::launched(docker, endpoint, process),
        })
    }

    /// Kills both engines, as a crash or `systemctl stop docker` would;
    /// their data stays for [`Self::restart`].
    pub fn stop(&mut self) {
        self.dockerd.stop();
    }

    /// Starts containerd and dockerd again on the same data, sockets and
    /// scope (killing them first if they still run).
    pub async fn restart(&mut self) {
        let docker_dir = test_runtime(DOCKER_SET, WHAT).expect("it started").dir;
        let containerd_dir = test_runtime(CONTAINERD_SET, WHAT).expect("it started").dir;
        let endpoint = self.endpoint().to_owned();
        self.dockerd
            .relaunch(async |process| {
                launch(process, &containerd_dir, &docker_dir, &endpoint).await
            })
            .await;
    }

    /// The store it keeps its images in.
    pub fn store(&self) -> Store {
        self.store
    }

    /// The [`PrivateDockerd`] it is, for helpers that take one.
    pub fn dockerd(&self) -> &PrivateDockerd {
        &self.dockerd
    }

    /// The socket of its containerd, `/tmp/sp28-XXXXXX/c.sock`.
    pub fn containerd_socket(&self) -> &Path {
        &self.containerd_socket
    }

    /// The root of its containerd, `/tmp/sp28-XXXXXX/containerd/root`:
    /// where the containerd store keeps images (content, snapshots).
    pub fn containerd_root(&self) -> PathBuf {
        self.process_dir().join("containerd/root")
    }

    /// Where this store keeps its images, as safeprune measures it with
    /// `images.disk`: the data root on overlay2; on the containerd store
    /// its snapshotter's root, `<containerd root>/io.containerd.snapshotter.v1.overlayfs`
    /// (docs/engines.md, "Docker 29").
    pub fn image_root(&self) -> PathBuf {
        match self.store {
            Store::Overlay2 => self.data_root(),
            Store::Containerd => self
                .containerd_root()
                .join("io.containerd.snapshotter.v1.overlayfs"),
        }
    }

    /// The engine's directory, `/tmp/sp28-XXXXXX`.
    fn process_dir(&self) -> &Path {
        self.containerd_socket
            .parent()
            .expect("the socket lies in the engine's directory")
    }

    /// containerd 2.x's `ctr`, pointed at this engine's containerd and
    /// dockerd's namespace `moby` (the containerd store's images and
    /// content, and every container's task, lie there).
    pub fn ctr(&self) -> Command {
        let mut cmd = Command::new(&self.ctr);
        cmd.arg("--address")
            .arg(&self.containerd_socket)
            .args(["--namespace", MOBY_NAMESPACE]);
        cmd
    }

    /// Runs `ctr` with `args`; its stdout. Panics with its output when it
    /// fails.
    pub fn ctr_ok(&self, args: &[&str]) -> String {
        let out = self.ctr().args(args).output().expect("run ctr");
        assert!(
            out.status.success(),
            "ctr {} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `GET path` (with its version, `/v1.55/system/df`) on the engine's
    /// socket, by hand: the status and the body as JSON (`Null` when it is
    /// not JSON). For the shapes bollard's types do not keep (a key with a
    /// leading space, fields of other API versions).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        get(self.endpoint(), path).await
    }
}

/// `GET path` over HTTP/1.0 (unchunked, closed after the answer) on the
/// Docker endpoint `unix://…`: the status and the body as JSON (`Null` when
/// it is not JSON).
///
/// # Panics
/// When the socket does not answer with an HTTP response.
pub async fn get(endpoint: &str, path: &str) -> (u16, Value) {
    let socket = endpoint.trim_start_matches("unix://");
    let mut stream = tokio::net::UnixStream::connect(socket)
        .await
        .unwrap_or_else(|e| panic!("connect to {socket}: {e}"));
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n").as_bytes())
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let at = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("GET {path}: no HTTP answer"));
    let head = String::from_utf8_lossy(&answer[..at]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("GET {path}: bad status line in {head}"));
    (
        status,
        serde_json::from_slice(&answer[at + 4..]).unwrap_or(Value::Null),
    )
}

/// containerd's config: root, state and socket in the engine's directory;
/// no CRI (dockerd does not use it) and no NRI; nothing reads `/etc` or
/// `/opt` (schema `version = 3`, which 2.1 reads as it is and 2.3 migrates).
fn containerd_toml(dir: &Path, socket: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 3
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
  "io.containerd.grpc.v1.cri",
  "io.containerd.cri.v1.images",
  "io.containerd.cri.v1.runtime",
  "io.containerd.nri.v1.nri",
]

[grpc]
  address = "{socket}"

[plugins."io.containerd.image-verifier.v1.bindir"]
  bin_dir = "{d}/image-verifier"
"#,
        socket = socket.display()
    )
}

/// Runs containerd and dockerd on the directory of `process` and waits
/// until dockerd answers; returns a client on it.
async fn launch(
    process: &mut EngineProcess,
    containerd_dir: &Path,
    docker_dir: &Path,
    endpoint: &str,
) -> Docker {
    let d = |name: &str| process.path(name).to_string_lossy().into_owned();
    let args = [
        containerd_dir.to_string_lossy().into_owned(),
        docker_dir.to_string_lossy().into_owned(),
        d("containerd.toml"),
        d("containerd.log"),
        d("c.sock"),
        "--config-file".to_owned(),
        d("daemon.json"),
        "--containerd".to_owned(),
        d("c.sock"),
        "--data-root".to_owned(),
        d("data"),
        "--exec-root".to_owned(),
        d("exec"),
        "--pidfile".to_owned(),
        d("dockerd.pid"),
        "-H".to_owned(),
        endpoint.to_owned(),
    ]
    .into_iter()
    .chain(isolation_flags(process))
    .collect::<Vec<_>>();
    process.launch(EXEC, args);
    await_dockerd(process).await
}
