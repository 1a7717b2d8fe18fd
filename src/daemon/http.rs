//! The daemon's optional HTTP listener (`metrics.listen`): `/metrics` serves
//! the last cycle's figures, the very text the metrics textfile holds, for
//! a scraper that cannot read the node's files (a `DaemonSet`'s pod); and
//! `/healthz` answers 200 while the loop is alive, for a liveness probe.
//!
//! The loop is alive while it waits for its next cycle or runs one that
//! began less than [`STUCK_AFTER`] ago. A cycle running longer is stuck
//! (an engine that accepts and never answers): 503, so that kubelet
//! restarts the pod, whose SIGTERM still lets removals in flight finish.
//!
//! The listener faces a node's network: it answers GET and HEAD on two
//! paths and nothing else, holds at most [`MAX_CONNECTIONS`] connections,
//! and drops one that has not sent its headers within [`HEADER_TIMEOUT`]
//! or is still open after [`CONNECTION_TIMEOUT`].

use std::convert::Infallible;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// A cycle running this long is taken for stuck.
pub(crate) const STUCK_AFTER: Duration = Duration::from_secs(3600);
/// Connections served at once; more are closed at once.
const MAX_CONNECTIONS: usize = 32;
/// How long a client may take to send its request headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one connection may stay open, keep-alive included.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);
/// The Prometheus text exposition format.
const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the loop is doing, as `/healthz` judges it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for the next scheduled time (or a retry's backoff).
    Waiting,
    /// Running a cycle begun at this instant.
    Cycle(Instant),
    /// The loop has ended: the daemon is exiting.
    Stopped,
}

/// What the listener serves, shared with the loop that updates it.
#[derive(Debug)]
pub(crate) struct Exposition {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    metrics: String,
}

impl Exposition {
    /// Starts out waiting, serving `metrics` (the last run's textfile, if
    /// there is one) until the first cycle ends.
    pub(crate) fn new(metrics: String) -> Self {
        Self {
            state: Mutex::new(State {
                phase: Phase::Waiting,
                metrics,
            }),
        }
    }

    pub(crate) fn set_phase(&self, phase: Phase) {
        self.state().phase = phase;
    }

    pub(crate) fn set_metrics(&self, metrics: String) {
        self.state().metrics = metrics;
    }

    /// What `/metrics` serves now.
    pub(crate) fn metrics(&self) -> String {
        self.state().metrics.clone()
    }

    /// The state, also after a panic elsewhere while it was held: it holds
    /// plain values, each always whole.
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The answer to `method path`.
    fn respond(&self, method: &Method, path: &str) -> Response<Full<Bytes>> {
        if method != Method::GET && method != Method::HEAD {
            let mut response = reply(
                StatusCode::METHOD_NOT_ALLOWED,
                "only GET and HEAD\n".to_owned(),
            );
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            return response;
        }
        match path {
            "/metrics" => {
                let mut response = reply(StatusCode::OK, self.state().metrics.clone());
                response
                    .headers_mut()
                    .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_TYPE));
                response
            }
            "/healthz" => {
                let phase = self.state().phase;
                let (status, text) = health(phase, Instant::now());
                reply(status, text)
            }
            _ => reply(
                StatusCode::NOT_FOUND,
                "not found: safeprune serves /metrics and /healthz\n".to_owned(),
            ),
        }
    }
}

/// `/healthz`'s status and one line saying why.
pub(crate) fn health(phase: Phase, now: Instant) -> (StatusCode, String) {
    match phase {
        Phase::Waiting => (
            StatusCode::OK,
            "ok: waiting for the next cycle\n".to_owned(),
        ),
        Phase::Cycle(begun) => {
            let running = now.saturating_duration_since(begun).as_secs();
            if running < STUCK_AFTER.as_secs() {
                (
                    StatusCode::OK,
                    format!("ok: a cycle has been running for {running}s\n"),
                )
            } else {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "stuck: a cycle has been running for {running}s (limit {}s)\n",
                        STUCK_AFTER.as_secs()
                    ),
                )
            }
        }
        Phase::Stopped => (
            StatusCode::SERVICE_UNAVAILABLE,
            "stopping: the daemon's loop has ended\n".to_owned(),
        ),
    }
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .entry(CONTENT_TYPE)
        .or_insert(HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// Serves `exposition` on `listener` until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, exposition: Arc<Exposition>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _peer)) => stream,
            Err(e) => {
                // Out of file descriptors, most likely: pause, do not spin.
                tracing::warn!(error = %e, "metrics listener cannot accept a connection");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let exposition = Arc::clone(&exposition);
        tokio::spawn(async move {
            let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                let response = exposition.respond(request.method(), request.uri().path());
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            // A client that errs or times out only loses its own connection.
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
            drop(permit);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(response: &Response<Full<Bytes>>) -> String {
        use http_body_util::BodyExt as _;
        let full = response.body().clone();
        let bytes = futures_util::FutureExt::now_or_never(full.collect())
            .expect("a full body is ready")
            .expect("infallible")
            .to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test(start_paused = true)]
    async fn healthz_is_ok_while_waiting_or_in_a_young_cycle() {
        let begun = Instant::now();
        assert_eq!(health(Phase::Waiting, begun).0, StatusCode::OK);
        let (status, text) = health(Phase::Cycle(begun), begun + Duration::from_secs(59));
        assert_eq!(status, StatusCode::OK);
        assert_eq!(text, "ok: a cycle has been running for 59s\n");
    }

    #[tokio::test(start_paused = true)]
    async fn healthz_fails_once_a_cycle_is_stuck_or_the_loop_ended() {
        let begun = Instant::now();
        let (status, text) = health(Phase::Cycle(begun), begun + STUCK_AFTER);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            text,
            "stuck: a cycle has been running for 3600s (limit 3600s)\n"
        );
        assert_eq!(
            health(Phase::Stopped, begun).0,
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_serve_the_latest_text_in_prometheus_format() {
        let exposition = Exposition::new("# from the textfile\n".to_owned());
        let response = exposition.respond(&Method::GET, "/metrics");
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.headers()[CONTENT_TYPE], METRICS_TYPE);
        assert_eq!(body(&response), "# from the textfile\n");
        exposition.set_metrics("safeprune_last_run_success 1\n".to_owned());
        let response = exposition.respond(&Method::GET, "/metrics");
        assert_eq!(body(&response), "safeprune_last_run_success 1\n");
    }

    #[tokio::test(start_paused = true)]
    async fn the_loop_phase_decides_healthz() {
        let exposition = Exposition::new(String::new());
        assert_eq!(
            exposition.respond(&Method::GET, "/healthz").status(),
            StatusCode::OK
        );
        exposition.set_phase(Phase::Cycle(Instant::now()));
        tokio::time::advance(STUCK_AFTER).await;
        assert_eq!(
            exposition.respond(&Method::HEAD, "/healthz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        exposition.set_phase(Phase::Stopped);
        assert_eq!(
            exposition.respond(&Method::GET, "/healthz").status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }

    #[tokio::test(start_paused = true)]
    async fn other_paths_and_methods_are_refused() {
        let exposition = Exposition::new(String::new());
        assert_eq!(
            exposition.respond(&Method::GET, "/").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            exposition.respond(&Method::GET, "/metrics/../etc").status(),
            StatusCode::NOT_FOUND
        );
        let post = exposition.respond(&Method::POST, "/metrics");
        assert_eq!(post.status(), StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(post.headers()[ALLOW], "GET, HEAD");
    }
}
