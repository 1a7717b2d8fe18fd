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
//!   filled through CRI (`crictl`) as kubelet fills it, its images put in
//!   with `copyimg`.
//! - [`cri_dockerd::PrivateCriDockerd`] (`cri_dockerd.rs`): a real
//!   cri-dockerd (0.3.25 over Debian's Docker 20.10, 0.4.3 over Docker 29
//!   on either store) of the test's own, filled through CRI as kubelet
//!   fills it.
//! - [`crictl::Crictl`] (`crictl.rs`): kubelet's side of a CRI runtime,
//!   pods and containers made through `crictl` with kubelet's labels and
//!   annotations; shared by CRI-O and cri-dockerd.
//! - [`pod::Pod`] (`pod.rs`): a pod as kubelet names it, on either engine.
//! - [`kube`] (`kube.rs`): kubelet's part for the `DaemonSet`'s pod, the
//!   manifests of `deploy/kubernetes/` turned into CRI configs.
//! - [`node`] (`node.rs`): a policy for an engine, the `safeprune` binary
//!   run on it, its JSON report read back, and the assertions on what a
//!   scenario's run was to remove.
//! - [`daemon`] (`daemon.rs`): `safeprune daemon` run, its log watched,
//!   and stopped.
//! - [`image`] (`image.rs`): the container image `scripts/image.sh` builds
//!   from the binary under test, and its archives read back.
//! - [`test_runtime`] and [`Skipped`] (here): the newer engines built from
//!   upstream sources (`$SAFEPRUNE_TEST_RUNTIMES`, which `scripts/test.sh`
//!   sets), or why a test that needs one did not run.
//!
//! Everything the fixtures create carries the label `safeprune.test=<scope>`
//! with the engine's own scope, and lies in that engine alone.

#![allow(
    dead_code,
    reason = "benches/containerd.rs includes this harness too and uses a subset of it; `expect` would fail in the integration binary, which uses it all"
)]

pub mod containerd;
pub mod cri_dockerd;
pub mod crictl;
pub mod crio;
pub mod daemon;
pub mod docker;
pub mod docker29;
pub mod docker_matrix;
mod engine;
pub mod image;
pub mod kube;
pub mod node;
pub mod oci;
pub mod pod;

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

/// The directory of the runtimes built from upstream sources
/// (`../shared/runtimes/install.sh` unpacked there, one directory per set,
/// such as `containerd-2.3.4/`); `scripts/test.sh` sets it when
/// `../shared/runtimes` exists.
pub const RUNTIMES_VAR: &str = "SAFEPRUNE_TEST_RUNTIMES";

/// Why a test did not run: an engine it needs is not on this machine. Its
/// text starts with `skipped:`, and the test prints it (see [`OrSkip`]):
/// a test that passes without running must say so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped(pub String);

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `result.or_skip()`: the value, or `None` once the reason it is missing
/// has been printed, for `let Some(x) = ... else { return };`.
pub trait OrSkip<T> {
    /// The value; or prints the [`Skipped`] reason and gives `None`.
    fn or_skip(self) -> Option<T>;
}

impl<T> OrSkip<T> for Result<T, Skipped> {
    fn or_skip(self) -> Option<T> {
        // On stderr, beside the harness's other notes (an engine's start):
        // nextest shows it with the test's output, as cargo test does.
        self.map_err(|skipped| eprintln!("{skipped}")).ok()
    }
}

/// The directory of runtime set `set` (say `containerd-2.3.4`) under
/// `$SAFEPRUNE_TEST_RUNTIMES`, for tests of `what` (say `containerd
/// 2.3.4`).
///
/// # Errors
/// [`Skipped`] when the variable is unset: the runtimes are optional, as
/// `../shared/runtimes` is.
///
/// # Panics
/// When the variable is set but `set` is not under it: that is a broken
/// install, not a machine without the runtimes, and must not pass as a skip.
pub fn test_runtime(set: &str, what: &str) -> Result<PathBuf, Skipped> {
    runtime_in(std::env::var_os(RUNTIMES_VAR), set, what)
}

/// [`test_runtime`] with `root` as the variable's value.
///
/// # Errors
/// [`Skipped`] when `root` is `None` or empty.
pub fn runtime_in(root: Option<OsString>, set: &str, what: &str) -> Result<PathBuf, Skipped> {
    let Some(root) = root.filter(|v| !v.is_empty()) else {
        return Err(Skipped(format!(
            "skipped: {RUNTIMES_VAR} is unset (../shared/runtimes absent): {what} tests not run"
        )));
    };
    let dir = PathBuf::from(root).join(set);
    assert!(
        dir.is_dir(),
        "{RUNTIMES_VAR} is set but {} is missing: run ../shared/runtimes/install.sh into it (scripts/test.sh does)",
        dir.display()
    );
    Ok(dir)
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
