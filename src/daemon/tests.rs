//! Unit tests of the daemon's loop, run in tokio's paused time with fakes
//! for its inputs, and of the real wall timer.
//!
//! The fakes: a wall clock that follows tokio's monotonic clock from a
//! fixed time and can jump forward as a suspend does; a timer that sleeps on
//! tokio's clock until the fake one reads the time, and wakes on a jump as a
//! `TFD_TIMER_CANCEL_ON_SET` timerfd does; a cycle runner that answers from
//! a script and records when it was called. Each scenario then asserts the
//! exact wall-clock time of every cycle: hours of schedule take no time.
//! The real engine is tests/daemon.rs's business.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::rc::Rc;

use chrono::TimeZone;
use tokio::sync::watch;
use tokio::time::Instant;

use super::wall_timer::WallTimer;
use super::*;
use crate::plan::Plan;
use crate::runtime::RuntimeError;

/// A wall-clock time on the tests' day, 2026-11-26, in UTC.
fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 26, h, m, s).unwrap()
}

/// The fake wall clock's reading when a scenario starts.
fn start_time() -> DateTime<Utc> {
    at(0, 30, 0)
}

/// How long after the start of a scenario the fake clock reads `wall`,
/// when no suspend came in between.
fn by(wall: DateTime<Utc>) -> Duration {
    (wall - start_time()).to_std().unwrap()
}

const HOURLY: &str = "schedule: \"0 * * * *\"\n";

/// A wall clock that follows tokio's (paused) monotonic clock, plus the
/// time spent suspended: a suspend moves the wall clock, not the monotonic
/// one.
#[derive(Clone)]
struct FakeClock {
    start: Instant,
    suspended: watch::Receiver<chrono::Duration>,
}

impl Clock for FakeClock {
    fn now(&self) -> DateTime<Utc> {
        start_time()
            + chrono::Duration::from_std(self.start.elapsed()).unwrap()
            + *self.suspended.borrow()
    }
}

/// Sleeps on tokio's clock until the fake wall clock reads the time; a
/// suspend meanwhile wakes it with `ClockChanged`, as the kernel cancels a
/// `TFD_TIMER_CANCEL_ON_SET` timerfd on resume.
struct FakeTimer {
    clock: FakeClock,
    suspends: watch::Receiver<chrono::Duration>,
}

impl Timer for FakeTimer {
    async fn sleep_until(&mut self, at: DateTime<Utc>) -> io::Result<TimerWake> {
        // Only a clock change after arming cancels a timerfd.
        self.suspends.mark_unchanged();
        loop {
            let now = self.clock.now();
            if now >= at {
                return Ok(TimerWake::Expired);
            }
            tokio::select! {
                () = tokio::time::sleep((at - now).to_std().unwrap()) => {}
                Ok(()) = self.suspends.changed() => return Ok(TimerWake::ClockChanged),
            }
        }
    }
}

/// What the scripted cycle runner answers, in turn; `Done` once the script
/// is used up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Done,
    Unreachable,
    Locked,
}

/// One call of the cycle runner.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    /// The wall-clock time it began.
    began: DateTime<Utc>,
    /// The schedule of the policy it was given.
    schedule: String,
    /// Whether the stop flag was set when it ended.
    stopped: bool,
}

struct ScriptedCycles {
    clock: FakeClock,
    answers: RefCell<VecDeque<Answer>>,
    /// How long each call takes, on tokio's clock.
    takes: Duration,
    calls: Rc<RefCell<Vec<Call>>>,
}

impl Cycles for ScriptedCycles {
    async fn cycle(&self, policy: &Policy, stop: &AtomicBool) -> Result<Report, AppError> {
        let began = self.clock.now();
        tokio::time::sleep(self.takes).await;
        self.calls.borrow_mut().push(Call {
            began,
            schedule: policy.schedule.as_str().to_owned(),
            stopped: stop.load(Ordering::SeqCst),
        });
        let answer = self.answers.borrow_mut().pop_front();
        match answer.unwrap_or(Answer::Done) {
            Answer::Done => Ok(Report::new(
                "docker",
                "node",
                began,
                false,
                &Plan::default(),
                Vec::new(),
            )),
            Answer::Unreachable => Err(AppError::Runtime(RuntimeError::Unreachable {
                runtime: "docker",
                endpoint: "unix:///run/nowhere.sock".to_owned(),
                hint: "is dockerd running?",
                source: "connection refused".into(),
            })),
            Answer::Locked => Err(AppError::Locked(PathBuf::from("/run/safeprune.lock"))),
        }
    }
}

/// Something that happens to the daemon, at a time on tokio's clock.
enum Step {
    Send(Event),
    /// The machine sleeps this long: the wall clock jumps forward.
    Suspend(chrono::Duration),
    /// The policy file now reads this.
    Write(&'static str),
}

/// A daemon's life: its policy file, its cycle runner's script and what
/// happens to it when.
struct Scenario {
    policy: &'static str,
    answers: Vec<Answer>,
    takes: Duration,
    /// The jitter's random numbers, in turn; 0 once used up.
    random: Vec<u64>,
    steps: Vec<(Duration, Step)>,
}

impl Default for Scenario {
    fn default() -> Self {
        Self {
            policy: HOURLY,
            answers: Vec::new(),
            takes: Duration::ZERO,
            random: Vec::new(),
            steps: Vec::new(),
        }
    }
}

/// What came of a scenario.
#[derive(Debug)]
struct Ran {
    result: Result<(), AppError>,
    calls: Vec<Call>,
    /// The wall-clock time the daemon returned.
    ended: DateTime<Utc>,
}

impl Ran {
    fn began(&self) -> Vec<DateTime<Utc>> {
        self.calls.iter().map(|c| c.began).collect()
    }
}

/// Runs the daemon's loop through `scenario`, in paused time.
async fn run_scenario(scenario: Scenario) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, scenario.policy).unwrap();
    let source = PolicySource::File(path.clone());
    let policy = source.load().unwrap();

    let start = Instant::now();
    let (suspend, suspended) = watch::channel(chrono::Duration::zero());
    let clock = FakeClock {
        start,
        suspended: suspended.clone(),
    };
    let (events, receiver) = mpsc::channel(8);
    let calls = Rc::new(RefCell::new(Vec::new()));
    let mut random = scenario.random.into_iter();
    let inputs = Inputs {
        clock: clock.clone(),
        timer: FakeTimer {
            clock: clock.clone(),
            suspends: suspended,
        },
        events: receiver,
        cycles: ScriptedCycles {
            clock: clock.clone(),
            answers: RefCell::new(scenario.answers.into()),
            takes: scenario.takes,
            calls: Rc::clone(&calls),
        },
        random: move || random.next().unwrap_or(0),
    };

    let daemon = async {
        // A daemon that never stops would cycle on in paused time forever.
        let result = tokio::time::timeout(
            Duration::from_secs(7 * 24 * 3600),
            run_with(source, policy, inputs),
        )
        .await
        .expect("the daemon did not stop within a week");
        (result, clock.now())
    };
    let steps = async {
        for (offset, step) in scenario.steps {
            tokio::time::sleep_until(start + offset).await;
            match step {
                // The daemon may have ended already: then nobody listens.
                Step::Send(event) => drop(events.send(event).await),
                Step::Suspend(length) => suspend.send_modify(|total| *total += length),
                Step::Write(text) => std::fs::write(&path, text).unwrap(),
            }
        }
    };
    // `events` outlives both: a closed channel would stop the daemon.
    let ((result, ended), ()) = tokio::join!(daemon, steps);
    let calls = calls.borrow().clone();
    Ran {
        result,
        calls,
        ended,
    }
}

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
            (by(at(2, 0, 0)), Step::Send(Event::Stop)),
        ],
        ..Scenario::default()
    })
    .await;
    // The new schedule moves the next cycle from 01:00 to 00:45; the broken
    // file leaves it in force, so the next is 01:45, not 01:00.
    assert_eq!(ran.began(), [at(0, 45, 0), at(1, 45, 0)]);
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
async fn a_stop_during_a_cycle_sets_the_stop_flag_and_exits_after_it() {
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

#[tokio::test(start_paused = true)]
async fn a_closed_event_channel_stops_the_daemon() {
    let (events, receiver) = mpsc::channel(1);
    drop(events);
    let start = Instant::now();
    let (_suspend, suspended) = watch::channel(chrono::Duration::zero());
    let clock = FakeClock { start, suspended };
    let calls = Rc::new(RefCell::new(Vec::new()));
    let inputs = Inputs {
        clock: clock.clone(),
        timer: FakeTimer {
            clock: clock.clone(),
            suspends: clock.suspended.clone(),
        },
        events: receiver,
        cycles: ScriptedCycles {
            clock: clock.clone(),
            answers: RefCell::default(),
            takes: Duration::ZERO,
            calls: Rc::clone(&calls),
        },
        random: || 0,
    };
    let result = run_with(PolicySource::Builtin, Policy::builtin(), inputs).await;
    assert!(result.is_ok(), "{result:?}");
    assert!(calls.borrow().is_empty());
    assert_eq!(clock.now(), start_time());
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
