//! The daemon's fake inputs and a scenario runner for its unit tests.
//!
//! A wall clock that follows tokio's monotonic clock from a fixed time and
//! can jump forward as a suspend does; a timer that sleeps on tokio's clock
//! until the fake one reads the time, and wakes on a jump as a
//! `TFD_TIMER_CANCEL_ON_SET` timerfd does; a cycle runner that answers from
//! a script and records when it was called; and `run_scenario`, which runs
//! the real loop over them while the events, suspends and policy edits of a
//! scenario happen at their times.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::mpsc::RecvTimeoutError;

use chrono::TimeZone;
use tokio::sync::watch;
use tokio::time::Instant;

use super::super::*;
use crate::plan::Plan;
use crate::runtime::RuntimeError;

/// A wall-clock time on the tests' day, 2026-11-26, in UTC.
pub(super) fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 26, h, m, s).unwrap()
}

/// The fake wall clock's reading when a scenario starts.
fn start_time() -> DateTime<Utc> {
    at(0, 30, 0)
}

/// How long after the start of a scenario the fake clock reads `wall`,
/// when no suspend came in between.
pub(super) fn by(wall: DateTime<Utc>) -> Duration {
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
pub(super) enum Answer {
    Done,
    Unreachable,
    Locked,
    /// Stuck on an engine that never answers, with a removal in flight:
    /// done only the stop's grace after a stop, as the real cycle is.
    Hung,
}

/// One call of the cycle runner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Call {
    /// The wall-clock time it began.
    pub(super) began: DateTime<Utc>,
    /// The schedule of the policy it was given.
    pub(super) schedule: String,
    /// Whether the stop was asked when it ended.
    pub(super) stopped: bool,
}

struct ScriptedCycles {
    clock: FakeClock,
    answers: RefCell<VecDeque<Answer>>,
    /// How long each call takes, on tokio's clock.
    takes: Duration,
    calls: Rc<RefCell<Vec<Call>>>,
}

impl Cycles for ScriptedCycles {
    async fn cycle(&self, policy: &Policy, shutdown: &Shutdown) -> Result<Report, AppError> {
        let began = self.clock.now();
        let answer = self.answers.borrow_mut().pop_front();
        let answer = answer.unwrap_or(Answer::Done);
        if answer == Answer::Hung {
            shutdown.wait_past(crate::execute::STOP_GRACE).await;
        } else {
            tokio::time::sleep(self.takes).await;
        }
        self.calls.borrow_mut().push(Call {
            began,
            schedule: policy.schedule.as_str().to_owned(),
            stopped: shutdown.is_stopped(),
        });
        match answer {
            Answer::Done | Answer::Hung => Ok(Report::new(
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
                denied: "run as root",
                source: "connection refused".into(),
            })),
            Answer::Locked => Err(AppError::Locked(PathBuf::from("/run/safeprune.lock"))),
        }
    }
}

/// Something that happens to the daemon, at a time on tokio's clock.
pub(super) enum Step {
    Send(Event),
    /// The machine sleeps this long: the wall clock jumps forward.
    Suspend(chrono::Duration),
    /// The policy file now reads this.
    Write(&'static str),
    /// The policy file is deleted.
    Remove,
    /// The sender of the events goes away.
    HangUp,
}

/// A daemon's life: its policy file, its cycle runner's script and what
/// happens to it when.
pub(super) struct Scenario {
    pub(super) policy: &'static str,
    pub(super) answers: Vec<Answer>,
    pub(super) takes: Duration,
    /// The jitter's random numbers, in turn; 0 once used up.
    pub(super) random: Vec<u64>,
    pub(super) steps: Vec<(Duration, Step)>,
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
pub(super) struct Ran {
    pub(super) result: Result<(), AppError>,
    pub(super) calls: Vec<Call>,
    /// The wall-clock time the daemon returned.
    pub(super) ended: DateTime<Utc>,
}

impl Ran {
    pub(super) fn began(&self) -> Vec<DateTime<Utc>> {
        self.calls.iter().map(|c| c.began).collect()
    }
}

/// Runs the daemon's loop through `scenario`, in paused time.
pub(super) async fn run_scenario(scenario: Scenario) -> Ran {
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
        let mut events = Some(events);
        for (offset, step) in scenario.steps {
            tokio::time::sleep_until(start + offset).await;
            match step {
                // The daemon may have ended already: then nobody listens.
                Step::Send(event) => {
                    if let Some(events) = &events {
                        let _ = events.send(event).await;
                    }
                }
                Step::Suspend(length) => suspend.send_modify(|total| *total += length),
                Step::Write(text) => std::fs::write(&path, text).unwrap(),
                Step::Remove => std::fs::remove_file(&path).unwrap(),
                Step::HangUp => events = None,
            }
        }
        // The sender lives on unless hung up: a closed channel would stop
        // the daemon.
        std::future::pending::<()>().await;
    };
    let (result, ended) = tokio::select! {
        ran = daemon => ran,
        () = steps => unreachable!("the steps never end"),
    };
    let calls = calls.borrow().clone();
    Ran {
        result,
        calls,
        ended,
    }
}

/// Runs `test` in paused time on a thread of its own, and fails if it has
/// not finished after 10 real seconds: a loop that spins keeps paused time
/// from advancing, so it would hang the test rather than fail it.
pub(super) fn spin_guarded<F, Fut>(test: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let (done, finished) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(test());
        let _ = done.send(());
    });
    match finished.recv_timeout(Duration::from_secs(10)) {
        Ok(()) => thread.join().unwrap(),
        // The test panicked: its own message says why.
        Err(RecvTimeoutError::Disconnected) => {
            std::panic::resume_unwind(thread.join().unwrap_err());
        }
        Err(RecvTimeoutError::Timeout) => panic!("still running after 10 s: the loop spins"),
    }
}
