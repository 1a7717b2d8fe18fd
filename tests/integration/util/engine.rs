//! The process of a private engine, dockerd or containerd alike: its
//! directory, its launch in fresh namespaces, the wait until it answers, and
//! everything it leaves once killed.
//!
//! The engine runs as pid 1 of a new pid namespace, with its own mount and
//! network namespaces and a private tmpfs on `/run`, under a short directory
//! `/tmp/<prefix>XXXXXX` whose name is the engine's scope. Killing it makes
//! the kernel end every process of the namespace (shims, containers); the
//! namespaces take their mounts, sockets and interfaces with them. What
//! outlives them, the cgroup tree `/<scope>` the engine was told to put its
//! containers in and the directory, is removed on drop. The engine files
//! (`docker/daemon.rs`, `containerd/daemon.rs`) say only how to launch and
//! ask their engine.

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const START_TIMEOUT: Duration = Duration::from_secs(30);
const STOP_TIMEOUT: Duration = Duration::from_secs(10);
/// Both engines answer within 0.1 to 0.7 s: polling finely keeps start-up,
/// paid by every test, short.
const POLL: Duration = Duration::from_millis(20);

/// Where Debian's containernetworking-plugins puts the CNI plugins.
pub const CNI_BIN_DIR: &str = "/usr/lib/cni";

/// The pod network: a bridge with its own addresses, in the engine's
/// private network namespace, so nothing of it is seen outside. No
/// masquerading (no iptables), and the address book under the directory.
pub fn cni_conflist(dir: &Path) -> String {
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

/// A private engine's directory and process, torn down on drop (also when
/// start-up fails half-way).
pub struct EngineProcess {
    /// `dockerd` or `containerd`: names the log and the messages.
    name: &'static str,
    dir: PathBuf,
    scope: String,
    /// `unshare`, whose only child is the engine; none before the first
    /// launch.
    unshare: Option<Child>,
    /// The engine, the init of its pid namespace, once it has answered.
    init_pid: Option<u32>,
    /// File systems of the test's own mounted in the directory, unmounted
    /// before it is removed.
    mounts: Vec<PathBuf>,
}

impl EngineProcess {
    /// A fresh directory `/tmp/<prefix>XXXXXX` for engine `name`, nothing
    /// running yet. Short, because unix socket paths are.
    pub fn new(name: &'static str, prefix: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/tmp")
            .unwrap_or_else(|e| panic!("create a directory for the private {name}: {e}"))
            .keep();
        let scope = dir
            .file_name()
            .expect("temp dir has a name")
            .to_string_lossy()
            .into_owned();
        Self {
            name,
            dir,
            scope,
            unshare: None,
            init_pid: None,
            mounts: Vec::new(),
        }
    }

    /// Mounts a fresh ext4 file system of `megabytes` (a loop-mounted file
    /// beside it) at `name` in the directory, before the engine starts:
    /// a disk the test can fill.
    pub fn mount_small_fs(&mut self, name: &str, megabytes: u64) {
        let image = self.path(&format!("{name}.ext4"));
        let mountpoint = self.path(name);
        fs::File::create(&image)
            .and_then(|f| f.set_len(megabytes << 20))
            .expect("make the file system's file");
        fs::create_dir_all(&mountpoint).expect("make the mount point");
        super::run_ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image));
        super::run_ok(
            Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&mountpoint),
        );
        self.mounts.push(mountpoint);
    }

    /// The engine's directory: data, state, socket and log.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `file` in the engine's directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// The engine's pid, once it has answered: its network namespace is
    /// the node's network as the pods see it.
    pub fn pid(&self) -> Option<u32> {
        self.init_pid
    }

    /// The directory's name: the `safeprune.test` label of everything the
    /// fixtures make, and the cgroup parent of every container.
    pub fn scope(&self) -> &str {
        &self.scope
    }

    /// Runs `script` under `sh -c` as pid 1 of fresh pid, mount and network
    /// namespaces, once a private tmpfs is on `/run`; `script` ends by
    /// exec-ing the engine, and gets `args` as `$1`... Output goes to
    /// `<name>.log` in the directory, appended to across restarts. An
    /// earlier process is stopped first: two engines on one directory
    /// would fight over it.
    pub fn launch<I, S>(&mut self, script: &str, args: I)
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.stop();
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(&format!("{}.log", self.name)))
            .unwrap_or_else(|e| panic!("open {}.log: {e}", self.name));
        let log_err = log.try_clone().expect("clone the log handle");
        // A tmpfs on /run keeps what engines put there at fixed paths
        // (containerd's shim sockets in /run/containerd/s, /run/docker)
        // private. `-n`: no /run/mount/utab entry on the host.
        let script = format!("mount -n -t tmpfs -o mode=755 sp-run /run && {script}");
        let unshare = Command::new("unshare")
            // The engine becomes pid 1 of a new pid namespace: when it dies
            // the kernel kills all in it. Private mounts and network: nothing
            // it mounts or creates (overlays, shm, netns, bridges) reaches
            // the host. --kill-child: if unshare dies, the engine dies too.
            .args(["--pid", "--fork", "--kill-child", "--mount", "--mount-proc"])
            .args(["--net", "--propagation", "private"])
            .args(["sh", "-c", &script, self.name])
            .args(args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run unshare (util-linux) to start {}: {e}",
                    self.name
                )
            });
        self.unshare = Some(unshare);
    }

    /// Waits until `probe` answers, and returns its answer.
    ///
    /// # Panics
    /// When the engine exits first or `probe` has not answered within 30 s;
    /// the message holds the tail of the engine's log.
    pub async fn await_answer<T>(&mut self, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
        let begun = Instant::now();
        let answer = loop {
            if let Some(answer) = probe().await {
                break answer;
            }
            if let Some(status) = self.exit_status() {
                panic!(
                    "private {} exited ({status}) before answering; log tail:\n{}",
                    self.name,
                    self.log_tail()
                );
            }
            assert!(
                begun.elapsed() < START_TIMEOUT,
                "private {} did not answer within {START_TIMEOUT:?}; log tail:\n{}",
                self.name,
                self.log_tail()
            );
            tokio::time::sleep(POLL).await;
        };
        // Only now: before, unshare may not have forked it yet.
        self.init_pid = self.unshare.as_ref().and_then(|u| child_of(u.id()));
        eprintln!(
            "private {} in {} answered after {} ms",
            self.name,
            self.dir.display(),
            begun.elapsed().as_millis()
        );
        answer
    }

    /// Kills the engine, as a crash would, and unmounts what it left under
    /// the directory; the directory stays, for a restart on the same data.
    pub fn stop(&mut self) {
        self.kill();
        unmount_under(&self.dir, &self.mounts);
    }

    /// Freezes the engine (SIGSTOP), as a hung engine is: its socket still
    /// accepts and nothing answers, until [`Self::thaw`]. The kernel lets
    /// SIGSTOP and SIGCONT through to a pid namespace's init from outside.
    pub fn freeze(&self) {
        self.signal_engine(Signal::SIGSTOP);
    }

    /// Lets a frozen engine go on (SIGCONT).
    pub fn thaw(&self) {
        self.signal_engine(Signal::SIGCONT);
    }

    fn signal_engine(&self, signal: Signal) {
        let pid = self
            .init_pid
            .and_then(|pid| i32::try_from(pid).ok())
            .unwrap_or_else(|| panic!("the private {} has not answered yet", self.name));
        kill(Pid::from_raw(pid), signal)
            .unwrap_or_else(|e| panic!("{signal} to the private {}: {e}", self.name));
    }

    /// How the launched process ended, if it has.
    fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.unshare.as_mut()?.try_wait().ok().flatten()
    }

    /// Kills the engine and waits until its pid namespace is empty.
    fn kill(&mut self) {
        let init_pid = self.init_pid.take();
        let Some(unshare) = self.unshare.as_mut() else {
            return;
        };
        if matches!(unshare.try_wait(), Ok(Some(_))) {
            return;
        }
        // SIGKILL to the engine, the namespace's init: the kernel kills the
        // rest and reaps them before the engine's own exit completes, so
        // unshare's wait returns only when the namespace is empty. While
        // unshare lives, the engine's pid cannot be reused. If the pid is
        // unknown, kill unshare and let --kill-child pass the SIGKILL on.
        let killed = init_pid
            .and_then(|pid| i32::try_from(pid).ok())
            .is_some_and(|pid| kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok());
        if !killed {
            let _ = unshare.kill();
        }
        let begun = Instant::now();
        while begun.elapsed() < STOP_TIMEOUT {
            if matches!(unshare.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(POLL);
        }
        let _ = unshare.kill();
        let _ = unshare.wait();
    }

    fn log_tail(&self) -> String {
        log_tail(&self.path(&format!("{}.log", self.name)))
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        self.stop();
        for mountpoint in &self.mounts {
            let _ = Command::new("umount").arg("-l").arg(mountpoint).status();
        }
        remove_cgroups(&self.scope);
        if let Err(e) = retry(|| fs::remove_dir_all(&self.dir)) {
            eprintln!("cannot remove {}: {e}", self.dir.display());
        }
    }
}

/// The first child of process `pid` (unshare's only child is the engine).
fn child_of(pid: u32) -> Option<u32> {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The last 30 lines of an engine's log, for a failure message.
fn log_tail(path: &Path) -> String {
    let Ok(log) = fs::File::open(path) else {
        return "(no log)".to_owned();
    };
    let lines: Vec<String> = BufReader::new(log).lines().map_while(Result::ok).collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// Unmounts anything mounted under `dir`, deepest first. With private
/// namespaces there should be nothing; this is the guard if there is.
fn unmount_under(dir: &Path, keep: &[PathBuf]) {
    let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let mut points: Vec<&str> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| Path::new(point).starts_with(dir))
        .filter(|point| !keep.iter().any(|k| k == Path::new(point)))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for point in points {
        eprintln!("unmounting leftover {point}");
        let _ = Command::new("umount").args(["-l", point]).status();
    }
}

/// Removes the cgroup tree `/<scope>` from every hierarchy (v1: one per
/// controller; v2: the unified root): a killed engine leaves its
/// containers' cgroups behind.
fn remove_cgroups(scope: &str) {
    let root = Path::new("/sys/fs/cgroup");
    let mut trees = vec![root.join(scope)];
    if let Ok(hierarchies) = fs::read_dir(root) {
        trees.extend(hierarchies.flatten().map(|h| h.path().join(scope)));
    }
    for tree in trees.iter().filter(|t| t.is_dir()) {
        if let Err(e) = retry(|| remove_cgroup_tree(tree)) {
            eprintln!("cannot remove cgroup {}: {e}", tree.display());
        }
    }
}

/// cgroup directories go with rmdir, children first; their files cannot be
/// removed.
fn remove_cgroup_tree(dir: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&entry.path())?;
        }
    }
    fs::remove_dir(dir)
}

/// Retries a teardown step briefly: the last processes of a killed
/// namespace may still be letting go.
fn retry(mut step: impl FnMut() -> std::io::Result<()>) -> std::io::Result<()> {
    let mut last = Ok(());
    for _ in 0..50 {
        last = step();
        match &last {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    last
}
