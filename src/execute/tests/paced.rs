//! The executor under pacing, in paused time: a stop during a wait or the
//! baseline, settling between batches, and the stall budget over a pods'
//! cgroup of the test's own ([`Workloads`]) whose stall a model advances.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_stop_ends_a_paced_wait_at_once() {
    // Each removal costs the workloads far more than the budget allows:
    // the run waits long after the first, until the stop.
    let workloads = Workloads::new(10);
    let engine = workloads.engine(node_of_containers(6), Duration::from_secs(2));
    let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
    let shutdown = Shutdown::new();
    let stopper = shutdown.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(20)).await;
        stopper.stop();
    });
    let began = tokio::time::Instant::now();
    let (planned, outcomes) = run_paced(&engine, &mut pacer, &shutdown).await;
    assert!(
        began.elapsed() < Duration::from_millis(20_100),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(outcomes.len(), planned.deletion_count());
    let report = pacer.report().unwrap();
    assert!(report.paced_seconds > 10.0, "{report:?}");
    assert!(
        outcomes
            .iter()
            .any(|o| o.reason == Some(Reason::NotAttempted)),
        "{outcomes:?}"
    );
}

/// The settles of `engine` for containers: how many removals had started
/// at each.
fn container_settles(engine: &MemoryEngine) -> Vec<usize> {
    engine
        .settled
        .lock()
        .unwrap()
        .iter()
        .filter(|(kind, _)| *kind == Kind::Container)
        .map(|(_, started)| *started)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn paced_on_an_engine_that_frees_when_settled_the_collector_runs_between_batches() {
    let workloads = Workloads::new(10);
    let mut engine = workloads.engine(node_of_containers(12), Duration::from_millis(5));
    engine.frees_when_settled = true;
    let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
    let (_, outcomes) = run_paced(&engine, &mut pacer, &Shutdown::new()).await;
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Deleted));
    let settles = container_settles(&engine);
    // The freeing is not left to one collection at the end, where the
    // pacer never sees it: it runs between batches, as the removals go.
    assert!(settles.len() >= 3, "{settles:?}");
    assert!(settles[0] < 12, "{settles:?}");
    assert!(settles.windows(2).all(|w| w[0] < w[1]), "{settles:?}");
    // Every removal is settled in the end, and only once per batch: never
    // two settles with no removal between them.
    assert_eq!(settles.last(), Some(&12), "{settles:?}");
    assert!(pacer.report().unwrap().readings >= settles.len() as u64 - 1);
    // The first goes alone (its cost is not known yet); once learned,
    // removals go in batches, as many as the concurrency (4), that one
    // collection frees.
    assert_eq!(settles[0], 1, "{settles:?}");
    let batches: Vec<usize> = settles.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(batches.iter().all(|&n| n <= 4), "{settles:?}");
    assert!(batches.iter().any(|&n| n > 1), "{settles:?}");
}

#[tokio::test(start_paused = true)]
async fn unpaced_or_where_removals_free_at_once_each_kind_settles_once() {
    // Unpaced on an engine that frees when settled (containerd, no pace).
    let mut collecting = MemoryEngine::new(node_of_containers(12));
    collecting.frees_when_settled = true;
    run(&collecting, &Shutdown::new()).await;
    assert_eq!(container_settles(&collecting), [12]);
    // Paced on one whose removals free at once (Docker, CRI).
    let workloads = Workloads::new(10);
    let freeing = workloads.engine(node_of_containers(12), Duration::from_millis(5));
    let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
    run_paced(&freeing, &mut pacer, &Shutdown::new()).await;
    assert_eq!(container_settles(&freeing), [12]);
}

/// The workloads of a budget test: a pods' cgroup of a node root of the
/// test's own, whose `io.pressure` says `some total` as the test's stall
/// model advances it: the workloads' own stall (`baseline_per_mille` of
/// wall time, written every 50 ms by a task in paused time), and each
/// removal's stall, `per_removal`, added as it reaches the engine.
struct Workloads {
    root: tempfile::TempDir,
    total_us: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The workloads' own stall, per mille of wall time.
    per_mille: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// The writer task writes while this holds.
    writing: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Workloads {
    const CGROUP: &'static str = "/sys/fs/cgroup/pods.slice";

    fn new(baseline_per_mille: u64) -> Self {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join(Self::CGROUP.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap();
        let total_us = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(1_000_000));
        let file = dir.join("io.pressure");
        write_psi(&file, 1_000_000);
        let (total, path) = (std::sync::Arc::clone(&total_us), file.clone());
        let writing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let still = std::sync::Arc::clone(&writing);
        let per_mille = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(baseline_per_mille));
        let rate = std::sync::Arc::clone(&per_mille);
        tokio::spawn(async move {
            // Ticks off the readings' 250 ms grid, so that every window
            // holds as many (a tick on a window's edge falls in one or
            // the other, and the baseline leaves out the highest).
            tokio::time::sleep(Duration::from_millis(25)).await;
            loop {
                if !still.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let step = 50 * rate.load(std::sync::atomic::Ordering::SeqCst);
                let now = total.fetch_add(step, std::sync::atomic::Ordering::SeqCst) + step;
                write_psi(&path, now);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        Self {
            root,
            total_us,
            per_mille,
            writing,
        }
    }

    /// From now on the workloads stall `per_mille` of wall time by
    /// themselves.
    fn stall_at(&self, per_mille: u64) {
        self.per_mille
            .store(per_mille, std::sync::atomic::Ordering::SeqCst);
    }

    fn file(&self) -> std::path::PathBuf {
        self.root
            .path()
            .join(Self::CGROUP.trim_start_matches('/'))
            .join("io.pressure")
    }

    /// An engine over `inventory` whose every removal stalls the workloads
    /// `per_removal`.
    fn engine(&self, inventory: Inventory, per_removal: Duration) -> MemoryEngine {
        let mut engine = MemoryEngine::new(inventory);
        engine.removal_delay = Duration::from_millis(20);
        let (total, path) = (std::sync::Arc::clone(&self.total_us), self.file());
        let stall = u64::try_from(per_removal.as_micros()).unwrap();
        engine.before_remove = Some(Box::new(move |_| {
            let now = total.fetch_add(stall, std::sync::atomic::Ordering::SeqCst) + stall;
            write_psi(&path, now);
        }));
        engine
    }

    /// A pacer by the stall budget over these workloads: `added` percent,
    /// a ceiling of 10%, `max_delay`, `on_max_delay`, `safety.concurrency`
    /// 4.
    fn pacer(&self, added: f64, max_delay: &str, on_max_delay: crate::policy::OnMaxDelay) -> Pacer {
        let cgroup = crate::policy::WorkloadsCgroup::Path(Self::CGROUP.into());
        let signal = crate::pace::Signal::find(self.root.path(), &cgroup).unwrap();
        Pacer::paced(
            crate::policy::Pace {
                io_pressure_percent: 10.0,
                max_delay: max_delay.parse().unwrap(),
                added_io_pressure_percent: added,
                workloads_cgroup: cgroup,
                on_max_delay,
                ceiling_only: false,
            },
            crate::policy::Concurrency::Fixed(4),
            signal,
        )
    }
}

impl Drop for Workloads {
    /// Stops the writer task before its directory goes.
    fn drop(&mut self) {
        self.writing
            .store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

fn write_psi(path: &std::path::Path, total_us: u64) {
    std::fs::write(
        path,
        format!(
            "some avg10=0.00 avg60=0.00 avg300=0.00 total={total_us}\n\
             full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
        ),
    )
    .unwrap();
}

#[tokio::test(start_paused = true)]
async fn removals_that_stall_the_workloads_only_for_a_cpu_are_held_too() {
    // The workloads' I/O stall stays at 1%; each removal makes them wait
    // 20 ms for a CPU (the engine's work on it), which only their
    // cpu.pressure shows: the budget counts it, the I/O ceiling does not.
    let workloads = Workloads::new(10);
    let cpu_file = workloads.file().with_file_name("cpu.pressure");
    write_psi(&cpu_file, 5_000_000);
    let mut engine = MemoryEngine::new(node_of_containers(6));
    engine.removal_delay = Duration::from_millis(20);
    let cpu_total = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(5_000_000));
    let (total, path) = (std::sync::Arc::clone(&cpu_total), cpu_file.clone());
    engine.before_remove = Some(Box::new(move |_| {
        let now = total.fetch_add(20_000, std::sync::atomic::Ordering::SeqCst) + 20_000;
        write_psi(&path, now);
    }));
    let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
    let (planned, outcomes) = run_paced(&engine, &mut pacer, &Shutdown::new()).await;
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Deleted));
    let report = pacer.report().unwrap();
    let budget = report.budget.clone();
    assert_eq!(budget.cpu_source.as_deref(), cpu_file.to_str());
    // The baseline is the I/O's 1% and the CPU's none, summed.
    let baseline = budget.baseline_io_pressure_percent.unwrap();
    assert!((baseline - 1.0).abs() < 0.01, "{report:?}");
    #[expect(clippy::cast_precision_loss, reason = "a handful")]
    let expected = 0.02 * planned.deletion_count() as f64;
    assert!(
        (expected - 0.025..=expected + 0.005).contains(&budget.added_stall_seconds),
        "{expected} {report:?}"
    );
    // Held as an I/O stall of the same size would be: about 4 s apiece.
    assert!(report.paced_seconds > 10.0, "{report:?}");
    // The highest window is the I/O's: the CPU's stall is not the ceiling's.
    assert!(report.max_io_pressure_percent.unwrap() < 2.0, "{report:?}");
    let line = report.to_string();
    assert!(
        line.starts_with("by the workloads' I/O and CPU stall: baseline 1.00%"),
        "{line}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_stall_budget_holds_what_the_removals_add_above_the_baseline() {
    // The workloads stall 1% by themselves; each removal adds 20 ms. At
    // +0.5% the removals may add 5 ms a second: one every 4 s or so.
    let workloads = Workloads::new(10);
    let engine = workloads.engine(node_of_containers(12), Duration::from_millis(20));
    let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
    let began = tokio::time::Instant::now();
    let (planned, outcomes) = run_paced(&engine, &mut pacer, &Shutdown::new()).await;
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Deleted));
    let removals = planned.deletion_count();
    let report = pacer.report().unwrap();
    let budget = report.budget.clone();
    assert_eq!(budget.signal, Some("workloads"));
    assert_eq!(report.source.as_deref(), workloads.file().to_str());
    let baseline = budget.baseline_io_pressure_percent.unwrap();
    assert!((baseline - 1.0).abs() < 0.01, "{report:?}");
    // Every removal's 20 ms is seen above the baseline, and nothing else
    // (the last one's may come after the last window).
    let added = budget.added_stall_seconds;
    #[expect(clippy::cast_precision_loss, reason = "a handful")]
    let expected = 0.02 * removals as f64;
    assert!(
        (expected - 0.025..=expected + 0.005).contains(&added),
        "{added} {expected} {report:?}"
    );
    // Held to the target: the stall added over the run's time after the
    // baseline, one removal's worth of banked allowance aside.
    let removing = began.elapsed().as_secs_f64() - 3.0;
    assert!(
        added - 0.02 <= 0.005 * removing,
        "{added} s added in {removing} s: {report:?}"
    );
    assert!(report.paced_seconds > 10.0, "{report:?}");
    assert!(!report.delay_exhausted);
    // Over budget, one at a time.
    assert_eq!(
        engine
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert!(budget.objects_per_second.unwrap() < 1.0, "{report:?}");
    // Over a minute, removals rest, and the rest measures the baseline
    // again: the workloads' own 1% all along.
    assert!(budget.baseline_remeasured >= 1, "{report:?}");
    // (A window cut short by a wake-up may read a hair under it.)
    let last = budget.last_baseline_io_pressure_percent.unwrap();
    assert!((last - 1.0).abs() < 0.01, "{report:?}");
    let line = report.to_string();
    assert!(
        line.starts_with("by the workloads' I/O stall: baseline 1.00% (")
            && line.contains("% at the end, measured again in ")
            && line.contains("), removals added ")
            && line.contains("(target +0.5%, ceiling 10%), waited ")
            && line.ends_with(" objects/s")
            && !line.contains("concurrency"),
        "{line}"
    );
    let json = serde_json::to_value(&report).unwrap();
    for key in [
        "signal",
        "baseline_io_pressure_percent",
        "last_baseline_io_pressure_percent",
        "baseline_remeasured",
        "added_io_pressure_percent",
        "added_stall_seconds",
        "on_max_delay",
        "objects_per_second",
        "paced_seconds",
        "source",
    ] {
        assert!(json.get(key).is_some(), "{key} in {json}");
    }
    assert_eq!(json["on_max_delay"], "continue");
}

/// A paced run of `n` containers, each adding 20 ms of stall, over
/// workloads at 1% that go to `after` per mille `at` into the run: how
/// long it took, and its report.
async fn drifting(n: usize, at: Duration, after: u64) -> (Duration, crate::pace::PaceReport) {
    let workloads = Workloads::new(10);
    let engine = workloads.engine(node_of_containers(n), Duration::from_millis(20));
    let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
    let began = tokio::time::Instant::now();
    let shutdown = Shutdown::new();
    let run = run_paced(&engine, &mut pacer, &shutdown);
    let drift = async {
        tokio::time::sleep(at).await;
        workloads.stall_at(after);
        std::future::pending::<()>().await;
    };
    let outcomes = tokio::select! {
        (_, outcomes) = run => outcomes,
        () = drift => unreachable!(),
    };
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Deleted));
    (began.elapsed(), pacer.report().unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_workload_that_gets_busier_mid_run_neither_stops_nor_crawls_the_run() {
    // Twelve removals of 20 ms each at +0.5%: about 4 s apiece. A writer
    // among the workloads takes them from 1% to 6% 10 s in: measured
    // against the first baseline, the removals would owe 50 ms of every
    // second from then on, and wait out max_delay.
    let (steady, _) = drifting(12, Duration::from_secs(3600), 10).await;
    let (drifted, report) = drifting(12, Duration::from_secs(10), 60).await;
    let budget = report.budget.clone();
    assert!(!report.delay_exhausted, "{report:?}");
    assert_eq!(budget.baseline_io_pressure_percent, Some(1.0));
    let last = budget.last_baseline_io_pressure_percent.unwrap();
    assert!((last - 6.0).abs() < 0.01, "{report:?}");
    assert!(budget.baseline_remeasured >= 1, "{report:?}");
    // It waited for the next rest to measure the writer (a minute after
    // the first baseline at most: only a rest measures, see the budget's
    // module), and was otherwise as fast as without it.
    assert!(
        drifted <= steady + Duration::from_secs(60),
        "{drifted:?} against {steady:?} without the writer: {report:?}"
    );
    // What the removals added is what it says: 12 x 20 ms, give or take
    // the windows before they paused for the writer's stall: those of the
    // pause were given back when the rest measured it.
    assert!(
        (0.2..=0.4).contains(&budget.added_stall_seconds),
        "{report:?}"
    );
    let line = report.to_string();
    assert!(
        line.starts_with(
            "by the workloads' I/O stall: baseline 1.00% (6.00% at the end, measured again in "
        ),
        "{line}"
    );
}

#[tokio::test(start_paused = true)]
async fn under_a_quiet_budget_removals_climb_without_waiting() {
    // Removals that add nothing: no wait, and more at once once each kind
    // was learned. At +2% the least cost each is charged (0.2 ms) is
    // paid as they go.
    let workloads = Workloads::new(10);
    let engine = workloads.engine(node_of_containers(40), Duration::ZERO);
    let mut pacer = workloads.pacer(2.0, "1h", crate::policy::OnMaxDelay::Continue);
    let (_, outcomes) = run_paced(&engine, &mut pacer, &Shutdown::new()).await;
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Deleted));
    let report = pacer.report().unwrap();
    // One shortest wait at most: the allowance begins empty, and the first
    // removal's least cost is a deficit until time pays it.
    assert!(report.paced_seconds <= 0.05 + 1e-9, "{report:?}");
    assert!(
        engine
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst)
            > 1
    );
    assert!(report.budget.added_stall_seconds < 0.01);
}

#[tokio::test(start_paused = true)]
async fn past_max_delay_on_max_delay_stop_leaves_the_rest_for_the_next_run() {
    // Each removal adds 200 ms: 40 s to pay back at +0.5%, far past a
    // max_delay of 2 s.
    let workloads = Workloads::new(10);
    let engine = workloads.engine(node_of_containers(6), Duration::from_millis(200));
    let mut pacer = workloads.pacer(0.5, "2s", crate::policy::OnMaxDelay::Stop);
    let (planned, outcomes) = run_paced(&engine, &mut pacer, &Shutdown::new()).await;
    assert_eq!(outcomes.len(), planned.deletion_count());
    let (deleted, _) = with_reason(&outcomes, None);
    assert_eq!(deleted, 1, "{outcomes:?}");
    let (left, why) = with_reason(&outcomes, Some(Reason::NotAttempted));
    assert_eq!(left, outcomes.len() - 1, "{outcomes:?}");
    assert_eq!(
        why,
        BTreeSet::from([Some(
            "not attempted: safety.pace waited max_delay 2s with the removals' added I/O stall \
             over budget (on_max_delay: stop): left for the next run"
        )])
    );
    let report = pacer.report().unwrap();
    assert!(report.delay_exhausted);
    assert!((report.paced_seconds - 2.0).abs() < 0.01, "{report:?}");
    assert_eq!(
        serde_json::to_value(&report).unwrap()["on_max_delay"],
        "stop"
    );
    assert!(
        report
            .to_string()
            .ends_with("; max_delay 2s spent, the rest left for the next run"),
        "{report}"
    );
}

#[tokio::test(start_paused = true)]
async fn past_max_delay_on_max_delay_continue_goes_on_one_at_a_time() {
    let workloads = Workloads::new(10);
    let engine = workloads.engine(node_of_containers(6), Duration::from_millis(200));
    let mut pacer = workloads.pacer(0.5, "2s", crate::policy::OnMaxDelay::Continue);
    let began = tokio::time::Instant::now();
    let (_, outcomes) = run_paced(&engine, &mut pacer, &Shutdown::new()).await;
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Deleted));
    let report = pacer.report().unwrap();
    assert!(report.delay_exhausted, "{report:?}");
    assert!((report.paced_seconds - 2.0).abs() < 0.01, "{report:?}");
    assert_eq!(report.lowest_concurrency, 1);
    // Without waiting any more: the baseline, max_delay, and the
    // removals themselves.
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
    assert_eq!(
        engine
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    assert!(
        report
            .to_string()
            .ends_with("; max_delay 2s spent, the rest one at a time"),
        "{report}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_the_baseline_ends_it_at_once() {
    let workloads = Workloads::new(10);
    let engine = workloads.engine(node_of_containers(6), Duration::ZERO);
    let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
    let shutdown = Shutdown::new();
    let stopper = shutdown.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        stopper.stop();
    });
    let began = tokio::time::Instant::now();
    let (_, outcomes) = run_paced(&engine, &mut pacer, &shutdown).await;
    assert!(began.elapsed() < Duration::from_millis(1100));
    assert!(
        outcomes
            .iter()
            .all(|o| o.reason == Some(Reason::NotAttempted))
    );
    let report = pacer.report().unwrap();
    assert_eq!(report.budget.baseline_io_pressure_percent, None);
    assert_eq!(report.to_string(), "no removal batch to pace");
}

#[test]
fn a_configured_workloads_cgroup_that_cannot_be_read_fails_the_run() {
    let mut p = policy();
    p.safety.pace = Some(crate::policy::Pace {
        added_io_pressure_percent: 0.5,
        workloads_cgroup: crate::policy::WorkloadsCgroup::Path(
            "/sys/fs/cgroup/no-such-safeprune-test.slice".into(),
        ),
        ..crate::policy::Pace::default()
    });
    let Err(e) = Pacer::for_policy(&p) else {
        panic!("a pacer over a cgroup that is not there");
    };
    assert!(
        e.starts_with("safety.pace.workloads_cgroup: cannot read the workloads' I/O pressure (")
            && e.contains("no-such-safeprune-test.slice/io.pressure: No such file")
            && e.ends_with(
                "nothing removed; fix the path, or write auto to use kubelet's pods' cgroup"
            ),
        "{e}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_workloads_stall_that_stops_reading_neither_holds_nor_busies_the_run() {
    // The workloads' file goes at the first removal (a cgroup removed):
    // the budget sees nothing more, says so once, and the run goes on.
    let workloads = Workloads::new(10);
    let mut engine = MemoryEngine::new(node_of_containers(6));
    engine.removal_delay = Duration::from_millis(300);
    let (file, writing) = (workloads.file(), std::sync::Arc::clone(&workloads.writing));
    engine.before_remove = Some(Box::new(move |_| {
        writing.store(false, std::sync::atomic::Ordering::SeqCst);
        let _ = std::fs::remove_file(&file);
    }));
    let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
    let writer_gone = tokio::time::timeout(
        Duration::from_secs(600),
        run_paced(&engine, &mut pacer, &Shutdown::new()),
    )
    .await;
    let (_, outcomes) = writer_gone.expect("the run ends");
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Deleted));
}

/// While the image file system is over `images.disk.high_percent`, the
/// stall budget yields to the ceiling alone: images that cost the
/// workloads far more than the budget allows still go, held only while a
/// window is over the ceiling, and the report says so. The same run with
/// the disk under `high_percent` is held by the budget for seconds apiece.
#[tokio::test(start_paused = true)]
async fn over_high_percent_the_budget_yields_to_the_ceiling_alone() {
    let run = |high: u8| async move {
        let workloads = Workloads::new(10);
        let (_, planned, mut p, dir) = images_by_disk(24, 0);
        p.images.disk = Some(crate::policy::DiskWatermarks::percents(high, 0));
        let inventory = Inventory {
            runtime: "memory".into(),
            images: planned
                .deletions()
                .map(|d| Image {
                    id: d.id.clone(),
                    size: Some(100),
                    ..Image::default()
                })
                .collect(),
            image_fs: crate::runtime::fs_usage(dir.path()),
            ..Inventory::default()
        };
        let engine = workloads.engine(inventory, Duration::from_millis(20));
        let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
        let outcomes = execute(
            &engine,
            &planned,
            &p,
            &mut pacer,
            &Shutdown::new(),
            |_, _, _| {},
        )
        .await;
        assert_eq!(outcomes.len(), 24);
        assert!(
            outcomes.iter().all(|o| o.result == RemovalResult::Deleted),
            "{outcomes:?}"
        );
        pacer.report().unwrap()
    };
    // `measured_dir` holds bytes: its file system is over 0%, never over 100%.
    let full = run(0).await;
    let room = run(100).await;
    assert!(full.disk_emergency, "{full:?}");
    assert!(!room.disk_emergency, "{room:?}");
    // Held by the budget, 20 ms of stall at +0.5% is 4 s apiece.
    assert!(room.paced_seconds > 60.0, "{room:?}");
    assert!(full.paced_seconds < room.paced_seconds / 4.0, "{full:?}");
    // The ceiling still held: a dozen removals in a window stall the
    // workloads over 10% of it, and the next waited for a window under it.
    assert!(full.max_io_pressure_percent.unwrap() > 10.0, "{full:?}");
    assert!(full.paced_seconds > 0.0, "{full:?}");
    assert!(
        full.to_string().ends_with(
            "; the image file system over images.disk.high_percent: held by the ceiling alone"
        ),
        "{full}"
    );
    assert!(!room.to_string().contains("high_percent"), "{room}");
    let json = serde_json::to_value(&full).unwrap();
    assert_eq!(json["disk_emergency"], true);
}

/// A run at +0.1% (1 ms of stall a second) over `engine`, whose removals
/// the workloads' 1% shows nothing of: the plan, the seconds it spent
/// removing (after the 3-s baseline) and the pace's report, every object
/// deleted.
async fn least_cost_run(
    workloads: &Workloads,
    engine: &MemoryEngine,
) -> (Plan, f64, crate::pace::PaceReport) {
    let mut pacer = workloads.pacer(0.1, "1h", crate::policy::OnMaxDelay::Continue);
    let began = tokio::time::Instant::now();
    let (plan, outcomes) = run_paced(engine, &mut pacer, &Shutdown::new()).await;
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Deleted));
    let removing = began.elapsed().as_secs_f64() - 3.0;
    (plan, removing, pacer.report().unwrap())
}

#[tokio::test(start_paused = true)]
async fn removals_that_add_nothing_still_go_no_faster_than_their_least_cost() {
    // Removals the workloads' stall shows nothing of are charged 0.2 ms
    // each all the same: at +0.1% (1 ms of stall a second), about five a
    // second: forty in six seconds or more, the allowance beginning empty.
    let workloads = Workloads::new(10);
    let engine = workloads.engine(node_of_containers(40), Duration::ZERO);
    let (_, removing, report) = least_cost_run(&workloads, &engine).await;
    assert!(removing >= 6.0, "{removing} s: {report:?}");
    let rate = report.budget.objects_per_second.unwrap();
    assert!(rate <= 0.001 / 0.000_2 * 1.1, "{report:?}");
    // The least cost is a charge, not stall the windows saw.
    assert!(report.budget.added_stall_seconds < 0.01, "{report:?}");
    assert!(!report.delay_exhausted);
}

#[tokio::test(start_paused = true)]
async fn removals_that_free_more_pay_a_least_cost_by_their_size() {
    // Containers of 14 MiB, whose removals the workloads' stall shows
    // nothing of: each pays 0.07 ms a MiB, 0.98 ms, where a small one pays
    // 0.2 ms. At +0.1% (1 ms of stall a second) about one a second: twenty
    // in 17 s or more, where small ones took 4.
    let workloads = Workloads::new(10);
    let mut node = node_of_containers(20);
    for c in &mut node.containers {
        c.size = Some(14 << 20);
    }
    let engine = workloads.engine(node, Duration::ZERO);
    let (plan, removing, report) = least_cost_run(&workloads, &engine).await;
    assert!(
        plan.decisions
            .iter()
            .filter(|d| d.kind == Kind::Container && d.decision == Action::Delete)
            .all(|d| d.bytes == Some(14 << 20)),
        "the plan's sizes are what the pacer is given"
    );
    assert!(removing >= 17.0, "{removing} s: {report:?}");
    let rate = report.budget.objects_per_second.unwrap();
    // Twenty least costs, less the 2 ms the account may hold ahead.
    assert!(rate <= 20.0 / (20.0 * 0.98 - 2.0) * 1.05, "{report:?}");
    assert!(report.budget.added_stall_seconds < 0.01, "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn removals_on_an_engine_that_weighs_more_pay_its_least_cost() {
    // As above, on an engine whose removals weigh more (containerd's,
    // 2.25 times): 0.45 ms each, about two a second at +0.1%: forty in 16 s
    // or more, where Docker's took 6.
    let workloads = Workloads::new(10);
    let mut engine = workloads.engine(node_of_containers(40), Duration::ZERO);
    engine.removal_weight = 2.25;
    let (_, removing, report) = least_cost_run(&workloads, &engine).await;
    assert!(removing >= 16.0, "{removing} s: {report:?}");
    let rate = report.budget.objects_per_second.unwrap();
    assert!(rate <= 40.0 / (40.0 * 0.45 - 2.0) * 1.05, "{report:?}");
}
