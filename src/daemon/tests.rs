//! Unit tests of the daemon's loop, run in tokio's paused time over fake
//! inputs (`harness.rs`), and of the real wall timer.
//!
//! Each scenario asserts the exact wall-clock time of every cycle: hours of
//! schedule take no time. The real engine is tests/integration/daemon.rs's business.

mod harness;

use std::time::Duration;

use chrono::Utc;

use super::wall_timer::WallTimer;
use super::{Event, Timer, TimerWake};
use harness::{Answer, Call, Scenario, Step, at, by, run_scenario, spin_guarded};

#[tokio::test(start_paused = true)]
async fn backoff_doubles_from_1s_to_300s_and_gives_up_before_the_next_slot() {
    let ran = run_scenario(Scenario {
        answers: vec![Answer::Unreachable; 20],
        steps: vec![(by(at(2, 30, 0)), Step::Send(Event::Stop))],
        ..Scenario::default()
    })
    .await;
    // 1, 2, 4, ..., 256 s, then 300 s, until a retry would pass 02:00;
    // then the next slot, where the engine answers.
    let after_slot = [
        0, 1, 3, 7, 15, 31, 63, 127, 255, 511, 811, 1111, 1411, 1711, 2011, 2311, 2611, 2911, 3211,
        3511,
    ];
    let mut expected: Vec<_> = after_slot
        .iter()
        .map(|&s| at(1, 0, 0) + chrono::Duration::seconds(s))
        .collect();
    expected.push(at(2, 0, 0));
    assert_eq!(ran.began(), expected);
    assert!(ran.result.is_ok(), "{:?}", ran.result);
}

#[tokio::test(start_paused = true)]
async fn a_suspend_over_three_slots_runs_one_catch_up_cycle_then_the_next_slot() {
    let ran = run_scenario(Scenario {
        steps: vec![
            // At 00:40 the machine sleeps until 03:50, over 01:00, 02:00
            // and 03:00.
            (
                Duration::from_secs(10 * 60),
                Step::Suspend(chrono::Duration::minutes(3 * 60 + 10)),
            ),
            // 04:30 by the wall clock.
            (Duration::from_secs(50 * 60), Step::Send(Event::Stop)),
        ],
        ..Scenario::default()
    })
    .await;
    assert_eq!(ran.began(), [at(3, 50, 0), at(4, 0, 0)]);
    assert_eq!(ran.ended, at(4, 30, 0));
}

#[tokio::test(start_paused = true)]
async fn a_catch_up_cycle_is_retried_while_the_engine_starts() {
    let ran = run_scenario(Scenario {
        // The engine is still starting after the resume: two failures.
        answers: vec![Answer::Unreachable, Answer::Unreachable],
        steps: vec![
            (
                Duration::from_secs(10 * 60),
                Step::Suspend(chrono::Duration::minutes(3 * 60 + 10)),
            ),
            (Duration::from_secs(15 * 60), Step::Send(Event::Stop)),
        ],
        ..Scenario::default()
    })
    .await;
    // 03:50 fails, 03:50:01 fails, 03:50:03 succeeds: retried with
    // backoff, not given up until 04:00.
    assert_eq!(ran.began(), [at(3, 50, 0), at(3, 50, 1), at(3, 50, 3)]);
}

#[tokio::test(start_paused = true)]
async fn each_slot_draws_its_own_jitter() {
    let minute = 60_000;
    let ran = run_scenario(Scenario {
        policy: "schedule: \"0 * * * *\"\nschedule_jitter: 10m\n",
        random: vec![7 * minute, 2 * minute],
        steps: vec![(by(at(2, 30, 0)), Step::Send(Event::Stop))],
        ..Scenario::default()
    })
    .await;
    assert_eq!(ran.began(), [at(1, 7, 0), at(2, 2, 0)]);
}

#[tokio::test(start_paused = true)]
async fn a_reload_rereads_the_policy_and_a_broken_one_keeps_the_current() {
    let ran = run_scenario(Scenario {
        steps: vec![
            (by(at(0, 40, 0)), Step::Write("schedule: \"45 * * * *\"\n")),
            (by(at(0, 40, 0)), Step::Send(Event::Reload)),
            (by(at(0, 50, 0)), Step::Write("schedule: \"every hour\"\n")),
            (by(at(0, 50, 0)), Step::Send(Event::Reload)),
            // Parses, but names no date ever: once fatal to the daemon.
            (by(at(0, 55, 0)), Step::Write("schedule: \"0 5 30 2 *\"\n")),
            (by(at(0, 55, 0)), Step::Send(Event::Reload)),
            (by(at(1, 50, 0)), Step::Remove),
            (by(at(1, 50, 0)), Step::Send(Event::Reload)),
            (by(at(3, 0, 0)), Step::Send(Event::Stop)),
        ],
        ..Scenario::default()
    })
    .await;
    // The new schedule moves the next cycle from 01:00 to 00:45; the broken
    // files, then no file, leave it in force: 01:45 and 02:45, not 01:00.
    assert_eq!(ran.began(), [at(0, 45, 0), at(1, 45, 0), at(2, 45, 0)]);
    assert!(ran.calls.iter().all(|c| c.schedule == "45 * * * *"));
}

#[tokio::test(start_paused = true)]
async fn a_reload_during_a_cycle_or_a_backoff_applies_after_it() {
    // The attempt at 01:00:00 takes until :10 and fails, the retry after a
    // 1 s backoff takes :11 to :21 and succeeds.
    for (reload, during) in [(at(1, 0, 5), "the cycle"), (at(1, 0, 10), "the backoff")] {
        let ran = run_scenario(Scenario {
            answers: vec![Answer::Unreachable],
            takes: Duration::from_secs(10),
            steps: vec![
                (by(at(0, 40, 0)), Step::Write("schedule: \"30 * * * *\"\n")),
                (
                    by(reload) + Duration::from_millis(500),
                    Step::Send(Event::Reload),
                ),
                (by(at(2, 0, 0)), Step::Send(Event::Stop)),
            ],
            ..Scenario::default()
        })
        .await;
        let seen: Vec<_> = ran
            .calls
            .iter()
            .map(|c| (c.began, c.schedule.as_str()))
            .collect();
        assert_eq!(
            seen,
            [
                (at(1, 0, 0), "0 * * * *"),
                (at(1, 0, 11), "0 * * * *"),
                (at(1, 30, 0), "30 * * * *"),
            ],
            "a reload during {during}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_stop_while_waiting_exits_at_once_without_a_cycle() {
    let ran = run_scenario(Scenario {
        steps: vec![(by(at(0, 40, 0)), Step::Send(Event::Stop))],
        ..Scenario::default()
    })
    .await;
    assert!(ran.calls.is_empty(), "{:?}", ran.calls);
    assert_eq!(ran.ended, at(0, 40, 0));
    assert!(ran.result.is_ok(), "{:?}", ran.result);
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_a_cycle_asks_it_to_stop_and_exits_after_it() {
    // Failed or not, a stopped cycle is neither retried nor followed.
    for answer in [Answer::Done, Answer::Unreachable] {
        let ran = run_scenario(Scenario {
            answers: vec![answer],
            takes: Duration::from_secs(10),
            steps: vec![(by(at(1, 0, 5)), Step::Send(Event::Stop))],
            ..Scenario::default()
        })
        .await;
        assert_eq!(
            ran.calls,
            [Call {
                began: at(1, 0, 0),
                schedule: "0 * * * *".to_owned(),
                stopped: true,
            }],
            "{answer:?}"
        );
        assert_eq!(ran.ended, at(1, 0, 10), "{answer:?}");
        assert!(ran.result.is_ok(), "{answer:?}: {:?}", ran.result);
    }
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_a_cycle_stuck_on_a_hung_engine_ends_it_within_the_grace() {
    // The cycle began at 01:00:00 and waits on an engine that never
    // answers; SIGTERM at 01:00:05. It used to wait out the engine's
    // deadline; now the daemon's stop reaches the cycle's waits.
    let ran = run_scenario(Scenario {
        answers: vec![Answer::Hung],
        steps: vec![(by(at(1, 0, 5)), Step::Send(Event::Stop))],
        ..Scenario::default()
    })
    .await;
    assert_eq!(
        ran.calls,
        [Call {
            began: at(1, 0, 0),
            schedule: "0 * * * *".to_owned(),
            stopped: true,
        }]
    );
    let grace = chrono::Duration::from_std(crate::execute::STOP_GRACE).unwrap();
    assert_eq!(ran.ended, at(1, 0, 5) + grace);
    assert!(ran.result.is_ok(), "{:?}", ran.result);
}

#[tokio::test(start_paused = true)]
async fn a_stop_during_a_backoff_exits_at_once() {
    let ran = run_scenario(Scenario {
        answers: vec![Answer::Unreachable; 5],
        // Attempts at 01:00:00 and :01, then a 2 s backoff.
        steps: vec![(by(at(1, 0, 2)), Step::Send(Event::Stop))],
        ..Scenario::default()
    })
    .await;
    assert_eq!(ran.began(), [at(1, 0, 0), at(1, 0, 1)]);
    assert!(ran.calls.iter().all(|c| !c.stopped));
    assert_eq!(ran.ended, at(1, 0, 2));
    assert!(ran.result.is_ok(), "{:?}", ran.result);
}

#[test]
fn a_closed_event_channel_is_one_stop() {
    // While waiting it ends the daemon at once; during a cycle it asks the
    // cycle to stop, and the cycle still finishes. A closed channel answers at
    // once, every time: were it read again, the loop would spin, and the
    // guard turns that hang into a failure.
    spin_guarded(|| async {
        for (hang_up, calls, ended) in [
            (at(0, 40, 0), vec![], at(0, 40, 0)),
            (at(1, 0, 5), vec![at(1, 0, 0)], at(1, 0, 10)),
        ] {
            let ran = run_scenario(Scenario {
                takes: Duration::from_secs(10),
                steps: vec![(by(hang_up), Step::HangUp)],
                ..Scenario::default()
            })
            .await;
            assert_eq!(ran.began(), calls, "hung up at {hang_up}");
            assert!(ran.calls.iter().all(|c| c.stopped), "{:?}", ran.calls);
            assert_eq!(ran.ended, ended, "hung up at {hang_up}");
            assert!(ran.result.is_ok(), "{:?}", ran.result);
        }
    });
}

#[tokio::test(start_paused = true)]
async fn a_held_lock_skips_the_cycle_without_a_retry() {
    let ran = run_scenario(Scenario {
        answers: vec![Answer::Locked],
        steps: vec![(by(at(2, 30, 0)), Step::Send(Event::Stop))],
        ..Scenario::default()
    })
    .await;
    assert_eq!(ran.began(), [at(1, 0, 0), at(2, 0, 0)]);
}

#[test]
fn the_wall_timer_expires_at_a_time_just_ahead() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let at = Utc::now() + chrono::Duration::milliseconds(50);
    let woke = runtime.block_on(WallTimer.sleep_until(at)).unwrap();
    let now = Utc::now();
    // A clock change (ECANCELED) also ends the wait, but early.
    assert_eq!(woke, TimerWake::Expired);
    assert!(now >= at, "woke at {now}, before {at}");
    assert!(
        now - at < chrono::Duration::seconds(1),
        "woke at {now}, long after {at}"
    );
}

#[test]
fn a_dropped_wall_timer_wait_ends_its_thread_at_once() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let in_an_hour = Utc::now() + chrono::Duration::hours(1);
    let cut = runtime.block_on(async {
        tokio::time::timeout(Duration::from_millis(20), WallTimer.sleep_until(in_an_hour)).await
    });
    assert!(cut.is_err(), "an hour-long wait ended early: {cut:?}");
    // Shutting down waits for blocking threads, up to its timeout: a thread
    // still in poll(2) would hold it for the whole 10 s.
    let begun = std::time::Instant::now();
    runtime.shutdown_timeout(Duration::from_secs(10));
    let took = begun.elapsed();
    assert!(took < Duration::from_secs(2), "shutdown took {took:?}");
}
