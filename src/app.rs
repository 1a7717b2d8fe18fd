//! The commands: load the policy, reach the runtime, plan, execute, report.
//!
//! Each failure is an [`AppError`] whose variant fixes the exit code of
//! docs/contracts.md; `main` only maps and prints it.

mod check;

use std::io::IsTerminal;

use crate::cli::{
    Cli, Command, CompareWith, ExplainArgs, ExplainOutput, ObjectKind, Only, Output, PlanArgs,
    RunArgs,
};
use crate::cycle::{CycleOptions, Node, cycle};
use crate::error::AppError;
use crate::explain;
use crate::inventory::{Kind, RuntimeKind};
use crate::manual;
use crate::output::{eprintln_lossy, print_lossy, stdout_columns};
use crate::pace::{NoSignal, Signal, StallCheck, ceiling_only_note};
use crate::plan::Action;
use crate::policy::{Policy, PolicySource};
use crate::report::{Filter, Report, render_table, render_table_fitted, write_atomically};
use crate::reviewed::SavedPlan;
use crate::runtime::Engine;
use crate::shutdown::Shutdown;

/// The man page's date, the package's (build.rs reads it from
/// debian/changelog): `safeprune man` prints the package's page.
const MAN_DATE: &str = env!("SAFEPRUNE_MAN_DATE");

/// Runs the command `cli` names.
///
/// # Errors
/// See [`AppError`]: each maps to an exit code.
pub async fn run(cli: &Cli) -> Result<(), AppError> {
    // What shells and man read needs no policy and no engine: a node
    // without /etc/safeprune, or with a broken policy, gets them too.
    match &cli.command {
        Command::Completions { shell } => {
            print_lossy(&manual::completion(*shell));
            Ok(())
        }
        Command::Man => {
            print_lossy(&manual::man_page(MAN_DATE));
            Ok(())
        }
        _ => with_policy(cli).await,
    }
}

/// The commands that load the policy first.
async fn with_policy(cli: &Cli) -> Result<(), AppError> {
    let source = PolicySource::resolve(
        cli.config.as_deref(),
        std::env::var("SAFEPRUNE_CONFIG").ok().as_deref(),
    );
    let policy = source.load()?;
    tracing::debug!(source = ?source, "policy loaded");
    let kubelet = policy.kubelet_summary();
    if let Some(summary) = &kubelet {
        tracing::info!(%summary, "disk watermarks from kubelet's configuration");
    }
    // `check` and `plan` say what they derived from kubelet's file, on
    // stderr: stdout is the policy or the report.
    let say_kubelet = || {
        if let Some(summary) = kubelet.as_ref().filter(|_| !cli.quiet) {
            eprintln_lossy(&format!("safeprune: {summary}"));
        }
    };
    match &cli.command {
        Command::Check(args) => {
            // stdout holds only the policy, so it can be saved and diffed.
            if !cli.quiet {
                eprintln_lossy(&format!("safeprune: policy from {source}"));
            }
            say_kubelet();
            if args.offline {
                say_pace(&policy, cli.quiet, false).await;
                print_lossy(&policy.to_yaml());
                return Ok(());
            }
            let pace_ok = say_pace(&policy, cli.quiet, true).await;
            print_lossy(&policy.to_yaml());
            check::node(&policy, cli.quiet, pace_ok).await
        }
        Command::Plan(args) => {
            say_kubelet();
            say_pace(&policy, cli.quiet, false).await;
            plan(&policy, args, cli.quiet).await
        }
        Command::Run(args) => run_once(&policy, args, cli.quiet).await,
        Command::Explain(args) => explain_object(&policy, args).await,
        // Boxed: the daemon's future holds a whole cycle's.
        Command::Daemon => Box::pin(crate::daemon::run(source, policy)).await,
        // Printed by `run`, before any policy is read.
        Command::Completions { .. } | Command::Man => Ok(()),
    }
}

/// `plan`: decide, save the whole plan when asked, and list it (or its
/// comparison) as `--only` and `--kind` say.
async fn plan(policy: &Policy, args: &PlanArgs, quiet: bool) -> Result<(), AppError> {
    let compared = args.compare.map(compared_command);
    // A command of another runtime than the policy names is
    // refused before anything is contacted (exit 2's promise).
    if let (Some(command), Some(runtime)) = (compared, policy.runtime.kind.only()) {
        same_runtime(command, runtime)?;
    }
    let node = Node::connect(policy, false).await?;
    // With `auto` the runtime is known only now: refused before
    // `--save` writes anything.
    if let Some(command) = compared {
        same_runtime(command, node.runtime.kind())?;
    }
    let plan = node.plan(policy);
    if let Some(path) = &args.save {
        let saved = SavedPlan::new(
            &plan,
            &node.name,
            node.runtime.kind(),
            policy,
            node.started_at,
        );
        write_atomically(path, saved.to_json().as_bytes()).map_err(|source| AppError::File {
            path: path.clone(),
            source,
        })?;
        tracing::info!(path = %path.display(), deletions = plan.deletion_count(), "plan saved: review it, then `safeprune run --plan` it");
    }
    if let Some(command) = compared {
        // Shared layers count once in what each side frees.
        let holds = node.runtime.image_holds(&node.inventory.images).await;
        let listed = Listed {
            filter: listing(args),
            output: args.output.output,
            quiet,
        };
        compare(&node, &plan, &holds, command, &listed);
        return Ok(());
    }
    // `--save` above wrote the whole plan; only the listing is filtered.
    let report = node
        .report(policy, &plan, true, vec![])
        .listing_only(listing(args));
    emit(&report, args.output.output, quiet);
    Ok(())
}

/// `explain`: the decisions for the objects `args.object` names, as text
/// blocks or one JSON document.
async fn explain_object(policy: &Policy, args: &ExplainArgs) -> Result<(), AppError> {
    let object = &args.object;
    let node = Node::connect(policy, false).await?;
    let plan = node.plan(policy);
    let found = explain::find(&plan, &node.inventory, object);
    if found.is_empty() {
        return Err(AppError::NotFound {
            query: object.clone(),
            runtime: node.runtime.kind().as_str(),
        });
    }
    let text = match args.output {
        ExplainOutput::Json => explain::to_json(
            &found,
            &node.inventory,
            object,
            explain::Context {
                runtime: node.runtime.kind().as_str(),
                node: &node.name,
                started_at: node.started_at,
            },
        ),
        ExplainOutput::Text => found
            .into_iter()
            .map(|d| explain::render(d, &node.inventory, object))
            .collect::<Vec<String>>()
            .join("\n"),
    };
    print_lossy(&text);
    Ok(())
}

/// The command `--compare` names.
fn compared_command(with: CompareWith) -> crate::report::compare::Command {
    use crate::report::compare::Command as Compared;
    match with {
        CompareWith::DockerPrune => Compared::DockerPrune,
        CompareWith::DockerPruneVolumes => Compared::DockerPruneVolumes,
        CompareWith::NerdctlPrune => Compared::NerdctlPrune,
        CompareWith::CrictlPrune => Compared::CrictlPrune,
    }
}

/// Refuses (exit 2) a comparison with a command of another runtime than
/// `runtime`.
fn same_runtime(
    command: crate::report::compare::Command,
    runtime: RuntimeKind,
) -> Result<(), AppError> {
    let runtimes = command.runtimes();
    if runtimes.contains(&runtime) {
        return Ok(());
    }
    let names: Vec<&str> = runtimes.iter().map(|r| r.as_str()).collect();
    Err(AppError::Usage(format!(
        "--compare {} models a {} node; this one runs {runtime} (nothing written, nothing removed)",
        command.name(),
        names.join(" or "),
    )))
}

/// What `plan --only` and `--kind` let through to the listing.
fn listing(args: &PlanArgs) -> Filter {
    let kind = |k: &ObjectKind| match k {
        ObjectKind::Container => Kind::Container,
        ObjectKind::Image => Kind::Image,
        ObjectKind::Volume => Kind::Volume,
        ObjectKind::Network => Kind::Network,
        ObjectKind::BuildCache => Kind::BuildCache,
    };
    Filter {
        only: args.only.map(|only| match only {
            Only::Delete => Action::Delete,
            Only::Keep => Action::Keep,
        }),
        kinds: (!args.kind.is_empty()).then(|| args.kind.iter().map(kind).collect()),
    }
}

/// How `plan` lists what it found: which objects, in which format.
struct Listed {
    filter: Filter,
    output: Output,
    quiet: bool,
}

/// `plan --compare`: the plan beside what `command` would remove now.
fn compare(
    node: &Node,
    plan: &crate::plan::Plan,
    holds: &crate::inventory::ImageHolds,
    command: crate::report::compare::Command,
    listed: &Listed,
) {
    use crate::report::compare::Comparison;
    let comparison = Comparison::new(
        command,
        plan,
        &command.verdicts(&node.inventory),
        &node.name,
        node.runtime.kind().as_str(),
        node.started_at,
    )
    .marking_unpullable(&node.inventory)
    .counting_holds(holds)
    .listing_only(listed.filter.clone());
    match listed.output {
        Output::Json => print_lossy(&comparison.to_json()),
        Output::Table if listed.quiet => {}
        Output::Table => print_lossy(&match stdout_columns() {
            Some(width) => comparison.to_table_fitted(width),
            None => comparison.to_table(),
        }),
    }
}

/// Prints the report on stdout: one JSON document, or the table unless
/// quiet, fitted to the terminal when stdout is one.
fn emit(report: &Report, output: Output, quiet: bool) {
    let text = match output {
        Output::Json => report.to_json(),
        Output::Table if quiet => return,
        Output::Table => match stdout_columns() {
            Some(width) => render_table_fitted(report, width),
            None => render_table(report),
        },
    };
    print_lossy(&text);
}

/// Says on stderr whose stall `safety.pace` would hold a run to, found as
/// a run finds it, and whether this node can pace as the policy asks
/// (`false`: `node` without PSI, or a named cgroup that cannot be read).
/// `checking` (`check`, not `--offline`) measures the workloads' stall now
/// as a run does before its first removal, says where `auto` found no pods'
/// cgroup (a plain Docker host: no fault, and `plan` need not say it every
/// time), and says a failure even under `-q`.
async fn say_pace(policy: &Policy, quiet: bool, checking: bool) -> bool {
    let Some(pace) = &policy.safety.pace else {
        return true;
    };
    let say = |line: &str| eprintln_lossy(&format!("safeprune: {line}"));
    if let Some(note) = ceiling_only_note(pace).filter(|_| !quiet) {
        say(&format!("safety.pace: {note}"));
    }
    match Signal::find(std::path::Path::new("/"), &pace.workloads_cgroup) {
        Ok(signal) => {
            if !quiet {
                let mut stall = StallCheck::new(pace, &signal);
                if checking {
                    stall.measure(&signal).await;
                }
                say(&stall.to_string());
            }
            true
        }
        Err(no @ NoSignal::NoPodsCgroup(_)) => {
            if checking && !quiet {
                say(&no.for_check());
            }
            true
        }
        Err(no) => {
            if checking || !quiet {
                say(&no.for_check());
            }
            false
        }
    }
}

async fn run_once(policy: &Policy, args: &RunArgs, quiet: bool) -> Result<(), AppError> {
    let shutdown = Shutdown::new();
    let signals = stop_on_signals(&shutdown);
    // A plan that cannot be read is refused before anything is contacted.
    let reviewed = match &args.plan {
        Some(path) => Some(
            SavedPlan::read(path)
                .map(|saved| (path.clone(), saved))
                .map_err(|why| {
                    AppError::Usage(format!("cannot use the plan {}: {why}", path.display()))
                })?,
        ),
        None => None,
    };
    let options = CycleOptions {
        dry_run: args.dry_run,
        max_deletions: args.max_deletions,
        no_pace: args.no_pace,
        progress_line: std::io::stderr().is_terminal() && !quiet,
        // As `docker system prune` asks without `-f`; never where no one
        // can answer (cron, systemd, a pipe).
        confirm: !args.yes
            && !args.dry_run
            && std::io::stdin().is_terminal()
            && std::io::stderr().is_terminal(),
        reviewed,
        ..CycleOptions::default()
    };
    let result = cycle(policy, &options, &shutdown).await;
    if let Some(signals) = signals {
        signals.abort();
    }
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
        // Exit 0: the person asked said no (or stopped it); nothing was
        // removed, written or printed on stdout.
        Err(e @ AppError::NotConfirmed(_)) => {
            eprintln_lossy(&format!("safeprune: {e}"));
            Ok(())
        }
        // Exit 0 (docs/contracts.md), and the metrics already say it failed.
        Err(e @ AppError::Stopped { .. }) => {
            tracing::warn!(error = %e, "run cut short");
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Asks `shutdown` to stop on the first SIGINT or SIGTERM: no new removal
/// starts, every wait on the engine ends within the stop's grace, and the
/// report files are still written. The handlers are installed before this
/// returns, so a signal while the engine is reached is never lost (nor
/// kills safeprune by its default action, leaving no metrics). `None` when
/// they cannot be installed.
fn stop_on_signals(shutdown: &Shutdown) -> Option<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot listen for signals: a signal will stop safeprune at once");
        return None;
    };
    let shutdown = shutdown.clone();
    Some(tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::warn!(
            grace_seconds = crate::execute::STOP_GRACE.as_secs(),
            "signal received: stopping; removals in flight get the grace to answer"
        );
        shutdown.stop();
    }))
}
