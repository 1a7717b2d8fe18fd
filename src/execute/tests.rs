//! The executor against the in-memory engine, in paused time: re-checks,
//! removal order, stops, limits and outcomes; paced runs in `tests/paced.rs`.

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::inventory::{
    ContainerState, Image, Inventory, Network, PodIdentity, PodSandbox, Volume,
};
use crate::plan::plan;
use crate::runtime::memory::MemoryEngine;

fn node() -> Inventory {
    let now = Utc::now();
    let old = now - chrono::Duration::days(10);
    let container = |id: &str, image: &str| crate::inventory::Container {
        image_mounts: Vec::new(),
        layer: None,
        id: id.to_owned(),
        names: vec![id.to_owned()],
        state: ContainerState::Exited,
        labels: crate::inventory::Labels::new(),
        image_id: image.to_owned(),
        image_ref: String::new(),
        created: old,
        finished: Some(old),
        volumes: vec![format!("vol-{id}")],
        networks: vec![format!("net-{id}")],
        pod: None,
        size: Some(5),
    };
    let mut init = container("init", "sha256:app");
    init.pod = Some(PodIdentity {
        sandbox_id: Some("sb".into()),
        pod_uid: Some("uid".into()),
        ..PodIdentity::default()
    });
    Inventory {
        runtime: "memory".into(),
        containers: vec![container("a", "sha256:a"), container("b", "sha256:b"), init],
        images: ["sha256:a", "sha256:b", "sha256:app"]
            .iter()
            .map(|id| Image {
                cri_pinned: false,
                parent: None,
                id: (*id).to_owned(),
                tags: vec![],
                digests: vec![],
                created: Some(old),
                last_tagged: None,
                size: Some(100),
                pinned: false,
                unique_size: None,
                recorded_use: None,
                first_seen: None,
                provenance: crate::inventory::provenance::Provenance::default(),
            })
            .collect(),
        volumes: ["vol-a", "vol-b"]
            .iter()
            .map(|n| Volume {
                name: (*n).to_owned(),
                anonymous: true,
                labels: crate::inventory::Labels::new(),
                created: Some(old),
                size: None,
            })
            .collect(),
        networks: vec![Network {
            id: "net-a".into(),
            name: "net-a".into(),
            created: Some(old),
            labels: crate::inventory::Labels::new(),
        }],
        build_cache: vec![],
        sandboxes: vec![PodSandbox {
            id: "sb".into(),
            pod_uid: Some("uid".into()),
            pod_name: None,
            pod_namespace: None,
            ready: false,
        }],
        image_fs: None,
        api_version: None,
        image_store: crate::inventory::ImageStore::Graph,
        cri_runtime: String::new(),
    }
}

/// `node()` with its containers replaced by `n` copies of the first,
/// `c00`, `c01`, and so on.
fn node_of_containers(n: usize) -> Inventory {
    let mut inv = node();
    inv.containers = (0..n)
        .map(|i| {
            let mut c = inv.containers[0].clone();
            c.id = format!("c{i:02}");
            c
        })
        .collect();
    inv
}

/// The built-in policy with volumes on, unpaced: a developer's machine may
/// be a Kubernetes node, whose pods' cgroup must not pace these tests.
fn policy() -> Policy {
    let mut p = Policy::builtin();
    p.volumes.enabled = true;
    p.safety.pace = None;
    p
}

async fn run(engine: &MemoryEngine, shutdown: &Shutdown) -> Vec<Outcome> {
    run_paced(engine, &mut Pacer::for_policy(&policy()).unwrap(), shutdown)
        .await
        .1
}

/// The plan of [`policy`] for `engine`'s node, carried out under `pacer`:
/// the plan and what came of it.
async fn run_paced(
    engine: &MemoryEngine,
    pacer: &mut Pacer,
    shutdown: &Shutdown,
) -> (Plan, Vec<Outcome>) {
    let p = plan(&engine.inventory().await.unwrap(), &policy(), Utc::now());
    let outcomes = execute(engine, &p, &policy(), pacer, shutdown, |_, _, _| {}).await;
    (p, outcomes)
}

/// A shutdown asked already.
fn stopped() -> Shutdown {
    let shutdown = Shutdown::new();
    shutdown.stop();
    shutdown
}

fn results(outcomes: &[Outcome]) -> BTreeSet<(Kind, String, RemovalResult)> {
    outcomes
        .iter()
        .map(|o| (o.kind, o.id.clone(), o.result))
        .collect()
}

/// The reason each object was not deleted, `None` for a deletion.
fn reason(outcomes: &[Outcome], id: &str) -> Option<Reason> {
    let o = outcomes.iter().find(|o| o.id == id).unwrap();
    assert_eq!(
        o.result,
        o.reason.map_or(RemovalResult::Deleted, Reason::result)
    );
    o.reason
}

#[tokio::test]
async fn removes_containers_before_what_they_held() {
    let engine = MemoryEngine::new(node());
    let outcomes = run(&engine, &Shutdown::new()).await;
    assert!(
        outcomes.iter().all(|o| o.result == RemovalResult::Deleted),
        "{outcomes:?}"
    );
    let removed = engine.removed.lock().unwrap().clone();
    let first_other = removed
        .iter()
        .position(|(k, _)| *k != Kind::Container)
        .unwrap();
    assert!(
        removed[first_other..]
            .iter()
            .all(|(k, _)| *k != Kind::Container)
    );
    // Images go last of the four kinds here, after the containers using them.
    assert_eq!(removed.last().unwrap().0, Kind::Image);
    assert_eq!(removed.len(), 3 + 1 + 2 + 3);
}

#[tokio::test]
async fn a_pod_that_came_back_is_skipped_not_removed() {
    let mut engine = MemoryEngine::new(node());
    engine.before_recheck = Some(Box::new(|inv: &mut Inventory| {
        inv.sandboxes[0].ready = true;
    }));
    let outcomes = run(&engine, &Shutdown::new()).await;
    let init = outcomes.iter().find(|o| o.id == "init").unwrap();
    assert_eq!(init.result, RemovalResult::Skipped);
    assert_eq!(init.reason, Some(Reason::Changed));
    assert!(
        init.error.as_deref().unwrap().contains("live_pod_sandbox"),
        "{init:?}"
    );
    // Its image is now held by a container that stays: skipped too.
    let image = outcomes.iter().find(|o| o.id == "sha256:app").unwrap();
    assert_eq!(image.result, RemovalResult::Skipped);
    assert_eq!(image.reason, Some(Reason::Changed));
    assert!(
        engine
            .state
            .lock()
            .unwrap()
            .containers
            .iter()
            .any(|c| c.id == "init")
    );
}

#[tokio::test]
async fn a_restarted_container_is_skipped() {
    let mut engine = MemoryEngine::new(node());
    engine.before_recheck = Some(Box::new(|inv: &mut Inventory| {
        if let Some(c) = inv.containers.iter_mut().find(|c| c.id == "a") {
            c.state = ContainerState::Running;
        }
    }));
    let outcomes = run(&engine, &Shutdown::new()).await;
    let got = results(&outcomes);
    assert!(got.contains(&(Kind::Container, "a".into(), RemovalResult::Skipped)));
    assert!(got.contains(&(Kind::Image, "sha256:a".into(), RemovalResult::Skipped)));
    assert!(got.contains(&(Kind::Volume, "vol-a".into(), RemovalResult::Skipped)));
    assert!(got.contains(&(Kind::Container, "b".into(), RemovalResult::Deleted)));
    assert_eq!(reason(&outcomes, "a"), Some(Reason::Changed));
    assert_eq!(reason(&outcomes, "b"), None);
}

#[tokio::test]
async fn what_changes_between_recheck_and_removal_is_gone_or_in_use() {
    let mut engine = MemoryEngine::new(node());
    engine.before_remove = Some(Box::new(|inv: &mut Inventory| {
        // Someone removed the network; container "a" was started again.
        inv.networks.retain(|n| n.id != "net-a");
        if let Some(c) = inv.containers.iter_mut().find(|c| c.id == "a") {
            c.state = ContainerState::Running;
        }
    }));
    let outcomes = run(&engine, &Shutdown::new()).await;
    assert_eq!(reason(&outcomes, "net-a"), Some(Reason::Gone));
    assert_eq!(reason(&outcomes, "a"), Some(Reason::InUse));
    let a = outcomes.iter().find(|o| o.id == "a").unwrap();
    assert!(a.error.as_deref().unwrap().starts_with("in use: "), "{a:?}");
    assert_eq!(reason(&outcomes, "b"), None);
}

#[tokio::test]
async fn vanished_objects_and_server_errors_are_reported_as_such() {
    let mut engine = MemoryEngine::new(node());
    engine.failing = ["b".to_owned()].into();
    engine.before_recheck = Some(Box::new(|inv: &mut Inventory| {
        inv.networks.clear();
    }));
    let outcomes = run(&engine, &Shutdown::new()).await;
    let got = results(&outcomes);
    assert!(got.contains(&(Kind::Container, "b".into(), RemovalResult::Failed)));
    assert!(got.contains(&(Kind::Network, "net-a".into(), RemovalResult::Skipped)));
    let b = outcomes.iter().find(|o| o.id == "b").unwrap();
    assert!(b.error.as_deref().unwrap().contains("server error"));
    assert_eq!(reason(&outcomes, "b"), Some(Reason::EngineError));
    assert_eq!(reason(&outcomes, "net-a"), Some(Reason::Gone));
}

#[tokio::test]
async fn after_a_recheck_fails_nothing_more_is_asked_of_the_engine() {
    // Twenty containers, one at a time, then the node's images, volumes
    // and networks; the engine answers three re-checks, then no more
    // (killed or hung: every call would wait its timeout).
    let mut engine = MemoryEngine::new(node_of_containers(20));
    engine.rechecks_answered = Some(3);
    let mut p = policy();
    p.safety.concurrency = crate::policy::Concurrency::Fixed(1);
    let planned = plan(&engine.inventory().await.unwrap(), &p, Utc::now());
    let outcomes = execute(
        &engine,
        &planned,
        &p,
        &mut Pacer::for_policy(&p).unwrap(),
        &Shutdown::new(),
        |_, _, _| {},
    )
    .await;
    let later_kinds = planned.deletion_count() - 20;
    assert!(later_kinds > 0);
    assert_eq!(outcomes.len(), 20 + later_kinds);
    let count = |reason: Option<Reason>| outcomes.iter().filter(|o| o.reason == reason).count();
    assert_eq!(count(None), 3, "the three re-checked are deleted");
    assert_eq!(
        count(Some(Reason::EngineError)),
        1,
        "the fourth failed its re-check"
    );
    // The other 16 containers, and every object of the later kinds.
    assert_eq!(count(Some(Reason::NotAttempted)), 16 + later_kinds);
    let skipped = outcomes
        .iter()
        .find(|o| o.reason == Some(Reason::NotAttempted))
        .unwrap();
    assert_eq!(
        skipped.error.as_deref(),
        Some(
            "not attempted: a re-check could not reach the engine (memory re-check failed: no answer within 120s)"
        )
    );
    assert_eq!(
        engine.rechecks.lock().unwrap().len(),
        4,
        "no re-check after the failed one"
    );
    // Nothing to settle on an engine that stopped answering.
    assert!(engine.settled.lock().unwrap().is_empty());
}

#[tokio::test]
async fn concurrency_is_bounded_by_the_policy() {
    let mut engine = MemoryEngine::new(node_of_containers(20));
    engine.removal_delay = Duration::from_millis(20);
    let mut policy = policy();
    policy.safety.concurrency = crate::policy::Concurrency::Fixed(3);
    let p = plan(&engine.inventory().await.unwrap(), &policy, Utc::now());
    let mut seen = Vec::new();
    let outcomes = execute(
        &engine,
        &p,
        &policy,
        &mut Pacer::for_policy(&policy).unwrap(),
        &Shutdown::new(),
        |_, done, total| {
            seen.push((done, total));
        },
    )
    .await;
    assert_eq!(
        engine
            .max_in_flight
            .load(std::sync::atomic::Ordering::SeqCst),
        3
    );
    assert_eq!(outcomes.len(), p.deletion_count());
    assert_eq!(seen.last().unwrap().0, seen.last().unwrap().1);
    // Re-checked in batches no larger than the removals that may run at
    // once, each object once: the engine is asked about a batch, not about
    // the whole node for every object.
    let rechecks = engine.rechecks.lock().unwrap();
    assert!(
        rechecks.iter().all(|b| !b.is_empty() && b.len() <= 3),
        "{rechecks:?}"
    );
    let mut asked: Vec<&String> = rechecks.iter().flatten().collect();
    asked.sort();
    asked.dedup();
    let mut planned: Vec<&String> = p.deletions().map(|d| &d.id).collect();
    planned.sort();
    assert_eq!(asked, planned);
}

#[tokio::test(start_paused = true)]
async fn a_removal_acts_on_a_fresh_recheck_even_when_removals_are_slow() {
    for delay_ms in [1, 15, 100] {
        let mut engine = MemoryEngine::new(node_of_containers(12));
        engine.removal_delay = Duration::from_millis(delay_ms);
        let outcomes = run(&engine, &Shutdown::new()).await;
        assert!(
            outcomes.iter().all(|o| o.result == RemovalResult::Deleted),
            "{outcomes:?}"
        );
        // Every removal started within FRESH_FOR of its object's latest
        // re-check: a prefetched answer that waited longer was re-checked.
        let windows = engine.windows.lock().unwrap();
        assert_eq!(windows.len(), outcomes.len());
        for (id, checked, started) in windows.iter() {
            let checked = checked.unwrap_or_else(|| panic!("{id} removed unchecked"));
            assert!(
                started.duration_since(checked) <= FRESH_FOR,
                "{delay_ms} ms removals: {id} waited {:?}",
                started.duration_since(checked)
            );
        }
        // Fast removals use the prefetched answers: about one re-check per
        // batch of four.
        if delay_ms == 1 {
            let rechecks = engine.rechecks.lock().unwrap().len();
            assert!(rechecks <= 12 / 4 + 4, "{rechecks} re-checks");
        }
    }
}

#[tokio::test]
async fn nothing_new_starts_after_stop() {
    let engine = MemoryEngine::new(node());
    let outcomes = run(&engine, &stopped()).await;
    assert!(engine.removed.lock().unwrap().is_empty());
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Skipped));
    assert!(
        outcomes
            .iter()
            .all(|o| o.reason == Some(Reason::NotAttempted))
    );
}

#[tokio::test]
async fn each_kind_settles_once_after_its_removals_and_only_if_one_removed_something() {
    let mut engine = MemoryEngine::new(node());
    engine.failing = ["sha256:a", "sha256:b", "sha256:app"]
        .iter()
        .map(|id| (*id).to_owned())
        .collect();
    run(&engine, &Shutdown::new()).await;
    let mut expected = Vec::new();
    let mut started = 0;
    for kind in Kind::REMOVAL_ORDER {
        let of_kind = engine
            .windows
            .lock()
            .unwrap()
            .iter()
            .filter(|(id, _, _)| {
                let id = id.as_str();
                match kind {
                    Kind::Container => ["a", "b", "init"].contains(&id),
                    Kind::Network => id.starts_with("net-"),
                    Kind::Volume => id.starts_with("vol-"),
                    Kind::Image => id.starts_with("sha256:"),
                    Kind::BuildCache => false,
                }
            })
            .count();
        started += of_kind;
        // Every image removal failed: nothing to settle for images.
        if of_kind > 0 && kind != Kind::Image {
            expected.push((kind, started));
        }
    }
    assert_eq!(*engine.settled.lock().unwrap(), expected);
    assert_eq!(expected.len(), 3, "containers, networks, volumes");
}

/// Images only, `n` of them, `img-00` used longest ago; the plan weighs
/// them by the disk of the temporary directory.
/// A directory holding 64 KiB of the test's own: its file system is never
/// 0% full, which a fresh, empty tmpfs as `$TMPDIR` would be (and then
/// `low_percent` 0 would count as reached).
fn measured_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bytes"), vec![1_u8; 64 << 10]).unwrap();
    dir
}

fn images_by_disk(n: usize, low_percent: u8) -> (MemoryEngine, Plan, Policy, tempfile::TempDir) {
    let base = Utc::now() - chrono::Duration::days(30);
    let images = (0..n)
        .map(|i| Image {
            // Ids run against the order of use, so that id order is wrong.
            id: format!("sha256:{:02}", n - i),
            created: Some(base + chrono::Duration::hours(i64::try_from(i).unwrap())),
            size: Some(100),
            ..Image::default()
        })
        .collect();
    let dir = measured_dir();
    let inv = Inventory {
        runtime: "memory".into(),
        images,
        image_fs: crate::runtime::fs_usage(dir.path()),
        ..Inventory::default()
    };
    let mut p = policy();
    p.images.disk = Some(crate::policy::DiskWatermarks::percents(100, low_percent));
    p.safety.concurrency = crate::policy::Concurrency::Fixed(1);
    let engine = MemoryEngine::new(inv.clone());
    // The planner would keep them all (the temporary directory's disk is
    // not over 100%): plan them as the disk rules would under pressure.
    let mut planned = plan(&inv, &Policy::builtin(), Utc::now());
    planned.image_fs = inv.image_fs.clone();
    (engine, planned, p, dir)
}

#[tokio::test]
async fn under_images_disk_the_least_recently_used_go_first() {
    // low_percent 0: never reached, every image goes, oldest use first.
    let (engine, planned, p, _dir) = images_by_disk(5, 0);
    let outcomes = execute(
        &engine,
        &planned,
        &p,
        &mut Pacer::for_policy(&p).unwrap(),
        &Shutdown::new(),
        |_, _, _| {},
    )
    .await;
    assert!(outcomes.iter().all(|o| o.reason.is_none()), "{outcomes:?}");
    let removed: Vec<String> = engine
        .removed
        .lock()
        .unwrap()
        .iter()
        .map(|(_, id)| id.clone())
        .collect();
    assert_eq!(
        removed,
        [
            "sha256:05",
            "sha256:04",
            "sha256:03",
            "sha256:02",
            "sha256:01"
        ]
    );
}

#[tokio::test]
async fn under_images_disk_nothing_more_goes_once_low_percent_is_reached() {
    // low_percent 100: reached before the first removal.
    let (engine, planned, p, _dir) = images_by_disk(5, 100);
    let outcomes = execute(
        &engine,
        &planned,
        &p,
        &mut Pacer::for_policy(&p).unwrap(),
        &Shutdown::new(),
        |_, _, _| {},
    )
    .await;
    assert_eq!(outcomes.len(), 5);
    for o in &outcomes {
        assert_eq!(o.reason, Some(Reason::NotAttempted));
        let why = o.error.as_deref().unwrap();
        assert!(
            why.starts_with("not attempted: the image file system is "),
            "{why}"
        );
        assert!(
            why.ends_with("% full, at or under low_percent 100"),
            "{why}"
        );
    }
    assert!(engine.removed.lock().unwrap().is_empty());
    // Nothing more was re-checked either, past the first batch.
    assert!(engine.rechecks.lock().unwrap().len() <= 1);
}

#[tokio::test]
async fn a_chain_of_images_and_of_build_cache_goes_children_first_and_whole() {
    // In id order the parents came first, and the engine refused
    // them while their children were left (409); one wave at a time, the
    // re-check of a parent comes after its children went.
    let mut inv = node();
    inv.containers.clear();
    inv.sandboxes.clear();
    let old = Utc::now() - chrono::Duration::days(10);
    let base = inv.images[0].clone();
    inv.images = (0..6)
        .map(|n| Image {
            id: format!("sha256:{}", 9 - n),
            parent: (n > 0).then(|| format!("sha256:{}", 10 - n)),
            ..base.clone()
        })
        .collect();
    inv.build_cache = (0..9)
        .map(|n| crate::inventory::BuildCacheEntry {
            id: format!("r{}", 9 - n),
            description: String::new(),
            created: Some(old),
            last_used: Some(old),
            size: Some(1),
            in_use: false,
            parents: if n > 0 {
                vec![format!("r{}", 10 - n)]
            } else {
                vec![]
            },
        })
        .collect();
    let engine = MemoryEngine::new(inv);
    let outcomes = run(&engine, &Shutdown::new()).await;
    let deleted = |kind| {
        outcomes
            .iter()
            .filter(|o| o.kind == kind && o.result == RemovalResult::Deleted)
            .count()
    };
    assert_eq!(deleted(Kind::Image), 6, "{outcomes:#?}");
    assert_eq!(deleted(Kind::BuildCache), 9, "{outcomes:#?}");
    let removed = engine.removed.lock().unwrap();
    let order: Vec<&str> = removed
        .iter()
        .filter(|(k, _)| *k == Kind::Image)
        .map(|(_, id)| id.as_str())
        .collect();
    assert_eq!(
        order,
        [
            "sha256:4", "sha256:5", "sha256:6", "sha256:7", "sha256:8", "sha256:9"
        ]
    );
}

/// Runs the plan of `engine` under `policy`, one removal at a time, and
/// asks for the stop `after` from the start: the plan, the outcomes, and
/// how long after the stop `execute` returned.
async fn stopped_after(
    engine: &MemoryEngine,
    mut policy: Policy,
    after: Duration,
) -> (Plan, Vec<Outcome>, Duration) {
    policy.safety.concurrency = crate::policy::Concurrency::Fixed(1);
    let planned = plan(&engine.inventory().await.unwrap(), &policy, Utc::now());
    let shutdown = Shutdown::new();
    let mut pacer = Pacer::for_policy(&policy).unwrap();
    let begun = Instant::now();
    // The engine hangs for ever: a wait that missed the stop would hold
    // `execute` for ever too. In paused time the bound costs nothing.
    let run = tokio::time::timeout(
        Duration::from_secs(600),
        execute(
            engine,
            &planned,
            &policy,
            &mut pacer,
            &shutdown,
            |_, _, _| {},
        ),
    );
    let stop = async {
        tokio::time::sleep(after).await;
        shutdown.stop();
    };
    let (outcomes, ()) = tokio::join!(run, stop);
    let outcomes = outcomes.expect("execute still ran 10 minutes after the stop");
    let after_stop = begun
        .elapsed()
        .checked_sub(after)
        .expect("ended after the stop");
    (planned, outcomes, after_stop)
}

/// How many `outcomes` have `reason` (`None`: deleted), and each of their
/// `error`s.
fn with_reason(outcomes: &[Outcome], reason: Option<Reason>) -> (usize, BTreeSet<Option<&str>>) {
    let matching: Vec<&Outcome> = outcomes.iter().filter(|o| o.reason == reason).collect();
    let errors = matching.iter().map(|o| o.error.as_deref()).collect();
    (matching.len(), errors)
}

#[tokio::test(start_paused = true)]
async fn a_stop_while_a_recheck_hangs_ends_the_run_at_once() {
    // Three re-checks answered, then the engine hangs (SIGSTOP): the run
    // used to wait out the re-check's 120 s deadline after a SIGTERM.
    let mut engine = MemoryEngine::new(node_of_containers(20));
    engine.rechecks_before_hang = Some(3);
    let (planned, outcomes, after_stop) =
        stopped_after(&engine, policy(), Duration::from_secs(5)).await;
    // A re-check only reads: it is given up at once.
    assert_eq!(after_stop, Duration::ZERO);
    assert_eq!(outcomes.len(), planned.deletion_count());
    assert_eq!(with_reason(&outcomes, None).0, 3);
    let (not_attempted, why) = with_reason(&outcomes, Some(Reason::NotAttempted));
    assert_eq!(not_attempted, planned.deletion_count() - 3);
    assert_eq!(why, [Some(ASKED_TO_STOP)].into());
    assert_eq!(engine.windows.lock().unwrap().len(), 3, "no removal after");
}

#[tokio::test(start_paused = true)]
async fn a_removal_that_never_answers_gets_the_grace_after_a_stop() {
    let mut engine = MemoryEngine::new(node_of_containers(20));
    engine.removals_before_hang = Some(3);
    let (planned, outcomes, after_stop) =
        stopped_after(&engine, policy(), Duration::from_secs(5)).await;
    assert_eq!(after_stop, STOP_GRACE);
    assert_eq!(outcomes.len(), planned.deletion_count());
    assert_eq!(with_reason(&outcomes, None).0, 3);
    // Sent, so not "not attempted": the engine may still carry it out.
    let (failed, why) = with_reason(&outcomes, Some(Reason::EngineError));
    assert_eq!(failed, 1);
    assert_eq!(
        why,
        [Some(
            "no answer within 2s of the stop signal: the engine may still remove it"
        )]
        .into()
    );
    let (not_attempted, why) = with_reason(&outcomes, Some(Reason::NotAttempted));
    assert_eq!(not_attempted, planned.deletion_count() - 4);
    assert_eq!(why, [Some(ASKED_TO_STOP)].into());
    assert_eq!(engine.windows.lock().unwrap().len(), 4, "no removal after");
}

#[tokio::test(start_paused = true)]
async fn settling_that_never_ends_gets_the_grace_after_a_stop() {
    // The containers go at once; settling them (containerd's garbage
    // collection) hangs until the stop and its grace.
    let mut engine = MemoryEngine::new(node());
    engine.settle_hangs = true;
    let (planned, outcomes, after_stop) =
        stopped_after(&engine, policy(), Duration::from_secs(5)).await;
    assert_eq!(after_stop, STOP_GRACE);
    assert_eq!(outcomes.len(), planned.deletion_count());
    assert_eq!(with_reason(&outcomes, None).0, 3, "the three containers");
    let (not_attempted, why) = with_reason(&outcomes, Some(Reason::NotAttempted));
    assert_eq!(not_attempted, planned.deletion_count() - 3);
    assert_eq!(why, [Some(ASKED_TO_STOP)].into());
    assert_eq!(*engine.settled.lock().unwrap(), [(Kind::Container, 3)]);
}

#[tokio::test]
async fn a_removal_acts_on_the_object_its_recheck_found() {
    // What `remove` needs comes from the re-check, never from
    // state an adapter kept. A name given before the re-check is one it
    // read, so the image goes with it; a name given between the re-check
    // and the removal is someone's new use, so the image stays.
    let named = |name: &'static str| {
        move |inv: &mut Inventory| {
            if let Some(i) = inv.images.iter_mut().find(|i| i.id == "sha256:a") {
                i.tags.push(name.to_owned());
            }
        }
    };
    let mut before = MemoryEngine::new(node());
    before.before_recheck = Some(Box::new(named("seen:1")));
    run(&before, &Shutdown::new()).await;
    assert!(
        before
            .removed
            .lock()
            .unwrap()
            .contains(&(Kind::Image, "sha256:a".to_owned()))
    );

    // Images alone, so that the first removal is image a's.
    let mut images_only = node();
    images_only.containers.clear();
    images_only.sandboxes.clear();
    images_only.volumes.clear();
    images_only.networks.clear();
    let mut between = MemoryEngine::new(images_only);
    between.before_remove = Some(Box::new(named("late:1")));
    let outcomes = run(&between, &Shutdown::new()).await;
    assert_eq!(reason(&outcomes, "sha256:a"), Some(Reason::InUse));
    let state = between.state.lock().unwrap();
    assert!(state.images.iter().any(|i| i.id == "sha256:a"));
}

mod paced;

#[tokio::test]
async fn a_name_given_after_planning_to_an_image_that_cannot_come_back_keeps_it() {
    use crate::inventory::provenance::Provenance;
    let mut inventory = node();
    let digest = format!("127.0.0.1:5000/acc/app@sha256:{}", "0".repeat(64));
    let app = inventory
        .images
        .iter_mut()
        .find(|i| i.id == "sha256:app")
        .unwrap();
    app.tags = vec!["127.0.0.1:5000/acc/app:1".into()];
    app.provenance = Provenance::from_repo_digests(std::slice::from_ref(&digest));
    app.digests = vec![digest];
    let mut engine = MemoryEngine::new(inventory);
    // Tagged here between the plan and its removal; the re-check's answer
    // carries no evidence of its own (as containerd's does not): the
    // plan's decides, against the names read now.
    engine.before_recheck = Some(Box::new(|inv: &mut Inventory| {
        if let Some(app) = inv.images.iter_mut().find(|i| i.id == "sha256:app") {
            app.tags.push("app:local".into());
            app.provenance = Provenance::default();
        }
    }));
    let (planned, outcomes) = run_paced(
        &engine,
        &mut Pacer::for_policy(&policy()).unwrap(),
        &Shutdown::new(),
    )
    .await;
    let d = planned
        .decisions
        .iter()
        .find(|d| d.id == "sha256:app")
        .unwrap();
    assert_eq!(d.rule, crate::plan::Rule::Eligible, "{d:?}");
    assert_eq!(reason(&outcomes, "sha256:app"), Some(Reason::Changed));
    let app = outcomes.iter().find(|o| o.id == "sha256:app").unwrap();
    assert_eq!(app.kept_by, Some(crate::plan::Rule::Unpullable), "{app:?}");
}
