//! The `safeprune` binary: parse, set up logging, run, map errors to exit codes.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use safeprune::app;
use safeprune::cli::{Cli, Color, LogFormat};
use safeprune::error::exit;
use safeprune::output::{Chain, eprintln_lossy, io_words};
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(&cli);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let message = format!("cannot start the async runtime: {}", io_words(&e));
            let chain = format!("cannot start the async runtime: {}", Chain(&e));
            fatal(&cli, &message, &chain, exit::RUNTIME);
            return ExitCode::from(exit::RUNTIME);
        }
    };
    let result = runtime.block_on(app::run(&cli));
    // Dropping the runtime would wait for every blocking task to end; one
    // stuck on a hung disk (a history write) must not hold the exit, which
    // comes within 5 s of a stop signal (docs/design.md, "Signals").
    runtime.shutdown_timeout(Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            fatal(&cli, &e.brief(), &Chain(&e).to_string(), e.exit_code());
            ExitCode::from(e.exit_code())
        }
    }
}

/// Says on stderr why safeprune stops (docs/contracts.md, "stdout and
/// stderr"): one line, `safeprune: error: ` and `message`, what failed and
/// what to do; the whole `chain` of causes instead with `-v`. With
/// `--log-format json`, one JSON object shaped as a log line, whatever
/// `RUST_LOG` filters: `level` `ERROR`, and in `fields` the `message`,
/// the whole chain as `error` and the `exit_code`.
fn fatal(cli: &Cli, message: &str, chain: &str, code: u8) {
    let line = match cli.log_format {
        LogFormat::Json => serde_json::json!({
            "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "level": "ERROR",
            "fields": {
                "message": message,
                "error": chain,
                "exit_code": code,
            },
            "target": "safeprune",
        })
        .to_string(),
        LogFormat::Text if cli.verbose > 0 => format!("safeprune: error: {chain}"),
        LogFormat::Text => format!("safeprune: error: {message}"),
    };
    eprintln_lossy(&line);
}

/// Logs go to stderr: text for a terminal, JSON lines for collectors. The
/// level comes from `RUST_LOG`, else `-q` (errors), `-v` (info), `-vv` (debug),
/// else warnings (info for the daemon), and the progress of removals but
/// with `-q`.
fn init_tracing(cli: &Cli) {
    // The daemon tells journald when it will run next: info by default.
    let daemon = matches!(cli.command, safeprune::cli::Command::Daemon);
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) if daemon => "info",
        (false, 0) => "warn",
        (false, 1) => "info",
        _ => "debug",
    };
    // A long run's progress shows in cron mail and the journal at the
    // default level: its log lines (at most one every 10 s) are `info` of
    // their own target, which only `-q` hides.
    let progress = if cli.quiet {
        String::new()
    } else {
        format!(",{}=info", safeprune::cycle::PROGRESS_LOG_TARGET)
    };
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new(format!("safeprune={level},warn{progress}")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        // JSON is for collectors: never coloured.
        LogFormat::Json => builder.json().with_ansi(false).init(),
        LogFormat::Text => builder
            .with_target(false)
            .with_ansi(colours(cli.color))
            .init(),
    }
}

/// Whether text logs are coloured. `auto` colours only a terminal
/// (journald and cron mail want plain text), and not when `NO_COLOR` is set
/// and not empty (<https://no-color.org>); `always` colours even then, as
/// ripgrep's `--color always` does.
fn colours(color: Color) -> bool {
    match color {
        Color::Always => true,
        Color::Never => false,
        Color::Auto => {
            std::io::stderr().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        }
    }
}
