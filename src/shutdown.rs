//! Shutdown: a stop asked once, and the future every wait of a run selects
//! on (mini-redis's `src/shutdown.rs`).
//!
//! A flag read between steps is not seen while a step waits: a SIGTERM
//! during a re-check on a hung engine waited out the request's 120 s
//! deadline, past a pod's grace period and systemd's stop timeout (issue
//! 22). So each wait on the engine races [`Shutdown::wait`] (or, for what
//! was already sent, [`Shutdown::wait_past`] a grace) in a `tokio::select!`,
//! and [`Shutdown::is_stopped`] serves the checks between steps.
//!
//! It imports nothing of the crate, so any layer may take one.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

/// Whether a stop was asked, and when; clones share it. Whoever holds one
/// may ask for the stop ([`Shutdown::stop`]) or wait for it.
#[derive(Debug, Clone)]
pub struct Shutdown {
    /// When the stop was first asked, once it was. Every clone holds the
    /// sender, so it never closes under a waiter.
    stopped_at: Arc<watch::Sender<Option<Instant>>>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self {
            stopped_at: Arc::new(watch::Sender::new(None)),
        }
    }
}

impl Shutdown {
    /// A shutdown nobody has asked for yet.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks for the stop. Only the first call counts: a second signal does
    /// not move the grace's start.
    pub fn stop(&self) {
        self.stopped_at.send_if_modified(|at| {
            let first = at.is_none();
            if first {
                *at = Some(Instant::now());
            }
            first
        });
    }

    /// Whether the stop has been asked.
    #[must_use]
    pub fn is_stopped(&self) -> bool {
        self.stopped_at.borrow().is_some()
    }

    /// Completes once the stop has been asked: on its first poll if it was
    /// already, so a `biased` select can put it first.
    pub async fn wait(&self) {
        self.stopped_at().await;
    }

    /// Completes once `grace` has passed since the stop was asked: the
    /// bound of a wait that may finish what it began, as a removal already
    /// sent to the engine.
    pub async fn wait_past(&self, grace: Duration) {
        let deadline = self.stopped_at().await + grace;
        if Instant::now() < deadline {
            tokio::time::sleep_until(deadline).await;
        }
    }

    /// When the stop was asked, once it is.
    async fn stopped_at(&self) -> Instant {
        let mut stopped_at = self.stopped_at.subscribe();
        // `wait_for` looks at the current value first: a stop asked before
        // this call is not missed. It fails only once the sender is gone,
        // and `self` holds it.
        let at = stopped_at.wait_for(Option::is_some).await.map(|at| *at);
        match at {
            Ok(at) => at.unwrap_or_else(Instant::now),
            Err(_) => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn waits_end_when_the_stop_comes_and_the_grace_runs_from_the_first() {
        let shutdown = Shutdown::new();
        let begun = Instant::now();
        let clone = shutdown.clone();
        let waits = tokio::spawn(async move {
            clone.wait().await;
            let stopped = begun.elapsed();
            clone.wait_past(Duration::from_secs(2)).await;
            (stopped, begun.elapsed())
        });
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(!shutdown.is_stopped());
        shutdown.stop();
        tokio::time::sleep(Duration::from_secs(1)).await;
        // A second stop, a second later, changes nothing.
        shutdown.stop();
        let (stopped, graced) = waits.await.unwrap();
        assert_eq!(stopped, Duration::from_secs(5));
        assert_eq!(graced, Duration::from_secs(7));
        assert!(shutdown.is_stopped());
        // Asked already: a wait now ends at once.
        let now = Instant::now();
        shutdown.wait().await;
        assert_eq!(now.elapsed(), Duration::ZERO);
    }
}
