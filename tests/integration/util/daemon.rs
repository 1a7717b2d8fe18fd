//! `safeprune daemon` as a test runs it: its log lines collected as they
//! come, waited for, and its end by SIGTERM.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::node::Cli;

/// A running `safeprune daemon` whose log lines are collected as they come.
pub struct Daemon {
    pub child: Child,
    pub log: Arc<Mutex<Vec<String>>>,
    /// The thread collecting the log; it ends at the daemon's exit.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Daemon {
    pub fn start(safeprune: &Cli) -> Self {
        Self::spawn(safeprune.command(&["daemon"]))
    }

    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let sink = Arc::clone(&log);
        let reader = std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                eprintln!("daemon: {line}");
                sink.lock().unwrap().push(line);
            }
        });
        Self {
            child,
            log,
            reader: Some(reader),
        }
    }

    pub fn count(&self, needle: &str) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Waits until `needle` has been logged `n` times in all.
    pub async fn wait_for(&self, needle: &str, n: usize) {
        let begun = Instant::now();
        while self.count(needle) < n {
            assert!(
                begun.elapsed() < Duration::from_secs(30),
                "'{needle}' logged {} times, not {n}:\n{}",
                self.count(needle),
                self.log.lock().unwrap().join("\n")
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The address the listener logged it serves.
    pub fn listening_on(&self) -> SocketAddr {
        let log = self.log.lock().unwrap();
        let line = log
            .iter()
            .find(|l| l.contains("serving /metrics and /healthz"))
            .expect("the listener's line");
        line.split_once("address=")
            .unwrap()
            .1
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// SIGTERM, then the exit code and how long it took. The log holds
    /// every line the daemon wrote before it exited.
    pub fn terminate(mut self) -> (Option<i32>, Duration) {
        self.signal("TERM");
        let begun = Instant::now();
        let status = self.child.wait().unwrap();
        let took = begun.elapsed();
        // The last lines may still be in the pipe: read to its end.
        if let Some(reader) = self.reader.take() {
            reader.join().unwrap();
        }
        (status.code(), took)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
