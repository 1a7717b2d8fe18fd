//! `safety.pace`, the stall budget, on private engines. Paced by the
//! node's pressure (`workloads_cgroup: node`) under real I/O: writers that
//! sync every 4 KiB on a loop-mounted ext4 beside the run hold it over the
//! ceiling, and a paced run on a private Docker and a private containerd
//! waits, goes one removal at a time, still removes everything, and says
//! so in its report, table and metrics. The default policy paces by
//! kubelet's pods' cgroup where it finds one, runs unpaced and says so
//! where it finds none, and `run --no-pace` runs unpaced whatever the
//! policy. A node that shows no PSI runs unpaced under `node`. The
//! workloads may be a cgroup of the test's own with a writer in it: the
//! run measures the writer's own stall, waits for the budget, and is
//! slower for it than an unpaced run. These tests run alone
//! (`.config/nextest.toml`): the pressure they make would slow every test
//! beside them.

use crate::util;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use util::containerd::PrivateContainerd;
use util::docker::PrivateDockerd;
use util::node::{Cli, Runtime};

/// The ceiling the paced runs are given, percent of PSI `some`.
const THRESHOLD: f64 = 15.0;

/// How long the paced runs may wait in all.
const MAX_DELAY_SECS: u32 = 6;

fn pace_policy(extra: &str) -> String {
    format!(
        "containers: {{ min_age: \"0\" }}\nimages: {{ enabled: false }}\n\
         safety: {{ pace: {{ added_io_pressure_percent: 0.1, io_pressure_percent: {THRESHOLD}, \
         max_delay: {MAX_DELAY_SECS}s, workloads_cgroup: node }} }}\n{extra}"
    )
}

/// `some avg10` of `/proc/pressure/io` now.
fn io_pressure() -> f64 {
    let text = std::fs::read_to_string("/proc/pressure/io").expect("this machine shows PSI");
    safeprune::pace::some_avg10(&text).expect("a some line")
}

/// Writers beside the run: each writes 800 KiB 4 KiB at a time with
/// `O_DSYNC` on an ext4 of its own over a loop device, again and again,
/// until dropped (then the file system is unmounted).
struct IoWriters {
    dir: tempfile::TempDir,
    mountpoint: PathBuf,
    writers: Vec<Child>,
}

impl IoWriters {
    /// Starts `n` writers and waits (up to 60 s) until the pressure is
    /// above `above`.
    fn start(n: usize, above: f64) -> Self {
        // On the disk, not a tmpfs: a loop device over memory makes no I/O.
        let dir = tempfile::Builder::new()
            .prefix("sp-pace-")
            .tempdir_in("/var/tmp")
            .expect("a directory in /var/tmp");
        let image = dir.path().join("fs.ext4");
        let mountpoint = dir.path().join("mnt");
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(256 << 20))
            .unwrap();
        std::fs::create_dir(&mountpoint).unwrap();
        util::run_ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&image));
        util::run_ok(
            Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&mountpoint),
        );
        let writers = (0..n)
            .map(|i| {
                Command::new("sh")
                    .args([
                        "-c",
                        "while :; do dd if=/dev/zero of=\"$0\" bs=4k count=200 oflag=dsync 2>/dev/null; done",
                    ])
                    .arg(mountpoint.join(format!("w{i}")))
                    .stdout(Stdio::null())
                    .process_group(0)
                    .spawn()
                    .expect("start a writer")
            })
            .collect();
        let writers = Self {
            dir,
            mountpoint,
            writers,
        };
        let began = Instant::now();
        loop {
            let now = io_pressure();
            if now > above {
                eprintln!(
                    "I/O pressure {now:.1}% after {:?} of writing",
                    began.elapsed()
                );
                break;
            }
            assert!(
                began.elapsed() < Duration::from_secs(60),
                "the writers raised the I/O pressure to {now:.1}% only, not above {above}%"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
        writers
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for IoWriters {
    fn drop(&mut self) {
        for w in &mut self.writers {
            let pgid = nix::unistd::Pid::from_raw(-i32::try_from(w.id()).unwrap());
            let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = w.wait();
        }
        // A killed writer's dd may still hold its file for a moment: a
        // lazy unmount lets the mount go with it, so that the directory
        // is removed and no mount is left behind.
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.mountpoint)
            .status();
        eprintln!("writers in {} stopped", self.path().display());
    }
}

/// Runs `cli` under the writers' pressure: the report, the table's run and
/// the wall time. Asserts what a paced run under pressure must show.
fn assert_paced_under_pressure(cli: &Cli, planned: usize) {
    let writers = IoWriters::start(2, THRESHOLD + 5.0);
    let began = Instant::now();
    let out = cli.run(&["run"]);
    let took = began.elapsed();
    drop(writers);
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}\n{table}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(cli.path("report.json")).unwrap()).unwrap();
    let pace = &report["pace"];
    eprintln!("paced run in {took:?}: {pace}");
    assert_eq!(pace["source"], "/proc/pressure/io", "{pace}");
    assert_eq!(pace["signal"], "node", "{pace}");
    assert_eq!(pace["workloads_cgroup"], "node", "{pace}");
    assert_eq!(pace["io_pressure_percent"], THRESHOLD, "{pace}");
    assert_eq!(pace["max_delay_seconds"], MAX_DELAY_SECS, "{pace}");
    let paced = pace["paced_seconds"].as_f64().unwrap();
    // Held by the ceiling: it waited at least a few windows, at most
    // max_delay (and a little for the clock), and the run took at least
    // that long.
    assert!(paced >= 1.9, "{pace}");
    assert!(paced <= f64::from(MAX_DELAY_SECS) + 0.5, "{pace}");
    assert!(took.as_secs_f64() >= paced, "{took:?}: {pace}");
    assert!(
        pace["max_io_pressure_percent"].as_f64().unwrap() > THRESHOLD,
        "{pace}"
    );
    assert_eq!(pace["lowest_concurrency"], 1, "{pace}");
    // Every removal still went: pacing decides when, not whether.
    assert_eq!(report["summary"]["skipped"], 0, "{report}");
    assert_eq!(report["summary"]["failed"], 0, "{report}");
    assert_eq!(report["outcomes"].as_array().unwrap().len(), planned);
    assert!(
        table.contains("  paced: by the node's I/O stall: baseline ")
            && table.contains(&format!("(target +0.1%, ceiling {THRESHOLD}%), waited ")),
        "{table}"
    );
    let metrics = std::fs::read_to_string(cli.path("safeprune.prom")).unwrap();
    let line = metrics
        .lines()
        .find_map(|l| l.strip_prefix("safeprune_last_run_paced_seconds "))
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(
        (line.parse::<f64>().unwrap() - paced).abs() < 1e-9,
        "{metrics}"
    );
}

/// A private dockerd with `n` containers that never ran, of one image, and
/// a safeprune paced by `pace_policy` at it.
async fn docker_with_containers(n: usize) -> (PrivateDockerd, Cli) {
    let engine = PrivateDockerd::start().await;
    let image = engine.import_busybox_image("base:1", None).await;
    for i in 0..n {
        engine
            .create_container(&format!("c{i}"), &image, &[], &["true"])
            .await;
    }
    let cli = Cli::new(&Runtime::Docker(engine.endpoint()), &pace_policy(""));
    (engine, cli)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_docker_a_paced_run_under_io_pressure_waits_and_says_so() {
    let (_engine, cli) = docker_with_containers(8).await;
    assert_paced_under_pressure(&cli, 8);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_containerd_a_paced_run_under_io_pressure_waits_and_says_so() {
    let engine = PrivateContainerd::start().await;
    let namespace = "pace";
    let image = "docker.io/library/base:1";
    engine.import_busybox_image(namespace, image);
    for i in 0..8 {
        engine.create_native(namespace, &format!("c{i}"), image);
    }
    let cli = Cli::new(
        &Runtime::Containerd(&engine.endpoint(), &[namespace]),
        &pace_policy(""),
    );
    assert_paced_under_pressure(&cli, 8);
    assert_eq!(engine.container_ids(namespace), Vec::<String>::new());
}

/// Paced by the node's pressure (`workloads_cgroup: node`), with
/// `/proc/pressure` and the cgroup file systems hidden (empty tmpfs over
/// them, in a mount namespace of the run's own), the run removes as usual,
/// unpaced, and says why: a warning naming what it tried, `source` null,
/// and the table's line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_without_psi_runs_unpaced_and_says_so() {
    let (_engine, cli) = docker_with_containers(3).await;
    let out = cli.run_unshared(
        "mount -t tmpfs sp-nopsi /proc/pressure && mount -t tmpfs sp-nocg /sys/fs/cgroup || exit 99",
        "",
        &["run"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.matches("this node shows no I/O pressure (PSI): removals are not paced")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("/proc/pressure/io: No such file"), "{err}");
    assert!(
        table.contains("  paced: no, the node shows no I/O pressure (PSI)"),
        "{table}"
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(cli.path("report.json")).unwrap()).unwrap();
    assert_eq!(report["pace"]["source"], Value::Null, "{report}");
    assert_eq!(report["pace"]["signal"], Value::Null, "{report}");
    assert_eq!(report["pace"]["workloads_cgroup"], "node", "{report}");
    assert_eq!(report["pace"]["paced_seconds"], 0.0, "{report}");
    assert_eq!(report["pace"]["readings"], 0, "{report}");
    assert_eq!(report["summary"]["delete"]["container"], 3);
    assert_eq!(report["outcomes"].as_array().unwrap().len(), 3);
    assert!(
        report["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["result"] == "deleted"),
        "{report}"
    );
}

/// A static `io.pressure` (and `cpu.pressure`) for a cgroup directory of
/// the test's own, `dir`, over an empty `/sys/fs/cgroup`, in a mount
/// namespace of the run's own: `total` never moves, so the workloads stall
/// 0% and the run is not held.
fn pods_cgroup_setup(dir: &str) -> String {
    format!(
        "mount -t tmpfs sp-cg /sys/fs/cgroup && mkdir -p /sys/fs/cgroup/{dir} && for f in io cpu; \
         do printf 'some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\\nfull avg10=0.00 \
         avg60=0.00 avg300=0.00 total=0\\n' >/sys/fs/cgroup/{dir}/$f.pressure; done || exit 99"
    )
}

/// A private dockerd with 3 containers that never ran, and a safeprune on
/// the default pace (`safety: { pace: {} }`: the built-in default's).
async fn default_paced() -> (PrivateDockerd, Cli) {
    let (engine, cli) = docker_with_containers(3).await;
    cli.rewrite(
        &Runtime::Docker(engine.endpoint()),
        "containers: { min_age: \"0\" }\nimages: { enabled: false }\nsafety: { pace: {} }\n",
    );
    (engine, cli)
}

/// The JSON report of `cli`'s last run.
fn last_report(cli: &Cli) -> Value {
    serde_json::from_slice(&std::fs::read(cli.path("report.json")).unwrap()).unwrap()
}

/// The default policy paces by kubelet's pods' cgroup where it finds one
/// (`kubepods.slice` under `/sys/fs/cgroup`, a directory of the test's own
/// here), at its default target and ceiling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_paces_by_the_pods_cgroup_where_found() {
    let (_engine, cli) = default_paced().await;
    let out = cli.run_unshared(&pods_cgroup_setup("kubepods.slice"), "", &["-v", "run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let report = last_report(&cli);
    let pace = &report["pace"];
    assert_eq!(pace["signal"], "workloads", "{pace}");
    assert_eq!(pace["workloads_cgroup"], "auto", "{pace}");
    assert_eq!(
        pace["source"], "/sys/fs/cgroup/kubepods.slice/io.pressure",
        "{pace}"
    );
    assert_eq!(
        pace["cpu_source"], "/sys/fs/cgroup/kubepods.slice/cpu.pressure",
        "{pace}"
    );
    assert_eq!(pace["added_io_pressure_percent"], 0.1, "{pace}");
    assert_eq!(pace["io_pressure_percent"], 10.0, "{pace}");
    assert_eq!(pace["baseline_io_pressure_percent"], 0.0, "{pace}");
    assert!(!err.contains("no pods' cgroup found"), "{err}");
    assert!(
        table.contains(
            "  paced: by the workloads' I/O and CPU stall: baseline 0.00%, removals added 0.0s \
             of stall (target +0.1%, ceiling 10%), waited 0.0s"
        ),
        "{table}"
    );
    assert_eq!(report["summary"]["delete"]["container"], 3, "{report}");
}

/// Where the default policy finds no pods' cgroup (a plain Docker host)
/// it runs unpaced and says so: once in its log, with what it tried, at
/// `info` (no fault: a cron job's mail stays empty), in its table and in
/// its report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_without_a_pods_cgroup_runs_unpaced_and_says_so() {
    let (_engine, cli) = default_paced().await;
    let hidden = "mount -t tmpfs sp-nocg /sys/fs/cgroup || exit 99";
    let out = cli.run_unshared(hidden, "", &["-v", "run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.matches(
            "safety.pace: no pods' cgroup found (tried \
             /sys/fs/cgroup/kubepods.slice/io.pressure: No such file"
        )
        .count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("): removals are not paced (workloads_cgroup: auto)"),
        "{err}"
    );
    assert!(
        table.contains("  paced: no, no pods' cgroup found (workloads_cgroup: auto)"),
        "{table}"
    );
    let report = last_report(&cli);
    assert_eq!(report["pace"]["source"], Value::Null, "{report}");
    assert_eq!(report["pace"]["signal"], Value::Null, "{report}");
    assert_eq!(report["pace"]["workloads_cgroup"], "auto", "{report}");
    assert_eq!(report["summary"]["delete"]["container"], 3, "{report}");
    // Without -v, nothing of it on stderr.
    let out = cli.run_unshared(hidden, "", &["run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("pods' cgroup"), "{err}");
}

/// `run --no-pace` where the pods' cgroup is there: not paced, said once,
/// and no `pace` in the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_no_pace_runs_unpaced_whatever_the_policy() {
    let (_engine, cli) = default_paced().await;
    let out = cli.run_unshared(
        &pods_cgroup_setup("kubepods.slice"),
        "",
        &["run", "--no-pace"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(
        err.matches("safety.pace: off for this run (--no-pace)")
            .count(),
        1,
        "{err}"
    );
    assert!(!table.contains("paced:"), "{table}");
    let report = last_report(&cli);
    assert_eq!(report["pace"], Value::Null, "{report}");
    assert_eq!(report["summary"]["delete"]["container"], 3, "{report}");
}

/// A policy written for the absolute threshold (`{io_pressure_percent:
/// 10, max_delay: 10m}`, as documented before the stall budget) keeps
/// working: the ceiling, with the budget at its default target, which
/// `check` and every run say once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_written_for_the_threshold_is_the_budgets_ceiling_and_says_so() {
    let (engine, cli) = docker_with_containers(2).await;
    cli.rewrite(
        &Runtime::Docker(engine.endpoint()),
        "containers: { min_age: \"0\" }\nimages: { enabled: false }\n\
         safety: { pace: { io_pressure_percent: 10, max_delay: 10m } }\n",
    );
    let said = "safety.pace: io_pressure_percent 10 is now the stall budget's ceiling; the \
                removals may add added_io_pressure_percent 0.1 (the default) to the workloads' \
                own stall: write added_io_pressure_percent to choose it";
    let out = cli.run(&["check", "--offline"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches(said).count(), 1, "{err}");
    let policy = String::from_utf8_lossy(&out.stdout);
    assert!(
        policy.contains("added_io_pressure_percent: 0.1"),
        "{policy}"
    );
    let out = cli.run_unshared(&pods_cgroup_setup("kubepods.slice"), "", &["run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches(said).count(), 1, "{err}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(cli.path("report.json")).unwrap()).unwrap();
    assert_eq!(report["pace"]["io_pressure_percent"], 10.0, "{report}");
    assert_eq!(report["pace"]["added_io_pressure_percent"], 0.1, "{report}");
    assert_eq!(report["summary"]["delete"]["container"], 2, "{report}");
}

/// With the stall budget on, `check` says whose stall a run would read and
/// measures what the workloads stall at now, as a run does before its
/// first removal; a `workloads_cgroup` that cannot be read fails it (a run
/// would remove nothing). The workloads' cgroup is a file of the test's
/// own over `/sys/fs/cgroup`, in a mount namespace of its own, whose
/// `total` a loop there moves by 5 ms every 250 ms: about 2%.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_whose_stall_the_budget_reads_and_what_it_is_now() {
    let (engine, _) = docker_with_containers(0).await;
    let runtime = Runtime::Docker(engine.endpoint());
    let cli = Cli::new(&runtime, &budget_policy("/sys/fs/cgroup/sp-pods", "stop"));
    let out = cli.run_unshared(
        "mount -t tmpfs sp-cg /sys/fs/cgroup && mkdir /sys/fs/cgroup/sp-pods || exit 99\n\
         f=/sys/fs/cgroup/sp-pods/io.pressure; t=1000000\n\
         write() { printf 'some avg10=0.00 avg60=0.00 avg300=0.00 total=%s\\nfull avg10=0.00 \
         avg60=0.00 avg300=0.00 total=0\\n' \"$t\" >\"$f.new\" && mv \"$f.new\" \"$f\"; }\n\
         write; (while :; do sleep 0.25; t=$((t + 5000)); write; done) & loop=$!",
        "kill $loop",
        &["check"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("safeprune: safety.pace: "))
        .unwrap_or_else(|| panic!("no pace line: {err}"));
    let (head, now) = line
        .split_once("; their own now: ")
        .unwrap_or_else(|| panic!("no measure: {line}"));
    assert_eq!(
        head,
        "safeprune: safety.pace: by the workloads' I/O stall (PSI some, \
         /sys/fs/cgroup/sp-pods/io.pressure): removals may add +0.5% above their own, \
         ceiling 15%"
    );
    let (percent, rest) = now.split_once("% ").unwrap();
    let percent: f64 = percent.parse().unwrap();
    // 5 ms in each 250 ms window and a shell's sleep: about 2%.
    assert!((1.0..=2.5).contains(&percent), "{line}");
    assert_eq!(rest, "(mean of 250 ms windows over 3 s, one burst clipped)");

    let missing = Cli::new(
        &runtime,
        &budget_policy("/sys/fs/cgroup/sp-no-such.slice", "stop"),
    );
    let out = missing.run(&["check"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(
            "safeprune: safety.pace.workloads_cgroup: cannot read the workloads' I/O pressure \
             (/sys/fs/cgroup/sp-no-such.slice/io.pressure: No such file or directory (os error \
             2)): a run would remove nothing; fix the path, or write auto to use kubelet's \
             pods' cgroup"
        ) && err.contains("this node is not ready for the policy: safety.pace failed"),
        "{err}"
    );
}

/// A policy with the stall budget on, the workloads' cgroup at
/// `cgroup`, under `on_max_delay`.
fn budget_policy(cgroup: &str, on_max_delay: &str) -> String {
    format!(
        "containers: {{ min_age: \"0\" }}\nimages: {{ enabled: false }}\n\
         safety: {{ pace: {{ io_pressure_percent: {THRESHOLD}, max_delay: {MAX_DELAY_SECS}s, \
         added_io_pressure_percent: 0.5, workloads_cgroup: {cgroup}, \
         on_max_delay: {on_max_delay} }} }}\n"
    )
}

/// With the stall budget on, a `workloads_cgroup` written in the policy
/// that cannot be read fails the run before anything is removed (a path
/// that is wrong is not silently replaced by the node's pressure); one
/// that reads runs paced by it, measuring the workloads' baseline first,
/// and the report and the table say whose stall, the baseline and the
/// added stall. The workloads' cgroup is a file of the test's own (over
/// `/sys/fs/cgroup`, in a mount namespace of the run's own) whose `total`
/// never moves: the workloads stall 0%, and the removals add nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stall_budget_reads_the_configured_workloads_cgroup_or_refuses_the_run() {
    let engine = PrivateDockerd::start().await;
    let image = engine.import_busybox_image("base:1", None).await;
    for i in 0..3 {
        engine
            .create_container(&format!("c{i}"), &image, &[], &["true"])
            .await;
    }
    let runtime = Runtime::Docker(engine.endpoint());
    let missing = Cli::new(
        &runtime,
        &budget_policy("/sys/fs/cgroup/sp-no-such.slice", "stop"),
    );
    let out = missing.run(&["run"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(
            "safety.pace.workloads_cgroup: cannot read the workloads' I/O pressure \
             (/sys/fs/cgroup/sp-no-such.slice/io.pressure: No such file"
        ) && err
            .contains("nothing removed; fix the path, or write auto to use kubelet's pods' cgroup"),
        "{err}"
    );
    let listed = engine.cli().args(["ps", "-aq"]).output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).lines().count(),
        3,
        "nothing removed"
    );

    let cli = Cli::new(&runtime, &budget_policy("/sys/fs/cgroup/sp-pods", "stop"));
    let out = cli.run_unshared(
        "mount -t tmpfs sp-cg /sys/fs/cgroup && mkdir /sys/fs/cgroup/sp-pods && printf \
         'some avg10=0.00 avg60=0.00 avg300=0.00 total=1000\\nfull avg10=0.00 avg60=0.00 \
         avg300=0.00 total=0\\n' >/sys/fs/cgroup/sp-pods/io.pressure || exit 99",
        "",
        &["run"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(!err.contains("no pods' cgroup found"), "{err}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(cli.path("report.json")).unwrap()).unwrap();
    let pace = &report["pace"];
    assert_eq!(pace["signal"], "workloads", "{report}");
    assert_eq!(
        pace["source"], "/sys/fs/cgroup/sp-pods/io.pressure",
        "{report}"
    );
    // Its cgroup shows no cpu.pressure: the I/O stall alone.
    assert_eq!(pace["cpu_source"], Value::Null, "{report}");
    assert_eq!(pace["baseline_io_pressure_percent"], 0.0, "{report}");
    assert_eq!(pace["added_io_pressure_percent"], 0.5, "{report}");
    assert_eq!(pace["added_stall_seconds"], 0.0, "{report}");
    assert_eq!(pace["on_max_delay"], "stop", "{report}");
    assert!(
        pace["objects_per_second"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert_eq!(pace["paced_seconds"], 0.0, "{report}");
    assert_eq!(report["summary"]["delete"]["container"], 3, "{report}");
    assert!(
        report["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["result"] == "deleted"),
        "{report}"
    );
    assert!(
        table.contains(
            "  paced: by the workloads' I/O stall: baseline 0.00%, removals added 0.0s of stall \
             (target +0.5%, ceiling 15%), waited 0.0s"
        ),
        "{table}"
    );
}

/// The cgroup v2 hierarchy's mount point, from `/proc/self/mountinfo`:
/// `/sys/fs/cgroup` on a pure v2 host, `/sys/fs/cgroup/unified` on a
/// hybrid one.
fn cgroup2_mount() -> PathBuf {
    let info = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    info.lines()
        .find_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            if fs.split_whitespace().next() != Some("cgroup2") {
                return None;
            }
            mount.split_whitespace().nth(4).map(PathBuf::from)
        })
        .unwrap_or_else(|| panic!("no cgroup2 mount in /proc/self/mountinfo:\n{info}"))
}

/// A cgroup v2 of the test's own that plays the pods' cgroup, and the
/// writer in it, if any: `python3` writing 4 KiB at a time with `O_DSYNC`,
/// some 50 times a second (a steady workload, not flat out: over a paced
/// run it stalled 0.1-1.8% of the time on I/O and 0.3-0.9% on a CPU,
/// measured), its file in `dir`. On
/// drop the writer is killed and the cgroup removed.
struct WorkloadsCgroup {
    path: PathBuf,
    writer: Option<Child>,
}

impl WorkloadsCgroup {
    /// A fresh, empty cgroup `sp-test-<pid>-<n>` under the v2 mount.
    fn new() -> Self {
        static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = cgroup2_mount().join(format!("sp-test-{}-{n}", std::process::id()));
        std::fs::create_dir(&path)
            .unwrap_or_else(|e| panic!("create the cgroup {}: {e}", path.display()));
        Self { path, writer: None }
    }

    /// The same, with the writer in it, writing in `dir`.
    fn with_writer(dir: &Path) -> Self {
        let mut cgroup = Self::new();
        // One process that moves itself into the cgroup before its first
        // write, so the writes are all the cgroup's. Appending, so that
        // each write allocates and its `O_DSYNC` waits for a journal commit
        // (which the removals' metadata is in), as a database's log does.
        // No fork per write: the budget sums the workloads' I/O and CPU
        // stall, and a shell pipeline forking `sleep` 50 times a second
        // waited for a CPU 1.4-6.2% of the paced run (0.8-1.6% on I/O), by
        // whatever else the machine ran; the 3 s of the baseline caught
        // such a moment (5.3% where the run's windows stood at 4%) and the
        // removals' I/O stall went unseen.
        let writer = Command::new("python3")
            .args([
                "-c",
                "import os, sys, time\n\
                 open(sys.argv[1] + '/cgroup.procs', 'w').write(str(os.getpid()))\n\
                 fd = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_DSYNC)\n\
                 while True:\n    os.write(fd, b' ' * 4096)\n    time.sleep(0.02)\n",
            ])
            .arg(&cgroup.path)
            .arg(dir.join("writer.log"))
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("start the writer");
        let writer_pid = writer.id().to_string();
        cgroup.writer = Some(writer);
        // Let it settle into its pace before anything measures it.
        std::thread::sleep(Duration::from_secs(1));
        let procs = std::fs::read_to_string(cgroup.path.join("cgroup.procs")).unwrap();
        assert!(
            procs.lines().any(|pid| pid == writer_pid),
            "the writer is in {}: {procs:?}",
            cgroup.path.display()
        );
        cgroup
    }

    fn path(&self) -> &str {
        self.path.to_str().expect("a UTF-8 cgroup path")
    }

    /// PSI `some total` of the cgroup's `file` (`io.pressure`,
    /// `cpu.pressure`) now, microseconds.
    fn pressure_total(&self, file: &str) -> u64 {
        let text = std::fs::read_to_string(self.path.join(file)).unwrap();
        text.lines()
            .next()
            .and_then(|l| l.rsplit_once("total="))
            .and_then(|(_, t)| t.trim().parse().ok())
            .unwrap_or_else(|| panic!("{file}: {text}"))
    }
}

impl Drop for WorkloadsCgroup {
    fn drop(&mut self) {
        if let Some(mut writer) = self.writer.take() {
            let pgid = nix::unistd::Pid::from_raw(-i32::try_from(writer.id()).unwrap());
            let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
            let _ = writer.wait();
        }
        // Killed processes leave the cgroup as they exit: a moment.
        for _ in 0..50 {
            match std::fs::remove_dir(&self.path) {
                Err(e) if e.raw_os_error() == Some(nix::libc::EBUSY) => {
                    std::thread::sleep(Duration::from_millis(100));
                }
                _ => return,
            }
        }
        eprintln!("cgroup {} still busy: left behind", self.path.display());
    }
}

/// Containers in the fixture of the unpaced run and of the run paced by
/// the writer: enough that an unpaced run takes a measurable time (more
/// than a second: 32 went in one, and the writer's stall came after the
/// last had started, too late to hold any), few enough that the test
/// stays around a minute.
const WROTE: usize = 64;

/// `n` containers named `<prefix>N` that each ran to their exit after
/// writing 1,000 files of 4,000 bytes into their writable layer, flushed
/// to the disk: removing one unlinks them all, which is I/O (inodes,
/// directory blocks and bitmaps in the journal, written back after). Big
/// files would not do: freeing a few extents is a few blocks of metadata,
/// and the writer did not feel 40 containers of 4 MiB go (measured).
async fn containers_that_wrote(engine: &PrivateDockerd, image: &str, prefix: &str, n: usize) {
    use futures_util::StreamExt as _;
    futures_util::stream::iter(0..n)
        .map(|i| async move {
            let id = engine
                .create_container(
                    &format!("{prefix}{i}"),
                    image,
                    &[],
                    &[
                        "sh",
                        "-c",
                        "mkdir /w && i=0 && while [ $i -lt 1000 ]; do printf '%4000s' '' >/w/$i; \
                         i=$((i+1)); done",
                    ],
                )
                .await;
            engine.start_container(&id).await;
            assert_eq!(engine.wait_container(&id).await, 0, "{prefix}{i} wrote");
        })
        .buffer_unordered(4)
        .collect::<Vec<()>>()
        .await;
    let running = engine.cli().args(["ps", "-q"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&running.stdout), "", "all exited");
    util::run_ok(&mut Command::new("sync"));
}

/// The stall budget's target in the real-pressure test, percent of wall
/// time: small enough that the few milliseconds of stall the removals add
/// to the writer's hold them for seconds.
const TARGET: f64 = 0.05;

/// The stall budget's policy for the workloads' `cgroup`: a small target, a
/// high ceiling, `max_delay` long enough to show the waits and short
/// enough for the test.
fn workloads_policy(cgroup: &str) -> String {
    format!(
        "containers: {{ min_age: \"0\" }}\nimages: {{ enabled: false }}\n\
         safety: {{ pace: {{ io_pressure_percent: 90, max_delay: 6s, \
         added_io_pressure_percent: {TARGET}, workloads_cgroup: {cgroup}, \
         on_max_delay: continue }} }}\n"
    )
}

/// A run of `cli` that must remove all `n` containers of the engine: its
/// wall time, JSON report and table.
fn run_removing_all(cli: &Cli, engine: &PrivateDockerd, n: usize) -> (Duration, Value, String) {
    let began = Instant::now();
    let out = cli.run(&["run"]);
    let took = began.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{err}\n{table}");
    let report: Value =
        serde_json::from_slice(&std::fs::read(cli.path("report.json")).unwrap()).unwrap();
    let outcomes = report["outcomes"].as_array().unwrap();
    assert_eq!(outcomes.len(), n, "{report}");
    assert!(
        outcomes.iter().all(|o| o["result"] == "deleted"),
        "{report}"
    );
    let left = engine.cli().args(["ps", "-aq"]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&left.stdout), "", "all removed");
    (took, report, table)
}

/// The table's `waited N.Ns` of the stall budget's line, seconds.
fn waited_in_table(table: &str) -> f64 {
    let line = table
        .lines()
        .find(|l| l.contains("  paced: by the workloads' I/O and CPU stall: baseline "))
        .unwrap_or_else(|| panic!("no budget line in the table:\n{table}"));
    line.split_once("waited ")
        .and_then(|(_, rest)| rest.split_once('s'))
        .and_then(|(secs, _)| secs.parse().ok())
        .unwrap_or_else(|| panic!("no `waited N.Ns` in {line:?}"))
}

/// The real-pressure test: the workloads are a cgroup of the
/// test's own with a writer in it, syncing small writes on the file
/// system of the engine's data (an ext4 of its own, loop-mounted: the
/// other tests' and builds' writes on the root disk are not in its
/// journal) at a steady pace. Under the stall budget
/// the run measures the writer's own stall (the baseline, above 0), sees
/// the stall above it, waits for the budget, and so removes clearly
/// slower than an unpaced run of an identical fixture under the same
/// writer; and a run paced by a cgroup where nothing stalls waits not at
/// all. Every run removes everything: the budget decides when, not
/// whether. The report and the table say whose stall, the baseline, the
/// added stall and the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_docker_the_workloads_stall_slows_a_paced_run_and_the_report_says_so() {
    // 4 GiB for its inodes (one per 16 KiB): the fixtures make 64,000
    // files at once.
    let engine = PrivateDockerd::start_on_small_fs(4096).await;
    let image = engine.import_busybox_image("base:1", None).await;
    let runtime = Runtime::Docker(engine.endpoint());
    let busy = WorkloadsCgroup::with_writer(&engine.data_root());
    let idle = WorkloadsCgroup::new();

    // Unpaced, under the writer.
    containers_that_wrote(&engine, &image, "unpaced", WROTE).await;
    let unpaced = Cli::new(
        &runtime,
        "containers: { min_age: \"0\" }\nimages: { enabled: false }\n",
    );
    let (unpaced_took, report, _) = run_removing_all(&unpaced, &engine, WROTE);
    assert_eq!(report["pace"], Value::Null, "{report}");

    // Paced by the writer's cgroup.
    containers_that_wrote(&engine, &image, "paced", WROTE).await;
    let paced = Cli::new(&runtime, &workloads_policy(busy.path()));
    // The writer's I/O and CPU stall totals, microseconds.
    let totals = || ["io.pressure", "cpu.pressure"].map(|file| busy.pressure_total(file));
    let before = totals();
    let (paced_took, report, table) = run_removing_all(&paced, &engine, WROTE);
    let after = totals();
    #[expect(clippy::cast_precision_loss, reason = "a few seconds in microseconds")]
    let [io, cpu] = [0, 1].map(|i| (after[i] - before[i]) as f64 / 1e4 / paced_took.as_secs_f64());
    let pace = &report["pace"];
    eprintln!(
        "unpaced {unpaced_took:?}; paced {paced_took:?}, the writer stalled {io:.2}% on I/O and \
         {cpu:.2}% on CPU meanwhile: {pace}"
    );
    assert_eq!(pace["signal"], "workloads", "{pace}");
    assert_eq!(
        pace["source"],
        format!("{}/io.pressure", busy.path()),
        "{pace}"
    );
    // A real cgroup v2 shows its waits for a CPU beside: read too.
    assert_eq!(
        pace["cpu_source"],
        format!("{}/cpu.pressure", busy.path()),
        "{pace}"
    );
    let baseline = pace["baseline_io_pressure_percent"].as_f64().unwrap();
    let added = pace["added_stall_seconds"].as_f64().unwrap();
    let waited = pace["paced_seconds"].as_f64().unwrap();
    let rate = pace["objects_per_second"].as_f64().unwrap();
    // A baseline was measured (the writer's level may be near 0: its
    // stall comes in bursts); more stall while the removals go; the run
    // waited for the budget, within max_delay.
    assert!(baseline >= 0.0, "{pace}");
    assert!(added > 0.0, "{pace}");
    assert!(waited >= 1.0, "{pace}");
    assert!(waited <= 6.5, "{pace}");
    assert_eq!(pace["added_io_pressure_percent"], TARGET, "{pace}");
    assert_eq!(pace["on_max_delay"], "continue", "{pace}");
    assert!(
        (waited_in_table(&table) - waited).abs() <= 0.05 + 1e-9,
        "{table}\n{pace}"
    );
    // The baseline, then (when it was measured again in a rest, or moved)
    // where it ended, then the added stall and the wait.
    let line = table
        .lines()
        .find(|l| l.starts_with("  paced: by the workloads' I/O and CPU stall: "))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.starts_with(&format!(
            "  paced: by the workloads' I/O and CPU stall: baseline {baseline:.2}%"
        )) && line.contains(&format!(
            ", removals added {added:.1}s of stall (target +{TARGET}%, ceiling 90%), waited "
        )),
        "{line}"
    );
    // The run slows: its removals go at most half as fast as the whole of
    // the unpaced run (its start, listing and planning included).
    #[expect(clippy::cast_precision_loss, reason = "a few dozen objects")]
    let unpaced_rate = WROTE as f64 / unpaced_took.as_secs_f64();
    assert!(
        rate <= unpaced_rate / 2.0,
        "paced {rate} objects/s, unpaced at least {unpaced_rate:.2}: {pace}"
    );
    assert!(
        paced_took >= unpaced_took + Duration::from_secs_f64(waited),
        "{pace}"
    );

    // Paced by a cgroup where nothing stalls: no wait, nothing added.
    containers_that_wrote(&engine, &image, "calm", 8).await;
    let calm = Cli::new(&runtime, &workloads_policy(idle.path()));
    let (calm_took, report, table) = run_removing_all(&calm, &engine, 8);
    let pace = &report["pace"];
    eprintln!("paced by an idle cgroup in {calm_took:?}: {pace}");
    assert_eq!(
        pace["source"],
        format!("{}/io.pressure", idle.path()),
        "{pace}"
    );
    assert_eq!(pace["baseline_io_pressure_percent"], 0.0, "{pace}");
    assert_eq!(pace["added_stall_seconds"], 0.0, "{pace}");
    assert_eq!(pace["paced_seconds"], 0.0, "{pace}");
    assert!(waited_in_table(&table) < 0.05, "{table}");
}
