//! Hostile policies and bad command lines: each one is exit 2
//! with a message naming the file and, where the fault has one, its line
//! and column; no panic; and no engine contacted.
//!
//! "No engine contacted" is measured: each command runs in a private mount
//! namespace whose `/run` is a scratch directory, where the default Docker
//! and containerd sockets are listeners of this test. Nothing may connect
//! to them; a control run with a valid policy shows that a run would.

#[path = "hostile/cases.rs"]
mod cases;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The default engine sockets, as listeners nobody answers, under a
/// directory that stands for `/run` (and so `/var/run`).
struct FakeRun {
    dir: tempfile::TempDir,
    listeners: Vec<UnixListener>,
}

impl FakeRun {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("containerd")).unwrap();
        let listeners = ["docker.sock", "containerd/containerd.sock"]
            .iter()
            .map(|socket| {
                let listener = UnixListener::bind(dir.path().join(socket)).unwrap();
                listener.set_nonblocking(true).unwrap();
                listener
            })
            .collect();
        Self { dir, listeners }
    }

    /// safeprune with `args`, seeing this directory as `/run`.
    fn command<I, S>(&self, args: I) -> Command
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        let mut command = Command::new("unshare");
        // A policy wrongly taken would wait on the fake engine forever:
        // `timeout` turns that into a failure (exit 124), not a hang.
        command
            .args(["--mount", "--propagation", "private", "--"])
            .args(["timeout", "-k", "5", "60", "sh", "-c"])
            .arg(r#"mount --bind "$0" /run && exec "$@""#)
            .arg(self.dir.path())
            .arg(env!("CARGO_BIN_EXE_safeprune"))
            .args(args)
            .env_remove("SAFEPRUNE_CONFIG")
            .stdin(Stdio::null());
        command
    }

    fn run<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.command(args).output().unwrap()
    }

    /// Which of the sockets someone connected to.
    fn contacted(&self) -> Vec<PathBuf> {
        self.listeners
            .iter()
            .filter(|l| l.accept().is_ok())
            .map(|l| l.local_addr().unwrap().as_pathname().unwrap().to_owned())
            .collect()
    }
}

/// Checks a refusal: exit 2, no panic, nothing on stdout, the message.
fn assert_refused(what: &str, out: &Output, says: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(out.stdout.is_empty(), "{what}: stdout {:?}", out.stdout);
    for piece in says {
        assert!(err.contains(piece), "{what}: expected {piece:?} in {err}");
    }
}

#[test]
fn every_hostile_policy_is_refused_with_its_place_and_contacts_no_engine() {
    let scratch = tempfile::tempdir().unwrap();
    let run = FakeRun::new();
    let cases = cases::cases(scratch.path());
    assert!(cases.len() > 60, "the corpus lost cases: {}", cases.len());
    for case in &cases {
        let place = case.at.map(|(l, c)| format!("at line {l} column {c}"));
        let path = case.path.display().to_string();
        let mut says = vec![path.as_str(), case.says];
        says.extend(place.as_deref());
        // `check` says why; `plan` and a real `run` must stop at the
        // policy too, before any engine.
        for command in [&["check"][..], &["plan"], &["run"], &["daemon"]] {
            let out = run.run(["--config", &path].iter().chain(command));
            assert_refused(&format!("{} {command:?}", case.name), &out, &says);
        }
    }
    assert_eq!(run.contacted(), Vec::<PathBuf>::new());
}

#[test]
fn bad_command_lines_are_usage_errors_that_contact_no_engine() {
    let run = FakeRun::new();
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/policy.yaml");
    let good = good.to_str().unwrap();
    let not_utf8 = OsStr::from_bytes(b"caf\xe9");
    let lines: Vec<Vec<&OsStr>> = [
        &[][..],
        &["prune"],
        &["plan", "--output", "xml"],
        &["plan", "--output"],
        &["plan", "--dry-run"],
        &["run", "--max-deletions", "-1"],
        &["run", "--max-deletions", "lots"],
        &["run", "--max-deletions", "99999999999999999999999"],
        &["run", "--dry-run", "--dry-run"],
        &["--log-format", "yaml", "plan"],
        &["--config"],
        &["--config", "", "plan"],
        &["-q", "-v", "plan"],
        &["explain"],
        &["explain", ""],
        &["explain", "a", "b"],
        &["daemon", "--output", "json"],
        &["check", "extra"],
    ]
    .iter()
    .map(|line| {
        std::iter::once(OsStr::new("--config"))
            .chain(std::iter::once(OsStr::new(good)))
            .chain(line.iter().map(OsStr::new))
            .collect()
    })
    .chain([vec![
        OsStr::new("--config"),
        OsStr::new(good),
        OsStr::new("explain"),
        not_utf8,
    ]])
    .collect();
    for line in &lines {
        let out = run.run(line);
        assert_refused(&format!("{line:?}"), &out, &["error:"]);
    }
    assert_eq!(run.contacted(), Vec::<PathBuf>::new());
}

/// The harness can see a contact: a valid policy's `plan` connects to the
/// default Docker socket (and waits there for an answer that never comes).
#[test]
fn the_fake_run_sees_a_run_that_contacts_an_engine() {
    let run = FakeRun::new();
    let good = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/policy.yaml");
    let mut child = run
        .command([OsStr::new("--config"), good.as_os_str(), OsStr::new("plan")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut contacted = Vec::new();
    while contacted.is_empty() && started.elapsed() < Duration::from_secs(60) {
        contacted = run.contacted();
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // `kind: auto` tries Docker, and may try containerd too.
    assert!(
        contacted.contains(&run.dir.path().join("docker.sock")),
        "{contacted:?}"
    );
}

/// Running as root, a policy someone else could change is refused by every
/// command before any engine, naming the path and its mode or owner.
#[test]
fn a_policy_others_could_change_is_refused_as_root() {
    use std::os::unix::fs::PermissionsExt;
    let run = FakeRun::new();
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    let policy = shared.join("policy.yaml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/policy.yaml"),
        &policy,
    )
    .unwrap();
    let mode = |path: &Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    mode(dir.path(), 0o755);
    mode(&shared, 0o775);
    mode(&policy, 0o644);
    let path = policy.to_str().unwrap();
    let why = format!(
        "refusing policy {path}: the directory {} is writable by group (mode 0775)",
        shared.display()
    );
    for command in ["check", "plan", "run", "daemon"] {
        let out = run.run(["--config", path, command]);
        assert_refused(command, &out, &[&why, "chmod go-w"]);
    }
    mode(&shared, 0o755);
    std::os::unix::fs::chown(&policy, Some(1000), None).unwrap();
    let out = run.run(["--config", path, "check"]);
    assert_refused("owner", &out, &["is owned by uid 1000, not root"]);
    std::os::unix::fs::chown(&policy, Some(0), None).unwrap();
    assert!(
        run.run(["--config", path, "check", "--offline"])
            .status
            .success()
    );
    assert_eq!(run.contacted(), Vec::<PathBuf>::new());
}

/// A `ConfigMap` volume as kubelet lays it out has a 0777 directory: mounted
/// read-only, as the `DaemonSet` mounts it, nobody can write it, and the
/// policy is taken; the same files writable are refused.
#[test]
fn a_configmap_mounted_read_only_is_trusted_and_writable_is_not() {
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let volume = dir.path().join("volume");
    let dated = "..2026_11_23_05_00_00.000000001";
    std::fs::create_dir_all(volume.join(dated)).unwrap();
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("config/policy.yaml"),
        volume.join(dated).join("policy.yaml"),
    )
    .unwrap();
    symlink(dated, volume.join("..data")).unwrap();
    symlink("..data/policy.yaml", volume.join("policy.yaml")).unwrap();
    std::fs::set_permissions(&volume, std::fs::Permissions::from_mode(0o777)).unwrap();
    let mount = dir.path().join("etc-safeprune");
    std::fs::create_dir(&mount).unwrap();
    let check = |read_only: bool| {
        let remount = if read_only {
            r#" && mount -o remount,bind,ro "$1""#
        } else {
            ""
        };
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
            .arg(format!(
                r#"mount --bind "$0" "$1"{remount} && exec "$2" --config "$1/policy.yaml" check --offline"#
            ))
            .arg(&volume)
            .arg(&mount)
            .arg(env!("CARGO_BIN_EXE_safeprune"))
            .output()
            .unwrap()
    };
    let out = check(true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let out = check(false);
    assert_refused(
        "writable ConfigMap",
        &out,
        &["is writable by group and others (mode 0777)"],
    );
}

/// `--compare` with a command of another runtime than the policy
/// names is a usage error before anything is contacted, and writes no
/// `--save` file.
#[test]
fn a_comparison_with_the_other_runtimes_command_contacts_no_engine() {
    let run = FakeRun::new();
    let scratch = tempfile::tempdir().unwrap();
    for (kind, command, other) in [
        ("containerd", "docker-prune", "docker"),
        ("containerd", "docker-prune-volumes", "docker"),
        ("docker", "crictl-prune", "containerd or cri"),
        ("docker", "nerdctl-prune", "containerd"),
        ("cri", "nerdctl-prune", "containerd"),
        ("cri", "docker-prune", "docker"),
    ] {
        let policy = scratch.path().join(format!("{kind}.yaml"));
        std::fs::write(&policy, format!("runtime: {{kind: {kind}}}\n")).unwrap();
        let saved = scratch.path().join(format!("{command}.plan.json"));
        let out = run.run([
            OsStr::new("--config"),
            policy.as_os_str(),
            OsStr::new("plan"),
            OsStr::new("--compare"),
            OsStr::new(command),
            OsStr::new("--save"),
            saved.as_os_str(),
        ]);
        assert_refused(
            &format!("{kind} --compare {command}"),
            &out,
            &[&format!("models a {other} node; this one runs {kind}")],
        );
        assert!(!saved.exists(), "{command}: the plan was saved");
    }
    assert_eq!(run.contacted(), Vec::<PathBuf>::new());
}
