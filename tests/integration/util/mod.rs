//! The test harness: a private engine for each test, fixtures to fill it,
//! and the helpers that run safeprune on it.
//!
//! - [`docker::PrivateDockerd`] (`docker.rs`) and
//!   [`containerd::PrivateContainerd`] (`containerd.rs`) each run an engine
//!   of the test's own, with fixtures that make objects the way kubelet,
//!   cri-dockerd, `docker` and `ctr` would. Both are an
//!   [`engine::EngineProcess`] (`engine.rs`): the process in fresh
//!   namespaces under `/tmp/<prefix>XXXXXX`, the wait until it answers, and
//!   the teardown of all it leaves. The engine files hold only what
//!   differs: flags, config, how to ask.
//! - [`docker_matrix`] (`docker_matrix.rs`): one Docker test body on
//!   Docker 20.10 and on Docker 29 with each image store
//!   (`docker_tests!`), its engine a [`docker::PrivateDockerd`] either way.
//! - [`crio::PrivateCrio`] (`crio.rs`): a CRI-O 1.36.3 of the test's own
//!   (from `$SAFEPRUNE_TEST_RUNTIMES`), an [`engine::EngineProcess`] too,
//!   filled through CRI ([`kubelet::Kubelet`]) as kubelet fills it, its
//!   images put in with `copyimg`.
//! - [`cri_dockerd::PrivateCriDockerd`] (`cri_dockerd.rs`): a real
//!   cri-dockerd (0.3.25 over Debian's Docker 20.10, 0.4.3 over Docker 29
//!   on either store) of the test's own, filled through CRI as kubelet
//!   fills it.
//! - [`kubelet::Kubelet`] (`kubelet.rs`): kubelet's side of a CRI runtime,
//!   pods and containers made over CRI's gRPC API with kubelet's labels and
//!   annotations, and what tests ask of CRI besides (lists, statuses,
//!   `ExecSync`, `crictl rmi --prune`'s logic); shared by CRI-O,
//!   cri-dockerd and containerd's CRI plugin.
//! - [`pod::Pod`] (`pod.rs`): a pod as kubelet names it, on either engine.
//! - [`kube`] (`kube.rs`): kubelet's part for the `DaemonSet`'s pod, the
//!   manifests of `deploy/kubernetes/` turned into CRI configs.
//! - [`node`] (`node.rs`): a policy for an engine, the `safeprune` binary
//!   run on it, its JSON report read back, and the assertions on what a
//!   scenario's run was to remove.
//! - [`daemon`] (`daemon.rs`): `safeprune daemon` run, its log watched,
//!   and stopped.
//! - [`registry::Registry`] (`registry.rs`): Debian's docker-registry on
//!   127.0.0.1:5000 in the network namespace of the test's engine, which
//!   pushes to and pulls from it as a node does.
//! - [`image`] (`image.rs`): the container image `scripts/image.sh` builds
//!   from the binary under test, and its archives read back.
//! - [`test_runtime`] and [`Missing`] (here): the newer engines from
//!   Debian unstable's packages, and CRI-O and cri-dockerd where someone
//!   provides them (`$SAFEPRUNE_TEST_RUNTIMES`, which `scripts/test.sh`
//!   sets), or what a test that needs one is missing: it fails with it.
//!
//! Everything the fixtures create carries the label `safeprune.test=<scope>`
//! with the engine's own scope, and lies in that engine alone.

#![allow(
    dead_code,
    reason = "benches/speed/containerd.rs includes this harness too and uses a subset of it; `expect` would fail in the integration binary, which uses it all"
)]

pub mod containerd;
pub mod cri_dockerd;
pub mod crio;
pub mod daemon;
pub mod docker;
pub mod docker28;
pub mod docker_matrix;
mod engine;
pub mod image;
pub mod kube;
pub mod kubelet;
pub mod node;
pub mod oci;
pub mod pod;
pub mod pty;
pub mod registry;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

/// The label every fixture object carries.
pub const TEST_LABEL: &str = "safeprune.test";

/// A command that runs until stopped and exits 0 at once on SIGTERM (a
/// plain busybox `sleep` as pid 1 ignores TERM and waits for the kill).
pub const RUN_FOREVER: &[&str] = &["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"];

/// A command that exits 0 at once.
pub const EXIT_0: &[&str] = &["sh", "-c", "exit 0"];

/// The directory of the newer runtimes: `scripts/runtimes.sh` fetches
/// Debian unstable's `containerd` (2.x) and `docker.io` (28 and later)
/// into it (`containerd/`, `docker/`), and `scripts/test.sh` sets the
/// variable. Binaries of one's own for CRI-O and cri-dockerd go beside
/// them ([`OPTIONAL_SETS`]; CONTRIBUTING.md, "Runtimes").
pub const RUNTIMES_VAR: &str = "SAFEPRUNE_TEST_RUNTIMES";

/// Why a test cannot run: a runtime it needs is not on this machine. The
/// test fails with it ([`Required`]): a test never passes without having
/// run. The optional sets' tests are left out of a run where their set is
/// absent, by nextest's default filter and `scripts/test.sh`
/// (`.config/nextest.toml`; CONTRIBUTING.md, "Runtimes"), and counted as
/// skipped there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Missing(pub String);

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `result.required()`: the value, or the test fails saying what is
/// missing and how to provide it.
pub trait Required<T> {
    /// The value; panics with the [`Missing`] reason.
    fn required(self) -> T;
}

impl<T> Required<T> for Result<T, Missing> {
    #[track_caller]
    fn required(self) -> T {
        self.unwrap_or_else(|missing| panic!("{missing}"))
    }
}

/// The sets no package registry here serves, which someone may put under
/// `$SAFEPRUNE_TEST_RUNTIMES`, and what each must hold: their tests run
/// only where they are (`.config/nextest.toml` leaves them out by default;
/// `scripts/test.sh` asks for each set it finds).
pub const OPTIONAL_SETS: &[(&str, &str)] = &[
    ("crio", "crio, pinns and copyimg (CRI-O 1.36 or later)"),
    ("cri-dockerd", "cri-dockerd 0.4 or later (over Docker 28+)"),
    (
        "cri-dockerd-0.3",
        "cri-dockerd 0.3.x (over Debian's Docker 20.10, API 1.41)",
    ),
];

/// A runtime set under `$SAFEPRUNE_TEST_RUNTIMES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestRuntime {
    /// Its directory, `$SAFEPRUNE_TEST_RUNTIMES/<set>`.
    pub dir: PathBuf,
    /// What its `VERSION` file says (`2.1.9`), or `its own build` where
    /// there is none (a set someone provided).
    pub version: String,
}

impl TestRuntime {
    /// `name` in the set's directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Where the runtimes are: `$SAFEPRUNE_TEST_RUNTIMES`, else `target/runtimes`
/// of this checkout, where `scripts/test.sh` fetches them by default.
fn runtimes_root() -> Option<OsString> {
    std::env::var_os(RUNTIMES_VAR)
        .filter(|v| !v.is_empty())
        .or_else(|| {
            let fetched = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/runtimes");
            fetched
                .join("containerd")
                .is_dir()
                .then(|| fetched.into_os_string())
        })
}

/// Runtime set `set` (`containerd`, `docker`, or one of [`OPTIONAL_SETS`])
/// for tests of `what` (say `containerd 2.x`): under
/// `$SAFEPRUNE_TEST_RUNTIMES`, else this checkout's `target/runtimes`.
///
/// # Errors
/// [`Missing`] when neither holds the runtimes, or an optional set is not
/// there: the text says how to provide it.
pub fn test_runtime(set: &str, what: &str) -> Result<TestRuntime, Missing> {
    runtime_in(runtimes_root(), set, what)
}

/// [`test_runtime`] with `root` as where the runtimes are.
///
/// # Errors
/// [`Missing`] when `root` is `None` or empty, or `set` is not in it.
pub fn runtime_in(root: Option<OsString>, set: &str, what: &str) -> Result<TestRuntime, Missing> {
    let Some(root) = root.filter(|v| !v.is_empty()) else {
        return Err(Missing(format!(
            "{what} tests need Debian's newer runtimes: run scripts/runtimes.sh target/runtimes (scripts/test.sh does), or set {RUNTIMES_VAR} to where they are"
        )));
    };
    let dir = PathBuf::from(root).join(set);
    if !dir.is_dir() {
        return Err(Missing(
            match OPTIONAL_SETS.iter().find(|(name, _)| *name == set) {
                Some((_, holds)) => format!(
                    "{what} tests need {} ({holds}; no registry here serves it): CONTRIBUTING.md, \"Runtimes\"",
                    dir.display()
                ),
                None => format!(
                    "{what} tests need {}: run scripts/runtimes.sh {} (scripts/test.sh does)",
                    dir.display(),
                    dir.parent()
                        .map_or_else(String::new, |p| p.display().to_string())
                ),
            },
        ));
    }
    let version = fs::read_to_string(dir.join("VERSION"))
        .map_or_else(|_| "its own build".to_owned(), |v| v.trim().to_owned());
    Ok(TestRuntime { dir, version })
}

/// Runs `command`; panics with its output when it fails.
pub fn run_ok(command: &mut Command) {
    let out = command.output().expect("run a command");
    assert!(
        out.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `extra` and `safeprune.test=<scope>`: the labels of a fixture object, so
/// that it is known as this engine's own.
pub(crate) fn scoped_labels<K, V>(
    scope: &str,
    extra: impl IntoIterator<Item = (K, V)>,
) -> HashMap<String, String>
where
    K: Into<String>,
    V: Into<String>,
{
    extra
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .chain([(TEST_LABEL.to_owned(), scope.to_owned())])
        .collect()
}

/// A tar of a minimal root file system: the static busybox from Debian's
/// busybox-static as `/bin/busybox`, `sh` and `sleep` linked to it.
pub(crate) fn busybox_rootfs(extra_file: Option<&str>) -> Vec<u8> {
    let busybox = fs::read("/bin/busybox")
        .expect("read /bin/busybox (Debian package busybox-static) for the test image");
    let mut tar = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    tar.append_data(&mut dir, "bin/", std::io::empty())
        .expect("tar bin/");
    let mut file = tar::Header::new_gnu();
    file.set_mode(0o755);
    file.set_size(busybox.len() as u64);
    tar.append_data(&mut file, "bin/busybox", busybox.as_slice())
        .expect("tar bin/busybox");
    for applet in ["sh", "sleep"] {
        let mut link = tar::Header::new_gnu();
        link.set_entry_type(tar::EntryType::Symlink);
        link.set_mode(0o777);
        link.set_size(0);
        tar.append_link(&mut link, format!("bin/{applet}"), "busybox")
            .expect("tar an applet link");
    }
    if let Some(content) = extra_file {
        let mut extra = tar::Header::new_gnu();
        extra.set_mode(0o644);
        extra.set_size(content.len() as u64);
        tar.append_data(&mut extra, "extra", content.as_bytes())
            .expect("tar extra");
    }
    tar.into_inner().expect("finish the tar")
}

/// `df`'s used and available bytes of the file system holding `path`.
pub fn df(path: &std::path::Path) -> (u64, u64) {
    let out = Command::new("df")
        .args(["-B1", "--output=used,avail"])
        .arg(path)
        .output()
        .expect("run df");
    let text = String::from_utf8(out.stdout).expect("df prints text");
    let numbers: Vec<u64> = text
        .lines()
        .nth(1)
        .expect("df prints a line for the file system")
        .split_whitespace()
        .map(|n| n.parse().expect("df prints numbers"))
        .collect();
    (numbers[0], numbers[1])
}

/// What the executor does to remove object `id` of `kind` from `engine`:
/// re-check it, then remove it as the re-check found it; an object the
/// re-check does not find is removed as known by its id alone, so that an
/// adapter's own refusals (gone, in use, not its namespace) show.
pub async fn remove<E: safeprune::runtime::Engine>(
    engine: &E,
    kind: safeprune::inventory::Kind,
    id: &str,
) -> safeprune::runtime::Removal {
    use safeprune::runtime::Target;
    let found = engine
        .recheck(kind, &[id])
        .await
        .ok()
        .and_then(|fresh| Target::find(&fresh, kind, id));
    engine
        .remove(&found.unwrap_or_else(|| Target::by_id(kind, id)))
        .await
}
