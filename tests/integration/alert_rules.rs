//! The Prometheus rules (`deploy/prometheus/rules.yaml`) against
//! the series safeprune really writes. Real runs on a private dockerd write
//! their textfile: one under disk pressure that leaves the image file
//! system above `high_percent`, one refused by `--max-deletions`, one whose
//! engine does not answer; and a daemon's cycle serves its `/metrics`. Every
//! series the rules' unit tests (`rules.test.yaml`) feed promtool must be
//! one of those, name and labels, and every `safeprune_` metric the rules
//! read must be written: a renamed metric or label fails here. Then
//! `promtool check rules` and `promtool test rules`: this test is where the
//! suite (scripts/test.sh) checks the rules.

use crate::util;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use util::daemon::Daemon;
use util::docker::PrivateDockerd;
use util::node::{Cli, Runtime};

/// A series: its name and its labels, sorted.
type Series = (String, BTreeMap<String, String>);

/// Labels a scrape adds: the target's, not safeprune's.
const TARGET_LABELS: [&str; 4] = ["instance", "job", "node", "cluster"];

fn prometheus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/prometheus")
}

/// `name{a="x",b="y"}` (as a textfile or promtool writes it) as a series.
fn parse_series(text: &str) -> Series {
    let Some((name, rest)) = text.split_once('{') else {
        return (text.trim().to_owned(), BTreeMap::new());
    };
    let body = rest.trim_end().strip_suffix('}').expect("a closing brace");
    let mut labels = BTreeMap::new();
    // Label values here hold no comma, quote or brace.
    for pair in body.split(',').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').expect("label=value");
        let value = value.trim().trim_matches('"');
        labels.insert(key.trim().to_owned(), value.to_owned());
    }
    (name.trim().to_owned(), labels)
}

/// The series of a metrics text, with their values.
fn samples(text: &str) -> BTreeMap<Series, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("series value");
            (parse_series(series), value.parse().expect("a number"))
        })
        .collect()
}

fn value(samples: &BTreeMap<Series, f64>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let key = (
        name.to_owned(),
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    samples.get(&key).copied()
}

/// Runs `safeprune args` on `cli`'s policy, asserts its exit code, and
/// returns the textfile it wrote.
fn run(cli: &Cli, args: &[&str], code: i32) -> BTreeMap<Series, f64> {
    let out = cli.run(args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "safeprune {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    samples(&std::fs::read_to_string(cli.path("safeprune.prom")).unwrap())
}

/// Runs `promtool` (scripts/deps.sh installs it) in deploy/prometheus.
fn promtool(args: &[&str]) {
    util::run_ok(
        Command::new("promtool")
            .args(args)
            .current_dir(prometheus_dir()),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_alert_rules_are_tested_on_the_series_real_runs_write() {
    let engine = PrivateDockerd::start().await;
    let base = engine.import_busybox_image("alerts/base:1", None).await;
    engine
        .import_busybox_image("alerts/old:1", Some("old"))
        .await;
    engine.run_to_exit("alerts-exited", &base, &[]).await;
    let mut written: BTreeSet<Series> = BTreeSet::new();

    // Under disk pressure no policy can relieve: the file system is more
    // than 2% full, and stays so after the run.
    let cli = Cli::new(
        &Runtime::Docker(engine.endpoint()),
        "containers: { min_age: \"0\" }\n\
         images: { min_age: \"0\", disk: { high_percent: 2, low_percent: 1 } }\n",
    );
    let pressed = run(&cli, &["run"], 0);
    let after = value(
        &pressed,
        "safeprune_last_run_image_fs_used_ratio",
        &[("when", "after")],
    )
    .expect("the file system after the run");
    let high = value(
        &pressed,
        "safeprune_last_run_image_fs_watermark_ratio",
        &[("level", "high")],
    );
    assert_eq!(high, Some(0.02));
    assert!(
        after > 0.02,
        "{after}: SafepruneImageFsStillHigh's condition"
    );
    let success = value(&pressed, "safeprune_last_success_timestamp_seconds", &[])
        .expect("a successful run's own start");
    assert_eq!(
        value(&pressed, "safeprune_last_run_timestamp_seconds", &[]),
        Some(success)
    );
    let deleted = value(
        &pressed,
        "safeprune_last_run_removals",
        &[("kind", "image"), ("result", "deleted")],
    );
    assert!(deleted >= Some(1.0), "{deleted:?}");
    written.extend(pressed.keys().cloned());

    // Refused: one more exited container (of an image of its own: the run
    // above may have removed the first), and a cap of none.
    let second = engine
        .import_busybox_image("alerts/base:2", Some("two"))
        .await;
    engine.run_to_exit("alerts-exited-2", &second, &[]).await;
    let refused = run(&cli, &["run", "--max-deletions", "0"], 5);
    assert_eq!(
        value(&refused, "safeprune_last_run_refused", &[]),
        Some(1.0)
    );
    assert_eq!(
        value(&refused, "safeprune_last_run_success", &[]),
        Some(0.0)
    );
    // The last success is carried forward, not lost.
    assert_eq!(
        value(&refused, "safeprune_last_success_timestamp_seconds", &[]),
        Some(success)
    );
    written.extend(refused.keys().cloned());

    // Failed: the engine's socket answers nothing.
    cli.rewrite(
        &Runtime::Docker(&format!("unix://{}", cli.path("nothing.sock").display())),
        "",
    );
    let failed = run(&cli, &["run"], 1);
    assert_eq!(value(&failed, "safeprune_last_run_success", &[]), Some(0.0));
    assert_eq!(value(&failed, "safeprune_last_run_refused", &[]), Some(0.0));
    assert_eq!(
        value(&failed, "safeprune_last_success_timestamp_seconds", &[]),
        Some(success)
    );
    written.extend(failed.keys().cloned());

    // A daemon's cycle, every two seconds: its period is in /metrics.
    let daemon_cli = Cli::new(
        &Runtime::Docker(engine.endpoint()),
        "schedule: \"*/2 * * * * *\"\nmetrics: { listen: \"127.0.0.1:0\" }\n",
    );
    let daemon = Daemon::start(&daemon_cli);
    daemon.wait_for("cycle finished", 1).await;
    let (status, served) = util::node::http_get(daemon.listening_on(), "/metrics").unwrap();
    assert_eq!(status, 200);
    let (code, _) = daemon.terminate();
    assert_eq!(code, Some(0));
    let served = samples(&served);
    assert_eq!(
        value(&served, "safeprune_schedule_period_seconds", &[]),
        Some(2.0)
    );
    written.extend(served.keys().cloned());

    assert_rules_read_what_runs_write(&written);
    promtool(&["check", "rules", "rules.yaml"]);
    promtool(&["test", "rules", "rules.test.yaml"]);
}

/// Every series `rules.test.yaml` feeds promtool is in `written`, but for
/// its scrape target's labels (`up` is Prometheus' own), and every
/// `safeprune_` metric `rules.yaml` reads is written.
fn assert_rules_read_what_runs_write(written: &BTreeSet<Series>) {
    let tests: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(prometheus_dir().join("rules.test.yaml")).unwrap(),
    )
    .unwrap();
    let mut fed = 0;
    for test in tests["tests"].as_sequence().unwrap() {
        for input in test["input_series"].as_sequence().unwrap() {
            let (name, mut labels) = parse_series(input["series"].as_str().unwrap());
            if name == "up" {
                continue;
            }
            labels.retain(|k, _| !TARGET_LABELS.contains(&k.as_str()));
            let series = (name, labels);
            assert!(
                written.contains(&series),
                "rules.test.yaml feeds {series:?}, which no real run wrote; written: {written:#?}"
            );
            fed += 1;
        }
    }
    assert!(fed > 20, "{fed}");

    // Every safeprune metric the rules read is written.
    let rules = std::fs::read_to_string(prometheus_dir().join("rules.yaml")).unwrap();
    let names: BTreeSet<&str> = written.iter().map(|(n, _)| n.as_str()).collect();
    let read: BTreeSet<&str> = rules
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("safeprune_") && !w.contains(':'))
        .collect();
    assert!(read.len() >= 10, "{read:?}");
    for name in &read {
        assert!(
            names.contains(name),
            "rules.yaml reads {name}: never written"
        );
    }
}
