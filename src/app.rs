//! The commands: load the policy, reach the runtime, plan, execute, report.
//!
//! Each failure is an [`AppError`] whose variant fixes the exit code of
//! DESIGN.md; `main` only maps and prints it.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::Utc;

use crate::cli::{Cli, Command, Output, RunArgs};
use crate::cycle::{CycleOptions, cycle};
use crate::explain;
use crate::inventory::Inventory;
use crate::plan::{Plan, plan};
use crate::policy::{Policy, PolicyError, PolicySource};
use crate::report::{Report, render_table};
use crate::runtime::{Chosen, Engine, Runtime, RuntimeError};

/// Why a command did not finish cleanly; each variant has its exit code.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot use {path}: {source}")]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("another safeprune run holds the lock {}: nothing done", .0.display())]
    Locked(PathBuf),
    #[error(
        "the plan deletes {planned} objects, more than the limit of {limit}: nothing removed \
         (review it with `safeprune plan`, then raise safety.max_deletions or pass --max-deletions)"
    )]
    OverLimit {
        planned: usize,
        limit: u64,
        /// The refused plan, as a dry-run report.
        report: Box<Report>,
    },
    #[error("{failed} removals failed (see the report)")]
    RemovalsFailed { failed: usize },
    #[error("daemon cannot wait for its schedule: {0}")]
    Daemon(std::io::Error),
}

impl AppError {
    /// The exit code of DESIGN.md for this error.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Policy(_) | Self::Usage(_) => 2,
            Self::Runtime(_) | Self::File { .. } | Self::Daemon(_) => 1,
            Self::RemovalsFailed { .. } => 3,
            Self::Locked(_) => 4,
            Self::OverLimit { .. } => 5,
        }
    }
}

/// Runs the command `cli` names.
///
/// # Errors
/// See [`AppError`]: each maps to an exit code.
pub async fn run(cli: &Cli) -> Result<(), AppError> {
    let source = PolicySource::resolve(
        cli.config.as_deref(),
        std::env::var("SAFEPRUNE_CONFIG").ok().as_deref(),
    );
    let policy = source.load()?;
    tracing::debug!(source = ?source, "policy loaded");
    match &cli.command {
        Command::Check => {
            print!("{}", policy.to_yaml());
            Ok(())
        }
        Command::Plan(args) => {
            let node = Node::connect(&policy).await?;
            let report = node.report(&node.plan(&policy), true, vec![]);
            emit(&report, args.output, cli.quiet);
            Ok(())
        }
        Command::Run(args) => run_once(&policy, args, cli.quiet).await,
        Command::Explain { object } => {
            let node = Node::connect(&policy).await?;
            let plan = node.plan(&policy);
            let found = explain::find(&plan, &node.inventory, object);
            if found.is_empty() {
                return Err(AppError::Usage(format!(
                    "no container, image, volume or network matches '{object}' on {}",
                    node.runtime.name()
                )));
            }
            let texts: Vec<String> = found.into_iter().map(explain::render).collect();
            print!("{}", texts.join("\n"));
            Ok(())
        }
        Command::Daemon => crate::daemon::run(source, policy).await,
    }
}

/// A connected runtime and its snapshot, taken once per command or cycle.
pub(crate) struct Node {
    pub(crate) runtime: Runtime,
    pub(crate) inventory: Inventory,
    pub(crate) name: String,
    pub(crate) started_at: chrono::DateTime<Utc>,
    /// Why this runtime: the policy named it, or what `auto` found.
    pub(crate) reason: String,
}

impl Node {
    pub(crate) async fn connect(policy: &Policy) -> Result<Self, AppError> {
        let started_at = Utc::now();
        let Chosen { runtime, reason } = Runtime::connect(&policy.runtime).await?;
        let inventory = runtime.inventory().await?;
        tracing::info!(
            runtime = runtime.name(),
            reason = %reason,
            containers = inventory.containers.len(),
            images = inventory.images.len(),
            volumes = inventory.volumes.len(),
            networks = inventory.networks.len(),
            "inventory taken"
        );
        Ok(Self {
            runtime,
            inventory,
            name: node_name(),
            started_at,
            reason,
        })
    }

    pub(crate) fn plan(&self, policy: &Policy) -> Plan {
        plan(&self.inventory, policy, self.started_at)
    }

    pub(crate) fn report(
        &self,
        plan: &Plan,
        dry_run: bool,
        outcomes: Vec<crate::report::Outcome>,
    ) -> Report {
        Report::new(
            self.runtime.name(),
            &self.name,
            self.started_at,
            dry_run,
            plan,
            outcomes,
        )
        .with_runtime_reason(&self.reason)
        .with_not_applicable(self.runtime.not_applicable())
    }
}

/// This machine's host name, as reports name the node.
pub(crate) fn node_name() -> String {
    hostname::get().map_or_else(|_| "unknown".into(), |h| h.to_string_lossy().into())
}

/// Prints the report on stdout: one JSON document, or the table unless quiet.
fn emit(report: &Report, output: Output, quiet: bool) {
    let text = match output {
        Output::Json => report.to_json(),
        Output::Table if quiet => return,
        Output::Table => render_table(report),
    };
    let mut stdout = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a non-zero exit.
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

async fn run_once(policy: &Policy, args: &RunArgs, quiet: bool) -> Result<(), AppError> {
    let stop = Arc::new(AtomicBool::new(false));
    let signals = tokio::spawn(watch_signals(Arc::clone(&stop)));
    let options = CycleOptions {
        dry_run: args.dry_run,
        max_deletions: args.max_deletions,
        progress: std::io::stderr().is_terminal() && !quiet,
    };
    let result = cycle(policy, &options, &stop).await;
    signals.abort();
    match result {
        Ok(report) => {
            emit(&report, args.output.output, quiet);
            match report.summary.failed {
                0 => Ok(()),
                failed => Err(AppError::RemovalsFailed { failed }),
            }
        }
        Err(AppError::OverLimit {
            planned,
            limit,
            report,
        }) => {
            // The plan that was refused, so the operator sees what it held.
            emit(&report, args.output.output, quiet);
            Err(AppError::OverLimit {
                planned,
                limit,
                report,
            })
        }
        Err(e) => Err(e),
    }
}

/// Sets `stop` on the first SIGINT or SIGTERM: removals in flight finish,
/// no new one starts, and the report is still written.
async fn watch_signals(stop: Arc<AtomicBool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot listen for signals: a signal will stop safeprune at once");
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    tracing::warn!("signal received: finishing the removals in flight");
    stop.store(true, Ordering::SeqCst);
}
