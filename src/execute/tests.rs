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
    // Issue 22: in id order the parents came first, and the engine refused
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
async fn issue_22_a_stop_while_a_recheck_hangs_ends_the_run_at_once() {
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
async fn issue_22_a_removal_that_never_answers_gets_the_grace_after_a_stop() {
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
async fn issue_22_settling_that_never_ends_gets_the_grace_after_a_stop() {
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
    // Issue 22: what `remove` needs comes from the re-check, never from
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
    let engine = workloads.engine(node_of_containers(6), Duration::from_millis(20));
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
    // A wait for the budget long enough (SETTLE, then 5 windows) is a
    // pause that measures the baseline again: the workloads' own 1% all
    // along.
    assert!(budget.baseline_remeasured >= 1, "{report:?}");
    assert_eq!(budget.last_baseline_io_pressure_percent, Some(1.0));
    let line = report.to_string();
    assert!(
        line.starts_with(
            "by the workloads' I/O stall: baseline 1.00% (1.00% at the end, measured again in "
        ) && line.contains("), removals added ")
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
    // It paid for the writer's first second or so (the windows before the
    // pause began to count), and was otherwise as fast as without it.
    assert!(
        drifted <= steady + Duration::from_secs(20),
        "{drifted:?} against {steady:?} without the writer: {report:?}"
    );
    // What the removals added is what it says: 12 x 20 ms, give or take
    // the windows before the pause measured the writer.
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
    // was learned.
    let workloads = Workloads::new(10);
    let engine = workloads.engine(node_of_containers(40), Duration::ZERO);
    let mut pacer = workloads.pacer(0.5, "1h", crate::policy::OnMaxDelay::Continue);
    let (_, outcomes) = run_paced(&engine, &mut pacer, &Shutdown::new()).await;
    assert!(outcomes.iter().all(|o| o.result == RemovalResult::Deleted));
    let report = pacer.report().unwrap();
    assert!(report.paced_seconds.abs() < f64::EPSILON, "{report:?}");
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
