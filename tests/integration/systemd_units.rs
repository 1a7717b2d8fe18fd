//! The systemd units against the rest of safeprune: their commands parse
//! with the real CLI, they open the default policy's lock file, the two
//! services share one sandbox, and the timer keeps the default schedule.
//!
//! `scripts/test.sh` checks the units themselves with `systemd-analyze
//! verify` and `systemd-analyze security`; this checks what systemd cannot
//! know about safeprune.

use std::collections::BTreeMap;
use std::fs;

use clap::Parser;
use safeprune::cli::{Cli, Command};
use safeprune::policy::Policy;

/// A unit's `[section]` settings in file order, comments and blank lines out.
fn settings(unit: &str, section: &str) -> Vec<(String, String)> {
    let path = format!("systemd/{unit}");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut current = "";
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name;
        } else if current == section {
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("{path}: not a setting: {line}"));
            out.push((key.to_owned(), value.to_owned()));
        }
    }
    out
}

/// The one value of `key`, which must be set exactly once.
fn value<'a>(settings: &'a [(String, String)], key: &str) -> &'a str {
    let found: Vec<&str> = settings
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(found.len(), 1, "{key} set {} times", found.len());
    found[0]
}

/// `ExecStart=` as safeprune's CLI reads it.
fn parse_exec_start(unit: &str) -> Cli {
    let service = settings(unit, "Service");
    let line = value(&service, "ExecStart");
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/bin/safeprune"), "{unit}");
    Cli::try_parse_from(std::iter::once("safeprune").chain(words))
        .unwrap_or_else(|e| panic!("{unit}: ExecStart={line}: {e}"))
}

#[test]
fn the_oneshot_service_runs_quietly_and_for_real() {
    let cli = parse_exec_start("safeprune.service");
    // Quiet: a timer's or cron's run says nothing unless something failed.
    assert!(cli.quiet);
    assert!(
        matches!(&cli.command, Command::Run(args) if !args.dry_run && args.max_deletions.is_none()),
        "{:?}",
        cli.command
    );
    let service = settings("safeprune.service", "Service");
    assert_eq!(value(&service, "Type"), "oneshot");
    // Exit 4 (another run holds the lock) is not a failed unit.
    assert_eq!(value(&service, "SuccessExitStatus"), "4");
}

#[test]
fn the_daemon_service_runs_the_daemon_and_reloads_with_sighup() {
    let cli = parse_exec_start("safeprune-daemon.service");
    assert!(matches!(cli.command, Command::Daemon), "{:?}", cli.command);
    let service = settings("safeprune-daemon.service", "Service");
    assert_eq!(value(&service, "ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(value(&service, "Restart"), "on-failure");
    // A policy error (exit 2) is not mended by restarting.
    assert_eq!(value(&service, "RestartPreventExitStatus"), "2");
}

#[test]
fn both_services_create_and_open_the_default_lock_file() {
    let lock = Policy::builtin().lock_file;
    let lock = lock.to_str().unwrap();
    for unit in ["safeprune.service", "safeprune-daemon.service"] {
        let service = settings(unit, "Service");
        assert_eq!(
            value(&service, "ExecStartPre"),
            format!("+/usr/bin/touch {lock}"),
            "{unit}"
        );
        let writable = value(&service, "ReadWritePaths");
        assert!(
            writable.split_whitespace().any(|p| p == format!("-{lock}")),
            "{unit}: ReadWritePaths={writable} lacks the lock {lock}"
        );
    }
}

/// The settings that differ by role; everything else is the sandbox.
const ROLE: [&str; 9] = [
    "Type",
    "ExecStart",
    "ExecReload",
    "Restart",
    "RestartSec",
    "RestartPreventExitStatus",
    "SuccessExitStatus",
    "Nice",
    "IOSchedulingClass",
];

#[test]
fn both_services_share_one_sandbox() {
    let sandbox = |unit| -> BTreeMap<String, Vec<String>> {
        let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (k, v) in settings(unit, "Service") {
            if !ROLE.contains(&k.as_str()) {
                map.entry(k).or_default().push(v);
            }
        }
        map
    };
    let oneshot = sandbox("safeprune.service");
    assert_eq!(oneshot, sandbox("safeprune-daemon.service"));
    // The sandbox is there at all: the properties docs/operations.md names.
    for key in [
        "ProtectSystem",
        "CapabilityBoundingSet",
        "RestrictAddressFamilies",
        "SystemCallFilter",
        "PrivateNetwork",
    ] {
        assert!(oneshot.contains_key(key), "no {key}");
    }
    assert_eq!(oneshot["CapabilityBoundingSet"], [""]);
    assert_eq!(oneshot["RestrictAddressFamilies"], ["AF_UNIX"]);
}

#[test]
fn the_timer_fires_on_the_default_policy_schedule() {
    // config/policy.yaml is the documented default; the built-in one equals it.
    let policy = fs::read_to_string("config/policy.yaml").unwrap();
    let schedule = policy
        .lines()
        .find_map(|l| l.strip_prefix("schedule:"))
        .map(|s| s.split('#').next().unwrap().trim().trim_matches('"'))
        .expect("config/policy.yaml sets schedule");
    let timer = settings("safeprune.timer", "Timer");
    // One pair, kept by hand: change the default schedule and this timer
    // (and the cron lines of README.md and docs/operations.md) together.
    assert_eq!(
        (schedule, value(&timer, "OnCalendar")),
        ("0 5 * * 4", "Thu *-*-* 05:00:00")
    );
    assert_eq!(value(&timer, "Persistent"), "true");
    let install = settings("safeprune.timer", "Install");
    assert_eq!(value(&install, "WantedBy"), "timers.target");
}
