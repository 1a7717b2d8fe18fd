//! A real cri-dockerd of the test's own over a private Docker Engine, for
//! a node as kubelet keeps it on Docker: pods and containers made through
//! CRI (`kubelet.rs`), stored by cri-dockerd as Docker containers.
//!
//! [`PrivateCriDockerd::start`] takes a [`Combo`]: cri-dockerd 0.3.25 over
//! Debian's dockerd 20.10 ([`PrivateDockerd`]), or 0.4.3 over Docker 29.7.2
//! ([`PrivateDockerd28`]) on either [`Store`] (0.4 refuses an API below
//! 1.42: `docker API version is older than 1.42.0`). cri-dockerd and
//! Docker 29 come from `$SAFEPRUNE_TEST_RUNTIMES` (`cri-dockerd-0.3/`,
//! `cri-dockerd/`, `docker/`); where
//! it is unset the start is [`Missing`]. Nothing of the node's own is
//! touched (`/var/lib/cri-dockerd`, `/run/cri-dockerd.sock`,
//! `/etc/cni`, `/opt/cni`, `/var/lib/cni`):
//!
//! - dockerd is started with a runc wrapper as its default runtime that
//!   raises a negative `oom_score_adj` to 0: cri-dockerd gives every
//!   sandbox `OomScoreAdj -998`, which root here may not set
//!   (`start_with_oom_floor`).
//! - cri-dockerd runs as an [`EngineProcess`] of its own under
//!   `/tmp/spcd-XXXXXX`, pid 1 of fresh pid (with its own `/proc`), mount
//!   and network namespaces: it sets `oom_score_adj -999` on every
//!   `dockerd` and `containerd` process it can see (its container
//!   manager), so it must see none but its own namespace's. Its socket
//!   (`cri-dockerd.sock`), root directory (`--cri-dockerd-root-directory`,
//!   its sandbox checkpoints), CNI directories and log are in that
//!   directory; `--network-plugin=` (empty: no-op networking) with pods on
//!   the host network, which is dockerd's private one;
//!   `--pod-infra-container-image` [`PAUSE_IMAGE`], imported before start
//!   (a busybox that sleeps until TERM), so nothing is ever pulled.
//! - The pods' cgroups lie under dockerd's `/<scope>`, and everything the
//!   fixtures make carries `safeprune.test=<dockerd's scope>`.
//!
//! Teardown: cri-dockerd is killed first, then dockerd with all it runs.
//! [`PrivateCriDockerd`] dereferences to the [`PrivateDockerd`] below it,
//! for the Docker fixtures and client (`docker()`, `endpoint()`, `cli()`).

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::time::Instant;

use bollard::body_full;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::TryStreamExt;

use super::docker::PrivateDockerd;
use super::docker28::{PrivateDockerd28, Store};
use super::engine::EngineProcess;
use super::kubelet::{CriPod, Kubelet};
use super::pod::Pod;
use super::{Missing, TEST_LABEL, busybox_rootfs, test_runtime};

/// The sandbox image cri-dockerd is told to use (its own default, so
/// nothing differs from a node left at defaults), imported at start.
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The pause image's command: sleeps until TERM (busybox's `sleep` as pid
/// 1 ignores TERM).
const PAUSE_CMD: &str = r#"CMD ["sh", "-c", "trap 'exit 0' TERM; sleep 2147483647 & wait"]"#;

/// Brings up loopback (cri-dockerd's stream server listens on 127.0.0.1),
/// then becomes cri-dockerd with the arguments after the script.
const EXEC: &str = r#"ip link set lo up || exit 1
exec "$@""#;

/// Which cri-dockerd over which Docker Engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combo {
    /// cri-dockerd 0.3.25 over Debian 12's Docker Engine 20.10.24 (API
    /// 1.41).
    V0_3Over20_10,
    /// cri-dockerd 0.4.3 over Docker Engine 29.7.2 (API 1.55) on this
    /// image store.
    V0_4Over28(Store),
}

impl Combo {
    /// Every combination the tests run on.
    pub const ALL: [Self; 3] = [
        Self::V0_3Over20_10,
        Self::V0_4Over28(Store::Overlay2),
        Self::V0_4Over28(Store::Containerd),
    ];

    /// The runtime set of `$SAFEPRUNE_TEST_RUNTIMES` its cri-dockerd is
    /// in: 0.3.x speaks API 1.41 to Docker 20.10, 0.4 and later refuse it.
    pub fn set(self) -> &'static str {
        match self {
            Self::V0_3Over20_10 => "cri-dockerd-0.3",
            Self::V0_4Over28(_) => "cri-dockerd",
        }
    }

    /// `cri-dockerd 0.4.3 over Docker 29 (containerd store)`, for messages.
    pub fn name(self) -> String {
        match self {
            Self::V0_3Over20_10 => "cri-dockerd 0.3 over Docker 20.10".to_owned(),
            Self::V0_4Over28(store) => {
                format!("cri-dockerd 0.4+ over Docker 28+ ({} store)", store.name())
            }
        }
    }
}

/// The Docker Engine below cri-dockerd.
enum Dockerd {
    V20(PrivateDockerd),
    V28(PrivateDockerd28),
}

/// A cri-dockerd of the test's own over a Docker Engine of its own.
pub struct PrivateCriDockerd {
    combo: Combo,
    /// kubelet's side: CRI at cri-dockerd's socket.
    ctl: Kubelet,
    socket: PathBuf,
    /// cri-dockerd, killed before dockerd.
    process: EngineProcess,
    /// Last: its drop tears dockerd down with every container.
    dockerd: Dockerd,
}

impl Deref for PrivateCriDockerd {
    type Target = PrivateDockerd;

    fn deref(&self) -> &PrivateDockerd {
        self.dockerd()
    }
}

impl PrivateCriDockerd {
    /// Starts the Docker Engine of `combo`, imports [`PAUSE_IMAGE`], starts
    /// cri-dockerd over it, and waits until it answers CRI's `Version`.
    ///
    /// ```ignore
    /// let node = PrivateCriDockerd::start(combo).await.required();
    /// ```
    ///
    /// # Errors
    /// [`Missing`] when `$SAFEPRUNE_TEST_RUNTIMES` is unset.
    ///
    /// # Panics
    /// When an engine cannot be started or does not answer within 30 s;
    /// the message holds the tail of its log.
    pub async fn start(combo: Combo) -> Result<Self, Missing> {
        let what = combo.name();
        let binary = test_runtime(combo.set(), &what)?.join("cri-dockerd");
        let begun = Instant::now();
        let dockerd = match combo {
            Combo::V0_3Over20_10 => Dockerd::V20(PrivateDockerd::start_with_oom_floor().await),
            Combo::V0_4Over28(store) => {
                Dockerd::V28(PrivateDockerd28::start_with_oom_floor(store).await?)
            }
        };
        let engine = match &dockerd {
            Dockerd::V20(d) => d,
            Dockerd::V28(d) => d.dockerd(),
        };
        import_pause_image(engine).await;
        let mut process = EngineProcess::new("cri-dockerd", "spcd-");
        let socket = process.path("cri-dockerd.sock");
        let ctl = Kubelet::new(&socket, process.dir(), engine.scope());
        let path = |name: &str| process.path(name).to_string_lossy().into_owned();
        let args = [
            binary.to_string_lossy().into_owned(),
            "--docker-endpoint".to_owned(),
            engine.endpoint().to_owned(),
            "--container-runtime-endpoint".to_owned(),
            ctl.endpoint().to_owned(),
            "--cri-dockerd-root-directory".to_owned(),
            path("root"),
            // Empty: no-op networking; pods use the host network.
            "--network-plugin=".to_owned(),
            "--cni-bin-dir".to_owned(),
            path("cni"),
            "--cni-conf-dir".to_owned(),
            path("cni"),
            "--cni-cache-dir".to_owned(),
            path("cni"),
            "--pod-infra-container-image".to_owned(),
            PAUSE_IMAGE.to_owned(),
            "--streaming-bind-addr".to_owned(),
            "127.0.0.1".to_owned(),
        ];
        process.launch(EXEC, args);
        let (probe, sock) = (ctl.clone(), socket.clone());
        process
            .await_answer(async || (sock.exists() && probe.answers()).then_some(()))
            .await;
        eprintln!("{what} started in {} ms", begun.elapsed().as_millis());
        Ok(Self {
            combo,
            ctl,
            socket,
            process,
            dockerd,
        })
    }

    /// Which cri-dockerd over which Docker.
    pub fn combo(&self) -> Combo {
        self.combo
    }

    /// The Docker Engine below cri-dockerd.
    pub fn dockerd(&self) -> &PrivateDockerd {
        match &self.dockerd {
            Dockerd::V20(d) => d,
            Dockerd::V28(d) => d.dockerd(),
        }
    }

    /// cri-dockerd's CRI endpoint, `unix:///tmp/spcd-XXXXXX/cri-dockerd.sock`
    /// (kubelet's `--container-runtime-endpoint`; the node's default is
    /// `unix:///run/cri-dockerd.sock`).
    pub fn cri_endpoint(&self) -> &str {
        self.ctl.endpoint()
    }

    /// cri-dockerd's socket.
    pub fn cri_socket(&self) -> &Path {
        &self.socket
    }

    /// kubelet's side: CRI at cri-dockerd's socket (`pods()`,
    /// `sandbox_status()`, `container_ids()`...).
    pub fn ctl(&self) -> &Kubelet {
        &self.ctl
    }

    /// Runs a pod sandbox as kubelet does (`kubelet.rs`): cri-dockerd makes
    /// it a container of [`PAUSE_IMAGE`] named `k8s_POD_…`.
    pub fn run_pod(&self, pod: &Pod) -> CriPod<'_> {
        self.ctl.run_pod(pod)
    }

    /// cri-dockerd's log so far (`cri-dockerd.log` in its directory).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.process.path("cri-dockerd.log")).unwrap_or_default()
    }
}

/// Imports [`PAUSE_IMAGE`] into `engine`: a busybox that sleeps until TERM.
async fn import_pause_image(engine: &PrivateDockerd) {
    let (repo, tag) = PAUSE_IMAGE.rsplit_once(':').expect("a tag");
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(repo)
        .tag(tag)
        .changes(vec![
            format!("LABEL {TEST_LABEL}={}", engine.scope()),
            PAUSE_CMD.to_owned(),
        ])
        .build();
    let rootfs = busybox_rootfs(Some("pause"));
    engine
        .docker()
        .create_image(Some(options), Some(body_full(rootfs.into())), None)
        .try_collect::<Vec<_>>()
        .await
        .expect("import the pause image");
}

/// Makes of each `async fn name(combo: Combo)` the tests
/// `name::on_0_3_over_20_10`, `name::on_0_4_over_28_overlay2` and
/// `name::on_0_4_over_28_containerd_store`. The body starts
/// `PrivateCriDockerd::start(combo)`: the 0.3 test runs where the
/// `cri-dockerd-0.3` set is, the 0.4 ones where `cri-dockerd` is
/// (`.config/nextest.toml`, `scripts/test.sh`).
#[allow(
    unused_macros,
    reason = "benches/speed/containerd.rs includes this harness and runs no cri-dockerd test"
)]
macro_rules! cri_dockerd_tests {
    () => {};
    ($name:ident $(, $($rest:tt)*)?) => {
        mod $name {
            use $crate::util::cri_dockerd::Combo;
            use $crate::util::docker28::Store;

            #[tokio::test(flavor = "multi_thread")]
            async fn on_0_3_over_20_10() {
                super::$name(Combo::V0_3Over20_10).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn on_0_4_over_28_overlay2() {
                super::$name(Combo::V0_4Over28(Store::Overlay2)).await;
            }

            #[tokio::test(flavor = "multi_thread")]
            async fn on_0_4_over_28_containerd_store() {
                super::$name(Combo::V0_4Over28(Store::Containerd)).await;
            }
        }
        $($crate::util::cri_dockerd::cri_dockerd_tests! { $($rest)* })?
    };
}
#[allow(
    unused_imports,
    reason = "benches/speed/containerd.rs includes this harness and runs no cri-dockerd test"
)]
pub(crate) use cri_dockerd_tests;
